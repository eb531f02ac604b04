"""Memory safety of the C extension's argument checks (embedscope/metrics/search/_fused.c): a caller passing
inconsistent arrays gets a ValueError, never a write outside the arrays or a crash; non-finite keys are
bucketed without undefined float -> int conversions."""

import numpy as np
import pytest

from embedscope.metrics.search import fused

_fused = pytest.importorskip("embedscope.metrics.search._fused")


def _args(same=True, n=40, classes=2, dim=4, seed=0):
    """A valid count_rows argument set: n queries = references (same) of `classes` classes."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    X = rng.standard_normal((n, dim))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    order = np.argsort(y, kind="stable").astype(np.int64)
    starts = np.searchsorted(y[order], np.arange(classes)).astype(np.int64)
    ends = np.searchsorted(y[order], np.arange(classes), side="right").astype(np.int64)
    P = (ends - starts)[y] - (1 if same else 0)
    offsets = np.concatenate([[0], np.cumsum(P)]).astype(np.int64)
    npairs = int(offsets[-1])
    d = dict(G=(X @ X.T).astype(np.float32), nb=n, nr=n, q0=0, nq=n, dim=dim, ncls=classes, npairs=npairs,
             same=same, eps=1e-12, q_cls=y.astype(np.int64), r_cls=y.astype(np.int64), ref_order=order,
             cstart=starts, cend=ends, depth_q=np.full(n, 5, np.int64), offsets=offsets,
             delta=np.full(n, 1e-6), Q64=X, R64=X, out_rank=np.zeros(npairs), out_ref=np.zeros(npairs, np.int64),
             unsure=np.zeros(n, np.uint8))
    return d


_ORDER = ["G", "nb", "nr", "q0", "nq", "dim", "ncls", "npairs", "same", "eps", "q_cls", "r_cls", "ref_order",
          "cstart", "cend", "depth_q", "offsets", "delta", "Q64", "R64", "out_rank", "out_ref", "unsure"]


def _call(d):
    return _fused.count_rows(*[d[k] for k in _ORDER])


def _guarded(d, pad=8):
    """out_rank / out_ref as views into larger arrays with guard values around them, to see stray writes."""
    npairs = d["npairs"]
    big_r = np.full(npairs + 2 * pad, -7.0)
    big_i = np.full(npairs + 2 * pad, -7, np.int64)
    d["out_rank"], d["out_ref"] = big_r[pad:pad + npairs], big_i[pad:pad + npairs]
    return big_r, big_i, pad


def test_valid_arguments_run():
    d = _args()
    _call(d)
    assert np.all(d["out_rank"] >= 1)


def test_repeated_reference_in_ref_order_is_refused():
    """A reference listed twice in its class was written twice: one entry past the query's slots (past the
    output array for the last query)."""
    d = _args()
    order = d["ref_order"].copy()
    last = int(d["cend"][1]) - 1
    order[last - 1] = order[last]  # a repeat within the last class, another reference left out
    d["ref_order"] = order
    big_r, big_i, pad = _guarded(d)
    with pytest.raises(ValueError):
        _call(d)
    assert np.all(big_r[:pad] == -7.0) and np.all(big_r[-pad:] == -7.0)


def test_same_query_missing_from_its_class_is_refused():
    """same=True with a query whose class range does not hold it: one_row gathered want + 1 references into
    arrays sized by the largest want (a heap overflow)."""
    d = _args()
    # the last query (39, of class 1) claims class 0: 20 references, none of them 39, so that "have - 1 ==
    # want" (19) held while one_row gathered all 20 (into arrays of 19, then 20 ranks into 19 slots)
    d["q_cls"] = d["q_cls"].copy()
    d["q_cls"][39] = 0
    big_r, big_i, pad = _guarded(d)
    with pytest.raises(ValueError):
        _call(d)
    assert np.all(big_r[-pad:] == -7.0) and np.all(big_i[-pad:] == -7)


def test_negative_offset_is_refused():
    """offsets[q] < 0 with the right count for the query: its ranks were written before out_rank[0]."""
    d = _args(same=False)
    # query 0's 20 slots moved to [-20, 0), the rest shifted down to match: every count right, every upper
    # end <= npairs (all that was checked)
    off = d["offsets"].copy()
    off[0] = -20
    off[1:] -= 20
    d["offsets"], d["npairs"] = off, int(off[-1])
    big_r, big_i, pad = _guarded(d, pad=24)
    with pytest.raises(ValueError):
        _call(d)
    assert np.all(big_r[:pad] == -7.0) and np.all(big_i[:pad] == -7)


@pytest.mark.parametrize("field,value", [("dim", 2 ** 62), ("nr", 2 ** 62)])
def test_sizes_whose_products_overflow_are_refused(field, value):
    """nq * dim or nb * nr wrapping around passed the length checks (then read far outside Q64/R64/G)."""
    d = _args()
    d[field] = value
    with pytest.raises(ValueError):  # (nr: a MemoryError from calloc(2^62) before, by luck)
        _call(d)


def test_rank_sums_huge_nq_is_refused():
    """nq + 1 and 8 nq wrapped around, so the length checks passed and offsets was read past its end (a
    heap overflow under ASan; an error only if the bytes read happened to be out of order)."""
    with pytest.raises(ValueError):
        _fused.rank_sums(2 ** 63 - 1, 0, np.zeros(1, np.int64), np.zeros(0), np.zeros(1), np.zeros(1), np.zeros(1))


@pytest.mark.parametrize("bad", ["noncontig", "readonly", "itemsize", "short", "bytes"])
def test_unusable_buffers_are_value_errors(bad):
    """(numpy's own errors are ValueErrors already; other objects raised BufferError)"""
    d = _args()
    if bad == "noncontig":
        d["Q64"] = np.repeat(d["Q64"], 2, axis=1)[:, ::2]
    elif bad == "readonly":
        d["out_rank"] = d["out_rank"].copy()
        d["out_rank"].flags.writeable = False
    elif bad == "itemsize":
        d["q_cls"] = d["q_cls"].astype(np.int32)
    elif bad == "short":
        d["offsets"] = d["offsets"][:-1]
    else:  # a read-only object that is not an array: BufferError before
        d["unsure"] = bytes(40)
    with pytest.raises(ValueError):
        _call(d)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 3e38])
def test_non_finite_keys_do_not_crash(bad):
    """NaN or infinite float32 keys (sort_desc's bucket of (gmax - g) * scale was NaN: converted to int, a
    write about 8 GB before its table): ranks may be meaningless, but every write stays in the arrays."""
    d = _args(n=80, classes=2)
    d["depth_q"] = np.full(80, 7, np.int64)  # 1 < depth < R: the sorted path
    G = d["G"].copy()
    G[:, 1::2][:, 3] = bad  # one relevant key per row of class 1 (odd references)
    G[:, 0::2][:, 5] = bad
    d["G"] = G
    big_r, big_i, pad = _guarded(d)
    _call(d)
    assert np.all(big_r[:pad] == -7.0) and np.all(big_r[-pad:] == -7.0)
    assert np.all(big_i[:pad] == -7) and np.all(big_i[-pad:] == -7)


def test_fused_module_still_available():
    assert fused.available()
