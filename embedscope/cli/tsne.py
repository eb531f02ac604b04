"""embedscope tsne EMB.h5 [--joint] -o tsne.png"""

from __future__ import annotations

from embedscope.cli.common import add_figure_output, positive_int


def add_parser(sub, parents):
    p = sub.add_parser("tsne", parents=parents, help="t-SNE map of an embedding file (joint train+test with --joint)",
                       description="t-SNE map (openTSNE, its defaults: perplexity 30, PCA initialisation) of one "
                       "split coloured by class, or with --joint one map of train and test together in three "
                       "panels: train by class, test by class, both (train red, test blue) (METHODS.md §10). "
                       "Writes OUT.png, OUT.pdf, the coordinates as OUT.csv and the settings as OUT.json.")
    p.add_argument("file", metavar="EMB.h5", help="embedding file (.h5)")
    p.add_argument("--joint", action="store_true", help="one map of the train and test splits together")
    p.add_argument("--split", choices=["train", "test", "all"],
                   help="rows to map without --joint (default: test)")
    p.add_argument("--max-points", type=positive_int, metavar="N",
                   help="map at most N points (fixed-seed subsample, stratified by class and split)")
    p.add_argument("--perplexity", type=float, default=30.0, help="t-SNE perplexity (default: 30)")
    p.add_argument("--seed", type=int, default=0, help="random seed (subsample, PCA init, neighbours; default: 0)")
    p.add_argument("--n-iter", type=positive_int, default=500,
                   help="iterations after early exaggeration (default: 500, openTSNE's)")
    p.add_argument("--n-jobs", type=int, default=1, help="threads for openTSNE (default: 1)")
    add_figure_output(p)
    p.set_defaults(func=run)
    return p


def output_paths(out, force: bool):
    """(png, pdf, csv, json) beside each other; all refused up front if they exist without --force."""
    from embedscope.fileio import check_writable
    from embedscope.viz.figures import figure_paths

    png, pdf = figure_paths(out)
    csv, js = png.with_suffix(".csv"), png.with_suffix(".json")
    for p in (png, pdf, csv, js):
        check_writable(p, force=force)
    return png, pdf, csv, js


def save_paper_figure(fig, png, *, force: bool):
    """save_figure (PNG at 200 dpi and PDF, tight bounding box), then close the figure."""
    import matplotlib.pyplot as plt

    from embedscope.viz.figures import save_figure

    try:
        return save_figure(fig, png, force=force)
    finally:
        plt.close(fig)


def subsample(es, max_points, seed, by_split: bool):
    """Stratified (by class, and by split when ``by_split``) fixed-seed subsample of an EmbeddingSet."""
    import numpy as np

    from embedscope.viz.tsne import stratified_subsample

    if max_points is None or max_points >= es.n:
        return es
    key = es.labels if not by_split else np.char.add(np.char.add(es.split.astype(str), ":"), es.labels.astype(str))
    return es.select(stratified_subsample(key, max_points, seed=seed))


def run(args) -> int:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import numpy as np

    from embedscope import store
    from embedscope.errors import EmbedscopeError, UsageError
    from embedscope.tables import format_table, key_value_rows, write_csv, write_json
    from embedscope.viz.tsne import joint_tsne, plot_joint_tsne, plot_tsne, single_tsne

    if args.joint and args.split is not None:
        raise UsageError("--joint maps both splits; leave out --split")
    if not args.perplexity > 0:
        raise UsageError(f"--perplexity must be positive, got {args.perplexity}")
    png, pdf, csv, js = output_paths(args.output, args.force)
    es = store.load(args.file)
    progress = not args.no_progress
    common = dict(perplexity=args.perplexity, seed=args.seed, n_iter=args.n_iter, n_jobs=args.n_jobs,
                  progress=progress, return_info=True)
    names = es.class_names
    if args.joint:
        for s in ("train", "test"):
            if not (es.split == s).any():
                raise EmbedscopeError(f"{args.file}: --joint needs train and test rows, the file has no {s} rows")
        es = subsample(es, args.max_points, args.seed, by_split=True)
        tr, te = es.subset("train"), es.subset("test")
        Y_tr, Y_te, info = joint_tsne(tr.embeddings, te.embeddings, **common)
        fig = plot_joint_tsne(Y_tr, Y_te, tr.labels, te.labels, class_names=names, info=info)
        parts = [(tr, Y_tr), (te, Y_te)]
    else:
        es = es.subset(args.split or "test")
        es = subsample(es, args.max_points, args.seed, by_split=False)
        if es.n < 6:
            raise EmbedscopeError(f"t-SNE needs at least 6 points, the selection has {es.n}")
        Y, info = single_tsne(es.embeddings, **common)
        fig = plot_tsne(Y, es.labels, class_names=names, info=info,
                        title=f"{args.split or 'test'}: {es.n} points, {len(np.unique(es.labels))} classes")
        parts = [(es, Y)]
    info.update(file=str(args.file), max_points=args.max_points, joint=bool(args.joint))
    rows = []
    for part, Y in parts:
        for i in range(part.n):
            rows.append({"path": part.paths[i], "split": part.split[i], "label": int(part.labels[i]),
                         "class": names[part.labels[i]], "x": float(Y[i, 0]), "y": float(Y[i, 1])})
    save_paper_figure(fig, png, force=args.force)
    write_csv(csv, rows, ["path", "split", "label", "class", "x", "y"], force=args.force)
    write_json(js, info, force=args.force)
    shown = {k: info[k] for k in ("method", "perplexity", "seed", "initialization", "early_exaggeration",
                                  "early_exaggeration_iter", "n_iter", "kl_divergence") if k in info}
    shown["points"] = len(rows)
    print(format_table(key_value_rows(shown, "setting"), ["setting", "value"]))
    print(f"wrote {png}, {pdf}, {csv}, {js}")
    return 0
