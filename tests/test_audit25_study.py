"""The study's loose ends (audit 25, helper S).

A ``NR-Prec:<property>`` target that the data set has not is refused before any work; the folder a
checkpoint was trained on is taken as ``embed`` takes it (its note, its error); the folder is a
column of runs.csv and part of what tells objectives apart; ρ and R@1 are the training log's to the
last bit; an objective whose seed has no value says over how many seeds its mean is; a diverged
checkpoint's error is ``embed``'s."""

import csv
import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest

from embedscope.cli import main
from embedscope.errors import EmbedscopeError, UsageError
from embedscope.study import run as study_run
from embedscope.study.run import run_study

FAST = {"measures": ["R@1", "rho"], "figures": False, "n_boot": 0, "workers": 0, "echo": lambda s: None}


def _train(*args) -> None:
    assert main(["train", *args, "--no-progress"]) == 0


@pytest.fixture(scope="module")
def digits_runs(tmp_path_factory):
    """Four untrained (--epochs 0) digits runs: margin / contrastive x seed 0 / 1 (two objectives of two seeds)."""
    d = tmp_path_factory.mktemp("digits_runs")
    for loss in ("margin", "contrastive"):
        for seed in (0, 1):
            _train("--dataset", "digits", "--loss", loss, "--seed", str(seed), "--epochs", "0",
                   "-o", str(d / f"{loss}_s{seed}.pt"))
    return d


@pytest.fixture(scope="module")
def shapes_runs(tmp_path_factory):
    """Two shapes sets in two folders (other seeds), one untrained run on each, recorded with train --root."""
    d = tmp_path_factory.mktemp("shapes_runs")
    for x, seed in (("A", 1), ("B", 2)):
        assert main(["make-shapes", "-o", str(d / f"sh{x}"), "--n-images", "96", "--size", "16", "--seed", str(seed),
                     "--no-progress"]) == 0
        _train("--dataset", "shapes", "--root", str(d / f"sh{x}"), "--embed-dim", "4", "--epochs", "0",
               "--batch-size", "16", "--image-size", "16", "-o", str(d / "runs" / f"s{x}.pt"))
    return d


@pytest.fixture()
def emb_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


# ----------------------------------------------------------------------------- 1. a property target, refused first
def test_a_property_target_the_data_set_has_not_is_refused_before_any_work(digits_runs, emb_cache, tmp_path):
    seen = []
    out = tmp_path / "study"
    with pytest.raises(UsageError, match=r"^--target NR-Prec:hue: the data set digits has no property 'hue' "
                                         r"\(no properties at all\)"):
        run_study(str(digits_runs / "*.pt"), out, target="NR-Prec:hue", cache_dir=emb_cache, on_row=seen.append,
                  **{**FAST, "measures": None})
    assert seen == [] and not out.exists()  # no row measured, no folder left behind
    # --measures naming it, with --dataset: refused before the plan
    with pytest.raises(UsageError, match=r"^--measures NR-Prec:hue: the data set digits has no property 'hue'"):
        run_study(str(digits_runs / "*.pt"), out, dataset="digits", cache_dir=emb_cache, on_row=seen.append,
                  **{**FAST, "measures": ["R@1", "NR-Prec:hue"]})
    assert seen == [] and not out.exists()


