"""Embeddings made elsewhere -> an embedscope HDF5 file (``embedscope import``, ``docs/import.md``).

Sources: ``.npy`` (one N x D array), ``.npz`` / ``.pt`` / ``.safetensors`` / ``.h5`` (arrays by key; a
``.pt`` may also be a single tensor; read with ``torch.load(weights_only=True)``: no code runs; an
HDF5 file's datasets are its keys, ``group/name`` inside groups, text datasets read as UTF-8; of an
``.npz`` or ``.h5`` only the arrays used are read: :class:`_LazyColumns`),
``.parquet`` / ``.csv`` / ``.tsv`` (a table: the embedding is one list-valued column (of a CSV: list texts,
``"[0.1, 0.2]"``, :func:`number_lists`), or the
numeric columns). Labels, split, paths and class names come from a key/column of the source or
from a file of their own (``.npy``, ``.txt`` one value per line, a one-column ``.csv``/``.tsv``).
``split_by_class=f`` gives the zero-shot split: of the C classes that have rows, the first
``ceil(f * C)`` (sorted, or in ``class_names`` order) are "train", the rest "test". The file records
where it came from (``imported``, ``import_source``, ``import_sha256``, ``import_format``; the files
labels, split, paths or class names were read from: ``import_labels_file``, ...) and what
formed the embedding (``import_embedding_columns``: a table's columns; ``import_embedding_key``: the
key or list-valued column). A table's leading unnamed column holding distinct non-negative integers
(the row index that ``DataFrame.to_csv`` writes unless ``index=False``: 0..N-1, or of a filtered or
re-sorted frame e.g. 0, 2, 5, 7 or a permutation) is left out of the embedding.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from embedscope.data.properties import _exact_floats
from embedscope.errors import EmbedscopeError, UsageError

FORMATS = {".npy": "npy", ".npz": "npz", ".pt": "pt", ".pth": "pt", ".safetensors": "safetensors",
           ".parquet": "parquet", ".csv": "csv", ".tsv": "tsv", ".h5": "hdf5", ".hdf5": "hdf5"}
EMBEDDING_KEYS = ("embeddings", "embedding", "features", "feats", "X", "x", "emb")
LABEL_KEYS = ("labels", "label", "y", "targets", "target", "class", "classes")
SPLIT_KEYS = ("split",)
PATH_KEYS = ("paths", "path", "ids", "id", "filenames", "filename")
#: ``--labels key:NAME`` (and --split, --paths, --class-names): the key/column NAME, never a file
KEY_PREFIX = "key:"
_OPTIONS = {"labels": "--labels", "split": "--split", "paths": "--paths", "class names": "--class-names"}


class SplitReplaced(UserWarning):
    """The source holds a split column of its own, and ``split_by_class`` (or ``split`` naming another
    column or a file) replaced it: ``embedscope import`` says so in one line on stderr."""


#: column names (lower case, without spaces, '_', '-' and '.') that hold image paths or item ids by another
#: spelling than "path" / :data:`PATH_KEYS`, most likely first
_PATH_LIKE = ("path", "paths", "filepath", "filepaths", "imagepath", "imagepaths", "imgpath", "relpath",
              "relativepath", "fullpath", "filename", "filenames", "fname", "file", "files", "imagename",
              "imagefile", "imagefilename", "image", "images", "img", "imageid", "imgid", "id", "ids")


def path_column_candidates(columns: Sequence[Any], exact: Sequence[str] = PATH_KEYS, most: int = 3) -> list[str]:
    """The columns of a table that look like its column of image paths (or item ids) spelled otherwise:
    ``Path``, ``PATH``, `` path``, ``image_path``, ``filename``, ``Image ID``; a name holding "path" or
    "file" comes next. The names ``exact`` are not candidates (the command finds them as they are:
    :data:`PATH_KEYS` for import, "path" for add-properties).
    Used by ``add-properties`` ("no 'path' column (did you mean 'Path'?)") and ``import`` (a column that
    was not read as the paths). Most likely first, at most ``most``."""
    found = []
    for c in columns:
        name = str(c)
        if name in exact:
            continue
        key = re.sub(r"[\s_\-.]+", "", name.casefold())
        if key in _PATH_LIKE:
            found.append((_PATH_LIKE.index(key), name))
        elif "path" in key or "file" in key:
            found.append((len(_PATH_LIKE), name))
    return [name for _, name in sorted(found, key=lambda t: t[0])[:most]]


#: the separators a table's header may be written with, as a user names them
_SEPARATORS = {"\t": "tab", ",": "comma", ";": "semicolon", "|": "pipe"}


def separator_hint(path: Path, sep: str, columns: Sequence[Any]) -> str:
    """``"; a .csv is read comma-separated, and its header looks tab-separated: rename it .tsv"`` when a
    CSV/TSV's header was read as columns holding another separator (a spreadsheet's semicolon CSV: the
    whole header one column, ``path;w``), else ``""``."""
    names = [str(c) for c in columns]
    for other, word in _SEPARATORS.items():
        if other != sep and any(other in n for n in names) and (len(names) == 1 or other in "\t,"):
            suffix = path.suffix or "table"
            fix = {"\t": "rename it .tsv", ",": "rename it .csv"}.get(other, "save it comma-separated (CSV)")
            return f"; a {suffix} is read {_SEPARATORS[sep]}-separated, and its header looks {word}-separated: {fix}"
    return ""


def table_columns(path: Path, fmt: str) -> list[str] | None:
    """The column names of a CSV/TSV's header line as written (pandas renames a repeated ``w`` to
    ``w.1``) or of a Parquet file's schema (read from its footer only); None for other formats or a file
    with no header line."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with open(path, "rb") as fh:
            return [str(n) for n in pq.read_schema(fh).names]
    if fmt not in ("csv", "tsv"):
        return None
    import csv

    with open(path, newline="", encoding="utf-8-sig") as f:
        return next(csv.reader(f, delimiter="\t" if fmt == "tsv" else ","), None)


def check_unique_columns(path: Path, names: Sequence[str] | None, what: str = "column") -> None:
    """One line for a table that repeats a column name: pandas read a CSV's second ``w`` as ``w.1`` (a
    column the file does not have), pyarrow refused a Parquet file's ("Multiple matches for FieldRef")."""
    seen: set[str] = set()
    for n in names or ():
        if n in seen:
            raise EmbedscopeError(f"{path}: the column name '{_pretty(n)}' occurs twice: give each {what} "
                                  "its own name")
        seen.add(n)


def did_you_mean(names: Sequence[str]) -> str:
    """``did you mean 'a'?`` / ``did you mean 'a' or 'b'?`` (names escaped by the error line), or ""."""
    if not names:
        return ""
    shown = [f"'{_pretty(n)}'" for n in names]
    return "did you mean " + (shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]) + "?"


def _pretty(name: Any) -> str:
    from embedscope.models.checkpoint import printable

    return printable(name, 60)


#: how many keys/columns an error line names before "(+N more)": a 300-column table or a model's state
#: dict (122 keys for a ResNet-18) given as the source made a line of thousands of characters
KEYS_SHOWN = 20


def _key_list(keys: Any, empty: str = "") -> str:
    """``a, b, c`` of the first :data:`KEYS_SHOWN` keys (escaped), ``(+N more)`` after them."""
    keys = list(keys)
    text = ", ".join(map(_pretty, keys[:KEYS_SHOWN]))
    if len(keys) > KEYS_SHOWN:
        text += f" (+{len(keys) - KEYS_SHOWN} more)"
    return text or empty


#: top-level keys of model checkpoints (embedscope's, training scripts', Roth et al.'s, a
#: pytorch-metric-learning pair in one file, timm's EMA copy): such a file given to import is named so
_CHECKPOINT_KEYS = ("state_dict", "model_state_dict", "model", "trunk", "embedder", "state_dict_ema", "model_ema",
                    "optimizer", "optimizer_state_dict")

_WEIGHT_SUFFIXES = (".weight", ".bias", ".running_mean", ".running_var", ".num_batches_tracked")


def _weights_hint(src: "Source") -> str:
    """``; it holds a model's weights ...`` for a PyTorch / safetensors source whose keys are those of a
    state dict (most end in ``.weight``, ``.bias``, ...), else ""."""
    keys = [str(k) for k in src.keys()]
    if src.fmt not in ("pt", "safetensors") or len(keys) < 2 or any(k in EMBEDDING_KEYS for k in keys):
        return ""
    if sum(k.endswith(_WEIGHT_SUFFIXES) for k in keys) * 2 <= len(keys):
        return ""
    return ("; its keys are a model's weights (a state dict), not embeddings: embed images with it by "
            "embedscope embed (docs/checkpoint.md)")


def _message(msg: Any) -> str:
    """A library's error message, up to ~200 characters (its line numbers, "saw 4", the byte that could
    not be decoded: the useful part is often at the end); raw: the error line escapes it, as one line."""
    from embedscope.models.checkpoint import printable

    return printable(msg, 200)


#: the name under which the analyses (``embedscope properties``) measure the class labels: a
#: property of that name would take the labels' place
RESERVED_PROPERTY = "class"

