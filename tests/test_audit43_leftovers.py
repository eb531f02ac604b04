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
