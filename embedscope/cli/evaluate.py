"""embedscope evaluate EMB.h5 [MORE.h5 ...]: retrieval and clustering metrics (docs/methods.md §1)."""

from __future__ import annotations

import argparse

from embedscope.cli.common import add_device, add_force, add_no_progress, positive_int, seed_int
from embedscope.cli.output import add_result_outputs
from embedscope.names import RETRIEVAL_METRICS, SPLIT_CHOICES
from embedscope.text import SHOWN_NAME  # (class names longer than it shortened in the worst-classes table)

#: decimals of the terminal tables (as every command but geometry and spectrum), and the most they
#: grow to when a value is below 10^-DIGITS (:func:`table_digits`)
DIGITS = 4
MAX_DIGITS = 8

KEY_CHOICES = ("R@k", "P@1", "R-Precision", "MAP@R", "mAP@C", "mAP@1000", "mAP@lim", "NMI", "F1")


class _Given(argparse.Action):
    """Store the value and note that the option was given (``args.<dest>_given``): --split with
    --query-split, and --seed / --niter / --lone-queries with an --include that leaves their metrics
    out, were silently not used (refused only when given, not for their defaults)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


def add_parser(sub, parents):
    p = sub.add_parser(
        "evaluate", parents=parents, help="retrieval and clustering metrics (R@k, MAP@R, NMI, ...)",
        description="R@k, P@1, R-Precision, MAP@R, mAP@C, mAP@1000, mAP@lim (exact ranks) and k-means NMI / "
        "F1 of one split (each query excluded from its own neighbours), or of query rows against a "
        "separate reference split (e.g. --query-split query --reference-split gallery). Several files: "
        "one table, models side by side, the same protocol. Definitions: docs/methods.md §1.")
    p.add_argument("files", nargs="+", metavar="EMB.h5", help="embedding file(s) (.h5)")
    p.add_argument("--names", nargs="+", metavar="NAME", help="display name of each file (default: file names)")
    p.add_argument("--split", default="test", choices=SPLIT_CHOICES, action=_Given,
                   help="rows that are both queries and references (default: test; with --query-split, "
                   "name the references with --reference-split instead)")
    p.add_argument("--query-split", choices=SPLIT_CHOICES,
                   help="query rows (default: --split); with --reference-split: separate sets")
    p.add_argument("--reference-split", choices=SPLIT_CHOICES,
                   help="reference rows searched by the queries (nothing excluded when it differs from the query split)")
    p.add_argument("--metric", default="cosine", choices=RETRIEVAL_METRICS,
                   help="ranking distance (default: cosine, rows L2-normalised)")
    p.add_argument("--k", nargs="+", type=positive_int, default=None, metavar="K",
                   help="the k of R@k, listed in ascending order whatever order they are given in (default: 1 2 4 8, "
                   "those up to the number of references of a query; a k given here beyond it is an error; "
                   "with --include, each k needs R@k or its own R@<k> there)")
    p.add_argument("--include", nargs="+", metavar="KEY",
                   help=f"compute only these ({', '.join(KEY_CHOICES)}; R@k means every --k; "
                        "default: all but mAP@lim, which is computed only when named)")
    p.add_argument("--lone-queries", default="exclude", choices=("exclude", "zero"), action=_Given,
                   help="queries without a relevant reference: exclude = left out (as pytorch-metric-learning), "
                   "zero = counted as 0 (Roth et al.'s code) (default: exclude; retrieval metrics only)")
    p.add_argument("--seed", type=seed_int, default=1234, action=_Given,
                   help="k-means seed of NMI and F1 (default: 1234, faiss's default, as Roth's code and PML)")
    p.add_argument("--niter", type=positive_int, default=20, action=_Given,
                   help="k-means iterations of NMI and F1 (default: 20)")
    p.add_argument("--per-class", metavar="OUT.csv",
                   help="write R@1, R-Precision and MAP@R per class to this CSV (-: to standard output) and show the "
                   "worst classes")
    p.add_argument("--per-class-parquet", metavar="OUT.parquet",
                   help="write the per-class table of --per-class as Parquet (its columns and rows; with or "
                   "without --per-class: the worst classes are shown either way)")
    add_no_progress(p)
    add_device(p)
    add_result_outputs(p)
    add_force(p)
    p.set_defaults(func=run)
    return p


def include_keys(include, ks) -> list[str] | None:
    """--include names -> metric keys (``R@k`` expands to every --k; without --k, ``ks`` None, it
    stays ``R@k``: the default k within the references of the data, which only the search knows)."""
    from embedscope.errors import UsageError
    from embedscope.metrics.retrieval import DEFAULT_KS

    if not include:
        return None
    out: list[str] = []
    for key in include:
        if key == "R@k":
            out += ["R@k"] if ks is None else [f"R@{k}" for k in ks]
        elif key.startswith("R@") and key[2:].isdigit():
            if int(key[2:]) not in (DEFAULT_KS if ks is None else ks):
                raise UsageError(f"--include {key}: {key[2:]} is not among --k "
                                 f"{' '.join(map(str, sorted(set(DEFAULT_KS if ks is None else ks))))}")
            out.append(key)
        elif key in KEY_CHOICES:
            out.append(key)
        else:
            raise UsageError(f"--include: unknown metric '{key}' (choose from {', '.join(KEY_CHOICES)})")
    return list(dict.fromkeys(out))


def check_include_options(args, include) -> None:
    """Refuse (a usage error, before any work) an option that shapes a metric --include leaves out:
    --k without an R@k (or a k whose R@<k> an --include of R@<k> keys leaves out), --seed /
    --niter (the k-means) without NMI or F1, --lone-queries without a retrieval metric. Each was
    silently not used."""
    from embedscope.errors import UsageError

    if include is None:
        return
    given = " ".join(args.include)
    retrieval = [k for k in include if k not in ("NMI", "F1")]
    if args.k is not None and not any(k == "R@k" or k.startswith("R@") for k in include):
        raise UsageError(f"--k {' '.join(map(str, args.k))} sets the k of R@k: --include {given} names no R@k "
                         "(add R@k, or leave out --k)")
    if args.k is not None and "R@k" not in args.include:  # R@1 named with --k 1 2: the 2 was silently not used
        unused = [k for k in dict.fromkeys(sorted(args.k)) if f"R@{k}" not in include]
        if unused:
            named = " ".join(k for k in include if k.startswith("R@"))
            raise UsageError(f"--k {' '.join(map(str, args.k))} with --include {given}: "
                             f"{' and '.join(f'R@{k}' for k in unused)} {'is' if len(unused) == 1 else 'are'} not "
                             f"computed (--include names {named}; add R@k for every --k, or leave "
                             f"{' '.join(map(str, unused))} out of --k)")
    if not any(k in ("NMI", "F1") for k in include):
        for opt in ("seed", "niter"):
            if getattr(args, f"{opt}_given", False):
                raise UsageError(f"--{opt} {getattr(args, opt)} sets the k-means of NMI and F1: --include {given} "
                                 f"names neither (add NMI or F1, or leave out --{opt})")
    if getattr(args, "lone_queries_given", False) and not retrieval:
        raise UsageError(f"--lone-queries {args.lone_queries} concerns the retrieval metrics: --include {given} "
                         "names only clustering metrics (NMI, F1)")


def missing_k_lines(results) -> list[str]:
    """Several files: a note per file that lacks an R@k another file has
    (:func:`~embedscope.analyses.result.missing_k_notes`), escaped for the terminal."""
    from embedscope.analyses.result import missing_k_notes
    from embedscope.text import safe

    return [safe(line) for line in missing_k_notes(results)]


def table_digits(values, digits: int = DIGITS, most: int = MAX_DIGITS) -> int:
    """Decimals of every number in evaluate's terminal tables: ``digits`` (4), or, when a value lies
    below 10^-digits, enough for the smallest one to keep two significant digits (at most ``most``).

    One number for all the tables of a run: a value such as MAP@R = 2.5e-05 was shown in scientific
    notation beside 4-decimal values (``2.5e-05`` under ``0.0050``, two kinds of numbers in one
    column); it reads ``0.000025`` beside ``0.005000``. The JSON, CSV and Parquet keep every digit.

    >>> table_digits([0.5, 0.0123]), table_digits([0.005, 2.5e-05, 0.0]), table_digits([1e-12])
    (4, 6, 8)
    """
    import math

    small = [abs(float(v)) for v in values
             if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v != 0]
    if not small or min(small) >= 10.0 ** -digits:
        return digits
    return int(min(most, max(digits, math.ceil(-math.log10(min(small))) + 1)))


def run(args) -> int:
    from embedscope.analyses import evaluate_many, worst_classes
    from embedscope.cli.output import DISPLAY_CELL, UNDEFINED, check_result_outputs, check_suffix, print_wrote, write_result
    from embedscope.errors import UsageError
    from embedscope.tables import format_table
    from embedscope.text import safe

    if getattr(args, "split_given", False) and args.query_split is not None:  # --split was silently not used
        raise UsageError(f"--split {args.split} with --query-split {args.query_split}: --split names rows that are "
                         "queries and references at once; name the references with --reference-split "
                         f"(e.g. --query-split {args.query_split} --reference-split {args.split})")
    include = include_keys(args.include, args.k)
    check_include_options(args, include)
    per_class = bool(args.per_class or args.per_class_parquet)
    if per_class and include is not None and all(k in ("NMI", "F1") for k in include):
        # the per-class table holds per-query retrieval scores: NMI / F1 alone rank nothing (it failed
        # after the whole computation with 'the result has no per-class table')
        option = "--per-class" if args.per_class else "--per-class-parquet"
        raise UsageError(f"{option} needs a retrieval metric (it writes R@1, R-Precision and MAP@R per class): "
                         "--include only clustering metrics (NMI, F1) ranks no query")
    args._inputs = args.files
    extra = [(o, p) for o, p in (("--per-class", args.per_class), ("--per-class-parquet", args.per_class_parquet)) if p]
    check_result_outputs(args, extra=[p for _, p in extra], extra_options=[o for o, _ in extra])
    check_suffix(args.per_class, "--per-class", ".csv")
    check_suffix(args.per_class_parquet, "--per-class-parquet", ".parquet")
    results = evaluate_many(args.files, names=args.names, split=args.split, query_split=args.query_split,
                            reference_split=args.reference_split, metric=args.metric,
                            ks=tuple(args.k) if args.k else None,
                            include=include, lone_queries=args.lone_queries, seed=args.seed, niter=args.niter,
                            per_class=per_class, device=args.device, progress=not args.no_progress)
    worst = {r.model: worst_classes(r, "MAP@R", n=5) for r in results} if per_class else {}
    digits = table_digits([v for r in results for v in r.values.values()]
                          + [row[c] for rows in worst.values() for row in rows for c in ("R@1", "R-Precision", "MAP@R")
                             if c in row])
    if len(results) == 1:
        print(results[0].format(digits=digits, nan=UNDEFINED))  # undefined as "–", as with several files
    else:
        first = results[0].provenance
        # the models' columns named shortened (the files' names whole in -o/--csv/--json)
        print(results.format(digits=digits, nan=UNDEFINED, max_cell=DISPLAY_CELL, title=f"{first['query_split']} queries vs "
                             f"{first['reference_split'] if first['query_split'] != first['reference_split'] else 'themselves'}"
                             f", {args.metric}; lone queries: {args.lone_queries}"))
    for r in results:
        for note in r.provenance.get("notes") or []:
            print(safe(f"note: {r.model}: {note}" if len(results) > 1 else f"note: {note}"))
    for line in missing_k_lines(results):
        print(line)
    written = write_result(results, args)  # one file: its Result's layout
    if per_class:
        from embedscope.analyses.result import _short_unique

        for r in results:
            rows = worst[r.model]
            what = f"the {len(rows)} classes" if len(rows) > 1 else "the class"
            # a class name longer than SHOWN_NAME (another tool's: 10,000 characters) shortened in the
            # middle, two never shown alike; the --per-class CSV and Parquet keep it whole
            shown = _short_unique([row["class"] for row in rows], SHOWN_NAME)
            rows = [{**row, "class": c} for row, c in zip(rows, shown)]
            print(format_table(rows, ["class", "n", "R@1", "R-Precision", "MAP@R"], digits=digits,
                               title=f"{r.model}: {what} with the lowest MAP@R"))
    if args.per_class:
        results.to_csv(args.per_class, table=True, force=args.force)
        written.append(args.per_class)
    if args.per_class_parquet:
        results.to_parquet(args.per_class_parquet, table=True, force=args.force)
        written.append(args.per_class_parquet)
    print_wrote(written)
    return 0
