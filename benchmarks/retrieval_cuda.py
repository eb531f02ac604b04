"""The CUDA retrieval path at SOP scale (issue 18, goal 4: "< 1 s for all keys on one H100").

On SOP-like sets (2-12 images per class, like Stanford Online Products' 60,502 test images;
``retrieval_scaling.make_set``), times ``retrieval_metrics(..., device=DEVICE)`` for three groups of
keys, each ``--repeats`` times after one warm-up call (min and median):

- ``3 keys``: P@1, R-Precision, MAP@R (PML's AccuracyCalculator's and ``retrieval_scaling.py``'s);
- ``ranking``: every ranking key, R@1/2/4/8, P@1, R-Precision, MAP@R, mAP@C and mAP@1000 (a search
  1,000 deep);
- ``+ NMI/F1`` (``--kmeans``, timed once): the default keys, which add k-means with as many clusters as
  classes (embedscope's exact k-means, on the device: on a GPU it runs in a thread beside the ranks),
  and ``k-means``: ``kmeans_nmi_f1`` alone on the device, once.

Beside them: the device's floors for the search, its float32 Gram GEMM (IEEE, no TF32) with a
``torch.topk`` of 28 per row (the candidate lists of the 3 keys) or a sort of each row (the counting
pass, ``embedscope/metrics/search/device_count.py``) over the same blocks, the data already on the
device; and, with
``--check``, the same keys on the CPU (its time, and the largest |device − CPU| over the values:
the ranks are float64-certified on both, so it must be 0).

    python benchmarks/retrieval_cuda.py --device cuda                 # 60k and 120k, D = 128, 512
    python benchmarks/retrieval_cuda.py --device cuda --n 60502 --dims 128 --kmeans --check
    python benchmarks/retrieval_cuda.py --device cuda --counting   # the counting pass (device_count.py)
    python benchmarks/retrieval_cuda.py --quick                       # smoke run (CPU when no GPU)
"""

from __future__ import annotations

import argparse
import statistics
import time

GROUPS = {
    "3 keys": ["P@1", "R-Precision", "MAP@R"],
    "ranking": ["R@k", "P@1", "R-Precision", "MAP@R", "mAP@C", "mAP@1000"],
}


def timed(fn, sync):
    t = time.perf_counter()
    out = fn()
    sync()
    return time.perf_counter() - t, out


def floor_time(X, device: str, L: int = 28, block: int = 8192, sort: bool = False) -> float:
    """The device's float32 Gram GEMM (IEEE; ``retrieval_scaling.gpu_gram_time``) + a top-L per row
    (``sort``: a sort of each row, as the counting pass does), over ``block``-row blocks."""
    import torch
    from retrieval_scaling import gpu_gram_time  # the same script folder

    if sort:
        return gpu_gram_time(X, device, block=block, then=lambda B: torch.sort(B, dim=1))
    return gpu_gram_time(X, device, block=block, then=lambda B: torch.topk(B, L, dim=1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=None, help="rows (default 60,000 and 120,000; "
                    "12,000 where the device is the CPU)")
    ap.add_argument("--dims", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--difficulty", default="hard", choices=["easy", "hard"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cuda or cpu")
    ap.add_argument("--kmeans", action="store_true", help="also time the default keys (+ NMI, F1), once")
    ap.add_argument("--check", action="store_true", help="also compute the keys on the CPU and compare")
    ap.add_argument("--counting", action="store_true",
                    help="rank by counting on the device (device_count.py; off by default) instead of candidate lists")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of one 'ranking' call per cell")
    ap.add_argument("--quick", action="store_true", help="smoke run: 6,000 x 64, one repeat, on CUDA if present")
    args = ap.parse_args(argv)

    import torch
    from retrieval_scaling import make_set  # the same script folder

    from embedscope.device import resolve_device
    from embedscope.metrics import retrieval_metrics

    if args.counting:
        import embedscope.metrics.search.ranks as ranks

        ranks.COUNT_ON_DEVICE = True
    if args.quick:
        args.n, args.dims, args.repeats, args.check = [6000], [64], 1, True
        if args.device == "cuda" and not torch.cuda.is_available():
            args.device = "cpu"
    dev = resolve_device(args.device)
    if args.n is None:  # `make bench` on a machine without a GPU: a size the CPU answers in minutes
        args.n = [60000, 120000] if dev.type == "cuda" else [12000]
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    print(f"device {dev} ({name}), torch {torch.__version__}, {torch.get_num_threads()} CPU threads; "
          f"SOP-like classes, {args.difficulty}; min / median of {args.repeats} after a warm-up")
    for dim in args.dims:
        for n in args.n:
            X, y = make_set(n, dim, "sop", args.difficulty)
            line = [f"N {n:>7,} D {dim:>4}"]
            results = {}
            for group, keys in GROUPS.items():
                retrieval_metrics(X, y, include=keys, device=str(dev))  # warm-up (CUDA context, cuBLAS)
                ts = []
                for _ in range(args.repeats):
                    t, results[group] = timed(lambda X=X, y=y, keys=keys: retrieval_metrics(X, y, include=keys,
                                                                                          device=str(dev)), sync)
                    ts.append(t)
                line.append(f"{group} {min(ts):6.3f}/{statistics.median(ts):6.3f} s")
            line.append(f"floor: GEMM + top-28 {floor_time(X, str(dev)):6.3f} s, "
                        f"GEMM + sort {floor_time(X, str(dev), sort=True):6.3f} s")
            if args.kmeans:
                t, _ = timed(lambda X=X, y=y: retrieval_metrics(X, y, device=str(dev)), sync)
                from embedscope.metrics.clustering import kmeans_nmi_f1

                tk, _ = timed(lambda X=X, y=y: kmeans_nmi_f1(X, y, device=str(dev)), sync)
                line.append(f"+ NMI/F1 {t:6.2f} s (k-means alone {tk:6.2f} s)")
            line.append(f"P@1 {results['3 keys']['P@1']:.3f}")
            print(" | ".join(line), flush=True)
            if args.profile:
                import cProfile
                import pstats

                prof = cProfile.Profile()
                prof.enable()
                retrieval_metrics(X, y, include=GROUPS["ranking"], device=str(dev))
                sync()
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(14)
            if args.check:
                t, cpu = timed(lambda X=X, y=y: retrieval_metrics(X, y, include=GROUPS["ranking"], device="cpu"),
                               lambda: None)
                ours = results["ranking"]
                diff = max(abs(ours[k] - cpu[k]) for k in cpu if k.startswith(("R@", "P@", "R-", "MAP", "mAP")))
                print(f"    CPU (ranking keys) {t:6.3f} s; largest |{dev.type} - cpu| {diff:.1e}", flush=True)
    return 0


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
