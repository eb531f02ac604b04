"""embedscope neighbours EMB.h5 -o grid.png"""

from __future__ import annotations

from embedscope.cli.common import add_figure_output, positive_int, seed_int
from embedscope.names import SPLIT_CHOICES

#: the most query rows one figure holds: each row is a strip of pictures and two-line captions about
#: 1.55 inches high at 200 dpi, so 100 rows make a PNG of about 1540 x 31,000 pixels (half a minute to
#: a minute to draw); beyond that the
#: picture grows past what image viewers (and Pillow) open
MAX_QUERIES = 100
#: the queries of a figure unless --queries says otherwise
DEFAULT_QUERIES = 8
#: the most retrievals per row (the figure is 1.25 inches wider per retrieval)
MAX_RETRIEVALS = 20


def add_parser(sub, parents):
    p = sub.add_parser("neighbours", parents=parents, help="picture of queries and their top-k retrievals",
                       description="Query images with their k nearest retrievals (the query itself excluded), "
                       "framed green for the query's class and red for another (Roth et al.'s sample recoveries). "
                       "Photos are read from the data set's folder (the file's root, or --root); the digits are "
                       "drawn from their 8x8 pixels, the generated shapes set from its cache. Writes OUT.png and "
                       "OUT.pdf.")
    p.add_argument("file", metavar="EMB.h5", help="embedding file (.h5)")
    p.add_argument("--split", default="test", choices=SPLIT_CHOICES,
                   help="split of the queries: train, test, val, query, gallery or all = every row (default: test)")
    p.add_argument("--reference-split", choices=SPLIT_CHOICES,
                   help="split searched (default: the query split; gallery for --split query when the file has "
                   "gallery rows)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--queries", type=positive_int, default=None, metavar="N",
                   help=f"number of random queries, one row each, at most {MAX_QUERIES} (default: {DEFAULT_QUERIES}; a split "
                   "with fewer rows gives them all)")
    g.add_argument("--paths-file", metavar="F",
                   help="the queries: one path per line, as stored in the file (read as saliency's: a line that "
                   "starts with # is a comment, a blank line is skipped; a # after a path is part of the path; a path "
                   "listed twice is refused)")
    p.add_argument("--n-retrievals", type=positive_int, default=5, metavar="K",
                   help=f"retrievals per query, at most {MAX_RETRIEVALS} (default: 5)")
    p.add_argument("--root", metavar="DIR", help="data set folder of the photos (default: the file's root "
                   "attribute; the digits are drawn from their pixels and read no folder, the generated shapes set from "
                   "its cache)")
    p.add_argument("--metric", default="cosine", choices=["cosine", "euclidean"], help="ranking (default: cosine)")
    p.add_argument("--seed", type=seed_int, default=None,
                   help="seed of the random queries (default: 0; not with --paths-file, which names them)")
    add_figure_output(p)
    p.set_defaults(func=run)
    return p


def _root(args, es) -> str | None:
    """The images' folder, checked before the search: --root, else the file's ``root`` attribute
    (recorded at embed time). A folder that is not there is one line naming where it came from (a
    recorded one is not called a --root the user never gave). None for the digits (drawn from their
    pixels, as :func:`~embedscope.data.thumbnails.load_thumbnails` draws them); photos of a file that
    records no folder need --root (a usage error, as the pictures' reader's)."""
    from pathlib import Path

    from embedscope.errors import EmbedscopeError, UsageError
    from embedscope.text import safe

    # (an imported file's dataset is its source's name: a 'digits.npy' of photos is no built-in digits)
    dataset = None if es.attrs.get("imported") else es.attrs.get("dataset")
    if dataset == "digits" or (es.n and all(str(p).startswith("digits/") for p in es.paths)):
        if args.root is not None:  # it was silently not used
            print(f"note: --root {safe(args.root)} is not read: the digits are drawn from their 8x8 pixels")
        return None
    from embedscope.data.thumbnails import generated_shapes_key

    if es.n and all(generated_shapes_key(p) is not None for p in es.paths):
        # the generated shapes set (embed --dataset shapes without a made folder): its images live in the
        # set's cache, not in a folder of files; the recorded root, when there is one, is that cache. It
        # was refused ("the file does not record the images' folder"), with no folder a --root could name
        root = args.root if args.root is not None else (es.attrs.get("root") or None)
        if args.root is not None and not Path(args.root).is_dir():
            raise EmbedscopeError(f"--root {args.root}: not a folder")
        keys = {generated_shapes_key(p) for p in es.paths}
        if args.root is not None and not all((Path(args.root) / k / "shapes.npz").is_file() for k in keys):
            # (it was silently not used: the pictures came from the default cache)
            print(f"note: --root {safe(args.root)} does not hold the generated shapes set: its pictures are "
                  "read from the default cache (the same pixels)")
        return str(root) if root and Path(str(root)).is_dir() else None
    if args.root is not None:
        if not Path(args.root).is_dir():
            raise EmbedscopeError(f"--root {args.root}: not a folder")
        return args.root
    recorded = es.attrs.get("root") or None
    if not recorded and es.n and all(Path(str(p)).is_absolute() for p in es.paths):
        return str(Path(str(es.paths[0])).anchor)  # (absolute image paths, e.g. an imported file's: no root needed)
    if not recorded:
        raise UsageError("the file does not record the images' folder: give --root DIR (the data set's root)")
    if not Path(str(recorded)).is_dir():
        raise EmbedscopeError(f"the file's image root {recorded} (recorded at embed time) is not a folder: "
                              "give --root DIR")
    return str(recorded)


