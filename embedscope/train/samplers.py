"""Batch samplers of Roth et al.'s study (§3.2; reference code ``datasampler/``; docs/methods.md §5).

A sampler is a ``torch.utils.data`` batch sampler: iterating it yields ``len(sampler)`` lists of
``batch_size`` indices into the training set (``N // batch_size`` batches per epoch, as the
reference code). Names (``--sampler``):

* ``spc-2``, ``spc-4``, ``spc-8``: b/n distinct classes, n samples each (SPC-n; SPC-2 is the
  papers' protocol). A class with fewer than n images gives each of its images once, then repeats
  (drawn with replacement) up to n.
* ``spc-r``: b − 1 distinct random samples plus one sample sharing a label with one of them.
* ``random``: a fresh permutation of the training set each epoch, cut into batches (last partial
  batch dropped).
* ``gc``, ``ddm``, ``frd``: embedded samplers matching a large batch B* drawn from a memory bank of
  training embeddings (see :class:`EmbeddedSampler`).

Randomness comes from the sampler's own ``numpy.random.Generator``; :meth:`BatchSampler.get_state`
returns it (and the memory bank) for checkpoints.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from embedscope import names
from embedscope.errors import EmbedscopeError, UsageError

SAMPLER_NAMES = names.SAMPLERS


class BatchSampler:
    """Base class. ``labels``: the training labels (any integers), ``batch_size`` b."""

    needs_bank = False
    name = "base"

    def __init__(self, labels, batch_size: int, seed: int | None = 0) -> None:
        self.labels = np.asarray(labels)
        self.batch_size = int(batch_size)
        n = len(self.labels)
        if self.batch_size < 2:
            raise EmbedscopeError(f"--batch-size must be at least 2, got {batch_size}")
        if n < self.batch_size:
            raise EmbedscopeError(f"--batch-size {batch_size} exceeds the {n} training images")
        self.rng = np.random.default_rng(seed)
        self.classes, inv = np.unique(self.labels, return_inverse=True)
        order = np.argsort(inv, kind="stable")
        bounds = np.cumsum(np.bincount(inv, minlength=len(self.classes)))[:-1]
        self.members = np.split(order, bounds)  # members[k]: indices of class self.classes[k]

    def __len__(self) -> int:
        return len(self.labels) // self.batch_size

    def __iter__(self):
        for _ in range(len(self)):
            yield [int(i) for i in self.next_batch()]

    def next_batch(self) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def get_state(self) -> dict[str, Any]:
        return {"rng": json.dumps(self.rng.bit_generator.state)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = json.loads(state["rng"])

    # helpers
    def _draw(self, pool: np.ndarray, n: int) -> np.ndarray:
        """n distinct elements of ``pool``; a pool smaller than n gives every element once (in random
        order), then the remaining draws with replacement (before, all n were drawn with replacement,
        so a class of 3 in an SPC-4 batch could miss one of its images and repeat others)."""
        if len(pool) >= n:
            return self.rng.choice(pool, n, replace=False)
        return np.concatenate([self.rng.permutation(pool), self.rng.choice(pool, n - len(pool))])

    def _draw_class(self, k: int, n: int, exclude: int | None = None) -> np.ndarray:
        m = self.members[k]
        if exclude is not None:
            m = m[m != exclude]
            if len(m) == 0:
                m = self.members[k]
        return self._draw(m, n)


class RandomBatchSampler(BatchSampler):
    """``random``: a permutation of the training set per epoch, in batches of b (docs/methods.md §5)."""

    name = "random"

    def __iter__(self):
        perm = self.rng.permutation(len(self.labels))
        for b in range(len(self)):
            yield [int(i) for i in perm[b * self.batch_size:(b + 1) * self.batch_size]]


class SPCSampler(BatchSampler):
    """``spc-n``: b/n distinct classes, n samples of each (Roth §3.2; docs/methods.md §5)."""

    def __init__(self, labels, batch_size: int, n: int, seed: int | None = 0) -> None:
        super().__init__(labels, batch_size, seed)
        self.n = int(n)
        self.name = f"spc-{n}"
        if self.batch_size % self.n:
            raise UsageError(f"--sampler spc-{n} needs a --batch-size divisible by {n}, got {batch_size}")
        k = self.batch_size // self.n
        if k > len(self.classes):
            larger = [f"spc-{m}" for m in (4, 8) if m > self.n and self.batch_size % m == 0]
            raise EmbedscopeError(
                f"--sampler spc-{n} with batch size {batch_size} needs {k} classes per batch, but the "
                f"training set has {len(self.classes)}: use --batch-size <= {len(self.classes) * self.n}"
                + (f" or a larger n ({', '.join(larger)})" if larger else ""))

    def next_batch(self) -> np.ndarray:
        ks = self.rng.choice(len(self.classes), self.batch_size // self.n, replace=False)
        return np.concatenate([self._draw_class(k, self.n) for k in ks])


class SPCRSampler(BatchSampler):
    """``spc-r``: b − 1 distinct random samples plus one that shares a label with one of them (docs/methods.md §5)."""

    name = "spc-r"

    def __init__(self, labels, batch_size: int, seed: int | None = 0) -> None:
        super().__init__(labels, batch_size, seed)
        sizes = np.array([len(m) for m in self.members])
        if sizes.max() < 2:
            raise EmbedscopeError("--sampler spc-r needs a class with at least 2 images")
        self._k_of = np.searchsorted(self.classes, self.labels)

    def next_batch(self) -> np.ndarray:
        idx = self.rng.choice(len(self.labels), self.batch_size - 1, replace=False)
        in_batch = np.zeros(len(self.labels), dtype=bool)
        in_batch[idx] = True
        for j in self.rng.permutation(len(idx)):
            m = self.members[self._k_of[idx[j]]]
            free = m[~in_batch[m]]
            if len(free):
                return np.append(idx, self.rng.choice(free))
        # every image of every drawn class is already in the batch: repeat one of a class of >= 2
        ok = [j for j in range(len(idx)) if len(self.members[self._k_of[idx[j]]]) >= 2]
        if ok:
            m = self.members[self._k_of[idx[self.rng.choice(ok)]]]
            return np.append(idx, self.rng.choice(m))
        k = self.rng.choice(np.flatnonzero([len(m) >= 2 for m in self.members]))
        return np.append(idx[:-1], self.rng.choice(self.members[k], 2, replace=False))


class EmbeddedSampler(BatchSampler):
    """Embedded samplers (Roth §3.2; reference ``datasampler/``; docs/methods.md §5).

    A memory bank holds one embedding per training image (``init_bank`` with the embedded training
    set; ``update`` overwrites the rows of each trained batch). Each batch: draw B* of ``bigb``
    distinct training indices (paper 1024, code 512; capped at N) and choose a batch of b whose
    embeddings match B*'s. ``n``: samples per class of the chosen batch; ``m``: candidates (code 10).
    """

    needs_bank = True

    def __init__(self, labels, batch_size: int, seed: int | None = 0, *, n: int = 2, bigb: int = 1024,
                 m: int = 10) -> None:
        super().__init__(labels, batch_size, seed)
        self.n = int(n)
        self.bigb = min(int(bigb), len(self.labels))
        self.m = int(m)
        if self.batch_size % self.n:
            raise UsageError(f"--sampler {self.name} needs a --batch-size divisible by {self.n}, got {batch_size}")
        self.bank = None
        self._k_of = np.searchsorted(self.classes, self.labels)

    def init_bank(self, embeddings) -> None:
        import torch

        emb = torch.as_tensor(embeddings, dtype=torch.float32).detach().cpu().clone()
        if emb.shape[0] != len(self.labels):
            raise EmbedscopeError(f"memory bank: {emb.shape[0]} embeddings for {len(self.labels)} training images")
        self.bank = emb

    def update(self, idx, embeddings) -> None:
        import torch

        idx = torch.as_tensor(idx, dtype=torch.long).cpu()
        self.bank[idx] = embeddings.detach().float().cpu()

    def get_state(self) -> dict[str, Any]:
        st = super().get_state()
        st["bank"] = self.bank.clone() if self.bank is not None else None
        return st

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        if state.get("bank") is not None:
            self.bank = state["bank"].clone().float()

    def _bank_np(self, idx: np.ndarray) -> np.ndarray:
        if self.bank is None:
            raise EmbedscopeError(f"the {self.name} sampler needs its memory bank (init_bank) before use")
        return self.bank[idx].numpy().astype(np.float64)

    def _candidate(self, bigb_idx: np.ndarray) -> np.ndarray:
        """An SPC-n batch drawn from B*: b/n distinct classes of B*, n members each (from B* first)."""
        k = self.batch_size // self.n
        kb = self._k_of[bigb_idx]
        present, counts = np.unique(kb, return_counts=True)
        full = present[counts >= self.n]
        if len(full) >= k:
            ks = self.rng.choice(full, k, replace=False)
        else:
            rest = np.setdiff1d(np.arange(len(self.classes)), full)
            extra = self.rng.choice(rest, min(k - len(full), len(rest)), replace=False)
            ks = np.concatenate([full, extra])
            if len(ks) < k:  # fewer classes than b/n: repeat classes
                ks = np.concatenate([ks, self.rng.choice(ks, k - len(ks))])
        out = []
        for c in ks:
            pool = bigb_idx[kb == c]
            if len(pool) < self.n:
                pool = self.members[c]
            out.append(self._draw(pool, self.n))
        return np.concatenate(out)

    def _bigb(self) -> np.ndarray:
        return self.rng.choice(len(self.labels), self.bigb, replace=False)


class GreedyCoresetSampler(EmbeddedSampler):
    """``gc``: greedy k-center on B* for b/n picks, each padded with n − 1 same-class samples.

    Greedy approximation of min_B max_{x*∈B*} min_{x∈B} ‖x − x*‖ (docs/methods.md §5): start at a
    random point of B*, then repeatedly add the point of B* farthest from the picks.
    """

    name = "gc"

    def next_batch(self) -> np.ndarray:
        big = self._bigb()
        X = self._bank_np(big)
        k = self.batch_size // self.n
        sel = [int(self.rng.integers(len(big)))]
        mind = np.linalg.norm(X - X[sel[0]], axis=1)
        for _ in range(k - 1):
            j = int(np.argmax(mind))
            sel.append(j)
            mind = np.minimum(mind, np.linalg.norm(X - X[j], axis=1))
        picks = big[sel]
        out = [np.concatenate([[p], self._draw_class(self._k_of[p], self.n - 1, exclude=p)]) for p in picks]
        return np.concatenate(out).astype(np.int64)


def distance_histogram(X: np.ndarray, bins: int, upper: float) -> np.ndarray:
    """Normalised histogram of the pairwise Euclidean distances of the rows of X over [0, upper]."""
    from embedscope.train.miners import pairwise_distances

    d = pairwise_distances(X)[np.triu_indices(len(X), 1)]
    h, _ = np.histogram(np.clip(d, 0, upper), bins=bins, range=(0.0, upper))
    return h / max(h.sum(), 1)


def histogram_wasserstein(h1: np.ndarray, h2: np.ndarray, width: float) -> float:
    """1-Wasserstein distance of two histograms on the same bins: Σ |CDF₁ − CDF₂| · bin width."""
    return float(np.abs(np.cumsum(h1) - np.cumsum(h2)).sum() * width)


def frechet_distance(X1: np.ndarray, X2: np.ndarray) -> float:
    """‖μ₁ − μ₂‖² + Tr(Σ₁ + Σ₂ − 2(Σ₁Σ₂)^{1/2}) of two sets of rows (docs/methods.md §5, FRD).

    Σ = np.cov (ddof 1, as the reference code). With the centred rows A₁, A₂ (Σᵢ = AᵢᵀAᵢ/(nᵢ − 1)),
    the eigenvalues of Σ₁Σ₂ are the squared singular values of A₁A₂ᵀ/√((n₁ − 1)(n₂ − 1)), so
    Tr (Σ₁Σ₂)^{1/2} is that matrix's nuclear norm and Tr Σᵢ = ‖Aᵢ‖²_F/(nᵢ − 1): no matrix square
    root, exact to rounding also when a batch has fewer rows than dimensions (Σ singular, b < D),
    where square roots of eigenvalues near 0 were off by ~√ε (FRD of a set with itself −1.1e-7 for
    12 rows in D = 128).
    """
    X1, X2 = np.asarray(X1, dtype=np.float64), np.asarray(X2, dtype=np.float64)
    if len(X1) < 2 or len(X2) < 2:
        raise EmbedscopeError("the Fréchet distance needs at least 2 rows per set (covariance)")
    mu1, mu2 = X1.mean(0), X2.mean(0)
    A1, A2 = X1 - mu1, X2 - mu2
    c1, c2 = len(X1) - 1.0, len(X2) - 1.0
    tr = np.linalg.svd(A1 @ A2.T, compute_uv=False).sum() / np.sqrt(c1 * c2)
    return float(((mu1 - mu2) ** 2).sum() + (A1 * A1).sum() / c1 + (A2 * A2).sum() / c2 - 2.0 * tr)


class DDMSampler(EmbeddedSampler):
    """``ddm``: of m SPC-n candidates from B*, the one whose normalised histogram of pairwise
    distances (50 bins) has the smallest Wasserstein distance to B*'s (docs/methods.md §5)."""

    name = "ddm"
    bins = 50

    def next_batch(self) -> np.ndarray:
        big = self._bigb()
        Xb = self._bank_np(big)
        from embedscope.train.miners import pairwise_distances

        upper = max(float(pairwise_distances(Xb).max()), 1e-6)
        hb = distance_histogram(Xb, self.bins, upper)
        cands = [self._candidate(big) for _ in range(self.m)]
        scores = [histogram_wasserstein(distance_histogram(self._bank_np(c), self.bins, upper), hb,
                                        upper / self.bins) for c in cands]
        self.last_scores, self.last_candidates, self.last_bigb = scores, cands, big
        return cands[int(np.argmin(scores))].astype(np.int64)


