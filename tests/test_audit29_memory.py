"""Audit 29 (E): ``add-properties`` and ``info`` in memory bounded whatever N x D.

* ``add-properties`` loaded the whole file (``store.load``), then rewrote it from an in-memory copy of its
  bytes: a 207 MB file (25,000 x 2048 float32) peaked at 548 MB RSS. The file's embeddings are now checked
  a block of rows at a time (``store.embeddings.scan``: every check of ``load``, nothing kept), the file is
  copied by the kernel into the temporary file and the properties written into the copy: 164 MB, as for a
  file of 25,000 x 8 (pandas and h5py's own);
* ``info`` loaded the embeddings and a float64 copy for their norms: 1072 MB on that file; it now reads
  them a block of rows at a time, measuring each row (NaN, inf, norm) on the way: 69 MB, output unchanged.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import io
import os
import shutil
import tracemalloc

import h5py
import numpy as np
import pytest
from cli_run import cli_output
from faults import fail_writes

from embedscope import store
from embedscope.errors import EmbedscopeError
from embedscope.store import embeddings as emb

N, D = 5000, 1024  # 20 MB of float32


def _table(path, paths, values):
    path.write_text("path,w\n" + "".join(f"{p},{v}\n" for p, v in zip(paths, values)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    d = tmp_path_factory.mktemp("big")
    X = np.random.default_rng(0).standard_normal((N, D), dtype=np.float32)
    paths = [f"i/{i}.jpg" for i in range(N)]
    es = store.EmbeddingSet.from_arrays(X, np.arange(N) % 10, split="test", paths=paths)
    tiny = store.EmbeddingSet.from_arrays(X[:20, :4], np.arange(20) % 2, split="test", paths=paths[:20])
    return (store.save(d / "big.h5", es), _table(d / "big.csv", paths, np.arange(N) % 3),
            store.save(d / "tiny.h5", tiny), _table(d / "tiny.csv", paths[:20], np.arange(20) % 3))


def _peak_mib(fn) -> float:
    """The most memory Python allocated (numpy's arrays included) while ``fn`` ran, in MiB."""
    gc.collect()
    tracemalloc.start()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            fn()
        return tracemalloc.get_traced_memory()[1] / 2 ** 20
    finally:
        tracemalloc.stop()


def test_info_and_add_properties_do_not_hold_the_embeddings(big, tmp_path):
    """On a 20 MB file: the old code peaked at 98 MiB (info) and 43 MiB (add-properties), now about 7.5."""
    from embedscope.cli import main
    from embedscope.data.properties import add_properties_to_file

    h5, table, tiny, tiny_table = big
    work, small = shutil.copy(h5, tmp_path / "e.h5"), shutil.copy(tiny, tmp_path / "t.h5")
    with contextlib.redirect_stdout(io.StringIO()):  # (the modules each imports, imported first)
        main(["info", str(small)]), add_properties_to_file(small, tiny_table)
    assert _peak_mib(lambda: main(["info", str(work)])) < 12
    assert _peak_mib(lambda: add_properties_to_file(work, table)) < 12
    back = store.load(work)
    assert np.array_equal(back.properties["w"], np.arange(N) % 3)
    assert back.embeddings.tobytes() == store.load(h5).embeddings.tobytes()


@pytest.fixture
def odd_files(tmp_path):
    """Small files of every kind the reader converts or reports, their embeddings written with h5py."""
    rng = np.random.default_rng(3)
    f32 = rng.normal(size=(61, 7)).astype(np.float32)
    f32[[3, 40], 1] = np.nan
    f32[[7, 40], 5] = np.inf
    f32[9] = -np.inf
    kinds = {"f32": (f32, (8, 7)), "f16": (rng.normal(size=(61, 7)).astype(np.float16), None),
             "f64": (rng.normal(size=(61, 7)) * 1e3, (5, 3)),
             "i16": ((rng.normal(size=(61, 7)) * 1e3).astype(np.int16), None),
             "i64": ((rng.normal(size=(61, 7)) * 2.0 ** 30).astype(np.int64), (61, 1))}
    out = {}
    for name, (X, chunks) in kinds.items():
        es = store.EmbeddingSet.from_arrays(np.ones((61, 7)), np.arange(61) % 3, split="test",
                                            properties={"k": np.arange(61) % 2})
        p = store.save(tmp_path / f"{name}.h5", es)
        with h5py.File(p, "a") as f:
            del f["embeddings"]
            f.create_dataset("embeddings", data=X, chunks=chunks)
        out[name] = p
    return out


@pytest.mark.parametrize("values,math", [(1 << 20, 1 << 16), (20, 10), (7, 7)])
def test_the_scan_measures_what_a_full_read_gives(odd_files, monkeypatch, values, math):
    """Blocks of a few rows (one row, chunks of rows, chunks wider than the block): the same type, NaN and
    inf rows and norms, bit for bit, as the whole array loaded; every other field as load reads it."""
    monkeypatch.setattr(emb, "_BLOCK_VALUES", values)
    monkeypatch.setattr(emb, "_MATH_VALUES", math)
    for name, p in odd_files.items():
        full = store.load(p, finite=False)
        X = full.embeddings
        es, stats = emb.scan(p, finite=False)
        assert es.embeddings.dtype == X.dtype and es.embeddings.shape == X.shape, name
        assert es.embeddings.strides[1] == 0 and not es.embeddings.any(), name  # a stand-in: N values
        assert np.array_equal(stats.nan, np.isnan(X).any(axis=1)), name
        assert np.array_equal(stats.inf, np.isinf(X).any(axis=1)), name
        assert np.array_equal(stats.norms, np.linalg.norm(X.astype(np.float64), axis=1), equal_nan=True), name
        assert emb.same_values(full.summary(), es.summary(norms=stats.norms)), name
        for field in ("labels", "paths", "split", "class_names", "properties", "attrs"):
            assert emb.same_values(getattr(es, field), getattr(full, field)), (name, field)
    assert str(store.load(odd_files["i64"]).embeddings.dtype) == "float64"  # beyond 2^24: checked over blocks
    with pytest.raises(EmbedscopeError) as e:
        emb.scan(odd_files["f32"])
    assert str(e.value) == f"{odd_files['f32']}: 4 embedding rows contain NaN or inf (first: row 3)"
    with pytest.raises(EmbedscopeError) as e2:
        store.load(odd_files["f32"])
    assert str(e2.value) == str(e.value)
    with h5py.File(odd_files["f32"], "a") as f:  # NaN rows and a label out of range: load names the rows
        f["labels"][2] = 9
    with pytest.raises(EmbedscopeError) as e3:
        emb.scan(odd_files["f32"])
    assert str(e3.value) == str(e.value)


#: info's output on the file below, as the code that loaded the whole array printed it
_INFO = """\
field                value
-------------------  -----------------------------------------------------------------------------------------------
file                 e.h5
N x D                40 x 6
dtype                float32
non-finite rows      3 of 40 (2 with NaN, 2 with inf); first: row 5, path img/5.jpg; every analysis refuses the file
classes              3
train                10 images, 3 classes
test                 30 images, 3 classes
mean embedding norm  1.9392 (over the 37 finite rows)
properties           w
repeated paths       1 path(s) name 2 rows (e.g. img/1.jpg)
embedscope_version   0.0
created              2026-01-01T00:00:00+00:00
format_version       1
other dataset        /extra: 3 int64
other attribute      mine: kept
"""


def test_info_prints_what_it_printed_when_it_loaded_the_file(tmp_path, monkeypatch):
    i, j = np.meshgrid(np.arange(40), np.arange(6), indexing="ij")
    X = (((i * 7 + j * 3) % 11 - 5) / 4).astype(np.float32)
    X[5, 2], X[11, 0], X[30, 1], X[30, 4] = np.nan, np.inf, -np.inf, np.nan
    paths = [f"img/{k}.jpg" for k in range(40)]
    paths[3] = "img/1.jpg"
    es = store.EmbeddingSet.from_arrays(np.ones((40, 6)), np.arange(40) % 3, paths=paths,
                                        split=np.where(np.arange(40) % 4 == 0, "train", "test"),
                                        properties={"w": np.arange(40) % 2})
    p = store.save(tmp_path / "e.h5", es, attrs={"created": "2026-01-01T00:00:00+00:00", "embedscope_version": "0.0"})
    with h5py.File(p, "a") as f:
        f["embeddings"][...] = X
        f["extra"] = np.arange(3)
        f.attrs["mine"] = "kept"
    monkeypatch.chdir(tmp_path)
    assert cli_output(["info", "e.h5"]) == _INFO
    monkeypatch.setattr(emb, "_BLOCK_VALUES", 12)  # two rows at a time
    monkeypatch.setattr(emb, "_MATH_VALUES", 6)
    assert cli_output(["info", "e.h5"]) == _INFO


def _add(path, table, force=False):
    from embedscope.data.properties import add_properties_to_file

    return add_properties_to_file(path, table, force=force)


@pytest.mark.parametrize("stop", [KeyboardInterrupt, OSError(errno.ENOSPC, "No space left on device")])
def test_a_rewrite_stopped_in_the_copy_leaves_the_file_as_it_was(big, tmp_path, monkeypatch, stop):
    """Ctrl-C or a full disk while the properties are written into the copy: the file, its bytes and its
    mode, as before; the copy removed; a full disk is one line naming the file."""
    _, _, tiny, tiny_table = big
    p = shutil.copy(tiny, tmp_path / "e.h5")
    os.chmod(p, 0o640)
    raw = p.read_bytes()

    def fail(*a, **k):
        raise stop
    monkeypatch.setattr(emb, "_write_property", fail)
    with pytest.raises(KeyboardInterrupt if stop is KeyboardInterrupt else EmbedscopeError) as e:
        _add(p, tiny_table)
    if stop is not KeyboardInterrupt:
        assert str(e.value) == f"{p}: no space left on device"
    assert p.read_bytes() == raw and sorted(os.listdir(tmp_path)) == ["e.h5"]
    monkeypatch.undo()
    assert _add(p, tiny_table) == ["w"]
    assert os.stat(p).st_mode & 0o777 == 0o640  # the rewritten file keeps its mode
    assert sorted(os.listdir(tmp_path)) == ["e.h5"]
    assert store.load(p).properties["w"].tolist() == [k % 3 for k in range(20)]


@pytest.mark.parametrize("stop", [KeyboardInterrupt, OSError(errno.ENOSPC, "No space left on device")])
def test_a_stop_met_by_hdf5_writing_into_the_copy(big, tmp_path, monkeypatch, stop):
    """h5py writes the properties through the Python file and reports what its write raised as an OSError
    of its own ("driver write request failed"): a full disk is the store's line, Ctrl-C stays Ctrl-C."""
    _, _, tiny, tiny_table = big
    p = shutil.copy(tiny, tmp_path / "e.h5")
    raw = p.read_bytes()
    fail_writes(monkeypatch, emb, stop)  # the temporary file, on a disk that has no room for the properties
    with pytest.raises(KeyboardInterrupt if stop is KeyboardInterrupt else EmbedscopeError) as e:
        _add(p, tiny_table)
    if stop is not KeyboardInterrupt:
        assert str(e.value) == f"{p}: no space left on device"
    assert p.read_bytes() == raw and sorted(os.listdir(tmp_path)) == ["e.h5"]