#: the longest property name taken (``import --properties``, ``add-properties``), in characters: HDF5 takes
#: a name of any length, but a 70,000-character header cell (a table with no line breaks, a pasted
#: paragraph) was stored and printed whole in every line naming it (the properties table 70,000 wide)
MAX_PROPERTY_NAME = 255


def long_property_name(name: Any, source: Any, what: str = "column") -> str | None:
    """The one line refusing a property name longer than :data:`MAX_PROPERTY_NAME` characters (the name
    shortened in it), or None."""
    name = str(name)
    if len(name) <= MAX_PROPERTY_NAME:
        return None
    return (f"{source}: {what} name '{_pretty(name)}' is {len(name):,} characters long: a property name is at most "
            f"{MAX_PROPERTY_NAME} characters; rename the column")


def check_property_not_reserved(name: str, source: Any, what: str = "column") -> None:
    """One line refusing a property named ``class`` (``import --properties``, ``add-properties``), a name
    with a comma (``properties --properties x,y`` asks for ``x`` and ``y``: it could not be named) or one
    longer than :data:`MAX_PROPERTY_NAME` characters."""
    long = long_property_name(name, source, what)
    if long:
        raise EmbedscopeError(long)
    if name == RESERVED_PROPERTY:
        raise EmbedscopeError(f"{source}: {what} '{RESERVED_PROPERTY}' cannot be a property: '{RESERVED_PROPERTY}' is "
                              "the name under which the class labels are analysed; rename the column")
    if "," in str(name):  # stored, it was measured but could not be named: --properties x,y asked for 'x' and 'y'
        raise EmbedscopeError(f"{source}: {what} name '{name}' has a comma: 'embedscope properties --properties' "
                              "(comma-separated) could not name it; rename the column")


def _to_numpy(v: Any) -> np.ndarray:
    try:
        import torch

        if isinstance(v, torch.Tensor):
            v = v.detach().cpu()
            if v.is_floating_point() and v.dtype not in (torch.float32, torch.float64):
                v = v.float()
            return v.numpy()
    except ImportError:  # pragma: no cover
        pass
    return np.asarray(v)


class Source:
    """A source file read into named columns (``columns``: of an ``.npz`` or ``.h5``, a :class:`_LazyColumns`
    that reads an array when it is first used) and, for a bare array, ``matrix``."""

    def __init__(self, path: Path, fmt: str, columns: dict[str, Any], matrix: np.ndarray | None = None,
                 table: bool = False, text: dict[str, np.ndarray] | None = None) -> None:
        self.path, self.fmt, self.columns, self.matrix, self.table = path, fmt, columns, matrix, table
        #: a CSV/TSV's cells as written (no number parsing, no "NA" -> NaN): labels, paths, split,
        #: class names and text properties are taken from these
        self.text = text or {}
        #: a Parquet table's named index levels, read back as columns (a file of one column beside them
        #: is still a one-column file for :func:`read_vector`)
        self.index: list[str] = []

    def keys(self) -> list[str]:
        return list(self.columns)

    def ndim(self, key: str) -> int:
        """The number of dimensions of column ``key``; of a file read lazily, from its header (nothing read)."""
        if isinstance(self.columns, _LazyColumns):
            return self.columns.ndim(key)
        return int(np.ndim(self.columns[key]))


class _LazyColumns(Mapping):
    """The arrays of an ``.npz`` or ``.h5`` source by key, each read when first asked for (then kept):
    ``import`` reads only what it uses (a file that also holds its raw images is not read whole).
    ``shapes``: every key's shape, from the file's headers. A read that fails is the one-line error
    of :func:`read_source`, naming the file."""

    def __init__(self, path: Path, fmt: str, shapes: dict[str, tuple[int, ...]], load) -> None:
        self.path, self.fmt, self._shapes, self._load = path, fmt, shapes, load
        self._got: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        if key not in self._got:
            if key not in self._shapes:
                raise KeyError(key)
            try:
                self._got[key] = self._load(key)
            except EmbedscopeError:
                raise
            except Exception as e:  # noqa: BLE001 - as read_source: a bad file for the user
                raise _cannot_read(self.path, self.fmt, e) from None
        return self._got[key]

    def __contains__(self, key: object) -> bool:  # (Mapping's would read the array)
        return key in self._shapes

    def __iter__(self):
        return iter(self._shapes)

    def __len__(self) -> int:
        return len(self._shapes)

    def ndim(self, key: str) -> int:
        return len(self._shapes[key])


def _fmt_of(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(f"{path}: unknown file type '{_pretty(path.suffix)}' (import reads "
                         f"{', '.join(sorted(FORMATS))})")
    return fmt


def read_source(path: str | os.PathLike) -> Source:
    """Read a source file (no code from it runs); one-line errors for unreadable files."""
    path = Path(path)
    if not path.exists():
        raise EmbedscopeError(f"{path}: no such file")
    if not path.is_file():
        raise EmbedscopeError(f"{path}: not a regular file")
    fmt = _fmt_of(path)
    _check_signature(path, fmt)
    try:
        if fmt == "npy":
            arr = np.load(path, allow_pickle=False)
            return Source(path, fmt, {}, matrix=arr)
        if fmt == "npz":
            return _read_npz(path)
        if fmt == "safetensors":
            return _read_safetensors(path)
        if fmt == "pt":
            return _read_pt(path)
        if fmt == "hdf5":
            return _read_hdf5(path)
        import pandas as pd

        header = table_columns(path, fmt)
        check_unique_columns(path, header)
        if fmt in ("csv", "tsv") and header is not None and len(header) == 1:
            hint = separator_hint(path, "\t" if fmt == "tsv" else ",", header)
            if hint:  # (was "no labels: ... found path;label;e0")
                raise EmbedscopeError(f"{path}: the header is one column, '{_pretty(header[0])}'{hint}")
        if fmt == "parquet":
            from embedscope.tables import read_parquet

            df = read_parquet(path)
            # a named index (``df.set_index("path").to_parquet()``) comes back as the frame's index, not a
            # column: a column again, as ``to_csv`` writes it (an unnamed one, a row number, is dropped)
            named = [n for n in df.index.names if n is not None]
            if named:
                df = df.reset_index(level=named)
            src = Source(path, fmt, {str(c): df[c].to_numpy() for c in df.columns}, table=True)
            src.index = [str(n) for n in named]
            return src
        sep = "\t" if fmt == "tsv" else ","
        # numbers parsed exactly (pandas' default parser may be 1 ulp off); the cells as text too
        df = pd.read_csv(path, sep=sep, **_exact_floats(pd))
        raw = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False)
        return Source(path, fmt, {str(c): df[c].to_numpy() for c in df.columns}, table=True,
                      text={str(c): raw[c].to_numpy(dtype=object) for c in raw.columns})
    except EmbedscopeError:
        raise
    except Exception as e:  # noqa: BLE001 - any parser failure is a bad file for the user
        raise _cannot_read(path, fmt, e) from None


def _cannot_read(path: Path, fmt: str, e: Exception) -> EmbedscopeError:
    """The one line of a source (or of one of its arrays, read lazily) that the parser refused."""
    msg = str(e).splitlines()[0] if str(e) else e.__class__.__name__
    if fmt == "hdf5" and isinstance(e, OSError):  # (HDF5's file lock: was "cannot read as hdf5 (BlockingIOError: ...")
        from embedscope.fileio import hdf5_lock_failure

        locked = hdf5_lock_failure(path, msg)
        if locked is not None:
            return EmbedscopeError(locked)
    if isinstance(e, ValueError):
        if "allow_pickle" in msg or "Object arrays" in msg:
            msg = "holds Python objects (pickled); import reads plain arrays only"
        return EmbedscopeError(f"{path}: cannot read as {fmt}: {_message(msg)}")
    return EmbedscopeError(f"{path}: cannot read as {fmt} ({e.__class__.__name__}: {_message(msg)})")


def _read_npz(path: Path) -> Source:
    """An ``.npz``: its arrays' shapes from their ``.npy`` headers, the arrays read when used
    (``np.load(allow_pickle=False)``, one key at a time). An array of Python objects anywhere in the
    file is refused as ``np.load`` refuses it (seen in its header: nothing is unpickled)."""
    import zipfile

    from numpy.lib import format as npf

    shapes: dict[str, tuple[int, ...]] = {}
    with zipfile.ZipFile(path) as zf:
        for member in zf.namelist():
            key = member[:-4] if member.endswith(".npy") else member  # (NpzFile.files)
            with zf.open(member) as fp:
                if fp.read(len(npf.MAGIC_PREFIX)) != npf.MAGIC_PREFIX:
                    shapes[key] = ()  # not an array: np.load gives its bytes
                    continue
                fp.seek(0)
                shape, _, dtype = _npy_header(fp)
            if dtype.hasobject:
                raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
            shapes[key] = tuple(shape)

    def load(key: str) -> Any:
        with np.load(path, allow_pickle=False) as z:
            return z[key]

    return Source(path, "npz", _LazyColumns(path, "npz", shapes, load))


def _npy_header(fp) -> tuple:
    """(shape, fortran_order, dtype) of the ``.npy`` array that ``fp`` starts, its data not read."""
    from numpy.lib import format as npf

    version = npf.read_magic(fp)
    if version == (1, 0):
        return npf.read_array_header_1_0(fp)
    if version == (2, 0):
        return npf.read_array_header_2_0(fp)
    return npf._read_array_header(fp, version)  # (3.0: utf-8 field names; no public reader)


