"""Figures of a study (docs/methods.md §6): Roth Fig. 5 panels, the Fig. 4 metric matrix, a ranking by |τ|."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from embedscope.names import STUDY_FIGURES
from embedscope.text import interval
from embedscope.viz.style import (
    LEGEND_CHARS,
    TICK_CHARS,
    clean_figure,
    distinct_colors,
    legend_columns,
    short_text,
    short_texts,
    wrap_text,
)

ROTH_FIG5 = ("rho", "pi_ratio", "pi_intra", "pi_inter")
PRETTY = {"rho": "ρ (train)", "rho_all": "ρ, all values (train)", "pi_ratio": "π_ratio (train)",
          "pi_intra": "π_intra (train)", "pi_inter": "π_inter (train)", "effective_rank": "RankMe (train)",
          "alpha": "α-ReQ (train)", "alignment": "alignment (train)", "uniformity": "uniformity (train)"}


def pretty(name: str, split: str = "") -> str:
    if name in PRETTY:
        return PRETTY[name]
    return f"{name} ({split})" if split else name


def _corr(stats: dict[str, Any], m: str, level: str = "objectives") -> dict[str, Any] | None:
    for r in stats["correlations"]:
        if r["measure"] == m and r["level"] == level:
            return r
    return None


def _fmt_ci(r: dict[str, Any], key: str = "pearson") -> str:
    v, lo, hi = r.get(key), r.get(f"{key}_lo"), r.get(f"{key}_hi")
    if v is None or not math.isfinite(v):
        return "n/a"
    if lo is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return f"{v:+.2f}"
    return f"{v:+.2f} {interval(lo, hi)}"


def _target_split(stats: dict[str, Any]) -> str:
    """The split of the study's target (``test`` for R@1, ``train`` for rho; statistics of an earlier
    version do not say it: test, the only split a target could then be labelled with)."""
    split = stats.get("target_split")
    return split if isinstance(split, str) and split else "test"


def _short_note(r: dict[str, Any], target: str, measure: str = "measure") -> str:
    """The reason a panel's r is n/a (or says nothing), short enough for a panel title ('' when none)."""
    from embedscope.names import NOTE_MEASURE_CONSTANT, NOTE_TOO_FEW, NOTE_TWO_POINTS

    note = str(r.get("note") or "")
    if note == NOTE_TOO_FEW:
        return "fewer than 2 points"
    if note == NOTE_MEASURE_CONSTANT:
        return f"{measure} constant"
    if note == NOTE_TWO_POINTS:
        return "2 points: ±1 always"
    if note.startswith("not defined: ") and f" {target} is the same at every point" in note:
        return f"{target} constant"
    return ""


def _constant_view(ax, axis: str) -> None:
    """An axis whose data are equal up to rounding (the mean of equal R@1 values over 3 and over 6
    seeds differs in the last bit) gets a view of ±5% about them, not one zoomed into the rounding
    (matplotlib then labelled it '1e-12 + 7.712e-1')."""
    lo, hi = ax.get_ylim() if axis == "y" else ax.get_xlim()
    c = (lo + hi) / 2
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi - lo > 1e-9 * abs(c):
        return
    d = max(0.05 * abs(c), 1e-3)
    (ax.set_ylim if axis == "y" else ax.set_xlim)(c - d, c + d)


