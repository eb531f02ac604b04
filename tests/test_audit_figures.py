"""Figures looked at as a demanding user would (audit of embedscope/viz): every name in a legend
(also one starting with "_", which matplotlib leaves out of a legend it collects itself), long
names cut so they neither widen a figure nor run into each other, class legends for 21-40 classes
(the 24-class shapes set) and a note beyond, one colour per objective beyond 20 objectives,
right/wrong frames of the neighbours figure told apart by colour-blind readers, NaN shown as NaN,
and a class's colour kept across figures for a file with more than 20 classes.

Checked on the matplotlib Figure objects (texts, legends, colours, drawn extents)."""

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg", force=True)

import matplotlib.pyplot as plt  # noqa: E402

from embedscope.viz import plot_joint_tsne, plot_spectra, plot_tsne, plot_yoked_tsne  # noqa: E402
from embedscope.viz.style import ClassPalette  # noqa: E402

LONG = "Black_footed_Albatross_photographed_at_dawn_over_the_pacific_" * 2


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _legend_texts(leg):
    return [t.get_text() for t in leg.get_texts()]


def _all_texts(fig):
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text)]


def test_names_starting_with_underscore_stay_in_spectrum_and_properties_legends():
    from embedscope.viz.properties import property_bars

    s = np.linspace(1, 0.1, 16)
    fig = plot_spectra([{"label": "_baseline", "spectrum": s, "rho": 0.1, "class_mean": s / s.sum(),
                         "class_std": 0 * s},
                        {"label": "margin", "spectrum": s ** 2, "class_mean": s / s.sum()}], by_class=True)
    whole, per_class = fig.axes[0].get_legend(), fig.axes[1].get_legend()
    assert _legend_texts(whole)[0] == "_baseline (ρ = 0.100)"
    assert _legend_texts(per_class) == ["_baseline", "margin"]
    rows = [{"model": m, "property": p, "NR-Prec": 5.0, "ceiling": 20.0} for m in ("_untrained", "trained")
            for p in ("ink", "parity")]
    fig = property_bars(rows)
    assert _legend_texts(fig.axes[0].get_legend())[:2] == ["_untrained", "trained"]


def test_long_names_are_cut_in_the_middle_and_do_not_collide():
    from embedscope.viz.study import fig4, ranking_chart

    rng = np.random.default_rng(0)
    names = [LONG + "A", LONG + "B", "short"]
    lab = np.repeat(np.arange(3), 10)
    Y = rng.normal(size=(30, 2))
    fig = plot_tsne(Y, lab, class_names=names)
    texts = _legend_texts(fig.axes[0].get_legend())
    assert all(len(t) <= 28 for t in texts) and texts[0] != texts[1]  # the ends differ: still told apart
    assert texts[0].endswith("A") and "…" in texts[0] and texts[2] == "short"
    assert fig.get_figwidth() < 7  # the legend of a 120-character name widened it to ~10 inches
    assert fig.axes[0].get_title() == "30 points, 3 classes"

    # two long model names as the yoked panels' titles: drawn side by side without overlapping
    fig = plot_yoked_tsne(Y, Y + 1, lab, class_names=names, names=["model " + LONG, "other " + LONG])
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    t0, t1 = (ax.title.get_window_extent(r) for ax in fig.axes[:2])
    assert t0.x1 < t1.x0
    assert all(len(t) <= 28 for t in _legend_texts(fig.legends[0]))

    stats = {"target": "R@1", "ranking": [{"measure": "m_" + LONG, "split": "train", "kendall": 0.5,
                                           "kendall_lo": 0.1, "kendall_hi": 0.8}],
             "metric_matrix": {"names": ["R@1", "NMI_" + LONG], "pearson": [[1.0, 0.2], [0.2, 1.0]]}}
    ticks = [t.get_text() for t in ranking_chart(stats).axes[0].get_yticklabels()]
    assert len(ticks[0]) <= 36 and ticks[0].endswith("(train)")
    ticks = [t.get_text() for t in fig4(stats).axes[0].get_xticklabels()]
    assert max(len(t) for t in ticks) <= 28


