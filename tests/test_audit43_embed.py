"""Audit 43: a fresh user's pass over ``embedscope embed`` and the data loaders, with tiny folders in the
official layouts (CUB_200_2011, Stanford_Online_Products, cars_annos.mat + car_ims/).

Bugs found here: an image that a list names twice (CUB's images.txt under two ids, SOP's Ebay files,
cars_annos.mat) was embedded as two rows, each the other's nearest neighbour at distance 0 (R@1 a
hit, or a miss when the two lines gave different classes), and the file was refused only later by
the commands that match rows by path; ``--image-size 32 --resize 20`` was refused with the hint
"pass --image-size too", which had been passed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from embedscope.data import get_dataset
from embedscope.embed import input_size_override
from embedscope.errors import EmbedscopeError, UsageError


def _jpeg(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (6, 5, 3), dtype=np.uint8)).save(path, "JPEG")


def _cub(top: Path, extra: list[tuple[str, int]] = (), *, n_classes: int = 4, with_images: int | None = None) -> Path:
    """CUB_200_2011/ whose classes.txt lists ``n_classes`` classes, the first ``with_images`` of them (all by
    default) with 2 images each (ids 1, 2, ...), then ``extra`` lines (path, class id) under the next ids naming
    images already listed."""
    base = top / "CUB_200_2011"
    img, lab = [], []
    iid = 0
    for c in range(1, (n_classes if with_images is None else with_images) + 1):
        for k in range(2):
            iid += 1
            rel = f"{c:03d}.Bird_{c}/Bird_{c}_{k}.jpg"
            _jpeg(base / "images" / rel, iid)
            img.append(f"{iid} {rel}")
            lab.append(f"{iid} {c}")
    for rel, c in extra:
        iid += 1
        img.append(f"{iid} {rel}")
        lab.append(f"{iid} {c}")
    cls = [f"{c} {c:03d}.Bird_{c}" for c in range(1, n_classes + 1)]
    for name, lines in (("images.txt", img), ("image_class_labels.txt", lab), ("classes.txt", cls)):
        (base / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return top


def _sop(top: Path, extra_test: list[str] = ()) -> Path:
    """Stanford_Online_Products/ with classes 1-2 in Ebay_train.txt and 3-4 in Ebay_test.txt, 2 images
    each, then ``extra_test`` lines of Ebay_test.txt (class 4)."""
    base = top / "Stanford_Online_Products"
    rows: dict[str, list[str]] = {"train": [], "test": []}
    iid = 0
    for cid in range(1, 5):
        for k in range(2):
            iid += 1
            rel = f"bicycle_final/{cid}_{k}.JPG"
            _jpeg(base / rel, iid)
            rows["train" if cid <= 2 else "test"].append(f"{iid} {cid} 1 {rel}")
    for rel in extra_test:
        iid += 1
        rows["test"].append(f"{iid} 4 1 {rel}")
    for split, lines in rows.items():
        (base / f"Ebay_{split}.txt").write_text("image_id class_id super_class_id path\n" + "\n".join(lines) + "\n",
                                                encoding="utf-8")
    return top


def _cars(root: Path, rels: list[str], classes: list[int]) -> Path:
    """cars_annos.mat over ``rels`` (of classes 1..4) and the images car_ims/ holds."""
    from scipy.io import savemat

    fields = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]
    annos = np.zeros((1, len(rels)), dtype=[(f, "O") for f in fields])
    for i, (rel, c) in enumerate(zip(rels, classes)):
        if not (root / rel).exists():
            _jpeg(root / rel, i)
        one = np.array([[1]], np.uint8)
        annos[0, i] = (np.array([rel]), one, one, np.array([[4]], np.uint8), np.array([[3]], np.uint8),
                       np.array([[c]], np.uint8), np.array([[0]], np.uint8))
    cell = np.empty((1, 4), dtype=object)
    cell[0, :] = [np.array([f"Maker Model{c} Sedan 2012"]) for c in range(1, 5)]
    savemat(root / "cars_annos.mat", {"annotations": annos, "class_names": cell})
    return root


def _one_line(e) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# ------------------------------------------------------------------------------- an image listed twice


def test_cub_image_listed_twice_under_two_ids_is_refused(tmp_path):
    """Regression: images.txt naming 001.Bird_1/Bird_1_0.jpg again as image 9 of class 3 gave 9 rows, two of
    them one image with two classes (a sure R@1 miss for both, and a file `yoke` refuses by path)."""
    get_dataset("cub200", _cub(tmp_path / "ok"))  # the plain folder loads
    with pytest.raises(EmbedscopeError) as e:
        get_dataset("cub200", _cub(tmp_path / "dup", [("001.Bird_1/Bird_1_0.jpg", 3)]))
    msg = _one_line(e)
    assert msg.startswith("cub200: the image 'images/001.Bird_1/Bird_1_0.jpg' is listed twice:"), msg
    assert "listed images 1 and 9 of 9" in msg


def test_cub_same_image_spelt_two_ways_is_one_image(tmp_path):
    """``a//b.jpg`` and ``./a/b.jpg`` name the file ``a/b.jpg`` names: listed twice all the same."""
    for spelt in ("002.Bird_2//Bird_2_1.jpg", "./002.Bird_2/Bird_2_1.jpg", "002.Bird_2/./Bird_2_1.jpg"):
        with pytest.raises(EmbedscopeError) as e:
            get_dataset("cub200", _cub(tmp_path / str(len(spelt)), [(spelt, 2)]))
        msg = _one_line(e)
        assert "is listed twice (as 'images/002.Bird_2/Bird_2_1.jpg' first): listed images 4 and 9" in msg