# the first bytes of each binary format, and those of formats a file is often mistaken for
_HDF5 = b"\x89HDF\r\n\x1a\n"
_SIGNATURES = {"npy": (b"\x93NUMPY",), "npz": (b"PK\x03\x04", b"PK\x05\x06"), "parquet": (b"PAR1",),
               "hdf5": (_HDF5,)}
_KNOWN = ((_HDF5, "an HDF5 file (embedscope's own is read directly by the analyses; another tool's: import "
                  "it as .h5)"),
          (b"PK\x03\x04", "a zip archive (a .npz or a PyTorch file?)"), (b"\x93NUMPY", "a .npy array"),
          (b"PAR1", "a Parquet table"), (b"\x80", "a Python pickle"))


def _check_signature(path: Path, fmt: str) -> None:
    """A binary format whose first bytes are not its own: one line saying what the file looks like
    (numpy's own error for a .npy that is not one speaks of pickled data)."""
    if fmt not in _SIGNATURES:
        return
    with open(path, "rb") as f:
        head = f.read(8)
    if any(head.startswith(s) for s in _SIGNATURES[fmt]):
        return
    if fmt == "hdf5" and head:  # (an HDF5 file with a user block has its signature at byte 512, 1024, ...)
        import h5py

        if h5py.is_hdf5(str(path)):
            return
    looks = next((what for sig, what in _KNOWN if head.startswith(sig)), "a format embedscope does not know")
    kind = "an HDF5 file" if fmt == "hdf5" else f"a .{fmt} file"
    raise EmbedscopeError(f"{path}: not {kind}: " + ("it is empty" if not head else f"it looks like {looks}"))


_DECIMAL_COMMA = re.compile(r"\s*[-+]?\d*,\d+\s*")


def _no_partly_numeric(src: Source, others: list[str]) -> None:
    """Left-over table columns that are not numeric are ignored, unless most of their cells are
    numbers: then one bad cell would silently drop an embedding dimension. A column of numbers written
    with decimal commas (``0,5``) is refused too: it would be dropped as text."""
    if not src.table:
        return
    import pandas as pd

    for k in others:
        v = pd.Series(src.columns[k])
        num = pd.to_numeric(v, errors="coerce")
        comma = v.map(lambda c: isinstance(c, str) and _DECIMAL_COMMA.fullmatch(c) is not None)
        if comma.any() and (comma | num.notna()).all():
            i = int(np.flatnonzero(comma.to_numpy())[0])
            raise EmbedscopeError(f"{src.path}: column '{_pretty(k)}' holds numbers written with a comma "
                                  f"(row {i}: '{_pretty(str(v.iloc[i]))}'): write them with a decimal point and no "
                                  "thousands separator, or name the embedding columns with --embeddings")
        bad = num.isna() & v.notna()
        if num.notna().sum() > bad.sum() > 0:
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise EmbedscopeError(f"{src.path}: column '{_pretty(k)}' is numbers but for {int(bad.sum())} cell(s) "
                                  f"(row {i}: '{_pretty(str(v.iloc[i]))}'); fix them, or name the embedding "
                                  "columns with --embeddings")


def _read_safetensors(path: Path) -> Source:
    """numpy has no bfloat16: a file holding one is read through torch (bfloat16 -> float32, exact)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        keys = list(f.keys())
        try:
            return Source(path, "safetensors", {k: f.get_tensor(k) for k in keys})
        except TypeError:  # "data type 'bfloat16' not understood"
            pass
    with safe_open(str(path), framework="pt") as f:
        return Source(path, "safetensors", {k: _to_numpy(f.get_tensor(k)) for k in keys})


def _read_pt(path: Path) -> Source:
    import pickle

    import torch

    from embedscope.models.checkpoint import _sniff

    _sniff(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise EmbedscopeError(f"{path}: holds objects other than tensors; import reads tensors and dicts of "
                              "tensors only (nothing from the file was run)") from None

    def dense(v: torch.Tensor, key: str | None) -> np.ndarray:
        if v.layout != torch.strided:  # numpy's own message ("can't convert Sparse layout ...") is cut short
            where = "" if key is None else f"'{_pretty(key)}': "
            raise EmbedscopeError(f"{path}: {where}sparse tensors are not supported: save tensor.to_dense()")
        return _to_numpy(v)

    if isinstance(obj, torch.Tensor):
        return Source(path, "pt", {}, matrix=dense(obj, None))
    if isinstance(obj, dict):
        cols = {}
        for k, v in obj.items():
            if isinstance(v, torch.Tensor):
                cols[str(k)] = dense(v, str(k))
            elif isinstance(v, (list, tuple)) and v and all(isinstance(x, (str, int, float)) for x in v):
                cols[str(k)] = np.asarray(v)
        if cols:
            return Source(path, "pt", cols)
        # (was "expected a tensor or a dict of tensors, got dict": a training checkpoint's nested dicts)
        hint = ("; it looks like a model checkpoint, not embeddings: embed images with it by embedscope embed "
                "(docs/checkpoint.md)" if any(str(k) in _CHECKPOINT_KEYS for k in obj) else "")
        raise EmbedscopeError(f"{path}: expected a tensor or a dict of tensors, got a dict with no tensor at its top "
                              f"level (keys: {_key_list(obj, 'none')}){hint}")
    raise EmbedscopeError(f"{path}: expected a tensor or a dict of tensors, got {type(obj).__name__}")


def _read_hdf5(path: Path) -> Source:
    """An HDF5 file of another tool: every dataset of one value per row or more is a key (``group/name``
    inside groups, in the file's order), read when used. Text datasets (fixed or variable length) are read
    as UTF-8 (ASCII is a part of it), numbers as stored; scalars and compound datasets are no keys. An
    embedscope embedding file is refused: the analyses read it as it is."""
    import h5py

    from embedscope.store.embeddings import REQUIRED

    shapes: dict[str, tuple[int, ...]] = {}
    with h5py.File(path, "r") as f:
        if all(k in f for k in REQUIRED):
            raise EmbedscopeError(f"{path}: already an embedscope embedding file: every analysis reads it as it is "
                                  "(nothing to import; embedscope info shows what it holds)")
        from embedscope.store.saliency import FORMAT as MAPS_FORMAT

        fmt = f.attrs.get("format", "")
        if (fmt.decode("utf-8", "replace") if isinstance(fmt, bytes) else str(fmt)) == MAPS_FORMAT:
            raise EmbedscopeError(f"{path}: a saliency-maps file (from 'embedscope saliency'), not embeddings")

        def take(name: str, obj: Any) -> None:
            if not isinstance(obj, h5py.Dataset) or obj.shape == () or obj.dtype.names is not None:
                return
            if h5py.check_string_dtype(obj.dtype) is not None or obj.dtype.kind in "biuf":
                shapes[name] = () if obj.shape is None else tuple(obj.shape)  # (None: an empty dataspace)

        f.visititems(take)

    def load(name: str) -> np.ndarray:
        with h5py.File(path, "r") as f:
            obj = f[name]
            if h5py.check_string_dtype(obj.dtype) is not None:
                return np.asarray(obj.asstr(encoding="utf-8")[()], dtype=object)
            return obj[()]

    return Source(path, "hdf5", _LazyColumns(path, "hdf5", shapes, load))


def read_vector(path: str | os.PathLike, what: str) -> np.ndarray:
    """One value per row from a file of its own (``.npy``, ``.txt``, one-column ``.csv``/``.tsv``, ``.pt``).

    A one-column CSV/TSV's first line is a value when it is of the same kind as the rest (see
    :func:`_header_is_a_value`), else the column's name.
    """
    return _read_vector(path, what)[0]


def _read_vector(path: str | os.PathLike, what: str) -> tuple[np.ndarray, str | None]:
    """:func:`read_vector`, and the column name a one-column CSV/TSV's first line was read as (else None)."""
    path = Path(path)
    header = None
    if path.suffix.lower() == ".txt":
        if path.exists() and not path.is_file():  # (a named pipe's read waited for a writer)
            raise EmbedscopeError(f"{path}: not a regular file (a folder, a device or a named pipe), expected the {what}")
        try:
            # (a BOM is no part of the first value; a line ends at \n, \r\n or \r only, as read_paths_file's)
            lines = path.read_text(encoding="utf-8-sig").split("\n")
        except (OSError, UnicodeDecodeError) as e:
            raise EmbedscopeError(f"{path}: cannot read the {what} ({e.__class__.__name__})") from None
        while lines and not lines[-1].strip():
            lines.pop()
        vals = np.array([s.strip() for s in lines], dtype=object)
        return ints_if_exact(vals), None
    src = read_source(path)
    if len(src.columns) - len(src.index) == 1:  # one column beside a Parquet table's named index
        src.columns = {k: v for k, v in src.columns.items() if k not in src.index}
    if src.matrix is not None:
        arr = src.matrix
    elif len(src.columns) == 1:
        name, arr = next(iter(src.columns.items()))
        if src.fmt in ("csv", "tsv") and _header_is_a_value(name, src.text.get(name, ())):
            arr = _read_headerless(path, src.fmt, what)
        elif src.fmt in ("csv", "tsv"):  # the cells as written where they are texts ("007" is not 7)
            header = str(name)
            arr = _file_cells(src.text[name], arr, what)
    else:
        raise EmbedscopeError(f"{path}: the {what} file must hold one column or array, found "
                              f"{_key_list(src.keys())}")
    arr = np.asarray(arr)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.reshape(-1)
    if arr.ndim != 1:
        raise EmbedscopeError(f"{path}: the {what} must be one value per row, got shape {arr.shape}")
    return _decoded(arr, path, what), header


