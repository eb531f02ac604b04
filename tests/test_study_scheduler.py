"""`embedscope study --scheduler ADDRESS` on a real, separately started Dask cluster (a `dask scheduler`
and a `dask worker` process, as a user starts them on a cluster): the rows equal the serial study's,
the worker measured them, and the CLI prints the scheduler it used."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

from embedscope.cli import main
from embedscope.study.run import run_study

MEASURED = ["R@1", "MAP@R", "NMI", "rho", "pi_ratio"]


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    """A `dask scheduler` and one `dask worker` (one process, one thread) in their own processes;
    the scheduler's address, read from its scheduler file."""
    d = tmp_path_factory.mktemp("dask")
    sfile = d / "scheduler.json"
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    logs = [open(d / "scheduler.log", "wb"), open(d / "worker.log", "wb")]
    procs = [subprocess.Popen([sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(sfile)],
                              stdout=logs[0], stderr=subprocess.STDOUT, env=env, cwd=d)]
    try:
        deadline = time.monotonic() + 60
        while not sfile.exists() or not sfile.read_text().strip():
            assert procs[0].poll() is None, (d / "scheduler.log").read_text()
            assert time.monotonic() < deadline, "the scheduler did not start in 60 s"
            time.sleep(0.2)
        address = json.loads(sfile.read_text())["address"]
        procs.append(subprocess.Popen([sys.executable, "-m", "dask", "worker", address, "--nworkers", "1",
                                       "--nthreads", "1", "--no-dashboard", "--local-directory", str(d / "w")],
                                      stdout=logs[1], stderr=subprocess.STDOUT, env=env, cwd=d))
        from distributed import Client

        with Client(address, timeout=60) as c:
            c.wait_for_workers(1, timeout=120)
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover
                p.kill()
        for f in logs:
            f.close()


def test_study_on_an_existing_scheduler_equals_serial(two_checkpoints, scheduler, tmp_path, capsys):
    kw = {"measures": MEASURED, "epoch": "last", "n_boot": 20, "figures": False, "echo": lambda s: None}
    pattern = str(two_checkpoints / "*.pt")
    ser = run_study(pattern, tmp_path / "serial", workers=0, cache_dir=tmp_path / "c1", **kw)
    par = run_study(pattern, tmp_path / "sched", scheduler=scheduler, cache_dir=tmp_path / "c2", **kw)
    assert not ser["errors"] and not par["errors"]
    assert par["computed"] and not any(r["cached"] for r in par["computed"])  # measured by the worker
    a = pd.read_csv(tmp_path / "serial" / "runs.csv").set_index("id").sort_index()
    b = pd.read_csv(tmp_path / "sched" / "runs.csv").set_index("id").sort_index()
    assert list(a.index) == list(b.index) and len(a) >= 2
    assert np.array_equal(a[MEASURED].to_numpy(), b[MEASURED].to_numpy())
    assert json.loads((tmp_path / "sched" / "study.json").read_text()).get("scheduler", scheduler) == scheduler

    # the command line: the same study through --scheduler (embeddings from the cache, measured again)
    rc = main(["study", pattern, "-o", str(tmp_path / "cli"), "--scheduler", scheduler, "--cache-dir",
               str(tmp_path / "c2"), "--bootstrap", "20", "--epoch", "last", "--no-figures", "--measures", *MEASURED])
    out = capsys.readouterr()
    assert rc == 0, out.err
    c = pd.read_csv(tmp_path / "cli" / "runs.csv").set_index("id").sort_index()
    assert np.array_equal(b[MEASURED].to_numpy(), c[MEASURED].to_numpy())


def test_an_unreachable_scheduler_is_one_line(two_checkpoints, tmp_path, capsys):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import dask
    import distributed  # noqa: F401 - its config defaults first: a dask.config.set of a 'distributed.*' key
    # made before them restores 'distributed' as absent at its exit, and the module's later Client(...) failed
    # with KeyError: 'distributed' (the next test's scheduler fixture)

    with dask.config.set({"distributed.comm.timeouts.connect": "3s"}):  # Dask's default waits 30 s
        rc = main(["study", str(two_checkpoints / "*.pt"), "-o", str(tmp_path / "st"), "--scheduler",
                   f"tcp://127.0.0.1:{port}", "--cache-dir", str(tmp_path / "c"), "--no-figures"])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"127.0.0.1:{port}" in err


def test_relative_paths_reach_a_worker_in_another_folder(two_checkpoints, scheduler, tmp_path, monkeypatch):
    """The scheduler's worker runs in its own folder: a study given relative paths (the glob, the
    cache folder) measures the same files as a serial study, instead of a row error per checkpoint."""
    monkeypatch.chdir(two_checkpoints.parent)
    kw = {"measures": MEASURED, "epoch": "last", "n_boot": 0, "figures": False, "echo": lambda s: None}
    glob = f"{two_checkpoints.name}/*.pt"
    ser = run_study(glob, tmp_path / "serial", workers=0, cache_dir=tmp_path / "c1", **kw)
    rel = run_study(glob, tmp_path / "sched", scheduler=scheduler, cache_dir=os.path.relpath(tmp_path / "c2"), **kw)
    assert not rel["errors"], rel["errors"][0]["error"]
    assert rel["computed"] and not any(r["cached"] for r in rel["computed"])  # embedded by the worker
    a = pd.read_csv(tmp_path / "serial" / "runs.csv").set_index("id").sort_index()
    b = pd.read_csv(tmp_path / "sched" / "runs.csv").set_index("id").sort_index()
    assert np.array_equal(a[MEASURED].to_numpy(), b[MEASURED].to_numpy())
    given = a["selection"] == "given"  # (the untrained references live in each study's own cache)
    assert given.sum() == 2 and list(a.loc[given, "checkpoint"]) == list(b.loc[given, "checkpoint"])  # as given
    assert (tmp_path / "c2").is_dir() and any((tmp_path / "c2").glob("*.h5"))  # the relative cache, resolved here
    assert not ser["errors"]


def test_a_worker_with_other_embedscope_code_refuses_the_rows(two_checkpoints, scheduler, tmp_path, monkeypatch):
    """A worker that imports another embedscope than the study's (an older install on a cluster node)
    would measure with other code: each row reports it (and is tried again by the next run)."""
    import embedscope.study.run as run_mod

    real = run_mod.code_fingerprint()
    assert len(real) == 16 and real == run_mod.code_fingerprint()
    monkeypatch.setattr(run_mod, "code_fingerprint", lambda: "0123456789abcdef")  # this process's code "changed"
    kw = {"measures": MEASURED, "epoch": "last", "n_boot": 0, "figures": False, "echo": lambda s: None}
    res = run_study(str(two_checkpoints / "*.pt"), tmp_path / "st", scheduler=scheduler, cache_dir=tmp_path / "c", **kw)
    assert res["errors"] and len(res["errors"]) == len(res["rows"])
    for r in res["errors"]:
        assert "other embedscope code" in r["error"] and real in r["error"] and "0123456789abcdef" in r["error"]
    assert json.loads((tmp_path / "st" / "study.json").read_text())["code"] == "0123456789abcdef"
    monkeypatch.undo()
    again = run_study(str(two_checkpoints / "*.pt"), tmp_path / "st", scheduler=scheduler, cache_dir=tmp_path / "c", **kw)
    assert not again["errors"] and len(again["computed"]) == len(res["rows"])  # the failed rows, measured now
