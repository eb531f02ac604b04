"""Audit 30, retrieval at small scale, the next step (issue 18): CUB-like classes of tens go through the
filtered tile pass's labels mode (embedscope.metrics.search.rows._Rows._count_large: the relevant pairs
read off the sorted survivors), with the cost-sized floor sample; a symmetric tile's transposed half
grouped by a radix sort instead of a transposed mask; the rows whose floor came out too high recounted
all at once at the end. Every rank is the float64 brute force's (ties to the lower index)."""

import numpy as np
import pytest
from brute import assert_ranks_within_depth, relevant_ranks_reference

from embedscope.metrics import relevant_ranks, retrieval_metrics
from embedscope.metrics.search import rows, search_threads


def _cub_like(n=600, dim=8, seed=5, lo=30, hi=40):
    """Classes of lo-hi (tens of relevant pairs per query), identical rows within and across classes."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(lo, hi + 1, size=n // lo + 1)
    y = np.repeat(np.arange(sizes.size), sizes)[:n]
    X = rng.standard_normal((sizes.size, dim))[y] + 1.4 * rng.standard_normal((n, dim))
    X[7] = X[8]  # identical rows of one class: exact ties
    X[100:104] = X[300]  # ... and across classes
    return X, y


@pytest.fixture(scope="module")
def cub():
    X, y = _cub_like()
    out = {}
    for metric in ("cosine", "euclidean"):
        out[metric] = relevant_ranks_reference(X, y, metric=metric)
    return X, y, out


def test_large_mode_from_tens_of_pairs():
    """The labels mode from LARGE_PAIRS_PER_QUERY = 16 relevant pairs per query (CUB-like classes of
    60-80 were ranked pair by pair below 256); SOP-like classes (2-12, ~4 pairs) stay with _count."""
    assert rows.LARGE_PAIRS_PER_QUERY == 16
    assert rows.large_mode(np.full(50, 16), 2000)
    assert not rows.large_mode(np.full(50, 15), 2000)
    assert rows.large_mode(np.r_[np.zeros(50, int), np.full(50, 70)], 2000)  # (queries without pairs: not counted)
    sop = 1 + np.random.default_rng(0).binomial(10, 0.335, size=400)
    assert not rows.large_mode(sop, 2000)


@pytest.mark.parametrize("metric, threads", [("cosine", 1), ("cosine", 2), ("euclidean", 1)])
def test_cub_like_labels_mode_equals_brute_force(cub, metric, threads, monkeypatch):
    """Classes of 30-40 in query blocks of 128 (a same-set cosine search: symmetric tiles read both
    ways): the labels mode (_count_large, never _count), every survivor part grouped by row (the
    transposed half's too: rows non-decreasing, references increasing within a row, the order the
    transposed mask gave), the floors' sample the cost-sized one (_small_sample, larger than the
    labels mode's own), the ranks and retrieval_metrics' values those of the float64 brute force."""
    X, y, ref = cub
    seen = {"large": 0, "count": 0, "parts": 0}
    orig_large, orig_count, orig_add, orig_sample = (rows._Rows._count_large, rows._Rows._count, rows._Rows._add,
                                                     rows._Rows._sample)

    def large(self, *a):
        seen["large"] += 1
        return orig_large(self, *a)

    def count(self, *a):
        seen["count"] += 1
        return orig_count(self, *a)

    def add(self, blk, part):
        if len(part) == 4:
            r, ids = part[0].astype(np.int64), part[1].astype(np.int64)
            assert np.all(np.diff(r) >= 0)
            same = r[1:] == r[:-1]
            assert np.all(ids[1:][same] > ids[:-1][same])
            seen["parts"] += 1
        return orig_add(self, blk, part)

    def sample(self, Ra, seed):
        orig_sample(self, Ra, seed)
        seen["ns"] = self.sample.size

    monkeypatch.setattr(rows._Rows, "_count_large", large)
    monkeypatch.setattr(rows._Rows, "_count", count)
    monkeypatch.setattr(rows._Rows, "_add", add)
    monkeypatch.setattr(rows._Rows, "_sample", sample)
    with search_threads(threads):
        rr = relevant_ranks(X, y, metric=metric, block=128, device="cpu")
        m = retrieval_metrics(X, y, metric=metric, include=["P@1", "R-Precision", "MAP@R"], device="cpu",
                              block=128)
    assert_ranks_within_depth(rr, ref[metric])
    assert seen["large"] >= 5 and seen["count"] == 0
    assert seen["parts"] >= (15 if metric == "cosine" else 5)  # (5 blocks: 15 symmetric tiles, 10 both ways)
    depth = float(rr.R.max())
    n = len(X)
    own = min(np.ceil(rows.LARGE_SAMPLE_MEAN * n / depth), np.ceil(rows.SAMPLE_MAX_FRAC * n))
    assert seen["ns"] == rows._small_sample(depth, n, X.shape[1]) > own
    # the measures from the brute-force ranks (depth R_i each)
    p1, rp, mapr = [], [], []
    for rk, _ in ref[metric]:
        R = rk.size
        p1.append(float(rk[0] == 1))
        rp.append(np.count_nonzero(rk <= R) / R)
        inr = rk[rk <= R]
        mapr.append(np.sum(np.arange(1, inr.size + 1) / inr) / R)
    assert m["P@1"] == pytest.approx(np.mean(p1), abs=1e-12)
    assert m["R-Precision"] == pytest.approx(np.mean(rp), abs=1e-12)
    assert m["MAP@R"] == pytest.approx(np.mean(mapr), abs=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
def test_recounts_deferred_to_one_batch_at_the_end(cub, threads, monkeypatch):
    """Every 10th query's floor above all its keys (nothing survives: its rows must be recounted):
    the labels mode recounts them once every tile is done, the rows of all five blocks in one batch
    (a recount per block cost ~1.5 ms of fixed work each); then with floors from the largest sampled
    key (too high in most rows), in batches of at most a block's rows. The ranks stay exact."""
    X, y, ref = cub
    calls = []
    orig, orig_thr = rows._Rows._recount, rows._Rows.set_thresholds

    def recount(self, s, fail):
        calls.append((s, np.asarray(fail).copy(), list(self.remaining)))
        return orig(self, s, fail)

    def thresholds(self):
        self.floor[::10] = 10.0  # (cosine keys <= 1)
        orig_thr(self)

    monkeypatch.setattr(rows._Rows, "_recount", recount)
    monkeypatch.setattr(rows._Rows, "set_thresholds", thresholds)
    with search_threads(threads):
        rr = relevant_ranks(X, y, block=128, device="cpu")
    assert_ranks_within_depth(rr, ref["cosine"])
    assert len(calls) == 1
    s, fail, remaining = calls[0]
    assert s == 0 and all(r == 0 for r in remaining)  # at the end: every block complete
    assert np.isin(np.arange(0, len(X), 10), fail).all() and fail.size < 128  # (rows of blocks 0-4, a few more)
    assert np.all(np.diff(fail) > 0)
    # most rows: batches of a block's rows
    monkeypatch.setattr(rows._Rows, "set_thresholds", orig_thr)
    monkeypatch.setattr(rows, "_sample_ranks", lambda depth, ns, nr, dim, pairs=None: np.ones(depth.shape, np.int64))
    calls.clear()
    with search_threads(threads):
        rr = relevant_ranks(X, y, block=128, device="cpu")
    assert_ranks_within_depth(rr, ref["cosine"])
    n_rows = sum(c[1].size for c in calls)
    assert n_rows > 128 and len(calls) == -(-n_rows // 128)
    assert all(c[1].size == 128 for c in calls[:-1]) and all(r == 0 for c in calls for r in c[2])
