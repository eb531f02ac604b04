"""Yoked t-SNE of K ≥ 2 maps (docs/methods.md §10): ``plot_yoked_maps`` draws every map in one shared
window with one class colour map, in rows of at most 4 panels, with a zoom row under each row of maps
on request; ``plot_yoked_tsne`` is its two-map case.

Checked on the matplotlib Figure objects (scatter offsets and colours, limits, texts, drawn extents)."""

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg", force=True)

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from embedscope.errors import EmbedscopeError  # noqa: E402
from embedscope.viz import plot_yoked_maps, plot_yoked_tsne  # noqa: E402
from embedscope.viz.style import ClassPalette  # noqa: E402

CLASSES = ["cat", "Black_footed_Albatross", "owl", "a_rather_long_class_name_number_17", "x"]
N = 25
ROWS = {2: [2], 3: [3], 4: [4], 5: [3, 2], 6: [3, 3]}


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _maps(k, n=N, seed=0):
    """``k`` maps of the same ``n`` points, each a small step from the one before (as yoked maps are)."""
    rng = np.random.default_rng(seed)
    lab = np.arange(n) % len(CLASSES)
    Y = rng.normal(size=(len(CLASSES), 2))[lab] * 8 + rng.normal(size=(n, 2))
    out = []
    for _ in range(k):
        Y = Y + rng.normal(size=(n, 2)) * 0.5
        out.append(Y.copy())
    return out, lab


def _map_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible() and not ax.get_title().startswith("class ")]


def _zoom_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_title().startswith("class ")]


def _colour_by_point(ax, coll=0):
    c = ax.collections[coll]
    offs, cols = np.asarray(c.get_offsets()), np.asarray(c.get_facecolors())
    assert len(cols) == len(offs)
    return {(float(x), float(y)): tuple(np.round(col, 6)) for (x, y), col in zip(offs, cols)}


def _rows(axes):
    """The panels grouped by row (top first), each row left to right."""
    by_y = {}
    for ax in axes:
        by_y.setdefault(round(ax.get_position().y0, 3), []).append(ax)
    return [sorted(r, key=lambda a: a.get_position().x0) for _, r in sorted(by_y.items(), reverse=True)]


@pytest.mark.parametrize("k", [2, 3, 5, 6])
def test_k_maps_share_window_colours_and_labels(k):
    Ys, lab = _maps(k)
    names = [f"epoch {5 * (i + 1)}" for i in range(k)]
    fig = plot_yoked_maps(Ys, lab, names=names, class_names=CLASSES, split="test")
    axes = _map_axes(fig)
    assert len(axes) == k and len(fig.axes) == k  # no hidden spare axes either
    assert [ax.get_title() for ax in axes] == names
    want = "Yoked t-SNE, test split (25 images)" if k == 2 else f"Yoked t-SNE of {k} maps, test split (25 images)"
    assert fig._suptitle.get_text() == want

    # every point drawn in each panel, in its class's colour, the same colour in every panel
    pal = ClassPalette(CLASSES)
    for ax, Y in zip(axes, Ys):
        got = _colour_by_point(ax)
        assert len(got) == N and len(ax.collections[0].get_offsets()) == N
        for y, c in zip(Y, lab):
            assert got[(float(y[0]), float(y[1]))][:3] == tuple(np.round(pal[CLASSES[c]][:3], 6))
    per_panel = [[_colour_by_point(ax)[(float(y[0]), float(y[1]))] for y in Y] for ax, Y in zip(axes, Ys)]
    assert all(p == per_panel[0] for p in per_panel)

    # one window for all maps, holding every point of every map
    xl, yl = axes[0].get_xlim(), axes[0].get_ylim()
    allpts = np.vstack(Ys)
    for ax in axes:
        assert np.allclose(ax.get_xlim(), xl) and np.allclose(ax.get_ylim(), yl)
    assert xl[0] < allpts[:, 0].min() and allpts[:, 0].max() < xl[1]
    assert yl[0] < allpts[:, 1].min() and allpts[:, 1].max() < yl[1]

    # rows of at most 4 panels; the y label on the first panel of each row, the x label on every panel
    rows = _rows(axes)
    assert [len(r) for r in rows] == ROWS[k]
    for r in rows:
        assert [ax.get_ylabel() for ax in r] == ["t-SNE 2"] + [""] * (len(r) - 1)
    assert all(ax.get_xlabel() == "t-SNE 1" for ax in axes)
    # rows in reading order: fig.axes[i] is map i
    assert [ax for r in rows for ax in r] == axes


@pytest.mark.parametrize("k", [2, 4, 5])  # 5: three columns, the last row centred
def test_long_names_and_zoom_titles_neither_collide_nor_leave_the_figure(k):
    Ys, lab = _maps(k)
    names = [f"resnet50_margin_loss_checkpoint_epoch_{i}_final" for i in range(k)]
    fig = plot_yoked_maps(Ys, lab, names=names, class_names=CLASSES, inset_class=1, split="test",
                          info={"alpha": 0.001, "yoke": "points", "kl": [1.0] * k, "mean_displacement": 0.5})
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    W = fig.bbox.width
    for row in [*_rows(_map_axes(fig)), *_rows(_zoom_axes(fig))]:
        boxes = [ax.title.get_window_extent(r) for ax in row]
        assert all(0 <= b.x0 and b.x1 <= W for b in boxes)
        assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:]))
    for ax in _map_axes(fig):
        assert "…" in ax.get_title() and ax.get_title().endswith("_final")


