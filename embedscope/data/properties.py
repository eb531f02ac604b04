"""Per-image properties of embedding files (docs/methods.md §9): measure them, bring your own.

(The measure of a file's properties is :func:`embedscope.analyses.properties`.)

* :func:`read_property_table` / :func:`join_properties` / :func:`add_properties_to_file` -- a
  per-image CSV or Parquet table joined on ``path`` (``embedscope add-properties``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from embedscope.errors import EmbedscopeError

# ----------------------------------------------------------------------------- bring your own


def _check_header(path: Path, sep: str) -> int:
    """Refuse a text table whose header repeats a name (pandas renamed the second ``w`` to ``w.1``,
    silently adding a property), leaves a name empty (``Unnamed: 1``) or pads one with spaces
    (``w `` and ``w`` are two properties that print alike). Returns the header's line number."""
    import csv

    with open(path, newline="", encoding="utf-8-sig") as f:
        # the first line that is not blank, as pandas takes it (blank lines before the header skipped: a
        # repeated name after one was not checked, and became a property 'w.1')
        reader = csv.reader(f, delimiter=sep)
        header = next((row for row in reader if len(row) > 1 or "".join(row).strip()), None)
    if header is None:  # (pandas: "cannot be read as a table (EmptyDataError)")
        raise EmbedscopeError(f"{path}: the file is empty (expected a header line with a 'path' column, then "
                              "one row per image)")
    _check_names(path, header)
    return reader.line_num


def _col(name, most: int = 60) -> str:
    """A column name (or a cell, ``most``) as a message names it: whole up to ``most`` characters, else its
    start and end (a header cell of 70,000 characters was printed whole; the end kept, a space after the
    name, a path's file name stays in view). Not escaped: the line that shows the message escapes it
    (:func:`embedscope.text.safe`), once."""
    name = str(name)
    tail = (most - 3) // 3
    return name if len(name) <= most else f"{name[:most - 3 - tail]}...{name[-tail:]}"


def _paths(paths, most: int = 3) -> str:
    """The first ``most`` paths a message names, each :func:`_col` to 200 characters (a path cell of
    70,000 characters, a row of a broken table, was printed whole)."""
    return ", ".join(_col(p, 200) for p in list(paths)[:most])


def _check_names(path: Path, header) -> None:
    """:func:`_check_header`'s checks of the names (a Parquet table's too: its ``w `` and ``w`` were stored
    as two properties that print alike, a repeated name was "cannot be read as a table (ArrowInvalid)")."""
    seen = set()
    for i, name in enumerate(header):
        if name.strip() == "":
            hint = " (a row index written by pandas? write the table with index=False)" if i == 0 else ""
            raise EmbedscopeError(f"{path}: column {i + 1} of the header has no name{hint}")
        if name != name.strip():
            raise EmbedscopeError(f"{path}: the column name '{_col(name)}' has spaces around it")
        if name in seen:
            raise EmbedscopeError(f"{path}: the column name '{_col(name)}' occurs twice: give each property "
                                  "its own name")
        seen.add(name)


