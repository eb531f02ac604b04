"""The Python API's result objects as a notebook user meets them (audit 29, helper B): ``print(result)``
and the notebook display show every analysis's main numbers (properties: R-Prec, ceiling, p-value ...;
scatter: the summary per split; tsne / yoke: the settings), bounded, with the notes the command prints;
the files a result writes match the command's; a result or a bare array where embeddings are wanted,
and a text where a bool is wanted, are one clear line."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from embedscope import analyses as A
from embedscope.analyses.neighbours import NeighbourExamples
from embedscope.analyses.result import DISPLAY_CELL, DISPLAY_MODELS, DISPLAY_ROWS, DISPLAY_WIDTH, UNDEFINED
from embedscope.errors import EmbedscopeError, UsageError
from embedscope.store import EmbeddingSet, save
from embedscope.tables import format_number

sys.path.insert(0, str(Path(__file__).parent))
from cli_run import cli_output  # noqa: E402

RNG = np.random.default_rng(29)


def _set(n=40, d=6, classes=4, props=("colour", "size")):
    X = RNG.normal(size=(n, d)).astype(np.float32)
    y = np.arange(n) % classes
    split = np.where(np.arange(n) < n // 2, "train", "test")
    es = EmbeddingSet.from_arrays(X, y, split=split, paths=[f"img/{i:03d}" for i in range(n)])
    for i, p in enumerate(props):
        es.properties[p] = (np.arange(n) * (i + 1)) % (3 + i)
    return es


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Two embedding files of the same images: b has a property a lacks, and one with a single value."""
    d = tmp_path_factory.mktemp("api29")
    a, b = _set(), _set(props=("colour", "size", "flat"))
    b.properties["flat"] = np.zeros(40, dtype=int)
    save(d / "a.h5", a)
    save(d / "b.h5", b)
    return d / "a.h5", d / "b.h5"


@pytest.fixture(scope="module")
def results(files):
    """One result of every kind the analyses return (tiny inputs, t-SNE of 10 iterations)."""
    a, b = files
    return {
        "evaluate": A.evaluate(a, per_class=True),
        "evaluate_many": A.evaluate_many([a, b]),
        "geometry": A.geometry(a),
        "spectrum": A.spectrum([a, b]),
        "scatter": A.scatter(a),
        "properties": A.properties(a),
        "properties_many": A.properties([a, b]),
        "tsne": A.tsne(a, n_iter=10),
        "yoke": A.yoke(a, b, n_iter=10),
        "neighbours": A.neighbour_examples(a, queries=3, k=2),
    }


def _cell(v, digits):
    return UNDEFINED if isinstance(v, float) and math.isnan(v) else format_number(v, digits)


def _line_of(text: str, *first: str) -> list[str]:
    """The cells of the table line whose first cells are ``first``."""
    lines = [ln.split("  ") for ln in text.splitlines()]
    found = [[c.strip() for c in ln if c.strip()] for ln in lines]
    found = [c for c in found if c[:len(first)] == list(first)]
    assert len(found) == 1, (first, text)
    return found[0]


# ------------------------------------------------------------------------------------- what print shows
def test_print_shows_every_value_of_every_result(results):
    """Every result prints (and shows in a notebook) each of its values, with its command's decimals;
    the notebook display is what print shows."""
    pretty = pytest.importorskip("IPython.lib.pretty")
    for kind, r in results.items():
        text = str(r)
        assert pretty.pretty(r) == text, kind
        assert len(text.splitlines()) <= DISPLAY_ROWS + 12, kind
        if isinstance(r, NeighbourExamples):
            for row in r.rows():
                assert format_number(row["similarity"], 4) in text
            continue
        for res in (r.results if isinstance(r, A.ResultSet) else [r]):
            digits = 5 if res.analysis in ("geometry", "spectrum") else 4
            for v in res.values.values():
                assert _cell(v, digits) in text, (kind, v, text)


def test_properties_print_the_commands_table(results, files):
    """print(properties(...)) showed only 'NR-Prec[colour]  0.1301': no R-Prec, ceiling or p-value."""
    r = results["properties"]
    text = str(r)
    assert text.splitlines()[0] == "a: split test; R uncapped (the paper's definition); euclidean distance"
    assert text.splitlines()[1].split() == ["property", "NR-Prec", "R-Prec", "ceiling", "p_value", "n_values",
                                            "lone_queries"]
    for row in r[0].table:
        assert _line_of(text, row["property"]) == [row["property"]] + [
            _cell(row[c], 4) for c in ("NR-Prec", "R-Prec", "ceiling", "p_value", "n_values", "lone_queries")]
    # several files: the command's table (a model column first, the rows by property, then model) and
    # its lines under it: the undefined numbers, a property one file lacks
    many = results["properties_many"]
    assert str(many) + "\n" == cli_output(["properties", *map(str, files), "--no-progress"])
    assert str(many).splitlines()[-2:] == [
        "b: undefined (–): flat (NR-Prec, ceiling, p_value: one value only (every image has it): p = N_v/n' = "
        "20/20 = 1, so sigma = sqrt(R p (1 - p)) = 0 and every z is 0/0)", "a: no property 'flat' in this file (no row)"]
    assert _line_of(str(many), "b", "flat")[2] == UNDEFINED and "nan" in many.format()
    capped = A.properties(files[0], max_r=1000)
    assert str(capped).splitlines()[0] == ("a: split test; R capped at 1000 (no R exceeds it here: the numbers are the "
                                           "uncapped ones); euclidean distance")


