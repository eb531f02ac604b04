"""Figures, audit 27: the ``neighbours`` titles and captions of a row at one height whatever the
pictures' shapes; the ``yoke --inset-class`` zoom of a class spread over the whole map."""

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg", force=True)

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from embedscope import store  # noqa: E402
from embedscope.analyses import neighbour_examples  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


# ------------------------------------------------------------------ neighbours: one height a row
SIZES = [(120, 40), (40, 120), (60, 60)]  # (width, height): wide, tall, square
COLOURS = [(200, 30, 30), (30, 30, 200), (30, 160, 30), (220, 200, 0)]


def _photo_folder(tmp_path, n=24):
    from PIL import Image

    root = tmp_path / "photos"
    paths = []
    for i in range(n):
        p = f"c{i % 4}/img{i:02d}.png"
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", SIZES[i % 3], COLOURS[i % 4]).save(root / p)
        paths.append(p)
    rng = np.random.default_rng(0)
    y = np.arange(n) % 4
    X = rng.normal(size=(n, 6)) + 2.0 * np.eye(6)[y]
    es = store.EmbeddingSet.from_arrays(X.astype(np.float32), y, paths=paths,
                                        attrs={"dataset": "imagefolder", "root": str(root)})
    return es, root


def _drawn_neighbours(tmp_path, queries=3, k=5):
    from embedscope.data.thumbnails import neighbour_pictures
    from embedscope.viz.neighbours import draw_neighbours

    es, root = _photo_folder(tmp_path)
    ex = neighbour_examples(es, split="all", queries=queries, k=k, seed=0)
    qimgs, rimgs = neighbour_pictures(ex, dataset="imagefolder", root=str(root))
    shapes = {np.asarray(im).shape[:2] for im in [*qimgs, *(im for row in rimgs for im in row)]}
    assert len(shapes) == 3  # wide, tall and square pictures in the grid
    fig = draw_neighbours(ex, qimgs, rimgs)
    fig.canvas.draw()
    return fig, ex, qimgs, rimgs


def test_neighbours_titles_and_captions_of_a_row_sit_at_one_height(tmp_path):
    """Wide (120 x 40), tall and square photos: the "query" / "rank N" titles of the first row have
    one height, and so have the captions and the frames of each row (a wide photo's title sat about
    33 pixels lower than a tall one's: it followed the picture's drawn extent)."""
    fig, ex, _, _ = _drawn_neighbours(tmp_path)
    r = fig.canvas.get_renderer()
    n, k = ex.correct.shape
    axes = np.array(fig.axes).reshape(n, k + 1)
    titles = [ax.title.get_window_extent(r) for ax in axes[0]]
    assert [ax.get_title() for ax in axes[0]] == ["query"] + [f"rank {j + 1}" for j in range(k)]
    assert max(b.y0 for b in titles) - min(b.y0 for b in titles) < 1.0
    for row in axes:
        caps = [ax.xaxis.label.get_window_extent(r) for ax in row]
        assert max(b.y1 for b in caps) - min(b.y1 for b in caps) < 1.0
        frames = [ax.get_window_extent(r) for ax in row]
        assert max(b.y1 for b in frames) - min(b.y1 for b in frames) < 1.0
        assert all(abs(b.width - b.height) < 1.0 for b in frames)  # every frame square


def test_neighbours_picture_keeps_its_shape_inside_its_square_frame(tmp_path):
    """A picture that is not square is drawn whole, at its own shape, in white bands: the drawn
    array holds the thumbnail's pixels unchanged, centred, and white around them."""
    fig, ex, qimgs, rimgs = _drawn_neighbours(tmp_path)
    n, k = ex.correct.shape
    pics = [p for r in range(n) for p in (qimgs[r], *rimgs[r])]
    for ax, pic in zip(fig.axes, pics):
        pic = np.asarray(pic)
        shown = np.asarray(ax.images[0].get_array())
        h, w = pic.shape[:2]
        side = max(h, w) + 2 * max(1, int(round(0.07 * max(h, w))))
        assert shown.shape == (side, side, 3)
        top, left = (side - h) // 2, (side - w) // 2
        np.testing.assert_array_equal(shown[top:top + h, left:left + w], pic)
        white = np.ones(shown.shape[:2], bool)
        white[top:top + h, left:left + w] = False
        assert (shown[white] == 255).all()


