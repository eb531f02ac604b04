"""A nearly collapsed model with a few outliers: the centred search's bound (docs/methods.md §1).

A model collapsed to nearly one point is searched about its mean (``knn.centre_of``, ``KeySpace``
centred): the float32 error bound then scales with the rows' spread. A few rows far from the
point (outliers) set the largest centred reference norm ``rmax_c``, which enters the bound of
every pair: the bound loosens for all queries and many more pairs go to the float64
re-decision (still exact, slower). This prints, per cell, the time of embedscope's
``retrieval_metrics`` (P@1, R-Precision, MAP@R; what ``embedscope evaluate`` computes), of
``relevant_ranks(..., output="hits")`` (each query's relevant references in its exact top R_i), of
``property_precision`` (NR-Prec, docs/methods.md §9, of the class labels as one property: what
``embedscope properties`` computes; column ``NR-Prec``) and of ``knn_search`` (k = 10, same set) on
nearly collapsed rows with ``--outliers`` rows moved
``--far`` away from the point, against the same rows without outliers (ratio ``x clean``); for
reference, faiss's exact flat search (``IndexFlatIP``/``IndexFlatL2``, float32, not tie-exact)
beside ``knn_search``, and a plain float64 numpy brute force beside the hits (one float64 GEMM
of all rows and a partition of each row at R_i: N x N float64 in memory, not tie-exact).
``--class-size``: classes of this many rows (60: CUB/CARS-like; 3,000: two classes, whose
R-Precision and MAP@R go R_i = 2,999 deep). ``delta (all)``: the median float32 error bound of
the search of all rows (what the outliers set; the searches and the NR-Prec engine now take them
apart, ``knn.outlier_refs``). Times: the minimum of ``--repeats``.

    python benchmarks/centred_outliers.py                 # N 2,000 and 6,000, D 64 and 128
    python benchmarks/centred_outliers.py --quick         # N 2,000, D 64, one repeat
    python benchmarks/centred_outliers.py --far 1e-2 0.1 --metric euclidean
    python benchmarks/centred_outliers.py --together      # outliers searched with the rest (as before)
    python benchmarks/centred_outliers.py --n 6000 --dim 128 --far 0.1 --class-size 3000 --no-knn
    python benchmarks/centred_outliers.py --n 6000 --dim 128 --far 0.1 --no-knn --only-nrprec
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def outlier_set(n: int, dim: int, n_out: int, far: float, noise: float = 1e-5, seed: int = 0,
                class_size: int = 60):
    """``n`` rows within ``noise`` (per coordinate) of one unit point, ``n_out`` of them moved to
    distance ``far`` from it in random directions; labels: classes of ``class_size`` rows (60:
    CUB/CARS-like); the rows of ``embedscope.synthetic.nearly_collapsed``."""
    from embedscope.synthetic import nearly_collapsed

    X, _ = nearly_collapsed(n, dim, n_out, far, noise=noise, seed=seed, sort=False)
    y = np.repeat(np.arange(-(-n // class_size)), class_size)[:n]
    return X, y


MEDIANS: list = []  # (column, median) of the last row's timings, printed under it with --median


def best(fn, repeats: int, name: str = "") -> float:
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    MEDIANS.append((name, float(np.median(t))))
    return min(t)


def faiss_knn(X: np.ndarray, k: int, metric: str):
    import faiss

    A = np.ascontiguousarray(X, dtype=np.float32)
    if metric == "cosine":
        A = A / np.linalg.norm(A, axis=1, keepdims=True)
    index = faiss.IndexFlatIP(A.shape[1]) if metric == "cosine" else faiss.IndexFlatL2(A.shape[1])
    index.add(A)
    return index.search(A, k + 1)


def numpy_hits(X: np.ndarray, y: np.ndarray, metric: str) -> np.ndarray:
    """Each row's relevant rows among its R_i nearest others, by a plain float64 brute force: one
    GEMM of all rows, the row itself left out, a partition at R_i (ties in any order)."""
    A = X.astype(np.float64)
    if metric == "cosine":
        A /= np.linalg.norm(A, axis=1, keepdims=True)
        K = A @ A.T
    else:
        sq = np.einsum("ij,ij->i", A, A)
        K = 2.0 * (A @ A.T) - sq[:, None] - sq[None, :]
    np.fill_diagonal(K, -np.inf)
    _, inv, cnt = np.unique(y, return_inverse=True, return_counts=True)
    R = cnt[inv] - 1
    hits = np.zeros(len(y), dtype=np.int64)
    for r in np.unique(R[R > 0]):
        rows = np.flatnonzero(R == r)
        top = np.argpartition(-K[rows], r - 1, axis=1)[:, :r]
        hits[rows] = (y[top] == y[rows, None]).sum(axis=1)
    return hits


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[2000, 6000])
    ap.add_argument("--dim", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--outliers", type=int, default=5, help="rows moved away from the point")
    ap.add_argument("--far", type=float, nargs="+", default=[1e-2, 0.1],
                    help="their distance from the point (unit point; farther than ~0.5 the search is not centred)")
    ap.add_argument("--noise", type=float, default=1e-5, help="per-coordinate noise of the other rows")
    ap.add_argument("--metric", nargs="+", default=["cosine", "euclidean"], choices=["cosine", "euclidean"])
    ap.add_argument("--k", type=int, default=10, help="neighbours of the knn_search column")
    ap.add_argument("--class-size", type=int, default=60, help="rows per class (labels of the evaluate and hits columns)")
    ap.add_argument("--no-knn", action="store_true", help="leave out the knn_search and faiss columns")
    ap.add_argument("--no-nrprec", action="store_true", help="leave out the NR-Prec (property_precision) column")
    ap.add_argument("--only-nrprec", action="store_true",
                    help="time only NR-Prec (property_precision): the evaluate, hits and np f64 columns show -")
    ap.add_argument("--median", action="store_true", help="under each row, the median of the repeats of each time")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="N 2,000, D 64, one repeat")
    ap.add_argument("--together", action="store_true",
                    help="search the outliers with the rest, as before (knn.OUTLIERS = False), for comparison")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.dim, args.repeats = [2000], [64], 1

    import embedscope.metrics.search.knn as knn
    from embedscope.metrics import retrieval_metrics
    from embedscope.metrics.properties import property_precision
    from embedscope.metrics.search import KeySpace, knn_search, prepare, relevant_ranks

    knn.OUTLIERS = not args.together

    keys = ["P@1", "R-Precision", "MAP@R"]
    print(f"{args.outliers} outliers, noise {args.noise:.0e}, classes of {args.class_size}, k = {args.k}; "
          f"min of {args.repeats} (s); x clean: this cell's time / the same rows without outliers")
    print(f"{'N':>6} {'D':>4} {'metric':>9} {'far':>6} {'centred':>7} {'delta (all)':>12} | "
          f"{'evaluate':>8} {'x clean':>7} | {'hits':>7} {'x clean':>7} {'np f64':>7} {'hits/np':>7}"
          + ("" if args.no_nrprec and not args.only_nrprec else f" | {'NR-Prec':>7} {'x clean':>7}")
          + ("" if args.no_knn else f" | {'knn':>7} {'x clean':>7} {'faiss':>7} {'knn/faiss':>9}"))
    for n in args.n:
        for dim in args.dim:
            for metric in args.metric:
                clean = {}
                for far in [0.0] + list(args.far):
                    X, y = outlier_set(n, dim, args.outliers if far else 0, far, args.noise,
                                       class_size=args.class_size)
                    Q = prepare(X.astype(np.float64), metric)
                    ks = KeySpace(Q, Q, metric, True)
                    MEDIANS.clear()
                    line = (f"{n:>6} {dim:>4} {metric:>9} {far:6.0e} {'yes' if ks.centre is not None else 'no':>7} "
                            f"{float(np.median(ks.delta)):12.2e} | ")
                    if args.only_nrprec:
                        line += f"{'-':>8} {'-':>7} | {'-':>7} {'-':>7} {'-':>7} {'-':>7}"
                    else:
                        t_ev = best(lambda X=X, y=y, m=metric: retrieval_metrics(X, y, metric=m, include=keys),
                                    args.repeats, "evaluate")
                        t_hi = best(lambda X=X, y=y, m=metric: relevant_ranks(X, y, metric=m, output="hits"),
                                    args.repeats, "hits")
                        t_np = best(lambda X=X, y=y, m=metric: numpy_hits(X, y, m), args.repeats, "np f64")
                        if far == 0.0:
                            clean.update(ev=t_ev, hi=t_hi)
                        line += (f"{t_ev:8.3f} {t_ev / clean['ev']:7.2f} | "
                                 f"{t_hi:7.3f} {t_hi / clean['hi']:7.2f} {t_np:7.3f} {t_hi / t_np:7.2f}")
                    if not args.no_nrprec or args.only_nrprec:
                        t_nr = best(lambda X=X, y=y, m=metric: property_precision(X, {"class": y}, metric=m),
                                    args.repeats, "NR-Prec")
                        clean.setdefault("nr", t_nr)
                        line += f" | {t_nr:7.3f} {t_nr / clean['nr']:7.2f}"
                    if not args.no_knn:
                        t_kn = best(lambda X=X, m=metric: knn_search(X, k=args.k, metric=m, exclude_self=True),
                                    args.repeats, "knn")
                        t_fa = best(lambda X=X, m=metric: faiss_knn(X, args.k, m), args.repeats, "faiss")
                        clean.setdefault("kn", t_kn)
                        line += f" | {t_kn:7.3f} {t_kn / clean['kn']:7.2f} {t_fa:7.3f} {t_kn / t_fa:9.1f}"
                    print(line, flush=True)
                    if args.median:
                        print(" " * 8 + "median: " + ", ".join(f"{k} {v:.3f}" for k, v in MEDIANS), flush=True)
    return 0


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
