"""Settings that travel from a checkpoint or an embedding file into saliency, properties and the maps
commands (audit 24, helper F): a setting recorded upstream must not be ignored downstream."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
import torch

from embedscope.cli import main
from embedscope.store.saliency import load_maps


def _run(args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def shapes_ckpt(tmp_path_factory):
    """A shapes_cnn checkpoint whose config records the folder it was trained on (train --root DIR),
    and a second shapes folder of other images (another seed) under the same file names."""
    from embedscope.models import build_model, default_config, save_checkpoint

    d = tmp_path_factory.mktemp("chain")
    for sub, seed in (("own", 1), ("other", 2)):
        rc, _, err = _run(["make-shapes", "-o", d / sub, "--n-images", "30", "--size", "16", "--seed", seed,
                           "--no-progress"])
        assert rc == 0, err
    torch.manual_seed(0)
    cfg = default_config("shapes_cnn", embed_dim=8)
    cfg.update(image_size=16, loss="margin", dataset="shapes", root=str(d / "own"))
    save_checkpoint(d / "s.pt", build_model(cfg), cfg)
    return d


SAL = ["--dataset", "shapes", "--n-images", "3", "--n-samples", "2", "--device", "cpu", "--no-progress"]


def test_saliency_reads_the_folder_the_checkpoint_was_trained_on(shapes_ckpt, monkeypatch, tmp_path):
    """saliency without --root explained the default shapes set (other pictures under the same file
    names as the training folder's), not the images the checkpoint's config names: now the maps are
    those of --root <the config's folder>, bit for bit, with a note; the file records that folder."""
    d = shapes_ckpt
    monkeypatch.setenv("EMBEDSCOPE_CACHE", str(tmp_path / "cache"))  # the default set, were it read
    rc, out, err = _run(["saliency", d / "s.pt", *SAL, "-o", tmp_path / "a.h5"])
    assert rc == 0, err
    assert "note: --root" in out and "the folder the checkpoint was trained on" in out
    rc, out_b, err = _run(["saliency", d / "s.pt", *SAL, "--root", d / "own", "-o", tmp_path / "b.h5"])
    assert rc == 0, err
    assert "trained on the images in" not in out_b  # the checkpoint's own folder: no note
    a, b = load_maps(tmp_path / "a.h5"), load_maps(tmp_path / "b.h5")
    assert list(a.paths) == list(b.paths)
    assert np.array_equal(a.images, b.images) and np.array_equal(a.maps, b.maps)
    assert a.attrs["root"] == str((d / "own").resolve())
    assert not (tmp_path / "cache").exists()  # the default set was not generated


def test_saliency_notes_another_folder_than_the_checkpoints(shapes_ckpt, tmp_path):
    d = shapes_ckpt
    rc, out, err = _run(["saliency", d / "s.pt", *SAL, "--root", d / "other", "-o", tmp_path / "c.h5"])
    assert rc == 0, err
    assert "the checkpoint was trained on the images in" in out and "other" in out
    own = load_maps(tmp_path / "c.h5")
    assert own.attrs["root"] == str((d / "other").resolve())


def test_saliency_refuses_a_training_folder_not_found(shapes_ckpt, tmp_path, monkeypatch):
    """A relative training folder not found from the working folder: one error line, no maps file
    (not the default set's maps without a word)."""
    from embedscope.models import load_checkpoint, save_checkpoint

    model, cfg, _ = load_checkpoint(shapes_ckpt / "s.pt")
    cfg = dict(cfg, root="no-such-shapes")
    save_checkpoint(tmp_path / "r.pt", model, cfg)
    monkeypatch.chdir(tmp_path)
    rc, out, err = _run(["saliency", tmp_path / "r.pt", *SAL, "-o", tmp_path / "d.h5"])
    assert rc == 1
    assert err.startswith("embedscope saliency: error: the checkpoint was trained on the shapes images in "
                          "no-such-shapes") and "give --root" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "d.h5").exists()


def _props_file(path, paths, split, seed):
    from embedscope import store

    rng = np.random.default_rng(seed)
    n = len(paths)
    labels = np.arange(n) % 3
    es = store.EmbeddingSet(embeddings=rng.normal(size=(n, 4)).astype(np.float32), labels=labels, paths=paths,
                            split=split, class_names=["a", "b", "c"], properties={"hue": np.arange(n) % 2})
    store.save(path, es)
    return path


