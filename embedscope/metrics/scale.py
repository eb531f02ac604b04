"""Exact rescaling by powers of two, so that squares and products of extreme values neither overflow
nor lose digits to subnormals. Multiplying by 2^k changes no significand: every ratio, ranking and
correlation of the scaled values is that of the values given (results scaled back where needed)."""

from __future__ import annotations

import numpy as np


def pow2_shift(X, limit: int) -> int:
    """The exponent e with max|X| in [2^(e-1), 2^e) when max|X| lies outside [2^-limit, 2^limit],
    else 0 (also for an empty or all-zero X, or when X holds NaN or inf: checked elsewhere).
    ``ldexp(X, -e)`` is then exact and its largest |value| lies in [0.5, 1)."""
    X = np.asarray(X)
    if X.size == 0:
        return 0
    with np.errstate(invalid="ignore"):
        top = max(abs(float(X.max())), abs(float(X.min())))
    if not np.isfinite(top) or top == 0 or 2.0 ** -limit <= top <= 2.0 ** limit:
        return 0
    return int(np.frexp(top)[1])


def pow2_rows(x: np.ndarray) -> np.ndarray:
    """Each row of ``x`` times the power of two that brings its largest |value| into [0.5, 1)
    (all-zero rows, and rows already there, keep their bits)."""
    top = np.max(np.abs(x), axis=1) if x.shape[1] else np.zeros(x.shape[0])
    e = np.frexp(np.where(top > 0, top, 1.0))[1]
    return np.ldexp(x, -e[:, None]) if np.any(e) else x
