"""embedscope add-properties EMB.h5 props.csv [--force]: bring your own per-image properties."""

from __future__ import annotations


def add_parser(sub, parents):
    p = sub.add_parser("add-properties", parents=parents, help="store per-image properties from a CSV/Parquet table",
                       description="Join a per-image table (CSV, TSV or Parquet with a 'path' column) on the "
                       "file's image paths and store every other column as /properties/<name> (the file is "
                       "rewritten atomically). Every image needs exactly one row. A CSV/TSV is read as UTF-8, "
                       "its cells as written (0001 stays the text 0001; a column of numbers is numeric, inf "
                       "refused). A file without write permission is refused; docs/properties.md.")
    p.add_argument("file", metavar="EMB.h5", help="embedding file (.h5), updated in place")
    p.add_argument("table", metavar="TABLE", help="CSV, TSV or Parquet table with a 'path' column")
    p.add_argument("--force", action="store_true",
                   help="replace properties the file already has (a replaced property keeps the HDF5 attributes "
                   "its old dataset had, e.g. units or a description another tool wrote: the table gives none; "
                   "the command names them)")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from embedscope.data.properties import _add_properties
    from embedscope.errors import UsageError
    from embedscope.fileio import same_file
    from embedscope.text import safe

    # (an empty name: a usage error before this, embedscope.cli._refuse_empty_names)
    if same_file(args.table, args.file):  # it failed reading the HDF5 file as a table ("is not UTF-8 text")
        # (the path as given: the error line is escaped as a whole, once)
        raise UsageError(f"the table {args.table} is the embedding file itself: give the CSV, TSV or "
                         "Parquet table of properties")

    import os

    try:  # (a file of several names, hard links: the update writes a new file under this name only)
        links = os.stat(args.file).st_nlink
    except OSError:
        links = 1  # (the reader says why)
    props, replaced, kept, not_kept = _add_properties(args.file, args.table, force=args.force)
    added = list(props)
    # what happened to each name, in one line ("added" said so of a property --force replaced); the names
    # are the table's column names: control characters shown escaped
    parts = [f"{verb} propert{'ies' if len(names) > 1 else 'y'} {_names(names)}"
             for verb, names in (("added", [n for n in added if n not in replaced]), ("replaced", replaced)) if names]
    print(f"{safe(args.file)}: {'; '.join(parts)}")
    if kept:  # (attributes of the old datasets, kept: they may describe the old values only)
        shown = [f"'{safe(k)}' ({_names(a, 'attributes')})" for k, a in kept.items()]
        more = f", ... ({len(shown)} properties)" if len(shown) > 6 else ""
        word = "property keeps its" if len(kept) == 1 else "properties keep their"
        print(f"note: the replaced {word} HDF5 attributes: {', '.join(shown[:6])}{more} (remove any that "
              "described the old values only)")
    if not_kept:  # (object references point into the old file: copied, they named nothing or another object)
        shown = [f"'{safe(k)}' ({_names(a, 'attributes')})" for k, a in not_kept.items()]
        more = f", ... ({len(shown)} properties)" if len(shown) > 6 else ""
        print(f"note: HDF5 references of the replaced propert{'y' if len(not_kept) == 1 else 'ies'} not kept: "
              f"{', '.join(shown[:6])}{more} (they point into the old file; a dimension scale must be attached again)")
    if links > 1:  # the other names kept the old file without a word
        others = "the other name still names" if links == 2 else f"the other {links - 1} names still name"
        print(f"note: {safe(args.file)} had {links} names (hard links): the update wrote a new file under this name, "
              f"{others} the old one, without these properties")
    import numpy as np

    # NR-Prec (docs/methods.md §9) ranks by shared values: a continuous column has none (one note for all
    # such columns: a table of 1000 measurements printed 1000 notes). (The values stored: the file is not
    # read again.)
    own = [name for name in added if len(props[name]) > 1 and len(np.unique(np.asarray(props[name]))) == len(props[name])]
    if own:
        print(f"note: every image has its own value of {_names(own, 'properties', quote=True)}: NR-Prec needs values "
              f"shared by several images (bin {'it' if len(own) == 1 else 'them'} first, e.g. into quantiles)")
    return 0


def _names(names: list[str], what: str = "", *, quote: bool = False, most: int = 12) -> str:
    """``a, b`` / ``c0, c1, ..., c2999 (3000 properties)`` (a wide table: not every name on one line;
    ``embedscope info`` lists them), escaped for the terminal."""
    from embedscope.text import safe

    shown = [f"'{safe(n)}'" if quote else safe(n) for n in names]
    if len(shown) <= most:
        return ", ".join(shown)
    return ", ".join([*shown[:most - 2], "...", shown[-1]]) + f" ({len(names)}{' ' + what if what else ''})"
