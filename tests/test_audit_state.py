"""Stale state: what a resume or a "skip what is done" path gives follows the inputs as they are now.

A train-grid run is skipped only when it was trained on the data (and ``--weights`` file) as they are
now; a resumed run continues only on the data it started with, and never hands back the model of a
later epoch than asked; an interrupted ``make-shapes --force`` never leaves a table that labels the
images of another set.
"""

from __future__ import annotations

import pytest
import torch
from conftest import save_digits_checkpoint

from embedscope.data import get_dataset
from embedscope.data.base import data_fingerprint
from embedscope.data.shapes import INCOMPLETE, write_folder
from embedscope.errors import EmbedscopeError, UsageError
from embedscope.models import read_checkpoint
from embedscope.train.grid import train_grid
from embedscope.train.trainer import train

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


def test_fingerprint_is_the_study_cache_s_and_follows_the_data(tmp_path):
    """The data layer's fingerprint equals the study's (one value for a data set), and changes with the
    images of a folder and with the split."""
    from embedscope.study.run import data_fingerprint as study_fingerprint

    root = write_folder(tmp_path / "s", n=48, size=16, seed=0)
    ds = get_dataset("shapes", str(root))
    digits = get_dataset("digits")
    assert data_fingerprint(ds) == study_fingerprint(ds)
    assert data_fingerprint(digits) == study_fingerprint(digits)
    assert data_fingerprint(get_dataset("digits", train_classes=4)) != data_fingerprint(digits)
    write_folder(root, n=48, size=16, seed=1, force=True)
    assert data_fingerprint(get_dataset("shapes", str(root))) != data_fingerprint(ds)


def test_grid_does_not_skip_a_run_whose_data_changed(tmp_path, capsys):
    """A finished run of the same settings on a folder whose images were replaced since is not skipped
    as done (it was: the grid compared the settings only): it is refused like a run of other settings,
    naming the data set, and --force retrains it on the data as they are now. Unchanged data: skipped."""
    root = write_folder(tmp_path / "s", n=96, size=16, seed=0)
    opts = {**SHAPES_RUN, "root": str(root), "epochs": 0}
    out = tmp_path / "grid"
    rows = train_grid("shapes", ["margin"], [0.0], [0], out, options=opts, progress=False, echo=lambda s: None)
    assert rows[0]["status"] == "trained"
    ckpt = out / "shapes_margin_p0_s0.pt"
    was = read_checkpoint(ckpt)["extra"]["data"]
    assert was == data_fingerprint(get_dataset("shapes", str(root)))
    rows = train_grid("shapes", ["margin"], [0.0], [0], out, options=opts, progress=False, echo=lambda s: None)
    assert rows[0]["status"] == "skipped"

    write_folder(root, n=96, size=16, seed=1, force=True)  # another set of scenes, same file names
    with pytest.raises(EmbedscopeError, match=r"other settings or data .*data: the data set shapes in .*s "
                                              r"changed since the run was trained"):
        train_grid("shapes", ["margin"], [0.0], [0], out, options=opts, progress=False, echo=lambda s: None)
    rows = train_grid("shapes", ["margin"], [0.0], [0], out, options=opts, force=True, progress=False,
                      echo=lambda s: None)
    assert rows[0]["status"] == "retrained"
    assert read_checkpoint(ckpt)["extra"]["data"] == data_fingerprint(get_dataset("shapes", str(root))) != was


def test_grid_keeps_a_run_whose_data_cannot_be_listed_with_one_line(tmp_path):
    """A data folder that is gone (moved, unmounted) does not throw finished runs away: they are kept
    as trained, unchecked, with one line saying so."""
    root = write_folder(tmp_path / "s", n=96, size=16, seed=0)
    opts = {**SHAPES_RUN, "root": str(root), "epochs": 0}
    out = tmp_path / "grid"
    train_grid("shapes", ["margin"], [0.0], [0], out, options=opts, progress=False, echo=lambda s: None)
    root.rename(tmp_path / "moved")
    lines: list[str] = []
    rows = train_grid("shapes", ["margin"], [0.0], [0], out, options=opts, progress=False, echo=lines.append)
    assert rows[0]["status"] == "skipped"
    assert [x for x in lines if "cannot be listed now" in x and "1 stored run(s) are taken as trained" in x]


def test_grid_does_not_skip_a_run_whose_weights_file_changed(tmp_path):
    """The config holds the --weights path; a run trained from another file at that path is not the run
    asked for: refused (it was skipped), retrained with --force."""
    w = save_digits_checkpoint(tmp_path / "w.pt", embed_dim=8, seed=1)
    opts = {"weights": str(w), "embed_dim": 8, "epochs": 0, "eval_every": 0}
    out = tmp_path / "grid"
    train_grid("digits", ["margin"], [0.0], [0], out, options=opts, progress=False, echo=lambda s: None)
    assert train_grid("digits", ["margin"], [0.0], [0], out, options=opts, progress=False,
                      echo=lambda s: None)[0]["status"] == "skipped"
    save_digits_checkpoint(tmp_path / "w2.pt", embed_dim=8, seed=2).replace(w)  # other weights, same path
    with pytest.raises(EmbedscopeError, match=r"weights: the content of .*w\.pt changed since the run was trained"):
        train_grid("digits", ["margin"], [0.0], [0], out, options=opts, progress=False, echo=lambda s: None)
    rows = train_grid("digits", ["margin"], [0.0], [0], out, options=opts, force=True, progress=False,
                      echo=lambda s: None)
    assert rows[0]["status"] == "retrained"
    new = read_checkpoint(tmp_path / "grid" / "digits_margin_p0_s0.pt")["state_dict"]
    src = read_checkpoint(w)["state_dict"]
    assert all(torch.equal(new[k], v) for k, v in src.items() if k.startswith("backbone."))


