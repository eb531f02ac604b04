"""The HDF5 embedding store: the one file every analysis reads (layout in ``docs/store.md``).

Layout (``format_version`` 1)::

    /embeddings      float32 [N, D]
    /labels          int64   [N]      index into class_names
    /paths           utf-8   [N]      image path (relative to the data root) or item id
    /split           utf-8   [N]      "train" | "test" | "val" | "query" | "gallery"
    /class_names     utf-8   [C]
    /properties/<k>  [N]              optional per-image properties (numbers or utf-8)
    attrs: format_version, embedscope_version, created, dataset, root, transform,
           checkpoint_sha256, checkpoint_config (JSON), ... (free-form JSON-able values)
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import io
import json
import os
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.fileio import atomic_output, escape_undecodable
from embedscope.names import SPLITS
from embedscope.text import quoted
from embedscope.validation import (
    NUMBERS,
    as_numpy,
    as_times,
    as_values,
    beyond_int64,
    check_bool,
    check_time_zones,
    decoded,
    first_missing,
    first_nul,
)
from embedscope.validation import integral as _integral

FORMAT_VERSION = 1
REQUIRED = ("embeddings", "labels", "paths", "split", "class_names")
#: ``attrs["split_source"]`` of a set made by :meth:`EmbeddingSet.from_arrays` without ``split``
_NO_SPLIT = "none given: every row is 'test'"
#: integers above this magnitude are not all float32 numbers (24-bit significand)
FLOAT32_EXACT_INT = 2 ** 24


@dataclass(eq=False, repr=False)
class EmbeddingSet:
    """Embeddings with labels and provenance, as stored in one HDF5 file.

    ``repr`` is a one-line summary (N, D, dtype, classes, rows per split, properties, source);
    ``a == b`` compares the data (embeddings by value, labels, paths, split, class names,
    properties), not ``attrs`` (when and from where a set was made), so a set saved and loaded
    again equals the original whenever its embeddings were float32 (the stored type).
    """

    embeddings: np.ndarray
    labels: np.ndarray
    paths: np.ndarray
    split: np.ndarray
    class_names: np.ndarray
    properties: dict[str, np.ndarray] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    #: Named in error messages (the file a set was read from).
    source: InitVar[str] = "embedding set"

    def __post_init__(self, source: str = "embedding set") -> None:
        self.embeddings = np.asarray(as_numpy(self.embeddings))
        self.labels = np.asarray(as_numpy(self.labels))
        for what in ("paths", "split", "class_names"):
            _refuse_nul(getattr(self, what), what, trailing=True)
        self.paths = np.asarray(self.paths, dtype=object).astype(str)
        self.split = np.asarray(self.split, dtype=object).astype(str)
        self.class_names = np.asarray(self.class_names, dtype=object).astype(str)
        for k, v in (self.properties or {}).items():
            if isinstance(v, (list, tuple)):  # (objects keep their NULs: refused where they are saved)
                _refuse_nul(v, f"property '{k}'", trailing=True)
        self.properties = {str(k): np.asarray(as_numpy(v)) for k, v in (self.properties or {}).items()}
        self.attrs = dict(self.attrs or {})
        self.validate(source=source if isinstance(source, str) else "embedding set")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_arrays(cls, X, y, *, split=None, paths: Sequence[str] | None = None,
                    class_names: Sequence[str] | None = None, properties: Mapping[str, Any] | None = None,
                    attrs: Mapping[str, Any] | None = None) -> "EmbeddingSet":
        """Embeddings made elsewhere: only ``X`` (N x D; numpy or torch) and ``y`` (N labels) are needed.

        * ``y``: integers or strings. Without ``class_names`` the classes are the sorted distinct
          labels, named by their value (so label 7 keeps the name "7"); with ``class_names``,
          integer labels index into it and string labels are looked up in it (class i is
          ``class_names[i]``, whatever the sorted order of the names). Booleans alone are named
          "False" and "True" and index ``class_names`` as 0 and 1; dates (datetime64, or objects:
          ``pd.Timestamp``, ``np.datetime64``, ``datetime.date``) are one class per instant, named as
          briefly as exact ("2020-01-01", "2020-01-02T12:30") and looked up in ``class_names`` by that name;
          durations (timedelta64, or objects: ``pd.Timedelta``, ``datetime.timedelta``, ``np.timedelta64``)
          likewise one class per exact duration, named in the coarsest unit that holds it ("1 days",
          "90 minutes"). Bytes are decoded as UTF-8. A text label holding a NUL (which HDF5 text cannot
          store, and numpy cut when it trailed: "a" and "a\\x00" one class) is an error naming its row; so is
          a path, a split, a class name or a property text holding one (anywhere in it).
        * ``split``: one value per row (``train``, ``test``, ``val``, ``query``, ``gallery``), a
          single value for every row, or ``None``: every row is ``"test"`` (what ``evaluate``
          reads by default) and ``attrs["split_source"]`` says so.
        * ``paths``: one item id per row (default ``"0"``, ``"1"``, ...).
        * ``properties``: name -> one value per row (numbers or text).

        A missing value (``None``, NaN, pandas' ``NA`` or ``NaT``, numpy's ``NaT``) in the labels, paths,
        class names or a property is an error naming its row: stored, it would become the text "None",
        "nan", "<NA>" or "NaT". Labels that mix numbers and texts (``["1", 1]``) are an error too.

        >>> es = EmbeddingSet.from_arrays([[1.0, 0.0], [0.0, 1.0], [1.0, 0.1]], ["cat", "dog", "cat"])
        >>> es.labels.tolist(), es.class_names.tolist(), es.split.tolist()
        ([0, 1, 0], ['cat', 'dog'], ['test', 'test', 'test'])
        """
        from embedscope.validation import check_labels, check_matrix

        X = check_matrix(X, "embeddings", check_finite=False)
        n = X.shape[0]
        y_arr = as_values(y, "labels")  # (["a", nan] as objects: numpy's texts made the NaN the class "nan")
        if y_arr.ndim != 1 or y_arr.shape[0] != n:
            raise EmbedscopeError(f"labels must be 1-D with {n} entries (one per embedding row), "
                                  f"got shape {y_arr.shape}")
        for what, given in (("class_names", class_names), ("paths", paths)):
            if isinstance(given, (str, bytes)):
                raise EmbedscopeError(f"{what} must be a list of names (one per {'class' if what == 'class_names' else 'row'}), "
                                      f"not one string ({quoted(given)})")
            if given is not None and as_values(given, what).ndim != 1:  # (6: "'int' object is not iterable";
                raise EmbedscopeError(f"{what} must be a list of names (one per "  # [["a"]] * 6 stored "['a']")
                                      f"{'class' if what == 'class_names' else 'row'}), got "
                                      f"{type(given).__name__} of shape {as_values(given, what).shape}")
        for what, given in (("properties", properties), ("attrs", attrs)):
            if given is not None and not isinstance(given, Mapping):
                raise EmbedscopeError(f"{what} must be a mapping (name -> value), got {type(given).__name__}")
        _check_present(y_arr, "labels")
        big = None  # ids beyond int64 held as objects: (codes, names)
        listed = y_arr.tolist() if y_arr.dtype == object else []
        if listed or (isinstance(y, (list, tuple)) and y_arr.dtype.kind in "US"):  # (numpy made a list's numbers
            _refuse_numbers_beside_texts(listed or list(y))  # texts beside texts)
            if not listed:  # (numpy's array of a list cut its texts' trailing NULs: "a" and "a\x00" one class)
                _refuse_nul(np.array(list(y), dtype=object))
        if listed and all(isinstance(v, (_dt.date, np.datetime64)) for v in listed):
            check_time_zones(listed)  # (a date without a zone beside one with: each a class by its text)
        if listed and ((times := as_times(y_arr, "M")) is not None or (times := as_times(y_arr, "m")) is not None):
            # dates or durations held as objects: one datetime64 (timedelta64) array, one class per instant or
            # exact duration (pd.Timestamp, datetime.date and np.datetime64 of one day were three classes, by
            # their texts; pd.Timedelta(days=1) and np.timedelta64(1, "D") the classes "1 days 00:00:00" and
            # "1 days", and np.timedelta64 objects were numbers: 1 day and 24 hours the classes "1" and "24")
            y_arr, listed = times, []
        if listed and all(isinstance(v, _NUMBERS) for v in listed) and not all(
                isinstance(v, (bool, np.bool_)) for v in listed):
            # numbers held as objects (a pandas object column): numbers, not texts ("1.0" a class of its own
            # beside "1", and integers looked up by name in class_names rather than indexing it); ids beyond
            # int64 (2^63, 1e19) compared by value too (1 and 1.0 beside 2^63 were the classes "1" and "1.0")
            # and named by their value, exactly. Booleans beside numbers, Decimals and Fractions are numbers
            # too (True and 1, Decimal("1.0") and 1 were two classes, which the retrieval measures and
            # check_labels take as one); booleans alone keep their names "False" and "True"
            numeric = _exact_numbers(listed)
            if numeric is not None:  # (numpy's one pass: the exact path below took 2-3x as long at 1M rows)
                if numeric.dtype.kind == "f" and not np.all(numeric == np.round(numeric)):
                    raise EmbedscopeError("labels must be integer class labels (found non-integral or NaN values)")
                y_arr = numeric.astype(np.int64)
            else:
                values = [v.item() if isinstance(v, np.generic) else v for v in listed]
                if not all(type(v) is int or _integral(v) for v in values):  # (ints without a call: 1M rows)
                    raise EmbedscopeError("labels must be integer class labels (found non-integral or NaN values)")
                keys = [int(v) for v in values]  # (exact: as float64, 2^62 + 1 was 2^62)
                if all(-2 ** 63 <= k < 2 ** 63 for k in keys):
                    y_arr = np.array(keys, dtype=np.int64)
                else:
                    big = _big_ids(values, keys)
                    y_arr = big[1][big[0]]  # each row's class name, for a lookup in class_names
        elif listed and all(isinstance(v, (bool, np.bool_)) for v in listed):
            y_arr = np.array(listed, dtype=bool)  # (as objects they were looked up by name in class_names)
        elif listed and all(isinstance(v, _dt.datetime) and v.tzinfo is not None for v in listed):
            y_arr = _instant_names(listed)  # dates with a time zone: one class per instant, as the retrieval measures
            # and check_labels compare them (00:00 UTC and 01:00 +01:00 were two classes, by their texts)
        elif class_names is None and y_arr.dtype.kind in "uf" and beyond_int64(y_arr):
            # uint64 or float ids beyond int64 (2^63, 1e19) named by their value, as those held as objects are
            # (check_labels' codes were their names: the labels 1 and 2^63 the classes "0" and "1")
            check_labels(y_arr, n)  # (a non-integral or infinite one refused)
            values = y_arr.tolist()
            big = _big_ids(values, [int(v) for v in values])
        read: dict[str, np.ndarray] = {}  # (each as_values' array, searched for a NUL below)
        for what, given in (("paths", paths), ("class_names", class_names),
                            *((f"property '{k}'", v) for k, v in (properties or {}).items())):
            if given is not None:
                arr = read[what] = as_values(given, what)
                _check_present(arr, what)  # (texts hold no missing value: no copy as objects)
        if class_names is None and big is not None:
            labels, names = big[0], big[1].tolist()
        elif class_names is None and y_arr.dtype.kind in "mMb":  # dates, durations or booleans: named by value
            values, codes = np.unique(y_arr, return_inverse=True)  # (NaT refused above: _check_present)
            labels, names = codes.reshape(-1).astype(np.int64), _value_names(values)
        elif class_names is None:
            if y_arr.dtype.kind in "OUS":
                y_arr = _label_texts(y_arr)
            else:
                y_arr = check_labels(y_arr, n)
            try:
                values, codes = np.unique(y_arr, return_inverse=True)
            except TypeError:
                raise EmbedscopeError("labels must hold class labels (integers or strings)") from None
            labels, names = codes.reshape(-1).astype(np.int64), [str(v) for v in values]
        else:
            names = list(_texts(np.asarray(as_numpy(class_names), dtype=object).tolist(), "class_names"))  # bytes decoded
            if y_arr.dtype.kind in "OUS":
                labels = _labels_by_name(_label_texts(y_arr), names)
            elif y_arr.dtype.kind in "mM":  # looked up by their names (indexed by their sorted positions, silently)
                values, codes = np.unique(y_arr, return_inverse=True)
                labels = _labels_by_name(np.array(_value_names(values))[codes.reshape(-1)], names)
            else:
                labels = check_labels(y_arr, n)
        attrs = dict(attrs or {})
        if split is None:
            split_arr = np.full(n, "test", dtype=object)
            attrs.setdefault("split_source", _NO_SPLIT)
        elif isinstance(split, str):
            split_arr = np.full(n, split, dtype=object)
        else:
            split_arr = np.asarray(as_numpy(split), dtype=object)
        if paths is None:
            paths = np.array([str(i) for i in range(n)], dtype=object)
        # a NUL inside a text (not only a trailing one, which numpy's texts cut) refused here, naming its row, in
        # the words of the trailing one: it passed, and only store.save refused the set
        read["split"] = split_arr
        if class_names is not None:
            read["class_names"] = np.array(names, dtype=object)  # (decoded: bytes among them too)
        for what in ("paths", "split", "class_names", *(f"property '{k}'" for k in (properties or {}))):
            v = read.get(what)
            if v is not None:  # (numpy's bytes keep a NUL inside: searched as objects)
                _refuse_nul(v.astype(object) if v.dtype.kind == "S" else v, what)
        return cls(embeddings=X, labels=labels, paths=np.asarray(paths, dtype=object), split=split_arr,
                   class_names=np.asarray(names, dtype=object), properties=dict(properties or {}), attrs=attrs)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "EmbeddingSet":
        """Read an embedding file (same as :func:`embedscope.store.load`)."""
        return load(path)

    # ------------------------------------------------------------------ properties
    @property
    def n(self) -> int:
        return int(self.embeddings.shape[0])

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    @property
    def classes(self) -> np.ndarray:
        """The labels present, sorted."""
        return np.unique(self.labels)

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        split = {s: int(np.count_nonzero(self.split == s)) for s in self.splits}
        src = self.attrs.get("source_file")
        extra = f" of {len(self.class_names)}" if len(self.classes) != len(self.class_names) else ""
        return (f"EmbeddingSet(N={self.n}, D={self.dim}, dtype={self.embeddings.dtype}, "
                f"classes={len(self.classes)}{extra}, split={split}, "
                f"properties={sorted(self.properties)}" + (f", source={str(src)!r})" if src else ")"))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EmbeddingSet):
            return NotImplemented
        return (all(same_values(getattr(self, f), getattr(other, f))
                    for f in ("embeddings", "labels", "paths", "split", "class_names"))
                and self.properties.keys() == other.properties.keys()
                and all(same_values(v, other.properties[k]) for k, v in self.properties.items()))

    __hash__ = None  # mutable, compared by value

    # ------------------------------------------------------------------ checks
    def validate(self, source: str = "embedding set") -> None:
        """Raise :class:`EmbedscopeError` (one line) when fields disagree or values are bad."""
        X = self.embeddings
        if X.ndim != 2:
            raise EmbedscopeError(f"{source}: embeddings must be 2-D (N x D), got shape {X.shape}")
        if not np.issubdtype(X.dtype, np.floating):
            raise EmbedscopeError(f"{source}: embeddings must be floating point, got {X.dtype} "
                                  "(EmbeddingSet.from_arrays converts integers)")
        if X.shape[1] == 0:
            raise EmbedscopeError(f"{source}: embeddings have no columns (shape {X.shape}: D = 0)")
        n = X.shape[0]
        for name in ("labels", "paths", "split"):
            arr = getattr(self, name)
            if arr.ndim != 1 or arr.shape[0] != n:
                raise EmbedscopeError(
                    f"{source}: '{name}' has shape {arr.shape}, expected ({n},) to match embeddings"
                )
        if not np.issubdtype(self.labels.dtype, np.integer):
            if np.issubdtype(self.labels.dtype, np.floating) and np.all(
                np.isfinite(self.labels)) and np.all(self.labels == np.round(self.labels)):
                self.labels = self.labels.astype(np.int64)
            else:
                raise EmbedscopeError(f"{source}: labels must be integers, got {self.labels.dtype} "
                                      "(EmbeddingSet.from_arrays encodes string labels)")
        self.labels = self.labels.astype(np.int64, copy=False)
        rows = _nonfinite_rows(X) if n else ()
        if len(rows):
            raise EmbedscopeError(f"{source}: {rows.size} embedding rows contain NaN or inf (first: row {int(rows[0])})")
        try:
            check_distinct_names(self.class_names)
        except EmbedscopeError as e:
            raise EmbedscopeError(f"{source}: {e}") from None
        if n and (self.labels.min() < 0 or self.labels.max() >= len(self.class_names)):
            raise EmbedscopeError(
                f"{source}: labels must lie in [0, {len(self.class_names)}) to index class_names, "
                f"got [{self.labels.min()}, {self.labels.max()}]"
            )
        bad_split = set(np.unique(self.split).tolist()) - set(SPLITS)
        if bad_split:
            shown = ", ".join(quoted(str(s)) for s in sorted(bad_split)[:5])
            raise EmbedscopeError(f"{source}: unknown split value(s) {shown} (allowed: {', '.join(SPLITS)})")
        for k, v in self.properties.items():
            _check_property_name(k, source)
            if v.shape[:1] != (n,):  # (one value per row; a value may be several numbers: N x k)
                raise EmbedscopeError(f"{source}: property '{k}' has shape {v.shape}, expected ({n},)")
            if v.dtype.kind not in "biufOUS":  # (dates: h5py's "No conversion path for dtype <M8")
                raise EmbedscopeError(f"{source}: property '{k}' holds {v.dtype} values: give numbers or text "
                                      "(e.g. dates as ISO text)")

    # ------------------------------------------------------------------ selection
    def select(self, mask_or_index: np.ndarray) -> "EmbeddingSet":
        """A new set with the rows picked by a boolean mask (one entry per row) or row indices
        (integers, negative ones counting from the end); anything else is a one-line error."""
        from embedscope.validation import check_rows

        idx = check_rows(mask_or_index, self.n)
        return EmbeddingSet(
            embeddings=self.embeddings[idx],
            labels=self.labels[idx],
            paths=self.paths[idx],
            split=self.split[idx],
            class_names=self.class_names,
            properties={k: v[idx] for k, v in self.properties.items()},
            attrs=dict(self.attrs),
        )

    def subset(self, split: str | None) -> "EmbeddingSet":
        """Rows of one split (``train``, ``test``, ``val``, ``query``, ``gallery``); ``None`` or "all": every row."""
        if split in (None, "all"):
            return self
        if split not in SPLITS:
            raise EmbedscopeError(f"unknown split {quoted(split)} (choose {', '.join(SPLITS)} or all)")
        mask = self.split == split
        if not mask.any():
            present = ", ".join(self.splits) or "none"
            src = self.attrs.get("source_file")
            hint = ""
            if self.attrs.get("split_source") == _NO_SPLIT:  # from_arrays without split=
                hint = ("; the rows were stored without a split, so every row is 'test': ask for the split 'test' "
                        "(--split test, split='test'), or give the rows a split (import --split / "
                        "--split-by-class, EmbeddingSet.from_arrays(..., split=...))")
            raise EmbedscopeError(f"{'the file ' + str(src) if src else 'the embedding set'} has no "
                                  f"'{split}' rows (splits present: {present}{hint})")
        return self.select(mask)

    @property
    def splits(self) -> list[str]:
        """The split values present, in the order of :data:`embedscope.names.SPLITS`."""
        present = set(np.unique(self.split).tolist())
        return [s for s in SPLITS if s in present]

    def sample(self, n: int | None, *, seed: int = 0, stratify: bool = True) -> "EmbeddingSet":
        """At most ``n`` rows drawn without replacement (row order kept); ``None`` or ``n >= N``: all rows.

        ``stratify``: each class keeps its share of the rows (Webster's divisor method, at least one
        row per class while ``n`` allows; nested in ``n``: :func:`embedscope.tsne.stratified_subsample`; the
        classes drawn in the natural order of their names, so the same images under another class list keep the
        same rows),
        as the t-SNE figures sub-sample; otherwise a uniform
        draw. Seeded with ``numpy.random.default_rng(seed)``: the same call gives the same rows.
        """
        from embedscope.validation import check_int

        n = check_int(n, "the number of rows to keep", allow_none=True)  # (before comparing: "3" >= 60)
        if n is None or n >= self.n:
            return self
        if stratify:
            from embedscope.names import class_name_ranks
            from embedscope.tsne import stratified_subsample

            # the classes by name (natural order), whatever order the file lists them in
            idx = stratified_subsample(class_name_ranks(self.labels, self.class_names), n, seed=seed)
        else:
            idx = np.sort(np.random.default_rng(seed).choice(self.n, size=n, replace=False))
        return self.select(idx)

    def summary(self, *, norms: np.ndarray | None = None) -> dict[str, Any]:
        """Counts for ``embedscope info``. ``norms``: the rows' Euclidean norms when already measured
        (``info`` measures them in blocks of rows, :func:`scan_open`); else they are computed here."""
        out: dict[str, Any] = {"N": self.n, "D": self.dim, "classes": int(len(self.classes))}
        for s in self.splits or ["train", "test"]:
            m = self.split == s
            out[f"{s}_N"] = int(m.sum())
            out[f"{s}_classes"] = int(len(np.unique(self.labels[m])))
        if norms is None:
            norms = _row_norms(self.embeddings) if self.n else np.zeros(0)
        elif np.shape(norms) != (self.n,) or not np.issubdtype(np.asarray(norms).dtype, np.number):
            raise EmbedscopeError(f"norms must hold one number per row ({self.n}), got {type(norms).__name__} "
                                  f"of shape {np.shape(norms)}")
        norms = np.asarray(norms, dtype=np.float64)
        out["mean_norm"] = float(norms.mean()) if self.n else float("nan")
        out["properties"] = sorted(self.properties)
        return out


def same_values(a: Any, b: Any) -> bool:
    """Equal values, recursively through dicts, lists and arrays (numbers and text never equal);
    NaN equals NaN. The ``==`` of sets, maps and results."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return False
        if a.dtype.kind in "biufc" and b.dtype.kind in "biufc":
            return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc" or b.dtype.kind in "fc"))
        if a.dtype.kind in "US" and b.dtype.kind in "US":
            return bool(np.array_equal(a, b))
        if (a.dtype.kind in "biufc") != (b.dtype.kind in "biufc"):
            return False  # numbers never equal text
        return all(same_values(x, y) for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist()))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_values(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b))
    if isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating)) and a != a and b != b:
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _check_present(values: np.ndarray, what: str) -> None:
    """No missing value (None, NaN, NaT, pandas' NA) among ``values``: it would become a class or an item
    called "None", "nan" or "<NA>", NaT a class of its own (``embedscope import`` refuses them too). One line
    naming the first such row."""
    found = first_missing(values)
    if found is not None:
        raise EmbedscopeError(f"{what}: row {found[0]} is missing ({found[1]}); give every row a value")


