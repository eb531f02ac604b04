"""Second UX audit of the command line: a bar for study on a terminal, evaluate's phase lines naming
their files, Ctrl-C while the command starts, Ctrl-C with data loader workers, and no empty run folders
left by an interrupted train-grid (the standards of README.md; the style of test_audit_ux.py)."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_audit_ux import run_on_pty, screen

CONSOLE_SCRIPT = Path(sys.executable).with_name("embedscope")

# ------------------------------------------------------------------ Ctrl-C while the command starts
# A sitecustomize module (run by Python's start-up, before the command's first line) that sends this
# process SIGINT when a given module is about to be imported: Ctrl-C at an exact point of start-up.
_SITECUSTOMIZE = """
import os, signal, sys

_AT = os.environ.get("EMBEDSCOPE_TEST_SIGINT_AT")


class _SigintAt:
    def find_spec(self, name, path=None, target=None):
        if name == _AT:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None


if _AT:
    sys.meta_path.insert(0, _SigintAt())
"""


def _start_argvs():
    argvs = [[sys.executable, "-m", "embedscope"]]
    if CONSOLE_SCRIPT.exists():
        argvs.append([str(CONSOLE_SCRIPT)])
    return argvs


@pytest.fixture(scope="module")
def sigint_site(tmp_path_factory):
    d = tmp_path_factory.mktemp("site")
    (d / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    return d


@pytest.mark.parametrize("argv0", _start_argvs(), ids=lambda a: "script" if len(a) == 1 else "-m")
@pytest.mark.parametrize("module", [
    "argparse", "threading", "embedscope.cli.train", "embedscope.cli.evaluate", "embedscope.cli.report",
    "embedscope.progress",
    # embedscope/__init__.py loads nothing (its errors load on first use): embedscope.errors, which it
    # imported before embedscope/cli/__init__.py ran, now comes after the command line took Ctrl-C over
    "embedscope.errors",
])
def test_ctrl_c_while_the_command_starts_is_one_line(sigint_site, argv0, module, tmp_path):
    """Ctrl-C in the first ~50 ms (the command line's modules being imported, before main() put its
    handler in place) was a KeyboardInterrupt traceback from the console script's import line."""
    env = {**os.environ, "EMBEDSCOPE_TEST_SIGINT_AT": module,
           "PYTHONPATH": os.pathsep.join([str(sigint_site), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run(argv0 + ["info", str(tmp_path / "none.h5")], capture_output=True, text=True, env=env,
                       timeout=120)
    assert "Traceback" not in r.stderr, r.stderr
    assert (r.returncode, r.stderr) == (130, "embedscope: interrupted\n")


def _before_the_command(err: str) -> bool:
    """Whether a traceback is of a Ctrl-C before the command line's handler was in place: Python's own
    start-up (no file of embedscope in it), embedscope/__init__.py and embedscope.errors, or the first
    lines of embedscope/cli/__init__.py up to the handler."""
    import re

    import embedscope.cli as cli

    src = Path(cli.__file__).read_text().splitlines()
    install = next(i for i, line in enumerate(src, 1) if "_signal.signal(_signal.SIGINT, _quiet_interrupt)" in line)
    for path, line in re.findall(r'File "([^"]+)", line (\d+)', err):
        path = path.replace(os.sep, "/")
        if "/embedscope/" not in path or path.endswith(("/embedscope/__init__.py", "/embedscope/errors.py")):
            continue
        if path.endswith("/embedscope/cli/__init__.py") and int(line) <= install:
            continue
        return False
    return True


def test_ctrl_c_at_short_delays_after_the_start_is_never_a_traceback_of_the_command():
    """SIGINT to a freshly started `embedscope --version` 0, 10, 30 and 60 ms after it started: killed by
    the signal before Python set up Ctrl-C, one line and 130, or done; never a traceback through the
    command line's code. (Python's own start-up, the site module and the .pth files of the environment,
    and the console script's search for embedscope.cli come before the first line of the command line
    and can still end in Python's traceback.)"""
    argv = [str(CONSOLE_SCRIPT)] if CONSOLE_SCRIPT.exists() else [sys.executable, "-m", "embedscope"]
    for delay in (0, 0.01, 0.03, 0.06) * 2:
        p = subprocess.Popen(argv + ["--version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        if "Traceback" in err and _before_the_command(err):
            continue
        assert "Traceback" not in err, (delay, err)
        assert (p.returncode, err) in ((-signal.SIGINT, ""), (130, "embedscope: interrupted\n"), (0, "")), (delay, err)


def test_the_start_up_handler_is_only_the_commands(tmp_path):
    """Importing the command line from a program (a test, a notebook) leaves its Ctrl-C alone."""
    code = ("import signal, embedscope.cli as c; "
            "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, c._EARLY_PID)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["True", "None"], r.stderr
    r = subprocess.run([sys.executable, "-m", "embedscope", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("embedscope ") and r.stderr == ""


# ------------------------------------------------------------------ study: a bar on a terminal
@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory):
    from conftest import save_digits_checkpoint

    d = tmp_path_factory.mktemp("ckpts")
    for seed in (0, 1):
        save_digits_checkpoint(d / f"digits_margin_p0_s{seed}.pt", seed=seed)
    return d


def test_study_shows_a_bar_on_a_terminal_and_its_lines_in_a_log(two_checkpoints, tmp_path):
    """study printed one line per checkpoint and nothing in between (a row of a real model takes
    minutes): now a bar over the checkpoints on a terminal, cleared at the end; in a file the same
    lines as before, no bar."""
    import re

    def argv(out):
        return [sys.executable, "-m", "embedscope", "study", str(two_checkpoints / "*.pt"), "-o", str(out),
                "--workers", "0", "--bootstrap", "10", "--no-figures", "--cache-dir", str(tmp_path / "cache")]

    raw, rc = run_on_pty(argv(tmp_path / "tty"), timeout=300)
    assert rc == 0, raw
    n = int(re.search(rb"study: (\d+) checkpoints", raw).group(1))  # the two and the untrained reference
    assert n == 3 and re.search(rb"study: +\d+%\|", raw) and b" 1/3 [" in raw, raw  # a bar: done / total
    shown = screen(raw)
    assert not [s for s in shown if "%|" in s or "checkpoint/s" in s or "s/checkpoint" in s], shown
    rows = [s for s in shown if re.fullmatch(r"\[[123]/3\] \S+: ok", s)]
    assert len(rows) == 3, shown  # the row lines stay, above the bar
    log = tmp_path / "log.txt"
    with open(log, "wb") as f:
        assert subprocess.run(argv(tmp_path / "file"), stdout=f, stderr=subprocess.STDOUT, timeout=300).returncode == 0
    text = log.read_text()
    assert "\r" not in text and "\x1b" not in text and "%|" not in text, text
    lines = text.splitlines()
    assert lines[0] == "study: 3 checkpoints, 0 finished earlier, 3 to measure", lines
    assert [re.sub(r"\S+: ok$", "ok", x) for x in lines[1:4]] == ["[1/3] ok", "[2/3] ok", "[3/3] ok"], lines
    assert lines[4].startswith("study: statistics"), lines


# ------------------------------------------------------------------ evaluate: several files
@pytest.fixture(scope="module")
def two_files(tmp_path_factory):
    """Two embedding files, the second named with an escape sequence."""
    import numpy as np

    from embedscope.store import EmbeddingSet, save

    d = tmp_path_factory.mktemp("evals")
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(6), 20)
    split = np.where(y < 3, "train", "test")
    paths = [d / "a.h5", d / "b\x1b[31m.h5"]
    for p in paths:
        save(p, EmbeddingSet.from_arrays(rng.normal(size=(120, 8)).astype(np.float32), y, split=split))
    return paths


def test_evaluate_of_several_files_names_each_files_phase(two_files, tmp_path):
    """`evaluate a.h5 b.h5`: two 'retrieval: 1/1 tile in 0.0 s' lines (and bars) that did not say which
    file each was; now each names its file, escaped as every string from a file."""
    a, b = (str(p) for p in two_files)
    argv = [sys.executable, "-m", "embedscope", "evaluate", a, b, "--names", "A", "B"]
    log = tmp_path / "log.txt"
    with open(log, "wb") as f:
        assert subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, timeout=300).returncode == 0
    text = log.read_text()
    assert "\x1b" not in text and "\r" not in text
    phases = [line for line in text.splitlines() if line.startswith("retrieval")]
    b_shown = b.replace("\x1b", "\\x1b")
    assert len(phases) == 2 and phases[0].startswith(f"retrieval {a}: ") and \
        phases[1].startswith(f"retrieval {b_shown}: "), phases
    raw, rc = run_on_pty(argv)  # on a terminal: the bar names the file too (escaped)
    assert rc == 0, raw
    assert f"retrieval {a}:".encode() in raw and f"retrieval {b_shown}:".encode() in raw, raw
    assert b"\x1b[31m" not in raw
    shown = screen(raw)
    assert not [s for s in shown if "%|" in s], shown


def test_evaluate_of_one_file_keeps_its_phase_line():
    from embedscope.progress import labelled, progress_bar

    with labelled(None):
        assert progress_bar(total=1, desc="retrieval", enabled=False).desc == "retrieval"
    with labelled("x\ny.h5"):
        assert progress_bar(total=1, desc="retrieval", enabled=False).desc == "retrieval x\\ny.h5"
    assert progress_bar(total=1, desc="retrieval", enabled=False).desc == "retrieval"


# ------------------------------------------------------------------ embed --num-workers: Ctrl-C
_WORKER_HAND_OVER_CUT = """
import os, socket, sys, time
from multiprocessing import resource_sharer

import embedscope.data as data
from embedscope.embed import embed_images
from embedscope.models import build_model, default_config

orig = data.TorchImages.__getitem__


def getitem(self, i):
    if i == 0:  # in the worker: a batch's file descriptor offered, and the parent gone mid-hand-over
        df = resource_sharer.DupFd(os.open(os.devnull, os.O_RDONLY))
        s = socket.socket(socket.AF_UNIX)
        s.connect(df._id[0])
        s.close()
        time.sleep(0.5)  # the sharer's thread meets the closed connection
    return orig(self, i)


data.TorchImages.__getitem__ = getitem
ds = data.get_dataset("digits").subset("test")
X = embed_images(build_model(default_config("digits_cnn", embed_dim=8)), ds, num_workers=1, batch_size=256,
                 device="cpu", progress=False)
print("embedded", X.shape)
"""


def test_a_data_loader_worker_says_nothing_when_its_parent_stops_mid_batch(tmp_path):
    """Ctrl-C while the parent fetched a batch's shared memory from a worker (the file descriptor's
    hand-over by multiprocessing's resource sharer, a thread of the worker) made the worker print
    'Traceback ... resource_sharer.py ... ConnectionResetError: [Errno 104] Connection reset by peer'
    after 'embedscope embed: interrupted'. The same cut connection, made on purpose: silent."""
    script = tmp_path / "cut.py"
    script.write_text(_WORKER_HAND_OVER_CUT)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.startswith("embedded"), r.stderr
    assert "Traceback" not in r.stderr and "Error" not in r.stderr, r.stderr


@pytest.mark.skipif(os.name != "posix", reason="process groups")
def test_ctrl_c_of_embed_with_workers_is_one_line(tmp_path):
    """`embedscope embed --num-workers 2` on the digits, Ctrl-C (SIGINT to the process group, as a
    terminal sends it) at several moments of the embedding: one line, exit 130, no output, and no
    traceback of a worker."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    for i, delay in enumerate((0.0, 0.2, 0.5, 1.0)):
        out = tmp_path / f"e{i}.h5"
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
        p = subprocess.Popen([sys.executable, "-m", "embedscope", "embed", "--arch", "digits_cnn", "--dataset",
                              "digits", "-o", str(out), "--num-workers", "2", "--batch-size", "1"],
                             stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                             env={**os.environ, "TERM": "xterm"})
        os.close(slave)
        raw, sent = b"", False
        end = time.monotonic() + 240
        try:
            while time.monotonic() < end:
                r, _, _ = select.select([master], [], [], 0.05)
                if r:
                    try:
                        chunk = os.read(master, 65536)
                    except OSError:
                        break
                    if not chunk:
                        break
                    raw += chunk
                if not sent and b"embed digits/all" in raw:  # the bar: the workers are loading batches
                    time.sleep(delay)
                    os.killpg(p.pid, signal.SIGINT)
                    sent = True
                if p.poll() is not None and not r:
                    break
            rc = p.wait(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
            os.close(master)
        assert sent, raw
        text = raw.decode("utf-8", "replace")
        if rc == 0:  # it had finished
            continue
        assert rc == 130, text
        assert "Traceback" not in text and "Error" not in text, (delay, text)
        assert screen(raw)[-2:] == ["embedscope embed: interrupted", ""], (delay, screen(raw))
        assert not out.exists()


# ------------------------------------------------------------------ train-grid --workers: no empty run folders
def _grid_argv(out):
    return [sys.executable, "-m", "embedscope", "train-grid", "--dataset", "digits", "--losses", "margin", "triplet",
            "--seeds", "0", "1", "--epochs", "2", "--embed-dim", "8", "--workers", "2", "-o", str(out)]


def _stop_when(argv, ready, sig, to_group):
    """Start ``argv`` in a session of its own; send ``sig`` (to its process group: Ctrl-C on a terminal)
    as soon as ``ready()``; return (exit code, output)."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        end = time.monotonic() + 240
        while not ready() and p.poll() is None and time.monotonic() < end:
            time.sleep(0.005)
        assert p.poll() is None, "it finished before the moment to stop it"
        (os.killpg if to_group else os.kill)(p.pid, sig)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    return p.returncode, out.decode()


def _run_folders(grid):
    return {d.name: sorted(x.name for x in d.iterdir()) for d in grid.glob("*.pt.train")}


@pytest.mark.skipif(os.name != "posix", reason="process groups")
def test_stopped_parallel_grid_leaves_no_empty_run_folders_and_resumes(tmp_path):
    """An interrupted `train-grid --workers 2` left the working folders (<run>.pt.train) of the runs
    that had just begun, empty: the training processes died of the parent's SIGTERM before they could
    take them back. Now they take back what they began; a folder that holds a run's saved state
    (last.pt) stays, and the grid resumes from it; the finished grid holds no empty folder."""
    grid = tmp_path / "g"

    def a_run_has_begun():  # its folder made, no epoch saved yet
        return any(not any(d.iterdir()) for d in grid.glob("*.pt.train")) if grid.is_dir() else False

    rc, out = _stop_when(_grid_argv(grid), a_run_has_begun, signal.SIGTERM, to_group=False)  # `kill PID`
    assert rc == 143 and "Traceback" not in out, out
    assert out.rstrip().endswith("embedscope train-grid: terminated"), out
    assert all(files for files in _run_folders(grid).values()), _run_folders(grid)

    def an_epoch_is_saved():
        return any((d / "last.pt").exists() and not d.with_name(d.name[:-len(".train")]).exists()
                   for d in grid.glob("*.pt.train")) if grid.is_dir() else False

    rc, out = _stop_when(_grid_argv(grid), an_epoch_is_saved, signal.SIGINT, to_group=True)  # Ctrl-C
    assert rc == 130 and "Traceback" not in out, out
    folders = _run_folders(grid)
    assert all(files for files in folders.values()), folders
    partial = [name for name, files in folders.items() if "last.pt" in files
               and not (grid / name[:-len(".train")]).exists()]
    r = subprocess.run(_grid_argv(grid), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in partial:  # resumed from its saved state, not trained again, and its row says so
        assert f"{name[:-len('.pt.train')]}: resuming" in r.stdout, r.stdout
    status = {row["name"]: row["status"] for row in csv.DictReader(open(grid / "grid.csv", newline=""))}
    assert partial and all(status[name[:-len(".pt.train")]] == "resumed" for name in partial), status
    assert sorted(p.name for p in grid.glob("*.pt")) == [f"digits_{lo}_p0_s{s}.pt" for lo in ("margin", "triplet")
                                                         for s in (0, 1)]
    assert sorted(_run_folders(grid)) == sorted(f"{p.name}.train" for p in grid.glob("*.pt"))
    assert all("last.pt" in files for files in _run_folders(grid).values())
    assert not [d for d, _, files in os.walk(grid) if not files and not os.listdir(d)]  # no empty folder at all


def test_clear_wipes_a_bar_interrupted_inside_its_constructor():
    # Ctrl-C right after a bar's first drawing (tqdm draws it in __init__, then sets last_print_t and
    # start_t): tqdm's close() failed on the missing attributes (swallowed), so 'interrupted' was glued
    # to the bar, about one time in three at delay 0 in test_ctrl_c_of_embed_with_workers_is_one_line
    import io

    from embedscope import progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    bar = progress.progress_bar(range(10), desc="embed digits/all", unit="batch", stream=stream)
    try:
        drawn = stream.getvalue()
        assert "embed digits/all" in drawn
        del bar.last_print_t, bar.start_t  # as left by an interruption inside tqdm.__init__
        progress.clear()
        wiped = stream.getvalue()[len(drawn):]
        assert wiped.startswith("\r") and wiped.endswith("\r") and wiped.strip() == ""
        assert len(wiped) >= len(drawn.strip("\r"))  # blanks over the whole bar
    finally:
        bar.disable = True
