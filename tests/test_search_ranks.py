"""relevant_ranks (the rank engine of docs/methods.md §1) against a brute-force full sort."""

import numpy as np
import pytest
from brute import ranked_references

from embedscope.errors import EmbedscopeError
from embedscope.metrics import relevant_ranks
from embedscope.metrics.search import search_threads


def brute_ranks(X, y, Xr=None, yr=None, metric="cosine"):
    """Per query: the 1-based ranks (float64 keys, ties to the lower index) of its relevant
    references, ascending, and those references."""
    orders, yr = ranked_references(X, y, Xr, yr, metric)
    out = []
    for i, order in enumerate(orders):
        pos = np.flatnonzero(yr[order] == y[i])
        out.append((pos + 1.0, order[pos]))
    return out


def _data(seed, n=260, d=5, n_cls=12):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = rng.integers(0, n_cls, n)
    X[10] = X[3]
    X[20:30] = X[31]  # a block of identical rows across classes: exact ties
    X[40] = X[41]
    y[-1] = 1000  # lone
    return X, y


def _check(rr, ref, depth):
    assert rr.offsets[-1] == rr.ranks.size == rr.refs.size
    for i, (rk, rf) in enumerate(ref):
        a, b = rr.offsets[i], rr.offsets[i + 1]
        assert b - a == rr.R[i] == rk.size
        within = rk <= depth
        np.testing.assert_array_equal(rr.ranks[a:b][within], rk[within])
        np.testing.assert_array_equal(rr.refs[a:b][within], rf[within])
        assert np.all(np.isinf(rr.ranks[a:b][~within]))
        np.testing.assert_array_equal(rr.refs[a:b][~within], np.sort(rf[~within]))  # index order


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("depth", [None, 7, "all"])
def test_ranks_same_set(metric, depth):
    X, y = _data(0)
    ref = brute_ranks(X, y, metric=metric)
    rr = relevant_ranks(X, y, metric=metric, depth=depth, block=64)
    d = {None: max(len(r[0]) for r in ref), 7: 7, "all": len(X) - 1}[depth]
    assert rr.depth == d and rr.n_avail == len(X) - 1
    assert rr.lone[-1] and rr.lone.sum() == 1
    _check(rr, ref, d)
    # the methods the measures read, against the lists
    fr = np.array([r[0][0] if r[0].size and r[0][0] <= d else np.inf for r in ref])
    np.testing.assert_array_equal(rr.first_rank(), fr)
    lim = np.minimum(rr.R, d)
    np.testing.assert_array_equal(rr.hits(lim), [np.sum(r[0] <= c) for r, c in zip(ref, lim)])
    ps = [np.sum((np.arange(1, r[0].size + 1) / r[0])[r[0] <= c]) for r, c in zip(ref, lim)]
    np.testing.assert_allclose(rr.precision_sum(lim), ps, rtol=0, atol=1e-12)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_ranks_separate_sets(metric):
    X, y = _data(1, n=90)
    Xr, yr = _data(2, n=200)
    Xr[5] = Xr[6] = X[7]  # references equal to a query: nothing is excluded
    ref = brute_ranks(X, y, Xr, yr, metric=metric)
    rr = relevant_ranks(X, y, X_ref=Xr, y_ref=yr, metric=metric, depth=40)
    assert rr.n_avail == 200
    _check(rr, ref, 40)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_counting_pass_gives_the_same_ranks(metric, monkeypatch):
    from embedscope.metrics.search import counting, ranks

    X, y = _data(3, n=400, n_cls=40)
    a = relevant_ranks(X, y, metric=metric, depth=50)
    monkeypatch.setattr(ranks, "COUNT_MIN_REFS", 0)
    monkeypatch.setattr(ranks, "COUNT_MIN_RATIO", 0)
    monkeypatch.setattr(ranks, "USE_ROWS", False)  # the counting pass, not the full-row tiles
    monkeypatch.setattr(counting, "REF_TILE", 57)
    monkeypatch.setattr(counting, "QUERY_BLOCK", 61)
    b = relevant_ranks(X, y, metric=metric, depth=50, device="cpu")
    np.testing.assert_array_equal(a.ranks, b.ranks)
    np.testing.assert_array_equal(a.refs, b.refs)
    _check(b, brute_ranks(X, y, metric=metric), 50)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("same", [True, False])