# ------------------------------------------------------------------ yoke: zoom of a map-wide class
def _spread_class_maps(seed=0):
    """Three classes; class 1 spread over the whole map but for a knot of 80 points at (8, 5)."""
    rng = np.random.default_rng(seed)
    n = 600
    lab = np.arange(n) % 3
    Y = rng.normal(size=(n, 2)) * 2 + np.array([[-15, -10], [0, 12], [15, -10]])[lab]
    spread = np.flatnonzero(lab == 1)
    Y[spread] = rng.uniform(-25, 25, size=(len(spread), 2))
    knot = spread[:80]
    Y[knot] = rng.normal(size=(80, 2)) * 1.5 + np.array([8.0, 5.0])
    return [Y, Y * 1.05 + 0.3], lab, knot


def _zooms(fig):
    return [ax for ax in fig.axes if "zoomed" in ax.get_title()]


def test_zoom_of_a_class_spread_over_the_map_shows_its_densest_part():
    """A class whose points span the whole map: the zoom window is at most half the map's width
    and height (it was as large as the map: no zoom), it holds the class's dense knot, its title
    says it shows the densest part, and the dashed box on the map is the zoom's window."""
    from embedscope.viz import plot_yoked_maps

    Ys, lab, knot = _spread_class_maps()
    fig = plot_yoked_maps(Ys, lab, inset_class=1, class_names=["a", "spread", "c"], split="test")
    fig.canvas.draw()
    zooms = _zooms(fig)
    maps = [ax for ax in fig.axes if ax not in zooms]
    assert len(zooms) == 2 and len(maps) == 2
    for ax, zax, Y in zip(maps, zooms, Ys):
        assert zax.get_title() == "class spread zoomed\n(densest part: dashed box)"
        (x0, x1), (y0, y1) = zax.get_xlim(), zax.get_ylim()
        (mx0, mx1), (my0, my1) = ax.get_xlim(), ax.get_ylim()
        assert (x1 - x0) <= 0.5 * (mx1 - mx0) * 1.02
        assert (y1 - y0) <= 0.5 * (my1 - my0) * 1.02
        P = Y[knot]
        inside = (P[:, 0] >= x0) & (P[:, 0] <= x1) & (P[:, 1] >= y0) & (P[:, 1] <= y1)
        assert inside.mean() > 0.95
        c = np.median(P, axis=0)  # the knot near the window's middle, not at its edge
        assert abs(c[0] - (x0 + x1) / 2) < 0.2 * (x1 - x0) and abs(c[1] - (y0 + y1) / 2) < 0.2 * (y1 - y0)
        box = [p for p in ax.patches if isinstance(p, Rectangle)][0]
        assert (box.get_x(), box.get_y(), box.get_width(), box.get_height()) == pytest.approx(
            (x0, y0, x1 - x0, y1 - y0), rel=1e-12)


def test_zoom_window_is_the_densest_window_of_its_size():
    """:func:`_zoom_window` against a brute-force count: of all windows of the chosen size centred
    on a class point, none holds more of the class's points in the window a third its size."""
    from embedscope.viz.tsne import ZOOM_ROW_RATIO, _zoom_window

    Ys, lab, _ = _spread_class_maps(seed=3)
    P = Ys[0][lab == 1]
    lo, hi = np.array([-26.0, -26.0]), np.array([26.0, 26.0])
    zlo, zhi, densest = _zoom_window(P, lo, hi)
    assert densest
    w, h = zhi - zlo
    assert w == pytest.approx(0.5 * 52) and h == pytest.approx(0.5 * 52 * ZOOM_ROW_RATIO)
    c = (zlo + zhi) / 2
    core = np.array([w, h]) / 6

    def count(at):
        return int(np.all(np.abs(P - at) <= core, axis=1).sum())

    assert count(c) == max(count(p) for p in P)


def test_zoom_of_a_compact_class_is_the_box_around_its_points():
    """A class within a quarter of the map: the zoom is the box around its central 96% of points
    (2nd to 98th percentile, 15% margin, widened to the zoom's shape), as before; no "densest"."""
    from embedscope.viz.tsne import ZOOM_ROW_RATIO, _zoom_window

    rng = np.random.default_rng(1)
    P = rng.normal(size=(200, 2)) * np.array([1.0, 3.0]) + 5
    zlo, zhi, densest = _zoom_window(P, np.array([-30.0, -30.0]), np.array([30.0, 30.0]))
    assert not densest
    qlo, qhi = np.percentile(P, 2, axis=0), np.percentile(P, 98, axis=0)
    span = (qhi - qlo) * 1.3
    want = np.array([max(span[0], span[1] / ZOOM_ROW_RATIO), max(span[1], span[0] * ZOOM_ROW_RATIO)])
    np.testing.assert_allclose(zhi - zlo, want)
    np.testing.assert_allclose((zlo + zhi) / 2, (qlo + qhi) / 2)


