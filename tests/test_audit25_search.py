"""A nearly collapsed model with a few outliers (knn.outlier_refs, knn._knn_apart).

The outliers set the largest centred reference norm, which entered every query's error bound:
every window grew and the float64 re-decision took most pairs (knn_search at 2,000 x 128: 0.03 s
-> 2.2 s), or, farther out, kept the search from being centred at all. knn_search now searches
them apart (the bulk by its own bound, the outliers' float64 keys directly). Checked here: the
neighbours and values against a float64 brute force written here (and tests/brute.py's ranking),
bit for bit against the search without the split, on adversarial rows (duplicated outliers,
outlier queries, ties, k near N), and that the split is taken where it should be and not for
usual embeddings.
"""

import numpy as np
import pytest
from brute import ranked_references

import embedscope.metrics.search.knn as knn
import embedscope.metrics.search.ranks as ranks
from embedscope.metrics import retrieval_metrics
from embedscope.metrics.search import KeySpace, knn_search, pair_keys64, prepare, relevant_ranks
from embedscope.synthetic import nearly_collapsed


def outlier_set(n, d=16, n_out=4, far=0.1, noise=1e-5, seed=0, dup=False):
    """``n`` rows within ``noise`` of one unit point, ``n_out`` of them (returned, sorted) moved ``far``
    from it: ``embedscope.synthetic.nearly_collapsed``, the ties placed in the drawn order of the far
    rows. ``dup``: ties: the last outlier drawn a copy of the first, the second the mirror image of the
    third through the point, two bulk rows copies of a third (rows among the bulk: never an outlier)."""
    ties = dict(copies=[(-1, 0)], mirrors=[(1, 2)], bulk_copies=[(1, 3), (2, 3)]) if dup else {}
    X, at = nearly_collapsed(n, d, n_out, far, noise=noise, seed=seed, sort=False, **ties)
    return X, np.sort(at)


def brute_knn(X, k, metric, Xr=None):
    """Per query the first k references and their values, self left out when ``Xr`` is None: the
    order from every pair's float64 key (``pair_keys64`` of the rows as the search ranks them, the
    same bits as the search's keys: near-ties of a nearly collapsed model lie within the rounding
    of any other summation), ties to the lower index; the values from the formula (float64)."""
    Q = prepare(np.asarray(X, dtype=np.float64), metric)
    R = Q if Xr is None else prepare(np.asarray(Xr, dtype=np.float64), metric)
    nq, nr = len(Q), len(R)
    key = pair_keys64(Q, R, np.repeat(np.arange(nq), nr), np.tile(np.arange(nr), nq), metric).reshape(nq, nr)
    vals, idx = [], []
    for i in range(nq):
        cand = np.arange(nr)
        if Xr is None:
            cand = cand[cand != i]
        o = cand[np.lexsort((cand, -key[i, cand]))][:k]
        idx.append(o)
        d = Q[i] - R[o]
        vals.append(R[o] @ Q[i] if metric == "cosine" else np.sqrt((d * d).sum(1)))
    return np.array(vals), np.array(idx)


def spy_apart(monkeypatch, module, name: str) -> list[bool]:
    """Per call of ``module.name`` (the outliers-apart path), whether it took the split (not None)."""
    taken = []
    real = getattr(module, name)

    def spy(*a, **kw):
        out = real(*a, **kw)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(module, name, spy)
    return taken


def spy_split(monkeypatch):
    return spy_apart(monkeypatch, knn, "_knn_apart")


def without_split(monkeypatch, *args, **kw):
    with monkeypatch.context() as m:
        m.setattr(knn, "OUTLIERS", False)
        return knn_search(*args, **kw)


