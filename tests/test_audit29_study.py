"""Audit 29 (helper D): an empty --root, the run names of checkpoints of one file name, and what a
study reads back.

``get_dataset("shapes", "")`` read the working folder as the set (a make-shapes folder there) or
generated the default set into it; it is refused as the other folders' loaders refuse it. A study
refuses ``--root ""`` (and ``--cache-dir ""``) before any work, and reads a root of "" in a study
folder (its settings, its rows' data) as no folder. Files of one name take each its own shortest
unique folder suffix (``y/net`` beside ``p/x/net`` and ``q/x/net``), so that a file added to the source
renames only the files it clashes with; a finished row of a checkpoint named otherwise since (a file
added, the naming of an earlier version) is read back under its name now, never measured again and
never another checkpoint's; tags edited in a YAML list since are taken by the finished rows."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pandas as pd
import pytest
from cli_run import one_error_line, run_cli
from conftest import save_digits_checkpoint

from embedscope.errors import EmbedscopeError, UsageError
from embedscope.study import plan
from embedscope.study.run import run_study

FAST = {"workers": 0, "n_boot": 0, "figures": False, "measures": ["R@1", "rho"]}


def _group_depth_names(items):
    """The naming before: each group of one name took the same number of folders for every file."""
    names = [n for _, n, _, _ in items]
    count: dict[str, int] = {}
    for n in names:
        count[n] = count.get(n, 0) + 1
    renamed = [i for i, (_, n, _, given) in enumerate(items) if not given and count[n] > 1]
    keep = {n for i, n in enumerate(names) if i not in set(renamed)}
    groups: dict[str, list[int]] = {}
    for i in renamed:
        groups.setdefault(names[i], []).append(i)

    def folders(f):
        a = Path(os.path.abspath(f))
        return tuple(reversed(a.parent.parts[1:]))

    out = list(names)
    for n, idx in groups.items():
        depth = max(len(folders(items[i][0])) for i in idx)
        for k in range(1, depth + 1):
            cand = ["/".join([*reversed(folders(items[i][0])[:k]), n]) for i in idx]
            if len(set(cand)) == len(cand) and not keep.intersection(cand):
                break
        for i, c in zip(idx, cand):
            out[i] = c
        keep.update(cand)
    return [(f, out[i], t) for i, (f, _, t, _) in enumerate(items)]


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    """Three untrained digits checkpoints of other weights (torch seeds 1-3), copied into each layout
    (a copy has the same sha256: its embeddings come from the module's cache)."""
    d = tmp_path_factory.mktemp("nets")
    return [save_digits_checkpoint(d / f"n{s}.pt", seed=s) for s in (1, 2, 3)]


def _layout(top: Path, nets, rels) -> Path:
    for net, rel in zip(nets, rels):
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(net, top / rel)
    return top


def _trained(res) -> dict[str, dict]:
    return {r["run"]: r for r in res["rows"] if r["selection"] != "untrained"}


# ------------------------------------------------------------------------------------------ empty --root
def test_shapes_refuses_an_empty_root_instead_of_the_working_folder(tmp_path, monkeypatch):
    from embedscope.data import get_dataset
    from embedscope.data import shapes as S

    monkeypatch.setattr(S, "DEFAULT_N", 24)  # (before the fix: a quick default set generated into the folder)
    monkeypatch.setenv("EMBEDSCOPE_CACHE", str(tmp_path / "cache"))
    shp = S.write_folder(tmp_path / "shp", 24, 16, 0)
    want = "shapes: --root is empty (an unset shell variable?): give the data set's folder (. for the working folder)"
    monkeypatch.chdir(shp)  # a make-shapes folder: "" was read as it, and recorded as no folder
    with pytest.raises(EmbedscopeError) as e:
        get_dataset("shapes", "")
    assert str(e.value) == want
    assert len(get_dataset("shapes", ".")) == 24 and S.rendered_size("") is None  # the working folder, named
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)  # an empty folder: the generated set was cached into it
    with pytest.raises(EmbedscopeError) as e:
        get_dataset("shapes", "")
    assert str(e.value) == want and not list(empty.iterdir())


