"""A nearly collapsed model searched about its mean (``knn.centre_of``, ``KeySpace`` centred).

Rows within ~1e-5 of one point: every float32 key of the rows as given lies within the tile's
error bound (~1e-5) of the others, so each pass compared every pair in float64 (quadratic: 20,000
rows took 70 s). Measured about the rows' mean, the float32 keys carry the differences between
rows and the bound scales with their spread. Checked here: when a search is centred and when
not; the bound against the float64 keys; and the exact ranks of every pass against a brute force
from the same float64 keys (``pair_keys64`` of every pair, ties to the lower index).
"""

import numpy as np
import pytest

import embedscope.metrics.search.counting as counting
import embedscope.metrics.search.knn as knn
import embedscope.metrics.search.ranks as ranks
from embedscope.metrics.search import KeySpace, knn_search, pair_keys64, prepare, relevant_ranks


def nearly_collapsed(n, d=16, noise=1e-5, seed=0, n_points=1, offset=0.0):
    rng = np.random.default_rng(seed)
    P = rng.standard_normal((n_points, d)) + offset
    return (P[rng.integers(0, n_points, n)] + noise * rng.standard_normal((n, d))).astype(np.float32)


def keyspace(X, metric, Xr=None, centre=None):
    Q = prepare(np.asarray(X, dtype=np.float64), metric)
    R = Q if Xr is None else prepare(np.asarray(Xr, dtype=np.float64), metric)
    return KeySpace(Q, R, metric, Xr is None, centre=centre)


def all_keys(ks):
    nq, nr = ks.Q64.shape[0], ks.R64.shape[0]
    qi, rj = np.repeat(np.arange(nq), nr), np.tile(np.arange(nr), nq)
    return pair_keys64(ks.Q64, ks.R64, qi, rj, ks.metric).reshape(nq, nr)


def brute_ranks(ks, y, yr, depth):
    """Per query, its relevant references' ranks (inf beyond ``depth``), in reference order."""
    K = all_keys(ks)
    out = []
    for i in range(K.shape[0]):
        cand = np.arange(K.shape[1])
        if ks.same:
            cand = cand[cand != i]
        order = cand[np.lexsort((cand, -K[i, cand]))]
        rank = np.empty(K.shape[1])
        rank[order] = np.arange(1, order.size + 1)
        rel = np.flatnonzero(yr == y[i])
        if ks.same:
            rel = rel[rel != i]
        r = rank[rel]
        r[r > depth] = np.inf
        out.append(dict(zip(rel.tolist(), r.tolist())))
    return out


def assert_ranks(X, y, metric, depth, Xr=None, yr=None, output="ranks"):
    ks = keyspace(X, metric, Xr)
    assert ks.centre is not None  # the search under test is centred
    yq, yref = np.asarray(y), np.asarray(y if yr is None else yr)
    want = brute_ranks(ks, yq, yref, depth)
    rr = relevant_ranks(X, y, X_ref=Xr, y_ref=yr, metric=metric, depth=depth, output=output)
    if output == "hits":
        R = np.array([len(w) for w in want])
        exp = [sum(1 for r in w.values() if r <= R[i]) for i, w in enumerate(want)]
        assert rr.hits_at_R.tolist() == exp
        return
    for i, w in enumerate(want):
        a, b = rr.offsets[i], rr.offsets[i + 1]
        got = dict(zip(rr.refs[a:b].tolist(), rr.ranks[a:b].tolist()))
        within = {j: r for j, r in w.items() if np.isfinite(r)}
        assert {j: r for j, r in got.items() if np.isfinite(r)} == within, i


