"""embedscope as a Python library (audit of the API a script or notebook uses): building sets from
arrays of every kind, saving what float32 cannot hold, one-line errors naming the argument, result
objects (repr, notebook display, equality, pickling) and the lazy top-level names."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import numpy as np
import pytest

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
                       ("train", r"boolean mask or integer row indices")):
        with pytest.raises(EmbedscopeError, match=match):
            es.select(bad)


def test_a_missing_split_of_a_set_made_from_arrays_says_how_to_ask():
    X, y = _data()
    with pytest.raises(EmbedscopeError, match=r"the embedding set has no 'train' rows \(splits present: test; "
                                              r"EmbeddingSet.from_arrays marks every row 'test' unless given split="):
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
