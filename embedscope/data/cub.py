"""CUB200-2011 (Wah et al. 2011) in its official layout, with the zero-shot split of DML.

Layout (``--root`` is ``CUB_200_2011/`` or the folder that holds it)::

    CUB_200_2011/
      images.txt               "<image id> <class folder>/<file>.jpg"
      image_class_labels.txt   "<image id> <class id 1..200>"
      classes.txt              "<class id> <NNN.Name>"
      images/001.Black_footed_Albatross/Black_Footed_Albatross_0046_18.jpg ...

Split: classes 1-100 train, 101-200 test (Roth et al. 2020, §4.1); the official
``train_test_split.txt`` is a per-image split for classification and is not used.

Image properties (docs/methods.md §9), loaded when the files are present::

      attributes/attributes.txt              "<attribute id> <has_part::value>"  (312 lines)
      attributes/image_attribute_labels.txt  "<image id> <attribute id> <is_present> <certainty 1-4> <time>"
      bounding_boxes.txt                     "<image id> <x> <y> <width> <height>"

Each attribute becomes the binary property ``attr:<name>`` (1 = present; with
``attribute_certainty=c`` only a presence marked with certainty >= c counts, e.g. 3 = "probably" or
"definitely"); the box gives ``bbox_area`` (box area / image area) and ``bbox_aspect`` (width /
height), each as 5 quantile bins.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from embedscope.data.base import ImageDataset, check_images_exist, class_split, read_text, require_files
from embedscope.errors import EmbedscopeError

NAME = "cub200"
FOLDER = "CUB_200_2011"
FILES = ["images.txt", "image_class_labels.txt", "classes.txt", "images"]


def read_pairs(path: Path, dataset: str, value_kind: str, *, int_value: bool) -> dict[int, str | int]:
    """Read ``"<int id> <value>"`` lines (blank lines skipped) into a dict; one-line errors name the line."""
    out: dict[int, str | int] = {}
    for lineno, line in enumerate(read_text(path, dataset).splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(None, 1)
        ok = len(parts) == 2 and parts[0].isdigit()
        if ok and int_value:
            ok = parts[1].strip().isdigit()
        if not ok:
            raise EmbedscopeError(
                f"{dataset}: {path}:{lineno}: malformed line {line.strip()[:60]!r} "
                f"(expected '<id> <{value_kind}>')"
            )
        key = int(parts[0])
        if key in out:
            raise EmbedscopeError(f"{dataset}: {path}:{lineno}: id {key} appears twice")
        value = parts[1].strip()
        out[key] = int(value) if int_value else value
    if not out:
        raise EmbedscopeError(f"{dataset}: {path} is empty")
    return out


def _find_root(root) -> tuple[Path, str]:
    """The folder with images.txt and the prefix that makes image paths relative to the user's root."""
    if root is not None:
        r = Path(root)
        if not (r / "images.txt").exists() and (r / FOLDER / "images.txt").exists():
            return require_files(r / FOLDER, FILES, NAME), f"{FOLDER}/"
    return require_files(root, FILES, NAME), ""


ATTRIBUTE_CERTAINTY: int | None = None  # the default of load_cub200(attribute_certainty=...)


def _read_rows(path: Path, min_fields: int, what: str) -> list[list[str]]:
    """Whitespace-separated rows with at least ``min_fields`` integer-like leading fields."""
    rows = []
    for lineno, line in enumerate(read_text(path, NAME).splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) < min_fields:
            raise EmbedscopeError(f"{NAME}: {path}:{lineno}: malformed line {line.strip()[:60]!r} (expected {what})")
        rows.append(parts)
    return rows


