"""Audit 29 (proposal for embedscope/viz/study.py): the Fig. 5 layout had half an inch of empty canvas
between its title and the panels (a margin reserved for the title, and tight_layout keeping the
panels below the title as well), and a panel of a measure undefined for every objective kept 0-1
ticks that read as values."""

import copy

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg", force=True)

import matplotlib.pyplot as plt  # noqa: E402
from test_study_figures import _stats  # noqa: E402

from embedscope.viz.study import fig5  # noqa: E402


@pytest.mark.parametrize("n_obj", [2, 5])  # 2: a title of two lines
def test_fig5_panels_start_just_below_the_title(n_obj):
    stats = _stats()
    stats["objectives"] = stats["objectives"][:n_obj]
    fig = fig5(stats)
    try:
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        title = fig._suptitle.get_window_extent(r)
        top = max(ax.get_tightbbox(r).y1 for ax in fig.axes if ax.axison)
        gap = (title.y0 - top) / fig.dpi
        assert 0 <= gap < 0.3, gap  # (0.57 inch before)
    finally:
        plt.close(fig)


def test_fig5_panel_of_an_undefined_measure_has_no_ticks():
    stats = copy.deepcopy(_stats())
    for o in stats["objectives"]:
        o["rho"] = float("nan")
    fig = fig5(stats)
    try:
        empty, drawn = [ax for ax in fig.axes if ax.axison]
        assert empty.get_xlabel() == "ρ (train)" and "undefined" in empty.get_title()
        assert len(empty.get_xticks()) == 0
        assert len(drawn.get_xticks()) > 0 and len(drawn.get_yticks()) > 0
        # the row's y scale (the target's, shared: the drawn panel's points) labelled at its left
        assert list(empty.get_yticks()) == list(drawn.get_yticks())
        assert empty.yaxis.get_tick_params()["labelleft"] and not drawn.yaxis.get_tick_params()["labelleft"]
    finally:
        plt.close(fig)
    for o in stats["objectives"]:  # no panel of the row with a point: no y ticks that read as values
        o["pi_ratio"] = float("nan")
    fig = fig5(stats)
    try:
        for ax in (ax for ax in fig.axes if ax.axison):
            assert len(ax.get_xticks()) == 0 and len(ax.get_yticks()) == 0
    finally:
        plt.close(fig)
