"""embedscope scatter EMB.h5 -o scatter.png"""

from __future__ import annotations

from embedscope.cli.common import add_figure_output


def add_parser(sub, parents):
    p = sub.add_parser("scatter", parents=parents, help="same-vs-different similarity scatter (train and test)",
                       description="For every point, the similarity to its most similar same-class point (x) and "
                       "to its most similar other-class point (y), within its split; points below the diagonal "
                       "(cyan) are nearer their own class, the share of them is R@1 (METHODS.md §10, Xuan §2.4). "
                       "Writes OUT.png, OUT.pdf, the similarities as OUT.csv and the summary as OUT.json.")
    p.add_argument("file", metavar="EMB.h5", help="embedding file (.h5)")
    p.add_argument("--split", default="all", choices=["train", "test", "all"],
                   help="panels to draw: train, test or all = both present (default: all)")
    p.add_argument("--metric", default="cosine", choices=["cosine", "dot", "euclidean"],
                   help="similarity (default: cosine; euclidean uses minus the distance)")
    add_figure_output(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import numpy as np

    from embedscope import store
    from embedscope.cli.tsne import output_paths, save_paper_figure
    from embedscope.tables import format_table, write_csv, write_json
    from embedscope.viz.scatter import nearest_same_different, plot_same_different, share_below_diagonal

    png, pdf, csv, js = output_paths(args.output, args.force)
    es = store.load(args.file)
    splits = [args.split] if args.split != "all" else [s for s in ("train", "test") if (es.split == s).any()]
    panels, rows, summary = {}, [], []
    for s in splits:
        part = es.subset(s)
        s_same, s_diff = nearest_same_different(part.embeddings, part.labels, metric=args.metric,
                                                progress=not args.no_progress)
        panels[s] = (s_same, s_diff)
        share, lone = share_below_diagonal(s_same, s_diff)
        summary.append({"split": s, "N": part.n, "classes": int(len(np.unique(part.labels))), "left_out": lone,
                        "below_diagonal_R@1": share})
        for i in range(part.n):
            ok = np.isfinite(s_same[i]) and np.isfinite(s_diff[i])
            rows.append({"path": part.paths[i], "split": s, "label": int(part.labels[i]),
                         "class": es.class_names[part.labels[i]], "s_same": float(s_same[i]),
                         "s_diff": float(s_diff[i]), "below_diagonal": int(s_diff[i] < s_same[i]) if ok else ""})
    fig = plot_same_different(panels, metric=args.metric)
    save_paper_figure(fig, png, force=args.force)
    write_csv(csv, rows, ["path", "split", "label", "class", "s_same", "s_diff", "below_diagonal"], force=args.force)
    write_json(js, {"file": str(args.file), "metric": args.metric, "splits": summary}, force=args.force)
    print(format_table(summary, ["split", "N", "classes", "left_out", "below_diagonal_R@1"]))
    print(f"wrote {png}, {pdf}, {csv}, {js}")
    return 0
