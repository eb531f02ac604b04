"""Exact k-nearest-neighbour search in bounded memory (docs/methods.md §1, "Protocol").

How exactness is obtained cheaply
---------------------------------
The expensive part, the query x reference similarity matrix, is computed in **float32**.

On the CPU (:func:`topk_exact`, ``CPU_SELECT``), by float32 GEMM tiles of 512 queries x a few
thousand references (single-threaded BLAS, query blocks in one worker thread per core), never
keeping more than a tile: each query first gets a **threshold**, 2 delta_i (below) under the j-th
largest of its keys against a fixed random sample of ``max(1024, N/32)`` references (j: the
expected number of sampled keys above its k-th key plus three standard deviations); a tile keeps
only the keys at or above their query's threshold (one comparison and ``flatnonzero``, about k x
1.7 keys per query). Per query, the k-th largest float32 key ``kth32`` then gives the **window**
``tau = kth32 - 2 delta_i``: k references have float32 keys >= kth32, so exact keys >= kth32 -
delta_i, so the exact k-th key is >= kth32 - delta_i and every exact top-k reference has a float32
key >= tau. Only the window (k plus the float32 near-ties of the k-th key) gets float64 keys, by
:func:`pair_keys64` (:func:`window_keys64`: a query block's window pairs taken in ranges of
``GROUP_REFS`` references, so that each reference row comes from DRAM once per block and from cache
for the block's other queries), and is ordered by (key desc, index asc). In a same-set search each
mutual window pair's key is computed once (``REUSE_KEYS``: the key of (q, r) is that of (r, q) bit
for bit; within a block directly, across blocks a finished block hands its keys to the block of
each reference), which saves about half the float64 keys of deep windows. A query whose threshold lay above its window
(fewer than k keys above it: rare by the choice of j) is searched again in full
(:func:`_exact_topk_row`). A same-set search multiplies only the upper triangle of block pairs:
tile X_I X_J^T is compared once with the thresholds of I's queries (rows) and once with J's
(columns), with no transposed copy; a block is finished as soon as its last tile is in.

On CUDA (and on the CPU with ``CPU_SELECT = False``), each query's top ``L = k + slack``
float32 candidates come from one torch GEMM per block of queries and ``torch.topk`` (CPU: faiss's
flat search), and are then certified as follows. Memory is one block of ``block x N_ref`` floats
at a time, never ``N x N``.

The candidates are then **certified** in float64. The float32 value of a ranking key differs from
its float64 value by at most ``delta_i`` (a rigorous forward-error bound of a length-D dot product,
whatever the summation order, u = 2⁻²⁴: ``(D + 16) u ‖q_i‖ ‖r‖max`` for cosine keys, ``(D + 16) u
(‖r‖max² + 2 ‖q_i‖ ‖r‖max + ‖q_i‖²)`` for Euclidean ones, 2 q·r − ‖r‖² − ‖q‖²); the
candidates' keys are recomputed pair by pair in float64 and sorted by (key desc, reference index
asc). If the smallest float32 candidate key plus ``delta_i`` is below the k-th exact key, no
reference outside the candidates can enter the top k and the result is exact; otherwise (many
near-ties, e.g. duplicated rows) that query's full row is recomputed and ranked exactly. The
result is the exact float64 ranking with ties broken by the lower reference index, identical on
CPU and CUDA.

Ranking keys: cosine ranks by the inner product of L2-normalised rows (larger first); Euclidean by
the squared distance (smaller first).

A model collapsed to *nearly* one point (one point plus noise) has keys that differ by less than
``delta_i``: no float32 filter could separate them, and every pass would compare every pair in
float64 (quadratic). Such a search is **centred** (:func:`centre_of`, :class:`KeySpace`): the
float32 copies are the rows less their mean, the tiles compute the keys from them exactly in
exact arithmetic (Euclidean distances do not move; cosine adds a term per reference and one per
query), and ``delta_i`` scales with the rows' spread instead of their norm, plus the float64
rounding of the keys themselves. The float64 keys and therefore the ranks are those of the rows
as given.

The bound of a pair grows with its reference's distance from the mean, but ``delta_i`` is one
half-width per query, taken at the farthest reference: a few references far from a nearly
collapsed model's point (outliers) loosen every query's bound (and farther ones keep the search
from being centred at all), and the windows fill with float64 keys. :func:`topk_exact` therefore
searches such references apart (:func:`outlier_refs`, :func:`_knn_apart`): the rest by its own
bound, the outliers' float64 keys directly, merged exactly (so do the relevant ranks,
``ranks._ranks_apart``, and their hits within the top R_i, ``ranks._hits_apart``).
"""

from __future__ import annotations

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.metrics.scale import unit_rows
from embedscope.metrics.search.threads import blas_single_thread
from embedscope.validation import check_bool, check_int, check_matrix

__all__ = ["knn_search"]

METRICS = ("cosine", "euclidean")
FAISS_MIN_L = 0  # CPU candidate lists longer than this come from faiss (0: always)
SLACK = 16  # extra float32 candidates per query kept for the float64 certification
U32 = 2.0 ** -24
_MAX_BLOCK_ELEMS = 1 << 26  # float32 block of at most 256 MiB
CPU_SELECT = True  # topk_exact on the CPU: own GEMM tiles + per-query threshold (False: candidate_blocks)
CPU_BLOCK = 512  # queries per block of the CPU search
CHUNK_BYTES = 1 << 21  # references per float32 tile: their float64 rows fill at most 2 MiB
SAMPLE_MIN, SAMPLE_DIV = 1024, 32  # references sampled for the threshold: max(1024, N / 32)
SAMPLE_SIGMAS, SAMPLE_EXTRA = 3.0, 2.0  # margin of the sample rank over its expectation
SYMMETRIC = True  # same set: one tile per pair of query blocks I <= J (half the GEMM)
GROUP_REFS = 512  # window keys computed per range of this many references (window_keys64)
REUSE_KEYS = True  # same set: a finished block hands each window key to the block of its reference
REUSE_MAX_BLOCK = 2048  # ... with blocks up to this many queries (a b x b int32 table per thread),
REUSE_MAX_BYTES = 1 << 30  # ... holding at most this many bytes of handed-over keys at a time (12 per pair)
EUCLIDEAN_NORM_SAFE = (2.0 ** -32, 2.0 ** 32)  # largest norms outside: float32 keys may under/overflow (KeySpace)


# ----------------------------------------------------------------------------- input checks
def check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise EmbedscopeError(f"unknown metric '{metric}' (choose cosine or euclidean)")
    return metric


def prepare(A64: np.ndarray, metric: str, name: str = "X", *, inplace: bool = False) -> np.ndarray:
    """Rows L2-normalised (float64) for cosine; unchanged for Euclidean. ``inplace``: divide
    ``A64`` itself (a private copy, see :func:`checked_rows`; the same values bit for bit)."""
    if metric == "cosine":  # rows whose ‖x‖² under- or overflows: scaled by a power of two first (exact)
        A64, zero = unit_rows(A64, inplace=inplace)
        if zero.any():
            i = int(np.flatnonzero(zero)[0])
            raise EmbedscopeError(f"row {i} of {name} is all zeros: its cosine similarity is undefined")
    return A64


def euclidean_scale(Q64: np.ndarray, R64: np.ndarray, qn: np.ndarray, rn: np.ndarray) -> float:
    """The power of two 2^s by which a Euclidean search scales queries and references (both): 1
    while the largest row norm lies within ``EUCLIDEAN_NORM_SAFE`` (every usual embedding: nothing changes),
    else the one that brings the largest absolute entry into [0.5, 1). Scaling both sets by a power
    of two multiplies every squared distance by 2^2s exactly (barring float64 underflow of entries
    far below the largest), so the ranking is that of the rows as given; it keeps the float32 keys
    of the bulk GEMMs, squared norms included, away from float32 overflow (norms from ~2^64 on)
    and underflow (below ~2^-62, where their error bound no longer holds)."""
    lo, m = row_scales(Q64) if R64 is Q64 else row_scales(Q64, R64)
    if m == 0.0:  # every row zero: all keys 0, nothing to scale
        return 1.0
    e = int(np.frexp(m)[1])
    # the span is checked whatever the largest row's scale (also unscaled, largest norm near 1: rows of 1e-170
    # beside rows of 1 have squared differences that underflow and tie all the same)
    if lo > 0 and e - int(np.frexp(lo)[1]) > EUCLIDEAN_SPAN_LIMIT:
        raise EmbedscopeError(
            f"the rows' scales span {lo:.3g} to {m:.3g} (more than 2^{EUCLIDEAN_SPAN_LIMIT}): squared Euclidean "
            "distances that far apart are not ranked together (the small rows' come near float64's underflow, "
            "where they lose their digits, then tie at 0): rescale the rows or leave out the outlying ones")
    top = max(float(qn.max(initial=0.0)), float(rn.max(initial=0.0)))
    if EUCLIDEAN_NORM_SAFE[0] < top < EUCLIDEAN_NORM_SAFE[1]:
        return 1.0
    return float(np.ldexp(1.0, -e))


#: the most binary orders of magnitude between the largest and the smallest non-zero row (largest
#: entries) that a scaled Euclidean search ranks: beyond, the small rows' squared differences underflow
EUCLIDEAN_SPAN_LIMIT = 400


def row_scales(*arrays: np.ndarray) -> tuple[float, float]:
    """``(smallest, largest)`` over the rows of ``arrays`` of each row's largest |entry|, the smallest over
    the non-zero rows (0.0 when every row is zero): one pass of two row reductions per array, no |X|
    temporary. The scale span of :func:`euclidean_scale` and of the scatter's Euclidean and dot similarities
    (:func:`embedscope.metrics.neighbours.nearest_same_different`)."""
    lo, top = np.inf, 0.0
    for A in arrays:
        if A.size == 0:
            continue
        t = np.maximum(A.max(axis=1), -A.min(axis=1))
        top = max(top, float(t.max()))
        lo = min(lo, float(t[t > 0].min(initial=np.inf)))
    return (0.0 if lo == np.inf else lo), top


def checked_rows(X, name: str) -> tuple[np.ndarray, bool]:
    """``check_matrix(X, name, dtype=float64)`` and whether the result is a private copy that
    :func:`prepare` may normalise in place: a list, or an array whose memory it does not share
    (float32 input, say). Never the caller's own array or memory map; other inputs (tensors,
    datasets) count as shared. In place saves an N x D float64 allocation: at 6,000 x 2,048, after
    another library had freed large arrays, that fresh 98 MB took 0.22-0.27 s of page faults
    (transparent huge pages compacted on fault) against 0.03 s."""
    A = check_matrix(X, name, dtype=np.float64)
    owned = isinstance(X, (list, tuple)) or (isinstance(X, np.ndarray) and not np.may_share_memory(A, X))
    return A, owned


def prepared_rows(X, metric: str, name: str) -> np.ndarray:
    """:func:`checked_rows` then :func:`prepare`: the rows as the searches rank them, normalised in
    place where they are a private copy."""
    A, own = checked_rows(X, name)
    return prepare(A, metric, name, inplace=own)


