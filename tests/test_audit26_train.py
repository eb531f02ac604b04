"""Audit 26: ``train`` and ``train-grid`` read as a metric-learning researcher would (docs/training.md,
docs/methods.md §1, §2, §5).

What was wrong before:

* ``train --loss triplet --loss-param margin=0.3 --resume`` (the run's own parameter, given again) was
  refused: the saved run records the reduction (``avg_nonzero``) beside it, and the request, compared
  as typed, lacked it ("--loss-params {'margin': 0.3} (the run has {'margin': 0.3, 'avg_nonzero':
  False}) differ"); ``squared=false`` (text) against the saved False was refused the same way. So a
  ``train-grid --losses triplet --loss-param margin=0.3`` whose run was interrupted could never be
  resumed: every later call stopped with that error;
* ``train-grid --loss-param margin=0.2`` (margin's own default, given explicitly) over a finished run
  trained without it refused the run as "trained with other settings" (``loss_params: {} ->
  {'margin': 0.2}``), and a real difference was named as two whole dictionaries.

Also checked here (no change needed): the R@1 and ρ the log gives for an epoch are those of that
epoch's saved checkpoint, recomputed by brute force (cosine nearest neighbour, SVD of the training
embeddings).
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
from cli_run import run_cli

DIGITS = ["--dataset", "digits", "--embed-dim", "4", "--eval-every", "0", "--no-progress"]


def _error_line(args, rc: int) -> str:
    code, out, err = run_cli(args)
    assert code == rc, (code, out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in err, err
    return lines[0]


# ----------------------------------------------------------------------------- 1. resume with --loss-param

def test_resume_with_the_runs_own_loss_params(tmp_path):
    args = ["train", *DIGITS, "--loss", "triplet", "--loss-param", "margin=0.3", "-o", tmp_path / "t.pt"]
    rc, out, err = run_cli([*args, "--epochs", "1"])
    assert rc == 0, err
    # the run's own parameters again (also the reduction and a flag as text): continued
    rc, out, err = run_cli([*args, "--loss-param", "squared=true", "--loss-param", "avg_nonzero=false",
                            "--epochs", "2", "--resume"])
    assert rc == 0, err
    assert "resuming" in out
    with open(tmp_path / "t.csv", newline="") as f:
        assert [r["epoch"] for r in csv.DictReader(f)] == ["0", "1", "2"]
    # another value, or a parameter the loss has not: refused, naming each as the option is typed
    line = _error_line([*args, "--loss-param", "squared=false", "--epochs", "3", "--resume"], 2)
    assert "--loss-param squared=false (the run has squared=true)" in line
    line = _error_line(["train", *DIGITS, "--loss", "triplet", "--loss-param", "margin=0.25", "--epochs", "3",
                        "-o", tmp_path / "t.pt", "--resume"], 2)
    assert "--loss-param margin=0.25 (the run has margin=0.3)" in line and "--loss-params" not in line


def test_resume_of_a_run_saved_before_the_reduction_was_recorded():
    from embedscope.train.trainer import _changed_loss_params

    old = {"loss": "triplet", "loss_params": {"margin": 0.3}}  # trained with PML's mean over non-zero terms
    assert _changed_loss_params({"margin": 0.3}, old) == []
    assert _changed_loss_params({"avg_nonzero": "true"}, old) == []
    assert _changed_loss_params({"avg_nonzero": False}, old) == [
        "--loss-param avg_nonzero=false (the run has avg_nonzero=true)"]


def test_grid_resumes_an_interrupted_run_with_loss_params(tmp_path):
    from test_audit25_train import interrupted_digits_run

    grid = tmp_path / "g"
    interrupted_digits_run(grid, "triplet", loss_params={"margin": 0.3})
    rc, out, err = run_cli(["train-grid", *DIGITS, "--losses", "triplet", "--epochs", "2",
                            "--loss-param", "margin=0.3", "-o", grid])
    assert rc == 0, err
    assert "digits_triplet_p0_s0: resuming" in out
    with open(grid / "grid.csv", newline="") as f:
        row = next(csv.DictReader(f))
    assert row["status"] == "resumed" and row["epochs"] == "2"


# ----------------------------------------------------------------------------- 2. grid settings of loss_params

def test_grid_settings_compare_the_loss_parameters_trained_with():
    from embedscope.train.grid import settings_diff
    from embedscope.train.trainer import resolve_config

    plain = resolve_config({"dataset": "digits", "loss": "margin"})
    explicit = resolve_config({"dataset": "digits", "loss": "margin", "loss_params": {"margin": 0.2}})
    assert plain["loss_params"] == {} and explicit["loss_params"] == {"margin": 0.2}
    assert settings_diff(plain, explicit) == [] and settings_diff(explicit, plain) == []
    other = resolve_config({"dataset": "digits", "loss": "margin", "loss_params": {"margin": 0.3, "beta": 0.6}})
    assert settings_diff(plain, other) == ["loss_params beta: 1.2 -> 0.6", "loss_params margin: 0.2 -> 0.3"]
    # a triplet run saved before the reduction was recorded trained with avg_nonzero=true: another setting
    new = resolve_config({"dataset": "digits", "loss": "triplet"})
    old = {**new, "loss_params": {}}
    assert settings_diff(old, new) == ["loss_params avg_nonzero: True -> False"]
    # another loss: named once, as the loss
    assert settings_diff(plain, resolve_config({"dataset": "digits", "loss": "triplet"})) == [
        "loss: 'margin' -> 'triplet'"]


def test_grid_skips_a_finished_run_given_its_default_explicitly(tmp_path):
    base = ["train-grid", *DIGITS, "--losses", "margin", "--epochs", "1", "-o", tmp_path]
    rc, out, err = run_cli(base)
    assert rc == 0, err
    rc, out, err = run_cli([*base, "--loss-param", "margin=0.2"])
    assert rc == 0, err
    assert "finished already, skipped (same settings)" in out
    line = _error_line([*base, "--loss-param", "margin=0.3"], 1)
    assert "loss_params margin: 0.2 -> 0.3" in line and "trained with other settings" in line


# ----------------------------------------------------------------------------- 3. an epoch's R@1 and rho

def test_an_epochs_logged_r1_and_rho_are_those_of_its_checkpoint(tmp_path):
    """The log's R@1 (test split, cosine, docs/methods.md §1) and ρ (training split, KL of the uniform
    from the normalised singular values without the largest, §2) of epoch 1 equal a brute-force
    computation on the embeddings of epoch-001.pt."""
    import h5py

    rc, out, err = run_cli(["train", "--dataset", "digits", "--embed-dim", "8", "--epochs", "2", "--keep-epochs",
                            "--no-progress", "-o", tmp_path / "r.pt"])
    assert rc == 0, err
    with open(tmp_path / "r.csv", newline="") as f:
        rows = {r["epoch"]: r for r in csv.DictReader(f)}
    rc, out, err = run_cli(["embed", tmp_path / "r.pt.train" / "epoch-001.pt", "--dataset", "digits",
                            "-o", tmp_path / "e1.h5", "--no-progress"])
    assert rc == 0, err
    with h5py.File(tmp_path / "e1.h5", "r") as f:
        X = f["embeddings"][()].astype(np.float64)
        y = f["labels"][()]
        split = np.array([s.decode() if isinstance(s, bytes) else str(s) for s in f["split"][()]])
    te, tr = split == "test", split == "train"
    assert te.sum() > 100 and tr.sum() > 100
    # R@1: each test image's nearest other test image by cosine similarity (ties: the lower index)
    Xt, yt = X[te], y[te]
    norms = np.sqrt((Xt * Xt).sum(1))
    hits = []
    for i in range(len(Xt)):
        sims = (Xt @ Xt[i]) / (norms * norms[i])
        sims[i] = -np.inf
        arg = int(np.flatnonzero(sims == sims.max())[0])
        if (yt == yt[i]).sum() > 1:  # a lone query has no answer (docs/methods.md §1)
            hits.append(yt[arg] == yt[i])
    r1 = float(np.mean(hits))
    # rho: KL(U || p), p = s'/sum s' of the singular values without the largest
    s = np.linalg.svd(X[tr], compute_uv=False)[1:]
    p = s / s.sum()
    rho = float(np.sum(np.log((1.0 / len(p)) / p)) / len(p))
    assert float(rows["1"]["R@1"]) == pytest.approx(r1, abs=1e-12)
    assert float(rows["1"]["rho"]) == pytest.approx(rho, rel=1e-9)
    # and the epoch is that checkpoint's, not the final model's
    assert rows["1"]["R@1"] != rows["2"]["R@1"] or rows["1"]["rho"] != rows["2"]["rho"]


# ----------------------------------------------------------------------------- 4. grid lines in order

def test_grid_lines_come_in_the_order_of_the_combinations(tmp_path):
    """The n/a and finished-already lines were said before any run trained: in a log file "[4/4] ...:
    skipped" came first, then "[1/4] ...: training"."""
    args = ["train-grid", *DIGITS, "--epochs", "0", "--losses", "margin", "softmax", "--p-switch", "0.3", "0",
            "-o", tmp_path]
    rc, out, err = run_cli(args)
    assert rc == 0, err
    heads = [ln.split("]")[0] + "]" for ln in out.splitlines() if ln.startswith("[")]
    assert heads == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"], out
    assert "[3/4] digits_softmax_p0.3_s0: skipped" in out
    # a call that trains two runs before four it does not train
    args = ["train-grid", *DIGITS, "--epochs", "0", "--losses", "triplet", "softmax", "margin", "--p-switch", "0.3",
            "0", "-o", tmp_path]
    rc, out, err = run_cli(args)
    assert rc == 0, err
    lines = [ln for ln in out.splitlines() if ln.startswith("[")]
    assert [ln.split("]")[0] + "]" for ln in lines] == [f"[{i}/6]" for i in range(1, 7)], out
    assert "training" in lines[0] and "skipped (the softmax loss" in lines[2] and "finished already" in lines[5]


