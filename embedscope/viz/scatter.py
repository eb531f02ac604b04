"""Same-vs-different similarity scatter (docs/methods.md §10; Xuan, Stylianou, Pless §2.4): drawing only.

The similarities come from :func:`embedscope.metrics.nearest_same_different` and the share below
the diagonal from :func:`embedscope.metrics.share_below_diagonal`; :func:`plot_same_different`
draws one panel per split, each zoomed to its points in a square window, the diagonal at 45°.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.viz.style import ABOVE_COLOR, BELOW_COLOR, PAPER_RC, clean_figure

#: a tied point (s_same = s_diff exactly: on the diagonal, neither nearer its own class nor another):
#: Okabe–Ito's reddish purple, drawn as a diamond over the diagonal
TIED_COLOR = "#cc79a7"
#: the window's width around points that all lie at one place, as a share of their magnitude
SINGLE_POINT_WIDTH = 0.1
#: spans below this share of the points' magnitude count as none (all points at one x or y)
FLAT_SPAN = 1e-9

#: the largest ratio between the x and y spans of a panel's window (a thin cloud of points gets a
#: wider window in its short direction rather than a needle-thin one)
MAX_SPAN_RATIO = 4.0
#: the diagonal y = x crosses each window over at least this share of the window's longer span
MIN_DIAGONAL_SHARE = 0.15


def _grow(lo: float, hi: float, to: float, toward: float) -> tuple[float, float]:
    """Widen [lo, hi] to length ``to``, on the side of ``toward``."""
    if hi - lo >= to:
        return lo, hi
    return (hi - to, hi) if toward < (lo + hi) / 2 else (lo, lo + to)


def zoom_window(a: np.ndarray, b: np.ndarray, *, pad: float = 0.05, max_ratio: float = MAX_SPAN_RATIO,
                min_diagonal: float = MIN_DIAGONAL_SHARE, square: bool = True
                ) -> tuple[tuple[float, float], tuple[float, float]]:
    """((x0, x1), (y0, y1)): a window fitted to the points (x = ``a``, y = ``b``) that keeps a
    stretch of the diagonal y = x in view.

    ``square=True`` (the default, what :func:`plot_same_different` draws): one range for x and y, the
    union of the points' x and y ranges padded by ``pad`` of its span on both sides, so that on axes of
    equal aspect the diagonal runs at 45° from corner to corner and a point's side of it reads truly.

    ``square=False``: the x and y ranges are those of the points, each widened (towards the other) until
    the spans differ by at most ``max_ratio`` and the two ranges overlap by ``min_diagonal`` of the longer
    span (so the diagonal crosses the window), then padded by ``pad`` on every side (the diagonal is then
    not at 45° unless the spans happen to be equal). Ranges only grow: every point stays in view.

    Every length is relative to the points' magnitude m = max |value| (1 when all are 0), so the
    window is the same at any scale (similarities of 1e-60 or of 1e60). A range narrower than
    ``FLAT_SPAN`` · m is taken as a single value; when both are (``square``: when their union is), all
    points lie at one place and the window is ``SINGLE_POINT_WIDTH`` · m wide in x and y, centred on them.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.size == 0:
        return (0.0, 1.0), (0.0, 1.0)
    x0, x1, y0, y1 = float(a.min()), float(a.max()), float(b.min()), float(b.max())
    scale = max(abs(x0), abs(x1), abs(y0), abs(y1))
    if not scale > 0:  # every point at the origin
        scale = 1.0
    if square:
        lo, hi = min(x0, y0), max(x1, y1)
        if hi - lo < FLAT_SPAN * scale:  # all points at one place: a window around them, at their scale
            mid, half = (lo + hi) / 2, SINGLE_POINT_WIDTH * scale / 2
            lo, hi = mid - half, mid + half
        p = pad * (hi - lo)
        return (lo - p, hi + p), (lo - p, hi + p)
    tiny = FLAT_SPAN * scale  # relative: an absolute floor would swallow data at the 1e-60 scale
    flat_x, flat_y = x1 - x0 < tiny, y1 - y0 < tiny
    if flat_x and flat_y:  # all points at one place: a window around them, at their scale
        tiny = SINGLE_POINT_WIDTH * scale
    if flat_x:  # all points at one x: a small window centred on them (widened below)
        x0, x1 = (x0 + x1) / 2 - tiny / 2, (x0 + x1) / 2 + tiny / 2
    if flat_y:
        y0, y1 = (y0 + y1) / 2 - tiny / 2, (y0 + y1) / 2 + tiny / 2
    # 1. not too elongated
    longest = max(x1 - x0, y1 - y0)
    x0, x1 = _grow(x0, x1, longest / max_ratio, (y0 + y1) / 2)
    y0, y1 = _grow(y0, y1, longest / max_ratio, (x0 + x1) / 2)
    # 2. the diagonal crosses the window: the ranges overlap by >= need
    need = min_diagonal * max(x1 - x0, y1 - y0)
    overlap = min(x1, y1) - max(x0, y0)
    if overlap < need:
        lack = need - overlap
        if (x0 + x1) > (y0 + y1):  # points below the diagonal: lower x0 or raise y1
            cand = [("x0", x0 - lack), ("y1", y1 + lack)]
        else:  # points above: lower y0 or raise x1
            cand = [("y0", y0 - lack), ("x1", x1 + lack)]
        # widen the range that grows least relative to its own span
        spans = {"x0": x1 - x0, "x1": x1 - x0, "y0": y1 - y0, "y1": y1 - y0}
        which, value = min(cand, key=lambda c: lack / spans[c[0]])
        x0, x1, y0, y1 = (value if which == "x0" else x0, value if which == "x1" else x1,
                          value if which == "y0" else y0, value if which == "y1" else y1)
    # 3. widening for the diagonal may have left the other range thin: (1) again, growth only
    longest = max(x1 - x0, y1 - y0)
    x0, x1 = _grow(x0, x1, longest / max_ratio, (y0 + y1) / 2)
    y0, y1 = _grow(y0, y1, longest / max_ratio, (x0 + x1) / 2)
    px, py = pad * (x1 - x0), pad * (y1 - y0)
    return (x0 - px, x1 + px), (y0 - py, y1 + py)


