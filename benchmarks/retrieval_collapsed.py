"""Retrieval metrics of a collapsed model: embedscope vs pytorch-metric-learning (METHODS.md §1).

A model that collapses (every image embedded at one point, or at a few) gives rows whose keys all
tie. embedscope ranks ties exactly (the float64 keys, ties to the lower reference index); its
passes used to compare each relevant pair with every tied reference, which grew as N³ (1,200
points in 2 classes: 182 s). This prints, per cell, the time of embedscope and of PML's
AccuracyCalculator (P@1 + R-Precision + MAP@R, k = "max_bin_count") on the same rows, the ratio,
and both values: PML's faiss search orders ties as faiss returns them, not by index, so its values
may differ where ties decide them (the column says by how much).

    python benchmarks/retrieval_collapsed.py             # N 2,000 and 6,000 (a minute or two)
    python benchmarks/retrieval_collapsed.py --quick     # N 1,000
    python benchmarks/retrieval_collapsed.py --points 1 --noise 1e-7 1e-4   # nearly collapsed
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

KEYS = ["P@1", "R-Precision", "MAP@R"]
PML_KEYS = {"P@1": "precision_at_1", "R-Precision": "r_precision", "MAP@R": "mean_average_precision_at_r"}


def collapsed_set(n: int, dim: int, n_points: int, classes: str, seed: int = 0, noise: float = 0.0):
    """``n`` L2-normalised rows on ``n_points`` distinct points (plus Gaussian ``noise`` of that
    standard deviation per coordinate: a model *nearly* collapsed, every row distinct); labels:
    ``cub`` classes of 60 (CUB/CARS-like), ``two`` two halves."""
    rng = np.random.default_rng(seed)
    P = rng.standard_normal((n_points, dim)).astype(np.float32)
    P /= np.linalg.norm(P, axis=1, keepdims=True)
    X = P[rng.integers(0, n_points, n)]
    if noise:
        X = (X + noise * rng.standard_normal(X.shape)).astype(np.float32)
    y = np.repeat(np.arange(-(-n // 60)), 60)[:n] if classes == "cub" else np.repeat(np.arange(2), -(-n // 2))[:n]
    return X, y


def timed(times: list, fn):
    t = time.perf_counter()
    out = fn()
    times.append(time.perf_counter() - t)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[2000, 6000])
    ap.add_argument("--points", type=int, nargs="+", default=[1, 10], help="distinct points of the collapse")
    ap.add_argument("--classes", nargs="+", default=["cub", "two"], choices=["cub", "two"])
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--noise", type=float, nargs="+", default=[0.0],
                    help="per-coordinate noise around the points (0: exactly collapsed; 1e-7 to 1e-4: nearly)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="N = 1,000, one repeat")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.repeats = [1000], 1

    import torch
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    from embedscope.metrics import retrieval_metrics

    calc = AccuracyCalculator(include=tuple(PML_KEYS.values()), avg_of_avgs=False, k="max_bin_count",
                              device=torch.device("cpu"))
    print(f"D = {args.dim}, {args.repeats} repeats (min / median s); values: embedscope (PML)")
    print(f"{'N':>6} {'points':>6} {'noise':>6} {'classes':>7} | {'embedscope':>13} {'PML':>13} {'PML/es':>6} | "
          f"{'P@1':>15} {'R-Precision':>15} {'MAP@R':>15} {'|diff|':>7}")
    for n in args.n:
        for points, noise in ((p, z) for p in args.points for z in args.noise):
            for classes in args.classes:
                X, y = collapsed_set(n, args.dim, points, classes, noise=noise)
                t_es, t_pml = [], []
                for _ in range(args.repeats):
                    ours = timed(t_es, lambda X=X, y=y: retrieval_metrics(X, y, include=KEYS))
                    theirs = timed(t_pml, lambda X=X, y=y: calc.get_accuracy(X, y))
                vals = " ".join(f"{ours[k]:6.4f} ({theirs[PML_KEYS[k]]:6.4f})" for k in KEYS)
                diff = max(abs(ours[k] - theirs[PML_KEYS[k]]) for k in KEYS)
                print(f"{n:>6} {points:>6} {noise:6.0e} {classes:>7} | {min(t_es):6.3f}/{statistics.median(t_es):6.3f} "
                      f"{min(t_pml):6.3f}/{statistics.median(t_pml):6.3f} {min(t_pml) / min(t_es):6.2f} | {vals} "
                      f"{diff:7.1e}", flush=True)
    return 0


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
