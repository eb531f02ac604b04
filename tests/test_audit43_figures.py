"""Audit 43: a fresh user's pass over the figure commands (tsne, yoke, scatter, spectrum, geometry)."""

from __future__ import annotations

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError


def _blobs(n=30, d=4, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    return rng.normal(size=(n, d)) + 3 * np.eye(d)[y], y


@pytest.mark.parametrize("perplexity", [0.01, 0.5, 0.99])
def test_perplexity_below_one_refused(perplexity):
    # below 1/3 openTSNE's neighbour search failed with "ValueError: Expected n_neighbors > 0"; from
    # 1/3 to 1 every value gave the same affinities (one neighbour), recorded as different perplexities
    from embedscope.tsne import effective_perplexity, single_tsne

    with pytest.raises(EmbedscopeError, match="perplexity must be at least 1"):
        effective_perplexity(perplexity, 100)
    X, _ = _blobs()
    with pytest.raises(EmbedscopeError, match="perplexity must be at least 1"):
        single_tsne(X, perplexity=perplexity, n_iter=1, early_exaggeration_iter=1)
    assert effective_perplexity(1, 100) == 1.0


@pytest.mark.parametrize("command", ["tsne", "yoke"])
def test_cli_perplexity_below_one_is_a_usage_error(command, tmp_path, capsys):
    from embedscope.cli import main

    files = ["a.h5"] if command == "tsne" else ["a.h5", "b.h5"]  # refused before any file is read
    rc = main([command, *files, "--perplexity", "0.01", "-o", str(tmp_path / "m.png")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--perplexity must be at least 1, got 0.01" in err and "ValueError" not in err
    assert not list(tmp_path.iterdir())


def _beside_title(fig):
    """(axes title, y-axis multiplier) pairs where the multiplier is not wholly below the title once
    drawn: beside its last line it read as part of it ("1e-9" + "3 points" -> "1e-93 points")."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    bad = []
    for ax in fig.axes:
        off, ttl = ax.yaxis.get_offset_text(), ax.title
        if off.get_text() and ttl.get_text() and off.get_window_extent(r).y1 > ttl.get_window_extent(r).y0 + 0.5:
            bad.append((ttl.get_text(), off.get_text()))
    return bad


@pytest.mark.parametrize("scale", [1e-9])
def test_map_titles_clear_of_the_axis_multiplier(scale):
    # a map of tiny or huge coordinates (a few iterations, a strong yoke) has a y multiplier ("1e-9")
    # above the panel, at the height of the title's last line: the joint map read "1e-93 points, ..."
    from embedscope.viz import plot_joint_tsne, plot_tsne, plot_yoked_maps
    from embedscope.viz.figures import use_agg

    use_agg()
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(0)
    Y = (rng.normal(size=(8, 2)) + 5) * scale
    lab = np.arange(8) % 3
    figs = [plot_joint_tsne(Y[:3], Y[3:], lab[:3], lab[3:]), plot_tsne(Y, lab, split="test"),
            plot_yoked_maps([Y, Y * 1.01], lab, names=["a", "b"], inset_class=1, split="test")]
    try:
        for fig in figs:
            assert any(ax.yaxis.get_offset_text().get_text() for ax in fig.axes)  # (the case under test)
            assert _beside_title(fig) == []
    finally:
        for fig in figs:
            plt.close(fig)


def test_zoom_of_a_class_of_one_image_shows_its_neighbourhood():
    # a class of one image (or of images at one place): the zoom's window was 1e-9 wide, its ticks
    # read "1e-10+5.72360685e-1" over the axis label, the dashed box on the map was invisible and no
    # neighbour was in view
    from embedscope.viz import plot_yoked_maps
    from embedscope.viz.figures import use_agg
    use_agg()
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(1)
    Y = rng.normal(size=(41, 2)) * 5
    lab = np.array([0] * 20 + [1] * 20 + [2])
    fig = plot_yoked_maps([Y, Y + 0.1], lab, names=["a", "b"], inset_class=2)
    try:
        zooms = [ax for ax in fig.axes if "zoomed" in ax.get_title()]
        maps = [ax for ax in fig.axes if ax not in zooms]
        assert len(zooms) == 2
        for ax, zax in zip(maps, zooms):
            map_span = max(np.ptp(ax.get_xlim()), np.ptp(ax.get_ylim()))
            assert min(np.ptp(zax.get_xlim()), np.ptp(zax.get_ylim())) >= 0.02 * map_span * 0.99  # MIN_ZOOM_SHARE (docs: 2%)
            assert zax.yaxis.get_offset_text().get_text() == "" and zax.xaxis.get_offset_text().get_text() == ""
    finally:
        plt.close(fig)


@pytest.mark.parametrize("scale", [1e-12, 1e12])
def test_map_window_fits_a_map_of_tiny_coordinates(scale):
    # after a few iterations a map's coordinates may be ~1e-12: the window had an absolute floor of
    # 1e-9 and the whole map was one dot in the middle of an empty panel
    from embedscope.viz.tsne import _map_window

    rng = np.random.default_rng(0)
    Y = rng.normal(size=(50, 2)) * scale
    lo, hi = _map_window([Y])
    assert np.all(hi - lo <= 1.5 * np.ptp(Y, axis=0).max())
    assert np.all(lo <= Y.min(0)) and np.all(hi >= Y.max(0))
    lo, hi = _map_window([np.full((5, 2), 3 * scale)])  # every point at one place: a window around it
    assert np.all(hi > lo) and np.all(lo < 3 * scale) and np.all(hi > 3 * scale)
    assert np.all(hi - lo < 3 * scale)


def _labelled_y_ticks(fig, ax):
    fig.canvas.draw()
    lo, hi = sorted(ax.get_ylim())
    return [t.get_text() for t in ax.yaxis.get_ticklabels(which="both")
            if t.get_text() and lo <= t.get_position()[1] <= hi]


def test_spectrum_log_axis_has_two_labelled_ticks():
    # a spectrum from 0.075 to 0.19 (one.h5's test split: 0.077 to 0.196) showed one labelled tick, 10^-1: matplotlib
    # labels 2, 3, 4, 6 x 10^k between decades, none of which lay in view, so no value could be read
    from embedscope.viz.figures import use_agg
    from embedscope.viz.spectrum import plot_spectra

    use_agg()
    import matplotlib.pyplot as plt

    s = np.array([0.19, 0.16, 0.14, 0.115, 0.11, 0.105, 0.105, 0.075])  # sums to 1: s / sum s as given
    fig = plot_spectra([{"label": "m", "spectrum": s, "class_mean": s, "class_std": s / 50}], by_class=True)
    try:
        for ax in fig.axes[:2]:
            assert len(_labelled_y_ticks(fig, ax)) >= 2
    finally:
        plt.close(fig)
    wide = np.geomspace(1, 1e-3, 16)  # three decades: the default labels (the powers of 10) stay
    fig = plot_spectra([{"label": "m", "spectrum": wide}], exclude_top=0)
    try:
        assert all("times" not in t for t in _labelled_y_ticks(fig, fig.axes[0]))
    finally:
        plt.close(fig)


def test_spectrum_of_names_with_dollars(tmp_path):
    # names from files or --names are drawn as text, never as mathtext ("$\beta$ (ρ = 0.113)" failed
    # with "ValueError:" once the axis check laid the figure out before the names were cleaned)
    from embedscope.viz.figures import save_figure, use_agg
    from embedscope.viz.spectrum import plot_spectra

    use_agg()
    import matplotlib.pyplot as plt

    s = np.array([0.19, 0.16, 0.14, 0.115, 0.11, 0.105, 0.105, 0.075])
    fig = plot_spectra([{"label": "$\\beta$", "spectrum": s, "rho": 0.1, "class_mean": s, "class_std": s / 50},
                        {"label": "50% $", "spectrum": s[::-1].copy()}], by_class=True, title="a $b$")
    try:
        save_figure(fig, tmp_path / "s.png")
        assert (tmp_path / "s.png").stat().st_size and (tmp_path / "s.pdf").stat().st_size
    finally:
        plt.close(fig)


def _touching_tick_labels(fig):
    """(panel title, label, next label) where two neighbouring x tick labels of a panel meet."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    bad = []
    for ax in fig.axes:
        lo, hi = sorted(ax.get_xlim())
        labels = sorted((t for t in ax.xaxis.get_ticklabels() if t.get_text() and lo <= t.get_position()[0] <= hi),
                        key=lambda t: t.get_position()[0])
        boxes = [t.get_window_extent(r) for t in labels]
        gap = 2 * fig.dpi / 72  # 2 pt: closer, "-0.0025 0.0000" read as one number
        bad += [(ax.get_title(), a.get_text(), b.get_text()) for a, b, ba, bb in
                zip(labels, labels[1:], boxes, boxes[1:]) if bb.x0 - ba.x1 < gap]
    return bad


def test_map_tick_labels_do_not_run_together():
    # a map of ~1e-3 coordinates (few iterations) in the narrow zoom panels of yoked maps: matplotlib
    # chose ticks without looking at their labels' widths, "-0.0025" ran into "0.0000"
    from embedscope.viz import plot_yoked_maps
    from embedscope.viz.figures import use_agg

    use_agg()
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(0)
    lab = np.arange(60) % 3
    mean = np.array([[0.005, -0.003], [0.0113, 0.0065], [-0.0173, -0.0036]])
    sd = np.array([[0.0028, 0.0009], [0.0029, 0.0013], [0.0046, 0.0011]])
    Y = mean[lab] + rng.normal(size=(60, 2)) * sd[lab]  # (a 20-iteration yoke of 60 points)
    fig = plot_yoked_maps([Y, Y * 1.02], lab, names=["a", "b"], inset_class=0)
    try:
        assert _touching_tick_labels(fig) == []
    finally:
        plt.close(fig)


def test_cli_yoke_refuses_an_empty_name(tmp_path, capsys):
    # --names "" b drew the first map without a title (the JSON's names: ['', 'b'])
    from embedscope.cli import main

    rc = main(["yoke", "a.h5", "b.h5", "--names", " ", "b", "-o", str(tmp_path / "m.png")])
    assert rc == 2
    assert "--names: name 1 is empty" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_spectrum_legend_gives_a_small_rho_two_significant_digits():
    # rho of a 4-d embedding is ~0.002: ".3f" showed one digit, 0.0021 and 0.0024 both read "0.002"
    from embedscope.viz.spectrum import _rho_text

    assert _rho_text(0.00214) == " (ρ = 0.0021)" and _rho_text(0.00236) == " (ρ = 0.0024)"
    assert _rho_text(0.041) == " (ρ = 0.041)" and _rho_text(0.1) == " (ρ = 0.100)"  # as before from 0.01
    assert _rho_text(0.0) == " (ρ = 0.000)"  # 0 by construction (one value left)


def test_cli_spectrum_file_without_the_split_is_one_line(tmp_path, capsys):
    # the first file lacks the train split: its error came after a progress line "spectra: 0/2 files"
    from embedscope import store
    from embedscope.cli import main
    from embedscope.store import EmbeddingSet

    X, y = _blobs(12, 4)
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    store.save(a, EmbeddingSet.from_arrays(X, y))  # every row 'test'
    store.save(b, EmbeddingSet.from_arrays(X, y, split=["train", "test"] * 6))
    rc = main(["spectrum", str(a), str(b)])
    out = capsys.readouterr()
    assert rc == 1 and "no 'train' rows" in out.err
    assert "files" not in out.out + out.err.split("error:")[0]