def test_hits_at_R_with_large_relevant_sets(metric, same):
    # property-like labels: 3 values, R_i in the hundreds; ties straddle the R_i-th place
    rng = np.random.default_rng(4)
    X = rng.standard_normal((700, 4))
    y = rng.integers(0, 3, 700)
    X[100:160] = X[99]
    y[5] = 7  # lone
    kw, Xr, yr = {}, None, None
    if not same:
        Xr, yr = X[300:], y[300:]
        X, y = X[:300], y[:300]
        kw = dict(X_ref=Xr, y_ref=yr)
    ref = brute_ranks(X, y, Xr, yr, metric=metric)
    rr = relevant_ranks(X, y, metric=metric, output="hits", block=128, **kw)
    want = [int(np.sum(rk <= rk.size)) for rk, _ in ref]
    np.testing.assert_array_equal(rr.hits_at_R, want)
    np.testing.assert_array_equal(rr.R, [r[0].size for r in ref])
    np.testing.assert_array_equal(rr.hits(rr.R), want)
    full = relevant_ranks(X, y, metric=metric, **kw)  # the pair path agrees
    np.testing.assert_array_equal(full.hits(full.R), want)
    with pytest.raises(EmbedscopeError, match="output='hits'"):
        rr.first_rank()


def test_validation():
    X, y = _data(5, n=60)
    with pytest.raises(EmbedscopeError, match="depth"):
        relevant_ranks(X, y, depth=0)
    with pytest.raises(EmbedscopeError, match="output"):
        relevant_ranks(X, y, output="matrix")
    with pytest.raises(EmbedscopeError, match="both X_ref"):
        relevant_ranks(X, y, X_ref=X)
    rr = relevant_ranks(X, y, depth=3)
    with pytest.raises(EmbedscopeError, match="beyond the depth"):
        rr.hits(10)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_hits_at_R_when_ties_straddle_the_cut(metric):
    # points on a small integer grid: nearly every distance is shared by many references, so
    # the R_i-th place falls inside a tie group and the lower indices must win it
    rng = np.random.default_rng(8)
    X = rng.integers(1, 4, (300, 2)).astype(float)
    y = rng.integers(0, 3, 300)
    ref = brute_ranks(X, y, metric=metric)
    rr = relevant_ranks(X, y, metric=metric, output="hits")
    np.testing.assert_array_equal(rr.hits_at_R, [int(np.sum(rk <= rk.size)) for rk, _ in ref])


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("estimate,gemm_windows", [(False, False), (True, False), (True, True)])
def test_counting_pass_key_estimates_and_window_gemm(metric, estimate, gemm_windows, monkeypatch):
    # every way the counting pass obtains float64 keys (per pair; class-GEMM estimates with the
    # windows' keys per pair or from a block GEMM) gives the brute-force ranks, exact ties included
    from embedscope.metrics.search import counting, ranks

    monkeypatch.setattr(ranks, "COUNT_MIN_REFS", 0)
    monkeypatch.setattr(ranks, "COUNT_MIN_RATIO", 0)
    monkeypatch.setattr(ranks, "USE_ROWS", False)  # the counting pass, not the full-row tiles
    monkeypatch.setattr(ranks, "ESTIMATE_MIN_PAIRS_PER_QUERY", 0 if estimate else 10**9)
    monkeypatch.setattr(counting, "GEMM_WINDOW_RATIO", 10**9 if gemm_windows else 0)
    monkeypatch.setattr(counting, "REF_TILE", 57)
    monkeypatch.setattr(counting, "QUERY_BLOCK", 61)
    X, y = _data(6, n=300, n_cls=15)
    X[100:140] = X[99]  # a block of duplicates across classes: windows full of exact ties
    X[200:203] = X[201] * (1 + 1e-15)  # and keys equal up to float64 rounding
    rr = relevant_ranks(X, y, metric=metric, depth=60, device="cpu")
    _check(rr, brute_ranks(X, y, metric=metric), 60)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("pending", [1, 1 << 22])
