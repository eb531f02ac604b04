"""How many worker threads a CPU search starts (an engineering knob: the results never depend on it).

Every CPU search (:mod:`.rows`, :mod:`.counting`, :mod:`.knn`, the per-class pair keys of
:mod:`.ranks`) runs its tiles in a pool of worker threads, by default one per CPU available to the
process. A caller that already runs one task per core in threads of its own (a study's Dask worker
threads) sets a smaller count for the searches its thread starts::

    with search_threads(1):
        retrieval_metrics(X, y)  # this thread's searches: one worker thread each

The setting is per calling thread (a ``threading.local``), so two worker threads of one process
can each hold their own; it is restored when the block ends. The worker threads run their GEMMs
inside :func:`blas_single_thread` (one BLAS thread each).
"""

from __future__ import annotations

import contextlib
import threading

from embedscope.device import available_cpus

__all__ = ["search_threads", "n_search_threads", "blas_single_thread"]

_LOCAL = threading.local()
_BLAS = None  # a cached threadpoolctl controller (building one scans the loaded libraries: ~10 ms)


def n_search_threads() -> int:
    """Worker threads for a CPU search started from this thread: the count of the innermost
    :func:`search_threads` block of this thread, else the CPUs this process may run on."""
    n = getattr(_LOCAL, "n", None)
    if n:
        return int(n)
    return available_cpus()


@contextlib.contextmanager
def search_threads(n: int):
    """Within the block, CPU searches started from this thread use ``n`` (≥ 1) worker threads."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"search_threads needs a positive integer, got {n!r}")
    prev = getattr(_LOCAL, "n", None)
    _LOCAL.n = n
    try:
        yield
    finally:
        _LOCAL.n = prev


def blas_single_thread():
    """A context in which BLAS runs one thread (small GEMMs, or GEMM tiles in worker threads).
    BLAS thread counts are process-wide (threadpoolctl)."""
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController

        _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=1, user_api="blas")
