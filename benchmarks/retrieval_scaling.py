"""Retrieval metrics at every scale: embedscope vs pytorch-metric-learning vs the fp32 Gram GEMM
limit (issue 18, goal 1; METHODS.md §1).

For every cell N x D x class sizes x difficulty, on synthetic L2-normalised float32 data (class
centres plus Gaussian noise), times side by side in one process, each `--repeats` times:

- PML ``AccuracyCalculator`` (P@1 + R-Precision + MAP@R, ``k="max_bin_count"``, CPU);
- embedscope ``retrieval_metrics`` on the same three keys (``device="cpu"``; exact,
  float64-certified ranks, ties to the lower index);
- the machine's full fp32 Gram GEMM X @ X.T over 2,048-row blocks, the faster of numpy (OpenBLAS
  sgemm) and torch: the cost of the similarities alone, nothing selected (the target's limit);
- the same Gram in bfloat16 (torch; printed only): on CPUs that multiply bfloat16 in hardware,
  embedscope pre-filters sparse searches' tiles in bfloat16 (docs/methods.md §1), so its time can
  fall below the float32 GEMM's.

Prints min and median per method, PML / embedscope (target >= 1.2x), embedscope / GEMM, P@1 (the
set's difficulty), the largest |embedscope - PML| over the three values and the 1-minute load
average when the cell ended (on a shared machine, the noise to report with the times). Saves a log-log plot
of time vs N per method (one panel per D) as PNG + PDF, and optionally the rows as JSON.

Class sizes: ``cub`` (uniform 60-80 per class, like CUB-200 / CARS196 test sets) or ``sop``
(2-12 per class, mean 5.35, like Stanford Online Products). Difficulty: ``easy`` (P@1 about
0.8-1.0) or ``hard`` (P@1 about 0.2-0.8); the P@1 of every cell is printed.

    python benchmarks/retrieval_scaling.py --quick                 # 2k and 6k, D = 128, minutes
    python benchmarks/retrieval_scaling.py --n 2000 6000 12000 --dims 64 128 512 2048 \\
        --classes cub sop --difficulty easy hard -o scaling        # the full grid (long)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

SETTLE = 0.3  # seconds of pause before each timed call (see run_cell)
NOISE = {"easy": 1.5, "hard": 2.1}  # times (D / 64) ** 0.33 (SOP-like: x 0.7): similar difficulty across D


def make_set(n: int, dim: int, classes: str, difficulty: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    if classes == "cub":
        sizes = rng.integers(60, 81, size=max(2, n // 70))
    else:
        sizes = 2 + rng.binomial(10, 0.335, size=max(2, int(n / 5.35)))
    y = np.repeat(np.arange(sizes.size), sizes)[:n]
    if y.size < n:  # top up the last class
        y = np.concatenate([y, np.full(n - y.size, y[-1])])
    centres = rng.standard_normal((sizes.size, dim)).astype(np.float32)
    noise = NOISE[difficulty] * (dim / 64) ** 0.33 * (0.7 if classes == "sop" else 1.0)
    X = centres[y] + noise * rng.standard_normal((n, dim)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, y


def gram_time(X, block: int = 2048) -> float:
    """The full fp32 Gram GEMM, the faster of torch and numpy (``retrieval_vs_pml.gram_time``)."""
    from retrieval_vs_pml import gram_time as gram_times  # the same script folder

    return gram_times(X, block)[0]


def bf16_gram_time(X, block: int = 2048) -> float:
    """The full Gram GEMM in bfloat16 (torch, float32 accumulation, bfloat16 out): the floor of a
    search whose tiles are pre-filtered in bfloat16 (embedscope's, on CPUs that multiply bfloat16
    in hardware; see docs/methods.md §1). Printed beside the float32 limit, which stays the target's."""
    import torch
    from retrieval_vs_pml import torch_gram_time  # the same script folder

    return torch_gram_time(torch.from_numpy(X).to(torch.bfloat16), block)


