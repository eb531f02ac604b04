"""Stale state: what a resume or a "skip what is done" path gives follows the inputs as they are now.

A train-grid run is skipped only when it was trained on the data (and ``--weights`` file) as they are
now; a resumed run continues only on the data it started with, and never hands back the model of a
later epoch than asked; an interrupted ``make-shapes --force`` never leaves a table that labels the
images of another set.
"""

from __future__ import annotations

import pytest

from embedscope.data import get_dataset
from embedscope.data.shapes import INCOMPLETE, write_folder
from embedscope.errors import EmbedscopeError

SHAPES_RUN = {"image_size": 16, "batch_size": 16, "eval_every": 0}


class _Stop(Exception):
    pass


def _stop_at(epoch: int):
    def cb(e, row):
        if e == epoch:
            raise _Stop

    return cb


def _image_bytes(root) -> list[bytes]:
    return [p.read_bytes() for p in sorted((root / "images").glob("*.png"))]


def test_interrupted_make_shapes_force_puts_the_earlier_set_back(tmp_path, monkeypatch):
    """write_folder(force=True) stopped after its images, before its table: the earlier set is back
    whole (it was left with the earlier table over the new images: every label wrong, silently)."""
    import embedscope.data.shapes as shapes

    root = write_folder(tmp_path / "s", n=48, size=16, seed=0)
    table, images = (root / "properties.csv").read_bytes(), _image_bytes(root)

    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(shapes, "_rows", stop)
    with pytest.raises(KeyboardInterrupt):
        write_folder(root, n=48, size=16, seed=1, force=True)
    assert (root / "properties.csv").read_bytes() == table and _image_bytes(root) == images
    assert sorted(p.name for p in (root / "images").iterdir()) == [f"{i:06d}.png" for i in range(48)]


def test_killed_make_shapes_force_leaves_no_set_to_load(tmp_path, monkeypatch):
    """A process killed midway (no rollback: simulated) leaves a table marked as interrupted, which
    loading refuses in one line, and make-shapes --force writes the set again."""
    import embedscope.data.shapes as shapes
    from embedscope import fileio

    root = write_folder(tmp_path / "s", n=48, size=16, seed=0)

    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(shapes, "_rows", stop)
    monkeypatch.setattr(fileio._OutputGroup, "rollback", lambda self: None)
    with pytest.raises(KeyboardInterrupt):
        write_folder(root, n=48, size=16, seed=1, force=True)
    assert (root / "properties.csv").read_text(encoding="utf-8") == INCOMPLETE
    with pytest.raises(EmbedscopeError, match=r"shapes: .*properties\.csv: writing this set was interrupted "
                                              r"\(make-shapes --force stopped midway\); write it again"):
        get_dataset("shapes", str(root))
    monkeypatch.undo()
    write_folder(root, n=48, size=16, seed=1, force=True)
    assert len(get_dataset("shapes", str(root))) == 48
