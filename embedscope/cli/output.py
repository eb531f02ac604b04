"""Writing a :class:`~embedscope.analyses.Result`: the same options and layout for every command.

``--json`` / ``--csv`` / ``--parquet`` name the files; all are checked before the work starts
(an existing file without ``--force`` is refused then, not after minutes of computing).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from embedscope.cli.common import add_split, nonnegative_int, positive_int, seed_int
from embedscope.fileio import same_file  # noqa: F401 - the commands' name for it (cli.report imports it here)

#: the table options that take ``-``: their table written to standard output (CSV or JSON text), the
#: terminal table, the notes and the 'wrote' line then going to standard error; the suffix of its format.
#: The binary Parquet options refuse ``-`` (a usage error), as the figure options do.
STDOUT_TABLES = {"json": ".json", "csv": ".csv", "table_csv": ".csv", "per_class": ".csv", "per_image_csv": ".csv"}
#: the file standing in for standard output while a command runs (``--csv -``: the command writes its
#: table there, the command line then copies it to standard output); see :func:`shown_output`
_STDOUT_STANDINS: set[str] = set()


def stdout_standin(path: str) -> None:
    """Register ``path`` as the stand-in file of a table option given ``-`` (named 'standard output')."""
    _STDOUT_STANDINS.add(str(path))


def stdout_standin_done(path: str) -> None:
    _STDOUT_STANDINS.discard(str(path))


def shown_output(path) -> str:
    """How the 'wrote' line names an output: ``standard output`` for a table option given ``-``."""
    return "standard output" if str(path) in _STDOUT_STANDINS else str(path)


def add_result_outputs(p: argparse.ArgumentParser, *, table_help: str | None = None) -> None:
    """--json, --csv and --parquet of the values; with ``table_help`` (the help of --table-csv) also
    --table-csv and --table-parquet, the per-row table as CSV and as Parquet."""
    p.add_argument("--json", metavar="OUT.json", help="also write the results as JSON (-: to standard output, "
                   "the terminal table then to standard error)")
    p.add_argument("--csv", metavar="OUT.csv", help="also write the results as CSV (columns measure, value, model; "
                   "-: to standard output, the terminal table then to standard error)")
    p.add_argument("--parquet", metavar="OUT.parquet", help="also write the results as Parquet (as the CSV)")
    if table_help:
        p.add_argument("--table-csv", metavar="ROWS.csv", help=table_help + " (-: to standard output)")
        p.add_argument("--table-parquet", metavar="ROWS.parquet",
                       help="write the table of --table-csv as Parquet (its columns and rows)")


def result_paths(args) -> list[Path]:
    return [Path(x) for x in (getattr(args, "json", None), getattr(args, "csv", None),
                              getattr(args, "parquet", None), getattr(args, "table_csv", None),
                              getattr(args, "table_parquet", None)) if x]


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


def refuse_figure_inputs(output, inputs) -> None:
    """Refuse (a usage error, before any work, even with --force) a figure command's outputs (the
    PNG and PDF of ``-o`` and its CSV and JSON beside them) that name one of its input files:
    ``tsne x.json -o x.png --force`` replaced the input ``x.json``."""
    from embedscope.viz.figures import figure_paths

    png, pdf = figure_paths(output, option="-o")
    refuse_inputs([png, pdf, png.with_suffix(".csv"), png.with_suffix(".json")], inputs)


#: file suffixes of the formats embedscope reads or writes: an output option given a name with one of
#: them that is not its own format's (``--json out.csv``, ``--csv emb.h5``) is refused; any other
#: suffix (none, ``.txt``, ``.out``) is the user's choice
FORMAT_SUFFIXES = {".json": "JSON", ".csv": "CSV", ".tsv": "TSV", ".parquet": "Parquet", ".png": "PNG",
                   ".pdf": "PDF", ".svg": "SVG", ".h5": "HDF5", ".hdf5": "HDF5", ".npy": "NumPy", ".npz": "NumPy",
                   ".pt": "PyTorch", ".pth": "PyTorch", ".safetensors": "safetensors", ".html": "HTML"}


def check_suffix(path, option: str, suffix: str) -> None:
    """Refuse (a usage error) an output ``path`` of ``option`` (written in the format of ``suffix``)
    whose name ends in another format's suffix (:data:`FORMAT_SUFFIXES`): ``--json out.csv`` wrote
    JSON into a .csv file, ``--csv run.h5 --force`` replaced an embedding file with a CSV."""
    from embedscope.errors import UsageError

    if path is None or str(path) == "":
        return
    got = Path(str(path)).suffix.lower()
    if got in FORMAT_SUFFIXES and got != suffix and FORMAT_SUFFIXES[got] != FORMAT_SUFFIXES.get(suffix):
        raise UsageError(f"{option} {path}: {option} writes {FORMAT_SUFFIXES[suffix]}, not "
                         f"{FORMAT_SUFFIXES[got]}: give a name ending in {suffix}")


def _result_options(args) -> list[str]:
    """The option of each path of :func:`result_paths`, in its order."""
    return [opt for opt, dest in (("--json", "json"), ("--csv", "csv"), ("--parquet", "parquet"),
                                  ("--table-csv", "table_csv"), ("--table-parquet", "table_parquet"))
            if getattr(args, dest, None)]


def check_result_outputs(args, extra=(), extra_options=None) -> None:
    """Refuse (one line, before any work) outputs that exist without --force, that name one file twice
    (the line names both options; ``extra_options``: the option of each ``extra`` path, e.g.
    ``["--per-class"]``), or whose suffix names another format (:func:`check_suffix`)."""
    from embedscope.errors import UsageError
    from embedscope.fileio import check_writable

    extra = list(extra)
    paths = result_paths(args) + [Path(x) for x in extra]
    options = _result_options(args) + list(extra_options or ["another output"] * len(extra))
    for i, p in enumerate(paths):
        for j, q in enumerate(paths[:i]):
            if same_file(p, q):
                raise UsageError(f"two outputs name the same file ({options[j]} {q}, {options[i]} {p}): "
                                 "give each output its own name")
    refuse_inputs(paths, getattr(args, "_inputs", []))
    for option, dest, suffix in (("--json", "json", ".json"), ("--csv", "csv", ".csv"),
                                 ("--parquet", "parquet", ".parquet"), ("--table-csv", "table_csv", ".csv"),
                                 ("--table-parquet", "table_parquet", ".parquet")):
        check_suffix(getattr(args, dest, None), option, suffix)
    for p in paths:
        check_writable(p, force=args.force)


def write_result(result, args) -> list[str]:
    """Write the outputs named by the options; return the paths written.

    A :class:`ResultSet` of one file is written as that file's ``Result`` (the JSON layout of one
    file, ``{"analysis", "model", ...}``, whichever command made it); per-row tables (``--table-csv``,
    ``--table-parquet``) keep the ResultSet's ``model`` column.
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
    if getattr(args, "table_parquet", None):
        table_source.to_parquet(args.table_parquet, table=True, force=args.force)
        written.append(args.table_parquet)
    return written


