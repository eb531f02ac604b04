"""Audit 29 (small UX leftovers): the two-panel spectrum figure puts a legend that does not fit inside
its panel below the panels (it went beside the left panel, leaving empty canvas between the panels:
notebook 02's digits figure), `embedscope study` says why it drew no figure without blaming an
--exclude that was not given, and `NeighbourExamples` takes `table=` as every result does."""

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg", force=True)

import matplotlib.pyplot as plt  # noqa: E402

from embedscope.errors import EmbedscopeError  # noqa: E402

NAMES = ["margin", "R-margin, p_switch 0.3", "untrained", "contrastive", "triplet semihard", "multisimilarity"]


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def digits_like():
    """Spectra as notebook 02's digits models: ten class directions, then a fall (D = 32), one per name."""
    from embedscope.metrics import class_conditioned_spectra, singular_values

    rng = np.random.default_rng(0)
    out = []
    for i, name in enumerate(NAMES):
        y = rng.integers(0, 10, 300)
        X = rng.normal(size=(300, 32)) * np.exp(-np.arange(32) * (0.1 + 0.08 * i)) + 2 * np.eye(10, 32)[y]
        per, mean = class_conditioned_spectra(X, y)
        out.append({"label": name, "spectrum": singular_values(X), "rho": 0.5 + i,
                    "class_mean": mean, "class_std": per.std(0)})
    return out


def _covers(fig):
    """Whether a legend's box holds a point of a curve of its panel (display coordinates)."""
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        box = ax.get_legend().get_window_extent(r)
        for ln in ax.lines:
            xy = ln.get_transform().transform_path(ln.get_path()).vertices
            xy = xy[np.all(np.isfinite(xy), axis=1)]
            if np.any((xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0) & (xy[:, 1] < box.y1)):
                return True
    return False


@pytest.mark.parametrize("n", [3, 6])  # (2 behaves as 3: looked at)
def test_two_panel_spectrum_legends_go_below_the_panels_not_between_them(digits_like, n):
    from embedscope.viz import plot_spectra

    title = "Training-set spectra of the digits models (Roth Fig. 7 / Fig. 11)"
    ref = plot_spectra(digits_like[:1], by_class=True, title=title)  # one model: both legends fit inside
    ref.canvas.draw()
    fig = plot_spectra(digits_like[:n], by_class=True, title=title)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    left, right = fig.axes
    # the figure keeps the width of two panels (a legend beside the left panel made it 9.5-12.3 inches,
    # with an inch of empty canvas between the panels); it grows taller, the panels keep their size
    assert fig.get_figwidth() == pytest.approx(ref.get_figwidth()) == pytest.approx(7.0)
    assert fig.get_figheight() > ref.get_figheight()
    for ax, ax_ref in zip(fig.axes, ref.axes):
        assert ax.bbox.height == pytest.approx(ax_ref.bbox.height, abs=2)
        assert ax.bbox.width == pytest.approx(ax_ref.bbox.width, abs=2)
    for ax in fig.axes:
        leg = ax.get_legend().get_window_extent(r)
        under = ax.xaxis.get_tightbbox(r)
        assert leg.y1 <= under.y0  # below the x axis label
        x0 = min(ax.bbox.x0, ax.yaxis.get_tightbbox(r).x0)  # as many columns as fit panel and y labels
        assert x0 - 1 <= leg.x0 and leg.x1 <= ax.bbox.x1 + 1
        assert 0 <= leg.x0 and leg.x1 <= fig.bbox.width and leg.y0 >= 0  # inside the figure
    assert left.get_legend().get_window_extent(r).x1 <= right.get_tightbbox(r).x0 + 1
    assert not _covers(fig)
    # every model named, in both legends; the ρ and the marker of the values ρ leaves out kept
    texts = [t.get_text() for t in left.get_legend().get_texts()]
    assert texts == [f"{e['label']} (ρ = {e['rho']:.3f})" for e in digits_like[:n]] + ["left out of ρ (top 1)"]
    assert [t.get_text() for t in right.get_legend().get_texts()] == NAMES[:n]
    # the rows of the two legends start at the same height
    tops = [ax.get_legend().get_window_extent(r).y1 for ax in fig.axes]
    assert tops[0] == pytest.approx(tops[1], abs=1)


def test_two_panel_legend_below_takes_several_columns_where_they_fit():
    from embedscope.viz import plot_spectra

    s = np.full(64, 1.0)  # flat spectra cross the whole panel: no corner is free
    entries = [{"label": c, "spectrum": s * (1 + 0.01 * i), "rho": 0.1, "class_mean": s / 64,
                "class_std": 0 * s} for i, c in enumerate("abcdef")]
    fig = plot_spectra(entries, by_class=True)
    fig.canvas.draw()
    # one-letter names: the per-class legend in three columns (two rows, not six); the whole-set
    # legend, whose "left out of ρ (top 1)" and " (ρ = 0.100)" are wider, in two
    assert fig.axes[1].get_legend()._ncols == 3 and fig.axes[0].get_legend()._ncols == 2
    # one panel: the legend beside it, as before
    one = plot_spectra(entries)
    one.canvas.draw()
    r = one.canvas.get_renderer()
    assert one.axes[0].get_legend().get_window_extent(r).x0 >= one.axes[0].bbox.x1


