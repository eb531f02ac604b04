"""The study's figures (embedscope/viz/study.py) draw what the statistics say: every objective's point
at its means with its seed-sd error bars in its own colour (in every panel and in the legend), and the
ranking's bars, colours and intervals from the ranking table. Checked on the artists of the figures."""

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg", force=True)

from matplotlib.collections import LineCollection, PathCollection  # noqa: E402

from embedscope.viz.study import draw_figure, fig5, ranking_chart  # noqa: E402

OBJS = ["contrastive", "margin", "multisimilarity", "triplet", "lifted"]


def _stats():
    rng = np.random.default_rng(3)
    objs = []
    for i, o in enumerate(OBJS):
        d = {"objective": o, "n_seeds": 3, "R@1": 0.5 + 0.1 * i, "R@1_sd": 0.01 * (i + 1),
             "rho": 0.2 + 0.05 * i, "rho_sd": 0.02, "pi_ratio": rng.uniform(), "pi_ratio_sd": 0.03 * (i + 1)}
        objs.append(d)
    objs[2]["rho_sd"] = float("nan")  # one seed only: no x error bar for this objective in the rho panel
    corr = [{"measure": m, "split": "train", "level": lvl, "pearson": -0.5, "pearson_lo": -0.9, "pearson_hi": 0.1}
            for m in ("rho", "pi_ratio") for lvl in ("objectives", "runs")]
    ranking = [{"measure": "rho", "split": "train", "kendall": -0.6, "kendall_lo": -0.9, "kendall_hi": -0.2,
                "granulated_tau": -0.5},
               {"measure": "pi_ratio", "split": "train", "kendall": 0.3, "kendall_lo": -0.1, "kendall_hi": 0.7,
                "granulated_tau": float("nan")},
               {"measure": "R@2", "split": "test", "kendall": 0.0, "kendall_lo": float("nan"),
                "kendall_hi": float("nan"), "granulated_tau": 0.1}]
    return {"target": "R@1", "objectives": objs, "measures": ["rho", "pi_ratio"], "correlations": corr,
            "ranking": ranking, "metric_matrix": {"names": ["R@1", "R@2"], "pearson": [[1.0, 0.5], [0.5, 1.0]]}}


def _segments(ax):
    """(colour, (x0, y0), (x1, y1)) of every line segment of the axes' line collections."""
    out = []
    for c in ax.collections:
        if isinstance(c, LineCollection):
            cols = c.get_colors()
            for k, seg in enumerate(c.get_segments()):
                out.append((tuple(cols[k % len(cols)]), tuple(seg[0]), tuple(seg[-1])))
    return out


def test_fig5_points_bars_and_legend_keep_each_objective_colour():
    import matplotlib.pyplot as plt

    stats = _stats()
    fig = fig5(stats)
    try:
        cmap = plt.get_cmap("tab10")  # five objectives of different families: a hue each
        want = {o: tuple(cmap(i)) for i, o in enumerate(OBJS)}
        panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
        assert [ax.get_xlabel() for ax in panels] == ["ρ (train)", "π_ratio (train)"]
        # one y scale per row of panels (the target's), labelled at the row's left
        assert [ax.get_ylabel() for ax in panels] == ["R@1 (test)", ""]
        assert panels[0].get_shared_y_axes().joined(panels[0], panels[1])
        for ax, m in zip(panels, ("rho", "pi_ratio")):
            # the points: one per objective at (mean m, mean R@1), filled in the objective's colour
            pts = [c for c in ax.collections if isinstance(c, PathCollection) and len(c.get_offsets()) == len(OBJS)
                   and c.get_sizes()[0] == pytest.approx(4.5 ** 2)]
            assert len(pts) == 1
            xy = np.asarray(pts[0].get_offsets())
            np.testing.assert_allclose(xy, [[o[m], o["R@1"]] for o in stats["objectives"]])
            np.testing.assert_allclose(pts[0].get_facecolors(), [want[o] for o in OBJS])
            # the error bars: horizontal = mean +- sd of m, vertical = mean +- sd of R@1, in the same colours
            segs = _segments(ax)
            for o in stats["objectives"]:
                c = want[o["objective"]]
                hor = [(a, b) for col, a, b in segs if col == c and a[1] == b[1] and a[0] != b[0]]
                ver = [(a, b) for col, a, b in segs if col == c and a[0] == b[0] and a[1] != b[1]]
                if np.isfinite(o[f"{m}_sd"]):
                    assert len(hor) == 1
                    np.testing.assert_allclose(sorted([hor[0][0][0], hor[0][1][0]]),
                                               [o[m] - o[f"{m}_sd"], o[m] + o[f"{m}_sd"]])
                else:
                    assert hor == []
                assert len(ver) == 1
                np.testing.assert_allclose(sorted([ver[0][0][1], ver[0][1][1]]),
                                           [o["R@1"] - o["R@1_sd"], o["R@1"] + o["R@1_sd"]])
        # the legend: one entry per objective, its point in the objective's colour
        leg = fig.legends[0]
        assert [t.get_text() for t in leg.get_texts()] == OBJS
        handles = leg.legend_handles
        assert [matplotlib.colors.to_rgba(h.get_color()) for h in handles] == [want[o] for o in OBJS]
    finally:
        plt.close(fig)


