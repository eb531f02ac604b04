"""embedscope train --dataset NAME --loss NAME [...] -o CKPT.pt"""

from __future__ import annotations

import argparse

from embedscope.cli.common import (
    add_no_progress,
    device_name,
    finite_float,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
    probability,
)

LOSS_CHOICES = ("margin", "triplet", "contrastive", "multisimilarity", "proxynca", "npair", "lifted", "arcface",
                "softmax", "softtriple", "snr")
MINER_CHOICES = ("distance", "semihard", "random", "softhard")
SAMPLER_CHOICES = ("spc-2", "spc-4", "spc-8", "spc-r", "random", "gc", "ddm", "frd")
ARCH_CHOICES = ("resnet50", "resnet18", "googlenet", "digits_cnn")

# CLI dest -> trainer option (the YAML file uses the same names, with - or _)
OPTION_DESTS = ["dataset", "root", "train_classes", "arch", "weights", "embed_dim", "loss", "miner", "p_switch",
                "sampler", "batch_size", "epochs", "lr", "weight_decay", "optimizer", "lr_schedule", "seed",
                "eval_every", "device", "num_workers"]
FILE_ONLY = {"output", "o", "log", "loss_params", "resume", "force", "keep_epochs", "tensorboard"}
FILE_ONLY_BOOLS = ("resume", "force", "keep_epochs")


def add_training_options(p: argparse.ArgumentParser, *, grid: bool = False) -> None:
    """The options shared by ``train`` and ``train-grid`` (defaults None: chosen per data set)."""
    p.add_argument("--dataset", help="digits (default), cub200, cars196, sop or imagefolder")
    p.add_argument("--root", help="data set folder (official layout); not needed for digits")
    p.add_argument("--train-classes", type=positive_int, help="imagefolder/digits: the first N classes train")
    p.add_argument("--arch", choices=ARCH_CHOICES,
                   help="backbone (default: digits_cnn for digits, resnet50 for photos)")
    p.add_argument("--weights", metavar="PATH", help="pretrained backbone weights from a local file (no download)")
    p.add_argument("--embed-dim", type=positive_int, help="embedding dimension D (default 128)")
    if not grid:
        p.add_argument("--loss", choices=LOSS_CHOICES, help="training objective (default: margin)")
    p.add_argument("--miner", choices=MINER_CHOICES,
                   help="tuple miner (default: the loss's: distance for margin/triplet/contrastive/snr; "
                   "multisimilarity mines its own pairs; the rest use all pairs)")
    if not grid:
        p.add_argument("--p-switch", type=probability, metavar="P",
                       help="rho-regularisation: probability of switching a negative for a same-class sample "
                       "(default 0 = off; the paper uses 0.2-0.4)")
    p.add_argument("--sampler", choices=SAMPLER_CHOICES,
                   help="batch sampler (default: spc-2; digits spc-8)")
    p.add_argument("--batch-size", type=positive_int, help="batch size b (default: 112; digits 40)")
    p.add_argument("--epochs", type=nonnegative_int,
                   help="epochs (default: 150, SOP 100; digits 15; 0 = save the untrained network)")
    p.add_argument("--lr", type=positive_float, help="learning rate (default: 1e-5; digits 1e-3)")
    p.add_argument("--weight-decay", type=nonnegative_float, help="weight decay (default 4e-4)")
    p.add_argument("--optimizer", choices=("adam", "adamw"), help="optimiser (default adam, as Roth et al.)")
    p.add_argument("--lr-schedule", choices=("none", "cosine", "step"),
                   help="learning-rate schedule (default none, as Roth et al.)")
    p.add_argument("--loss-param", action="append", metavar="KEY=VALUE", default=None,
                   help="a loss hyper-parameter, e.g. beta=0.6 for R-Margin (repeatable)")
    if not grid:
        p.add_argument("--seed", type=int, help="random seed (default 0)")
    p.add_argument("--eval-every", type=nonnegative_int, metavar="N",
                   help="evaluate test R@1 and training rho every N epochs (default 1; 0 = never)")
    p.add_argument("--device", type=device_name, help="auto (CUDA when present), cpu, cuda or cuda:N (default: auto)")
    p.add_argument("--num-workers", type=nonnegative_int, help="data loader worker processes (default 0)")


def add_parser(sub, parents):
    p = sub.add_parser(
        "train", parents=parents, help="train an embedding model (losses, miners, samplers of Roth et al.)",
        description="Train an embedding model with a pytorch-metric-learning loss, a tuple miner, a batch "
        "sampler and optional rho-regularisation (--p-switch), as in Roth et al. (ICML 2020). Writes the final "
        "checkpoint to -o, the checkpoint of the latest and of the best epoch to <-o>.train/ (for --resume) "
        "and a CSV log (epoch, loss, R@1, MAP@R, rho, seconds and the run's options) beside -o. "
        "See docs/training.md.")
    add_training_options(p)
    p.add_argument("-o", "--output", metavar="CKPT.pt", help="final checkpoint (required unless in --config)")
    p.add_argument("--config", metavar="RUN.yaml", help="read options from a YAML file; flags given here override it")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run from <-o>.train/last.pt")
    p.add_argument("--log", metavar="LOG.csv", help="CSV log (default: -o with suffix .csv)")
    p.add_argument("--keep-epochs", action="store_true",
                   help="also keep a checkpoint of every epoch in <-o>.train/ (epoch-000.pt = untrained)")
    p.add_argument("--tensorboard", metavar="DIR",
                   help="also log loss, R@1, MAP@R and rho per epoch to TensorBoard event files in DIR "
                   "(pip install 'embedscope[tensorboard]')")
    p.add_argument("--unsafe-pickle", action="store_true",
                   help="allow --weights files that need arbitrary code to unpickle (only for trusted files)")
    add_no_progress(p)
    p.add_argument("--force", action="store_true",
                   help="start again: replace the output, its log and the whole run folder <-o>.train/")
    p.set_defaults(func=run)
    return p


