"""embedscope tsne EMB.h5 [--joint] -o tsne.png"""

from __future__ import annotations

from embedscope.cli.common import add_figure_output, positive_float, positive_int, seed_int, thread_count
from embedscope.cli.output import add_table_parquet
from embedscope.names import SPLIT_CHOICES
from embedscope.tsne import DEFAULT_MAX_POINTS, MIN_PERPLEXITY


def add_parser(sub, parents):
    p = sub.add_parser("tsne", parents=parents, help="t-SNE map of an embedding file (joint train+test with --joint)",
                       description="t-SNE map (openTSNE, its defaults: perplexity 30, PCA initialisation) of one "
                       "split coloured by class, or with --joint one map of train and test together in three "
                       "panels: train by class, test by class, both (train black, test orange) (docs/methods.md §10). "
                       "Writes OUT.png, OUT.pdf, the coordinates as OUT.csv (one row per point) and the settings, the KL "
                       "divergence and the same per-point rows as OUT.json.")
    p.add_argument("file", metavar="EMB.h5", help="embedding file (.h5)")
    p.add_argument("--joint", action="store_true", help="one map of the train and test splits together")
    p.add_argument("--split", choices=SPLIT_CHOICES, help="rows to map without --joint (default: test)")
    p.add_argument("--max-points", type=positive_int, metavar="N",
                   help=f"map at most N points (default: {DEFAULT_MAX_POINTS}; a fixed-seed subsample, stratified "
                   "by class and split, nested: the points of N are among those of N + 1); a note says when the "
                   "default left points out")
    p.add_argument("--perplexity", type=positive_float, default=30.0, help="t-SNE perplexity, at least 1 (default: 30)")
    p.add_argument("--seed", type=seed_int, default=0, help="random seed (subsample, PCA init, neighbours; default: 0)")
    p.add_argument("--n-iter", type=positive_int, default=500,
                   help="iterations after early exaggeration (default: 500, openTSNE's)")
    p.add_argument("--n-jobs", type=thread_count,
                   help="threads for openTSNE (default: the cores this process may use less the busy ones, by "
                   "the 1-minute load average, from 1,000 points; one below); the map is the same for any count")
    add_figure_output(p)
    add_table_parquet(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from embedscope.analyses import tsne
    from embedscope.analyses.maps import SHOWN_TSNE, default_cap_note
    from embedscope.cli.output import (
        figure_outputs,
        parquet_output,
        perplexity_cap_notes,
        print_wrote,
        refuse_figure_inputs,
        save_and_close,
    )
    from embedscope.errors import UsageError
    from embedscope.tables import format_table, key_value_rows
    from embedscope.viz import plot_joint_tsne, plot_tsne
    from embedscope.viz.figures import use_agg

    if args.joint and args.split is not None:
        raise UsageError("--joint maps both splits; leave out --split")
    if not args.perplexity >= MIN_PERPLEXITY:  # (below 1 openTSNE failed or gave one map for all)
        raise UsageError(f"--perplexity must be at least {MIN_PERPLEXITY:g}, got {args.perplexity:g}")
    refuse_figure_inputs(args.output, [args.file])
    png, pdf, csv, js = figure_outputs(args.output, args.force)
    pq = parquet_output(args, (png, pdf, csv, js))
    max_points = args.max_points if args.max_points is not None else DEFAULT_MAX_POINTS
    r = tsne(args.file, joint=args.joint, split=args.split, max_points=max_points, perplexity=args.perplexity,
             seed=args.seed, n_iter=args.n_iter, n_jobs=args.n_jobs, progress=not args.no_progress)
    use_agg()
    a = r.arrays
    info, cap_note = perplexity_cap_notes(r.provenance, r["points"])
    if args.joint:
        fig = plot_joint_tsne(a["Y_train"], a["Y_test"], a["labels_train"], a["labels_test"],
                              class_names=a["class_names"], info=info)
    else:  # the title ("test: 30 points, 1 class") made by the figure, as the joint figure's
        fig = plot_tsne(a["Y"], a["labels"], class_names=a["class_names"], info=info, split=r.provenance["split"])
    save_and_close(fig, png, force=args.force)
    r.to_csv(csv, table=True, force=args.force)
    r.to_json(js, force=args.force)
    if pq is not None:
        r.to_parquet(pq, table=True, force=args.force)
    shown = {k: r.provenance[k] for k in SHOWN_TSNE if k in r.provenance}
    shown["points"] = r["points"]
    print(format_table(key_value_rows(shown, "setting"), ["setting", "value"]))
    if cap_note:
        print(cap_note)
    if args.max_points is None and "subsampled_from" in r.provenance:
        print(default_cap_note(r["points"], r.provenance["subsampled_from"]))
    print_wrote([png, pdf, csv, js] + ([pq] if pq is not None else []))
    return 0
