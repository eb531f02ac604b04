"""embedscope make-shapes -o DIR [--n-images N] [--size PX] [--seed S] [--force]"""

from __future__ import annotations

from embedscope.cli.common import add_force, add_no_progress, positive_int, seed_int


def _size(s: str) -> int:
    """argparse type: the image side, 16-512 pixels."""
    import argparse

    v = positive_int(s)
    if not 16 <= v <= 512:
        raise argparse.ArgumentTypeError(f"expected an image side of 16-512 pixels, got {s}")
    return v


def add_parser(sub, parents):
    p = sub.add_parser("make-shapes", parents=parents, help="render the property-controlled shapes image set",
                       description="Render the 'shapes' image set (one object per scene, every property drawn "
                       "independently; docs/methods.md §9) and write images/*.png, properties.csv and "
                       "shapes.json (the generation settings) into DIR. DIR is then a valid --root of '--dataset shapes'.")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output folder")
    p.add_argument("--n-images", type=positive_int, default=4800, metavar="N", help="number of scenes (default: 4800)")
    p.add_argument("--size", type=_size, default=64, metavar="PX", help="image side in pixels, 16-512 (default: 64)")
    p.add_argument("--seed", type=seed_int, default=0, help="random seed of the properties (default: 0)")
    add_no_progress(p)  # (two bars: rendering, then writing the images)
    add_force(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from embedscope.data.shapes import write_folder

    # all or nothing: the folders write_folder makes are removed again (when empty) and an earlier set it
    # replaces with --force is put back if the command fails or is interrupted
    out = write_folder(args.output, args.n_images, args.size, args.seed, force=args.force,
                       progress=not args.no_progress)
    from embedscope.text import safe

    print(f"wrote {args.n_images} image{'s' if args.n_images != 1 else ''} and {safe(out / 'properties.csv')}")
    return 0
