"""Exact ranks of the relevant references by a thresholded counting pass (docs/methods.md §1, mAP@1000).

Every retrieval metric of docs/methods.md §1 needs, per query, only the exact rank of each relevant
reference (same label) within a depth. For a deep depth such as mAP@1000's, keeping a top-1000
list per query (a heap, as faiss's flat search or Roth's code do) costs more than the GEMM itself.
This module obtains the same ranks by **counting** instead:

1. A per-query floor key ``τ_i`` below which nothing needs to be known:
   ``τ_i = max(floor_i, lowest relevant key_i − 2δ_i)``, where ``floor_i`` is an estimate of the
   query's depth-th largest key from a random sample of the references (faiss flat search on the
   sample; any value works for exactness, a good one keeps step 2 cheap).
2. One float32 GEMM pass over cache-sized tiles (query block × reference tile): the references
   whose float32 key exceeds ``τ_i`` ("survivors", about 1–2 × depth per query) are kept for the
   moment of the tile; everything else is discarded at once. The survivors of several tiles of
   a query block (up to ``PENDING`` per thread) are sorted together
   (each query's in its own band of a float64 line) and, for every relevant pair, the survivors
   surely before it (float32 key > its float64 key + δ_i) are counted with a binary search; those
   within ±δ_i of its key are compared in float64, lower index first on ties.
3. A pair whose key lies above ``τ_i + δ_i`` has all its predecessors among the survivors, so its
   rank is exact. A pair below is certified beyond the depth when at least ``depth`` survivors lie
   above ``τ_i + 2δ_i``; otherwise (the floor estimate was too high, which happens with a
   probability of about 1e-9 per query) it is reported unresolved and the caller ranks it from the
   query's full row.

In a same-set cosine search the key matrix is symmetric, so each pair of query blocks is multiplied
once and the tile is counted for both blocks (the second time with the thresholds broadcast along
its columns, reading it in place). Tiles are shared among worker threads, each with one BLAS
thread, so the counting of one tile overlaps the GEMM of another.

``δ_i`` is a rigorous float32 error bound of the tile's key: for cosine ``(D + 16) u ‖q_i‖ ‖r‖max``
(the inner product's forward error, u = 2⁻²⁴), or (K + c + 16) u ‖q_i‖ ‖r‖max when the tile GEMM
sums c chunks of at most K = 512 columns of the inner dimension separately (cosine at D ≥ 768:
3.9× tighter at D = 2,048, and as many times fewer float64 window keys; K = 256 over at most
4,096 references, :func:`k_chunks`, :func:`tile_delta`); for
Euclidean twice the bound of
:class:`embedscope.metrics.search.knn.KeySpace`, so that it covers the key computed as one augmented GEMM
(``[2q, −1]·[r, ‖r‖²] − ‖q‖²``); for a centred search (a nearly collapsed model, see
:class:`~embedscope.metrics.search.knn.KeySpace`) the same of its centred rows. Memory: one tile
and at most ``PENDING`` survivors (64 MiB) per thread, never N × N.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from embedscope.metrics.search.knn import (
    U32,
    KeySpace,
    _augmented32,
    _bar,
    dense_windows,
    faiss_flat,
    faiss_keys,
    pair_keys64,
    tie_window_before,
)
from embedscope.metrics.search.threads import blas_single_thread, n_search_threads

__all__ = ["relevant_ranks_by_count", "floor_keys", "tile_delta", "augmented", "k_chunks", "TileGemm"]

QUERY_BLOCK = 1024
REF_TILE = 2048
SAMPLE_TOP = 32.0  # expected sampled references among a query's top `depth`
SAMPLE_SIGMAS = 6.0
K_CHUNK = 512  # cosine tiles at large D: the inner dimension summed in chunks of this many columns
# (512 was 2-9% faster than 256 at N = 6,000-30,000, D = 768-2,048, measured in docs/PERFORMANCE.md)
CHUNK_MIN_DIM = 768  # ... from this dimension on (see tile_delta), and half as many columns over at most
CHUNK_SMALL_REFS = 4096  # this many references: there the float64 window keys weigh more against the GEMM
# (256 columns: a 1.9x tighter bound, half the window keys, ~2.5% more GEMM time; 3-4% faster at
# 2,000 x 1,024-2,048, 4-5% slower at 6,000 x 2,048: docs/PERFORMANCE.md, ninth session)
BF16_NEG_INF = np.int16(-128)  # the bit pattern of a bfloat16 −inf (0xFF80) as int16
PENDING = 1 << 22  # survivors (16 bytes each) kept per thread before counting: several tiles per sort
NUMPY_FLOOR_MAX = 1 << 24  # floor keys by numpy GEMM + partition up to this many sampled keys, else faiss
PAIR_KEY_ELEMS = 1 << 17  # float64 elements per gathered chunk of pair_keys (1 MiB, reused; see pair_keys64)


def pair_keys(Q64: np.ndarray, R64: np.ndarray, qi: np.ndarray, rj: np.ndarray, metric: str) -> np.ndarray:
    """:func:`~embedscope.metrics.search.knn.pair_keys64` with buffers of ``PAIR_KEY_ELEMS`` float64
    elements (bitwise the same keys)."""
    return pair_keys64(Q64, R64, qi, rj, metric, chunk_bytes=8 * PAIR_KEY_ELEMS)


def floor_keys(ks: KeySpace, depth: int, seed: int = 0, sample_top: float = SAMPLE_TOP) -> np.ndarray:
    """Per query, a key that lies below its ``depth``-th largest key with overwhelming probability.

    From a random sample of a fraction f = sample_top / depth (32 / depth by default) of the
    references: the number of sampled references among a query's true top ``depth`` is
    hypergeometric with mean μ = depth·f, so the
    ⌈μ + 6√μ⌉-th largest sampled key (one more in a same-set search, where the query itself may
    be sampled) falls below the depth-th largest key except with a probability of about 1e-9.
    Exactness does not depend on it (see the module docstring)."""
    nr = ks.R32.shape[0]
    ns = int(min(nr, math.ceil(nr * min(1.0, sample_top / depth))))
    mu = depth * ns / nr
    j = int(min(ns, math.ceil(mu + SAMPLE_SIGMAS * math.sqrt(mu)) + (1 if ks.same else 0)))
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(nr, ns, replace=False))
    nq = ks.Q32.shape[0]
    if nq * ns <= NUMPY_FLOOR_MAX:  # small: one numpy GEMM and a partition (no OpenMP start-up)
        Qa, Ra, qoff = augmented(ks)
        RsT = np.ascontiguousarray(Ra[sample].T)
        S = Qa @ RsT
        return np.partition(S, ns - j, axis=1)[:, ns - j].astype(np.float64) - qoff
    index, Qs = faiss_flat(ks, sample)
    out = np.empty(nq, dtype=np.float64)
    for s in range(0, nq, 8192):
        e = min(nq, s + 8192)
        v, _ = index.search(Qs[s:e], j)
        out[s:e] = faiss_keys(ks, v[:, -1:], s, e)[:, 0]
    return out


GEMM_WINDOW_RATIO = 0  # window keys by a float64 GEMM when block x window refs < this x window pairs (off: once
# windows of pairs beyond the depth are skipped, the per-pair keys were faster, 4.2 s vs 6.3 s at N = 6,000, D = 2,048)


def _gemm_keys(ks: KeySpace, s: int, e: int, qw: np.ndarray, wr: np.ndarray, ur: np.ndarray) -> np.ndarray:
    """Float64 keys of the pairs (qw, wr) (queries in s..e−1, references among ``ur``) from float64
    GEMMs of row chunks: within the :func:`_pair_keys_by_class` error of :func:`pair_keys64`."""
    Ru = ks.R64[ur]
    rsq = None if ks.metric == "cosine" else np.einsum("ij,ij->i", Ru, Ru)
    col = np.searchsorted(ur, wr)
    out = np.empty(qw.size, dtype=np.float64)
    order = np.argsort(qw, kind="stable")
    bounds = np.searchsorted(qw[order], np.arange(s, e + 1))
    step = max(1, (1 << 23) // max(ur.size, 1))
    for c0 in range(s, e, step):
        c1 = min(e, c0 + step)
        sel = order[bounds[c0 - s]:bounds[c1 - s]]
        if sel.size == 0:
            continue
        G = ks.Q64[c0:c1] @ Ru.T
        v = G[qw[sel] - c0, col[sel]]
        if rsq is not None:  # −‖q − r‖² = 2 q·r − ‖r‖² − ‖q‖²
            v = 2.0 * v - rsq[col[sel]] - ks.qsq[qw[sel]]
        out[sel] = v
    return out


def k_chunks(ks: KeySpace, chunk: int | None = None) -> list[tuple[int, int]]:
    """The column ranges of the inner dimension that the tile GEMM sums separately (one range
    unless a cosine search at D ≥ ``CHUNK_MIN_DIM``; ``K_CHUNK`` columns, half as many over at most
    ``CHUNK_SMALL_REFS`` references): see :func:`tile_delta`."""
    d = ks.Q64.shape[1]
    small = ks.R64.shape[0] <= CHUNK_SMALL_REFS
    k = int(chunk if chunk is not None else ((K_CHUNK // 2 if small else K_CHUNK) if d >= CHUNK_MIN_DIM else 0))
    if not ks.plain or k <= 0 or k >= d:
        return [(0, d + (0 if ks.plain else 1))]
    c = -(-d // k)
    k = -(-d // c)  # equal chunks
    return [(a, min(d, a + k)) for a in range(0, d, k)]


def tile_delta(ks: KeySpace, chunks: list[tuple[int, int]] | None = None) -> np.ndarray:
    """Per query, a rigorous bound on the error of any float32 key computed as :func:`augmented`
    describes (whatever the summation order within one GEMM).

    Cosine with the inner dimension split into c chunks of at most K columns, each chunk one
    float32 GEMM and the chunk results added in float32 in a fixed order (:func:`k_chunks`):
    each chunk's sum, whatever its order, is within γ_K Σ_chunk |q_k r_k| of its exact value
    and the c − 1 additions add γ_{c−1} Σ|q_k r_k|, so the key is within
    (K + c + 16) u ‖q‖ ‖r‖max of q·r (the 16 covering the rounding of q and r to float32 and the
    γ denominators); one chunk gives the classical (D + 16) u ‖q‖ ‖r‖max. At D = 2,048 chunks of
    512 make the bound 3.9× tighter and chunks of 256 7× (:func:`k_chunks` takes 256 over at most
    ``CHUNK_SMALL_REFS`` references, where the float64 window keys weigh more against the GEMM),
    and the float64 window keys about as many times fewer."""
    if ks.plain:
        # |fl32(q32·r32) − q·r| ≤ γ_D Σ|q_k r_k| + 2u‖q‖‖r‖ ≤ (D + 16) u ‖q‖ ‖r‖max (Cauchy–Schwarz)
        ch = chunks or [(0, ks.Q64.shape[1])]
        kmax = max(b - a for a, b in ch)
        return (kmax + len(ch) + 16) * U32 * 1.05 * np.sqrt(ks.qsq) * ks.rmax + 1e-300
    return 2.0 * ks.delta  # the augmented GEMM (Euclidean, centred): twice KeySpace's bound covers its extra terms


def augmented(ks: KeySpace):
    """``(Qa, Ra, qoff)``: float32 operands whose products minus ``qoff`` are the keys (cosine:
    q·r; Euclidean: [2q, −1]·[r, ‖r‖²] − ‖q‖² = −‖q − r‖²; a centred search, :class:`KeySpace`:
    the same of the centred rows, or for cosine [q', −1]·[r', −c·r'] + c·q' + ‖c‖² = q·r)."""
    nq = ks.Q32.shape[0]
    if ks.plain:
        return ks.Q32, ks.R32, np.zeros(nq)
    return (*_augmented32(ks), ks.qoff)


class TileGemm:
    """The float32 tile keys of :func:`augmented` (queries × a range of references), the inner
    dimension summed in the chunks of :func:`k_chunks` and the chunk sums added in float32 in order
    (the error bound of :func:`tile_delta`); in a same-set search a query's own key is −inf.
    ``copy_refs``: keep a contiguous transposed copy of the references (else a transposed view)."""

    def __init__(self, ks: KeySpace, Qa: np.ndarray, Ra: np.ndarray, chunks, copy_refs: bool = True):
        self.ks, self.Qa, self.Ra, self.chunks, self.n_ref = ks, Qa, Ra, chunks, Ra.shape[0]
        self.Qb = self.Rb = None  # bfloat16 copies (enable_bf16)
        if len(chunks) > 1:  # cosine: per chunk of the inner dimension, column views (BLAS reads
            # them in place as fast as copies, which cost ~30 ms at 6,000 × 2,048)
            self.Qc = [Qa[:, a:b] for a, b in chunks]
            self.RcT = [Qc.T for Qc in self.Qc] if ks.same else [Ra[:, a:b].T for a, b in chunks]
        else:
            self.RaT = np.ascontiguousarray(Ra.T) if copy_refs else Ra.T

    def buffer_elems(self, rows: int, refs: int) -> int:
        """float32 elements of the buffer a tile of ``rows`` × ``refs`` needs."""
        return rows * refs * (1 if len(self.chunks) == 1 else 2)

    def __call__(self, rows, r0: int, r1: int, buf: np.ndarray) -> np.ndarray:
        """The tile of queries ``rows`` (a slice or an index array) against references r0..r1−1,
        written into the start of ``buf`` (see :meth:`buffer_elems`)."""
        qa = self.Qa[rows]
        b, w = qa.shape[0], r1 - r0
        T = buf[:b * w].reshape(b, w)
        if len(self.chunks) == 1:
            np.matmul(qa, self.RaT[:, r0:r1], out=T)
        else:
            T2 = buf[b * w:2 * b * w].reshape(b, w)
            np.matmul(self.Qc[0][rows], self.RcT[0][:, r0:r1], out=T)
            for Qc, RcT in zip(self.Qc[1:], self.RcT[1:]):
                np.matmul(Qc[rows], RcT[:, r0:r1], out=T2)
                np.add(T, T2, out=T)
        self._own(T, rows, r0, r1)
        return T

    def _own(self, T: np.ndarray, rows, r0: int, r1: int, value=-np.inf) -> None:
        """A query's own key set to ``value`` (−inf) in a same-set search."""
        if not self.ks.same:
            return
        if isinstance(rows, slice):
            lo, hi = max(rows.start, r0), min(rows.stop, r1)
            if lo < hi:
                q = np.arange(lo, hi)
                T[q - rows.start, q - r0] = value
            return
        qs = np.asarray(rows)
        own = np.flatnonzero((qs >= r0) & (qs < r1))
        T[own, qs[own] - r0] = value

    # --------------------------------------------------- the bfloat16 pre-filter (see .bf16)
    def enable_bf16(self) -> None:
        """Keep bfloat16 copies of the operands for :meth:`approx` (cosine keys only)."""
        import torch

        if self.Qb is None:
            self.Qb = torch.from_numpy(self.Qa).to(torch.bfloat16)
            self.Rb = self.Qb if self.Ra is self.Qa else torch.from_numpy(self.Ra).to(torch.bfloat16)

    def approx(self, rows: slice, r0: int, r1: int, bbuf, bits: np.ndarray) -> np.ndarray:
        """The tile's bfloat16 values (within :func:`~.bf16.bf16_error` of the exact keys), written
        into the start of ``bbuf`` (a flat bfloat16 torch buffer); returned as their bit patterns
        (int16, the numpy view ``bits`` of ``bbuf``), own keys −inf (``BF16_NEG_INF``)."""
        import torch

        b, w = rows.stop - rows.start, r1 - r0
        torch.mm(self.Qb[rows], self.Rb[r0:r1].T, out=bbuf[:b * w].view(b, w))
        T = bits[:b * w].reshape(b, w)
        self._own(T, rows, r0, r1, value=BF16_NEG_INF)
        return T

    def pair_keys32(self, qi: np.ndarray, rj: np.ndarray) -> np.ndarray:
        """The float32 keys of pairs as a tile holds them (within :func:`tile_delta`): per chunk of
        the inner dimension one float32 dot product, the chunk sums added in order."""
        out = None
        for a, b in self.chunks:
            k = np.einsum("ij,ij->i", self.Qa[qi, a:b], self.Ra[rj, a:b])
            out = k if out is None else np.add(out, k, out=out)
        return out


class _Block:
    """The pairs of one query block and their band coordinates (see the module docstring)."""

    def __init__(self, st: "_Pass", s: int, e: int):
        self.s, self.e = s, e
        b = e - s
        self.p0, self.p1 = int(st.bounds[s]), int(st.bounds[e])
        self.pr = st.qi[self.p0:self.p1] - s
        self.pk = st.k64[self.p0:self.p1]
        self.pref = st.rj[self.p0:self.p1]
        self.pk_exact = None  # the exact keys of pairs with estimated keys, once needed (_Pass._exact_keys)
        self.dl = st.delta[s:e]
        self.wl = st.delta[s:e] + st.err[s:e]  # window half-width: tile error + key-estimate error
        W, base = st.W, st.base
        self.qoff = st.qoff[s:e]
        # a survivor's band coordinate g = row·W + (value − base) (its tile value: key + qoff) has
        # an absolute rounding error of a few ulp of (b + 1)·W; η (added to ±δ) absorbs twice that
        eta = 8.0 * np.spacing((b + 1) * W)
        pkt = self.pk + self.qoff[self.pr]  # the pairs' keys as values
        self.hi_g = self.pr * W + ((pkt + self.wl[self.pr] + eta) - base)
        self.lo_g = self.pr * W + ((pkt - self.wl[self.pr] - eta) - base)
        self.end_g = (np.arange(b) + 1) * W  # every g of row r lies in (rW, (r+1)W)
        self.thr = st.thr[s:e, None]
        self.tau2 = st.tau[s:e] + 2.0 * self.wl + self.qoff  # (as a value)


class _Acc:
    """One thread's counts for one query block."""

    def __init__(self, blk: _Block):
        self.sure = np.zeros(blk.p1 - blk.p0, dtype=np.int64)
        self.n_high = np.zeros(blk.e - blk.s, dtype=np.int64)
        self.win_p: list = []
        self.win_r: list = []
        self.pend_g: list = []  # survivors not yet counted: band coordinates and reference indices
        self.pend_id: list = []
        self.n_pend = 0
        self.tied = None  # window members before each pair, counted at once where windows are large

    def merge(self, other: "_Acc"):
        self.sure += other.sure
        self.n_high += other.n_high
        if other.tied is not None:
            self.tied = other.tied if self.tied is None else self.tied + other.tied
        self.win_p += other.win_p
        self.win_r += other.win_r
        self.pend_g += other.pend_g
        self.pend_id += other.pend_id
        self.n_pend += other.n_pend


class _Pass:
    """The state shared by the tiles of one counting pass."""

    def __init__(self, ks: KeySpace, qi, rj, k64, depth, floor, block: int, key_err=None, chunk=None):
        self.ks, self.qi, self.rj, self.k64, self.depth = ks, qi, rj, k64, depth
        self.estimated = key_err is not None  # k64 holds estimates within key_err of the float64 keys
        nq = ks.Q32.shape[0]
        qmax = float(np.sqrt(ks.qsq.max()))
        self.chunks = k_chunks(ks, chunk)
        self.delta = tile_delta(ks, self.chunks)
        self.Qa, Ra, self.qoff = augmented(ks)
        self.err = np.zeros(nq) if key_err is None else np.broadcast_to(np.asarray(key_err, float), (nq,))
        # the bands hold tile values (keys + qoff; a key k of the row sits at k + qoff): in (base, base + W)
        if ks.plain:  # (qoff 0: keys)
            bound = qmax * ks.rmax + 1.0  # |key| < bound
            self.base, self.W = -bound - 1.0, 2.0 * bound + 2.0
        else:  # as narrow as the values are, with room for the windows about the keys
            self.base, self.W = ks.value_band(float((self.delta + self.err).max(initial=0.0)))
        low = np.full(nq, np.inf)
        np.minimum.at(low, qi, k64 - (2.0 * self.delta + self.err)[qi])
        self.tau = np.maximum(floor, low)  # +inf for queries without pairs: nothing survives
        # a same-set cosine pass multiplies each pair of blocks once and reads the tile both ways
        self.symmetric = ks.same and ks.plain
        self.gemm = TileGemm(ks, self.Qa, Ra, self.chunks)
        t = self.tau + self.qoff  # τ_i in tile units (+ qoff: ‖q‖², or a centred search's)
        if not ks.plain:  # less the rounding of τ_i + qoff_i, and of the floor's tile value − qoff_i
            # (a centred collapsed model's tile values are ~1e-14, its keys and offsets ~1: the
            # round trip moves a tile value by ~1e-16, far beyond one float32 step of it)
            t = t - 2.0 * np.spacing(np.abs(self.tau) + np.abs(self.qoff))
        self.thr = np.nextafter(t.astype(np.float32), np.float32(-np.inf))  # float32 filter at or below τ_i
        self.bounds = np.searchsorted(qi, np.arange(nq + 1))
        self.blocks = [_Block(self, s, min(nq, s + block)) for s in range(0, nq, block)]
        # survivors pending per block and thread before they are counted: at most PENDING in all
        self.flush = max(1, PENDING // len(self.blocks))

    def tasks(self, tile: int):
        """(query block index, reference start, reference stop, index of the query block that the
        references form, whose rows the tile is also counted for; None if none)."""
        nr = self.gemm.n_ref
        if self.symmetric:
            return [(a, blk.s, blk.e, b if b != a else None) for a in range(len(self.blocks))
                    for b, blk in enumerate(self.blocks) if b >= a]
        return [(a, r0, min(nr, r0 + tile), None) for a in range(len(self.blocks)) for r0 in range(0, nr, tile)]

    def run_task(self, task, accs: dict, buf: np.ndarray, mbuf: np.ndarray):
        a, r0, r1, c = task
        blk = self.blocks[a]
        T = self.gemm(slice(blk.s, blk.e), r0, r1, buf)
        self._count(accs, a, T, r0, mbuf, False)
        if c is not None:  # the same tile seen from the reference block's queries
            self._count(accs, c, T, blk.s, mbuf, True)

    def _count(self, accs: dict, a: int, T: np.ndarray, r0: int, mbuf: np.ndarray, transposed: bool):
        """Count, for block ``a``'s pairs, the survivors of tile ``T`` surely before each pair, and
        collect the survivors within ±δ of a pair's key. ``T``'s rows are the block's queries and
        its columns references r0, r0 + 1, …; or, ``transposed``, the other way round (read in
        place: a strided transposed view costs more than the GEMM it would save)."""
        blk = self.blocks[a]
        acc = accs.get(a)
        if acc is None:
            acc = accs[a] = _Acc(blk)
        h, w = T.shape
        b = blk.e - blk.s
        W, base = self.W, self.base
        M = mbuf[:h * w].reshape(h, w)
        np.greater(T, blk.thr.T if transposed else blk.thr, out=M)
        f = np.flatnonzero(M)
        if f.size == 0:
            return
        rows = f % w if transposed else f // w
        v = T.ravel()[f].astype(np.float64)
        acc.n_high += np.bincount(rows[v > blk.tau2[rows]], minlength=b)
        acc.pend_g.append(rows * W + (v - base))
        acc.pend_id.append((f // w if transposed else f % w) + r0)
        acc.n_pend += f.size
        if acc.n_pend >= self.flush:
            self._flush(blk, acc)

    def _flush(self, blk: _Block, acc: _Acc):
        """Count the pending survivors of block ``blk`` (those of several tiles at once: one sort
        and one binary search per pair for all of them): the survivors surely before each pair,
        and those within ±δ of a pair's key (float64 at the end)."""
        if not acc.n_pend:
            return
        gs = np.concatenate(acc.pend_g) if len(acc.pend_g) > 1 else acc.pend_g[0]
        ids = np.concatenate(acc.pend_id) if len(acc.pend_id) > 1 else acc.pend_id[0]
        acc.pend_g, acc.pend_id, acc.n_pend = [], [], 0
        order = np.argsort(gs)
        gs = gs[order]
        c_hi = np.searchsorted(gs, blk.hi_g, side="right")
        c_lo = np.searchsorted(gs, blk.lo_g, side="left")
        c_end = np.searchsorted(gs, blk.end_g, side="right")
        pr, pref = blk.pr, blk.pref
        acc.sure += c_end[pr] - c_hi
        win = c_hi - c_lo
        wp = np.flatnonzero(win > 0)
        if wp.size and dense_windows(int(win[wp].sum()), wp.size, gs.size):  # many equal keys: counted now
            ks, s = self.ks, blk.s
            kp = self._exact_keys(blk, wp)
            before = tie_window_before(
                gs.size, c_lo[wp], c_hi[wp], pr[wp], kp, pref[wp],
                lambda at: (gs[at] // self.W).astype(np.int64),  # every g of row r lies in (rW, (r+1)W)
                lambda at: ids[order[at]], lambda rr, r: pair_keys(ks.Q64, ks.R64, s + rr, r, ks.metric),
                greater_high=True, ref_class=ks.ref_classes())
            if acc.tied is None:
                acc.tied = np.zeros(acc.sure.size, dtype=np.int64)
            acc.tied[wp] += before
        elif wp.size:  # survivors within ±δ of a pair's key (sorted positions c_lo..c_hi): float64 at the end
            cnt = win[wp]
            rep = np.repeat(wp, cnt)
            pos = np.repeat(c_lo[wp] - np.cumsum(cnt) + cnt, cnt) + np.arange(rep.size)
            wids = ids[order[pos]]
            keep = wids != pref[rep]  # the pair's own reference lies in its window whenever it survived
            acc.win_p.append(rep[keep])
            acc.win_r.append(wids[keep])

    def _exact_keys(self, blk: _Block, wp: np.ndarray) -> np.ndarray:
        """The float64 keys (:func:`pair_keys64`) of block ``blk``'s pairs ``wp``: its keys as given, or
        where they are estimates, computed once per pair and kept (a collapsed model's pairs have
        windows at every flush)."""
        if not self.estimated:
            return blk.pk[wp]
        if blk.pk_exact is None:
            blk.pk_exact = np.full(blk.pk.size, np.nan)
        miss = wp[np.isnan(blk.pk_exact[wp])]
        if miss.size:
            ks = self.ks
            blk.pk_exact[miss] = pair_keys(ks.Q64, ks.R64, blk.s + blk.pr[miss], blk.pref[miss], ks.metric)
        return blk.pk_exact[wp]

    def finish(self, a: int, acc: _Acc):
        """Ranks (``inf`` beyond the depth) and the unresolved flags of block ``a``'s pairs."""
        ks, blk = self.ks, self.blocks[a]
        self._flush(blk, acc)
        n = blk.p1 - blk.p0
        amb = np.zeros(n, dtype=np.int64)
        if acc.win_p and sum(len(x) for x in acc.win_p):
            wp = np.concatenate(acc.win_p)
            wr = np.concatenate(acc.win_r)
            need = acc.sure[wp] < self.depth  # with depth references surely before, the rank is inf anyway
            wp, wr = wp[need], wr[need]
            qw = self.qi[blk.p0:blk.p1][wp]
            kp = blk.pk[wp]
            ur = np.unique(wr)
            e = self.err[blk.s:blk.e][blk.pr[wp]]
            if self.estimated and (blk.e - blk.s) * ur.size < GEMM_WINDOW_RATIO * wp.size:
                # many window pairs (large D, dense keys): one float64 GEMM of the block's queries
                # against the window references instead of a gather per pair; where the two
                # estimates (each within err of pair_keys64's value) cannot decide, recompute both
                kr = _gemm_keys(ks, blk.s, blk.e, qw, wr, ur)
                close = np.abs(kr - kp) <= 2.0 * e
                if close.any():
                    kr[close] = pair_keys(ks.Q64, ks.R64, qw[close], wr[close], ks.metric)
                    kp = kp.copy()
                    kp[close] = pair_keys(ks.Q64, ks.R64, qw[close], blk.pref[wp[close]], ks.metric)
            else:
                kr = pair_keys(ks.Q64, ks.R64, qw, wr, ks.metric)
                if self.estimated:  # the exact keys of the pairs whose estimate cannot decide
                    close = np.abs(kr - kp) <= e
                    if close.any():
                        up, inv = np.unique(wp[close], return_inverse=True)
                        kp = kp.copy()
                        kp[close] = pair_keys(ks.Q64, ks.R64, self.qi[blk.p0:blk.p1][up], blk.pref[up],
                                                ks.metric)[inv]
            before = (kr > kp) | ((kr == kp) & (wr < blk.pref[wp]))
            amb = np.bincount(wp[before], minlength=n)
        if acc.tied is not None:
            amb = amb + acc.tied
        rank = (1 + acc.sure + amb).astype(np.float64)
        certified = blk.pk - blk.wl[blk.pr] > self.tau[blk.s:blk.e][blk.pr]
        beyond = ~certified & (acc.n_high[blk.pr] >= self.depth)
        rank[beyond] = np.inf
        rank[rank > self.depth] = np.inf
        return rank, ~certified & ~beyond


def relevant_ranks_by_count(ks: KeySpace, qi: np.ndarray, rj: np.ndarray, k64: np.ndarray, depth: int, *,
                            seed: int = 0, progress: bool = False, block: int | None = None,
                            tile: int | None = None, threads: int | None = None,
                            floor_depth: int | None = None, sample_top: float = SAMPLE_TOP,
                            key_err=None, chunk: int | None = None):
    """Exact rank (``inf`` beyond ``depth``) of every relevant pair ``(qi[p], rj[p])``.

    ``qi`` must be sorted; ``k64`` holds the pairs' float64 keys (:func:`pair_keys64`), or, with
    ``key_err`` (per query or scalar), estimates within ``key_err`` of them (e.g. from a float64
    GEMM: every window is widened by that error, and a pair's key is recomputed by
    :func:`pair_keys64` only where its estimate cannot decide a comparison). Returns
    ``(rank, unresolved)``: the few unresolved pairs (floor estimate too high) must be ranked from
    their query's full row by the caller. ``floor_depth`` (≥ ``depth``; default ``depth``) is the
    depth at which the floor keys are estimated: a deeper floor keeps more survivors but needs a
    smaller sample for a shallow ``depth`` (the top-K keys); ``sample_top`` sets the sample's size
    (see :func:`floor_keys`). Tiles are shared among ``threads`` workers (default: the
    CPU count), each running its GEMMs with one BLAS thread, so that the counting of one tile
    overlaps the GEMM of another. ``chunk``: columns per chunk of the inner dimension of a
    cosine tile GEMM (default ``K_CHUNK`` from D = ``CHUNK_MIN_DIM`` on, else one chunk; 0: one
    chunk), see :func:`tile_delta`.
    """
    import threading

    nq = ks.Q32.shape[0]
    if block is None and len(k_chunks(ks, chunk)) > 1 and nq <= 3 * QUERY_BLOCK:
        block = max(256, -(-nq // 4))  # GEMM-bound small sets: enough tiles to keep the threads busy
    block = int(block or QUERY_BLOCK)
    tile = int(tile or REF_TILE)
    floor = floor_keys(ks, int(max(depth, floor_depth or depth)), seed, sample_top)
    # pairs ordered by (query, key): the binary searches of each tile then read sorted needles
    perm = np.lexsort((k64, qi))
    st = _Pass(ks, qi[perm], rj[perm], k64[perm], int(depth), floor, block, key_err, chunk)
    tasks = st.tasks(tile)
    width = max(block, tile)
    local = threading.local()
    per_thread: list[dict] = []
    lock = threading.Lock()
    bar = _bar(progress, len(tasks), "retrieval", unit="tile")

    def run(task):
        if not hasattr(local, "accs"):
            local.accs = {}
            local.buf = np.empty(st.gemm.buffer_elems(block, width), dtype=np.float32)
            local.mbuf = np.empty(block * width, dtype=bool)
            with lock:
                per_thread.append(local.accs)
        st.run_task(task, local.accs, local.buf, local.mbuf)

    n_threads = int(threads or min(len(tasks), n_search_threads()))
    if n_threads <= 1:
        with blas_single_thread():  # (as the workers below: a multi-threaded BLAS on small tiles only spins)
            for t in tasks:
                run(t)
                bar.update(1)
    else:
        with blas_single_thread(), ThreadPoolExecutor(n_threads) as pool:
            for _ in pool.map(run, tasks):
                bar.update(1)
    bar.close()
    rank = np.empty(qi.size, dtype=np.float64)
    unresolved = np.zeros(qi.size, dtype=bool)
    for a, blk in enumerate(st.blocks):
        accs = [d[a] for d in per_thread if a in d]
        if not accs:
            acc = _Acc(blk)
        else:
            acc = accs[0]
            for other in accs[1:]:
                acc.merge(other)
        rank[perm[blk.p0:blk.p1]], unresolved[perm[blk.p0:blk.p1]] = st.finish(a, acc)
    return rank, unresolved
