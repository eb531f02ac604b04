"""train-grid: grid.csv merges across calls, a stored run with other settings is refused (or retrained
with --force), and grid.csv names the best checkpoint, MAP@R and the untrained network's R@1."""

import csv

import pytest

from embedscope.cli import main

BASE = ["train-grid", "--dataset", "digits", "--epochs", "1", "--eval-every", "1", "--no-progress"]


def _rows(path):
    return {r["name"]: r for r in csv.DictReader(open(path))}


def test_grid_merges_compares_settings_and_reports_paths(tmp_path, capsys):
    out = str(tmp_path / "runs")
    assert main(BASE + ["--losses", "contrastive", "--seeds", "0", "--embed-dim", "8", "-o", out]) == 0
    assert "grid.csv\n" in capsys.readouterr().out  # a new grid.csv: nothing merged
    # a second call into the same folder keeps the first call's row
    assert main(BASE + ["--losses", "softmax", "--seeds", "0", "--embed-dim", "8", "-o", out]) == 0
    assert "grid.csv (merged with its earlier rows)" in capsys.readouterr().out
    rows = _rows(tmp_path / "runs" / "grid.csv")
    assert set(rows) == {"digits_contrastive_p0_s0", "digits_softmax_p0_s0"}
    r = rows["digits_contrastive_p0_s0"]
    assert r["embed_dim"] == "8" and r["status"] == "trained"
    assert r["best_checkpoint"].endswith("digits_contrastive_p0_s0.pt.train/best.pt")
    assert (tmp_path / "runs" / "digits_contrastive_p0_s0.pt.train" / "best.pt").exists()
    assert 0 < float(r["untrained_R@1"]) <= 1 and 0 < float(r["best_R@1"]) <= 1
    capsys.readouterr()
    # same settings: skipped; other settings (D = 16 over D = 8): refused, nothing trained
    assert main(BASE + ["--losses", "contrastive", "--seeds", "0", "--embed-dim", "8", "-o", out]) == 0
    assert "finished already, skipped" in capsys.readouterr().out
    assert main(BASE + ["--losses", "contrastive", "--seeds", "0", "--embed-dim", "16", "-o", out]) == 1
    err = capsys.readouterr().err
    assert "other settings" in err and "embed_dim: 8 -> 16" in err and "--force" in err
    assert _rows(tmp_path / "runs" / "grid.csv")["digits_contrastive_p0_s0"]["embed_dim"] == "8"
    # --force retrains it with the new settings and says so
    assert main(BASE + ["--losses", "contrastive", "--seeds", "0", "--embed-dim", "16", "-o", out, "--force"]) == 0
    assert "retraining (other settings, --force)" in capsys.readouterr().out
    rows = _rows(tmp_path / "runs" / "grid.csv")
    assert rows["digits_contrastive_p0_s0"]["embed_dim"] == "16"
    assert rows["digits_contrastive_p0_s0"]["status"] == "retrained"
    assert "digits_softmax_p0_s0" in rows


def _weights(path):
    from embedscope.models import read_checkpoint

    return read_checkpoint(path)["state_dict"]


