"""Audit 42 (a fresh user's audit of `train` and `train-grid` on the digits): loss hyper-parameters out of
their range (a negative learning rate of the margin loss's beta or of the proxies, a temperature of 0, a
multisimilarity alpha of 0) trained silently by gradient ascent, stopped as a "divergence" that blamed
--lr, or ended in a bare ZeroDivisionError."""

from __future__ import annotations

import pytest
from cli_run import one_error_line, run_cli

from embedscope.errors import UsageError
from embedscope.train.losses import LOSSES, check_loss_params


@pytest.mark.parametrize("loss,param,value", [
    ("margin", "beta_lr", -1.0),          # beta trained by gradient ascent (rc 0, loss 10.7 for 0.41)
    ("softmax", "param_lr_mult", -2.0),   # the class weights likewise
    ("softmax", "temperature", 0.0),      # the loss NaN: "training diverged ... Try a lower --lr"
    ("multisimilarity", "alpha", 0.0),    # ZeroDivisionError
    ("softtriple", "gamma", 0.0),         # ZeroDivisionError
    ("arcface", "scale", -16.0),
    ("lifted", "nu", -0.005),             # a norm penalty that rewards large embeddings
])
def test_loss_param_out_of_range_is_a_usage_error(loss, param, value):
    with pytest.raises(UsageError, match=f"{param} of '{loss}' must be"):
        check_loss_params(loss, {param: value})


def test_defaults_and_edge_values_are_accepted():
    for name, spec in LOSSES.items():
        assert check_loss_params(name, dict(spec.defaults)) == spec.defaults
    assert check_loss_params("margin", {"beta_lr": 0, "nu": 0})["beta_lr"] == 0.0  # 0: beta stays fixed
    assert check_loss_params("proxynca", {"param_lr_mult": 0})["param_lr_mult"] == 0.0  # fixed proxies
    assert check_loss_params("contrastive", {"neg_margin": 0.5, "pos_margin": 0.1})["pos_margin"] == 0.1


def test_cli_refuses_a_negative_beta_lr_before_any_work(tmp_path):
    rc, out, err = run_cli(["train", "--dataset", "digits", "--epochs", "1", "--embed-dim", "8", "--loss-param",
                            "beta_lr=-1", "-o", str(tmp_path / "x.pt"), "--no-progress"])
    line = one_error_line(err, "train")
    assert rc == 2 and "beta_lr of 'margin' must be a number >= 0, got -1" in line, line
    assert out == "" and not any(tmp_path.iterdir())


def test_force_help_says_what_force_replaces(capsys):
    # --force replaces the run folder's checkpoints only (docs/training.md; _RUN_FILE_PATTERNS), not "the whole
    # run folder <-o>.train/" as the help said: a user's own files kept there stay
    from embedscope.cli import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "whole run folder" not in text
    assert "last.pt, best.pt, epoch-*.pt; nothing else there" in text


def test_yaml_loss_params_in_exponent_notation_are_numbers(tmp_path):
    # YAML 1.1 reads 5e-4 (no dot) as the text '5e-4': `lr: 1e-3` was taken, `loss_params: {beta_lr: 5e-4}`
    # refused ("must be a finite number, got '5e-4'")
    import yaml

    lp = yaml.safe_load("loss_params: {beta_lr: 5e-4, margin: 1e-1, nu: 0}")["loss_params"]
    assert lp["beta_lr"] == "5e-4"  # (what PyYAML gives)
    assert check_loss_params("margin", lp) == {"beta_lr": 5e-4, "margin": 0.1, "nu": 0.0}
    assert check_loss_params("softtriple", {"centers_per_class": "3"}) == {"centers_per_class": 3}
    for bad in ("abc", "nan", "-1e-3"):
        with pytest.raises(UsageError, match="beta_lr of 'margin' must be"):
            check_loss_params("margin", {"beta_lr": bad})
    from embedscope.train.trainer import resolve_config

    assert resolve_config({"dataset": "digits", "loss_params": lp})["loss_params"]["beta_lr"] == 5e-4


def test_default_log_keeps_a_dotted_name_apart():
    # -o r_p0.2 and -o r_p0.4 both logged to r_p0.csv (Path.with_suffix): the second run was refused
    # ("r_p0.csv already exists (use --force ...)") and its --force replaced the first run's log
    from embedscope.train.trainer import run_paths

    assert run_paths("runs/r_p0.2")["log"].name == "r_p0.2.csv"
    assert run_paths("runs/r_p0.2")["log"] != run_paths("runs/r_p0.4")["log"]
    assert run_paths("m.v1")["log"].name == "m.v1.csv" and run_paths("run")["log"].name == "run.csv"
    for name in ("x.pt", "x.pth", "x.ckpt", "x.PT"):  # a checkpoint's suffix is replaced, as before
        assert run_paths(name)["log"].name == "x.csv"
    assert run_paths("x.pt", "other.csv")["log"].name == "other.csv"


