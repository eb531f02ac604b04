"""embedscope train-grid --dataset digits --losses margin triplet ... --p-switch 0 0.2 --seeds 0 1 2 -o runs/"""

from __future__ import annotations

from embedscope.cli.common import add_no_progress, positive_int, probability, seed_int
from embedscope.cli.training_options import LOSS_CHOICES, add_training_options


def add_parser(sub, parents):
    p = sub.add_parser(
        "train-grid", parents=parents, help="train one model per (loss, p_switch, seed) for a study",
        description="Train one model per combination of --losses, --p-switch and --seeds into -o DIR "
        "(DIR/<dataset>_<loss>_p<p>_s<seed>.pt), skipping finished runs of the same settings and resuming "
        "interrupted ones; a stored run with other settings is refused (--force retrains it). Merges its "
        "rows into DIR/grid.csv (an existing DIR/grid.csv that train-grid did not write is refused before any "
        "training; --force replaces it): settings, best test R@1 / MAP@R and the training rho at that epoch, final "
        "values, the untrained network's R@1, and the final and best checkpoints. A run that diverges (a loss or "
        "weights of NaN/inf) is recorded with status 'diverged' (the reason in the column 'failure') and the "
        "other runs go on; the command then exits with 1.")
    add_training_options(p, grid=True)
    p.add_argument("--losses", nargs="+", required=True, choices=LOSS_CHOICES, metavar="LOSS",
                   help=f"losses ({', '.join(LOSS_CHOICES)})")
    p.add_argument("--p-switch", nargs="+", type=probability, default=[0.0], metavar="P",
                   help="rho-regularisation probabilities (default: 0); p > 0 only for tuple losses")
    p.add_argument("--seeds", nargs="+", type=seed_int, default=[0], metavar="SEED",
                   help="seeds, each an integer in [0, 2**32) as train --seed (default: 0)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output folder")
    p.add_argument("--keep-epochs", action="store_true",
                   help="keep every epoch's checkpoint (for 'embedscope study --epoch all')")
    p.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="train N runs at a time, each in a process of its own with (CPUs / N) threads "
                   "(default: 1). On a CPU, small models train faster this way than with every core on one run; "
                   "on one GPU keep 1")
    add_no_progress(p)
    p.add_argument("--force", action="store_true",
                   help="retrain finished combinations too, and runs stored with other settings; replace a DIR/grid.csv "
                   "that is not a train-grid table")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from embedscope.cli.training_options import OPTION_DESTS, parse_loss_params
    from embedscope.tables import format_table
    from embedscope.train.grid import grid_table_problem, train_grid

    opts = {d: getattr(args, d) for d in OPTION_DESTS if getattr(args, d, None) is not None}
    dataset = opts.pop("dataset", None) or "digits"
    lp = parse_loss_params(args.loss_param)
    if lp:
        opts["loss_params"] = lp
    from pathlib import Path

    table = Path(args.output) / "grid.csv"
    # an earlier train-grid table is merged; another file is refused before any training (or, with
    # --force, replaced)
    had_rows = table.is_file() and grid_table_problem(table) is None
    from embedscope.text import safe

    rows = train_grid(dataset, args.losses, args.p_switch, args.seeds, args.output, options=opts,
                      force=args.force, keep_epochs=args.keep_epochs, progress=not args.no_progress,
                      workers=args.workers, echo=lambda s: print(safe(s), flush=True))
    cols = ["name", "status", "epochs", "best_epoch", "best_R@1", "best_MAP@R", "rho_at_best", "final_R@1",
            "final_rho", "untrained_R@1"]
    # an empty cell of grid.csv (no evaluation: --eval-every 0, a diverged run) shown empty, not "None"
    shown = [{c: ("" if r.get(c) is None else r.get(c)) for c in cols} for r in rows]
    print(format_table(shown, cols, title=f"train-grid ({len(rows)} combinations)"))
    print(f"wrote {safe(Path(args.output) / 'grid.csv')}" + (" (merged with its earlier rows)" if had_rows else ""))
    bad = [r["name"] for r in rows if r.get("status") == "diverged"]
    if bad:  # recorded in grid.csv, and the command says so by its exit status
        from embedscope.errors import EmbedscopeError

        raise EmbedscopeError(f"{len(bad)} of {len(rows)} runs diverged ({', '.join(bad[:3])}"
                              f"{' ...' if len(bad) > 3 else ''}; status 'diverged' in grid.csv, the reason in its "
                              "'failure' column)" + ("; the grid went on with the other runs" if len(bad) < len(rows)
                                                     else ""))
    return 0
