"""embedscope scatter EMB.h5 -o scatter.png"""

from __future__ import annotations

from pathlib import Path

from embedscope.cli.common import add_figure_output
from embedscope.cli.output import add_table_parquet
from embedscope.names import SIMILARITY_METRICS, SPLIT_CHOICES


def add_parser(sub, parents):
    p = sub.add_parser("scatter", parents=parents, help="same-vs-different similarity scatter (train and test)",
                       description="For every point, the similarity to its most similar same-class point (x) and "
                       "to its most similar other-class point (y), within its split; points below the diagonal "
                       "(bluish green) are nearer their own class, the share of them is R@1 when no point is tied; a point "
                       "whose nearest same-class and other-class similarities are equal is tied (on the diagonal, "
                       "purple diamond), counted apart and not below (docs/methods.md §10, Xuan §2.4). Writes OUT.png, "
                       "OUT.pdf, the similarities as OUT.csv (one row per point), the summary per split (the table "
                       "printed) as OUT_summary.csv, and the settings, the summary and the per-point rows as OUT.json; "
                       "--parquet T.parquet writes the per-point rows as T.parquet and the summary as "
                       "T_summary.parquet.")
    p.add_argument("file", metavar="EMB.h5", help="embedding file (.h5)")
    p.add_argument("--split", default="all", choices=SPLIT_CHOICES,
                   help="panels to draw: one split, or all = every split present (default: all)")
    p.add_argument("--metric", default="cosine", choices=SIMILARITY_METRICS,
                   help="similarity (default: cosine; euclidean uses minus the distance). A note says so when "
                   "the rows differ in norm and the model's recorded distance (its checkpoint's config) ranks "
                   "otherwise, e.g. dot for an N-pair model")
    add_figure_output(p)
    add_table_parquet(p)
    p.set_defaults(func=run)
    return p


def summary_path(path: Path) -> Path:
    """Where the per-split summary goes beside a per-point table: OUT.csv -> OUT_summary.csv,
    T.parquet -> T_summary.parquet."""
    return path.with_name(f"{path.stem}_summary{path.suffix}")


def extra_outputs(args) -> list[str]:
    """The files this command writes beyond those its options name (``-o`` and ``--parquet``), for the
    all-or-nothing group of :func:`embedscope.cli.main` (:func:`embedscope.fileio.output_group`):
    OUT_summary.csv and, with --parquet T.parquet, T_summary.parquet (whose stems are not those of
    the named outputs)."""
    from embedscope.errors import EmbedscopeError
    from embedscope.viz.figures import figure_paths

    out = []
    try:
        out.append(str(summary_path(figure_paths(args.output)[0].with_suffix(".csv"))))
    except EmbedscopeError:  # a bad -o: the command's own one-line error follows
        pass
    if getattr(args, "parquet", None):
        out.append(str(summary_path(Path(args.parquet))))
    return out


def _summary_outputs(args, png: Path, pdf: Path, csv: Path, js: Path) -> tuple[Path, Path | None, Path | None]:
    """(OUT_summary.csv, the --parquet file or None, its T_summary.parquet or None), each checked up front
    as the figure's own outputs are: not an input (even with --force), not one of the other outputs,
    refused when it exists without --force."""
    from embedscope.cli.output import parquet_output, refuse_inputs, same_file
    from embedscope.errors import UsageError
    from embedscope.fileio import check_writable

    summary_csv = summary_path(csv)
    refuse_inputs([summary_csv], [args.file])
    check_writable(summary_csv, force=args.force)
    pq = parquet_output(args, (png, pdf, csv, js, summary_csv))
    if pq is None:
        return summary_csv, None, None
    summary_pq = summary_path(pq)
    if any(same_file(summary_pq, t) for t in (png, pdf, csv, js, summary_csv, pq)):
        raise UsageError(f"--parquet {args.parquet}: its summary {summary_pq} would be one of the figure's own "
                         "outputs: choose another name")
    refuse_inputs([summary_pq], [args.file])
    check_writable(summary_pq, force=args.force)
    return summary_csv, pq, summary_pq


def run(args) -> int:
    from embedscope.analyses import scatter
    from embedscope.analyses.neighbours import SCATTER_SUMMARY_COLUMNS
    from embedscope.cli.output import figure_outputs, print_wrote, refuse_figure_inputs, save_and_close
    from embedscope.tables import format_table, write_csv, write_parquet
    from embedscope.text import safe
    from embedscope.viz import plot_same_different
    from embedscope.viz.figures import use_agg

    refuse_figure_inputs(args.output, [args.file])
    png, pdf, csv, js = figure_outputs(args.output, args.force)
    summary_csv, pq, summary_pq = _summary_outputs(args, png, pdf, csv, js)
    r = scatter(args.file, split=args.split, metric=args.metric, progress=not args.no_progress)
    use_agg()
    fig = plot_same_different(r.arrays["panels"], metric=args.metric)
    save_and_close(fig, png, force=args.force)
    r.to_csv(csv, table=True, force=args.force)
    r.to_json(js, force=args.force)
    if pq is not None:
        r.to_parquet(pq, table=True, force=args.force)
    # the per-split summary: the table printed below, in the JSON's provenance.splits, as CSV and Parquet
    summary = r.provenance["splits"]
    columns = list(SCATTER_SUMMARY_COLUMNS)
    write_csv(summary_csv, summary, columns, force=args.force)
    if summary_pq is not None:
        import pandas as pd

        write_parquet(summary_pq, pd.DataFrame([{c: row[c] for c in columns} for row in summary], columns=columns),
                      force=args.force)
    print(format_table(summary, columns))
    for note in r.provenance.get("notes", []):
        print(safe(f"note: {note}"))
    print_wrote([png, pdf, csv, js, summary_csv] + ([pq, summary_pq] if pq is not None else []))
    return 0
