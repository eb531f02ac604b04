"""Benchmark: `embedscope study` over >= 12 digits checkpoints.

Measures, side by side in one process on the same checkpoints:

* **direct**: the plain calls a user would script per checkpoint, no study code (load the
  checkpoint, embed train + test with :func:`embedscope.embed.embed_images`, every registry
  measure), over exactly the checkpoints the study measures: the 12 final checkpoints and the 3
  untrained networks of the seeds (the study's reference rows; built once, outside the timing);
* **direct-1t**: the same with ``torch.set_num_threads(1)``: a study embeds on the CPU with one torch
  thread in every process (so that its rows do not depend on who computes them), so this is the
  like-for-like floor;
* **serial**: ``run_study(..., workers=0)`` with an empty embedding cache. Study overhead =
  serial / direct-1t − 1 and serial / direct − 1 (planning, hashing, the untrained networks, cache
  and row files, statistics with the bootstrap, tables, figures). Also printed: serial / (the sum of
  the study's own embed + measure timers) − 1;
* **dask-2**: ``run_study(..., workers=2)`` (the default local Dask cluster: 2 single-threaded
  worker threads in this process, its start-up and shut-down included) with an empty cache;
* **dask-2p** (with ``--worker-processes``): ``run_study(..., workers=2, worker_processes=True)``, 2
  spawned worker processes that import torch;
* **serial-nofig** (with ``--no-figures-too``): the serial study with ``figures=False`` (statistics
  and tables still written): how much of the overhead the figures are;
* **rerun**: the same study again into the same folder (every row finished: read back, nothing
  measured) and **force**: ``force=True`` (every row measured again, embeddings from the cache).

Training the checkpoints is not timed. The figures (PNG + PDF) and the bootstrap (1,000 resamples)
are on in every study run. The order of the runs rotates between repeats.

    python benchmarks/study.py                          # 4 losses x 3 seeds, D = 16, 1 epoch, 3 repeats
    python benchmarks/study.py --repeats 5 --grid DIR   # reuse a trained grid (train-grid folder)
    python benchmarks/study.py --grid DIR --root SHAPES --repeats 2   # a shapes grid (notebook 01's)

``--root`` measures a grid trained on a data set with a folder (say the 33 ``shapes`` runs of
notebook 01, 64 px: checkpoints that take seconds each to embed and measure, where the digits'
take ~0.1 s); the digits-only ``direct`` runs are then left out, and the overhead is taken over the
study's own embed + measure timers.

Without ``--grid`` the grid is trained into a new temporary folder, which is kept (its path is
printed) for the next run's ``--grid``.
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


def direct(checkpoints: list[str]) -> float:
    """Load + embed (train and test) + every registry measure, per checkpoint, no study code."""
    from embedscope.analyses.registry import compute_measures
    from embedscope.data import get_dataset
    from embedscope.embed import embed_images
    from embedscope.models import load_checkpoint
    from embedscope.store import EmbeddingSet

    t0 = time.perf_counter()
    ds = get_dataset("digits")
    for ck in checkpoints:
        model, _, _ = load_checkpoint(ck)
        X = embed_images(model, ds, progress=False, batch_size=256)
        es = EmbeddingSet(X, ds.labels, ds.paths, ds.split, ds.class_names)
        compute_measures(es, seed=1234)
    return time.perf_counter() - t0


def study(grid: Path, out: Path, cache: Path, workers: int, force: bool = False,
          processes: bool = False, figures: bool = True, root: str | None = None) -> tuple[float, float]:
    """(wall seconds, sum of the embed + measure seconds of the rows it measured)."""
    from embedscope.study.run import run_study

    t0 = time.perf_counter()
    res = run_study(grid, out, epoch="last", root=root, workers=workers, worker_processes=processes,
                    cache_dir=cache, force=force, n_boot=1000, figures=figures, echo=lambda s: None)
    dt = time.perf_counter() - t0
    assert not res["errors"], res["errors"][:1]
    return dt, sum(r["embed_seconds"] + r["measure_seconds"] for r in res["computed"])


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", help="a trained train-grid folder (default: train one in a temporary folder)")
    ap.add_argument("--root", help="the data folder of a --grid trained on a data set with one (shapes, photos); "
                    "the digits-only direct runs are then left out")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--losses", nargs="+", default=["margin", "contrastive", "multisimilarity", "triplet"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--worker-processes", action="store_true",
                    help="also time 2 local worker processes (dask-2p) besides the default 2 worker threads")
    ap.add_argument("--no-figures-too", action="store_true",
                    help="also time the serial study without figures (serial-nofig): what the figures cost")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 2 losses x 1 seed (3 checkpoints with the untrained reference), one repeat")
    args = ap.parse_args()
    if args.quick:
        args.losses, args.seeds, args.repeats = args.losses[:2], args.seeds[:1], 1

    import torch

    from embedscope.study.plan import plan_study
    from embedscope.train.grid import train_grid

    if args.grid and not (Path(args.grid) / "grid.csv").is_file():  # a mistyped path is not trained into
        ap.error(f"--grid {args.grid}: no grid.csv there (leave --grid out to train a new grid)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-study-"))
    grid = Path(args.grid) if args.grid else Path(tempfile.mkdtemp(prefix="bench-study-grid-")) / "grid"
    if not (grid / "grid.csv").exists():
        t0 = time.perf_counter()
        train_grid("digits", args.losses, [0.0], args.seeds, grid, options={"embed_dim": 16, "epochs": 1},
                   progress=False, echo=lambda s: None)
        print(f"trained {len(args.losses) * len(args.seeds)} checkpoints in {time.perf_counter() - t0:.1f} s "
              f"(not timed below); kept for the next run: --grid {grid}")
    entries = plan_study(grid, tmp / "plan", epoch="last", untrained_dir=tmp / "untrained")
    checkpoints = [e.checkpoint for e in entries]
    n_ref = sum(e.selection == "untrained" for e in entries)
    threads = torch.get_num_threads()
    print(f"study of {len(entries)} checkpoints ({len(entries) - n_ref} final + {n_ref} untrained references; "
          f"{'data ' + args.root if args.root else 'digits, D = 16'}); "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__} with {threads} threads; load average at start "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} (a shared machine)")
    root = args.root
    if not root:
        direct(checkpoints)  # warm-up: imports, data set, first-call costs
    study(grid, tmp / "warm", tmp / "cache-warm", 0, root=root)
    shutil.rmtree(tmp / "cache-warm", ignore_errors=True)
    kinds = (([] if root else ["direct", "direct-1t"]) + ["serial", "dask-2"]
             + (["dask-2p"] if args.worker_processes else []) + (["serial-nofig"] if args.no_figures_too else []))
    times: dict[str, list[float]] = {k: [] for k in kinds + ["rerun", "force"]}
    cores: dict[str, list[float]] = {k: [] for k in kinds}  # CPU seconds (this process + its children) / wall
    inner: list[float] = []
    inner_nofig: list[float] = []
    for rep in range(args.repeats):
        order = kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]
        for kind in order:
            c0 = _cpu()
            if kind.startswith("direct"):
                torch.set_num_threads(1 if kind == "direct-1t" else threads)
                try:
                    times[kind].append(direct(checkpoints))
                finally:
                    torch.set_num_threads(threads)
                cores[kind].append((_cpu() - c0) / times[kind][-1])
                continue
            out, cache = tmp / f"{kind}-{rep}", tmp / f"cache-{kind}-{rep}"
            dt, own = study(grid, out, cache, 0 if kind.startswith("serial") else 2, processes=kind == "dask-2p",
                            figures=kind != "serial-nofig", root=root)
            times[kind].append(dt)
            cores[kind].append((_cpu() - c0) / dt)
            if kind == "serial-nofig":
                inner_nofig.append(own)
            if kind == "serial":
                inner.append(own)
                times["rerun"].append(study(grid, out, cache, 0, root=root)[0])
                times["force"].append(study(grid, out, cache, 0, force=True, root=root)[0])
            shutil.rmtree(cache, ignore_errors=True)
        print(f"repeat {rep + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in times.items()) +
              f"; load average {os.getloadavg()[0]:.1f}", flush=True)
    print(f"\n{'run':<12} {'min s':>8} {'median s':>9} {'cores used':>11}")
    for k, v in times.items():
        used = f"{statistics.median(cores[k]):11.2f}" if cores.get(k) else ""
        print(f"{k:<12} {min(v):8.2f} {statistics.median(v):9.2f} {used}")
    print("(cores used: median CPU seconds of this process and its finished children per wall second; "
          "below the core count when other jobs take the machine)")
    med = {k: statistics.median(v) for k, v in times.items()}
    mn = {k: min(v) for k, v in times.items()}
    for d in [k for k in ("direct-1t", "direct") if k in mn]:
        print(f"study overhead over {d} (same {len(entries)} checkpoints): "
              f"{100 * (mn['serial'] / mn[d] - 1):+.1f}% (min/min), "
              f"{100 * (med['serial'] / med[d] - 1):+.1f}% (median/median)")
    print(f"study overhead over its own embed + measure timers: "
          f"{100 * min(s / i - 1 for s, i in zip(times['serial'], inner)):+.1f}% (best repeat), "
          f"{100 * statistics.median(s / i - 1 for s, i in zip(times['serial'], inner)):+.1f}% (median)")
    if inner_nofig:
        print(f"serial study without figures, overhead over its own embed + measure timers: "
              f"{100 * min(s / i - 1 for s, i in zip(times['serial-nofig'], inner_nofig)):+.1f}% (best repeat), "
              f"{100 * statistics.median(s / i - 1 for s, i in zip(times['serial-nofig'], inner_nofig)):+.1f}% "
              "(median)")
    for k in [k for k in kinds if k.startswith("dask")]:
        print(f"serial / {k}: {mn['serial'] / mn[k]:.2f}x (min/min), {med['serial'] / med[k]:.2f}x (median/median)")
    print(f"first run / rerun from finished rows: {mn['serial'] / mn['rerun']:.0f}x (min/min); "
          f"first run / force (embeddings from the cache): {mn['serial'] / mn['force']:.1f}x")
    print(f"load average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