def _check_not_binary(path: Path) -> None:
    """One line for an HDF5 file or an Excel workbook given as the table (was "is not UTF-8 text (byte
    0x89 at offset 0)" for an embedding file, the same for an .xlsx)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return  # (the reader says why)
    if head == b"\x89HDF\r\n\x1a\n":
        raise EmbedscopeError(f"{path}: is an HDF5 file, not a table: give a CSV, TSV or Parquet table with a "
                              "'path' column")
    if head[:2] == b"\x1f\x8b":  # (a .csv.gz: the header check read it as text, "is not UTF-8 text")
        raise EmbedscopeError(f"{path}: is gzip-compressed: give the table uncompressed (gunzip it)")
    if path.suffix.lower() in (".xlsx", ".xlsm", ".xls", ".ods") or head[:4] == b"PK\x03\x04":
        raise EmbedscopeError(f"{path}: is a spreadsheet or zip file, not a table: save it as CSV (UTF-8) or "
                              "Parquet")


def _not_utf8(path: Path, e: UnicodeDecodeError) -> str:
    """The one line for a text table that is not UTF-8, naming the line and the byte's offset in the file
    (the decoder's offset counts from the block it was decoding: a latin-1 ``café`` on line 3003 was said
    to be "at offset 3"). A line is decoded on its own: a UTF-8 sequence never holds a newline byte."""
    try:
        with open(path, "rb") as f:
            if f.read(2) in (b"\xff\xfe", b"\xfe\xff"):
                return f"{path}: is UTF-16 text: save the table as UTF-8"
            f.seek(0)
            offset = 0
            for number, line in enumerate(f, 1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as bad:
                    return (f"{path}: line {number} is not UTF-8 text (byte 0x{line[bad.start]:02x} at offset "
                            f"{offset + bad.start} of the file; Latin-1 or Windows-1252?): save the table as UTF-8")
                offset += len(line)
    except OSError:
        pass
    return f"{path}: is not UTF-8 text (byte 0x{e.object[e.start]:02x}): save the table as UTF-8"


def _exact_floats(pd) -> dict:
    """``read_csv``'s option for numbers parsed exactly: ``float_precision="round_trip"`` before pandas 3,
    whose default parser is exact and which deprecates the option (a Pandas4Warning on every table)."""
    try:
        major = int(pd.__version__.split(".")[0])
    except ValueError:
        major = 3
    return {} if major >= 3 else {"float_precision": "round_trip"}


def _ragged_line(path: Path, sep: str, want: int) -> int | None:
    """The line of the file on which the first row of more than ``want`` cells starts (pandas counts a
    quoted cell's line breaks, and blank lines between the rows, otherwise: "line 4" of a row on line 5);
    None when it cannot be found so."""
    import csv

    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f, delimiter=sep)
            start, seen_header = 1, False
            for row in reader:
                if row and not seen_header:
                    seen_header = True
                elif row and len(row) > want:
                    return start
                start = reader.line_num + 1
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return None


def read_property_table(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """A per-image table (CSV, TSV or Parquet) with a ``path`` column -> columns as arrays."""
    import pandas as pd

    from embedscope.tables import read_parquet

    path = Path(path)
    if not path.exists():
        raise EmbedscopeError(f"{path}: no such file")
    if path.is_dir():
        raise EmbedscopeError(f"{path} is a directory, expected a table (CSV, TSV or Parquet)")
    if not path.is_file():  # a named pipe: its read waited for a writer, for ever
        raise EmbedscopeError(f"{path} is not a regular file (a device, a named pipe or a socket), expected a table "
                              "(CSV, TSV or Parquet)")
    _check_not_binary(path)
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            from embedscope.importers import table_columns

            _check_names(path, table_columns(path, "parquet"))  # (read from the file's footer)
            df = read_parquet(path)
            # a named index (``df.set_index("path").to_parquet()``) as a column again, as import reads it (it
            # was "no 'path' column (columns: w)"); an unnamed one, a row number, is dropped
            named = [n for n in df.index.names if n is not None]
            if named:
                df = df.reset_index(level=named)
            text = None
        else:
            sep = "\t" if path.suffix.lower() == ".tsv" else ","
            header_line = _check_header(path, sep)
            # the cells as written (a path "0001" is not the number 1, a value "NA" is not missing) and,
            # for numeric columns, the numbers parsed exactly
            text = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False)
            if not isinstance(text.index, pd.RangeIndex):  # every row a cell more than the header: pandas took
                # the first as a row index (the paths then read as the next column's values, "1 duplicate
                # path(s), e.g. 1")
                line = _ragged_line(path, sep, len(text.columns)) or header_line + 1
                raise EmbedscopeError(f"{path}: line {line} has {len(text.columns) + text.index.nlevels} cells, the "
                                      f"header {len(text.columns)} names (a value with the separator '{sep}' "
                                      "in it needs quotes)")
            df = pd.read_csv(path, sep=sep, **_exact_floats(pd))
    except EmbedscopeError:
        raise
    except UnicodeDecodeError as e:
        raise EmbedscopeError(_not_utf8(path, e)) from None
    except PermissionError as e:
        raise EmbedscopeError(f"{path}: cannot read ({e.strerror or 'Permission denied'})") from None
    except Exception as e:  # noqa: BLE001 - any parse failure is one line
        import re

        # a row of more cells than the header (pandas' "Expected 2 fields in line 8, saw 3"): its line named
        ragged = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(e))
        if ragged:
            want, line, saw = ragged.groups()
            line = _ragged_line(path, sep, int(want)) or line
            raise EmbedscopeError(f"{path}: line {line} has {saw} cells, the header {want} names (a value with "
                                  f"the separator '{sep}' in it needs quotes)") from None
        raise EmbedscopeError(f"{path}: cannot be read as a table ({e.__class__.__name__})") from None
    if len(set(map(str, df.columns))) != len(df.columns):  # (a Parquet file may repeat a name)
        raise EmbedscopeError(f"{path}: a column name occurs twice: give each property its own name")
    if "path" not in df.columns:
        from embedscope.importers import did_you_mean, path_column_candidates, separator_hint

        # a comma-separated .tsv, a tab- or semicolon-separated .csv: the whole header line was one column name
        hint = separator_hint(path, sep, list(df.columns)) if text is not None else ""
        # else a column of paths spelled otherwise (Path, image_path, filename): named, as import names it
        mean = "" if hint else did_you_mean(path_column_candidates(list(df.columns), exact=("path",)))
        if mean:
            hint = f"; the images are joined on a column named exactly 'path'{hint}"
        cols = [_col(c) for c in df.columns]
        listed = ", ".join(cols if len(cols) <= 8 else [*cols[:6], "...", cols[-1]]) + (
            f" ({len(cols)} columns)" if len(cols) > 8 else "")
        raise EmbedscopeError(f"{path}: no 'path' column ({mean + ' ' if mean else ''}columns: {listed}){hint}")
    if len(df.columns) < 2:
        raise EmbedscopeError(f"{path}: no property columns besides 'path'")
    from embedscope.importers import long_property_name

    long = next((m for m in (long_property_name(c, path) for c in df.columns) if m), None)
    if long:  # (after the 'path' check: a semicolon CSV's whole header, one long name, is said to be one)
        raise EmbedscopeError(long)
    if len(df) == 0:  # (was "N image(s) of the file have no row": every image, for a header alone)
        raise EmbedscopeError(f"{path}: the table has no rows: give one row per image")
    from embedscope.importers import object_cells, property_cells

    out = {}
    for c in df.columns:
        if text is None:
            col = df[c]
            if col.isna().any():
                raise EmbedscopeError(f"{path}: column '{c}' has {int(col.isna().sum())} empty value(s)")
            if col.dtype.kind in "iufb":
                out[str(c)] = col.to_numpy()
            elif col.dtype.kind == "O":  # (text, bytes, lists: each cell looked at)
                # bytes read as UTF-8 (those that are not: one line naming the row; a bare UnicodeDecodeError
                # before), nested values refused (a list was stored as the text "[1 2]")
                out[str(c)] = object_cells(path, f"column '{c}'", col.to_numpy(dtype=object), first_row=1, as_text=True)
            else:  # (dates, categories: as text)
                out[str(c)] = col.astype(str).to_numpy(dtype=object)
            continue
        cells = text[c].to_numpy(dtype=object)
        empty = int(sum(v.strip() == "" for v in cells))
        if empty:
            raise EmbedscopeError(f"{path}: column '{c}' has {empty} empty value(s)")
        nul = next((i for i, v in enumerate(cells) if "\x00" in v), None) if "\x00" in "".join(cells) else None
        if nul is not None:  # (was refused by the store naming the embedding file's property and its row)
            where = _col(text['path'].iloc[nul], 200) if 'path' in text else '?'
            raise EmbedscopeError(f"{path}: column '{c}' holds a NUL character (row {nul + 1}, path {where}), "
                                  "which HDF5 text cannot store")
        # (an integer beyond int64, a 30-digit id, stays as written; every cell a number, 1.5, 1e-3: parsed exactly)
        out[str(c)] = cells if c == "path" else property_cells(cells, df[c].to_numpy())
    _check_finite(path, out, text)
    return out




def _check_finite(path: Path, columns: dict[str, np.ndarray], text=None) -> None:
    """Refuse inf (and a NaN a check before let through) in a numeric column: the analyses refuse a
    property holding one (``embedscope properties`` then measured no property of the file at all). The
    value named as the CSV/TSV has it (``text``: its cells as written): ``1e999`` was named "inf", which
    a search of the file does not find."""
    for name, v in columns.items():
        if name == "path" or v.dtype.kind != "f":
            continue
        bad = ~np.isfinite(v)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            first = f"'{_col(text[name].iloc[i])}'" if text is not None and name in text else str(v[i])
            raise EmbedscopeError(f"{path}: column '{name}' holds {int(bad.sum())} value(s) that are not finite "
                                  f"(first: {first} for {_col(columns['path'][i], 200)}): a property needs finite numbers "
                                  "or text")


def join_properties(paths: np.ndarray, table: dict[str, np.ndarray], source: str = "table") -> dict[str, np.ndarray]:
    """Reorder ``table``'s columns to the images ``paths`` by the ``path`` column.

    Every image must appear exactly once in the table and every table row must match an image:
    otherwise a one-line error names the first few offenders.
    """
    tp = np.asarray(table["path"]).astype(str)
    uniq, counts = np.unique(tp, return_counts=True)
    dup = uniq[counts > 1]
    if len(dup):
        raise EmbedscopeError(f"{source}: {len(dup)} duplicate path(s), e.g. {_paths(dup)}")
    paths = np.asarray(paths).astype(str)
    pos = {p: i for i, p in enumerate(tp)}
    missing = [p for p in paths if p not in pos]
    if missing:
        from embedscope.store.embeddings import spelling_hint  # a path column spelled otherwise: say how

        raise EmbedscopeError(f"{source}: {len(missing)} image(s) of the file have no row, "
                              f"e.g. {_paths(missing)}{spelling_hint(missing, np.setdiff1d(tp, paths))}")
    extra = np.setdiff1d(tp, paths)
    if len(extra):
        raise EmbedscopeError(f"{source}: {len(extra)} row(s) match no image of the file, e.g. {_paths(extra)}")
    idx = np.array([pos[p] for p in paths], dtype=np.int64)
    return {k: np.asarray(v)[idx] for k, v in table.items() if k != "path"}


def add_properties_to_file(h5: str | os.PathLike, table_path: str | os.PathLike, *, force: bool = False,
                           replaced: list[str] | None = None) -> list[str]:
    """Join a per-image table on ``path`` and store its columns as ``/properties/<name>`` of ``h5``.

    The file is rewritten atomically, keeping everything else in it (groups, datasets and attributes
    outside the schema too), in memory bounded whatever its size (its embeddings are checked a block of
    rows at a time; the file copied by the kernel, or rebuilt by HDF5 when a property is replaced, so
    that the file does not grow: :func:`embedscope.store.embeddings.update_properties`).
    A property that already exists is an error unless ``force``; replaced, it keeps the HDF5 attributes
    the old dataset had (a table gives none: another tool's units or description stay with the name).
    Returns the names stored (the table's columns, in its order); ``replaced``, when given, is extended
    with those of them the file already had (``force``: their old values are gone). A file without write
    permission is refused (``force`` included): the rename of the rewritten copy would replace it all the
    same.
    """
    new, clash, _, _ = _add_properties(h5, table_path, force=force)
    if replaced is not None:
        replaced.extend(clash)
    return list(new)


def _add_properties(h5, table_path, *, force: bool
                    ) -> tuple[dict[str, np.ndarray], list[str], dict[str, list[str]], dict[str, list[str]]]:
    """:func:`add_properties_to_file` -> (the values stored by name, the names that replaced a property,
    the attributes each replaced property kept, those it could not keep: references): ``embedscope
    add-properties`` words its lines and its notes from them (it read the file again)."""
    from embedscope.importers import check_property_not_reserved
    from embedscope.store.embeddings import scan

    # every check of store.load, but the embeddings read a block of rows at a time and not kept (a file can
    # be 100k x 2048 float32, 800 MB): the rewrite copies them as they are
    _check_updatable(h5)
    unreadable: dict[str, str] = {}  # another tool's property of text that is not UTF-8: --force replaces it
    es, _ = scan(h5, unreadable=unreadable)
    new = join_properties(es.paths, read_property_table(table_path), str(table_path))
    for k in new:
        # /properties/<name> is an HDF5 path ('/' makes groups, '.' and '' name no dataset): named here
        # with the table (the store's own check named the "embedding set")
        if k in ("", ".", "..") or "/" in k or "\x00" in k:
            raise EmbedscopeError(f"{table_path}: column name '{k}' cannot be a property name (no '/', NUL, "
                                  "'.' or empty name in HDF5)")
        if "," in k:  # stored, it was measured but could not be named: --properties x,y asked for 'x' and 'y'
            raise EmbedscopeError(f"{table_path}: column name '{k}' has a comma: 'embedscope properties "
                                  "--properties' (comma-separated) could not name it; rename the column")
        # 'class' is the labels' name in the analyses: such a property would take their place
        check_property_not_reserved(k, table_path)
    left = [k for k in unreadable if k not in new]
    if left:  # (every command refused the file, this one too: the way to repair it said)
        raise EmbedscopeError(f"{unreadable[left[0]]} (a table with a column '{left[0]}' and --force replaces it)")
    clash = [k for k in new if k in es.properties or k in unreadable]
    if clash and not force:
        raise EmbedscopeError(f"{h5} already has the propert{'ies' if len(clash) > 1 else 'y'} "
                              f"{', '.join(clash[:3])}{', ...' if len(clash) > 3 else ''} (use --force to replace)")
    es.properties = {**es.properties, **new}
    from embedscope.store.embeddings import update_properties

    kept: dict[str, list[str]] = {}
    not_kept: dict[str, list[str]] = {}
    update_properties(h5, es, list(new), absent=[] if force else list(new), kept=kept, not_kept=not_kept)
    return new, clash, kept, not_kept


def _check_updatable(h5) -> None:
    """Refuse a file without write permission (``chmod 444``, another user's file): the rewrite replaces the
    file by a copy (a rename, which the folder's permission allows), and a file the user made read-only was
    updated all the same (as root too: the mode's write bits are read, not only ``access``). ``--force``
    (which replaces properties) does not override it: make the file writable first.

    The check is :func:`embedscope.store.embeddings.update_properties`' own (one rule for both), made here
    before the table is read, in the command's words."""
    from embedscope.store.embeddings import _check_updatable as store_check

    try:
        store_check(h5)
    except EmbedscopeError:
        raise EmbedscopeError(f"{h5}: the file is read-only (no write permission): add-properties rewrites it; "
                              "make it writable first (chmod u+w) to add properties to it") from None


# ----------------------------------------------------------------------------- helpers for the loaders


def quantile_bins(x, bins: int = 5) -> np.ndarray:
    """Codes 0..bins-1 of a continuous value by its quantiles over the set (ties share a bin).

    NR-Prec needs categorical values; bounding-box areas and aspect ratios are binned so that each
    bin holds about 1/bins of the images.
    """
    x = np.asarray(x, dtype=np.float64)
    if len(x) == 0:
        return np.zeros(0, dtype=np.int64)
    edges = np.quantile(x, np.arange(1, bins) / bins)
    return np.searchsorted(edges, x, side="right").astype(np.int64)


def image_sizes(root: Path, paths) -> np.ndarray:
    """(width, height) of each image from its header (PIL opens lazily: no pixel decoding)."""
    from PIL import Image

    from embedscope.data.base import _reason

    out = np.zeros((len(paths), 2), dtype=np.float64)
    for i, p in enumerate(paths):
        f = Path(root) / p
        try:
            with Image.open(f) as im:
                out[i] = im.size
        except (OSError, ValueError) as e:  # (the reason without PIL's second, quoted copy of the path)
            raise EmbedscopeError(f"cannot read image {f}: {_reason(e, f)}") from None
        except Exception as e:  # noqa: BLE001 - PIL's DecompressionBombError, a plugin's SyntaxError: name the file
            raise EmbedscopeError(f"cannot read image {f}: {e.__class__.__name__}: {_reason(e, f)}") from None
    return out


def bbox_properties(boxes_wh: np.ndarray, sizes: np.ndarray, bins: int = 5) -> dict[str, np.ndarray]:
    """``bbox_area`` (box area / image area) and ``bbox_aspect`` (box width / height), each as quantile bins."""
    w, h = boxes_wh[:, 0], boxes_wh[:, 1]
    area = (w * h) / np.maximum(sizes[:, 0] * sizes[:, 1], 1e-12)
    aspect = w / np.maximum(h, 1e-12)
    return {"bbox_area": quantile_bins(area, bins), "bbox_aspect": quantile_bins(aspect, bins)}
