"""Exact Lloyd k-means from faiss's initialisation, accelerated by Yinyang bounds (docs/methods.md §1).

What is computed (the "plain Lloyd" this module reproduces)
-----------------------------------------------------------
faiss's k-means (``faiss.Clustering`` / ``faiss.Kmeans``, as Roth et al.'s reference code and
pytorch-metric-learning run it) with one difference: every assignment is the *exact*
nearest centroid instead of the argmin of faiss's float32 ``‖x‖² + ‖c‖² − 2 x·c``.

* **Initialisation**: faiss's: the rows ``perm[:k]`` of faiss's ``rand_perm(n, seed + 1)``
  (a Fisher–Yates shuffle driven by ``std::mt19937``), reproduced bit for bit here.
* **Update**: faiss's ``compute_centroids``: each centroid is the float32 sum of its points,
  added in row order, times the float32 ``1 / count`` (bit for bit faiss's centroids).
* **Empty clusters**: faiss's ``split_clusters``: a donor cluster is drawn with probability
  ``(size − 1) / (n − k)`` by an ``mt19937`` seeded 1234 (largest cluster after ``10 k`` failed
  draws); the empty centroid becomes a copy of the donor's, both perturbed by ``1 ± 1/1024`` in
  alternating coordinates (bit for bit faiss's).
* **Assignment**: the nearest centroid in exact arithmetic. A float32 GEMM gives the squared
  distances with a proven error bound ``E = (2D + 16) 2⁻²⁴ (‖x‖ + max‖c‖)²``; a point whose best and
  second-best values are within ``2E`` of each other is re-evaluated in float64 (directly as
  ``Σ (x − c)²`` for the candidates within ``1e-9`` relative of the float64 minimum), ties to the
  lower centroid index. So assignments equal faiss's wherever faiss's float32 rounding does not
  decide a near-tie (gaps below ~1e-6 of ‖x‖²); a flipped near-tie can move later iterations a
  little (the benchmark prints the agreement with faiss and the NMI of both).
* **Stopping**: ``niter`` assignment steps, then a final assignment to the last centroids (what
  PML and Roth's code read from ``index.search``); it stops early at a fixed point (assignments
  unchanged), where faiss stops one step later with the same labels (its objective no longer changes).

Acceleration (Ding et al., "Yinyang K-means", ICML 2015)
---------------------------------------------------------
Centroids are grouped (k-means of the initial centroids, ~``group_size`` per group). Each point
keeps an upper bound ``u`` on the distance to its centroid and a lower bound ``lb[g]`` on the
distance to every other centroid of group ``g``; after an update ``u`` grows by its centroid's
drift and ``lb[g]`` shrinks by the largest drift in ``g`` (triangle inequality). A point with
``u < min_g lb[g]`` (after tightening ``u`` exactly) keeps its centroid without any distance
computation; otherwise only the groups with ``lb[g] ≤ u`` are computed, one float32 GEMM per
group over the points that need it (one full GEMM when more than 35% of the (point, group)
pairs need computing). After a step in which at most half the centroids moved (``_MOVED_FRAC``),
the group drift is not used at all: an unmoved centroid (drift exactly 0: its members did not
change) leaves every bound valid, and each row's ``lb[g]`` is lowered to its error-bounded float32
distance to the moved centroids of ``g`` (one GEMM of all rows × the moved centroids). One
centroid that moved far no longer spoils its whole group, so from the third step on almost no
row needs a group computed (SOP scale: ~200 rows instead of 40,000–60,000). Skipping is a proof,
so the assignments are those of the full computation (tests compare with brute force and with
the unbounded path, with and without the moved-centroid bounds). The bounds pay at large k (SOP:
k = 11,316, N = 60,526: most points stop needing any distance after ~5 steps); below k = 4096 or
N = 16,384 one float32 GEMM per step (still certified) is faster and is used instead.
Memory: the bounds are N × G float64 with G ≤ ``LB_MAX_ELEMS`` / N (groups are merged beyond), and
every (rows × centroids) or (rows × groups) work array is taken in row blocks: never N × k.
Measurements: docs/PERFORMANCE.md, "Exact k-means (issue 18)"; ``benchmarks/kmeans.py``.

On a CUDA GPU (``lloyd_kmeans(..., device="cuda")``; "auto" picks one where torch sees it) the
assignment GEMMs and the updates run there (:mod:`embedscope.metrics.kmeans_device`: one dense GEMM
per step, no bounds), with the same labels and centroids bit for bit.
"""

from __future__ import annotations

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.metrics.search.knn import identical_rows

