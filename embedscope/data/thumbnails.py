"""Pictures of stored rows, for figures: the 8 x 8 digits from memory, photos from a data set's root.

:func:`load_thumbnails` reads one list of paths; :func:`neighbour_pictures` the queries and the
retrievals of a :class:`~embedscope.analyses.neighbours.NeighbourExamples` (``embedscope neighbours``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from embedscope.errors import EmbedscopeError, UsageError


def load_thumbnails(paths: Sequence[str], *, dataset: str | None, root: str | None, size: int = 128) -> list[Any]:
    """Pictures for ``paths``: digits from ``embedscope.data.digits`` (8 x 8 arrays), photos from ``root``.

    A photo is returned as an RGB uint8 array, its longer side scaled to ``size`` pixels.
    """
    from embedscope.text import safe

    paths = list(paths)
    if dataset == "digits" or (paths and all(str(p).startswith("digits/") for p in paths)):
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
                raise EmbedscopeError(f"{safe(p)} is not a digits item id (digits/NNNN)") from None
        return out
    if not root:
        raise UsageError("the file does not record the images' folder: give --root DIR (the data set's root)")
    rootp = Path(root)
    if not rootp.is_dir():
        raise EmbedscopeError(f"--root {safe(root)}: not a folder")
    from PIL import Image

    out = []
    for p in paths:
        f = rootp / str(p)
        try:
            with Image.open(f) as im:
                im = im.convert("RGB")
                im.thumbnail((size, size))
                out.append(np.asarray(im))
        except (OSError, ValueError) as e:
            raise EmbedscopeError(f"cannot read image {safe(f)}: {safe(getattr(e, 'strerror', None) or e)}") from None
    return out


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
