"""Audit of how the options of `embedscope study` / `report` interact (docs/studies.md):

* ``--workers 0 --worker-processes`` ran serially without a word (the flag silently ignored);
* ``--measures`` naming only the target measured every checkpoint for an empty table;
* ``--exclude`` on a measure that ``--measures`` leaves out was refused only after every checkpoint
  was embedded and measured; so were ``--exclude 'objective==…'`` / ``'primary==…'`` (columns the
  early check accepts) and ``'excluded==…'`` (the column --exclude itself makes);
* ``--root`` with digits checkpoints (or ``--dataset digits``) made every row an error after the work;
* a glob (or YAML list) naming a trainer run's ``X.pt`` and files of its ``X.pt.train/`` folder
  counted the same run up to five times, the untrained ``epoch-000.pt`` as a trained run;
* ``--target`` of a training-set measure (rho) was labelled "test rho" on the terminal, in the report,
  the figures and the notes, and the untrained comparison took "higher" as better for every target
  (a lower rho is the better one; pi_intra has no direction);
* ``--exclude 'NR-Prec:hue<0'`` / ``'tag:group==a'`` could not be parsed (no ':' in a column name), and
  ``'loss==margin'`` on YAML tags ``loss: margin`` of checkpoints that record no loss left nothing out;
* the same command run again printed ``None`` for the missing intervals (``–`` the first time), and a
  measure equal to the target (``--measures P@1``) left the table without a word on the terminal.

Expected values are computed here from runs.csv / the table given (brute force)."""

import json

import pandas as pd
import pytest

from embedscope.cli import main
from embedscope.errors import UsageError
from embedscope.study.run import run_study


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """A train-grid folder: 2 losses x 1 seed, 1 epoch, D = 8 (digits), epochs kept."""
    from embedscope.train.grid import train_grid

    d = tmp_path_factory.mktemp("grid")
    train_grid("digits", ["contrastive", "softmax"], [0.0], [0], d / "runs",
               options={"embed_dim": 8, "epochs": 1, "eval_every": 1}, keep_epochs=True, progress=False,
               echo=lambda s: None)
    return d / "runs"


@pytest.fixture
def no_rows(monkeypatch):
    """Measuring a row fails the test: the option must be refused before any work."""
    from embedscope.study import run as study_run

    def fail(*a, **k):
        raise AssertionError("a row was measured")

    monkeypatch.setattr(study_run, "measure_entry", fail)


def _main(args, capsys):
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


