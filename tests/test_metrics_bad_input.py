"""Bad input to the metrics: one-line EmbedscopeError, never a raw numpy/torch exception or a silent
NaN / wrong result; the caller's arrays are left as they were."""

from __future__ import annotations

import numpy as np
import pytest

import embedscope.metrics as M
from embedscope.errors import EmbedscopeError

torch = pytest.importorskip("torch")


def _data():
    X = np.random.default_rng(0).normal(size=(12, 4))
    y = np.array([0, 1, 2] * 4)
    return X, y


def _raises(match, fn, *arrays):
    """fn raises a one-line EmbedscopeError matching ``match``; the given arrays are unchanged."""
    before = [a.copy() for a in arrays]
    with pytest.raises(EmbedscopeError, match=match) as info:
        fn()
    assert "\n" not in str(info.value)
    for a, b in zip(arrays, before):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
        else:
            assert torch.equal(a, b)


# ----------------------------------------------------------------------------- nearest_same_different
@pytest.mark.parametrize("labels", [np.array([0, 1, 1.5] * 4), np.array([0, 1, np.nan] * 4)])
def test_nsd_labels_not_integral(labels):
    X, _ = _data()
    _raises("integer class labels", lambda: M.nearest_same_different(X, labels), X, labels)


def test_nsd_mixed_object_labels():
    X, _ = _data()
    labels = np.array([0, "a", 1] * 4, dtype=object)
    _raises("class labels", lambda: M.nearest_same_different(X, labels), X)


def test_nsd_ragged():
    _raises("could not be read as an array", lambda: M.nearest_same_different([[1.0, 2.0], [3.0]], [0, 1]))


def test_nsd_complex():
    X, y = _data()
    Xc = X + 1j
    _raises("numeric", lambda: M.nearest_same_different(Xc, y), Xc, y)


@pytest.mark.parametrize("bs", [1.5, 0, -1, "4"])
def test_nsd_block_size(bs):
    X, y = _data()
    _raises("block_size", lambda: M.nearest_same_different(X, y, block_size=bs), X, y)


def test_nsd_torch_requires_grad_and_bfloat16():
    X, y = _data()
    ref = M.nearest_same_different(X, y)
    t = torch.tensor(X, requires_grad=True)
    got = M.nearest_same_different(t, y)  # float64 tensor: computed in float64
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-12)
    b = torch.tensor(X).bfloat16()
    got = M.nearest_same_different(b, y)
    ref32 = M.nearest_same_different(b.float().numpy(), y)
    np.testing.assert_array_equal(got[0], ref32[0])
    np.testing.assert_array_equal(got[1], ref32[1])


def test_nsd_string_labels_still_work():
    X, y = _data()
    names = np.array(["a", "b", "c"])[y]
    a = M.nearest_same_different(X, names)
    b = M.nearest_same_different(X, y)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_nsd_dtype_kept():
    X, y = _data()
    # integer input is computed in float32 (as documented: anything but float64)
    Xi = np.round(X * 10).astype(np.int64)
    a = M.nearest_same_different(Xi, y, metric="dot")
    b = M.nearest_same_different(Xi.astype(np.float32), y, metric="dot")
    np.testing.assert_array_equal(a[0], b[0])


# ----------------------------------------------------------------------------- share_below_diagonal
def test_share_2d():
    a, b = np.ones((2, 2)), np.zeros((2, 2))
    _raises("1-D", lambda: M.share_below_diagonal(a, b), a, b)


def test_share_length_mismatch():
    _raises("same length", lambda: M.share_below_diagonal([0.9, 0.8], [0.1]))


def test_share_strings():
    _raises("numeric", lambda: M.share_below_diagonal(["a", "b"], ["c", "d"]))


# ----------------------------------------------------------------------------- block
@pytest.mark.parametrize("block", [0, -1, 1.5])
def test_retrieval_block(block):
    X, y = _data()
    _raises("block", lambda: M.retrieval_metrics(X, y, block=block, include=["P@1"]), X, y)


@pytest.mark.parametrize("block", [0, -1, 1.5])
def test_knn_block(block):
    X, _ = _data()
    _raises("block", lambda: M.knn_search(X, k=1, block=block), X)


