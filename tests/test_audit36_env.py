"""Audit 36 (a helper running the commands in users' environments): `--json /dev/null --force` renamed a
regular file over the device (as root, /dev/null itself; a named pipe too); `add-properties` of a file
named through a symbolic link replaced the link with an updated copy and left the file without the
properties; and a standard output whose encoding cannot hold ρ, §, – or a class name (latin-1, ASCII)
failed the command after its work with a UnicodeEncodeError, taking back its files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_run import run_cli

from embedscope import store

ES = str(Path(sys.executable).with_name("embedscope"))


@pytest.fixture
def h5(tmp_path):
    rng = np.random.default_rng(0)
    n = 12
    es = store.EmbeddingSet(embeddings=rng.normal(size=(n, 3)).astype(np.float32), labels=np.arange(n) % 3,
                            paths=[f"img/{i}.jpg" for i in range(n)], split=["test"] * n,
                            class_names=["猫", "b", "c"])
    return store.save(tmp_path / "e.h5", es)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_an_output_that_is_no_regular_file_is_refused(h5, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    rc, _, err = run_cli(["geometry", str(h5), "--split", "test", "--json", str(fifo), "--force"])
    assert rc == 1 and "not a regular file" in err
    assert fifo.is_fifo()


def test_add_properties_through_a_link_updates_the_file(h5, tmp_path):
    link = tmp_path / "link.h5"
    link.symlink_to(h5)
    csv = tmp_path / "p.csv"
    csv.write_text("path,colour\n" + "".join(f"img/{i}.jpg,{'red' if i % 2 else 'blue'}\n" for i in range(12)))
    rc, _, err = run_cli(["add-properties", str(link), str(csv)])
    assert rc == 0, err
    assert link.is_symlink() and "colour" in store.load(h5).properties


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_stdout_that_cannot_hold_a_character_escapes_it(h5, tmp_path, encoding):
    env = {**os.environ, "PYTHONIOENCODING": encoding}
    out = tmp_path / "g.json"
    p = subprocess.run([ES, "evaluate", str(h5), "--per-class", str(tmp_path / "pc.csv"), "--json", str(out)],
                       capture_output=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert out.exists() and (tmp_path / "pc.csv").exists()
    assert b"\\u732b" in p.stdout  # the class named 猫, escaped
    p = subprocess.run([ES, "geometry", str(h5), "--split", "test"], capture_output=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")


def test_no_home_folder_is_one_line_not_a_folder_named_tilde(monkeypatch, tmp_path):
    from embedscope.errors import EmbedscopeError
    from embedscope.fileio import cache_root

    for k in ("HOME", "XDG_CACHE_HOME", "EMBEDSCOPE_CACHE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(os.path, "expanduser", lambda p: p)  # (no HOME and no passwd entry: "~" comes back)
    with pytest.raises(EmbedscopeError, match="set EMBEDSCOPE_CACHE"):
        cache_root()
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # relative: left out (the XDG rule)
    with pytest.raises(EmbedscopeError, match="no home folder"):
        cache_root()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_root() == tmp_path / "embedscope"


def test_a_study_with_a_cache_it_cannot_write_measures_every_row(monkeypatch, tmp_path):
    from conftest import save_digits_checkpoint

    import embedscope.study.run as run_mod

    save_digits_checkpoint(tmp_path / "m.pt")
    monkeypatch.setattr(run_mod, "_can_write", lambda folder: False)

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    import embedscope.store as store_mod

    monkeypatch.setattr(store_mod, "save", refuse)  # (the cache's writes: as a read-only folder)
    lines = []
    run_mod.run_study(str(tmp_path / "m.pt"), tmp_path / "st", cache_dir=tmp_path / "cache",
                            measures=["R@1", "rho"], figures=False, n_boot=0, workers=0, echo=lines.append)
    import pandas as pd

    runs = pd.read_csv(tmp_path / "st" / "runs.csv")
    assert (runs["status"] == "ok").all() and len(runs) >= 2, runs[["id", "status", "error"]]
    assert any("cannot be written" in line for line in lines), lines
    assert not (tmp_path / "cache" / "untrained").exists() and (tmp_path / "st" / "untrained").is_dir()
