"""Audit 44 (B): a CSV/TSV column of list texts as the embedding.

What was wrong before: a table written by ``DataFrame.to_csv`` from a column of lists holds one list text
per cell (``"[0.1, 0.2, 0.3]"``); ``embedscope import`` read it as text: found by its name (``embedding``) or
named by ``--embeddings`` it was refused as "holds text, not numbers", and under another name the import
stopped with "no numeric columns left" without a word about it. Such a column (named by ``--embeddings`` or
found by its name, as a Parquet list column is) is now parsed strictly (no eval: a cell must be a list of
numbers as a whole) into an N x D float64 array, then stored as float32 as the other columns are; bad cells
are one line naming the column and the first bad row (docs/import.md).
"""

from __future__ import annotations

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.importers import import_embeddings


def _csv(tmp_path, rows, name="embedding", sep=",", fname="t.csv"):
    """A table of a label and a list-text column per row, written as to_csv writes it (quoted where needed)."""
    import csv

    p = tmp_path / fname
    with open(p, "w", newline="") as f:
        w = csv.writer(f, delimiter=sep)
        w.writerow(["label", name])
        for i, cell in enumerate(rows):
            w.writerow([i % 2, cell])
    return p


def test_a_column_of_list_texts_is_the_embedding_exactly(tmp_path):
    import pandas as pd

    rng = np.random.default_rng(0)
    X = rng.standard_normal((6, 3)) * 10.0 ** rng.integers(-30, 30, size=(6, 3))
    X[0, 0], X[1, 1] = 1 / 3, 2.0 ** -100  # (shortest repr: 17 digits; a tiny one)
    df = pd.DataFrame({"label": np.arange(6) % 3, "embedding": [r.tolist() for r in X]})
    df.to_csv(tmp_path / "a.csv")  # with pandas' row index: cells "[0.333..., -1.2e-05, ...]"
    notes: list[str] = []
    es = import_embeddings(tmp_path / "a.csv", notes=notes)  # found by its name
    assert es.embeddings.dtype == np.float32 and es.embeddings.shape == (6, 3)
    # as the importer stores float64 columns: the text parsed exactly as float64, rounded to float32
    assert np.array_equal(es.embeddings, X.astype(np.float32))
    assert es.attrs["import_embedding_key"] == "embedding"
    assert notes[0].startswith("embeddings: column 'embedding' (3 dimensions)")
    # the same numbers one column each: the same stored values
    pd.DataFrame(X, columns=["d0", "d1", "d2"]).assign(label=np.arange(6) % 3).to_csv(tmp_path / "c.csv",
                                                                                       index=False)
    assert np.array_equal(import_embeddings(tmp_path / "c.csv").embeddings, es.embeddings)


def test_named_by_embeddings_json_and_python_spellings_and_tsv(tmp_path):
    cells = ["[1, 2.5, -3e-2]", " [ +4 ,.5,6. ] ", "[-0.0,1E2,7]", "[0.1,0.2,0.3]"]
    want = np.array([[1, 2.5, -3e-2], [4, .5, 6.], [-0.0, 1e2, 7], [0.1, 0.2, 0.3]]).astype(np.float32)
    for sep, fname in ((",", "t.csv"), ("\t", "t.tsv")):
        p = _csv(tmp_path, cells, name="vec", sep=sep, fname=fname)
        es = import_embeddings(p, embeddings="vec")
        assert np.array_equal(es.embeddings, want)
        assert np.signbit(es.embeddings[2, 0])  # -0.0 kept
    # a Parquet column of such texts (a CSV read by pandas and written again)
    import pandas as pd

    pd.DataFrame({"label": [0, 1, 0, 1], "vec": cells}).to_parquet(tmp_path / "t.parquet")
    assert np.array_equal(import_embeddings(tmp_path / "t.parquet", embeddings="vec").embeddings, want)
    # a D = 1 list
    es = import_embeddings(_csv(tmp_path, ["[1]", "[2]", "[3]", "[4]"], name="vec"), embeddings="vec")
    assert es.embeddings.shape == (4, 1)


