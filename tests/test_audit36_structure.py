"""Audit 36 (a helper's brute-force audit of the structure measures): the spectrum's shares s / Σs of
singular values near the float64 limit, and a row with inf refused before any arithmetic warns."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from embedscope.analyses.structure import spectrum
from embedscope.errors import EmbedscopeError
from embedscope.metrics.geometry import geometry_report
from embedscope.store import EmbeddingSet


@pytest.mark.parametrize("exp", [0, 1019, 1020])
def test_spectrum_shares_at_any_scale(exp):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(70, 8))
    y = np.arange(70) % 5
    s = np.linalg.svd(X, compute_uv=False)
    es = EmbeddingSet.from_arrays(np.ldexp(X, exp), y, split="train")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (Σs overflowed: a RuntimeWarning and shares of 0)
        r = spectrum([es], names=["m"])[0]
    np.testing.assert_allclose(r.arrays["normalised"], s / s.sum(), rtol=1e-12)


def test_a_row_with_inf_is_refused_without_a_warning():
    X = np.random.default_rng(1).normal(size=(8, 3))
    X[5] = [np.inf, 0, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(EmbedscopeError, match="row 5 of X contains NaN or inf"):
            geometry_report(X, np.arange(8) % 2)
