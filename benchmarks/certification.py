"""The CPU's half of the CUDA retrieval path: certifying candidate lists in float64 (issue 18, goal 4).

On CUDA, ``retrieval_metrics`` takes each query's top (depth + 16) float32 candidates from the GPU and
certifies them on the CPU (ranks of the relevant pairs, the references within the float32 bound of a
pair's key compared in float64: ``ranks._resolve``). This script times that half alone, on any
machine: the candidate lists are made once (faiss on the CPU: the same lists as the GPU's up to float32
ties) and replayed, so each timed call is the certification and what surrounds it. It compares the
cosine keys' float32 bound ``(D + 16) u ‖q‖ ‖r‖max`` (``KeySpace``) with the general one it replaced,
``(D + 16) u (‖r‖max + ‖q‖)²`` (4x wider for unit rows: more references to compare in float64), and
checks that both give the same values. SOP-like sets (``retrieval_scaling.make_set``), hard.

    python benchmarks/certification.py                     # 30,000 x 512, the ranking keys
    python benchmarks/certification.py --n 60000 --dims 128 512
    python benchmarks/certification.py --quick
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

KEYS = {"3 keys": ["P@1", "R-Precision", "MAP@R"],
        "ranking": ["R@k", "P@1", "R-Precision", "MAP@R", "mAP@C", "mAP@1000"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[30000])
    ap.add_argument("--dims", type=int, nargs="+", default=[512])
    ap.add_argument("--keys", choices=list(KEYS), nargs="+", default=["3 keys", "ranking"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smoke run: 3,000 x 64, one repeat")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.dims, args.repeats = [3000], [64], 1

    from retrieval_scaling import make_set  # the same script folder

    import embedscope.metrics.search.knn as K
    import embedscope.metrics.search.ranks as R
    from embedscope.metrics import retrieval_metrics

    # the candidate-list path (CUDA's) on the CPU, its lists made once and replayed
    R._rows_plan = lambda *a, **k: False
    R._counting_plan = lambda *a, **k: None
    made = R.candidate_blocks
    cache: dict = {}

    def replay(ks, L, **kw):
        key = (ks.Q32.shape, L)
        if key not in cache:
            cache.clear()
            cache[key] = [(s, e, v.copy(), c.copy()) for s, e, v, c in made(ks, L, **kw)]
        yield from cache[key]

    R.candidate_blocks = replay
    init = K.KeySpace.__init__
    bound = {"which": "cosine"}

    def keyspace(self, *a, **k):
        init(self, *a, **k)
        if self.plain and bound["which"] == "general":
            self.delta = (self.Q64.shape[1] + 16) * K.U32 * 1.05 * (self.rmax + np.sqrt(self.qsq)) ** 2 + 1e-300

    K.KeySpace.__init__ = keyspace
    print(f"certification of replayed candidate lists (the CPU's half of the CUDA path); SOP-like, hard; "
          f"min / median of {args.repeats}")
    for dim in args.dims:
        for n in args.n:
            X, y = make_set(n, dim, "sop", "hard")
            for group in args.keys:
                keys = KEYS[group]
                bound["which"] = "cosine"
                ref = retrieval_metrics(X, y, include=keys, device="cpu")  # makes the lists
                times = {"cosine": [], "general": []}
                same = True
                for _ in range(args.repeats):
                    for which in times:
                        bound["which"] = which
                        t = time.perf_counter()
                        got = retrieval_metrics(X, y, include=keys, device="cpu")
                        times[which].append(time.perf_counter() - t)
                        same &= all(got[k] == ref[k] for k in ref if k[0] in "RPm" and k != "R@k")
                c, g = times["cosine"], times["general"]
                print(f"N {n:>7,} D {dim:>4} {group:8s} | bound (D+16)u|q||r|: {min(c):6.3f}/{statistics.median(c):6.3f} s"
                      f" | general bound: {min(g):6.3f}/{statistics.median(g):6.3f} s | {min(g) / min(c):5.2f}x"
                      f" | values {'equal' if same else 'DIFFERENT'}", flush=True)
    return 0


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
