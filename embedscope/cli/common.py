"""Option helpers shared by the sub-commands."""

from __future__ import annotations

import argparse


def add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="replace output files that already exist")


def add_figure_output(p: argparse.ArgumentParser) -> None:
    """``-o OUT.png`` (PNG and PDF written), ``--no-progress`` and ``--force`` of the figure commands."""
    p.add_argument("-o", "--output", required=True, metavar="OUT.png", help="figure (PNG and PDF are written)")
    add_no_progress(p)  # (was "hide the progress bar": the phase lines without a terminal went too, unsaid)
    add_force(p)


def add_split(p: argparse.ArgumentParser, default: str = "test", help: str | None = None) -> None:
    """``--split`` of the commands that analyse one split of a file: every split value a file can
    hold (train, test, val, query, gallery; :data:`embedscope.names.SPLITS`) or ``all`` (every row),
    as ``evaluate``, ``tsne`` and ``scatter`` take."""
    from embedscope.names import SPLIT_CHOICES

    p.add_argument("--split", default=default, choices=SPLIT_CHOICES,
                   help=help or f"which rows of the file to analyse: train, test, val, query, gallery or all = "
                   f"every row (default: {default})")


def add_outputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="OUT.json", help="also write the results as JSON")
    p.add_argument("--csv", metavar="OUT.csv", help="also write the results as CSV")


def device_name(s: str) -> str:
    """argparse type: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (checked at parse time: a usage error,
    exit 2, before any work; whether a GPU is present is checked when the device is used)."""
    import re

    if s in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d+", s):
        return s
    raise argparse.ArgumentTypeError(f"unknown device '{s}' (choose auto, cpu, cuda or cuda:N)")


def add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", type=device_name,
                   help="auto (CUDA when present), cpu, cuda or cuda:N (default: auto)")


def _int_at_least(s: str, low: int, what: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got '{s}'") from None
    if v < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {v}")
    return v


def dataset_name(s: str) -> str:
    """argparse type: a data set name ``get_dataset`` knows (or an alias); an unknown one is a usage
    error (exit 2) in every command, as an unknown choice is."""
    from embedscope.data import ALIASES, DATASETS, LOADERS

    if ALIASES.get(s.lower(), s.lower()) not in LOADERS:
        raise argparse.ArgumentTypeError(f"unknown data set '{s}' (choose {', '.join(DATASETS)})")
    return s


def positive_int(s: str) -> int:
    """argparse type: an integer >= 1."""
    return _int_at_least(s, 1, "a positive integer")


def thread_count(s: str) -> int:
    """argparse type of ``--n-jobs``: an integer in 1 .. :data:`embedscope.tsne.joint.MAX_JOBS`
    (``--n-jobs 100000`` started threads until the system refused one, then failed inside joblib)."""
    from embedscope.tsne.joint import MAX_JOBS

    v = _int_at_least(s, 1, "a positive integer")
    if v > MAX_JOBS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_JOBS} threads, got {v}")
    return v


def random_backbone_note(args) -> str | None:
    """The note of ``embed`` / ``saliency --arch NAME`` without ``--weights`` (``--help`` calls ``--arch`` an
    ImageNet baseline: without the weights file it is not one), else None."""
    if args.checkpoint is None and args.trunk is None and args.embedder is None and args.arch and args.weights is None:
        from embedscope.text import safe

        return (f"note: --arch {safe(args.arch)} without --weights: the backbone keeps its random initialisation, "
                f"drawn from seed {args.head_seed or 0} (an untrained network, not a pretrained one; --weights FILE "
                "loads pretrained weights)")
    return None


#: the most images (rows) one saliency figure draws (``saliency --figure-images``, ``saliency-agreement
#: --grid-images``): 300 made a 900 x 93,125 px PNG in 3 minutes; every map is in the maps file
MAX_FIGURE_IMAGES = 64


def figure_images(s: str) -> int:
    """argparse type: the images of a saliency figure, 1 to :data:`MAX_FIGURE_IMAGES`."""
    v = _int_at_least(s, 1, "a positive integer")
    if v > MAX_FIGURE_IMAGES:
        raise argparse.ArgumentTypeError(f"a figure draws at most {MAX_FIGURE_IMAGES} images, got '{s}' (every map "
                                         "is in the maps file)")
    return v


