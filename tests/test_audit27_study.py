"""Audit 27 (helper F): the study and its report used for real on a digits grid.

A YAML list with errors (tags that are not a mapping, a path that is not text, a non-UTF-8 file, a
key given twice, a tag that is a mapping, the same checkpoint twice, an unknown top-level key) is one
line naming the item, not a ValueError / AttributeError / UnicodeDecodeError or a checkpoint counted
as two runs; the seed-spread ratio of a measure equal at every objective up to rounding is not
1e14; ``--exclude 'normalize==true'`` leaves out what ``normalize==True`` does, and an ``--exclude``
that leaves out nothing is said; the report names a train target in the Fig.-5 caption and shows a
tag that tells objectives apart in the runs table."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from cli_run import one_error_line, run_cli

from embedscope.errors import EmbedscopeError
from embedscope.study.plan import _sources

html5lib = pytest.importorskip("html5lib")


# ------------------------------------------------------------------------------------------------ YAML
@pytest.fixture()
def ckpts(tmp_path):
    """Two files named .pt (the YAML reader does not open them)."""
    d = tmp_path / "ck"
    d.mkdir()
    for n in ("a", "b"):
        (d / f"{n}.pt").write_bytes(b"x")
    return d


YAML_ERRORS = [
    ("checkpoints:\n  - path: ck/a.pt\n    tags: [x, y]\n", "item 1: 'tags' must be a mapping (name: value), got a list"),
    ("checkpoints:\n  - path: ck/a.pt\n    tags: hello\n", "item 1: 'tags' must be a mapping (name: value), got 'hello'"),
    ("checkpoints:\n  - path: ck/a.pt\n  - path: null\n", "item 2: 'path' must be the checkpoint's file path, got empty"),
    ("checkpoints:\n  - path: 12\n", "item 1: 'path' must be the checkpoint's file path, got 12"),
    ("checkpoints:\n  - path: [ck/a.pt]\n", "item 1: 'path' must be the checkpoint's file path, got a list"),
    ("checkpoints:\n  - {path: ck/a.pt, 3: x}\n", "item 1: a tag is named by text, got the key 3"),
    ("checkpoints:\n  - path: ck/a.pt\n    name: [x]\n", "item 1: 'name' must be the run's name (text), got a list"),
    ("checkpoints:\n  - path: ck/a.pt\n    grp: [1, 2]\n",
     "item 1: the tag 'grp' must be one value (text or a number), got a list"),
    ("checkpoints:\n  - path: ck/a.pt\n    tag: {loss: margin}\n",
     "item 1: the tag 'tag' must be one value (text or a number), got a mapping (for several tags write 'tags:')"),
    ("checkpoints:\n  - path: ck/a.pt\n  - path: ck/b.pt\n  - path: ./ck/../ck/a.pt\n",
     "items 1 and 3 name the same checkpoint file"),
    ("checkpoints:\n  - path: ck/a.pt\n    path: ck/b.pt\n",
     "not valid YAML (the key 'path' is given twice in one mapping at line 3, column 5)"),
    ("checkpoint:\n  - path: ck/a.pt\n", "unknown key 'checkpoint' (a study list has one key, 'checkpoints'"),
    ("checkpoints:\n  - path: ck/a.pt\n   - path: ck/b.pt\n", "not valid YAML (expected <block end>, but found "),
]


@pytest.mark.parametrize("text,msg", YAML_ERRORS)
def test_a_yaml_list_with_errors_is_one_line_naming_the_item(tmp_path, ckpts, text, msg):
    y = tmp_path / "list.yaml"
    y.write_text(text, encoding="utf-8")
    with pytest.raises(EmbedscopeError) as e:
        _sources(y)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_a_yaml_file_that_is_not_utf8_is_named(tmp_path, ckpts):
    y = tmp_path / "list.yaml"
    raw = b"checkpoints:\n  - path: ck/a.pt\n    lo\xe9ss: x\n"
    y.write_bytes(raw)
    at = raw.index(0xE9)
    with pytest.raises(EmbedscopeError, match=rf"is not UTF-8 text \(byte 0xe9 at offset {at}\)"):
        _sources(y)


def test_yaml_errors_on_the_command_line_are_one_line_exit_1(tmp_path, ckpts):
    """Before: 'ValueError: dictionary update sequence element #0 ...', 'AttributeError: 'int' object has
    no attribute 'startswith'', 'UnicodeDecodeError: ...'; and a checkpoint listed twice was measured as
    two runs of one objective."""
    cases = {"tags.yaml": b"checkpoints:\n  - path: ck/a.pt\n    tags: [x]\n",
             "key.yaml": b"checkpoints:\n  - {path: ck/a.pt, 3: x}\n",
             "latin1.yaml": b"checkpoints:\n  - path: ck/a.pt\n    lo\xe9ss: x\n",
             "twice.yaml": b"checkpoints:\n  - ck/a.pt\n  - ck/a.pt\n"}
    for name, raw in cases.items():
        (tmp_path / name).write_bytes(raw)
        rc, _, err = run_cli(["study", str(tmp_path / name), "-o", str(tmp_path / f"s_{name}"), "--workers", "0",
                              "--no-progress"])
        line = one_error_line(err, "study")
        assert rc == 1 and name in line and "Error:" not in line, line
        assert not (tmp_path / f"s_{name}").exists()


def test_a_good_yaml_list_reads_as_before(tmp_path, ckpts):
    """Tags under tags: and beside path, a name, a bare path, a null tag and a date tag (its ISO text)."""
    y = tmp_path / "list.yaml"
    y.write_text("checkpoints:\n  - path: ck/a.pt\n    tags: {loss: margin, seed: 0}\n    name: A\n"
                 "    when: 2024-05-01\n  - ck/b.pt\n  - path: ck/../ck/b2.pt\n    objective:\n", encoding="utf-8")
    (ckpts / "b2.pt").write_bytes(b"y")
    (a, na, ta), (b, nb, tb), (c, nc, tc) = _sources(y)
    assert (na, ta) == ("A", {"loss": "margin", "seed": 0, "when": "2024-05-01"})
    assert (nb, tb) == ("b", {}) and b == tmp_path / "ck" / "b.pt"
    assert (nc, tc) == ("b2", {"objective": None})


# ------------------------------------------------------------------------------------- statistics
def _rows(r4_equal=True, normalize=True):
    """Two objectives of two seeds; R@4's objective means equal up to rounding (0.1 + 0.2 vs 0.3)."""
    rng = np.random.default_rng(0)
    rows = []
    r4 = {("margin", 0): 0.1 + 0.2, ("margin", 1): 0.3, ("triplet", 0): 0.25, ("triplet", 1): 0.35}
    for loss in ("margin", "triplet", "contrastive"):
        for s in (0, 1):
            rows.append({"id": f"{loss}_s{s}", "run": f"{loss}_s{s}", "selection": "best", "status": "ok",
                         "loss": loss, "seed": s, "normalize": normalize, "untrained": "", "epoch": 2,
                         "dataset": "digits", "checkpoint": f"/c/{loss}_s{s}.pt", "sha256": "ab" * 32,
                         "R@4": r4.get((loss, s), 0.3) if r4_equal else float(rng.uniform()),
                         **{m: float(rng.uniform(0.2, 0.9)) for m in ("R@1", "rho")}})
    return rows


