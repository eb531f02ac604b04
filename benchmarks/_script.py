"""The entry point every benchmark script shares: an error of embedscope's (a missing file, ``--device
cuda`` on a machine without a CUDA GPU) is one line and exit code 1, Ctrl-C one line and 130, as for the
``embedscope`` command; anything else keeps its traceback (a benchmark's bug should be seen)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable


def run(main: Callable[[], int | None]) -> None:
    from embedscope.errors import EmbedscopeError

    name = Path(sys.argv[0]).name
    try:
        rc = main()
    except EmbedscopeError as e:
        sys.exit(f"{name}: error: {e}")
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(rc or 0)


def machine() -> str:
    """One line naming the machine a benchmark ran on: the CPU model (``/proc/cpuinfo``), its cores, whether
    it multiplies bfloat16 in hardware (embedscope's bfloat16 pre-filter is used only then) and whether the
    compiled fused retrieval pass was built (without a C compiler the numpy passes rank: same values, slower
    at CUB/CARS sizes). Timings and ratios differ between CPUs: quote this line with them."""
    import os
    import platform

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        from embedscope.metrics.search.bf16 import bf16_available
        from embedscope.metrics.search.fused import available

        extra = (f", bfloat16 hardware: {'yes' if bf16_available() else 'no'}, "
                 f"fused pass: {'built' if available() else 'not built'}")
    except ImportError:  # (an embedscope without them)
        extra = ""
    return f"{model}, {os.cpu_count()} cores{extra}"