def test_a_property_target_on_the_command_line_is_one_line_exit_2(digits_runs, emb_cache, tmp_path, capsys):
    rc = main(["study", str(digits_runs / "*.pt"), "-o", str(tmp_path / "s"), "--target", "NR-Prec:hue",
               "--workers", "0", "--cache-dir", str(emb_cache), "--bootstrap", "0", "--no-figures", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith("embedscope study: error: --target NR-Prec:hue: the data set digits has no property")
    assert not (tmp_path / "s").exists()


def test_the_properties_a_data_set_fixes_are_its_loaders(shapes_runs):
    """The names the up-front check knows are those the loaders give (shapes' scene properties, none
    for the digits); CUB and Cars depend on their files: unknown (the late check)."""
    from embedscope.data import get_dataset

    assert study_run.fixed_properties("digits") == () == tuple(get_dataset("digits").properties)
    ds = get_dataset("shapes", str(shapes_runs / "shA"))
    assert sorted(study_run.fixed_properties("shapes")) == sorted(ds.properties)
    assert study_run.fixed_properties("cub") is None and study_run.fixed_properties("cars196") is None
    # a property shapes has passes; one it has not is refused, naming what it has
    study_run._check_properties("NR-Prec:obj_hue", None, ["shapes"])
    with pytest.raises(UsageError, match="no property 'gloss' \\(properties: bg_hue, .*obj_hue"):
        study_run._check_properties("NR-Prec:gloss", None, ["shapes", "digits"])
    study_run._check_properties("NR-Prec:gloss", None, ["shapes", "cub200"])  # CUB's are known only once embedded


def test_the_late_check_says_why_it_is_late():
    from embedscope.study.stats import study_statistics

    df = pd.DataFrame({"id": ["a", "b"], "status": ["ok", "ok"], "selection": ["given"] * 2, "R@1": [0.5, 0.6],
                       "NR-Prec:attr:wing": [0.1, 0.2]})
    with pytest.raises(EmbedscopeError, match="no measured embedding holds the property 'hue' \\(they hold: attr:wing; "
                                              "the properties of a cub200 or cars196 folder are known only once"):
        study_statistics(df, target="NR-Prec:hue", n_boot=0, splits={"R@1": "test", "NR-Prec:attr:wing": "test"})


# ----------------------------------------------------------------------------- 2./3. the recorded folder
def _rows(out):
    with open(out / "runs.csv", newline="", encoding="utf-8") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def test_a_recorded_folder_gone_is_embeds_error_row_and_the_others_say_their_folder(shapes_runs, emb_cache, tmp_path):
    from embedscope.embed import checkpoint_root
    from embedscope.models import load_checkpoint

    gone = shapes_runs / "shB"
    cfg_b = load_checkpoint(shapes_runs / "runs" / "sB.pt")[1]
    lines = []
    gone.rename(shapes_runs / "shB_away")
    try:
        with pytest.raises(EmbedscopeError) as want:
            checkpoint_root(cfg_b, "shapes", None)
        res = run_study(str(shapes_runs / "runs" / "*.pt"), tmp_path / "study", epoch="last", cache_dir=emb_cache,
                        **{**FAST, "echo": lines.append})
    finally:
        (shapes_runs / "shB_away").rename(gone)
    rows = _rows(tmp_path / "study")
    assert rows["sB_final"]["status"] == "error" and rows["sB_final"]["error"] == str(want.value)
    assert rows["sA_final"]["status"] == "ok"
    # the reference of the run on the missing folder fails too; the other one is measured on its folder
    refs = [r for r in rows.values() if r["selection"] == "untrained"]
    assert sorted(r["status"] for r in refs) == ["error", "ok"]
    assert len(res["errors"]) == 2
    # embed's note, once for the folder found (the run and its reference)
    assert f"note: 2 checkpoints: --root {shapes_runs / 'shA'}, the folder the checkpoint was trained on (give " \
           "--root to embed another folder's images)" in lines


def test_every_recorded_folder_gone_is_refused_before_any_work(shapes_runs, emb_cache, tmp_path):
    seen = []
    moved = [(shapes_runs / f"sh{x}", shapes_runs / f"sh{x}_away") for x in "AB"]
    for a, b in moved:
        a.rename(b)
    try:
        with pytest.raises(EmbedscopeError, match=r"^the checkpoint was trained on the shapes images in .*, which is "
                                                  r"not a folder from here: give --root .*\(no folder of the study's "
                                                  r"4 checkpoints is found\)$"):
            run_study(str(shapes_runs / "runs" / "*.pt"), tmp_path / "study", epoch="last", cache_dir=emb_cache,
                      on_row=seen.append, **FAST)
    finally:
        for a, b in moved:
            b.rename(a)
    assert seen == [] and not (tmp_path / "study").exists()


def test_the_folder_is_a_column_and_tells_objectives_apart(shapes_runs, emb_cache, tmp_path):
    """Two runs alike but for the shapes set they were trained on are two objectives (not two seeds of
    one), each against an untrained reference embedded on its own folder."""
    out = tmp_path / "study"
    res = run_study(str(shapes_runs / "runs" / "*.pt"), out, epoch="last", cache_dir=emb_cache, **FAST)
    rows = _rows(out)
    assert all(r["status"] == "ok" for r in rows.values())
    assert rows["sA_final"]["root"] == str((shapes_runs / "shA").resolve())
    assert rows["sB_final"]["root"] == str((shapes_runs / "shB").resolve())
    objs = {o["objective"]: o["n_seeds"] for o in res["stats"]["objectives"]}
    assert len(objs) == 2 and set(objs.values()) == {1}, objs
    assert "root" in res["stats"]["axes"]
    refs = {r["id"]: r for r in rows.values() if r["selection"] == "untrained"}
    assert len(refs) == 2 and {r["root"] for r in refs.values()} == {rows["sA_final"]["root"],
                                                                     rows["sB_final"]["root"]}
    assert rows["sA_final"]["untrained"] != rows["sB_final"]["untrained"]
    # each reference measured on its own folder: the same numbers as its run (both untrained, seed 0)
    for run in ("sA_final", "sB_final"):
        assert float(refs[rows[run]["untrained"]]["R@1"]) == float(rows[run]["R@1"])


def test_finished_rows_without_the_folder_take_it_from_their_config(shapes_runs, emb_cache, tmp_path):
    out = tmp_path / "study"
    run_study(str(shapes_runs / "runs" / "*.pt"), out, epoch="last", cache_dir=emb_cache, **FAST)
    for f in (out / "rows").glob("*.json"):  # as an earlier version wrote them
        r = json.loads(f.read_text())
        del r["root"]
        f.write_text(json.dumps(r))
    (out / "runs.csv").unlink()
    res = run_study(str(shapes_runs / "runs" / "*.pt"), out, epoch="last", cache_dir=emb_cache, **FAST)
    assert res["computed"] == []
    rows = _rows(out)
    assert rows["sA_final"]["root"] == str((shapes_runs / "shA").resolve())
    assert len(res["stats"]["objectives"]) == 2


# ----------------------------------------------------------------------------- 4. ρ is the log's
def test_rho_and_r1_are_the_training_logs_to_the_last_bit(digits_runs, emb_cache, tmp_path):
    out = tmp_path / "study"
    run_study(str(digits_runs / "*.pt"), out, epoch="last", cache_dir=emb_cache, **FAST)
    n = 0
    for f in (out / "rows").glob("*.json"):
        r = json.loads(f.read_text())
        if r["selection"] == "untrained":
            continue
        with open(digits_runs / f"{r['run']}.csv", newline="") as fh:
            log = list(csv.DictReader(fh))[-1]
        assert r["rho"] == float(log["rho"]) and r["R@1"] == float(log["R@1"]), (r["id"], r["rho"], log["rho"])
        n += 1
    assert n == 4
    # and the untrained references (rebuilt as the trainer initialises them) are the logs' epoch 0
    refs = [json.loads(f.read_text()) for f in (out / "rows").glob("untrained*.json")]
    assert refs
    for u in refs:
        seed = int(u["seed"])
        with open(digits_runs / f"margin_s{seed}.csv", newline="") as fh:
            log0 = list(csv.DictReader(fh))[0]
        assert u["rho"] == float(log0["rho"]) and u["R@1"] == float(log0["R@1"])


def test_each_split_is_embedded_on_its_own_in_the_trainers_batches(digits_runs):
    """_embed_splits gives each split the numbers embed_images gives that split alone (the trainer's
    evaluation), on both input paths (decoded once, or read by embed_images)."""
    from embedscope.data import get_dataset
    from embedscope.embed import checkpoint_input, embed_images
    from embedscope.models import load_checkpoint

    model, cfg, _ = load_checkpoint(digits_runs / "margin_s0.pt")
    ds = get_dataset("digits")
    tf = checkpoint_input(ds, cfg)[0]
    with study_run._one_cpu_thread():
        inputs = study_run._input_tensor("digits", None, None, 8)
        a = study_run._embed_splits(model, ds, inputs, tf, 256, "cpu")
        b = study_run._embed_splits(model, ds, None, tf, 256, "cpu")
        for split in ("train", "test"):
            ref = embed_images(model, ds.subset(split), transform=tf, batch_size=256, device="cpu", progress=False)
            assert np.array_equal(a[ds.split == split], ref) and np.array_equal(b[ds.split == split], ref)


# ----------------------------------------------------------------------------- 5./6. a seed without a value
@pytest.fixture(scope="module")
def with_diverged(digits_runs, tmp_path_factory):
    """The digits runs, one of them (contrastive, seed 1) with a NaN in its weights."""
    import torch

    from embedscope.models import load_checkpoint, save_checkpoint

    d = tmp_path_factory.mktemp("with_diverged")
    for f in digits_runs.glob("*.pt"):
        shutil.copy(f, d / f.name)
    model, cfg, info = load_checkpoint(d / "contrastive_s1.pt")
    with torch.no_grad():
        next(iter(model.parameters())).view(-1)[0] = float("nan")
    save_checkpoint(d / "contrastive_s1.pt", model, cfg, extra=info["extra"], force=True)
    return d


def test_a_diverged_checkpoints_error_is_embeds(with_diverged, emb_cache, tmp_path):
    from embedscope.data import get_dataset
    from embedscope.embed import NonFiniteEmbeddings, checkpoint_input, embed_images
    from embedscope.models import load_checkpoint

    run_study(str(with_diverged / "*.pt"), tmp_path / "study", epoch="last", cache_dir=emb_cache, **FAST)
    row = _rows(tmp_path / "study")["contrastive_s1_given"]  # (copied without its training folder: as given)
    model, cfg, _ = load_checkpoint(with_diverged / "contrastive_s1.pt")
    ds = get_dataset("digits")
    with pytest.raises(NonFiniteEmbeddings) as want:
        embed_images(model, ds, transform=checkpoint_input(ds, cfg)[0], batch_size=256, progress=False)
    assert row["status"] == "error" and row["error"] == str(want.value)[:300]
    assert "the model's weights hold NaN or inf: " in row["error"]
    assert not hasattr(study_run, "_nonfinite_weights")  # one check of the weights: embed's


def test_an_objective_with_a_failed_seed_says_over_how_many_seeds_it_is(with_diverged, emb_cache, tmp_path):
    """The mean of an objective is over its seeds with a value, said: the hand computation from runs.csv."""
    from embedscope.study.stats import study_notes

    out = tmp_path / "study"
    res = run_study(str(with_diverged / "*.pt"), out, epoch="last", cache_dir=emb_cache, **FAST)
    df = pd.read_csv(out / "runs.csv")
    objs = {o["objective"]: o for o in res["stats"]["objectives"]}
    assert set(objs) == {"margin", "contrastive"}
    for name, o in objs.items():
        mine = df[(df.loss == name) & (df.selection == "given")]
        ok = mine[mine.status == "ok"]
        for m in ("R@1", "rho"):
            vals = [float(v) for v in ok[m]]
            assert o[m] == pytest.approx(sum(vals) / len(vals), rel=1e-15)
            assert o[f"{m}_n"] == len(vals)
            sd = math.sqrt(sum((v - sum(vals) / len(vals)) ** 2 for v in vals) / (len(vals) - 1)) \
                if len(vals) > 1 else float("nan")
            assert (math.isnan(sd) and math.isnan(o[f"{m}_sd"])) or o[f"{m}_sd"] == pytest.approx(sd, rel=1e-12)
        assert o["n_seeds"] == len(ok) and o["n_failed"] == int((mine.status == "error").sum())
    assert objs["contrastive"]["n_failed"] == 1 and objs["contrastive"]["n_seeds"] == 1
    assert objs["margin"]["n_failed"] == 0 and objs["margin"]["n_seeds"] == 2
    notes = study_notes(res["stats"])
    assert "1 objective averages fewer seeds than it has (each mean and sd is over the seeds with a value; " \
           "correlations.json 'objectives': <measure>_n, n_failed): contrastive (1 more seed failed (error rows))" \
           in notes


def test_a_seed_with_an_undefined_measure_is_counted():
    """One seed of three with no rho: the mean and sd over the other two, rho_n = 2, a note; R@1 over three."""
    from embedscope.study.stats import study_notes, study_statistics

    rho = [0.5, float("nan"), 0.7, 0.2, 0.3, 0.4]
    r1 = [0.9, 0.8, 0.7, 0.4, 0.5, 0.6]
    df = pd.DataFrame({"id": [f"r{i}" for i in range(6)], "status": "ok", "selection": "given",
                       "loss": ["a"] * 3 + ["b"] * 3, "seed": [0, 1, 2] * 2, "R@1": r1, "rho": rho})
    st = study_statistics(df, target="R@1", n_boot=0, splits={"R@1": "test", "rho": "train"})
    a = {o["objective"]: o for o in st["objectives"]}["a"]
    assert a["n_seeds"] == 3 and a["rho_n"] == 2 and a["R@1_n"] == 3 and a["n_failed"] == 0
    assert a["rho"] == (0.5 + 0.7) / 2 and a["rho_sd"] == pytest.approx(math.sqrt(((0.5 - 0.6) ** 2 + (0.7 - 0.6) ** 2)))
    assert a["R@1"] == pytest.approx((0.9 + 0.8 + 0.7) / 3, rel=1e-15)
    assert any(line.endswith(": a (rho over 2 of 3 seeds)") for line in study_notes(st))
    assert not any("b (" in line for line in study_notes(st))
