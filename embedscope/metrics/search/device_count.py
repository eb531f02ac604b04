"""Exact ranks of the relevant pairs on a GPU by counting (docs/methods.md §1).

For a block of queries, the device multiplies the float32 block ``S`` of tile values (IEEE float32,
never TF32: :func:`embedscope.device.ieee_float32`) and sorts each row. A relevant pair (q, r) of
float64 key ``k`` and bound ``δ_q`` (:class:`~embedscope.metrics.search.knn.KeySpace`: the float32
estimate of every key of query q is within ``δ_q`` of it) then has, by two binary searches per pair
in its query's sorted row,

- ``sure``: the references whose estimate exceeds ``k + δ_q`` — their float64 keys exceed ``k``;
- the window: those whose estimate lies in ``[k − δ_q, k + δ_q]`` — compared in float64, ties to the
  lower reference index, on the CPU (usually none but r itself), for pairs with fewer than ``depth``
  sure references (the others rank beyond the depth whatever their window holds);

and its rank is 1 + ``sure`` + the window's members that come before it. The thresholds are compared
in the tile's float32 values: ``v > t`` for a float64 ``t`` is ``v > t↓`` (``t`` rounded down to
float32) and ``v ≥ t`` is ``v ≥ t↑``, so the float32 comparison is the float64 one. Every relevant
pair is ranked whatever its depth (no candidate lists: nothing deeper than the depth is kept, and no
``Nq × (depth + 16)`` lists travel to the host). Memory: one float32 block of at most 1 GiB, its
sorted copy and the torch sort's workspace on the device; never ``Nq × Nr``.

The same code runs on any torch device. The searches use it on CUDA only with ``ranks.COUNT_ON_DEVICE``
(off: on an H200 it was slower than the candidate lists, docs/PERFORMANCE.md, thirty-second session;
``benchmarks/retrieval_cuda.py --counting`` times it); the tests run it on the CPU against the CPU's
passes.
"""

from __future__ import annotations

import numpy as np

from embedscope.metrics.search.knn import (
    KeySpace,
    _bar,
    _torch_setup,
    default_block,
    down32,
    pair_keys64,
    tile_block,
    up32,
)

#: Relevant pairs up to which the counting pass is used (their float64 keys are computed on the CPU
#: first: beyond, classes of thousands, the candidate lists stay).
PAIRS_MOST = 1 << 25
#: Window members (references within a pair's bound) in one block beyond which the pass gives up
#: (a collapsed model whose keys nearly all tie): the candidate lists take over.
WINDOW_MOST = 1 << 24


def relevant_ranks_by_device_count(ks: KeySpace, qi: np.ndarray, rj: np.ndarray, k64: np.ndarray, depth: int, *,
                                   device, block: int | None = None, progress=False):
    """Exact ranks (float64; ``inf`` beyond ``depth``) of the pairs (``qi``, ``rj``) of float64 keys
    ``k64`` (``qi`` ascending), counted on ``device`` (a torch device); None where the windows are too
    large (:data:`WINDOW_MOST`: a collapsed model), for the candidate lists to take over."""
    torch, Qt, Rt, rsub = _torch_setup(ks, device)
    nq, nr = ks.Q32.shape[0], ks.R32.shape[0]
    if block is None:
        block = default_block(nr, getattr(Qt.device, "type", "cpu"))
    t = k64 if ks.plain else k64 + ks.qoff[qi]  # in the tile's values (estimate = value − qoff)
    d = ks.delta[qi]
    hi, lo = down32(t + d), up32(t - d)  # sure above: value > hi; in the window: lo <= value <= hi
    bounds = np.searchsorted(qi, np.arange(nq + 1))
    rank = np.empty(qi.size, dtype=np.float64)
    members_p, members_j = [], []
    n_members = 0
    bar = _bar(progress, nq, "retrieval")
    with torch.no_grad():
        for s in range(0, nq, block):
            e = min(nq, s + block)
            p0, p1 = int(bounds[s]), int(bounds[e])
            if p0 == p1:
                bar.update(e - s)
                continue
            S = tile_block(ks, Qt, Rt, rsub, s, e)
            rows = qi[p0:p1] - s
            slot = np.arange(p1 - p0) - (bounds[qi[p0:p1]] - p0)
            m = int(slot.max()) + 1
            Thi = np.full((e - s, m), np.inf, dtype=np.float32)
            Tlo = np.full((e - s, m), np.inf, dtype=np.float32)
            Thi[rows, slot], Tlo[rows, slot] = hi[p0:p1], lo[p0:p1]
            rows_t = torch.from_numpy(rows).to(S.device)
            own = S[rows_t, torch.from_numpy(rj[p0:p1]).to(S.device)].cpu().numpy()  # each pair's own value
            Ss = torch.sort(S, dim=1).values
            above = torch.searchsorted(Ss, torch.from_numpy(Thi).to(S.device), right=True)
            at_least = torch.searchsorted(Ss, torch.from_numpy(Tlo).to(S.device), right=False)
            del Ss
            above = above.cpu().numpy()[rows, slot]
            sure = nr - above
            win = above - at_least.cpu().numpy()[rows, slot]
            own_sure = own > hi[p0:p1]  # (never, with the bound's slack; counted right if so)
            own_win = (own >= lo[p0:p1]) & ~own_sure
            sure = sure - own_sure
            win = win - own_win
            rank[p0:p1] = 1 + sure
            amb = np.flatnonzero((win > 0) & (sure < depth))  # beyond the depth whatever the window holds: inf
            if amb.size:
                n_members += int(win[amb].sum())
                if n_members > WINDOW_MOST:
                    bar.close()
                    return None
                step = max(1, (1 << 26) // max(nr, 1))
                for c0 in range(0, amb.size, step):
                    a = amb[c0:c0 + step]
                    sub = S[torch.from_numpy(rows[a]).to(S.device)]
                    lo_t = torch.from_numpy(lo[p0 + a]).to(S.device)[:, None]
                    hi_t = torch.from_numpy(hi[p0 + a]).to(S.device)[:, None]
                    nz = torch.nonzero((sub >= lo_t) & (sub <= hi_t)).cpu().numpy()
                    members_p.append(p0 + a[nz[:, 0]])
                    members_j.append(nz[:, 1])
            del S
            bar.update(e - s)
    bar.close()
    if members_p:
        p, j = np.concatenate(members_p), np.concatenate(members_j)
        other = j != rj[p]
        p, j = p[other], j[other]
        kj = pair_keys64(ks.Q64, ks.R64, qi[p], j, ks.metric)
        before = (kj > k64[p]) | ((kj == k64[p]) & (j < rj[p]))
        rank += np.bincount(p[before], minlength=qi.size)
    rank[rank > depth] = np.inf
    return rank