@pytest.mark.parametrize("block", [0, -1])
def test_properties_block(block):
    X, y = _data()
    _raises("block", lambda: M.property_precision(X, {"y": y}, block=block), X, y)


def test_properties_not_a_mapping():
    X, y = _data()
    _raises("mapping", lambda: M.property_precision(X, [y]), X, y)


def test_properties_max_r_not_a_number():
    X, y = _data()
    _raises("max_r", lambda: M.property_precision(X, {"y": y}, max_r="all"), X)


# ----------------------------------------------------------------------------- spectral ranges
@pytest.mark.parametrize("eps", [-1, float("nan"), float("inf"), "x"])
def test_effective_rank_eps(eps):
    X, _ = _data()
    _raises("eps", lambda: M.effective_rank(X, eps=eps), X)


def test_effective_rank_eps_zero_rank_deficient():
    X = np.zeros((5, 3))
    X[:, 0] = 1.0
    assert M.effective_rank(X, eps=0) == pytest.approx(1.0)


@pytest.mark.parametrize("rtol", [-1, float("nan"), 1.0])
def test_alpha_req_rtol(rtol):
    X, _ = _data()
    _raises("rtol", lambda: M.alpha_req(X, rtol=rtol), X)


@pytest.mark.parametrize("kw", [{"k_max": 2.5}, {"k_min": 0}, {"k_min": 3, "k_max": 2}])
def test_alpha_req_k(kw):
    X, _ = _data()
    _raises("k_m", lambda: M.alpha_req(X, **kw), X)


# ----------------------------------------------------------------------------- π_ratio
# π_inter = 0 (every class mean at the same place) is documented, not an error: π_ratio is inf
# when π_intra > 0 and NaN when both are 0 (a collapsed network's row in a study keeps its other
# measures)
@pytest.mark.parametrize("X, metric, expect", [
    ([[1.0], [2.0], [1.0], [2.0]], "sqeuclidean", np.inf),
    ([[1.0], [-0.5], [2.0], [1.0]], "cosine", np.inf),
    ([[1.0], [2.0], [1.0], [3.0]], "cosine", np.nan),
])
def test_pi_ratio_at_zero_inter_distance_as_documented(X, metric, expect):
    d = M.class_distances(np.array(X), [0, 0, 1, 1], metric=metric)
    assert d["pi_inter"] == 0.0
    assert (np.isnan(d["pi_ratio"]) if np.isnan(expect) else d["pi_ratio"] == expect)


def test_pi_ratio_defined_still_finite():
    X, y = _data()
    d = M.class_distances(X, y)
    assert np.isfinite(d["pi_ratio"]) and d["pi_ratio"] > 0


def test_seed_of_alignment_uniformity_is_checked_even_when_every_pair_is_used():
    # seed="a" was numpy's SeedSequence TypeError with a pair sample, and silently accepted without one
    X, y = np.random.default_rng(0).normal(size=(60, 8)), np.arange(60) % 4
    _raises("seed must be an integer", lambda: M.alignment_uniformity(X, y, seed="a", max_pairs=10), X, y)
    _raises("seed must be an integer", lambda: M.geometry_report(X, y, seed="a"), X, y)
    _raises("seed must be an integer >= 0", lambda: M.alignment_uniformity(X, y, seed=-1), X, y)


def test_compare_groups_names_a_wrong_argument_type():
    # lists instead of mappings were AttributeError: 'list' object has no attribute 'values'
    _raises("groups must be a mapping", lambda: M.compare_groups({"a": {"p": 1.0}}, [2, 3, 4]))
    _raises("values_by_model must be a mapping", lambda: M.compare_groups([1, 2, 3], {"a": "g"}))
    _raises(r"values_by_model\['a'\] must map property names", lambda: M.compare_groups(
        {"a": 0.5, "b": {"p": 1.0}}, {"a": "g1", "b": "g2"}))


def test_nan_rows_are_named_by_the_first_bad_row():
    X, y = _data()
    X[[5, 9], 1] = np.nan
    for fn in (lambda: M.retrieval_metrics(X, y, include=["R@1"]), lambda: M.spectral_decay(X)):
        _raises(r"2 row\(s\) contain NaN or inf \(first: row 5\)", fn, X, y)
