"""NR-Prec (docs/methods.md §9) of a nearly collapsed model with a few far rows ("outliers"): the
properties engine takes them apart (``_Engine._outliers_apart``: the bulk's own, tighter float32 bound,
the outliers ranked among each query's neighbours exactly, the outlier queries from their full float64
rows). Checked against a float64 brute force written here from the definition (ties to the lower index)
and against the engine with the outliers kept in (``knn.OUTLIERS = False``), bit for bit; and the one
integer sort of ``ranks.compute_relevant_ranks`` against the lexsort it replaced."""

from __future__ import annotations

import numpy as np
import pytest
from brute import unit_rows

from embedscope.metrics import properties as props_mod
from embedscope.metrics.search import knn
from embedscope.metrics.search import ranks as ranks_mod
from embedscope.synthetic import nearly_collapsed


def _same(a: dict, b: dict) -> None:
    """Every number of two property_precision results the same, bit for bit (repr: NaN equals NaN, the
    shortest round-trip digits), and the same ``undefined`` reasons."""
    assert repr(a) == repr(b)


def _collapsed(n: int, d: int, n_out: int, far: float, seed: int,
               twins: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows within 1e-5 of one unit point, ``n_out`` of them (the first ones after a shuffle)
    moved ``far`` away; with ``twins`` the second outlier is a copy of the first (their keys tie for
    every query) and the fourth mirrors the third through the point (ties under some queries)."""
    ties = dict(copies=[(1, 0)], mirrors=[(3, 2)]) if twins and n_out >= 4 else {}
    return nearly_collapsed(n, d, n_out, far, seed=seed, dtype=np.float64, **ties)


def _brute_keys(X: np.ndarray, metric: str) -> np.ndarray:
    """Every pair's float64 key (larger = nearer) from the definition: cosine, the inner product of the
    L2-normalised rows; Euclidean, minus the squared distance; each pair reduced on its own."""
    A = np.asarray(X, dtype=np.float64)
    if metric == "cosine":
        A = unit_rows(A)  # (docs/methods.md §1: x / max|x|, then / sqrt(Σ y²))
    n = A.shape[0]
    K = np.empty((n, n))
    for q in range(n):
        if metric == "cosine":
            K[q] = np.einsum("ij,ij->i", A, np.broadcast_to(A[q], A.shape))
        else:
            diff = A[q] - A
            K[q] = -np.einsum("ij,ij->i", diff, diff)
    return K


def _brute_hits(K: np.ndarray, codes: np.ndarray, R: np.ndarray) -> np.ndarray:
    """Per property and query: how many of its R nearest others (key descending, lower index first on
    ties) share its value."""
    P, n = codes.shape
    H = np.zeros((P, n), dtype=np.int64)
    idx = np.arange(n)
    for q in range(n):
        others = idx[idx != q]
        order = others[np.lexsort((others, -K[q, others]))]
        for k in range(P):
            H[k, q] = np.count_nonzero(codes[k, order[:R[k, q]]] == codes[k, q])
    return H


def _brute_nr_prec(K: np.ndarray, values: np.ndarray, max_r=None) -> float:
    """NR-Prec (Kobs et al., Eq. 5): mean over non-lone queries of (h - R p) / sqrt(R p (1 - p)),
    R = N_v - 1 (capped at ``max_r``), p = N_v / n'."""
    n = values.size
    _, codes = np.unique(values, return_inverse=True)
    Nv = np.bincount(codes)[codes]
    R = Nv - 1 if max_r is None else np.minimum(Nv - 1, max_r)
    h = _brute_hits(K, codes[None, :], R[None, :])[0]
    q = R > 0
    p = Nv[q] / q.sum()
    z = [(h[i] - R[i] * pp) / np.sqrt(R[i] * pp * (1 - pp)) for i, pp in zip(np.flatnonzero(q), p)]
    return float(np.mean(z)) if n else float("nan")


def _properties(n: int, at: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Adversarial properties: classes; a value held by all rows but two outliers and one bulk row, so
    that the deep queries (R = n - 4) take every bulk row and some outliers (which ones, the outliers'
    order: ties among the twins); few values; a value shared by the outliers and a few bulk rows
    (outliers relevant to bulk queries, outlier queries with hits); random two values."""
    rng = np.random.default_rng(seed)
    deep = np.zeros(n, dtype=int)
    deep[[at[1], at[2]]] = 1
    deep[np.setdiff1d(np.arange(n), at)[0]] = 1
    shared = rng.integers(0, 40, n)
    shared[at] = 99
    shared[rng.choice(np.setdiff1d(np.arange(n), at), 4, replace=False)] = 99
    return {"cls": np.arange(n) // 60, "deep": deep, "few": rng.integers(0, 3, n), "shared": shared,
            "two": rng.integers(0, 2, n)}


def _codes_R(props: dict, n: int, max_r=None) -> tuple[np.ndarray, np.ndarray]:
    codes = np.stack([np.unique(v, return_inverse=True)[1].ravel() for v in props.values()]).astype(np.int64)
    R = np.stack([np.bincount(c)[c] - 1 for c in codes])
    if max_r is not None:
        R = np.minimum(R, max_r)
    return codes, R


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("max_r", [None, 635, 300])
def test_outliers_apart_match_brute_force_and_together(metric, max_r, monkeypatch):
    n = 704
    X, at = _collapsed(n, 12, 6, 0.1, seed=3)
    props = _properties(n, at, seed=4)
    eng = props_mod._Engine(X, metric)
    assert eng.apart is not None  # the outliers are taken apart
    assert set(eng.apart.out[2]) == set(at)
    codes, R = _codes_R(props, n, max_r)
    K = _brute_keys(X, metric)
    H = eng.hits(codes, R)
    np.testing.assert_array_equal(H, _brute_hits(K, codes, R))
    got = props_mod.property_precision(X, props, metric=metric, max_r=max_r)
    for name, values in props.items():
        assert got[name]["NR-Prec"] == pytest.approx(_brute_nr_prec(K, values, max_r), rel=1e-12, abs=1e-12)
    monkeypatch.setattr(knn, "OUTLIERS", False)
    together = props_mod._Engine(X, metric)
    assert together.apart is None
    np.testing.assert_array_equal(together.hits(codes, R), H)
    _same(props_mod.property_precision(X, props, metric=metric, max_r=max_r), got)  # every number, bit for bit


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_outliers_apart_with_wide_bands_and_retries(metric):
    """A looser bound is still a bound: with the bulk's delta blown up, every band holds the outliers'
    keys, so the bulk rows of each outlier's band get float64 keys, and the bands run past the lists' ends
    (rows retried with longer lists, up to whole rows): the same hits as the brute force."""
    n = 640
    X, at = _collapsed(n, 8, 5, 0.05, seed=11)
    props = {k: v for k, v in _properties(n, at, seed=12).items() if k in ("cls", "few", "shared")}  # lists < n
    codes, R = _codes_R(props, n)
    eng = props_mod._Engine(X, metric)
    assert eng.apart is not None
    eng.apart.delta = eng.apart.delta * 1e12
    inside, keyed, lists = [], [], []
    bulk = eng.apart
    real_first, real_keys, real_top = bulk._outliers_first, bulk._keys, bulk._top
    bulk._outliers_first = lambda *a: inside.append(1) or real_first(*a)
    bulk._keys = lambda qi, rj: keyed.append((len(inside), qi.size)) or real_keys(qi, rj)
    bulk._top = lambda sub, L: lists.append(L) or real_top(sub, L)
    np.testing.assert_array_equal(eng.hits(codes, R), _brute_hits(_brute_keys(X, metric), codes, R))
    assert sum(m for _, m in keyed) > 0 and len(set(lists)) > 1  # bands keyed in float64; longer lists


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_numpy_and_torch_engines_agree_with_outliers(metric, monkeypatch):
    pytest.importorskip("torch")
    n = 704
    X, at = _collapsed(n, 16, 8, 0.1, seed=5)
    props = _properties(n, at, seed=6)
    codes, R = _codes_R(props, n)
    H_np = props_mod._Engine(X, metric).hits(codes, R)
    monkeypatch.setattr(props_mod, "NUMPY_BELOW", 1)
    eng = props_mod._Engine(X, metric)
    assert eng.torch is not None and eng.apart is not None and eng.apart.torch is not None
    np.testing.assert_array_equal(eng.hits(codes, R), H_np)
    np.testing.assert_array_equal(H_np, _brute_hits(_brute_keys(X, metric), codes, R))


def test_permutation_test_unchanged_by_outliers_apart(monkeypatch):
    n = 640
    X, at = _collapsed(n, 8, 4, 0.1, seed=7)
    props = {"cls": np.arange(n) // 40, "shared": _properties(n, at, 8)["shared"]}
    got = props_mod.property_precision(X, props, metric="cosine", permutations=3, seed=2)
    monkeypatch.setattr(knn, "OUTLIERS", False)
    _same(props_mod.property_precision(X, props, metric="cosine", permutations=3, seed=2), got)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_two_point_model_with_far_point_taken_apart(metric, monkeypatch):
    """Every row one of two points, the second held by few rows far away (they are the outliers): the
    rule of docs/methods.md §9 (hits picked by the row order -> undefined, with its reason) holds as
    with the outliers kept in, every number the same. (Identical bulk rows are not centred, so the bulk's
    bound is no tighter and such a model keeps the one engine; with ``OUTLIER_GAIN`` 1 it is taken apart.)"""
    n = 640
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal(6), 3.0 * rng.standard_normal(6)
    X = np.tile(a, (n, 1))
    far = np.sort(rng.choice(n, 8, replace=False))
    X[far] = b
    mixed = rng.integers(0, 2, n)  # both points hold both values: the row order picks the hits
    side = np.zeros(n, dtype=int)
    side[far] = 1  # the value is the point: no tie decides the hits
    props = {"mixed": mixed, "side": side}
    monkeypatch.setattr(knn, "OUTLIER_GAIN", 1.0)
    eng = props_mod._Engine(X, metric)
    assert eng.apart is not None and set(eng.apart.out[2]) == set(far)
    codes, R = _codes_R(props, n)
    np.testing.assert_array_equal(eng.hits(codes, R), _brute_hits(_brute_keys(X, metric), codes, R))
    got = props_mod.property_precision(X, props, metric=metric)
    assert "row order" in got["mixed"]["undefined"]["NR-Prec"]
    assert got["side"]["R-Prec"] == 1.0 and np.isfinite(got["side"]["NR-Prec"])
    monkeypatch.setattr(knn, "OUTLIERS", False)
    assert props_mod._Engine(X, metric).apart is None
    _same(props_mod.property_precision(X, props, metric=metric), got)


def test_no_outliers_no_bulk_engine():
    """Usual embeddings (spread, no collapse) keep the one engine."""
    rng = np.random.default_rng(0)
    assert props_mod._Engine(rng.standard_normal((700, 8)), "euclidean").apart is None


@pytest.mark.parametrize("finite_share", [1.0, 0.5, 0.0])
def test_pair_order_is_the_lexsort(finite_share):
    """ranks._pair_order: the permutation np.lexsort((rj, rank, qi)) gives, whatever the input order
    (ranks whole numbers 1..n_avail per query, distinct; beyond the depth inf)."""
    rng = np.random.default_rng(1)
    nq, n_ref = 50, 300
    qi, rj, rank = [], [], []
    for q in range(nq):
        refs = rng.choice(n_ref, rng.integers(0, 30), replace=False)
        r = rng.permutation(n_ref - 1)[:refs.size] + 1.0
        r[rng.random(refs.size) >= finite_share] = np.inf
        qi.append(np.full(refs.size, q))
        rj.append(refs)
        rank.append(r)
    qi, rj, rank = (np.concatenate(x) for x in (qi, rj, rank))
    shuffle = rng.permutation(qi.size)
    qi, rj, rank = qi[shuffle], rj[shuffle], rank[shuffle]
    np.testing.assert_array_equal(ranks_mod._pair_order(qi, rank, rj, n_ref - 1, n_ref),
                                  np.lexsort((rj, rank, qi)))
    assert ranks_mod._pair_order(qi[:0], rank[:0], rj[:0], n_ref - 1, n_ref).size == 0


def test_relevant_ranks_unsorted_paths_use_pair_order(monkeypatch):
    """The counting/candidate paths' pairs (``ordered`` False) go through the one integer sort; the
    ranks are those of a float64 brute force (rank = 1 + the others before the pair, ties to the lower
    index; beyond the depth inf, listed in reference order)."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((300, 6))
    X[150:160] = X[140]  # ties
    y = rng.integers(0, 4, 300)
    seen = []
    real = ranks_mod._pair_order
    monkeypatch.setattr(ranks_mod, "_pair_order", lambda *a: seen.append(1) or real(*a))
    monkeypatch.setattr(ranks_mod, "USE_ROWS", False)
    depth = 40
    rr = ranks_mod.relevant_ranks(X, y, metric="euclidean", depth=depth)
    assert seen
    K = _brute_keys(X, "euclidean")
    idx = np.arange(300)
    for q in range(300):
        others = idx[idx != q]
        order = others[np.lexsort((others, -K[q, others]))]
        place = np.empty(300)
        place[order] = np.arange(1, 300)
        rel = others[y[others] == y[q]]
        exp = np.where(place[rel] <= depth, place[rel], np.inf)
        o = np.lexsort((rel, exp))
        sl = slice(rr.offsets[q], rr.offsets[q + 1])
        np.testing.assert_array_equal(rr.ranks[sl], exp[o])
        np.testing.assert_array_equal(rr.refs[sl], rel[o])


@pytest.mark.parametrize("held", [True, False])  # the bulk x outlier keys held once (APART_KEYS) or per block
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_outliers_apart_tie_rule_on_coarse_keys(metric, held, monkeypatch):
    """Ties between outliers and bulk rows, between outliers and among bulk rows, which real rows do not
    make (outliers lie far beyond the bulk): the keys floored to a grid of 0.02 (every pair), every
    float32 bound blown up to 1 (so that the float64 keys decide everything: a bound need only hold): the
    outliers taken apart give the brute force's hits (ties to the lower index), as the one engine does."""
    if not held:
        monkeypatch.setattr(props_mod, "APART_KEYS", 0)
    real, cross = props_mod._pair_keys64, props_mod._cross_keys64
    monkeypatch.setattr(props_mod, "_pair_keys64", lambda X64, qi, rj, m: np.floor(real(X64, qi, rj, m) / 0.02) * 0.02)
    monkeypatch.setattr(props_mod, "_cross_keys64", lambda X64, qs, rs, m: np.floor(cross(X64, qs, rs, m) / 0.02) * 0.02)
    n = 640
    X, at = _collapsed(n, 8, 6, 0.1, seed=13)
    props = {k: v for k, v in _properties(n, at, seed=14).items() if k != "deep"}
    codes, R = _codes_R(props, n)
    expect = _brute_hits(np.floor(_brute_keys(X, metric) / 0.02) * 0.02, codes, R)
    apart = props_mod._Engine(X, metric)
    assert apart.apart is not None
    apart.apart.delta = np.ones_like(apart.apart.delta)
    np.testing.assert_array_equal(apart.hits(codes, R), expect)
    assert (apart.apart._kap is not None) == held
    monkeypatch.setattr(knn, "OUTLIERS", False)
    together = props_mod._Engine(X, metric)
    together.delta = np.ones_like(together.delta)
    np.testing.assert_array_equal(together.hits(codes, R), expect)