def test_two_dotted_names_train_side_by_side_and_a_legacy_log_is_continued(tmp_path):
    base = ["train", "--dataset", "digits", "--embed-dim", "8", "--epochs", "0", "--eval-every", "0", "--no-progress"]
    for p in ("0.2", "0.4"):
        rc, _, err = run_cli([*base, "-o", str(tmp_path / f"r_p{p}")])
        assert rc == 0, err
        assert (tmp_path / f"r_p{p}.csv").is_file()
    assert not (tmp_path / "r_p0.csv").exists()
    # a run started before (its log r.csv of -o r.v1, recorded in its checkpoints) resumes into that log
    rc, _, err = run_cli([*base, "-o", str(tmp_path / "r.v1"), "--log", str(tmp_path / "r.csv")])
    assert rc == 0, err
    rc, out, err = run_cli([*base, "-o", str(tmp_path / "r.v1"), "--resume"])
    assert rc == 0, err
    assert f"log {tmp_path / 'r.csv'}" in out and not (tmp_path / "r.v1.csv").exists()


def test_grid_of_more_epochs_names_the_way_to_extend_its_runs(tmp_path):
    # a grid asked for more --epochs than its finished runs was refused with only "--force to retrain them, or
    # another output folder"; train --resume --epochs N extends each (docs/training.md), which it now says
    grid = ["train-grid", "--dataset", "digits", "--losses", "margin", "--embed-dim", "8", "--eval-every", "0",
            "-o", str(tmp_path / "g"), "--no-progress"]
    rc, _, err = run_cli([*grid, "--epochs", "0"])
    assert rc == 0, err
    rc, _, err = run_cli([*grid, "--epochs", "1"])
    line = one_error_line(err, "train-grid")
    assert rc == 1 and "epochs: 0 -> 1" in line
    assert "'embedscope train -o CKPT --resume --epochs 1'" in line, line
    rc, _, err = run_cli([*grid, "--epochs", "0", "--lr", "0.01"])  # another setting: no such hint
    line = one_error_line(err, "train-grid")
    assert rc == 1 and "lr: 0.001 -> 0.01" in line and "--resume" not in line, line


def test_grid_row_of_an_untrained_run_has_its_final_values(tmp_path):
    # --epochs 0: the final checkpoint is the untrained network, evaluated at epoch 0; grid.csv left final_R@1,
    # final_MAP@R and final_rho empty beside its untrained_R@1
    import csv

    rc, _, err = run_cli(["train-grid", "--dataset", "digits", "--losses", "margin", "--embed-dim", "8", "--epochs",
                          "0", "-o", str(tmp_path / "g"), "--no-progress"])
    assert rc == 0, err
    (row,) = list(csv.DictReader(open(tmp_path / "g" / "grid.csv")))
    assert row["final_R@1"] and row["final_R@1"] == row["untrained_R@1"]
    assert row["final_MAP@R"] and row["final_rho"] and row["best_R@1"] == ""  # (best: over trained epochs)


def test_grid_row_of_a_run_diverged_in_epoch_1_has_no_final_values(tmp_path):
    from embedscope.train.grid import _summary

    row0 = {"epoch": 0, "loss": None, "R@1": 0.6, "MAP@R": 0.2, "rho": 0.1, "seconds": 0.0}
    s = _summary({"history": [row0], "metrics": {"best": None}}, tmp_path / "x.pt", finished=False)
    assert s["final_R@1"] is None and s["untrained_R@1"] == 0.6


def test_batch_size_1_is_a_usage_error_before_the_data_are_read(tmp_path, monkeypatch):
    import embedscope.train.trainer as trainer

    def no_data(cfg):
        raise AssertionError("the data were read")

    monkeypatch.setattr(trainer, "_load_data", no_data)
    rc, _, err = run_cli(["train", "--dataset", "digits", "--sampler", "random", "--batch-size", "1", "--epochs", "1",
                          "-o", str(tmp_path / "x.pt"), "--no-progress"])
    line = one_error_line(err, "train")
    assert rc == 2 and "--batch-size must be at least 2" in line, line


def test_a_loss_parameter_that_does_not_act_is_named_in_a_note():
    # --loss multisimilarity --p-switch 0.3 --loss-param epsilon=0.2 trained with distance mining: the epsilon
    # given (and recorded in the config and log) acted on nothing, without a word
    from embedscope.train.trainer import config_notes, resolve_config

    def notes(**kw):
        return " ".join(config_notes(resolve_config({"dataset": "digits", **kw})))

    assert "epsilon=0.2 has no effect" in notes(loss="multisimilarity", p_switch=0.3, loss_params={"epsilon": 0.2})
    assert "epsilon=0.2 has no effect" in notes(loss="multisimilarity", miner="semihard",
                                                loss_params={"epsilon": 0.2})
    assert "has no effect" not in notes(loss="multisimilarity", loss_params={"epsilon": 0.2})  # its own mining
    assert "tau=0.5 has no effect" in notes(loss="softtriple", loss_params={"tau": 0.5, "centers_per_class": 1})
    assert "has no effect" not in notes(loss="softtriple", loss_params={"tau": 0.5})
