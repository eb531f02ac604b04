"""Exact ranks of the relevant references by a filtered tile pass with per-row counting
(docs/methods.md §1, "Protocol"): the CPU path for the CUB-200, CARS196 and SOP test sets
(up to 200,000 references, depths below 1,000, relevant sets of similar sizes).

Every retrieval measure needs, per query i, the exact rank of each relevant reference within a
depth d_i (R_i for R-Precision and MAP@R). This pass never keeps a top-k list (a heap, as faiss's
flat search) and never sorts a row of N keys:

1. **A floor per query**, ``τ_i = max(floor_i, lowest relevant key_i − 2w_i)``: ``floor_i`` is the
   j-th largest key of query i against a uniform sample of ``ns`` references (``ns`` about
   ``SAMPLE_MEAN`` × N / d, at most a share of N that shrinks with the mean depth, or at CUB-like
   depths the larger size that balances the sample's cost against the survivors' (:func:`_small_sample`,
   up to N/4 of a small set); j from the expected cost of the survivors vs. a recount,
   :func:`_sample_ranks`), an estimate of the d_i-th largest key, taken from the maxima of column
   groups of the sample (a value at most the j-th largest sampled key, usually equal, at a fraction
   of a partition's cost). A query ranked against every reference (its depth is all of them) has
   no floor: any valid one lies below its lowest key.
2. **Tiles.** One float32 GEMM per tile (a same-set cosine search multiplies each pair of query
   blocks once and filters the tile both ways); the references whose float32 key exceeds ``τ_i``
   ("survivors", about 1.5–2 × d_i per query) are kept, everything else is dropped at once.
   Where the CPU multiplies bfloat16 in hardware and the survivors are sparse (SOP-like sets,
   large N), the tile is a **bfloat16 GEMM** instead (:mod:`.bf16`): its values within a rigorous
   bound e_i of the exact keys pick candidates (value > τ_i − e_i − δ_i, compared as int16 bit
   patterns where the threshold is positive), whose float32 keys are then computed pair by pair
   and filtered as above: the same survivors for 0.4–0.5 of the float32 GEMM's cost. The floors'
   sample keys are then bfloat16 too (an estimate either way).
3. **Counting, once a block's rows are complete.** Its survivors are sorted per row (float32 →
   float64 exactly) in band coordinates (row · W + key), so that one binary search per relevant
   pair, with its float64 key k and half-width ``w_i = δ_i + ε_i`` (δ_i: the float32 error bound
   of the tile, :func:`~.counting.tile_delta`; ε_i: the error of a float64 key estimate), gives the
   survivors surely before it (float32 key > k + w_i). A pair's own reference lies within ±w_i of
   k; when a second survivor does (the next lower one in the sorted row), the survivors of that
   window are compared in float64 (:func:`~.knn.pair_keys64`), lower index first on ties. Where the
   windows hold many survivors (many equal keys: a collapsed model, whose every key ties), a
   block's windows are counted from their union instead, one float64 key per group of identical
   reference rows (:func:`~.knn.tie_window_before`): the same counts without N³ comparisons.
   With labels and classes of tens or more (``LARGE_PAIRS_PER_QUERY`` relevant pairs per query:
   CUB-like classes of 60-80, hundreds) the relevant pairs are read off the sorted survivors
   instead (:meth:`_Rows._count_large`: a relevant survivor's rank is its place in the row), and
   only those with a second survivor within ±w_i are counted as above.
4. **Certification.** A pair with ``k − w_i > τ_i`` has all its predecessors among the survivors:
   its rank is exact. A pair below is beyond d_i when d_i survivors lie above ``τ_i + 2w_i``.
   Otherwise (the floor estimate was too high: a few rows in a thousand) the row is recomputed
   (one small GEMM) and counted again from its exact d_i-th float32 key (with labels, the rows of
   every block at once once the tiles are done, :meth:`_Rows.recount_deferred`): the floor is a
   speed knob, never a risk to exactness.

The ranks equal those of a float64 distance matrix with ties to the lower reference index; the
pairs come out in rank order per query. Memory: per worker thread one tile and its boolean mask,
plus the survivors of the blocks not yet complete (about 2 × d × N × 14 bytes); never N × N: past
a budget (``SURVIVOR_BUDGET``: a collapsed model, whose every key ties, keeps whole rows) the pass
stops with :class:`SurvivorOverflow` and the caller ranks the search by the counting pass.
Tiles are shared among worker threads, each running its GEMM with one BLAS thread, so one tile's
filtering and one block's counting overlap another tile's GEMM.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from embedscope.device import torch_threads
from embedscope.metrics.search.bf16 import bf16_available, bf16_error, prefer_bf16
from embedscope.metrics.search.counting import TileGemm, augmented, k_chunks, tile_delta
from embedscope.metrics.search.knn import KeySpace, _bar, dense_windows, pair_keys64, tie_window_before
from embedscope.metrics.search.threads import blas_single_thread, n_search_threads

__all__ = ["relevant_ranks_by_rows", "large_mode", "SurvivorOverflow"]


class SurvivorOverflow(Exception):
    """The survivors held at once passed the pass's budget (``SURVIVOR_BUDGET``): the float32 filter
    kept far more than ~2 × depth references per query, as it must where most keys tie (a collapsed
    model keeps whole rows: N² survivors). The caller ranks the search by a pass of bounded memory."""

BLOCK = 768  # queries per block with two or more worker threads (a symmetric search's tiles are BLOCK x BLOCK; at
# most 32,767): with each finished block counted by one worker (SPLIT_MIN_ROWS), 768 against 512 was 4-10% faster at
# CUB-like 6,000-12,000 rows, 8% at 60,000 x 128, 11-20% SOP-like at 12,000-60,000 x 128, equal at 6,000 x 2,048
# (2 threads; docs/PERFORMANCE.md, thirty-first session); 1,024 was slower again. Smaller sets get blocks of
# nq / (2 x threads) rows, at least 128 (each thread gets work: a quarter of them on 2 threads).
BLOCK_ONE_THREAD = 512  # ... and on one thread: 1,024 cost 25-30% more CPU at 2,000 rows, 768 +6% at 2,000 x 512
# (and 8-11% more CPU at CUB-like 6,000 rows, 5-7% at 60,000 x 128, before); a 512-row block's tile (1 MB) and sorted
# survivors stay within a core's L2 (docs/PERFORMANCE.md, thirtieth and thirty-first sessions)
REF_TILE = 2048  # references per tile when the search is not symmetric
SAMPLE_MEAN = 12.0  # expected sampled references among a query's top `depth` (the floor's sample), at
# D <= 128; times sqrt(128 / D) above (the sample's GEMM grows with D, the survivors' cost does not)
SAMPLE_MAX_FRAC = 1 / 16  # ... from at most this share of the references (small depths: a looser floor),
SAMPLE_FRAC_PER_DEPTH = 1 / 128  # ... and at most (mean depth) x this share (SOP-like depths of ~5: ~1/30;
SAMPLE_MIN_FRAC = 1 / 64  # the floor's GEMM and partition cost more than the extra survivors), at least this
SMALL_SURVIVOR_NS = 300.0  # ... or, where larger, the sample that balances the floors' cost against a survivor's
# end to end (its share of the tile's mask and gathers, the padded per-row sort and the counting), this many
# ns at ROW_NS per sampled reference (_small_sample; docs/PERFORMANCE.md, thirtieth session), at most
SMALL_SAMPLE_MAX_FRAC = 1 / 4  # this share: CUB-like 2,000-12,000 rows, where the share above left ~2.1-2.5 x
# the depth surviving per row (0 turns it off), for mean depths of at least
SMALL_SAMPLE_MIN_DEPTH = 16.0  # this (SOP-like depths of ~5: j of a few, μ < 1, no gain measured)
SURVIVOR_NS = 50.0  # the floor's sample rank (_sample_ranks) balances the cost of one survivor (ns) ...
ROW_NS = (10.0, 0.04)  # ... against a recount's per reference: partition + GEMM (ns, + per dimension),
PAIR_NS = 100.0  # ... plus its count again: its survivors (SURVIVOR_NS each) and its relevant pairs (ns each)
SPLIT_MIN_ROWS = 512  # a completed block of at least twice this many queries is ranked in two halves (with
# 128, every 512-row block was: 5-13% slower at CUB-like 2,000-12,000 rows and 9% at 60,000 x 128 on 2 threads,
# whose counting steps then took turns at the GIL; docs/PERFORMANCE.md, thirty-first session)
FLOOR_BLOCK = 4096  # queries per GEMM of the floor sample
FLOOR_GROUPS_PER_J = 16  # a floor is the j-th largest of the maxima of 16 j column groups of the sample
FLOOR_BF16_MIN_SAVING = 0.05  # the floors' sample GEMM in bfloat16 when that saves this much (seconds)
LARGE_PAIRS_PER_QUERY = 16  # from this many relevant pairs per query: _count_large (256 before: CUB-like classes
# of 60-80 then placed each pair by a binary search, 7-21% more single-thread CPU at 2,000-6,000 rows; classes
# of 16-48 5-20%; equal below 16; docs/PERFORMANCE.md, thirtieth session)
LARGE_SAMPLE_MEAN = 48.0  # ... and SAMPLE_MEAN this large (a tighter floor: fewer survivors per row)
_SLOT_MASK = np.int64((1 << 29) - 1)  # the float64 mantissa bits below a float32's precision
SURVIVOR_BUDGET = (32.0, 1 << 26, 1 << 24)  # survivors held at once: at most 32 x the sum of the depths
# (about 16 x what the floors let through) or 2^26 (0.7 GB of 10-byte survivors), whichever is larger, and
# per query block 32 x its depths or 2^24 (ranking a block costs ~80 bytes a survivor): else SurvivorOverflow


def large_mode(counts: np.ndarray, n_ref: int) -> bool:
    """Whether the pass with labels reads the relevant pairs off the survivors (:meth:`_Rows._count_large`):
    at least ``LARGE_PAIRS_PER_QUERY`` pairs per query that has any (and references < 2^29)."""
    counts = np.asarray(counts)
    return n_ref < (1 << 29) and int(counts.sum()) >= LARGE_PAIRS_PER_QUERY * max(int(np.count_nonzero(counts)), 1)


RUN_STEPS = 3  # _run_length walks this many places, then binary-searches the runs still going


def _run_length(g: np.ndarray, at: np.ndarray, step: int, stop: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Per entry, how many places ``at + step, at + 2·step, …`` (before ``stop``) hold values of ``g``
    ≤ ``bound`` (``step`` 1) or ≥ ``bound`` (``step`` −1): the length of the run next to ``at`` within
    the bound, in a sorted row of ``g`` (``g`` non-decreasing as a whole, as the band coordinates
    are). Runs are usually one or two places (float32 near-ties), so the places are walked; the
    runs still going after :data:`RUN_STEPS` places (many equal keys: a collapsed embedding) end
    by one binary search each, instead of a walk as long as the run."""
    n = np.zeros(at.size, dtype=np.int64)
    act = np.arange(at.size)
    cur = at + step
    for _ in range(RUN_STEPS):
        if not act.size:
            return n
        ok = (cur < stop[act]) if step > 0 else (cur >= stop[act])
        act, cur = act[ok], cur[ok]
        v = g[cur]
        ok = (v <= bound[act]) if step > 0 else (v >= bound[act])
        act, cur = act[ok], cur[ok] + step
        n[act] += 1
    if act.size:  # long runs: where the bound falls, within [stop, at) or (at, stop)
        if step > 0:
            end = np.minimum(np.searchsorted(g, bound[act], side="right"), stop[act])
            n[act] = np.maximum(end - (at[act] + 1), 0)
        else:
            first = np.maximum(np.searchsorted(g, bound[act], side="left"), stop[act])
            n[act] = np.maximum(at[act] - first, 0)
    return n


