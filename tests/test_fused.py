"""The fused counting pass (embedscope/metrics/search/fused.py and its C extension): the same exact ranks
as the brute-force float64 reference and as the numpy passes, on every branch of the kernel (the sampled
floor and both of its fallbacks, near ties within the float32 error bound, exact ties, lone queries,
separate references, per-query depths, several threads and block sizes), and the per-query sums of the
measures bit for bit."""

import shutil
import sysconfig

import numpy as np
import pytest

from embedscope.device import compute_device
from embedscope.metrics import retrieval_metrics
from embedscope.metrics.search import fused, relevant_ranks
from embedscope.metrics.search import ranks as rk
from embedscope.metrics.search.knn import KeySpace
from embedscope.metrics.search.threads import search_threads
from tests.brute import assert_ranks_within_depth, relevant_ranks_reference

needs_ext = pytest.mark.skipif(not fused.available(), reason="the C extension was not built")


def _set(n, dim, classes, noise, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    X = rng.standard_normal((classes, dim))[y] + noise * rng.standard_normal((n, dim))
    return X.astype(np.float32), y


def _both(X, y, **kw):
    """(fused, numpy passes) relevant ranks of one search, asserting that the fused pass ran."""
    sets = rk.check_sets(X, y, kw.get("X_ref"), kw.get("y_ref"))
    Q64, R64 = sets.prepared("cosine")
    assert fused.fused_plan(compute_device("cpu"), KeySpace(Q64, R64, "cosine", sets.same), np.array([1]))
    a = relevant_ranks(X, y, device="cpu", **kw)
    with fused.disabled():
        b = relevant_ranks(X, y, device="cpu", **kw)
    return a, b


def _same(a, b):
    np.testing.assert_array_equal(a.offsets, b.offsets)
    np.testing.assert_array_equal(a.ranks, b.ranks)
    np.testing.assert_array_equal(a.refs, b.refs)


def test_extension_is_built_where_a_compiler_is():
    """`make setup` compiles the extension (pyproject's ext-modules); without it every search falls back
    to the numpy passes silently, so a broken build would go unnoticed but for this test."""
    if not (shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc")
            or shutil.which("cc")):
        pytest.skip("no C compiler here")
    assert fused.available()


@needs_ext
@pytest.mark.parametrize("depth", ["R", 1, 3, 40, 300])
@pytest.mark.parametrize("noise", [0.6, 2.5])
def test_brute_force_reference(depth, noise):
    """Ranks equal the float64 brute force (lexsort of the keys, lower index first) within the depth."""
    X, y = _set(600, 16, 8, noise, seed=int(noise * 10))
    ref = relevant_ranks_reference(X, y)
    rr = relevant_ranks(X, y, depth=depth, device="cpu")
    d = int(rr.R.max()) if depth == "R" else depth
    assert_ranks_within_depth(rr, ref, depth=d)
    for i in range(len(y)):  # beyond the depth: inf, in reference-index order
        a, b = rr.offsets[i], rr.offsets[i + 1]
        tail = rr.ranks[a:b] > d
        assert np.all(np.isinf(rr.ranks[a:b][tail]))
        assert np.all(np.diff(rr.refs[a:b][tail]) > 0)


@needs_ext
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_the_numpy_passes(seed):
    X, y = _set(2500, 32, 35, 1.5 + seed, seed=seed)
    a, b = _both(X, y)
    _same(a, b)
    depth_q = np.clip(a.R, 1, None)
    sets = rk.check_sets(X, y)
    got = rk.compute_relevant_ranks(sets, "cosine", depth_q, device="cpu")
    with fused.disabled():
        want = rk.compute_relevant_ranks(rk.check_sets(X, y), "cosine", depth_q, device="cpu")
    _same(got, want)


@needs_ext
def test_ties_exact_and_near():
    """Duplicated rows (exact ties, within and across classes: the lower index first) and rows that differ
    by far less than the float32 error bound (ordered by their float64 keys)."""
    rng = np.random.default_rng(5)
    base = rng.standard_normal((40, 24))
    X = np.repeat(base, 6, axis=0)  # 6 identical copies of each row
    y = np.tile(np.arange(6), 40)  # ... in 6 different classes
    X[::7] += 1e-9 * rng.standard_normal((X[::7].shape[0], 24))  # near ties: 1e-9 << the ~1e-6 bound
    ref = relevant_ranks_reference(X, y)
    rr = relevant_ranks(X, y, depth="all", device="cpu")
    assert_ranks_within_depth(rr, ref, depth=len(y) - 1)
    a, b = _both(X, y, depth="all")
    _same(a, b)


@needs_ext
def test_sampled_floor_falls_back():
    """References at every 8th index keyed highest make the sampled estimate of the depth-th key too high:
    the count refutes it and the pass takes the depth-th relevant key (depth R_i) or a histogram of every
    key (a depth beyond the relevant set)."""
    rng = np.random.default_rng(3)
    dim, n = 16, 1600
    q = np.zeros(dim)
    q[0] = 1.0
    X = rng.standard_normal((n, dim)) * 0.3
    high = np.arange(0, n, 8)
    X[high, 0] += 6.0  # keyed near 1 against queries along e0
    y = np.full(n, 1)
    y[high] = 2
    rel = np.setdiff1d(np.arange(n), high)[:300]  # class 0: the queries along e0 and medium keys
    X[rel] = q * 1.0 + rng.standard_normal((300, dim)) * 0.8
    y[rel] = 0
    ref = relevant_ranks_reference(X, y)
    for depth in ("R", 1000):
        rr = relevant_ranks(X, y, depth=depth, device="cpu")
        assert_ranks_within_depth(rr, ref, depth=int(rr.R.max()) if depth == "R" else depth)
        a, b = _both(X, y, depth=depth)
        _same(a, b)


@needs_ext
def test_lone_absent_and_separate_references():
    X, y = _set(900, 20, 30, 1.8, seed=9)
    y[:5] = 1000 + np.arange(5)  # lone queries: classes of one
    Xq, yq = _set(300, 20, 30, 1.8, seed=10)
    yq[:3] = 5000  # a class the references lack
    a, b = _both(Xq, yq, X_ref=X, y_ref=y)
    _same(a, b)
    assert a.R[:3].tolist() == [0, 0, 0]
    a, b = _both(X, y)
    _same(a, b)
    assert a.R[:5].tolist() == [0] * 5


@needs_ext
def test_threads_and_blocks_do_not_change_the_ranks():
    X, y = _set(1500, 24, 20, 2.0, seed=4)
    sets = rk.check_sets(X, y)
    Q64, R64 = sets.prepared("cosine")
    ks = KeySpace(Q64, R64, "cosine", True)
    lay = rk._Layout(sets.y, sets.y_ref, True)
    want = fused.relevant_ranks_fused(ks, lay, lay.R, threads=1)
    for threads, block in ((2, None), (2, 7), (3, 100), (1, 1)):
        got = fused.relevant_ranks_fused(ks, lay, lay.R, threads=threads, block=block)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    with search_threads(1):
        a = retrieval_metrics(X, y, include=["P@1", "R-Precision", "MAP@R"], device="cpu")
    b = retrieval_metrics(X, y, include=["P@1", "R-Precision", "MAP@R"], device="cpu")
    assert a == b


@needs_ext
def test_metrics_equal_the_numpy_passes_bit_for_bit():
    """P@1, R-Precision and MAP@R (the compiled per-query sums included) equal the numpy passes'."""
    X, y = _set(3000, 48, 45, 2.2, seed=11)
    keys = ["P@1", "R-Precision", "MAP@R", "mAP@C", "R@k"]
    a = retrieval_metrics(X, y, include=keys, device="cpu")
    with fused.disabled():
        b = retrieval_metrics(X, y, include=keys, device="cpu")
    assert a == b


@needs_ext
def test_rank_sums_equal_the_numpy_loops():
    rng = np.random.default_rng(2)
    R = rng.integers(0, 9, 500)
    offsets = np.zeros(501, dtype=np.int64)
    np.cumsum(R, out=offsets[1:])
    ranks = np.concatenate([np.sort(rng.choice(np.arange(1, 40), r, replace=False)).astype(float) for r in R])
    ranks[rng.random(ranks.size) < 0.2] = np.inf
    for i in range(500):  # ranks increase within a query, inf last
        a, b = offsets[i], offsets[i + 1]
        ranks[a:b] = np.sort(ranks[a:b])
    rr = rk.RelevantRanks(R=R, lone=R == 0, depth=40, n_avail=1000, offsets=offsets, ranks=ranks,
                          refs=np.zeros(ranks.size, dtype=np.int64))
    lim = rng.integers(1, 40, 500).astype(float)
    hits, psum = fused.rank_sums(offsets, ranks, lim)
    with fused.disabled():
        np.testing.assert_array_equal(hits, rr.hits(lim))
        np.testing.assert_array_equal(psum, rr.precision_sum(lim))
    np.testing.assert_array_equal(rr.hits(lim), hits)  # (through the compiled sums)
    np.testing.assert_array_equal(rr.precision_sum(lim), psum)


def test_not_used_where_it_does_not_apply(monkeypatch):
    """Euclidean and centred searches, and a build without the extension, rank with the numpy passes."""
    X, y = _set(400, 8, 6, 1.0, seed=1)
    cpu = compute_device("cpu")
    sets = rk.check_sets(X, y)
    Q64, R64 = sets.prepared("euclidean")
    assert not fused.fused_plan(cpu, KeySpace(Q64, R64, "euclidean", True), np.array([5]))
    sets = rk.check_sets(X, y)
    Q64, R64 = sets.prepared("cosine")
    assert not fused.fused_plan(cpu, KeySpace(Q64, R64, "cosine", True, centre=True), np.array([5]))
    want = relevant_ranks(X, y, device="cpu")
    monkeypatch.setattr(fused, "_fused", None)
    assert not fused.available()
    got = relevant_ranks(X, y, device="cpu")
    _same(got, want)
    assert retrieval_metrics(X, y, device="cpu") == retrieval_metrics(X, y, device="cpu")


@needs_ext
def test_inconsistent_arguments_are_refused():
    G = np.zeros((2, 4), dtype=np.float32)
    i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    f64 = lambda *v: np.array(v, dtype=np.float64)  # noqa: E731
    args = [G, 2, 4, 0, 2, 1, 1, 4, True, 1e-14, i64(0, 0), i64(0, 0, 0, 0), i64(0, 1, 2, 3), i64(0), i64(4),
            i64(1, 1), i64(0, 2, 4), f64(1e-6, 1e-6), np.zeros(2), np.zeros(4), np.zeros(4), np.zeros(4, dtype=np.int64),
            np.zeros(2, dtype=np.uint8)]
    with pytest.raises(ValueError, match="class layout"):  # offsets give 2 pairs a query; the class holds 4 - 1
        fused._fused.count_rows(*args)
    args[4] = 1  # fewer queries than the block claims
    with pytest.raises(ValueError, match="sizes"):
        fused._fused.count_rows(*args)
    args[4] = 2
    args[20] = np.zeros(2)  # an output too short
    with pytest.raises(ValueError, match="out_rank"):
        fused._fused.count_rows(*args)
    args[20] = np.zeros(4)
    args[7], args[16] = 6, i64(0, 3, 6)  # (consistent now) ...
    args[20], args[21] = np.zeros(6), np.zeros(6, dtype=np.int64)
    fused._fused.count_rows(*args)
    for bad in (i64(0, 1, 2, 4), i64(-1, 1, 2, 3)):  # ... but a reference index out of range (was read out of
        args[12] = bad  # bounds: found with AddressSanitizer)
        with pytest.raises(ValueError, match="class layout"):
            fused._fused.count_rows(*args)


@needs_ext
def test_compact_result_as_the_tile_pass_gives_it():
    """retrieval_metrics asks for a compact result: with classes of tens the fused pass gives it as the tile
    pass does (only the ranks within each query's depth), lone queries at the end included."""
    X, y = _set(1200, 16, 12, 2.0, seed=6)
    y[-3:] = [900, 901, 902]  # lone queries last (no pairs at the end of the layout)
    sets = rk.check_sets(X, y)
    R = rk.relevant_counts(sets)
    a = rk.compute_relevant_ranks(sets, "cosine", R.clip(1), compact=True, device="cpu")
    with fused.disabled():
        b = rk.compute_relevant_ranks(rk.check_sets(X, y), "cosine", R.clip(1), compact=True, device="cpu")
    assert a.n_ranked is not None and b.n_ranked is not None
    for f in ("offsets", "ranks", "refs", "n_ranked"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))


@needs_ext
def test_numpy_gemm_without_torch_gives_the_same_ranks(monkeypatch):
    """Where torch is not imported (a CPU-only `embedscope evaluate`: importing it costs seconds) the blocks'
    GEMM is numpy's: the same ranks as with torch's."""
    import sys

    import torch  # noqa: F401 (the first search by torch's GEMM)

    X, y = _set(1500, 24, 20, 2.0, seed=12)
    want = relevant_ranks(X, y, device="cpu")
    monkeypatch.delitem(sys.modules, "torch")
    got = relevant_ranks(X, y, device="cpu")
    assert "torch" not in sys.modules
    _same(got, want)
