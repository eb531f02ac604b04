"""Correctness audit of the structural, agreement and property measures (docs/methods.md §2-§4,
§8-§10): every value against a brute-force reference written from the formula (plain float64
loops, no blocking, no Gram tricks), the worked examples of the methods text, and the edge cases
(small classes, one class, duplicated rows, D = 1, N < D, rank deficiency, float16/32, extreme
scales, string labels, NaN)."""

from __future__ import annotations

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError


# ============================================================================ §8 agreement
def _pearson_bf(a, b):
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.min() == a.max() or b.min() == b.max():
        return np.nan  # 0/0: a constant map has no correlation
    da, db = a - a.sum() / a.size, b - b.sum() / b.size
    return float((da * db).sum() / np.sqrt((da * da).sum() * (db * db).sum()))


def _jsd_bf(a, b, log=np.log2):
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.sum() == 0 or b.sum() == 0:
        return np.nan
    p, q = a / a.sum(), b / b.sum()
    m = (p + q) / 2
    kl = lambda u: sum(ui * log(ui / mi) for ui, mi in zip(u, m) if ui > 0)  # noqa: E731
    return 0.5 * kl(p) + 0.5 * kl(q)


def test_pearson_and_jsd_match_brute_force_and_scipy():
    from scipy.spatial.distance import jensenshannon

    from embedscope.metrics.agreement import jsd_per_image, pearson_per_image

    rng = np.random.default_rng(0)
    a, b = rng.random((4, 9, 7)), rng.random((4, 9, 7))
    a[0, :3] = 0.0  # zeros inside a map: 0 log 0 = 0
    r = pearson_per_image(a, b)
    jb, jn = jsd_per_image(a, b), jsd_per_image(a, b, base="e")
    for i in range(4):
        assert r[i] == pytest.approx(_pearson_bf(a[i], b[i]), abs=1e-15)
        assert jb[i] == pytest.approx(_jsd_bf(a[i], b[i]), abs=1e-15)
        assert jn[i] == pytest.approx(_jsd_bf(a[i], b[i], np.log), abs=1e-15)
        assert jn[i] == pytest.approx(jensenshannon(a[i].ravel(), b[i].ravel()) ** 2, abs=1e-15)


@pytest.mark.parametrize("v", [0.1, 0.3, 0.7, 1 / 3, 0.123456789])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_constant_map_has_no_pearson_r(v, dtype):
    """A constant map has no r (0/0). The old code decided on x - mean(x), which is not exactly 0
    when the mean of 51,529 copies of 0.1 rounds differently: r = 1.0 for two constant maps and
    ~1e-16 against a random one, counted as valid and pulling the Fisher-z mean."""
    from embedscope.metrics.agreement import jsd_per_image, map_agreement, pearson_per_image

    rng = np.random.default_rng(1)
    c = np.full((1, 227, 227), v, dtype=dtype)
    rnd = rng.random((1, 227, 227)).astype(dtype)
    assert np.isnan(pearson_per_image(c, rnd)).all()
    assert np.isnan(pearson_per_image(rnd, c)).all()
    assert np.isnan(pearson_per_image(c, 0.5 * c)).all()
    # the JSD of a constant non-zero map is defined: the uniform distribution
    assert jsd_per_image(c, rnd)[0] == pytest.approx(_jsd_bf(c[0], rnd[0]), rel=1e-12)
    res = map_agreement(np.concatenate([c, rnd]), np.concatenate([0.5 * c, rnd]))
    assert res["n_undefined_r"] == 1 and res["n_valid_r"] == 1


def test_all_zero_map_pearson_and_jsd_nan_and_counted():
    from embedscope.metrics.agreement import map_agreement

    rng = np.random.default_rng(2)
    a = rng.random((3, 5, 5))
    b = rng.random((3, 5, 5))
    a[1] = 0.0
    res = map_agreement(a, b)
    assert np.isnan(res["pearson"][1]) and np.isnan(res["jsd"][1])
    assert res["n_undefined_r"] == 1 and res["n_undefined_jsd"] == 1
    keep = [0, 2]
    assert res["jsd_mean"] == pytest.approx(np.mean([_jsd_bf(a[i], b[i]) for i in keep]), rel=1e-12)
    z = np.arctanh([_pearson_bf(a[i], b[i]) for i in keep])
    assert res["r_mean"] == pytest.approx(np.tanh(z.mean()), rel=1e-12)
    assert res["r_spread"] == pytest.approx(np.tanh(z.std(ddof=0)), rel=1e-12)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_in_maps_is_an_error(bad):
    """The old code returned r = NaN (counted as a "constant map") and a finite JSD (0.469 for an
    inf pixel) instead of refusing."""
    from embedscope.metrics.agreement import jsd_per_image, map_agreement, pearson_per_image

    a = np.random.default_rng(3).random((2, 4, 4))
    b = a.copy()
    b[1, 2, 3] = bad
    for f in (pearson_per_image, jsd_per_image, map_agreement):
        with pytest.raises(EmbedscopeError, match="NaN or inf"):
            f(a, b)
        with pytest.raises(EmbedscopeError, match="NaN or inf"):
            f(b, a)