def test_sop_image_listed_in_train_and_again_in_test_is_refused(tmp_path):
    get_dataset("sop", _sop(tmp_path / "ok"))
    with pytest.raises(EmbedscopeError) as e:
        get_dataset("sop", _sop(tmp_path / "dup", ["bicycle_final/4_1.JPG"]))
    msg = _one_line(e)
    assert msg.startswith("sop: the image 'bicycle_final/4_1.JPG' is listed twice: listed images 8 and 9 of 9 "
                          "(1 listed image(s) repeat an earlier one)"), msg


def test_cars_annos_naming_one_image_twice_is_refused(tmp_path):
    rels = [f"car_ims/{i:06d}.jpg" for i in range(1, 9)]
    ds = get_dataset("cars196", _cars(tmp_path / "ok", rels, [1, 1, 2, 2, 3, 3, 4, 4]))
    assert list(ds.paths) == rels
    (tmp_path / "dup").mkdir()
    with pytest.raises(EmbedscopeError) as e:
        get_dataset("cars196", _cars(tmp_path / "dup", rels + ["car_ims/000003.jpg"], [1, 1, 2, 2, 3, 3, 4, 4, 4]))
    assert "cars196: the image 'car_ims/000003.jpg' is listed twice: listed images 3 and 9 of 9" in _one_line(e)


def test_a_missing_image_is_still_named_first(tmp_path):
    """A list that both repeats an image and names one not on disk: the missing image is the error (with
    the hint for an archive unpacked one folder too deep, which a duplicate must not get)."""
    top = _cub(tmp_path, [("001.Bird_1/Bird_1_0.jpg", 1)])
    (top / "CUB_200_2011" / "images" / "004.Bird_4" / "Bird_4_1.jpg").unlink()
    with pytest.raises(EmbedscopeError) as e:
        get_dataset("cub200", top)
    assert "Bird_4_1.jpg is missing (1 of 9 listed images are absent)" in _one_line(e)


# ------------------------------------------------------------------------------- --resize below the crop


def test_resize_below_a_given_image_size_does_not_ask_for_image_size():
    """Regression: --image-size 32 --resize 20 said "(pass --image-size too)"; it was passed."""
    with pytest.raises(UsageError) as e:
        input_size_override({"arch": "resnet18"}, "cub200", 32, 20)
    msg = str(e.value)
    assert "--resize 20 is smaller than the crop size 32" in msg and "pass --image-size too" not in msg
    with pytest.raises(UsageError, match=r"smaller than the crop size 224: .*\(pass --image-size too\)$"):
        input_size_override({"arch": "resnet18"}, "cub200", None, 20)


# ------------------------------------------------------------------------------- lists that are not UTF-8


@pytest.mark.parametrize("dataset, name", [("cub200", "CUB_200_2011/images.txt"),
                                           ("sop", "Stanford_Online_Products/Ebay_test.txt")])
