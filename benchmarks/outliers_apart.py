"""How many outliers to search apart: a nearly collapsed model with k far rows (docs/methods.md §1).

A nearly collapsed model's few far rows (``knn.outlier_refs``) are searched apart from the rest
(the "bulk", by its own, tighter float32 bound; the outliers by their float64 keys), since they
would loosen every query's bound. Up to min(N / ``OUTLIER_DIV``, ``OUTLIER_MAX``) of them always;
more, up to N / ``OUTLIER_MOST_DIV`` (``knn.outlier_most``), where the search of all rows would
fill its windows with float64 keys (``knn.window_pays``, ``APART_WINDOW_RATIO`` of knn and of
ranks); and the ranks only while the outliers' relevant queries' rows over the bulk stay within
``ranks.APART_ROW_RATIO`` of the bulk search's GEMM. This times, on the same rows, A/B alternated in
one process: ``apart`` (every limit lifted: ``OUTLIER_DIV`` 2, no ``OUTLIER_MAX``, window ratios 0,
no ``APART_*`` budget), ``old`` (``knn.OUTLIERS = False``: every reference in one search, the loose
bound) and ``auto`` (the defaults: the path the search chooses), for ``evaluate``
(``retrieval_metrics``: P@1, R-Precision, MAP@R, through ``relevant_ranks``), ``hits``
(``relevant_ranks(..., output="hits")``) and ``knn`` (``knn_search``, k = 10, same set), and checks
that all give the same values. Column ``rows``: the outliers' row work over the bulk search's GEMM
(what ``APART_ROW_RATIO`` caps; evaluate only). Times: min / median of ``--repeats`` (s).

    python benchmarks/outliers_apart.py                       # N 6,000, D 128, k 94 and 600, far 0.1 (~5 min)
    python benchmarks/outliers_apart.py --outliers 5 50 94 150 300 600 1500     # the table of docs/PERFORMANCE.md
    python benchmarks/outliers_apart.py --quick               # N 2,000, k 5 and 94, one repeat
    python benchmarks/outliers_apart.py --outliers 600 1500 --far 2e-3 1e-2 --ops hits
    python benchmarks/outliers_apart.py --class-size 600 --outliers 94 300 --ops evaluate
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def lifted(knn, ranks, path: str) -> None:
    """Force one path: ``apart``, every far row that ``outlier_refs`` finds (up to N / 2) searched
    apart, with no budget; ``old``, no outliers searched apart; ``auto``, the defaults (what the
    search chooses)."""
    apart = path == "apart"
    knn.OUTLIERS = path != "old"
    knn.OUTLIER_DIV, knn.OUTLIER_MAX = (2, 1 << 40) if apart else DEFAULTS["div_max"]
    knn.APART_WINDOW_RATIO = 0.0 if apart else DEFAULTS["win_knn"]
    ranks.APART_WINDOW_RATIO = 0.0 if apart else DEFAULTS["win"]
    ranks.APART_ROW_RATIO = float("inf") if apart else DEFAULTS["ratio"]
    ranks.APART_MAX_ROW_WORK = 1 << 62 if apart else DEFAULTS["work"]
    ranks.APART_MAX_COMPARISONS = 1 << 62 if apart else DEFAULTS["cmp"]


DEFAULTS: dict = {}


def equal(a, b) -> bool:
    """The two paths' results the same, exactly (a dict of measures, a tuple of arrays, an array)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(a, b))
    return np.array_equal(a, b)


