"""Fixed-seed sub-sampling of rows, stratified by class (the t-SNE figures map at most N points)."""

from __future__ import annotations

from typing import Any

import numpy as np

from embedscope.errors import EmbedscopeError


def stratified_subsample(labels: Any, n: int, seed: int = 0) -> np.ndarray:
    """Indices (sorted) of ``n`` rows drawn without replacement, stratified by ``labels``.

    Each class keeps its share of the rows (largest-remainder rounding, at least one row per class
    while ``n`` allows), drawn with ``numpy.random.default_rng(seed)``; all rows when ``n >= N``.
    A pure function of (labels, n, seed): the same call gives the same rows.

    >>> stratified_subsample([0, 0, 0, 0, 1, 1], 3, seed=0).size
    3
    """
    labels = np.asarray(labels)
    N = labels.shape[0]
    if n >= N:
        return np.arange(N)
    if n <= 0:
        raise EmbedscopeError(f"the number of points to keep must be positive, got {n}")
    rng = np.random.default_rng(seed)
    classes, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    quota = counts * (n / N)
    take = np.floor(quota).astype(int)
    if n >= len(classes):
        take = np.maximum(take, 1)
    take = np.minimum(take, counts)
    # largest remainder (ties: larger class first, then class order) until the total is n
    while take.sum() != n:
        if take.sum() < n:
            room = np.where(take < counts)[0]
            rem = (quota - take)[room]
            take[room[np.lexsort((-counts[room], -rem))[0]]] += 1
        else:
            over = np.where(take > 1)[0] if n >= len(classes) else np.where(take > 0)[0]
            rem = (take - quota)[over]
            take[over[np.lexsort((counts[over], -rem))[0]]] -= 1
    keep = []
    for c in range(len(classes)):
        rows = np.flatnonzero(inverse == c)
        keep.append(rng.choice(rows, size=take[c], replace=False))
    return np.sort(np.concatenate(keep))


__all__ = ["stratified_subsample"]
