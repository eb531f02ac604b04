"""Synthetic embeddings with a known structure (classes: :func:`clustered`; a model collapsed to nearly
one point with a few far rows: :func:`nearly_collapsed`), shared by the tests, benchmarks and docs.

Not a measure and not a data set: a reproducible stand-in for "a model's embeddings" when a test
or a benchmark needs one of a given size, difficulty and class-size profile.
"""

from __future__ import annotations

import numpy as np


def class_sizes(n_classes: int, *, low: int, high: int, seed: int = 0) -> np.ndarray:
    """``n_classes`` sizes drawn uniformly from [low, high] (SOP: 2-12; CUB/CARS: ~60-80)."""
    rng = np.random.default_rng(seed)
    return rng.integers(low, high + 1, size=n_classes)


def clustered(n: int | None = None, d: int = 32, n_classes: int = 10, *, sizes=None, noise: float = 1.0,
              normalize: bool = True, seed: int = 0, dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Embeddings around one random centre per class -> ``(X [N, d], y [N])``.

    Class centres are standard normal in ``d`` dimensions; each point is its centre plus
    ``noise`` × standard normal / sqrt(d) × sqrt(d) (so ``noise`` ≈ 1 gives overlapping, realistic
    classes and ``noise`` ≫ 1 a nearly random embedding). ``sizes`` (per class) or ``n`` (split as
    evenly as possible). Rows are L2-normalised when ``normalize``. Rows are ordered by class.
    """
    rng = np.random.default_rng(seed)
    if sizes is None:
        if n is None:
            raise ValueError("give n or sizes")
        sizes = np.full(n_classes, n // n_classes)
        sizes[: n % n_classes] += 1
    sizes = np.asarray(sizes, dtype=np.int64)
    centres = rng.standard_normal((len(sizes), d))
    y = np.repeat(np.arange(len(sizes)), sizes)
    X = centres[y] + noise * rng.standard_normal((y.size, d))
    if normalize:
        X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(dtype), y


def embedding_set(n: int = 200, d: int = 16, n_classes: int = 10, *, train_classes: int | None = None,
                  noise: float = 1.0, seed: int = 0, normalize: bool = True):
    """An :class:`~embedscope.store.EmbeddingSet` of :func:`clustered` points with the zero-shot split:
    the first ``train_classes`` classes (default half) are ``train``, the rest ``test``."""
    from embedscope.store import EmbeddingSet

    X, y = clustered(n, d, n_classes, noise=noise, seed=seed, normalize=normalize)
    t = n_classes // 2 if train_classes is None else train_classes
    split = np.where(y < t, "train", "test")
    return EmbeddingSet(embeddings=X, labels=y, paths=np.array([f"img/{i:05d}.jpg" for i in range(y.size)]),
                        split=split, class_names=np.array([f"class{c}" for c in range(n_classes)]),
                        attrs={"dataset": "synthetic"})


def nearly_collapsed(n: int, d: int = 16, n_out: int = 0, far: float = 0.1, *, noise: float = 1e-5, seed: int = 0,
                     sort: bool = True, copies=(), mirrors=(), bulk_copies=(),
                     dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """A model collapsed to nearly one point, with ``n_out`` rows far from it -> ``(X [n, d], at [n_out])``.

    The point ``p`` is a random unit vector; every row is ``p`` plus ``noise`` × standard normal per
    coordinate, and the ``n_out`` rows ``at`` (drawn without replacement; ascending when ``sort``,
    else in the drawn order: the k-th direction goes to ``at[k]``) are moved to ``p + far · u`` with
    ``u`` a random unit direction (the "outliers" of a centred search, docs/methods.md §1). Ties,
    made in float64 in this order, before the cast to ``dtype``; each a sequence of pairs ``(i, j)``
    applied one after the other:

    * ``copies``: positions in ``at``; row ``at[i]`` becomes a copy of row ``at[j]`` (equal rows: their
      keys tie for every query);
    * ``mirrors``: positions in ``at``; row ``at[i]`` becomes ``2 p - X[at[j]]``, the mirror image of
      row ``at[j]`` through ``p`` (ties under the queries equally far from both, such as ``p``);
    * ``bulk_copies``: positions among the other rows (the rows not in ``at``, ascending); the ``i``-th
      of them becomes a copy of the ``j``-th.

    The same ``seed`` and arguments give the same rows bit for bit (the tests' thresholds rest on them).
    """
    rng = np.random.default_rng(seed)
    p = rng.standard_normal(d)
    p /= np.linalg.norm(p)
    X = p + noise * rng.standard_normal((n, d))
    at = rng.choice(n, n_out, replace=False)
    if sort:
        at = np.sort(at)
    v = rng.standard_normal((n_out, d))
    X[at] = p + far * v / np.linalg.norm(v, axis=1, keepdims=True)
    for i, j in copies:
        X[at[i]] = X[at[j]]
    for i, j in mirrors:
        X[at[i]] = 2 * p - X[at[j]]
    if len(bulk_copies):
        bulk = np.setdiff1d(np.arange(n), at)
        for i, j in bulk_copies:
            X[bulk[i]] = X[bulk[j]]
    return X.astype(dtype), at
