"""Result tables: aligned text for the terminal, and the same rows as CSV or JSON files."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from typing import Any, Iterable, Mapping, Sequence

from embedscope.fileio import write_text
from embedscope.text import safe


def _fmt(v: Any, digits: int, nan: str = "nan") -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if type(v).__name__ in ("NAType", "NaTType"):  # pandas' missing value: undefined, as NaN ('<NA>' before)
        return nan
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return nan
        if v != 0 and (abs(v) >= 1e5 or abs(v) < 10 ** (-digits)):
            return f"{v:.{digits}g}"
        return f"{v:.{digits}f}"
    try:
        import numpy as np

        if isinstance(v, np.integer):
            return str(int(v))
        if isinstance(v, np.floating):
            return _fmt(float(v), digits, nan)
    except ImportError:  # pragma: no cover
        pass
    return str(v)


def format_number(v: Any, digits: int = 4, nan: str = "nan") -> str:
    """One number as :func:`format_table` shows it: ``digits`` decimals, or that many significant
    digits when ``|v| >= 1e5`` or ``0 < |v| < 10**-digits`` (``1.235e+05``, ``5e-05``)."""
    return _fmt(v, digits, nan)


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
                 *, digits: int = 4, title: str | None = None, headers: Sequence[str] | None = None,
                 nan: str = "nan") -> str:
    """Rows of dicts as an aligned text table (numbers right-aligned).

    Numbers: integers in full; floats with ``digits`` decimals (``f"{v:.{digits}f}"``), or ``digits``
    significant digits (``f"{v:.{digits}g}"``) when ``|v| >= 1e5`` or ``0 < |v| < 10**-digits``;
    NaN shows ``nan`` (or the text ``nan``), infinities ``inf`` / ``-inf``. ``columns``: default every row's keys, in
    the order they first come; ``headers``: the names shown above ``columns`` (default: the column keys themselves).

    Every cell, header and the title go through :func:`embedscope.text.safe`: a class name, model
    name, property name or path read from a file shows its control characters escaped (no terminal
    escape reaches the screen). Only this text is escaped; CSV and JSON files keep the true strings.
    """
    title = safe(title) if title else title
    if not rows:
        return (title + "\n" if title else "") + "(no rows)"
    keys = list(columns or dict.fromkeys(k for r in rows for k in r))  # (a later row's own key too)
    if headers is not None and len(headers) != len(keys):
        raise ValueError(f"format_table: {len(headers)} headers for {len(keys)} columns")
    columns = [safe(c) for c in (keys if headers is None else headers)]
    cells = [[safe(_fmt(r.get(c, ""), digits, nan)) for c in keys] for r in rows]
    widths = [max(display_width(c), *(display_width(row[i]) for row in cells)) for i, c in enumerate(columns)]
    numeric = [all(_is_num(r.get(c)) for r in rows) for c in keys]

    def pad(v: str, w: int, right: bool) -> str:
        fill = " " * max(0, w - display_width(v))
        return fill + v if right else v + fill

    def line(vals: Iterable[str]) -> str:
        return "  ".join(pad(v, w, num) for v, w, num in zip(vals, widths, numeric)).rstrip()

    out = [title] if title else []
    out += [line(columns), line("-" * w for w in widths)]
    out += [line(r) for r in cells]
    return "\n".join(out)


def display_width(text: str) -> int:
    """The columns ``text`` takes on a terminal: East Asian wide and full-width characters two,
    combining marks none, every other character one (what ``wcwidth`` computes for the characters
    a table cell holds; control characters were escaped before)."""
    import unicodedata

    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.combining(ch) else (2 if unicodedata.east_asian_width(ch) in "WF" else 1)
               for ch in text)


def _is_num(v: Any) -> bool:
    try:
        import numpy as np

        return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
    except ImportError:  # pragma: no cover
        return isinstance(v, (int, float)) and not isinstance(v, bool)


def key_value_rows(d: Mapping[str, Any], key: str = "measure", value: str = "value") -> list[dict[str, Any]]:
    return [{key: k, value: v} for k, v in d.items()]


def _jsonable(v: Any) -> Any:
    """``v`` with numpy values as Python ones and NaN / ±inf (and pandas' ``NA`` / ``NaT``) as ``None`` (JSON
    ``null``), at any depth.

    numpy scalars and arrays are converted first and then checked like Python floats: a NaN held as
    ``np.float64`` or inside an array was written as the non-JSON literal ``NaN`` / ``Infinity``.
    """
    t = type(v)  # the plain types first (a table of 100,000 rows: ~10^6 values)
    if t is str or t is int or t is bool or v is None:
        return v
    if t is float:
        return v if math.isfinite(v) else None
    if t is dict:
        return {k if type(k) is str else str(k): _jsonable(x) for k, x in v.items()}
    if t is list:
        return [_jsonable(x) for x in v]
    try:
        import numpy as np

        if isinstance(v, np.ndarray):
            return _jsonable(v.tolist())
        if isinstance(v, np.generic):
            return _jsonable(v.item())
    except ImportError:  # pragma: no cover
        pass
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if type(v).__name__ in ("NAType", "NaTType"):  # pandas' missing value of a nullable column (a frame's rows)
        return None
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def write_json(path: str | os.PathLike, obj: Any, *, force: bool = False) -> None:
    """Atomically write ``obj`` as indented, strict JSON (numpy values converted; NaN and ±inf -> null,
    JSON having no literal for them)."""
    write_text(path, json.dumps(_jsonable(obj), indent=2, sort_keys=False, allow_nan=False) + "\n", force=force)


def write_csv(path: str | os.PathLike, rows: Sequence[Mapping[str, Any]],
              columns: Sequence[str] | None = None, *, force: bool = False) -> None:
    """Atomically write rows of dicts as CSV: NaN (and None) an empty cell, +/-inf ``inf`` / ``-inf``
    (as a Result's CSV spells them: docs/architecture.md; pandas' read_csv reads them back as floats),
    floats with ``repr`` (every digit). The header: ``columns`` (a key no column names is left out), or
    every row's keys in the order they first come (a key only a later row has was dropped without a word)."""
    columns = list(columns or dict.fromkeys(k for r in rows for k in r))
    values = [{c: _csv_cell(r.get(c, "")) for c in columns} for r in rows]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator=csv_line_end(
        [*columns, *(v for r in values for v in r.values() if type(v) is str)]))
    w.writeheader()
    w.writerows(values)
    write_text(path, buf.getvalue(), force=force)


