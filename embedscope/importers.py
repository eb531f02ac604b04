"""Embeddings made elsewhere -> an embedscope HDF5 file (``embedscope import``, ``docs/import.md``).

Sources: ``.npy`` (one N x D array), ``.npz`` / ``.pt`` / ``.safetensors`` (arrays by key; a
``.pt`` may also be a single tensor; read with ``torch.load(weights_only=True)``: no code runs),
``.parquet`` / ``.csv`` / ``.tsv`` (a table: the embedding is one list-valued column, or the
numeric columns). Labels, split, paths and class names come from a key/column of the source or
from a file of their own (``.npy``, ``.txt`` one value per line, a one-column ``.csv``/``.tsv``).
``split_by_class=f`` gives the zero-shot split: the first ``ceil(f * C)`` classes (sorted) are
"train", the rest "test". The file records where it came from (``imported``, ``import_source``,
``import_sha256``, ``import_format``).
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from embedscope.errors import EmbedscopeError, UsageError

FORMATS = {".npy": "npy", ".npz": "npz", ".pt": "pt", ".pth": "pt", ".safetensors": "safetensors",
           ".parquet": "parquet", ".csv": "csv", ".tsv": "tsv"}
EMBEDDING_KEYS = ("embeddings", "embedding", "features", "feats", "X", "x", "emb")
LABEL_KEYS = ("labels", "label", "y", "targets", "target", "class", "classes")
SPLIT_KEYS = ("split",)
PATH_KEYS = ("paths", "path", "ids", "id", "filenames", "filename")


class SplitReplaced(UserWarning):
    """The source holds a split column of its own, and ``split_by_class`` (or ``split`` naming another
    column or a file) replaced it: ``embedscope import`` says so in one line on stderr."""


def _pretty(name: Any) -> str:
    from embedscope.models.checkpoint import printable

    return printable(name, 60)


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
    """A source file read into named columns (``columns``) and, for a bare array, ``matrix``."""

    def __init__(self, path: Path, fmt: str, columns: dict[str, Any], matrix: np.ndarray | None = None,
                 table: bool = False, text: dict[str, np.ndarray] | None = None) -> None:
        self.path, self.fmt, self.columns, self.matrix, self.table = path, fmt, columns, matrix, table
        #: a CSV/TSV's cells as written (no number parsing, no "NA" -> NaN): labels, paths, split,
        #: class names and text properties are taken from these
        self.text = text or {}

    def keys(self) -> list[str]:
        return list(self.columns)


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
            with np.load(path, allow_pickle=False) as z:
                return Source(path, fmt, {k: z[k] for k in z.files})
        if fmt == "safetensors":
            return _read_safetensors(path)
        if fmt == "pt":
            return _read_pt(path)
        import pandas as pd

        if fmt == "parquet":
            from embedscope.tables import read_parquet

            df = read_parquet(path)
            return Source(path, fmt, {str(c): df[c].to_numpy() for c in df.columns}, table=True)
        sep = "\t" if fmt == "tsv" else ","
        # numbers parsed exactly (pandas' default parser may be 1 ulp off); the cells as text too
        df = pd.read_csv(path, sep=sep, float_precision="round_trip")
        raw = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False)
        return Source(path, fmt, {str(c): df[c].to_numpy() for c in df.columns}, table=True,
                      text={str(c): raw[c].to_numpy(dtype=object) for c in raw.columns})
    except EmbedscopeError:
        raise
    except ValueError as e:
        msg = str(e).splitlines()[0] if str(e) else e.__class__.__name__
        if "allow_pickle" in msg or "Object arrays" in msg:
            msg = "holds Python objects (pickled); import reads plain arrays only"
        raise EmbedscopeError(f"{path}: cannot read as {fmt}: {_pretty(msg)}") from None
    except Exception as e:  # noqa: BLE001 - any parser failure is a bad file for the user
        msg = str(e).splitlines()[0] if str(e) else e.__class__.__name__
        raise EmbedscopeError(f"{path}: cannot read as {fmt} ({e.__class__.__name__}: {_pretty(msg)})") from None


# the first bytes of each binary format, and those of formats a file is often mistaken for
_SIGNATURES = {"npy": (b"\x93NUMPY",), "npz": (b"PK\x03\x04", b"PK\x05\x06"), "parquet": (b"PAR1",)}
_KNOWN = ((b"\x89HDF\r\n\x1a\n", "an HDF5 file, which embedscope's analyses read directly"),
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
    looks = next((what for sig, what in _KNOWN if head.startswith(sig)), "a format embedscope does not know")
    raise EmbedscopeError(f"{path}: not a .{fmt} file: " + ("it is empty" if not head else f"it looks like {looks}"))


def _no_partly_numeric(src: Source, others: list[str]) -> None:
    """Left-over table columns that are not numeric are ignored, unless most of their cells are
    numbers: then one bad cell would silently drop an embedding dimension."""
    if not src.table:
        return
    import pandas as pd

    for k in others:
        v = pd.Series(src.columns[k])
        num = pd.to_numeric(v, errors="coerce")
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
    if isinstance(obj, torch.Tensor):
        return Source(path, "pt", {}, matrix=_to_numpy(obj))
    if isinstance(obj, dict):
        cols = {}
        for k, v in obj.items():
            if isinstance(v, torch.Tensor):
                cols[str(k)] = _to_numpy(v)
            elif isinstance(v, (list, tuple)) and v and all(isinstance(x, (str, int, float)) for x in v):
                cols[str(k)] = np.asarray(v)
        if cols:
            return Source(path, "pt", cols)
    raise EmbedscopeError(f"{path}: expected a tensor or a dict of tensors, got {type(obj).__name__}")


def read_vector(path: str | os.PathLike, what: str) -> np.ndarray:
    """One value per row from a file of its own (``.npy``, ``.txt``, one-column ``.csv``/``.tsv``, ``.pt``)."""
    path = Path(path)
    if path.suffix.lower() == ".txt":
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise EmbedscopeError(f"{path}: cannot read the {what} ({e.__class__.__name__})") from None
        while lines and not lines[-1].strip():
            lines.pop()
        vals = np.array([s.strip() for s in lines], dtype=object)
        return ints_if_exact(vals)
    src = read_source(path)
    if src.matrix is not None:
        arr = src.matrix
    elif len(src.columns) == 1:
        arr = next(iter(src.columns.values()))
    else:
        raise EmbedscopeError(f"{path}: the {what} file must hold one column or array, found "
                              f"{', '.join(map(_pretty, src.keys()))}")
    arr = np.asarray(arr)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.reshape(-1)
    if arr.ndim != 1:
        raise EmbedscopeError(f"{path}: the {what} must be one value per row, got shape {arr.shape}")
    return arr


def ints_if_exact(text: np.ndarray) -> np.ndarray:
    """Cells as written -> int64 when every one is an integer written plainly (``7``, ``-3``), else
    the text itself: ``007``, ``+7``, ``1_000`` or ``NA`` stay as written (a class named "007" or
    an item id "0042" is not the number 7 or 42)."""
    try:
        ints = [int(v) for v in text]
    except (TypeError, ValueError):
        return text
    if all(str(i) == v for i, v in zip(ints, text)):
        return np.array(ints, dtype=np.int64)
    return text


def _values(src: Source, key: str, what: str) -> np.ndarray:
    """A column for labels, split, paths or class names: a CSV/TSV's as its cells are written
    (integers when every cell is a plain integer), other sources' as stored."""
    if key in src.text:
        return ints_if_exact(src.text[key])
    return np.asarray(src.columns[key])


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