__all__ = ["faiss_random_init", "update_centroids", "exact_assign", "lloyd_kmeans"]

_SPLIT_EPS = np.float32(1.0 / 1024.0)
_TIE_REL = 1e-9  # float64 window (relative to (‖x‖ + max‖c‖)²) re-evaluated directly
_TRANSLATION_PROBE = 64  # centroids whose distances decide cheaply that a settling block needs no translation
_SLACK = 1e-12   # absolute slack (times the scale) on the bounds, for float64 rounding
_MOVED_FRAC = 0.5  # at most this share of moved centroids: group bounds from their exact distances
#: Memory bounds (speed only: the labels depend neither on the grouping nor on the blocks). The
#: Yinyang lower bounds hold one float64 per (row, group): at most this many, fewer and larger
#: groups where N x k / group_size would exceed it (k ~ N / 5, SOP-like labels: from N ~ 150,000)
LB_MAX_ELEMS = 1 << 25
#: rows x groups of the first (dense) assignment's work arrays at a time
DENSE_CHUNK_ELEMS = 1 << 21
#: rows x centroids of one group's float32 GEMM at a time (a group computed for many rows)
GROUP_GEMM_ELEMS = 1 << 23


def _mt19937(seed: int) -> np.random.MT19937:
    """A numpy MT19937 in the state of ``std::mt19937(seed)`` (init_genrand: numpy's legacy
    integer seeding), so that ``random_raw`` yields the C++ engine's outputs."""
    state = np.random.RandomState(int(seed) & 0xFFFFFFFF).get_state()
    bg = np.random.MT19937()
    bg.state = {"bit_generator": "MT19937", "state": {"key": state[1], "pos": state[2]}}
    return bg


def faiss_random_init(n: int, k: int, seed: int) -> np.ndarray:
    """Row indices of faiss's initial centroids: ``perm[:k]`` of ``rand_perm(perm, n, seed + 1)``
    (faiss ``Clustering::train``, one redo), where ``rand_perm`` swaps ``perm[i]`` with
    ``perm[i + mt() % (n − i)]`` for ``i = 0, 1, …``."""
    raw = _mt19937(int(seed) + 1).random_raw(k)
    perm = np.arange(n, dtype=np.int64)
    for i in range(k):
        j = i + int(raw[i]) % (n - i)
        perm[i], perm[j] = perm[j], perm[i]
    return perm[:k].copy()


def _split_clusters(C: np.ndarray, hassign: np.ndarray, n: int) -> int:
    """faiss ``split_clusters`` on float32 centroids ``C`` and float32 counts ``hassign`` (in place)."""
    k = C.shape[0]
    empty = np.flatnonzero(hassign == 0)
    if empty.size == 0:
        return 0
    if n <= k:
        raise EmbedscopeError("k-means: an empty cluster cannot be split when n_clusters equals the rows")
    rng = _mt19937(1234)
    nk = np.float64(np.float32(n - k))
    even = (np.arange(C.shape[1]) % 2) == 0
    up, down = np.float32(1) + _SPLIT_EPS, np.float32(1) - _SPLIT_EPS
    max_tries = 10 * k
    # faiss's p of every cluster, updated where a split changes a count (the same values as computing
    # them all again for each empty cluster: O(k) per split made a collapsed model's k-means O(k^2))
    p = ((hassign.astype(np.float64) - 1.0) / nk).astype(np.float32)
    buf, pos = np.empty(0, dtype=np.float32), 0  # the generator's numbers, drawn ahead, used in order
    for ci in empty:
        tries, cj, chunk = 0, -1, 64
        while tries < max_tries:  # faiss draws one number per cluster, cyclically from cluster 0,
            # until one falls below its p: here compared in growing chunks; numbers past the hit
            # stay for the next empty cluster
            m = min(chunk, max_tries - tries)
            if pos + m > buf.size:
                new = rng.random_raw(max(m, 8192)).astype(np.float32) / np.float32(4294967295.0)
                buf, pos = np.concatenate([buf[pos:], new]), 0
            at = (tries + np.arange(m)) % k
            hit = np.flatnonzero(buf[pos:pos + m] < p[at])
            if hit.size:
                pos += int(hit[0]) + 1
                cj = int(at[hit[0]])
                break
            pos += m
            tries += m
            chunk = min(2 * chunk, k)
        if cj < 0:
            cj = int(np.argmax(hassign))
        C[ci] = C[cj]
        C[ci] = np.where(even, C[ci] * up, C[ci] * down)
        C[cj] = np.where(even, C[cj] * down, C[cj] * up)
        hassign[ci] = hassign[cj] / np.float32(2)
        hassign[cj] -= hassign[ci]
        both = np.array([ci, cj])
        p[both] = ((hassign[both].astype(np.float64) - 1.0) / nk).astype(np.float32)
    return int(empty.size)


