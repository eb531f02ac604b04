"""Brute-force references shared by the tests: written from the formulas, full float64 matrices."""

import numpy as np


def ranked_references(X, y, Xr=None, yr=None, metric="cosine"):
    """Per query: the reference indices in rank order (float64 keys, ties to the lower index; the
    query itself left out when ``Xr`` is None) and the reference labels -> ``(orders, yr)``."""
    same = Xr is None
    Q = np.asarray(X, dtype=np.float64)
    R = Q if same else np.asarray(Xr, dtype=np.float64)
    yr = np.asarray(y) if same else np.asarray(yr)
    if metric == "cosine":
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
        R = R / np.linalg.norm(R, axis=1, keepdims=True)
        key = -(Q @ R.T)
    else:
        key = ((Q[:, None, :] - R[None, :, :]) ** 2).sum(-1)
    orders = []
    for i in range(len(Q)):
        cand = np.array([j for j in range(len(R)) if not (same and j == i)])
        orders.append(cand[np.lexsort((cand, key[i, cand]))])
    return orders, yr