def test_the_visualizations_page_states_the_zoom_rule():
    from pathlib import Path

    from embedscope.viz.tsne import DENSEST_ZOOM_SHARE, MAX_ZOOM_AREA

    text = " ".join((Path(__file__).parents[1] / "docs" / "visualizations.md").read_text().split())
    assert MAX_ZOOM_AREA == 0.6 and "A zoom shows at most 60% of the map's area" in text
    assert DENSEST_ZOOM_SHARE == 0.5 and "through a window half the map's width and half its height" in text
    assert "`(densest part: dashed box)`" in text
    assert "Every frame is square: a wide or tall photo is drawn whole" in text


def test_zoom_of_a_knot_at_the_map_edge_stays_within_the_map():
    """The densest part in a corner of the map: the window is moved to lie within the map's window
    (centred on the knot, the dashed box ran off the map's edge), and still holds the knot."""
    from embedscope.viz.tsne import _zoom_window

    rng = np.random.default_rng(2)
    P = np.vstack([rng.uniform(-25, 25, size=(150, 2)), rng.normal(size=(60, 2)) * 0.5 + np.array([24.0, -24.0])])
    lo, hi = np.array([-26.0, -26.0]), np.array([26.0, 26.0])
    zlo, zhi, densest = _zoom_window(P, lo, hi)
    assert densest
    assert np.all(zlo >= lo - 1e-9) and np.all(zhi <= hi + 1e-9)
    assert zhi[0] == pytest.approx(26.0) and zlo[1] == pytest.approx(-26.0)
    knot = P[150:]
    assert np.all((knot >= zlo) & (knot <= zhi), axis=1).mean() > 0.95


@pytest.mark.parametrize("knot", [(-5.0, -25.0), (25.0, 0.0), (24.0, -24.0)])
def test_densest_part_box_lies_within_the_map_as_drawn(knot):
    """A class spread over the map with its knot at the map's edge: the dashed box (the zoom's
    window, after the layout has fitted both panels) lies inside the map's window, so all four of
    its sides are seen; the zoom keeps the map's scale on both axes."""
    from embedscope.viz import plot_yoked_maps

    rng = np.random.default_rng(4)
    n = 450
    lab = np.arange(n) % 3
    Y = rng.normal(size=(n, 2)) * 2 + np.array([[-15, 10], [0, 0], [15, 10]])[lab]
    spread = np.flatnonzero(lab == 1)
    Y[spread] = rng.uniform(-25, 25, size=(len(spread), 2))
    Y[spread[:70]] = rng.normal(size=(70, 2)) * 0.8 + np.array(knot)
    fig = plot_yoked_maps([Y, Y + 0.2], lab, inset_class=1)
    fig.canvas.draw()
    zooms = _zooms(fig)
    maps = [ax for ax in fig.axes if ax not in zooms]
    for ax, zax in zip(maps, zooms):
        assert "densest part" in zax.get_title()
        x0, x1, y0, y1 = _box_within_map(ax, zax)
        bb = zax.get_window_extent()
        assert (x1 - x0) / bb.width == pytest.approx((y1 - y0) / bb.height, rel=0.02)


def _box_within_map(ax, zax):
    """The dashed box on map ``ax`` (x0, x1, y0, y1): inside the map's window (all four sides seen) and
    exactly the zoom ``zax``'s window."""
    box = [p for p in ax.patches if isinstance(p, Rectangle)][0]
    (mx0, mx1), (my0, my1) = ax.get_xlim(), ax.get_ylim()
    x0, y0 = box.get_xy()
    x1, y1 = x0 + box.get_width(), y0 + box.get_height()
    assert mx0 < x0 < x1 < mx1 and my0 < y0 < y1 < my1
    assert (x0, x1, y0, y1) == pytest.approx((*zax.get_xlim(), *zax.get_ylim()), rel=1e-12)
    return x0, x1, y0, y1


def test_compact_class_box_at_the_map_edge_lies_within_the_map_as_drawn():
    """A compact class in the map's corner (not the densest-part rule): its window, centred on the class,
    ran off the map's edge (one side of the dashed box hidden); it is moved within the map, at the same
    size and scale, and still holds the class (the box around its central 96% of points)."""
    from embedscope.viz import plot_yoked_maps

    rng = np.random.default_rng(5)
    n = 450
    lab = np.arange(n) % 3
    Y = rng.normal(size=(n, 2)) * 2 + np.array([[-15, 10], [0, 0], [15, -12]])[lab]
    c = lab == 2  # tall and thin at the map's right edge: its window, widened to the zoom's shape, ran off it
    Y[c] = rng.normal(size=(c.sum(), 2)) * np.array([0.6, 5.0]) + np.array([16.0, 0.0])
    fig = plot_yoked_maps([Y, Y + 0.2], lab, inset_class=2)
    fig.canvas.draw()
    zooms = _zooms(fig)
    maps = [ax for ax in fig.axes if ax not in zooms]
    for ax, zax in zip(maps, zooms):
        assert "densest part" not in zax.get_title()
        x0, x1, y0, y1 = _box_within_map(ax, zax)
        off = 0.2 if ax is maps[1] else 0.0
        C = Y[lab == 2] + off
        assert np.mean((C[:, 0] >= x0) & (C[:, 0] <= x1) & (C[:, 1] >= y0) & (C[:, 1] <= y1)) > 0.97  # (its 2-98% box)


