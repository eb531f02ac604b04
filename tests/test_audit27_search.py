"""How many outliers a nearly collapsed model's search takes apart (``knn.outlier_refs``), measured.

Up to min(N / ``OUTLIER_DIV``, ``OUTLIER_MAX``) far rows (N / 64, at most 256) are taken apart as
before; more, up to N / ``OUTLIER_MOST_DIV`` (``knn.outlier_most``), only where the search of all
references would fill its windows with float64 keys (``knn.window_pays``: outliers far from the
point), since with outliers just far enough to count the old path stays fast
(benchmarks/outliers_apart.py, docs/PERFORMANCE.md). Checked here, at and around those thresholds
(the most far rows allowed, one fewer, one more; the window estimate just for and just against;
the ranks' row share just within and just beyond ``APART_ROW_RATIO``): whichever path is taken,
the ranks, hits and neighbours equal a float64 brute force written here (every pair's
``pair_keys64``, ties to the lower index) and, bit for bit, the search without the split, on rows
with ties (duplicated outliers and bulk rows, an outlier's mirror image, outliers relevant to one
another and to bulk queries); and the outliers' keys (``knn.cross_keys64``) are ``pair_keys64``'s
bit for bit.
"""

import numpy as np
import pytest
from test_audit25_search import assert_bitwise, brute_orders, spy_apart
from test_audit26_search import as_dicts, brute_hits, brute_ranks, together

import embedscope.metrics.search.knn as knn
import embedscope.metrics.search.ranks as ranks
from embedscope.metrics.search import KeySpace, knn_search, prepare, relevant_ranks
from embedscope.metrics.search.knn import pair_keys64
from embedscope.synthetic import nearly_collapsed


def far_rows(n, n_out, d=16, far=0.1, noise=1e-5, seed=0):
    """``n`` rows within ``noise`` of one unit point, ``n_out`` (returned, sorted) moved ``far``
    from it, with ties: two outliers twice (equal rows), a bulk row three times, an outlier's
    mirror image through the point."""
    return nearly_collapsed(n, d, n_out, far, noise=noise, seed=seed, copies=[(-1, 0), (-2, 1)],
                            mirrors=[(2, 3)], bulk_copies=[(1, 0), (2, 0)])


