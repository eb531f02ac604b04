"""Audit 36 (a helper's metamorphic audit of retrieval and the scatter): uint64 labels from 2^63 met a
separate reference set's negative int64 labels (wrapped: 2^63 matched -2^63), `per_query=True` with only
clustering metrics was silently ignored, and the scatter's cosine normalised with one division, so
parallel rows (5u, 3u) were not the exact tie §1 makes them (the share below the diagonal 0.4 with
"0 tied", where R@1 is 0.6)."""

from __future__ import annotations

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.metrics import retrieval_metrics
from embedscope.metrics.neighbours import nearest_same_different
from embedscope.metrics.search import relevant_ranks


def test_uint64_labels_beyond_int64_against_int64_references():
    X = np.random.default_rng(0).normal(size=(3, 4))
    Xr = np.random.default_rng(1).normal(size=(4, 4))
    y = np.array([2 ** 63, 5, 7], dtype=np.uint64)
    yr = np.array([-(2 ** 63), 5, 7, 9], dtype=np.int64)  # the same bits as 2^63 once cast
    rr = relevant_ranks(X, y, X_ref=Xr, y_ref=yr)
    assert rr.R.tolist() == [0, 1, 1]
    got = retrieval_metrics(X, y, X_ref=Xr, y_ref=yr, include=["P@1"])
    assert got["n_lone"] == 1
    # 2^63 and 2^63 + 1 are two classes (as float64 they would be one)
    y2 = np.array([2 ** 63, 2 ** 63 + 1, 5], dtype=np.uint64)
    yr2 = np.array([2 ** 63 + 1, 2 ** 63 + 1, 5, 6], dtype=np.uint64)
    assert relevant_ranks(X, y2, X_ref=Xr, y_ref=yr2).R.tolist() == [0, 2, 1]


def test_per_query_needs_a_retrieval_metric():
    X = np.random.default_rng(0).normal(size=(20, 3))
    y = np.arange(20) % 4
    with pytest.raises(EmbedscopeError, match="per_query"):
        retrieval_metrics(X, y, include=["NMI"], per_query=True)


def test_scatter_parallel_rows_tie_exactly():
    u = np.array([4.0, 4.0, 6.0])
    q = np.array([8.0, 1.0, 8.0])
    X = np.array([q, 5 * u, 3 * u, -q, -q + [0, 0, 1]])
    y = np.array([0, 0, 1, 1, 1])
    s_same, s_diff = nearest_same_different(X, y)
    assert s_same[0] == s_diff[0]  # its nearest of its class (5u) and of the other (3u): one direction
    below = np.mean(s_diff < s_same)
    tied = np.mean(s_diff == s_same)
    r1 = retrieval_metrics(X, y, include=["R@1"], ks=[1])["R@1"]
    assert below <= r1 <= below + tied  # §10: the share below the diagonal is R@1 up to the tied points


def test_one_far_row_euclidean_ranks_the_others_exactly_or_is_refused():
    from brute import ranked_references

    rng = np.random.default_rng(4)
    X = rng.normal(size=(60, 4))
    y = rng.integers(0, 6, 60)
    for far, ok in ((1e100, True), (1e200, False)):
        Xf = np.vstack([X, np.full((1, 4), far)])
        yf = np.r_[y, 99]
        if not ok:  # the others' squared distances would underflow at the far row's scale: all tied
            with pytest.raises(EmbedscopeError, match="span"):
                retrieval_metrics(Xf, yf, metric="euclidean", include=["R@1"], ks=[1])
            with pytest.raises(EmbedscopeError, match="span"):
                nearest_same_different(Xf, yf, metric="euclidean")
            continue
        orders, yr = ranked_references(Xf, yf, metric="euclidean")
        want = np.mean([float(yr[o[0]] == yf[i]) for i, o in enumerate(orders) if np.sum(yf == yf[i]) > 1])
        assert retrieval_metrics(Xf, yf, metric="euclidean", include=["R@1"], ks=[1])["R@1"] == want


def test_scatter_of_float32_rows_with_one_far_row_keeps_the_others_digits():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(40, 3)).astype(np.float32)
    y = np.arange(40) % 4
    a, _ = nearest_same_different(X.astype(np.float64), y, metric="euclidean")  # (the rows' exact values)
    Xf = np.vstack([X, np.full((1, 3), 3e38, dtype=np.float32)])
    b, _ = nearest_same_different(Xf, np.r_[y, 9], metric="euclidean")
    # (scaled to the far row in float32, the others were subnormals: off by ~3e-7)
    np.testing.assert_allclose(b[:40], a, rtol=1e-13)
