"""Audit 27 (helper J): studies of checkpoints with one file name in other folders, and ``--force``.

``a/model.pt`` and ``b/model.pt`` (a glob ``'*/model.pt'``, a YAML list without names) were one run
name, and where no setting varies the run name is the objective's label: two runs averaged as seeds
of one objective. They are ``a/model`` and ``b/model`` now; a study resumes its rows under those
names, and a study folder of the earlier naming reads its rows back under them (each checkpoint's
own row, audit 29). A
train-grid folder's names are unchanged. ``--force`` removes the rows of the study it replaces (only
rows: ``<id>.json`` with that id), so that none is read back when the forced study is stopped and
resumed, and none is left to mislead in ``rows/``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import save_digits_checkpoint

from embedscope.study import plan
from embedscope.study.plan import _sources
from embedscope.study.run import run_study

FAST = {"workers": 0, "n_boot": 0, "figures": False, "measures": ["R@1", "rho"], "echo": lambda s: None}


def _old_names(items):  # the naming before: the file's stem, whatever its folder
    return [(f, n, t) for f, n, t, _ in items]


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    """a/model.pt and b/model.pt: the same config, other weights (torch seeds 1 and 2)."""
    d = tmp_path_factory.mktemp("same_name")
    for sub, seed in (("a", 1), ("b", 2)):
        (d / sub).mkdir()
        save_digits_checkpoint(d / sub / "model.pt", seed=seed)
    return d


# ------------------------------------------------------------------------------------------ run names
def test_files_of_one_name_in_other_folders_take_their_folder(tmp_path):
    for rel in ("a/model.pt", "b/model.pt", "c/other.pt", "p/x/net.pt", "q/x/net.pt", "r/y/net.pt",
                "s/m.pt", "s/m.pth"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x")
    got = {str(f.relative_to(tmp_path)): n for f, n, _ in _sources(str(tmp_path / "**" / "*.pt*"))}
    assert got == {"a/model.pt": "a/model", "b/model.pt": "b/model", "c/other.pt": "other",
                   "p/x/net.pt": "p/x/net", "q/x/net.pt": "q/x/net", "r/y/net.pt": "y/net",
                   "s/m.pt": "m.pt", "s/m.pth": "m.pth"}, got
    # a file of a training folder: the run's folders, not the .pt.train folder
    for rel in ("g1/run.pt.train/best.pt", "g2/run.pt.train/best.pt"):
        (tmp_path / rel).parent.mkdir(parents=True)
        (tmp_path / rel).write_bytes(b"x")
    got = sorted(n for _, n, _ in _sources(str(tmp_path / "g*" / "run.pt.train" / "best.pt")))
    assert got == ["g1/run@best", "g2/run@best"]


def test_yaml_names_given_stay_and_a_derived_name_never_takes_one(tmp_path):
    for sub in ("a", "b", "c"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "model.pt").write_bytes(b"x")
    y = tmp_path / "list.yaml"
    # c/model.pt is named 'model' by the user: kept; the others, unnamed, take their folder
    y.write_text("checkpoints:\n  - a/model.pt\n  - b/model.pt\n  - {path: c/model.pt, name: model}\n")
    assert [n for _, n, _ in _sources(y)] == ["a/model", "b/model", "model"]
    # two items the user names alike stay alike (the user's grouping), a unique stem stays the stem
    y.write_text("checkpoints:\n  - {path: a/model.pt, name: m, seed: 0}\n  - {path: b/model.pt, name: m, seed: 1}\n")
    assert [n for _, n, _ in _sources(y)] == ["m", "m"]
    y.write_text("checkpoints:\n  - a/model.pt\n")
    assert [n for _, n, _ in _sources(y)] == ["model"]


def test_a_train_grid_folders_names_are_unchanged(tmp_path):
    from embedscope.train.grid import train_grid

    out = tmp_path / "runs"
    train_grid("digits", ["contrastive"], [0.0], [0, 1], out, options={"embed_dim": 8, "epochs": 1},
               progress=False, echo=lambda s: None)
    entries = plan.plan_study(out, tmp_path / "st", untrained_dir=tmp_path / "u")
    assert sorted(e.run for e in entries if e.selection != "untrained") == [
        "digits_contrastive_p0_s0", "digits_contrastive_p0_s0", "digits_contrastive_p0_s1", "digits_contrastive_p0_s1"]
    assert sorted(e.id for e in entries if e.selection != "untrained") == [
        "digits_contrastive_p0_s0_best", "digits_contrastive_p0_s0_final",
        "digits_contrastive_p0_s1_best", "digits_contrastive_p0_s1_final"]


# ------------------------------------------------------------------------------------------- studies
def test_two_checkpoints_of_one_name_are_two_objectives_and_resume(two_models, emb_cache, tmp_path):
    out = tmp_path / "study"
    res = run_study(str(two_models / "*" / "model.pt"), out, cache_dir=emb_cache, **FAST)
    runs = {r["id"]: r["run"] for r in res["rows"] if r["selection"] != "untrained"}
    assert runs == {"a_model_given": "a/model", "b_model_given": "b/model"}
    assert res["stats"]["n_points"]["objectives"] == 2 and res["stats"]["n_points"]["runs"] == 2
    assert sorted(o["objective"] for o in res["stats"]["objectives"]) == ["a/model", "b/model"]
    assert all(o["n_seeds"] == 1 for o in res["stats"]["objectives"])
    # the two runs' R@1 are their own (one objective would be their mean)
    r1 = {r["run"]: r["R@1"] for r in res["rows"] if r["selection"] != "untrained"}
    assert r1["a/model"] != r1["b/model"]
    # the same command resumes: every row found, nothing measured
    again = run_study(str(two_models / "*" / "model.pt"), out, cache_dir=emb_cache, **FAST)
    assert again["computed"] == [] and sorted(r["id"] for r in again["rows"]) == sorted(r["id"] for r in res["rows"])


def test_a_study_of_the_earlier_naming_is_read_back_under_the_new_names(two_models, emb_cache, tmp_path,
                                                                         monkeypatch):
    out = tmp_path / "study"
    src = str(two_models / "*" / "model.pt")
    with monkeypatch.context() as m:
        m.setattr(plan, "_unique_run_names", _old_names)
        old = run_study(src, out, cache_dir=emb_cache, **FAST)
    assert sorted(r["run"] for r in old["rows"] if r["selection"] != "untrained") == ["model", "model"]
    assert old["stats"]["n_points"]["objectives"] == 1  # the bug: two runs, one objective
    # a row of the earlier naming whose id is a new one (the lossy id of 'a/model' is 'a_model_given',
    # as that of a file a_model.pt): its run differs; it is read back as the row of its checkpoint, under
    # the run's name now, as the rows of the other names are (nothing measured again; audit 29)
    row = json.loads((out / "rows" / "model_given.json").read_text())
    assert row["checkpoint"].endswith("a/model.pt")
    (out / "rows" / "a_model_given.json").write_text(json.dumps({**row, "id": "a_model_given"}))
    res = run_study(src, out, cache_dir=emb_cache, **FAST)
    assert res["computed"] == []
    r1 = {r["checkpoint"]: r["R@1"] for r in old["rows"]}
    assert all(r["R@1"] == r1[r["checkpoint"]] for r in res["rows"])  # each checkpoint's own row
    assert sorted(r["run"] for r in res["rows"] if r["selection"] != "untrained") == ["a/model", "b/model"]
    assert res["stats"]["n_points"]["objectives"] == 2
    assert json.loads((out / "rows" / "a_model_given.json").read_text())["run"] == "a/model"
    # the statistics are over the new rows only
    import pandas as pd

    t = pd.read_csv(out / "runs.csv")
    assert sorted(t["id"]) == sorted(r["id"] for r in res["rows"])


# ------------------------------------------------------------------------------------------- --force
def _rows(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "rows").iterdir())


def test_force_with_other_settings_removes_the_old_rows_only(two_models, emb_cache, tmp_path):
    out = tmp_path / "study"
    run_study(str(two_models / "a" / "*.pt"), out, cache_dir=emb_cache, **FAST)
    ref = [n for n in _rows(out) if n.startswith("untrained")]
    assert _rows(out) == sorted(["model_given.json", *ref])
    # files in rows/ that are not rows of the study: another name, other content, a damaged row, a folder
    keep = {"notes.json": '{"x": 1}\n', "other_id.json": json.dumps({"id": "elsewhere", "run": "r", "status": "ok"}),
            "damaged.json": '{"id": "damaged", "run"', "readme.txt": "mine\n"}
    for name, text in keep.items():
        (out / "rows" / name).write_text(text)
    (out / "rows" / "sub.json").mkdir()
    said: list[str] = []
    res = run_study(str(two_models / "b" / "*.pt"), out, cache_dir=emb_cache, force=True,
                    **{**FAST, "echo": said.append})
    assert [r["checkpoint"] for r in res["rows"] if r["selection"] != "untrained"] == [str(two_models / "b" / "model.pt")]
    # the old row model_given.json (a/model.pt) is gone; the new study's rows and the other files stay
    assert _rows(out) == sorted(["model_given.json", *ref, *keep, "sub.json"])
    assert json.loads((out / "rows" / "model_given.json").read_text())["checkpoint"] == str(two_models / "b" / "model.pt")
    for name, text in keep.items():
        assert (out / "rows" / name).read_text() == text
    assert any("--force: removed the 2 row(s)" in s for s in said), said


def test_force_with_other_settings_stopped_and_resumed_reads_no_old_row(two_models, emb_cache, tmp_path):
    out = tmp_path / "study"
    src = str(two_models / "*" / "model.pt")
    run_study(src, out, cache_dir=emb_cache, **FAST)  # measures R@1, rho
    seen: list[str] = []

    def stop(row):
        seen.append(row["id"])
        raise KeyboardInterrupt

    other = {**FAST, "measures": ["R@1", "pi_ratio"]}
    with pytest.raises(KeyboardInterrupt):
        run_study(src, out, cache_dir=emb_cache, force=True, on_row=stop, **other)
    assert len(seen) == 1 and len(list((out / "rows").glob("*.json"))) == 1
    res = run_study(src, out, cache_dir=emb_cache, **other)  # the forced study, resumed
    assert len(res["computed"]) == len(res["rows"]) - 1
    assert all("pi_ratio" in r for r in res["rows"] if r["status"] == "ok"), [sorted(r) for r in res["rows"]]
