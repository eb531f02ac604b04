"""The common form of every data set: image paths (or in-memory images), labels, class names, split.

Labels are global class indices ``0 .. C-1`` over *all* classes of the data set (train and test);
``class_names[label]`` names the class. The zero-shot protocol of DML puts disjoint classes in the
train and test splits.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.text import quoted
from embedscope.validation import check_int

if TYPE_CHECKING:
    import torch
    from PIL import Image

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass
class ImageDataset:
    """A labelled image collection with its train/test split.

    ``paths`` are relative to ``root`` (for in-memory data sets such as the digits they are item
    ids). ``images``, when given, holds the pixel arrays in memory (``N x H x W`` or ``N x H x W x 3``)
    and ``load_image`` reads from it instead of the disk.
    """

    name: str
    root: str | None
    paths: np.ndarray
    labels: np.ndarray
    class_names: np.ndarray
    split: np.ndarray
    kind: str = "image"  # "image" (RGB photos: ImageNet transforms) or "digits"
    images: np.ndarray | None = None
    properties: dict[str, np.ndarray] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.paths = np.asarray(self.paths, dtype=object).astype(str)
        self.labels = np.asarray(self.labels, dtype=np.int64)
        self.class_names = np.asarray(self.class_names, dtype=object).astype(str)
        self.split = np.asarray(self.split, dtype=object).astype(str)
        n = len(self.paths)
        if not (len(self.labels) == len(self.split) == n):
            raise EmbedscopeError(f"{self.name}: paths, labels and split differ in length")
        if n and (self.labels.min() < 0 or self.labels.max() >= len(self.class_names)):
            raise EmbedscopeError(f"{self.name}: labels do not index class_names")

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def num_classes(self) -> int:
        return len(np.unique(self.labels))

    def subset(self, split: str | None) -> "ImageDataset":
        """The rows of one split (:data:`embedscope.names.SPLITS`; None or "all" for every row)."""
        from embedscope.names import SPLITS

        if split in (None, "all"):
            return self
        if split not in SPLITS:
            raise EmbedscopeError(f"unknown split {quoted(split)} (choose {', '.join(SPLITS)} or all)")
        idx = np.flatnonzero(self.split == split)
        return self.take(idx)

    def take(self, idx: np.ndarray) -> "ImageDataset":
        idx = np.asarray(idx)
        return ImageDataset(
            name=self.name,
            root=self.root,
            paths=self.paths[idx],
            labels=self.labels[idx],
            class_names=self.class_names,
            split=self.split[idx],
            kind=self.kind,
            images=None if self.images is None else self.images[idx],
            properties={k: v[idx] for k, v in self.properties.items()},
            info=dict(self.info),
        )

    def load_image(self, i: int):
        """The i-th image as a PIL image (RGB for photos, mode 'F' float for the digits)."""
        from PIL import Image

        if self.images is not None:
            arr = self.images[i]
            if arr.ndim == 2:
                return Image.fromarray(np.asarray(arr, dtype=np.float32), mode="F")
            return Image.fromarray(np.asarray(arr, dtype=np.uint8))
        return open_rgb(Path(self.root or ".") / self.paths[i])


#: Pillow's 16-bit grey modes; ``I`` (32-bit integer) holds 16-bit grey for these file formats
_GREY16_MODES = ("I;16", "I;16L", "I;16B", "I;16N")
_GREY16_FORMATS = ("PNG", "PPM")


def to_rgb(im, path) -> "Image.Image":
    """An opened PIL image as 8-bit RGB, each pixel value on its own scale.

    PIL's ``convert("RGB")`` clips high-bit-depth grey at 255 instead of scaling it: a 16-bit PNG
    (mode ``I;16``) came out almost white and a float image black. 16-bit grey (``I;16``, and ``I``
    read from a PNG or PGM file) is scaled by 255/65535 (v/257, rounded); 32-bit integer or float
    pixels of other files, and signed 16-bit ones (a TIFF's ``I;16S``, which PIL opens as ``I``), have
    no known range and are a one-line error naming what they are. Every other mode (``L``,
    ``P``, ``CMYK``, ``LA``, ``RGBA``, ...) is PIL's conversion, as torchvision's loader does it (an alpha
    channel dropped; a palette image with transparency through ``RGBA``: the same pixels, without PIL's
    warning for each such image).
    """
    from PIL import Image

    if im.mode in _GREY16_MODES or (im.mode == "I" and im.format in _GREY16_FORMATS):
        a = np.asarray(im).astype(np.float64)
        if a.size and (a.min() < 0 or a.max() > 65535):
            raise EmbedscopeError(f"cannot read image {path}: 16-bit grey values outside 0..65535")
        return Image.fromarray(np.rint(a / 257.0).astype(np.uint8)).convert("RGB")
    if im.mode in ("I", "F") or im.mode.startswith("I;"):
        kind, raw = ("floating-point", im.mode) if im.mode == "F" else _integer_pixels(im)
        mode = im.mode if raw == im.mode else f"{im.mode}, stored as {raw}"
        raise EmbedscopeError(f"cannot read image {path}: {kind} pixels (mode {mode}) have no known 0-255 "
                              "range; save the image with 8 or 16 bits per channel (unsigned)")
    if im.mode == "P" and "transparency" in im.info:
        # a palette image with transparency (a PNG or GIF with a tRNS chunk): PIL's direct conversion to RGB
        # warns "Palette images with Transparency ... should be converted to RGBA" for every image (a folder
        # of them flooded stderr); through RGBA the same palette colours, alpha dropped as for RGBA files
        im = im.convert("RGBA")
    return im.convert("RGB")


def _integer_pixels(im) -> tuple[str, str]:
    """(what the integer pixels of ``im`` are, the mode that says it): the file's own pixel layout (its
    raw mode) when PIL widened it to ``I`` (a signed 16-bit TIFF, ``I;16S``, opens as mode ``I``
    and was refused as "32-bit integer pixels"), else ``I``'s 32 bits."""
    import re

    raw = im.mode
    if im.mode == "I":
        with contextlib.suppress(Exception):  # (the first tile's decoder arguments start with the raw mode)
            args = im.tile[0][3] if len(im.tile[0]) > 3 else ()
            raw = str(args[0] if isinstance(args, tuple) and args else args or im.mode)
    m = re.fullmatch(r"I;(\d+)[BLN]?(S?)", raw)
    if m is None or m.group(1) == "32":
        return "32-bit integer", im.mode
    return f"{'signed ' if m.group(2) else ''}{m.group(1)}-bit integer", raw


