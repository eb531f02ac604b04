"""embedscope as a Python library (audit of the API a script or notebook uses): building sets from
arrays of every kind, saving what float32 cannot hold, one-line errors naming the argument, result
objects (repr, notebook display, equality, pickling) and the lazy top-level names."""

from __future__ import annotations

import inspect
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import embedscope
from embedscope import analyses as A
from embedscope import store
from embedscope.errors import EmbedscopeError
from embedscope.store import EmbeddingSet

ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(7)


def _data(n=60, d=8, classes=4):
    X = RNG.normal(size=(n, d))
    y = np.arange(n) % classes
    return X, y


def _set(n=60, d=8, classes=4, split=None):
    X, y = _data(n, d, classes)
    split = split if split is not None else np.where(np.arange(n) < n // 2, "train", "test")
    return EmbeddingSet.from_arrays(X.astype(np.float32), y, split=split)


# --------------------------------------------------------------------- force wording
def test_refused_overwrite_names_force_for_python_and_the_command_line(tmp_path):
    """store.save and Result.to_json said 'use --force' to a Python caller, whose argument is force=True."""
    es = _set()
    out = tmp_path / "e.h5"
    store.save(out, es)
    with pytest.raises(EmbedscopeError, match=r"already exists \(use --force to replace it; in Python: force=True\)"):
        store.save(out, es)
    store.save(out, es, force=True)  # and force=True does replace it
    r = A.geometry(es)
    r.to_json(tmp_path / "g.json")
    with pytest.raises(EmbedscopeError, match=r"force=True"):
        r.to_json(tmp_path / "g.json")


def test_command_line_refusal_still_says_force(tmp_path, capsys):
    from embedscope.cli import main

    f = tmp_path / "e.h5"
    store.save(f, _set())
    out = tmp_path / "g.json"
    out.write_text("{}")
    assert main(["geometry", str(f), "--json", str(out)]) == 1
    err = capsys.readouterr().err
    assert "already exists (use --force to replace it" in err and len(err.strip().splitlines()) == 1
    assert out.read_text() == "{}"


# ---------------------------------------------------------------- what float32 keeps
def test_save_refuses_integers_that_float32_would_round(tmp_path):
    X = np.array([[2 ** 24 + 1, 3], [5, 7]], dtype=np.int64)
    es = EmbeddingSet.from_arrays(X, [0, 1])
    assert es.embeddings[0, 0] == 2 ** 24 + 1  # exact in memory (float64)
    with pytest.raises(EmbedscopeError, match=r"integers beyond 2\^24 = 16777216 in magnitude \(row 0: 16777217\)"):
        store.save(tmp_path / "big.h5", es)
    assert not (tmp_path / "big.h5").exists()
    # up to 2^24 they are stored exactly; a float32 array is the user's choice to round
    ok = EmbeddingSet.from_arrays(np.array([[2 ** 24, -(2 ** 24)], [1, 0]]), [0, 1])
    assert store.load(store.save(tmp_path / "ok.h5", ok)).embeddings.tolist() == [[2 ** 24, -(2 ** 24)], [1, 0]]
    rounded = EmbeddingSet.from_arrays(X.astype(np.float32), [0, 1])
    assert store.load(store.save(tmp_path / "r.h5", rounded)).embeddings[0, 0] == 2 ** 24


def test_save_refuses_values_float32_cannot_hold(tmp_path):
    X, y = _data()
    X[:, 0] = 1.0  # every row's largest |x| is at least 1: scaled, each leaves float32's range
    for scale, match in ((1e300, r"beyond float32's range \(\|x\| > 3.4e38; first: row 0\)"),
                         (1e-50, r"too small for float32.*row 0")):
        es = EmbeddingSet.from_arrays(X * scale, y)  # analyses in memory are fine at any scale
        with pytest.raises(EmbedscopeError, match=match):
            store.save(tmp_path / "x.h5", es)
        assert not (tmp_path / "x.h5").exists()
    # one bad row is named
    Xb = X.copy()
    Xb[5] = 1e39
    with pytest.raises(EmbedscopeError, match=r"1 embedding row\(s\) .*first: row 5"):
        store.save(tmp_path / "x.h5", EmbeddingSet.from_arrays(Xb, y))


def test_save_rounds_float64_to_the_nearest_float32_and_keeps_float16_exactly(tmp_path):
    X, y = _data()
    back = store.load(store.save(tmp_path / "a.h5", EmbeddingSet.from_arrays(X, y)))
    assert back.embeddings.dtype == np.float32 and back.embeddings.tobytes() == X.astype(np.float32).tobytes()
    X16 = X.astype(np.float16)
    back = store.load(store.save(tmp_path / "b.h5", EmbeddingSet.from_arrays(X16, y)))
    assert np.array_equal(back.embeddings, X16.astype(np.float32))


# ----------------------------------------------------------- sets and maps in memory
@pytest.mark.parametrize("call, match", [
    (lambda X, y: EmbeddingSet.from_arrays(X, y[:-1]), r"labels must be 1-D with 60 entries .*got shape \(59,\)"),
    (lambda X, y: EmbeddingSet.from_arrays(np.vstack([X[:3], [[np.nan] * 8]]), [0, 1, 0, 1]),
     r"1 embedding rows contain NaN or inf \(first: row 3\)"),
    (lambda X, y: EmbeddingSet.from_arrays(X[:3], ["a", None, "b"]), r"labels: row 1 is missing \(None\)"),
    (lambda X, y: EmbeddingSet.from_arrays(X[:3], np.array(["a", np.nan, "b"], dtype=object)),
     r"labels: row 1 is missing \(nan\)"),
    (lambda X, y: EmbeddingSet.from_arrays(X[:2], [0, 1], class_names="ab"), r"class_names must be a list of names"),
    (lambda X, y: EmbeddingSet.from_arrays(X[:2], [0, 1], paths="ab"), r"paths must be a list of names"),
    (lambda X, y: EmbeddingSet.from_arrays(X[:2], [0, 1], paths=["a", None]), r"paths: row 1 is missing"),
    (lambda X, y: EmbeddingSet.from_arrays(np.zeros((0, 8)), []), r"embeddings needs at least 1 row"),
    (lambda X, y: EmbeddingSet(embeddings=X.astype(int), labels=y, paths=y.astype(str), split=["test"] * 60,
                               class_names=list("abcd")), r"from_arrays converts integers"),
    (lambda X, y: store.save("x.h5", X), r"store.save needs an EmbeddingSet"),
    (lambda X, y: store.load(None), r"store.load needs the path of an embedding file"),
])
def test_bad_input_is_one_line_naming_the_argument(call, match):
    X, y = _data()
    with pytest.raises(EmbedscopeError, match=match) as e:
        call(X, y)
    assert "\n" not in str(e.value)


def test_select_checks_its_rows():
    es = _set()
    assert es.select([0, -1]).paths.tolist() == ["0", "59"] and es.select(3).n == 1 and es.select([]).n == 0
    for bad, match in (([1000], r"row index 1000 is out of range for a set of 60 rows"),
                       ([-61], r"row index -61 is out of range"),
                       (np.ones(60), r"boolean mask or integer row indices, got float64"),
                       (np.ones(59, dtype=bool), r"the boolean mask has 59 entries for a set of 60 rows"),
                       ("train", r"boolean mask or integer row indices"),
                       ((es.labels == 1).astype(int), r"select got 60 integers of 0 and 1 for a set of 60 "
                                                      r"rows: a mask stored as integers\? Give it as booleans")):
        with pytest.raises(EmbedscopeError, match=match):
            es.select(bad)
    # indices may repeat (a bootstrap); only n of them, all 0 or 1, read as a lost mask
    assert es.select(np.zeros(59, dtype=int)).n == 59 and es.select(np.r_[np.zeros(59, int), 2]).n == 60
    assert _set().select(np.arange(60)).n == 60


def test_a_missing_split_of_a_set_made_from_arrays_says_how_to_ask():
    X, y = _data()
    with pytest.raises(EmbedscopeError, match=r"the embedding set has no 'train' rows \(splits present: test; "
                                              r"the rows were stored without a split, so every row is 'test': "
                                              r"ask for the split 'test' \(--split test, split='test'\)"):
        A.geometry((X, y))
    assert A.geometry((X, y), split="test")["n"] == 60


def test_embedding_set_repr_equality_and_pickle(tmp_path):
    es = _set()
    es.properties["colour"] = np.array(["red", "blue"] * 30)
    text = repr(es)
    assert text == ("EmbeddingSet(N=60, D=8, dtype=float32, classes=4, split={'train': 30, 'test': 30}, "
                    "properties=['colour'])")
    back = store.load(store.save(tmp_path / "e.h5", es))
    assert repr(back).endswith(f"source={str(tmp_path / 'e.h5')!r})") and back.attrs != es.attrs
    assert back == es and pickle.loads(pickle.dumps(es)) == es
    assert "classes=2 of 4" in repr(es.select(es.labels < 2))
    other = es.select(np.arange(es.n))
    other.labels[0] = 1
    assert other != es and es != es.select(np.arange(1, 60)) and es != "es"
    with pytest.raises(TypeError):
        hash(es)


def test_saliency_maps_repr_equality_select_and_bad_input(tmp_path):
    from embedscope.store import SaliencyMaps, load_maps, save_maps

    maps = RNG.random((4, 5, 5)).astype(np.float16).astype(np.float32)  # as the file keeps them
    sm = SaliencyMaps(maps=maps, paths=list("abcd"), labels=[0, 1, 0, 1], class_names=["x", "y"])
    assert repr(sm) == "SaliencyMaps(name='maps', kind='maps', N=4, map_shape=(5, 5), images=False)"
    back = load_maps(save_maps(tmp_path / "m.h5", sm))
    assert back == sm and back != sm.select([0, 1, 2]) and sm.select([-1]).paths.tolist() == ["d"]
    with pytest.raises(EmbedscopeError, match="force=True"):
        save_maps(tmp_path / "m.h5", sm)
    with pytest.raises(EmbedscopeError, match=r"row index 10 is out of range for a set of 4 rows"):
        sm.select([10])
    with pytest.raises(EmbedscopeError, match="save_maps needs SaliencyMaps, got ndarray"):
        save_maps(tmp_path / "n.h5", maps)
    with pytest.raises(EmbedscopeError, match="load_maps needs the path"):
        load_maps(None)


def test_names_in_the_python_docs_exist():
    text = (ROOT / "docs" / "store.md").read_text() + (ROOT / "docs" / "architecture.md").read_text()
    for attr in sorted(set(re.findall(r"\bes\.(\w+)", text))):
        assert hasattr(EmbeddingSet, attr) or attr in EmbeddingSet.__dataclass_fields__, attr
    for name in sorted(set(re.findall(r"\bstore\.(\w+)\(", text))):
        assert hasattr(store, name), name
    for name in ("check_matrix", "check_labels", "check_int", "check_choice"):
        from embedscope import validation

        assert hasattr(validation, name)


# -------------------------------------------------------------------------- analyses
def test_every_array_kind_gives_the_same_answer(tmp_path):
    torch = pytest.importorskip("torch")
    X, y = _data()
    X = X.astype(np.float32).astype(np.float64)  # exactly representable in every kind below
    np.save(tmp_path / "X.npy", X)
    kinds = {
        "float64": X, "float32": X.astype(np.float32), "fortran": np.asfortranarray(X),
        "strided": np.repeat(X, 2, axis=1)[:, ::2], "memmap": np.load(tmp_path / "X.npy", mmap_mode="r"),
        "torch": torch.tensor(X), "list": X.tolist(),
    }
    ref = A.evaluate(EmbeddingSet.from_arrays(X, y), include=["R@1", "MAP@R"], ks=1).values
    for name, XX in kinds.items():
        es = EmbeddingSet.from_arrays(XX, torch.tensor(y) if name == "torch" else y.tolist())
        assert es.n == 60 and es.dim == 8, name
        assert A.evaluate(es, include=["R@1", "MAP@R"], ks=1).values == ref, name
    strings = EmbeddingSet.from_arrays(X, np.array(list("abcd"))[y])
    assert A.evaluate(strings, include=["R@1", "MAP@R"], ks=1).values == ref


def test_analysis_arguments_checked_in_python():
    X, y = _data()
    assert list(A.evaluate((X, y), ks=4, include=["R@4"]).values) == ["R@4"]  # one k, not a list of one
    with pytest.raises(EmbedscopeError, match=r"seed must be an integer, got 'a'"):
        A.geometry((X, y), split="test", seed="a")
    for kw, match in ((dict(k=0), r"^k must be a positive integer, got 0$"),
                      (dict(queries=0), r"^queries must be a positive integer, got 0$"),
                      (dict(metric="dot"), r"^metric must be one of cosine, euclidean, got 'dot'$")):
        with pytest.raises(EmbedscopeError, match=match):
            A.neighbour_examples((X, y), **kw)


def test_result_repr_display_equality_and_pickle():
    es = _set()
    r = A.evaluate(es, per_class=True)
    again = A.evaluate(es, per_class=True)
    assert r == again  # provenance["seconds"] differs, what was computed does not
    assert r != A.evaluate(es) and r != A.evaluate(es, per_class=True, name="other")
    g = A.geometry(es, keep_spectrum=True)  # arrays: numpy, compared by value (== raised before)
    assert g == A.geometry(es, keep_spectrum=True) and pickle.loads(pickle.dumps(g)) == g
    assert g != A.geometry(es, keep_spectrum=True, exclude_top=0)
    line = repr(r)
    assert "\n" not in line and line.startswith("Result('evaluate', model='embeddings', values={'R@1': ")
    assert f"'R@1': {r['R@1']!r}" in line and line.endswith("table=4 rows)")
    pretty = pytest.importorskip("IPython.lib.pretty")
    # (a per-class result: its table, then the classes with the lowest MAP@R, as `evaluate --per-class`)
    assert pretty.pretty(r) == str(r) and str(r).startswith(r.format() + "\nembeddings: the ")
    assert pretty.pretty(A.evaluate(es)) == A.evaluate(es).format()
    rs = A.evaluate_many([es, es], names=["a", "b"])
    assert repr(rs) == "ResultSet('evaluate', models=['a', 'b'])" and pretty.pretty(rs) == rs.format()
    assert rs == A.evaluate_many([es, es], names=["a", "b"])


def test_properties_of_a_set_in_memory():
    """properties() read only paths ('give paths, got EmbeddingSet'); a set's model name was 'set0'."""
    X, y = _data()
    colour = np.array(["r", "g", "b"])[np.arange(60) % 3]
    es = EmbeddingSet.from_arrays(X, y, properties={"colour": colour})
    r = A.properties(es)
    assert r.models == ["embeddings"] and set(r[0].values) == {"NR-Prec[colour]", "NR-Prec[class]"}
    from embedscope.metrics.properties import property_precision

    ref = property_precision(es.embeddings, {"class": es.labels, "colour": colour})
    assert r[0]["NR-Prec[colour]"] == ref["colour"]["NR-Prec"] and r[0]["NR-Prec[class]"] == ref["class"]["NR-Prec"]
    assert A.properties([es, es]).models == ["set0", "set1"]
    with pytest.raises(EmbedscopeError, match=r"^embeddings: no property 'nope' \(the file has: class, colour\)$"):
        A.properties(es, properties=["nope"])
    with pytest.raises(EmbedscopeError, match="embedding files or EmbeddingSets, got ndarray"):
        A.properties([X])


QUESTIONS = ["evaluate", "evaluate_many", "worst_classes", "geometry", "spectrum", "tsne", "yoke", "scatter",
             "neighbour_examples", "properties", "compute_measures"]


def test_every_question_cites_its_methods_section():
    sections = set(re.findall(r"^## (§\d+)", (ROOT / "docs" / "methods.md").read_text(), flags=re.M))
    for name in QUESTIONS:
        doc = inspect.getdoc(getattr(A, name)) or ""
        cited = re.findall(r"docs/methods\.md (§\d+)", doc)
        assert cited, f"{name}: no docs/methods.md section in its docstring"
        assert set(cited) <= sections, (name, cited)


def test_top_level_names_load_on_first_use():
    code = ("import sys, embedscope\n"
            "assert 'numpy' not in sys.modules and 'embedscope.store' not in sys.modules\n"
            "assert embedscope.load is embedscope.store.load and embedscope.EmbeddingSet.__name__ == 'EmbeddingSet'\n"
            "assert callable(embedscope.analyses.evaluate) and callable(embedscope.metrics.spectral_decay)\n"
            "assert {'store', 'analyses', 'metrics', 'viz', 'load'} <= set(dir(embedscope))\n"
            "import embedscope.store as s\n"
            "assert {'SaliencyMaps', 'match_maps'} <= set(dir(s))\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        embedscope.nope  # noqa: B018


def test_writing_a_table_that_is_not_there_or_to_a_non_path_is_one_line(tmp_path):
    """geometry(...).to_csv(p, table=True) wrote an empty file; to_json(123) raised a TypeError."""
    g = A.geometry(_set())
    for write in (g.to_csv, g.to_parquet, A.combine([g]).to_csv):
        with pytest.raises(EmbedscopeError, match=r"^the geometry result has no per-row table to write"):
            write(tmp_path / "t.out", table=True)
    assert not list(tmp_path.iterdir())
    with pytest.raises(EmbedscopeError, match=r"^an output must be named by a file path .*got int 123$"):
        g.to_json(123)
    r = A.evaluate(_set(), per_class=True)  # a table: written
    r.to_csv(tmp_path / "t.csv", table=True)
    assert (tmp_path / "t.csv").read_text().splitlines()[0] == "class,label,n,R@1,R-Precision,MAP@R"


def test_missing_values_in_properties_and_class_names_are_refused():
    """A None among text properties or class names was stored as the text 'None' (a NaN: 'nan')."""
    X, y = _data(n=3, classes=3)
    for kw, match in ((dict(properties={"c": ["r", None, "b"]}), r"^property 'c': row 1 is missing \(None\)"),
                      (dict(properties={"f": [1.0, np.nan, 2.0]}), r"^property 'f': row 1 is missing \(nan\)"),
                      (dict(class_names=["a", None, "c"]), r"^class_names: row 1 is missing \(None\)")):
        with pytest.raises(EmbedscopeError, match=match):
            EmbeddingSet.from_arrays(X, y, **kw)
    es = EmbeddingSet.from_arrays(X, ["nan", "None", "x"], properties={"f": np.array([1.0, 3.0, 2.0])})
    assert es.class_names.tolist() == ["None", "nan", "x"]  # text that reads so is a value


def test_integer_embeddings_written_by_another_tool_load_exactly(tmp_path):
    """store.load turned an integer /embeddings (allowed: other tools write the file with h5py) into
    float32, rounding values beyond 2^24 (2^24 + 1 -> 2^24) without a word."""
    h5py = pytest.importorskip("h5py")
    es = _set(n=4, classes=2)
    small = tmp_path / "small.h5"
    store.save(small, es)
    big = tmp_path / "big.h5"
    big.write_bytes(small.read_bytes())
    with h5py.File(big, "r+") as f:
        del f["embeddings"]
        f["embeddings"] = np.array([[2 ** 24 + 1, -3]] * 4, dtype=np.int64)
    with h5py.File(small, "r+") as f:
        del f["embeddings"]
        f["embeddings"] = np.array([[2 ** 24, -3]] * 4, dtype=np.int32)
    X = store.load(big).embeddings
    assert X.dtype == np.float64 and X[0].tolist() == [2 ** 24 + 1, -3]
    X = store.load(small).embeddings
    assert X.dtype == np.float32 and X[0].tolist() == [2 ** 24, -3]


def test_spectrum_records_how_many_class_values_it_kept():
    # k = 1000 on D = 8 keeps 8 values per class; the provenance said only k = 1000
    from embedscope.analyses import spectrum
    from embedscope.store import EmbeddingSet

    rng = np.random.default_rng(0)
    es = EmbeddingSet.from_arrays(rng.normal(size=(60, 8)), np.arange(60) % 4, split="train")
    r = spectrum([es], by_class=True, k=1000)[0]
    assert r.provenance["k"] == 1000 and r.provenance["k_used"] == 8
    assert len(r.arrays["class_mean"]) == 8


def test_a_set_saved_again_names_its_own_file_and_a_changed_file_gets_no_old_sha(tmp_path):
    """load notes the file it read (source_file, its size and time; an analysis adds its sha256):
    a set read, then saved elsewhere, wrote those notes into the new file, whose results then named
    the first file and its sha256 as their source; and a set whose file was overwritten after it was
    read got the new file's sha256 in its provenance."""
    import os

    from embedscope import analyses, store
    from embedscope.analyses._sources import as_set
    from embedscope.fileio import sha256_file

    rng = np.random.default_rng(0)
    es = store.EmbeddingSet.from_arrays(rng.normal(size=(40, 4)).astype(np.float32), np.arange(40) % 4)
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    store.save(a, es)
    read = as_set(a)
    assert read.attrs["source_file"] == str(a) and "_sha256" in read.attrs
    store.save(b, read)
    again = store.load(b)
    assert again.attrs["source_file"] == str(b)
    import h5py

    with h5py.File(b) as f:
        assert not {"source_file", "_sha256", "_source_stat"} & set(f.attrs)
    res = analyses.evaluate(str(b), include=["R@1"])
    assert res.provenance["file"] == str(b) and res.provenance["sha256"] == sha256_file(b)

    held = store.load(a)  # read, then the file is replaced by other data
    store.save(a, store.EmbeddingSet.from_arrays(rng.normal(size=(40, 4)).astype(np.float32), np.arange(40) % 4),
               force=True)
    os.utime(a, ns=(held.attrs["_source_stat"][1] + 10**9,) * 2)
    prov = analyses.evaluate(held, include=["R@1"]).provenance
    assert prov["sha256"] is None and prov["file_changed_since_read"] is True
