"""The data-set loaders on tiny folders built in each official layout (real JPEGs, .txt and .mat files)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from embedscope.data import get_dataset
from embedscope.data.cars import load_cars196
from embedscope.data.cub import load_cub200
from embedscope.data.imagefolder import DatasetSizeWarning, load_imagefolder
from embedscope.data.sop import load_sop
from embedscope.errors import EmbedscopeError


def write_jpeg(path: Path, seed: int, size=(8, 6)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path, "JPEG")


# ---------------------------------------------------------------------------------------------- CUB


def make_cub(base: Path, n_classes: int, per_class, *, parent: bool = False) -> Path:
    """The official CUB_200_2011 files; returns the folder to pass as root. ``per_class(c)`` -> count."""
    root = base / "CUB_200_2011" if parent else base
    img_lines, lab_lines, cls_lines, split_lines = [], [], [], []
    iid = 0
    for c in range(1, n_classes + 1):
        folder = f"{c:03d}.Bird_{c}"
        cls_lines.append(f"{c} {folder}")
        for k in range(per_class(c)):
            iid += 1
            rel = f"{folder}/Bird_{c}_{k:04d}_{iid}.jpg"
            write_jpeg(root / "images" / rel, iid)
            img_lines.append(f"{iid} {rel}")
            lab_lines.append(f"{iid} {c}")
            split_lines.append(f"{iid} {iid % 2}")
    (root / "images.txt").write_text("\n".join(img_lines) + "\n")
    (root / "image_class_labels.txt").write_text("\n".join(lab_lines) + "\n")
    (root / "classes.txt").write_text("\n".join(cls_lines) + "\n")
    (root / "train_test_split.txt").write_text("\n".join(split_lines) + "\n")  # present, unused
    return base


def test_cub_official_200_classes(tmp_path):
    root = make_cub(tmp_path, 200, lambda c: 1 + (c % 2))
    with pytest.warns(DatasetSizeWarning, match=r"images 300 \(official 11,788\)"):  # a tiny copy of the 200 classes
        ds = load_cub200(root)
    assert len(ds) == 300 and ds.name == "cub200" and ds.root == str(root)
    # expected label straight from the class folder number in each path: 001 -> 0
    expect = np.array([int(p.split("/")[1].split(".")[0]) - 1 for p in ds.paths])
    np.testing.assert_array_equal(ds.labels, expect)
    assert all(p.startswith("images/") for p in ds.paths)
    assert len(ds.class_names) == 200 and ds.class_names[0] == "Bird_1" and ds.class_names[199] == "Bird_200"
    # classes 1-100 train, 101-200 test
    np.testing.assert_array_equal(ds.split == "train", expect < 100)
    assert set(np.unique(ds.labels[ds.split == "train"])) == set(range(100))
    assert set(np.unique(ds.labels[ds.split == "test"])) == set(range(100, 200))
    assert (ds.split == "train").sum() == sum(1 + (c % 2) for c in range(1, 101))


def test_cub_parent_root_and_train_classes(tmp_path):
    make_cub(tmp_path, 4, lambda c: 3, parent=True)
    ds = load_cub200(tmp_path, train_classes=3)
    assert len(ds) == 12
    assert all(p.startswith("CUB_200_2011/images/") for p in ds.paths)
    assert all((tmp_path / p).is_file() for p in ds.paths)  # relative to the given root
    np.testing.assert_array_equal(ds.split, np.where(ds.labels < 3, "train", "test"))
    assert ds.load_image(5).mode == "RGB" and ds.load_image(5).size == (8, 6)
    # default: first half of the classes
    ds2 = load_cub200(tmp_path / "CUB_200_2011")
    assert (ds2.split == "train").sum() == 6 and set(ds2.labels[ds2.split == "test"]) == {2, 3}


@pytest.mark.parametrize("name", ["images.txt", "image_class_labels.txt", "classes.txt", "images"])
def test_cub_missing_file(tmp_path, name):
    make_cub(tmp_path, 2, lambda c: 1)
    p = tmp_path / name
    if p.is_dir():
        import shutil

        shutil.rmtree(p)
    else:
        p.unlink()
    with pytest.raises(EmbedscopeError, match=rf"{name}\b.*missing"):
        load_cub200(tmp_path)


def test_cub_broken_layouts(tmp_path):
    make_cub(tmp_path, 3, lambda c: 2)
    # a missing image is named
    victim = sorted((tmp_path / "images").rglob("*.jpg"))[3]
    victim.unlink()
    with pytest.raises(EmbedscopeError, match=rf"{victim.name} is missing \(1 of 6"):
        load_cub200(tmp_path)
    write_jpeg(victim, 0)
    load_cub200(tmp_path)
    # malformed line: named with file and line number
    good = (tmp_path / "images.txt").read_text()
    (tmp_path / "images.txt").write_text(good.replace("3 ", "x3 ", 1))
    with pytest.raises(EmbedscopeError, match=r"images\.txt:3: malformed line"):
        load_cub200(tmp_path)
    (tmp_path / "images.txt").write_text(good)
    labs = (tmp_path / "image_class_labels.txt").read_text().splitlines()
    (tmp_path / "image_class_labels.txt").write_text("\n".join(labs[:-1] + ["6 two"]))
    with pytest.raises(EmbedscopeError, match=r"image_class_labels\.txt:6: malformed line"):
        load_cub200(tmp_path)
    (tmp_path / "image_class_labels.txt").write_text("\n".join(labs[:-1]))
    with pytest.raises(EmbedscopeError, match=r"image id 6 has no line in .*image_class_labels\.txt"):
        load_cub200(tmp_path)
    (tmp_path / "image_class_labels.txt").write_text("\n".join(labs[:-1] + ["6 9"]))
    with pytest.raises(EmbedscopeError, match=r"class 9, which .*classes\.txt does not list"):
        load_cub200(tmp_path)
    (tmp_path / "image_class_labels.txt").write_text("\n".join(labs + ["1 1"]))
    with pytest.raises(EmbedscopeError, match=r"id 1 appears twice"):
        load_cub200(tmp_path)


def test_cub_root_errors(tmp_path):
    with pytest.raises(EmbedscopeError, match="needs --root"):
        load_cub200(None)
    with pytest.raises(EmbedscopeError, match="does not exist"):
        load_cub200(tmp_path / "nowhere")
    with pytest.raises(EmbedscopeError, match=r"images\.txt is missing"):
        load_cub200(tmp_path)


# --------------------------------------------------------------------------------------------- CARS


def make_cars(root: Path, n_classes: int, classes_of_images: list[int]) -> list[str]:
    """cars_annos.mat in the official struct layout + car_ims/; returns the expected class names."""
    from scipy.io import savemat

    fields = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]
    n = len(classes_of_images)
    annos = np.zeros((1, n), dtype=[(f, "O") for f in fields])
    for i, c in enumerate(classes_of_images):
        rel = f"car_ims/{i + 1:06d}.jpg"
        write_jpeg(root / rel, i, size=(10, 7))
        annos[0, i] = (
            np.array([rel]), np.array([[1]], np.uint8), np.array([[2]], np.uint8), np.array([[9]], np.uint8),
            np.array([[6]], np.uint8), np.array([[c]], np.uint8), np.array([[i % 2]], np.uint8),
        )
    names = [f"Maker Model {c} 20{c % 13:02d}" for c in range(1, n_classes + 1)]
    class_names = np.empty((1, n_classes), dtype=object)
    class_names[0, :] = [np.array([s]) for s in names]
    savemat(root / "cars_annos.mat", {"annotations": annos, "class_names": class_names})
    return names


def test_cars_official_196_classes(tmp_path):
    rng = np.random.default_rng(0)
    classes = list(range(1, 197)) + list(rng.integers(1, 197, 30))
    names = make_cars(tmp_path, 196, classes)
    with pytest.warns(DatasetSizeWarning, match=r"images 226 \(official 16,185\)"):
        ds = load_cars196(tmp_path)
    assert len(ds) == 226 and ds.name == "cars196"
    np.testing.assert_array_equal(ds.labels, np.array(classes) - 1)
    assert ds.paths[0] == "car_ims/000001.jpg" and ds.paths[-1] == "car_ims/000226.jpg"
    assert list(ds.class_names) == names
    # classes 1-98 train, 99-196 test; the official per-image test flag (i % 2) plays no part
    np.testing.assert_array_equal(ds.split, np.where(np.array(classes) <= 98, "train", "test"))
    assert set(ds.labels[ds.split == "test"]) == set(range(98, 196))
    im = ds.load_image(3)
    assert im.mode == "RGB" and im.size == (10, 7)


def test_cars_train_classes_and_single_image(tmp_path):
    make_cars(tmp_path, 3, [2])  # one annotation: loadmat squeezes it to a 0-d struct
    ds = load_cars196(tmp_path, train_classes=2)
    assert list(ds.paths) == ["car_ims/000001.jpg"] and list(ds.labels) == [1] and list(ds.split) == ["train"]
    with pytest.raises(EmbedscopeError, match="--train-classes 3 must be between 1 and 2"):
        load_cars196(tmp_path, train_classes=3)


def test_cars_broken_layouts(tmp_path):
    make_cars(tmp_path, 4, [1, 2, 3, 4])
    (tmp_path / "car_ims" / "000003.jpg").unlink()
    with pytest.raises(EmbedscopeError, match=r"car_ims/000003\.jpg is missing \(1 of 4"):
        load_cars196(tmp_path)
    import shutil

    shutil.rmtree(tmp_path / "car_ims")
    with pytest.raises(EmbedscopeError, match=r"car_ims is missing"):
        load_cars196(tmp_path)
    (tmp_path / "cars_annos.mat").unlink()
    with pytest.raises(EmbedscopeError, match=r"cars_annos\.mat is missing"):
        load_cars196(tmp_path)


def test_cars_broken_mat(tmp_path):
    from scipy.io import savemat

    make_cars(tmp_path, 2, [1, 2])
    mat = tmp_path / "cars_annos.mat"
    mat.write_bytes(b"this is not a MATLAB file at all" * 10)
    with pytest.raises(EmbedscopeError, match=r"cars_annos\.mat is not a readable MATLAB file"):
        load_cars196(tmp_path)
    savemat(mat, {"class_names": np.array(["a", "b"], dtype=object)})
    with pytest.raises(EmbedscopeError, match=r"has no variable 'annotations'"):
        load_cars196(tmp_path)
    annos = np.zeros((1, 2), dtype=[("relative_im_path", "O"), ("test", "O")])
    annos[0, 0] = (np.array(["car_ims/000001.jpg"]), np.array([[0]]))
    annos[0, 1] = (np.array(["car_ims/000002.jpg"]), np.array([[1]]))
    savemat(mat, {"annotations": annos, "class_names": np.array(["a", "b"], dtype=object)})
    with pytest.raises(EmbedscopeError, match=r"lacks the field 'class'"):
        load_cars196(tmp_path)
    make_cars(tmp_path, 2, [1, 3])
    with pytest.raises(EmbedscopeError, match=r"annotation 2 \(car_ims/000002\.jpg\) has class 3, outside 1\.\.2"):
        load_cars196(tmp_path)


# ---------------------------------------------------------------------------------------------- SOP


SOP_HEADER = "image_id class_id super_class_id path"


def make_sop(base: Path, *, parent: bool = False) -> tuple[Path, list[tuple[int, int, str]]]:
    """Ebay_train.txt (classes 1-3) / Ebay_test.txt (classes 4-6) + category folders."""
    root = base / "Stanford_Online_Products" if parent else base
    cats = {1: "bicycle_final", 2: "chair_final"}
    train = [(1, 1), (1, 1), (2, 1), (3, 2), (3, 2), (3, 2)]
    test = [(4, 2), (5, 1), (5, 1), (6, 2)]
    rows = []
    for fname, items in (("Ebay_train.txt", train), ("Ebay_test.txt", test)):
        lines = [SOP_HEADER]
        for k, (cid, sup) in enumerate(items):
            iid = len(rows) + 1
            rel = f"{cats[sup]}/{100000 + cid}_{k}.JPG"
            write_jpeg(root / rel, iid)
            lines.append(f"{k + 1} {cid} {sup} {rel}")
            rows.append((cid, sup, rel))
        (root / fname).write_text("\n".join(lines) + "\n")
    return root, rows


def test_sop_own_split(tmp_path):
    root, rows = make_sop(tmp_path)
    ds = load_sop(root)
    assert len(ds) == 10 and ds.name == "sop"
    assert list(ds.paths) == [r[2] for r in rows]
    np.testing.assert_array_equal(ds.labels, [r[0] - 1 for r in rows])
    np.testing.assert_array_equal(ds.split, ["train"] * 6 + ["test"] * 4)
    np.testing.assert_array_equal(ds.properties["super_class"], [r[1] for r in rows])
    assert list(ds.class_names) == ["bicycle_1", "bicycle_2", "chair_3", "chair_4", "bicycle_5", "chair_6"]
    assert len(np.unique(ds.labels[ds.split == "train"])) == 3
    assert len(np.unique(ds.labels[ds.split == "test"])) == 3
    assert ds.load_image(9).mode == "RGB"
    sub = ds.subset("test")
    np.testing.assert_array_equal(sub.properties["super_class"], [2, 1, 1, 2])


def test_sop_parent_root_and_train_classes(tmp_path):
    _, rows = make_sop(tmp_path, parent=True)
    ds = load_sop(tmp_path, train_classes=2)
    assert all(p.startswith("Stanford_Online_Products/") for p in ds.paths)
    assert all((tmp_path / p).is_file() for p in ds.paths)
    np.testing.assert_array_equal(ds.split, np.where(np.array([r[0] for r in rows]) <= 2, "train", "test"))


def test_sop_broken_layouts(tmp_path):
    root, rows = make_sop(tmp_path)
    (root / rows[7][2]).unlink()
    with pytest.raises(EmbedscopeError, match=rf"{rows[7][2]} is missing \(1 of 10"):
        load_sop(root)
    write_jpeg(root / rows[7][2], 0)
    good = (root / "Ebay_test.txt").read_text()
    (root / "Ebay_test.txt").write_text(good.replace(SOP_HEADER, "id class path"))
    with pytest.raises(EmbedscopeError, match=r"Ebay_test\.txt:1: expected the header"):
        load_sop(root)
    (root / "Ebay_test.txt").write_text(good.replace("5 1 ", "5 one ", 1))
    with pytest.raises(EmbedscopeError, match=r"Ebay_test\.txt:3: malformed line"):
        load_sop(root)
    (root / "Ebay_test.txt").write_text(good.replace("\n1 4 2 ", "\n1 3 2 ", 1))
    with pytest.raises(EmbedscopeError, match=r"class 3 appears in both Ebay_train\.txt and Ebay_test\.txt"):
        load_sop(root)
    (root / "Ebay_test.txt").unlink()
    with pytest.raises(EmbedscopeError, match=r"Ebay_test\.txt is missing"):
        load_sop(root)


# -------------------------------------------------------------------------------------- imagefolder


def make_imagefolder(root: Path) -> None:
    for cls, n in (("zebra", 2), ("ant", 3), ("Mole", 1), ("cat", 2)):
        for k in range(n):
            write_jpeg(root / cls / f"{k}.jpg", k)
    write_jpeg(root / "ant" / "nested" / "deep.jpg", 9)  # searched recursively
    Image.new("RGB", (5, 5)).save(root / "cat" / "UPPER.PNG")
    (root / "cat" / "notes.txt").write_text("not an image")
    (root / ".hidden").mkdir()
    write_jpeg(root / ".hidden" / "x.jpg", 1)
    (root / "README.txt").write_text("a file at the top level is no class")


def test_imagefolder(tmp_path):
    make_imagefolder(tmp_path)
    ds = load_imagefolder(tmp_path)
    assert list(ds.class_names) == ["Mole", "ant", "cat", "zebra"]  # sorted names
    assert list(ds.paths) == ["Mole/0.jpg", "ant/0.jpg", "ant/1.jpg", "ant/2.jpg", "ant/nested/deep.jpg",
                              "cat/0.jpg", "cat/1.jpg", "cat/UPPER.PNG", "zebra/0.jpg", "zebra/1.jpg"]
    np.testing.assert_array_equal(ds.labels, [0, 1, 1, 1, 1, 2, 2, 2, 3, 3])
    np.testing.assert_array_equal(ds.split, ["train"] * 5 + ["test"] * 5)  # first half: 2 of 4 classes
    assert ds.load_image(7).mode == "RGB" and ds.load_image(7).size == (5, 5)
    ds3 = load_imagefolder(tmp_path, train_classes=3)
    np.testing.assert_array_equal(ds3.split == "train", ds3.labels < 3)


def test_imagefolder_odd_classes_round_up(tmp_path):
    for i, cls in enumerate("abc"):
        write_jpeg(tmp_path / cls / "x.jpg", i)
    ds = load_imagefolder(tmp_path)
    assert list(ds.split) == ["train", "train", "test"]


def test_imagefolder_errors(tmp_path):
    with pytest.raises(EmbedscopeError, match="holds no class sub-folders"):
        load_imagefolder(tmp_path)
    write_jpeg(tmp_path / "a" / "x.jpg", 0)
    with pytest.raises(EmbedscopeError, match="needs at least 2"):
        load_imagefolder(tmp_path)
    write_jpeg(tmp_path / "b" / "x.jpg", 1)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x.txt").write_text("no image")
    with pytest.raises(EmbedscopeError, match=r"class folder .*[/\\]c holds no image files"):
        load_imagefolder(tmp_path)
    (tmp_path / "c" / "x.txt").unlink()
    (tmp_path / "c").rmdir()
    for bad in (2, 5, 0):
        with pytest.raises(EmbedscopeError, match=rf"--train-classes {bad} must be between 1 and 1"):
            load_imagefolder(tmp_path, train_classes=bad)
    with pytest.raises(EmbedscopeError, match="needs --root"):
        load_imagefolder(None)


# ------------------------------------------------------------------------------ registry and digits


def test_get_dataset_names_and_aliases(tmp_path):
    make_cub(tmp_path / "cub", 2, lambda c: 1)
    make_cars(tmp_path / "cars", 2, [1, 2])
    make_sop(tmp_path / "sop")
    make_imagefolder(tmp_path / "folder")
    for name, root, n in [("cub200", "cub", 2), ("cub", "cub", 2), ("CUB200-2011", "cub", 2),
                          ("cars196", "cars", 2), ("cars", "cars", 2), ("sop", "sop", 10),
                          ("online_products", "sop", 10), ("imagefolder", "folder", 10)]:
        ds = get_dataset(name, tmp_path / root)
        assert len(ds) == n, name
        im = ds.load_image(0)
        assert isinstance(im, Image.Image) and im.mode == "RGB"
    ds = get_dataset("imagefolder", tmp_path / "folder", train_classes=1)
    assert (ds.split == "train").sum() == 1
    with pytest.raises(EmbedscopeError, match="unknown data set 'mnist'"):
        get_dataset("mnist")


def test_digits():
    ds = get_dataset("digits")
    assert len(ds) == 1797 and ds.kind == "digits" and list(ds.class_names) == [str(c) for c in range(10)]
    assert set(ds.labels[ds.split == "train"]) == set(range(5))
    assert set(ds.labels[ds.split == "test"]) == set(range(5, 10))
    assert (ds.split == "train").sum() == 901 and (ds.split == "test").sum() == 896
    from sklearn.datasets import load_digits

    d = load_digits()
    np.testing.assert_array_equal(ds.labels, d.target)
    im = ds.load_image(10)
    assert im.size == (8, 8)
    np.testing.assert_array_equal(np.asarray(im), d.images[10].astype(np.float32))


@pytest.mark.parametrize("kind", ["digits", "imagefolder"])
@pytest.mark.parametrize("train", [True, False])
def test_every_transform_pickles_for_spawned_loader_workers(kind, train):
    """A data loader whose workers start by 'spawn' (macOS, Windows, a process of train-grid --workers)
    pickles the transform; the digits' was a local function ("Can't pickle local object")."""
    import pickle

    import torch

    from embedscope.data.base import image_transform

    t = pickle.loads(pickle.dumps(image_transform(kind, train, image_size=32)))
    if kind == "digits" and not train:
        img = np.arange(64, dtype=np.float64).reshape(8, 8) % 17
        assert torch.equal(t(img), torch.from_numpy((img.astype(np.float32) / 16.0)[None]))
