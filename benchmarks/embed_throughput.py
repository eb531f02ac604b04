"""Embedding throughput: embedscope's ``embed_images`` vs a plain ``torch.no_grad()`` loop (issue 18, goal 4).

Both run the same model in evaluation mode over the same images with the same DataLoader settings
(transform, batch size, workers); the plain loop is what a user would write: ``model(x.to(dev))``
per batch, outputs gathered on the CPU. Reports images/s of each (best and median of ``--repeats``
after one warm-up pass), embedscope's overhead (embedscope time / plain time − 1; the goal is
≤ 10%) and the largest difference between the two outputs (0 on the CPU: the same operations).
Models: ``digits_cnn`` on the digits (default), or ``resnet50`` / ``resnet18`` with a 128-d head at
224 px on random 256 × 256 photos (no download; the weights are random, the cost is the same).
``--amp bf16`` runs both under CUDA bfloat16 autocast (embedscope's ``embed --amp bf16``); the
default is float32, embedscope's default on every device. ``--quick`` runs a small smoke test.

``digits_cnn`` and ``shapes_cnn`` (64 px on random photos) pool with embedscope's ``MaxPool2d``, which
runs PyTorch's channels_last kernel where no gradient is taken; a third run, ``torch-pool``, is the
plain loop with PyTorch's ``nn.MaxPool2d`` put back (the same values: the difference is printed).

    .venv/bin/python benchmarks/embed_throughput.py [--quick]
    .venv/bin/python benchmarks/embed_throughput.py --arch resnet50 --device cuda --n-images 4096 [--amp bf16]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import torch


def plain_embed(model, ds, transform, batch_size: int, num_workers: int, dev, amp: bool) -> np.ndarray:
    """The reference loop: the same DataLoader, ``torch.no_grad()``, one forward per batch."""
    from embedscope.data import TorchImages

    loader = torch.utils.data.DataLoader(TorchImages(ds, transform), batch_size=batch_size, shuffle=False,
                                         num_workers=num_workers, pin_memory=dev.type == "cuda")
    model.eval().to(dev)
    out = []
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        for x, _, _ in loader:
            out.append(model(x.to(dev, non_blocking=True)).float().cpu())
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return torch.cat(out).numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--arch", default="digits_cnn", choices=["digits_cnn", "shapes_cnn", "resnet50", "resnet18"])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--n-images", type=int, default=None, help="images (photos: default 512; digits: all 1,797)")
    ap.add_argument("--batch-size", type=int, default=None, help="default 256 (digits) / 128 (photos)")
    ap.add_argument("--num-workers", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--amp", default="none", choices=["none", "bf16"])
    args = ap.parse_args()

    from embedscope.data import get_dataset, image_transform
    from embedscope.device import resolve_device
    from embedscope.embed import embed_images
    from embedscope.models import build_model, default_config

    dev = resolve_device(args.device)
    amp = args.amp == "bf16" and dev.type == "cuda"
    if args.arch == "digits_cnn":
        ds = get_dataset("digits")
        if args.n_images:
            ds = ds.take(np.arange(min(args.n_images, len(ds))))
        cfg = default_config("digits_cnn", embed_dim=32, dataset="digits")
        size, bs = 8, args.batch_size or 256
    else:
        from train_throughput import synthetic_photos

        n = 64 if args.quick else (args.n_images or 512)
        ds = synthetic_photos(n, 8)
        cfg = default_config(args.arch, embed_dim=128)
        size, bs = (64 if args.arch == "shapes_cnn" else 224), args.batch_size or 128
    repeats = 1 if args.quick else args.repeats
    torch.manual_seed(0)
    model = build_model(cfg)
    tf = image_transform(ds.kind, train=False, image_size=size)

    def ours():
        return embed_images(model, ds, transform=tf, batch_size=bs, num_workers=args.num_workers,
                            device=str(dev), amp=amp, progress=False)

    def plain():
        return plain_embed(model, ds, tf, bs, args.num_workers, dev, amp)

    runs = [("embedscope", ours), ("plain", plain)]
    from embedscope.models.backbones import MaxPool2d

    if any(isinstance(m, MaxPool2d) for m in model.modules()):
        import copy

        torch_pool = copy.deepcopy(model)
        for parent in list(torch_pool.modules()):
            for key, child in parent.named_children():
                if isinstance(child, MaxPool2d):
                    setattr(parent, key, torch.nn.MaxPool2d(child.kernel_size, child.stride, child.padding,
                                                            child.dilation, ceil_mode=child.ceil_mode))
        runs.append(("torch-pool", lambda: plain_embed(torch_pool, ds, tf, bs, args.num_workers, dev, amp)))
    times = {name: [] for name, _ in runs}
    outs = {}
    for name, fn in runs:
        outs[name] = fn()  # warm-up
    for _ in range(repeats):  # interleaved, so that drift of a shared machine hits both
        for name, fn in runs:
            t = time.perf_counter()
            outs[name] = fn()
            times[name].append(time.perf_counter() - t)
    diff = float(np.abs(outs["embedscope"] - outs["plain"]).max())
    n = len(ds)
    print(f"{args.arch} on {dev} ({platform.machine()}, {torch.get_num_threads()} threads), {n} images, batch {bs}, "
          f"{'bf16 autocast' if amp else 'float32'}; {repeats} timed pass(es) after a warm-up")
    for name, ts in times.items():
        print(f"  {name:10s} best {n / min(ts):9.1f} images/s   median {n / float(np.median(ts)):9.1f} images/s")
    over_best = min(times["embedscope"]) / min(times["plain"]) - 1
    over_med = float(np.median(times["embedscope"]) / np.median(times["plain"]) - 1)
    print(f"  embedscope overhead: {100 * over_best:+.1f}% (best) / {100 * over_med:+.1f}% (median); goal <= +10%")
    print(f"  largest |embedscope - plain| over the outputs: {diff:.3g}")
    if "torch-pool" in times:
        speed = min(times["torch-pool"]) / min(times["plain"])
        same = np.array_equal(outs["torch-pool"], outs["plain"])
        print(f"  PyTorch's nn.MaxPool2d / embedscope's MaxPool2d (plain loops): {speed:.2f}x (best); "
              f"outputs {'identical' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
