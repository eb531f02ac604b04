"""Bar chart of Normalized R-Precision per image property (docs/methods.md §9): drawing only."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

#: the most properties drawn; with more (CUB's 312 attributes) the first and last MAX_PROPERTIES / 2 of
#: the sorted rows are drawn, the others summed up in one gap slot (a bar per attribute made a
#: 60,000-pixel-wide PNG; the table and CSV hold every property)
MAX_PROPERTIES = 30
#: the least size of the bars' panel, in inches: its height, and its width per property slot (times the
#: square root of the number of models, as the figure's width); the figure grows by what long property
#: names, slanted under the panel, take (28-character names left a panel 1.3 inches tall in a 3.2-inch
#: figure; narrower than 0.34 inches a slot, the slanted names run into each other)
PLOT_HEIGHT = 2.0
SLOT_WIDTH = 0.34


def property_bars(rows: Sequence[dict[str, Any]], *, title: str | None = None,
                  max_properties: int | None = MAX_PROPERTIES):
    """Grouped bars of NR-Prec per property (models side by side), the paper's 2.576 line, ceilings as ticks.

    ``rows`` as from :func:`embedscope.analyses.properties` (already sorted, highest NR-Prec first).
    More than ``max_properties`` properties (None: no limit): the highest and lowest
    ``max_properties // 2`` each, with one slot between them that says how many are left out.
    A NaN NR-Prec (undefined: every value lone, one value, a collapsed model) is written "n/a" where
    its bar would stand, and the legend says so; a property a model's file lacks (models of different
    properties side by side) is written "absent" there, not "n/a". Property names are cut in the middle
    to ``TICK_CHARS`` under the bars, slanted; the figure grows by what they take (the panel keeps
    :data:`PLOT_HEIGHT` inches, :data:`SLOT_WIDTH` a slot). Returns the matplotlib figure.
    """
    import matplotlib.pyplot as plt

    from embedscope.metrics.properties import SIGNIFICANCE_Z
    from embedscope.viz.style import LEGEND_CHARS, PAPER_RC, TICK_CHARS, clean_figure, series_colors, short_texts

    props: list[Any] = list(dict.fromkeys(r["property"] for r in rows))
    left_out = 0
    if max_properties is not None and len(props) > max(2, int(max_properties)):
        half = max(1, int(max_properties) // 2)
        left_out = len(props) - 2 * half
        props = props[:half] + [None] + props[-half:]  # None: the gap
    models = list(dict.fromkeys(r["model"] for r in rows))
    model_texts = short_texts(models, LEGEND_CHARS)  # (names cut alike kept apart)
    val = {(r["model"], r["property"]): r for r in rows}
    with plt.rc_context(PAPER_RC):
        fig, ax = plt.subplots(figsize=(max(4.0, 0.55 * len(props) * max(1, len(models)) ** 0.5 + 1.5), 3.2))
        w = 0.8 / len(models)
        colors = series_colors(len(models))
        x = np.arange(len(props))
        gap = np.array([p is None for p in props])
        handles, labels, ceiling, missing, absent = [], [], None, False, False
        for j, m in enumerate(models):
            ys = [val.get((m, p), {}).get("NR-Prec", np.nan) for p in props]
            cs = [val.get((m, p), {}).get("ceiling", np.nan) for p in props]
            xs = x - 0.4 + w * (j + 0.5)
            ys = np.asarray(ys, dtype=float)
            handles.append(ax.bar(xs, np.nan_to_num(ys), w, color=colors[j]))
            no_row = np.array([p is not None and (m, p) not in val for p in props], dtype=bool)
            for xv in xs[~np.isfinite(ys) & ~gap & ~no_row]:  # no value (e.g. too few images): say so, not a bar of height 0
                ax.text(xv, 0, "n/a", rotation=90, ha="center", va="bottom", fontsize=6, color="0.35")
                missing = True
            for xv in xs[no_row]:  # no row: the file lacks the property (or a property stands for its class)
                ax.text(xv, 0, "absent", rotation=90, ha="center", va="bottom", fontsize=6, color="0.35")
                absent = True
            labels.append(model_texts[j])
            ceiling = ax.scatter(xs, cs, marker="_", s=120, color="0.3", zorder=3)
        if ceiling is not None:
            handles.append(ceiling)
            labels.append("ceiling (perfect clustering)")
        handles.append(ax.axhline(SIGNIFICANCE_Z, color="k", ls="--", lw=0.8))
        labels.append("2.576 (Kobs' 1% rule)")
        if missing:  # what "n/a" means, and where the reason is (the table's "undefined (–)" line)
            from matplotlib.lines import Line2D

            handles.append(Line2D([], [], ls="none"))
            labels.append("n/a: NR-Prec undefined\n(why: the table's note)")
        if absent:
            from matplotlib.lines import Line2D

            handles.append(Line2D([], [], ls="none"))
            labels.append("absent: no row for that\nmodel (the table's notes)")
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xticks(x)
        named = [p for p in props if p is not None]  # (names cut alike kept apart: short_texts)
        cut = dict(zip(named, short_texts(named, TICK_CHARS)))
        ax.set_xticklabels([cut[p] if p is not None else f"\u2026 {left_out} more" for p in props],
                           rotation=35, ha="right")
        # on two lines: on one (2.4 in) it ran above and below a panel of 2 in
        ax.set_ylabel("NR-Prec (z,\nhigher = more clustered)")
        ax.set_xlabel("image property")
        ax.set_yscale("symlog", linthresh=3.0)
        tops = [v for r in rows for v in (r.get("NR-Prec"), r.get("ceiling"))
                if isinstance(v, (int, float)) and np.isfinite(v)]
        if tops and max(tops) > 0:  # headroom above the highest ceiling tick (it sat on the frame)
            lo, hi = ax.get_ylim()
            ax.set_ylim(lo, max(hi, 1.4 * max(tops)))
        _label_y(ax)
        ax.set_xlim(-0.5, len(props) - 0.5)  # matplotlib's 5% margins left ~n/20 empty slots at either end
        # handles and labels given explicitly: a model named "_..." is listed too (matplotlib would skip it)
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        if left_out:
            ax.set_xlabel(f"image property (the {len(props) - 1} highest and lowest of {len(props) - 1 + left_out}; "
                          "all in the table)")
        if title:  # over the whole figure: the axes is narrow beside its legend, a long title overran it
            fig.suptitle(title, fontsize=PAPER_RC["axes.titlesize"])
        clean_figure(fig)  # property and model names from files: control characters escaped
        fig.tight_layout()
        _fit_panel(fig, ax, max(1.3, SLOT_WIDTH * len(props) * max(1, len(models)) ** 0.5))
    return fig


def _fit_panel(fig, ax, width: float) -> None:
    """Make the figure larger (laid out again) until its panel is :data:`PLOT_HEIGHT` inches tall and
    ``width`` inches wide: ``tight_layout`` keeps the slanted tick labels, the x label and the legend
    inside a figure of fixed size by squeezing the panel (to 40% of the figure's height under
    28-character names)."""
    for _ in range(3):  # (the labels keep their size: one step, unless the layout rounds)
        W, H = fig.get_size_inches()
        box = ax.get_position()
        short_w, short_h = width - box.width * W, PLOT_HEIGHT - box.height * H
        if short_w < 0.01 and short_h < 0.01:
            break
        fig.set_size_inches(W + max(short_w, 0.0), H + max(short_h, 0.0))
        fig.tight_layout()


def _label_y(ax) -> None:
    """Plain-number ticks on the symlog axis: 0, 1, 2, 3 (linear part), then 10, 30, 100, ... (and negatives).

    The symlog default labelled only 0, 10^0, 10^1, ...: below an NR-Prec of 10 (the ceilings of a
    small set, the 2.576 line) the axis had no number above 1 to read the bars and ceilings against.
    """
    from matplotlib.ticker import FixedLocator, FuncFormatter

    lo, hi = ax.get_ylim()
    top = max(abs(lo), abs(hi))
    small = [1.0, 3.0] if top > 300 else [1.0, 2.0, 3.0]  # (2 crowds the linear part of a tall axis)
    big = [m * 10.0 ** e for e in range(1, 9) for m in ((1.0,) if top > 300 else (1.0, 3.0))]
    if top < 10:
        small.append(5.0)
    ticks = [0.0] + [s * v for v in small + big for s in (1.0, -1.0)]
    ax.yaxis.set_major_locator(FixedLocator(sorted(t for t in ticks if lo <= t <= hi)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}".replace("-", "\u2212")))  # a true minus