def test_a_list_saved_as_latin1_or_utf16_names_the_line(tmp_path, dataset, name):
    """Regression: was "cannot read .../images.txt (UnicodeDecodeError)", naming neither line nor cause."""
    top = (_cub if dataset == "cub200" else _sop)(tmp_path)
    f = tmp_path / name
    lines = f.read_text(encoding="utf-8").splitlines()
    lines[2] = lines[2].replace(".", "_café.", 1)
    f.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode("latin-1") + b"\r\n")  # a BOM: the offset counts it
    at = f.read_bytes().index(b"\xe9")
    with pytest.raises(EmbedscopeError) as e:
        get_dataset(dataset, top)
    assert _one_line(e) == (f"{dataset}: {f}: line 3 is not UTF-8 text (byte 0xe9 at offset {at} of the file; "
                            "Latin-1 or Windows-1252?): save it as UTF-8")
    f.write_text("\n".join(lines), encoding="utf-16")
    with pytest.raises(EmbedscopeError) as e:
        get_dataset(dataset, top)
    assert _one_line(e) == f"{dataset}: {f} is UTF-16 text: save it as UTF-8"


def test_lists_with_crlf_a_bom_and_blank_lines_read_as_plain_ones(tmp_path):
    plain = get_dataset("cub200", _cub(tmp_path / "plain"))
    top = _cub(tmp_path / "crlf")
    for name in ("images.txt", "image_class_labels.txt", "classes.txt"):
        f = top / "CUB_200_2011" / name
        f.write_bytes(b"\xef\xbb\xbf" + f.read_bytes().replace(b"\n", b"\r\n\r\n") + b"\r\n")
    ds = get_dataset("cub200", top)
    assert list(ds.paths) == list(plain.paths) and list(ds.class_names) == list(plain.class_names)
    np.testing.assert_array_equal(ds.labels, plain.labels)


# ------------------------------------------------------------------------------- a checkpoint of the other kind


def _digits_run_checkpoint(path: Path) -> Path:
    """An untrained digits_cnn checkpoint whose config says `train` made it on the digits (a loss named):
    embedded on photos it is a transfer, which a note would say."""
    import torch

    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(0)
    cfg = default_config("digits_cnn", embed_dim=4)
    save_checkpoint(path, build_model(cfg), {**cfg, "dataset": "digits", "loss": "margin"})
    return path


def test_a_digits_checkpoint_on_photos_is_refused_before_the_data_are_read(tmp_path, monkeypatch):
    """Regression: the data set was read first (`--dataset shapes` without --root rendered the default set of
    4,800 images, `sop` listed its 120,053 files), a note said the file held a transfer, then the refusal."""
    import embedscope.embed as embed

    ck = _digits_run_checkpoint(tmp_path / "d.pt")

    def no_reading(*a, **k):
        raise AssertionError("the data set was read")

    monkeypatch.setattr(embed, "get_dataset", no_reading)
    said: list[str] = []
    for dataset in ("shapes", "cub", "sop"):
        with pytest.raises(EmbedscopeError) as e:
            embed.embed_to_file(ck, dataset, tmp_path / "x.h5", echo=said.append, progress=False)
        want = "cub200" if dataset == "cub" else dataset
        assert str(e.value) == f"a digits_cnn checkpoint cannot embed the {want} images (photos need an image backbone)"
    assert said == [] and not (tmp_path / "x.h5").exists()


def test_notes_are_said_only_when_the_file_is_written(tmp_path):
    """Regression: a refusal found once the data are read (--image-size on the digits) came after the notes
    on the file it did not write (here: the checkpoint's --train-classes)."""
    import torch

    from embedscope.embed import embed_to_file
    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(0)
    cfg = default_config("digits_cnn", embed_dim=4)
    save_checkpoint(tmp_path / "d.pt", build_model(cfg), {**cfg, "dataset": "digits", "loss": "margin",
                                                           "train_classes": 4})
    said: list[str] = []
    with pytest.raises(UsageError, match="are for photos"):
        embed_to_file(tmp_path / "d.pt", "digits", tmp_path / "x.h5", image_size=8, echo=said.append, progress=False)
    assert said == []
    out = embed_to_file(tmp_path / "d.pt", "digits", tmp_path / "x.h5", echo=said.append, progress=False)
    assert out.exists() and len(said) == 1 and said[0].startswith("note: --train-classes 4, the split the checkpoint")


def test_a_device_the_machine_has_not_is_refused_before_the_model_and_the_data(tmp_path, monkeypatch):
    """Regression: `--device cuda` on a machine without a GPU was said once the checkpoint was loaded and the
    data set listed (SOP: 120,053 images checked on disk first). cuda:99: no machine here has 100 GPUs."""
    import embedscope.embed as embed
    import embedscope.models

    def no_reading(*a, **k):
        raise AssertionError("read before the device was checked")

    monkeypatch.setattr(embed, "get_dataset", no_reading)
    monkeypatch.setattr(embedscope.models, "load_model", no_reading)
    with pytest.raises(EmbedscopeError, match=r"^--device cuda:99"):
        embed.embed_to_file(None, "digits", tmp_path / "x.h5", arch="digits_cnn", device="cuda:99", progress=False)


