"""Spectral measures (docs/methods.md §2, §4) against references written here from the formulas."""

import math

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.metrics import (
    alpha_req,
    class_conditioned_spectra,
    effective_rank,
    singular_values,
    spectral_decay,
)
from embedscope.metrics.spectral import covariance_eigenvalues, gram


# ----------------------------------------------------------------------------- references
def ref_sv(X):
    return np.linalg.svd(np.asarray(X, dtype=np.float64), compute_uv=False)


def ref_rho(s, exclude_top=1, direction="uniform||s"):
    """KL between the uniform distribution and s/Σs, written as an explicit loop."""
    s = list(s)[exclude_top:]
    K = len(s)
    tot = sum(s)
    out = 0.0
    for sk in s:
        p = sk / tot
        if direction == "uniform||s":
            out += (1.0 / K) * math.log((1.0 / K) / p)
        else:
            out += p * math.log(p / (1.0 / K))
    return out


def ref_rankme(s, eps=1e-7):
    tot = sum(s)
    return math.exp(-sum((x / tot + eps) * math.log(x / tot + eps) for x in s))


def anisotropic(n, d, seed=0, decay=0.7):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * np.arange(1, d + 1) ** -decay + 0.3


# ----------------------------------------------------------------------------- test vectors
def test_test_vectors_from_methods():
    X = np.diag([10.0, 4.0, 3.0, 2.0, 1.0])
    assert spectral_decay(X) == pytest.approx(0.121777, abs=5e-7)
    assert spectral_decay(X, exclude_top=0) == pytest.approx(0.290167, abs=5e-7)
    assert spectral_decay(X, exclude_top=0, direction="s||uniform") == pytest.approx(0.276364, abs=5e-7)
    np.testing.assert_allclose(singular_values(X), [10, 4, 3, 2, 1], rtol=1e-14)


def test_test_vector_against_scipy_entropy():
    from scipy.stats import entropy

    s = np.array([4.0, 3.0, 2.0, 1.0])
    u = np.full(4, 0.25)
    assert spectral_decay(np.diag([10.0, 4, 3, 2, 1])) == pytest.approx(entropy(u, s / s.sum()), abs=1e-15)


# ----------------------------------------------------------------------------- singular values
@pytest.mark.parametrize("shape", [(500, 24), (24, 24), (10, 40), (3000, 8)])
def test_singular_values_match_numpy_svd(shape):
    X = anisotropic(*shape, seed=shape[0])
    s = singular_values(X)
    r = ref_sv(X)
    assert s.shape == (min(shape),)
    assert np.all(np.diff(s) <= 0)
    np.testing.assert_allclose(s, r, rtol=1e-9)
    for method in ("gram", "svd"):
        if method == "gram" and shape[0] < shape[1]:
            continue
        np.testing.assert_allclose(singular_values(X, method=method), r, rtol=1e-9)


def test_singular_values_float32_input_is_exact_in_float64():
    X = anisotropic(400, 16).astype(np.float32)
    np.testing.assert_allclose(singular_values(X), ref_sv(X.astype(np.float64)), rtol=1e-9)


def test_gram_block_accumulation_matches_full_product():
    X = anisotropic(103, 5)
    G, colsum = gram(X, block_rows=7)
    np.testing.assert_allclose(G, X.T @ X, rtol=1e-12)
    np.testing.assert_allclose(colsum, X.sum(axis=0), rtol=1e-12)


def test_ill_conditioned_falls_back_to_exact_svd():
    # singular values spanning 1e6: the Gram route alone loses digits on the smallest
    rng = np.random.default_rng(3)
    Q, _ = np.linalg.qr(rng.standard_normal((300, 6)))
    V, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    true = np.array([1e3, 10, 1, 1e-1, 1e-2, 1e-3])
    X = Q @ np.diag(true) @ V.T
    np.testing.assert_allclose(singular_values(X), true, rtol=1e-9)
    assert spectral_decay(X) == pytest.approx(ref_rho(true), rel=1e-9)


