"""Tuple miners of Roth et al.'s study and the ρ-regularising switch (docs/methods.md §5).

Every miner maps a batch (embeddings B x D, labels B) to triplets ``(a, p, n)``: three LongTensors
on the embeddings' device, with ``labels[a] == labels[p]``, ``a != p`` and ``labels[a] != labels[n]``
(except the ρ-switched triplets ``(i, i, j)``, whose "negative" j shares i's class on purpose).
They plug into any PML tuple loss as ``loss(embeddings, labels, indices_tuple=(a, p, n))``.

Randomness comes from the miner's own ``numpy.random.Generator`` (``seed``), whose state travels
in the checkpoint (:meth:`TupleMiner.get_state`), so a resumed run mines exactly as an
uninterrupted one.
"""

from __future__ import annotations

import json

import numpy as np

from embedscope import names
from embedscope.errors import EmbedscopeError

MINER_NAMES = names.MINERS


def pairwise_distances(X: np.ndarray) -> np.ndarray:
    """Euclidean distance matrix of the rows of X (float64, exact zeros on the diagonal)."""
    X = np.asarray(X, dtype=np.float64)
    sq = np.einsum("ij,ij->i", X, X)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (X @ X.T)
    np.fill_diagonal(d2, 0.0)
    return np.sqrt(np.clip(d2, 0.0, None))


def inverse_sphere_log_weights(d: np.ndarray, dim: int, cutoff: float = 0.5) -> np.ndarray:
    """ln q(d)^{-1} of distance-weighted sampling (Wu et al. 2017; docs/methods.md §5).

    ln q(d)^{-1} = (2 − D) ln d − ((D − 3)/2) ln(1 − d²/4), with d clamped to ``d ≥ cutoff``
    (0.5, as the reference code ``batchminer/distance.py``) and 1 − d²/4 kept ≥ 1e-8 (points that
    are not on the unit sphere can be farther apart than 2).
    """
    d = np.maximum(np.asarray(d, dtype=np.float64), cutoff)
    inner = np.maximum(1.0 - 0.25 * d * d, 1e-8)
    return (2.0 - dim) * np.log(d) - ((dim - 3.0) / 2.0) * np.log(inner)


