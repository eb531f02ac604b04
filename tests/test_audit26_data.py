"""Audit 26 of the public data-set loaders (docs/datasets.md): tiny folders built exactly as the official
archives unpack (file names, split files, 1-based class ids), with the images a real download holds
(grayscale and CMYK JPEGs, non-ASCII file names) and the damage a copy can have (a missing image, a
truncated image, an annotation file saved with a byte-order mark, 16-bit or float images in an image
folder).

Bugs found here: a 16-bit grey PNG (PIL mode ``I;16``) was read almost white and a float TIFF black
(``convert("RGB")`` clips at 255 instead of scaling), by the data sets and by the thumbnails; an
annotation file starting with a UTF-8 byte-order mark (``images.txt``, ``Ebay_train.txt`` saved by an
editor) was refused as a "malformed line" or a wrong header whose text looked right.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from embedscope.data import get_dataset
from embedscope.data.imagefolder import DatasetSizeWarning
from embedscope.errors import EmbedscopeError

BOM = b"\xef\xbb\xbf"


def _pixels(seed: int, size=(6, 5)) -> np.ndarray:
    """A smooth picture (a colour of its own, a gentle ramp): JPEG keeps it within a few levels, so that a
    row's pixels tell which file (which class) it was read from."""
    colour = np.random.default_rng(seed).integers(40, 200, 3)
    ramp = np.add.outer(np.arange(size[1]), np.arange(size[0]))[..., None] * 3
    return np.clip(colour[None, None, :] + ramp, 0, 255).astype(np.uint8)