def _column(src: Source, spec: str | None, defaults: Sequence[str], what: str, used: set[str]) -> np.ndarray | None:
    """``spec`` names a key/column of the source or a file; None tries ``defaults``."""
    if spec is None:
        for k in defaults:
            if k in src.columns:
                used.add(k)
                return _values(src, k, what)
        return None
    if spec in src.columns:
        used.add(spec)
        return _values(src, spec, what)
    if Path(spec).is_file():
        return read_vector(spec, what)
    keys = ", ".join(map(_pretty, src.keys())) or "none (the source is one array)"
    raise EmbedscopeError(f"{src.path}: no key or column '{_pretty(spec)}' for the {what}, and no such file "
                          f"(keys/columns: {keys})")


def _embeddings(src: Source, spec: str | None, used: set[str]) -> np.ndarray:
    if src.matrix is not None:
        return src.matrix
    if spec is not None and spec.endswith("*"):
        cols = [k for k in src.columns if k.startswith(spec[:-1]) and k not in used]
        if not cols:
            raise EmbedscopeError(f"{src.path}: no columns start with '{_pretty(spec[:-1])}'")
        used.update(cols)
        return np.column_stack([src.columns[c] for c in cols])
    names = [spec] if spec else [k for k in EMBEDDING_KEYS if k in src.columns]
    if spec and spec not in src.columns:
        raise EmbedscopeError(f"{src.path}: no key or column '{_pretty(spec)}' (keys/columns: "
                              f"{', '.join(map(_pretty, src.keys()))})")
    if names:
        v = src.columns[names[0]]
        used.add(names[0])
        if v.dtype == object:  # a list-valued table column
            try:
                return np.stack([np.asarray(x, dtype=np.float64) for x in v])
            except (ValueError, TypeError):
                raise EmbedscopeError(f"{src.path}: column '{_pretty(names[0])}' does not hold equal-length "
                                      "number lists") from None
        return v
    if not src.table:
        two_d = [k for k, v in src.columns.items() if np.asarray(v).ndim == 2]
        if len(two_d) == 1:
            used.add(two_d[0])
            return src.columns[two_d[0]]
        raise EmbedscopeError(f"{src.path}: which array holds the embeddings? name it with --embeddings "
                              f"(keys: {', '.join(map(_pretty, src.keys()))})")
    return None  # tables: the numeric columns left over, chosen by the caller


