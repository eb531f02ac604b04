"""Exact relevant ranks counted row by row in compiled code, right after each block's float32 GEMM
(docs/methods.md §1, "the fused pass").

At the sizes of CUB-200 and CARS196 test sets (thousands of images, classes of tens) the numpy passes
(:mod:`.rows`, :mod:`.counting`) spend most of their time in many small numpy calls, not in the GEMM.
This pass multiplies a block of queries by every reference (one IEEE float32 GEMM, by torch where it is
imported already, else numpy; one thread per worker thread) and hands the block to ``_fused.count_rows``
(C, the GIL released), which ranks each query's relevant references from its row of keys:

1. a key ``L`` with at least ``depth_i`` references keyed ≥ L (counted, never assumed): the depth_i-th
   relevant key, or a higher estimate of the depth_i-th largest key read off every 8th key of the row once
   the count confirms it (for depths beyond R_i without one, the histogram bucket of every key that reaches
   depth_i). A reference whose float32 key g lies below ``L − 2δ_i`` has at least ``depth_i`` references
   surely before it, so its rank is beyond the depth;
2. the relevant references sorted by g; every other reference with g ≥ ``L − 4δ_i`` (the survivors) is
   placed among them: before those keyed below ``g − 2δ_i``, after those above ``g + 2δ_i``, and
   compared by float64 keys with those in between (larger first, the lower index on a tie). A relevant
   reference keyed ≥ ``L − 2δ_i`` has all its predecessors among the survivors, so its count is exact;
3. the relevant references in their exact order (float64 keys where their g lie within 2δ_i of each
   other); rank = 1 + relevant before + others before. Those beyond the depth come last, by index.

``δ_i`` is :func:`~.counting.tile_delta`'s rigorous bound on |float32 key − float64 key| for one GEMM
over the whole inner dimension; the float64 key of a pair is its inner product summed in index order,
pair by pair, so identical rows give identical keys. Nothing is estimated: every rank is exact, with
no fallback. Memory: one block of keys per worker thread (``CACHE_ELEMS`` float32, or ``MIN_BLOCK`` rows),
never N × N.

Used for plain cosine searches (not centred, see :class:`~.knn.KeySpace`) on the CPU with at most
``FUSED_MAX_REFS`` references, references x dimensions ``FUSED_MAX_WORK`` and depth ``FUSED_MAX_DEPTH``, when the
extension was built (``pip install`` compiles it; without a C compiler the numpy passes rank instead,
with the same results).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

try:  # built by `pip install` (pyproject.toml's ext-modules); optional: the numpy passes give the same ranks
    from embedscope.metrics.search import _fused
except ImportError:  # pragma: no cover - a build without a C compiler
    _fused = None

__all__ = ["available", "fused_plan", "relevant_ranks_fused", "rank_sums"]

USE_FUSED = True  # False: never (the tests compare the passes)
FUSED_MAX_REFS = 12_000  # references, and references x dimensions: beyond, the numpy passes' floors and
FUSED_MAX_WORK = 800_000  # bfloat16 pre-filter (on CPUs that multiply bfloat16) win (docs/PERFORMANCE.md)
FUSED_MAX_DIM = 767  # dimensions: from 768 the other passes sum the GEMM in chunks, for a tighter δ
FUSED_MAX_DEPTH = 2048  # deepest rank asked for
CACHE_ELEMS = 1 << 20  # float32 keys per sub-block (4 MiB), ...
MIN_BLOCK, MAX_BLOCK = 32, 512  # ... of this many queries at least and at most (larger GEMMs ran faster than
# sub-blocks of 1 MiB, which fit a core's L2, measured in docs/PERFORMANCE.md)


_POOLS: dict = {}  # worker threads kept between calls (starting two took ~2-4 ms of a 10 ms call)
_POOLS_LOCK = threading.Lock()


def _pool(n: int) -> ThreadPoolExecutor:
    """A pool of ``n`` worker threads, made once per process (and after a fork) and kept."""
    import os

    key = (n, os.getpid())
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = ThreadPoolExecutor(n, thread_name_prefix="embedscope-fused")
        return pool


def available() -> bool:
    """Whether the compiled extension was built and imported."""
    return _fused is not None


def fused_plan(device, ks, depth_q) -> bool:
    """Whether :func:`relevant_ranks_fused` ranks this search (see the module docstring)."""
    if not USE_FUSED or _fused is None or getattr(device, "type", device) != "cpu":
        return False
    if not ks.plain or ks.metric != "cosine":
        return False
    nr, dim = ks.R64.shape
    return (nr <= FUSED_MAX_REFS and nr * dim <= FUSED_MAX_WORK and dim <= FUSED_MAX_DIM
            and int(np.max(depth_q)) <= FUSED_MAX_DEPTH)


def relevant_ranks_fused(ks, lay, depth_q, *, block: int | None = None, threads: int | None = None,
                         progress=False):
    """``(ranks, refs)``: per query, its relevant references (``lay``: :class:`~.ranks._Layout`) in rank
    order, ranks increasing (float64), those beyond ``depth_q`` (one depth, or one per query) last as
    ``inf`` in reference-index order; laid out by ``cumsum(lay.R)``, as :class:`~.ranks.RelevantRanks`
    holds them."""
    from embedscope.device import ieee_float32, torch_threads
    from embedscope.metrics.search.counting import tile_delta
    from embedscope.metrics.search.knn import _bar
    from embedscope.metrics.search.threads import blas_single_thread, n_search_threads

    nq, dim = ks.Q64.shape
    nr = ks.R64.shape[0]
    n_avail = nr - (1 if ks.same else 0)
    R = lay.R
    offsets = np.zeros(nq + 1, dtype=np.int64)
    np.cumsum(R, out=offsets[1:])
    npairs = int(offsets[-1])
    out_rank = np.empty(npairs, dtype=np.float64)
    out_ref = np.empty(npairs, dtype=np.int64)
    if npairs == 0:
        return out_rank, out_ref
    starts, ends = (np.ascontiguousarray(b, dtype=np.int64) for b in lay.bounds)
    ref_cls = np.empty(nr, dtype=np.int64)
    ref_cls[lay.ref_order] = np.repeat(np.arange(starts.size, dtype=np.int64), ends - starts)
    q_cls = np.ascontiguousarray(lay.q_cls, dtype=np.int64)
    ref_order = np.ascontiguousarray(lay.ref_order, dtype=np.int64)
    dq = np.broadcast_to(np.asarray(depth_q, dtype=np.int64), (nq,))
    dq = np.ascontiguousarray(np.clip(dq, 1, max(n_avail, 1)))
    delta = np.ascontiguousarray(tile_delta(ks), dtype=np.float64)
    Q32 = np.ascontiguousarray(ks.Q32, dtype=np.float32)
    if not Q32.flags.writeable:  # (torch.from_numpy warns of a read-only array)
        Q32 = Q32.copy()
    RT = np.ascontiguousarray(ks.R32.T, dtype=np.float32)
    Q64 = np.ascontiguousarray(ks.Q64, dtype=np.float64)
    R64 = Q64 if ks.same and ks.R64 is ks.Q64 else np.ascontiguousarray(ks.R64, dtype=np.float64)

    unsure = np.zeros(nq, dtype=np.uint8)
    # keys closer than this may compare otherwise when numpy's einsum sums them (any two orders of one float64
    # sum differ by at most γ_D ‖q‖ ‖r‖ each: Higham, Accuracy and Stability, (3.5)); u = 2^-53
    u64 = 2.0 ** -53
    eps = 4.0 * (dim * u64 / (1.0 - dim * u64)) * float(np.sqrt(np.max(ks.qsq))) * ks.rmax * 1.01
    n_threads = max(1, int(threads or n_search_threads()))
    # each worker thread takes a contiguous share of the queries and runs it in sub-blocks: one GEMM each,
    # counted right after (the keys still in cache)
    sub = int(max(MIN_BLOCK, min(MAX_BLOCK, CACHE_ELEMS // nr)))
    if block is not None:
        sub = int(max(1, block))
    share = -(-nq // (2 * n_threads)) if n_threads > 1 else nq
    share = max(share, sub)
    spans = [(s, min(nq, s + share)) for s in range(0, nq, share)]
    spans = [(s, e) for s, e in spans if offsets[e] > offsets[s]]  # shares with something to rank
    n_threads = max(1, min(n_threads, len(spans)))
    local = threading.local()
    bar = _bar(progress, nq, "retrieval")
    # the GEMM by torch where a script has imported it already (its single-thread sgemm: 1.3-1.6x OpenBLAS's at
    # 6,000-12,000 rows), else by numpy: importing torch costs 1.3-1.9 s of a CPU-only `embedscope evaluate`
    torch = sys.modules.get("torch")
    if torch is not None:
        Qt, RTt = torch.from_numpy(Q32), torch.from_numpy(RT)

    def run(span):
        buf = getattr(local, "buf", None)
        if buf is None:
            if torch is not None:
                buf = local.buf = torch.empty(sub * nr, dtype=torch.float32)
                if n_threads > 1:  # a worker thread's own torch (OpenMP) thread count: one
                    torch.set_num_threads(1)
            else:
                buf = local.buf = np.empty(sub * nr, dtype=np.float32)
        for s in range(span[0], span[1], sub):
            e = min(span[1], s + sub)
            if torch is not None:
                Gt = buf[:(e - s) * nr].view(e - s, nr)
                torch.mm(Qt[s:e], RTt, out=Gt)
                G = Gt.numpy()
            else:
                G = buf[:(e - s) * nr].reshape(e - s, nr)
                np.matmul(Q32[s:e], RT, out=G)
            _fused.count_rows(G, e - s, nr, s, nq, dim, starts.size, npairs, bool(ks.same), eps, q_cls,
                              ref_cls, ref_order, starts, ends, dq, offsets, delta, Q64, R64, out_rank, out_ref, unsure)
        return span[1] - span[0]

    with contextlib.ExitStack() as stack:
        stack.enter_context(blas_single_thread())  # (numpy's GEMMs, one BLAS thread each)
        if torch is not None:
            stack.enter_context(ieee_float32())
        if n_threads == 1:
            if torch is not None:
                stack.enter_context(torch_threads(1))
            for sp in spans:
                bar.update(run(sp))
        else:
            before = torch.get_num_threads() if torch is not None else None  # (the last count set is the
            try:  # default of threads started later)
                for done in _pool(n_threads).map(run, spans):
                    bar.update(done)
            finally:
                if before is not None:
                    torch.set_num_threads(before)
    bar.close()
    rows = np.flatnonzero(unsure)
    if rows.size:
        _rank_rows_by_numpy(ks, lay, rows, dq, offsets, out_rank, out_ref)
    return out_rank, out_ref


def _rank_rows_by_numpy(ks, lay, rows, dq, offsets, out_rank, out_ref) -> None:
    """The queries ``rows`` whose float64 comparisons came too close for the kernel's summation order
    (near ties within ~1e-14, never seen in real data; constructed sets of near-duplicates): ranked from
    their full rows with :func:`~.counting.pair_keys`'s float64 keys, as the numpy passes rank them."""
    from embedscope.metrics.search.counting import pair_keys
    from embedscope.metrics.search.ranks import _full_row_fallback

    starts, ends = lay.bounds
    members = []
    for q in rows.tolist():
        c = int(lay.q_cls[q])
        m = lay.ref_order[starts[c]:ends[c]]
        members.append(m[m != q] if ks.same else m)
    cnt = np.array([m.size for m in members], dtype=np.int64)
    qi = np.repeat(rows, cnt)
    rj = np.concatenate(members).astype(np.int64)
    k64 = pair_keys(ks.Q64, ks.R64, qi, rj, ks.metric)
    rank = np.empty(qi.size)
    _full_row_fallback(ks, qi, rj, k64, rank, np.ones(qi.size, dtype=bool), int(dq[rows].max()))
    rank[rank > dq[qi]] = np.inf
    order = np.lexsort((rj, rank, qi))  # per query: ranks increasing, those beyond the depth by index
    dest = np.repeat(offsets[rows], cnt) + (np.arange(qi.size) - np.repeat(np.cumsum(cnt) - cnt, cnt))
    out_rank[dest] = rank[order]
    out_ref[dest] = rj[order]


@contextlib.contextmanager
def disabled():
    """Within the block, searches use the numpy passes (tests compare the two)."""
    global USE_FUSED
    prev, USE_FUSED = USE_FUSED, False
    try:
        yield
    finally:
        USE_FUSED = prev


def rank_sums(offsets: np.ndarray, ranks: np.ndarray, limit: np.ndarray):
    """``(hits, psum)``: per query i, over its entries ``ranks[offsets[i]:offsets[i + 1]]`` ranked within
    ``limit[i]``, their number and the sum of position / rank, summed in entry order (the values of
    :meth:`~.ranks.RelevantRanks.hits` and :meth:`~.ranks.RelevantRanks.precision_sum`, bit for bit)."""
    nq = offsets.size - 1
    hits = np.empty(nq, dtype=np.float64)
    psum = np.empty(nq, dtype=np.float64)
    _fused.rank_sums(nq, ranks.size, np.ascontiguousarray(offsets, dtype=np.int64),
                     np.ascontiguousarray(ranks, dtype=np.float64),
                     np.ascontiguousarray(np.broadcast_to(limit, (nq,)), dtype=np.float64), hits, psum)
    return hits, psum

