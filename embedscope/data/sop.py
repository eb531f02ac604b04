"""Stanford Online Products (Oh Song et al. 2016) in its official layout and its own split.

Layout (``--root`` is ``Stanford_Online_Products/`` or the folder that holds it)::

    Stanford_Online_Products/
      Ebay_train.txt   "image_id class_id super_class_id path" header, then one line per image
      Ebay_test.txt    same columns
      bicycle_final/111085122871_0.JPG ...   (12 category folders)

Split: the files' own, 59,551 images of 11,318 classes for training and 60,502 images of 11,316
classes for testing (Roth et al. 2020, §4.1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from embedscope.data.base import ImageDataset, check_root_given, class_split, read_text, require_files
from embedscope.data.imagefolder import check_listed_images, layout_hint, warn_unofficial_counts
from embedscope.errors import EmbedscopeError
from embedscope.text import quoted

NAME = "sop"
FOLDER = "Stanford_Online_Products"
FILES = ("Ebay_train.txt", "Ebay_test.txt")
HEADER = ["image_id", "class_id", "super_class_id", "path"]
#: the official download: class ids 1..11,318 in Ebay_train.txt, 11,319..22,634 in Ebay_test.txt
OFFICIAL = {"training images": 59551, "test images": 60502, "training classes": 11318, "test classes": 11316,
            "first_test_class": 11319, "last_class": 22634}


def _read_ebay(path: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(class ids, super class ids, paths) of one Ebay_*.txt file; one-line errors name the line."""
    lines = read_text(path, NAME).splitlines()
    if not lines or lines[0].split() != HEADER:
        raise EmbedscopeError(f"{NAME}: {path}:1: expected the header '{' '.join(HEADER)}'")
    cls, sup, paths = [], [], []
    for lineno, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 4 or not all(p.isdecimal() for p in parts[:3]):
            raise EmbedscopeError(
                f"{NAME}: {path}:{lineno}: malformed line {quoted(line.strip()[:60])} "
                "(expected '<image_id> <class_id> <super_class_id> <path>')"
            )
        cls.append(int(parts[1]))
        sup.append(int(parts[2]))
        paths.append(parts[3])
    if not paths:
        raise EmbedscopeError(f"{NAME}: {path} lists no images")
    return np.asarray(cls, dtype=np.int64), np.asarray(sup, dtype=np.int64), paths


def _find_root(root) -> tuple[Path, str]:
    check_root_given(root, NAME)
    if root is not None:
        r = Path(root)
        if not (r / FILES[0]).exists() and (r / FOLDER / FILES[0]).exists():
            return require_files(r / FOLDER, list(FILES), NAME), f"{FOLDER}/"
        if r.is_dir() and not (r / FILES[0]).exists():
            hint = layout_hint(r, (FILES[0],))
            if hint:  # Stanford_Online_Products/Stanford_Online_Products/, a category folder, ...
                raise EmbedscopeError(f"{NAME}: {r / FILES[0]} is missing{hint}")
    return require_files(root, list(FILES), NAME), ""


def load_sop(root, train_classes: int | None = None) -> ImageDataset:
    """Stanford Online Products from ``Ebay_train.txt`` / ``Ebay_test.txt`` as an :class:`ImageDataset`.

    Labels are the ``class_id`` values in increasing order mapped to 0..C-1 (``class_id - 1`` for the
    official files); the split is the files' own (11,318 training classes, 11,316 test classes;
    Roth et al. 2020, §4.1). ``train_classes`` instead puts the first N classes (by class id) in the
    training split. A class may not appear in both files. Class names are ``<category>_<class_id>``
    (``bicycle_1``); ``super_class_id`` is kept as the image property ``super_class``. Paths are
    relative to ``root``. Every listed image must exist: the first missing one is named. Files in
    the official numbering (test class ids from 11,319, or a largest id of 22,634) with other counts
    than the official 59,551 / 60,502 images of 11,318 / 11,316 classes are warned about
    (:class:`~embedscope.data.imagefolder.DatasetSizeWarning`): a truncated or edited copy.

    Parameters
    ----------
    root : str or path-like
        ``Stanford_Online_Products/`` or the folder holding it.
    train_classes : int, optional
        if given, the first N classes (by class id) train instead of the files' split.

    Returns
    -------
    ImageDataset
        paths relative to ``root``, global labels 0..C-1, class names, split "train"/"test";
        image property ``super_class``.

    Raises
    ------
    EmbedscopeError
        One line naming the missing file or image, or the malformed line.

    Notes
    -----
    Zero-shot protocol of Roth et al. 2020 §4.1 and Musgrave et al. 2020; the results on these
    splits are in docs/methods.md §7 (reference numbers).
    """
    base, prefix = _find_root(root)
    c_tr, s_tr, p_tr = _read_ebay(base / FILES[0])
    c_te, s_te, p_te = _read_ebay(base / FILES[1])
    both = np.intersect1d(c_tr, c_te)
    if both.size:
        raise EmbedscopeError(
            f"{NAME}: class {int(both[0])} appears in both {FILES[0]} and {FILES[1]} "
            f"({both.size} shared classes; the split must be by class)"
        )
    class_ids = np.concatenate([c_tr, c_te])
    rel = p_tr + p_te
    if int(c_te.min()) == OFFICIAL["first_test_class"] or int(class_ids.max()) == OFFICIAL["last_class"]:
        # the official numbering (test classes 11,319..22,634): the counts must be the official ones
        found = {"training images": len(p_tr), "test images": len(p_te),
                 "training classes": len(np.unique(c_tr)), "test classes": len(np.unique(c_te))}
        warn_unofficial_counts(NAME, f"{FILES[0]} and {FILES[1]}", found,
                               {k: OFFICIAL[k] for k in found})
    check_listed_images(base, rel, NAME)

    uniq, first, labels = np.unique(class_ids, return_index=True, return_inverse=True)
    names = []
    for cid, row in zip(uniq, first):
        cat = rel[row].split("/", 1)[0] if "/" in rel[row] else "product"
        cat = cat[: -len("_final")] if cat.endswith("_final") else cat
        names.append(f"{cat}_{int(cid)}")
    if train_classes is None:
        split = np.array(["train"] * len(p_tr) + ["test"] * len(p_te), dtype=object)
    else:
        split = class_split(labels, len(uniq), train_classes, NAME)
    return ImageDataset(
        name=NAME,
        root=str(Path(root)),
        paths=np.asarray([prefix + p for p in rel], dtype=object),
        labels=labels.astype(np.int64),
        class_names=np.asarray(names, dtype=object),
        split=split,
        properties={"super_class": np.concatenate([s_tr, s_te])},
        info={"source": "Stanford_Online_Products (Ebay_train.txt, Ebay_test.txt)", "num_classes": len(uniq)},
    )
