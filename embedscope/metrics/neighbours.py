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
from embedscope.metrics.scale import pow2_rows, pow2_shift
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

    Memory is bounded: queries are processed in blocks of ``block_size`` rows against all N
    references (one GEMM per block, about 256 MB), rows sorted by class so that a query's own
    class is a contiguous range of columns (its best column found there, then masked: the best of
    the rest is the nearest other-class point); no N × N matrix is formed.
    The search runs in float64 for float64 input, in float32 for anything else; the value returned
    for each point is then the similarity of the pair it chose recomputed in float64 from the two
    rows (exact to rounding: a duplicate is at distance 0). With float32 search, a near-tie within
    float32 rounding may pick a pair whose exact similarity is a little lower (cosine, dot: about
    1e-7 relative; Euclidean keys carry an absolute error of about eps·‖x‖², so distances closer
    than about sqrt(eps)·‖x‖ may be confused). Rows at extreme scales
    (largest |value| beyond 2^±40, e.g. 1e30 in float32, whose squares overflow) are multiplied by
    a power of two first (exact; per row for cosine, which ignores row scale) and the
    similarities scaled back in float64; similarities beyond the float64 range are refused.

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
    shift = pow2_shift(X, _SCALE_LIMIT)
    if shift:
        if metric == "cosine":  # cosine ignores each row's scale: bring every row's largest |value| near 1
            X = pow2_rows(X).astype(dtype, copy=False)
            shift = 0
        else:
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
    if metric == "cosine":
        n64 = np.linalg.norm(X64, axis=1, keepdims=True)
        X64 /= np.where(n64 > 0, n64, 1.0)
        norms = np.linalg.norm(Xs, axis=1, keepdims=True)
        Xs = Xs / np.where(norms > 0, norms, 1).astype(dtype)
    sq = np.einsum("ij,ij->i", Xs, Xs) if metric == "euclidean" else None

    def exact(i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """float64 similarity of the pairs (i, j) of sorted rows, each reduced on its own."""
        if metric == "euclidean":
            d = X64[i] - X64[j]
            return -np.sqrt(np.einsum("ij,ij->i", d, d))
        return np.einsum("ij,ij->i", X64[i], X64[j])

    if block_size is None:
        block_size = max(1, _BLOCK_BYTES // (np.dtype(dtype).itemsize * n))

    out_same = np.empty(n, dtype=np.float64)
    out_diff = np.empty(n, dtype=np.float64)
    blocks = range(0, n, block_size)
    if progress:
        from embedscope.progress import progress_bar

        blocks = progress_bar(blocks, desc="nearest same/different", unit="block")
    XsT = Xs.T
    for q0 in blocks:
        q1 = min(q0 + block_size, n)
        rows = np.arange(q1 - q0)
        S = Xs[q0:q1] @ XsT  # (B, N) similarities (euclidean: 2 x_i.x_j - |x_j|^2, same argmax)
        if metric == "euclidean":
            S *= 2
            S -= sq[None, :]
        S[rows, q0 + rows] = -np.inf  # the query itself
        # rows are sorted by class: the block's queries hold a few consecutive classes, each a
        # contiguous range of columns. Per class: the best own-class column, then those columns
        # masked, the best of the rest is the nearest different-class point.
        j_same = np.zeros(q1 - q0, dtype=np.int64)
        has_same = np.zeros(q1 - q0, dtype=bool)
        for c in np.unique(cls[q0:q1]):
            r = np.flatnonzero(cls[q0:q1] == c)
            lo, hi = starts[c], ends[c]
            sub = S[r[0]:r[-1] + 1, lo:hi]
            j_same[r] = lo + np.argmax(sub, axis=1)
            has_same[r] = hi - lo > 1
            sub[...] = -np.inf
        # the value of each winner is recomputed in float64 from the pair itself: the search's
        # float32 (and the Euclidean expansion 2 x.y - |y|^2, which cancels for close pairs:
        # exact duplicates came out at distance 5e-3 in float32, 4e-8 in float64) only chooses it
        out_same[q0:q1] = -np.inf
        out_same[q0 + rows[has_same]] = exact(q0 + rows[has_same], j_same[has_same])
        out_diff[q0:q1] = -np.inf
        if n_classes > 1:
            out_diff[q0:q1] = exact(q0 + rows, np.argmax(S, axis=1))
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


def _similarities(a: Any, name: str) -> np.ndarray:
    """A 1-D numeric array of similarities (NaN allowed: lone points) as float64."""
    return numeric_array(a, name, 1, "a 1-D array (one value per point)").astype(np.float64)


def share_below_diagonal(s_same: Any, s_diff: Any) -> tuple[float, int]:
    """Share of points with s_diff < s_same (strictly below the diagonal; = R@1 when no point is tied,
    docs/methods.md §10; a tie is on the diagonal, not below it) among those with both values
    defined, and the number left out (NaN: lone points). Higher is better.

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