def test_class_legend_for_24_classes_and_a_note_beyond_40():
    rng = np.random.default_rng(1)
    for n, listed in ((24, True), (60, False)):
        names = [f"shape_{i}" for i in range(n)]
        lab = np.repeat(np.arange(n), 4)
        Y = rng.normal(size=(len(lab), 2))
        half = lab < n // 2
        figs = [plot_joint_tsne(Y[half], Y[~half], lab[half], lab[~half], class_names=names),
                plot_yoked_tsne(Y, Y + 1, lab, class_names=names),
                plot_tsne(Y, lab, class_names=names)]
        for fig in figs:
            legs = [*fig.legends, *(leg for ax in fig.axes if (leg := ax.get_legend()) is not None)]
            class_legs = [leg for leg in legs if leg.get_title().get_text().startswith("class")]
            if listed:
                assert len(class_legs) == 1 and _legend_texts(class_legs[0]) == names
            else:
                assert not class_legs
                assert any(f"{n} classes: too many for a legend" in t for t in _all_texts(fig))


def test_fig5_gives_each_of_24_objectives_its_own_colour():
    from embedscope.viz.study import fig5

    objs = [{"objective": f"obj{i}", "R@1": 0.5 + 0.01 * i, "rho": 0.04 * i} for i in range(24)]
    stats = {"target": "R@1", "objectives": objs, "measures": ["rho"],
             "correlations": [{"measure": "rho", "split": "train", "level": "objectives", "pearson": 0.3}]}
    fig = fig5(stats)
    pts = [c for c in fig.axes[0].collections if len(c.get_offsets()) == 24]
    cols = {tuple(np.round(c, 6)) for c in pts[-1].get_facecolors()}
    assert len(cols) == 24  # tab20 repeated gave obj0 and obj20 one colour
    leg = fig.legends[0]
    assert _legend_texts(leg) == [o["objective"] for o in objs]


def _deuteranope(rgb):
    """Machado, Oliveira & Fernandes (2009) simulation of deuteranopia (severity 1) in linear RGB."""
    from matplotlib.colors import to_rgb

    M = np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                  [-0.011820, 0.042940, 0.968881]])
    c = np.array(to_rgb(rgb))
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return np.clip(M @ lin, 0, 1)


def test_neighbour_frames_differ_for_colour_blind_readers_and_carry_a_mark():
    from embedscope.analyses.neighbours import NeighbourExamples
    from embedscope.viz import neighbours as nb

    a, b = _deuteranope(nb.RIGHT), _deuteranope(nb.WRONG)
    assert np.abs(a - b).sum() > 0.25  # old green #1a9641 / red #d7191c: 0.07 apart
    ex = NeighbourExamples(query_paths=np.array(["q"]), query_labels=np.array(["cat"]),
                           ref_paths=np.array([["r1", "r2"]]), ref_labels=np.array([["cat", "dog"]]),
                           similarity=np.array([[0.9, 0.8]]), correct=np.array([[True, False]]),
                           query_split="test", reference_split="test", metric="cosine")
    img = np.zeros((8, 8))
    fig = nb.draw_neighbours(ex, [img], [[img, img]])
    caps = [ax.get_xlabel() for ax in fig.axes[1:3]]
    assert caps[0].startswith("✓ cat") and caps[1].startswith("✗ dog")


def test_nan_is_shown_as_missing_not_as_a_value():
    from embedscope.viz.properties import property_bars
    from embedscope.viz.spectrum import normalized_spectrum

    # a spectrum holding NaN has no normalised spectrum (it was drawn un-normalised, ~100x too high)
    assert np.isnan(normalized_spectrum([3.0, 1.0, np.nan])).all()
    assert np.allclose(normalized_spectrum([3.0, 1.0]), [0.75, 0.25])
    rows = [{"model": "m", "property": "ink", "NR-Prec": float("nan"), "ceiling": 9.0},
            {"model": "m", "property": "parity", "NR-Prec": 4.0, "ceiling": 9.0}]
    fig = property_bars(rows)
    assert "n/a" in _all_texts(fig)


