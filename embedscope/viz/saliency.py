"""Figures of saliency maps and their agreement (Kobs et al. Fig. 2 and Tables 2–4; docs/methods.md §8).

Drawing only: the numbers come from :mod:`embedscope.metrics.agreement` and the maps files.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from embedscope.families import family_of_maps
from embedscope.viz.style import OTHER_CLASS_COLOR, SAME_CLASS_COLOR, clean_figure, short_text, short_texts, wrap_text

MAP_CMAP = "turbo"
DISTANCE_WORDS = {"euclidean": "Euclidean distance", "sqeuclidean": "squared Euclidean distance",
                  "cosine": "cosine similarity", "dot": "dot product", "snr": "SNR distance"}
FAMILY_COLOURS = {"ranking": "#1f77b4", "classification": "#d62728", "untrained": "#7f7f7f", "other": "#2ca02c"}


def _short(s: str, n: int = 28) -> str:
    s = str(s)
    return s if len(s) <= n else "…" + s[-(n - 1):]  # paths: the tail names the file (model names: short_text)


def _blocks(families: Sequence[str]) -> list[tuple[int, int, str]]:
    """Contiguous runs of equal family -> (start, stop, family)."""
    out = []
    s = 0
    for i in range(1, len(families) + 1):
        if i == len(families) or families[i] != families[s]:
            out.append((s, i, families[s]))
            s = i
    return out


def agreement_heatmaps(res: dict[str, Any]):
    """Two heat-maps side by side: Fisher-z mean Pearson r (± spread) and mean JSD, model × model,
    values in the cells, family blocks outlined; block means in the caption."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from embedscope.viz.figures import PAPER_RC

    names, fams = list(res["names"]), list(res["families"])
    M = len(names)
    cell = 0.62 if M <= 8 else 0.45
    side = max(2.6, cell * M + 1.2)
    unit = res["pairs"][next(iter(res["pairs"]))]["jsd_base"] if res["pairs"] else "bits"
    # the tick labels (model names, up to 18 characters) take room from the panels: each colour bar's
    # label is on two lines, so that it stays within the bar of a small panel (it ran into the title)
    ticks = max((len(short_text(n, 18)) for n in names), default=0)
    with plt.rc_context(PAPER_RC):
        fig, axes = plt.subplots(1, 2, figsize=(2 * side + 2.2 + 0.09 * ticks, side + 1.0 + 0.045 * ticks))
        panels = [("r_mean", "r_spread", f"Pearson r (Fisher-z mean ± spread, {res['n_images']} images)",
                   "viridis", "higher =\nmore agreement"),
                  ("jsd_mean", "jsd_std", f"JSD ({unit}, mean ± std)", "viridis_r", "lower =\nmore agreement")]
        fs = 8 if M <= 6 else (6.5 if M <= 10 else 5)
        for ax, (key, spread_key, title, cmap, direction) in zip(axes, panels):
            A = np.array(res[key], dtype=float)
            S = np.array(res[spread_key], dtype=float)
            off = A[~np.eye(M, dtype=bool)]
            off = off[np.isfinite(off)]
            if key == "r_mean":
                vmin, vmax = (min(0.0, float(off.min())) if off.size else 0.0), 1.0
            else:
                # every pair identical (JSD 0): a scale to 0.01, not to 1e-6 (a bar labelled "1e−6")
                top = float(off.max()) if off.size else 0.0
                vmin, vmax = 0.0, (top * 1.05 if top > 0 else (0.01 if off.size else 1.0))
            shown = A.copy()
            np.fill_diagonal(shown, np.nan)
            cm = plt.get_cmap(cmap).with_extremes(bad="#e6e6e6")
            im = ax.imshow(shown, cmap=cm, vmin=vmin, vmax=vmax)
            cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
            cb.set_label(direction)
            for i in range(M):
                for j in range(M):
                    if i == j:
                        ax.text(j, i, "—", ha="center", va="center", fontsize=fs, color="#555555")
                        continue
                    v, s = A[i, j], S[i, j]
                    if not np.isfinite(v):
                        txt = "n/a"
                    elif key == "r_mean":
                        txt = f"{v:.2f}\n±{s:.2f}"
                    else:
                        txt = f"{v:.3f}\n±{s:.3f}" if M <= 8 else f"{v:.3f}"
                    frac = (v - vmin) / (vmax - vmin) if np.isfinite(v) and vmax > vmin else 0.5
                    dark = frac < 0.55 if cmap == "viridis" else frac > 0.45
                    # an n/a cell is drawn light grey (the colour map's "bad"): dark text on it (white was unreadable)
                    colour = "#333333" if not np.isfinite(v) else ("white" if dark else "black")
                    ax.text(j, i, txt, ha="center", va="center", fontsize=fs, color=colour)
            for s0, s1, _f in _blocks(fams):
                for t0, t1, _g in _blocks(fams):
                    ax.add_patch(Rectangle((t0 - 0.5, s0 - 0.5), t1 - t0, s1 - s0, fill=False, lw=1.8,
                                           ec="black"))
            ax.set_xticks(range(M))
            ax.set_yticks(range(M))
            ticks = short_texts(names, 18)  # (model names cut alike kept apart)
            ax.set_xticklabels(ticks, rotation=40, ha="right")
            ax.set_yticklabels(ticks)
            for lab, f in zip(ax.get_xticklabels(), fams):
                lab.set_color(FAMILY_COLOURS.get(f, "black"))
            for lab, f in zip(ax.get_yticklabels(), fams):
                lab.set_color(FAMILY_COLOURS.get(f, "black"))
            ax.set_xlabel("model (colour = loss family)")
            ax.set_ylabel("model")
            ax.set_title(title)
        lines = []
        for b in res.get("blocks", []):
            r, jsd = (f"{v:.{d}f}" if np.isfinite(v) else "n/a"  # n/a, as in the cells (all-zero maps)
                      for v, d in ((float(b["r_mean"]), 3), (float(b["jsd_mean"]), 4)))
            # pairs without a value are left out of the block's mean: say how many
            left = max(int(b.get("n_pairs_undefined_r", 0)), int(b.get("n_pairs_undefined_jsd", 0)))
            left_txt = f", {left} n/a" if left and left < b["n_pairs"] else ""
            lines.append(f"{b['family_a']}–{b['family_b']}: r {r}, JSD {jsd} "
                         f"({b['n_pairs']} pair{'s' if b['n_pairs'] != 1 else ''}{left_txt})")
        legend = ", ".join(f"{f}" for f in dict.fromkeys(fams))
        caption = (f"families (label colour): {legend}.   Block means (arithmetic over model pairs): "
                   + "; ".join(lines))
        why = _undefined_reason(res)
        if why:
            caption += "   " + why
        fig.text(0.5, 0.005, wrap_text(caption, 150), ha="center", va="bottom", fontsize=7.5)
        clean_figure(fig)  # model names from maps files: control characters escaped
        fig.tight_layout(rect=(0, 0.07 + 0.02 * max(0, len(lines) - 3), 1, 1))
    return fig