def assert_bitwise(a, b):
    assert np.array_equal(a[1], b[1])
    assert np.array_equal(a[0].view(np.int64), b[0].view(np.int64))


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("far", [1e-2, 0.1, 1.0])
@pytest.mark.parametrize("dup", [False, True])
def test_outliers_searched_apart_match_the_brute_force(metric, far, dup, monkeypatch):
    X, at = outlier_set(500, far=far, dup=dup, seed=int(far * 100) + dup)
    Q = prepare(X.astype(np.float64), metric)  # every row of `at` one of the outliers searched apart (ties too)
    np.testing.assert_array_equal(knn.outlier_refs(KeySpace(Q, Q, metric, True)), at)
    taken = spy_split(monkeypatch)
    for k in (1, 7, 40):
        got = knn_search(X, k=k, metric=metric, exclude_self=True)
        vals, idx = brute_knn(X, k, metric)
        np.testing.assert_array_equal(got[1], idx)
        np.testing.assert_allclose(got[0], vals, rtol=0, atol=1e-12)
        assert_bitwise(got, without_split(monkeypatch, X, k=k, metric=metric, exclude_self=True))
    assert taken and all(taken)  # the split was the search under test
    # the outlier queries (their keys lie far apart: any summation orders them alike) by brute.py
    orders, _ = ranked_references(X, np.zeros(len(X)), metric=metric)
    for q in at:
        np.testing.assert_array_equal(got[1][q], orders[q][:40])


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_outliers_apart_with_separate_references_and_self_included(metric, monkeypatch):
    A, _ = outlier_set(700, d=8, n_out=1, far=0.1, seed=5)
    X, Xr = A[:400].copy(), A[400:].copy()
    p = A.mean(axis=0)
    X[[7, 90, 300]] = p + np.float32(0.1) * (A[[5, 6, 8]] - p) / np.linalg.norm(A[[5, 6, 8]] - p, axis=1)[:, None]
    X[91] = X[90]  # a duplicated outlier
    Xr[:20] = X[:20]  # shared rows (and an outlier): equal keys
    Xr[-1] = X[90]
    Xr[-2] = p + np.float32(0.05) * (A[9] - p) / np.linalg.norm(A[9] - p)
    taken = spy_split(monkeypatch)
    for R, k in ((Xr, 5), (Xr, 294), (Xr, 299), (None, 12)):  # (Xr: 4 outliers)
        got = knn_search(X, R, k=k, metric=metric)  # R None without exclude_self: a query finds itself
        vals, idx = brute_knn(X, k, metric, X if R is None else R)
        np.testing.assert_array_equal(got[1], idx)
        np.testing.assert_allclose(got[0], vals, rtol=0, atol=1e-12)
        assert_bitwise(got, without_split(monkeypatch, X, R, k=k, metric=metric))
    assert taken == [True, True, False, True]  # (k = 299 of 300: too few left beyond the outliers)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_outliers_nearest_to_one_another_and_tied_are_merged_in_order(metric, monkeypatch):
    # three outliers close together, two of them identical (equal keys: the lower index first):
    # each one's nearest references are outliers, searched apart from the bulk
    X, at = outlier_set(300, far=0.2, seed=9)
    X[at[1]] = X[at[0]]
    X[at[2]] = X[at[0]] + np.float32(1e-3)
    taken = spy_split(monkeypatch)
    got = knn_search(X, k=3, metric=metric, exclude_self=True)
    assert taken == [True]
    vals, idx = brute_knn(X, 3, metric)
    np.testing.assert_array_equal(got[1], idx)
    assert list(got[1][at[0]][:2]) == [at[1], at[2]]
    assert list(got[1][at[1]][:2]) == [at[0], at[2]]
    assert list(got[1][at[2]][:2]) == [at[0], at[1]] and got[0][at[2]][0] == got[0][at[2]][1]
    assert_bitwise(got, without_split(monkeypatch, X, k=3, metric=metric, exclude_self=True))