def _refuse_numbers_beside_texts(values: list) -> None:
    """Labels that mix numbers and texts: one line naming one of each and their rows (["1", 1] was one class
    "1" by their texts, while check_labels and the retrieval measures refuse them: numbers are no texts)."""
    texts = (str, bytes, np.str_, np.bytes_)
    types = set(map(type, values))  # (by type first: an isinstance of numbers' ABCs per value took 0.5 s at 1M)
    if not (any(issubclass(t, _NUMBERS) for t in types) and any(issubclass(t, texts) for t in types)):
        return
    num = next(i for i, v in enumerate(values) if isinstance(v, _NUMBERS))
    txt = next(i for i, v in enumerate(values) if isinstance(v, texts))
    raise EmbedscopeError(f"labels mix numbers and texts ({quoted(values[num])} at row {num}, "
                          f"{quoted(values[txt])} at row {txt}): give every label as a number or every one as a text")


def _label_texts(y_arr: np.ndarray) -> np.ndarray:
    """Labels held as texts or objects as their texts; one line naming the first label that is a sequence
    (a list, tuple or array per row: numpy's "setting an array element with a sequence" was the traceback)."""
    texts = decoded(y_arr)
    _refuse_nul(texts)
    try:
        return texts.astype(str)  # (bytes decoded as UTF-8, as the retrieval measures read them: non-ASCII
    except ValueError:  # bytes were "got a bytes_ at row 0", or of a str beside them)
        i = next((i for i, v in enumerate(y_arr.tolist()) if np.ndim(v) > 0), 0)
        raise EmbedscopeError(f"labels must hold class labels (integers or strings), got a "
                              f"{type(y_arr[i]).__name__} at row {i}") from None