def row_share(X, y, metric: str, far_idx: np.ndarray) -> float:
    """``_ranks_apart``'s row work of the outliers over the bulk search's GEMM (same set)."""
    n, dim = X.shape
    near = np.setdiff1d(np.arange(n), far_idx)
    lab, cnt = np.unique(y[near], return_counts=True)
    at = np.minimum(np.searchsorted(lab, y[far_idx]), lab.size - 1)
    n_rel_out = int(np.where(lab[at] == y[far_idx], cnt[at], 0).sum())
    n_rel_q = int(np.isin(y[near], y[far_idx]).sum())
    return (n_rel_q * near.size * dim + 8 * n_rel_out * near.size) / (near.size * near.size * dim)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=6000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--outliers", type=int, nargs="+", default=[94, 600], help="far rows, k")
    ap.add_argument("--far", type=float, nargs="+", default=[0.1],
                    help="their distance from the point (2e-3: just far enough to count as outliers at noise 1e-5)")
    ap.add_argument("--noise", type=float, default=1e-5, help="per-coordinate noise of the other rows")
    ap.add_argument("--metric", nargs="+", default=["cosine"], choices=["cosine", "euclidean"])
    ap.add_argument("--class-size", type=int, default=60, help="rows per class (60: CUB/CARS-like)")
    ap.add_argument("--ops", nargs="+", default=["evaluate", "hits", "knn"], choices=["evaluate", "hits", "knn"])
    ap.add_argument("--paths", nargs="+", default=["apart", "old", "auto"], choices=["apart", "old", "auto"],
                    help="auto: the default thresholds (the path the search chooses)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="N 2,000, k 5 and 94, one repeat")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.outliers, args.repeats = 2000, [5, 94], 1

    from centred_outliers import outlier_set  # a sibling module (benchmarks/ is the script's folder)

    import embedscope.metrics.search.knn as knn
    import embedscope.metrics.search.ranks as ranks
    from embedscope.metrics import retrieval_metrics
    from embedscope.metrics.search import KeySpace, knn_search, prepare, relevant_ranks

    DEFAULTS.update(div_max=(knn.OUTLIER_DIV, knn.OUTLIER_MAX), ratio=ranks.APART_ROW_RATIO,
                    win_knn=knn.APART_WINDOW_RATIO, win=ranks.APART_WINDOW_RATIO,
                    work=ranks.APART_MAX_ROW_WORK, cmp=ranks.APART_MAX_COMPARISONS)
    m_free, m_most = min(args.n // knn.OUTLIER_DIV, knn.OUTLIER_MAX), knn.outlier_most(args.n, args.n)
    keys = ["P@1", "R-Precision", "MAP@R"]
    fns = {
        "evaluate": lambda X, y, m: retrieval_metrics(X, y, metric=m, include=keys),
        "hits": lambda X, y, m: relevant_ranks(X, y, metric=m, output="hits").hits_at_R,
        "knn": lambda X, y, m: knn_search(X, k=10, metric=m, exclude_self=True),
    }
    print(f"N {args.n}, D {args.dim}, noise {args.noise:.0e}, classes of {args.class_size}; "
          f"outliers apart: always up to {m_free}, by the windows up to {m_most}; "
          f"min / median of {args.repeats} (s), paths A/B alternated")
    print(f"{'k':>5} {'far':>6} {'metric':>9} {'op':>8} {'rows':>5} | {'apart':>13} {'old':>13} {'auto':>13} "
          f"{'old/apart':>9} same")
    for metric in args.metric:
        for far in args.far:
            for k in args.outliers:
                X, y = outlier_set(args.n, args.dim, k, far, args.noise, class_size=args.class_size)
                lifted(knn, ranks, "apart")
                Q = prepare(X.astype(np.float64), metric)
                f_idx = knn.outlier_refs(KeySpace(Q, Q, metric, True))
                found = 0 if f_idx is None else f_idx.size
                for op in args.ops:
                    times = {p: [] for p in args.paths}
                    out = {}
                    for _ in range(args.repeats):
                        for p in args.paths:
                            lifted(knn, ranks, p)
                            t0 = time.perf_counter()
                            out[p] = fns[op](X, y, metric)
                            times[p].append(time.perf_counter() - t0)
                    lifted(knn, ranks, "auto")
                    share = row_share(X, y, metric, f_idx) if op == "evaluate" and found else float("nan")
                    cells = {p: f"{min(t):6.2f}/{statistics.median(t):6.2f}" for p, t in times.items()}
                    ratio = (min(times["old"]) / min(times["apart"])) if "old" in times and "apart" in times else float("nan")
                    first = next(iter(out.values()))
                    same = ("yes" if all(equal(first, v) for v in out.values()) else "NO") if len(out) > 1 else "-"
                    print(f"{k:>5} {far:6.0e} {metric:>9} {op:>8} {share:5.2f} | "
                          f"{cells.get('apart', '-'):>13} {cells.get('old', '-'):>13} {cells.get('auto', '-'):>13} "
                          f"{ratio:9.2f} {same}"
                          + ("" if found == k else f"  (outliers found: {found})"), flush=True)
    return 0


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
