"""The trainer (METHODS.md §5): learning on the digits per loss family, resume = uninterrupted, files, CLI."""

import csv

import numpy as np
import pytest
import torch

from embedscope.cli import main
from embedscope.errors import EmbedscopeError, UsageError
from embedscope.train.trainer import resolve_config, run_paths, train

QUICK = {"dataset": "digits", "embed_dim": 8, "eval_every": 0}


def r1_reference(X, y):
    """Leave-one-out 1-NN hit rate (METHODS.md §1), brute force."""
    d = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    return float((y[np.argmin(d, 1)] == y).mean())


def test_resolve_config_defaults_and_validation():
    cfg = resolve_config({"dataset": "digits"})
    assert cfg["arch"] == "digits_cnn" and cfg["sampler"] == "spc-8" and cfg["batch_size"] == 40
    assert cfg["loss"] == "margin" and cfg["miner"] == "distance" and cfg["loss_family"] == "ranking"
    assert resolve_config({"dataset": "digits", "loss": "multisimilarity"})["miner"] is None
    assert resolve_config({"dataset": "digits", "loss": "multisimilarity", "p_switch": 0.2})["miner"] == "distance"
    assert resolve_config({"dataset": "digits", "loss": "npair"})["normalize"] is False
    photo = resolve_config({"dataset": "cub200", "root": "x"})
    assert (photo["arch"], photo["batch_size"], photo["sampler"], photo["lr"], photo["epochs"]) == \
        ("resnet50", 112, "spc-2", 1e-5, 150)
    assert photo["frozen_bn"] is True and photo["weight_decay"] == 4e-4
    with pytest.raises(UsageError, match="takes no mined tuples"):
        resolve_config({"dataset": "digits", "loss": "softmax", "p_switch": 0.2})
    with pytest.raises(UsageError, match="p-switch"):
        resolve_config({"dataset": "digits", "p_switch": 2})
    with pytest.raises(UsageError, match="unknown training option"):
        resolve_config({"dataset": "digits", "nonsense": 1})


def map_at_r_reference(X, y):
    """MAP@R (METHODS.md §1, Musgrave et al.), brute force: per query, R = its same-class others;
    (1/R) * sum over the first R neighbours of precision@i at each relevant i; mean over queries."""
    d = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    out = []
    for i in range(len(y)):
        R = int((y == y[i]).sum()) - 1
        order = np.argsort(d[i], kind="stable")[:R]
        rel = (y[order] == y[i]).astype(float)
        out.append((np.cumsum(rel) / np.arange(1, R + 1) * rel).sum() / R)
    return float(np.mean(out))


def untrained_r1():
    from embedscope.data import get_dataset
    from embedscope.embed import embed_images
    from embedscope.models import build_model

    torch.manual_seed(0)
    cfg = resolve_config(QUICK)
    model = build_model(cfg)  # the same initialisation as train(seed=0)
    te = get_dataset("digits").subset("test")
    return r1_reference(embed_images(model, te, progress=False), te.labels)


def trained_r1(path):
    from embedscope.data import get_dataset
    from embedscope.embed import embed_images
    from embedscope.models import load_checkpoint

    model, _, _ = load_checkpoint(path)
    te = get_dataset("digits").subset("test")
    return r1_reference(embed_images(model, te, progress=False), te.labels)


def learns(tmp_path, loss, epochs=4):
    out = tmp_path / f"{loss}.pt"
    train({**QUICK, "loss": loss, "epochs": epochs, "eval_every": epochs}, out, progress=False, echo=lambda s: None)
    before, after = untrained_r1(), trained_r1(out)
    # zero-shot: trained on digits 0-4, tested on 5-9 (D = 8: the untrained net is far from perfect)
    assert after > before + 0.05, (loss, before, after)
    return before, after


def test_ranking_loss_raises_test_r1(tmp_path):
    learns(tmp_path, "margin")


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["softmax", "proxynca", "softtriple", "multisimilarity", "arcface"])
def test_classification_and_proxy_losses_raise_test_r1(tmp_path, loss):
    learns(tmp_path, loss, epochs=5)


def test_resumed_run_equals_uninterrupted(tmp_path):
    opts = {**QUICK, "loss": "margin", "p_switch": 0.3, "sampler": "gc", "epochs": 2, "batch_size": 40}
    train(opts, tmp_path / "full.pt", progress=False, echo=lambda s: None)

    class Stop(Exception):
        pass

    def stop_after_1(epoch, row):
        if epoch == 1:
            raise Stop

    with pytest.raises(Stop):
        train(opts, tmp_path / "cut.pt", progress=False, echo=lambda s: None, callback=stop_after_1)
    assert not (tmp_path / "cut.pt").exists() and run_paths(tmp_path / "cut.pt")["last"].exists()
    with pytest.raises(EmbedscopeError, match="--resume"):
        train(opts, tmp_path / "cut.pt", progress=False, echo=lambda s: None)
    res = train({}, tmp_path / "cut.pt", resume=True, progress=False, echo=lambda s: None)
    assert res["resumed_from"] == 1
    a = torch.load(tmp_path / "full.pt", weights_only=True)
    b = torch.load(tmp_path / "cut.pt", weights_only=True)
    for k in a["state_dict"]:
        assert torch.equal(a["state_dict"][k], b["state_dict"][k]), k
    assert torch.equal(a["extra"]["loss_state"]["loss.beta"], b["extra"]["loss_state"]["loss.beta"])
    assert [r["loss"] for r in a["extra"]["history"]] == [r["loss"] for r in b["extra"]["history"]]
    assert a["extra"]["metrics"]["switch_rate"] > 0.1


