"""Retrieval metrics R@k, P@1, R-Precision, MAP@R, mAP@C, mAP@1000, mAP@lim and clustering
NMI / F1 (docs/methods.md §1), exact, from one search.

Every retrieval measure of §1 reads a query's ranked list only through the exact ranks of its
relevant references, which :func:`embedscope.metrics.search.relevant_ranks` computes once (the
rank engine and its exactness argument live in :mod:`embedscope.metrics.search`). Each measure is
one small function of that :class:`~embedscope.metrics.search.RelevantRanks`, returning one value
per query (higher is better for all of them); :func:`retrieval_metrics` validates the input,
computes the ranks to the depth the asked measures need, and averages.

Lone queries (R_i = 0, nothing to retrieve): ``lone_queries="exclude"`` (default, as
pytorch-metric-learning's ``AccuracyCalculator``) leaves them out of every mean;
``lone_queries="zero"`` averages over all queries, a lone query scoring 0 (Roth et al.'s
reference code).
"""

from __future__ import annotations

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.metrics.search.knn import KeySpace, _bar, check_metric, topk_exact
from embedscope.metrics.search.ranks import RelevantRanks, Sets, check_sets, compute_relevant_ranks, relevant_counts
from embedscope.validation import check_bool, check_int

__all__ = ["retrieval_metrics", "RETRIEVAL_KEYS", "ALL_KEYS", "r_at_k", "precision_at_1", "r_precision",
           "map_at_r", "map_at_c", "map_at_1000", "map_at_lim"]

RETRIEVAL_KEYS = ("P@1", "R-Precision", "MAP@R", "mAP@C", "mAP@1000", "mAP@lim")
CLUSTER_KEYS = ("NMI", "F1")
ALL_KEYS = ("R@k",) + RETRIEVAL_KEYS + CLUSTER_KEYS
OPT_IN_KEYS = ("mAP@lim",)  # computed only when named in ``include`` (the default set predates it)
DEFAULT_KS = (1, 2, 4, 8)  # the R@k of ks=None (those within the references available)
MAP_DEPTH = 1000
MAP_LIM_DEPTH = 1023  # faiss's largest k on the GPU, Roth's mAP_lim
LONE_QUERIES = ("exclude", "zero")
#: relevant (query, reference) pairs ranked at a time: a search with more (classes of thousands,
#: Σ R_i growing like N² / C) runs over blocks of queries holding at most this many each
#: (:func:`_ranks_by_query_blocks`); below it, one search of every query as before. 2^24 pairs
#: peak at about 1 GB (~55 bytes a pair measured, 10 classes: 0.68 GB at 10,000 rows, one search);
#: 2^23 split a 10-class 10,000-row set in two blocks, 18% slower (10.8 -> 12.8 s)
PAIRS_PER_BLOCK = 1 << 24
#: ... and a search with more goes in blocks of at most this many (at most PAIRS_PER_BLOCK): faster than
#: blocks of 2^24 with the compact ranks of classes of hundreds (thirteenth session, docs/PERFORMANCE.md:
#: 10,000 x 4 classes 3.4-3.5 -> 2.2-2.4 s, 20,000 x 10 5.0-5.3 -> 4.2-4.6 s), and less memory
PAIRS_PER_SPLIT_BLOCK = 1 << 22
#: R@k / P@1 alone with k up to this: each query's exact top k (:func:`~.search.knn.topk_exact`) instead
#: of the ranks of all its relevant pairs, when k is 1 or the relevant sets hold on average at least
#: ``KNN_MIN_R_PER_K`` x k references (10 classes of 1,000: R@1 0.66 -> 0.11 s; SOP-like sets, mean
#: R_i ~4, keep the ranks for R@8, measured in docs/PERFORMANCE.md, thirteenth session)
KNN_MAX_K = 8
KNN_MIN_R_PER_K = 4.0