@pytest.mark.parametrize("scale", [1e-300, 1e-30, 1e30, 1e200])
def test_maps_at_extreme_scales(scale):
    """r and the JSD do not depend on a map's scale. Old code: maps at 1e200 gave r = 0 (the sum of
    squares overflowed to inf), maps at 1e-300 gave NaN (underflow)."""
    from embedscope.metrics.agreement import jsd_per_image, pearson_per_image

    rng = np.random.default_rng(4)
    a, b = rng.random((3, 6, 6)), rng.random((3, 6, 6))
    s = a * scale
    np.testing.assert_allclose(pearson_per_image(s, b), [_pearson_bf(a[i], b[i]) for i in range(3)], rtol=1e-12)
    np.testing.assert_allclose(jsd_per_image(s, b), [_jsd_bf(a[i], b[i]) for i in range(3)], rtol=1e-12)


def test_agreement_float16_input_is_read_exactly():
    from embedscope.metrics.agreement import jsd_per_image, pearson_per_image

    rng = np.random.default_rng(5)
    a, b = rng.random((3, 8, 8)).astype(np.float16), rng.random((3, 8, 8)).astype(np.float16)
    assert np.array_equal(pearson_per_image(a, b), pearson_per_image(a.astype(float), b.astype(float)))
    assert np.array_equal(jsd_per_image(a, b), jsd_per_image(a.astype(float), b.astype(float)))


# ============================================================================ §2-§4 spectra and π
def _sv_bf(X):
    return np.linalg.svd(np.asarray(X, dtype=np.float64), compute_uv=False)


def _rho_bf(s, exclude_top=1, reverse=False):
    s = np.asarray(s, dtype=np.float64)[exclude_top:]
    K = len(s)
    p = s / s.sum()
    if reverse:
        return float(sum(pk * np.log(pk / (1 / K)) for pk in p if pk > 0))
    return float(sum((1 / K) * np.log((1 / K) / pk) for pk in p))


def _cos_d(a, b):
    return 1.0 - float(a @ b) / (np.linalg.norm(a) * np.linalg.norm(b))