def _sum_plan(assign: np.ndarray, k: int):
    """How faiss's sequential per-cluster sums are taken: the clusters' sizes ``cnt`` and, for
    ``p = 0, 1, …``, the row indices ``rows_p`` of the p-th point (in row order) of every cluster
    with more than p points, those clusters in the order ``by_size`` (largest first, so that they
    are the first ``len(rows_p)`` of it). Returns ``(cnt, order, start, by_size, steps)``: the
    rows sorted by cluster (stable) and each cluster's first place in that order; ``steps()``
    yields ``(m_p, rows_p)``; adding ``x[rows_p]`` to the first ``m_p`` sums for p = 0, 1, … adds each
    cluster's points in row order, as faiss's loop does."""
    cnt = np.bincount(assign, minlength=k)
    order = np.argsort(assign, kind="stable")
    start = np.concatenate([[0], np.cumsum(cnt)[:-1]])
    by_size = np.argsort(-cnt, kind="stable")
    sizes = cnt[by_size]
    base = start[by_size]

    def steps():
        for p in range(int(sizes[0]) if k else 0):
            m = int(np.count_nonzero(sizes > p))
            yield m, order[base[:m] + p]

    return cnt, order, start, by_size, steps


def _few_large_clusters(cnt: np.ndarray, k: int) -> bool:
    """Fewer clusters than the largest one's points: its sums are taken cluster by cluster
    (a running float32 sum along each cluster's rows) instead of point by point."""
    return bool(k) and k < int(cnt.max())


def update_centroids(x32: np.ndarray, assign: np.ndarray, k: int) -> tuple[np.ndarray, int]:
    """faiss's centroid update (float32 sums in row order, times float32 ``1/count``) followed by
    faiss's split of empty clusters. Returns the float32 centroids and the number of splits."""
    n, d = x32.shape
    cnt, order, start, by_size, steps = _sum_plan(assign, k)
    if _few_large_clusters(cnt, k):
        # each cluster's rows in row order by one running float32 sum (cumsum is sequential),
        # + 0 as faiss's sum starts from zero (a lone −0.0 becomes +0.0)
        C = np.zeros((k, d), dtype=np.float32)
        for c in np.flatnonzero(cnt):
            C[c] = np.cumsum(x32[order[start[c]:start[c] + cnt[c]]], axis=0, dtype=np.float32)[-1]
        C += np.float32(0)
    else:
        acc = np.zeros((k, d), dtype=np.float32)
        for m, rows in steps():  # row p of every cluster with more than p points: faiss's sequential sums
            acc[:m] += x32[rows]
        C = np.empty_like(acc)
        C[by_size] = acc
    hassign = cnt.astype(np.float32)
    C *= inverse_counts(hassign)[:, None]
    nsplit = _split_clusters(C, hassign, n)
    return C, nsplit


def inverse_counts(hassign: np.ndarray) -> np.ndarray:
    """faiss's float32 ``1 / count`` of each cluster (1 for an empty one, whose zero row it leaves as it is)."""
    out = np.ones_like(hassign)
    nz = hassign > 0
    out[nz] = np.float32(1) / hassign[nz]
    return out


def _group_centroids(C: np.ndarray, n_groups: int) -> np.ndarray:
    """Group of each centroid: 5 Lloyd steps on the centroids from evenly spaced starts (only the
    speed depends on the grouping, never the result)."""
    k = C.shape[0]
    if n_groups <= 1:
        return np.zeros(k, dtype=np.int64)
    C64 = C.astype(np.float64)
    G = C64[np.linspace(0, k - 1, n_groups).astype(np.int64)].copy()
    cc = np.einsum("ij,ij->i", C64, C64)
    for _ in range(5):
        g = (np.einsum("ij,ij->i", G, G)[None, :] - 2 * C64 @ G.T + cc[:, None]).argmin(1)
        cnt = np.bincount(g, minlength=n_groups)
        S = np.zeros_like(G)
        np.add.at(S, g, C64)
        ok = cnt > 0
        G[ok] = S[ok] / cnt[ok, None]
    return np.unique(g, return_inverse=True)[1].reshape(-1)