def test_counting_pass_with_chunked_tile_gemms(metric, pending, monkeypatch):
    # the tile GEMM summed over chunks of the inner dimension (large-D cosine searches), with its
    # tighter error bound, gives the brute-force ranks, exact ties included (Euclidean: one chunk)
    from embedscope.metrics.search import counting, ranks

    monkeypatch.setattr(ranks, "COUNT_MIN_REFS", 0)
    monkeypatch.setattr(ranks, "COUNT_MIN_RATIO", 0)
    monkeypatch.setattr(ranks, "USE_ROWS", False)  # the counting pass, not the full-row tiles
    monkeypatch.setattr(counting, "PENDING", pending)  # survivors counted per tile, or per block at the end
    monkeypatch.setattr(counting, "K_CHUNK", 2)
    monkeypatch.setattr(counting, "CHUNK_MIN_DIM", 0)
    monkeypatch.setattr(counting, "CHUNK_SMALL_REFS", 0)  # K_CHUNK columns whatever the number of references
    monkeypatch.setattr(counting, "REF_TILE", 57)
    monkeypatch.setattr(counting, "QUERY_BLOCK", 61)
    used = []
    orig = counting.k_chunks
    monkeypatch.setattr(counting, "k_chunks", lambda *a, **k: used.append(orig(*a, **k)) or used[-1])
    X, y = _data(7, n=300, n_cls=15)
    X[100:140] = X[99]
    X[200:203] = X[201] * (1 + 1e-15)
    rr = relevant_ranks(X, y, metric=metric, depth=60, device="cpu")
    _check(rr, brute_ranks(X, y, metric=metric), 60)
    assert used[-1] == ([(0, 2), (2, 4), (4, 5)] if metric == "cosine" else [(0, 6)])


def test_chunks_halve_over_few_references():
    # K_CHUNK columns per chunk; half as many over at most CHUNK_SMALL_REFS references (cosine, D >=
    # CHUNK_MIN_DIM); one chunk below that dimension, and for Euclidean keys (the augmented column)
    from embedscope.metrics.search import counting
    from embedscope.metrics.search.knn import KeySpace

    rng = np.random.default_rng(0)
    for n, d, metric, expect in [(counting.CHUNK_SMALL_REFS, 1024, "cosine", 256),
                                 (counting.CHUNK_SMALL_REFS + 1, 1024, "cosine", 512),
                                 (100, counting.CHUNK_MIN_DIM - 1, "cosine", counting.CHUNK_MIN_DIM - 1),
                                 (100, 1024, "euclidean", 1025)]:
        X = rng.standard_normal((n, d))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        ch = counting.k_chunks(KeySpace(X, X, metric, True))
        assert {b - a for a, b in ch} == {expect} and ch[-1][1] == d + (metric == "euclidean")


def test_chunked_tile_error_bound_holds():
    # the bound of tile_delta covers the float32 chunked GEMM's error on nonnegative data (where
    # rounding errors do not cancel); the one-chunk bound is the classical (D + 16) u ‖q‖‖r‖
    from embedscope.metrics.search import counting
    from embedscope.metrics.search.knn import KeySpace, prepare

    rng = np.random.default_rng(0)
    X = prepare(rng.random((64, 2048)) + np.linspace(0, 1, 2048), "cosine")
    ks = KeySpace(X, X, "cosine", True)
    chunks = counting.k_chunks(ks, 256)
    assert len(chunks) == 8 and all(b - a == 256 for a, b in chunks)
    T = sum((X[:, a:b].astype(np.float32) @ X[:, a:b].astype(np.float32).T for a, b in chunks[1:]),
            start=X[:, :256].astype(np.float32) @ X[:, :256].astype(np.float32).T)
    err = np.abs(T.astype(np.float64) - X @ X.T).max(axis=1)
    d8 = counting.tile_delta(ks, chunks)
    assert np.all(err <= d8) and np.all(d8 < counting.tile_delta(ks) / 7)