def test_scatter_prints_its_summary_per_split(results):
    """print(scatter(...)) listed below_diagonal_train, left_out_train ... one per line, without N and classes."""
    r = results["scatter"]
    text = str(r)
    assert text.splitlines()[1].split() == ["split", "N", "classes", "left_out", "tied", "below_diagonal_R@1",
                                            "below_or_tied"]
    for s in ("train", "test"):
        assert _line_of(text, s) == [s, "20", "4", str(r[f"left_out_{s}"]), str(r[f"tied_{s}"]),
                                     f"{r[f'below_diagonal_{s}']:.4f}", f"{r[f'below_or_tied_{s}']:.4f}"]


def test_maps_print_their_settings_and_a_capped_perplexity(results):
    t, y = results["tsne"], results["yoke"]
    assert _line_of(str(t), "perplexity") == ["perplexity", f"{t.provenance['perplexity']:.4f}"]
    assert _line_of(str(t), "n_iter") == ["n_iter", "10"] and _line_of(str(y), "yoke") == ["yoke", "points"]
    # 20 points: the perplexity 30 asked for is capped at (N - 1)/3, as the commands say
    assert str(t).splitlines()[-1] == "note: perplexity 30 capped at 6.333 for 20 points (at most (N − 1)/3)"
    assert str(y).splitlines()[-1] == str(t).splitlines()[-1]


def test_notes_and_undefined_measures_are_printed_escaped():
    es = EmbeddingSet.from_arrays(RNG.normal(size=(8, 4)), np.arange(8), split=["train"] * 8)
    g = A.geometry(es)
    text = str(g)
    assert _line_of(text, "pi_intra")[1] == UNDEFINED and "nan" in g.format()
    assert text.splitlines()[-1] == ("undefined (–): pi_intra, pi_ratio, alignment (every class has a single sample:"
                                     " no two samples of one class)")
    same = EmbeddingSet.from_arrays(np.ones((6, 3)), [0, 0, 0, 1, 1, 1])
    e = A.evaluate(same, ks=(1,), include=["R@1"])
    assert str(e).splitlines()[-1].startswith("note: every row is the same point (direction), a collapsed model")
    twin = _set(props=())
    twin.properties["kind"] = twin.labels.copy()
    p = A.properties(twin)  # its note as the command prints it (no "note:" there)
    assert str(p).splitlines()[-1] == ("property 'kind' groups the images exactly as the class labels: its numbers "
                                       "are the class's (no 'class' row; ask for 'class' by name to list it too)")
    r = A.Result("x", {"v": 1.0}, provenance={"notes": ["class \x1b[2J"]})
    assert str(r).splitlines()[-1] == "note: class \\x1b[2J" and r.format() == str(r).rsplit("\n", 1)[0]


def test_the_display_is_bounded_and_format_keeps_everything():
    r = A.Result("x", {f"m{i}": i / 7 for i in range(100)})
    shown = str(r).splitlines()
    assert len(shown) == 1 + 2 + DISPLAY_ROWS + 1 and shown[-1] == "… 60 more rows (every one: to_frame())"
    assert shown[-2].split() == [f"m{DISPLAY_ROWS - 1}", f"{(DISPLAY_ROWS - 1) / 7:.4f}"]
    assert len(r.format().splitlines()) == 1 + 2 + 100
    # many models: as many side by side as fit, the rest named in one line
    rs = A.combine([A.Result("x", {"v": float(i)}, model=f"model number {i} with a long name") for i in range(12)])
    text = str(rs).splitlines()
    assert max(map(len, text[:-1])) <= DISPLAY_WIDTH and len(text[0].split("  ")) <= 1 + DISPLAY_MODELS
    n = len([c for c in text[0].split("  ") if c.strip()]) - 1
    assert 1 <= n < 12 and text[-1] == f"… {12 - n} more models (every one: to_frame(); one: results['name'])"
    assert len(rs.format().splitlines()[2].split()) == 13  # format(): every model
    # long paths: shortened in the middle, the file name kept
    long = [f"/data/some/deep/folder/of/images/class_{i}/picture_number_{i:04d}.jpg" for i in range(3)]
    ex = NeighbourExamples(np.array(long[:1]), np.array(["a"]), np.array([long[1:]]), np.array([["a", "b"]]),
                           np.array([[0.5, 0.25]]), np.array([[True, False]]), "test", "test", "cosine")
    assert "picture_number_0001.jpg" in str(ex) and long[1] not in str(ex) and long[1] in ex.format()
    cells = [c for c in str(ex).splitlines()[3].split("  ") if c.strip()]
    assert len(cells[0]) == DISPLAY_CELL and cells[0].endswith("picture_number_0000.jpg") and "…" in cells[0]


