"""Options shared by ``train`` and ``train-grid`` (choice lists from :mod:`embedscope.names`)."""

from __future__ import annotations

import argparse

from embedscope import names
from embedscope.cli.common import (
    dataset_name,
    device_name,
    finite_float,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
    probability,
    seed_int,
)

LOSS_CHOICES = names.LOSSES
MINER_CHOICES = names.MINERS
SAMPLER_CHOICES = names.SAMPLERS
ARCH_CHOICES = names.ARCHS

# CLI dest -> trainer option (the YAML file uses the same names, with - or _)
OPTION_DESTS = ["dataset", "root", "train_classes", "arch", "weights", "weights_ema", "embed_dim", "loss", "miner",
                "p_switch", "sampler", "batch_size", "epochs", "lr", "weight_decay", "optimizer", "lr_schedule", "seed",
                "eval_every", "device", "num_workers", "image_size", "amp", "freeze_bn_affine"]
FILE_ONLY = {"output", "o", "log", "loss_params", "resume", "force", "keep_epochs", "tensorboard"}
FILE_ONLY_BOOLS = ("resume", "force", "keep_epochs")


def add_training_options(p: argparse.ArgumentParser, *, grid: bool = False) -> None:
    """The options shared by ``train`` and ``train-grid`` (defaults None: chosen per data set)."""
    p.add_argument("--dataset", type=dataset_name,
                   help="digits (default), shapes (embedscope make-shapes), cub200, cars196, sop or imagefolder")
    p.add_argument("--root", help="data set folder (official layout); not needed for digits, nor for shapes (the default "
                   "set is generated once and cached)")
    p.add_argument("--train-classes", type=positive_int, metavar="N",
                   help="the first N classes train (default: the data set's own split)")
    p.add_argument("--arch", metavar="ARCH",
                   help=f"backbone: {', '.join(ARCH_CHOICES)}, a torchvision classification model (e.g. "
                   "efficientnet_b0, convnext_tiny) or timm:NAME (needs timm); default: digits_cnn for digits, "
                   "shapes_cnn for shapes, resnet50 for photos")
    p.add_argument("--weights", metavar="PATH", help="pretrained backbone weights from a local file (no download)")
    p.add_argument("--ema", dest="weights_ema", action="store_true", default=None,
                   help="start from the EMA copy of the --weights file (timm's state_dict_ema, else model_ema)")
    p.add_argument("--embed-dim", type=positive_int, help="embedding dimension D (default: 128)")
    p.add_argument("--image-size", type=positive_int, metavar="N",
                   help="input size of the backbone (default: 224 for photos, 64 for shapes (a make-shapes folder: "
                   "the size it was made at), 8 for digits)")
    if not grid:
        p.add_argument("--loss", choices=LOSS_CHOICES, help="training objective (default: margin)")
    p.add_argument("--miner", choices=MINER_CHOICES,
                   help="tuple miner (default: the loss's: distance for margin/triplet/contrastive/snr; "
                   "multisimilarity mines its own pairs; the rest use all pairs; with --p-switch > 0 a tuple loss "
                   "without a miner of its own gets distance)")
    if not grid:
        p.add_argument("--p-switch", type=probability, metavar="P",
                       help="rho-regularisation: probability of switching a negative for a same-class sample "
                       "(default: 0 = off; the paper used 0.3-0.4 on CUB, 0.35 on CARS, 0.15 on SOP; its code defaults to 0.2)")
    p.add_argument("--sampler", choices=SAMPLER_CHOICES,
                   help="batch sampler (default: spc-2; digits spc-8, shapes spc-8)")
    p.add_argument("--batch-size", type=positive_int, metavar="B", help="batch size B (default: 112; digits 40, shapes 64)")
    p.add_argument("--epochs", type=nonnegative_int, metavar="N",
                   help="epochs (default: 150, SOP 100; digits 15, shapes 12; 0 = save the untrained network)")
    p.add_argument("--lr", type=positive_float, help="learning rate (default: 1e-5; digits 1e-3, shapes 1e-3)")
    p.add_argument("--weight-decay", type=nonnegative_float, metavar="W", help="weight decay (default: 4e-4)")
    p.add_argument("--optimizer", choices=("adam", "adamw"), help="optimiser (default: adam, as Roth et al.)")
    p.add_argument("--lr-schedule", choices=("none", "cosine", "step"),
                   help="learning-rate schedule (default: none, as Roth et al.)")
    p.add_argument("--loss-param", action="append", metavar="KEY=VALUE", default=None,
                   help="a loss hyper-parameter, e.g. beta=0.6 for R-Margin (repeatable)")
    if not grid:
        p.add_argument("--seed", type=seed_int, help="random seed (default: 0)")
    p.add_argument("--eval-every", type=nonnegative_int, metavar="N",
                   help="evaluate test R@1 and training rho every N epochs, before training and at the last "
                   "epoch (default: 1; 0 = never)")
    p.add_argument("--device", type=device_name, help="auto (CUDA when present), cpu, cuda or cuda:N (default: auto)")
    p.add_argument("--num-workers", type=nonnegative_int, metavar="N", help="data loader worker processes (default: 0)")
    p.add_argument("--amp", choices=("auto", "bf16", "none"),
                   help="forward passes on CUDA: auto = bf16 = bfloat16 autocast, none = float32 (default: auto); "
                        "the CPU trains in float32")
    p.add_argument("--freeze-bn-affine", action="store_true", default=None,
                   help="with frozen BatchNorm (the photo protocol: running statistics fixed, eval mode) also keep its "
                   "scale and shift (gamma, beta) fixed as loaded; by default they train, as in Roth et al.'s and "
                   "pytorch-metric-learning's code. Runs saved before this option trained with them fixed and "
                   "resume so")


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
