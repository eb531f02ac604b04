"""Thirty-ninth session's small fixes, each failing on the code before it."""

import numpy as np
import pytest
from cli_run import run_cli

from embedscope.analyses import geometry
from embedscope.store import EmbeddingSet, save


def _set(dim, seed=0):
    rng = np.random.default_rng(seed)
    return EmbeddingSet.from_arrays(rng.standard_normal((40, dim)), np.repeat(np.arange(4), 10), split="train")


def test_rho_of_one_kept_singular_value_says_it_is_zero_by_construction(tmp_path):
    r = geometry(_set(2))
    assert r["rho"] == 0 and r["rho_all"] > 0
    (note,) = r.provenance["notes"]
    assert "rho is 0 by construction" in note and "top 1 of 2" in note
    assert "rho is 0 by construction" in str(r)
    assert not geometry(_set(3)).provenance.get("notes")
    assert not geometry(_set(2), exclude_top=0).provenance.get("notes")
    assert "by construction" in geometry(_set(6), n_components=2).provenance["notes"][0]
    save(tmp_path / "e.h5", _set(2))
    rc, out, err = run_cli(["geometry", str(tmp_path / "e.h5")])
    assert rc == 0 and "note: rho is 0 by construction" in out, err
    rc, out, err = run_cli(["spectrum", str(tmp_path / "e.h5")])
    assert rc == 0 and out.count("rho is 0 by construction") == 1, err


def test_training_at_embed_dim_2_says_rho_is_zero_by_construction(tmp_path):
    rc, out, err = run_cli(["train", "--dataset", "digits", "--embed-dim", "2", "--epochs", "0", "--no-progress",
                            "-o", str(tmp_path / "m.pt")])
    assert rc == 0, err
    assert out.count("note: rho is 0 by construction at --embed-dim 2") == 1
    rc, out, err = run_cli(["train", "--dataset", "digits", "--embed-dim", "3", "--epochs", "0", "--no-progress",
                            "-o", str(tmp_path / "m3.pt")])
    assert rc == 0 and "by construction" not in out, err


def test_a_train_refused_the_run_lock_keeps_the_other_runs_new_folder(tmp_path, monkeypatch):
    """Run A makes <-o>.train/, run B (which found it there) takes its lock first: A's refusal removed the
    still-empty folder under B, whose first checkpoint write then failed."""
    import pytest

    import embedscope.fileio as F
    from embedscope.errors import EmbedscopeError
    from embedscope.train.trainer import run_paths, train

    out = tmp_path / "r.pt"
    run_dir = run_paths(out, None)["dir"]
    held = []
    made = F.make_folders

    def make_then_other_locks(folder, user_path):
        created = made(folder, user_path)
        lock = F.folder_lock(folder, "the other run")
        lock.__enter__()  # run B, between A's mkdir and A's lock
        held.append(lock)
        return created

    monkeypatch.setattr(F, "make_folders", make_then_other_locks)
    try:
        with pytest.raises(EmbedscopeError, match="another process is writing it now"):
            train({"dataset": "digits", "embed_dim": 4, "epochs": 1, "eval_every": 0}, out, progress=False,
                  echo=lambda s: None)
        assert run_dir.is_dir()  # B's folder, B still holding it
    finally:
        for lock in held:
            lock.__exit__(None, None, None)


def test_a_file_whose_writer_was_killed_names_h5clear(tmp_path):
    """A writer with the newest superblock stopped without closing the file leaves HDF5's consistency flags
    set: no process holds the file, and HDF5's hint (h5clear) is the way to read it; it was called 'open for
    writing by another process ... read a copy' (a copy carries the flags too)."""
    import subprocess
    import sys

    import pytest

    from embedscope.errors import EmbedscopeError
    from embedscope.store import load

    path = tmp_path / "crash.h5"
    killed = ("import h5py, os, numpy as np\n"
              f"f = h5py.File({str(path)!r}, 'w', libver='latest'); f['embeddings'] = np.zeros((3, 2)); f.flush()\n"
              "os._exit(0)")
    subprocess.run([sys.executable, "-c", killed], check=True)
    with pytest.raises(EmbedscopeError) as e:
        load(path)
    msg = str(e.value)
    assert "marked open for writing" in msg and "stopped without closing it" in msg
    assert f"h5clear -s {path}" in msg and "damaged" not in msg


@pytest.mark.parametrize("code, expect", [
    (11, "open for writing by another process"),
    (38, "set HDF5_USE_FILE_LOCKING=FALSE"),
    (37, "set HDF5_USE_FILE_LOCKING=FALSE"),
])
def test_hdf5_lock_failures_by_errno(tmp_path, code, expect):
    """HDF5's 'unable to lock file' is another process's lock only for EAGAIN; ENOSYS / ENOLCK come from a
    file system without locks, where no other process is the cause."""
    from embedscope.store.embeddings import _open_failure

    first = (f"Unable to synchronously open file (unable to lock file, errno = {code}, error message = "
             "'whatever')")
    line = _open_failure(tmp_path / "x.h5", first)
    assert expect in line and "damaged" not in line
    if code != 11:
        assert f"errno = {code}" in line and "another process" not in line