def test_a_class_keeps_its_colour_across_figures_with_24_classes():
    """The shapes set: 24 classes, 12 seen in training and 12 unseen; the test classes are drawn in
    the same colours by the one-split map, the joint map and the yoked maps (hue-circle palette)."""
    rng = np.random.default_rng(2)
    names = [f"shape_{i}" for i in range(24)]
    lab = np.repeat(np.arange(24), 3)
    Y = rng.normal(size=(len(lab), 2))
    test = lab >= 12
    want = ClassPalette(names)

    def colours(ax, Yd, labels):
        offs, cols = np.asarray(ax.collections[0].get_offsets()), ax.collections[0].get_facecolors()
        out = {}
        for o, c in zip(offs, cols):
            i = int(np.flatnonzero(np.all(np.isclose(Yd, o), axis=1))[0])
            out.setdefault(names[labels[i]], set()).add(tuple(np.round(c[:3], 6)))
        return out

    figs = [(plot_tsne(Y[test], lab[test], class_names=names).axes[0], Y[test], lab[test]),
            (plot_joint_tsne(Y[~test], Y[test], lab[~test], lab[test], class_names=names).axes[1], Y[test],
             lab[test]),
            (plot_yoked_tsne(Y[test], Y[test] + 1, lab[test], class_names=names).axes[0], Y[test], lab[test])]
    for ax, Yd, labels in figs:
        got = colours(ax, Yd, labels)
        assert sorted(got) == names[12:]
        for name, cs in got.items():
            assert cs == {tuple(np.round(want[name][:3], 6))}


def test_characters_without_a_glyph_are_drawn_escaped_without_warnings():
    """A CJK class name with no CJK font: drawn as escapes (told apart) instead of identical empty
    boxes, with no "Glyph ... missing" warning per character on the terminal."""
    import io
    import warnings

    from matplotlib.font_manager import FontProperties, findfont
    from matplotlib.ft2font import FT2Font

    if 0x65E5 in FT2Font(findfont(FontProperties())).get_charmap():
        pytest.skip("a font with CJK glyphs is configured")
    lab = np.repeat(np.arange(3), 5)
    Y = np.random.default_rng(0).normal(size=(15, 2))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        fig = plot_tsne(Y, lab, class_names=["日本", "中国", "Straße"])
        fig.savefig(io.BytesIO(), format="png")
    assert not [w for w in rec if "Glyph" in str(w.message)]
    # (the legend lists the classes in natural order of their names: ClassPalette)
    assert _legend_texts(fig.axes[0].get_legend()) == ["Straße", "\\u4e2d\\u56fd", "\\u65e5\\u672c"]


def _cielab(rgb):
    rgb = np.asarray(rgb, dtype=float)
    c = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = c @ np.array([[0.4124, 0.2126, 0.0193], [0.3576, 0.7152, 0.1192], [0.1805, 0.0722, 0.9505]])
    xyz = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], axis=1)


@pytest.mark.parametrize("n", [24, 40])
def test_more_than_20_classes_get_clearly_different_colours(n):
    """Past tab20 the classes got a golden-ratio hue circle whose closest pair at 24 classes was
    ΔE 4 apart (two classes one colour to the eye); now no two of 24 or 40 are closer than ΔE 20."""
    from embedscope.viz.style import palette_colors

    cols = palette_colors(n)
    assert len(set(cols)) == n
    L = _cielab([c[:3] for c in cols])
    d = np.linalg.norm(L[:, None] - L[None], axis=2) + np.eye(n) * 1e9
    assert d.min() > 20
    assert palette_colors(n + 5)[:n] == cols  # one fixed sequence: a class's colour does not move with n
    assert L[:, 0].min() >= 30 and L[:, 0].max() <= 90  # none too light to see on white


