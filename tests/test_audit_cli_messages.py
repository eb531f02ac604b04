"""What a user reads: messages that name what is wrong, one line each, and tables and legends that
show what the data holds (an audit of the command line, twentieth session)."""

import numpy as np
import pytest

from embedscope import store
from embedscope.cli import main
from embedscope.errors import EmbedscopeError
from embedscope.store import EmbeddingSet


def _set(n_cls=3, per=8, props=None, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(n_cls), per)
    X = (rng.normal(size=(n_cls, 6))[y] * 3 + rng.normal(size=(len(y), 6))).astype(np.float32)
    return EmbeddingSet.from_arrays(X, y, paths=[f"i/{k}.png" for k in range(len(y))], split="test",
                                    properties=props)


@pytest.mark.parametrize("device,match", [
    ("cuda:3", r"--device cuda:3 was asked for, but no CUDA GPU"),
    ("cuda:x", r"unknown device 'cuda:x' \(choose auto, cpu, cuda or cuda:N\)"),
    ("cuda\x1b[31m", r"unknown device 'cuda\x1b\[31m'"),  # raw: the error line escapes it (text.py)
])
def test_device_messages_name_the_device_given(device, match):
    import torch

    from embedscope.device import resolve_device

    if torch.cuda.is_available():  # pragma: no cover - the CI has no GPU
        pytest.skip("the message for a machine without CUDA")
    with pytest.raises(EmbedscopeError, match=match):
        resolve_device(device)


def test_a_checkpoint_whose_config_lacks_arch_is_not_called_a_bare_state_dict(tmp_path, capsys):
    import torch
    from conftest import save_digits_checkpoint

    ck = torch.load(save_digits_checkpoint(tmp_path / "ok.pt"), weights_only=True)
    del ck["config"]["arch"]
    torch.save(ck, tmp_path / "noarch.pt")
    torch.save({"state_dict": ck["state_dict"]}, tmp_path / "noconfig.pt")
    assert main(["embed", str(tmp_path / "noarch.pt"), "--dataset", "digits", "-o", str(tmp_path / "e.h5")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith("its config names no architecture ('arch' is missing): name it with --arch")
    assert main(["embed", str(tmp_path / "noconfig.pt"), "--dataset", "digits", "-o", str(tmp_path / "e.h5")]) == 1
    assert capsys.readouterr().err.strip().endswith("the checkpoint has no config: name the architecture with --arch")


def test_a_maps_file_given_for_embeddings_says_what_it_is(tmp_path, capsys):
    from embedscope.store.saliency import SaliencyMaps, save_maps

    m = SaliencyMaps(np.random.default_rng(0).random((4, 6, 6)).astype(np.float32),
                     np.array([f"i/{k}.png" for k in range(4)]), np.array([0, 1, 0, 1]), ["a", "b"])
    save_maps(tmp_path / "maps.h5", m)
    for cmd in (["evaluate"], ["geometry"]):  # (info summarises a maps file: test_audit27_saliency)
        assert main([*cmd, str(tmp_path / "maps.h5")]) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "a saliency-maps file (from 'embedscope saliency')" in err


def test_a_scalar_split_dataset_is_one_value_not_a_shape(tmp_path):
    import h5py

    store.save(tmp_path / "a.h5", _set())
    with h5py.File(tmp_path / "a.h5", "r+") as f:
        del f["split"]
        f["split"] = "test"
    with pytest.raises(EmbedscopeError, match="'split' is a single value, expected one per row"):
        store.load(tmp_path / "a.h5")


def test_a_missing_split_is_explained_for_the_command_line_too(tmp_path, capsys):
    es = _set()
    store.save(tmp_path / "a.h5", EmbeddingSet.from_arrays(es.embeddings, es.labels, paths=es.paths))  # no split
    assert main(["geometry", str(tmp_path / "a.h5")]) == 1
    err = capsys.readouterr().err
    assert "every row is 'test': ask for the split 'test' (--split test" in err
    assert "import --split / --split-by-class" in err


def test_per_class_title_counts_the_classes_there_are(tmp_path, capsys):
    store.save(tmp_path / "a.h5", _set(n_cls=3))
    assert main(["evaluate", str(tmp_path / "a.h5"), "--include", "P@1", "MAP@R", "--per-class",
                 str(tmp_path / "pc.csv"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "the 3 classes with the lowest MAP@R" in out and "the 5 classes" not in out


def test_a_file_property_named_class_does_not_replace_the_labels():
    from embedscope.analyses import properties
    from embedscope.analyses.image_properties import CLASS_PROPERTY

    es = _set(n_cls=4, props={"class": np.array(["in", "out"] * 16), "colour": np.array(["r", "g", "b", "k"] * 8)})
    r = properties(es)
    by = {row["property"]: row for row in (r.table if hasattr(r, "table") else r[0].table)}
    assert set(by) == {"class", CLASS_PROPERTY, "colour"}
    assert by["class"]["n_values"] == 4 and by[CLASS_PROPERTY]["n_values"] == 2


def test_tables_align_wide_characters_and_show_nan_as_asked():
    from embedscope.tables import display_width, format_table

    assert display_width("日本語") == 6 and display_width("é") == 1 and display_width("e\u0301") == 1
    text = format_table([{"class": "cat", "n": 20}, {"class": "日本語クラス", "n": 3}])
    lines = text.splitlines()
    assert [display_width(x) for x in lines[2:]] == [display_width(lines[0])] * 2  # the n column lines up
    nan_text = format_table([{"r": float("nan"), "lo": 0.5}], nan="–")
    assert "–" in nan_text and "nan" not in nan_text
    assert "nan" in format_table([{"r": float("nan")}])


def test_info_counts_in_the_singular(tmp_path, capsys):
    es = _set(n_cls=2, per=3)
    es = es.select(np.array([0, 3, 4, 1]))
    one = EmbeddingSet.from_arrays(es.embeddings, es.labels, paths=es.paths,
                                   split=np.array(["train", "train", "train", "test"]))
    store.save(tmp_path / "a.h5", one)
    assert main(["info", str(tmp_path / "a.h5")]) == 0
    out = capsys.readouterr().out
    assert "1 image, 1 class" in out and "3 images, 2 classes" in out


def test_legend_names_keep_a_line_break_visible():
    from embedscope.viz.style import short_text

    assert short_text("b\nc") == "b\\nc" != short_text("b c")
    assert short_text("x\x1b[31m") == "x\\x1b[31m"


@pytest.mark.parametrize("value", [0, -5, 2.5, "big"])
def test_a_config_image_size_that_is_no_positive_integer_names_the_file_and_field(tmp_path, capsys, value):
    import torch
    from conftest import save_digits_checkpoint

    ck = torch.load(save_digits_checkpoint(tmp_path / "ok.pt"), weights_only=True)
    ck["config"]["image_size"] = value
    torch.save(ck, tmp_path / "bad.pt")
    assert main(["embed", str(tmp_path / "bad.pt"), "--dataset", "digits", "-o", str(tmp_path / "e.h5")]) == 1
    err = capsys.readouterr().err.strip()
    assert "bad.pt: checkpoint config: 'image_size' must be an integer" in err and err.endswith(f"got {value!r}")
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "e.h5").exists()
