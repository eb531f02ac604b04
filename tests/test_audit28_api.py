"""The Python API as a notebook user meets it (audit 28, helper H): arguments a user passes as they
come (numpy arrays, generators, text numbers, progress=True), one documented error for a wrong one,
results shown with their command's decimals, and every module one attribute away after a bare
``import embedscope``."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

from embedscope import analyses as A
from embedscope.errors import EmbedscopeError, MissingKey, UsageError
from embedscope.store import EmbeddingSet

RNG = np.random.default_rng(28)


def _set(n=40, d=6, classes=4, name=None):
    X = RNG.normal(size=(n, d)).astype(np.float32)
    y = np.arange(n) % classes
    split = np.where(np.arange(n) < n // 2, "train", "test")
    attrs = {"source_file": name} if name else None
    return EmbeddingSet.from_arrays(X, y, split=split, paths=[f"img/{i:03d}" for i in range(n)], attrs=attrs)


@pytest.fixture(scope="module")
def es():
    return _set()


# ------------------------------------------------------------------ arguments as a user passes them
def test_query_paths_as_array_generator_tuple_or_path_objects_give_the_list_answer(es):
    """paths=np.array(...) raised numpy's 'truth value of an array ... is ambiguous'; a generator
    was consumed by the first look at it and failed with "Q needs at least 1 row(s)"."""
    want = ["img/025", "img/021", "img/030"]
    ref = A.neighbour_examples(es, paths=want, k=3)
    for given in (np.array(want), (p for p in want), tuple(want), [pathlib.PurePosixPath(p) for p in want],
                  np.array(want, dtype=object)):
        got = A.neighbour_examples(es, paths=given, k=3)
        assert got.query_paths.tolist() == want
        assert np.array_equal(got.ref_paths, ref.ref_paths) and np.array_equal(got.similarity, ref.similarity)
    with pytest.raises(UsageError, match=r"^give at least one query path \(paths is empty\)$"):
        A.neighbour_examples(es, paths=np.array([], dtype=str))
    with pytest.raises(EmbedscopeError, match=r"^query paths must be strings \(the file's paths\), got 25$"):
        A.neighbour_examples(es, paths=[25])
    with pytest.raises(EmbedscopeError, match=r"^paths must be a list of query paths, got int$"):
        A.neighbour_examples(es, paths=3)


def test_tsne_perplexity_given_as_text_is_the_number():
    """check_number took "30" but the analysis kept the string: tsne(perplexity="30") failed with
    "'>' not supported between instances of 'str' and 'int'" inside openTSNE."""
    from embedscope.analyses.maps import _check_tsne_settings

    assert _check_tsne_settings("30", 0, 10, 1, None) == (30.0, 0, 10, 1, None)
    assert isinstance(_check_tsne_settings(np.float32(5), 0, 10, 1, None)[0], float)
    with pytest.raises(EmbedscopeError, match=r"^perplexity must be a number, got 'many'$"):
        _check_tsne_settings("many", 0, 10, 1, None)


def test_spectrum_takes_progress_true_as_every_other_analysis():
    """spectrum(..., progress=True) failed with "'bool' object is not callable"."""
    a, b = _set(name="a.h5"), _set(name="b.h5")
    ref = A.spectrum([a, b])
    assert A.spectrum([a, b], progress=True) == ref and A.spectrum([a, b], progress=False) == ref
    calls = []
    assert A.spectrum([a, b], progress=lambda i, n: calls.append((i, n))) == ref and calls == [(1, 2), (2, 2)]
    with pytest.raises(EmbedscopeError, match=r"^progress must be True, False or a callable progress\(i, n\), got int$"):
        A.spectrum([a, b], progress=3)


def test_names_of_a_wrong_type_are_one_line(es):
    """names=3 failed with "'int' object is not iterable"; names=[1, 2] made models 1 and 2 (ints)."""
    with pytest.raises(UsageError, match=r"^names must be a list of names, one per file, got int$"):
        A.evaluate_many([es, es], names=3)
    with pytest.raises(UsageError, match=r"^names must be strings, got 1$"):
        A.evaluate_many([es, es], names=[1, 2])
    assert A.evaluate_many([es, es], names=np.array(["x", "y"]), include="R@1", ks=1).models == ["x", "y"]


def test_evaluate_refuses_split_none_as_the_other_analyses(es):
    """split=None evaluated every row (train and test together) under the title 'None queries'."""
    for fn in (A.evaluate, A.geometry, A.scatter):
        with pytest.raises(EmbedscopeError, match=r"^split must be one of .*, got None$"):
            fn(es, split=None)


# ------------------------------------------------------------------------------- results and errors
def test_combining_results_of_two_analyses_says_so(es):
    """It said "model names must differ" (both results are of one file)."""
    with pytest.raises(EmbedscopeError, match=r"^results of different analyses cannot be combined, got "
                                              r"evaluate, geometry$"):
        A.combine([A.evaluate(es, include="R@1", ks=1), A.geometry(es)])


def test_an_unknown_measure_of_the_registry_is_one_line_and_still_a_key_error():
    with pytest.raises(MissingKey, match=r"^unknown measure 'R@3' \(known: rho, .*NR-Prec:<name>\)$") as e:
        A.MEASURES["R@3"]  # noqa: B018
    assert isinstance(e.value, KeyError) and isinstance(e.value, EmbedscopeError)
    assert A.MEASURES.get("R@3") is None and A.MEASURES["NR-Prec:ink"].family == "properties"


def test_result_values_must_be_a_mapping():
    with pytest.raises(EmbedscopeError, match=r"^result values must be a mapping of measure names to numbers, "
                                              r"got list$"):
        A.Result("x", [1, 2])


def test_a_per_row_frame_of_a_result_without_one_is_refused_as_its_csv(es):
    """to_frame(table=True) of a result without a per-row table gave an empty frame (a ResultSet's:
    one column 'model' and no rows), where to_csv(table=True) refuses in one line."""
    g = A.geometry(es)
    for r in (g, A.combine([g])):
        with pytest.raises(EmbedscopeError, match=r"^the geometry result has no per-row table to write"):
            r.to_frame(table=True)
    rs = A.evaluate_many([es, es], names=["a", "b"], per_class=True, include=["R@1"], ks=1)
    frame = rs.to_frame(table=True)
    assert list(frame.columns[:2]) == ["model", "class"] and frame["model"].tolist() == ["a"] * 4 + ["b"] * 4


def test_the_notebook_display_has_the_decimals_of_the_command(es):
    """geometry and spectrum print 5 decimals (docs/architecture.md); their notebook display, which is
    documented as that terminal table, showed 4."""
    g = A.geometry(es)
    assert f"{g['rho']:.5f}" in g.format() and f"{g['rho']:.5f}" in str(g)
    assert f"{g['rho']:.4f}" in g.format(digits=4)
    s = A.spectrum([_set(name="a.h5"), _set(name="b.h5")])
    assert f"{s[0]['rho']:.5f}" in s.format() and f"{s[1]['rho']:.5f}" in s.format()
    e = A.evaluate(es, include="R@1", ks=1)
    assert f"{e['R@1']:.4f}" in e.format() and f"{e['R@1']:.5f}" not in e.format()
    pretty = pytest.importorskip("IPython.lib.pretty")
    # (then the lines the command prints under its table, as docs/architecture.md says: geometry's note)
    assert pretty.pretty(g).startswith(g.format()) and pretty.pretty(s).startswith(s.format())
    assert pretty.pretty(g) == str(g) and "uniformity from" in pretty.pretty(g)


# ------------------------------------------------------------------------------------- discoverability
def test_every_module_is_one_attribute_away_after_a_bare_import():
    """embedscope.synthetic, embedscope.train.trainer, embedscope.analyses.registry ... were an
    AttributeError after `import embedscope` until imported by name (docs/architecture.md names them so)."""
    code = (
        "import sys, embedscope\n"
        "assert callable(embedscope.synthetic.embedding_set)\n"
        "assert callable(embedscope.analyses.registry.register)\n"
        "assert callable(embedscope.metrics.search.relevant_ranks)\n"
        "assert embedscope.train.__name__ == 'embedscope.train' and embedscope.tsne.__name__ == 'embedscope.tsne'\n"
        "assert {'synthetic', 'train', 'study', 'data'} <= set(dir(embedscope))\n"
        "for bad in ('cli', 'nope', '_x'):\n"
        "    try:\n"
        "        getattr(embedscope, bad)\n"
        "    except AttributeError as e:\n"
        "        assert str(e) == f\"module 'embedscope' has no attribute '{bad}'\", e\n"
        "    else:\n"
        "        raise AssertionError(bad)\n"
        "try:\n"
        "    embedscope.analyses.nope\n"
        "except AttributeError as e:\n"
        "    assert str(e) == \"module 'embedscope.analyses' has no attribute 'nope'\", e\n"
        "assert 'embedscope.cli' not in sys.modules and 'torch' not in sys.modules\n"
        "assert 'matplotlib' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_neighbour_examples_compare_show_in_one_line_and_give_a_frame(es):
    """== raised numpy's "truth value of an array ... is ambiguous" (the dataclass's own ==), the repr
    printed every array over several lines, and there was no table (every other question has one)."""
    ex = A.neighbour_examples(es, queries=3, k=2, seed=1)
    assert ex == A.neighbour_examples(es, queries=3, k=2, seed=1)
    assert ex != A.neighbour_examples(es, queries=3, k=2, seed=2) and ex != "x"
    line = repr(ex)
    hits = int(ex.correct.sum())
    assert line == (f"NeighbourExamples(3 queries of 'test', top-2 in 'test', cosine: {hits} of 6 retrievals of the "
                    "query's class; '3 random queries, seed 1')")
    frame = ex.to_frame()
    assert list(frame.columns) == ["query", "query_class", "rank", "path", "class", "similarity", "correct"]
    assert frame["query"].tolist() == np.repeat(ex.query_paths, 2).tolist()
    assert frame["rank"].tolist() == [1, 2] * 3 and frame["path"].tolist() == ex.ref_paths.ravel().tolist()
    assert frame["similarity"].tolist() == ex.similarity.ravel().tolist()
    assert frame["correct"].tolist() == (frame["class"] == frame["query_class"]).tolist() == ex.correct.ravel().tolist()
    text = ex.format()
    assert text.splitlines()[0] == "3 random queries, seed 1: top-2 of the 'test' queries in 'test', cosine"
    assert len(text.splitlines()) == 3 + 6 and str(ex) == text
    pretty = pytest.importorskip("IPython.lib.pretty")
    assert pretty.pretty(ex) == text


def test_arrays_in_a_list_say_to_give_a_tuple(es):
    """[X, y] said only "expected an EmbeddingSet, a path to an embedding file or (X, y), got list"."""
    X, y = es.embeddings, es.labels
    with pytest.raises(EmbedscopeError, match=r"^give the embeddings and their labels as a tuple \(X, y\), got a "
                                              r"list \[X, y\]$"):
        A.evaluate([X, y])
    with pytest.raises(EmbedscopeError, match=r"got list$"):
        A.evaluate([X])
    assert A.evaluate((X, y), include="R@1", ks=1) == A.evaluate((X.tolist(), y.tolist()), include="R@1", ks=1)