@pytest.mark.parametrize("kw, msg", [({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
                                     ({"batch_size": 2.5}, "batch_size must be an integer, got 2.5"),
                                     ({"num_workers": -1}, "num_workers must be an integer >= 0, got -1")])
def test_python_batch_size_and_workers_are_checked_first(tmp_path, monkeypatch, kw, msg):
    """Regression: embed_to_file(batch_size=0) was range()'s bare "ValueError: range() arg 3 must not be
    zero" after the model was loaded and the data read; batch_size=2.5 embedded in batches of 2 silently."""
    import embedscope.embed as embed
    import embedscope.models

    def no_reading(*a, **k):
        raise AssertionError("read before the options were checked")

    monkeypatch.setattr(embed, "get_dataset", no_reading)
    monkeypatch.setattr(embedscope.models, "load_model", no_reading)
    with pytest.raises(EmbedscopeError) as e:
        embed.embed_to_file(None, "digits", tmp_path / "x.h5", arch="digits_cnn", progress=False, **kw)
    assert str(e.value) == msg and not (tmp_path / "x.h5").exists()
    monkeypatch.undo()
    from embedscope.data import get_dataset as real_get_dataset

    ds = real_get_dataset("digits").take(np.arange(4))
    with pytest.raises(EmbedscopeError, match=f"^{msg}$"):
        embed.embed_images(None, ds, progress=False, **kw)


@pytest.mark.parametrize("value", [2.5, True])
def test_get_dataset_train_classes_must_be_an_integer(value):
    """Regression: get_dataset("digits", train_classes=2.5) split after 2 classes, True after 1, silently."""
    with pytest.raises(EmbedscopeError, match=f"^train_classes must be an integer, got {value}$"):
        get_dataset("digits", train_classes=value)
    assert get_dataset("digits", train_classes=3.0).subset("train").num_classes == 3


def test_a_torch_device_is_a_device(tmp_path):
    """Regression: embed_images(..., device=torch.device("cpu")) (a device as torch code holds it) was
    "unknown device 'cpu' (choose auto, cpu or cuda)"."""
    import torch

    from embedscope.device import CPU, resolve_device
    from embedscope.embed import embed_images
    from embedscope.models import build_model, default_config

    assert resolve_device(torch.device("cpu")) == torch.device("cpu") and resolve_device(CPU) == torch.device("cpu")
    with pytest.raises(EmbedscopeError, match=r"^--device cuda:99"):
        resolve_device(torch.device("cuda", 99))
    torch.manual_seed(0)
    model = build_model(default_config("digits_cnn", embed_dim=4))
    ds = get_dataset("digits").take(np.arange(5))
    np.testing.assert_array_equal(embed_images(model, ds, device=torch.device("cpu"), progress=False),
                                  embed_images(model, ds, device="cpu", progress=False))


def test_a_listed_name_on_disk_in_the_other_unicode_spelling_is_said(tmp_path):
    """A list naming 'Café.jpg' composed (NFC) and the file decomposed (NFD, copied from a Mac): 'missing' of a
    file that `ls` shows was all the error said."""
    import unicodedata

    top = _sop(tmp_path)
    base = top / "Stanford_Online_Products"
    nfc = unicodedata.normalize("NFC", "bicycle_final/Café_1.JPG")
    nfd = unicodedata.normalize("NFD", nfc)
    (base / "bicycle_final" / "4_1.JPG").rename(base / nfd)
    f = base / "Ebay_test.txt"
    f.write_text(f.read_text(encoding="utf-8").replace("bicycle_final/4_1.JPG", nfc), encoding="utf-8")
    with pytest.raises(EmbedscopeError) as e:
        get_dataset("sop", top)
    assert _one_line(e) == (f"sop: image {base / nfc} is missing (1 of 8 listed images are absent; the folder "
                            "holds it with its name in another Unicode spelling, NFD (a copy made on a Mac?): "
                            "rename the files or the lists to one spelling)")
    (base / nfd).unlink()
    with pytest.raises(EmbedscopeError) as e:
        get_dataset("sop", top)
    assert _one_line(e).endswith("(1 of 8 listed images are absent)")
