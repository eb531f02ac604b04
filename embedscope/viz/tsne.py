"""Figures of t-SNE maps (docs/methods.md §10): one map, the joint train/test map, the yoked maps.

Drawing only: the maps are computed by :mod:`embedscope.tsne` (:func:`~embedscope.tsne.single_tsne`,
:func:`~embedscope.tsne.joint_tsne`, :func:`~embedscope.tsne.yoked_tsne`). Colours come from the
one class palette of :mod:`embedscope.viz.style` (keyed by class name), so a class has the same
colour in every figure; pass ``palette=`` to tie several figures to one explicit map.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.viz.style import (
    MAX_LEGEND_ENTRIES,
    PAPER_RC,
    TEST_COLOR,
    TITLE_CHARS,
    TRAIN_COLOR,
    ClassPalette,
    class_legend,
    class_legend_layout,
    finish_layout,
    label_names,
    legend_note,
    marker_size,
    settings_text,
    short_text,
)

#: the largest height / width (and width / height) of a map panel; a more elongated map gets a
#: wider window in its short direction (the scale stays equal on both axes)
MAX_PANEL_RATIO = 1.5


def _map_window(Ys: Sequence[np.ndarray], *, pad: float = 0.04,
                max_ratio: float = MAX_PANEL_RATIO) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of a window holding every point of ``Ys`` with a margin, its height/width ratio in
    [1/max_ratio, max_ratio] (equal scale on both axes)."""
    pts = np.vstack([np.asarray(Y, dtype=np.float64).reshape(-1, 2) for Y in Ys])
    pts = pts[np.all(np.isfinite(pts), axis=1)]
    if len(pts) == 0:
        return np.array([-1.0, -1.0]), np.array([1.0, 1.0])
    lo, hi = pts.min(0), pts.max(0)
    # a floor relative to the map's scale (all points at one place): an absolute 1e-9 drew a map of
    # ~1e-12 coordinates (a few iterations) as one dot in the middle of an empty panel
    top = float(np.abs(pts).max())
    span = np.maximum(hi - lo, 1e-9 * (top if top > 0 else 1.0))
    span = np.maximum(span, span.max() / max_ratio)  # not too elongated
    centre = (lo + hi) / 2
    half = span * (0.5 + pad)
    return centre - half, centre + half


#: the height of one line of the settings note (6 pt, line spacing 1.2), in inches
NOTE_LINE_H = 0.1


def _wrap_note(note: str, width: float) -> tuple[str, float]:
    """The settings note of :func:`~embedscope.viz.style.finish_layout` (6 pt, one line, right-aligned)
    broken at its "; " and ", " into lines that fit a figure ``width`` inches wide, and the extra
    height (inches) the lines beyond the first take. One line too wide ran past the figure's left
    edge, and the saved figure (tight bounding box) grew a blank band beside the panels."""
    import re

    from matplotlib.textpath import TextPath

    def inches(text: str) -> float:
        return TextPath((0, 0), text, size=6).get_extents().width / 72

    limit = width - 0.15
    if not note or inches(note) <= limit:
        return note, 0.0
    lines = [""]
    for token in re.split(r"(?<=[;,]) ", note):
        joined = f"{lines[-1]} {token}" if lines[-1] else token
        if lines[-1] and inches(joined) > limit:
            lines.append(token)
        else:
            lines[-1] = joined
    return "\n".join(lines), NOTE_LINE_H * (len(lines) - 1)


def _finish(fig, *, note: str, legend_h: float, title: str | None, fit_axes) -> None:
    """:func:`~embedscope.viz.style.finish_layout` with the note wrapped to the figure's width
    (:func:`_wrap_note`): its extra lines get room below the class legend, which is moved up above them."""
    note, extra = _wrap_note(note, fig.get_figwidth())
    if extra:
        fig.set_size_inches(fig.get_figwidth(), fig.get_figheight() + extra)
    finish_layout(fig, note=note, legend_h=legend_h + extra, title=title, fit_axes=fit_axes)
    if extra:  # finish_layout anchors the legends just above a one-line note (0.17 in)
        for leg in fig.legends:
            leg.set_bbox_to_anchor((0.5, (0.17 + extra) / fig.get_figheight()), transform=fig.transFigure)


