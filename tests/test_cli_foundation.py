import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from embedscope import store
from embedscope.cli import main
from embedscope.models import build_model, default_config, save_checkpoint

PY = sys.executable


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    torch.manual_seed(0)
    cfg = default_config("digits_cnn", embed_dim=16)
    p = tmp_path_factory.mktemp("ck") / "digits.pt"
    save_checkpoint(p, build_model(cfg), cfg)
    return p


def test_embed_info_round_trip(ckpt, tmp_path, capsys):
    out = tmp_path / "d.h5"
    assert main(["embed", str(ckpt), "--dataset", "digits", "-o", str(out), "--no-progress"]) == 0
    es = store.load(out)
    assert es.embeddings.shape == (1797, 16)
    assert (es.split == "train").sum() == 901 and set(es.labels[es.split == "train"]) == {0, 1, 2, 3, 4}
    assert set(es.labels[es.split == "test"]) == {5, 6, 7, 8, 9}
    np.testing.assert_allclose(np.linalg.norm(es.embeddings, axis=1), 1, atol=1e-5)
    assert es.attrs["dataset"] == "digits" and len(es.attrs["checkpoint_sha256"]) == 64
    assert es.attrs["checkpoint_config"]["arch"] == "digits_cnn"
    # the same images embed the same way when embedded alone
    out2 = tmp_path / "t.h5"
    assert main(["embed", str(ckpt), "--dataset", "digits", "--split", "test", "-o", str(out2), "--no-progress"]) == 0
    te = store.load(out2)
    np.testing.assert_allclose(te.embeddings, es.embeddings[es.split == "test"], atol=1e-6)
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "1797 x 16" in text and "901 images, 5 classes" in text and "digits_cnn" in text


def test_refused_overwrite(ckpt, tmp_path, capsys):
    out = tmp_path / "d.h5"
    out.write_bytes(b"precious")
    assert main(["embed", str(ckpt), "--dataset", "digits", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "already exists" in err and "--force" in err and len(err.strip().splitlines()) == 1
    assert out.read_bytes() == b"precious"
    assert main(["embed", str(ckpt), "--dataset", "digits", "-o", str(out), "--force", "--no-progress"]) == 0
    assert store.load(out).n == 1797


def test_errors_are_one_line(ckpt, tmp_path):
    def run(*args):
        return subprocess.run([PY, "-m", "embedscope", *args], capture_output=True, text=True, cwd=tmp_path)

    r = run("info", "nope.h5")
    assert r.returncode == 1 and r.stderr.strip() == "embedscope info: error: nope.h5: no such file"
    r = run("embed", str(ckpt))
    assert r.returncode == 2 and "required" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "--help" in r.stderr
    r = run("embed", str(ckpt), "--dataset", "nosuch", "-o", "x.h5")
    # an unknown --dataset is a usage error in every command (exit 2), as an unknown choice is
    assert r.returncode == 2 and "unknown data set" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run("--debug", "info", "nope.h5")
    assert r.returncode != 0 and "Traceback" in r.stderr
    r = run("info", "nope.h5", "--debug")
    assert "Traceback" in r.stderr
    r = run("--help")
    assert r.returncode == 0 and "embed" in r.stdout and "info" in r.stdout


def _ctrl_c_default():
    """In the child: SIGINT as at a terminal. A job started in the background by a shell (``make test &``,
    nohup) inherits an ignored SIGINT, and Python keeps it ignored, so Ctrl-C could not be tested there."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _signal_embed(script_text: str, ckpt, tmp_path, sig, after: float):
    """Run ``embed`` through ``script_text``, send ``sig`` ``after`` s into the first batch:
    (process, output path, stderr)."""
    script = tmp_path / "script.py"
    script.write_text(script_text)
    out = tmp_path / "out.h5"
    p = subprocess.Popen([PY, str(script), "embed", str(ckpt), "--dataset", "digits", "-o", str(out),
                          "--batch-size", "16", "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=_ctrl_c_default)
    assert p.stdout.readline().strip() == "batch"  # embedding is under way
    time.sleep(after)
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    return p, out, err


SLOW_EMBED = textwrap.dedent(
    """
    import sys, time, torch
    from embedscope.models import backbones
    orig = backbones.DigitsCNN.forward
    def slow(self, x):
        print("batch", flush=True)
        time.sleep(0.3)
        return orig(self, x)
    backbones.DigitsCNN.forward = slow
    from embedscope.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM])
