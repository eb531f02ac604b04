"""Audit 25: loose ends of ``train``, ``train-grid``, ``embed`` on shapes, and ``import``
(docs/training.md, docs/import.md).

What was wrong before:

* a ``shapes`` set made with ``make-shapes --size 16`` was trained (``train --dataset shapes --root``)
  at 64 px, the shapes default of ``--image-size``, whatever size it was made at (a note said so), and
  ``embed --arch shapes_cnn`` of it (no train run behind it) embedded 64-px crops of it too;
* ``import --labels NAME`` (also ``--split``, ``--paths``, ``--class-names``: FILE|KEY) took the
  column NAME when NAME was also an existing file, without a word, and there was no way to say "the
  column";
* ``train --resume --log OTHER.csv`` continued the run in OTHER.csv and left the run's own log as it
  was (stale, without the new epochs); a run started with ``--log L.csv`` and resumed without it
  continued in -o's default log; and an existing file at ``--log`` that was no training log was
  replaced by a resume;
* ``import x.npy --embeddings foo`` ignored --embeddings (a single array has no keys) without a word;
* ``train --loss multisimilarity --miner semihard`` replaced the loss's own pair mining without a word,
  and the --p-switch note of ``--loss lifted`` spoke of its "own pair mining" (it takes every pair);
* ``train --arch bninception --image-size 299`` kept the arch's Resize(256), so every evaluation image
  (and ``embed`` of the checkpoint) was Resize(256) + CenterCrop(299): padded; on ``shapes`` (64 px)
  the evaluation crop kept the middle quarter of a 256-px resize.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from cli_run import run_cli

DIGITS = ["--dataset", "digits", "--embed-dim", "4", "--eval-every", "0", "--no-progress"]


_run = run_cli  # (exit code, stdout, stderr)


def _error(args, rc: int, *words) -> str:
    code, out, err = _run(args)
    assert code == rc, (code, out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _config(path) -> dict:
    from embedscope.models import read_checkpoint

    return read_checkpoint(path)["config"]


def _transform(h5) -> str:
    import h5py

    with h5py.File(h5, "r") as f:
        return str(f.attrs["transform"])


# ----------------------------------------------------------------------------- 1. shapes image size

@pytest.fixture(scope="module")
def shapes16(tmp_path_factory):
    from embedscope.data.shapes import write_folder

    d = tmp_path_factory.mktemp("shapes16") / "s"
    write_folder(d, 160, 16, 0, progress=False)
    return d


def test_shapes_run_defaults_to_the_size_the_set_was_made_at(shapes16, tmp_path):
    args = ["train", "--dataset", "shapes", "--root", shapes16, "--epochs", "0", "--eval-every", "0",
            "--embed-dim", "4", "--no-progress"]
    rc, out, err = _run([*args, "-o", tmp_path / "a.pt"])
    assert rc == 0, err
    assert _config(tmp_path / "a.pt")["image_size"] == 16  # was 64
    assert "rendered at" not in out  # nothing is resampled
    # an explicit --image-size wins, with the note of audit 24
    rc, out, err = _run([*args, "--image-size", "64", "-o", tmp_path / "b.pt"])
    assert rc == 0, err
    assert _config(tmp_path / "b.pt")["image_size"] == 64
    assert "the shapes set is rendered at 16 px and this run's input is 64 px (--image-size)" in out

    # embed: a train run's recorded size wins; --image-size wins over it (with its note)
    emb = ["embed", "--dataset", "shapes", "--no-progress"]
    rc, out, err = _run([*emb, tmp_path / "b.pt", "-o", tmp_path / "b.h5"])
    assert rc == 0, err
    assert "CenterCrop(64)" in _transform(tmp_path / "b.h5")
    rc, out, err = _run([*emb, tmp_path / "a.pt", "-o", tmp_path / "a.h5"])
    assert rc == 0, err
    assert "CenterCrop(16)" in _transform(tmp_path / "a.h5")
    rc, out, err = _run([*emb, tmp_path / "a.pt", "--image-size", "32", "-o", tmp_path / "a32.h5"])
    assert rc == 0, err
    assert "CenterCrop(32)" in _transform(tmp_path / "a32.h5")
    assert "the checkpoint was trained on 16x16 inputs" in out
    # a shapes_cnn without a train run behind it: the set's size (was 64), --image-size still wins
    base = [*emb, "--root", shapes16, "--arch", "shapes_cnn", "--head", "random", "--embed-dim", "4"]
    rc, out, err = _run([*base, "-o", tmp_path / "r.h5"])
    assert rc == 0, err
    assert "CenterCrop(16)" in _transform(tmp_path / "r.h5")
    rc, out, err = _run([*base, "--image-size", "48", "-o", tmp_path / "r48.h5"])
    assert rc == 0, err
    assert "CenterCrop(48)" in _transform(tmp_path / "r48.h5")


def test_rendered_size_of_a_shapes_folder(shapes16, tmp_path):
    from embedscope.data.shapes import DEFAULT_SIZE, rendered_size
    from embedscope.train.trainer import resolve_config

    assert rendered_size(shapes16) == 16
    assert rendered_size(None) == DEFAULT_SIZE == 64  # the generated default set
    empty = tmp_path / "cache"
    empty.mkdir()
    assert rendered_size(empty) == 64  # a folder that caches the generated set
    assert resolve_config({"dataset": "shapes"})["image_size"] == 64
    assert resolve_config({"dataset": "shapes", "root": str(shapes16)})["image_size"] == 16
    assert resolve_config({"dataset": "shapes", "root": str(shapes16), "image_size": 40})["image_size"] == 40
    # a folder whose shapes.json is missing or holds no valid size: unknown (the default 64 then)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "properties.csv").write_text("path,shape\n")
    assert rendered_size(bad) is None
    for text in ("[1, 2]", "{\"size\": \"32\"}", "{\"size\": 8}", "not json", "{\"size\": true}"):
        (bad / "shapes.json").write_text(text)
        assert rendered_size(bad) is None, text
    (bad / "shapes.json").write_text(json.dumps({"size": 24}))
    assert rendered_size(bad) == 24


# ----------------------------------------------------------------------------- 2. import FILE|KEY

@pytest.fixture
def ambiguous(tmp_path, monkeypatch):
    """A table whose column 'lab.txt' is also the name of a file beside it (other labels)."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 3))
    col = np.arange(12) % 3
    with open("t.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["d0", "d1", "d2", "lab.txt", "split"])
        for i in range(12):
            w.writerow([*X[i], col[i], "train" if i < 6 else "test"])
    (tmp_path / "lab.txt").write_text("\n".join(str(i % 2) for i in range(12)) + "\n")
    (tmp_path / "split").write_text("x\n")  # (no source format: only its name matters)
    return tmp_path, col, np.arange(12) % 2


def _labels(h5) -> np.ndarray:
    from embedscope import store

    es = store.load(h5)
    return np.asarray([int(es.class_names[i]) for i in es.labels])


def test_import_value_that_is_a_column_and_a_file_is_refused(ambiguous):
    tmp, col, filed = ambiguous
    line = _error(["import", "t.csv", "-o", "a.h5", "--embeddings", "d*", "--labels", "lab.txt"], 2,
                  "--labels lab.txt", "both a key/column of t.csv and a file", "--labels key:lab.txt",
                  "--labels ./lab.txt")
    assert line.startswith("embedscope import: error:")
    assert not (tmp / "a.h5").exists()
    # key: takes the column, ./ the file
    rc, out, err = _run(["import", "t.csv", "-o", "k.h5", "--embeddings", "d*", "--labels", "key:lab.txt"])
    assert rc == 0, err
    assert np.array_equal(_labels(tmp / "k.h5"), col)
    rc, out, err = _run(["import", "t.csv", "-o", "f.h5", "--embeddings", "d*", "--labels", "./lab.txt"])
    assert rc == 0, err
    assert np.array_equal(_labels(tmp / "f.h5"), filed)
    # a key: that names no key/column is not read as a file
    _error(["import", "t.csv", "-o", "n.h5", "--embeddings", "d*", "--labels", "key:nope"], 1,
           "no key or column 'nope' for the labels", "never a file")


def test_import_split_named_with_key_prefix_is_the_sources_own(ambiguous):
    tmp, _, _ = ambiguous
    _error(["import", "t.csv", "-o", "a.h5", "--embeddings", "d*", "--labels", "key:lab.txt", "--split", "split"],
           2, "--split split", "--split key:split", "--split ./split")
    rc, out, err = _run(["import", "t.csv", "-o", "s.h5", "--embeddings", "d*", "--labels", "key:lab.txt",
                         "--split", "key:split"])
    assert rc == 0, err
    assert "replaced" not in err  # the source's own split column, not another one
    from embedscope import store

    es = store.load(tmp / "s.h5")
    assert es.attrs["split_source"] == "from the source"
    assert list(es.split) == ["train"] * 6 + ["test"] * 6


# ----------------------------------------------------------------------------- 3. --resume and --log

@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory):
    """A digits run of 1 epoch (-o r.pt, log r.csv) and one started with --log L1.csv."""
    d = tmp_path_factory.mktemp("runs")
    rc, out, err = _run(["train", *DIGITS, "--epochs", "1", "-o", d / "r.pt"])
    assert rc == 0, err
    rc, out, err = _run(["train", *DIGITS, "--epochs", "1", "-o", d / "s.pt", "--log", d / "L1.csv"])
    assert rc == 0, err
    return d


