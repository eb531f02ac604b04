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
* ``format()`` -- an aligned terminal table of the result's main numbers, as its command prints them
  (the values; ``properties``: a row per property, NR-Prec, R-Prec, ceiling, p-value ...; ``scatter``:
  the summary per split; ``tsne`` / ``yoke``: the settings and values);
* ``print(result)`` and the IPython / Jupyter display -- that table bounded (at most
  :data:`DISPLAY_ROWS` rows and :data:`DISPLAY_MODELS` models, long names shortened in the middle,
  a last line saying what was left out), undefined numbers shown ``–``, then the notes the command
  prints (undefined and infinite measures and why, a collapsed model, a capped perplexity ...).

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
from embedscope.fileio import escape_undecodable
from embedscope.text import SHOWN_NAME, quoted  # noqa: F401  (SHOWN_NAME: the analyses' notes shorten by it)

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


#: how an undefined number (NaN) shows in ``print(result)`` and the notebook display, as in the commands'
#: tables (the notes say why it is undefined: "undefined (–): ...")
UNDEFINED = "–"
#: at most this many rows in ``print(result)`` / the notebook display (``format()`` shows every one)
DISPLAY_ROWS = 40
#: at most this many models side by side there (one column each)
DISPLAY_MODELS = 8
#: a text cell (a path, a class or property name) longer than this is shortened in the middle there
DISPLAY_CELL = 36
#: models side by side there: as many as fit this many characters (at least one)
DISPLAY_WIDTH = 120


def display_digits(analysis: str, digits: int | None) -> int:
    """``digits`` when given, else the decimals the command of ``analysis`` prints (:data:`DIGITS`, else 4)."""
    return DIGITS.get(analysis, 4) if digits is None else digits


