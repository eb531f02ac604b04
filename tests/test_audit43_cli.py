"""Audit 43, a fresh user's audit of ``import``, ``evaluate``, ``info``, ``add-properties``, ``properties``
and three leftovers.

What was wrong before:

1. ``train --force`` whose output (or log, or a file of its run folder) is a symbolic link replaced the link
   by the new file and left the file it named as it was, where every other output (``atomic_output``) is
   written through the link; and a failing write of its journal (a full disk) before the earlier run's files
   were set aside deleted them.
2. ``import``'s labels/split/paths/class-names given as a named pipe, a folder or a device: "no such file"
   (they exist), where the source itself is "not a regular file"; a ``.txt`` pipe read by ``read_vector``
   waited for a writer, for ever.
3. ``add-properties`` kept a read-only check of its own beside ``store.update_properties``' one: now one rule
   (the store's), in the command's words.
4. ``properties`` of a split holding one image: "X needs at least 2 row(s) and 1 column, got shape (1, D)",
   naming no file.
5. ``evaluate`` of several files, one of them (or its reference split) of a single class: "the query labels must
   hold at least 2 classes, got 1", naming no file.
6. ``add-properties`` whose table is a named pipe waited for a writer, for ever.
7. ``import``: "split have 3 entries", "property 'w' have 3 entries" (the labels and paths "have").
8. ``import --embeddings PREFIX*`` matching a text column: "the embeddings must be numbers, got object", naming no
   column.
"""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
from conftest import snapshot

from embedscope import fileio
from embedscope.errors import EmbedscopeError
from embedscope.train import trainer