def test_two_panel_legends_stay_inside_where_they_fit(digits_like):
    from embedscope.viz import plot_spectra

    fig = plot_spectra(digits_like[:1], by_class=True)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    assert fig.get_size_inches().tolist() == pytest.approx([7.0, 2.7])
    for ax in fig.axes:
        leg, box = ax.get_legend().get_window_extent(r), ax.bbox
        assert box.x0 <= leg.x0 and leg.x1 <= box.x1 and box.y0 <= leg.y0 and leg.y1 <= box.y1


def test_per_class_panel_ends_at_the_last_nonzero_class_value():
    """Classes of 3 rows (1000 classes, D = 16; SOP: ~5 images a class, D = 128) have 3 nonzero values:
    the curve filled 3 of the 16 indices of the per-class panel, the rest empty."""
    from embedscope.viz import plot_spectra

    s = np.geomspace(1, 0.1, 16)
    m = np.r_[0.6, 0.3, 0.1, np.zeros(13)]
    fig = plot_spectra([{"label": "a", "spectrum": s, "class_mean": m, "class_std": 0.1 * m}], by_class=True)
    ax = fig.axes[1]
    assert ax.get_xlim() == pytest.approx((0.5, 3.5))
    assert ax.get_xlabel() == "singular value index k\n(k > 3: zero in every class)"
    assert fig.axes[0].get_xlim()[1] == pytest.approx(16.5)  # the whole set keeps its 16 values
    # the longest file sets the end; with no zero tail, the axis and its label as before
    other = {"label": "b", "spectrum": s, "class_mean": np.r_[m[:5] + 0.1, np.zeros(11)], "class_std": 0 * m}
    fig = plot_spectra([{"label": "a", "spectrum": s, "class_mean": m, "class_std": 0.1 * m}, other], by_class=True)
    assert fig.axes[1].get_xlim() == pytest.approx((0.5, 5.5)) and "k > 5" in fig.axes[1].get_xlabel()
    fig = plot_spectra([{"label": "a", "spectrum": s, "class_mean": s / s.sum(), "class_std": 0 * s}], by_class=True)
    assert fig.axes[1].get_xlim() == pytest.approx((0.5, 16.5))
    assert fig.axes[1].get_xlabel() == "singular value index k"


# ------------------------------------------------------------------ study: why no figure
def test_study_no_figures_line_names_exclude_only_when_it_left_runs_out():
    from embedscope.cli.study import no_figures_line

    assert no_figures_line({"objectives": 1, "runs": 2, "excluded": 0}) == \
        "no figures: they need at least 2 objectives (points); the study has 1 objective"
    assert no_figures_line({"objectives": 0, "runs": 0, "excluded": 0}) == \
        "no figures: they need at least 2 objectives (points); the study has 0 objectives"
    assert no_figures_line({"objectives": 1, "runs": 2, "excluded": 3}) == \
        "no figures: they need at least 2 objectives (points); 1 objective left after --exclude (3 runs excluded)"
    assert no_figures_line({"objectives": 1, "runs": 1, "excluded": 1}).endswith("(1 run excluded)")
    assert "--exclude" not in no_figures_line({"objectives": 3, "runs": 3, "excluded": 0})


def test_study_report_says_why_it_has_no_figures(tmp_path):
    from embedscope.study.report import _figures

    one = {"target": "R@1", "figures": [], "n_points": {"objectives": 1, "runs": 2, "excluded": 0}}
    assert _figures(tmp_path, one) == [
        "<h2>Figures</h2>",
        '<p class="note">No figures: they need at least 2 objectives (points); the study has 1 objective.</p>']
    one["n_points"]["excluded"] = 2
    assert "1 objective left after --exclude (2 runs excluded)." in _figures(tmp_path, one)[1]
    # figures not asked for (--no-figures) of enough objectives, or statistics of an earlier version: nothing said
    assert _figures(tmp_path, {"target": "R@1", "figures": [], "n_points": {"objectives": 3, "runs": 3, "excluded": 0}}) == []
    old = _figures(tmp_path, {"target": "R@1", "n_points": {"objectives": 1, "runs": 1, "excluded": 0}})
    assert not any("No figures" in p for p in old)  # (it says which files it lacks, as before)


# ------------------------------------------------------------------ NeighbourExamples: table=
def test_neighbour_examples_take_table_as_every_result(tmp_path):
    from embedscope.analyses import neighbour_examples

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 5)
    ex = neighbour_examples((rng.normal(size=(20, 3)) + 3 * np.eye(4, 3)[y], y), queries=3, k=2)
    rows = ex.rows()
    for table in (True, False, 1, np.True_):
        f = ex.to_frame(table=table)
        assert f.to_dict("records") == rows and list(f.columns) == list(ex.to_frame().columns)
    assert ex.to_csv(tmp_path / "a.csv", table=True).read_text() == ex.to_csv(tmp_path / "b.csv").read_text()
    assert len((tmp_path / "a.csv").read_text().splitlines()) == 1 + 3 * 2
    for bad in ("yes", "no", 2, None):  # a string would have switched it on silently
        with pytest.raises(EmbedscopeError, match="^table must be True or False, got "):
            ex.to_frame(table=bad)
        with pytest.raises(EmbedscopeError, match="^table must be True or False"):
            ex.to_csv(tmp_path / "c.csv", table=bad)
    assert not (tmp_path / "c.csv").exists()
    pytest.importorskip("pyarrow")
    import pandas as pd

    p = ex.to_parquet(tmp_path / "a.parquet", table=True)
    assert pd.read_parquet(p).to_dict("records") == rows
