"""Exact Lloyd k-means with its two costly steps on a GPU (docs/methods.md §1; issue 18, goal 4).

The same k-means as :func:`embedscope.metrics.kmeans.lloyd_kmeans` on the CPU — faiss's
initialisation, faiss's update and split, exact nearest-centroid assignments — so the same labels
and centroids bit for bit; only where the work runs differs:

* **Assignment**: one float32 GEMM per row block on the device, ``[x, 1] · [−2 Cᵀ; ‖c‖²]``, in IEEE
  float32 whatever the caller's TF32 setting (:func:`embedscope.device.ieee_float32`: the error
  bound is float32's), and the two smallest values of each row (a min, then a min with the first
  set to +inf). A row whose best and second-best values are more than ``2E`` apart
  (``E = (2D + 16) 2⁻²⁴ (‖x‖ + max‖c‖)²``, the CPU's bound) has its nearest centroid proven; the
  others (near-ties, and every tie of equal float32 values, so the device's choice among equal
  values never matters) are settled in float64 on the CPU by the CPU engine's own code, ties to the
  lower centroid index. No Yinyang bounds: a dense GEMM per step is what a GPU does fastest, and
  the bounds' bookkeeping is the CPU's.
* **Update**: faiss's sequential per-cluster float32 sums as the CPU takes them (the p-th point of
  every cluster with more than p points added at once, p = 0, 1, …: each addition one IEEE
  float32 add, as on the CPU), times the float32 ``1/count`` computed on the CPU; the rare split of
  empty clusters runs on the CPU (faiss's random draws). Clusters fewer than the largest one's
  points (a few large clusters: k-means of CUB's 100 classes) are summed on the CPU, whose running
  sum (``cumsum``) is sequential where a device's scan is not.

The rows stay on the device for the whole run (N × (D + 1) float32); each step sends the labels
(N integers) and, only where rows need the float64 check, the centroids back. Memory on the
device: the rows, the centroids, and one block of ``DEVICE_BLOCK_ELEMS`` float32 values.
"""

from __future__ import annotations

import numpy as np

from embedscope.metrics.kmeans import (
    _Assigner,
    _few_large_clusters,
    _sum_plan,
    faiss_random_init,
    inverse_counts,
    lloyd_steps,
    update_centroids,
)

__all__ = ["device_lloyd_kmeans"]

#: rows × centroids of one block of the assignment GEMM (float32: 256 MiB)
DEVICE_BLOCK_ELEMS = 1 << 26


