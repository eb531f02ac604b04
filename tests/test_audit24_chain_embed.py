"""Audit 24: settings that travel train -> checkpoint -> embed -> evaluate / geometry / neighbours.

What was wrong before:

* ``embed --dataset shapes`` without a made folder embeds the generated set (its images live in the
  set's cache, its paths are ``shapes/<key>/NNNNNN``, no file behind them) and records no root;
  ``neighbours`` on that file then failed with "the file does not record the images' folder: give
  --root DIR", and no --root could help (there is no folder of files). The pictures now come from the
  set's cache (the folder embed was given with --root, else the default cache), as the digits come
  from their pixels.
* ``train --dataset shapes --root DIR`` -> ``embed CKPT --dataset shapes`` (no --root) embedded the
  default generated set (4,800 other images) without a word: the file's R@1 was not the log's
  (a 240-image folder: log 0.1832, file 0.2533). embed now takes the checkpoint's folder, with a
  note, as saliency and study do (a folder not found: an error asking for --root).
* ``embed --image-size N`` of a checkpoint trained at another size said nothing (now a note).
"""

from __future__ import annotations

import numpy as np
import pytest
from cli_run import run_cli

from embedscope import store
from embedscope.data import shapes
from embedscope.data.thumbnails import generated_shapes_key, load_thumbnails


@pytest.fixture(scope="module")
def small_shapes(tmp_path_factory):
    """A tiny generated shapes set cached in a folder of its own, and an embedding file of its rows
    as ``embed --dataset shapes --root CACHE`` writes it (root = the cache folder)."""
    cache = tmp_path_factory.mktemp("shapes_cache")
    ds = shapes.load_shapes(cache, n=30, size=16, seed=3, progress=False)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(len(ds), 4)).astype(np.float32)
    es = store.EmbeddingSet(embeddings=X, labels=ds.labels, paths=ds.paths, split=ds.split,
                            class_names=ds.class_names, attrs={"dataset": "shapes", "root": str(cache)})
    f = tmp_path_factory.mktemp("shapes_emb") / "emb.h5"
    store.save(f, es)
    return cache, ds, f


def test_generated_shapes_paths_are_recognised():
    key = shapes.generation_key(30, 16, 3)
    assert generated_shapes_key(f"shapes/{key}/000007") == key
    assert generated_shapes_key("shapes/circle/0001.png") is None
    assert generated_shapes_key("digits/0001") is None
    assert generated_shapes_key(f"shapes/{key}/x") is None


def test_thumbnails_of_generated_shapes_are_their_pixels(small_shapes, tmp_path, monkeypatch):
    cache, ds, _ = small_shapes
    monkeypatch.setenv("EMBEDSCOPE_CACHE", str(tmp_path / "default_cache"))
    rows = [0, 7, 29]
    pics = load_thumbnails([ds.paths[i] for i in rows], dataset="shapes", root=str(cache))
    for i, pic in zip(rows, pics):  # 16 px images stay 16 px (a thumbnail never grows)
        np.testing.assert_array_equal(pic, ds.images[i])
    # no root recorded (the default cache) and a cache elsewhere: the same pixels, rendered again
    pics = load_thumbnails([ds.paths[7]], dataset="shapes", root=None)
    np.testing.assert_array_equal(pics[0], ds.images[7])


def test_neighbours_draws_a_generated_shapes_file(small_shapes, tmp_path, monkeypatch):
    """embed --dataset shapes (the default cache, root recorded as ''): neighbours draws it."""
    cache, ds, f = small_shapes
    monkeypatch.setenv("EMBEDSCOPE_CACHE", str(tmp_path / "default_cache"))
    shapes.load_shapes(None, n=30, size=16, seed=3, progress=False)  # into the default cache
    g = tmp_path / "emb_default.h5"
    store.save(g, store.EmbeddingSet(embeddings=store.load(f).embeddings, labels=ds.labels, paths=ds.paths,
                                     split=ds.split, class_names=ds.class_names,
                                     attrs={"dataset": "shapes", "root": ""}))
    # before: "the file does not record the images' folder: give --root DIR" (no folder could be named)
    for emb, extra in ((g, []), (f, []), (f, ["--root", cache])):
        out_png = tmp_path / f"nb{len(extra)}{emb.stem}.png"
        rc, out, err = run_cli(["neighbours", emb, "--split", "all", "--queries", "3", "--n-retrievals", "2",
                                *extra, "-o", out_png, "--no-progress"])
        assert rc == 0, err
        assert out_png.stat().st_size > 0 and out_png.with_suffix(".pdf").stat().st_size > 0
        assert "3 queries, top-2" in out


@pytest.fixture(scope="module")
def shapes_run(tmp_path_factory):
    """A made shapes folder (make-shapes, 48 images of 32 px) and an untrained shapes_cnn checkpoint
    whose config records it as ``train --dataset shapes --root DIR --image-size 32`` does."""
    import torch

    from embedscope.models import build_model, default_config, save_checkpoint

    base = tmp_path_factory.mktemp("shapes_run")
    folder = base / "shp"
    rc, _, err = run_cli(["make-shapes", "-o", folder, "--n-images", "48", "--size", "32", "--no-progress"])
    assert rc == 0, err
    torch.manual_seed(0)
    cfg = default_config("shapes_cnn", embed_dim=8, image_size=32, dataset="shapes")
    ckpt = base / "run.pt"
    save_checkpoint(ckpt, build_model(cfg), {**cfg, "dataset": "shapes", "root": str(folder), "loss": "margin"})
    return base, folder, ckpt


