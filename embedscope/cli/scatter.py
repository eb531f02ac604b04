"""embedscope scatter EMB.h5 -o scatter.png"""

from __future__ import annotations

from embedscope.cli.common import add_figure_output
from embedscope.cli.output import add_table_parquet
from embedscope.names import SIMILARITY_METRICS, SPLIT_CHOICES


def add_parser(sub, parents):
    p = sub.add_parser("scatter", parents=parents, help="same-vs-different similarity scatter (train and test)",
                       description="For every point, the similarity to its most similar same-class point (x) and "
                       "to its most similar other-class point (y), within its split; points below the diagonal "
                       "(cyan) are nearer their own class, the share of them is R@1 when no point is tied; a point "
                       "whose nearest same-class and other-class similarities are equal is tied (on the diagonal, "
                       "purple diamond), counted apart and not below (docs/methods.md §10, Xuan §2.4). Writes OUT.png, "
                       "OUT.pdf, the similarities as OUT.csv (one row per point) and the summary per split, the settings "
                       "and the same per-point rows as OUT.json.")
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


def run(args) -> int:
    from embedscope.analyses import scatter
    from embedscope.cli.output import figure_outputs, parquet_output, print_wrote, refuse_figure_inputs, save_and_close
    from embedscope.tables import format_table
    from embedscope.viz import plot_same_different
    from embedscope.viz.figures import use_agg

    refuse_figure_inputs(args.output, [args.file])
    png, pdf, csv, js = figure_outputs(args.output, args.force)
    pq = parquet_output(args, (png, pdf, csv, js))
    r = scatter(args.file, split=args.split, metric=args.metric, progress=not args.no_progress)
    use_agg()
    fig = plot_same_different(r.arrays["panels"], metric=args.metric)
    save_and_close(fig, png, force=args.force)
    r.to_csv(csv, table=True, force=args.force)
    r.to_json(js, force=args.force)
    if pq is not None:
        r.to_parquet(pq, table=True, force=args.force)
    print(format_table(r.provenance["splits"], ["split", "N", "classes", "left_out", "tied", "below_diagonal_R@1",
                                                "below_or_tied"]))
    for note in r.provenance.get("notes", []):
        print(f"note: {note}")
    print_wrote([png, pdf, csv, js] + ([pq] if pq is not None else []))
    return 0