# ----------------------------------------------------------------------------- measures
# Each takes the exact relevant ranks and returns one float64 value per query (0 for lone
# queries); the depth each needs is in _DEPTH below.
def r_at_k(rr: RelevantRanks, k: int) -> np.ndarray:
    """R@k (Roth Eq. 26; a hit rate, not a recall): [∃ j ≤ k: rel_i(j)] (docs/methods.md §1)."""
    return (rr.first_rank() <= k).astype(np.float64)


def precision_at_1(rr: RelevantRanks) -> np.ndarray:
    """P@1 (Musgrave): rel_i(1) (docs/methods.md §1)."""
    return r_at_k(rr, 1)


def r_precision(rr: RelevantRanks) -> np.ndarray:
    """R-Precision (Musgrave): Σ_{k≤R_i} rel_i(k) / R_i (docs/methods.md §1)."""
    return rr.hits(rr.R) / np.maximum(rr.R, 1).astype(np.float64)


def map_at_r(rr: RelevantRanks) -> np.ndarray:
    """MAP@R (Musgrave; PML's ``mean_average_precision_at_r``): (1/R_i) Σ_{k≤R_i} P_i(k) rel_i(k),
    P_i(k) = Σ_{j≤k} rel_i(j) / k; the denominator is R_i, not the hits (docs/methods.md §1)."""
    return rr.precision_sum(rr.R) / np.maximum(rr.R, 1).astype(np.float64)


def map_at_c(rr: RelevantRanks) -> np.ndarray:
    """mAP@C (Roth's ``mAP_c``): (1/C_i) Σ_{k≤C_i} P_i(k) rel_i(k), C_i = R_i + 1 the class size
    including the query; its maximum is (C_i − 1)/C_i (docs/methods.md §1)."""
    C = np.maximum(rr.R, 1).astype(np.float64) + 1.0
    return rr.precision_sum(rr.R + 1) / C


def _map_at_depth(rr: RelevantRanks, depth: int) -> np.ndarray:
    C = np.maximum(rr.R, 1).astype(np.float64) + 1.0
    return rr.precision_sum(min(depth, rr.n_avail)) / C


def map_at_1000(rr: RelevantRanks) -> np.ndarray:
    """mAP@1000 (Roth's ``mAP_1000``): (1/C_i) Σ_{k≤min(1000, N_ref)} P_i(k) rel_i(k), N_ref the
    references available to a query (docs/methods.md §1). Where fewer than 1000 references exist, Roth's
    code reads faiss's −1 padding as the last row's label and can count it as a hit (per-query
    "AP" up to about 4); here those slots do not exist, i.e. they count as misses, so the value
    stays an average precision in [0, 1)."""
    return _map_at_depth(rr, MAP_DEPTH)


def map_at_lim(rr: RelevantRanks) -> np.ndarray:
    """mAP@lim (Roth's ``mAP_lim``, in its default metric list): as mAP@1000 with depth
    min(1023, N_ref) (faiss's GPU limit), normalised by C_i (docs/methods.md §1); missing slots of a
    short list count as misses (see :func:`map_at_1000`)."""
    return _map_at_depth(rr, MAP_LIM_DEPTH)


_MEASURES = {
    "P@1": precision_at_1,
    "R-Precision": r_precision,
    "MAP@R": map_at_r,
    "mAP@C": map_at_c,
    "mAP@1000": map_at_1000,
    "mAP@lim": map_at_lim,
}
# the depth each measure needs per query, from R_i
_DEPTH = {
    "P@1": lambda R: 1,
    "R-Precision": lambda R: R,
    "MAP@R": lambda R: R,
    "mAP@C": lambda R: R + 1,
    "mAP@1000": lambda R: MAP_DEPTH,
    "mAP@lim": lambda R: MAP_LIM_DEPTH,
}


# ----------------------------------------------------------------------------- validation
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
    return tuple(sorted(set(out)))  # R@1, R@4, R@8 whatever order they were asked in, each once


