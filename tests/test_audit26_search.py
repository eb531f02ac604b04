"""A nearly collapsed model with a few outliers, on the paths that still took the loose bound.

``relevant_ranks(..., output="hits")`` (``ranks._hits_at_R``) now searches the outliers apart too
(``ranks._hits_apart``: the bulk's float32 rows with its own bound, the outliers' float64 keys
appended to each row), and ``_ranks_apart``'s bulk search of classes of thousands keeps the tile
pass (its depth, R_i of all references, lies up to the number of outliers beyond the bulk's own
relevant sets: ``depth_over_R``), with the outliers' share of the work cut (the bulk pairs compared
with the outliers only for the queries with an outlier before their last pair within the depth; one
integer sort). Checked here: against a float64 brute force written here (every pair's
``pair_keys64``, the keys the search certifies against: a nearly collapsed model's near-ties lie
within the rounding of any other summation; ties to the lower index) and bit for bit against the
search without the split, on adversarial rows: duplicated outliers, outliers relevant to bulk
queries and to one another, outlier queries in a same-set search, the R_i-th place among the
outliers, R_i = 0, 1 and N - 1.
"""

import numpy as np
import pytest
from test_audit25_search import brute_orders, spy_apart  # (one copy of each)

import embedscope.metrics.search.knn as knn
import embedscope.metrics.search.ranks as ranks
from embedscope.metrics import retrieval_metrics
from embedscope.metrics.search import KeySpace, prepare, relevant_ranks
from embedscope.synthetic import nearly_collapsed


def outlier_set(n, d=16, n_out=6, far=0.1, noise=1e-5, seed=0, dup=False):
    """``n`` rows within ``noise`` of one unit point, ``n_out`` of them (returned, sorted) moved
    ``far`` from it; ``dup``: an outlier twice, a bulk row three times, an outlier's mirror image."""
    ties = dict(copies=[(-1, 0)], mirrors=[(1, 2)], bulk_copies=[(1, 3), (2, 3)]) if dup else {}
    return nearly_collapsed(n, d, n_out, far, noise=noise, seed=seed, **ties)


def brute_hits(X, y, metric, Xr=None, yr=None):
    """Per query: R_i and the relevant references among its first R_i."""
    yr = y if Xr is None else yr
    R, H = [], []
    for i, o in enumerate(brute_orders(X, metric, Xr)):
        r = int(np.sum(yr[o] == y[i]))
        R.append(r)
        H.append(int(np.sum(yr[o[:r]] == y[i])))
    return np.array(R), np.array(H)


def brute_ranks(X, y, metric, depth):
    """Per query {relevant reference: rank} (inf beyond the query's depth), same set."""
    depth = np.broadcast_to(depth, (len(X),))
    out = []
    for i, o in enumerate(brute_orders(X, metric)):
        rank = np.empty(len(X))
        rank[o] = np.arange(1, o.size + 1)
        rel = np.flatnonzero(y == y[i])
        rel = rel[rel != i]
        r = rank[rel]
        r[r > depth[i]] = np.inf
        out.append(dict(zip(rel.tolist(), r.tolist())))
    return out


def as_dicts(rr):
    return [dict(zip(rr.refs[rr.offsets[i]:rr.offsets[i + 1]].tolist(),
                     rr.ranks[rr.offsets[i]:rr.offsets[i + 1]].tolist())) for i in range(rr.n_queries)]


def together(monkeypatch, fn, *a, **kw):
    """``fn`` with the outliers searched with the rest (the path before the split)."""
    with monkeypatch.context() as m:
        m.setattr(knn, "OUTLIERS", False)
        return fn(*a, **kw)