def test_a_study_refuses_an_empty_root_or_cache_before_any_work(nets, tmp_path):
    src = str(_layout(tmp_path / "ck", nets[:1], ["a.pt"]) / "*.pt")
    out = tmp_path / "study"
    for opt, name in (("--root", "--root"), ("--cache-dir", "--cache-dir")):
        rc, stdout, err = run_cli(["study", src, "-o", out, opt, ""])
        assert rc == 2 and not stdout, err
        assert one_error_line(err, "study").endswith(f"{name}: the name is empty (an unset shell variable?) "
                                                     "(see 'embedscope study --help')")
    with pytest.raises(UsageError, match=r"^--root is empty \(an unset shell variable\?\)"):
        run_study(src, out, root="", **FAST)
    with pytest.raises(UsageError, match=r"^--cache-dir is empty \(an unset shell variable\?\)"):
        run_study(src, out, cache_dir="", **FAST)
    assert not out.exists()


def test_a_study_folder_holding_an_empty_root_resumes_as_no_root(nets, emb_cache, tmp_path):
    src = str(_layout(tmp_path / "ck", nets[:2], ["a.pt", "b.pt"]) / "*.pt")
    out = tmp_path / "study"
    first = run_study(src, out, cache_dir=emb_cache, **FAST)
    # as a study of an earlier version could write it: "" for no folder, in its settings and rows' data
    meta = json.loads((out / "study.json").read_text())
    assert meta["settings"]["root"] is None
    meta["settings"]["root"] = ""
    (out / "study.json").write_text(json.dumps(meta))
    for f in (out / "rows").glob("*.json"):
        r = json.loads(f.read_text())
        r["_data"][1] = ""
        f.write_text(json.dumps(r))
    said: list[str] = []
    again = run_study(src, out, cache_dir=emb_cache, **FAST, echo=said.append)  # was: "other settings (root: -> None)"
    assert again["computed"] == [] and len(again["rows"]) == len(first["rows"]) == 3
    assert any("3 finished earlier, 0 to measure" in s for s in said), said


