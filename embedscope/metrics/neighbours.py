"""Nearest same-class and nearest other-class similarity of every point (docs/methods.md §10).

:func:`nearest_same_different` gives, for every point, the similarity to its most similar
same-class point and to its most similar different-class point (Xuan, Stylianou, Pless §2.4), in
bounded memory; :func:`share_below_diagonal` the share of points nearer their own class (= R@1
when no point is tied: a point whose two similarities are equal is not counted, where R@1 breaks
the tie by reference index).
The figure is :func:`embedscope.viz.plot_same_different`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.metrics.scale import pow2_rows_outside, pow2_shift, unit_rows
from embedscope.validation import check_int, check_labels, check_matrix, numeric_array

METRICS = ("cosine", "dot", "euclidean")

#: bytes of the query-block x references similarity matrix (float32: 2^26 entries)
_BLOCK_BYTES = 256 * 2**20

#: inputs whose largest |value| lies outside [2^-_SCALE_LIMIT, 2^_SCALE_LIMIT] are computed on
#: rows multiplied by a power of two (exact), so squares and inner products cannot overflow (or
#: underflow) in float32; the similarities are scaled back in float64.
_SCALE_LIMIT = 40


def nearest_same_different(
    X: Any,
    y: Any,
    *,
    metric: str = "cosine",
    block_size: int | None = None,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Similarity of every point to its nearest same-class and nearest different-class point.

    docs/methods.md §10 (Xuan, Stylianou, Pless, *Visualizing How Embeddings Generalize*, §2.4)::

        s_same_i = max_{j ≠ i, y_j = y_i} s(x_i, x_j)      s_diff_i = max_{j: y_j ≠ y_i} s(x_i, x_j)

    with s the cosine similarity (``metric="cosine"``: rows L2-normalised; an all-zero row has
    similarity 0 to everything), the inner product (``"dot"``) or the negated Euclidean distance
    (``"euclidean"``: s = −‖x_i − x_j‖, so that larger is more similar). The point itself is always
    excluded. s_diff_i < s_same_i means a 1-NN query of x_i is correct (the point lies below the
    diagonal of the scatter), so the share of such points is the R@1 of the set when no point is
    tied. A tie s_same = s_diff lies on the diagonal and is not below it (docs/methods.md §10
    counts the points below), while R@1 (§1: ties to the lower reference index) may count it a
    hit. Higher s_same and lower s_diff are better.

    Memory is bounded: rows are processed in blocks of ``block_size`` rows (one GEMM per block, about
    256 MB), rows sorted by class so that a row's own class is a contiguous range of columns (its
    best column found there, then masked: the best of the rest is the nearest other-class point); no
    N × N matrix is formed. From ``SYMMETRIC_MIN_ROWS`` rows each block is multiplied with the rows from
    its own on only, each pair's similarity computed once and read for both of its rows (half the
    GEMM); rows whose nearest that cannot prove (near-ties) are searched again against every row. The
    values are the same either way.
    The search runs in float64 for float64 input and for input whose values float32 cannot hold
    (integers beyond 2^24, float128), in float32 for anything else; the value returned
    for each point is the largest float64 similarity, recomputed from the two rows (exact to
    rounding: a duplicate is at distance 0), among the pairs whose search key lies within the
    search's proven rounding bound of the best key (twice γ_D = D·u per product; Euclidean keys
    2 x·y − ‖y‖², whose error grows with ‖x‖² however close the pair). So near-duplicates that the
    search's precision cannot order (float32 rows a few units in the last place apart: their
    Euclidean distances came out up to 100% off, and the share below the diagonal 0.57 where R@1
    was 0.25) get the values of the formula; many such candidates (a collapsed model) are
    re-decided by float64 keys (Euclidean: about the rows' mean), rows equal to each other taken
    once. Rows at extreme scales (largest |value| beyond 2^±40, e.g. 1e30 in float32, whose
    squares overflow) are multiplied by a power of two first (exact; per row for cosine, which
    ignores row scale) and the similarities scaled back in float64; similarities beyond the
    float64 range are refused.

    Parameters
    ----------
    X : array (N, D)
    y : array (N,) of class labels (integers, integral floats or strings; see
        :func:`embedscope.validation.check_labels`)
    metric : {"cosine", "dot", "euclidean"}
    block_size : int, optional
        Query rows per block (default: 2^26 / N, at least 1).
    progress : bool
        tqdm bar over the blocks.

    Returns
    -------
    s_same, s_diff : array (N,) float64
        ``s_same`` is NaN for a point with no other point of its class (a class of one);
        ``s_diff`` is NaN when every point has the same class. No other value is NaN.

    Examples
    --------
    >>> X = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> s_same, s_diff = nearest_same_different(X, [0, 0, 1, 1], metric="dot")
    >>> s_same.round(6).tolist(), s_diff.round(6).tolist()
    ([0.9, 0.9, 0.9, 0.9], [0.1, 0.18, 0.1, 0.18])
    """
    if metric not in METRICS:
        raise EmbedscopeError(f"unknown metric '{metric}' (choose {', '.join(METRICS)})")
    block_size = check_int(block_size, "block_size", allow_none=True)
    # the source type decides the compute type: float64 stays float64, anything else float32
    # (check_matrix would widen integers to float64)
    X = numeric_array(X, "X", 2, "a 2-D array (N x D)")
    dtype = np.float64 if X.dtype == np.float64 else np.float32
    X = check_matrix(X, "X", min_rows=0)  # NaN and inf refused
    if dtype == np.float32 and X.dtype not in (np.float32, np.float16) and X.size:
        # values float32 cannot hold (integers beyond 2^24, float128 digits): searched in float64, since the
        # values returned are those of the rows as given (in float32 they were the rounded rows': distinct
        # rows became duplicates, similarities 1e-8 relative off)
        with np.errstate(over="ignore", invalid="ignore"):
            exact32 = bool(np.array_equal(X.astype(np.float32), X))
        if not exact32:
            dtype = np.float64
    y = check_labels(y, X.shape[0], "y")
    n = X.shape[0]
    s_same = np.full(n, np.nan)
    s_diff = np.full(n, np.nan)
    if n == 0:
        return s_same, s_diff
    if X.dtype != dtype:
        with np.errstate(over="ignore"):
            X = X.astype(dtype)
        if not np.all(np.isfinite(X)):  # only a float wider than float64 can overflow here
            raise EmbedscopeError("X contains NaN or inf (or values beyond the float32 range)")

    # extreme scales: an exact power-of-two rescaling (similarities are scaled back at the end)
    # (cosine ignores each row's scale: every row of extreme scale brought near 1, whatever the others':
    # a row at 1e-25 in float32 would otherwise have its squares, and so its norm, underflow)
    shift = 0 if metric == "cosine" else pow2_shift(X, _SCALE_LIMIT)
    if metric != "cosine":  # rows far apart in scale (scaled or not): the small ones' products may lose their digits
        from embedscope.metrics.search.knn import EUCLIDEAN_SPAN_LIMIT, row_scales

        lo, top = row_scales(X)
        span = int(np.frexp(top)[1]) - int(np.frexp(lo)[1]) if lo > 0 else 0
        if span > EUCLIDEAN_SPAN_LIMIT:
            raise EmbedscopeError(
                f"the rows' scales span {lo:.3g} to {top:.3g} (more than 2^{EUCLIDEAN_SPAN_LIMIT}): {metric} "
                "similarities that far apart are not computed together (the small rows' products come near "
                "float64's underflow, where they lose their digits, then vanish): rescale the rows or leave out "
                "the outlying ones")
        if dtype == np.float32 and span > _FLOAT32_SPAN:  # (the small float32 rows' products would be subnormal)
            dtype = np.float64
            X = X.astype(np.float64)
    if metric == "cosine":
        X = pow2_rows_outside(X, _SCALE_LIMIT).astype(dtype, copy=False)
    elif shift:
        X = np.ldexp(X, -shift).astype(dtype, copy=False)

    # classes numbered by first appearance: the computation (and so every rounding) depends only on
    # the partition of the rows, not on how the labels are spelled (integers, names)
    _, first, inverse = np.unique(y, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    code = rank[inverse.reshape(-1)]
    order = np.argsort(code, kind="stable")
    Xs = np.ascontiguousarray(X[order])
    cls = code[order]  # class index per sorted row, 0..C-1
    starts = np.flatnonzero(np.r_[True, cls[1:] != cls[:-1]])
    ends = np.r_[starts[1:], n]
    n_classes = len(starts)

    # float64 rows for the exact value of each chosen pair (cosine: float64 unit rows)
    X64 = Xs.astype(np.float64)
    if metric == "cosine":  # (the unit rows of §1: parallel rows get the same unit row, so they tie exactly)
        X64 = unit_rows(X64, inplace=True)[0]
        norms = np.linalg.norm(Xs, axis=1, keepdims=True)
        Xs = Xs / np.where(norms > 0, norms, 1).astype(dtype)
    sq = np.einsum("ij,ij->i", Xs, Xs) if metric == "euclidean" else None

    def exact(i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """float64 similarity of the pairs (i, j) of sorted rows, each reduced on its own."""
        if metric == "euclidean":
            d = X64[i] - X64[j]
            return -np.sqrt(np.einsum("ij,ij->i", d, d))
        return np.einsum("ij,ij->i", X64[i], X64[j])

    # the nearest of each row by its float64 similarity, the search's keys certified (_certified_best)
    ctx = {"X64": X64, "exact": exact, "metric": metric, "euclidean": metric == "euclidean", "dim": Xs.shape[1],
           "err": _key_error(metric, dtype, Xs.shape[1]), "first": None,
           "norms": None if metric == "cosine" else np.sqrt(np.einsum("ij,ij->i", X64, X64)),
           "Xs": Xs, "sq": sq, "cls": cls, "starts": starts, "ends": ends, "n_classes": n_classes}
    out_same = np.full(n, -np.inf)
    out_diff = np.full(n, -np.inf)
    if n >= SYMMETRIC_MIN_ROWS:
        # each pair's similarity computed once (each row block against the rows from its own on); the rows
        # whose nearest it cannot certify alone (near-ties) searched again row by row below
        rows_per_block = block_size or max(1, _BLOCK_BYTES // ((8 if metric == "euclidean" else 4) * n))
        rest = _symmetric_pass(ctx, rows_per_block, out_same, out_diff, progress)
        progress = False
    else:
        rest = np.arange(n)
    _rows_pass(rest, block_size or max(1, _BLOCK_BYTES // (np.dtype(dtype).itemsize * n)), ctx, out_same,
               out_diff, progress)
    if shift:
        # undo the rescaling in float64: distances scale by 2^shift, inner products by 4^shift
        power = shift if metric == "euclidean" else 2 * shift
        with np.errstate(over="ignore"):
            for a in (out_same, out_diff):
                finite = np.isfinite(a)
                a[finite] = np.ldexp(a[finite], power)
                if not np.all(np.isfinite(a[finite])):
                    raise EmbedscopeError(f"{metric} similarities of these embeddings exceed the float64 range "
                                          f"(largest |value| {float(np.ldexp(np.max(np.abs(X)), shift)):.3g}): "
                                          "rescale the embeddings")
    out_same[~np.isfinite(out_same)] = np.nan
    out_diff[~np.isfinite(out_diff)] = np.nan
    s_same[order] = out_same
    s_diff[order] = out_diff
    return s_same, s_diff


#: from this many rows the similarities are computed once per pair, each row block against the rows
#: from its own on (:func:`_symmetric_pass`); below, row blocks against every row (:func:`_rows_pass`)
SYMMETRIC_MIN_ROWS = 4096


def _rows_pass(R: np.ndarray, block_size: int, ctx: dict, out_same: np.ndarray, out_diff: np.ndarray,
               progress: bool = False) -> None:
    """The nearest same- and other-class similarity of the sorted rows ``R`` (increasing), each block of
    them against every row: one GEMM per block, then per class the nearest own-class column
    (:func:`_certified_best`), those columns masked, and the nearest of the rest."""
    Xs, sq, cls, starts, ends = ctx["Xs"], ctx["sq"], ctx["cls"], ctx["starts"], ctx["ends"]
    XsT = Xs.T
    blocks = range(0, len(R), block_size)
    if progress:
        from embedscope.progress import progress_bar

        blocks = progress_bar(blocks, desc="nearest same/different", unit="block")
    for k0 in blocks:
        Rc = R[k0:k0 + block_size]
        rows = np.arange(Rc.size)
        consecutive = int(Rc[-1]) - int(Rc[0]) + 1 == Rc.size
        S = (Xs[Rc[0]:Rc[-1] + 1] if consecutive else Xs[Rc]) @ XsT  # (B, N) (euclidean: 2 x_i.x_j - |x_j|^2)
        if ctx["euclidean"]:
            S *= 2
            S -= sq[None, :]
        S[rows, Rc] = -np.inf  # the query itself
        # rows are sorted by class: the block's queries hold a few consecutive classes, each a
        # contiguous range of columns (and of the block's rows). Per class: the nearest own-class column,
        # then those columns masked, the nearest of the rest is the nearest different-class point.
        cr = cls[Rc]
        out_same[Rc] = -np.inf
        for c in np.unique(cr):
            r = np.flatnonzero(cr == c)
            lo, hi = starts[c], ends[c]
            sub = S[r[0]:r[-1] + 1, lo:hi]
            if hi - lo > 1:
                out_same[Rc[r[0]:r[-1] + 1]] = _certified_best(sub, Rc[r[0]:r[-1] + 1], lo, ctx)
            sub[...] = -np.inf
        out_diff[Rc] = -np.inf
        if ctx["n_classes"] > 1:
            out_diff[Rc] = _certified_best(S, Rc, 0, ctx)
        S = sub = None  # (one block held at a time, views included)


def _row_top2(M: np.ndarray):
    """Per row of ``M``: the largest value, its first column, and the largest of the others."""
    b = np.argmax(M, axis=1)
    t1, t2 = _max_without(M, b)
    return t1, b, t2


def _max_without(M: np.ndarray, b: np.ndarray):
    """Per row of ``M``: the value in column ``b[row]`` and the largest of the others (that column put
    aside for a moment: one more reading pass, where a mask of the candidates is a written one)."""
    rows = np.arange(M.shape[0])
    t1 = M[rows, b]
    M[rows, b] = -np.inf
    try:
        t2 = np.max(M, axis=1)
    finally:
        M[rows, b] = t1
    return t1, t2


def _col_top2(M: np.ndarray, buf: np.ndarray | None = None):
    """Per column of ``M`` (rows contiguous): the largest value, its first row, and the largest of the
    others (numpy's arg-maximum along the rows reads a column at a time: ~25x a row's; here the
    positions of the maxima are found by one comparison of the whole block, into ``buf``: booleans, at
    least the size of ``M``, reused from block to block)."""
    w = M.shape[1]
    t1 = np.max(M, axis=0)
    eq = np.equal(M, t1[None, :], out=None if buf is None else buf[:M.size].reshape(M.shape))
    f = np.flatnonzero(eq)
    r = f // w
    _, first = np.unique(f - r * w, return_index=True)  # (f in row order: each column's first row)
    b = r[first]
    cols = np.arange(w)
    M[b, cols] = -np.inf
    try:
        t2 = np.max(M, axis=0)
    finally:
        M[b, cols] = t1
    return t1, b, t2


def _merge_top2(st, s: slice, t1, b, t2) -> None:
    """Fold one tile's per-row (largest, its column, runner-up) into the running ones ``st`` of rows ``s``
    (a tie with the largest so far makes the runner-up equal to it)."""
    v1, i1, v2 = st
    c1 = v1[s]
    better = t1 > c1
    v2[s] = np.where(better, np.maximum(c1, t2), np.maximum(v2[s], t1))
    i1[s] = np.where(better, b, i1[s])
    v1[s] = np.where(better, t1, c1)


def _symmetric_pass(ctx: dict, tile: int, out_same: np.ndarray, out_diff: np.ndarray, progress: bool) -> np.ndarray:
    """Each row's largest same-class and other-class keys (and their columns, and the runner-ups) from
    each block of ``tile`` rows multiplied with the rows from its own on, each pair's similarity
    computed once and read by both of its rows; a row whose runner-up lies below its candidates' threshold
    (:func:`_row_thresholds`: the keys' rounding bound) has its nearest proven, and its float64
    similarity is written. Returns the rows left (near-ties: several candidates), increasing, for
    :func:`_rows_pass`. The keys come from the same float32 operations as the row blocks' (a product's
    rounding may differ with the order of its operands; the bound holds either way), so a row proven here
    has the nearest point the row blocks find, and the same float64 value."""
    Xs, sq, cls, starts, ends = ctx["Xs"], ctx["sq"], ctx["cls"], ctx["starts"], ctx["ends"]
    euclid, norms, exact = ctx["euclidean"], ctx["norms"], ctx["exact"]
    n = Xs.shape[0]
    top = {k: (np.full(n, -np.inf, dtype=Xs.dtype), np.zeros(n, dtype=np.int64), np.full(n, -np.inf, dtype=Xs.dtype))
           for k in ("same", "diff")}
    blocks = range(0, n, tile)
    if progress:
        from embedscope.progress import progress_bar

        blocks = progress_bar(blocks, desc="nearest same/different", unit="block")
    buf = None
    for i0 in blocks:
        # rows i0..i1 against the rows from i0 on: one wide GEMM (a square tile's GEMM took 2.5x the time
        # per value); its first h columns hold both orderings of the block's own pairs, the rest are read
        # by rows (for rows i) and by columns (for the rows after the block)
        i1 = min(n, i0 + tile)
        h = i1 - i0
        G = Xs[i0:i1] @ Xs[i0:].T
        if euclid:  # keys 2 x.y - |y|^2 of the rows i (columns j) and of the rows j > i1 (columns i)
            Kc = G[:, h:] * 2 - sq[i0:i1, None]
            Kr = G
            Kr *= 2
            Kr -= sq[None, i0:]
        else:
            Kr = G
            Kc = G[:, h:]
        d = np.arange(h)
        Kr[d, d] = -np.inf  # the row itself
        # the block's classes (rows sorted by class): their rectangles, then masked
        for c in range(cls[i0], cls[i1 - 1] + 1):
            ra, rb = max(starts[c], i0), min(ends[c], i1)
            cb = ends[c]
            sub = Kr[ra - i0:rb - i0, ra - i0:cb - i0]
            t1, b, t2 = _row_top2(sub)
            _merge_top2(top["same"], slice(ra, rb), t1, b + ra, t2)
            if cb > i1:  # the class goes on after the block: its later rows read the block's columns
                subc = Kc[ra - i0:rb - i0, :cb - i1]
                t1, b, t2 = _col_top2(subc)
                _merge_top2(top["same"], slice(i1, cb), t1, b + ra, t2)
                subc[...] = -np.inf
            sub[...] = -np.inf
        t1, b, t2 = _row_top2(Kr)
        _merge_top2(top["diff"], slice(i0, i1), t1, b + i0, t2)
        if i1 < n:
            if buf is None:  # (the first block's is the largest)
                buf = np.empty(Kc.size, dtype=bool)
            t1, b, t2 = _col_top2(Kc, buf)
            _merge_top2(top["diff"], slice(i1, n), t1, b + i0, t2)
        G = Kr = Kc = sub = subc = None  # (one block's keys held at a time, views included)
    rows = np.arange(n)
    redo = np.zeros(n, dtype=bool)
    for kind, out in (("same", out_same), ("diff", out_diff)):
        v1, best, v2 = top[kind]
        have = np.isfinite(v1)  # (none: a class of one, or a single class)
        t64 = v1.astype(np.float64)
        if norms is None:
            thr = _threshold(t64, ctx["err"], None, None, None, euclid)
        else:  # as the row blocks': the columns' bound at the largest norm among the columns searched
            cmax = np.maximum.reduceat(norms, starts)[cls] if kind == "same" else float(norms.max())
            thr = _threshold(t64, ctx["err"], norms, norms[best], cmax, euclid)
        one = have & (v2 < thr)
        out[one] = exact(rows[one], best[one])
        redo |= have & ~one
    return np.flatnonzero(redo)


#: candidate pairs whose float64 similarity is computed at once (bounded memory: pairs x D floats)
_PAIR_ELEMENTS = 1 << 22
#: a chunk of query rows with more candidate pairs than this per row (near-ties in the search's
#: precision: near-duplicate or collapsed rows) has them re-decided by float64 keys first
_FEW_PER_ROW = 4


#: binary orders of magnitude between the largest and the smallest non-zero row from which a float32
#: search scaled to the largest row runs in float64 (the small rows would be float32 subnormals)
_FLOAT32_SPAN = 60


def _key_error(metric: str, dtype, d: int) -> tuple[float, float]:
    """A bound (a, b) on |key − exact key| of keys computed in ``dtype`` from rows of D values:
    cosine (unit rows: the rounding of both rows' normalisation and of their product) a alone;
    dot b‖x_i‖‖x_j‖; Euclidean keys 2 x_i·x_j − ‖x_j‖² b(2‖x_i‖ + ‖x_j‖)‖x_j‖ (the product's and the
    squared norm's). b = 2(D + 8)u, twice a dot product's γ_D = D·u (u: the unit roundoff); a adds
    the subnormal floor of D products."""
    fi = np.finfo(dtype)
    gamma = (d + 8) * float(fi.eps)  # 2 (D + 8) u
    floor = 4 * (d + 2) * float(fi.smallest_subnormal)
    return (3 * gamma + floor, 0.0) if metric == "cosine" else (floor, gamma)


def _candidates(keys: np.ndarray, err: tuple[float, float], qn, cn, euclidean: bool, *,
                per_column: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Mask of the columns whose exact key may be the row's largest: key + its bound ≥ the best key
    − its bound (excluded columns have key −inf), and each row's column of the largest key. ``qn``,
    ``cn``: the row and column norms the bound scales with (None for cosine); the columns' bound
    taken at the largest column norm (one threshold per row), or with ``per_column`` at each one's
    (a row far from the others no longer widens every row's threshold)."""
    a, b = err
    if qn is None or not per_column:
        best, thr = _row_thresholds(keys, err, qn, cn, euclidean)
        return keys >= thr[:, None], best
    best = np.argmax(keys, axis=1)
    top = keys[np.arange(keys.shape[0]), best].astype(np.float64)
    cb = cn[best]
    low = top - (a + b * ((2 * qn + cb) * cb if euclidean else qn * cb))
    slack = a + b * ((2 * qn[:, None] + cn[None, :]) * cn[None, :] if euclidean else qn[:, None] * cn[None, :])
    return (keys + slack >= low[:, None]) & np.isfinite(keys), best


def _row_thresholds(keys: np.ndarray, err: tuple[float, float], qn, cn, euclidean: bool):
    """Each row's column of the largest key and the threshold (float64) at or above which a key is a
    candidate (:func:`_candidates` without ``per_column``)."""
    best = np.argmax(keys, axis=1)
    top = keys[np.arange(keys.shape[0]), best].astype(np.float64)
    if qn is None:
        return best, _threshold(top, err, None, None, None, euclidean)
    return best, _threshold(top, err, qn, cn[best], float(cn.max()), euclidean)


def _threshold(top: np.ndarray, err: tuple[float, float], qn, cb, cmax, euclidean: bool) -> np.ndarray:
    """The candidates' threshold of rows whose largest key is ``top`` (float64): ``top`` less the bound
    of its own key (its column's norm ``cb``) and of any other (at the largest column norm ``cmax``);
    ``qn``: the rows' norms (None for cosine: unit rows, the bound ``a`` each)."""
    a, b = err
    if qn is None:
        return top - 2 * a
    low = top - (a + b * ((2 * qn + cb) * cb if euclidean else qn * cb))
    return low - (a + b * ((2 * qn + cmax) * cmax if euclidean else qn * cmax))


def _runner_up_at_least(keys: np.ndarray, best: np.ndarray, thr: np.ndarray) -> np.ndarray:
    """Per row, whether a column other than ``best`` has a key ≥ ``thr`` (more than one candidate)."""
    return _max_without(keys, best)[1] >= thr


def _certified_best(S: np.ndarray, q_rows: np.ndarray, c_first: int, ctx: dict, *, chunk_rows: int = 64) -> np.ndarray:
    """Per row of the search keys ``S`` (rows ``q_rows``, columns ``c_first``.. of the sorted rows;
    excluded columns −inf) the largest float64 similarity ``ctx["exact"](i, j)`` over its columns.

    The search's keys are rounded (its dtype's GEMM; Euclidean keys 2 x·y − ‖y‖² cancel for close
    pairs), so the column of the largest key need not be the nearest: every column within the key
    error (:func:`_key_error`) of the best is a candidate. One candidate per row (the usual case)
    costs one pair. A chunk of rows with many (near-duplicates, a collapsed model) takes rows equal to
    each other once (equal rows, equal similarities), recomputes its candidates' keys in float64
    (Euclidean: about the chunk's mean, so that close rows do not cancel) and re-decides them with
    the float64 bound; the survivors' similarities decide (cosine: where many survive, near-parallel
    rows whose cosines tie within a float64 cosine's own rounding, the best key's pair)."""
    X64, exact, euclid, d = ctx["X64"], ctx["exact"], ctx["euclidean"], ctx["dim"]
    m, w = S.shape
    norms = ctx["norms"]  # None for cosine
    cn = None if norms is None else norms[c_first:c_first + w]
    out = np.full(m, -np.inf)
    step = max(1024, _PAIR_ELEMENTS // max(1, d))
    chunk_rows = max(chunk_rows, _PAIR_ELEMENTS // max(1, w))  # (a heavy chunk gathers its columns once)
    for r0 in range(0, m, chunk_rows):
        blk = S[r0:r0 + chunk_rows]
        nb = blk.shape[0]
        qi = q_rows[r0:r0 + nb]
        qn = None if norms is None else norms[qi]
        best, thr = _row_thresholds(blk, ctx["err"], qn, cn, euclid)
        multi = _runner_up_at_least(blk, best, thr)
        if not multi.any():  # one candidate per row (the usual case): the largest key's column
            out[r0:r0 + nb] = exact(qi, c_first + best)
            continue
        # the candidates' mask of the rows of several (the others' one candidate is their best column)
        many = np.flatnonzero(multi)
        mask_many = blk[many] >= thr[many, None]
        count = np.ones(nb, dtype=np.int64)
        count[many] = np.count_nonzero(mask_many, axis=1)
        mask = None  # (the whole chunk's, where needed)
        if count.sum() > _FEW_PER_ROW * nb and norms is not None:  # each column's own bound
            mask, best = _candidates(blk, ctx["err"], norms[qi], cn, euclid, per_column=True)
            count = np.count_nonzero(mask, axis=1)
            many = np.flatnonzero(count > 1)
            mask_many = mask[many]
        if np.all(count <= 1):  # one candidate per row (the usual case): the largest key's column
            out[r0:r0 + nb] = exact(qi, c_first + best)
            continue
        if count.sum() <= _FEW_PER_ROW * nb:
            one = np.flatnonzero(count == 1)  # (its one candidate is the best column)
            rm, cm = np.nonzero(mask_many)
            ri = np.concatenate([one, many[rm]])
            cabs = c_first + np.concatenate([best[one], cm])
        else:  # near-ties in the search's precision: distinct rows once, then float64 keys decide
            if mask is None:
                mask = blk >= thr[:, None]
            cols = np.flatnonzero(mask.any(axis=0))
            if ctx["first"] is None:  # the first sorted row equal to each row (equal rows, equal similarities)
                _, idx, inv = np.unique(X64, axis=0, return_index=True, return_inverse=True)
                ctx["first"] = idx[inv.reshape(-1)]
            reps, group = np.unique(ctx["first"][c_first + cols], return_inverse=True)
            order = np.argsort(group, kind="stable")
            bounds = np.flatnonzero(np.r_[True, np.diff(group[order]) != 0])
            has = np.logical_or.reduceat(mask[:, cols[order]], bounds, axis=1)  # row x distinct row
            Q, R = X64[qi], X64[reps]
            if euclid:  # about the chunk's mean: the bound scales with the centred norms
                centre = Q.mean(axis=0)
                Q = Q - centre
                R = R - centre
                k64 = 2 * (Q @ R.T) - np.einsum("ij,ij->i", R, R)[None, :]
            else:
                k64 = Q @ R.T
            k64[~has] = -np.inf
            qn = None if norms is None else np.sqrt(np.einsum("ij,ij->i", Q, Q))
            rn = None if norms is None else np.sqrt(np.einsum("ij,ij->i", R, R))
            sub, top = _candidates(k64, _key_error(ctx["metric"], np.float64, d), qn, rn, euclid, per_column=True)
            sub &= has
            if ctx["metric"] == "cosine" and np.count_nonzero(sub) > _FEW_PER_ROW * nb:
                # cosines of near-parallel rows tied within the float64 rounding of a cosine itself
                # (the float64 similarity's own bound): the best key's pair is the nearest to it
                out[r0:r0 + nb] = exact(qi, reps[top])
                continue
            ri, k = np.nonzero(sub)
            cabs = reps[k]  # (a row equal to a candidate: its similarity is the candidate's)
        seg = out[r0:r0 + nb]
        for p0 in range(0, ri.size, step):
            v = exact(qi[ri[p0:p0 + step]], cabs[p0:p0 + step])
            np.maximum.at(seg, ri[p0:p0 + step], v)
    return out


def _similarities(a: Any, name: str) -> np.ndarray:
    """A 1-D numeric array of similarities (NaN allowed: lone points) as float64; ±inf is no
    similarity (it was counted as a lone point, left out) and is refused."""
    a = numeric_array(a, name, 1, "a 1-D array (one value per point)").astype(np.float64)
    if np.isinf(a).any():
        i = int(np.flatnonzero(np.isinf(a))[0])
        raise EmbedscopeError(f"{name} holds an infinite value (the first at position {i}): similarities are "
                              "finite, NaN marks a point without one")
    return a


def share_below_diagonal(s_same: Any, s_diff: Any) -> tuple[float, int]:
    """Share of points with s_diff < s_same (strictly below the diagonal; = R@1 when no point is tied,
    docs/methods.md §10; a tie is on the diagonal, not below it) among those with both values
    defined, and the number left out (NaN: lone points; ±inf is an error). Higher is better.

    >>> share_below_diagonal([0.9, 0.8, np.nan], [0.5, 0.85, 0.1])
    (0.5, 1)
    """
    s_same = _similarities(s_same, "s_same")
    s_diff = _similarities(s_diff, "s_diff")
    if s_same.shape != s_diff.shape:
        raise EmbedscopeError(f"s_same and s_diff must have the same length, got {s_same.shape[0]} and {s_diff.shape[0]}")
    ok = np.isfinite(s_same) & np.isfinite(s_diff)
    n_ok = int(ok.sum())
    share = float(np.mean(s_diff[ok] < s_same[ok])) if n_ok else float("nan")
    return share, int(len(s_same) - n_ok)


__all__ = ["nearest_same_different", "share_below_diagonal", "METRICS"]
