"""embedscope yoke A.h5 B.h5 -o yoked.png"""

from __future__ import annotations

from embedscope.cli.common import add_figure_output, add_split, positive_int


def add_parser(sub, parents):
    p = sub.add_parser("yoke", parents=parents, help="yoked t-SNE of the same images under two embeddings",
                       description="Two t-SNE maps of the same images under two embeddings (two models, epochs "
                       "or layers), optimised together with the penalty alpha * sum_i |y_i^A - y_i^B|^2 so "
                       "that corresponding points land near each other (METHODS.md §10). Rows are matched by "
                       "path. Writes OUT.png, OUT.pdf, the coordinates as OUT.csv and the settings as OUT.json.")
    p.add_argument("file_a", metavar="A.h5", help="first embedding file")
    p.add_argument("file_b", metavar="B.h5", help="second embedding file (the same images)")
    p.add_argument("--alpha", type=float,
                   help="yoking strength alpha >= 0 (default: 0.01 / N; 0 gives two independent maps)")
    add_split(p, default="test")
    p.add_argument("--max-points", type=positive_int, metavar="N",
                   help="map at most N points (fixed-seed subsample, stratified by class)")
    p.add_argument("--perplexity", type=float, default=30.0, help="t-SNE perplexity (default: 30)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--n-iter", type=positive_int, default=500, help="iterations after early exaggeration (default: 500)")
    p.add_argument("--n-jobs", type=int, default=1, help="threads for the gradients (default: 1)")
    p.add_argument("--inset-class", metavar="CLASS",
                   help="add a zoom on this class (a class name or label number) below each map")
    p.add_argument("--names", nargs=2, metavar=("NAME_A", "NAME_B"), help="panel titles (default: file names)")
    add_figure_output(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    import math
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg", force=True)
    import numpy as np

    from embedscope import store
    from embedscope.cli.tsne import output_paths, save_paper_figure, subsample
    from embedscope.errors import EmbedscopeError, UsageError
    from embedscope.tables import format_table, key_value_rows, write_csv, write_json
    from embedscope.viz.tsne import plot_yoked_tsne, yoked_tsne

    if args.alpha is not None and not (args.alpha >= 0 and math.isfinite(args.alpha)):
        raise UsageError(f"--alpha must be a finite number >= 0, got {args.alpha}")
    if not args.perplexity > 0:
        raise UsageError(f"--perplexity must be positive, got {args.perplexity}")
    png, pdf, csv, js = output_paths(args.output, args.force)
    a = store.load(args.file_a).subset(args.split)
    b = store.load(args.file_b).subset(args.split)
    a, b = store.match_by_path(a, b, args.file_a, args.file_b)
    idx = subsample(a, args.max_points, args.seed, by_split=True)
    if idx is not a:
        keep = np.isin(a.paths, idx.paths)
        a, b = a.select(keep), b.select(keep)
    if a.n < 6:
        raise EmbedscopeError(f"yoked t-SNE needs at least 6 images, the selection has {a.n}")
    inset = None
    if args.inset_class is not None:
        names_list = list(a.class_names)
        if args.inset_class in names_list:
            inset = names_list.index(args.inset_class)
        elif args.inset_class.lstrip("-").isdigit() and 0 <= int(args.inset_class) < len(names_list):
            inset = int(args.inset_class)
        if inset is None or not (a.labels == inset).any():
            raise EmbedscopeError(f"--inset-class {args.inset_class}: no such class among the mapped images")
    names = args.names
    if names is None:
        na, nb = Path(args.file_a).stem, Path(args.file_b).stem
        names = (na, nb) if na != nb else (str(args.file_a), str(args.file_b))
    Y_a, Y_b, info = yoked_tsne(a.embeddings, b.embeddings, alpha=args.alpha, perplexity=args.perplexity,
                                seed=args.seed, n_iter=args.n_iter, n_jobs=args.n_jobs,
                                progress=not args.no_progress, return_info=True)
    info.update(file_a=str(args.file_a), file_b=str(args.file_b), split=args.split, max_points=args.max_points)
    fig = plot_yoked_tsne(Y_a, Y_b, a.labels, names=names, class_names=a.class_names, inset_class=inset, info=info)
    d = np.linalg.norm(Y_a - Y_b, axis=1)
    rows = [{"path": a.paths[i], "split": a.split[i], "label": int(a.labels[i]), "class": a.class_names[a.labels[i]],
             "x_a": float(Y_a[i, 0]), "y_a": float(Y_a[i, 1]), "x_b": float(Y_b[i, 0]), "y_b": float(Y_b[i, 1]),
             "displacement": float(d[i])} for i in range(a.n)]
    save_paper_figure(fig, png, force=args.force)
    write_csv(csv, rows, list(rows[0]), force=args.force)
    write_json(js, info, force=args.force)
    shown = {k: info[k] for k in ("alpha", "alpha_times_n", "perplexity", "seed", "negative_gradient_method",
                                  "kl_a", "kl_b", "mean_displacement", "n")}
    print(format_table(key_value_rows(shown, "setting"), ["setting", "value"]))
    print(f"wrote {png}, {pdf}, {csv}, {js}")
    return 0