def default_block(n_ref: int, device_type: str = "cpu") -> int:
    """Queries per block so that one float32 block stays under 256 MiB (CPU) / 1 GiB (CUDA)."""
    cap = _MAX_BLOCK_ELEMS * (4 if device_type == "cuda" else 1)
    return int(max(16, min(4096 if device_type == "cuda" else 2048, cap // max(n_ref, 1))))


# ----------------------------------------------------------------------------- float64 pair keys
def pair_keys64(Q64: np.ndarray, R64: np.ndarray, qi: np.ndarray, rj: np.ndarray, metric: str, *,
                chunk_bytes: int = 1 << 20) -> np.ndarray:
    """Exact ranking keys (larger = nearer) of pairs (qi[p], rj[p]) in float64, pair by pair.

    Cosine: the inner product of the (normalised) rows; Euclidean: minus the squared distance.
    Each pair is reduced on its own, so identical reference rows give bitwise-identical keys, and
    the result does not depend on ``chunk_bytes``: the rows are gathered into two reused buffers of
    that size (fresh arrays per chunk cost more in page faults than the arithmetic at large D; and
    buffers of several MiB are fresh memory at every call: 1 MiB measured 1.3–5× faster than 8 MiB
    at D = 128–2,048 for 3,000–100,000 pairs). The gathers use ``np.take(..., mode="clip")``:
    under the default ``mode="raise"`` numpy writes into a fresh temporary and copies it to ``out``
    (1.4–2.2× slower per gathered row, measured); the indices are checked here once instead.
    """
    n, d = len(qi), Q64.shape[1]
    out = np.empty(n, dtype=np.float64)
    if n == 0:
        return out
    _check_index(qi, Q64.shape[0], "qi")
    _check_index(rj, R64.shape[0], "rj")
    nr = R64.shape[0]
    if n >= ROW_RUN_SHARE * nr > 0:  # long runs of one query (the union of a collapsed model's windows):
        # its keys against every reference at once, read off per pair (no gathered rows)
        cut = np.flatnonzero(qi[1:] != qi[:-1]) + 1
        starts, ends = np.r_[0, cut], np.r_[cut, n]
        long = (ends - starts) >= ROW_RUN_SHARE * nr
        if long.any():
            rest = np.ones(n, dtype=bool)
            for a, b in zip(starts[long], ends[long]):
                out[a:b] = _row_keys64(Q64[qi[a]], R64, metric, chunk_bytes)[rj[a:b]]
                rest[a:b] = False
            if rest.any():
                at = np.flatnonzero(rest)
                out[at] = pair_keys64(Q64, R64, qi[at], rj[at], metric, chunk_bytes=chunk_bytes)
            return out
    step = max(16, chunk_bytes // (8 * max(d, 1)))
    A, B = np.empty((min(step, n), d)), np.empty((min(step, n), d))
    for c in range(0, n, step):
        m = min(step, n - c)
        a = np.take(Q64, qi[c:c + m], axis=0, out=A[:m], mode="clip")
        b = np.take(R64, rj[c:c + m], axis=0, out=B[:m], mode="clip")
        o = out[c:c + m]
        if metric == "cosine":
            np.einsum("ij,ij->i", a, b, out=o)
        else:
            np.subtract(a, b, out=a)
            np.einsum("ij,ij->i", a, a, out=o)
            np.negative(o, out=o)
    return out


ROW_RUN_SHARE = 0.25  # pair_keys64: a run of one query's pairs this long (x references) takes the whole row


def _row_keys64(q: np.ndarray, R64: np.ndarray, metric: str, chunk_bytes: int) -> np.ndarray:
    """:func:`pair_keys64` of one query against every reference, bitwise the same: each key is the
    same reduction of the same row pair (numpy's einsum over the contiguous dimension; the query
    broadcast rather than gathered), without gathering rows."""
    nr, d = R64.shape
    out = np.empty(nr)
    if metric == "cosine":
        np.einsum("ij,ij->i", R64, np.broadcast_to(q, R64.shape), out=out)
        return out
    step = max(16, chunk_bytes // (8 * max(d, 1)))
    buf = np.empty((min(step, nr), d))
    for c in range(0, nr, step):
        m = min(step, nr - c)
        a = np.subtract(q, R64[c:c + m], out=buf[:m])  # q - r, as the gathered rows are subtracted
        o = out[c:c + m]
        np.einsum("ij,ij->i", a, a, out=o)
        np.negative(o, out=o)
    return out


def cross_keys64(Q64: np.ndarray, R64: np.ndarray, qs: np.ndarray, rs: np.ndarray, metric: str, *,
                 chunk_bytes: int = 1 << 20) -> np.ndarray:
    """:func:`pair_keys64` of every query ``qs`` with every reference ``rs``, as a (len(qs), len(rs))
    array, bitwise the same: each key the same reduction of the same row pair (numpy's einsum over
    the contiguous dimension, the reference broadcast as in :func:`_row_keys64`), without gathering
    a reference row per pair. For a few references (a nearly collapsed model's outliers) against
    many queries: the queries gathered once per chunk that stays in cache, every reference against
    it (6,000 queries x 600 outliers at D = 128: about 3x faster than the pair by pair gathers)."""
    qs = np.asarray(qs, dtype=np.int64)
    rs = np.asarray(rs, dtype=np.int64)
    d = Q64.shape[1]
    out = np.empty((qs.size, rs.size), dtype=np.float64)
    if out.size == 0:
        return out
    _check_index(qs, Q64.shape[0], "qs")
    _check_index(rs, R64.shape[0], "rs")
    step = max(16, chunk_bytes // (8 * max(d, 1)))
    A = np.empty((min(step, qs.size), d))
    B = np.empty_like(A) if metric != "cosine" else None
    col = np.empty(min(step, qs.size))
    for c in range(0, qs.size, step):
        m = min(step, qs.size - c)
        a = np.take(Q64, qs[c:c + m], axis=0, out=A[:m], mode="clip")
        o = col[:m]
        for j, r in enumerate(rs):
            if metric == "cosine":
                np.einsum("ij,ij->i", a, np.broadcast_to(R64[r], a.shape), out=o)
            else:
                b = np.subtract(a, R64[r], out=B[:m])  # q - r, as the gathered rows are subtracted
                np.einsum("ij,ij->i", b, b, out=o)
                np.negative(o, out=o)
            out[c:c + m, j] = o
    return out


def _check_index(i: np.ndarray, n: int, name: str) -> None:
    """Row indices must lie in [0, n): the gathers clip rather than check (see pair_keys64)."""
    if i.size and (int(i.min()) < 0 or int(i.max()) >= n):
        raise IndexError(f"{name} holds an index outside [0, {n})")


def block_keys64(Q64: np.ndarray, R64: np.ndarray, s: int, cand: np.ndarray, metric: str, *,
                 chunk_bytes: int = 1 << 20) -> np.ndarray:
    """Float64 keys of queries ``s, s + 1, …`` against their candidate references ``cand``
    (b × L), bitwise equal to :func:`pair_keys64` (the same per-pair reduction), without gathering a
    copy of the query row for every pair. The candidate rows are gathered into one reused buffer
    of about ``chunk_bytes`` (at least one query's row of candidates)."""
    b, L = cand.shape
    d = R64.shape[1]
    out = np.empty((b, L), dtype=np.float64)
    if b == 0 or L == 0:
        return out
    _check_index(cand, R64.shape[0], "cand")
    step = max(1, chunk_bytes // (8 * d * L))
    buf = np.empty((min(step, b), L, d))
    for c in range(0, b, step):
        m = min(step, b - c)
        g = np.take(R64, cand[c:c + m], axis=0, out=buf[:m], mode="clip")
        q = Q64[s + c:s + c + m]
        o = out[c:c + m]
        if metric == "cosine":
            np.einsum("bld,bd->bl", g, q, out=o)
        else:
            g -= q[:, None, :]
            np.einsum("bld,bld->bl", g, g, out=o)
            np.negative(o, out=o)
    return out


DENSE_WINDOW = 16  # from this mean window size (members per pair), tie_window_before's union of windows,
DENSE_PLACES = 2.0  # ... or from this many window members per place their rows hold (see dense_windows)
TIE_CHUNK_PLACES = 1 << 23  # the union's places are taken a few rows at a time beyond this many


def dense_windows(members: int, pairs: int, places: int) -> bool:
    """Whether windows of ``members`` places in all, of ``pairs`` pairs, whose rows hold ``places``
    places (at least the union of the windows), are counted from their union
    (:func:`tie_window_before`: one float64 key per union member and row) rather than member by
    member: a mean window of ``DENSE_WINDOW`` or more (a collapsed model's ties), or windows that
    cover their rows' places ``DENSE_PLACES`` times or more (many pairs per row with small but
    overlapping windows: classes of hundreds in a model nearly collapsed to the float64 rounding
    of its keys)."""
    return members >= DENSE_WINDOW * pairs or members >= DENSE_PLACES * places


def tie_window_before(n_places: int, lo: np.ndarray, hi: np.ndarray, pair_row: np.ndarray, kp: np.ndarray,
                      idp: np.ndarray, row_of, ref_at, keys_of, *, greater_high: bool,
                      ref_class: np.ndarray | None = None) -> np.ndarray:
    """Per pair, the members of its window ``[lo, hi)`` (places in rows of sorted float32 keys)
    that rank before it: float64 key larger than ``kp`` (the pair's exact key, :func:`pair_keys64`),
    or equal with a reference index below ``idp`` (the pair's own reference is never counted).

    The passes compare each pair with the members of its window (float32 keys within the error
    bound of its key) pair by pair: a handful of members for real embeddings, but with many equal
    keys (a model collapsed to one point, or to a few) every window holds most of the row, and the
    comparisons grow as N³ (and the window lists as N³ memory). Here the windows of a row are
    merged (their union) and its members grouped by reference row content (``ref_class``:
    references with bitwise-identical rows share a class, and :func:`pair_keys64` gives them
    bitwise-identical keys): one float64 key per (row, class); ``ref_class`` None (every reference
    row distinct, as in a model collapsed to nearly one point) makes each member its own group.
    Groups and pairs sorted together per row by key (one argsort per padded row where rows have
    similar lengths) give each pair the members of larger keys; within a group of equal key, the
    members of lower reference index are counted by a binary search of the group's sorted
    references. The union's members on the larger side of a pair's window (float32 keys above
    its key by more than the bound: all larger) are then taken off; those on the other side are
    all smaller. The same counts as the pair-by-pair comparison, in O(U log U) for U members of
    the union and one key per group.

    ``n_places``: the places the windows index; ``row_of(places)``: their rows (places sorted by
    row, rows non-decreasing with the place); ``ref_at(places)``: their references;
    ``keys_of(rows, refs)``: float64 keys (:func:`pair_keys64` of the rows' queries);
    ``greater_high``: larger keys lie at higher places of a row (ascending rows) or lower
    (descending); ``ref_class``: per reference, its class of identical rows (:meth:`KeySpace.ref_classes`;
    None: every reference its own).
    """
    m = lo.size
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    lo, hi, pair_row = (np.asarray(a, dtype=np.int64) for a in (lo, hi, pair_row))
    if n_places > TIE_CHUNK_PLACES:  # a few rows at a time: the union's arrays stay bounded (a
        # collapsed SOP-sized set has ~N survivors in each of a block's 1,024 rows)
        if np.any(pair_row[1:] < pair_row[:-1]):  # pragma: no cover - every pass gives pairs by row
            raise AssertionError("tie_window_before: pairs must come grouped by row")
        out = np.empty(m, dtype=np.int64)
        cut = np.flatnonzero(np.diff(pair_row)) + 1  # each row's first pair
        starts = np.r_[0, cut]
        ends = np.r_[cut, m]
        span_lo = np.minimum.reduceat(lo, starts)
        span_hi = np.maximum.reduceat(hi, starts)
        a = 0
        while a < starts.size:
            b = a + 1
            while b < starts.size and span_hi[b] - span_lo[a] <= TIE_CHUNK_PLACES:
                b += 1
            p0, p1 = starts[a], ends[b - 1]
            base, stop = int(span_lo[a]), int(span_hi[a:b].max())
            out[p0:p1] = _tie_window_rows(
                stop - base, lo[p0:p1] - base, hi[p0:p1] - base, pair_row[p0:p1], kp[p0:p1], idp[p0:p1],
                lambda at, _b=base: row_of(at + _b), lambda at, _b=base: ref_at(at + _b), keys_of,
                greater_high=greater_high, ref_class=ref_class)
            a = b
        return out
    return _tie_window_rows(n_places, lo, hi, pair_row, kp, idp, row_of, ref_at, keys_of, greater_high=greater_high,
                            ref_class=ref_class)


def padded_row_order(row: np.ndarray, slot: np.ndarray, values: np.ndarray, per_row: np.ndarray) -> np.ndarray:
    """The elements' indices in order of (row, value), equal values in any order: each element put
    at (row, slot) of a table of ``per_row.size`` rows padded to the longest (slots 0 … per_row − 1
    of each row, each once), and the rows sorted by one argsort (SIMD, each row in cache: 8x one
    argsort of every value plus a radix sort by row, at 1,024 rows of 5,000). Values must be below
    +inf (the pads). For rows of similar lengths (the table is ~ the elements)."""
    span, width = per_row.size, int(per_row.max(initial=0))
    flat = row * width + slot
    M = np.full(span * width, np.inf)
    M[flat] = values
    E = np.zeros(span * width, dtype=np.int64)
    E[flat] = np.arange(values.size)
    A = np.argsort(M.reshape(span, width), axis=1)  # pads (+inf) last
    return np.take_along_axis(E.reshape(span, width), A, 1)[np.arange(width) < per_row[:, None]]


def union_places(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The places of the union of the windows ``[lo, hi)``, increasing: the windows merged into
    intervals (a sort of the windows, not a pass over every place)."""
    on = hi > lo
    lo, hi = lo[on], hi[on]
    if lo.size == 0:
        return np.zeros(0, dtype=np.int64)
    o = np.argsort(lo, kind="stable")
    lo, hi = lo[o], hi[o]
    reach = np.maximum.accumulate(hi)
    new = np.ones(lo.size, dtype=bool)
    new[1:] = lo[1:] > reach[:-1]  # a gap before this window: a new interval
    at = np.flatnonzero(new)
    start, end = lo[at], reach[np.append(at[1:], lo.size) - 1]
    ln = end - start
    return np.repeat(start - (np.cumsum(ln) - ln), ln) + np.arange(int(ln.sum()))


def _tie_window_rows(n_places, lo, hi, pair_row, kp, idp, row_of, ref_at, keys_of, *, greater_high, ref_class):
    """:func:`tie_window_before` of pairs whose windows lie in ``n_places`` places (at most
    ``TIE_CHUNK_PLACES`` unless one row holds more)."""
    m = lo.size
    U = union_places(lo, hi)  # the union of the windows, in place order
    rows_u = np.asarray(row_of(U), dtype=np.int64)
    ids_u = np.asarray(ref_at(U), dtype=np.int64)
    pair_row = np.asarray(pair_row, dtype=np.int64)
    idp = np.asarray(idp, dtype=np.int64)
    kp = np.asarray(kp, dtype=np.float64)
    if ref_class is None:  # every member its own group, in place order (rows non-decreasing)
        g_row, g_ref, size, comb, first, nref = rows_u, ids_u, None, None, None, 0
    else:  # members grouped by (row, class of identical rows), references ascending within a group
        cls_u = ref_class[ids_u]
        nref = int(max(ids_u.max(initial=0), idp.max(initial=0))) + 1
        ncls = int(cls_u.max(initial=0)) + 1
        if (int(rows_u.max(initial=0)) + 1) * ncls * nref < 2**62:  # one integer sort (3-4x a lexsort's speed)
            o = np.argsort((rows_u * ncls + cls_u) * nref + ids_u)
        else:  # pragma: no cover - beyond 2^62 (rows x classes x references)
            o = np.lexsort((ids_u, cls_u, rows_u))
        r_s, c_s = rows_u[o], cls_u[o]
        new = np.ones(o.size, dtype=bool)
        new[1:] = (r_s[1:] != r_s[:-1]) | (c_s[1:] != c_s[:-1])
        first = np.flatnonzero(new)
        size = np.diff(np.append(first, o.size))
        comb = (np.cumsum(new) - 1) * nref + ids_u[o]  # (group, reference): increasing
        g_row, g_ref = r_s[first], ids_u[o][first]
    ng = g_row.size
    kg = keys_of(g_row, g_ref)  # one key per group
    # Groups and pairs of each row by key descending (equal keys in any order). A pair is preceded by
    # the members of the groups before its run of equal (row, key); the groups of its own key are
    # those of its run.
    n = ng + m
    r0 = int(min(g_row[0], pair_row.min())) if ng else int(pair_row.min())  # (g_row: non-decreasing)
    span = int(max(g_row[-1], pair_row.max()) if ng else pair_row.max()) - r0 + 1
    g_cnt = np.bincount(g_row - r0, minlength=span)
    p_cnt = np.bincount(pair_row - r0, minlength=span)
    per_row = g_cnt + p_cnt
    row_first = np.cumsum(per_row) - per_row  # each row's first sorted place
    key = np.concatenate([kg, kp])
    rows_all = np.concatenate([g_row, pair_row]) - r0
    width = int(per_row.max(initial=0))
    if span * width <= 2 * n + 4096:  # rows of similar lengths: one argsort per padded row
        # (padded_row_order); in each row the groups first (in their order: g_row is non-decreasing),
        # then the pairs
        slot = np.empty(n, dtype=np.int64)
        slot[:ng] = np.arange(ng) - (np.cumsum(g_cnt) - g_cnt)[g_row - r0]
        po = np.argsort(pair_row, kind="stable")
        pr = pair_row[po] - r0
        slot[ng + po] = g_cnt[pr] + np.arange(m) - (np.cumsum(p_cnt) - p_cnt)[pr]
        order = padded_row_order(rows_all, slot, -key, per_row)
    else:
        order = np.argsort(-key)
        order = order[np.argsort(rows_all.astype(np.int16 if span <= 2**15 else np.int64)[order], kind="stable")]
    s_key = key[order]
    brk = np.ones(n, dtype=bool)  # a new run of equal (row, key) starts here
    np.not_equal(s_key[1:], s_key[:-1], out=brk[1:])
    brk[row_first[per_row > 0]] = True
    run_at = np.append(np.flatnonzero(brk), n)  # each run's first place, and the end
    is_g = order < ng
    place = np.flatnonzero(~is_g)  # the pairs' sorted places (increasing)
    at = np.empty(m, dtype=np.int64)
    at[order[place] - ng] = place  # each pair's sorted place
    few = 8 * m < n  # few pairs: binary searches of the pairs' places; else running counts of all places
    rid = np.searchsorted(run_at, at, side="right") - 1 if few else np.cumsum(brk)[at] - 1
    rs, a0, a1 = row_first[pair_row - r0], run_at[rid], run_at[rid + 1]
    if few:
        def groups_before(x):  # the groups among the sorted places before x
            return x - np.searchsorted(place, x, side="left")
    else:
        grp = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(is_g, out=grp[1:])

        def groups_before(x):
            return grp[x]

    if size is None:
        greater = groups_before(a0) - groups_before(rs)
    else:
        mem = np.zeros(n + 1, dtype=np.int64)  # members before each sorted place
        np.cumsum(np.where(is_g, size[np.minimum(order, ng - 1)] if ng else 0, 0), out=mem[1:])
        greater = mem[a0] - mem[rs]
    # the groups of the pair's own key (its run; usually its own reference's group): members of
    # lower index
    g0 = groups_before(a0)
    n_eq = groups_before(a1) - g0
    if n_eq.any():
        g_sorted = order[is_g]  # the groups by (row, key descending)
        rep = np.repeat(np.arange(m), n_eq)
        e = g_sorted[np.repeat(g0 - (np.cumsum(n_eq) - n_eq), n_eq) + np.arange(rep.size)]
        if size is None:
            lower = g_ref[e] < idp[rep]
        else:
            lower = np.searchsorted(comb, e * nref + idp[rep], side="left") - first[e]
        greater = greater + np.bincount(rep, weights=lower, minlength=m).astype(np.int64)
    if greater_high:  # the union's members of the row at or above the window's end
        outside = np.searchsorted(rows_u, pair_row, side="right") - np.searchsorted(U, hi, side="left")
    else:  # ... below the window's start
        outside = np.searchsorted(U, lo, side="left") - np.searchsorted(rows_u, pair_row, side="left")
    return greater - outside


def identical_rows(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``A`` compared bit for bit: (the index of each distinct row's first occurrence,
    per row the number of its distinct row). Bitwise-identical rows give bitwise-identical keys
    (:func:`pair_keys64`), so ties among them need one key."""
    A = np.ascontiguousarray(A)
    rows = A.view(np.dtype((np.void, A.dtype.itemsize * A.shape[1]))).ravel()
    _, first, inv = np.unique(rows, return_index=True, return_inverse=True)
    return first, inv.astype(np.int64).ravel()


def window_keys64(ks: "KeySpace", qi: np.ndarray, rj: np.ndarray, group: int = GROUP_REFS) -> np.ndarray:
    """:func:`pair_keys64` of pairs given grouped by query, computed in the order of reference
    ranges of ``group`` rows (a stable radix sort of ``rj // group``) and returned in the given
    order. A query block's windows touch most references, each several times: in reference
    order a range's rows are read from DRAM once and then from cache for the block's other
    queries, instead of once per query (the same keys bit for bit)."""
    if qi.size == 0:
        return np.empty(0)
    g = rj // group
    if int(g.max()) < 32_768:
        g = g.astype(np.int16)
    o = np.argsort(g, kind="stable")
    out = np.empty(qi.size)
    out[o] = pair_keys64(ks.Q64, ks.R64, np.take(qi, o, mode="clip"), np.take(rj, o, mode="clip"), ks.metric)
    return out


def _slot_lookup(slots: np.ndarray, at: np.ndarray, need: np.ndarray) -> np.ndarray:
    """The position in ``at`` (distinct codes) of each code of ``need``, −1 where it is absent,
    through ``slots``: a table of −1 over every code, written and then left all −1 again."""
    slots[at] = np.arange(at.size, dtype=np.int32)
    p = np.take(slots, need)
    slots[at] = -1
    return p


CENTRE = True  # nearly collapsed sets are searched about their mean (centre_of; False: never)
CENTRE_GAIN = 16.0  # a search is centred (KeySpace) when that makes its error bound this many times tighter,
CENTRE_WINDOW = 4.0  # ... and, for cosine, when the bound of the rows as given spans this many references' keys,
CENTRE_RESOLVED = 2.0  # ... and when a row's keys spread over this many times the float64 rounding of a key
CENTRE_SAMPLE = 1024  # rows of a large search that answer first (a no there is final)


def centre_of(Q64: np.ndarray, R64: np.ndarray, metric: str, same: bool, delta: np.ndarray) -> np.ndarray | None:
    """The point about which :class:`KeySpace` measures the rows (the references' mean), or None
    where that would not help: :func:`centre_and_spread` without its second value."""
    return centre_and_spread(Q64, R64, metric, same, delta)[0]


def centre_and_spread(Q64: np.ndarray, R64: np.ndarray, metric: str, same: bool, delta: np.ndarray, *,
                      q2: np.ndarray | None = None, r2: np.ndarray | None = None):
    """``(centre, spread)``: the point about which :class:`KeySpace` measures the rows (the
    references' mean), or None where that would not help; and ``(median ‖r − c‖, median ‖r‖)`` of
    the references looked at (c their mean: all of them, or the sample that answered), which
    :func:`outlier_refs` asks of a search that is not centred (None where no rows were looked at).
    ``q2``, ``r2``: the rows' squared norms where the caller has them (``einsum("ij,ij->i")``; else
    computed here). A model collapsed to nearly one point (one point plus noise) is
    centred: there the bound ``delta`` of the rows as given exceeds every difference between
    keys, and each pass would compare every pair in float64.

    Euclidean: centred where that makes the bound at least ``CENTRE_GAIN`` times tighter for the
    median query (distances do not change, nor the passes' work). Cosine: also only where the
    keys are crowded, about ``CENTRE_WINDOW`` or more references' keys (N · delta / spread) within
    the bound, since a centred cosine search gives up the symmetric tile, the chunked inner
    dimension and the bfloat16 pre-filter; rows that merely share a direction (non-negative
    features) keep them; and only where the keys spread beyond the float64 rounding of the keys
    themselves (q·r of unit rows: ~1e-13), which no float32 filter can go below. Decided from
    norms by the identity ‖x − c‖² = ‖x‖² − 2 x·c + ‖c‖² (two matrix-vector products; an
    estimate, only to decide)."""
    if not CENTRE or Q64.shape[0] == 0 or R64.shape[0] == 0:
        return None, None
    n = R64.shape[0]
    if n > 2 * CENTRE_SAMPLE:  # the same question of a sample of the rows first: usual embeddings
        # are turned down at a fraction of the cost (150 ms at 120,000 x 512 for all rows)
        pick = np.arange(0, n, n // CENTRE_SAMPLE)[:CENTRE_SAMPLE]
        S = R64[pick]
        s2 = np.einsum("ij,ij->i", S, S) if r2 is None else r2[pick]
        c, spread = _centre_of(S, S, metric, True, delta[pick] if same else delta[:CENTRE_SAMPLE], n, s2, s2)
        if c is None:
            return None, spread
    if r2 is None:
        r2 = np.einsum("ij,ij->i", R64, R64)
    if q2 is None:
        q2 = r2 if same else np.einsum("ij,ij->i", Q64, Q64)
    return _centre_of(Q64, R64, metric, same, delta, n, q2, r2)


def _centre_of(Q64, R64, metric, same, delta, n_ref, qn2, rn2):
    """:func:`centre_and_spread` of these rows (``n_ref``: the references of the whole search;
    ``qn2``, ``rn2``: the rows' squared norms)."""
    # (numpy's own loops, not BLAS: a multi-threaded BLAS call here leaves its threads spinning
    # against the search's worker threads that start next, ~30 ms at 6,000 x 128)
    c = R64.mean(axis=0)
    cc = float(np.einsum("i,i->", c, c))
    rc = np.einsum("ij,j->i", R64, c)
    qc = rc if same else np.einsum("ij,j->i", Q64, c)
    rn_c2 = rn2 - 2.0 * rc + cc
    spread_refs = (float(np.median(np.sqrt(np.maximum(rn_c2, 0.0)))), float(np.median(np.sqrt(rn2))))
    rmax_c = float(np.sqrt(max(float(np.max(rn_c2)), 0.0)))
    qn_c = np.sqrt(np.maximum(qn2 - 2.0 * qc + cc, 0.0))
    d = Q64.shape[1]
    plain = float(np.median(delta))
    if metric == "euclidean":  # (its float64 rounding scales with the spread too)
        est = (d + 16) * U32 * 1.05 * float(np.median(qn_c) + rmax_c) ** 2
        return (c if CENTRE_GAIN * est <= plain else None), spread_refs
    spread = float(np.median(qn_c)) * rmax_c + 2.0 * float(np.max(np.abs(rc - cc)))  # of a row's keys, about
    f64 = (d + 4) * 2.0 ** -53 * 8.0 * (1.0 + cc)  # the float64 rounding of the keys themselves, about
    est = (d + 16) * U32 * 1.05 * spread + f64
    crowded = n_ref * plain >= CENTRE_WINDOW * spread
    return (c if crowded and CENTRE_GAIN * est <= plain and spread >= CENTRE_RESOLVED * f64 else None), spread_refs


class KeySpace:
    """Float32 copies of queries and references as the tiles multiply them, and the per-query bound
    ``delta`` on |float32 key estimate − float64 key|.

    ``Q64``/``R64`` are the rows searched: the given ones, or for Euclidean rows with extreme norms
    the given ones times ``scale`` (a power of two, see :func:`euclidean_scale`; else 1). Every
    float64 key (:func:`pair_keys64`) is computed from them.

    A tile holds ``two · (Q32 · R32ᵀ) − rsub32`` (float32), and the key estimate is that value (in
    float64) minus ``qoff`` (per query, float64):

    - cosine (``plain``): Q32, R32 the rows; ``two`` 1, no ``rsub32``, ``qoff`` 0;
    - Euclidean: ``two`` 2, ``rsub32`` = ‖r‖² (float32), ``qoff`` = ‖q‖², so that the estimate is
      2 q·r − ‖r‖² − ‖q‖² = −‖q − r‖²;
    - **centred** (:func:`centre_of`: a model collapsed to *nearly* one point, whose float32 keys
      all lie within the error bound of one another): the rows less their mean ``c``, so that the
      bound scales with their spread, not their norm. Euclidean as above on q' = q − c and
      r' = r − c (distances do not change); cosine q·r = q'·r' + c·r' + c·q' + ‖c‖², with
      ``rsub32`` = −c·r' and ``qoff`` = −(c·q' + ‖c‖²). ``delta`` then adds the float64 rounding
      of the keys themselves (``pair_keys64`` of the uncentred rows), which no longer vanishes
      beside the float32 error (:meth:`_centred_delta`).

    ``centre``: None lets :func:`centre_of` decide; True centres on the references' mean, False
    never (tests). The attribute ``centre`` is that mean, or None.
    """

    def __init__(self, Q64: np.ndarray, R64: np.ndarray, metric: str, same: bool, *, centre: bool | None = None):
        self.metric = metric
        self.same = same
        q2 = np.einsum("ij,ij->i", Q64, Q64)  # squared norms (centre_and_spread's too)
        r2 = q2 if same else np.einsum("ij,ij->i", R64, R64)
        qn = np.sqrt(q2)
        rn = qn if same else np.sqrt(r2)
        # Euclidean rows with norms far from 1 are searched scaled by a power of two (exact; see
        # euclidean_scale): keys are then scale² times the keys of the rows as given
        self.scale = euclidean_scale(Q64, R64, qn, rn) if metric == "euclidean" else 1.0
        if self.scale != 1.0:
            Q64 = Q64 * self.scale
            R64 = Q64 if same else R64 * self.scale
            q2 = np.einsum("ij,ij->i", Q64, Q64)
            r2 = q2 if same else np.einsum("ij,ij->i", R64, R64)
            qn = np.sqrt(q2)
            rn = qn if same else np.sqrt(r2)
        self.Q64, self.R64 = Q64, R64
        self.rmax = rmax = float(rn.max())  # largest reference norm (float64)
        self.qsq = qn * qn  # float64 ‖q‖² of the rows searched
        d = Q64.shape[1]
        self.two = 2.0 if metric == "euclidean" else 1.0
        self.delta = (d + 16) * U32 * 1.05 * (rmax * rmax + 2.0 * qn * rmax + qn * qn) + 1e-300
        self.ref_spread = None  # (median ‖r − c‖, median ‖r‖) of the references centre_and_spread looked at
        if centre is None:
            c, self.ref_spread = centre_and_spread(Q64, R64, metric, same, self.delta, q2=q2, r2=r2)
        else:
            c = R64.mean(axis=0) if centre else None
        self.centre = c
        self.plain = metric == "cosine" and c is None  # the tile is the key itself (symmetric, chunked, bfloat16)
        if self.plain:
            # the key is q·r alone: |fl32(q32·r32) − q·r| ≤ γ_D Σ|q_k r_k| + (2u + u²) Σ|q_k r_k| (the rows'
            # rounding to float32), and Σ|q_k r_k| ≤ ‖q‖ ‖r‖ (Cauchy–Schwarz): (D + 16) u ‖q‖ ‖r‖max, a
            # quarter of the general bound above for unit rows (whose ‖r‖² and ‖q‖² terms are the Euclidean
            # tile's, 2q·r − ‖r‖²). The centring was judged on the general bound, as before.
            self.delta = (d + 16) * U32 * 1.05 * qn * rmax + 1e-300
        if c is None:
            self.Q32 = np.ascontiguousarray(Q64, dtype=np.float32)
            self.R32 = self.Q32 if same else np.ascontiguousarray(R64, dtype=np.float32)
            self.qoff = self.qsq if metric == "euclidean" else np.zeros(qn.size)
            self.rsub32 = (np.einsum("ij,ij->i", self.R32, self.R32, dtype=np.float32)
                           if metric == "euclidean" else None)
            return
        Qc = Q64 - c
        Rc = Qc if same else R64 - c
        self.Q32 = np.ascontiguousarray(Qc, dtype=np.float32)
        self.R32 = self.Q32 if same else np.ascontiguousarray(Rc, dtype=np.float32)
        qn_c = np.sqrt(np.einsum("ij,ij->i", Qc, Qc))
        rmax_c = float(np.sqrt(np.einsum("ij,ij->i", Rc, Rc).max()))
        if metric == "euclidean":
            self.qoff = qn_c * qn_c
            self.rsub32 = np.einsum("ij,ij->i", self.R32, self.R32, dtype=np.float32)
            self.rsub64 = np.einsum("ij,ij->i", Rc, Rc)
            bmax = 0.0
        else:
            cc = float(np.einsum("i,i->", c, c))
            b = np.einsum("ij,j->i", Rc, c)  # (not BLAS: see centre_of)
            self.rsub64 = np.negative(b)
            self.rsub32 = self.rsub64.astype(np.float32)
            self.qoff = -(np.einsum("ij,j->i", Qc, c) + cc)
            bmax = float(np.abs(b).max())
        self.delta = self._centred_delta(d, qn, qn_c, rmax_c, bmax, float(np.sqrt(np.einsum("i,i->", c, c))))
        # float64 key estimates from the centred rows (centred_keys64): within est_err of pair_keys64's
        self.est_err = self._f64 + 2.0 * (d + 4) * 2.0 ** -53 * 1.1 * (
            self.two * qn_c * rmax_c + float(np.abs(self.rsub64).max()) + np.abs(self.qoff)) + 1e-300

    def centred_keys64(self, qs: np.ndarray, refs: np.ndarray) -> np.ndarray:
        """Float64 estimates of the keys of queries ``qs`` × references ``refs`` (a centred
        search) from one GEMM of their centred rows: two q'·r' − rsub − qoff, within ``est_err``
        of :func:`pair_keys64` (the GEMM and the two sums rounded, plus the float64 rounding of the
        keys themselves): the differences between keys are kept, where the GEMM of the rows as
        given (q·r or 2 q·r − ‖r‖² − ‖q‖²) loses them to rounding at the scale of the norms."""
        c = self.centre
        A = self.Q64[qs] - c
        B = A if self.same and np.array_equal(qs, refs) else self.R64[refs] - c
        G = A @ B.T
        if self.two != 1.0:
            G *= self.two
        G -= self.rsub64[refs]
        G -= self.qoff[qs][:, None]
        return G

    def _centred_delta(self, d, qn, qn_c, rmax_c, bmax, cn):
        """The bound of a centred search (``qn_c``, ``rmax_c``: norms of the centred rows; ``bmax``:
        the largest |c·r'|; ``cn``: ‖c‖). Euclidean: KeySpace's augmented bound on the centred
        norms, plus the float64 rounding of −‖q − r‖² (differences, squares and sum: γ_{D+2}
        ‖q − r‖²), of q' and r' (each entry within u₆₄ of its own value: 3u₆₄(‖q'‖ + ‖r'‖)²) and
        of ‖q'‖². Cosine: the float32 tile q'·r' + b (γ_D ‖q'‖ ‖r'‖, b and the sum rounded: u(‖q'‖
        ‖r'‖ + 2|b|), q' and r' rounded to float32: 2u ‖q'‖ ‖r'‖), plus the float64 roundings:
        the key q·r (γ_D ‖q‖ ‖r‖), ‖c‖² + c·q' and c·r' (γ_{D+1} ‖c‖ (‖q'‖ + ‖c‖ + ‖r'‖)), the
        identity with the rounded q', r' (u₆₄ (‖q'‖ ‖r‖ + ‖r'‖ ‖q‖)) and the estimate's own sum
        (u₆₄ |tile − qoff| ≤ u₆₄ (‖q'‖ ‖r'‖ + |b| + ‖c‖ ‖q'‖ + ‖c‖²))."""
        u64 = 2.0 ** -53
        if self.metric == "euclidean":
            s2 = (qn_c + rmax_c) ** 2
            self._f64 = (2 * d + 16) * u64 * 1.05 * s2
            return (d + 16) * U32 * 1.05 * s2 + self._f64 + 1e-300
        f32 = (d + 16) * U32 * 1.05 * (qn_c * rmax_c + 2.0 * bmax)
        self._f64 = (d + 4) * u64 * 1.05 * (qn * self.rmax + cn * (qn_c + cn + rmax_c) + qn_c * self.rmax
                                            + rmax_c * qn + qn_c * rmax_c + bmax + cn * qn_c + cn * cn)
        return f32 + self._f64 + 1e-300

    def value_band(self, half_width: float) -> tuple[float, float]:
        """``(lo, width)`` of the band that the passes' sorted rows of tile values take (not plain:
        values = keys + qoff): every value two · q·r − rsub of the float32 copies, and every key
        placed among them (k + qoff ± ``half_width``), lies in (lo, lo + width); as narrow as the
        values are (a centred search's are its rows' spread, not their norm), with a margin above
        the band coordinates' own rounding (a few ulp of block × width)."""
        n32 = np.sqrt(np.einsum("ij,ij->i", self.Q32, self.Q32, dtype=np.float64)).max(initial=0.0)
        m32 = n32 if self.same else np.sqrt(np.einsum("ij,ij->i", self.R32, self.R32, dtype=np.float64)).max(initial=0.0)
        rs = 0.0 if self.rsub32 is None else float(np.abs(self.rsub32).max(initial=0.0))
        tb = 1.01 * (self.two * float(n32) * float(m32) + rs)
        margin = 8.0 * half_width + 2.0 ** -30 * tb + 1e-300
        return -(tb + margin), 2.0 * (tb + margin) + margin

    def ref_classes(self) -> np.ndarray | None:
        """Per reference, the class of references whose rows are bitwise identical, or None where
        every reference row is distinct (each its own class). Computed on first use: only searches
        with many equal keys need it, :func:`tie_window_before`."""
        if not hasattr(self, "_ref_classes"):
            first, cls = identical_rows(self.R64)
            self._ref_classes = cls if first.size < cls.size else None
        return self._ref_classes

    def rows_keys32(self, qs: np.ndarray) -> np.ndarray:
        """:meth:`row_keys32` of several queries at once (one GEMM): float64 array (len(qs), N);
        the values lie within the same error bound of the exact keys (their bits may differ)."""
        qs = np.asarray(qs, dtype=np.int64)
        s = self.Q32[qs] @ self.R32.T
        if self.two != 1.0:
            s *= np.float32(self.two)
        if self.rsub32 is not None:
            s -= self.rsub32
        s = s.astype(np.float64)
        if not self.plain:
            s -= self.qoff[qs, None]
        if self.same:
            s[np.arange(qs.size), qs] = -np.inf
        return s

    def row_keys32(self, qi: int) -> np.ndarray:
        """One query's float32 keys against every reference (float64 array; self excluded -> -inf)."""
        return self.rows_keys32(np.array([qi]))[0]


# ----------------------------------------------------------------------------- float32 candidates
def _torch_setup(ks: KeySpace, device):
    import torch

    device = torch.device(str(device))  # compute_device's CPU is not a torch.device
    Qt = torch.from_numpy(ks.Q32).to(device)
    Rt = Qt if ks.same else torch.from_numpy(ks.R32).to(device)
    rsub = torch.from_numpy(ks.rsub32).to(device) if ks.rsub32 is not None else None
    return torch, Qt, Rt, rsub


def down32(t: np.ndarray) -> np.ndarray:
    """float64 -> the largest float32 ≤ t (``v > t`` ⟺ ``v > down32(t)`` for every float32 v)."""
    f = np.asarray(t, dtype=np.float64).astype(np.float32)
    over = f.astype(np.float64) > t
    f[over] = np.nextafter(f[over], np.float32(-np.inf))
    return f


def up32(t: np.ndarray) -> np.ndarray:
    """float64 -> the smallest float32 ≥ t (``v ≥ t`` ⟺ ``v ≥ up32(t)`` for every float32 v)."""
    f = np.asarray(t, dtype=np.float64).astype(np.float32)
    under = f.astype(np.float64) < t
    f[under] = np.nextafter(f[under], np.float32(np.inf))
    return f


def tile_block(ks: KeySpace, Qt, Rt, rsub, s: int, e: int):
    """The float32 tile values of queries s..e−1 against every reference, on the tensors' device
    (:func:`_torch_setup`): ``two · (Q32 · R32ᵀ) − rsub32``, the products in IEEE float32 (the
    certification's bound is float32's: never TF32), a query's own value −inf in a same-set search."""
    import torch

    from embedscope.device import ieee_float32

    with ieee_float32():
        S = Qt[s:e] @ Rt.T
    if ks.two != 1.0:
        S.mul_(ks.two)
    if rsub is not None:
        S.sub_(rsub)
    if ks.same:
        ar = torch.arange(e - s, device=S.device)
        S[ar, ar + s] = -float("inf")
    return S


def candidate_blocks(ks: KeySpace, L: int, *, device, block: int | None = None, progress: bool = False,
                     desc: str = "kNN"):
    """Yield ``(start, stop, keys32, idx)`` per query block: each query's top ``L`` float32 keys
    (float64 array, descending; Euclidean keys are minus squared distances) and their reference
    indices. The query itself is never among its candidates in a same-set search."""
    from embedscope.device import compute_device

    dev = compute_device(device)
    nq, nr = ks.Q32.shape[0], ks.R32.shape[0]
    n_avail = nr - 1 if ks.same else nr
    L = int(min(L, n_avail))
    if block is None:
        block = default_block(nr, dev.type)
    if dev.type == "cpu" and L > FAISS_MIN_L:
        yield from _faiss_blocks(ks, L, progress, desc)
        return
    torch, Qt, Rt, rsub = _torch_setup(ks, dev)
    bar = _bar(progress, nq, desc)
    # one block ahead: block i's GEMM and top-L are queued on the device (and its lists copied to the
    # host as they finish) before block i - 1 is handed over, so a GPU computes while the caller
    # certifies the lists it has (CUDA runs queued work asynchronously; on a CPU it is the same work
    # in the same order of blocks)
    ahead = None
    with torch.no_grad():
        for s in range(0, nq, block):
            e = min(nq, s + block)
            S = tile_block(ks, Qt, Rt, rsub, s, e)
            v, i = torch.topk(S, L, dim=1, largest=True, sorted=True)
            del S  # (one block's tile on the device at a time)
            queued = (s, e, _to_host_async(v), _to_host_async(i))
            if ahead is not None:
                yield _handed(ks, *ahead)
                bar.update(ahead[1] - ahead[0])
            ahead = queued
        if ahead is not None:
            yield _handed(ks, *ahead)
            bar.update(ahead[1] - ahead[0])
    bar.close()


def _to_host_async(t):
    """``t``'s copy to the host: queued (into page-locked memory, with an event to wait on) from a
    CUDA device, ``t`` itself on the CPU."""
    import torch

    if t.device.type != "cuda":
        return t, None
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    done = torch.cuda.Event()
    done.record()
    return host, done


def _handed(ks: KeySpace, s: int, e: int, v, i):
    """A block of :func:`candidate_blocks` as it is yielded, once its copies (:func:`_to_host_async`) are done."""
    for _, done in (v, i):
        if done is not None:
            done.synchronize()
    return s, e, _keys_to64(ks, v[0].numpy(), s, e), i[0].numpy().astype(np.int64, copy=False)


def _faiss_blocks(ks: KeySpace, L: int, progress: bool, desc: str, block: int = 4096):
    """Deep candidate lists on the CPU: faiss flat search (its heap top-k beats torch.topk for
    large L). The certification does not depend on how the float32 keys were computed."""
    index, Qs = faiss_flat(ks)
    nq = ks.Q32.shape[0]
    extra = 1 if ks.same else 0
    bar = _bar(progress, nq, desc)
    for s in range(0, nq, block):
        e = min(nq, s + block)
        v, i = index.search(Qs[s:e], L + extra)
        v = faiss_keys(ks, v, s, e)
        if ks.same:
            own = i == np.arange(s, e)[:, None]
            drop = np.where(own.any(1), own.argmax(1), L)  # the query itself, else the last column
            keep = np.ones_like(own)
            keep[np.arange(e - s), drop] = False
            v = v[keep].reshape(e - s, L)
            i = i[keep].reshape(e - s, L)
        yield s, e, v, i.astype(np.int64, copy=False)
        bar.update(e - s)
    bar.close()


def faiss_flat(ks: KeySpace, refs: np.ndarray | None = None):
    """``(index, Qs)``: a faiss flat index of the references (``refs`` of them, or all) as ``ks``
    measures them, and the query rows to search it with. Cosine: inner products; Euclidean:
    squared distances of the rows (centred or not: the same); a centred cosine search: inner
    products of the augmented rows [q', −1]·[r', −c·r'] (:func:`faiss_keys` takes qoff off)."""
    import faiss

    aug = ks.metric == "cosine" and not ks.plain
    Qs, Rs = _augmented32(ks) if aug else (ks.Q32, ks.R32)
    R = np.ascontiguousarray(Rs if refs is None else Rs[refs])
    index = faiss.IndexFlatL2(R.shape[1]) if ks.metric == "euclidean" else faiss.IndexFlatIP(R.shape[1])
    index.add(R)
    return index, Qs


def faiss_keys(ks: KeySpace, v: np.ndarray, s: int, e: int) -> np.ndarray:
    """The key estimates (float64) of a :func:`faiss_flat` search's values ``v`` (rows: queries
    s..e−1): minus the squared distances, or the inner products less qoff."""
    v = v.astype(np.float64)
    if ks.metric == "euclidean":
        return np.negative(v, out=v)
    if not ks.plain:
        v -= ks.qoff[s:e, None]
    return v


def _keys_to64(ks: KeySpace, v32: np.ndarray, s: int, e: int) -> np.ndarray:
    v = v32.astype(np.float64)
    if not ks.plain:
        v -= ks.qoff[s:e, None]
    return v


def _augmented32(ks: KeySpace) -> tuple[np.ndarray, np.ndarray]:
    """Float32 operands whose products are the tile values ``two · q·r − rsub`` as one GEMM:
    ``[two · q, −1]`` and ``[r, rsub]`` (``ks`` not plain)."""
    nq = ks.Q32.shape[0]
    Qa = np.hstack([np.float32(ks.two) * ks.Q32, -np.ones((nq, 1), np.float32)])
    Ra = np.hstack([ks.R32, ks.rsub32[:, None]])
    return Qa, Ra


def _bar(progress, total: int, desc: str, unit: str = "q"):
    """A progress bar of ``total`` steps when ``progress`` is true (a :class:`BarShare`: that share
    of its parent's bar), else one that shows nothing."""
    from embedscope.progress import BarShare, progress_bar

    if isinstance(progress, BarShare):
        return progress.start(total)
    if progress:
        return progress_bar(total=total, desc=desc, unit=unit)

    class _Null:
        def update(self, n):
            pass

        def close(self):
            pass

    return _Null()


# ----------------------------------------------------------------------------- exact top-k
def _exact_topk_row(ks: KeySpace, qi: int, k: int):
    """Exact top k of one query from its full float32 row: candidates within delta of the k-th."""
    row = ks.row_keys32(qi)
    n_avail = row.size - (1 if ks.same else 0)
    kk = min(k, n_avail)
    kth32 = np.partition(row, row.size - kk)[row.size - kk]
    cand = np.flatnonzero(row >= kth32 - 2 * ks.delta[qi])
    if ks.same:
        cand = cand[cand != qi]
    key = pair_keys64(ks.Q64, ks.R64, np.full(cand.size, qi), cand, ks.metric)
    order = np.lexsort((cand, -key))[:kk]
    return key[order], cand[order]


OUTLIERS = True  # a nearly collapsed model's few far references are searched apart (outlier_refs; False: never)
OUTLIER_GAIN = 16.0  # a reference is an outlier when its centred norm exceeds this many times the bulk's,
OUTLIER_DIV, OUTLIER_MAX = 64, 256  # ... the bulk's being the (m+1)-th largest, m = min(N / 64, 256) (at most m)
# More far rows (benchmarks/outliers_apart.py, docs/PERFORMANCE.md: at 6,000 x 128 the split still paid
# 1.3-1.7x at N / 4 outliers 0.1 away, and lost 2-14x from N / 64 on with outliers just far enough to
# count, whose loose bound still left the old path's windows narrow): up to N / OUTLIER_MOST_DIV of them,
# at most OUTLIER_MAX_KEYS / (queries) (their float64 keys to every query are held at once), searched
# apart only where the old path's windows would hold more keys per query than APART_WINDOW_RATIO times
# the outliers (window_pays; this APART_WINDOW_RATIO for knn_search, ranks.APART_WINDOW_RATIO for the
# ranks and the hits)
OUTLIER_MOST_DIV, OUTLIER_MAX_KEYS = 4, 1 << 24
APART_WINDOW_RATIO = 2.0  # knn: the old path's window keys per query over the outliers, from which the split pays
WINDOW_SAMPLE = 32  # window_pays: bulk queries whose float32 rows estimate the old path's windows


def outlier_most(n_ref: int, n_q: int) -> int:
    """The most far references that a search with ``n_ref`` references and ``n_q`` queries takes
    apart (:func:`outlier_refs`'s ``most``): min(N / ``OUTLIER_DIV``, ``OUTLIER_MAX``) as ever, and
    up to N / ``OUTLIER_MOST_DIV`` (at most ``OUTLIER_MAX_KEYS`` / queries) where
    :func:`window_pays`."""
    free = min(n_ref // OUTLIER_DIV, OUTLIER_MAX)
    return max(free, min(n_ref // OUTLIER_MOST_DIV, OUTLIER_MAX_KEYS // max(n_q, 1)))


def window_pays(ks: KeySpace, sub: KeySpace, q_near: np.ndarray, n_far: int, cut, ratio: float) -> bool:
    """Whether searching ``n_far`` outliers apart pays, beyond the few (min(N / ``OUTLIER_DIV``,
    ``OUTLIER_MAX``)) that always do: the old path compares each query's keys within its loose bound
    2 ``ks.delta`` (that of all references) of its cut in float64, the split adds about ``n_far``
    float64 keys per query (the outliers' columns, and in a same-set search their rows). Estimated
    from ``WINDOW_SAMPLE`` bulk queries' float32 rows over the bulk (``sub``: their own bound): w,
    the mean number of a row's keys within 2 δ_q (all references) of its ``cut``-th largest; it pays
    where w ≥ ``ratio`` · ``n_far``. True at once where ``n_far`` is within the few. Only a
    decision: both paths give the same keys, ranks and hits, bit for bit."""
    nr = ks.R64.shape[0]
    if n_far <= min(nr // OUTLIER_DIV, OUTLIER_MAX):
        return True
    nb = sub.R64.shape[0]
    pl = np.unique(np.linspace(0, q_near.size - 1, min(q_near.size, WINDOW_SAMPLE)).astype(np.int64))
    rows = sub.rows_keys32(pl)  # (same set: the query itself -inf)
    c = int(min(max(int(cut), 1), nb - (1 if sub.same else 0)))
    v = np.partition(rows, nb - c, axis=1)[:, nb - c]
    band = 2.0 * ks.delta[q_near[pl]]
    w = float(np.count_nonzero(np.abs(rows - v[:, None]) <= band[:, None])) / pl.size
    return w >= ratio * n_far


def outlier_refs(ks: KeySpace, most: int | None = None) -> np.ndarray | None:
    """The references of a (nearly) collapsed model far from the rest, or None: those whose
    distance ‖r − c‖ from the references' mean c exceeds ``OUTLIER_GAIN`` times the (m+1)-th
    largest (m = min(N / ``OUTLIER_DIV``, ``OUTLIER_MAX``): at most m of them; where there are none
    and ``most`` (:func:`outlier_most`) is larger, the same at m = ``most``). Only a search
    that is centred (:func:`centre_of`), or whose rows' median distance from their mean is below
    1 / ``CENTRE_GAIN`` of their median norm (asked of a sample of the rows first: usual embeddings
    are turned down at its cost), is looked at; an estimate, only to decide (:func:`_knn_apart`
    and ``ranks._ranks_apart`` then compare the bounds).

    Why: the float32 error of one pair's tile value is at most (D + 16) u (‖q'‖ ‖r'‖ + 2 |c·r'|)
    plus float64 terms (:meth:`KeySpace._centred_delta` with that pair's ‖r'‖ and |c·r'|; the
    rows as given: (D + 16) u ‖q‖ ‖r‖ for cosine, (D + 16) u (‖r‖ + ‖q‖)² for Euclidean), and
    ``delta`` of a query is that bound at the largest ‖r'‖ and |c·r'| of all references (``rmax_c``,
    ``bmax``; ``rmax``), since every pass compares a
    query's tile values with one window half-width. A few references far from a nearly collapsed
    model's point thus loosen every query's bound by their distance over the bulk's spread (10^4 at
    1e-5 noise and outliers 0.1 away), and the windows (float64 keys) grow accordingly
    (:func:`knn_search` at 2,000 x 128: 0.03 s -> 2.2 s); farther ones keep the search from being
    centred at all. Searched without them, the rest has the bound of its own largest norms."""
    if not OUTLIERS:
        return None
    R = ks.R64
    n = R.shape[0]
    m = min(n // OUTLIER_DIV, OUTLIER_MAX)
    steps = [m] + ([min(int(most), n - 1)] if most is not None and min(int(most), n - 1) > m else [])
    if steps[-1] < 1:
        return None
    if ks.centre is None:  # collapsed? Judged from the references centre_and_spread looked at (all of
        # them or its sample; read off its sums: a separate look cost 6-20 ms at 2,000 x 2,048), else a sample
        if ks.ref_spread is not None:
            spread, norm = ks.ref_spread
        else:
            S = R[np.arange(0, n, max(1, n // CENTRE_SAMPLE))[:CENTRE_SAMPLE]]
            Sc = S - S.mean(axis=0)
            spread = float(np.median(np.sqrt(np.einsum("ij,ij->i", Sc, Sc))))
            norm = float(np.median(np.sqrt(np.einsum("ij,ij->i", S, S))))
        if CENTRE_GAIN * spread > norm:
            return None
    c = ks.centre if ks.centre is not None else R.mean(axis=0)
    # ‖r − c‖² = ‖r‖² − 2 r·c + ‖c‖² (numpy's loops, no N x D temporary; an estimate, only to decide)
    rn2 = ks.qsq if ks.same else np.einsum("ij,ij->i", R, R)
    rho = np.sqrt(np.maximum(rn2 - 2.0 * np.einsum("ij,j->i", R, c) + float(np.einsum("i,i->", c, c)), 0.0))
    for m in steps:
        if m < 1:
            continue
        base = float(np.partition(rho, n - 1 - m)[n - 1 - m])  # the (m+1)-th largest
        far = np.flatnonzero(rho > OUTLIER_GAIN * base)
        if far.size:
            return far
    return None


def _knn_apart(ks: KeySpace, far: np.ndarray, k: int, *, device, block, progress):
    """:func:`topk_exact` of ``ks`` (scale 1) with the references ``far`` (:func:`outlier_refs`)
    searched apart: the rest ("bulk", indices ``near``) by its own :class:`KeySpace` (and its own,
    tighter bound), the outliers' float64 keys (:func:`pair_keys64`) against every query directly
    (few x N keys), merged per query by (key desc, index asc). Or None where that does not pay:
    the bulk's bound (median over its queries) is not ``OUTLIER_GAIN`` times tighter than that of
    all references, its own search would not be scale 1, too few references remain, or the
    outliers are many and the search of all references would keep narrow windows all the same
    (:func:`window_pays`, ``APART_WINDOW_RATIO``).

    Exact, the same keys and indices bit for bit: every key is :func:`pair_keys64` of the same two
    rows (the bulk's rows are copies, bit for bit, of the rows searched), and the order (key desc,
    index asc) is total, so a reference among a query's first k of all references is, if in the
    bulk, among the first k of the bulk (fewer than k bulk references precede it); the first k of
    all are therefore the first k of (the bulk's first k) ∪ (the outliers). In a same-set search
    (query i is reference i, left out) the bulk is searched as its own same set, and each outlier
    query by its full float64 row (few x N keys)."""
    nr = ks.R64.shape[0]
    near = np.setdiff1d(np.arange(nr), far)
    same = ks.same
    if near.size < k + 2:
        return None
    R_in = ks.R64[near]
    if same:
        sub = KeySpace(R_in, R_in, ks.metric, True)
        q_near = near
    else:
        sub = KeySpace(ks.Q64, R_in, ks.metric, False)
        q_near = np.arange(ks.Q64.shape[0])
    if sub.scale != 1.0 or OUTLIER_GAIN * float(np.median(sub.delta)) > float(np.median(ks.delta[q_near])):
        return None  # (no gain: the bulk's bound is not much tighter)
    if not window_pays(ks, sub, q_near, far.size, k, APART_WINDOW_RATIO):
        return None  # (many outliers, and the old path's windows narrow all the same)
    nq = ks.Q64.shape[0]
    keys = np.empty((nq, k), dtype=np.float64)
    idx = np.empty((nq, k), dtype=np.int64)
    k_in, i_in = topk_exact(sub, k, device=device, block=block, progress=progress)
    i_in = near[i_in]
    nf = far.size
    k_out = cross_keys64(ks.Q64, ks.R64, q_near, far, ks.metric)
    K = np.hstack([k_in, k_out])
    I = np.hstack([i_in, np.broadcast_to(far, (q_near.size, nf))])
    o = _rowwise_lexsort(K, I)[:, :k]
    keys[q_near] = np.take_along_axis(K, o, 1)
    idx[q_near] = np.take_along_axis(I, o, 1)
    if same:  # the outlier queries: their full rows, the query itself left out
        refs = np.arange(nr)
        for q in far:
            row = pair_keys64(ks.Q64, ks.R64, np.full(nr, q), refs, ks.metric)
            cand = refs[refs != q]
            kc = row[cand]
            order = np.lexsort((cand, -kc))[:k]
            keys[q], idx[q] = kc[order], cand[order]
    return keys, idx


def topk_exact(ks: KeySpace, k: int, *, device="auto", block=None, progress=False):
    """Exact (float64 order, lower index first on ties) top-k keys and indices of every query; a
    nearly collapsed model's few far references searched apart (:func:`outlier_refs`,
    :func:`_knn_apart`: the same result bit for bit)."""
    far = outlier_refs(ks, outlier_most(ks.R64.shape[0], ks.Q64.shape[0])) if ks.scale == 1.0 else None
    got = None if far is None else _knn_apart(ks, far, int(k), device=device, block=block, progress=progress)
    if got is not None:
        return got
    from embedscope.device import compute_device
    from embedscope.metrics.search.threads import blocks_in_threads

    dev = compute_device(device)
    if CPU_SELECT and dev.type == "cpu":
        return _topk_exact_cpu(ks, int(k), block=block, progress=progress)
    nq = ks.Q64.shape[0]
    keys = np.empty((nq, k), dtype=np.float64)
    idx = np.empty((nq, k), dtype=np.int64)
    lists = candidate_blocks(ks, k + SLACK, device=device, block=block, progress=progress)
    for s, e, k64s, cs in blocks_in_threads(lists, lambda b: _certify_topk(ks, k, *b), dev):
        keys[s:e], idx[s:e] = k64s, cs
    return keys, idx


def _certify_topk(ks: KeySpace, k: int, s: int, e: int, v32: np.ndarray, cand: np.ndarray):
    """The exact top ``k`` of queries s..e−1 from their candidate lists (:func:`candidate_blocks`):
    (s, e, keys, indices), each row by key, then lower index."""
    b, L = cand.shape
    k64 = block_keys64(ks.Q64, ks.R64, s, cand, ks.metric)
    # sort each row by (key desc, index asc)
    order = _rowwise_lexsort(k64, cand)
    k64s = np.take_along_axis(k64, order, 1)[:, :k]
    cs = np.take_along_axis(cand, order, 1)[:, :k]
    n_avail = ks.R64.shape[0] - (1 if ks.same else 0)
    if L < n_avail:
        ok = v32[:, -1] + ks.delta[s:e] < k64s[:, -1]
    else:
        ok = np.ones(b, dtype=bool)
    for r in np.flatnonzero(~ok):
        k64s[r], cs[r] = _exact_topk_row(ks, s + r, k)
    return s, e, k64s, cs


# ----------------------------------------------------------------------------- exact top-k, CPU
def _threshold_sample(n_ref: int, k: int) -> tuple[np.ndarray, int]:
    """References sampled for the per-query selection threshold, and the sample rank ``j`` whose
    key is the threshold: expected ``k m / n`` sampled keys lie above the k-th key; ``j`` adds
    ``SAMPLE_SIGMAS`` standard deviations, so that fewer than k keys lie above it only rarely
    (such a query is then searched again in full). The whole set when it is small."""
    m = max(SAMPLE_MIN, n_ref // SAMPLE_DIV)
    if m >= n_ref:
        return np.arange(n_ref), k
    cols = np.sort(np.random.default_rng(0).choice(n_ref, m, replace=False))
    ex = k * m / n_ref
    j = int(np.ceil(ex + SAMPLE_SIGMAS * np.sqrt(ex) + SAMPLE_EXTRA))
    return cols, int(min(max(j, 1), m - 1))


def _pad_rows(rows: np.ndarray, nb: int, vals: np.ndarray, fill, width_min: int):
    """Ragged per-row values (``rows`` sorted) as a dense ``nb x W`` matrix padded with ``fill``."""
    cnt = np.bincount(rows, minlength=nb)
    start = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(cnt, out=start[1:])
    w = max(int(cnt.max(initial=0)), width_min)
    # element p of row r goes to r w + (p - start[r]): a gather from a table of nb offsets
    offs = np.arange(nb, dtype=np.int64) * w - start[:nb]
    flat = np.take(offs, rows, mode="clip")
    flat += np.arange(rows.size)
    P = np.full((nb, w), fill, dtype=vals.dtype)
    P.ravel()[flat] = vals
    return P, cnt, flat


class _CpuSearch:
    """Shared state of the CPU search: the threshold sample and per-thread float32 tiles."""

    def __init__(self, ks: KeySpace, k: int, block: int):
        import threading

        nr, d = ks.R32.shape
        self.ks, self.k, self.b = ks, k, block
        self.cw = int(max(64, min(nr, CHUNK_BYTES // (8 * d))))  # references per tile
        self.cols, self.j = _threshold_sample(nr, k)
        self.Rs = np.ascontiguousarray(ks.R32[self.cols])
        self.rsubs = ks.rsub32[self.cols] if ks.rsub32 is not None else None
        self.spos = np.full(nr, -1, dtype=np.int64)
        self.spos[self.cols] = np.arange(self.cols.size)
        self.local = threading.local()
        self.lock = threading.Lock()
        self.n_full = 0  # queries searched again in full (threshold too high)
        self.inbox = None  # same set (_symmetric): per block, the window keys other blocks handed it
        self.n_reused = 0  # window keys taken from another block's window instead of computed
        self.inbox_bytes = 0  # bytes of keys handed over and not yet taken

    def buffers(self):
        L = self.local
        if not hasattr(L, "T"):
            w = max(self.cw, self.b)  # a symmetric tile is b x b
            L.T = np.empty(self.b * w, np.float32)  # flat: every nb x w view is contiguous
            L.M = np.empty(self.b * w, bool)
            L.K = np.empty(self.b * w, np.float32) if self.ks.rsub32 is not None else None
            L.Ts = np.empty((self.b, self.cols.size), np.float32)
        return L.T, L.M, L.Ts

    def threshold(self, Qb: np.ndarray, s: int, e: int, Ts: np.ndarray) -> np.ndarray:
        """Per query a float32 threshold 2 delta below the sample's j-th largest key."""
        ks, m, j = self.ks, self.cols.size, self.j
        np.matmul(Qb, self.Rs.T, out=Ts)
        if self.rsubs is not None:
            Ts -= self.rsubs
        if ks.same:
            p = self.spos[s:e]
            r = np.flatnonzero(p >= 0)
            Ts[r, p[r]] = -np.inf
        x = np.partition(Ts, m - j, axis=1)[:, m - j]
        t = x.astype(np.float64) - 2.0 * ks.delta[s:e]
        return np.maximum(down32(t), np.float32(np.finfo(np.float32).min))  # -inf (the query itself) never passes

    def window_keys(self, s: int, e: int, qr: np.ndarray, rc: np.ndarray) -> np.ndarray:
        """Float64 keys of the window pairs (query s + qr[p], reference rc[p]) of the block s..e−1
        (``qr`` ascending, ``rc`` ascending per query): :func:`window_keys64`, or in a same-set
        search (``self.inbox``) each mutual pair once. The key of (q, r) is that of (r, q) bit for
        bit (:func:`pair_keys64` multiplies and sums the same two rows element by element in the
        same order), and deep windows are mostly mutual (97.7% of the pairs at k = 654 in classes
        of 600). Pairs within the block: (q, r) with q > r takes the key of (r, q) when that pair
        is in the window too. Pairs with a reference in another block: a finished block hands the
        keys of its pairs with a reference in an unfinished block to that block, which looks them
        up instead of computing them. Either way about half the float64 keys, each a row gathered
        from DRAM, are not computed; the rest are computed in ranges of references of this block
        size (as :func:`window_keys64`)."""
        ks, b = self.ks, self.b
        if self.inbox is None or b > REUSE_MAX_BLOCK or -(-ks.R64.shape[0] // b) > 32_767:
            return window_keys64(ks, qr + s, rc)
        n = ks.R64.shape[0]
        B = s // b
        with self.lock:
            got, self.inbox[B] = self.inbox[B], None  # deposits from now on would come too late
            self.inbox_bytes -= sum(a.nbytes + v.nbytes for a, v in got.values())
        L = self.local
        if getattr(L, "slots", None) is None or L.slots.size < b * b:
            L.slots = np.full(b * b, -1, dtype=np.int32)  # (row, row) of two blocks -> a pair; kept all -1
        slots = L.slots
        out = np.empty(qr.size)
        g = rc // b
        own = g == B
        # 1. pairs within the block: (q, r) with q > r takes the key of (r, q) when that pair is here
        oi = np.flatnonzero(own)
        ql, rl = np.take(qr, oi), np.take(rc, oi) - s
        low = ql > rl
        up = np.flatnonzero(~low)
        ko = np.empty(oi.size)
        qu, ru = np.take(ql, up), np.take(rl, up)
        ko[up] = pair_keys64(ks.Q64, ks.R64, qu + s, ru + s, ks.metric)
        lo_i = np.flatnonzero(low)
        n_reused = 0
        if lo_i.size:
            p = _slot_lookup(slots, qu * b + ru, np.take(rl, lo_i) * b + np.take(ql, lo_i))
            hit = p >= 0
            ko[np.compress(hit, lo_i)] = np.take(ko, np.take(up, np.compress(hit, p)))
            miss = np.compress(~hit, lo_i)
            ko[miss] = pair_keys64(ks.Q64, ks.R64, np.take(ql, miss) + s, np.take(rl, miss) + s, ks.metric)
            n_reused += lo_i.size - miss.size
        out[oi] = ko
        # 2. pairs with a reference in another block, grouped by that block (a stable radix sort:
        # within a group by query, then reference)
        xi = np.flatnonzero(~own)
        gx = np.take(g, xi).astype(np.int16)
        o = np.argsort(gx, kind="stable")
        xo = np.take(xi, o)
        qo, ro = np.take(qr, xo), np.take(rc, xo)
        bounds = np.searchsorted(np.take(gx, o), np.arange(-(-n // b) + 1))
        vals = np.empty(xo.size)
        todo = np.ones(xo.size, dtype=bool)
        for A, (at, kv) in got.items():  # block A's keys of pairs (its query, our row): at = row * b + its row
            lo, hi = int(bounds[A]), int(bounds[A + 1])
            if lo == hi:
                continue
            p = _slot_lookup(slots, at, qo[lo:hi] * b + (ro[lo:hi] - A * b))
            hit = np.flatnonzero(p >= 0)
            vals[lo + hit] = np.take(kv, np.take(p, hit))
            todo[lo + hit] = False
        miss = np.flatnonzero(todo)
        vals[miss] = pair_keys64(ks.Q64, ks.R64, np.take(qo, miss) + s, np.take(ro, miss), ks.metric)
        n_reused += xo.size - miss.size
        with self.lock:
            self.n_reused += n_reused
            open_ = [A for A in range(bounds.size - 1) if self.inbox[A] is not None and bounds[A + 1] > bounds[A]]
        for A in open_:  # hand block A our pairs with a reference in A, as (its row, our row)
            lo, hi = int(bounds[A]), int(bounds[A + 1])
            at = ((ro[lo:hi] - A * b) * b + qo[lo:hi]).astype(np.int32)  # < b² ≤ 2³⁰
            with self.lock:  # (beyond REUSE_MAX_BYTES block A computes these keys itself)
                if self.inbox[A] is not None and self.inbox_bytes + 12 * at.size <= REUSE_MAX_BYTES:
                    self.inbox[A][B] = (at, vals[lo:hi].copy())
                    self.inbox_bytes += 12 * at.size
        out[xo] = vals
        return out

    def run_block(self, s: int, e: int, keys: np.ndarray, idx: np.ndarray):
        ks, cw = self.ks, self.cw
        nr, nb = ks.R32.shape[0], e - s
        T, M, Ts = self.buffers()
        Qb = ks.Q32[s:e] * np.float32(ks.two) if ks.two != 1.0 else ks.Q32[s:e]
        t32 = self.threshold(Qb, s, e, Ts[:nb])
        # 1. float32 tiles of cw references: keep every key >= the query's threshold
        R_, C_, V_ = [], [], []
        for c0 in range(0, nr, cw):
            c1 = min(nr, c0 + cw)
            w = c1 - c0
            Tc, Mc = T[:nb * w].reshape(nb, w), M[:nb * w].reshape(nb, w)
            np.matmul(Qb, ks.R32[c0:c1].T, out=Tc)
            if ks.rsub32 is not None:
                Tc -= ks.rsub32[c0:c1]
            if ks.same and c0 < e and s < c1:
                ii = np.arange(max(s, c0), min(e, c1))
                Tc[ii - s, ii - c0] = -np.inf
            np.greater_equal(Tc, t32[:, None], out=Mc)
            nz = np.flatnonzero(Mc)
            rr = nz // w
            R_.append(rr.astype(np.uint16))
            C_.append((nz - rr * w + c0).astype(np.int64))
            V_.append(Tc.ravel()[nz])
        self.finish(s, e, t32, R_, C_, V_, keys, idx)

    def sym_tile(self, I: int, J: int, t32: np.ndarray, pieces: dict):
        """Same set (Q = R), blocks I <= J: one float32 tile X_I X_J^T serves the queries of block
        I against the references of block J (rows) and, when J > I, the queries of J against the
        references of I (columns, compared with J's thresholds; no transposed copy)."""
        ks, b = self.ks, self.b
        n = ks.Q32.shape[0]
        s, e = I * b, min(n, I * b + b)
        c0, c1 = J * b, min(n, J * b + b)
        T, M, _ = self.buffers()
        nb, w = e - s, c1 - c0
        G, Mc = T[:nb * w].reshape(nb, w), M[:nb * w].reshape(nb, w)
        np.matmul(ks.Q32[s:e], ks.Q32[c0:c1].T, out=G)
        eu = ks.rsub32 is not None  # a term per reference (Euclidean, centred), and the factor two
        if I == J and ks.same:
            G[np.arange(nb), np.arange(nb)] = -np.inf
        if J > I:  # columns first, while G is still the plain product
            if eu:
                K = self.local.K[:nb * w].reshape(nb, w)
                np.multiply(G, np.float32(ks.two), out=K)
                K -= ks.rsub32[s:e, None]
            else:
                K = G
            np.greater_equal(K, t32[c0:c1][None, :], out=Mc)
            nz = np.flatnonzero(Mc)
            ref = nz // w
            pieces[J][I] = ((nz - ref * w).astype(np.uint16), ref + s, np.take(K.ravel(), nz, mode="clip"))
        if eu:
            if ks.two != 1.0:
                G *= np.float32(ks.two)
            G -= ks.rsub32[c0:c1]
        np.greater_equal(G, t32[s:e, None], out=Mc)
        nz = np.flatnonzero(Mc)
        rr = nz // w
        pieces[I][J] = (rr.astype(np.uint16), nz - rr * w + c0, np.take(G.ravel(), nz, mode="clip"))

    def finish(self, s, e, t32, R_, C_, V_, keys, idx):
        """From every key >= the thresholds (pieces in ascending reference order) to the exact
        top k of queries s..e-1."""
        ks, k, nb = self.ks, self.k, e - s
        rowsA, colsA, vA = np.concatenate(R_), np.concatenate(C_), np.concatenate(V_)
        # 2. per query (radix sort of the row, stable: references ascending) the k-th float32 key
        # and the window tau = kth - 2 delta that holds every exact top-k reference
        o = np.argsort(rowsA, kind="stable")
        rows, v = np.take(rowsA, o, mode="clip"), np.take(vA, o, mode="clip")
        P, cnt, _ = _pad_rows(rows, nb, -v, np.float32(np.inf), k)
        kth = -np.partition(P, k - 1, axis=1)[:, k - 1].astype(np.float64)
        tau = kth - 2.0 * ks.delta[s:e]
        full = (cnt < k) | (t32.astype(np.float64) > tau)  # the threshold cut into the window
        keep = v >= np.take(tau, rows, mode="clip")
        if full.any():
            keep &= ~np.take(full, rows, mode="clip")
        # 3. float64 keys of the window (window_keys64: pair_keys64 in ranges of references)
        # np.compress, not x[keep]: boolean subscripts of masks this dense (~60% set) mispredict a
        # branch per element and took 4-5x longer (numpy 2.4, measured)
        # rows are uint16 (block-local): int64 before any offset (s + row overflows past 65,535)
        qr, rc = np.compress(keep, rows).astype(np.int64), np.take(colsA, np.compress(keep, o), mode="clip")
        C, cntw, flat = _pad_rows(qr, nb, rc, 0, k + 1)
        K = np.full(C.shape, np.inf)  # minus the keys (ascending order = keys descending); pads last
        K.ravel()[flat] = np.negative(self.window_keys(s, e, qr, rc))
        # 4. order per query by (float64 key desc, reference asc)
        o = np.argsort(K, axis=1)[:, :k + 1]
        o += (np.arange(nb) * K.shape[1])[:, None]  # flat positions in K and C
        Ks = np.take(K, o, mode="clip")
        for r in np.flatnonzero((Ks[:, 1:] == Ks[:, :-1]).any(1)):  # equal keys: lower index first
            o[r] = np.argsort(K[r], kind="stable")[:k + 1] + r * K.shape[1]
            Ks[r] = np.take(K, o[r])
        np.negative(Ks[:, :k], out=keys[s:e])
        np.take(C, o[:, :k], out=idx[s:e], mode="clip")
        for r in np.flatnonzero(full):
            keys[s + r], idx[s + r] = _exact_topk_row(ks, s + r, k)
        with self.lock:
            self.n_full += int(full.sum())


def _topk_exact_cpu(ks: KeySpace, k: int, *, block=None, progress=False, threads=None):
    """:func:`topk_exact` on the CPU: float32 GEMM tiles with a per-query threshold, float64 keys
    only in each query's window around its k-th key (see the module docstring). Query blocks run
    in ``threads`` worker threads (default: :func:`~.threads.n_search_threads`), each with
    single-threaded BLAS."""
    from concurrent.futures import ThreadPoolExecutor

    from embedscope.metrics.search.threads import n_search_threads

    nq = ks.Q64.shape[0]
    b = int(min(max(1, block or CPU_BLOCK), 65535))
    job = _CpuSearch(ks, k, b)
    keys = np.empty((nq, k), dtype=np.float64)
    idx = np.empty((nq, k), dtype=np.int64)
    starts = range(0, nq, b)
    nt = int(threads or min(n_search_threads(), len(starts)))
    bar = _bar(progress, nq, "kNN")

    if SYMMETRIC and (ks.same or ks.Q64 is ks.R64):
        _symmetric(job, keys, idx, nt, bar)
        bar.close()
        return keys, idx

    def one(s):
        e = min(nq, s + b)
        job.run_block(s, e, keys, idx)
        with job.lock:
            bar.update(e - s)

    if nt <= 1:
        with blas_single_thread():  # small tiles: a multi-threaded BLAS only adds waiting
            for s in starts:
                one(s)
    else:
        with blas_single_thread(), ThreadPoolExecutor(nt) as pool:
            list(pool.map(one, starts))
    bar.close()
    return keys, idx


def _symmetric(job: _CpuSearch, keys: np.ndarray, idx: np.ndarray, nt: int, bar):
    """A same-set search over the upper triangle of block pairs (half the GEMM work): the
    thresholds of every query first (the sample), then the tiles (I, J >= I) row by row; a block
    is finished (window, float64 keys, order) as soon as its last tile is in, so that only the
    survivors of unfinished blocks are held."""
    from concurrent.futures import ThreadPoolExecutor

    ks, b = job.ks, job.b
    n = ks.Q32.shape[0]
    nB = -(-n // b)
    t32 = np.empty(n, dtype=np.float32)
    pieces = [dict() for _ in range(nB)]
    missing = [nB] * nB
    if REUSE_KEYS:
        job.inbox = [dict() for _ in range(nB)]

    def threshold(I):
        s, e = I * b, min(n, I * b + b)
        Qb = ks.Q32[s:e] * np.float32(ks.two) if ks.two != 1.0 else ks.Q32[s:e]
        t32[s:e] = job.threshold(Qb, s, e, job.buffers()[2][:e - s])

    def tile(IJ):
        I, J = IJ
        job.sym_tile(I, J, t32, pieces)
        with job.lock:
            done = []
            for B in {I, J}:
                missing[B] -= 1
                if missing[B] == 0:
                    done.append(B)
        for B in done:
            s, e = B * b, min(n, B * b + b)
            got, pieces[B] = pieces[B], None
            R_, C_, V_ = zip(*(got[c] for c in range(nB)))  # ascending reference blocks
            job.finish(s, e, t32[s:e], R_, C_, V_, keys, idx)
            with job.lock:
                bar.update(e - s)

    pairs = [(I, J) for I in range(nB) for J in range(I, nB)]
    if nt <= 1:
        with blas_single_thread():  # small tiles: a multi-threaded BLAS only adds waiting
            for I in range(nB):
                threshold(I)
            for IJ in pairs:
                tile(IJ)
        return
    with blas_single_thread(), ThreadPoolExecutor(nt) as pool:
        list(pool.map(threshold, range(nB)))
        list(pool.map(tile, pairs))


def _rowwise_lexsort(key: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Per-row order by key descending, then index ascending."""
    o1 = np.argsort(idx, axis=1, kind="stable")
    k1 = np.take_along_axis(key, o1, 1)
    o2 = np.argsort(-k1, axis=1, kind="stable")
    return np.take_along_axis(o1, o2, 1)


def knn_search(Q, R=None, k: int = 1, *, metric: str = "cosine", exclude_self: bool = False,
               device="auto", block: int | None = None, progress: bool = False):
    """Exact k nearest references of every query, in bounded memory (docs/methods.md §1).

    Parameters
    ----------
    Q : array (Nq, D)
        Queries.
    R : array (Nr, D) or None
        References; ``None`` means ``R = Q``.
    k : int
        Neighbours per query (at most the number of references available).
    metric : {"cosine", "euclidean"}
        Cosine ranks by the inner product of L2-normalised rows (rows are normalised here);
        Euclidean by the distance.
    exclude_self : bool
        Query i never retrieves reference i (requires ``len(Q) == len(R)``; the papers' protocol
        with ``R = Q``, Roth et al. ICML 2020 and Musgrave et al. ECCV 2020).
    device : "auto" | "cpu" | "cuda"
        Where the float32 GEMM blocks and ``torch.topk`` run (CUDA when present for "auto").
    block : int, optional
        Queries per block (default: 512 on the CPU, where tiles are block x a few thousand
        references; on CUDA a block of at most 1 GiB).
    progress : bool
        Show a tqdm progress bar.

    Returns
    -------
    values : float64 array (Nq, k)
        Cosine similarities (descending) or Euclidean distances (ascending).
    indices : int64 array (Nq, k)
        Reference indices.

    Notes
    -----
    Exact: the result is the ranking of the float64 keys, ties broken by the lower reference
    index, although the bulk GEMM runs in float32 (see the module docstring for the
    certification). Memory: on the CPU one float32 tile per thread and the keys above threshold
    of the unfinished query blocks (about 1.7 k per query; a same-set search holds at its peak
    about those of a quarter of the queries, 14 bytes each); on CUDA one
    ``block x Nr`` float32 block plus ``Nq x (k + 16)`` candidates. Never ``Nq x Nr``.
    """
    exclude_self = check_bool(exclude_self, "exclude_self")
    check_metric(metric)
    block = check_int(block, "block (queries per block)", allow_none=True)
    same = R is None or R is Q
    Q64 = prepared_rows(Q, metric, "Q")
    R64 = Q64 if same else prepared_rows(R, metric, "R")
    if R64.shape[1] != Q64.shape[1]:
        raise EmbedscopeError(f"Q and R differ in dimension: {Q64.shape[1]} vs {R64.shape[1]}")
    if exclude_self and R64.shape[0] != Q64.shape[0]:
        raise EmbedscopeError("exclude_self needs as many references as queries (query i is reference i)")
    if not same and exclude_self and np.array_equal(Q64, R64):
        R64, same = Q64, True
    if not same and exclude_self:
        raise EmbedscopeError("exclude_self with a separate reference array is not supported; pass R=None")
    same = same and exclude_self
    n_avail = R64.shape[0] - (1 if same else 0)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise EmbedscopeError(f"k must be a positive integer, got {k!r}")
    if k > n_avail:
        raise EmbedscopeError(f"k = {k} exceeds the {n_avail} references available")
    ks = KeySpace(Q64, R64, metric, same)
    keys, idx = topk_exact(ks, int(k), device=device, block=block, progress=progress)
    if metric == "euclidean":
        return np.sqrt(np.maximum(-keys, 0.0)) / ks.scale, idx  # exact: the scale is a power of two
    return keys, idx
