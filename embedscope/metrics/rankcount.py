"""Exact ranks of the relevant references by a thresholded counting pass (METHODS.md §1, mAP@1000).

Every retrieval metric of METHODS.md §1 needs, per query, only the exact rank of each relevant
reference (same label) within a depth. For a deep depth such as mAP@1000's, keeping a top-1000
list per query (a heap, as faiss's flat search or Roth's code do) costs more than the GEMM itself.
This module obtains the same ranks by **counting** instead:

1. A per-query floor key ``τ_i`` below which nothing needs to be known:
   ``τ_i = max(floor_i, lowest relevant key_i − 2δ_i)``, where ``floor_i`` is an estimate of the
   query's depth-th largest key from a random sample of the references (faiss flat search on the
   sample; any value works for exactness, a good one keeps step 2 cheap).
2. One float32 GEMM pass over cache-sized tiles (query block × reference tile): the references
   whose float32 key exceeds ``τ_i`` ("survivors", about 1–2 × depth per query) are kept for the
   moment of the tile; everything else is discarded at once. Per tile the survivors are sorted
   (each query's in its own band of a float64 line) and, for every relevant pair, the survivors
   surely before it (float32 key > its float64 key + δ_i) are counted with a binary search; those
   within ±δ_i of its key are compared in float64, lower index first on ties.
3. A pair whose key lies above ``τ_i + δ_i`` has all its predecessors among the survivors, so its
   rank is exact. A pair below is certified beyond the depth when at least ``depth`` survivors lie
   above ``τ_i + 2δ_i``; otherwise (the floor estimate was too high, which happens with a
   probability of about 1e-9 per query) it is reported unresolved and the caller ranks it from the
   query's full row.

``δ_i`` is twice the rigorous float32 error bound of :class:`embedscope.metrics.knn.KeySpace`, so
that it also covers the Euclidean key computed as one augmented GEMM
(``[2q, −1]·[r, ‖r‖²] − ‖q‖²``). Memory: one tile and its survivors per thread, never N × N.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from embedscope.metrics.knn import KeySpace, _bar, pair_keys64

__all__ = ["relevant_ranks_by_count", "floor_keys"]

QUERY_BLOCK = 1024
REF_TILE = 2048
SAMPLE_TOP = 32.0  # expected sampled references among a query's top `depth`
SAMPLE_SIGMAS = 6.0


def floor_keys(ks: KeySpace, depth: int, seed: int = 0) -> np.ndarray:
    """Per query, a key that lies below its ``depth``-th largest key with overwhelming probability.

    From a random sample of a fraction f = 32 / depth of the references: the number of sampled
    references among a query's true top ``depth`` is hypergeometric with mean μ = depth·f, so the
    ⌈μ + 6√μ⌉-th largest sampled key (one more in a same-set search, where the query itself may
    be sampled) falls below the depth-th largest key except with a probability of about 1e-9.
    Exactness does not depend on it (see the module docstring)."""
    import faiss

    nr = ks.R32.shape[0]
    ns = int(min(nr, math.ceil(nr * min(1.0, SAMPLE_TOP / depth))))
    mu = depth * ns / nr
    j = int(min(ns, math.ceil(mu + SAMPLE_SIGMAS * math.sqrt(mu)) + (1 if ks.same else 0)))
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(nr, ns, replace=False))
    R = np.ascontiguousarray(ks.R32[sample])
    d = R.shape[1]
    index = faiss.IndexFlatIP(d) if ks.metric == "cosine" else faiss.IndexFlatL2(d)
    index.add(R)
    out = np.empty(ks.Q32.shape[0], dtype=np.float64)
    for s in range(0, ks.Q32.shape[0], 8192):
        v, _ = index.search(ks.Q32[s:s + 8192], j)
        v = v[:, -1].astype(np.float64)
        out[s:s + 8192] = v if ks.metric == "cosine" else -v
    return out


class _Pass:
    """The state shared by the tiles of one counting pass."""

    def __init__(self, ks: KeySpace, qi, rj, k64, depth, floor):
        self.ks, self.qi, self.rj, self.k64, self.depth = ks, qi, rj, k64, depth
        nq = ks.Q32.shape[0]
        self.delta = 2.0 * ks.delta
        low = np.full(nq, np.inf)
        np.minimum.at(low, qi, k64 - 2.0 * self.delta[qi])
        self.tau = np.maximum(floor, low)  # +inf for queries without pairs: nothing survives
        if ks.metric == "cosine":
            self.Qa, Ra = ks.Q32, ks.R32
            self.qoff = np.zeros(nq)
            bound = float(np.sqrt(ks.qsq.max()) * np.sqrt(np.einsum("ij,ij->i", ks.R32, ks.R32).max())) + 1.0
            self.base, self.W = -bound - 1.0, 2.0 * bound + 2.0
        else:
            self.Qa = np.hstack([2.0 * ks.Q32, -np.ones((nq, 1), np.float32)])
            Ra = np.hstack([ks.R32, ks.rn2_32[:, None]])
            self.qoff = ks.qsq
            qmax = float(np.sqrt(ks.qsq.max()))
            rmax = float(np.sqrt(ks.rn2_32.max()))
            bound = (qmax + rmax) ** 2 + 1.0
            self.base, self.W = -bound - 1.0, bound + 2.0 + 1.0
        self.RaT = np.ascontiguousarray(Ra.T)
        thr = (self.tau + self.qoff).astype(np.float32)
        self.thr = np.nextafter(thr, np.float32(-np.inf))  # float32 filter at or below τ_i (+‖q‖²)
        self.bounds = np.searchsorted(qi, np.arange(nq + 1))

    def block(self, s: int, e: int, tile: int):
        """Ranks (before the depth cut) of the pairs of queries s..e-1, and per-pair flags."""
        ks, qi, rj, k64 = self.ks, self.qi, self.rj, self.k64
        p0, p1 = self.bounds[s], self.bounds[e]
        b = e - s
        nr = self.RaT.shape[1]
        pr = qi[p0:p1] - s
        pk = k64[p0:p1]
        pref = rj[p0:p1]
        dl = self.delta[s:e]
        W, base = self.W, self.base
        # a survivor's band coordinate g = row·W + (key − base) has an absolute rounding error of a
        # few ulp of (b + 1)·W; η (added to ±δ) absorbs twice that
        eta = 8.0 * np.spacing((b + 1) * W)
        hi_g = pr * W + ((pk + dl[pr] + eta) - base)
        lo_g = pr * W + ((pk - dl[pr] - eta) - base)
        end_g = (np.arange(b) + 1) * W  # every g of row r lies in (rW, (r+1)W)
        sure = np.zeros(p1 - p0, dtype=np.int64)
        n_high = np.zeros(b, dtype=np.int64)
        win_p, win_r = [], []
        Qb = self.Qa[s:e]
        thr = self.thr[s:e, None]
        tau2 = self.tau[s:e] + 2.0 * dl
        qoff = self.qoff[s:e]
        buf = np.empty(b * tile, dtype=np.float32)
        mbuf = np.empty(b * tile, dtype=bool)
        for r0 in range(0, nr, tile):
            r1 = min(nr, r0 + tile)
            w = r1 - r0
            T = buf[:b * w].reshape(b, w)
            np.matmul(Qb, self.RaT[:, r0:r1], out=T)
            if ks.same:
                lo, hi = max(s, r0), min(e, r1)
                if lo < hi:
                    d = np.arange(lo, hi)
                    T[d - s, d - r0] = -np.inf
            M = mbuf[:b * w].reshape(b, w)
            np.greater(T, thr, out=M)
            f = np.flatnonzero(M)
            if f.size == 0:
                continue
            rows = f // w
            v = T.ravel()[f].astype(np.float64) - qoff[rows]
            n_high += np.bincount(rows[v > tau2[rows]], minlength=b)
            g = rows * W + (v - base)
            g.sort()
            c_hi = np.searchsorted(g, hi_g, side="right")
            c_lo = np.searchsorted(g, lo_g, side="left")
            c_end = np.searchsorted(g, end_g, side="right")
            sure += c_end[pr] - c_hi
            win = c_hi - c_lo
            # the pair's own reference is within its window whenever it survived
            own = (pref >= r0) & (pref < r1)
            if own.any():
                io = np.flatnonzero(own)
                win[io] -= M[pr[io], pref[io] - r0]
            for p in np.flatnonzero(win > 0):
                r = pr[p]
                cols = np.flatnonzero(M[r])
                gv = r * W + ((T[r, cols].astype(np.float64) - qoff[r]) - base)
                sel = cols[(gv >= lo_g[p]) & (gv <= hi_g[p])] + r0
                sel = sel[sel != pref[p]]
                win_p.append(np.full(sel.size, p))
                win_r.append(sel)
        amb = np.zeros(p1 - p0, dtype=np.int64)
        if win_p:
            wp = np.concatenate(win_p)
            wr = np.concatenate(win_r)
            kr = pair_keys64(ks.Q64, ks.R64, qi[p0:p1][wp], wr, ks.metric)
            before = (kr > pk[wp]) | ((kr == pk[wp]) & (wr < pref[wp]))
            amb = np.bincount(wp[before], minlength=p1 - p0)
        rank = (1 + sure + amb).astype(np.float64)
        certified = pk - dl[pr] > self.tau[s:e][pr]
        beyond = ~certified & (n_high[pr] >= self.depth)
        rank[beyond] = np.inf
        rank[rank > self.depth] = np.inf
        return p0, p1, rank, ~certified & ~beyond


def relevant_ranks_by_count(ks: KeySpace, qi: np.ndarray, rj: np.ndarray, k64: np.ndarray, depth: int, *,
                            seed: int = 0, progress: bool = False, block: int | None = None,
                            tile: int = REF_TILE, threads: int | None = None):
    """Exact rank (``inf`` beyond ``depth``) of every relevant pair ``(qi[p], rj[p])``.

    ``qi`` must be sorted; ``k64`` holds the pairs' float64 keys (:func:`pair_keys64`). Returns
    ``(rank, unresolved)``: the few unresolved pairs (floor estimate too high) must be ranked from
    their query's full row by the caller. The float32 GEMM of each tile runs with one BLAS thread
    per worker and ``threads`` workers (default: the CPU count, at most 2 per core's worth of
    tiles), so the counting of one tile overlaps the GEMM of another.
    """
    nq = ks.Q32.shape[0]
    block = int(block or QUERY_BLOCK)
    st = _Pass(ks, qi, rj, k64, int(depth), floor_keys(ks, int(depth), seed))
    rank = np.empty(qi.size, dtype=np.float64)
    unresolved = np.zeros(qi.size, dtype=bool)
    starts = list(range(0, nq, block))
    n_threads = int(threads or min(len(starts), os.cpu_count() or 1))
    bar = _bar(progress, nq, "retrieval")

    def run(s):
        return s, st.block(s, min(nq, s + block), tile)

    if n_threads <= 1:
        results = map(run, starts)
        ctx = None
    else:
        from threadpoolctl import threadpool_limits

        ctx = threadpool_limits(limits=1, user_api="blas")
        pool = ThreadPoolExecutor(n_threads)
        results = pool.map(run, starts)
    try:
        for s, (p0, p1, rk, un) in results:
            rank[p0:p1], unresolved[p0:p1] = rk, un
            bar.update(min(nq, s + block) - s)
    finally:
        if ctx is not None:
            pool.shutdown()
            ctx.restore_original_limits()
        bar.close()
    return rank, unresolved
