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

      attributes/image_attribute_labels.txt  "<image id> <attribute id> <is_present> <certainty 1-4> <time>"
      bounding_boxes.txt                     "<image id> <x> <y> <width> <height>"
    attributes.txt                           "<attribute id> <has_part::value>"  (312 lines)

``CUB_200_2011.tgz`` unpacks ``attributes.txt`` beside ``CUB_200_2011/`` (as drawn); the README
places it in ``CUB_200_2011/attributes/``, and ``CUB_200_2011/attributes.txt`` is read too (the
first found of ``attributes/attributes.txt``, ``attributes.txt``, ``../attributes.txt``). Labels
without any names file are warned about and give no attribute properties.

Each attribute becomes the binary property ``attr:<name>`` (1 = present; with
``attribute_certainty=c`` only a presence marked with certainty >= c counts, e.g. 3 = "probably" or
"definitely"); the box gives ``bbox_area`` (box area / image area) and ``bbox_aspect`` (width /
height), each as 5 quantile bins.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np

from embedscope.data.base import ImageDataset, check_root_given, class_split, read_text, require_files
from embedscope.data.imagefolder import check_listed_images, layout_hint, warn_unofficial_counts
from embedscope.errors import EmbedscopeError, EmbedscopeWarning
from embedscope.text import quoted

NAME = "cub200"
FOLDER = "CUB_200_2011"
FILES = ["images.txt", "image_class_labels.txt", "classes.txt", "images"]
#: the official download: 200 classes, 11,788 images (5,864 in classes 1-100, 5,924 in 101-200)
OFFICIAL = {"classes": 200, "images": 11788}


