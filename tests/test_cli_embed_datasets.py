"""End to end: `embedscope embed` on tiny photo data sets in the imagefolder and CUB layouts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from embedscope import store
from embedscope.cli import main
from embedscope.models import build_model, default_config, save_checkpoint

IMAGE_SIZE = 32


def write_jpeg(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)).save(path, "JPEG")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    cfg = default_config("resnet18", embed_dim=16, image_size=IMAGE_SIZE)
    model = build_model(cfg)
    path = tmp_path_factory.mktemp("ckpt") / "resnet18.pt"
    save_checkpoint(path, model, cfg)
    return path, model.eval()


def make_cub(root: Path) -> list[tuple[str, int]]:
    """4 classes x 3 images in the official CUB_200_2011 layout; returns (path, label) rows."""
    img, lab, cls, rows = [], [], [], []
    iid = 0
    for c in range(1, 5):
        folder = f"{c:03d}.Bird_{c}"
        cls.append(f"{c} {folder}")
        for k in range(3):
            iid += 1
            rel = f"{folder}/Bird_{c}_{k}.jpg"
            write_jpeg(root / "images" / rel, iid)
            img.append(f"{iid} {rel}")
            lab.append(f"{iid} {c}")
            rows.append((f"images/{rel}", c - 1))
    for name, lines in (("images.txt", img), ("image_class_labels.txt", lab), ("classes.txt", cls)):
        (root / name).write_text("\n".join(lines) + "\n")
    return rows


def reference_embedding(model, image_path: Path) -> np.ndarray:
    """The model on one image with the papers' eval transform written out here (resize, centre crop)."""
    from torchvision import transforms as T

    resize = round(IMAGE_SIZE * 256 / 224)
    tf = T.Compose([T.Resize(resize), T.CenterCrop(IMAGE_SIZE), T.ToTensor(),
                    T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    with Image.open(image_path) as im:
        x = tf(im.convert("RGB"))[None]
    with torch.inference_mode():
        return model(x)[0].numpy()


def test_embed_cub(tmp_path, checkpoint, capsys):
    ckpt, model = checkpoint
    root = tmp_path / "CUB_200_2011"
    rows = make_cub(root)
    out = tmp_path / "cub.h5"
    rc = main(["embed", str(ckpt), "--dataset", "cub200", "--root", str(tmp_path), "-o", str(out),
               "--device", "cpu", "--no-progress", "--batch-size", "5"])
    assert rc == 0 and out.exists()
    es = store.load(out)
    assert es.embeddings.shape == (12, 16) and es.embeddings.dtype == np.float32
    assert list(es.paths) == [f"CUB_200_2011/{p}" for p, _ in rows]  # relative to the given --root (parent)
    np.testing.assert_array_equal(es.labels, [lab for _, lab in rows])
    np.testing.assert_array_equal(es.split, ["train"] * 6 + ["test"] * 6)  # classes 1-2 train, 3-4 test
    assert list(es.class_names) == ["Bird_1", "Bird_2", "Bird_3", "Bird_4"]
    assert es.attrs["dataset"] == "cub200" and es.attrs["root"] == str(tmp_path.resolve())
    assert "Resize(37) + CenterCrop(32)" in es.attrs["transform"]
    np.testing.assert_allclose(np.linalg.norm(es.embeddings, axis=1), 1.0, atol=1e-5)
    for i in (0, 7, 11):  # each row is the embedding of the image its path names
        np.testing.assert_allclose(es.embeddings[i], reference_embedding(model, tmp_path / es.paths[i]),
                                   atol=1e-4)
    # the test split alone
    out_test = tmp_path / "cub_test.h5"
    assert main(["embed", str(ckpt), "--dataset", "cub", "--root", str(root), "--split", "test",
                 "-o", str(out_test), "--device", "cpu", "--no-progress"]) == 0
    es_t = store.load(out_test)
    assert list(es_t.paths) == [p for p, _ in rows[6:]] and set(es_t.split) == {"test"}
    np.testing.assert_allclose(es_t.embeddings, es.embeddings[6:], atol=1e-5)


def test_embed_imagefolder_train_classes(tmp_path, checkpoint):
    ckpt, model = checkpoint
    root = tmp_path / "folder"
    for i, cls in enumerate(["dog", "cat", "eel", "bee"]):
        for k in range(3):
            write_jpeg(root / cls / f"{k}.jpg", 10 * i + k)
    out = tmp_path / "folder.h5"
    rc = main(["embed", str(ckpt), "--dataset", "imagefolder", "--root", str(root), "--train-classes", "1",
               "-o", str(out), "--device", "cpu", "--no-progress"])
    assert rc == 0
    es = store.load(out)
    assert list(es.class_names) == ["bee", "cat", "dog", "eel"]
    np.testing.assert_array_equal(es.labels, np.repeat(np.arange(4), 3))
    assert list(es.paths[:3]) == ["bee/0.jpg", "bee/1.jpg", "bee/2.jpg"]
    np.testing.assert_array_equal(es.split, ["train"] * 3 + ["test"] * 9)
    np.testing.assert_allclose(es.embeddings[4], reference_embedding(model, root / "cat/1.jpg"), atol=1e-4)


def test_embed_broken_layout_is_one_line_error(tmp_path, checkpoint, capsys):
    ckpt, _ = checkpoint
    root = tmp_path / "CUB_200_2011"
    make_cub(root)
    (root / "images" / "002.Bird_2" / "Bird_2_1.jpg").unlink()
    out = tmp_path / "x.h5"
    rc = main(["embed", str(ckpt), "--dataset", "cub200", "--root", str(root), "-o", str(out), "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and not out.exists()
    assert len(err.splitlines()) == 1 and "Bird_2_1.jpg is missing" in err
    rc = main(["embed", str(ckpt), "--dataset", "cars196", "-o", str(out), "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and "needs --root" in err and len(err.splitlines()) == 1


def _folder_with(root: Path, bad_name: str, bad_bytes: bytes | None = None, bad_image=None) -> Path:
    for i, cls in enumerate(["a", "b"]):
        for k in range(3):
            write_jpeg(root / cls / f"{k}.jpg", 10 * i + k)
    bad = root / "b" / bad_name
    if bad_bytes is not None:
        bad.write_bytes(bad_bytes)
    else:
        bad_image.save(bad)
    return bad


@pytest.mark.parametrize("workers", ["0", "1"])
def test_corrupt_image_is_one_line_naming_it_with_and_without_workers(tmp_path, checkpoint, capsys, workers):
    """Issue 17: with --num-workers 1 the worker's traceback reached the user."""
    ckpt, _ = checkpoint
    root = tmp_path / "folder"
    bad = _folder_with(root, "9.jpg", bad_bytes=b"\xff\xd8\xff\xe0 not really a jpeg")
    out = tmp_path / "x.h5"
    rc = main(["embed", str(ckpt), "--dataset", "imagefolder", "--root", str(root), "-o", str(out), "--device",
               "cpu", "--no-progress", "--num-workers", workers])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and not out.exists()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("embedscope embed: error: cannot read image") and str(bad) in err
    assert "Traceback" not in err and "DataLoader worker" not in err


def test_decompression_bomb_names_the_file(tmp_path, checkpoint, capsys, monkeypatch):
    from PIL import Image as PILImage

    ckpt, _ = checkpoint
    root = tmp_path / "folder"
    bad = _folder_with(root, "huge.png", bad_image=PILImage.new("RGB", (64, 64)))
    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 2000)  # 64 x 64 > 2 x 2000: a "bomb"; 32 x 32 is not
    out = tmp_path / "x.h5"
    rc = main(["embed", str(ckpt), "--dataset", "imagefolder", "--root", str(root), "-o", str(out), "--device",
               "cpu", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and not out.exists() and len(err.splitlines()) == 1
    assert str(bad) in err and "decompression bomb" in err


def test_negative_workers_and_file_as_root_are_refused(tmp_path, checkpoint, capsys):
    ckpt, _ = checkpoint
    f = tmp_path / "notafolder"
    f.write_text("x")
    out = tmp_path / "x.h5"
    with pytest.raises(SystemExit) as e:
        main(["embed", str(ckpt), "--dataset", "imagefolder", "--root", str(f), "-o", str(out), "--num-workers",
              "-1"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and ">= 0" in err and "embed --help" in err
    rc = main(["embed", str(ckpt), "--dataset", "imagefolder", "--root", str(f), "-o", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and "is a file" in err and "does not exist" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notafolder"]
