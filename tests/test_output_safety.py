"""Nothing already written is lost: an output that is one of the command's own inputs is refused
(even with --force, through symlinks, hard links and relative paths), and a failed ``train --force``
leaves the earlier run's checkpoint, log and run folder as they were."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import save_digits_checkpoint, snapshot

from embedscope.cli import main

TRAIN = ["train", "--dataset", "digits", "--embed-dim", "8", "--no-progress", "--device", "cpu"]


def run_main(args, capsys):
    capsys.readouterr()
    try:
        rc = main([str(a) for a in args])
    except SystemExit as e:  # argparse usage errors
        rc = e.code
    return rc, capsys.readouterr().err


def assert_refused(args, capsys, folder):
    before = snapshot(folder)
    rc, err = run_main(args, capsys)
    assert rc == 2, (rc, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    # an input file, or a new file in the study's own folders (figures/, rows/), which is no input: said so
    assert ("is an input file: choose another output name" in err
            or ("folder, which the study writes" in err and "choose another output name" in err)), err
    assert snapshot(folder) == before, "an input was changed"


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpt")
    save_digits_checkpoint(d / "m.pt")
    return d


@pytest.fixture
def work(ckpt_dir, tmp_path, monkeypatch):
    """A folder holding c.pt (a copy of the checkpoint), a symlink and a hard link to it; the cwd."""
    (tmp_path / "c.pt").write_bytes((ckpt_dir / "m.pt").read_bytes())
    os.symlink("c.pt", tmp_path / "link.pt")
    os.link(tmp_path / "c.pt", tmp_path / "hard.pt")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ------------------------------------------------------------------ an input as the output
@pytest.mark.parametrize("ckpt, out", [("c.pt", "c.pt"), ("c.pt", "./sub/../c.pt"), ("c.pt", "link.pt"),
                                       ("link.pt", "c.pt"), ("c.pt", "hard.pt"), ("c.pt", "ABS")])
def test_embed_refuses_its_checkpoint(work, capsys, ckpt, out):
    out = str(work / "c.pt") if out == "ABS" else out
    assert_refused(["embed", ckpt, "--dataset", "digits", "-o", out, "--force", "--no-progress", "--device", "cpu"],
                   capsys, work)


def test_embed_refuses_its_weights(work, capsys):
    assert_refused(["embed", "--arch", "digits_cnn", "--weights", "c.pt", "--dataset", "digits", "-o", "hard.pt",
                    "--force", "--no-progress", "--device", "cpu"], capsys, work)


def test_embed_refuses_trunk_and_embedder(work, capsys):
    for out in ("c.pt", "link.pt"):
        assert_refused(["embed", "--trunk", "c.pt", "--embedder", "hard.pt", "--dataset", "digits", "-o", out,
                        "--force", "--no-progress"], capsys, work)


@pytest.mark.parametrize("out", ["c.pt", "link.pt", "hard.pt"])
def test_saliency_refuses_its_checkpoint(work, capsys, out):
    assert_refused(["saliency", "c.pt", "--dataset", "digits", "--n-images", "2", "--n-samples", "2", "-o", out,
                    "--force", "--no-progress", "--device", "cpu"], capsys, work)


def test_saliency_refuses_its_paths_file(work, capsys):
    (work / "paths.png").write_text("0\n")
    assert_refused(["saliency", "c.pt", "--dataset", "digits", "--paths-file", "paths.png", "--n-samples", "2",
                    "-o", "paths.png", "--force", "--no-progress", "--device", "cpu"], capsys, work)
    assert_refused(["saliency", "c.pt", "--dataset", "digits", "--paths-file", "paths.png", "--n-samples", "2",
                    "-o", "maps.h5", "--figure", "paths.png", "--force", "--no-progress", "--device", "cpu"],
                   capsys, work)


@pytest.mark.parametrize("out", ["y.npy", "X.npy", "./sub/../y.npy", "ylink.npy"])
def test_import_refuses_its_inputs(work, capsys, out):
    np.save(work / "X.npy", np.random.default_rng(0).normal(size=(10, 4)))
    np.save(work / "y.npy", np.arange(10) % 2)
    os.symlink("y.npy", work / "ylink.npy")
    assert_refused(["import", "X.npy", "--labels", "y.npy", "-o", out, "--force"], capsys, work)
    # another name is fine
    rc, err = run_main(["import", "X.npy", "--labels", "y.npy", "-o", "ok.h5"], capsys)
    assert rc == 0, err


@pytest.fixture
def study(tmp_path):
    d = tmp_path / "study"
    (d / "figures").mkdir(parents=True)
    (d / "rows").mkdir()
    for name in ("study.json", "correlations.json"):
        (d / name).write_text("{}")
    for name in ("runs.csv", "correlations.csv", "runs.parquet"):
        (d / name).write_text("precious\n")
    (d / "figures" / "correlations.png").write_bytes(b"\x89PNG precious")
    (d / "rows" / "a.json").write_text("{}")
    return d


@pytest.mark.parametrize("name", ["runs.csv", "runs.parquet", "study.json", "correlations.json",
                                  "correlations.csv", "figures/correlations.png", "figures/new.html",
                                  "rows/a.json", "figures/../runs.csv"])
def test_report_refuses_the_study_files(study, capsys, name):
    assert_refused(["report", study, "-o", f"{study}/{name}", "--force"], capsys, study)


def test_report_in_the_study_figures_folder_is_not_called_an_input(study, capsys):
    rc, err = run_main(["report", study, "-o", f"{study}/figures/new.html"], capsys)
    assert rc == 2 and "is in the study's figures/ folder" in err and "input file" not in err, err


def test_report_refuses_through_a_symlink(study, tmp_path, capsys):
    os.symlink(study, tmp_path / "alias")
    assert_refused(["report", tmp_path / "alias", "-o", study / "runs.csv", "--force"], capsys, study)
    assert_refused(["report", study, "-o", tmp_path / "alias" / "correlations.json", "--force"], capsys, study)


def test_train_refuses_its_weights_and_config(work, capsys):
    assert_refused([*TRAIN, "--epochs", "0", "--weights", "c.pt", "-o", "hard.pt", "--force"], capsys, work)
    (work / "run.yaml").write_text("epochs: 0\n")
    assert_refused([*TRAIN, "--config", "run.yaml", "-o", "x.pt", "--log", "run.yaml", "--force"], capsys, work)


# ------------------------------------------------------------------ a failed train --force keeps the old run
@pytest.fixture
def old_run(tmp_path, capsys):
    """keep.pt, keep.csv and keep.pt.train/ (last.pt, epoch-000.pt) of a finished 0-epoch run."""
    out = tmp_path / "keep.pt"
    rc, err = run_main([*TRAIN, "--epochs", "0", "--eval-every", "0", "--keep-epochs", "-o", out], capsys)
    assert rc == 0, err
    assert {"keep.pt", "keep.csv", "keep.pt.train/last.pt", "keep.pt.train/epoch-000.pt"} <= set(snapshot(tmp_path))
    return out


@pytest.mark.parametrize("bad", [["--epochs", "0", "--train-classes", "9"],
                                 ["--epochs", "1", "--eval-every", "0", "--loss-param", "margin=abc"]])
def test_failed_train_force_keeps_the_old_run(old_run, capsys, bad):
    before = snapshot(old_run.parent)
    rc, err = run_main([*TRAIN, *bad, "-o", old_run, "--force"], capsys)
    assert rc in (1, 2), err
    assert len(err.strip().splitlines()) == 1, err
    assert snapshot(old_run.parent) == before


@pytest.mark.parametrize("patched, epochs", [
    ("_train_epoch", 2),  # Ctrl-C during epoch 1, before the new run wrote anything
    ("_write_log", 0),  # the first write itself fails after the new last.pt is written: the old files come back
])
def test_interrupted_train_force_keeps_the_old_run(old_run, monkeypatch, patched, epochs):
    from embedscope.train import trainer

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer, patched, interrupted)
    before = snapshot(old_run.parent)
    with pytest.raises(KeyboardInterrupt):
        trainer.train({"dataset": "digits", "embed_dim": 8, "epochs": epochs, "eval_every": 0, "device": "cpu"},
                      old_run, force=True, progress=False, echo=lambda s: None)
    assert snapshot(old_run.parent) == before


def test_successful_train_force_replaces_the_old_run(old_run, capsys):
    before = snapshot(old_run.parent)
    rc, err = run_main([*TRAIN, "--epochs", "0", "--eval-every", "0", "--seed", "1", "-o", old_run, "--force"],
                       capsys)
    assert rc == 0, err
    after = snapshot(old_run.parent)
    # replaced whole: new checkpoint, log and last.pt; the old epoch-000.pt (no --keep-epochs now) is gone,
    # and nothing set aside is left behind
    assert set(after) == {"keep.pt", "keep.csv", "keep.pt.train", "keep.pt.train/last.pt"}, after
    for name in ("keep.pt", "keep.pt.train/last.pt"):
        assert after[name] != before[name]
    from embedscope.models import read_checkpoint

    assert read_checkpoint(old_run)["config"]["seed"] == 1


def test_resume_still_works_after_a_failed_force(tmp_path, capsys):
    out = tmp_path / "r.pt"
    rc, err = run_main([*TRAIN, "--epochs", "0", "--eval-every", "0", "-o", out], capsys)
    assert rc == 0, err
    rc, err = run_main([*TRAIN, "--epochs", "0", "--train-classes", "9", "-o", out, "--force"], capsys)
    assert rc == 1, err
    rc, err = run_main([*TRAIN, "--epochs", "0", "--eval-every", "0", "-o", out, "--resume"], capsys)
    assert rc == 0, err


_KILLED_DURING_FIRST_WRITE = """
import os, signal, sys
from embedscope.train import trainer
real = trainer._write_log
def killed(path, *a, **k):  # the new last.pt is written; the process dies while writing the log
    path.write_text("partial")
    os.kill(os.getpid(), signal.SIGKILL)
