"""Clustering quality of an embedding: k-means NMI and pairwise F1 (docs/methods.md §1).

k-means
-------
Lloyd's k-means as Roth et al.'s reference code and pytorch-metric-learning (PML) run it: faiss's
random initialisation with **seed 1234** (faiss's default; Roth's code never sets a seed, PML's
``faiss.Kmeans`` keeps it), ``niter = 20``, no subsampling, every row its nearest centroid at
the end. Two engines (``method``):

* ``"exact"`` (default, :mod:`embedscope.metrics.kmeans`): faiss's initialisation, centroid
  update and empty-cluster split reproduced bit for bit, with exact (float64-certified)
  nearest-centroid assignments, accelerated by Yinyang bounds (skipping distance computations
  that provably cannot change an assignment). It equals faiss's clustering wherever faiss's
  float32 distance rounding does not decide a near-tie (on the SOP-like benchmark: every label),
  and is faster than faiss (docs/PERFORMANCE.md, "Exact k-means (issue 18)").
* ``"faiss"``: faiss itself (``faiss.Clustering``, IndexFlatL2, float32). With seed 1234 and
  Euclidean k-means its labels are those of ``faiss.Kmeans(d, k, niter=20, seed=1234)`` followed
  by ``index.search(x, 1)`` (PML's ``FaissKMeans``) whenever N ≤ 256 k (PML's faiss subsamples
  to 256 points per centroid beyond that; embedscope and Roth's code never subsample).

``metric="cosine"`` L2-normalises the rows first (k-means on the unit sphere's points, Euclidean
centroids). NMI and F1 are computed from the sparse cluster × class contingency table in float64.

Roth's "cosine" NMI / F1
------------------------
Roth's reference code also reports ``c_nmi`` / ``c_f1``. These are **not** a cosine k-means: the
k-means is the same Euclidean one on the unnormalised features; then the centroids are
L2-normalised and each L2-normalised row goes to the centroid of largest inner product
(faiss ``IndexFlatIP``). ``assign="roth_cosine"`` reproduces this (argmax in float64, ties to the
lower index); with it, use ``metric="euclidean"`` to cluster the features as given, as Roth does
(for L2-normalised embeddings both metrics are the same).
"""

from __future__ import annotations

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.metrics.scale import pow2_shift, unit_rows

__all__ = ["kmeans_nmi_f1", "kmeans_labels", "nmi", "pairwise_f1"]


def _contingency(a: np.ndarray, b: np.ndarray):
    """Counts n_kc of the non-empty cells, and the marginals of a and b."""
    _, ai = np.unique(a, return_inverse=True)
    _, bi = np.unique(b, return_inverse=True)
    ai, bi = ai.reshape(-1), bi.reshape(-1)
    nb = int(bi.max()) + 1
    cells = np.unique(ai.astype(np.int64) * nb + bi, return_counts=True)[1].astype(np.float64)
    return cells, np.bincount(ai).astype(np.float64), np.bincount(bi).astype(np.float64)


def _labelings(labels_true, labels_pred) -> tuple[np.ndarray, np.ndarray]:
    """Both labelings as int64 class codes (:func:`~embedscope.validation.check_labels`: 1-D, one label per
    sample, no missing or non-integral label), of one length and not empty. A missing label (None, NaN),
    labels that do not sort (dicts) or an empty labeling were a traceback, and NaN labels, a text ("abc") or
    a 2-D array were read as classes (a number, not an error)."""
    from embedscope.validation import check_labels

    a = check_labels(labels_true, None, "labels_true")
    b = check_labels(labels_pred, None, "labels_pred")
    if a.size != b.size:
        raise EmbedscopeError(f"labelings differ in length: {a.size} vs {b.size}")
    if a.size == 0:
        raise EmbedscopeError("no labels: both labelings are empty")
    return a, b


def _entropy(counts: np.ndarray, n: float) -> float:
    p = counts[counts > 0] / n
    return float(-(p * np.log(p)).sum())