def _refuse_nul(values: Any, what: str = "labels", *, trailing: bool = False) -> None:
    """One line naming the first row of ``values`` (a list, a tuple, or an array of texts or objects) whose text
    holds a NUL, in :func:`_check_text`'s words: HDF5 text cannot hold it, and numpy's texts (``astype(str)``,
    the array of a list) cut trailing NULs, silently (the paths "x" and "x\\x00" one path; as class names "a"
    and "a\\x00" one class "a", which check_labels and the retrieval measures keep apart). ``trailing``: only a
    text that ends in one (a NUL inside a text is kept, and refused where the set is saved)."""
    i = first_nul(values, trailing=trailing)
    if i is not None:
        raise EmbedscopeError(f"{what}: row {i} holds a NUL character, which HDF5 text cannot store")


def _instant_names(values: list) -> np.ndarray:
    """Dates with a time zone (``pd.Timestamp`` or ``datetime.datetime``) as the name of each one's class: one
    class per instant (compared exactly: in UTC, with a Timestamp's nanoseconds), named by the text of its first
    row's value, which is every row's text where the labels share one zone."""
    utc = _dt.timezone.utc
    first: dict[tuple, str] = {}
    keys = []
    for v in values:
        u = v.astimezone(utc)
        key = (_dt.datetime(u.year, u.month, u.day, u.hour, u.minute, u.second, u.microsecond),
               getattr(u, "nanosecond", 0))
        first.setdefault(key, str(v))
        keys.append(key)
    out = np.empty(len(values), dtype=object)
    out[:] = [first[k] for k in keys]
    return out


def _value_names(values: np.ndarray) -> list[str]:
    """The names of date, duration or boolean classes ``values``: a date by its instant, spelt as briefly as
    it is exact, a day at least ("2020-01-01", "2020-01-02T12:30", whatever the unit: a datetime64[ns] day
    was "2020-01-01T00:00:00.000000000", a pandas Timestamp "2020-01-01 00:00:00"); a duration as numpy
    writes it in the coarsest unit that holds it exactly, days at most, whatever the array's unit ("1 days",
    "90 minutes", "1 nanoseconds": a timedelta64[s] day was "86400 seconds", [ns] "86400000000000 nanoseconds");
    a boolean "False" or "True" (a numpy bool array's were "0" and "1")."""
    if values.dtype.kind == "M":
        return np.datetime_as_string(values, unit="auto").tolist()
    if values.dtype.kind == "m":
        return _duration_names(values)
    return [str(v) for v in values]


#: units of a duration, coarsest first, in attoseconds (months and years have no fixed length: in months)
_FIXED_UNITS = {"D": 86_400 * 10 ** 18, "h": 3_600 * 10 ** 18, "m": 60 * 10 ** 18, "s": 10 ** 18, "ms": 10 ** 15,
                "us": 10 ** 12, "ns": 10 ** 9, "ps": 10 ** 6, "fs": 10 ** 3, "as": 1}
