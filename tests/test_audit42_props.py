"""Audit 42: per-image property tables (``add-properties``, ``import --properties``).

* a 70,000-character column name was stored as a property and printed whole (the success line, then every
  ``properties`` table 70,000 characters wide): a property name is at most 255 characters, a longer one
  refused in one line naming it shortened; every column name a message of the table reader names is shortened;
* ``1e999`` in a numeric column was refused as "first: inf", which a search of the file does not find: the
  cell is quoted as written;
* `` 7 `` (spaces around an integer) stayed the text " 7 " while `` 0.5`` was the number 0.5 (and a column
  of ``7`` and `` 7 `` held two values): spaces around a number are not a part of it, integers as floats;
* ``add-properties`` rewrote a file the user had made read-only (``chmod 444``: the copy is renamed over it,
  which the folder allows): refused in one line, ``--force`` included (it replaces properties, not
  permissions)
"""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest
from cli_run import one_error_line, run_cli
from test_audit41_props import PATHS, N, _h5  # (6 images, a store with a property 'old')

from embedscope.data.properties import read_property_table
from embedscope.errors import EmbedscopeError
from embedscope.importers import import_embeddings

MAX_PROPERTY_NAME = 255  # (embedscope.importers.MAX_PROPERTY_NAME, docs/properties.md)


def _csv(path, header: str, rows):
    """``rows``: the cells after the path, one string per image (commas inside make more cells)."""
    path.write_text(header + "\n" + "".join(f"{p},{r}\n" for p, r in zip(PATHS, rows)), encoding="utf-8")
    return path


def _props(h5):
    with h5py.File(h5, "r") as f:
        return sorted(f["properties"])


# ----------------------------------------------------------------------------- 1. long names


