"""Writing a :class:`~embedscope.analyses.Result`: the same options and layout for every command.

``--json`` / ``--csv`` / ``--parquet`` name the files; all are checked before the work starts
(an existing file without ``--force`` is refused then, not after minutes of computing).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from embedscope.cli.common import add_split, nonnegative_int, positive_int, seed_int
from embedscope.fileio import same_file  # noqa: F401 - the commands' name for it (cli.report imports it here)


def add_result_outputs(p: argparse.ArgumentParser, *, table_help: str | None = None) -> None:
    p.add_argument("--json", metavar="OUT.json", help="also write the results as JSON")
    p.add_argument("--csv", metavar="OUT.csv", help="also write the results as CSV (columns measure, value, model)")
    p.add_argument("--parquet", metavar="OUT.parquet", help="also write the results as Parquet (as the CSV)")
    if table_help:
        p.add_argument("--table-csv", metavar="ROWS.csv", help=table_help)


def result_paths(args) -> list[Path]:
    return [Path(x) for x in (getattr(args, "json", None), getattr(args, "csv", None),
                              getattr(args, "parquet", None), getattr(args, "table_csv", None)) if x]


def within(path, folder) -> bool:
    """Whether ``path`` lies in ``folder`` (at any depth; resolved paths, so through symlinks too)."""
    try:
        return Path(folder).resolve() in Path(path).resolve().parents
    except (OSError, RuntimeError, ValueError):
        return False


def refuse_inputs(outputs, inputs) -> None:
    """Refuse (a usage error, exit 2, before any work) an output that is one of the command's input
    files, even with --force: the input would be replaced by the output. ``None`` entries are skipped."""
    from embedscope.errors import UsageError

    inputs = [x for x in inputs if x is not None and str(x) != ""]
    for out in outputs:
        if out is None or str(out) == "":
            continue
        for inp in inputs:
            if same_file(out, inp):
                raise UsageError(f"{out} is an input file: choose another output name")


def check_result_outputs(args, extra=()) -> None:
    """Refuse (one line, before any work) outputs that exist without --force or that name one file twice."""
    from embedscope.errors import UsageError
    from embedscope.fileio import check_writable

    paths = result_paths(args) + [Path(x) for x in extra]
    for i, p in enumerate(paths):
        if any(same_file(p, q) for q in paths[:i]):
            raise UsageError("two outputs name the same file: give each output its own name")
    refuse_inputs(paths, getattr(args, "_inputs", []))
    for p in paths:
        check_writable(p, force=args.force)


def write_result(result, args) -> list[str]:
    """Write the outputs named by the options; return the paths written.

    A :class:`ResultSet` of one file is written as that file's ``Result`` (the JSON layout of one
    file, ``{"analysis", "model", ...}``, whichever command made it); per-row tables (``--table-csv``)
    keep the ResultSet's ``model`` column.
    """
    from embedscope.analyses.result import ResultSet

    table_source = result
    if isinstance(result, ResultSet) and len(result) == 1:
        result = result[0]
    written = []
    if getattr(args, "json", None):
        result.to_json(args.json, force=args.force)
        written.append(args.json)
    if getattr(args, "csv", None):
        result.to_csv(args.csv, force=args.force)
        written.append(args.csv)
    if getattr(args, "parquet", None):
        result.to_parquet(args.parquet, force=args.force)
        written.append(args.parquet)
    if getattr(args, "table_csv", None):
        table_source.to_csv(args.table_csv, table=True, force=args.force)
        written.append(args.table_csv)
    return written


def figure_outputs(out, force: bool):
    """(png, pdf, csv, json) beside each other; all refused up front if they exist without --force."""
    from embedscope.fileio import check_writable
    from embedscope.viz.figures import figure_paths

    png, pdf = figure_paths(out)
    csv, js = png.with_suffix(".csv"), png.with_suffix(".json")
    for p in (png, pdf, csv, js):
        check_writable(p, force=force)
    return png, pdf, csv, js


def add_table_parquet(p: argparse.ArgumentParser) -> None:
    """``--parquet`` of the figure commands whose per-point table is written as CSV beside the figure."""
    p.add_argument("--parquet", metavar="OUT.parquet",
                   help="also write the per-point table as Parquet (the columns of the CSV beside the figure)")


def parquet_output(args, taken) -> Path | None:
    """The ``--parquet`` file of a figure command, checked up front (writable, --force for an existing
    file, not one of the figure's other outputs ``taken`` nor an input); None when not asked for."""
    from embedscope.errors import UsageError
    from embedscope.fileio import check_writable

    if not getattr(args, "parquet", None):
        return None
    pq = Path(args.parquet)
    if any(same_file(pq, t) for t in taken):
        raise UsageError(f"--parquet {args.parquet} is one of the figure's own outputs: choose another name")
    refuse_inputs([pq], getattr(args, "_inputs", None) or [getattr(args, "file", None),
                                                          *(getattr(args, "files", None) or [])])
    check_writable(pq, force=args.force)
    return pq


def save_and_close(fig, png, *, force: bool):
    """save_figure (PNG and PDF), then close the figure."""
    import matplotlib.pyplot as plt

    from embedscope.viz.figures import save_figure

    try:
        return save_figure(fig, png, force=force)
    finally:
        plt.close(fig)


def print_wrote(paths) -> None:
    """One line naming the files written (control characters of the names shown escaped)."""
    from embedscope.text import safe

    paths = [safe(p) for p in paths]
    if paths:
        print("wrote " + ", ".join(paths))


# ------------------------------------------------------------------ options of geometry and spectrum
def add_measure_options(p: argparse.ArgumentParser) -> None:
    """Options shared by `geometry` and `spectrum`."""
    add_split(p, default="train")
    p.add_argument("--exclude-top", type=nonnegative_int, default=1, metavar="M",
                   help="leading singular values left out of rho (default 1: Roth's footnote and "
                   "rho_spectrum@2; 0: rho_spectrum@1)")
    p.add_argument("--n-components", type=positive_int, metavar="K",
                   help="keep only the first K singular values (D-1 = the reference code's TruncatedSVD)")
    p.add_argument("--max-pairs", type=positive_int, default=200_000,
                   help="pairs for the uniformity: exact when N(N-1)/2 is at most this, else a sample (default 200000)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the uniformity pair sample (default 0)")


def measure_kwargs(args) -> dict:
    return dict(split=args.split, exclude_top=args.exclude_top, n_components=args.n_components,
                max_pairs=args.max_pairs, seed=args.seed)


#: how the terminal table shows an undefined (NaN) measure; the files hold NaN (JSON null, an empty CSV cell)
UNDEFINED = "–"


def undefined_lines(results) -> list[str]:
    """One line per result with undefined measures (naming the model when there are several), escaped."""
    from embedscope.analyses.result import Result
    from embedscope.analyses.structure import undefined_note
    from embedscope.text import safe

    results = [results] if isinstance(results, Result) else list(results)
    out = []
    for r in results:
        note = undefined_note(r.provenance.get("undefined") or {})
        if note:
            out.append(safe(f"{r.model}: {note}" if len(results) > 1 else note))
    return out


def perplexity_cap_notes(info: dict, n: int) -> tuple[dict, str | None]:
    """The settings for the figure's note and the terminal's note line when the perplexity asked for
    was capped at (N − 1)/3 (:func:`embedscope.tsne.perplexity_cap`): the figure then reads
    ``perplexity=6.333 (capped: 50 asked, N = 20)``; otherwise ``(info, None)``."""
    from embedscope.tsne import perplexity_cap

    cap = perplexity_cap(info, n)
    if cap is None:
        return info, None
    shown = dict(info)
    shown["perplexity"] = f"{info['perplexity']:.4g} (capped: {info['perplexity_requested']:.4g} asked, N = {int(n)})"
    return shown, f"note: perplexity {cap}"
