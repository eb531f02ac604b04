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


UNIT_CHUNK_BYTES = 1 << 20  # rows normalised a chunk of about this many bytes at a time (cache-resident)


def unit_rows(x64: np.ndarray, *, inplace: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(U, zero)``: the float64 rows of ``x64`` scaled to unit L2 norm, and the mask of all-zero rows
    (left zero).

    Each row is first divided by its largest |value| (so that its largest entry is exactly ±1), then by
    the norm of that: ``y = x / max|x|``, ``U = y / sqrt(Σ y²)``. Two steps, so that rows pointing in
    exactly the same direction get the **same unit row, bit for bit**: for x' = c·x with c > 0 each
    quotient x'_i / max|x'| is the same real number as x_i / max|x| and so rounds the same, where one
    division by the norm (x / ‖x‖) rounds the two rows' norms differently, and their cosines with
    every other row then differ in the last bit — a tie of equal cosines broken by rounding instead of
    by the lower index (docs/methods.md §1). No square under- or overflows either, whatever the row's
    scale (Σ y² lies in [1, D]): rows of values near 1e-300 or 1e300 get their true direction."""
    if not inplace:
        x64 = np.array(x64, dtype=np.float64, copy=True)
    n, d = x64.shape
    zero = np.zeros(n, dtype=bool)
    if n == 0 or d == 0:
        zero[:] = True
        return x64, zero
    step = max(1, UNIT_CHUNK_BYTES // (8 * d))
    for s in range(0, n, step):
        x = x64[s:s + step]
        top = np.maximum(x.max(axis=1), -x.min(axis=1))
        z = top == 0
        if z.any():
            zero[s:s + step] = z
            top[z] = 1.0
        np.divide(x, top[:, None], out=x)
        nrm = np.sqrt(np.einsum("ij,ij->i", x, x))
        if z.any():
            nrm[z] = 1.0
        np.divide(x, nrm[:, None], out=x)
    return x64, zero
