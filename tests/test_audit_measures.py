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