def _csv_cell(v: Any) -> Any:
    """One cell of :func:`write_csv`: as :func:`_jsonable`, but an infinity spelled ``inf`` / ``-inf``
    (it was an empty cell, read back as NaN: an infinite value and an undefined one read alike)."""
    if isinstance(v, float) or (isinstance(v, _np_floating()) and v.ndim == 0):
        f = float(v)
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
    return _jsonable(v)


def _np_floating() -> tuple:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return ()
    return (np.floating,)


def csv_line_end(texts) -> str:
    """The line end of a CSV file holding ``texts`` (its text cells and header): "\n", or "\r\n" (RFC
    4180's) when a text holds a carriage return. Python's csv writer quotes a cell holding the
    delimiter, the quote or a character of the line end only: a lone "\r" in a cell of a "\n" file was
    written bare, and readers split the row there (a class name "a\rb": one more row in the CSV than in
    the Parquet or JSON of the same table)."""
    return "\r\n" if any("\r" in t for t in texts) else "\n"


def write_parquet(path: str | os.PathLike, frame, *, force: bool = False) -> None:
    """Atomically write a pandas frame as Parquet (no index), through a file object: Arrow cannot
    open a path with an undecodable byte (a folder name that is not UTF-8)."""
    from embedscope.fileio import atomic_output

    with atomic_output(path, force=force) as tmp:
        with open(tmp, "wb") as fh:
            frame.to_parquet(fh, index=False)


def read_parquet(path: str | os.PathLike):
    """A Parquet file as a pandas frame, read through a file object (see :func:`write_parquet`)."""
    import pandas as pd

    with open(path, "rb") as fh:
        return pd.read_parquet(fh)
