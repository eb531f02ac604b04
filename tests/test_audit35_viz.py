"""Thirty-fifth session's audit of the figures: legend entries of names that differ only where the cut
removes a middle part were alike (forty "Species_number…ng_latin_name"); the agreement heat-maps'
colour-bar label ran into the panel title when long model names made the panels small."""

import numpy as np

from embedscope.viz.style import LEGEND_CHARS, ClassPalette, short_text, short_texts


def test_short_texts_keep_names_apart():
    names = [f"Species_number_{i}_with_a_rather_long_latin_name" for i in range(40)]
    assert len({short_text(n) for n in names}) == 1  # (what the legend showed)
    got = short_texts(names)
    assert len(set(got)) == 40 and all(len(t) <= LEGEND_CHARS for t in got)
    assert "ber_17_" in got[17]
    assert short_texts(["a", "b", "x" * 50]) == ["a", "b", short_text("x" * 50)]  # nothing alike: as before
    twice = short_texts(["y" * 40, "y" * 40])  # the same name twice: numbered
    assert twice[0] != twice[1] and twice[0].endswith("#1") and twice[1].endswith("#2")


def test_class_legend_handles_are_distinct():
    names = [f"Species_number_{i}_with_a_rather_long_latin_name" for i in range(25)]
    labels = [h.get_label() for h in ClassPalette(names).handles(names)]
    assert len(set(labels)) == 25


def test_agreement_colour_bar_label_clear_of_the_title(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from embedscope.saliency.run import agreement_of_files
    from embedscope.store.saliency import SaliencyMaps, save_maps

    rng = np.random.default_rng(0)
    files = []
    for k in range(2):
        sm = SaliencyMaps(maps=rng.random((4, 6, 6)).astype(np.float32), paths=[f"p{i}" for i in range(4)],
                          labels=np.zeros(4, np.int64), class_names=["a"],
                          attrs={"name": f"m{k}", "family": "ranking", "n_samples": 50, "noise": 0.15})
        files.append(save_maps(tmp_path / f"m{k}.h5", sm))
    seen = {}
    import embedscope.viz.saliency as vs

    real = vs.agreement_heatmaps

    def spy(res):
        fig = real(res)
        seen["fig"] = fig
        return fig

    import unittest.mock as um

    with um.patch.object(vs, "agreement_heatmaps", spy):
        agreement_of_files(files, tmp_path / "a.png", names=["a_very_long_model_name_one", "a_very_long_model_name_two"])
    fig = seen["fig"]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)  # (the figure was closed once saved)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    heat = [ax for ax in fig.axes if ax.get_title()]
    bars = [ax for ax in fig.axes if not ax.get_title()]
    assert len(heat) == 2 and len(bars) == 2
    for ax, cb in zip(heat, bars):
        title = ax.title.get_window_extent(r)
        label = cb.yaxis.label.get_window_extent(r)
        assert not title.overlaps(label), (title, label)
        assert label.y1 <= cb.get_window_extent(r).y1 + 2  # within its bar's height
