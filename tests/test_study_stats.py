"""Study statistics (docs/methods.md §6) against independent computations: scipy's correlations, a
hand-written bootstrap, Jiang et al.'s granulated Kendall tau on tables with a known answer."""

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from embedscope.study.stats import correlate, correlate_many, granulated_tau, kendall_rows, study_statistics

SPLITS = {"m": "train", "R@1": "test", "q": "train"}


def _table(seed=0):
    """4 losses x 2 dims x 3 seeds. Within a loss-axis group (D, seed fixed) m and R@1 rise together
    (tau = +1); within a D-axis group (loss, seed fixed) R@1 rises and m falls (tau = -1)."""
    rng = np.random.default_rng(seed)
    rows = []
    for li, di, s in itertools.product(range(4), range(2), range(3)):
        rows.append({"id": f"l{li}_d{di}_s{s}", "run": f"l{li}_d{di}_s{s}", "selection": "best", "status": "ok",
                     "loss": f"loss{li}", "embed_dim": [8, 16][di], "seed": s, "p_switch": 0.0, "normalize": True,
                     "untrained": "", "epoch": 3,
                     "R@1": 0.5 + 0.1 * li + 0.05 * di + 0.001 * s,
                     "m": 2.0 * li - 3.0 * di + 0.01 * s,
                     "q": rng.normal()})
    return pd.DataFrame(rows)


def test_granulated_tau_known_answer():
    df = _table()
    g = granulated_tau(df, "m", "R@1", ["loss", "embed_dim"], ["seed"])
    assert g["per_axis"]["loss"] == pytest.approx(1.0) and g["per_axis"]["embed_dim"] == pytest.approx(-1.0)
    assert g["psi"] == pytest.approx(0.0)
    assert g["groups"] == {"loss": 6, "embed_dim": 12}


def _hand_granulated(df, m, t, axes, context):
    psis = []
    for a in axes:
        others = [c for c in axes + context if c != a]
        taus = []
        keys = sorted(set(tuple(r[c] for c in others) for _, r in df.iterrows()))
        for k in keys:
            sel = np.all([df[c].to_numpy() == v for c, v in zip(others, k)], axis=0)
            g = df[sel]
            if len(g) >= 2:
                tau = st.kendalltau(g[m], g[t]).statistic
                if np.isfinite(tau):
                    taus.append(tau)
        psis.append(np.mean(taus))
    return float(np.mean(psis))


def test_granulated_tau_equals_a_hand_loop_on_noise():
    df = _table()
    rng = np.random.default_rng(3)
    df["R@1"] = rng.normal(size=len(df))
    g = granulated_tau(df, "q", "R@1", ["loss", "embed_dim"], ["seed"])
    assert g["psi"] == pytest.approx(_hand_granulated(df, "q", "R@1", ["loss", "embed_dim"], ["seed"]), abs=1e-12)


def test_kendall_rows_equals_scipy_with_ties():
    rng = np.random.default_rng(1)
    for _ in range(20):
        x = rng.integers(0, 4, 9).astype(float)
        y = rng.integers(0, 3, 9).astype(float)
        ref = st.kendalltau(x, y).statistic
        got = kendall_rows(x[None], y[None])[0]
        assert (np.isnan(ref) and np.isnan(got)) or got == pytest.approx(ref, abs=1e-12)


def _hand_bootstrap(x, y, n_boot, seed):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(n_boot, len(x)))
    out = {"pearson": [], "spearman": [], "kendall": []}
    for b in range(n_boot):
        xb, yb = x[idx[b]], y[idx[b]]
        if np.ptp(xb) == 0 or np.ptp(yb) == 0:
            continue
        out["pearson"].append(np.corrcoef(xb, yb)[0, 1])
        out["spearman"].append(st.spearmanr(xb, yb).statistic)
        out["kendall"].append(st.kendalltau(xb, yb).statistic)
    return {k: np.percentile(v, [2.5, 97.5]) for k, v in out.items()}


