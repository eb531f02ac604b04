"""Audit 41: per-image properties brought by ``embedscope add-properties``.

* ``--force`` replacing a property dropped the HDF5 attributes its old dataset had (units, a description
  another tool wrote): the table gives none, so the replaced property now keeps them, each of its stored
  type and shape, and the command names them in a note;
"""

from __future__ import annotations

import h5py
import numpy as np
from cli_run import run_cli

from embedscope import store

N = 6
PATHS = [f"img/{i}.jpg" for i in range(N)]


def _h5(path):
    """A small embedding file written by the project's own store, with a property 'old'."""
    es = store.EmbeddingSet(embeddings=np.random.default_rng(0).normal(size=(N, 3)).astype(np.float32),
                            labels=np.array([0, 0, 1, 1, 2, 2]), paths=PATHS, split=["test"] * N,
                            class_names=["a", "b", "c"], properties={"old": np.arange(N)})
    store.save(path, es)
    return path


def _csv(path, header: str, cells, *, raw: bytes | None = None):
    """A table of one row per image (``cells``: one value each, or whole rows after the path)."""
    if raw is None:
        raw = (header + "\n" + "".join(f"{p},{c}\n" for p, c in zip(PATHS, cells))).encode()
    path.write_bytes(raw)
    return path


# ----------------------------------------------------------------------------- --force keeps attributes


def test_force_keeps_the_replaced_propertys_attributes(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    with h5py.File(h5, "r+") as f:
        ds = f["properties/old"]
        ds.attrs["units"] = "px"
        ds.attrs["scale"] = np.array([1.5, 2.0], dtype=np.float32)
        ds.attrs.create("n", 6, dtype=np.int16)
        f["properties"].attrs["group_note"] = "kept"
    new = [1, 0, 1, 0, 1, 0]
    table = _csv(tmp_path / "t.csv", "path,old", new)
    rc, out, err = run_cli(["add-properties", h5, table, "--force"])
    assert rc == 0, err
    assert "replaced property old" in out
    assert "keeps its HDF5 attributes: 'old' (n, scale, units)" in out
    with h5py.File(h5, "r") as f:
        ds = f["properties/old"]
        assert ds[()].tolist() == new  # the new values
        assert ds.attrs["units"] == "px"
        assert ds.attrs["scale"].dtype == np.float32 and ds.attrs["scale"].tolist() == [1.5, 2.0]
        assert ds.attrs.get_id("n").dtype == np.int16 and ds.attrs["n"] == 6
        assert f["properties"].attrs["group_note"] == "kept"
    # a property without attributes, replaced: no note
    rc, out, err = run_cli(["add-properties", h5, _csv(tmp_path / "u.csv", "path,w", [3] * N)])
    assert rc == 0, err
    rc, out, err = run_cli(["add-properties", h5, _csv(tmp_path / "u.csv", "path,w", [4] * N), "--force"])
    assert rc == 0 and "attributes" not in out, out
    with h5py.File(h5, "r") as f:
        assert dict(f["properties/w"].attrs) == {} and f["properties/w"][()].tolist() == [4] * N