def _number(cell: str, *, integer: bool) -> bool:
    try:
        x = int(cell) if integer else float(cell)
    except (TypeError, ValueError):
        return False
    return math.isfinite(x)


def _header_is_a_value(name: str, cells: Sequence[str]) -> bool:
    """A one-column CSV/TSV without a header: pandas reads its first line as the column name. That
    line is a value when it is of the same kind as the rest: an integer among integers, a number
    among numbers, or (text) one of the other cells (a column's name is not one of its values)."""
    first = str(name).strip()
    cells = [str(c).strip() for c in cells if str(c).strip()]  # (an empty cell is an error of its own)
    for integer in (True, False):
        if _number(first, integer=integer) and all(_number(c, integer=integer) for c in cells):
            return True
    if _number(first, integer=False) or any(_number(c, integer=False) for c in cells):
        return False
    return first in set(cells)


def _read_headerless(path: Path, fmt: str, what: str) -> np.ndarray:
    """The one column of a CSV/TSV without a header line, read as :func:`_file_cells` reads it with one: texts
    as written (class names "007" and "7" were both the number 7), plain integers as integers."""
    import pandas as pd

    sep = "\t" if fmt == "tsv" else ","
    try:
        df = pd.read_csv(path, sep=sep, header=None, **_exact_floats(pd))
        raw = pd.read_csv(path, sep=sep, header=None, dtype=str, keep_default_na=False)
    except Exception as e:  # noqa: BLE001 - read once already: only a file changed meanwhile gets here
        raise EmbedscopeError(f"{path}: cannot read as {fmt} ({e.__class__.__name__}: {_message(e)})") from None
    return _file_cells(raw[raw.columns[0]].to_numpy(dtype=object), df[df.columns[0]].to_numpy(), what)


def ints_if_exact(text: np.ndarray) -> np.ndarray:
    """Cells as written -> int64 when every one is an integer written plainly (``7``, ``-3``), else
    the text itself: ``007``, ``+7``, ``-0``, ``1_000`` or ``NA`` stay as written (a class named "007" or
    an item id "0042" is not the number 7 or 42; ``+7`` and ``-0`` read as integers would be one value with
    ``7`` and ``0``: a cell is an integer only as Python writes that integer)."""
    try:
        ints = [int(v) for v in text]
    except (TypeError, ValueError):
        return text
    if all(str(i) == v for i, v in zip(ints, text)) and all(-2**63 <= i < 2**63 for i in ints):
        return np.array(ints, dtype=np.int64)
    return text  # (an integer beyond int64, a 30-digit id, was "OverflowError: Python int too large ...")


def property_cells(cells: np.ndarray, parsed: np.ndarray) -> np.ndarray:
    """A CSV/TSV property column from its cells as written and as pandas parsed them: integers when every
    cell is a plainly written integer (:func:`ints_if_exact`), floats when pandas read every cell as a
    number and some is not an integer (``1.5``, ``1e-3``: parsed exactly), else the text as written (``0001``
    and ``1`` stay two values, as ``add-properties`` reads them). A zero-padded cell (``0001``, ``-007``)
    keeps its column text beside a ``1.5`` too: ids ``0001``, ``0002``, ``12E3`` were the numbers 1.0, 2.0
    and 12000.0. Spaces (and tabs) around a number are not a part of it, for integers as for floats, as
    pandas parses them: `` 7 `` is 7 as `` 0.5`` is 0.5 (`` 7 `` stayed the text " 7 ", and a column of
    ``7`` and `` 7 `` held two values); around text they are kept."""
    ints = _ints_through_blanks(cells, parsed)
    if ints.dtype.kind == "i":
        return ints
    parsed = np.asarray(parsed)
    if parsed.dtype.kind == "f" and not np.isnan(parsed).any() and not _PADDED.search("\n".join(map(str, cells))):
        return parsed
    return cells


def _ints_through_blanks(cells: np.ndarray, parsed: np.ndarray) -> np.ndarray:
    """:func:`ints_if_exact` of the cells, the spaces (and tabs) around them left out where pandas read every
    cell as an integer through them (`` 7 `` is 7), else the cells as they are."""
    ints = ints_if_exact(cells)
    # (stripped only where pandas read integers, which it does through the blanks: a column of floats or text
    # is not gone through again)
    if ints.dtype.kind != "i" and np.asarray(parsed).dtype.kind in "iu" and any(v != v.strip(_BLANKS) for v in cells
                                                                                if isinstance(v, str)):
        ints = ints_if_exact(np.array([v.strip(_BLANKS) if isinstance(v, str) else v for v in cells], dtype=object))
    return ints


def name_cells(cells: np.ndarray, parsed: np.ndarray, what: str) -> np.ndarray:
    """A table's CSV/TSV column of labels, split, paths or class names (``what``), and a one-column file of paths
    or class names, from its cells as written and as pandas parsed them: integers when every cell is a plainly
    written integer, the spaces around it not a part of it as in a property column (`` 7 `` and ``7`` are one
    class, as in a one-column file and a ``.txt``) but in paths, stored exactly as written; else the texts as
    written, never floats (class names ``1.10`` and ``1.1`` were the number 1.1 twice, "class names repeat"; a
    paths file's ``1e3`` became the path ``1000.0``, ``1.10`` became ``1.1``)."""
    return ints_if_exact(cells) if what == "paths" else _ints_through_blanks(cells, parsed)


def _file_cells(cells: np.ndarray, parsed: np.ndarray, what: str) -> np.ndarray:
    """The cells of a one-column CSV/TSV of ``what``: paths and class names as :func:`name_cells` (names, stored
    as text), labels and split as :func:`property_cells`: numbers when every cell is a number none zero-padded
    (a labels file of ``1.0``, ``2.0`` is the classes 1 and 2; of ``0.5`` refused, not integers)."""
    return name_cells(cells, parsed, what) if what in ("paths", "class names") else property_cells(cells, parsed)


#: what pandas' parser skips around a number (not a no-break space: " 7\xa0" stays text there)
_BLANKS = " \t\f\v\r\n"

# a zero-padded number as written (0.5 is not) at the start of a cell: the cells searched as one text, a
# cell a line (a cell a regular expression matched one at a time took a third of reading a 100k-row table)
_PADDED = re.compile(r"^\s*[+-]?0[0-9]", re.MULTILINE)


def _decoded(arr: Any, where: Path, what: str) -> np.ndarray:
    """Text stored as bytes (numpy ``S``: what ``np.char.encode`` and h5py write) -> str, read as UTF-8
    (ASCII is a part of it). ``astype(str)`` read it as ASCII: a path ``café.jpg`` stopped with a bare
    UnicodeDecodeError naming no file, and class names became ``"b'cat'"``."""
    arr = np.asarray(arr)
    if arr.dtype.kind != "S":
        return arr
    out = np.empty(arr.shape, dtype=object)
    for i, b in enumerate(arr.reshape(-1)):
        try:
            out.flat[i] = bytes(b).decode("utf-8")
        except UnicodeDecodeError:
            raise EmbedscopeError(f"{where}: {what}: row {i} is bytes that are not UTF-8 text") from None
    return out


def _values(src: Source, key: str, what: str) -> np.ndarray:
    """A column for labels, split, paths or class names: a CSV/TSV's as its cells are written
    (:func:`name_cells`: integers when every cell is a plain integer), other sources' as stored (bytes read
    as UTF-8)."""
    if key in src.text:
        return name_cells(src.text[key], src.columns[key], what)
    return _decoded(src.columns[key], src.path, what)


def _property_objects(path: Path, name: str, v: np.ndarray) -> np.ndarray:
    """A property column of objects (a Parquet column of bytes or lists) as the store takes it: bytes read as
    UTF-8 (those that are not: one line naming the row), nested values (lists, maps, arrays) refused. Both
    were a bare error of the store's writer (``ValueError: setting an array element with a sequence``,
    ``UnicodeDecodeError: 'ascii' codec ...``); ``add-properties`` refuses them alike."""
    v = np.asarray(v)
    if v.dtype.kind != "O" or v.ndim != 1:
        return v
    return object_cells(path, f"property '{_pretty(name)}'", v, first_row=0)