def _pi_bf(X, y):
    """π_intra / π_inter / π_ratio literally (§3): double loops over pairs, singletons left out."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    classes = sorted(set(y.tolist()))
    intra = []
    for c in classes:
        P = X[y == c]
        n = len(P)
        if n >= 2:
            intra.append(sum(_cos_d(P[i], P[j]) for i in range(n) for j in range(n) if i != j) / (n * n - n))
    mu = [X[y == c].mean(axis=0) for c in classes]
    mu = [m / np.linalg.norm(m) for m in mu]
    C = len(classes)
    inter = sum(_cos_d(mu[k], mu[m]) for k in range(C) for m in range(C) if k != m) / (C * C - C)
    return float(np.mean(intra)), float(inter), float(np.mean(intra) / inter)


def _au_bf(X, y, t=2.0):
    X = np.asarray(X, dtype=np.float64)
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    n = len(U)
    same = [np.sum((U[i] - U[j]) ** 2) for i in range(n) for j in range(n) if i != j and y[i] == y[j]]
    allp = [np.exp(-t * np.sum((U[i] - U[j]) ** 2)) for i in range(n) for j in range(i + 1, n)]
    return float(np.mean(same)), float(np.log(np.mean(allp)))


def _rankme_bf(s, eps=1e-7):
    p = np.asarray(s, dtype=np.float64) / np.sum(s) + eps
    return float(np.exp(-sum(pk * np.log(pk) for pk in p)))


def _alpha_bf(X, k_min=1, k_max=None):
    X = np.asarray(X, dtype=np.float64)
    C = np.cov(X, rowvar=False, ddof=1).reshape(X.shape[1], X.shape[1])
    lam = np.sort(np.linalg.eigvalsh(C))[::-1][: min(len(X) - 1, X.shape[1])]
    hi = len(lam) if k_max is None else k_max
    k = np.arange(k_min, hi + 1)
    return float(-np.polyfit(np.log(k), np.log(lam[k_min - 1:hi]), 1)[0])


def _cases():
    rng = np.random.default_rng(10)
    yield "N>D", rng.normal(size=(40, 6)), rng.integers(0, 5, 40)
    yield "N<D", rng.normal(size=(7, 20)), np.array([0, 0, 1, 1, 2, 3, 3])
    yield "sizes 1 and 2", rng.normal(size=(6, 4)), np.array([0, 1, 1, 2, 3, 3])
    yield "duplicated rows", np.repeat(rng.normal(size=(5, 4)), 3, axis=0), np.repeat([0, 0, 1, 1, 2], 3)
    yield "string labels", rng.normal(size=(12, 5)) + 1, np.array(list("abcabcabcabc"))
    yield "float32", rng.normal(size=(30, 8)).astype(np.float32), rng.integers(0, 3, 30)
    yield "float16", rng.normal(size=(30, 8)).astype(np.float16), rng.integers(0, 3, 30)


@pytest.mark.parametrize("case", list(_cases()), ids=lambda c: c[0])
def test_spectral_and_class_distances_match_brute_force(case):
    from embedscope.metrics import geometry_report
    from embedscope.metrics.geometry import alignment_uniformity, class_distances
    from embedscope.metrics.spectral import alpha_req, effective_rank, singular_values, spectral_decay

    _, X, y = case
    s = _sv_bf(X)
    np.testing.assert_allclose(singular_values(X), s, rtol=1e-10, atol=1e-12 * s[0])
    for ex in (0, 1):
        assert spectral_decay(X, exclude_top=ex) == pytest.approx(_rho_bf(s, ex), rel=1e-10, abs=1e-13)
    assert spectral_decay(X, exclude_top=0, direction="s||uniform") == pytest.approx(
        _rho_bf(s, 0, reverse=True), rel=1e-10, abs=1e-13)
    assert effective_rank(X) == pytest.approx(_rankme_bf(s), rel=1e-12)
    assert alpha_req(X) == pytest.approx(_alpha_bf(X), rel=1e-9)
    pi = class_distances(X, y)
    ref = _pi_bf(X, y)
    for key, v in zip(("pi_intra", "pi_inter", "pi_ratio"), ref):
        assert pi[key] == pytest.approx(v, rel=1e-12, abs=1e-14), key
    assert pi["n_singleton"] == sum(np.sum(np.asarray(y) == c) == 1 for c in set(np.asarray(y).tolist()))
    au = alignment_uniformity(X, y)
    a_ref, u_ref = _au_bf(X, y)
    assert au["alignment"] == pytest.approx(a_ref, rel=1e-12, abs=1e-14)
    assert au["uniformity"] == pytest.approx(u_ref, rel=1e-12)
    rep = geometry_report(X, y)
    assert rep["rho"] == pytest.approx(_rho_bf(s, 1), rel=1e-10, abs=1e-13)
    assert rep["rho_all"] == pytest.approx(_rho_bf(s, 0), rel=1e-10, abs=1e-13)
    assert rep["effective_rank"] == pytest.approx(_rankme_bf(s), rel=1e-12)
    assert rep["alpha"] == pytest.approx(_alpha_bf(X), rel=1e-9)
    for key, v in zip(("pi_intra", "pi_inter", "pi_ratio"), ref):
        assert rep[key] == pytest.approx(v, rel=1e-12, abs=1e-14), key
    assert rep["alignment"] == pytest.approx(a_ref, rel=1e-12, abs=1e-14)
    assert rep["uniformity"] == pytest.approx(u_ref, rel=1e-12)


def test_worked_example_of_section_2():
    from embedscope.metrics.spectral import spectral_decay

    X = np.diag([10.0, 4.0, 3.0, 2.0, 1.0])
    assert round(spectral_decay(X), 6) == 0.121777
    assert round(spectral_decay(X, exclude_top=0), 6) == 0.290167
    assert round(spectral_decay(X, exclude_top=0, direction="s||uniform"), 6) == 0.276364
    s = np.array([10.0, 4, 3, 2, 1])
    assert spectral_decay(X) == pytest.approx(_rho_bf(s, 1), rel=1e-14)


def test_one_dimension_and_one_class():
    from embedscope.metrics import geometry_report
    from embedscope.metrics.geometry import alignment_uniformity, class_distances
    from embedscope.metrics.spectral import singular_values, spectral_decay

    X = np.array([[1.0], [2.0], [-3.0], [4.0]])
    assert singular_values(X).tolist() == [pytest.approx(np.sqrt(30.0), rel=1e-15)]
    assert spectral_decay(X, exclude_top=0) == 0.0  # one value: P = U
    with pytest.raises(EmbedscopeError, match="no singular values left"):
        spectral_decay(X)
    # D = 1: every cosine is ±1; the means of [1, 2] and [-3, 4] point the same way: π_inter = 0
    d = class_distances(X, [0, 0, 1, 1])
    assert (d["pi_intra"], d["pi_inter"]) == (pytest.approx(1.0), 0.0) and d["pi_ratio"] == np.inf
    with pytest.raises(EmbedscopeError, match="two classes"):
        class_distances(np.eye(3), [0, 0, 0])
    # every class a single sample: the class measures are NaN, with the reason; the rest reported
    rep = geometry_report(np.eye(3), [0, 1, 2])
    assert list(rep["undefined"]) == ["pi_intra", "pi_ratio", "alignment"]
    assert all(np.isnan(rep[k]) for k in rep["undefined"]) and rep["pi_inter"] == pytest.approx(1.0)  # orthogonal means
    # alignment / uniformity need no second class
    rng = np.random.default_rng(11)
    X = rng.normal(size=(9, 3))
    a, u = _au_bf(X, np.zeros(9))
    au = alignment_uniformity(X, np.zeros(9))
    assert (au["alignment"], au["uniformity"]) == (pytest.approx(a, rel=1e-12), pytest.approx(u, rel=1e-12))


@pytest.mark.parametrize("shape,rank", [((30, 8), 3), ((6, 10), 4), ((20, 5), 4)])
def test_exactly_rank_deficient_x_has_zero_singular_values_and_infinite_rho(shape, rank):
    """A zero singular value gives ρ = KL(U‖P) = inf (§2: no ε). The old code returned the SVD's
    rounding noise (~1e-15·s_1) as singular values, so ρ of a rank-3 30×8 matrix was 25.17
    (exclude_top=1) / 22.23 (0): numbers made of noise."""
    from embedscope.metrics import geometry_report
    from embedscope.metrics.spectral import effective_rank, singular_values, spectral_decay

    rng = np.random.default_rng(12)
    X = rng.integers(-3, 4, size=(shape[0], rank)) @ rng.integers(-3, 4, size=(rank, shape[1]))
    X = X.astype(np.float64)
    assert np.linalg.matrix_rank(X) == rank
    s = singular_values(X)
    assert np.count_nonzero(s) == rank and s.size == min(shape)
    np.testing.assert_allclose(s[:rank], _sv_bf(X)[:rank], rtol=1e-12)
    assert spectral_decay(X) == np.inf and spectral_decay(X, exclude_top=0) == np.inf
    assert spectral_decay(X, exclude_top=0, direction="s||uniform") == pytest.approx(
        _rho_bf(s[:rank], 0, reverse=True) + np.log(min(shape) / rank), rel=1e-12)
    assert effective_rank(X) == pytest.approx(_rankme_bf(s), rel=1e-12)
    y = np.arange(shape[0]) % 3
    rep = geometry_report(X, y)
    assert rep["rho"] == np.inf and rep["rho_all"] == np.inf


@pytest.mark.parametrize("scale", [1e-170, 1e-160, 1e-30, 1e30, 1e160, 1e200])
def test_every_geometry_measure_is_scale_free_at_extreme_scales(scale):
    """ρ, π, RankMe, α-ReQ and alignment/uniformity do not depend on the scale of X (squared
    Euclidean π scale with its square). Old code at 1e160: π "row 0 contains NaN or inf", ρ an
    overflow in the Gram matrix; at 1e-160: silently wrong values (π_ratio off by 9e-6, α by 2e-4,
    squared-Euclidean π_ratio by 2e-3); at 1e-170: "row 0 is all zeros"."""
    from embedscope.metrics import geometry_report
    from embedscope.metrics.geometry import alignment_uniformity, class_distances
    from embedscope.metrics.spectral import alpha_req, covariance_eigenvalues, effective_rank, singular_values, spectral_decay

    rng = np.random.default_rng(13)
    X = rng.normal(size=(30, 5))
    y = rng.integers(0, 4, 30)
    Xs = X * scale
    s = _sv_bf(X)
    ref_pi = _pi_bf(X, y)
    a_ref, u_ref = _au_bf(X, y)
    rep = geometry_report(Xs, y, keep_spectrum=True)
    assert spectral_decay(Xs) == pytest.approx(_rho_bf(s), rel=1e-12)
    assert rep["rho"] == pytest.approx(_rho_bf(s), rel=1e-12)
    assert effective_rank(Xs) == pytest.approx(_rankme_bf(s), rel=1e-12)
    assert rep["effective_rank"] == pytest.approx(_rankme_bf(s), rel=1e-12)
    assert alpha_req(Xs) == pytest.approx(_alpha_bf(X), rel=1e-9)
    assert rep["alpha"] == pytest.approx(_alpha_bf(X), rel=1e-9)
    for key, v in zip(("pi_intra", "pi_inter", "pi_ratio"), ref_pi):
        assert class_distances(Xs, y)[key] == pytest.approx(v, rel=1e-12), key
        assert rep[key] == pytest.approx(v, rel=1e-12), key
    sq_ref = class_distances(X, y, metric="sqeuclidean")
    sq = class_distances(Xs, y, metric="sqeuclidean")
    assert sq["pi_ratio"] == pytest.approx(sq_ref["pi_ratio"], rel=1e-12)
    if 1e-150 < scale < 1e150:  # the squared distances themselves are representable
        assert sq["pi_intra"] == pytest.approx(sq_ref["pi_intra"] * scale ** 2, rel=1e-12, abs=0)
    au = alignment_uniformity(Xs, y)
    assert (au["alignment"], au["uniformity"]) == (pytest.approx(a_ref, rel=1e-12), pytest.approx(u_ref, rel=1e-12))
    assert (rep["alignment"], rep["uniformity"]) == (pytest.approx(a_ref, rel=1e-12), pytest.approx(u_ref, rel=1e-12))
    if 1e-150 < scale < 1e150:  # singular values and eigenvalues come back at the input's scale
        np.testing.assert_allclose(singular_values(Xs), s * scale, rtol=1e-12)
        np.testing.assert_allclose(rep["singular_values"], s * scale, rtol=1e-12)
        np.testing.assert_allclose(covariance_eigenvalues(Xs), covariance_eigenvalues(X) * scale ** 2, rtol=1e-10)


def test_rows_of_very_different_scales_in_one_matrix():
    """Unit rows are formed per row: a row 1e-200 times smaller than the others has the same cosine."""
    from embedscope.metrics.geometry import class_distances

    rng = np.random.default_rng(14)
    X = rng.normal(size=(12, 4))
    y = np.arange(12) % 3
    Xs = X.copy()
    Xs[0] *= 1e-200
    Xs[5] *= 1e-300
    ref = _pi_bf(X, np.asarray(y))  # (the class means then ignore the tiny rows: compare π_intra only)
    assert class_distances(Xs, y)["pi_intra"] == pytest.approx(ref[0], rel=1e-12)


@pytest.mark.parametrize("f16_scale", [20.0])
def test_sampled_uniformity_is_float64_exact_and_deterministic(f16_scale):
    """The sampled uniformity equals the formula on the same seeded pairs, bit for bit twice.
    Old code multiplied float16 rows in float16 (and float32 rows of 1e25 overflowed: NaN)."""
    from embedscope.metrics.geometry import alignment_uniformity

    rng = np.random.default_rng(15)
    n, max_pairs = 120, 3000  # 7,140 pairs > 3,000: sampled
    X64 = rng.normal(size=(n, 6)) * f16_scale
    y = np.arange(n) % 4
    for X in (X64.astype(np.float16), (X64 * 1e24).astype(np.float32), X64):
        r1 = alignment_uniformity(X, y, max_pairs=max_pairs, seed=7)
        r2 = alignment_uniformity(X, y, max_pairs=max_pairs, seed=7)
        assert not r1["uniformity_exact"] and r1["uniformity_pairs"] == max_pairs
        assert r1 == r2  # deterministic
        g = np.random.default_rng(7)
        i = g.integers(0, n, size=max_pairs)
        j = g.integers(0, n - 1, size=max_pairs)
        j += j >= i
        U = np.asarray(X, dtype=np.float64)
        U = U / np.linalg.norm(U, axis=1, keepdims=True)
        ref = np.log(np.mean(np.exp(-2.0 * np.sum((U[i] - U[j]) ** 2, axis=1))))
        tol = 1e-6 if X.dtype == np.float32 else 1e-12  # float32 rows: float32 dot products
        assert r1["uniformity"] == pytest.approx(ref, rel=tol)


def test_blocked_accumulation_and_uniformity_match_brute_force(monkeypatch):
    """Force several row blocks (Gram matrix, class sums, pair blocks) and compare with the loops."""
    from embedscope.metrics import geometry as geo
    from embedscope.metrics import spectral as spec

    rng = np.random.default_rng(16)
    X = rng.normal(size=(37, 5)) + 0.5
    y = rng.integers(0, 4, 37)
    monkeypatch.setattr(geo, "block_rows_for", lambda d: 4)
    monkeypatch.setattr(spec, "block_rows_for", lambda d: 4)
    rep = geo.geometry_report(X, y)
    s = _sv_bf(X)
    assert rep["rho"] == pytest.approx(_rho_bf(s), rel=1e-10)
    for key, v in zip(("pi_intra", "pi_inter", "pi_ratio"), _pi_bf(X, y)):
        assert rep[key] == pytest.approx(v, rel=1e-12), key
    G, colsum = spec.gram(X, block_rows=3)
    np.testing.assert_allclose(G, X.T @ X, rtol=1e-13)
    np.testing.assert_allclose(colsum, X.sum(axis=0), rtol=1e-13)
    norms = np.linalg.norm(X, axis=1)
    u, npairs, exact = geo._uniformity(X, norms, 2.0, 10**6, 0, block_rows=3)
    assert exact and npairs == 37 * 36 // 2
    assert u == pytest.approx(_au_bf(X, y)[1], rel=1e-12)


def test_class_conditioned_spectra_match_brute_force():
    from embedscope.metrics.spectral import class_conditioned_spectra

    rng = np.random.default_rng(17)
    X = rng.normal(size=(25, 6))
    y = np.array(["b"] * 10 + ["a"] * 2 + ["c"] + ["d"] * 12)
    for center in (False, True):
        per, mean = class_conditioned_spectra(X, y, k=5, center=center)
        rows = []
        for c in ("a", "b", "d"):  # sorted, singleton "c" left out
            P = X[y == c]
            if center:
                P = P - P.mean(axis=0)
            s = _sv_bf(P)
            s = s / s.sum()
            row = np.zeros(5)
            row[:min(5, s.size)] = s[:5]
            rows.append(row)
        np.testing.assert_allclose(per, rows, rtol=1e-10, atol=1e-15)
        np.testing.assert_allclose(mean, np.mean(rows, axis=0), rtol=1e-10, atol=1e-15)


def test_nan_in_embeddings_is_a_clear_error():
    from embedscope.metrics import geometry_report
    from embedscope.metrics.geometry import alignment_uniformity, class_distances
    from embedscope.metrics.spectral import alpha_req, class_conditioned_spectra, effective_rank, singular_values, spectral_decay

    X = np.random.default_rng(18).normal(size=(10, 3))
    X[4, 1] = np.nan
    y = np.arange(10) % 2
    for f in (singular_values, spectral_decay, effective_rank, alpha_req):
        with pytest.raises(EmbedscopeError, match="NaN or inf"):
            f(X)
    for f in (class_distances, alignment_uniformity, geometry_report, class_conditioned_spectra):
        with pytest.raises(EmbedscopeError, match="NaN or inf"):
            f(X, y)


# ============================================================================ §10 nearest same / different
def _nsd_bf(X, y, metric):
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    n = len(X)
    if metric == "cosine":
        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        sim = lambda i, j: float(U[i] @ U[j])  # noqa: E731
    elif metric == "dot":
        sim = lambda i, j: float(X[i] @ X[j])  # noqa: E731
    else:
        sim = lambda i, j: -float(np.sqrt(np.sum((X[i] - X[j]) ** 2)))  # noqa: E731
    same = np.array([max([sim(i, j) for j in range(n) if j != i and y[j] == y[i]], default=np.nan) for i in range(n)])
    diff = np.array([max([sim(i, j) for j in range(n) if y[j] != y[i]], default=np.nan) for i in range(n)])
    return same, diff


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("block_size", [None, 1, 4])
def test_nearest_same_different_matches_brute_force(metric, dtype, block_size):
    from embedscope.metrics.neighbours import nearest_same_different

    rng = np.random.default_rng(20)
    X = (rng.normal(size=(23, 5)) * 3).astype(dtype)
    y = np.array(list("abcde" * 4 + "fgg"))  # string labels, a class of one ("f"), of two ("g")
    s, d = nearest_same_different(X, y, metric=metric, block_size=block_size)
    S, D = _nsd_bf(X, y, metric)
    assert np.array_equal(np.isnan(s), np.isnan(S)) and not np.isnan(d).any()
    ok = ~np.isnan(S)
    np.testing.assert_allclose(s[ok], S[ok], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(d, D, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_euclidean_duplicates_are_at_distance_zero(dtype):
    """Old code: -|x_i - x_j| from 2 x_i.x_j - |x_j|^2, which cancels: exact duplicates of norm ~20
    came out at distance 5.5e-3 in float32 (and ~1e-8 in float64) instead of 0."""
    from embedscope.metrics.neighbours import nearest_same_different

    rng = np.random.default_rng(21)
    X = np.repeat(rng.normal(size=(4, 3)) * 10, 2, axis=0).astype(dtype)
    y = np.repeat([0, 1, 2, 3], 2)
    s, d = nearest_same_different(X, y, metric="euclidean")
    assert np.all(s == 0.0)
    S, D = _nsd_bf(X, y, "euclidean")
    np.testing.assert_allclose(d, D, rtol=1e-14)
    # a near-duplicate pair at 1e-9 (float64): its distance, not rounding noise
    Z = np.array([[5.0, 5.0], [5.0, 5.0 + 1e-9], [-5.0, 0.0]])
    s, _ = nearest_same_different(Z, [0, 0, 1], metric="euclidean")
    np.testing.assert_allclose(s, [-(5.0 + 1e-9 - 5.0)] * 2 + [np.nan], rtol=1e-12)


def test_one_class_nan_differences_and_nan_input_refused():
    from embedscope.metrics.neighbours import nearest_same_different

    X = np.random.default_rng(22).normal(size=(5, 3))
    s, d = nearest_same_different(X, [1] * 5)
    assert np.isnan(d).all() and not np.isnan(s).any()
    X[2, 0] = np.nan
    with pytest.raises(EmbedscopeError, match="NaN"):
        nearest_same_different(X, [0, 0, 1, 1, 1])


def test_a_tie_is_on_the_diagonal_not_below_it():
    """§10 defines the share *below* the diagonal; a point with s_same == s_diff lies on it and is
    not counted (docstring, docs/methods.md §10). R@1 (§1, ties to the lower index) can count it a
    hit, so the two agree only when no point is tied."""
    from embedscope.metrics.neighbours import nearest_same_different, share_below_diagonal
    from embedscope.metrics.retrieval import retrieval_metrics

    # point 0 is at the same cosine from 1 (own class) and 2 (other class); 1 has the lower index
    X = np.array([[1.0, 0.0], [0.6, 0.8], [0.6, -0.8], [0.0, -1.0], [-1.0, 0.1], [-0.9, 0.2]])
    y = np.array([0, 0, 1, 1, 2, 2])
    s, d = nearest_same_different(X, y)
    assert s[0] == d[0]
    share, left_out = share_below_diagonal(s, d)
    below = np.mean(d < s)
    assert share == below and left_out == 0
    r1 = retrieval_metrics(X, y, ks=(1,))["R@1"]
    assert r1 == pytest.approx(below + 1 / 6)  # the tie is a hit for R@1, not below the diagonal
    # without ties the share is exactly R@1
    rng = np.random.default_rng(23)
    Z = rng.normal(size=(40, 4))
    yz = rng.integers(0, 4, 40)
    share, _ = share_below_diagonal(*nearest_same_different(Z, yz))
    assert share == pytest.approx(retrieval_metrics(Z, yz, ks=(1,))["R@1"])


# ============================================================================ §9 NR-Prec
def _nrprec_bf(X, vals, max_r=None):
    """Eq. 4-5 literally: full float64 Euclidean ranking per query (ties to the lower index)."""
    X = np.asarray(X, dtype=np.float64)
    vals = np.asarray(vals)
    n = len(X)
    nv = {v: int(np.sum(vals == v)) for v in set(vals.tolist())}
    queries = [q for q in range(n) if nv[vals[q]] > 1]
    nq = len(queries)
    rp, z = [], []
    for q in queries:
        key = np.array([np.sum((X[q] - X[j]) ** 2) for j in range(n)])
        others = np.array([j for j in range(n) if j != q])
        order = others[np.lexsort((others, key[others]))]
        R = nv[vals[q]] - 1 if max_r is None else min(nv[vals[q]] - 1, max_r)
        h = int(np.sum(vals[order[:R]] == vals[q]))
        p = nv[vals[q]] / nq
        rp.append(h / R)
        z.append((h - R * p) / np.sqrt(R * p * (1 - p)))
    return float(np.mean(rp)), float(np.mean(z))


@pytest.mark.parametrize("block", [1, 3, None])
@pytest.mark.parametrize("max_r", [None, 2])
def test_nr_prec_blocks_and_many_exact_ties_match_brute_force(block, max_r):
    """More than SLACK (16) references tied at the R-th distance: the band reaches the end of the
    top-L list and the row is retried with a longer one; one query per block at block=1."""
    from embedscope.metrics.properties import property_precision

    rng = np.random.default_rng(30)
    X = np.vstack([np.zeros((25, 2)), rng.integers(-2, 3, size=(20, 2))]).astype(np.float64)
    props = {"shape": np.array(list("ab") * 22 + ["c"]), "colour": rng.integers(0, 3, 45).astype(str)}
    res = property_precision(X, props, max_r=max_r, block=block)
    for name, vals in props.items():
        rp, nr = _nrprec_bf(X, vals, max_r)
        assert res[name]["R-Prec"] == pytest.approx(rp, rel=1e-12, abs=1e-14)
        assert res[name]["NR-Prec"] == pytest.approx(nr, rel=1e-12, abs=1e-12)
    assert res["shape"]["lone_queries"] == 1 and res["shape"]["lone_values"] == 1


def test_nr_prec_null_mean_is_the_exact_hypergeometric_mean():
    """null_mean = mean over queries of E[z_q] with h_q ~ Hypergeom(n - 1, N_v - 1, R): checked
    against the expectation over every arrangement of the other values, by scipy's hypergeom."""
    from scipy.stats import hypergeom

    from embedscope.metrics.properties import property_precision

    rng = np.random.default_rng(31)
    X = rng.normal(size=(40, 3))
    vals = np.array([0] * 10 + [1] * 14 + [2] * 16)
    r = property_precision(X, {"v": vals})["v"]
    n = len(vals)
    ez = []
    for q in range(n):
        N = int(np.sum(vals == vals[q]))
        R, p = N - 1, N / n
        ez.append((hypergeom(n - 1, N - 1, R).mean() - R * p) / np.sqrt(R * p * (1 - p)))
    assert r["null_mean"] == pytest.approx(np.mean(ez), rel=1e-12)