def test_the_docs_give_the_bounds_of_the_code():
    text = " ".join((Path(__file__).parents[1] / "docs" / "architecture.md").read_text().split())
    assert (f"(at most {DISPLAY_ROWS} rows and, side by side, as many of at most {DISPLAY_MODELS} models as fit "
            f"{DISPLAY_WIDTH} characters") in text
    assert f"a path or name longer than {DISPLAY_CELL} characters shortened in the middle" in text


# ------------------------------------------------------------------------------------------ the files
def test_properties_rows_are_in_the_order_of_the_commands_csv(results, files, tmp_path):
    """Several files: to_csv(table=True) stacked the models, the command sorts by property then model."""
    cli_output(["properties", *map(str, files), "--no-progress", "--csv", str(tmp_path / "p.csv")])
    results["properties_many"].to_csv(tmp_path / "api.csv", table=True)
    assert (tmp_path / "api.csv").read_text() == (tmp_path / "p.csv").read_text()


def test_neighbour_examples_write_as_every_result(results, tmp_path):
    ex = results["neighbours"]
    ex.to_csv(tmp_path / "n.csv")
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "n.csv", dtype={"query_class": str, "class": str}),
                                  ex.to_frame())
    ex.to_parquet(tmp_path / "n.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "n.parquet"), ex.to_frame())
    doc = ex.to_json(tmp_path / "n.json")
    assert json.loads((tmp_path / "n.json").read_text()) == doc and doc["table"] == ex.rows()
    assert doc["analysis"] == "neighbours" and doc["seed"] == 0 and doc["selection"] == "3 random queries, seed 0"
    with pytest.raises(EmbedscopeError, match="exists"):
        ex.to_csv(tmp_path / "n.csv")


# ------------------------------------------------------------------------------- arguments of a notebook
def test_a_result_or_a_bare_array_where_embeddings_are_wanted_says_what_to_give(results, files):
    a = str(files[0])
    r = results["evaluate"]
    want = f"got Result (the result of evaluate, not embeddings: give the file it was computed from, '{a}' (its "
    for fn in (A.evaluate, A.geometry, A.scatter):
        with pytest.raises(EmbedscopeError, match=r"^expected an EmbeddingSet, .*, got Result \(") as e:
            fn(r)
        assert str(e.value).endswith(want + "provenance['file']))")
    for fn in (A.properties, A.spectrum):
        with pytest.raises(EmbedscopeError, match=r"^expected a list of embedding files, got Result") as e:
            fn(r)
        with pytest.raises(EmbedscopeError, match=r"^expected a list of embedding files, got ResultSet \(the "
                                                  r"result of evaluate, not embeddings: give the files it was "):
            fn(results["evaluate_many"])
    with pytest.raises(EmbedscopeError, match=r", got ndarray \(embeddings without labels: give the tuple \(X, y\)"):
        A.evaluate(np.zeros((4, 2)))
    with pytest.raises(EmbedscopeError, match=r"^properties reads embedding files or EmbeddingSets, got tuple: \(X, y\) "
                                              r"holds no properties; give EmbeddingSet.from_arrays\(X, y, split=\.\.\., "
                                              r"properties=\{name: values\}\)$"):
        A.properties((np.zeros((4, 2)), np.arange(4)))


def test_a_text_where_a_bool_is_wanted_is_refused(files):
    """progress="no" and keep_spectrum="no" are truthy: they drew a bar and kept the spectrum."""
    a = files[0]
    calls = [lambda: A.evaluate(a, progress="no"), lambda: A.scatter(a, progress="no"),
             lambda: A.tsne(a, progress="no"), lambda: A.yoke(a, a, progress="no"),
             lambda: A.properties(a, progress="no"), lambda: A.neighbour_examples(a, progress="no")]
    for call in calls:
        with pytest.raises(EmbedscopeError, match=r"^progress must be True or False, got 'no'$"):
            call()
    with pytest.raises(EmbedscopeError, match=r"^keep_spectrum must be True or False, got 'no'$"):
        A.geometry(a, keep_spectrum="no")


def test_measure_names_from_an_array_are_plain_names(files):
    got = A.compute_measures(files[0], np.array(["R@1", "rho"]))
    assert [type(k) for k in got] == [str, str] and repr(got).startswith("{'R@1': ")


def test_yoke_takes_one_list_as_spectrum_and_properties(results, files):
    a, b = files
    assert A.yoke([a, b], n_iter=10) == results["yoke"]
    for call in (lambda: A.yoke([a]), lambda: A.yoke(a)):
        with pytest.raises(UsageError, match=r"^yoke needs two or more embeddings \(yoke\(a, b, \.\.\.\) or "
                                             r"yoke\(\[a, b, \.\.\.\]\)\), got 1$"):
            call()
