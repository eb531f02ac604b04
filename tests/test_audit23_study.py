"""Audit of `embedscope study` / `report` on degenerate but real situations (docs/studies.md):
a collapsed model (ρ, π_ratio, α, NR-Prec undefined; ρ with every value infinite), a diverged
checkpoint (NaN weights), a target or a measure that is constant (also only up to rounding),
2 or 3 points, an --exclude that leaves out every run, and a figure deleted after the study.
Expected numbers are computed here with scipy.stats from runs.csv / the study table."""

import json
import math
import re
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from embedscope.study.stats import (
    correlate,
    correlate_many,
    kendall_rows,
    spearman_rows,
    study_notes,
    study_statistics,
)

SPLITS = {"m": "train", "R@1": "test", "NMI": "test", "F1": "test"}


def _study(n_loss=4, seeds=3, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for li in range(n_loss):
        for s in range(seeds):
            rid = f"l{li}_s{s}"
            rows.append({"id": rid, "run": rid, "selection": "best", "status": "ok", "loss": f"loss{li}", "seed": s,
                         "p_switch": 0.0, "normalize": True, "untrained": "", "epoch": 2, "R@1": rng.uniform(),
                         "m": rng.normal(), "NMI": rng.uniform(), "F1": rng.uniform()})
    return pd.DataFrame(rows)


def _corr(s, m, level):
    return next(r for r in s["correlations"] if r["measure"] == m and r["level"] == level)


def _scipy(x, y):
    x, y = np.asarray(x, float), np.asarray(y, float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"pearson": float(st.pearsonr(x, y).statistic), "spearman": float(st.spearmanr(x, y).statistic),
                "kendall": float(st.kendalltau(x, y).statistic)}


# ----------------------------------------------------------------------------------------- statistics
def test_a_side_constant_up_to_rounding_has_no_correlation_of_any_kind():
    """The mean of equal values over 1, 3 and 6 seeds differs in the last bit (0.1 six times averages
    to 0.10000000000000002). Pearson's r said NaN (a relative threshold) but Spearman and Kendall
    ranked the rounding errors: -0.5 and -0.333 for a constant target (and the granulated τ too)."""
    y = np.array([np.mean([0.1] * k) for k in (1, 3, 6)])
    assert np.ptp(y) > 0  # not exactly constant: only up to rounding
    c = correlate([1.0, 2.0, 3.0], y, n_boot=50)
    assert c["n"] == 3 and all(math.isnan(v) for k, v in c.items() if k != "n"), c
    (cm,) = correlate_many(np.array([[1.0, 2.0, 3.0]]), y, n_boot=50)
    assert all(math.isnan(v) for k, v in cm.items() if k != "n"), cm
    assert np.isnan(spearman_rows(np.array([[1.0, 2, 3]]), y[None])).all()
    assert np.isnan(kendall_rows(np.array([[1.0, 2, 3]]), y[None])).all()
    assert np.isnan(kendall_rows(y[None], np.array([[1.0, 2, 3]]))).all()  # either side
    # a real spread keeps its value (scipy's)
    x, z = np.array([1.0, 2, 3, 4]), np.array([0.3, 0.1, 0.4, 0.2])
    assert spearman_rows(x[None], z[None])[0] == pytest.approx(st.spearmanr(x, z).statistic, abs=1e-12)
    assert kendall_rows(x[None], z[None])[0] == pytest.approx(st.kendalltau(x, z).statistic, abs=1e-12)


def test_a_target_constant_up_to_rounding_over_objectives_gives_nan_and_says_why():
    """A study whose runs all have the same R@1 (collapsed models tie at 181/896), objectives with
    1, 3 and 6 seeds: the means differ in the last bit. Every statistic over objectives is NaN with
    the note, as over runs (the same value exactly)."""
    rows = []
    for li, k in enumerate((1, 3, 6)):
        for s in range(k):
            rows.append({"id": f"l{li}_s{s}", "run": f"l{li}_s{s}", "selection": "best", "status": "ok",
                         "loss": f"loss{li}", "seed": s, "untrained": "", "R@1": 0.1, "m": float(li + s)})
    s = study_statistics(pd.DataFrame(rows), target="R@1", n_boot=50, splits={"m": "train", "R@1": "test"})
    for level in ("objectives", "runs"):
        c = _corr(s, "m", level)
        assert all(math.isnan(c[k]) for k in ("pearson", "spearman", "kendall", "kendall_lo", "kendall_hi")), c
        assert c["note"] == "not defined: test R@1 is the same at every point (0.1)"
    assert math.isnan(s["granulated"]["m"]["psi"])
    assert study_notes(s) == ["over objectives and over runs: m: not defined: test R@1 is the same at every point "
                              "(0.1)"]


def test_an_infinite_value_is_a_missing_one_in_the_objective_means():
    """ρ with every singular value of a collapsed model is +inf (KL(U||s) with s = 0). The objective's
    mean became inf, which dropped the whole objective from that measure's correlations, while the
    same rows read back from JSON (inf written as null, NaN) dropped that seed only: a study and its
    re-run disagreed (r -0.98 and +0.06 on a digits study). Now inf is NaN: the mean of the others."""
    df = _study()
    df.loc[0, "m"] = np.inf  # loss0 seed 0
    s_inf = study_statistics(df, target="R@1", n_boot=100, seed=3, splits=SPLITS)
    s_nan = study_statistics(df.replace(np.inf, np.nan), target="R@1", n_boot=100, seed=3, splits=SPLITS)
    assert json.dumps(s_inf["correlations"]) == json.dumps(s_nan["correlations"])
    lab = df["loss"]
    om = df.replace(np.inf, np.nan).assign(objective=lab).groupby("objective")[["m", "R@1"]].mean()
    c = _corr(s_inf, "m", "objectives")
    assert c["n"] == 4 and c["n_left_out"] == 0
    for k, v in _scipy(om["m"], om["R@1"]).items():
        assert c[k] == pytest.approx(v, abs=1e-12)
    r = _corr(s_inf, "m", "runs")
    assert r["n"] == 11 and r["n_left_out"] == 1
    assert s_inf["undefined"] == {"m": {"runs": ["l0_s0"], "reasons": {"no value": ["l0_s0"]}}}


def test_why_numbers_are_missing_measure_constant_two_points_too_few():
    df = _study(n_loss=2, seeds=1)  # 2 runs, 2 objectives
    df["F1"] = 0.25  # a measure constant over the runs
    df.loc[0, "NMI"] = np.nan  # one point left for NMI
    s = study_statistics(df, target="R@1", n_boot=50, splits=SPLITS)
    assert _corr(s, "m", "runs")["note"] == "2 points: ±1 whatever the values (no interval or p-value)"
    assert abs(_corr(s, "m", "runs")["pearson"]) == pytest.approx(1.0)
    assert _corr(s, "F1", "runs")["note"] == "not defined: the measure is the same at every point"
    assert math.isnan(_corr(s, "F1", "runs")["kendall"])
    assert _corr(s, "NMI", "objectives")["note"] == "not defined: fewer than 2 points with a value"
    assert _corr(s, "NMI", "runs")["n_left_out"] == 1
    notes = study_notes(s)
    assert "over objectives and over runs: m: 2 points: ±1 whatever the values (no interval or p-value)" in notes
    assert "over objectives and over runs: F1: not defined: the measure is the same at every point" in notes
    assert any(x.startswith("undefined in 1 of 2 runs (l0_s0)") and "NMI (no value)" in x for x in notes)


def test_reasons_from_the_rows_reach_the_notes():
    df = _study()
    df.loc[df["id"].isin(["l1_s0", "l1_s2"]), "m"] = np.nan
    why = {"l1_s0": {"m": "a collapsed model"}, "l1_s2": {"m": "a collapsed model"}}
    df["_undefined"] = [why.get(i, {}) for i in df["id"]]
    s = study_statistics(df, target="R@1", n_boot=0, splits=SPLITS)
    assert s["undefined"]["m"] == {"runs": ["l1_s0", "l1_s2"], "reasons": {"a collapsed model": ["l1_s0", "l1_s2"]}}
    assert "_undefined" not in s["_runs"].columns
    assert [x for x in study_notes(s) if x.startswith("undefined")] == [
        "undefined in 2 of 12 runs (l1_s0, l1_s2), left out of these measures' correlations (an objective's mean "
        "is over its other seeds): m (a collapsed model)"]


def test_metric_matrix_and_robustness_need_three_objectives_with_values():
    """NMI defined for 2 of 4 objectives (a collapsed model's NR-Prec is NaN): its Fig.-4 entries were
    ±1.00 (a line through two points), as the final-epoch r of a measure with 2 final objectives."""
    df = _study()
    df.loc[df["loss"].isin(["loss0", "loss1"]), "NMI"] = np.nan
    s = study_statistics(df, target="R@1", n_boot=0, splits=SPLITS)
    names = s["metric_matrix"]["names"]
    M = np.array(s["metric_matrix"]["pearson"], dtype=float)
    i = names.index("NMI")
    assert np.isnan(M[i]).all() and np.isnan(M[:, i]).all()
    j, k = names.index("R@1"), names.index("F1")
    om = df.groupby("loss")[["R@1", "F1"]].mean()
    assert M[j, k] == pytest.approx(st.pearsonr(om["R@1"], om["F1"]).statistic, abs=1e-12)
    # the final epoch: m defined for two objectives only
    fin = df.copy()
    fin["selection"] = "final"
    fin["id"] = fin["id"] + "_final"
    fin.loc[fin["loss"].isin(["loss0", "loss1"]), "m"] = np.nan
    s = study_statistics(pd.concat([df, fin], ignore_index=True), target="R@1", n_boot=0, splits=SPLITS)
    assert math.isnan(s["robustness"]["m"]["final_epoch_pearson"])
    assert not math.isnan(s["robustness"]["F1"]["final_epoch_pearson"])


def test_notes_when_every_run_is_excluded():
    df = _study()
    s = study_statistics(df, target="R@1", exclude=["p_switch==0"], n_boot=0, splits=SPLITS)
    assert s["n_points"]["runs"] == 0 and s["n_points"]["excluded"] == 12
    assert study_notes(s) == ["no run enters the statistics (--exclude left out all 12): every correlation is not "
                              "defined (–)"]


# ----------------------------------------------------------------------------------------- figures
def _fig_stats(xs, ys, target="R@1"):
    objs = [{"objective": f"o{i}", "n_seeds": 1, target: y, f"{target}_sd": float("nan"), "rho": x,
             "rho_sd": float("nan")} for i, (x, y) in enumerate(zip(xs, ys))]
    df = pd.DataFrame([{"id": o["objective"], "run": o["objective"], "loss": o["objective"], "selection": "best",
                        "status": "ok", "untrained": "", target: o[target], "rho": o["rho"]} for o in objs])
    return study_statistics(df, target=target, n_boot=0, splits={"rho": "train", target: "test"})


def test_fig5_ticks_tell_the_values_apart_and_no_line_without_r():
    """ρ varying in its 6th digit (three checkpoints 1e-4 apart) had four ticks all labelled 0.327; a
    constant target drew a least-squares line and zoomed the y axis into rounding ('1e-12+7.71e-1')."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embedscope.viz.study import fig5

    y = [np.mean([0.7712053571428571] * k) for k in (1, 3, 7)]  # equal up to the last bit
    s = _fig_stats([0.327098, 0.327103, 0.327106], y)
    fig = fig5(s)
    try:
        fig.canvas.draw()
        ax = fig.axes[0]
        assert ax.get_title() == "r = n/a (R@1 constant)"
        assert not [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]  # no fit line
        lo, hi = ax.get_ylim()
        assert hi - lo > 0.01 and lo < 0.7712 < hi  # a view about the value, not into its last bits
        assert ax.yaxis.get_offset_text().get_text() == ""
        xmin, xmax = ax.get_xlim()
        ticks = [(t.get_position()[0], t.get_text()) for t in ax.get_xticklabels()
                 if t.get_text() and xmin <= t.get_position()[0] <= xmax]
        assert len(ticks) >= 2 and len({t for _, t in ticks}) == len(ticks)
        for v, t in ticks:  # each label is its tick's value
            assert float(t.replace("\u2212", "-")) == pytest.approx(v, abs=1e-12)
    finally:
        plt.close(fig)
    s = _fig_stats([0.1, 0.5], [0.6, 0.7])  # 2 objectives
    fig = fig5(s)
    try:
        assert fig.axes[0].get_title() == "r = +1.00 (2 points: ±1 always)"
        # (a title wider than the figure is wrapped: compared word for word)
        assert "2 objectives: every r is ±1 whatever the values" in " ".join(fig._suptitle.get_text().split())
    finally:
        plt.close(fig)


def test_fig4_undefined_entries_are_grey_and_said():
    """An undefined entry of the metric matrix was left white, the colour of r = 0 (a study of two
    objectives drew an all-white matrix without a word)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embedscope.viz.study import fig4

    stats = {"metric_matrix": {"names": ["R@1", "NMI"], "pearson": [[None, None], [None, 1.0]]},
             "n_points": {"objectives": 2}}
    fig = fig4(stats)
    try:
        ax = fig.axes[0]
        texts = sorted(t.get_text() for t in ax.texts)
        assert texts == ["1.00", "n/a", "n/a", "n/a"]
        assert "n/a: not defined" in ax.get_xlabel()
        assert ax.get_title().endswith("(2 objectives)")
        rgba = ax.images[0].to_rgba(ax.images[0].get_array())
        assert tuple(np.round(rgba[0, 0][:3], 2)) == (0.82, 0.82, 0.82)  # grey, not white
    finally:
        plt.close(fig)


def test_ranking_chart_says_how_many_runs():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embedscope.viz.study import ranking_chart

    s = study_statistics(_study(n_loss=2, seeds=1), target="R@1", n_boot=0, splits=SPLITS)
    fig = ranking_chart(s)
    try:
        ax = fig.axes[0]
        assert ax.get_title() == "Measures ranked by |τ| over 2 runs\n2 runs: every τ is ±1 whatever the values"
        assert "95% interval" not in ax.get_xlabel()  # none was drawn
    finally:
        plt.close(fig)


# ----------------------------------------------------------------------------------------- the commands
MEASURES = ["R@1", "rho", "rho_all", "pi_ratio", "pi_intra", "MAP@R"]


def _checkpoint(path, loss, seed, *, collapse=False, diverge=False, same_as=0):
    import torch

    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(same_as if same_as is not None else seed)
    cfg = default_config("digits_cnn", embed_dim=8)
    model = build_model(cfg)
    sd = model.state_dict()
    with torch.no_grad():
        if collapse:  # every output the same point: bias only
            sd["head.weight"].zero_()
            sd["head.bias"].copy_(torch.arange(8.0) + 1)
        if diverge:
            sd["head.weight"][0, 0] = float("nan")
    model.load_state_dict(sd)
    save_checkpoint(path, model, {**cfg, "loss": loss, "seed": seed})
    return path


@pytest.fixture(scope="module")
def degenerate(tmp_path_factory):
    """Three models of three losses, a collapsed one and a diverged one (NaN weight), as a glob study."""
    d = tmp_path_factory.mktemp("ck")
    for i, loss in enumerate(("margin", "triplet", "contrastive")):
        _checkpoint(d / f"{loss}.pt", loss, 0, same_as=i + 1)
    _checkpoint(d / "collapsed.pt", "contrastive", 1, collapse=True, same_as=7)
    _checkpoint(d / "diverged.pt", "triplet", 1, diverge=True, same_as=8)
    return d


def _run(args, capsys):
    from embedscope.cli import main

    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_collapsed_and_diverged_checkpoints(degenerate, emb_cache, tmp_path, capsys):
    out = tmp_path / "st"
    args = ["study", str(degenerate / "*.pt"), "-o", str(out), "--workers", "0", "--cache-dir", str(emb_cache),
            "--no-progress", "--bootstrap", "30", "--no-figures", "--measures", *MEASURES]
    rc, so, se = _run(args, capsys)
    assert rc == 1 and "Traceback" not in se
    err = [x for x in se.splitlines() if x.strip()]
    assert len(err) == 1 and "1 of" in err[0] and "diverged_given" in err[0]
    assert "the model's weights hold NaN or inf: head.weight (1 of " in err[0]  # embed's own message (audit 25)
    df = pd.read_csv(out / "runs.csv").set_index("id")
    assert df.loc["diverged_given", "status"] == "error"
    assert "head.weight" in df.loc["diverged_given", "error"]
    c = df.loc["collapsed_given"]
    assert c["status"] == "ok" and np.isnan(c["rho"]) and np.isnan(c["pi_ratio"]) and np.isnan(c["rho_all"])
    assert c["undefined"] == "rho, rho_all, pi_ratio"
    assert "rho: the singular values after the top 1 are all 0" in c["undefined_why"]
    assert "rho_all: infinite" in c["undefined_why"] and "pi_ratio: pi_intra = pi_inter = 0" in c["undefined_why"]
    assert c["pi_intra"] == pytest.approx(0.0, abs=1e-6)
    # the correlations over runs are scipy's on runs.csv, the collapsed run left out and counted
    P = df[(df["status"] == "ok") & (df["selection"] != "untrained")].sort_index()
    corr = pd.read_csv(out / "correlations.csv")
    for m in ("rho", "pi_ratio", "pi_intra"):
        k = P[m].notna()
        row = corr[(corr["measure"] == m) & (corr["level"] == "runs")].iloc[0]
        assert row["n"] == int(k.sum()) and row["n_left_out"] == int((~k).sum())
        for name, v in _scipy(P.loc[k, m], P.loc[k, "R@1"]).items():
            assert row[name] == pytest.approx(v, abs=1e-12), (m, name)
    notes = [x for x in so.splitlines() if x.startswith("note: undefined in 1 of 4 runs (collapsed_given)")]
    assert len(notes) == 1 and "rho (the singular values" in notes[0]
    # a second run from the rows read back (another --bootstrap) gives the same numbers
    first = json.loads((out / "correlations.json").read_text())
    rc2, _, _ = _run(args[:-len(MEASURES) - 1] + ["--bootstrap", "31", "--measures", *MEASURES], capsys)
    again = json.loads((out / "correlations.json").read_text())
    key = [(r["measure"], r["level"], r["n"], r["pearson"], r["kendall"]) for r in first["correlations"]]
    assert key == [(r["measure"], r["level"], r["n"], r["pearson"], r["kendall"]) for r in again["correlations"]]
    # the report names the undefined measures and why
    rc, so, se = _run(["report", str(out), "-o", str(tmp_path / "r.html")], capsys)
    assert rc == 0
    page = (tmp_path / "r.html").read_text()
    assert "undefined measures (why: the notes under the correlations)" in page
    assert "Why numbers are missing or say nothing" in page
    assert "points (objectives / runs)" in page


def test_exclude_that_leaves_out_every_run_is_one_line_and_exit_1(degenerate, emb_cache, tmp_path, capsys):
    out = tmp_path / "st"
    rc, so, se = _run(["study", str(degenerate / "*.pt"), "-o", str(out), "--workers", "0", "--cache-dir",
                       str(emb_cache), "--no-progress", "--bootstrap", "0", "--no-figures", "--measures", *MEASURES,
                       "--exclude", "embed_dim==8"], capsys)
    assert rc == 1 and so.strip() == ""  # no table of dashes
    lines = [x for x in se.splitlines() if x.strip()]
    assert len(lines) == 2  # this one, and the diverged checkpoint's
    assert re.match(r"embedscope study: error: --exclude 'embed_dim==8' leaves out every run \(all 4\)", lines[0])
    assert "1 of 7 checkpoints failed" in lines[1]  # 5 given, 2 untrained references
    runs = pd.read_csv(out / "runs.csv")  # the rows are kept, marked
    assert len(runs) == 7 and runs["excluded"].all() and (runs["status"] == "ok").sum() == 6
    rc, so, se = _run(["report", str(out), "-o", str(tmp_path / "r.html")], capsys)
    page = (tmp_path / "r.html").read_text()
    assert rc == 0 and "No run enters the statistics" in page and "a correlation over two points" not in page


def test_constant_target_over_three_runs_says_why(tmp_path, emb_cache, capsys):
    """Three checkpoints with the same weights (three 'losses'): every number is the same, every
    correlation '–', and the terminal and the report say it is the target that does not vary."""
    d = tmp_path / "ck"
    d.mkdir()
    for loss in ("margin", "triplet", "contrastive"):
        _checkpoint(d / f"{loss}.pt", loss, 0, same_as=5)
    out = tmp_path / "st"
    rc, so, se = _run(["study", str(d / "*.pt"), "-o", str(out), "--workers", "0", "--cache-dir", str(emb_cache),
                       "--no-progress", "--bootstrap", "20", "--measures", *MEASURES], capsys)
    assert rc == 0
    r1 = pd.read_csv(out / "runs.csv").query("selection != 'untrained'")["R@1"].iloc[0]
    assert f"note: over objectives and over runs: every measure: not defined: test R@1 is the same at every point " \
           f"({r1:.4g})" in so
    # Fig. 4 of three objectives whose metrics are all constant: drawn grey, said under it
    assert (out / "figures" / "fig4_metric_correlations.png").exists()
    rc, _, _ = _run(["report", str(out), "-o", str(tmp_path / "r.html")], capsys)
    page = (tmp_path / "r.html").read_text()
    assert "Test R@1 is the same in every run" in page


def test_a_deleted_figure_is_said_in_the_report_and_drawn_again_by_the_study(degenerate, emb_cache, tmp_path,
                                                                             capsys):
    out = tmp_path / "st"
    args = ["study", str(degenerate / "*.pt"), "-o", str(out), "--workers", "0", "--cache-dir", str(emb_cache),
            "--no-progress", "--bootstrap", "20", "--measures", *MEASURES, "--exclude", "loss==nothing"]
    _run(args, capsys)
    fig = out / "figures" / "fig4_metric_correlations.png"
    fig.unlink()
    (out / "figures" / "ranking_by_tau.png").write_bytes(b"not a png")
    rc, so, se = _run(["report", str(out), "-o", str(tmp_path / "r.html")], capsys)
    assert rc == 0 and "Traceback" not in se
    page = (tmp_path / "r.html").read_text()
    assert "figures/fig4_metric_correlations.png (Fig. 4 layout): missing" in page
    assert "figures/ranking_by_tau.png (Measures ranked by |Kendall τ| over runs): not a PNG file" in page
    assert page.count("<img ") == 1  # Fig. 5 only (the junk is not embedded as a broken image)
    _run(args, capsys)  # every row finished: the statistics were reused, the missing figures not redrawn
    assert fig.read_bytes().startswith(b"\x89PNG")
    assert (out / "figures" / "ranking_by_tau.png").read_bytes().startswith(b"\x89PNG")