def _distinct_ticks():
    """A tick formatter with as many decimals as the ticks need to be written exactly (the locator's
    ticks are round numbers: 0.3271, 0.3271025, 0.327105 need 7): a measure that varies in its 5th
    digit (ρ 0.327098 … 0.327106) had four ticks all labelled 0.327, and 3 significant digits
    could write 0.3271025 as 0.327102. Very large or small magnitudes keep the shortest exact 'g'
    form. (Made on call: matplotlib is imported only to draw.)"""
    from matplotlib.ticker import Formatter

    class ExactTicks(Formatter):
        spec = ".3g"

        def set_locs(self, locs):
            super().set_locs(locs)
            vals = sorted({float(v) for v in locs if math.isfinite(v)})
            self.spec = ".3g"
            if len(vals) < 2:
                return
            step = min(b - a for a, b in zip(vals, vals[1:]))
            if step <= 0:
                return
            d = next((d for d in range(16) if all(abs(round(v, d) - v) <= step * 1e-6 for v in vals)), 15)
            mag = max(abs(v) for v in vals)
            if mag == 0 or 1e-4 <= mag < 1e6:
                self.spec = f".{d}f"
            else:  # the significant digits those decimals are at this magnitude
                self.spec = f".{max(3, d + math.floor(math.log10(mag)) + 1)}g"

        def __call__(self, x, pos=None):
            t = format(x, self.spec)
            if t.startswith("-") and not t.strip("-0.e+"):  # -0.000 is 0.000
                t = t[1:]
            return t.replace("-", "\u2212")

    return ExactTicks()


#: Fig.-5 point and error-bar style (points: markersize 4.5 pt; bars 0.8 pt wide with 2 pt caps)
_MS, _ELW, _CAP, _MEW = 4.5, 0.8, 2.0, 1.0


def _points_with_bars(ax, x, y, xe, ye, rgba) -> None:
    """One point per objective with its x and y error bars (seed sd; none where not finite), in the
    colour of each objective: drawn as one collection per part (bars, caps, points) for all
    objectives at once, as ``errorbar(fmt="o", capsize=2)`` per objective would draw them (the same
    look, a few artists instead of seven per objective)."""
    pts = np.isfinite(x) & np.isfinite(y)
    for err, along in ((xe, "x"), (ye, "y")):
        ok = pts & np.isfinite(err)
        if not ok.any():
            continue
        c, lo, hi = rgba[ok], (x if along == "x" else y)[ok] - err[ok], (x if along == "x" else y)[ok] + err[ok]
        if along == "x":
            ax.hlines(y[ok], lo, hi, colors=c, linewidths=_ELW, zorder=2)
            ax.scatter(np.r_[lo, hi], np.r_[y[ok], y[ok]], s=(2 * _CAP) ** 2, c=np.r_[c, c], marker="|",
                       linewidths=_MEW, zorder=2)
        else:
            ax.vlines(x[ok], lo, hi, colors=c, linewidths=_ELW, zorder=2)
            ax.scatter(np.r_[x[ok], x[ok]], np.r_[lo, hi], s=(2 * _CAP) ** 2, c=np.r_[c, c], marker="_",
                       linewidths=_MEW, zorder=2)
    if pts.any():
        ax.scatter(x[pts], y[pts], s=_MS ** 2, c=rgba[pts], marker="o", edgecolors=rgba[pts], linewidths=_MEW,
                   zorder=2.1)


def _legend_handle(color, label: str):
    """A legend entry drawn like an ``errorbar`` point of that colour (point, bars and caps), made of
    artists that belong to no axes."""
    from matplotlib.collections import LineCollection
    from matplotlib.container import ErrorbarContainer
    from matplotlib.lines import Line2D

    point = Line2D([], [], ls="none", marker="o", ms=_MS, mew=_MEW, color=color)
    caps = tuple(Line2D([], [], ls="none", marker=m, ms=2 * _CAP, mew=_MEW, color=color) for m in ("|", "_"))
    bars = tuple(LineCollection([], colors=[color], linewidths=_ELW) for _ in range(2))
    return ErrorbarContainer((point, caps, bars), has_xerr=True, has_yerr=True, label=label)


