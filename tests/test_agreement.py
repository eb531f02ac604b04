"""Saliency-map agreement (embedscope.metrics.agreement; docs/methods.md §8) against scipy and by hand."""

import math

import numpy as np
import pytest
from scipy import stats
from scipy.spatial.distance import jensenshannon

from embedscope.errors import EmbedscopeError
from embedscope.metrics import agreement_matrix, fisher_z_mean, jsd_per_image, map_agreement, pearson_per_image


def _maps(seed, n=9, h=6, w=5):
    return np.random.default_rng(seed).random((n, h, w))


def test_pearson_matches_scipy_and_constant_maps_are_nan():
    a, b = _maps(0), _maps(1)
    b[2] = 0.3 * a[2] + 0.7 * b[2]
    a[4] = 0.5  # constant map
    r = pearson_per_image(a, b)
    for i in range(len(a)):
        if i == 4:
            assert np.isnan(r[i])
        else:
            assert r[i] == pytest.approx(stats.pearsonr(a[i].ravel(), b[i].ravel())[0], abs=1e-12)
    res = map_agreement(a, b)
    assert res["n_undefined_r"] == 1 and res["n_valid_r"] == len(a) - 1
    z = np.arctanh(np.delete(r, 4))
    assert res["r_mean"] == pytest.approx(math.tanh(z.mean()), abs=1e-12)
    assert res["r_spread"] == pytest.approx(math.tanh(np.std(z)), abs=1e-12)  # population std


def test_jsd_matches_scipy_in_nats_and_bits():
    a, b = _maps(2), _maps(3)
    nats = jsd_per_image(a, b, base="e")
    bits = jsd_per_image(a, b)  # default: bits (the paper)
    for i in range(len(a)):
        p, q = a[i].ravel(), b[i].ravel()
        assert nats[i] == pytest.approx(jensenshannon(p / p.sum(), q / q.sum()) ** 2, rel=1e-9)  # the reference code
        assert bits[i] == pytest.approx(jensenshannon(p, q, base=2) ** 2, rel=1e-9)
    assert np.allclose(bits, nats / math.log(2))


def test_jsd_bounds_with_disjoint_supports_and_zero_maps():
    a = np.zeros((3, 4, 4))
    b = np.zeros((3, 4, 4))
    a[:, :2] = 1.0
    b[:, 2:] = 0.5
    assert np.allclose(jsd_per_image(a, b), 1.0)  # bits: at most 1
    assert np.allclose(jsd_per_image(a, b, base="nats"), math.log(2))  # nats: at most ln 2
    x, y = _maps(4), _maps(5)
    assert np.all(jsd_per_image(x, y) <= 1.0) and np.all(jsd_per_image(x, y) >= 0)
    assert np.allclose(jsd_per_image(x, x), 0.0, atol=1e-15)
    b[1] = 0.0  # sums to zero: JSD undefined, counted
    res = map_agreement(a, b)
    assert np.isnan(res["jsd"][1]) and res["n_undefined_jsd"] == 1
    assert res["jsd_mean"] == pytest.approx(1.0)


def test_perfect_correlation_does_not_turn_the_mean_into_nan():
    # r = +1 and r = -1: artanh = ±inf would give inf - inf = NaN; we clip |r| at 1 - 1e-7
    out = fisher_z_mean([1.0, -1.0])
    assert out["mean"] == pytest.approx(0.0, abs=1e-12) and out["n_clipped"] == 2
    out = fisher_z_mean([1.0, 0.5, np.nan])
    zc = np.arctanh(1 - 1e-7)
    assert out["mean"] == pytest.approx(math.tanh((zc + np.arctanh(0.5)) / 2), abs=1e-12)
    assert out["n"] == 2 and out["n_undefined"] == 1 and np.isfinite(out["spread"])
    a = _maps(6)
    res = map_agreement(a, 2 * a + 1)  # identical up to scale: r = 1 on every image
    assert res["r_mean"] == pytest.approx(1.0, abs=1e-6) and res["n_clipped_r"] == len(a)
    assert np.isnan(fisher_z_mean([np.nan])["mean"])


def test_agreement_matrix_and_family_block_means():
    base = _maps(7, n=12)
    maps = [base + 0.2 * _maps(10 + k, n=12) for k in range(4)]
    fams = ["ranking", "ranking", "classification", "untrained"]
    res = agreement_matrix(maps, names=list("abcd"), families=fams)
    assert np.allclose(res["r_mean"], res["r_mean"].T) and np.all(np.diag(res["r_mean"]) == 1)
    for i in range(4):
        for j in range(i + 1, 4):
            assert res["r_mean"][i, j] == pytest.approx(map_agreement(maps[i], maps[j])["r_mean"])
            assert res["jsd_mean"][i, j] == pytest.approx(map_agreement(maps[i], maps[j])["jsd_mean"])
    blocks = {(b["family_a"], b["family_b"]): b for b in res["blocks"]}
    assert blocks[("ranking", "ranking")]["r_mean"] == pytest.approx(res["r_mean"][0, 1])
    assert blocks[("ranking", "classification")]["n_pairs"] == 2
    assert blocks[("ranking", "classification")]["r_mean"] == pytest.approx(
        (res["r_mean"][0, 2] + res["r_mean"][1, 2]) / 2)
    assert blocks[("classification", "untrained")]["jsd_mean"] == pytest.approx(res["jsd_mean"][2, 3])
    assert ("classification", "classification") not in blocks  # one model: no pair


def test_bad_inputs_are_one_line_errors():
    with pytest.raises(EmbedscopeError, match="mismatched number of maps: 9 vs 8"):
        map_agreement(_maps(0), _maps(1, n=8))
    with pytest.raises(EmbedscopeError, match="different sizes"):
        map_agreement(_maps(0), _maps(1, h=5))
    with pytest.raises(EmbedscopeError, match="non-negative"):
        jsd_per_image(_maps(0) - 1, _maps(1))
    with pytest.raises(EmbedscopeError, match="at least two"):
        agreement_matrix([_maps(0)])
    with pytest.raises(EmbedscopeError, match="mismatched number of maps"):
        agreement_matrix([_maps(0), _maps(1, n=4)], names=["x", "y"])
    with pytest.raises(EmbedscopeError, match="JSD log base"):
        jsd_per_image(_maps(0), _maps(1), base=1)
