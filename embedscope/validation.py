"""Input checks shared by every measure: one-line :class:`EmbedscopeError` messages."""

from __future__ import annotations

import numpy as np

from embedscope.errors import EmbedscopeError


def check_matrix(X, name: str = "X", *, min_rows: int = 1, dtype=None, check_finite: bool = True) -> np.ndarray:
    """Validate a 2-D numeric array (N x D) and return it.

    ``dtype`` given: the result is a C-contiguous array of that type. ``dtype=None``: floating
    arrays keep their type (no copy), integer arrays become float64. With ``check_finite`` a NaN or
    inf anywhere is an error that counts the bad rows.
    """
    try:
        A = np.asarray(X)
    except Exception as e:  # noqa: BLE001 - ragged lists, exotic objects
        raise EmbedscopeError(f"{name} could not be read as an array ({e.__class__.__name__})") from None
    if A.ndim != 2:
        raise EmbedscopeError(f"{name} must be a 2-D array (N x D), got shape {A.shape}")
    if not (np.issubdtype(A.dtype, np.floating) or np.issubdtype(A.dtype, np.integer)):
        raise EmbedscopeError(f"{name} must be numeric, got dtype {A.dtype}")
    if A.shape[0] < min_rows or A.shape[1] < 1:
        raise EmbedscopeError(f"{name} needs at least {min_rows} row(s) and 1 column, got shape {A.shape}")
    if dtype is not None:
        A = np.ascontiguousarray(A, dtype=dtype)
    elif not np.issubdtype(A.dtype, np.floating):
        A = A.astype(np.float64)
    if check_finite and not np.all(np.isfinite(A)):
        bad = int(np.count_nonzero(~np.all(np.isfinite(A), axis=1)))
        raise EmbedscopeError(f"{name}: {bad} row(s) contain NaN or inf")
    return A