def test_a_rows_data_of_an_empty_root_is_checked_as_no_folder(tmp_path, monkeypatch):
    from embedscope.data import shapes as S
    from embedscope.study.run import DATA_KEY, _DataCheck, current_fingerprint

    monkeypatch.setattr(S, "DEFAULT_N", 24)
    monkeypatch.setattr(S, "DEFAULT_SIZE", 16)
    monkeypatch.setenv("EMBEDSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    fp = current_fingerprint("shapes", None, None, "g0")
    said: list[str] = []
    check = _DataCheck("g1", said.append)
    assert check({DATA_KEY: ["shapes", "", None, fp]})  # the default set, as measured
    assert not check({DATA_KEY: ["shapes", "", None, "files:0000"]})  # checked: another set is measured again
    check.report()
    assert not check.unlisted and len(said) == 1 and "changed since 1 finished row" in said[0], said


# ------------------------------------------------------------------------------------------- run names
def _names(paths, given=()):
    return [n for _, n, _ in plan._unique_run_names([(Path(p), Path(p).stem, {}, p in given) for p in paths])]


def test_each_file_of_one_name_takes_its_own_shortest_unique_name():
    assert _names(["/r/p/x/net.pt", "/r/q/x/net.pt", "/r/r/y/net.pt"]) == ["p/x/net", "q/x/net", "y/net"]
    # a file added renames only the file it clashes with (it renamed every file of the group)
    assert _names(["/r/e1/a/model.pt", "/r/e1/b/model.pt"]) == ["a/model", "b/model"]
    assert _names(["/r/e1/a/model.pt", "/r/e1/b/model.pt", "/r/e2/a/model.pt"]) == [
        "e1/a/model", "b/model", "e2/a/model"]
    assert _names(["/r/e1/a/model.pt", "/r/e1/b/model.pt", "/r/e2/other.pt"]) == ["a/model", "b/model", "other"]
    # files of one folder that differ in the extension keep it; a file nested deeper than another
    assert _names(["/r/a/m.pt", "/r/a/m.pth", "/r/b/m.pt"]) == ["a/m.pt", "m.pth", "b/m"]
    assert _names(["/x/model.pt", "/y/x/model.pt"]) == ["x/model", "y/x/model"]


def test_run_names_are_unique_and_each_the_shortest_suffix_of_its_path():
    rng = random.Random(0)
    for _ in range(200):
        paths = sorted({"/" + "/".join(rng.choice("abc") for _ in range(rng.randint(1, 4))) + "/"
                        + rng.choice(["m", "n"]) + ".pt" for _ in range(rng.randint(2, 9))})
        names = _names(paths)
        assert len(set(names)) == len(names), (paths, names)
        for p, name in zip(paths, names):
            parts = p[1:-3].split("/")
            same = [q[1:-3].split("/") for q in paths if q != p and Path(q).stem == Path(p).stem]
            if not same:
                assert name == parts[-1]
                continue
            # the fewest trailing folders no other file of that name shares (all of them: the whole path)
            for k in range(2, len(parts) + 1):
                if all(q[-k:] != parts[-k:] for q in same):
                    break
            assert name == "/".join(parts[-k:]), (paths, p, name)


# ------------------------------------------------------------------------ rows of checkpoints renamed since
def test_a_file_added_renames_its_clash_and_the_renamed_rows_are_read_back(nets, emb_cache, tmp_path):
    top = _layout(tmp_path / "top", nets[:2], ["a/model.pt", "b/model.pt"])
    src, out = str(top / "**" / "model.pt"), tmp_path / "study"
    first = _trained(run_study(src, out, cache_dir=emb_cache, **FAST))
    assert sorted(first) == ["a/model", "b/model"]
    _layout(top, nets[2:], ["c/a/model.pt"])  # another a/model: only the first one takes a folder more
    said: list[str] = []
    res = run_study(src, out, cache_dir=emb_cache, **FAST, echo=said.append)
    rows = _trained(res)
    assert sorted(rows) == ["b/model", "c/a/model", "top/a/model"]
    assert [r["run"] for r in res["computed"]] == ["c/a/model"]  # the two rows of before: read back
    for run, was in (("top/a/model", "a/model"), ("b/model", "b/model")):  # the same checkpoint's numbers
        assert rows[run]["checkpoint"] == first[was]["checkpoint"] and rows[run]["R@1"] == first[was]["R@1"]
        assert rows[run]["id"] == plan._safe(f"{run}@given")
    assert rows["c/a/model"]["R@1"] != rows["top/a/model"]["R@1"]  # (other weights: a row of its own)
    assert any("1 finished row of checkpoints named otherwise" in s and "a/model -> top/a/model" in s
               for s in said), said
    # the row file under its new id, the old one gone; runs.csv the rows now
    assert not (out / "rows" / "a_model_given.json").exists()
    assert json.loads((out / "rows" / "top_a_model_given.json").read_text())["run"] == "top/a/model"
    assert sorted(pd.read_csv(out / "runs.csv")["id"]) == sorted(r["id"] for r in res["rows"])
    again = run_study(src, out, cache_dir=emb_cache, **FAST)
    assert again["computed"] == [] and sorted(_trained(again)) == sorted(rows)


def test_a_study_of_the_group_depth_naming_resumes_without_measuring(nets, emb_cache, tmp_path, monkeypatch):
    top = _layout(tmp_path / "top", nets, ["p/x/net.pt", "q/x/net.pt", "r/y/net.pt"])
    src, out = str(top / "*" / "*" / "net.pt"), tmp_path / "study"
    with monkeypatch.context() as m:
        m.setattr(plan, "_unique_run_names", _group_depth_names)
        old = _trained(run_study(src, out, cache_dir=emb_cache, **FAST))
    assert sorted(old) == ["p/x/net", "q/x/net", "r/y/net"]
    res = run_study(src, out, cache_dir=emb_cache, **FAST)
    rows = _trained(res)
    assert sorted(rows) == ["p/x/net", "q/x/net", "y/net"] and res["computed"] == []
    assert rows["y/net"]["R@1"] == old["r/y/net"]["R@1"] and rows["y/net"]["checkpoint"] == old["r/y/net"]["checkpoint"]
    assert set(pd.read_csv(out / "runs.csv")["run"]) >= {"p/x/net", "q/x/net", "y/net"}
    assert sorted(p.name for p in (out / "rows").glob("*_given.json")) == [
        "p_x_net_given.json", "q_x_net_given.json", "y_net_given.json"]


def test_a_renamed_row_is_never_read_back_for_another_checkpoint(nets, emb_cache, tmp_path):
    top = _layout(tmp_path / "top", nets[:2], ["a/model.pt", "b/model.pt"])
    src, out = str(top / "**" / "model.pt"), tmp_path / "study"
    first = _trained(run_study(src, out, cache_dir=emb_cache, **FAST))
    shutil.copy2(nets[2], top / "a" / "model.pt")  # another network at the path, which is renamed too
    os.utime(top / "a" / "model.pt", ns=(1, 1))
    _layout(top, nets[:1], ["c/a/model.pt"])  # the network a/model.pt was, at another path
    res = run_study(src, out, cache_dir=emb_cache, **FAST)
    assert sorted(r["run"] for r in res["computed"]) == ["c/a/model", "top/a/model"]  # both measured
    rows = _trained(res)
    assert rows["c/a/model"]["R@1"] == first["a/model"]["R@1"] != rows["top/a/model"]["R@1"]


# --------------------------------------------------------------------------------------------- tags
def test_tags_edited_in_the_yaml_list_are_taken_by_the_finished_rows(nets, emb_cache, tmp_path):
    top = _layout(tmp_path / "top", nets[:2], ["a.pt", "b.pt"])
    y = top / "list.yaml"
    y.write_text("checkpoints:\n  - {path: a.pt, opt: adam}\n  - {path: b.pt, opt: adam, lr: 0.1}\n")
    out = tmp_path / "study"
    first = _trained(run_study(y, out, cache_dir=emb_cache, **FAST))
    assert first["a"]["tag:opt"] == "adam" and "tag:lr" not in first["a"] and first["b"]["tag:lr"] == 0.1
    y.write_text("checkpoints:\n  - {path: a.pt, opt: sgd, lr: 0.5}\n  - {path: b.pt, opt: adam, lr: 0.1}\n")
    said: list[str] = []
    res = run_study(y, out, cache_dir=emb_cache, **FAST, echo=said.append)  # they kept the tags of before
    rows = _trained(res)
    assert res["computed"] == [] and (rows["a"]["tag:opt"], rows["a"]["tag:lr"]) == ("sgd", 0.5)
    assert rows["a"]["R@1"] == first["a"]["R@1"] and rows["b"]["R@1"] == first["b"]["R@1"]
    assert (rows["b"]["tag:opt"], rows["b"]["tag:lr"]) == ("adam", 0.1)
    assert any("the tags of 1 finished row changed" in s for s in said), said
    assert not any("statistics are up to date" in s for s in said), said  # the tables: of the tags now
    t = pd.read_csv(out / "runs.csv").set_index("run")
    assert t.loc["a", "tag:opt"] == "sgd" and t.loc["a", "tag:lr"] == 0.5
    assert json.loads((out / "rows" / "a_given.json").read_text())["tag:opt"] == "sgd"
    said.clear()
    again = run_study(y, out, cache_dir=emb_cache, **FAST, echo=said.append)
    assert again["computed"] == [] and any("statistics are up to date" in s for s in said), said


# ------------------------------------------------------------------------------------ the terminal's notes
def test_the_terminal_says_intervals_over_three_objectives_are_a_sketch(nets, emb_cache, tmp_path):
    src = str(_layout(tmp_path / "top", nets, ["a.pt", "b.pt", "c.pt"]) / "*.pt")
    args = ["study", src, "-o", tmp_path / "study", "--cache-dir", emb_cache, "--workers", "0", "--no-figures",
            "--no-progress", "--measures", "R@1", "rho"]
    rc, out, err = run_cli([*args, "--bootstrap", "20"])
    assert rc == 0, err
    assert "3 runs, 3 objectives" in out  # (the report says it above its table; the terminal printed lo, hi alone)
    assert ("note: only 3 objectives: 78% of the bootstrap resamples of 3 points hold at most two distinct points "
            "(r = ±1, or not defined), so lo and hi over objectives are not meaningful") in out
    rc, out, err = run_cli([*args, "--bootstrap", "0"])  # no intervals: nothing to say (the rows read back)
    assert rc == 0 and "note: only" not in out, (out, err)


def test_a_row_is_judged_once_when_resumed(nets, emb_cache, tmp_path, monkeypatch):
    from embedscope.study import run as R

    top = _layout(tmp_path / "top", nets[:2], ["a/model.pt", "b/model.pt"])
    src, out = str(top / "*" / "model.pt"), tmp_path / "study"
    run_study(src, out, cache_dir=emb_cache, **FAST)
    seen: list[str] = []
    real = R._DataCheck.__call__

    def spy(self, row):
        seen.append(row["id"])
        return real(self, row) and False  # as if the data changed: every row is measured again

    monkeypatch.setattr(R._DataCheck, "__call__", spy)
    res = run_study(src, out, cache_dir=emb_cache, **FAST)
    assert len(res["computed"]) == 3 and sorted(seen) == sorted(r["id"] for r in res["rows"])  # each row once