def _kth_largest(A: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Per row of ``A``, its j[row]-th largest value (float64); one partition for all the
    distinct j."""
    n = A.shape[1]
    j = np.asarray(j)
    jmax = int(j.max())
    if jmax * 4 <= n and int(j.min()) != jmax:
        # one partition at the largest j, then only the top jmax columns sorted (several kth
        # values would cost one partition pass each)
        P = np.partition(A, n - jmax, axis=1)[:, n - jmax:]
        P.sort(axis=1)
        return P[np.arange(A.shape[0]), jmax - j].astype(np.float64)
    kth = n - j
    P = np.partition(A, np.unique(kth), axis=1)
    return P[np.arange(A.shape[0]), kth].astype(np.float64)


def _sample_ranks(depth: np.ndarray, ns: int, nr: int, dim: int, pairs: np.ndarray | None = None) -> np.ndarray:
    """Per query, the sample rank j of its floor (the j-th largest of its keys against ``ns`` of
    the ``nr`` references): the j that minimises the expected cost of the survivors it lets
    through (about j·nr/ns, ``SURVIVOR_NS`` each) plus that of a recount of the row when the floor
    lies above the depth-th key, i.e. when j or more of the query's top ``depth`` references were
    sampled (Poisson with mean depth·ns/nr): a row GEMM and partition of ``ROW_NS`` per reference,
    then the row counted again, its ~depth survivors (``SURVIVOR_NS``) and its ``pairs`` relevant
    pairs (``PAIR_NS`` each; default ``depth``: the first count's work on them is lost).
    SOP-like depths (~5, a sampled mean of ~0.2) get j = 3 where a normal margin gave 2 and
    recounted 1.6% of the rows; CUB-like ones (a sampled mean of ~4) j ≈ mean + 2.5 standard
    deviations, as before. Small sets with deep classes (896 digits, 5 classes: depths ~180)
    had j = 1 without the count term and recounted every row."""
    row_ns = ROW_NS[0] + ROW_NS[1] * dim
    depth = np.asarray(depth)
    ud, inv = np.unique(depth, return_inverse=True)
    inv = inv.reshape(-1)
    pairs = depth if pairs is None else np.broadcast_to(np.asarray(pairs), depth.shape)
    pm = np.bincount(inv, weights=pairs.reshape(-1).astype(np.float64), minlength=ud.size) / np.bincount(
        inv, minlength=ud.size)  # mean pairs of the queries of each depth
    out = np.empty(ud.size, dtype=np.int64)
    for t, dep in enumerate(ud):
        mu = float(dep) * ns / nr
        jmax = int(min(ns, math.ceil(mu + 10.0 * math.sqrt(mu) + 12)))
        pmf = np.empty(jmax + 60)
        pmf[0] = math.exp(-mu)
        pmf[1:] = mu / np.arange(1, pmf.size)
        pmf = np.cumprod(pmf)
        sf = np.cumsum(pmf[::-1])[::-1]  # sf[j] = P(X >= j)
        js = np.arange(1, jmax + 1)
        recount = nr * row_ns + float(dep) * SURVIVOR_NS + pm[t] * PAIR_NS
        cost = js * (nr / ns) * SURVIVOR_NS + sf[js] * recount
        out[t] = js[int(np.argmin(cost))]
    return out[inv].reshape(depth.shape)


def _small_sample(depth_mean: float, nr: int, dim: int) -> int:
    """The floors' sample size that minimises, per query, the sample's cost (``ns`` references at
    ``ROW_NS`` each: GEMM and partition) plus that of the survivors beyond the depth: a floor at
    the j-th of ``ns`` sampled keys, j about μ + 2.5·√μ with μ = depth·ns/nr (:func:`_sample_ranks`),
    lets through about depth + 2.5·√(depth·nr/ns) references, ``SMALL_SURVIVOR_NS`` each; the
    minimum lies at ns = (1.25·SMALL_SURVIVOR_NS·√(depth·nr) / row_ns)^(2/3). It grows like nr^(1/3):
    a larger share of a small set (2,000 CUB-like rows at D = 64: ~500 of them where ``SAMPLE_MAX_FRAC``
    gave 125), about that share's sample at 12,000 rows and below it beyond (60,000 × 128: 1,372
    against 3,750, which then stands). At most ``SMALL_SAMPLE_MAX_FRAC`` of
    the references; 0 (no such sample) for mean depths below ``SMALL_SAMPLE_MIN_DEPTH``."""
    if SMALL_SAMPLE_MAX_FRAC <= 0 or depth_mean < SMALL_SAMPLE_MIN_DEPTH:
        return 0
    row_ns = ROW_NS[0] + ROW_NS[1] * dim
    ns = (1.25 * SMALL_SURVIVOR_NS * math.sqrt(max(depth_mean, 1.0) * nr) / row_ns) ** (2.0 / 3.0)
    return int(min(ns, SMALL_SAMPLE_MAX_FRAC * nr))


def _kth_largest_lower(A: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Per row of ``A``, a value at most its j[row]-th largest, usually equal: the j-th largest of
    the maxima of ``FLOOR_GROUPS_PER_J`` × max(j) groups of g columns each (columns c, c + n/g,
    c + 2n/g, …: any j values of the group maxima are j values of the row). A partition of A
    costs ~6–8 ns per value, the group maxima (one reduction over the middle axis of a
    rows × g × n/g view, elementwise maxima of g slabs) ~0.2–0.5: the floors' sample is ~750
    wide with j ≈ 12 at CUB-like 12,000 × 64 (g = 3), thousands wide with j ≤ 5 at SOP-like
    depths. (A reduction over g consecutive columns, the last axis, cost 10–60 ns per value at
    g = 2–3, 4× the middle axis at g = 28–50.)"""
    n = A.shape[1]
    g = n // (FLOOR_GROUPS_PER_J * int(np.max(j)))
    if g < 2:
        return _kth_largest(A, j)
    ng = n // g
    M = A[:, :ng * g].reshape(A.shape[0], g, ng).max(axis=1)
    return _kth_largest(M, j)


class _Rows:
    """The state of one pass: operands, floors, pending survivors per query block, results."""

    def __init__(self, ks: KeySpace, qi, rj, keys, key_err, depth: int, seed: int, block: int, threads: int,
                 bf16: bool = True, labels=None, compact: bool = False):
        self.ks, self.qi, self.rj, self.k = ks, qi, rj, keys
        nq, nr = ks.Q32.shape[0], ks.R32.shape[0]
        self.depth = np.broadcast_to(np.asarray(depth, dtype=np.int64), (nq,))  # per query
        self.nr = nr
        self.chunks = k_chunks(ks)
        delta = tile_delta(ks, self.chunks)
        self.err = err = np.zeros(nq) if key_err is None else np.broadcast_to(np.asarray(key_err, float), (nq,))
        self.estimated = key_err is not None
        self.Qa, Ra, self.qoff = augmented(ks)
        qmax = float(np.sqrt(ks.qsq.max()))
        big = qmax * ks.rmax + 1.0 if ks.metric == "cosine" else (qmax + ks.rmax) ** 2 + 1.0  # |key| < big
        # window half-width per query: tile error + key-estimate error + float64 rounding of a
        # Euclidean key (float32 value − ‖q‖²); eta: rounding of the band coordinates (see _count)
        self.w = delta + err + 4.0 * np.spacing(big)
        self.delta = delta
        # the bands hold tile values (keys + qoff, float32 units; a key k of the row sits at k + qoff
        # there): they lie in (pad, pad + W)
        if ks.plain:  # (qoff 0: keys)
            self.pad, self.W = -big - 1.0, 2.0 * big + 4.0
        else:  # as narrow as the values are (a centred search's ~1e-8: keys are resolved to ~1e-20),
            # with room for the windows about the keys (k + qoff ± w) and above eta
            self.pad, self.W = ks.value_band(float(self.w.max(initial=0.0)))
        self.eta = 8.0 * np.spacing((block + 1) * self.W)
        self.symmetric = ks.same and ks.plain
        # a same-set cosine search reads the queries' own rows as the references (a transposed view)
        self.gemm = TileGemm(ks, self.Qa, Ra, self.chunks, copy_refs=not self.symmetric)
        # pairs grouped by query: query q's are off[q]:off[q + 1], in reference-index order
        # (qi None: the compact labels mode, where only the counts per query are needed)
        self.cnt = np.bincount(qi, minlength=nq) if qi is not None else np.asarray(labels[2], dtype=np.int64)
        n_pairs = int(self.cnt.sum())
        self.off = np.zeros(nq + 1, dtype=np.int64)
        np.cumsum(self.cnt, out=self.off[1:])
        low = np.full(nq, np.inf)  # +inf for queries without pairs: nothing survives
        self.kmin = np.full(nq, np.inf)  # each query's lowest pair key
        has = self.cnt > 0
        if n_pairs:
            self.kmin[has] = np.minimum.reduceat(keys, self.off[:-1][has])
            low[has] = self.kmin[has] - 2.0 * self.w[has]
        self.low = low
        # classes of tens and more (CUB-like 60-80, hundreds): the relevant pairs are found among the sorted
        # survivors (_count_large); a pair's index from its reference's place among those of its label (pic)
        self.labels = None
        if labels is not None and large_mode(self.cnt, nr):
            y, y_ref = (np.asarray(a, dtype=np.int64) for a in labels[:2])
            order = np.argsort(y_ref, kind="stable")
            ys = y_ref[order]
            first = np.searchsorted(ys, ys, side="left")
            pic = np.empty(nr, dtype=np.int64)
            pic[order] = np.arange(nr) - first  # each reference's place among those of its label
            self.labels = (y, y_ref, pic)
        self._sample(Ra, seed)
        self.blocks = [(s, min(nq, s + block)) for s in range(0, nq, block)]
        if self.symmetric:
            self.tasks = [(a, s, e, b if b != a else None) for a in range(len(self.blocks))
                          for b, (s, e) in enumerate(self.blocks) if b >= a]
            self.remaining = [len(self.blocks)] * len(self.blocks)
        else:
            self.tasks = [(a, r0, min(nr, r0 + REF_TILE), None) for a in range(len(self.blocks))
                          for r0 in range(0, nr, REF_TILE)]
            self.remaining = [-(-nr // REF_TILE)] * len(self.blocks)
        self.tile_elems = float(nq) * (nq + block) / 2 if self.symmetric else float(nq) * nr
        self.allow_bf16 = bf16 and ks.plain
        # the floors' sample keys in bfloat16 where their GEMM is large (SOP-like sets, large N)
        self.floor_bf16 = (self.allow_bf16 and self.sample.size > 0
                           and prefer_bf16(float(nq) * self.sample.size, ks.Q32.shape[1], 0.0,
                                           min_saving=FLOOR_BF16_MIN_SAVING)
                           and bf16_available())
        if self.floor_bf16:
            self.gemm.enable_bf16()
            self.Rsb = self.gemm.Rb[self.sample].T
        step = min(FLOOR_BLOCK, max(256, -(-nq // (2 * threads))))  # floors: a few chunks per thread
        self.floor_spans = [(s, min(nq, s + step)) for s in range(0, nq, step)] if self.sample.size else []
        self.floor = np.full(nq, -np.inf)
        self.pending: list = [[] for _ in self.blocks]
        self.held = 0  # survivors in self.pending (SURVIVOR_BUDGET), in all and per block
        self.held_blk = [0] * len(self.blocks)
        self.budget = max(SURVIVOR_BUDGET[0] * float(self.depth.sum()), float(SURVIVOR_BUDGET[1]))
        self.budget_blk = [max(SURVIVOR_BUDGET[0] * float(self.depth[s:e].sum()), float(SURVIVOR_BUDGET[2]))
                           for s, e in self.blocks]
        self.overflow = False  # set once the budget is passed: the remaining tiles return at once
        self.pool = None  # the worker pool, when there is one: finish() hands it half a block
        self.extra: list = []  # ... and those halves' futures
        self.deferred: list = []  # the labels mode's rows to recount, all at the end (recount_deferred)
        self.lock = threading.Lock()
        # compact output (with labels): per query only its ranks within the depth, as (queries, counts,
        # ranks, refs) pieces of each counted set of rows, put in query order at the end
        self.compact = compact and self.labels is not None
        self.pieces: list = []
        n_out = 0 if self.compact else n_pairs
        self.rank = np.empty(0 if self.labels is not None else qi.size, dtype=np.float64)  # (_count only)
        self.out_rank = np.empty(n_out, dtype=np.float64)
        self.out_ref = np.empty(n_out, dtype=np.int64)
        # per query, its pairs in decreasing key order (written by _count): the rank order but for
        # estimates within their error and the beyond-depth pairs (see _order)
        self.korder = (None if self.labels is not None
                       else np.empty(n_pairs, dtype=np.int32 if n_pairs < 2**31 else np.int64))

    # ------------------------------------------------------------------ floors
    def _sample(self, Ra, seed: int):
        """The floors' sample: ``ns`` references drawn uniformly, and per query the sample rank j
        of its floor (:func:`_sample_ranks`; all references and j = depth in tiny sets, where
        the sample would be half of them: exact floors)."""
        ks, nr, depth = self.ks, self.nr, self.depth
        n_avail = nr - (1 if ks.same else 0)
        # queries that rank every reference get no floor (τ = their lowest relevant key − 2w): a valid floor
        # lies below their lowest key and drops nothing, and the sample's estimate of it came out too high
        # (the Poisson model of _sample_ranks took j = 1 there), so every row was counted twice: the digits'
        # test set, mAP@1000 over its 898 references (retrieval_metrics 1.6x slower). Deep but not full
        # depths (0.3-0.9 of the references at 500 rows) recounted no row and keep their floors.
        self.no_floor = depth >= n_avail
        self.j = np.ones(depth.size, dtype=np.int64)  # (rows without a floor: their floors are set to −inf)
        if self.no_floor.all():
            self.sample = np.arange(0)
            self.RsT = np.ascontiguousarray(Ra[:0].T)
            return
        depth = depth[~self.no_floor]
        mean = (LARGE_SAMPLE_MEAN if self.labels is not None else SAMPLE_MEAN) * math.sqrt(
            min(1.0, 128 / max(ks.Q32.shape[1], 1)))
        dm = max(float(depth.mean()), 1.0)
        ns = int(min(nr, math.ceil(mean * nr / dm)))
        frac = min(SAMPLE_MAX_FRAC, max(SAMPLE_MIN_FRAC, dm * SAMPLE_FRAC_PER_DEPTH))
        # at most that share, also for small sets: floors from every reference (exact, as this
        # did up to 4,096 references when the sample would be most of them) cost one more full
        # GEMM and partition; on 1,000-4,000 SOP-like rows at D = 16-2,048 the capped sample made
        # the call 1.1-2.5x faster (same values)
        ns = min(ns, int(math.ceil(frac * nr)))
        ns = max(ns, _small_sample(dm, nr, ks.Q32.shape[1]))
        if ns >= nr / 2:  # tiny sets
            ns = nr
            self.sample = np.arange(nr)
            self.j[~self.no_floor] = np.minimum(depth, n_avail)
        else:
            self.sample = np.sort(np.random.default_rng(seed).choice(nr, ns, replace=False))
            self.j[~self.no_floor] = _sample_ranks(depth, ns, nr, ks.Q32.shape[1], self.cnt[~self.no_floor])
        self.RsT = np.ascontiguousarray(Ra[self.sample].T)

    def floor_chunk(self, span):
        """Floors of queries s..e−1: each one's j-th largest sampled key (an estimate of its
        ``depth``-th largest key), less the certification margin."""
        s, e = span
        if self.floor_bf16:  # bfloat16 sample keys (as float32): an estimate like the others
            import torch

            Sm = torch.mm(self.gemm.Qb[s:e], self.Rsb).float().numpy()
        else:
            Sm = self.Qa[s:e] @ self.RsT
        sample = self.sample
        if self.ks.same:  # a query never counts itself
            q = np.arange(s, e)
            pos = np.minimum(np.searchsorted(sample, q), sample.size - 1)
            hit = np.flatnonzero(sample[pos] == q)
            Sm[hit, pos[hit]] = -np.inf
        fl = _kth_largest_lower(Sm, self.j[s:e]) - self.qoff[s:e]
        self.floor[s:e] = fl - 2.0 * (self.w[s:e] + self.eta) - 1e-300

    def set_thresholds(self):
        """τ_i = max(floor_i, lowest relevant key_i − 2w_i) and the float32 filter below it; and
        whether the tiles are pre-filtered in bfloat16 (:mod:`.bf16`), with its candidate
        thresholds ``cthr_i ≤ thr_i − e_i − δ_i``."""
        self.floor[self.no_floor] = -np.inf
        self.tau = np.maximum(self.floor, self.low)
        self.thr = np.nextafter((self.tau + self.qoff).astype(np.float32), np.float32(-np.inf))  # ≤ τ + ‖q‖²
        self.cthr = None
        ks = self.ks
        if self.allow_bf16:
            e = bf16_error(np.sqrt(ks.qsq), ks.rmax, ks.Q32.shape[1])
            cthr = np.nextafter((self.thr.astype(np.float64) - e - self.delta).astype(np.float32),
                                np.float32(-np.inf))
            # (the cost grows with the candidates: where even none would not pay, they are not estimated)
            d = ks.Q32.shape[1]
            if (prefer_bf16(self.tile_elems, d, 0.0) and prefer_bf16(self.tile_elems, d, self._candidates(cthr))
                    and bf16_available()):
                self.cthr = cthr
                # positive thresholds are compared with the tiles' bit patterns as int16: for t ≥ 0
                # and bfloat16 b, b > t ⇔ bits(b) > bits(t), t rounded down to bfloat16 (a
                # truncation: a few more candidates); blocks with a threshold ≤ 0 convert
                pos = cthr > 0
                self.c16 = np.where(pos, cthr.view(np.uint32) >> 16, 0).astype(np.int16)
                self.pos_block = [bool(pos[s:e].all()) for s, e in self.blocks]
                self.gemm.enable_bf16()

    def _candidates(self, cthr: np.ndarray) -> float:
        """The expected number of bfloat16 candidates of the pass, from the floors' sample keys
        of (at most) 256 queries spread over the set."""
        nq = cthr.size
        if not self.sample.size:  # (no floors, no sample: every reference, as an upper bound)
            return float(self.nr) * nq
        q = np.unique(np.linspace(0, nq - 1, min(nq, 256)).astype(np.int64))
        S = self.Qa[q] @ self.RsT
        above = np.count_nonzero(S > cthr[q][:, None], axis=1)
        return float(above.mean()) * self.nr / self.sample.size * nq

    # ------------------------------------------------------------------ tiles
    def run_task(self, task, buf: np.ndarray, mbuf: np.ndarray, mbuf2: np.ndarray, bbuf=None, bits=None):
        if self.overflow:
            raise SurvivorOverflow()
        a, r0, r1, c = task
        s, e = self.blocks[a]
        b, w = e - s, r1 - r0
        bf = self.cthr is not None
        if bf:  # bfloat16 values and candidate thresholds; the candidates' float32 keys below
            T = self.gemm.approx(slice(s, e), r0, r1, bbuf, bits)
            filt = self.c16
            if not (self.pos_block[a] and (c is None or self.pos_block[c])):
                # a threshold ≤ 0: the bfloat16 values as float32 (exact), compared as floats
                T32 = buf.view(np.int32)[:b * w].reshape(b, w)
                T32[...] = T
                T32 <<= 16
                T = T32.view(np.float32)
                filt = self.cthr
        else:
            T = self.gemm(slice(s, e), r0, r1, buf)
            filt = self.thr
        M = mbuf[:b * w].reshape(b, w)
        np.greater(T, filt[s:e, None], out=M)
        if self.labels is not None and not bf:  # survivors as parts sorted by row (see _count_parts)
            f = np.flatnonzero(M)
            r = f // w
            done = [self._add(a, (r.astype(np.int16), (f - r * w + r0).astype(np.int32), T.ravel()[f], True))]
            if c is not None:  # block c's rows: the transposed mask, in row order of block c
                M2 = mbuf2[:b * w].reshape(b, w)
                np.greater(T, filt[None, r0:r1], out=M2)
                # the tile's mask read in place (its transpose's flatnonzero copied 256 KB per tile, against
                # the GEMM's 6-8 ms per 512 x 512 x 128 tile: ~0.15 ms), grouped by block c's row by a stable
                # radix sort of the int16 columns: the same order as the transpose's
                f = np.flatnonzero(M2)
                ar = f // w
                cq = (f - ar * w).astype(np.int16)
                o = np.argsort(cq, kind="stable")
                done.append(self._add(c, (cq[o], (ar[o] + s).astype(np.int32), T.ravel()[f[o]], True)))
            for blk in done:
                if blk is not None:
                    self.finish(blk)
            return
        if c is not None:  # the same tile seen from block c's queries (its columns): one mask for both
            M2 = mbuf2[:b * w].reshape(b, w)
            np.greater(T, filt[None, r0:r1], out=M2)
            np.logical_or(M, M2, out=M)
        f = np.flatnonzero(M)
        r = f // w
        col = f - r * w
        thr_r = self.thr[s:e]
        if bf:
            val = self.gemm.pair_keys32(r + s, col + r0)
            if c is None:
                keep = val > thr_r[r]
                r, col, val = r[keep], col[keep], val[keep]
        else:
            val = T.ravel()[f]
        # survivors kept as (row in its block: int16, reference: int32, float32 key): 10 bytes
        if c is None:
            done = [self._add(a, (r.astype(np.int16), (col + r0).astype(np.int32), val))]
        else:
            thr_c = self.thr[r0:r1]
            inr = val > thr_r[r]
            inc = val > thr_c[col]
            done = [self._add(a, (r[inr].astype(np.int16), (col[inr] + r0).astype(np.int32), val[inr])),
                    self._add(c, (col[inc].astype(np.int16), (r[inc] + s).astype(np.int32), val[inc]))]
        for blk in done:
            if blk is not None:
                self.finish(blk)

    def _add(self, blk: int, part):
        with self.lock:
            self.held += len(part[0])
            self.held_blk[blk] += len(part[0])
            if self.held > self.budget or self.held_blk[blk] > self.budget_blk[blk]:
                self.overflow = True
                raise SurvivorOverflow()
            self.pending[blk].append(part)
            self.remaining[blk] -= 1
            return blk if self.remaining[blk] == 0 else None

    # ------------------------------------------------------------------ ranks of one block
    def finish(self, blk: int):
        """Rank block ``blk``'s pairs from its survivors, recount the rows whose floor was too
        high (with labels: at the end, :meth:`recount_deferred`), and write the block's pairs in
        rank order."""
        s, e = self.blocks[blk]
        with self.lock:
            parts, self.pending[blk] = self.pending[blk], None
            self.held -= sum(len(p[0]) for p in parts)
        if parts and all(len(p) == 4 for p in parts):  # parts sorted by row (the labels mode)
            nb = e - s
            if self.pool is not None and nb >= 2 * SPLIT_MIN_ROWS:  # halves, as below
                h = nb // 2
                cut = [int(np.searchsorted(p[0], h)) for p in parts]
                lo = [(p[0][:i], p[1][:i], p[2][:i]) for p, i in zip(parts, cut)]
                hi = [(p[0][i:] - np.int16(h), p[1][i:], p[2][i:]) for p, i in zip(parts, cut)]
                fut = self.pool.submit(self._finish_rows, s, h, nb, None, None, None, hi)
                with self.lock:
                    self.extra.append(fut)
                self._finish_rows(s, 0, h, None, None, None, lo)
            else:
                self._finish_rows(s, 0, nb, None, None, None, [p[:3] for p in parts])
            return
        r = np.concatenate([p[0] for p in parts])
        ids = np.concatenate([p[1] for p in parts])
        v = np.concatenate([p[2] for p in parts])
        nb = e - s
        if self.pool is not None and nb >= 2 * SPLIT_MIN_ROWS:
            # the second half of the rows to another worker: the last blocks complete together
            # at the end of the pass, and their ranking would otherwise run on fewer threads
            h = nb // 2
            lo = r < h
            fut = self.pool.submit(self._finish_rows, s, h, nb, r[~lo] - h, ids[~lo], v[~lo])
            with self.lock:
                self.extra.append(fut)
            self._finish_rows(s, 0, h, r[lo], ids[lo], v[lo])
        else:
            self._finish_rows(s, 0, nb, r, ids, v)

    def _finish_rows(self, s: int, h0: int, h1: int, r, ids, v, parts=None):
        """Rank the pairs of queries s + h0 … s + h1 − 1 from their survivors (``r``: row − h0; or
        ``parts``, each sorted by row: see :meth:`_count_parts`)."""
        rows = np.arange(h0, h1)
        if parts is not None:
            fail = self._count_parts(s, rows, self.tau[s + h0:s + h1], parts)
        else:
            fail = self._count(s, rows, self.tau[s + h0:s + h1], r, ids, v)
        if fail.size:
            if self.labels is not None:  # (the pairs are written per row: recounted all at once at the end)
                with self.lock:
                    self.deferred.append(s + fail)
            else:
                self._recount(s, fail)
        if self.labels is None:  # (_count_large writes the pairs in rank order itself)
            self._order(s + h0, s + h1)

    def _recount(self, s: int, fail: np.ndarray):
        """Rank the pairs of queries s + ``fail`` (rows whose floor came out too high) again from their
        exact depth-th float32 key (one small GEMM)."""
        q = s + fail
        nr = self.nr
        T = self.gemm(q, 0, nr, np.empty(self.gemm.buffer_elems(q.size, nr), np.float32))
        kth = _kth_largest(T, self.depth[q]) - self.qoff[q]
        tau = kth - 2.0 * (self.w[q] + self.eta) - np.abs(kth) * 2.0 ** -40 - 1e-300
        thr = np.nextafter((tau + self.qoff[q]).astype(np.float32), np.float32(-np.inf))
        f = np.flatnonzero(T > thr[:, None])
        rr = f // nr
        if self.labels is not None:  # (rr: sorted)
            again = self._count_parts(s, fail, tau, [(rr, f - rr * nr, T.ravel()[f])])
        else:
            again = self._count(s, fail, tau, rr, f - rr * nr, T.ravel()[f])
        assert again.size == 0, "a recount from the exact floor cannot fail"

    def recount_deferred(self):
        """The labels mode's recounts (:meth:`_finish_rows`), once every block is ranked: the rows of
        every block at once, in batches of at most a block's rows (a recount per block cost ~1.5 ms of
        fixed numpy work for its few rows: 7 of them at CUB-like 6,000 x 128)."""
        if not self.deferred:
            return
        q = np.sort(np.concatenate(self.deferred))
        self.deferred = []
        step = max(1, self.blocks[0][1] - self.blocks[0][0])
        for c0 in range(0, q.size, step):
            self._recount(0, q[c0:c0 + step])

    def _count(self, s, rows, tau, r, ids, v):
        """Rank the pairs of the block's rows ``rows`` (queries s + rows) from their survivors:
        ``r`` (index into ``rows``), reference ``ids`` and float32 tile values ``v``; floors
        ``tau``. Writes ``self.rank``; returns the rows whose floor was too high to rank all pairs."""
        ks = self.ks
        q = s + rows
        nb = rows.size
        qoff = self.qoff[q]
        n_surv = np.bincount(r, minlength=nb)
        start = np.cumsum(n_surv) - n_surv
        smax = int(max(n_surv.max(initial=0), 1))
        o = np.argsort(r.astype(np.int16, copy=False), kind="stable")  # survivors grouped by row (radix sort)
        r, ids, v = r[o], ids[o], v[o]
        if self.labels is not None:  # (grouped by row now)
            return self._count_parts(s, rows, tau, [(r, ids, v)])
        # survivors sorted per row, in band coordinates g = row·W + (value − pad): one binary search
        # over all rows; pads (rows with fewer survivors) sit below every value of their row; a key
        # k of the row is the value k + qoff (float32 units)
        W, pad, eta = self.W, self.pad, self.eta
        # Each survivor's slot in its (unsorted) padded row rides in the low 29 bits of its float64
        # value, which a float32 value converted to float64 leaves zero: one np.sort per row then
        # orders the values (distinct float32 values keep their order) and carries the slots along.
        slot = np.arange(r.size) - start[r]
        S = np.empty((nb, smax))
        S[:] = pad  # pads below every value of the row
        vs = v.astype(np.float64)
        vs.view(np.int64)[:] |= slot
        S.ravel()[r.astype(np.int64) * smax + slot] = vs
        Si = S.view(np.int64)
        S.sort(axis=1)
        pos = Si & _SLOT_MASK  # after the sort: each value's slot in its row (pads: meaningless, never read)
        Si ^= pos
        pos = pos.ravel()
        S -= pad
        S += (np.arange(nb) * W)[:, None]
        g = S.ravel()
        # the pairs of these rows
        cnt = self.cnt[q]
        slot = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        first = np.repeat(self.off[q], cnt)  # each pair's query's first pair
        lr = np.repeat(np.arange(nb), cnt)
        K = np.full((nb, int(max(cnt.max(initial=0), 1))), np.inf)  # each row's pairs in increasing key order
        K[lr, slot] = self.k[first + slot]
        pp = first + np.argsort(K, axis=1)[lr, slot]
        self.korder[first + (cnt[lr] - 1) - slot] = pp  # decreasing key order per query
        k = self.k[pp]
        kt = k + qoff[lr]  # the keys as values (k itself where qoff is 0)
        w = self.w[q][lr] + eta
        base = lr * W - pad
        idx = np.searchsorted(g, (kt + w) + base, side="right")  # survivors of the row ≤ k + w, and rows before
        sure = (lr + 1) * smax - idx  # survivors surely before the pair: float32 key > k + w
        # a certified pair's own reference survived and lies within ±w of k, at position idx − 1 or
        # below; a second survivor within the window is then the one at idx − 2 (of the same row:
        # an earlier row's coordinates lie below this row's window)
        second = g[np.maximum(idx - 2, 0)]
        win = (idx - 2 >= lr * smax) & (second >= (kt - w) + base)
        hi_t = np.searchsorted(g, (tau + qoff + 2.0 * self.w[q] + eta) + np.arange(nb) * W - pad, side="right")
        n_high = (np.arange(nb) + 1) * smax - hi_t  # survivors above τ + 2w
        depth = self.depth[q][lr]
        certified = k - w > tau[lr]
        beyond = ~certified & (n_high[lr] >= depth)
        bad = ~certified & ~beyond
        amb_before = np.zeros(pp.size, dtype=np.int64)
        amb = np.flatnonzero(certified & win & (sure < depth))
        if amb.size:  # float64 keys of the survivors within ±w of an ambiguous pair's key
            pa = pp[amb]
            lo_i = np.searchsorted(g, ((kt - w) + base)[amb], side="left")  # the window: g[lo_i:idx]
            c = idx[amb] - lo_i
            if dense_windows(int(c.sum()), amb.size, int(n_surv[np.unique(lr[amb])].sum())):  # (many
                # equal keys, or overlapping windows): each member's key once
                ra = self.rj[pa]
                amb_before[amb] = tie_window_before(
                    g.size, lo_i, idx[amb], lr[amb], pair_keys64(ks.Q64, ks.R64, q[lr[amb]], ra, ks.metric), ra,
                    lambda at: at // smax, lambda at: ids[start[at // smax] + pos[at]],
                    lambda rr, ref: pair_keys64(ks.Q64, ks.R64, q[rr], ref, ks.metric), greater_high=True,
                    ref_class=ks.ref_classes())
            else:
                amb_before[amb] = self._window_before(amb, pa, k, lo_i, c, g, smax, ids, start, pos)
        rk = (1 + sure + amb_before).astype(np.float64)
        rk[beyond | (rk > depth)] = np.inf
        ok = ~bad
        self.rank[pp[ok]] = rk[ok]
        return np.unique(rows[lr[bad]])

    def _window_before(self, amb, pa, k, lo_i, c, g, smax, ids, start, pos):
        """:meth:`_count`'s ambiguous pairs ``amb`` (pair ids ``pa``), each window ``g[lo_i:lo_i + c]``
        compared pair by pair in float64: the members that rank before the pair (larger key, or
        equal with the lower reference index), its own reference left out."""
        ks = self.ks
        rep = np.repeat(np.arange(amb.size), c)
        at = np.repeat(lo_i - np.cumsum(c) + c, c) + np.arange(rep.size)  # window members' places in g
        wid = ids[start[at // smax] + pos[at]]  # (survivors grouped by row: row start + slot)
        keep = wid != self.rj[pa][rep]  # not the pair's own reference
        rep, wid = rep[keep], wid[keep]
        qa = self.qi[pa]
        kr = pair_keys64(ks.Q64, ks.R64, qa[rep], wid, ks.metric)
        kp = k[amb][rep]
        if self.estimated:  # the pair's exact key only where its estimate cannot decide
            close = np.abs(kr - kp) <= self.err[qa][rep]
            if close.any():
                up, inv = np.unique(rep[close], return_inverse=True)
                kp = kp.copy()
                kp[close] = pair_keys64(ks.Q64, ks.R64, qa[up], self.rj[pa][up], ks.metric)[inv]
        before = (kr > kp) | ((kr == kp) & (wid < self.rj[pa][rep]))
        return np.bincount(rep[before], minlength=amb.size)

    def _count_parts(self, s, rows, tau, parts):
        """:meth:`_count` of the labels mode from survivors in parts each sorted by row (``(row,
        reference, float32 value)``): each survivor's slot in its padded row is its place in its
        part's run of the row after the slots of the earlier parts, so no sort groups them; its
        reference rides in the low 29 bits of its float64 value through the sort of the rows (as
        :meth:`_count`'s slots; references < 2^29). The same sorted rows as :meth:`_count`'s."""
        nb = rows.size
        cnts = [np.bincount(p[0], minlength=nb) for p in parts]
        n_surv = np.sum(cnts, axis=0) if cnts else np.zeros(nb, dtype=np.int64)
        smax = int(max(n_surv.max(initial=0), 1))
        W, pad = self.W, self.pad
        S = np.empty((nb, smax))
        S[:] = pad  # pads below every value of the row (as in _count)
        used = np.zeros(nb, dtype=np.int64)
        for (r, ids, v), c in zip(parts, cnts):
            if r.size == 0:
                continue
            ri = r.astype(np.int64)
            slot = np.arange(r.size) - (np.cumsum(c) - c - used)[ri]
            vs = v.astype(np.float64)
            vs.view(np.int64)[:] |= ids
            S.ravel()[ri * smax + slot] = vs
            used += c
        Si = S.view(np.int64)
        S.sort(axis=1)
        ref_at = Si & _SLOT_MASK  # after the sort: each value's reference (pads: meaningless, never read)
        Si ^= ref_at
        ref_at = ref_at.ravel()
        S -= pad
        S += (np.arange(nb) * W)[:, None]
        return self._count_large(s, rows, tau, S.ravel(), smax, n_surv, ref_at)

    def _count_large(self, s, rows, tau, g, smax, n_surv, ref_at):
        """:meth:`_count` for classes of tens and more (``LARGE_PAIRS_PER_QUERY``), from the survivors'
        side: the relevant survivors are read off each row's sorted survivors (their labels), each one's survivors
        above are its place in the row, and only where another survivor lies within ±w of its key
        (a float32 near-tie: ~12% of them at 10,000 x 10) is the pair ranked as :meth:`_count` does
        (the survivors surely before, the window in float64; a relevant window member's key from
        the per-class GEMM). The other pairs lie below the floor: beyond the depth or, where fewer
        than the depth survivors lie above τ + 2w, the row is recounted. The same ranks as
        :meth:`_count`; the pairs are written in rank order (beyond-depth ones in reference order;
        with ``compact`` not at all) at once, so :meth:`_order` is not needed."""
        ks, W, pad, eta = self.ks, self.W, self.pad, self.eta
        y, y_ref, pic = self.labels
        q = s + rows
        nb = rows.size
        depth = self.depth[q]
        wq = self.w[q] + eta
        # survivors above τ + 2w per row (certifies "beyond the depth")
        qoff = self.qoff[q]
        hi_t = np.searchsorted(g, (tau + qoff + 2.0 * self.w[q] + eta) + np.arange(nb) * W - pad, side="right")
        n_high = (np.arange(nb) + 1) * smax - hi_t
        # rows with a pair that is not certified (k − w ≤ τ: below the floor) and not surely beyond
        bad = (self.kmin[q] - wq <= tau) & (n_high < depth)
        # the survivors, row by row in increasing key order (pads first), and which are relevant
        n_pad = smax - n_surv
        fv = np.flatnonzero(np.arange(smax)[None, :] >= n_pad[:, None])  # flat places of the survivors
        rowv = np.repeat(np.arange(nb), n_surv)
        idv = ref_at[fv]
        sel = np.flatnonzero(y_ref[idv] == y[q][rowv])  # (integer gathers: boolean ones mispredict)
        if bad.any():
            sel = sel[~bad[rowv[sel]]]
        fr, ref, lr = np.take(fv, sel), np.take(idv, sel), np.take(rowv, sel)
        qr = q[lr]
        pp = self.off[qr] + pic[ref] - ((ref > qr) if ks.same else 0)  # the pair of each relevant survivor
        k = self.k[pp]
        kt = k + qoff[lr]  # the keys as values (see _count)
        w = wq[lr]
        base = lr * W - pad
        row_end = (lr + 1) * smax
        certified = k - w > tau[lr]
        above = row_end - 1 - fr  # survivors after it in the row's order (float32 key ≥ its own)
        nxt = g[np.minimum(fr + 1, g.size - 1)]
        prv = g[fr - 1]  # (fr ≥ 1: a row's first place is a pad unless it is full, see below)
        clean = ((fr + 1 == row_end) | (nxt > (kt + w) + base)) & ((fr == lr * smax) | (prv < (kt - w) + base))
        rk = (1 + above).astype(np.float64)
        amb = np.flatnonzero(certified & ~clean)
        if amb.size:  # the survivors within ±w of the pair's key (float32 near-ties): next to its own place
            fa, la, ka, wa, ba = fr[amb], lr[amb], k[amb], w[amb], base[amb]
            kta = kt[amb]
            up = _run_length(g, fa, 1, (la + 1) * smax, (kta + wa) + ba)  # after it, float32 key ≤ k + w
            down = _run_length(g, fa, -1, la * smax, (kta - wa) + ba)  # before it, float32 key ≥ k − w
            sure = above[amb] - up  # float32 key > k + w: surely before (as _count counts them)
            rk[amb] = 1 + sure
            win = sure < depth[la]  # a window only where the rank may lie within the depth
            amb, fa, ka, sure, up, down = amb[win], fa[win], ka[win], sure[win], up[win], down[win]
        if amb.size and dense_windows(int((up + down).sum()), amb.size, int(n_surv[np.unique(lr[amb])].sum())):
            # many equal keys (or overlapping windows): each member's key once
            ra, la = ref[amb], lr[amb]
            rk[amb] = 1 + sure + tie_window_before(
                g.size, fa - down, fa + up + 1, la, pair_keys64(ks.Q64, ks.R64, q[la], ra, ks.metric), ra,
                lambda at: at // smax, lambda at: ref_at[at],
                lambda rr, r: pair_keys64(ks.Q64, ks.R64, q[rr], r, ks.metric), greater_high=True,
                ref_class=ks.ref_classes())
        elif amb.size:  # the window in float64, lower index first on ties (:meth:`_count`'s way)
            c = up + down + 1
            rep = np.repeat(np.arange(amb.size), c)
            at = np.repeat(fa - down - np.cumsum(c) + c, c) + np.arange(rep.size)
            keepw = at != fa[rep]  # not the pair's own place
            rep, at = rep[keepw], at[keepw]
            wid = ref_at[at]
            qa = qr[amb]
            qw = qa[rep]
            kp = ka[rep]
            ra = ref[amb]
            # a relevant window member's key is known (an estimate within err, like the pair's own);
            # the others' float64 keys are computed
            wrel = np.flatnonzero(y_ref[wid] == y[qw])
            kr = np.empty(rep.size)
            kr[wrel] = self.k[self.off[qw[wrel]] + pic[wid[wrel]] - ((wid[wrel] > qw[wrel]) if ks.same else 0)]
            other = np.ones(rep.size, dtype=bool)
            other[wrel] = False
            other = np.flatnonzero(other)
            kr[other] = pair_keys64(ks.Q64, ks.R64, qw[other], wid[other], ks.metric)
            if self.estimated:  # the exact keys only where the estimates cannot decide
                tol = self.err[qw]
                tol[wrel] *= 2.0  # two estimates
                close = np.abs(kr - kp) <= tol
                if close.any():
                    u, inv = np.unique(rep[close], return_inverse=True)
                    kp = kp.copy()
                    kp[close] = pair_keys64(ks.Q64, ks.R64, qa[u], ra[u], ks.metric)[inv]
                    cr = np.flatnonzero(close)
                    cr = cr[y_ref[wid[cr]] == y[qw[cr]]]  # a relevant member's exact key too
                    kr[cr] = pair_keys64(ks.Q64, ks.R64, qw[cr], wid[cr], ks.metric)
            before = (kr > kp) | ((kr == kp) & (wid < ra[rep]))
            rk[amb] = 1 + sure + np.bincount(rep[before], minlength=amb.size)
        fin = certified & (rk <= depth[lr])
        self._write_large(q, ~bad, pp[fin], rk[fin], lr[fin], ref[fin])
        return rows[bad]

    def _write_large(self, q, good, pf, rf, lf, ref):
        """Write the pairs of the rows ``good`` (queries ``q[good]``) in rank order: the finite ranks
        ``rf`` of pairs ``pf`` (of rows ``lf``, each row's in increasing key order of the survivors,
        i.e. decreasing rank order but within float32 near-ties), then the query's other pairs (beyond
        the depth) in reference-index order."""
        g_rows = np.flatnonzero(good)
        if g_rows.size == 0:
            return
        qs = q[g_rows]
        cnt = self.cnt[qs]
        tot = int(cnt.sum())
        o0 = self.off[qs]
        local0 = np.cumsum(cnt) - cnt
        gi_of_row = np.full(q.size, -1, dtype=np.int64)
        gi_of_row[g_rows] = np.arange(g_rows.size)
        gi = gi_of_row[lf]
        n_fin = np.bincount(gi, minlength=qs.size)
        fstart = np.cumsum(n_fin) - n_fin
        rev = fstart[gi] + (n_fin[gi] - 1 - (np.arange(gi.size) - fstart[gi]))  # each row's reversed
        rf_o = np.empty(rf.size)
        rf_o[rev] = rf
        pf_o = np.empty(pf.size, dtype=np.int64)
        pf_o[rev] = ref if self.compact else pf
        gi_o = np.repeat(np.arange(qs.size), n_fin)
        if rf_o.size > 1:  # near-ties ordered otherwise in float32: sort by rank (nearly sorted already)
            viol = (rf_o[1:] <= rf_o[:-1]) & (gi_o[1:] == gi_o[:-1])
            if viol.any():
                o = np.argsort(gi_o * (int(self.depth.max()) + 2) + rf_o.astype(np.int64), kind="stable")
                rf_o, pf_o = rf_o[o], pf_o[o]
        if self.compact:  # (pf_o holds the references)
            with self.lock:
                self.pieces.append((qs, n_fin, rf_o, pf_o))
            return
        within = np.arange(rf_o.size) - fstart[gi_o]
        outp = o0[gi_o] + within
        self.out_rank[outp] = rf_o
        self.out_ref[outp] = self.rj[pf_o]
        # the other pairs, beyond the depth: reference order (the pairs' order), after the finite ones
        used = np.zeros(tot, dtype=bool)
        used[local0[gi_o] + (pf_o - o0[gi_o])] = True
        slots = np.zeros(tot, dtype=bool)
        slots[local0[gi_o] + within] = True
        allp = np.repeat(o0 - local0, cnt) + np.arange(tot)
        rest = allp[~slots]
        self.out_ref[rest] = self.rj[allp[~used]]
        self.out_rank[rest] = np.inf

    def _order(self, s: int, e: int):
        """The block's pairs in rank order per query (beyond the depth: reference-index order,
        which is the order of the pairs as given).

        Ranks fall as keys rise, so the decreasing key order of :meth:`_count` is the rank order
        with the beyond-depth pairs (the lowest keys) last; those are put in reference-index order.
        The order is then checked (ranks increasing within each query, ``inf`` last); queries whose
        key estimates ordered two pairs otherwise (keys within their error, equal keys) are sorted
        by rank."""
        p0, p1 = int(self.off[s]), int(self.off[e])
        if p0 == p1:
            return
        perm = self.korder[p0:p1]  # pair ids, decreasing key order per query
        rk = self.rank[perm]
        tail = np.flatnonzero(rk == np.inf)
        if tail.size:  # the beyond-depth pairs of each query in the order given (grouped by query alike)
            perm[tail] = p0 + np.flatnonzero(self.rank[p0:p1] == np.inf)
        ok = rk[1:] > rk[:-1]
        ok |= (rk[1:] == np.inf) & (rk[:-1] == np.inf)
        head = self.off[s + 1:e] - p0  # where each query after the first starts (its first pair
        ok[head[(head >= 1) & (head < p1 - p0)] - 1] = True  # follows another query's last)
        if ok.all():  # (the tail's pairs are beyond the depth too: rk holds their ranks)
            self.out_rank[p0:p1] = rk
            self.out_ref[p0:p1] = self.rj[perm]
            return
        self._order_sorted(s, e)

    def _order_sorted(self, s: int, e: int):
        """:meth:`_order` by sorting each query's pairs by rank."""
        p0, p1 = int(self.off[s]), int(self.off[e])
        cnt = self.cnt[s:e]
        lr = np.repeat(np.arange(e - s), cnt)
        slot = np.arange(p1 - p0) - np.repeat(self.off[s:e] - p0, cnt)
        rk = np.full((e - s, int(max(cnt.max(initial=0), 1))), np.inf)
        rk[lr, slot] = self.rank[p0:p1]
        src = np.argsort(rk, axis=1, kind="stable")[lr, slot]
        self.out_rank[p0:p1] = rk[lr, src]
        self.out_ref[p0:p1] = self.rj[p0 + (self.off[s:e] - p0)[lr] + src]


def relevant_ranks_by_rows(ks: KeySpace, qi: np.ndarray, rj: np.ndarray, keys: np.ndarray, depth: int, *,
                           key_err=None, block: int | None = None, threads: int | None = None,
                           progress: bool = False, seed: int = 0, bf16: bool = True, labels=None,
                           compact: bool = False):
    """Exact ranks (``inf`` beyond ``depth``) of the relevant pairs ``(qi[p], rj[p])``, ordered.

    ``qi`` must be grouped by query in increasing order and, within a query, ``rj`` increasing
    (as :func:`embedscope.metrics.search.ranks._relevant_pairs` gives them); ``keys`` holds the
    pairs' float64 keys (:func:`~.knn.pair_keys64`) or, with ``key_err`` (per query or scalar),
    estimates within ``key_err`` of them. ``depth`` (scalar or per query) ≥ 1 and at most the
    references available: query i's ranks are exact up to depth[i], ``inf`` beyond.

    Returns ``(ranks, refs)``: per query (in the order of ``qi``), its relevant references in
    rank order, ranks increasing, those beyond the depth last (``inf``) in reference-index order.
    Every pair is ranked (see the module docstring). ``block``: queries per block (default
    ``BLOCK``, on one thread ``BLOCK_ONE_THREAD``, fewer so that each thread gets work);
    ``threads``: worker threads (default: :func:`~.threads.n_search_threads`). ``labels``:
    ``(y, y_ref)``, integer labels of the queries and references such that the pairs are exactly those of
    equal labels (the query itself excluded in a same-set search), in the order above; with classes
    of tens and more (``LARGE_PAIRS_PER_QUERY`` pairs per query, :func:`large_mode`; a third entry,
    the pairs per query, lets ``qi`` and ``rj`` be None with ``compact``) the pass then finds the
    relevant pairs among the sorted survivors (:meth:`_Rows._count_large`) instead of searching each
    pair's place among them; and with ``compact`` it returns ``(ranks, refs, n_ranked)``: per query
    only its ``n_ranked[i]`` relevant references within the depth, in rank order (the others, beyond
    the depth, are not listed).
    """
    nq = ks.Q32.shape[0]
    n_threads = int(threads or n_search_threads())
    if block is None:
        block = max(128, min(BLOCK if n_threads > 1 else BLOCK_ONE_THREAD, -(-nq // (2 * n_threads))))
    block = int(min(block, 32_767))  # rows within a block are kept as int16
    st = _Rows(ks, qi, rj, keys, key_err, depth, seed, block, n_threads, bf16=bf16, labels=labels, compact=compact)
    n_threads = max(1, min(n_threads, len(st.tasks)))
    local = threading.local()
    width = st.gemm.buffer_elems(int(block), max(int(block), REF_TILE))
    bar = _bar(progress, len(st.tasks), "retrieval", unit="tile")

    def worker_setup():
        if not hasattr(local, "buf"):
            local.buf = np.empty(width, dtype=np.float32)
            local.mbuf = np.empty(width, dtype=bool)
            local.mbuf2 = np.empty(width, dtype=bool)
            local.bbuf = local.bits = None
            local.torch1 = False

    def torch_in_worker():
        """A worker thread's first bfloat16 GEMM: its own torch (OpenMP) thread count is 1."""
        if not local.torch1:
            import torch

            torch.set_num_threads(1)
            local.torch1 = True

    def floors(span):
        worker_setup()
        if st.floor_bf16 and n_threads > 1:
            torch_in_worker()
        st.floor_chunk(span)

    def run(task):
        worker_setup()
        if st.cthr is not None:
            if n_threads > 1:
                torch_in_worker()
            if local.bbuf is None:
                import torch

                local.bbuf = torch.empty(width, dtype=torch.bfloat16)
                local.bits = local.bbuf.view(torch.int16).numpy()
        st.run_task(task, local.buf, local.mbuf, local.mbuf2, local.bbuf, local.bits)

    def torch_count():
        return sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None

    try:
        if n_threads == 1:  # the calling thread runs every GEMM: one torch thread for the bfloat16 ones, and
            # one BLAS thread (as the workers below and knn's single-thread pass: a multi-threaded BLAS on
            # 512-row tiles spun: 2-2.8x the CPU time at CUB-like 2,000-6,000 rows with search_threads(1))
            with blas_single_thread():
                with torch_threads(1) if st.floor_bf16 else contextlib.nullcontext():
                    for sp in st.floor_spans:
                        floors(sp)
                st.set_thresholds()
                with torch_threads(1) if st.cthr is not None else contextlib.nullcontext():
                    for t in st.tasks:
                        run(t)
                        bar.update(1)
                    st.recount_deferred()
        else:
            # torch keeps its OpenMP thread count per thread (each worker sets 1 for itself) and takes
            # the last count set as the default of threads started later: the caller's is put back.
            # Read before any worker sets one (torch is imported by then if a GEMM will use it).
            torch_before = torch_count()
            try:
                with blas_single_thread(), ThreadPoolExecutor(n_threads) as pool:
                    list(pool.map(floors, st.floor_spans))
                    st.set_thresholds()
                    if torch_before is None:
                        torch_before = torch_count()
                    st.pool = pool
                    for _ in pool.map(run, st.tasks):
                        bar.update(1)
                    for fut in st.extra:  # every tile is done, so every half block has been handed out
                        fut.result()
                    st.recount_deferred()
            finally:
                if torch_before is not None and (st.floor_bf16 or st.cthr is not None):
                    sys.modules["torch"].set_num_threads(torch_before)
    except SurvivorOverflow:  # an abandoned pass leaves no "done" line (the caller's pass draws its own)
        if hasattr(bar, "leave"):  # tqdm: the bar is erased
            bar.leave = False
        elif hasattr(bar, "closed"):  # a log line at close: none
            bar.closed = True
        bar.close()
        raise
    bar.close()
    if st.compact:
        return _assemble(st.pieces, nq)
    return st.out_rank, st.out_ref


def _assemble(pieces: list, nq: int):
    """The compact result (:func:`relevant_ranks_by_rows` with ``compact``): ``(ranks, refs,
    n_ranked)``, the pieces of the counted sets of rows put in query order."""
    n_ranked = np.zeros(nq, dtype=np.int64)
    if not pieces:
        return np.empty(0), np.empty(0, dtype=np.int64), n_ranked
    pieces.sort(key=lambda p: int(p[0][0]))
    qs = np.concatenate([p[0] for p in pieces])
    cnt = np.concatenate([p[1] for p in pieces])
    ranks = np.concatenate([p[2] for p in pieces])
    refs = np.concatenate([p[3] for p in pieces])
    if qs.size > 1 and np.any(qs[1:] <= qs[:-1]):  # recounted rows: their pieces among the others'
        o = np.argsort(qs, kind="stable")
        src = (np.cumsum(cnt) - cnt)[o]  # each query's entries in the concatenation, in query order
        qs, cnt = qs[o], cnt[o]
        e = np.repeat(src - (np.cumsum(cnt) - cnt), cnt) + np.arange(int(cnt.sum()))
        ranks, refs = ranks[e], refs[e]
    if qs.size != nq or np.any(qs != np.arange(nq)):  # pragma: no cover - a broken invariant
        raise AssertionError("compact relevant ranks: a query was counted twice or not at all")
    n_ranked[:] = cnt
    return ranks, refs, n_ranked
