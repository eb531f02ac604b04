"""embedscope properties EMB.h5 [MORE.h5 ...] -o props.png: which image properties each embedding clusters."""

from __future__ import annotations

import argparse

from embedscope.analyses.result import (  # noqa: F401  (P_COLUMNS, P_FLOOR: where they were)
    P_COLUMNS,
    P_FLOOR,
    PROPERTY_COLUMNS,
    shown_p_values,
)
from embedscope.cli.common import add_force, add_no_progress, add_split, nonnegative_int, positive_int, seed_int
from embedscope.text import SHOWN_NAME  # (longer names shortened on the terminal)

COLUMNS = list(PROPERTY_COLUMNS)  # the terminal table's columns, as print(result) of the API shows them
def add_parser(sub, parents):
    p = sub.add_parser(
        "properties", parents=parents, help="which image properties an embedding clusters (NR-Prec)",
        description="R-Precision and Normalized R-Precision (Kobs et al. 2021, Eq. 4-5) of every image "
        "property of the files (and the class), with the ceiling of perfect clustering, a p-value "
        "against the hypergeometric null (queries taken as independent: approximate and liberal) and, with "
        "--permutations, a permutation test. Table sorted by NR-Prec; bar chart with the paper's 2.576 line. "
        "Numbers the data leave undefined (every value lone; one value; a collapsed model, every row the same "
        "point) show '–' with one line saying why. Definitions: docs/methods.md section 9.")
    p.add_argument("files", nargs="+", metavar="EMB.h5", help="embedding file(s) (.h5)")
    p.add_argument("--names", nargs="+", metavar="NAME", help="display name of each file (default: file names)")
    add_split(p, default="test", help="rows to use: train, test, val, query, gallery or all = every row (default: test)")
    p.add_argument("--max-r", type=positive_int, metavar="N",
                   help="cap R at N (1023 reproduces Kobs' code and Table 6) (default: no cap, the paper's definition)")
    p.add_argument("--properties", metavar="a,b,...",
                   help="only these properties, each once (comma-separated; 'class' = label); every file must have "
                   "them (default: each file's own properties and the class)")
    p.add_argument("--metric", default="euclidean", choices=["euclidean", "cosine"],
                   help="ranking distance (default: euclidean on the raw embeddings, as Kobs' code)")
    p.add_argument("--permutations", type=nonnegative_int, default=0, metavar="P",
                   help="also a permutation test: the values shuffled over the images P times, NR-Prec "
                   "recomputed each time (one-sided p = (1 + #{shuffled >= observed}) / (1 + P); costs about P "
                   "times the measure) (default: 0, none)")
    p.add_argument("--seed", type=seed_int, help="seed of the shuffles of --permutations (default: 0)")
    p.add_argument("-o", "--output", metavar="OUT.png", help="bar chart (PNG and PDF are written)")
    add_no_progress(p)  # (the shared wording)
    p.add_argument("--json", metavar="OUT.json",
                   help="also write the results as JSON (the layout of every command: one file "
                   "{analysis, model, values, provenance, table}, several {analysis, models: [...]}; -: to standard output)")
    p.add_argument("--csv", metavar="OUT.csv",
                   help="also write the table as CSV: one row per model and property (the columns shown, and z, "
                   "significant_2.576, queries, lone_values, max_r, capped; with --permutations also perm_p_value, "
                   "perm_mean, perm_sd, permutations; -: to standard output)")
    p.add_argument("--parquet", metavar="OUT.parquet", help="also write the table as Parquet (as the CSV)")
    add_force(p)
    p.set_defaults(func=run)
    return p


def note_lines(results) -> list[str]:
    """The analysis' notes (rows repeated exactly, a property that is the class), one line each, naming
    the model when there are several, escaped."""
    from embedscope.text import safe

    results = list(results)
    return [safe(f"{r.model}: {note}" if len(results) > 1 else note)
            for r in results for note in r.provenance.get("notes", ())]


def absent_lines(results) -> list[str]:
    """With several files of different properties: one line per file that lacks some of the
    properties measured on the others (no row in the table, an empty slot in the figure), escaped."""
    from embedscope.text import safe

    results = list(results)
    if len(results) < 2:
        return []
    every = list(dict.fromkeys(row["property"] for r in results for row in r.table))
    out = []
    for r in results:
        mine = {row["property"] for row in r.table}
        # (no 'class' row: a property of the file stands for the class, which note_lines says)
        lacks = [p for p in every if p not in mine and p != "class"]
        if lacks:
            from embedscope.analyses.result import _short

            word = "property" if len(lacks) == 1 else "properties"
            named = ", ".join(f"'{_short(p, SHOWN_NAME)}'" for p in lacks)  # quoted, not repr'd: safe escapes the name, once
            out.append(safe(f"{r.model}: no {word} {named} in this file (no row)"))
    return out