trainer._write_log = killed
trainer.train({"dataset": "digits", "embed_dim": 8, "epochs": 0, "eval_every": 0, "device": "cpu", "seed": 3},
              sys.argv[1], force=True, progress=False, echo=lambda s: None)
"""


def test_train_force_killed_during_its_first_write_gives_the_old_run_back(old_run, capsys):
    import signal
    import subprocess
    import sys

    before = snapshot(old_run.parent)
    p = subprocess.run([sys.executable, "-c", _KILLED_DURING_FIRST_WRITE, str(old_run)], capture_output=True)
    assert p.returncode == -signal.SIGKILL, p.stderr.decode()
    killed = snapshot(old_run.parent)
    assert killed != before and "keep.pt.train/.replacing.json" in killed  # the earlier run is set aside
    assert any(k.endswith(".old") for k in killed)
    # the next train into the same run puts the earlier run back first (here it then refuses: no --force)
    capsys.readouterr()
    rc = main([str(a) for a in [*TRAIN, "--epochs", "0", "--eval-every", "0", "-o", old_run]])
    out, err = capsys.readouterr()
    assert rc == 1 and "exists" in err, err
    assert "put back the earlier run" in out + err, (out, err)
    assert snapshot(old_run.parent) == before
    from embedscope.train import trainer

    notes = []
    trainer._recover_replacement(trainer.run_paths(old_run), notes.append)  # nothing left to recover
    assert notes == []


def test_a_live_replacement_is_left_alone(old_run):
    import json

    from embedscope.errors import EmbedscopeError
    from embedscope.train import trainer

    paths = trainer.run_paths(old_run)
    (paths["dir"] / ".replacing.json").write_text(json.dumps({"pid": os.getppid(), "aside": []}))
    before = snapshot(old_run.parent)
    with pytest.raises(EmbedscopeError, match="is replacing this run right now"):
        trainer._recover_replacement(paths, print)
    assert snapshot(old_run.parent) == before
