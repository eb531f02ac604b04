"""Audit of the study statistics and outputs "to the digit" (docs/methods.md §6, docs/studies.md):
embedscope.study.stats against scipy.stats and hand-written computations (bootstrap, percentiles,
Jiang et al.'s granulated Kendall τ on tables whose answer is worked out here), the robustness
numbers, the exclusion filter, the Fig.-5 panels and the ranking chart, and the HTML report (the
published values of §6, the correlation table against correlations.csv, escaping of hostile names)."""

import csv
import itertools
import json
import math
import re
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from embedscope.errors import UsageError
from embedscope.study.stats import correlate, granulated_tau, pearson_rows, study_statistics

SPLITS = {"m": "train", "R@1": "test", "NMI": "test", "F1": "test"}


def _same(a, b, tol=1e-12):
    return (np.isnan(a) and np.isnan(b)) or abs(a - b) <= tol


def _scipy(x, y):
    x, y = np.asarray(x, float), np.asarray(y, float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"pearson": float(st.pearsonr(x, y).statistic) if np.ptp(x) > 0 and np.ptp(y) > 0 else math.nan,
                "spearman": float(st.spearmanr(x, y).statistic),
                "kendall": float(st.kendalltau(x, y).statistic)}


# ----------------------------------------------------------------------------------------- correlations
def test_pearson_does_not_depend_on_the_units():
    """A measure in small units (values ~1e-14) is no constant: r is scale-free. The old test of
    "constant" compared the spread with max(1, Σx²), an absolute threshold: r(1e-14·x, y) was NaN."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=9), rng.normal(size=9) + 1e3
    ref = st.pearsonr(x, y).statistic
    for scale in (1e-14, 1e-8, 1.0, 1e6):
        assert pearson_rows(scale * x[None], y[None])[0] == pytest.approx(ref, abs=1e-12), scale
        assert correlate(scale * x, y, n_boot=0)["pearson"] == pytest.approx(ref, abs=1e-12), scale
    # still NaN when it is constant (also when its mean is not exact in floating point)
    for c in (0.1, 1 / 3, 7e5, 1e-300):
        assert np.isnan(pearson_rows(np.full((1, 1001), c), np.arange(1001.0)[None])[0])


@pytest.mark.parametrize("case", ["ties", "binary", "mixed", "normal"])
def test_correlations_equal_scipy_with_ties_and_small_n(case):
    """Pearson = scipy pearsonr, Spearman = spearmanr (average ranks), Kendall = kendalltau's τ-b,
    for 2 to 12 points with many ties."""
    rng = np.random.default_rng(["ties", "binary", "mixed", "normal"].index(case))
    for _ in range(60):
        n = int(rng.integers(2, 13))
        if case == "ties":
            x, y = rng.integers(0, 3, n).astype(float), rng.integers(0, 4, n).astype(float)
        elif case == "binary":
            x, y = rng.integers(0, 2, n).astype(float), rng.integers(0, 2, n).astype(float)
        elif case == "mixed":
            x, y = rng.normal(size=n), rng.integers(0, 3, n).astype(float)
        else:
            x, y = rng.normal(size=n), rng.normal(size=n)
        c, ref = correlate(x, y, n_boot=0), _scipy(x, y)
        for k, v in ref.items():
            assert _same(c[k], v), (case, k, x, y, c[k], v)
        assert c["n"] == n


def test_kendall_is_tau_b_not_tau_a():
    # 4 points, ties in x and y: C = 2, D = 0 of 6 pairs; ties 2 in x, 1 in y -> τ_a = 1/3, τ_b = 2/sqrt(4·5)
    x, y = [1, 1, 2, 2], [1, 2, 2, 3]
    got = correlate(x, y, n_boot=0)["kendall"]
    assert got == pytest.approx(st.kendalltau(x, y, variant="b").statistic, abs=1e-15)
    assert got == pytest.approx(3 / math.sqrt(4 * 5), abs=1e-15)


def test_constant_sides_two_and_three_points():
    """A constant side: NaN for every statistic, p-value and interval (no crash, no 0); 2 points:
    ±1 without p-values or intervals; 3 points: the values and an interval."""
    c = correlate([2.0, 2.0, 2.0, 2.0], [1.0, 2.0, 3.0, 4.0], n_boot=50)
    assert c["n"] == 4 and all(np.isnan(v) for k, v in c.items() if k != "n")
    c = correlate([1.0, 2.0, 3.0], [5.0, 5.0, 5.0], n_boot=50)
    assert all(np.isnan(v) for k, v in c.items() if k != "n")
    c = correlate([1.0, 2.0], [3.0, 1.0], n_boot=50)
    assert (c["pearson"], c["spearman"], c["kendall"]) == (-1.0, -1.0, -1.0)
    assert all(np.isnan(c[k]) for k in ("pearson_p", "kendall_p", "pearson_lo", "pearson_hi", "kendall_lo"))
    c = correlate([1.0, 2.0, 3.0], [3.0, 1.0, 2.0], n_boot=50)
    assert c["pearson"] == pytest.approx(-0.5) and c["kendall"] == pytest.approx(-1 / 3)
    assert c["pearson_p"] == pytest.approx(st.pearsonr([1, 2, 3], [3, 1, 2]).pvalue)
    assert np.isfinite(c["pearson_lo"]) and np.isfinite(c["kendall_hi"])
    c = correlate([], [], n_boot=50)
    assert c["n"] == 0 and np.isnan(c["pearson"])


def test_missing_values_drop_their_pair_only():
    x = np.array([1.0, 2.0, np.nan, 4.0, 5.0, 6.0, np.inf])
    y = np.array([2.0, 1.0, 3.0, np.nan, 7.0, 5.0, 1.0])
    keep = np.array([1, 1, 0, 0, 1, 1, 0], bool)
    c = correlate(x, y, n_boot=100, seed=3)
    assert c["n"] == 4
    for k, v in _scipy(x[keep], y[keep]).items():
        assert _same(c[k], v)
    assert [c["pearson_lo"], c["pearson_hi"]] == _hand_bootstrap(x[keep], y[keep], 100, 3)["pearson"]


# ----------------------------------------------------------------------------------------- bootstrap
def _percentile_linear(v, q):
    """numpy's default ('linear', Hyndman-Fan type 7) percentile, written out."""
    v = sorted(v)
    h = (len(v) - 1) * q / 100.0
    lo = math.floor(h)
    return v[lo] + (h - lo) * (v[min(lo + 1, len(v) - 1)] - v[lo])