def test_ranking_chart_bars_colours_and_intervals():
    import matplotlib.pyplot as plt

    stats = _stats()
    fig = ranking_chart(stats)
    try:
        ax = fig.axes[0]
        bars = sorted(ax.patches, key=lambda p: -p.get_y())  # top to bottom = ranking order
        assert [p.get_width() for p in bars] == pytest.approx([0.6, 0.3, 0.0])
        blue, red = matplotlib.colors.to_rgb("tab:blue"), matplotlib.colors.to_rgb("tab:red")
        assert [tuple(p.get_facecolor()[:3]) for p in bars] == [red, blue, blue]
        # intervals in |tau| units: sign(tau) * [lo, hi], sorted; none where the interval is undefined
        segs = sorted(_segments(ax), key=lambda s: -s[1][1])
        np.testing.assert_allclose([(a[0], b[0]) for _, a, b in segs], [(0.2, 0.9), (-0.1, 0.7)])
        assert [t.get_text() for t in ax.get_yticklabels()] == ["ρ (train)", "π_ratio (train)", "R@2 (test)"]  # at y = 2, 1, 0
    finally:
        plt.close(fig)


def test_study_figures_are_written_as_png_and_pdf(tmp_path):
    stats = _stats()
    for name in ("fig5_structure_vs_target", "fig4_metric_correlations", "ranking_by_tau"):
        png = draw_figure(name, stats, tmp_path)
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.with_suffix(".pdf").read_bytes()[:5] == b"%PDF-"


def test_fig5_pairs_colours_by_family_and_draws_every_training_measure():
    # objectives in families of two (a loss without and with rho-regularisation) share a tab20 hue, dark
    # and light; three epochs of each loss are not pairs (tab20 made 'contrastive epoch=3' look like
    # margin's pair) and get a hue each. Every training measure gets its panel (nine here; eight
    # were drawn and the ninth left out without a word).
    import matplotlib.pyplot as plt

    from embedscope.viz.study import _objective_colors

    tab10, tab20 = plt.get_cmap("tab10"), plt.get_cmap("tab20")
    pairs = ["margin p_switch=0", "margin p_switch=0.3", "triplet p_switch=0", "triplet p_switch=0.3", "lifted"]
    assert _objective_colors(pairs) == [tuple(tab20(i)) for i in (0, 1, 2, 3, 4)]
    epochs = [f"{loss} epoch={e}" for loss in ("contrastive", "margin") for e in (1, 2, 3)]
    assert _objective_colors(epochs) == [tuple(tab10(i)) for i in range(6)]
    ms = ["rho", "pi_ratio", "pi_intra", "pi_inter", "rho_all", "effective_rank", "alpha", "alignment", "uniformity"]
    objs = [{"objective": o, "R@1": 0.5 + 0.1 * i, **{m: 0.1 * i + j for j, m in enumerate(ms)}}
            for i, o in enumerate(OBJS)]
    stats = {"target": "R@1", "objectives": objs, "measures": ms,
             "correlations": [{"measure": m, "split": "train", "level": "objectives", "pearson": 0.5} for m in ms]}
    fig = fig5(stats)
    try:
        panels = [ax for ax in fig.axes if ax.axison]
        assert len(panels) == 9 and len(fig.axes) == 9  # a 3 x 3 grid, no empty axes
        assert [ax.get_xlabel().split(" (")[0] for ax in panels][:4] == ["ρ", "π_ratio", "π_intra", "π_inter"]
        assert panels[-1].get_xlabel() == "uniformity (train)"
        # n beside the intervals
        assert "one point per objective (5; mean over seeds" in " ".join(fig._suptitle.get_text().split())
    finally:
        plt.close(fig)


def test_fig5_says_how_many_objectives_are_undefined_and_keeps_tiny_ticks_apart():
    """An objective whose measure is undefined (ρ of a collapsed model: NaN) is named in the panel's
    title, not dropped silently; tiny values (π of an untrained network, 0 ... 0.0011) get at most
    five tick labels that do not overlap (six labels of six digits ran into one another)."""
    stats = _stats()
    stats["objectives"][1]["rho"] = float("nan")
    for i, o in enumerate(stats["objectives"]):
        o["pi_ratio"], o["pi_ratio_sd"] = 0.00027 * i, 1e-5
    fig = fig5(stats)
    try:
        fig.canvas.draw()
        panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
        assert panels[0].get_title().endswith("(1 undefined, not drawn)")
        assert "undefined" not in panels[1].get_title()
        for ax in panels:
            labels = [t for t in ax.get_xticklabels() if t.get_text() and t.get_visible()]
            xmin, xmax = ax.get_xlim()
            labels = [t for t in labels if xmin <= t.get_position()[0] <= xmax]
            assert 2 <= len(labels) <= 5
            boxes = sorted((t.get_window_extent() for t in labels), key=lambda b: b.x0)
            assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:])), [t.get_text() for t in labels]
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