def run(args) -> int:
    from embedscope.analyses._sources import as_set
    from embedscope.analyses.neighbours import neighbours_figure
    from embedscope.cli.output import print_wrote
    from embedscope.errors import UsageError
    from embedscope.fileio import check_writable
    from embedscope.text import safe
    from embedscope.viz.figures import figure_paths

    # the figure's size, then the outputs, before any work
    if args.paths_file is not None and args.seed is not None:  # it was silently not used
        raise UsageError(f"--seed {args.seed} draws random queries: --paths-file names the queries "
                         "(leave out --seed)")
    seed_given = args.seed is not None
    if args.seed is None:
        args.seed = 0
    asked = args.queries is not None  # (the default, 8, says nothing when a split has fewer rows)
    if args.queries is None:
        args.queries = DEFAULT_QUERIES
    if args.paths_file is None and args.queries > MAX_QUERIES:
        raise UsageError(f"--queries {args.queries}: a figure holds at most {MAX_QUERIES} queries (one row each)")
    if args.n_retrievals > MAX_RETRIEVALS:
        raise UsageError(f"--n-retrievals {args.n_retrievals}: a figure holds at most {MAX_RETRIEVALS} "
                         "retrievals per query")
    for p in figure_paths(args.output, option="-o"):
        check_writable(p, force=args.force)
    paths = None
    if args.paths_file is not None:  # read as saliency's: blank lines skipped, a line starting with # a comment
        from embedscope.fileio import read_paths_file

        paths = read_paths_file(args.paths_file)
        if len(paths) > MAX_QUERIES:
            raise UsageError(f"--paths-file {args.paths_file} lists {len(paths)} queries: a figure holds "
                             f"at most {MAX_QUERIES} (one row each)")
    es = as_set(args.file)
    png, pdf, ex = neighbours_figure(es, args.output, split=args.split, reference_split=args.reference_split,
                                     queries=args.queries, paths=paths, k=args.n_retrievals, root=_root(args, es),
                                     metric=args.metric, seed=args.seed, force=args.force,
                                     progress=not args.no_progress)
    k = args.n_retrievals
    n = len(ex.query_paths)
    how = f" (drawn with --seed {ex.seed})" if ex.seed is not None else " (from --paths-file)"
    what = f"{n} {'query' if n == 1 else 'queries'}"
    if paths is None and asked and n < args.queries:  # the split has fewer rows than asked for: all of them
        where = "the file has" if ex.query_split == "all" else "the split has"
        what += f" ({args.queries} asked; {where} {n})"
    print(f"{what}, top-{k} in '{ex.reference_split}': "
          f"{int(ex.correct.sum())} of {ex.correct.size} retrieval{'' if ex.correct.size == 1 else 's'} of the "
          f"query's class{how}")
    rows = es.n if ex.query_split == "all" else int((es.split == ex.query_split).sum())
    if paths is None and seed_given and n == rows:  # every row is a query: the seed chose nothing
        print(f"note: --seed {args.seed} is not used: every one of the {rows} rows of the "
              f"{'file' if ex.query_split == 'all' else 'split'} is a query")
    for note in ex.notes:  # (an unnormalised model ranked by another distance than its own)
        print(safe(f"note: {note}"))
    print_wrote([png, pdf])
    return 0
