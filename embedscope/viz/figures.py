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
    if out.suffix.lower() in (".png", ".pdf"):
        out = out.with_suffix("")
    elif out.suffix:
        raise UsageError(f"{option} {out}: a figure name must end in .png or .pdf (both are written)" if option
                         else f"figure name {out} must end in .png or .pdf (both are written)")
    return out.with_suffix(".png"), out.with_suffix(".pdf")


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
    for p, fmt in ((png, "png"), (pdf, "pdf")):
        with atomic_output(p, force=force) as tmp:
            # no creation date in the PDF: the same figure gives the same bytes (the PNG has none)
            fig.savefig(tmp, format=fmt, dpi=PAPER_RC["savefig.dpi"], bbox_inches="tight",
                        metadata={"CreationDate": None} if fmt == "pdf" else None)
    return png, pdf
