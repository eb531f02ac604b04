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


def test_attributes_come_back_as_written(tmp_path):
    """Text that looks like JSON stays text, None stays None, lists and dicts come back as such."""
    tricky = {"s_list": "[1, 2]", "s_dict": '{"a": 1}', "s_null": "null", "s_num": "7", "none": None,
              "lst": [1, "x", None], "dct": {"k": [1.5, None]}, "n": 3, "f": 0.25, "b": True, "text": "plain"}
    es = make_set()
    es.attrs.update(tricky)
    back = store.load(store.save(tmp_path / "e.h5", es))
    for k, v in tricky.items():
        assert back.attrs[k] == v and type(back.attrs[k]) is type(v), k
    assert store.embeddings.JSON_ATTRS not in back.attrs
    # files without the list (older embedscope, other tools): JSON-looking text is parsed as before
    with h5py.File(tmp_path / "e.h5", "r+") as f:
        del f.attrs[store.embeddings.JSON_ATTRS]
    old = store.load(tmp_path / "e.h5")
    assert old.attrs["checkpoint_config"] == {"arch": "x", "embed_dim": 4} and old.attrs["s_list"] == [1, 2]
    assert old.attrs["s_null"] == "null" and old.attrs["text"] == "plain"


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
        es.subset("validation")
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
        store.EmbeddingSet(np.zeros((2, 2)), [0, 0], ["a", "b"], ["train", "validation"], ["x"])


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


# ---------------------------------------------------------------- from_arrays, sample, tensors, bad files
def test_from_arrays_minimal_and_strings():
    X = np.random.default_rng(0).normal(size=(6, 3))
    es = store.EmbeddingSet.from_arrays(X, ["b", "a", "b", "c", "a", "c"])
    assert es.class_names.tolist() == ["a", "b", "c"]
    assert es.labels.tolist() == [1, 0, 1, 2, 0, 2]
    assert set(es.split) == {"test"} and "split_source" in es.attrs
    assert es.paths.tolist() == [str(i) for i in range(6)]
    es2 = store.EmbeddingSet.from_arrays(X, [5, 7, 5, 9, 7, 9], split=["train"] * 3 + ["query"] * 3)
    assert es2.class_names.tolist() == ["5", "7", "9"] and es2.splits == ["train", "query"]
    assert es2.subset("query").n == 3
    with pytest.raises(EmbedscopeError, match="6 entries"):
        store.EmbeddingSet.from_arrays(X, [0, 1])
    with pytest.raises(EmbedscopeError, match="unknown split"):
        store.EmbeddingSet.from_arrays(X, [0] * 6, split="holdout")


def test_from_arrays_accepts_torch_tensors_with_grad():
    import torch

    X = torch.randn(5, 4, requires_grad=True)
    es = store.EmbeddingSet.from_arrays(X * 2, torch.tensor([0, 1, 0, 1, 1]))
    assert isinstance(es.embeddings, np.ndarray)
    np.testing.assert_allclose(es.embeddings, (X * 2).detach().numpy())
    es_bf = store.EmbeddingSet.from_arrays(X.detach().to(torch.bfloat16), [0, 1, 0, 1, 1])
    assert es_bf.embeddings.dtype == np.float32


def test_sample_stratified_and_seeded():
    es = make_set()
    s1, s2 = es.sample(10, seed=3), es.sample(10, seed=3)
    assert s1.n == 10 and np.array_equal(s1.paths, s2.paths)
    assert set(s1.labels) == set(es.labels)  # every class kept while n allows
    assert es.sample(None) is es and es.sample(10_000) is es
    u = es.sample(7, seed=1, stratify=False)
    assert u.n == 7 and len(set(u.paths)) == 7


@pytest.mark.parametrize("edit, msg", [
    (lambda f: (f.__delitem__("labels"), f.create_group("labels")), "group, expected a dataset"),
    (lambda f: f.attrs.__setitem__("format_version", "one"), "format_version must be an integer"),
    (lambda f: (f.__delitem__("paths"), f.create_dataset("paths", data=np.array([b"\xff\xfe"] * 20))),
     "invalid UTF-8"),
])
def test_malformed_files_one_line(tmp_path, edit, msg):
    import h5py

    p = store.save(tmp_path / "e.h5", make_set())
    with h5py.File(p, "a") as f:
        edit(f)
    with pytest.raises(EmbedscopeError, match=msg):
        store.load(p)


def test_full_disk_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    import errno

    import embedscope.store.embeddings as emb

    real_open = open

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.fh.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(emb, "open", lambda p, m="r", *a, **k: Full(real_open(p, m, *a, **k)), raising=False)
    with pytest.raises(EmbedscopeError, match="no space left on device"):
        store.save(tmp_path / "e.h5", make_set())
    assert list(tmp_path.iterdir()) == []


def test_zero_width_embeddings_refused(tmp_path):
    with pytest.raises(EmbedscopeError, match="D = 0"):
        store.EmbeddingSet(embeddings=np.zeros((3, 0), np.float32), labels=[0, 0, 0], paths=["a", "b", "c"],
                           split=["test"] * 3, class_names=["x"])
    ok = store.EmbeddingSet(embeddings=np.ones((3, 2), np.float32), labels=[0, 0, 0], paths=["a", "b", "c"],
                            split=["test"] * 3, class_names=["x"])
    store.save(tmp_path / "z.h5", ok)
    with h5py.File(tmp_path / "z.h5", "r+") as f:  # another tool wrote a zero-width dataset
        del f["embeddings"]
        f.create_dataset("embeddings", data=np.zeros((3, 0), np.float32))
    with pytest.raises(EmbedscopeError, match="D = 0"):
        store.load(tmp_path / "z.h5")


def test_load_finite_false_keeps_nonfinite_rows_as_stored(tmp_path):
    """store.load refuses NaN / inf rows; finite=False (embedscope info) reads them as stored, every
    other check standing."""
    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    f = tmp_path / "e.h5"
    store.save(f, store.EmbeddingSet.from_arrays(X, [0, 1, 0, 1]))
    with h5py.File(f, "a") as h:
        h["embeddings"][1, 2] = np.nan
        h["embeddings"][3, 0] = -np.inf
    with pytest.raises(EmbedscopeError, match="2 embedding rows contain NaN or inf"):
        store.load(f)
    es = store.load(f, finite=False)
    want = X.copy()
    want[1, 2], want[3, 0] = np.nan, -np.inf
    np.testing.assert_array_equal(es.embeddings, want)
    assert es.labels.tolist() == [0, 1, 0, 1]
    with h5py.File(f, "a") as h:
        h["labels"][0] = 7  # beyond the class names: still refused
    with pytest.raises(EmbedscopeError, match="labels must lie in"):
        store.load(f, finite=False)