def gpu_gram_time(X, device: str, bf16: bool = False, block: int = 8192, then=None) -> float:
    """The full Gram GEMM on the GPU (``--device cuda``; any torch device): float32 in IEEE float32
    (no TF32, as embedscope's search multiplies), or bfloat16, over ``block``-row blocks into one
    reused output, ``then(out_block)`` after each block if given (``retrieval_cuda.py``'s floors), the
    data already on the device (embedscope's time includes copying it there); synchronised."""
    import torch

    from embedscope.device import ieee_float32

    Xt = torch.from_numpy(X).to(device)
    if bf16:
        Xt = Xt.to(torch.bfloat16)
    out = torch.empty((min(block, len(X)), len(X)), dtype=Xt.dtype, device=Xt.device)
    sync = torch.cuda.synchronize if Xt.is_cuda else (lambda: None)
    sync()
    with torch.no_grad(), ieee_float32():
        t = time.perf_counter()
        for s in range(0, len(X), block):
            e = min(len(X), s + block)
            torch.mm(Xt[s:e], Xt.T, out=out[:e - s])
            if then is not None:
                then(out[:e - s])
        sync()
        return time.perf_counter() - t


def run_cell(n, dim, classes, difficulty, repeats, pml: bool, device: str = "cpu"):
    import torch
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    from embedscope.metrics import retrieval_metrics

    X, y = make_set(n, dim, classes, difficulty)
    keys = ["P@1", "R-Precision", "MAP@R"]
    calc = AccuracyCalculator(include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
                              avg_of_avgs=False, k="max_bin_count", device=torch.device(device))
    times = {"embedscope": [], "PML": [], "GEMM": [], "GEMM_bf16": []}
    ours = theirs = None
    for _ in range(repeats):  # interleaved, so that the machine's load hits every method alike
        # each method after a pause: torch's and faiss's OpenMP workers keep spinning for a while
        # after a parallel region and slowed whichever method ran next by 10-20% at N = 2,000
        ours = settled_call(times["embedscope"], lambda: retrieval_metrics(X, y, include=keys, device=device),
                            sync=device != "cpu")
        if pml:
            theirs = settled_call(times["PML"], lambda: calc.get_accuracy(X, y))
        time.sleep(SETTLE)
        times["GEMM"].append(gram_time(X) if device == "cpu" else gpu_gram_time(X, device))
        time.sleep(SETTLE)
        times["GEMM_bf16"].append(bf16_gram_time(X) if device == "cpu" else gpu_gram_time(X, device, bf16=True))
    row = {"N": n, "D": dim, "classes": classes, "difficulty": difficulty, "n_classes": int(len(np.unique(y))),
           "load_1min": os.getloadavg()[0],  # the machine's load when the cell ended (a shared machine's noise)
           "P@1": ours["P@1"], "R-Precision": ours["R-Precision"], "MAP@R": ours["MAP@R"]}
    return add_times(row, times, ours, theirs)


def settled_call(times: list, fn, sync: bool = False):
    """``fn()`` after a pause of ``SETTLE`` s, its wall time appended to ``times`` (CUDA synchronised
    with ``sync``); returns its result."""
    time.sleep(SETTLE)
    t = time.perf_counter()
    out = fn()
    if sync:
        import torch

        torch.cuda.synchronize()
    times.append(time.perf_counter() - t)
    return out


def add_times(row: dict, times: dict, ours: dict, theirs: dict | None) -> dict:
    """``row`` with each method's min and median time and, with PML's values ``theirs``, the largest
    |embedscope - PML| over P@1, R-Precision and MAP@R (also used by retrieval_large_classes.py)."""
    for m, ts in times.items():
        if ts:
            row[f"{m}_min"] = min(ts)
            row[f"{m}_median"] = statistics.median(ts)
    if theirs is not None:
        row["max_abs_diff"] = max(abs(ours["P@1"] - theirs["precision_at_1"]),
                                  abs(ours["R-Precision"] - theirs["r_precision"]),
                                  abs(ours["MAP@R"] - theirs["mean_average_precision_at_r"]))
    return row