def cub_properties(base: Path, ids: list[int], rel_paths: list[str], *,
                   attribute_certainty: int | None = None) -> dict[str, np.ndarray]:
    """Attribute and bounding-box properties of the images ``ids`` (see the module docstring); {} when absent."""
    from embedscope.data.properties import bbox_properties, image_sizes

    props: dict[str, np.ndarray] = {}
    row_of = {iid: k for k, iid in enumerate(ids)}
    adir = base / "attributes"
    if (adir / "attributes.txt").exists() and (adir / "image_attribute_labels.txt").exists():
        names = read_pairs(adir / "attributes.txt", NAME, "attribute name", int_value=False)
        aid = sorted(names)
        col = {a: j for j, a in enumerate(aid)}
        A = np.zeros((len(ids), len(aid)), dtype=np.int8)
        seen = np.zeros(len(ids), dtype=bool)
        for parts in _read_rows(adir / "image_attribute_labels.txt", 4,
                                "'<image id> <attribute id> <is_present> <certainty id> ...'"):
            try:
                iid, a, present, cert = (int(x) for x in parts[:4])
            except ValueError:
                raise EmbedscopeError(f"{NAME}: {adir / 'image_attribute_labels.txt'}: non-integer field in "
                                      f"{' '.join(parts)[:60]!r}") from None
            if iid not in row_of or a not in col:
                continue
            ok = present == 1 and (attribute_certainty is None or cert >= attribute_certainty)
            A[row_of[iid], col[a]] = 1 if ok else 0
            seen[row_of[iid]] = True
        if not seen.all():
            missing = ids[int(np.flatnonzero(~seen)[0])]
            raise EmbedscopeError(f"{NAME}: image id {missing} has no line in {adir / 'image_attribute_labels.txt'}")
        for j, a in enumerate(aid):
            props[f"attr:{names[a]}"] = A[:, j].copy()
    bb = base / "bounding_boxes.txt"
    if bb.exists():
        boxes = np.full((len(ids), 2), np.nan)
        for parts in _read_rows(bb, 5, "'<image id> <x> <y> <width> <height>'"):
            try:
                iid = int(parts[0])
                w, h = float(parts[3]), float(parts[4])
            except ValueError:
                raise EmbedscopeError(f"{NAME}: {bb}: non-numeric field in {' '.join(parts)[:60]!r}") from None
            if iid in row_of:
                boxes[row_of[iid]] = (w, h)
        if np.isnan(boxes).any():
            missing = ids[int(np.flatnonzero(np.isnan(boxes[:, 0]))[0])]
            raise EmbedscopeError(f"{NAME}: image id {missing} has no line in {bb}")
        props.update(bbox_properties(boxes, image_sizes(base, rel_paths)))
    return props


def load_cub200(root, train_classes: int | None = None, *, attribute_certainty: int | None = None) -> ImageDataset:
    """CUB200-2011 from its official files as an :class:`ImageDataset`.

    Labels are the class ids of ``classes.txt`` in increasing order mapped to 0..C-1; class names
    drop the ``NNN.`` prefix (``001.Black_footed_Albatross`` -> ``Black_footed_Albatross``). The
    first half of the classes (1-100 of 200) forms the training split and the rest the test split
    (Roth et al. 2020, §4.1; Musgrave et al. 2020); ``train_classes`` sets another count. Paths are
    relative to ``root`` (``images/...``, or ``CUB_200_2011/images/...`` when ``root`` is the
    parent folder). Every listed image must exist: the first missing one is named.

    Parameters
    ----------
    root : str or path-like
        ``CUB_200_2011/`` or the folder holding it.
    train_classes : int, optional
        number of leading classes in the training split (default 100 of 200: half).
    attribute_certainty : int, optional
        count an attribute as present only when its certainty id is at least this (1-4; default:
        :data:`ATTRIBUTE_CERTAINTY`, None = every marked presence).

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
    base, prefix = _find_root(root)
    images = read_pairs(base / "images.txt", NAME, "relative image path", int_value=False)
    img_labels = read_pairs(base / "image_class_labels.txt", NAME, "class id", int_value=True)
    classes = read_pairs(base / "classes.txt", NAME, "class name", int_value=False)

    class_ids = sorted(classes)
    index = {cid: i for i, cid in enumerate(class_ids)}
    names = [re.sub(r"^\d+\.", "", str(classes[c])) for c in class_ids]

    ids = list(images)
    labels = np.empty(len(ids), dtype=np.int64)
    for k, iid in enumerate(ids):
        if iid not in img_labels:
            raise EmbedscopeError(f"{NAME}: image id {iid} has no line in {base / 'image_class_labels.txt'}")
        cid = img_labels[iid]
        if cid not in index:
            raise EmbedscopeError(
                f"{NAME}: image id {iid} has class {cid}, which {base / 'classes.txt'} does not list"
            )
        labels[k] = index[cid]

    rel = [f"images/{images[i]}" for i in ids]
    check_images_exist(base, rel, NAME)
    cert = ATTRIBUTE_CERTAINTY if attribute_certainty is None else attribute_certainty
    props = cub_properties(base, ids, rel, attribute_certainty=cert)
    return ImageDataset(
        name=NAME,
        root=str(Path(root)),
        paths=np.asarray([prefix + p for p in rel], dtype=object),
        labels=labels,
        class_names=np.asarray(names, dtype=object),
        split=class_split(labels, len(class_ids), train_classes, NAME),
        properties=props,
        info={"source": "CUB_200_2011 (images.txt, image_class_labels.txt, classes.txt)",
              "num_classes": len(class_ids)},
    )
