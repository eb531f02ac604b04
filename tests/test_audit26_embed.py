"""Audit 26 (helper E): ``embed`` of a checkpoint gives the rows its training log was computed from.

What was wrong before:

* ``embed CKPT --dataset digits`` embedded every row in one pass, in batches of 128 that mixed
  training and test images, while ``train``'s evaluation embeds each split on its own in batches of
  256: the file's ρ differed from the log's in its last digits (a 2-epoch digits run: file
  0.39633523326817854, log 0.3963352330207671; R@1 equal). ``embed`` now embeds each split on its
  own, in the trainer's batches unless ``--batch-size`` is given, through the function ``study``
  uses too (``embed_images(..., by_split=True)``).
* a diverged checkpoint (NaN weights) in a study was embedded a second time, only to get ``embed``'s
  message; the one embedding now raises that message (``embedscope.embed.nonfinite_message``).
"""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest
from cli_run import run_cli

from embedscope import store
from embedscope.cli import main


def _train(*args) -> None:
    assert main(["train", *args, "--no-progress"]) == 0


@pytest.fixture(scope="module")
def run2(tmp_path_factory):
    """A digits run of 2 epochs (tiny settings), evaluated after each epoch: (checkpoint, its log's last row)."""
    d = tmp_path_factory.mktemp("run2")
    _train("--dataset", "digits", "--epochs", "2", "--embed-dim", "8", "-o", str(d / "r.pt"))
    with open(d / "r.csv", newline="") as fh:
        log = list(csv.DictReader(fh))
    assert [r["epoch"] for r in log] == ["0", "1", "2"]
    return d / "r.pt", log[-1]


def _rho(X: np.ndarray) -> float:
    """ρ by brute force (docs/methods.md §2, exclude_top=1): the singular values of the rows (not
    centred), the spectrum without its largest value normalised to a distribution, KL(U || p)."""
    s = np.linalg.svd(X.astype(np.float64), compute_uv=False)[1:]
    p = s / s.sum()
    u = np.full(len(p), 1.0 / len(p))
    return float(np.sum(u * np.log(u / p)))


def _r1(X: np.ndarray, y: np.ndarray) -> float:
    """Test R@1 by brute force: each row's nearest other row by cosine (ties to the lower index)."""
    Z = X.astype(np.float64) / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
    hits = 0
    for i in range(len(Z)):
        d = 1.0 - Z @ Z[i]
        d[i] = np.inf
        hits += int(y[int(np.argmin(d))] == y[i])
    return hits / len(Z)


def _file_measures(path):
    from embedscope.metrics import retrieval_metrics, spectral_decay

    es = store.load(path)
    tr, te = es.split == "train", es.split == "test"
    rho = float(spectral_decay(es.embeddings[tr]))
    r1 = float(retrieval_metrics(es.embeddings[te], es.labels[te], include=["R@1"])["R@1"])
    return es, rho, r1


# ----------------------------------------------------------------------------- 1. the log, bit for bit
def test_embed_gives_the_training_logs_rho_and_r1_to_the_last_bit(run2, tmp_path):
    ckpt, log = run2
    out = tmp_path / "e.h5"
    rc, stdout, stderr = run_cli(["embed", str(ckpt), "--dataset", "digits", "-o", str(out)])
    assert rc == 0, stderr
    es, rho, r1 = _file_measures(out)
    assert rho == float(log["rho"]) and r1 == float(log["R@1"]), (repr(rho), log["rho"], r1, log["R@1"])
    # the log's numbers are those of the rows (the measures, recomputed by brute force)
    tr, te = es.split == "train", es.split == "test"
    assert _rho(es.embeddings[tr]) == pytest.approx(rho, rel=1e-9)
    assert _r1(es.embeddings[te], es.labels[te]) == r1
    # one phase line, over both splits' batches: ceil(901 / 256) + ceil(896 / 256) = 8
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("embed digits/all: 8/8 batches in "), stderr


