"""Audit 31, retrieval's fixed costs at CUB-like 2,000 x 2,048 (issue 18): the collapsed-model check
of ``knn.outlier_refs`` read off the sums ``KeySpace`` made for ``centre_of`` (no second look at the
rows), and the per-class float64 pair keys of ``ranks._pair_keys_by_class`` from views where a
class's rows are consecutive."""

import numpy as np
import pytest
from brute import assert_ranks_within_depth, relevant_ranks_reference

from embedscope.metrics import relevant_ranks
from embedscope.metrics.search import knn, ranks
from embedscope.metrics.search.knn import KeySpace, pair_keys64, prepare


def _spread_brute(R: np.ndarray):
    """(median ‖r − c‖, median ‖r‖), c the rows' mean, written out."""
    c = R.mean(axis=0)
    return float(np.median(np.linalg.norm(R - c, axis=1))), float(np.median(np.linalg.norm(R, axis=1)))


def _cub_like(n, dim, seed=0, collapsed=False):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(n // 50 + 1), 50)[:n]
    centres = rng.standard_normal((y.max() + 1, dim))
    X = centres[y] + 1.5 * rng.standard_normal((n, dim))
    if collapsed:  # one point plus noise of 1e-5
        X = rng.standard_normal(dim) + 1e-5 * X
    return X, y


@pytest.mark.parametrize("n", [300, 2048, 2500])
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_keyspace_spread_equals_the_formula(n, metric):
    """``KeySpace.ref_spread``: the median distance from the mean and the median norm of the references
    centre_of looked at: all of them up to 2 x CENTRE_SAMPLE, else its sample of CENTRE_SAMPLE rows."""
    X, _ = _cub_like(n, 24, seed=n)
    Q = prepare(X, metric)
    ks = KeySpace(Q, Q, metric, True)
    assert ks.centre is None
    looked = Q if n <= 2 * knn.CENTRE_SAMPLE else Q[np.arange(0, n, n // knn.CENTRE_SAMPLE)[:knn.CENTRE_SAMPLE]]
    np.testing.assert_allclose(ks.ref_spread, _spread_brute(looked), rtol=1e-9)
    # a separate reference set: the references' spread, not the queries'
    Xr, _ = _cub_like(400, 24, seed=n + 1)
    R = prepare(3.0 * Xr + 5.0, metric)
    ks2 = KeySpace(Q, R, metric, False)
    np.testing.assert_allclose(ks2.ref_spread, _spread_brute(R), rtol=1e-9)


class _ShapeOnly:
    """Rows that answer their shape and nothing else: a second look at them fails."""

    def __init__(self, shape):
        self.shape = shape


@pytest.mark.parametrize("n", [2000, 5000])
def test_outlier_check_of_usual_rows_reads_no_row(n):
    """A search that is not collapsed is turned down from KeySpace's sums alone: before, outlier_refs
    gathered, centred and summed a sample of up to 1,024 rows again (6-20 ms at 2,000 x 2,048, 15% of the
    whole retrieval call there)."""
    X, _ = _cub_like(n, 16, seed=3)
    Q = prepare(X, "cosine")
    ks = KeySpace(Q, Q, "cosine", True)
    ks.R64 = _ShapeOnly(Q.shape)
    assert knn.outlier_refs(ks, knn.outlier_most(n, n)) is None


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_outlier_decisions_unchanged(metric):
    """The same outliers found as by the check that looked at the rows again (forced by clearing the
    KeySpace's spread): a nearly collapsed set with 5 far rows, and usual embeddings (none)."""
    X, _ = _cub_like(600, 32, seed=5, collapsed=True)
    far = np.array([3, 100, 101, 377, 599])
    X[far] += 0.5 * np.random.default_rng(9).standard_normal((far.size, X.shape[1]))
    for rows_ in (X, _cub_like(600, 32, seed=6)[0]):
        Q = prepare(rows_.copy(), metric)
        ks = KeySpace(Q, Q, metric, True)
        got = knn.outlier_refs(ks, knn.outlier_most(600, 600))
        ks.ref_spread = None
        again = knn.outlier_refs(ks, knn.outlier_most(600, 600))
        assert (got is None) == (again is None)
        if got is not None:
            np.testing.assert_array_equal(got, again)
    Q = prepare(X.copy(), metric)
    np.testing.assert_array_equal(knn.outlier_refs(KeySpace(Q, Q, metric, True)), far)


@pytest.mark.parametrize("order", ["by class", "shuffled", "by class, a separate reference set"])
def test_class_pair_keys_from_views(order):
    """The class GEMMs' float64 keys (views of consecutive rows, or gathers) within their bound of
    pair_keys64's, pair for pair, in _relevant_pairs' order."""
    rng = np.random.default_rng(11)
    X, y = _cub_like(700, 48, seed=11)
    if order == "shuffled":
        p = rng.permutation(len(y))
        X, y = X[p], y[p]
    sets = ranks.check_sets(X, y) if "separate" not in order else ranks.check_sets(
        X[:300], y[:300], X[300:], y[300:])
    Q64, R64 = sets.prepared("cosine")
    ks = KeySpace(Q64, R64, "cosine", sets.same)
    lay = ranks._Layout(sets.y, sets.y_ref, sets.same)
    qi, rj = ranks._relevant_pairs(lay, 0, Q64.shape[0], sets.same)
    est, err = ranks._pair_keys_by_class(ks, lay, qi, rj, threads=2)
    exact = pair_keys64(Q64, R64, qi, rj, "cosine")
    assert np.all(np.abs(est - exact) <= err[qi])


@pytest.mark.parametrize("shuffle", [False, True])
def test_ranks_at_large_dim_match_the_brute_force(shuffle):
    """Relevant ranks of a CUB-like set at D = 2,048 (chunked tiles, views of consecutive classes)
    equal a float64 brute force."""
    X, y = _cub_like(600, 2048, seed=21)
    if shuffle:
        p = np.random.default_rng(2).permutation(len(y))
        X, y = X[p], y[p]
    rr = relevant_ranks(X.astype(np.float32), y)
    ref = relevant_ranks_reference(X.astype(np.float32), y)
    assert_ranks_within_depth(rr, ref)


@pytest.mark.parametrize("n", [500, 3000])
def test_centre_of_alone_agrees_with_keyspace(n):
    """``centre_of`` without the squared norms (its own sums) decides as KeySpace, which hands them in:
    None for usual embeddings, the references' mean for a nearly collapsed set."""
    for collapsed in (False, True):
        X, _ = _cub_like(n, 24, seed=n, collapsed=collapsed)
        Q = prepare(X, "euclidean")
        ks = KeySpace(Q, Q, "euclidean", True)
        plain = KeySpace(Q, Q, "euclidean", True, centre=False).delta  # the bound of the rows as given
        c = knn.centre_of(Q, Q, "euclidean", True, plain)
        assert (c is None) == (not collapsed) == (ks.centre is None)
        if collapsed:
            np.testing.assert_array_equal(c, ks.centre)
            np.testing.assert_array_equal(c, Q.mean(axis=0))


def _class_keys_written_out(ks, y, y_ref, same, metric):
    """The relevant pairs' float64 keys, class by class, as the GEMM of the class's gathered rows (the query
    itself left out), in the order of _relevant_pairs: per query, its references in index order
    (Euclidean: 2 q·r − ‖r‖² − ‖q‖² with the KeySpace's ‖q‖² and the references' squared norms)."""
    Q64, R64 = ks.Q64, ks.R64
    rsq = np.einsum("ij,ij->i", R64, R64)
    out = []
    for q in range(Q64.shape[0]):
        refs = np.flatnonzero(y_ref == y[q])
        if same:
            refs = refs[refs != q]
        cls_q = np.flatnonzero(y == y[q])
        cls_r = np.flatnonzero(y_ref == y[q])
        A = Q64[cls_q]
        G = A @ (A if same else R64[cls_r]).T  # (same set: a symmetric product, as the search's)
        if metric == "euclidean":
            G = 2.0 * G - rsq[cls_r] - ks.qsq[cls_q][:, None]
        row = G[np.searchsorted(cls_q, q)]
        out.append(row[np.isin(cls_r, refs)])
    return np.concatenate(out) if out else np.empty(0)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("order", ["by class", "shuffled", "separate"])
def test_class_pair_keys_bitwise(metric, order, monkeypatch):
    """A class of consecutive rows of a same-set search is one symmetric product of its rows' view, its
    diagonal dropped in place: the same keys, bit for bit, as the class's gathered rows multiplied and
    masked; with one worker thread or two (CLASS_KEYS_THREADED_MIN) alike. Classes of 1 (no pairs) and 2."""
    rng = np.random.default_rng(31)
    X, y = _cub_like(400, 40, seed=31)
    y = y.copy()
    y[:1] = 1000  # a lone query
    y[1:3] = 1001  # a class of 2
    if order == "shuffled":
        p = rng.permutation(len(y))
        X, y = X[p], y[p]
    sets = ranks.check_sets(X, y) if order != "separate" else ranks.check_sets(X[:150], y[:150], X[150:], y[150:])
    Q64, R64 = sets.prepared(metric)
    ks = KeySpace(Q64, R64, metric, sets.same)
    assert ks.centre is None
    lay = ranks._Layout(sets.y, sets.y_ref, sets.same)
    want = _class_keys_written_out(ks, sets.y, sets.y_ref, sets.same, metric)
    got = {}
    for thr in (0, 1 << 60):
        monkeypatch.setattr(ranks, "CLASS_KEYS_THREADED_MIN", thr)
        got[thr] = ranks._pair_keys_by_class(ks, lay, None, None, threads=2)[0]
    np.testing.assert_array_equal(got[0], got[1 << 60])
    np.testing.assert_array_equal(got[0], want)


def test_small_class_keys_run_on_one_thread(monkeypatch):
    """Class GEMMs below CLASS_KEYS_THREADED_MIN multiply-adds run on the calling thread (two worker threads
    only contended for the GIL there: 2x slower at CUB-like 2,000 x 64); above it, on the workers."""
    import concurrent.futures

    X, y = _cub_like(600, 32, seed=4)
    sets = ranks.check_sets(X, y)
    Q64, R64 = sets.prepared("cosine")
    ks = KeySpace(Q64, R64, "cosine", True)
    lay = ranks._Layout(sets.y, sets.y_ref, True)
    started = []
    real = concurrent.futures.ThreadPoolExecutor

    def spy(*a, **k):
        started.append(a)
        return real(*a, **k)

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", spy)
    one = ranks._pair_keys_by_class(ks, lay, None, None, threads=2)[0]
    assert not started
    monkeypatch.setattr(ranks, "CLASS_KEYS_THREADED_MIN", 0)
    two = ranks._pair_keys_by_class(ks, lay, None, None, threads=2)[0]
    assert started
    np.testing.assert_array_equal(one, two)


def _spy_recounts(monkeypatch):
    from embedscope.metrics.search import rows

    rec = []
    orig = rows._Rows._recount

    def spy(self, s, fail):
        rec.append(int(fail.size))
        return orig(self, s, fail)

    monkeypatch.setattr(rows._Rows, "_recount", spy)
    return rec


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("classes", [5, 40])
def test_deep_searches_count_each_row_once(metric, classes, monkeypatch):
    """A depth of every reference (mAP@1000 of a set of fewer than 1,001 rows) gets no floor: its rows are
    counted once. Before, the floors' sample estimated such a depth from its j = 1st key and every row was
    counted twice (the digits' test set: 898 references, the whole retrieval_metrics call 1.6x slower).
    Deep depths short of every reference keep their floors (a row whose floor came out too high is
    recounted, as at any depth). Ranks equal a float64 brute force; with ties."""
    from test_search_ranks import _check, brute_ranks

    rng = np.random.default_rng(classes)
    X, y = _cub_like(500, 16, seed=classes)
    y = rng.integers(0, classes, len(y))
    X[7] = X[8]  # an exact tie
    rec = _spy_recounts(monkeypatch)
    ref = brute_ranks(X, y, metric=metric)
    for depth in ("all", 300, 250):
        rr = relevant_ranks(X, y, metric=metric, depth=depth, device="cpu")
        _check(rr, ref, len(X) - 1 if depth == "all" else depth)
        if depth == "all":
            assert rec == []


def test_mixed_depths_floor_only_the_shallow_rows(monkeypatch):
    """Per-query depths, some of every reference (no floor) and some shallow (a floor from the sample):
    each query's ranks exact within its own depth."""
    from test_search_ranks import brute_ranks

    from embedscope.metrics.search.ranks import check_sets, compute_relevant_ranks

    X, y = _cub_like(600, 12, seed=8)
    y = np.random.default_rng(8).integers(0, 30, len(y))
    depth = np.where(np.arange(len(y)) % 3 == 0, 599, 25)
    rr = compute_relevant_ranks(check_sets(X, y), "cosine", depth, device="cpu")
    ref = brute_ranks(X, y)
    for i, (rk, rf) in enumerate(ref):
        a, b = rr.offsets[i], rr.offsets[i + 1]
        within = rk <= depth[i]
        np.testing.assert_array_equal(rr.ranks[a:b][within], rk[within])
        np.testing.assert_array_equal(rr.refs[a:b][within], rf[within])
        assert np.all(np.isinf(rr.ranks[a:b][~within]))


def test_default_blocks_are_counted_whole_on_two_threads(monkeypatch):
    """With two worker threads a finished block is counted by one of them, not split in halves
    between both (the halves' small numpy steps took turns at the GIL: 5-13% slower at CUB-like
    2,000-12,000 rows); the ranks equal a float64 brute force either way."""
    from test_search_ranks import _check, brute_ranks

    from embedscope.metrics.search import rows, search_threads

    spans = []
    orig = rows._Rows._finish_rows

    def spy(self, s, h0, h1, *a, **k):
        spans.append((h0, h1, self.blocks[[b[0] for b in self.blocks].index(s)]))
        return orig(self, s, h0, h1, *a, **k)

    monkeypatch.setattr(rows._Rows, "_finish_rows", spy)
    X, y = _cub_like(2100, 24, seed=12)  # blocks of min(512, N / 4) rows
    with search_threads(2):
        rr = relevant_ranks(X, y, device="cpu")
    _check(rr, brute_ranks(X, y), int(rr.R.max()))
    assert spans and all(h0 == 0 and h1 == e - s for h0, h1, (s, e) in spans)
    assert max(e - s for _, _, (s, e) in spans) == min(rows.BLOCK, -(-2100 // 4)) == 525  # (a quarter of the rows)


@pytest.mark.parametrize("threads, want", [(1, 512), (2, 768)])
def test_block_rows_by_thread_count(threads, want, monkeypatch):
    """Query blocks of 768 rows with two worker threads (each finished block counted by one of them: 4-20%
    faster than 512 from 6,000 rows on), 512 on one thread (768 cost 6% more CPU at 2,000 x 512 there)."""
    from embedscope.metrics.search import rows, search_threads

    seen = []
    orig = rows._Rows.__init__

    def spy(self, *a, **k):
        orig(self, *a, **k)
        seen.append(sorted({e - s for s, e in self.blocks}))

    monkeypatch.setattr(rows._Rows, "__init__", spy)
    X, y = _cub_like(3300, 8, seed=13)
    with search_threads(threads):
        relevant_ranks(X, y, device="cpu")
    assert seen and max(seen[0]) == want