def test_the_seed_spread_of_a_measure_equal_at_every_objective_is_not_a_huge_ratio(tmp_path):
    """On the digits grid R@4's objective means were 0.9592633928571428 and ...429: the robustness table
    showed 'seed sd / between-objective sd' = 71083165988010.781. Equal up to rounding: no spread
    between objectives (0), no ratio (NaN, '–' in the report), as every other statistic of a constant."""
    import pandas as pd

    from embedscope.study.stats import study_statistics

    rows = _rows()
    means = {}
    for r in rows:
        means.setdefault(r["loss"], []).append(r["R@4"])
    m = [float(np.mean(v)) for v in means.values()]
    assert len(set(m)) > 1 and max(m) - min(m) < 1e-15  # equal up to the last bit, not exactly
    st = study_statistics(pd.DataFrame(rows), n_boot=0, splits={"R@1": "test", "R@4": "test", "rho": "train"})
    rob = st["robustness"]["R@4"]
    assert rob["sd_between_objectives"] == 0.0 and np.isnan(rob["seed_spread_ratio"])
    assert np.isfinite(st["robustness"]["rho"]["seed_spread_ratio"])  # a measure that varies keeps its ratio


def test_exclude_true_false_in_any_case(tmp_path):
    """'normalize==true' (as YAML and JSON write it) left nothing out while 'normalize==True' left out
    every normalised run."""
    import pandas as pd

    from embedscope.study.stats import study_statistics

    rows = _rows(r4_equal=False)
    for r in rows[:2]:
        r["normalize"] = False
    splits = {"R@1": "test", "R@4": "test", "rho": "train"}
    for expr in ("normalize==false", "normalize==FALSE", "normalize==False", "normalize==0"):
        st = study_statistics(pd.DataFrame(rows), n_boot=0, exclude=[expr], splits=splits)
        assert st["n_points"]["excluded"] == 2 and st["n_points"]["runs"] == 4, expr
        assert st["exclude_unmatched"] == {}
    st = study_statistics(pd.DataFrame(rows), n_boot=0, exclude=["normalize!=true"], splits=splits)
    assert st["n_points"]["excluded"] == 2
    st = study_statistics(pd.DataFrame(rows), n_boot=0, exclude=["loss==true"], splits=splits)  # text stays text
    assert st["n_points"]["excluded"] == 0


