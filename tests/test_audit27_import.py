"""Audit 27 (helper C): ``embedscope import`` of an ``.h5`` or ``.npz`` reads only what it uses.

What was wrong before: ``read_source`` read every dataset of an HDF5 file and every array of an
``.npz`` into memory, those the import did not use too: a file that also held its raw images (a
65 MB ``images`` array here, stored compressed in a few hundred kB) was read whole. The arrays are
now read when used (``importers._LazyColumns``), their shapes taken from the files' headers; an
``.npz`` array of Python objects is still refused, from its header (nothing is unpickled), and a
used array that cannot be read is the same one-line error as before.
"""

from __future__ import annotations

import tracemalloc
import zipfile

import h5py
import numpy as np
import pytest

from embedscope.cli import main
from embedscope.errors import EmbedscopeError
from embedscope.importers import import_embeddings

N, D = 1000, 8
IMAGES = (N, 256, 256)  # uint8: 65.5 MB when read
MB = 1 << 20


def _arrays():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, D)).astype(np.float32)
    y = np.arange(N) % 7
    paths = np.array([f"img_{i:04d}.jpg" for i in range(N)])
    return X, y, paths


def _peak(fn, read: list):
    """fn's result and the peak of the memory it allocated (numpy's arrays are traced) when called a
    second time, ``read`` emptied before it (the first imports modules: torch's import alone allocates ~65 MB)."""
    fn()
    read.clear()  # (what the traced call reads)
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture
def h5_with_images(tmp_path):
    X, y, paths = _arrays()
    p = tmp_path / "tool.h5"
    with h5py.File(p, "w") as f:
        f["embeddings"] = X
        f["labels"] = y
        f["paths"] = paths.astype("S")
        f.create_dataset("raw/images", shape=IMAGES, dtype=np.uint8, chunks=(16, 256, 256), compression="gzip",
                         fillvalue=0)
        f["raw/features2"] = np.ones((N, 4), dtype=np.float32)  # another 2-D array: named in the note, not read
    return p


def test_h5_reads_only_the_datasets_used(h5_with_images, monkeypatch):
    X, y, paths = _arrays()
    read = []
    real = h5py.Dataset.__getitem__

    def spy(self, args, *a, **kw):
        read.append(self.name)
        return real(self, args, *a, **kw)

    monkeypatch.setattr(h5py.Dataset, "__getitem__", spy)

    def run():
        notes: list[str] = []
        return import_embeddings(h5_with_images, notes=notes), notes

    (es, notes), peak = _peak(run, read)
    assert sorted(read) == ["/embeddings", "/labels", "/paths"]  # each once; never the images
    assert peak < 8 * MB, peak  # (before: above 65 MB, the images read)
    assert es.embeddings.tobytes() == X.tobytes()
    assert np.array_equal(es.labels, y) and es.paths.tolist() == paths.tolist()
    assert notes == ["embeddings: key 'embeddings' (1000 x 8); also present: raw/features2 (name another with "
                     "--embeddings)"]


def test_h5_a_dataset_named_is_read_and_an_unreadable_one_is_the_same_error(tmp_path, monkeypatch):
    X, y, _ = _arrays()
    p = tmp_path / "t.h5"
    with h5py.File(p, "w") as f:
        f["emb"] = X
        f["y"] = y
        f["bad"] = np.array([b"ok"] * (N - 1) + [b"\xff\xfe"])  # not UTF-8 text
    es = import_embeddings(p, labels="y")  # (before: refused for 'bad', which it does not use)
    assert es.embeddings.tobytes() == X.tobytes()
    with pytest.raises(EmbedscopeError) as e:
        import_embeddings(p, labels="y", paths="bad")
    assert str(e.value).startswith(f"{p}: cannot read as hdf5: 'utf-8' codec can't decode byte 0xff")
    assert "\n" not in str(e.value)


@pytest.fixture
def npz_with_images(tmp_path):
    X, y, paths = _arrays()
    p = tmp_path / "tool.npz"
    np.savez_compressed(p, embeddings=X, labels=y, paths=paths, images=np.zeros(IMAGES, dtype=np.uint8),
                        other=np.ones((N, 3)))
    assert p.stat().st_size < 2 * MB
    return p


