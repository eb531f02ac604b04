"""Benchmark: every geometry measure (ρ, π, RankMe, α-ReQ, alignment, uniformity) on N × D float32.

embedscope.metrics.geometry_report (one blocked float64 pass: D×D Gram via b.T @ b (BLAS syrk), per-class sums)
against a naive scipy/sklearn implementation of the same definitions, as the reference code does
it (TruncatedSVD(D-1, n_iter=7, random_state=42) for the spectrum, cdist per class for π_intra and
the alignment, cdist of the class means for π_inter, PCA for the covariance eigenvalues, the same
sampled pairs for the uniformity), run side by side on the same data; prints both times, the
ratio and the largest difference between the two sets of values.

    python benchmarks/geometry.py            # 120,000 x 512, 1,000 classes
    python benchmarks/geometry.py --quick    # 12,000 x 128, 100 classes
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np


def make_data(n, d, c, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    scale = (np.arange(1, d + 1) ** -0.6).astype(np.float32)
    X = rng.standard_normal((c, d), dtype=np.float32)[y] * scale * 2
    X += rng.standard_normal((n, d), dtype=np.float32) * scale
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, y


def naive(X, y, max_pairs, seed):
    from scipy.spatial.distance import cdist
    from scipy.stats import entropy
    from sklearn.decomposition import PCA, TruncatedSVD
    from sklearn.preprocessing import normalize

    n, d = X.shape
    out = {}
    s = TruncatedSVD(n_components=d - 1, n_iter=7, random_state=42).fit(X).singular_values_
    t = s[1:]
    out["rho"] = entropy(np.ones(len(t)) / len(t), t / t.sum())
    out["rho_all"] = entropy(np.ones(len(s)) / len(s), s / s.sum())
    from scipy.linalg import svdvals

    sf = svdvals(X)  # RankMe uses the full spectrum
    p = sf / sf.sum() + 1e-7
    out["effective_rank"] = float(np.exp(-np.sum(p * np.log(p))))
    lam = PCA(svd_solver="full").fit(X).explained_variance_
    k = np.arange(1, lam.size + 1)
    out["alpha"] = -np.polyfit(np.log(k), np.log(lam), 1)[0]
    intra, coms, al_sum, al_cnt = [], [], 0.0, 0
    U = normalize(X)
    for c in np.unique(y):
        loc = np.flatnonzero(y == c)
        D = cdist(X[loc], X[loc], "cosine")
        intra.append(D.sum() / (len(D) ** 2 - len(D)))
        al_sum += cdist(U[loc], U[loc], "sqeuclidean").sum()
        al_cnt += len(loc) ** 2 - len(loc)
        coms.append(normalize(X[loc].mean(axis=0).reshape(1, -1)).reshape(-1))
    Dm = cdist(np.array(coms), np.array(coms), "cosine")
    out["pi_intra"] = float(np.mean(intra))
    out["pi_inter"] = Dm.sum() / (len(Dm) ** 2 - len(Dm))
    out["pi_ratio"] = out["pi_intra"] / out["pi_inter"]
    out["alignment"] = al_sum / al_cnt
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, size=max_pairs)
    j = rng.integers(0, n - 1, size=max_pairs)
    j += j >= i
    d2 = np.sum((U[i].astype(np.float64) - U[j]) ** 2, axis=1)
    out["uniformity"] = float(np.log(np.mean(np.exp(-2 * d2))))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small smoke run (12,000 x 128)")
    ap.add_argument("--n", type=int)
    ap.add_argument("--d", type=int)
    ap.add_argument("--classes", type=int)
    ap.add_argument("--repeats", type=int, default=3, help="embedscope runs (best is reported)")
    ap.add_argument("--skip-naive", action="store_true")
    args = ap.parse_args()
    n = args.n or (12_000 if args.quick else 120_000)
    d = args.d or (128 if args.quick else 512)
    c = args.classes or (100 if args.quick else 1000)
    max_pairs, seed = 200_000, 0

    from embedscope.metrics import geometry_report

    X, y = make_data(n, d, c)
    print(f"geometry measures on {n} x {d} float32, {c} classes ({platform.processor() or platform.machine()})")
    geometry_report(X[:2000], y[:2000])  # warm-up (imports, BLAS threads)
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        ours = geometry_report(X, y, n_components=d - 1, max_pairs=max_pairs, seed=seed)
        times.append(time.perf_counter() - t0)
    t_ours = min(times)
    print(f"embedscope geometry_report: {t_ours:8.2f} s  (best of {args.repeats}: "
          + ", ".join(f"{t:.2f}" for t in times) + ")")
    if args.skip_naive:
        return
    t0 = time.perf_counter()
    ref = naive(X, y, max_pairs, seed)
    t_naive = time.perf_counter() - t0
    print(f"naive scipy/sklearn:        {t_naive:8.2f} s")
    print(f"speed-up:                   {t_naive / t_ours:8.1f} x")
    print(f"\n{'measure':<16}{'embedscope':>14}{'naive':>14}{'rel. diff':>12}")
    for k in ("rho", "rho_all", "pi_intra", "pi_inter", "pi_ratio", "effective_rank", "alpha",
              "alignment", "uniformity"):
        a, b = ours[k], ref[k]
        print(f"{k:<16}{a:14.8f}{b:14.8f}{abs(a - b) / max(abs(b), 1e-300):12.1e}")
    print("(naive values are float32 where sklearn/scipy compute in float32; ρ here with "
          "n_components=D-1 to match TruncatedSVD)")


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
