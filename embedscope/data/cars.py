"""CARS196 (Krause et al. 2013) in its official layout, with the zero-shot split of DML.

Layout (``--root`` is the folder holding both)::

    ROOT/
      cars_annos.mat   struct array 'annotations' (relative_im_path, bbox_x1, bbox_y1, bbox_x2,
                       bbox_y2, class 1..196, test) and cell array 'class_names'
      car_ims/000001.jpg ... 016185.jpg

Split: classes 1-98 train, 99-196 test (Roth et al. 2020, §4.1); the official per-image ``test``
flag (a classification split) is ignored.

Image properties (docs/methods.md §9): ``make``, ``body_type`` and ``year`` parsed from the class names
("Aston Martin V8 Vantage Convertible 2012" -> Aston Martin / convertible / 2012; a name without a
body-type word gets "other"), and, when the annotations carry ``bbox_x1..bbox_y2``, ``bbox_area``
(box area / image area) and ``bbox_aspect`` (width / height), each as 5 quantile bins.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from embedscope.data.base import ImageDataset, check_images_exist, class_split, require_files
from embedscope.errors import EmbedscopeError

NAME = "cars196"
ANNOS = "cars_annos.mat"
FIELDS = ("relative_im_path", "class")


def _read_mat(path: Path) -> dict:
    from scipy.io import loadmat

    try:
        return loadmat(str(path), squeeze_me=True)
    except NotImplementedError:  # MATLAB v7.3 (HDF5) files
        raise EmbedscopeError(f"{NAME}: {path} is a MATLAB v7.3 file, not the official (v5) {ANNOS}") from None
    except Exception as e:  # noqa: BLE001 - any parse failure means it is not the official file
        raise EmbedscopeError(f"{NAME}: {path} is not a readable MATLAB file ({e.__class__.__name__})") from None


def _text(v) -> str:
    v = np.asarray(v)
    if v.dtype.kind in "US":
        return str(v.item() if v.ndim == 0 else "".join(v.ravel().astype(str)))
    return str(v.ravel()[0]) if v.size else ""


MULTI_WORD_MAKES = ("AM General", "Aston Martin", "Land Rover")
# checked in this order: "Drophead Coupe Convertible" is a convertible, "Cargo Van Minivan" a minivan
BODY_TYPES = (("Convertible", "convertible"), ("Coupe", "coupe"), ("Sedan", "sedan"), ("Hatchback", "hatchback"),
              ("SUV", "suv"), ("Wagon", "wagon"), ("Minivan", "minivan"), ("Van", "van"), ("Cab", "pickup"),
              ("Pickup", "pickup"))
BOX_FIELDS = ("bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2")


def parse_class_name(name: str) -> tuple[str, str, int]:
    """(make, body type, year) of a CARS196 class name; year -1 when the name ends in no year."""
    words = name.split()
    year = int(words[-1]) if words and words[-1].isdigit() and len(words[-1]) == 4 else -1
    make = next((m for m in MULTI_WORD_MAKES if name.startswith(m + " ")), words[0] if words else "")
    body = next((b for w, b in BODY_TYPES if w in words), "other")
    return make, body, year


def load_cars196(root, train_classes: int | None = None) -> ImageDataset:
    """CARS196 from ``cars_annos.mat`` and ``car_ims/`` as an :class:`ImageDataset`.

    Labels are ``class - 1`` (0..195); class names come from ``class_names`` in the ``.mat`` file.
    The first half of the classes (1-98 of 196) forms the training split and the rest the test
    split (Roth et al. 2020, §4.1; Musgrave et al. 2020), ignoring the official per-image ``test``
    flag; ``train_classes`` sets another count. Paths are relative to ``root``
    (``car_ims/000001.jpg``). Every listed image must exist: the first missing one is named.

    Parameters
    ----------
    root : str or path-like
        the folder with ``cars_annos.mat`` and ``car_ims/``.
    train_classes : int, optional
        number of leading classes in the training split (default 98 of 196: half).

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
    base = require_files(root, [ANNOS, "car_ims"], NAME)
    mat_path = base / ANNOS
    mat = _read_mat(mat_path)
    for key in ("annotations", "class_names"):
        if key not in mat:
            raise EmbedscopeError(f"{NAME}: {mat_path} has no variable '{key}' (not the official {ANNOS})")
    annos = np.atleast_1d(mat["annotations"])
    if annos.dtype.names is None:
        raise EmbedscopeError(f"{NAME}: {mat_path}: 'annotations' is not a struct array")
    for f in FIELDS:
        if f not in annos.dtype.names:
            raise EmbedscopeError(f"{NAME}: {mat_path}: 'annotations' lacks the field '{f}'")
    names = [_text(n) for n in np.atleast_1d(mat["class_names"])]
    n_classes = len(names)
    if n_classes == 0 or len(annos) == 0:
        raise EmbedscopeError(f"{NAME}: {mat_path} lists no {'classes' if n_classes == 0 else 'images'}")

    paths = []
    labels = np.empty(len(annos), dtype=np.int64)
    for k, a in enumerate(annos):
        p = _text(a["relative_im_path"]).strip()
        try:
            c = int(np.asarray(a["class"]).ravel()[0])
        except (ValueError, TypeError, IndexError):
            raise EmbedscopeError(f"{NAME}: {mat_path}: annotation {k + 1} has no integer class") from None
        if not p:
            raise EmbedscopeError(f"{NAME}: {mat_path}: annotation {k + 1} has an empty relative_im_path")
        if not 1 <= c <= n_classes:
            raise EmbedscopeError(
                f"{NAME}: {mat_path}: annotation {k + 1} ({p}) has class {c}, outside 1..{n_classes}"
            )
        paths.append(p)
        labels[k] = c - 1

    check_images_exist(base, paths, NAME)
    parsed = [parse_class_name(nm) for nm in names]
    props = {"make": np.array([parsed[c][0] for c in labels], dtype=object),
             "body_type": np.array([parsed[c][1] for c in labels], dtype=object),
             "year": np.array([parsed[c][2] for c in labels], dtype=np.int64)}
    if all(f in annos.dtype.names for f in BOX_FIELDS):
        from embedscope.data.properties import bbox_properties, image_sizes

        try:
            b = np.array([[float(np.asarray(a[f]).ravel()[0]) for f in BOX_FIELDS] for a in annos])
        except (ValueError, TypeError, IndexError):
            raise EmbedscopeError(f"{NAME}: {mat_path}: a bounding box field is not a number") from None
        wh = np.stack([b[:, 2] - b[:, 0] + 1, b[:, 3] - b[:, 1] + 1], 1)
        props.update(bbox_properties(wh, image_sizes(base, paths)))
    return ImageDataset(
        name=NAME,
        root=str(base),
        paths=np.asarray(paths, dtype=object),
        labels=labels,
        class_names=np.asarray(names, dtype=object),
        split=class_split(labels, n_classes, train_classes, NAME),
        properties=props,
        info={"source": f"CARS196 ({ANNOS})", "num_classes": n_classes},
    )