def test_embed_uses_the_checkpoint_root(shapes_run, tmp_path, monkeypatch):
    """train --root DIR -> embed without --root: the folder's images, as the run's log measured them
    (before: the default generated set, other images, silently)."""
    from embedscope.data import get_dataset

    base, folder, ckpt = shapes_run
    monkeypatch.setenv("EMBEDSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(shapes, "DEFAULT_N", 24)  # (before the fix: a quick wrong default set, not 4,800)
    monkeypatch.setattr(shapes, "DEFAULT_SIZE", 16)
    rc, out, err = run_cli(["embed", ckpt, "--dataset", "shapes", "-o", tmp_path / "a.h5", "--no-progress"])
    assert rc == 0, err
    assert f"--root {folder}, the folder the checkpoint was trained on" in out
    a = store.load(tmp_path / "a.h5")
    ds = get_dataset("shapes", str(folder))
    assert a.n == len(ds) == 48
    np.testing.assert_array_equal(a.paths.astype(str), ds.paths.astype(str))
    assert a.attrs["root"] == str(folder.resolve())
    rc, out, err = run_cli(["embed", ckpt, "--dataset", "shapes", "--root", folder, "-o", tmp_path / "b.h5",
                            "--no-progress"])
    assert rc == 0, err
    assert "trained on" not in out  # the same folder: nothing to say
    np.testing.assert_array_equal(a.embeddings, store.load(tmp_path / "b.h5").embeddings)


def test_embed_names_another_root_and_refuses_a_missing_one(shapes_run, tmp_path, monkeypatch):
    from cli_run import one_error_line

    base, folder, ckpt = shapes_run
    other = tmp_path / "other"
    rc, _, err = run_cli(["make-shapes", "-o", other, "--n-images", "24", "--size", "32", "--no-progress"])
    assert rc == 0, err
    rc, out, err = run_cli(["embed", ckpt, "--dataset", "shapes", "--root", other, "-o", tmp_path / "c.h5",
                            "--no-progress"])
    assert rc == 0, err
    assert f"the checkpoint was trained on the images in {folder}; this file holds the images in {other}" in out
    assert store.load(tmp_path / "c.h5").n == 24
    moved = base / "moved.pt"  # a config whose folder is gone: refused, not another image set
    import torch

    obj = torch.load(ckpt, weights_only=False)
    obj["config"]["root"] = str(tmp_path / "gone")
    torch.save(obj, moved)
    rc, _, err = run_cli(["embed", moved, "--dataset", "shapes", "-o", tmp_path / "d.h5", "--no-progress"])
    assert rc == 1
    assert "which is not a folder from here: give --root" in one_error_line(err, "embed")
    assert not (tmp_path / "d.h5").exists()


def test_embed_notes_an_image_size_other_than_the_training_one(shapes_run, tmp_path):
    """train --image-size 32 -> embed --image-size 48 changed the input the model was trained on
    without a word (the file's R@1 was then not its log's)."""
    _, folder, ckpt = shapes_run
    rc, out, err = run_cli(["embed", ckpt, "--dataset", "shapes", "--image-size", "48", "-o", tmp_path / "e.h5",
                            "--no-progress"])
    assert rc == 0, err
    assert "note: the checkpoint was trained on 32x32 inputs" in out and "--image-size 48 embeds 48x48" in out
    assert "CenterCrop(48)" in store.load(tmp_path / "e.h5").attrs["transform"]
    rc, out, err = run_cli(["embed", ckpt, "--dataset", "shapes", "--image-size", "32", "-o", tmp_path / "f.h5",
                            "--no-progress"])
    assert rc == 0, err
    assert "trained on 32x32" not in out  # its own size: nothing to say


def test_train_records_its_folder_absolute_and_resumes_from_the_relative_name(tmp_path, monkeypatch):
    """train --root shp (relative) records the folder absolute, so that embed finds it from another working
    folder; --resume with the same relative --root is the same run (not 'root differs')."""
    from embedscope.models import read_checkpoint

    monkeypatch.chdir(tmp_path)
    rc, _, err = run_cli(["make-shapes", "-o", "shp", "--n-images", "40", "--size", "32", "--no-progress"])
    assert rc == 0, err
    common = ["train", "--dataset", "shapes", "--root", "shp", "--image-size", "32", "--embed-dim", "4",
              "--batch-size", "16", "--eval-every", "0", "--no-progress", "-o", "run.pt"]
    rc, _, err = run_cli([*common, "--epochs", "1"])
    assert rc == 0, err
    cfg = read_checkpoint(tmp_path / "run.pt")["config"]
    assert cfg["root"] == str((tmp_path / "shp").resolve())
    rc, out, err = run_cli([*common, "--epochs", "2", "--resume"])
    assert rc == 0, (out, err)
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    rc, out, err = run_cli(["embed", tmp_path / "run.pt", "--dataset", "shapes", "-o", "e.h5", "--no-progress"])
    assert rc == 0, err
    assert "the folder the checkpoint was trained on" in out
