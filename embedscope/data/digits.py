"""The built-in data set: scikit-learn's 8x8 handwritten digits (1,797 images, no download).

DML convention: classes 0-4 train, 5-9 test (zero-shot: no test class is seen in training).
"""

from __future__ import annotations

import numpy as np

from embedscope.data.base import ImageDataset, class_split


def load_digits_dataset(root=None, train_classes: int | None = None) -> ImageDataset:
    """scikit-learn's digits as an :class:`ImageDataset` (images in memory, values 0..16). They come
    from no folder: a ``root`` is a usage error (it was ignored, even a folder that is not there)."""
    if root not in (None, ""):
        from embedscope.errors import UsageError

        raise UsageError("--root: the digits come from scikit-learn, not from a folder; leave --root out")

    images, labels = _digits_arrays()
    split = class_split(labels, 10, 5 if train_classes is None else train_classes, "digits")
    return ImageDataset(
        name="digits",
        root=None,
        paths=np.array([f"digits/{i:04d}" for i in range(len(labels))]),
        labels=labels,
        class_names=np.array([str(c) for c in range(10)]),
        split=split,
        kind="digits",
        images=images,
        info={"source": "sklearn.datasets.load_digits"},
    )


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits (images (1797, 8, 8) float32, labels int64): read from the CSV that
    ``sklearn.datasets.load_digits`` reads, found without importing scikit-learn (1.1-1.5 s of every
    digits command's start-up), the same values; scikit-learn's own loader when that file moved."""
    import gzip
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("sklearn")
    where = list(spec.submodule_search_locations or []) if spec is not None else []
    csv = Path(where[0], "datasets", "data", "digits.csv.gz") if where else None
    if csv is not None and csv.is_file():
        with gzip.open(csv, "rt") as fh:
            data = np.loadtxt(fh, delimiter=",")
        if data.ndim == 2 and data.shape[1] == 65:
            return data[:, :-1].reshape(-1, 8, 8).astype(np.float32), data[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images.astype(np.float32), d.target.astype(np.int64)