def _hand_bootstrap(x, y, n_boot, seed):
    """The rule of docs/studies.md: default_rng(seed).integers(0, n, (B, n)); resamples with a constant
    side are left out; percentiles 2.5 and 97.5 (linear interpolation) of the rest."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(n_boot, len(x)))
    vals = {"pearson": [], "spearman": [], "kendall": []}
    for b in range(n_boot):
        xb, yb = x[idx[b]], y[idx[b]]
        if len(set(xb.tolist())) == 1 or len(set(yb.tolist())) == 1:
            continue
        for k, v in _scipy(xb, yb).items():
            vals[k].append(v)
    return {k: ([_percentile_linear(v, 2.5), _percentile_linear(v, 97.5)] if v else [math.nan, math.nan])
            for k, v in vals.items()}


@pytest.mark.parametrize("n", [3, 4, 6])
def test_bootstrap_equals_a_hand_written_one_with_degenerate_resamples(n):
    """Few points with ties: many resamples draw one value only (dropped), the rest are ±1 often."""
    rng = np.random.default_rng(n)
    for t in range(6):
        x = rng.integers(0, 3, n).astype(float) if t % 2 else rng.normal(size=n)
        y = rng.integers(0, 2, n).astype(float) if t % 3 == 0 else rng.normal(size=n)
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            continue
        c = correlate(x, y, n_boot=400, seed=t)
        hb = _hand_bootstrap(x, y, 400, t)
        for k in ("pearson", "spearman", "kendall"):
            assert [c[f"{k}_lo"], c[f"{k}_hi"]] == pytest.approx(hb[k], abs=1e-12), (n, t, k)


def test_bootstrap_is_reproducible_and_follows_the_seed():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=10), rng.normal(size=10)
    a, b, c = (correlate(x, y, n_boot=300, seed=s) for s in (5, 5, 6))
    assert a == b
    assert (a["pearson_lo"], a["pearson_hi"]) != (c["pearson_lo"], c["pearson_hi"])


# ----------------------------------------------------------------------------------------- granulated τ
def _hand_table():
    """3 losses × 2 dims, seed 0 and 1, unbalanced: every row written out; the answer below by hand.

    seed 0: full 3 × 2 grid.  seed 1: only (A, 8), (B, 8), (B, 16) (C missing; a group of size 1).
    """
    rows = [  # loss, D, seed, m, R@1
        ("A", 8, 0, 1.0, 0.1), ("B", 8, 0, 2.0, 0.2), ("C", 8, 0, 3.0, 0.3),     # D=8, s0: m, R@1 concordant
        ("A", 16, 0, 3.0, 0.1), ("B", 16, 0, 2.0, 0.2), ("C", 16, 0, 1.0, 0.3),  # D=16, s0: discordant
        ("A", 8, 1, 1.0, 0.5), ("B", 8, 1, 1.0, 0.4),                          # D=8, s1: m tied
        ("B", 16, 1, 5.0, 0.9),
    ]
    return pd.DataFrame([{"loss": a, "embed_dim": d, "seed": s, "m": m, "R@1": r} for a, d, s, m, r in rows])


def test_granulated_tau_worked_out_by_hand():
    """Axis loss (groups: D × seed): (8, s0) τ = +1; (16, s0) τ = −1; (8, s1) m tied -> τ_b undefined,
    left out; (16, s1) one run, left out -> Ψ_loss = (1 − 1)/2 = 0 over 2 groups.
    Axis D (groups: loss × seed): (A, s0) m 1 -> 3, R@1 0.1 -> 0.1: R@1 tied, undefined; (B, s0) m tied,
    undefined; (C, s0) m 3 -> 1, R@1 tied, undefined; (A, s1) one run; (B, s1) m 1 -> 5 and R@1 0.4 -> 0.9:
    τ = +1 -> Ψ_D = 1 over 1 group. Ψ = (0 + 1)/2 = 0.5."""
    g = granulated_tau(_hand_table(), "m", "R@1", ["loss", "embed_dim"], ["seed"])
    assert g["per_axis"] == {"loss": 0.0, "embed_dim": 1.0}
    assert g["groups"] == {"loss": 2, "embed_dim": 1}
    assert g["psi"] == 0.5


def test_granulated_tau_needs_two_values_of_the_axis_in_a_group():
    """Runs that agree on the axis do not "differ in axis i only": an axis with a single value has no
    Ψ_i (old code: Ψ_i = τ over runs differing in a column that is not an axis), and a group whose
    runs share the axis value counts for nothing."""
    df = _hand_table()
    df["arch"] = "cnn"  # one value
    g = granulated_tau(df, "m", "R@1", ["loss", "arch"], [])
    # axis loss, grouped by arch alone: all 9 runs in one group (D and seed are not axes here)
    assert g["per_axis"]["loss"] == pytest.approx(st.kendalltau(df["m"], df["R@1"]).statistic, abs=1e-15)
    assert np.isnan(g["per_axis"]["arch"]) and g["groups"]["arch"] == 0
    assert g["psi"] == g["per_axis"]["loss"]
    # a duplicate of (B, 16, s1) with other values: the group (B, s1) of axis D now has D = 8, 16, 16
    dup = pd.concat([df, df.iloc[[8]].assign(m=0.0, **{"R@1": 0.0})], ignore_index=True)
    g = granulated_tau(dup, "m", "R@1", ["loss", "embed_dim"], ["seed"])
    sub = dup[(dup["loss"] == "B") & (dup["seed"] == 1)]
    assert g["per_axis"]["embed_dim"] == pytest.approx(st.kendalltau(sub["m"], sub["R@1"]).statistic)
    # axis loss: the group (16, s1) holds B twice (no other loss) and is left out: still 2 groups
    assert g["groups"]["loss"] == 2 and g["per_axis"]["loss"] == 0.0


def test_granulated_tau_missing_values_and_the_study_axes():
    df = _hand_table()
    df.loc[0, "m"] = np.nan  # (A, 8, s0): the group (8, s0) keeps B and C: τ = +1
    g = granulated_tau(df, "m", "R@1", ["loss", "embed_dim"], ["seed"])
    assert g["per_axis"] == {"loss": 0.0, "embed_dim": 1.0}
    # study_statistics: axes = the varying settings (loss, embed_dim), the seed held fixed in the groups
    full = df.assign(id=[f"r{i}" for i in range(len(df))], run=lambda d: d["id"], selection="best", status="ok")
    s = study_statistics(full, target="R@1", n_boot=0, splits=SPLITS)
    assert s["axes"] == ["loss", "embed_dim"]
    assert s["granulated"]["m"]["per_axis"] == {"loss": 0.0, "embed_dim": 1.0}
    assert s["granulated"]["m"]["psi"] == 0.5


# ----------------------------------------------------------------------------------------- the study table
def _down(v: float) -> str:
    """A bootstrap bound as shown: rounded outwards to 2 decimals, the lower one down (decimal arithmetic)."""
    from decimal import ROUND_FLOOR, Decimal

    return f"{Decimal(repr(float(v))).quantize(Decimal('0.01'), rounding=ROUND_FLOOR):+.2f}"


def _up(v: float) -> str:
    """The upper bound as shown: rounded up to 2 decimals."""
    from decimal import ROUND_CEILING, Decimal

    return f"{Decimal(repr(float(v))).quantize(Decimal('0.01'), rounding=ROUND_CEILING):+.2f}"


def _study(seed=0, n_loss=5, nan_seed=True, nan_objective=True):
    rng = np.random.default_rng(seed)
    rows = []
    for li, di, s in itertools.product(range(n_loss), range(2), range(3)):
        rid = f"l{li}_d{di}_s{s}"
        rows.append({"id": rid, "run": rid, "selection": "best", "status": "ok", "loss": f"loss{li}",
                     "embed_dim": [8, 16][di], "seed": s, "p_switch": 0.0, "normalize": li != 1, "untrained": "",
                     "epoch": 3, "R@1": rng.uniform(), "m": rng.normal(), "NMI": rng.uniform(), "F1": rng.uniform()})
    df = pd.DataFrame(rows)
    if nan_seed:
        df.loc[0, "m"] = np.nan  # one seed of objective "loss0 embed_dim=8"
    if nan_objective:
        df.loc[df["id"].str.startswith("l1_d1"), "NMI"] = np.nan  # objective "loss1 embed_dim=16": no NMI at all
    return df


def _means(df, cols):
    lab = [f"{r['loss']} embed_dim={r['embed_dim']}" for _, r in df.iterrows()]
    return df.assign(objective=lab).groupby("objective", sort=True)[cols].mean()


def test_over_objectives_is_the_mean_over_seeds_and_over_runs_every_run():
    df = _study()
    s = study_statistics(df, target="R@1", n_boot=200, seed=9, splits=SPLITS)
    assert s["n_points"]["objectives"] == 10 and s["n_points"]["runs"] == 30
    om = _means(df, ["m", "R@1", "NMI"])  # pandas' mean skips a missing seed: m of loss0 D=8 over 2 seeds
    assert [o["objective"] for o in s["objectives"]] == list(om.index)
    assert s["objectives"][list(om.index).index("loss0 embed_dim=8")]["m"] == pytest.approx(
        df.loc[1:2, "m"].mean(), abs=1e-15)
    c = {(r["measure"], r["level"]): r for r in s["correlations"]}
    for m in ("m", "NMI"):
        k = om[m].notna()
        assert c[(m, "objectives")]["n"] == int(k.sum())
        for stat, v in _scipy(om[m][k], om["R@1"][k]).items():
            assert c[(m, "objectives")][stat] == pytest.approx(v, abs=1e-12)
        hb = _hand_bootstrap(om[m][k].to_numpy(), om["R@1"][k].to_numpy(), 200, 9)
        assert [c[(m, "objectives")]["kendall_lo"], c[(m, "objectives")]["kendall_hi"]] == \
            pytest.approx(hb["kendall"], abs=1e-12)
        runs = df.sort_values("id")
        k = runs[m].notna()
        assert c[(m, "runs")]["n"] == int(k.sum())
        for stat, v in _scipy(runs[m][k], runs["R@1"][k]).items():
            assert c[(m, "runs")][stat] == pytest.approx(v, abs=1e-12)
        hb = _hand_bootstrap(runs[m][k].to_numpy(), runs["R@1"][k].to_numpy(), 200, 9)
        assert [c[(m, "runs")]["pearson_lo"], c[(m, "runs")]["pearson_hi"]] == pytest.approx(hb["pearson"], abs=1e-12)


def test_metric_matrix_and_robustness_leave_out_missing_pairs_only():
    """An objective without NMI drops out of NMI's numbers only, as in the correlation table. The old
    code took them over every objective: the Fig.-4 entry R@1–NMI (even NMI–NMI) was NaN beside a
    correlation table with r = 0.028, and the leave-one-objective-out of NMI was that value alone
    (min = max), naming the objective without NMI as the most influential."""
    df = _study()
    s = study_statistics(df, target="R@1", n_boot=0, splits=SPLITS)
    om = _means(df, ["m", "R@1", "NMI", "F1"])
    names = s["metric_matrix"]["names"]
    assert names == ["R@1", "NMI", "F1"]
    M = np.array(s["metric_matrix"]["pearson"])
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            k = om[a].notna() & om[b].notna()
            assert M[i, j] == pytest.approx(st.pearsonr(om[a][k], om[b][k]).statistic, abs=1e-12), (a, b)
    c = {(r["measure"], r["level"]): r for r in s["correlations"]}
    assert M[0, 1] == pytest.approx(c[("NMI", "objectives")]["pearson"], abs=1e-15)
    # leave one objective out, by hand, over the objectives with both values
    for m in ("m", "NMI"):
        sub = om[om[m].notna()]
        full = st.pearsonr(sub[m], sub["R@1"]).statistic
        loo = {o: st.pearsonr(sub.drop(index=o)[m], sub.drop(index=o)["R@1"]).statistic for o in sub.index}
        rob = s["robustness"][m]
        assert rob["loo_min"] == pytest.approx(min(loo.values()), abs=1e-12)
        assert rob["loo_max"] == pytest.approx(max(loo.values()), abs=1e-12)
        worst = max(loo, key=lambda o: abs(loo[o] - full))
        assert rob["loo_most_influential"] == worst
        assert rob["loo_r_without_it"] == pytest.approx(loo[worst], abs=1e-12)
    assert "loss1 embed_dim=16" not in [s["robustness"]["NMI"]["loo_most_influential"]]


def test_final_epoch_normalised_only_and_seed_spread_by_hand():
    df = _study(nan_seed=False, nan_objective=False)
    fin = df.copy()
    fin["id"] = fin["id"] + "_final"
    fin["selection"] = "final"
    rng = np.random.default_rng(11)
    fin["R@1"], fin["m"] = rng.uniform(size=len(fin)), rng.normal(size=len(fin))
    fin.loc[3, "m"] = np.nan  # a final row without m: its objective's mean is over the other seeds
    s = study_statistics(pd.concat([df, fin], ignore_index=True), target="R@1", n_boot=0, splits=SPLITS)
    assert s["n_points"]["runs"] == 30  # the final rows are companions, not points
    rob = s["robustness"]["m"]
    fo = _means(fin, ["m", "R@1"])
    assert rob["final_epoch_pearson"] == pytest.approx(st.pearsonr(fo["m"], fo["R@1"]).statistic, abs=1e-12)
    no = _means(df[df["normalize"]], ["m", "R@1"])  # loss1 is the unnormalised loss
    assert rob["normalised_only_objectives"] == 8
    assert rob["normalised_only_pearson"] == pytest.approx(st.pearsonr(no["m"], no["R@1"]).statistic, abs=1e-12)
    lab = [f"{r['loss']} embed_dim={r['embed_dim']}" for _, r in df.iterrows()]
    sd = df.assign(objective=lab).groupby("objective")["m"].std(ddof=1)
    between = _means(df, ["m"])["m"].std(ddof=1)
    assert rob["seed_sd_within"] == pytest.approx(sd.mean(), abs=1e-12)
    assert rob["sd_between_objectives"] == pytest.approx(between, abs=1e-12)
    assert rob["seed_spread_ratio"] == pytest.approx(sd.mean() / between, abs=1e-12)


def test_ranking_is_by_abs_tau_over_runs_with_its_interval():
    df = _study(nan_objective=False)
    df["NMI"] = -df["R@1"] + 0.01 * np.random.default_rng(1).normal(size=len(df))  # strongly negative τ
    s = study_statistics(df, target="R@1", n_boot=100, seed=2, splits=SPLITS)
    runs = {r["measure"]: r for r in s["correlations"] if r["level"] == "runs"}
    assert [r["measure"] for r in s["ranking"]] == sorted(runs, key=lambda m: -abs(runs[m]["kendall"]))
    assert s["ranking"][0]["measure"] == "NMI" and s["ranking"][0]["kendall"] < -0.8
    for r in s["ranking"]:
        for k in ("kendall", "kendall_lo", "kendall_hi"):
            assert r[k] == runs[r["measure"]][k]
        assert r["granulated_tau"] == s["granulated"][r["measure"]]["psi"]


# ----------------------------------------------------------------------------------------- --exclude
@pytest.mark.parametrize("expr, dropped", [
    ("p_switch>0", {"reg"}), ("p_switch > 0.1", {"reg"}), ("p_switch>=0.3", {"reg"}), ("p_switch=0.3", {"reg"}),
    ("loss==loss4", {f"l4_d{d}_s{s}" for d in range(2) for s in range(3)}),
    ("loss=='loss4'", {f"l4_d{d}_s{s}" for d in range(2) for s in range(3)}),
    ("embed_dim!=8", {f"l{li}_d1_s{s}" for li in range(5) for s in range(3)}),
    ("group==b", {"reg"}),  # a user tag, named without its 'tag:' prefix
])
def test_exclude_expressions(expr, dropped):
    df = _study(nan_seed=False, nan_objective=False)
    df["tag:group"] = "a"
    reg = df.iloc[[0]].assign(id="reg", run="reg", p_switch=0.3, **{"tag:group": "b"})
    s = study_statistics(pd.concat([df, reg], ignore_index=True), target="R@1", exclude=[expr], n_boot=0,
                         splits=SPLITS)
    runs = s["_runs"]
    assert set(runs.loc[runs["excluded"], "id"]) == dropped
    assert s["n_points"]["excluded"] == len(dropped) and s["n_points"]["runs"] == 31 - len(dropped)


@pytest.mark.parametrize("expr, needle", [
    ("p_switch >> 0", "'p_switch >> 0': expected COLUMN OP VALUE"), ("p_switch", "expected COLUMN OP VALUE"),
    ("nosuch>0", "no such column"), ("loss>lifted", "'loss>lifted': comparing needs a number"),
    # these parsed as the value '=' / '>0' / NaN and silently excluded nothing (old code)
    ("loss==", "expected COLUMN OP VALUE"), ("p_switch=>0", "expected COLUMN OP VALUE"), ("p_switch>nan", "NaN"),
])
def test_bad_exclude_expressions_are_one_line_errors(expr, needle):
    with pytest.raises(UsageError) as e:
        study_statistics(_study(), target="R@1", exclude=[expr], n_boot=0, splits=SPLITS)
    assert needle in str(e.value) and "\n" not in str(e.value)
    if expr != "nosuch>0":  # all but the column are refused before a study has any column
        from embedscope.study.stats import check_exclude

        with pytest.raises(UsageError, match=re.escape(needle)):
            check_exclude(["p_switch>0", expr])


# ----------------------------------------------------------------------------------------- figures
def test_fig5_fit_line_is_least_squares_and_the_panel_shows_r():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from embedscope.viz.study import fig5

    df = _study(nan_objective=False)
    s = study_statistics(df, target="R@1", n_boot=200, seed=4, splits=SPLITS)
    fig = fig5(s)
    try:
        ax = fig.axes[0]
        assert ax.get_xlabel() == "m (train)"
        om = _means(df, ["m", "R@1"])
        a, b = np.polyfit(om["m"], om["R@1"], 1)
        slope, icpt = st.linregress(om["m"], om["R@1"])[:2]
        assert (a, b) == pytest.approx((slope, icpt), abs=1e-12)
        (line,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        xx, yy = line.get_data()
        assert xx.min() == pytest.approx(om["m"].min()) and xx.max() == pytest.approx(om["m"].max())
        np.testing.assert_allclose(yy, slope * xx + icpt, atol=1e-12)
        c = next(r for r in s["correlations"] if r["measure"] == "m" and r["level"] == "objectives")
        assert c["pearson"] == pytest.approx(st.pearsonr(om["m"], om["R@1"]).statistic, abs=1e-12)
        assert ax.get_title() == f"r = {c['pearson']:+.2f} [{_down(c['pearson_lo'])}, {_up(c['pearson_hi'])}]"
    finally:
        plt.close(fig)


def test_ranking_chart_draws_the_granulated_tau_with_its_sign():
    """τ over runs +0.5 but granulated τ −0.4: the diamond lies at −0.4 on the |τ| axis (the interval's
    convention), not at +0.4 where it would read as agreeing with τ (old code: |granulated τ|)."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from embedscope.viz.study import ranking_chart

    stats = {"target": "R@1", "ranking": [
        {"measure": "a", "split": "train", "kendall": 0.5, "kendall_lo": 0.2, "kendall_hi": 0.8, "granulated_tau": -0.4},
        {"measure": "b", "split": "train", "kendall": -0.3, "kendall_lo": -0.6, "kendall_hi": 0.1,
         "granulated_tau": -0.2}]}
    fig = ranking_chart(stats)
    try:
        (dia,) = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "D"]
        np.testing.assert_allclose(dia.get_xdata(), [-0.4, 0.2])  # a at y = 1, b at y = 0
        np.testing.assert_allclose(dia.get_ydata(), [1, 0])
    finally:
        plt.close(fig)