def _copy_run(src, name, dst):
    import shutil

    shutil.copy2(src / f"{name}.pt", dst / f"{name}.pt")
    shutil.copytree(src / f"{name}.pt.train", dst / f"{name}.pt.train")


def test_resume_with_another_log_is_refused(one_epoch, tmp_path):
    _copy_run(one_epoch, "r", tmp_path)
    (tmp_path / "r.csv").write_bytes((one_epoch / "r.csv").read_bytes())
    before = (tmp_path / "r.csv").read_bytes()
    _error(["train", *DIGITS, "--epochs", "2", "-o", tmp_path / "r.pt", "--resume", "--log", tmp_path / "o.csv"], 2,
           f"whose log is {tmp_path / 'r.csv'}", f"--log {tmp_path / 'o.csv'}", "drop --log")
    assert not (tmp_path / "o.csv").exists() and (tmp_path / "r.csv").read_bytes() == before
    # started with --log L1.csv, resumed without it: -o's default log is another one
    _copy_run(one_epoch, "s", tmp_path)
    (tmp_path / "L1.csv").write_bytes((one_epoch / "L1.csv").read_bytes())
    _error(["train", *DIGITS, "--epochs", "2", "-o", tmp_path / "s.pt", "--resume"], 2,
           f"whose log is {tmp_path / 'L1.csv'}", f"the default log {tmp_path / 's.csv'}",
           f"give --log {tmp_path / 'L1.csv'}")
    assert not (tmp_path / "s.csv").exists()