def test_resume_refuses_data_changed_since_the_run_started(tmp_path):
    """A run stopped after epoch 1, its folder's images replaced, is not continued on the new images
    (it was, silently: half a run on each set)."""
    root = write_folder(tmp_path / "s", n=96, size=16, seed=0)
    cfg = {**SHAPES_RUN, "dataset": "shapes", "root": str(root), "epochs": 2}
    out = tmp_path / "r.pt"
    with pytest.raises(_Stop):
        train(cfg, out, progress=False, echo=lambda s: None, callback=_stop_at(1))
    write_folder(root, n=96, size=16, seed=1, force=True)
    with pytest.raises(EmbedscopeError, match=r"--resume: the data set shapes in .* changed since the run was "
                                              r"started .*put them back as they were, or start again with --force"):
        train(cfg, out, resume=True, progress=False, echo=lambda s: None)
    assert not out.exists()


def test_resume_on_unchanged_data_records_the_fingerprint(tmp_path):
    root = write_folder(tmp_path / "s", n=96, size=16, seed=0)
    cfg = {**SHAPES_RUN, "dataset": "shapes", "root": str(root), "epochs": 2}
    out = tmp_path / "r.pt"
    with pytest.raises(_Stop):
        train(cfg, out, progress=False, echo=lambda s: None, callback=_stop_at(1))
    res = train(cfg, out, resume=True, progress=False, echo=lambda s: None)
    assert res["resumed_from"] == 1
    assert read_checkpoint(out)["extra"]["data"] == data_fingerprint(get_dataset("shapes", str(root)))


def test_resume_never_hands_back_a_later_epoch_than_asked(tmp_path):
    """A run of 3 epochs stopped at epoch 2, resumed with --epochs 1, wrote its epoch-2 model as the
    final checkpoint with a config of 1 epoch ("nothing to do"): refused now. Resumed with --epochs 2
    it is finished at 2 (the final checkpoint says so, and a grid sees it finished)."""
    root = write_folder(tmp_path / "s", n=96, size=16, seed=0)
    cfg = {**SHAPES_RUN, "dataset": "shapes", "root": str(root), "epochs": 3}
    out = tmp_path / "r.pt"
    with pytest.raises(_Stop):
        train(cfg, out, progress=False, echo=lambda s: None, callback=_stop_at(2))
    with pytest.raises(UsageError, match=r"--resume --epochs 1: .*r\.pt has trained 2 epochs already"):
        train({**cfg, "epochs": 1}, out, resume=True, progress=False, echo=lambda s: None)
    assert not out.exists()
    train({**cfg, "epochs": 2}, out, resume=True, progress=False, echo=lambda s: None)
    ck = read_checkpoint(out)
    assert ck["extra"]["epoch"] == 2 and ck["config"]["epochs"] == 2 and ck["extra"]["finished"] is True
    last = read_checkpoint(tmp_path / "r.pt.train" / "last.pt")
    assert all(torch.equal(ck["state_dict"][k], v) for k, v in last["state_dict"].items())


def test_resume_to_the_epoch_reached_replaces_an_earlier_final_checkpoint(tmp_path):
    """A finished 1-epoch run extended to 3 epochs and stopped at 2, then resumed with --epochs 2:
    the final checkpoint becomes the epoch-2 model (it stayed the epoch-1 one, "nothing to do")."""
    root = write_folder(tmp_path / "s", n=96, size=16, seed=0)
    cfg = {**SHAPES_RUN, "dataset": "shapes", "root": str(root), "epochs": 1}
    out = tmp_path / "r.pt"
    train(cfg, out, progress=False, echo=lambda s: None)
    assert read_checkpoint(out)["extra"]["epoch"] == 1
    with pytest.raises(_Stop):
        train({**cfg, "epochs": 3}, out, resume=True, progress=False, echo=lambda s: None, callback=_stop_at(2))
    train({**cfg, "epochs": 2}, out, resume=True, progress=False, echo=lambda s: None)
    ck = read_checkpoint(out)
    assert ck["extra"]["epoch"] == 2 and ck["extra"]["finished"] is True and ck["config"]["epochs"] == 2


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


