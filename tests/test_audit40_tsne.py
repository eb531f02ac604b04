"""Audit 40, t-SNE figures:

- the joint figure's train/test legend (third panel) sat at matplotlib's "best" place: with many small
  clusters no corner was free and it covered whole clusters (45 classes: all 12 points of a class).
  It now takes a place inside where no point lies, else goes beside the panel (a legend never covers
  data), the panels keeping their size;
- the one-split figure's title said "test: 30 points, 1 classes" (the joint one "1 class"), and its
  note left out n_iter, which the joint figure's note shows.
"""

from __future__ import annotations

import numpy as np
import pytest

from embedscope.cli import main


def _dataset(tmp_path, n_classes: int, per_class: int, dim: int, frac: float, name: str):
    """The reviewer's set: ``n_classes`` Gaussian clusters (centres 3 apart), imported with
    ``--split-by-class frac``."""
    r = np.random.default_rng(0)
    y = np.repeat(np.arange(n_classes), per_class)
    X = (r.normal(size=(n_classes, dim))[y] * 3 + r.normal(size=(len(y), dim))).astype("float32")
    np.save(tmp_path / f"{name}.npy", X)
    (tmp_path / f"{name}.txt").write_text("\n".join(f"c{i}" for i in y) + "\n")
    h5 = tmp_path / f"{name}.h5"
    assert main(["import", str(tmp_path / f"{name}.npy"), "--labels", str(tmp_path / f"{name}.txt"),
                 "--split-by-class", str(frac), "-o", str(h5)]) == 0
    return h5


def _figure_of(monkeypatch, tmp_path, args) -> dict:
    """Run ``embedscope tsne ARGS``; what its figure showed, measured after drawing it (before saving)."""
    import embedscope.cli.output as output

    seen = {}
    real = output.save_and_close

    def keep(fig, png, **kw):
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        seen["fig_px"] = (fig.get_figwidth() * fig.dpi, fig.get_figheight() * fig.dpi)
        seen["axes"] = [(ax.bbox.frozen(), ax.get_title()) for ax in fig.axes]
        seen["panel_w_in"] = [ax.bbox.width / fig.dpi for ax in fig.axes]
        seen["note"] = " ".join(t.get_text() for t in fig.texts).replace("\n", " ")
        leg = fig.axes[-1].get_legend()
        seen["legend"] = leg.get_window_extent(r).frozen() if leg is not None else None
        ax = fig.axes[-1]
        seen["points"] = [coll.get_offset_transform().transform(np.asarray(coll.get_offsets()))
                          for coll in ax.collections]
        seen["radius_px"] = [np.sqrt(np.max(coll.get_sizes())) / 2 * fig.dpi / 72 for coll in ax.collections]
        return real(fig, png, **kw)

    monkeypatch.setattr(output, "save_and_close", keep)
    assert main(["tsne", *map(str, args), "-o", str(tmp_path / "out.png"), "--no-progress"]) == 0
    return seen


def _points_under(seen) -> int:
    box = seen["legend"]
    n = 0
    for xy, rad in zip(seen["points"], seen["radius_px"]):
        n += int(np.sum((xy[:, 0] > box.x0 - rad) & (xy[:, 0] < box.x1 + rad)
                        & (xy[:, 1] > box.y0 - rad) & (xy[:, 1] < box.y1 + rad)))
    return n


def test_joint_split_legend_covers_no_point_with_45_classes(tmp_path, monkeypatch, capsys):
    """No corner of the third panel is free: the legend goes beside it, within the canvas, and the
    three panels keep one size (1.95 inches wide with the legend inside: at least 1.9)."""
    h5 = _dataset(tmp_path, 45, 12, 32, 0.5, "c45")
    seen = _figure_of(monkeypatch, tmp_path, [h5, "--joint"])
    assert _points_under(seen) == 0
    box, (panel, _) = seen["legend"], seen["axes"][2]
    assert box.x0 >= panel.x1 and box.x1 <= seen["fig_px"][0]  # beside the panel, on the canvas
    widths = seen["panel_w_in"]
    assert max(widths) - min(widths) < 0.02 and min(widths) > 1.9, widths  # (1.95 with the legend inside)


