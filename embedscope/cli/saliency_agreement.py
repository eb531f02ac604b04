"""embedscope saliency-agreement maps1.h5 maps2.h5 ...: do the models look at the same pixels? (docs/methods.md §8)"""

from __future__ import annotations

from embedscope.cli.common import MAX_FIGURE_IMAGES, add_force, figure_images


def add_parser(sub, parents):
    p = sub.add_parser(
        "saliency-agreement", parents=parents,
        help="agreement of several models' saliency maps (Pearson r, JSD; Kobs et al.)",
        description="Compare the saliency maps of several models on the same images (files of "
        "'embedscope saliency', matched by path): per image Pearson r and Jensen-Shannon divergence; over the "
        "images the Fisher-z mean and spread of r and the mean +- std of JSD; model x model matrices with block "
        "means by loss family (ranking, classification, untrained). docs/methods.md §8.")
    p.add_argument("files", nargs="+", metavar="MAPS.h5", help="maps files, one per model (at least two)")
    p.add_argument("-o", "--output", metavar="OUT.png", help="heat-maps of both matrices (PNG and PDF)")
    p.add_argument("--grid", metavar="GRID.png", help="image x model grid of the maps over the images")
    p.add_argument("--grid-images", type=figure_images, default=None, metavar="N",
                   help=f"images in the --grid figure, with --grid, at most {MAX_FIGURE_IMAGES} (default: 6)")
    p.add_argument("--names", nargs="+", metavar="NAME", help="model names, one per file (default: from the files)")
    p.add_argument("--families", nargs="+", metavar="FAMILY",
                   help="loss family per file: ranking, classification, untrained or other (another name forms "
                   "a block of its own, with a note) (default: from each checkpoint's config)")
    p.add_argument("--jsd-unit", default="bits", choices=["bits", "nats"],
                   help="JSD in bits (the paper, <= 1) or nats (the reference code, <= ln 2) (default: bits)")
    p.add_argument("--json", metavar="OUT.json",
                   help="matrices, block means and per-image values as JSON (-: to standard output)")
    p.add_argument("--csv", metavar="OUT.csv", help="one row per model pair as CSV (-: to standard output)")
    p.add_argument("--per-image-csv", metavar="OUT.csv", help="one row per model pair and image as CSV (-: to standard output)")
    p.add_argument("--parquet", metavar="OUT.parquet", help="one row per model pair as Parquet (the columns of --csv)")
    p.add_argument("--per-image-parquet", metavar="OUT.parquet",
                   help="one row per model pair and image as Parquet (the columns of --per-image-csv)")
    add_force(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from embedscope.cli.output import UNDEFINED, check_suffix, print_wrote, same_file
    from embedscope.saliency.run import agreement_of_files
    from embedscope.tables import format_table
    from embedscope.text import safe

    for option, path, suffix in (("--json", args.json, ".json"), ("--csv", args.csv, ".csv"),
                                 ("--per-image-csv", args.per_image_csv, ".csv"),
                                 ("--parquet", args.parquet, ".parquet"),
                                 ("--per-image-parquet", args.per_image_parquet, ".parquet")):
        if path is not None and not any(same_file(path, f) for f in args.files):  # (an input: said as such below)
            check_suffix(path, option, suffix)  # (--csv other.h5 --force replaced an HDF5 file with a table)

    if args.grid_images is not None and args.grid is None:  # (it did nothing)
        from embedscope.errors import UsageError

        raise UsageError("--grid-images sets the images of the --grid figure: give --grid OUT.png")
    res = agreement_of_files(
        args.files, args.output, grid=args.grid, names=args.names, families=args.families,
        jsd_base=args.jsd_unit, json_out=args.json, csv_out=args.csv, per_image_csv=args.per_image_csv,
        grid_images=6 if args.grid_images is None else args.grid_images, force=args.force,
        parquet_out=args.parquet, per_image_parquet=args.per_image_parquet,
    )
    unit = res["pair_rows"][0]["jsd_base"] if res["pair_rows"] else args.jsd_unit
    rows = [{"model a": r["model_a"], "model b": r["model_b"], "families": f"{r['family_a']}-{r['family_b']}",
             "r (Fisher-z mean)": r["r_mean"], "r spread": r["r_spread"], "undefined r": r["n_undefined_r"],
             f"JSD ({unit})": r["jsd_mean"], "JSD std": r["jsd_std"], "undefined JSD": r["n_undefined_jsd"]}
            for r in res["pair_rows"]]
    # an undefined value (all-zero or constant maps: the notes say whose) shows as '–', as in evaluate's tables
    print(format_table(rows, digits=4, nan=UNDEFINED,
                       title=f"saliency agreement on {res['n_images']} image{'' if res['n_images'] == 1 else 's'} "
                       "(docs/methods.md §8)"))
    undefined = any(b.get("n_pairs_undefined_r") or b.get("n_pairs_undefined_jsd") for b in res["blocks"])
    brows = [{"families": f"{b['family_a']}-{b['family_b']}", "model pairs": b["n_pairs"], "mean r": b["r_mean"],
              f"mean JSD ({unit})": b["jsd_mean"],
              # pairs whose value is undefined (all-zero or constant maps) are left out of a block's mean
              **({"pairs without r": b.get("n_pairs_undefined_r", 0),
                  "pairs without JSD": b.get("n_pairs_undefined_jsd", 0)} if undefined else {})}
             for b in res["blocks"]]
    print()
    print(format_table(brows, digits=4, nan=UNDEFINED, title="block means by loss family (arithmetic over model pairs)"))
    # the notes after the tables, before the 'wrote' line (as evaluate and geometry print them)
    for note in res["notes"]:
        print(f"note: {safe(note)}")  # may name images (paths) of the files
    print_wrote(res["written"])
    return 0