def _axis_label(metric: str, which: str) -> str:
    what = {"cosine": "cosine similarity", "dot": "inner product",
            "euclidean": "−Euclidean distance"}[metric]
    return f"{what}\nto the nearest {which} point"


def plot_same_different(
    panels: Mapping[str, tuple[Any, Any]],
    *,
    metric: str = "cosine",
    title: str | None = None,
    same_window: bool = False,
):
    """Same-vs-different scatter (docs/methods.md §10, Xuan §2.4), one panel per entry of ``panels``
    (e.g. ``{"train": (s_same, s_diff), "test": (...)}``), side by side.

    x = similarity to the nearest same-class point, y = to the nearest different-class point; the
    diagonal y = x; points below it (nearer their own class: 1-NN correct) bluish green, above it vermillion,
    tied points (s_same = s_diff exactly, on the diagonal: a 1-NN query is right or wrong by the
    tie rule) purple diamonds drawn over the diagonal. Each title gives the share below the
    diagonal, which is the R@1 when no point is tied; with ties it gives their number too (the
    R@1 then lies between the share below and the share below or tied). Each panel is zoomed to its own points
    (:func:`zoom_window`): one range for x and y, the union of the points' x and y ranges with a 5% margin, on
    axes of equal aspect, so the diagonal runs at 45° from corner to corner; ``same_window=True`` gives all
    panels one window fitted to all their points. Returns the figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    if not panels:
        raise EmbedscopeError("nothing to plot: no panels")
    data = {}
    for name, (a, b) in panels.items():
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        ok = np.isfinite(a) & np.isfinite(b)
        data[name] = (a[ok], b[ok], int((~ok).sum()))
    if same_window:
        shared = zoom_window(np.concatenate([v[0] for v in data.values()]),
                             np.concatenate([v[1] for v in data.values()]))
    k = len(data)
    any_tied = False
    with plt.rc_context(PAPER_RC):
        fig, axes = plt.subplots(1, k, figsize=(3.3 * k, 3.7), squeeze=False)
        axes = axes[0]
        for ax, (name, (a, b, left_out)) in zip(axes, data.items()):
            (x0, x1), (y0, y1) = shared if same_window else zoom_window(a, b)
            below, tied = b < a, a == b
            n_tied = int(tied.sum())
            any_tied = any_tied or n_tied > 0
            size = float(np.clip(3000.0 / max(len(a), 1), 1.5, 12.0))
            off = np.flatnonzero(~tied)
            order = off[np.random.default_rng(0).permutation(len(off))]
            col = np.where(below[order], BELOW_COLOR, ABOVE_COLOR)
            ax.scatter(a[order], b[order], c=col, s=size, linewidths=0, alpha=0.7, rasterized=True)
            lo, hi = min(x0, y0), max(x1, y1)
            ax.plot([lo, hi], [lo, hi], color="0.15", linewidth=0.9, zorder=3)
            if n_tied:  # over the diagonal, which would hide them
                ax.scatter(a[tied], b[tied], c=TIED_COLOR, marker="D", s=max(size, 9.0), edgecolors="0.15",
                           linewidths=0.3, alpha=0.9, zorder=4, rasterized=True)
            ax.set_xlim(x0, x1)
            ax.set_ylim(y0, y1)
            share = float(below.mean()) if len(a) else float("nan")
            extra = f", {left_out:,} lone left out" if left_out else ""
            if len(a) and n_tied:  # the share below is not the R@1: say how many are on the diagonal
                ttl = f"{name} (N = {len(a):,}{extra})\n{share:.1%} below diagonal, {n_tied:,} tied"
            elif len(a):
                ttl = f"{name} (N = {len(a):,}{extra})\n{share:.1%} below diagonal (R@1)"
            else:  # every point lone (or NaN): say how many were left out
                ttl = f"{name}: no points" + (f" ({left_out} lone left out)" if left_out else "")
            ax.set_title(ttl)
            ax.set_xlabel(_axis_label(metric, "same-class"))
            ax.set_ylabel(_axis_label(metric, "other-class"))
        handles = [
            Line2D([], [], marker="o", linestyle="", color=BELOW_COLOR, label="nearer own class (1-NN correct)"),
            Line2D([], [], marker="o", linestyle="", color=ABOVE_COLOR, label="nearer another class"),
            Line2D([], [], color="0.15", label="diagonal y = x"),
        ]
        if any_tied:
            handles.insert(2, Line2D([], [], marker="D", linestyle="", color=TIED_COLOR, markeredgecolor="0.15",
                                     markeredgewidth=0.3, label="tied: on the diagonal (1-NN by tie rule)"))
        ncol = 3 if k > 1 else 1  # one panel (3.3 in) is narrower than the legend in a row: stacked
        fig.legend(handles=handles, loc="lower center", ncol=ncol, frameon=False, bbox_to_anchor=(0.5, 0.0))
        if title:
            fig.suptitle(title)
        clean_figure(fig)  # split names and titles from files: control characters escaped
        legend_h = 0.42 + 0.16 * (-(-len(handles) // ncol) - 1)
        fig.tight_layout(rect=(0, legend_h / fig.get_figheight(), 1, 1), pad=0.4, w_pad=1.0)
        # at extreme scales the y axis's multiplier (e.g. "1e59") sits above the panel, at the height
        # of the title's last line: matplotlib moves the title only when the two overlap, so a short
        # title read "1e59 88.5% below ...". The title is raised above it, then the layout redone.
        fig.canvas.draw()
        raised = False
        for ax in axes:
            off = ax.yaxis.get_offset_text()
            if off.get_text():
                ax.set_title(ax.get_title(), pad=plt.rcParams["axes.titlepad"] + 1.3 * off.get_fontsize())
                raised = True
        if raised:
            fig.tight_layout(rect=(0, legend_h / fig.get_figheight(), 1, 1), pad=0.4, w_pad=1.0)
        # one unit as long in x as in y: the diagonal at 45°, a point's distance to it true in both axes. Set
        # after the layout, each panel shrinking to a square inside its place (tight_layout measured a fixed
        # aspect's panel before it took its square: a title then stood above the figure's top edge)
        for ax in axes:
            ax.set_aspect("equal", adjustable="box")
    return fig


# ------------------------------------------------------------------------- moved computations
#: measures that lived here before computing and drawing were separated (now embedscope.metrics)
_MOVED = {
    "nearest_same_different": "embedscope.metrics.neighbours",
    "share_below_diagonal": "embedscope.metrics.neighbours",
    "METRICS": "embedscope.metrics.neighbours",
}


def __getattr__(name: str):
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module 'embedscope.viz.scatter' has no attribute '{name}'")


__all__ = ["plot_same_different", "zoom_window", "TIED_COLOR"]
