"""embedscope properties EMB.h5 [MORE.h5 ...] -o props.png: which image properties each embedding clusters."""

from __future__ import annotations

from embedscope.cli.common import add_force, nonnegative_int, positive_int, seed_int

COLUMNS = ["model", "property", "NR-Prec", "R-Prec", "ceiling", "p_value", "n_values", "lone_queries"]


def add_parser(sub, parents):
    p = sub.add_parser(
        "properties", parents=parents, help="which image properties an embedding clusters (NR-Prec)",
        description="R-Precision and Normalized R-Precision (Kobs et al. 2021, Eq. 4-5) of every image "
        "property of the files (and the class), with the ceiling of perfect clustering, a p-value "
        "against the hypergeometric null (queries taken as independent: approximate and liberal) and, with "
        "--permutations, a permutation test. Table sorted by NR-Prec; bar chart with the paper's 2.576 line. "
        "Definitions: docs/methods.md section 9.")
    p.add_argument("files", nargs="+", metavar="EMB.h5", help="embedding file(s) (.h5)")
    p.add_argument("--names", nargs="+", metavar="NAME", help="display name of each file (default: file names)")
    p.add_argument("--split", default="test", choices=["train", "test", "all"], help="rows to use (default: test)")
    p.add_argument("--max-r", type=positive_int, metavar="N",
                   help="cap R at N (1023 reproduces Kobs' code and Table 6; default: no cap, the paper's definition)")
    p.add_argument("--properties", metavar="a,b,...", help="only these properties (comma-separated; 'class' = label)")
    p.add_argument("--metric", default="euclidean", choices=["euclidean", "cosine"],
                   help="ranking distance (default: euclidean on the raw embeddings, as Kobs' code)")
    p.add_argument("--permutations", type=nonnegative_int, default=0, metavar="P",
                   help="also a permutation test: the values shuffled over the images P times, NR-Prec "
                   "recomputed each time (one-sided p = (1 + #{shuffled >= observed}) / (1 + P); costs about P "
                   "times the measure; default 0: none)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the shuffles (default 0)")
    p.add_argument("-o", "--output", metavar="OUT.png", help="bar chart (PNG and PDF are written)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--json", metavar="OUT.json", help="also write the results as JSON")
    p.add_argument("--csv", metavar="OUT.csv",
                   help="also write the table as CSV: one row per model and property (the columns shown, and z, "
                   "significant_2.576, queries, lone_values, max_r, capped; with --permutations also perm_p_value, "
                   "perm_mean, perm_sd, permutations)")
    add_force(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from embedscope.analyses import properties
    from embedscope.analyses.image_properties import PERM_FIELDS, ROW_FIELDS
    from embedscope.fileio import check_writable
    from embedscope.tables import format_table, write_csv
    from embedscope.text import safe

    for out in (args.json, args.csv):
        if out:
            check_writable(out, force=args.force)
    if args.output:
        from embedscope.viz.figures import figure_paths

        for pth in figure_paths(args.output):
            check_writable(pth, force=args.force)
    props = [s.strip() for s in args.properties.split(",") if s.strip()] if args.properties else None
    results = properties(args.files, names=args.names, split=args.split, max_r=args.max_r, properties=props,
                         metric=args.metric, progress=not args.no_progress, permutations=args.permutations,
                         seed=args.seed)
    order = {p: i for i, p in enumerate(r["property"] for r in results[0].table)}
    rows = sorted((row for r in results for row in r.table),
                  key=lambda row: (order.get(row["property"], len(order)), results.models.index(row["model"])))
    cap = results[0].provenance["cap"]
    perm = f"; permutation test: {args.permutations} shuffles, seed {args.seed}" if args.permutations else ""
    print(f"split {args.split}; {cap}; {args.metric} distance{perm}")
    print(format_table(rows, COLUMNS + (["perm_p_value"] if args.permutations else [])))
    if args.json:
        results.to_json(args.json, force=args.force)
    if args.csv:
        write_csv(args.csv, rows, list(ROW_FIELDS) + (list(PERM_FIELDS) if args.permutations else []),
                  force=args.force)
    if args.output:
        from embedscope.viz.figures import save_figure
        from embedscope.viz.properties import property_bars

        fig = property_bars(rows, title=f"{args.split} split, {cap}")
        png, _ = save_figure(fig, args.output, force=args.force)
        print(f"wrote {safe(png)} (+ .pdf)")
    return 0