def _objective_colors(labels: list[str]) -> list:
    """One colour per objective. Where the objectives come in families of at most two that share their
    first word (a loss without and with ρ-regularisation: "margin p_switch=0", "margin p_switch=0.3"),
    a family takes one of tab20's dark/light pairs; otherwise every objective its own hue:
    :func:`distinct_colors`, tab10 for the first 10 (tab20's pairs would suggest families that are
    not there, e.g. three epochs of each loss under ``--epoch all``)."""
    import matplotlib

    fam = [str(t).split(" ", 1)[0] for t in labels]
    order = list(dict.fromkeys(fam))
    sizes = [fam.count(f) for f in order]
    if len(order) <= 10 and max(sizes, default=0) == 2:
        cmap, seen = matplotlib.colormaps["tab20"], {f: 0 for f in order}
        out = []
        for f in fam:
            out.append(tuple(cmap(2 * order.index(f) + seen[f])))
            seen[f] += 1
        return out
    return distinct_colors(len(labels))  # tab10 first


def fig5(stats: dict[str, Any], measures=None, *, title: str | None = None):
    """One panel per training-set measure: one point per objective (mean over seeds, error bars = seed
    standard deviation), the least-squares line, Pearson r with its bootstrap 95% interval (Roth Fig. 5)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    target = stats["target"]
    tsplit = _target_split(stats)
    objs = stats["objectives"]
    avail = _train_measures(stats)
    if measures is None:  # every training measure: Roth's four first
        measures = [m for m in ROTH_FIG5 if m in avail] + [m for m in avail if m not in ROTH_FIG5]
    n = max(len(measures), 1)
    cols = 3 if n in (5, 6, 9) else min(4, n)  # rows as full as they can be
    rows = math.ceil(n / cols)
    # every panel has the target on its y axis: one scale per row of panels, labelled at its left
    # (as Roth's Fig. 5; and a third of the tick labels to lay out)
    fig, axes = plt.subplots(rows, cols, figsize=(3.1 * cols, 2.9 * rows + 0.9), squeeze=False, sharey="row")
    drawn = [False] * rows  # a row with points to draw (its shared y ticks are values)
    rgba = np.array(_objective_colors([o["objective"] for o in objs]), dtype=float).reshape(-1, 4)  # objective i's
    for k, m in enumerate(measures):
        ax = axes[k // cols][k % cols]
        x = np.array([o[m] for o in objs], dtype=float)
        y = np.array([o[target] for o in objs], dtype=float)
        xe = np.array([o.get(f"{m}_sd", np.nan) for o in objs], dtype=float)
        ye = np.array([o.get(f"{target}_sd", np.nan) for o in objs], dtype=float)
        _points_with_bars(ax, x, y, xe, ye, rgba)
        ok = np.isfinite(x) & np.isfinite(y)
        r = _corr(stats, m) or {}
        rv = r.get("pearson")
        # the least-squares line only where r is defined (no line through a constant target or measure)
        if ok.sum() >= 2 and np.ptp(x[ok]) > 0 and rv is not None and math.isfinite(rv):
            a, b = np.polyfit(x[ok], y[ok], 1)
            xx = np.linspace(x[ok].min(), x[ok].max(), 20)
            ax.plot(xx, a * xx + b, color="0.3", lw=1.0, ls="--")
        # objectives whose measure is undefined (ρ of a collapsed model is NaN) are said, not dropped silently
        undef = int(np.sum(~np.isfinite(x) & np.isfinite(y)))
        why = _short_note(r, target, pretty(m, "train").split(" (")[0])
        head = f"r = {_fmt_ci(r)}" + (f" ({why})" if why else "")
        tail = f"({undef} undefined, not drawn)" if undef else ""
        # the count on a line of its own (on one line, 48 characters ran into the next panel's title)
        ax.set_title(head + ("\n" + tail if tail else ""), fontsize=8.5)
        ax.set_xlabel(pretty(m, "train"))
        if k % cols == 0:
            ax.set_ylabel(f"{target} ({tsplit})")
        ax.grid(alpha=0.25)
        # at most 5 ticks, in as few significant digits (>= 3) as tell them apart: tiny π values (an
        # untrained network's 0.0000 ... 0.0010, six ticks of six digits) ran into one another, and a
        # measure varying in its 5th digit had every tick labelled alike
        xs = x[np.isfinite(x)]
        rel = np.ptp(xs) / np.max(np.abs(xs)) if xs.size and np.max(np.abs(xs)) > 0 else 1.0
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4 if rel >= 1e-2 else 3))  # long labels: fewer ticks
        ax.xaxis.set_major_formatter(_distinct_ticks())
        if ok.any():
            drawn[k // cols] = True
            _constant_view(ax, "x")
            _constant_view(ax, "y")
        else:  # no point to draw (the measure undefined for every objective): no 0-1 ticks that read as values
            ax.set_xticks([])
            ax.grid(False)
    for i in range(rows):
        if not drawn[i]:  # (y is the row's: its ticks go only where no panel of the row has a point)
            axes[i][0].set_yticks([])
    for k in range(len(measures), rows * cols):
        axes[k // cols][k % cols].axis("off")
    labels, ncol = _legend_labels([o["objective"] for o in objs], fig.get_figwidth())
    handles = [_legend_handle(c, t) for c, t in zip(rgba, labels)]
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False,
                   bbox_to_anchor=(0.5, 0.0))
    few = ("\n2 objectives: every r is ±1 whatever the values (a line through two points)"
           if len(objs) == 2 else "")
    fig.suptitle(title or f"Training-set structure vs {tsplit} {target}: one point per objective ({len(objs)}; "
                 f"mean over seeds ± sd), Pearson r [bootstrap 95%]{few}", fontsize=9.5)
    nrow_leg = math.ceil(len(labels) / ncol) if handles else 0
    clean_figure(fig)  # objective names from checkpoints: control characters escaped
    # the legend's rows (8 pt, ~0.2 in each, and a margin) below the panels, not a fraction of the height
    h = fig.get_figheight()
    if nrow_leg > 2:  # (the height drawn for holds two rows: more took it from the panels, and a one-panel
        # figure of 12 objectives drew its legend over the panel, its title over the panel's r)
        h += 0.2 * (nrow_leg - 2)
        fig.set_figheight(h)
    # (the top: tight_layout keeps the panels below the suptitle itself; a margin reserved for it as
    # well left half an inch of empty canvas between the title and the panels)
    fig.tight_layout(rect=(0, (0.1 + 0.2 * nrow_leg) / h if nrow_leg else 0, 1, 1))
    return fig


def _train_measures(stats: dict[str, Any]) -> list[str]:
    """The measures of ``stats`` correlated over the training split: Fig. 5's panels."""
    return [m for m in stats["measures"] if any(r["measure"] == m and r["split"] == "train"
                                                for r in stats["correlations"])]