def read_pairs(path: Path, dataset: str, value_kind: str, *, int_value: bool) -> dict[int, str | int]:
    """Read ``"<int id> <value>"`` lines (blank lines skipped) into a dict; one-line errors name the line."""
    out: dict[int, str | int] = {}
    for lineno, line in enumerate(read_text(path, dataset).splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(None, 1)
        ok = len(parts) == 2 and parts[0].isdecimal()
        if ok and int_value:
            ok = parts[1].strip().isdecimal()
        if not ok:
            raise EmbedscopeError(
                f"{dataset}: {path}:{lineno}: malformed line {quoted(line.strip()[:60])} "
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
    check_root_given(root, NAME)
    if root is not None:
        r = Path(root)
        if not (r / "images.txt").exists() and (r / FOLDER / "images.txt").exists():
            return require_files(r / FOLDER, FILES, NAME), f"{FOLDER}/"
        if r.is_dir() and not (r / "images.txt").exists():
            hint = layout_hint(r, ("images.txt",))
            if hint:  # CUB_200_2011/CUB_200_2011/ (unpacked into a folder of its name), CUB_200_2011/images/, ...
                raise EmbedscopeError(f"{NAME}: {r / 'images.txt'} is missing{hint}")
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
            raise EmbedscopeError(f"{NAME}: {path}:{lineno}: malformed line {quoted(line.strip()[:60])} (expected {what})")
        rows.append(parts)
    return rows


def _attribute_names_candidates(base: Path) -> list[Path]:
    # CUB_200_2011.tgz unpacks attributes.txt next to CUB_200_2011/, not into CUB_200_2011/attributes/
    # (where the README places it, and where it is often moved to)
    return [base / "attributes" / "attributes.txt", base / "attributes.txt", base.parent / "attributes.txt"]


def attribute_names_file(base: Path) -> Path | None:
    """The attribute names (``<id> <has_part::value>``): ``attributes/attributes.txt`` in the data-set folder,
    ``attributes.txt`` there, or ``attributes.txt`` in its parent (where the official archive puts it)."""
    return next((p for p in _attribute_names_candidates(base) if p.is_file()), None)


def _positions(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of each value in ``keys``, whether it is there); ``keys`` unique."""
    order = np.argsort(keys, kind="stable")
    pos = np.clip(np.searchsorted(keys[order], values), 0, max(len(keys) - 1, 0))
    found = (keys[order][pos] == values) if len(keys) else np.zeros(len(values), dtype=bool)
    return order[pos], found


def _attribute_labels(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(image id, attribute id, is_present, certainty id) of each line of image_attribute_labels.txt.

    3.7 million lines: parsed by pandas (about 3 s on 2 cores; 20 s line by line), the line-by-line reader
    giving the one-line error (file, line) when the fast parse finds anything but integers in the
    first four fields (the official file has lines with a sixth field: it is ignored)."""
    try:
        import pandas as pd

        # (names for more columns than any line has: rows of 5 and 6 fields read alike; pandas refuses usecols here)
        df = pd.read_csv(path, sep=r"\s+", header=None, names=list(range(8)), skip_blank_lines=True, engine="c")
        if len(df) and all(df[c].dtype.kind == "i" for c in range(4)):
            return tuple(df[c].to_numpy(dtype=np.int64) for c in range(4))  # type: ignore[return-value]
    except Exception:  # noqa: BLE001 - anything odd: the line-by-line reader says what and where
        pass
    rows = []
    for parts in _read_rows(path, 4, "'<image id> <attribute id> <is_present> <certainty id> ...'"):
        try:
            rows.append([int(x) for x in parts[:4]])
        except ValueError:
            raise EmbedscopeError(f"{NAME}: {path}: non-integer field in {quoted(' '.join(parts)[:60])}") from None
    arr = np.asarray(rows, dtype=np.int64).reshape(-1, 4)
    return arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3]


def cub_properties(base: Path, ids: list[int], rel_paths: list[str], *,
                   attribute_certainty: int | None = None) -> dict[str, np.ndarray]:
    """Attribute and bounding-box properties of the images ``ids`` (see the module docstring); {} when absent."""
    from embedscope.data.properties import bbox_properties, image_sizes

    props: dict[str, np.ndarray] = {}
    row_of = {iid: k for k, iid in enumerate(ids)}
    adir = base / "attributes"
    names_file = attribute_names_file(base)
    if (adir / "image_attribute_labels.txt").exists() and names_file is None:
        warnings.warn(EmbedscopeWarning(  # (the command line's one-line warning, not Python's two-line format)
            f"{NAME}: {adir / 'image_attribute_labels.txt'} is present but attributes.txt (the attribute "
            f"names) is in none of {', '.join(str(p) for p in _attribute_names_candidates(base))}: "
            "the images get no attr:<name> properties"), stacklevel=3)
    if names_file is not None and (adir / "image_attribute_labels.txt").exists():
        names = read_pairs(names_file, NAME, "attribute name", int_value=False)
        aid = np.asarray(sorted(names), dtype=np.int64)
        A = np.zeros((len(ids), len(aid)), dtype=np.int8)
        seen = np.zeros(len(ids), dtype=bool)
        iid, a, present, cert = _attribute_labels(adir / "image_attribute_labels.txt")
        row, ok_row = _positions(np.asarray(ids, dtype=np.int64), iid)
        col, ok_col = _positions(aid, a)
        keep = ok_row & ok_col  # lines of images or attributes not loaded are skipped
        value = (present == 1) & (cert >= (attribute_certainty or 0))
        lin = row[keep] * len(aid) + col[keep]
        # a repeated (image, attribute) line: the last one counts, as when read line by line
        _, last_rev = np.unique(lin[::-1], return_index=True)
        last = len(lin) - 1 - last_rev
        A.reshape(-1)[lin[last]] = value[keep][last]
        seen[row[keep]] = True
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
                raise EmbedscopeError(f"{NAME}: {bb}: non-numeric field in {quoted(' '.join(parts)[:60])}") from None
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
    parent folder). Every listed image must exist: the first missing one is named. An image id of
    ``image_class_labels.txt`` that ``images.txt`` does not list is an error (a truncated file);
    with the 200 classes of the official ``classes.txt`` another number of images than 11,788 is
    warned about (:class:`~embedscope.data.imagefolder.DatasetSizeWarning`).

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

    extra = sorted(set(img_labels) - set(images))
    if extra:  # a truncated images.txt would otherwise give a smaller data set without a word
        raise EmbedscopeError(
            f"{NAME}: {base / 'image_class_labels.txt'} labels {len(extra)} image id(s) that {base / 'images.txt'} "
            f"does not list (first: id {extra[0]}; it lists {len(images)}): a truncated or edited images.txt"
        )
    if len(class_ids) == OFFICIAL["classes"]:
        warn_unofficial_counts(NAME, f"{base / 'images.txt'}", {"images": len(ids)}, {"images": OFFICIAL["images"]})

    rel = [f"images/{images[i]}" for i in ids]
    check_listed_images(base, rel, NAME)
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
