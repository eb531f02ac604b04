"""The trainer (docs/methods.md §5): learning on the digits per loss family, resume = uninterrupted, files, CLI."""

import csv

import numpy as np
import pytest
import torch

from embedscope.cli import main
from embedscope.errors import EmbedscopeError, UsageError
from embedscope.train.trainer import resolve_config, run_paths, train

QUICK = {"dataset": "digits", "embed_dim": 8, "eval_every": 0}


def r1_reference(X, y):
    """Leave-one-out 1-NN hit rate (docs/methods.md §1), brute force."""
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
    """MAP@R (docs/methods.md §1, Musgrave et al.), brute force: per query, R = its same-class others;
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


class Stop(Exception):
    """A run killed after its first epoch (:func:`stop_after_1`)."""


def stop_after_1(epoch, row):
    if epoch == 1:
        raise Stop


def test_resumed_run_equals_uninterrupted(tmp_path):
    opts = {**QUICK, "loss": "margin", "p_switch": 0.3, "sampler": "gc", "epochs": 2, "batch_size": 40}
    train(opts, tmp_path / "full.pt", progress=False, echo=lambda s: None)

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
    # the ρ-switch counts continue over the resume: the rate of the whole run, as uninterrupted
    assert b["extra"]["metrics"]["switch_counts"] == a["extra"]["metrics"]["switch_counts"]
    assert b["extra"]["metrics"]["switch_rate"] == a["extra"]["metrics"]["switch_rate"]


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
    assert cfg["distance"] == "cosine"  # docs/methods.md §8: multisimilarity ranks by cosine
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
    assert cfg["loss_params"] == {"margin": 0.1, "avg_nonzero": False} and cfg["embed_dim"] == 8
    assert main(["train", "--dataset", "digits", "-o", str(tmp_path / "y.pt"), "--epochs", "1"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["train", "--dataset", "digits", "--loss", "softmax", "--miner", "distance", "-o",
                 str(tmp_path / "z.pt")]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset: digits\nlearning_rate: 3\n")
    assert main(["train", "--config", str(bad), "-o", str(tmp_path / "q.pt")]) == 2  # a usage error, as on the command line
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


# ---------------------------------------------------------------- issue 15/16/17: trainer friction and bad input

def quiet(**kw):
    return {"progress": False, "echo": lambda s: None, **kw}


def files_under(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_epochs_zero_saves_the_untrained_network(tmp_path):
    out = tmp_path / "u.pt"
    res = train({**QUICK, "epochs": 0, "eval_every": 1}, out, keep_epochs=True, **quiet())
    ck = torch.load(out, weights_only=True)
    torch.manual_seed(0)
    from embedscope.models import build_model

    ref = build_model(resolve_config(QUICK)).state_dict()  # the initialisation of train(seed=0)
    for k, v in ref.items():
        assert torch.equal(ck["state_dict"][k], v), k
    assert ck["extra"]["epoch"] == 0 and ck["extra"]["finished"] is True and res["best"] is None
    assert (run_paths(out)["dir"] / "epoch-000.pt").exists()
    rows = list(csv.DictReader(open(run_paths(out)["log"])))
    assert [r["epoch"] for r in rows] == ["0"]
    assert float(rows[0]["R@1"]) == pytest.approx(untrained_r1(), abs=1e-9)


def test_keep_epochs_saves_epoch_000_and_every_epoch(tmp_path):
    out = tmp_path / "k.pt"
    train({**QUICK, "epochs": 1}, out, keep_epochs=True, **quiet())
    d = run_paths(out)["dir"]
    assert sorted(p.name for p in d.iterdir()) == ["epoch-000.pt", "epoch-001.pt", "last.pt"]
    e0 = torch.load(d / "epoch-000.pt", weights_only=True)
    e1 = torch.load(d / "epoch-001.pt", weights_only=True)
    assert e0["extra"]["epoch"] == 0 and e1["extra"]["epoch"] == 1
    assert any(not torch.equal(e0["state_dict"][k], e1["state_dict"][k]) for k in e0["state_dict"])
    # the log: an epoch-0 row even without evaluations
    rows = list(csv.DictReader(open(run_paths(out)["log"])))
    assert [r["epoch"] for r in rows] == ["0", "1"] and rows[0]["R@1"] == ""


def test_force_replaces_the_run_folder_whole(tmp_path):
    """Issue 17: --force kept the old best.pt and epoch-*.pt beside the new run."""
    out = tmp_path / "f.pt"
    train({**QUICK, "epochs": 2, "eval_every": 1}, out, keep_epochs=True, **quiet())
    d = run_paths(out)["dir"]
    assert {"best.pt", "epoch-002.pt"} <= {p.name for p in d.iterdir()}
    train({**QUICK, "epochs": 1}, out, force=True, **quiet())
    assert sorted(p.name for p in d.iterdir()) == ["last.pt"]
    assert torch.load(out, weights_only=True)["extra"]["epoch"] == 1


def test_log_that_would_overwrite_the_checkpoint_is_refused(tmp_path):
    with pytest.raises(UsageError, match="default log"):
        train({**QUICK, "epochs": 1}, tmp_path / "run.csv", **quiet())
    with pytest.raises(UsageError, match="same file as the checkpoint"):
        train({**QUICK, "epochs": 1}, tmp_path / "m.pt", log=tmp_path / "m.pt", **quiet())
    with pytest.raises(UsageError, match="run folder"):
        train({**QUICK, "epochs": 1}, tmp_path / "m.pt", log=tmp_path / "m.pt.train" / "last.pt", **quiet())
    assert files_under(tmp_path) == []


def test_resume_refuses_changed_options_and_says_what_changes(tmp_path):
    out = tmp_path / "r.pt"

    class Stop(Exception):
        pass

    def stop(epoch, row):
        raise Stop

    with pytest.raises(Stop):
        train({**QUICK, "epochs": 2}, out, callback=stop, **quiet())
    with pytest.raises(UsageError, match=r"--loss 'triplet' \(the run has 'margin'\).*--lr 0.5"):
        train({"loss": "triplet", "lr": 0.5, "embed_dim": 8}, out, resume=True, **quiet())
    said = []
    res = train({**QUICK, "epochs": 3}, out, resume=True, progress=False, echo=said.append)
    assert res["resumed_from"] == 1 and torch.load(out, weights_only=True)["extra"]["epoch"] == 3
    assert any("--epochs 3 (was 2)" in s for s in said)


def test_disk_full_during_train_is_one_line_and_leaves_no_empty_run_folder(tmp_path):
    d = tmp_path / "tiny"
    d.mkdir()
    import subprocess

    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(d)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        out = d / "sub" / "m.pt"
        with pytest.raises(EmbedscopeError, match="no space left on device") as e:
            train({**QUICK, "embed_dim": 128, "epochs": 0, "eval_every": 0}, out, **quiet())
        assert "\n" not in str(e.value) and "enforce fail" not in str(e.value)
        assert files_under(d) == []
    finally:
        import gc

        gc.collect()
        if subprocess.run(["umount", str(d)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(d)], capture_output=True)


def test_p_switch_replacing_the_miner_is_said_and_logged(tmp_path):
    said = []
    out = tmp_path / "ms.pt"
    res = train({**QUICK, "loss": "multisimilarity", "p_switch": 0.3, "epochs": 0}, out, progress=False,
                echo=said.append)
    assert res["config"]["miner"] == "distance"
    assert any(s.startswith("note:") and "distance-weighted" in s for s in said)
    rows = list(csv.DictReader(open(run_paths(out)["log"])))
    assert "distance-weighted" in rows[0]["notes"] and rows[0]["miner"] == "distance"
    quiet_run = []
    train({**QUICK, "loss": "margin", "p_switch": 0.3, "epochs": 0}, tmp_path / "m.pt", progress=False,
          echo=quiet_run.append)
    assert not any(s.startswith("note:") for s in quiet_run)  # margin mines with distance anyway


@pytest.mark.parametrize("bad, match", [
    ({"weight_decay": -1}, "--weight-decay must be >= 0"),
    ({"lr": float("nan")}, "--lr must be a finite number"),
    ({"lr": "fast"}, "--lr must be a number"),
    ({"embed_dim": "abc"}, "--embed-dim must be an integer"),
    ({"embed_dim": 3.5}, "--embed-dim must be an integer"),
    ({"epochs": -1}, "--epochs must be >= 0"),
    ({"num_workers": -2}, "--num-workers must be >= 0"),
    ({"p_switch": "often"}, "--p-switch must be a number"),
    ({"loss": 5}, "--loss must be a name"),
    ({"loss": "nosuch"}, "unknown --loss"),
    ({"loss_params": [1, 2]}, "loss_params must be a mapping"),
    ({"batch_size": True}, "--batch-size must be an integer"),
])
def test_bad_numbers_and_types_are_usage_errors(bad, match):
    with pytest.raises(UsageError, match=match):
        resolve_config({**QUICK, **bad})


def test_yaml_numbers_as_strings_are_read():
    cfg = resolve_config({**QUICK, "lr": "1e-3", "epochs": 3.0})  # PyYAML reads 1e-3 as a string
    assert cfg["lr"] == 1e-3 and cfg["epochs"] == 3 and cfg["distance"] == "euclidean"


def test_cli_bad_numbers_and_yaml_types(tmp_path, capsys):
    for args in (["--weight-decay", "-1"], ["--lr", "nan"], ["--epochs", "-3"], ["--p-switch", "2"],
                 ["--num-workers", "-1"]):
        with pytest.raises(SystemExit) as e:
            main(["train", "-o", str(tmp_path / "x.pt"), *args])
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and len(err.splitlines()) == 1 and "embedscope train --help" in err, args
    for text, match in (("embed-dim: abc\n", "--embed-dim must be an integer"),
                        ("lr: [1, 2]\n", "--lr must be a number"),
                        ("keep_epochs: maybe\n", "keep_epochs must be true or false")):
        f = tmp_path / "c.yaml"
        f.write_text("dataset: digits\n" + text)
        rc = main(["train", "--config", str(f), "-o", str(tmp_path / "x.pt")])
        err = capsys.readouterr().err.strip()
        assert rc in (1, 2) and match in err and len(err.splitlines()) == 1, text
    assert main(["train", "-o", str(tmp_path / "x.pt"), "--resume", "--force"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


class Payload:  # unpickling it calls a function named by the file (harmless here: os.getpid)
    def __reduce__(self):
        import os

        return (os.getpid, ())


def test_weights_needing_code_point_to_a_flag_train_has(tmp_path, capsys):
    evil = tmp_path / "evil.pt"
    torch.save({"state_dict": {"w": torch.zeros(1)}, "x": Payload()}, evil)
    base = ["train", "--dataset", "digits", "--embed-dim", "8", "--epochs", "0", "--weights", str(evil),
            "--no-progress", "-o", str(tmp_path / "m.pt")]
    assert main(base) == 1
    err = capsys.readouterr().err.strip()
    assert "--unsafe-pickle" in err and len(err.splitlines()) == 1
    # the flag exists on train: the file is then read (and refused for its content, not for the flag)
    assert main([*base, "--unsafe-pickle"]) == 1
    err = capsys.readouterr().err.strip()
    assert "unrecognized" not in err and "--unsafe-pickle" not in err and "evil.pt" in err


def test_tensorboard_missing_is_one_line(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if tensorboard were not installed
    with pytest.raises(EmbedscopeError, match=r"pip install 'embedscope\[tensorboard\]'"):
        train({**QUICK, "epochs": 0}, tmp_path / "m.pt", tensorboard=tmp_path / "tb", **quiet())
    assert files_under(tmp_path) == []


def test_tensorboard_gets_loss_r1_map_rho_per_epoch(tmp_path, monkeypatch):
    import sys
    import types

    calls = []

    class Writer:
        def __init__(self, log_dir, **kw):
            calls.append(("dir", log_dir))

        def add_scalar(self, tag, value, step):
            calls.append((tag, step, value))

        def add_text(self, tag, text):
            calls.append((tag, text[:20]))

        def flush(self):
            pass

        def close(self):
            calls.append(("closed",))

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=Writer))
    res = train({**QUICK, "epochs": 1, "eval_every": 1}, tmp_path / "m.pt", tensorboard=tmp_path / "tb", **quiet())
    scalars = {(c[0], c[1]): c[2] for c in calls if len(c) == 3}
    h = res["history"]
    for e in (0, 1):
        for key, tag in (("R@1", "test/R@1"), ("MAP@R", "test/MAP@R"), ("rho", "train/rho")):
            assert scalars[(tag, e)] == pytest.approx(h[e][key])
    assert scalars[("train/loss", 1)] == pytest.approx(h[1]["loss"]) and ("train/loss", 0) not in scalars
    assert calls[0] == ("dir", str(tmp_path / "tb")) and calls[-1] == ("closed",)


def test_train_output_to_a_file_has_one_line_per_epoch_and_no_redraws(tmp_path):
    """Issue 17: a 3-epoch run wrote 119 progress redraws into its log."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "embedscope", "train", "--dataset", "digits", "--embed-dim", "8",
                        "--epochs", "1", "--eval-every", "0", "-o", str(tmp_path / "m.pt")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stdout + r.stderr and r.stderr == ""
    epochs = [ln for ln in r.stdout.splitlines() if ln.startswith("epoch ")]
    assert [ln.split()[1] for ln in epochs] == ["0/1", "1/1"]