def test_pair_keys_are_bitwise_pair_keys64(monkeypatch):
    from embedscope.metrics.search import counting
    from embedscope.metrics.search.knn import pair_keys64

    rng = np.random.default_rng(2)
    Q, R = rng.standard_normal((50, 37)), rng.standard_normal((60, 37))
    qi, rj = rng.integers(0, 50, 999), rng.integers(0, 60, 999)
    monkeypatch.setattr(counting, "PAIR_KEY_ELEMS", 300)
    for metric in ("cosine", "euclidean"):
        np.testing.assert_array_equal(counting.pair_keys(Q, R, qi, rj, metric), pair_keys64(Q, R, qi, rj, metric))


# ----------------------------------------------------------------------------- full-row tiles (rows.py)
@pytest.fixture
def rows_spy(monkeypatch):
    """Count the full-row pass's calls and the rows it recounted from their exact floor."""
    from embedscope.metrics.search import rows

    calls = {"pass": 0, "recounted": 0}
    orig_pass, orig_count = rows.relevant_ranks_by_rows, rows._Rows._count
    # classes of ~30-40 through _count (each pair placed by a binary search), as these tests are meant;
    # from LARGE_PAIRS_PER_QUERY pairs on they go to _count_large (tests/test_audit30_floor.py)
    monkeypatch.setattr(rows, "LARGE_PAIRS_PER_QUERY", 256)

    def spy_pass(*a, **k):
        calls["pass"] += 1
        return orig_pass(*a, **k)

    def spy_count(self, *a):
        out = orig_count(self, *a)
        calls["recounted"] += out.size  # rows whose floor was too high: recounted from the exact one
        return out

    monkeypatch.setattr(rows, "relevant_ranks_by_rows", spy_pass)
    monkeypatch.setattr(rows._Rows, "_count", spy_count)
    return calls


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("block", [23, 64, None])
def test_full_row_tiles_equal_brute_force(metric, block, rows_spy):
    # blocks of 23 queries: many symmetric tiles read both ways, ragged last block; ties across classes
    X, y = _data(8, n=330, n_cls=9)  # classes of ~37: the shape of CUB/CARS test sets, scaled down
    for depth in (None, 5, "all"):
        rr = relevant_ranks(X, y, metric=metric, depth=depth, block=block, device="cpu")
        d = {None: int(rr.R.max()), 5: 5, "all": len(X) - 1}[depth]
        _check(rr, brute_ranks(X, y, metric=metric), d)
    assert rows_spy["pass"] == 3


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_full_row_tiles_blocks_ranked_in_halves_by_two_workers(metric, rows_spy, monkeypatch):
    """A completed block's second half of rows goes to another worker (uneven halves of a
    ragged last block, a recount in each half); the ranks stay exact."""
    from embedscope.metrics.search import rows

    monkeypatch.setattr(rows, "SPLIT_MIN_ROWS", 4)
    monkeypatch.setattr(rows, "_sample_ranks", lambda depth, ns, nr, dim, pairs=None: np.ones(depth.shape, np.int64))
    halves = {"n": 0}
    orig = rows._Rows._finish_rows

    def spy(self, s, h0, h1, *a):
        halves["n"] += h0 > 0
        return orig(self, s, h0, h1, *a)

    monkeypatch.setattr(rows._Rows, "_finish_rows", spy)
    X, y = _data(14, n=330, n_cls=9)
    X[66] = X[67]  # an exact tie across the halves of block 1 (queries 45..66 | 67..89)
    with search_threads(2):  # two workers whatever the machine
        rr = relevant_ranks(X, y, metric=metric, block=45, device="cpu")
    _check(rr, brute_ranks(X, y, metric=metric), int(rr.R.max()))
    assert halves["n"] == 8  # every block of 45 (and the last, of 15) ranked in two halves
    assert rows_spy["recounted"] > 0


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_full_row_tiles_separate_sets(metric, rows_spy, monkeypatch):
    from embedscope.metrics.search import rows

    monkeypatch.setattr(rows, "REF_TILE", 41)  # many reference tiles per query block
    X, y = _data(9, n=150, n_cls=6)
    Xr, yr = _data(10, n=260, n_cls=6)
    Xr[5] = Xr[6] = X[7]
    rr = relevant_ranks(X, y, X_ref=Xr, y_ref=yr, metric=metric, depth=50, block=32, device="cpu")
    _check(rr, brute_ranks(X, y, Xr, yr, metric=metric), 50)
    assert rows_spy["pass"] == 1


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_full_row_tiles_recount_rows_whose_floor_is_too_high(metric, rows_spy, monkeypatch):
    from embedscope.metrics.search import rows

    # floors from the largest sampled key: above the depth-th key in most rows
    monkeypatch.setattr(rows, "_sample_ranks", lambda depth, ns, nr, dim, pairs=None: np.ones(depth.shape, np.int64))
    monkeypatch.setattr(rows, "SAMPLE_MEAN", 4.0)
    X, y = _data(11, n=400, n_cls=10)
    rr = relevant_ranks(X, y, metric=metric, block=50, device="cpu")
    _check(rr, brute_ranks(X, y, metric=metric), int(rr.R.max()))
    assert rows_spy["recounted"] > 100


