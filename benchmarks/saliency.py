"""Benchmark: SmoothGrad saliency maps of ResNet-18 at 224 px (random weights), l = 50 (docs/methods.md §8).

Side by side on the same images, repeated and interleaved (the machine may be shared):

* ``embedscope``: :func:`embedscope.saliency.saliency_maps` (per-image seeded noise, several
  images' copies per forward/backward pass, default batch size);
* ``captum``: the straightforward use, ``NoiseTunnel(Saliency(f))`` called once per image with its
  default batching (all l copies in one pass), ``abs=False``, after ``torch.manual_seed`` with the
  image's seed, then the paper's post-processing — the same noise, so the same maps;
* ``plain`` (CUDA only): a plain batched torch loop of the same forward/backward passes (the same
  noisy batches, ``autograd.grad`` of the summed distances), the floor embedscope's GPU time is
  compared with (goal: within 10%).

Prints maps per second (min and median over the repeats), the ratio, and the largest difference
between the maps.

    python benchmarks/saliency.py                         # CPU: 2 images, 2 repeats
    python benchmarks/saliency.py --device cuda --n-images 64 --repeats 3 [--amp bf16]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-images", type=int, default=2)
    ap.add_argument("--n-samples", type=int, default=50)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--arch", default="resnet18", choices=["resnet18", "resnet50", "digits_cnn"],
                    help="digits_cnn: 1 x 8 x 8 inputs (use --size 8), where several images share a pass")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=None, help="embedscope (and plain) copies per pass")
    ap.add_argument("--amp", default=None, choices=[None, "bf16", "fp16"])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--plain", action="store_true", help="also time the plain torch loop on the CPU")
    ap.add_argument("--json", help="write the numbers here")
    ap.add_argument("--quick", action="store_true", help="smoke run: one 64-px image, 8 noise samples, one repeat")
    args = ap.parse_args()
    if args.quick:
        args.n_images, args.n_samples, args.size, args.repeats = 1, 8, 64, 1

    import torch
    from captum.attr import NoiseTunnel, Saliency

    from embedscope.device import resolve_device
    from embedscope.models import build_model, default_config
    from embedscope.models.distances import euclidean
    from embedscope.saliency.smoothgrad import (
        auto_batch_size,
        black_image,
        image_seed,
        noise_sigma,
        postprocess,
        saliency_maps,
        smoothgrad_noise,
    )

    if args.threads:
        torch.set_num_threads(args.threads)
    dev = resolve_device(args.device)  # a torch.device; one line, exit 1, where --device cuda has no GPU
    torch.manual_seed(0)
    model = build_model(default_config(args.arch, embed_dim=128, image_size=args.size)).eval().to(dev)
    g = torch.Generator().manual_seed(1)
    ch = 1 if args.arch == "digits_cnn" else 3
    X = torch.randn(args.n_images, ch, args.size, args.size, generator=g) * 1.2
    base = black_image("digits" if args.arch == "digits_cnn" else "image", args.size)
    zb = model(base[None].to(dev)).detach()
    n_cp = args.n_samples
    bs = args.batch_size or auto_batch_size((ch, args.size, args.size), n_cp, dev.type)

    def run_embedscope():
        return saliency_maps(model, X, n_samples=n_cp, seed=0, device=args.device, baseline=base, batch_size=bs,
                             amp=args.amp)

    def run_captum():
        nt = NoiseTunnel(Saliency(lambda x: euclidean(model(x), zb)))
        out = []
        for i in range(len(X)):
            torch.manual_seed(image_seed(0, i))
            if dev.type == "cuda":
                torch.cuda.manual_seed(image_seed(0, i))
            a = nt.attribute(X[i:i + 1].to(dev).requires_grad_(), nt_type="smoothgrad", nt_samples=n_cp,
                             stdevs=noise_sigma(X[i], 0.15), abs=False)
            out.append(postprocess(a[0].detach().float().cpu().numpy(), "paper"))
        return np.stack(out)

    def run_plain():
        # the same passes as embedscope: noisy copies of consecutive images packed into batches of bs
        xs = [X[i].to(dev) for i in range(len(X))]
        noise = [smoothgrad_noise(x, n_cp, 0.15, 0, i, device=dev)[0] for i, x in enumerate(xs)]
        flat = torch.cat([x.unsqueeze(0) + n for x, n in zip(xs, noise)])
        per = max(bs // n_cp, 1) * n_cp if bs >= n_cp else bs
        acc = torch.zeros_like(flat[:1]).repeat(len(X), 1, 1, 1)
        for s in range(0, flat.shape[0], per):
            xb = flat[s:s + per].clone().requires_grad_()
            ctx = torch.autocast("cuda", dtype=torch.bfloat16) if args.amp == "bf16" else torch.enable_grad()
            with ctx:
                d = euclidean(model(xb).float(), zb)
            gr, = torch.autograd.grad(d.sum(), xb)
            idx = torch.arange(s, s + xb.shape[0], device=dev) // n_cp
            acc.index_add_(0, idx, gr.float())
        acc = (acc / n_cp).cpu().numpy()
        return np.stack([postprocess(a, "paper") for a in acc])

    methods = {"embedscope": run_embedscope, "captum": run_captum}
    if dev.type == "cuda" or args.plain:
        methods["plain"] = run_plain
    times = {k: [] for k in methods}
    maps = {}

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    run_embedscope()  # warm-up (allocator, cuDNN autotuning)
    for r in range(args.repeats):  # interleaved, the order alternating between repeats
        for k, fn in (list(methods.items()) if r % 2 == 0 else list(methods.items())[::-1]):
            sync()
            t = time.perf_counter()
            maps[k] = fn()
            sync()
            times[k].append(time.perf_counter() - t)
    res = {"arch": args.arch, "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
           "torch": torch.__version__,
           "device": str(dev) + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else ""),
           "threads": torch.get_num_threads(), "n_images": len(X), "n_samples": n_cp, "size": args.size,
           "batch_size": bs, "amp": args.amp or "none", "date": time.strftime("%Y-%m-%d")}
    print(f"{args.arch}, {args.size} px, l = {n_cp}, {len(X)} images, device {res['device']}, "
          f"{res['threads']} threads, embedscope batch {bs}, amp {res['amp']}")
    print(f"{'method':<12}{'maps/s (best)':>15}{'maps/s (median)':>17}{'min [s]':>10}{'median [s]':>12}")
    for k, ts in times.items():
        mn, md = min(ts), statistics.median(ts)
        res[k] = {"min_s": mn, "median_s": md, "maps_per_s_best": len(X) / mn, "maps_per_s_median": len(X) / md}
        print(f"{k:<12}{len(X) / mn:>15.3f}{len(X) / md:>17.3f}{mn:>10.2f}{md:>12.2f}")
    for k in methods:
        if k != "embedscope":
            from embedscope.metrics import pearson_per_image

            diff = float(np.abs(maps[k] - maps["embedscope"]).max())
            mean_diff = float(np.abs(maps[k] - maps["embedscope"]).mean())
            r = float(pearson_per_image(maps[k], maps["embedscope"]).min())
            ratio = min(times["embedscope"]) / min(times[k])
            res[f"max_abs_diff_vs_{k}"] = diff
            res[f"mean_abs_diff_vs_{k}"] = mean_diff
            res[f"min_pearson_vs_{k}"] = r
            res[f"time_ratio_embedscope_over_{k}"] = ratio
            print(f"embedscope / {k} time (best): {ratio:.3f}; map difference: largest {diff:.2e}, "
                  f"mean {mean_diff:.2e}, smallest Pearson r {r:.7f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