def test_the_rows_are_each_splits_own_in_the_trainers_batches(run2, tmp_path):
    """Row for row what the trainer's evaluation embeds (each split alone, batches of 256), in the data
    set's order; with --batch-size N each split alone in batches of N (the user's size wins)."""
    from embedscope.data import get_dataset
    from embedscope.embed import checkpoint_input, embed_images
    from embedscope.models import load_checkpoint

    ckpt, _ = run2
    model, cfg, _ = load_checkpoint(ckpt)
    ds = get_dataset("digits")
    tf = checkpoint_input(ds, cfg)[0]
    for flag, batch in (([], 256), (["--batch-size", "100"], 100)):
        out = tmp_path / f"e{batch}.h5"
        assert main(["embed", str(ckpt), "--dataset", "digits", "-o", str(out), "--no-progress", *flag]) == 0
        es = store.load(out)
        assert list(es.paths) == list(ds.paths) and np.array_equal(es.labels, ds.labels)
        assert list(es.split) == list(ds.split)
        for split in ("train", "test"):
            # the trainer's call (trainer._evaluate): the split's own data set, one embed_images
            ref = embed_images(model, ds.subset(split), transform=tf, batch_size=batch, device="cpu", progress=False)
            assert np.array_equal(es.embeddings[es.split == split], ref), (batch, split)


def test_split_train_and_test_files_hold_the_same_rows_as_all(run2, tmp_path):
    from embedscope.embed import embed_to_file

    ckpt, _ = run2
    files = {}
    for split in ("all", "train", "test"):
        files[split] = store.load(embed_to_file(ckpt, "digits", tmp_path / f"{split}.h5", split=split, device="cpu",
                                                progress=False))
    whole = files["all"]
    for split in ("train", "test"):
        part = files[split]
        assert part.attrs["split_selected"] == split and set(part.split) == {split}
        assert np.array_equal(part.embeddings, whole.embeddings[whole.split == split])
        assert list(part.paths) == list(whole.paths[whole.split == split])


def test_the_files_fields_are_as_before(run2, tmp_path):
    """Only how the rows are batched changed: the same datasets and attributes, the digits' order."""
    import h5py

    from embedscope.data import get_dataset

    ckpt, _ = run2
    out = tmp_path / "e.h5"
    assert main(["embed", str(ckpt), "--dataset", "digits", "-o", str(out), "--no-progress"]) == 0
    with h5py.File(out, "r") as f:
        assert sorted(f.keys()) == ["class_names", "embeddings", "labels", "paths", "properties", "split"]
        assert sorted(f["properties"].keys()) == sorted(get_dataset("digits").properties)
        assert f["embeddings"].dtype == np.float32 and f["embeddings"].shape == (1797, 8)
        attrs = set(f.attrs)
    assert {"format_version", "embedscope_version", "created", "dataset", "root", "split_selected", "device",
            "torch_threads", "torch_version", "precision", "transform", "checkpoint", "checkpoint_format",
            "checkpoint_sha256", "checkpoint_config"} <= attrs
    # the batch's size is recorded (it changes the last bits), no more of how the rows were batched
    assert [a for a in attrs if "batch" in a] == ["batch_size"]
    es = store.load(out)
    assert list(es.paths) == list(get_dataset("digits").paths)


def test_embed_and_study_share_one_embedding(run2, tmp_path):
    """The study's cached rows and embed's file (both with one torch thread) are the same bits."""
    from embedscope.device import torch_threads
    from embedscope.embed import embed_to_file
    from embedscope.study.run import embed_cached

    ckpt, _ = run2
    es_study, info = embed_cached(ckpt, cache_dir=tmp_path / "cache", device="cpu")
    assert info["cached"] is False
    with torch_threads(1):
        es = store.load(embed_to_file(ckpt, "digits", tmp_path / "e.h5", device="cpu", progress=False))
    assert list(es.paths) == list(es_study.paths)
    assert np.array_equal(es.embeddings, es_study.embeddings)