def test_a_very_long_column_name_is_refused_and_shortened(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    name = "w" * 70_000
    table = _csv(tmp_path / "t.csv", f"path,{name}", ["0", "1"] * 3)
    rc, out, err = run_cli(["add-properties", h5, table])
    line = one_error_line(err, "add-properties")
    assert rc == 1 and out == ""
    assert "is 70,000 characters long: a property name is at most 255 characters" in line
    assert len(line) < 400  # (was: stored, and the success line 70,022 characters)
    assert _props(h5) == ["old"]
    # the limit itself is taken
    ok = _csv(tmp_path / "ok.csv", f"path,{'v' * MAX_PROPERTY_NAME}", ["0", "1"] * 3)
    rc, out, err = run_cli(["add-properties", h5, ok])
    assert rc == 0, err
    assert _props(h5) == ["old", "v" * MAX_PROPERTY_NAME]


def test_long_names_in_the_readers_other_messages_are_shortened(tmp_path):
    # a long name with a space after it: shortened, its end (the space) kept in view
    t = tmp_path / "s.csv"
    t.write_text("path," + "w" * 70_000 + " \n" + "".join(f"{p},1\n" for p in PATHS))
    with pytest.raises(EmbedscopeError) as e:
        read_property_table(t)
    assert "has spaces around it" in str(e.value) and len(str(e.value)) < 200
    assert "w... " not in str(e.value) and "w ' has spaces" in str(e.value)
    # no 'path' column: each name listed shortened
    t = tmp_path / "n.csv"
    t.write_text("file," + "x" * 70_000 + "\n" + "".join(f"{p},1\n" for p in PATHS))
    with pytest.raises(EmbedscopeError, match="no 'path' column") as e:
        read_property_table(t)
    assert len(str(e.value)) < 300


def test_import_refuses_a_long_property_name(tmp_path):
    import pandas as pd

    name = "p" * 300
    df = pd.DataFrame({"label": [0, 1] * 3, name: [1, 2] * 3, "d0": np.arange(6.0), "d1": np.ones(6)})
    df.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(EmbedscopeError, match="is 300 characters long: a property name is at most 255") as e:
        import_embeddings(tmp_path / "t.csv", properties=[name], embeddings="d*")
    assert len(str(e.value)) < 300


# ----------------------------------------------------------------------------- 2. inf named as written


def test_an_infinite_value_is_named_as_written(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    table = _csv(tmp_path / "t.csv", "path,w", ["0.5", "0.25", "1e999", "1", "2", "-1E999"])
    rc, _, err = run_cli(["add-properties", h5, table])
    line = one_error_line(err, "add-properties")
    assert rc == 1 and "column 'w' holds 2 value(s) that are not finite (first: '1e999' for img/2.jpg)" in line


def test_import_names_an_infinite_value_as_written(tmp_path):
    import pandas as pd

    df = pd.DataFrame({"label": [0, 1] * 3, "w": ["0.5", "1e999", "1", "2", "3", "4"], "d0": np.arange(6.0)})
    df.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(EmbedscopeError, match=r"property 'w' holds 1 value\(s\) that are not finite "
                                              r"\(first: '1e999' at row 1\)"):
        import_embeddings(tmp_path / "t.csv", properties=["w"], embeddings="d*")


# ----------------------------------------------------------------------------- 3. spaces around numbers


def test_spaces_around_a_number_are_read_alike_for_integers_and_floats(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    rows = [f" {i % 2} , {i % 2}.5,{' 7' if i == 0 else '7'},\t3\t, 007 , cat " for i in range(N)]
    table = _csv(tmp_path / "t.csv", "path,i,f,mixed,tab,padded,text", rows)
    t = read_property_table(table)
    assert t["i"].dtype == np.int64 and t["i"].tolist() == [0, 1] * 3  # was the text ' 0 ', ' 1 '
    assert t["f"].dtype == np.float64 and t["f"].tolist() == [0.5, 1.5] * 3
    assert t["mixed"].dtype == np.int64 and t["mixed"].tolist() == [7] * N  # was two values, ' 7' and '7'
    assert t["tab"].tolist() == [3] * N
    assert t["padded"].tolist() == [" 007 "] * N  # zero-padded: text, as written
    assert t["text"].tolist() == [" cat "] * N  # text keeps its spaces
    rc, _, err = run_cli(["add-properties", h5, table])
    assert rc == 0, err
    with h5py.File(h5, "r") as f:
        assert f["properties/i"].dtype == np.int64


# ----------------------------------------------------------------------------- 4. a read-only file


@pytest.mark.parametrize("force", [False, True])
def test_a_read_only_file_is_not_updated(tmp_path, force):
    h5 = _h5(tmp_path / "e.h5")
    table = _csv(tmp_path / "t.csv", "path,old,w", [f"{i},{i % 2}" for i in range(N)])
    before = h5.read_bytes()
    os.chmod(h5, 0o444)
    try:
        rc, out, err = run_cli(["add-properties", h5, table, *(["--force"] if force else [])])
        assert rc == 1 and out == ""
        assert one_error_line(err, "add-properties").endswith(
            "e.h5: the file is read-only (no write permission): add-properties rewrites it; make it writable "
            "first (chmod u+w) to add properties to it")
        assert h5.read_bytes() == before and (h5.stat().st_mode & 0o777) == 0o444
        assert sorted(os.listdir(tmp_path)) == ["e.h5", "t.csv"]  # no temporary left
    finally:
        os.chmod(h5, 0o644)
    rc, _, err = run_cli(["add-properties", h5, table, "--force"])  # writable again: updated
    assert rc == 0, err
    assert _props(h5) == ["old", "w"]


# ----------------------------------------------------------------------------- 5. another tool's long names


def test_the_properties_table_shortens_another_tools_long_names(tmp_path):
    import pandas as pd

    h5 = _h5(tmp_path / "e.h5")
    long_a, long_b = "w" * 70_000 + "a", "w" * 70_000 + "b" + "w" * 30  # (alike at both ends but for one letter)
    with h5py.File(h5, "r+") as f:  # (add-properties refuses such names; another tool wrote them)
        f["properties"].create_dataset(long_a, data=np.array([0, 1] * 3))
        f["properties"].create_dataset(long_b, data=np.zeros(N, dtype=np.int64))  # undefined: one value
    rc, out, err = run_cli(["properties", h5, "--no-progress", "--split", "all", "--csv", tmp_path / "p.csv"])
    assert rc == 0, err
    assert max(len(line) for line in out.splitlines()) < 1000  # (was 70,000 and more)
    rows = [line for line in out.splitlines() if line.startswith("e ") and "…" in line]
    assert len(rows) == 2 and rows[0].split()[1] != rows[1].split()[1]  # two names, shown apart
    undefined = [line for line in out.splitlines() if line.startswith("undefined (–): ")]
    assert len(undefined) == 1 and "…" in undefined[0]
    assert {long_a, long_b} <= set(pd.read_csv(tmp_path / "p.csv", keep_default_na=False)["property"])  # kept whole


@pytest.mark.parametrize("extra", ["x" * 70_000, "dup"])
def test_a_very_long_path_cell_is_shortened_in_the_message(tmp_path, extra):
    h5 = _h5(tmp_path / "e.h5")
    long = "y" * 70_000 + "/end.jpg"
    rows = [*(f"{p},{i % 2}" for i, p in enumerate(PATHS)), f"{long},1"]
    if extra == "dup":
        rows.append(f"{long},0")
    t = tmp_path / "t.csv"
    t.write_text("path,w\n" + "\n".join(rows) + "\n")
    rc, _, err = run_cli(["add-properties", h5, t])
    line = one_error_line(err, "add-properties")
    assert rc == 1 and len(line) < 500  # (was 70,000 characters and more)
    assert ("duplicate path(s)" if extra == "dup" else "match no image of the file") in line
    assert line.endswith("/end.jpg")  # the file name kept in view


def test_a_very_long_infinite_cell_is_shortened_in_the_message(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    table = _csv(tmp_path / "t.csv", "path,w", ["0.5", "1" + "0" * 70_000 + ".5", "1", "2", "3", "4"])
    rc, _, err = run_cli(["add-properties", h5, table])
    line = one_error_line(err, "add-properties")
    assert rc == 1 and "not finite (first: '1000" in line and len(line) < 400


def test_a_file_of_several_names_is_noted(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    os.link(h5, tmp_path / "same.h5")
    table = _csv(tmp_path / "t.csv", "path,w", ["0", "1"] * 3)
    rc, out, err = run_cli(["add-properties", h5, table])
    assert rc == 0, err
    # (the other name silently kept the old file)
    assert ("e.h5 had 2 names (hard links): the update wrote a new file under this name, the other name still "
            "names the old one, without these properties") in out
    assert _props(h5) == ["old", "w"] and _props(tmp_path / "same.h5") == ["old"]
    rc, out, err = run_cli(["add-properties", h5, _csv(tmp_path / "u.csv", "path,u", ["0", "1"] * 3)])
    assert rc == 0 and "hard links" not in out  # (one name now)


def test_a_long_parquet_column_name_and_spaced_integers_on_import(tmp_path):
    import pandas as pd

    h5 = _h5(tmp_path / "e.h5")
    pd.DataFrame({"path": PATHS, "q" * 300: [0, 1] * 3}).to_parquet(tmp_path / "t.parquet")
    rc, _, err = run_cli(["add-properties", h5, tmp_path / "t.parquet"])
    assert rc == 1 and "is 300 characters long: a property name is at most 255" in one_error_line(err, "add-properties")
    # import --properties reads a CSV's spaced integers as add-properties does
    df = pd.DataFrame({"label": [0, 1] * 3, "w": [" 7 ", "7", "8 ", " 8", "7", "8"], "d0": np.arange(6.0)})
    df.to_csv(tmp_path / "i.csv", index=False)
    es = import_embeddings(tmp_path / "i.csv", properties=["w"], embeddings="d*")
    assert es.properties["w"].dtype == np.int64 and es.properties["w"].tolist() == [7, 7, 8, 8, 7, 8]
