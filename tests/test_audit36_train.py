"""Audit 36 (a helper recomputing every number a training run reports): a grid.csv row summarised again
from a checkpoint retrained outside the grid kept the old row's loss and p_switch beside the new run's
numbers; `--embed-dim 1` stopped at the epoch-0 evaluation (rho undefined: an error, where the log
leaves an undefined rho empty); train-grid's table printed "None" for an empty cell."""

from __future__ import annotations

import csv
import os
import time

from cli_run import run_cli


def _grid(out, *extra, losses=("margin",)):
    return run_cli(["train-grid", "--dataset", "digits", "--losses", *losses, "--seeds", "0", "--epochs", "1",
                    "--embed-dim", "8", "-o", str(out), "--no-progress", *extra])


def test_grid_row_summarised_again_takes_the_settings_of_the_run_as_trained(tmp_path):
    rc, _, err = _grid(tmp_path / "g", losses=("margin", "softmax"))
    assert rc == 0, err
    ckpt = tmp_path / "g" / "digits_margin_p0_s0.pt"
    time.sleep(0.05)
    rc, _, err = run_cli(["train", "--force", "-o", str(ckpt), "--dataset", "digits", "--embed-dim", "8", "--epochs",
                          "1", "--seed", "0", "--loss", "triplet", "--p-switch", "0.3", "--no-progress"])
    assert rc == 0, err
    st = ckpt.stat()
    os.utime(ckpt, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # (newer than grid.csv for certain)
    rc, out, err = _grid(tmp_path / "g", losses=("softmax",))  # (another call: the margin row is merged)
    assert rc == 0, err
    assert "summarised again" in out + err
    row = next(r for r in csv.DictReader(open(tmp_path / "g" / "grid.csv")) if r["name"] == "digits_margin_p0_s0")
    log = list(csv.DictReader(open(tmp_path / "g" / "digits_margin_p0_s0.csv")))[-1]
    assert (row["loss"], float(row["p_switch"])) == ("triplet", 0.3)
    assert row["loss_family"] == "ranking" and log["loss_name"] == "triplet"


def test_embed_dim_1_trains_with_rho_left_empty(tmp_path):
    rc, out, err = run_cli(["train", "--dataset", "digits", "--embed-dim", "1", "--epochs", "1", "-o",
                            str(tmp_path / "x.pt"), "--no-progress"])
    assert rc == 0, err
    rows = list(csv.DictReader(open(tmp_path / "x.csv")))
    assert [r["rho"] for r in rows] == ["", ""] and all(r["R@1"] for r in rows)


def test_grid_table_shows_empty_cells_empty(tmp_path):
    rc, out, err = _grid(tmp_path / "g", "--eval-every", "0")
    assert rc == 0, err
    assert "None" not in out