def object_cells(path: Path, what: str, cells: np.ndarray, *, first_row: int, as_text: bool = False) -> np.ndarray:
    """A column of objects (``what``: "property 'w'", "column 'w'") as a property's cells: bytes read as UTF-8,
    those that are not one line naming the row (counted from ``first_row``); nested values (lists, tuples,
    maps, sets, arrays) refused in one line. ``as_text``: every other cell as its text (a table's column),
    else as it is (a copy only where bytes were decoded). For ``import --properties`` and ``add-properties``."""
    out = cells
    for i, x in enumerate(cells):
        if isinstance(x, (list, tuple, dict, set, np.ndarray)):
            kind = "list" if isinstance(x, (list, tuple, np.ndarray)) else type(x).__name__
            raise EmbedscopeError(f"{path}: {what} holds {kind} values (row {i + first_row}): a property is one "
                                  "number or text per image")
        if isinstance(x, (bytes, bytearray, memoryview)):
            try:
                x = bytes(x).decode("utf-8")
            except UnicodeDecodeError as e:
                raise EmbedscopeError(f"{path}: {what}, row {i + first_row}: bytes that are not UTF-8 text (byte "
                                      f"0x{e.object[e.start]:02x} at position {e.start}): store text, or decode the "
                                      "bytes first") from None
        elif not as_text:
            continue
        if out is cells:
            out = np.array(cells, dtype=object, copy=True)
        out[i] = x if isinstance(x, str) else str(x)
    return out


def _check_present(path: Path, what: str, arr: np.ndarray | None) -> None:
    """No empty cells (None, NaN, ''): a missing label or path would otherwise become the class or
    the item "nan" / "None"."""
    if arr is None or arr.ndim != 1:
        return
    if arr.dtype.kind == "f":
        bad = np.isnan(arr)
    elif arr.dtype.kind == "O":
        bad = np.array([v is None or (isinstance(v, float) and v != v) or (isinstance(v, str) and v == "")
                        for v in arr], dtype=bool)
    elif arr.dtype.kind in "US":
        bad = arr == arr.dtype.type()
    else:
        return
    if bad.any():
        raise EmbedscopeError(f"{path}: {what}: {int(bad.sum())} empty value(s) (first: row "
                              f"{int(np.flatnonzero(bad)[0])}); every row needs one")


def _column(src: Source, spec: str | None, defaults: Sequence[str], what: str, used: set[str],
            origin: dict[str, tuple[Path, str | None]] | None = None) -> np.ndarray | None:
    """``spec`` names a key/column of the source or a file; None tries ``defaults``. A file it was
    read from is recorded in ``origin[what]``, with the column name its first line was read as (a
    one-column CSV/TSV with a header; else None): errors about the values name that file.

    ``key:NAME`` (:data:`KEY_PREFIX`) is always the key/column NAME. A plain ``spec`` that is both a
    key/column and an existing file is refused (:class:`UsageError` naming both readings): ``key:NAME``
    takes the column, ``./NAME`` or the file's full path the file (docs/import.md)."""
    if spec is None:
        for k in defaults:
            if k in src.columns:
                used.add(k)
                return _values(src, k, what)
        return None
    spec = os.fspath(spec) if isinstance(spec, os.PathLike) else spec
    key = _spec_key(spec)
    option = _OPTIONS.get(what, what)
    if key in src.columns:
        if key == spec and Path(spec).is_file():
            as_file = str(Path(spec).resolve()) if ("/" in str(spec) or os.sep in str(spec)) else f"./{spec}"
            raise UsageError(f"{option} {_pretty(spec)} is both a key/column of {src.path} and a file: give "
                             f"{option} {KEY_PREFIX}{_pretty(spec)} for the column, or {option} {_pretty(as_file)} "
                             "for the file")
        used.add(key)
        return _values(src, key, what)
    if key == spec and Path(spec).is_file():
        arr, header = _read_vector(spec, what)
        if origin is not None:
            origin[what] = (Path(spec), header)
        return arr
    if key == spec and os.path.exists(spec):  # a folder, a named pipe, a device (a pipe's read waited for a
        # writer, for ever; both were "no such file")
        what_is = "a directory" if os.path.isdir(spec) else "not a regular file (a device, a named pipe or a socket)"
        raise EmbedscopeError(f"{option} {_pretty(spec)}: {what_is}, expected a file of the {what} (or a key/column "
                              f"of {src.path})")
    keys = _key_list(src.keys(), "none (the source is one array)")
    mean = did_you_mean(_close_keys(key, list(src.keys())))  # (--paths path for a column 'Path')
    mean = f"{mean} " if mean else ""
    if key != spec:
        raise EmbedscopeError(f"{src.path}: no key or column '{_pretty(key)}' for the {what} ({option} "
                              f"{_pretty(spec)}: '{KEY_PREFIX}' names a key/column, never a file) ({mean}keys/columns: "
                              f"{keys})")
    raise EmbedscopeError(f"{src.path}: no key or column '{_pretty(spec)}' for the {what}, and no such file "
                          f"({mean}keys/columns: {keys})")


def _close_keys(key: str, keys: list[str]) -> list[str]:
    """The keys spelled like ``key`` but for letter case and spaces around it, else those difflib finds close."""
    import difflib

    folded = [k for k in keys if str(k).strip().casefold() == str(key).strip().casefold()]
    return folded or difflib.get_close_matches(str(key), [str(k) for k in keys], n=2, cutoff=0.75)


def _spec_key(spec: str) -> str:
    """The key/column a FILE|KEY value names when read as one: ``key:NAME`` -> NAME, else the value."""
    return spec[len(KEY_PREFIX):] if isinstance(spec, str) and spec.startswith(KEY_PREFIX) else spec


#: a number in a list cell as JSON or Python writes it (``-1.5e-3``, ``7``; also ``+1``, ``.5``, ``5.``); ASCII
#: digits only (``float`` reads other scripts' digits and ``1_000``: no number of a JSON list)
_NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_NUMBER_LIST = re.compile(rf"\s*\[\s*{_NUMBER}(?:\s*,\s*{_NUMBER})*\s*\]\s*", re.ASCII)
_NUMBER_ONLY = re.compile(rf"\s*{_NUMBER}\s*", re.ASCII)
_NOT_FINITE = re.compile(r"\s*[+-]?(?:nan|inf|infinity)\s*", re.ASCII | re.IGNORECASE)
#: numpy's print of an array (``str(x)``, what ``to_csv`` writes of a column of arrays): numbers without commas,
#: rounded to 8 decimals, a long array shortened with "..."
_NUMPY_ITEM = rf"(?:{_NUMBER}|[+-]?nan|[+-]?inf|\.\.\.)"
#: (items apart by blanks: "(?:item\s*)+" tried every split of a long run of digits, seconds for 24 of them)
_NUMPY_PRINT = re.compile(rf"\s*\[\s*{_NUMPY_ITEM}(?:\s+{_NUMPY_ITEM})*\s*\]\s*", re.ASCII | re.IGNORECASE)


def _list_text(cells: Any) -> np.ndarray | None:
    """A table column's cells when they are texts of lists (``"[0.1, 0.2]"``, what ``DataFrame.to_csv`` writes of
    a column of lists): some cell, as written, starts with ``[`` and every cell is text or empty; else None."""
    cells = np.asarray(cells, dtype=object)
    if cells.ndim != 1 or not all(c is None or isinstance(c, str) for c in cells):
        return None
    if not any(isinstance(c, str) and c.lstrip().startswith("[") for c in cells):
        return None
    return cells


def number_lists(path: Any, column: str, cells: Sequence[Any]) -> np.ndarray:
    """The cells of a table column, each the text of a list of numbers (``"[0.1, -2e-3, 7]"``: JSON, or a Python
    list of ``int``/``float`` as ``DataFrame.to_csv`` writes it), as an N x D float64 array: every number parsed
    exactly (``float``, correctly rounded). Nothing is evaluated: a cell must match a list of numbers as a whole.
    One line, naming the column and the first bad row (counted from 0, as the table's rows), for an empty cell,
    a cell that is no list of numbers (numpy's print of an array, ``np.float64(...)`` items, text, nested lists),
    an empty list, NaN or inf, and lists of different lengths."""
    from embedscope.text import quoted

    where = f"{path}: column '{_pretty(column)}'"
    out: np.ndarray | None = None
    for i, cell in enumerate(cells):
        text = cell if isinstance(cell, str) else ""
        if not text.strip():
            raise EmbedscopeError(f"{where}: row {i} is empty: every row of the embeddings needs a list of numbers")
        if _NUMBER_LIST.fullmatch(text) is None:
            raise EmbedscopeError(f"{where}, row {i}: {_not_a_number_list(text)}")
        items = text.strip()[1:-1].split(",")
        if out is None:
            out = np.empty((len(cells), len(items)), dtype=np.float64)
        elif len(items) != out.shape[1]:
            raise EmbedscopeError(f"{where}, row {i}: a list of {len(items)} numbers, but row 0's has {out.shape[1]}: "
                                  "every row of the embeddings needs as many")
        out[i] = list(map(float, items))  # (checked above: no "1_000", "nan" or other scripts' digits)
        if not np.isfinite(out[i]).all():  # (a number beyond float64's range, 1e999, reads as inf)
            j = int(np.flatnonzero(~np.isfinite(out[i]))[0])
            raise EmbedscopeError(f"{where}, row {i}: number {j}, {quoted(_pretty(items[j].strip()))}, is beyond "
                                  "float64's range (inf): the embeddings must be finite numbers")
    if out is None:
        raise EmbedscopeError(f"{where}: no rows")
    return out


