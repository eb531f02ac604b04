"""Audit 43: the measures of embedscope/metrics against brute-force references written from the definitions
(docs/methods.md), on the edge cases a user meets. Only what the earlier tests miss is here."""

from __future__ import annotations

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.metrics.clustering import nmi, pairwise_f1


# ----------------------------------------------------------------------------- NMI / F1: bad labelings
@pytest.mark.parametrize("fn", [nmi, pairwise_f1])
@pytest.mark.parametrize("a, b, msg", [
    ([], [], "empty"),                                  # was a numpy ValueError (max of an empty array)
    ([None, None, 1], [0, 0, 1], "missing label"),      # was a TypeError ('<' between None and None)
    ([{}, {}], [0, 1], "class labels"),                 # was a TypeError
    ([np.nan, np.nan, 1.0], [0, 0, 1], "NaN"),          # was NMI 1.0: the NaNs read as one class
    ("abc", "abd", "1-D"),                              # was NMI 1.0: each text one sample
    ([[1, 2], [3, 4]], [1, 2, 3, 4], "1-D"),            # was flattened into four samples
])
def test_labelings_refused(fn, a, b, msg):
    with pytest.raises(EmbedscopeError, match=msg):
        fn(a, b)


def test_labelings_of_any_class_type_still_counted():
    """Texts, booleans and integral floats stay class labels (what check_labels reads), with the same values."""
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 4, 15), rng.integers(0, 3, 15)
    assert nmi(a.astype(str), b) == nmi(a, b) == nmi(a.astype(float), b)
    assert pairwise_f1(a, b.astype(str)) == pairwise_f1(a, b)
    assert nmi([True, False, True], [1, 0, 1]) == 1.0


# ----------------------------------------------------------------------------- Pearson r of saliency maps
def _exact_pearson(a, b) -> float:
    """r in exact rational arithmetic (then one rounding), from the definition."""
    from fractions import Fraction

    fa, fb = [Fraction(float(v)) for v in a], [Fraction(float(v)) for v in b]
    ma, mb = sum(fa) / len(fa), sum(fb) / len(fb)
    num = sum((x - ma) * (y - mb) for x, y in zip(fa, fb))
    saa = sum((x - ma) ** 2 for x in fa)
    sbb = sum((y - mb) ** 2 for y in fb)
    r2 = num * num / (saa * sbb)  # exact r², then the sign
    return float(np.sign(float(num)) * np.sqrt(float(r2)))


@pytest.mark.parametrize("offset", [0.0, 1e8, 1e12, 1e15, -1e15])
def test_pearson_of_maps_far_from_zero(offset):
    """A map that varies little about a large value: r as the formula gives it. One centring pass left the
    rounding of the mean (half an ulp of 1e15) in every deviation: r 0.1612 for 0.1839 at 1e15, 2e-8 off at 1e12."""
    from embedscope.metrics.agreement import pearson_per_image

    rng = np.random.default_rng(3)
    a = offset + rng.random((3, 30))
    b = rng.random((3, 30))
    got = pearson_per_image(a, b)
    want = [_exact_pearson(x, y) for x, y in zip(a, b)]
    assert got == pytest.approx(want, rel=1e-12, abs=1e-14)
    assert pearson_per_image(b, a) == pytest.approx(want, rel=1e-12, abs=1e-14)


# ----------------------------------------------------------------------------- centred spectra (α-ReQ, §2 centre=True)
def _exactly_centred(X: np.ndarray) -> np.ndarray:
    """X less its column means, each deviation computed exactly (rationals) and rounded once."""
    from fractions import Fraction

    out = np.empty_like(X, dtype=np.float64)
    for j in range(X.shape[1]):
        col = [Fraction(float(v)) for v in X[:, j]]
        m = sum(col) / len(col)
        out[:, j] = [float(v - m) for v in col]
    return out


