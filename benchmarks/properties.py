"""NR-Prec of ten properties: embedscope (one call, exact ranks) vs the reference code's way.

Kobs et al.'s code (pytorch-metric-learning 0.9.96) computes, per property, a faiss flat search of
depth min(1023, max N_v) + 1 (the query itself in the first column) and counts the same-valued
labels among the first R columns. This script times that (per property, blocks of 8,192 queries so
that the 100k x 1024 index matrix is not held at once) against
``property_precision(X, props, max_r=1023)`` (the same numbers, exact) and ``max_r=None`` (uncapped).

    .venv/bin/python benchmarks/properties.py --n 100000 --dim 128 --repeat 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

# Table-6-like properties: 3-10 values each, ten of them (car model 6, rotation 8, hue 10, ...)
VALUES = (6, 8, 10, 9, 9, 10, 9, 9, 4, 3)


def make(n: int, dim: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    props = {f"p{i}_{v}": rng.integers(0, v, n) for i, v in enumerate(VALUES)}
    X = rng.normal(size=(n, dim)).astype(np.float32)
    # the first three properties leave a trace in the embedding, like a trained model's
    for j, codes in enumerate(list(props.values())[:3]):
        centres = rng.normal(size=(VALUES[j], 8)).astype(np.float32)
        X[:, j * 8:(j + 1) * 8] += (1.5 / (j + 1)) * centres[codes]
    return X, props


def reference_way(X, props, depth: int = 1023, block: int = 8192):
    """NR-Prec per property as the reference code: a faiss search of depth min(1023, max N_v) + 1 per property."""
    import faiss

    n = len(X)
    index = faiss.IndexFlatL2(X.shape[1])
    index.add(X)
    out = {}
    for k, v in props.items():
        cnt = np.bincount(v)
        nv = cnt[v]
        k_search = int(min(depth, nv.max())) + 1
        R = np.minimum(nv - 1, depth)
        nq = int((nv > 1).sum())
        z = np.zeros(n)
        for s in range(0, n, block):
            _, nbr = index.search(X[s:s + block], k_search)
            lab = v[nbr[:, 1:]]
            r = R[s:s + block]
            hit = ((lab == v[s:s + block, None]) & (np.arange(k_search - 1)[None, :] < r[:, None])).sum(1)
            p = nv[s:s + block] / nq
            with np.errstate(divide="ignore", invalid="ignore"):
                z[s:s + block] = (hit - r * p) / np.sqrt(r * p * (1 - p))
        out[k] = float(np.mean(z[nv > 1]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--skip-uncapped", action="store_true")
    ap.add_argument("--quick", action="store_true", help="smoke run: N = 5,000, one repeat")
    a = ap.parse_args()
    if a.quick:
        a.n, a.repeat = 5000, 1
    from embedscope.metrics.properties import property_precision

    X, props = make(a.n, a.dim)
    times = {"reference (faiss depth 1024 per property)": [], "embedscope max_r=1023": [],
             "embedscope uncapped": []}
    for _ in range(a.repeat):
        t = time.perf_counter()
        ref = reference_way(X, props)
        times["reference (faiss depth 1024 per property)"].append(time.perf_counter() - t)
        t = time.perf_counter()
        cap = property_precision(X, props, max_r=1023)
        times["embedscope max_r=1023"].append(time.perf_counter() - t)
        if not a.skip_uncapped:
            t = time.perf_counter()
            unc = property_precision(X, props)
            times["embedscope uncapped"].append(time.perf_counter() - t)
    diff = max(abs(cap[k]["NR-Prec"] - ref[k]) for k in props)
    print(f"N = {a.n}, D = {a.dim}, {len(props)} properties ({', '.join(map(str, VALUES))} values)")
    print(f"max |NR-Prec(embedscope, max_r=1023) - NR-Prec(reference way)| = {diff:.2e} "
          "(ties aside they count the same neighbours)")
    for k in list(props)[:4]:
        line = f"  {k}: capped {cap[k]['NR-Prec']:.3f} (ceiling {cap[k]['ceiling']:.1f})"
        if not a.skip_uncapped:
            line += f", uncapped {unc[k]['NR-Prec']:.3f} (ceiling {unc[k]['ceiling']:.1f})"
        print(line)
    base = min(times["reference (faiss depth 1024 per property)"])
    for name, ts in times.items():
        if ts:
            print(f"{name:45s} min {min(ts):8.1f} s  median {statistics.median(ts):8.1f} s  "
                  f"reference/this {base / min(ts):5.2f}x")


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