def _count(n: int, what: str) -> str:
    """``"1 class"``, ``"3 classes"``, ``"1 point"``, ``"1,797 points"`` (thousands separated, as the
    command's other counts)."""
    return f"{n:,} {what}" if n == 1 else f"{n:,} {what}{'es' if what.endswith('s') else 's'}"


def _notes(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _panel_ratio(lo: np.ndarray, hi: np.ndarray) -> float:
    span = hi - lo
    return float(span[1] / span[0])


def _class_scatter(ax, Y, names, palette: ClassPalette, *, size=None, alpha=0.8, rasterized=True):
    """One scatter call, points in a fixed random order (no class always on top), coloured by name."""
    names = np.asarray(names, dtype=object)
    Y = np.asarray(Y, dtype=np.float64).reshape(-1, 2)
    s = marker_size(len(names)) if size is None else size
    order = np.random.default_rng(0).permutation(len(names))
    cols = palette.colors(names[order]) if len(names) else np.zeros((0, 4))
    ax.scatter(Y[order, 0], Y[order, 1], c=cols, s=s, linewidths=0, alpha=alpha, rasterized=rasterized)


def _style_map_axes(ax, title: str | None = None) -> None:
    ax.set_xlabel("t-SNE 1")
    ax.set_ylabel("t-SNE 2")
    ax.tick_params(length=2)
    if title:
        ax.set_title(title)


def _set_window(ax, lo, hi) -> None:
    ax.set_xlim(lo[0], hi[0])
    ax.set_ylim(lo[1], hi[1])
    ax.set_aspect("equal", adjustable="box")


def _names_and_palette(labels, class_names, palette) -> tuple[np.ndarray, ClassPalette]:
    names = label_names(labels, class_names)
    if palette is None:
        palette = ClassPalette.from_labels(labels, class_names)
    return names, palette


def _present(names: np.ndarray, palette: ClassPalette) -> list:
    """The classes present, in the palette's order."""
    have = set(names.tolist())
    return [n for n in palette.names if n in have]


#: the settings in the note of every t-SNE map figure (one split and joint alike: the single map
#: left out n_iter, which the joint figure showed)
TSNE_NOTE_KEYS = ("perplexity", "seed", "initialization", "n_iter", "kl_divergence")

#: where the train/test legend of the joint figure's third panel may sit inside it, in order of
#: preference: the corners, then the middles of the sides (not the middle of the map, where a reader
#: looks). The first place whose box holds no point is taken (:func:`_place_split_legend`); with none
#: free the legend goes beside the panel. matplotlib's "best" only minimises the points covered: with
#: many small clusters no corner is free, and it hid whole clusters (all 12 points of a class).
SPLIT_LEGEND_PLACES = ("upper right", "upper left", "lower left", "lower right", "center right", "center left",
                       "upper center", "lower center")

#: the gap kept between a legend and the edge of a point's marker (points): none, a marker may touch
#: the legend's frame (2 pt refused visibly free corners of the digits map: the figure widened 9%)
LEGEND_CLEARANCE = 0.0


def _points_under(ax, box, dpi: float) -> int:
    """How many points of ``ax``'s scatters have a marker (grown by :data:`LEGEND_CLEARANCE`) that meets
    the display-space ``box`` (a legend's window extent)."""
    hit = 0
    for coll in ax.collections:
        offsets = np.asarray(coll.get_offsets(), dtype=np.float64).reshape(-1, 2)
        if not coll.get_visible() or len(offsets) == 0:
            continue
        xy = coll.get_offset_transform().transform(offsets)
        sizes = np.asarray(coll.get_sizes(), dtype=np.float64)  # marker areas (points^2), cycled over the points
        radius = np.sqrt(np.resize(sizes if sizes.size else np.zeros(1), len(xy))) / 2
        pad = (radius + LEGEND_CLEARANCE) * dpi / 72.0
        ok = np.all(np.isfinite(xy), axis=1)
        hit += int(np.sum(ok & (xy[:, 0] > box.x0 - pad) & (xy[:, 0] < box.x1 + pad)
                          & (xy[:, 1] > box.y0 - pad) & (xy[:, 1] < box.y1 + pad)))
    return hit


def _renderer(fig):
    """The figure laid out (nothing rendered) and its renderer (a canvas without ``get_renderer``:
    the figure's own)."""
    fig.draw_without_rendering()
    get = getattr(fig.canvas, "get_renderer", None)
    return get() if get is not None else fig._get_renderer()


def _place_split_legend(fig, ax) -> bool:
    """Move ``ax``'s legend (laid out already) to the first of :data:`SPLIT_LEGEND_PLACES` where it
    covers no point (:func:`_points_under`) -> True, or -> False when none is free (the legend left
    at the first place: the caller draws the figure again with the legend beside the panel).
    Checked on the laid-out figure, in display coordinates."""
    leg = ax.get_legend()
    renderer = _renderer(fig)
    for place in SPLIT_LEGEND_PLACES:
        leg.set_loc(place)
        if not _points_under(ax, leg.get_window_extent(renderer), fig.dpi):
            return True
    leg.set_loc(SPLIT_LEGEND_PLACES[0])
    return False


def plot_joint_tsne(
    Y_train: np.ndarray,
    Y_test: np.ndarray,
    labels_train: Any,
    labels_test: Any,
    *,
    class_names: Sequence[str] | None = None,
    info: dict | None = None,
    title: str | None = None,
    palette: ClassPalette | None = None,
):
    """Three panels (docs/methods.md §10, Xuan Fig. 1/2): training points by class, test points by class,
    and both (training black, test orange: :data:`TRAIN_COLOR`, :data:`TEST_COLOR`, colours that
    no class takes from tab10), all in the joint map's coordinates (the same window).

    ``labels_*`` index ``class_names`` (the file's full class list) when given; colours come from
    ``palette`` (default: :meth:`ClassPalette.from_labels` of the full list). The third panel's
    train/test legend never covers a point: it takes the first of :data:`SPLIT_LEGEND_PLACES` that no
    point lies under, else it goes beside the panel (the figure widened by the legend's width, the
    panels keep their size). Returns the figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    Y_train = np.asarray(Y_train, dtype=np.float64).reshape(-1, 2)
    Y_test = np.asarray(Y_test, dtype=np.float64).reshape(-1, 2)
    lt, le = np.asarray(labels_train), np.asarray(labels_test)
    names, palette = _names_and_palette(np.concatenate([lt, le]), class_names, palette)
    nt, ne = names[: len(lt)], names[len(lt):]
    present = _present(names, palette)
    lo, hi = _map_window([Y_train, Y_test])
    ratio = _panel_ratio(lo, hi)
    panel_w = 2.25
    note = settings_text(info, TSNE_NOTE_KEYS)
    note = _notes(legend_note(len(present)), "openTSNE: " + note if note else "")

    def draw(beside: float):
        """The figure, the split legend inside the third panel (``beside`` 0) or beside it, the
        figure ``beside`` inches wider for it."""
        width = 3 * panel_w + 0.5 + beside
        _, leg_h = class_legend_layout(present, palette, width)
        fig, axes = plt.subplots(1, 3, figsize=(width, panel_w * ratio + 1.1 + leg_h))
        _class_scatter(axes[0], Y_train, nt, palette)
        _style_map_axes(axes[0], f"train\n{_count(len(lt), 'point')}, {_count(len(np.unique(lt)), 'class')}")
        _class_scatter(axes[1], Y_test, ne, palette)
        _style_map_axes(axes[1], f"test\n{_count(len(le), 'point')}, {_count(len(np.unique(le)), 'class')}")
        s = marker_size(len(lt) + len(le))
        both = np.vstack([Y_train, Y_test])
        col = np.array([TRAIN_COLOR] * len(lt) + [TEST_COLOR] * len(le))
        order = np.random.default_rng(0).permutation(len(both))
        axes[2].scatter(both[order, 0], both[order, 1], c=col[order], s=s, linewidths=0, alpha=0.6,
                        rasterized=True)
        _style_map_axes(axes[2], "train and test\n(same coordinates)")
        where = (dict(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0) if beside else
                 dict(loc=SPLIT_LEGEND_PLACES[0]))  # (placed where no point lies once laid out)
        axes[2].legend(handles=[Line2D([], [], marker="o", linestyle="", color=TRAIN_COLOR, label="train"),
                                Line2D([], [], marker="o", linestyle="", color=TEST_COLOR, label="test")],
                       frameon=True, framealpha=0.8, handletextpad=0.2, borderpad=0.3, **where)
        for ax in axes:  # the same window in all three panels: a point sits at the same place
            _set_window(ax, lo, hi)
        for ax in axes[1:]:
            ax.set_ylabel("")
        class_legend(fig, present, palette, title="class (train and test panels)")
        _finish(fig, note=note, legend_h=leg_h, title=title, fit_axes=axes)
        return fig, axes

    with plt.rc_context(PAPER_RC):
        fig, axes = draw(0.0)
        if not _place_split_legend(fig, axes[2]):
            # no free place inside: drawn again with the legend beside the panel, the figure widened by
            # the legend's width (and its gap) so the panels keep their size; a layout made for the
            # legend inside cannot simply be widened afterwards (finish_layout fits the height too)
            leg_w = axes[2].get_legend().get_window_extent(_renderer(fig)).width / fig.dpi
            plt.close(fig)
            fig, axes = draw(leg_w + 0.1)
    return fig


def plot_tsne(Y: np.ndarray, labels: Any, *, class_names: Sequence[str] | None = None, info: dict | None = None,
              title: str | None = None, palette: ClassPalette | None = None, split: str | None = None):
    """One t-SNE map coloured by class (docs/methods.md §10), the class legend on the right (up to 20
    classes). The panel's title: ``title``, else the counts, "1,797 points, 10 classes" ("1 class"
    for one), after the ``split`` when given ("test: 30 points, 1 class"). The note names the same
    settings as :func:`plot_joint_tsne`'s (:data:`TSNE_NOTE_KEYS`). Colours as :func:`plot_joint_tsne`.
    Returns the figure."""
    import matplotlib.pyplot as plt

    Y = np.asarray(Y, dtype=np.float64).reshape(-1, 2)
    labels = np.asarray(labels)
    names, palette = _names_and_palette(labels, class_names, palette)
    present = _present(names, palette)
    lo, hi = _map_window([Y])
    ratio = _panel_ratio(lo, hi)
    legend_w, ncol = 0.0, 1
    if present and len(present) <= MAX_LEGEND_ENTRIES:
        texts = [h.get_label() for h in palette.handles(present)]
        ncol = math.ceil(len(texts) / 20)  # up to 20 rows
        legend_w = ncol * (0.35 + 0.065 * max(len(t) for t in texts))
    with plt.rc_context(PAPER_RC):
        fig, ax = plt.subplots(figsize=(3.2 + legend_w, 3.2 * ratio + 0.75))
        _class_scatter(ax, Y, names, palette)
        counts = f"{_count(len(labels), 'point')}, {_count(len(present), 'class')}"
        _style_map_axes(ax, title or (f"{split}: {counts}" if split else counts))
        _set_window(ax, lo, hi)
        if legend_w:
            handles = palette.handles(present)
            # labels given explicitly: matplotlib leaves out a handle whose own label starts with "_"
            ax.legend(handles, [h.get_label() for h in handles], title="class", loc="center left",
                      bbox_to_anchor=(1.01, 0.5), frameon=False, handletextpad=0.2, ncol=ncol, columnspacing=0.8)
        note = settings_text(info, TSNE_NOTE_KEYS)
        note = _notes(legend_note(len(present)), "openTSNE: " + note if note else "")
        _finish(fig, note=note, legend_h=0.0, title=None, fit_axes=[ax])
    return fig


#: the height / width of a zoom panel of :func:`plot_yoked_maps` (its window is widened to this
#: shape and drawn at equal scale on both axes, as the maps)
ZOOM_ROW_RATIO = 0.85

#: the most map panels in one row of :func:`plot_yoked_maps`; more maps wrap into balanced rows
MAX_MAPS_PER_ROW = 4


def _map_grid(k: int, max_cols: int = MAX_MAPS_PER_ROW) -> list[int]:
    """Panels per row for ``k`` maps: one row up to ``max_cols``, else the fewest rows of at most
    ``max_cols`` panels, as even as possible, the fuller rows first (5 -> 3 + 2, 6 -> 3 + 3,
    10 -> 4 + 3 + 3)."""
    rows = math.ceil(k / max_cols)
    base, extra = divmod(k, rows)
    return [base + 1] * extra + [base] * (rows - extra)


def _yoked_inputs(Ys: Sequence[np.ndarray], labels: np.ndarray, names: Sequence[str] | None) -> tuple[list, list]:
    """The maps as (N, 2) float64 arrays and their K panel names, or a one-line EmbedscopeError."""
    if isinstance(Ys, np.ndarray) and Ys.ndim == 2:  # one map passed where a sequence of maps was meant
        raise EmbedscopeError(f"yoked maps need a sequence of at least 2 maps, got one array of shape {Ys.shape}")
    maps = [np.asarray(Y, dtype=np.float64) for Y in Ys]
    if len(maps) < 2:
        raise EmbedscopeError(f"yoked maps need at least 2 maps, got {len(maps)}")
    shapes = [Y.shape for Y in maps]
    if len(set(shapes)) != 1:
        raise EmbedscopeError(f"yoked maps must all hold the same points (N, 2), got shapes "
                              f"{', '.join(str(s) for s in shapes)}")
    if len(shapes[0]) != 2 or shapes[0][1] != 2:
        raise EmbedscopeError(f"a map must be an (N, 2) array of 2-D positions, got shape {shapes[0]}")
    if shapes[0][0] != len(labels):
        raise EmbedscopeError(f"the maps hold {shapes[0][0]} points but there are {len(labels)} labels")
    if names is None:
        names = [f"map {i + 1}" for i in range(len(maps))]
    names = list(names)
    if len(names) != len(maps):
        raise EmbedscopeError(f"{len(names)} names for {len(maps)} maps: give one name per map")
    return maps, names


#: the largest share of the map's area that a zoom's window shows; a class spread wider is zoomed
#: at its densest part, through a window :data:`DENSEST_ZOOM_SHARE` of the map's width and height
#: (:func:`_zoom_window`)
MAX_ZOOM_AREA = 0.6
DENSEST_ZOOM_SHARE = 0.5
#: the smallest side of a zoom's window, as a share of the map window's larger side (a class of one
#: image, or of images at one place, had a window a billionth of the map's); small enough that a
#: compact class's own box (its points with a 15% margin) is hardly ever widened
MIN_ZOOM_SHARE = 0.02


def _zoom_window(P: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """(lo, hi, densest) of the zoom window of one class, whose points in a map are ``P``, in a map
    window ``lo``..``hi``.

    The box around the class's central 96% of points (2nd to 98th percentile on each axis), with a 15%
    margin, each side at least :data:`MIN_ZOOM_SHARE` of the map's larger side, widened in its short
    direction to the zoom panel's shape (:data:`ZOOM_ROW_RATIO`; the map's scale on both axes). A window
    of more than :data:`MAX_ZOOM_AREA` of the map's area zooms (almost) nothing (a class spread over the
    whole map gave a zoom as large as the map): the window is then the largest of the zoom's shape within
    :data:`DENSEST_ZOOM_SHARE` of the map's width and height, centred on the class's densest part: on the
    one of the class's points (at most 2,000 of them, evenly spaced in row order) with the most of the
    class's points in a window a third that size around it (then the most in the zoom's window; then the
    first), moved if need be to lie within the map's window; ``densest`` is then True."""
    P = np.asarray(P, dtype=np.float64).reshape(-1, 2)
    P = P[np.all(np.isfinite(P), axis=1)]
    if len(P) == 0:
        c = (np.asarray(lo) + np.asarray(hi)) / 2
        return c - 0.5, c + 0.5, False
    zlo = np.percentile(P, 2, axis=0)
    zhi = np.percentile(P, 98, axis=0)
    pad = 0.15 * (zhi - zlo)
    zlo, zhi = zlo - pad, zhi + pad
    # at least MIN_ZOOM_SHARE of the map's larger side, centred: a class of one image (or of images at
    # one place) had a window 1e-9 wide (ticks "1e-10+5.72e-1" over the axis label, an invisible box)
    least = MIN_ZOOM_SHARE * float(np.max(np.asarray(hi, dtype=np.float64) - np.asarray(lo, dtype=np.float64)))
    grow = np.maximum(least - (zhi - zlo), 0.0) / 2
    zlo, zhi = zlo - grow, zhi + grow
    # at the map's scale on both axes, as the map itself: the box widened in its short
    # direction to the zoom cell's shape (ZOOM_ROW_RATIO; a class spread tall was drawn
    # stretched sideways to fill a wide cell), the rest to the exact cell by finish_layout
    zspan = zhi - zlo
    want = np.array([max(zspan[0], zspan[1] / ZOOM_ROW_RATIO), max(zspan[1], zspan[0] * ZOOM_ROW_RATIO)])
    span = np.asarray(hi, dtype=np.float64) - np.asarray(lo, dtype=np.float64)
    if want[0] * want[1] <= MAX_ZOOM_AREA * span[0] * span[1] * (1 + 1e-9):
        zc = (zlo + zhi) / 2
        return zc - want / 2, zc + want / 2, False
    room = DENSEST_ZOOM_SHARE * span
    cap_w = min(room[0], room[1] / ZOOM_ROW_RATIO)
    half = np.array([cap_w, cap_w * ZOOM_ROW_RATIO]) / 2
    cand = P[np.unique(np.linspace(0, len(P) - 1, min(len(P), 2000)).round().astype(int))]
    core = np.zeros(len(cand), dtype=np.int64)  # the class's points in a window a third the zoom's size
    held = np.zeros(len(cand), dtype=np.int64)  # ... and in the zoom's window
    step = max(1, 1_000_000 // len(P))  # (candidates x points x 2 differences: at most 16 MB at a time)
    for s in range(0, len(cand), step):
        gap = np.abs(P[None, :, :] - cand[s:s + step, None, :])
        core[s:s + step] = np.all(gap <= half / 3, axis=2).sum(axis=1)
        held[s:s + step] = np.all(gap <= half, axis=2).sum(axis=1)
    zc = cand[int(np.lexsort((-held, -core))[0])]
    # moved, if need be, to lie within the map's window (the dashed box ran off the map's edge)
    zc = np.clip(zc, np.asarray(lo, dtype=np.float64) + half, np.asarray(hi, dtype=np.float64) - half)
    return zc - half, zc + half, True


def plot_yoked_maps(
    Ys: Sequence[np.ndarray],
    labels: Any,
    *,
    names: Sequence[str] | None = None,
    class_names: Sequence[str] | None = None,
    inset_class: Any = None,
    info: dict | None = None,
    title: str | None = None,
    split: str | None = None,
    palette: ClassPalette | None = None,
):
    """K ≥ 2 yoked maps (e.g. the same test images under the checkpoints of successive epochs, each
    map yoked to the next) in one window, with the same class colours (docs/methods.md §10, Xuan §2.3).

    ``Ys``: the K maps, (N, 2) each, row i the same image in every map; ``labels`` (N,). ``names``:
    the K panel titles (default "map 1" ... "map K"; long names are cut in the middle). Panels in one
    row up to :data:`MAX_MAPS_PER_ROW` maps, beyond that in balanced rows (6 maps: two rows of 3; a
    shorter last row is centred). All maps share one window, fitted to every point (the maps are
    yoked, so a position means the same in all). ``split`` (e.g. ``"test"``): named in the figure
    title, "Yoked t-SNE, test split (N images)" (for K > 2 "Yoked t-SNE of K maps, ..."), unless
    ``title`` is given. ``inset_class`` (a label): a zoom row under each row of maps zooms into that
    class in each map (the box around its central 96% of points, widened to the zoom panel's shape
    and drawn at equal scale on both axes, as the map; marked on the map above, moved within the
    map where it ran off an edge; at most :data:`MAX_ZOOM_AREA` of the map's area: a class spread wider is zoomed at its densest
    part, :func:`_zoom_window`, and the zoom's title says so); other classes in
    the box are drawn faded for context. ``info``: the settings note (α, α·N, the yoke,
    perplexity, seed, the KL of two maps, the mean displacement; lists such as K maps' KL values are
    not printed). Colours as :func:`plot_joint_tsne`. Fewer than 2 maps, maps of different shapes or
    a wrong number of names: :class:`~embedscope.errors.EmbedscopeError`. Returns the figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    labels = np.asarray(labels)
    maps, names = _yoked_inputs(Ys, labels, names)
    k = len(maps)
    cnames, palette = _names_and_palette(labels, class_names, palette)
    present = _present(cnames, palette)
    if inset_class is not None:
        matches = [lab for lab in np.unique(labels) if str(lab) == str(inset_class)]
        if not matches:
            raise EmbedscopeError(f"inset class {inset_class} is not among the labels")
        inset_class = matches[0]
    zoom = inset_class is not None
    if title is None and split is not None:
        title = (f"Yoked t-SNE, {split} split ({len(labels)} images)" if k == 2 else
                 f"Yoked t-SNE of {k} maps, {split} split ({len(labels)} images)")
    rows = _map_grid(k)
    nrows, ncols = len(rows), max(rows)
    lo, hi = _map_window(maps)
    ratio = _panel_ratio(lo, hi)
    # narrower panels for 3 or 4 maps a row, and shorter titles (10 pt, ~0.08 in a character) that
    # neither run into the next panel's nor past the figure's edge
    panel_w, title_chars = {3: (2.6, 28), 4: (2.4, 25)}.get(ncols, (3.0, TITLE_CHARS))
    width = ncols * panel_w + 0.6
    _, leg_h = class_legend_layout(present, palette, width)
    shown = {key: v for key, v in (info or {}).items() if not isinstance(v, (list, tuple, dict, np.ndarray))}
    note = settings_text(shown, ("alpha", "alpha_times_n", "yoke", "perplexity", "seed", "kl_a", "kl_b",
                                 "mean_displacement", "mean_centroid_displacement"))
    note = _notes(legend_note(len(present)), "yoked t-SNE: " + note if note else "")
    extra_h = 0.75 + (0.3 if title else 0.0) + (0.17 if note else 0.0) + leg_h
    with plt.rc_context(PAPER_RC):
        if zoom:
            height = nrows * (panel_w * (ratio + ZOOM_ROW_RATIO) + 0.5) + (nrows - 1) * 0.75 + extra_h
            ratios = [ratio, ZOOM_ROW_RATIO] * nrows
        else:
            height = nrows * panel_w * ratio + (nrows - 1) * 0.75 + extra_h
            ratios = [1.0] * nrows
        fig = plt.figure(figsize=(width, height))
        per_row = 2 if zoom else 1
        if all(n == ncols for n in rows):  # full rows: a plain grid
            grid = fig.subplots(per_row * nrows, ncols, squeeze=False, gridspec_kw={"height_ratios": ratios})
            cells = [(grid[per_row * r, c], grid[per_row * r + 1, c] if zoom else None)
                     for r, n in enumerate(rows) for c in range(n)]
        else:  # a shorter last row, centred: half-width columns, each panel spanning two
            gs = fig.add_gridspec(per_row * nrows, 2 * ncols, height_ratios=ratios)
            cells = []
            for r, n in enumerate(rows):  # fig.axes as a plain grid's: row by row, the maps, then their zooms
                spans = [slice(ncols - n + 2 * c, ncols - n + 2 * c + 2) for c in range(n)]
                row = [fig.add_subplot(gs[per_row * r, s]) for s in spans]
                zrow = [fig.add_subplot(gs[per_row * r + 1, s]) for s in spans] if zoom else [None] * n
                cells.extend(zip(row, zrow))
        starts = {sum(rows[:r]) for r in range(nrows)}  # the first panel of each row keeps its y label
        nm_c = (class_names[inset_class] if class_names is not None else inset_class) if zoom else None
        boxes = []
        for i, ((ax, zax), Y, nm) in enumerate(zip(cells, maps, names)):
            _class_scatter(ax, Y, cnames, palette)
            _style_map_axes(ax, short_text(nm, title_chars))  # long names must not run into each other
            _set_window(ax, lo, hi)
            if i not in starts:
                ax.set_ylabel("")
            if zax is None:
                continue
            sel = labels == inset_class
            zlo, zhi, part = _zoom_window(Y[sel], lo, hi)
            boxes.append((ax.add_patch(Rectangle(tuple(zlo), *(zhi - zlo), fill=False, edgecolor="0.15",
                                                 linewidth=0.9, linestyle="--")), zax, ax, part))
            # the context drawn with a margin: the layout may still widen the window a little
            near = np.all((Y >= zlo - (zhi - zlo) / 2) & (Y <= zhi + (zhi - zlo) / 2), axis=1)
            _class_scatter(zax, Y[near & ~sel], cnames[near & ~sel], palette, size=7, alpha=0.3)
            _class_scatter(zax, Y[sel], cnames[sel], palette, size=9, alpha=0.9)
            zax.set_xlim(zlo[0], zhi[0])
            zax.set_ylim(zlo[1], zhi[1])
            zax.set_aspect("equal", adjustable="box")  # its window fitted to the cell by finish_layout
            zax.set_xlabel("t-SNE 1")
            zax.set_ylabel("t-SNE 2" if i in starts else "")
            # two lines: on one, "... zoomed (dashed box above)" ran into the next panel's title
            zax.set_title(f"class {short_text(nm_c, title_chars - 15)} zoomed\n"
                          + ("(densest part: dashed box)" if part else "(dashed box above)"))
        class_legend(fig, present, palette)
        _finish(fig, note=note, legend_h=leg_h, title=title,
                fit_axes=[ax for ax, _ in cells] + [zax for _, zax in cells if zax is not None])
        for box, zax, ax, _ in boxes:  # the dashed box: the zoom's window as laid out
            # every window kept within the map's as laid out (the layout widens both; a box that ran off the
            # map's edge hid a side): moving it toward the map keeps the class points it held (all are in the map)
            for get, put, (m0, m1) in ((zax.get_xlim, zax.set_xlim, ax.get_xlim()),
                                       (zax.get_ylim, zax.set_ylim, ax.get_ylim())):
                z0, z1 = get()
                m0, m1 = m0 + 0.01 * (m1 - m0), m1 - 0.01 * (m1 - m0)  # off the map's frame
                if z1 - z0 <= m1 - m0:
                    shift = max(m0 - z0, 0.0) + min(m1 - z1, 0.0)
                    put(z0 + shift, z1 + shift)
            (x0, x1), (y0, y1) = zax.get_xlim(), zax.get_ylim()
            box.set_bounds(x0, y0, x1 - x0, y1 - y0)
    return fig


def plot_yoked_tsne(
    Y_a: np.ndarray,
    Y_b: np.ndarray,
    labels: Any,
    *,
    names: Sequence[str] = ("A", "B"),
    class_names: Sequence[str] | None = None,
    inset_class: Any = None,
    info: dict | None = None,
    title: str | None = None,
    split: str | None = None,
    palette: ClassPalette | None = None,
):
    """The two yoked maps side by side in one window, with the same class colours (docs/methods.md §10,
    Xuan §2.3): :func:`plot_yoked_maps` of ``[Y_a, Y_b]``.

    ``names``: the panel titles (the two embeddings). ``split`` (e.g. ``"test"``): named in the
    figure title, "Yoked t-SNE, test split (N images)", unless ``title`` is given. Both maps share
    one window, fitted to the points (the maps are yoked, so a position means the same in both).
    ``inset_class`` (a label): a second row zooms into that class in each map (the box around its
    central 96% of points, or the densest part of a class spread over more of the map,
    :func:`_zoom_window`; marked on the map above); other classes in the box are drawn faded for context. Colours as
    :func:`plot_joint_tsne`. Returns the figure.
    """
    return plot_yoked_maps([Y_a, Y_b], labels, names=names, class_names=class_names, inset_class=inset_class,
                           info=info, title=title, split=split, palette=palette)


# ------------------------------------------------------------------------- moved computations
#: names that lived here before computing and drawing were separated; they resolve to their new
#: homes (embedscope.tsne) so that old imports keep working.
_MOVED = {
    "joint_tsne": "embedscope.tsne.joint",
    "single_tsne": "embedscope.tsne.joint",
    "effective_perplexity": "embedscope.tsne.joint",
    "TSNE_DEFAULTS": "embedscope.tsne.joint",
    "yoked_tsne": "embedscope.tsne.yoked",
    "yoked_tsne_exact_objective_and_grad": "embedscope.tsne.yoked",
    "yoked_tsne_objective_and_grad": "embedscope.tsne.yoked",
    "default_alpha": "embedscope.tsne.yoked",
    "stratified_subsample": "embedscope.tsne.sampling",
}


def __getattr__(name: str):
    if name == "class_colors":  # the old class_colors(n) -> n colours is style.palette_colors
        from embedscope.viz.style import palette_colors

        return palette_colors
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module 'embedscope.viz.tsne' has no attribute '{name}'")


__all__ = ["plot_joint_tsne", "plot_tsne", "plot_yoked_maps", "plot_yoked_tsne", "MAX_MAPS_PER_ROW"]
