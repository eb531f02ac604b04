"""Losses (PML, docs/methods.md §5 defaults) and tuple miners: validity, formula, switch rate."""

import math

import numpy as np
import pytest
import torch

from embedscope.errors import EmbedscopeError
from embedscope.train.losses import LOSS_NAMES, build_loss, kobs_group, loss_family
from embedscope.train.miners import (
    DistanceWeightedMiner,
    RhoSwitchMiner,
    SemihardMiner,
    SofthardMiner,
    build_miner,
    inverse_sphere_log_weights,
)


def batch(seed=0, n_classes=4, per_class=4, dim=16, normalize=True):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n_classes * per_class, dim, generator=g)
    if normalize:
        X = torch.nn.functional.normalize(X, dim=1)
    y = torch.arange(n_classes).repeat_interleave(per_class)
    return X, y


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_every_loss_gives_finite_loss_and_gradient(name):
    X, y = batch()
    X.requires_grad_(True)
    loss = build_loss(name, 4, 16)
    val = loss(X, y)
    assert torch.isfinite(val)
    val.backward()
    assert X.grad is not None and torch.isfinite(X.grad).all() and X.grad.abs().sum() > 0


def test_families_and_trainable_loss_parameters():
    assert {loss_family(n) for n in LOSS_NAMES} == {"ranking", "classification", "proxy"}
    assert loss_family("arcface") == "classification" and loss_family("proxynca") == "proxy"
    assert kobs_group("softtriple") == "classification" and kobs_group("margin") == "ranking"
    for name in ("proxynca", "softtriple", "arcface", "softmax", "margin"):
        groups = build_loss(name, 5, 8).param_groups(1e-3)
        assert groups and sum(p.numel() for g in groups for p in g["params"]) > 0, name
    for name in ("triplet", "contrastive", "multisimilarity"):
        assert build_loss(name, 5, 8).param_groups(1e-3) == []
    margin = build_loss("margin", 5, 8)
    (g,) = margin.param_groups(1e-5)
    assert g["lr"] == 5e-4 and g["params"][0].shape == (5,)          # beta per class, lr 5e-4 (Wu et al.)
    assert float(g["params"][0][0].detach()) == pytest.approx(1.2)
    assert float(build_loss("margin", 5, 8, beta=0.6).loss.beta[0].detach()) == pytest.approx(0.6)
    arc = build_loss("arcface", 5, 8).loss
    assert arc.margin == pytest.approx(0.5) and arc.scale == 16      # PML stores the margin in radians
    assert build_loss("proxynca", 5, 8).loss.softmax_scale == pytest.approx(9.0)
    with pytest.raises(EmbedscopeError, match="no parameter"):
        build_loss("triplet", 5, 8, nonsense=1)
    with pytest.raises(EmbedscopeError, match="unknown loss"):
        build_loss("nope", 5, 8)


def check_triplets(a, p, n, y, switched_ok=False):
    a, p, n, y = (np.asarray(v) for v in (a, p, n, y))
    assert len(a) == len(p) == len(n)
    assert (y[a] == y[p]).all()
    normal = a != p
    assert (y[a][normal] != y[n][normal]).all()
    if switched_ok:
        assert (y[a][~normal] == y[n][~normal]).all() and (n[~normal] != a[~normal]).all()
    else:
        assert normal.all()


@pytest.mark.parametrize("name", ["distance", "semihard", "random", "softhard"])
def test_miners_return_valid_triplets(name):
    rng = np.random.default_rng(0)
    for seed in range(30):  # property test over random batches, class sizes 1..5
        sizes = rng.integers(1, 6, size=rng.integers(2, 6))
        y = np.repeat(np.arange(len(sizes)), sizes)
        X = torch.nn.functional.normalize(torch.randn(len(y), 8), dim=1)
        a, p, n = build_miner(name, seed=seed)(X, torch.as_tensor(y))
        assert a.dtype == torch.long
        check_triplets(a, p, n, y)
        eligible = {i for i in range(len(y)) if sizes[y[i]] >= 2}
        assert sorted(a.tolist()) == sorted(eligible)  # one triplet per anchor that has a positive


def test_distance_weights_follow_the_formula():
    X, y = batch(seed=3, dim=16)
    X, y = X.numpy().astype(np.float64), y.numpy()
    P = DistanceWeightedMiner().negative_probabilities(X, y)
    D = X.shape[1]
    for i in range(len(y)):
        w = np.zeros(len(y))
        for j in range(len(y)):
            if y[j] != y[i]:
                d = max(np.linalg.norm(X[i] - X[j]), 0.5)  # clamped at 0.5
                w[j] = d ** (2 - D) * (1 - d * d / 4) ** (-(D - 3) / 2)
        np.testing.assert_allclose(P[i], w / w.sum(), rtol=1e-9, atol=1e-12)
    clamped = inverse_sphere_log_weights(np.array([0.5]), 16)
    assert inverse_sphere_log_weights(np.array([0.1]), 16) == pytest.approx(clamped)


def test_distance_miner_samples_with_those_probabilities():
    X, y = batch(seed=4, n_classes=3, per_class=3, dim=4)
    miner = DistanceWeightedMiner(seed=1)
    P = miner.negative_probabilities(X.numpy(), y.numpy())
    counts = np.zeros_like(P)
    reps = 3000
    for _ in range(reps):
        a, _, n = miner.mine(X.numpy(), y.numpy())
        counts[a, n] += 1
    freq = counts / reps
    se = np.sqrt(P * (1 - P) / reps)
    assert np.all(np.abs(freq - P) <= 5 * se + 1e-9)


