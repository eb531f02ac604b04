"""embedscope neighbours EMB.h5 -o grid.png"""

from __future__ import annotations

from embedscope.cli.common import add_force, positive_int, seed_int
from embedscope.names import SPLITS


def add_parser(sub, parents):
    p = sub.add_parser("neighbours", parents=parents, help="picture of queries and their top-k retrievals",
                       description="Query images with their k nearest retrievals (the query itself excluded), "
                       "framed green for the query's class and red for another (Roth et al.'s sample recoveries). "
                       "Photos are read from the data set's folder (the file's root, or --root); the digits are "
                       "drawn from their 8x8 pixels. Writes OUT.png and OUT.pdf.")
    p.add_argument("file", metavar="EMB.h5", help="embedding file (.h5)")
    p.add_argument("--split", default="test", choices=SPLITS, help="split of the queries (default: test)")
    p.add_argument("--reference-split", choices=SPLITS,
                   help="split searched (default: the query split; gallery for --split query)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--queries", type=positive_int, default=8, help="number of random queries (default: 8)")
    g.add_argument("--paths-file", metavar="F",
                   help="the queries: one path per line, as stored in the file (read as saliency's: a line that "
                   "starts with # is a comment, a blank line is skipped; a # after a path is part of the path)")
    p.add_argument("--n-retrievals", type=positive_int, default=5, help="retrievals per query (default: 5)")
    p.add_argument("--root", metavar="DIR", help="data set folder (default: the file's root attribute)")
    p.add_argument("--metric", default="cosine", choices=["cosine", "euclidean"], help="ranking (default: cosine)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the random queries (default: 0)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png", help="figure (PNG and PDF are written)")
    add_force(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from embedscope.cli.output import print_wrote
    from embedscope.viz.neighbours import neighbours_figure

    png, pdf, ex = neighbours_figure(
        args.file, args.output, split=args.split, reference_split=args.reference_split, queries=args.queries,
        paths_file=args.paths_file, k=args.n_retrievals, root=args.root, metric=args.metric, seed=args.seed, force=args.force)
    how = f" (drawn with --seed {ex.seed})" if ex.seed is not None else " (from --paths-file)"
    n = len(ex.query_paths)
    print(f"{n} {'query' if n == 1 else 'queries'}, top-{args.n_retrievals} in '{ex.reference_split}': "
          f"{int(ex.correct.sum())} of {ex.correct.size} retrievals of the query's class{how}")
    print_wrote([png, pdf])
    return 0