class FRDSampler(EmbeddedSampler):
    """``frd``: of m SPC-n candidates from B*, the one with the smallest Fréchet distance to B*
    (‖μ_B − μ_B*‖² + Tr(Σ_B + Σ_B* − 2(Σ_B Σ_B*)^{1/2}); docs/methods.md §5)."""

    name = "frd"

    def next_batch(self) -> np.ndarray:
        big = self._bigb()
        Xb = self._bank_np(big)
        cands = [self._candidate(big) for _ in range(self.m)]
        scores = [frechet_distance(self._bank_np(c), Xb) for c in cands]
        self.last_scores, self.last_candidates, self.last_bigb = scores, cands, big
        return cands[int(np.argmin(scores))].astype(np.int64)


def build_sampler(name: str, labels, batch_size: int, *, seed: int | None = 0, bigb: int = 1024,
                  m: int = 10, n: int = 2) -> BatchSampler:
    """A batch sampler by name (docs/methods.md §5): ``spc-2|spc-4|spc-8|spc-r|random|gc|ddm|frd``.

    ``n`` is the samples per class of the embedded samplers' batches; ``bigb`` the size of B*
    (paper 1024); ``m`` the number of candidates of ``ddm``/``frd`` (code 10).
    """
    if name in ("spc-2", "spc-4", "spc-8"):
        return SPCSampler(labels, batch_size, int(name.split("-")[1]), seed)
    if name == "spc-r":
        return SPCRSampler(labels, batch_size, seed)
    if name == "random":
        return RandomBatchSampler(labels, batch_size, seed)
    cls = {"gc": GreedyCoresetSampler, "ddm": DDMSampler, "frd": FRDSampler}.get(name)
    if cls is None:
        raise EmbedscopeError(f"unknown sampler '{name}' (choose {', '.join(SAMPLER_NAMES)})")
    return cls(labels, batch_size, seed, n=n, bigb=bigb, m=m)


class EpochTagged:
    """A batch sampler's batches with the epoch on each index: ``[(epoch, i), …]``, for a dataset
    that draws each image's augmentation from (run seed, epoch, index) (:class:`embedscope.data.TorchImages`
    with ``seed``). Set :attr:`epoch` before each ``iter(loader)``: the DataLoader iterates its batch
    sampler in the main process, so workers (persistent across epochs) receive the epoch with the indices."""

    def __init__(self, sampler) -> None:
        self.sampler = sampler
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self):
        e = int(self.epoch)
        for batch in self.sampler:
            yield [(e, int(i)) for i in batch]