@dataclass(eq=False, repr=False)
class Result:
    """One analysis of one embedding file (or one pair of files).

    ``repr`` is one line (the values, the table's size); ``print(result)`` and the IPython / Jupyter
    display show :meth:`format`'s table of the main numbers, bounded, and the result's notes
    (:meth:`note_lines`). ``a == b`` compares what was computed: analysis, model,
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

    def _repr_pretty_(self, p, cycle: bool) -> None:  # IPython / Jupyter: what print shows
        p.text(repr(self) if cycle else str(self))

    def keys(self):
        return self.values.keys()

    # ---------------------------------------------------------------- tables
    def to_frame(self, *, table: bool = False):
        """Tidy pandas DataFrame of the values (``measure, value, model``), or (``table=True``) the
        per-row table (a result without one: a one-line error, as :meth:`to_csv`)."""
        import pandas as pd

        _check_table(self, table)
        if table:
            frame = pd.DataFrame(self.table or [])
            if self.analysis == "properties" and "significant_2.576" in frame.columns:
                # a nullable boolean: no verdict where NR-Prec is undefined (None), not an object column
                # that a mask (frame[frame["significant_2.576"]]) or ~ cannot take
                frame["significant_2.576"] = pd.array([None if pd.isna(v) else bool(v)
                                                       for v in frame["significant_2.576"]], dtype="boolean")
            return frame
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
        return _write_frame(_parquet_ready(self.to_frame(table=table), self.analysis, table), path, "parquet", force)

    def format(self, *, digits: int | None = None, title: str | None = None, nan: str = "nan",
               max_rows: int | None = None, max_cell: int | None = None) -> str:
        """The terminal table of the main numbers (:func:`embedscope.tables.format_table`): the values
        (with their meanings where the analysis has them), or the table the analysis's command prints
        (``properties``: one row per property; ``scatter``: one row per split; ``tsne`` / ``yoke``: the
        settings and the values). ``digits``: decimals, by default those of the analysis's command, 5
        for geometry and spectrum, else 4; ``nan``: how NaN shows; ``max_rows``: at most that many rows,
        then a line saying how many more (default: every row); ``max_cell``: text cells longer than
        that shortened in the middle (default: whole)."""
        from embedscope.tables import format_table

        rows, cols, default_title, whole = display_table(self)
        rows, more = _cut(rows, max_rows, max_cell)
        digits = display_digits(self.analysis, digits)
        headers = None
        if self.analysis == "properties" and self.table is not None:  # (p-values as the command shows them)
            rows, headers = shown_p_values(rows, cols, nan, digits)
        text = format_table(rows, cols, digits=digits, title=title if title is not None else default_title,
                            headers=headers, nan=nan)
        return text + (f"\n… {more} more row{'' if more == 1 else 's'} (every one: {whole})" if more else "")

    def note_lines(self) -> list[str]:
        """What the result's command prints under its table, one line each (raw text; ``print(result)``
        escapes it): undefined and infinite measures and why, the notes (``provenance["notes"]``: a
        collapsed model, ties, another distance than the model's own ...), a capped perplexity."""
        from embedscope.analyses.structure import infinite_note, undefined_note

        head = self.provenance.get("note")  # (geometry: how uniformity was taken, what rho leaves out)
        out = [line for line in (head if isinstance(head, str) else None,
                                 undefined_note(_mapping(self.provenance.get("undefined"))),
                                 infinite_note(_mapping(self.provenance.get("infinite")))) if line]
        why = self.provenance.get("class_spectra_undefined")
        if why:
            out.append(f"note: no class-conditioned spectrum (by_class): {why}")
        notes = self.provenance.get("notes") or []
        said = "" if self.analysis == "properties" else "note: "  # (as each command prints them)
        out += [f"{said}{n}" for n in ([notes] if isinstance(notes, str) else notes)]
        if self.analysis in ("tsne", "yoke"):
            from embedscope.tsne.joint import perplexity_cap

            n = self.values.get("points", self.values.get("n"))
            cap = perplexity_cap(self.provenance, n) if isinstance(n, int) else None
            if cap:
                out.append(f"note: perplexity {cap}")
        return out

    def title(self) -> str:
        return self.provenance.get("title", f"{self.analysis}: {self.model}" if self.model else self.analysis)

    def __str__(self) -> str:
        """:meth:`format` bounded (:data:`DISPLAY_ROWS`, :data:`DISPLAY_CELL`; NaN shown ``–``), then
        :meth:`note_lines`, escaped, then (``evaluate(..., per_class=True)``) the classes with the lowest
        MAP@R as ``embedscope evaluate --per-class`` prints them: what ``print(result)`` and the notebook show."""
        return "\n".join([_with_notes(self.format(nan=UNDEFINED, max_rows=DISPLAY_ROWS, max_cell=DISPLAY_CELL),
                                       self.note_lines()), *_worst_tables([self])])


@dataclass(repr=False)
class ResultSet:
    """Results of one analysis for several models, side by side (``repr``, ``==``, ``print`` and the
    notebook display as :class:`Result`'s: at most :data:`DISPLAY_MODELS` models shown side by side)."""

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
        p.text(repr(self) if cycle else str(self))

    def __getitem__(self, i):
        if isinstance(i, str):
            for r in self.results:
                if r.model == i:
                    return r
            raise MissingKey(f"no model {quoted(i)} in the results (available: {', '.join(self.models) or 'none'})")
        return self.results[i]

    def to_frame(self, *, table: bool = False):
        """As :meth:`Result.to_frame`, the models one below the other (the per-row tables gain a ``model``
        column first). ``properties``' per-row table in the rows' order of ``embedscope properties --csv``:
        by property (the first model's NR-Prec, descending), the models in order within a property."""
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
        frame = pd.concat(frames, ignore_index=True)
        if table and self.analysis == "properties" and "property" in frame.columns and len(self.results) > 1:
            order = {p: i for i, p in enumerate(dict.fromkeys(frame["property"]))}
            models = {m: i for i, m in enumerate(self.models)}
            key = sorted(range(len(frame)), key=lambda i: (order[frame["property"].iat[i]],
                                                           models.get(frame["model"].iat[i], len(models))))
            frame = frame.iloc[key].reset_index(drop=True)
        return frame

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
        return _write_frame(_parquet_ready(self.to_frame(table=table), self.analysis, table), path, "parquet", force)

    def format(self, *, digits: int | None = None, title: str | None = None, nan: str = "nan",
               max_rows: int | None = None, max_cell: int | None = None, max_models: int | None = None,
               max_width: int | None = None) -> str:
        """One column per model (:meth:`Result.format` for one; ``digits``, ``nan``, ``max_rows`` and
        ``max_cell`` as there); ``properties``: the rows of every model, a ``model`` column first, as
        the command prints them. ``max_models`` / ``max_width``: at most that many models side by side,
        and only as many as fit ``max_width`` characters (at least one), then a line saying how many
        more (default: every one)."""
        from embedscope.tables import format_table

        digits = display_digits(self.analysis, digits)
        if len(self.results) == 1:
            return self.results[0].format(digits=digits, title=title, nan=nan, max_rows=max_rows, max_cell=max_cell)
        if self.analysis == "properties" and all(r.table is not None for r in self.results):
            rows, cols, default_title, whole = _properties_table(self.results)
            rows, more = _cut(rows, max_rows, max_cell)
            rows, headers = shown_p_values(rows, cols, nan, digits)  # (as the command shows them)
            text = format_table(rows, cols, digits=digits, title=title if title is not None else default_title,
                                headers=headers, nan=nan)
            return text + (f"\n… {more} more row{'' if more == 1 else 's'} (every one: {whole})" if more else "")
        n = len(self.results) if max_models is None else max(1, min(max_models, len(self.results)))
        while True:
            shown = self.results[:n]
            keys: list[str] = []
            for r in shown:
                keys += [k for k in r.values if k not in keys]
            # positional keys: a model named "measure" (or like another column) must not overwrite a cell
            cols = ["measure"] + [f"{i}" for i in range(len(shown))]
            rows = [{"measure": k, **{c: r.values.get(k, math.nan) for c, r in zip(cols[1:], shown)}}
                    for k in keys]
            rows, more = _cut(rows, max_rows, max_cell)
            headers = ["measure"] + _short_unique(self.models[:len(shown)], max_cell)
            text = format_table(rows, cols, digits=digits, title=title, headers=headers, nan=nan)
            if max_width is None or n == 1 or max(map(len, text.splitlines()[1:])) <= max_width:
                break
            n -= 1  # (the title may be longer: it is one line of text, not a column)
        if more:
            text += f"\n… {more} more row{'' if more == 1 else 's'} (every one: to_frame())"
        left = len(self.results) - len(shown)
        if left:
            text += f"\n… {left} more model{'' if left == 1 else 's'} (every one: to_frame(); one: results['name'])"
        return text

    def note_lines(self) -> list[str]:
        """Every result's :meth:`Result.note_lines`, each naming its model when there are several;
        ``properties``: then one line per model that lacks a property measured on another (no row)."""
        several = len(self.results) > 1
        out = [f"{r.model}: {line}" if several else line for r in self.results for line in r.note_lines()]
        if several and self.analysis == "properties" and all(r.table is not None for r in self.results):
            every = list(dict.fromkeys(row.get("property") for r in self.results for row in r.table))
            for r in self.results:
                mine = {row.get("property") for row in r.table}
                # (no 'class' row: a property of the file stands for the class, which its notes say)
                lacks = [p for p in every if p not in mine and p != "class"]
                if lacks:
                    named = ", ".join(f"'{p}'" for p in lacks)
                    out.append(f"{r.model}: no propert{'y' if len(lacks) == 1 else 'ies'} {named} in this file (no row)")
        if several and self.analysis == "evaluate":
            out += missing_k_notes(self.results)
        return out

    def __str__(self) -> str:
        return "\n".join([_with_notes(self.format(nan=UNDEFINED, max_rows=DISPLAY_ROWS, max_cell=DISPLAY_CELL,
                                                   max_models=DISPLAY_MODELS, max_width=DISPLAY_WIDTH),
                                       self.note_lines()), *_worst_tables(self.results)])


def missing_k_notes(results: Sequence[Result]) -> list[str]:
    """``evaluate`` of several files: a note per file that lacks an R@k another file has (the default k
    stop at the references of a query, fewer in a small file), whose cell shows '–' with no word why
    (raw text: what ``embedscope evaluate`` prints escaped)."""
    if len(results) < 2:
        return []
    keys = list(dict.fromkeys(k for r in results for k in r.values))
    out = []
    for r in results:
        missing = [k for k in keys if k.startswith("R@") and k not in r.values]
        if missing:
            p = r.provenance
            refs = int(p.get("N_references", 0)) - (0 if p.get("query_split") != p.get("reference_split") else 1)
            out.append(f"note: {r.model}: no {', '.join(missing)} (–): a query has at most {refs} "
                       f"reference{'' if refs == 1 else 's'}, and the default k stop there")
    return out


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


def display_table(result: Result) -> tuple[list[dict[str, Any]], list[str], str, str]:
    """``(rows, columns, title, where every row is)`` of :meth:`Result.format`: the table the analysis's
    command prints (``properties``, ``scatter``, ``tsne``, ``yoke``), else the values (with a
    ``meaning`` column where the analysis has meanings)."""
    prov = result.provenance
    if result.analysis == "properties" and result.table is not None:
        return _properties_table([result])
    if result.analysis == "scatter" and isinstance(prov.get("splits"), list):
        from embedscope.analyses.neighbours import SCATTER_SUMMARY_COLUMNS

        return (prov["splits"], list(SCATTER_SUMMARY_COLUMNS), result.title(),
                "result.provenance['splits']")
    if result.analysis in ("tsne", "yoke"):
        from embedscope.analyses.maps import SHOWN_TSNE, SHOWN_YOKE

        shown = SHOWN_TSNE if result.analysis == "tsne" else SHOWN_YOKE
        settings = {k: prov[k] for k in shown if k in prov and k not in result.values and k != "kl"
                    and (isinstance(prov[k], (str, int, float)) or prov[k] is None)}
        rows = [{"setting": k, "value": v} for k, v in {**settings, **result.values}.items()]
        return rows, ["setting", "value"], result.title(), "result.provenance and result.values"
    rows = []
    for k, v in result.values.items():
        row = {"measure": k, "value": v}
        if result.meanings:
            row["meaning"] = result.meanings.get(k, "")
        rows.append(row)
    return rows, ["measure", "value"] + (["meaning"] if result.meanings else []), result.title(), "to_frame()"


#: the columns of the properties table (``print(result)``, ``format()``; with a permutation test also
#: ``perm_p_value``): those of ``embedscope properties``'s terminal table
PROPERTY_COLUMNS = ("model", "property", "NR-Prec", "R-Prec", "ceiling", "p_value", "n_values", "lone_queries")

#: the p-value columns of the properties table, and the smallest p-value it shows as a number: below it (a
#: z-test tail that underflows to 0, or a subnormal) "< 1e-300", as docs/properties.md writes it
P_COLUMNS = ("p_value", "perm_p_value")
P_FLOOR = 1e-300


def shown_p_values(rows: list[dict], columns, nan: str, digits: int = 4) -> tuple[list[dict], list[str]]:
    """``rows`` with their p-values as the terminal shows them (``embedscope properties`` and
    ``print(result)`` alike): one rule, ``digits`` decimals (``digits`` significant digits below
    ``10**-digits``) down to :data:`P_FLOOR`, "< 1e-300" below it (an underflowed 0 showed "0.0000" beside
    "5.15e-240"); right-aligned text (and header), as the numbers were. The CSV, Parquet and JSON keep the
    exact values."""
    from embedscope.tables import format_number

    out = [dict(row) for row in rows]
    headers = list(columns)
    for c in (c for c in P_COLUMNS if c in columns):
        cells = []
        for row in out:
            v = row.get(c)
            try:
                small = v is not None and 0 <= float(v) < P_FLOOR
            except (TypeError, ValueError):
                small = False
            cells.append(f"< {P_FLOOR:g}" if small else format_number(v, digits, nan=nan))
        width = max(len(c), *(len(x) for x in cells)) if cells else len(c)
        for row, x in zip(out, cells):
            row[c] = x.rjust(width)
        headers[headers.index(c)] = c.rjust(width)
    return out, headers


def _properties_table(results: Sequence[Result]):
    """The properties rows of ``results`` as ``embedscope properties`` prints them: the first model's
    order of the properties (its NR-Prec, descending), the models in order within a property; a
    ``model`` column when there are several."""
    order: dict[str, int] = {}
    for r in results:
        for row in r.table or []:
            order.setdefault(row.get("property"), len(order))
    models = [r.model for r in results]
    rows = sorted(((r.model, row) for r in results for row in (r.table or [])),
                  key=lambda mr: (order[mr[1].get("property")], models.index(mr[0])))
    prov = results[0].provenance
    cols = list(PROPERTY_COLUMNS if len(results) > 1 else PROPERTY_COLUMNS[1:])
    if any("perm_p_value" in row for _, row in rows):
        cols.append("perm_p_value")
    split, cap, metric = prov.get("split"), prov.get("cap"), prov.get("metric")
    perm = prov.get("permutations")
    if prov.get("max_r") is not None and cap and not any(row.get("capped") for _, row in rows):
        cap = f"{cap} (no R exceeds it here: the numbers are the uncapped ones)"  # (as the command says)
    title = (f"{results[0].model}: " if len(results) == 1 else "") + "; ".join(str(t) for t in (
        f"split {split}", cap,
        f"{metric} distance" if metric else None,
        f"permutation test: {perm} shuffles, seed {prov.get('permutation_seed', 0)}" if perm else None) if t)
    return ([{c: (m if c == "model" else row.get(c, math.nan)) for c in cols} for m, row in rows], cols, title,
            "to_frame(table=True)")


def _mapping(v: Any) -> Mapping:
    return v if isinstance(v, Mapping) else {}


def _short(v: Any, n: int | None) -> Any:
    """A text longer than ``n`` characters shortened in the middle (``head…tail``: a path keeps its
    file name); anything else as it is."""
    if n is None or not isinstance(v, str):
        return v
    n = max(n, 5)  # (before the length test: a narrower cap lengthened a short text, 'ab' -> 'ab…ab')
    if len(v) <= n:
        return v
    tail = (n - 1) * 2 // 3
    return v[:n - 1 - tail] + "…" + v[len(v) - tail:]


def _short_unique(names: Sequence[str], n: int | None) -> list[str]:
    """Each name :func:`_short` to ``n`` characters, those that would then read alike (``run…/net``
    for two runs) each kept a little longer until they differ (or whole)."""
    names = [str(v) for v in names]
    widths = [n] * len(names)
    while True:
        shown = [_short(v, w) for v, w in zip(names, widths)]
        seen: dict[str, list[int]] = {}
        for i, v in enumerate(shown):
            seen.setdefault(v, []).append(i)
        grow = [i for group in seen.values() if len(group) > 1 for i in group
                if widths[i] is not None and widths[i] < len(names[i])]
        if not grow:
            return shown
        for i in grow:
            widths[i] += 4


def _cut(rows: list[dict[str, Any]], max_rows: int | None, max_cell: int | None):
    """``(the rows shown, how many left out)``: at most ``max_rows`` rows, text cells at most ``max_cell``
    characters (a ``meaning`` column, embedscope's own words, whole)."""
    more = 0
    if max_rows is not None and len(rows) > max(1, max_rows):
        more = len(rows) - max(1, max_rows)
        rows = rows[:max(1, max_rows)]
    if max_cell is not None:
        rows = [{c: (v if c == "meaning" else _short(v, max_cell)) for c, v in r.items()} for r in rows]
    return rows, more


#: the classes with the lowest MAP@R that ``print(result)`` of ``evaluate(..., per_class=True)`` shows,
#: as ``embedscope evaluate --per-class`` prints them
WORST_SHOWN = 5


def _worst_tables(results: Sequence[Result]) -> list[str]:
    """Per result of ``evaluate(..., per_class=True)``: the table of its :data:`WORST_SHOWN` classes with
    the lowest MAP@R that ``embedscope evaluate --per-class`` prints (names escaped and shortened as in
    ``print(result)``), and where every class is; nothing for another result."""
    from embedscope.analyses.retrieval import worst_classes
    from embedscope.tables import format_table

    out = []
    for r in results:
        if r.analysis != "evaluate" or not r.table or not all(isinstance(x, dict) and "class" in x for x in r.table):
            continue
        try:
            rows = worst_classes(r, "MAP@R", n=WORST_SHOWN)
        except EmbedscopeError:  # no MAP@R column: nothing ranks the classes
            continue
        if not rows:  # no class with a defined MAP@R
            continue
        rows, _ = _cut(rows, None, DISPLAY_CELL)
        what = f"the {len(rows)} classes" if len(rows) > 1 else "the class"
        cols = [c for c in ("class", "n", "R@1", "R-Precision", "MAP@R") if any(c in x for x in rows)]
        out.append(format_table(rows, cols, digits=display_digits(r.analysis, None), nan=UNDEFINED,
                                title=f"{r.model}: {what} with the lowest MAP@R")
                   + f"\n(every class: to_frame(table=True), {len(r.table)} rows)")
    return out


def _with_notes(text: str, notes: Sequence[str]) -> str:
    """``text`` and the note lines under it, each escaped (:func:`embedscope.text.safe`)."""
    from embedscope.text import safe

    return "\n".join([text, *(safe(n) for n in notes)])


def _check_table(result, table: bool) -> None:
    """``table=True`` of a result without a per-row table would write an empty file: one line instead;
    ``table`` not a bool (``"no"``, truthy) a one-line error."""
    from embedscope.validation import check_bool

    table = check_bool(table, "table")
    results = result.results if isinstance(result, ResultSet) else [result]
    if table and all(r.table is None for r in results):
        raise EmbedscopeError(f"the {result.analysis} result has no per-row table to write (its values are "
                              "written with table=False)")


def _to_json(d: dict[str, Any], path, force: bool) -> dict[str, Any]:
    from embedscope.tables import _jsonable, write_json

    j = _jsonable(d)  # (converted once: write_json's conversion of it changes nothing)
    if path is not None:
        write_json(path, j, force=force)
    return j


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


def _parquet_ready(frame, analysis: str, table: bool):
    """``properties``' per-row table with its integer ``max_r`` column (:func:`~.image_properties.typed_table`)."""
    if table and analysis == "properties":
        from embedscope.analyses.image_properties import typed_table

        return typed_table(frame)
    return frame


def _write_frame(frame, path, fmt: str, force: bool) -> Path:
    from embedscope.fileio import atomic_output
    from embedscope.tables import write_parquet

    if fmt == "csv":
        from embedscope.tables import csv_line_end

        texts = [str(c) for c in frame.columns]
        for c in frame.columns:
            if frame[c].dtype.kind not in "biufcmM":  # (text: object or string dtype)
                texts += [v for v in frame[c] if type(v) is str and "\r" in v][:1]
        with atomic_output(path, force=force) as tmp:
            frame.to_csv(tmp, index=False, lineterminator=csv_line_end(texts))
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
    return escape_undecodable(Path(src).stem) if src else "embeddings"


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
        bad = [g for g in given if not isinstance(g, str)]  # (a list: None is a bad name too)
        if bad:
            raise UsageError(f"names must be strings, got {quoted(bad[0])}")
        empty = [i for i, g in enumerate(given) if not g.strip()]  # (spectrum's legend fell back to the file
        if empty:  # name while yoke refused it: one rule, every command's --names)
            raise UsageError(f"--names: name {empty[0] + 1} is empty: give each file a name")
    if given:
        if len(given) != len(sources):
            raise UsageError(f"--names gives {len(given)} name(s) for {len(sources)} file(s): give one per file")
        if len(set(given)) != len(given):
            raise UsageError("--names must differ")
        return given
    stems = [_display_name(s, i) for i, s in enumerate(sources)]
    if len(set(stems)) == len(stems):
        return stems
    return [escape_undecodable(str(s)) if isinstance(s, (str, os.PathLike)) else f"set{i}" for i, s in enumerate(sources)]


def _display_name(source: Any, i: int) -> str:
    """A file's stem; an in-memory set's :func:`model_name` (its file's stem, else "embeddings"); else setI."""
    if isinstance(source, (str, os.PathLike)):  # (a name's undecodable byte written \xff: tables hold UTF-8)
        return escape_undecodable(Path(str(source)).stem)
    if hasattr(source, "attrs") and hasattr(source, "embeddings"):
        return model_name(source)
    return f"set{i}"
