"""Session 37, differential fuzzing of the measures against independent references: the cases it found
(each test fails on the code before its fix)."""

from __future__ import annotations

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError

# rows of ~1e-170 beside rows of ~1: the small rows' squared differences (~1e-340) underflow and tie
TINY_BESIDE_ONE = np.array([[2e-170], [4e-170], [1e-169], [1.0], [1.1]])


def test_euclidean_span_refused_also_when_the_largest_row_needs_no_scaling():
    """The span check ran only when the largest norm lay outside 2^±32: here P@1 came out 0.5 where the
    exact ranking gives 0.75 (query 2's nearest is row 1 at 6e-170, not row 0 at 8e-170)."""
    from embedscope.metrics import retrieval_metrics

    y = np.array([0, 1, 1, 2, 2])
    with pytest.raises(EmbedscopeError, match="scales span"):
        retrieval_metrics(TINY_BESIDE_ONE, y, metric="euclidean", include=["P@1"])
    # a span within the limit (2^332) is ranked: the small rows' squared differences (1e-200) are normal
    ok = retrieval_metrics(np.array([[1e-100], [2e-100], [4e-100], [1.0], [1.1]]), y, metric="euclidean",
                           include=["P@1"])
    assert ok["P@1"] == 0.75  # (query 0 has no class mate; query 1's nearest is row 0, of another class)


def test_scatter_span_refused_also_unscaled():
    from embedscope.metrics.neighbours import nearest_same_different

    y = np.array([0, 1, 1, 2, 2])
    for metric in ("euclidean", "dot"):
        with pytest.raises(EmbedscopeError, match="scales span"):
            nearest_same_different(TINY_BESIDE_ONE, y, metric=metric)


def test_cosine_class_mean_zero_within_rounding_is_undefined():
    """0.1 + 0.2 − 0.1 − 0.2 is exactly 0 but 2.8e-17 in float64: that noise was the class mean's
    direction, π_inter = 0 and π_ratio = inf came out with no error."""
    from fractions import Fraction

    from embedscope.metrics import class_distances, geometry_report
    from embedscope.metrics.spectral import UndefinedMeasure

    X = np.array([[0.1], [0.2], [-0.1], [-0.2], [1.0], [2.0]])
    y = np.array([0, 0, 0, 0, 1, 1])
    assert sum(Fraction(v) for v in X[:4, 0]) == 0 and X[:4, 0].sum() != 0
    with pytest.raises(UndefinedMeasure, match="zero vector within rounding"):
        class_distances(X, y)
    g = geometry_report(X, y)
    assert np.isnan(g["pi_inter"]) and np.isnan(g["pi_ratio"])
    assert "zero vector within rounding" in g["undefined"]["pi_inter"]
    assert np.isfinite(g["pi_intra"])
    # a class of equal rows keeps its exact direction; well-separated means are unaffected
    X2 = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 2.0]])
    assert class_distances(X2, [0, 0, 1, 1])["pi_inter"] == pytest.approx(1.0)


def test_fisher_z_clip_of_one_refused():
    from embedscope.metrics.agreement import fisher_z_mean

    with pytest.raises(EmbedscopeError, match="clip must be < 1"):
        fisher_z_mean([0.5, 1.0], clip=1)


@pytest.mark.parametrize("shape", [(0, 4, 4), (3, 4, 0)])
def test_agreement_of_no_maps_or_no_pixels_is_one_line(shape):
    from embedscope.metrics.agreement import agreement_matrix, agreement_matrix_streamed, map_agreement

    a = np.zeros(shape)
    with pytest.raises(EmbedscopeError, match="no maps to compare|maps of no pixel"):
        map_agreement(a, a)
    with pytest.raises(EmbedscopeError, match="no maps to compare|maps of no pixel"):
        agreement_matrix([a, a])
    with pytest.raises(EmbedscopeError, match="no maps to compare|maps of no pixel"):
        agreement_matrix_streamed(lambda s, e: [a[s:e], a[s:e]], shape[0], 2, block=2)
