"""Audit 27: frozen BatchNorm as the reference code, grid.csv rows without a run, extended grid runs
(docs/training.md).

What was wrong before:

* ``EmbeddingModel(frozen_bn=True)`` (the photo protocol) kept every BatchNorm layer in eval mode *and*
  its scale and shift (γ, β) fixed, out of the optimiser; Roth et al.'s code (``architectures/resnet50.py``)
  and pytorch-metric-learning / Musgrave's benchmarker (``set_layers_to_eval("BatchNorm")``) freeze only
  the running statistics and train γ and β. Now the default trains them; ``--freeze-bn-affine`` keeps
  them fixed, and a run saved before the option (``frozen_bn`` true, no ``freeze_bn_affine``) resumes and
  is compared in a grid as what it was trained with: γ and β fixed;
* ``grid.csv`` rows of combinations that train no run (``n/a``: p_switch > 0 for a tuple-less loss) named
  a checkpoint path that never exists;
* a finished grid run extended with ``train --resume --epochs N`` and stopped before epoch N was refused
  by ``train-grid --epochs N`` as "trained with other settings" (the final checkpoint of the earlier
  epochs was compared; its ``last.pt`` holds the extension, of N epochs);
* help texts said "(default X" beside "(default: X)".
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from cli_run import run_cli
from test_audit26_train import DIGITS, _error_line


def _rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ----------------------------------------------------------------------------- 1. frozen BatchNorm

def _photo_config(**extra):
    from embedscope.train.trainer import resolve_config

    return resolve_config({"dataset": "cub200", "root": "/no/such/folder", "arch": "resnet18", "embed_dim": 4,
                           **extra})


def _bns(model):
    return [m for m in model.backbone.modules() if isinstance(m, torch.nn.BatchNorm2d)]


@pytest.mark.parametrize("affine", [False, True])
def test_one_optimiser_step_trains_gamma_beta_but_never_the_statistics(affine):
    """The trainer's model and optimiser (``_build``): one step of a loss through the training forward.
    Default: γ and β are in the optimiser's model group and move; the running mean and variance do not
    (eval mode). ``freeze_bn_affine``: γ and β are out of the optimiser and stay as they were."""
    from embedscope.train.trainer import _build

    cfg = _photo_config(freeze_bn_affine=True if affine else None)
    assert cfg["frozen_bn"] is True and cfg["freeze_bn_affine"] is affine
    torch.manual_seed(0)
    model, _loss, opt, _ = _build(cfg, None, 3, torch.device("cpu"), False)
    bns = _bns(model)
    assert len(bns) == 20  # resnet18
    in_opt = {id(p) for g in opt.param_groups for p in g["params"]}
    affine_ids = {id(p) for b in bns for p in (b.weight, b.bias)}
    if affine:
        assert not affine_ids & in_opt
    else:
        assert affine_ids <= {id(p) for p in opt.param_groups[0]["params"]}  # the model's group, its weight decay
    others = {id(p) for n, p in model.named_parameters() if id(p) not in affine_ids}
    assert others <= in_opt  # the rest of the network trains either way
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.train()
    assert all(not b.training for b in bns) and model.head.training
    x = torch.randn(6, 3, 32, 32)
    loss = (model(x) * torch.linspace(-1, 1, 4)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    after = model.state_dict()
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for n in names:
        assert torch.equal(after[f"{n}.running_mean"], before[f"{n}.running_mean"])
        assert torch.equal(after[f"{n}.running_var"], before[f"{n}.running_var"])
        assert int(after[f"{n}.num_batches_tracked"]) == int(before[f"{n}.num_batches_tracked"])
    moved = [n for n in names if not torch.equal(after[f"{n}.weight"], before[f"{n}.weight"])
             or not torch.equal(after[f"{n}.bias"], before[f"{n}.bias"])]
    if affine:
        assert moved == []
    else:  # every BatchNorm layer gets a gradient (Adam moves each parameter by ~lr)
        assert moved == names
    assert not torch.equal(after["head.weight"], before["head.weight"])


def test_embedding_model_default_and_option():
    from embedscope.errors import EmbedscopeError
    from embedscope.models import EmbeddingModel, build_model

    m = EmbeddingModel("resnet18", 4, frozen_bn=True)
    m.train()
    assert all(not b.training for b in _bns(m)) and all(p.requires_grad for b in _bns(m) for p in b.parameters())
    m = EmbeddingModel("resnet18", 4, frozen_bn=True, freeze_bn_affine=True)
    m.train()
    assert all(not b.training for b in _bns(m)) and not any(p.requires_grad for b in _bns(m) for p in b.parameters())
    with pytest.raises(EmbedscopeError, match="needs frozen_bn"):
        EmbeddingModel("digits_cnn", 4, freeze_bn_affine=True)
    # a config saved before the key: gamma and beta were fixed with frozen BatchNorm, free without
    base = {"arch": "resnet18", "embed_dim": 4}
    assert not any(p.requires_grad for b in _bns(build_model({**base, "frozen_bn": True})) for p in b.parameters())
    assert all(p.requires_grad for b in _bns(build_model({**base, "frozen_bn": True, "freeze_bn_affine": False}))
               for p in b.parameters())
    assert all(p.requires_grad for b in _bns(build_model({**base, "frozen_bn": False})) for p in b.parameters())
    with pytest.raises(EmbedscopeError, match="'freeze_bn_affine' is true but 'frozen_bn' is not"):
        build_model({**base, "frozen_bn": False, "freeze_bn_affine": True})


def test_option_needs_frozen_batchnorm_and_a_boolean(tmp_path):
    line = _error_line(["train", *DIGITS, "--epochs", "0", "--freeze-bn-affine", "-o", tmp_path / "d.pt"], 2)
    assert "--freeze-bn-affine" in line and "digits_cnn on digits" in line
    (tmp_path / "r.yaml").write_text("freeze_bn_affine: maybe\n")
    line = _error_line(["train", *DIGITS, "--epochs", "0", "--config", tmp_path / "r.yaml", "-o", tmp_path / "d.pt"], 2)
    assert "freeze_bn_affine must be true or false" in line
    assert not (tmp_path / "d.pt").exists()


def _photos(root, classes=4, per_class=4):
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(classes):
        d = root / f"c{c}"
        d.mkdir(parents=True)
        for i in range(per_class):
            a = rng.integers(0, 255, (36, 40, 3), dtype=np.uint8)
            a[..., c % 3] = 200
            Image.fromarray(a).save(d / f"{i}.png")
    return root


def _photo_args(root):
    return ["--dataset", "imagefolder", "--root", root, "--train-classes", "2", "--arch", "resnet18",
            "--image-size", "32", "--embed-dim", "4", "--batch-size", "4", "--sampler", "spc-2", "--lr", "1e-3",
            "--eval-every", "0", "--no-progress", "--device", "cpu"]


def _bn_state(path):
    sd = torch.load(path, weights_only=True)["state_dict"]
    names = sorted(k[: -len(".running_var")] for k in sd if k.endswith(".running_var"))
    return sd, names


def _drop_key(path, key="freeze_bn_affine"):
    """The checkpoint as embedscope saved it before ``key`` existed (the rest unchanged)."""
    obj = torch.load(path, weights_only=True)
    obj["config"].pop(key)
    torch.save(obj, path)


def test_train_records_the_option_and_trains_or_keeps_gamma_beta(tmp_path):
    """An untrained torchvision ResNet has every γ = 1, β = 0, running mean 0 and variance 1: after an epoch
    the statistics are still exactly those (frozen), γ/β moved by default and are still 1/0 with the option."""
    root = _photos(tmp_path / "photos")
    for flag, name in (([], "a"), (["--freeze-bn-affine"], "f")):
        rc, out, err = run_cli(["train", *_photo_args(root), "--epochs", "1", *flag, "-o", tmp_path / f"{name}.pt"])
        assert rc == 0, err
        affine = bool(flag)
        assert "BatchNorm is frozen" in out and ("only the scale and shift train" in out) != affine
        ck = torch.load(tmp_path / f"{name}.pt", weights_only=True)
        assert ck["config"]["frozen_bn"] is True and ck["config"]["freeze_bn_affine"] is affine
        sd, names = _bn_state(tmp_path / f"{name}.pt")
        assert len(names) == 20
        for n in names:
            assert torch.equal(sd[f"{n}.running_mean"], torch.zeros_like(sd[f"{n}.running_mean"]))
            assert torch.equal(sd[f"{n}.running_var"], torch.ones_like(sd[f"{n}.running_var"]))
        fixed = [n for n in names if torch.equal(sd[f"{n}.weight"], torch.ones_like(sd[f"{n}.weight"]))
                 and torch.equal(sd[f"{n}.bias"], torch.zeros_like(sd[f"{n}.bias"]))]
        assert fixed == (names if affine else [])
        log = _rows(tmp_path / f"{name}.csv")
        assert [(r["frozen_bn"], r["freeze_bn_affine"]) for r in log] == [("True", str(affine))] * 2
    # a resume keeps the option (no flag needed), and refuses the other value
    rc, out, err = run_cli(["train", *_photo_args(root), "--epochs", "2", "-o", tmp_path / "f.pt", "--resume"])
    assert rc == 0, err
    (tmp_path / "off.yaml").write_text("freeze_bn_affine: false\n")
    line = _error_line(["train", *_photo_args(root), "--config", tmp_path / "off.yaml", "--epochs", "3",
                        "-o", tmp_path / "f.pt", "--resume"], 2)
    assert "freeze_bn_affine: false (the run's BatchNorm scale and shift are fixed)" in line
    line = _error_line(["train", *_photo_args(root), "--freeze-bn-affine", "--epochs", "3", "-o", tmp_path / "a.pt",
                        "--resume"], 2)
    assert "--freeze-bn-affine (the run's BatchNorm scale and shift are trained)" in line


def test_resume_of_a_run_saved_before_the_option_keeps_gamma_beta_fixed(tmp_path):
    """A run saved before the key (frozen_bn true, no freeze_bn_affine) trained with γ, β fixed: its resume
    goes on so, says it once and records the key; asking to train them is refused, never switched."""
    root = _photos(tmp_path / "photos")
    out_ = tmp_path / "old.pt"
    rc, out, err = run_cli(["train", *_photo_args(root), "--epochs", "1", "--freeze-bn-affine", "-o", out_])
    assert rc == 0, err
    for f in (out_, tmp_path / "old.pt.train" / "last.pt"):
        _drop_key(f)
    (tmp_path / "off.yaml").write_text("freeze_bn_affine: false\n")
    line = _error_line(["train", *_photo_args(root), "--config", tmp_path / "off.yaml", "--epochs", "2", "-o", out_,
                        "--resume"], 2)
    assert "freeze_bn_affine: false (the run's BatchNorm scale and shift are fixed)" in line
    rc, out, err = run_cli(["train", *_photo_args(root), "--epochs", "2", "-o", out_, "--resume"])
    assert rc == 0, err
    assert out.count("saved before embedscope trained the scale and shift") == 1 and "epoch 2/2" in out
    ck = torch.load(out_, weights_only=True)
    assert ck["config"]["freeze_bn_affine"] is True and ck["extra"]["epoch"] == 2
    sd, names = _bn_state(out_)
    for n in names:  # still exactly the initial gamma, beta (and statistics) after the resumed epoch
        assert torch.equal(sd[f"{n}.weight"], torch.ones_like(sd[f"{n}.weight"]))
        assert torch.equal(sd[f"{n}.bias"], torch.zeros_like(sd[f"{n}.bias"]))
        assert torch.equal(sd[f"{n}.running_var"], torch.ones_like(sd[f"{n}.running_var"]))
    assert [r["freeze_bn_affine"] for r in _rows(tmp_path / "old.csv")] == ["True"] * 3


def test_grid_compares_the_option_as_trained(tmp_path):
    """A grid's stored run saved before the option counts as one of --freeze-bn-affine (what it trained
    with): a grid without the flag refuses it naming the setting (and how to continue it), one with the
    flag skips it. Digits runs of that time (BatchNorm trained) are no other setting."""
    from embedscope.train.grid import settings_diff
    from embedscope.train.trainer import resolve_config

    digits = resolve_config({"dataset": "digits", "loss": "margin"})
    old_digits = {k: v for k, v in digits.items() if k != "freeze_bn_affine"}
    assert digits["freeze_bn_affine"] is False and settings_diff(old_digits, digits) == []
    photo = _photo_config()
    old_photo = {k: v for k, v in photo.items() if k != "freeze_bn_affine"}
    assert settings_diff(old_photo, photo) == ["freeze_bn_affine: True -> False"]
    assert settings_diff(old_photo, _photo_config(freeze_bn_affine=True)) == []

    root = _photos(tmp_path / "photos")
    grid = tmp_path / "g"
    base = ["train-grid", *_photo_args(root), "--losses", "margin", "--epochs", "1", "-o", grid]
    rc, out, err = run_cli([*base, "--freeze-bn-affine"])
    assert rc == 0, err
    assert _rows(grid / "grid.csv")[0]["freeze_bn_affine"] == "True"
    ckpt = grid / "imagefolder_margin_p0_s0.pt"
    for f in (ckpt, grid / "imagefolder_margin_p0_s0.pt.train" / "last.pt"):
        _drop_key(f)
    line = _error_line(base, 1)
    assert "imagefolder_margin_p0_s0.pt (finished): freeze_bn_affine: True -> False" in line
    assert "--freeze-bn-affine continues them" in line
    rc, out, err = run_cli([*base, "--freeze-bn-affine"])
    assert rc == 0, err
    assert "finished already, skipped (same settings)" in out
    row = _rows(grid / "grid.csv")[0]
    assert row["status"] == "skipped" and row["freeze_bn_affine"] == "True"


# ----------------------------------------------------------------------------- 2. n/a rows of grid.csv

def test_na_rows_name_no_checkpoint(tmp_path):
    from embedscope.study.plan import _sources

    grid = tmp_path / "g"
    base = ["train-grid", *DIGITS, "--losses", "softmax", "--epochs", "0", "-o", grid]
    rc, out, err = run_cli([*base, "--p-switch", "0", "0.2"])
    assert rc == 0, err
    rows = {r["name"]: r for r in _rows(grid / "grid.csv")}
    assert rows["digits_softmax_p0.2_s0"]["status"] == "n/a"
    assert rows["digits_softmax_p0.2_s0"]["checkpoint"] == "" and rows["digits_softmax_p0.2_s0"]["best_checkpoint"] == ""
    assert rows["digits_softmax_p0_s0"]["checkpoint"] == str(grid / "digits_softmax_p0_s0.pt")
    assert (grid / "digits_softmax_p0_s0.pt").is_file() and not (grid / "digits_softmax_p0.2_s0.pt").exists()
    # a study of the folder measures the run and leaves the n/a row out, as before
    assert [(p.name, n) for p, n, _ in _sources(grid)] == [("digits_softmax_p0_s0.pt", "digits_softmax_p0_s0")]
    # an n/a row of a table written before (naming the path) is merged without it
    header = list(_rows(grid / "grid.csv")[0])
    table = list(rows.values())
    table[[r["name"] for r in table].index("digits_softmax_p0.2_s0")]["checkpoint"] = str(
        grid / "digits_softmax_p0.2_s0.pt")
    with open(grid / "grid.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, header)
        w.writeheader()
        w.writerows(table)
    rc, out, err = run_cli([*base, "--p-switch", "0"])
    assert rc == 0, err
    rows = {r["name"]: r for r in _rows(grid / "grid.csv")}
    assert rows["digits_softmax_p0.2_s0"]["status"] == "n/a" and rows["digits_softmax_p0.2_s0"]["checkpoint"] == ""
    assert rows["digits_softmax_p0_s0"]["status"] == "skipped"


# ----------------------------------------------------------------------------- 3. extended, then interrupted

def test_grid_finishes_a_run_extended_then_interrupted(tmp_path):
    from embedscope.train.trainer import train

    grid = tmp_path / "g"
    base = ["train-grid", *DIGITS, "--losses", "margin", "-o", grid]
    rc, out, err = run_cli([*base, "--epochs", "1"])
    assert rc == 0, err
    ckpt = grid / "digits_margin_p0_s0.pt"

    class Stop(Exception):
        pass

    def stop(epoch, row):
        if epoch == 2:
            raise Stop

    with pytest.raises(Stop):  # `train -o RUN --resume --epochs 3`, stopped after epoch 2
        train({"epochs": 3}, ckpt, resume=True, progress=False, callback=stop, echo=lambda s: None)
    last = grid / "digits_margin_p0_s0.pt.train" / "last.pt"
    assert torch.load(last, weights_only=True)["extra"]["epoch"] == 2
    assert torch.load(ckpt, weights_only=True)["extra"]["epoch"] == 1  # the final checkpoint of the grid's epochs
    # the grid of the earlier epochs: the finished run is what it asks for
    rc, out, err = run_cli([*base, "--epochs", "1"])
    assert rc == 0, err
    assert "digits_margin_p0_s0: finished already, skipped (same settings)" in out
    # a grid of other epochs than either: refused, naming the finished run's
    line = _error_line([*base, "--epochs", "4"], 1)
    assert "digits_margin_p0_s0.pt (finished): epochs: 1 -> 4" in line
    # the grid of the extension's epochs resumes it from last.pt and finishes it
    rc, out, err = run_cli([*base, "--epochs", "3"])
    assert rc == 0, err
    assert "digits_margin_p0_s0: resuming" in out and "from epoch 2 of 3" in out and "epoch 3/3" in out
    final = torch.load(ckpt, weights_only=True)
    assert final["extra"]["epoch"] == 3 and final["extra"]["finished"] and final["config"]["epochs"] == 3
    assert [r["epoch"] for r in _rows(grid / "digits_margin_p0_s0.csv")] == ["0", "1", "2", "3"]
    row = _rows(grid / "grid.csv")[0]
    assert row["status"] == "resumed" and row["epochs"] == "3" and row["checkpoint"] == str(ckpt)
    rc, out, err = run_cli([*base, "--epochs", "3"])
    assert rc == 0 and "finished already, skipped" in out, err


# ----------------------------------------------------------------------------- 4. help texts

@pytest.mark.parametrize("command", ["train", "train-grid"])
def test_help_says_default_with_a_colon(command):
    import argparse
    import re

    from embedscope.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = [a.help or "" for a in sub.choices[command]._actions]
    assert sum("(default: " in h for h in helps) >= 8
    assert not [h for h in helps if re.search(r"\(default [^)]", h)]
    assert any("--freeze-bn-affine" in a.option_strings for a in sub.choices[command]._actions)
