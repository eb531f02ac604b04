"""Query images and their top-k retrievals, framed green (same class) or red (another class).

Roth et al.'s code writes such a figure (``sample_recoveries.png``); here it is a command
(``embedscope neighbours``). :func:`embedscope.analyses.neighbour_examples` picks the queries and
runs the exact k-nearest-neighbour search (docs/methods.md §1);
:func:`embedscope.data.thumbnails.load_thumbnails` reads the pictures (the 8 x 8 digits from memory,
image data sets from their root folder); :func:`draw_neighbours` only draws, and
:func:`embedscope.analyses.neighbours_figure` does all three as one call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from embedscope.viz.style import OTHER_CLASS_COLOR, SAME_CLASS_COLOR

if TYPE_CHECKING:
    from embedscope.analyses.neighbours import NeighbourExamples

# colour-blind-safe (viz/style.py), and a mark in each caption, so colour is not the only cue
RIGHT = SAME_CLASS_COLOR  # bluish green: the retrieval has the query's class
WRONG = OTHER_CLASS_COLOR  # vermillion: another class
RIGHT_MARK, WRONG_MARK = "✓", "✗"
QUERY = "#404040"
#: the most characters of a class name in a caption (7 pt text: about 0.9 inch, within a 1.25 inch cell)
CAPTION_CHARS = 16


#: the significant digits a similarity is told apart to (:func:`similarity_digits`' cap): float32 values
#: hold about 7 (a 24-bit significand); float64 ones about 15, less the last 3, which the rounding of the
#: dot products behind a similarity takes (a vector's cosine with its own scaled copy comes out
#: 0.9999999999999996 at D = 64, and further from 1 as D grows: a duplicate would read as none)
SIGNIFICANT_DIGITS = {"float32": 7, "float64": 12}


def similarity_digits(sim: Any, lo: int = 2, hi: int | None = None) -> int:
    """Decimals for the similarities of a row of retrievals: the fewest (``lo`` or more) at which
    the different values of each row stay different (an untrained network's cosines of 0.9991 and
    0.9987 both read "1.00" at two decimals, as if tied; near-duplicate images' 0.999521, 0.999523
    and 0.999524 all read "0.99952" at five), and at which no value reads as one of the bounds 1, 0
    and -1 that it is not (a lone retrieval's cosine 0.9999, or a distance of 0.0014, read "cos 1.00"
    or "d 0.00", as if the retrieval were the query's duplicate).

    Values are told apart up to the precision they hold (:data:`SIGNIFICANT_DIGITS`: 7 significant
    digits for float32 arrays, 12 for float64, counted at the largest magnitude): values that differ
    only beyond it are the same value (printed alike; one that differs from a bound only there reads
    as the bound: a duplicate's cosine 0.9999999999999998 is "1.00"). ``hi``, when given, caps the
    decimals further (``hi`` itself when the values need more). Equal values always print equal.
    An empty array (no retrievals, or no queries) has nothing to tell apart: ``lo``."""
    arr = np.asarray(sim)
    if arr.size == 0:  # (a reshape of a zero-length last axis to (-1, 0) cannot infer the rows)
        return lo
    narrow = arr.dtype.kind == "f" and arr.dtype.itemsize <= 4  # (float16 as float32; integers as float64)
    sig = SIGNIFICANT_DIGITS["float32" if narrow else "float64"]
    sim = arr.astype(np.float64)
    sim = sim.reshape(-1, sim.shape[-1]) if sim.ndim else sim.reshape(1, 1)
    rows = [row[np.isfinite(row)] for row in sim]
    top = max((float(np.max(np.abs(r))) for r in rows if r.size), default=0.0)
    held_digits = max(lo, sig - 1 - int(np.floor(np.log10(top))) if top > 0 else lo)
    cap = held_digits if hi is None else max(lo, min(held_digits, hi))

    def texts(row, d):  # as the figure prints them (a sign flipped alike does not change which are equal)
        return [f"{v:.{d}f}" for v in row.tolist()]

    bounds = (-1.0, 0.0, 1.0)
    held = [texts(row, held_digits) for row in rows]  # the values as far as they are known
    for d in range(lo, cap + 1):
        ok = True
        for row, full in zip(rows, held):
            shown = texts(row, d)
            if (len(set(shown)) < len(set(full))
                    or any(float(s) in bounds and float(f) not in bounds for s, f in zip(shown, full))):
                ok = False
                break
        if ok:
            return d
    return cap


def draw_neighbours(ex: NeighbourExamples, query_images: Sequence[Any], ref_images: Sequence[Sequence[Any]],
                    *, title: str | None = None):
    """One row per query: the query (grey frame), then its retrievals in rank order, each framed
    green (same class as the query) or red (another class) and captioned with class and similarity
    (cosine: ``cos``; Euclidean: the distance ``d``, smallest first).
    Returns the matplotlib figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from embedscope.text import figure_text
    from embedscope.viz.style import clean_figure, short_texts

    n, k = ex.correct.shape
    cell = 1.25
    height = (cell + 0.45) * n + 1.1  # each row: the picture and its two-line caption; plus title and legend
    fig, axes = plt.subplots(n, k + 1, figsize=(cell * (k + 1) + 0.3, height), squeeze=False)
    # the Euclidean ranking's value is the distance d itself (the search's similarity is −d: the
    # caption read "-d -0.1650", a double minus for d = 0.165)
    sim_name, sign = ("cos", 1.0) if ex.metric == "cosine" else ("d", -1.0)
    digits = similarity_digits(ex.similarity)

    def show(ax, img, colour, caption, width):
        arr = np.asarray(img)
        # a white margin keeps the frame visible on pictures of the frame's own colour; a picture
        # that is not square gets white bands in its short direction, so that every frame is square:
        # framed tight, a wide photo's frame, title and caption sat lower than a tall one's in its row
        h, w = arr.shape[:2]
        pad = max(1, int(round(0.07 * max(h, w))))
        side = max(h, w) + 2 * pad
        ph, pw = side - h, side - w
        bands = ((ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2))
        if arr.ndim == 2:
            arr = np.pad(arr.astype(np.float32), bands, constant_values=0.0)
            ax.imshow(arr, cmap="gray_r", interpolation="nearest", vmin=0, vmax=max(float(arr.max()), 1e-9))
        else:
            white = 255 if np.issubdtype(arr.dtype, np.integer) else 1.0  # float pictures are in [0, 1]
            arr = np.pad(arr, (*bands, (0, 0)), constant_values=white)
            ax.imshow(arr, interpolation="none")  # (the PDF keeps the thumbnail's own pixels, the viewer
            # scales them: resampled at 200 dpi they cost 1.6 s and twice the bytes of PNG and PDF)
        ax.set_xticks([])
        ax.set_yticks([])
        for s in ax.spines.values():
            s.set_edgecolor(colour)
            s.set_linewidth(width)
        ax.set_xlabel(caption, fontsize=7, labelpad=2)

    # a class name cut to CAPTION_CHARS keeps a caption within its picture's width; names cut alike
    # ("Chevrole…ab 2012" for two Silverado models) are kept apart where they differ (short_texts)
    shown = list(dict.fromkeys(str(v) for v in [*np.asarray(ex.query_labels[:n]).ravel(),
                                                 *np.asarray(ex.ref_labels[:n, :k]).ravel()]))
    cut = dict(zip(shown, short_texts(shown, CAPTION_CHARS)))
    for r in range(n):
        # two lines a caption: class, then similarity (on one line, 20 retrievals' captions ran into
        # each other)
        show(axes[r, 0], query_images[r], QUERY, f"query\n{cut[str(ex.query_labels[r])]}", 2.0)
        for j in range(k):
            ok = bool(ex.correct[r, j])
            show(axes[r, j + 1], ref_images[r][j], RIGHT if ok else WRONG,
                 f"{RIGHT_MARK if ok else WRONG_MARK} {cut[str(ex.ref_labels[r, j])]}\n"
                 f"{sim_name} {sign * ex.similarity[r, j] + 0.0:.{digits}f}", 4.0)
    axes[0, 0].set_title("query", fontsize=8)
    for j in range(k):
        axes[0, j + 1].set_title(f"rank {j + 1}", fontsize=8)
    hit, n_lone = ex.hit_rate()
    where = ("queries among all rows" if ex.query_split == ex.reference_split == "all"  # (not "all queries in all")
             else f"{ex.query_split} queries in {ex.reference_split}")
    head = title or f"top-{k} retrieval{'' if k == 1 else 's'}: {where} ({ex.metric})"  # ("top-1 retrievals")
    which = "this query" if n == 1 else f"these {n} queries"
    # how the queries were chosen, so that the picture can be made again
    seed = getattr(ex, "seed", None)
    how = f" (drawn at random, seed {seed})" if seed is not None else (
        " (given by path)" if getattr(ex, "selection", "") else "")
    if n_lone:  # lone queries (no same-class reference) left out, as evaluate's default
        lone = f"{n_lone} lone quer{'y' if n_lone == 1 else 'ies'}"  # evaluate's words and rule
        score = ("undefined (every query is lone: no image of its class among the references)" if hit is None
                 else f"{hit:.2f} ({lone} left out, as evaluate does)")
    else:
        score = f"{hit:.2f}"
    fig.suptitle(f"{figure_text(head)}\nR@1 of {which}{how}: {score}", fontsize=9, y=0.995)
    fig.legend(handles=[Patch(facecolor="none", edgecolor=RIGHT, linewidth=3, label=f"{RIGHT_MARK} same class"),
                        Patch(facecolor="none", edgecolor=WRONG, linewidth=3, label=f"{WRONG_MARK} other class")],
               loc="lower center", ncol=2, fontsize=8, frameon=False, bbox_to_anchor=(0.5, 0.0))
    clean_figure(fig)
    fit_height(fig, axes, bottom=0.35)
    return fig


def fit_height(fig, axes, *, bottom: float = 0.0, right: float = 1.0, w_pad: float | None = None) -> None:
    """Set ``fig``'s height so that each row slot of the grid ``axes`` is as tall as it is wide (the
    pictures are square: a taller or wider slot leaves bands of empty canvas), with tight_layout's
    margins, ``bottom`` inches kept free below the grid (the legend), the grid within the left
    ``right`` share of the width (a colour bar beside it) and ``w_pad`` between the columns.

    Direct, two layouts whatever the grid: the margins, the gaps between rows (captions, titles) and
    the slots' width are lengths in inches that the height does not change, so one layout measures
    them and the height follows (it was a loop of up to four layouts, each over every picture,
    stopped when the slack fell below 0.02 inch; it rarely did, and its last resize had no layout).
    """
    n = axes.shape[0]
    # measured with every picture filling its slot: a picture kept square inside a slot of another
    # shape sits in its middle, with its caption, so the gaps measured would move with the slack
    aspects = [ax.get_aspect() for ax in axes.flat]
    for ax in axes.flat:
        ax.set_aspect("auto")
    W, H = fig.get_size_inches()
    fig.tight_layout(rect=(0, bottom / H, right, 1), w_pad=w_pad)
    box = axes[0, 0].get_position(original=True)  # a slot (the picture is fitted inside it)
    fixed = H - n * box.height * H  # the margins and the gaps between the rows, in inches
    H_new = max(fixed + n * box.width * W, 1.0)
    if abs(H_new - H) >= 1e-3:
        fig.set_size_inches(W, H_new)
        fig.tight_layout(rect=(0, bottom / H_new, right, 1), w_pad=w_pad)
    for ax, aspect in zip(axes.flat, aspects):  # (a picture that is not square keeps its shape)
        ax.set_aspect(aspect)