def test_each_kind_of_evaluation_note_is_said_once_per_run(tmp_path, monkeypatch):
    """--embed-dim 1's 'rho is undefined' note took the run's one note slot at the first evaluation, and a
    later 'every test image has the same embedding' (a collapse) was never said."""
    import embedscope.train.trainer as T

    calls = []

    def fake_evaluate(model, train_ds, test_ds, device, batch_size, transform=None, progress=False, notes=None):
        if notes is None:  # the untrained model's evaluation (epoch 0)
            return {"R@1": 0.5, "MAP@R": 0.25, "rho": float("nan")}
        calls.append(1)
        if len(calls) >= 2:  # epoch 2 on
            notes.append("every test image has the same embedding (the network collapsed to one point): ...")
        notes.append("rho is undefined: no singular value left")
        return {"R@1": 0.5, "MAP@R": 0.25, "rho": float("nan")}

    monkeypatch.setattr(T, "_evaluate", fake_evaluate)
    monkeypatch.setattr(T, "_train_epoch", lambda *a, **k: (0.5, 0.0))
    lines = []
    T.train({"dataset": "digits", "embed_dim": 4, "epochs": 3, "eval_every": 1}, tmp_path / "m.pt",
            progress=False, echo=lines.append)
    notes = [ln for ln in lines if ln.startswith("note: epoch")]
    assert len(notes) == 2, lines
    assert notes[0].startswith("note: epoch 1: rho is undefined")
    assert notes[1].startswith("note: epoch 2: every test image has the same embedding")


@pytest.mark.parametrize("layout", ["bare", "model_state_dict"])
def test_another_tools_weights_are_not_an_untrained_network(tmp_path, layout):
    """A bare state dict (or a training script's {'model_state_dict': ...}) loaded with --arch had a config
    naming no loss and no source: saliency called it 'untrained' (Euclidean, 'untrained network') and grouped
    it with the random networks, though such a file usually holds a trained model."""
    import torch

    from embedscope.models import build_model, default_config, load_checkpoint
    from embedscope.models.distances import distance_and_source, is_untrained

    sd = build_model(default_config("digits_cnn", embed_dim=8)).state_dict()
    path = tmp_path / "w.pt"
    torch.save(sd if layout == "bare" else {"model_state_dict": sd, "epoch": 7}, path)
    _, config, info = load_checkpoint(path, arch="digits_cnn")
    assert not is_untrained(config, info["extra"])
    assert distance_and_source(config, info["extra"])[1] == "default: the checkpoint names no loss"
    assert config["source_format"] == info["format"]


def test_a_timm_vision_transformer_of_another_input_size_is_a_usage_error():
    """timm's ViT keeps its size in patch_embed.img_size (a tuple) and asserts it in the forward pass: an
    AssertionError after the data were read, where torchvision's ViT was already refused up front."""
    import torch

    from embedscope.embed import check_fixed_input
    from embedscope.errors import UsageError

    class PatchEmbed(torch.nn.Module):  # timm's attributes (timm.layers.PatchEmbed)
        def __init__(self, strict=True, dynamic=False):
            super().__init__()
            self.img_size, self.strict_img_size, self.dynamic_img_size = (224, 224), strict, dynamic

    model = torch.nn.Sequential(PatchEmbed())
    with pytest.raises(UsageError, match="takes 224x224 inputs only"):
        check_fixed_input(model, 32)
    check_fixed_input(model, 224)
    check_fixed_input(torch.nn.Sequential(PatchEmbed(strict=False)), 32)  # not strict: any size
    check_fixed_input(torch.nn.Sequential(PatchEmbed(dynamic=True)), 32)  # dynamic size


def test_short_texts_are_always_told_apart():
    """Two texts cut to the same stem were both numbered #1 and #2 (numbered per text, labelled by the cut):
    legend entries alike. Any list of names now gives distinct labels (fuzzed, the alphabet small so that
    cuts meet)."""
    from embedscope.viz.style import short_texts

    rng = np.random.default_rng(7)
    for _ in range(3000):
        k = int(rng.integers(2, 9))
        n = int(rng.integers(8, 30))
        stem = "".join(rng.choice(list("ab_"), int(rng.integers(0, 30))))
        names = [stem + "".join(rng.choice(list("ab_"), int(rng.integers(1, 12)))) for _ in range(k)]
        names += [t for t in names if rng.random() < 0.5]  # names given twice
        out = short_texts(names, n)
        assert len(set(out)) == len(out), (names, n, out)


def test_saliency_maps_record_device_and_precision(tmp_path):
    """embed and train record where and how the network ran (TF32 on CUDA by default); saliency maps did not,
    though `info` lists both for a maps file."""
    from conftest import save_digits_checkpoint

    from embedscope.store.saliency import load_maps

    ck = save_digits_checkpoint(tmp_path / "c.pt", seed=1)
    rc, out, err = run_cli(["saliency", str(ck), "--dataset", "digits", "--n-images", "2", "--n-samples", "2",
                            "-o", str(tmp_path / "m.h5"), "--no-progress"])
    assert rc == 0, err
    a = load_maps(tmp_path / "m.h5").attrs
    assert (a["device"], a["precision"]) == ("cpu", "float32")
    rc, out, err = run_cli(["info", str(tmp_path / "m.h5")])
    assert rc == 0 and "precision" in out and "float32" in out, err


def test_a_numbered_key_of_a_non_ascii_digit_is_one_line(tmp_path):
    """'²'.isdigit() is True and int('²') fails: a state dict keyed '².weight' was a ValueError traceback."""
    import torch

    torch.save({"\u00b2.weight": torch.zeros(2, 2), "0.bias": torch.zeros(2)}, tmp_path / "w.pt")
    rc, out, err = run_cli(["embed", str(tmp_path / "w.pt"), "--dataset", "digits", "-o", str(tmp_path / "e.h5")])
    assert rc == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