@pytest.mark.parametrize("offset", [0.0, 1e9, 1e12, 1e14])
def test_centred_spectra_of_rows_far_from_zero(offset):
    """Rows 1e14 + noise of spread ~1 (an offset an unnormalised model can carry): the covariance
    eigenvalues, α-ReQ (alone and in geometry_report) and the centred class spectra are those of the exactly
    centred rows. One centring pass left the mean's rounding in every deviation: eigenvalues 2% off, α 0.006."""
    from embedscope.metrics.geometry import geometry_report
    from embedscope.metrics.spectral import alpha_req, class_conditioned_spectra, covariance_eigenvalues

    rng = np.random.default_rng(5)
    X = offset + rng.normal(size=(40, 6)) * np.array([3, 2, 1, 0.5, 0.3, 0.1])
    s = np.linalg.svd(_exactly_centred(X), compute_uv=False)
    lam = s ** 2 / 39
    assert covariance_eigenvalues(X) == pytest.approx(lam, rel=1e-12)
    k = np.arange(1, 7)
    alpha = -np.polyfit(np.log(k), np.log(lam), 1)[0]
    assert alpha_req(X) == pytest.approx(alpha, rel=1e-12)
    assert geometry_report(X, np.arange(40) % 3)["alpha"] == pytest.approx(alpha, rel=1e-12)
    y = np.arange(40) % 2
    per_class, _ = class_conditioned_spectra(X, y, center=True, normalize=False)
    for row, c in zip(per_class, (0, 1)):
        want = np.linalg.svd(_exactly_centred(X[y == c]), compute_uv=False)
        assert row[:6] == pytest.approx(want, rel=1e-12)