def _wanted(include, all_keys: list, default: list) -> list:
    if include is None:
        return default
    if not isinstance(include, str) and (isinstance(include, dict) or not hasattr(include, "__iter__")):
        raise EmbedscopeError(f"include must be a metric name or a list of them, got {type(include).__name__}")
    inc = [include] if isinstance(include, str) else list(include)
    if "R@k" in inc:  # every R@k of ks (the default ks: those within the references available)
        inc = [k for k in inc if k != "R@k"] + [k for k in all_keys if k.startswith("R@")]
    bad = [k for k in inc if k not in all_keys]
    if bad:
        raise EmbedscopeError(f"unknown metric(s) {', '.join(map(str, bad))} in include "
                              f"(choose from {', '.join(all_keys)})")
    if not inc:
        raise EmbedscopeError("include names no metric")
    return [k for k in all_keys if k in inc]


# ----------------------------------------------------------------------------- the front door
def retrieval_metrics(X, y, *, ks=None, metric: str = "cosine", X_ref=None, y_ref=None,
                      include=None, device="auto", seed: int = 1234, per_query: bool = False,
                      block: int | None = None, progress: bool = False, niter: int = 20,
                      lone_queries: str = "exclude") -> dict:
    """Retrieval and clustering metrics of an embedding, exact, from one search.

    Definitions (docs/methods.md §1; Roth et al., *Revisiting Training Strategies and Generalization
    Performance in Deep Metric Learning*, ICML 2020; Musgrave et al., *A Metric Learning Reality
    Check*, ECCV 2020). For query i with ranked reference labels ℓ_i(1), ℓ_i(2), …,
    rel_i(k) = [ℓ_i(k) = y_i], R_i = number of references labelled y_i (the query excluded),
    P_i(k) = Σ_{j≤k} rel_i(j) / k (all: higher is better):

    - ``"R@k"`` = mean_i [∃ j ≤ k: rel_i(j)] (Roth Eq. 26; a hit rate), one key per k in ``ks``, in
      ascending k (each once, whatever order ``ks`` gives);
    - ``"P@1"`` = mean_i rel_i(1) (Musgrave);
    - ``"R-Precision"`` = mean_i Σ_{k≤R_i} rel_i(k) / R_i (Musgrave);
    - ``"MAP@R"`` = mean_i (1/R_i) Σ_{k≤R_i} P_i(k) rel_i(k) (Musgrave; pytorch-metric-learning's
      ``mean_average_precision_at_r``);
    - ``"mAP@C"`` = mean_i (1/C_i) Σ_{k≤C_i} P_i(k) rel_i(k), C_i = R_i + 1 = the class size
      *including* the query (Roth's code ``mAP_c``; its maximum is (C_i − 1)/C_i);
    - ``"mAP@1000"`` = mean_i (1/C_i) Σ_{k≤min(1000, N_ref)} P_i(k) rel_i(k) (Roth's ``mAP_1000``;
      N_ref = references available to a query; slots beyond N_ref, which Roth's code fills with
      faiss's −1 padding and may count as hits, count as misses here);
    - ``"mAP@lim"`` = the same with depth min(1023, N_ref) (Roth's ``mAP_lim``);
    - ``"NMI"``, ``"F1"``: k-means of the query embeddings with as many clusters as query classes
      (see :func:`embedscope.metrics.clustering.kmeans_nmi_f1`).

    Ranking: cosine (rows L2-normalised, by inner product) or Euclidean distance; ties go to the
    lower reference index (:func:`embedscope.metrics.search.relevant_ranks`).

    Classes: a same-set search needs two or more classes (with one, every reference is relevant
    and each metric reads 1.0: an error), and so does a separate reference set; queries of a
    single class against a separate reference set are ranked as any others, but NMI/F1, which
    cluster the queries, then cannot be asked for.

    Parameters
    ----------
    X : array (N, D)
        Query embeddings (and the reference set when ``X_ref`` is None: each query is then
        excluded from its own neighbours).
    y : array (N,)
        Class labels of ``X`` (integers or strings).
    ks : sequence of int, optional
        The k of the ``"R@k"`` keys. Each R@k asked for needs k ≤ the references available to a
        query (N − 1, or N_ref with a separate reference set), else an error (as
        :func:`knn_search`: beyond the list, R@k would read 1.0 for every query). Default: 1, 2,
        4, 8, those of them within the references available (R@8 needs 9 rows in a same-set
        search).
    metric : {"cosine", "euclidean"}
    X_ref, y_ref : arrays, optional
        A separate reference set (nothing excluded); give both or neither.
    include : sequence of str, optional
        Keys to compute (e.g. ``["R@1", "MAP@R"]``; ``"R@k"``: every R@k of ``ks``); default all but
        ``"mAP@lim"`` (which is computed only when named). NMI/F1 (k-means) and mAP@1000 / mAP@lim (a depth-1000
        search) cost the most.
    device : "auto" | "cpu" | "cuda"
        Where the float32 GEMMs of the searches and of k-means (NMI/F1) run; the values are the
        same on every device.
    seed : int
        k-means seed (default 1234, faiss's default, as Roth's code and pytorch-metric-learning).
    per_query : bool
        Also return ``"per_query"``: a dict of arrays of length N with ``"R@1"``,
        ``"R-Precision"`` and ``"MAP@R"`` per query (NaN for lone queries).
    block : int, optional
        Queries per GEMM block.
    progress : bool
        Show progress bars.
    niter : int
        k-means iterations (default 20, as Roth's code).
    lone_queries : {"exclude", "zero"}
        Queries with R_i = 0: left out of every retrieval mean (``"exclude"``, as PML's
        ``AccuracyCalculator``) or counted with score 0 (``"zero"``, as Roth's reference code,
        which averages over all N queries).

    Returns
    -------
    dict
        The requested metric keys (floats in [0, 1]) in the order R@k…, P@1, R-Precision, MAP@R,
        mAP@C, mAP@1000, mAP@lim, NMI, F1, followed by ``"n_queries"`` (N), ``"n_lone"`` (queries
        with R_i = 0), ``"n_evaluated"`` (queries in the retrieval means: N − n_lone, or N with
        ``lone_queries="zero"``), ``"lone_queries"`` (the policy) and ``"depth"`` (the ranks
        searched per query; 0 when only NMI/F1 were asked), and ``"per_query"`` when asked.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [1.0], [3.0], [4.0], [9.0]]); y = np.array([0, 0, 1, 1, 2])
    >>> r = retrieval_metrics(X, y, metric="euclidean", include=["P@1", "MAP@R"])
    >>> r["P@1"], r["n_lone"], r["n_evaluated"]
    (1.0, 1, 4)
    >>> retrieval_metrics(X, y, metric="euclidean", include=["P@1"], lone_queries="zero")["P@1"]
    0.8
    """
    per_query = check_bool(per_query, "per_query")
    check_metric(metric)
    ks_ = None if ks is None else _check_ks(ks)
    block = check_int(block, "block (queries per block)", allow_none=True)
    if lone_queries not in LONE_QUERIES:
        raise EmbedscopeError(f"lone_queries must be 'exclude' or 'zero', got {lone_queries!r}")
    sets = check_sets(X, y, X_ref, y_ref)
    one_query_class = len(np.unique(sets.y)) < 2
    if sets.same and one_query_class:  # every reference relevant: each metric would read 1.0
        raise EmbedscopeError("the query labels must hold at least 2 classes, got 1")
    if not sets.same and len(np.unique(sets.y_ref)) < 2:
        raise EmbedscopeError("the reference labels must hold at least 2 classes, got 1")
    n_avail = sets.n_avail
    if n_avail < 1:
        raise EmbedscopeError("need at least 2 rows to retrieve anything")
    if ks_ is None:
        ks_ = tuple(k for k in DEFAULT_KS if k <= n_avail)
    all_keys = [f"R@{k}" for k in ks_] + list(RETRIEVAL_KEYS) + list(CLUSTER_KEYS)
    want = _wanted(include, all_keys, [k for k in all_keys if k not in OPT_IN_KEYS])
    if one_query_class and any(k in want for k in CLUSTER_KEYS):  # (queries of one class against a
        # separate reference set are ranked as any others; only their clustering needs two classes)
        raise EmbedscopeError("NMI and F1 cluster the queries: their labels must hold at least 2 classes, "
                              "got 1 (leave them out of include= / --include)")
    want_ret = [k for k in want if k not in CLUSTER_KEYS]
    if per_query and not want_ret:  # (the per-query arrays are retrieval's R@1, R-Precision, MAP@R)
        raise EmbedscopeError("per_query=True gives per-query retrieval values (R@1, R-Precision, MAP@R): include "
                              "names only clustering metrics (NMI, F1), which have none")
    too_deep = [int(k[2:]) for k in want_ret if k.startswith("R@") and int(k[2:]) > n_avail]
    if too_deep:  # as knn_search: a list of n_avail references has no k-th entry (R@k would read 1.0)
        raise EmbedscopeError(f"R@{too_deep[0]}: k = {too_deep[0]} exceeds the {n_avail} references available "
                              f"to each query (ks must be at most {n_avail})")

    R = relevant_counts(sets)
    lone = R <= 0
    n_lone, nq = int(lone.sum()), R.size
    out: dict = {}
    depth = 0
    if want_ret and n_lone == nq:
        raise EmbedscopeError("no query has another member of its class among the references: "
                              "retrieval metrics are undefined")
    # on a GPU, k-means (NMI/F1) runs in a thread beside the ranks: its steps are mostly the GPU's,
    # the ranks' certification mostly the CPU's (the same values either way)
    beside = None
    if want_ret and any(k in want for k in CLUSTER_KEYS) and _kmeans_beside(device):
        from concurrent.futures import ThreadPoolExecutor

        sets.prepared(metric)  # (normalised once, here, before two threads read the rows)
        pool = ThreadPoolExecutor(1, thread_name_prefix="embedscope-beside")
        beside = pool.submit(_clusters, sets, metric, seed, niter, device)
        pool.shutdown(wait=False)  # (its thread ends with the task)
    try:
        if want_ret:
            needs = [int(k[2:]) if k.startswith("R@") else _DEPTH[k](R) for k in want_ret]
            if per_query:  # the per-query arrays hold R@1, R-Precision and MAP@R
                needs += [R, 1]
            # each query's ranks only as deep as its measures read (R_i for R-Precision and MAP@R)
            depth_q = np.minimum(np.max([np.broadcast_to(n, R.shape) for n in needs], axis=0), n_avail).clip(1)
            depth = int(depth_q.max())
            evaluated = ~lone if lone_queries == "exclude" else np.ones(nq, dtype=bool)
            n_ev = int(evaluated.sum())
            extra = {"R@1": lambda rr: r_at_k(rr, 1), "R-Precision": r_precision, "MAP@R": map_at_r} if per_query else {}
            cols: dict = {}
            top_only = all(k == "P@1" or k.startswith("R@") for k in want_ret) and not per_query
            if top_only and depth <= KNN_MAX_K and (depth == 1 or float(R.mean()) >= KNN_MIN_R_PER_K * depth):
                cols = _hits_in_top_k(sets, metric, want_ret, depth, device=device, block=block, progress=progress)
            for rr in ([] if cols else _ranks_by_query_blocks(sets, metric, R, depth_q, device=device, block=block,
                                                               progress=progress)):
                for key in want_ret:
                    cols.setdefault(key, []).append(r_at_k(rr, int(key[2:])) if key.startswith("R@") else _MEASURES[key](rr))
                for key, fn in extra.items():
                    if key not in want_ret:  # the per-query arrays hold R@1, R-Precision and MAP@R
                        cols.setdefault(key, []).append(fn(rr))
                del rr
            per_q = {k: np.concatenate(v) for k, v in cols.items()}
            for key in want_ret:
                out[key] = float(per_q[key][evaluated].sum() / n_ev)
            if per_query:
                nan = np.where(lone, np.nan, 1.0)
                out["per_query"] = {k: per_q[k] * nan for k in ("R@1", "R-Precision", "MAP@R")}
    except BaseException:
        if beside is not None:
            beside.exception()  # waited for (its result unused): nothing left running
        raise

    if any(k in want for k in CLUSTER_KEYS):
        cl = beside.result() if beside is not None else _clusters(sets, metric, seed, niter, device)
        for k in CLUSTER_KEYS:
            if k in want:
                out[k] = cl[k]
    result = {k: out[k] for k in want}
    n_evaluated = nq - n_lone if lone_queries == "exclude" else nq
    result.update(n_queries=nq, n_lone=n_lone, n_evaluated=n_evaluated, lone_queries=lone_queries, depth=depth)
    if per_query and "per_query" in out:
        result["per_query"] = out["per_query"]
    return result