def nmi(labels_true, labels_pred) -> float:
    """Normalised mutual information 2 I(Ω; Υ) / (H(Ω) + H(Υ)) (docs/methods.md §1; Roth, ICML 2020;
    Musgrave, ECCV 2020 Eq. 7) = ``sklearn.metrics.normalized_mutual_info_score`` with the
    arithmetic mean; natural logarithms; 1.0 when both labelings are a single cluster. Both labelings are
    class labels (:func:`~embedscope.validation.check_labels`: 1-D, integers, integral floats or texts, none
    missing), of one length and not empty; anything else is a one-line error."""
    a, b = _labelings(labels_true, labels_pred)
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
    """Pairwise clustering F-measure (docs/methods.md §1; Roth, ICML 2020): TP = pairs in the same
    cluster and the same class, P = TP / (pairs in the same cluster), R = TP / (pairs in the same
    class), F1 = 2PR / (P + R); pairs counted as C(m, 2) from the contingency table.

    Returns ``{"F1", "precision", "recall"}`` (0 where a denominator is 0). The labelings are checked as
    :func:`nmi`'s."""
    a, b = _labelings(labels_true, labels_pred)
    cells, m_true, m_pred = _contingency(a, b)

    def c2(x):
        return float(np.sum(x * (x - 1) / 2.0))

    tp, same_cluster, same_class = c2(cells), c2(m_pred), c2(m_true)
    p = tp / same_cluster if same_cluster else 0.0
    r = tp / same_class if same_class else 0.0
    f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return {"F1": f1, "precision": p, "recall": r}


_METHODS = ("exact", "faiss")
_ASSIGN = ("euclidean", "roth_cosine")


def _faiss_kmeans(x: np.ndarray, k: int, seed: int, niter: int) -> tuple[np.ndarray, np.ndarray]:
    """faiss's k-means (no subsampling) and the final ``index.search``: labels, centroids."""
    import faiss

    d = x.shape[1]
    cl = faiss.Clustering(d, int(k))
    cl.niter = int(niter)
    cl.seed = int(seed)
    cl.max_points_per_centroid = 1 << 30  # never subsample
    cl.min_points_per_centroid = 1
    cl.verbose = False
    index = faiss.IndexFlatL2(d)
    cl.train(x, index)
    _, assign = index.search(x, 1)
    C = faiss.vector_float_to_array(cl.centroids).reshape(int(k), d)
    return assign.reshape(-1).astype(np.int64), C