# ----------------------------------------------------------------------------- cosine π, alignment, uniformity
def _pi_brute(X: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """π_intra and π_inter of docs/methods.md §3 by plain loops (float64 rows of ordinary scale)."""
    def d(a, b):
        return 1.0 - a @ b / (np.linalg.norm(a) * np.linalg.norm(b))

    intra, mus = [], []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        if idx.size >= 2:
            intra.append(sum(d(X[i], X[j]) for i in idx for j in idx if i != j) / (idx.size ** 2 - idx.size))
        mus.append(X[idx].mean(axis=0))
    C = len(mus)
    inter = sum(d(mus[k], mus[m]) for k in range(C) for m in range(C) if k != m) / (C * C - C)
    return float(np.mean(intra)), inter


def _au_brute(X: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    same, every = [], []
    for i in range(len(X)):
        for j in range(len(X)):
            if i != j:
                d2 = float(np.sum((U[i] - U[j]) ** 2))
                every.append(np.exp(-2 * d2))
                if y[i] == y[j]:
                    same.append(d2)
    return float(np.mean(same)), float(np.log(np.mean(every)))


def test_cosine_measures_of_classes_far_apart_in_scale():
    """Classes at 2^1000 and 2^-1000 (and 1) in one X: the cosine measures do not depend on a class's (or, for
    alignment / uniformity, a row's) scale, so they are those of the classes brought to one scale. X was scaled
    by one power of two for its largest value, which underflowed the 2^-1000 rows to 0: "row 3 of X is all
    zeros" from class_distances and alignment_uniformity, and geometry_report called 4 of the 12 rows all zeros
    and reported π, alignment and uniformity as undefined."""
    from embedscope.metrics.geometry import alignment_uniformity, class_distances, geometry_report

    rng = np.random.default_rng(6)
    X0 = rng.normal(size=(12, 3))
    y = np.arange(12) % 3
    X = X0 * np.ldexp(1.0, np.array([1000, 0, -1000]))[y][:, None]  # (exact: each row times a power of two)
    pi_intra, pi_inter = _pi_brute(X0, y)
    alignment, uniformity = _au_brute(X0, y)
    got = class_distances(X, y)
    assert (got["pi_intra"], got["pi_inter"]) == pytest.approx((pi_intra, pi_inter), rel=1e-12)
    au = alignment_uniformity(X, y)
    assert (au["alignment"], au["uniformity"]) == pytest.approx((alignment, uniformity), rel=1e-12)
    rep = geometry_report(X, y)
    assert rep["undefined"] == {}
    assert [rep[k] for k in ("pi_intra", "pi_inter", "alignment", "uniformity")] == pytest.approx(
        [pi_intra, pi_inter, alignment, uniformity], rel=1e-12)
    # a class mean is that of its rows as given: one row 2^-1000 beside one at 1 points where the larger does
    X2 = np.array([[1.0, 0.0], [0.0, 2.0 ** -1000], [2.0 ** 1000, 0.0], [0.0, 2.0 ** 1000]])
    got = class_distances(X2, [0, 0, 1, 1])
    assert got["pi_inter"] == pytest.approx(1 - 2 ** -0.5, rel=1e-12)  # means along (1, 2^-1000) and (1, 1)


# ----------------------------------------------------------------------------- nearest same / other class (§10)
from test_audit28_measures import _nsd_brute  # noqa: E402 (docs/methods.md §10 literally, float64)


@pytest.mark.parametrize("metric", ["euclidean", "dot", "cosine"])
def test_nearest_same_different_of_values_float32_cannot_hold(metric):
    """Integers beyond 2^24 and float128 rows: the similarities are those of the rows as given. Every input but
    float64 was converted to float32 first, so 16777217 and 16777216 became one value (two distinct rows a
    duplicate: Euclidean s_diff 0 for -1) and float128 rows came back ~1e-9 relative off."""
    from embedscope.metrics.neighbours import nearest_same_different

    X = np.array([[16777217, 3], [16777216, 3], [-5, 2 ** 26 + 1], [7, 2 ** 26]], dtype=np.int64)
    y = [0, 1, 0, 1]
    got = nearest_same_different(X, y, metric=metric)
    want = _nsd_brute(X, y, metric)
    for g, w in zip(got, want):
        assert g == pytest.approx(w, rel=1e-15, abs=0)
    rng = np.random.default_rng(0)
    X2 = rng.normal(size=(30, 4)) * 100
    y2 = np.arange(30) % 3
    for g, w in zip(nearest_same_different(X2.astype(np.longdouble), y2, metric=metric), _nsd_brute(X2, y2, metric)):
        assert g == pytest.approx(w, rel=1e-14, abs=0)


# ----------------------------------------------------------------------------- compare_groups (§9)
def test_compare_groups_leaves_undefined_values_out():
    """A model whose NR-Prec is undefined (NaN) is left out of the test and counted; one NaN made U, p and its
    group's median NaN, with method 'exact' and the NaN model counted among the group's n."""
    from scipy.stats import mannwhitneyu

    from embedscope.metrics.properties import compare_groups

    vals = {"r1": {"p": 1.0}, "r2": {"p": 2.0}, "r3": {"p": float("nan")},
            "c1": {"p": 5.0}, "c2": {"p": 6.0}, "c3": {"p": 7.0}}
    groups = {m: "ranking" if m[0] == "r" else "classification" for m in vals}
    out = compare_groups(vals, groups)["p"]
    want = mannwhitneyu([5.0, 6.0, 7.0], [1.0, 2.0], alternative="two-sided", method="exact")
    assert (out["U"], out["p_value"], out["method"]) == (want.statistic, want.pvalue, "exact")
    assert (out["median_ranking"], out["n_ranking"], out["n_undefined_ranking"]) == (1.5, 2, 1)
    assert (out["median_classification"], out["n_classification"], out["n_undefined_classification"]) == (6.0, 3, 0)
    vals["r1"]["p"] = vals["r2"]["p"] = float("nan")  # a group without values: no test
    out = compare_groups(vals, groups)["p"]
    assert np.isnan(out["U"]) and np.isnan(out["p_value"]) and out["method"] is None
    assert (out["n_ranking"], out["n_undefined_ranking"]) == (0, 3)