@pytest.mark.parametrize("values, needle", [
    (np.array([1, "1", 1, "1", 2, 2], dtype=object), "mixes values of types int, str"),
    (np.array([None, "a", "a", None, "b", "b"], dtype=object), "missing values"),
    (np.array([float("nan"), 1.0, 1.0, 2.0, 2.0, 3.0], dtype=object), "missing values"),
])
def test_property_object_values_compare_as_themselves(values, needle):
    """Object-typed property values were compared as strings: 1 and "1" (or None and "None") were one value."""
    from embedscope.metrics.properties import property_precision

    X = np.random.default_rng(0).normal(size=(6, 3))
    with pytest.raises(EmbedscopeError, match=needle):
        property_precision(X, {"p": values})
    ok = property_precision(X, {"p": np.array(["a", "a", "b", "b", "c", "c"], dtype=object)})
    same = property_precision(X, {"p": np.array(["a", "a", "b", "b", "c", "c"])})
    assert ok == same  # object-typed strings: the same values as a string array


def _nr_prec_bf(X, v):
    """NR-Prec (Eq. 5) by brute force: full float64 Euclidean distances, ties to the lower index."""
    n = len(v)
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    vals, cnt = np.unique(v, return_counts=True)
    nv = cnt[np.searchsorted(vals, v)]
    q = nv > 1
    nq = q.sum()
    zs = []
    for i in np.flatnonzero(q):
        order = [j for j in np.lexsort((np.arange(n), D[i])) if j != i]
        r = nv[i] - 1
        h = sum(v[j] == v[i] for j in order[:r])
        p = nv[i] / nq
        sig = np.sqrt(r * p * (1 - p))
        if sig > 0:
            zs.append((h - r * p) / sig)
    return float(np.mean(zs))


