"""Exact ranks of each query's relevant references (docs/methods.md §1): the one intermediate that
every retrieval measure reads.

Every retrieval metric of §1 depends on a query's ranked list only through the **ranks of its
relevant references** (those sharing its label) within a depth: with the relevant ranks sorted,
r_(1) < r_(2) < …, the m-th relevant item sits at rank r_(m) and P_i(r_(m)) = m / r_(m). So the
search computes, per query, the exact rank of each relevant reference if it lies within the depth,
and nothing else:

- **CPU, up to ``ROWS_MAX_REFS`` references** (CUB/CARS and SOP test sets, and larger) with a depth
  below 1,000 (or no deeper than the largest relevant set) and relevant sets of similar sizes: a
  filtered tile pass that sorts each query's few survivors above a sampled floor and counts, for
  each relevant pair, those before it by one binary search (:mod:`embedscope.metrics.search.rows`);
  its ranks go only as deep as each query's measures read (``depth_q``: R_i for R-Precision and
  MAP@R).
- **CPU, the other searches (more references, a depth of 1,000 or more beyond the relevant sets,
  skewed relevant sets) from 1,500 references** (``COUNT_MIN_REFS``, and 16 × the depth): one
  tiled float32 GEMM pass (cosine at D ≥ 768: summed in chunks of the inner dimension, for a
  tighter certified error bound) that *counts*, for each relevant pair, the references scoring
  above it, keeping per query only the references above a floor key estimated from a sample,
  never a top-depth list; a same-set cosine search multiplies each pair of query blocks once and
  reads the tile both ways (:mod:`embedscope.metrics.search.counting`).
- **Otherwise** (small sets, CUDA): float32 GEMM blocks with top-(depth + 16) float32 candidates
  per query (:func:`embedscope.metrics.search.knn.candidate_blocks`: faiss flat search on the CPU,
  torch GEMM blocks + ``torch.topk`` on CUDA); each relevant pair's float64 key; its rank = 1 +
  (candidates whose float32 key exceeds it by more than the float32 error bound) + (candidates
  within the bound that are exactly before it in float64, lower index first on ties).

Either way a pair whose rank cannot be certified from the float32 values (dense near-ties, or a
floor estimate that came out too high) is resolved from its query's full row. A nearly collapsed
model's few far references (:func:`~.knn.outlier_refs`) are searched apart, since they would set
every query's error bound (:func:`_ranks_apart`; ``output="hits"``: :func:`_hits_apart`).

The result equals the ranking of a float64 distance matrix with ties broken by the lower
reference index (docs/methods.md §1, "Protocol": ties). Memory: the relevant pairs (16 bytes each) plus one
GEMM block; never N × N. When relevant sets are huge (labels that are property values, R in the
tens of thousands), ``output="hits"`` returns only each query's number of relevant references in
its exact top R_i, without storing any pair.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.metrics.search.knn import (
    SLACK,
    KeySpace,
    candidate_blocks,
    check_metric,
    checked_rows,
    cross_keys64,
    dense_windows,
    outlier_most,
    outlier_refs,
    pair_keys64,
    prepare,
    tie_window_before,
)
from embedscope.metrics.search.threads import blocks_in_threads
from embedscope.validation import as_times, beyond_int64, check_int, check_labels, joint_codes, label_codes, label_values

__all__ = ["relevant_ranks", "RelevantRanks", "check_sets", "compute_relevant_ranks"]

_PAIRS_PER_CHUNK = 1 << 20
FALLBACK_ROW_ELEMS = 1 << 17  # keys of the full rows ranked at once by _full_row_fallback (queries x references)
_MEASURE_CHUNK = 1 << 16  # pairs per chunk of the measures (RelevantRanks.hits, .precision_sum)
COUNT_MIN_REFS = 1_500  # CPU searches count (counting.py) from this many references on
COUNT_MIN_RATIO = 16  # ... when they also outnumber the floor depth this many times
SHALLOW_FLOOR = (1, None)  # top-K keys only: floor keys at the depth itself (at least [0]), from a sample
SHALLOW_SAMPLE = 1 / 16  # ... of this fraction of the references (sample_top [1] when given)
DEEP_SAMPLE_TOP = 32.0  # mAP@1000: floor keys at the depth itself from a 32/depth sample
ESTIMATE_MIN_PAIRS_PER_QUERY = 8  # from this many relevant pairs per query, float32 pair-key estimates
USE_ROWS = True  # the filtered tile pass with per-row counting where _rows_plan chooses it (False: never)
COUNT_ON_DEVICE = False  # CUDA: the relevant pairs ranked by counting (device_count.py) instead of candidate
# lists: off until measured faster (docs/PERFORMANCE.md, thirty-second session: 2.6-11x slower before its
# depth cut-off; benchmarks/retrieval_cuda.py --counting times it)
COUNT_ON_CPU = False  # the device counting pass on the CPU too (tests only)
ROWS_MAX_REFS = 200_000  # CPU: the filtered tile pass with per-row counting (rows.py) up to this many references
ROWS_MAX_DEPTH = 1_000  # ... when the depth is below this ...
ROWS_MIN_FILL = 0.25  # ... and the relevant pairs fill this share of the padded (query x max R_i) tables
ROWS_FILL_BLOCK = 1024  # ... of blocks of this many queries (rows.BLOCK)


# ----------------------------------------------------------------------------- the result
@dataclass
class RelevantRanks:
    """Exact ranks of every query's relevant references (the output of :func:`relevant_ranks`).

    Attributes
    ----------
    R : int64 array (Nq,)
        R_i, the number of references sharing query i's label (the query itself excluded in a
        same-set search).
    lone : bool array (Nq,)
        ``R == 0``: queries with nothing to retrieve.
    depth : int
        Ranks are exact up to this depth; a relevant reference ranked deeper has rank ``inf``.
    n_avail : int
        References available to each query (N − 1 in a same-set search, else N_ref).
    offsets : int64 array (Nq + 1,) or None
        Query i's relevant pairs are ``ranks[offsets[i]:offsets[i + 1]]`` (``offsets[i+1] −
        offsets[i] == R[i]``).
    ranks : float64 array (ΣR_i,) or None
        1-based ranks in the query's list (float so that ``inf`` marks "beyond ``depth``"), in
        increasing order within each query: the m-th entry of a query is its m-th relevant
        reference, r_(m). Ranks are distinct within a query (ties among equal distances are
        already broken by the lower reference index); entries beyond the depth come last, in
        reference-index order.
    refs : int64 array (ΣR_i,) or None
        The reference index of each entry of ``ranks``.
    hits_at_R : int64 array (Nq,) or None
        Only with ``output="hits"`` (then ``offsets``/``ranks``/``refs`` are None): the number of
        relevant references among query i's exact top R_i.
    depth_q : int64 array (Nq,) or None
        When the search went to a different depth per query (what :func:`retrieval_metrics`
        asks for: R_i for R-Precision and MAP@R): query i's ranks are exact up to ``depth_q[i]``
        and ``inf`` beyond; ``depth`` is then the largest of them.
    n_ranked : int64 array (Nq,) or None
        A compact result (what :func:`retrieval_metrics` asks for with classes of hundreds and
        more): only the relevant references within the depth are listed, ``n_ranked[i]`` of them
        for query i (``offsets`` counts these); the other ``R[i] − n_ranked[i]`` are beyond the
        depth. None: all R_i are listed, as above.
    """

    R: np.ndarray
    lone: np.ndarray
    depth: int
    n_avail: int
    offsets: np.ndarray | None = None
    ranks: np.ndarray | None = None
    refs: np.ndarray | None = None
    hits_at_R: np.ndarray | None = None
    depth_q: np.ndarray | None = None
    n_ranked: np.ndarray | None = None

    @property
    def n_queries(self) -> int:
        return int(self.R.size)

    def _need_pairs(self):
        if self.ranks is None:
            raise EmbedscopeError("these relevant ranks were computed with output='hits': only hits_at_R is known")

    @property
    def query_of_pair(self) -> np.ndarray:
        """Query index of each entry of ``ranks`` (int64, ΣR_i)."""
        self._need_pairs()
        return np.repeat(np.arange(self.n_queries), np.diff(self.offsets))

    @property
    def position(self) -> np.ndarray:
        """m, the 1-based position of each entry among its query's relevant references."""
        self._need_pairs()
        return (np.arange(self.ranks.size) - np.repeat(self.offsets[:-1], np.diff(self.offsets)) + 1).astype(np.float64)

    def _limit(self, limit) -> np.ndarray:
        lim = np.asarray(limit, dtype=np.float64)
        if lim.ndim == 0:
            lim = np.full(self.n_queries, float(lim))
        dq = self.depth if self.depth_q is None else self.depth_q
        if np.any((lim > dq) & (dq < self.n_avail)):
            raise EmbedscopeError(f"a cut-off beyond the depth searched ({self.depth}) was asked for")
        return lim

    def first_rank(self) -> np.ndarray:
        """Rank of each query's first relevant reference (``inf`` if none within the depth)."""
        self._need_pairs()
        out = np.full(self.n_queries, np.inf)
        has = np.diff(self.offsets) > 0
        out[has] = self.ranks[self.offsets[:-1][has]]
        return out

    def _query_chunks(self):
        """Consecutive query ranges ``(a, b)`` holding about ``_MEASURE_CHUNK`` pairs each (at least
        one query): the measures run over them with cache-sized temporaries, every query's pairs
        summed in the same order as over all pairs at once (the same values bit for bit)."""
        off = self.offsets
        n = self.n_queries
        cuts = np.searchsorted(off, np.arange(0, int(off[-1]), _MEASURE_CHUNK), side="right") - 1
        cuts = np.unique(np.concatenate([cuts.clip(0, n), [0, n]]))
        return zip(cuts[:-1].tolist(), cuts[1:].tolist())

    def _compiled_sums(self, lim: np.ndarray):
        """``(hits, precision sums)`` within ``lim`` (per query) from the compiled extension, one pass for
        both, kept for the next call with the same limits (R-Precision and MAP@R both ask at R_i); None
        without the extension (then the numpy loops below give the same values bit for bit)."""
        from embedscope.metrics.search import fused

        if not fused.available() or not fused.USE_FUSED:
            return None
        kept = getattr(self, "_sums_kept", None)
        if kept is not None and np.array_equal(kept[0], lim):
            return kept[1]
        sums = fused.rank_sums(self.offsets, self.ranks, lim)
        self._sums_kept = (lim.copy(), sums)
        return sums

    def hits(self, limit) -> np.ndarray:
        """Per query, the number of relevant references ranked ≤ ``limit`` (scalar or per query)."""
        if self.ranks is None and limit is not None and np.array_equal(np.broadcast_to(limit, self.R.shape), self.R):
            return self.hits_at_R.astype(np.float64)
        self._need_pairs()
        lim = self._limit(limit)
        sums = self._compiled_sums(lim)
        if sums is not None:
            return sums[0]
        out = np.empty(self.n_queries)
        for a, b in self._query_chunks():
            p0, p1 = int(self.offsets[a]), int(self.offsets[b])
            qi = np.repeat(np.arange(b - a), np.diff(self.offsets[a:b + 1]))
            out[a:b] = np.bincount(qi, weights=(self.ranks[p0:p1] <= lim[a:b][qi]).astype(np.float64),
                                   minlength=b - a)
        return out

    def precision_sum(self, limit) -> np.ndarray:
        """Per query, Σ_{k ≤ limit} P_i(k)·rel_i(k) = Σ_{m: r_(m) ≤ limit} m / r_(m)."""
        self._need_pairs()
        lim = self._limit(limit)
        sums = self._compiled_sums(lim)
        if sums is not None:
            return sums[1]
        out = np.empty(self.n_queries)
        for a, b in self._query_chunks():
            p0, p1 = int(self.offsets[a]), int(self.offsets[b])
            cnt = np.diff(self.offsets[a:b + 1])
            qi = np.repeat(np.arange(b - a), cnt)
            ranks = self.ranks[p0:p1]
            pos = (np.arange(p0, p1) - np.repeat(self.offsets[a:b], cnt) + 1).astype(np.float64)
            fin = np.isfinite(ranks)
            prec = np.where(fin, pos / np.where(fin, ranks, 1.0), 0.0)
            out[a:b] = np.bincount(qi, weights=np.where(ranks <= lim[a:b][qi], prec, 0.0), minlength=b - a)
        return out