def check_options(args) -> list[str] | None:
    """Usage errors of option combinations, before any work; returns the --properties names (None: all)."""
    from embedscope.errors import UsageError

    if args.seed is not None and not args.permutations:  # it seeded nothing, without a word
        raise UsageError(f"--seed {args.seed} seeds the shuffles of the permutation test: give --permutations P "
                         "(or leave out --seed)")
    if args.properties is None:
        return None
    props = [s.strip() for s in args.properties.split(",") if s.strip()]
    if not props:  # '--properties ,' or '' named none: it measured every property as if the option were absent
        raise UsageError("--properties names no property: give comma-separated names (e.g. --properties hue,yaw)")
    twice = next((p for i, p in enumerate(props) if p in props[:i]), None)
    if twice is not None:  # measured once, listed once: the second mention was dropped without a word
        # (the name as given: the error line is escaped as a whole, once)
        raise UsageError(f"--properties names '{twice}' twice: give each property once")
    return props


def run(args) -> int:
    from embedscope.analyses import properties
    from embedscope.analyses.image_properties import PERM_FIELDS, ROW_FIELDS, typed_table
    from embedscope.cli.output import UNDEFINED, check_result_outputs, print_wrote, save_and_close, undefined_lines, write_result
    from embedscope.tables import format_table, write_csv, write_parquet

    props = check_options(args)
    seed = 0 if args.seed is None else args.seed
    args._inputs = args.files
    figs = []
    if args.output:
        from embedscope.viz.figures import figure_paths

        figs = list(figure_paths(args.output, option="-o"))
    # existing outputs, one name twice (naming both options), an input named as output
    check_result_outputs(args, extra=figs, extra_options=["-o"] * len(figs))
    results = properties(args.files, names=args.names, split=args.split, max_r=args.max_r, properties=props,
                         metric=args.metric, progress=not args.no_progress, permutations=args.permutations,
                         seed=args.seed)  # None without --seed (check_options refused it without --permutations)
    order: dict[str, int] = {}  # the analysis' order of the properties (the first file's, then the others')
    for r in results:
        for row in r.table:
            order.setdefault(row["property"], len(order))
    rows = sorted((row for r in results for row in r.table),
                  key=lambda row: (order[row["property"]], results.models.index(row["model"])))
    cap = results[0].provenance["cap"]
    said = cap
    if args.max_r is not None and not any(row["capped"] for row in rows):  # the cap changed nothing: say so
        said += " (no R exceeds it here: the numbers are the uncapped ones)"
    perm = f"; permutation test: {args.permutations} shuffles, seed {seed}" if args.permutations else ""
    print(f"split {args.split}; {said}; {args.metric} distance{perm}")
    # undefined numbers: – here (NaN in the files), and one line saying why (as geometry and spectrum)
    from embedscope.analyses.result import _short_unique

    shown = dict(zip(order, _short_unique(list(order), SHOWN_NAME)))  # (two names never shown alike)
    columns = COLUMNS + (["perm_p_value"] if args.permutations else [])
    cells, headers = shown_p_values([{**row, "property": shown[row["property"]]} for row in rows], columns, UNDEFINED)
    print(format_table(cells, columns, headers=headers, nan=UNDEFINED))
    from types import SimpleNamespace

    from embedscope.analyses.result import _short

    # (the undefined line names the properties as the table shows them)
    named = [SimpleNamespace(model=r.model, provenance={
        **r.provenance, "undefined": {shown.get(k, _short(k, SHOWN_NAME)): why
                                      for k, why in (r.provenance.get("undefined") or {}).items()}})
             for r in results]
    for line in undefined_lines(named) + note_lines(results) + absent_lines(results):
        print(line)
    written = []
    if args.output:
        from embedscope.viz.figures import use_agg
        from embedscope.viz.properties import property_bars

        use_agg()
        fig = property_bars(rows, title=f"{args.split} split, {cap}")
        written += [str(p) for p in save_and_close(fig, args.output, force=args.force)]
    # JSON through the shared writer (one file: the one-model layout); the CSV and Parquet are this
    # command's own table, one row per model and property (docs/properties.md, docs/architecture.md)
    written += write_result(results, argparse.Namespace(json=args.json, force=args.force))  # JSON only
    fields = list(ROW_FIELDS) + (list(PERM_FIELDS) if args.permutations else [])
    if args.csv:
        write_csv(args.csv, rows, fields, force=args.force)
        written.append(args.csv)
    if args.parquet:
        import pandas as pd

        frame = pd.DataFrame([{c: row.get(c) for c in fields} for row in rows], columns=fields)
        write_parquet(args.parquet, typed_table(frame), force=args.force)
        written.append(args.parquet)
    print_wrote(written)
    return 0