def test_evaluation_batch_size_is_the_trainers():
    """The trainer's rule, read from its source (256 for the digits, 128 otherwise)."""
    import inspect

    from embedscope.embed import evaluation_batch_size
    from embedscope.train import trainer

    src = inspect.getsource(trainer)
    assert 'eval_bs = 256 if ds.kind == "digits" else 128' in src or "evaluation_batch_size(ds.kind)" in src
    assert evaluation_batch_size("digits") == 256
    assert evaluation_batch_size("photo") == 128 and evaluation_batch_size("shapes") == 128


def test_a_users_batch_size_is_still_checked():
    rc, _, err = run_cli(["embed", "--arch", "digits_cnn", "--dataset", "digits", "-o", "x.h5", "--batch-size", "0"])
    assert rc == 2 and "--batch-size" in err and "Traceback" not in err


def test_split_rows_keeps_first_appearance_order():
    from embedscope.embed import split_rows

    groups = split_rows(np.array(["test", "train", "test", "train", "train"]))
    assert [g.tolist() for g in groups] == [[0, 2], [1, 3, 4]]
    assert split_rows(np.array([], dtype=str)) == []


def test_by_split_on_decoded_inputs_equals_reading_the_images(run2):
    """The study's decoded-inputs path and the images read from the data set: the same bits."""
    from embedscope.data import get_dataset
    from embedscope.embed import checkpoint_input, embed_images
    from embedscope.models import load_checkpoint
    from embedscope.study import run as study_run

    ckpt, _ = run2
    model, cfg, _ = load_checkpoint(ckpt)
    ds = get_dataset("digits")
    tf = checkpoint_input(ds, cfg)[0]
    inputs = study_run._input_tensor("digits", None, None, 8)
    a = embed_images(model, ds, transform=tf, batch_size=256, device="cpu", progress=False, by_split=True,
                     inputs=inputs)
    b = embed_images(model, ds, transform=tf, batch_size=256, device="cpu", progress=False, by_split=True)
    assert np.array_equal(a, b)


# ----------------------------------------------------------------------------- 2. a diverged checkpoint
@pytest.fixture(scope="module")
def diverged(tmp_path_factory):
    """An untrained digits run (--epochs 0) and a copy with one NaN in its first weight."""
    import torch

    from embedscope.models import load_checkpoint, save_checkpoint

    d = tmp_path_factory.mktemp("diverged")
    _train("--dataset", "digits", "--epochs", "0", "--embed-dim", "8", "-o", str(d / "ok.pt"))
    shutil.copy(d / "ok.pt", d / "nan.pt")
    model, cfg, info = load_checkpoint(d / "nan.pt")
    with torch.no_grad():
        next(iter(model.parameters())).view(-1)[0] = float("nan")
    save_checkpoint(d / "nan.pt", model, cfg, extra=info["extra"], force=True)
    return d


def _expected_nan_line(model) -> str:
    """The message written out by hand: every digit embeds to NaN, the first is row 0."""
    from embedscope.data import get_dataset

    ds = get_dataset("digits")
    name, t = next(iter(model.named_parameters()))
    return (f"the model embeds 1797 of 1797 images of digits to NaN or inf (the first: row 0, {ds.paths[0]}); "
            f"the model's weights hold NaN or inf: {name} (1 of {t.numel()} values)")


def test_nonfinite_message_needs_no_embedding(diverged, monkeypatch):
    import embedscope.embed as E
    from embedscope.data import get_dataset
    from embedscope.models import load_checkpoint

    def no_embedding(*a, **k):
        raise AssertionError("embedded")

    monkeypatch.setattr(E, "embed_batches", no_embedding)
    model, _, _ = load_checkpoint(diverged / "nan.pt")
    ds = get_dataset("digits")
    assert E.nonfinite_message(model, ds, np.arange(len(ds))) == _expected_nan_line(model)
    ok, _, _ = load_checkpoint(diverged / "ok.pt")
    assert E.nonfinite_message(ok, ds, [5, 9], 1797) == (
        f"the model embeds 2 of 1797 images of digits to NaN or inf (the first: row 5, {ds.paths[5]}); its "
        "weights are finite: the NaN or inf arise in the computation (an overflow?)")


