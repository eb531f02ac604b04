"""embedscope yoke A.h5 B.h5 [C.h5 ...] -o yoked.png"""

from __future__ import annotations

from embedscope.cli.common import add_figure_output, add_split, positive_float, positive_int, seed_int, thread_count
from embedscope.cli.output import add_table_parquet
from embedscope.tsne import DEFAULT_MAX_POINTS, MIN_PERPLEXITY


def add_parser(sub, parents):
    p = sub.add_parser("yoke", parents=parents, help="yoked t-SNE of the same images under two or more embeddings",
                       description="t-SNE maps of the same images under two or more embeddings (two models, or the "
                       "checkpoints of successive epochs, or layers), optimised together with the penalty "
                       "alpha * sum_i |y_i^k - y_i^(k+1)|^2 between each map and the next, so that corresponding "
                       "points land near each other (--yoke centroids: the class means instead, "
                       "alpha * sum_c n_c |mu_c^k - mu_c^(k+1)|^2; docs/methods.md §10). Rows are matched by path. "
                       "Writes OUT.png, OUT.pdf, the coordinates as OUT.csv (one row per image) and the settings, the "
                       "KL divergences, the mean displacement and the same per-image rows as OUT.json.")
    p.add_argument("files", nargs="+", metavar="EMB.h5",
                   help="two or more embedding files of the same images, in sequence order (each map is yoked "
                   "to the next)")
    p.add_argument("--alpha", type=float,
                   help="yoking strength alpha >= 0 (default: 0.01 / N, N the images mapped (after --max-points); "
                   "0 gives independent maps, whatever --yoke)")
    p.add_argument("--yoke", choices=["points", "centroids"], default="points",
                   help="what is yoked: each image to itself (points), or each class's mean (centroids: "
                   "the classes' layout agrees, the points within a class are free) (default: points)")
    add_split(p, default="test")
    p.add_argument("--max-points", type=positive_int, metavar="N",
                   help=f"map at most N points (default: {DEFAULT_MAX_POINTS}; a fixed-seed subsample, stratified by "
                   "class, and by split with --split all; the rows tsne --max-points keeps of a split; nested: the "
                   "points of N are among those of N + 1); a note says when the default left points out")
    p.add_argument("--perplexity", type=positive_float, default=30.0, help="t-SNE perplexity, at least 1 (default: 30)")
    p.add_argument("--seed", type=seed_int, default=0, help="random seed (default: 0)")
    p.add_argument("--n-iter", type=positive_int, default=500, help="iterations after early exaggeration (default: 500)")
    p.add_argument("--n-jobs", type=thread_count,
                   help="threads for the gradients (default: the cores this process may use less the busy ones, by "
                   "the 1-minute load average, from 1,000 images; one below); the maps are the same for any count")
    p.add_argument("--inset-class", metavar="CLASS",
                   help="add a zoom on this class (a class name, or a label number of the first file) below each map; "
                   "a class spread over more than 60%% of a map is zoomed at its densest part")
    p.add_argument("--names", nargs="+", metavar="NAME", help="panel titles, one per file (default: file names)")
    add_figure_output(p)
    add_table_parquet(p)
    p.set_defaults(func=run)
    return p


def _inset(arg, class_names, labels):
    from embedscope.errors import EmbedscopeError

    if arg is None:
        return None
    names = list(class_names)
    idx = None
    if arg in names:
        idx = names.index(arg)
    elif arg.lstrip("-").isdigit() and 0 <= int(arg) < len(names):
        idx = int(arg)
    if idx is None or not (labels == idx).any():
        raise EmbedscopeError(f"--inset-class {arg}: no such class among the mapped images")
    return idx


