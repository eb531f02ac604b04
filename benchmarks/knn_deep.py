"""Deep exact kNN: embedscope ``knn_search`` vs faiss's flat search (issue 18, goal 3; METHODS.md §1).

The set is like the issue's: N points (default 60,000) in C classes of equal size (default 100 of
600), class centres plus Gaussian noise (a realistic difficulty: the printed P@1 is the share of
queries whose nearest neighbour shares their class), L2-normalised float32 rows, cosine. For each
D, side by side in one process, interleaved, ``--repeats`` times:

- faiss: ``faiss.IndexFlatIP(d)`` on the normalised rows, ``search(X, k + 1)`` (the query itself
  included, as a same-set search with faiss needs);
- embedscope: ``knn_search(X, k=k, exclude_self=True, device="cpu")`` (exact float64 ranks, ties to
  the lower index).

Prints min and median of each and embedscope / faiss (target <= 1.0), then checks:

- embedscope against a float64 brute force on ``--check`` random queries (every key of the query's
  row in float64, sorted by key desc then index asc): the indices must be equal wherever the two
  float64 computations do not tie within 1e-12 (they round differently), the values within 1e-12;
- faiss against embedscope: the neighbour sets (faiss without the query itself) may differ only
  by references whose exact key lies within faiss's float32 rounding of the k-th key (printed in
  units of the float32 error bound delta of ``KeySpace``).

    python benchmarks/knn_deep.py                       # 60k points, k = 654, D = 128 and 512
    python benchmarks/knn_deep.py --n 12000 --classes 20 --dims 128 --repeats 1   # quick
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def make_set(n: int, classes: int, dim: int, noise: float, seed: int = 0):
    """Equal classes, centres N(0, I) plus noise * (D / 64)^0.33 * N(0, I), rows L2-normalised."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(classes), n // classes)
    y = np.concatenate([y, np.full(n - y.size, classes - 1)])
    centres = rng.standard_normal((classes, dim)).astype(np.float32)
    X = centres[y] + noise * (dim / 64) ** 0.33 * rng.standard_normal((n, dim)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, y


def load() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def run_faiss(X, k):
    import faiss

    index = faiss.IndexFlatIP(X.shape[1])
    index.add(X)
    return index.search(X, k + 1)


def check_brute(X, vals, idx, k, n_check, seed=1):
    """embedscope vs a float64 brute force (dgemv per query row) on n_check queries."""
    X64 = X.astype(np.float64)
    X64 /= np.sqrt(np.einsum("ij,ij->i", X64, X64))[:, None]
    rng = np.random.default_rng(seed)
    worst_v, bad = 0.0, 0
    for q in rng.choice(len(X), n_check, replace=False):
        key = X64 @ X64[q]
        key[q] = -np.inf
        order = np.lexsort((np.arange(len(X)), -key))[:k]
        worst_v = max(worst_v, float(np.abs(vals[q] - key[order]).max()))
        diff = order != idx[q]
        # positions where the orders differ must be float64 near-ties of the two roundings
        if diff.any() and np.abs(key[order[diff]] - key[idx[q][diff]]).max() > 1e-12:
            bad += 1
    return worst_v, bad


def check_faiss(X, fi, idx, vals, k):
    """Queries whose faiss neighbour set differs from embedscope's; the largest gap to the k-th
    exact key of a differing reference, in units of the float32 error bound delta."""
    from embedscope.metrics.search.knn import U32

    n, d = X.shape
    delta = (d + 16) * U32 * 1.05 * 4.0  # unit rows: (D + 16) u (1 + 2 + 1)
    X64 = X.astype(np.float64)
    X64 /= np.sqrt(np.einsum("ij,ij->i", X64, X64))[:, None]
    n_diff, worst = 0, 0.0
    for q in range(n):
        f = fi[q][fi[q] != q][:k]
        if f.size == k and np.array_equal(np.sort(f), np.sort(idx[q])):
            continue
        n_diff += 1
        extra = np.setdiff1d(f, idx[q])
        missing = np.setdiff1d(idx[q], f)
        kth = vals[q, -1]
        for r in np.concatenate([extra, missing]):
            worst = max(worst, abs(float(X64[q] @ X64[r]) - kth) / delta)
    return n_diff, worst


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=60000)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--dims", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--k", type=int, default=654)
    ap.add_argument("--noise", type=float, default=2.0, help="within-class noise (x (D/64)^0.33)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--check", type=int, default=200, help="queries checked against a float64 brute force")
    ap.add_argument("--shuffle", action="store_true",
                    help="rows in a random order (default: each class's rows contiguous, as in a data set "
                         "listed class folder by class folder; a same-set search then finds most window "
                         "pairs within a query block)")
    ap.add_argument("--quick", action="store_true", help="smoke run: N = 6,000, 20 classes, k = 65, D = 128, "
                    "one repeat, 20 queries checked")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.classes, args.k, args.dims, args.repeats, args.check = 6000, 20, 65, [128], 1, 20

    import faiss
    import torch

    from embedscope.metrics import knn_search

    print(f"cores {os.cpu_count()}, faiss {faiss.__version__}, torch threads {torch.get_num_threads()}, "
          f"faiss threads {faiss.omp_get_max_threads()}; load average before: {load()}")
    print(f"N = {args.n}, {args.classes} classes, k = {args.k}, cosine, exclude self; "
          f"{args.repeats} repeats, interleaved")
    rows = []
    for dim in args.dims:
        X, y = make_set(args.n, args.classes, dim, args.noise)
        if args.shuffle:
            p = np.random.default_rng(1).permutation(len(X))
            X, y = X[p], y[p]
        tf, te = [], []
        for _ in range(args.repeats):
            t = time.perf_counter()
            fv, fi = run_faiss(X, args.k)
            tf.append(time.perf_counter() - t)
            t = time.perf_counter()
            vals, idx = knn_search(X, k=args.k, exclude_self=True, device="cpu")
            te.append(time.perf_counter() - t)
            print(f"  D = {dim}: faiss {tf[-1]:7.2f} s, embedscope {te[-1]:7.2f} s (load {load()})", flush=True)
        p1 = float(np.mean(y[idx[:, 0]] == y))
        worst_v, bad = check_brute(X, vals, idx, args.k, min(args.check, args.n))
        n_diff, worst_gap = check_faiss(X, fi, idx, vals, args.k)
        rows.append((dim, min(tf), statistics.median(tf), min(te), statistics.median(te)))
        print(f"D = {dim}: P@1 {p1:.3f}; faiss min {min(tf):.2f} s median {statistics.median(tf):.2f} s; "
              f"embedscope min {min(te):.2f} s median {statistics.median(te):.2f} s; "
              f"embedscope / faiss: min {min(te) / min(tf):.2f}x, median "
              f"{statistics.median(te) / statistics.median(tf):.2f}x")
        print(f"  brute force on {min(args.check, args.n)} queries: {bad} queries differ beyond float64 "
              f"near-ties, values within {worst_v:.1e}")
        print(f"  faiss's sets differ on {n_diff} of {args.n} queries, each difference within "
              f"{worst_gap:.2f} delta of the exact k-th key (float32 near-ties)", flush=True)
    print(f"load average after: {load()}")
    return rows


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
