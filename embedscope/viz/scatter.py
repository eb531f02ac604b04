"""Same-vs-different similarity scatter (METHODS.md §10; Xuan, Stylianou, Pless §2.4).

:func:`nearest_same_different` computes, for every point, the similarity to its most similar
same-class point and to its most similar different-class point in bounded memory;
:func:`plot_same_different` draws the scatter (train and test panels side by side).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embedscope.errors import EmbedscopeError

METRICS = ("cosine", "dot", "euclidean")
BELOW_COLOR = "#17becf"  # cyan: nearer its own class (a 1-NN query would be right)
ABOVE_COLOR = "#ff7f0e"  # orange: nearer another class

#: bytes of the query-block x references similarity matrix (float32: 2^26 entries)
_BLOCK_BYTES = 256 * 2**20


def nearest_same_different(
    X: Any,
    y: Any,
    *,
    metric: str = "cosine",
    block_size: int | None = None,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Similarity of every point to its nearest same-class and nearest different-class point.

    METHODS.md §10 (Xuan, Stylianou, Pless, *Visualizing How Embeddings Generalize*, §2.4)::

        s_same_i = max_{j ≠ i, y_j = y_i} s(x_i, x_j)      s_diff_i = max_{j: y_j ≠ y_i} s(x_i, x_j)

    with s the cosine similarity (``metric="cosine"``: rows L2-normalised; an all-zero row has
    similarity 0 to everything), the inner product (``"dot"``) or the negated Euclidean distance
    (``"euclidean"``: s = −‖x_i − x_j‖, so that larger is more similar). The point itself is always
    excluded. s_diff_i < s_same_i means a 1-NN query of x_i is correct (the point lies below the
    diagonal of the scatter), so the share of such points is the R@1 of the set (when there are no
    exact ties; a tie counts as a miss here).

    Memory is bounded: queries are processed in blocks of ``block_size`` rows against all N
    references (one GEMM per block, about 256 MB), references sorted by class so that per-class
    maxima are one ``np.maximum.reduceat`` over contiguous columns; no N × N matrix is formed.
    float64 input is computed in float64 (exact), anything else in float32.

    Parameters
    ----------
    X : array (N, D)
    y : array (N,) of integer (or any hashable, sortable) labels
    metric : {"cosine", "dot", "euclidean"}
    block_size : int, optional
        Query rows per block (default: 2^26 / N, at least 1).
    progress : bool
        tqdm bar over the blocks.

    Returns
    -------
    s_same, s_diff : array (N,) float64
        ``s_same`` is NaN for a point with no other point of its class (a class of one);
        ``s_diff`` is NaN when every point has the same class.
    """
    X = np.asarray(X)
    y = np.asarray(y)
    if X.ndim != 2:
        raise EmbedscopeError(f"X must be a 2-D array (N x D), got shape {X.shape}")
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise EmbedscopeError(f"y has shape {y.shape}, expected ({X.shape[0]},) to match X")
    if metric not in METRICS:
        raise EmbedscopeError(f"unknown metric '{metric}' (choose {', '.join(METRICS)})")
    if not np.issubdtype(X.dtype, np.number):
        raise EmbedscopeError(f"X must be numeric, got {X.dtype}")
    n = X.shape[0]
    s_same = np.full(n, np.nan)
    s_diff = np.full(n, np.nan)
    if n == 0:
        return s_same, s_diff
    dtype = np.float64 if X.dtype == np.float64 else np.float32
    X = X.astype(dtype, copy=False)
    if not np.all(np.isfinite(X)):
        raise EmbedscopeError("X contains NaN or inf")

    order = np.argsort(y, kind="stable")
    Xs = np.ascontiguousarray(X[order])
    _, cls = np.unique(y[order], return_inverse=True)  # class index per sorted row, 0..C-1
    starts = np.flatnonzero(np.r_[True, cls[1:] != cls[:-1]])
    n_classes = len(starts)

    if metric == "cosine":
        norms = np.linalg.norm(Xs, axis=1, keepdims=True)
        Xs = Xs / np.where(norms > 0, norms, 1).astype(dtype)
    sq = np.einsum("ij,ij->i", Xs, Xs) if metric == "euclidean" else None

    if block_size is None:
        block_size = max(1, _BLOCK_BYTES // (np.dtype(dtype).itemsize * n))
    block_size = int(block_size)
    if block_size < 1:
        raise EmbedscopeError(f"block_size must be positive, got {block_size}")

    out_same = np.empty(n, dtype=np.float64)
    out_diff = np.empty(n, dtype=np.float64)
    blocks = range(0, n, block_size)
    if progress:
        from tqdm.auto import tqdm

        blocks = tqdm(blocks, desc="nearest same/different", unit="block", leave=False, dynamic_ncols=True)
    XsT = Xs.T
    for q0 in blocks:
        q1 = min(q0 + block_size, n)
        rows = np.arange(q1 - q0)
        S = Xs[q0:q1] @ XsT  # (B, N) similarities (euclidean: 2 x_i.x_j - |x_j|^2, same argmax)
        if metric == "euclidean":
            S *= 2
            S -= sq[None, :]
        S[rows, q0 + rows] = -np.inf  # the query itself
        M = np.maximum.reduceat(S, starts, axis=1)  # (B, C): best similarity per class
        own = cls[q0:q1]
        out_same[q0:q1] = M[rows, own]
        if n_classes > 1:
            M[rows, own] = -np.inf
            out_diff[q0:q1] = M.max(axis=1)
        else:
            out_diff[q0:q1] = -np.inf
    if metric == "euclidean":
        # back from 2 x_i.x_j - |x_j|^2 to -|x_i - x_j| (clamped at 0 for rounding)
        sq64 = sq.astype(np.float64)
        for a in (out_same, out_diff):
            finite = np.isfinite(a)
            a[finite] = -np.sqrt(np.maximum(sq64[finite] - a[finite], 0.0))
    out_same[~np.isfinite(out_same)] = np.nan
    out_diff[~np.isfinite(out_diff)] = np.nan
    s_same[order] = out_same
    s_diff[order] = out_diff
    return s_same, s_diff


def share_below_diagonal(s_same: Any, s_diff: Any) -> tuple[float, int]:
    """Share of points with s_diff < s_same (below the diagonal; = R@1, METHODS.md §10) among those
    with both values defined, and the number left out (NaN: lone points)."""
    s_same = np.asarray(s_same, dtype=np.float64)
    s_diff = np.asarray(s_diff, dtype=np.float64)
    ok = np.isfinite(s_same) & np.isfinite(s_diff)
    n_ok = int(ok.sum())
    share = float(np.mean(s_diff[ok] < s_same[ok])) if n_ok else float("nan")
    return share, int(len(s_same) - n_ok)


def _axis_label(metric: str, which: str) -> str:
    what = {"cosine": "cosine similarity", "dot": "inner product",
            "euclidean": "−Euclidean distance"}[metric]
    return f"{what} to nearest {which} point"


def plot_same_different(
    panels: Mapping[str, tuple[Any, Any]],
    *,
    metric: str = "cosine",
    title: str | None = None,
):
    """Same-vs-different scatter (METHODS.md §10, Xuan §2.4), one panel per entry of ``panels``
    (e.g. ``{"train": (s_same, s_diff), "test": (...)}``), side by side.

    x = similarity to the nearest same-class point, y = to the nearest different-class point; the
    diagonal y = x; points below it (nearer their own class: 1-NN correct) cyan, above it orange;
    each title gives the share below the diagonal (= R@1). All panels share the axis range.
    Returns the figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from embedscope.viz.figures import PAPER_RC

    if not panels:
        raise EmbedscopeError("nothing to plot: no panels")
    data = {}
    for name, (a, b) in panels.items():
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        ok = np.isfinite(a) & np.isfinite(b)
        data[name] = (a[ok], b[ok], int((~ok).sum()))
    vals = np.concatenate([np.r_[a, b] for a, b, _ in data.values()])
    if vals.size:
        lo, hi = float(vals.min()), float(vals.max())
    else:
        lo, hi = 0.0, 1.0
    pad = 0.03 * max(hi - lo, 1e-6)
    lo, hi = lo - pad, hi + pad
    k = len(data)
    with plt.rc_context(PAPER_RC):
        fig, axes = plt.subplots(1, k, figsize=(3.3 * k, 3.55), squeeze=False)
        axes = axes[0]
        for ax, (name, (a, b, left_out)) in zip(axes, data.items()):
            below = b < a
            size = float(np.clip(3000.0 / max(len(a), 1), 1.5, 12.0))
            order = np.random.default_rng(0).permutation(len(a))
            col = np.where(below[order], BELOW_COLOR, ABOVE_COLOR)
            ax.scatter(a[order], b[order], c=col, s=size, linewidths=0, alpha=0.7, rasterized=True)
            ax.plot([lo, hi], [lo, hi], color="0.15", linewidth=0.9, zorder=3)
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            ax.set_aspect("equal")
            share = float(below.mean()) if len(a) else float("nan")
            extra = f", {left_out} lone left out" if left_out else ""
            ttl = f"{name} (N = {len(a)}{extra})\n{share:.1%} below diagonal (R@1)" if len(a) else f"{name}: no points"
            ax.set_title(ttl)
            ax.set_xlabel(_axis_label(metric, "same-class"))
            ax.set_ylabel(_axis_label(metric, "other-class"))
        for ax in axes[1:]:
            ax.set_ylabel("")
        handles = [
            Line2D([], [], marker="o", linestyle="", color=BELOW_COLOR, label="nearer own class (1-NN correct)"),
            Line2D([], [], marker="o", linestyle="", color=ABOVE_COLOR, label="nearer another class"),
            Line2D([], [], color="0.15", label="diagonal y = x"),
        ]
        fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False, bbox_to_anchor=(0.5, 0.0))
        if title:
            fig.suptitle(title)
        fig.tight_layout(rect=(0, 0.42 / fig.get_figheight(), 1, 1), pad=0.4)
    return fig


__all__ = ["nearest_same_different", "share_below_diagonal", "plot_same_different", "METRICS"]