def nonnegative_int(s: str) -> int:
    """argparse type: an integer >= 0 (``--num-workers``, ``--eval-every``, ``--exclude-top``)."""
    return _int_at_least(s, 0, "an integer >= 0")


def seed_int(s: str) -> int:
    """argparse type: a random seed, an integer in [0, 2**32) (numpy's, scikit-learn's and torch's
    generators all accept it)."""
    v = _int_at_least(s, 0, "a seed (an integer >= 0)")
    if v >= 2**32:
        raise argparse.ArgumentTypeError(f"expected a seed below 2**32, got '{s}'")
    return v


def finite_float(s: str) -> float:
    """argparse type: a finite number (no nan, no inf)."""
    import math

    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{s}'") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got '{s}'")
    return v


def positive_float(s: str) -> float:
    """argparse type: a finite number > 0 (``--lr``)."""
    v = finite_float(s)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {s}")
    return v


def nonnegative_float(s: str) -> float:
    """argparse type: a finite number >= 0 (``--weight-decay``)."""
    v = finite_float(s)
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {s}")
    return v


def probability(s: str) -> float:
    """argparse type: a number in [0, 1] (``--p-switch``)."""
    v = finite_float(s)
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {s}")
    return v


def add_no_progress(p: argparse.ArgumentParser) -> None:
    """``--no-progress``: hide progress bars (without a terminal they print one line per phase): nothing of the
    progress is shown (:func:`embedscope.progress.progress_bar`'s ``enabled=False``). One wording for every
    command that takes it from here (the figure commands through :func:`add_figure_output`)."""
    p.add_argument("--no-progress", action="store_true",
                   help="hide the progress bars (without a terminal: one line per phase): no progress is shown")


def add_num_workers(p: argparse.ArgumentParser, default: int | None = 0) -> None:
    """``--num-workers N`` (N >= 0) of the commands that load images."""
    p.add_argument("--num-workers", type=nonnegative_int, default=default, metavar="N",
                   help="data loader worker processes (default: 0)")


def add_model_sources(p) -> None:
    """The model sources besides a checkpoint (``--weights`` / ``--head`` of an ImageNet baseline with
    ``--arch``, a pytorch-metric-learning ``--trunk`` / ``--embedder`` pair) and the evaluation transform's
    ``--image-size`` / ``--resize``: the same for ``embed`` and ``saliency``."""
    p.add_argument("--weights", metavar="PATH",
                   help="backbone weights (a torchvision or timm file, e.g. ImageNet) from a local file (never downloaded), "
                   "with --arch and no checkpoint")
    p.add_argument("--head", choices=["none", "random"],
                   help="without a checkpoint: none = the pooled features (ImageNet features), random = a seeded "
                   "random normalised linear head (Roth et al. Table 2's baseline) (default: none)")
    p.add_argument("--embed-dim", type=positive_int, help="output size of --head random (default: 128)")
    p.add_argument("--head-seed", type=seed_int, help="seed of --head random, and of the backbone's random "
                   "initialisation without --weights (default: 0)")
    p.add_argument("--trunk", metavar="F", help="pytorch-metric-learning trunk state dict (with --embedder)")
    p.add_argument("--embedder", metavar="F", help="pytorch-metric-learning embedder state dict (with --trunk)")
    p.add_argument("--no-transform-input", dest="transform_input", action="store_false", default=None,
                   help="a GoogLeNet / Inception-v3 trunk (or --weights) trained from scratch: run it without "
                   "torchvision's ImageNet input transform (transform_input=False) (default: on, as torchvision "
                   "builds these with ImageNet weights)")
    p.add_argument("--image-size", type=positive_int, metavar="N",
                   help="centre-crop size of the evaluation transform Resize(R) + CenterCrop(N) (default: the "
                   "checkpoint's; a shapes_cnn without a train run's record on --dataset shapes: the size the set "
                   "was rendered at; else 224; e.g. 299 for torchvision's Inception-v3 preset)")
    p.add_argument("--resize", type=positive_int, metavar="R",
                   help="shorter side before the crop (default: the checkpoint's, else round(N * 256 / 224); "
                   "e.g. 342 with --image-size 299)")
