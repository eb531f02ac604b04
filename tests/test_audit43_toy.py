"""Audit 43 (I): the embed audit's leftovers, then a fresh user's pass over ``toy``, ``make-shapes`` and the
notebooks.

Bugs found here: a CUB copy whose classes.txt lists classes without images was embedded with no test
rows without a word (``evaluate`` said only later that there were no 'test' rows); ``embed --amp bf16``
on the CPU said its float32 note before a later refusal; a signed 16-bit TIFF (raw mode ``I;16S``,
opened by PIL as mode ``I``) was refused as "32-bit integer pixels"; ``embed --help`` showed
``--train-classes TRAIN_CLASSES`` and ``--batch-size BATCH_SIZE`` where ``train --help`` shows ``N`` and ``B``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_audit43_embed import _cub  # (a CUB_200_2011 folder of tiny JPEGs)

from embedscope.cli import main
from embedscope.errors import EmbedscopeError

# ------------------------------------------------------------------------------- classes listed without images


def test_classes_listed_without_images_are_said_when_the_file_is_written(tmp_path):
    """Regression: classes.txt listing 4 classes, images of the first 2 only: the split (first half of the
    listed classes) put every image in 'train', and `embed --split all` wrote a file with no test rows
    without a word; `--split test` said only "the 'test' split is empty"."""
    from embedscope import store
    from embedscope.embed import embed_to_file

    top = _cub(tmp_path / "cub", with_images=2)  # (classes.txt lists 4)
    said: list[str] = []
    out = embed_to_file(None, "cub200", tmp_path / "x.h5", root=top, arch="shapes_cnn", image_size=16,
                        echo=said.append, progress=False, device="cpu")
    assert said == ["note: 2 of the 4 classes the data set lists have no images (the first: 'Bird_3'); the split "
                    "is by the listed classes: 'train' holds 4 images of 2 classes, 'test' holds none"]
    assert list(store.load(out).split) == ["train"] * 4
    with pytest.raises(EmbedscopeError) as e:
        embed_to_file(None, "cub200", tmp_path / "y.h5", root=top, arch="shapes_cnn", image_size=16,
                      split="test", progress=False, device="cpu")
    assert str(e.value) == ("cub200: the 'test' split is empty (2 of the 4 classes the data set lists have no "
                            "images (the first: 'Bird_3'); the split is by the listed classes: 'test' holds none)")
    assert not (tmp_path / "y.h5").exists()


def test_a_data_set_whose_classes_all_have_images_gets_no_note():
    from embedscope.data import get_dataset
    from embedscope.embed import empty_classes_note

    assert empty_classes_note(get_dataset("digits")) is None


# ------------------------------------------------------------------------------- --amp bf16 on the CPU


def test_amp_note_is_not_said_before_a_refusal(tmp_path, capsys):
    """Regression: `embed --amp bf16` on the CPU printed "note: --amp bf16 is CUDA's bfloat16 autocast; on cpu
    ..." and then the refusal of --image-size on the digits (the file was never written)."""
    args = ["embed", "--arch", "digits_cnn", "--dataset", "digits", "-o", str(tmp_path / "x.h5"), "--amp", "bf16",
            "--device", "cpu", "--no-progress"]
    assert main(args + ["--image-size", "8"]) == 2
    out, err = capsys.readouterr()
    assert "note:" not in out + err and "are for photos" in err
    assert not (tmp_path / "x.h5").exists()


# ------------------------------------------------------------------------------- a signed 16-bit image


def test_a_signed_16_bit_tiff_is_said_to_be_one(tmp_path):
    """Regression: a TIFF of signed 16-bit grey (SampleFormat 2; PIL opens it as mode I from raw mode I;16S)
    was refused as "32-bit integer pixels (mode I)"."""
    from embedscope.data.base import open_rgb

    a = np.array([[-5, 100], [300, 32000]], dtype="<i2")
    Image.fromarray(a.view("<u2")).save(tmp_path / "s.tif", tiffinfo={339: 2})  # 339: SampleFormat, 2 = signed
    with Image.open(tmp_path / "s.tif") as im:
        assert im.mode == "I" and np.asarray(im).min() == -5  # (as PIL reads it)
    with pytest.raises(EmbedscopeError) as e:
        open_rgb(tmp_path / "s.tif")
    assert str(e.value) == (f"cannot read image {tmp_path / 's.tif'}: signed 16-bit integer pixels (mode I, stored "
                            "as I;16S) have no known 0-255 range; save the image with 8 or 16 bits per channel "
                            "(unsigned)")
    Image.fromarray(np.arange(4, dtype=np.int32).reshape(2, 2)).save(tmp_path / "i.tif")
    with pytest.raises(EmbedscopeError, match=r": 32-bit integer pixels \(mode I\) have no known"):
        open_rgb(tmp_path / "i.tif")


