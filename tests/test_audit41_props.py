"""Audit 41: per-image properties brought by ``embedscope add-properties``.

* ``--force`` replacing a property dropped the HDF5 attributes its old dataset had (units, a description
  another tool wrote): the table gives none, so the replaced property now keeps them, each of its stored
  type and shape, and the command names them in a note (HDF5 references, which would point into the old
  file, left out and named);
* a Latin-1 table was "is not UTF-8 text (byte 0xe9 at offset 3)" for a byte 43,928 bytes into the file
  (the decoder's offset within its block): the line and the offset in the file are named now, and a
  UTF-16 table is said to be one;
* a zero-padded cell kept its column text only when every cell was an integer: beside a ``1.5`` or a
  ``12E3`` the ids ``0001``, ``0002`` became the numbers 1.0 and 2.0 (the docs: "``0001`` stays ``0001``");
* inf in a CSV or Parquet column was stored, and ``embedscope properties`` then refused the whole file
  ("property 'w' holds NaN or inf values", no file named): refused when the table is read, naming the
  column and the first image; a Parquet column of bytes that are not UTF-8 was a bare
  ``UnicodeDecodeError`` line, and one of lists was stored as the text ``[1 2]``: one line each;
* ``embedscope properties`` on a file another tool gave a NaN or inf property: the error now names the
  file and the way around it (``--properties``), and the other properties are measured when named;
* a row of more cells than the header: one such row was "cannot be read as a table (ParserError)", every
  row one cell more made pandas take the paths as a row index ("1 duplicate path(s), e.g. 1"); both now
  name the line; a NUL in a cell was refused naming the embedding file's property and row 0, not the table;
* a blank line before the header (pandas skips it) made the header check read the blank line: a name
  repeated in the real header was stored as two properties, ``w`` and ``w.1``;
* a column named ``x,y`` was stored, and ``properties --properties x,y`` then asked for ``x`` and ``y``
  ("no property 'x'"): such a name is refused, as a ``/`` is;
* a file whose text property another tool wrote in Latin-1 was refused by every command, ``add-properties
  --force`` too, which could replace it: that property is now replaced (its attributes kept), and the
  refusal of any other command's says how;
* a property of several numbers per image (N x k, which docs/store.md allows: "NR-Prec reads those of one
  value per image") made ``properties`` refuse the whole file ("property 'two' has shape (6, 2)", no file
  named): it is left out with a note, and refused naming the file only when asked for by name;
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from cli_run import one_error_line, run_cli

from embedscope import store
from embedscope.errors import EmbedscopeError

N = 6
PATHS = [f"img/{i}.jpg" for i in range(N)]


def _h5(path):
    """A small embedding file written by the project's own store, with a property 'old'."""
    es = store.EmbeddingSet(embeddings=np.random.default_rng(0).normal(size=(N, 3)).astype(np.float32),
                            labels=np.array([0, 0, 1, 1, 2, 2]), paths=PATHS, split=["test"] * N,
                            class_names=["a", "b", "c"], properties={"old": np.arange(N)})
    store.save(path, es)
    return path


def _csv(path, header: str, cells, *, raw: bytes | None = None):
    """A table of one row per image (``cells``: one value each, or whole rows after the path)."""
    if raw is None:
        raw = (header + "\n" + "".join(f"{p},{c}\n" for p, c in zip(PATHS, cells))).encode()
    path.write_bytes(raw)
    return path


# ----------------------------------------------------------------------------- --force keeps attributes