def figure_outputs(out, force: bool):
    """(png, pdf, csv, json) beside each other; all refused up front if they exist without --force."""
    from embedscope.fileio import check_writable
    from embedscope.viz.figures import figure_paths

    png, pdf = figure_paths(out, option="-o")
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
    check_suffix(args.parquet, "--parquet", ".parquet")
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

    paths = [safe(shown_output(p)) for p in paths]
    if paths:
        print("wrote " + ", ".join(paths))


# ------------------------------------------------------------------ options of geometry and spectrum
def add_measure_options(p: argparse.ArgumentParser) -> None:
    """Options shared by `geometry` and `spectrum`."""
    add_split(p, default="train")
    p.add_argument("--exclude-top", type=nonnegative_int, default=1, metavar="M",
                   help="leading singular values left out of rho (default: 1, Roth's footnote and "
                   "rho_spectrum@2; 0: rho_spectrum@1)")
    p.add_argument("--n-components", type=positive_int, metavar="K",
                   help="keep only the first K singular values (D-1 = the reference code's TruncatedSVD)")
    p.add_argument("--max-pairs", type=positive_int, default=200_000, metavar="N",
                   help="pairs for the uniformity: exact when N(N-1)/2 is at most this, else a sample (default: 200000)")
    p.add_argument("--seed", type=seed_int, default=None,
                   help="seed of the uniformity pair sample (default: 0; not used when the uniformity is exact)")


def measure_kwargs(args) -> dict:
    return dict(split=args.split, exclude_top=args.exclude_top, n_components=args.n_components,
                max_pairs=args.max_pairs, seed=0 if args.seed is None else args.seed)


def unused_seed_lines(args, results) -> list[str]:
    """A note per result whose uniformity was exact (every pair, N(N-1)/2 <= --max-pairs) when --seed
    was given: no pair was drawn, so the seed was not used (it was silently ignored)."""
    from embedscope.analyses.result import Result
    from embedscope.text import safe

    if getattr(args, "seed", None) is None:
        return []
    results = [results] if isinstance(results, Result) else list(results)
    out = []
    for r in results:
        if r.provenance.get("uniformity_exact"):
            what = (f"--seed {args.seed} is not used: the uniformity is exact, over all "
                    f"{r.provenance.get('uniformity_pairs')} pairs (at most --max-pairs {args.max_pairs})")
            out.append(safe(f"note: {r.model}: {what}" if len(results) > 1 else f"note: {what}"))
    return out


#: how the terminal table shows an undefined (NaN) measure (as print(result) of the API); the files hold NaN
#: (JSON null, an empty CSV cell)
from embedscope.analyses.result import DISPLAY_CELL, UNDEFINED  # noqa: E402, F401 (re-exported: the commands import them from here)


def undefined_lines(results) -> list[str]:
    """One line per result with undefined measures (naming the model when there are several), and
    one per result with infinite ones (``provenance["infinite"]``: pi_ratio when pi_inter = 0 <
    pi_intra, inf in the table and CSV/Parquet, null in the JSON), escaped."""
    from embedscope.analyses.result import Result
    from embedscope.analyses.structure import infinite_note, undefined_note
    from embedscope.text import safe

    results = [results] if isinstance(results, Result) else list(results)
    out = []
    for r in results:
        for note in (undefined_note(r.provenance.get("undefined") or {}),
                     infinite_note(r.provenance.get("infinite") or {})):
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