def test_checkpoint_files_log_and_config(tmp_path):
    out = tmp_path / "m.pt"
    train({**QUICK, "loss": "multisimilarity", "epochs": 2, "eval_every": 1, "seed": 3}, out, progress=False,
          echo=lambda s: None)
    ck = torch.load(out, weights_only=True)
    cfg = ck["config"]
    for k, v in {"loss": "multisimilarity", "miner": None, "sampler": "spc-8", "p_switch": 0.0, "seed": 3,
                 "dataset": "digits", "arch": "digits_cnn", "embed_dim": 8, "loss_family": "ranking"}.items():
        assert cfg[k] == v, k
    assert ck["extra"]["epoch"] == 2 and ck["extra"]["finished"] is True
    p = run_paths(out)
    assert p["last"].exists() and p["best"].exists() and p["log"] == tmp_path / "m.csv"
    rows = list(csv.DictReader(open(p["log"])))
    assert list(rows[0])[:6] == ["epoch", "loss", "R@1", "MAP@R", "rho", "seconds"]
    assert [r["epoch"] for r in rows] == ["0", "1", "2"] and rows[0]["loss"] == ""
    # the run's configuration on every row (issue 16: the CSV log gains the config columns)
    assert all(r["loss_name"] == "multisimilarity" and r["seed"] == "3" and r["embed_dim"] == "8"
               and r["distance"] == "cosine" and r["sampler"] == "spc-8" for r in rows)
    assert cfg["distance"] == "cosine"  # METHODS.md §8: multisimilarity ranks by cosine
    # the logged R@1 and MAP@R equal an independent computation on the final model
    assert float(rows[-1]["R@1"]) == pytest.approx(trained_r1(out), abs=1e-9)
    from embedscope.data import get_dataset
    from embedscope.embed import embed_images
    from embedscope.models import load_checkpoint as _load

    te = get_dataset("digits").subset("test")
    X = embed_images(_load(out)[0], te, progress=False)
    assert float(rows[-1]["MAP@R"]) == pytest.approx(map_at_r_reference(X, te.labels), abs=1e-6)
    from embedscope.models import load_checkpoint

    load_checkpoint(out)  # the foundation loads it
    with pytest.raises(EmbedscopeError, match="already exists|unfinished"):
        train({**QUICK, "epochs": 1}, out, progress=False, echo=lambda s: None)


def test_cli_train_with_yaml_and_overrides(tmp_path, capsys):
    cfgfile = tmp_path / "run.yaml"
    cfgfile.write_text("dataset: digits\nloss: triplet\nepochs: 3\nembed-dim: 8\neval_every: 0\n"
                       f"output: {tmp_path / 'y.pt'}\nloss_params:\n  margin: 0.1\n")
    rc = main(["train", "--config", str(cfgfile), "--epochs", "1", "--no-progress", "--sampler", "spc-4",
               "--batch-size", "20"])
    assert rc == 0
    cfg = torch.load(tmp_path / "y.pt", weights_only=True)["config"]
    assert cfg["epochs"] == 1 and cfg["loss"] == "triplet" and cfg["sampler"] == "spc-4"
    assert cfg["loss_params"] == {"margin": 0.1} and cfg["embed_dim"] == 8
    assert main(["train", "--dataset", "digits", "-o", str(tmp_path / "y.pt"), "--epochs", "1"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["train", "--dataset", "digits", "--loss", "softmax", "--miner", "distance", "-o",
                 str(tmp_path / "z.pt")]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset: digits\nlearning_rate: 3\n")
    assert main(["train", "--config", str(bad), "-o", str(tmp_path / "q.pt")]) == 1
    assert "unknown option 'learning_rate'" in capsys.readouterr().err


def test_train_grid_skips_finished(tmp_path, capsys):
    args = ["train-grid", "--dataset", "digits", "--losses", "contrastive", "softmax", "--p-switch", "0", "0.3",
            "--seeds", "0", "-o", str(tmp_path / "runs"), "--epochs", "1", "--embed-dim", "8", "--eval-every", "1",
            "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "digits_softmax_p0.3_s0: skipped" in out
    rows = list(csv.DictReader(open(tmp_path / "runs" / "grid.csv")))
    status = {r["name"]: r["status"] for r in rows}
    assert status == {"digits_contrastive_p0_s0": "trained", "digits_contrastive_p0.3_s0": "trained",
                      "digits_softmax_p0_s0": "trained", "digits_softmax_p0.3_s0": "n/a"}
    assert all(r["best_R@1"] for r in rows if r["status"] == "trained")
    ck = torch.load(tmp_path / "runs" / "digits_contrastive_p0.3_s0.pt", weights_only=True)
    assert ck["config"]["p_switch"] == 0.3 and ck["config"]["miner"] == "distance"
    assert main(args) == 0
    assert "finished already, skipped" in capsys.readouterr().out