def test_npz_reads_only_the_arrays_used(npz_with_images, monkeypatch):
    X, y, paths = _arrays()
    read = []
    real = np.lib.npyio.NpzFile.__getitem__
    monkeypatch.setattr(np.lib.npyio.NpzFile, "__getitem__", lambda self, k: read.append(k) or real(self, k))
    es, peak = _peak(lambda: import_embeddings(npz_with_images), read)
    assert sorted(read) == ["embeddings", "labels", "paths"]
    assert peak < 8 * MB, peak  # (before: above 65 MB)
    assert es.embeddings.tobytes() == X.tobytes()
    assert np.array_equal(es.labels, y) and es.paths.tolist() == paths.tolist()


def test_npz_import_cli_output(npz_with_images, tmp_path, capsys):
    from embedscope import store

    out = tmp_path / "o.h5"
    assert main(["import", str(npz_with_images), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "also present: other" in text and f"wrote {out}" in text
    es = store.load(out)
    assert es.embeddings.shape == (N, D) and es.attrs["import_embedding_key"] == "embeddings"


_UNPICKLED: list[str] = []


def _mark(what: str) -> str:
    _UNPICKLED.append(what)
    return what


class _Sneaky:
    def __reduce__(self):
        return (_mark, ("ran",))


def test_npz_object_array_still_refused_and_never_unpickled(tmp_path):
    X, y, _ = _arrays()
    p = tmp_path / "obj.npz"
    np.savez(p, embeddings=X, labels=y, meta=np.array([_Sneaky()], dtype=object))  # 'meta' is not used
    _UNPICKLED.clear()
    with pytest.raises(EmbedscopeError, match=r"obj.npz: cannot read as npz: holds Python objects \(pickled\); "
                                              "import reads plain arrays only$"):
        import_embeddings(p)
    assert _UNPICKLED == []


def test_npz_corrupt_array_used_is_the_one_line_error(tmp_path):
    X, y, _ = _arrays()
    X[:] = 1.5  # float32 0x3fc00000: findable in the (uncompressed) archive
    p = tmp_path / "crc.npz"
    np.savez(p, embeddings=X, labels=y, unused=np.ones((N, 2)))
    data = bytearray(p.read_bytes())
    at = data.index(np.float32(1.5).tobytes() * 4)
    data[at + 2] ^= 0x01  # the array's bytes changed, its CRC not
    p.write_bytes(bytes(data))
    with zipfile.ZipFile(p) as zf:
        assert zf.testzip() == "embeddings.npy"
    with pytest.raises(EmbedscopeError) as e:
        import_embeddings(p)
    assert str(e.value) == f"{p}: cannot read as npz (BadZipFile: Bad CRC-32 for file 'embeddings.npy')"


def test_npz_header_only_keys_choose_the_embeddings(tmp_path):
    """Without a known name, the one 2-D array is the embedding: found from the headers (the other
    arrays 1-D), as before; two 2-D arrays ask which."""
    X, y, _ = _arrays()
    p = tmp_path / "k.npz"
    np.savez(p, vecs=X, labels=y, ids=np.arange(N))
    es = import_embeddings(p)
    assert es.embeddings.tobytes() == X.tobytes() and es.attrs["import_embedding_key"] == "vecs"
    np.savez(p, vecs=X, more=X, labels=y)
    with pytest.raises(EmbedscopeError, match="which array holds the embeddings"):
        import_embeddings(p)


def test_h5_empty_dataspace_and_scalars_are_no_trouble(tmp_path):
    """A dataset of an empty dataspace (``h5py.Empty``) and a scalar, not used: the import goes on, as before."""
    X, y, _ = _arrays()
    p = tmp_path / "e.h5"
    with h5py.File(p, "w") as f:
        f["embeddings"] = X
        f["labels"] = y
        f.create_dataset("nothing", data=h5py.Empty("f4"))
        f["epoch"] = 7
    es = import_embeddings(p)
    assert es.embeddings.tobytes() == X.tobytes() and np.array_equal(es.labels, y)
