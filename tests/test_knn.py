"""knn_search: exact float64 ranking with lower-index tie-break, against a brute-force sort."""

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.metrics import knn_search
from embedscope.metrics.search import search_threads as knn_threads


def brute_knn(Q, R, k, metric, exclude_self):
    Q = np.asarray(Q, float)
    R = Q if R is None else np.asarray(R, float)
    if metric == "cosine":
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
        R = R / np.linalg.norm(R, axis=1, keepdims=True)
        key = -(Q[:, None, :] * R[None, :, :]).sum(-1)
    else:
        key = ((Q[:, None, :] - R[None, :, :]) ** 2).sum(-1)
    vals, idx = [], []
    for i in range(len(Q)):
        cand = np.array([j for j in range(len(R)) if not (exclude_self and j == i)])
        o = cand[np.lexsort((cand, key[i, cand]))][:k]
        idx.append(o)
        vals.append(-key[i, o] if metric == "cosine" else np.sqrt(key[i, o]))
    return np.array(vals), np.array(idx)


def _with_ties(seed, n=200, d=5):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X[7] = X[3]
    X[50:60] = X[2]  # eleven identical rows
    return X


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("block", [None, 32])  # 32 < N: several query blocks
@pytest.mark.parametrize("k", [1, 5, 20])
def test_same_set_exclude_self(metric, block, k):
    X = _with_ties(0)
    v, i = knn_search(X, None, k, metric=metric, exclude_self=True, block=block, device="cpu")
    bv, bi = brute_knn(X, None, k, metric, True)
    np.testing.assert_array_equal(i, bi)
    np.testing.assert_allclose(v, bv, rtol=0, atol=1e-12)
    # identical rows: the lower index comes first
    assert list(i[2][:10]) == list(range(50, 50 + min(k, 10)))
    assert (i != np.arange(len(X))[:, None]).all()


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_separate_references_and_deep_lists(metric):
    rng = np.random.default_rng(1)
    Q = rng.standard_normal((60, 4))
    R = rng.standard_normal((400, 4))
    R[100:300] = R[5]  # 201 identical references: deeper than the candidate slack
    Q[0] = R[5]
    for k in (3, 150, 250):  # 150, 250: faiss candidates on the CPU
        v, i = knn_search(Q, R, k, metric=metric)
        bv, bi = brute_knn(Q, R, k, metric, False)
        np.testing.assert_array_equal(i, bi)
        np.testing.assert_allclose(v, bv, rtol=0, atol=1e-12)


def test_without_exclude_self_the_query_finds_itself():
    X = np.random.default_rng(2).standard_normal((30, 3))
    v, i = knn_search(X, None, 1, metric="euclidean")
    assert (i[:, 0] == np.arange(30)).all()
    assert np.allclose(v[:, 0], 0.0)


def test_float32_input_and_near_ties_are_exact():
    # values that differ below float32 resolution: the float64 certification must order them
    rng = np.random.default_rng(3)
    base = rng.standard_normal(8)
    R = base + 1e-12 * np.arange(40)[:, None] * rng.standard_normal((40, 8))
    Q = base[None, :] + 0.5
    v, i = knn_search(Q, R, 10, metric="euclidean")
    bv, bi = brute_knn(Q, R, 10, "euclidean", False)
    np.testing.assert_array_equal(i, bi)


