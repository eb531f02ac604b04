"""Exact k-means (issue 18): embedscope's Yinyang-accelerated exact Lloyd vs faiss k-means.

Same initialisation (faiss's random rows, seed 1234), same update, same iterations (niter = 20,
both stopping early at convergence: faiss when its objective stops changing, embedscope at the
fixed point one step earlier, with the same labels). The faiss side is PML's ``FaissKMeans`` code
path (``faiss.Kmeans(d, k, niter=20, seed=1234)``, then ``index.search(x, 1)``; also Roth's
code's clustering). Synthetic SOP-like data: 11,316 classes of 2-12 items (N ~ 60.5k), class
centres plus noise, L2-normalised float32, D = 128 and 512, k = 11,316.

Prints per D and repeat the two times; then min and median of each, the ratios, the share of
identical labels, the number of assignment steps, and NMI of both (PML's NMI is sklearn's
``normalized_mutual_info_score`` of these faiss labels).

    python benchmarks/kmeans.py                 # full size, 3 repeats (minutes)
    python benchmarks/kmeans.py --quick         # 1,000 classes, smoke run
    python benchmarks/kmeans.py --quick --collapsed 0 1e-7   # a collapsed model: one point (+ noise)
    python benchmarks/kmeans.py --device cuda   # also embedscope's k-means on a GPU (same labels checked)
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def sop_like(n_classes: int, dim: int, seed: int = 0, noise: float = 1.2):
    """As benchmarks/retrieval_vs_pml.py: SOP-test class sizes (2..12, mean ~5.35)."""
    rng = np.random.default_rng(seed)
    sizes = 2 + rng.binomial(10, 0.335, n_classes)
    y = np.repeat(np.arange(n_classes), sizes)
    centres = rng.standard_normal((n_classes, dim)).astype(np.float32)
    X = centres[y] + noise * rng.standard_normal((y.size, dim)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, y


def faiss_kmeans(X, k, niter, seed):
    import faiss

    km = faiss.Kmeans(X.shape[1], k, niter=niter, seed=seed)
    km.train(X)
    _, idx = km.index.search(X, 1)
    return idx.ravel().astype(np.int64), len(km.iteration_stats)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1,000 classes, one repeat")
    ap.add_argument("--dims", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--niter", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--plain", action="store_true", help="also time embedscope without bounds")
    ap.add_argument("--collapsed", type=float, nargs="+", default=None, metavar="NOISE",
                    help="instead of the classes' rows: every row on one point plus Gaussian noise of this "
                         "size (0: identical rows), as a collapsed model gives; one run per value")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for both (faiss OpenMP and the BLAS); default: as installed")
    ap.add_argument("--device", default="cpu",
                    help="also time embedscope's exact k-means on this device (cuda, cuda:N): its steps' GEMMs "
                         "and updates there, its labels checked equal to the CPU's")
    args = ap.parse_args()

    import faiss
    if args.threads:
        from threadpoolctl import threadpool_limits

        faiss.omp_set_num_threads(args.threads)
        threadpool_limits(args.threads)
    from sklearn.metrics import normalized_mutual_info_score as nmi

    from embedscope.metrics.clustering import kmeans_labels

    n_classes = 1000 if args.quick else 11316
    repeats = 1 if args.quick else args.repeats
    print(f"faiss {faiss.__version__}, faiss threads {faiss.omp_get_max_threads()}, BLAS threads "
          f"{[i['num_threads'] for i in __import__('threadpoolctl').threadpool_info()]}, "
          f"niter {args.niter}, seed {args.seed}, {repeats} repeat(s)")
    for dim, noise in ((d, z) for d in args.dims for z in (args.collapsed or [None])):
        X, y = sop_like(n_classes, dim)
        k = n_classes
        what = ""
        if noise is not None:  # the same labels, the rows collapsed
            rng = np.random.default_rng(1)
            p = rng.standard_normal(dim).astype(np.float32)
            X = np.tile(p / np.linalg.norm(p), (len(X), 1))
            if noise:
                X = (X + noise * rng.standard_normal(X.shape)).astype(np.float32)
            what = f", rows collapsed to one point + noise {noise:g}"
        print(f"\n== D = {dim}: N = {len(X)}, k = {k} ({k} classes of "
              f"{np.bincount(y).min()}-{np.bincount(y).max()}){what}", flush=True)
        t_f, t_e, t_p, t_g = [], [], [], []
        for r in range(repeats):
            t = time.perf_counter()
            lab_f, it_f = faiss_kmeans(X, k, args.niter, args.seed)
            t_f.append(time.perf_counter() - t)
            t = time.perf_counter()
            lab_e, info = kmeans_labels(X, k, seed=args.seed, niter=args.niter, metric="euclidean",
                                        return_info=True, device="cpu")
            t_e.append(time.perf_counter() - t)
            line = f"  repeat {r + 1}: faiss {t_f[-1]:7.2f} s ({it_f} iterations)   embedscope exact " \
                   f"{t_e[-1]:7.2f} s ({info['n_steps']} assignment steps)"
            if args.device != "cpu":
                if r == 0:  # the device's start-up (context, kernels) outside the timing
                    kmeans_labels(X[:4096], 64, niter=2, metric="euclidean", device=args.device)
                t = time.perf_counter()
                lab_g = kmeans_labels(X, k, seed=args.seed, niter=args.niter, metric="euclidean", device=args.device)
                t_g.append(time.perf_counter() - t)
                line += f"   on {args.device} {t_g[-1]:7.2f} s, same labels: {np.array_equal(lab_g, lab_e)}"
            if args.plain:
                from embedscope.metrics.kmeans import lloyd_kmeans

                t = time.perf_counter()
                lab_p = lloyd_kmeans(X, k, niter=args.niter, seed=args.seed, bounds=False)["labels"]
                t_p.append(time.perf_counter() - t)
                line += f"   plain (no bounds) {t_p[-1]:7.2f} s, same labels: {np.array_equal(lab_p, lab_e)}"
            print(line, flush=True)
        mf, me = min(t_f), min(t_e)
        df, de = statistics.median(t_f), statistics.median(t_e)
        print(f"faiss k-means           min {mf:7.2f} s  median {df:7.2f} s")
        print(f"embedscope exact Lloyd  min {me:7.2f} s  median {de:7.2f} s")
        if t_p:
            print(f"embedscope plain Lloyd  min {min(t_p):7.2f} s  median {statistics.median(t_p):7.2f} s")
        print(f"faiss / embedscope: {mf / me:.2f}x (min), {df / de:.2f}x (median)")
        if t_g:
            mg, dg = min(t_g), statistics.median(t_g)
            print(f"embedscope on {args.device:<9} min {mg:7.2f} s  median {dg:7.2f} s; faiss / it {mf / mg:.2f}x, "
                  f"embedscope CPU / it {me / mg:.2f}x (min)")
        agree = float(np.mean(lab_f == lab_e))
        n_f, n_e = nmi(y, lab_f), nmi(y, lab_e)
        print(f"identical labels: {agree:.6f} ({int(np.sum(lab_f != lab_e))} differ); "
              f"NMI PML/faiss {n_f:.6f}, embedscope {n_e:.6f}, |diff| {abs(n_f - n_e):.1e}")


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
