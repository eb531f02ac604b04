"""Retrieval / clustering metrics at SOP-test scale: embedscope vs pytorch-metric-learning and
the reference code's way (METHODS.md §1).

Synthetic SOP-like data: 11,316 classes of 2-12 items (mean ~5.3, N ~ 60k), class centres plus
noise, L2-normalised float32, D = 128 and 512. Prints, per D:
- the machine's full fp32 Gram GEMM time (blocked X @ X.T, nothing else): the limit is 1.2x this
  for the top-K keys (R@1/2/4/8, P@1, R-Precision, MAP@R, mAP@C);
- PML AccuracyCalculator (P@1 + R-Precision + MAP@R, k="max_bin_count") vs embedscope on the
  same three keys, and the ratio, plus a value check;
- mAP@1000: faiss flat search of depth 1001 + the AP sum (Roth's code's way) vs embedscope;
- NMI/F1: PML's NMI (faiss k-means) vs embedscope's kmeans_nmi_f1 (unless --no-kmeans).

    python benchmarks/retrieval_vs_pml.py            # full size (minutes)
    python benchmarks/retrieval_vs_pml.py --quick    # small smoke run
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def sop_like(n_classes: int, dim: int, seed: int = 0, noise: float = 1.2):
    rng = np.random.default_rng(seed)
    sizes = 2 + rng.binomial(10, 0.335, n_classes)  # 2..12, mean ~5.35 as SOP test (60,502 / 11,316)
    y = np.repeat(np.arange(n_classes), sizes)
    centres = rng.standard_normal((n_classes, dim)).astype(np.float32)
    X = centres[y] + noise * rng.standard_normal((y.size, dim)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, y


def gram_time(X, block: int = 2048):
    """The machine's full fp32 Gram GEMM time, the faster of torch and numpy (OpenBLAS sgemm) over
    2,048-row blocks (nothing else computed) -> (fastest, torch, numpy) in seconds."""
    import torch

    t_torch = torch_gram_time(torch.from_numpy(X), block)
    XT = np.ascontiguousarray(X.T)
    out = np.empty((min(block, len(X)), len(X)), dtype=np.float32)
    t = time.perf_counter()
    for s in range(0, len(X), block):
        e = min(len(X), s + block)
        np.matmul(X[s:e], XT, out=out[:e - s])
    t_numpy = time.perf_counter() - t
    return min(t_torch, t_numpy), t_torch, t_numpy


def torch_gram_time(Xt, block: int = 2048) -> float:
    """Seconds of torch's Gram GEMM ``Xt @ Xt.T`` over ``block``-row blocks (any dtype of ``Xt``)."""
    import torch

    t = time.perf_counter()
    with torch.no_grad():
        for s in range(0, len(Xt), block):
            Xt[s:s + block] @ Xt.T
    return time.perf_counter() - t