def test_bad_inputs_are_one_line_errors():
    with pytest.raises(EmbedscopeError, match="2-D"):
        singular_values(np.zeros(5))
    with pytest.raises(EmbedscopeError, match="NaN"):
        singular_values(np.array([[1.0, np.nan], [0.0, 1.0]]))
    with pytest.raises(EmbedscopeError, match="method"):
        singular_values(np.eye(3), method="qr")
    with pytest.raises(EmbedscopeError, match="exclude_top"):
        spectral_decay(np.eye(3), exclude_top=-1)
    with pytest.raises(EmbedscopeError, match="no singular values left"):
        spectral_decay(np.eye(3), exclude_top=3)
    with pytest.raises(EmbedscopeError, match="direction"):
        spectral_decay(np.eye(3), direction="kl")
    with pytest.raises(EmbedscopeError, match="n_components"):
        spectral_decay(np.eye(3), n_components=4)


def test_rho_of_a_collapsed_model_is_nan_not_an_error():
    """Every singular value considered zero (X of rank <= exclude_top: a model collapsed to one point,
    or X = 0): p = 0/0, so ρ is undefined, NaN as in Roth's code, where it used to raise and so stop a
    training run at its evaluation (a 1-thread mobilenet_v3_small run on the shapes collapsed there)."""
    one_point = np.tile([[0.6, 0.8, 0.0, 0.0]], (40, 1))
    on_a_line = np.outer(np.linspace(-1, 2, 30), [1.0, -2.0, 0.5])
    for X in (one_point, on_a_line, np.zeros((4, 3))):
        assert math.isnan(spectral_decay(X))
        assert math.isnan(spectral_decay(X, direction="s||uniform"))
    assert spectral_decay(one_point, exclude_top=0) == math.inf  # s = (s1, 0, 0, 0): p_k = 0 -> KL = inf
    assert spectral_decay(on_a_line, exclude_top=0, direction="s||uniform") == pytest.approx(math.log(3))
    assert math.isnan(spectral_decay(np.diag([3.0, 2.0, 0.0]), exclude_top=2))
    assert np.isfinite(spectral_decay(np.diag([3.0, 2.0, 1.0]), exclude_top=2))  # one value left: p = 1


# ----------------------------------------------------------------------------- ρ
@pytest.mark.parametrize("exclude_top", [0, 1, 2, 5])
@pytest.mark.parametrize("direction", ["uniform||s", "s||uniform"])
def test_spectral_decay_matches_reference(exclude_top, direction):
    X = anisotropic(800, 32, seed=exclude_top)
    got = spectral_decay(X, exclude_top=exclude_top, direction=direction)
    assert got == pytest.approx(ref_rho(ref_sv(X), exclude_top, direction), rel=1e-9, abs=1e-12)


def test_n_components_matches_reference_code_truncated_svd():
    """Parity with Roth's code: TruncatedSVD(D-1, n_iter=7, random_state=42), s[m-1:], entropy(U, s)."""
    from scipy.stats import entropy
    from sklearn.decomposition import TruncatedSVD

    X = anisotropic(600, 32, seed=7)  # float64: sklearn then computes in float64 too
    D = X.shape[1]
    svd = TruncatedSVD(n_components=D - 1, n_iter=7, random_state=42)
    svd.fit(X)
    for mode, exclude_top in ((1, 0), (2, 1)):
        s = svd.singular_values_[mode - 1:]
        ref = entropy(np.ones(len(s)) / len(s), s / s.sum())
        got = spectral_decay(X, exclude_top=exclude_top, n_components=D - 1)
        assert got == pytest.approx(ref, rel=1e-9)
    # reversed KL = the code's negative modes
    s = svd.singular_values_[1:]
    ref = entropy(s / s.sum(), np.ones(len(s)) / len(s))
    assert spectral_decay(X, n_components=D - 1, direction="s||uniform") == pytest.approx(ref, rel=1e-9)
    # and truncation matters: the full spectrum gives a different value
    assert abs(spectral_decay(X) - spectral_decay(X, n_components=D - 1)) > 1e-4
    # float32 features (as the code sees them): sklearn works in float32, so agreement ~1e-6
    X32 = X.astype(np.float32)
    s = TruncatedSVD(n_components=D - 1, n_iter=7, random_state=42).fit(X32).singular_values_[1:]
    ref = entropy(np.ones(len(s)) / len(s), s / s.sum())
    assert spectral_decay(X32, n_components=D - 1) == pytest.approx(ref, rel=1e-5)