# ----------------------------------------------------------------------------------------- refused before any work
def test_worker_processes_with_workers_0_is_a_usage_error(two_checkpoints, tmp_path, capsys, no_rows):
    out = tmp_path / "s"
    rc, _, err = _main(["study", str(two_checkpoints), "-o", str(out), "--workers", "0", "--worker-processes",
                        "--cache-dir", str(tmp_path / "c")], capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert "--worker-processes" in err and "--workers 0" in err and "Traceback" not in err
    assert not out.exists()
    # each alone is fine (checked as far as the arguments go: no cluster is started here)
    with pytest.raises(UsageError, match="--worker-processes: not with --workers 0"):
        run_study(two_checkpoints, out, workers=0, worker_processes=True)


def test_measures_naming_only_the_target_is_refused(two_checkpoints, tmp_path, capsys, no_rows):
    out = tmp_path / "s"
    for args in (["--measures", "R@1"], ["--measures", "rho", "--target", "rho"]):
        rc, _, err = _main(["study", str(two_checkpoints), "-o", str(out), "--workers", "0",
                            "--cache-dir", str(tmp_path / "c"), *args], capsys)
        assert rc == 2 and "--measures names only the target" in err and "--target" in err, err
        assert not out.exists()


def test_exclude_on_a_measure_left_out_by_measures_is_refused_before_any_work(two_checkpoints, tmp_path, capsys,
                                                                              no_rows):
    out = tmp_path / "s"
    rc, _, err = _main(["study", str(two_checkpoints), "-o", str(out), "--workers", "0", "--cache-dir",
                        str(tmp_path / "c"), "--measures", "rho", "--exclude", "NMI>0.5"], capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert "--exclude 'NMI>0.5'" in err and "--measures" in err and "NMI" in err
    assert not out.exists()
    # a property measure (a pattern name) too; the target and a named measure are fine to exclude on
    with pytest.raises(UsageError, match="NR-Prec:hue is not among --measures"):
        run_study(two_checkpoints, out, workers=0, measures=["rho"], exclude=["NR-Prec:hue<0"])
    from embedscope.study.run import _check_exclude_measured

    _check_exclude_measured(["R@1<0.5", "rho>1", "loss==softmax", "group==a"], ["R@1", "rho"])


def test_exclude_on_the_excluded_column_is_refused_before_any_work(two_checkpoints, tmp_path, capsys, no_rows):
    out = tmp_path / "s"
    rc, _, err = _main(["study", str(two_checkpoints), "-o", str(out), "--workers", "0", "--cache-dir",
                        str(tmp_path / "c"), "--exclude", "excluded==True"], capsys)
    assert rc == 2 and "the column 'excluded' is what --exclude decides" in err, err
    assert not out.exists()


def test_root_with_digits_is_refused_before_any_work(two_checkpoints, tmp_path, capsys, no_rows):
    out = tmp_path / "s"
    base = ["study", str(two_checkpoints), "-o", str(out), "--workers", "0", "--cache-dir", str(tmp_path / "c"),
            "--root", str(tmp_path)]
    rc, _, err = _main(base, capsys)  # the checkpoints were trained on the digits
    assert rc == 2 and err.count("\n") == 1 and "--root" in err and "digits" in err, err
    assert not out.exists()
    rc, _, err = _main([*base, "--dataset", "digits"], capsys)
    assert rc == 2 and "--root" in err and "--dataset digits" in err, err
    assert not out.exists()


def test_a_source_naming_a_run_and_files_of_its_training_folder_is_refused(tmp_path):
    """'grid/**/*.pt' matched X.pt and X.pt.train/{best,last,epoch-000,epoch-001}.pt: the same run
    five times in the statistics (its untrained epoch-000 as a trained run)."""
    from conftest import save_digits_checkpoint

    from embedscope.study.plan import plan_study

    d = tmp_path / "g"
    (d / "a.pt.train").mkdir(parents=True)
    save_digits_checkpoint(d / "a.pt", seed=1)
    save_digits_checkpoint(d / "a.pt.train" / "best.pt", seed=1)
    save_digits_checkpoint(d / "a.pt.train" / "epoch-000.pt", seed=0)
    with pytest.raises(UsageError, match=r"best\.pt is a file of the training folder of .*a\.pt, which the source "
                                         "names too"):
        plan_study(str(d / "**" / "*.pt"), tmp_path / "s", untrained_dir=tmp_path / "u")
    yml = tmp_path / "list.yaml"
    yml.write_text(f"- {d / 'a.pt'}\n- {d / 'a.pt.train' / 'best.pt'}\n", encoding="utf-8")
    with pytest.raises(UsageError, match="which the source names too"):
        plan_study(yml, tmp_path / "s", untrained_dir=tmp_path / "u")
    # the run alone, or the folder's files alone, are studies
    ok = plan_study(str(d / "*.pt"), tmp_path / "s", untrained_dir=tmp_path / "u")
    assert [e.selection for e in ok] == ["best", "final", "untrained"]
    ok = plan_study(str(d / "a.pt.train" / "*.pt"), tmp_path / "s", untrained_dir=tmp_path / "u")
    assert sorted(e.selection for e in ok) == ["given", "given", "untrained"]


# ----------------------------------------------------------------------------------------- the statistics
def _table(target_values, untrained_values):
    """A study table: 2 losses x 2 seeds, each run's best row and its untrained reference row."""
    rows = []
    for k, (li, s) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        rows.append({"id": f"l{li}_s{s}", "run": f"l{li}_s{s}", "selection": "best", "status": "ok",
                     "loss": ["contrastive", "softmax"][li], "seed": s, "p_switch": 0.0, "epoch": 1,
                     "untrained": f"u{s}", "rho": target_values[k], "pi_intra": target_values[k] / 10,
                     "R@1": 0.5 + 0.1 * k, "pi_ratio": [0.3, 0.1, 0.4, 0.2][k]})
    for s in (0, 1):
        rows.append({"id": f"u{s}", "run": f"u{s}", "selection": "untrained", "status": "ok", "loss": "untrained",
                     "seed": s, "p_switch": 0.0, "epoch": 0, "untrained": "", "rho": untrained_values[s],
                     "pi_intra": untrained_values[s] / 10, "R@1": 0.55, "pi_ratio": 0.05})
    return pd.DataFrame(rows)


SPLITS = {"rho": "train", "pi_intra": "train", "pi_ratio": "train", "R@1": "test"}


def test_the_untrained_comparison_follows_the_direction_of_the_target():
    """beats_untrained was target > untrained target for every target: a run whose rho rose above its
    initialisation's (worse: lower rho is better, registry direction 'lower') was counted as beating it."""
    from embedscope.study.stats import study_statistics

    df = _table([0.2, 0.6, 0.3, 0.9], [0.5, 0.5])
    s = study_statistics(df, target="rho", n_boot=0, splits=SPLITS)
    runs = s.pop("_runs").set_index("id")
    # brute force: lower rho is better
    want = {i: df.set_index("id").loc[i, "rho"] < df.set_index("id").loc[f"u{i[-1]}", "rho"]
            for i in ("l0_s0", "l0_s1", "l1_s0", "l1_s1")}
    assert {i: runs.loc[i, "beats_untrained"] for i in want} == want == {"l0_s0": True, "l0_s1": False,
                                                                         "l1_s0": True, "l1_s1": False}
    assert s["untrained"]["selected_no_better"] == ["l0_s1", "l1_s1"]
    assert s["untrained"]["direction"] == "lower" and s["target_direction"] == "lower"
    # R@1: higher is better (as before)
    s = study_statistics(df, target="R@1", n_boot=0, splits=SPLITS)
    runs = s.pop("_runs").set_index("id")
    assert [runs.loc[i, "beats_untrained"] for i in ("l0_s0", "l0_s1", "l1_s0", "l1_s1")] == \
        [0.5 > 0.55, 0.6 > 0.55, 0.7 > 0.55, 0.8 > 0.55]
    # pi_intra: no direction, nothing compared
    s = study_statistics(df, target="pi_intra", n_boot=0, splits=SPLITS)
    runs = s.pop("_runs")
    assert runs["beats_untrained"].isna().all()
    assert s["untrained"]["selected_no_better"] == [] and s["untrained"]["selected_compared"] == 0
    assert s["untrained"]["direction"] == "none"


def test_a_constant_target_of_the_training_split_is_said_as_such():
    from embedscope.study.report import _header
    from embedscope.study.stats import study_notes, study_statistics

    df = _table([0.4, 0.4, 0.4, 0.4], [0.5, 0.5])
    s = study_statistics(df, target="rho", n_boot=0, splits=SPLITS)
    s.pop("_runs")
    assert s["target_split"] == "train"
    notes = [r["note"] for r in s["correlations"]]
    assert notes and all(n == "not defined: train rho is the same at every point (0.4)" for n in notes), notes
    assert any("train rho is the same" in line for line in study_notes(s))
    page = "".join(_header(__import__("pathlib").Path("."), {"settings": {}}, s, []))
    assert "Train rho is the same in every run" in page and "test rho" not in page.lower()


def test_exclude_by_objective_and_by_primary_work():
    """'objective' and 'primary' passed the check before any work but were no columns when --exclude
    was applied: 'no such column' after every checkpoint was measured."""
    from embedscope.study.stats import study_statistics

    df = _table([0.2, 0.6, 0.3, 0.9], [0.5, 0.5])
    by_obj = study_statistics(df, target="R@1", exclude=["objective==softmax"], n_boot=20, splits=SPLITS)
    by_loss = study_statistics(df, target="R@1", exclude=["loss==softmax"], n_boot=20, splits=SPLITS)
    a, b = by_obj.pop("_runs"), by_loss.pop("_runs")
    assert a["excluded"].tolist() == b["excluded"].tolist() == [False, False, True, True, False, False]
    assert by_obj.pop("exclude") == ["objective==softmax"] and by_loss.pop("exclude") == ["loss==softmax"]
    assert json.dumps(by_obj, sort_keys=True, default=str) == json.dumps(by_loss, sort_keys=True, default=str)
    s = study_statistics(df, target="R@1", exclude=["primary==False"], n_boot=0, splits=SPLITS)
    assert s["n_points"]["runs"] == 4 and s["n_points"]["excluded"] == 0
    with pytest.raises(UsageError, match="'excluded' is what --exclude decides"):
        study_statistics(df, target="R@1", exclude=["excluded==True"], n_boot=0, splits=SPLITS)


# ----------------------------------------------------------------------------------------- a real study
def _same_rows(a, b):
    drop = ["cached", "embed_seconds", "measure_seconds"]
    pd.testing.assert_frame_equal(pd.read_csv(a / "runs.csv").drop(columns=drop),
                                  pd.read_csv(b / "runs.csv").drop(columns=drop))


def test_a_training_set_target_serial_and_on_2_workers(grid, emb_cache, tmp_path, capsys):
    """--target rho on a real grid: labelled 'train rho' on the terminal, in the report and the
    figures; beats_untrained = rho below the untrained network's (brute force from runs.csv);
    --exclude 'objective==…' works; the same files serial and with --workers 2."""
    common = ["--target", "rho", "--measures", "R@1", "pi_ratio", "--bootstrap", "30", "--cache-dir",
              str(emb_cache), "--no-progress"]
    serial, par = tmp_path / "serial", tmp_path / "par"
    rc, out, err = _main(["study", str(grid), "-o", str(serial), "--workers", "0", *common], capsys)
    assert rc == 0, err
    assert "target train rho" in out and "test rho" not in out
    rc2, out2, err2 = _main(["study", str(grid), "-o", str(par), "--workers", "2", "--no-figures", *common], capsys)
    assert rc2 == 0, err2
    _same_rows(serial, par)
    cs, cp = (json.loads((d / "correlations.json").read_text()) for d in (serial, par))
    for c in (cs, cp):  # (the figures drawn, and the rows hashed with their timings, differ)
        c.pop("figures"), c.pop("rows_sha256")
    assert cs == cp and cs["target_split"] == "train"
    df = pd.read_csv(serial / "runs.csv").set_index("id")
    trained = df[df["selection"] != "untrained"]
    for i, r in trained.iterrows():
        want = bool(r["rho"] < df.loc[r["untrained"], "rho"])
        assert r["beats_untrained"] == want, i
    u = cs["untrained"]
    want_nb = sorted(i for i, r in trained.iterrows() if r["selection"] == "best" and
                     not r["rho"] < df.loc[r["untrained"], "rho"])
    assert u["selected_no_better"] == want_nb
    assert f"no better than the untrained network: {len(want_nb)} of 2" in out
    # the report and the figures name the target's split
    page = tmp_path / "r.html"
    assert main(["report", str(serial), "-o", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    assert "tracks train rho?" in html and "Correlations with train rho" in html and "test rho" not in html
    from embedscope.viz.study import fig5, ranking_chart

    fig = fig5(cs)
    assert {ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()} == {"rho (train)"}
    assert "vs train rho" in " ".join(fig._suptitle.get_text().split())  # (a wide title is wrapped)
    assert "with train rho over runs" in ranking_chart(cs).axes[0].get_xlabel()
    from embedscope.viz.study import fig4

    assert "the target (rho, train) and test metrics" in " ".join(fig4(cs).axes[0].get_title().split())
    import matplotlib.pyplot as plt

    plt.close("all")
    # --exclude on the objective, after the rows are in (nothing measured again)
    rc, out, err = _main(["study", str(grid), "-o", str(serial), "--workers", "0", "--exclude",
                          "objective==softmax", *common], capsys)
    assert rc == 0, err
    df = pd.read_csv(serial / "runs.csv")
    assert sorted(df.loc[df["excluded"] & df["primary"], "loss"]) == ["softmax"]
    n = json.loads((serial / "correlations.json").read_text())["n_points"]
    assert n["runs"] == 1 and n["excluded"] == 1


def test_exclude_names_a_property_measure_and_a_tag_with_its_prefix():
    """'NR-Prec:hue<0' (a measure of the registry's pattern) and 'tag:group==a' were refused as
    'expected COLUMN OP VALUE': the column name could not hold a ':'."""
    from embedscope.study.plan import parse_exclude
    from embedscope.study.stats import _exclude_mask

    assert parse_exclude(["NR-Prec:hue<0", "tag:group==a"]) == [("NR-Prec:hue", "<", 0.0), ("tag:group", "==", "a")]
    df = pd.DataFrame({"NR-Prec:hue": [0.2, -0.1, float("nan")], "tag:group": ["a", "b", "a"]})
    assert _exclude_mask(df, ["NR-Prec:hue<0"]).tolist() == [False, True, False]
    assert _exclude_mask(df, ["tag:group==a"]).tolist() == _exclude_mask(df, ["group==a"]).tolist() == \
        [True, False, True]


def test_the_table_of_a_rerun_prints_as_the_first_run(grid, emb_cache, tmp_path, capsys):
    """--bootstrap 0 (no intervals): the first run printed '–' for lo / hi, the same command again
    (statistics read back from correlations.json, where a missing number is null) printed 'None'."""
    args = ["study", str(grid), "-o", str(tmp_path / "s"), "--workers", "0", "--bootstrap", "0", "--no-figures",
            "--measures", "rho", "pi_ratio", "--cache-dir", str(emb_cache), "--no-progress"]
    rc, first, err = _main(args, capsys)
    assert rc == 0, err
    rc, again, err = _main(args, capsys)
    assert rc == 0, err
    assert again == first and "None" not in again
    table = [line for line in first.splitlines() if line.startswith(("rho ", "pi_ratio "))]
    assert len(table) == 2 and all(line.split()[3:5] == ["–", "–"] for line in table), first


def test_a_measure_equal_to_the_target_is_said_on_the_terminal(grid, emb_cache, tmp_path, capsys):
    """--measures P@1 rho (target R@1): P@1 is R@1 by definition and was left out of the table without
    a word on the terminal (the report said it)."""
    rc, out, err = _main(["study", str(grid), "-o", str(tmp_path / "s"), "--workers", "0", "--bootstrap", "0",
                          "--no-figures", "--measures", "P@1", "rho", "--cache-dir", str(emb_cache), "--no-progress"],
                         capsys)
    assert rc == 0, err
    df = pd.read_csv(tmp_path / "s" / "runs.csv")
    ok = df[df["status"] == "ok"]
    assert (ok["P@1"] == ok["R@1"]).all()  # why it is left out
    assert "note: left out, equal to the target R@1 in every run: P@1" in out
    assert not any(line.startswith("P@1 ") for line in out.splitlines())


def test_exclude_on_a_yaml_tag_named_like_a_config_column():
    """docs/studies.md's YAML example tags foreign checkpoints with 'loss: margin'; their config
    records no loss, and 'loss==margin' compared the empty config column: nothing left out, silently.
    The tag now stands where the checkpoint records no value; a recorded value still wins."""
    from embedscope.study.stats import _exclude_mask

    df = pd.DataFrame({"loss": [None, float("nan"), None, "softmax", "untrained"],
                       "tag:loss": ["margin", "margin", "lifted", "margin", None]})
    want = [(r["loss"] if isinstance(r["loss"], str) else r["tag:loss"]) == "margin" for _, r in df.iterrows()]
    assert _exclude_mask(df, ["loss==margin"]).tolist() == want == [True, True, False, False, False]
    assert _exclude_mask(df, ["loss!=margin"]).tolist() == [not w for w in want]
    assert _exclude_mask(df, ["tag:loss==margin"]).tolist() == [True, True, False, True, False]
