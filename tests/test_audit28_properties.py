"""Audit 28 (helper C): NR-Prec's outliers taken apart (``properties._Engine._outliers_apart``), faster and the
same hits, bit for bit.

The keys between the bulk's rows and the outliers are computed once per engine (``_cross_keys64``, held where
they fit ``APART_KEYS``) and serve both the bulk queries (rows) and the outlier queries (columns: the key of
(q, r) is that of (r, q)); each outlier query's first places come from a partition of its row, not a sort of
it (``_first_places``). Checked here: the orders against np.lexsort, the held and the per-block keys against
the float64 brute force (ties too), and that the keys are computed once."""

from __future__ import annotations

import numpy as np
import pytest
from test_audit26_properties_outliers import _brute_hits, _brute_keys, _codes_R, _collapsed, _properties

from embedscope.metrics import properties as props_mod
from embedscope.metrics.search.knn import pair_keys64


def _lexsort_places(key: np.ndarray, q: np.ndarray, W: int) -> np.ndarray:
    """The first W references of each row by (key desc, index asc), the row's query left out: one lexsort
    per row, as the engine ranked the outlier queries before."""
    refs = np.arange(key.shape[1])
    out = []
    for i, qi in enumerate(q):
        cand = refs[refs != qi]
        out.append(cand[np.lexsort((cand, -key[i, cand]))][:W])
    return np.stack(out)


def test_first_places_are_the_lexsort_order_with_ties_signed_zeros_and_infinities():
    rng = np.random.default_rng(5)
    g, n = 9, 50
    key = np.round(rng.standard_normal((g, n)), 1)  # many equal keys
    key[0] = 0.0
    key[0, ::3] = -0.0  # 0.0 and -0.0 tie (as in a sort)
    key[1, 10:] = -np.inf  # fewer finite keys than places: the query (+inf inside) stays out
    key[2] = rng.standard_normal(n)  # no ties (the unstable sort's row)
    key[3, :] = 7.0  # all tied, the query among them
    q = np.array([0, 3, 49, 7, 20, 0, 1, 48, 25])
    for W in (1, 2, 11, 25, n - 2, n - 1):
        got = props_mod._first_places(key.copy(), q, W)
        np.testing.assert_array_equal(got, _lexsort_places(key, q, W))


def test_stable_argsort_is_numpys_stable_sort():
    rng = np.random.default_rng(6)
    v = np.round(rng.standard_normal((40, 300)), 2)
    v[::2] = rng.standard_normal((20, 300))  # rows without ties
    v[1, :50] = -0.0
    v[1, 50:100] = 0.0
    np.testing.assert_array_equal(props_mod._stable_argsort(v), np.argsort(v, axis=1, kind="stable"))


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("held", [True, False])
def test_outliers_apart_held_or_per_block_keys_match_brute_force(metric, held, monkeypatch):
    """The held keys (bulk rows x outliers, read by rows and by columns) and, with ``APART_KEYS`` 0, the keys
    per block and per outlier query: the brute force's hits, twin and mirrored outliers included."""
    if not held:
        monkeypatch.setattr(props_mod, "APART_KEYS", 0)
    monkeypatch.setattr(props_mod, "FAR_ROW_ENTRIES", 3 * 640)  # the outlier queries 3 at a time
    n = 640
    X, at = _collapsed(n, 8, 8, 0.1, seed=21)
    codes, R = _codes_R(_properties(n, at, seed=22), n)
    eng = props_mod._Engine(X, metric, block=100)
    assert eng.apart is not None and set(eng.apart.out[2]) == set(at)
    np.testing.assert_array_equal(eng.hits(codes, R), _brute_hits(_brute_keys(X, metric), codes, R))
    assert (eng.apart._kap is not None) == held


def test_outlier_keys_computed_once_and_rows_are_the_pair_keys(monkeypatch):
    """The keys between bulk rows and outliers: once per engine (two calls of hits, as the permutation test
    makes), none pair by pair; an outlier query's row, assembled from the held columns and its keys to the
    outliers, is :func:`pair_keys64`'s row bit for bit."""
    n = 640
    X, at = _collapsed(n, 8, 8, 0.1, seed=21)
    codes, R = _codes_R(_properties(n, at, seed=22), n)
    eng = props_mod._Engine(X, "euclidean", block=100)
    far = eng.apart.out[2]
    isfar = np.zeros(n, dtype=bool)
    isfar[far] = True
    count = {"cross": 0, "pairs": 0}
    real, cross = props_mod._pair_keys64, props_mod._cross_keys64

    def spy_pairs(X64, qi, rj, m):  # (the bulk's engine: the keys among its own rows, local indices)
        if X64 is eng.X64:
            count["pairs"] += int(np.count_nonzero(isfar[qi] | isfar[rj]))
        return real(X64, qi, rj, m)

    def spy_cross(X64, qs, rs, m):
        count["cross"] += len(qs) * len(rs)
        return cross(X64, qs, rs, m)

    monkeypatch.setattr(props_mod, "_pair_keys64", spy_pairs)
    monkeypatch.setattr(props_mod, "_cross_keys64", spy_cross)
    H = eng.hits(codes, R)
    np.testing.assert_array_equal(eng.hits(codes, R), H)
    nf = far.size
    assert count == {"cross": (n - nf) * nf + 2 * nf * nf, "pairs": 0}
    key = np.empty((nf, n))
    key[:, eng.apart.out[1]] = eng.apart._kap.T
    key[:, far] = cross(eng.X64, far, far, "euclidean")
    want = np.stack([pair_keys64(eng.X64, eng.X64, np.full(n, q), np.arange(n), "euclidean") for q in far])
    np.testing.assert_array_equal(key.view(np.int64), want.view(np.int64))


def test_outliers_that_are_no_queries_leave_the_keys_per_block():
    """Every outlier of a lone value (no outlier query): the bulk queries' keys to the outliers per block,
    none held; the brute force's hits."""
    n = 640
    X, at = _collapsed(n, 8, 8, 0.1, seed=21)
    props = _properties(n, at, seed=22)
    for v in props.values():
        v[at] = 1000 + np.arange(at.size)  # lone values
    codes, R = _codes_R(props, n)
    assert not R[:, at].any()
    eng = props_mod._Engine(X, "cosine", block=100)
    assert eng.apart is not None
    np.testing.assert_array_equal(eng.hits(codes, R), _brute_hits(_brute_keys(X, "cosine"), codes, R))
    assert eng.apart._kap is None