def free(n):
    """The most far rows taken apart at ``n`` references whatever the windows."""
    return min(n // knn.OUTLIER_DIV, knn.OUTLIER_MAX)


def labels(n, at, size=30):
    """Classes of ``size``; outliers relevant to one another and to bulk queries; a lone outlier."""
    y = np.arange(n) // size
    y[at[:4]] = y[at[4]]
    y[at[5]] = 10_000
    return y


def last(taken):
    return bool(taken and taken[-1])


def check_every_search(X, y, metric, apart, monkeypatch):
    """knn_search, the hits and the ranks (two depths) of ``X``: the split taken where ``apart``
    says, the brute force's values, and bit for bit those of the search without the split."""
    taken = spy_apart(monkeypatch, knn, "_knn_apart")
    got = knn_search(X, k=12, metric=metric, exclude_self=True)
    assert last(taken) == apart
    np.testing.assert_array_equal(got[1], np.array([o[:12] for o in brute_orders(X, metric)]))
    assert_bitwise(got, together(monkeypatch, knn_search, X, k=12, metric=metric, exclude_self=True))

    taken = spy_apart(monkeypatch, ranks, "_hits_apart")
    rr = relevant_ranks(X, y, metric=metric, output="hits", block=128)
    assert last(taken) == apart
    R, H = brute_hits(X, y, metric)
    np.testing.assert_array_equal(rr.hits_at_R, H)
    np.testing.assert_array_equal(rr.hits_at_R, together(monkeypatch, relevant_ranks, X, y, metric=metric,
                                                         output="hits", block=128).hits_at_R)
    n = len(X)
    for depth in (40, "all"):
        taken = spy_apart(monkeypatch, ranks, "_ranks_apart")
        rr = relevant_ranks(X, y, metric=metric, depth=depth)
        assert last(taken) == apart
        assert as_dicts(rr) == brute_ranks(X, y, metric, n - 1 if depth == "all" else depth)
        old = together(monkeypatch, relevant_ranks, X, y, metric=metric, depth=depth)
        for f in ("offsets", "ranks", "refs"):
            assert np.array_equal(getattr(rr, f), getattr(old, f)), f


N = 480


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_far_outliers_at_and_around_the_most_taken_apart(metric, extra, monkeypatch):
    # outliers far from the point (the old path's windows hold every reference): taken apart up to
    # N / OUTLIER_MOST_DIV of them (extra 0), one fewer too; one more are no outliers (the old path)
    n_out = knn.outlier_most(N, N) + extra
    assert n_out > 2 * free(N)
    X, at = far_rows(N, n_out, seed=40 + extra)
    Q = prepare(X.astype(np.float64), metric)
    found = knn.outlier_refs(KeySpace(Q, Q, metric, True), knn.outlier_most(N, N))
    if extra <= 0:
        np.testing.assert_array_equal(found, at)
    else:
        assert found is None
    check_every_search(X, labels(N, at), metric, extra <= 0, monkeypatch)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("extra", [0, 1])
def test_near_outliers_beyond_the_few_keep_the_old_path(metric, extra, monkeypatch):
    # outliers just far enough to count (50x the bulk's spread): the old path's windows stay
    # narrow, so beyond the few (min(N / 64, 256)) they are not taken apart; up to those, as before
    n_out = free(N) + extra
    X, at = far_rows(N, n_out, far=2e-3, seed=50 + extra)
    Q = prepare(X.astype(np.float64), metric)
    np.testing.assert_array_equal(knn.outlier_refs(KeySpace(Q, Q, metric, True), knn.outlier_most(N, N)), at)
    check_every_search(X, labels(N, at), metric, extra == 0, monkeypatch)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_window_estimate_decides_at_its_ratio(metric, monkeypatch):
    # the same rows (30 outliers 0.1 away: every key of a bulk query's row within the loose bound)
    # just for and just against the split at the knn's and the ranks' ratios: its window keys (the
    # bulk less the query itself) over the outliers
    X, at = far_rows(N, 30, seed=61)
    y = labels(N, at)
    share = (N - 30 - 1) / 30
    for side in (-1, 1):
        monkeypatch.setattr(knn, "APART_WINDOW_RATIO", share * (1 - side * 1e-9))
        monkeypatch.setattr(ranks, "APART_WINDOW_RATIO", share * (1 - side * 1e-9))
        check_every_search(X, y, metric, side > 0, monkeypatch)


def test_outlier_refs_alone_keeps_the_few():
    # outlier_refs without ``most`` (the NR-Prec engine's call): at most min(N / 64, 256), as before
    X, at = far_rows(3000, 100, d=32)
    Q = prepare(X.astype(np.float64), "euclidean")
    ks = KeySpace(Q, Q, "euclidean", True)
    assert knn.outlier_refs(ks) is None
    np.testing.assert_array_equal(knn.outlier_refs(ks, knn.outlier_most(3000, 3000)), at)
    assert knn.outlier_most(3000, 3000) == 3000 // knn.OUTLIER_MOST_DIV
    # (the outliers' keys to every query held at once: at most OUTLIER_MAX_KEYS, and never fewer than before)
    assert knn.outlier_most(10**6, 10**6) == max(free(10**6), knn.OUTLIER_MAX_KEYS // 10**6)
    assert knn.outlier_most(100_000, 2_000) == min(100_000 // knn.OUTLIER_MOST_DIV, knn.OUTLIER_MAX_KEYS // 2_000)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("d", [1, 7, 16, 129])
def test_cross_keys_are_the_pair_keys_bit_for_bit(metric, d):
    rng = np.random.default_rng(d)
    Q = rng.standard_normal((300, d)) * rng.choice([1e-3, 1.0, 1e3], (300, 1))
    R = rng.standard_normal((40, d))
    R[5] = R[9]
    qs, rs = rng.integers(0, 300, 211), np.array([5, 9, 0, 39, 5, 17])
    want = pair_keys64(Q, R, np.repeat(qs, rs.size), np.tile(rs, qs.size), metric).reshape(qs.size, rs.size)
    for chunk in (64, 4096, 1 << 20):  # (chunks of 16 queries and more)
        got = knn.cross_keys64(Q, R, qs, rs, metric, chunk_bytes=chunk)
        assert np.array_equal(got.view(np.int64), want.view(np.int64))
    assert knn.cross_keys64(Q, R, qs[:0], rs, metric).shape == (0, rs.size)
    with pytest.raises(IndexError):
        knn.cross_keys64(Q, R, qs, np.array([40]), metric)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("side", [-1, 1])
def test_ranks_at_and_around_the_row_ratio(metric, side, monkeypatch):
    # outliers relevant to many queries (classes of 120): their rows over the bulk, against the
    # bulk search's GEMM, just within APART_ROW_RATIO (apart) and just beyond (the old path), the
    # absolute budget set to 0; the same ranks either way
    monkeypatch.setattr(ranks, "APART_MAX_ROW_WORK", 0)
    X, at = far_rows(N, 12, d=16, seed=7)
    y = np.arange(N) // 120
    y[at[:6]] = y[at[6]]
    near = np.setdiff1d(np.arange(N), at)
    n_rel_q = int(np.isin(y[near], y[at]).sum())
    n_rel_out = sum(int(np.sum(y[near] == y[o])) for o in at)
    share = (n_rel_q * near.size * 16 + 8 * n_rel_out * near.size) / (near.size * near.size * 16)
    monkeypatch.setattr(ranks, "APART_ROW_RATIO", share * (1 - side * 1e-9))
    taken = spy_apart(monkeypatch, ranks, "_ranks_apart")
    rr = relevant_ranks(X, y, metric=metric, depth=150)
    assert taken[-1] == (side < 0)
    assert as_dicts(rr) == brute_ranks(X, y, metric, 150)
    old = together(monkeypatch, relevant_ranks, X, y, metric=metric, depth=150)
    for f in ("offsets", "ranks", "refs"):
        assert np.array_equal(getattr(rr, f), getattr(old, f)), f
