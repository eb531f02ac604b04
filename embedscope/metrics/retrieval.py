"""Retrieval metrics R@k, P@1, R-Precision, MAP@R, mAP@C, mAP@1000 and clustering NMI / F1
(METHODS.md §1), exact and in one blocked kNN pass.

Every retrieval metric of §1 depends on a query's ranked list only through the **ranks of its
relevant references** (those sharing its label) within a depth: with the relevant ranks sorted,
r_(1) < r_(2) < …, the m-th relevant item sits at rank r_(m) and P_i(r_(m)) = m / r_(m). So the
pass computes, per query, the exact rank of each relevant reference if it lies within
``depth = max(max k, max C_i, 1000 when mAP@1000 is asked)``, and nothing else:

- **CPU, at least 16,000 references** (SOP scale): one tiled float32 GEMM pass that *counts*,
  for each relevant pair, the references scoring above it, keeping per query only the
  references above a floor key estimated from a sample (about 2,000), never a top-depth list;
  a same-set cosine search multiplies each pair of query blocks once and reads the tile both
  ways (:mod:`embedscope.metrics.rankcount`).
- **Otherwise** (small sets, CUDA): float32 GEMM blocks with top-(depth + 16) float32 candidates
  per query (:func:`embedscope.metrics.knn.candidate_blocks`: faiss flat search on the CPU, torch
  GEMM blocks + ``torch.topk`` on CUDA); each relevant pair's float64 key; its rank = 1 +
  (candidates whose float32 key exceeds it by more than the float32 error bound) + (candidates
  within the bound that are exactly before it in float64, lower index first on ties).

Either way a pair whose rank cannot be certified from the float32 values (dense near-ties, or a
floor estimate that came out too high) is resolved from its query's full row.

The result equals the ranking of a float64 distance matrix with ties broken by the lower
reference index (METHODS.md §1, "Ties").
"""

from __future__ import annotations

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.validation import check_matrix
from embedscope.metrics.knn import (
    KeySpace,
    candidate_blocks,
    check_metric,
    pair_keys64,
    prepare,
    SLACK,
)

__all__ = ["retrieval_metrics", "RETRIEVAL_KEYS", "ALL_KEYS"]

RETRIEVAL_KEYS = ("P@1", "R-Precision", "MAP@R", "mAP@C", "mAP@1000")
CLUSTER_KEYS = ("NMI", "F1")
ALL_KEYS = ("R@k",) + RETRIEVAL_KEYS + CLUSTER_KEYS
MAP_DEPTH = 1000
_PAIRS_PER_CHUNK = 1 << 20


def _labels(y, n: int, name: str) -> np.ndarray:
    a = np.asarray(y)
    if a.ndim != 1 or a.shape[0] != n:
        raise EmbedscopeError(f"{name} must be 1-D with {n} entries (one per row), got shape {a.shape}")
    if np.issubdtype(a.dtype, np.integer):
        return a.astype(np.int64)
    if np.issubdtype(a.dtype, np.floating):
        if not np.all(np.isfinite(a)) or np.any(a != np.round(a)):
            raise EmbedscopeError(f"{name} must be integer class labels")
        return a.astype(np.int64)
    # strings or other hashables: encode
    try:
        return np.unique(a, return_inverse=True)[1].reshape(-1).astype(np.int64)
    except TypeError:
        raise EmbedscopeError(f"{name} must hold class labels (integers or strings)") from None


def _check_ks(ks) -> tuple[int, ...]:
    try:
        ks = tuple(ks)
    except TypeError:
        ks = (ks,)
    if not ks:
        raise EmbedscopeError("ks must name at least one k")
    out = []
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise EmbedscopeError(f"every k in ks must be a positive integer, got {k!r}")
        out.append(int(k))
    return tuple(dict.fromkeys(out))