def test_resume_does_not_replace_a_file_that_is_no_log(one_epoch, tmp_path):
    _copy_run(one_epoch, "r", tmp_path)  # (its log r.csv is gone: moved)
    (tmp_path / "notes.csv").write_text("my,notes\n1,2\n")
    _error(["train", *DIGITS, "--epochs", "2", "-o", tmp_path / "r.pt", "--resume", "--log", tmp_path / "notes.csv"],
           1, "notes.csv exists and is not a training log")
    assert (tmp_path / "notes.csv").read_text() == "my,notes\n1,2\n"


def test_resume_in_a_moved_log_continues_it_with_every_epoch(one_epoch, tmp_path):
    _copy_run(one_epoch, "r", tmp_path)
    (tmp_path / "moved.csv").write_bytes((one_epoch / "r.csv").read_bytes())  # r.csv moved to moved.csv
    rc, out, err = _run(["train", *DIGITS, "--epochs", "2", "-o", tmp_path / "r.pt", "--resume",
                         "--log", tmp_path / "moved.csv"])
    assert rc == 0, err
    assert f"the run's log {tmp_path / 'r.csv'} is not there" in out
    with open(tmp_path / "moved.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["epoch"] for r in rows] == ["0", "1", "2"]
    with open(one_epoch / "r.csv", newline="") as f:
        first = list(csv.DictReader(f))
    cols = ["epoch", "loss", "R@1", "MAP@R", "rho", "seconds"]  # (the config columns say --epochs 2 now)
    assert [[r[c] for c in cols] for r in rows[:2]] == [[r[c] for c in cols] for r in first]  # as logged then
    from embedscope.models import read_checkpoint

    assert read_checkpoint(tmp_path / "r.pt")["extra"]["log"] == "moved.csv"
    # resumed again: its log is now moved.csv (no refusal, no note)
    rc, out, err = _run(["train", *DIGITS, "--epochs", "2", "-o", tmp_path / "r.pt", "--resume",
                         "--log", tmp_path / "moved.csv"])
    assert rc == 0, err
    assert "is not there" not in out


def interrupted_digits_run(grid, loss: str, **extra) -> None:
    """A 2-epoch digits run of train-grid's name in ``grid``, stopped after epoch 1 (its last.pt kept)."""
    from embedscope.train.trainer import train

    class Stop(Exception):
        pass

    def stop(epoch, row):
        if epoch == 1:
            raise Stop

    grid.mkdir(exist_ok=True)
    opts = {"dataset": "digits", "loss": loss, "p_switch": 0.0, "seed": 0, "embed_dim": 4, "epochs": 2,
            "eval_every": 0, **extra}
    with pytest.raises(Stop):
        train(opts, grid / f"digits_{loss}_p0_s0.pt", progress=False, callback=stop, echo=lambda s: None)


def test_grid_resume_continues_the_runs_own_log(tmp_path):
    grid = tmp_path / "g"
    interrupted_digits_run(grid, "margin")
    assert (grid / "digits_margin_p0_s0.pt.train" / "last.pt").is_file()
    rc, out, err = _run(["train-grid", *DIGITS, "--losses", "margin", "--epochs", "2", "-o", grid])
    assert rc == 0, err
    assert "digits_margin_p0_s0: resuming" in out
    with open(grid / "digits_margin_p0_s0.csv", newline="") as f:
        assert [r["epoch"] for r in csv.DictReader(f)] == ["0", "1", "2"]
    from embedscope.models import read_checkpoint

    assert read_checkpoint(grid / "digits_margin_p0_s0.pt")["extra"]["log"] == "digits_margin_p0_s0.csv"


# ----------------------------------------------------------------------------- 4. option combinations

def test_miner_replacing_multisimilarity_own_mining_is_said(tmp_path):
    args = ["train", *DIGITS, "--epochs", "0", "--loss", "multisimilarity"]
    rc, out, err = _run([*args, "--miner", "semihard", "-o", tmp_path / "a.pt"])
    assert rc == 0, err
    assert "note: --miner semihard: the multisimilarity loss's own pair mining" in out
    with open(tmp_path / "a.csv", newline="") as f:
        assert "--miner semihard" in next(csv.DictReader(f))["notes"]
    rc, out, err = _run([*args, "-o", tmp_path / "b.pt"])  # its own mining: nothing to say
    assert rc == 0, err
    assert "own pair mining" not in out


def test_image_size_drops_the_arch_resize_of_another_crop():
    from embedscope.data import describe_transform
    from embedscope.train.trainer import resolve_config

    for size in (299, 64):
        cfg = resolve_config({"dataset": "cub200", "arch": "bninception", "image_size": size})
        assert cfg["image_size"] == size and "resize" not in cfg
        assert f"Resize({round(size * 256 / 224)}) + CenterCrop({size})" in describe_transform(
            "image", train=False, image_size=size, resize=cfg.get("resize"))
    cfg = resolve_config({"dataset": "shapes", "arch": "bninception"})
    assert cfg["image_size"] == 64 and "resize" not in cfg
    for opts in ({}, {"image_size": 227}):  # its own crop keeps the Cadene resize
        cfg = resolve_config({"dataset": "cub200", "arch": "bninception", **opts})
        assert (cfg["image_size"], cfg["resize"]) == (227, 256)


def test_p_switch_note_names_what_it_replaces():
    """The lifted loss has no pair mining of its own (it takes every pair of the batch): the note of
    --p-switch said its "own pair mining" was replaced."""
    from embedscope.train.trainer import config_notes, resolve_config

    (lifted,) = config_notes(resolve_config({"dataset": "digits", "loss": "lifted", "p_switch": 0.2}))
    assert "the lifted loss's use of every pair of the batch is replaced by distance-weighted" in lifted
    (ms,) = config_notes(resolve_config({"dataset": "digits", "loss": "multisimilarity", "p_switch": 0.2}))
    assert "the multisimilarity loss's own pair mining is replaced by distance-weighted" in ms
    assert config_notes(resolve_config({"dataset": "digits", "loss": "margin", "p_switch": 0.2})) == []


def test_import_embeddings_key_of_a_single_array_is_refused(tmp_path, monkeypatch):
    """`import x.npy --embeddings foo`: a .npy (or a .pt of one tensor) has no keys, and the option was
    ignored without a word (the one array was taken)."""
    monkeypatch.chdir(tmp_path)
    np.save("x.npy", np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32))
    (tmp_path / "y.txt").write_text("0\n1\n0\n1\n0\n1\n")
    _error(["import", "x.npy", "-o", "a.h5", "--labels", "y.txt", "--embeddings", "foo"], 1,
           "--embeddings foo names a key or column, but the source is one array", "drop --embeddings")
    assert not (tmp_path / "a.h5").exists()
    rc, out, err = _run(["import", "x.npy", "-o", "b.h5", "--labels", "y.txt"])
    assert rc == 0, err
