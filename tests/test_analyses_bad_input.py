"""Bad input to the analyses layer: one-line EmbedscopeErrors, never raw Python/joblib exceptions."""

from __future__ import annotations

import numpy as np
import pytest

import embedscope.analyses as A
from embedscope import store
from embedscope.errors import EmbedscopeError, MissingKey, UsageError

X = np.random.default_rng(0).normal(size=(12, 4))
Y = np.array([0, 1, 2] * 4)


@pytest.fixture
def h5(tmp_path):
    path = tmp_path / "m.h5"
    store.save(path, store.EmbeddingSet(embeddings=X.astype("float32"), labels=Y, paths=[str(i) for i in range(12)],
                                        split=["test"] * 12, class_names=["a", "b", "c"]))
    return str(path)


@pytest.fixture(scope="module")
def per_class():
    return A.evaluate((X, Y), split="all", per_class=True)


def test_neighbour_examples_reads_any_source(h5):
    ex = A.neighbour_examples(h5, k=2, queries=3)
    assert ex.ref_paths.shape == (3, 2)
    ex = A.neighbour_examples((X, Y), split="all", k=2, queries=4)
    assert ex.ref_paths.shape == (4, 2)
    with pytest.raises(EmbedscopeError, match="expected an EmbeddingSet"):
        A.neighbour_examples(None)
    with pytest.raises(EmbedscopeError, match="k must be an integer"):
        A.neighbour_examples((X, Y), split="all", k="2")
    with pytest.raises(EmbedscopeError, match="split must be one of"):
        A.neighbour_examples((X, Y), split="bogus")


def test_single_path_is_one_file(h5):
    assert A.evaluate_many(h5).models == ["m"]
    assert A.spectrum(h5, split="test").models == ["m"]
    assert A.properties(h5).models == ["m"]
    assert A.properties(h5, properties="class").models == ["m"]


def test_single_measure_name(h5):
    assert list(A.compute_measures(h5, "R@1")) == ["R@1"]
    with pytest.raises(EmbedscopeError, match="measure names must be strings"):
        A.compute_measures(h5, [1])


@pytest.mark.parametrize("kw, msg", [
    ({"n_jobs": 0}, "n_jobs must be None"),
    ({"n_jobs": -2}, "n_jobs must be None"),
    ({"n_iter": 0}, "n_iter must be a positive integer"),
    ({"seed": -1}, "seed must be"),
    ({"max_points": 0}, "max_points must be a positive integer"),
])
def test_tsne_settings(kw, msg):
    with pytest.raises(EmbedscopeError, match=msg):
        A.tsne((X, Y), split="all", perplexity=3, **kw)
    with pytest.raises(EmbedscopeError, match=msg):
        A.yoke((X, Y), (X, Y), split="all", perplexity=3, names=["a", "b"], **kw)


def test_worst_classes(per_class):
    assert len(A.worst_classes(per_class, n=2)) == 2
    assert len(A.worst_classes(per_class, key="R@1", n=10)) == 3
    for n in (-1, 0):
        with pytest.raises(EmbedscopeError, match="n must be a positive integer"):
            A.worst_classes(per_class, n=n)
    with pytest.raises(EmbedscopeError, match="key must be one of .*MAP@R.*got 'bogus'"):
        A.worst_classes(per_class, key="bogus")
    with pytest.raises(EmbedscopeError, match="needs a Result"):
        A.worst_classes({"table": per_class.table})
    with pytest.raises(EmbedscopeError, match="no per-class table"):
        A.worst_classes(A.evaluate((X, Y), split="all"))


def test_result_missing_key(per_class):
    with pytest.raises(MissingKey) as e:
        per_class["bogus"]
    assert isinstance(e.value, EmbedscopeError) and isinstance(e.value, KeyError)
    assert str(e.value).startswith("no value 'bogus' in the evaluate result (available: R@1")
    assert "\n" not in str(e.value) and not str(e.value).startswith('"')
    try:
        per_class["bogus"]
    except KeyError:
        pass
    rs = A.combine([per_class])
    with pytest.raises(MissingKey, match="no model 'nope'"):
        rs["nope"]


def test_empty_and_wrong_lists():
    with pytest.raises(EmbedscopeError, match="got int"):
        A.combine([1, 2])
    with pytest.raises(EmbedscopeError, match="at least one Result"):
        A.combine([])
    for fn in (A.properties, A.evaluate_many, A.spectrum):
        with pytest.raises(UsageError, match="give at least one embedding file"):
            fn([])


def test_scatter_single_class():
    with pytest.raises(EmbedscopeError, match="at least two classes.*the test split has 1"):
        A.scatter((X, np.zeros(12, int)))