@pytest.mark.parametrize("estimate", [True, False])
def test_full_row_tiles_chunked_gemm_and_key_estimates(estimate, monkeypatch):
    from embedscope.metrics.search import counting, ranks

    monkeypatch.setattr(counting, "K_CHUNK", 2)  # the inner dimension summed in chunks of 2 columns
    monkeypatch.setattr(counting, "CHUNK_MIN_DIM", 0)
    monkeypatch.setattr(ranks, "ESTIMATE_MIN_PAIRS_PER_QUERY", 0 if estimate else 10**9)
    X, y = _data(12, n=300, n_cls=8)
    X[100:140] = X[99]  # dense exact ties: every window needs float64 keys
    X[200:203] = X[201] * (1 + 1e-15)
    rr = relevant_ranks(X, y, depth=60, block=40, device="cpu")
    _check(rr, brute_ranks(X, y), 60)


def test_floor_sample_ranks_balance_survivors_and_recounts():
    """The floor's sample rank: the expected-cost minimum, checked by brute force over j from
    the Poisson probabilities written out (scipy), and its regimes."""
    from scipy.stats import poisson

    from embedscope.metrics.search import rows

    def brute(dep, pairs, ns, nr, dim):
        row_ns = rows.ROW_NS[0] + rows.ROW_NS[1] * dim
        recount = nr * row_ns + dep * rows.SURVIVOR_NS + pairs * rows.PAIR_NS
        js = np.arange(1, 200)
        cost = js * nr / ns * rows.SURVIVOR_NS + poisson.sf(js - 1, dep * ns / nr) * recount
        return js[np.argmin(cost)]

    depth = np.array([1, 3, 5, 5, 11, 70, 300])
    for ns, nr, dim in ((2242, 60000, 128), (375, 6000, 128), (750, 12000, 2048), (56, 896, 16)):
        j = rows._sample_ranks(depth, ns, nr, dim)  # pairs default to the depths
        for dep, jj in zip(depth, j):
            assert jj == brute(dep, dep, ns, nr, dim), (dep, ns, nr)
        pairs = np.array([0, 3, 2, 8, 11, 90, 300])  # queries of one depth: their mean pairs
        j = rows._sample_ranks(depth, ns, nr, dim, pairs)
        for dep, jj, pm in zip(depth, j, (0, 3, 5, 5, 11, 90, 300)):
            assert jj == brute(dep, pm, ns, nr, dim), (dep, ns, nr)
    j = rows._sample_ranks(np.array([5]), 2242, 60000, 128)
    assert j[0] == 3  # SOP-like: a recount (a 60k-wide row) outweighs ~30 more survivors
    mu = 70 * 375 / 6000
    j = rows._sample_ranks(np.array([70]), 375, 6000, 128)
    assert mu + 2 * np.sqrt(mu) <= j[0] <= mu + 3.5 * np.sqrt(mu)
    # a small set with deep classes (the digits' 896 test images, 5 classes): counting the row's
    # ~180 pairs again outweighs the narrow row; without that term j was 1 and every row recounted
    mu = 180 * 56 / 896
    j = rows._sample_ranks(np.array([180]), 56, 896, 16)
    assert mu + 1.5 * np.sqrt(mu) <= j[0] <= mu + 3.5 * np.sqrt(mu)


