"""The built-in data set: scikit-learn's 8x8 handwritten digits (1,797 images, no download).

DML convention: classes 0-4 train, 5-9 test (zero-shot: no test class is seen in training).
"""

from __future__ import annotations

import numpy as np

from embedscope.data.base import ImageDataset, class_split


def load_digits_dataset(root=None, train_classes: int | None = None) -> ImageDataset:
    """scikit-learn's digits as an :class:`ImageDataset` (images in memory, values 0..16). They come
    from no folder: a ``root`` is a usage error (it was ignored, even a folder that is not there)."""
    from sklearn.datasets import load_digits

    if root not in (None, ""):
        from embedscope.errors import UsageError

        raise UsageError("--root: the digits come from scikit-learn, not from a folder; leave --root out")

    d = load_digits()
    images = d.images.astype(np.float32)
    labels = d.target.astype(np.int64)
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