def import_embeddings(src_path: str | os.PathLike, *, embeddings: str | None = None, labels: str | None = None,
                      split: str | None = None, split_by_class: float | None = None, paths: str | None = None,
                      class_names: str | None = None, properties: Sequence[str] = ()):
    """Read a source into an :class:`embedscope.store.EmbeddingSet` (see the module docstring).

    One-line errors: no labels, lengths that disagree, NaN/inf rows, unknown split values, a key
    or column that is not there. ``split_by_class`` (or ``split`` naming a file or another key)
    replaces a ``split`` key/column of the source: a :class:`SplitReplaced` warning says so and
    ``attrs["split_source"]`` records it.
    """
    from embedscope.fileio import sha256_file
    from embedscope.store import SPLITS, EmbeddingSet
    from embedscope.store.embeddings import _check_property_name

    if split is not None and split_by_class is not None:
        raise UsageError("--split and --split-by-class exclude each other")
    if split_by_class is not None and not (0.0 < float(split_by_class) < 1.0):
        raise UsageError(f"--split-by-class must lie strictly between 0 and 1, got {split_by_class}")
    src = read_source(src_path)
    used: set[str] = set()
    y = _column(src, labels, LABEL_KEYS, "labels", used)
    if y is None:
        keys = ", ".join(map(_pretty, src.keys())) or "none: the source is one array"
        raise EmbedscopeError(f"{src.path}: no labels: name them with --labels (a file, or a key/column; "
                              f"found {keys})")
    if split_by_class is None:
        sp = _column(src, split, SPLIT_KEYS, "split", used)
    else:  # the explicit flag wins: the source's own split column is not read, and the user is told
        sp = None
    own_split = [k for k in SPLIT_KEYS if k in src.columns and k not in used and k != split]
    used.update(own_split)  # (never taken as an embedding column)
    pa = _column(src, paths, PATH_KEYS if src.table or src.matrix is None else (), "paths", used)
    cn = None
    if class_names is not None:
        cn = _column(src, class_names, (), "class names", used)
    props = {}
    for name in properties:
        if name not in src.columns:
            raise EmbedscopeError(f"{src.path}: no column '{_pretty(name)}' for --properties (columns: "
                                  f"{', '.join(map(_pretty, src.keys()))})")
        _check_property_name(name, str(src.path))
        v = np.asarray(src.columns[name])
        if name in src.text and v.dtype.kind not in "iufb":
            v = src.text[name]  # text as written: "NA" stays "NA"
        _check_present(src.path, f"property '{_pretty(name)}'", v)
        props[name] = v
        used.add(name)
    X = _embeddings(src, embeddings, used)
    if X is None:  # a table without an embedding column: every numeric column not used otherwise
        cols = [k for k, v in src.columns.items() if k not in used and np.asarray(v).dtype.kind in "fiu"]
        _no_partly_numeric(src, [k for k in src.columns if k not in used and k not in cols])
        if not cols:
            raise EmbedscopeError(f"{src.path}: no numeric columns left for the embeddings (name them with "
                                  "--embeddings COLUMN or PREFIX*)")
        X = np.column_stack([src.columns[c] for c in cols])
    X = np.asarray(X)
    if X.ndim != 2:
        raise EmbedscopeError(f"{src.path}: the embeddings must be a 2-D array (N x D), got shape {X.shape}")
    if X.dtype.kind not in "fiu":
        raise EmbedscopeError(f"{src.path}: the embeddings must be numbers, got {X.dtype}")
    bad = ~np.all(np.isfinite(X), axis=1)
    if bad.any():
        raise EmbedscopeError(f"{src.path}: {int(bad.sum())} embedding row(s) contain NaN or inf (first: row "
                              f"{int(np.flatnonzero(bad)[0])})")
    if X.dtype != np.float32:  # the store keeps float32: refused where that is more than rounding
        from embedscope.store.embeddings import _as_stored  # (beyond its range, rows too small for it)

        X = _as_stored(X, src.path, exact_ints=False)
    n = X.shape[0]
    for what, arr in (("labels", y), ("split", sp), ("paths", pa), ("class names", cn)):
        _check_present(src.path, what, arr)
    for what, arr in (("labels", y), ("split", sp), ("paths", pa), *((f"property '{k}'", v) for k, v in props.items())):
        if arr is not None and arr.ndim != 1:
            raise EmbedscopeError(f"{src.path}: {what} must hold one value per row (1-D), got shape {arr.shape}")
        if arr is not None and arr.shape[0] != n:
            raise EmbedscopeError(f"{src.path}: {what} have {arr.shape[0] if arr.ndim else 0} entries but there are "
                                  f"{n} embedding rows")
    if y.dtype.kind == "f":
        if not np.all(np.isfinite(y)) or not np.all(y == np.round(y)):
            raise EmbedscopeError(f"{src.path}: labels must be integers or strings, got non-integer numbers")
        y = y.astype(np.int64)
    elif y.dtype.kind in "OUS":
        y = y.astype(str)
    if sp is not None:
        sp = np.asarray(sp).astype(str)
        unknown = sorted(set(np.unique(sp).tolist()) - set(SPLITS))
        if unknown:
            raise EmbedscopeError(f"{src.path}: unknown split value(s) {', '.join(map(_pretty, unknown[:5]))} "
                                  f"(allowed: {', '.join(SPLITS)})")
    attrs = {
        "imported": True,
        "import_source": str(src.path.resolve()),
        "import_format": src.fmt,
        "import_sha256": sha256_file(src.path),
        "dataset": src.path.stem,
    }
    try:
        es = EmbeddingSet.from_arrays(X, y, split=sp, paths=None if pa is None else np.asarray(pa).astype(str),
                                      class_names=None if cn is None else [str(c) for c in cn],
                                      properties=props, attrs=attrs)
    except EmbedscopeError as e:
        raise EmbedscopeError(f"{src.path}: {e}") from None
    if split_by_class is not None:
        C = len(es.class_names)
        k = math.ceil(float(split_by_class) * C)
        if not 1 <= k < C:
            raise UsageError(f"--split-by-class {split_by_class} gives {k} of {C} training classes; both splits "
                             "need at least one class")
        es.split = np.where(es.labels < k, "train", "test").astype(str)
        es.attrs["split_source"] = (f"split-by-class {split_by_class}: first {k} of {C} classes (sorted) train"
                                    + (f"; replaced the source's '{_pretty(own_split[0])}' column" if own_split
                                       else ""))
        es.attrs.pop("split_source_default", None)
    elif sp is not None:
        es.attrs["split_source"] = ("from the source" if split is None or split in src.columns
                                    else f"from the file {split}")
        if own_split:
            es.attrs["split_source"] += f"; replaced the source's '{_pretty(own_split[0])}' column"
    if own_split:
        how = f"--split-by-class {split_by_class}" if split_by_class is not None else f"--split {split}"
        warnings.warn(SplitReplaced(f"{src.path}: its own '{_pretty(own_split[0])}' column was replaced by {how} "
                                    "(the output's split_source says so)"), stacklevel=2)
    return es


def import_to_file(src_path: str | os.PathLike, out: str | os.PathLike, *, force: bool = False, **kwargs: Any) -> Path:
    """:func:`import_embeddings` then write the HDF5 file atomically (refuses an existing ``out``)."""
    from embedscope import store
    from embedscope.fileio import check_writable

    check_writable(out, force=force)
    es = import_embeddings(src_path, **kwargs)
    return store.save(out, es, force=force)