_CALENDAR_UNITS = {"Y": 12, "M": 1}


def _duration_names(values: np.ndarray) -> list[str]:
    """Durations (a timedelta64 array, no NaT) named as numpy writes them in the coarsest unit that holds each
    exactly (:func:`_value_names`), so that one duration has one name whatever the unit it is held in."""
    base, mult = np.datetime_data(values.dtype)
    units = _CALENDAR_UNITS if base in _CALENDAR_UNITS else _FIXED_UNITS
    if base not in units:  # (numpy's generic unit, or weeks: days and below)
        if base != "W":
            return [str(v) for v in values]
        base, mult = "D", 7 * mult
    step = units[base] * mult
    names = []
    for count in values.view(np.int64).tolist():
        total = count * step  # (exact: Python integers)
        unit = next(u for u, f in units.items() if total % f == 0)
        names.append(str(np.timedelta64(total // units[unit], unit)))
    return names


_NUMBERS = NUMBERS


def _exact_numbers(listed: list) -> np.ndarray | None:
    """Numbers (Python's or numpy's, booleans beside them) as one numpy array of integers within int64 or of
    floats, where that array holds every one of them exactly: integers within int64, or floats below 2^53 in
    magnitude (every integer up to 2^53 is a float64; one beyond it sets the maximum at 2^53 or more, as
    2^62 + 1 beside 1.0, which numpy makes 2^62). Else ``None``: compare them as Python numbers (ids beyond
    int64, Decimals, Fractions, infinities)."""
    try:
        a = np.array(listed)
    except (OverflowError, TypeError, ValueError):
        return None
    if a.ndim != 1 or a.dtype.kind not in "iuf" or beyond_int64(a):
        return None
    if a.dtype.kind == "f" and not float(np.max(np.abs(a))) < 2.0 ** 53:  # (inf too)
        return None
    return a


def _big_ids(values: list, keys: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Integral numbers ``values`` (Python ints and floats; ``keys``: each as an int), some beyond the int64
    range, as codes 0..C-1 in the order of their values and the classes' names: equal values one class
    (1 == 1.0, 2^63 == 2.0^63), compared exactly, as Python integers (as float64, 2^63 and 2^63 + 1 were
    one value). A class is named by an integer of it where it holds one (exactly: "9223372036854775808"),
    else by its float: "1" for 1.0 within int64 (as the labels 1.0 and 2.0 are named "1" and "2"),
    "1e+19" beyond it."""
    distinct = sorted(set(keys))
    code = {k: i for i, k in enumerate(distinct)}
    named: dict[int, str] = {}
    for v, k in zip(values, keys):
        if isinstance(v, int):  # (str(k): True beside 2^63 is the class "1", as beside 0 alone)
            named[k] = str(k)
        elif k not in named:
            named[k] = str(k) if -2 ** 63 <= k < 2 ** 63 else str(v)
    return (np.array([code[k] for k in keys], dtype=np.int64),
            np.array([named[k] for k in distinct], dtype=object))


def check_distinct_names(names) -> dict[str, int]:
    """``{name: position}`` of the class names, or one line naming the first repeated one: two classes
    of one name would be one in every table and figure that names them (was refused for string labels
    only; integer labels with ``--class-names`` took the repeat silently)."""
    index: dict[str, int] = {}
    for i, c in enumerate(names):
        c = str(c)
        if c in index:
            raise EmbedscopeError(f"class names repeat {quoted(c)} (positions {index[c]} and {i})")
        index[c] = i
    return index


def _labels_by_name(y: np.ndarray, names: list[str]) -> np.ndarray:
    """String labels -> their index in ``names`` (one-line errors for repeated names, unknown labels)."""
    index = check_distinct_names(names)
    values, inverse = np.unique(y, return_inverse=True)
    unknown = [str(v) for v in values if v not in index]
    if unknown:
        raise EmbedscopeError(f"{len(unknown)} label(s) are not among the {len(names)} class names, e.g. "
                              f"{', '.join(quoted(u) for u in unknown[:3])}")
    return np.array([index[v] for v in values], dtype=np.int64)[inverse.reshape(-1)]


def _check_property_name(name: str, source: str) -> None:
    """``/properties/<name>`` is an HDF5 path: "/" would make groups, "." and "" name no dataset."""
    if name in ("", ".", "..") or "/" in name or "\x00" in name:
        raise EmbedscopeError(f"{source}: {quoted(name)} cannot be a property name (no '/', NUL, '.' or empty "
                              "name in HDF5)")


def _check_text(values: np.ndarray, what: str) -> None:
    """HDF5 strings are NUL-terminated UTF-8: a NUL would cut the text there, a lone surrogate (an
    undecodable byte of a file name) cannot be written. One line naming the first such row."""
    for i, v in enumerate(values):
        v = str(v)
        if "\x00" in v:
            raise EmbedscopeError(f"{what}: row {i} holds a NUL character, which HDF5 text cannot store")
        if not v.isascii():
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise EmbedscopeError(f"{what}: row {i} is not valid text (an undecodable byte, "
                                      f"{quoted(v)})") from None


#: the most values read from a file's embeddings at a time (``embedscope info``, ``add-properties``: a
#: file of 100k x 2048 float32 is 800 MB), rounded down to whole HDF5 chunks of rows where they fit
_BLOCK_VALUES = 1 << 20
#: the most values converted to float64 at a time (the norms' and the NaN checks' temporaries)
_MATH_VALUES = 1 << 16


def _row_blocks(shape: tuple[int, ...], chunks: tuple[int, ...] | None = None, most: int | None = None):
    """Slices of the rows of an N x D array, about ``most`` values each (at least one row): whole HDF5
    chunks of rows (``chunks``, a dataset's chunk shape) when a row of chunks holds no more than ``most``
    values, so that each chunk is read once. ``most``: default :data:`_BLOCK_VALUES`, read at each call."""
    most = _BLOCK_VALUES if most is None else most
    n, d = int(shape[0]), max(int(shape[1]) if len(shape) > 1 else 1, 1)
    rows = max(1, most // d)
    if chunks and 1 < chunks[0] <= rows:
        rows -= rows % chunks[0]
    for i in range(0, n, rows):
        yield slice(i, min(n, i + rows))


def _row_norms(X) -> np.ndarray:
    """The Euclidean norm of each row of ``X`` (2-D), in float64, a block of rows at a time (no N x D
    float64 copy): the same values, bit for bit, as ``np.linalg.norm(X.astype(np.float64), axis=1)``."""
    out = np.empty(X.shape[0], dtype=np.float64)
    for b in _row_blocks(X.shape, most=_MATH_VALUES):
        out[b] = np.linalg.norm(np.asarray(X[b]).astype(np.float64), axis=1)
    return out


def _nonfinite_rows(X) -> np.ndarray:
    """The indices of the rows of ``X`` (2-D) holding NaN or inf, checked a block of rows at a time (no
    N x D temporary)."""
    found = [np.flatnonzero(~np.isfinite(X[b]).all(axis=1)) + b.start
             for b in _row_blocks(X.shape, most=_MATH_VALUES)]
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


@dataclass(eq=False)
class RowStats:
    """What :func:`scan_open` measured of each embedding row while it checked them, a block at a time."""

    #: bool [N]: the row holds a NaN
    nan: np.ndarray
    #: bool [N]: the row holds an inf
    inf: np.ndarray
    #: float64 [N]: the row's Euclidean norm, computed in float64 (as :meth:`EmbeddingSet.summary`)
    norms: np.ndarray

    @property
    def finite(self) -> np.ndarray:
        """bool [N]: the row holds neither NaN nor inf."""
        return ~(self.nan | self.inf)


def _scan_embeddings(ds) -> tuple[np.dtype, RowStats]:
    """Read the 2-D numeric dataset ``ds`` (``/embeddings``) a block of rows at a time: the type
    :func:`load` gives it (floats as stored; integers as float32 when every one is a float32, else
    float64) and its :class:`RowStats`. Memory: one block (:data:`_BLOCK_VALUES` values) and the
    per-row results."""
    n = int(ds.shape[0])
    stats = RowStats(np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), np.zeros(n, dtype=np.float64))
    dtype = ds.dtype
    biggest = 0.0  # integers: the largest magnitude (load's test of float32 holding them exactly)
    if ds.size:
        for b in _row_blocks(ds.shape, ds.chunks):
            block = ds[b]
            for s in _row_blocks(block.shape, most=_MATH_VALUES):
                part = block[s]
                rows = slice(b.start + s.start, b.start + s.stop)
                if dtype.kind == "f":
                    stats.nan[rows] = np.isnan(part).any(axis=1)
                    stats.inf[rows] = np.isinf(part).any(axis=1)
                else:
                    biggest = max(biggest, float(np.max(np.abs(part.astype(np.float64)))))
                stats.norms[rows] = np.linalg.norm(part.astype(np.float64), axis=1)
    if dtype.kind != "f":  # (as read_open converts them)
        exact32 = dtype.itemsize <= 2 or not ds.size or int(biggest) <= FLOAT32_EXACT_INT
        dtype = np.dtype(np.float32 if exact32 else np.float64)
    return dtype, stats


def _spellings():
    import re
    import unicodedata

    return (("a leading './'", lambda p: re.sub(r"^(\./)+", "", p)),
            ("spaces around them", str.strip),
            ("Unicode normalisation (NFC vs NFD)", lambda p: unicodedata.normalize("NFC", p)),
            ("letter case", str.casefold),
            ("'\\' vs '/'", lambda p: p.replace("\\", "/")))


def spelling_hint(only_a: Sequence[str], only_b: Sequence[str], limit: int = 20000) -> str:
    """Why paths held by one side only may still name the same images: ``"; N of them differ only by
    <how> (e.g. 'x' vs 'y')"`` when some of ``only_a`` equal some of ``only_b`` once spelled alike
    (a leading ``./``, spaces around them, NFC vs NFD, letter case, ``\\`` vs ``/``, or one side's
    paths a data root longer than the other's), else ``""``. Paths are never matched so: the hint
    only says why they were not. Looks at the first ``limit`` paths of each side."""
    a = [str(p) for p in list(only_a)[:limit]]
    b = [str(p) for p in list(only_b)[:limit]]
    if not a or not b:
        return ""
    kinds, hit, example = [], set(), None
    for what, key in _spellings():
        kb = {key(p): p for p in b}
        hits = [(p, kb[key(p)]) for p in a if key(p) in kb]
        if hits:
            kinds.append(what)
            hit.update(p for p, _ in hits)
            example = example or hits[0]
    if not kinds:  # one side's paths under a data root that the other's leave out
        sb, sa = set(b), set(a)
        for xs, ys, flip in ((a, sb, False), (b, sa, True)):
            hits = []
            for p in xs:
                parts = p.split("/")
                tail = next((t for t in ("/".join(parts[i:]) for i in range(1, len(parts))) if t in ys), None)
                if tail is not None:
                    hits.append((tail, p) if flip else (p, tail))
            if hits:
                kinds.append("a leading folder (a data root one side gives and the other leaves out)")
                hit, example = {p for p, _ in hits}, hits[0]
                break
    if not kinds:
        return ""
    x, y = example
    shown = f"'{x}' vs '{y}'"
    if any("NFC" in k for k in kinds):  # NFC vs NFD look alike: their code points where they differ
        i = len(os.path.commonprefix([x, y]))
        j = len(os.path.commonprefix([x[i:][::-1], y[i:][::-1]]))
        points = [" ".join(f"U+{ord(c):04X}" for c in p[i:len(p) - j]) for p in (x, y)]
        shown += f", {points[0]} vs {points[1]}"
    return (f"; {len(hit)} of them differ only by {' or '.join(kinds)} (e.g. {shown}): paths are matched "
            "as written")


def match_by_path(a: EmbeddingSet, b: EmbeddingSet, name_a: str = "a", name_b: str = "b"
                  ) -> tuple[EmbeddingSet, EmbeddingSet]:
    """Reorder ``b`` to ``a``'s rows by image path (the same images under two models, epochs or layers).

    One-line :class:`EmbedscopeError` when a file repeats a path, the image sets differ, or the two
    files give an image different classes.
    """
    for es, nm in ((a, name_a), (b, name_b)):
        if not isinstance(es, EmbeddingSet):
            raise EmbedscopeError(f"match_by_path needs two EmbeddingSets, got {type(es).__name__} for {nm}")
    for es, nm in ((a, name_a), (b, name_b)):
        if len(np.unique(es.paths)) != es.n:
            raise EmbedscopeError(f"{nm}: duplicate paths, cannot match rows by path")
    only_a = np.setdiff1d(a.paths, b.paths)
    only_b = np.setdiff1d(b.paths, a.paths)
    if len(only_a) or len(only_b):
        ex = only_a[0] if len(only_a) else only_b[0]
        raise EmbedscopeError(
            f"{name_a} and {name_b} hold different images ({len(only_a)} only in {name_a}, "
            f"{len(only_b)} only in {name_b}, e.g. {ex}{spelling_hint(only_a, only_b)}); comparing them needs "
            "the same images in both")
    pos = {p: i for i, p in enumerate(b.paths)}
    b = b.select(np.array([pos[p] for p in a.paths], dtype=np.int64))
    if not np.array_equal(a.class_names[a.labels], b.class_names[b.labels]):
        bad = int(np.count_nonzero(a.class_names[a.labels] != b.class_names[b.labels]))
        raise EmbedscopeError(f"{name_a} and {name_b} give {bad} images different classes")
    return a, b


#: The attribute listing (as a JSON array) the attributes stored as JSON text: lists, dicts, None.
#: With it, a text attribute comes back exactly as written (a string "[1]" or "null" stays a string)
#: and None comes back as None; files without it (older ones, other tools') are read as before.
JSON_ATTRS = "json_attrs"
#: attributes :func:`load` (and an analysis reading a file) set on a set in memory about the file it
#: came from: never written by :func:`save` (a set saved elsewhere named the file it was read from as
#: its source, and its sha256)
READ_ATTRS = ("source_file", "_source_stat", "_sha256")


def _is_plain(value: Any) -> bool:
    """A value HDF5 stores as an attribute as it is (anything else is written as JSON text)."""
    return isinstance(value, (str, int, float, bool, np.integer, np.floating))


def _as_attr(value: Any) -> Any:
    return value if _is_plain(value) else json.dumps(value, sort_keys=True, default=str)


def _attr_text(key: str, value: str) -> str:
    """A text attribute as HDF5 can store it: a NUL is refused (one line naming the attribute); an
    undecodable byte of a file name (a lone surrogate, e.g. in ``import_source`` or ``root``) is written
    escaped (``\\xff``) instead of stopping the write."""
    if "\x00" in value:
        raise EmbedscopeError(f"attribute '{key}' holds a NUL character, which HDF5 text cannot store")
    return escape_undecodable(value)


def write_attrs(target, attrs: Mapping[str, Any]) -> None:
    """Write ``attrs`` to an h5py attribute set: scalars and text as they are, anything else as JSON
    text, named in :data:`JSON_ATTRS` so that :func:`read_attrs` gives back what was written."""
    encoded = []
    for k, v in attrs.items():
        if k == JSON_ATTRS:
            continue
        if not _is_plain(v):
            encoded.append(k)
        v = _as_attr(v)
        target[k] = _attr_text(k, v) if isinstance(v, str) else v
    target[JSON_ATTRS] = json.dumps(sorted(encoded))


def read_attrs(source) -> dict[str, Any]:
    """The attributes as :func:`write_attrs` wrote them (files without :data:`JSON_ATTRS`: text that
    starts with ``{`` or ``[`` and is valid JSON is parsed, as older embedscope wrote lists and dicts)."""
    raw = {k: _plain_attr(v) for k, v in source.items()}
    listed = raw.pop(JSON_ATTRS, None)
    keys = None
    if isinstance(listed, str):
        try:
            keys = json.loads(listed)
        except ValueError:
            keys = None
    if not isinstance(keys, list):
        return {k: _from_attr(v) for k, v in raw.items()}
    out = {}
    for k, v in raw.items():
        if k in keys and isinstance(v, str):
            try:
                v = json.loads(v)
            except ValueError:
                pass
        out[k] = v
    return out


def _plain_attr(value: Any) -> Any:
    if isinstance(value, bytes):  # another tool's text in another encoding (latin-1 b"caf\xe9"): its bytes
        # kept as a file name's undecodable bytes are (shown \xe9, written back escaped), not a
        # UnicodeDecodeError from every command that reads the file
        value = value.decode("utf-8", "surrogateescape")
    if isinstance(value, np.generic):
        value = value.item()
    return value


def _from_attr(value: Any) -> Any:
    value = _plain_attr(value)
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def save(
    path: str | os.PathLike,
    es: EmbeddingSet,
    *,
    force: bool = False,
    attrs: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``es`` to ``path`` atomically (temporary file in the same folder, then rename).

    An existing ``path`` is refused unless ``force=True`` (nothing is written then). The embeddings
    are stored as float32 (docs/store.md): float32 and float16 exactly, other floats rounded to the
    nearest float32 (relative error at most 2^-24). Refused, with one line naming the first row:
    values beyond float32's range (they would become inf), rows whose largest |x| is below float32's
    normal range (1.2e-38: their direction would be lost to underflow) and integer-valued embeddings
    beyond 2^24 in magnitude, which float32 cannot hold exactly (pass ``X.astype("float32")`` to
    accept the rounding).

    What :func:`load` notes about the file it read (:data:`READ_ATTRS`: its path, size and time, an
    analysis's sha256 of it) describes that file, not this one, and is not written.
    """
    import h5py

    from embedscope import __version__

    if not isinstance(es, EmbeddingSet):
        if isinstance(path, EmbeddingSet):  # save(es, path): the arguments swapped
            raise EmbedscopeError("store.save takes the path first: save(path, es)")
        raise EmbedscopeError(f"store.save needs an EmbeddingSet (EmbeddingSet.from_arrays(X, y) builds one "
                              f"from arrays), got {type(es).__name__}")
    if attrs is not None and not isinstance(attrs, Mapping):
        raise EmbedscopeError(f"attrs must be a mapping (name -> value), got {type(attrs).__name__}")
    es.validate()
    X32 = _as_stored(es.embeddings, path)
    for what, values in (("paths", es.paths), ("split", es.split), ("class_names", es.class_names),
                         *((f"property '{k}'", v) for k, v in es.properties.items() if v.dtype.kind in "OUS")):
        _check_text(np.asarray(values).reshape(-1), f"{path}: {what}")
    all_attrs = {k: v for k, v in es.attrs.items() if k not in READ_ATTRS}
    all_attrs.update(attrs or {})
    all_attrs["format_version"] = FORMAT_VERSION
    all_attrs.setdefault("embedscope_version", __version__)
    all_attrs.setdefault("created", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    str_dt = h5py.string_dtype("utf-8")
    # a file replaced (force) waits for an update of it under way (add-properties: a copy of the file published
    # after this one's rename took its place, with the old rows)
    from embedscope.fileio import update_lock

    turn = update_lock(Path(os.path.realpath(path))) if force and os.path.lexists(path) else contextlib.nullcontext()
    with turn, atomic_output(path, force=force) as tmp:
        # The file is built in memory and written with ordinary file I/O: a full disk is then a
        # clean OSError here (HDF5's own writer can crash the process on ENOSPC).
        image = io.BytesIO()
        with h5py.File(image, "w") as f:
            f.create_dataset("embeddings", data=X32, chunks=True)
            f.create_dataset("labels", data=es.labels.astype(np.int64))
            f.create_dataset("paths", data=es.paths.astype(object), dtype=str_dt)
            f.create_dataset("split", data=es.split.astype(object), dtype=str_dt)
            f.create_dataset("class_names", data=es.class_names.astype(object), dtype=str_dt)
            g = f.create_group("properties")
            for k, v in es.properties.items():
                _write_property(g, k, v)
            write_attrs(f.attrs, all_attrs)
        _write_bytes(tmp, image.getbuffer(), path)
    return Path(path)


def _as_stored(X: np.ndarray, path, *, exact_ints: bool = True) -> np.ndarray:
    """``X`` as the file keeps it, float32, or one :class:`EmbedscopeError` line where float32 would
    change it by more than rounding (see :func:`save`). ``exact_ints=False`` (``embedscope import``,
    docs/import.md) rounds integers beyond 2^24 as it rounds float64, to the nearest float32."""
    if X.dtype == np.float32 or (X.dtype.kind == "f" and X.dtype.itemsize < 4):
        return X.astype(np.float32, copy=False)  # float16: every value is a float32
    with np.errstate(over="ignore", under="ignore"):
        X32 = X.astype(np.float32)
    big = np.flatnonzero(~np.all(np.isfinite(X32), axis=1))
    if big.size:
        raise EmbedscopeError(f"{path}: {big.size} embedding row(s) hold values beyond float32's range (|x| > 3.4e38; "
                              f"first: row {int(big[0])}), and the store keeps float32: scale the embeddings")
    amax = np.max(np.abs(X), axis=1) if X.size else np.zeros(X.shape[0])
    tiny = np.flatnonzero((amax > 0) & (amax < np.finfo(np.float32).tiny))
    if tiny.size:
        raise EmbedscopeError(f"{path}: {tiny.size} embedding row(s) are too small for float32, the stored type "
                              f"(largest |x| {float(amax[tiny[0]]):.3g} < 1.2e-38 in row {int(tiny[0])}; "
                              "their direction would be lost): scale the embeddings")
    if exact_ints and X.size and amax.max() > FLOAT32_EXACT_INT and np.array_equal(X, np.round(X)):
        lost = np.flatnonzero(np.any(X32 != X, axis=1))
        if lost.size:
            i = int(lost[0])
            v = X[i][X32[i] != X[i]][0]
            raise EmbedscopeError(
                f"{path}: the embeddings are integers beyond 2^24 = {FLOAT32_EXACT_INT} in magnitude (row {i}: "
                f"{int(v)}), which float32, the stored type, cannot hold exactly; pass X.astype('float32') "
                "to accept the rounding, or scale them")
    return X32


def _write_property(g, name: str, v: np.ndarray) -> None:
    """``/properties/<name>``: strings as utf-8, numbers as they are (replacing one of that name)."""
    import h5py

    if name in g:
        del g[name]
    if v.dtype.kind in "OUS":
        g.create_dataset(name, data=v.astype(str).astype(object), dtype=h5py.string_dtype("utf-8"))
    else:
        g.create_dataset(name, data=v)


def update_properties(path: str | os.PathLike, es: EmbeddingSet, names: Sequence[str], *,
                      absent: Sequence[str] = (), kept: dict[str, list[str]] | None = None,
                      not_kept: dict[str, list[str]] | None = None) -> Path:
    """Write ``es.properties[name]`` for ``names`` into the existing file ``path`` (read as ``es``, by
    :func:`load` or :func:`scan`), atomically, keeping everything else in it: other groups, datasets and
    attributes that other tools wrote with plain h5py survive (:func:`save` would write the schema only).

    Properties added: the file is copied into a temporary file beside it (by the kernel, a block at a
    time: memory bounded whatever its size) and they are written into the copy. Properties replaced:
    HDF5 does not give back a deleted dataset's space to the file (a text property's strings stay in
    its global heap: each replacement grew the file by their size, the old values readable in it), so
    the temporary file is built afresh
    (:func:`_rebuilt_without`): every object but the replaced properties copied by HDF5 (H5Ocopy: their
    storage, chunks, filters, types and attributes as they are, a chunk at a time), then the properties
    written. Either file then replaces the file (its mode kept); on any failure, Ctrl-C included, the
    file is left as it was and the copy removed. Updates of one file by several processes take turns
    (:func:`embedscope.fileio.update_lock`): each keeps the others' properties. ``absent``: names that must
    not exist when the update starts (one-line error: another process added them meanwhile).

    A property replaced keeps the HDF5 attributes the old dataset had (units, a description, written by
    another tool: the values are new, what they are is not); ``kept``, when given, is filled with the
    names of those attributes by property (the command line says which, so that stale ones can be
    removed); ``not_kept`` with those that could not be (object or region references, a dimension scale's
    ``DIMENSION_LIST``: they point into the old file).

    A file without write permission (``chmod 444``, another user's) is refused in one line, as
    ``add-properties`` refuses it: the rename of the updated copy, which the folder allows, would replace it
    all the same."""
    import h5py

    _check_updatable(path)
    es.validate()
    if isinstance(names, str):  # one name, not its letters ('colour' was KeyError: 'c')
        names = [names]
    names = list(names)
    lacking = next((k for k in names if k not in es.properties), None)
    if lacking is not None:  # (was KeyError: 'w')
        raise EmbedscopeError(f"{path}: no property {quoted(lacking)} in the set to write (names: the keys of "
                              "es.properties to write into the file)")
    for k in names:
        if es.properties[k].dtype.kind in "OUS":
            _check_text(es.properties[k].reshape(-1), f"{path}: property '{k}'")
    # a file named through a symbolic link is updated where it is (the link kept): replacing the link with
    # an updated copy left the file itself without the properties
    src = Path(os.path.realpath(path))
    from embedscope.fileio import update_lock

    with update_lock(src):
        # (one line where HDF5 will not open it: another process holding it for writing was h5py's raw
        # BlockingIOError, "[Errno 11] Unable to synchronously open file (unable to lock file, ...)")
        with open_hdf5(Path(path), "an embedding file") as f:
            g = f.get("properties")
            replaced = [k for k in names if isinstance(g, h5py.Group) and k in g]
            same_rows = _same_paths(f, es.paths)
        if not same_rows:  # replaced since it was read (embed / import --force): the values are matched to other rows
            raise EmbedscopeError(f"{path}: the file was replaced while the properties were being added (its rows are "
                                  "not those the values were matched to): nothing was written; run the command again")
        late = [k for k in absent if k in replaced]
        if late:
            raise EmbedscopeError(f"{path}: another process added the propert{'ies' if len(late) > 1 else 'y'} "
                                  f"{', '.join(late[:3])} meanwhile (use --force to replace)")
        carried, left = _replace_with_properties(src, path, es, names, replaced)
    if kept is not None:
        kept.update(carried)
    if not_kept is not None:
        not_kept.update(left)
    return src


def _check_updatable(path) -> None:
    """One line for a file :func:`update_properties` may not rewrite: one without write permission (the mode's
    write bits are read, not only ``access``: root may write any file, and a file the user made read-only was
    updated all the same). A file that cannot be stat'ed is left to the reader, which says why."""
    import stat

    try:
        st = os.stat(path)
    except OSError:
        return
    if stat.S_ISREG(st.st_mode) and (not st.st_mode & 0o222 or not os.access(path, os.W_OK)):
        raise EmbedscopeError(f"{path}: the file is read-only (no write permission): updating its properties "
                              "rewrites it; make it writable first (chmod u+w) to add properties to it")


def _same_paths(f, paths: np.ndarray) -> bool:
    """Whether the open file ``f`` holds the image paths ``paths``, in that order."""
    import h5py

    ds = f.get("paths")
    if not isinstance(ds, h5py.Dataset) or ds.shape != (len(paths),):
        return False
    try:
        now = _texts(ds[()], "paths")
    except (EmbedscopeError, OSError):
        return False
    return list(now) == list(paths)


def _texts(values, where: str) -> np.ndarray:
    """The text values of an HDF5 dataset as read by h5py (bytes or str) as an object array of str;
    invalid UTF-8 is a one-line error naming ``where``."""
    try:
        return np.array([s.decode("utf-8") if isinstance(s, bytes) else str(s) for s in values], dtype=object)
    except UnicodeDecodeError:
        raise EmbedscopeError(f"{where} holds invalid UTF-8 text") from None


def _replace_with_properties(src: Path, path, es: EmbeddingSet, names: Sequence[str],
                             replaced: list[str]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """:func:`update_properties`' copy (or rebuild) of ``src`` with the properties, replacing it; returns
    the names of the attributes each replaced property kept and of those it could not keep (references)."""
    import shutil

    import h5py

    kept: dict[str, list[str]] = {}
    left: dict[str, list[str]] = {}
    with atomic_output(src, force=True) as tmp:
        try:
            if not replaced:
                shutil.copyfile(src, tmp)
            # h5py writes through the Python file object: a full disk is an OSError here (HDF5's own
            # writer can crash the process on ENOSPC)
            with open(tmp, "r+b") as fh:
                if replaced:
                    _rebuilt_without(src, fh, set(replaced))
                with h5py.File(fh, "r+") as f:
                    g = f.require_group("properties")
                    for k in names:
                        _write_property(g, k, es.properties[k])
                    if replaced:  # (the old datasets' attributes: the new values' units, description, ...)
                        with h5py.File(src, "r") as fs:
                            for k in replaced:
                                old = fs["properties"][k]
                                skipped = _copy_attrs(old, g[k], refs=False)
                                if skipped:
                                    left[k] = skipped
                                if len(old.attrs) > len(skipped):
                                    kept[k] = [a for a in old.attrs if a not in skipped]
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as e:
            stop = _stopped_by(e)
            if stop is not None:  # Ctrl-C (SIGTERM) while h5py wrote: it reports an OSError of its own
                raise stop from None
            raise _write_error(e, path) from None
    return kept, left


def _copy_attrs(a, b, *, refs: bool = True) -> list[str]:
    """The attributes of the HDF5 object ``a`` onto ``b``, each of the type and shape it is stored as;
    ``refs=False``: those holding object or region references left out (into another file they point
    at nothing, or at another object: a dimension scale's ``DIMENSION_LIST``), their names returned."""
    skipped = []
    for name in a.attrs:
        aid = a.attrs.get_id(name)
        if not refs and _holds_refs(aid.dtype):
            skipped.append(name)
            continue
        b.attrs.create(name, a.attrs[name], shape=aid.shape, dtype=aid.dtype)
    return skipped


def _holds_refs(dt) -> bool:
    """Whether the h5py dtype ``dt`` holds HDF5 references (itself, as a variable-length sequence's
    items, a compound's fields or an array's items)."""
    import h5py

    if h5py.check_dtype(ref=dt) is not None:
        return True
    base = h5py.check_dtype(vlen=dt)
    if base is not None and base is not str and base is not bytes and _holds_refs(np.dtype(base)):
        return True
    if dt.fields:
        return any(_holds_refs(f[0]) for f in dt.fields.values())
    return dt.subdtype is not None and _holds_refs(dt.subdtype[0])


def _rebuilt_without(src: Path, fh, dropped: set[str]) -> None:
    """Write into the open, empty file ``fh`` the HDF5 file ``src`` less the properties ``dropped``
    (``/properties/<name>``): the root's and the properties group's attributes (type and shape as
    stored), every other object copied by HDF5 (H5Ocopy: a dataset's storage, chunking, filters, fill
    value and attributes as they are, read and written a chunk at a time, never whole), links as links
    (a soft or external link is not followed), an object with several names copied once, and the user
    block, the groups' link-creation order kept."""
    import h5py

    def order(g) -> bool:
        return bool(g.id.get_create_plist().get_link_creation_order())

    with h5py.File(src, "r") as fs:
        userblock = fs.userblock_size
        with h5py.File(fh, "w", userblock_size=userblock or None, track_order=order(fs)) as fd:
            _copy_attrs(fs, fd)
            copied: dict[Any, str] = {}  # object -> its first name in the new file (hard links)

            def copy(a, b, name: str) -> None:
                link = a.get(name, getlink=True)
                if isinstance(link, h5py.SoftLink):
                    b[name] = h5py.SoftLink(link.path)
                elif isinstance(link, h5py.ExternalLink):
                    b[name] = h5py.ExternalLink(link.filename, link.path)
                else:
                    key = a[name].id
                    if key in copied:
                        b[name] = fd[copied[key]]
                    else:
                        a.copy(name, b, name=name)
                        copied[key] = f"{b.name.rstrip('/')}/{name}"

            for name in fs:
                props = fs.get(name, getlink=True)
                if name == "properties" and isinstance(props, h5py.HardLink) and isinstance(fs[name], h5py.Group):
                    gs = fs[name]
                    gd = fd.create_group(name, track_order=order(gs))
                    _copy_attrs(gs, gd)
                    for k in gs:
                        if k not in dropped:
                            copy(gs, gd, k)
                else:
                    copy(fs, fd, name)
    if userblock:  # (HDF5 leaves it zeroed: another tool's header, kept)
        with open(src, "rb") as f:
            head = f.read(userblock)
        fh.seek(0)
        fh.write(head)
        fh.seek(0)


def _stopped_by(e: BaseException) -> BaseException | None:
    """The KeyboardInterrupt (or the command line's Terminated) among the causes of ``e``, if any."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if not isinstance(e, Exception):
            return e
        e = e.__cause__ or e.__context__
    return None


def _write_bytes(tmp: Path, data, user_path) -> None:
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as e:
        raise _write_error(e, user_path) from None


def _write_error(e: OSError, user_path) -> EmbedscopeError:
    """The one line for an OSError met writing ``user_path``'s temporary file (a full disk also when h5py
    reports it as its own error: "driver write request failed", the ENOSPC its cause)."""
    from embedscope.fileio import _disk_full

    if _disk_full(e, Path(user_path).parent):
        return EmbedscopeError(f"{user_path}: no space left on device")
    return EmbedscopeError(f"{user_path}: could not be written ({e.strerror or e.__class__.__name__})")


def open_hdf5(path: Path, what: str):
    """``h5py.File(path, "r")``, or one line saying why not: a folder, a named pipe or a device, a file this user
    may not read, an
    empty file, a file that is no HDF5 file, a damaged one (was "not a readable HDF5 file (OSError)" for
    each but the folder, "(PermissionError)" for an unreadable one)."""
    import stat

    import h5py

    if path.is_dir():
        raise EmbedscopeError(f"{path} is a directory, expected {what}")
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        mode = None  # (the opening below says why)
    if mode is not None and not stat.S_ISREG(mode):  # a named pipe: HDF5's open waited for a writer, for ever
        raise EmbedscopeError(f"{path} is not a regular file (a device, a named pipe or a socket), expected {what}")
    try:
        return h5py.File(path, "r")
    except OSError as e:
        error = e
    try:
        with open(path, "rb") as fh:
            empty = not fh.read(1)
    except OSError as e:
        raise EmbedscopeError(f"{path}: cannot read ({e.strerror or e.__class__.__name__})") from None
    if empty:
        raise EmbedscopeError(f"{path}: not a readable HDF5 file: the file is empty (expected {what})")
    try:
        hdf5 = h5py.is_hdf5(path)
    except OSError:
        hdf5 = True
    if not hdf5:
        raise EmbedscopeError(f"{path}: not a readable HDF5 file: no HDF5 signature (expected {what})")
    first = str(error).splitlines()[0] if str(error) else error.__class__.__name__
    raise EmbedscopeError(_open_failure(path, first))


def _open_failure(path: Path, first: str) -> str:
    """The line for a file with an HDF5 signature that HDF5 would not open (its message ``first``)."""
    from embedscope.fileio import hdf5_lock_failure

    locked = hdf5_lock_failure(path, first)  # (HDF5's file lock: held by another process, or none on this file system)
    if locked is not None:
        return locked
    if "already open for write" in first:
        # the superblock's consistency flags: set by a writer in SWMR mode while it runs, and left behind by
        # one stopped without closing the file (killed, crashed); a reader cannot tell the two apart
        return (f"{path}: marked open for writing (HDF5's file-consistency flags): a process writing it in "
                "SWMR mode, or one stopped without closing it (killed, crashed); read it when that writer has "
                f"finished, or, if none is running, clear the flags with `h5clear -s {path}`")
    return f"{path}: not a readable HDF5 file: damaged or truncated ({first})"


def load(path: str | os.PathLike, *, finite: bool = True) -> EmbeddingSet:
    """Read and validate an embedding file; any problem is one :class:`EmbedscopeError` line.

    ``finite=False`` accepts embedding rows holding NaN or inf (only another tool writes them; every
    analysis refuses them): ``embedscope info`` reads such a file to say which rows they are. Every
    other check stands."""
    if not isinstance(path, (str, os.PathLike)):
        raise EmbedscopeError(f"store.load needs the path of an embedding file (.h5), got {type(path).__name__}")
    finite = check_bool(finite, "finite")
    path = Path(path)
    if not path.exists():
        raise EmbedscopeError(f"{path}: no such file")
    with open_hdf5(path, "an embedding file (.h5)") as f:
        return read_open(f, path, finite=finite)


def read_open(f, path: str | os.PathLike, *, finite: bool = True) -> EmbeddingSet:
    """:func:`load` of a file already open (``h5py.File``, read). ``path`` names the file in errors and
    ``source_file``."""
    return _read_open(f, path, finite=finite, scanned=False)[0]


def scan(path: str | os.PathLike, *, finite: bool = True,
         unreadable: dict[str, str] | None = None) -> tuple[EmbeddingSet, RowStats]:
    """:func:`scan_open` of the file ``path`` (opened and closed here)."""
    path = Path(path)
    if not path.exists():
        raise EmbedscopeError(f"{path}: no such file")
    with open_hdf5(path, "an embedding file (.h5)") as f:
        return scan_open(f, path, finite=finite, unreadable=unreadable)


def scan_open(f, path: str | os.PathLike, *, finite: bool = True,
              unreadable: dict[str, str] | None = None) -> tuple[EmbeddingSet, RowStats]:
    """:func:`read_open` in memory bounded whatever N x D, for the commands that read everything in a
    file but its embeddings' values (``embedscope info`` reads the set and what else the file holds in
    one opening; ``add-properties`` rewrites it): every check of :func:`load` is made, the embeddings'
    a block of rows at a time, and what was measured of each row on the way is returned
    (:class:`RowStats`: NaN and inf rows, norms).

    The set's ``embeddings`` are a read-only stand-in (zeros, one per row repeated along it: N values)
    of the stored shape and of the type :func:`load` gives them, not their values: not a set to
    analyse. A file refused is refused as :func:`load` refuses it, in the same words; but with
    ``unreadable`` (a dict), a property whose text is not UTF-8 is left out of the set, its error line
    recorded there by name (``add-properties --force`` replaces such a property another tool wrote)."""
    return _read_open(f, path, finite=finite, scanned=True, unreadable=unreadable)


def _read_open(f, path, *, finite: bool, scanned: bool,
               unreadable: dict[str, str] | None = None) -> tuple[EmbeddingSet, RowStats | None]:
    """:func:`read_open` (``scanned=False``) and :func:`scan_open` (``scanned=True``)."""
    with readable(path):
        return _read_fields(f, path, finite=finite, scanned=scanned, unreadable=unreadable)


@contextlib.contextmanager
def readable(path):
    """Within the block, h5py's errors of a file that opened but whose contents it cannot read (bytes
    overwritten inside: "bad symbol table node signature", "ran off end of input buffer while decoding")
    are one line naming the file (was "OSError: Can't synchronously read data (...)": with two files
    given, no telling which)."""
    try:
        yield
    except (OSError, RuntimeError, KeyError) as e:
        text = (str(e.args[0]) if e.args else "") if isinstance(e, KeyError) else str(e)  # (KeyError's str quotes)
        if isinstance(e, KeyError) and not text.startswith("Unable to"):  # (h5py's words; not a key of ours)
            raise
        first = text.splitlines()[0] if text else e.__class__.__name__
        raise EmbedscopeError(f"{path}: not a readable HDF5 file: damaged ({first})") from None


def hdf5_object_kind(group, name: str) -> str:
    """What ``group[name]`` is, for an error line: "a dataset", "an HDF5 group", "a named HDF5
    datatype", a soft or external link that leads nowhere (named with its target), or "missing" (no
    link of that name). A dangling link was "missing dataset(s)" or "an HDF5 group", a named datatype
    "an HDF5 group" too."""
    import h5py

    try:
        link = group.get(name, getlink=True)
    except (KeyError, OSError, ValueError):
        link = None
    if link is None:
        return "missing"
    try:
        obj = group.get(name)
    except (KeyError, OSError, ValueError):
        obj = None
    if isinstance(obj, h5py.Dataset):
        return "a dataset"
    if isinstance(obj, h5py.Group):
        return "an HDF5 group"
    if isinstance(obj, h5py.Datatype):
        return "a named HDF5 datatype"
    if isinstance(link, h5py.SoftLink):
        return f"a soft link to {link.path} that leads to nothing"
    if isinstance(link, h5py.ExternalLink):
        return f"an external link to {link.filename}:{link.path} that cannot be opened (is the file there?)"
    return "an HDF5 object that cannot be opened"


def _read_fields(f, path, *, finite: bool, scanned: bool,
                 unreadable: dict[str, str] | None = None) -> tuple[EmbeddingSet, RowStats | None]:
    import h5py

    path = Path(path)
    kinds = {k: hdf5_object_kind(f, k) for k in REQUIRED}
    missing = [k for k in REQUIRED if kinds[k] == "missing"]
    if missing:
        from embedscope.store.saliency import FORMAT as MAPS_FORMAT

        fmt = f.attrs.get("format", "")
        if (fmt.decode("utf-8", "replace") if isinstance(fmt, bytes) else str(fmt)) == MAPS_FORMAT:
            raise EmbedscopeError(f"{path}: a saliency-maps file (from 'embedscope saliency'), not an embedding "
                                  "file: this command reads embeddings ('embedscope embed' or 'import')")
        raise EmbedscopeError(f"{path}: not an embedscope embedding file, missing dataset(s) {', '.join(missing)}")
    for k in REQUIRED:
        if kinds[k] != "a dataset":
            raise EmbedscopeError(f"{path}: '{k}' is {kinds[k]}, expected a dataset")
    for k in ("embeddings", "labels", "paths", "split"):
        if k in f and isinstance(f[k], h5py.Dataset) and f[k].shape == ():
            raise EmbedscopeError(f"{path}: '{k}' is a single value, expected one per row")
    version = f.attrs.get("format_version")
    if version is not None:
        try:
            version = int(np.asarray(version).item())
        except (TypeError, ValueError):
            raise EmbedscopeError(f"{path}: format_version must be an integer, got "
                                  f"{quoted(_from_attr(version))}") from None
        if version > FORMAT_VERSION:
            raise EmbedscopeError(
                f"{path}: format_version {version} is newer than this embedscope reads ({FORMAT_VERSION})")

    def strings(values, name: str) -> np.ndarray:
        return _texts(values, f"{path}: '{name}'")

    def numbers(name: str, kind: str) -> np.ndarray:
        v = f[name][()]
        if not isinstance(v, np.ndarray) or v.dtype.kind not in kind:
            raise EmbedscopeError(f"{path}: '{name}' must be a numeric array, got "
                                  f"{getattr(v, 'dtype', type(v).__name__)}")
        return v

    props = {}
    props_kind = hdf5_object_kind(f, "properties")  # a dangling link is said, not read as no properties
    if props_kind != "missing":
        if props_kind != "an HDF5 group":
            raise EmbedscopeError(f"{path}: 'properties' is {props_kind}, expected an HDF5 group")
        for k in f["properties"]:
            kind = hdf5_object_kind(f["properties"], k)
            if kind != "a dataset":
                raise EmbedscopeError(f"{path}: property '{k}' is {kind}, expected a dataset")
            v = f["properties"][k][()]
            if isinstance(v, np.ndarray) and v.dtype.kind in "OS":
                try:
                    v = strings(v, f"properties/{k}")
                except EmbedscopeError as e:
                    if unreadable is None:
                        raise
                    unreadable[k] = str(e)
                    continue
            props[k] = v

    def scanned_embeddings() -> tuple[np.ndarray, RowStats | None]:
        ds = f["embeddings"]
        if ds.dtype.kind not in "fiu":
            raise EmbedscopeError(f"{path}: 'embeddings' must be a numeric array, got {ds.dtype}")
        if ds.ndim != 2:  # (refused by the set's checks: must be 2-D)
            return np.broadcast_to(np.zeros((), np.float32), ds.shape), None
        dtype, stats = _scan_embeddings(ds)
        # one value per row, repeated along it: NaN in the rows the set's checks must refuse (so they
        # refuse them where load does, in the same words), zero elsewhere
        column = np.zeros(ds.shape[0], dtype)
        if finite:
            column[~stats.finite] = np.nan
        return np.broadcast_to(column[:, None], ds.shape), stats

    stats = None
    if scanned:
        stand_in, stats = scanned_embeddings()
    kwargs = dict(
        embeddings=stand_in if scanned else numbers("embeddings", "fiu"),
        labels=numbers("labels", "fiu"),
        paths=strings(f["paths"][()], "paths"),
        split=strings(f["split"][()], "split"),
        class_names=strings(f["class_names"][()], "class_names"),
        properties=props,
        attrs=read_attrs(f.attrs),
    )
    if scanned:
        return _noted(EmbeddingSet(**kwargs, source=str(path)), path), stats
    X = kwargs["embeddings"]
    if X.dtype.kind != "f":  # integers written by another tool: as floats that hold them exactly
        exact32 = X.dtype.itemsize <= 2 or not X.size or int(np.max(np.abs(X.astype(np.float64)))) <= FLOAT32_EXACT_INT
        kwargs["embeddings"] = X.astype(np.float32 if exact32 else np.float64)
    X = kwargs["embeddings"]
    bad = None if finite or X.ndim != 2 or not X.size else ~np.all(np.isfinite(X), axis=1)
    if bad is not None and bad.any():  # the other fields checked with those rows zeroed, then kept as stored
        kwargs["embeddings"] = np.where(bad[:, None], X.dtype.type(0), X)
    es = EmbeddingSet(**kwargs, source=str(path))
    if bad is not None and bad.any():
        es.embeddings = X
    return _noted(es, path), None


def _noted(es: EmbeddingSet, path) -> EmbeddingSet:
    """``es`` with the file just read noted (a file written by an embedscope older than READ_ATTRS may
    name another)."""
    from embedscope.fileio import file_stat

    es.attrs["source_file"] = str(path)
    es.attrs["_source_stat"] = file_stat(path)
    return es
