"""Class distances π (docs/methods.md §3), alignment/uniformity and the report (§4) vs explicit loops."""

import math

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.metrics import (
    alignment_uniformity,
    alpha_req,
    class_distances,
    effective_rank,
    geometry_report,
    spectral_decay,
)
from embedscope.metrics.geometry import _accumulate


# ----------------------------------------------------------------------------- references
def cos_dist(a, b):
    return 1.0 - float(a @ b) / (math.sqrt(float(a @ a)) * math.sqrt(float(b @ b)))


def ref_pi(X, y, metric="cosine"):
    """π straight from docs/methods.md §3 with explicit double loops; singletons left out of π_intra."""
    d = cos_dist if metric == "cosine" else (lambda a, b: float((a - b) @ (a - b)))
    classes = sorted(set(y.tolist()))
    intra = {}
    for c in classes:
        A = X[y == c]
        n = len(A)
        if n < 2:
            intra[c] = math.nan
            continue
        tot = 0.0
        for i in range(n):
            for j in range(n):
                if i != j:
                    tot += d(A[i], A[j])
        intra[c] = tot / (n * n - n)
    mus = []
    for c in classes:
        m = X[y == c].mean(axis=0)
        mus.append(m / np.linalg.norm(m) if metric == "cosine" else m)
    C = len(mus)
    inter = sum(d(mus[k], mus[l]) for k in range(C) for l in range(C) if k != l) / (C * C - C)
    vals = [v for v in intra.values() if not math.isnan(v)]
    pi_intra = sum(vals) / len(vals)
    return pi_intra, inter, np.array([intra[c] for c in classes])


def ref_alignment_uniformity(X, y, t=2.0):
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    n = len(U)
    al, na, un, nu = 0.0, 0, 0.0, 0
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            d2 = float((U[i] - U[j]) @ (U[i] - U[j]))
            if y[i] == y[j]:
                al += d2
                na += 1
            if i < j:
                un += math.exp(-t * d2)
                nu += 1
    return al / na, math.log(un / nu)


