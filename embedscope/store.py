"""The HDF5 embedding store: the one file every analysis reads (layout in ``docs/store.md``).

Layout (``format_version`` 1)::

    /embeddings      float32 [N, D]
    /labels          int64   [N]      index into class_names
    /paths           utf-8   [N]      image path (relative to the data root) or item id
    /split           utf-8   [N]      "train" | "test"
    /class_names     utf-8   [C]
    /properties/<k>  [N]              optional per-image properties (numbers or utf-8)
    attrs: format_version, embedscope_version, created, dataset, root, transform,
           checkpoint_sha256, checkpoint_config (JSON), ... (free-form JSON-able values)
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.fileio import atomic_output

FORMAT_VERSION = 1
SPLITS = ("train", "test")


@dataclass
class EmbeddingSet:
    """Embeddings with labels and provenance, as stored in one HDF5 file."""

    embeddings: np.ndarray
    labels: np.ndarray
    paths: np.ndarray
    split: np.ndarray
    class_names: np.ndarray
    properties: dict[str, np.ndarray] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.embeddings = np.asarray(self.embeddings)
        self.labels = np.asarray(self.labels)
        self.paths = np.asarray(self.paths, dtype=object).astype(str)
        self.split = np.asarray(self.split, dtype=object).astype(str)
        self.class_names = np.asarray(self.class_names, dtype=object).astype(str)
        self.properties = {k: np.asarray(v) for k, v in self.properties.items()}
        self.validate()

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

    # ------------------------------------------------------------------ checks
    def validate(self, source: str = "embedding set") -> None:
        """Raise :class:`EmbedscopeError` (one line) when fields disagree or values are bad."""
        X = self.embeddings
        if X.ndim != 2:
            raise EmbedscopeError(f"{source}: embeddings must be 2-D (N x D), got shape {X.shape}")
        if not np.issubdtype(X.dtype, np.floating):
            raise EmbedscopeError(f"{source}: embeddings must be floating point, got {X.dtype}")
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
                raise EmbedscopeError(f"{source}: labels must be integers, got {self.labels.dtype}")
        self.labels = self.labels.astype(np.int64, copy=False)
        if n and not np.all(np.isfinite(X)):
            bad = int(np.count_nonzero(~np.all(np.isfinite(X), axis=1)))
            raise EmbedscopeError(f"{source}: {bad} embedding rows contain NaN or inf")
        if n and (self.labels.min() < 0 or self.labels.max() >= len(self.class_names)):
            raise EmbedscopeError(
                f"{source}: labels must lie in [0, {len(self.class_names)}) to index class_names, "
                f"got [{self.labels.min()}, {self.labels.max()}]"
            )
        bad_split = set(np.unique(self.split)) - set(SPLITS)
        if bad_split:
            raise EmbedscopeError(f"{source}: unknown split values {sorted(bad_split)} (allowed: train, test)")
        for k, v in self.properties.items():
            if v.shape[:1] != (n,):
                raise EmbedscopeError(f"{source}: property '{k}' has shape {v.shape}, expected ({n},)")

    # ------------------------------------------------------------------ selection
    def select(self, mask_or_index: np.ndarray) -> "EmbeddingSet":
        """A new set with the rows picked by a boolean mask or an index array."""
        idx = np.asarray(mask_or_index)
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
        """Rows of one split ("train" or "test"); ``None`` or "all" returns every row."""
        if split in (None, "all"):
            return self
        if split not in SPLITS:
            raise EmbedscopeError(f"unknown split '{split}' (choose train, test or all)")
        mask = self.split == split
        if not mask.any():
            present = ", ".join(sorted(set(self.split))) or "none"
            raise EmbedscopeError(f"the file has no '{split}' rows (splits present: {present})")
        return self.select(mask)

    def summary(self) -> dict[str, Any]:
        """Counts for ``embedscope info``."""
        out: dict[str, Any] = {"N": self.n, "D": self.dim, "classes": int(len(self.classes))}
        for s in SPLITS:
            m = self.split == s
            out[f"{s}_N"] = int(m.sum())
            out[f"{s}_classes"] = int(len(np.unique(self.labels[m])))
        norms = np.linalg.norm(self.embeddings.astype(np.float64), axis=1) if self.n else np.zeros(0)
        out["mean_norm"] = float(norms.mean()) if self.n else float("nan")
        out["properties"] = sorted(self.properties)
        return out


def match_by_path(a: EmbeddingSet, b: EmbeddingSet, name_a: str = "a", name_b: str = "b"
                  ) -> tuple[EmbeddingSet, EmbeddingSet]:
    """Reorder ``b`` to ``a``'s rows by image path (the same images under two models, epochs or layers).

    One-line :class:`EmbedscopeError` when a file repeats a path, the image sets differ, or the two
    files give an image different classes.
    """
    for es, nm in ((a, name_a), (b, name_b)):
        if len(np.unique(es.paths)) != es.n:
            raise EmbedscopeError(f"{nm}: duplicate paths, cannot match rows by path")
    only_a = np.setdiff1d(a.paths, b.paths)
    only_b = np.setdiff1d(b.paths, a.paths)
    if len(only_a) or len(only_b):
        ex = only_a[0] if len(only_a) else only_b[0]
        raise EmbedscopeError(
            f"{name_a} and {name_b} hold different images ({len(only_a)} only in {name_a}, "
            f"{len(only_b)} only in {name_b}, e.g. {ex}); comparing them needs the same images in both")
    pos = {p: i for i, p in enumerate(b.paths)}
    b = b.select(np.array([pos[p] for p in a.paths], dtype=np.int64))
    if not np.array_equal(a.class_names[a.labels], b.class_names[b.labels]):
        bad = int(np.count_nonzero(a.class_names[a.labels] != b.class_names[b.labels]))
        raise EmbedscopeError(f"{name_a} and {name_b} give {bad} images different classes")
    return a, b


def _as_attr(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool, np.integer, np.floating)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _from_attr(value: Any) -> Any:
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, np.generic):
        value = value.item()
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
    """Write ``es`` to ``path`` atomically (temporary file in the same folder, then rename)."""
    import h5py

    from embedscope import __version__

    es.validate()
    all_attrs = dict(es.attrs)
    all_attrs.update(attrs or {})
    all_attrs["format_version"] = FORMAT_VERSION
    all_attrs.setdefault("embedscope_version", __version__)
    all_attrs.setdefault("created", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    str_dt = h5py.string_dtype("utf-8")
    with atomic_output(path, force=force) as tmp:
        with h5py.File(tmp, "w") as f:
            f.create_dataset("embeddings", data=es.embeddings.astype(np.float32), chunks=True)
            f.create_dataset("labels", data=es.labels.astype(np.int64))
            f.create_dataset("paths", data=es.paths.astype(object), dtype=str_dt)
            f.create_dataset("split", data=es.split.astype(object), dtype=str_dt)
            f.create_dataset("class_names", data=es.class_names.astype(object), dtype=str_dt)
            g = f.create_group("properties")
            for k, v in es.properties.items():
                if v.dtype.kind in "OUS":
                    g.create_dataset(k, data=v.astype(str).astype(object), dtype=str_dt)
                else:
                    g.create_dataset(k, data=v)
            for k, v in all_attrs.items():
                f.attrs[k] = _as_attr(v)
    return Path(path)


def load(path: str | os.PathLike) -> EmbeddingSet:
    """Read and validate an embedding file; any problem is one :class:`EmbedscopeError` line."""
    import h5py

    path = Path(path)
    if not path.exists():
        raise EmbedscopeError(f"{path}: no such file")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise EmbedscopeError(f"{path}: not a readable HDF5 file ({e.__class__.__name__})") from None
    with f:
        missing = [k for k in ("embeddings", "labels", "paths", "split", "class_names") if k not in f]
        if missing:
            raise EmbedscopeError(f"{path}: not an embedscope file, missing dataset(s) {', '.join(missing)}")
        version = f.attrs.get("format_version")
        if version is not None and int(version) > FORMAT_VERSION:
            raise EmbedscopeError(
                f"{path}: format_version {int(version)} is newer than this embedscope reads ({FORMAT_VERSION})"
            )

        def strings(name: str) -> np.ndarray:
            return np.array([s.decode("utf-8") if isinstance(s, bytes) else str(s) for s in f[name][()]], dtype=object)

        props = {}
        if "properties" in f:
            for k, ds in f["properties"].items():
                v = ds[()]
                if v.dtype.kind in "OS":
                    v = np.array([s.decode("utf-8") if isinstance(s, bytes) else str(s) for s in v], dtype=object)
                props[k] = v
        es_kwargs = dict(
            embeddings=f["embeddings"][()],
            labels=f["labels"][()],
            paths=strings("paths"),
            split=strings("split"),
            class_names=strings("class_names"),
            properties=props,
            attrs={k: _from_attr(v) for k, v in f.attrs.items()},
        )
    try:
        es = EmbeddingSet.__new__(EmbeddingSet)
        for k, v in es_kwargs.items():
            setattr(es, k, v)
        es.paths = np.asarray(es.paths).astype(str)
        es.split = np.asarray(es.split).astype(str)
        es.class_names = np.asarray(es.class_names).astype(str)
        es.validate(source=str(path))
    except EmbedscopeError:
        raise
    es.attrs.setdefault("source_file", str(path))
    return es