# ----------------------------------------------------------------------------- when to centre
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("noise", [1e-3, 1e-4, 1e-5])
def test_a_nearly_collapsed_set_is_centred(metric, noise, monkeypatch):
    X = nearly_collapsed(3000, noise=noise)
    ks = keyspace(X, metric)
    assert ks.centre is not None and not ks.plain
    monkeypatch.setattr(knn, "CENTRE", False)
    as_given = keyspace(X, metric)
    assert as_given.centre is None
    # the bound shrinks with the spread: by 10^3.5 or more at these noises
    assert np.max(ks.delta) < 10 ** -3.5 * np.min(as_given.delta)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_usual_embeddings_and_unresolvable_cosine_spreads_are_not_centred(metric):
    rng = np.random.default_rng(1)
    gauss = rng.standard_normal((3000, 64))
    shifted = 10.0 + rng.standard_normal((3000, 64))  # a common offset: Euclidean keys do not change
    exact = np.tile(rng.standard_normal(16), (500, 1))  # exactly collapsed: Euclidean centres (keys 0)
    ulp = nearly_collapsed(3000, noise=1e-8)  # cosine keys ~1e-15 apart: below the float64 rounding of a key
    for X, centred in ((gauss, False), (ulp, metric == "euclidean"), (shifted, metric == "euclidean")):
        ks = keyspace(X, metric)
        assert (ks.centre is not None) == centred
        assert ks.plain == (metric == "cosine" and not centred)
    keyspace(exact, metric)  # (either way exact; see test_retrieval_collapsed)
    # a large search asks a sample of its rows first; a far row outside the sample still counts
    outlier = nearly_collapsed(3000, noise=1e-4)
    assert keyspace(outlier, metric).centre is not None
    outlier[1] = -outlier[1] * 3.0  # (the sample takes every second row from 0)
    assert keyspace(outlier, metric).centre is None


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_one_float32_ulp_of_spread_is_centred_and_ranked_exactly(metric, seen):
    # unit rows within ~1e-7 of one point (about one float32 ulp): cosine keys ~1e-12 apart, ten
    # times the float64 rounding of a key; the passes resolve them in tile units
    rng = np.random.default_rng(3)
    c = rng.standard_normal(128)
    X = (c / np.linalg.norm(c) + 1e-7 * rng.standard_normal((1500, 128))).astype(np.float32)
    assert np.unique(X, axis=0).shape[0] == 1500
    assert_ranks(X, np.repeat(np.arange(25), 60), metric, depth=60)
    if metric == "euclidean":  # (uncentred, every window held the whole row; cosine keys near the
        assert not seen  # float64 rounding still tie in places)


# ----------------------------------------------------------------------------- the bound
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("noise,offset,d,separates", [(1e-3, 0.0, 16, True), (1e-5, 0.0, 64, True),
                                                      (1e-6, 3.0, 8, False), (1e-4, 0.0, 300, True)])
def test_centred_float32_keys_lie_within_the_bound(metric, noise, offset, d, separates):
    # (1e-6 about a point of norm ~9: keys ~1e-14 apart for cosine, at float64's own resolution)
    X = nearly_collapsed(700, d=d, noise=noise, seed=2, offset=offset)
    X, Xr = X[:400], X[400:].copy()
    Xr[:40] = X[:40]  # some rows shared
    for ks in (keyspace(X, metric, centre=True), keyspace(X, metric, Xr, centre=True)):
        assert ks.centre is not None
        K = all_keys(ks)
        fin = np.ones(K.shape, dtype=bool)
        if ks.same:
            np.fill_diagonal(fin, False)
        # the row keys (two float32 steps) and the augmented tile GEMM of the passes
        got = ks.rows_keys32(np.arange(ks.Q64.shape[0]))
        assert np.all(np.abs(got[fin] - K[fin]) <= np.broadcast_to(ks.delta[:, None], K.shape)[fin])
        Qa, Ra, qoff = counting.augmented(ks)
        tile = (Qa @ Ra.T).astype(np.float64) - qoff[:, None]
        bound = counting.tile_delta(ks, counting.k_chunks(ks))
        assert np.all(np.abs(tile[fin] - K[fin]) <= np.broadcast_to(bound[:, None], K.shape)[fin])
        # the float64 estimates of the relevant pairs' keys (a GEMM of the centred rows)
        est = ks.centred_keys64(np.arange(ks.Q64.shape[0]), np.arange(ks.R64.shape[0]))
        err = np.broadcast_to(np.broadcast_to(ks.est_err, (K.shape[0],))[:, None], K.shape)
        assert np.all(np.abs(est[fin] - K[fin]) <= err[fin])
        # and it is tight enough to separate the keys: most neighbouring keys differ by more than 2 delta
        if separates:
            s = np.sort(K[fin].reshape(K.shape[0], -1), axis=1)
            assert np.median(np.diff(s, axis=1)) > 2 * np.median(ks.delta)


