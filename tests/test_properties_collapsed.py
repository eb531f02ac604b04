"""property_precision on a collapsed model (every embedding equal, or a few distinct points): every
float32 key of a row ties, so each property's window is (nearly) the whole row. The engine then
ranks the union of a row's windows once (_Engine._union_rows); checked here against a brute force
written from docs/methods.md §9: per query the full float64 key row, ordered by (distance, index),
R-Precision per query, then the normalisation. Dyadic coordinates make the float64 keys tie exactly."""

from __future__ import annotations

import numpy as np
import pytest
from brute import property_hits

from embedscope.metrics import properties as props_mod
from embedscope.metrics import property_precision

POINTS = np.array([[0.5, 0.25, -0.75, 0.5], [-0.25, 1.0, 0.5, 0.0], [0.75, -0.5, 0.25, -1.0]])


def _brute_hits(X, vals, metric, max_r):
    """(R, h, n_v) per image from the definition: full float64 key row, nearest first, ties to the lower index."""
    return property_hits(X, vals, metric, max_r)


def _brute(X, vals, metric, max_r, hits=None):
    """R-Prec and NR-Prec (docs/methods.md §9, Kobs Eq. 4-5) from the brute-force hits."""
    R, h, nv = hits if hits is not None else _brute_hits(X, vals, metric, max_r)
    q = R > 0
    if not q.any():
        return float("nan"), float("nan")
    r, hh, p = R[q].astype(float), h[q].astype(float), nv[q] / q.sum()
    rp = float(np.mean(hh / r))
    if np.all(p >= 1):
        return rp, float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        sig = np.sqrt(r * p * (1 - p))
        z = (hh - r * p) / sig
    return rp, float(np.mean(z[sig > 0]))


