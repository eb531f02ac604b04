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


def pow2_rows_outside(x: np.ndarray, limit: int) -> np.ndarray:
    """``x`` with each row whose largest |value| lies outside [2^-limit, 2^limit] scaled as
    :func:`pow2_rows` does (exact: the direction, and so every cosine, unchanged); the other rows keep
    their bits (``x`` itself, not a copy, when no row is outside). For the cosine of rows normalised in
    the array's own precision, whose squares would otherwise under- or overflow row by row even where
    the array's overall scale is ordinary."""
    if x.size == 0:
        return x
    top = np.maximum(x.max(axis=1), -x.min(axis=1))  # (no |x| temporary of the whole array)
    odd = np.flatnonzero((top > 0) & ((top < 2.0 ** -limit) | (top > 2.0 ** limit)))
    if not odd.size:
        return x
    x = x.copy()
    x[odd] = pow2_rows(x[odd])
    return x


NORM_SAFE = (2.0 ** -480, 2.0 ** 480)  # float64 row norms outside: ‖x‖² may under- or overflow


def unit_rows(x64: np.ndarray, *, inplace: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(U, zero)``: the float64 rows of ``x64`` divided by their L2 norms sqrt(Σ x²), and the mask of
    all-zero rows (left zero). A row whose norm lies outside ``NORM_SAFE`` (its squares under- or
    overflow: values below ~1e-145 or above ~1e145) is first scaled by :func:`pow2_rows` (exact), so
    that it gets its true direction instead of zeros, NaN or a rounding of subnormals; the other rows'
    bits are those of ``x64 / sqrt(einsum('ij,ij->i', x64, x64))``. ``inplace``: ``x64`` is the
    caller's private copy and is divided in place."""
    nrm = np.sqrt(np.einsum("ij,ij->i", x64, x64))
    odd = np.flatnonzero(~((nrm > NORM_SAFE[0]) & (nrm < NORM_SAFE[1])))
    if odd.size:
        if not inplace:
            x64 = x64.copy()
            inplace = True
        x64[odd] = pow2_rows(x64[odd])
        nrm[odd] = np.sqrt(np.einsum("ij,ij->i", x64[odd], x64[odd]))
    zero = nrm == 0
    if zero.any():
        nrm[zero] = 1.0
    return np.divide(x64, nrm[:, None], out=x64 if inplace else None), zero