def test_neighbour_similarities_get_the_digits_that_tell_them_apart():
    """An untrained network's cosines (0.9991, 0.9987, ...) all read "1.00" at two decimals."""
    from embedscope.analyses.neighbours import NeighbourExamples
    from embedscope.viz import neighbours as nb

    sim = np.array([[0.9991, 0.9987, 0.9902]])
    ex = NeighbourExamples(query_paths=np.array(["q"]), query_labels=np.array(["a"]),
                           ref_paths=np.array([["r1", "r2", "r3"]]), ref_labels=np.array([["a", "b", "b"]]),
                           similarity=sim, correct=np.array([[True, False, False]]),
                           query_split="test", reference_split="test", metric="cosine")
    img = np.zeros((8, 8))
    fig = nb.draw_neighbours(ex, [img], [[img, img, img]])
    caps = [ax.get_xlabel().split()[-1] for ax in fig.axes[1:4]]
    assert caps == ["0.9991", "0.9987", "0.9902"]
    assert nb.similarity_digits(np.array([[0.91, 0.85]])) == 2  # two decimals when they suffice


def test_single_class_and_empty_panels_are_worded_right():
    from embedscope.viz import plot_same_different

    Y = np.random.default_rng(0).normal(size=(10, 2))
    lab = np.zeros(10, dtype=int)
    assert plot_tsne(Y, lab, class_names=["only"]).axes[0].get_title() == "10 points, 1 class"
    fig = plot_joint_tsne(Y[:1], Y[1:], lab[:1], lab[1:], class_names=["only"])
    assert [ax.get_title() for ax in fig.axes[:2]] == ["train\n1 point, 1 class", "test\n9 points, 1 class"]
    fig = plot_same_different({"test": (np.full(5, np.nan), np.full(5, np.nan))})
    assert fig.axes[0].get_title() == "test: no points (5 lone left out)"


def test_saliency_pairs_cut_long_class_names_and_judge_same_class_by_label():
    from embedscope.store.saliency import SaliencyMaps
    from embedscope.viz.saliency import overlay_grid, pairs_figure
    from embedscope.viz.style import OTHER_CLASS_COLOR, SAME_CLASS_COLOR

    rng = np.random.default_rng(0)
    names = [LONG + "A", LONG + "B"]  # the same once cut: "same class" must come from the labels
    maps = rng.uniform(size=(2, 8, 8)).astype(np.float32)
    imgs = rng.integers(0, 255, size=(2, 8, 8)).astype(np.uint8)
    sm = SaliencyMaps(maps=maps, paths=["q0", "q1"], labels=np.array([0, 1]), class_names=names, images=imgs,
                      retrieval={"maps": maps, "paths": ["r0", "r1"], "labels": np.array([0, 0]), "images": imgs,
                                 "distance": np.array([0.1, 0.2])}, attrs={"distance": "euclidean"})
    fig = pairs_figure(sm, n_pairs=2)
    axes = np.array(fig.axes[:8]).reshape(2, 4)
    labels = [axes[k, 2].yaxis.label for k in range(2)]
    assert all(len(t.get_text().splitlines()[0]) <= 16 + len(" (other class)") for t in labels)
    assert "(other class)" not in labels[0].get_text() and "(other class)" in labels[1].get_text()
    assert matplotlib.colors.same_color(labels[0].get_color(), SAME_CLASS_COLOR)
    assert matplotlib.colors.same_color(labels[1].get_color(), OTHER_CLASS_COLOR)
    grid = overlay_grid([sm, sm], names=["m1", "m2"], n_images=2)
    assert len(grid.axes[0].get_ylabel().splitlines()[0]) <= 16