def test_per_query_depth():
    from embedscope.metrics.search.ranks import check_sets, compute_relevant_ranks

    X, y = _data(13, n=300, n_cls=8)
    sets = check_sets(X, y)
    R = np.bincount(y)[y] - 1
    dq = np.maximum(R // 2, 1)
    rr = compute_relevant_ranks(sets, "cosine", dq, device="cpu", block=64)
    assert rr.depth == dq.max() and np.array_equal(rr.depth_q, dq)
    for i, (rk, rf) in enumerate(brute_ranks(X, y)):  # exact up to each query's own depth, inf beyond
        a, b = rr.offsets[i], rr.offsets[i + 1]
        within = rk <= dq[i]
        np.testing.assert_array_equal(rr.ranks[a:b][within], rk[within])
        np.testing.assert_array_equal(rr.refs[a:b][within], rf[within])
        assert np.all(np.isinf(rr.ranks[a:b][~within]))
    np.testing.assert_array_equal(rr.hits(dq), [np.sum(r[0] <= d) for r, d in zip(brute_ranks(X, y), dq)])
    with pytest.raises(EmbedscopeError, match="beyond the depth"):
        rr.hits(dq + 1)


def test_full_row_tiles_are_the_default_at_cub_sizes_and_equal_the_counting_pass(rows_spy, monkeypatch):
    from embedscope.metrics import retrieval_metrics
    from embedscope.metrics.search import ranks

    rng = np.random.default_rng(14)  # 3,000 points in 50 classes of ~60: a CUB-like test set
    y = rng.integers(0, 50, 3000)
    X = rng.standard_normal((50, 32))[y] + 1.6 * rng.standard_normal((3000, 32))
    keys = ["R@1", "R@4", "P@1", "R-Precision", "MAP@R", "mAP@C"]
    a = retrieval_metrics(X, y, include=keys, device="cpu", per_query=True)
    assert rows_spy["pass"] == 1
    monkeypatch.setattr(ranks, "USE_ROWS", False)
    b = retrieval_metrics(X, y, include=keys, device="cpu", per_query=True)
    assert rows_spy["pass"] == 1
    for k in keys:
        assert a[k] == b[k], k
    for k in a["per_query"]:
        np.testing.assert_array_equal(a["per_query"][k], b["per_query"][k])
    # skewed class sizes (one class of 1,000, the rest small) leave the full-row tiles
    y2 = np.where(np.arange(3000) < 1000, 0, 1 + rng.integers(0, 900, 3000))
    retrieval_metrics(X, y2, include=["MAP@R"], device="cpu")
    assert rows_spy["pass"] == 1


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("same", [True, False])
@pytest.mark.parametrize("threads", [1, 3])
def test_pair_keys_by_class_within_their_bound(metric, same, threads):
    from embedscope.metrics.search.knn import KeySpace, pair_keys64, prepare
    from embedscope.metrics.search.ranks import _Layout, _pair_keys_by_class, _relevant_pairs

    X, y = _data(15, n=200, n_cls=7)
    Xr, yr = (X, y) if same else _data(16, n=150, n_cls=9)
    Q = prepare(X, metric)
    ks = KeySpace(Q, Q if same else prepare(Xr, metric), metric, same)
    lay = _Layout(y, yr, same)
    qi, rj = _relevant_pairs(lay, 0, len(X), same)
    est, err = _pair_keys_by_class(ks, lay, qi, rj, threads=threads)
    exact = pair_keys64(ks.Q64, ks.R64, qi, rj, metric)
    assert qi.size > 1000 and np.all(np.abs(est - exact) <= err[qi])
    with pytest.raises(ValueError):
        _pair_keys_by_class(ks, lay, qi[1:], rj[1:])


def test_search_threads_is_per_thread_and_restored(monkeypatch):
    """search_threads sets the worker count of the searches started from the calling thread only,
    nests, is restored on exit (also on an error) and refuses non-positive counts; the ranks do not
    depend on it."""
    import threading

    from embedscope.metrics.search import n_search_threads, rows

    default = n_search_threads()
    seen = []
    orig = rows._Rows.__init__

    def spy(self, *a, **k):
        seen.append(a[-1])  # the pass's thread count
        orig(self, *a, **k)

    monkeypatch.setattr(rows._Rows, "__init__", spy)
    X, y = _data(15, n=240, n_cls=6)
    ref = brute_ranks(X, y)
    with search_threads(3):
        assert n_search_threads() == 3
        other = []
        t = threading.Thread(target=lambda: other.append(n_search_threads()))
        t.start()
        t.join()
        assert other == [default]  # another thread keeps its own
        with search_threads(1):
            rr1 = relevant_ranks(X, y, device="cpu")
        rr3 = relevant_ranks(X, y, device="cpu")
    assert n_search_threads() == default
    assert seen == [1, 3]
    for rr in (rr1, rr3):
        _check(rr, ref, int(rr.R.max()))
    with pytest.raises(RuntimeError):
        with search_threads(2):
            raise RuntimeError("boom")
    assert n_search_threads() == default
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            with search_threads(bad):
                pass


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_full_row_tiles_order_from_the_key_order(metric, monkeypatch):
    """The pass writes each query's pairs in rank order from their decreasing key order, with the
    beyond-depth pairs in index order, and sorts only the queries whose keys disagree with their
    ranks (equal keys: identical rows): without ties no query is sorted, with them some are, and
    both give the brute force's lists."""
    from embedscope.metrics.search import rows

    sorted_rows = {"n": 0}
    orig = rows._Rows._order_sorted

    def spy(self, s, e):
        sorted_rows["n"] += e - s
        return orig(self, s, e)

    monkeypatch.setattr(rows._Rows, "_order_sorted", spy)
    monkeypatch.setattr(rows, "LARGE_PAIRS_PER_QUERY", 256)  # (classes of ~37: _count, which orders the pairs)
    rng = np.random.default_rng(21)
    X = rng.standard_normal((330, 6))
    y = rng.integers(0, 9, 330)
    for depth in (None, 4):  # 4: most pairs beyond the depth, their index order restored
        rr = relevant_ranks(X, y, metric=metric, depth=depth, block=40, device="cpu")
        _check(rr, brute_ranks(X, y, metric=metric), int(rr.R.max()) if depth is None else 4)
    assert sorted_rows["n"] == 0
    X[50:60] = X[61]  # identical rows: equal keys, ordered by index
    y[50:62] = y[61]
    rr = relevant_ranks(X, y, metric=metric, block=40, device="cpu")
    _check(rr, brute_ranks(X, y, metric=metric), int(rr.R.max()))
    assert 0 < sorted_rows["n"] < 330


@pytest.mark.parametrize("n, jmax", [(750, 12), (750, 23), (4000, 5), (100, 12)])
def test_floor_from_group_maxima_is_at_most_the_jth_largest(n, jmax):
    """The floors' estimate of each row's j-th largest sampled key: the j-th largest of the maxima
    of g-column groups (columns c, c + n/g, ...), g = n // (FLOOR_GROUPS_PER_J * max j); at most the
    row's j-th largest value, equal to it when g < 2 (no groups)."""
    from embedscope.metrics.search import rows

    rng = np.random.default_rng(n + jmax)
    A = rng.standard_normal((60, n)).astype(np.float32)
    A[:, 7] = A[:, 8]  # equal values
    j = rng.integers(1, jmax + 1, 60)
    j[0] = jmax
    got = rows._kth_largest_lower(A, j)
    exact = -np.sort(-A, axis=1)[np.arange(60), j - 1]
    assert np.all(got <= exact)
    g = n // (rows.FLOOR_GROUPS_PER_J * jmax)
    if g < 2:
        np.testing.assert_array_equal(got, exact)
        return
    ng = n // g
    for i in range(60):  # brute force: each group's maximum, then the j-th largest of those
        gm = [A[i, [c + t * ng for t in range(g)]].max() for c in range(ng)]
        assert got[i] == sorted(gm, reverse=True)[j[i] - 1]
    assert np.mean(got == exact) > 0.5  # usually equal