# ------------------------------------------------------------------ 1. train --force through a link
@pytest.fixture
def linked_run(tmp_path):
    """An earlier run whose checkpoint and log are symbolic links to files in real/, and its run folder."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "m.pt").write_text("old checkpoint")
    (tmp_path / "real" / "m.csv").write_text("old log")
    os.symlink("real/m.pt", tmp_path / "link.pt")
    os.symlink("real/m.csv", tmp_path / "link.csv")
    paths = trainer.run_paths(tmp_path / "link.pt")
    paths["dir"].mkdir()
    paths["last"].write_text("old last")
    return paths


def _first_write(paths, fail=False):
    with trainer._Replacement(paths, True).writing():
        fileio.write_text(paths["last"], "new last", force=True)  # as the trainer writes: atomic_output
        fileio.write_text(paths["log"], "new log", force=True)
        fileio.write_text(paths["out"], "new checkpoint", force=True)
        if fail:
            raise KeyboardInterrupt


def test_train_force_writes_through_a_link_and_keeps_it(linked_run):
    root = linked_run["out"].parent
    _first_write(linked_run)
    assert os.readlink(root / "link.pt") == "real/m.pt" and os.readlink(root / "link.csv") == "real/m.csv"
    assert (root / "real" / "m.pt").read_text() == "new checkpoint"
    assert (root / "real" / "m.csv").read_text() == "new log"
    assert linked_run["last"].read_text() == "new last"
    assert not [k for k in snapshot(root) if k.endswith((".old", ".tmp", ".json"))], snapshot(root)


def test_a_failed_train_force_through_a_link_puts_the_earlier_files_back(linked_run):
    root = linked_run["out"].parent
    before = snapshot(root)
    with pytest.raises(KeyboardInterrupt):
        _first_write(linked_run, fail=True)
    assert snapshot(root) == before
    assert os.path.islink(root / "link.pt") and os.path.islink(root / "link.csv")


def test_a_killed_train_force_through_a_link_is_put_back(linked_run, monkeypatch):
    """The journal names the files set aside (the links' targets); the recovery puts them back."""
    root = linked_run["out"].parent
    before = snapshot(root)

    class Killed(BaseException):
        pass

    def killed(*a, **k):  # the process 'dies' during its rollback: nothing is put back by it
        raise Killed

    with pytest.raises(Killed):
        with trainer._Replacement(linked_run, True).writing():
            fileio.write_text(linked_run["out"], "partial", force=True)
            monkeypatch.setattr(trainer, "_clear_run", killed)
            raise KeyboardInterrupt
    monkeypatch.setattr(fileio, "pid_alive", lambda pid: False)  # (this process stands for the killed one)
    assert (root / "real" / "m.pt").read_text() == "partial"
    notes = []
    trainer._recover_replacement(linked_run, notes.append)
    assert notes and snapshot(root) == before
    assert os.path.islink(root / "link.pt")


def test_train_force_whose_journal_cannot_be_written_keeps_the_earlier_run(tmp_path, monkeypatch):
    paths = trainer.run_paths(tmp_path / "m.pt")
    paths["out"].write_text("old checkpoint")
    paths["log"].write_text("old log")
    paths["dir"].mkdir()
    paths["last"].write_text("old last")
    before = snapshot(tmp_path)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fileio, "write_text", full)
    with pytest.raises(OSError):
        with trainer._Replacement(paths, True).writing():
            pass
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------ 2. import: a side file that is no regular file
@pytest.fixture
def arrays(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    np.save("X.npy", np.eye(4, 3, dtype=np.float32))
    np.save("y.npy", np.array([0, 0, 1, 1]))
    return tmp_path


@pytest.mark.parametrize("kind", ["fifo", "folder"])
@pytest.mark.parametrize("option", ["labels", "split", "paths", "class_names"])
def test_import_names_a_side_file_that_is_no_regular_file(arrays, kind, option):
    from embedscope.importers import import_embeddings

    side = "side.txt"
    os.mkfifo(side) if kind == "fifo" else os.mkdir(side)
    kw = {"labels": "y.npy", option: side}
    with pytest.raises(EmbedscopeError) as e:
        import_embeddings("X.npy", **kw)
    msg = str(e.value)
    assert "no such file" not in msg and side in msg, msg
    assert ("a directory" if kind == "folder" else "not a regular file") in msg, msg


def _errors_of_a_pipe_read(read, fifo) -> list[str]:
    """The one-line errors of ``read(fifo)``, run in a thread; a read that waits for a writer (for ever) fails
    the test (a writer that closes at once lets the thread end)."""
    import threading

    got = []

    def run():
        try:
            read(fifo)
        except EmbedscopeError as e:
            got.append(str(e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(10)
        pytest.fail(f"{read.__name__} waited on a named pipe")
    return got


def test_read_vector_refuses_a_named_pipe(arrays):
    from embedscope.importers import read_vector

    os.mkfifo("y.txt")  # (its read waited for a writer, for ever)

    def read_labels(path):
        return read_vector(path, "labels")

    got = _errors_of_a_pipe_read(read_labels, "y.txt")
    assert got and "not a regular file" in got[0], got


# ------------------------------------------------------------------ 3. add-properties: one read-only rule
def test_add_properties_uses_the_stores_read_only_rule(tmp_path, monkeypatch):
    """The store's check decides (here it refuses a writable file); the command's wording is kept."""
    from embedscope.data import properties as props
    from embedscope.store import embeddings as emb

    h5 = tmp_path / "e.h5"
    h5.write_bytes(b"")

    def refuse(path):
        raise EmbedscopeError(f"{path}: refused by the store")

    monkeypatch.setattr(emb, "_check_updatable", refuse)
    with pytest.raises(EmbedscopeError, match=r"e\.h5: the file is read-only \(no write permission\): "
                                              r"add-properties rewrites it"):
        props._check_updatable(h5)


# ------------------------------------------------------------------ 4. properties of a split of one image
@pytest.mark.parametrize("split, where", [("test", "its test split holds 1 image"), ("all", "the file holds 1 image")])
def test_properties_of_a_single_image_names_the_file(tmp_path, split, where):
    from embedscope import store
    from embedscope.analyses.image_properties import properties_of_files
    from embedscope.store.embeddings import EmbeddingSet

    h5 = tmp_path / "one.h5"
    store.save(h5, EmbeddingSet.from_arrays(np.eye(1, 3, dtype=np.float32), np.array([0]), split=["test"],
                                        properties={"w": np.array([1])}))
    with pytest.raises(EmbedscopeError) as e:  # (was "X needs at least 2 row(s) and 1 column, got shape (1, 3)")
        properties_of_files([h5], split=split)
    assert str(e.value).startswith(f"{h5}: {where}: NR-Prec ranks"), e.value


# ------------------------------------------------------------------ 5. evaluate: a file of one class among several
def _save(path, labels, split=None):
    from embedscope import store
    from embedscope.store.embeddings import EmbeddingSet

    rng = np.random.default_rng(0)
    n = len(labels)
    store.save(path, EmbeddingSet.from_arrays(rng.normal(size=(n, 3)).astype(np.float32), np.asarray(labels),
                                              split=split or ["test"] * n))
    return path


def test_evaluate_names_the_file_whose_split_holds_one_class(tmp_path):
    from embedscope.analyses.retrieval import evaluate_many

    good = _save(tmp_path / "good.h5", [0, 0, 1, 1])
    one = _save(tmp_path / "one.h5", [0, 0, 0, 0])
    with pytest.raises(EmbedscopeError) as e:  # (was "the query labels must hold at least 2 classes, got 1")
        evaluate_many([good, one], include=["R@1"])
    assert str(e.value).startswith(f"{one}: its test split holds one class only"), e.value
    sep = _save(tmp_path / "sep.h5", [0, 1, 0, 0], split=["query", "query", "gallery", "gallery"])
    with pytest.raises(EmbedscopeError, match=r"sep\.h5: its gallery split holds one class only: every reference"):
        evaluate_many([sep], query_split="query", reference_split="gallery", include=["R@1"])


# ------------------------------------------------------------------ 6. add-properties: a table that is a named pipe
def test_add_properties_refuses_a_table_that_is_a_named_pipe(tmp_path):
    """(Its first read, of the table's signature, waited for a writer, for ever.)"""
    from embedscope.data.properties import read_property_table

    fifo = tmp_path / "t.csv"
    os.mkfifo(fifo)
    got = _errors_of_a_pipe_read(read_property_table, fifo)
    assert got == [f"{fifo} is not a regular file (a device, a named pipe or a socket), expected a table "
                   "(CSV, TSV or Parquet)"], got


# ------------------------------------------------------------------ 7. import: a split or property of another length
@pytest.mark.parametrize("what, kw, said", [
    ("split", {"split": "s"}, "split has 3 entries"),
    ("property", {"properties": ["w"]}, "property 'w' has 3 entries"),
    ("labels", {}, "labels have 3 entries"),
])
def test_import_length_messages_agree_in_number(tmp_path, what, kw, said):
    from embedscope.importers import import_embeddings

    src = tmp_path / "s.npz"
    y = np.array([0, 0, 1, 1])
    arrays = {"embeddings": np.eye(4, 2, dtype=np.float32), "labels": y[:3] if what == "labels" else y,
              "s": np.array(["test"] * 3), "w": np.arange(3)}
    np.savez(src, **arrays)
    with pytest.raises(EmbedscopeError) as e:  # (was "split have 3 entries", "property 'w' have 3 entries")
        import_embeddings(src, **kw)
    assert f"{said} but there are 4 embedding rows" in str(e.value), e.value


# ------------------------------------------------------------------ 8. import --embeddings PREFIX* over a text column
def test_import_prefix_over_a_text_column_names_it(tmp_path):
    import pandas as pd

    from embedscope.importers import import_embeddings

    src = tmp_path / "t.csv"
    pd.DataFrame({"path": list("abcd"), "label": [0, 0, 1, 1], "c0": [1.0, 2, 3, 4], "c1": [0.5, 1, 2, 3],
                  "colour": ["red", "red", "blue", "blue"]}).to_csv(src, index=False)
    with pytest.raises(EmbedscopeError) as e:  # (was "the embeddings must be numbers, got object")
        import_embeddings(src, embeddings="c*")
    assert str(e.value) == (f"{src}: --embeddings c* takes colour too, which is not numeric: name the embedding "
                            "columns by a prefix that only they share"), e.value
    es = import_embeddings(src, embeddings="c0*")  # the prefix of the numeric ones only: fine
    assert es.embeddings.shape == (4, 1)
