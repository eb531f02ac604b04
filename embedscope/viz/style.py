"""One figure style for every embedscope figure: paper settings, colours, legends, layout.

* :data:`PAPER_RC` -- matplotlib settings for paper-readable figures (9 pt text);
* :class:`ClassPalette` / :func:`class_colors` -- the one class → colour map, keyed by class
  *name* and built from the full class list of a file (not from the classes present in a subset;
  in natural order of the names, not in the file's order),
  so a class keeps its colour from figure to figure (the t-SNE maps: one split, joint, yoked; the
  other figures do not colour by class: neighbours and saliency name the class in words, the
  scatter colours by side of the diagonal). Pass one palette to several figures to tie them
  together explicitly;
* fixed colours for splits (:data:`TRAIN_COLOR`, :data:`TEST_COLOR`), for the two sides of the
  same-vs-different diagonal (:data:`BELOW_COLOR`, :data:`ABOVE_COLOR`), for a retrieval of the
  query's class or another (:data:`SAME_CLASS_COLOR`, :data:`OTHER_CLASS_COLOR`); :func:`series_colors`
  for one curve per model or file;
* :func:`marker_size`, :func:`class_legend`, :func:`legend_height`, :func:`settings_text`,
  :func:`finish_layout` -- shared drawing helpers;
* :func:`figure_text` / :func:`clean_figure` -- the one sanitizer of figure text: class names,
  model, objective and property names and paths read from files may hold control characters (an
  ANSI escape); they are drawn escaped (``\\x1b[31m``, as on the terminal: :func:`embedscope.text.safe`)
  instead of as a missing glyph with a warning that prints the raw byte. Every figure function runs
  :func:`clean_figure` before its layout, and :func:`~embedscope.viz.figures.save_figure` before saving.

Nothing here computes a measure.
"""

from __future__ import annotations

import math
import os
import threading
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.names import natural_key  # noqa: F401 - (re-exported: the palette's order)
from embedscope.text import figure_text, quoted

PAPER_RC = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "figure.dpi": 100,
    "savefig.dpi": 200,
    "savefig.bbox": "tight",
}

# train / test where a panel colours by split (the joint t-SNE's third panel): colours that no class
# takes from tab10 (black; Okabe & Ito's orange, lighter and yellower than tab10's), so that a reader
# who has just read the class legend does not take the split colours for two classes (red and blue
# were classes 3 and 0); they also differ in lightness, which survives colour blindness and grey print
TRAIN_COLOR = "#000000"  # black
TEST_COLOR = "#e69f00"  # orange
SPLIT_COLORS = {"train": TRAIN_COLOR, "test": TEST_COLOR, "val": "#2ca02c", "query": "#9467bd",
                "gallery": "#8c564b"}
LINE_STYLES = ("-", "--", "-.", ":")
# a retrieval of the query's class / of another class (neighbours frames, saliency pairs): Okabe &
# Ito's bluish green and vermillion, told apart with red-green colour blindness (a #1a9641 /
# #d7191c pair is one brown to a deuteranope); figures add a mark or words, so colour is not the only cue
SAME_CLASS_COLOR = "#009e73"
OTHER_CLASS_COLOR = "#d55e00"
# the same-vs-different scatter: below the diagonal (nearer its own class: a 1-NN query would be
# right) / above it (nearer another class), the same meaning and colours as the neighbours frames;
# no class's colour (they were tab10's cyan and orange, classes 9 and 1 of every t-SNE figure)
BELOW_COLOR = SAME_CLASS_COLOR  # bluish green
ABOVE_COLOR = OTHER_CLASS_COLOR  # vermillion

RGBA = tuple


def palette_colors(n: int) -> list:
    """``n`` distinguishable RGBA colours: tab10 up to 10, tab20 up to 20, then
    :func:`distinct_colors` (tab10 followed by the colours farthest, in CIELAB, from all before
    them: a 24-class set gets 24 colours that differ in hue *and* lightness)."""
    import matplotlib

    if n <= 10:
        return [tuple(matplotlib.colormaps["tab10"](i)) for i in range(n)]
    if n <= 20:
        return [tuple(matplotlib.colormaps["tab20"](i)) for i in range(n)]
    return distinct_colors(n)


def _lab(rgb: np.ndarray) -> np.ndarray:
    """CIELAB (D65) of sRGB rows in [0, 1]."""
    c = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = c @ np.array([[0.4124, 0.2126, 0.0193], [0.3576, 0.7152, 0.1192], [0.1805, 0.0722, 0.9505]])
    xyz /= np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], axis=1)


_DISTINCT: list = []  # the sequence's colours so far (RGBA)
_GREEDY: dict = {}     # its candidates, and each one's distance to the nearest colour chosen
_GREEDY_LOCK = threading.Lock()  # (threads drawing at once extend it one at a time)


