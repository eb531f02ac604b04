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