class _DeviceAssigner:
    """Exact nearest centroid of every row, the float32 GEMMs on ``dev``."""

    def __init__(self, x32: np.ndarray, k: int, dev):
        import torch

        self.torch = torch
        self.dev = dev
        # the CPU engine (no bounds): the rows' float64 norms, the error bound's constant, and the
        # float64 settling of near-ties (its _exact_rows), shared with the CPU path
        self.cpu = _Assigner(x32, k, 1 << 30, bounds=False)
        self.cpu._setup_groups(np.zeros((k, 1), dtype=np.float32))  # one group: the identity order
        self.n, self.d = x32.shape
        self.k = k
        self.xa = torch.from_numpy(self.cpu.xa).to(dev)  # [x, 1], float32
        self.x = self.xa[:, :self.d]
        self.stats = []
        self.n_ties = 0

    def assign(self, C):
        """Labels (numpy int64) for the float32 centroids ``C`` (a (k, D) tensor on the device)."""
        from embedscope.device import ieee_float32

        torch, eng, k, d = self.torch, self.cpu, self.k, self.d
        cc = C.double().square().sum(1)
        cmax = float(cc.max().sqrt())
        CaT = torch.empty((d + 1, k), dtype=torch.float32, device=self.dev)
        CaT[:d] = (C * -2.0).T   # exact: a power of two
        CaT[d] = cc.float()
        vals = torch.empty((self.n, 2), dtype=torch.float32, device=self.dev)
        idx = torch.zeros(self.n, dtype=torch.int64, device=self.dev)
        step = max(64, DEVICE_BLOCK_ELEMS // k)
        with torch.no_grad():
            for r0 in range(0, self.n, step):
                r1 = min(self.n, r0 + step)
                with ieee_float32():
                    s = self.xa[r0:r1] @ CaT          # ‖c‖² − 2 x·c, float32
                # the smallest value, then the smallest with it set to +inf: the second smallest (equal
                # to the first where two centroids tie: then settled below); on an H200 at 60,000 rows ×
                # 11,316 centroids, topk(2) took 9 ms a pass against the GEMM's 16 (D = 512) or 5 (D =
                # 128), one min reduction 1 ms
                v1, j1 = torch.min(s, dim=1)
                vals[r0:r1, 0], idx[r0:r1] = v1, j1
                if k >= 2:
                    s.scatter_(1, j1[:, None], float("inf"))
                    vals[r0:r1, 1] = s.amin(dim=1)
                else:
                    vals[r0:r1, 1] = float("inf")
                del s
        v = vals.cpu().numpy().astype(np.float64)
        a = idx.cpu().numpy()
        m1 = v[:, 0] + eng.xx
        m2 = v[:, 1] + eng.xx
        E = eng.errc * (eng.xn + cmax) ** 2
        tr = np.flatnonzero(m2 <= m1 + 2 * E)    # not proven by the float32 values: settled in float64
        if tr.size:
            C64 = C.double().cpu().numpy()  # exact; converted where the GPU is idle, not by the CPU
            cc64 = np.einsum("ij,ij->i", C64, C64)
            a[tr] = eng._exact_rows(tr, C64, cc64, float(np.sqrt(cc64.max())))[0]
        self.n_ties = int(tr.size)
        self.stats.append((self.n, self.n, "device"))
        return a


def _device_update(x32: np.ndarray, x, assign: np.ndarray, k: int):
    """faiss's centroid update (see :func:`embedscope.metrics.kmeans.update_centroids`, the same
    float32 values) with the rows ``x`` on the device: (centroids on the device, splits)."""
    import torch

    n, d = x32.shape
    cnt, _, _, by_size, steps = _sum_plan(assign, k)
    if _few_large_clusters(cnt, k) or (cnt == 0).any():
        # sums along a few large clusters (sequential on the CPU), or empty clusters to split
        # (faiss's draws, on the CPU): the CPU's update
        C, ns = update_centroids(x32, assign, k)
        return torch.from_numpy(C).to(x.device), ns
    parts = list(steps())
    rows = torch.from_numpy(np.concatenate([r for _, r in parts])).to(x.device)
    acc = torch.zeros((k, d), dtype=torch.float32, device=x.device)
    at = 0
    for m, _ in parts:  # the p-th point of every cluster with more than p points: row order per cluster
        acc[:m] += x[rows[at:at + m]]
        at += m
    C = torch.empty_like(acc)
    C[torch.from_numpy(by_size).to(x.device)] = acc
    C *= torch.from_numpy(inverse_counts(cnt.astype(np.float32))).to(x.device)[:, None]
    return C, 0


def device_lloyd_kmeans(x32: np.ndarray, k: int, *, niter: int, seed: int, init, dev) -> dict:
    """:func:`embedscope.metrics.kmeans.lloyd_kmeans` with its assignments and updates on ``dev``
    (a ``torch.device``); the same result (labels and centroids bit for bit)."""
    import torch

    n = x32.shape[0]
    eng = _DeviceAssigner(x32, k, dev)
    if init is None:
        C = eng.x[torch.from_numpy(faiss_random_init(n, k, seed)).to(dev)].contiguous()
    else:
        C = torch.from_numpy(np.ascontiguousarray(init, dtype=np.float32)).to(dev)
    if k == n and init is None:  # faiss copies the rows (in order) and runs no iteration
        C = eng.x.contiguous()
        lab = eng.assign(C)
        return {"labels": lab, "centroids": x32.copy(), "n_steps": 1, "n_split": 0, "converged": True,
                "stats": eng.stats, "moved": []}
    lab, C, n_split, converged = lloyd_steps(eng.assign, lambda lab: _device_update(x32, eng.x, lab, k), C, niter)
    return {"labels": lab, "centroids": C.cpu().numpy(), "n_steps": len(eng.stats), "n_split": n_split,
            "converged": converged, "stats": eng.stats, "moved": []}
