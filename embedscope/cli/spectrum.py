"""embedscope spectrum EMB.h5 [EMB2.h5 ...] [--split train] [--by-class] [--exclude-top 1] -o spectrum.png"""

from __future__ import annotations

from embedscope.cli.common import add_force, add_outputs, positive_int
from embedscope.cli.geometry import COUNTS, MEASURES, add_measure_options


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
    p.add_argument("--k", type=positive_int, default=35,
                   help="values per class-conditioned spectrum (default 35, as Roth Fig. 11)")
    p.add_argument("--center", action="store_true", help="mean-centre each class before its SVD")
    p.add_argument("--label", action="append", metavar="NAME",
                   help="legend name of each file, in order (repeat; default: the file names)")
    p.add_argument("-o", "--output", metavar="OUT.png",
                   help="figure file: OUT.png and OUT.pdf are written (default: no figure)")
    p.add_argument("--title", help="figure title")
    add_outputs(p)
    add_force(p)
    p.set_defaults(func=run)
    return p


def _labels(files, given):
    from pathlib import Path

    from embedscope.errors import UsageError

    if given:
        if len(given) != len(files):
            raise UsageError(f"--label given {len(given)} time(s) for {len(files)} file(s): give one per file")
        return list(given)
    stems = [Path(f).stem for f in files]
    return stems if len(set(stems)) == len(stems) else [str(f) for f in files]


def run(args) -> int:
    import numpy as np

    from embedscope import store
    from embedscope.fileio import check_writable
    from embedscope.metrics import class_conditioned_spectra
    from embedscope.tables import format_table, write_csv, write_json

    labels = _labels(args.files, args.label)
    if args.output:
        from embedscope.viz.figures import figure_paths

        for p in figure_paths(args.output):
            check_writable(p, force=args.force)
    for out in (args.json, args.csv):
        if out:
            check_writable(out, force=args.force)

    entries = []
    progress = None
    if len(args.files) > 1:
        from tqdm import tqdm

        progress = tqdm(total=len(args.files), desc="spectra", unit="file", leave=False)
    for f, label in zip(args.files, labels):
        es = store.load(f).subset(args.split)
        rep = report_for_with_spectrum(es, args)
        entry = {"file": f, "label": label, "measures": {k: v for k, v in rep.items()
                                                         if k not in ("singular_values", "covariance_eigenvalues")},
                 "spectrum": rep["singular_values"], "rho": rep["rho"]}
        if args.by_class:
            per_class, mean = class_conditioned_spectra(es.embeddings, es.labels, normalize=True,
                                                        center=args.center, k=args.k)
            entry.update(class_mean=mean, class_std=per_class.std(axis=0), n_classes_used=int(per_class.shape[0]))
        entries.append(entry)
        if progress is not None:
            progress.update(1)
    if progress is not None:
        progress.close()

    rows = []
    for k in list(COUNTS) + list(MEASURES):
        row = {"measure": k}
        for e in entries:
            row[e["label"]] = e["measures"][k]
        rows.append(row)
    print(format_table(rows, ["measure"] + [e["label"] for e in entries], digits=5, title=f"[{args.split}] "
                       f"rho leaves out the top {args.exclude_top} singular value(s)"))

    if args.output:
        from embedscope.viz.figures import save_figure, use_agg
        from embedscope.viz.spectrum import plot_spectra

        use_agg()
        import matplotlib.pyplot as plt

        fig = plot_spectra(entries, exclude_top=args.exclude_top, by_class=args.by_class,
                           title=args.title or f"Singular-value spectra ({args.split} split)")
        try:
            png, pdf = save_figure(fig, args.output, force=args.force)
        finally:
            plt.close(fig)
        print(f"wrote {png} and {pdf}")
    if args.json:
        write_json(args.json, {
            "split": args.split, "exclude_top": args.exclude_top, "n_components": args.n_components,
            "by_class": args.by_class, "k": args.k, "center": args.center,
            "files": [{key: e.get(key) for key in ("file", "label", "measures", "spectrum", "class_mean",
                                                    "class_std", "n_classes_used") if key in e}
                      for e in entries]}, force=args.force)
    if args.csv:
        csv_rows = []
        for e in entries:
            p = np.asarray(e["spectrum"]) / np.sum(e["spectrum"])
            for kind, vals in (("singular_value", e["spectrum"]), ("normalised", p),
                               ("class_mean", e.get("class_mean")), ("class_std", e.get("class_std"))):
                if vals is None:
                    continue
                csv_rows += [{"file": e["file"], "label": e["label"], "kind": kind, "k": i + 1, "value": float(v)}
                             for i, v in enumerate(vals)]
        write_csv(args.csv, csv_rows, ["file", "label", "kind", "k", "value"], force=args.force)
    return 0


def report_for_with_spectrum(es, args) -> dict:
    from embedscope.metrics import geometry_report

    return geometry_report(es.embeddings, es.labels, exclude_top=args.exclude_top,
                           n_components=args.n_components, max_pairs=args.max_pairs, seed=args.seed,
                           keep_spectrum=True)