def test_property_permutation_test_matches_a_brute_force_over_the_same_shuffles():
    from embedscope.metrics.properties import property_precision

    rng = np.random.default_rng(3)
    n, P, seed = 60, 25, 7
    X = np.round(rng.normal(size=(n, 3)) * 4) / 4  # quarters: exact keys, many exact ties in distance
    props = {"a": rng.integers(0, 3, n), "b": np.array(["x", "y"] * (n // 2)), "c": rng.integers(0, 2, n)}
    X[:, 0] += 2.0 * props["c"]  # clustered
    got = property_precision(X, props, permutations=P, seed=seed)
    draws = np.random.default_rng(seed)
    perms = [draws.permutation(n) for _ in range(P)]  # one shuffle of the images per draw, all properties
    for name, v in props.items():
        v = np.asarray(v)
        obs = _nr_prec_bf(X, v)
        null = np.array([_nr_prec_bf(X, v[pi]) for pi in perms])
        assert got[name]["NR-Prec"] == pytest.approx(obs, abs=1e-12)
        assert got[name]["perm_mean"] == pytest.approx(null.mean(), abs=1e-12)
        assert got[name]["perm_sd"] == pytest.approx(null.std(ddof=1), abs=1e-12)
        assert got[name]["perm_p_value"] == (1 + np.sum(null >= obs - 1e-12)) / (1 + P)
        assert got[name]["permutations"] == P
    assert got["c"]["perm_p_value"] == 1 / (1 + P)  # the clustered property beats every shuffle
    again = property_precision(X, props, permutations=P, seed=seed)
    assert again == got  # seeded
    assert "perm_p_value" not in property_precision(X, props)


def test_property_permutations_bad_values():
    from embedscope.metrics.properties import property_precision

    X = np.random.default_rng(0).normal(size=(8, 2))
    with pytest.raises(EmbedscopeError, match="permutations"):
        property_precision(X, {"a": np.arange(8) % 2}, permutations=-1)