def test_killed_embed_leaves_no_output(ckpt, tmp_path, sig):
    p, out, err = _signal_embed(SLOW_EMBED, ckpt, tmp_path, sig, after=0.5)
    assert p.returncode != 0
    assert not out.exists()
    if sig in (signal.SIGINT, signal.SIGTERM):
        assert ("interrupted" if sig == signal.SIGINT else "terminated") in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
        assert sorted(q.name for q in tmp_path.iterdir()) == ["script.py"]  # no temporary file either


def test_atomic_output_on_error(tmp_path):
    from embedscope.fileio import atomic_output

    target = tmp_path / "r.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_output(target, force=True) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert [q.name for q in tmp_path.iterdir()] == ["r.txt"]


def test_checkpoint_dataset_mismatch(tmp_path, capsys):
    cfg = default_config("resnet18", embed_dim=8)
    p = tmp_path / "r18.pt"
    save_checkpoint(p, build_model(cfg), cfg)
    assert main(["embed", str(p), "--dataset", "digits", "-o", str(tmp_path / "x.h5")]) == 1
    assert "digits_cnn" in capsys.readouterr().err


def test_broken_pipe_exits_quietly(ckpt, tmp_path):
    """`embedscope info f.h5 | head -1` (issue 17): no BrokenPipeError message."""
    out = tmp_path / "d.h5"
    assert main(["embed", str(ckpt), "--dataset", "digits", "--split", "test", "-o", str(out), "--no-progress"]) == 0
    p = subprocess.Popen([PY, "-m", "embedscope", "info", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader went away before the first line
    err = p.stderr.read().decode()
    p.wait(timeout=60)
    assert p.returncode in (0, 141) and err == ""


def test_unknown_flag_points_to_the_sub_command_help(tmp_path):
    r = subprocess.run([PY, "-m", "embedscope", "info", "x.h5", "--frobnicate"], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "--frobnicate" in r.stderr and "'embedscope info --help'" in r.stderr


def test_strings_from_files_are_escaped(ckpt, tmp_path, capsys):
    """A file's data set name with a terminal escape must not reach the terminal raw."""
    import h5py

    out = tmp_path / "d.h5"
    assert main(["embed", str(ckpt), "--dataset", "digits", "--split", "test", "-o", str(out), "--no-progress"]) == 0
    with h5py.File(out, "a") as f:
        f.attrs["dataset"] = "evil\x1b[2J\x1b[1;1Hforged\nline"
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "\x1b" not in text and "evil\\x1b[2J\\x1b[1;1Hforged\\nline" in text


def test_safe_text():
    from embedscope.text import safe

    assert safe("plain é ü 日本") == "plain é ü 日本"
    assert safe("a\x1b[31mb") == "a\\x1b[31mb"
    assert safe("x\ny\tz\r") == "x\\ny\\tz\\r"
    assert safe("\u202eevil") == "\\u202eevil"  # a bidirectional override
    assert safe(b"caf\xe9".decode("utf-8", "surrogateescape")) == "caf\\xe9"  # an undecodable byte of a path
    assert safe("\x9b") == "\\x9b"  # C1 control


def test_progress_is_one_line_per_phase_without_a_terminal(capsys):
    import io

    from embedscope.progress import progress_bar

    buf = io.StringIO()
    for _ in progress_bar(range(50), desc="embed digits/test", unit="batch", stream=buf):
        pass
    lines = buf.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("embed digits/test: 50/50 batches in ")
    buf = io.StringIO()
    for _ in progress_bar(range(50), desc="x", stream=buf, lines=False):
        pass
    for _ in progress_bar(range(50), desc="x", stream=buf, enabled=False):
        pass
    assert buf.getvalue() == ""


def test_embed_log_has_no_redraws(ckpt, tmp_path):
    """stderr to a file: one line for the embedding phase, no carriage-return redraws."""
    out = tmp_path / "d.h5"
    r = subprocess.run([PY, "-m", "embedscope", "embed", str(ckpt), "--dataset", "digits", "--batch-size", "64",
                        "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("embed digits/all: 29/29 batches in ")


def _tmpfs(folder, options):
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    return folder


def _umount(folder):
    if subprocess.run(["umount", str(folder)], capture_output=True).returncode:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_embed_onto_a_full_disk_is_one_line(ckpt, tmp_path):
    """Issue 17: 56 lines of h5py traceback, then a segmentation fault."""
    d = _tmpfs(tmp_path / "tiny", "size=64k")  # 1797 x 16 float32 = 115 kB do not fit
    try:
        out = d / "digits.h5"
        r = subprocess.run([PY, "-m", "embedscope", "embed", str(ckpt), "--dataset", "digits", "-o", str(out),
                            "--no-progress"], capture_output=True, text=True)
        assert r.returncode == 1, r.stderr
        assert r.stderr.strip() == f"embedscope embed: error: {out}: no space left on device"
        assert list(d.iterdir()) == []
    finally:
        _umount(d)


def test_embed_into_a_read_only_folder_fails_before_the_work(ckpt, tmp_path, capsys, monkeypatch):
    d = tmp_path / "ro"
    if os.geteuid() == 0:
        _tmpfs(d, "ro,size=64k")
    else:
        d.mkdir()
        d.chmod(0o555)
    try:
        import embedscope.models as models

        def no_work(*a, **k):
            raise AssertionError("the checkpoint was loaded before the output folder was checked")

        monkeypatch.setattr(models, "load_checkpoint", no_work)
        out = d / "sub" / "digits.h5"
        assert main(["embed", str(ckpt), "--dataset", "digits", "-o", str(out), "--no-progress"]) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(out) in err and "not writable" in err and ".tmp" not in err
    finally:
        if os.geteuid() == 0:
            _umount(d)
        else:
            d.chmod(0o755)


def test_outputs_are_readable_by_colleagues(ckpt, tmp_path):
    out = tmp_path / "d.h5"
    old = os.umask(0o022)
    try:
        assert main(["embed", str(ckpt), "--dataset", "digits", "--split", "test", "-o", str(out),
                     "--no-progress"]) == 0
    finally:
        os.umask(old)
    assert (out.stat().st_mode & 0o777) == 0o644  # was 0600 whatever the umask


def test_error_is_not_glued_to_an_unfinished_progress_bar(monkeypatch, capsys):
    """Issue 17: an error printed while a bar was drawn continued the bar's line."""
    import sys as _sys

    from tqdm.auto import tqdm

    import embedscope.cli.info as info
    from embedscope.errors import EmbedscopeError

    def failing(args):
        bar = tqdm(total=10, file=_sys.stderr, leave=False, desc="work")
        bar.update(3)
        raise EmbedscopeError("boom")

    monkeypatch.setattr(info, "run", failing)
    assert main(["info", "x.h5"]) == 1
    err = capsys.readouterr().err
    # what the terminal shows last: the text after the last carriage return of the final line
    assert err.rstrip("\n").split("\n")[-1].split("\r")[-1] == "embedscope info: error: boom"


def test_unexpected_worker_error_shows_the_workers_own_message(monkeypatch, capsys):
    import embedscope.cli.info as info

    msg = ("Caught ZeroDivisionError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
           '  File "x.py", line 1, in f\nZeroDivisionError: division by zero\n')

    def failing(args):
        raise ZeroDivisionError(msg)  # as torch re-raises a worker's exception

    monkeypatch.setattr(info, "run", failing)
    assert main(["info", "x.h5"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ZeroDivisionError: division by zero" in err and "Traceback" not in err


SWALLOWING_EMBED = textwrap.dedent(
    """
    import sys, time, torch
    from embedscope.models import backbones
    orig = backbones.DigitsCNN.forward
    def slow(self, x):
        print("batch", flush=True)
        try:  # a library that swallows everything, Ctrl-C included
            time.sleep(0.3)
        except BaseException:
            pass
        return orig(self, x)
    backbones.DigitsCNN.forward = slow
    from embedscope.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_swallowed_by_a_library_still_stops(ckpt, tmp_path, sig):
    """A KeyboardInterrupt / SIGTERM exception lost in a bare except is raised again at the next step."""
    p, out, err = _signal_embed(SWALLOWING_EMBED, ckpt, tmp_path, sig, after=0.1)  # inside the swallowing sleep
    assert p.returncode == (130 if sig == signal.SIGINT else 128 + sig)
    assert not out.exists()
    assert ("interrupted" if sig == signal.SIGINT else "terminated") in err and "Traceback" not in err


def test_main_forgets_handled_signals():
    from embedscope import progress

    progress.note_signal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        progress.check_signals()
    assert main(["info", "/nonexistent.h5"]) == 1  # main starts and ends with no recorded signal
    progress.check_signals()


def test_an_abbreviated_option_is_refused(capsys):
    """argparse took '--table' for '--table-csv' (any unique prefix): a typo or an abbreviation in a
    script ran, and would change meaning once another option shares the prefix."""
    from embedscope.cli import main

    with pytest.raises(SystemExit) as e:
        main(["spectrum", "x.h5", "--table", "t.csv", "-o", "s.png"])
    assert e.value.code == 2 and "unrecognized arguments: --table t.csv" in capsys.readouterr().err