def test_force_keeps_the_replaced_propertys_attributes(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    with h5py.File(h5, "r+") as f:
        ds = f["properties/old"]
        ds.attrs["units"] = "px"
        ds.attrs["scale"] = np.array([1.5, 2.0], dtype=np.float32)
        ds.attrs.create("n", 6, dtype=np.int16)
        f["properties"].attrs["group_note"] = "kept"
    new = [1, 0, 1, 0, 1, 0]
    table = _csv(tmp_path / "t.csv", "path,old", new)
    rc, out, err = run_cli(["add-properties", h5, table, "--force"])
    assert rc == 0, err
    assert "replaced property old" in out
    assert "keeps its HDF5 attributes: 'old' (n, scale, units)" in out
    with h5py.File(h5, "r") as f:
        ds = f["properties/old"]
        assert ds[()].tolist() == new  # the new values
        assert ds.attrs["units"] == "px"
        assert ds.attrs["scale"].dtype == np.float32 and ds.attrs["scale"].tolist() == [1.5, 2.0]
        assert ds.attrs.get_id("n").dtype == np.int16 and ds.attrs["n"] == 6
        assert f["properties"].attrs["group_note"] == "kept"
    # a property without attributes, replaced: no note
    rc, out, err = run_cli(["add-properties", h5, _csv(tmp_path / "u.csv", "path,w", [3] * N)])
    assert rc == 0, err
    rc, out, err = run_cli(["add-properties", h5, _csv(tmp_path / "u.csv", "path,w", [4] * N), "--force"])
    assert rc == 0 and "attributes" not in out, out
    with h5py.File(h5, "r") as f:
        assert dict(f["properties/w"].attrs) == {} and f["properties/w"][()].tolist() == [4] * N



def test_force_leaves_out_references_into_the_old_file(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    with h5py.File(h5, "r+") as f:
        f["idx"] = np.arange(N)
        f["idx"].make_scale("row")
        f["properties/old"].dims[0].attach_scale(f["idx"])  # DIMENSION_LIST: references
        f["properties/old"].attrs["ref"] = f["idx"].ref
        f["properties/old"].attrs["units"] = "px"
    rc, out, err = run_cli(["add-properties", h5, _csv(tmp_path / "t.csv", "path,old", [2] * N), "--force"])
    assert rc == 0, err
    assert "keeps its HDF5 attributes: 'old' (units)" in out
    assert "HDF5 references of the replaced property not kept: 'old' (DIMENSION_LIST, ref)" in out
    with h5py.File(h5, "r") as f:
        assert dict(f["properties/old"].attrs) == {"units": "px"}
        assert f["properties/old"][()].tolist() == [2] * N


# ----------------------------------------------------------------------------- text that is not UTF-8


def test_latin1_table_names_its_line_and_the_bytes_offset_in_the_file(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    before = h5.read_bytes()
    # 3,000 rows of UTF-8 (more than one block of the decoder), then a latin-1 'café' on one row
    many = [f"x{i}" for i in range(3000)]
    body = b"path,w\n" + b"".join(f"other/{i}.jpg,{v}\n".encode() for i, v in enumerate(many))
    bad_row = b"img/0.jpg,caf\xe9\n"
    raw = body + bad_row + b"".join(f"{p},x\n".encode() for p in PATHS[1:])
    table = _csv(tmp_path / "latin1.csv", "", [], raw=raw)
    at = raw.index(b"\xe9")
    line = raw[:at].count(b"\n") + 1  # 1-based, the header being line 1
    assert line == 3002
    rc, out, err = run_cli(["add-properties", h5, table])
    assert rc == 1
    msg = one_error_line(err, "add-properties")
    assert f"latin1.csv: line {line} is not UTF-8 text (byte 0xe9 at offset {at} of the file" in msg
    assert h5.read_bytes() == before  # nothing written
    # UTF-16 (a spreadsheet's "Unicode text"): said so
    utf16 = _csv(tmp_path / "u.csv", "", [], raw=("path,w\n" + "".join(f"{p},a\n" for p in PATHS)).encode("utf-16"))
    rc, out, err = run_cli(["add-properties", h5, utf16])
    assert rc == 1 and one_error_line(err, "add-properties").endswith("u.csv: is UTF-16 text: save the table as UTF-8")


# ----------------------------------------------------------------------------- zero-padded cells


def test_zero_padded_cells_stay_text_beside_other_numbers(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    ids = ["0001", "0002", "0001", "12E3", "1.5", "-007"]
    padded = ["0001", "0002", "0001", "0002", "0001", "0002"]  # every cell an integer written padded
    floats = ["0.5", "1.5", "0.5", "1e3", "-2.25", "+0.0"]  # numbers: 0.5 is not zero-padded
    table = _csv(tmp_path / "t.csv", "path,id,padded,f",
                 [f"{a},{b},{c}" for a, b, c in zip(ids, padded, floats)])
    rc, out, err = run_cli(["add-properties", h5, table])
    assert rc == 0, err
    props = store.load(h5).properties
    assert props["id"].dtype.kind == "O" and list(props["id"]) == ids  # as written
    assert list(props["padded"]) == padded
    assert props["f"].dtype == np.float64 and props["f"].tolist() == [float(v) for v in floats]


# ----------------------------------------------------------------------------- values a property cannot hold


def _rows_with(value_of_row):
    return [value_of_row(i) for i in range(N)]


def test_inf_is_refused_when_the_table_is_read(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    before = h5.read_bytes()
    # (the cell named as written, quoted: audit 42, '1e999' was named "inf")
    for cell, shown in (("inf", "'inf'"), ("-inf", "'-inf'"), ("Infinity", "'Infinity'")):
        table = _csv(tmp_path / "t.csv", "path,w", _rows_with(lambda i, cell=cell: cell if i in (2, 4) else f"{i}.5"))
        rc, out, err = run_cli(["add-properties", h5, table])
        assert rc == 1, (cell, out)
        assert one_error_line(err, "add-properties").endswith(
            f"t.csv: column 'w' holds 2 value(s) that are not finite (first: {shown} for img/2.jpg): a property "
            "needs finite numbers or text")
    import pandas as pd

    pq = tmp_path / "t.parquet"
    pd.DataFrame({"path": PATHS[::-1], "w": np.array([1.5, np.inf, 2.5, 3.5, 4.5, 5.5], dtype=np.float32)}).to_parquet(pq)
    rc, out, err = run_cli(["add-properties", h5, pq])
    assert rc == 1 and "column 'w' holds 1 value(s) that are not finite (first: inf for img/4.jpg)" in err
    assert h5.read_bytes() == before
    # the finite column beside it is measured as before: the file still analyses
    rc, out, err = run_cli(["properties", h5, "--no-progress"])
    assert rc == 0, err


def test_parquet_bytes_and_nested_values(tmp_path):
    import pandas as pd

    h5 = _h5(tmp_path / "e.h5")
    before = h5.read_bytes()
    pq = tmp_path / "b.parquet"
    pd.DataFrame({"path": PATHS, "w": [b"ok", b"caf\xe9"] * 3}).to_parquet(pq)
    rc, out, err = run_cli(["add-properties", h5, pq])
    assert rc == 1
    assert one_error_line(err, "add-properties").endswith(
        "b.parquet: column 'w', row 2: bytes that are not UTF-8 text (byte 0xe9 at position 3): store text, or decode the "
        "bytes first")
    pd.DataFrame({"path": PATHS, "w": [[1, 2]] * N}).to_parquet(pq)
    rc, out, err = run_cli(["add-properties", h5, pq])
    assert rc == 1 and one_error_line(err, "add-properties").endswith(
        "b.parquet: column 'w' holds list values (row 1): a property is one number or text per image")
    assert h5.read_bytes() == before
    # bytes that are UTF-8 (paths too) are text
    pd.DataFrame({"path": [p.encode() for p in PATHS], "w": ["café".encode(), b"x"] * 3}).to_parquet(pq)
    rc, out, err = run_cli(["add-properties", h5, pq])
    assert rc == 0, err
    assert list(store.load(h5).properties["w"]) == ["café", "x"] * 3


def test_properties_names_the_file_of_a_nan_or_inf_property(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    with h5py.File(h5, "r+") as f:  # another tool's property
        f["properties/w"] = np.array([1.5, np.inf, np.nan, 1.5, 2.5, 2.5])
        f["properties/v"] = np.array([1, 2, 1, 2, 1, 2])
    rc, out, err = run_cli(["properties", h5, "--no-progress"])
    assert rc == 1
    assert one_error_line(err, "properties").endswith(
        f"{h5}: property 'w' holds NaN or inf (2 of the 6 images of split test): leave it out by naming the "
        "properties to measure (--properties)")
    rc, out, err = run_cli(["properties", h5, "--no-progress", "--properties", "v,class"])
    assert rc == 0, err
    assert sorted(ln.split()[1] for ln in out.splitlines()[3:5]) == ["class", "v"]  # (sorted by NR-Prec)


# ----------------------------------------------------------------------------- rows the header does not fit


def test_rows_of_more_cells_than_the_header_name_the_line(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    before = h5.read_bytes()
    # one row with a decimal comma, unquoted: line 5 (the header is line 1)
    cells = ["1.5", "2.5", "3.5", "3,5", "1.5", "2.5"]
    rc, out, err = run_cli(["add-properties", h5, _csv(tmp_path / "one.csv", "path,w", cells)])
    assert rc == 1
    assert one_error_line(err, "add-properties").endswith(
        "one.csv: line 5 has 3 cells, the header 2 names (a value with the separator ',' in it needs quotes)")
    # every row so (European decimals): pandas took the paths as the index
    rc, out, err = run_cli(["add-properties", h5, _csv(tmp_path / "all.csv", "path,w", ["1,5"] * N)])
    assert rc == 1
    assert one_error_line(err, "add-properties").endswith(
        "all.csv: line 2 has 3 cells, the header 2 names (a value with the separator ',' in it needs quotes)")
    raw = ("path\tw\n" + "".join(f"{p}\t1\t2\n" for p in PATHS)).encode()
    rc, out, err = run_cli(["add-properties", h5, _csv(tmp_path / "t.tsv", "", [], raw=raw)])
    assert rc == 1 and "t.tsv: line 2 has 3 cells, the header 2 names" in one_error_line(err, "add-properties")
    # quoted, the comma is a value's
    rc, out, err = run_cli(["add-properties", h5, _csv(tmp_path / "q.csv", "path,w", ['"1,5"'] * N)])
    assert rc == 0, err
    assert list(store.load(h5).properties["w"]) == ["1,5"] * N
    h5.write_bytes(before)
    # a NUL in a cell: the table's column and row named (the store named the embedding file's row 0)
    raw = b"path,w\n" + b"".join(p.encode() + (b",a\x00b\n" if i == 3 else b",ab\n") for i, p in enumerate(PATHS))
    rc, out, err = run_cli(["add-properties", h5, _csv(tmp_path / "nul.csv", "", [], raw=raw)])
    assert rc == 1
    assert one_error_line(err, "add-properties").endswith(
        "nul.csv: column 'w' holds a NUL character (row 4, path img/3.jpg), which HDF5 text cannot store")
    assert h5.read_bytes() == before


def test_blank_lines_before_the_header_do_not_hide_a_repeated_name(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    before = h5.read_bytes()
    raw = b"\n  \npath,w,w\n" + b"".join(p.encode() + b",1,2\n" for p in PATHS)
    rc, out, err = run_cli(["add-properties", h5, _csv(tmp_path / "t.csv", "", [], raw=raw)])
    assert rc == 1
    assert one_error_line(err, "add-properties").endswith(
        "t.csv: the column name 'w' occurs twice: give each property its own name")
    assert h5.read_bytes() == before
    # the ragged row's line counted from the header's own (line 3 here)
    raw = b"\n\npath,w\n" + b"".join(p.encode() + b",1,5\n" for p in PATHS)
    rc, out, err = run_cli(["add-properties", h5, _csv(tmp_path / "t.csv", "", [], raw=raw)])
    assert rc == 1 and "t.csv: line 4 has 3 cells, the header 2 names" in one_error_line(err, "add-properties")
    # a blank line before a good header is fine
    raw = b"\npath,w\n" + b"".join(p.encode() + b",7\n" for p in PATHS)
    rc, out, err = run_cli(["add-properties", h5, _csv(tmp_path / "t.csv", "", [], raw=raw)])
    assert rc == 0, err
    assert store.load(h5).properties["w"].tolist() == [7] * N


def test_a_name_with_a_comma_is_refused(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    before = h5.read_bytes()
    rc, out, err = run_cli(["add-properties", h5, _csv(tmp_path / "t.csv", 'path,w,"x,y"', ["1,2"] * N)])
    assert rc == 1
    assert one_error_line(err, "add-properties").endswith(
        "t.csv: column name 'x,y' has a comma: 'embedscope properties --properties' (comma-separated) could not "
        "name it; rename the column")
    assert h5.read_bytes() == before


def test_force_replaces_a_property_of_text_that_is_not_utf8(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    with h5py.File(h5, "r+") as f:  # another tool's latin-1 bytes
        f["properties/lat"] = np.array([b"caf\xe9"] * N)
        f["properties/lat"].attrs["units"] = "words"
    before = h5.read_bytes()
    other = _csv(tmp_path / "w.csv", "path,w", [1] * N)
    rc, out, err = run_cli(["add-properties", h5, other])
    assert rc == 1
    assert one_error_line(err, "add-properties").endswith(
        f"{h5}: 'properties/lat' holds invalid UTF-8 text (a table with a column 'lat' and --force replaces it)")
    table = _csv(tmp_path / "t.csv", "path,lat", ["café", "tea"] * 3)
    rc, out, err = run_cli(["add-properties", h5, table])
    assert rc == 1 and one_error_line(err, "add-properties").endswith(
        f"{h5} already has the property lat (use --force to replace)")
    assert h5.read_bytes() == before
    rc, out, err = run_cli(["add-properties", h5, table, "--force"])
    assert rc == 0, err
    assert "replaced property lat" in out
    es = store.load(h5)
    assert list(es.properties["lat"]) == ["café", "tea"] * 3 and es.properties["old"].tolist() == list(range(N))
    with h5py.File(h5, "r") as f:
        assert f["properties/lat"].attrs["units"] == "words"


def test_properties_leaves_out_a_property_of_several_values_per_image(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    with h5py.File(h5, "r+") as f:
        f["properties/two"] = np.zeros((N, 2))
        f["properties/v"] = np.array([1, 2, 1, 2, 1, 2])
    rc, out, err = run_cli(["properties", h5, "--no-progress"])
    assert rc == 0, err
    measured = {ln.split()[1] for ln in out.splitlines()[3:] if ln.startswith("e ")}
    assert measured == {"v", "class", "old"}
    assert "property 'two' holds several values per image: not measured (NR-Prec takes one value per image)" in out
    rc, out, err = run_cli(["properties", h5, "--no-progress", "--properties", "two"])
    assert rc == 1
    assert one_error_line(err, "properties").endswith(
        f"{h5}: property 'two' holds several values per image (shape (6, 2)): NR-Prec takes one value per image")


def test_a_ragged_row_is_named_by_the_line_it_is_on_after_quoted_line_breaks_and_blank_lines(tmp_path):
    """pandas counts a quoted cell's line breaks, and blank lines, otherwise than the file's lines: a row of
    three cells on line 6 was 'line 5'; every row of three cells below two blank lines, line 4, 'line 2'.
    The lines here are counted by hand from the bytes written."""
    from embedscope.data.properties import read_property_table

    one = tmp_path / "one.csv"
    one.write_bytes(b'path,w\na,"x\ny"\n\nb,1\nc,2,3\n')  # lines: 1 header, 2-3 a's cell, 4 blank, 5 b, 6 c
    with pytest.raises(EmbedscopeError, match=r"one\.csv: line 6 has 3 cells, the header 2 names"):
        read_property_table(one)
    every = tmp_path / "every.csv"
    every.write_bytes(b"path,w\n\n\na,1,5\nb,1,6\n")  # lines 2-3 blank: the first row on line 4
    with pytest.raises(EmbedscopeError, match=r"every\.csv: line 4 has 3 cells, the header 2 names"):
        read_property_table(every)
