"""train-grid: grid.csv merges across calls, a stored run with other settings is refused (or retrained
with --force), and grid.csv names the best checkpoint, MAP@R and the untrained network's R@1."""

import csv

from embedscope.cli import main

BASE = ["train-grid", "--dataset", "digits", "--epochs", "1", "--eval-every", "1", "--no-progress"]


def _rows(path):
    return {r["name"]: r for r in csv.DictReader(open(path))}


def test_grid_merges_compares_settings_and_reports_paths(tmp_path, capsys):
    out = str(tmp_path / "runs")
    assert main(BASE + ["--losses", "contrastive", "--seeds", "0", "--embed-dim", "8", "-o", out]) == 0
    # a second call into the same folder keeps the first call's row
    assert main(BASE + ["--losses", "softmax", "--seeds", "0", "--embed-dim", "8", "-o", out]) == 0
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
