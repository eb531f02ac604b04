"""Data set loaders for the official layouts (and CARS196's Kaggle layout and split download), and the built-in digits.

``get_dataset(name, root)`` returns an :class:`ImageDataset` with paths, labels, class names and the
standard zero-shot split.
"""

from __future__ import annotations

import importlib

from embedscope._lazy import module_getattr
from embedscope.data.base import ImageDataset, TorchImages, describe_transform, image_transform
from embedscope.errors import EmbedscopeError

# name -> (module, function). Each function takes (root, train_classes=None).
LOADERS = {
    "digits": ("embedscope.data.digits", "load_digits_dataset"),
    "cub200": ("embedscope.data.cub", "load_cub200"),
    "cars196": ("embedscope.data.cars", "load_cars196"),
    "sop": ("embedscope.data.sop", "load_sop"),
    "imagefolder": ("embedscope.data.imagefolder", "load_imagefolder"),
    "shapes": ("embedscope.data.shapes", "load_shapes"),
}
ALIASES = {"cub": "cub200", "cub200-2011": "cub200", "cars": "cars196", "online_products": "sop"}
DATASETS = tuple(LOADERS)


def same_dataset(a: str, b: str) -> bool:
    """Whether two data set names (any case, or an alias such as ``cub``/``cub200``) name one data set."""
    return ALIASES.get(a.lower(), a.lower()) == ALIASES.get(b.lower(), b.lower())


def get_dataset(name: str, root=None, *, train_classes=None) -> ImageDataset:
    """Load a data set by name (``digits``, ``cub200``, ``cars196``, ``sop``, ``imagefolder``)."""
    if not isinstance(name, str):
        raise EmbedscopeError(f"the data set name must be a string (choose {', '.join(DATASETS)}), got {type(name).__name__}")
    key = ALIASES.get(name.lower(), name.lower())
    if key not in LOADERS:
        raise EmbedscopeError(f"unknown data set '{name}' (choose {', '.join(DATASETS)})")
    mod, fn = LOADERS[key]
    loader = getattr(importlib.import_module(mod), fn)
    return loader(root, train_classes=train_classes)


__all__ = ["ImageDataset", "TorchImages", "get_dataset", "same_dataset", "image_transform", "describe_transform", "DATASETS"]
__getattr__ = module_getattr(__name__)  # embedscope.data.shapes ... after a bare `import embedscope`