def _resolve(vals: np.ndarray, cand: np.ndarray, row: np.ndarray, ref: np.ndarray, k64: np.ndarray,
             delta: np.ndarray, complete: np.ndarray, depth: int, qglob: np.ndarray, ks: KeySpace):
    """Exact ranks (float; inf beyond ``depth``) of pairs (query row[p], reference ref[p]).

    ``vals``/``cand``: per block row, float32 keys (descending) and indices of the candidates.
    Returns (rank, unresolved mask).
    """
    import torch

    P = row.size
    rank = np.full(P, np.inf)
    if P == 0:
        return rank, np.zeros(0, dtype=bool)
    # per-row searchsorted (ascending = minus the descending keys), padded to a matrix
    order = np.argsort(row, kind="stable")
    row_s = row[order]
    first = np.searchsorted(row_s, np.arange(vals.shape[0]))
    slot = np.arange(P) - first[row_s]
    m = int(slot.max()) + 1
    hi_t = np.full((vals.shape[0], m), np.inf)
    lo_t = np.full((vals.shape[0], m), np.inf)
    d = delta[row_s]
    hi_t[row_s, slot] = -(k64[order] + d)  # key32 > k64 + d  <=>  -key32 < -(k64 + d)
    lo_t[row_s, slot] = -(k64[order] - d)  # key32 >= k64 - d <=>  -key32 <= -(k64 - d)
    asc = torch.from_numpy(np.ascontiguousarray(-vals))
    n_sure = torch.searchsorted(asc, torch.from_numpy(hi_t), right=False).numpy()[row_s, slot]
    n_win = torch.searchsorted(asc, torch.from_numpy(lo_t), right=True).numpy()[row_s, slot]
    lo = np.empty(P, dtype=np.int64)
    hi = np.empty(P, dtype=np.int64)
    lo[order], hi[order] = n_sure, n_win
    # the ambiguous window [lo, hi): exact float64 comparison, lower index first on ties
    cnt = hi - lo
    amb_before = np.zeros(P, dtype=np.int64)
    tot = int(cnt.sum())
    if tot:
        rep = np.repeat(np.arange(P), cnt)
        pos = lo[rep] + (np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        r = cand[row[rep], pos]
        other = r != ref[rep]
        rep, r = rep[other], r[other]
        kr = pair_keys64(ks.Q64, ks.R64, qglob[row[rep]], r, ks.metric)
        before = (kr > k64[rep]) | ((kr == k64[rep]) & (r < ref[rep]))
        amb_before = np.bincount(rep[before], minlength=P)
    exact = complete[row] | (vals[row, -1] + delta[row] < k64)
    rank[exact] = 1 + lo[exact] + amb_before[exact]
    beyond = ~exact & (lo >= depth)
    unresolved = ~exact & ~beyond
    rank[rank > depth] = np.inf
    return rank, unresolved


def _relevant_pairs(qlab: np.ndarray, s: int, e: int, ref_order: np.ndarray, cls_start: dict | np.ndarray,
                    q_cls: np.ndarray, same: bool):
    """(query, reference) pairs of equal label for queries s..e-1 (the query itself excluded)."""
    qc = q_cls[s:e]
    starts, ends = cls_start
    cnt = np.where(qc >= 0, ends[np.maximum(qc, 0)] - starts[np.maximum(qc, 0)], 0)
    tot = int(cnt.sum())
    qi = np.repeat(np.arange(s, e), cnt)
    off = np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    rj = ref_order[starts[np.repeat(np.maximum(qc, 0), cnt)] + off]
    if same:
        keep = rj != qi
        qi, rj = qi[keep], rj[keep]
    return qi, rj


def retrieval_metrics(X, y, *, ks=(1, 2, 4, 8), metric: str = "cosine", X_ref=None, y_ref=None,
                      include=None, device="auto", seed: int = 0, per_query: bool = False,
                      block: int | None = None, progress: bool = False, niter: int = 20) -> dict:
    """Retrieval and clustering metrics of an embedding, exact, from one blocked kNN pass.

    Definitions (METHODS.md §1; Roth et al., *Revisiting Training Strategies and Generalization
    Performance in Deep Metric Learning*, ICML 2020; Musgrave et al., *A Metric Learning Reality
    Check*, ECCV 2020). For query i with ranked reference labels ℓ_i(1), ℓ_i(2), …,
    rel_i(k) = [ℓ_i(k) = y_i], R_i = number of references labelled y_i (the query excluded),
    P_i(k) = Σ_{j≤k} rel_i(j) / k:

    - ``"R@k"`` = mean_i [∃ j ≤ k: rel_i(j)] (Roth Eq. 26; a hit rate), one key per k in ``ks``;
    - ``"P@1"`` = mean_i rel_i(1) (Musgrave);
    - ``"R-Precision"`` = mean_i Σ_{k≤R_i} rel_i(k) / R_i (Musgrave);
    - ``"MAP@R"`` = mean_i (1/R_i) Σ_{k≤R_i} P_i(k) rel_i(k) (Musgrave; pytorch-metric-learning's
      ``mean_average_precision_at_r``);
    - ``"mAP@C"`` = mean_i (1/C_i) Σ_{k≤C_i} P_i(k) rel_i(k), C_i = R_i + 1 = the class size
      *including* the query (Roth's code ``mAP_c``; its maximum is (C_i − 1)/C_i);
    - ``"mAP@1000"`` = mean_i (1/C_i) Σ_{k≤min(1000, N_ref)} P_i(k) rel_i(k) (Roth's ``mAP_1000``;
      N_ref = references available to a query);
    - ``"NMI"``, ``"F1"``: k-means of the query embeddings with as many clusters as query classes
      (see :func:`embedscope.metrics.clustering.kmeans_nmi_f1`).

    Ranking: cosine (rows L2-normalised, by inner product) or Euclidean distance; ties go to the
    lower reference index. Queries with R_i = 0 ("lone") are left out of every retrieval metric,
    as pytorch-metric-learning's ``AccuracyCalculator`` does.

    Parameters
    ----------
    X : array (N, D)
        Query embeddings (and the reference set when ``X_ref`` is None: each query is then
        excluded from its own neighbours).
    y : array (N,)
        Class labels of ``X`` (integers or strings).
    ks : sequence of int
        The k of the ``"R@k"`` keys.
    metric : {"cosine", "euclidean"}
    X_ref, y_ref : arrays, optional
        A separate reference set (nothing excluded); give both or neither.
    include : sequence of str, optional
        Keys to compute (e.g. ``["R@1", "MAP@R"]``); default all. NMI/F1 (k-means) and mAP@1000
        (a depth-1000 search) cost the most.
    device : "auto" | "cpu" | "cuda"
    seed : int
        k-means seed.
    per_query : bool
        Also return ``"per_query"``: a dict of arrays of length N with ``"R@1"``,
        ``"R-Precision"`` and ``"MAP@R"`` per query (NaN for lone queries).
    block : int, optional
        Queries per GEMM block.
    progress : bool
        Show progress bars.
    niter : int
        k-means iterations (default 20, as Roth's code).

    Returns
    -------
    dict
        The requested metric keys (floats in [0, 1]) in the order R@k…, P@1, R-Precision, MAP@R,
        mAP@C, mAP@1000, NMI, F1, followed by ``"n_queries"`` (N), ``"n_lone"`` (queries left
        out), ``"n_evaluated"`` (N − n_lone) and ``"depth"`` (the ranks searched per query; 0 when
        only NMI/F1 were asked), and ``"per_query"`` when asked.
    """
    check_metric(metric)
    ks_ = _check_ks(ks)
    X64 = check_matrix(X, "X", dtype=np.float64)
    ylab = _labels(y, X64.shape[0], "y")
    if (X_ref is None) != (y_ref is None):
        raise EmbedscopeError("give both X_ref and y_ref for a separate reference set, or neither")
    same = X_ref is None
    if same:
        R64raw, yref = X64, ylab
    else:
        R64raw = check_matrix(X_ref, "X_ref", dtype=np.float64)
        if R64raw.shape[1] != X64.shape[1]:
            raise EmbedscopeError(f"X and X_ref differ in dimension: {X64.shape[1]} vs {R64raw.shape[1]}")
        yref = _labels(y_ref, R64raw.shape[0], "y_ref")
        if not (np.issubdtype(np.asarray(y).dtype, np.number) and np.issubdtype(np.asarray(y_ref).dtype, np.number)):
            # string labels: encode jointly so equal names match
            both = np.concatenate([np.asarray(y).astype(str), np.asarray(y_ref).astype(str)])
            enc = np.unique(both, return_inverse=True)[1].reshape(-1)
            ylab, yref = enc[:X64.shape[0]], enc[X64.shape[0]:]
    if len(np.unique(ylab)) < 2:
        raise EmbedscopeError("y needs at least 2 classes")
    if not same and len(np.unique(yref)) < 2:
        raise EmbedscopeError("y_ref needs at least 2 classes")
    n_avail = R64raw.shape[0] - (1 if same else 0)
    if n_avail < 1:
        raise EmbedscopeError("need at least 2 rows to retrieve anything")

    all_keys = [f"R@{k}" for k in ks_] + list(RETRIEVAL_KEYS) + list(CLUSTER_KEYS)
    if include is None:
        want = all_keys
    else:
        inc = [include] if isinstance(include, str) else list(include)
        bad = [k for k in inc if k not in all_keys]
        if bad:
            raise EmbedscopeError(f"unknown metric(s) {', '.join(map(str, bad))} in include "
                                  f"(choose from {', '.join(all_keys)})")
        if not inc:
            raise EmbedscopeError("include names no metric")
        want = [k for k in all_keys if k in inc]
    want_ret = [k for k in want if k not in CLUSTER_KEYS]

    out: dict = {}
    X64 = prepare(X64, metric, "X")
    R64 = X64 if same else prepare(R64raw, metric, "X_ref")

    # class layout of the references
    ref_order = np.argsort(yref, kind="stable")
    ycls, cstart, ccount = np.unique(yref[ref_order], return_index=True, return_counts=True)
    pos = np.searchsorted(ycls, ylab)
    pos_c = np.minimum(pos, len(ycls) - 1)
    q_cls = np.where(ycls[pos_c] == ylab, pos_c, -1)
    R_i = np.where(q_cls >= 0, ccount[np.maximum(q_cls, 0)], 0) - (1 if same else 0)
    lone = R_i <= 0
    n_lone = int(lone.sum())
    nq = X64.shape[0]

    depth = 0
    if want_ret:
        if n_lone == nq:
            raise EmbedscopeError("no query has another member of its class among the references: "
                                  "retrieval metrics are undefined")
        needs = [k for k in ks_ if f"R@{k}" in want]
        if "P@1" in want:
            needs.append(1)
        if "R-Precision" in want or "MAP@R" in want:
            needs.append(int(R_i.max()))
        if "mAP@C" in want:
            needs.append(int(R_i.max()) + 1)
        if "mAP@1000" in want:
            needs.append(MAP_DEPTH)
        depth = int(min(max(needs), n_avail))
        ranks = _relevant_ranks(X64, R64, ylab, metric, same, depth, ref_order,
                                (cstart, cstart + ccount), q_cls, device, block, progress)
        out.update(_metrics_from_ranks(ranks, R_i, lone, ks_, want, n_avail, per_query))

    if any(k in want for k in CLUSTER_KEYS):
        from embedscope.metrics.clustering import kmeans_nmi_f1

        cl = kmeans_nmi_f1(X64, ylab, seed=seed, niter=niter, metric=metric)
        for k in CLUSTER_KEYS:
            if k in want:
                out[k] = cl[k]
    result = {k: out[k] for k in want}
    result.update(n_queries=nq, n_lone=n_lone, n_evaluated=nq - n_lone, depth=depth)
    if per_query and "per_query" in out:
        result["per_query"] = out["per_query"]
    return result


COUNT_MIN_REFS = 16_000  # CPU searches count (rankcount.py) from this many references on
COUNT_MIN_RATIO = 16  # ... when they also outnumber the floor depth this many times
SHALLOW_FLOOR = (256, 16.0)  # top-K keys only: floor keys at depth 256 from a 16/256 sample
DEEP_SAMPLE_TOP = 32.0  # mAP@1000: floor keys at the depth itself from a 32/depth sample


def _counting_plan(device, depth: int, n_avail: int):
    """(floor depth, sample_top) of the counting pass, or None for the candidate-list path (small
    reference sets, CUDA). Measured in docs/PERFORMANCE.md."""
    from embedscope.device import resolve_device

    dev = resolve_device(device) if not hasattr(device, "type") else device
    floor_depth, sample_top = (depth, DEEP_SAMPLE_TOP) if depth >= 1000 else (max(depth, SHALLOW_FLOOR[0]), SHALLOW_FLOOR[1])
    if dev.type != "cpu" or n_avail < COUNT_MIN_REFS or n_avail < COUNT_MIN_RATIO * floor_depth:
        return None
    return floor_depth, sample_top


def _relevant_ranks(X64, R64, ylab, metric, same, depth, ref_order, cls_bounds, q_cls, device, block,
                    progress):
    """Per relevant pair (query, reference): exact rank (inf when beyond ``depth``).

    Large searches on the CPU count the references above each relevant pair in one tiled GEMM
    pass (:mod:`embedscope.metrics.rankcount`); small ones and CUDA keep top-(depth + 16) float32
    candidate lists and certify them in float64."""
    ks = KeySpace(X64, R64, metric, same)
    n_avail = R64.shape[0] - (1 if same else 0)
    plan = _counting_plan(device, depth, n_avail)
    if plan is not None:
        from embedscope.metrics.rankcount import relevant_ranks_by_count

        qi, rj = _relevant_pairs(ylab, 0, X64.shape[0], ref_order, cls_bounds, q_cls, same)
        k64 = pair_keys64(ks.Q64, ks.R64, qi, rj, metric)
        rank, unresolved = relevant_ranks_by_count(ks, qi, rj, k64, depth, progress=progress, block=block,
                                                    floor_depth=plan[0], sample_top=plan[1])
        _full_row_fallback(ks, qi, rj, k64, rank, unresolved, depth)
        return qi, rank
    L = min(depth + SLACK, n_avail)
    all_q, all_r, all_rank = [], [], []
    for s, e, vals, cand in candidate_blocks(ks, L, device=device, block=block, progress=progress,
                                             desc="retrieval"):
        complete = np.full(e - s, vals.shape[1] >= n_avail)
        qi, rj = _relevant_pairs(ylab, s, e, ref_order, cls_bounds, q_cls, same)
        k64 = pair_keys64(ks.Q64, ks.R64, qi, rj, metric)
        rank = np.empty(qi.size)
        unresolved = np.zeros(qi.size, dtype=bool)
        # chunk by pairs, on query boundaries (pairs are grouped by query)
        bounds = np.searchsorted(qi, np.arange(s, e + 1))
        c0 = 0
        while c0 < e - s:
            c1 = int(np.searchsorted(bounds, bounds[c0] + _PAIRS_PER_CHUNK, side="right")) - 1
            c1 = max(c1, c0 + 1)
            p0, p1 = bounds[c0], bounds[c1]
            rk, un = _resolve(vals[c0:c1], cand[c0:c1], qi[p0:p1] - s - c0, rj[p0:p1], k64[p0:p1],
                              ks.delta[s + c0:s + c1], complete[c0:c1], depth, np.arange(s + c0, s + c1), ks)
            rank[p0:p1], unresolved[p0:p1] = rk, un
            c0 = c1
        _full_row_fallback(ks, qi, rj, k64, rank, unresolved, depth)
        all_q.append(qi)
        all_r.append(rj)
        all_rank.append(rank)
    return np.concatenate(all_q), np.concatenate(all_rank)


def _full_row_fallback(ks, qi, rj, k64, rank, unresolved, depth):
    """Rank the rare uncertified pairs from their query's full row (in place)."""
    for q in np.unique(qi[unresolved]):
        row = ks.row_keys32(int(q))
        o = np.argsort(-row, kind="stable")
        sel = np.flatnonzero(qi == q)
        rk, _ = _resolve(row[o][None, :], o[None, :], np.zeros(sel.size, dtype=np.int64), rj[sel],
                         k64[sel], ks.delta[q:q + 1], np.ones(1, dtype=bool), depth,
                         np.array([q]), ks)
        rank[sel] = rk


def _metrics_from_ranks(ranks, R_i, lone, ks_, want, n_avail, per_query):
    qi, rank = ranks
    nq = R_i.size
    order = np.lexsort((rank, qi))
    qi, rank = qi[order], rank[order]
    start = np.searchsorted(qi, np.arange(nq))
    m = (np.arange(qi.size) - start[qi] + 1).astype(np.float64)  # position among the relevant
    Ri = R_i[qi].astype(np.float64)
    Ci = Ri + 1.0
    fin = np.isfinite(rank)
    prec = np.where(fin, m / np.where(fin, rank, 1.0), 0.0)
    ev = ~lone
    n_ev = int(ev.sum())
    minrank = np.full(nq, np.inf)
    np.minimum.at(minrank, qi, rank)

    def mean(per_q):
        return float(per_q[ev].sum() / n_ev)

    def qsum(w):
        return np.bincount(qi, weights=w, minlength=nq)

    out: dict = {}
    for k in ks_:
        if f"R@{k}" in want:
            out[f"R@{k}"] = mean((minrank <= k).astype(np.float64))
    safe_R = np.maximum(R_i, 1).astype(np.float64)
    p1 = (minrank <= 1).astype(np.float64)
    rp = qsum((rank <= Ri).astype(np.float64)) / safe_R
    mapr = qsum(np.where(rank <= Ri, prec, 0.0)) / safe_R
    if "P@1" in want:
        out["P@1"] = mean(p1)
    if "R-Precision" in want:
        out["R-Precision"] = mean(rp)
    if "MAP@R" in want:
        out["MAP@R"] = mean(mapr)
    if "mAP@C" in want:
        out["mAP@C"] = mean(qsum(np.where(rank <= Ci, prec, 0.0)) / (safe_R + 1.0))
    if "mAP@1000" in want:
        d = min(MAP_DEPTH, n_avail)
        out["mAP@1000"] = mean(qsum(np.where(rank <= d, prec, 0.0)) / (safe_R + 1.0))
    if per_query:
        nan = np.where(ev, 1.0, np.nan)
        out["per_query"] = {"R@1": p1 * nan, "R-Precision": rp * nan, "MAP@R": mapr * nan}
    return out
