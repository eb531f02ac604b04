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


def test_labelings_still_agree_with_sklearn():
    from sklearn.metrics import normalized_mutual_info_score

    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b = rng.integers(0, 4, 15), rng.integers(0, 3, 15)
        assert nmi(a, b) == pytest.approx(normalized_mutual_info_score(a, b), abs=1e-12)
        assert nmi(a.astype(str), b) == pytest.approx(nmi(a, b), abs=1e-15)  # (texts as classes)


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
