"""NR-Prec's engine in numpy (below ``NUMPY_BELOW`` rows: no torch import) vs in torch, and the
start-up of ``embedscope properties`` on a small file.

``--engine``: ``property_precision`` at each ``--sizes`` n (D = ``--dim``), the engine forced to numpy
and to torch in turn (torch imported beforehand for both, so only the work is timed), interleaved, min
of ``--repeat``; three settings: Table-6-like properties (3-10 values) uncapped (deep R: long top-L
lists), the same with ``max_r=1023`` (short lists above n = 8,300), and 100 classes uncapped (R = n/100,
short lists). Also checks that both engines give the same numbers, bit for bit.

``--command FILE.h5``: the wall time of ``embedscope properties FILE.h5 --no-progress`` (a subprocess;
the interpreter, imports, reading and the measure), min of ``--repeat``; with ``--old DIR`` the same
command run with ``PYTHONPATH=DIR`` (a copy of an older ``embedscope`` package) interleaved with it.

    .venv/bin/python benchmarks/properties_startup.py --engine --sizes 900 2000 5000 10000 20000
    .venv/bin/python benchmarks/properties_startup.py --command digits.h5 --old /tmp/old --repeat 5
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time

import numpy as np

VALUES = (6, 8, 10, 9, 9, 10, 9, 9, 4, 3)


def make(n: int, dim: int, seed: int = 0):
    """Table-6-like properties, three of them with a trace in X (its first 24 columns); and 100 classes with
    one (its last 16; ``dim`` >= 24)."""
    rng = np.random.default_rng(seed)
    props = {f"p{i}_{v}": rng.integers(0, v, n) for i, v in enumerate(VALUES)}
    X = rng.normal(size=(n, dim)).astype(np.float32)
    for j, codes in enumerate(list(props.values())[:3]):
        X[:, j * 8:(j + 1) * 8] += (1.5 / (j + 1)) * rng.normal(size=(VALUES[j], 8)).astype(np.float32)[codes]
    cls = rng.integers(0, 100, n)
    X[:, -16:] += 1.0 * rng.normal(size=(100, 16)).astype(np.float32)[cls]
    return X, props, {"class": cls}


def _same(a: dict, b: dict) -> bool:
    """Every number of two results equal (NaN equal to NaN)."""
    for k in a:
        for f, v in a[k].items():
            w = b[k][f]
            if isinstance(v, float) and math.isnan(v) and isinstance(w, float) and math.isnan(w):
                continue
            if v != w:
                return False
    return True


def engine(sizes, dim: int, repeat: int) -> None:
    import torch  # noqa: F401  (imported for both engines: only the work is timed)

    from embedscope.metrics import properties as mod

    print(f"property_precision, D = {dim}, min of {repeat} (numpy / torch engine, interleaved)")
    print(f"{'n':>7} {'setting':28s} {'numpy s':>9} {'torch s':>9} {'numpy/torch':>11}  same numbers")
    for n in sizes:
        X, props, cls = make(n, dim)
        for name, p, kw in (("10 properties, uncapped", props, {}), ("10 properties, max_r=1023", props,
                                                                     {"max_r": 1023}),
                            ("100 classes, uncapped", cls, {})):
            times: dict[str, list[float]] = {"numpy": [], "torch": []}
            res = {}
            for _ in range(repeat):
                for eng, below in (("numpy", 1 << 62), ("torch", 0)):
                    mod.NUMPY_BELOW = below
                    t = time.perf_counter()
                    res[eng] = mod.property_precision(X, p, **kw)
                    times[eng].append(time.perf_counter() - t)
            a, b = min(times["numpy"]), min(times["torch"])
            print(f"{n:7d} {name:28s} {a:9.3f} {b:9.3f} {a / b:11.2f}  {_same(res['numpy'], res['torch'])}",
                  flush=True)


def command(path: str, old: str | None, repeat: int) -> None:
    import tempfile

    exe = [sys.executable, "-m", "embedscope", "properties", os.path.abspath(path), "--no-progress"]
    # run in an empty folder: `python -m` puts the working folder first on sys.path (in the repository
    # that is this checkout's package, whatever PYTHONPATH says); the installed package is this checkout's
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runs = {"new": {**os.environ, "PYTHONPATH": here}}
    if old:
        runs["old"] = {**os.environ, "PYTHONPATH": old}
    cwd = tempfile.mkdtemp()
    times: dict[str, list[float]] = {k: [] for k in runs}
    outs = {}
    for _ in range(repeat):
        for k, env in runs.items():
            t = time.perf_counter()
            outs[k] = subprocess.run(exe, env=env, cwd=cwd, capture_output=True, text=True, check=True).stdout
            times[k].append(time.perf_counter() - t)
    load = os.getloadavg()[0]
    print(f"embedscope properties {path}: load average {load:.2f} after the runs")
    for k, ts in times.items():
        print(f"  {k:4s} min {min(ts):.2f} s  (of {repeat}: {' '.join(f'{t:.2f}' for t in ts)})")
    if old:
        print(f"  same table: {outs['new'] == outs['old']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", action="store_true")
    ap.add_argument("--sizes", type=int, nargs="+", default=[900, 2000, 5000, 10000, 20000])
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--command", metavar="FILE.h5")
    ap.add_argument("--old", metavar="DIR", help="PYTHONPATH of the older package (with --command)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smoke run: --engine at n = 900 and 2,000, one repeat")
    a = ap.parse_args()
    if a.quick:
        a.engine, a.sizes, a.repeat = True, [900, 2000], 1
    if a.dim < 24:
        ap.error("--dim must be at least 24 (three properties leave a trace in 8 columns each)")
    if a.engine or not a.command:  # (no option: the engine comparison, as `make bench` runs it)
        engine(a.sizes, a.dim, a.repeat)
    if a.command:
        command(a.command, a.old, a.repeat)


if __name__ == "__main__":
    from _script import run  # a sibling module (benchmarks/ is the script's folder)

    run(main)