@pytest.mark.parametrize("args,kw,msg", [
    ((np.ones((3, 2)), np.ones((3, 3)), 1), {}, "dimension"),
    ((np.ones((3, 2)), None, 3), {"exclude_self": True}, "exceeds"),
    ((np.ones((3, 2)), None, 0), {}, "positive integer"),
    ((np.ones((3, 2)), None, 1), {"metric": "dot"}, "unknown metric"),
    ((np.ones((3, 2)), np.ones((4, 2)), 1), {"exclude_self": True}, "as many references"),
    ((np.full((3, 2), np.inf), None, 1), {}, "NaN or inf"),
    ((np.ones(3), None, 1), {}, "2-D"),
])
def test_validation(args, kw, msg):
    with pytest.raises(EmbedscopeError, match=msg):
        knn_search(*args, **kw)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_torch_block_path_gives_the_same_neighbours(metric, monkeypatch):
    # the CUDA path (torch GEMM blocks + torch.topk) run on the CPU: same exact result as faiss's
    from embedscope.metrics.search import knn

    X = _with_ties(4, n=150)
    a = knn_search(X, None, 12, metric=metric, exclude_self=True)
    monkeypatch.setattr(knn, "CPU_SELECT", False)
    monkeypatch.setattr(knn, "FAISS_MIN_L", 10**9)
    b = knn_search(X, None, 12, metric=metric, exclude_self=True, block=40)
    bv, bi = brute_knn(X, None, 12, metric, True)
    np.testing.assert_array_equal(a[1], bi)
    np.testing.assert_array_equal(b[1], bi)
    np.testing.assert_allclose(b[0], bv, rtol=0, atol=1e-12)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_block_keys_equal_pair_keys_bitwise(metric):
    # the deep-list certification computes keys per query block; ties need the very same float64
    # values as the per-pair keys used by the full-row fallback
    from embedscope.metrics.search.knn import block_keys64, pair_keys64

    rng = np.random.default_rng(5)
    for d in (3, 37, 128):
        Q, R = rng.standard_normal((30, d)), rng.standard_normal((500, d))
        cand = rng.integers(0, 500, (20, 90))
        a = pair_keys64(Q, R, np.repeat(np.arange(4, 24), 90), cand.ravel(), metric).reshape(20, 90)
        np.testing.assert_array_equal(block_keys64(Q, R, 4, cand, metric), a)
        for cb in (1, 8 * d * 90 * 3 + 5):  # one query per buffer; three queries and a remainder
            np.testing.assert_array_equal(block_keys64(Q, R, 4, cand, metric, chunk_bytes=cb), a)


def test_pair_keys_refuse_indices_outside_the_rows():
    # the gathers clip (numpy buffers `out` under mode="raise"): the indices are checked up front,
    # so a bad index is an error, never a silently clipped row
    from embedscope.metrics.search.knn import block_keys64, pair_keys64

    Q, R = np.ones((3, 4)), np.ones((5, 4))
    ok = np.array([0, 2])
    assert pair_keys64(Q, R, ok, np.array([4, 0]), "cosine").tolist() == [4.0, 4.0]
    for qi, rj in ((np.array([0, 3]), ok), (np.array([-1, 0]), ok), (ok, np.array([5, 0])), (ok, np.array([0, -2]))):
        with pytest.raises(IndexError, match="outside"):
            pair_keys64(Q, R, qi, rj, "euclidean")
    with pytest.raises(IndexError, match="outside"):
        block_keys64(Q, R, 0, np.array([[0, 5]]), "cosine")


@pytest.fixture
def tiny_cpu_search(monkeypatch):
    """The CPU search with tiny tiles, blocks and threshold samples: many query blocks in two
    threads, many reference tiles, a sample smaller than the set."""
    from embedscope.metrics.search import knn

    monkeypatch.setattr(knn, "CPU_BLOCK", 37)
    monkeypatch.setattr(knn, "CHUNK_BYTES", 1)  # 64 references per tile
    monkeypatch.setattr(knn, "SAMPLE_MIN", 16)
    monkeypatch.setattr(knn, "SAMPLE_DIV", 4)
    with knn_threads(2):
        yield knn


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("symmetric", [True, False])  # same set: upper-triangle tiles, or all
def test_cpu_search_tiles_and_sampled_thresholds(metric, symmetric, tiny_cpu_search, monkeypatch):
    monkeypatch.setattr(tiny_cpu_search, "SYMMETRIC", symmetric)
    X = _with_ties(6, n=300, d=6)
    X[200:260] = X[100]  # sixty identical rows: ties deeper than most windows
    for k in (1, 7, 70, 150):
        v, i = knn_search(X, None, k, metric=metric, exclude_self=True)
        bv, bi = brute_knn(X, None, k, metric, True)
        np.testing.assert_array_equal(i, bi)
        np.testing.assert_allclose(v, bv, rtol=0, atol=1e-12)
    v, i = knn_search(X, None, 20, metric=metric)  # the query itself included
    bv, bi = brute_knn(X, None, 20, metric, False)
    np.testing.assert_array_equal(i, bi)
    np.testing.assert_allclose(v, bv, rtol=0, atol=1e-12)
    Q = X[::7] + 0.01
    v, i = knn_search(Q, X, 40, metric=metric)
    bv, bi = brute_knn(Q, X, 40, metric, False)
    np.testing.assert_array_equal(i, bi)
    np.testing.assert_allclose(v, bv, rtol=0, atol=1e-12)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_cpu_search_threshold_too_high_falls_back_to_full_rows(metric, tiny_cpu_search, monkeypatch):
    # a threshold at the sample's largest key leaves fewer than k keys above it: those queries
    # are searched again in full, still exact
    knn = tiny_cpu_search
    monkeypatch.setattr(knn, "SAMPLE_SIGMAS", -1e9)
    calls = []
    full_row = knn._exact_topk_row
    monkeypatch.setattr(knn, "_exact_topk_row", lambda ks, qi, k: calls.append(qi) or full_row(ks, qi, k))
    X = _with_ties(7, n=250, d=5)
    v, i = knn_search(X, None, 30, metric=metric, exclude_self=True)
    bv, bi = brute_knn(X, None, 30, metric, True)
    np.testing.assert_array_equal(i, bi)
    np.testing.assert_allclose(v, bv, rtol=0, atol=1e-12)
    assert len(calls) > 100