def test_grid_workers_train_the_same_runs_as_serial(tmp_path, capsys):
    """--workers 2: each run in a worker process of its own, with the numbers of a serial run with
    the same thread count (weights bit for bit, the same grid.csv values), and its messages prefixed."""
    import torch

    from embedscope.device import available_cpus, torch_threads
    from embedscope.metrics.search import search_threads
    from embedscope.train.grid import train_grid

    opts = {"epochs": 2, "eval_every": 1, "embed_dim": 8}
    threads = max(1, available_cpus() // 2)  # what each of 2 workers gets
    with torch_threads(threads), search_threads(threads):
        serial = train_grid("digits", ["contrastive", "softmax"], [0.0], [0], tmp_path / "serial", options=opts,
                            progress=False, echo=lambda s: None)
    lines = []
    par = train_grid("digits", ["contrastive", "softmax"], [0.0], [0], tmp_path / "par", options=opts,
                     progress=False, workers=2, echo=lines.append)
    assert [r["name"] for r in par] == [r["name"] for r in serial] == ["digits_contrastive_p0_s0", "digits_softmax_p0_s0"]
    assert f"training 2 runs in 2 worker processes ({threads} thread" in lines[0]
    assert any(s.startswith("digits_softmax_p0_s0: epoch 2/2") for s in lines)
    for a, b in zip(serial, par):
        assert b["status"] == "trained"
        for k in ("best_epoch", "best_R@1", "best_MAP@R", "rho_at_best", "final_R@1", "untrained_R@1"):
            assert a[k] == b[k], (a["name"], k, a[k], b[k])
        wa, wb = _weights(a["checkpoint"]), _weights(b["checkpoint"])
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert set(_rows(tmp_path / "par" / "grid.csv")) == {r["name"] for r in par}
    # a second call skips both runs without starting workers
    lines.clear()
    train_grid("digits", ["contrastive", "softmax"], [0.0], [0], tmp_path / "par", options=opts, progress=False,
               workers=2, echo=lines.append)
    assert len(lines) == 2 and all("finished already, skipped" in s for s in lines)


def test_grid_workers_a_failed_run_keeps_the_finished_rows(tmp_path, capsys):
    """One run fails (its checkpoint name is taken by a folder): the other running one still trains,
    its row is merged into grid.csv, no further run starts, and the command ends with the failure's
    one-line error."""
    out = tmp_path / "runs"
    (out / "digits_softmax_p0_s0.pt").mkdir(parents=True)
    rc = main(BASE + ["--losses", "contrastive", "softmax", "margin", "--seeds", "0", "--embed-dim", "8",
                      "-o", str(out), "--workers", "2"])
    cap = capsys.readouterr()
    assert rc == 2 and "digits_softmax_p0_s0.pt: is a folder" in cap.err and "Traceback" not in cap.err
    assert cap.err.count("\n") == 1
    rows = _rows(out / "grid.csv")
    assert set(rows) == {"digits_contrastive_p0_s0"} and rows["digits_contrastive_p0_s0"]["status"] == "trained"
    assert not list(out.glob("digits_margin_p0_s0*"))  # never started
    with pytest.raises(SystemExit) as e:
        main(BASE + ["--losses", "contrastive", "--seeds", "0", "-o", str(out), "--workers", "0"])
    assert e.value.code == 2 and "--workers" in capsys.readouterr().err


def test_grid_workers_a_killed_worker_is_an_error_not_a_hang(tmp_path):
    """A worker process that dies (here SIGKILL, as the kernel's OOM killer would) ends the grid with
    a one-line error naming the run; the other run finishes and its row is merged."""
    import multiprocessing
    import os
    import signal
    import threading
    import time

    from embedscope.errors import EmbedscopeError
    from embedscope.train.grid import train_grid

    box = {}

    def go():
        try:
            train_grid("digits", ["contrastive", "softmax"], [0.0], [0], tmp_path / "runs", workers=2,
                       options={"epochs": 6, "eval_every": 3, "embed_dim": 8}, progress=False,
                       echo=lambda s: None)
        except BaseException as e:  # noqa: BLE001 - checked below
            box["error"] = e

    t = threading.Thread(target=go)
    t.start()
    victim = None
    deadline = time.monotonic() + 60
    while victim is None and time.monotonic() < deadline:
        victim = next((p for p in multiprocessing.active_children() if p.name.endswith("digits_softmax_p0_s0")), None)
        time.sleep(0.05)
    assert victim is not None
    os.kill(victim.pid, signal.SIGKILL)
    t.join(180)
    assert not t.is_alive()
    e = box.get("error")
    assert isinstance(e, EmbedscopeError), e
    assert "digits_softmax_p0_s0: its training process ended without a result (killed by signal 9" in str(e)
    assert set(_rows(tmp_path / "runs" / "grid.csv")) == {"digits_contrastive_p0_s0"}


def test_grid_workers_on_a_gpu_say_that_the_runs_share_it(tmp_path, monkeypatch):
    """With CUDA as the device, --workers > 1 says that the runs share the one GPU (and still trains
    them); on the CPU it says nothing of the kind."""
    import embedscope.device
    import embedscope.train.grid as grid

    class _Cuda:
        type = "cuda"

    calls = []
    monkeypatch.setattr(grid, "_train_parallel", lambda jobs, *a: calls.append(len(jobs)))
    for dev, expect in ((_Cuda(), True), (embedscope.device.CPU, False)):
        monkeypatch.setattr(embedscope.device, "compute_device", lambda d, dev=dev: dev)
        said = []
        grid.train_grid("digits", ["contrastive", "softmax"], [0.0], [0], tmp_path / f"runs-{dev.type}",
                        options={"epochs": 1, "embed_dim": 8}, workers=2, progress=False, echo=said.append)
        assert any("share the GPU" in s for s in said) is expect, said
    assert calls == [2, 2]


def test_more_workers_than_cpus_says_they_share_them(tmp_path, monkeypatch):
    """--workers above the CPU count gave each process one thread and said nothing of the crowding."""
    import embedscope.device
    from embedscope.train.grid import train_grid

    monkeypatch.setattr(embedscope.device, "available_cpus", lambda: 1)
    lines = []
    rows = train_grid("digits", ["contrastive", "softmax"], [0.0], [0], tmp_path / "g",
                      options={"epochs": 0, "embed_dim": 8}, progress=False, workers=2, echo=lines.append)
    assert [r["status"] for r in rows] == ["trained", "trained"]
    assert lines[0] == ("training 2 runs in 2 worker processes (1 thread each; 2 runs at a time on 1 CPU share "
                        "them, each slower (--workers 1 is usually faster))")
