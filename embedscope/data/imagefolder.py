"""A generic image folder: one sub-folder per class, the first N classes (sorted) form the training split.

Layout::

    ROOT/
      class_a/  img1.jpg  img2.png  ...
      class_b/  ...

This module also holds the two checks that every photo loader shares: the zero-shot class split by
count (:func:`class_split`) and the existence check of every listed image (:func:`check_images_exist`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from embedscope.data.base import ImageDataset, check_images_exist, class_split, require_files  # noqa: F401
from embedscope.errors import EmbedscopeError

#: File name endings (case-insensitive) that count as images: torchvision's ImageFolder list plus .gif.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif")


def _image_files(folder: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in sorted(filenames):
            if not f.startswith(".") and f.lower().endswith(IMG_EXTENSIONS):
                out.append(Path(dirpath) / f)
    return out


def load_imagefolder(root, train_classes: int | None = None) -> ImageDataset:
    """One sub-folder per class under ``root`` as an :class:`ImageDataset`.

    Classes are the sub-folders in sorted name order (hidden folders are skipped); images are the
    files with an ending in :data:`IMG_EXTENSIONS`, searched recursively inside each class folder.
    Labels are the class indices 0..C-1 in that order. The first ``train_classes`` classes form the
    training split (default: the first half, rounded up) and the rest the test split, as in the
    zero-shot protocol of deep metric learning (Roth et al. 2020, §4.1). Paths are relative to ``root``.

    Parameters
    ----------
    root : str or path-like
        the folder of class sub-folders.
    train_classes : int, optional
        number of leading (sorted) classes in the training split (default: ceil(C / 2)).

    Returns
    -------
    ImageDataset
        paths relative to ``root``, global labels 0..C-1, class names, split "train"/"test".

    Raises
    ------
    EmbedscopeError
        One line naming the missing file or image, or the malformed line.

    Notes
    -----
    Zero-shot protocol of Roth et al. 2020 §4.1 and Musgrave et al. 2020; the results on these
    splits are in docs/methods.md §7 (reference numbers).
    """
    root = require_files(root, [], "imagefolder")
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    if not classes:
        raise EmbedscopeError(f"imagefolder: {root} holds no class sub-folders (expected ROOT/<class>/<image>)")
    paths: list[str] = []
    labels: list[int] = []
    for c, name in enumerate(classes):
        files = _image_files(root / name)
        if not files:
            raise EmbedscopeError(
                f"imagefolder: class folder {root / name} holds no image files ({', '.join(IMG_EXTENSIONS)})"
            )
        paths.extend(f.relative_to(root).as_posix() for f in files)
        labels.extend([c] * len(files))
    labels_arr = np.asarray(labels, dtype=np.int64)
    return ImageDataset(
        name="imagefolder",
        root=str(root),
        paths=np.asarray(paths, dtype=object),
        labels=labels_arr,
        class_names=np.asarray(classes, dtype=object),
        split=class_split(labels_arr, len(classes), train_classes, "imagefolder"),
        info={"source": "imagefolder", "num_classes": len(classes)},
    )