def test_joint_split_legend_stays_inside_where_a_corner_is_free(tmp_path, monkeypatch, capsys):
    h5 = _dataset(tmp_path, 3, 40, 16, 0.5, "c3")
    seen = _figure_of(monkeypatch, tmp_path, [h5, "--joint"])
    assert _points_under(seen) == 0
    box, (panel, _) = seen["legend"], seen["axes"][2]
    assert panel.x0 <= box.x0 and box.x1 <= panel.x1 and panel.y0 <= box.y0 and box.y1 <= panel.y1


def test_joint_split_legend_on_a_map_with_no_free_place():
    """Points everywhere in the window (a grid of clusters): no place inside is free, the legend goes
    beside the panel; the figure is wider than with a free corner, the panels as wide."""
    import matplotlib.pyplot as plt

    from embedscope.viz.tsne import plot_joint_tsne

    rng = np.random.default_rng(2)
    g = np.stack(np.meshgrid(np.arange(8.0), np.arange(8.0)), axis=-1).reshape(-1, 2)
    Y = np.repeat(g, 4, axis=0) + rng.normal(scale=0.05, size=(len(g) * 4, 2))
    lab = np.repeat(np.arange(len(g)), 4) % 30
    half = len(Y) // 2
    full = plot_joint_tsne(Y[:half], Y[half:], lab[:half], lab[half:])
    keep = ~np.all(Y > 4.5, axis=1)  # the upper right corner empty (the window the same)
    kt, ke = keep[:half], keep[half:]
    free = plot_joint_tsne(Y[:half][kt], Y[half:][ke], lab[:half][kt], lab[half:][ke])
    try:
        for fig, beside in ((full, True), (free, False)):
            fig.canvas.draw()
            ax = fig.axes[2]
            box = ax.get_legend().get_window_extent(fig.canvas.get_renderer())
            xy = ax.collections[0].get_offset_transform().transform(ax.collections[0].get_offsets())
            assert not np.any((xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0) & (xy[:, 1] < box.y1))
            assert (box.x0 >= ax.bbox.x1) == beside
        assert full.get_figwidth() > free.get_figwidth() + 0.3
        assert abs(full.axes[0].bbox.width - free.axes[0].bbox.width) / full.dpi < 0.05
    finally:
        plt.close(full)
        plt.close(free)


def test_single_split_title_counts_one_class_and_note_names_n_iter(tmp_path, monkeypatch, capsys):
    h5 = _dataset(tmp_path, 6, 30, 16, 0.8, "c6")
    seen = _figure_of(monkeypatch, tmp_path, [h5, "--split", "test"])
    assert seen["axes"][0][1] == "test: 30 points, 1 class"
    assert "n_iter=500" in seen["note"]
    joint = _figure_of(monkeypatch, tmp_path, [h5, "--joint", "--force"])
    assert "n_iter=500" in joint["note"]


@pytest.mark.parametrize("n", [1, 1200])
def test_plot_tsne_counts(n):
    """The counts in words and with thousands separators, whoever calls it; ``split`` leads the title."""
    import matplotlib.pyplot as plt

    from embedscope.viz.tsne import plot_joint_tsne, plot_tsne

    Y = np.random.default_rng(0).normal(size=(max(n, 2), 2))
    lab = np.zeros(len(Y), dtype=int)
    fig = plot_tsne(Y, lab, split="test", info={"n_iter": 500, "perplexity": 30.0})
    assert fig.axes[0].get_title() == f"test: {len(Y):,} points, 1 class"
    assert "n_iter=500" in fig.texts[0].get_text()
    plt.close(fig)
    fig = plot_joint_tsne(Y, Y, lab, lab)
    assert fig.axes[0].get_title() == f"train\n{len(Y):,} points, 1 class"
    plt.close(fig)
