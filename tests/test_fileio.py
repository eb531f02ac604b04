"""Safe outputs (issue 17): permissions, concurrent writers, signals, stale temporaries, full disks,
unwritable folders, folder names as outputs."""

import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from embedscope.errors import EmbedscopeError
from embedscope.fileio import atomic_output, check_writable, sweep_stale_temporaries, write_text

PY = sys.executable


def _mount(folder, options):
    folder.mkdir(exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    return folder


def _umount(folder):
    import gc

    gc.collect()  # a failed writer's file object may still be open
    if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.fixture
def tiny_fs(tmp_path):
    """A 64 KiB file system: writes of more fail with ENOSPC."""
    d = _mount(tmp_path / "tiny", "size=64k")
    yield d
    _umount(d)


@pytest.fixture
def readonly_dir(tmp_path):
    """A folder nobody can write to: a read-only mount as root, mode 0555 otherwise."""
    d = tmp_path / "ro"
    if os.geteuid() == 0:
        _mount(d, "ro,size=64k")
        yield d
        _umount(d)
    else:
        d.mkdir()
        d.chmod(0o555)
        yield d
        d.chmod(0o755)


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir())


def test_new_outputs_respect_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "a.txt", "x")
        os.umask(0o002)
        write_text(tmp_path / "b.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644  # was 0600 (mkstemp)
    assert stat.S_IMODE((tmp_path / "b.txt").stat().st_mode) == 0o664


def test_force_keeps_the_mode_of_the_replaced_file(tmp_path):
    f = tmp_path / "r.txt"
    f.write_text("old")
    f.chmod(0o640)
    write_text(f, "new", force=True)
    assert f.read_text() == "new" and stat.S_IMODE(f.stat().st_mode) == 0o640


def test_two_writers_without_force_one_wins(tmp_path):
    """Both start while the output is absent; the second to finish must fail, not replace."""
    target = tmp_path / "out.txt"
    both_inside = threading.Barrier(2)
    results = {}

    def writer(name, delay):
        try:
            with atomic_output(target) as tmp:
                tmp.write_text(name)
                both_inside.wait(timeout=10)
                time.sleep(delay)
            results[name] = "ok"
        except EmbedscopeError as e:
            results[name] = str(e)

    ts = [threading.Thread(target=writer, args=("first", 0.0)), threading.Thread(target=writer, args=("second", 0.3))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert results["first"] == "ok"
    assert "already exists" in results["second"]
    assert target.read_text() == "first"
    assert leftovers(tmp_path) == ["out.txt"]


def test_publishing_does_not_replace_an_output_that_appeared_after_the_check(tmp_path, monkeypatch):
    """The check-then-rename race: the second writer's last check ran just before the first writer
    published. Publishing itself must refuse (link-no-replace), whatever an earlier check saw."""
    import pathlib

    target = tmp_path / "out.txt"
    with pytest.raises(EmbedscopeError, match="already exists"):
        with atomic_output(target) as tmp:
            tmp.write_text("second")
            write_text(target, "first")  # the other writer finishes meanwhile
            real = pathlib.Path.exists
            monkeypatch.setattr(pathlib.Path, "exists", lambda self, *a, **k: False if self == target else real(self))
    monkeypatch.undo()
    assert target.read_text() == "first"
    assert leftovers(tmp_path) == ["out.txt"]


def test_folder_names_are_refused(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(EmbedscopeError, match="is a directory") as e:
        check_writable(tmp_path / "d", force=True)
    assert "--force" not in str(e.value)
    with pytest.raises(EmbedscopeError, match="folder name"):
        check_writable(f"{tmp_path}/new/")  # would have written a file named 'new'
    assert leftovers(tmp_path) == ["d"]
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(EmbedscopeError, match="not a folder"):
        check_writable(f / "sub" / "out.txt")


def test_missing_folders_are_created_on_write_and_removed_on_failure(tmp_path):
    out = tmp_path / "a" / "b" / "r.txt"
    check_writable(out)
    assert not (tmp_path / "a").exists()  # the check creates nothing
    with pytest.raises(RuntimeError):
        with atomic_output(out) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert leftovers(tmp_path) == []  # nothing left behind, not even the folders
    write_text(out, "done")
    assert out.read_text() == "done"


def test_unwritable_folder_is_found_before_the_work(readonly_dir):
    out = readonly_dir / "r.txt"
    with pytest.raises(EmbedscopeError) as e:
        check_writable(out)
    msg = str(e.value)
    assert str(out) in msg and "not writable" in msg and ".tmp" not in msg
    with pytest.raises(EmbedscopeError, match="not writable"):
        check_writable(readonly_dir / "new" / "r.txt")


def test_disk_full_is_one_line_naming_the_output(tiny_fs):
    out = tiny_fs / "big.bin"
    with pytest.raises(EmbedscopeError) as e:
        with atomic_output(out) as tmp:
            with open(tmp, "wb") as f:
                f.write(b"\0" * (1 << 20))
    assert str(e.value) == f"{out}: no space left on device"
    assert leftovers(tiny_fs) == []


def test_disk_full_without_errno_is_recognised(tiny_fs):
    """torch.save loses the errno ("[enforce fail at inline_container.cc]"): a full file system still says so."""
    import torch

    out = tiny_fs / "m.pt"
    with pytest.raises(EmbedscopeError, match="no space left on device"):
        with atomic_output(out) as tmp:
            torch.save({"w": torch.zeros(100_000)}, tmp)
    assert leftovers(tiny_fs) == []


def test_stale_temporaries_of_dead_processes_are_swept(tmp_path):
    out = tmp_path / "r.txt"
    # a process that creates a temporary file of `out` and is killed with SIGKILL
    code = textwrap.dedent(f"""
        import os, sys, time
        from embedscope.fileio import atomic_output
        with atomic_output({str(out)!r}) as tmp:
            tmp.write_text("half")
            print(tmp.name, flush=True)
            time.sleep(60)
    """)
    p = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True)
    name = p.stdout.readline().strip()
    assert (tmp_path / name).exists()
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    assert (tmp_path / name).exists()  # SIGKILL cannot be caught
    old = time.time() - 3600
    os.utime(tmp_path / name, (old, old))
    other = tmp_path / ".other.txt.x.1.y.tmp"  # another output's temporary: not touched
    other.write_text("x")
    write_text(out, "new")  # the next run of the same output sweeps it
    assert out.read_text() == "new"
    assert leftovers(tmp_path) == [".other.txt.x.1.y.tmp", "r.txt"]
    assert sweep_stale_temporaries(out) == []


def test_live_process_temporary_is_kept(tmp_path):
    out = tmp_path / "r.txt"
    with atomic_output(out) as tmp:
        tmp.write_text("x")
        old = time.time() - 3600
        os.utime(tmp, (old, old))
        assert sweep_stale_temporaries(out) == []  # our own pid is alive
        assert tmp.exists()


SIGTERM_WRITER = textwrap.dedent("""
    import sys, time
    from embedscope.cli import main
    import embedscope.cli.info as info

    def slow(args):
        from embedscope.fileio import atomic_output
        with atomic_output(args.file) as tmp:
            tmp.write_text("half")
            print("writing", flush=True)
            time.sleep(60)
    info.run = slow
    sys.exit(main(["info", sys.argv[1]]))
""")


def test_sigterm_removes_the_temporary_file(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(SIGTERM_WRITER)
    out = tmp_path / "out" / "r.txt"
    p = subprocess.Popen([PY, str(script), str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "writing"
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143
    assert err.strip() == "embedscope info: terminated"
    assert leftovers(tmp_path) == ["w.py"]  # no temporary file, no folder
