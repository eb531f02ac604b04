"""The saliency-maps file: one HDF5 file per model (docs/methods.md §8 maps; target home ``store/saliency.py``).

Layout (``format = "embedscope-saliency"``, ``format_version`` 1)::

    /maps             float16 [N, H, W]   post-processed maps in [0, 1]
    /paths            utf-8   [N]         image path (relative to the data root) or item id; unique
    /labels           int64   [N]         index into class_names
    /class_names      utf-8   [C]
    /images           uint8   [N, H, W] or [N, H, W, 3]   the model's input shown as a picture
                                          (de-normalised; optional, used by the figures)
    pairs only (kind = "pairs", ``embedscope saliency --pairs``):
    /retrieval/maps, /retrieval/paths, /retrieval/labels, /retrieval/images, /retrieval/distance
    attrs: format, format_version, kind ("maps" | "pairs"), name, family, checkpoint,
           checkpoint_sha256, checkpoint_config (JSON), distance, n_samples, noise, order, seed,
           input_size, transform, dataset, split, train_classes, root, embedscope_version, created, ...

Files of several models on the same images are matched by path (:func:`match_maps`).
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.fileio import atomic_output
from embedscope.store.embeddings import (  # one attribute encoding for both
    _from_attr,
    open_hdf5,
    read_attrs,
    readable,
    write_attrs,
)

FORMAT = "embedscope-saliency"
FORMAT_VERSION = 1
KINDS = ("maps", "pairs")
#: Map values per block when files are read by rows (:class:`MapsFile`, :func:`scan_maps_open`): 2 Mi values,
#: 8 MiB in float32.
STREAM_ELEMENTS = 1 << 21
#: Bytes per HDF5 chunk of the maps and images that :func:`save_maps` writes (whole rows per chunk).
CHUNK_BYTES = 1 << 16


@dataclass(eq=False, repr=False)
class SaliencyMaps:
    """Saliency maps of one model on N images, with the images' paths, labels and provenance.

    ``repr`` is one line; ``a == b`` compares the maps, paths, labels, class names, images and
    retrieval pairs by value (not ``attrs``), as :class:`~embedscope.store.EmbeddingSet` does.
    """

    maps: np.ndarray
    paths: np.ndarray
    labels: np.ndarray
    class_names: np.ndarray
    images: np.ndarray | None = None
    retrieval: dict[str, np.ndarray] | None = None  # pairs: maps, paths, labels, images, distance
    attrs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.maps = np.asarray(self.maps)
        self.paths = np.asarray(self.paths, dtype=object).astype(str)
        self.labels = np.asarray(self.labels)
        self.class_names = np.asarray(self.class_names, dtype=object).astype(str)
        if self.images is not None:
            self.images = np.asarray(self.images)
        if self.retrieval is not None:
            r = dict(self.retrieval)
            r["maps"] = np.asarray(r["maps"])
            r["paths"] = np.asarray(r["paths"], dtype=object).astype(str)
            r["labels"] = np.asarray(r["labels"])
            r["distance"] = np.asarray(r.get("distance", np.full(len(r["paths"]), np.nan)), dtype=np.float32)
            if r.get("images") is not None:
                r["images"] = np.asarray(r["images"])
            self.retrieval = r
        self.validate()

    @property
    def n(self) -> int:
        return int(self.maps.shape[0])

    @property
    def kind(self) -> str:
        return "pairs" if self.retrieval is not None else "maps"

    @property
    def map_shape(self) -> tuple[int, int]:
        return tuple(int(x) for x in self.maps.shape[1:])

    @property
    def name(self) -> str:
        return str(self.attrs.get("name") or Path(str(self.attrs.get("source_file", "maps"))).stem)

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        src = self.attrs.get("source_file")
        return (f"SaliencyMaps(name={self.name!r}, kind={self.kind!r}, N={self.n}, map_shape={self.map_shape}, "
                f"images={self.images is not None}" + (f", source={str(src)!r})" if src else ")"))

    def __eq__(self, other: object) -> bool:
        from embedscope.store.embeddings import same_values

        if not isinstance(other, SaliencyMaps):
            return NotImplemented
        return all(same_values(getattr(self, f), getattr(other, f))
                   for f in ("maps", "paths", "labels", "class_names", "images", "retrieval"))

    __hash__ = None  # mutable, compared by value

    def validate(self, source: str = "saliency maps") -> None:
        """One-line :class:`EmbedscopeError` when fields disagree or values are bad."""
        self.labels = _validate_fields(self.maps, self.paths, self.labels, self.class_names, self.images,
                                       self.retrieval, source)

    def select(self, idx) -> "SaliencyMaps":
        """A new set of maps with the rows picked by a boolean mask or row indices."""
        from embedscope.validation import check_rows

        idx = check_rows(idx, self.n)
        ret = None
        if self.retrieval is not None:
            ret = {k: (None if v is None else v[idx]) for k, v in self.retrieval.items()}
        return SaliencyMaps(maps=self.maps[idx], paths=self.paths[idx], labels=self.labels[idx],
                            class_names=self.class_names, images=None if self.images is None else self.images[idx],
                            retrieval=ret, attrs=dict(self.attrs))


def _validate_fields(M, paths, labels, class_names, images, retrieval, source: str) -> np.ndarray:
    """The checks of :meth:`SaliencyMaps.validate`, in its order, of maps held in memory or read from a
    file a block of rows at a time (``M`` and ``retrieval["maps"]``: arrays or :class:`_ScannedMaps`;
    ``images``: arrays or h5py datasets, only their type and shape are looked at). Returns the labels
    as int64."""
    if M.ndim != 3:
        raise EmbedscopeError(f"{source}: maps must be 3-D (N x H x W), got shape {M.shape}")
    if not np.issubdtype(M.dtype, np.floating):
        raise EmbedscopeError(f"{source}: maps must be floating point, got {M.dtype}")
    n = M.shape[0]
    labels = _checked_rows(n, paths, labels, class_names, source)
    if n:
        finite, lo, hi = _values(M)
        if not finite:
            raise EmbedscopeError(f"{source}: maps contain NaN or inf")
        if lo < -1e-3 or hi > 1 + 1e-3:
            raise EmbedscopeError(f"{source}: maps must lie in [0, 1], got [{lo:.3g}, {hi:.3g}]")
    _check_images(images, M.shape, source)
    if retrieval is not None:
        r = retrieval
        if r["maps"].shape != M.shape:
            raise EmbedscopeError(f"{source}: retrieval maps have shape {r['maps'].shape}, query maps {M.shape}")
        for k in ("paths", "labels", "distance"):
            if r[k].shape != (n,):
                raise EmbedscopeError(f"{source}: retrieval {k} has shape {r[k].shape}, expected ({n},)")
        if n:
            finite, lo, hi = _values(r["maps"])
            if not finite:
                raise EmbedscopeError(f"{source}: retrieval maps contain NaN or inf")
            if lo < -1e-3 or hi > 1 + 1e-3:  # (were not checked: a file of retrieval maps in [0, 7] was read)
                raise EmbedscopeError(f"{source}: retrieval maps must lie in [0, 1], got [{lo:.3g}, {hi:.3g}]")
        _check_images(r.get("images"), M.shape, source + " (retrieval)")
    return labels


def _values(M) -> tuple[bool, float, float]:
    """Whether every value of the maps ``M`` (3-D, at least one row) is finite and, if so, the least and
    the largest (NaN otherwise)."""
    if isinstance(M, _ScannedMaps):
        return M.values()
    if not np.all(np.isfinite(M)):
        return False, np.nan, np.nan
    return True, float(M.min()), float(M.max())


class _ScannedMaps:
    """The maps of a file (an h5py dataset) as :func:`_validate_fields` sees them without reading them
    all: their shape, the type :func:`read_maps_open` gives them (float32), and :meth:`values`, measured
    a block of rows at a time (:data:`STREAM_ELEMENTS` values, whole chunks: memory bounded whatever
    N x H x W)."""

    dtype = np.dtype(np.float32)

    def __init__(self, ds) -> None:
        self._ds = ds
        self.shape = tuple(int(x) for x in ds.shape)
        self.ndim = len(self.shape)
        self._values: tuple[bool, float, float] | None = None
        #: the all-zero maps (a zero gradient), counted by :meth:`values` (0 before)
        self.n_zero = 0

    def values(self) -> tuple[bool, float, float]:
        """:func:`_values` of the maps as float32, read (once) a block of rows at a time; stops at the
        first block holding NaN or inf. Counts the all-zero maps on the way (:attr:`n_zero`)."""
        if self._values is None:
            from embedscope.store.embeddings import _row_blocks

            n, row = self.shape[0], int(np.prod(self.shape[1:], dtype=np.int64))
            finite, lo, hi = True, np.inf, -np.inf
            for b in _row_blocks((n, row), self._ds.chunks, most=STREAM_ELEMENTS):
                m = self._ds[b].astype(np.float32)
                if not np.all(np.isfinite(m)):
                    finite, lo, hi = False, np.nan, np.nan
                    break
                if m.size:
                    lo, hi = min(lo, float(m.min())), max(hi, float(m.max()))
                    self.n_zero += int(np.count_nonzero(~m.reshape(len(m), -1).any(axis=1)))
            self._values = (finite, lo, hi)
        return self._values


def _checked_rows(n: int, paths, labels, class_names, source: str):
    """The per-map fields of ``n`` maps checked (one path and one label each, integer labels that index
    ``class_names``, no path twice); returns the labels as int64."""
    if paths.ndim != 1:  # (a single value: was an IndexError, or its characters taken as paths)
        raise EmbedscopeError(f"{source}: paths must hold one path per map, got shape {paths.shape}")
    if paths.shape[0] != n:
        raise EmbedscopeError(f"{source}: {paths.shape[0]} paths for {n} maps")
    if labels.ndim != 1:
        raise EmbedscopeError(f"{source}: labels must hold one label per map, got shape {labels.shape}")
    if labels.shape[0] != n:
        raise EmbedscopeError(f"{source}: {labels.shape[0]} labels for {n} maps")
    if not np.issubdtype(labels.dtype, np.integer):
        raise EmbedscopeError(f"{source}: labels must be integers, got {labels.dtype}")
    labels = labels.astype(np.int64, copy=False)
    if n and (labels.min() < 0 or labels.max() >= len(class_names)):
        raise EmbedscopeError(f"{source}: labels must lie in [0, {len(class_names)}) to index class_names")
    if len(np.unique(paths)) != n:
        raise EmbedscopeError(f"{source}: duplicate paths (maps are matched between models by path)")
    return labels


def _check_images(images, maps_shape, source: str) -> None:
    if images is None:
        return
    n, h, w = maps_shape
    if images.dtype != np.uint8 or images.shape[:3] != (n, h, w) or images.ndim not in (3, 4) or (
            images.ndim == 4 and images.shape[3] != 3):
        raise EmbedscopeError(f"{source}: images must be uint8 N x H x W (x 3) matching the maps {maps_shape}, "
                              f"got {images.dtype} {images.shape}")


def _row_chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...] | None:
    """HDF5 chunks of whole maps (or images), about :data:`CHUNK_BYTES` each: reading a block of rows
    (:class:`MapsFile`), in any order, touches only the chunks of those rows. (h5py's own guess cuts
    each map into many tiles shared by hundreds of rows: one row read touched them all.)"""
    if not shape or not shape[0]:
        return None
    row = max(1, int(np.prod(shape[1:], dtype=np.int64)) * int(itemsize))
    return (int(min(shape[0], max(1, CHUNK_BYTES // row))), *map(int, shape[1:]))


def save_maps(path: str | os.PathLike, sm: SaliencyMaps, *, force: bool = False) -> Path:
    """Write ``sm`` atomically (maps as float16); refuses an existing file unless ``force``."""
    import h5py

    from embedscope import __version__

    if not isinstance(sm, SaliencyMaps):
        raise EmbedscopeError(f"save_maps needs SaliencyMaps, got {type(sm).__name__}")
    sm.validate()
    attrs = dict(sm.attrs)
    attrs.pop("source_file", None)
    attrs.update(format=FORMAT, format_version=FORMAT_VERSION, kind=sm.kind)
    attrs.setdefault("embedscope_version", __version__)
    attrs.setdefault("created", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    str_dt = h5py.string_dtype("utf-8")

    def write(g, maps, paths, labels, images):
        maps = np.asarray(maps, dtype=np.float16)
        g.create_dataset("maps", data=maps, chunks=_row_chunks(maps.shape, maps.itemsize))
        g.create_dataset("paths", data=paths.astype(object), dtype=str_dt)
        g.create_dataset("labels", data=labels.astype(np.int64))
        if images is not None:
            g.create_dataset("images", data=images, chunks=_row_chunks(images.shape, images.itemsize))

    with atomic_output(path, force=force) as tmp:
        with h5py.File(tmp, "w") as f:
            write(f, sm.maps, sm.paths, sm.labels, sm.images)
            f.create_dataset("class_names", data=sm.class_names.astype(object), dtype=str_dt)
            if sm.retrieval is not None:
                r = sm.retrieval
                g = f.create_group("retrieval")
                write(g, r["maps"], r["paths"], r["labels"], r.get("images"))
                g.create_dataset("distance", data=r["distance"].astype(np.float32))
            write_attrs(f.attrs, {k: v for k, v in attrs.items() if v is not None})
    return Path(path)


def _strings(ds, path: Path) -> np.ndarray:
    """The text dataset ``ds`` as an object array of str (a single value: a 0-d one, refused by the
    checks that follow); one line naming it when it holds a byte that is not UTF-8."""
    v = ds[()]
    if not isinstance(v, np.ndarray) or v.ndim == 0:  # (a single text was read one character at a time)
        v = np.asarray(v, dtype=object)
        items, shape = [v.item()], ()
    else:
        items, shape = v.reshape(-1), v.shape
    try:
        out = np.array([s.decode("utf-8") if isinstance(s, bytes) else str(s) for s in items], dtype=object)
    except UnicodeDecodeError:
        raise EmbedscopeError(f"{path}: '{ds.name.lstrip('/')}' holds invalid UTF-8 text") from None
    return out.reshape(shape)


def _dataset(g, name: str, path: Path):
    """``g[name]``, an HDF5 dataset, else one line (missing, or a group: was a TypeError of h5py's)."""
    from embedscope.store.embeddings import hdf5_object_kind

    where = f"{g.name.strip('/')}/{name}".lstrip("/")
    kind = hdf5_object_kind(g, name)
    if kind == "missing":
        raise EmbedscopeError(f"{path}: damaged saliency-maps file, missing {where}")
    if kind != "a dataset":
        raise EmbedscopeError(f"{path}: '{where}' is {kind}, expected a dataset")
    return g[name]


def _read_fields(f, path: Path, *, scanned: bool) -> dict[str, Any]:
    """The fields of a :class:`SaliencyMaps` read from the open file ``f``, as its constructor converts
    them: the maps as float32 (``scanned``: a :class:`_ScannedMaps` of them, nothing read) and the images
    (``scanned``: their h5py dataset), the per-row fields, the retrieval pairs, the attributes."""
    with readable(path):
        return _read_fields_of(f, path, scanned=scanned)


def _read_fields_of(f, path: Path, *, scanned: bool) -> dict[str, Any]:
    import h5py

    _check_header(f, path)

    def part(g) -> dict[str, Any]:
        maps = _dataset(g, "maps", path)
        if maps.dtype.kind not in "biuf":  # (text was converted, complex numbers cut to their real part)
            where = "retrieval maps" if g.name != "/" else "maps"
            raise EmbedscopeError(f"{path}: saliency maps: {where} must be floating point, got {maps.dtype}")
        images = _dataset(g, "images", path) if "images" in g else None
        return dict(maps=_ScannedMaps(maps) if scanned else maps[()].astype(np.float32),
                    paths=_strings(_dataset(g, "paths", path), path).astype(str),
                    labels=np.asarray(_dataset(g, "labels", path)[()]),
                    images=images if scanned or images is None else images[()])

    main = part(f)
    retrieval = None
    if "retrieval" in f:
        g = f["retrieval"]
        if not isinstance(g, h5py.Group):
            raise EmbedscopeError(f"{path}: 'retrieval' is an HDF5 dataset, expected a group (of the pairs' "
                                  "retrieved images)")
        retrieval = part(g)
        retrieval["distance"] = np.asarray(_dataset(g, "distance", path)[()] if "distance" in g
                                           else np.full(len(retrieval["paths"]), np.nan), dtype=np.float32)
    class_names = _strings(_dataset(f, "class_names", path), path).astype(str)
    attrs = read_attrs(f.attrs)
    attrs["source_file"] = str(path)
    return dict(class_names=class_names, retrieval=retrieval, attrs=attrs, **main)


def _check_header(f, path: Path) -> None:
    """Format, version and the datasets every maps file has, else one line."""
    if _from_attr(f.attrs.get("format", "")) != FORMAT:
        hint = " (an embedding file? saliency maps come from 'embedscope saliency')" if "embeddings" in f else ""
        raise EmbedscopeError(f"{path}: not an embedscope saliency-maps file{hint}")
    version = f.attrs.get("format_version")
    if version is not None:
        try:  # (text or an array: was a ValueError's or TypeError's one-liner)
            version = int(np.asarray(version).item())
        except (TypeError, ValueError):
            from embedscope.text import quoted

            raise EmbedscopeError(f"{path}: format_version must be an integer, got "
                                  f"{quoted(_from_attr(version))}") from None
        if version > FORMAT_VERSION:
            raise EmbedscopeError(f"{path}: format_version {version} is newer than this embedscope reads "
                                  f"({FORMAT_VERSION})")
    missing = [k for k in ("maps", "paths", "labels", "class_names") if k not in f]
    if missing:
        raise EmbedscopeError(f"{path}: damaged saliency-maps file, missing {', '.join(missing)}")


def load_maps(path: str | os.PathLike) -> SaliencyMaps:
    """Read and validate a maps file; any problem is one :class:`EmbedscopeError` line."""
    if not isinstance(path, (str, os.PathLike)):
        raise EmbedscopeError(f"load_maps needs the path of a saliency-maps file (.h5), got {type(path).__name__}")
    path = Path(path)
    if not path.exists():
        raise EmbedscopeError(f"{path}: no such file")
    with open_hdf5(path, "a saliency-maps file (.h5)") as f:
        return read_maps_open(f, path)


def read_maps_open(f, path: str | os.PathLike) -> SaliencyMaps:
    """:func:`load_maps` of a file already open (``h5py.File``, read). ``path`` names the file in errors
    and ``source_file``."""
    path = Path(path)
    fields = _read_fields(f, path, scanned=False)
    try:
        return SaliencyMaps(**fields)
    except EmbedscopeError as e:
        raise EmbedscopeError(f"{path}: {e}") from None


@dataclass(eq=False, repr=False)
class MapsSummary:
    """What :func:`scan_maps_open` read of a maps file: everything but the maps' and images' values (of
    which the all-zero maps are counted)."""

    n: int
    kind: str  # "maps" | "pairs"
    map_shape: tuple[int, ...]
    paths: np.ndarray
    labels: np.ndarray  # int64, checked
    class_names: np.ndarray
    has_images: bool
    retrieval_has_images: bool | None  # None: not a pairs file
    attrs: dict[str, Any]
    n_zero: int = 0  # the all-zero maps (a zero gradient everywhere: docs/saliency.md)
    n_zero_retrieval: int | None = None  # of the retrievals (None: not a pairs file)


def scan_maps_open(f, path: str | os.PathLike) -> MapsSummary:
    """:func:`read_maps_open` in memory bounded whatever the number of maps (``embedscope info``: 5,000
    maps of 224 x 224 and their images were read, about 1 GB, to print a summary): every check of
    :func:`load_maps` is made, in its order and words, the maps' values a block of rows at a time; the
    images are not read (their type and shape are checked). Memory: the per-row paths, labels and
    distances, and one block."""
    path = Path(path)
    fields = _read_fields(f, path, scanned=True)
    maps, retrieval = fields["maps"], fields["retrieval"]
    try:
        labels = _validate_fields(maps, fields["paths"], fields["labels"], fields["class_names"], fields["images"],
                                  retrieval, "saliency maps")
    except EmbedscopeError as e:
        raise EmbedscopeError(f"{path}: {e}") from None
    return MapsSummary(n=maps.shape[0], kind="pairs" if retrieval is not None else "maps",
                       map_shape=maps.shape[1:], paths=fields["paths"], labels=labels,
                       class_names=fields["class_names"], has_images=fields["images"] is not None,
                       retrieval_has_images=None if retrieval is None else retrieval["images"] is not None,
                       attrs=fields["attrs"], n_zero=maps.n_zero,
                       n_zero_retrieval=None if retrieval is None else retrieval["maps"].n_zero)


def match_rows(items: Sequence[Any], names: list[str] | None = None) -> tuple[list[np.ndarray], dict[str, Any]]:
    """The rows of every file that hold the images they all hold, in the first file's order (matched by path).

    ``items``: :class:`SaliencyMaps` or :class:`MapsFile` (anything with ``paths``, ``labels``,
    ``class_names``, ``n`` and ``map_shape``). Returns (one int64 index array per file, info with
    ``n_common``, per-file ``n_dropped`` and, when images were left out, ``spelling``: a
    :func:`~embedscope.store.embeddings.spelling_hint` when some differ only in spelling, else "").
    One-line errors: no common image; maps of different sizes; an image given different classes.
    """
    names = names or [sm.name for sm in items]
    if not items:
        raise EmbedscopeError("no maps files given")
    shapes = {tuple(sm.map_shape) for sm in items}
    if len(shapes) > 1:
        desc = ", ".join(f"{nm}: {sm.map_shape[0]}x{sm.map_shape[1]}" for nm, sm in zip(names, items))
        raise EmbedscopeError(
            f"the maps files have maps of different sizes ({desc}); compare maps of the same input size")
    common = set(items[0].paths)
    for sm in items[1:]:
        common &= set(sm.paths)
    if not common:
        from embedscope.store.embeddings import spelling_hint

        other = next((sm for sm in items[1:] if not set(sm.paths) & set(items[0].paths)), items[-1])
        counts = ", ".join(f"{nm}: {sm.n} image{'' if sm.n == 1 else 's'}" for nm, sm in zip(names, items))
        raise EmbedscopeError(
            f"the maps files share no image ({counts}"
            f"{spelling_hint(items[0].paths, other.paths)}); "
            "compute every model's maps on the same images (same --seed and --n-images, or one --paths-file)")
    order = [p for p in items[0].paths if p in common]
    out = []
    ref_classes = None
    for nm, sm in zip(names, items):
        pos = {p: i for i, p in enumerate(sm.paths)}
        idx = np.array([pos[p] for p in order], dtype=np.int64)
        cls = sm.class_names[sm.labels[idx]]
        if ref_classes is None:
            ref_classes = cls
        elif not np.array_equal(cls, ref_classes):
            bad = int(np.count_nonzero(cls != ref_classes))
            raise EmbedscopeError(f"{names[0]} and {nm} give {bad} of the common images different classes")
        out.append(idx)
    info = {"n_common": len(order), "n_dropped": {nm: sm.n - len(order) for nm, sm in zip(names, items)}}
    if len(order) < max(sm.n for sm in items):  # images left out: spelled otherwise in another file?
        from embedscope.store.embeddings import spelling_hint

        left = [[p for p in sm.paths if p not in common] for sm in items]
        info["spelling"] = next((h for other in left[1:] if (h := spelling_hint(left[0], other))), "")
    return out, info


def match_maps(items: list[SaliencyMaps], names: list[str] | None = None) -> tuple[list[SaliencyMaps], dict[str, Any]]:
    """Restrict every file to the images they all hold, in the first file's order (matched by path).

    Returns (matched files, info with ``n_common`` and per-file ``n_dropped``). One-line errors: no
    common image; maps of different sizes; an image given different classes (:func:`match_rows`).
    """
    rows, info = match_rows(items, names)
    return [sm.select(idx) for sm, idx in zip(items, rows)], info


class MapsFile:
    """A maps file open for reading by rows: the maps of N images are never all in memory.

    Opening reads and checks what grows with N alone (paths, labels, class names, attributes) and
    the datasets' shapes and types; :meth:`read_maps` reads the maps of given rows as float32 (as
    :func:`load_maps` converts them), :meth:`check_values` checks every map (finite, in [0, 1]) one
    block of rows at a time with :func:`load_maps`' messages, and :meth:`select` reads a few rows as
    a :class:`SaliencyMaps` (for figures). Use as a context manager (or :meth:`close`).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise EmbedscopeError(f"{self.path}: no such file")
        self._f = open_hdf5(self.path, "a saliency-maps file (.h5)")
        try:
            with readable(self.path):
                self._open()
        except BaseException:
            self._f.close()
            raise

    def _open(self) -> None:
        f, path = self._f, self.path
        _check_header(f, path)
        self.class_names = _strings(_dataset(f, "class_names", path), path)
        self.paths = _strings(_dataset(f, "paths", path), path).astype(str)
        self.labels = np.asarray(_dataset(f, "labels", path)[()])
        self.attrs = read_attrs(f.attrs)
        self.attrs["source_file"] = str(path)
        self.kind = "pairs" if "retrieval" in f else "maps"
        ds = _dataset(f, "maps", path)
        self._maps = ds
        self._images = _dataset(f, "images", path) if "images" in f else None
        src = "saliency maps"
        try:
            if ds.ndim != 3:
                raise EmbedscopeError(f"{src}: maps must be 3-D (N x H x W), got shape {ds.shape}")
            if np.dtype(ds.dtype).kind not in "biuf":  # load_maps reads any number as float32
                raise EmbedscopeError(f"{src}: maps must be floating point, got {np.dtype(ds.dtype)}")
            self.labels = _checked_rows(int(ds.shape[0]), self.paths, self.labels, self.class_names, src)
            _check_images(self._images, tuple(ds.shape), src)  # an h5py dataset: its dtype and shape only
        except EmbedscopeError as e:
            raise EmbedscopeError(f"{path}: {e}") from None

    @property
    def n(self) -> int:
        return int(self._maps.shape[0])

    @property
    def map_shape(self) -> tuple[int, int]:
        return tuple(int(x) for x in self._maps.shape[1:])

    @property
    def name(self) -> str:
        return str(self.attrs.get("name") or self.path.stem)

    def __len__(self) -> int:
        return self.n

    def __enter__(self) -> "MapsFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._f.close()

    def _rows(self, ds, idx) -> np.ndarray:
        with readable(self.path):
            return self._read_rows(ds, idx)

    def _read_rows(self, ds, idx) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64)
        if idx.size == 0:
            return ds[0:0]
        if idx.size == 1 or np.all(np.diff(idx) == 1):  # a run of rows: one slice
            return ds[int(idx[0]):int(idx[-1]) + 1]
        order = np.argsort(idx, kind="stable")
        out = ds[idx[order]]  # h5py reads rows given in increasing order (paths are unique: no repeats)
        back = np.empty_like(order)
        back[order] = np.arange(order.size)
        return out[back]

    def read_maps(self, idx) -> np.ndarray:
        """The maps of rows ``idx`` (in that order) as float32 [len(idx), H, W], as :func:`load_maps` gives them."""
        return self._rows(self._maps, idx).astype(np.float32)

    def block_rows(self, budget: int) -> int:
        """Rows of maps per block so that a block holds about ``budget`` map values (at least one row)."""
        h, w = self.map_shape
        return max(1, int(budget) // max(1, h * w))

    def check_values(self, block: int | None = None) -> None:
        """Every map finite and in [0, 1] (± 1e-3), read ``block`` rows at a time; :func:`load_maps`' errors."""
        n = self.n
        if not n:
            return
        step = block or self.block_rows(STREAM_ELEMENTS)
        lo, hi, finite = np.inf, -np.inf, True
        for s in range(0, n, step):
            m = self.read_maps(np.arange(s, min(n, s + step)))
            if not np.all(np.isfinite(m)):
                finite = False
                break
            lo, hi = min(lo, float(m.min())), max(hi, float(m.max()))
        if not finite:
            raise EmbedscopeError(f"{self.path}: saliency maps: maps contain NaN or inf")
        if lo < -1e-3 or hi > 1 + 1e-3:
            raise EmbedscopeError(f"{self.path}: saliency maps: maps must lie in [0, 1], got [{lo:.3g}, {hi:.3g}]")

    def select(self, idx) -> SaliencyMaps:
        """Rows ``idx`` as an in-memory :class:`SaliencyMaps` (maps, images, labels, paths)."""
        idx = np.asarray(idx, dtype=np.int64)
        images = None if self._images is None else self._rows(self._images, idx)
        return SaliencyMaps(maps=self.read_maps(idx), paths=self.paths[idx], labels=self.labels[idx],
                            class_names=self.class_names, images=images, attrs=dict(self.attrs))


def display_images(x, kind: str) -> np.ndarray:
    """Preprocessed inputs [N, C, H, W] as pictures: uint8 [N, H, W] (one channel) or [N, H, W, 3].

    Digits (x/16): ×255. Photos: ImageNet normalisation undone, clipped to [0, 1], ×255.
    """
    from embedscope.data.base import IMAGENET_MEAN, IMAGENET_STD

    x = np.asarray(x, dtype=np.float32)
    if kind == "image" and x.shape[1] == 3:
        x = x * np.asarray(IMAGENET_STD, np.float32)[None, :, None, None] + np.asarray(
            IMAGENET_MEAN, np.float32)[None, :, None, None]
    x = np.clip(x, 0.0, 1.0)
    pic = np.round(x * 255).astype(np.uint8)
    return pic[:, 0] if pic.shape[1] == 1 else np.moveaxis(pic, 1, -1)


__all__ = ["FORMAT", "FORMAT_VERSION", "SaliencyMaps", "MapsFile", "MapsSummary", "save_maps", "load_maps",
           "scan_maps_open", "match_maps", "match_rows", "display_images"]