def open_rgb(path) -> "Image.Image":
    """The image file ``path`` as 8-bit RGB (:func:`to_rgb`); an unreadable, corrupt, truncated or
    oversized (decompression bomb) file is a one-line :class:`EmbedscopeError` naming it."""
    from PIL import Image

    path = Path(path)
    try:
        with warnings.catch_warnings():
            # between PIL's limit and twice it PIL only warns: the image is read
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                return to_rgb(im, path)
    except EmbedscopeError:
        raise
    except Image.DecompressionBombError as e:
        raise EmbedscopeError(f"cannot read image {path}: too many pixels, a possible decompression "
                              f"bomb ({_reason(e, path)})") from None
    except (OSError, ValueError) as e:
        raise EmbedscopeError(f"cannot read image {path}: {_reason(e, path)}") from None
    except Exception as e:  # PIL's plugins raise SyntaxError, struct.error, IndexError on broken files
        raise EmbedscopeError(f"cannot read image {path}: a corrupt or unsupported image "
                              f"({e.__class__.__name__}: {_reason(e, path)})") from None


def _reason(e: BaseException, path: Path) -> str:
    """An image library's reason without its ``repr`` of the path (``cannot identify image file '...'``,
    ``[Errno 2] No such file or directory: '...'``): the message names the path once, raw, and the error
    line escapes it once (a repr would show its backslashes doubled twice)."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    shown = repr(str(path))
    return str(e).replace(f" {shown}", "").replace(shown, "the file")


def digits_to_tensor(img) -> torch.Tensor:
    """An 8 x 8 digit (values 0-16) as a 1 x 8 x 8 float tensor in [0, 1]. At module level, so that
    data-loader workers started by 'spawn' (macOS, Windows, a process of ``train-grid --workers``)
    can pickle the transform."""
    import torch  # (not at module level: the data sets load without torch)

    return torch.from_numpy(np.asarray(img, dtype=np.float32)[None] / 16.0)


def image_transform(kind: str, train: bool, *, image_size: int = 224, resize: int | None = None) -> Callable:
    """The papers' transforms.

    Photos (Roth §4.1): train = RandomResizedCrop(image_size) + horizontal flip; eval = Resize(256)
    + CenterCrop(224) (``resize`` defaults to ``round(image_size * 256 / 224)``); ImageNet mean/std.
    Digits: pixel values / 16 as a 1 x 8 x 8 tensor; training adds a small random affine jitter.
    Every transform pickles (data-loader workers started by 'spawn').
    """
    if kind == "digits":
        to_tensor = digits_to_tensor
        if not train:
            return to_tensor  # without torchvision, whose import costs ~1 s of every digits command
        from torchvision import transforms as T

        jitter = T.RandomAffine(degrees=10, translate=(0.1, 0.1), scale=(0.9, 1.1))
        return T.Compose([to_tensor, jitter])
    from torchvision import transforms as T

    resize = resize or int(round(image_size * 256 / 224))
    norm = T.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    if train:
        return T.Compose([T.RandomResizedCrop(image_size), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    return T.Compose([T.Resize(resize), T.CenterCrop(image_size), T.ToTensor(), norm])


def describe_transform(kind: str, train: bool, *, image_size: int = 224, resize: int | None = None) -> str:
    """A text description of :func:`image_transform`, stored in the HDF5 provenance."""
    if kind == "digits":
        return "digits: x/16 as 1x8x8" + (" + RandomAffine(10deg, 0.1, 0.9-1.1)" if train else "")
    resize = resize or int(round(image_size * 256 / 224))
    if train:
        return f"RandomResizedCrop({image_size}) + RandomHorizontalFlip + ImageNet normalise"
    return f"Resize({resize}) + CenterCrop({image_size}) + ImageNet normalise"


class TorchImages:
    """A ``torch.utils.data.Dataset`` view: item i -> (image tensor, label, i).

    With ``seed``, an item may be asked for as ``(epoch, i)`` (:class:`embedscope.train.samplers.EpochTagged`):
    its transform then draws from torch's CPU generator seeded by :func:`augment_seed` (seed, epoch, i),
    and the caller's generator state is restored after. Each image's augmentation in an epoch is then
    the same whichever process draws it — the main process or any of any number of loader workers,
    kept across epochs or not — and a resumed run draws what the uninterrupted run drew. (The
    transforms draw from torch's generator only, as torchvision's do.)"""

    def __init__(self, ds: ImageDataset, transform: Callable, seed: int | None = None) -> None:
        self.ds = ds
        self.transform = transform
        self.seed = seed

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, key):
        if isinstance(key, tuple):
            epoch, i = key
            img = self.ds.load_image(i)
            import torch

            with torch.random.fork_rng(devices=[]):  # the CPU generator's state restored after
                torch.default_generator.manual_seed(augment_seed(self.seed or 0, epoch, i))
                x = self.transform(img)
            return x, int(self.ds.labels[i]), i
        return self.transform(self.ds.load_image(key)), int(self.ds.labels[key]), key


_M64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def augment_seed(seed: int, epoch: int, i: int) -> int:
    """The seed of image ``i``'s augmentation in ``epoch`` of a run with ``seed``: splitmix64 of the
    three, chained (nearby seeds, epochs and images give unrelated streams), folded to the 32 bits
    that torch's CPU generator (mt19937) keeps of a seed."""
    h = _splitmix64(_splitmix64(_splitmix64(int(seed) & _M64) ^ (int(epoch) & _M64)) ^ (int(i) & _M64))
    return (h ^ (h >> 32)) & 0xFFFFFFFF


