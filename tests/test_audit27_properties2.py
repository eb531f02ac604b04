"""NR-Prec (docs/methods.md §9) of a nearly collapsed model with more far rows than min(N / 64, 256): the
properties engine takes up to N / 4 of them apart (``knn.outlier_most``) where ``knn.window_pays`` shows
that the engine of all rows would fill its windows about the deepest R with float64 keys
(``properties.APART_WINDOW_RATIO``). The hits and every NR-Prec number: the float64 brute force of
tests/test_audit26_properties_outliers.py, and the engine with the outliers kept in, bit for bit, at and
around the thresholds (N / 64, N / 4) and the ratio."""

from __future__ import annotations

import numpy as np
import pytest
from test_audit26_properties_outliers import _brute_hits, _brute_keys, _brute_nr_prec, _codes_R, _collapsed, _properties, _same

from embedscope.metrics import properties as props_mod
from embedscope.metrics.search import knn

N = 704  # N / 64 = 11 outliers always apart; up to N / 4 = 176 where the windows pay


def _engines(monkeypatch) -> list:
    """Record every engine property_precision builds."""
    made = []
    real = props_mod._Engine

    class Spy(real):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    monkeypatch.setattr(props_mod, "_Engine", Spy)
    return made


def _check(X, at, metric, monkeypatch, max_r=None, apart=True) -> None:
    """property_precision's engine takes the outliers apart (``apart``) or not, and its hits, NR-Prec and
    every number are those of the brute force and of the engine with the outliers kept in, bit for bit."""
    props = _properties(N, at, seed=4)
    codes, R = _codes_R(props, N, max_r)
    made = _engines(monkeypatch)
    got = props_mod.property_precision(X, props, metric=metric, max_r=max_r)
    eng = made[-1]
    if apart:
        assert eng.apart is not None and set(eng.apart.out[2]) == set(at)
    else:
        assert eng.apart is None
    K = _brute_keys(X, metric)
    H = eng.hits(codes, R)
    np.testing.assert_array_equal(H, _brute_hits(K, codes, R))
    for name, values in props.items():
        assert got[name]["NR-Prec"] == pytest.approx(_brute_nr_prec(K, values, max_r), rel=1e-12, abs=1e-12)
    monkeypatch.setattr(knn, "OUTLIERS", False)
    together = props_mod._Engine(X, metric, cut=int(R.max()))
    assert together.apart is None
    np.testing.assert_array_equal(together.hits(codes, R), H)
    _same(props_mod.property_precision(X, props, metric=metric, max_r=max_r), got)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("n_out", [11, 12, 40, 176])
def test_more_outliers_apart_match_brute_force(metric, n_out, monkeypatch):
    """At N / 64 (always apart), just past it and up to N / 4 (apart: 0.1 away, every window full)."""
    X, at = _collapsed(N, 12, n_out, 0.1, seed=21 + n_out)
    _check(X, at, metric, monkeypatch, max_r=None if n_out != 40 else 300)


def test_past_n_over_64_needs_the_wider_search(monkeypatch):
    """The engine without a cut (the old limit, min(N / 64, 256)) finds no outliers among 12 of 704 rows;
    property_precision's (cut: the deepest R) takes them apart."""
    X, at = _collapsed(N, 12, 12, 0.1, seed=33)
    assert props_mod._Engine(X, "euclidean").apart is None
    eng = props_mod._Engine(X, "euclidean", cut=N - 2)
    assert eng.apart is not None and set(eng.apart.out[2]) == set(at)
    assert knn.outlier_most(N, N) == N // 4


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_more_than_n_over_4_none_apart(metric, monkeypatch):
    """177 far rows (past N / 4): none found, the one engine, the same numbers."""
    X, at = _collapsed(N, 12, 177, 0.1, seed=41)
    _check(X, at, metric, monkeypatch, apart=False)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_window_ratio_decides(metric, monkeypatch):
    """Past N / 64 the split is taken only where window_pays (with properties.APART_WINDOW_RATIO): a ratio
    above the measured windows keeps the one engine; within N / 64 the ratio is not asked. Both paths give
    the brute force's hits and the same numbers, bit for bit."""
    X, at = _collapsed(N, 12, 30, 0.1, seed=51)
    asked = []
    real = knn.window_pays
    monkeypatch.setattr(knn, "window_pays", lambda *a: asked.append(a[3:]) or real(*a))
    _check(X, at, metric, monkeypatch)
    assert asked and asked[0][0] == 30 and asked[0][2] == props_mod.APART_WINDOW_RATIO
    assert asked[0][1] == int(_codes_R(_properties(N, at, seed=4), N)[1].max())  # the cut: the deepest R
    monkeypatch.setattr(knn, "OUTLIERS", True)
    monkeypatch.setattr(props_mod, "APART_WINDOW_RATIO", 1e9)
    _check(X, at, metric, monkeypatch, apart=False)
    monkeypatch.setattr(knn, "OUTLIERS", True)
    X, at = _collapsed(N, 12, 11, 0.1, seed=52)
    _check(X, at, metric, monkeypatch)  # (within N / 64: apart whatever the ratio)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_outliers_just_far_enough(metric, monkeypatch):
    """Outliers just far enough to count (1e-3 from a point with 1e-5 noise: the windows of all rows stay
    narrow): the one engine at the measured ratio, the split where it is forced (ratio 0); both the brute
    force's hits and the same numbers, bit for bit."""
    X, at = _collapsed(N, 12, 20, 1e-3, seed=61)
    _check(X, at, metric, monkeypatch, apart=False)
    monkeypatch.setattr(knn, "OUTLIERS", True)
    monkeypatch.setattr(props_mod, "APART_WINDOW_RATIO", 0.0)
    _check(X, at, metric, monkeypatch)
