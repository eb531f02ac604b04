"""Thirty-fifth session's audit of studies: a checkpoint that cannot be read keeps its run's settings
(another file of the run, else what grid.csv records), so that its error row names its objective and
counts against it (was: empty settings, objective "nan p_switch=None", n_failed 0)."""

import json

import pandas as pd
import pytest

from embedscope.study.plan import plan_study
from embedscope.study.run import run_study

FAST = {"measures": ["R@1", "rho"], "figures": False, "n_boot": 0, "workers": 0, "echo": lambda s: None}


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """A train-grid folder as train-grid leaves it (grid.csv; each run's final checkpoint and its .train
    folder's best.pt), of untrained digits networks with a run's config (so that it builds in a second):
    margin / contrastive x seeds 0, 1."""
    import csv
    import shutil

    import torch

    from embedscope.models import build_model, default_config, save_checkpoint

    g = tmp_path_factory.mktemp("grid") / "g"
    g.mkdir()
    rows = []
    for loss in ("margin", "contrastive"):
        for seed in (0, 1):
            name = f"digits_{loss}_p0_s{seed}"
            torch.manual_seed(seed)
            cfg = {**default_config("digits_cnn", embed_dim=4), "loss": loss, "loss_family": "ranking",
                   "p_switch": 0.0, "seed": seed, "epochs": 1}
            save_checkpoint(g / f"{name}.pt", build_model(cfg), cfg)
            (g / f"{name}.pt.train").mkdir()
            shutil.copy(g / f"{name}.pt", g / f"{name}.pt.train" / "best.pt")
            rows.append({"name": name, "loss": loss, "loss_family": "ranking", "p_switch": "0.0", "seed": str(seed),
                         "embed_dim": "4", "normalize": "True", "train_classes": "", "image_size": "8",
                         "status": "trained", "checkpoint": f"g/{name}.pt"})
    with open(g / "grid.csv", "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return g


def _copy(grid, tmp_path):
    import shutil

    g = tmp_path / "g"
    shutil.copytree(grid, g)
    return g


def _break(path):
    data = path.read_bytes()
    path.write_bytes(data[:200])


def test_an_unreadable_best_checkpoint_keeps_its_runs_settings(grid, tmp_path):
    g = _copy(grid, tmp_path)
    _break(g / "digits_contrastive_p0_s1.pt.train" / "best.pt")
    entries = {e.id: e for e in plan_study(g, tmp_path / "plan", epoch="best")}
    bad = [e for e in entries.values() if e.error]
    assert len(bad) == 1 and bad[0].run == "digits_contrastive_p0_s1" and bad[0].selection == "best"
    good = next(e for e in entries.values() if e.run == "digits_contrastive_p0_s1" and not e.error)
    assert bad[0].config == good.config and bad[0].config["loss"] == "contrastive" and bad[0].config["seed"] == 1
    assert not bad[0].untrained  # (no reference tied to a row that is not measured)

    res = run_study(str(g), tmp_path / "st", cache_dir=tmp_path / "c", **FAST)
    assert len(res["errors"]) == 1
    runs = pd.read_csv(tmp_path / "st" / "runs.csv")
    row = runs[runs["status"] == "error"].iloc[0]
    assert (row["loss"], row["seed"], row["objective"]) == ("contrastive", 1, "contrastive")
    objs = {o["objective"]: o for o in json.loads((tmp_path / "st" / "correlations.json").read_text())["objectives"]}
    assert objs["contrastive"]["n_failed"] == 1 and objs["margin"]["n_failed"] == 0
    assert not runs["objective"].astype(str).str.contains("nan").any()


def test_a_run_with_no_readable_file_takes_its_settings_from_grid_csv(grid, tmp_path):
    g = _copy(grid, tmp_path)
    for f in [g / "digits_margin_p0_s0.pt", *(g / "digits_margin_p0_s0.pt.train").glob("*.pt")]:
        _break(f)
    bad = [e for e in plan_study(g, tmp_path / "plan", epoch="best") if e.error]
    assert bad and all(e.run == "digits_margin_p0_s0" for e in bad)
    for e in bad:
        assert e.config == {"loss": "margin", "loss_family": "ranking", "p_switch": 0.0, "seed": 0, "embed_dim": 4,
                            "normalize": True, "image_size": 8}


def test_a_lone_unreadable_file_is_labelled_by_its_run(grid, tmp_path):
    from embedscope.study.stats import _label

    assert _label({"loss": float("nan"), "p_switch": float("nan"), "run": "x"}, ["loss", "p_switch"]) \
        == "x (settings unread)"
    assert _label({"loss": "margin", "p_switch": 0.0, "run": "x"}, ["loss", "p_switch"]) == "margin p_switch=0"