def _clusters(sets: Sets, metric: str, seed: int, niter: int, device) -> dict:
    """NMI/F1 of the queries' k-means, on the rows the ranks used (normalised once: ``kmeans_nmi_f1``
    of the raw rows gives the same labels)."""
    from embedscope.metrics.clustering import kmeans_nmi_f1

    return kmeans_nmi_f1(sets.prepared(metric)[0], sets.y, seed=seed, niter=niter, metric=metric, prepared=True,
                         device=device)


def _kmeans_beside(device) -> bool:
    """k-means runs beside the ranks where its steps run on a GPU (on the CPU both want the same cores)."""
    from embedscope.device import compute_device

    return getattr(compute_device(device), "type", "cpu") == "cuda"


def _hits_in_top_k(sets: Sets, metric: str, keys: list, k: int, *, device, block, progress) -> dict:
    """Per key (R@j with j ≤ ``k``, P@1), one array of per-query values from each query's exact top
    ``k`` (:func:`~.search.knn.topk_exact`: float64-certified, ties to the lower index, the query
    itself excluded in a same-set search): R@j = [a reference of the query's label among its first
    j], P@1 = R@1. The same values as from the relevant ranks (rank of the first relevant ≤ j),
    without ranking every relevant pair (Σ R_i ~ N² / C with large classes)."""
    Q64, R64 = sets.prepared(metric)
    ks = KeySpace(Q64, R64, metric, sets.same)
    _, idx = topk_exact(ks, int(k), device=device, block=block, progress=progress)
    hit = sets.y_ref[idx] == sets.y[:, None]
    first = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1.0, np.inf)  # rank of the first relevant in the top k
    return {key: [(first <= (1 if key == "P@1" else int(key[2:]))).astype(np.float64)] for key in keys}


