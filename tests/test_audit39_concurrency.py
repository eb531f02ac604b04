"""Thirty-ninth session, concurrent invocations (each test fails on the code before its fix)."""

from __future__ import annotations

import shutil
import threading
import time

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.store import EmbeddingSet, load, save


def _set(order, prop=None):
    paths = np.array([f"img{i}.png" for i in range(30)], dtype=object)[order]
    es = EmbeddingSet.from_arrays(np.random.default_rng(0).normal(size=(len(paths), 3)), np.arange(len(paths)) % 3,
                                  paths=list(paths))
    if prop is not None:
        es.properties = {"pa": np.asarray(prop)}
    return es


def test_add_properties_to_a_file_replaced_meanwhile_writes_nothing(tmp_path):
    """add-properties matched its table to the rows it read, then (its turn come) wrote the values into
    whatever file was there: a file re-embedded meanwhile got them in the wrong rows, or of the wrong length."""
    from embedscope.store.embeddings import scan, update_properties

    h5 = save(tmp_path / "x.h5", _set(np.arange(30)))
    es, _ = scan(h5)
    es.properties = {"pa": np.arange(30)}  # matched to the rows as read
    save(h5, _set(np.arange(30)[::-1]), force=True)  # embed --force: the same images, another order
    with pytest.raises(EmbedscopeError, match="replaced while the properties were being added"):
        update_properties(h5, es, ["pa"])
    assert "pa" not in load(h5).properties
    save(h5, _set(np.arange(20)), force=True)  # fewer rows
    with pytest.raises(EmbedscopeError, match="replaced while the properties were being added"):
        update_properties(h5, es, ["pa"])
    assert len(load(h5).paths) == 20


def test_a_forced_save_waits_for_an_update_of_the_file_under_way(tmp_path):
    """embed --force published while add-properties copied the file; add-properties' copy (the old rows)
    then took the new file's place, and embed's output was gone though it said 'wrote'."""
    from embedscope.fileio import update_lock

    h5 = save(tmp_path / "x.h5", _set(np.arange(30)))
    old_copy = tmp_path / "old.h5"
    shutil.copyfile(h5, old_copy)
    held = threading.Event()

    def update():  # an add-properties holding its turn: it publishes its copy of the old file last
        with update_lock(h5):
            held.set()
            time.sleep(0.5)
            shutil.copyfile(old_copy, tmp_path / "x.h5.tmp-update")
            (tmp_path / "x.h5.tmp-update").replace(h5)

    t = threading.Thread(target=update)
    t.start()
    held.wait(10)
    save(h5, _set(np.arange(30)[::-1]), force=True)  # embed --force, meanwhile
    t.join()
    assert list(load(h5).paths) == [f"img{i}.png" for i in range(30)][::-1]  # the later save's file stands


FAST = {"measures": ["R@1", "rho"], "figures": False, "n_boot": 0, "workers": 0}


def test_a_study_folder_has_one_writer_and_its_report_waits_for_it(tmp_path, emb_cache):
    """Two studies into one folder at once both passed the checks of study.json and mixed their settings'
    rows and statistics (exit 0 both); a report read during a study --force mixed two runs' files."""
    from conftest import save_digits_checkpoint

    from embedscope.errors import UsageError
    from embedscope.fileio import folder_lock, reading_lock
    from embedscope.study.report import build_report
    from embedscope.study.run import run_study

    ck = tmp_path / "ck"
    ck.mkdir()
    save_digits_checkpoint(ck / "a.pt", seed=1)
    save_digits_checkpoint(ck / "b.pt", seed=2)
    out = tmp_path / "study"
    out.mkdir()
    with folder_lock(out, "another study"):  # another study writing the folder
        with pytest.raises(EmbedscopeError, match="another process is writing it now"):
            run_study(str(ck / "*.pt"), out, cache_dir=emb_cache, echo=lambda s: None, **FAST)
    assert out.is_dir() and not (out / "study.json").exists()
    run_study(str(ck / "*.pt"), out, cache_dir=emb_cache, echo=lambda s: None, **FAST)
    assert "<html" in build_report(out)
    with folder_lock(out, "a study --force"):
        with pytest.raises(EmbedscopeError, match="a study is writing this folder now"):
            build_report(out)
    with reading_lock(out, "x"):  # another report reading it: reports share the folder
        assert "<html" in build_report(out)
    with pytest.raises(UsageError, match="is the study folder itself"):
        run_study(str(ck / "*.pt"), out, cache_dir=out, echo=lambda s: None, **FAST)


