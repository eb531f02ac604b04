"""embedscope geometry EMB.h5 [--split train] [--json OUT.json] [--csv OUT.csv] [--force]"""

from __future__ import annotations

import argparse

from embedscope.cli.common import add_force, add_outputs, add_split, positive_int

# measure -> short meaning for the terminal table (definitions: docs/geometry.md, METHODS.md §2-§4)
MEASURES = {
    "rho": "spectral decay KL(U||s), top values left out (Roth §5); lower = more directions",
    "rho_all": "spectral decay with nothing left out (rho_spectrum@1)",
    "pi_intra": "mean cosine distance within classes (Roth §5)",
    "pi_inter": "mean cosine distance between class means",
    "pi_ratio": "pi_intra / pi_inter, embedding density (Roth: higher ~ better R@1)",
    "effective_rank": "RankMe, exp(entropy of s/sum s) (Garrido et al. 2023)",
    "alpha": "alpha-ReQ, power-law decay of covariance eigenvalues (Agrawal et al. 2022)",
    "alignment": "E ||u - u'||^2 over same-class pairs (Wang & Isola 2020)",
    "uniformity": "log E exp(-t ||u - u'||^2) over all pairs (Wang & Isola 2020)",
}
COUNTS = ("n", "dim", "n_classes", "n_singleton")


def non_negative_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got '{s}'") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {v}")
    return v


def add_measure_options(p: argparse.ArgumentParser) -> None:
    """Options shared by `geometry` and `spectrum`."""
    add_split(p, default="train")
    p.add_argument("--exclude-top", type=non_negative_int, default=1, metavar="M",
                   help="leading singular values left out of rho (default 1: Roth's footnote and "
                   "rho_spectrum@2; 0: rho_spectrum@1)")
    p.add_argument("--n-components", type=positive_int, metavar="K",
                   help="keep only the first K singular values (D-1 = the reference code's TruncatedSVD)")
    p.add_argument("--max-pairs", type=positive_int, default=200_000,
                   help="pairs for the uniformity: exact when N(N-1)/2 is at most this, else a sample (default 200000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the uniformity pair sample (default 0)")


def report_for(es, args) -> dict:
    """geometry_report of one EmbeddingSet with the CLI's options."""
    from embedscope.metrics import geometry_report

    return geometry_report(es.embeddings, es.labels, exclude_top=args.exclude_top,
                           n_components=args.n_components, max_pairs=args.max_pairs, seed=args.seed)


def add_parser(sub, parents):
    p = sub.add_parser(
        "geometry", parents=parents, help="spectral decay rho, class distances pi and related measures",
        description="Table of the embedding-space geometry of one split: spectral decay rho, pi_intra, "
        "pi_inter, pi_ratio (Roth et al. 2020), effective rank (RankMe), alpha-ReQ, alignment and "
        "uniformity (Wang & Isola). Definitions: docs/geometry.md.")
    p.add_argument("file", metavar="EMB.h5", help="embedding file (.h5)")
    add_measure_options(p)
    add_outputs(p)
    add_force(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from embedscope import store
    from embedscope.fileio import check_writable
    from embedscope.tables import format_table, write_csv, write_json

    for out in (args.json, args.csv):
        if out:
            check_writable(out, force=args.force)
    es = store.load(args.file).subset(args.split)
    rep = report_for(es, args)
    rows = [{"measure": k, "value": rep[k], "meaning": ""} for k in COUNTS]
    rows += [{"measure": k, "value": rep[k], "meaning": MEASURES[k]} for k in MEASURES]
    note = (f"uniformity from {'all' if rep['uniformity_exact'] else 'a sample of'} "
            f"{rep['uniformity_pairs']} pairs; rho leaves out the top {args.exclude_top}")
    print(format_table(rows, ["measure", "value", "meaning"], digits=5, title=f"{args.file} [{args.split}]"))
    print(note)
    if args.json:
        write_json(args.json, {"file": args.file, "split": args.split, "exclude_top": args.exclude_top,
                               "n_components": args.n_components, "seed": args.seed, "measures": rep},
                   force=args.force)
    if args.csv:
        write_csv(args.csv, [{"file": args.file, "split": args.split, "measure": k, "value": v}
                             for k, v in rep.items()], force=args.force)
    return 0
