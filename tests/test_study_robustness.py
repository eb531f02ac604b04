"""study / report / make-shapes / train-grid on bad input: a corrupt or foreign study folder, an
output folder that cannot be written, options checked before any work, duplicate grid values.
Each is one line on stderr with the right exit code, never an exception's class name, and nothing
is created (or lost) where it should not be."""

import os
import re
import shutil
from pathlib import Path

import pytest

from embedscope.cli import main
from embedscope.study.run import run_study

MEASURES = ["R@1", "rho"]
RAW = re.compile(r"\b[A-Z]\w*(Error|Exception)\b|Errno|Traceback")


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    from embedscope.train.grid import train_grid

    d = tmp_path_factory.mktemp("grid") / "runs"
    train_grid("digits", ["contrastive", "softmax"], [0.0], [0], d,
               options={"embed_dim": 8, "epochs": 1, "eval_every": 1}, progress=False, echo=lambda s: None)
    return d


@pytest.fixture(scope="module")
def finished(grid, emb_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("s") / "study"
    run_study(grid, out, workers=0, cache_dir=emb_cache, n_boot=5, measures=MEASURES, figures=False, echo=lambda s: None)
    return out


@pytest.fixture
def study(finished, tmp_path):
    """A copy of the finished study, free to damage."""
    d = tmp_path / "study"
    shutil.copytree(finished, d)
    return d


def _args(grid, out, emb_cache, *more):
    return ["study", str(grid), "-o", str(out), "--workers", "0", "--cache-dir", str(emb_cache), "--bootstrap", "5",
            "--measures", *MEASURES, "--no-figures", "--no-progress", *more]


def run(argv) -> int:
    """The command's exit code (argparse's usage errors exit through SystemExit)."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def one_line(capsys, *needles):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert not RAW.search(err), err
    for n in needles:
        assert n in err, err
    return err


def _rows(study):
    return sorted((p.name, p.read_bytes()) for p in (study / "rows").iterdir())


# 1. a corrupt or foreign study folder

def _measured(study):
    """The rows as measured: without the checkpoint's fingerprint, which a row reused on its sha256 (a checkpoint
    changed just before it was measured, a row of an earlier version) takes as the file is now."""
    import json

    return [(name, {k: v for k, v in json.loads(text).items() if k != "_checkpoint_stat"})
            for name, text in _rows(study)]


def test_unreadable_runs_csv_of_a_finished_study_is_computed_again(study, grid, emb_cache, capsys):
    (study / "runs.csv").write_text("foo\n1\n")
    rows = _measured(study)
    assert run(_args(grid, study, emb_cache)) == 0, capsys.readouterr().err
    assert (study / "runs.csv").read_text().startswith("id,")
    assert _measured(study) == rows  # the finished rows were kept, not measured again


@pytest.mark.parametrize("text", ["{bad", "[1, 2]", "{}"])
def test_unreadable_correlations_json(study, grid, emb_cache, capsys, text):
    (study / "correlations.json").write_text(text)
    page = study.parent / "page.html"
    assert run(["report", str(study), "-o", str(page)]) == 1
    err = one_line(capsys, "correlations.json")
    if text == "{bad":
        assert "not valid JSON" in err
    assert not page.exists()
    # the study itself computes it again from its rows
    assert run(_args(grid, study, emb_cache)) == 0, capsys.readouterr().err
    assert run(["report", str(study), "-o", str(page)]) == 0
    assert page.exists()


def test_unreadable_study_json(study, grid, emb_cache, capsys):
    (study / "study.json").write_text("{bad")
    rows = _rows(study)
    assert run(_args(grid, study, emb_cache)) == 1
    one_line(capsys, "study.json", "not valid JSON", "--force")
    assert _rows(study) == rows and (study / "study.json").read_text() == "{bad"
    assert run(["report", str(study), "-o", str(study.parent / "page.html")]) == 1
    one_line(capsys, "study.json", "not valid JSON")
    assert not (study.parent / "page.html").exists()
    (study / "study.json").write_text("[]")
    assert run(_args(grid, study, emb_cache)) == 1
    one_line(capsys, "study.json", "--force")
    assert run(_args(grid, study, emb_cache, "--force")) == 0, capsys.readouterr().err
    assert (study / "study.json").read_text().startswith("{")


def test_report_of_a_foreign_runs_csv(study, capsys):
    (study / "runs.csv").write_text("foo\n1\n")
    assert run(["report", str(study), "-o", str(study.parent / "page.html")]) == 1
    one_line(capsys, "runs.csv", "'id'")


# 2. an output folder that cannot be written

def _no_work(monkeypatch):
    """Rendering, planning or training fails the test: the error must come before any of it."""
    import embedscope.data.shapes
    import embedscope.study.plan
    import embedscope.train.trainer

    def boom(*a, **k):
        raise AssertionError("work started before the output folder was checked")

    monkeypatch.setattr(embedscope.data.shapes, "generate", boom)
    monkeypatch.setattr(embedscope.study.plan, "plan_study", boom)
    monkeypatch.setattr(embedscope.train.trainer, "train", boom)


def _commands(grid, emb_cache, out):
    return {"make-shapes": ["make-shapes", "-o", out, "--n-images", "3", "--size", "16", "--no-progress"],
            "study": _args(grid, out, emb_cache),
            "train-grid": ["train-grid", "--dataset", "digits", "--losses", "margin", "--epochs", "0",
                           "--embed-dim", "8", "-o", out, "--no-progress"]}


@pytest.mark.parametrize("command", ["make-shapes", "study", "train-grid"])
def test_a_file_as_a_parent_of_the_output_folder(tmp_path, grid, emb_cache, capsys, monkeypatch, command):
    _no_work(monkeypatch)
    f = tmp_path / "m.h5"
    f.write_bytes(b"data")
    assert run(_commands(grid, emb_cache, str(f / "sub"))[command]) == 1
    one_line(capsys, "is a file, not a folder")
    assert f.read_bytes() == b"data" and sorted(os.listdir(tmp_path)) == ["m.h5"]


@pytest.fixture
def readonly_dir(tmp_path):
    """A folder this process cannot write to: mode 0555 for a normal user; as root (which ignores
    modes) sysfs, where nobody can create a file."""
    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o555)
        yield d
        d.chmod(0o755)
        return
    d = Path("/sys")
    probe = d / "embedscope-probe"
    try:
        probe.touch()
    except OSError:
        yield d
        return
    probe.unlink()
    pytest.skip("no folder here refuses root's writes")


@pytest.mark.parametrize("command", ["make-shapes", "study", "train-grid"])
def test_an_unwritable_output_folder(readonly_dir, grid, emb_cache, capsys, monkeypatch, command):
    _no_work(monkeypatch)
    assert run(_commands(grid, emb_cache, str(readonly_dir / "x"))[command]) == 1
    one_line(capsys, "cannot write there", "is not writable")
    assert not (readonly_dir / "x").exists()


# 3. study's options are checked before any work

@pytest.mark.parametrize("more, code, needle", [
    (["--dataset", "bogus"], 2, "unknown data set 'bogus'"),
    (["--bootstrap", "-5"], 2, "--bootstrap"),
    (["--target", "bogus"], 2, "--target"),
    (["--cache-dir", "FILE"], 1, "not a folder"),
])
def test_study_options_are_checked_first(tmp_path, grid, emb_cache, capsys, monkeypatch, more, code, needle):
    _no_work(monkeypatch)
    f = tmp_path / "file"
    f.write_text("x")
    more = [str(f) if m == "FILE" else m for m in more]
    out = tmp_path / "out"
    assert run([*_args(grid, out, emb_cache), *more]) == code
    one_line(capsys, needle)
    assert not out.exists() and f.read_text() == "x"


def test_study_bootstrap_zero_means_no_intervals(study, grid, emb_cache, capsys):
    import json

    assert run([*_args(grid, study, emb_cache), "--bootstrap", "0"]) == 0, capsys.readouterr().err
    assert json.loads((study / "study.json").read_text())["n_boot"] == 0


# 4. train-grid refuses a value given twice

@pytest.mark.parametrize("more, needle", [
    (["--losses", "margin", "margin"], "--losses lists margin twice"),
    (["--losses", "margin", "--p-switch", "0", "0.2", "0.20"], "--p-switch"),
    (["--losses", "margin", "--seeds", "1", "2", "1"], "--seeds lists 1 twice"),
])
def test_train_grid_refuses_duplicates(tmp_path, capsys, monkeypatch, more, needle):
    _no_work(monkeypatch)
    out = tmp_path / "grid"
    assert run(["train-grid", "--dataset", "digits", *more, "--epochs", "0", "--embed-dim", "8", "-o", str(out),
                 "--no-progress"]) == 2
    one_line(capsys, needle)
    assert not out.exists()


# 5. the figures a study says it wrote are the ones of its statistics

def test_figures_listed_only_when_drawn(study, grid, emb_cache, capsys, tmp_path):
    import json

    args = [a for a in _args(grid, study, emb_cache) if a != "--no-figures"]
    assert run(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "figures/ (fig5_structure_vs_target" in out, out
    assert json.loads((study / "correlations.json").read_text())["figures"]
    assert (study / "figures" / "fig5_structure_vs_target.png").exists()

    # one objective left: no figures drawn, none claimed, and the report does not show the earlier ones
    assert run([*args, "--exclude", "loss=softmax"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "figures/" not in out and "no figures: they need at least 2 objectives" in out, out
    assert json.loads((study / "correlations.json").read_text())["figures"] == []
    assert (study / "figures" / "fig5_structure_vs_target.png").exists()  # an earlier output is not deleted
    page = tmp_path / "r.html"  # but the report does not show it beside statistics it was not drawn from
    assert run(["report", str(study), "-o", str(page)]) == 0, capsys.readouterr().err
    assert "<img" not in page.read_text()


@pytest.mark.parametrize("expr", ["loss==", "p_switch=>0", "p_switch>nan", "loss>lifted"])
def test_bad_exclude_refused_before_any_work(tmp_path, grid, emb_cache, capsys, monkeypatch, expr):
    _no_work(monkeypatch)
    out = tmp_path / "s"
    assert run([*_args(grid, out, emb_cache), "--exclude", expr]) == 2
    one_line(capsys, "--exclude")
    assert not out.exists()


def test_a_retrained_checkpoint_is_measured_again(grid, emb_cache, tmp_path):
    """A finished row is reused only for the same checkpoint file: one replaced at the same path (a
    retrained run) is measured again; one only touched (same bytes) is not."""
    import json

    ck = tmp_path / "ck"
    ck.mkdir()
    for name in ("digits_contrastive_p0_s0.pt", "digits_softmax_p0_s0.pt"):
        shutil.copy(grid / name, ck / name)
    out = tmp_path / "study"
    kw = dict(workers=0, cache_dir=emb_cache, n_boot=5, measures=MEASURES, figures=False, echo=lambda s: None)
    first = run_study(str(ck / "*.pt"), out, **kw)
    assert len(first["computed"]) == 3  # two checkpoints + their untrained reference
    os.utime(ck / "digits_softmax_p0_s0.pt")  # touched: the same bytes
    assert run_study(str(ck / "*.pt"), out, **kw)["computed"] == []
    shutil.copy(grid / "digits_contrastive_p0_s0.pt", ck / "digits_softmax_p0_s0.pt")  # "retrained"
    again = run_study(str(ck / "*.pt"), out, **kw)
    assert [r["id"] for r in again["computed"]] == ["digits_softmax_p0_s0_given"]
    row = json.loads((out / "rows" / "digits_softmax_p0_s0_given.json").read_text())
    contrastive = json.loads((out / "rows" / "digits_contrastive_p0_s0_given.json").read_text())
    assert row["sha256"] == contrastive["sha256"] and row["R@1"] == contrastive["R@1"]
    assert "_checkpoint_stat" not in (out / "runs.csv").read_text()