def test_train_classes_leave_two_classes_each_side(tmp_path, capsys):
    """--train-classes 9 of the digits' 10 passes the split's range but leaves one test class: one
    line naming the range that trains, before any epoch (was "the query labels must hold at least 2
    classes" after epoch 0)."""
    from embedscope.cli import main

    for n in ("9", "1"):
        capsys.readouterr()
        assert main(["train", "--dataset", "digits", "--epochs", "1", "--embed-dim", "8", "--train-classes", n,
                     "--no-progress", "-o", str(tmp_path / "x.pt")]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "at least 2 training and 2 test classes" in err[0] and "between 2 and 8" in err[0]
        assert "epoch" not in err[0] and not (tmp_path / "x.pt").exists()
    assert main(["train", "--dataset", "digits", "--epochs", "0", "--embed-dim", "8", "--train-classes", "8",
                 "--loss-param", "margin=0.1", "--no-progress", "-o", str(tmp_path / "ok.pt")]) == 0
    capsys.readouterr()
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--embed-dim", "8", "--loss-param", "margin=abc",
                 "--no-progress", "-o", str(tmp_path / "y.pt")]) == 2
    out = capsys.readouterr()
    assert "must be a finite number" in out.err and "epoch" not in out.out + out.err


def test_training_loader_workers_stop_quietly(tmp_path, monkeypatch):
    """With --num-workers the training loader's workers ignore Ctrl-C and stay quiet about the parent
    stopping mid-batch (embed.quiet_worker), and they start with the signals held (embed.start_workers),
    as embed's loader does; without workers neither is used."""
    import torch.utils.data as tud

    from embedscope import embed

    made, started = [], []

    class Spy(tud.DataLoader):
        def __init__(self, *a, **k):
            made.append(k)
            super().__init__(*a, **k)

    real = embed.start_workers
    monkeypatch.setattr(tud, "DataLoader", Spy)
    monkeypatch.setattr(embed, "start_workers", lambda loader: started.append(loader) or real(loader))
    for workers in (1, 0):
        made.clear(), started.clear()
        res = train({**QUICK, "epochs": 1, "num_workers": workers}, tmp_path / f"w{workers}.pt", progress=False,
                    echo=lambda s: None)
        assert np.isfinite(res["history"][-1]["loss"])
        (kw,) = [k for k in made if "batch_sampler" in k]  # the training loader (not the evaluation's)
        assert kw["worker_init_fn"] is (embed.quiet_worker if workers else None)
        assert len(started) == workers