def test_an_exclude_that_leaves_out_nothing_is_said(tmp_path):
    """A misspelt value ('loss==contrastiv') left nothing out without a word; now a note (terminal and
    report) names it with the values the runs hold (or their range for a comparison)."""
    import pandas as pd

    from embedscope.study.stats import study_notes, study_statistics

    rows = _rows(r4_equal=False)
    st = study_statistics(pd.DataFrame(rows), n_boot=0, exclude=["loss==contrastiv", "rho<0.1", "seed==1"],
                          splits={"R@1": "test", "R@4": "test", "rho": "train"})
    assert st["n_points"]["excluded"] == 3
    notes = study_notes(st)
    assert "--exclude 'loss==contrastiv' leaves out no run (the runs' values of loss: contrastive, margin, " \
           "triplet)" in notes
    lo, hi = min(r["rho"] for r in rows), max(r["rho"] for r in rows)
    assert f"--exclude 'rho<0.1' leaves out no run (the runs' rho is from {lo:.4g} to {hi:.4g})" in notes
    assert not any("seed==1" in n for n in notes)
    assert json.loads(json.dumps(st["exclude_unmatched"], default=float))  # JSON-able (correlations.json)


def test_the_unmatched_exclude_note_is_read_back(tmp_path):
    """The note comes from correlations.json too (the report, a study whose statistics are reused)."""
    from embedscope.study.run import finish_study

    d = tmp_path / "study"
    d.mkdir()
    st = finish_study(d, _rows(r4_equal=False), n_boot=0, seed=1, figures=False, exclude=["loss==lifted"])["stats"]
    from embedscope.study.stats import study_notes

    assert study_notes(st)[0] == "--exclude 'loss==lifted' leaves out no run (the runs' values of loss: " \
                                 "contrastive, margin, triplet)"
    saved = json.loads((d / "correlations.json").read_text())
    assert study_notes(saved)[0] == study_notes(st)[0]  # read back, as the report and a reused study do


# ------------------------------------------------------------------------------------------- report
def _page(tmp_path, rows, **kw) -> str:
    from test_audit_report import _page as parsed_page  # the page, read by a strict HTML5 parser without an error

    from embedscope.study.run import finish_study

    d = tmp_path / "study"
    d.mkdir()
    finish_study(d, rows, n_boot=0, seed=1, **kw)
    (d / "study.json").write_text(json.dumps({"settings": {"source": "runs/", "epoch": "best", "metric": "cosine",
                                                           "seed": 1, "device": "cpu"}, "versions": {}}))
    return parsed_page(d)