def _choose_per_row(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One column per row, drawn with probability ∝ the row's non-negative weights (row sums > 0)."""
    c = np.cumsum(weights, axis=1)
    u = rng.random(len(weights)) * c[:, -1]
    idx = (c <= u[:, None]).sum(axis=1)
    return np.minimum(idx, weights.shape[1] - 1)


class TupleMiner:
    """Base class: one triplet per anchor that has a positive and a negative in the batch."""

    name = "base"

    def __init__(self, seed: int | None = 0) -> None:
        self.rng = np.random.default_rng(seed)

    # -- state for checkpoints (a JSON string: plain python, safe for torch.load(weights_only=True))
    def get_state(self) -> str:
        return json.dumps(self.rng.bit_generator.state)

    def set_state(self, state: str) -> None:
        self.rng.bit_generator.state = json.loads(state)

    def __call__(self, embeddings, labels):
        import torch

        X = embeddings.detach().float().cpu().numpy()
        y = labels.detach().cpu().numpy()
        a, p, n = self.mine(X, y)
        dev = embeddings.device
        return tuple(torch.as_tensor(v, dtype=torch.long, device=dev) for v in (a, p, n))

    def mine(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y)
        same = y[:, None] == y[None, :]
        pos = same.copy()
        np.fill_diagonal(pos, False)
        neg = ~same
        anchors = np.flatnonzero(pos.any(1) & neg.any(1))
        if len(anchors) == 0:
            e = np.zeros(0, dtype=np.int64)
            return e, e, e
        d = pairwise_distances(X)
        p, n = self._pick(X, d, pos[anchors], neg[anchors], anchors)
        return anchors.astype(np.int64), p.astype(np.int64), n.astype(np.int64)

    def _pick(self, X, d, pos, neg, anchors):  # pragma: no cover - abstract
        raise NotImplementedError


class RandomMiner(TupleMiner):
    """Random valid triplets: for every anchor a uniform positive and a uniform negative (docs/methods.md §5)."""

    name = "random"

    def _pick(self, X, d, pos, neg, anchors):
        return _choose_per_row(pos.astype(float), self.rng), _choose_per_row(neg.astype(float), self.rng)


class DistanceWeightedMiner(TupleMiner):
    """Distance-weighted sampling (Wu et al. 2017; reference code ``batchminer/distance.py``; docs/methods.md §5).

    Every sample with a same-class partner is an anchor; the positive is uniform among its class;
    one negative is drawn with probability ∝ q(d)^{-1} over the other-class samples, with
    ln q(d)^{-1} = (2 − D) ln d − ((D − 3)/2) ln(1 − d²/4) and d clamped to ≥ ``cutoff`` = 0.5
    (see :func:`inverse_sphere_log_weights`).
    """

    name = "distance"

    def __init__(self, seed: int | None = 0, cutoff: float = 0.5) -> None:
        super().__init__(seed)
        self.cutoff = float(cutoff)

    def negative_probabilities(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """B x B matrix: row i = the probability of drawing each sample as i's negative."""
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y)
        neg = y[:, None] != y[None, :]
        return self._neg_probs(X, pairwise_distances(X), neg)

    def _neg_probs(self, X, d, neg):
        logw = inverse_sphere_log_weights(d, X.shape[1], self.cutoff)
        logw = np.where(neg, logw, -np.inf)
        m = logw.max(axis=1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        w = np.exp(logw - m)
        s = w.sum(axis=1, keepdims=True)
        return np.divide(w, s, out=np.zeros_like(w), where=s > 0)

    def _pick(self, X, d, pos, neg, anchors):
        probs = self._neg_probs(X, d[anchors], neg)
        return _choose_per_row(pos.astype(float), self.rng), _choose_per_row(probs, self.rng)


class SemihardMiner(TupleMiner):
    """Semi-hard negatives (Schroff et al.; reference ``batchminer/semihard.py``; docs/methods.md §5).

    Per anchor: a uniform positive p; a uniform negative among d_ap < d_an < d_ap + margin
    (margin 0.2), else (none) a uniform negative.
    """

    name = "semihard"

    def __init__(self, seed: int | None = 0, margin: float = 0.2) -> None:
        super().__init__(seed)
        self.margin = float(margin)

    def _pick(self, X, d, pos, neg, anchors):
        p = _choose_per_row(pos.astype(float), self.rng)
        da = d[anchors]
        dap = da[np.arange(len(anchors)), p][:, None]
        semi = neg & (da > dap) & (da < dap + self.margin)
        cand = np.where(semi.any(1, keepdims=True), semi, neg)
        return p, _choose_per_row(cand.astype(float), self.rng)


class SofthardMiner(TupleMiner):
    """Soft-hard mining (reference ``batchminer/softhard.py``; docs/methods.md §5).

    Per anchor: positive uniform among positives farther than the closest negative, negative
    uniform among negatives closer than the farthest positive; each falls back to all positives /
    negatives when its set is empty.
    """

    name = "softhard"

    def _pick(self, X, d, pos, neg, anchors):
        da = d[anchors]
        far_pos = np.where(pos, da, -np.inf).max(1, keepdims=True)
        near_neg = np.where(neg, da, np.inf).min(1, keepdims=True)
        hard_pos = pos & (da > near_neg)
        hard_neg = neg & (da < far_pos)
        pc = np.where(hard_pos.any(1, keepdims=True), hard_pos, pos)
        nc = np.where(hard_neg.any(1, keepdims=True), hard_neg, neg)
        return _choose_per_row(pc.astype(float), self.rng), _choose_per_row(nc.astype(float), self.rng)


class RhoSwitchMiner(TupleMiner):
    """ρ-regularisation on a tuple miner (Roth §3, reference ``batchminer/rho_distance.py``; docs/methods.md §5).

    For every batch sample i whose class has ≥ 2 members in the batch, draw
    switch ~ Bernoulli(p_switch). Switched: the triplet is (a=i, p=i, n=j), j uniform among the
    other samples of i's class, so the loss's repulsive term pushes same-class samples apart.
    Otherwise i's triplet comes from the base miner (distance-weighted in the reference code).
    ``last_stats`` holds (eligible, switched) of the latest batch; ``totals`` the running sums.
    """

    def __init__(self, base: TupleMiner, p_switch: float) -> None:
        if not 0.0 <= p_switch <= 1.0:
            raise EmbedscopeError(f"--p-switch must lie in [0, 1], got {p_switch}")
        self.base = base
        self.p_switch = float(p_switch)
        self.rng = base.rng  # one random stream: the base miner's
        self.name = f"rho-{base.name}"
        self.last_stats = (0, 0)
        self.totals = [0, 0]

    def mine(self, X, y):
        y = np.asarray(y)
        same = y[:, None] == y[None, :]
        np.fill_diagonal(same, False)
        eligible = np.flatnonzero(same.any(1))
        switch = self.rng.random(len(eligible)) < self.p_switch
        sw = eligible[switch]
        a, p, n = self.base.mine(X, y)
        keep = ~np.isin(a, sw)
        if len(sw):
            j = _choose_per_row(same[sw].astype(float), self.rng)
            a = np.concatenate([a[keep], sw])
            p = np.concatenate([p[keep], sw])
            n = np.concatenate([n[keep], j])
        self.last_stats = (len(eligible), int(switch.sum()))
        self.totals[0] += len(eligible)
        self.totals[1] += int(switch.sum())
        return a.astype(np.int64), p.astype(np.int64), n.astype(np.int64)


_MINERS = {"distance": DistanceWeightedMiner, "semihard": SemihardMiner, "random": RandomMiner,
           "softhard": SofthardMiner}


def build_miner(name: str | None, *, p_switch: float = 0.0, seed: int | None = 0) -> TupleMiner | None:
    """A tuple miner by name (``distance``, ``semihard``, ``random``, ``softhard``), optionally ρ-switched.

    ``p_switch > 0`` wraps the miner in :class:`RhoSwitchMiner` (docs/methods.md §5); with ``name=None``
    and ``p_switch > 0`` the reference code's distance-weighted miner is used. ``name=None`` and
    ``p_switch == 0`` return None (the loss mines its own pairs or uses all of them).
    """
    if name is None and p_switch > 0:
        name = "distance"
    if name is None:
        return None
    if name not in _MINERS:
        raise EmbedscopeError(f"unknown miner '{name}' (choose {', '.join(MINER_NAMES)})")
    miner = _MINERS[name](seed)
    if p_switch < 0 or p_switch > 1:
        raise EmbedscopeError(f"--p-switch must lie in [0, 1], got {p_switch}")
    return RhoSwitchMiner(miner, p_switch) if p_switch > 0 else miner
