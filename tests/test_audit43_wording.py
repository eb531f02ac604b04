"""Audit 43 (L): one wording per option across the commands, and small display leftovers.

What was wrong before:

1. ``--no-progress`` had five help texts: the shared helper's, ``evaluate``'s "hide progress bars",
   ``train-grid``'s "hide the progress bars", ``saliency``'s and ``spectrum``'s "hide the progress bar".
   (``study``'s "no progress bar, and fewer lines" does something else and stays.)
2. ``saliency --help`` showed ``--train-classes TRAIN_CLASSES`` and ``--batch-size BATCH_SIZE``, and
   ``train`` / ``train-grid`` ``--num-workers NUM_WORKERS``, where the other commands show ``N`` and ``B``.
3. ``print(result)`` of the properties API showed an underflowed p-value as ``0.0000`` where the command shows
   ``< 1e-300``.
4. ``import`` of a table whose text (or true/false) column ``x`` was taken for the embeddings by its name:
   "the embeddings must be a 2-D array (N x D), got shape (4,)" or "does not hold equal-length number lists",
   not saying that the column holds text (true/false values: naming no column); an ``.npz``'s 1-D or text key
   found by its name (``x``) was refused naming no key.
5. ``neighbours`` with one query and one retrieval: "1 of 1 retrievals of the query's class" (the command's line
   and ``repr`` of the examples).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError

SHARED = "hide the progress bars (without a terminal: one line per phase): no progress is shown"
STUDY = "no progress bar, and fewer lines"  # (study: the note lines stay; something else, deliberately)


def _subparsers():
    from embedscope.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices


def _option(p, flag):
    return next((a for a in p._actions if flag in a.option_strings), None)


# ------------------------------------------------------------------ 1. --no-progress: one wording
def test_every_no_progress_help_is_the_shared_wording():
    helps = {name: _option(p, "--no-progress").help for name, p in _subparsers().items()
             if _option(p, "--no-progress") is not None}
    assert {"evaluate", "train-grid", "saliency", "spectrum", "study", "embed"} <= set(helps)
    assert {name: h for name, h in helps.items() if h != (STUDY if name == "study" else SHARED)} == {}


# ------------------------------------------------------------------ 2. N and B, on every command
@pytest.mark.parametrize("flag, metavar", [("--train-classes", "N"), ("--batch-size", "B"),
                                           ("--num-workers", "N"), ("--image-size", "N")])
def test_count_options_show_one_metavar_on_every_command(flag, metavar):
    shown = {name: _option(p, flag).metavar for name, p in _subparsers().items() if _option(p, flag) is not None}
    assert len(shown) >= 2
    assert {name: m for name, m in shown.items() if m != metavar} == {}


# ------------------------------------------------------------------ 3. print(result): p-values as the command
def _properties_result(model, p):
    from embedscope.analyses.result import Result

    rows = [{"property": "big", "NR-Prec": 30.0, "R-Prec": 0.9, "ceiling": 1.0, "p_value": p, "n_values": 2,
             "lone_queries": 0},
            {"property": "small", "NR-Prec": 0.3, "R-Prec": 0.2, "ceiling": 1.0, "p_value": 0.7235, "n_values": 2,
             "lone_queries": 0}]
    return Result("properties", {}, {"split": "test", "cap": "R uncapped", "metric": "cosine"}, rows, model=model)


def test_print_result_shows_an_underflowed_p_value_as_the_command_does():
    from embedscope.analyses.result import combine
    from embedscope.cli.properties import shown_p_values  # (still importable from the command)

    one = _properties_result("a", 0.0)
    for text in (str(one), str(combine([one, _properties_result("b", 5.15e-240)]))):
        big = [line for line in text.splitlines() if "big" in line.split()]
        assert big and not any(re.search(r"(?<![\d.])0\.0000", line) for line in big)
        assert "< 1e-300" in big[0]
        assert "0.7235" in text
    assert "5.15e-240" in str(combine([one, _properties_result("b", 5.15e-240)]))
    assert shown_p_values([{"p_value": 0.0}], ["p_value"], "-")[0][0]["p_value"].strip() == "< 1e-300"
    assert one.table[0]["p_value"] == 0.0  # (the exact value kept)


# ------------------------------------------------------------------ 4. import: a text column named
@pytest.mark.parametrize("body, spec, what", [
    ("x,label\na,0\nb,1\nc,0\nd,1\n", None, "holds text"),
    ("x,label\n1.5,0\n2,1\n3,0\nabc,1\n", None, "holds text"),
    ("x,label\ntrue,0\nfalse,1\ntrue,0\nfalse,1\n", None, "holds true/false values"),
    ("name,f1,label\na,1,0\nb,2,1\nc,3,0\nd,4,1\n", "name", "holds text"),
])
def test_import_a_text_column_taken_for_the_embeddings_is_named(tmp_path, body, spec, what):
    from embedscope.importers import import_embeddings

    (tmp_path / "t.csv").write_text(body)
    with pytest.raises(EmbedscopeError) as e:
        import_embeddings(tmp_path / "t.csv", embeddings=spec)
    msg = str(e.value)
    col = spec or "x"
    assert f"column '{col}'" in msg and what in msg and "not numbers" in msg and "\n" not in msg
    assert ("named by --embeddings" if spec else "by its name") in msg


def test_import_a_list_column_still_forms_the_embeddings(tmp_path):
    import pandas as pd

    from embedscope.importers import import_embeddings

    pd.DataFrame({"x": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], "label": [0, 1, 0, 1]}).to_parquet(
        tmp_path / "l.parquet")
    es = import_embeddings(tmp_path / "l.parquet")
    assert es.embeddings.shape == (4, 2)


@pytest.mark.parametrize("x, said", [(np.arange(4.0), "must be a 2-D array"), (np.array([["a", "b"]] * 4), "must be numbers")])
def test_import_an_npz_key_found_by_its_name_is_named(tmp_path, x, said):
    from embedscope.importers import import_embeddings

    np.savez(tmp_path / "t.npz", x=x, label=np.array([0, 1, 0, 1]))
    with pytest.raises(EmbedscopeError) as e:
        import_embeddings(tmp_path / "t.npz")
    assert "(key 'x')" in str(e.value) and said in str(e.value)


# ------------------------------------------------------------------ 5. neighbours: one retrieval is singular
def test_one_retrieval_is_singular(tmp_path, capsys):
    from embedscope import store
    from embedscope.cli import main
    from embedscope.store import EmbeddingSet

    rng = np.random.default_rng(0)
    y = np.arange(6) % 2
    X = rng.normal(size=(6, 3)) + 3 * np.eye(3)[y]
    store.save(tmp_path / "d.h5", EmbeddingSet.from_arrays(X, y, paths=[f"digits/{i:04d}" for i in range(6)],
                                                           attrs={"dataset": "digits"}))
    rc = main(["neighbours", str(tmp_path / "d.h5"), "--queries", "1", "--n-retrievals", "1", "--no-progress",
               "-o", str(tmp_path / "g.png")])
    out = capsys.readouterr().out
    assert rc == 0 and "of 1 retrieval of the query's class" in out and "retrievals" not in out

    from embedscope.analyses.neighbours import NeighbourExamples

    ex = NeighbourExamples(np.array(["q"]), np.array(["0"]), np.array([["r"]]), np.array([["0"]]),
                           np.array([[0.5]]), np.array([[True]]), "test", "test", "cosine")
    assert "1 of 1 retrieval of" in repr(ex)