def test_the_fig5_caption_names_a_train_target(tmp_path):
    """--target rho: the figure says 'train rho'; its caption on the page said 'vs test target'."""
    rows = _rows(r4_equal=False)
    for r in rows:
        r["pi_ratio"] = r["rho"] * 0.5 + r["R@4"]
    text = _page(tmp_path, rows, target="rho", figures=True)
    caps = re.findall(r"<figcaption[^>]*>(.*?)</figcaption>", text)
    assert "Fig. 5 layout: training-set structure vs train rho, one point per objective" in caps
    assert not any("test target" in c for c in caps)


def test_a_tag_that_tells_objectives_apart_has_its_column(tmp_path):
    """A YAML tag given on one entry only (note: x) is an axis (x vs none: two objectives); the runs
    table showed the tags with two non-empty values only, so not this one."""
    rows = _rows(r4_equal=False)
    rows[0]["tag:note"] = "<b>x</b>"
    text = _page(tmp_path, rows, figures=False)
    doc = html5lib.parse(text, namespaceHTMLElements=False)
    for t in doc.iter("table"):
        head = ["".join(c.itertext()) for c in t.find("thead").iter("th")]
        if head[:1] == ["id"] and "objective" in head:
            assert "note" in head
            i = head.index("note")
            cells = {"".join(r[0].itertext()): "".join(r[i].itertext()) for r in t.find("tbody").findall("tr")}
            assert cells["margin_s0"] == "<b>x</b>" and cells["margin_s1"] in ("–", "")
            break
    else:
        raise AssertionError("no runs table")
    assert "&lt;b&gt;x&lt;/b&gt;" in text and "<b>x</b>" not in text


def test_a_setting_missing_in_some_runs_of_a_loss_is_an_axis():
    """A margin run without backbone weights and one with them are two objectives, never two seeds of
    one. With pandas 3, ``astype(str)`` keeps None missing and ``nunique``/``groupby`` left it out, so
    the weights looked "fixed by the loss" and were dropped from the axes: the runs were averaged."""
    import pandas as pd

    from embedscope.study.stats import study_statistics

    rows = _rows(r4_equal=False)
    for r in rows:
        r["weights"] = None
    rows[1]["weights"] = "/w/imagenet.pth"  # margin seed 1
    st = study_statistics(pd.DataFrame(rows), n_boot=0, splits={"R@1": "test", "R@4": "test", "rho": "train"})
    assert "weights" in st["axes"]
    assert sorted(o["objective"] for o in st["objectives"]) == [
        "contrastive weights=None", "margin weights=/w/imagenet.pth", "margin weights=None", "triplet weights=None"]
    # a setting the loss does fix (miner None for one loss only) stays out of the axes
    for r in rows:
        r["weights"] = None
        r["miner"] = None if r["loss"] == "contrastive" else "distance"
    st = study_statistics(pd.DataFrame(rows), n_boot=0, splits={"R@1": "test", "R@4": "test", "rho": "train"})
    assert st["axes"] == ["loss"]


def test_report_of_an_interrupted_study_says_how_to_finish_it(tmp_path):
    """A study stopped by Ctrl-C leaves study.json and rows/ but no tables; the report said 'not a
    finished study folder (no correlations.json; run 'embedscope study' first)', as for a folder that
    never held a study."""
    d = tmp_path / "st"
    (d / "rows").mkdir(parents=True)
    (d / "study.json").write_text("{}")
    (d / "rows" / "a_best.json").write_text("{}")
    rc, _, err = run_cli(["report", d, "-o", tmp_path / "r.html"])
    assert rc == 1 and one_error_line(err, "report").endswith(
        "st: an unfinished study (1 row measured, no correlations.json): run the same 'embedscope study' command "
        "again to finish it")
    other = tmp_path / "other"
    other.mkdir()
    rc, _, err = run_cli(["report", other, "-o", tmp_path / "r.html"])
    assert rc == 1 and one_error_line(err, "report").endswith(
        "other: not a finished study folder (no study.json; run 'embedscope study' first)")