def parse_loss_params(items) -> dict:
    from embedscope.errors import UsageError

    out = {}
    for it in items or []:
        if "=" not in it:
            raise UsageError(f"--loss-param expects KEY=VALUE, got '{it}'")
        k, v = it.split("=", 1)
        if not k.strip():
            raise UsageError(f"--loss-param expects KEY=VALUE, got '{it}'")
        try:
            out[k.strip()] = int(v) if v.strip().lstrip("-").isdigit() else finite_float(v)
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            out[k.strip()] = v.strip()
    return out


def read_yaml_options(path: str) -> dict:
    """Options from a YAML mapping; keys as the long options, with - or _ (``p-switch`` or ``p_switch``)."""
    from pathlib import Path

    import yaml

    from embedscope.errors import EmbedscopeError
    from embedscope.text import safe

    f = Path(path)
    if f.is_dir():
        raise EmbedscopeError(f"{path}: is a folder, expected a YAML config file")
    if not f.is_file():
        raise EmbedscopeError(f"{path}: no such config file")
    try:
        data = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise EmbedscopeError(f"{path}: not valid YAML ({safe(str(e).splitlines()[0])})") from None
    except (UnicodeDecodeError, OSError) as e:
        raise EmbedscopeError(f"{path}: cannot be read as a UTF-8 text file ({e.__class__.__name__})") from None
    if not isinstance(data, dict):
        raise EmbedscopeError(f"{path}: expected a mapping of option: value")
    out = {}
    for k, v in data.items():
        key = str(k).replace("-", "_")
        if key not in OPTION_DESTS and key not in FILE_ONLY:
            raise EmbedscopeError(f"{path}: unknown option '{safe(k)}' "
                                  f"(allowed: {', '.join(OPTION_DESTS + sorted(FILE_ONLY))})")
        if key in FILE_ONLY_BOOLS and not isinstance(v, bool):
            raise EmbedscopeError(f"{path}: {k} must be true or false, got {safe(repr(v))}")
        if key in ("output", "o", "log", "tensorboard") and not isinstance(v, str):
            raise EmbedscopeError(f"{path}: {k} must be a file name, got {safe(repr(v))}")
        out["output" if key == "o" else key] = v
    return out


def run(args) -> int:
    from embedscope.errors import UsageError
    from embedscope.tables import format_table
    from embedscope.text import safe
    from embedscope.train.trainer import train

    opts = read_yaml_options(args.config) if args.config else {}
    for d in OPTION_DESTS:
        v = getattr(args, d, None)
        if v is not None:
            opts[d] = v
    if opts.get("loss_params") is not None and not isinstance(opts.get("loss_params"), dict):
        raise UsageError("loss_params in the config file must be a mapping")
    lp = dict(opts.pop("loss_params", None) or {})
    lp.update(parse_loss_params(args.loss_param))
    if lp:
        opts["loss_params"] = lp
    out = args.output or opts.pop("output", None)
    opts.pop("output", None)
    log = args.log or opts.pop("log", None)
    opts.pop("log", None)
    tensorboard = args.tensorboard or opts.pop("tensorboard", None)
    opts.pop("tensorboard", None)
    resume = bool(opts.pop("resume", False)) or args.resume
    force = bool(opts.pop("force", False)) or args.force
    keep = bool(opts.pop("keep_epochs", False)) or args.keep_epochs
    if not out:
        raise UsageError("the output checkpoint is missing: give -o CKPT.pt (or 'output:' in --config)")
    if resume and force:
        raise UsageError("--resume continues a run and --force starts it again: give one of them")
    res = train(opts, out, resume=resume, force=force, log=log, progress=not args.no_progress, keep_epochs=keep,
                echo=lambda s: print(safe(s), flush=True), tensorboard=tensorboard,
                unsafe_pickle=args.unsafe_pickle)
    rows = [{**r, "loss": "-" if r.get("loss") is None else r["loss"]}
            for r in res["history"] if r.get("R@1") is not None]
    if rows:
        print(format_table(rows, ["epoch", "loss", "R@1", "MAP@R", "rho", "seconds"],
                           title="evaluations (test R@1 and MAP@R, training rho; epoch 0 = untrained)"))
    best = res["best"]
    if best:
        print(f"best test R@1 {best['R@1']:.4f} at epoch {best['epoch']} (rho {best['rho']:.4f})")
    p = res["paths"]
    print(f"wrote {safe(p['out'])} (final), {safe(p['dir'])}/ (last.pt for --resume, best.pt), log {safe(p['log'])}")
    return 0
