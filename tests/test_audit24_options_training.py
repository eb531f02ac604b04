"""Audit 24: how the options of ``embed``, ``train``, ``train-grid``, ``toy`` and ``make-shapes``
interact (docs/training.md, docs/checkpoint.md, docs/datasets.md).

What was wrong before:

* ``embed`` of a checkpoint trained with ``train --train-classes 7`` used the data set's own split
  (5 training digits): the file's test split held two of the model's training classes, and its test
  R@1 differed from the one of the run's log (``study`` embeds such a checkpoint with its own split);
* ``train --resume --epochs N`` of a run with ``--lr-schedule cosine`` / ``step`` went on with the
  schedule stretched over N epochs without a word (the run then is no uninterrupted N-epoch run);
* ``train --dataset digits --image-size 16`` stopped with "the checkpoint expects 16x16 inputs"
  (exit 1), naming no option, after the data were read;
* a ``--batch-size`` that the ``--sampler`` cannot split was exit 1 after the data were read, and in
  ``train-grid`` only when the first run started (with its folder made);
* ``train-grid --p-switch -3`` (or ``nan``) was accepted when the losses took no mined tuples (rows
  named ``p-3`` / ``pnan``), and a grid whose every combination was n/a trained nothing and exit 0;
* ``train-grid --device cuda`` on a machine without a GPU left an empty output folder;
* ``embed CKPT --head random`` said "--weights and --head build a model ..." (no --weights given);
* ``toy --p-switch 0`` printed three equal rows without saying why; ``embed --arch A`` without
  ``--weights`` embedded with a random backbone without a word; a ``shapes`` set rendered at 32 px was
  trained at 64 px (the shapes default of ``--image-size``) without a word.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math

import numpy as np
import pytest

from embedscope.cli import main

QUICK = ["--dataset", "digits", "--embed-dim", "4", "--no-progress"]


def _run(args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in args])
        except SystemExit as e:  # argparse's own usage errors
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def _usage_error(args, *words) -> str:
    rc, out, err = _run(args)
    assert rc == 2, (rc, out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _brute_r1(X: np.ndarray, y: np.ndarray) -> float:
    """R@1 by cosine over the rows themselves, written out (the query left out, ties to the lower index)."""
    X = np.asarray(X, dtype=np.float64)
    Z = X / np.linalg.norm(X, axis=1, keepdims=True)
    hits = 0
    for i in range(len(Z)):
        sims = Z @ Z[i]
        sims[i] = -math.inf
        hits += int(y[int(np.argmax(sims))] == y[i])  # argmax: the first of equal maxima
    return hits / len(Z)


# --- embed follows the checkpoint's --train-classes ---------------------------------------------

@pytest.fixture(scope="module")
def tc7_run(tmp_path_factory):
    """An untrained digits run with --train-classes 7 (its log holds the epoch-0 test R@1)."""
    d = tmp_path_factory.mktemp("tc7")
    rc, out, err = _run(["train", *QUICK, "--epochs", "0", "--train-classes", "7", "-o", d / "tc7.pt"])
    assert rc == 0, err
    with open(d / "tc7.csv", newline="") as f:
        r1 = float(next(csv.DictReader(f))["R@1"])
    return d, r1


def test_embed_uses_the_checkpoints_train_classes(tc7_run):
    from embedscope import store

    d, logged_r1 = tc7_run
    rc, out, err = _run(["embed", d / "tc7.pt", "--dataset", "digits", "-o", d / "e.h5", "--no-progress"])
    assert rc == 0, err
    assert "note: --train-classes 7, the split the checkpoint was trained with" in out
    es = store.load(d / "e.h5")
    assert sorted(set(es.labels[es.split == "train"].tolist())) == list(range(7))
    assert sorted(set(es.labels[es.split == "test"].tolist())) == [7, 8, 9]
    test = es.split == "test"
    r1 = _brute_r1(np.asarray(es.embeddings)[test], np.asarray(es.labels)[test])
    assert r1 == pytest.approx(logged_r1, abs=1e-12)  # the run's own test R@1 (before: on classes 5-9)


def test_embed_explicit_train_classes_kept_with_a_note(tc7_run):
    from embedscope import store

    d, _ = tc7_run
    rc, out, err = _run(["embed", d / "tc7.pt", "--dataset", "digits", "--train-classes", "5", "-o", d / "e5.h5",
                         "--no-progress"])
    assert rc == 0, err
    assert "the checkpoint was trained on the first 7 classes (--train-classes 7)" in out
    es = store.load(d / "e5.h5")
    assert sorted(set(es.labels[es.split == "train"].tolist())) == list(range(5))
    # the same value as the checkpoint's: no note
    rc, out, err = _run(["embed", d / "tc7.pt", "--dataset", "digits", "--train-classes", "7", "-o", d / "e7.h5",
                         "--no-progress"])
    assert rc == 0 and "note" not in out, (out, err)


def test_checkpoint_train_classes_only_for_its_own_data_set():
    from embedscope.embed import checkpoint_train_classes

    assert checkpoint_train_classes({"dataset": "digits", "train_classes": 7}, "DIGITS", None)[0] == 7
    assert checkpoint_train_classes({"dataset": "shapes", "train_classes": 7}, "digits", None) == (None, None)
    assert checkpoint_train_classes({"dataset": "digits", "train_classes": None}, "digits", None) == (None, None)
    assert checkpoint_train_classes({"arch": "resnet18"}, "cub200", 3) == (3, None)


# --- resume with another --epochs under a schedule -----------------------------------------------

def _factor(schedule: str, e: int, n: int) -> float:
    """docs/training.md: cosine ½(1 + cos πe/E); step ×0.1 from 50 %, ×0.01 from 75 % of E."""
    if schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * e / n))
    return 1.0 if e < 0.5 * n else (0.1 if e < 0.75 * n else 0.01)


@pytest.mark.parametrize("schedule,done,before,now", [("cosine", 2, 2, 3), ("cosine", 1, 3, 6), ("step", 2, 4, 8),
                                                       ("step", 2, 4, 5), ("cosine", 3, 3, 6), ("none", 3, 3, 6)])
def test_schedule_change_note_matches_the_factors(schedule, done, before, now):
    from embedscope.train.trainer import schedule_change_note

    differs = schedule != "none" and any(_factor(schedule, e, before) != _factor(schedule, e, now)
                                         for e in range(done))
    note = schedule_change_note(schedule, done, before, now)
    assert (note is not None) == differs
    if differs:
        assert f"epochs 1-{done} followed it over {before} epochs" in note


def test_resume_with_more_epochs_under_cosine_says_so(tmp_path):
    from embedscope.train.trainer import train

    opts = {"dataset": "digits", "embed_dim": 4, "eval_every": 0, "lr_schedule": "cosine", "epochs": 2,
            "sampler": "random", "batch_size": 300}
    train(opts, tmp_path / "c.pt", progress=False, echo=lambda s: None)
    said: list[str] = []
    train({"epochs": 3}, tmp_path / "c.pt", resume=True, progress=False, echo=said.append)
    assert any(s.startswith("note: --lr-schedule cosine spans the run's --epochs: epochs 1-2 followed it over 2")
               for s in said), said


# --- usage errors before any work ------------------------------------------------------------------

def test_train_digits_image_size_is_a_usage_error(tmp_path):
    _usage_error(["train", *QUICK, "--epochs", "0", "--image-size", "16", "-o", tmp_path / "r" / "x.pt"],
                 "--image-size 16", "digits")
    assert not (tmp_path / "r").exists()
    rc, _, err = _run(["train", *QUICK, "--epochs", "0", "--eval-every", "0", "--image-size", "8",
                       "-o", tmp_path / "y.pt"])
    assert rc == 0, err


@pytest.mark.parametrize("cmd", ["train", "train-grid"])
def test_batch_size_the_sampler_cannot_split(tmp_path, cmd):
    out = tmp_path / "g"
    args = (["train", *QUICK, "-o", out / "x.pt"] if cmd == "train"
            else ["train-grid", *QUICK, "--losses", "margin", "-o", out])
    _usage_error([*args, "--epochs", "0", "--batch-size", "41"], "--sampler spc-8", "--batch-size", "41")
    _usage_error([*args, "--epochs", "0", "--sampler", "ddm", "--batch-size", "41"], "--sampler ddm", "divisible by 2")
    assert not out.exists()


def test_grid_p_switch_range_whatever_the_losses(tmp_path):
    for bad in ("-3", "nan", "1.5"):
        _usage_error(["train-grid", *QUICK, "--losses", "softmax", "--p-switch", bad, "-o", tmp_path / "g"],
                     "--p-switch")
    assert not (tmp_path / "g").exists()
    from embedscope.errors import UsageError
    from embedscope.train.grid import train_grid

    with pytest.raises(UsageError, match=r"--p-switch must lie in \[0, 1\]"):
        train_grid("digits", ["softmax"], [-3.0], [0], tmp_path / "g")


def test_grid_where_every_run_is_na(tmp_path):
    _usage_error(["train-grid", *QUICK, "--losses", "softmax", "proxynca", "--p-switch", "0.2", "-o", tmp_path / "g"],
                 "--p-switch 0.2", "--losses softmax proxynca", "no run would train")
    assert not (tmp_path / "g").exists()


def test_grid_missing_gpu_leaves_no_folder(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present")
    rc, out, err = _run(["train-grid", *QUICK, "--losses", "margin", "--epochs", "0", "--device", "cuda",
                         "-o", tmp_path / "g"])
    assert rc == 1 and "no CUDA GPU" in err, (out, err)
    assert not (tmp_path / "g").exists()


def test_embed_head_with_checkpoint_names_the_given_option(tmp_path):
    from conftest import save_digits_checkpoint

    ck = save_digits_checkpoint(tmp_path / "d.pt")
    line = _usage_error(["embed", ck, "--dataset", "digits", "--head", "random", "-o", tmp_path / "e.h5"], "--head")
    assert "--weights" not in line
    line = _usage_error(["embed", ck, "--dataset", "digits", "--weights", ck, "-o", tmp_path / "e.h5"], "--weights")
    assert "--head" not in line


# --- notes ------------------------------------------------------------------------------------------

def test_embed_arch_without_weights_says_random(tmp_path):
    rc, out, err = _run(["embed", "--arch", "digits_cnn", "--dataset", "digits", "-o", tmp_path / "e.h5",
                         "--no-progress"])
    assert rc == 0, err
    assert "note: --arch digits_cnn without --weights: the backbone keeps its random initialisation" in out


def test_toy_p_switch_zero_says_the_variants_are_the_baseline(tmp_path):
    import json

    rc, out, err = _run(["toy", "-o", tmp_path / "t", "--n-seeds", "1", "--p-switch", "0", "--no-progress"])
    assert rc == 0, err
    assert "note: --p-switch 0 turns the rho-switch off" in out
    table = json.loads((tmp_path / "t" / "toy_table.json").read_text())
    assert len({(r["rho"], r["r1_test"]) for r in table["runs"]}) == 1  # what the note says
    # one seed: no spread (the terminal shows none; before, the CSV and JSON said 0.0)
    assert all(r[k] is None for r in table["summary"] for k in ("rho_train_std", "R@1_test_std", "R@1_train_std"))
    with open(tmp_path / "t" / "toy_table.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["rho_train_std"] for r in rows] == ["", "", ""]
    assert float(rows[0]["rho_train_mean"]) == table["runs"][0]["rho"]


def test_shapes_set_size_other_than_the_runs_input(tmp_path):
    from embedscope.data.shapes import write_folder

    write_folder(tmp_path / "s", 160, 16, 0, progress=False)
    args = ["train", "--dataset", "shapes", "--root", tmp_path / "s", "--epochs", "0", "--eval-every", "0",
            "--embed-dim", "4", "--no-progress"]
    rc, out, err = _run([*args, "--image-size", "64", "-o", tmp_path / "a.pt"])
    assert rc == 0, err
    assert "the shapes set is rendered at 16 px and this run's input is 64 px (--image-size)" in out
    rc, out, err = _run([*args, "-o", tmp_path / "b.pt"])  # the default is the set's size (audit 25)
    assert rc == 0, err
    assert "rendered at" not in out


def test_toy_seeds_past_the_seed_range(tmp_path):
    _usage_error(["toy", "-o", tmp_path / "t", "--first-seed", str(2**32 - 1), "--n-seeds", "2"],
                 "--first-seed 4294967295", "--n-seeds 2", "4294967296")
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("cmd", ["train", "train-grid"])
def test_arch_that_does_not_fit_the_data_set_is_a_usage_error(tmp_path, cmd):
    out = tmp_path / "g"
    args = (["train", *QUICK, "-o", out / "x.pt"] if cmd == "train"
            else ["train-grid", *QUICK, "--losses", "margin", "triplet", "-o", out])
    _usage_error([*args, "--epochs", "0", "--arch", "resnet18"], "--arch resnet18", "digits")
    assert not out.exists()


def test_grid_whose_first_run_fails_leaves_no_empty_folder(tmp_path):
    from test_cli_embed_datasets import make_cub

    make_cub(tmp_path / "cub")  # 4 classes x 3 images: 6 training images, fewer than a batch of 112
    rc, out, err = _run(["train-grid", "--dataset", "cub200", "--root", tmp_path / "cub", "--losses", "margin",
                         "--arch", "resnet18", "--embed-dim", "4", "--epochs", "0", "--no-progress",
                         "-o", tmp_path / "g" / "sub"])
    assert rc == 1 and "exceeds the 6 training images" in err, (out, err)
    assert not (tmp_path / "g").exists()


def test_make_shapes_refuses_a_folder_whose_images_are_not_a_shapes_set(tmp_path):
    from conftest import snapshot

    d = tmp_path / "photos"
    (d / "images").mkdir(parents=True)
    (d / "images" / "000000.png").write_bytes(b"my own picture")
    before = snapshot(d)
    rc, out, err = _run(["make-shapes", "-o", d, "--n-images", "30", "--size", "16", "--no-progress"])
    assert rc == 1 and "holds files already" in err and len(err.strip().splitlines()) == 1, (out, err)
    assert snapshot(d) == before
    rc, out, err = _run(["make-shapes", "-o", d, "--n-images", "30", "--size", "16", "--no-progress", "--force"])
    assert rc == 0, err
    assert (d / "properties.csv").is_file()


def test_resume_of_a_finished_run_says_kept_not_wrote(tmp_path):
    ck = tmp_path / "u.pt"
    rc, out, err = _run(["train", *QUICK, "--epochs", "0", "--eval-every", "0", "-o", ck])
    assert rc == 0 and f"wrote {ck} (final)" in out, (out, err)
    before = ck.stat().st_mtime_ns
    rc, out, err = _run(["train", "-o", ck, "--resume", "--no-progress"])
    assert rc == 0, err
    assert "already trained for 0 epochs (nothing to do)" in out
    assert f"kept {ck} (final, as it was)" in out and "wrote" not in out, out
    assert ck.stat().st_mtime_ns == before


def test_embed_arch_baseline_that_does_not_fit_the_data_set(tmp_path):
    line = _usage_error(["embed", "--arch", "resnet18", "--dataset", "digits", "-o", tmp_path / "e.h5"],
                        "--arch resnet18", "digits")
    assert "checkpoint" not in line  # (before: "a resnet18 checkpoint cannot embed ...", exit 1, no checkpoint given)
    assert not (tmp_path / "e.h5").exists()


@pytest.mark.parametrize("name", ["emb.png", "emb.csv", "emb.pt"])
def test_embed_output_named_as_another_format_is_refused(tmp_path, name):
    """embed writes HDF5: -o emb.png (or a run's .csv log, with --force) is a usage error before any work."""
    from tests.conftest import save_digits_checkpoint

    ck = save_digits_checkpoint(tmp_path / "c.pt")
    (tmp_path / "emb.csv").write_text("keep me\n")
    _usage_error(["embed", ck, "--dataset", "digits", "-o", tmp_path / name, "--force", "--no-progress"],
                 "-o", "HDF5", ".h5")
    assert (tmp_path / "emb.csv").read_text() == "keep me\n" and not (tmp_path / "emb.png").exists()
    for ok in ("emb.h5", "emb.hdf5"):
        rc, _, err = _run(["embed", ck, "--dataset", "digits", "--split", "test", "-o", tmp_path / ok, "--no-progress"])
        assert rc == 0, err


@pytest.mark.parametrize("opt,name", [("-o", "run.h5"), ("-o", "run.csv"), ("--log", "log.json")])
def test_train_output_named_as_another_format_is_refused(tmp_path, opt, name):
    """train writes a PyTorch checkpoint (-o) and a CSV log (--log): other formats' names are usage errors."""
    args = ["train", "--dataset", "digits", "--epochs", "1", "--no-progress"]
    args += ["-o", tmp_path / name] if opt == "-o" else ["-o", tmp_path / "run.pt", "--log", tmp_path / name]
    _usage_error(args, opt)
    assert not any(tmp_path.iterdir())