# ----------------------------------------------------------------------------- hits at R
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("far,dup", [(1e-2, False), (0.1, True), (1.0, True)])
def test_hits_with_outliers_apart_match_the_brute_force(metric, far, dup, monkeypatch):
    X, at = outlier_set(480, far=far, dup=dup, seed=21)
    y = np.repeat(np.arange(16), 30)
    y[at[:3]] = y[at[3]]  # outliers relevant to one another and to bulk queries (and outlier queries)
    y[7] = 99  # a lone query (R_i = 0)
    y[at[5]] = 98  # a lone outlier
    taken = spy_apart(monkeypatch, ranks, "_hits_apart")
    rr = relevant_ranks(X, y, metric=metric, output="hits", block=100)
    assert taken == [True]
    R, H = brute_hits(X, y, metric)
    np.testing.assert_array_equal(rr.R, R)
    np.testing.assert_array_equal(rr.hits_at_R, H)
    old = together(monkeypatch, relevant_ranks, X, y, metric=metric, output="hits", block=100)
    np.testing.assert_array_equal(rr.hits_at_R, old.hits_at_R)
    assert H[at[:4]].sum() > 0 and np.all(H[at[5]] == 0)  # (outlier queries with hits and without)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_hits_when_the_R_th_place_falls_among_tied_outliers(metric, monkeypatch):
    # every bulk query's last places are the outliers (far from the point); with R_i = N - 3 the
    # cut falls among them, between two identical outliers (equal keys: the lower index first)
    X, at = outlier_set(400, far=0.2, seed=3)
    X[at[3]] = X[at[1]]
    y = np.zeros(400, dtype=np.int64)
    y[[at[1], 0]] = 1  # one of the twins and a bulk row: the other label
    taken = spy_apart(monkeypatch, ranks, "_hits_apart")
    rr = relevant_ranks(X, y, metric=metric, output="hits")
    assert taken == [True]
    R, H = brute_hits(X, y, metric)
    np.testing.assert_array_equal(rr.hits_at_R, H)
    assert R[5] == 397 and H[5] < R[5]  # (the cut lies inside the outliers for bulk queries)
    np.testing.assert_array_equal(rr.hits_at_R, together(monkeypatch, relevant_ranks, X, y, metric=metric,
                                                         output="hits").hits_at_R)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_hits_with_one_class_and_with_pairs(metric, monkeypatch):
    # R_i = N - 1 (every reference: hits = R_i) and R_i = 1 (pairs of rows)
    X, at = outlier_set(400, far=0.1, seed=5, dup=True)
    for y in (np.zeros(400, dtype=np.int64), np.arange(400) // 2):
        taken = spy_apart(monkeypatch, ranks, "_hits_apart")
        rr = relevant_ranks(X, y, metric=metric, output="hits")
        assert taken == [True]
        R, H = brute_hits(X, y, metric)
        np.testing.assert_array_equal(rr.R, R)
        np.testing.assert_array_equal(rr.hits_at_R, H)
        np.testing.assert_array_equal(rr.hits_at_R, together(monkeypatch, relevant_ranks, X, y, metric=metric,
                                                             output="hits").hits_at_R)
    assert np.array_equal(rr.R, np.ones(400))


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_hits_with_separate_references(metric, monkeypatch):
    A, _ = outlier_set(700, d=8, n_out=1, far=0.1, seed=5)
    X, Xr = A[:400].copy(), A[400:].copy()
    p = A.mean(axis=0)
    X[[7, 90, 300]] = p + np.float32(0.1) * (A[[5, 6, 8]] - p) / np.linalg.norm(A[[5, 6, 8]] - p, axis=1)[:, None]
    Xr[:20] = X[:20]  # shared rows: equal keys
    Xr[-1] = X[90]  # an outlier query's own row among the references
    Xr[-2] = p + np.float32(0.05) * (A[9] - p) / np.linalg.norm(A[9] - p)
    Xr[-3] = X[90] + np.float32(2e-3)
    Xr[75] = Xr[74]
    y, yr = np.arange(400) % 7, np.arange(300) % 7
    taken = spy_apart(monkeypatch, ranks, "_hits_apart")
    rr = relevant_ranks(X, y, X_ref=Xr, y_ref=yr, metric=metric, output="hits")
    assert taken == [True]
    R, H = brute_hits(X, y, metric, Xr, yr)
    np.testing.assert_array_equal(rr.R, R)
    np.testing.assert_array_equal(rr.hits_at_R, H)
    np.testing.assert_array_equal(rr.hits_at_R, together(monkeypatch, relevant_ranks, X, y, X_ref=Xr, y_ref=yr,
                                                         metric=metric, output="hits").hits_at_R)


def test_hits_of_usual_embeddings_are_not_split(monkeypatch):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((600, 16))
    X[:3] *= 100.0
    y = rng.integers(0, 5, 600)
    taken = spy_apart(monkeypatch, ranks, "_hits_apart")
    rr = relevant_ranks(X, y, metric="euclidean", output="hits")
    assert taken == [False]
    np.testing.assert_array_equal(rr.hits_at_R, brute_hits(X, y, "euclidean")[1])


# ----------------------------------------------------------------------------- ranks of large classes
def test_rows_plan_allows_the_outliers_beyond_the_relevant_sets():
    R = np.full(3000, 1400)
    assert not ranks._rows_plan("cpu", np.full(3000, 1403), 3000, R)
    assert ranks._rows_plan("cpu", np.full(3000, 1403), 3000, R, depth_over_R=3)
    assert not ranks._rows_plan("cpu", np.full(3000, 1404), 3000, R, depth_over_R=3)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_large_classes_with_outliers_keep_the_tile_pass(metric, monkeypatch):
    # classes deeper than ROWS_MAX_DEPTH (here lowered to 50): the bulk's depth R_i of all
    # references exceeds its own largest class by the outliers of that class; it stays on the tile
    # pass (it went to top-(depth + 16) candidate lists, 5x slower); the same numbers
    monkeypatch.setattr(ranks, "ROWS_MAX_DEPTH", 50)
    X, at = outlier_set(400, far=0.1, seed=13, dup=True)
    y = np.arange(400) % 4
    y[at] = 1  # class 1 holds every outlier: its bulk has 94 + 6 rows, the other classes 100
    plans = []
    real = ranks._rows_plan
    monkeypatch.setattr(ranks, "_rows_plan", lambda *a, **k: plans.append(real(*a, **k)) or plans[-1])
    taken = spy_apart(monkeypatch, ranks, "_ranks_apart")
    keys = ["P@1", "R-Precision", "MAP@R"]
    got = retrieval_metrics(X, y, metric=metric, include=keys, per_query=True)
    assert any(taken) and plans and all(plans)
    old = together(monkeypatch, retrieval_metrics, X, y, metric=metric, include=keys, per_query=True)
    for k in keys:
        assert got[k] == old[k]
    for k, v in got["per_query"].items():
        np.testing.assert_array_equal(v, old["per_query"][k])
    # from the brute force: R-Precision and MAP@R of every query
    R = np.bincount(y)[y] - 1
    rp, ap = [], []
    for i, d in enumerate(brute_ranks(X, y, metric, R)):
        r = np.sort([v for v in d.values() if v <= R[i]])
        rp.append(r.size / R[i])
        ap.append(np.sum(np.arange(1, r.size + 1) / r) / R[i])
    np.testing.assert_allclose(got["per_query"]["R-Precision"], rp, rtol=0, atol=1e-15)
    np.testing.assert_allclose(got["per_query"]["MAP@R"], ap, rtol=0, atol=1e-12)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("compact", [False, True])
def test_per_query_depths_with_outliers_before_some_queries_last_pairs(metric, compact, monkeypatch):
    # per-query depths: deep ones (every rank: the outliers come before the last pairs) mixed with
    # shallow ones (none before), so that only some queries' pairs are compared with the outliers
    X, at = outlier_set(420, far=0.1, seed=17, dup=True)
    y = np.repeat(np.arange(7), 60)
    y[at[:2]] = y[0]
    rng = np.random.default_rng(1)
    depth = np.where(rng.random(420) < 0.3, 419, rng.integers(1, 70, 420))
    sets = ranks.check_sets(X, y)
    taken = spy_apart(monkeypatch, ranks, "_ranks_apart")
    rr = ranks.compute_relevant_ranks(sets, metric, depth, compact=compact)
    assert taken[-1]
    old = together(monkeypatch, ranks.compute_relevant_ranks, ranks.check_sets(X, y), metric, depth,
                   compact=compact)
    for f in ("offsets", "ranks", "refs", "R", "depth_q", "n_ranked"):
        a, b = getattr(rr, f), getattr(old, f)
        assert (a is None and b is None) or np.array_equal(a, b), f
    want = brute_ranks(X, y, metric, depth)
    if rr.n_ranked is not None:  # a compact result lists the ranks within the depth only
        want = [{r: v for r, v in d.items() if np.isfinite(v)} for d in want]
    assert as_dicts(rr) == want


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_outliers_of_large_classes_are_ranked_apart_within_the_row_budget(metric, monkeypatch):
    # each outlier is relevant to half the queries (two classes): their rows over the bulk, one per
    # query for all its outliers, cost about one more GEMM of the search, within APART_ROW_RATIO of
    # it (the absolute budget set to 0 here), where the budget of (query, outlier) pairs had sent
    # such searches back to the loose bound (6,000 x 128: 2.7x slower); many outliers relevant to
    # every query go beyond it
    monkeypatch.setattr(ranks, "APART_MAX_ROW_WORK", 0)
    X, at = outlier_set(400, d=64, far=0.1, seed=23, dup=True)
    y = np.arange(400) % 2
    taken = spy_apart(monkeypatch, ranks, "_ranks_apart")
    rr = relevant_ranks(X, y, metric=metric, depth=250)
    assert taken[-1]
    assert as_dicts(rr) == brute_ranks(X, y, metric, 250)
    old = together(monkeypatch, relevant_ranks, X, y, metric=metric, depth=250)
    for f in ("offsets", "ranks", "refs"):
        assert np.array_equal(getattr(rr, f), getattr(old, f))
    taken.clear()
    X, at = outlier_set(1280, d=64, n_out=20, far=0.1, seed=23)
    Q = prepare(X.astype(np.float64), metric)
    assert knn.outlier_refs(KeySpace(Q, Q, metric, True)).size == 20
    relevant_ranks(X, np.zeros(1280, dtype=np.int64), metric=metric, depth=20)  # 20 outliers x every query
    assert taken == [False]
    monkeypatch.setattr(ranks, "APART_ROW_RATIO", 100.0)  # (the budget was what turned it down)
    relevant_ranks(X, np.zeros(1280, dtype=np.int64), metric=metric, depth=20)
    assert taken[-1]
