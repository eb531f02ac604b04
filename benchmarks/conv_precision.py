"""What TF32 convolutions cost and change on a GPU: ResNet-50 (+ 128-d head, random weights, 224 px)
forward passes under cuDNN's TF32 (PyTorch's default for convolutions), in IEEE float32, and under
bfloat16 autocast (``embed --amp bf16``), against the CPU's float32 outputs (issue 18, goal 4).

Prints images/s of each (best of ``--repeats`` after a warm-up, one batch of ``--batch`` images on the
device) and the largest |device − CPU| / max |CPU| over the embeddings of the first 8 images: what
"float32" embeddings made on a GPU differ by from the CPU's, and what exact float32 would cost.

    python benchmarks/conv_precision.py --device cuda
    python benchmarks/conv_precision.py --quick          # smoke run (resnet18, 64 px, CPU without a GPU)
    python benchmarks/conv_precision.py                  # CUDA when present, else the CPU (batch 16)
"""

from __future__ import annotations

import argparse
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cuda or cpu")
    ap.add_argument("--arch", default="resnet50", choices=["resnet50", "resnet18"])
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=None, help="images per batch (default 256 on CUDA, 16 on the CPU)")
    ap.add_argument("--repeats", type=int, default=None, help="timed batches (default 5 on CUDA, 2 on the CPU)")
    ap.add_argument("--quick", action="store_true", help="smoke run: resnet18, 64 px, batch 16, one repeat")
    args = ap.parse_args(argv)

    import torch

    from embedscope.device import resolve_device
    from embedscope.models import build_model, default_config

    if args.quick:
        args.arch, args.size, args.batch, args.repeats = "resnet18", 64, 16, 1
        if args.device == "cuda" and not torch.cuda.is_available():
            args.device = "cpu"
    dev = resolve_device(args.device)
    if args.batch is None:
        args.batch = 256 if dev.type == "cuda" else 16
    if args.repeats is None:
        args.repeats = 5 if dev.type == "cuda" else 2
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    model = build_model(default_config(args.arch, embed_dim=128, image_size=args.size)).eval()
    x = torch.randn(args.batch, 3, args.size, args.size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(x[:8]).numpy()  # the CPU's float32
    model.to(dev)
    if dev.type == "cuda":
        model.to(memory_format=torch.channels_last)
    xd = x.to(dev).contiguous(memory_format=torch.channels_last) if dev.type == "cuda" else x
    before = torch.backends.cudnn.allow_tf32
    scale = float(abs(ref).max())
    print(f"{args.arch}, {args.size} px, batch {args.batch}, device {dev}"
          + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else ""))
    for name, tf32, amp in (("cuDNN TF32 (default)", True, False), ("IEEE float32", False, False),
                            ("bf16 autocast", True, True)):
        torch.backends.cudnn.allow_tf32 = tf32
        ctx = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if amp and dev.type == "cuda" else \
            (lambda: torch.autocast("cpu", enabled=False))
        with torch.no_grad(), ctx():
            model(xd)  # warm-up (cuDNN picks its algorithms)
            sync()
            ts = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                model(xd)
                sync()
                ts.append(time.perf_counter() - t)
            out = model(xd[:8]).float().cpu().numpy()
        print(f"  {name:22s} {args.batch / min(ts):9.1f} images/s   largest |{dev.type} - cpu| / max|cpu| "
              f"{abs(out - ref).max() / scale:.2e}")
    torch.backends.cudnn.allow_tf32 = before
    return 0


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
