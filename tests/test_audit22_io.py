"""Audit 22 (import, info, neighbours, report): fixes, each with the input that showed the bug.

1. a pandas-written Parquet table with a named index (``df.set_index("path").to_parquet()``) lost
   that column: pandas reads it back as the index, so the paths became 0, 1, ... without a word
   (the same frame written with ``to_csv`` kept them).
2. a ``.txt`` of labels or split values saved with a byte-order mark (Windows editors) read its
   first value as "\\ufeff0": a class of its own (5 classes for 4), or an unknown split value.
3. a split value with spaces around it (``" test"``, kept as written) was named in the error
   without quotes, so the reason it was unknown could not be seen.
4. a CSV with a header line and no rows said "no numeric columns left for the embeddings".
5. ``neighbours`` drew a path ``digits/-1`` as the last digit (numpy's negative index) instead of
   refusing it.
6. ``neighbours`` on an imported file whose source is named ``digits.*`` took its photos for the
   built-in digits (an imported file's ``dataset`` is its source's name) and refused ``--root``.
7. a ``--class-names`` file with fewer names than the integer labels need was reported against the
   embeddings file ("X.npy: embedding set: labels must lie in [0, 3) to index class_names"), not the
   names' file (docs/import.md: errors about such a file name it).
"""

import numpy as np
import pandas as pd
import pytest
from test_import_audit_fixes import _error  # one line on stderr, no traceback, the exit code

from embedscope import store
from embedscope.cli import main
from embedscope.errors import EmbedscopeError
from embedscope.importers import import_embeddings


def _frame(n=12, d=3):
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(n, d)).astype(np.float32), columns=[f"d{j}" for j in range(d)])
    df["label"] = np.arange(n) % 3
    return df


def test_parquet_named_index_is_read_as_a_column_as_csv_writes_it(tmp_path):
    df = _frame()
    df.index = pd.Index([f"img/{i}, ü.jpg" for i in range(len(df))], name="path")
    df.to_parquet(tmp_path / "t.parquet")
    df.to_csv(tmp_path / "t.csv")
    a = import_embeddings(tmp_path / "t.parquet")
    b = import_embeddings(tmp_path / "t.csv")
    assert list(a.paths) == list(df.index) == list(b.paths)
    np.testing.assert_array_equal(a.embeddings, df[["d0", "d1", "d2"]].to_numpy())
    assert a.attrs["import_embedding_columns"] == ["d0", "d1", "d2"]
    # an index holding the labels is found by name too
    df2 = _frame().set_index("label")
    df2.to_parquet(tmp_path / "l.parquet")
    np.testing.assert_array_equal(import_embeddings(tmp_path / "l.parquet").labels, np.arange(12) % 3)


def test_parquet_default_index_is_no_column_and_a_one_column_file_stays_one(tmp_path):
    df = _frame()
    df.iloc[::2].to_parquet(tmp_path / "f.parquet")  # a RangeIndex 0, 2, 4, ...: stored as metadata, not a column
    es = import_embeddings(tmp_path / "f.parquet")
    assert es.attrs["import_embedding_columns"] == ["d0", "d1", "d2"]
    # a labels file of one column beside a named index is still a one-column file
    np.save(tmp_path / "X.npy", df[["d0", "d1", "d2"]].to_numpy())
    lab = pd.Series(np.arange(12) % 3, name="label", index=pd.Index([f"p{i}" for i in range(12)], name="path"))
    lab.to_frame().to_parquet(tmp_path / "y.parquet")
    es = import_embeddings(tmp_path / "X.npy", labels=str(tmp_path / "y.parquet"))
    np.testing.assert_array_equal(es.labels, np.arange(12) % 3)


def test_txt_with_a_byte_order_mark(tmp_path, capsys):
    np.save(tmp_path / "X.npy", _frame()[["d0", "d1", "d2"]].to_numpy())
    (tmp_path / "y.txt").write_text("\n".join(str(i % 3) for i in range(12)) + "\n", encoding="utf-8-sig")
    (tmp_path / "s.txt").write_text("\n".join(["train", "test"] * 6) + "\n", encoding="utf-8-sig")
    out = tmp_path / "o.h5"
    assert main(["import", str(tmp_path / "X.npy"), "--labels", str(tmp_path / "y.txt"),
                 "--split", str(tmp_path / "s.txt"), "-o", str(out)]) == 0
    es = store.load(out)
    assert list(es.class_names) == ["0", "1", "2"]
    np.testing.assert_array_equal(es.labels, np.arange(12) % 3)
    assert list(es.split) == ["train", "test"] * 6


def test_split_values_with_spaces_are_quoted_in_the_error(tmp_path, capsys):
    df = _frame(4)
    df["split"] = ["train", " tst", "test", "train"]
    df.to_csv(tmp_path / "t.csv", index=False)
    err = _error(capsys, ["import", str(tmp_path / "t.csv"), "-o", str(tmp_path / "o.h5")])
    assert "unknown split value(s) ' tst' (allowed:" in err


