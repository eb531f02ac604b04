"""Thirty-fifth session's audit: cosine of single rows at an extreme scale while the rest of the matrix
is ordinary (a row's squares, and so its norm, under- or overflowed: the row was taken for all zeros or
given a rounded direction), and integral float labels beyond the int64 range (all cast to one class).

Each reference is the same computation on rows scaled back by an exact power of two: cosine ignores a
row's scale, so the answers must be equal."""

import numpy as np
import pytest

from embedscope.metrics import nearest_same_different, property_precision, retrieval_metrics
from embedscope.metrics import neighbours as nb
from embedscope.metrics.scale import pow2_rows_outside, unit_rows
from embedscope.validation import check_labels, one_direction_within_rounding, one_point


def _tiny_set(dtype, exp: int, seed: int = 0):
    """A 40 x 6 set, 4 classes; rows 0, 7 and 21 multiplied by 2^exp (exact). Returns the set and the
    same set unscaled."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((40, 6)).astype(dtype)
    X[5] = 3 * X[0]  # a row parallel to a scaled one: cosine exactly 1 with it
    y = np.arange(40) % 4
    y[5] = 1 if y[0] != 1 else 2  # ... in another class
    S = X.copy()
    for i in (0, 7, 21):
        S[i] = np.ldexp(X[i], exp).astype(dtype)
        assert np.array_equal(np.ldexp(S[i].astype(np.float64), -exp), X[i].astype(np.float64))  # exact
    return S, X, y


@pytest.mark.parametrize("dtype,exp", [(np.float32, -85), (np.float32, -110), (np.float32, 70),
                                       (np.float64, -560), (np.float64, -1000), (np.float64, 560)])
@pytest.mark.parametrize("symmetric", [False, True])
def test_nearest_same_different_cosine_ignores_a_single_rows_scale(dtype, exp, symmetric, monkeypatch):
    if symmetric:  # the symmetric pass forced at this size, as from SYMMETRIC_MIN_ROWS rows
        monkeypatch.setattr(nb, "SYMMETRIC_MIN_ROWS", 1)
    S, X, y = _tiny_set(dtype, exp)
    got = nearest_same_different(S, y, metric="cosine")
    want = nearest_same_different(X, y, metric="cosine")
    for g, w in zip(got, want):
        assert np.allclose(g, w, rtol=0, atol=1e-6 if dtype == np.float32 else 1e-12), (g, w)
    # an independent float64 reference from the definition on the unscaled rows
    U = X.astype(np.float64) / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
    C = U @ U.T
    np.fill_diagonal(C, -np.inf)
    same = y[:, None] == y[None, :]
    assert np.allclose(got[0], np.where(same, C, -np.inf).max(axis=1), atol=1e-6)
    assert np.allclose(got[1], np.where(~same, C, -np.inf).max(axis=1), atol=1e-6)
    assert got[1][0] == pytest.approx(1.0, abs=1e-6)  # row 0 and its parallel row 5, across classes


def test_rows_of_ordinary_scale_keep_their_bits():
    X = np.random.default_rng(1).standard_normal((50, 8)).astype(np.float32)
    assert pow2_rows_outside(X, 40) is X  # nothing copied, nothing changed
    S = X.copy()
    S[3] *= np.float32(2.0 ** -60)
    T = pow2_rows_outside(S, 40)
    assert np.array_equal(np.delete(T, 3, 0), np.delete(X, 3, 0)) and T is not S
    assert 0.5 <= np.abs(T[3]).max() < 1 and np.array_equal(S[3], X[3] * np.float32(2.0 ** -60))  # input kept
    U, zero = unit_rows(np.vstack([X.astype(np.float64), np.zeros((1, 8))]))
    assert zero.tolist() == [False] * 50 + [True] and not U[50].any()
    Y = X.astype(np.float64) / np.abs(X.astype(np.float64)).max(axis=1, keepdims=True)
    ref = Y / np.sqrt(np.einsum("ij,ij->i", Y, Y))[:, None]
    assert np.array_equal(U[:50], ref)  # the bits of the two documented divisions (x / max|x|, then / norm)


@pytest.mark.parametrize("exp", [-560, -1000, 560])
def test_unit_rows_of_extreme_rows(exp):
    X = np.random.default_rng(2).standard_normal((6, 5))
    S = X.copy()
    S[2] = np.ldexp(X[2], exp)
    U, zero = unit_rows(S)
    ref = X / np.linalg.norm(X, axis=1, keepdims=True)
    assert not zero.any() and np.allclose(U, ref, rtol=0, atol=1e-15)
    assert np.array_equal(S[2], np.ldexp(X[2], exp))  # not in place unless asked


def test_retrieval_and_properties_cosine_ignore_a_single_rows_scale():
    S, X, y = _tiny_set(np.float64, -1000)
    keys = ["P@1", "R-Precision", "MAP@R"]
    assert retrieval_metrics(S, y, include=keys, metric="cosine") == retrieval_metrics(X, y, include=keys,
                                                                                      metric="cosine")
    props = {"odd": np.arange(40) % 2}
    for kw in ({"metric": "cosine"}, {"metric": "euclidean", "normalize": True}):
        a = property_precision(S, props, **kw)["odd"]
        b = property_precision(X, props, **kw)["odd"]
        assert a["R-Prec"] == pytest.approx(b["R-Prec"], abs=1e-12), kw
        assert a["NR-Prec"] == pytest.approx(b["NR-Prec"], abs=1e-12), kw


def test_collapse_checks_ignore_a_single_rows_scale():
    v = np.array([1.0, 2.0, 3.0])
    rows = np.vstack([v, 2 * v, np.ldexp(v, -1040)])  # one direction; the last row's squares underflow
    assert one_point(rows, "cosine")
    F = np.vstack([v, 3 * v, np.ldexp(v, -120)]).astype(np.float32)  # float32 rows of one ray
    assert not one_direction_within_rounding(np.vstack([v, -v]))
    assert one_point(F, "cosine") or one_direction_within_rounding(F)


def test_float_labels_beyond_int64_stay_distinct():
    y = check_labels(np.array([1e19, 1e19, 2e19, -3e19, 2e19]))
    assert y.tolist() == [1, 1, 2, 0, 2]  # sorted unique order, as strings are encoded
    assert check_labels(np.array([1.0, 5.0, 5.0])).tolist() == [1, 5, 5]  # ordinary floats: their values
    X = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    s_same, s_diff = nearest_same_different(X, np.array([1e19, 1e19, 2e19, 2e19]), metric="dot")
    assert s_diff.round(6).tolist() == [0.1, 0.18, 0.1, 0.18]


def test_roth_cosine_assignment_ignores_a_single_rows_scale():
    from embedscope.metrics.clustering import _roth_cosine_assign

    rng = np.random.default_rng(3)
    X = rng.standard_normal((30, 4))
    C = rng.standard_normal((5, 4))
    S = X.copy()
    S[4] = np.ldexp(X[4], -1040)  # its squares underflow to 0 (was: the zero row's assignment, cluster 0)
    Cs = C.copy()
    Cs[2] = np.ldexp(C[2], 700)  # a centroid's squares overflow
    want = _roth_cosine_assign(X, C)
    assert np.array_equal(_roth_cosine_assign(S, Cs), want)


def test_retrieval_with_float_labels_beyond_int64():
    X = np.array([[0.0], [1.0], [10.0], [11.0], [20.0], [21.0]])
    keys = ["P@1", "R-Precision", "MAP@R", "NMI"]
    ints = retrieval_metrics(X, [0, 1, 0, 1, 3, 3], include=keys, metric="euclidean", device="cpu")
    huge = retrieval_metrics(X, [1e19, 2e19, 1e19, 2e19, 3, 3], include=keys, metric="euclidean", device="cpu")
    assert huge == ints and ints["P@1"] == pytest.approx(1 / 3)
    # a separate reference set: the values of both sets encoded together (equal values match)
    sep = retrieval_metrics(X[:3], np.array([1e19, 2e19, 1e19]), X_ref=X[3:], y_ref=np.array([2e19, 1e19, 1e19]),
                            include=["P@1", "R-Precision"], metric="euclidean", device="cpu")
    ref = retrieval_metrics(X[:3], np.array([1, 2, 1]), X_ref=X[3:], y_ref=np.array([2, 1, 1]),
                            include=["P@1", "R-Precision"], metric="euclidean", device="cpu")
    assert sep == ref


def _cov_reference(X):
    """Covariance eigenvalues from the definition, in exact rationals' float image: the centred rows
    scaled by a power of two that brings them near 1, the eigenvalues scaled back (float64 holds them)."""
    C = X - X.mean(axis=0)
    e = int(np.frexp(np.abs(C).max())[1])
    s = np.linalg.svd(np.ldexp(C, -e), compute_uv=False)
    return np.ldexp(s ** 2 / (len(X) - 1), 2 * e)


@pytest.mark.parametrize("scale,offset", [(1e-78, 1e-70), (1e77, 0.0), (1e-150, 1.0)])
def test_covariance_eigenvalues_of_centred_rows_far_below_or_above_the_rows(scale, offset):
    """The centred rows' own power-of-two shift was taken and never scaled back (eigenvalues ~1e156 off)."""
    from embedscope.metrics import geometry_report
    from embedscope.metrics.spectral import covariance_eigenvalues

    rng = np.random.default_rng(4)
    X = offset + scale * rng.standard_normal((6, 3))
    want = _cov_reference(X)
    assert np.allclose(covariance_eigenvalues(X), want, rtol=1e-10, atol=0)
    X8 = offset + scale * rng.standard_normal((3, 5))  # N < D: geometry_report takes the SVD route
    got = geometry_report(X8, np.array([0, 0, 1]), keep_spectrum=True)["covariance_eigenvalues"]
    assert np.allclose(got, _cov_reference(X8)[:2], rtol=1e-10, atol=0)


def test_centred_spectra_leave_out_a_float64_class_of_equal_rows():
    from embedscope.metrics import class_conditioned_spectra
    from embedscope.metrics.spectral import covariance_eigenvalues

    rng = np.random.default_rng(5)
    X = np.vstack([np.tile([0.1, 0.7, 0.3, 1 / 3], (10, 1)), rng.standard_normal((3, 4))])
    y = np.array([0] * 10 + [1] * 3)
    per_class, mean = class_conditioned_spectra(X, y, center=True, k=4)
    assert per_class.shape[0] == 1  # class 0 (rows all equal) has no spectrum: left out, as documented
    alone, _ = class_conditioned_spectra(X[10:], y[10:], center=True, k=4)
    assert np.array_equal(per_class, alone)
    assert not covariance_eigenvalues(X[:10]).any()  # (was rounding noise, ~1e-32)
