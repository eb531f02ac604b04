"""CARS196 (Krause et al. 2013) in its official layout, the Kaggle one or the split download, with the zero-shot split of DML.

Official layout (``--root`` is the folder holding both)::

    ROOT/
      cars_annos.mat   struct array 'annotations' (relative_im_path, bbox_x1, bbox_y1, bbox_x2,
                       bbox_y2, class 1..196, test) and cell array 'class_names'
      car_ims/000001.jpg ... 016185.jpg

Kaggle layout ("stanford-car-dataset-by-classes-folder", the one pytorch-metric-learning's ``Cars196``
downloads and reads; ``--root`` is the folder holding ``names.csv``), recognised by ``names.csv``
when there is no ``cars_annos.mat``::

    ROOT/
      names.csv        one class name a line, line k = class k ('AM General Hummer SUV 2000')
      anno_train.csv   "<file>,<x1>,<y1>,<x2>,<y2>,<class 1..196>", no header (8,144 lines)
      anno_test.csv    same columns (8,041 lines)
      car_data/car_data/train/<class name, '/' as '-'>/00001.jpg ...
      car_data/car_data/test/<class name, '/' as '-'>/00001.jpg ...

Split download (the layout torchvision's ``StanfordCars`` reads; ``--root`` is the folder holding
``devkit/``, or its parent holding ``stanford_cars/``), recognised by ``devkit/cars_meta.mat``::

    ROOT/
      devkit/cars_meta.mat              cell array 'class_names'
      devkit/cars_train_annos.mat       struct array 'annotations' (bbox_x1..bbox_y2, class, fname)
      cars_test_annos_withlabels.mat    the same for the test images (also read from devkit/)
      cars_train/00001.jpg ... 08144.jpg
      cars_test/00001.jpg ... 08041.jpg

All three give the same 196 classes (labels ``class - 1``), names and split; the Kaggle layout's rows
are the ``anno_train.csv`` rows then the ``anno_test.csv`` rows, as pytorch-metric-learning orders
them, and its paths are ``car_data/car_data/<train|test>/<class>/<file>``; the split download's rows
are those of ``cars_train_annos.mat`` then ``cars_test_annos_withlabels.mat``, with paths
``cars_train/<fname>`` and ``cars_test/<fname>`` (image files of the layouts do not pair by path).

Split: classes 1-98 train, 99-196 test (Roth et al. 2020, §4.1); the official per-image ``test``
flag (a classification split; the Kaggle layout's train/test folders) is ignored.

Image properties (docs/methods.md §9): ``make``, ``body_type`` and ``year`` parsed from the class names
("Aston Martin V8 Vantage Convertible 2012" -> Aston Martin / convertible / 2012; a name without a
body-type word gets "other"), and, when the annotations carry ``bbox_x1..bbox_y2`` (the Kaggle csv
rows always do), ``bbox_area`` (box area / image area) and ``bbox_aspect`` (width / height), each as 5
quantile bins.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from embedscope.data.base import ImageDataset, check_root_given, class_split, other_layout_hint, read_text, require_files
from embedscope.data.imagefolder import check_listed_images, layout_hint, warn_unofficial_counts
from embedscope.errors import EmbedscopeError
from embedscope.text import quoted

NAME = "cars196"
ANNOS = "cars_annos.mat"
FIELDS = ("relative_im_path", "class")
KAGGLE_NAMES = "names.csv"
KAGGLE_ANNOS = ("anno_train.csv", "anno_test.csv")
KAGGLE_IMAGES = "car_data/car_data"
SPLIT_META = "devkit/cars_meta.mat"
SPLIT_TRAIN_ANNOS = "devkit/cars_train_annos.mat"
SPLIT_TEST_ANNOS = ("cars_test_annos_withlabels.mat", "devkit/cars_test_annos_withlabels.mat")
SPLIT_FOLDER = "stanford_cars"  # torchvision's root holds it
#: the official download: 196 classes, 16,185 images (8,054 in classes 1-98, 8,131 in 99-196)
OFFICIAL = {"classes": 196, "images": 16185}



def _class_number(v) -> int:
    """An annotation's class as an integer: MATLAB stores it as a 1 x 1 number (uint8 in the official
    files, double when written by another tool); a value that is not integral (1.7, NaN) raises
    ValueError (was truncated to 1: another class, silently)."""
    x = np.asarray(v).ravel()[0]
    f = float(x)
    if not f.is_integer():
        raise ValueError(f"class {x!r} is not an integer")
    return int(f)

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
    year = int(words[-1]) if words and words[-1].isdecimal() and len(words[-1]) == 4 else -1
    make = next((m for m in MULTI_WORD_MAKES if name.startswith(m + " ")), words[0] if words else "")
    body = next((b for w, b in BODY_TYPES if w in words), "other")
    return make, body, year


def load_cars196(root, train_classes: int | None = None) -> ImageDataset:
    """CARS196 from ``cars_annos.mat`` and ``car_ims/`` (or the Kaggle layout) as an :class:`ImageDataset`.

    Labels are ``class - 1`` (0..195); class names come from ``class_names`` in the ``.mat`` file
    (Kaggle layout: line ``class`` of ``names.csv``; see the module docstring).
    The first half of the classes (1-98 of 196) forms the training split and the rest the test
    split (Roth et al. 2020, §4.1; Musgrave et al. 2020), ignoring the official per-image ``test``
    flag; ``train_classes`` sets another count. Paths are relative to ``root``
    (``car_ims/000001.jpg``; Kaggle layout ``car_data/car_data/train/<class>/00001.jpg``). Every
    listed image must exist: the first missing one is named. With the 196 classes of the official
    files another number of images than 16,185 is warned about
    (:class:`~embedscope.data.imagefolder.DatasetSizeWarning`): a truncated or edited copy.

    Parameters
    ----------
    root : str or path-like
        the folder with ``cars_annos.mat`` and ``car_ims/``, or with ``names.csv``,
        ``anno_train.csv``, ``anno_test.csv`` and ``car_data/car_data/`` (Kaggle), or with ``devkit/``,
        ``cars_train/`` and ``cars_test/`` (the split download; or its parent, torchvision's root).
    train_classes : int, optional
        number of leading classes in the training split (default 98 of 196: half).

    Returns
    -------
    ImageDataset
        paths relative to ``root``, global labels 0..C-1, class names, split "train"/"test".

    Raises
    ------
    EmbedscopeError
        One line naming the missing file or image, or the malformed line (file and line number).

    Notes
    -----
    Zero-shot protocol of Roth et al. 2020 §4.1 and Musgrave et al. 2020; the results on these
    splits are in docs/methods.md §7 (reference numbers).
    """
    check_root_given(root, NAME)
    r = Path(root) if root is not None else None
    if r is not None and r.is_dir() and not (r / ANNOS).exists():
        if (r / KAGGLE_NAMES).exists():
            return _load_kaggle(r, train_classes)
        if (r / SPLIT_META).exists():
            return _load_split_download(r, train_classes, "")
        if (r / SPLIT_FOLDER / SPLIT_META).exists():  # torchvision's root
            return _load_split_download(r, train_classes, f"{SPLIT_FOLDER}/")
        hint = layout_hint(r, (ANNOS, KAGGLE_NAMES, SPLIT_META), beside={SPLIT_META: ("cars_train", "cars_test")})
        if hint:  # a parent folder, a folder unpacked into one of its own name, car_ims/ itself
            raise EmbedscopeError(f"{NAME}: {r / ANNOS} is missing{hint}")
        raise EmbedscopeError(f"{NAME}: {r / ANNOS} is missing (not the official {NAME} layout; nor the Kaggle "
                              f"layout, which has {KAGGLE_NAMES}, {KAGGLE_ANNOS[0]}, {KAGGLE_ANNOS[1]} and "
                              f"{KAGGLE_IMAGES}/; nor the split download, which has {SPLIT_META}"
                              f"{other_layout_hint(r, NAME)})")
    return _load_official(root, train_classes)


def _class_properties(base: Path, paths: list[str], labels: np.ndarray, names: list[str],
                      boxes: np.ndarray | None) -> dict[str, np.ndarray]:
    """make / body_type / year of each image's class, and the bbox properties when ``boxes``
    (x1, y1, x2, y2 in pixels, inclusive) are given."""
    parsed = [parse_class_name(nm) for nm in names]
    props = {"make": np.array([parsed[c][0] for c in labels], dtype=object),
             "body_type": np.array([parsed[c][1] for c in labels], dtype=object),
             "year": np.array([parsed[c][2] for c in labels], dtype=np.int64)}
    if boxes is not None:
        from embedscope.data.properties import bbox_properties, image_sizes

        b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        wh = np.stack([b[:, 2] - b[:, 0] + 1, b[:, 3] - b[:, 1] + 1], 1)
        props.update(bbox_properties(wh, image_sizes(base, paths)))
    return props


def _load_official(root, train_classes: int | None) -> ImageDataset:
    base = require_files(root, [ANNOS, "car_ims"], NAME)
    mat_path = base / ANNOS
    mat = _read_mat(mat_path)
    annos = _annotations(mat_path, FIELDS, mat, f" (not the official {ANNOS})")
    if "class_names" not in mat:
        raise EmbedscopeError(f"{NAME}: {mat_path} has no variable 'class_names' (not the official {ANNOS})")
    names = [_text(n) for n in np.atleast_1d(mat["class_names"])]
    n_classes = len(names)
    if n_classes == 0 or len(annos) == 0:
        raise EmbedscopeError(f"{NAME}: {mat_path} lists no {'classes' if n_classes == 0 else 'images'}")

    paths = []
    labels = np.empty(len(annos), dtype=np.int64)
    for k, a in enumerate(annos):
        p = _text(a["relative_im_path"]).strip()
        try:
            c = _class_number(a["class"])
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

    if n_classes == OFFICIAL["classes"]:
        warn_unofficial_counts(NAME, str(mat_path), {"images": len(paths)}, {"images": OFFICIAL["images"]}, stacklevel=4)
    check_listed_images(base, paths, NAME)
    boxes = None
    if all(f in annos.dtype.names for f in BOX_FIELDS):
        try:
            boxes = np.array([[float(np.asarray(a[f]).ravel()[0]) for f in BOX_FIELDS] for a in annos])
        except (ValueError, TypeError, IndexError):
            raise EmbedscopeError(f"{NAME}: {mat_path}: a bounding box field is not a number") from None
    props = _class_properties(base, paths, labels, names, boxes)
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


def _annotations(path: Path, fields: tuple[str, ...], mat: dict | None = None, what: str = "") -> np.ndarray:
    """The struct array ``annotations`` of the ``.mat`` file ``path`` (read unless ``mat`` is given),
    with ``fields`` checked; ``what`` ends the message of a file without it."""
    mat = _read_mat(path) if mat is None else mat
    if "annotations" not in mat:
        raise EmbedscopeError(f"{NAME}: {path} has no variable 'annotations'{what}")
    annos = np.atleast_1d(mat["annotations"])
    if annos.dtype.names is None:
        raise EmbedscopeError(f"{NAME}: {path}: 'annotations' is not a struct array")
    for f in fields:
        if f not in annos.dtype.names:
            hint = (" (cars_test_annos.mat holds no labels: get cars_test_annos_withlabels.mat)"
                    if f == "class" and "fname" in annos.dtype.names else "")
            raise EmbedscopeError(f"{NAME}: {path}: 'annotations' lacks the field '{f}'{hint}")
    return annos


def _load_split_download(root: Path, train_classes: int | None, prefix: str) -> ImageDataset:
    """CARS196 as the split download (torchvision's ``StanfordCars`` layout; module docstring)."""
    base = root / prefix if prefix else root
    test_annos = next((base / t for t in SPLIT_TEST_ANNOS if (base / t).exists()), None)
    for need in (SPLIT_TRAIN_ANNOS, "cars_train", "cars_test"):
        if not (base / need).exists():
            raise EmbedscopeError(f"{NAME}: {base / need} is missing (the split download of {SPLIT_META})")
    if test_annos is None:
        raise EmbedscopeError(f"{NAME}: {base / SPLIT_TEST_ANNOS[0]} is missing (the test images' labels of the "
                              f"split download; the devkit's cars_test_annos.mat holds none)")
    meta = _read_mat(base / SPLIT_META)
    if "class_names" not in meta:
        raise EmbedscopeError(f"{NAME}: {base / SPLIT_META} has no variable 'class_names'")
    names = [_text(n) for n in np.atleast_1d(meta["class_names"])]
    if not names:
        raise EmbedscopeError(f"{NAME}: {base / SPLIT_META} lists no classes")
    paths: list[str] = []
    labels: list[int] = []
    boxes: list[list[float]] = []
    for folder, mat_path in (("cars_train", base / SPLIT_TRAIN_ANNOS), ("cars_test", test_annos)):
        annos = _annotations(mat_path, ("fname", "class", *BOX_FIELDS))
        for k, a in enumerate(annos):
            fname = _text(a["fname"]).strip()
            try:
                c = _class_number(a["class"])
                box = [float(np.asarray(a[f]).ravel()[0]) for f in BOX_FIELDS]
            except (ValueError, TypeError, IndexError):
                raise EmbedscopeError(f"{NAME}: {mat_path}: annotation {k + 1} has no integer class or "
                                      "numeric box") from None
            if not fname:
                raise EmbedscopeError(f"{NAME}: {mat_path}: annotation {k + 1} has an empty fname")
            if not 1 <= c <= len(names):
                raise EmbedscopeError(f"{NAME}: {mat_path}: annotation {k + 1} ({fname}) has class {c}, outside "
                                      f"1..{len(names)} (the classes of {SPLIT_META})")
            paths.append(f"{prefix}{folder}/{fname}")
            labels.append(c - 1)
            boxes.append(box)
    return _listed_dataset(root, paths, labels, names, boxes, train_classes,
                           listed_in=f"{SPLIT_TRAIN_ANNOS} and {test_annos.name}",
                           source=f"split download: {SPLIT_META}, {SPLIT_TRAIN_ANNOS}, {test_annos.name}")


def _listed_dataset(root: Path, paths: list[str], labels: list[int], names: list[str], boxes: list,
                    train_classes: int | None, *, listed_in: str, source: str) -> ImageDataset:
    """The data set of a layout that lists its images with class and box (Kaggle, split download): the
    count compared with the official download's, every image checked on disk, the zero-shot split."""
    if len(names) == OFFICIAL["classes"]:
        warn_unofficial_counts(NAME, listed_in, {"images": len(paths)}, {"images": OFFICIAL["images"]}, stacklevel=5)
    check_listed_images(root, paths, NAME)
    lab = np.asarray(labels, dtype=np.int64)
    return ImageDataset(
        name=NAME,
        root=str(root),
        paths=np.asarray(paths, dtype=object),
        labels=lab,
        class_names=np.asarray(names, dtype=object),
        split=class_split(lab, len(names), train_classes, NAME),
        properties=_class_properties(root, paths, lab, names, np.asarray(boxes)),
        info={"source": f"CARS196 ({source})", "num_classes": len(names)},
    )


def _read_lines(path: Path) -> list[str]:
    """The lines of a text file (universal newlines, a UTF-8 byte-order mark dropped)."""
    return read_text(path, NAME, encoding="utf-8-sig").split("\n")


def _read_kaggle_names(path: Path) -> list[str]:
    """names.csv: line k names class k (a name is stripped of surrounding spaces, as
    pytorch-metric-learning does); blank lines may only end the file."""
    lines = _read_lines(path)
    while lines and not lines[-1].strip():
        lines.pop()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            raise EmbedscopeError(f"{NAME}: {path}:{lineno}: empty class name (expected one class name a "
                                  f"line, line k naming class k)")
    if not lines:
        raise EmbedscopeError(f"{NAME}: {path} lists no classes")
    return [line.strip() for line in lines]


def _read_kaggle_annos(path: Path, n_classes: int) -> list[tuple[str, list[int], int]]:
    """(file, [x1, y1, x2, y2], class 1..n) of each row of anno_train.csv / anno_test.csv."""
    rows = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(_read_lines(path), 1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        try:
            nums = [int(p) for p in parts[1:]] if len(parts) == 6 and parts[0] else None
        except ValueError:
            nums = None
        if nums is None:
            raise EmbedscopeError(f"{NAME}: {path}:{lineno}: malformed line {quoted(line.strip()[:60])} "
                                  "(expected '<file>,<x1>,<y1>,<x2>,<y2>,<class>')")
        c = nums[4]
        if not 1 <= c <= n_classes:
            raise EmbedscopeError(f"{NAME}: {path}:{lineno}: image {quoted(parts[0])} has class {c}, outside "
                                  f"1..{n_classes} (the classes of {KAGGLE_NAMES})")
        if parts[0] in seen:
            raise EmbedscopeError(f"{NAME}: {path}:{lineno}: image {quoted(parts[0])} is listed twice "
                                  f"(first on line {seen[parts[0]]})")
        seen[parts[0]] = lineno
        rows.append((parts[0], nums[:4], c))
    if not rows:
        raise EmbedscopeError(f"{NAME}: {path} lists no images")
    return rows


def _load_kaggle(base: Path, train_classes: int | None) -> ImageDataset:
    """CARS196 in the Kaggle layout that pytorch-metric-learning's ``Cars196`` reads (module docstring)."""
    for n in (KAGGLE_NAMES, *KAGGLE_ANNOS, KAGGLE_IMAGES):
        if not (base / n).exists():
            raise EmbedscopeError(f"{NAME}: {base / n} is missing (the Kaggle layout of {KAGGLE_NAMES} needs "
                                  f"{KAGGLE_ANNOS[0]}, {KAGGLE_ANNOS[1]} and {KAGGLE_IMAGES}/)")
    names = _read_kaggle_names(base / KAGGLE_NAMES)
    folders = [nm.replace("/", "-") for nm in names]
    paths: list[str] = []
    labels: list[int] = []
    boxes: list[list[int]] = []
    for split, csv in zip(("train", "test"), KAGGLE_ANNOS):
        for file, box, c in _read_kaggle_annos(base / csv, len(names)):
            paths.append(f"{KAGGLE_IMAGES}/{split}/{folders[c - 1]}/{file}")
            labels.append(c - 1)
            boxes.append(box)
    return _listed_dataset(base, paths, labels, names, boxes, train_classes,
                           listed_in=f"{KAGGLE_ANNOS[0]} and {KAGGLE_ANNOS[1]}",
                           source=f"Kaggle layout: {KAGGLE_NAMES}, {KAGGLE_ANNOS[0]}, {KAGGLE_ANNOS[1]}")