# ------------------------------------------------------------------------------- embed --help


def test_embed_help_names_its_values_as_train_does(capsys):
    """Regression: `embed --help` showed --train-classes TRAIN_CLASSES and --batch-size BATCH_SIZE; `train
    --help` shows --train-classes N and --batch-size B."""
    helps = {}
    for cmd in ("embed", "train"):
        with pytest.raises(SystemExit):
            main([cmd, "--help"])
        helps[cmd] = " ".join(capsys.readouterr().out.split())
    for opt in ("--train-classes N", "--batch-size B"):
        assert opt in helps["train"] and opt in helps["embed"], opt
    assert "TRAIN_CLASSES" not in helps["embed"] and "BATCH_SIZE" not in helps["embed"]


# ------------------------------------------------------------------------------- make-shapes


def test_make_shapes_refuses_a_folder_named_shapes_json_before_rendering(tmp_path, monkeypatch):
    """Regression: a folder in the place of DIR/shapes.json was refused only once every image had been
    rendered (90 s of CPU for the default set) and written."""
    import embedscope.data.shapes as shapes

    (tmp_path / "s" / "shapes.json").mkdir(parents=True)

    def no_rendering(*a, **k):
        raise AssertionError("rendered before the outputs were checked")

    monkeypatch.setattr(shapes, "generate", no_rendering)
    with pytest.raises(EmbedscopeError, match=r"shapes\.json is a directory"):
        shapes.write_folder(tmp_path / "s", 2, 16, 0)
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["shapes.json"]


def test_make_shapes_help_says_what_no_progress_hides(capsys):
    """Regression: "hide the progress bar" (make-shapes shows two, rendering then writing; without a terminal one
    line per phase, as the other commands' --no-progress says)."""
    with pytest.raises(SystemExit):
        main(["make-shapes", "--help"])
    assert "hide the progress bars (without a terminal: one line per phase)" in " ".join(capsys.readouterr().out.split())


# ------------------------------------------------------------------------------- toy


def test_toy_p_switch_zero_note_is_not_said_before_a_refusal(tmp_path, capsys):
    """Regression: `toy --p-switch 0` into a folder holding fig6.png printed its note on the three equal rows,
    then "fig6.png already exists" (nothing was trained or written)."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "fig6.png").write_bytes(b"mine")
    assert main(["toy", "-o", str(tmp_path / "t"), "--p-switch", "0", "--n-seeds", "1", "--no-progress"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "fig6.png already exists" in err
    assert (tmp_path / "t" / "fig6.png").read_bytes() == b"mine"


def test_make_shapes_into_a_link_to_nothing_is_one_line_before_rendering(tmp_path, monkeypatch):
    """Regression: -o naming a symbolic link to a folder that does not exist (or DIR/images such a link)
    rendered the whole set, then failed with "FileExistsError: [Errno 17] File exists: 'DIR'"."""
    import embedscope.data.shapes as shapes

    (tmp_path / "s").symlink_to(tmp_path / "nowhere")

    def no_rendering(*a, **k):
        raise AssertionError("rendered before the output folder was checked")

    monkeypatch.setattr(shapes, "generate", no_rendering)
    with pytest.raises(EmbedscopeError) as e:
        shapes.write_folder(tmp_path / "s", 2, 16, 0)
    assert str(e.value) == (f"{tmp_path / 's'}: a symbolic link to {tmp_path / 'nowhere'}, which does not exist: "
                            "create the folder it names, or give another folder")
    assert not (tmp_path / "nowhere").exists()
    (tmp_path / "t").mkdir()  # the same for DIR/images
    (tmp_path / "t" / "images").symlink_to(tmp_path / "nowhere")
    with pytest.raises(EmbedscopeError, match=r"/t/images: a symbolic link to .*nowhere, which does not exist"):
        shapes.write_folder(tmp_path / "t", 2, 16, 0)


# ------------------------------------------------------------------------------- notebooks


def test_notebook_04_says_its_small_settings_as_its_parameters_set_them():
    """Regression: the closing reading said the small test settings train "two epochs on a few dozen images";
    they render 192 scenes at 32 px (about a hundred images in each split)."""
    import json
    import re

    nb = json.loads((Path(__file__).resolve().parent.parent / "notebooks" / "04_properties.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"]]
    small = re.search(r"if SMALL:\n\s+N_IMAGES, SIZE, EPOCHS, \w+, \w+ = (\d+), (\d+), (\d+),", "\n".join(cells))
    n, size, epochs = small.groups()
    said = [c for c in cells if "At the small test settings" in c]
    assert len(said) == 1 and f"{n} scenes at {size} px" in said[0] and "a few dozen" not in said[0]
    assert f"{n} scenes at {size} px, {epochs} epochs" in cells[0]
