"""A study's embeddings and finished rows follow the data (docs/studies.md, "What is measured" and
"Resuming"): an image replaced in the data set's folder since is embedded again, with one line
saying why; unchanged data is served from the cache and the finished rows; a data set that cannot be
listed any more keeps its finished rows. Also within one process, as a notebook runs a study twice."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from embedscope.cli import main
from embedscope.study.run import DATA_KEY, data_fingerprint, embed_cached, run_study


@pytest.fixture(scope="module")
def shapes_study(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("datachange")
    root = tmp / "shapes"
    assert main(["make-shapes", "-o", str(root), "--n-images", "96", "--size", "16", "--no-progress"]) == 0
    rc = main(["train", "--dataset", "shapes", "--root", str(root), "--arch", "shapes_cnn", "--image-size", "16",
               "--embed-dim", "8", "--epochs", "0", "--batch-size", "24", "--seed", "0", "--no-progress",
               "-o", str(tmp / "ck" / "s0.pt")])
    assert rc == 0
    return tmp, root


def _run(tmp, out="st"):
    lines: list[str] = []
    res = run_study(str(tmp / "ck" / "*.pt"), tmp / out, workers=0, cache_dir=tmp / "cache", n_boot=0,
                    figures=False, echo=lines.append)
    assert not res["errors"]
    return res, lines


def test_changed_images_are_embedded_and_measured_again(shapes_study):
    from PIL import Image

    tmp, root = shapes_study
    res1, _ = _run(tmp)
    assert res1["computed"] and all(isinstance(r[DATA_KEY], list) and len(r[DATA_KEY]) == 4 for r in res1["rows"])
    assert DATA_KEY not in pd.read_csv(tmp / "st" / "runs.csv").columns  # bookkeeping, not a measure
    import json

    meta = json.loads((tmp / "st" / "study.json").read_text())
    assert meta["geometry_seed"] == 0 and meta["settings"]["seed"] == 1234  # every seed a row depends on
    ck = res1["rows"][0]["checkpoint"]
    es1, info1 = embed_cached(ck, cache_dir=tmp / "cache")
    assert info1["cached"]

    res2, lines2 = _run(tmp)  # nothing changed: nothing measured again
    assert res2["computed"] == [] and not any("changed" in s for s in lines2)

    # a test image replaced by another picture (same name, new content): noticed in this same process
    te = np.flatnonzero(es1.split == "test")[0]
    path = root / es1.paths[te]
    with Image.open(path) as im:
        arr = np.asarray(im.convert("RGB"))
    Image.fromarray(255 - arr).save(path)
    es3, info3 = embed_cached(ck, cache_dir=tmp / "cache")  # as a notebook calls it: sees the new picture
    assert not info3["cached"] and info3["cache_file"] != info1["cache_file"]
    assert info3["data"][3] != info1["data"][3]
    res3, lines3 = _run(tmp)
    assert len(res3["computed"]) == len(res1["rows"])
    assert any(s.startswith("study: the data set shapes in ") and "changed since" in s for s in lines3), lines3
    assert not np.array_equal(es3.embeddings[te], es1.embeddings[te])  # the new picture, not the stale one
    others = np.arange(len(es1.split)) != te
    assert np.array_equal(es3.embeddings[others], es1.embeddings[others])

    # the folder moved away: the finished rows are kept, unchecked, and the study says so
    moved = root.with_name("shapes_moved")
    root.rename(moved)
    try:
        res4, lines4 = _run(tmp)
        assert res4["computed"] == [] and len(res4["rows"]) == len(res1["rows"])
        assert any("cannot be listed now" in s and "kept as measured" in s for s in lines4), lines4
    finally:
        moved.rename(root)


def test_fingerprint_follows_listing_files_and_labels(shapes_study):
    import os

    from embedscope.data import get_dataset

    _, root = shapes_study
    ds = get_dataset("shapes", str(root))
    fp = data_fingerprint(ds)
    assert fp == data_fingerprint(get_dataset("shapes", str(root)))  # deterministic
    relabelled = get_dataset("shapes", str(root))
    relabelled.labels = relabelled.labels.copy()
    relabelled.labels[[0, 1]] = relabelled.labels[[1, 0]] if relabelled.labels[0] != relabelled.labels[1] else (
        relabelled.labels[[0, 1]] + 1) % len(relabelled.class_names)
    assert data_fingerprint(relabelled) != fp
    p = root / ds.paths[3]
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # touched: the same bytes, a new time
    try:
        assert data_fingerprint(get_dataset("shapes", str(root))) != fp
    finally:
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert data_fingerprint(get_dataset("shapes", str(root))) == fp


def test_untrained_reference_follows_the_weights_file_the_run_started_from(tmp_path):
    """A run trained from `--weights w.pt` records the file's sha256; its untrained reference is named
    by it, so a run retrained from other weights at the same path gets a new reference built from them
    (it reused the one built from the old file), and a reference that can no longer be rebuilt from
    the file the run started from is an error row, not a network the run never started from."""
    import torch

    from embedscope.models import read_checkpoint
    from embedscope.study.plan import plan_study

    w, run = tmp_path / "w.pt", tmp_path / "runs" / "r.pt"

    def train(seed_w: int) -> None:
        assert main(["train", "--dataset", "digits", "--embed-dim", "8", "--epochs", "0", "--seed", str(seed_w),
                     "--no-progress", "--force", "-o", str(w)]) == 0
        assert main(["train", "--dataset", "digits", "--weights", str(w), "--embed-dim", "8", "--epochs", "0",
                     "--seed", "0", "--no-progress", "--force", "-o", str(run)]) == 0

    def reference(udir):
        refs = [e for e in plan_study(str(run), tmp_path / "st", epoch="last", untrained_dir=udir)
                if e.selection == "untrained"]
        assert len(refs) == 1
        return refs[0]

    def backbone(path):
        return {k: v for k, v in read_checkpoint(path)["state_dict"].items() if k.startswith("backbone.")}

    train(1)
    first = reference(tmp_path / "u")
    assert not first.error and all(torch.equal(v, backbone(w)[k]) for k, v in backbone(first.checkpoint).items())
    train(2)  # the run retrained from other weights at the same path
    second = reference(tmp_path / "u")
    assert second.id != first.id and not second.error
    assert all(torch.equal(v, backbone(w)[k]) for k, v in backbone(second.checkpoint).items())
    assert not all(torch.equal(v, backbone(first.checkpoint)[k]) for k, v in backbone(second.checkpoint).items())
    # the weights file replaced after the run: its reference cannot be rebuilt (a fresh cache)
    assert main(["train", "--dataset", "digits", "--embed-dim", "8", "--epochs", "0", "--seed", "3",
                 "--no-progress", "--force", "-o", str(w)]) == 0
    third = reference(tmp_path / "u2")
    assert third.id == second.id and "holds other content than when the run was trained" in third.error


def test_a_grid_folder_is_read_from_its_own_folder_not_the_working_one(tmp_path, monkeypatch):
    """grid.csv names each checkpoint as train-grid was given its folder (relative to where it ran):
    a study of that folder started from another working folder that holds a grid of the same name
    measured that other grid's checkpoints, without a word."""
    from embedscope.study.plan import plan_study

    grids = {}
    for where in ("A", "B"):
        d = tmp_path / where
        d.mkdir()
        monkeypatch.chdir(d)
        assert main(["train-grid", "--dataset", "digits", "--losses", "margin", "--seeds", "0", "--epochs", "0",
                     "--embed-dim", "8", "-o", "grid", "--no-progress"]) == 0
        grids[where] = d / "grid"
    assert "grid/digits_margin_p0_s0.pt" in (grids["A"] / "grid.csv").read_text()  # relative, as given
    monkeypatch.chdir(tmp_path / "B")  # B holds a grid/ of the same name
    runs = [e for e in plan_study(str(grids["A"]), tmp_path / "st", epoch="last") if e.selection != "untrained"]
    assert [Path(e.checkpoint).resolve() for e in runs] == [(grids["A"] / "digits_margin_p0_s0.pt").resolve()]
