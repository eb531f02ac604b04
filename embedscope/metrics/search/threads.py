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

__all__ = ["search_threads", "n_search_threads", "blas_single_thread", "blocks_in_threads"]

_LOCAL = threading.local()
_BLAS = None  # a cached threadpoolctl controller (building one scans the loaded libraries: ~10 ms) ...
_BLAS_MODULES = -1  # ... built when sys.modules held this many modules (a library loaded since: rebuilt)
_BLAS_LOCK = threading.Lock()
_BLAS_USERS = 0  # the blas_single_thread blocks open in this process, of any thread
_BLAS_LIMIT = None  # the limiter of the first of them: the others share it, the last one restores


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


@contextlib.contextmanager
def blas_single_thread():
    """A context in which BLAS runs one thread (small GEMMs, or GEMM tiles in worker threads).

    BLAS thread counts are process-wide (threadpoolctl), so the blocks of every thread share one
    limit: the first to open sets one thread, the last to close restores the count from before the
    first. (Each block setting and restoring its own, two threads' blocks that overlapped as A opens,
    B opens, A closes, B closes left the whole process on one BLAS thread for good: B restored the
    count A had set.) The BLAS libraries are looked up again when modules were imported since the
    last lookup (one loaded later, e.g. scipy's own OpenBLAS, was left unlimited).

    The OpenBLAS that numpy bundles (scipy-openblas 0.3.x) ignores a count set from a thread other
    than the main one: a search called from a worker thread is limited only if the main thread set
    the limit (as a study's thread workers do: ``study.run._process_state_for_threads``)."""
    global _BLAS, _BLAS_MODULES, _BLAS_USERS, _BLAS_LIMIT
    import sys

    with _BLAS_LOCK:
        if _BLAS_USERS == 0:
            if _BLAS is None or _BLAS_MODULES != len(sys.modules):
                from threadpoolctl import ThreadpoolController

                _BLAS, _BLAS_MODULES = ThreadpoolController(), len(sys.modules)
            _BLAS_LIMIT = _BLAS.limit(limits=1, user_api="blas")
        _BLAS_USERS += 1
    try:
        yield
    finally:
        with _BLAS_LOCK:
            _BLAS_USERS -= 1
            if _BLAS_USERS == 0:
                limit, _BLAS_LIMIT = _BLAS_LIMIT, None
                limit.restore_original_limits()


#: certify a CPU search's candidate lists in worker threads too (tests; on the CPU faiss makes the lists
#: on every core already, and the certification stays on the calling thread)
CERTIFY_THREADS_ON_CPU = False


def blocks_in_threads(blocks, work, device):
    """``work(block)`` of each of ``blocks`` (an iterator the calling thread drives: a GPU's candidate
    lists), in order. Where a GPU makes the blocks, the CPU's cores work on several at once
    (:func:`n_search_threads` worker threads, one BLAS and one torch thread each, at most twice as
    many blocks held as threads) while the GPU makes the next; the results are those of one block
    after the other."""
    n = n_search_threads()
    if n < 2 or not (getattr(device, "type", "cpu") == "cuda" or CERTIFY_THREADS_ON_CPU):
        for b in blocks:
            yield work(b)
        return
    import collections
    import sys
    from concurrent.futures import ThreadPoolExecutor

    def one(b):
        with blas_single_thread():
            return work(b)

    held: collections.deque = collections.deque()
    # torch's thread count is a thread's, and the default of the threads started after it is set: the
    # workers' torch calls (searchsorted) run one torch thread each
    ctx = contextlib.nullcontext()
    if "torch" in sys.modules:
        from embedscope.device import torch_threads

        ctx = torch_threads(1)
    with ctx, ThreadPoolExecutor(n, thread_name_prefix="embedscope-certify") as pool:
        try:
            for b in blocks:
                held.append(pool.submit(one, b))
                if len(held) >= 2 * n:
                    yield held.popleft().result()
            while held:
                yield held.popleft().result()
        finally:
            for f in held:
                f.cancel()