def _undefined_reason(res: dict[str, Any]) -> str:
    """The caption's words for n/a cells: which models' maps are all zero or constant (no r, no JSD)."""
    n = int(res.get("n_images", 0))
    zero = res.get("n_zero_maps") or []
    const = res.get("n_constant_maps") or []
    parts = []
    for name, k_const, k_zero in zip(res["names"], const, zero):
        if k_zero:
            parts.append(f"{short_text(name, 18)}: " + (f"all {n} maps" if k_zero == n else f"{k_zero} of {n} maps")
                         + " all zero")
        elif k_const:
            parts.append(f"{short_text(name, 18)}: {k_const} of {n} maps constant")
    if not parts:
        return ""
    return ("n/a = undefined (no image where both maps vary; all-zero maps = zero gradients, a model whose "
            "output does not change with the image): " + "; ".join(parts) + ".")


def _mark_zero(ax, m) -> None:
    """Say on a panel that its map is all zero (a zero gradient), which the overlay alone cannot show."""
    if np.any(np.asarray(m) != 0):
        return
    ax.text(0.5, 0.04, "all zero\n(zero gradient)", transform=ax.transAxes, ha="center", va="bottom",
            fontsize=6.5, color="white", bbox={"boxstyle": "round,pad=0.2", "fc": "#333333", "ec": "none",
                                               "alpha": 0.85})


