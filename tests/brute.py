"""Brute-force references shared by the tests: written from the formulas, full float64 matrices.

Every float64 key is evaluated **per pair** (:func:`pair_key_matrix`), as docs/methods.md §1 defines the
keys and ``embedscope.metrics.search.knn.pair_keys64`` computes them: numpy's einsum over the two rows of
the pair (gathered, contiguous), the same reduction for every pair. A BLAS GEMM (``Q @ R.T``, as here
before) sums in its own order, which depends on the kernel and on where the pair falls in its blocking:
a key can be an ulp away from the per-pair one, and keys equal in exact arithmetic between rows that are
not equal (rows of 0, 0.5 and 1 normalised) then tie where the library's differ, or the other way round,
so that on massive ties the reference ordered pairs otherwise than the definition (tests/test_audit45_small.py).
"""

import math

import numpy as np


def unit_rows(A):
    """Rows scaled to unit L2 norm as docs/methods.md §1 defines them for cosine: x / max|x| first, then
    / sqrt(Σ y²), so that parallel rows (x and c·x, c > 0) get the same unit row bit for bit."""
    A = np.asarray(A, dtype=np.float64)
    A = A / np.max(np.abs(A), axis=1, keepdims=True)
    return A / np.sqrt(np.einsum("ij,ij->i", A, A))[:, None]


def pair_key_matrix(Q, R, metric="cosine"):
    """The (len(Q), len(R)) float64 keys, smaller = nearer: for cosine −Σ_k q_k r_k (of rows normalised
    already, :func:`unit_rows`), else the squared distance Σ_k (q_k − r_k)², each one pair's own
    reduction (numpy's einsum over the contiguous row pair, the query row repeated as a gathered copy):
    bitwise the library's float64 keys, whatever the sizes, and equal for equal row pairs."""
    Q = np.ascontiguousarray(Q, dtype=np.float64)
    R = np.ascontiguousarray(R, dtype=np.float64)
    out = np.empty((len(Q), len(R)))
    for i in range(len(Q)):
        q = np.repeat(Q[i:i + 1], len(R), axis=0)
        if metric == "cosine":
            out[i] = -np.einsum("ij,ij->i", q, R)
        else:
            diff = q - R
            out[i] = np.einsum("ij,ij->i", diff, diff)
    return out


def ranked_references(X, y, Xr=None, yr=None, metric="cosine"):
    """Per query: the reference indices in rank order (float64 keys, ties to the lower index; the
    query itself left out when ``Xr`` is None) and the reference labels -> ``(orders, yr)``."""
    same = Xr is None
    Q = np.asarray(X, dtype=np.float64)
    R = Q if same else np.asarray(Xr, dtype=np.float64)
    yr = np.asarray(y) if same else np.asarray(yr)
    if metric == "cosine":
        Q, R = unit_rows(Q), unit_rows(R)
    key = pair_key_matrix(Q, R, metric)
    orders = []
    for i in range(len(Q)):
        cand = np.array([j for j in range(len(R)) if not (same and j == i)])
        orders.append(cand[np.lexsort((cand, key[i, cand]))])
    return orders, yr


def relevant_ranks_reference(X, y, metric="cosine"):
    """Per query of a same-set search: ``(ranks, refs)`` of its same-label references in rank order
    (1-based ranks among all references, :func:`ranked_references`)."""
    orders, yr = ranked_references(X, y, metric=metric)
    out = []
    for i, order in enumerate(orders):
        pos = np.flatnonzero(yr[order] == np.asarray(y)[i])
        out.append((pos + 1.0, order[pos]))
    return out


def assert_ranks_within_depth(rr, ref, depth=None, queries=None):
    """``rr`` (a :class:`~embedscope.metrics.search.RelevantRanks`) equals ``ref``
    (:func:`relevant_ranks_reference`) for every pair within ``depth`` (default: max R_i), for the
    ``queries`` given (default: all); ``depth`` None also checks that the pairs beyond are inf."""
    d = int(rr.R.max()) if depth is None else depth
    for i in (range(len(ref)) if queries is None else queries):
        rk, rf = ref[i]
        a, b = rr.offsets[i], rr.offsets[i + 1]
        within = rk <= d
        np.testing.assert_array_equal(rr.ranks[a:b][within], rk[within])
        np.testing.assert_array_equal(rr.refs[a:b][within], rf[within])
        if depth is None:
            assert np.all(np.isinf(rr.ranks[a:b][~within]))


def nr_prec(X, vals, metric="euclidean", max_r=None):
    """Kobs et al.'s R-Prec and NR-Prec (Eq. 4 / Eq. 5) literally: every query's full float64 ranking
    (ties to the lower index), lone values dropped as queries, R = N_v - 1 (or ``max_r`` at most);
    the z-test's p from the exact hypergeometric mean and variance of each query's z. One value (p = 1):
    z = 0/0 = NaN, as the definition."""
    from scipy.stats import norm

    X = np.asarray(X, dtype=np.float64)
    if metric == "cosine":
        X = unit_rows(X)
    d = pair_key_matrix(X, X, metric)  # (squared distances: no sqrt that could round two keys together)
    vals = np.asarray(vals).astype(str)
    n = len(X)
    _, inv, cnt = np.unique(vals, return_inverse=True, return_counts=True)
    nv = cnt[inv.ravel()]
    queries = np.flatnonzero(nv > 1)
    nq = len(queries)
    rp, z, ceil, ez, vz = [], [], [], [], []
    with np.errstate(divide="ignore", invalid="ignore"):
        for q in queries:
            others = np.array([j for j in range(n) if j != q])
            order = others[np.lexsort((others, d[q, others]))]
            R = nv[q] - 1 if max_r is None else min(nv[q] - 1, max_r)
            h = int((vals[order[:R]] == vals[q]).sum())
            p = nv[q] / nq
            s = np.sqrt(np.float64(R * p * (1 - p)))
            rp.append(h / R)
            z.append((h - R * p) / s)
            ceil.append(np.sqrt(np.float64(R * (1 - p) / p)))
            M, K = n - 1, nv[q] - 1
            ez.append((R * K / M - R * p) / s)
            vz.append(R * K * (M - K) * (M - R) / (M * M * (M - 1)) / s ** 2)
        nr = float(np.mean(z))
        return {"NR-Prec": nr, "R-Prec": float(np.mean(rp)), "ceiling": float(np.mean(ceil)),
                "p_value": float(norm.sf((nr - np.mean(ez)) / (math.sqrt(sum(vz)) / len(vz))))}


def property_hits(X, vals, metric="euclidean", max_r=None):
    """(R, h, n_v) per image from the definition (docs/methods.md §9): every query's full float64 key row,
    nearest first, ties to the lower index; R = n_v - 1 (capped at ``max_r``), h = the images of the
    query's value among its R nearest. The float64 normalisation of cosine rows keeps exact ties."""
    X = np.asarray(X, dtype=np.float64)
    if metric == "cosine":
        X = unit_rows(X)
    n = len(X)
    _, codes, counts = np.unique(np.asarray(vals), return_inverse=True, return_counts=True)
    codes = codes.ravel()
    nv = counts[codes]
    R = nv - 1 if max_r is None else np.minimum(nv - 1, max_r)
    h = np.zeros(n, dtype=np.int64)
    idx = np.arange(n)
    for q in np.flatnonzero(R > 0):
        dist = pair_key_matrix(X[q:q + 1], X, metric)[0]
        others = idx[idx != q]
        order = others[np.lexsort((others, dist[others]))]
        h[q] = int(np.sum(codes[order[:R[q]]] == codes[q]))
    return R, h, nv