def distinct_colors(n: int) -> list:
    """``n`` RGBA colours, each as far (CIELAB distance) from all the earlier ones as possible:
    tab10 first, then greedily the farthest of the sRGB colours of lightness 35–82 and chroma ≥ 25
    (visible on white, not grey). The list is one fixed sequence (colour i does not depend on
    ``n``), made as far as it is asked for (a study's handful of colours: a few steps, not the
    0.12 s of all of them); past its ~2,000 colours it repeats."""
    with _GREEDY_LOCK:
        _extend_distinct(n)
    return [_DISTINCT[i % len(_DISTINCT)] for i in range(n)]


def _extend_distinct(n: int) -> None:
    """Make :func:`distinct_colors`'s sequence at least ``n`` long (or whole)."""
    if not _GREEDY:
        import matplotlib

        g = np.linspace(0.0, 1.0, 15)
        cand = np.stack(np.meshgrid(g, g, g, indexing="ij"), axis=-1).reshape(-1, 3)
        lab = _lab(cand)
        keep = (lab[:, 0] >= 35) & (lab[:, 0] <= 82) & (np.hypot(lab[:, 1], lab[:, 2]) >= 25)
        cand, lab = cand[keep], lab[keep]
        seed = np.array([matplotlib.colormaps["tab10"](i)[:3] for i in range(10)])
        d = np.min(np.linalg.norm(lab[:, None, :] - _lab(seed)[None, :, :], axis=2), axis=1)
        _DISTINCT.extend((float(r), float(g_), float(b), 1.0) for r, g_, b in seed)
        _GREEDY.update(cand=cand, lab=lab, d=d, done=False)
    st = _GREEDY
    while len(_DISTINCT) < n and not st["done"]:
        j = int(np.argmax(st["d"]))
        if st["d"][j] <= 0:  # every candidate chosen
            st["done"] = True
            break
        r, g_, b = st["cand"][j]
        _DISTINCT.append((float(r), float(g_), float(b), 1.0))
        st["d"] = np.minimum(st["d"], np.linalg.norm(st["lab"] - st["lab"][j], axis=1))


def series_colors(n: int) -> list:
    """Colours for ``n`` curves (one per model or file): matplotlib's default cycle (tab10), repeated."""
    import matplotlib

    return [tuple(matplotlib.colormaps["tab10"](i % 10)) for i in range(n)]


class ClassPalette(Mapping):
    """The class → colour map of every figure, keyed by class name.

    Built from the *full* class list of a file (e.g. ``EmbeddingSet.class_names``), whatever
    subset a figure shows: the classes in natural order (:func:`natural_key`: digit runs as
    numbers) take :func:`palette_colors` ``(len(class_names))`` in turn. The colours depend on the
    set of names, not on the order a file lists them in: two files naming the same classes in
    different orders colour a class alike in separate figures. ``palette["cat"]`` is an RGBA
    tuple; ``names`` (the legend's order) is the natural order.

    >>> p = ClassPalette(["cat", "dog", "owl"])
    >>> p["dog"] == ClassPalette(["owl", "dog", "cat"])["dog"] and p["dog"] != p["cat"]
    True
    """

    def __init__(self, class_names: Iterable[Any]):
        names = [str(c) for c in class_names]
        if len(set(names)) != len(names):
            dup = sorted({c for c in names if names.count(c) > 1})[:3]
            raise EmbedscopeError(f"class names must be unique for a colour map, repeated: {', '.join(dup)}")
        names.sort(key=natural_key)
        self.names: tuple[str, ...] = tuple(names)
        self._colors = dict(zip(names, palette_colors(len(names))))

    @classmethod
    def from_labels(cls, labels: Any, class_names: Sequence[Any] | None = None) -> "ClassPalette":
        """The palette of a file's classes: ``class_names`` when given (label i is
        ``class_names[i]``); else non-negative integer labels name themselves ``"0"``..``"max"``
        (so label 7 keeps its colour in any subset); else the sorted distinct labels."""
        if class_names is not None:
            return cls(class_names)
        labels = np.asarray(labels)
        if labels.size and np.issubdtype(labels.dtype, np.integer) and labels.min() >= 0:
            return cls(range(int(labels.max()) + 1))
        return cls(sorted({str(v) for v in labels.tolist()}))

    def __getitem__(self, name: Any) -> RGBA:
        try:
            return self._colors[str(name)]
        except KeyError:
            raise EmbedscopeError(f"class {quoted(name)} is not in the colour map") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return f"ClassPalette({len(self)} classes)"

    def colors(self, names: Iterable[Any]) -> np.ndarray:
        """RGBA rows (n, 4) for a sequence of class names."""
        cols = [self[n] for n in names]
        return np.array(cols, dtype=float).reshape(-1, 4)

    def handles(self, names: Iterable[Any], *, markersize: float = 5) -> list:
        """Legend handles (a dot per class) for ``names``, in the palette's order; each label is
        :func:`short_text` of the class name (a long name does not widen the figure)."""
        from matplotlib.lines import Line2D

        wanted = {str(n) for n in names}
        shown = [n for n in self.names if n in wanted]
        return [Line2D([], [], marker="o", linestyle="", markersize=markersize, color=self[n], label=t)
                for n, t in zip(shown, short_texts(shown, LEGEND_CHARS))]