# ----------------------------------------------------------------------------- inputs
@dataclass
class Sets:
    """Validated queries and references (float64) and their integer labels. ``Q64`` / ``R64``
    hold the rows as given until :meth:`prepared` normalises them; where they are private copies
    (``owned``) it does so in place, and then they hold the normalised rows: read them through
    :meth:`prepared` (once per metric, cached)."""

    Q64: np.ndarray
    R64: np.ndarray
    y: np.ndarray
    y_ref: np.ndarray
    same: bool
    owned: tuple = (False, False)
    _prep: dict = field(default_factory=dict, repr=False)

    @property
    def n_avail(self) -> int:
        return self.R64.shape[0] - (1 if self.same else 0)

    def prepared(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """Queries and references as the searches rank them (:func:`~.knn.prepare`)."""
        if metric not in self._prep:
            if self._prep:  # another metric normalised the rows in place already
                raise EmbedscopeError("one Sets object serves one metric")
            Q = prepare(self.Q64, metric, "X", inplace=self.owned[0])
            R = Q if self.same else prepare(self.R64, metric, "X_ref", inplace=self.owned[1])
            self._prep[metric] = (Q, R)
        return self._prep[metric]


def _labels(y, n: int, name: str) -> np.ndarray:
    """One set's labels as int64 codes: :func:`~embedscope.validation.check_labels`, the one encoder (a torch
    tensor that requires grad, or of bfloat16, read as the rows are)."""
    return check_labels(y, n, name)


def check_sets(X, y, X_ref=None, y_ref=None) -> Sets:
    """Validate queries ``X`` with labels ``y`` and the optional separate references."""
    X64, own_x = checked_rows(X, "X")
    a = label_values(y, X64.shape[0], "y")
    ylab = label_codes(a, "y")
    if (X_ref is None) != (y_ref is None):
        raise EmbedscopeError("give both X_ref and y_ref for a separate reference set, or neither")
    if X_ref is None:
        return Sets(X64, X64, ylab, ylab, True, (own_x, own_x))
    R64, own_r = checked_rows(X_ref, "X_ref")
    if R64.shape[1] != X64.shape[1]:
        raise EmbedscopeError(f"X and X_ref differ in dimension: {X64.shape[1]} vs {R64.shape[1]}")
    b = label_values(y_ref, R64.shape[0], "y_ref")
    yref = label_codes(b, "y_ref")
    if a.dtype.kind in "iuf" and b.dtype.kind in "iuf":
        if beyond_int64(a) or beyond_int64(b):  # encoded (see label_codes): jointly, so equal values match
            ylab, yref = joint_codes(a, b)
    elif a.dtype.kind == "U" and b.dtype.kind == "U":  # texts (bytes decoded): encoded jointly, equal names match
        enc = np.unique(np.concatenate([a, b]), return_inverse=True)[1].reshape(-1).astype(np.int64)
        ylab, yref = enc[:X64.shape[0]], enc[X64.shape[0]:]
    elif a.dtype.kind in "mM" or b.dtype.kind in "mM":  # dates or durations (held as objects too: label_values)
        kind = a.dtype.kind if a.dtype.kind in "mM" else b.dtype.kind  # by their instant, units reconciled (as
        ta, tb = as_times(a, kind, "y"), as_times(b, kind, "y_ref")  # objects, datetime64[D] was dates and [s]
        if ta is None or tb is None:  # datetimes, never equal, [ns] integers: 1 matched 1 ns)
            raise EmbedscopeError(f"y and y_ref hold labels of different kinds ({_kinds(a)} vs {_kinds(b)}): give both "
                                  "sets the same kind of class labels (integers or names)")
        ylab, yref = _joint_times(ta, tb)
    else:
        # labels held as objects (a pandas column), bools, or one set's numbers and the other's texts: encoded
        # jointly by value, as one set's own labels are (0.0 == 0, True == 1, b"cat" == "cat"). By their text,
        # 0.0 ('0.0') was not 0 ('0'), and a class of one set silently had no member in the other
        both = np.concatenate([a.astype(object), b.astype(object)])
        try:
            enc = np.unique(both, return_inverse=True)[1].reshape(-1)
        except (TypeError, ValueError):  # numbers beside texts: no order, and no label of one equals one of the other
            ka, kb = _kinds(a), _kinds(b)
            what = f"of different kinds ({ka} vs {kb})" if ka != kb else f"that cannot be ordered ({ka})"
            raise EmbedscopeError(f"y and y_ref hold labels {what}: give both sets the same kind of class "
                                  "labels (integers or names)") from None
        ylab, yref = enc[:X64.shape[0]].astype(np.int64), enc[X64.shape[0]:].astype(np.int64)
    return Sets(X64, R64, ylab, yref, False, (own_x, own_r))


def _joint_times(ta: np.ndarray, tb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dates (or durations) of two sets, perhaps of different units, encoded jointly as int64 codes: equal
    instants equal codes. Compared in numpy's common unit, to which a cast wraps silently a value beyond its
    range (datetime64[D] 3000-01-01 as [ns] is 1830-11-23T00:50:52.580896768, which then matched that label of
    the other set) or floors one it cannot hold (a month as weeks): a value that does not come back from the
    cast equals none of the other set, and is a class of its own (by its own value); such values in both
    sets are refused (numpy's common unit is one of the two: not seen)."""
    try:
        unit = np.promote_types(ta.dtype, tb.dtype)
    except TypeError:  # durations of months or years in one set, of days or seconds in the other (was numpy's
        raise EmbedscopeError(  # TypeError, "incompatible nonlinear base time units")
            f"y and y_ref hold durations of no common unit ({ta.dtype} vs {tb.dtype}: a month or a year has no "
            "fixed length): give both sets' labels in one unit") from None
    generic = [np.datetime_data(t.dtype)[0] == "generic" for t in (ta, tb)]
    if generic[0] != generic[1] and ta.size and tb.size:  # (np.timedelta64(5) of one set matched 5 days of the
        raise EmbedscopeError(  # other's, silently: numpy read it in their unit, as within one set, refused there)
            f"y and y_ref: the labels of {'y' if generic[0] else 'y_ref'} are durations without a unit, those of "
            f"the other have one ({ta.dtype} vs {tb.dtype}; numpy would read them in it): give every label a unit")
    ca, cb = ta.astype(unit), tb.astype(unit)
    oa, ob = ca.astype(ta.dtype) != ta, cb.astype(tb.dtype) != tb  # (a wrapped value does not come back)
    if oa.any() and ob.any():
        raise EmbedscopeError(f"y and y_ref hold labels that numpy cannot compare: {ta[oa][0]} of y and "
                              f"{tb[ob][0]} of y_ref lie beyond the range of {unit}")
    both = np.concatenate([ca, cb]).view(np.int64)
    over = np.concatenate([oa, ob])
    enc = np.empty(both.shape[0], dtype=np.int64)
    fits = np.unique(both[~over], return_inverse=True)
    enc[~over] = fits[1].reshape(-1)
    if over.any():  # one set's values beyond the range, compared in their own unit
        beyond = ta[oa] if oa.any() else tb[ob]
        enc[over] = fits[0].shape[0] + np.unique(beyond.view(np.int64), return_inverse=True)[1].reshape(-1)
    return enc[:ta.shape[0]], enc[ta.shape[0]:]


def _kinds(a: np.ndarray) -> str:
    """What the labels ``a`` hold, in words: "numbers", "texts", "dates", "durations", "dates with a time
    zone", another type's name, or several."""
    import numbers

    if a.dtype.kind in "mM":  # (as a list: dates, datetimes or integers, by the unit)
        return "dates" if a.dtype.kind == "M" else "durations"
    vals = a.tolist() if a.dtype == object else a[:1].tolist()
    kinds = {"texts" if isinstance(v, (str, bytes)) else "numbers" if isinstance(v, numbers.Number)
             else "dates with a time zone" if getattr(v, "tzinfo", None) is not None  # (beside dates without
             else type(v).__name__ for v in vals}  # one: "dates vs Timestamp")
    return " and ".join(sorted(kinds)) or "nothing"


class _Layout:
    """References grouped by class: ``ref_order`` sorts them by label; class c occupies
    ``ref_order[starts[c]:ends[c]]``; ``q_cls`` is each query's class (−1 if absent)."""

    def __init__(self, y: np.ndarray, y_ref: np.ndarray, same: bool):
        self.ref_order = np.argsort(y_ref, kind="stable")
        ycls, cstart, ccount = np.unique(y_ref[self.ref_order], return_index=True, return_counts=True)
        pos = np.minimum(np.searchsorted(ycls, y), len(ycls) - 1)
        self.q_cls = np.where(ycls[pos] == y, pos, -1)
        self.bounds = (cstart, cstart + ccount)
        self.R = np.where(self.q_cls >= 0, ccount[np.maximum(self.q_cls, 0)], 0) - (1 if same else 0)
        self.R = np.maximum(self.R, 0).astype(np.int64)


def relevant_counts(sets: Sets) -> np.ndarray:
    """R_i per query (cheap: from the label counts)."""
    return _Layout(sets.y, sets.y_ref, sets.same).R


# ----------------------------------------------------------------------------- public entry point
def relevant_ranks(X, y, *, X_ref=None, y_ref=None, metric: str = "cosine", depth=None, device="auto",
                   progress: bool = False, block: int | None = None, output: str = "ranks") -> RelevantRanks:
    """Exact ranks of every query's relevant references (same label), docs/methods.md §1.

    Query i's ranked list orders the references by cosine similarity (rows L2-normalised, larger
    first) or Euclidean distance (smaller first), computed exactly (float64-certified), with ties
    broken by the lower reference index; in a same-set search (``X_ref`` None) the query itself
    is excluded. Reference j is relevant to query i when ``y_ref[j] == y[i]``; R_i counts them.

    Parameters
    ----------
    X : array (Nq, D)
        Queries (and references when ``X_ref`` is None).
    y : array (Nq,)
        Labels (integers or strings; property values work as labels too).
    X_ref, y_ref : arrays, optional
        A separate reference set (nothing excluded); give both or neither.
    metric : {"cosine", "euclidean"}
    depth : int, "R", "all" or None
        Ranks are exact up to this depth (deeper relevant references get rank ``inf``).
        ``None`` or ``"R"``: max_i R_i (enough for R-Precision and MAP@R); ``"all"``: every
        rank (N_ref; the cost of a full sort). Larger depths cost more.
    device : "auto" | "cpu" | "cuda"
    progress : bool
        Show a progress bar.
    block : int, optional
        Queries per GEMM block.
    output : {"ranks", "hits"}
        ``"ranks"``: the ranks of all ΣR_i relevant pairs (16 bytes per pair). ``"hits"``: only
        ``hits_at_R``, each query's number of relevant references within its exact top R_i
        (what R-Precision reads), by one blocked pass that selects each query's R_i-th key and
        certifies the few references near it in float64; memory one GEMM block, whatever R_i.

    Returns
    -------
    RelevantRanks
        See :class:`RelevantRanks`; e.g. R-Precision per query is ``rr.hits(rr.R) / rr.R``.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [1.0], [3.0], [4.0]]); y = np.array([0, 1, 0, 1])
    >>> rr = relevant_ranks(X, y, metric="euclidean", depth="all")
    >>> rr.R.tolist(), rr.ranks.tolist(), rr.refs.tolist()
    ([1, 1, 1, 1], [2.0, 3.0, 3.0, 2.0], [2, 3, 0, 1])
    >>> relevant_ranks(X, y, metric="euclidean", output="hits").hits_at_R.tolist()
    [0, 0, 0, 0]
    """
    check_metric(metric)
    if output not in ("ranks", "hits"):
        raise EmbedscopeError(f"output must be 'ranks' or 'hits', got {output!r}")
    block = check_int(block, "block (queries per block)", allow_none=True)  # (0 was "range() arg 3 ...")
    sets = check_sets(X, y, X_ref, y_ref)
    if sets.n_avail < 1:
        raise EmbedscopeError("need at least 2 rows to retrieve anything")
    R = relevant_counts(sets)
    if depth is None or depth == "R":
        d = int(max(R.max(), 1))
    elif depth == "all":
        d = sets.n_avail
    elif isinstance(depth, (int, np.integer)) and not isinstance(depth, bool) and depth >= 1:
        d = int(depth)
    else:
        raise EmbedscopeError(f"depth must be a positive integer, 'R', 'all' or None, got {depth!r}")
    return compute_relevant_ranks(sets, metric, min(d, sets.n_avail), device=device, block=block,
                                  progress=progress, output=output)


def compute_relevant_ranks(sets: Sets, metric: str, depth, *, device="auto", block=None,
                           progress=False, output: str = "ranks", compact: bool = False,
                           depth_over_R: int = 0) -> RelevantRanks:
    """:func:`relevant_ranks` on validated inputs (``depth`` an int ≤ the references available, or
    one such int per query: see :attr:`RelevantRanks.depth_q`). ``compact``: a compact result
    (:attr:`RelevantRanks.n_ranked`) where the search's plan gives one (classes of hundreds and
    more on the CPU), else the full one. ``depth_over_R``: a depth up to this much beyond the largest
    relevant set still counts as "no deeper than the relevant sets" when the pass is chosen
    (:func:`_rows_plan`; :func:`_ranks_apart`'s bulk search, whose relevant sets lack the outliers:
    the same ranks, only the choice of pass)."""
    lay = _Layout(sets.y, sets.y_ref, sets.same)
    Q64, R64 = sets.prepared(metric)
    ks = KeySpace(Q64, R64, metric, sets.same)
    n_avail = sets.n_avail
    R = lay.R
    if output == "ranks":
        got = _ranks_apart(sets, ks, lay, metric, depth, device=device, block=block, progress=progress,
                           compact=compact)
        if got is not None:
            return got
    if output == "hits":
        hits = _hits_apart(sets, ks, lay, metric, block=block, progress=progress)
        if hits is None:
            hits = _hits_at_R(ks, sets.y, sets.y_ref, R, block=block, progress=progress)
        return RelevantRanks(R=R, lone=R == 0, depth=int(R.max(initial=0)), n_avail=n_avail, hits_at_R=hits)
    depth_q = None
    if np.ndim(depth):
        depth_q = np.asarray(depth, dtype=np.int64)
        depth = int(depth_q.max(initial=1))
    qi, rj, rank, ordered = _pair_ranks(ks, lay, sets.y, depth if depth_q is None else depth_q, device, block,
                                        progress, compact=compact, depth_over_R=depth_over_R)
    if ordered == "compact":  # rank, rj: the ranks within the depth only; qi: their number per query
        offsets = np.zeros(R.size + 1, dtype=np.int64)
        np.cumsum(qi, out=offsets[1:])
        return RelevantRanks(R=R, lone=R == 0, depth=int(depth), n_avail=n_avail, offsets=offsets,
                             ranks=rank, refs=rj, depth_q=depth_q, n_ranked=qi)
    if depth_q is not None and not ordered:  # the other paths searched to the largest depth
        rank[rank > depth_q[qi]] = np.inf
    if not ordered:
        order = _pair_order(qi, rank, rj, n_avail, sets.y_ref.size)
        rank, rj = rank[order], rj[order]
    offsets = np.zeros(R.size + 1, dtype=np.int64)
    np.cumsum(R, out=offsets[1:])
    return RelevantRanks(R=R, lone=R == 0, depth=int(depth), n_avail=n_avail, offsets=offsets,
                         ranks=rank, refs=rj, depth_q=depth_q)


def _pair_order(qi: np.ndarray, rank: np.ndarray, rj: np.ndarray, n_avail: int, n_ref: int) -> np.ndarray:
    """The order of relevant pairs by (query, rank, reference): ``np.lexsort((rj, rank, qi))``, the same
    permutation, as one stable argsort of one int64 key (query · (n_avail + 2) + rank) · n_ref + reference,
    a rank beyond the depth (inf) taken as n_avail + 1 (so those pairs come last, in reference order).
    Ranks are whole numbers 1..n_avail, or inf; ~0.1-0.5 s for 10^7 pairs, where the lexsort of the three
    took ~10 s (docs/PERFORMANCE.md). Where the key would not fit 63 bits, the lexsort itself."""
    if qi.size == 0:
        return np.zeros(0, dtype=np.int64)
    nq = int(qi.max()) + 1
    if nq * (n_avail + 2) * max(n_ref, 1) >= 1 << 62:  # pragma: no cover - beyond 10^6 x 10^6 x 10^6
        return np.lexsort((rj, rank, qi))
    key = qi.astype(np.int64) * (n_avail + 2)
    key += np.where(np.isfinite(rank), rank, n_avail + 1).astype(np.int64)
    key *= max(n_ref, 1)
    key += rj
    return np.argsort(key, kind="stable")


# ----------------------------------------------------------------------------- outliers apart
def _outlier_split(ks: KeySpace):
    """``(far, near, q_near)`` of a search whose few far references (:func:`~.knn.outlier_refs`) are
    searched apart: the outliers, the other references (the "bulk") and the bulk's queries (the bulk
    itself in a same-set search, else every query); None where there are none (or scale is not 1)."""
    if ks.scale != 1.0:
        return None
    far = outlier_refs(ks, outlier_most(ks.R64.shape[0], ks.Q64.shape[0]))
    if far is None:
        return None
    near = np.setdiff1d(np.arange(ks.R64.shape[0]), far)
    return far, near, (near if ks.same else np.arange(ks.Q64.shape[0]))


def _bulk_keyspace(ks: KeySpace, near: np.ndarray, q_near: np.ndarray, cut) -> KeySpace | None:
    """The :class:`KeySpace` of the bulk (its rows copies of ``ks``'s, bit for bit), or None where its
    bound, median over its queries, is not ``OUTLIER_GAIN`` times tighter than that of all references
    (or its scale is not 1), or where the outliers are many and the search of all references would
    keep narrow windows around each query's ``cut``-th key all the same (:func:`~.knn.window_pays`,
    ``APART_WINDOW_RATIO``): then searching apart does not pay."""
    from embedscope.metrics.search.knn import OUTLIER_GAIN, window_pays

    Qn = ks.Q64[q_near]
    sub = KeySpace(Qn, Qn if ks.same else ks.R64[near], ks.metric, ks.same)
    if sub.scale != 1.0 or OUTLIER_GAIN * float(np.median(sub.delta)) > float(np.median(ks.delta[q_near])):
        return None
    if not window_pays(ks, sub, q_near, ks.R64.shape[0] - near.size, cut, APART_WINDOW_RATIO):
        return None
    return sub


APART_MAX_COMPARISONS = 1 << 28  # _ranks_apart: relevant pairs x outliers compared at most,
APART_MAX_ROW_WORK = 1 << 33  # ... and the outliers' relevant queries' rows over the bulk (their GEMM, queries x
APART_ROW_RATIO = 3.0  # bulk references x D, + 8 x bulk references per relevant (query, outlier) pair) up to
#                        this, or up to this many times the bulk search's GEMM (queries x bulk references x D)
#                        (benchmarks/outliers_apart.py, 6,000 x 128, classes of 600 and 3,000: the split paid
#                        1.2-5x at shares 1.6-2.9, 1.06x at 3.9, 1.01x at 4.7; docs/PERFORMANCE.md)
APART_ROW_ELEMS = 1 << 22  # ... outliers' relevant queries' float32 rows over the bulk, this many keys at a time
APART_WINDOW_RATIO = 1.0  # more outliers than min(N / 64, 256) (knn.outlier_most): apart where the old path's
#                           window keys per query reach this many times the outliers (knn.window_pays)


def _ranks_apart(sets: Sets, ks: KeySpace, lay: _Layout, metric: str, depth, *, device, block, progress,
                 compact: bool = False):
    """:func:`compute_relevant_ranks` (``output="ranks"``) of a nearly collapsed model with a few far
    references (:func:`~.knn.outlier_refs`) searched apart, or None where that does not pay (the
    bulk's bound, median over its queries, not ``OUTLIER_GAIN`` times tighter than that of all
    references; scale not 1; the outliers' comparisons beyond ``APART_MAX_COMPARISONS`` or their
    relevant queries' rows beyond ``APART_MAX_ROW_WORK`` and ``APART_ROW_RATIO`` times the bulk
    search's GEMM: at most one row per query, so only many outliers relevant to most queries reach
    it). The far references set every query's bound
    (see :func:`~.knn.outlier_refs`); the rest, the "bulk" (indices ``near``), is searched as its
    own set, with its own bound, and the outliers are added exactly:

    - a bulk pair (q, r)'s rank among all references is its rank among the bulk plus the outliers
      o before it, (key(q, o), o) before (key(q, r), r) in the order (key desc, index asc), from
      :func:`~.knn.pair_keys64` of both pairs (few per query); ranks only grow, so a pair beyond
      the depth among the bulk is beyond it among all; an outlier before a pair is before the
      query's last pair within the depth, so only the queries with an outlier before that one
      compare their pairs (outliers far from the bulk's point come after every pair of most);
    - an outlier o relevant to a bulk query q: 1 + the outliers before it + the bulk references
      before it, counted from the bulk's float32 row of q (:meth:`KeySpace.rows_keys32`, within
      the bulk's bound δ_q of every bulk key k: |k32 − k| ≤ δ_q): references with k32 > k(q, o) +
      2 δ_q have k ≥ k32 − δ_q > k(q, o) + δ_q (before it), those with k32 < k(q, o) − 2 δ_q have
      k ≤ k32 + δ_q < k(q, o) − δ_q (after it) (the second δ_q a margin far above the rounding
      of the comparison's own sum); the ones between get float64 keys and are compared exactly
      (ties to the lower index);
    - in a same-set search, an outlier query: its full float64 row (few x N keys).

    Every key is :func:`~.knn.pair_keys64` of the same two rows (the bulk's rows are copies, bit
    for bit), so the ranks are those of the search of all references, bit for bit. ``compact``:
    as :func:`compute_relevant_ranks` (compact where the bulk's search gave a compact result)."""
    from embedscope.metrics.search.threads import blas_single_thread

    split = _outlier_split(ks)
    if split is None:
        return None
    far, near, q_near = split
    Q64, R64, same = ks.Q64, ks.R64, ks.same
    nq, nr, nf = Q64.shape[0], R64.shape[0], far.size
    n_sub = near.size - (1 if same else 0)
    y, y_ref = sets.y, sets.y_ref
    lab, cnt = np.unique(y[q_near], return_counts=True)  # the (bulk query, outlier) pairs of step 2,
    at = np.minimum(np.searchsorted(lab, y_ref[far]), lab.size - 1)
    n_rel_out = int(np.where(lab[at] == y_ref[far], cnt[at], 0).sum())
    n_rel_q = int(np.isin(y[q_near], y_ref[far]).sum())  # ... and their queries
    dim = Q64.shape[1]
    row_work = n_rel_q * near.size * dim + 8 * n_rel_out * near.size
    if (n_sub < 1 or int(lay.R.sum()) * nf > APART_MAX_COMPARISONS
            or row_work > max(APART_MAX_ROW_WORK, APART_ROW_RATIO * q_near.size * near.size * dim)):
        return None  # (the outliers' share of the work would outgrow the search's)
    sub_ks = _bulk_keyspace(ks, near, q_near, np.median(depth) if np.ndim(depth) else depth)
    if sub_ks is None:
        return None
    Qn, Rn = sub_ks.Q64, sub_ks.R64
    depth_q = np.asarray(depth, dtype=np.int64) if np.ndim(depth) else None
    dq = depth_q if depth_q is not None else np.full(nq, int(depth), dtype=np.int64)
    sub_depth = np.minimum(dq[q_near], n_sub).clip(1) if depth_q is not None else max(1, min(int(depth), n_sub))
    sub = Sets(Qn, Rn, y[q_near], y_ref[near], same, (False, False), {metric: (Qn, Rn)})
    # (its depth, R_i of all references, exceeds the bulk's own R_i by the outliers relevant to the
    # query: at most nf beyond its largest relevant set, which must not send a search of classes of
    # thousands from the tile pass to top-(depth + 16) candidate lists, 5x slower)
    rr = compute_relevant_ranks(sub, metric, sub_depth, device=device, block=block, progress=progress,
                                compact=compact, depth_over_R=nf)
    # 1. bulk pairs: their ranks among the bulk, plus the outliers before them
    pos = rr.query_of_pair  # the query's place in q_near
    qs, rs, rk = q_near[pos], near[rr.refs], rr.ranks.copy()
    k_out = cross_keys64(Q64, R64, q_near, far, metric)
    # A query's pairs within the depth come first, in rank order (RelevantRanks): an outlier before
    # one of them is before its last, so only the queries with an outlier before their last pair
    # within the depth (few: outliers lie far from the bulk's point) compare every such pair.
    n_fin = np.bincount(pos, weights=np.isfinite(rk), minlength=q_near.size).astype(np.int64)
    has = np.flatnonzero(n_fin)
    last = rr.offsets[has] + n_fin[has] - 1
    k_last = pair_keys64(Q64, R64, q_near[has], rs[last], metric)
    ko = k_out[has]
    some = has[((ko > k_last[:, None]) | ((ko == k_last[:, None]) & (far[None, :] < rs[last][:, None]))).any(axis=1)]
    if some.size:
        m = np.zeros(q_near.size, dtype=bool)
        m[some] = True
        fin = np.flatnonzero(np.isfinite(rk) & m[pos])
        kp = pair_keys64(Q64, R64, qs[fin], rs[fin], metric)
        before = np.zeros(fin.size, dtype=np.int64)
        pf, rf = pos[fin], rs[fin]
        for j in range(nf):
            ko = k_out[pf, j]
            before += (ko > kp) | ((ko == kp) & (far[j] < rf))
        rk[fin] += before
    qi_, rj_, rank_ = [qs], [rs], [rk]
    # 2. outliers relevant to bulk queries: the bulk references and the outliers before them (each
    # such query's float32 row over the bulk once, for all its relevant outliers)
    rel_out = y[q_near][:, None] == y_ref[far][None, :]  # (in a same-set search never o itself)
    q_rel = np.flatnonzero(rel_out.any(axis=1))  # places in q_near
    step = max(1, APART_ROW_ELEMS // max(near.size, 1))
    for a in range(0, q_rel.size, step):
        qa = q_rel[a:a + step]
        with blas_single_thread():  # (a multi-threaded BLAS call spins against the search's threads)
            rows = sub_ks.rows_keys32(qa)  # (same set: the query itself -inf)
        for j, o in enumerate(far):
            sel = np.flatnonzero(rel_out[qa, j])
            if sel.size == 0:
                continue
            qo = qa[sel]
            row = rows[sel]
            d2 = 2.0 * sub_ks.delta[qo, None]
            kk = k_out[qo, j][:, None]
            above = row > kk + d2
            certain = above.sum(axis=1)
            wr, wc = np.nonzero(~above & (row >= kk - d2))
            k64 = pair_keys64(Q64, R64, q_near[qo][wr], near[wc], metric)
            tie = (k64 > kk[wr, 0]) | ((k64 == kk[wr, 0]) & (near[wc] < o))
            n_before = certain + np.bincount(wr, weights=tie, minlength=qo.size).astype(np.int64)
            ko_all = k_out[qo]
            n_before += ((ko_all > kk) | ((ko_all == kk) & (far < o)[None, :])).sum(axis=1)
            qi_.append(q_near[qo])
            rj_.append(np.full(qo.size, o))
            rank_.append((1 + n_before).astype(np.float64))
    # 3. same set: the outlier queries, from their full rows
    if same:
        refs = np.arange(nr)
        for q in far:
            rel = np.flatnonzero(y_ref == y[q])
            rel = rel[rel != q]
            if rel.size == 0:
                continue
            key = pair_keys64(Q64, R64, np.full(nr, q), refs, metric)
            cand = refs[refs != q]
            place = np.empty(nr)
            place[cand[np.lexsort((cand, -key[cand]))]] = np.arange(1, cand.size + 1)
            qi_.append(np.full(rel.size, q))
            rj_.append(rel)
            rank_.append(place[rel])
    qi, rj, rank = np.concatenate(qi_), np.concatenate(rj_), np.concatenate(rank_)
    rank[rank > dq[qi]] = np.inf
    n_ranked = None
    if rr.n_ranked is not None:  # compact: the ranks within the depth only (the bulk's others were not listed)
        fin = np.isfinite(rank)
        qi, rj, rank = qi[fin], rj[fin], rank[fin]
        n_ranked = np.bincount(qi, minlength=nq).astype(np.int64)
    # (query, rank, reference) order (the bulk's pairs are in that order already, the outliers'
    # appended: nearly sorted); beyond the depth, in reference order
    order = _pair_order(qi, rank, rj, sets.n_avail, nr)
    qi, rank, rj = qi[order], rank[order], rj[order]
    R = lay.R
    per_q = R if n_ranked is None else n_ranked
    if n_ranked is None and qi.size != int(R.sum()):  # pragma: no cover - every relevant pair once
        raise AssertionError("_ranks_apart: relevant pairs lost")
    offsets = np.zeros(R.size + 1, dtype=np.int64)
    np.cumsum(per_q, out=offsets[1:])
    return RelevantRanks(R=R, lone=R == 0, depth=int(depth if depth_q is None else depth_q.max(initial=1)),
                         n_avail=sets.n_avail, offsets=offsets, ranks=rank, refs=rj, depth_q=depth_q,
                         n_ranked=n_ranked)


# ----------------------------------------------------------------------------- ranks of the pairs
def _rowwise_searchsorted(asc: np.ndarray, t: np.ndarray, right: bool) -> np.ndarray:
    """Per row i, ``np.searchsorted(asc[i], t[i], side)`` (``asc``: rows ascending, no NaN): torch's
    batched search when torch is imported already, else a loop over the rows (a few µs each; a
    CPU-only analysis does not import torch for it, 1.3–1.9 s). The same counts either way."""
    if "torch" in sys.modules:
        import torch

        return torch.searchsorted(torch.from_numpy(asc), torch.from_numpy(np.ascontiguousarray(t)),
                                  right=right).numpy()
    side = "right" if right else "left"
    out = np.empty(t.shape, dtype=np.int64)
    for i in range(asc.shape[0]):
        out[i] = np.searchsorted(asc[i], t[i], side=side)
    return out


def _resolve(vals: np.ndarray, cand: np.ndarray, row: np.ndarray, ref: np.ndarray, k64: np.ndarray,
             delta: np.ndarray, complete: np.ndarray, depth: int, qglob: np.ndarray, ks: KeySpace):
    """Exact ranks (float; inf beyond ``depth``) of pairs (query row[p], reference ref[p]).

    ``vals``/``cand``: per block row, float32 keys (descending) and indices of the candidates.
    Returns (rank, unresolved mask).
    """
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
    asc = np.ascontiguousarray(-vals)
    n_sure = _rowwise_searchsorted(asc, hi_t, right=False)[row_s, slot]
    n_win = _rowwise_searchsorted(asc, lo_t, right=True)[row_s, slot]
    lo = np.empty(P, dtype=np.int64)
    hi = np.empty(P, dtype=np.int64)
    lo[order], hi[order] = n_sure, n_win
    # the ambiguous window [lo, hi): exact float64 comparison, lower index first on ties
    cnt = hi - lo
    amb_before = np.zeros(P, dtype=np.int64)
    tot = int(cnt.sum())
    if dense_windows(tot, P, int(np.unique(row).size) * vals.shape[1]):  # many equal keys (a collapsed
        # model), or overlapping windows: each member's key once
        w = vals.shape[1]
        amb_before = tie_window_before(
            vals.size, row * w + lo, row * w + hi, row, k64, ref, lambda at: at // w, lambda at: cand.ravel()[at],
            lambda rr, r: pair_keys64(ks.Q64, ks.R64, qglob[rr], r, ks.metric), greater_high=False,
            ref_class=ks.ref_classes())
    elif tot:
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


def _relevant_pairs(lay: _Layout, s: int, e: int, same: bool):
    """(query, reference) pairs of equal label for queries s..e-1 (the query itself excluded),
    grouped by query."""
    qc = lay.q_cls[s:e]
    starts, ends = lay.bounds
    cnt = np.where(qc >= 0, ends[np.maximum(qc, 0)] - starts[np.maximum(qc, 0)], 0)
    tot = int(cnt.sum())
    qi = np.repeat(np.arange(s, e), cnt)
    off = np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    rj = lay.ref_order[starts[np.repeat(np.maximum(qc, 0), cnt)] + off]
    if same:
        keep = rj != qi
        qi, rj = qi[keep], rj[keep]
    return qi, rj


CLASS_KEYS_THREADED_MIN = 1 << 26  # _pair_keys_by_class: worker threads from this many multiply-adds of its
# class GEMMs (Σ queries x references x D) on; below, one thread: the classes' small numpy steps hold the GIL and
# two threads contend for it (CUB-like 2,000 x 64: 1.6 ms on 2 threads, 0.8 on one; 6,000 x 128: 4.9 and 4.0;
# even at 2,000 x 512 and 12,000 x 128; 2 threads 1.4-1.7x faster from 6,000 x 512 and 2,000 x 2,048 on)


def _pair_keys_by_class(ks: KeySpace, lay: _Layout, qi: np.ndarray, rj: np.ndarray, threads: int | None = None):
    """Float64 keys of the relevant pairs from one small float64 GEMM per class (no per-pair
    gather of rows), and a per-query bound on their difference from :func:`pair_keys64`'s
    (two float64 evaluations of the same key, each within (D + 16)·2⁻⁵³·1.05·(‖r‖max + ‖q‖)² of
    the exact value): the passes widen their windows by it and recompute a pair's key by
    :func:`pair_keys64` only where the estimate cannot decide.

    ``(qi, rj)`` must be all the relevant pairs as :func:`_relevant_pairs` lists them (grouped by
    query, each query's references in index order; both None: the keys in that order, without the
    pairs): a class's GEMM is then written in place,
    row by row (the query itself left out in a same-set search). Classes are shared among
    ``threads`` workers (default: :func:`~.threads.n_search_threads`), each running its GEMMs with
    one BLAS thread, where the GEMMs hold ``CLASS_KEYS_THREADED_MIN`` multiply-adds or more (below,
    the calling thread computes them all)."""
    from concurrent.futures import ThreadPoolExecutor

    from embedscope.metrics.search.threads import blas_single_thread, n_search_threads

    starts, ends = lay.bounds
    nq = lay.q_cls.size
    if qi is None:  # the keys alone, in the order of _relevant_pairs
        cnt = lay.R
    else:
        cnt = np.bincount(qi, minlength=nq)
        if qi.size != int(lay.R.sum()) or not np.array_equal(cnt, lay.R):
            raise ValueError("_pair_keys_by_class needs the pairs of _relevant_pairs")
    off = np.zeros(nq + 1, dtype=np.int64)
    np.cumsum(cnt, out=off[1:])
    has = (lay.q_cls >= 0) & (cnt > 0)
    qo = np.flatnonzero(has)[np.argsort(lay.q_cls[has], kind="stable")]  # queries grouped by class
    ucls, first = np.unique(lay.q_cls[qo], return_index=True)
    last = np.append(first[1:], qo.size)
    centred = ks.centre is not None
    rsq = None if ks.metric == "cosine" or centred else np.einsum("ij,ij->i", ks.R64, ks.R64)
    est = np.empty(int(cnt.sum()), dtype=np.float64)

    def work(idx):
        for t in idx:
            c, qs = ucls[t], qo[first[t]:last[t]]
            refs = lay.ref_order[starts[c]:ends[c]]
            m = qs.size
            if (ks.same and not centred and refs.size == m and qs[-1] - qs[0] + 1 == m
                    and refs[0] == qs[0] and refs[-1] == qs[-1]):
                # a class of consecutive rows of a same-set search (data sets stored class by class, as
                # CUB's and CARS's test sets): its rows as a view, one symmetric product, and its queries'
                # pairs one run of est, the GEMM less its diagonal (the query itself) in row order
                s0 = int(qs[0])
                A = ks.Q64[s0:s0 + m]
                G = A @ A.T
                if rsq is not None:  # −‖q − r‖² = 2 q·r − ‖r‖² − ‖q‖²
                    G = 2.0 * G - rsq[s0:s0 + m] - ks.qsq[s0:s0 + m][:, None]
                est[off[s0]:off[s0 + m]] = G.ravel()[1:].reshape(m - 1, m + 1)[:, :m].ravel()
                continue
            if centred:  # the keys' differences survive only in the centred rows
                G = ks.centred_keys64(qs, refs)
            else:
                A = ks.Q64[qs[0]:qs[-1] + 1] if qs[-1] - qs[0] + 1 == m else ks.Q64[qs]
                # same set: the class's queries are its references (one gather; numpy multiplies
                # A A^T as a symmetric product, half the float64 GEMM, within the same bound)
                B = A if ks.same and np.array_equal(qs, refs) else (
                    ks.R64[refs[0]:refs[-1] + 1] if refs[-1] - refs[0] + 1 == refs.size else ks.R64[refs])
                G = A @ B.T
                if rsq is not None:  # −‖q − r‖² = 2 q·r − ‖r‖² − ‖q‖²
                    G = 2.0 * G - rsq[refs] - ks.qsq[qs][:, None]
            n = cnt[qs]
            dest = np.repeat(off[qs], n) + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))
            if ks.same:  # the query itself is not among its pairs
                keep = refs[None, :] != qs[:, None]
                est[dest] = G[keep]
            else:
                est[dest] = G.ravel()

    n_threads = int(threads or n_search_threads())
    work_per_cls = (last - first) * (ends[ucls] - starts[ucls])
    if float(work_per_cls.sum()) * ks.Q64.shape[1] < CLASS_KEYS_THREADED_MIN:
        n_threads = 1  # small GEMMs: the classes' numpy work holds the GIL, two threads only contend for it
    if n_threads <= 1 or ucls.size < 2:
        with blas_single_thread():  # small GEMMs: threads only add wake-up latency
            work(range(ucls.size))
    else:  # classes dealt to the workers by size, largest first
        order = np.argsort(-work_per_cls, kind="stable")
        parts = [order[i::n_threads] for i in range(n_threads)]
        with blas_single_thread(), ThreadPoolExecutor(n_threads) as pool:
            list(pool.map(work, parts))
    if centred:
        return est, ks.est_err
    qn = np.sqrt(ks.qsq)
    err = 2.0 * (ks.Q64.shape[1] + 16) * 2.0 ** -53 * 1.1 * (ks.rmax + qn) ** 2 + 1e-300
    return est, err


def _counting_plan(device, depth: int, n_avail: int):
    """(floor depth, sample_top) of the counting pass, or None for the candidate-list path (small
    reference sets, CUDA). Measured in docs/PERFORMANCE.md."""
    from embedscope.device import compute_device

    dev = compute_device(device)
    if depth >= 1000:
        floor_depth, sample_top = depth, DEEP_SAMPLE_TOP
    else:
        floor_depth = max(depth, SHALLOW_FLOOR[0])
        sample_top = SHALLOW_FLOOR[1] or max(4.0, floor_depth * SHALLOW_SAMPLE)
    if dev.type != "cpu" or n_avail < COUNT_MIN_REFS or n_avail < COUNT_MIN_RATIO * floor_depth:
        return None
    return floor_depth, sample_top


def _device_count_plan(device, R: np.ndarray) -> bool:
    """Whether the relevant pairs are ranked by counting on the device
    (:mod:`embedscope.metrics.search.device_count`): with ``COUNT_ON_DEVICE``, on CUDA (the CPU too with
    ``COUNT_ON_CPU``, for the tests), up to ``PAIRS_MOST`` relevant pairs. Measured in
    docs/PERFORMANCE.md (off: the candidate lists were faster on an H200)."""
    from embedscope.metrics.search.device_count import PAIRS_MOST

    if not COUNT_ON_DEVICE or (device.type == "cpu" and not COUNT_ON_CPU):
        return False
    return 0 < int(R.sum()) <= PAIRS_MOST


def _pairs_and_keys(ks: KeySpace, lay: _Layout):
    """Every relevant pair (:func:`_relevant_pairs`) and its float64 key: from one float64 GEMM per
    class when classes are large (estimates, with their error bound), else pair by pair (exact,
    error None)."""
    from embedscope.metrics.search import counting

    nq = ks.Q64.shape[0]
    qi, rj = _relevant_pairs(lay, 0, nq, ks.same)
    if qi.size >= ESTIMATE_MIN_PAIRS_PER_QUERY * nq:  # large classes: one float64 GEMM per class
        keys, key_err = _pair_keys_by_class(ks, lay, qi, rj)
        return qi, rj, keys, key_err
    return qi, rj, counting.pair_keys(ks.Q64, ks.R64, qi, rj, ks.metric), None


def _rows_plan(device, depth, n_ref: int, R: np.ndarray, depth_over_R: int = 0) -> bool:
    """Whether the filtered tile pass with per-row counting (:mod:`embedscope.metrics.search.rows`)
    ranks this search: CPU; up to ``ROWS_MAX_REFS`` references; the largest depth below
    ``ROWS_MAX_DEPTH`` or no larger than the largest relevant set; relevant sets of similar sizes
    within blocks of queries (the pass pads each block's pairs to the block's largest R_i: those
    tables at least ``ROWS_MIN_FILL`` full). ``depth_over_R``: see :func:`compute_relevant_ranks`.
    Measured in docs/PERFORMANCE.md."""
    from embedscope.device import compute_device

    dev = compute_device(device)
    if not USE_ROWS or dev.type != "cpu" or n_ref > ROWS_MAX_REFS or R.size == 0:
        return False
    # A depth of 1,000 or more beyond the relevant sets (mAP@1000 with classes of tens) goes to the
    # counting pass; a depth no deeper than the largest relevant set (R-Precision and MAP@R of classes
    # of thousands: 10 classes of 1,000) stays here: 4-5x faster than the candidate lists it got
    # before, the same ranks (measured in docs/PERFORMANCE.md, twelfth session).
    if np.max(depth) >= ROWS_MAX_DEPTH and np.max(depth) > int(R.max()) + depth_over_R:
        return False
    starts = np.arange(0, R.size, ROWS_FILL_BLOCK)
    sizes = np.diff(np.append(starts, R.size))
    padded = float((sizes * np.maximum(np.maximum.reduceat(R, starts), 1)).sum())
    return float(R.sum()) >= ROWS_MIN_FILL * padded


def _pair_ranks(ks: KeySpace, lay: _Layout, y, depth, device, block, progress, compact: bool = False,
                depth_over_R: int = 0):
    """Per relevant pair (query, reference): exact rank (inf when beyond ``depth``); returns
    ``(qi, rj, rank, ordered)`` grouped by query (``ordered``: already in rank order within each
    query, beyond-depth pairs last in reference-index order; ``"compact"``, with ``compact`` where
    the tile pass ranks classes of hundreds: ``rank``/``rj`` hold only the pairs within the depth,
    in rank order, and ``qi`` their number per query).

    On the CPU, searches up to ``ROWS_MAX_REFS`` references with depths below ``ROWS_MAX_DEPTH``
    and even relevant sets go to the filtered tile pass (:mod:`embedscope.metrics.search.rows`),
    the other large ones count the references above each relevant pair in one tiled GEMM pass
    (:mod:`embedscope.metrics.search.counting`); small ones with skewed classes and CUDA keep
    top-(depth + 16) float32 candidate lists and certify them in float64."""
    from embedscope.device import compute_device
    from embedscope.metrics.search import counting, fused

    n_avail = ks.R64.shape[0] - (1 if ks.same else 0)
    depth_q, depth = depth, int(np.max(depth))  # per query (or one for all), and the largest
    device = compute_device(device)  # once, for every plan
    if fused.fused_plan(device, ks, depth_q):  # compiled counting right after each block's GEMM
        rank, rj = fused.relevant_ranks_fused(ks, lay, depth_q, block=block, progress=progress)
        from embedscope.metrics.search.rows import large_mode

        if compact and large_mode(lay.R, ks.R64.shape[0]):  # the compact result the tile pass gives here
            within = np.isfinite(rank)
            n_ranked = np.bincount(np.repeat(np.arange(lay.R.size), lay.R)[within], minlength=lay.R.size)
            return n_ranked, rj[within], rank[within], "compact"
        return None, rj, rank, True
    if _rows_plan(device, depth_q, ks.R64.shape[0], lay.R, depth_over_R):
        from embedscope.metrics.search.rows import SurvivorOverflow, large_mode, relevant_ranks_by_rows

        if compact and large_mode(lay.R, ks.R64.shape[0]):  # only the keys (the pairs are read off the survivors)
            qi = rj = None
            keys, key_err = _pair_keys_by_class(ks, lay, None, None)
        else:
            qi, rj, keys, key_err = _pairs_and_keys(ks, lay)
        starts, ends = lay.bounds
        ref_cls = np.empty(lay.ref_order.size, dtype=np.int64)
        ref_cls[lay.ref_order] = np.repeat(np.arange(starts.size), ends - starts)
        try:
            out = relevant_ranks_by_rows(ks, qi, rj, keys, depth_q, key_err=key_err, block=block,
                                         progress=progress, labels=(lay.q_cls, ref_cls, lay.R), compact=compact)
        except SurvivorOverflow:  # most keys tie (a collapsed model): a pass of bounded memory below
            out = None
        if out is not None:
            if len(out) == 3:  # compact: (ranks within the depth, their references, their number per query)
                return out[2], out[1], out[0], "compact"
            return qi, out[1], out[0], True
    plan = _counting_plan(device, depth, n_avail)
    if plan is not None:
        qi, rj, keys, key_err = _pairs_and_keys(ks, lay)
        rank, unresolved = counting.relevant_ranks_by_count(ks, qi, rj, keys, depth, progress=progress, block=block,
                                                            floor_depth=plan[0], sample_top=plan[1],
                                                            key_err=key_err)
        if unresolved.any():
            k64 = np.full(qi.size, np.nan)
            k64[unresolved] = pair_keys64(ks.Q64, ks.R64, qi[unresolved], rj[unresolved], ks.metric)
            _full_row_fallback(ks, qi, rj, k64, rank, unresolved, depth)
        return qi, rj, rank, False
    if _device_count_plan(device, lay.R):
        from embedscope.metrics.search.device_count import relevant_ranks_by_device_count

        qi, rj = _relevant_pairs(lay, 0, ks.Q64.shape[0], ks.same)
        k64 = pair_keys64(ks.Q64, ks.R64, qi, rj, ks.metric)
        rank = relevant_ranks_by_device_count(ks, qi, rj, k64, depth, device=device, block=block, progress=progress)
        if rank is not None:
            return qi, rj, rank, False
    L = min(depth + SLACK, n_avail)
    all_q, all_r, all_rank = [], [], []
    lists = candidate_blocks(ks, L, device=device, block=block, progress=progress, desc="retrieval")
    for qi, rj, rank in blocks_in_threads(lists, lambda b: _certify_lists(ks, lay, depth, n_avail, *b), device):
        all_q.append(qi)
        all_r.append(rj)
        all_rank.append(rank)
    return np.concatenate(all_q), np.concatenate(all_r), np.concatenate(all_rank), False


def _certify_lists(ks: KeySpace, lay: _Layout, depth: int, n_avail: int, s: int, e: int, vals: np.ndarray,
                   cand: np.ndarray):
    """Exact ranks of the relevant pairs of queries s..e−1 from their candidate lists ``vals`` /
    ``cand`` (:func:`~.knn.candidate_blocks`): (query, reference, rank) of each pair."""
    complete = np.full(e - s, vals.shape[1] >= n_avail)
    qi, rj = _relevant_pairs(lay, s, e, ks.same)
    k64 = pair_keys64(ks.Q64, ks.R64, qi, rj, ks.metric)
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
    return qi, rj, rank


def _full_row_fallback(ks, qi, rj, k64, rank, unresolved, depth):
    """Rank the rare uncertified pairs from their query's full row (in place; ``k64`` needs to
    hold the float64 keys of the unresolved pairs only)."""
    u = np.flatnonzero(unresolved)
    if u.size == 0:
        return
    uq = qi[u]
    if np.any(uq[1:] < uq[:-1]):  # (the passes give pairs grouped by query: sorted already)
        o = np.argsort(uq, kind="stable")
        u, uq = u[o], uq[o]
    # each query's unresolved pairs, in pair order (a mask over all pairs per query cost N³ for a
    # collapsed model, whose every query falls back here), the rows of several queries at once (one
    # GEMM and one ranking per batch: a nearly collapsed model sends every query here, and one
    # query at a time cost ~1.3 ms each in overheads)
    groups = np.split(u, np.flatnonzero(np.diff(uq)) + 1)
    batch = max(1, FALLBACK_ROW_ELEMS // max(ks.R32.shape[0], 1))
    for g0 in range(0, len(groups), batch):
        gs = groups[g0:g0 + batch]
        qs = qi[np.array([g[0] for g in gs])]
        rows = ks.rows_keys32(qs)
        o = np.argsort(-rows, axis=1, kind="stable")
        sel = np.concatenate(gs)
        local = np.repeat(np.arange(len(gs)), [g.size for g in gs])
        rk, _ = _resolve(np.take_along_axis(rows, o, 1), o, local, rj[sel], k64[sel], ks.delta[qs],
                         np.ones(len(gs), dtype=bool), depth, qs, ks)
        rank[sel] = rk


# ----------------------------------------------------------------------------- hits within top R_i
def _hits_apart(sets: Sets, ks: KeySpace, lay: _Layout, metric: str, *, block=None, progress=False):
    """:func:`_hits_at_R` of a nearly collapsed model with a few far references
    (:func:`~.knn.outlier_refs`) searched apart, or None where that does not pay (scale not 1; the
    bulk's bound, median over its queries, not ``OUTLIER_GAIN`` times tighter than that of all
    references; no bulk reference left). As :func:`_ranks_apart`, and without its limits (no
    outlier is ranked against the bulk's rows here: the work beyond the bulk's own pass is few x N
    float64 keys):

    - a bulk query's row is its float32 row over the bulk (:class:`KeySpace` of the bulk, its own,
      tighter bound δ_q) followed by its float64 keys to the outliers (:func:`~.knn.pair_keys64`,
      no error at all); :func:`_hits_at_R`'s argument needs only that every entry of the row lie
      within δ_q of its float64 key, so it selects the R_i-th entry and certifies the band around
      it over both parts at once, the band's ties ordered by the references' own indices;
    - in a same-set search, an outlier query: its full float64 row (few x N keys).

    Every key is :func:`~.knn.pair_keys64` of the same two rows (the bulk's rows are copies, bit
    for bit), so the hits are those of the search of all references, exactly."""
    split = _outlier_split(ks)
    if split is None:
        return None
    far, near, q_near = split
    Q64, R64, same = ks.Q64, ks.R64, ks.same
    nq, nr = Q64.shape[0], R64.shape[0]
    if near.size - (1 if same else 0) < 1:
        return None
    y, y_ref, R = sets.y, sets.y_ref, lay.R
    sub_ks = _bulk_keyspace(ks, near, q_near, np.median(R[q_near]))
    if sub_ks is None:
        return None

    def out_keys(s: int, e: int) -> np.ndarray:  # bulk queries s..e-1 (places in q_near) x the outliers
        return cross_keys64(Q64, R64, q_near[s:e], far, metric)

    hits = np.zeros(nq, dtype=np.int64)
    hits[q_near] = _hits_at_R(sub_ks, y[q_near], np.concatenate([y_ref[near], y_ref[far]]), R[q_near],
                              block=block, progress=progress, extra=(out_keys, np.concatenate([near, far])))
    if same:  # the outlier queries, from their full rows
        refs = np.arange(nr)
        for q in far:
            if R[q] == 0:
                continue
            key = pair_keys64(Q64, R64, np.full(nr, q), refs, metric)
            cand = refs[refs != q]
            top = cand[np.lexsort((cand, -key[cand]))[:int(R[q])]]
            hits[q] = int(np.count_nonzero(y_ref[top] == y[q]))
    return hits


def _hits_at_R(ks: KeySpace, y, y_ref, R, *, block=None, progress=False, extra=None) -> np.ndarray:
    """Per query, the number of relevant references within its exact top R_i, without pairs.

    Per query block, one float32 GEMM; per row, v = the R_i-th largest float32 key. With δ_i the
    float32 error bound (:class:`KeySpace`), a reference whose float32 key exceeds v + 2δ_i is
    surely in the exact top R_i (fewer than R_i float32 keys exceed v, and every reference before
    it in exact order has a float32 key > v), one below v − 2δ_i surely not; the few within ±2δ_i
    of v are ranked by their float64 keys, lower index first on ties, to fill the remaining
    places. Rows are grouped by R_i so that one ``np.partition`` serves many rows.

    ``extra``: ``(keys_of, idx)``, references searched apart (:func:`_hits_apart`): ``keys_of(s, e)``
    gives queries s..e-1's float64 keys (:func:`~.knn.pair_keys64`, exact) to references that follow
    ``ks``'s in the rows (``y_ref`` then labels both, in that order), and ``idx`` is every column's
    reference index, which breaks the ties. The argument above holds for such columns (within 0 of
    their keys).
    """
    from embedscope.metrics.search.knn import _bar, default_block

    nq, nr = ks.Q32.shape[0], ks.R32.shape[0]
    idx = np.arange(nr) if extra is None else extra[1]
    ncol = idx.size
    hits = np.zeros(nq, dtype=np.int64)
    blk = int(block or default_block(nr))
    bar = _bar(progress, nq, "hits@R")
    for s in range(0, nq, blk):
        e = min(nq, s + blk)
        S = ks.rows_keys32(np.arange(s, e))  # (the query itself −inf)
        if extra is not None:
            S = np.hstack([S, extra[0](s, e)])
        Rb = R[s:e]
        for r in np.unique(Rb):
            if r == 0:
                continue
            rows = np.flatnonzero(Rb == r)
            Sr = S[rows]
            v = np.partition(Sr, ncol - r, axis=1)[:, ncol - r]
            for t, i in enumerate(rows):
                q = s + i
                d2 = 2.0 * ks.delta[q]
                row = Sr[t]
                rel = y_ref == y[q]
                if ks.same:
                    rel[q] = False
                sure = row > v[t] + d2
                n_sure = int(sure.sum())
                h = int(np.count_nonzero(sure & rel))
                win = np.flatnonzero((row >= v[t] - d2) & ~sure)
                need = int(r) - n_sure
                if need > 0 and win.size:
                    k64 = row[win]  # (the columns apart: their float64 keys already)
                    own = win < nr
                    k64[own] = pair_keys64(ks.Q64, ks.R64, np.full(int(own.sum()), q), win[own], ks.metric)
                    top = win[np.lexsort((idx[win], -k64))[:need]]
                    h += int(np.count_nonzero(rel[top]))
                hits[q] = h
        bar.update(e - s)
    bar.close()
    return hits
