"""Audit 26: the command line's own text, and a shapes folder without its shapes.json.

1. A value typed on the command line and named by one of argparse's messages ("invalid choice", "invalid
   int value", "ignored explicit argument") is escaped once, as every other message shows a value
   (embedscope/text.py): argparse's ``%r`` and the error line's ``safe`` showed a typed backslash four
   times. These tests count the backslashes between ``Q`` and ``Z`` of a typed ``Q\\Z`` on the error
   line of real command lines: two (``safe`` doubles a backslash once).
2. A make-shapes folder whose shapes.json is missing: its image size is read from its first image (was
   64, silently resampling every image), with a warning; an image that disagrees with shapes.json (or is
   not square) is one error line.
3. Global behaviours: spelling hints, --help on an 80-column terminal, a closed or full stdout.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import one_error_line, run_cli

from embedscope.errors import EmbedscopeError, EmbedscopeWarning

TYPED = "Q\\Z"  # Q, one backslash, Z


def _backslashes(line: str) -> list[int]:
    return [len(m.group(1)) for m in re.finditer(r"Q(\\*)Z", line)]


def _usage_error(args, command: str) -> str:
    """The one error line of a usage error (exit 2) of ``embedscope COMMAND`` ("": of ``embedscope``)."""
    rc, out, err = run_cli(args)
    assert rc == 2, (rc, err)
    assert out == ""
    if command:
        return one_error_line(err, command)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("embedscope: error: ") and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------------ 1. a typed value escaped once
@pytest.mark.parametrize("args, command, words", [
    (["evaluate", "e.h5", "--split", TYPED], "evaluate", "invalid choice: 'Q\\\\Z' (choose from 'train', "),
    (["study", "runs", "--workers", TYPED], "study", "argument --workers: invalid int value: 'Q\\\\Z'"),
    (["yoke", "a.h5", "b.h5", "-o", "y.png", "--alpha", TYPED], "yoke",
     "argument --alpha: invalid float value: 'Q\\\\Z'"),
    (["evaluate", "e.h5", f"--force={TYPED}"], "evaluate", "argument --force: ignored explicit argument 'Q\\\\Z'"),
    (["info", f"-h{TYPED}"], "info", "argument -h/--help: ignored explicit argument 'Q\\\\Z'"),
    (["evaluate", "e.h5", "--k", TYPED], "evaluate", "argument --k: expected a positive integer, got 'Q\\\\Z'"),
    (["info", "e.h5", TYPED], "info", "unrecognized arguments: Q\\\\Z"),
])
def test_a_typed_backslash_is_shown_escaped_once(args, command, words):
    line = _usage_error(args, command)
    assert _backslashes(line) == [2], line  # was [4] (argparse's %r, then the error line's escape)
    assert words in line, line


def test_an_unknown_command_with_a_backslash():
    line = _usage_error([f"tra{TYPED}in"], "")
    assert _backslashes(line) == [2] and "argument COMMAND: invalid choice: 'traQ\\\\Zin'" in line, line


def test_a_repr_with_both_quotes_is_shown_as_typed():
    # repr() of x"y'z is 'x"y\'z': the value is shown as typed, its one backslash escaped once
    line = _usage_error(["evaluate", "e.h5", "--force=x\"y'z\\w"], "evaluate")
    assert "ignored explicit argument 'x\"y'z\\\\w' (see" in line, line


@pytest.mark.parametrize("typed", ["a\x1b[2Jb", "a\nb", "a\u202eb"])
def test_control_characters_of_a_typed_value_are_still_escaped(typed):
    for args, command in ((["evaluate", "e.h5", "--split", typed], "evaluate"),
                          (["study", "runs", "--workers", typed], "study"),
                          (["evaluate", "e.h5", f"--force={typed}"], "evaluate")):
        line = _usage_error(args, command)
        shown = typed.encode("unicode_escape").decode("ascii")
        assert f"'{shown}'" in line, line
        assert "\x1b" not in line and "\u202e" not in line


# ------------------------------------------------------------------------ spelling hints
def test_a_misspelt_command_or_choice_names_the_closest():
    line = _usage_error(["evalute", "e.h5"], "")
    assert "invalid choice: 'evalute' (did you mean 'evaluate'? choose from 'train', " in line, line
    line = _usage_error(["evaluate", "e.h5", "--split", "tset"], "evaluate")
    assert "invalid choice: 'tset' (did you mean 'test'? choose from 'train', 'test'," in line, line
    line = _usage_error(["evaluate", "e.h5", "--split", "zzz"], "evaluate")
    assert "did you mean" not in line and "invalid choice: 'zzz' (choose from 'train'," in line, line


def test_a_misspelt_option_names_the_closest():
    line = _usage_error(["evaluate", "e.h5", "--spilt", "test"], "evaluate")
    assert "unrecognized arguments: --spilt test (did you mean --split?) (see 'embedscope evaluate --help')" in line
    line = _usage_error(["--debgu", "info", "e.h5"], "info")
    assert "(did you mean --debug?)" in line, line
    line = _usage_error(["info", "e.h5", "--frobnicate"], "info")
    assert "did you mean" not in line, line


# ------------------------------------------------------------------------ --help on 80 columns
COMMANDS = ["train", "train-grid", "toy", "import", "embed", "add-properties", "make-shapes", "info", "evaluate",
            "neighbours", "geometry", "spectrum", "properties", "saliency", "saliency-agreement", "tsne", "yoke",
            "scatter", "study", "report"]


def _help(args, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    rc, out, err = run_cli([*args, "--help"])
    assert rc == 0 and err == "", err
    return out


@pytest.mark.parametrize("command", COMMANDS)
def test_help_fits_an_80_column_terminal(command, monkeypatch):
    out = _help([command], monkeypatch)
    long = [ln for ln in out.splitlines() if len(ln) > 78]  # argparse's width: COLUMNS - 2
    assert long == [], long  # train's "[--loss {margin,triplet,...}]" ran to 130 characters


def test_a_long_choice_list_is_named_in_the_help(monkeypatch):
    from embedscope.cli.training_options import LOSS_CHOICES

    out = " ".join(_help(["train"], monkeypatch).split())
    assert "[--loss LOSS]" in out and "--loss LOSS training objective (default: margin); one of " in out
    assert "one of " + ", ".join(LOSS_CHOICES) in out
    # a help that names every choice already is left as it is; a short list keeps its braces
    out = " ".join(_help(["evaluate"], monkeypatch).split())
    assert "--reference-split REFERENCE_SPLIT" in out and "--metric {cosine,euclidean}" in out
    assert out.count("gallery, all") == 1  # the one list the formatter added (--reference-split's help names none)


# ------------------------------------------------------------------------ a closed or full stdout
def test_a_closed_stdout_is_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    from embedscope.cli import main

    monkeypatch.setattr(sys, "stdout", None)  # what Python sets for `embedscope ... >&-`
    rc = main(["toy", "-o", str(tmp_path / "toy")])
    err = capsys.readouterr().err
    assert rc == 1 and one_error_line(err, "toy").endswith("standard output is closed (redirect it to /dev/null "
                                                            "to discard the output)")
    assert not (tmp_path / "toy").exists()  # (was: the work done, then AttributeError and its outputs removed)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["--version"], ["--help"], ["info", "--help"]])
def test_help_and_version_into_a_full_device_fail(args):
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "embedscope", *args], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    # was exit 0 with nothing written (argparse drops a failed write)
    assert r.returncode == 1, r.stderr
    assert r.stderr == "embedscope: error: cannot write to standard output (No space left on device)\n"


def test_closed_stdout_of_a_real_process(tmp_path):
    r = subprocess.run([sys.executable, "-m", "embedscope", "info", str(tmp_path / "e.h5")], stdout=None,
                       stderr=subprocess.PIPE, text=True, timeout=120, preexec_fn=lambda: os.close(1))
    assert r.returncode == 1 and r.stderr == ("embedscope info: error: standard output is closed (redirect it "
                                              "to /dev/null to discard the output)\n"), r.stderr


# ------------------------------------------------------------------------ 2. shapes.json missing
@pytest.fixture(scope="module")
def shapes24(tmp_path_factory):
    """make-shapes at 24 px (not the default 64), then its shapes.json deleted."""
    d = tmp_path_factory.mktemp("shapes24") / "s"
    rc, out, err = run_cli(["make-shapes", "-o", d, "--n-images", "160", "--size", "24", "--no-progress"])
    assert rc == 0, err
    (d / "shapes.json").unlink()
    return d


def test_size_of_a_folder_without_shapes_json_is_its_first_images(shapes24):
    from PIL import Image

    from embedscope.data.shapes import load_shapes, rendered_size
    from embedscope.train.trainer import resolve_config

    with Image.open(shapes24 / "images" / "000000.png") as im:
        assert im.size == (24, 24)  # (the set's side, read independently)
    with pytest.warns(EmbedscopeWarning, match=r"has no valid shapes.json .*: its image size, 24 px, is read from "
                      r"its first image \(images/000000.png\)"):
        assert rendered_size(shapes24) == 24  # was None: the default 64
    with pytest.warns(EmbedscopeWarning):
        assert resolve_config({"dataset": "shapes", "root": str(shapes24)})["image_size"] == 24
    ds = load_shapes(shapes24)
    assert ds.info["generation"]["size"] == 24


def test_train_on_a_folder_without_shapes_json(shapes24, tmp_path):
    args = ["train", "--dataset", "shapes", "--root", shapes24, "--epochs", "0", "--eval-every", "0",
            "--embed-dim", "4", "--no-progress"]
    rc, out, err = run_cli([*args, "-o", tmp_path / "a.pt"])
    assert rc == 0, err
    warn = [ln for ln in err.splitlines() if ln.startswith("embedscope train: warning: ")]
    assert len(warn) == 1 and "its image size, 24 px, is read from its first image" in warn[0], err
    from embedscope.models import read_checkpoint

    assert read_checkpoint(tmp_path / "a.pt")["config"]["image_size"] == 24  # was 64
    # an explicit --image-size: the note that the set (24 px, from its first image) is resampled
    rc, out, err = run_cli([*args, "--image-size", "32", "-o", tmp_path / "b.pt"])
    assert rc == 0, err
    assert "the shapes set is rendered at 24 px and this run's input is 32 px (--image-size)" in out


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_images_that_disagree_with_shapes_json_are_an_error(shapes24, tmp_path):
    from embedscope.data.shapes import load_shapes, rendered_size

    d = _copy(shapes24, tmp_path / "s")
    (d / "shapes.json").write_text(json.dumps({"size": 32}))
    with pytest.raises(EmbedscopeError, match=r"shapes.json records images of 32 px but .*000000.png is 24x24 px"):
        rendered_size(d)
    with pytest.raises(EmbedscopeError, match="records images of 32 px"):
        load_shapes(d)
    rc, out, err = run_cli(["train", "--dataset", "shapes", "--root", d, "--epochs", "0", "-o", tmp_path / "a.pt"])
    assert rc == 1 and "records images of 32 px" in one_error_line(err, "train")
    (d / "shapes.json").write_text(json.dumps({"size": 24}))
    assert rendered_size(d) == 24  # agreeing: no warning, no error


def test_a_first_image_that_is_not_square_is_an_error(shapes24, tmp_path):
    from PIL import Image

    from embedscope.data.shapes import rendered_size

    d = _copy(shapes24, tmp_path / "s")
    Image.new("RGB", (24, 20)).save(d / "images" / "000000.png")
    with pytest.raises(EmbedscopeError, match=r"000000.png is 24x20 px, not square"):
        rendered_size(d)


def test_no_shapes_json_and_no_readable_first_image(shapes24, tmp_path):
    from embedscope.data.shapes import rendered_size

    d = _copy(shapes24, tmp_path / "s")
    (d / "images" / "000000.png").write_bytes(b"not a png")
    assert rendered_size(d) is None  # unknown (the default then; the loader names the damaged image)
    (d / "images" / "000000.png").unlink()
    assert rendered_size(d) is None
