"""Saving figures: PNG and PDF side by side, atomically, at paper-readable sizes."""

from __future__ import annotations

import os
from pathlib import Path

from embedscope.fileio import atomic_output, check_writable
from embedscope.viz.style import PAPER_RC  # noqa: F401 - re-exported (its home is viz/style.py)


def use_agg() -> None:
    """Headless rendering (no display on servers and CI)."""
    import matplotlib

    matplotlib.use("Agg", force=True)


def figure_paths(out: str | os.PathLike, *, option: str | None = None) -> tuple[Path, Path]:
    """``out`` may end in .png, .pdf or nothing: return the (png, pdf) pair.

    A folder (existing, or a name ending in a path separator) or another suffix is a usage error;
    ``option``, the command-line option that gave ``out`` (``-o``, ``--figure``, ``--grid``), starts
    its line (``-o fig.jpg: a figure name must end in .png or .pdf (both are written)``), so that a
    command with several outputs says which one is wrong.
    """
    from embedscope.errors import UsageError
    from embedscope.fileio import is_folder_name

    given = f"{option} {out}" if option else f"{out}"
    if is_folder_name(out) or Path(out).is_dir():
        raise UsageError(f"{given}: is a folder, expected a figure file name (OUT.png; PNG and PDF are written)")
    out = Path(out)
    base = out.name
    if out.suffix.lower() in (".png", ".pdf"):
        base = base[:-4]  # only that suffix: the dots before it are the name's (fig_p0.3.png -> fig_p0.3)
    elif out.suffix:
        raise UsageError(f"{option} {out}: a figure name must end in .png or .pdf (both are written)" if option
                         else f"figure name {out} must end in .png or .pdf (both are written)")
    return out.with_name(base + ".png"), out.with_name(base + ".pdf")


def save_figure(fig, out: str | os.PathLike, *, force: bool = False,
                option: str | None = None) -> tuple[Path, Path]:
    """Write ``fig`` as PNG and PDF next to each other (atomically; refuses overwrite without force).

    Its text is made printable first (:func:`~embedscope.viz.style.clean_figure`: control characters
    of names read from files are drawn escaped, with no missing-glyph warning). ``option``: the
    option that named ``out``, for the error of a wrong name (:func:`figure_paths`).
    """
    from embedscope.viz.style import clean_figure

    png, pdf = figure_paths(out, option=option)
    for p in (png, pdf):
        check_writable(p, force=force)
    clean_figure(fig)
    box = _tight_box(fig, PAPER_RC["savefig.dpi"])
    for p, fmt in ((png, "png"), (pdf, "pdf")):
        with atomic_output(p, force=force) as tmp:
            # no creation date in the PDF: the same figure gives the same bytes (the PNG has none)
            fig.savefig(tmp, format=fmt, dpi=PAPER_RC["savefig.dpi"], bbox_inches=box,
                        metadata={"CreationDate": None} if fmt == "pdf" else None)
    return png, pdf


def _tight_box(fig, dpi: float):
    """The figure's tight bounding box (inches, padded by ``savefig.pad_inches``), measured once for
    both files, or ``"tight"`` (each ``savefig`` measures its own).

    ``bbox_inches="tight"`` lays the figure out and measures it in every ``savefig`` — for a PNG and a
    PDF, four passes over every artist, the text layout most of a study's figure time. A figure laid
    out already (``tight_layout``, or no layout engine) is measured here once, at the PNG's resolution,
    and saved without a layout engine (one pass per file: the same picture, its edge within a pixel).
    A figure whose engine lays it out at every draw (constrained layout) keeps ``"tight"``."""
    import matplotlib
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    engine = fig.get_layout_engine()
    if not (engine is None or isinstance(engine, PlaceHolderLayoutEngine)) or not hasattr(fig.canvas, "get_renderer"):
        return "tight"
    fig.set_layout_engine(None)  # (a placeholder: tight_layout ran; None makes savefig skip its measuring pass)
    dpi0 = fig.dpi
    fig.set_dpi(dpi)
    try:
        box = fig.get_tightbbox(fig.canvas.get_renderer())
    finally:
        fig.set_dpi(dpi0)
    pad = matplotlib.rcParams["savefig.pad_inches"]
    return box.padded(pad)
