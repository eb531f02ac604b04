"""The command line where the home folder cannot be written (a container's read-only home): matplotlib's
settings and font cache go to a private temporary folder for the run, removed at exit, instead of
matplotlib's own two-line warning at its import."""

import os
import subprocess
import sys

import numpy as np

from embedscope.cli import _creatable


def test_creatable_makes_nothing(tmp_path):
    assert _creatable(str(tmp_path))
    assert _creatable(str(tmp_path / "a" / "b" / "matplotlib"))
    assert list(tmp_path.iterdir()) == []  # tried and removed again
    (tmp_path / "file").write_text("x")
    assert not _creatable(str(tmp_path / "file" / "home" / ".config" / "matplotlib"))
    assert not _creatable(str(tmp_path / "file"))  # not a folder


def test_an_unwritable_home_gives_no_matplotlib_warning(tmp_path):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.standard_normal((40, 6)).astype(np.float32))
    np.save(tmp_path / "y.npy", np.repeat(np.arange(4), 10))
    (tmp_path / "file").write_text("x")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    env.update(HOME=str(tmp_path / "file" / "home"), TMPDIR=str(tmp))  # under a file: mkdir fails
    run = [sys.executable, "-m", "embedscope"]
    r = subprocess.run(run + ["import", "x.npy", "--labels", "y.npy", "-o", "e.h5"], cwd=tmp_path, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(run + ["spectrum", "e.h5", "--split", "test", "-o", "sp.png"], cwd=tmp_path, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "matplotlib" not in r.stderr.lower(), r.stderr
    assert (tmp_path / "sp.png").exists() and (tmp_path / "sp.pdf").exists()
    assert not any(p.name.startswith("embedscope-matplotlib-") for p in tmp.iterdir())  # removed at exit


def test_main_gives_the_callers_environment_back(tmp_path, monkeypatch):
    """main() called from Python (a notebook, a test) set MPLBACKEND=Agg for good."""
    from embedscope.cli import main

    monkeypatch.setenv("MPLBACKEND", "module://my_backend")
    monkeypatch.delenv("MPLCONFIGDIR", raising=False)
    assert main(["info", str(tmp_path / "none.h5")]) == 1
    assert os.environ["MPLBACKEND"] == "module://my_backend" and "MPLCONFIGDIR" not in os.environ
    monkeypatch.delenv("MPLBACKEND")
    main(["info", str(tmp_path / "none.h5")])
    assert "MPLBACKEND" not in os.environ