def _not_a_number_list(text: str) -> str:
    """Why a cell is not a list of numbers (its text shortened, in quotes: the error line escapes it)."""
    from embedscope.text import quoted

    shown = quoted(_pretty(text.strip()))
    body = text.strip()
    if re.fullmatch(r"\[\s*\]", body):
        return "an empty list []: every row of the embeddings needs at least one number"
    if "np.float" in body or "np.int" in body:
        return (f"{shown} holds numpy scalars (np.float64(...)), not numbers: write each row as a list of numbers "
                "(x.tolist())")
    if _NUMPY_PRINT.fullmatch(body) and "," not in body:
        return (f"{shown} is numpy's print of an array (numbers without commas: rounded to 8 decimals, a long "
                "array shortened with '...'): write each row as a list of numbers (x.tolist()), or one column per "
                "dimension")
    if not (body.startswith("[") and body.endswith("]")):
        return f"{shown} is not a list of numbers [x, y, ...]"
    items = [t.strip() for t in body[1:-1].split(",")]
    for j, t in enumerate(items):
        if _NOT_FINITE.fullmatch(t):
            return f"number {j} is {quoted(_pretty(t))}: the embeddings must be finite numbers (no NaN or inf)"
        if not _NUMBER_ONLY.fullmatch(t):
            what = "an empty item" if not t else f"{quoted(_pretty(t))}, not a number"
            return f"item {j} of {shown} is {what}: a row is a list of numbers [x, y, ...]"
    return f"{shown} is not a list of numbers [x, y, ...]"  # pragma: no cover - (every way out is named above)


def _list_columns(src: Source, keys: Sequence[str]) -> list[str]:
    """Those of a table's columns ``keys`` that hold lists (a Parquet list column) or texts of lists (a CSV's
    ``"[0.1, 0.2]"``): ``--embeddings COLUMN`` reads them."""
    out = []
    for k in keys:
        cells = src.text.get(k, src.columns[k])
        v = np.asarray(src.columns[k])
        if _list_text(cells) is not None or (v.dtype == object and v.ndim == 1 and len(v)
                                             and isinstance(v[0], (list, tuple, np.ndarray))):
            out.append(k)
    return out


def _embeddings(src: Source, spec: str | None, used: set[str], info: dict[str, Any]) -> np.ndarray | None:
    """The embeddings named by ``spec`` (or found by key); ``info`` records what formed them:
    ``columns`` (a table's columns), or ``key`` (a key or list-valued column) with ``others``, the
    other keys that could have been it."""
    if src.matrix is not None:
        if spec is not None:  # (it named nothing and the one array was taken without a word)
            raise EmbedscopeError(f"{src.path}: --embeddings {_pretty(spec)} names a key or column, but the source "
                                  "is one array (no keys or columns): drop --embeddings")
        return src.matrix
    if spec is not None and spec.endswith("*"):
        cols = [k for k in src.columns if k.startswith(spec[:-1]) and k not in used]
        taken = [k for k in src.columns if k.startswith(spec[:-1]) and k in used]
        if not cols:
            if taken:
                raise EmbedscopeError(f"{src.path}: no column starting with '{_pretty(spec[:-1])}' is left for the "
                                      f"embeddings: {_names(taken)} are taken as labels, split, paths or properties")
            raise EmbedscopeError(f"{src.path}: no columns start with '{_pretty(spec[:-1])}'")
        text = [c for c in cols if np.asarray(src.columns[c]).dtype.kind not in "fiu"]
        if text:  # (was "the embeddings must be numbers, got object", naming no column)
            import shlex

            lists = _list_columns(src, text)
            also = (f" ('{_pretty(lists[0])}' holds lists: --embeddings {_pretty(shlex.quote(lists[0]))} reads it "
                    "alone)" if lists else "")
            raise EmbedscopeError(f"{src.path}: --embeddings {_pretty(spec)} takes {_names(text)} too, which "
                                  f"{'is' if len(text) == 1 else 'are'} not numeric: name the embedding columns "
                                  f"by a prefix that only they share{also}")
        used.update(cols)
        info["columns"] = cols
        if taken:  # (a --properties column matching the prefix left the embedding without a word)
            info["prefix_taken"] = taken
        return np.column_stack([src.columns[c] for c in cols])
    names = [spec] if spec else [k for k in EMBEDDING_KEYS if k in src.columns]
    if spec and spec not in src.columns:
        mean = did_you_mean(_close_keys(spec, list(src.keys())))
        raise EmbedscopeError(f"{src.path}: no key or column '{_pretty(spec)}' ({mean + ' ' if mean else ''}"
                              f"keys/columns: {_key_list(src.keys())})")
    if names:
        v = src.columns[names[0]]
        used.add(names[0])
        one_number = src.table and np.ndim(v) == 1 and np.asarray(v).dtype.kind in "fiu"  # (a column, a number a row)
        if one_number and spec:
            # one named numeric column: a D = 1 embedding, as 'PREFIX*' taking one column and a table's
            # one numeric column left over are (was "must be a 2-D array (N x D), got shape (40,)")
            info["columns"] = [names[0]]
            return np.asarray(v)[:, None]
        if one_number:
            import shlex  # (found by its name, a number per row: the error named no column)

            raise EmbedscopeError(f"{src.path}: column '{_pretty(names[0])}', taken for the embeddings by its name, "
                                  f"holds one number per row: give --embeddings {_pretty(shlex.quote(names[0]))} for a "
                                  "D = 1 embedding, or name the embedding columns with --embeddings COLUMN or PREFIX*")
        lists = _list_text(src.text.get(names[0], v)) if src.table and np.ndim(v) == 1 else None
        if lists is not None:  # a CSV's "[0.1, 0.2, ...]" per cell (to_csv of a column of lists)
            info["key"] = names[0]
            return number_lists(src.path, names[0], lists)
        if src.table and np.ndim(v) == 1 and np.asarray(v).dtype.kind not in "fiu":
            _refuse_scalar_text(src, names[0], np.asarray(v), spec)
        info["key"] = names[0]
        if spec and not src.table and src.ndim(names[0]) == 1:  # (the error named no key)
            raise EmbedscopeError(f"{src.path}: --embeddings {_pretty(spec)} names a 1-D array (one value per row, "
                                  f"shape {tuple(np.shape(v))}); the embeddings must be N x D: for D = 1 store it "
                                  "as N x 1 (X[:, None])")
        if not spec:  # found by name: the other keys it could have been
            info["others"] = names[1:] + [k for k in src.columns if k not in names and k not in used
                                          and not src.table and src.ndim(k) == 2]
        if v.dtype == object:  # a list-valued table column
            try:
                return np.stack([np.asarray(x, dtype=np.float64) for x in v])
            except (ValueError, TypeError):
                raise EmbedscopeError(f"{src.path}: column '{_pretty(names[0])}' does not hold equal-length "
                                      "number lists") from None
        return v
    if not src.table:
        two_d = [k for k in src.columns if src.ndim(k) == 2]
        if len(two_d) == 1:
            used.add(two_d[0])
            info["key"] = two_d[0]
            return src.columns[two_d[0]]
        raise EmbedscopeError(f"{src.path}: which array holds the embeddings? name it with --embeddings "
                              f"(keys: {_key_list(src.keys())})")
    return None  # tables: the numeric columns left over, chosen by the caller


def _formed_by(info: dict[str, Any]) -> str:
    """`` (key 'x')`` for an error about the embeddings taken from one key (a 1-D or text array of an ``.npz``
    found by its name named none), else ""."""
    key = info.get("key")
    return f" (key '{_pretty(key)}')" if isinstance(key, str) else ""


def _refuse_scalar_text(src: Source, name: str, v: np.ndarray, spec: str | None) -> None:
    """A table column taken for the embeddings (named by ``--embeddings``, or found by its name, ``x``)
    that holds one value per row and not a number: refused naming it and what it holds (text was "the
    embeddings must be a 2-D array, got shape (4,)" or "does not hold equal-length number lists", true/false
    values the former, naming no column). A column of number lists (a cell that is a list) goes on."""
    cells = v.tolist() if v.dtype == object else []
    if any(isinstance(x, (list, tuple, np.ndarray)) for x in cells):
        return  # (lists: stacked, or refused as not equal-length)
    if v.dtype.kind in "USa" or any(isinstance(x, (str, bytes)) for x in cells):
        what = "text"
    elif v.dtype.kind == "b" or (cells and all(isinstance(x, (bool, np.bool_)) for x in cells)):
        what = "true/false values"
    elif cells and all(x is None for x in cells):
        what = "empty cells only"
    else:
        what = f"{v.dtype} values"
    how = f"named by --embeddings {_pretty(spec)}" if spec else "taken for the embeddings by its name"
    raise EmbedscopeError(f"{src.path}: column '{_pretty(name)}', {how}, holds {what}, not numbers: name the "
                          "embedding columns (numbers, or lists of numbers) with --embeddings COLUMN or PREFIX*")


#: the name pandas gives a header cell left empty (``Unnamed: 0``), and pyarrow a stored index
_UNNAMED = re.compile(r"Unnamed: \d+|__index_level_\d+__|\s*")


