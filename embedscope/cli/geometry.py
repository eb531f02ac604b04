"""embedscope geometry EMB.h5 [--split train] [--json OUT.json] [--csv OUT.csv] [--force]"""

from __future__ import annotations

from embedscope.cli.common import add_force
from embedscope.cli.output import add_measure_options, add_result_outputs, measure_kwargs


def add_parser(sub, parents):
    p = sub.add_parser(
        "geometry", parents=parents, help="spectral decay rho, class distances pi and related measures",
        description="Table of the embedding-space geometry of one split: spectral decay rho, pi_intra, "
        "pi_inter, pi_ratio (Roth et al. 2020), effective rank (RankMe), alpha-ReQ, alignment and "
        "uniformity (Wang & Isola). A measure the split leaves undefined (every class a single sample: "
        "pi_intra, pi_ratio, alignment; one class: pi_inter, pi_ratio; rows of all zeros: the cosine measures pi, "
        "alignment, uniformity) shows as '–' with a note saying "
        "why, and as NaN (JSON null) in the files; an infinite one (pi_ratio when pi_inter = 0 < pi_intra, rho "
        "with a zero singular value) shows as inf with a note saying why, inf in the CSV and Parquet, null in "
        "the JSON. Definitions: docs/methods.md §2-§4.")
    p.add_argument("file", metavar="EMB.h5", help="embedding file (.h5)")
    add_measure_options(p)
    add_result_outputs(p)
    add_force(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from embedscope.analyses import geometry
    from embedscope.cli.output import (
        UNDEFINED,
        check_result_outputs,
        print_wrote,
        undefined_lines,
        unused_seed_lines,
        write_result,
    )
    from embedscope.text import safe

    args._inputs = [args.file]
    check_result_outputs(args)
    r = geometry(args.file, **measure_kwargs(args))
    print(r.format(digits=5, nan=UNDEFINED))
    print(safe(r.provenance["note"]))
    for note in r.provenance.get("notes") or []:
        print(safe(f"note: {note}"))
    for line in undefined_lines(r) + unused_seed_lines(args, r):
        print(line)
    print_wrote(write_result(r, args))
    return 0
