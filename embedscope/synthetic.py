"""Synthetic embeddings with a known class structure, shared by the tests, benchmarks and docs.

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
