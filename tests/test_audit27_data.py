"""Audit 27 of the data set loaders, on tiny replicas of the official layouts.

Each test pins a fix: photos of a class folder named ``digits`` drawn as photos (not read as digits item
ids), a dangling symbolic link of an image folder refused when the folder is listed, a palette image with
transparency read without PIL's per-image warning, and non-ASCII digits in an annotation file refused as a
malformed line (not a ``ValueError`` traceback).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from embedscope import store
from embedscope.cli import main
from embedscope.data import get_dataset
from embedscope.data.base import open_rgb
from embedscope.data.cars import parse_class_name
from embedscope.data.thumbnails import load_thumbnails
from embedscope.errors import EmbedscopeError

pytestmark = pytest.mark.filterwarnings("ignore::embedscope.data.imagefolder.DatasetSizeWarning")


def _rgb(path: Path, seed: int, size=(12, 10)) -> np.ndarray:
    path.parent.mkdir(parents=True, exist_ok=True)
    a = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(a).save(path)
    return a


# ------------------------------------------------------------------ thumbnails of a class named "digits"

def _digits_class_folder(root: Path) -> dict[str, np.ndarray]:
    return {f"{c}/{k}.png": _rgb(root / c / f"{k}.png", 10 * i + k) for i, c in enumerate(("digits", "letters"))
            for k in range(3)}


@pytest.mark.parametrize("dataset", ["imagefolder", None])
def test_photos_of_a_class_folder_named_digits_are_photos(tmp_path, dataset):
    pixels = _digits_class_folder(tmp_path)
    paths = ["digits/0.png", "digits/2.png"]
    thumbs = load_thumbnails(paths, dataset=dataset, root=str(tmp_path), size=128)
    for p, t in zip(paths, thumbs):  # PNG: lossless; 12 x 10 is below the thumbnail size, so unscaled
        np.testing.assert_array_equal(t, pixels[p])


def test_digits_item_ids_of_a_file_without_a_data_set_name_are_still_the_digits():
    from embedscope.data.digits import load_digits_dataset

    thumbs = load_thumbnails(["digits/0000", "digits/1796"], dataset=None, root=None)
    images = load_digits_dataset().images
    np.testing.assert_array_equal(thumbs[0], images[0])
    np.testing.assert_array_equal(thumbs[1], images[1796])


def test_neighbours_of_a_query_in_a_class_folder_named_digits(tmp_path, capsys):
    root = tmp_path / "photos"
    pixels = _digits_class_folder(root)
    paths = sorted(pixels)
    y = np.array([0 if p.startswith("digits/") else 1 for p in paths])
    X = (np.eye(2)[y] * 5 + np.random.default_rng(0).normal(size=(len(y), 2)) * 0.01).astype(np.float32)
    es = store.EmbeddingSet.from_arrays(X, y, paths=paths, class_names=["digits", "letters"], split="test",
                                        attrs={"dataset": "imagefolder", "root": str(root)})
    store.save(tmp_path / "e.h5", es)
    (tmp_path / "q.txt").write_text("digits/0.png\n")
    out = tmp_path / "nb.png"
    rc = main(["neighbours", str(tmp_path / "e.h5"), "--split", "all", "--n-retrievals", "2",
               "--paths-file", str(tmp_path / "q.txt"), "-o", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 0, err  # was: "digits/1.png is not a digits item id (digits/NNNN)", exit 1
    assert out.is_file()


# ------------------------------------------------------------------ image folder: a dangling symbolic link

@pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="symbolic links")
def test_imagefolder_dangling_link_is_refused_when_listed(tmp_path):
    _rgb(tmp_path / "cat" / "a.jpg", 1)
    _rgb(tmp_path / "dog" / "b.jpg", 2)
    os.symlink(tmp_path / "gone.jpg", tmp_path / "cat" / "z.jpg")
    with pytest.raises(EmbedscopeError) as e:
        get_dataset("imagefolder", tmp_path)
    assert str(e.value) == (f"imagefolder: image {tmp_path / 'cat' / 'z.jpg'} is a symbolic link to nothing "
                            "(1 of 3 image files cannot be read; remove or repair them)")
    # a link to an image, and to a class folder, are read
    (tmp_path / "cat" / "z.jpg").unlink()
    os.symlink(tmp_path / "dog" / "b.jpg", tmp_path / "cat" / "z.jpg")
    ds = get_dataset("imagefolder", tmp_path)
    assert ds.paths.tolist() == ["cat/a.jpg", "cat/z.jpg", "dog/b.jpg"]
    np.testing.assert_array_equal(np.asarray(ds.load_image(1)), np.asarray(ds.load_image(2)))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_imagefolder_special_file_with_an_image_ending_is_refused(tmp_path):
    _rgb(tmp_path / "cat" / "a.jpg", 1)
    _rgb(tmp_path / "dog" / "b.jpg", 2)
    os.mkfifo(tmp_path / "dog" / "pipe.png")
    with pytest.raises(EmbedscopeError, match=r"dog/pipe\.png is not a regular file \(1 of 3 image files"):
        get_dataset("imagefolder", tmp_path)


# ------------------------------------------------------------------ palette images with transparency

def test_palette_image_with_transparency_reads_its_palette_colours_without_a_warning(tmp_path):
    a = np.random.default_rng(3).integers(0, 256, (9, 11, 3), dtype=np.uint8)
    im = Image.fromarray(a).convert("P", palette=Image.ADAPTIVE, colors=8)
    im.save(tmp_path / "p.png", transparency=bytes([0, 0, 255, 255, 255, 255, 255, 255]))
    im.save(tmp_path / "p.gif", transparency=1)
    for name in ("p.png", "p.gif"):
        with Image.open(tmp_path / name) as src:
            assert src.mode == "P" and "transparency" in src.info
            expected = np.asarray(src.getpalette(), dtype=np.uint8).reshape(-1, 3)[np.asarray(src)]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # PIL's "Palette images with Transparency ..." warned per image
            got = np.asarray(open_rgb(tmp_path / name))
        np.testing.assert_array_equal(got, expected)  # the palette colours; the alpha is dropped


# ------------------------------------------------------------------ non-ASCII digits in the annotation files

def _cub(top: Path) -> Path:
    base = top / "CUB_200_2011"
    rows = [(1, 1, "001.A/a_1.jpg"), (2, 2, "002.B/b_2.jpg")]
    for _, _, p in rows:
        _rgb(base / "images" / p, len(p))
    (base / "images.txt").write_text("".join(f"{i} {p}\n" for i, _, p in rows))
    (base / "image_class_labels.txt").write_text("".join(f"{i} {c}\n" for i, c, _ in rows))
    (base / "classes.txt").write_text("1 001.A\n2 002.B\n")
    return base


def test_cub_superscript_digit_is_a_malformed_line(tmp_path):
    base = _cub(tmp_path)
    assert get_dataset("cub200", tmp_path).labels.tolist() == [0, 1]
    (base / "image_class_labels.txt").write_text("1 1\n2 \u00b2\n")  # '²'.isdigit() is True, int('²') fails
    with pytest.raises(EmbedscopeError) as e:
        get_dataset("cub200", tmp_path)
    assert str(e.value) == (f"cub200: {base / 'image_class_labels.txt'}:2: malformed line '2 \u00b2' "
                            "(expected '<id> <class id>')")
    (base / "image_class_labels.txt").write_text("1 1\n2 2\n")
    (base / "images.txt").write_text("1 001.A/a_1.jpg\n\u00b2 002.B/b_2.jpg\n")
    with pytest.raises(EmbedscopeError, match=r"images\.txt:2: malformed line"):
        get_dataset("cub200", tmp_path)


def test_sop_superscript_digit_is_a_malformed_line(tmp_path):
    base = _sop(tmp_path)
    head = "image_id class_id super_class_id path\n"
    assert get_dataset("sop", tmp_path).class_names.tolist() == ["bicycle_1", "toaster_2"]
    (base / "Ebay_test.txt").write_text(head + "2 2 1\u00b2 toaster_final/2_0.JPG\n")
    with pytest.raises(EmbedscopeError) as e:
        get_dataset("sop", tmp_path)
    assert str(e.value) == (f"sop: {base / 'Ebay_test.txt'}:2: malformed line '2 2 1\u00b2 toaster_final/2_0.JPG' "
                            "(expected '<image_id> <class_id> <super_class_id> <path>')")


def test_cars_class_name_ending_in_four_superscript_digits_has_no_year():
    assert parse_class_name("Acme Roadster Convertible \u00b2\u00b2\u00b2\u00b2") == ("Acme", "convertible", -1)
    assert parse_class_name("AM General Hummer SUV 2000") == ("AM General", "suv", 2000)


# ------------------------------------------------------------------ --root "" (an unset shell variable)

def _sop(top: Path) -> Path:
    base = top / "Stanford_Online_Products"
    head = "image_id class_id super_class_id path\n"
    _rgb(base / "bicycle_final" / "1_0.JPG", 1)
    _rgb(base / "toaster_final" / "2_0.JPG", 2)
    (base / "Ebay_train.txt").write_text(head + "1 1 1 bicycle_final/1_0.JPG\n")
    (base / "Ebay_test.txt").write_text(head + "2 2 12 toaster_final/2_0.JPG\n")
    return base


def _kaggle(top: Path) -> Path:
    top.mkdir(parents=True, exist_ok=True)
    (top / "names.csv").write_text("AM General Hummer SUV 2000\nRam C/V Cargo Van Minivan 2012\n")
    _rgb(top / "car_data/car_data/train/AM General Hummer SUV 2000/00001.jpg", 1)
    _rgb(top / "car_data/car_data/test/Ram C-V Cargo Van Minivan 2012/00001.jpg", 2)
    (top / "anno_train.csv").write_text("00001.jpg,0,0,5,5,1\n")
    (top / "anno_test.csv").write_text("00001.jpg,0,0,5,5,2\n")
    return top


def _folder(top: Path) -> Path:
    _rgb(top / "cat" / "a.jpg", 1)
    _rgb(top / "dog" / "b.jpg", 2)
    return top


@pytest.mark.parametrize("name,make", [("cub200", _cub), ("sop", _sop), ("cars196", _kaggle),
                                       ("imagefolder", _folder)])
def test_an_empty_root_is_refused_not_read_as_the_working_folder(tmp_path, monkeypatch, name, make):
    make(tmp_path)
    monkeypatch.chdir(tmp_path)  # the working folder holds the layout: "" was read as it, and recorded as no root
    with pytest.raises(EmbedscopeError) as e:
        get_dataset(name, "")
    assert str(e.value) == (f"{name}: --root is empty (an unset shell variable?): give the data set's folder "
                            "(. for the working folder)")
    assert len(get_dataset(name, ".")) == 2  # the working folder, named
    assert len(get_dataset("digits", "")) == 1797  # needs no folder: a root of "" is not looked at


@pytest.mark.parametrize("name,archive", [("cub200", "CUB_200_2011.tgz"), ("sop", "Stanford_Online_Products.zip"),
                                          ("cars196", "stanford-car-dataset-by-classes-folder.zip"),
                                          ("imagefolder", "photos.tar.gz")])
def test_an_archive_given_as_root_says_to_unpack_it(tmp_path, name, archive):
    (tmp_path / archive).write_bytes(b"\x1f\x8b")
    with pytest.raises(EmbedscopeError) as e:
        get_dataset(name, tmp_path / archive)
    assert str(e.value) == (f"{name}: --root {tmp_path / archive} is a file, expected the data set's folder "
                            "(an archive: unpack it and pass the folder it holds)")
    (tmp_path / "notes.txt").write_text("x")  # another file: no hint
    with pytest.raises(EmbedscopeError) as e:
        get_dataset(name, tmp_path / "notes.txt")
    assert str(e.value) == f"{name}: --root {tmp_path / 'notes.txt'} is a file, expected the data set's folder"


# ------------------------------------------------------------------ --dataset X on another data set's folder

@pytest.mark.parametrize("name,make,marker,other", [
    ("cub200", _sop, "Stanford_Online_Products/Ebay_train.txt", "sop"),
    ("sop", _cub, "CUB_200_2011/images.txt", "cub200"),
    ("sop", _kaggle, "anno_train.csv", "cars196"),
    ("cub200", _kaggle, "anno_train.csv", "cars196"),
])
def test_another_data_sets_layout_is_named(tmp_path, name, make, marker, other):
    make(tmp_path)
    missing = "images.txt" if name == "cub200" else "Ebay_train.txt"
    with pytest.raises(EmbedscopeError) as e:
        get_dataset(name, tmp_path)
    assert str(e.value) == (f"{name}: {tmp_path / missing} is missing (not the official {name} layout; --root holds "
                            f"{marker}, the {other} layout: --dataset {other}?)")
    assert len(get_dataset(other, tmp_path)) == 2  # the layout named is the one there


def test_cars_on_a_cub_folder_names_the_cub_layout(tmp_path):
    _cub(tmp_path)
    with pytest.raises(EmbedscopeError) as e:
        get_dataset("cars196", tmp_path)
    assert str(e.value).endswith("nor the split download, which has devkit/cars_meta.mat; --root holds "
                                 "CUB_200_2011/images.txt, the cub200 layout: --dataset cub200?)")


def test_imagefolder_on_a_cub_folder_names_the_cub_layout(tmp_path):
    base = _cub(tmp_path)
    (base / "attributes").mkdir()  # as in the download: a folder of text files, read as a class
    with pytest.raises(EmbedscopeError) as e:
        get_dataset("imagefolder", base)
    assert str(e.value).startswith(f"imagefolder: class folder {base / 'attributes'} holds no image files (")
    assert str(e.value).endswith(".gif; --root holds images.txt, the cub200 layout: --dataset cub200?)")


def _walk_reference(folder: Path) -> list[str]:
    """The listing order as os.walk gives it (files of a folder sorted, then its sub-folders sorted, hidden names
    skipped, links followed, a folder reached twice read once): what the loader listed before it read the
    folder entries itself."""
    from embedscope.data.imagefolder import IMG_EXTENSIONS

    out, seen = [], set()
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in seen:
            dirnames[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out += [os.path.join(dirpath, f) for f in sorted(filenames)
                if not f.startswith(".") and f.lower().endswith(IMG_EXTENSIONS)]
    return out


@pytest.mark.skipif(os.name == "nt", reason="symbolic links")
def test_imagefolder_listing_order_is_the_walk_order(tmp_path):
    for rel in ("a/z.jpg", "a/B.PNG", "a/a-b/x.jpg", "a/a/y.jpg", "a/a/deep/w.jpeg", "a/a.b/v.gif", "a/.h/u.jpg",
                "a/.t.jpg", "a/ab/t.JPG", "b/s.jpg"):
        _rgb(tmp_path / rel, len(rel))
    (tmp_path / "b" / "r.txt").write_text("not an image")
    os.symlink(tmp_path / "a" / "a", tmp_path / "a" / "link")  # the same folder twice: read once
    os.symlink(tmp_path / "b", tmp_path / "a" / "to_b")
    ds = get_dataset("imagefolder", tmp_path)
    expected = [Path(p).relative_to(tmp_path).as_posix() for c in ("a", "b") for p in _walk_reference(tmp_path / c)]
    assert ds.paths.tolist() == expected
    assert expected[:4] == ["a/B.PNG", "a/z.jpg", "a/a/y.jpg", "a/a/deep/w.jpeg"]
