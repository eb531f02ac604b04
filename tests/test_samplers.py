"""Batch samplers (docs/methods.md §5): class structure of every batch (property tests), embedded samplers."""

from collections import Counter

import numpy as np
import pytest
import torch

from embedscope.errors import EmbedscopeError
from embedscope.train.samplers import (
    build_sampler,
    distance_histogram,
    frechet_distance,
    histogram_wasserstein,
)


def labels(seed=0, n_classes=12, lo=1, hi=9):
    rng = np.random.default_rng(seed)
    return rng.permutation(np.repeat(np.arange(n_classes) * 3 + 5, rng.integers(lo, hi, n_classes)))


@pytest.mark.parametrize("n", [2, 4, 8])
def test_spc_n_batches(n):
    for seed in range(5):
        y = labels(seed)
        b = n * 4
        s = build_sampler(f"spc-{n}", y, b, seed=seed)
        batches = list(s)
        assert len(batches) == len(s) == len(y) // b
        for bt in batches:
            assert len(bt) == b and all(0 <= i < len(y) for i in bt)
            c = Counter(y[bt])
            assert len(c) == b // n and set(c.values()) == {n}  # b/n classes, n samples each
            for k in c:  # no repeated image unless the class is smaller than n
                idx = [i for i in bt if y[i] == k]
                if (y == k).sum() >= n:
                    assert len(set(idx)) == n


def test_spc_r_random_and_errors():
    y = labels(1)
    for seed in range(5):
        for bt in build_sampler("spc-r", y, 16, seed=seed):
            assert len(bt) == 16 and len(set(bt[:-1])) == 15
            assert y[bt[-1]] in set(y[bt[:-1]])  # the last one shares a label with one of the others
    s = build_sampler("random", y, 10, seed=0)
    seen = [i for bt in s for i in bt]
    assert len(seen) == len(set(seen)) == len(s) * 10  # a permutation cut into batches
    with pytest.raises(EmbedscopeError, match="needs 8 classes"):
        build_sampler("spc-2", np.repeat(np.arange(5), 10), 16)
    with pytest.raises(EmbedscopeError, match="divisible"):
        build_sampler("spc-4", y, 10)
    with pytest.raises(EmbedscopeError, match="unknown sampler"):
        build_sampler("spc-3", y, 12)


def clustered_bank(n_clusters=6, per=20, dim=8, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_clusters, dim)) * 10
    X = np.concatenate([c + 0.01 * rng.normal(size=(per, dim)) for c in centres])
    y = np.repeat(np.arange(n_clusters), per)
    return torch.tensor(X, dtype=torch.float32), y


@pytest.mark.parametrize("name", ["gc", "ddm", "frd"])
def test_embedded_samplers_structure(name):
    X, y = clustered_bank()
    s = build_sampler(name, y, 12, seed=0, bigb=64)
    with pytest.raises(EmbedscopeError, match="memory bank"):
        next(iter(s))
    s.init_bank(X)
    for bt in s:
        assert len(bt) == 12
        c = Counter(y[bt])
        assert all(v % 2 == 0 for v in c.values())  # groups of n = 2 same-class samples
        if name != "gc":
            assert len(c) == 6 and set(c.values()) == {2}
            assert s.last_scores[int(np.argmin(s.last_scores))] == min(s.last_scores)
    s.update([0, 1], torch.zeros(2, 8))
    assert s.bank[:2].abs().sum() == 0


def test_greedy_coreset_covers_every_cluster():
    X, y = clustered_bank(n_clusters=6, per=20)
    s = build_sampler("gc", y, 12, seed=3, bigb=10_000)  # B* = every training image
    s.init_bank(X)
    for _ in range(5):
        bt = s.next_batch()
        picks = bt[::2]  # one k-center pick, then its n-1 = 1 padding sample
        assert sorted(y[picks]) == list(range(6))  # 6 picks = one per well-separated cluster


@pytest.mark.parametrize("name", ["ddm", "frd"])
def test_matching_samplers_pick_the_best_candidate(name):
    from scipy import linalg, stats
    from scipy.spatial.distance import pdist

    X, y = clustered_bank(n_clusters=6, per=20)
    X = X + torch.randn(X.shape) * 2  # overlapping clusters: candidates differ
    s = build_sampler(name, y, 12, seed=0, bigb=60, m=10)
    s.init_bank(X)
    batch = s.next_batch()
    Xb = X.numpy().astype(np.float64)[s.last_bigb]
    scores = []
    for c in s.last_candidates:
        Xc = X.numpy().astype(np.float64)[c]
        if name == "ddm":  # normalised 50-bin histograms of pairwise distances, 1-Wasserstein
            upper = pdist(Xb).max()
            hb, _ = np.histogram(pdist(Xb), 50, (0, upper))
            hc, _ = np.histogram(np.clip(pdist(Xc), 0, upper), 50, (0, upper))
            centres = (np.arange(50) + 0.5) * upper / 50
            scores.append(stats.wasserstein_distance(centres, centres, hc / hc.sum(), hb / hb.sum()))
        else:  # Frechet distance
            S1, S2 = np.cov(Xc, rowvar=False), np.cov(Xb, rowvar=False)
            scores.append(((Xc.mean(0) - Xb.mean(0)) ** 2).sum()
                          + np.trace(S1 + S2 - 2 * linalg.sqrtm(S1 @ S2).real))
    np.testing.assert_allclose(s.last_scores, scores, rtol=1e-5, atol=1e-7)
    assert list(batch) == list(s.last_candidates[int(np.argmin(scores))])
    assert len(set(map(tuple, s.last_candidates))) > 1


def test_distance_helpers_against_scipy():
    from scipy import linalg, stats

    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(40, 5)), rng.normal(size=(60, 5)) + 0.3
    S1, S2 = np.cov(A, rowvar=False), np.cov(B, rowvar=False)
    ref = ((A.mean(0) - B.mean(0)) ** 2).sum() + np.trace(S1 + S2 - 2 * linalg.sqrtm(S1 @ S2).real)
    assert frechet_distance(A, B) == pytest.approx(ref, rel=1e-6)
    h1, h2 = distance_histogram(A, 50, 8.0), distance_histogram(B, 50, 8.0)
    centres = (np.arange(50) + 0.5) * 8.0 / 50
    assert histogram_wasserstein(h1, h2, 8.0 / 50) == pytest.approx(
        stats.wasserstein_distance(centres, centres, h1, h2), rel=1e-9)
    from scipy.spatial.distance import pdist

    ref_h, _ = np.histogram(pdist(A), bins=50, range=(0, 8.0))
    np.testing.assert_allclose(h1, ref_h / ref_h.sum())


@pytest.mark.parametrize("name", ["spc-2", "spc-r", "random", "frd"])
def test_sampler_state_round_trip(name):
    X, y = clustered_bank()
    s1 = build_sampler(name, y, 12, seed=0, bigb=64)
    if s1.needs_bank:
        s1.init_bank(X)
    list(s1)
    st = s1.get_state()
    nxt = list(s1)
    s2 = build_sampler(name, y, 12, seed=123, bigb=64)
    s2.set_state(st)
    assert list(s2) == nxt