def test_correlate_equals_scipy_and_a_hand_bootstrap():
    rng = np.random.default_rng(7)
    x = rng.normal(size=12)
    y = 0.6 * x + rng.normal(size=12)
    c = correlate(x, y, n_boot=300, seed=11)
    assert c["pearson"] == pytest.approx(st.pearsonr(x, y).statistic, abs=1e-12)
    assert c["pearson"] == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-12)
    assert c["spearman"] == pytest.approx(st.spearmanr(x, y).statistic, abs=1e-12)
    assert c["kendall"] == pytest.approx(st.kendalltau(x, y).statistic, abs=1e-12)
    assert c["pearson_p"] == pytest.approx(st.pearsonr(x, y).pvalue)
    hb = _hand_bootstrap(x, y, 300, 11)
    for k in ("pearson", "spearman", "kendall"):
        assert [c[f"{k}_lo"], c[f"{k}_hi"]] == pytest.approx(list(hb[k]), abs=1e-12)
    assert c["pearson_lo"] < c["pearson"] < c["pearson_hi"]


def test_correlate_many_equals_one_correlate_per_row():
    """The vectorised bootstrap of every measure at once gives correlate()'s values to the last bit,
    with ties, a constant row and missing values (rows with other finite points draw their own resamples)."""
    rng = np.random.default_rng(4)
    for trial in range(12):
        n = int(rng.integers(3, 14))
        X = np.vstack([rng.normal(size=n), rng.integers(0, 3, n).astype(float), np.full(n, 2.0), rng.normal(size=n)])
        X[3, int(rng.integers(0, n))] = np.nan
        y = rng.normal(size=n)
        many = correlate_many(X, y, n_boot=150, seed=trial)
        for j in range(X.shape[0]):
            one = correlate(X[j], y, n_boot=150, seed=trial)
            assert one.keys() == many[j].keys()
            for k, v in one.items():
                assert (v == many[j][k]) or (np.isnan(v) and np.isnan(many[j][k])), (trial, j, k)


def test_study_statistics_levels_exclude_and_untrained_flags():
    df = _table()
    df["selection"] = "best"
    # an untrained reference per seed; one seed's reference beats everything of loss0
    refs = pd.DataFrame([{"id": f"u{s}", "run": f"u{s}", "selection": "untrained", "status": "ok", "loss": "untrained",
                          "embed_dim": 8, "seed": s, "p_switch": 0.0, "normalize": True, "untrained": "",
                          "epoch": 0, "R@1": 0.62, "m": 0.0, "q": 0.0} for s in range(3)])
    df["untrained"] = [f"u{s}" for s in df["seed"]]
    # a regularised run that --exclude p_switch>0 must drop, and a failed row
    extra = df.iloc[[0]].copy()
    extra["id"], extra["p_switch"], extra["R@1"], extra["m"] = "reg", 0.3, 0.99, -50.0
    bad = df.iloc[[1]].copy()
    bad["id"], bad["status"], bad["R@1"], bad["m"] = "bad", "error", np.nan, np.nan
    full = pd.concat([df, refs, extra, bad], ignore_index=True)
    s = study_statistics(full, target="R@1", exclude=["p_switch>0"], n_boot=200, seed=5, splits=SPLITS)
    assert s["axes"] == ["loss", "embed_dim"]
    runs_tab = s["_runs"].set_index("id")
    # the row left out is labelled as before anything was left out (p_switch varied then), not as the kept
    # runs of its loss and D (session 40: 'loss0 embed_dim=8' beside the kept p_switch=0 runs of that label)
    assert "p_switch=0.3" in runs_tab.loc["reg", "objective"]
    assert runs_tab.loc["reg", "objective"] not in set(runs_tab.loc[~runs_tab["excluded"], "objective"])
    assert s["n_points"] == {"objectives": 8, "runs": 24, "rows": 29, "errors": 1, "excluded": 1,
                             "regularised_runs": 0, "regularised_objectives": 0}
    kept = study_statistics(full, target="R@1", n_boot=20, seed=5, splits=SPLITS)["n_points"]  # nothing excluded
    assert (kept["regularised_runs"], kept["regularised_objectives"], kept["excluded"]) == (1, 1, 0)
    runs = {(r["measure"], r["level"]): r for r in s["correlations"]}
    # over runs = scipy on the 24 kept rows; over objectives = scipy on the means over seeds
    keep = df
    assert runs[("m", "runs")]["pearson"] == pytest.approx(st.pearsonr(keep["m"], keep["R@1"]).statistic)
    assert runs[("m", "runs")]["kendall"] == pytest.approx(st.kendalltau(keep["m"], keep["R@1"]).statistic)
    means = keep.groupby(["loss", "embed_dim"])[["m", "R@1"]].mean()
    assert runs[("m", "objectives")]["pearson"] == pytest.approx(st.pearsonr(means["m"], means["R@1"]).statistic)
    assert runs[("m", "objectives")]["spearman"] == pytest.approx(st.spearmanr(means["m"], means["R@1"]).statistic)
    # the bootstrap resamples the objectives in the order of their labels (runs.csv's objective column)
    lab = s["_runs"].set_index("id").loc[keep["id"], "objective"].to_numpy()
    om = keep.assign(objective=lab).groupby("objective", sort=True)[["m", "R@1"]].mean()
    assert [o["objective"] for o in s["objectives"]] == list(om.index)
    hb = _hand_bootstrap(om["m"].to_numpy(), om["R@1"].to_numpy(), 200, 5)
    assert [runs[("m", "objectives")]["pearson_lo"], runs[("m", "objectives")]["pearson_hi"]] == \
        pytest.approx(list(hb["pearson"]), abs=1e-12)
    assert s["granulated"]["m"]["psi"] == pytest.approx(0.0)
    # runs with R@1 <= 0.62 (all of loss0, loss1 at D = 8) are no better than their untrained network
    flagged = set(s["untrained"]["selected_no_better"])
    assert flagged == set(df[df["R@1"] <= 0.62]["id"]) and len(flagged) == 9
    assert s["untrained"]["selected_compared"] == 25
    # leave-one-objective-out r equals a direct computation
    o = means.index[0]
    loo = means.drop(index=o)
    r_loo = st.pearsonr(loo["m"], loo["R@1"]).statistic
    rob = s["robustness"]["m"]
    assert rob["loo_min"] <= r_loo + 1e-12 and rob["loo_max"] >= r_loo - 1e-12
    # the ranking is by |tau| over runs
    taus = [abs(r["kendall"]) for r in s["ranking"]]
    assert taus == sorted(taus, reverse=True)