def _ranks_by_query_blocks(sets: Sets, metric: str, R: np.ndarray, depth_q: np.ndarray, *, device, block,
                           progress):
    """The exact relevant ranks of every query (each to its ``depth_q``), as one
    :class:`RelevantRanks` per block of consecutive queries, the blocks in query order.

    Σ R_i relevant pairs up to ``PAIRS_PER_BLOCK``: one search of all queries (one block). More
    (large classes: Σ R_i = Σ_c n_c² grows like N² / C): blocks of queries with at most
    ``PAIRS_PER_SPLIT_BLOCK`` pairs each (at least one query), each searched against every reference;
    in a same-set search the block's own rows stay among the references (a separate-set search:
    the same float64 keys of the same rows) and each query's own row, a reference of its own label,
    is then taken out of its list: the pairs ranked after it move up by one (its rank is exact,
    the order of the other references is unchanged), so the ranks are those of the same-set
    search of all queries, exactly. The per-query values of the measures are then the same.
    Memory: the pairs of one block, never Σ R_i at once."""
    def one_or_each(dq: np.ndarray):  # one depth for all queries where they agree (the usual search)
        d = int(dq.max())
        return d if np.all(dq == d) else dq

    if int(R.sum()) <= PAIRS_PER_BLOCK:
        yield compute_relevant_ranks(sets, metric, one_or_each(depth_q), device=device, block=block,
                                     progress=progress, compact=True)
        return
    Q64, R64 = sets.prepared(metric)
    n_ref = R64.shape[0]
    own = 1 if sets.same else 0
    cum = np.cumsum(R + own)
    from embedscope.progress import BarShare

    # one bar for the whole search (each block's pass advances it by the block's queries)
    bar = _bar(progress, R.size, "retrieval")
    try:
        s = 0
        while s < R.size:
            base = int(cum[s - 1]) if s else 0
            e = max(s + 1, int(np.searchsorted(cum, base + min(PAIRS_PER_BLOCK, PAIRS_PER_SPLIT_BLOCK),
                                               side="right")))
            dq = depth_q[s:e]
            sub = Sets(Q64[s:e], R64, sets.y[s:e], sets.y_ref, False, (False, False), {metric: (Q64[s:e], R64)})
            ds = np.minimum(dq + own, n_ref)  # one place more: the query's own row may be ranked before
            share = BarShare(bar, e - s) if progress else False  # this block's share of the one bar
            rr = compute_relevant_ranks(sub, metric, one_or_each(ds), device=device, block=block, progress=share,
                                        compact=True)
            if share:
                share.close()
            if sets.same:
                rr = _without_own_rows(rr, s, dq)
            if not np.array_equal(rr.R, R[s:e]):  # pragma: no cover - a broken invariant, not an input error
                raise AssertionError("query block: relevant counts differ from the whole search's")
            yield rr
            del rr, sub  # the block's pairs are not held while the next block is searched
            s = e
    finally:
        bar.close()