def ref_map1000(X, y):
    """Roth's code's way: faiss flat search of depth 1001 (the query itself first), AP over 1000."""
    import faiss

    index = faiss.IndexFlatIP(X.shape[1])
    index.add(X)
    n = len(X)
    d = min(1000, n - 1)
    counts = np.bincount(y)
    out = 0.0
    for s in range(0, n, 4096):
        _, nn = index.search(X[s:s + 4096], d + 1)
        nn = nn[:, 1:]  # drop the query itself
        rel = (y[nn] == y[s:s + 4096, None]).astype(np.float64)
        prec = np.cumsum(rel, 1) / np.arange(1, d + 1)
        out += ((prec * rel).sum(1) / counts[y[s:s + 4096]]).sum()
    return out / n  # every SOP-like class has >= 2 items: no lone queries


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small smoke run (1,000 classes)")
    ap.add_argument("--dims", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--noise", type=float, default=1.2,
                    help="within-class noise (1.2: R@1 ~0.95 at D = 128; 2.5: a harder set, R@1 ~0.5)")
    ap.add_argument("--no-kmeans", action="store_true", help="skip the NMI/F1 timing")
    ap.add_argument("--threads", type=int, default=None, help="torch/faiss threads (default: all)")
    args = ap.parse_args()

    import faiss
    import torch
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    from embedscope.metrics import kmeans_nmi_f1, retrieval_metrics

    if args.threads:
        torch.set_num_threads(args.threads)
        faiss.omp_set_num_threads(args.threads)
    n_classes = 1000 if args.quick else 11_316
    topk_keys = ["R@1", "R@2", "R@4", "R@8", "P@1", "R-Precision", "MAP@R", "mAP@C"]
    print(f"torch threads {torch.get_num_threads()}, faiss threads {faiss.omp_get_max_threads()}")
    for dim in args.dims:
        X, y = sop_like(n_classes, dim, noise=args.noise)
        print(f"\n== D = {dim}: N = {len(X)}, {n_classes} classes of {np.bincount(y).min()}-{np.bincount(y).max()}")
        g, g_torch, g_numpy = gram_time(X)
        print(f"full fp32 Gram GEMM (blocked)          {g:8.2f} s   limit 1.2x = {1.2 * g:.2f} s "
              f"(torch {g_torch:.2f} s, numpy {g_numpy:.2f} s)")

        calc = AccuracyCalculator(include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
                                  avg_of_avgs=False, k="max_bin_count", device=torch.device("cpu"))
        t = time.perf_counter()
        pml = calc.get_accuracy(X, y)
        t_pml = time.perf_counter() - t
        t = time.perf_counter()
        ours3 = retrieval_metrics(X, y, include=["P@1", "R-Precision", "MAP@R"], device="cpu")
        t_ours3 = time.perf_counter() - t
        t = time.perf_counter()
        ours = retrieval_metrics(X, y, include=topk_keys, device="cpu")
        t_ours = time.perf_counter() - t
        print(f"PML P@1+RP+MAP@R                       {t_pml:8.2f} s")
        print(f"embedscope P@1+RP+MAP@R                {t_ours3:8.2f} s   PML / embedscope = {t_pml / t_ours3:.2f}x")
        print(f"embedscope all top-K keys              {t_ours:8.2f} s   / Gram = {t_ours / g:.2f}x (target <= 1.2)")
        dmax = max(abs(ours3["P@1"] - pml["precision_at_1"]), abs(ours3["R-Precision"] - pml["r_precision"]),
                   abs(ours3["MAP@R"] - pml["mean_average_precision_at_r"]))
        print(f"  max |embedscope - PML| on the 3 keys: {dmax:.2e}; "
              f"values {', '.join(f'{k} {ours[k]:.4f}' for k in topk_keys)}")

        t = time.perf_counter()
        ref = ref_map1000(X, y)
        t_ref = time.perf_counter() - t
        t = time.perf_counter()
        m = retrieval_metrics(X, y, include=["mAP@1000"], device="cpu")
        t_m = time.perf_counter() - t
        print(f"mAP@1000 faiss depth 1001 (Roth's way) {t_ref:8.2f} s")
        print(f"mAP@1000 embedscope                    {t_m:8.2f} s   ratio {t_ref / t_m:.2f}x; "
              f"|diff| = {abs(ref - m['mAP@1000']):.1e} (value {m['mAP@1000']:.4f})")
        t = time.perf_counter()
        retrieval_metrics(X, y, include=topk_keys + ["mAP@1000"], device="cpu")
        t_all = time.perf_counter() - t
        print(f"embedscope all retrieval keys + mAP@1000 {t_all:6.2f} s   (one counting pass)")

        if not args.no_kmeans:
            calc_nmi = AccuracyCalculator(include=("NMI",), device=torch.device("cpu"))
            t = time.perf_counter()
            p_nmi = calc_nmi.get_accuracy(X, y)["NMI"]
            t_pn = time.perf_counter() - t
            t = time.perf_counter()
            cl = kmeans_nmi_f1(X, y, seed=1234)  # PML's faiss.Kmeans seed: same k-means, same convergence
            t_cl = time.perf_counter() - t
            print(f"NMI PML (faiss k-means)                {t_pn:8.2f} s   NMI {p_nmi:.4f}")
            print(f"NMI+F1 embedscope (faiss, 20 iter)     {t_cl:8.2f} s   ratio {t_pn / t_cl:.2f}x; "
                  f"NMI {cl['NMI']:.4f}, F1 {cl['F1']:.4f}")


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