def test_a_model_collapsed_to_one_point_is_logged_not_fatal(tmp_path, monkeypatch):
    """Training embeddings on one line through the origin (a collapsed model) have no ρ (0/0,
    docs/methods.md §2): the epoch's evaluation logs ρ as undefined (an empty cell, 'nan' in the
    line) and the run goes on, where it used to stop with 'all singular values considered are zero'
    and lose the run (a 1-thread mobilenet_v3_small on the shapes collapsed like this)."""
    import embedscope.embed as embed_mod

    real = embed_mod.embed_images

    def collapsed(model, ds, **kw):
        X = real(model, ds, **kw)
        return np.tile(X[:1], (len(X), 1))  # every image embedded at the first one's point

    monkeypatch.setattr(embed_mod, "embed_images", collapsed)
    lines = []
    out = tmp_path / "c.pt"
    train({**QUICK, "epochs": 1, "eval_every": 1}, out, progress=False, echo=lines.append)
    rows = list(csv.DictReader(open(run_paths(out)["log"])))
    assert [r["epoch"] for r in rows] == ["0", "1"] and all(r["rho"] == "" for r in rows)
    assert all(0 <= float(r["R@1"]) <= 1 for r in rows)
    assert any("rho nan" in s for s in lines if s.startswith("epoch 1/1"))
    ck = torch.load(out, weights_only=True)
    assert ck["extra"]["finished"] is True and np.isnan(ck["extra"]["history"][-1]["rho"])


def test_resume_of_a_run_that_keeps_its_epochs_keeps_them(tmp_path):
    """A --keep-epochs run killed and resumed with plain --resume (as documented) went on without
    writing epoch-NNN.pt: study --epoch all then measured only the epochs before the kill."""
    opts = {**QUICK, "loss": "margin", "epochs": 3, "batch_size": 40}
    with pytest.raises(Stop):
        train(opts, tmp_path / "k.pt", progress=False, echo=lambda s: None, keep_epochs=True, callback=stop_after_1)
    said = []
    train({}, tmp_path / "k.pt", resume=True, progress=False, echo=said.append)
    kept = sorted(p.name for p in run_paths(tmp_path / "k.pt")["dir"].glob("epoch-*.pt"))
    assert kept == ["epoch-000.pt", "epoch-001.pt", "epoch-002.pt", "epoch-003.pt"]
    assert any("every epoch's checkpoint is kept" in s for s in said)