def test_semihard_and_softhard_pick_the_promised_sets():
    X, y = batch(seed=5, n_classes=4, per_class=4, dim=3)
    Xn, yn = X.numpy().astype(np.float64), y.numpy()
    d = np.linalg.norm(Xn[:, None] - Xn[None], axis=2)
    a, p, n = SemihardMiner(seed=0, margin=0.2).mine(Xn, yn)
    for i, j, k in zip(a, p, n):
        semi = [m for m in range(len(yn)) if yn[m] != yn[i] and d[i, j] < d[i, m] < d[i, j] + 0.2]
        if semi:
            assert k in semi
    a, p, n = SofthardMiner(seed=0).mine(Xn, yn)
    for i, j, k in zip(a, p, n):
        negs = [m for m in range(len(yn)) if yn[m] != yn[i]]
        poss = [m for m in range(len(yn)) if yn[m] == yn[i] and m != i]
        hard_p = [m for m in poss if d[i, m] > min(d[i, negs])]
        hard_n = [m for m in negs if d[i, m] < max(d[i, poss])]
        assert (j in hard_p) if hard_p else (j in poss)
        assert (k in hard_n) if hard_n else (k in negs)


@pytest.mark.parametrize("p_switch", [0.05, 0.3, 0.8])
def test_rho_switch_rate_matches_p_switch(p_switch):
    miner = build_miner("distance", p_switch=p_switch, seed=7)
    assert isinstance(miner, RhoSwitchMiner)
    rng = np.random.default_rng(0)
    switched = eligible = 0
    for _ in range(200):
        y = rng.integers(0, 6, size=24)
        X = torch.nn.functional.normalize(torch.randn(24, 8), dim=1)
        a, p, n = miner(X, torch.as_tensor(y))
        check_triplets(a, p, n, y, switched_ok=True)
        sw = (a == p)
        switched += int(sw.sum())
        eligible += miner.last_stats[0]
        assert int(sw.sum()) == miner.last_stats[1]
        # every eligible sample is an anchor exactly once
        assert sorted(a.tolist()) == sorted(i for i in range(24) if (y == y[i]).sum() >= 2)
    rate = switched / eligible
    assert abs(rate - p_switch) < 5 * math.sqrt(p_switch * (1 - p_switch) / eligible)


def test_switch_extremes_and_switched_loss_pushes_same_class_apart():
    assert build_miner("distance", p_switch=0.0) is not None and not isinstance(build_miner("distance"), RhoSwitchMiner)
    assert build_miner(None) is None and isinstance(build_miner(None, p_switch=0.2), RhoSwitchMiner)
    with pytest.raises(EmbedscopeError):
        build_miner("distance", p_switch=1.5)
    X, y = batch(seed=2, n_classes=2, per_class=3, dim=4)
    a, p, n = build_miner("random", p_switch=1.0, seed=0)(X, y)
    assert (a == p).all() and (y[a] == y[n]).all()
    # contrastive loss on switched triplets: descending its gradient moves same-class samples apart
    Z = X.clone().requires_grad_(True)
    loss = build_loss("contrastive", 2, 4)
    loss(Z, y, (a, p, n)).backward()
    Z2 = (Z - 0.01 * Z.grad).detach()
    dist = lambda E: torch.stack([(E[i] - E[j]).norm() for i, j in zip(a, n)]).mean()  # noqa: E731
    assert dist(Z2) > dist(X)


def test_miner_state_round_trip():
    m1 = build_miner("distance", p_switch=0.3, seed=3)
    X, y = batch(seed=1)
    m1(X, y)
    state = m1.get_state()
    out1 = m1(X, y)
    m2 = build_miner("distance", p_switch=0.3, seed=99)
    m2.set_state(state)
    out2 = m2(X, y)
    for u, v in zip(out1, out2):
        assert torch.equal(u, v)


def test_loss_parameters_checked_by_kind():
    """--loss-param values of the wrong kind are one-line usage errors before any training step
    (``margin=abc`` failed inside PML at the first batch)."""
    from embedscope.errors import UsageError
    from embedscope.train.losses import build_loss, check_loss_params

    assert check_loss_params("margin", {"margin": 1, "beta": 0.6}) == {"margin": 1.0, "beta": 0.6}
    assert check_loss_params("triplet", {"squared": "False"}) == {"squared": False}
    assert check_loss_params("softtriple", {"centers_per_class": 3.0}) == {"centers_per_class": 3}
    for name, params, msg in [("margin", {"margin": "abc"}, "margin of 'margin' must be a finite number"),
                              ("margin", {"beta": float("nan")}, "finite number"),
                              ("margin", {"margin": True}, "finite number"),
                              ("triplet", {"squared": 1}, "must be true or false"),
                              ("softtriple", {"centers_per_class": 1.5}, "integer >= 1"),
                              ("softtriple", {"centers_per_class": 0}, "integer >= 1"),
                              ("contrastive", {"margin": 0.1}, "has no parameter")]:
        with pytest.raises(UsageError, match=msg):
            check_loss_params(name, params)
        with pytest.raises(UsageError, match=msg):
            build_loss(name, 4, 8, **params)
    assert build_loss("triplet", 4, 8, squared="false").hparams["squared"] is False
