"""embedscope spectrum EMB.h5 [EMB2.h5 ...] [--split train] [--by-class] [--exclude-top 1] -o spectrum.png"""

from __future__ import annotations

from embedscope.cli.common import add_force, add_no_progress, positive_int
from embedscope.cli.output import add_measure_options, add_result_outputs

DEFAULT_N_VALUES = 35  # values per class-conditioned spectrum (Roth Fig. 11); --n-values needs --by-class


def add_parser(sub, parents):
    p = sub.add_parser(
        "spectrum", parents=parents, help="singular-value spectra and spectral decay rho (figure)",
        description="Print the spectral decay rho and the other geometry measures of one or more "
        "embedding files and plot their normalised singular-value spectra on a log scale (several "
        "files overlay with a legend, as Roth et al. Fig. 7: with vs without rho-regularisation). "
        "--by-class adds the class-conditioned spectra (mean +- s.d. over classes, Roth App. E).")
    p.add_argument("files", nargs="+", metavar="EMB.h5", help="embedding file(s) (.h5)")
    add_measure_options(p)
    p.add_argument("--by-class", action="store_true",
                   help="also plot class-conditioned spectra (mean +- s.d. over classes)")
    p.add_argument("--n-values", type=positive_int, default=None,
                   help="values per class-conditioned spectrum, with --by-class (default: 35, as Roth Fig. 11)")
    p.add_argument("--center", action="store_true", help="mean-centre each class before its SVD, with --by-class")
    p.add_argument("--names", nargs="+", metavar="NAME",
                   help="legend name of each file, in order (default: the file names)")
    p.add_argument("-o", "--output", metavar="OUT.png",
                   help="figure file: OUT.png and OUT.pdf are written (default: no figure)")
    p.add_argument("--title", help="figure title, with -o (default: Singular-value spectra (<split> split))")
    add_no_progress(p)
    add_result_outputs(p, table_help="write the spectra (model, kind, k, value) to this CSV")
    add_force(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from embedscope.analyses import spectrum
    from embedscope.analyses.result import DISPLAY_CELL, unique_names
    from embedscope.analyses.structure import check_not_repeated
    from embedscope.cli.output import (
        UNDEFINED,
        check_result_outputs,
        measure_kwargs,
        print_wrote,
        save_and_close,
        undefined_lines,
        unused_seed_lines,
        write_result,
    )
    from embedscope.errors import UsageError
    from embedscope.progress import progress_bar
    from embedscope.text import safe

    # options of the class-conditioned spectra and of the figure, given without them, did nothing: refused
    if not args.by_class and (args.center or args.n_values is not None):
        raise UsageError(f"{'--center' if args.center else '--n-values'} shapes the class-conditioned spectra: "
                         "give --by-class")
    if args.title is not None and not args.output:
        raise UsageError("--title is the figure's title: give -o OUT.png")
    n_values = DEFAULT_N_VALUES if args.n_values is None else args.n_values
    args._inputs = args.files
    check_not_repeated(unique_names(args.files, args.names))  # --names, a file twice: before the progress bar
    figs = []
    if args.output:
        from embedscope.viz.figures import figure_paths

        figs = list(figure_paths(args.output, option="-o"))
    check_result_outputs(args, extra=figs, extra_options=["-o"] * len(figs))
    from embedscope.analyses._sources import check_splits_first

    check_splits_first(args.files, [args.split])  # (a file without the split: its error alone, no "0/2 files" line)
    bar = progress_bar(total=len(args.files), desc="spectra", unit="file",
                       enabled=not args.no_progress and len(args.files) > 1)
    try:
        results = spectrum(args.files, names=args.names, by_class=args.by_class, k=n_values, center=args.center,
                           progress=lambda i, n: bar.update(1), **measure_kwargs(args))
    finally:
        bar.close()
    model = f"{results[0].model} " if len(results) == 1 else ""  # one file: no column names the model
    kept = "" if args.n_components is None else f" of the first {args.n_components} (--n-components)"
    print(results.format(digits=5, nan=UNDEFINED, max_cell=DISPLAY_CELL, title=f"{model}[{args.split}] rho leaves out the top "
                         f"{args.exclude_top} singular value(s){kept}"))
    for line in undefined_lines(results) + unused_seed_lines(args, results):
        print(line)
    for r in results:  # (several files of different images: said)
        for note in r.provenance.get("notes") or []:
            print(safe(f"note: {r.model}: {note}" if len(results) > 1 else f"note: {note}"))
    if args.by_class:  # a file without class-conditioned spectra: its whole-set spectrum is drawn alone
        for r in results:
            why = r.provenance.get("class_spectra_undefined")
            if why:
                print(safe(f"{r.model}: no class-conditioned spectrum (--by-class): {why}"
                           if len(results) > 1 else f"no class-conditioned spectrum (--by-class): {why}"))
            used = r.provenance.get("k_used")
            if args.n_values is not None and used is not None and used < n_values:  # it was silently cut to D
                what = f"--n-values {n_values}: {used} values per class spectrum (at most D = {r['dim']:.0f})"
                print(safe(f"note: {r.model}: {what}" if len(results) > 1 else f"note: {what}"))
    written = []
    if args.output:
        from embedscope.viz.figures import use_agg
        from embedscope.viz.spectrum import plot_spectra

        use_agg()
        entries = [{"label": r.model, "spectrum": r.arrays["singular_values"], "rho": r["rho"],
                    **{k: r.arrays[k] for k in ("class_mean", "class_std") if k in r.arrays}} for r in results]
        fig = plot_spectra(entries, exclude_top=args.exclude_top, by_class=args.by_class, center=args.center,
                           n_components=args.n_components, title=args.title or f"Singular-value spectra ({args.split} split)")
        written += [str(p) for p in save_and_close(fig, args.output, force=args.force)]
    print_wrote(written + write_result(results, args))
    return 0
