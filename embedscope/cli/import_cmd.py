"""embedscope import SRC -o OUT.h5"""

from __future__ import annotations

from embedscope.cli.common import add_force, finite_float

#: options refused empty, as the file names are (embedscope.cli._refuse_empty_names): "" names no key or
#: column and no file (``--embeddings ""`` was ignored, the default embeddings taken without a word)
NONEMPTY_OPTIONS = ("embeddings", "labels", "split", "paths", "class_names", "properties")


def add_parser(sub, parents):
    p = sub.add_parser(
        "import", parents=parents, help="import embeddings made elsewhere (npy, npz, pt, safetensors, h5, parquet, csv, tsv)",
        description="Turn embeddings from another tool into an embedscope HDF5 file: .npy, .npz, .pt/.pth (tensors "
        "or a dict of tensors, read without running code), .safetensors, .h5/.hdf5 (another tool's datasets), "
        ".parquet, .csv, .tsv. Labels, split, paths and class names come from a key/column of the source or "
        "from a file (.npy, .txt one per line, one-column .csv); a FILE|KEY value that names both is refused: "
        "key:NAME is always the key/column, ./NAME the file. See docs/import.md.")
    p.add_argument("source", metavar="SRC", help="the embeddings file")
    p.add_argument("-o", "--output", required=True, metavar="OUT.h5", help="output HDF5 file")
    p.add_argument("--embeddings", metavar="KEY",
                   help="key/column of the embeddings, or PREFIX* for numeric columns (default: embeddings, "
                   "features, X, ..., the only 2-D array, or a table's remaining numeric columns, less a "
                   "leading unnamed row-index column 0..N-1; the columns used are printed and recorded)")
    p.add_argument("--labels", metavar="FILE|KEY",
                   help="labels: a file or a key/column (default: labels, label, y, targets, target, class, classes)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--split", metavar="FILE|KEY",
                   help="split per row (train, test, val, query, gallery): a file or a key/column "
                   "(default: a 'split' key/column if present, else every row is 'test')")
    g.add_argument("--split-by-class", type=finite_float, metavar="FRACTION",
                   help="zero-shot split: of the C classes that have rows, the first ceil(FRACTION x C) (sorted, or in "
                   "--class-names order) train, the rest test (it replaces a split column of the source, and "
                   "says so on stderr)")
    p.add_argument("--paths", metavar="FILE|KEY",
                   help="item ids / image paths per row: a file or a key/column (default: paths, path, ids, id, "
                   "filenames, filename; else 0, 1, ...)")
    p.add_argument("--class-names", metavar="FILE|KEY",
                   help="class names, a file or a key: integer labels index into them, text labels are looked up in them "
                   "(default: none, the distinct labels sorted, each named by its value)")
    p.add_argument("--properties", nargs="+", default=[], metavar="COLUMN",
                   help="columns to keep as properties (not 'class': the labels are analysed under that name)")
    add_force(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from pathlib import Path

    from embedscope.cli.output import check_suffix, refuse_inputs
    from embedscope.importers import import_to_file


    # FILE|KEY options: those naming an existing file are read from it
    files = [x for x in (args.labels, args.split, args.paths, args.class_names) if x and Path(x).exists()]
    refuse_inputs([args.output], [args.source, *files])
    check_suffix(args.output, "-o", ".h5")  # (-o out.csv wrote an HDF5 file under a CSV's name)
    import sys
    import warnings

    from embedscope.importers import SplitReplaced
    from embedscope.text import safe

    notes: list[str] = []  # one line: the columns (or key) that formed the embedding, those left out
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SplitReplaced)
        out = import_to_file(args.source, args.output, force=args.force, embeddings=args.embeddings,
                             labels=args.labels, split=args.split, split_by_class=args.split_by_class,
                             paths=args.paths, class_names=args.class_names, properties=args.properties,
                             notes=notes)
    for w in caught:
        if issubclass(w.category, SplitReplaced):  # one line on stderr: the source's own split was replaced
            print(f"embedscope import: note: {safe(w.message)}", file=sys.stderr)
        else:  # anything else warned as it would have been
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    for line in notes:  # (column names from the file: escaped)
        print(safe(line))
    print(f"wrote {safe(out)}")
    return 0
