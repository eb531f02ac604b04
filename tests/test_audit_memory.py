"""Memory audit: "memory stays bounded: never an N x N matrix when N can be 100k".

Each test runs a path that held an array growing with N x N (or N x K, K unbounded) at a moderate
size, measures the peak of numpy's allocations with tracemalloc (numpy reports its buffers to it),
and checks the values against the unblocked computation, so that the blocking changes no value.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from brute import unit_rows

from embedscope.metrics import properties as props_mod
from embedscope.metrics import retrieval as retrieval_mod
from embedscope.metrics.properties import property_precision
from embedscope.metrics.retrieval import retrieval_metrics


def _traced_peak(fn, *args, **kwargs):
    """(result, peak bytes of traced allocations during the call)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn(*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return out, peak


# ----------------------------------------------------------------------------- permutation test
class _StubEngine:
    """Hit counts that depend on the shuffled values only (cheap): the permutation loop's own memory."""

    def hits(self, codes, R, progress=False):
        return codes.copy()


def test_permutation_shuffles_are_drawn_per_group(monkeypatch):
    """The permutation test of NR-Prec held all P shuffles (P x n int64) at once; now each group's
    shuffles are drawn when it comes, so memory does not grow with P x n."""
    rng = np.random.default_rng(0)
    n, P = 1000, 4000
    val = rng.integers(0, 7, n)
    codes = val[None, :].astype(np.int64)
    Nv = np.bincount(val)[val][None, :]
    R = Nv - 1
    monkeypatch.setattr(props_mod, "PERM_GROUP_ENTRIES", 16 * n)
    small, peak = _traced_peak(props_mod._permuted_nr_prec, _StubEngine(), codes, R, Nv, P, 7, False)
    assert peak < P * n * 8 / 4, f"peak {peak / 2**20:.1f} MB: the shuffles of all {P} permutations are held"
    monkeypatch.setattr(props_mod, "PERM_GROUP_ENTRIES", 1 << 30)  # one group: every shuffle at once
    np.testing.assert_array_equal(small, props_mod._permuted_nr_prec(_StubEngine(), codes, R, Nv, P, 7, False))


def test_permutation_values_unchanged_by_the_groups(monkeypatch):
    """With the real engine: the same NR-Precs whatever the group size, and the j-th is the NR-Prec
    of the property shuffled by the j-th draw of ``default_rng(seed)`` (as before the change)."""
    rng = np.random.default_rng(1)
    n, P = 200, 12
    X = rng.standard_normal((n, 4))
    val = rng.integers(0, 5, n)
    eng = props_mod._Engine(X, "euclidean")
    codes = val[None, :].astype(np.int64)
    Nv = np.bincount(val)[val][None, :]
    R = Nv - 1
    monkeypatch.setattr(props_mod, "PERM_GROUP_ENTRIES", 5 * n)  # groups of 5, 5, 2
    grouped = props_mod._permuted_nr_prec(eng, codes, R, Nv, P, 3, False)
    monkeypatch.setattr(props_mod, "PERM_GROUP_ENTRIES", 1 << 30)
    np.testing.assert_array_equal(grouped, props_mod._permuted_nr_prec(eng, codes, R, Nv, P, 3, False))
    draws = np.random.default_rng(3)
    for j in range(P):
        perm = draws.permutation(n)
        if j in (0, 6, 11):
            assert grouped[0, j] == property_precision(X, {"v": val[perm]})["v"]["NR-Prec"]


# ----------------------------------------------------------------------------- retrieval, large classes
RET_KEYS = ["R@1", "R@4", "P@1", "R-Precision", "MAP@R", "mAP@C", "mAP@1000", "mAP@lim"]


def _few_classes(n, d, n_cls, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_cls, n)
    X = rng.standard_normal((n, d)) + 0.7 * rng.standard_normal((n_cls, d))[y]
    return X, y


def test_retrieval_with_large_classes_holds_one_block_of_pairs(monkeypatch):
    """retrieval_metrics ranked all Σ R_i relevant pairs at once: Σ_c n_c², N² / C with C classes
    (10 classes: 2.3 GB at N = 20,000 for R@1 alone, about four times more per doubling). Queries
    are now searched in blocks of at most PAIRS_PER_BLOCK pairs: the same values."""
    X, y = _few_classes(2000, 8, 2, 0)
    n_pairs = int(sum(np.bincount(y) ** 2)) - len(y)  # about 2 million
    monkeypatch.setattr(retrieval_mod, "PAIRS_PER_BLOCK", 40_000)
    got, peak = _traced_peak(retrieval_metrics, X, y, include=["R@1", "MAP@R"], per_query=True)
    # the pairs alone, as two int64 index arrays, would take 16 bytes each
    assert peak < n_pairs * 16 / 2, f"peak {peak / 2**20:.1f} MB for {n_pairs} relevant pairs"
    monkeypatch.setattr(retrieval_mod, "PAIRS_PER_BLOCK", 1 << 40)  # one search of all queries
    ref = retrieval_metrics(X, y, include=["R@1", "MAP@R"], per_query=True)
    for k in ref["per_query"]:
        np.testing.assert_array_equal(got["per_query"][k], ref["per_query"][k])
    assert {k: v for k, v in got.items() if k != "per_query"} == {k: v for k, v in ref.items() if k != "per_query"}


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("ties", [False, True])
def test_retrieval_query_blocks_equal_one_search_and_brute_force(monkeypatch, metric, ties):
    """Every measure, per query, with blocks of a few queries: identical to one search of all
    queries; R-Precision and MAP@R per query equal to a brute-force float64 ranking. With ties:
    rows on an integer grid, half of them duplicated (a query's own row tied with other rows)."""
    X, y = _few_classes(240, 3, 4, 1)
    if ties:
        X = np.round(X * 1.5)
        X[np.all(X == 0, axis=1)] = 1.0
        X[::2] = X[1::2]
    y[:3] = [90, 91, 92]  # lone queries
    monkeypatch.setattr(retrieval_mod, "PAIRS_PER_BLOCK", 500)  # blocks of about 8 queries
    got = retrieval_metrics(X, y, metric=metric, include=RET_KEYS, per_query=True)
    monkeypatch.setattr(retrieval_mod, "PAIRS_PER_BLOCK", 1 << 40)
    ref = retrieval_metrics(X, y, metric=metric, include=RET_KEYS, per_query=True)
    for k in ref["per_query"]:
        np.testing.assert_array_equal(got["per_query"][k], ref["per_query"][k])
    assert {k: v for k, v in got.items() if k != "per_query"} == {k: v for k, v in ref.items() if k != "per_query"}
    Q = unit_rows(X) if metric == "cosine" else X  # (docs/methods.md §1's unit rows: parallel rows tie exactly)
    for i in range(3, len(y), 7):
        # float64 keys pair by pair (as the rank engine defines them), ties to the lower index
        key = -np.einsum("jk,jk->j", Q, np.broadcast_to(Q[i], Q.shape)) if metric == "cosine" else \
            np.einsum("jk,jk->j", Q - Q[i], Q - Q[i])
        cand = np.delete(np.arange(len(y)), i)
        rel = (y[cand[np.lexsort((cand, key[cand]))]] == y[i]).astype(float)
        r = int(rel.sum())
        prec = np.cumsum(rel) / np.arange(1, len(rel) + 1)
        assert got["per_query"]["R-Precision"][i] == pytest.approx(rel[:r].sum() / r, abs=1e-12)
        assert got["per_query"]["MAP@R"][i] == pytest.approx((prec[:r] * rel[:r]).sum() / r, abs=1e-12)


def test_retrieval_query_blocks_separate_reference_set(monkeypatch):
    """Queries against a separate reference set, in blocks: the same values as one search."""
    X, y = _few_classes(300, 4, 3, 2)
    kw = dict(X_ref=X[100:], y_ref=y[100:], include=RET_KEYS, per_query=True)
    monkeypatch.setattr(retrieval_mod, "PAIRS_PER_BLOCK", 300)
    got = retrieval_metrics(X[:100], y[:100], **kw)
    monkeypatch.setattr(retrieval_mod, "PAIRS_PER_BLOCK", 1 << 40)
    ref = retrieval_metrics(X[:100], y[:100], **kw)
    for k in ref["per_query"]:
        np.testing.assert_array_equal(got["per_query"][k], ref["per_query"][k])
    assert {k: v for k, v in got.items() if k != "per_query"} == {k: v for k, v in ref.items() if k != "per_query"}


# ----------------------------------------------------------------------------- k-means bounds
def test_kmeans_bounds_stay_bounded_and_labels_unchanged(monkeypatch):
    """Exact k-means with Yinyang bounds held one float64 per (row, group), G = k / group_size:
    N x k / 64, quadratic where k grows with N (SOP-like labels, k ~ N / 5), and the first
    assignment made about five (N, G) float64 temporaries (sop-like N = 100,000: 0.90 GB traced).
    Now G is at most LB_MAX_ELEMS / N and the work arrays are taken in row blocks: the labels are
    those of the plain Lloyd iteration (bounds=False), whatever the grouping and blocks."""
    from embedscope.metrics import kmeans as km

    rng = np.random.default_rng(0)
    n, k, d, group_size = 12_000, 1_500, 8, 2
    centres = rng.standard_normal((k, d)).astype(np.float32)
    x = (centres[rng.integers(0, k, n)] + 0.3 * rng.standard_normal((n, d))).astype(np.float32)
    g_uncapped = round(k / group_size)
    monkeypatch.setattr(km, "LB_MAX_ELEMS", n * 40)
    monkeypatch.setattr(km, "DENSE_CHUNK_ELEMS", 1 << 16)
    monkeypatch.setattr(km, "GROUP_GEMM_ELEMS", 1 << 16)
    got, peak = _traced_peak(km.lloyd_kmeans, x, k, niter=8, seed=3, bounds=True, group_size=group_size)
    assert peak < n * g_uncapped * 8, f"peak {peak / 2**20:.1f} MB: (N, k / group_size) bounds are held"
    ref = km.lloyd_kmeans(x, k, niter=8, seed=3, bounds=False)
    np.testing.assert_array_equal(got["labels"], ref["labels"])
    np.testing.assert_array_equal(got["centroids"], ref["centroids"])