def _write(path: Path, seed: int, kind: str = "rgb") -> np.ndarray:
    """An image file of ``kind`` (rgb, grey, cmyk JPEG; truncated: half of an RGB JPEG); returns the RGB
    pixels a reader should see (before JPEG loss)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = _pixels(seed)
    if kind == "grey":
        Image.fromarray(arr[..., 0]).save(path, "JPEG", quality=100)
        return np.repeat(arr[..., :1], 3, axis=2)
    if kind == "cmyk":
        Image.fromarray(arr).convert("CMYK").save(path, "JPEG", quality=100)
        return arr
    if kind == "truncated":  # a download cut short: the header is whole, the last part of the scan is not
        buf = io.BytesIO()
        Image.fromarray(np.random.default_rng(seed).integers(0, 256, (48, 48, 3), dtype=np.uint8)).save(buf, "JPEG")
        data = buf.getvalue()
        path.write_bytes(data[: len(data) * 3 // 4])
        return arr
    Image.fromarray(arr).save(path, "JPEG", quality=100)
    return arr


@contextlib.contextmanager
def _size_warning():
    """The tiny copies of the 200 / 196 classes differ from the official image counts: warned, as it must."""
    with pytest.warns(DatasetSizeWarning):
        yield


def _one_line(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


# ---------------------------------------------------------------------------------------------- CUB


def make_cub_download(top: Path, kinds: dict[int, str] | None = None) -> dict[int, str]:
    """CUB_200_2011.tgz as it unpacks into ``top``: CUB_200_2011/{images.txt, image_class_labels.txt,
    classes.txt, train_test_split.txt, bounding_boxes.txt, images/NNN.Name/...} and attributes.txt beside
    it. One image per class (image id = class id = 1..200), in images.txt order by class; class 5's image
    has a non-ASCII name. Returns {image id: path relative to ``top``}."""
    kinds = kinds or {}
    base = top / "CUB_200_2011"
    img, lab, cls, split, boxes, rel = [], [], [], [], [], {}
    for c in range(1, 201):
        folder = f"{c:03d}.Bird_{c}_Name"
        fname = "Café_Ñandú_0005_5.jpg" if c == 5 else f"Bird_{c}_Name_{c:04d}_{c}.jpg"
        _write(base / "images" / folder / fname, c, kinds.get(c, "rgb"))
        img.append(f"{c} {folder}/{fname}")
        lab.append(f"{c} {c}")
        cls.append(f"{c} {folder}")
        split.append(f"{c} {c % 2}")  # the per-image classification split: present, not the DML split
        boxes.append(f"{c} 1.0 1.0 3.0 2.0")
        rel[c] = f"CUB_200_2011/images/{folder}/{fname}"
    for name, lines in (("images.txt", img), ("image_class_labels.txt", lab), ("classes.txt", cls),
                        ("train_test_split.txt", split), ("bounding_boxes.txt", boxes)):
        (base / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (top / "attributes.txt").write_text("1 has_bill_shape::curved\n", encoding="utf-8")
    return rel


def test_cub_download_standard_split_labels_paths_and_pixels(tmp_path):
    """Classes 1-100 train, 101-200 test (not train_test_split.txt); label = class id - 1; paths relative
    to the given root; grayscale and CMYK JPEGs read as RGB with their own pixels; a non-ASCII name."""
    rel = make_cub_download(tmp_path, {3: "grey", 150: "cmyk"})
    for root, prefix in ((tmp_path, ""), (tmp_path / "CUB_200_2011", "CUB_200_2011/")):
        with _size_warning():
            ds = get_dataset("cub200", root)
        assert len(ds) == 200
        want_paths = [rel[c][len(prefix):] if prefix else rel[c] for c in range(1, 201)]
        assert list(ds.paths) == want_paths
        np.testing.assert_array_equal(ds.labels, np.arange(200))
        assert list(ds.split) == ["train"] * 100 + ["test"] * 100
        assert ds.class_names[0] == "Bird_1_Name" and ds.class_names[199] == "Bird_200_Name"
        assert "Café_Ñandú_0005_5.jpg" in ds.paths[4]
    for c, kind in ((3, "grey"), (150, "cmyk"), (5, "rgb")):
        im = ds.load_image(c - 1)
        assert im.mode == "RGB"
        want = _pixels(c)
        want = np.repeat(want[..., :1], 3, axis=2) if kind == "grey" else want
        assert np.abs(np.asarray(im, dtype=float) - want).mean() < 6
    assert ds.subset("train").num_classes == 100 and ds.subset("test").labels.min() == 100


def test_cub_missing_and_truncated_images_are_one_line_errors(tmp_path):
    rel = make_cub_download(tmp_path, {120: "truncated"})
    with _size_warning():
        ds = get_dataset("cub200", tmp_path)
    with pytest.raises(EmbedscopeError) as e:
        ds.load_image(119)
    msg = _one_line(e)
    assert msg.startswith(f"cannot read image {tmp_path / rel[120]}")
    (tmp_path / rel[7]).unlink()
    with pytest.raises(EmbedscopeError) as e, warnings.catch_warnings():
        warnings.simplefilter("ignore", DatasetSizeWarning)
        get_dataset("cub200", tmp_path)
    msg = _one_line(e)
    assert f"image {tmp_path / rel[7]} is missing (1 of 200 listed images are absent)" in msg


def test_cub_annotation_files_with_a_byte_order_mark_read_as_without(tmp_path):
    """Regression: images.txt (and the other lists) re-saved by an editor that writes a UTF-8 BOM was
    refused with "malformed line '\\ufeff1 001...'"."""
    make_cub_download(tmp_path)
    with _size_warning():
        plain = get_dataset("cub200", tmp_path)
    base = tmp_path / "CUB_200_2011"
    for name in ("images.txt", "image_class_labels.txt", "classes.txt"):
        (base / name).write_bytes(BOM + (base / name).read_bytes())
    with _size_warning():
        ds = get_dataset("cub200", tmp_path)
    assert list(ds.paths) == list(plain.paths)
    np.testing.assert_array_equal(ds.labels, plain.labels)
    assert list(ds.split) == list(plain.split) and list(ds.class_names) == list(plain.class_names)


# ---------------------------------------------------------------------------------------------- CARS196

CAR_NAMES = [f"Make{c} Model {'Ram C/V Cargo Van Minivan' if c == 150 else 'Sedan'} {2000 + c % 13}"
             for c in range(1, 197)]


def make_cars_official(root: Path, kinds: dict[int, str] | None = None) -> None:
    """cars_annos.mat (1 x N struct: relative_im_path, bbox_*, class, test; 1 x 196 cell class_names) and
    car_ims/000001.jpg..., one image per class, image k of class k; the per-image ``test`` flag is the
    opposite of the DML split (it must be ignored)."""
    from scipy.io import savemat

    kinds = kinds or {}
    fields = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]
    annos = np.zeros((1, 196), dtype=[(f, "O") for f in fields])
    for c in range(1, 197):
        rel = f"car_ims/{c:06d}.jpg"
        _write(root / rel, c, kinds.get(c, "rgb"))
        annos[0, c - 1] = (np.array([rel]), np.array([[1]], np.uint8), np.array([[1]], np.uint8),
                           np.array([[4]], np.uint8), np.array([[3]], np.uint8), np.array([[c]], np.uint8),
                           np.array([[int(c <= 98)]], np.uint8))
    cell = np.empty((1, 196), dtype=object)
    cell[0, :] = [np.array([s]) for s in CAR_NAMES]
    savemat(root / "cars_annos.mat", {"annotations": annos, "class_names": cell})


def make_cars_kaggle(root: Path) -> None:
    """The Kaggle "stanford-car-dataset-by-classes-folder" layout: names.csv, anno_train.csv /
    anno_test.csv without a header, car_data/car_data/<train|test>/<class name, '/' as '-'>/<file>;
    odd classes in the train folder, even ones in the test folder (a classification split)."""
    (root / "names.csv").parent.mkdir(parents=True, exist_ok=True)
    (root / "names.csv").write_text("".join(n + "\n" for n in CAR_NAMES), encoding="utf-8")
    rows = {"train": [], "test": []}
    for c in range(1, 197):
        split = "train" if c % 2 else "test"
        fname = f"{c:05d}.jpg"
        _write(root / "car_data" / "car_data" / split / CAR_NAMES[c - 1].replace("/", "-") / fname, c)
        rows[split].append(f"{fname},1,1,4,3,{c}")
    for split, lines in rows.items():
        (root / f"anno_{split}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def make_cars_split_download(root: Path) -> None:
    """torchvision's StanfordCars root: stanford_cars/devkit/cars_meta.mat, devkit/cars_train_annos.mat,
    cars_test_annos_withlabels.mat, cars_train/, cars_test/ (files numbered from 00001.jpg in each)."""
    from scipy.io import savemat

    base = root / "stanford_cars"
    (base / "devkit").mkdir(parents=True)
    cell = np.empty((1, 196), dtype=object)
    cell[0, :] = [np.array([s]) for s in CAR_NAMES]
    savemat(base / "devkit" / "cars_meta.mat", {"class_names": cell})
    fields = ["bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "fname"]
    for split, classes, where in (("train", range(1, 197, 2), base / "devkit" / "cars_train_annos.mat"),
                                  ("test", range(2, 197, 2), base / "cars_test_annos_withlabels.mat")):
        classes = list(classes)
        annos = np.zeros((1, len(classes)), dtype=[(f, "O") for f in fields])
        for i, c in enumerate(classes):
            fname = f"{i + 1:05d}.jpg"
            _write(base / f"cars_{split}" / fname, c)
            annos[0, i] = (np.array([[1]], np.uint16), np.array([[1]], np.uint16), np.array([[4]], np.uint16),
                           np.array([[3]], np.uint16), np.array([[c]], np.uint8), np.array([fname]))
        savemat(where, {"annotations": annos})


@pytest.mark.parametrize("layout", ["official", "kaggle", "split download"])
def test_cars_layouts_give_classes_1_98_train_and_99_196_test(tmp_path, layout):
    """Every CARS196 layout: label = class - 1, classes 1-98 train and 99-196 test whatever the layout's own
    per-image split, class names from the annotations ('/' kept in the name, '-' in the Kaggle folder)."""
    make = {"official": make_cars_official, "kaggle": make_cars_kaggle, "split download": make_cars_split_download}
    make[layout](tmp_path)
    with _size_warning():
        ds = get_dataset("cars196", tmp_path)
    assert len(ds) == 196 and list(ds.class_names) == CAR_NAMES
    for i in range(len(ds)):
        # the class of each row, from its file (each image's pixels are seeded by its class)
        c = int(ds.labels[i]) + 1
        assert np.abs(np.asarray(ds.load_image(i), dtype=float) - _pixels(c)).mean() < 6
        assert ds.split[i] == ("train" if c <= 98 else "test")
    if layout == "kaggle":
        assert CAR_NAMES[149] == "Make150 Model Ram C/V Cargo Van Minivan 2007"
        assert "car_data/car_data/test/Make150 Model Ram C-V Cargo Van Minivan 2007/00150.jpg" in set(ds.paths)
    if layout == "official":
        assert list(ds.paths) == [f"car_ims/{c:06d}.jpg" for c in range(1, 197)]
        np.testing.assert_array_equal(ds.labels, np.arange(196))


def test_cars_official_grey_cmyk_missing_and_truncated(tmp_path):
    make_cars_official(tmp_path, {10: "grey", 120: "cmyk", 150: "truncated"})
    with _size_warning():
        ds = get_dataset("cars196", tmp_path)
    assert ds.load_image(9).mode == ds.load_image(119).mode == "RGB"
    assert np.abs(np.asarray(ds.load_image(9), dtype=float) - np.repeat(_pixels(10)[..., :1], 3, 2)).mean() < 6
    with pytest.raises(EmbedscopeError) as e:
        ds.load_image(149)
    assert _one_line(e).startswith(f"cannot read image {tmp_path / 'car_ims/000150.jpg'}")
    (tmp_path / "car_ims" / "000007.jpg").unlink()
    with pytest.raises(EmbedscopeError) as e, warnings.catch_warnings():
        warnings.simplefilter("ignore", DatasetSizeWarning)
        get_dataset("cars196", tmp_path)
    assert f"image {tmp_path / 'car_ims/000007.jpg'} is missing (1 of 196" in _one_line(e)


# ---------------------------------------------------------------------------------------------- SOP


def make_sop(top: Path, *, bom: bool = False, crlf: bool = False) -> list[tuple[int, int, str]]:
    """Stanford_Online_Products/ with Ebay_train.txt / Ebay_test.txt (header, then image_id class_id
    super_class_id path; class ids 1.. in the train file and on in the test file) and <category>_final/
    folders; returns the (class id, super class id, path) rows in file order."""
    base = top / "Stanford_Online_Products"
    rows = {"train": [], "test": []}
    iid = 0
    for cid in range(1, 7):
        split = "train" if cid <= 3 else "test"
        cat, sup = (("bicycle", 1) if cid % 2 else ("chair", 4))
        for k in range(2):
            iid += 1
            rel = f"{cat}_final/{100000 + cid}_{k}{'_é' if cid == 5 else ''}.JPG"
            _write(base / rel, iid, "grey" if iid == 3 else "rgb")
            rows[split].append((iid, cid, sup, rel))
    nl = "\r\n" if crlf else "\n"
    for split, lines in rows.items():
        text = "image_id class_id super_class_id path" + nl + nl.join(" ".join(map(str, r)) for r in lines) + nl
        (base / f"Ebay_{split}.txt").write_bytes((BOM if bom else b"") + text.encode("utf-8"))
    (base / "Ebay_info.txt").write_text("image_id class_id super_class_id path\n", encoding="utf-8")
    return [r[1:] for r in rows["train"] + rows["test"]]


def test_sop_own_split_labels_and_paths(tmp_path):
    rows = make_sop(tmp_path, crlf=True)
    ds = get_dataset("sop", tmp_path)
    assert list(ds.paths) == [f"Stanford_Online_Products/{p}" for _, _, p in rows]
    np.testing.assert_array_equal(ds.labels, [c - 1 for c, _, _ in rows])
    assert list(ds.split) == ["train"] * 6 + ["test"] * 6
    np.testing.assert_array_equal(ds.properties["super_class"], [s for _, s, _ in rows])
    assert list(ds.class_names) == ["bicycle_1", "chair_2", "bicycle_3", "chair_4", "bicycle_5", "chair_6"]
    assert ds.load_image(2).mode == "RGB" and "_é.JPG" in ds.paths[8]


def test_sop_lists_with_a_byte_order_mark_read_as_without(tmp_path):
    """Regression: Ebay_train.txt with a UTF-8 BOM was refused ("expected the header 'image_id class_id
    super_class_id path'", which its first line looked like)."""
    make_sop(tmp_path / "a")
    plain = get_dataset("sop", tmp_path / "a")
    make_sop(tmp_path / "b", bom=True)
    ds = get_dataset("sop", tmp_path / "b")
    assert list(ds.paths) == list(plain.paths) and list(ds.split) == list(plain.split)
    np.testing.assert_array_equal(ds.labels, plain.labels)


# ---------------------------------------------------------------------------------------------- image folder


def _grey16(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 65536, (5, 7), dtype=np.uint16)


def test_sixteen_bit_grey_images_are_scaled_not_clipped(tmp_path):
    """Regression: a 16-bit grey PNG (PIL mode I;16) and a 16-bit PGM (mode I) were read through
    convert("RGB"), which clips at 255: nearly every pixel white. Each value v is now round(v / 257),
    in the data set's images and in the thumbnails (``neighbours``)."""
    from embedscope.data.thumbnails import load_thumbnails

    g = _grey16(0)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    Image.fromarray(g).save(tmp_path / "a" / "x.png")
    hdr = f"P5\n{g.shape[1]} {g.shape[0]}\n65535\n".encode()
    (tmp_path / "b" / "y.pgm").write_bytes(hdr + g.astype(">u2").tobytes())
    assert Image.open(tmp_path / "a" / "x.png").mode == "I;16"
    ds = get_dataset("imagefolder", tmp_path)
    want = np.repeat(np.rint(g / 257.0).astype(np.uint8)[..., None], 3, axis=2)
    for i in range(2):
        np.testing.assert_array_equal(np.asarray(ds.load_image(i)), want)
    thumbs = load_thumbnails(list(ds.paths), dataset="imagefolder", root=str(tmp_path), size=128)
    for t in thumbs:
        np.testing.assert_array_equal(t, want)


def test_float_and_32_bit_images_are_one_line_errors(tmp_path):
    """Regression: a float TIFF was read black (and a 32-bit integer TIFF clipped): pixels without a known
    range are refused in one line naming the file, by the data set and by the thumbnails."""
    from embedscope.data.thumbnails import load_thumbnails

    for c in ("a", "b"):
        (tmp_path / c).mkdir()
    Image.fromarray(np.random.default_rng(0).random((4, 4)).astype(np.float32)).save(tmp_path / "a" / "f.tif")
    Image.fromarray(np.arange(16, dtype=np.int32).reshape(4, 4) * 1000).save(tmp_path / "b" / "i.tif")
    ds = get_dataset("imagefolder", tmp_path)
    for i, what in ((0, "floating-point pixels (mode F)"), (1, "32-bit integer pixels (mode I)")):
        with pytest.raises(EmbedscopeError) as e:
            ds.load_image(i)
        msg = _one_line(e)
        assert msg.startswith(f"cannot read image {tmp_path / ds.paths[i]}") and what in msg
        with pytest.raises(EmbedscopeError, match="no known 0-255 range"):
            load_thumbnails([ds.paths[i]], dataset="imagefolder", root=str(tmp_path))


def test_thumbnails_of_a_decompression_bomb_are_a_one_line_error(tmp_path, monkeypatch):
    """The thumbnails read images as the data sets do: an image over twice PIL's pixel limit was an
    uncaught DecompressionBombError there (the command's generic 'DecompressionBombError: ...' line)."""
    from embedscope.data.thumbnails import load_thumbnails

    (tmp_path / "a").mkdir()
    Image.fromarray(_pixels(1, (30, 30))).save(tmp_path / "a" / "big.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    with pytest.raises(EmbedscopeError, match="too many pixels, a possible decompression bomb"):
        load_thumbnails(["a/big.png"], dataset="imagefolder", root=str(tmp_path))


def test_imagefolder_non_ascii_names_and_the_class_split(tmp_path):
    for k, cls in enumerate(["Zebra", "Ähre", "apple", "Äpfel"]):
        _write(tmp_path / cls / f"bild_{k}_ü.jpg", k, "cmyk" if k == 1 else "rgb")
    ds = get_dataset("imagefolder", tmp_path)
    assert list(ds.class_names) == sorted(["Zebra", "Ähre", "apple", "Äpfel"])  # code-point order
    assert list(ds.split) == ["train", "train", "test", "test"]
    assert list(ds.class_names) == ["Zebra", "apple", "Ähre", "Äpfel"] and ds.paths[1] == "apple/bild_2_ü.jpg"
    assert all(ds.load_image(i).mode == "RGB" for i in range(4))


def test_image_sizes_names_an_unreadable_image_once(tmp_path):
    """properties' image_sizes (CUB's bounding-box properties): PIL's reason repeats the path in
    quotes; the message names it once."""
    from embedscope.data.properties import image_sizes
    from embedscope.errors import EmbedscopeError

    (tmp_path / "a.jpg").write_bytes(b"not an image")
    with pytest.raises(EmbedscopeError) as e:
        image_sizes(tmp_path, ["a.jpg"])
    msg = str(e.value)
    assert msg.startswith(f"cannot read image {tmp_path / 'a.jpg'}: ")
    assert msg.count("a.jpg") == 1, msg
