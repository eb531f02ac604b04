"""Fixed-seed sub-sampling of rows, stratified by class (the t-SNE figures map at most N points)."""

from __future__ import annotations

from typing import Any

import numpy as np

from embedscope.errors import EmbedscopeError


def stratum_quotas(counts: Any, n: int) -> np.ndarray:
    """How many of ``n`` rows each stratum of ``counts`` rows keeps: Webster's (Sainte-Laguë)
    divisor method with one row per stratum first, applied one row at a time.

    Row ``k + 1`` of a stratum of ``c`` rows has priority ``c / d(k)``, ``d(0) = 0`` (every
    stratum keeps one row while ``n`` allows, the larger strata first), ``d(k) = k + 1/2``; the ``n``
    rows of highest priority are kept (ties: the larger stratum, then the stratum's order), at most
    ``c`` of a stratum. The quotas for ``n`` are a prefix of one fixed order of rows, so they are
    *house-monotone*: raising ``n`` by one raises one stratum's quota by one and lowers none (the
    largest-remainder rounding used before could lower one: the Alabama paradox).

    >>> stratum_quotas([50, 30, 20], 10).tolist()
    [5, 3, 2]
    """
    from embedscope.validation import check_int

    try:
        counts = np.asarray(counts, dtype=np.int64)
    except (TypeError, ValueError):
        raise EmbedscopeError(f"counts must be the strata's sizes (integers), got {type(counts).__name__}") from None
    if counts.ndim != 1 or np.any(counts < 0):
        raise EmbedscopeError("counts must be a 1-D list of the strata's sizes (integers >= 0)")
    n = check_int(n, "n (rows to keep)", min=0)
    n = int(min(n, int(counts.sum())))
    stratum = np.repeat(np.arange(len(counts)), counts)  # one entry per row: its stratum ...
    k = np.arange(len(stratum)) - np.repeat(np.cumsum(counts) - counts, counts)  # ... and its rank in it
    size = counts[stratum].astype(np.float64)
    with np.errstate(divide="ignore"):
        priority = np.where(k == 0, np.inf, size / (k + 0.5))
    order = np.lexsort((stratum, -size, -priority))  # highest priority first; ties: larger, then first
    return np.bincount(stratum[order[:n]], minlength=len(counts))


def stratified_subsample(labels: Any, n: int, seed: int = 0) -> np.ndarray:
    """Indices (sorted) of ``n`` rows drawn without replacement, stratified by ``labels``.

    Each class keeps its share of the rows (:func:`stratum_quotas`: Webster's divisor method, at
    least one row per class while ``n`` allows) and its rows are the first of one permutation of
    the class's rows drawn with ``numpy.random.default_rng(seed)`` (one permutation per class, in
    class order, whatever ``n``); all rows when ``n >= N``. A pure function of (labels, n, seed),
    and *nested*: the rows kept for ``n`` are among those kept for ``n + 1`` (same labels and seed).

    >>> stratified_subsample([0, 0, 0, 0, 1, 1], 3, seed=0).size
    3
    """
    from embedscope.validation import check_int

    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise EmbedscopeError(f"labels must be 1-D (one per row), got {type(labels).__name__} of shape {labels.shape}")
    N = labels.shape[0]
    n = check_int(n, "the number of points to keep")
    seed = check_int(seed, "seed", min=0)
    if n >= N:
        return np.arange(N)
    rng = np.random.default_rng(seed)
    try:
        _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    except TypeError:
        raise EmbedscopeError("labels must hold class labels of one type (integers or strings)") from None
    inverse = inverse.ravel()
    take = stratum_quotas(counts, n)
    by_stratum = np.split(np.argsort(inverse, kind="stable"), np.cumsum(counts)[:-1])  # each class's rows
    keep = [rng.permutation(rows)[:q] for rows, q in zip(by_stratum, take)]
    return np.sort(np.concatenate(keep))


__all__ = ["stratified_subsample", "stratum_quotas"]