def data(n=90, d=6, c=5, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    X = rng.standard_normal((c, d))[y] + 0.7 * rng.standard_normal((n, d))
    return X, y


# ----------------------------------------------------------------------------- π
@pytest.mark.parametrize("metric", ["cosine", "sqeuclidean"])
def test_class_distances_match_double_loops(metric):
    X, y = data()
    y[:2] = [11, 12]  # two singleton classes
    r = class_distances(X, y, metric=metric)
    pi_intra, pi_inter, per = ref_pi(X, y, metric)
    assert r["pi_intra"] == pytest.approx(pi_intra, rel=1e-9)
    assert r["pi_inter"] == pytest.approx(pi_inter, rel=1e-9)
    assert r["pi_ratio"] == pytest.approx(pi_intra / pi_inter, rel=1e-9)
    np.testing.assert_allclose(r["intra_per_class"], per, rtol=1e-9)  # NaN where the reference has NaN
    assert r["n_singleton"] == 2 and r["n_classes"] == 7
    assert list(r["classes"]) == [0, 1, 2, 3, 4, 11, 12]
    assert not math.isnan(r["pi_intra"])


def test_class_distances_match_reference_code_formula_with_cdist():
    """The reference code (metrics/dists.py): cdist 'cosine' per class, normalised class means."""
    from scipy.spatial.distance import cdist

    X, y = data(n=200, d=8, c=7, seed=3)
    intra = []
    for c in np.unique(y):
        D = cdist(X[y == c], X[y == c], "cosine")
        intra.append(D.sum() / (len(D) ** 2 - len(D)))
    mus = np.array([X[y == c].mean(0) / np.linalg.norm(X[y == c].mean(0)) for c in np.unique(y)])
    Dm = cdist(mus, mus, "cosine")
    inter = Dm.sum() / (len(Dm) ** 2 - len(Dm))
    r = class_distances(X.astype(np.float32).astype(np.float64), y)
    assert r["pi_intra"] == pytest.approx(np.mean(intra), rel=1e-9)
    assert r["pi_inter"] == pytest.approx(inter, rel=1e-9)


def test_identical_points_in_a_class_have_zero_intra():
    rng = np.random.default_rng(1)
    X = np.repeat(rng.standard_normal((3, 5)), 4, axis=0)
    y = np.repeat([0, 1, 2], 4)
    r = class_distances(X, y)
    assert r["pi_intra"] == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(r["intra_per_class"], 0.0, atol=1e-12)
    assert r["pi_inter"] > 0.01
    assert alignment_uniformity(X, y)["alignment"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("metric", ["cosine", "sqeuclidean"])
def test_a_collapsed_model_has_zero_distances_and_an_undefined_ratio(metric):
    # every row on one point (float32 network outputs): π_intra = π_inter = alignment = 0 exactly
    # and π_ratio = 0/0 undefined. The plain sums (n² − ‖Σu‖²) left rounding of ~1e-16, and
    # π_ratio came out 4.88, 0, inf or NaN depending on the point (a random value in a study)
    rng = np.random.default_rng(4)
    for d in (3, 8, 32, 128):
        for trial in range(3):
            X = np.tile(rng.standard_normal(d).astype(np.float32) * 10.0 ** trial, (500, 1))
            y = rng.integers(0, 9, 500)
            r = class_distances(X, y, metric=metric)
            assert r["pi_intra"] == 0.0 and r["pi_inter"] == 0.0 and math.isnan(r["pi_ratio"])
            assert np.all(r["intra_per_class"] == 0.0)
            g = geometry_report(X, y, metric=metric)
            assert g["pi_intra"] == 0.0 and g["pi_inter"] == 0.0 and math.isnan(g["pi_ratio"])
            assert g["alignment"] == 0.0 and alignment_uniformity(X, y)["alignment"] == 0.0


def test_tight_classes_or_coinciding_means_give_ratio_zero_or_inf():
    rng = np.random.default_rng(5)
    P = rng.standard_normal((4, 6)).astype(np.float32)
    r = class_distances(np.repeat(P, 5, axis=0), np.repeat(np.arange(4), 5))  # each class one point
    assert r["pi_intra"] == 0.0 and r["pi_inter"] > 0.1 and r["pi_ratio"] == 0.0
    p, e, f = (rng.integers(-8, 8, 6) / 4 for _ in range(3))  # dyadic: the means are exact
    X = np.array([p + e, p - e, p + f, p - f])  # two classes, the same mean: π_inter = 0
    r = class_distances(X, [0, 0, 1, 1], metric="sqeuclidean")
    assert r["pi_inter"] == 0.0 and r["pi_intra"] > 0.1 and math.isinf(r["pi_ratio"])


@pytest.mark.parametrize("metric", ["cosine", "sqeuclidean"])
def test_nearly_collapsed_classes_keep_their_digits(metric):
    # one point plus 1e-6 noise: distances of ~1e-12 (within classes) and ~1e-14 (between class
    # means), against the definition with each distance from the difference of the two rows
    # (1 − cos(a, b) = ‖a/‖a‖ − b/‖b‖‖² / 2: no cancellation). The plain sums lost 4 digits of
    # π_intra and 2 of π_inter there
    rng = np.random.default_rng(6)
    X = rng.standard_normal(12) + 1e-6 * rng.standard_normal((240, 12))
    y = np.repeat(np.arange(6), 40)
    V = X / np.linalg.norm(X, axis=1, keepdims=True) if metric == "cosine" else X
    k = 0.5 if metric == "cosine" else 1.0

    def mean_pair(A):
        D = A[:, None, :] - A[None, :, :]
        return k * np.einsum("ijk,ijk->", D, D) / (len(A) ** 2 - len(A))

    intra = [mean_pair(V[y == c]) for c in range(6)]
    mus = np.array([X[y == c].mean(0) for c in range(6)])
    if metric == "cosine":
        mus /= np.linalg.norm(mus, axis=1, keepdims=True)
    r = class_distances(X, y, metric=metric)
    np.testing.assert_allclose(r["intra_per_class"], intra, rtol=1e-7)
    assert r["pi_intra"] == pytest.approx(np.mean(intra), rel=1e-7, abs=0)
    assert r["pi_inter"] == pytest.approx(mean_pair(mus), rel=1e-6, abs=0)
    if metric == "cosine":
        U = V
        al = sum(2 * mean_pair(U[y == c]) * (40 * 39) for c in range(6)) / (6 * 40 * 39)
        assert alignment_uniformity(X, y)["alignment"] == pytest.approx(al, rel=1e-7, abs=0)


def test_cosine_pi_is_invariant_to_row_scaling():
    X, y = data(seed=2)
    scale = np.random.default_rng(0).uniform(0.1, 10, size=(len(X), 1))
    a, b = class_distances(X, y), class_distances(X * scale, y)
    assert a["pi_intra"] == pytest.approx(b["pi_intra"], rel=1e-12)
    # class means are of raw rows (as the reference), so π_inter changes with row scaling
    assert a["pi_ratio"] > 0


def test_inputs_are_not_modified_and_float32_is_exact():
    X, y = data()
    X0 = X.copy()
    class_distances(X, y)
    geometry_report(X, y)
    alignment_uniformity(X, y)
    np.testing.assert_array_equal(X, X0)
    X32 = X.astype(np.float32)
    ref = ref_pi(X32.astype(np.float64), y)
    assert class_distances(X32, y)["pi_intra"] == pytest.approx(ref[0], rel=1e-9)


def test_accumulate_over_many_blocks_matches_one_block():
    X, y = data(n=257, d=4)
    classes, inv = np.unique(y, return_inverse=True)
    a = _accumulate(X, inv, classes.size, with_gram=True, need_raw_spread=False, block_rows=10)
    b = _accumulate(X, inv, classes.size, with_gram=True, need_raw_spread=False, block_rows=10_000)
    for k in ("raw", "unit_ref", "unit_dev", "unit_dev2", "colsum", "G", "norms"):
        np.testing.assert_allclose(a[k], b[k], rtol=1e-12)
    np.testing.assert_allclose(a["G"], X.T @ X, rtol=1e-12)
    a = _accumulate(X, inv, classes.size, with_gram=False, need_unit=False, block_rows=10)
    b = _accumulate(X, inv, classes.size, with_gram=False, need_unit=False, block_rows=10_000)
    for k in ("raw_ref", "raw_dev", "raw_dev2"):
        np.testing.assert_allclose(a[k], b[k], rtol=1e-12)


def test_class_distance_errors():
    X, y = data()
    with pytest.raises(EmbedscopeError, match="two classes"):
        class_distances(X, np.zeros(len(X), int))
    with pytest.raises(EmbedscopeError, match="single sample"):
        class_distances(X[:4], [0, 1, 2, 3])
    Z = X.copy()
    Z[5] = 0
    with pytest.raises(EmbedscopeError, match="row 5"):
        class_distances(Z, y)
    Z = X.copy()
    Z[3, 1] = np.nan
    for f in (class_distances, alignment_uniformity, geometry_report):
        with pytest.raises(EmbedscopeError, match="row 3 of X contains NaN"):
            f(Z, y)
    with pytest.raises(EmbedscopeError, match="zero vector"):
        class_distances(np.array([[1.0, 0], [-1, 0], [0, 1], [0, 2]]), [0, 0, 1, 1])
    with pytest.raises(EmbedscopeError, match="metric"):
        class_distances(X, y, metric="euclidean")
    with pytest.raises(EmbedscopeError, match="labels"):
        class_distances(X, y[:-1])


# ----------------------------------------------------------------------------- alignment / uniformity
@pytest.mark.parametrize("t", [2.0, 0.5])
def test_alignment_uniformity_exact_matches_double_loop(t):
    X, y = data(n=70)
    r = alignment_uniformity(X, y, t=t)
    al, un = ref_alignment_uniformity(X, y, t)
    assert r["uniformity_exact"] and r["uniformity_pairs"] == 70 * 69 // 2
    assert r["alignment"] == pytest.approx(al, rel=1e-9)
    assert r["uniformity"] == pytest.approx(un, rel=1e-9)


def test_uniformity_sample_is_reproducible_and_close():
    X, y = data(n=600, d=8, seed=4)
    exact = alignment_uniformity(X, y)
    a = alignment_uniformity(X, y, max_pairs=20_000, seed=1)
    b = alignment_uniformity(X, y, max_pairs=20_000, seed=1)
    c = alignment_uniformity(X, y, max_pairs=20_000, seed=2)
    assert exact["uniformity_exact"] and not a["uniformity_exact"]
    assert a == b
    assert a["uniformity"] != c["uniformity"]
    assert a["uniformity"] == pytest.approx(exact["uniformity"], abs=0.02)
    assert a["alignment"] == exact["alignment"]  # alignment is always exact


def test_uniformity_of_identical_points_is_zero_and_spread_points_lower():
    X = np.ones((10, 3))
    y = np.repeat([0, 1], 5)
    assert alignment_uniformity(X, y)["uniformity"] == pytest.approx(0.0, abs=1e-12)
    rng = np.random.default_rng(0)
    assert alignment_uniformity(rng.standard_normal((300, 3)), rng.integers(0, 3, 300))["uniformity"] < -2


def test_alignment_uniformity_errors():
    X, y = data()
    with pytest.raises(EmbedscopeError, match="t must"):
        alignment_uniformity(X, y, t=0)
    with pytest.raises(EmbedscopeError, match="max_pairs"):
        alignment_uniformity(X, y, max_pairs=0)
    with pytest.raises(EmbedscopeError, match="no class"):
        alignment_uniformity(X[:3], [0, 1, 2])


# ----------------------------------------------------------------------------- report
@pytest.mark.parametrize("shape", [(3000, 12), (40, 60)])
def test_geometry_report_equals_the_standalone_functions(shape):
    rng = np.random.default_rng(5)
    n, d = shape
    y = rng.integers(0, 6, n)
    X = rng.standard_normal((6, d))[y] + rng.standard_normal((n, d)) * np.arange(1, d + 1) ** -0.5
    r = geometry_report(X, y, max_pairs=50_000, keep_spectrum=True)
    pis = class_distances(X, y)
    au = alignment_uniformity(X, y, max_pairs=50_000)
    assert r["rho"] == pytest.approx(spectral_decay(X), rel=1e-9)
    assert r["rho_all"] == pytest.approx(spectral_decay(X, exclude_top=0), rel=1e-9)
    assert r["effective_rank"] == pytest.approx(effective_rank(X), rel=1e-9)
    assert r["alpha"] == pytest.approx(alpha_req(X), rel=1e-9)
    for k in ("pi_intra", "pi_inter", "pi_ratio", "n_singleton", "n_classes"):
        assert r[k] == pytest.approx(pis[k], rel=1e-12)
    for k in ("alignment", "uniformity", "uniformity_pairs", "uniformity_exact"):
        assert r[k] == au[k]
    assert r["n"] == n and r["dim"] == d
    np.testing.assert_allclose(r["singular_values"], np.linalg.svd(X, compute_uv=False), rtol=1e-9)


def test_geometry_report_options_pass_through():
    X, y = data(n=200, d=10)
    r = geometry_report(X, y, exclude_top=2, n_components=9, k_min=2, k_max=8, metric="sqeuclidean")
    assert r["rho"] == pytest.approx(spectral_decay(X, exclude_top=2, n_components=9), rel=1e-9)
    assert r["alpha"] == pytest.approx(alpha_req(X, k_min=2, k_max=8), rel=1e-9)
    assert r["pi_intra"] == pytest.approx(class_distances(X, y, metric="sqeuclidean")["pi_intra"], rel=1e-12)


def test_geometry_report_on_ill_conditioned_data_uses_exact_route():
    rng = np.random.default_rng(6)
    n = 500
    y = rng.integers(0, 4, n)
    X = rng.standard_normal((n, 5)) * np.array([1.0, 1e-1, 1e-2, 1e-4, 1e-5]) + np.array([3.0, 0, 0, 0, 0])
    r = geometry_report(X, y)
    s = np.linalg.svd(X, compute_uv=False)[1:]
    p = s / s.sum()
    assert r["rho"] == pytest.approx(float(np.mean(np.log((1 / len(p)) / p))), rel=1e-9)
    lam = np.linalg.svd(X - X.mean(0), compute_uv=False) ** 2 / (n - 1)
    slope = np.polyfit(np.log(np.arange(1, 6)), np.log(lam), 1)[0]
    assert r["alpha"] == pytest.approx(-slope, rel=1e-9)
    assert alpha_req(X) == pytest.approx(-slope, rel=1e-9)
