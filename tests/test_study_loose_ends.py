"""Loose ends of the study package (each test fails on the code before its fix, but for the one that
says it pins behaviour kept)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from test_audit40_study import _rows  # (rows of a study over data sets, losses and seeds)

from embedscope.study.stats import study_notes, study_statistics

SPLITS = {"rho": "train", "pi_ratio": "train"}


# ------------------------------------------------------------------------------------ figure names
def test_the_figure_names_are_one_list_and_the_command_line_imports_no_matplotlib():
    from embedscope.study.run import STUDY_FIGURES
    from embedscope.viz.study import FIGURES

    assert tuple(name for name, _ in FIGURES) == STUDY_FIGURES
    code = ("import sys\n"
            "from embedscope.cli import main\n"
            "try:\n    main(['study', '--help'])\nexcept SystemExit:\n    pass\n"
            "import embedscope.cli.study, embedscope.study.run\n"
            "from embedscope.study.run import STUDY_FIGURES, stale_figures\n"
            "print('matplotlib' in sys.modules, any(m.startswith('matplotlib.') for m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-2:] == ["False", "False"]
    # (before: the names were written twice, in embedscope.viz.study and embedscope.study.run)
    import inspect

    import embedscope.viz.study as viz

    assert '"fig5_structure_vs_target"' not in inspect.getsource(viz)


# ------------------------------------------------------------------------------- measured data sets
def test_study_statistics_takes_the_data_sets_the_runs_were_measured_on():
    rows = _rows(("cub200", "cars196"))
    trained = study_statistics(pd.DataFrame(rows), n_boot=0, splits=SPLITS)
    assert trained["datasets"] == ["cars196", "cub200"]
    assert any("2 data sets" in line for line in study_notes(trained))
    # study --dataset cub200: every run measured on CUB (before: study_statistics took no such argument,
    # and finish_study replaced what it computed)
    one = study_statistics(pd.DataFrame(rows), n_boot=0, splits=SPLITS,
                           measured={r["id"]: "cub200" for r in rows})
    assert one["datasets"] == ["cub200"] and not any("data sets" in line for line in study_notes(one))
    # a run left out by --exclude is not counted; a row that does not say (None) counts as trained
    part = study_statistics(pd.DataFrame(rows), n_boot=0, splits=SPLITS, exclude=["dataset==cars196"],
                            measured={r["id"]: (None if r["dataset"] == "cub200" else "shapes") for r in rows})
    assert part["datasets"] == ["cub200"]


# ------------------------------------------------------------------------ the report's stale figures
def test_the_report_names_the_figures_of_an_earlier_run(tmp_path):
    from embedscope.study.report import build_report
    from embedscope.study.run import STUDY_FIGURES, finish_study

    d = tmp_path / "study"
    d.mkdir()
    finish_study(d, _rows(), n_boot=0, seed=1, figures=True)
    finish_study(d, _rows(seed=1), n_boot=0, seed=1, figures=False)  # the same study again, --no-figures
    (d / "study.json").write_text(json.dumps({"settings": {"source": "runs/", "epoch": "best", "metric": "cosine",
                                                           "seed": 1, "device": "cpu"}, "versions": {}}))
    page = build_report(d)
    assert "<img" not in page  # (left out, as before)
    # (before: not named at all)
    assert f"figures/ also holds {STUDY_FIGURES[0]}.png, {STUDY_FIGURES[0]}.pdf" in page
    assert "not drawn from these statistics" in page


# ------------------------------------------------------------------------------ a failed client close
class _Runner:
    def __init__(self):
        self.stopped = False

    def stop(self):
        self.stopped = True


class _Client:
    def __init__(self, error):
        self.error, self.status, self._loop_runner = error, "running", _Runner()

    def close(self):
        raise self.error


class _Cluster:
    def __init__(self):
        self.closed = False

    def close(self, timeout=None):
        self.closed = True


def _box(client, cluster):
    from concurrent.futures import Future, ThreadPoolExecutor

    from embedscope.study.run import _ClusterBox

    box = _ClusterBox(1, None)
    loud = []
    fut = Future()
    fut.set_result((cluster, client, lambda: loud.append(True)))
    box._fut, box._pool = fut, ThreadPoolExecutor(1)
    return box, loud


def test_a_client_whose_close_fails_still_gets_its_cluster_closed():
    """(Behaviour kept: passes on the code before too.)"""
    client, cluster = _Client(RuntimeError("closing failed")), _Cluster()
    box, loud = _box(client, cluster)
    box.close()  # no exception escapes
    assert cluster.closed and loud == [True]
    assert client.status == "closed" and client._loop_runner.stopped
    # a Ctrl-C while closing: the cluster is closed too, then the interrupt raised
    client, cluster = _Client(KeyboardInterrupt()), _Cluster()
    box, loud = _box(client, cluster)
    with pytest.raises(KeyboardInterrupt):
        box.close()
    assert cluster.closed and loud == [True] and client._loop_runner.stopped


def test_the_private_attributes_of_a_client_are_each_used_only_where_they_are():
    class Frozen(_Client):  # a distributed whose Client.status cannot be set (a read-only property)
        status = property(lambda self: "closing")

        def __init__(self, error):
            self.error, self._loop_runner = error, _Runner()

    client, cluster = Frozen(RuntimeError("closing failed")), _Cluster()
    box, _ = _box(client, cluster)
    box.close()
    assert cluster.closed
    assert client._loop_runner.stopped  # (before: skipped once setting status failed)

    class Bare:  # a distributed without either attribute
        def close(self):
            raise RuntimeError("closing failed")

    cluster = _Cluster()
    box, loud = _box(Bare(), cluster)
    box.close()
    assert cluster.closed and loud == [True]


# ------------------------------------------------------------------------------------ Ctrl-C's rows
def test_a_task_stopped_by_ctrl_c_in_a_worker_thread_is_not_an_error_row(monkeypatch):
    import signal
    import threading

    import embedscope.study.run as run_mod
    from embedscope import progress

    def embed_cached(*a, **k):  # a progress step of the embedding, in the worker thread
        progress.check_signals()
        raise AssertionError("not reached")

    monkeypatch.setattr(run_mod, "embed_cached", embed_cached)
    task = {"id": "a@best", "run": "a", "selection": "best", "epoch": 1, "checkpoint": "/nowhere/a.pt",
            "untrained": None, "config": {"dataset": "digits"}}
    got = []
    progress.note_signal(signal.SIGINT)
    try:
        t = threading.Thread(target=lambda: got.append(run_mod.measure_entry(task, {"cache_dir": "/nowhere"})))
        t.start()
        t.join()
    finally:
        progress.clear_signals()
    assert got[0]["status"] == run_mod.STOPPED  # (before: "error", "stopped by Ctrl-C before this work was done")


def test_a_study_stopped_by_ctrl_c_writes_no_error_row_for_it(two_checkpoints, tmp_path, monkeypatch):
    import signal
    import threading

    import embedscope.study.run as run_mod
    from embedscope import progress

    real = run_mod.measure_entry

    def measure_entry(task, settings):  # the Ctrl-C arrives while a worker thread measures the first row
        progress.note_signal(signal.SIGINT)
        out = []
        t = threading.Thread(target=lambda: out.append(real(task, settings)))
        t.start()
        t.join()
        return out[0]

    monkeypatch.setattr(run_mod, "measure_entry", measure_entry)
    d = tmp_path / "study"
    try:
        with pytest.raises(KeyboardInterrupt):  # (before: an error row per checkpoint, and the study went on)
            run_mod.run_study(str(two_checkpoints / "*.pt"), d, workers=0, cache_dir=tmp_path / "cache", n_boot=0,
                              measures=["R@1", "rho"], figures=False, progress=False, echo=lambda s: None)
    finally:
        progress.clear_signals()
    assert list((d / "rows").glob("*.json")) == []
    assert not (d / "runs.csv").exists()


# ------------------------------------------------------------------- checkpoint configs read once
def test_a_plan_reads_a_checkpoint_config_again_only_when_its_file_changed(tmp_path, monkeypatch):
    import os

    from conftest import save_digits_checkpoint

    import embedscope.study.plan as plan

    monkeypatch.setattr(plan, "RACY_NS", 0)  # (files just written recorded: test_audit41_study2 for the margin)
    d = tmp_path / "ck"
    d.mkdir()
    for seed in (1, 2):
        save_digits_checkpoint(d / f"net{seed}.pt", seed=seed)
    reads, builds = [], []
    real_read, real_build = plan._read_config, plan.build_untrained
    monkeypatch.setattr(plan, "_read_config", lambda p: reads.append(p.name) or real_read(p))
    monkeypatch.setattr(plan, "build_untrained", lambda *a, **k: builds.append(a[1].name) or real_build(*a, **k))
    known: dict = {}
    src, out, udir = str(d / "*.pt"), tmp_path / "study", tmp_path / "untrained"
    first = [e.to_dict() for e in plan.plan_study(src, out, untrained_dir=udir, known=known)]
    assert sorted(reads) == ["net1.pt", "net2.pt"] and len(builds) == 1  # (one untrained network: seed 0)
    known = json.loads(json.dumps(known))  # (as the study folder keeps it)
    reads.clear(), builds.clear()
    again = [e.to_dict() for e in plan.plan_study(src, out, untrained_dir=udir, known=known)]
    assert again == first and reads == [] and builds == []  # nothing loaded (before: every file, with torch)
    # net2.pt written over in place with another config of the same size, its modification time put
    # back (same inode, size and mtime: only its ctime tells): read again, its new config taken
    import torch

    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(2)
    cfg = default_config("digits_cnn", embed_dim=8)
    save_checkpoint(tmp_path / "other.pt", build_model(cfg), {**cfg, "loss": "xxxxxxxx"})
    st = os.stat(d / "net2.pt")
    new = (tmp_path / "other.pt").read_bytes()
    assert len(new) == st.st_size
    with open(d / "net2.pt", "r+b") as f:
        f.write(new)
    os.utime(d / "net2.pt", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(d / "net2.pt").st_ino == st.st_ino
    after = {e.run: e for e in plan.plan_study(src, out, untrained_dir=udir, known=known)}
    assert reads == ["net2.pt"]
    assert after["net2"].config["loss"] == "xxxxxxxx" and after["net1"].config.get("loss") != "xxxxxxxx"
    # an untrained network deleted since: built again
    reads.clear(), builds.clear()
    for f in udir.glob("*.pt"):
        f.unlink()
    plan.plan_study(src, out, untrained_dir=udir, known=known)
    # (its config read from the checkpoint it was planned from: the record's, from JSON, pickles other bytes)
    assert reads == ["net1.pt"] and len(builds) == 1


def test_what_a_plan_keeps_of_extra_selects_the_same_epoch():
    from embedscope.study.plan import _epoch_of, _slim_extra

    for extra in ({}, {"epoch": 3}, {"epoch": 3, "metrics": {"best": {"epoch": 2, "R@1": 0.5}, "last": {}}},
                  {"epoch": 3, "metrics": {"best": {}}}, {"epoch": 3, "metrics": {"best": {"epoch": None}}},
                  {"epoch": 4, "metrics": {}, "weights_sha256": "ab", "history": [1, 2]}):
        slim = _slim_extra(extra)
        assert slim is not None and json.loads(json.dumps(slim)) == slim
        for sel in ("best", "final", "epoch"):
            assert _epoch_of(slim, sel) == _epoch_of(extra, sel)
        assert slim.get("weights_sha256") == extra.get("weights_sha256")
    assert _slim_extra({"metrics": [1]}) is None


def test_a_study_run_again_with_nothing_to_measure_imports_no_torch(two_checkpoints, tmp_path):
    code = ("import sys\n"
            "import embedscope.study.plan\n"
            "embedscope.study.plan.RACY_NS = 0\n"  # (checkpoints written just before: recorded all the same)
            "from embedscope.study.run import run_study\n"
            f"res = run_study({str(two_checkpoints / '*.pt')!r}, {str(tmp_path / 'st')!r}, workers=0, "
            f"cache_dir={str(tmp_path / 'cache')!r}, n_boot=0, measures=['R@1', 'rho'], figures=False, "
            "progress=False, echo=lambda s: None)\n"
            "print(len(res['rows']), len(res['computed']), 'torch' in sys.modules)\n")
    run = [sys.executable, "-c", code]
    first = subprocess.run(run, capture_output=True, text=True, check=True).stdout.split()
    assert first == ["3", "3", "True"]  # (two checkpoints and their untrained network)
    again = subprocess.run(run, capture_output=True, text=True, check=True).stdout.split()
    assert again == ["3", "0", "False"]  # (before: True, ~2 s of a 3 s run importing torch to read configs)
    assert (tmp_path / "st" / "checkpoint_configs.json").is_file()
    from embedscope.study.plan import read_known

    kept = set(read_known(tmp_path / "st" / "checkpoint_configs.json"))
    gone = sorted(two_checkpoints.glob("*.pt"))[0]
    assert str(gone.resolve()) in {str(Path(k).resolve()) for k in kept} and len(kept) == 3
    gone.rename(gone.with_suffix(".moved"))  # a checkpoint no longer in the study: its record is dropped
    try:
        subprocess.run(run, capture_output=True, text=True, check=True)
        left = {str(Path(k).resolve()) for k in read_known(tmp_path / "st" / "checkpoint_configs.json")}
        assert str(gone.resolve()) not in left and len(left) == 2, left
    finally:
        gone.with_suffix(".moved").rename(gone)
    meta = json.loads((tmp_path / "st" / "study.json").read_text())
    import torch

    assert meta["versions"]["torch"] == str(torch.__version__)  # (read without importing it)
