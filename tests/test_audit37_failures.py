"""Session 37, failure injection: interrupted and concurrent writers (each test fails on the code before
its fix)."""

from __future__ import annotations

import errno
import json
import shutil
import threading

import numpy as np
import pytest
from conftest import save_digits_checkpoint

from embedscope.errors import EmbedscopeError

FAST = {"measures": ["R@1", "rho"], "figures": False, "n_boot": 0, "workers": 0}


def test_a_study_stopped_before_its_statistics_is_not_taken_as_up_to_date(tmp_path, emb_cache):
    """runs.csv written with a new row, then the study stopped (disk full, Ctrl-C) before correlations.json:
    the next run printed 'the statistics are up to date' and kept the earlier run's statistics."""
    from embedscope.study.run import run_study

    ck = tmp_path / "ck"
    ck.mkdir()
    save_digits_checkpoint(ck / "a.pt", seed=1)
    out = tmp_path / "study"
    run_study(str(ck / "*.pt"), out, cache_dir=emb_cache, echo=lambda s: None, **FAST)
    stale = (out / "correlations.json").read_text()
    save_digits_checkpoint(ck / "b.pt", seed=2)
    run_study(str(ck / "*.pt"), out, cache_dir=emb_cache, echo=lambda s: None, **FAST)
    fresh = json.loads((out / "correlations.json").read_text())
    (out / "correlations.json").write_text(stale)  # as a stop between runs.csv and correlations.json left it
    lines = []
    res = run_study(str(ck / "*.pt"), out, cache_dir=emb_cache, echo=lines.append, **FAST)
    assert not any("up to date" in ln for ln in lines), lines
    again = json.loads((out / "correlations.json").read_text())
    assert again["n_points"] == fresh["n_points"] != json.loads(stale)["n_points"]
    assert res["stats"]["n_points"]["rows"] == again["n_points"]["rows"]
    # and a finished study is still served as it is
    lines = []
    run_study(str(ck / "*.pt"), out, cache_dir=emb_cache, echo=lines.append, **FAST)
    assert any("up to date" in ln for ln in lines), lines


def test_a_file_size_limit_names_the_output(tmp_path):
    from embedscope.fileio import atomic_output

    target = tmp_path / "e.json"
    with pytest.raises(EmbedscopeError, match=r"e\.json: cannot be written \(File too large\)"):
        with atomic_output(target):
            raise OSError(errno.EFBIG, "File too large")
    with pytest.raises(EmbedscopeError, match=r"e\.json: cannot be written \(the write stopped short"):
        with atomic_output(target):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 548864 vs 548756")
    assert list(tmp_path.iterdir()) == []
    # another file's error (an input read while writing) is not reported as the output's
    with pytest.raises(FileNotFoundError):
        with atomic_output(target):
            open(tmp_path / "missing.txt")


def test_a_damaged_untrained_reference_is_built_again(tmp_path):
    import torch

    from embedscope.models import read_checkpoint
    from embedscope.study.plan import build_untrained

    cfg = read_checkpoint(save_digits_checkpoint(tmp_path / "c.pt", seed=3))["config"]
    out = tmp_path / "untrained.pt"
    out.write_bytes(b"")  # a zero-byte file in the cache: every study failed that row, --force included
    build_untrained(cfg, out)
    assert isinstance(torch.load(out, map_location="cpu", weights_only=True), dict)


def test_a_second_train_into_a_run_being_written_is_refused(tmp_path):
    from embedscope.fileio import folder_lock
    from embedscope.train.trainer import run_paths, train

    out = tmp_path / "r.pt"
    run_dir = run_paths(out, None)["dir"]
    run_dir.mkdir()
    with folder_lock(run_dir, "the run"):  # another train holding the run (its first epoch under way)
        with pytest.raises(EmbedscopeError, match="another process is writing it now"):
            train({"dataset": "digits", "embed_dim": 4, "epochs": 1, "eval_every": 0}, out, progress=False,
                  echo=lambda s: None)
    assert not out.exists() and list(run_dir.iterdir()) == []


def test_two_add_properties_at_once_keep_both(tmp_path):
    """Each copied the file without the other's property, and the later replace won."""
    from embedscope.data.properties import add_properties_to_file
    from embedscope.store import EmbeddingSet, save

    rng = np.random.default_rng(0)
    paths = [f"img{i}.png" for i in range(40)]
    es = EmbeddingSet.from_arrays(rng.normal(size=(40, 3)), np.repeat(np.arange(4), 10), paths=paths)
    h5 = save(tmp_path / "x.h5", es)
    tables = []
    for name in ("propA", "propB"):
        t = tmp_path / f"{name}.csv"
        t.write_text("path," + name + "\n" + "".join(f"{p},{i % 3}\n" for i, p in enumerate(paths)))
        tables.append(t)
    errors = []
    barrier = threading.Barrier(2)

    def add(t):
        barrier.wait()
        try:
            add_properties_to_file(h5, t)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    for _ in range(3):
        threads = [threading.Thread(target=add, args=(t,)) for t in tables]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors
        assert set(EmbeddingSet.load(h5).properties) == {"propA", "propB"}
        assert sorted(p.name for p in tmp_path.iterdir()) == ["propA.csv", "propB.csv", "x.h5"]
        shutil.copyfile(h5, tmp_path / "y")
        save(h5, es, force=True)  # without the properties again
        (tmp_path / "y").unlink()


def test_a_checkpoint_that_cannot_be_loaded_for_memory_or_a_read_error_says_so(tmp_path, monkeypatch):
    import torch

    from embedscope.models.checkpoint import read_checkpoint

    ck = save_digits_checkpoint(tmp_path / "c.pt")
    for exc, want in ((MemoryError(), "not enough memory to load this checkpoint"),
                      (OSError(errno.EIO, "Input/output error"), "cannot be read (Input/output error)")):
        def boom(*a, _e=exc, **k):
            raise _e
        monkeypatch.setattr(torch, "load", boom)
        with pytest.raises(EmbedscopeError, match=want.replace("(", r"\(").replace(")", r"\)")):
            read_checkpoint(ck)
