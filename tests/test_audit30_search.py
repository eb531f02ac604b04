"""Audit 30, retrieval at small scale (issue 18): the floors' sample of the filtered tile pass
(embedscope.metrics.search.rows) sized by cost at CUB-like 2,000-12,000 rows, and its query blocks
of at most 512 rows."""

import math

import numpy as np
import pytest
from brute import assert_ranks_within_depth, relevant_ranks_reference

from embedscope.metrics import relevant_ranks
from embedscope.metrics.search import rows, search_threads


def _model(depth, nr, dim):
    """_small_sample's minimum written out: d/dns [ns·row_ns + c·2.5·√(depth·nr/ns)] = 0."""
    row_ns = rows.ROW_NS[0] + rows.ROW_NS[1] * dim
    return (2.5 / 2 * rows.SMALL_SURVIVOR_NS * math.sqrt(depth * nr) / row_ns) ** (2 / 3)


@pytest.mark.parametrize("depth, nr, dim", [(70, 2000, 64), (70, 6000, 128), (70, 2000, 512), (20, 1000, 32)])
def test_small_sample_is_the_cost_minimum(depth, nr, dim):
    """The sample size minimises ns·row_ns + SMALL_SURVIVOR_NS·2.5·√(depth·nr/ns) (checked against a
    scan over every ns), capped at SMALL_SAMPLE_MAX_FRAC of the references."""
    ns = rows._small_sample(float(depth), nr, dim)
    row_ns = rows.ROW_NS[0] + rows.ROW_NS[1] * dim
    grid = np.arange(1, nr + 1, dtype=np.float64)
    cost = grid * row_ns + rows.SMALL_SURVIVOR_NS * 2.5 * np.sqrt(depth * nr / grid)
    best = int(grid[np.argmin(cost)])
    assert abs(_model(depth, nr, dim) - best) <= 1.0
    assert ns == min(int(_model(depth, nr, dim)), int(rows.SMALL_SAMPLE_MAX_FRAC * nr))


def test_small_sample_regimes():
    """CUB-like 2,000 x 64 (depth ~70): ~500 sampled (the old share gave 125); 60,000 x 128 and
    12,000 x 512: below the old share (3,750 and 750), which then stands; SOP-like depths (~5): none."""
    assert 450 <= rows._small_sample(70.0, 2000, 64) <= 500
    assert rows._small_sample(70.0, 60000, 128) < 60000 / 16
    assert rows._small_sample(70.0, 12000, 512) < 12000 / 16
    assert rows._small_sample(5.0, 2000, 64) == 0
    assert rows._small_sample(rows.SMALL_SAMPLE_MIN_DEPTH - 0.5, 2000, 64) == 0
    assert rows._small_sample(500.0, 100, 8) == 25  # capped at a quarter