def _dataset(kind, rng):
    if kind == "equal":  # every embedding the same point; a value with > 1024 images so that max_r=1023 caps
        n = 1300
        X = np.tile(POINTS[0], (n, 1))
        return X, {"big": np.where(rng.random(n) < 0.85, 0, rng.integers(1, 4, n)), "many": rng.integers(0, 40, n),
                   "two": rng.integers(0, 2, n)}
    if kind == "three":  # three distinct points
        n = 600
        X = POINTS[rng.integers(0, 3, n)]
        lone = rng.integers(0, 5, n)
        lone[7] = 99  # a lone value: dropped as a query
        return X, {"few": lone, "many": rng.integers(0, 60, n), "half": np.arange(n) % 2}
    # half collapsed on one point, half spread (dyadic: many exact ties among the spread half too)
    n = 600
    X = np.vstack([np.tile(POINTS[1], (n // 2, 1)), np.round(rng.normal(size=(n - n // 2, 4)) * 4) / 4])
    X = X[rng.permutation(n)]
    if np.any(np.linalg.norm(X, axis=1) == 0):
        X[np.linalg.norm(X, axis=1) == 0] = POINTS[2]
    return X, {"few": rng.integers(0, 3, n), "many": rng.integers(0, 50, n), "skew": (rng.random(n) < 0.1).astype(int)}


def _spy(monkeypatch):
    calls = []
    real = props_mod._Engine._union_rows

    def spy(self, big, *a, **k):
        calls.append(len(big))
        return real(self, big, *a, **k)

    monkeypatch.setattr(props_mod._Engine, "_union_rows", spy)
    return calls


@pytest.mark.parametrize("kind", ["equal", "three", "half"])
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
@pytest.mark.parametrize("max_r", [None, 1023, 37])
def test_collapsed_hits_match_brute_force(kind, metric, max_r, monkeypatch):
    """Exact hit counts of every query and property, and R-Prec / NR-Prec, against the brute force."""
    rng = np.random.default_rng(["equal", "three", "half"].index(kind))
    X, props = _dataset(kind, rng)
    calls = _spy(monkeypatch)
    res = property_precision(X, props, metric=metric, max_r=max_r)
    codes = np.stack([props_mod._encode(v, len(X), k) for k, v in props.items()])
    eng = props_mod._Engine(np.asarray(X, dtype=np.float64), metric)
    brute = [_brute_hits(X, v, metric, max_r) for v in props.values()]
    H = eng.hits(codes, np.stack([b[0] for b in brute]))
    assert sum(calls) > 0  # the union path was taken
    for i, (name, vals) in enumerate(props.items()):
        np.testing.assert_array_equal(H[i], brute[i][1], err_msg=f"{kind} {metric} {max_r} {name}")
        if kind == "equal":  # every row the same point: the hits are row order, R-Prec and NR-Prec undefined
            assert np.isnan(res[name]["R-Prec"]) and np.isnan(res[name]["NR-Prec"])
            assert "row order" in res[name]["undefined"]["NR-Prec"]
            continue
        rp, nr = _brute(X, vals, metric, max_r, brute[i])
        assert res[name]["R-Prec"] == pytest.approx(rp, rel=1e-12, abs=1e-14)
        assert res[name]["NR-Prec"] == pytest.approx(nr, rel=1e-12, abs=1e-12, nan_ok=True)
    if max_r == 1023:
        assert res["big"]["capped"] if kind == "equal" else not any(r["capped"] for r in res.values())


@pytest.mark.parametrize("kind", ["equal", "three", "half"])
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_collapsed_without_key_table_in_small_groups_and_blocks(kind, metric, monkeypatch):
    """The same hits with the float64 keys computed pair by pair (no table of distinct rows), the
    union pass in groups of a few rows, and small query blocks."""
    monkeypatch.setattr(props_mod, "KEY_TABLE", 0)
    monkeypatch.setattr(props_mod, "UNION_ENTRIES", 3000)
    rng = np.random.default_rng(10 + ["equal", "three", "half"].index(kind))
    X, props = _dataset(kind, rng)
    if kind == "equal":
        X, props = X[:500], {k: v[:500] for k, v in props.items()}
    calls = _spy(monkeypatch)
    codes = np.stack([props_mod._encode(v, len(X), k) for k, v in props.items()])
    brute = [_brute_hits(X, v, metric, None) for v in props.values()]
    for block in (7, None):
        eng = props_mod._Engine(np.asarray(X, dtype=np.float64), metric, block)
        H = eng.hits(codes, np.stack([b[0] for b in brute]))
        assert eng._table is False
        for i in range(len(brute)):
            np.testing.assert_array_equal(H[i], brute[i][1])
    assert len(calls) > 1 and max(calls) > 0


def test_collapsed_key_table_is_bitwise_the_pair_keys():
    """The table of keys between distinct rows gives the same float64 bits as the pair-by-pair keys."""
    rng = np.random.default_rng(3)
    X = np.vstack([POINTS[rng.integers(0, 3, 200)], rng.normal(size=(5, 4))])[rng.permutation(205)]
    for metric in ("euclidean", "cosine"):
        eng = props_mod._Engine(X, metric)
        eng._make_table()
        assert eng._table and eng._table[2] == 8
        qi, rj = rng.integers(0, 205, 5000), rng.integers(0, 205, 5000)
        a = eng._keys(qi, rj)
        b = props_mod._pair_keys64(eng.X64, qi, rj, metric)
        np.testing.assert_array_equal(a.view(np.int64), b.view(np.int64))


def test_union_of_windows_and_row_order():
    """_union: the set union of each row's windows (one interval, or with gaps); _row_order: lexsort order."""
    rng = np.random.default_rng(4)
    for trial in range(40):
        nc, P, W1 = int(rng.integers(1, 6)), int(rng.integers(1, 4)), int(rng.integers(2, 30))
        lo = rng.integers(0, W1, size=(nc, P))
        hi = np.minimum(W1 - 1, lo + rng.integers(0, 12, size=(nc, P)))
        if trial % 2:  # overlapping windows only
            lo[:, 1:], hi[:, 1:] = lo[:, :1], np.maximum(hi[:, 1:], lo[:, :1])
        ru, pu = props_mod._union(lo, hi, W1)
        want = [(r, p) for r in range(nc) for p in range(W1) if any(lo[r, k] <= p < hi[r, k] for k in range(P))]
        assert list(zip(ru.tolist(), pu.tolist())) == want
    X = (np.round(rng.normal(size=(5, 3)) * 2) / 2)[rng.integers(0, 5, 40)]  # 5 distinct rows: a key table
    for metric in ("euclidean", "cosine"):
        for table in (False, True):
            eng = props_mod._Engine(X, metric)
            if table:
                eng._make_table()
                assert eng._table
            else:
                eng._table = False
            ru = np.repeat(np.arange(4), 39)
            qi = ru * 7
            ref = np.concatenate([np.delete(np.arange(40), q) for q in qi[::39]])
            k64 = props_mod._pair_keys64(eng.X64, qi, ref, metric)
            np.testing.assert_array_equal(eng._row_order(ru, qi, ref, 4), np.lexsort((ref, -k64, ru)))


def test_collapsed_permutation_test_matches_brute_force():
    """The permutation test (each shuffled property one more row of the engine) on collapsed data:
    its NR-Precs are the brute force's of the same shuffles."""
    rng = np.random.default_rng(5)
    n = 300
    X = POINTS[rng.integers(0, 3, n)]
    props = {"a": rng.integers(0, 3, n), "b": rng.integers(0, 20, n)}
    res = property_precision(X, props, permutations=4, seed=9)
    shuf = np.random.default_rng(9)
    perms = [shuf.permutation(n) for _ in range(4)]
    for name, vals in props.items():
        nr = [_brute(X, vals[pj], "euclidean", None)[1] for pj in perms]
        assert res[name]["perm_mean"] == pytest.approx(np.mean(nr), rel=1e-12, abs=1e-12)
        assert res[name]["perm_sd"] == pytest.approx(np.std(nr, ddof=1), rel=1e-9, abs=1e-12)


def test_collapsed_large_is_fast():
    """3,000 identical embeddings, two properties: the engine's union path (5,000 took about 30 s ranking
    each window alone). Every key ties, so the R nearest of q are the R lowest other indices (the hits
    property_precision leaves uncounted: R-Prec is undefined, row order)."""
    import time

    rng = np.random.default_rng(0)
    n = 3000
    X = np.tile(POINTS[0], (n, 1))
    props = {"a": rng.integers(0, 3, n), "b": rng.integers(0, 50, n)}
    codes = np.stack([props_mod._encode(v, n, k) for k, v in props.items()])
    Rs = np.stack([np.bincount(v)[v] - 1 for v in props.values()])
    t = time.perf_counter()
    H = props_mod._Engine(X, "euclidean").hits(codes, Rs)  # the engine: property_precision counts no hits here
    assert time.perf_counter() - t < 10
    res = property_precision(X, props)
    for i, (name, vals) in enumerate(props.items()):
        assert np.isnan(res[name]["R-Prec"]) and res[name]["repeated_rows"] == n - 1
        nv = np.bincount(vals)[vals]
        R = nv - 1
        before = np.zeros((vals.max() + 1, n + 1), dtype=np.int64)  # before[v, i]: images of value v among 0..i-1
        before[vals, np.arange(n) + 1] = 1
        before = np.cumsum(before, axis=1)
        q = np.arange(n)
        h = np.where(q <= R, before[vals, np.minimum(R + 1, n)] - 1, before[vals, R])
        np.testing.assert_array_equal(H[i], h)


@pytest.mark.parametrize("kind", ["ties", "half", "three"])
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_long_lists_and_deep_counts_on_every_path(kind, metric, monkeypatch):
    """The top-L lists by torch.topk or by the packed whole-row sort (LONG_LIST), and the sure hits by
    the list's columns or by a scan of the rows (DEEP_COUNT): the same hits as the brute force on
    every combination, with exact ties, -0.0 keys (cosine of orthogonal rows), a centred key space
    (half collapsed) and small blocks that leave a partial last block."""
    rng = np.random.default_rng(40 + ["ties", "half", "three"].index(kind))
    if kind == "ties":  # integer coordinates: many tied keys, duplicated rows, orthogonal pairs
        n = 400
        X = rng.integers(-2, 3, size=(n, 3)).astype(float)
        X[np.all(X == 0, axis=1)] = 1.0
        props = {"few": rng.integers(0, 3, n), "many": rng.integers(0, 30, n), "skew": (rng.random(n) < 0.1).astype(int)}
    else:
        X, props = _dataset(kind, rng)
    codes = np.stack([props_mod._encode(v, len(X), k) for k, v in props.items()])
    for max_r in (None, 9):
        brute = [_brute_hits(X, v, metric, max_r) for v in props.values()]
        R = np.stack([b[0] for b in brute])
        for long_list, deep in ((10 ** 9, 10 ** 9), (0, 10 ** 9), (10 ** 9, 0), (0, 0), (8, 16)):
            monkeypatch.setattr(props_mod, "LONG_LIST", long_list)
            monkeypatch.setattr(props_mod, "DEEP_COUNT", deep)
            for block in (None, 37):
                H = props_mod._Engine(np.asarray(X, dtype=np.float64), metric, block).hits(codes, R)
                for i in range(len(brute)):
                    np.testing.assert_array_equal(H[i], brute[i][1], err_msg=f"{kind} {metric} {max_r} "
                                                  f"LONG_LIST={long_list} DEEP_COUNT={deep} block={block}")


def test_packed_keys_order_as_the_values_descending_then_by_column():
    import torch

    v = torch.tensor([[0.0, -0.0, 1.5, -np.inf, 1.5, -2.0, np.inf, 1e-45, -1e-45, 3.4e38]], dtype=torch.float32)
    key = props_mod._packed_descending(v)
    order = np.argsort(key[0], kind="stable")
    np.testing.assert_array_equal(key[0] & 0xFFFFFFFF, np.arange(v.shape[1]))
    vals = v[0].numpy()[order]
    assert np.all(vals[:-1] >= vals[1:])
    # equal values by column; -0.0 right after 0.0 (equal as floats)
    np.testing.assert_array_equal(order, [6, 9, 2, 4, 7, 0, 1, 8, 5, 3])
    a = key.copy()
    props_mod._sort_rows(a, 4)
    np.testing.assert_array_equal(a[0, :4], np.sort(key[0])[:4])
