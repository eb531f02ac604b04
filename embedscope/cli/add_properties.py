"""embedscope add-properties EMB.h5 props.csv [--force]: bring your own per-image properties."""

from __future__ import annotations


def add_parser(sub, parents):
    p = sub.add_parser("add-properties", parents=parents, help="store per-image properties from a CSV/Parquet table",
                       description="Join a per-image table (CSV, TSV or Parquet with a 'path' column) on the "
                       "file's image paths and store every other column as /properties/<name> (the file is "
                       "rewritten atomically). Every image needs exactly one row.")
    p.add_argument("file", metavar="EMB.h5", help="embedding file (.h5), updated in place")
    p.add_argument("table", metavar="TABLE", help="CSV, TSV or Parquet table with a 'path' column")
    p.add_argument("--force", action="store_true", help="replace properties the file already has")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from embedscope.data.properties import add_properties_to_file
    from embedscope.errors import UsageError
    from embedscope.fileio import same_file
    from embedscope.text import safe

    if same_file(args.table, args.file):  # it failed reading the HDF5 file as a table ("is not UTF-8 text")
        # (the path as given: the error line is escaped as a whole, once)
        raise UsageError(f"the table {args.table} is the embedding file itself: give the CSV, TSV or "
                         "Parquet table of properties")

    added = add_properties_to_file(args.file, args.table, force=args.force)
    # the names are the table's column names: control characters shown escaped
    print(f"{safe(args.file)}: added propert{'ies' if len(added) > 1 else 'y'} {', '.join(safe(a) for a in added)}")
    import numpy as np

    from embedscope.store import load

    props = load(args.file).properties
    for name in added:  # NR-Prec (docs/methods.md §9) ranks by shared values: a continuous column has none
        values = np.asarray(props[name])
        if len(values) > 1 and len(np.unique(values)) == len(values):
            print(f"note: every image has its own value of '{safe(name)}': NR-Prec needs values shared by several "
                  "images (bin it first, e.g. into quantiles)")
    return 0