def test_cpu_search_equals_the_faiss_candidate_path(monkeypatch):
    from embedscope.metrics.search import knn

    X = np.random.default_rng(8).standard_normal((400, 16))
    X[300:] = X[:100]  # every row twice
    a = knn_search(X, None, 120, exclude_self=True)
    monkeypatch.setattr(knn, "CPU_SELECT", False)
    b = knn_search(X, None, 120, exclude_self=True)
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[0], b[0])


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_window_keys_equal_pair_keys_bitwise(metric):
    # the CPU search's window keys, computed range of references by range, in the given order
    from embedscope.metrics.search.knn import KeySpace, pair_keys64, window_keys64

    rng = np.random.default_rng(6)
    X = rng.standard_normal((700, 19))
    ks = KeySpace(X, X, metric, True)
    qi = np.repeat(np.arange(40), 25)
    rj = np.concatenate([np.sort(rng.choice(700, 25, replace=False)) for _ in range(40)])
    want = pair_keys64(X, X, qi, rj, metric)
    for group in (1, 7, 64, 512, 10_000):
        np.testing.assert_array_equal(window_keys64(ks, qi, rj, group=group), want)
    assert window_keys64(ks, qi[:0], rj[:0]).size == 0


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("d", [6, 19])  # rows of 48 / 152 bytes: (q, r) and (r, q) at other alignments
def test_symmetric_search_reuses_window_keys_bitwise(metric, d, tiny_cpu_search, monkeypatch):
    """A same-set search hands each window key to the block of its reference, which takes it
    instead of computing it (the key of (q, r) is that of (r, q) bit for bit): the same neighbours
    and values bit for bit as without the reuse, the brute force's, with most keys reused."""
    knn = tiny_cpu_search
    jobs = []

    class Recorded(knn._CpuSearch):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            jobs.append(self)

    monkeypatch.setattr(knn, "_CpuSearch", Recorded)
    rng = np.random.default_rng(12)
    y = np.repeat(np.arange(4), 80)
    X = rng.standard_normal((4, d))[y] + 0.7 * rng.standard_normal((320, d))  # deep, mostly mutual windows
    X[200:230] = X[100]  # thirty identical rows
    for k in (7, 70, 150):
        monkeypatch.setattr(knn, "REUSE_KEYS", False)
        a = knn_search(X, None, k, metric=metric, exclude_self=True)
        monkeypatch.setattr(knn, "REUSE_KEYS", True)
        b = knn_search(X, None, k, metric=metric, exclude_self=True)
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[0], b[0])
        bv, bi = brute_knn(X, None, k, metric, True)
        np.testing.assert_array_equal(b[1], bi)
        np.testing.assert_allclose(b[0], bv, rtol=0, atol=1e-12)
        assert jobs[-2].n_reused == 0 and jobs[-1].n_reused > 0.2 * 320 * k
        assert jobs[-1].inbox_bytes == 0  # every block took what it was handed
    # a cap on the keys held for other blocks: fewer reused, the same result
    monkeypatch.setattr(knn, "REUSE_MAX_BYTES", 12 * 500)
    c = knn_search(X, None, 150, metric=metric, exclude_self=True)
    np.testing.assert_array_equal(c[1], b[1])
    np.testing.assert_array_equal(c[0], b[0])
    assert 0 < jobs[-1].n_reused < jobs[-2].n_reused


