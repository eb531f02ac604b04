"""NR-Prec of a nearly collapsed model with k far rows: how many to take apart (docs/methods.md §9).

The properties engine (``properties._Engine``) takes a nearly collapsed model's far rows
(``knn.outlier_refs``) apart from the rest (the "bulk", by its own, tighter float32 bound; the
outliers ranked among each query's neighbours by their float64 keys): up to min(N / 64, 256)
always, and more, up to N / 4 (``knn.outlier_most``), where ``knn.window_pays`` shows that the
engine of all rows would fill its windows about the deepest R with float64 keys
(``properties.APART_WINDOW_RATIO``). This times ``property_precision`` on the same rows, A/B
alternated in one process: ``apart`` (every far row that ``outlier_refs`` finds, up to N / 2, taken
apart: ``OUTLIER_DIV`` 2, no ``OUTLIER_MAX``), ``old`` (``knn.OUTLIERS = False``: the one engine,
the loose bound) and ``auto`` (the defaults; in brackets, how many rows it takes apart), and checks
that all give the same numbers, bit for bit (column ``same``). Column ``w/k``: the windows' float64
keys per row of the one engine at the deepest R over the outliers (what ``APART_WINDOW_RATIO``
is compared with). Times: min / median of ``--repeats`` (s). Rows: N points within 1e-5 of one
unit point, k of them moved ``--far`` away; properties: classes of 60, 3 values, 10 values.

    python benchmarks/properties_outliers.py                  # N 6,000, D 128, k 94 300 600, far 0.1 2e-3
    python benchmarks/properties_outliers.py --props cls       # classes of 60 only (R 59: narrow windows)
    python benchmarks/properties_outliers.py --quick           # N 2,000, k 40, one repeat
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def collapsed(n: int, d: int, k: int, far: float, seed: int = 0) -> np.ndarray:
    """``n`` float64 rows within 1e-5 of one unit point, ``k`` of them ``far`` from it
    (``embedscope.synthetic.nearly_collapsed``)."""
    from embedscope.synthetic import nearly_collapsed

    return nearly_collapsed(n, d, k, far, seed=seed, dtype=np.float64)[0]


def properties(n: int, which, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    p = {"cls": np.arange(n) // 60, "few": rng.integers(0, 3, n), "ten": rng.integers(0, 10, n)}
    return {k: p[k] for k in which}


def window_ratio(X, metric: str, cut: int) -> float | None:
    """w / k of knn.window_pays for X's outliers (None: none found), by bisection of its ratio."""
    from embedscope.metrics.search import knn
    from embedscope.metrics.search.knn import KeySpace

    if metric == "cosine":
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
    n = X.shape[0]
    ks = KeySpace(X, X, metric, True)
    far = knn.outlier_refs(ks, knn.outlier_most(n, n))
    if far is None:
        return None
    near = np.setdiff1d(np.arange(n), far)
    sub = KeySpace(X[near], X[near], metric, True)
    if far.size <= min(n // knn.OUTLIER_DIV, knn.OUTLIER_MAX):
        knn.OUTLIER_DIV, div = n + 1, knn.OUTLIER_DIV  # (within the few window_pays does not look)
    else:
        div = None
    lo, hi = 0.0, 1e4
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if knn.window_pays(ks, sub, near, far.size, cut, mid) else (lo, mid)
    if div is not None:
        knn.OUTLIER_DIV = div
    return lo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=6000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--outliers", type=int, nargs="+", default=[94, 300, 600])
    ap.add_argument("--far", type=float, nargs="+", default=[0.1, 2e-3])
    ap.add_argument("--props", nargs="+", default=["cls", "few", "ten"], choices=["cls", "few", "ten"])
    ap.add_argument("--metric", default="euclidean", choices=["euclidean", "cosine"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.n, a.outliers, a.repeats = 2000, [40], 1

    from embedscope.metrics import properties as P
    from embedscope.metrics.search import knn

    default = (knn.OUTLIER_DIV, knn.OUTLIER_MAX)

    def path(p: str) -> None:
        knn.OUTLIERS = p != "old"
        knn.OUTLIER_DIV, knn.OUTLIER_MAX = (2, 1 << 40) if p == "apart" else default

    pr = properties(a.n, a.props)
    R = np.concatenate([np.bincount(c)[c] - 1 for c in (np.unique(v, return_inverse=True)[1].ravel() for v in pr.values())])
    cut = max(int(R.max()), 1)
    print(f"N {a.n}, D {a.dim}, {a.metric}, properties {', '.join(a.props)} (deepest R {cut}); "
          f"APART_WINDOW_RATIO {P.APART_WINDOW_RATIO}")
    print("| k | far | w/k | apart (s) | old (s) | auto (s) (apart) | old / apart | same |")
    print("|---|---|---|---|---|---|---|---|")
    for far in a.far:
        for k in a.outliers:
            X = collapsed(a.n, a.dim, k, far)
            w = window_ratio(X, a.metric, cut)
            t = {"apart": [], "old": [], "auto": []}
            res = {}
            for _ in range(a.repeats):
                for p in t:
                    path(p)
                    t0 = time.perf_counter()
                    res[p] = P.property_precision(X, pr, metric=a.metric)
                    t[p].append(time.perf_counter() - t0)
            path("auto")
            eng = P._Engine(X, a.metric, cut=cut)
            n_auto = 0 if eng.apart is None else eng.apart.out[2].size
            del eng
            same = repr(res["apart"]) == repr(res["old"]) == repr(res["auto"])

            def f(v):
                return f"{min(v):.2f} / {statistics.median(v):.2f}"

            ws = "-" if w is None else f"{w:.2f}"
            gain = statistics.median(t["old"]) / statistics.median(t["apart"])
            print(f"| {k} | {far:g} | {ws} | {f(t['apart'])} | {f(t['old'])} | {f(t['auto'])} ({n_auto}) | "
                  f"{gain:.2f}x | {same} |", flush=True)


if __name__ == "__main__":
    main()