def _slab_minima(sT: np.ndarray, starts, ends) -> np.ndarray:
    """Column-wise minima of the row slabs ``sT[starts[t]:ends[t]]`` (t-th output row): one
    contiguous reduction per slab, far cheaper than ``minimum.reduceat`` (15× on axis 0)."""
    out = np.empty((len(starts), sT.shape[1]), dtype=sT.dtype)
    for t, (a, b) in enumerate(zip(starts, ends)):
        np.minimum.reduce(sT[a:b], axis=0, out=out[t])
    return out


class _Assigner:
    """Exact nearest-centroid assignment for a fixed x, over a sequence of centroid sets."""

    def __init__(self, x32: np.ndarray, k: int, group_size: int, bounds: bool):
        self.x = x32
        self.n, self.d = x32.shape
        self.k = k
        x64n = np.einsum("ij,ij->i", x32.astype(np.float64), x32.astype(np.float64)) if self.n * self.d < 2**26 \
            else np.concatenate([np.einsum("ij,ij->i", b.astype(np.float64), b.astype(np.float64))
                                 for b in np.array_split(x32, max(1, self.n * self.d // 2**24))])
        self.xx = x64n
        # rows with a trailing 1: one GEMM with [-2 C, ‖c‖²] gives ‖c‖² − 2 x·c (‖x‖² added in float64)
        self.xa = np.empty((self.n, self.d + 1), dtype=np.float32)
        self.xa[:, :self.d] = x32
        self.xa[:, self.d] = 1.0
        self.xn = np.sqrt(x64n)
        self.errc = (2 * self.d + 16) * 2.0 ** -24
        self.bounds = bounds
        self.group_size = group_size
        self.dense_frac = 0.35  # above this share of (point, group) pairs, one big GEMM is cheaper
        self.a = None          # assignment (internal centroid order)
        self.stats = []        # per step: points examined, (point, group) pairs computed
        self.moved_frac = _MOVED_FRAC
        self.stats_moved = []  # per bounded step: centroids that moved

    # -- setup -----------------------------------------------------------------------------
    def _setup_groups(self, C: np.ndarray):
        n_groups = max(1, int(round(self.k / self.group_size))) if self.bounds else 1
        n_groups = min(n_groups, max(1, LB_MAX_ELEMS // max(self.n, 1)))  # the bounds (n, G) stay bounded
        gid = _group_centroids(C, n_groups)
        self.order = np.argsort(gid, kind="stable")        # internal j -> original centroid
        self.inv = np.empty_like(self.order)
        self.inv[self.order] = np.arange(self.k)
        g_sorted = gid[self.order]
        self.G = int(g_sorted.max()) + 1
        self.starts = np.searchsorted(g_sorted, np.arange(self.G + 1))
        self.gid = g_sorted                                   # group of internal centroid j
        sizes = np.diff(self.starts)
        w = int(sizes.max())
        off = np.arange(w)
        self.valid = off[None, :] < sizes[:, None]             # (G, w) padded column table
        self.cols = self.starts[:-1, None] + np.minimum(off[None, :], sizes[:, None] - 1)

    # -- one GEMM group --------------------------------------------------------------------
    def _group(self, g, rows, CaTg, own):
        step = max(1, GROUP_GEMM_ELEMS // max(1, CaTg.shape[1]))
        if rows.size <= step:
            return self._group_rows(g, rows, CaTg, own)
        parts = [self._group_rows(g, rows[r0:r0 + step], CaTg, None if own is None else own[r0:r0 + step])
                 for r0 in range(0, rows.size, step)]  # row blocks: each row's values are its own
        return tuple(np.concatenate(p) for p in zip(*parts))

    def _group_rows(self, g, rows, CaTg, own):
        s0, s1 = self.starts[g], self.starts[g + 1]
        s = self.xa[rows] @ CaTg                   # ‖c‖² − 2 x·c, float32
        if own is not None:
            loc = own - s0
            hit = np.flatnonzero((loc >= 0) & (loc < s1 - s0))
            s[hit, loc[hit]] = np.inf
        ar = np.arange(s.shape[0])
        j1 = s.argmin(1)
        xx = self.xx[rows]
        v1 = s[ar, j1] + xx
        if s1 - s0 > 1:
            s[ar, j1] = np.inf
            v2 = s.min(1) + xx
        else:
            v2 = np.full(s.shape[0], np.inf)
        return j1 + s0, v1, v2

    # -- float64 re-evaluation of near ties ----------------------------------------------------
    def _exact_rows(self, rows, C64, cc64, cmax):
        """Exact nearest centroid (internal index) and per-group lower bounds for a few rows; rows
        of identical values once (a collapsed model ties every row with every centroid, and its
        rows are often bitwise equal: they share the nearest centroid, its distance and the bounds)."""
        if rows.size >= 64:
            first, inv = identical_rows(self.x[rows])
            if 2 * first.size <= rows.size:
                a, s, lb = self._exact_distinct_rows(rows[first], C64, cc64, cmax)
                return a[inv], s[inv], None if lb is None else lb[inv]
        return self._exact_distinct_rows(rows, C64, cc64, cmax)

    def _exact_distinct_rows(self, rows, C64, cc64, cmax):
        """:meth:`_exact_rows` row by row."""
        out_a = np.empty(rows.size, dtype=np.int64)
        out_s = np.empty(rows.size)
        out_lb = np.empty((rows.size, self.G)) if self.bounds else None
        for b0 in range(0, rows.size, 256):
            r = rows[b0:b0 + 256]
            x64 = self.x[r].astype(np.float64)
            # the block's float64 distances about one of its rows (translation leaves them unchanged;
            # the window is relative to the scale, which a collapsed model's tiny spread about its
            # point makes far smaller: a handful of candidates per row instead of every centroid)
            xc = x64 - x64[0]
            xcn2 = np.einsum("ij,ij->i", xc, xc)
            lim = float((self.xn[r] + cmax).min())
            # the translation helps only where max‖x − x₀‖ + max‖c − x₀‖ < min(‖x‖) + max‖c‖; a few
            # centroids' distances from x₀ bound the second max from below, and where they already rule
            # the translation out (rows spread over the sphere: every step of a trained model), the
            # (k, D) translated copy is not made; the 1e-9 margin covers any rounding of that bound
            few = C64[:_TRANSLATION_PROBE] - x64[0]
            if float(np.sqrt(xcn2.max())) + float(np.sqrt(np.einsum("ij,ij->i", few, few).max())) \
                    < lim * (1.0 + 1e-9):
                Cc = C64 - x64[0]
                ccn2 = np.einsum("ij,ij->i", Cc, Cc)
                scale = np.sqrt(xcn2) + np.sqrt(ccn2.max())
            else:
                Cc = ccn2 = None
                scale = None
            if scale is not None and float(scale.max()) < lim:
                s = xcn2[:, None] + ccn2[None, :] - 2.0 * (xc @ Cc.T)
            else:
                s = self.xx[r, None] + cc64[None, :] - 2.0 * (x64 @ C64.T)
                scale = self.xn[r] + cmax
            tol = _TIE_REL * scale ** 2
            mn = s.min(1)
            for t in range(r.size):
                cand = np.flatnonzero(s[t] <= mn[t] + tol[t])
                dv = x64[t][None, :] - C64[cand]
                ds = np.einsum("ij,ij->i", dv, dv)
                best = ds.min()
                win = cand[ds == best]
                j = win[np.argmin(self.order[win])]          # ties: lower original index
                out_a[b0 + t], out_s[b0 + t] = j, best
                if self.bounds:
                    s[t, j] = np.inf
            if self.bounds:
                gm = np.minimum.reduceat(s, self.starts[:-1], axis=1)
                out_lb[b0:b0 + r.size] = np.sqrt(np.maximum(gm - tol[:, None], 0.0))
        return out_a, out_s, out_lb

    # -- the dense pass: every centroid for a set of rows ---------------------------------------
    def _dense_step(self) -> int:
        """Rows per GEMM block of :meth:`_dense`."""
        return max(64, (1 << 23) // self.k)

    def _dense(self, rows, CaT, lo: int = 0, hi: int | None = None):
        """Best centroid, best and second-best values and (with bounds) the group minima without
        the best centroid, for ``rows`` (None: rows ``lo`` to ``hi``, default every row), by row
        blocks of one GEMM each."""
        if rows is None:
            hi = self.n if hi is None else hi
            nr = hi - lo
        else:
            nr = rows.size
        c1 = np.empty(nr, dtype=np.int64)
        m1 = np.empty(nr)
        m2 = np.empty(nr)
        gmin = np.empty((nr, self.G)) if self.bounds else None
        step = self._dense_step()
        CA = np.ascontiguousarray(CaT.T) if self.bounds else None  # centroids as rows: [−2c, ‖c‖²]
        for r0 in range(0, nr, step):
            r1 = min(nr, r0 + step)
            sel = slice(lo + r0, lo + r1) if rows is None else rows[r0:r1]
            ar = np.arange(r1 - r0)
            xx = self.xx[sel]
            if self.bounds:
                # (centroids, rows): each group's values are contiguous slabs (_slab_minima)
                sT = CA @ self.xa[sel].T
                gm = np.ascontiguousarray(_slab_minima(sT, self.starts[:-1], self.starts[1:]).T)
                gb = gm.argmin(1)
                cols = self.cols[gb]
                vals = sT[cols, ar[:, None]]
                vals[~self.valid[gb]] = np.inf
                jl = vals.argmin(1)
                c1[r0:r1] = cols[ar, jl]
                m1[r0:r1] = vals[ar, jl] + xx
                vals[ar, jl] = np.inf
                gm[ar, gb] = vals.min(1)
                g64 = gm + xx[:, None]
                gmin[r0:r1] = g64
                m2[r0:r1] = g64.min(1)
            else:
                s = self.xa[sel] @ CaT                 # ‖c‖² − 2 x·c, float32
                j1 = s.argmin(1)
                c1[r0:r1] = j1
                m1[r0:r1] = s[ar, j1] + xx
                s[ar, j1] = np.inf
                m2[r0:r1] = s.min(1) + xx
        return c1, m1, m2, gmin

    # -- tight group bounds from the moved centroids -------------------------------------------
    def _moved_bounds(self, moved, CaT, cmax, sl):
        """Lower every row's group bounds to its distances to the ``moved`` centroids (internal,
        sorted) other than its own: one float32 GEMM per row block, certified by the error bound
        ``E``. With the unmoved centroids' drift zero, ``lb[g]`` then bounds all of group ``g``."""
        if moved.size == 0:
            return
        mg = self.gid[moved]
        cuts = np.flatnonzero(np.r_[True, mg[1:] != mg[:-1]])
        ug = mg[cuts]
        ends = np.append(cuts[1:], moved.size)
        pos = np.full(self.k, -1, dtype=np.int64)
        pos[moved] = np.arange(moved.size)
        MA = np.ascontiguousarray(CaT[:, moved].T)  # moved centroids as rows: [−2c, ‖c‖²]
        whole = ug.size == self.G
        step = max(64, (1 << 23) // moved.size)
        for r0 in range(0, self.n, step):
            r1 = min(self.n, r0 + step)
            sT = MA @ self.xa[r0:r1].T                  # (moved, rows): each group's rows contiguous
            p = pos[self.a[r0:r1]]
            hit = np.flatnonzero(p >= 0)
            sT[p[hit], hit] = np.inf                     # a row's own centroid is not in its bounds
            gm = _slab_minima(sT, cuts, ends).astype(np.float64)
            gm += self.xx[r0:r1] - self.errc * (self.xn[r0:r1] + cmax) ** 2
            np.maximum(gm, 0.0, out=gm)
            new = np.sqrt(gm, out=gm)
            new -= sl
            blk = self.lb[r0:r1]
            if whole:
                np.minimum(blk, new.T, out=blk)
            else:
                blk[:, ug] = np.minimum(blk[:, ug], new.T)

    # -- the step --------------------------------------------------------------------------
    def assign(self, C32: np.ndarray) -> np.ndarray:
        """Exact nearest centroid (original indices) of every row for centroids ``C32``."""
        first = self.a is None
        if first:
            self._setup_groups(C32)
            self.a = np.empty(self.n, dtype=np.int64)
            self.u = np.empty(self.n)
            self.lb = np.empty((self.n, self.G)) if self.bounds else None
        Cp = np.ascontiguousarray(C32[self.order])
        C64 = Cp.astype(np.float64)
        cc64 = np.einsum("ij,ij->i", C64, C64)
        CaT = np.empty((self.d + 1, self.k), dtype=np.float32)
        CaT[:self.d] = (np.float32(-2) * Cp).T
        CaT[self.d] = cc64.astype(np.float32)
        cmax = float(np.sqrt(cc64.max()))
        scale = float(self.xn.max()) + cmax
        sl = _SLACK * scale
        R = None
        if not (first or not self.bounds):
            d0 = np.sqrt(np.einsum("ij,ij->i", C64 - self.C64, C64 - self.C64))
            drift = d0 * (1 + 1e-12) + sl
            moved = np.flatnonzero(d0 > 0)
            self.u += drift[self.a]
            if moved.size <= self.moved_frac * self.k:
                # the centroids that moved are few: their distances to every row, exactly bounded,
                # replace the group drift; the others did not move (lb only loses the slack)
                self.lb -= sl
                self._moved_bounds(moved, CaT, cmax, sl)
                self.stats_moved.append(moved.size)
            else:
                self.lb -= np.maximum.reduceat(drift, self.starts[:-1])[None, :]
            lb_min = self.lb.min(1)
            cand = np.flatnonzero(self.u >= lb_min)
            dv = self.x[cand].astype(np.float64) - C64[self.a[cand]]
            s_c = np.einsum("ij,ij->i", dv, dv)
            self.u[cand] = np.sqrt(s_c) * (1 + 1e-12) + sl
            keep = self.u[cand] >= lb_min[cand]
            R = cand[keep]
            s_old = s_c[keep]
            own = self.a[R]
            need = np.empty((R.size, self.G), dtype=bool)  # lb[R] <= u[R], by row blocks (no float copy of lb[R])
            uR = self.u[R]
            rb = max(1, DENSE_CHUNK_ELEMS // self.G)
            for r0 in range(0, R.size, rb):
                np.less_equal(self.lb[R[r0:r0 + rb]], uR[r0:r0 + rb, None], out=need[r0:r0 + rb])
            frac = need.sum() / max(1, need.size) * R.size / self.n
        self.C64 = C64

        if R is None or frac > self.dense_frac:
            # every centroid for the rows (all rows on the first step / without bounds), in chunks of
            # whole GEMM blocks of _dense (the same blocks as one call): each row's values are its own
            idx = np.arange(self.n) if R is None else R
            self.stats.append((idx.size, idx.size * self.G, "dense"))
            step = self._dense_step()
            chunk = step * max(1, DENSE_CHUNK_ELEMS // (step * self.G))
            ties = []
            for c0 in range(0, idx.size, chunk):
                c1_ = min(idx.size, c0 + chunk)
                ic = idx[c0:c1_]
                c1, m1, m2, gmin = self._dense(None if R is None else ic, CaT, c0, c1_)
                E = self.errc * (self.xn[ic] + cmax) ** 2
                tie = m2 <= m1 + 2 * E
                ok = ~tie
                okr = ic[ok]
                self.a[okr] = c1[ok]
                self.u[okr] = np.sqrt(m1[ok] + E[ok]) + sl
                if self.bounds:
                    self.lb[okr] = np.sqrt(np.maximum(gmin[ok] - E[ok, None], 0.0)) - sl
                ties.append(ic[tie])
            tr = np.concatenate(ties) if ties else np.empty(0, dtype=np.int64)
        else:
            idx = R
            nR = R.size
            E = self.errc * (self.xn[R] + cmax) ** 2
            m1 = s_old.copy()
            c1 = own.copy()
            m2 = np.full(nR, np.inf)
            bg = np.full(nR, -1, dtype=np.int64)
            sec = np.full(nR, np.inf)
            gg, pp = np.nonzero(need.T)
            cuts = np.searchsorted(gg, np.arange(self.G + 1))
            pairs = 0
            for g in range(self.G):
                if cuts[g + 1] == cuts[g]:
                    continue
                sel = pp[cuts[g]:cuts[g + 1]]
                rows = R[sel]
                CaTg = np.ascontiguousarray(CaT[:, self.starts[g]:self.starts[g + 1]])
                j1, v1, v2 = self._group(g, rows, CaTg, own[sel])
                pairs += len(j1)
                self.lb[rows, g] = np.sqrt(np.maximum(v1 - E[sel], 0.0)) - sl
                cm1 = m1[sel]
                better = v1 < cm1
                m2[sel] = np.where(better, np.minimum(cm1, v2), np.minimum(m2[sel], v1))
                m1[sel] = np.where(better, v1, cm1)
                c1[sel] = np.where(better, j1, c1[sel])
                bg[sel] = np.where(better, g, bg[sel])
                sec[sel] = np.where(better, v2, sec[sel])
            self.stats.append((nR, pairs, "groups"))
            tie = m2 <= m1 + 2 * E
            ok = ~tie
            from_gemm = ok & (bg >= 0)
            fr = R[from_gemm]
            self.u[fr] = np.sqrt(m1[from_gemm] + E[from_gemm]) + sl
            self.lb[fr, bg[from_gemm]] = np.sqrt(np.maximum(sec[from_gemm] - E[from_gemm], 0.0)) - sl
            moved = ok & (c1 != own)
            mr = R[moved]
            go = self.gid[own[moved]]
            self.lb[mr, go] = np.minimum(self.lb[mr, go], np.sqrt(s_old[moved]) - sl)
            self.a[R[ok]] = c1[ok]
            tr = idx[tie]
        if tr.size:
            a_t, s_t, lb_t = self._exact_rows(tr, C64, cc64, cmax)
            self.a[tr] = a_t
            self.u[tr] = np.sqrt(s_t) * (1 + 1e-12) + sl
            if self.bounds:
                self.lb[tr] = lb_t - sl
        self.n_ties = int(tr.size)
        return self.order[self.a]


#: run the device engine on the CPU's torch (tests: its code without a GPU); off, the CPU runs numpy
TORCH_ON_CPU = False


def _kmeans_device(device):
    """The ``torch.device`` k-means runs its steps on, or None for numpy on the CPU."""
    if device is None:
        return None
    from embedscope.device import compute_device

    dev = compute_device(device)
    if getattr(dev, "type", "cpu") == "cuda":
        return dev
    if TORCH_ON_CPU:
        import torch

        return torch.device("cpu")
    return None


def exact_assign(x32: np.ndarray, C32: np.ndarray) -> np.ndarray:
    """Exact nearest centroid of every row (float32 GEMM, float64-certified; ties to the lower
    index): one full assignment step, no bounds."""
    eng = _Assigner(np.ascontiguousarray(x32, dtype=np.float32), C32.shape[0], 1 << 30, bounds=False)
    return eng.assign(np.ascontiguousarray(C32, dtype=np.float32))


def lloyd_kmeans(x32: np.ndarray, k: int, *, niter: int = 20, seed: int = 1234, bounds: bool | None = None,
                 group_size: int = 64, init: np.ndarray | None = None, device=None) -> dict:
    """Exact Lloyd k-means from faiss's initialisation (see the module docstring).

    Parameters
    ----------
    x32 : (N, D) float32 rows (already L2-normalised where the caller wants cosine).
    k : number of clusters (1 ≤ k ≤ N).
    niter : Lloyd iterations (assignment + update), as faiss's ``niter``.
    seed : faiss's seed (≥ 0): the initial centroids are faiss's for that seed.
    bounds : use the Yinyang bounds (``False``: every distance every step, the plain reference;
        ``None``: bounds from k ≥ 4096 clusters and N ≥ 16384 rows, where they were measured to
        pay; below, one GEMM per step is faster). The labels are the same either way.
    group_size : centroids per Yinyang group (speed only).
    init : optional (k, D) initial centroids instead of faiss's random rows.
    device : None or "cpu" (numpy on the CPU), "auto" (a CUDA GPU where torch sees one), "cuda",
        "cuda:N" or a ``torch.device``: on a CUDA device the assignment GEMMs and the centroid
        updates run there (:mod:`embedscope.metrics.kmeans_device`; no bounds), with the same
        labels and centroids bit for bit.

    Returns
    -------
    dict with ``labels`` (N,), ``centroids`` (k, D) float32 (those the labels are nearest to),
    ``n_steps`` (assignment steps run), ``n_split`` (empty clusters split), ``converged``.
    """
    x32 = np.ascontiguousarray(x32, dtype=np.float32)
    n = x32.shape[0]
    dev = _kmeans_device(device)
    if dev is not None:
        if bounds:
            raise EmbedscopeError("k-means: bounds=True runs on the CPU (device='cpu'); on a GPU every step is one GEMM")
        from embedscope.metrics.kmeans_device import device_lloyd_kmeans

        return device_lloyd_kmeans(x32, k, niter=niter, seed=seed, init=init, dev=dev)
    if bounds is None:
        bounds = k >= 4096 and n >= 16384
    if init is None:
        C = np.ascontiguousarray(x32[faiss_random_init(n, k, seed)])
    else:
        C = np.ascontiguousarray(init, dtype=np.float32).copy()
    if k == n and init is None:  # faiss copies the rows (in order) and runs no iteration
        C = x32.copy()
        eng = _Assigner(x32, k, group_size, bounds=False)
        return {"labels": eng.assign(C), "centroids": C, "n_steps": 1, "n_split": 0, "converged": True}
    eng = _Assigner(x32, k, group_size, bounds)
    lab, C, n_split, converged = lloyd_steps(eng.assign, lambda lab: update_centroids(x32, lab, k), C, niter)
    return {"labels": lab, "centroids": C, "n_steps": len(eng.stats), "n_split": n_split,
            "converged": converged, "stats": eng.stats, "moved": eng.stats_moved}


def lloyd_steps(assign, update, C, niter: int):
    """Lloyd's iterations as faiss runs them: ``niter`` times an assignment and an update (the
    update also splits empty clusters), stopping at a fixed point (the assignment unchanged), then
    the final assignment to the last centroids where it did not stop. ``assign(C) -> labels``
    (numpy), ``update(labels) -> (C, splits)``. Returns (labels, centroids, splits, converged)."""
    prev = None
    n_split = 0
    for _ in range(niter):
        lab = assign(C)
        if prev is not None and np.array_equal(lab, prev):
            return lab, C, n_split, True
        C, ns = update(lab)
        n_split += ns
        prev = lab
    return assign(C), C, n_split, False
