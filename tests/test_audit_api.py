"""embedscope as a Python library (audit of the API a script or notebook uses): building sets from
arrays of every kind, saving what float32 cannot hold, one-line errors naming the argument, result
objects (repr, notebook display, equality, pickling) and the lazy top-level names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from embedscope import analyses as A
from embedscope import store
from embedscope.errors import EmbedscopeError
from embedscope.store import EmbeddingSet

ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(7)


def _data(n=60, d=8, classes=4):
    X = RNG.normal(size=(n, d))
    y = np.arange(n) % classes
    return X, y


def _set(n=60, d=8, classes=4, split=None):
    X, y = _data(n, d, classes)
    split = split if split is not None else np.where(np.arange(n) < n // 2, "train", "test")
    return EmbeddingSet.from_arrays(X.astype(np.float32), y, split=split)


# --------------------------------------------------------------------- force wording
def test_refused_overwrite_names_force_for_python_and_the_command_line(tmp_path):
    """store.save and Result.to_json said 'use --force' to a Python caller, whose argument is force=True."""
    es = _set()
    out = tmp_path / "e.h5"
    store.save(out, es)
    with pytest.raises(EmbedscopeError, match=r"already exists \(use --force to replace it; in Python: force=True\)"):
        store.save(out, es)
    store.save(out, es, force=True)  # and force=True does replace it
    r = A.geometry(es)
    r.to_json(tmp_path / "g.json")
    with pytest.raises(EmbedscopeError, match=r"force=True"):
        r.to_json(tmp_path / "g.json")


def test_command_line_refusal_still_says_force(tmp_path, capsys):
    from embedscope.cli import main

    f = tmp_path / "e.h5"
    store.save(f, _set())
    out = tmp_path / "g.json"
    out.write_text("{}")
    assert main(["geometry", str(f), "--json", str(out)]) == 1
    err = capsys.readouterr().err
    assert "already exists (use --force to replace it" in err and len(err.strip().splitlines()) == 1
    assert out.read_text() == "{}"