def _legend_labels(names: list[Any], width: float, max_cols: int = 6) -> tuple[list[str], int]:
    """(the legend's labels of ``names``, its columns) in a figure ``width`` inches wide: cut to
    LEGEND_CHARS, or longer where the longer labels take no more rows of the legend (the demo grid's
    'margin miner=d…ce p_switch=0' and 'multisimilarit…ne p_switch=0' hid the miner that tells the
    objectives apart, in a legend with room for 40 characters a label in as many rows)."""
    labels = short_texts(names, LEGEND_CHARS)  # (kept apart when cut alike)
    ncol = legend_columns(labels, width, max_cols=max_cols)  # 8-pt legend text
    if not labels:
        return labels, ncol
    rows = math.ceil(len(labels) / ncol)
    for n in (72, 60, 48, 40, 34):
        if n <= LEGEND_CHARS:
            break
        longer = short_texts(names, n)
        k = legend_columns(longer, width, max_cols=max_cols)
        # (legend_columns' own measure of a label: one that is wider than the figure is one column too)
        if width >= 0.34 + 0.065 * max(len(t) for t in longer) and math.ceil(len(longer) / k) <= rows:
            return longer, k
    return labels, ncol


def fig4(stats: dict[str, Any], *, title: str | None = None):
    """Pearson correlation matrix between evaluation metrics across objectives (Roth Fig. 4)."""
    import matplotlib
    import matplotlib.pyplot as plt

    names = stats["metric_matrix"]["names"]
    M = np.array(stats["metric_matrix"]["pearson"], dtype=float)
    k = len(names)
    # at least 4.8 x 3.4 in: with one to three metrics the colour bar's label ran into the title and
    # the note below was twice the figure's width
    fig, ax = plt.subplots(figsize=(max(0.55 * k + 2.2, 4.8), max(0.5 * k + 1.6, 3.4)))
    # an undefined entry is grey and says n/a: left blank it read as white, the colour of r = 0
    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad="0.82")
    im = ax.imshow(np.ma.masked_invalid(M), vmin=-1, vmax=1, cmap=cmap)
    ax.set_xticks(range(k), [short_text(n, TICK_CHARS) for n in names], rotation=45, ha="right")
    ax.set_yticks(range(k), [short_text(n, TICK_CHARS) for n in names])
    for i in range(k):
        for j in range(k):
            if np.isfinite(M[i, j]):
                ax.text(j, i, f"{M[i, j]:.2f}", ha="center", va="center", fontsize=7.5,
                        color="white" if abs(M[i, j]) > 0.6 else "black")
            else:
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=7, color="0.35")
    fig.colorbar(im, ax=ax, shrink=0.8, label="Pearson r over objectives")
    n_obj = (stats.get("n_points") or {}).get("objectives")
    tsplit = _target_split(stats)  # the first name is the target: a training-set one is not a test metric
    what = "test metrics" if tsplit == "test" else f"the target ({stats.get('target')}, {tsplit}) and test metrics"
    ax.set_title(title or (f"Correlation between {what} across objectives"
                           + (f" ({n_obj} objectives)" if isinstance(n_obj, int) else "")), fontsize=9.5)
    if not np.isfinite(M).all():
        note = ("grey, n/a: not defined (a metric constant over the objectives, or fewer than 3 objectives "
                "with a value of both)")
        # wrapped to the figure (8-pt characters average ~0.075 in)
        ax.set_xlabel(wrap_text(note, max(40, int(fig.get_figwidth() / 0.075))), fontsize=8)
    clean_figure(fig)
    fig.tight_layout()
    return fig