@pytest.mark.parametrize("block", [None, 1000])
def test_same_set_search_past_65536_rows(block):
    """Rows within a block are kept as uint16: a query's global index (block start + row) must be
    formed in int64 (past row 65,535 the sum overflowed: an error, or with blocks of 1,000 a
    silently wrong query)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((66_500, 4)).astype(np.float32)
    v, i = knn_search(X, None, 3, exclude_self=True, block=block, device="cpu")
    X64 = X.astype(np.float64)
    X64 /= np.linalg.norm(X64, axis=1, keepdims=True)
    for q in (0, 65_535, 65_536, 65_999, 66_001, 66_499):
        key = np.einsum("ij,j->i", X64, X64[q])
        key[q] = -np.inf
        top = np.lexsort((np.arange(key.size), -key))[:3]
        np.testing.assert_array_equal(i[q], top)
        np.testing.assert_allclose(v[q], key[top], rtol=0, atol=1e-12)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_pair_keys_are_symmetric_bitwise(metric):
    """The key of (q, r) is the key of (r, q) bit for bit (what the window-key reuse relies on),
    whatever the rows' positions in the gather buffers, for odd and even dimensions."""
    from embedscope.metrics.search.knn import pair_keys64

    rng = np.random.default_rng(13)
    for d in (1, 7, 19, 64, 129):
        X = rng.standard_normal((300, d))
        qi, rj = rng.integers(0, 300, 5000), rng.integers(0, 300, 5000)
        a = pair_keys64(X, X, qi, rj, metric, chunk_bytes=4096)
        o = rng.permutation(qi.size)  # other positions in the buffers
        b = np.empty_like(a)
        b[o] = pair_keys64(X, X, rj[o], qi[o], metric, chunk_bytes=4096)
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_pair_keys_of_long_query_runs_are_bitwise_the_per_pair_keys(metric, monkeypatch):
    # a run of one query's pairs covering a share of the references (the union of a collapsed
    # model's windows) takes the query's keys against every reference at once; ties need the
    # very same float64 values as the gathered per-pair reduction, at any dimension and chunking
    from embedscope.metrics.search import knn

    rng = np.random.default_rng(17)
    for d in (1, 3, 8, 37, 64, 129, 512):
        Q = rng.standard_normal((6, d)) * 10.0 ** rng.integers(-3, 4, (6, 1))
        R = rng.standard_normal((400, d)) * 10.0 ** rng.integers(-3, 4, (400, 1))
        qi = np.repeat(np.array([0, 3, 3, 5, 1]), [390, 7, 0, 250, 500])  # long, short, long, long runs
        rj = rng.integers(0, 400, qi.size)
        got = knn.pair_keys64(Q, R, qi, rj, metric, chunk_bytes=4096)
        monkeypatch.setattr(knn, "ROW_RUN_SHARE", 10.0**9)  # every pair gathered, as before
        want = knn.pair_keys64(Q, R, qi, rj, metric, chunk_bytes=4096)
        monkeypatch.undo()
        np.testing.assert_array_equal(got, want)
        for cb in (8, 1 << 20):
            np.testing.assert_array_equal(knn.pair_keys64(Q, R, qi, rj, metric, chunk_bytes=cb), want)
        monkeypatch.setattr(knn, "ROW_RUN_SHARE", 10.0**9)
        gathered = knn.pair_keys64(Q, R, np.full(400, 2), np.arange(400), metric)
        monkeypatch.undo()
        np.testing.assert_array_equal(knn._row_keys64(Q[2], R, metric, 1 << 20), gathered)
