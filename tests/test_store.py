import h5py
import numpy as np
import pytest

from embedscope import store
from embedscope.errors import EmbedscopeError


def make_set(n=20, d=4, seed=0, props=True):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, n)
    return store.EmbeddingSet(
        embeddings=rng.normal(size=(n, d)).astype(np.float32),
        labels=labels,
        paths=[f"img/{i}.jpg" for i in range(n)],
        split=np.where(labels < 2, "train", "test"),
        class_names=["a", "b", "ç", "日本"],
        properties={"hue": rng.random(n), "shape": np.array(["sq", "ci"] * (n // 2), dtype=object)} if props else {},
        attrs={"dataset": "toy", "checkpoint_config": {"arch": "x", "embed_dim": d}},
    )


def test_round_trip(tmp_path):
    es = make_set()
    p = store.save(tmp_path / "e.h5", es)
    back = store.load(p)
    np.testing.assert_array_equal(back.embeddings, es.embeddings)
    assert back.embeddings.dtype == np.float32
    np.testing.assert_array_equal(back.labels, es.labels)
    assert back.labels.dtype == np.int64
    assert list(back.paths) == list(es.paths)
    assert list(back.split) == list(es.split)
    assert list(back.class_names) == ["a", "b", "ç", "日本"]
    np.testing.assert_allclose(back.properties["hue"], es.properties["hue"])
    assert list(back.properties["shape"]) == list(es.properties["shape"])
    assert back.attrs["dataset"] == "toy"
    assert back.attrs["checkpoint_config"] == {"arch": "x", "embed_dim": 4}
    assert back.attrs["format_version"] == store.FORMAT_VERSION
    assert "created" in back.attrs and "embedscope_version" in back.attrs


def test_layout_names(tmp_path):
    p = store.save(tmp_path / "e.h5", make_set())
    with h5py.File(p) as f:
        assert {"embeddings", "labels", "paths", "split", "class_names", "properties"} <= set(f)
        assert f["embeddings"].dtype == np.float32 and f["labels"].dtype == np.int64
        assert int(f.attrs["format_version"]) == 1


def test_subset_and_summary():
    es = make_set()
    tr = es.subset("train")
    assert set(tr.split) == {"train"} and len(tr) == int((es.split == "train").sum())
    assert len(tr.properties["hue"]) == len(tr)
    assert es.subset("all") is es
    with pytest.raises(EmbedscopeError, match="unknown split"):
        es.subset("val")
    s = es.summary()
    assert s["N"] == 20 and s["D"] == 4 and s["train_N"] + s["test_N"] == 20


def test_refuses_overwrite(tmp_path):
    p = store.save(tmp_path / "e.h5", make_set(seed=0))
    before = p.read_bytes()
    with pytest.raises(EmbedscopeError, match="already exists"):
        store.save(p, make_set(seed=1))
    assert p.read_bytes() == before
    store.save(p, make_set(seed=1), force=True)
    assert not np.array_equal(store.load(p).embeddings, make_set(seed=0).embeddings)
    assert [q.name for q in tmp_path.iterdir()] == ["e.h5"]  # no temporary file left


@pytest.mark.parametrize(
    "edit, msg",
    [
        (lambda f: f["embeddings"].__setitem__(0, np.nan), "NaN or inf"),
        (lambda f: (f.__delitem__("labels"), f.create_dataset("labels", data=np.arange(3))), "labels"),
        (lambda f: (f.__delitem__("labels"), f.create_dataset("labels", data=np.linspace(0, 1, 20))), "integers"),
        (lambda f: f.__delitem__("paths"), "missing dataset"),
        (lambda f: f["labels"].__setitem__(0, 99), "class_names"),
    ],
)
def test_validation_on_load(tmp_path, edit, msg):
    p = store.save(tmp_path / "e.h5", make_set())
    with h5py.File(p, "a") as f:
        edit(f)
    with pytest.raises(EmbedscopeError, match=msg):
        store.load(p)


def test_load_errors(tmp_path):
    with pytest.raises(EmbedscopeError, match="no such file"):
        store.load(tmp_path / "missing.h5")
    bad = tmp_path / "bad.h5"
    bad.write_text("not hdf5")
    with pytest.raises(EmbedscopeError, match="not a readable HDF5"):
        store.load(bad)


def test_constructor_validation():
    with pytest.raises(EmbedscopeError, match="2-D"):
        store.EmbeddingSet(np.zeros(3), [0, 0, 0], ["a"] * 3, ["train"] * 3, ["x"])
    with pytest.raises(EmbedscopeError, match="split"):
        store.EmbeddingSet(np.zeros((2, 2)), [0, 0], ["a", "b"], ["train", "val"], ["x"])


def test_match_by_path():
    a = make_set(props=False)
    perm = np.random.default_rng(3).permutation(a.n)
    b = a.select(perm)
    b.embeddings = b.embeddings * 2
    a2, b2 = store.match_by_path(a, b, "A", "B")
    assert list(b2.paths) == list(a.paths)
    np.testing.assert_array_equal(b2.embeddings, a.embeddings * 2)
    with pytest.raises(EmbedscopeError, match="1 only in A"):
        store.match_by_path(a, b.select(np.arange(b.n - 1)), "A", "B")
    with pytest.raises(EmbedscopeError, match="duplicate paths"):
        store.match_by_path(a, b.select(np.r_[0, np.arange(b.n - 1)]), "A", "B")
    c = a.select(np.arange(a.n))
    c.labels = (c.labels + 1) % 4
    with pytest.raises(EmbedscopeError, match="different classes"):
        store.match_by_path(a, c, "A", "C")