def ranking_chart(stats: dict[str, Any], *, title: str | None = None):
    """Measures ranked by |Kendall τ| with the target over runs, bootstrap 95% interval as whiskers;
    the granulated τ (Jiang et al. 2020) as a diamond. The interval and the diamond are drawn on the
    bar's scale (multiplied by the sign of τ), so a value of the other sign lies left of 0."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    rk = stats["ranking"]
    k = max(len(rk), 1)
    fig, ax = plt.subplots(figsize=(6.4, 0.32 * k + 1.4))
    ys = np.arange(len(rk))[::-1]
    tau = np.array([r["kendall"] for r in rk], dtype=float)
    lo = np.array([r["kendall_lo"] for r in rk], dtype=float)
    hi = np.array([r["kendall_hi"] for r in rk], dtype=float)
    gt = np.array([r.get("granulated_tau", np.nan) for r in rk], dtype=float)
    # one artist per part for all measures (bars, interval lines, diamonds), as one per measure would draw them
    ax.barh(ys, np.abs(tau), color=["tab:blue" if t >= 0 else "tab:red" for t in tau], alpha=0.75)
    s = np.where(tau != 0, np.sign(tau), 1.0)
    ok = np.isfinite(lo) & np.isfinite(hi)
    if ok.any():
        a, b = np.minimum(s * lo, s * hi)[ok], np.maximum(s * lo, s * hi)[ok]
        ax.add_collection(LineCollection([[(u, y), (v, y)] for u, v, y in zip(a, b, ys[ok])], colors="k",
                                         linewidths=1, capstyle="projecting", zorder=2))
    ok = np.isfinite(gt)
    if ok.any():  # on the bar's scale, as the interval: τ's sign times the granulated τ (< 0: the signs disagree)
        ax.plot((s * gt)[ok], ys[ok], "D", ls="none", color="k", ms=3.5, mfc="white")
    ax.set_yticks(ys, [short_text(pretty(r["measure"], r["split"]), TICK_CHARS + 8) for r in rk])
    ax.axvline(0, color="0.4", lw=0.8)
    ax.set_xlim(min(-0.05, ax.get_xlim()[0]), 1.02)
    marks = (["line: 95% interval"] if np.isfinite(lo).any() else []) + \
        (["◇: granulated τ, left of 0 where its sign differs from τ's"] if np.isfinite(gt).any() else [])
    ax.set_xlabel(f"|Kendall τ| with {_target_split(stats)} {stats['target']} over runs (blue: τ > 0, red: τ < 0"
                  + (";\n" + "; ".join(marks) if marks else "") + ")")
    n_runs = (stats.get("n_points") or {}).get("runs")
    ax.set_title(title or ("Measures ranked by |τ|" + (f" over {n_runs} runs" if isinstance(n_runs, int) else "")
                           + ("\n2 runs: every τ is ±1 whatever the values" if n_runs == 2 else "")), fontsize=9.5)
    ax.grid(axis="x", alpha=0.25)
    clean_figure(fig)
    fig.tight_layout()
    return fig


#: the figures of a study, largest first: (file name, drawing function). The names are
#: :data:`embedscope.names.STUDY_FIGURES` (one list, which the command line reads without matplotlib)
FIGURES = tuple(zip(STUDY_FIGURES, (fig5, fig4, ranking_chart), strict=True))


def figure_names(stats: dict[str, Any]) -> list[str]:
    """The figures a study's statistics call for (the Fig. 4 matrix needs 2 metrics, the ranking a τ)."""
    out = []
    for name, draw in FIGURES:
        if draw is fig5 and not _train_measures(stats):
            continue  # (a study of test metrics only, --measures P@1: a figure of no panel, a legend alone)
        if draw is fig4 and len(stats["metric_matrix"]["names"]) < 2:
            continue  # (with fewer than 3 objectives every entry is n/a, drawn grey and said under it)
        if draw is ranking_chart and not stats["ranking"]:
            continue
        out.append(name)
    return out


