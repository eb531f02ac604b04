"""A generic image folder: one sub-folder per class, the first N classes (sorted) form the training split.

Layout::

    ROOT/
      class_a/  img1.jpg  img2.png  ...
      class_b/  ...

This module also holds the checks that every photo loader shares: the zero-shot class split by
count (:func:`class_split`), the existence check of every listed image (:func:`check_images_exist`;
:func:`check_listed_images` adds a hint for an archive unpacked one folder too deep), the hint that
finds a data set's marker file next to a wrong ``--root`` (:func:`layout_hint`) and the warning for a
copy of a benchmark whose counts differ from the official download's (:func:`warn_unofficial_counts`).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

from embedscope.data.base import (  # noqa: F401
    ImageDataset,
    check_images_exist,
    class_split,
    other_layout_hint,
    require_files,
)
from embedscope.errors import EmbedscopeError, EmbedscopeWarning


class DatasetSizeWarning(EmbedscopeWarning):
    """A benchmark's files look like the official download but list another number of images or classes."""


def warn_unofficial_counts(dataset: str, what: str, found: dict[str, int], official: dict[str, int], *,
                           stacklevel: int = 3) -> None:
    """Warn (:class:`DatasetSizeWarning`) when a count of ``found`` differs from ``official``: results on a
    truncated or edited copy are not comparable with published numbers."""
    diff = [f"{k} {found[k]:,} (official {official[k]:,})" for k in official if found.get(k) != official[k]]
    if diff:
        warnings.warn(DatasetSizeWarning(
            f"{dataset}: {'; '.join(diff)} in {what}: a truncated or edited copy of the official download, "
            "so results are not comparable with published numbers"), stacklevel=stacklevel)


def _subdirs(folder: Path, limit: int) -> list[Path]:
    try:
        with os.scandir(folder) as it:
            out = sorted(Path(e.path) for e in it if not e.name.startswith(".") and e.is_dir())
    except OSError:
        return []
    return out[:limit]


def layout_hint(root, markers: tuple[str, ...], *, limit: int = 64, beside: dict | None = None) -> str:
    """`` (found DIR/MARKER: pass --root DIR)`` when a file of ``markers`` is in a folder one or two levels
    below ``root`` (an archive unpacked into a folder of its own name, a parent folder) or in the parent of
    ``root`` (``--root`` pointing into the data set); "" when none is found or ``root`` is no folder.
    ``beside``: marker -> the folders its layout also needs next to it (relative to DIR): a folder holding
    the marker without them is not named (a devkit unpacked on its own is no --root to pass)."""
    root = Path(root)
    if not root.is_dir():
        return ""
    level1 = _subdirs(root, limit)
    candidates = level1 + [d for sub in level1 for d in _subdirs(sub, limit)]
    if root.resolve().parent != root.resolve():
        candidates.append(root.parent)
    for d in candidates:
        for m in markers:
            if (d / m).is_file() and all((d / f).is_dir() for f in (beside or {}).get(m, ())):
                return f" (found {d / m}: pass --root {d})"
    return ""


def check_listed_images(root: Path, paths, dataset: str) -> None:
    """:func:`check_images_exist`, and when the first missing image is found one folder deeper (``images/images/...``,
    ``car_ims/car_ims/...``: an archive unpacked into a folder of its own name) the error says so."""
    try:
        check_images_exist(root, paths, dataset)
    except EmbedscopeError as e:
        first = next((p for p in paths if not os.path.isfile(root / p)), None)
        top = str(first).split("/", 1)[0] if first is not None else ""
        if top not in ("", ".", "..") and os.path.isfile(root / top / first):
            raise EmbedscopeError(f"{e} ({root / top / first} exists: the folder {top}/ holds another {top}/; "
                                  "move its contents up one level)") from None
        raise

#: File name endings (case-insensitive) that count as images: torchvision's ImageFolder list plus .gif.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif")


def _image_files(folder: Path, unreadable: list[Path] | None = None) -> list[Path]:
    """The image files under ``folder`` in sorted order (a folder's files, then its sub-folders in
    sorted order); symbolic links to folders are followed, but a folder reached a second time (a link
    loop, two links to one folder) is read once. A listed name that is no file to read (a symbolic link
    to nothing, a named pipe) is listed, and appended to ``unreadable``: found from the folder's
    entries, without a ``stat`` of each regular file."""
    out: list[Path] = []
    seen: set[tuple[int, int]] = set()

    def walk(d: str) -> None:
        try:
            st = os.stat(d)
            with os.scandir(d) as it:
                entries = list(it)
        except OSError:  # (as os.walk: an unreadable folder holds nothing)
            return
        if (st.st_dev, st.st_ino) in seen:
            return
        seen.add((st.st_dev, st.st_ino))
        files, subdirs = [], []
        for e in entries:
            if e.name.startswith("."):
                continue
            try:
                is_dir = e.is_dir()  # (follows a symbolic link)
            except OSError:
                is_dir = False
            if is_dir:
                subdirs.append(e.name)
            elif e.name.lower().endswith(IMG_EXTENSIONS):
                files.append(e)
        for e in sorted(files, key=lambda e: e.name):
            out.append(Path(d) / e.name)
            try:
                ok = e.is_file()  # from the entry's type for a regular file; a stat only for a link
            except OSError:
                ok = False
            if not ok and unreadable is not None:
                unreadable.append(out[-1])
        for name in sorted(subdirs):
            walk(os.path.join(d, name))

    walk(os.fspath(folder))
    return out


