"""Settings that travel from training to a study's rows (audit 24, helper G).

Runs trained with another ``--train-classes`` (another test split), input size, loss parameters,
weight decay ... are other objectives of a study, never seeds of one; a reference row is the
untrained network whatever its file's config names; a study's ``--dataset`` other than the one a
checkpoint was trained on does not inherit that checkpoint's split or folder."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from embedscope.cli import main
from embedscope.study.run import run_study

FAST = {"measures": ["R@1", "rho"], "figures": False, "n_boot": 0, "workers": 0, "echo": lambda s: None}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Four untrained (--epochs 0) digits runs: margin / contrastive x --train-classes 6 / 8, seed 0."""
    d = tmp_path_factory.mktemp("runs")
    for loss in ("margin", "contrastive"):
        for tc in (6, 8):
            assert main(["train", "--dataset", "digits", "--loss", loss, "--train-classes", str(tc), "--embed-dim", "4",
                         "--epochs", "0", "-o", str(d / f"{loss}_tc{tc}.pt"), "--no-progress"]) == 0
    return d


def _r1(X, y):
    """Leave-one-out cosine 1-NN hit rate (docs/methods.md §1), brute force."""
    X = np.asarray(X, dtype=np.float64)
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    S = U @ U.T
    np.fill_diagonal(S, -np.inf)
    return float((y[np.argmax(S, 1)] == y).mean())


def test_runs_with_another_train_classes_are_other_objectives(runs, emb_cache, tmp_path):
    from embedscope.data import get_dataset
    from embedscope.embed import embed_images
    from embedscope.models import load_checkpoint

    out = tmp_path / "study"
    res = run_study(str(runs / "*.pt"), out, epoch="last", cache_dir=emb_cache, **FAST)
    df = pd.read_csv(out / "runs.csv")
    trained = df[df.selection != "untrained"]
    assert len(trained) == 4 and (df.status == "ok").all()
    assert sorted(trained["train_classes"]) == [6, 6, 8, 8]
    assert {"image_size", "loss_params", "weight_decay", "optimizer", "lr_schedule", "distance"} <= set(df.columns)
    # four objectives of one run each (the margin runs of 6 and 8 training classes are no two seeds of one)
    objs = {o["objective"]: o["n_seeds"] for o in res["stats"]["objectives"]}
    assert len(objs) == 4 and set(objs.values()) == {1}, objs
    assert trained["objective"].nunique() == 4
    # the numbers: each row on its own split, against a brute-force R@1 of the checkpoint
    for _, r in trained.iterrows():
        model, cfg, _ = load_checkpoint(r["checkpoint"])
        ds = get_dataset("digits", train_classes=int(r["train_classes"]))
        X = embed_images(model, ds, progress=False)
        te = ds.split == "test"
        assert r["N_test"] == te.sum() == (ds.labels >= r["train_classes"]).sum()
        assert r["R@1"] == _r1(X[te], ds.labels[te])
    # the runs' settings reach the table as one cell each (a mapping as JSON text)
    cl = trained[trained.loss == "contrastive"].iloc[0]
    assert json.loads(cl["loss_params"]) == load_checkpoint(cl["checkpoint"])[1]["loss_params"]
    assert set(trained["image_size"]) == {8} and set(trained["weight_decay"]) == {0.0004}


def test_finished_rows_of_an_earlier_version_keep_their_objective(runs, emb_cache, tmp_path):
    """Rows written before the columns existed are finished rows: read back, they get the columns
    from the checkpoint's config instead of becoming objectives of their own (None vs 6)."""
    out = tmp_path / "study"
    run_study(str(runs / "*.pt"), out, epoch="last", cache_dir=emb_cache, **FAST)
    new = ("train_classes", "image_size", "distance", "loss_params", "weight_decay", "optimizer", "lr_schedule",
           "weights", "frozen_bn")
    rows = sorted((out / "rows").glob("*.json"))
    for p in rows[:2]:  # two rows as an earlier version wrote them; the others measured now
        r = json.loads(p.read_text())
        p.write_text(json.dumps({k: v for k, v in r.items() if k not in new}))
    (out / "correlations.json").unlink()
    res = run_study(str(runs / "*.pt"), out, epoch="last", cache_dir=emb_cache, **FAST)
    assert res["computed"] == []
    objs = {o["objective"]: o["n_seeds"] for o in res["stats"]["objectives"]}
    assert len(objs) == 4 and set(objs.values()) == {1}, objs
    df = pd.read_csv(out / "runs.csv")
    assert df["train_classes"].notna().all()


def test_untrained_reference_from_epoch_000_is_labelled_untrained(runs, emb_cache, tmp_path):
    """A run that kept its epoch-000.pt: the reference row is that file, and its loss / epochs
    columns say "untrained" / 0 as a reference built by the study does (not the run's loss)."""
    src = tmp_path / "runs"
    src.mkdir()
    shutil.copy(runs / "margin_tc6.pt", src / "margin_tc6.pt")
    (src / "margin_tc6.pt.train").mkdir()
    shutil.copy(runs / "margin_tc6.pt", src / "margin_tc6.pt.train" / "epoch-000.pt")
    out = tmp_path / "study"
    run_study(str(src / "*.pt"), out, epoch="last", cache_dir=emb_cache, **FAST)
    df = pd.read_csv(out / "runs.csv")
    u = df[df.selection == "untrained"]
    assert len(u) == 1 and u["checkpoint"].iloc[0].endswith("epoch-000.pt")
    assert u["loss"].iloc[0] == "untrained" and u["epochs"].iloc[0] == 0
    assert u["train_classes"].iloc[0] == 6


