"""embedscope saliency CKPT --dataset NAME -o maps.h5: SmoothGrad maps of a model (docs/methods.md §8)."""

from __future__ import annotations

from embedscope import names
from embedscope.cli.common import (
    MAX_FIGURE_IMAGES,
    add_device,
    add_force,
    add_model_sources,
    add_no_progress,
    dataset_name,
    figure_images,
    positive_int,
    seed_int,
)
from embedscope.names import DISTANCES


def _noise_level(s: str) -> float:
    """argparse type of --noise: :func:`embedscope.saliency.smoothgrad.check_noise`'s range, as a usage error."""
    import argparse

    from embedscope.errors import EmbedscopeError
    from embedscope.saliency.smoothgrad import NOISE_RANGE, check_noise

    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{s}'") from None
    try:  # (inf passed here and failed after the model and data were loaded; 1e308 failed as a NaN gradient)
        return check_noise(v)  # -0 as 0 (else 'noise -0.0' in the summary and the maps file)
    except EmbedscopeError:
        raise argparse.ArgumentTypeError(f"expected {NOISE_RANGE}, got {s}") from None


def add_parser(sub, parents):
    p = sub.add_parser(
        "saliency", parents=parents, help="SmoothGrad saliency maps of a model's embeddings (Kobs et al.)",
        description="Saliency maps of an embedding model (Kobs et al. 2021, docs/methods.md §8): SmoothGrad of the "
        "loss-specific distance between an image's embedding and a black image's, with respect to the input; "
        "l noisy copies, sigma = noise x (max - min) of the image. The same images for every model (chosen by "
        "--seed, or --paths-file), so that maps files of several models match by path "
        "(embedscope saliency-agreement). --pairs: for each image, the saliency of its distance to its nearest "
        "other image (why are these two near each other?).")
    p.add_argument("checkpoint", nargs="?",
                   help="checkpoint, as embed takes it: embedscope format, a bare state dict (with --arch), Roth et "
                   "al.'s checkpoint*.pth.tar, or a pytorch-metric-learning saved_models folder; omit it with "
                   "--trunk/--embedder, or with --arch for an ImageNet baseline (--weights, --head)")
    p.add_argument("--dataset", required=True, type=dataset_name,
                   help="digits, shapes (make-shapes), cub200, cars196, sop or imagefolder")
    p.add_argument("--root", help="data set folder (official layout); not needed for digits, nor for shapes (the default "
                   "set is generated once and cached)")
    p.add_argument("--split", default="test", choices=["train", "test", "all"],
                   help="images to explain (default: test)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--n-images", type=positive_int, help="number of images, chosen by --seed (default: 100)")
    g.add_argument("--paths-file", metavar="F",
                   help="explain exactly these images (one path per line, as stored in the data set; a line "
                   "that starts with # is a comment)")
    p.add_argument("--order", default="paper", choices=["paper", "code"],
                   help="post-processing: paper (abs after averaging the copies) or code (the reference code: "
                   "abs of each copy's channel mean) (default: paper)")
    p.add_argument("--pairs", action="store_true",
                   help="maps of each image's distance to its nearest other image of the split, for both images")
    p.add_argument("--distance", choices=DISTANCES,
                   help="d_l to differentiate (default: euclidean for an untrained network, else the checkpoint's: its config, "
                        "else its loss, else euclidean)")
    p.add_argument("--n-samples", type=positive_int, default=50, help="noisy copies l per image (default: 50)")
    p.add_argument("--noise", type=_noise_level, default=0.15,
                   help="sigma as a fraction of the image's value range, 0 to 1 (default: 0.15)")
    p.add_argument("-o", "--output", required=True, metavar="MAPS.h5", help="output maps file (HDF5)")
    p.add_argument("--figure", metavar="FIG.png",
                   help="also draw the first --figure-images maps over their images, or pairs with --pairs "
                   "(PNG and PDF; every map is in the maps file)")
    p.add_argument("--figure-images", type=figure_images, default=None, metavar="N",
                   help=f"images (--pairs: pairs) drawn in the --figure figure, with --figure, at most {MAX_FIGURE_IMAGES} "
                   "(default: 6)")
    p.add_argument("--name", help="model name in tables and figures (default: the checkpoint's file name)")
    p.add_argument("--arch", help="architecture of a bare state dict, a trunk or an ImageNet baseline: "
                   f"{', '.join(names.ARCHS)}, any torchvision classification model, timm:NAME")
    p.add_argument("--train-classes", type=positive_int, metavar="N",
                   help="the first N classes (sorted) form the training split (default: the checkpoint's, when it was "
                   "trained with train --train-classes on this data set, else the data set's own split)")
    p.add_argument("--batch-size", type=positive_int, metavar="B",
                   help="noisy copies per forward/backward pass (default: by input size and device)")
    p.add_argument("--seed", type=seed_int, default=0, help="image choice and noise (default: 0)")
    p.add_argument("--amp", default="none", choices=["none", "bf16", "fp16"],
                   help="CUDA autocast for the gradient passes (default: none = float32)")
    add_model_sources(p)
    p.add_argument("--unsafe-pickle", action="store_true",
                   help="allow a checkpoint that needs arbitrary code to unpickle (only for trusted files)")
    p.add_argument("--ema", action="store_true",
                   help="use the checkpoint's EMA weights (timm's state_dict_ema, else model_ema)")
    add_no_progress(p)
    add_device(p)
    add_force(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from pathlib import PurePath

    from embedscope.cli.output import check_suffix, refuse_inputs
    from embedscope.saliency.run import saliency_to_file

    if args.figure_images is not None and args.figure is None:  # (it would do nothing)
        from embedscope.errors import UsageError

        raise UsageError("--figure-images sets the images of the --figure figure: give --figure FIG.png")
    outputs = [args.output]
    if args.figure is not None:
        from embedscope.viz.figures import figure_paths

        outputs += list(figure_paths(args.figure, option="--figure"))
    if args.checkpoint is None and args.trunk is None and args.embedder is None and not args.arch:
        from embedscope.errors import UsageError

        raise UsageError("name the model: a checkpoint, --trunk with --embedder, or --arch (with --weights) for an "
                         "ImageNet baseline")
    refuse_inputs(outputs, [args.checkpoint, args.paths_file, args.weights, args.trunk, args.embedder])
    # (a figure's name: said below; .svg, which --figure does not draw, was let through and written as HDF5)
    if PurePath(str(args.output)).suffix.lower() not in (".png", ".pdf"):
        check_suffix(args.output, "-o", ".h5")  # the maps file is HDF5 (-o maps.csv wrote HDF5 under a CSV's name)
    s = saliency_to_file(
        args.checkpoint, args.dataset, args.output, root=args.root, split=args.split, n_images=args.n_images,
        paths_file=args.paths_file, order=args.order, pairs=args.pairs, distance=args.distance,
        n_samples=args.n_samples, noise=args.noise, batch_size=args.batch_size, seed=args.seed, device=args.device,
        amp=None if args.amp == "none" else args.amp, arch=args.arch, train_classes=args.train_classes,
        unsafe_pickle=args.unsafe_pickle, name=args.name, figure=args.figure, force=args.force,
        progress=not args.no_progress, ema=args.ema, weights=args.weights, head=args.head,
        embed_dim=args.embed_dim, head_seed=args.head_seed, trunk=args.trunk, embedder=args.embedder,
        transform_input=args.transform_input, image_size=args.image_size, resize=args.resize,
        figure_images=6 if args.figure_images is None else args.figure_images,
    )
    one = s["n_images"] == 1  # ('1 images:')
    what = ("pair" if one else "pairs") + " (query + nearest retrieval)" if s["pairs"] else ("image" if one else "images")
    copies = "copy" if args.n_samples == 1 else "copies"
    print(f"{s['n_images']} {what}: SmoothGrad of the {s['distance']} distance ({s['distance_source']}), "
          f"{args.n_samples} {copies}, noise {args.noise}, {s['order']} order, family {s['family']}; "
          f"{s['seconds']:.1f} s")
    if s["pairs"]:
        print(f"nearest retrieval of the same class for {100 * s['pair_same_class']:.1f}% of the queries")
    from embedscope.text import safe

    # the notes after the summary, before the 'wrote' line (as evaluate and geometry print them)
    for note in s.get("notes") or []:
        print(f"note: {safe(note)}")
    if args.noise == 0 and args.n_samples > 1:  # (--n-samples did nothing but repeat the work)
        print(f"note: --noise 0: the {args.n_samples} copies of an image are the image itself, so each map is its "
              "plain gradient's; --n-samples 1 gives the same maps (to rounding) with less work")
    from embedscope.cli.common import random_backbone_note

    note = random_backbone_note(args)
    if note:
        print(note)
    if args.amp != "none" and s["amp"] == "none":
        print(f"note: --amp {args.amp} is CUDA autocast; not on CUDA, the maps were computed in float32")
    if s.get("figure_images") is not None and s["figure_images"] < s["n_images"]:
        what = "pairs" if s["pairs"] else "images"
        print(f"note: the figure draws the first {s['figure_images']} of the {s['n_images']} {what} "
              "(--figure-images; every map is in the maps file)")
    from embedscope.cli.output import print_wrote

    print_wrote([s["output"], *(s["figure"] or [])])  # one line, as every command
    return 0