# ----------------------------------------------------------------------------------------- the report
def _study_folder(tmp_path, target="R@1", names=None):
    from embedscope.study.run import finish_study

    rng = np.random.default_rng(0)
    names = names or [f"loss{i}" for i in range(5)]
    rows = []
    for name, s in itertools.product(names, range(2)):
        rows.append({"id": f"{name}_s{s}", "run": f"{name}_s{s}", "selection": "best", "status": "ok", "loss": name,
                     "seed": s, "normalize": True, "untrained": "", "epoch": 3, "dataset": "digits",
                     "sha256": "ab" * 32, **{k: float(rng.uniform()) for k in
                                             ("R@1", "MAP@R", "rho", "pi_ratio", "pi_intra", "pi_inter", "NMI",
                                              "mAP@C", "F1")}})
    d = tmp_path / "study"
    d.mkdir()
    finish_study(d, rows, target=target, n_boot=100, seed=1, figures=False)
    (d / "study.json").write_text(json.dumps({"settings": {"source": "runs/<b>grid</b>", "epoch": "best"},
                                              "versions": {"embedscope": "x"}}))
    return d


def _published_from_methods_md():
    """§6 of docs/methods.md: the Fig. 5 r per measure (CUB, CARS, SOP) and the Fig. 4 pairs."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "methods.md").read_text(encoding="utf-8")
    sec = text[text.index("## §6"):text.index("## §7")].replace("\n", " ").replace("−", "-")
    sec = re.sub(r"\s+", " ", sec)
    num = r"(-?\d\.\d\d)"
    fig5 = {}
    m = re.search(rf"ρ vs R@1 {num} \(CUB\), {num} \(CARS\), {num} \(SOP\)", sec)
    fig5["rho"] = [float(v) for v in m.groups()]
    for key, word in (("pi_ratio", "π_ratio"), ("pi_intra", "π_intra"), ("pi_inter", "π_inter")):
        fig5[key] = [float(v) for v in re.search(rf"{word} {num}, {num}, {num}", sec).groups()]
    fig4 = {(a, b): float(re.search(rf"{re.escape(a)}–{re.escape(b)} {num}", sec).group(1))
            for a, b in (("R@1", "NMI"), ("R@1", "mAP@C"), ("NMI", "F1"))}
    return fig5, fig4


def _cells(html_text, heading):
    """The rows (lists of cell texts) of the first table after the <h2> ``heading``."""
    import html as h

    i = html_text.index(f"<h2>{heading}")
    tbody = html_text[html_text.index("<tbody>", i):html_text.index("</tbody>", i)]
    return [[h.unescape(re.sub("<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr)]
            for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", tbody)]


def test_report_published_values_are_those_of_methods_md_and_ours_are_correlations_csv(tmp_path):
    from embedscope.study.report import PUBLISHED_FIG4, PUBLISHED_FIG5, build_report

    fig5, fig4 = _published_from_methods_md()
    # the values of the spec (METHODS.md §6) and of docs/methods.md, and the report's tables
    assert fig5 == {"rho": [-0.80, -0.85, -0.63], "pi_ratio": [0.79, 0.65, 0.22], "pi_intra": [0.25, 0.39, 0.36],
                    "pi_inter": [-0.16, -0.08, 0.17]}
    assert fig4 == {("R@1", "NMI"): 0.86, ("R@1", "mAP@C"): 0.76, ("NMI", "F1"): 0.99}
    assert {k: [v["CUB"], v["CARS"], v["SOP"]] for k, v in PUBLISHED_FIG5.items()} == fig5
    assert PUBLISHED_FIG4 == fig4
    d = _study_folder(tmp_path)
    text = build_report(d)
    with open(d / "correlations.csv", newline="", encoding="utf-8") as fh:
        csv_rows = {(r["measure"], r["level"]): r for r in csv.DictReader(fh)}
    stats = json.loads((d / "correlations.json").read_text())
    pub = {r[0]: r for r in _cells(text, "Published values")}
    for m, vals in fig5.items():
        row = pub[m]
        assert [float(v) for v in row[1:4]] == vals
        r = csv_rows[(m, "objectives")]
        assert row[4] == (f"{float(r['pearson']):+.3f} [{_down(float(r['pearson_lo']))}, "
                          f"{_up(float(r['pearson_hi']))}]")
    names, mat = stats["metric_matrix"]["names"], stats["metric_matrix"]["pearson"]
    f4 = [r for r in _cells(text, "Published values") if "–" in r[0]]
    for row, ((a, b), val) in zip(f4, fig4.items()):
        assert row[0] == f"{a} – {b}" and float(row[1]) == val
        assert float(row[2]) == round(mat[names.index(a)][names.index(b)], 2)
    # the correlation table: every measure, both levels, as correlations.csv (signed, 3 decimals, intervals to 2)
    corr = {r[0]: r for r in _cells(text, "Correlations with test")}
    assert set(corr) == {m for m, _ in csv_rows}
    for m, row in corr.items():
        for col, (level, stat) in zip(row[3:9], itertools.product(("objectives", "runs"),
                                                                    ("pearson", "spearman", "kendall"))):
            r = csv_rows[(m, level)]
            v, lo, hi = (float(r[k]) for k in (stat, f"{stat}_lo", f"{stat}_hi"))
            assert col == f"{v:+.3f} [{_down(lo)}, {_up(hi)}]", (m, level, stat)
        g = float(csv_rows[(m, "runs")]["granulated_tau"])
        assert row[9] == ("–" if math.isnan(g) else f"{g:+.3f}")
    assert "Left out, equal" not in text


def test_report_against_another_target_says_the_published_values_are_not_comparable(tmp_path):
    from embedscope.study.report import build_report

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    text = build_report(_study_folder(tmp_path / "a", target="MAP@R"))
    assert "this study: r vs test MAP@R" in text and "do not compare like with like" in text
    text = build_report(_study_folder(tmp_path / "b", target="R@1"))
    assert "this study: r vs test R@1" in text and "do not compare" not in text


def test_report_escapes_hostile_names_and_values(tmp_path):
    html5lib = pytest.importorskip("html5lib")
    from embedscope.study.report import build_report

    evil = "<script>alert(1)</script>&amp;<b>"
    d = _study_folder(tmp_path, names=[evil, "loss1", "loss2", "a&b", "loss4"])
    # a correlations.json edited by hand: numbers where strings go and strings where numbers go
    stats = json.loads((d / "correlations.json").read_text())
    stats["n_points"]["runs"] = "<script>n</script>"
    stats["untrained"].update(final_no_better="<img src=x onerror=alert(2)>", selected_no_better=[evil, 3],
                              best_epoch_1="<i>1</i>")
    stats["exclude"] = [1, "<b>x</b>"]
    (d / "correlations.json").write_text(json.dumps(stats))
    text = build_report(d)
    for raw in ("<script", "<img src=x", "<b>x", "<b>grid", "<i>1", "&amp;<b>"):
        assert raw not in text, raw
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&amp;amp;&lt;b&gt;" in text  # the run name, shown as it is
    assert "a&amp;b" in text
    parser = html5lib.HTMLParser(strict=True)
    parser.parse(text)
    assert not parser.errors


def test_kendall_rows_of_many_points_stay_small_and_equal_scipy():
    """Above 1,000 points per row τ_b comes from scipy (O(n log n)), not from n x n sign arrays
    (3 rows of 3,000 points took ~250 MB before, 64 rows ~5 GB)."""
    import tracemalloc

    from scipy.stats import kendalltau

    from embedscope.study.stats import kendall_rows

    rng = np.random.default_rng(5)
    X = np.round(rng.normal(size=(3, 3000)), 1)  # many ties
    Y = np.round(rng.normal(size=(1, 3000)), 1)
    tracemalloc.start()
    got = kendall_rows(X, Y)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20e6, peak
    want = [kendalltau(X[i], Y[0]).statistic for i in range(3)]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    small = kendall_rows(X[:, :900], Y[:, :900])  # the pair-count path, to the same values
    np.testing.assert_allclose(small, [kendalltau(X[i, :900], Y[0, :900]).statistic for i in range(3)], atol=1e-15)


def test_a_measure_undefined_for_most_runs_gives_nan_spreads_without_numpy_warnings():
    """ρ of a collapsed model is NaN (docs/methods.md §2): a study whose measure is defined for one
    objective only (or none) reports the seed spreads over the defined values, NaN where fewer than
    two (one) are left, and prints none of numpy's 'Degrees of freedom <= 0' / 'Mean of empty slice'
    warnings (a study over a collapsed checkpoint printed one on the terminal)."""
    df = _study(nan_seed=False, nan_objective=False)
    df.loc[~df["id"].str.startswith("l0_d0"), "m"] = np.nan  # m only for objective "loss0 embed_dim=8"
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        s = study_statistics(df, target="R@1", n_boot=50, seed=1, splits=SPLITS)
        rob = s["robustness"]["m"]
        assert rob["seed_sd_within"] == pytest.approx(df.loc[df["id"].str.startswith("l0_d0"), "m"].std(ddof=1),
                                                      abs=1e-12)
        assert math.isnan(rob["sd_between_objectives"]) and math.isnan(rob["seed_spread_ratio"])
        df["m"] = np.nan  # undefined everywhere
        rob = study_statistics(df, target="R@1", n_boot=50, seed=1, splits=SPLITS)["robustness"]["m"]
        assert math.isnan(rob["seed_sd_within"]) and math.isnan(rob["sd_between_objectives"])