@pytest.mark.parametrize("figure", ["pairs", "grid"])
def test_saliency_colour_bar_shows_the_colours_as_seen_over_dark_and_bright_pixels(figure):
    """The maps are blended onto the dimmed image with opacity alpha x saliency, so a pixel of
    saliency 0.5 is not the colour map's 0.5 (the opaque bar used to say so): the bar's two columns
    are the blend over the darkest and the brightest image pixel. Checked on the rendered pixels."""
    from embedscope.store.saliency import SaliencyMaps
    from embedscope.viz.saliency import overlay_grid, pairs_figure

    imgs = np.stack([np.zeros((8, 8)), np.full((8, 8), 255)]).astype(np.uint8)  # one dark, one bright
    for s in (0.25, 0.5, 0.9):
        maps = np.full((2, 8, 8), s, dtype=np.float32)
        sm = SaliencyMaps(maps=maps, paths=["q0", "q1"], labels=np.array([0, 1]), class_names=["a", "b"],
                          images=imgs, retrieval={"maps": maps, "paths": ["r0", "r1"], "labels": np.array([0, 1]),
                                                  "images": imgs, "distance": np.array([0.1, 0.2])})
        fig = pairs_figure(sm, n_pairs=2) if figure == "pairs" else overlay_grid([sm], names=["m"], n_images=2)
        fig.canvas.draw()
        buf = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(float)

        def pixel(ax, fx, fy, buf=buf):
            b = ax.get_window_extent()
            return buf[int(round(buf.shape[0] - (b.y0 + fy * b.height))), int(round(b.x0 + fx * b.width))]

        cax = fig.axes[-1]
        per_row = 4 if figure == "pairs" else 2
        for row, column in ((0, 0.25), (1, 0.75)):  # the dark image, the bright one
            seen = pixel(fig.axes[row * per_row + 1], 0.5, 0.5)
            bar = pixel(cax, column, s)
            assert np.abs(seen - bar).max() <= 3, (s, row, seen, bar)
        plt.close(fig)


def test_saliency_pairs_retrieval_caption_clears_the_query_map():
    """The retrieval's three-line caption (class, path, distance) is drawn left of its picture, and
    it ran into the query's map beside it (6 px at 100 dpi in the demo's figure)."""
    for n in (6, 20):  # the demo's figure; a long one
        _pairs_captions_clear(n)


def pairs_maps(n: int):
    """A pairs maps file's contents of ``n`` digits-sized queries and their retrievals (random maps)."""
    from embedscope.store.saliency import SaliencyMaps

    rng = np.random.default_rng(0)
    maps = rng.uniform(size=(n, 8, 8)).astype(np.float32)
    imgs = rng.integers(0, 255, size=(n, 8, 8)).astype(np.uint8)
    return SaliencyMaps(maps=maps, paths=[f"digits/{i:04d}" for i in range(n)], labels=np.arange(n) % 3,
                        class_names=["6", "8", "9"], images=imgs,
                        retrieval={"maps": maps, "paths": [f"digits/{i + 1000:04d}" for i in range(n)],
                                   "labels": (np.arange(n) + 1) % 3, "images": imgs, "distance": np.full(n, 0.379)},
                        attrs={"distance": "euclidean"})


def _pairs_captions_clear(n: int) -> None:
    from embedscope.viz.saliency import pairs_figure

    sm = pairs_maps(n)
    fig = pairs_figure(sm, n_pairs=n)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    for k in range(n):
        caption = fig.axes[4 * k + 2].yaxis.label.get_window_extent(r)
        assert caption.x0 >= fig.axes[4 * k + 1].get_window_extent(r).x1, (n, k)
    plt.close(fig)