def _row_index_column(src: Source, cols: list[str]) -> str | None:
    """A table's first column when it is unnamed and holds distinct non-negative integers (of an integer
    dtype, or floats that are all integral): the row index that ``DataFrame.to_csv(path)`` writes unless
    ``index=False`` (0, 1, ..., N-1, or of a filtered or re-sorted frame 0, 2, 5, 7 or a permutation),
    not an embedding dimension."""
    if not src.table or not src.columns:
        return None
    first = next(iter(src.columns))
    if first not in cols or not _UNNAMED.fullmatch(first):
        return None
    v = np.asarray(src.columns[first])
    if v.ndim != 1 or v.size < 2 or v.dtype.kind not in "fiu":
        return None
    if v.dtype.kind == "f":  # (integral floats: an index read back as float, e.g. beside a missing cell)
        if not (np.all(np.isfinite(v)) and np.all(v == np.floor(v)) and np.max(np.abs(v)) < 2.0 ** 53):
            return None
    if v.min() < 0 or np.unique(v).size != v.size:
        return None
    return first


def _row_index_words(v: np.ndarray) -> str:
    """What the note says of a row-index column left out: 'the row index 0..N-1' when it is exactly that,
    else the row index of a filtered or sorted frame, its count and range."""
    v = np.asarray(v)
    if np.array_equal(v, np.arange(v.size)):
        return f"the row index 0..{v.size - 1} (pandas' to_csv without index=False)"
    return (f"the row index of a filtered or sorted frame ({v.size} distinct integers in {int(v.min())}..{int(v.max())}; "
            "pandas' to_csv without index=False)")


def _names(names: Sequence[str], most: int = 6) -> str:
    """Column names for one line: all of them up to ``most``, else the first few ... the last."""
    shown = [_pretty(n) for n in names]
    if len(shown) > most:
        shown = [*shown[: most - 2], "...", shown[-1]]
    return ", ".join(shown)


def import_embeddings(src_path: str | os.PathLike, *, embeddings: str | None = None, labels: str | None = None,
                      split: str | None = None, split_by_class: float | None = None, paths: str | None = None,
                      class_names: str | None = None, properties: Sequence[str] = (),
                      notes: list[str] | None = None):
    """Read a source into an :class:`embedscope.store.EmbeddingSet` (see the module docstring).

    One-line errors: no labels, lengths that disagree, NaN/inf rows, unknown split values, a key
    or column that is not there, a property named ``class``. An error about labels, split, paths or
    class names read from a file of their own names that file. ``split_by_class`` (or ``split``
    naming a file or another key) replaces a ``split`` key/column of the source: a
    :class:`SplitReplaced` warning says so and ``attrs["split_source"]`` records it.

    ``notes``, when a list, receives one line saying what formed the embedding: for a table its
    columns (a row-index column left out, the columns ignored), elsewhere the key used when others
    could have been it; and one line for each one-column CSV/TSV of labels, split, paths or class
    names whose first line was read as the column name (``embedscope import`` prints them).
    """
    from embedscope.fileio import sha256_file
    from embedscope.store import SPLITS, EmbeddingSet
    from embedscope.store.embeddings import _check_property_name, check_distinct_names

    if split is not None and split_by_class is not None:
        raise UsageError("--split and --split-by-class exclude each other")
    if split_by_class is not None and not (0.0 < float(split_by_class) < 1.0):
        raise UsageError(f"--split-by-class must lie strictly between 0 and 1, got {split_by_class}")
    twice = next((p for i, p in enumerate(properties) if p in properties[:i]), None)
    if twice is not None:  # (kept once without a word; 'properties --properties' refuses it so)
        raise UsageError(f"--properties names '{_pretty(twice)}' twice: give each property once")
    src = read_source(src_path)
    if src.table and src.columns and all(len(v) == 0 for v in src.columns.values()):  # (not "no numeric columns")
        why = " (its first line is read as the column names)" if src.fmt in ("csv", "tsv") else ""
        raise EmbedscopeError(f"{src.path}: the table has no rows{why}")
    used: set[str] = set()
    origin: dict[str, tuple[Path, str | None]] = {}  # what -> the file of its own it was read from, its header
    y = _column(src, labels, LABEL_KEYS, "labels", used, origin)
    if y is None:
        keys = _key_list(src.keys(), "none: the source is one array")
        raise EmbedscopeError(f"{src.path}: no labels: name them with --labels (a file, or a key/column; "
                              f"found {keys}){_weights_hint(src)}")
    if split_by_class is None:
        sp = _column(src, split, SPLIT_KEYS, "split", used, origin)
    else:  # the explicit flag wins: the source's own split column is not read, and the user is told
        sp = None
    own_split = [k for k in SPLIT_KEYS if k in src.columns and k not in used
                 and (split is None or "split" in origin or k != _spec_key(split))]
    used.update(own_split)  # (never taken as an embedding column)
    pa = _column(src, paths, PATH_KEYS if src.table or src.matrix is None else (), "paths", used, origin)
    cn = None
    if class_names is not None:
        cn = _column(src, class_names, (), "class names", used, origin)
        try:
            check_distinct_names(cn)
        except EmbedscopeError as e:  # named by the file they came from (docs/import.md)
            raise EmbedscopeError(f"{origin.get('class names', (src.path,))[0]}: {e}") from None
    props = {}
    for name in properties:
        check_property_not_reserved(name, src.path)
        if name not in src.columns:
            mean = did_you_mean(_close_keys(name, list(src.keys())))
            raise EmbedscopeError(f"{src.path}: no column '{_pretty(name)}' for --properties ({mean + ' ' if mean else ''}"
                                  f"columns: {_key_list(src.keys())})")
        _check_property_name(name, str(src.path))
        v = _decoded(src.columns[name], src.path, f"property '{_pretty(name)}'")
        if name in src.text:  # text as written ("NA" stays "NA", "0001" is not 1), integers, or numbers
            v = property_cells(np.asarray(src.text[name], dtype=object), v)
        v = _property_objects(src.path, name, v)
        _check_present(src.path, f"property '{_pretty(name)}'", v)
        # NaN was refused above; inf too (stored, it made 'embedscope properties' refuse the whole file;
        # add-properties refuses it)
        if np.ndim(v) == 1 and np.asarray(v).dtype.kind == "f" and not np.all(np.isfinite(v)):
            first = int(np.flatnonzero(~np.isfinite(v))[0])
            # (a CSV/TSV's cell as written: '1e999' was named "inf", which a search of the file does not find)
            shown = f"'{src.text[name][first]}'" if name in src.text else str(v[first])
            raise EmbedscopeError(f"{src.path}: property '{_pretty(name)}' holds {int(np.sum(~np.isfinite(v)))} value(s) "
                                  f"that are not finite (first: {shown} at row {first}): a property needs finite "
                                  "numbers or text")
        props[name] = v
        used.add(name)
    info: dict[str, Any] = {}
    X = _embeddings(src, embeddings, used, info)
    index_col = None
    if X is None:  # a table without an embedding column: every numeric column not used otherwise
        cols = [k for k, v in src.columns.items() if k not in used and np.asarray(v).dtype.kind in "fiu"]
        index_col = _row_index_column(src, cols)
        if index_col is not None:  # pandas' row index (to_csv without index=False): left out, and said so
            cols.remove(index_col)
            used.add(index_col)
            info["row_index"] = _row_index_words(src.columns[index_col])
        _no_partly_numeric(src, [k for k in src.columns if k not in used and k not in cols])
        if not cols:
            left = (f"; '{_pretty(index_col)}', distinct non-negative integers, was left out as a row index"
                    if index_col is not None else "")
            lists = _list_columns(src, [k for k in src.columns if k not in used])
            if lists:  # (a column of lists is taken by its name only: embeddings, ..., or --embeddings COLUMN)
                import shlex

                left += (f"; column '{_pretty(lists[0])}' holds lists: --embeddings "
                         f"{_pretty(shlex.quote(lists[0]))} reads it")
            raise EmbedscopeError(f"{src.path}: no numeric columns left for the embeddings (name them with "
                                  f"--embeddings COLUMN or PREFIX*{left})")
        info["columns"] = cols
        X = np.column_stack([src.columns[c] for c in cols])
    X = np.asarray(X)
    if X.ndim != 2:
        raise EmbedscopeError(f"{src.path}: the embeddings{_formed_by(info)} must be a 2-D array (N x D), got shape "
                              f"{X.shape}")
    if X.dtype.kind not in "fiu":
        raise EmbedscopeError(f"{src.path}: the embeddings{_formed_by(info)} must be numbers, got {X.dtype}")
    bad = ~np.all(np.isfinite(X), axis=1)
    if bad.any():
        raise EmbedscopeError(f"{src.path}: {int(bad.sum())} embedding row(s) contain NaN or inf (first: row "
                              f"{int(np.flatnonzero(bad)[0])})")
    if X.dtype != np.float32:  # the store keeps float32: refused where that is more than rounding
        from embedscope.store.embeddings import _as_stored  # (beyond its range, rows too small for it)

        X = _as_stored(X, src.path, exact_ints=False)
    n = X.shape[0]
    where = {what: f for what, (f, _) in origin.items()}  # errors about a file's values name that file
    for what, arr in (("labels", y), ("split", sp), ("paths", pa), ("class names", cn)):
        _check_present(where.get(what, src.path), what, arr)
    for what, arr in (("labels", y), ("split", sp), ("paths", pa), *((f"property '{k}'", v) for k, v in props.items())):
        file, header = origin.get(what, (None, None))
        if arr is not None and arr.ndim != 1:
            raise EmbedscopeError(f"{file or src.path}: {what} must hold one value per row (1-D), got shape "
                                  f"{arr.shape}")
        if arr is not None and arr.shape[0] != n:
            m = arr.shape[0] if arr.ndim else 0
            have = "have" if what in ("labels", "paths") else "has"  # (was "split have", "property 'w' have")
            if file is None:
                raise EmbedscopeError(f"{src.path}: {what} {have} {m} entries but there are {n} embedding rows")
            hint = "" if header is None else f" (its first line, '{_pretty(header)}', was read as the column name)"
            raise EmbedscopeError(f"{file}: {what} {have} {m} entries but there are {n} embedding rows in "
                                  f"{src.path}{hint}")
    if y.dtype.kind == "f":
        if not np.all(np.isfinite(y)) or not np.all(y == np.round(y)):
            raise EmbedscopeError(f"{where.get('labels', src.path)}: labels must be integers or strings, got "
                                  "non-integer numbers")
        y = y.astype(np.int64)
    elif y.dtype.kind in "OUS":
        y = y.astype(str)
    if cn is not None and y.dtype.kind in "iu" and (y.min() < 0 or y.max() >= len(cn)):  # (names the names' file)
        raise EmbedscopeError(f"{where.get('class names', src.path)}: {len(cn)} class names, but the integer labels "
                              f"(indices into them) run from {y.min()} to {y.max()}")
    split_notes: list[str] = []
    if sp is not None:
        sp = np.asarray(sp).astype(str)
        folded = {u: u.strip().lower() for u in np.unique(sp).tolist() if u not in SPLITS}
        folded = {u: f for u, f in folded.items() if f in SPLITS}  # 'Train', ' test ': unambiguous
        if folded:
            sp = np.array([folded.get(v, v) for v in sp.tolist()])
            written = ", ".join("'" + _pretty(u) + "'" for u in sorted(folded)[:5])
            split_notes.append(f"split: {written}"
                               f"{' ...' if len(folded) > 5 else ''} read as "
                               f"{', '.join(sorted(set(folded.values())))} (case and spaces ignored)")
        unknown = sorted(set(np.unique(sp).tolist()) - set(SPLITS))
        if unknown:  # (a value with spaces around it, kept as written, is quoted: ' test' shows its space)
            shown = [f"'{_pretty(u)}'" if u != u.strip() else _pretty(u) for u in unknown[:5]]
            raise EmbedscopeError(f"{where.get('split', src.path)}: unknown split value(s) "
                                  f"{', '.join(shown)} (allowed: {', '.join(SPLITS)})")
    attrs = {
        "imported": True,
        "import_source": str(src.path.resolve()),
        "import_format": src.fmt,
        "import_sha256": sha256_file(src.path),
        "dataset": src.path.stem,
    }
    for what, (file, _) in origin.items():  # labels, paths, class names (and split) read from a file of their own
        attrs[f"import_{what.replace(' ', '_')}_file"] = str(file.resolve())
    if "columns" in info:  # what formed the embedding (a list: written as JSON text, read back as a list)
        attrs["import_embedding_columns"] = [str(c) for c in info["columns"]]
    elif "key" in info:
        attrs["import_embedding_key"] = str(info["key"])
    try:
        es = EmbeddingSet.from_arrays(X, y, split=sp, paths=None if pa is None else np.asarray(pa).astype(str),
                                      class_names=None if cn is None else [str(c) for c in cn],
                                      properties=props, attrs=attrs)
    except EmbedscopeError as e:
        raise EmbedscopeError(f"{src.path}: {e}") from None
    if split_by_class is not None:
        _split_by_class(es, float(split_by_class), split_by_class, cn is not None, own_split)
    elif sp is not None:
        es.attrs["split_source"] = ("from the source" if "split" not in origin
                                    else f"from the file {split}")
        if own_split:
            es.attrs["split_source"] += f"; replaced the source's '{_pretty(own_split[0])}' column"
    if own_split:
        how = f"--split-by-class {split_by_class}" if split_by_class is not None else f"--split {split}"
        warnings.warn(SplitReplaced(f"{src.path}: its own '{_pretty(own_split[0])}' column was replaced by {how} "
                                    "(the output's split_source says so)"), stacklevel=2)
    if notes is not None:
        notes.extend(split_notes)
        notes.extend(f"{what}: {f}: its first line, '{_pretty(h)}', was read as the column name"
                     for what, (f, h) in origin.items() if h is not None)
        ignored = [k for k in src.columns if k not in used and k not in info.get("columns", ())] if src.table else []
        line = _embedding_note(info, X.shape, index_col, ignored, src.table)
        lists = _list_columns(src, ignored) if src.table else []
        if line and lists:  # (a CSV's column of "[0.1, ...]" beside numeric columns: taken by its name only)
            import shlex

            line += (f"; '{_pretty(lists[0])}' holds lists: --embeddings {_pretty(shlex.quote(lists[0]))} "
                     "takes it as the embedding")
        if line:
            notes.append(line)
        if pa is None and paths is None:  # a column of paths spelled otherwise (Path, image_path): not read
            cand = path_column_candidates([k for k in src.columns if k not in used or k in info.get("columns", ())])
            if cand:
                import shlex

                taken = [f"'{_pretty(c)}'" for c in cand if c in info.get("columns", ())]
                took = (f"; {', '.join(taken)} {'was' if len(taken) == 1 else 'were'} taken as "
                        f"{'an embedding column' if len(taken) == 1 else 'embedding columns'}" if taken else "")
                notes.append(f"paths: no column {', '.join(PATH_KEYS[:-1])} or {PATH_KEYS[-1]}: the items are "
                             f"numbered from 0; {did_you_mean(cand)} (--paths {_pretty(shlex.quote(cand[0]))} reads "
                             f"it{took})")
        if "columns" in info and X.shape[0] > 1:  # a metadata column (epoch = 7) taken for a feature
            Xc = np.asarray(X, dtype=np.float64)
            const = [c for j, c in enumerate(info["columns"]) if Xc[0, j] != 0 and np.all(Xc[:, j] == Xc[0, j])]
            if const:
                notes.append(f"embeddings: {_names(const)} hold{'s' if len(const) == 1 else ''} one nonzero value in "
                             "every row: a constant shifts every cosine similarity; if it is no feature, name the "
                             "embedding columns with --embeddings")
    return es


