"""Audit 21: `embedscope study` on a cluster, stopped and resumed. A --scheduler that is not an address
(or given with --workers) is a usage error before any work; a scheduler without workers says that the
study waits for one; a study stopped before it wrote study.json resumes; the local worker processes
ignore Ctrl-C (the study's process stops them); a run that names no `objective` tag in a YAML file
that tags others keeps its objective; a worker that cannot see a checkpoint says so."""

import os
import signal
import threading
import time

import pandas as pd
import pytest

from embedscope.cli import main
from embedscope.study.run import measure_entry, run_study

MEASURED = ["R@1", "rho"]


@pytest.mark.parametrize("address", ["foo", "http://127.0.0.1:8786", "127.0.0.1:87x6", ""])
def test_a_scheduler_that_is_not_an_address_is_a_usage_error_before_any_work(two_checkpoints, tmp_path, capsys,
                                                                               address):
    rc = main(["study", str(two_checkpoints / "*.pt"), "-o", str(tmp_path / "st"), "--scheduler", address,
               "--cache-dir", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "--scheduler" in err
    assert not (tmp_path / "st").exists() and not (tmp_path / "c").exists()


def test_workers_with_a_scheduler_is_a_usage_error(two_checkpoints, tmp_path, capsys):
    for extra in (["--workers", "4"], ["--worker-processes"]):
        rc = main(["study", str(two_checkpoints / "*.pt"), "-o", str(tmp_path / "st"), "--scheduler",
                   "tcp://127.0.0.1:8786", *extra])
        err = capsys.readouterr().err
        assert rc == 2 and "not with --scheduler" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "st").exists()


def test_a_scheduler_without_workers_says_so_and_the_study_goes_on_when_one_joins(two_checkpoints, tmp_path):
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster:
        out = {}
        t = threading.Thread(daemon=True, target=lambda: out.update(res=run_study(
            str(two_checkpoints / "*.pt"), tmp_path / "st", scheduler=cluster.scheduler_address, epoch="last",
            measures=MEASURED, n_boot=0, figures=False, cache_dir=tmp_path / "c", echo=lambda s: None,
            notice=notes.append)))
        notes = []
        t.start()
        deadline = time.monotonic() + 30
        while not notes and time.monotonic() < deadline and t.is_alive():
            time.sleep(0.1)
        assert len(notes) == 1 and "has no workers yet: waiting" in notes[0], notes
        assert cluster.scheduler_address in notes[0]
        cluster.scale(1)  # a worker joins: the study measures its rows and finishes
        t.join(120)
        assert not t.is_alive()
    assert not out["res"]["errors"] and len(out["res"]["computed"]) == 3  # 2 checkpoints + untrained


def test_a_study_stopped_before_it_wrote_study_json_resumes(two_checkpoints, tmp_path):
    """Ctrl-C between the rows/ folder and study.json (while the plan or the cluster starts) leaves an
    empty rows/; the same command then goes on instead of calling the folder 'not a study folder'."""
    (tmp_path / "st" / "rows").mkdir(parents=True)
    res = run_study(str(two_checkpoints / "*.pt"), tmp_path / "st", workers=0, epoch="last", measures=MEASURED,
                    n_boot=0, figures=False, cache_dir=tmp_path / "c", echo=lambda s: None)
    assert not res["errors"] and (tmp_path / "st" / "study.json").is_file()
    # anything else in the folder is still not taken for a study
    (tmp_path / "other" / "rows").mkdir(parents=True)
    (tmp_path / "other" / "notes.txt").write_text("mine\n")
    from embedscope.errors import EmbedscopeError

    with pytest.raises(EmbedscopeError, match="not a study folder"):
        run_study(str(two_checkpoints / "*.pt"), tmp_path / "other", workers=0, epoch="last", n_boot=0,
                  figures=False, cache_dir=tmp_path / "c", echo=lambda s: None)
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine\n"


def test_a_worker_that_cannot_see_the_checkpoint_says_so(tmp_path):
    missing = str(tmp_path / "elsewhere" / "net.pt")
    entry = {"id": "net", "run": "net", "selection": "given", "epoch": None, "checkpoint": "net.pt", "path": missing,
             "untrained": "", "config": {}, "tags": {}}
    row = measure_entry(entry, {"cache_dir": str(tmp_path / "c"), "remote": True})
    assert row["status"] == "error" and row["checkpoint"] == "net.pt"
    assert missing in row["error"] and "on the Dask worker" in row["error"] and "same paths" in row["error"]


def test_a_run_without_the_objective_tag_keeps_its_objective():
    """A YAML file that tags some checkpoints with `objective` and not others: the untagged runs are
    grouped by their settings, never dropped from the objective-level statistics."""
    from embedscope.study.stats import study_statistics

    rows = []
    for i, (loss, obj) in enumerate([("margin", None), ("margin", None), ("triplet", "T"), ("triplet", "T"),
                                     ("ms", "M"), ("ms", "M")]):
        r = {"id": f"r{i}", "run": f"r{i}", "selection": "given", "status": "ok", "loss": loss, "seed": i % 2,
             "R@1": 0.5 + 0.05 * i, "rho": 0.3 - 0.02 * i + 0.001 * (i % 2)}
        if obj is not None:
            r["tag:objective"] = obj
        rows.append(r)
    st = study_statistics(pd.DataFrame(rows), n_boot=0, splits={"R@1": "test", "rho": "train"})
    assert st["n_points"]["objectives"] == 3 and st["n_points"]["runs"] == 6
    assert sorted(o["objective"] for o in st["objectives"]) == ["M", "T", "margin"]
    assert all(isinstance(o, str) and o for o in st["_runs"]["objective"])


@pytest.mark.slow
def test_local_worker_processes_ignore_ctrl_c(two_checkpoints, tmp_path):
    """Ctrl-C on a terminal reaches the whole process group: the worker processes must not die with a
    KeyboardInterrupt traceback under their tasks (the study's own process handles it)."""
    import psutil

    hit = []

    def interrupt_workers(row):
        if hit:
            return
        kids = [p for p in psutil.Process().children(recursive=True) if "spawn_main" in " ".join(p.cmdline())
                and "resource_tracker" not in " ".join(p.cmdline())]
        hit.extend(kids)
        for p in kids:
            os.kill(p.pid, signal.SIGINT)
        time.sleep(1.0)

    out = {}
    t = threading.Thread(daemon=True, target=lambda: out.update(res=run_study(
        str(two_checkpoints / "*.pt"), tmp_path / "st", workers=1, worker_processes=True, epoch="last",
        measures=MEASURED, n_boot=0, figures=False, cache_dir=tmp_path / "c", echo=lambda s: None,
        on_row=interrupt_workers)))
    t.start()
    t.join(90)  # (a worker that died of the SIGINT leaves its task waiting)
    assert hit, "no worker process found"
    assert not t.is_alive(), "the study did not finish after its worker processes got SIGINT"
    res = out["res"]
    assert not res["errors"], res["errors"]
    assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in hit)  # closed with the cluster


def test_the_library_gives_its_notice_as_a_warning_and_prints_nothing(capsys):
    """run_study without notice=: the scheduler-without-workers line is a RuntimeWarning (a library
    prints nothing of its own; the CLI prints it on stderr)."""
    from embedscope.study.run import _say_if_no_workers, _warn

    class Client:
        def scheduler_info(self):
            return {"workers": {}}

    with pytest.warns(RuntimeWarning, match="has no workers yet"):
        _say_if_no_workers(Client(), "tcp://h:1", _warn)
    assert capsys.readouterr() == ("", "")
