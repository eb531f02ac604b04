"""Benchmark: yoked t-SNE vs openTSNE, and nearest_same_different vs a faiss kNN pass (docs/methods.md §10).

1. yoked t-SNE of 2 x N points (default N = 10,000) vs one openTSNE run of N points, same iterations
   (250 early exaggeration + 500), same gradient method (openTSNE's "auto": FFT from 10,000 points),
   same threads. Target: yoked <= 3x openTSNE.
2. nearest_same_different at 60,000 x 128 (cosine) vs the retrieval kNN pass: faiss IndexFlatIP
   exact search of all points with depth k = the largest class size (and
   embedscope.metrics.knn_search). Target: <= 1.5x.
3. (--threads) the price of maps that do not depend on the thread count: openTSNE's affinities
   with its Annoy trees built on n_jobs threads vs embedscope's tsne_affinities (trees on one
   thread), and embedscope's single_tsne with n_jobs = 1 vs n_jobs (same map, checked bit for bit),
   at N = 2,000, 6,000 and 20,000 (32-d, FFT gradient at 20,000); best of --repeats runs.

Run: .venv/bin/python benchmarks/tsne.py [--quick] [--threads [--n-jobs J]]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np


def clustered(n, d, n_classes, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    centres = rng.normal(size=(n_classes, d))
    X = centres[y] * 1.5 + rng.normal(size=(n, d))
    return X.astype(np.float32), y


def timed(fn, *a, **kw):
    t = time.perf_counter()
    out = fn(*a, **kw)
    return time.perf_counter() - t, out


def bench_tsne(n, n_jobs):
    from openTSNE import TSNE

    from embedscope.tsne import yoked_tsne

    X_a, y = clustered(n, 64, 50, seed=0)
    rng = np.random.default_rng(1)
    X_b = np.tanh(X_a @ rng.normal(size=(64, 48)).astype(np.float32) / 8) + 0.1 * rng.normal(size=(n, 48))
    t_ref, emb = timed(lambda: TSNE(random_state=0, n_jobs=n_jobs).fit(X_a))
    t_yoke, (Y_a, Y_b, info) = timed(yoked_tsne, X_a, X_b, seed=0, n_jobs=n_jobs, return_info=True)
    print(f"\n== t-SNE, N = {n} (x 2 for yoked), 64-d / 48-d, n_jobs = {n_jobs}")
    print(f"{'':34s}{'time [s]':>10s}{'KL':>10s}")
    print(f"{'openTSNE TSNE().fit (1 map)':34s}{t_ref:10.2f}{emb.kl_divergence:10.4f}")
    print(f"{'embedscope yoked_tsne (2 maps)':34s}{t_yoke:10.2f}{info['kl_a']:10.4f}  (map b KL {info['kl_b']:.4f},"
          f" alpha*N = {info['alpha_times_n']:g}, gradient {info['negative_gradient_method']})")
    ratio = t_yoke / t_ref
    print(f"ratio yoked / openTSNE = {ratio:.2f}  (target <= 3)  {'OK' if ratio <= 3 else 'SLOWER THAN TARGET'}")
    return ratio


def bench_scatter(n, d):
    import faiss

    from embedscope.metrics import nearest_same_different

    X, y = clustered(n, d, 100, seed=2)
    X = X + 2.5 * np.random.default_rng(3).normal(size=X.shape).astype(np.float32)  # overlapping classes
    k = int(np.bincount(y).max())
    nearest_same_different(X[:500], y[:500])  # warm-up (BLAS threads, page faults) for both
    faiss.IndexFlatIP(d).search(X[:10], 5)
    t_ours, (s_same, s_diff) = timed(nearest_same_different, X, y, metric="cosine")

    def faiss_pass():
        Z = X / np.linalg.norm(X, axis=1, keepdims=True)
        index = faiss.IndexFlatIP(d)
        index.add(Z)
        return index.search(Z, k + 1)  # +1: the query finds itself

    t_faiss, (_, idx) = timed(faiss_pass)
    # agreement: the first neighbour other than the query, same class or not
    nn = np.where(idx[:, 0] == np.arange(n), idx[:, 1], idx[:, 0])
    r1_faiss = float(np.mean(y[nn] == y))
    r1_ours = float(np.mean(s_diff < s_same))
    print(f"\n== nearest same/different, N = {n}, D = {d}, 100 classes, kNN depth k = {k} (largest class)")
    print(f"{'':44s}{'time [s]':>10s}{'R@1':>9s}")
    print(f"{'faiss IndexFlatIP search (k + 1)':44s}{t_faiss:10.2f}{r1_faiss:9.4f}")
    rows = [t_faiss]
    from embedscope.metrics import knn_search

    t_knn, _ = timed(knn_search, X, k=k, metric="cosine", exclude_self=True)
    print(f"{'embedscope.metrics.knn_search':44s}{t_knn:10.2f}")
    rows.append(t_knn)
    print(f"{'embedscope nearest_same_different':44s}{t_ours:10.2f}{r1_ours:9.4f}")
    ratio = t_ours / min(rows)
    print(f"ratio nearest_same_different / fastest kNN pass = {ratio:.2f}  (target <= 1.5)  "
          f"{'OK' if ratio <= 1.5 else 'SLOWER THAN TARGET'}")
    return ratio


def best_of(repeats, fn, *a, **kw):
    times, out = [], None
    for _ in range(repeats):
        t, out = timed(fn, *a, **kw)
        times.append(t)
    return min(times), out


def bench_threads(sizes, n_jobs, repeats):
    from openTSNE.affinity import PerplexityBasedNN

    from embedscope.tsne import single_tsne
    from embedscope.tsne.joint import tsne_affinities

    print(f"\n== t-SNE maps whatever the thread count: n_jobs = {n_jobs} vs 1 thread, 32-d, best of {repeats}")
    print(f"{'N':>7s}{'openTSNE P':>12s}{'embedscope P':>14s}{'map n_jobs=1':>14s}{f'map n_jobs={n_jobs}':>14s}"
          f"{'same map':>10s}")
    for n in sizes:
        X, _ = clustered(n, 32, 10, seed=0)
        X = X.astype(np.float64)
        t_theirs, _ = best_of(repeats, PerplexityBasedNN, X, perplexity=30, n_jobs=n_jobs, random_state=0)
        t_ours, _ = best_of(repeats, tsne_affinities, X, 30.0, seed=0, n_jobs=n_jobs)
        t_map1, Y1 = best_of(repeats, single_tsne, X, n_jobs=1)
        t_mapj, Yj = best_of(repeats, single_tsne, X, n_jobs=n_jobs)
        same = "yes" if np.array_equal(Y1, Yj) else "NO"
        print(f"{n:7d}{t_theirs:11.2f}s{t_ours:13.2f}s{t_map1:13.2f}s{t_mapj:13.2f}s{same:>10s}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run (2,000 t-SNE points, 6,000 x 128)")
    ap.add_argument("--n-jobs", type=int, default=1, help="threads for both t-SNE runs (default: 1)")
    ap.add_argument("--skip-tsne", action="store_true")
    ap.add_argument("--skip-scatter", action="store_true")
    ap.add_argument("--threads", action="store_true",
                    help="only the thread-count section (3.), with --n-jobs threads (default here: every core)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per timing in --threads (best kept; default: 3)")
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, numpy {np.__version__}")
    if args.threads:
        n_jobs = args.n_jobs if args.n_jobs != 1 else (os.cpu_count() or 1)
        bench_threads([2000] if args.quick else [2000, 6000, 20_000], n_jobs, max(args.repeats, 1))
        return
    if not args.skip_tsne:
        bench_tsne(2000 if args.quick else 10_000, args.n_jobs)
    if not args.skip_scatter:
        bench_scatter(6000 if args.quick else 60_000, 128)


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