def test_split_values_are_read_without_case_and_spaces(tmp_path, capsys):
    """'Train', ' test', 'GALLERY ' are the splits they spell (a note says so); 'dev' stays an error."""
    df = _frame(4)
    df["split"] = ["Train", " test", "TEST", "train"]
    df.to_csv(tmp_path / "t.csv", index=False)
    assert main(["import", str(tmp_path / "t.csv"), "-o", str(tmp_path / "o.h5")]) == 0
    assert list(store.load(tmp_path / "o.h5").split) == ["train", "test", "test", "train"]
    out = capsys.readouterr().out
    assert "split: ' test', 'TEST', 'Train' read as test, train (case and spaces ignored)" in out


def test_a_csv_with_a_header_and_no_rows(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("d0,d1,label\n")
    err = _error(capsys, ["import", str(tmp_path / "t.csv"), "-o", str(tmp_path / "o.h5")])
    assert err.endswith("t.csv: the table has no rows (its first line is read as the column names)")
    assert not (tmp_path / "o.h5").exists()
    # a one-column labels CSV of one value (read as the header, then as a value) still works
    np.save(tmp_path / "X.npy", np.ones((1, 2), np.float32))
    (tmp_path / "y.csv").write_text("7\n")
    assert import_embeddings(tmp_path / "X.npy", labels=str(tmp_path / "y.csv")).class_names.tolist() == ["7"]


def test_negative_digits_ids_are_refused():
    from embedscope.data.thumbnails import load_thumbnails

    assert len(load_thumbnails(["digits/0000", "digits/1796"], dataset="digits", root=None)) == 2
    for bad in ("digits/-1", "digits/1797"):
        with pytest.raises(EmbedscopeError, match="is not a digits item id"):
            load_thumbnails([bad], dataset="digits", root=None)


def test_an_imported_file_named_digits_reads_its_photos_from_root(tmp_path, capsys):
    from PIL import Image

    (tmp_path / "img").mkdir()
    rng = np.random.default_rng(0)
    for i in range(12):
        Image.fromarray((rng.random((10, 10, 3)) * 255).astype(np.uint8)).save(tmp_path / "img" / f"{i}.png")
    np.save(tmp_path / "digits.npy", _frame()[["d0", "d1", "d2"]].to_numpy())
    np.save(tmp_path / "y.npy", np.arange(12) % 3)
    (tmp_path / "p.txt").write_text("\n".join(f"img/{i}.png" for i in range(12)) + "\n")
    h5 = tmp_path / "d.h5"
    assert main(["import", str(tmp_path / "digits.npy"), "--labels", str(tmp_path / "y.npy"), "--paths",
                 str(tmp_path / "p.txt"), "-o", str(h5)]) == 0
    assert store.load(h5).attrs["dataset"] == "digits"
    capsys.readouterr()
    assert main(["neighbours", str(h5), "--root", str(tmp_path), "--queries", "2", "--n-retrievals", "2",
                 "--no-progress", "-o", str(tmp_path / "n.png")]) == 0
    assert (tmp_path / "n.png").stat().st_size > 0
    # without --root: the usage error asking for it, not "img/0.png is not a digits item id"
    err = _error(capsys, ["neighbours", str(h5), "--no-progress", "-o", str(tmp_path / "m.png")], rc=2)
    assert "give --root DIR" in err
    # in Python as well
    from embedscope.analyses import neighbours_figure

    png, _, _ = neighbours_figure(str(h5), tmp_path / "py.png", queries=2, k=2, root=str(tmp_path))
    assert png.exists()


def test_too_few_class_names_name_the_names_file(tmp_path, capsys):
    np.save(tmp_path / "X.npy", _frame()[["d0", "d1", "d2"]].to_numpy())
    np.save(tmp_path / "y.npy", np.arange(12) % 3)
    (tmp_path / "cn.txt").write_text("a\nb\n")
    err = _error(capsys, ["import", str(tmp_path / "X.npy"), "--labels", str(tmp_path / "y.npy"), "--class-names",
                          str(tmp_path / "cn.txt"), "-o", str(tmp_path / "o.h5")])
    assert err == (f"embedscope import: error: {tmp_path / 'cn.txt'}: 2 class names, but the integer labels "
                   "(indices into them) run from 0 to 2")
    (tmp_path / "cn.txt").write_text("a\nb\nc\n")
    assert main(["import", str(tmp_path / "X.npy"), "--labels", str(tmp_path / "y.npy"), "--class-names",
                 str(tmp_path / "cn.txt"), "-o", str(tmp_path / "o.h5")]) == 0


def test_report_runs_table_shows_the_users_tags_that_vary(tmp_path):
    """A YAML study's own tags (``note``, ``lr_tag``, ...) were in runs.csv only: the report's runs
    table shows each tag whose value differs between runs, escaped; a tag equal everywhere is not a column."""
    html5lib = pytest.importorskip("html5lib")
    from test_audit_report import _doc, _rows, _study, _table

    from embedscope.study.report import build_report

    rows = _rows(["a", "b"])
    for k, r in enumerate(rows):
        r["tag:note"] = "<b>warm</b>" if k % 2 else "cold & dry"
        r["tag:site"] = "lab"  # the same everywhere
    text = build_report(_study(tmp_path, rows))
    parser = html5lib.HTMLParser(strict=True)
    parser.parse(text)
    assert not parser.errors and "<b>warm</b>" not in text
    head, runs, _ = _table(_doc(text), "Runs")
    assert "note" in head and "site" not in head
    assert head.index("note") == head.index("objective") + 1
    assert sorted({r[head.index("note")] for r in runs}) == ["<b>warm</b>", "cold & dry"]
