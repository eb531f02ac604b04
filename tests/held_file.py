"""``held_for_writing(path)``: another process holds an HDF5 file open for writing while the block runs."""

import contextlib
import subprocess
import sys
import textwrap


@contextlib.contextmanager
def held_for_writing(path, *, libver=None, swmr: bool = False):
    """A child process opens the HDF5 file ``path`` in mode "a" (``libver``; SWMR mode on when ``swmr``) and
    holds it until the block ends. Yields the first line of h5py's error on opening it for reading here,
    or None where HDF5's file locking is off (HDF5_USE_FILE_LOCKING, the file system)."""
    import h5py

    writer = textwrap.dedent(f"""
        import sys, h5py
        f = h5py.File({str(path)!r}, "a", libver={libver!r})
        if {swmr}:
            f.swmr_mode = True
        print("open", flush=True)
        sys.stdin.read()
    """)
    p = subprocess.Popen([sys.executable, "-c", writer], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "open"
        try:
            with h5py.File(path, "r"):
                message = None
        except OSError as e:
            message = str(e).splitlines()[0]
        yield message
    finally:
        p.stdin.close()
        p.wait(timeout=60)
