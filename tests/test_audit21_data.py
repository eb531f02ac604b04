"""Audit of the official-layout loaders (CUB-200-2011, CARS196, SOP, imagefolder): what an unchanged
download, a truncated one, a wrong --root and odd file names give, and `embedscope embed` on each
tiny layout end to end (the HDF5 file's labels, paths, split, class names and properties)."""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from embedscope import store
from embedscope.cli import main
from embedscope.data import get_dataset
from embedscope.data.cars import load_cars196
from embedscope.data.cub import load_cub200
from embedscope.data.imagefolder import DatasetSizeWarning, load_imagefolder
from embedscope.data.sop import load_sop
from embedscope.errors import EmbedscopeError

IMAGE_SIZE = 32


def write_jpeg(path: Path, seed: int, size=(IMAGE_SIZE, IMAGE_SIZE)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path, "JPEG")


@contextlib.contextmanager
def no_size_warning():
    """A context in which a DatasetSizeWarning fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DatasetSizeWarning)
        yield


# ---------------------------------------------------------------------------------------------- CUB

ATTRS = ["has_bill_shape::curved_(up_or_down)", "has_wing_color::blue", "has_size::small_(5_-_9_in)"]


def make_cub_tgz(top: Path, n_classes: int = 4, per_class: int = 2) -> tuple[Path, list[tuple[int, int, str]]]:
    """What CUB_200_2011.tgz unpacks into ``top``: ``attributes.txt`` beside ``CUB_200_2011/``, whose
    ``attributes/`` holds the labels only. Returns the data-set folder and (image id, class id, path)."""
    base = top / "CUB_200_2011"
    img, lab, cls, rows, att = [], [], [], [], []
    iid = 0
    for c in range(1, n_classes + 1):
        folder = f"{c:03d}.Bird_{c}"
        cls.append(f"{c} {folder}")
        for k in range(per_class):
            iid += 1
            rel = f"{folder}/Bird_{c}_{k:04d}_{iid}.jpg"
            write_jpeg(base / "images" / rel, iid)
            img.append(f"{iid} {rel}")
            lab.append(f"{iid} {c}")
            rows.append((iid, c, f"images/{rel}"))
            for a in range(1, len(ATTRS) + 1):
                att.append(f"{iid} {a} {(iid + a) % 2} {1 + (iid + a) % 4} 2.5")
    for name, lines in (("images.txt", img), ("image_class_labels.txt", lab), ("classes.txt", cls)):
        (base / name).write_text("\n".join(lines) + "\n")
    (base / "attributes").mkdir()
    (base / "attributes" / "image_attribute_labels.txt").write_text("\n".join(att) + "\n")
    (base / "attributes" / "certainties.txt").write_text("1 not visible\n2 guessing\n3 probably\n4 definitely\n")
    (top / "attributes.txt").write_text("".join(f"{a} {n}\n" for a, n in enumerate(ATTRS, 1)))
    return base, rows


def expected_attr(rows, a: int) -> list[int]:
    return [(iid + a) % 2 for iid, _, _ in rows]


@pytest.mark.parametrize("form", ["folder", "parent"])
def test_cub_attributes_of_the_unchanged_download(tmp_path, form):
    """The official archive puts attributes.txt beside CUB_200_2011/: the 312 attributes were silently
    absent (only a copy moved into attributes/ gave them)."""
    base, rows = make_cub_tgz(tmp_path)
    ds = load_cub200(base if form == "folder" else tmp_path)
    assert sorted(ds.properties) == sorted(f"attr:{n}" for n in ATTRS)
    for a, n in enumerate(ATTRS, 1):
        assert ds.properties[f"attr:{n}"].tolist() == expected_attr(rows, a)
    # the README's place (attributes/attributes.txt) and CUB_200_2011/attributes.txt are read too, first found first
    (tmp_path / "attributes.txt").rename(base / "attributes.txt")
    assert sorted(load_cub200(base).properties) == sorted(f"attr:{n}" for n in ATTRS)
    (base / "attributes" / "attributes.txt").write_text("1 other::name\n2 b::b\n3 c::c\n")
    assert "attr:other::name" in load_cub200(base).properties


def test_cub_attribute_labels_without_names_warn(tmp_path):
    base, _ = make_cub_tgz(tmp_path)
    (tmp_path / "attributes.txt").unlink()
    with pytest.warns(UserWarning, match=r"image_attribute_labels\.txt is present but attributes\.txt .* no attr:"):
        ds = load_cub200(base)
    assert not ds.properties


def test_cub_attribute_parse_equals_the_line_by_line_reader(tmp_path, monkeypatch):
    """The fast (pandas) parse of image_attribute_labels.txt gives what the line-by-line reader gives: a
    sixth field, blank lines, a repeated line (the last counts), lines of images and attributes not loaded."""
    import pandas as pd

    base, rows = make_cub_tgz(tmp_path)
    lab = base / "attributes" / "image_attribute_labels.txt"
    text = lab.read_text().replace("1 1 0 2 2.5\n", "1 1 0 2 2.5 extra\n\n")  # image 1, attribute 1
    lab.write_text(text + "1 2 1 4 1.0\n1 2 0 4 1.0\n99 1 1 4 1.0\n2 77 1 4 1.0\n")
    fast = {c: load_cub200(base, attribute_certainty=c).properties for c in (None, 3)}
    assert fast[None]["attr:" + ATTRS[1]][0] == 0  # the later of the two lines for (1, 2)

    def refuse(*a, **k):
        raise ValueError("no pandas here")

    monkeypatch.setattr(pd, "read_csv", refuse)
    for c in (None, 3):
        slow = load_cub200(base, attribute_certainty=c).properties
        assert sorted(slow) == sorted(fast[c])
        for k in slow:
            np.testing.assert_array_equal(slow[k], fast[c][k])
    monkeypatch.undo()
    lab.write_text(text + "3 x 1 4 1.0\n")
    with pytest.raises(EmbedscopeError, match=r"image_attribute_labels\.txt: non-integer field in '3 x 1 4 1\.0'"):
        load_cub200(base)


def test_cub_truncated_images_txt_is_an_error(tmp_path):
    """A truncated images.txt gave a smaller data set without a word."""
    base, rows = make_cub_tgz(tmp_path)
    lines = (base / "images.txt").read_text().splitlines()
    (base / "images.txt").write_text("\n".join(lines[:5]) + "\n")
    with pytest.raises(EmbedscopeError, match=r"image_class_labels\.txt labels 3 image id\(s\) that .*images\.txt "
                                              r"does not list \(first: id 6; it lists 5\)") as e:
        load_cub200(base)
    assert "\n" not in str(e.value)


def test_cub_official_class_list_with_other_image_count_warns(tmp_path):
    base, _ = make_cub_tgz(tmp_path, n_classes=200, per_class=1)
    with pytest.warns(DatasetSizeWarning, match=r"cub200: images 200 \(official 11,788\) in .*images\.txt: a "
                                                r"truncated or edited copy"):
        ds = load_cub200(base)
    assert len(ds) == 200
    # another class list is a data set of its own: no warning
    (base / "classes.txt").write_text("".join(f"{c} {c:03d}.Bird_{c}\n" for c in range(1, 202)))
    with no_size_warning():
        load_cub200(base)


def test_cub_root_hints(tmp_path):
    """The archive unpacked into a folder named CUB_200_2011 (CUB_200_2011/CUB_200_2011/), or --root given
    as the images folder: the error says where images.txt is."""
    base, _ = make_cub_tgz(tmp_path / "data" / "CUB_200_2011")
    assert base == tmp_path / "data" / "CUB_200_2011" / "CUB_200_2011"
    with pytest.raises(EmbedscopeError, match=rf"cub200: .*images\.txt is missing \(found {base}/images\.txt: "
                                              rf"pass --root {base}\)$"):
        load_cub200(tmp_path / "data")
    assert len(load_cub200(tmp_path / "data" / "CUB_200_2011")) == 8  # the parent form reads it
    with pytest.raises(EmbedscopeError, match=rf"found {base}/images\.txt: pass --root {base}\)$"):
        load_cub200(base / "images")
    # nothing near: the plain message
    (tmp_path / "elsewhere" / "x").mkdir(parents=True)
    with pytest.raises(EmbedscopeError, match=r"images\.txt is missing \(not the official cub200 layout\)$"):
        load_cub200(tmp_path / "elsewhere")


def test_cub_images_unpacked_one_level_too_deep(tmp_path):
    base, _ = make_cub_tgz(tmp_path)
    (base / "images").rename(tmp_path / "images")
    (base / "images").mkdir()
    (tmp_path / "images").rename(base / "images" / "images")
    with pytest.raises(EmbedscopeError, match=r"is missing \(8 of 8 listed images are absent\) \(.*images/images/"
                                              r"001\.Bird_1/.*\.jpg exists: the folder images/ holds another images/"):
        load_cub200(base)


# --------------------------------------------------------------------------------------------- CARS


def make_cars_official(root: Path, classes_of_images: list[int], n_classes: int = 4) -> list[str]:
    """cars_annos.mat as MATLAB writes it (1 x N struct, char arrays, 1 x 1 numbers; 1 x C cell of names)."""
    from scipy.io import savemat

    fields = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]
    annos = np.zeros((1, len(classes_of_images)), dtype=[(f, "O") for f in fields])
    for i, c in enumerate(classes_of_images):
        rel = f"car_ims/{i + 1:06d}.jpg"
        write_jpeg(root / rel, i)
        annos[0, i] = (np.array([rel]), np.array([[1]], np.uint16), np.array([[2]], np.uint16),
                       np.array([[9 + i]], np.uint16), np.array([[6]], np.uint16), np.array([[c]], np.uint8),
                       np.array([[i % 2]], np.uint8))
    names = [f"Maker Model{c} Sedan 20{c:02d}" for c in range(1, n_classes + 1)]
    cell = np.empty((1, n_classes), dtype=object)
    cell[0, :] = [np.array([s]) for s in names]
    savemat(root / "cars_annos.mat", {"annotations": annos, "class_names": cell})
    return names


def test_cars_root_hints(tmp_path):
    make_cars_official(tmp_path / "data" / "cars196", [1, 2, 3, 4])
    with pytest.raises(EmbedscopeError, match=r"cars_annos\.mat is missing \(found .*/data/cars196/cars_annos\.mat: "
                                              r"pass --root .*/data/cars196\)$"):
        load_cars196(tmp_path / "data")
    with pytest.raises(EmbedscopeError, match=r"pass --root .*/data/cars196\)$"):  # --root car_ims/
        load_cars196(tmp_path / "data" / "cars196" / "car_ims")
    split = tmp_path / "split"
    for d in ("cars_train", "cars_test", "devkit"):
        (split / d).mkdir(parents=True)
    with pytest.raises(EmbedscopeError, match=r"nor the split download, which has devkit/cars_meta\.mat\)$"):
        load_cars196(split)


def test_cars_car_ims_unpacked_one_level_too_deep(tmp_path):
    make_cars_official(tmp_path, [1, 2, 3, 4])
    (tmp_path / "car_ims").rename(tmp_path / "x")
    (tmp_path / "car_ims").mkdir()
    (tmp_path / "x").rename(tmp_path / "car_ims" / "car_ims")
    with pytest.raises(EmbedscopeError, match=r"car_ims/car_ims/000001\.jpg exists: the folder car_ims/ holds "
                                              r"another car_ims/; move its contents up one level\)$"):
        load_cars196(tmp_path)


def test_cars_official_class_list_with_other_image_count_warns(tmp_path):
    make_cars_official(tmp_path, [1, 98, 99, 196], n_classes=196)
    with pytest.warns(DatasetSizeWarning, match=r"cars196: images 4 \(official 16,185\) in .*cars_annos\.mat"):
        ds = load_cars196(tmp_path)
    assert ds.split.tolist() == ["train", "train", "test", "test"]
    make_cars_official(tmp_path, [1, 2, 3, 4], n_classes=4)
    with no_size_warning():
        load_cars196(tmp_path)


# ---------------------------------------------------------------------------------------------- SOP

HEADER = "image_id class_id super_class_id path"


def make_sop(base: Path, train: list[tuple[int, int]], test: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    cats = {1: "bicycle_final", 2: "chair_final", 12: "toaster_final"}
    rows = []
    for fname, items in (("Ebay_train.txt", train), ("Ebay_test.txt", test)):
        lines = [HEADER]
        for k, (cid, sup) in enumerate(items, 1):
            rel = f"{cats[sup]}/{100000 + cid}_{k}.JPG"
            write_jpeg(base / rel, len(rows))
            lines.append(f"{len(rows) + 1} {cid} {sup} {rel}")
            rows.append((cid, sup, rel))
        (base / fname).write_text("\n".join(lines) + "\n")
    return rows


def test_sop_official_numbering_with_other_counts_warns(tmp_path):
    """Ebay_test.txt cut short (its ids start at 11,319 as the official file's do): a warning naming the counts."""
    make_sop(tmp_path, [(1, 1), (1, 1), (2, 2)], [(11319, 12), (11320, 1)])
    with pytest.warns(DatasetSizeWarning, match=r"sop: training images 3 \(official 59,551\); test images 2 "
                                                r"\(official 60,502\); training classes 2 \(official 11,318\); "
                                                r"test classes 2 \(official 11,316\) in Ebay_train\.txt and "
                                                r"Ebay_test\.txt"):
        ds = load_sop(tmp_path)
    assert ds.labels.tolist() == [0, 0, 1, 2, 3] and ds.class_names.tolist()[2] == "toaster_11319"
    small = tmp_path / "small"
    make_sop(small, [(1, 1), (2, 2)], [(3, 12), (4, 1)])
    with no_size_warning():
        load_sop(small)


def test_sop_root_hint(tmp_path):
    inner = tmp_path / "Stanford_Online_Products" / "Stanford_Online_Products"
    make_sop(inner, [(1, 1), (2, 2)], [(3, 12), (4, 1)])
    with pytest.raises(EmbedscopeError, match=rf"sop: .*Ebay_train\.txt is missing \(found {inner}/Ebay_train\.txt: "
                                              rf"pass --root {inner}\)$"):
        load_sop(tmp_path)
    with pytest.raises(EmbedscopeError, match=rf"pass --root {inner}\)$"):  # --root a category folder
        load_sop(inner / "bicycle_final")


# -------------------------------------------------------------------------------------- imagefolder


def test_imagefolder_symlink_loop_reads_each_image_once(tmp_path):
    """A link back to a class folder gave the same image 40 times (until the OS refused the path)."""
    for c in ("a", "b"):
        write_jpeg(tmp_path / c / "x.jpg", 1)
    os.symlink(tmp_path / "a", tmp_path / "a" / "loop")
    os.symlink(tmp_path / "b" / "sub", tmp_path / "b" / "again")  # a second name of b/sub
    (tmp_path / "b" / "sub").mkdir()
    write_jpeg(tmp_path / "b" / "sub" / "y.jpg", 2)
    ds = load_imagefolder(tmp_path)
    # b/again and b/sub are one folder: read once, under the first name in sorted order
    assert ds.paths.tolist() == ["a/x.jpg", "b/x.jpg", "b/again/y.jpg"]


def test_imagefolder_undecodable_name_is_refused_before_embedding(tmp_path):
    """A file name with a byte that is not UTF-8 failed only when the HDF5 file was written, after every
    image was embedded."""
    for c in ("a", "b"):
        write_jpeg(tmp_path / c / "x.jpg", 1)
    bad = os.fsdecode(b"b\xffd.jpg")
    try:
        write_jpeg(tmp_path / "b" / bad, 2)
    except OSError:
        pytest.skip("this file system refuses non-UTF-8 names")
    # raw in the message (the error line shows the byte as \xff: embedscope/text.py)
    with pytest.raises(EmbedscopeError, match=r"imagefolder: .*/b/b\udcffd\.jpg has a name that is not valid UTF-8 "
                                              r"text \(an undecodable byte\); rename it$"):
        load_imagefolder(tmp_path)


# ------------------------------------------------------------------------------------ embed end to end


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(0)
    cfg = default_config("resnet18", embed_dim=8, image_size=IMAGE_SIZE)
    path = tmp_path_factory.mktemp("ckpt") / "resnet18.pt"
    save_checkpoint(path, build_model(cfg), cfg)
    return path


def embed(ckpt: Path, dataset: str, root: Path, out: Path, *extra: str) -> store.EmbeddingSet:
    rc = main(["embed", str(ckpt), "--dataset", dataset, "--root", str(root), "-o", str(out), "--device", "cpu",
               "--no-progress", *extra])
    assert rc == 0
    return store.load(out)


def test_embed_cub_download_writes_labels_paths_split_and_attributes(tmp_path, checkpoint):
    base, rows = make_cub_tgz(tmp_path / "data")
    es = embed(checkpoint, "cub200", tmp_path / "data", tmp_path / "cub.h5")
    assert es.paths.tolist() == [f"CUB_200_2011/{p}" for _, _, p in rows]
    assert es.labels.tolist() == [c - 1 for _, c, _ in rows]
    assert es.split.tolist() == ["train"] * 4 + ["test"] * 4
    assert es.class_names.tolist() == ["Bird_1", "Bird_2", "Bird_3", "Bird_4"]
    for a, n in enumerate(ATTRS, 1):
        assert np.asarray(es.properties[f"attr:{n}"]).tolist() == expected_attr(rows, a)
    es = embed(checkpoint, "cub200", base, tmp_path / "cub3.h5", "--train-classes", "3", "--split", "test")
    assert es.paths.tolist() == [p for _, c, p in rows if c == 4] and es.labels.tolist() == [3, 3]


def test_embed_cars_official_writes_labels_paths_split(tmp_path, checkpoint):
    names = make_cars_official(tmp_path, [3, 1, 4, 2, 1])
    es = embed(checkpoint, "cars196", tmp_path, tmp_path / "cars.h5")
    assert es.paths.tolist() == [f"car_ims/{i:06d}.jpg" for i in range(1, 6)]
    assert es.labels.tolist() == [2, 0, 3, 1, 0]
    assert es.split.tolist() == ["test", "train", "test", "train", "train"]  # classes 1-2 of 4 train
    assert es.class_names.tolist() == names
    assert np.asarray(es.properties["make"]).tolist() == ["Maker"] * 5
    assert np.asarray(es.properties["body_type"]).tolist() == ["sedan"] * 5


def make_cars_split(base: Path, train: list[int], test: list[int], n_classes: int = 4,
                    test_labels_in_devkit: bool = False) -> list[str]:
    """The split download as torchvision's StanfordCars reads it: devkit/cars_meta.mat (1 x C cell),
    devkit/cars_train_annos.mat and cars_test_annos_withlabels.mat (1 x N structs of 1 x 1 numbers and
    char arrays, as MATLAB writes them), cars_train/ and cars_test/ numbered from 00001.jpg."""
    from scipy.io import savemat

    fields = ["bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "fname"]
    (base / "devkit").mkdir(parents=True, exist_ok=True)
    names = [f"Maker Model{c} Coupe 20{c:02d}" for c in range(1, n_classes + 1)]
    cell = np.empty((1, n_classes), dtype=object)
    cell[0, :] = [np.array([s]) for s in names]
    savemat(base / "devkit" / "cars_meta.mat", {"class_names": cell})
    where = {"train": base / "devkit" / "cars_train_annos.mat",
             "test": base / ("devkit" if test_labels_in_devkit else ".") / "cars_test_annos_withlabels.mat"}
    for split, classes in (("train", train), ("test", test)):
        annos = np.zeros((1, len(classes)), dtype=[(f, "O") for f in fields])
        for i, c in enumerate(classes):
            fname = f"{i + 1:05d}.jpg"
            write_jpeg(base / f"cars_{split}" / fname, 100 * (split == "test") + i)
            annos[0, i] = (np.array([[2]], np.uint16), np.array([[3]], np.uint16), np.array([[20 + i]], np.uint16),
                           np.array([[12]], np.uint16), np.array([[c]], np.uint8), np.array([fname]))
        savemat(where[split], {"annotations": annos})
    return names


def test_cars_split_download_reads_as_torchvision_does(tmp_path):
    """The split download (cars_train/, cars_test/, devkit/: torchvision's StanfordCars layout) was refused;
    it is read with the zero-shot split over both halves, rows and labels as torchvision's own reader."""
    from torchvision.datasets import StanfordCars

    base = tmp_path / "stanford_cars"
    names = make_cars_split(base, [3, 1, 2], [4, 2])
    with no_size_warning():
        ds = load_cars196(base)
    assert ds.paths.tolist() == ["cars_train/00001.jpg", "cars_train/00002.jpg", "cars_train/00003.jpg",
                                 "cars_test/00001.jpg", "cars_test/00002.jpg"]
    assert ds.labels.tolist() == [2, 0, 1, 3, 1] and ds.class_names.tolist() == names
    assert ds.split.tolist() == ["test", "train", "train", "test", "train"]  # classes 1-2 of 4: train
    peer = [(Path(p).relative_to(base).as_posix(), t) for split in ("train", "test")
            for p, t in StanfordCars(tmp_path, split=split)._samples]
    assert peer == list(zip(ds.paths.tolist(), ds.labels.tolist()))
    assert StanfordCars(tmp_path).classes == names
    assert {"make", "body_type", "year", "bbox_area", "bbox_aspect"} <= set(ds.properties)
    assert np.asarray(ds.properties["body_type"]).tolist() == ["coupe"] * 5
    parent = load_cars196(tmp_path)  # torchvision's root: the paths keep the folder
    assert parent.paths.tolist() == [f"stanford_cars/{p}" for p in ds.paths] and parent.labels.tolist() == ds.labels.tolist()


def test_cars_split_download_needs_the_test_labels(tmp_path):
    make_cars_split(tmp_path, [1, 2], [3, 4], test_labels_in_devkit=True)
    assert load_cars196(tmp_path).labels.tolist() == [0, 1, 2, 3]  # read from devkit/ too
    (tmp_path / "devkit" / "cars_test_annos_withlabels.mat").rename(tmp_path / "devkit" / "cars_test_annos.mat")
    with pytest.raises(EmbedscopeError, match=r"cars_test_annos_withlabels\.mat is missing \(the test images' labels"):
        load_cars196(tmp_path)
    make_cars_split(tmp_path, [1, 2, 3, 4, 1], [3, 4], n_classes=196)
    with pytest.warns(DatasetSizeWarning, match=r"cars196: images 7 \(official 16,185\)"):
        load_cars196(tmp_path)
    (tmp_path / "cars_train" / "00005.jpg").unlink()
    with pytest.raises(EmbedscopeError, match=r"cars_train/00005\.jpg"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DatasetSizeWarning)
        load_cars196(tmp_path)


def test_embed_cars_split_download(tmp_path, checkpoint):
    make_cars_split(tmp_path / "stanford_cars", [1, 2], [3, 4])
    es = embed(checkpoint, "cars196", tmp_path, tmp_path / "cars.h5", "--split", "test")
    assert es.paths.tolist() == ["stanford_cars/cars_test/00001.jpg", "stanford_cars/cars_test/00002.jpg"]
    assert es.labels.tolist() == [2, 3] and set(es.split) == {"test"}


def test_embed_sop_writes_its_own_split_and_super_class(tmp_path, checkpoint):
    base = tmp_path / "Stanford_Online_Products"
    rows = make_sop(base, [(2, 1), (1, 1), (2, 1)], [(5, 12), (3, 2)])
    es = embed(checkpoint, "sop", tmp_path, tmp_path / "sop.h5")
    assert es.paths.tolist() == [f"Stanford_Online_Products/{p}" for _, _, p in rows]
    assert es.labels.tolist() == [1, 0, 1, 3, 2]
    assert es.split.tolist() == ["train"] * 3 + ["test"] * 2
    assert es.class_names.tolist() == ["bicycle_1", "bicycle_2", "chair_3", "toaster_5"]
    assert np.asarray(es.properties["super_class"]).tolist() == [1, 1, 1, 12, 2]
    assert get_dataset("sop", base).paths.tolist() == [p for _, _, p in rows]


def test_embed_errors_escape_control_characters_in_one_line(tmp_path, checkpoint, capsys):
    """A listed image that is missing, whose name holds an escape sequence and non-ASCII letters: one line,
    the escape shown as text, the letters kept."""
    base, rows = make_cub_tgz(tmp_path)
    (base / "images.txt").write_text((base / "images.txt").read_text().replace(
        "001.Bird_1/Bird_1_0000_1.jpg", "001.Bird_1/Vögel\x1b[2J_1.jpg"))
    rc = main(["embed", str(checkpoint), "--dataset", "cub200", "--root", str(base), "-o", str(tmp_path / "o.h5"),
               "--device", "cpu", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and "\x1b" not in err
    assert "images/001.Bird_1/Vögel\\x1b[2J_1.jpg is missing (1 of 8" in err
    assert not (tmp_path / "o.h5").exists()


def test_the_size_warning_is_one_line_of_the_command(tmp_path, checkpoint, capsys):
    """Through the CLI the warning was Python's two lines (``.../data/__init__.py:34: DatasetSizeWarning:``
    and a source line); embedscope's warnings are one escaped line, as its errors are."""
    make_cars_official(tmp_path, [1, 98, 99, 196], n_classes=196)
    capsys.readouterr()
    embed(checkpoint, "cars196", tmp_path, tmp_path / "c.h5")
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and err[0].startswith("embedscope embed: warning: cars196: images 4 (official 16,185) in "), err
    assert "DatasetSizeWarning" not in err[0] and ".py:" not in err[0]