def _roth_cosine_assign(X64: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Roth's c_nmi assignment: argmax_c <x/‖x‖, c/‖c‖> (float64, ties to the lower index)."""
    Cn = unit_rows(np.asarray(C, dtype=np.float64))[0]  # (zero rows stay zero; rows of extreme scale exact)
    Xn = unit_rows(X64)[0]
    out = np.empty(len(X64), dtype=np.int64)
    step = max(64, (1 << 22) // max(1, len(Cn)))
    for s in range(0, len(X64), step):
        out[s:s + step] = (Xn[s:s + step] @ Cn.T).argmax(1)
    return out


KMEANS_SAFE_EXP = 32  # largest |entry| outside [2^-32, 2^32]: the rows are scaled by a power of two


def _in_float32_range(X64: np.ndarray) -> np.ndarray:
    """``X64``, or where its largest absolute entry lies outside [2^-32, 2^32] (``KMEANS_SAFE_EXP``), ``X64`` times the
    power of two that brings it into [0.5, 1): k-means runs in float32, where such rows overflow
    (entries from ~2^64 on: squared norms are inf) or underflow. The labels are those of the rows
    as given: a power of two scales every float32 sum, centroid and squared distance exactly, and
    faiss's initialisation and split do not depend on the scale."""
    shift = pow2_shift(X64, KMEANS_SAFE_EXP)
    return X64 * np.ldexp(1.0, -shift) if shift else X64


def kmeans_labels(X, n_clusters: int, *, seed: int = 1234, niter: int = 20, metric: str = "cosine",
                  method: str = "exact", assign: str = "euclidean", return_info: bool = False,
                  prepared: bool = False, device="auto"):
    """The k-means cluster of every row (docs/methods.md §1; see the module docstring).

    Parameters
    ----------
    X : (N, D) embeddings.
    n_clusters : k, 1 ≤ k ≤ N.
    seed : faiss's seed (≥ 0; default 1234 as Roth's code and PML).
    niter : Lloyd iterations (default 20 as Roth's code and PML).
    metric : ``"cosine"`` (rows L2-normalised first) or ``"euclidean"`` (rows as given).
    method : ``"exact"`` (exact assignments, Yinyang-accelerated) or ``"faiss"``.
    assign : ``"euclidean"`` (nearest centroid) or ``"roth_cosine"`` (Roth's c_nmi/c_f1:
        normalised rows to normalised centroids by largest inner product).
    return_info : also return a dict (``n_steps``, ``converged``, ``n_split`` for "exact").
    prepared : ``X`` holds float64 rows already prepared for ``metric`` (normalised once by
        :func:`embedscope.metrics.search.knn.prepare`, as :func:`retrieval_metrics` has them):
        used as they are, not normalised a second time (which costs an N x D copy and may move
        a value by an ulp).
    device : where ``method="exact"`` runs its steps: "auto" (a CUDA GPU where torch sees one),
        "cpu", "cuda" or "cuda:N"; the labels are the same on every device
        (:func:`embedscope.metrics.kmeans.lloyd_kmeans`). faiss's engine runs on the CPU.
    """
    from embedscope.metrics.search.knn import check_metric, prepared_rows
    from embedscope.validation import check_bool, check_choice, check_int, check_matrix

    return_info = check_bool(return_info, "return_info")

    check_metric(metric)
    check_choice(method, "method", _METHODS)
    check_choice(assign, "assign", _ASSIGN)
    X64 = check_matrix(X, "X", dtype=np.float64) if prepared else prepared_rows(X, metric, "X")
    n, d = X64.shape
    if isinstance(n_clusters, bool) or not isinstance(n_clusters, (int, np.integer)) or n_clusters < 1:
        raise EmbedscopeError(f"n_clusters must be a positive integer, got {n_clusters!r}")
    if n_clusters > n:
        raise EmbedscopeError(f"n_clusters = {n_clusters} exceeds the {n} rows")
    niter = check_int(niter, "niter", min=1)
    seed = check_int(seed, "seed", min=0, max=2**31 - 2)
    X64 = _in_float32_range(X64)
    x = np.ascontiguousarray(X64, dtype=np.float32)
    info = {"method": method}
    if method == "faiss":
        lab, C = _faiss_kmeans(x, int(n_clusters), seed, niter)
    else:
        from embedscope.metrics.kmeans import lloyd_kmeans

        r = lloyd_kmeans(x, int(n_clusters), niter=niter, seed=seed, device=device)
        lab, C = r["labels"], r["centroids"]
        info.update(n_steps=r["n_steps"], converged=r["converged"], n_split=r["n_split"])
    if assign == "roth_cosine":
        lab = _roth_cosine_assign(X64, C)
    return (lab, info) if return_info else lab


def kmeans_nmi_f1(X, y, *, n_clusters: int | None = None, seed: int = 1234, niter: int = 20,
                  metric: str = "cosine", method: str = "exact", assign: str = "euclidean",
                  return_labels: bool = False, prepared: bool = False, device="auto") -> dict:
    """NMI and F1 of a k-means clustering of the embeddings against the classes (docs/methods.md §1).

    k-means (see :func:`kmeans_labels`: faiss's initialisation from ``seed`` = 1234, ``niter`` = 20
    Lloyd iterations as Roth et al.'s reference code and PML, exact assignments) with
    ``n_clusters`` = the number of classes in ``y`` by default; rows are L2-normalised first for
    ``metric="cosine"``. NMI = 2 I(Ω; Υ) / (H(Ω) + H(Υ)) (sklearn's
    ``normalized_mutual_info_score``, arithmetic; Musgrave et al., ECCV 2020, Eq. 7).
    F1 = the pairwise clustering F-measure (see :func:`pairwise_f1`). Both: higher is better, 1
    for a clustering equal to the classes. ``assign="roth_cosine"`` gives Roth's c_nmi / c_f1.

    Returns
    -------
    dict
        ``"NMI"``, ``"F1"``, ``"F1_precision"``, ``"F1_recall"``, ``"n_clusters"``, ``"niter"``,
        ``"seed"``, ``"method"``, ``"assign"`` (and ``"labels"``, the cluster of each row, when
        ``return_labels``). ``prepared``, ``device``: see :func:`kmeans_labels`.
    """
    from embedscope.validation import check_bool, check_labels, check_matrix

    prepared = check_bool(prepared, "prepared")

    X64 = check_matrix(X, "X", dtype=np.float64)
    yy = check_labels(y, X64.shape[0], "class labels", min_classes=2)
    n_cls = len(np.unique(yy))
    k = n_cls if n_clusters is None else n_clusters
    lab = kmeans_labels(X64, k, seed=seed, niter=niter, metric=metric, method=method, assign=assign,
                        prepared=prepared, device=device)
    f = pairwise_f1(yy, lab)
    out = {"NMI": nmi(yy, lab), "F1": f["F1"], "F1_precision": f["precision"], "F1_recall": f["recall"],
           "n_clusters": int(k), "niter": int(niter), "seed": int(seed), "method": method, "assign": assign}
    if return_labels:
        out["labels"] = lab
    return out