def class_colors(class_names: Iterable[Any]) -> dict:
    """``{class name: RGBA}`` for the full class list (see :class:`ClassPalette`)."""
    return dict(ClassPalette(class_names).items())


def label_names(labels: Any, class_names: Sequence[Any] | None = None) -> np.ndarray:
    """The class name of every label: ``class_names[label]`` when given, else ``str(label)``."""
    labels = np.asarray(labels)
    if class_names is None:
        return np.array([str(v) for v in labels.tolist()], dtype=object)
    try:
        return np.array([str(class_names[int(v)]) for v in labels.tolist()], dtype=object)
    except (IndexError, ValueError, TypeError):
        raise EmbedscopeError(f"labels must index the {len(class_names)} class names") from None


#: the longest legend label, panel title or tick label drawn from a name (characters); longer
#: names are cut in the middle (:func:`short_text`)
LEGEND_CHARS = 28
TITLE_CHARS = 36
TICK_CHARS = 28
#: the most classes a figure's class legend lists; with more, a note says how many were left out
MAX_LEGEND_ENTRIES = 40


def short_text(s: object, n: int = LEGEND_CHARS) -> str:
    """``s`` with control characters escaped (:func:`embedscope.text.safe`), cut to at most ``n``
    characters by an ellipsis in the middle (``"Black_footed_…atross_0042"``): the start and the
    end of a name stay readable, so names that
    differ only at one end stay distinct. A line break is escaped as ``\\n``, as on the terminal
    (as a space, a class "b\\nc" could not be told from a class "b c").

    A character the figure's fonts cannot draw is counted as the escape it is drawn as
    (:func:`drawable_text`: ``鳥`` is drawn ``\\u9ce5``, six characters), and kept whole or left
    out whole, as is an escaped control character (``\\x1b``): counted as one, a cut name of such
    characters was drawn six times as wide as its room (``neighbours`` captions ran into the next
    picture's).

    >>> short_text("a_very_long_class_name_number_17", 16)
    'a_very_l…mber_17'
    """
    from embedscope.text import safe

    raw = str(s)
    t = safe(raw)
    if t == raw and t.isascii():
        if len(t) <= n:
            return t
        head = n // 2
        return t[:head] + "…" + t[len(t) - (n - 1 - head):]
    units = [drawable_text(safe(ch)) for ch in raw]  # what each character is drawn as
    if sum(len(u) for u in units) <= n:
        return "".join(units)
    room = n - 1
    head, used = [], 0
    for u in units:
        if used + len(u) > n // 2:
            break
        head.append(u)
        used += len(u)
    tail: list = []
    for u in reversed(units[len(head):]):
        if used + len(u) > room:
            break
        tail.append(u)
        used += len(u)
    return "".join(head) + "…" + "".join(reversed(tail))


def short_texts(names: Sequence[Any], n: int = LEGEND_CHARS) -> list[str]:
    """:func:`short_text` of each of ``names``, kept apart where cutting would make two alike: names that
    differ only inside what the cut removes (``Species_number_7_with_a_long_latin_name`` and ``..._8_...``
    both became ``Species_number…ng_latin_name``, forty legend entries alike) show the part where they
    differ, between ellipses (``Spec…ber_7_wit…_name``); names that would still be alike get ``#k``."""
    out = [short_text(v, n) for v in names]
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(out):
        groups.setdefault(t, []).append(i)
    for idx in groups.values():
        if len(idx) < 2:
            continue
        full = [short_text(names[i], 1 << 30) for i in idx]  # escaped, whole
        if len(set(full)) < len(full):
            continue  # the same name twice: nothing tells them apart
        p = len(os.path.commonprefix(full))
        q = len(os.path.commonprefix([f[::-1] for f in full]))
        q = min(q, min(len(f) for f in full) - p)  # (the suffix may not eat into the prefix)
        for i, f in zip(idx, full):
            start = max(0, p - 4)  # a little of the common part on each side of the difference
            end = min(len(f), len(f) - q + 4)
            room = n - 2 - 4 - 5  # the ellipses, the name's start (4) and end (5)
            core = f[start:end]
            if len(core) > room:
                core = core[:room]
            out[i] = (f[:4] + "…" if start > 4 else f[:start]) + core + ("…" + f[-5:] if end < len(f) - 5
                                                                         else f[end:])
    seen: dict[str, int] = {}
    for t in out:  # (still alike: numbered)
        seen[t] = seen.get(t, 0) + 1
    count: dict[str, int] = {}
    for i, t in enumerate(out):
        if seen[t] > 1:  # numbered by the text as cut (two texts cut to the same stem were both #1 and #2)
            cut = short_text(t, n - 4)
            count[cut] = count.get(cut, 0) + 1
            out[i] = f"{cut} #{count[cut]}"
    if len(set(out)) < len(out):  # (a numbered label equal to another one: every such label by its position)
        seen = {}
        for t in out:
            seen[t] = seen.get(t, 0) + 1
        for i, t in enumerate(out):
            if seen[t] > 1:
                tag = f" #{i + 1}"
                out[i] = short_text(t.rsplit(" #", 1)[0], max(n - len(tag), 2)) + tag
    return out


