"""Pictures of stored rows, for figures: the 8 x 8 digits from memory, photos from a data set's root.

:func:`load_thumbnails` reads one list of paths; :func:`neighbour_pictures` the queries and the
retrievals of a :class:`~embedscope.analyses.neighbours.NeighbourExamples` (``embedscope neighbours``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from embedscope.errors import EmbedscopeError, UsageError


def load_thumbnails(paths: Sequence[str], *, dataset: str | None, root: str | None, size: int = 128) -> list[Any]:
    """Pictures for ``paths``: digits from ``embedscope.data.digits`` (8 x 8 arrays), the generated
    ``shapes`` set from its cache (:func:`generated_shapes_key`; ``root`` may name that cache), photos
    from ``root``.

    A photo is returned as an RGB uint8 array, its longer side scaled to ``size`` pixels.
    """

    paths = list(paths)
    # a file that does not name its data set (an imported one) holds the digits when every path is a digits
    # item id: "digits/NNNN" exactly, not an image file of a class folder named "digits" ("digits/0.png")
    if dataset == "digits" or (paths and all(_DIGITS_ID.fullmatch(str(p)) for p in paths)):
        from embedscope.data.digits import load_digits_dataset

        images = load_digits_dataset().images
        out = []
        for p in paths:
            try:
                i = int(str(p).split("/", 1)[1])
                if i < 0:  # (images[-1] would be the last digit: a wrong picture, silently)
                    raise IndexError(i)
                out.append(images[i])
            except (IndexError, ValueError):
                raise EmbedscopeError(f"{p} is not a digits item id (digits/NNNN)") from None
        return out
    if paths and all(generated_shapes_key(p) is not None for p in paths):
        return [_thumbnail(im, size) for im in _generated_shapes_images(paths, root)]
    if not root and paths and all(Path(str(p)).is_absolute() for p in paths):
        root = Path(str(paths[0])).anchor  # absolute image paths: read where they point
    if not root:
        raise UsageError("the file does not record the images' folder: give --root DIR (the data set's root)")
    rootp = Path(root)
    if not rootp.is_dir():
        raise EmbedscopeError(f"--root {root}: not a folder")
    from embedscope.data.base import open_rgb

    out = []
    for p in paths:
        # as the data set reads it (16-bit grey scaled, not clipped; a corrupt file or a decompression bomb
        # a one-line error)
        im = open_rgb(rootp / str(p))
        im.thumbnail((size, size))
        out.append(np.asarray(im))
    return out


_DIGITS_ID = re.compile(r"digits/[0-9]+")


def read_from_folder(paths: Sequence[str], *, dataset: str | None) -> bool:
    """Whether :func:`load_thumbnails` reads ``paths`` from a folder (photos), not from memory (the
    digits) or from the generated shapes set's cache."""
    paths = list(paths)
    if dataset == "digits" or (paths and all(_DIGITS_ID.fullmatch(str(p)) for p in paths)):
        return False
    return not (paths and all(generated_shapes_key(p) is not None for p in paths))


def generated_shapes_key(path) -> str | None:
    """The cache key of a row of the generated ``shapes`` set (``shapes/<key>/NNNNNN``, no PNG behind
    it: the images live in the set's cache, :func:`embedscope.data.shapes.load_shapes`), else None."""
    parts = str(path).split("/")
    if len(parts) != 3 or parts[0] != "shapes" or not parts[2].isdecimal():
        return None
    m = _GENERATED_KEY.fullmatch(parts[1])
    return parts[1] if m else None


_GENERATED_KEY = re.compile(r"n(\d+)-s(\d+)-seed(\d+)-[0-9a-f]{8}")


def _generated_shapes_images(paths: Sequence[str], root: str | None) -> list[np.ndarray]:
    """The images of generated ``shapes`` rows, from the set's cache: the file's ``root`` (a cache
    folder given to embed with ``--root``) when it holds the set, else the default cache; a set not
    cached is rendered again (the same pixels: the renderer is seeded and versioned in the key)."""
    from embedscope.data import shapes

    out = []
    for p in paths:
        key = generated_shapes_key(p)
        n, size, seed = (int(x) for x in _GENERATED_KEY.fullmatch(key).groups())
        if shapes.generation_key(n, size, seed) != key:
            raise EmbedscopeError(f"{p}: a shapes image of another renderer version (this one draws "
                                  f"{shapes.generation_key(n, size, seed)})")
        images = _shapes_cache(n, size, seed, root)
        i = int(str(p).rsplit("/", 1)[1])
        if i >= n:
            raise EmbedscopeError(f"{p} is not an item of the generated shapes set ({n} images)")
        out.append(images[i])
    return out


def _shapes_cache(n: int, size: int, seed: int, root: str | None) -> np.ndarray:
    from embedscope.data import shapes

    key = (n, size, seed, root)
    if key not in _SHAPES_IMAGES:
        cache = (Path(root) if root and (Path(root) / shapes.generation_key(n, size, seed) / "shapes.npz").is_file()
                 else None)
        _SHAPES_IMAGES.clear()  # one set held at a time (4,800 images of 64 px: 59 MB)
        _SHAPES_IMAGES[key] = shapes.load_shapes(cache, n=n, size=size, seed=seed, progress=False).images
    return _SHAPES_IMAGES[key]


_SHAPES_IMAGES: dict = {}


def _thumbnail(image: np.ndarray, size: int) -> np.ndarray:
    """An RGB uint8 array, its longer side scaled to ``size`` pixels (as a photo's)."""
    from PIL import Image

    im = Image.fromarray(np.asarray(image, dtype=np.uint8)).convert("RGB")
    im.thumbnail((size, size))
    return np.asarray(im)


def neighbour_pictures(ex, *, dataset: str | None, root: str | None, progress: bool = False) -> tuple[list, list]:
    """The thumbnails of ``ex``'s queries and of each query's retrievals (:func:`load_thumbnails`):
    ``(query pictures, [retrieval pictures per query])``. Photos are read query by query, with a
    progress bar when ``progress``; the digits (no ``root``) are drawn from memory at once."""
    from embedscope.progress import progress_bar

    n, k = len(ex.query_paths), (len(ex.ref_paths[0]) if len(ex.ref_paths) else 0)
    if root is None:
        pics = load_thumbnails(list(ex.query_paths) + [p for row in ex.ref_paths for p in row], dataset=dataset,
                               root=root)
        return pics[:n], [pics[n + r * k: n + (r + 1) * k] for r in range(n)]
    qimgs, rimgs = [], []
    with progress_bar(total=n, desc="pictures", unit="query", enabled=progress) as bar:
        for r in range(n):
            pics = load_thumbnails([ex.query_paths[r], *ex.ref_paths[r]], dataset=dataset, root=root)
            qimgs.append(pics[0])
            rimgs.append(pics[1:])
            bar.update(1)
    return qimgs, rimgs