def test_a_diverged_checkpoint_is_embedded_once_and_its_row_says_embeds_line(diverged, tmp_path, monkeypatch):
    import embedscope.embed as E
    from embedscope.models import load_checkpoint
    from embedscope.study.run import run_study

    calls = {"embed_images": [], "embed_batches": []}  # per call: whether the model's weights hold NaN
    real_images, real_batches = E.embed_images, E.embed_batches

    def spy_images(model, *a, **k):
        calls["embed_images"].append(E.nonfinite_weights(model) is not None)
        return real_images(model, *a, **k)

    def spy_batches(model, *a, **k):
        calls["embed_batches"].append(E.nonfinite_weights(model) is not None)
        return real_batches(model, *a, **k)

    monkeypatch.setattr(E, "embed_images", spy_images)
    monkeypatch.setattr(E, "embed_batches", spy_batches)
    only = tmp_path / "runs"
    only.mkdir()
    shutil.copy(diverged / "nan.pt", only / "nan.pt")
    out = tmp_path / "study"
    run_study(str(only / "nan.pt"), out, epoch="last", cache_dir=tmp_path / "cache", measures=["R@1", "rho"],
              figures=False, n_boot=0, workers=0, echo=lambda s: None)
    rows = [json.loads(f.read_text()) for f in (out / "rows").glob("*.json")]
    bad = [r for r in rows if r["status"] == "error"]
    assert len(bad) == 1, rows
    model, _, _ = load_checkpoint(diverged / "nan.pt")
    assert bad[0]["error"] == _expected_nan_line(model)[:300]
    # the diverged checkpoint is embedded once (before: twice, the second only for the message)
    assert calls["embed_images"].count(True) == 1 and calls["embed_batches"].count(True) == 1, calls


def test_a_checkpoint_of_another_data_set_is_noted_as_a_transfer(tmp_path, monkeypatch):
    """embed of a train checkpoint on another data set than its config's: one note (its R@1 is not the
    log's); on its own data set, or a checkpoint of no loss (an ImageNet baseline), no such note."""
    import torch

    from embedscope.embed import transfer_note
    from embedscope.models import build_model, default_config, save_checkpoint

    folder = tmp_path / "shp"
    rc, _, err = run_cli(["make-shapes", "-o", folder, "--n-images", "24", "--size", "16", "--no-progress"])
    assert rc == 0, err
    torch.manual_seed(0)
    cfg = default_config("shapes_cnn", embed_dim=4, image_size=16, dataset="shapes")
    for name, trained_on in (("cub", "cub200"), ("own", "shapes")):
        ckpt = tmp_path / f"{name}.pt"
        save_checkpoint(ckpt, build_model(cfg), {**cfg, "dataset": trained_on, "loss": "margin"})
        rc, out, err = run_cli(["embed", ckpt, "--dataset", "shapes", "--root", folder, "-o", tmp_path / f"{name}.h5",
                                "--no-progress"])
        assert rc == 0, err
        noted = [line for line in out.splitlines() if "a transfer" in line]
        if trained_on == "cub200":
            assert noted == ["note: the checkpoint was trained on cub200; this file holds the shapes images (a "
                             "transfer: its R@1 is not the one the training log reports)"]
        else:
            assert noted == []
    assert transfer_note({"dataset": "CUB", "loss": "margin"}, "cub200") is None  # an alias of one data set
    assert transfer_note({"dataset": "cub200"}, "cars196") is None  # no loss: not a run of train