def _without_own_rows(rr: RelevantRanks, s: int, depth_q: np.ndarray) -> RelevantRanks:
    """The ranks of a same-set search from those of queries ``s, s + 1, …`` searched against every
    row including their own (see :func:`_ranks_by_query_blocks`): each query's own row (reference
    ``s + i``, relevant to it) taken out, the pairs ranked after it moved up by one, ranks beyond
    ``depth_q`` set to inf, pairs in rank order (beyond-depth pairs last, by reference index)."""
    qi = rr.query_of_pair
    mine = rr.refs == qi + s
    self_rank = np.full(rr.n_queries, np.inf)
    self_rank[qi[mine]] = rr.ranks[mine]
    keep = ~mine
    qi, ranks, refs = qi[keep], rr.ranks[keep], rr.refs[keep]
    ranks = ranks - (ranks > self_rank[qi])  # finite ranks after the own row's (inf stays inf)
    Rq = rr.R - 1
    if rr.n_ranked is not None:  # a compact result (the ranks within the depth): those that stay within
        fin = ranks <= depth_q[qi]
        qi, ranks, refs = qi[fin], ranks[fin], refs[fin]
        n_ranked = np.bincount(qi, minlength=Rq.size)
        offsets = np.zeros(Rq.size + 1, dtype=np.int64)
        np.cumsum(n_ranked, out=offsets[1:])
        return RelevantRanks(R=Rq, lone=Rq == 0, depth=int(depth_q.max()), n_avail=rr.n_avail - 1,
                             offsets=offsets, ranks=ranks, refs=refs, depth_q=np.asarray(depth_q, dtype=np.int64),
                             n_ranked=n_ranked)
    ranks[ranks > depth_q[qi]] = np.inf
    # The pairs were in this order: per query (queries in order), finite ranks increasing, then the
    # beyond-depth pairs by reference index; taking the own row out keeps it, except that a pair can
    # now fall beyond the depth (the last finite one of its query). One stable sort by (query,
    # finite position | beyond-depth reference) restores it; the keys are already in order but for
    # those pairs, which a stable (run-merging) sort handles in about linear time.
    inf = np.isinf(ranks)
    n = qi.size
    m = np.int64(max(n, int(rr.n_avail)) + 1)
    key = qi.astype(np.int64) * (2 * m) + np.where(inf, m + refs.astype(np.int64), np.arange(n, dtype=np.int64))
    order = np.argsort(key, kind="stable")
    offsets = np.zeros(Rq.size + 1, dtype=np.int64)
    np.cumsum(Rq, out=offsets[1:])
    return RelevantRanks(R=Rq, lone=Rq == 0, depth=int(depth_q.max()), n_avail=rr.n_avail - 1, offsets=offsets,
                         ranks=ranks[order], refs=refs[order], depth_q=np.asarray(depth_q, dtype=np.int64))
