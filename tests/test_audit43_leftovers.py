"""Audit 43 (leftovers of the earlier audits: the store, file output, terminal text).

What was wrong before:

1. ``store.update_properties`` called from Python rewrote a file without write permission (``chmod 444``):
   only ``add-properties`` refused it;
"""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from embedscope import store
from embedscope.errors import EmbedscopeError
from embedscope.store.embeddings import EmbeddingSet

N = 4
PATHS = [f"img/{i}.jpg" for i in range(N)]


def _h5(path, **properties):
    """A small embedding file of the project's own store."""
    es = EmbeddingSet(embeddings=np.eye(N, 3, dtype=np.float32), labels=np.array([0, 0, 1, 1]), paths=PATHS,
                      split=["test"] * N, class_names=["a", "b"], properties=properties)
    store.save(path, es)
    return path


# ----------------------------------------------------------------------------- 1. update_properties, read-only


def test_update_properties_refuses_a_read_only_file(tmp_path):
    from embedscope.store.embeddings import load, update_properties

    h5 = _h5(tmp_path / "e.h5")
    es = load(h5)
    es.properties = {"w": np.arange(N)}
    before = h5.read_bytes()
    os.chmod(h5, 0o444)
    try:
        with pytest.raises(EmbedscopeError, match=r"e\.h5: the file is read-only \(no write permission\): .*"
                                                  r"make it writable first \(chmod u\+w\)"):
            update_properties(h5, es, ["w"])
        assert h5.read_bytes() == before and (h5.stat().st_mode & 0o777) == 0o444
        assert os.listdir(tmp_path) == ["e.h5"]  # no temporary left
    finally:
        os.chmod(h5, 0o644)
    update_properties(h5, es, ["w"])  # writable again: updated
    with h5py.File(h5, "r") as f:
        assert f["properties/w"][()].tolist() == list(range(N))


# ----------------------------------------------------------------------------- 5. a NUL inside a text


def _held(*values):
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


@pytest.mark.parametrize("kw, what", [
    ({"paths": ["x", "a\x00b", "y"]}, "paths"),
    ({"paths": _held("x", "a\x00b", "y")}, "paths"),
    ({"paths": np.array(["x", "a\x00b", "y"])}, "paths"),
    ({"paths": np.array([b"x", b"a\x00b", b"y"])}, "paths"),
    ({"split": ["train", "te\x00st", "test"]}, "split"),
    ({"split": np.array(["train", "te\x00st", "test"])}, "split"),
    ({"y": [0, 1, 1], "class_names": ["a", "b\x00c"]}, "class_names"),
    ({"y": [0, 1, 1], "class_names": [b"a", b"b\x00c"]}, "class_names"),
    ({"properties": {"p": ["a", "a\x00b", "c"]}}, "property 'p'"),
    ({"properties": {"p": np.array(["a", "a\x00b", "c"])}}, "property 'p'"),
])
def test_a_nul_inside_a_text_is_refused_by_from_arrays(kw, what):
    """It passed from_arrays and only store.save refused it, naming the row: refused where the set is made, in
    the words of a trailing NUL."""
    kw = {"y": [0, 1, 1], **kw}
    with pytest.raises(EmbedscopeError, match=rf"^{what}: row 1 holds a NUL character, which HDF5 text cannot store$"):
        EmbeddingSet.from_arrays(np.eye(3), **kw)


def test_texts_without_a_nul_are_kept_as_before():
    es = EmbeddingSet.from_arrays(np.eye(3), [0, 1, 1], paths=np.array([b"x", b"y", b"z"]), split="train",
                                  class_names=[b"a", "b"], properties={"p": ["x", "y", "z"], "q": [1, 2, 3]})
    assert es.paths.tolist() == ["x", "y", "z"] and es.class_names.tolist() == ["a", "b"]
    assert es.properties["p"].tolist() == ["x", "y", "z"]
