"""Benchmark: `embedscope study` over >= 12 digits checkpoints.

Measures, side by side in one process on the same checkpoints:

* **direct**: the sum of the plain calls a user would script per checkpoint (load the checkpoint,
  embed train + test, every registry measure) — the floor the study is compared with;
* **serial**: ``run_study(..., workers=0)`` with an empty embedding cache (study overhead =
  serial / direct − 1: planning, hashing, cache writes, row files, statistics with bootstrap,
  figures);
* **dask-2**: ``run_study(..., workers=2)`` (a local Dask cluster of 2 single-threaded worker
  processes, its start-up included) with an empty cache;
* **rerun**: the same study again into the same folder (every row finished: read back, nothing
  measured) and **force**: ``force=True`` (every row measured again, embeddings from the cache).

Training the checkpoints is not timed. The figures are on in every study run (they are part of
the study's work). Repeats alternate the order of serial and dask-2.

    python benchmarks/study.py                 # 4 losses x 3 seeds, D = 16, 1 epoch, 2 repeats
    python benchmarks/study.py --repeats 3 --grid DIR   # reuse a trained grid
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def direct(grid: Path) -> float:
    """Sum of load + embed (train and test) + every measure, per final checkpoint, no study code."""
    from embedscope.analyses.registry import compute_measures
    from embedscope.data import get_dataset
    from embedscope.embed import embed_images
    from embedscope.models import load_checkpoint
    from embedscope.store import EmbeddingSet
    from embedscope.train.grid import read_grid_csv

    t0 = time.perf_counter()
    ds = get_dataset("digits")
    for r in read_grid_csv(grid / "grid.csv"):
        model, _, _ = load_checkpoint(r["checkpoint"])
        X = embed_images(model, ds, progress=False, batch_size=256)
        es = EmbeddingSet(X, ds.labels, ds.paths, ds.split, ds.class_names)
        compute_measures(es, seed=1234)
    return time.perf_counter() - t0


def study(grid: Path, out: Path, cache: Path, workers: int, force: bool = False) -> float:
    from embedscope.study.run import run_study

    t0 = time.perf_counter()
    res = run_study(grid, out, epoch="last", workers=workers, cache_dir=cache, force=force, n_boot=1000,
                    echo=lambda s: None)
    dt = time.perf_counter() - t0
    assert not res["errors"], res["errors"][:1]
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", help="a trained train-grid folder (default: train one in a temporary folder)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--losses", nargs="+", default=["margin", "contrastive", "multisimilarity", "triplet"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    args = ap.parse_args()

    from embedscope.train.grid import read_grid_csv, train_grid

    tmp = Path(tempfile.mkdtemp(prefix="bench-study-"))
    grid = Path(args.grid) if args.grid else tmp / "grid"
    if not (grid / "grid.csv").exists():
        t0 = time.perf_counter()
        train_grid("digits", args.losses, [0.0], args.seeds, grid, options={"embed_dim": 16, "epochs": 1},
                   progress=False, echo=lambda s: None)
        print(f"trained {len(args.losses) * len(args.seeds)} checkpoints in {time.perf_counter() - t0:.1f} s "
              "(not timed below)")
    n = len(read_grid_csv(grid / "grid.csv"))
    print(f"study of {n} final checkpoints + their untrained networks (digits, D = 16); "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f} (a shared machine)")
    direct(grid)  # warm-up: imports, data set, first-call costs
    times: dict[str, list[float]] = {"direct": [], "serial": [], "dask-2": [], "rerun": [], "force": []}
    for rep in range(args.repeats):
        order = ["serial", "dask-2"] if rep % 2 == 0 else ["dask-2", "serial"]
        times["direct"].append(direct(grid))
        for kind in order:
            out, cache = tmp / f"{kind}-{rep}", tmp / f"cache-{kind}-{rep}"
            times[kind].append(study(grid, out, cache, 0 if kind == "serial" else 2))
            if kind == "serial":
                times["rerun"].append(study(grid, out, cache, 0))
                times["force"].append(study(grid, out, cache, 0, force=True))
            shutil.rmtree(cache, ignore_errors=True)
    print(f"{'run':<8} {'min s':>8} {'median s':>9}")
    for k, v in times.items():
        print(f"{k:<8} {min(v):8.2f} {statistics.median(v):9.2f}")
    d, s, p = min(times["direct"]), min(times["serial"]), min(times["dask-2"])
    print(f"direct calls cover {n} checkpoints; the study also measures the untrained references "
          f"({len(set(args.seeds))} more rows)")
    print(f"study overhead over the direct calls (min/min): {100 * (s / d - 1):+.1f}%  "
          f"(per row: {100 * (s / (d * (n + len(set(args.seeds))) / n) - 1):+.1f}%)")
    print(f"serial / dask-2 (min/min): {s / p:.2f}x")
    print(f"first run / rerun from finished rows: {s / min(times['rerun']):.1f}x; "
          f"first run / force (embeddings from the cache): {s / min(times['force']):.1f}x")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