def read_text(path: Path, dataset: str, *, encoding: str = "utf-8-sig") -> str:
    """The text of a data set's annotation file (universal newlines; UTF-8, a byte-order mark at its
    start dropped: a file saved by an editor that writes one read as "malformed line '\\ufeff1 ...'");
    an unreadable file is a one-line error naming it; so is one that is not UTF-8 text, with the line and the
    byte (it was "cannot read ... (UnicodeDecodeError)": a list re-saved as Latin-1 or UTF-16 on Windows)."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise EmbedscopeError(f"{dataset}: cannot read {path} ({e.__class__.__name__})") from None
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as e:
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
            raise EmbedscopeError(f"{dataset}: {path} is UTF-16 text: save it as UTF-8") from None
        at = e.start + len(data) - len(e.object)  # (utf-8-sig decodes the bytes after a byte-order mark)
        line = data.count(b"\n", 0, at) + 1
        raise EmbedscopeError(f"{dataset}: {path}: line {line} is not UTF-8 text (byte 0x{data[at]:02x} at "
                              f"offset {at} of the file; Latin-1 or Windows-1252?): save it as UTF-8") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # (universal newlines, as open() reads text)


#: the downloads' archives (CUB_200_2011.tgz, car_ims.tgz, Stanford_Online_Products.zip, Kaggle's zip), given as --root
ARCHIVE_ENDINGS = (".tgz", ".tar.gz", ".tar", ".zip", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".7z", ".rar")


def check_root_given(root, dataset: str) -> None:
    """Refuse a ``--root`` that is the empty string (``--root "$DATA"`` of an unset variable): ``Path("")``
    is the working folder, which was read as the data set (an image folder's sub-folders as its classes)
    and recorded as no folder at all."""
    if root is not None and os.fspath(root) == "":
        raise EmbedscopeError(f"{dataset}: --root is empty (an unset shell variable?): give the data set's "
                              "folder (. for the working folder)")


def require_files(root: str | os.PathLike, names: list[str], dataset: str, *,
                  folder: str = "the folder of the official download") -> Path:
    """Check that ``root`` holds each of ``names``; a one-line error names the first missing one.
    ``folder`` says what ``--root`` names when it is not given (``imagefolder``: a folder of class
    sub-folders, which has no official download)."""
    if root is None:
        raise EmbedscopeError(f"{dataset} needs --root DIR ({folder})")
    check_root_given(root, dataset)
    root = Path(root)
    if root.exists() and not root.is_dir():
        unpack = (" (an archive: unpack it and pass the folder it holds)"
                  if root.name.lower().endswith(ARCHIVE_ENDINGS) else "")
        raise EmbedscopeError(f"{dataset}: --root {root} is a file, expected the data set's folder{unpack}")
    if not root.is_dir():
        raise EmbedscopeError(f"{dataset}: root folder {root} does not exist")
    for n in names:
        if not (root / n).exists():
            raise EmbedscopeError(f"{dataset}: {root / n} is missing (not the official {dataset} layout"
                                  f"{other_layout_hint(root, dataset)})")
    return root


#: a file (relative to ``--root``) that marks another loader's layout -> that data set
LAYOUT_MARKERS = (("images.txt", "cub200"), ("CUB_200_2011/images.txt", "cub200"), ("Ebay_train.txt", "sop"),
                  ("Stanford_Online_Products/Ebay_train.txt", "sop"), ("cars_annos.mat", "cars196"),
                  ("anno_train.csv", "cars196"), ("devkit/cars_meta.mat", "cars196"),
                  ("stanford_cars/devkit/cars_meta.mat", "cars196"))


def other_layout_hint(root, dataset: str) -> str:
    """``; --root holds Ebay_train.txt, the sop layout: --dataset sop?`` when ``root`` holds the marker file of
    another data set's layout (a command copied with only ``--root`` changed); "" otherwise."""
    for marker, name in LAYOUT_MARKERS:
        if name != dataset and (Path(root) / marker).is_file():
            return f"; --root holds {marker}, the {name} layout: --dataset {name}?"
    return ""


def class_split(labels: np.ndarray, n_classes: int, train_classes: int | None, dataset: str) -> np.ndarray:
    """The zero-shot split by class: labels ``< n`` are "train", the rest "test".

    ``n`` is ``train_classes`` when given, else the first half of the classes rounded up
    (``ceil(C / 2)``: 100 of CUB's 200, 98 of CARS' 196). Both splits must be non-empty.
    """
    if n_classes < 2:
        raise EmbedscopeError(
            f"{dataset}: {n_classes} class(es) found; the zero-shot train/test split needs at least 2"
        )
    # (a train_classes of 2.5 was taken as 2, True as 1)
    n = (n_classes + 1) // 2 if train_classes is None else check_int(train_classes, "train_classes", min=None)
    if not 1 <= n < n_classes:
        raise EmbedscopeError(
            f"{dataset}: --train-classes {n} must be between 1 and {n_classes - 1} "
            f"(the data set has {n_classes} classes and the test split needs at least one)"
        )
    return np.where(np.asarray(labels) < n, "train", "test")


def check_images_exist(root: Path, paths, dataset: str) -> None:
    """Raise one line naming the first listed image that is not a file under ``root``, or that a list
    names outside it (an absolute path, or one through ``..``: the official lists name every image
    relative to the data set's folder; such a path was read, and stored as given, from anywhere), or
    that a list names twice (``a/b.jpg`` and ``a//b.jpg`` or ``./a/b.jpg`` are one image): a row that
    repeats an image is its twin's nearest neighbour at distance 0 (R@1 counted a hit, or a miss when
    the two rows carry different classes), and files matched by path (``yoke``, saliency maps) refused
    the file only later."""
    import posixpath

    missing = 0
    first, first_listed = None, ""
    seen: dict[str, int] = {}
    twice: list[tuple[int, int]] = []
    for k, p in enumerate(paths):
        t = str(p).replace("\\", "/")
        if t.startswith("/") or t == ".." or t.startswith("../") or "/../" in t or t.endswith("/.."):
            raise EmbedscopeError(f"{dataset}: the listed image {quoted(str(p))} is not a path inside the data set's "
                                  f"folder {root} (absolute, or through '..'): the lists name images relative to it")
        key = posixpath.normpath(t) if ("//" in t or "./" in t or t.endswith("/.")) else t
        j = seen.setdefault(key, k)
        if j != k:
            twice.append((j, k))
        if not os.path.isfile(root / p):
            missing += 1
            if first is None:
                first, first_listed = root / p, str(p)
    if missing:
        raise EmbedscopeError(
            f"{dataset}: image {first} is missing ({missing} of {len(paths)} listed images are absent"
            f"{_other_spelling(root, first_listed)})"
        )
    if twice:
        j, k = twice[0]
        same = "" if str(paths[j]) == str(paths[k]) else f" (as {quoted(str(paths[j]))} first)"
        raise EmbedscopeError(
            f"{dataset}: the image {quoted(str(paths[k]))} is listed twice{same}: listed images {j + 1} and "
            f"{k + 1} of {len(paths)} ({len(twice)} listed image(s) repeat an earlier one); each image must be "
            "listed once (a repeated image is its own nearest neighbour)"
        )


def _other_spelling(root: Path, listed: str) -> str:
    """``; the folder holds it with its name in another Unicode spelling ...`` when the listed path, not
    found, is on disk in the other Unicode normalisation (``é`` as one character or as ``e`` + an accent):
    names copied from a Mac (a zip made there) are decomposed, lists typed elsewhere composed, and the
    file looked present."""
    import unicodedata

    if listed.isascii():
        return ""
    for form in ("NFD", "NFC"):
        other = unicodedata.normalize(form, listed)
        if other != listed and os.path.isfile(root / other):
            return (f"; the folder holds it with its name in another Unicode spelling, {form} (a copy made on "
                    "a Mac?): rename the files or the lists to one spelling")
    return ""


def data_fingerprint(ds: ImageDataset) -> str:
    """What a result computed from ``ds`` depends on in the data, as a short string: the listing
    (name, kind, paths, labels, split, class names, properties) and the images themselves: their
    pixels for a data set held in memory (the digits, a generated ``shapes`` set), each file's size
    and modification time for images read from a folder. An image added, removed, replaced or
    relabelled changes it (a file rewritten with its old size and modification time does not: every
    image is not read). A training run records it (``extra["data"]``) so that ``--resume`` and
    ``train-grid`` notice data changed since the run started; a study's cache key and finished rows
    hold it too (:func:`embedscope.study.run.data_fingerprint`), except for the digits, which a study
    names by their scikit-learn version without loading them."""
    import hashlib
    import struct

    h = hashlib.sha256()

    def text(values) -> None:
        h.update("\x00".join(str(v) for v in values).encode("utf-8", "surrogatepass"))
        h.update(b"\x01")

    text([ds.name, ds.kind, len(ds)])
    for arr in (ds.paths, ds.class_names, ds.split):
        text(arr.tolist())
    h.update(np.ascontiguousarray(ds.labels, dtype="<i8").tobytes())
    for k in sorted(ds.properties):
        v = np.asarray(ds.properties[k])
        text([k, v.dtype.str])
        if v.dtype.kind in "OUS":
            text(v.tolist())
        else:
            h.update(np.ascontiguousarray(v).tobytes())
    if ds.images is not None:
        h.update(np.ascontiguousarray(ds.images).tobytes())
    else:
        base = Path(ds.root or ".")
        pack = struct.Struct("<qq").pack
        for p in ds.paths:
            try:
                st = os.stat(base / p)
                h.update(pack(int(st.st_size), int(st.st_mtime_ns)))
            except OSError:
                h.update(b"missing")
    return "files:" + h.hexdigest()[:16]
