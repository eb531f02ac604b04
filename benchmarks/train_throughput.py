"""Training throughput: embedscope's trainer vs a plain PyTorch + pytorch-metric-learning loop.

Both train the same model (digits_cnn on the digits by default, or ResNet-50 at 224 px on random
images with ``--arch resnet50``), with the same loss (multi-similarity), batch size and SPC-8
batches, for one epoch; evaluation is off. Reports images/s of each and the framework overhead
(embedscope time / plain time − 1; the goal is ≤ 10%). The first epoch of each is a warm-up and is
not timed. ``--quick`` runs a small smoke test.

    .venv/bin/python benchmarks/train_throughput.py [--quick] [--arch resnet50 --device cuda]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def plain_loader(ds_train, cfg, dev, batches, num_workers: int = 0):
    """The reference loop's DataLoader over the same SPC batches, made once, PyTorch's defaults
    otherwise: its workers, if any, start again each epoch (as the trainer's, whose augmentation
    draws then do not depend on where a run was resumed)."""
    from embedscope.data import TorchImages, image_transform

    tf = image_transform(ds_train.kind, train=True, image_size=int(cfg["image_size"]))
    return torch.utils.data.DataLoader(TorchImages(ds_train, tf), batch_sampler=batches,
                                       pin_memory=dev.type == "cuda", num_workers=num_workers)


def plain_epoch(loader, labels, model, loss_fn, opt, dev, amp: str = "auto"):
    """The reference loop: the DataLoader's batches, model, PML loss, Adam step."""
    yt = torch.as_tensor(labels)
    use_amp = dev.type == "cuda" and amp != "none"
    n = 0
    for x, _, idx in loader:
        x = x.to(dev, non_blocking=True)
        if use_amp and x.ndim == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
            z = model(x)
        loss = loss_fn(z.float(), yt[idx].to(dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        n += len(idx)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return n


def synthetic_photos(n_images: int, n_classes: int):
    """An in-memory photo data set of random 256x256 RGB images (no download needed)."""
    from embedscope.data.base import ImageDataset

    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, size=(n_images, 256, 256, 3), dtype=np.uint8)
    labels = np.arange(n_images) % n_classes
    return ImageDataset(name="synthetic", root=None, paths=np.array([f"s/{i}" for i in range(n_images)]),
                        labels=labels, class_names=np.array([str(c) for c in range(n_classes)]),
                        split=np.where(labels < n_classes // 2, "train", "test"), kind="image", images=imgs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--arch", default="digits_cnn", choices=["digits_cnn", "resnet50", "resnet18"])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs (after one warm-up epoch)")
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--amp", default="auto", choices=["auto", "bf16", "none"],
                    help="both loops: bfloat16 autocast on CUDA (auto, bf16) or float32 (none)")
    ap.add_argument("--num-workers", type=int, default=0, help="DataLoader workers of both loops (default 0)")
    args = ap.parse_args()

    from embedscope.data import get_dataset
    from embedscope.device import resolve_device
    from embedscope.models import build_model
    from embedscope.train.losses import build_loss
    from embedscope.train.samplers import build_sampler
    from embedscope.train.trainer import resolve_config, train

    dev = resolve_device(args.device)
    epochs = 1 if args.quick else args.epochs
    if args.arch == "digits_cnn":
        ds = get_dataset("digits")
        opts = {"dataset": "digits", "batch_size": args.batch_size or 40, "sampler": "spc-8"}
    else:
        n_img = 224 if args.quick else 1792
        ds = synthetic_photos(n_img, 56)
        opts = {"dataset": "synthetic", "arch": args.arch, "batch_size": args.batch_size or 112,
                "sampler": "spc-4", "lr": 1e-5}
    train_ds = ds.subset("train")
    classes = np.unique(train_ds.labels)
    ytrain = np.searchsorted(classes, train_ds.labels)

    # --- plain loop
    cfg = resolve_config({**opts, "dataset": "digits", "loss": "multisimilarity", "eval_every": 0}) \
        if args.arch == "digits_cnn" else None
    if cfg is None:  # photos: resolve with a real data set name, then use the synthetic images
        cfg = resolve_config({**opts, "dataset": "cub200", "loss": "multisimilarity", "eval_every": 0})
    torch.manual_seed(0)
    model = build_model(cfg).to(dev)
    if dev.type == "cuda":
        model.to(memory_format=torch.channels_last)
    loss_fn = build_loss("multisimilarity", len(classes), cfg["embed_dim"]).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    model.train()
    sampler = build_sampler(cfg["sampler"], ytrain, cfg["batch_size"], seed=0)
    loader = plain_loader(train_ds, cfg, dev, sampler, args.num_workers)
    plain_epoch(loader, ytrain, model, loss_fn, opt, dev, args.amp)  # warm-up
    t0 = time.perf_counter()
    n_plain = sum(plain_epoch(loader, ytrain, model, loss_fn, opt, dev, args.amp) for _ in range(epochs))
    t_plain = time.perf_counter() - t0

    # --- embedscope trainer (per-epoch seconds from its log; the first epoch is the warm-up)
    if args.arch != "digits_cnn":
        import embedscope.data as edata

        real_get = edata.get_dataset
        edata.get_dataset = lambda *a, **k: ds  # the trainer loads its data through get_dataset
        import embedscope.train.trainer  # noqa: F401 - the trainer imports get_dataset lazily from embedscope.data
    with tempfile.TemporaryDirectory() as tmp:
        res = train({**{k: v for k, v in cfg.items() if k in ("dataset", "arch", "batch_size", "sampler", "lr",
                                                                 "embed_dim", "weight_decay")},
                     "loss": "multisimilarity", "epochs": epochs + 1, "eval_every": 0,
                     "device": str(dev), "amp": args.amp, "num_workers": args.num_workers},
                    Path(tmp) / "b.pt", progress=False, echo=lambda s: None)
    if args.arch != "digits_cnn":
        edata.get_dataset = real_get
    secs = [r["seconds"] for r in res["history"] if int(r["epoch"]) > 1]
    t_es = float(sum(secs))
    n_es = len(secs) * len(sampler) * cfg["batch_size"]

    ips_plain, ips_es = n_plain / t_plain, n_es / t_es
    print(f"machine: {platform.machine()} {torch.get_num_threads()} threads, device {dev}"
          + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else ""))
    precision = "bfloat16 autocast" if dev.type == "cuda" and args.amp != "none" else "float32"
    print(f"arch {args.arch}, loss multisimilarity, batch {cfg['batch_size']}, sampler {cfg['sampler']}, "
          f"{epochs} timed epoch(s) of {len(sampler)} batches, {precision}, "
          f"{args.num_workers} loader workers")
    print(f"plain PyTorch+PML : {ips_plain:10.1f} images/s  ({t_plain:.2f} s)")
    print(f"embedscope train  : {ips_es:10.1f} images/s  ({t_es:.2f} s)")
    print(f"ratio (embedscope time / plain time): {ips_plain / ips_es:.3f}  "
          f"(overhead {100 * (ips_plain / ips_es - 1):+.1f}%)")


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