def test_neighbours_rows_fit_their_square_pictures_and_float_pictures_pad_white(caplog):
    import logging
    import warnings

    from embedscope.analyses.neighbours import NeighbourExamples
    from embedscope.viz.neighbours import draw_neighbours

    n, k = 4, 5
    ex = NeighbourExamples(query_paths=np.array(["q"] * n), query_labels=np.array(["a"] * n),
                           ref_paths=np.array([["r"] * k] * n), ref_labels=np.array([["a"] * k] * n),
                           similarity=np.linspace(0.9, 0.5, n * k).reshape(n, k), correct=np.ones((n, k), bool),
                           query_split="test", reference_split="test", metric="cosine")
    img = np.random.default_rng(0).uniform(size=(16, 16, 3))  # float RGB in [0, 1]
    with warnings.catch_warnings(record=True) as rec, caplog.at_level(logging.WARNING, logger="matplotlib"):
        warnings.simplefilter("always")
        fig = draw_neighbours(ex, [img] * n, [[img] * k] * n)
        fig.canvas.draw()
    assert not rec
    assert "Clipping" not in caplog.text  # padded with 255 before: clipped, and logged once per picture
    r = fig.canvas.get_renderer()
    H = fig.bbox.height
    title_bottom = fig._suptitle.get_window_extent(r).y0
    col_title_top = fig.axes[0].title.get_window_extent(r).y1
    assert (title_bottom - col_title_top) / fig.dpi < 0.35  # ~0.8 in of empty canvas under the title before
    W_px = fig.axes[0].get_window_extent(r)
    assert abs(W_px.width - W_px.height) < 0.03 * fig.dpi and H > 0


def test_spectrum_legend_of_many_models_sits_beside_the_panel():
    s = np.linspace(1, 0.1, 16)
    fig = plot_spectra([{"label": f"model {i}", "spectrum": s ** (1 + i / 10), "rho": 0.1 * i} for i in range(14)])
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    leg, box = ax.get_legend().get_window_extent(r), ax.get_window_extent(r)
    assert leg.x0 >= box.x1  # 14 entries inside the panel covered the curves and the x label
    assert ax.xaxis.label.get_window_extent(r).x1 < leg.x0


def test_agreement_heatmap_keeps_models_with_a_common_long_suffix_apart():
    from embedscope.viz.saliency import agreement_heatmaps

    names = [f"model_{i}_trained_with_a_long_common_suffix" for i in range(3)]
    A = [[1.0, 0.5, 0.4], [0.5, 1.0, 0.3], [0.4, 0.3, 1.0]]
    res = {"names": names, "families": ["ranking"] * 3, "n_images": 4, "pairs": {"a": {"jsd_base": "bits"}},
           "r_mean": A, "r_spread": A, "jsd_mean": A, "jsd_std": A, "blocks": []}
    fig = agreement_heatmaps(res)
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert len(set(ticks)) == 3 and all(len(t) <= 18 for t in ticks)  # all three read "…ong_common_suffix" before


def test_agreement_heatmap_caption_says_n_a_for_undefined_block_means():
    """A model with all-zero maps (collapsed: no gradient) has no r or JSD: its cells read 'n/a', and
    so does the caption's block mean (it read 'r nan, JSD nan')."""
    from embedscope.viz.saliency import agreement_heatmaps

    nan = float("nan")
    A = [[1.0, nan], [nan, 1.0]]
    res = {"names": ["collapsed", "normal"], "families": ["untrained"] * 2, "n_images": 6,
           "pairs": {"a": {"jsd_base": "bits"}}, "r_mean": A, "r_spread": A, "jsd_mean": A, "jsd_std": A,
           "blocks": [{"family_a": "untrained", "family_b": "untrained", "r_mean": nan, "jsd_mean": nan, "n_pairs": 1},
                      {"family_a": "a", "family_b": "b", "r_mean": 0.25, "jsd_mean": 0.125, "n_pairs": 2}]}
    fig = agreement_heatmaps(res)
    caption = " ".join(t.get_text() for t in fig.texts).replace("\n", " ")
    assert "untrained–untrained: r n/a, JSD n/a (1 pair)" in caption and "nan" not in caption
    assert "a–b: r 0.250, JSD 0.1250 (2 pairs)" in caption