def legend_columns(labels: Sequence[str], width: float, *, max_cols: int = 10) -> int:
    """How many columns of ``labels`` fit side by side in ``width`` inches (8 pt legend text:
    ~0.065 in per character, plus the marker and the gaps)."""
    if not labels:
        return 1
    col_w = 0.34 + 0.065 * max(len(str(t)) for t in labels)
    return int(max(1, min(len(labels), max_cols, width // col_w)))


def legend_note(n_classes: int, max_entries: int = MAX_LEGEND_ENTRIES) -> str:
    """The note of a figure whose class legend was left out (too many classes), else ``""``."""
    if n_classes <= max_entries:
        return ""
    return f"{n_classes:,} classes: too many for a legend (colours by class; the class of each point is in the CSV)"


def marker_size(n: int, *, lo: float = 1.0, hi: float = 14.0, area: float = 4000.0) -> float:
    """Scatter marker area for ``n`` points: ``area / n`` clipped to [lo, hi] (points²)."""
    return float(np.clip(area / max(n, 1), lo, hi))


def class_legend(fig, names: Iterable[Any], palette: ClassPalette, *, max_entries: int = MAX_LEGEND_ENTRIES,
                 title: str = "class", ncol: int | None = None) -> None:
    """A class legend centred below the panels, in as many columns as fit the figure's width
    (:func:`legend_columns`; nothing when more than ``max_entries`` classes, see
    :func:`legend_note`); :func:`finish_layout` places it."""
    handles = palette.handles(names)
    if not handles or len(handles) > max_entries:
        return
    ncol = ncol or legend_columns([h.get_label() for h in handles], fig.get_figwidth())
    # labels given explicitly: matplotlib leaves out a handle whose own label starts with "_"
    fig.legend(handles, [h.get_label() for h in handles], loc="lower center", ncol=ncol, frameon=False,
               title=title, bbox_to_anchor=(0.5, 0.0), handletextpad=0.2, columnspacing=0.8, title_fontsize=8)


def legend_height(n_classes: int, max_entries: int = MAX_LEGEND_ENTRIES, *, ncol: int = 10) -> float:
    """Inches below the panels for :func:`class_legend` (``ncol`` entries per row, plus its title)."""
    if n_classes > max_entries or n_classes == 0:
        return 0.0
    return 0.34 + 0.18 * math.ceil(n_classes / max(ncol, 1))


def class_legend_layout(names: Sequence[Any], palette: ClassPalette, width: float,
                        max_entries: int = MAX_LEGEND_ENTRIES) -> tuple[int, float]:
    """(columns, height in inches) of the :func:`class_legend` of ``names`` in a figure ``width``
    inches wide: the height to leave below the panels before the figure exists."""
    labels = [h.get_label() for h in palette.handles(names)] if len(names) <= max_entries else []
    ncol = legend_columns(labels, width)
    return ncol, legend_height(len(labels), max_entries, ncol=ncol)


def settings_text(info: Mapping | None, keys: Sequence[str]) -> str:
    """``"k=v, ..."`` of the settings in ``info`` (floats to 4 significant digits)."""
    if not info:
        return ""
    parts = []
    for k in keys:
        if k in info:
            v = info[k]
            asked = info.get(f"{k}_requested")  # a t-SNE perplexity capped at (N - 1)/3 says so
            capped = f" (capped: {asked:.4g} asked)" if isinstance(v, float) and isinstance(asked, (int, float)) \
                and v < asked else ""
            parts.append(f"{k}={v:.4g}{capped}" if isinstance(v, float) else f"{k}={v}")
    return ", ".join(parts)


def clean_figure(fig) -> Any:
    """Make every text of ``fig`` printable (:func:`figure_text`: control characters escaped, line
    breaks kept) -> ``fig``.

    Covers titles, axis labels, annotations, legend entries and titles, the figure's texts and the
    fixed tick labels (``set_xticklabels`` / ``set_yticks(ticks, labels)``). Run it before the first
    layout or draw: matplotlib warns, with the raw byte, about a control character when it measures
    the text. Idempotent (an escaped text is printable).

    Dollar signs are shown as they are: a class or file name such as ``a$b$`` would otherwise be
    typeset as mathematics (or, malformed, stop the drawing). Texts are drawn without mathtext
    (embedscope's own labels use Unicode: ``sₖ / Σ s``, ``x₁``); the labels of fixed or function
    tick formatters, which matplotlib re-creates at each draw, get their ``$`` escaped (``\\$``).
    """
    from matplotlib.text import Text
    from matplotlib.ticker import FixedFormatter, FuncFormatter

    ticks = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis, getattr(ax, "zaxis", None)):
            if axis is None:
                continue
            for tick in (*axis.get_major_ticks(), *axis.get_minor_ticks()):
                ticks.update((id(tick.label1), id(tick.label2)))
            for fmt in (axis.get_major_formatter(), axis.get_minor_formatter()):
                # tick labels are made from the formatter at each draw: fixed labels (set_ticklabels
                # without set_ticks) are a FixedFormatter, labels at set_ticks' positions a FuncFormatter
                if isinstance(fmt, FixedFormatter) and not getattr(fmt, "_embedscope_clean", False):
                    fmt.seq = [_tick_text(v) for v in fmt.seq]
                    fmt._embedscope_clean = True
                elif isinstance(fmt, FuncFormatter):
                    fmt.func = _printable_func(fmt.func)
    for t in fig.findobj(Text):
        s = t.get_text()
        if not s.isprintable():
            t.set_text(figure_text(s))
        if not s.isascii():
            shown = drawable_text(t.get_text(), t.get_fontproperties())
            if shown != t.get_text():
                t.set_text(shown)
        if "$" in s and id(t) not in ticks:
            t.set_parse_math(False)
    _fit_titles(fig)
    return fig


def wrap_text(s: str, width: int) -> str:
    """``s`` broken into lines of at most ``width`` characters at word boundaries."""
    import textwrap

    return "\n".join(textwrap.wrap(s, width))


#: the least number of lines a wrapped title may take; it may take more while they fill at most
#: :data:`MAX_TITLE_SHARE` of the figure's height. A longer one ends its last line with the end of its text
#: after "…" (a path keeps its file name): unbounded, a title of a few hundred characters squashed the panels
MAX_TITLE_LINES = 4
MAX_TITLE_SHARE = 0.35
#: how far (a share of the canvas's width) a panel's title may run past the canvas's side (:func:`_title_rooms`)
EDGE_SLACK = 0.04


def _title_rooms(fig, slots: bool = True, renderer=None) -> list:
    """(title, room in pixels) of the figure's title and of each panel's three titles: a centred title
    spans at most twice the distance from its centre to the nearer end of the room, a left one from the
    panel's left edge to the room's end, a right one up to its right edge. Without ``slots`` the room
    is the canvas. With ``slots`` (and the ``renderer``), the neighbouring panels of the row bound it:
    each at the nearer of the midpoint between the two panels and the edge of the neighbour's own title
    text (a gap of half an em kept), so a title may reach over a neighbour whose title is short but
    never past the middle of the gap when the neighbour's title is long too. Colour bars are not
    panels. (The canvas alone let a middle panel's wrapped title run over its neighbours' titles.)"""
    W = fig.get_figwidth() * fig.dpi
    titles = [(fig._suptitle, W)] if getattr(fig, "_suptitle", None) is not None else []
    panels = [ax for ax in fig.axes if slots and ax.get_visible() and getattr(ax, "_colorbar", None) is None]
    boxes = {ax: ax.get_position() for ax in fig.axes}
    edges: dict = {}  # panel -> (left, right) of its titles' texts, figure fraction (None: no title)

    def text_edges(ax):
        if ax not in edges:
            ext = [t.get_window_extent(renderer) for t in (ax.title, ax._left_title, ax._right_title)
                   if renderer is not None and t.get_visible() and t.get_text()]
            edges[ax] = (min(e.x0 for e in ext) / W, max(e.x1 for e in ext) / W) if ext else None
        return edges[ax]

    for ax in fig.axes:
        box = boxes[ax]
        # the canvas's edges, give or take 4% of its width: a title a few pixels past the edge widens the
        # saved image that much (bbox_inches), better than wrapping its last few characters onto a line
        lo, hi = -EDGE_SLACK, 1.0 + EDGE_SLACK
        for other in panels:
            o = boxes[other]
            if other is ax or min(box.y1, o.y1) <= max(box.y0, o.y0):  # not in this panel's row
                continue
            if o.x1 > box.x0 and o.x0 < box.x1:  # (an inset, or a panel over this one: not beside it)
                continue
            e = text_edges(other)
            if e is None:  # a neighbour without a title: nothing for a title to run into
                continue
            gap = 0.5 * ax.title.get_fontsize() * fig.dpi / 72 / W
            if o.x1 <= box.x0:
                lo = max(lo, min((o.x1 + box.x0) / 2, e[1] + gap))
            else:
                hi = min(hi, max((box.x1 + o.x0) / 2, e[0] - gap))
        cx = (box.x0 + box.x1) / 2
        titles += [(ax.title, max(box.width, 2 * min(cx - lo, hi - cx)) * W), (ax._left_title, (hi - box.x0) * W),
                   (ax._right_title, (box.x1 - lo) * W)]
    return titles


def _fit_titles(fig) -> None:
    """Wrap a figure title (``suptitle``) or panel title that does not fit at word boundaries, so that
    a long user title (``--title``) is drawn on several lines instead of widening the saved image
    (``bbox_inches="tight"``), running off its edge or over a neighbouring panel's title; at least
    :data:`MAX_TITLE_LINES` lines, more while they fill at most :data:`MAX_TITLE_SHARE` of the
    figure's height (a longer one ends with "…" and the end of its text). A title that fits is left
    as it is.

    With a layout engine (constrained or tight layout) a title fits when it is no wider than its
    slot in its row of panels (:func:`_title_rooms`), measured where the engine puts the panels (it
    runs once more here when a title may not fit by the bound on its length). Without one the panels may still move
    (``tight_layout`` after this): a title is wrapped only when wider than the canvas, to the room
    its centre leaves on the canvas, as the wrapped title will be measured again when the figure is
    saved (:func:`embedscope.viz.figures.save_figure`)."""
    import textwrap

    canvas = fig.canvas
    get_renderer = getattr(canvas, "get_renderer", None)
    if get_renderer is None:
        return
    try:
        renderer = get_renderer()
    except (AttributeError, TypeError, RuntimeError):  # a backend without a renderer before drawing
        return
    engine = fig.get_layout_engine()
    W = fig.get_figwidth() * fig.dpi

    def limit(room: float) -> float:
        return room if engine is not None else W

    todo = []  # (index in _title_rooms, the whole text, whether it was wrapped by an earlier pass)
    rooms = _title_rooms(fig, slots=engine is not None, renderer=renderer)
    for i, (t, room) in enumerate(rooms):
        # a title wrapped by an earlier pass, unless it has been given another text since
        whole, wrapped = getattr(t, "_embedscope_wrap", (None, None))
        if whole is not None and t.get_text() != wrapped:
            whole = None
        s = whole if whole is not None else t.get_text()
        # one wrapped before is wrapped again from its whole text for where its panel is now
        if not s or not t.get_visible():
            continue
        em = t.get_fontsize() * fig.dpi / 72
        # DejaVu Sans' widest glyphs are ~1.75 em (‱, some symbols): a title shorter than that bound is not measured
        if whole is not None or max(len(line) for line in s.split("\n")) * 1.8 * em > limit(room):
            todo.append((i, s, whole is not None))

    def too_wide(items) -> list:
        out = []
        for i, s, rewrap in items:
            t, room = rooms[i]
            t.set_text(s)  # (one wrapped by an earlier pass: whole again where it fits its room now)
            if t.get_window_extent(renderer).width > (room if rewrap else limit(room)):
                out.append((i, s, rewrap))
        return out

    if todo and engine is not None:
        # the panels where the layout puts them (a y label moves a lone panel right): measured where
        # they stood, a title centred on the panel wrapped for the canvas's middle and ran off its right
        # edge; and one that fitted where the panel stood may not fit where it goes (measured only there,
        # a title ran 5-11% past the edge: every candidate is measured after the layout)
        import warnings

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (tight_layout's "not applied": the panels stay where they are)
                engine.execute(fig)
            rooms = _title_rooms(fig, renderer=renderer)
        except Exception:  # noqa: BLE001 - an optimisation of where the panels are; measured where they were
            pass
    todo = too_wide(todo)
    for i, s, _ in todo:
        t, room = rooms[i]
        t.set_text(s)
        room *= 0.97  # wrapped with a margin: the layout may still move the panel a little
        lines = []
        for line in s.split("\n"):
            t.set_text(line)
            width = t.get_window_extent(renderer).width
            if width <= room:
                lines.append(line)
                continue
            n = max(8, int(len(line) * room / width))
            while True:  # the widest wrapped line is measured: proportional fonts, narrower than the mean
                wrapped = textwrap.wrap(line, n, break_long_words=True, break_on_hyphens=False) or [line]
                t.set_text("\n".join(wrapped))
                if t.get_window_extent(renderer).width <= room or n <= 8:
                    break
                n = max(8, int(n * 0.92))
            lines += wrapped
        line_px = t.get_fontsize() * fig.dpi / 72 * 1.2  # (matplotlib's line spacing: 1.2)
        most = max(MAX_TITLE_LINES, int(MAX_TITLE_SHARE * fig.get_figheight() * fig.dpi / line_px))
        if len(lines) > most:
            flat = " ".join(s.split("\n")).rstrip()
            shown = 0  # where the lines kept end in the text (textwrap drops the spaces at its breaks)
            for line in lines[:most - 1]:
                at = flat.find(line, shown)
                shown = at + len(line) if at >= 0 else shown + len(line)
            n = max(len(line) for line in lines)
            while True:  # the last line: "…" and the end of the rest, as many characters as fit
                tail = flat[max(shown, len(flat) - max(n - 1, 1)):]
                cut = max(tail.find(" ") + 1, 0) if " " in tail.strip() else tail.find("/")  # at a word or folder
                last = "…" + (tail[cut:] if 0 < cut < len(tail) - 1 else tail).lstrip()
                t.set_text(last)
                if t.get_window_extent(renderer).width <= room or n <= 2:
                    break
                n -= max(1, n // 10)
            lines = lines[:most - 1] + [last]
        t.set_text("\n".join(lines))
        t._embedscope_wrap = (s, t.get_text())


_FONT_CHARS: dict = {}


def _font_chars(prop) -> frozenset:
    """The code points the fonts of ``prop`` can draw (its family list with matplotlib's fallback)."""
    from matplotlib import font_manager as fm

    find = getattr(fm.fontManager, "_find_fonts_by_props", None)
    paths = tuple(find(prop)) if find is not None else (fm.findfont(prop),)
    if paths not in _FONT_CHARS:
        from matplotlib.ft2font import FT2Font

        chars: set = set()
        for p in paths:
            try:
                chars.update(FT2Font(str(p)).get_charmap())
            except (OSError, RuntimeError, ValueError):
                continue
        _FONT_CHARS[paths] = frozenset(chars)
    return _FONT_CHARS[paths]


def drawable_text(s: str, prop=None) -> str:
    """``s`` with each character that the figure's fonts (``prop``: a FontProperties, default the
    current settings) have no glyph for written as an escape (``日`` -> ``\\u65e5``, as on the
    terminal), instead of an empty box that looks the same for every such character and a
    "Glyph ... missing" warning per character. A font installed and named in matplotlib's
    ``font.family`` list (e.g. a CJK font) is used: its characters are kept."""
    if s.isascii():
        return s
    if prop is None:
        from matplotlib.font_manager import FontProperties

        prop = FontProperties()
    chars = _font_chars(prop)
    out = []
    for ch in s:
        o = ord(ch)
        if o < 0x80 or o in chars or ch.isspace() or not ch.isprintable():
            out.append(ch)
        else:
            out.append(f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")
    return "".join(out)


def _tick_text(s: object) -> str:
    """A tick label: :func:`figure_text`, with ``$`` escaped for mathtext (shown as ``$``) and
    characters without a glyph escaped (:func:`drawable_text`)."""
    return drawable_text(figure_text(s)).replace("$", "\\$")


def _printable_func(func):
    """A tick-label function whose labels go through :func:`_tick_text` (wrapped once)."""
    if getattr(func, "_embedscope_printable", False):
        return func

    def printable(x, pos=None):
        return _tick_text(func(x, pos))

    printable._embedscope_printable = True
    return printable


#: the least gap between two neighbouring x tick labels of a map panel (points)
TICK_LABEL_GAP = 2.0


def _crowded_x_ticks(ax, renderer, dpi: float) -> int:
    """The number of ``ax``'s x tick labels in view when two neighbours are closer than
    :data:`TICK_LABEL_GAP`, else 0."""
    lo, hi = sorted(ax.get_xlim())
    shown = sorted((t for t in ax.xaxis.get_ticklabels() if t.get_visible() and t.get_text()
                    and lo <= t.get_position()[0] <= hi), key=lambda t: t.get_position()[0])
    boxes = [t.get_window_extent(renderer) for t in shown]
    gap = TICK_LABEL_GAP * dpi / 72
    return len(shown) if any(b.x0 - a.x1 < gap for a, b in zip(boxes, boxes[1:])) else 0


def _thin_crowded_ticks(fig, axes) -> bool:
    """Fewer x ticks on each map panel whose tick labels run together: matplotlib chooses the ticks by
    the axis's length, not by its labels' widths, and a map of ~1e-3 coordinates in a narrow zoom
    panel read "−0.00250.0000". The ticks are halved (``MaxNLocator``) until the labels stand apart.
    Call after a layout; True when a panel's ticks changed."""
    from matplotlib.ticker import MaxNLocator

    changed = False
    axes = list(axes)
    for _ in range(4):  # (one draw a round, for every panel: a yoke of 6 maps and zooms has 12)
        if not axes:
            break
        fig.draw_without_rendering()  # (the labels of the limits as laid out)
        renderer = fig.canvas.get_renderer()
        crowded = [(ax, n) for ax in axes if (n := _crowded_x_ticks(ax, renderer, fig.dpi))]
        for ax, n in crowded:
            ax.xaxis.set_major_locator(MaxNLocator(nbins=max(1, n // 2), steps=[1, 2, 2.5, 5, 10]))
        changed = changed or bool(crowded)
        axes = [ax for ax, _ in crowded]
    return changed


def _raise_titles_over_multipliers(fig) -> bool:
    """Raise the title of each panel whose y axis shows a multiplier (``1e−9``: a t-SNE map of tiny or
    huge coordinates) above it, as :func:`~embedscope.viz.scatter.plot_same_different` does: the
    multiplier sits above the panel at the height of the title's last line, and matplotlib moves the
    title only when the two overlap, so beside it they read as one ("1e−93 points, 3 classes").
    Call after a layout (which sets the multipliers' texts); True when a title was raised."""
    import matplotlib.pyplot as plt

    raised = False
    for ax in fig.axes:
        off = ax.yaxis.get_offset_text()
        if off.get_visible() and off.get_text() and ax.get_title():
            ax.set_title(ax.get_title(), pad=plt.rcParams["axes.titlepad"] + 1.3 * off.get_fontsize())
            raised = True
    return raised


def finish_layout(fig, *, note: str = "", legend_h: float = 0.0, title: str | None = None,
                  fit_axes: Sequence | None = None) -> None:
    """Lay out inside the canvas (never relying on ``bbox_inches="tight"``): from the bottom up,
    the settings ``note``, the figure legends (``legend_h`` inches), the panels, the ``title``.

    ``fit_axes``: map panels drawn at equal scale on both axes (``set_aspect("equal")``) whose
    limits hold the window to show. The figure keeps its width and its height is fitted so that
    each such panel's cell has the window's shape; what is left is taken up by widening the window
    (centred) in its short direction, so the window is shown whole and no band of empty canvas is
    left beside or above the panel. A panel title is raised above its y axis's multiplier
    (:func:`_raise_titles_over_multipliers`); a map panel whose x tick labels run together gets
    fewer ticks (:func:`_thin_crowded_ticks`).
    """
    if note:
        fig.text(0.995, 0.005, note, ha="right", va="bottom", fontsize=6, color="0.4")
    if title:
        fig.suptitle(title, y=0.995, va="top")
    clean_figure(fig)  # before the first layout measures the text
    fit_axes = list(fit_axes) if fit_axes is not None else []
    windows = [(ax.get_xlim(), ax.get_ylim()) for ax in fit_axes]

    def fill_cells() -> None:
        W, H = fig.get_size_inches()
        for ax, (xl, yl) in zip(fit_axes, windows):
            cell = ax.get_position(original=True)
            shape = (cell.height * H) / max(cell.width * W, 1e-9)
            (x0, x1), (y0, y1) = xl, yl
            sx, sy = x1 - x0, y1 - y0
            if sy < sx * shape:
                grow = (sx * shape - sy) / 2
                y0, y1 = y0 - grow, y1 + grow
            else:
                grow = (sy / shape - sx) / 2
                x0, x1 = x0 - grow, x1 + grow
            ax.set_xlim(x0, x1)
            ax.set_ylim(y0, y1)

    def layout() -> None:
        h = fig.get_figheight()
        note_h = 0.17 if note else 0.0
        for leg in fig.legends:
            leg.set_bbox_to_anchor((0.5, note_h / h), transform=fig.transFigure)
        top = 1 - 0.26 / h if title else 1.0
        for _ in range(2 if fit_axes else 1):  # tick labels may change with the limits: twice
            fig.tight_layout(rect=(0, (legend_h + note_h) / h, 1, top), pad=0.4, w_pad=0.8)
            fill_cells()

    layout()
    if _thin_crowded_ticks(fig, fit_axes):
        layout()
    if _raise_titles_over_multipliers(fig):
        layout()
    for _ in range(6 if fit_axes else 0):
        W, H = fig.get_size_inches()
        need = []
        for ax, (xl, yl) in zip(fit_axes, windows):
            cell = ax.get_position(original=True)
            ratio = abs(yl[1] - yl[0]) / max(abs(xl[1] - xl[0]), 1e-300)
            need.append(cell.width * W * ratio - cell.height * H)  # > 0: the cell is too flat
        dh = max(need)
        if abs(dh) < 0.01:
            break
        fig.set_size_inches(W, max(H + dh, 1.0))
        layout()


__all__ = ["PAPER_RC", "TRAIN_COLOR", "TEST_COLOR", "SPLIT_COLORS", "BELOW_COLOR", "ABOVE_COLOR", "LINE_STYLES",
           "SAME_CLASS_COLOR", "OTHER_CLASS_COLOR",
           "palette_colors", "distinct_colors", "series_colors", "ClassPalette", "class_colors", "label_names", "marker_size",
           "class_legend", "legend_height", "class_legend_layout", "legend_columns", "legend_note", "short_text",
           "LEGEND_CHARS", "TITLE_CHARS", "TICK_CHARS", "MAX_LEGEND_ENTRIES", "settings_text", "figure_text", "drawable_text",
           "clean_figure", "finish_layout", "wrap_text"]