@pytest.mark.parametrize("k", [2, 3, 6])
def test_zoom_row_under_each_row_of_maps(k):
    Ys, lab = _maps(k)
    fig = plot_yoked_maps(Ys, lab, class_names=CLASSES, inset_class=1)
    axes, zooms = _map_axes(fig), _zoom_axes(fig)
    assert len(axes) == k and len(zooms) == k and len(fig.axes) == 2 * k
    assert [ax.get_title() for ax in axes] == [f"map {i + 1}" for i in range(k)]
    for ax, zax, Y in zip(axes, zooms, Ys):
        assert zax.get_position().y1 < ax.get_position().y0  # under its map
        assert np.isclose(zax.get_position().x0, ax.get_position().x0)
        assert zax.get_title().startswith("class Black_") and "zoomed" in zax.get_title()
        boxes = [p for p in ax.patches if isinstance(p, Rectangle)]
        assert len(boxes) == 1  # the zoomed box, marked on the map
        (bx, by), bw, bh = boxes[0].get_xy(), boxes[0].get_width(), boxes[0].get_height()
        assert np.allclose(zax.get_xlim(), (bx, bx + bw)) and np.allclose(zax.get_ylim(), (by, by + bh))
        # the class's points, drawn last (on top) in the zoom
        sel = Y[lab == 1]
        offs = np.asarray(zax.collections[-1].get_offsets())
        assert sorted(map(tuple, offs)) == sorted(map(tuple, sel))
        assert zax.get_xlabel() == "t-SNE 1"
    for row in _rows(zooms):
        assert [ax.get_ylabel() for ax in row] == ["t-SNE 2"] + [""] * (len(row) - 1)
    if k == 2:  # as before: the two maps, then the two zooms
        assert fig.axes[:2] == axes and fig.axes[2:] == zooms


def test_settings_note_leaves_out_lists():
    Ys, lab = _maps(3)
    info = {"alpha": 0.001, "alpha_times_n": 0.025, "yoke": "centroids", "perplexity": 30.0, "seed": 3,
            "kl": [1.1, 1.2, 1.3], "mean_displacement": 0.4567}
    fig = plot_yoked_maps(Ys, lab, info=info)
    note = [t.get_text() for t in fig.texts if t.get_text().startswith("yoked t-SNE:")]
    assert note == ["yoked t-SNE: alpha=0.001, alpha_times_n=0.025, yoke=centroids, perplexity=30, seed=3, "
                    "mean_displacement=0.4567"]
    fig = plot_yoked_maps(Ys[:2], lab, info={"kl_a": 1.5, "kl_b": 1.25, "yoke": "points"})
    assert [t.get_text() for t in fig.texts if t.get_text().startswith("yoked")] == \
        ["yoked t-SNE: yoke=points, kl_a=1.5, kl_b=1.25"]


def test_errors_are_one_line():
    Ys, lab = _maps(3)
    cases = [
        (lambda: plot_yoked_maps(Ys[:1], lab), "at least 2 maps, got 1"),
        (lambda: plot_yoked_maps([], lab), "at least 2 maps, got 0"),
        (lambda: plot_yoked_maps(Ys[0], lab), "sequence of at least 2 maps"),
        (lambda: plot_yoked_maps([Ys[0], Ys[1][:-1]], lab), "same points"),
        (lambda: plot_yoked_maps([Ys[0][:, :1], Ys[1][:, :1]], lab), r"\(N, 2\)"),
        (lambda: plot_yoked_maps(Ys, lab, names=["a", "b"]), "2 names for 3 maps"),
        (lambda: plot_yoked_maps(Ys, lab[:-1]), "24 labels"),
        (lambda: plot_yoked_maps(Ys, lab, inset_class=9), "inset class 9"),
        (lambda: plot_yoked_tsne(Ys[0], Ys[1][:-1], lab), "same points"),
    ]
    for call, match in cases:
        with pytest.raises(EmbedscopeError, match=match) as e:
            call()
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("inset", [None, 2])
def test_plot_yoked_tsne_is_the_two_map_case(inset):
    Ys, lab = _maps(2, seed=4)
    kw = dict(class_names=CLASSES, inset_class=inset, split="test", names=("model A", "model B"),
              info={"alpha": 0.001, "kl_a": 1.5, "kl_b": 1.25, "mean_displacement": 0.3})
    f1 = plot_yoked_tsne(Ys[0], Ys[1], lab, **kw)
    f2 = plot_yoked_maps(Ys, lab, **kw)
    assert np.allclose(f1.get_size_inches(), f2.get_size_inches())
    assert len(f1.axes) == len(f2.axes) == (4 if inset is not None else 2)
    for a, b in zip(f1.axes, f2.axes):
        assert a.get_title() == b.get_title() and a.get_xlabel() == b.get_xlabel() and a.get_ylabel() == b.get_ylabel()
        assert np.allclose(a.get_position().bounds, b.get_position().bounds)
        assert np.allclose(a.get_xlim(), b.get_xlim()) and np.allclose(a.get_ylim(), b.get_ylim())
        assert len(a.collections) == len(b.collections)
        for ca, cb in zip(a.collections, b.collections):
            assert np.array_equal(ca.get_offsets(), cb.get_offsets())
            assert np.array_equal(ca.get_facecolors(), cb.get_facecolors())
    assert [t.get_text() for t in f1.texts] == [t.get_text() for t in f2.texts]
    assert f1._suptitle.get_text() == f2._suptitle.get_text() == "Yoked t-SNE, test split (25 images)"
    # the default panel names stay "A" and "B"
    assert [ax.get_title() for ax in plot_yoked_tsne(*Ys, lab).axes] == ["A", "B"]


def test_exported_from_the_front_door():
    import embedscope.viz as viz

    assert "plot_yoked_maps" in viz.__all__
    from embedscope.viz.tsne import plot_yoked_maps as direct

    assert viz.plot_yoked_maps is direct