def draw_figure(name: str, stats: dict[str, Any], fig_dir: str | os.PathLike) -> Path:
    """Draw one figure of :data:`FIGURES` and write it (PNG + PDF) into ``fig_dir`` -> the PNG path.

    Runs in any process (a Dask worker draws one while another draws the next): headless, paper style.
    """
    import matplotlib.pyplot as plt

    from embedscope.viz.figures import PAPER_RC, save_figure, use_agg

    use_agg()
    fig_dir = Path(fig_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)
    fn = dict(FIGURES)[name]
    with plt.rc_context(PAPER_RC):
        fig = fn(stats)
        try:
            png, _ = save_figure(fig, fig_dir / name, force=True)
        finally:
            plt.close(fig)
    return png


def start_figures(stats: dict[str, Any], fig_dir: str | os.PathLike, *, client=None):
    """Hand all but the last figure to the Dask workers of ``client`` (which share this file system) now;
    returns ``finish()``, which draws the rest here, waits for the workers' and returns {name: PNG path}."""
    names = figure_names(stats)
    futs = {}
    if client is not None and len(names) > 1:
        for name in names[:-1]:
            futs[name] = client.submit(draw_figure, name, stats, str(fig_dir), pure=False)

    def finish() -> dict[str, Path]:
        out = {name: draw_figure(name, stats, fig_dir) for name in names if name not in futs}
        out.update({name: Path(f.result()) for name, f in futs.items()})
        return {name: out[name] for name in names}

    return finish


def study_figures(df, stats: dict[str, Any], fig_dir: str | os.PathLike, *, client=None) -> dict[str, Path]:
    """Write the figures (PNG + PDF) of a study into ``fig_dir`` (``client``: see :func:`start_figures`)."""
    return start_figures(stats, fig_dir, client=client)()