# ----------------------------------------------------------------------------- every pass, exact
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_the_tile_pass_ranks_a_centred_set_exactly(metric, seen):
    X = nearly_collapsed(1200, noise=1e-4, seed=4)
    y = np.repeat(np.arange(20), 60)
    assert_ranks(X, y, metric, depth=60)
    assert_ranks(X, np.repeat(np.arange(3), 400), metric, depth=400)  # classes of hundreds (large mode)
    assert not seen  # the keys separate: no tied windows


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("faiss_floors", [False, True])
def test_the_counting_pass_ranks_a_centred_set_exactly(metric, faiss_floors, monkeypatch, seen):
    monkeypatch.setattr(ranks, "USE_ROWS", False)
    if faiss_floors:  # the floors from a faiss flat search of the sample (large sets), not numpy
        monkeypatch.setattr(counting, "NUMPY_FLOOR_MAX", 0)
    X = nearly_collapsed(1600, noise=1e-4, seed=5)
    y = np.repeat(np.arange(800), 2)
    y[:90] = 5000  # one class of 90, the rest pairs
    counted = []
    real = counting.relevant_ranks_by_count
    monkeypatch.setattr(counting, "relevant_ranks_by_count", lambda *a, **k: counted.append(1) or real(*a, **k))
    assert_ranks(X, y, metric, depth=89)
    assert counted and not seen


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_candidate_lists_hits_and_separate_sets_of_a_centred_set(metric, monkeypatch):
    X = nearly_collapsed(700, noise=1e-4, seed=6)
    y = np.repeat(np.arange(14), 50)
    monkeypatch.setattr(ranks, "USE_ROWS", False)
    assert_ranks(X, y, metric, depth=120)  # small sets: the candidate lists (faiss) and their float64 check
    monkeypatch.setattr(ranks, "USE_ROWS", True)
    assert_ranks(X, y, metric, depth=50, output="hits")
    Xr = nearly_collapsed(1200, noise=1e-4, seed=6)[700:]  # around the same point
    yr = np.repeat(np.arange(10), 50)
    assert_ranks(X[:300], y[:300], metric, depth=50, Xr=Xr, yr=yr)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("select", [True, False])
def test_knn_search_of_a_centred_set(metric, select, monkeypatch):
    monkeypatch.setattr(knn, "CPU_SELECT", select)  # own tiles (symmetric and not) or faiss candidates
    X = nearly_collapsed(1600, noise=1e-5, seed=8)
    X, Xr = X[:900], X[900:]
    for R, excl in ((None, True), (Xr, False)):
        ks = keyspace(X, metric, R)
        assert ks.centre is not None
        K = all_keys(ks)
        if excl:
            np.fill_diagonal(K, -np.inf)
        k = 25
        want = np.array([np.lexsort((np.arange(K.shape[1]), -K[i]))[:k] for i in range(K.shape[0])])
        _, idx = knn_search(X, R, k, metric=metric, exclude_self=excl)
        assert np.array_equal(idx, want)


# ----------------------------------------------------------------------------- NR-Prec's engine
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_property_precision_of_a_centred_set(metric, monkeypatch):
    # NR-Prec's engine keeps the float32 copies of KeySpace: the same hits as the definition
    # (each query's R_v nearest by the float64 keys, ties to the lower index), no union pass
    from embedscope.metrics import properties as props_mod

    unions = []
    real = props_mod._Engine._union_rows
    monkeypatch.setattr(props_mod._Engine, "_union_rows", lambda self, big, *a, **k: unions.append(1) or real(
        self, big, *a, **k))
    X = nearly_collapsed(800, noise=1e-4, seed=11)
    rng = np.random.default_rng(12)
    props = {"few": rng.integers(0, 3, 800), "many": rng.integers(0, 40, 800)}
    eng = props_mod._Engine(np.asarray(X, dtype=np.float64), metric)
    ks = keyspace(X, metric)
    assert ks.centre is not None and eng.qoff is not None
    K = all_keys(ks)
    np.fill_diagonal(K, -np.inf)
    order = np.array([np.lexsort((np.arange(800), -K[i])) for i in range(800)])[:, :-1]  # self last
    codes = np.stack([props_mod._encode(v, 800, k) for k, v in props.items()])
    R = np.stack([np.bincount(c)[c] - 1 for c in codes])
    H = eng.hits(codes, R)
    for i, c in enumerate(codes):
        want = [int(np.sum(c[order[q, :R[i, q]]] == c[q])) for q in range(800)]
        assert H[i].tolist() == want
    assert not unions