def test_properties_says_when_the_files_test_splits_hold_other_images(tmp_path):
    """Two embeddings of one model with different --train-classes: their test splits hold different
    images, and properties put the two NR-Prec side by side without a word. Now a note names how
    many images each lacks (counted here by set difference)."""
    paths = [f"img/{i:02d}.png" for i in range(24)]
    a = _props_file(tmp_path / "a.h5", paths, ["train"] * 6 + ["test"] * 18, 0)
    b = _props_file(tmp_path / "b.h5", paths, ["train"] * 9 + ["test"] * 15, 1)
    rc, out, err = _run(["properties", a, b, "--no-progress"])
    assert rc == 0, err
    ta, tb = set(paths[6:]), set(paths[9:])
    want = (f"b: its test split holds other images than a's ({len(tb - ta)} of its {len(tb)} not in a, "
            f"{len(ta - tb)} of a's {len(ta)} not in it; e.g. {sorted(ta - tb)[0]})")
    assert want in out
    # c's test rows are paths[:18] (in reverse order), d's too: the same images, no note; a's are paths[6:]
    c = _props_file(tmp_path / "c.h5", paths[::-1], ["train"] * 6 + ["test"] * 18, 2)
    d = _props_file(tmp_path / "d.h5", paths, ["test"] * 18 + ["train"] * 6, 3)
    rc, out, err = _run(["properties", c, d, "--no-progress"])
    assert rc == 0, err
    assert "holds other images" not in out
    rc, out, err = _run(["properties", a, c, "--no-progress"])
    assert rc == 0, err
    assert "c: its test split holds other images than a's (6 of its 18 not in a, 6 of a's 18 not in it" in out


def _maps(path, *, name, transform, seed):
    from embedscope.store.saliency import SaliencyMaps, save_maps

    rng = np.random.default_rng(seed)
    sm = SaliencyMaps(maps=rng.random((5, 4, 4)).astype(np.float32), paths=[f"img/{i}.png" for i in range(5)],
                      labels=np.zeros(5, np.int64), class_names=["a"],
                      attrs={"name": name, "family": "ranking", "order": "paper", "n_samples": 50, "noise": 0.15,
                             "transform": transform})
    save_maps(path, sm)
    return path


def test_agreement_notes_maps_of_differently_transformed_images(tmp_path):
    """Two checkpoints of one input size but different resize: maps of one shape whose pixels are
    other points of the pictures; saliency-agreement compared them pixel by pixel without a word."""
    crop = "Resize(37) + CenterCrop(32) + ImageNet normalise"
    a = _maps(tmp_path / "a.h5", name="a", transform=crop, seed=0)
    b = _maps(tmp_path / "b.h5", name="b", transform="Resize(32) + CenterCrop(32) + ImageNet normalise", seed=1)
    c = _maps(tmp_path / "c.h5", name="c", transform=crop, seed=2)
    rc, out, err = _run(["saliency-agreement", a, b])
    assert rc == 0, err
    assert ("note: the files' maps are of differently transformed images (a: Resize(37) + CenterCrop(32) + "
            "ImageNet normalise; b: Resize(32) + CenterCrop(32) + ImageNet normalise)") in out
    rc, out, err = _run(["saliency-agreement", a, c])
    assert rc == 0, err
    assert "differently transformed" not in out


def test_properties_notes_a_cosine_model_ranked_by_raw_euclidean(tmp_path):
    """A file of a model trained with the cosine distance (arcface, its checkpoint's config) whose rows
    are not unit: properties' default Euclidean ranking on raw rows is not the model's, without a word.
    Now a note gives the rows' norm range (computed here) and --metric cosine; unit rows, --metric
    cosine and a Euclidean-trained model have none."""
    from embedscope import store

    rng = np.random.default_rng(0)
    n = 30
    X = rng.normal(size=(n, 4)) * rng.uniform(0.5, 3.0, size=(n, 1))
    labels = np.arange(n) % 3

    def h5(name, X, loss):
        es = store.EmbeddingSet(embeddings=X.astype(np.float32), labels=labels, paths=[f"i/{k}" for k in range(n)],
                                split=["test"] * n, class_names=["a", "b", "c"], properties={"hue": np.arange(n) % 2},
                                attrs={"checkpoint_config": {"loss": loss, "normalize": False}})
        return store.save(tmp_path / name, es)

    raw = h5("raw.h5", X, "arcface")
    norms = np.linalg.norm(X.astype(np.float32).astype(np.float64), axis=1)
    rc, out, err = _run(["properties", raw, "--no-progress"])
    assert rc == 0, err
    assert (f"the model was trained with the cosine distance (its checkpoint's config), but its embeddings are "
            f"ranked here by the Euclidean distance of raw rows of norms {norms.min():.3g} to {norms.max():.3g}") in out
    rc, out, err = _run(["properties", raw, "--metric", "cosine", "--no-progress"])
    assert rc == 0, err
    assert "trained with the cosine" not in out
    unit = h5("unit.h5", X / np.linalg.norm(X, axis=1, keepdims=True), "arcface")
    margin = h5("margin.h5", X, "margin")
    for f in (unit, margin):
        rc, out, err = _run(["properties", f, "--no-progress"])
        assert rc == 0, err
        assert "trained with the cosine" not in out