@pytest.mark.parametrize("cells, said", [
    (["[1, 2]", "[3, 4]", "[5]", "[6, 7, 8]"], "column 'embedding', row 2: a list of 1 numbers, but row 0's has 2"),
    (["[1, 2]", "[3, abc]", "[5, 6]"], "column 'embedding', row 1: item 1 of '[3, abc]' is 'abc', not a number"),
    (["[1, 2]", "[3, 4]", "[NaN, 6]"], "column 'embedding', row 2: number 0 is 'NaN': the embeddings must be finite"),
    (["[1, 2]", "[3, -inf]"], "column 'embedding', row 1: number 1 is '-inf'"),
    (["[1, 2]", "[3, 1e999]"], "column 'embedding', row 1: number 1, '1e999', is beyond float64's range"),
    (["[1, 2]", "[]", "[3, 4]"], "column 'embedding', row 1: an empty list []"),
    (["[1, 2]", "[3, 4]", ""], "column 'embedding': row 2 is empty"),
    (["[1, 2]", "[[3, 4]]"], "column 'embedding', row 1: item 0 of '[[3, 4]]' is '[3', not a number"),
    (["[1, 2]", "[3, 4,]"], "column 'embedding', row 1: item 2 of '[3, 4,]' is an empty item"),
    (["[1, 2]", "[1_000, 2]"], "row 1: item 0 of '[1_000, 2]' is '1_000', not a number"),  # (float() reads it)
    (["[1, 2]", "[\u0661, 2]"], "row 1: item 0"),  # an Arabic-Indic digit (float() reads it)
    (["[1, 2]", "[True, 2]"], "row 1: item 0 of '[True, 2]' is 'True', not a number"),
    (["[1, 2]", "(3, 4)"], "row 1: '(3, 4)' is not a list of numbers"),
    (["[1, 2]", "__import__('os')"], "row 1: '__import__('os')' is not a list of numbers"),
    (["[ 0.12573022 -0.1321  0.64]", "[1 2 3]"], "row 0: '[ 0.12573022 -0.1321  0.64]' is numpy's print of an array"),
    (["[ 0.1 0.2 ... 0.9]", "[1 2 3]"], "numpy's print of an array"),
    (["[np.float64(0.5), np.float64(1.0)]"], "row 0: '[np.float64(0.5), np.float64(1.0)]' holds numpy scalars"),
])
def test_bad_list_cells_are_one_line_naming_the_column_and_row(tmp_path, cells, said):
    p = _csv(tmp_path, cells)
    with pytest.raises(EmbedscopeError) as e:
        import_embeddings(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: ") and said in msg and "\n" not in msg


def test_a_list_column_under_another_name_is_named_in_the_error_and_the_note(tmp_path):
    import pandas as pd

    p = _csv(tmp_path, ["[1, 2]", "[3, 4]", "[5, 6]", "[7, 8]"], name="vec")
    with pytest.raises(EmbedscopeError, match=r"no numeric columns left .*; column 'vec' holds lists: "
                                              r"--embeddings vec reads it\)$"):
        import_embeddings(p)
    with pytest.raises(EmbedscopeError, match=r"takes vec too, .* \('vec' holds lists: --embeddings vec reads it"):
        import_embeddings(p, embeddings="v*")
    # beside numeric columns (which form the embedding, as before): the note says how to take it
    pd.DataFrame({"label": [0, 1, 0, 1], "w": [1.5, 2.5, 3.5, 4.5], "my vec": ["[1, 2]"] * 4}).to_csv(
        tmp_path / "n.csv", index=False)
    notes: list[str] = []
    es = import_embeddings(tmp_path / "n.csv", notes=notes)
    assert es.embeddings.shape == (4, 1)
    assert notes[0] == ("embeddings: 1 column w; ignored: my vec; 'my vec' holds lists: --embeddings 'my vec' "
                        "takes it as the embedding")


def test_text_columns_taken_by_name_are_still_refused_as_text(tmp_path):
    """A column of text (no cell a list) keeps its error (tests/test_audit43_wording.py)."""
    (tmp_path / "t.csv").write_text("x,label\na,0\nb,1\nc,0\nd,1\n")
    with pytest.raises(EmbedscopeError, match="column 'x', taken for the embeddings by its name, holds text"):
        import_embeddings(tmp_path / "t.csv")


def test_the_command_shows_a_bad_cell_escaped(tmp_path, capsys):
    from embedscope.cli import main

    p = _csv(tmp_path, ["[1, 2]", "[3, \x1b[2Jx]"])
    assert main(["import", str(p), "-o", str(tmp_path / "o.h5")]) == 1
    err = capsys.readouterr().err
    assert "row 1: item 1 of '[3, \\x1b[2Jx]' is '\\x1b[2Jx', not a number" in err
    assert "\x1b" not in err and err.count("\n") == 1
    assert not (tmp_path / "o.h5").exists()