# ------------------------------------------------------------------ spectrum: the y label fits its panel
@pytest.mark.parametrize("by_class", [False, True])
def test_spectrum_y_label_is_no_taller_than_its_panel(by_class):
    """On one line the y label ("normalised singular value  sₖ / Σ s", 9 pt) was longer than the
    2.7 inch figure's panel: drawn past its top and bottom, up to the by-class figure's title."""
    from embedscope.viz import plot_spectra

    s = np.linspace(1.0, 0.05, 16) ** 3
    e = [{"label": name, "spectrum": s ** p, "rho": 0.1, "class_mean": s ** p / np.sum(s ** p),
          "class_std": 0.1 * s ** p / np.sum(s ** p)} for name, p in (("margin", 1.0), ("R-margin", 0.7))]
    fig = plot_spectra(e, by_class=by_class, title="Singular-value spectra (train split)")
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        lab, box = ax.yaxis.label.get_window_extent(r), ax.get_window_extent(r)
        assert box.y0 - 1 <= lab.y0 and lab.y1 <= box.y1 + 1, (lab, box)
        assert ax.get_ylabel().replace("\n", " ") == "normalised singular value sₖ / Σ s"


# ------------------------------------------------------------------ saliency pairs: no empty band under the title
@pytest.mark.parametrize("n", [2, 4, 6])
def test_saliency_pairs_rows_fit_their_square_pictures(n):
    """``saliency --pairs --figure``: each row is as tall as its square pictures (the rows were
    1.6 in tall in slots narrower than that, so the pictures sat in the middle of their slots and
    half an inch of empty canvas lay between the title and the column titles); the captions stay
    clear of the query's map and the colour bar of the pictures."""
    from test_audit_figures import pairs_maps

    from embedscope.viz.saliency import pairs_figure

    sm = pairs_maps(n)
    fig = pairs_figure(sm, n_pairs=n)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    gap = fig._suptitle.get_window_extent(r).y0 - max(ax.title.get_window_extent(r).y1 for ax in fig.axes[:4])
    assert 0 <= gap / fig.dpi < 0.3, gap / fig.dpi
    pics = fig.axes[:4 * n]
    for ax in pics:  # each picture fills its slot: the slot is square
        slot = ax.get_position(original=True)
        assert slot.width * fig.get_figwidth() == pytest.approx(slot.height * fig.get_figheight(), rel=0.03)
    cbar = fig.axes[-1].get_window_extent(r)
    assert all(ax.get_window_extent(r).x1 < cbar.x0 for ax in pics)
    for k in range(n):
        caption = fig.axes[4 * k + 2].yaxis.label.get_window_extent(r)
        assert caption.x0 >= fig.axes[4 * k + 1].get_window_extent(r).x1


@pytest.mark.parametrize("side", [40.0, 52.0, 56.0, 60.0, 100.0])
def test_densest_part_only_when_the_zoom_would_show_more_than_60_percent_of_the_map(side):
    """The rule in numbers: the box of the class's central 96% (15% margin), widened to the zoom's
    shape, is kept when it covers at most 60% of the map's area (computed here); beyond, the window is
    half the map's width by the zoom's shape, no larger than half its height."""
    from embedscope.viz.tsne import ZOOM_ROW_RATIO, _zoom_window

    rng = np.random.default_rng(5)
    P = rng.uniform(-side / 2, side / 2, size=(400, 2))
    lo, hi = np.array([-50.0, -50.0]), np.array([50.0, 50.0])
    q = np.percentile(P, [2, 98], axis=0)
    w, h = 1.3 * (q[1] - q[0])
    area = max(w, h / ZOOM_ROW_RATIO) * max(h, w * ZOOM_ROW_RATIO)
    zlo, zhi, densest = _zoom_window(P, lo, hi)
    assert densest == (area > 0.6 * 100 * 100)
    if densest:
        np.testing.assert_allclose(zhi - zlo, [50.0, 50.0 * ZOOM_ROW_RATIO])
    else:
        np.testing.assert_allclose((zhi - zlo).prod(), area)