def _is_text(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # an undecodable byte of a file name (surrogateescape)
        return False
    return True


def _refuse_unreadable(unreadable: list[Path], n: int) -> None:
    """One line naming the first listed image name that is no file to read: a symbolic link to nothing (its
    target moved or deleted) or a special file (a pipe) with an image ending; found when the folder is
    listed, before any image is embedded, not by the reader."""
    if unreadable:
        first = unreadable[0]
        what = "a symbolic link to nothing" if first.is_symlink() else "not a regular file"
        raise EmbedscopeError(f"imagefolder: image {first} is {what} ({len(unreadable)} of {n} image files "
                              "cannot be read; remove or repair them)")


def _images_here_hint(root: Path) -> str:
    """``; photos/cat holds 6 image files itself: a class's folder? --root names the folder of the class
    folders (--root photos?)`` when ``root``, which has no sub-folders, holds image files: a class folder
    (or a flat folder of images) given as ``--root``. "" otherwise."""
    try:
        with os.scandir(root) as it:
            n = sum(1 for e in it if not e.name.startswith(".") and e.name.lower().endswith(IMG_EXTENSIONS))
    except OSError:
        return ""
    if not n:
        return ""
    parent = root.parent if root.name not in ("", ".", "..") else root / ".."
    return (f"; {root} holds {n} image file{'s' if n != 1 else ''} itself: a class's folder? --root names the "
            f"folder of the class folders (--root {parent}?)")


def _other_files_hint(folder: Path) -> str:
    """``; it holds 12 other files, e.g. IMG_0001.HEIC`` for a class folder without image files: photos in
    a format that is not read (HEIC from a phone, RAW) are named, not only the endings that are. "" when it
    holds no (visible) files, below it too (links to folders not followed)."""
    n, first = 0, None
    for d, subdirs, files in os.walk(folder):
        subdirs[:] = sorted(x for x in subdirs if not x.startswith("."))
        for f in sorted(x for x in files if not x.startswith(".")):
            n += 1
            first = first or os.path.relpath(os.path.join(d, f), folder)
    if not n:
        return ""
    return f"; it holds {n:,} other file{'s' if n != 1 else ''}, e.g. {first}"


def load_imagefolder(root, train_classes: int | None = None) -> ImageDataset:
    """One sub-folder per class under ``root`` as an :class:`ImageDataset`.

    Classes are the sub-folders in sorted name order (hidden folders are skipped); images are the
    files with an ending in :data:`IMG_EXTENSIONS`, searched recursively inside each class folder
    (symbolic links followed; a folder reached twice within one class folder, as through a link loop, is
    read once; a link into another class's folder is read, its images then rows of both classes). A listed
    name that is no file to read (a symbolic link to nothing, a named pipe) is an error naming it.
    A class or file name that is not valid UTF-8 (an undecodable byte) is an error: the HDF5 file
    stores names as text.
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
    root = require_files(root, [], "imagefolder", folder="the folder of class sub-folders, ROOT/<class>/<image>")
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    if not classes:
        raise EmbedscopeError(f"imagefolder: {root} holds no class sub-folders (expected ROOT/<class>/<image>"
                              f"{_images_here_hint(root)}{other_layout_hint(root, 'imagefolder')})")
    paths: list[str] = []
    labels: list[int] = []
    unreadable: list[Path] = []
    for c, name in enumerate(classes):
        files = _image_files(root / name, unreadable)
        if not files:
            raise EmbedscopeError(
                f"imagefolder: class folder {root / name} holds no image files ({', '.join(IMG_EXTENSIONS)}"
                f"{_other_files_hint(root / name)}{other_layout_hint(root, 'imagefolder')})"
            )
        rel = [f.relative_to(root).as_posix() for f in files]
        bad = next((r for r in [name, *rel] if not _is_text(r)), None)
        if bad is not None:
            # an HDF5 file stores paths and class names as UTF-8 text: refused here, before any image is embedded
            raise EmbedscopeError(f"imagefolder: {root / bad} has a name that is not valid UTF-8 text "
                                  "(an undecodable byte); rename it")
        paths.extend(rel)
        labels.extend([c] * len(files))
    _refuse_unreadable(unreadable, len(paths))
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
