"""Retrieval with classes of a thousand and more (10-class sets such as CIFAR-10 embeddings):
embedscope vs pytorch-metric-learning side by side (issue 18, "fastest at every scale"; METHODS.md §1).

Synthetic data: ``C`` Gaussian classes of equal size (class centres plus Gaussian noise), D = 128,
L2-normalised float32 rows, cosine. Per cell, interleaved in one process, each ``--repeats`` times:

- PML ``AccuracyCalculator`` (P@1 + R-Precision + MAP@R, ``k="max_bin_count"``, CPU): faiss top-k
  to the largest class size, float32 ranks;
- embedscope ``retrieval_metrics`` on the same three keys (``device="cpu"``; exact,
  float64-certified ranks, ties to the lower index);
- with ``--r1``: embedscope's R@1 alone (``include=["R@1"]``: each query's certified nearest
  neighbour, not the ranks of its relevant pairs).

Prints min and median per method, PML / embedscope (target >= 1.2x), P@1 (the set's difficulty),
the largest |embedscope - PML| over the three values and the 1-minute load average when the cell
ended (on a shared machine, the noise to report with the times).

    python benchmarks/retrieval_large_classes.py --quick          # 3,000 x 10 and 2,000 x 3, seconds
    python benchmarks/retrieval_large_classes.py                   # 5k/10k/20k x 10, 10k x 4, 6k x 3
    python benchmarks/retrieval_large_classes.py --cells 40000x10 --r1 --no-pml
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from retrieval_scaling import add_times, settled_call  # a sibling script (benchmarks/ is the script's folder)

DEFAULT_CELLS = ["5000x10", "10000x10", "20000x10", "10000x4", "6000x3"]
QUICK_CELLS = ["3000x10", "2000x3"]


def make_set(n: int, n_classes: int, dim: int = 128, noise: float = 2.0, seed: int = 0):
    """``n`` rows in ``n_classes`` classes of equal size (the first ``n % n_classes`` one larger),
    class centres N(0, I) plus ``noise`` x N(0, I), L2-normalised float32."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % n_classes
    rng.shuffle(y)
    centres = rng.standard_normal((n_classes, dim)).astype(np.float32)
    X = centres[y] + noise * rng.standard_normal((n, dim)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, y


def _cell(text: str) -> tuple[int, int]:
    try:
        n, c = text.lower().split("x")
        return int(n), int(c)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a cell is ROWSxCLASSES (e.g. 10000x10), got {text!r}") from None


def run_cell(n, n_classes, dim, noise, repeats, pml: bool, r1: bool):
    import torch
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    from embedscope.metrics import retrieval_metrics

    X, y = make_set(n, n_classes, dim, noise)
    keys = ["P@1", "R-Precision", "MAP@R"]
    calc = AccuracyCalculator(include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
                              avg_of_avgs=False, k="max_bin_count", device=torch.device("cpu"))
    times: dict = {"embedscope": [], "PML": [], "R@1": []}
    ours = theirs = r1_val = None
    for _ in range(repeats):  # interleaved, so that the machine's load hits every method alike
        ours = settled_call(times["embedscope"], lambda: retrieval_metrics(X, y, include=keys, device="cpu"))
        if pml:
            theirs = settled_call(times["PML"], lambda: calc.get_accuracy(X, y))
        if r1:
            r1_val = settled_call(times["R@1"], lambda: retrieval_metrics(X, y, include=["R@1"], device="cpu"))["R@1"]
    row = {"N": n, "classes": n_classes, "D": dim, "load_1min": os.getloadavg()[0],
           "P@1": ours["P@1"], "R-Precision": ours["R-Precision"], "MAP@R": ours["MAP@R"]}
    add_times(row, times, ours, theirs)
    if r1_val is not None:
        row["R@1_vs_P@1"] = abs(r1_val - ours["P@1"])  # the same measure: must be 0
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", type=_cell, nargs="+", default=None,
                    help=f"ROWSxCLASSES cells (default: {' '.join(DEFAULT_CELLS)})")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--noise", type=float, default=2.0, help="noise scale around the class centres (N(0, I))")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help=f"smoke run: {' '.join(QUICK_CELLS)}, 1 repeat")
    ap.add_argument("--no-pml", action="store_true", help="skip PML")
    ap.add_argument("--r1", action="store_true", help="also time R@1 alone")
    ap.add_argument("--threads", type=int, default=None, help="torch/faiss threads (default: all)")
    args = ap.parse_args(argv)
    cells = args.cells or [_cell(c) for c in (QUICK_CELLS if args.quick else DEFAULT_CELLS)]
    if args.quick:
        args.repeats = 1

    import faiss
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
        faiss.omp_set_num_threads(args.threads)
    print(f"torch threads {torch.get_num_threads()}, faiss threads {faiss.omp_get_max_threads()}, "
          f"repeats {args.repeats} (min / median), D = {args.dim}, noise {args.noise}")
    print(f"{'N':>7} {'C':>3} {'P@1':>6} | {'embedscope':>13} {'PML':>13} {'R@1 alone':>13} | "
          f"{'PML/es':>6} {'|diff|':>8} {'load':>5}")
    for n, c in cells:
        r = run_cell(n, c, args.dim, args.noise, args.repeats, not args.no_pml, args.r1)

        def mm(m, r=r):
            return f"{r[m + '_min']:6.3f}/{r[m + '_median']:6.3f}" if f"{m}_min" in r else f"{'-':>13}"

        ratio = f"{r['PML_min'] / r['embedscope_min']:6.2f}" if "PML_min" in r else f"{'-':>6}"
        d = f"{r['max_abs_diff']:8.1e}" if "max_abs_diff" in r else f"{'-':>8}"
        print(f"{n:>7} {c:>3} {r['P@1']:6.3f} | {mm('embedscope')} {mm('PML')} {mm('R@1')} | {ratio} {d} "
              f"{r['load_1min']:5.1f}", flush=True)
        if r.get("R@1_vs_P@1", 0.0) != 0.0:
            print(f"  R@1 alone differs from P@1 by {r['R@1_vs_P@1']:.3g}", flush=True)
            return 1
    return 0


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