# ----------------------------------------------------------------------------- 5. the log names the data and input

def test_log_names_the_folder_and_input_size_of_the_run(tmp_path):
    """Logs of many runs concatenate into one table: a shapes run at 16 px of a make-shapes folder and one
    of the digits could not be told apart by their folder or input size (no root, no image_size column)."""
    from embedscope.data.shapes import write_folder
    from embedscope.train.trainer import LOG_COLUMNS, _is_training_log

    shp = tmp_path / "shp"
    write_folder(shp, 96, 16, 0, progress=False)
    rc, out, err = run_cli(["train", "--dataset", "shapes", "--root", shp, "--epochs", "0", "--eval-every", "0",
                            "--embed-dim", "4", "--batch-size", "16", "--no-progress", "-o", tmp_path / "s.pt"])
    assert rc == 0, err
    rc, out, err = run_cli(["train", *DIGITS, "--epochs", "0", "-o", tmp_path / "d.pt"])
    assert rc == 0, err
    rows = []
    for name in ("s.csv", "d.csv"):
        with open(tmp_path / name, newline="") as f:
            rows += list(csv.DictReader(f))
    assert [(r["dataset"], r["root"], r["image_size"]) for r in rows] == [
        ("shapes", str(shp.resolve()), "16"), ("digits", "", "8")]
    # a log written before these columns is still a training log (a resume continues it)
    old = tmp_path / "old.csv"
    old.write_text(",".join(LOG_COLUMNS + ["dataset", "arch", "train_classes", "weights", "notes"]) + "\n")
    assert _is_training_log(old)
