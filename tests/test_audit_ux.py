"""UX audit of the command line: progress display on a terminal and in a log, outputs that are never
lost or left half-written, Ctrl-C / SIGTERM as one line (the standards of README.md)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import snapshot as _snapshot

import embedscope.fileio as fileio
from embedscope.cli import main
from embedscope.errors import Terminated

_ORIG_PUBLISH = fileio._publish


def snapshot(folder):
    """:func:`conftest.snapshot` with inodes: path -> (sha256, inode) or 'dir'."""
    return _snapshot(folder, inodes=True)


@pytest.fixture(scope="module")
def emb_file(tmp_path_factory):
    from embedscope.store import EmbeddingSet, save

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 8)).astype(np.float32)
    y = np.repeat(np.arange(6), 20)
    split = np.where(y < 3, "train", "test")
    path = tmp_path_factory.mktemp("emb") / "e.h5"
    save(path, EmbeddingSet.from_arrays(X, y, split=split))
    return path


def interrupt_publish(monkeypatch, at: int, exc=KeyboardInterrupt):
    """Raise ``exc`` when the command publishes its ``at``-th output (the earlier ones are published)."""
    calls = {"n": 0}
    orig = fileio._publish

    def publish(tmp, path, force, user):
        calls["n"] += 1
        if calls["n"] == at:
            raise exc() if exc is KeyboardInterrupt else exc
        return orig(tmp, path, force, user)

    monkeypatch.setattr(fileio, "_publish", publish)
    return calls


# ------------------------------------------------------------------ (b) all or nothing
@pytest.mark.parametrize("exc, rc", [(KeyboardInterrupt, 130), (Terminated(15), 143)])
def test_interrupted_command_takes_back_the_outputs_it_had_published(emb_file, tmp_path, monkeypatch, capsys,
                                                                     exc, rc):
    """Ctrl-C / SIGTERM between a command's outputs left the first ones (evaluate: the JSON without the
    CSV, tsne: the PNG without the PDF), and the next run refused to replace them without --force."""
    monkeypatch.chdir(tmp_path)
    calls = interrupt_publish(monkeypatch, 2, exc)
    args = ["evaluate", str(emb_file), "--json", "out/r.json", "--csv", "out/r.csv", "--no-progress"]
    assert main(args) == rc
    assert calls["n"] == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] in ("embedscope evaluate: interrupted", "embedscope evaluate: terminated")
    assert snapshot(tmp_path) == {}, "an output (or its folder, or a temporary file) was left"
    monkeypatch.setattr(fileio, "_publish", _ORIG_PUBLISH)
    assert main(args) == 0  # no "already exists" from the interrupted run
    assert sorted(snapshot(tmp_path)) == ["out", "out/r.csv", "out/r.json"]


def test_interrupted_force_run_keeps_the_earlier_outputs(emb_file, tmp_path, monkeypatch, capsys):
    """An interrupted --force run put back every file it had replaced (same bytes, same file)."""
    monkeypatch.chdir(tmp_path)
    args = ["evaluate", str(emb_file), "--json", "r.json", "--csv", "r.csv", "--parquet", "r.parquet",
            "--no-progress"]
    assert main(args) == 0
    os.chmod("r.csv", 0o600)
    before = snapshot(tmp_path)
    interrupt_publish(monkeypatch, 3)
    assert main(args + ["--split", "train", "--force"]) == 130
    assert snapshot(tmp_path) == before
    assert os.stat("r.csv").st_mode & 0o777 == 0o600


def test_output_group_keeps_outputs_when_stdout_goes_away(tmp_path):
    """A reader of stdout that went away (| head) after the results were written is not a failure of them."""
    with pytest.raises(BrokenPipeError), fileio.output_group():
        fileio.write_text(tmp_path / "a.txt", "a")
        raise BrokenPipeError
    assert (tmp_path / "a.txt").read_text() == "a"
    assert sorted(os.listdir(tmp_path)) == ["a.txt"]


def test_output_group_puts_back_a_replaced_symlink_and_removes_only_its_own_files(tmp_path):
    (tmp_path / "target.txt").write_text("old")
    os.symlink("target.txt", tmp_path / "link.txt")
    with pytest.raises(KeyboardInterrupt), fileio.output_group():
        fileio.write_text(tmp_path / "link.txt", "new", force=True)
        fileio.write_text(tmp_path / "new.txt", "x")
        raise KeyboardInterrupt
    assert os.readlink(tmp_path / "link.txt") == "target.txt"
    assert (tmp_path / "target.txt").read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["link.txt", "target.txt"]


def test_interrupted_make_shapes_leaves_no_images_nor_folders(tmp_path, monkeypatch, capsys):
    """make-shapes interrupted while writing its images left the images written so far (and its
    folders), a set without properties.csv."""
    monkeypatch.chdir(tmp_path)
    interrupt_publish(monkeypatch, 5)
    assert main(["make-shapes", "-o", "new/shapes", "--n-images", "12", "--size", "16", "--no-progress"]) == 130
    assert snapshot(tmp_path) == {}


# ------------------------------------------------------------------ (a) on a terminal
def run_on_pty(argv, *, timeout=600.0, env=None):
    """Run ``argv`` on a pseudo-terminal of 100x40 (stdin, stdout and stderr); return (raw bytes, exit code).

    All that the command wrote is read: up to the terminal's end (EIO once no process holds it; Linux
    hands over what is still buffered first), however long a loaded machine makes the command take.
    ``timeout`` only guards against a hang: past it the command is killed and the test fails, saying so;
    it never cuts the output short. (The reading used to stop at ``timeout`` and then wait one second
    more for the exit: a command that ended within that second gave exit code 0 and its output without
    the tail, the clearing of its last bar among it, so that a bar looked left on the screen.)"""
    import fcntl
    import pty
    import select
    import struct
    import subprocess
    import termios
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))  # tqdm draws nothing at 0 columns
    p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                         env={**os.environ, "TERM": "xterm", **(env or {})})
    os.close(slave)
    out = b""
    end = time.monotonic() + timeout
    idle_since = None  # (after the exit: a process it started may hold the terminal on; 5 s quiet then ends it)
    try:
        while True:
            if time.monotonic() > end:
                pytest.fail(f"{' '.join(map(str, argv))} did not end within {timeout:g} s on the terminal; "
                            f"its output so far: {out[-2000:]!r}")
            r, _, _ = select.select([master], [], [], 0.5)
            if r:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: no process holds the terminal any more, and all it held is read
                    break
                if not chunk:
                    break
                out += chunk
                idle_since = None
            elif p.poll() is not None:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > 5.0:
                    break
        rc = p.wait(timeout=max(1.0, end - time.monotonic()))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
    return out, rc


def screen(raw: bytes) -> list[str]:
    """What a terminal shows after ``raw``: carriage returns overwrite, ESC[A moves up, ESC[K erases."""
    import re

    text = raw.decode("utf-8", "replace")
    rows, row, col, i = [[]], 0, 0, 0
    while i < len(text):
        m = re.match(r"\x1b\[(\d*)([A-Za-z])", text[i:])
        if m:
            if m.group(2) == "A":
                row = max(0, row - int(m.group(1) or 1))
            elif m.group(2) == "K":
                del rows[row][col:]
            i += len(m.group(0))
            continue
        c = text[i]
        if c == "\r":
            col = 0
        elif c == "\n":
            row, col = row + 1, 0
            while len(rows) <= row:
                rows.append([])
        else:
            line = rows[row]
            line.extend(" " * (col - len(line)))
            line[col:col + 1] = [c]
            col += 1
        i += 1
    return ["".join(r).rstrip() for r in rows]


BAR_TEXT = ("%|", "it/s]", "run/s]", "?run", "█")


def test_run_on_pty_reads_to_the_end_or_fails(tmp_path):
    """A command slower than ``timeout`` (a loaded machine) was read only up to ``timeout`` and, ending
    within the second after, came back with exit code 0 and without its last output (here: the bar's
    clearing, so a cleared bar looked left on the screen). Now the whole output, or a failure."""
    import sys

    script = tmp_path / "late.py"
    script.write_text("import sys, time\n"
                      "sys.stderr.write('\\revaluate: embed test: 0%|'); sys.stderr.flush()\n"
                      "time.sleep(0.6)\n"
                      "sys.stderr.write('\\r' + ' ' * 30 + '\\r'); sys.stderr.flush()\n"
                      "print('done')\n")
    argv = [sys.executable, "-S", "-E", str(script)]  # (no site: starts in ~20 ms)
    with pytest.raises(pytest.fail.Exception, match="did not end within 0.3 s"):
        run_on_pty(argv, timeout=0.3)
    raw, rc = run_on_pty(argv)
    assert rc == 0 and raw.endswith(b"\r" + b" " * 30 + b"\rdone\r\n"), raw
    assert screen(raw) == ["done", ""]


def test_print_during_a_bar_does_not_leave_the_bar_in_the_scrollback(tmp_path):
    """train-grid --workers N prints the runs' messages while its bar over the runs is drawn: each
    message landed on the bar's line, and the bar's text stayed on screen ('train-grid: 0%|...| 0/2
    [...][1/2] digits_margin_p0_s0: training')."""
    import sys

    script = tmp_path / "bar.py"
    script.write_text(
        "from embedscope.progress import progress_bar\n"
        "bar = progress_bar(total=3, desc='train-grid', unit='run')\n"
        "bar.refresh()\n"
        "print('[1/3] first: training')\n"
        "bar.update(1); bar.refresh()\n"
        "print('second', 'message')\n"
        "bar.update(2)\n"
        "bar.close()\n"
        "print('table')\n")
    raw, rc = run_on_pty([sys.executable, str(script)])
    assert rc == 0, raw
    assert b"train-grid:" in raw  # the bar was drawn
    shown = [line for line in screen(raw) if line]
    assert shown == ["[1/3] first: training", "second message", "table"], shown
    assert raw.endswith(b"\n")


def test_evaluate_on_a_terminal_and_in_a_log(emb_file, tmp_path):
    """On a terminal: a bar, cleared before the table; in a file: one line for the phase, no \\r or ESC."""
    import subprocess
    import sys

    argv = [sys.executable, "-m", "embedscope", "evaluate", str(emb_file)]
    raw, rc = run_on_pty(argv)
    assert rc == 0, raw
    assert b"retrieval" in raw and b"%|" in raw
    shown = screen(raw)
    assert not [s for s in shown if any(b in s for b in BAR_TEXT)], shown
    assert shown[-1] == "" and "test queries" in shown[0], shown  # the table starts on the first line
    log = tmp_path / "log.txt"
    with open(log, "wb") as f:
        assert subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT).returncode == 0
    text = log.read_text()
    assert "\r" not in text and "\x1b" not in text
    assert len([line for line in text.splitlines() if line.startswith("retrieval: ")]) == 1, text


# ------------------------------------------------------------------ (d) Ctrl-C
@pytest.mark.parametrize("exc, rc, word", [(KeyboardInterrupt, 130, "interrupted"), (Terminated(15), 143, "terminated")])
def test_signal_while_the_parser_is_built_is_one_line(monkeypatch, capsys, exc, rc, word):
    """Ctrl-C in the first tenth of a second (the sub-commands' modules being imported to build the
    parser) was a KeyboardInterrupt traceback."""
    import embedscope.cli as cli

    def build_parser():
        raise exc() if exc is KeyboardInterrupt else exc

    monkeypatch.setattr(cli, "build_parser", build_parser)
    assert main(["report", "x", "-o", "y.html"]) == rc
    assert capsys.readouterr().err == f"embedscope: {word}\n"


def _child_waits(path):
    import time

    try:
        open(path, "w").close()
        time.sleep(5)
    finally:
        with open(path, "a") as f:
            f.write("finally ran")


@pytest.mark.skipif(os.name != "posix", reason="fork")
def test_forked_child_leaves_the_signals_to_the_command(tmp_path, capfd):
    """A child forked by the command (study draws a figure in one) inherited the command line's
    handlers: Ctrl-C printed 'Process embedscope-figure: Traceback ... KeyboardInterrupt' after the
    command's 'interrupted' line, and the SIGTERM its parent ends it with a Terminated traceback."""
    import multiprocessing as mp
    import signal
    import time

    import embedscope.cli as cli

    with cli._signals_as_exceptions():
        ready = tmp_path / "ready"
        child = mp.get_context("fork").Process(target=_child_waits, args=(str(ready),), daemon=True)
        child.start()
        while not ready.exists():
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGINT)  # the parent handles Ctrl-C; the child carries on
        time.sleep(0.3)
        assert child.is_alive()
        child.terminate()  # as multiprocessing ends daemonic children when the parent exits
        child.join(5)
    assert child.exitcode == 128 + signal.SIGTERM
    assert ready.read_text() == "finally ran"  # its clean-up ran
    assert "Traceback" not in capfd.readouterr().err


def test_output_group_leaves_a_cache_written_on_the_way(tmp_path):
    """Only the command's own outputs are taken back: a cache written while it ran (the generated
    shapes set of '--dataset shapes') stays for the next run."""
    out = tmp_path / "res" / "ts.png"
    with pytest.raises(KeyboardInterrupt), fileio.output_group([str(out)]):
        fileio.write_text(tmp_path / "cache" / "key" / "shapes.npz", "cached")
        fileio.write_text(out, "png")
        fileio.write_text(out.with_suffix(".pdf"), "pdf")  # beside the PNG: an output too
        raise KeyboardInterrupt
    assert (tmp_path / "cache" / "key" / "shapes.npz").read_text() == "cached"
    assert not (tmp_path / "res").exists()


def test_train_evaluation_shows_a_bar_on_a_terminal_only(tmp_path):
    """The evaluation before training and after each epoch embeds both splits (minutes on real data
    sets): a passing bar on a terminal, nothing more in a log file than the epoch's own line."""
    import subprocess
    import sys

    argv = [sys.executable, "-m", "embedscope", "train", "--dataset", "digits", "--loss", "margin", "--epochs", "1",
            "--embed-dim", "8", "-o", str(tmp_path / "m.pt")]
    # one torch thread: on a loaded machine two spin-waiting threads made the run 1.7x slower (40 vs 70 s)
    one = {**os.environ, "OMP_NUM_THREADS": "1"}
    raw, rc = run_on_pty(argv, env=one)
    assert rc == 0, raw
    assert b"evaluate: embed test" in raw and b"evaluate: embed train" in raw
    shown = screen(raw)
    assert not [s for s in shown if "evaluate: embed" in s], shown  # cleared, not left in the scrollback
    log = tmp_path / "log.txt"
    with open(log, "wb") as f:
        assert subprocess.run(argv[:-1] + [str(tmp_path / "m2.pt")], stdout=f, stderr=subprocess.STDOUT,
                              env=one).returncode == 0
    text = log.read_text()
    assert "evaluate: embed" not in text and "\r" not in text and "\x1b" not in text, text


def test_make_shapes_reports_writing_the_images(tmp_path):
    """Writing the images (9 s for the default 4,800) was silent after the render line."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "embedscope", "make-shapes", "-o", str(tmp_path / "s"), "--n-images", "60"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert [x.split(":")[0] for x in lines] == ["render shapes", "write images"], lines