def run(args) -> int:
    import math

    from embedscope.analyses import yoke
    from embedscope.analyses.maps import SHOWN_YOKE
    from embedscope.cli.output import figure_outputs, parquet_output, print_wrote, refuse_figure_inputs, save_and_close
    from embedscope.errors import UsageError
    from embedscope.tables import format_table, key_value_rows
    from embedscope.text import safe
    from embedscope.viz import plot_yoked_maps
    from embedscope.viz.figures import use_agg

    if len(args.files) < 2:
        raise UsageError("yoke needs two or more embedding files (each map is yoked to the next)")
    if args.names is not None and len(args.names) != len(args.files):
        raise UsageError(f"--names needs one name per file: {len(args.files)} files, {len(args.names)} names")
    if args.names is not None and any(not n.strip() for n in args.names):  # (a panel without a title)
        i = next(i for i, n in enumerate(args.names) if not n.strip())
        raise UsageError(f"--names: name {i + 1} is empty: give each map a name (the title of its panel)")
    if args.alpha is not None and not (args.alpha >= 0 and math.isfinite(args.alpha)):
        raise UsageError(f"--alpha must be a finite number >= 0, got {args.alpha}")
    from embedscope.tsne.yoked import MAX_ALPHA

    if args.alpha is not None and args.alpha > MAX_ALPHA:  # (1e308 overflowed into NaN maps)
        raise UsageError(f"--alpha must be at most {MAX_ALPHA:g}, got {args.alpha:g}")
    if not args.perplexity >= MIN_PERPLEXITY:  # (below 1 openTSNE failed or gave one map for all)
        raise UsageError(f"--perplexity must be at least {MIN_PERPLEXITY:g}, got {args.perplexity:g}")
    refuse_figure_inputs(args.output, args.files)
    png, pdf, csv, js = figure_outputs(args.output, args.force)
    pq = parquet_output(args, (png, pdf, csv, js))
    max_points = args.max_points if args.max_points is not None else DEFAULT_MAX_POINTS
    if args.inset_class is not None:  # a wrong class is refused before the maps, not after minutes of work
        from embedscope.store import load

        first = load(args.files[0]).subset(args.split)
        cls = _inset(args.inset_class, first.class_names, first.labels)
        if max_points < first.n:  # fewer points than classes: a class
            # may keep no image, and the inset failed after the maps
            from embedscope.analyses.maps import subsample

            if not (subsample(first, max_points, args.seed, by_split=True).labels == cls).any():
                raise UsageError(f"--inset-class {args.inset_class}: --max-points {max_points} keeps none "
                                 f"of its images (fewer points than the split's {len(set(first.labels.tolist()))} "
                                 "classes): raise --max-points or choose another class")
    r = yoke(*args.files, split=args.split, alpha=args.alpha, yoke=args.yoke, max_points=max_points,
             perplexity=args.perplexity, seed=args.seed, n_iter=args.n_iter, n_jobs=args.n_jobs, names=args.names,
             progress=not args.no_progress)
    from embedscope.cli.output import perplexity_cap_notes

    a = r.arrays
    inset = _inset(args.inset_class, a["class_names"], a["labels"])
    info, cap_note = perplexity_cap_notes(r.provenance, len(a["labels"]))
    use_agg()
    fig = plot_yoked_maps(a["Ys"], a["labels"], names=a["names"], class_names=a["class_names"],
                          inset_class=inset, info=info, split=r.provenance["split"])
    save_and_close(fig, png, force=args.force)
    r.to_csv(csv, table=True, force=args.force)
    r.to_json(js, force=args.force)
    if pq is not None:
        r.to_parquet(pq, table=True, force=args.force)
    skip = {"kl"} if len(args.files) == 2 else set()  # two maps: kl_a and kl_b say it
    shown = {k: r.provenance[k] for k in SHOWN_YOKE if k in r.provenance and k not in skip}
    if "kl" in shown:  # one KL per map, in file order
        shown["kl"] = ", ".join(f"{v:.4f}" for v in shown["kl"])
    print(format_table(key_value_rows(shown, "setting"), ["setting", "value"]))
    if cap_note:
        print(cap_note)
    if args.max_points is None and "subsampled_from" in r.provenance:
        from embedscope.analyses.maps import default_cap_note

        print(default_cap_note(r["n"], r.provenance["subsampled_from"], "images"))
    from embedscope.fileio import same_file

    twice = [(i, j) for i in range(len(args.files)) for j in range(i + 1, len(args.files))
             if same_file(args.files[i], args.files[j])]
    for i, j in twice:  # allowed (a check of the yoke), but rarely meant
        print(f"note: maps {i + 1} and {j + 1} are of one file ({safe(args.files[i])}): the same embeddings")
    if args.alpha == 0 and args.yoke != "points":  # alpha 0 yokes nothing: what is yoked does not matter
        print(f"note: --alpha 0 gives independent maps: --yoke {args.yoke} changes nothing (the same maps as "
              "--yoke points)")
    print_wrote([png, pdf, csv, js] + ([pq] if pq is not None else []))
    return 0
