"""Clustering quality of an embedding: k-means NMI and pairwise F1 (METHODS.md §1).

k-means is faiss's (Lloyd iterations on the float32 rows, exact nearest-centroid assignment,
no subsampling), with a fixed seed and ``niter = 20`` by default as in Roth et al.'s reference
code. NMI and F1 are computed from the sparse cluster × class contingency table in float64.
"""

from __future__ import annotations

import numpy as np

from embedscope.errors import EmbedscopeError

__all__ = ["kmeans_nmi_f1", "kmeans_labels", "nmi", "pairwise_f1"]


def _contingency(a: np.ndarray, b: np.ndarray):
    """Counts n_kc of the non-empty cells, and the marginals of a and b."""
    _, ai = np.unique(a, return_inverse=True)
    _, bi = np.unique(b, return_inverse=True)
    ai, bi = ai.reshape(-1), bi.reshape(-1)
    nb = int(bi.max()) + 1
    cells = np.unique(ai.astype(np.int64) * nb + bi, return_counts=True)[1].astype(np.float64)
    return cells, np.bincount(ai).astype(np.float64), np.bincount(bi).astype(np.float64)


def _entropy(counts: np.ndarray, n: float) -> float:
    p = counts[counts > 0] / n
    return float(-(p * np.log(p)).sum())


def nmi(labels_true, labels_pred) -> float:
    """Normalised mutual information 2 I(Ω; Υ) / (H(Ω) + H(Υ)) (METHODS.md §1; Roth, ICML 2020;
    Musgrave, ECCV 2020 Eq. 7) = ``sklearn.metrics.normalized_mutual_info_score`` with the
    arithmetic mean; natural logarithms; 1.0 when both labelings are a single cluster."""
    a, b = np.asarray(labels_true).reshape(-1), np.asarray(labels_pred).reshape(-1)
    if a.size != b.size:
        raise EmbedscopeError(f"labelings differ in length: {a.size} vs {b.size}")
    n = float(a.size)
    cells, ma, mb = _contingency(a, b)
    if ma.size == mb.size == 1:
        return 1.0
    ha, hb = _entropy(ma, n), _entropy(mb, n)
    # I = Σ n_kc/n log(n n_kc / (a_k b_c)), over non-empty cells
    _, ai = np.unique(a, return_inverse=True)
    _, bi = np.unique(b, return_inverse=True)
    nb = mb.size
    key, cnt = np.unique(ai.reshape(-1).astype(np.int64) * nb + bi.reshape(-1), return_counts=True)
    cnt = cnt.astype(np.float64)
    mi = float(np.sum(cnt / n * (np.log(cnt) + np.log(n) - np.log(ma[key // nb]) - np.log(mb[key % nb]))))
    mi = max(mi, 0.0)
    denom = (ha + hb) / 2.0
    if denom <= 0:
        return 1.0
    return float(min(mi / denom, 1.0))


def pairwise_f1(labels_true, labels_pred) -> dict:
    """Pairwise clustering F-measure (METHODS.md §1; Roth, ICML 2020): TP = pairs in the same
    cluster and the same class, P = TP / (pairs in the same cluster), R = TP / (pairs in the same
    class), F1 = 2PR / (P + R); pairs counted as C(m, 2) from the contingency table.

    Returns ``{"F1", "precision", "recall"}`` (0 where a denominator is 0)."""
    a, b = np.asarray(labels_true).reshape(-1), np.asarray(labels_pred).reshape(-1)
    if a.size != b.size:
        raise EmbedscopeError(f"labelings differ in length: {a.size} vs {b.size}")
    cells, m_true, m_pred = _contingency(a, b)

    def c2(x):
        return float(np.sum(x * (x - 1) / 2.0))

    tp, same_cluster, same_class = c2(cells), c2(m_pred), c2(m_true)
    p = tp / same_cluster if same_cluster else 0.0
    r = tp / same_class if same_class else 0.0
    f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return {"F1": f1, "precision": p, "recall": r}


def kmeans_labels(X, n_clusters: int, *, seed: int = 0, niter: int = 20, metric: str = "cosine") -> np.ndarray:
    """faiss k-means cluster of every row (rows L2-normalised first for ``metric="cosine"``)."""
    import faiss

    from embedscope.metrics.knn import check_metric, prepare
    from embedscope.validation import check_matrix

    check_metric(metric)
    X64 = prepare(check_matrix(X, "X", dtype=np.float64), metric, "X")
    n, d = X64.shape
    if isinstance(n_clusters, bool) or not isinstance(n_clusters, (int, np.integer)) or n_clusters < 1:
        raise EmbedscopeError(f"n_clusters must be a positive integer, got {n_clusters!r}")
    if n_clusters > n:
        raise EmbedscopeError(f"n_clusters = {n_clusters} exceeds the {n} rows")
    if isinstance(niter, bool) or not isinstance(niter, (int, np.integer)) or niter < 1:
        raise EmbedscopeError(f"niter must be a positive integer, got {niter!r}")
    x = np.ascontiguousarray(X64, dtype=np.float32)
    cl = faiss.Clustering(d, int(n_clusters))
    cl.niter = int(niter)
    cl.seed = int(seed)
    cl.max_points_per_centroid = 1 << 30  # never subsample
    cl.min_points_per_centroid = 1
    cl.verbose = False
    index = faiss.IndexFlatL2(d)
    cl.train(x, index)
    _, assign = index.search(x, 1)
    return assign.reshape(-1).astype(np.int64)


def kmeans_nmi_f1(X, y, *, n_clusters: int | None = None, seed: int = 0, niter: int = 20,
                  metric: str = "cosine", return_labels: bool = False) -> dict:
    """NMI and F1 of a k-means clustering of the embeddings against the classes (METHODS.md §1).

    k-means (faiss, Lloyd, ``niter`` iterations from ``seed``; Roth et al., ICML 2020, reference
    code: faiss, 20 iterations) with ``n_clusters`` = the number of classes in ``y`` by default;
    rows are L2-normalised first for ``metric="cosine"``. NMI = 2 I(Ω; Υ) / (H(Ω) + H(Υ))
    (sklearn's ``normalized_mutual_info_score``, arithmetic; Musgrave et al., ECCV 2020, Eq. 7).
    F1 = the pairwise clustering F-measure (see :func:`pairwise_f1`).

    Returns
    -------
    dict
        ``"NMI"``, ``"F1"``, ``"F1_precision"``, ``"F1_recall"``, ``"n_clusters"``, ``"niter"``,
        ``"seed"`` (and ``"labels"``, the cluster of each row, when ``return_labels``).
    """
    from embedscope.validation import check_matrix

    X64 = check_matrix(X, "X", dtype=np.float64)
    yy = np.asarray(y)
    if yy.ndim != 1 or yy.shape[0] != X64.shape[0]:
        raise EmbedscopeError(f"y must be 1-D with {X64.shape[0]} entries (one per row), got shape {yy.shape}")
    n_cls = len(np.unique(yy))
    if n_cls < 2:
        raise EmbedscopeError("y needs at least 2 classes")
    k = n_cls if n_clusters is None else n_clusters
    lab = kmeans_labels(X64, k, seed=seed, niter=niter, metric=metric)
    f = pairwise_f1(yy, lab)
    out = {"NMI": nmi(yy, lab), "F1": f["F1"], "F1_precision": f["precision"], "F1_recall": f["recall"],
           "n_clusters": int(k), "niter": int(niter), "seed": int(seed)}
    if return_labels:
        out["labels"] = lab
    return out