def test_isotropic_gaussian_has_rho_near_zero_and_full_effective_rank():
    rng = np.random.default_rng(0)
    D = 16
    X = rng.standard_normal((20000, D))
    assert spectral_decay(X, exclude_top=0) < 5e-4
    assert spectral_decay(X) < 5e-4
    assert effective_rank(X) > D - 0.05


def test_points_on_a_line_have_rank_one_and_large_rho():
    rng = np.random.default_rng(1)
    v = rng.standard_normal(10)
    X = rng.standard_normal((500, 1)) * v[None, :] + 1e-6 * rng.standard_normal((500, 10))
    assert effective_rank(X) < 1.01
    assert spectral_decay(X, exclude_top=0) > 5
    # and against the reference on the same array (the tiny values are computed exactly)
    assert spectral_decay(X, exclude_top=0) == pytest.approx(ref_rho(ref_sv(X), 0), rel=1e-8)


def test_exact_zero_singular_value_gives_infinite_rho():
    X = np.diag([3.0, 2.0, 1.0, 0.0])
    assert spectral_decay(X) == math.inf
    assert np.isfinite(spectral_decay(X, direction="s||uniform"))


def test_rho_is_invariant_to_scaling():
    X = anisotropic(300, 12)
    for c in (1e-3, 7.5, 1e4):
        assert spectral_decay(c * X) == pytest.approx(spectral_decay(X), rel=1e-10)
        assert effective_rank(c * X) == pytest.approx(effective_rank(X), rel=1e-10)


def test_rho_orders_fast_and_slow_decay():
    assert spectral_decay(anisotropic(2000, 32, decay=1.5)) > spectral_decay(anisotropic(2000, 32, decay=0.3))


# ----------------------------------------------------------------------------- RankMe, α-ReQ
@pytest.mark.parametrize("shape", [(400, 20), (15, 30)])
def test_effective_rank_matches_reference(shape):
    X = anisotropic(*shape, seed=2)
    assert effective_rank(X) == pytest.approx(ref_rankme(ref_sv(X)), rel=1e-9)


def test_effective_rank_range():
    assert effective_rank(np.eye(7)) == pytest.approx(7.0, rel=1e-5)
    assert effective_rank(np.diag([1.0, 0.0, 0.0])) == pytest.approx(1.0, abs=1e-5)


def ref_alpha(X, k_min=1, k_max=None, center=True):
    Xc = X - X.mean(axis=0) if center else X
    lam = np.linalg.svd(Xc, compute_uv=False) ** 2 / (X.shape[0] - 1)
    K = min(X.shape[0] - 1, X.shape[1]) if center else lam.size
    lam = lam[:K]
    k_max = K if k_max is None else k_max
    k = np.arange(k_min, k_max + 1)
    A = np.vstack([np.log(k), np.ones_like(k, dtype=float)]).T
    slope, _ = np.linalg.lstsq(A, np.log(lam[k_min - 1:k_max]), rcond=None)[0]
    return -slope


@pytest.mark.parametrize("k_min,k_max", [(1, None), (2, 15), (5, 30)])
def test_alpha_req_matches_reference(k_min, k_max):
    X = anisotropic(500, 30, seed=4, decay=0.8)
    assert alpha_req(X, k_min=k_min, k_max=k_max) == pytest.approx(ref_alpha(X, k_min, k_max), rel=1e-9)
    assert alpha_req(X, center=False) == pytest.approx(ref_alpha(X, center=False), rel=1e-9)


def test_alpha_req_recovers_an_exact_power_law():
    rng = np.random.default_rng(5)
    N, D, alpha = 400, 20, 1.3
    Z = rng.standard_normal((N, D))
    Z -= Z.mean(axis=0)
    U, _ = np.linalg.qr(Z)  # centred orthonormal columns
    lam = np.arange(1, D + 1) ** -alpha
    V, _ = np.linalg.qr(rng.standard_normal((D, D)))
    X = U @ np.diag(np.sqrt(lam * (N - 1))) @ V.T + 5.0  # an offset: the covariance removes it
    np.testing.assert_allclose(covariance_eigenvalues(X), lam, rtol=1e-9)
    assert alpha_req(X) == pytest.approx(alpha, rel=1e-9)


