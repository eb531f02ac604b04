"""Audit 27: the command line's standard output, help texts, the format of --weights, a shapes folder's size.

1. A write to standard output that fails while a command runs (``> /dev/full``; a reader gone away) was
   "OSError: [Errno 28] ..." as an unexpected failure, or, where the output was buffered to the end, the
   files the command had written were taken back. Now the command finishes its files and keeps them; a
   full or failing stdout is one line naming standard output (exit 1), a closed pipe is quiet (141), and
   Python prints no "Exception ignored" at exit. Real processes write to /dev/full and to a closed pipe,
   with Python's stdout buffered and unbuffered (``PYTHONUNBUFFERED``: where a print fails depends on it).
   A resumable command (train, train-grid, study: it prints as it goes and keeps its finished parts) stops
   at the first failed write instead of running on with nothing shown.
2. Help texts say "(default: X)", and X is the option's default.
3. ``--weights`` records the format it read ("backbone weights from a timm training checkpoint
   (state_dict_ema)"), not "ImageNet backbone weights" whatever the file was.
4. A make-shapes folder without shapes.json: its first image's header is read once (train and embed asked
   twice), again when the image changes.
5. Error lines of bad inputs: an OSError naming a file is "FILE: Permission denied", a missing study folder
   is named as missing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from cli_run import one_error_line, run_cli

from embedscope.cli import main

PY = sys.executable
FULL = os.path.exists("/dev/full")


def _emb(path, n=60, d=8, seed=0):
    from embedscope import store

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    es = store.EmbeddingSet.from_arrays(X, np.arange(n) % 6, split="test", paths=[f"img/{i}.png" for i in range(n)])
    store.save(path, es)
    return path


@pytest.fixture(scope="module")
def emb(tmp_path_factory):
    return _emb(tmp_path_factory.mktemp("e") / "e.h5")


def _env(buffered: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["MPLBACKEND"] = "Agg"
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


def _cli(args, stdout, *, buffered, cwd=None):
    return subprocess.run([PY, "-m", "embedscope", *map(str, args)], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=300, env=_env(buffered), cwd=cwd)


def _closed_pipe():
    """The write end of a pipe whose reader is gone already: every write to it fails with EPIPE."""
    r, w = os.pipe()
    os.close(r)
    return w


FULL_LINE = "cannot write to standard output (No space left on device)"


# ------------------------------------------------------------------------ 1. a full stdout, a closed pipe
@pytest.mark.skipif(not FULL, reason="needs /dev/full")
@pytest.mark.parametrize("buffered", [False, True])
def test_a_full_stdout_is_one_line_naming_it(emb, buffered):
    with open("/dev/full", "w") as full:
        r = _cli(["info", emb], full, buffered=buffered)
    # was (unbuffered) "embedscope info: error: OSError: [Errno 28] No space left on device (run with --debug ...)"
    assert r.returncode == 1 and r.stderr == f"embedscope info: error: {FULL_LINE}\n", r.stderr


@pytest.mark.skipif(not FULL, reason="needs /dev/full")
@pytest.mark.parametrize("buffered", [False, True])
def test_a_full_stdout_keeps_the_files_written(emb, tmp_path, buffered):
    want = tmp_path / "want.json"
    r = _cli(["evaluate", emb, "--json", want, "--no-progress"], subprocess.DEVNULL, buffered=buffered)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "r.json"
    with open("/dev/full", "w") as full:
        r = _cli(["evaluate", emb, "--json", out, "--csv", tmp_path / "r.csv", "--no-progress"], full,
                 buffered=buffered)
    assert r.returncode == 1
    assert r.stderr == f"embedscope evaluate: error: {FULL_LINE}; the output files were written and are kept\n"
    # the files are complete: the same results as a run whose stdout could be written (buffered, they were
    # taken back by the failed flush at the end; unbuffered, the command stopped at its table before them)
    a, b = json.loads(out.read_text()), json.loads(want.read_text())
    assert a["values"] == b["values"]
    assert (tmp_path / "r.csv").read_text().startswith("measure,value,model")


@pytest.mark.parametrize("buffered", [False, True])
def test_a_closed_pipe_is_quiet_and_keeps_the_files(emb, tmp_path, buffered):
    w = _closed_pipe()
    try:
        r = _cli(["evaluate", emb, "--json", tmp_path / "r.json", "--no-progress"], w, buffered=buffered)
    finally:
        os.close(w)
    assert r.returncode == 141 and r.stderr == "", r.stderr  # no traceback, no "Exception ignored"
    assert "values" in json.loads((tmp_path / "r.json").read_text())


@pytest.mark.parametrize("args", [["info"], ["geometry", "--split", "test"]])
def test_a_closed_pipe_of_a_table(emb, args):
    w = _closed_pipe()
    try:
        r = _cli([args[0], emb, *args[1:]], w, buffered=False)
    finally:
        os.close(w)
    assert r.returncode == 141 and r.stderr == "", r.stderr


@pytest.mark.skipif(not FULL, reason="needs /dev/full")
def test_a_failed_command_with_output_pending_prints_no_exception_at_exit(emb):
    """A command that printed (buffered) and then failed, its stdout full: its error line only (was: then
    Python's "Exception ignored in: <_io.TextIOWrapper name='<stdout>' ...> OSError" at exit)."""
    code = ("import sys\n"
            "import embedscope.cli.info as info\n"
            "from embedscope.cli import main\n"
            "from embedscope.errors import EmbedscopeError\n"
            "def run(args):\n"
            "    print('a partial table')\n"
            "    raise EmbedscopeError('boom')\n"
            "info.run = run\n"
            f"sys.exit(main(['info', {str(emb)!r}]))\n")
    with open("/dev/full", "w") as full:
        r = subprocess.run([PY, "-c", code], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
                           env=_env(buffered=True))
    assert r.returncode == 1 and r.stderr == "embedscope info: error: boom\n", r.stderr


@pytest.mark.skipif(not FULL, reason="needs /dev/full")
def test_a_resumable_command_stops_at_a_full_stdout(tmp_path):
    """train prints as it goes and keeps its finished epochs: it stops at the first failed line (one line
    naming standard output), rather than training on for hours with nothing shown."""
    with open("/dev/full", "w") as full:
        r = _cli(["train", "--dataset", "digits", "--epochs", "50", "--embed-dim", "4", "--no-progress",
                  "-o", tmp_path / "a.pt"], full, buffered=True)
    assert r.returncode == 1 and r.stderr == f"embedscope train: error: {FULL_LINE}\n", r.stderr
    assert not (tmp_path / "a.pt").exists()  # (stopped: 50 epochs were not trained)


def test_a_resumable_command_stops_at_a_closed_pipe(tmp_path):
    w = _closed_pipe()
    try:
        r = _cli(["train", "--dataset", "digits", "--epochs", "50", "--embed-dim", "4", "--no-progress",
                  "-o", tmp_path / "a.pt"], w, buffered=True)
    finally:
        os.close(w)
    assert r.returncode == 141 and r.stderr == "", r.stderr
    assert not (tmp_path / "a.pt").exists()


class _Failing:
    """A stdout whose writes fail as a full disk's do."""

    def __init__(self, err=OSError(28, "No space left on device")):
        self.err, self.writes = err, 0

    def write(self, s):
        self.writes += 1
        raise self.err

    def flush(self):
        pass


def test_the_command_finishes_after_its_stdout_failed(emb, tmp_path, monkeypatch, capsys):
    fake = _Failing()
    monkeypatch.setattr(sys, "stdout", fake)
    rc = main(["evaluate", str(emb), "--json", str(tmp_path / "r.json"), "--per-class", str(tmp_path / "c.csv"),
               "--no-progress"])
    err = capsys.readouterr().err
    assert sys.stdout is fake  # given back
    assert rc == 1 and one_error_line(err, "evaluate").endswith(f"{FULL_LINE}; the output files were written "
                                                                "and are kept")
    assert fake.writes == 1  # the rest of the output dropped, not tried line by line
    assert (tmp_path / "r.json").exists() and (tmp_path / "c.csv").exists()  # every output, complete


def test_a_broken_pipe_in_process_is_141_and_keeps_the_files(emb, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", _Failing(BrokenPipeError(32, "Broken pipe")))
    rc = main(["evaluate", str(emb), "--json", str(tmp_path / "r.json"), "--no-progress"])
    assert rc == 141 and capsys.readouterr().err == ""
    assert (tmp_path / "r.json").exists()


def test_a_stdout_that_works_is_unchanged(emb, tmp_path):
    rc, out, err = run_cli(["info", emb])
    assert rc == 0 and "N" in out and err == ""


# ------------------------------------------------------------------------ 2. "(default: X)" in the help
MINE = ["toy", "add-properties", "make-shapes", "info", "evaluate", "neighbours", "geometry", "spectrum",
        "saliency", "saliency-agreement", "tsne", "yoke", "scatter", "study", "report"]


def _actions(command):
    from embedscope.cli import build_parser

    return build_parser().command_parsers[command]._actions


@pytest.mark.parametrize("command", MINE)
def test_help_says_default_with_a_colon_and_the_real_default(command):
    for a in _actions(command):
        text = " ".join((a.help or "").split())
        assert not re.search(r"\(default [^:]", text), (a.option_strings, text)  # was "(default 5)", ...
        m = re.search(r"\(default: (-?[0-9][0-9_.e+-]*)[);,]", text)
        if m and a.default is not None and not isinstance(a.default, (list, bool)):
            assert float(m.group(1)) == float(a.default), (a.option_strings, text, a.default)


def test_num_workers_and_measure_options_help():
    texts = {a.option_strings[0]: " ".join(a.help.split()) for a in _actions("geometry") if a.option_strings}
    assert "(default: 1, Roth's footnote and rho_spectrum@2; 0: rho_spectrum@1)" in texts["--exclude-top"]
    assert texts["--max-pairs"].endswith("(default: 200000)")
    texts = {a.option_strings[0]: a.help for a in _actions("embed") if a.option_strings}
    assert texts["--num-workers"] == "data loader worker processes (default: 0)"


# ------------------------------------------------------------------------ 3. the format --weights read
def _mobilenet_sd():
    import torch
    from torchvision.models import mobilenet_v3_small

    torch.manual_seed(0)
    return mobilenet_v3_small(weights=None).state_dict()


@pytest.fixture(scope="module")
def weight_files(tmp_path_factory):
    import argparse

    import torch
    from safetensors.torch import save_file

    d = tmp_path_factory.mktemp("w")
    sd = _mobilenet_sd()
    ema = {k: v + 1 if v.is_floating_point() else v for k, v in sd.items()}
    torch.save(sd, d / "tv.pth")
    save_file(sd, str(d / "model.safetensors"))
    # as timm's train.py (CheckpointSaver._save) writes it
    torch.save({"epoch": 3, "arch": "mobilenet_v3_small", "optimizer": {}, "version": 2, "state_dict": sd,
                "state_dict_ema": ema, "args": argparse.Namespace(model="mobilenet_v3_small"), "metric": 0.5},
               d / "model_best.pth.tar")
    torch.save({"epoch": 3, "state_dict": sd}, d / "other.pth")
    return d, sd, ema


@pytest.mark.parametrize("name, ema, want", [
    ("tv.pth", False, "backbone weights from a torchvision state dict"),
    ("model.safetensors", False, "backbone weights from a torchvision state dict (safetensors)"),
    ("model_best.pth.tar", False, "backbone weights from a timm training checkpoint (state_dict)"),
    ("model_best.pth.tar", True, "backbone weights from a timm training checkpoint (state_dict_ema)"),
    ("other.pth", False, "backbone weights from a training checkpoint (state_dict)"),
])
def test_weights_format_is_the_format_read(weight_files, name, ema, want):
    import torch

    from embedscope.models import load_model

    d, sd, ema_sd = weight_files
    model, cfg, info = load_model(arch="mobilenet_v3_small", weights=d / name, head="none", ema=ema)
    assert info["format"] == want  # was "ImageNet backbone weights" for each
    got = model.backbone.state_dict()
    src = ema_sd if ema else sd
    k = "features.0.0.weight"
    assert torch.equal(got[k], src[k])  # (the weights the label names were the ones loaded)


def test_weights_from_an_embedscope_checkpoint(tmp_path):
    import torch

    from embedscope.models import build_model, default_config, load_model, save_checkpoint

    torch.manual_seed(0)
    cfg = default_config("digits_cnn", embed_dim=8)
    net = build_model(cfg)
    save_checkpoint(tmp_path / "c.pt", net, cfg)
    model, _, info = load_model(arch="digits_cnn", weights=tmp_path / "c.pt", head="none")
    assert info["format"] == "backbone weights from an embedscope checkpoint (state_dict, its backbone)"
    for k, v in net.backbone.state_dict().items():
        assert torch.equal(model.backbone.state_dict()[k], v)
    torch.save(net.backbone.state_dict(), tmp_path / "b.pt")  # a model of embedscope's own: no layout named
    assert load_model(arch="digits_cnn", weights=tmp_path / "b.pt")[2]["format"] == "backbone weights from a state dict"


def test_info_shows_the_weights_format_of_an_embedding(tmp_path):
    """embed --arch digits_cnn --weights <a timm training checkpoint> --ema, then info."""
    import argparse

    import torch

    from embedscope.models.backbones import EmbeddingModel

    torch.manual_seed(0)
    sd = EmbeddingModel("digits_cnn", 8).backbone.state_dict()
    f = tmp_path / "last.pth.tar"
    torch.save({"epoch": 0, "arch": "digits_cnn", "optimizer": {}, "version": 2, "state_dict": sd,
                "state_dict_ema": sd, "args": argparse.Namespace()}, f)
    out = tmp_path / "e.h5"
    rc, _, err = run_cli(["embed", "--arch", "digits_cnn", "--weights", f, "--ema", "--dataset", "digits",
                          "--split", "test", "-o", out, "--no-progress"])
    assert rc == 0, err
    rc, text, _ = run_cli(["info", out])
    assert rc == 0 and "backbone weights from a timm training checkpoint (state_dict_ema)" in text
    assert "ImageNet" not in text


# ------------------------------------------------------------------------ 4. the first image's header, once
@pytest.fixture
def shapes16(tmp_path):
    d = tmp_path / "s"
    rc, _, err = run_cli(["make-shapes", "-o", d, "--n-images", "48", "--size", "16", "--no-progress"])
    assert rc == 0, err
    (d / "shapes.json").unlink()
    return d


@pytest.fixture
def header_reads(monkeypatch):
    """The images whose header PIL opened (every Image.open), the shapes module's cache emptied."""
    import PIL.Image

    from embedscope.data import shapes

    monkeypatch.setattr(shapes, "_HEADER_SIZES", {}, raising=False)
    seen, real = [], PIL.Image.open

    def spy(fp, *a, **k):
        seen.append(os.path.basename(str(fp)))
        return real(fp, *a, **k)

    monkeypatch.setattr(PIL.Image, "open", spy)
    return seen


def test_the_first_image_header_is_read_once(shapes16, header_reads):
    from embedscope.data.shapes import load_shapes, rendered_size
    from embedscope.errors import EmbedscopeWarning

    with pytest.warns(EmbedscopeWarning):
        assert rendered_size(shapes16) == 16
    ds = load_shapes(shapes16)
    assert ds.info["generation"]["size"] == 16
    assert header_reads.count("000000.png") == 1  # was 2: train and embed call both


def test_train_reads_the_header_once(shapes16, header_reads, tmp_path):
    rc, _, err = run_cli(["train", "--dataset", "shapes", "--root", shapes16, "--epochs", "0", "--eval-every", "0",
                          "--embed-dim", "4", "--batch-size", "8", "--no-progress", "-o", tmp_path / "a.pt"])
    assert rc == 0, err
    assert header_reads.count("000000.png") == 1


def test_a_changed_first_image_is_read_again(shapes16, header_reads):
    from PIL import Image

    from embedscope.data.shapes import folder_size
    from embedscope.errors import EmbedscopeError

    assert folder_size(shapes16)[0] == 16
    assert folder_size(shapes16)[0] == 16
    assert header_reads.count("000000.png") == 1
    f = shapes16 / "images" / "000000.png"
    Image.new("RGB", (20, 24)).save(f)  # another image in its place: not square
    with pytest.raises(EmbedscopeError, match=r"is 20x24 px, not square"):
        folder_size(shapes16)
    assert header_reads.count("000000.png") == 2  # read again (the save above opened none: Image.new)


# ------------------------------------------------------------------------ 5. error lines of bad inputs
def test_an_os_error_naming_a_file_is_the_unix_line(monkeypatch, tmp_path):
    import embedscope.cli.info as info

    def run(args):
        raise PermissionError(13, "Permission denied", "runs\x1b[2J/grid.csv")

    monkeypatch.setattr(info, "run", run)
    rc, out, err = run_cli(["info", tmp_path / "x.h5"])
    # was "PermissionError: [Errno 13] Permission denied: 'runs\\x1b[2J/grid.csv' (run with --debug ...)"
    assert rc == 1 and err == "embedscope info: error: runs\\x1b[2J/grid.csv: Permission denied\n"


def test_an_os_error_without_a_file_stays_an_unexpected_failure(monkeypatch, tmp_path):
    import embedscope.cli.info as info

    def run(args):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(info, "run", run)
    rc, _, err = run_cli(["info", tmp_path / "x.h5"])
    assert rc == 1 and one_error_line(err, "info").endswith("OSError: [Errno 5] Input/output error (run with "
                                                            "--debug for the traceback)")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any folder")
def test_an_unreadable_study_folder(tmp_path):
    d = tmp_path / "st"
    d.mkdir()
    d.chmod(0)
    try:
        rc, _, err = run_cli(["report", d, "-o", tmp_path / "r.html"])
    finally:
        d.chmod(0o755)
    assert rc == 1 and one_error_line(err, "report").endswith("Permission denied")


def test_report_of_a_missing_folder(tmp_path):
    rc, _, err = run_cli(["report", tmp_path / "nope", "-o", tmp_path / "r.html"])
    # was "not a finished study folder (no study.json; run 'embedscope study' first)"
    assert rc == 1 and one_error_line(err, "report").endswith("nope: no such folder (a study folder made by "
                                                              "'embedscope study')")
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("content, want", [
    (b"", "not a readable HDF5 file: the file is empty (expected an embedding file (.h5))"),
    (b"hello\n", "not a readable HDF5 file: no HDF5 signature (expected an embedding file (.h5))"),
])
def test_an_empty_or_text_file_given_as_hdf5(tmp_path, content, want):
    f = tmp_path / "x.h5"
    f.write_bytes(content)
    for command in ("info", "evaluate", "geometry"):
        rc, _, err = run_cli([command, f])
        assert rc == 1 and one_error_line(err, command).endswith(f"x.h5: {want}")  # was "(OSError)"


def test_a_truncated_hdf5_file(emb, tmp_path):
    f = tmp_path / "t.h5"
    f.write_bytes(emb.read_bytes()[:3000])
    rc, _, err = run_cli(["info", f])
    assert rc == 1 and "t.h5: not a readable HDF5 file: damaged or truncated (" in one_error_line(err, "info")


def test_a_folder_given_as_maps_or_table(emb, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    rc, _, err = run_cli(["saliency-agreement", d, emb])
    assert rc == 1 and one_error_line(err, "saliency-agreement").endswith("d is a directory, expected a "
                                                                          "saliency-maps file (.h5)")
    rc, _, err = run_cli(["add-properties", emb, d])  # was "d: cannot be read as a table (IsADirectoryError)"
    assert rc == 1 and one_error_line(err, "add-properties").endswith("d is a directory, expected a table "
                                                                      "(CSV, TSV or Parquet)")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file(emb, tmp_path):
    f = tmp_path / "u.h5"
    f.write_bytes(emb.read_bytes())
    f.chmod(0)
    try:
        for args, command in ((["info", f], "info"), (["add-properties", emb, f], "add-properties")):
            rc, _, err = run_cli(args)
            # was "u.h5: not a readable HDF5 file (PermissionError)", "... cannot be read as a table (PermissionError)"
            assert rc == 1 and one_error_line(err, command).endswith("u.h5: cannot read (Permission denied)")
    finally:
        f.chmod(0o644)


def test_an_hdf5_file_given_as_the_checkpoint_is_named(emb, tmp_path):
    """`embed x.h5` / `saliency x.h5` said "neither torch.save's zip format nor its legacy format";
    the file's kind is named (an embedding file, a maps file, another HDF5 file)."""
    import h5py

    for command in (["embed", emb, "--dataset", "digits", "-o", tmp_path / "o.h5"],
                    ["saliency", emb, "--dataset", "digits", "-o", tmp_path / "m.h5"]):
        rc, _, err = run_cli(command)
        line = one_error_line(err, command[0])
        assert rc == 1 and "not a PyTorch checkpoint but an embedding file (from 'embedscope embed'" in line
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = np.zeros(3)
    rc, _, err = run_cli(["embed", other, "--dataset", "digits", "-o", tmp_path / "o.h5"])
    assert rc == 1 and one_error_line(err, "embed").endswith("other.h5: not a PyTorch checkpoint but an HDF5 file; "
                                                             "this command reads a checkpoint (from 'embedscope "
                                                             "train' or torch.save)")
    assert not (tmp_path / "o.h5").exists()