def _split_by_class(es, f: float, given: Any, named_order: bool, own_split: list[str]) -> None:
    """The zero-shot split, counted over the classes that have rows: the first ``ceil(f * C)`` of them
    (in class order: sorted, or the ``--class-names`` order) train, the rest test."""
    present = np.unique(es.labels)  # class indices with rows, in class order
    C, named = int(present.size), len(es.class_names)
    k = math.ceil(f * C)
    absent = f" ({named - C} of the {named} named classes have no rows)" if C < named else ""
    if not 1 <= k < C:
        raise UsageError(f"--split-by-class {given} gives {k} of {C} training classes{absent}; both splits "
                         "need at least one class")
    es.split = np.where(np.isin(es.labels, present[:k]), "train", "test").astype(str)
    order = "in --class-names order" if named_order else "sorted"
    es.attrs["split_source"] = (f"split-by-class {given}: first {k} of {C} classes ({order}) train"
                                + (f"; {named - C} of the {named} named classes have no rows" if absent else "")
                                + (f"; replaced the source's '{_pretty(own_split[0])}' column" if own_split else ""))
    es.attrs.pop("split_source_default", None)


def _embedding_note(info: dict[str, Any], shape: tuple[int, ...], index_col: str | None, ignored: list[str],
                    table: bool) -> str:
    """One line: which columns (or key) formed the embedding, and which were left out or ignored."""
    n, d = shape
    if "columns" in info:
        cols = info["columns"]
        line = f"embeddings: {len(cols)} column{'s' if len(cols) != 1 else ''} {_names(cols)}"
    elif "key" in info and table:
        line = f"embeddings: column '{_pretty(info['key'])}' ({d} dimensions)"
    elif info.get("others"):
        line = (f"embeddings: key '{_pretty(info['key'])}' ({n} x {d}); also present: {_names(info['others'])} "
                "(name another with --embeddings)")
    else:
        return ""
    if info.get("prefix_taken"):
        line += f"; left out {_names(info['prefix_taken'])}: taken as labels, split, paths or properties"
    if index_col is not None:
        line += f"; left out '{_pretty(index_col)}': {info['row_index']}"
    if ignored:
        line += f"; ignored: {_names(ignored)}"
    return line


def import_to_file(src_path: str | os.PathLike, out: str | os.PathLike, *, force: bool = False, **kwargs: Any) -> Path:
    """:func:`import_embeddings` then write the HDF5 file atomically (refuses an existing ``out``)."""
    from embedscope import store
    from embedscope.fileio import check_writable

    check_writable(out, force=force)
    es = import_embeddings(src_path, **kwargs)
    return store.save(out, es, force=force)