def _cub_like(n=1200, dim=24, seed=3):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(50, 71, size=n // 60 + 1)
    y = np.repeat(np.arange(sizes.size), sizes)[:n]
    X = rng.standard_normal((sizes.size, dim))[y] + 1.6 * rng.standard_normal((n, dim))
    X[7] = X[8]  # identical rows: exact ties
    return X, y


@pytest.fixture(scope="module")
def cub_brute():
    X, y = _cub_like()
    return X, y, relevant_ranks_reference(X, y)


def test_small_set_sample_fewer_survivors_same_ranks(cub_brute, monkeypatch):
    """A CUB-like 1,200-row set (classes of 50-70, depth R_i): the pass samples max(the old share,
    _small_sample) references for its floors, lets fewer references survive than with the old share
    alone, and ranks every relevant pair as the float64 brute force does (ties to the lower index).
    On one thread its query blocks hold 512 rows (BLOCK; 1,024 before, which cost 25-30% more CPU
    at 2,000 rows): 512, 512, 176."""
    X, y, ref = cub_brute
    seen = {}
    orig_sample, orig_count, orig_thr = rows._Rows._sample, rows._Rows._count, rows._Rows.set_thresholds

    def sample(self, Ra, seed):
        orig_sample(self, Ra, seed)
        seen["ns"] = self.sample.size

    def thresholds(self):
        seen["blocks"] = list(self.blocks)
        return orig_thr(self)

    def count(self, s, rws, tau, r, ids, v):
        seen["surv"] = seen.get("surv", 0) + r.size
        return orig_count(self, s, rws, tau, r, ids, v)

    monkeypatch.setattr(rows._Rows, "_sample", sample)
    monkeypatch.setattr(rows._Rows, "_count", count)
    monkeypatch.setattr(rows._Rows, "set_thresholds", thresholds)
    monkeypatch.setattr(rows, "LARGE_PAIRS_PER_QUERY", 256)  # (_count; the labels mode: test_audit30_floor.py)
    out = {}
    for frac in (0.0, rows.SMALL_SAMPLE_MAX_FRAC):  # 0: the old share alone
        monkeypatch.setattr(rows, "SMALL_SAMPLE_MAX_FRAC", frac)
        seen.clear()
        with search_threads(1):
            rr = relevant_ranks(X, y, device="cpu")
        out[frac] = dict(seen)
        assert_ranks_within_depth(rr, ref)
    depth = float(max(len(r[0]) for r in ref))  # (depth None: max R_i for every query)
    old_ns = min(math.ceil(rows.SAMPLE_MEAN * len(X) / depth), math.ceil(rows.SAMPLE_MAX_FRAC * len(X)))
    assert out[0.0]["blocks"] == [(0, 512), (512, 1024), (1024, 1200)]
    assert out[0.0]["ns"] == old_ns
    assert out[rows.SMALL_SAMPLE_MAX_FRAC]["ns"] == rows._small_sample(depth, len(X), X.shape[1]) > old_ns
    assert out[rows.SMALL_SAMPLE_MAX_FRAC]["surv"] < 0.85 * out[0.0]["surv"]


@pytest.mark.parametrize("pass_", ["rows", "counting"])
def test_one_search_thread_runs_its_gemms_on_one_blas_thread(pass_, monkeypatch):
    """With ``search_threads(1)`` the calling thread runs every tile GEMM of the filtered tile pass
    (rows.py) and of the counting pass (counting.py) with one BLAS thread, as their worker threads
    do: a multi-threaded BLAS on small tiles spun (CUB-like 2,000-6,000 rows: 2-2.8x the CPU time,
    the counting pass at 17,000 x 32 2x). Even where the caller allowed more, which is restored
    after; the ranks are the brute force's."""
    from threadpoolctl import ThreadpoolController, threadpool_info, threadpool_limits

    from embedscope.metrics.search import counting, ranks, threads

    if not any(m["user_api"] == "blas" for m in threadpool_info()):  # pragma: no cover - numpy without BLAS
        pytest.skip("no BLAS library seen by threadpoolctl")
    if pass_ == "counting":  # not the tile pass: the counting pass, from a few references on
        monkeypatch.setattr(ranks, "COUNT_MIN_REFS", 0)
        monkeypatch.setattr(ranks, "COUNT_MIN_RATIO", 0)
        monkeypatch.setattr(ranks, "USE_ROWS", False)
    seen = []
    orig = counting.TileGemm.__call__

    def call(self, *a, **k):
        if not seen:  # numpy's BLAS, loaded before embedscope: known to the search's cached controller (a
            # library loaded after it, e.g. by another test, is not limited by it, and numpy does not use it)
            ctl = threads._BLAS or ThreadpoolController()
            seen.append(max(m["num_threads"] for m in ctl.select(user_api="blas").info()))
        return orig(self, *a, **k)

    monkeypatch.setattr(counting.TileGemm, "__call__", call)
    passes = []
    for mod, name, label in ((rows, "relevant_ranks_by_rows", "rows"), (counting, "relevant_ranks_by_count", "counting")):
        def spy(*a, _f=getattr(mod, name), _n=label, **k):
            passes.append(_n)
            return _f(*a, **k)

        monkeypatch.setattr(mod, name, spy)
    X, y = _cub_like(n=400, dim=12, seed=4)
    with threadpool_limits(limits=2, user_api="blas"):
        with search_threads(1):
            rr = relevant_ranks(X, y, depth=30, device="cpu")
        after = max(m["num_threads"] for m in threadpool_info() if m["user_api"] == "blas")
    assert passes == [pass_]
    assert seen == [1]
    assert after == 2
    assert_ranks_within_depth(rr, relevant_ranks_reference(X, y), depth=30, queries=range(0, len(X), 7))