def test_alpha_req_errors():
    X = anisotropic(50, 10)
    with pytest.raises(EmbedscopeError, match="k_max"):
        alpha_req(X, k_max=11)
    with pytest.raises(EmbedscopeError, match="at least two"):
        alpha_req(X, k_min=10)
    rank2 = np.outer(np.arange(20.0), [1, 2, 3]) + np.outer(np.arange(20.0) ** 2, [0, 1, 0])
    with pytest.raises(EmbedscopeError, match="zero"):
        alpha_req(rank2, k_max=3)
    assert np.isfinite(alpha_req(rank2))  # default range leaves the zero eigenvalue out
    # fewer than two directions of variance (a collapsed model): no line to fit, NaN with the default range
    assert math.isnan(alpha_req(np.tile([[0.6, 0.8, 0.0]], (10, 1))))
    assert math.isnan(alpha_req(np.outer(np.arange(10.0), [1.0, 2.0, 3.0])))
    with pytest.raises(EmbedscopeError, match="zero"):
        alpha_req(np.outer(np.arange(10.0), [1.0, 2.0, 3.0]), k_max=2)


# ----------------------------------------------------------------------------- class-conditioned
def ref_class_spectra(X, y, normalize=True, center=False, k=35):
    rows = []
    K = min(k, X.shape[1])
    for c in sorted(set(y.tolist())):
        A = X[y == c]
        if len(A) < 2:
            continue
        if center:
            A = A - A.mean(axis=0)
        s = np.linalg.svd(A, compute_uv=False)
        if normalize:
            s = s / s.sum()
        row = [s[i] if i < len(s) else 0.0 for i in range(K)]
        rows.append(row)
    rows = np.array(rows)
    return rows, rows.mean(axis=0)


@pytest.mark.parametrize("normalize,center,k", [(True, False, 35), (False, False, 5), (True, True, 8)])
def test_class_conditioned_spectra_match_reference(normalize, center, k):
    rng = np.random.default_rng(6)
    X = anisotropic(300, 12, seed=6)
    y = rng.integers(0, 6, 300)
    y[:3] = [7, 8, 8]  # a singleton (7) and a class of two (8): padded with zeros
    per, mean = class_conditioned_spectra(X, y, normalize=normalize, center=center, k=k)
    rper, rmean = ref_class_spectra(X, y, normalize, center, k)
    assert per.shape == rper.shape == (7, min(k, 12))
    np.testing.assert_allclose(per, rper, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(mean, rmean, rtol=1e-9, atol=1e-15)
    if normalize:
        assert np.all(per[:, 2:][-1] == 0)  # class of two: only two singular values


def test_class_conditioned_spectra_leave_out_all_zero_spectra():
    """A class whose singular values are all zero (rows all equal, centred; or all zero) has no
    normalised spectrum (0/0): it is left out of the rows and the mean, as a singleton is."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((5, 4))
    B = np.tile(rng.standard_normal((1, 4)), (5, 1))  # five equal rows
    X = np.vstack([A, B, np.zeros((3, 4))])
    y = np.r_[[0] * 5, [1] * 5, [2] * 3]
    s = np.linalg.svd(A - A.mean(0), compute_uv=False)
    per, mean = class_conditioned_spectra(X, y, center=True)
    assert per.shape == (1, 4)
    np.testing.assert_allclose(mean, s / s.sum(), rtol=1e-12)
    per, mean = class_conditioned_spectra(X, y)  # uncentred: only the zero rows have no spectrum
    assert per.shape == (2, 4)
    sa, sb = np.linalg.svd(A, compute_uv=False), np.linalg.svd(B, compute_uv=False)
    np.testing.assert_allclose(mean, (sa / sa.sum() + sb / sb.sum()) / 2, rtol=1e-12, atol=1e-15)
    per, _ = class_conditioned_spectra(X, y, center=True, normalize=False)  # raw values: zeros are values
    assert per.shape == (3, 4) and not per[1:].any()
    with pytest.raises(EmbedscopeError, match="all-zero spectrum"):
        class_conditioned_spectra(X[5:], y[5:], center=True)


def test_class_conditioned_spectra_errors():
    with pytest.raises(EmbedscopeError, match="two or more"):
        class_conditioned_spectra(np.eye(3), [0, 1, 2])
    with pytest.raises(EmbedscopeError, match="labels"):
        class_conditioned_spectra(np.eye(3), [0, 1])
    with pytest.raises(EmbedscopeError, match="k must"):
        class_conditioned_spectra(np.eye(3), [0, 0, 1], k=0)