def plot(rows, out, force):
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embedscope.viz.figures import save_figure

    dims = sorted({r["D"] for r in rows})
    fig, axes = plt.subplots(1, len(dims), figsize=(4.2 * len(dims), 3.8), squeeze=False, sharey=True)
    styles = {"embedscope": ("tab:blue", "o"), "PML": ("tab:orange", "s"), "GEMM": ("tab:gray", "^"),
              "GEMM_bf16": ("tab:olive", "v")}
    for ax, dim in zip(axes[0], dims):
        for (classes, diff) in sorted({(r["classes"], r["difficulty"]) for r in rows if r["D"] == dim}):
            sel = sorted((r for r in rows if r["D"] == dim and r["classes"] == classes and r["difficulty"] == diff),
                         key=lambda r: r["N"])
            ls = "-" if diff == "easy" else "--"
            for m, (col, mk) in styles.items():
                pts = [(r["N"], r[f"{m}_min"]) for r in sel if f"{m}_min" in r]
                if pts:
                    ax.plot(*zip(*pts), ls, color=col, marker=mk, ms=4, alpha=0.9 if classes == "cub" else 0.5,
                            label=f"{m} ({classes}, {diff})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ns = sorted({r["N"] for r in rows if r["D"] == dim})
        ax.set_xticks(ns, [f"{n / 1000:g}k" for n in ns])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("N (queries = references)")
        ax.set_title(f"D = {dim}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("time [s] (best of repeats)")
    seen = {}  # every (method, classes, difficulty) once, whichever panel has it
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    handles, labels = list(seen.values()), list(seen.keys())
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=4, fontsize=7, frameon=False)
    fig.suptitle("P@1 + R-Precision + MAP@R: embedscope vs PML vs the Gram GEMM (fp32, bf16)")
    fig.tight_layout()
    png, pdf = save_figure(fig, out, force=force)
    plt.close(fig)
    print(f"wrote {png} and {pdf}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[2000, 6000, 12000, 60000, 120000])
    ap.add_argument("--dims", type=int, nargs="+", default=[64, 128, 512, 2048])
    ap.add_argument("--classes", nargs="+", default=["cub", "sop"], choices=["cub", "sop"])
    ap.add_argument("--difficulty", nargs="+", default=["easy", "hard"], choices=["easy", "hard"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="N 2k and 6k, D = 128, cub, both difficulties")
    ap.add_argument("--no-pml", action="store_true", help="skip PML (e.g. at 120k)")
    ap.add_argument("--device", default="cpu",
                    help="cpu or cuda (embedscope, PML and the GEMM limit; on cuda the GEMMs run on the GPU)")
    ap.add_argument("--threads", type=int, default=None, help="torch/faiss threads (default: all)")
    ap.add_argument("-o", "--out", default=None, help="plot path (PNG + PDF; default: no plot)")
    ap.add_argument("--json", default=None, help="write the rows as JSON")
    ap.add_argument("--force", action="store_true", help="overwrite existing outputs")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.dims, args.classes = [2000, 6000], [128], ["cub"]

    import faiss
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
        faiss.omp_set_num_threads(args.threads)
    from _script import machine

    print(machine())
    print(f"torch threads {torch.get_num_threads()}, faiss threads {faiss.omp_get_max_threads()}, "
          f"repeats {args.repeats} (min / median)")
    hdr = (f"{'N':>7} {'D':>5} {'classes':>7} {'diff':>5} {'P@1':>6} | {'embedscope':>13} {'PML':>13} "
           f"{'GEMM':>13} {'bf16 GEMM':>9} | {'PML/es':>6} {'es/GEMM':>7} {'|diff|':>8} {'load':>5}")
    print(hdr)
    rows = []
    for classes in args.classes:
        for diff in args.difficulty:
            for dim in args.dims:
                for n in args.n:
                    r = run_cell(n, dim, classes, diff, args.repeats, not args.no_pml, args.device)
                    rows.append(r)

                    def mm(m, r=r):
                        return f"{r[m + '_min']:6.3f}/{r[m + '_median']:6.3f}" if f"{m}_min" in r else f"{'-':>13}"

                    ratio = f"{r['PML_min'] / r['embedscope_min']:6.2f}" if "PML_min" in r else f"{'-':>6}"
                    d = f"{r['max_abs_diff']:8.1e}" if "max_abs_diff" in r else f"{'-':>8}"
                    print(f"{n:>7} {dim:>5} {classes:>7} {diff:>5} {r['P@1']:6.3f} | {mm('embedscope')} {mm('PML')} "
                          f"{mm('GEMM')} {r['GEMM_bf16_min']:9.3f} | {ratio} {r['embedscope_min'] / r['GEMM_min']:7.2f} {d} "
                          f"{r['load_1min']:5.1f}", flush=True)
    if args.json:
        from embedscope.tables import write_json

        write_json(args.json, rows, force=args.force)
        print(f"wrote {args.json}")
    if args.out:
        plot(rows, args.out, args.force)
    return 0


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
