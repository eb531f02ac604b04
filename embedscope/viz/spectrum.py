"""Normalised singular-value spectra on a log scale (Roth et al. ICML 2020, Fig. 7 and Fig. 11).

One curve per embedding file (e.g. a model trained with and one without ρ-regularisation); with
class-conditioned spectra a second panel shows their mean ± one standard deviation over classes.
Drawing only: the spectra come from :mod:`embedscope.metrics.spectral`. The values ρ leaves out are
marked by a band, a dashed boundary and ringed points, visible even at D = 512.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

__all__ = ["normalized_spectrum", "plot_spectra"]


def normalized_spectrum(s) -> np.ndarray:
    """s / Σ s, the normalised spectrum plotted by Roth et al. Fig. 7 (docs/methods.md §2)."""
    s = np.asarray(s, dtype=np.float64)
    tot = s.sum()
    if not np.isfinite(tot):  # a NaN or infinite value: no normalised spectrum (not the raw values)
        return np.full_like(s, np.nan)
    return s / tot if tot > 0 else s


def _positive(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64).copy()
    v[~(v > 0)] = np.nan  # a log axis cannot show zeros
    return v


def _marker(v) -> str:
    """A marker for a curve with a single value a log axis can show (a collapsed model: s = (s₁, 0, …),
    s₁/Σs = 1): a line through one point draws nothing, so the curve was invisible beside its legend entry."""
    return "o" if np.count_nonzero(np.isfinite(v)) == 1 else ""


def _rho_text(rho) -> str:
    """The legend's ρ: a number (three decimals; below 0.01 two significant digits, 0.0021: a 4-d
    embedding's ρ of 0.0021 and 0.0024 both read 0.002), ∞ (an exactly rank-deficient X) or undefined
    (NaN: no value left to normalise), docs/methods.md §2; None: no ρ given."""
    if rho is None:
        return ""
    rho = float(rho)
    if np.isnan(rho):
        return " (ρ undefined)"
    if not np.isfinite(rho):
        return " (ρ = ∞)"
    return f" (ρ = {rho:.2g})" if 0 < abs(rho) < 0.01 else f" (ρ = {rho:.3f})"


#: the most curves whose legend may sit inside the panel (14 entries covered the curves and the axis
#: label); with more, the legend goes beside the panel (below both panels in the two-panel figure: :func:`_below`)
MAX_INSIDE_LEGEND = 4

#: where a legend of at most MAX_INSIDE_LEGEND curves may sit inside its panel, in order of preference
#: (spectra fall from the upper left: the upper right or the lower left is free most often); the first
#: place whose box no curve, ringed value, boundary line or s.d. band crosses is taken, and with none
#: free the legend goes beside the panel (below the panels in the two-panel figure). The upper right
#: alone covered curves: long model names and curves of different lengths (D = 16, 64, 512 on one
#: axis) leave no corner free for a wide legend.
INSIDE_PLACES = ("upper right", "lower left", "lower right", "center right", "upper center", "lower center",
                 "center left", "center", "upper left")

#: the gap kept between a legend and the data (points)
LEGEND_CLEARANCE = 2.0

#: colour of the band marking the values ρ leaves out: a neutral pale grey (a pale orange was near
#: the second curve's orange of the model palette)
LEFT_OUT_COLOR = "#e4e4e4"


def _mark_left_out(ax, entries, exclude_top: int, colors, n_components: int | None = None,
                   kmax: int = 0) -> tuple:
    """Mark the top ``exclude_top`` values that ρ leaves out: a shaded band, a dashed boundary at
    k = exclude_top + ½, and each curve's left-out values ringed (a band one index wide is a sliver
    of a 128- or 512-wide axis). With ``n_components`` K below ``kmax``, the values beyond K (which
    ρ does not consider either) are shaded too, from a dashed boundary at k = K + ½."""
    band = ax.axvspan(0.5, exclude_top + 0.5, color=LEFT_OUT_COLOR, zorder=0, lw=0) if exclude_top > 0 else None
    if exclude_top > 0:
        ax.axvline(exclude_top + 0.5, color="0.3", ls="--", lw=0.8, zorder=1)
    beyond = n_components is not None and n_components < kmax
    if beyond:
        tail = ax.axvspan(n_components + 0.5, kmax + 0.5, color=LEFT_OUT_COLOR, zorder=0, lw=0)
        ax.axvline(n_components + 0.5, color="0.3", ls="--", lw=0.8, zorder=1)
        # the legend's swatch gets an outline: it may sit on the shaded tail, of its own colour
        from matplotlib.patches import Patch

        band = Patch(facecolor=LEFT_OUT_COLOR, edgecolor="0.5", lw=0.6)
        del tail
    parts = ([f"top {exclude_top}"] if exclude_top > 0 else []) + ([f"beyond {n_components}"] if beyond else [])
    text = f"left out of ρ ({', '.join(parts)})"
    if exclude_top == 0:
        return band, text
    for i, e in enumerate(entries):
        whole = normalized_spectrum(e["spectrum"])
        p = whole[:exclude_top]
        k = np.arange(1, p.size + 1)
        # around a curve's own dot (a curve of one value shows one: :func:`_marker`) a wider ring: one of
        # the dot's size and colour read as a bigger filled dot, not as the legend's ring
        ms = 9 if _marker(_positive(whole)) else 6
        ax.plot(k, _positive(p), ls="", marker="o", ms=ms, mfc="none", mec=colors[i % len(colors)], mew=1.2,
                zorder=4)
    from matplotlib.lines import Line2D

    ring = Line2D([], [], ls="", marker="o", ms=6, mfc="none", mec="0.3", mew=1.2)
    return (band, ring), text


def _index_axis(ax, lo: float, hi: float) -> None:
    """The x axis of singular-value indices from ``lo`` to ``hi``: integer ticks (k is an index: no
    tick at 2.5), and the one index where the window holds a single one (an integer locator then fell
    back to 0.5, 0.6, ... 1.5)."""
    from matplotlib.ticker import FixedLocator, MaxNLocator

    ax.set_xlim(lo, hi)
    inside = np.arange(math.ceil(lo), math.floor(hi) + 1)
    ax.xaxis.set_major_locator(FixedLocator(inside) if inside.size == 1 else MaxNLocator(integer=True))


def _renderer(fig):
    """The figure laid out (constrained layout run, nothing rendered) and its renderer."""
    fig.draw_without_rendering()
    get = getattr(fig.canvas, "get_renderer", None)
    return get() if get is not None else fig._get_renderer()


def _covers_data(ax, box, dpi: float) -> bool:
    """Whether the display-space ``box`` (a legend's) meets anything drawn from data in ``ax``: a line
    (its points and the segments between them, as thick as drawn), a marker, or a filled band."""
    from matplotlib.collections import PolyCollection
    from matplotlib.path import Path
    from matplotlib.transforms import Bbox

    px = dpi / 72.0
    for ln in ax.lines:
        if not ln.get_visible():
            continue
        xy = ln.get_transform().transform_path(ln.get_path()).vertices
        marker = ln.get_marker() not in ("", " ", "None", "none", None)
        pad = (max(ln.get_linewidth() / 2, ln.get_markersize() / 2 if marker else 0) + LEGEND_CLEARANCE) * px
        grown = Bbox.from_extents(box.x0 - pad, box.y0 - pad, box.x1 + pad, box.y1 + pad)
        finite = np.all(np.isfinite(xy), axis=1)
        if np.any(finite & (xy[:, 0] > grown.x0) & (xy[:, 0] < grown.x1) & (xy[:, 1] > grown.y0)
                  & (xy[:, 1] < grown.y1)):
            return True
        if ln.get_linestyle() in ("None", "", " ", "none"):
            continue
        # the segments between finite points (a NaN breaks the line)
        breaks = np.flatnonzero(~finite)
        for run in np.split(np.arange(len(xy)), breaks):
            run = run[finite[run]]
            if run.size > 1 and Path(xy[run]).intersects_bbox(grown, filled=False):
                return True
    for coll in ax.collections:
        if isinstance(coll, PolyCollection) and coll.get_visible():
            tr = coll.get_transform()
            if any(tr.transform_path(p).intersects_bbox(box, filled=True) for p in coll.get_paths()):
                return True
    return False


def _beside(fig, ax, leg, renderer) -> None:
    """Move ``leg`` beside its panel (right of the axes) and widen the figure by its width."""
    leg.set_loc("upper left")
    leg.set_bbox_to_anchor((1.01, 1.0), transform=ax.transAxes)
    width = leg.get_window_extent(renderer).width / fig.dpi
    fig.set_figwidth(fig.get_figwidth() + width + 0.1)


#: the most columns of a legend below its panel (as many as fit the panel's width)
MAX_BELOW_COLUMNS = 3

#: the gap between a panel's x axis label and the legend below it (points)
BELOW_GAP = 4.0


def _readable_log_axes(fig, axes) -> None:
    """Label every minor tick of a log y axis that shows fewer than two labelled ticks in view.

    matplotlib labels the powers of 10 and, over less than a decade, 2, 3, 4 and 6 × 10^k between them
    (every multiple under 0.4 decades): a spectrum from 0.077 to 0.196 (40 rows, D = 8) showed 10⁻¹ alone,
    and no value could be read off the axis. Labelling all of 1..9 × 10^k is left to such narrow views
    (under about half a decade), where the labels stay apart."""
    from matplotlib.ticker import LogFormatterSciNotation

    renderer = None
    for ax in axes:
        if ax.get_yscale() != "log" or not ax.yaxis.get_visible():
            continue
        if renderer is None:
            renderer = _renderer(fig)  # (tick labels are set when the figure is laid out)
        lo, hi = sorted(ax.get_ylim())
        shown = [t for t in ax.yaxis.get_ticklabels(which="both")
                 if t.get_text() and lo <= t.get_position()[1] <= hi]
        if len(shown) < 2 and ax.yaxis.get_ticklocs(minor=True).size:
            ax.yaxis.set_minor_formatter(LogFormatterSciNotation(labelOnlyBase=False, minor_thresholds=(1, 1)))


def _below(fig, legends: dict) -> None:
    """Move each panel's legend under its x axis label, centred under the panel and its y axis labels,
    in as many columns (at most :data:`MAX_BELOW_COLUMNS`) as fit that width, and make the figure
    taller by the tallest of them: the panels keep their size. ``legends``: panel -> (handles, texts)
    of its legend.

    The two-panel figure's legends go here, not beside the panels: a legend beside the left panel
    stood between the two panels with empty space under it (three models: an inch of blank canvas
    across the whole height of the figure)."""
    from matplotlib.transforms import ScaledTranslation

    from embedscope.viz.style import clean_figure

    renderer = _renderer(fig)
    tallest = 0.0
    for ax, (handles, _) in legends.items():
        texts = [t.get_text() for t in ax.get_legend().get_texts()]  # as shown: escaped by clean_figure
        drop = (ax.bbox.y0 - ax.xaxis.get_tightbbox(renderer).y0) / fig.dpi + BELOW_GAP / 72  # inches
        left = min(ax.bbox.x0, ax.yaxis.get_tightbbox(renderer).x0)  # the y axis labels' left edge
        width = ax.bbox.x1 - left
        # the middle of panel and y labels (fixed in inches from the panel's middle: a taller figure keeps it)
        under = ax.transAxes + ScaledTranslation((left - ax.bbox.x0) / 2 / fig.dpi, -drop, fig.dpi_scale_trans)
        for ncols in range(min(MAX_BELOW_COLUMNS, len(handles)), 0, -1):
            leg = ax.legend(handles, texts, frameon=False, ncols=ncols, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                            bbox_transform=under, borderaxespad=0.0, columnspacing=1.2)
            clean_figure(fig)  # (the new legend's texts: drawn without mathtext, as the old one's)
            if leg.get_window_extent(renderer).width <= width + 1:
                break
        tallest = max(tallest, leg.get_window_extent(renderer).height / fig.dpi + BELOW_GAP / 72)
    fig.set_figheight(fig.get_figheight() + tallest)


def _place_legends(fig, axes, free_from: dict, legends: dict | None = None) -> None:
    """Each panel's legend at the first of :data:`INSIDE_PLACES` where it covers no data, else beside
    the panel (the figure widened); in a figure of two panels (``legends`` given: panel -> (handles,
    texts)), when one legend finds no free place, both go below their panels (:func:`_below`): their
    rows side by side, no empty space between the panels. ``free_from``: per panel, the axes fraction
    right of the band of values ρ leaves out (a legend on the left starts after its boundary line, not
    across it). Checked on the laid-out figure, in display coordinates; a legend moved beside a panel
    changes the layout, so the others are checked again."""
    inside = [ax for ax in axes if ax.get_legend() is not None]
    for ax in inside:
        x0 = free_from.get(ax, 0.0)
        ax.get_legend().set_bbox_to_anchor((x0, 0.0, 1.0 - x0, 1.0), transform=ax.transAxes)
    for _ in range(len(inside) + 1):
        renderer = _renderer(fig)
        moved = False
        for ax in list(inside):
            leg = ax.get_legend()
            for place in INSIDE_PLACES:
                leg.set_loc(place)
                if not _covers_data(ax, leg.get_window_extent(renderer), fig.dpi):
                    break
            else:
                if legends:
                    _below(fig, legends)
                    return
                _beside(fig, ax, leg, renderer)
                inside.remove(ax)
                moved = True
        if not moved:
            return


#: the y axis of both panels, on two lines: on one it was longer than the 2.7 inch figure's panel
#: (drawn past the panel's top and bottom, up to the by-class figure's title)
SPECTRUM_YLABEL = "normalised singular value\nsₖ / Σ s"


def plot_spectra(entries: Sequence[Mapping], *, exclude_top: int = 1, by_class: bool = False,
                 title: str | None = None, n_components: int | None = None, center: bool = False):
    """Figure of normalised singular-value spectra, one line per entry, log y axis (docs/methods.md §2).

    Layout of Roth et al. (ICML 2020) Fig. 7 (models with vs without ρ-regularisation) and, with
    ``by_class``, Fig. 11 (class-conditioned spectra, App. E).

    Parameters
    ----------
    entries : sequence of mappings
        Each with ``label`` (legend text), ``spectrum`` (singular values, any scale: they are
        divided by their sum), optional ``rho`` (shown in the legend) and, for ``by_class``,
        ``class_mean`` and ``class_std`` (class-conditioned normalised spectra, Roth App. E).
    exclude_top : int
        How many leading values ρ leaves out; marked with a shaded band, a dashed boundary and
        ringed points.
    n_components : int, optional
        ρ keeps only the first K values (``--n-components``): the values beyond K are shaded as
        left out too (the whole spectrum is still drawn).
    by_class : bool
        Add a right-hand panel with the class-conditioned spectra (mean ± s.d. over classes).
    center : bool
        The class-conditioned spectra were taken of mean-centred classes (``--center``,
        docs/methods.md §2): the panel's title says so (centred and uncentred spectra differ most
        in their first value, and the figure alone could not tell them apart).
    title : str, optional
        Figure title (suptitle).

    Legends never cover data: with up to :data:`MAX_INSIDE_LEGEND` curves each sits at the first
    place of :data:`INSIDE_PLACES` inside its panel where no curve runs, else outside; with more
    curves, outside. Outside: beside the panel (the figure widened) when it is the only one; with
    ``by_class``, both legends below their panels, in as many columns as fit (the figure taller, the
    panels their size), not between the two panels.

    Returns
    -------
    matplotlib Figure
    """
    import matplotlib.pyplot as plt

    from embedscope.errors import EmbedscopeError
    from embedscope.viz.style import LEGEND_CHARS, LINE_STYLES, PAPER_RC, clean_figure, series_colors, short_text

    if entries and not any(np.any(np.isfinite(_positive(normalized_spectrum(e["spectrum"])))) for e in entries):
        # (a log axis of nothing: matplotlib's "Data cannot be log-scaled" after the figure was made)
        raise EmbedscopeError("plot_spectra: no spectrum has a finite singular value above zero (all zero, NaN or "
                              "infinite): nothing to draw on a log axis")
    with plt.rc_context(PAPER_RC):
        ncols = 2 if by_class else 1
        # more curves than fit in a corner of the panel: the legend beside the panel (the figure widened);
        # of two panels, below them (the figure made taller, after the layout: _below)
        outside = len(entries) > MAX_INSIDE_LEGEND
        longest = max((len(short_text(e["label"], LEGEND_CHARS)) for e in entries), default=0) + 12  # " (ρ = 0.123)"
        extra_w = (0.45 + 0.065 * longest) if outside and not by_class else 0.0
        legends = {}  # panel -> (handles, texts) of its legend (to lay it out again below the panel)
        fig, axes = plt.subplots(1, ncols, figsize=(3.5 * ncols + extra_w, 2.7), squeeze=False,
                                 layout="constrained")
        axes = axes[0]
        colors = series_colors(max(len(entries), 1))
        styles = LINE_STYLES

        ax = axes[0]
        kmax = 1
        handles, texts = [], []
        for i, e in enumerate(entries):
            p = normalized_spectrum(e["spectrum"])
            k = np.arange(1, p.size + 1)
            kmax = max(kmax, p.size)
            label = short_text(e["label"], LEGEND_CHARS) + _rho_text(e.get("rho"))
            y = _positive(p)
            line, = ax.plot(k, y, color=colors[i % len(colors)], ls=styles[(i // 10) % 4], lw=1.4, marker=_marker(y),
                            ms=4)
            handles.append(line)
            texts.append(label)  # given explicitly: a label starting with "_" is still listed
        if exclude_top > 0 or (n_components is not None and n_components < kmax):
            h, t = _mark_left_out(ax, entries, exclude_top, colors, n_components, kmax)
            handles.append(h)
            texts.append(t)
        ax.set_yscale("log")
        xlo, xhi = 0.5 - (0.02 * kmax if exclude_top > 0 else 0.0), kmax + 0.5  # room for the rings
        _index_axis(ax, xlo, xhi)
        free_from = {ax: min(0.5, max(0.0, (exclude_top + 0.5 - xlo) / (xhi - xlo)))} if exclude_top > 0 else {}
        ax.set_xlabel("singular value index k")
        ax.set_ylabel(SPECTRUM_YLABEL)
        ax.set_title("Whole set" if by_class else (title or "Normalised singular-value spectrum"))
        ax.grid(True, which="major", alpha=0.3, lw=0.5)
        beside = outside and not by_class
        ax.legend(handles, texts, frameon=False,
                  **({"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)} if beside else {"loc": "upper right"}))
        legends[ax] = (handles, texts)

        if by_class:
            ax = axes[1]
            class_handles, class_texts = [], []
            class_kmax = 1
            class_last = 0  # the last k where a file's mean class spectrum is above zero
            lacking = []  # files without class spectra (no class of two rows): named in the legend
            for i, e in enumerate(entries):
                m = None if e.get("class_mean") is None else np.asarray(e["class_mean"], dtype=np.float64)
                if m is None or not np.any(np.isfinite(_positive(m))):  # none, or no value a log axis shows
                    lacking.append(i)
                    continue
                sd = np.asarray(e.get("class_std", np.zeros_like(m)), dtype=np.float64)
                k = np.arange(1, m.size + 1)
                c = colors[i % len(colors)]
                class_kmax = max(class_kmax, m.size)
                nonzero = np.flatnonzero(np.isfinite(m) & (m > 0))
                class_last = max(class_last, int(nonzero[-1]) + 1 if nonzero.size else 0)
                line, = ax.plot(k, _positive(m), color=c, ls=styles[(i // 10) % 4], lw=1.4,
                                marker=_marker(_positive(m)), ms=4)
                class_handles.append(line)
                class_texts.append(short_text(e["label"], LEGEND_CHARS))
                lo = _positive(m - sd)
                lo = np.where(np.isnan(lo), np.nanmin(_positive(m)) / 10 if np.any(m > 0) else np.nan, lo)
                ax.fill_between(k, lo, _positive(m + sd), color=c, alpha=0.2, lw=0)
            ax.set_yscale("log")
            # classes of few rows (SOP: ~5 images a class, D = 128) have as many nonzero values: the axis
            # ends at the last one (a log axis shows no zero: the curves filled 3 of 16 indices, the rest
            # of the panel empty), and the x label says the rest are zero
            zero_tail = 0 < class_last < class_kmax
            _index_axis(ax, 0.5, (class_last if zero_tail else class_kmax) + 0.5)  # not 0.96-1.04 around one value
            ax.set_xlabel("singular value index k" + (f"\n(k > {class_last}: zero in every class)" if zero_tail else ""))
            ax.set_ylabel(SPECTRUM_YLABEL)
            ax.set_title(f"Per class{', centred' if center else ''} (mean ± s.d. over classes)")
            ax.grid(True, which="major", alpha=0.3, lw=0.5)
            if class_handles:
                from matplotlib.lines import Line2D

                for i in lacking:  # a legend entry without a line: the file is not forgotten, it has none
                    class_handles.append(Line2D([], [], ls="none"))
                    class_texts.append(short_text(entries[i]["label"], LEGEND_CHARS) + " (no class spectrum)")
                ax.legend(class_handles, class_texts, frameon=False, loc="upper right")
                legends[ax] = (class_handles, class_texts)
            else:  # an empty panel: no ticks that would read as values
                ax.set_xticks([])
                ax.set_yticks([])
                ax.minorticks_off()
                ax.grid(False)
                ax.text(0.5, 0.5, "no class-conditioned spectra:\nno class of two or more rows\nwith a nonzero spectrum",
                        transform=ax.transAxes, ha="center", va="center", color="0.4")
        if title and by_class:
            fig.suptitle(title)
        clean_figure(fig)  # model names from files: control characters escaped
        _readable_log_axes(fig, axes)  # (after clean_figure: a name "$\\beta$" laid out as mathtext failed)
        # after clean_figure: the legend is measured with the texts it will show
        if by_class and outside:
            _below(fig, legends)
        elif not outside:
            _place_legends(fig, axes, free_from, legends if by_class else None)
    return fig