def test_another_dataset_keeps_its_own_split_and_folder(runs, emb_cache, tmp_path, monkeypatch):
    """--dataset other than the checkpoint's: neither its --train-classes nor its --root apply
    (as `embed` takes them: docs/studies.md)."""
    from embedscope.data import get_dataset
    from embedscope.models import load_checkpoint, save_checkpoint
    from embedscope.study import run as study_run

    model, cfg, info = load_checkpoint(runs / "margin_tc6.pt")
    ck = tmp_path / "other.pt"  # as if trained on the 'shapes' set in a folder of its own
    save_checkpoint(ck, model, {**cfg, "dataset": "shapes", "root": str(tmp_path / "no-such-folder")},
                    extra=info["extra"])
    es, got = study_run.embed_cached(ck, dataset="digits", cache_dir=tmp_path / "cache", device="cpu")
    own = get_dataset("digits")
    assert got["data"][1] is None and got["data"][2] is None
    assert (es.split == "test").sum() == (own.split == "test").sum()
    # the checkpoint's own data set: its split, as trained (and its folder)
    es6, got6 = study_run.embed_cached(runs / "margin_tc6.pt", cache_dir=tmp_path / "cache", device="cpu")
    assert got6["data"][2] == 6 and (es6.split == "test").sum() == (own.labels >= 6).sum()
    # a study row: the folder a task carries (the checkpoint's) is not passed for another data set
    seen = []

    def fake(path, **kw):
        seen.append(kw["root"])
        raise study_run.EmbedscopeError("stop")

    monkeypatch.setattr(study_run, "embed_cached", fake)
    entry = {"id": "x", "run": "x", "selection": "given", "epoch": None, "checkpoint": str(ck), "untrained": "",
             "config": {**cfg, "dataset": "shapes"}, "root": str(tmp_path / "no-such-folder")}
    row = study_run.measure_entry(entry, {"dataset": "digits", "cache_dir": str(tmp_path / "cache")})
    assert row["status"] == "error" and seen == [None]
    row = study_run.measure_entry({**entry, "config": {**cfg, "dataset": "digits"}},
                                  {"dataset": "digits", "cache_dir": str(tmp_path / "cache")})
    assert seen == [None, str(tmp_path / "no-such-folder")]


def test_a_run_without_train_classes_is_labelled_none_not_nan():
    """The objective label of a run whose config has no train_classes (the data set's own split),
    beside runs with one: 'train_classes=None', as a text column's missing value reads (not 'nan')."""
    from embedscope.study.stats import _objectives

    df = pd.DataFrame({"loss": ["margin"] * 3, "seed": [0, 0, 0], "train_classes": [None, 6, 8],
                       "selection": ["final"] * 3, "run": ["a", "b", "c"], "epoch": [1, 1, 1]})
    axes, labels = _objectives(df, np.ones(3, bool))
    assert axes == ["train_classes"]
    assert labels == ["train_classes=None", "train_classes=6", "train_classes=8"]


def test_train_grid_records_train_classes_and_says_when_its_rows_mix_them(tmp_path):
    """grid.csv names each run's --train-classes and --image-size (also for rows of a grid.csv written
    before those columns, from their checkpoints), and a grid whose merged rows were trained on other
    splits says that their test R@1 do not compare."""
    import csv

    from embedscope.train.grid import read_grid_csv, train_grid

    out = tmp_path / "g"
    said: list[str] = []
    opts = {"embed_dim": 4, "epochs": 0}
    train_grid("digits", ["margin"], [0.0], [0], out, options={**opts, "train_classes": 6}, progress=False,
               echo=said.append)
    assert not any("--train-classes" in s for s in said)
    rows = read_grid_csv(out / "grid.csv")
    assert [(r["train_classes"], r["image_size"]) for r in rows] == [("6", "8")]
    # the table as an earlier version wrote it (no such columns)
    with open(out / "grid.csv", newline="") as f:
        old = list(csv.DictReader(f))
    cols = [c for c in old[0] if c not in ("train_classes", "image_size")]
    with open(out / "grid.csv", "w", newline="") as f:
        w = csv.DictWriter(f, cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(old)
    train_grid("digits", ["contrastive"], [0.0], [0], out, options={**opts, "train_classes": 8}, progress=False,
               echo=said.append)
    rows = {r["name"]: r for r in read_grid_csv(out / "grid.csv")}
    assert rows["digits_margin_p0_s0"]["train_classes"] == "6" and rows["digits_contrastive_p0_s0"]["train_classes"] == "8"
    assert rows["digits_margin_p0_s0"]["image_size"] == "8"
    mixed = [s for s in said if "--train-classes" in s]
    assert len(mixed) == 1 and "(6, 8)" in mixed[0] and "do not compare" in mixed[0]