def test_grid_csv_rows_follow_the_folder(tmp_path):
    """grid.csv keeps the rows of earlier calls, but not as they were when the folder changed since:
    a row whose checkpoint was deleted is dropped (it stayed, naming a model that is gone), and one
    whose checkpoint was retrained outside the grid is summarised again from it (it kept the old
    numbers); one line says each. Untouched rows stay as written."""
    from embedscope.train.grid import read_grid_csv

    out = tmp_path / "grid"
    opts = {"embed_dim": 8, "epochs": 0, "eval_every": 0}
    train_grid("digits", ["margin"], [0.0], [0, 1, 2], out, options=opts, progress=False, echo=lambda s: None)
    before = {r["name"]: r for r in read_grid_csv(out / "grid.csv")}
    for f in (out / "digits_margin_p0_s1.pt", out / "digits_margin_p0_s1.csv"):
        f.unlink()
    # retrained outside the grid, now with its untrained network evaluated
    train({"dataset": "digits", "embed_dim": 8, "epochs": 0, "seed": 0}, out / "digits_margin_p0_s0.pt",
          force=True, progress=False, echo=lambda s: None)
    lines: list[str] = []
    train_grid("digits", ["triplet"], [0.0], [0], out, options=opts, progress=False, echo=lines.append)
    rows = {r["name"]: r for r in read_grid_csv(out / "grid.csv")}
    assert sorted(rows) == ["digits_margin_p0_s0", "digits_margin_p0_s2", "digits_triplet_p0_s0"]
    assert rows["digits_margin_p0_s2"] == before["digits_margin_p0_s2"]
    assert before["digits_margin_p0_s0"]["untrained_R@1"] == ""
    r0 = read_checkpoint(out / "digits_margin_p0_s0.pt")["extra"]["history"][0]["R@1"]
    assert float(rows["digits_margin_p0_s0"]["untrained_R@1"]) == pytest.approx(r0, rel=1e-12) and r0 > 0
    assert [x for x in lines if "dropped 1 earlier row(s)" in x and "digits_margin_p0_s1" in x]
    assert [x for x in lines if "1 earlier row(s) summarised again" in x and "digits_margin_p0_s0" in x]


def _stop_saving(monkeypatch, name: str):
    """save_checkpoint stopped (Ctrl-C) when it is about to write a file called ``name``, once."""
    import embedscope.models as models

    real = models.save_checkpoint

    def save(path, *a, **k):
        if str(path).endswith(name):
            monkeypatch.setattr(models, "save_checkpoint", real)
            raise KeyboardInterrupt
        return real(path, *a, **k)

    monkeypatch.setattr(models, "save_checkpoint", save)


def test_resume_writes_the_best_checkpoint_a_stopped_run_had_not(tmp_path, monkeypatch):
    """A run stopped after last.pt, before best.pt of the same (best) epoch: resuming it wrote no best.pt
    (or kept an earlier epoch's) while its history named this epoch the best, so `study --epoch best`
    measured another model. Now the resume writes it, and the log's last row."""
    root = write_folder(tmp_path / "s", n=96, size=16, seed=0)
    cfg = {**SHAPES_RUN, "dataset": "shapes", "root": str(root), "epochs": 1, "eval_every": 1}
    out = tmp_path / "r.pt"
    _stop_saving(monkeypatch, "best.pt")
    with pytest.raises(KeyboardInterrupt):
        train(cfg, out, progress=False, echo=lambda s: None)
    assert not (tmp_path / "r.pt.train" / "best.pt").exists() and not (tmp_path / "r.csv").exists()
    (tmp_path / "r.csv").write_text("epoch\n0\n")  # a log of the epochs before (the stopped epoch's row missing)
    res = train(cfg, out, resume=True, progress=False, echo=lambda s: None)
    best = read_checkpoint(tmp_path / "r.pt.train" / "best.pt")
    last = read_checkpoint(tmp_path / "r.pt.train" / "last.pt")
    assert res["best"]["epoch"] == best["extra"]["epoch"] == 1
    assert all(torch.equal(best["state_dict"][k], v) for k, v in last["state_dict"].items())
    assert [r.split(",")[0] for r in (tmp_path / "r.csv").read_text().splitlines()[1:]] == ["0", "1"]


def test_resume_writes_the_kept_epoch_a_stopped_run_had_not(tmp_path, monkeypatch):
    """With --keep-epochs, a run stopped after last.pt of epoch 1, before epoch-001.pt: the resumed run
    kept no epoch-001.pt (`study --epoch all` lacked that epoch). Now every epoch is there."""
    root = write_folder(tmp_path / "s", n=96, size=16, seed=0)
    cfg = {**SHAPES_RUN, "dataset": "shapes", "root": str(root), "epochs": 2}
    out = tmp_path / "r.pt"
    _stop_saving(monkeypatch, "epoch-001.pt")
    with pytest.raises(KeyboardInterrupt):
        train(cfg, out, progress=False, echo=lambda s: None, keep_epochs=True)
    train(cfg, out, resume=True, progress=False, echo=lambda s: None, keep_epochs=True)
    d = tmp_path / "r.pt.train"
    assert [read_checkpoint(d / f"epoch-{e:03d}.pt")["extra"]["epoch"] for e in range(3)] == [0, 1, 2]