def _picture(ax, img) -> None:
    if img is None:
        return
    if img.ndim == 2:
        ax.imshow(img, cmap="gray", vmin=0, vmax=255, interpolation="nearest")
    else:
        ax.imshow(img, interpolation="nearest")


def _overlay(ax, img, m, alpha: float = 0.8):
    """The image in grey with the map on top, each pixel's opacity ``alpha`` × its saliency (so
    unsalient pixels show the image; :func:`_overlay_colorbar` shows the blend). Returns a mappable
    of the opaque colour map."""
    import matplotlib.pyplot as plt
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    cmap = plt.get_cmap(MAP_CMAP)
    if img is None:
        ax.imshow(m, cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
    else:
        grey = img if img.ndim == 2 else img.astype(np.float32).mean(axis=2)
        ax.imshow(grey, cmap="gray", vmin=0, vmax=255 * _DIM, interpolation="nearest")  # dimmed
        rgba = cmap(np.clip(m, 0, 1))
        rgba[..., 3] = alpha * np.clip(m, 0, 1)
        ax.imshow(rgba, interpolation="nearest")
    return ScalarMappable(norm=Normalize(0, 1), cmap=cmap)


_DIM = 1.6  # images are drawn dimmed: white shows as grey 1/_DIM, so that the map stands out


_BAR_WIDTH_IN = 0.24  # the colour bar of the maps: at least this wide (its two columns' ticks stay apart)
_BAR_MAX_IN = 6.0  # and at most this tall (from the top of the panels: a tall grid's bar stays in view)
_NB = "\xa0"  # a space where _fit_label does not break a line
_SCALE_WORDS = f"(0{_NB}={_NB}none, 1{_NB}={_NB}≥{_NB}99th{_NB}percentile)"


def _fit_label(text: str, length_pt: float, size: float, min_size: float = 6.0) -> tuple[str, float]:
    """``text`` broken into lines (at most 4) and, where that is not enough, made smaller (down to
    ``min_size`` points) so that its longest line is at most ``length_pt`` long: a colour bar's label
    no longer than its bar, whatever the figure's height (a 1-row figure has a short bar). Lines break
    at spaces, not at no-break spaces (:data:`_NB`: drawn as spaces). Measured with the font's advance
    widths (backend-independent), with 5% to spare for the drawn glyphs' extent. Returns (text with
    line breaks, font size)."""
    import textwrap

    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    measure, widths = TextToPath(), {}

    def width(line: str, fs: float) -> float:
        if (line, fs) not in widths:
            widths[(line, fs)] = measure.get_text_width_height_descent(line, FontProperties(size=fs), ismath=False)[0]
        return widths[(line, fs)]

    wraps = []  # each distinct way of breaking the text, fewest lines first
    for w in range(len(text), 9, -1):
        lines = tuple(ln.replace(_NB, " ") for ln in textwrap.wrap(text, w, break_long_words=False))
        if len(lines) > 4:
            break
        if lines not in wraps:
            wraps.append(lines)
    fs = float(size)
    while True:
        for lines in wraps:
            if max(width(ln, fs) for ln in lines) <= 0.95 * length_pt:
                return "\n".join(lines), fs
        if fs - 0.5 < min_size - 1e-9:
            return "\n".join(wraps[-1]) if wraps else text.replace(_NB, " "), fs
        fs -= 0.5


def _overlay_colorbar(fig, axes, x: float, alpha: float, over_images: bool) -> None:
    """The colour bar of :func:`_overlay`. Over images a pixel's colour is the map's blended onto
    the dimmed image with opacity ``alpha`` × saliency, so the bar shows that blend in two columns,
    over the darkest and over the brightest image pixel: the colours as seen, not the opaque
    colour map (which a weakly salient pixel never shows). Without images, the map is opaque.

    Placed at figure x ``x``, right of the panels ``axes``, as tall as they are (at most
    :data:`_BAR_MAX_IN`, from their top) and at least :data:`_BAR_WIDTH_IN` wide; its label is wrapped
    (and, on a short bar, made smaller) to be no longer than the bar (:func:`_fit_label`)."""
    import matplotlib.pyplot as plt
    from matplotlib.font_manager import FontProperties

    W, H = fig.get_size_inches()
    boxes = []
    for ax in np.ravel(axes):
        ax.apply_aspect()  # the picture's own box (square), not its slot
        boxes.append(ax.get_position())
    y0, y1 = min(b.y0 for b in boxes), max(b.y1 for b in boxes)
    height = min(y1 - y0, _BAR_MAX_IN / H)
    cax = fig.add_axes((x, y1 - height, max(0.03, _BAR_WIDTH_IN / W), height))
    s = np.linspace(0.0, 1.0, 256)
    top = plt.get_cmap(MAP_CMAP)(s)[:, :3]
    if over_images:
        cols = []
        for base in (0.0, 1.0 / _DIM):
            a = (alpha * s)[:, None]
            cols.append(a * top + (1.0 - a) * base)
        bar = np.stack(cols, axis=1)
        cax.set_xticks([0, 1], ["dark", "bright"], fontsize=6, rotation=90)
        cax.set_xlabel("image pixel", fontsize=6)
        label = f"saliency {_SCALE_WORDS}, as{_NB}blended over the{_NB}image"
    else:
        bar = top[:, None, :]
        cax.set_xticks([])
        label = f"saliency {_SCALE_WORDS}"
    cax.imshow(bar, origin="lower", aspect="auto", extent=(-0.5, bar.shape[1] - 0.5, 0, 1),
               interpolation="nearest")
    cax.yaxis.tick_right()
    cax.yaxis.set_label_position("right")
    size = FontProperties(size=plt.rcParams["axes.labelsize"]).get_size_in_points()
    text, fs = _fit_label(label, height * H * 72.0, size)
    cax.set_ylabel(text, fontsize=fs)


def overlay_grid(items, *, names: Sequence[str] | None = None, families: Sequence[str] | None = None,
                 n_images: int = 6, alpha: float = 0.8):
    """Image × model grid (Kobs et al. Fig. 2): each row an image, then each model's map over it.

    ``items``: :class:`~embedscope.store.saliency.SaliencyMaps` of the same images in the same
    order (matched by path). The first ``n_images`` images are drawn. Each column is titled by its
    model's name and loss family: ``families``, else each file's as ``embedscope saliency-agreement --grid``
    names it (:func:`~embedscope.families.family_of_maps`: the recorded ``family``, else that of its
    recorded ``checkpoint_config``, else of its ``loss``, else ``other``).
    """
    import matplotlib.pyplot as plt

    from embedscope.viz.figures import PAPER_RC

    items = list(items)
    names = list(names) if names is not None else [sm.name for sm in items]
    families = list(families) if families is not None else [family_of_maps(sm.attrs) for sm in items]
    first = items[0]
    n = min(int(n_images), first.n)
    has_img = first.images is not None
    cols = len(items) + (1 if has_img else 0)
    size = 1.55
    with plt.rc_context(PAPER_RC):
        fig, axes = plt.subplots(n, cols, figsize=(size * cols + 0.9, size * n + 0.7), squeeze=False)
        # class names cut to 16 characters, those cut alike kept apart where they differ (short_texts)
        cut = _cut_names([first.class_names[first.labels[r]] for r in range(n)], 16)
        for r in range(n):
            img = first.images[r] if has_img else None
            c0 = 0
            if has_img:
                _picture(axes[r, 0], img)
                c0 = 1
            for k, sm in enumerate(items):
                _overlay(axes[r, c0 + k], img, sm.maps[r].astype(np.float32), alpha)
                _mark_zero(axes[r, c0 + k], sm.maps[r])
            label = f"{cut[str(first.class_names[first.labels[r]])]}\n{_short(first.paths[r], 16)}"
            axes[r, 0].set_ylabel(label, fontsize=7)
        if has_img:
            axes[0, 0].set_title("image", fontsize=8)
        for k, nm in enumerate(short_texts(names, 20)):
            fam = f"\n({families[k]})" if families and families[k] else ""
            axes[0, k + (1 if has_img else 0)].set_title(nm + fam, fontsize=8,
                                                        color=FAMILY_COLOURS.get(families[k], "black")
                                                        if families else "black")
        for ax in axes.ravel():
            ax.set_xticks([])
            ax.set_yticks([])
        clean_figure(fig)  # model and class names, paths from maps files: control characters escaped
        fig.tight_layout(rect=(0, 0, 0.9, 1))
        _overlay_colorbar(fig, axes, 0.915, alpha, has_img)
    return fig


def _cut_names(names, n: int) -> dict[str, str]:
    """Each distinct name -> its text cut to ``n`` characters, names cut alike kept apart
    (:func:`~embedscope.viz.style.short_texts`)."""
    distinct = list(dict.fromkeys(str(v) for v in names))
    return dict(zip(distinct, short_texts(distinct, n)))


def pairs_figure(sm, *, n_pairs: int = 6, alpha: float = 0.8):
    """Query and its nearest retrieval side by side, each with the saliency of their distance
    (``embedscope saliency --pairs``): columns query, query map, retrieval, retrieval map."""
    import matplotlib.pyplot as plt

    from embedscope.viz.figures import PAPER_RC
    from embedscope.viz.neighbours import fit_height

    r = sm.retrieval
    n = min(int(n_pairs), sm.n)
    size = 1.6
    dist = str(sm.attrs.get("distance", "distance"))
    with plt.rc_context(PAPER_RC):
        fig, axes = plt.subplots(n, 4, figsize=(size * 4 + 1.6, size * n + 0.8), squeeze=False)
        cut = _cut_names([sm.class_names[sm.labels[k]] for k in range(n)]
                         + [sm.class_names[r["labels"][k]] for k in range(n)], 16)
        for k in range(n):
            qi = sm.images[k] if sm.images is not None else None
            ri = r["images"][k] if r.get("images") is not None else None
            _picture(axes[k, 0], qi)
            _overlay(axes[k, 1], qi, sm.maps[k].astype(np.float32), alpha)
            _mark_zero(axes[k, 1], sm.maps[k])
            _picture(axes[k, 2], ri)
            _overlay(axes[k, 3], ri, r["maps"][k].astype(np.float32), alpha)
            _mark_zero(axes[k, 3], r["maps"][k])
            cq = cut[str(sm.class_names[sm.labels[k]])]
            cr = cut[str(sm.class_names[r["labels"][k]])]
            same = int(sm.labels[k]) == int(r["labels"][k])  # by label: shortened names may coincide
            axes[k, 0].set_ylabel(f"{cq}\n{_short(sm.paths[k], 16)}", fontsize=7)
            axes[k, 2].set_ylabel(f"{cr}{'' if same else ' (other class)'}\n{_short(r['paths'][k], 16)}\n"
                                  f"{dist} {float(r['distance'][k]):.3f}", fontsize=7,
                                  color=SAME_CLASS_COLOR if same else OTHER_CLASS_COLOR)
        for j, t in enumerate(("query", "saliency (query)", "nearest retrieval", "saliency (retrieval)")):
            axes[0, j].set_title(t, fontsize=8)
        for ax in axes.ravel():
            ax.set_xticks([])
            ax.set_yticks([])
        what = DISTANCE_WORDS.get(dist, dist)
        fig.suptitle(f"{sm.name}: why are these images near each other? (saliency of their {what})", fontsize=9)
        clean_figure(fig)
        # rows as tall as the square pictures are wide: taller rows left the pictures in the middle of
        # their slots, the column titles over them, and a band of empty canvas under the title
        fit_height(fig, axes, right=0.88, w_pad=3.0)
        _overlay_colorbar(fig, axes, 0.895, alpha, sm.images is not None)
    return fig


__all__ = ["agreement_heatmaps", "overlay_grid", "pairs_figure"]