def test_study_statistics_do_not_depend_on_the_order_of_the_rows():
    """The same runs listed in another order (two train-grid calls merged into one grid.csv, a glob):
    the same statistics, bootstrap intervals included; the runs are resampled in the order of their ids."""
    df = _table()
    a = study_statistics(df, target="R@1", n_boot=300, seed=7, splits=SPLITS)
    b = study_statistics(df.sample(frac=1.0, random_state=3).reset_index(drop=True), target="R@1", n_boot=300,
                         seed=7, splits=SPLITS)
    key = lambda r: (r["measure"], r["level"])  # noqa: E731
    ca, cb = sorted(a["correlations"], key=key), sorted(b["correlations"], key=key)
    assert [key(r) for r in ca] == [key(r) for r in cb]
    for ra, rb in zip(ca, cb):
        for k, v in ra.items():
            assert v == rb[k] or (isinstance(v, float) and np.isnan(v) and np.isnan(rb[k])), (key(ra), k)
    # over runs: a hand bootstrap of the rows sorted by id
    srt = df.sort_values("id")
    hb = _hand_bootstrap(srt["m"].to_numpy(), srt["R@1"].to_numpy(), 300, 7)
    r = next(r for r in cb if key(r) == ("m", "runs"))
    assert [r["pearson_lo"], r["pearson_hi"]] == pytest.approx(list(hb["pearson"]), abs=1e-12)


def test_exclude_rejects_bad_expressions():
    from embedscope.errors import UsageError

    with pytest.raises(UsageError):
        study_statistics(_table(), exclude=["p_switch >> 0"], splits=SPLITS)
    with pytest.raises(UsageError):
        study_statistics(_table(), exclude=["nosuch>0"], splits=SPLITS)


def test_report_says_when_regularised_objectives_are_kept():
    """Roth's Fig. 5 leaves out the ρ-regularised runs: the published values' section of the report
    warns when this study kept some (nothing is excluded by default)."""
    from embedscope.study.report import _published

    def html(n_reg):
        stats = {"target": "R@1", "n_points": {"regularised_objectives": n_reg}, "metric_matrix": {}}
        return "".join(_published(stats, {}))

    assert "regularised objective" not in html(0)
    assert "keeps 1 ρ-regularised objective (p_switch &gt; 0)" in html(1)
    assert "keeps 3 ρ-regularised objectives" in html(3) and "--exclude 'p_switch&gt;0'" in html(3)