def test_usual_and_uncollapsed_embeddings_are_not_split():
    rng = np.random.default_rng(2)
    gauss = rng.standard_normal((3000, 32))
    gauss[:3] *= 100.0  # far rows in a usual embedding: the sample says not collapsed
    for metric in ("cosine", "euclidean"):
        Q = prepare(gauss, metric)
        assert knn.outlier_refs(KeySpace(Q, Q, metric, True)) is None
    X, at = outlier_set(3000, d=32, far=0.1)
    Q = prepare(X.astype(np.float64), "euclidean")
    np.testing.assert_array_equal(knn.outlier_refs(KeySpace(Q, Q, "euclidean", True)), at)
    X2, _ = outlier_set(3000, d=32, n_out=100, far=0.1)  # more than N / 64 far rows: not outliers
    Q2 = prepare(X2.astype(np.float64), "euclidean")
    assert knn.outlier_refs(KeySpace(Q2, Q2, "euclidean", True)) is None


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_the_bulk_bound_is_tighter_and_holds_for_its_pairs(metric):
    # the bound that the split relies on: the bulk's own KeySpace bound (over its references only)
    # holds for every bulk pair and is far below the bound over all references
    X, at = outlier_set(600, far=0.1, seed=3)
    Q = prepare(X.astype(np.float64), metric)
    ks = KeySpace(Q, Q, metric, True)
    near = np.setdiff1d(np.arange(600), at)
    sub = KeySpace(Q[near], Q[near], metric, True)
    assert sub.centre is not None
    assert np.median(sub.delta) * 1e3 < np.median(ks.delta[near])
    got = sub.rows_keys32(np.arange(near.size))
    B = Q[near]
    K = (B @ B.T) if metric == "cosine" else -((B[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    off = ~np.eye(near.size, dtype=bool)
    assert np.all(np.abs(got - K)[off] <= np.broadcast_to(sub.delta[:, None], K.shape)[off] + 1e-15)


# ----------------------------------------------------------------------------- relevant ranks
def brute_orders(X, metric, Xr=None):
    """Per query, every reference in rank order: float64 keys of every pair, ties to the lower
    index, the query itself left out when ``Xr`` is None."""
    Q = prepare(np.asarray(X, dtype=np.float64), metric)
    R = Q if Xr is None else prepare(np.asarray(Xr, dtype=np.float64), metric)
    nq, nr = len(Q), len(R)
    K = pair_keys64(Q, R, np.repeat(np.arange(nq), nr), np.tile(np.arange(nr), nq), metric).reshape(nq, nr)
    out = []
    for i in range(nq):
        cand = np.arange(nr)
        if Xr is None:
            cand = cand[cand != i]
        out.append(cand[np.lexsort((cand, -K[i, cand]))])
    return out


def brute_ranks(X, y, metric, depth, Xr=None, yr=None):
    """Per query {relevant reference: rank} (inf beyond ``depth``), from :func:`brute_orders`."""
    yr = y if Xr is None else yr
    nr = len(X) if Xr is None else len(Xr)
    out = []
    for i, order in enumerate(brute_orders(X, metric, Xr)):
        rank = np.full(nr, np.inf)
        rank[order] = np.arange(1, order.size + 1)
        rel = np.flatnonzero(yr == y[i])
        if Xr is None:
            rel = rel[rel != i]
        r = rank[rel]
        r[r > depth] = np.inf
        out.append(dict(zip(rel.tolist(), r.tolist())))
    return out


def as_dicts(rr):
    out = []
    for i in range(rr.n_queries):
        a, b = rr.offsets[i], rr.offsets[i + 1]
        out.append(dict(zip(rr.refs[a:b].tolist(), rr.ranks[a:b].tolist())))
    return out


def spy_ranks(monkeypatch):
    return spy_apart(monkeypatch, ranks, "_ranks_apart")


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("far,dup", [(1e-2, False), (0.1, True), (1.0, True)])
def test_relevant_ranks_with_outliers_apart_match_the_brute_force(metric, far, dup, monkeypatch):
    X, at = outlier_set(480, far=far, dup=dup, n_out=6, seed=11)
    y = np.repeat(np.arange(16), 30)
    y[at[:3]] = y[at[3]]  # outliers relevant to one another and to bulk queries
    taken = spy_ranks(monkeypatch)
    for depth in (3, 29, "all"):
        rr = relevant_ranks(X, y, metric=metric, depth=depth)
        d = 479 if depth == "all" else depth
        assert as_dicts(rr) == brute_ranks(X, y, metric, d)
        with monkeypatch.context() as m:
            m.setattr(knn, "OUTLIERS", False)
            old = relevant_ranks(X, y, metric=metric, depth=depth)
        for f in ("offsets", "ranks", "refs", "R"):
            assert np.array_equal(getattr(rr, f), getattr(old, f))
    assert sum(taken) == 3  # (each split search once; its bulk search is not split again)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_relevant_ranks_with_outliers_apart_separate_references(metric, monkeypatch):
    A, _ = outlier_set(700, d=8, n_out=1, far=0.1, seed=5)
    X, Xr = A[:400].copy(), A[400:].copy()
    p = A.mean(axis=0)
    X[[7, 90, 300]] = p + np.float32(0.1) * (A[[5, 6, 8]] - p) / np.linalg.norm(A[[5, 6, 8]] - p, axis=1)[:, None]
    Xr[:20] = X[:20]
    Xr[-1] = X[90]
    Xr[-2] = p + np.float32(0.05) * (A[9] - p) / np.linalg.norm(A[9] - p)
    Xr[-3] = X[90] + np.float32(2e-3)  # query 90 (an outlier): two outliers before every bulk reference
    Xr[75] = Xr[74]  # (A's own outlier: at most N / 64 = 4 outliers)
    y, yr = np.arange(400) % 7, np.arange(300) % 7
    taken = spy_ranks(monkeypatch)
    for depth in (5, 60):
        rr = relevant_ranks(X, y, X_ref=Xr, y_ref=yr, metric=metric, depth=depth)
        assert as_dicts(rr) == brute_ranks(X, y, metric, depth, Xr, yr)
    assert sum(taken) == 2


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_retrieval_metrics_with_outliers_apart_are_unchanged(metric, monkeypatch):
    X, at = outlier_set(900, d=32, far=0.1, n_out=8, seed=4, dup=True)
    y = np.repeat(np.arange(15), 60)
    taken = spy_ranks(monkeypatch)
    got = retrieval_metrics(X, y, metric=metric, include=["P@1", "R-Precision", "MAP@R", "R@4"], per_query=True)
    assert any(taken)
    with monkeypatch.context() as m:
        m.setattr(knn, "OUTLIERS", False)
        old = retrieval_metrics(X, y, metric=metric, include=["P@1", "R-Precision", "MAP@R", "R@4"], per_query=True)
    for k in ("P@1", "R-Precision", "MAP@R", "R@4"):
        assert got[k] == old[k]
    for k, v in got["per_query"].items():
        np.testing.assert_array_equal(v, old["per_query"][k])
    # and from the brute force: R-Precision and P@1 of every query
    br = brute_ranks(X, y, metric, 59)
    rp = np.array([sum(r <= 59 for r in d.values()) / 59 for d in br])
    p1 = np.array([any(r == 1 for r in d.values()) for d in br])
    np.testing.assert_allclose(got["per_query"]["R-Precision"], rp, rtol=0, atol=1e-15)
    assert got["P@1"] == pytest.approx(p1.mean(), abs=1e-15)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_top_k_measures_with_outliers_apart_match_the_brute_force(metric, monkeypatch):
    # P@1 / R@k alone read each query's exact top k (topk_exact), where the split is taken too
    X, at = outlier_set(900, d=32, far=0.1, n_out=8, seed=7, dup=True)
    y = np.repeat(np.arange(15), 60)
    y[at] = y[0]
    taken = spy_split(monkeypatch)
    got = retrieval_metrics(X, y, metric=metric, include=["P@1", "R@2"])
    assert any(taken)
    _, idx = brute_knn(X, 2, metric)
    rel = y[idx] == y[:, None]
    assert got["P@1"] == pytest.approx(rel[:, 0].mean(), abs=1e-15)
    assert got["R@2"] == pytest.approx(rel.any(1).mean(), abs=1e-15)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_compact_ranks_of_large_classes_with_outliers_apart(metric, monkeypatch):
    # classes of hundreds: a compact result (only the ranks within each query's depth R_i)
    X, at = outlier_set(1200, d=16, far=0.1, n_out=10, seed=8, dup=True)
    y = np.repeat(np.arange(3), 400)
    y[at[:4]] = 2
    sets = ranks.check_sets(X, y)
    R = ranks.relevant_counts(sets)
    taken = spy_ranks(monkeypatch)
    rr = ranks.compute_relevant_ranks(sets, metric, R.clip(1), compact=True)
    assert sum(taken) == 1
    with monkeypatch.context() as m:
        m.setattr(knn, "OUTLIERS", False)
        old = ranks.compute_relevant_ranks(ranks.check_sets(X, y), metric, R.clip(1), compact=True)
    assert rr.n_ranked is not None and old.n_ranked is not None  # (the compact result under test)
    for f in ("offsets", "ranks", "refs", "n_ranked", "R", "depth_q"):
        assert np.array_equal(getattr(rr, f), getattr(old, f))
    assert rr.depth == old.depth
    br = brute_ranks(X, y, metric, 1199)
    for i in (0, 500, 1000, *at):
        want = {r: v for r, v in br[i].items() if v <= R[i]}
        a, b = rr.offsets[i], rr.offsets[i + 1]
        assert dict(zip(rr.refs[a:b].tolist(), rr.ranks[a:b].tolist())) == want
