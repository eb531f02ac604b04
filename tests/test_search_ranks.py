"""relevant_ranks (the rank engine of docs/methods.md §1) against a brute-force full sort."""

import numpy as np
import pytest
from brute import ranked_references

from embedscope.errors import EmbedscopeError
from embedscope.metrics import relevant_ranks


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
    monkeypatch.setattr(counting, "PENDING", pending)  # survivors counted per tile, or per block at the end
    monkeypatch.setattr(counting, "K_CHUNK", 2)
    monkeypatch.setattr(counting, "CHUNK_MIN_DIM", 0)
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
