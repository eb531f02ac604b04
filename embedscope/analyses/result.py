"""The answer to one question of an embedding file: :class:`Result`.

Every analysis returns one ``Result``: the headline ``values`` (measure name -> number), an
optional per-row ``table`` (per class, per query, per point ...), ``provenance`` (input files and
their sha256, settings, counts such as lone queries) and ``arrays`` that a figure draws from. One
layout for every result file:

* ``to_frame()`` -- a tidy pandas DataFrame, one row per (model, measure): columns ``measure``,
  ``value`` (float), ``model``;
* ``to_csv(path)`` / ``to_parquet(path)`` -- that frame; ``table=True`` writes the per-row table
  instead;
* ``to_json(path)`` -- ``{"analysis", "model", "values", "provenance", "table"}``;
* ``format()`` / ``print(result)`` -- an aligned terminal table.

Several results of the same analysis (models side by side) combine with :func:`combine` into a
:class:`ResultSet` with the same methods (its frame gains one row per model and measure, its
terminal table one column per model).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from embedscope.errors import EmbedscopeError, MissingKey
from embedscope.text import quoted

VALUE_COLUMNS = ["measure", "value", "model"]


def _scalar(v: Any) -> float | int:
    """Numbers only: counts stay ``int`` (shown and written without a decimal point), the rest ``float``."""
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        raise EmbedscopeError(f"result values must be numbers, got {quoted(v)}") from None


#: provenance entries that say how long a computation took: not part of what it computed
TIMING_KEYS = ("seconds",)

#: decimals of an analysis's terminal table (``print(result)``, the notebook display) where they are
#: not the 4 of every other table: the commands print these with as many (docs/architecture.md)
DIGITS = {"geometry": 5, "spectrum": 5}


def display_digits(analysis: str, digits: int | None) -> int:
    """``digits`` when given, else the decimals the command of ``analysis`` prints (:data:`DIGITS`, else 4)."""
    return DIGITS.get(analysis, 4) if digits is None else digits


@dataclass(eq=False, repr=False)
class Result:
    """One analysis of one embedding file (or one pair of files).

    ``repr`` is one line (the values, the table's size); in IPython / Jupyter a result shows as its
    terminal table (``print(result)``). ``a == b`` compares what was computed: analysis, model,
    values, table, arrays and provenance (NaN equals NaN), but not the time it took (``seconds``).
    Results pickle.
    """

    analysis: str
    values: dict[str, float | int]
    provenance: dict[str, Any] = field(default_factory=dict)
    table: list[dict[str, Any]] | None = None
    arrays: dict[str, Any] = field(default_factory=dict, repr=False)
    model: str = ""
    meanings: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.values, Mapping):
            raise EmbedscopeError(f"result values must be a mapping of measure names to numbers, got "
                                  f"{type(self.values).__name__}")
        self.values = {str(k): _scalar(v) for k, v in self.values.items()}

    # ---------------------------------------------------------------- access
    def __getitem__(self, key: str) -> float:
        try:
            return self.values[key]
        except (KeyError, TypeError):
            raise MissingKey(f"no value {quoted(key)} in the {self.analysis} result (available: "
                             f"{', '.join(self.values) or 'none'})") from None

    def __contains__(self, key: str) -> bool:
        return key in self.values

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Result):
            return NotImplemented

        def timeless(p):
            return {k: v for k, v in p.items() if k not in TIMING_KEYS}

        from embedscope.store.embeddings import same_values

        return (self.analysis == other.analysis and self.model == other.model
                and same_values(self.values, other.values) and same_values(self.table, other.table)
                and same_values(self.arrays, other.arrays)
                and same_values(timeless(self.provenance), timeless(other.provenance)))

    __hash__ = None  # mutable, compared by value

    def __repr__(self) -> str:
        vals = ", ".join(f"{k!r}: {v!r}" for k, v in self.values.items())
        table = "" if self.table is None else f", table={len(self.table)} rows"
        arrays = f", arrays={sorted(self.arrays)}" if self.arrays else ""
        return f"Result({self.analysis!r}, model={self.model!r}, values={{{vals}}}{table}{arrays})"

    def _repr_pretty_(self, p, cycle: bool) -> None:  # IPython / Jupyter: the terminal table
        p.text(repr(self) if cycle else self.format())

    def keys(self):
        return self.values.keys()

    # ---------------------------------------------------------------- tables
    def to_frame(self, *, table: bool = False):
        """Tidy pandas DataFrame of the values (``measure, value, model``), or (``table=True``) the
        per-row table (a result without one: a one-line error, as :meth:`to_csv`)."""
        import pandas as pd

        _check_table(self, table)
        if table:
            return pd.DataFrame(self.table or [])
        return pd.DataFrame([{"measure": k, "value": v, "model": self.model} for k, v in self.values.items()],
                            columns=VALUE_COLUMNS).astype({"value": float})

    def to_dict(self) -> dict[str, Any]:
        """``{"analysis", "model", "values", "provenance", "table"?}`` as computed (numpy values and NaN
        kept; :meth:`to_json` gives what the JSON file holds)."""
        out: dict[str, Any] = {"analysis": self.analysis, "model": self.model, "values": dict(self.values),
                               "provenance": self.provenance}
        if self.table is not None:
            out["table"] = self.table
        return out

    def to_json(self, path: str | os.PathLike | None = None, *, force: bool = False) -> dict[str, Any]:
        """The result as the JSON file holds it (written atomically to ``path`` when given): numpy
        values as Python ones, NaN and ±inf as ``None`` (JSON ``null``), so
        ``json.loads(path.read_text()) == result.to_json()``; ``values`` keeps the NaN."""
        return _to_json(self.to_dict(), path, force)

    def to_csv(self, path: str | os.PathLike, *, table: bool = False, force: bool = False) -> Path:
        """Write :meth:`to_frame` (or the per-row table) as CSV, atomically (counts without ".0")."""
        _check_table(self, table)
        return _write_frame(_csv_ready(self.to_frame(table=table), [self]), path, "csv", force)

    def to_parquet(self, path: str | os.PathLike, *, table: bool = False, force: bool = False) -> Path:
        """Write :meth:`to_frame` (or the per-row table) as Parquet, atomically."""
        _check_table(self, table)
        return _write_frame(self.to_frame(table=table), path, "parquet", force)

    def format(self, *, digits: int | None = None, title: str | None = None, nan: str = "nan") -> str:
        """The terminal table (:func:`embedscope.tables.format_table`; ``digits``: decimals, by default
        those of the analysis's command, 5 for geometry and spectrum, else 4; ``nan``: how NaN shows)."""
        from embedscope.tables import format_table

        digits = display_digits(self.analysis, digits)
        with_meaning = bool(self.meanings)
        rows = []
        for k, v in self.values.items():
            row = {"measure": k, "value": v}
            if with_meaning:
                row["meaning"] = self.meanings.get(k, "")
            rows.append(row)
        cols = ["measure", "value"] + (["meaning"] if with_meaning else [])
        return format_table(rows, cols, digits=digits, title=title if title is not None else self.title(), nan=nan)

    def title(self) -> str:
        return self.provenance.get("title", f"{self.analysis}: {self.model}" if self.model else self.analysis)

    def __str__(self) -> str:
        return self.format()


@dataclass(repr=False)
class ResultSet:
    """Results of one analysis for several models, side by side (``repr``, ``==`` and the notebook
    display as :class:`Result`'s)."""

    results: list[Result]

    @property
    def analysis(self) -> str:
        return self.results[0].analysis if self.results else ""

    @property
    def models(self) -> list[str]:
        return [r.model for r in self.results]

    def __iter__(self):
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __repr__(self) -> str:
        return f"ResultSet({self.analysis!r}, models={self.models!r})"

    def _repr_pretty_(self, p, cycle: bool) -> None:
        p.text(repr(self) if cycle else self.format())

    def __getitem__(self, i):
        if isinstance(i, str):
            for r in self.results:
                if r.model == i:
                    return r
            raise MissingKey(f"no model {quoted(i)} in the results (available: {', '.join(self.models) or 'none'})")
        return self.results[i]

    def to_frame(self, *, table: bool = False):
        """As :meth:`Result.to_frame`, the models one below the other (the per-row tables gain a ``model``
        column first)."""
        import pandas as pd

        _check_table(self, table)
        frames = []
        for r in self.results:
            f = pd.DataFrame() if table and r.table is None else r.to_frame(table=table)
            if table and "model" not in f.columns:
                f.insert(0, "model", r.model)
            frames.append(f)
        if not frames:
            return pd.DataFrame(columns=VALUE_COLUMNS)
        return pd.concat(frames, ignore_index=True)

    def to_dict(self) -> dict[str, Any]:
        """``{"analysis", "models": [each result's :meth:`Result.to_dict`]}``."""
        return {"analysis": self.analysis, "models": [r.to_dict() for r in self.results]}

    def to_json(self, path=None, *, force: bool = False) -> dict[str, Any]:
        """As :meth:`Result.to_json`: ``{"analysis", "models": [...]}``, what the file holds."""
        return _to_json(self.to_dict(), path, force)

    def to_csv(self, path, *, table: bool = False, force: bool = False) -> Path:
        _check_table(self, table)
        return _write_frame(_csv_ready(self.to_frame(table=table), self.results), path, "csv", force)

    def to_parquet(self, path, *, table: bool = False, force: bool = False) -> Path:
        _check_table(self, table)
        return _write_frame(self.to_frame(table=table), path, "parquet", force)

    def format(self, *, digits: int | None = None, title: str | None = None, nan: str = "nan") -> str:
        """One column per model (:meth:`Result.format` for one; ``digits`` as there); ``nan``: how NaN shows."""
        from embedscope.tables import format_table

        digits = display_digits(self.analysis, digits)
        if len(self.results) == 1:
            return self.results[0].format(digits=digits, title=title, nan=nan)
        keys: list[str] = []
        for r in self.results:
            keys += [k for k in r.values if k not in keys]
        # positional keys: a model named "measure" (or like another column) must not overwrite a cell
        cols = ["measure"] + [f"{i}" for i in range(len(self.results))]
        rows = [{"measure": k, **{c: r.values.get(k, math.nan) for c, r in zip(cols[1:], self.results)}}
                for k in keys]
        return format_table(rows, cols, digits=digits, title=title, headers=["measure"] + self.models, nan=nan)

    def __str__(self) -> str:
        return self.format()


def combine(results: Iterable[Result]) -> ResultSet:
    """Results of one analysis (distinct model names) -> :class:`ResultSet`."""
    if isinstance(results, Result):
        results = [results]
    if isinstance(results, (str, bytes, Mapping)) or not hasattr(results, "__iter__"):
        raise EmbedscopeError(f"combine needs a list of Results, got {type(results).__name__}")
    results = list(results)
    if not results:
        raise EmbedscopeError("combine needs at least one Result, got none")
    bad = [r for r in results if not isinstance(r, Result)]
    if bad:
        raise EmbedscopeError(f"combine needs Results (of an analysis), got {type(bad[0]).__name__}")
    analyses = list(dict.fromkeys(r.analysis for r in results))
    if len(analyses) > 1:  # (checked first: results of two analyses of one file share its model name)
        raise EmbedscopeError(f"results of different analyses cannot be combined, got {', '.join(analyses)}")
    names = [r.model for r in results]
    if len(set(names)) != len(names):
        raise EmbedscopeError(f"model names must differ to compare results side by side, got {names}")
    return ResultSet(results)


def _check_table(result, table: bool) -> None:
    """``table=True`` of a result without a per-row table would write an empty file: one line instead."""
    results = result.results if isinstance(result, ResultSet) else [result]
    if table and all(r.table is None for r in results):
        raise EmbedscopeError(f"the {result.analysis} result has no per-row table to write (its values are "
                              "written with table=False)")


def _to_json(d: dict[str, Any], path, force: bool) -> dict[str, Any]:
    from embedscope.tables import _jsonable, write_json

    if path is not None:
        write_json(path, d, force=force)
    return _jsonable(d)


def _csv_ready(frame, results):
    """The value column with the integer counts as integers (``n`` written ``120``, not ``120.0``)."""
    if "measure" not in frame.columns or "value" not in frame.columns:
        return frame
    ints = {(r.model, k) for r in results for k, v in r.values.items() if isinstance(v, int)}
    if not ints:
        return frame
    import pandas as pd

    frame = frame.copy()
    frame["value"] = pd.Series([int(v) if (m, k) in ints else v
                                for m, k, v in zip(frame["model"], frame["measure"], frame["value"])],
                               index=frame.index, dtype=object)
    return frame


def _write_frame(frame, path, fmt: str, force: bool) -> Path:
    from embedscope.fileio import atomic_output
    from embedscope.tables import write_parquet

    if fmt == "csv":
        with atomic_output(path, force=force) as tmp:
            frame.to_csv(tmp, index=False)
    else:
        write_parquet(path, frame, force=force)
    return Path(path)


def provenance_of(es, *, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Where a set came from: file and sha256 when read from a file, plus the file's model attributes,
    and the embedscope version that computed the result (``embedscope_version``)."""
    from embedscope import __version__

    out: dict[str, Any] = {"embedscope_version": __version__}
    src = es.attrs.get("source_file")
    if src:
        out["file"] = str(src)
        sha = es.attrs.get("_sha256")
        if sha is None:  # hashed now: only if the file is still the one read (its size and time)
            from embedscope.fileio import file_stat

            read, now = es.attrs.get("_source_stat"), file_stat(src)
            sha = _sha(src) if read is None or (now is not None and list(read) == now) else None
            if sha is None and read is not None:
                out["file_changed_since_read"] = True
        out["sha256"] = sha
    for k in ("dataset", "checkpoint", "checkpoint_sha256", "imported_from"):
        if es.attrs.get(k) not in (None, ""):
            out[k] = es.attrs[k]
    out.update(extra or {})
    return out


def _sha(path) -> str | None:
    from embedscope.fileio import sha256_file

    try:
        return sha256_file(path)
    except OSError:
        return None


def model_name(es, given: str | None = None) -> str:
    """Display name of a set: ``given``, else the file's stem, else "embeddings"."""
    if given:
        return str(given)
    src = es.attrs.get("source_file")
    return Path(src).stem if src else "embeddings"


def unique_names(sources: Sequence[Any], given: Sequence[str] | None) -> list[str]:
    """One display name per source: ``given`` (checked), else file stems (full paths if stems clash;
    ``set<i>`` for sets in memory)."""
    from embedscope.errors import UsageError

    if isinstance(given, str):  # one name, not its letters
        given = [given]
    if given is not None and (isinstance(given, Mapping) or not hasattr(given, "__iter__")):
        raise UsageError(f"names must be a list of names, one per file, got {type(given).__name__}")
    if given is not None:
        given = [str(g) if isinstance(g, os.PathLike) else g for g in given]
        bad = next((g for g in given if not isinstance(g, str)), None)
        if bad is not None:
            raise UsageError(f"names must be strings, got {quoted(bad)}")
    if given:
        if len(given) != len(sources):
            raise UsageError(f"--names gives {len(given)} name(s) for {len(sources)} file(s): give one per file")
        if len(set(given)) != len(given):
            raise UsageError("--names must differ")
        return given
    stems = [_display_name(s, i) for i, s in enumerate(sources)]
    if len(set(stems)) == len(stems):
        return stems
    return [str(s) if isinstance(s, (str, os.PathLike)) else f"set{i}" for i, s in enumerate(sources)]


def _display_name(source: Any, i: int) -> str:
    """A file's stem; an in-memory set's :func:`model_name` (its file's stem, else "embeddings"); else setI."""
    if isinstance(source, (str, os.PathLike)):
        return Path(str(source)).stem
    if hasattr(source, "attrs") and hasattr(source, "embeddings"):
        return model_name(source)
    return f"set{i}"