def test_two_new_runs_with_one_log_the_second_is_refused(tmp_path, monkeypatch):
    """Two train runs into other -o with one --log both passed the log's check, then each epoch's log of one
    replaced the other's (both exit 0, both naming the log): the log is claimed when the run starts."""
    import embedscope.fileio as F
    from embedscope.train.trainer import train

    log = tmp_path / "shared.csv"
    made = F.make_folders

    def other_run_claims_the_log(folder, user_path):  # the other run, between this one's checks and its lock
        log.write_text("epoch,loss\n0,1.0\n")
        return made(folder, user_path)

    monkeypatch.setattr(F, "make_folders", other_run_claims_the_log)
    with pytest.raises(EmbedscopeError, match="another run made this log meanwhile"):
        train({"dataset": "digits", "embed_dim": 4, "epochs": 1, "eval_every": 0}, tmp_path / "b.pt", log=log,
              progress=False, echo=lambda s: None)
    assert log.read_text() == "epoch,loss\n0,1.0\n"  # the other run's log, untouched
    monkeypatch.setattr(F, "make_folders", made)
    monkeypatch.setattr("embedscope.train.trainer._train_epoch", lambda *a, **k: (0.5, 0.0))
    out = tmp_path / "c.pt"  # a run alone: its log as before
    train({"dataset": "digits", "embed_dim": 4, "epochs": 1, "eval_every": 0}, out, progress=False,
          echo=lambda s: None)
    assert out.with_suffix(".csv").read_text().startswith("epoch")


def test_make_shapes_has_one_writer_of_a_folder(tmp_path, monkeypatch):
    """Two make-shapes into one folder both passed the 'already exists' check, then both wrote the set
    (exit 0 both; the folder held whichever finished last, images and table possibly of two seeds)."""
    import embedscope.data.shapes as S
    from embedscope.fileio import folder_lock

    out = tmp_path / "sh"
    out.mkdir()
    with folder_lock(out, "another make-shapes"):
        with pytest.raises(EmbedscopeError, match="another process is writing it now"):
            S.write_folder(out, n=20, size=32)
    assert out.is_dir() and not (out / "properties.csv").exists()
    real = S.generate

    def other_finishes_meanwhile(*a, **k):
        r = real(*a, **k)
        (out / "properties.csv").write_text("path,shape\n")  # another make-shapes finished while this one drew
        return r

    monkeypatch.setattr(S, "generate", other_finishes_meanwhile)
    with pytest.raises(EmbedscopeError, match="already exists"):
        S.write_folder(out, n=20, size=32)
    assert (out / "properties.csv").read_text() == "path,shape\n" and not (out / "images").exists()


def test_train_grid_merges_its_table_under_the_folder_lock(tmp_path, monkeypatch):
    """Two train-grids of other combinations into one folder at the same moment each read grid.csv without
    the other's rows, and the later write dropped them: the read-merge-write now holds the folder's update
    lock (seen held from inside the merge)."""
    import errno as _errno
    import fcntl
    import os

    import embedscope.train.grid as G

    held = []
    real = G._earlier_rows

    def earlier(out_dir, replaced, say):
        fd = os.open(out_dir, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held.append(False)
        except OSError as e:
            held.append(e.errno in (_errno.EAGAIN, _errno.EWOULDBLOCK))
        finally:
            os.close(fd)
        return real(out_dir, replaced, say)

    monkeypatch.setattr(G, "_earlier_rows", earlier)
    monkeypatch.setattr("embedscope.train.trainer._train_epoch", lambda *a, **k: (0.5, 0.0))
    G.train_grid("digits", ["contrastive"], [0.0], [0], tmp_path / "g", options={"epochs": 1, "eval_every": 0,
                 "embed_dim": 4}, progress=False, echo=lambda s: None)
    assert held == [True]
