"""Audit of the training components against independent computations (docs/methods.md §5).

Miners, batch samplers, the losses' hyper-parameters and values, and the toy example, each
compared with a computation written from the definitions (plain Python / float64 / scipy /
mpmath), not with embedscope's own helpers.
"""

import itertools
import math

import numpy as np
import pytest
import torch

from embedscope.train.losses import build_loss
from embedscope.train.miners import (
    DistanceWeightedMiner,
    RandomMiner,
    SemihardMiner,
    SofthardMiner,
    build_miner,
)
from embedscope.train.samplers import build_sampler, distance_histogram, frechet_distance, histogram_wasserstein


def sphere(n, dim, seed):
    X = np.random.default_rng(seed).standard_normal((n, dim))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def dist(X, i, j):
    return math.sqrt(sum((float(X[i, k]) - float(X[j, k])) ** 2 for k in range(X.shape[1])))


# ---------------------------------------------------------------- ρ-regularisation


def test_rho_switch_rate_singletons_and_partner():
    """switch ~ Bernoulli(p) per sample whose class has >= 2 members: binomial test (fixed seed),
    singletons never switched, switched triplet (i, i, j) with j != i of i's class, j uniform."""
    from scipy.stats import binomtest, chisquare

    y = np.array([0, 0, 0, 1, 1, 2, 3, 3, 3, 3, 4])  # classes 2 and 4: singletons
    X = sphere(len(y), 16, 1)
    for p_switch in (0.05, 0.3):
        m = build_miner(None, p_switch=p_switch, seed=3)  # reference code: distance-weighted base
        switched = eligible = 0
        partners = {i: [] for i in range(len(y))}
        for _ in range(800):
            a, p, n = m.mine(X, y)
            s = a == p
            assert sorted(a) == [0, 1, 2, 3, 4, 6, 7, 8, 9]  # one triplet per eligible sample
            assert (n[s] != a[s]).all() and (y[n[s]] == y[a[s]]).all()
            assert (y[a[~s]] == y[p[~s]]).all() and (y[n[~s]] != y[a[~s]]).all() and (p[~s] != a[~s]).all()
            assert m.last_stats == (9, int(s.sum()))
            switched += int(s.sum())
            eligible += 9
            for i, j in zip(a[s], n[s]):
                partners[int(i)].append(int(j))
        assert eligible == 7200
        assert binomtest(switched, eligible, p_switch).pvalue > 0.01, (p_switch, switched)
        # j uniform over the other members of i's class (anchor 6, class 3: partners 7, 8, 9)
        if p_switch == 0.3:
            counts = np.bincount(partners[6], minlength=10)[[7, 8, 9]]
            assert counts.sum() == len(partners[6]) > 100
            assert chisquare(counts).pvalue > 0.01


# ---------------------------------------------------------------- distance-weighted mining


def reference_negative_probabilities(X, y, cutoff=0.5):
    """q(d)^-1 ∝ exp((2 − D) ln d − ((D − 3)/2) ln(1 − d²/4)), d >= cutoff, over other-class samples,
    in plain Python float64 (max-subtracted before exp)."""
    B, D = X.shape
    P = np.zeros((B, B))
    for i in range(B):
        logs = {}
        for j in range(B):
            if y[j] == y[i]:
                continue
            d = max(dist(X, i, j), cutoff)
            logs[j] = (2 - D) * math.log(d) - ((D - 3) / 2) * math.log(1 - d * d / 4)
        top = max(logs.values())
        w = {j: math.exp(v - top) for j, v in logs.items()}
        s = math.fsum(w.values())
        for j, v in w.items():
            P[i, j] = v / s
    return P


@pytest.mark.parametrize("dim", [2, 3, 128, 512])
def test_distance_weighted_probabilities_match_the_formula(dim):
    X = sphere(10, dim, dim)
    X[1] = X[0] + 0.01 * X[2]  # a pair closer than the 0.5 cutoff (clamped)
    X[1] /= np.linalg.norm(X[1])
    y = np.array([0, 1, 1, 2, 2, 3, 3, 0, 4, 4])
    P = DistanceWeightedMiner().negative_probabilities(X, y)
    R = reference_negative_probabilities(X, y)
    assert np.isfinite(P).all()
    np.testing.assert_allclose(P, R, rtol=1e-9, atol=1e-300)
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=1e-12)
    assert ((P > 0) == (y[:, None] != y[None, :])).all()  # no all-zero row, no same-class mass


def test_distance_weighted_near_antipodal_points():
    """q(d)^-1 -> inf as d -> 2 for D > 3: an antipodal negative takes (almost) all the mass, without
    NaN (the reference code's log(1 − d²/4) = log 0 gives NaN there); D = 3: ∝ 1/d; D = 2: ∝ sqrt(1 − d²/4)."""
    base = np.array([[1, 0, 0], [0.6, 0.8, 0], [-1, 0, 0], [0, 1, 0]], dtype=np.float32)
    y = np.array([0, 0, 1, 2])
    for dim in (3, 128, 512):
        X = np.zeros((4, dim), dtype=np.float32)
        X[:, :3] = base
        P = DistanceWeightedMiner().negative_probabilities(X, y)[0]
        assert np.isfinite(P).all() and P.sum() == pytest.approx(1.0)
        if dim == 3:  # (2 − 3) ln d: weights 1/2 and 1/sqrt(2)
            assert P[2] == pytest.approx(0.5 / (0.5 + 2 ** -0.5), rel=1e-12)
        else:
            assert P[2] > 1 - 1e-12
    P2 = DistanceWeightedMiner().negative_probabilities(base[:, :2] / np.linalg.norm(base[:, :2], axis=1)[:, None], y)
    assert np.isfinite(P2).all() and P2[0, 2] < 1e-3  # D = 2: sqrt(1 − d²/4) -> 0 at d = 2 (clamped to 1e-4)


def test_distance_miner_positive_uniform_negative_by_weight():
    from scipy.stats import chisquare

    y = np.array([0, 0, 0, 0, 1, 1, 2, 2])
    X = sphere(8, 4, 7)
    miner = DistanceWeightedMiner(seed=0)
    probs = reference_negative_probabilities(X, y)[0]
    pos, neg = [], []
    for _ in range(3000):
        a, p, n = miner.mine(X, y)
        assert list(a) == list(range(8))
        pos.append(p[0])
        neg.append(n[0])
    assert chisquare(np.bincount(pos, minlength=4)[1:4]).pvalue > 0.01
    obs = np.bincount(neg, minlength=8)[4:]
    assert chisquare(obs, probs[4:] * len(neg)).pvalue > 0.01


# ---------------------------------------------------------------- semihard, softhard, random


def _pos_neg(y, i):
    pos = [j for j in range(len(y)) if y[j] == y[i] and j != i]
    neg = [j for j in range(len(y)) if y[j] != y[i]]
    return pos, neg


def test_semihard_softhard_random_follow_their_definitions():
    rng = np.random.default_rng(5)
    seen_semi = seen_fallback = 0
    for trial in range(40):
        y = rng.integers(0, 4, 14)
        X = sphere(14, 3, 100 + trial)
        for miner in (SemihardMiner(seed=trial), SofthardMiner(seed=trial), RandomMiner(seed=trial)):
            a, p, n = miner.mine(X, y)
            expect = [i for i in range(len(y)) if all(_pos_neg(y, i))]
            assert list(a) == expect
            for i, pi, ni in zip(a, p, n):
                pos, neg = _pos_neg(y, i)
                assert pi in pos and ni in neg
                d = {j: dist(X, i, j) for j in pos + neg}
                if isinstance(miner, SemihardMiner):  # d_ap < d_an < d_ap + 0.2, else any negative
                    semi = [j for j in neg if d[pi] < d[j] < d[pi] + 0.2]
                    if semi:
                        assert ni in semi
                        seen_semi += 1
                    else:
                        seen_fallback += 1
                elif isinstance(miner, SofthardMiner):
                    hard_pos = [j for j in pos if d[j] > min(d[k] for k in neg)]
                    hard_neg = [j for j in neg if d[j] < max(d[k] for k in pos)]
                    assert pi in (hard_pos or pos) and ni in (hard_neg or neg)
    assert seen_semi > 20 and seen_fallback > 20  # both branches exercised


# ---------------------------------------------------------------- samplers


def test_spc_n_classes_duplicates_and_coverage():
    labels = np.repeat(np.arange(10), [5, 5, 5, 5, 5, 5, 5, 1, 2, 3])
    for n in (2, 4):
        s = build_sampler(f"spc-{n}", labels, 8, seed=0)
        assert len(s) == len(labels) // 8
        seen = set()
        for _ in range(100):
            for b in s:
                b = np.array(b)
                cls, counts = np.unique(labels[b], return_counts=True)
                assert len(b) == 8 and len(cls) == 8 // n and (counts == n).all()
                for c in cls:
                    idx = b[labels[b] == c]
                    if (labels == c).sum() >= n:
                        assert len(set(idx)) == n  # distinct images where the class has n
                    else:  # a smaller class: every image of it, then repeats
                        assert set(idx) == set(np.flatnonzero(labels == c))
                seen |= set(b.tolist())
        assert seen == set(range(len(labels)))


def test_spc_r_batches():
    labels = np.repeat(np.arange(12), [1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6])
    s = build_sampler("spc-r", labels, 10, seed=0)
    for _ in range(300):
        b = np.array(s.next_batch())
        assert len(b) == 10 and len(set(b[:-1].tolist())) == 9
        assert (labels[b[:-1]] == labels[b[-1]]).any()
        assert b[-1] not in b[:-1]  # a free image of the class exists in every draw here


def test_greedy_coreset_is_greedy_k_center_and_within_twice_the_optimum():
    rng = np.random.default_rng(0)
    for trial in range(4):
        pts = rng.normal(size=(9, 2))
        labels = np.repeat(np.arange(9), 2)  # each point twice: a class of 2, n = 2
        X = np.repeat(pts, 2, axis=0)
        s = build_sampler("gc", labels, 6, seed=trial, bigb=10**6, n=2)  # B* = all 18 rows
        s.init_bank(torch.tensor(X, dtype=torch.float64))
        b = s.next_batch()
        picks = b[::2]
        assert (labels[b[1::2]] == labels[picks]).all()  # padding: the pick's class
        d = np.linalg.norm(X[:, None] - X[None], axis=2)
        for t in range(1, 3):  # every later pick maximises the distance to the picks before it
            md = d[:, picks[:t]].min(1)
            assert md[picks[t]] == pytest.approx(md.max(), abs=1e-12)
        obj = d[:, picks].min(1).max()
        opt = min(d[:, list(S)].min(1).max() for S in itertools.combinations(range(18), 3))
        assert opt <= obj <= 2 * opt + 1e-12


def _frechet_mpmath(A, B):
    """‖μ₁ − μ₂‖² + Tr Σ₁ + Tr Σ₂ − 2 Σ sqrt(eig(Σ₁Σ₂)) in 60-digit arithmetic."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 60

    def cov(M):
        M = mp.matrix(M.tolist())
        n, D = M.rows, M.cols
        mu = [mp.fsum(M[i, k] for i in range(n)) / n for k in range(D)]
        C = mp.matrix(D, D)
        for p in range(D):
            for q in range(D):
                C[p, q] = mp.fsum((M[i, p] - mu[p]) * (M[i, q] - mu[q]) for i in range(n)) / (n - 1)
        return mu, C

    m1, S1 = cov(A)
    m2, S2 = cov(B)
    ev = mp.eig(S1 * S2, left=False, right=False)
    tr = mp.fsum(mp.sqrt(max(mp.re(e), 0)) for e in ev)
    D = len(m1)
    val = mp.fsum((m1[k] - m2[k]) ** 2 for k in range(D)) + mp.fsum(S1[k, k] + S2[k, k] for k in range(D)) - 2 * tr
    return float(val)


def test_frechet_distance_exact_also_for_singular_covariances():
    """b < D (batch 112 in D = 128): Σ_B is singular. The eigh-based square root was off by ~√ε:
    FRD of a 12-row set with itself in D = 128 was −1.1e-7; now 0 to rounding. Checked against a
    60-digit mpmath computation and scipy.linalg.sqrtm."""
    from scipy import linalg

    rng = np.random.default_rng(0)
    A = rng.normal(size=(12, 128))
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    assert abs(frechet_distance(A, A)) < 1e-13
    assert abs(frechet_distance(A, A[::-1])) < 1e-13
    for n1, n2, D in [(5, 7, 12), (6, 30, 4)]:
        P, Q = rng.normal(size=(n1, D)), rng.normal(size=(n2, D)) + 0.2
        ref = _frechet_mpmath(P, Q)
        assert frechet_distance(P, Q) == pytest.approx(ref, rel=1e-12, abs=1e-13)
    P, Q = rng.normal(size=(40, 5)), rng.normal(size=(60, 5)) + 0.3
    S1, S2 = np.cov(P, rowvar=False), np.cov(Q, rowvar=False)
    ref = ((P.mean(0) - Q.mean(0)) ** 2).sum() + np.trace(S1 + S2 - 2 * linalg.sqrtm(S1 @ S2).real)
    assert frechet_distance(P, Q) == pytest.approx(ref, rel=1e-10)


def test_ddm_histogram_and_wasserstein():
    """50 bins over [0, max pairwise distance of B*], normalised; W1 = Σ|CDF₁ − CDF₂| · width equals
    scipy's wasserstein_distance on the bin centres."""
    from scipy.spatial.distance import pdist
    from scipy.stats import wasserstein_distance

    X, Y = sphere(30, 8, 1).astype(np.float64), sphere(12, 8, 2).astype(np.float64)
    upper = pdist(X).max()
    hx, hy = distance_histogram(X, 50, upper), distance_histogram(Y, 50, upper)
    ref, _ = np.histogram(pdist(X), 50, (0, upper))
    np.testing.assert_allclose(hx, ref / ref.sum(), rtol=0, atol=1e-15)
    centres = (np.arange(50) + 0.5) * upper / 50
    assert histogram_wasserstein(hx, hy, upper / 50) == pytest.approx(
        wasserstein_distance(centres, centres, hx, hy), rel=1e-10)


# ---------------------------------------------------------------- losses


def test_loss_objects_hold_the_appendix_a1_hyper_parameters():
    from pytorch_metric_learning import distances, regularizers

    C, D = 5, 8
    m = build_loss("margin", C, D)
    assert m.loss.margin == 0.2 and m.loss.nu == 0 and m.loss.learn_beta
    assert isinstance(m.loss.beta, torch.nn.Parameter) and m.loss.beta.shape == (C,)
    assert torch.allclose(m.loss.beta.detach(), torch.full((C,), 1.2))
    assert torch.allclose(build_loss("margin", C, D, beta=0.6).loss.beta.detach(), torch.full((C,), 0.6))
    (g,) = m.param_groups(1e-5)
    assert g["lr"] == 5e-4 and g["params"][0] is m.loss.beta
    assert isinstance(m.loss.distance, distances.LpDistance) and m.loss.distance.p == 2
    assert m.loss.distance.power == 1 and m.loss.distance.normalize_embeddings

    t = build_loss("triplet", C, D).loss
    assert t.margin == 0.2 and t.distance.power == 2 and t.distance.normalize_embeddings
    c = build_loss("contrastive", C, D).loss
    assert (c.pos_margin, c.neg_margin, c.distance.power) == (0.0, 1.0, 1)
    ms = build_loss("multisimilarity", C, D)
    assert (ms.loss.alpha, ms.loss.beta, ms.loss.base, ms.own_miner.epsilon) == (2.0, 40.0, 0.5, 0.1)
    assert isinstance(ms.loss.distance, distances.CosineSimilarity)
    px = build_loss("proxynca", C, D).loss  # exp(−9‖x − p‖²) = exp(−‖3x − 3p‖²) on the unit sphere
    assert px.softmax_scale == 9.0 and px.distance.power == 2 and px.distance.normalize_embeddings
    assert px.proxies.shape == (C, D)
    arc = build_loss("arcface", C, D).loss
    assert arc.margin == pytest.approx(0.5, abs=1e-12) and arc.scale == 16
    assert build_loss("softmax", C, D).loss.temperature == 0.05
    st = build_loss("softtriple", C, D).loss
    assert (st.la, st.margin, st.centers_per_class, st.weight_reg_weight) == (8.0, 0.01, 2, 0.2)
    assert st.gamma == pytest.approx(1 / 0.1)  # PML stores 1/γ
    assert isinstance(st.weight_regularizer, regularizers.SparseCentersRegularizer)
    snr = build_loss("snr", C, D).loss
    assert snr.margin == 0.2 and isinstance(snr.distance, distances.SNRDistance)
    assert isinstance(snr.embedding_regularizer, regularizers.ZeroMeanRegularizer)
    assert snr.embedding_reg_weight == 0.005
    for name in ("npair", "lifted"):
        lo = build_loss(name, C, D).loss
        assert isinstance(lo.embedding_regularizer, regularizers.LpRegularizer)
        assert lo.embedding_reg_weight == 0.005 and not lo.distance.normalize_embeddings


def _fixed_batch():
    torch.manual_seed(0)
    X = torch.nn.functional.normalize(torch.randn(12, 8, dtype=torch.float64), dim=1).float()
    y = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 4])
    a, p, n = build_miner("distance", p_switch=0.3, seed=2)(X, y)
    assert 0 < int((a == p).sum()) < len(a)  # switched (i, i, j) triplets among them
    Xd = X.double().numpy()
    dap = np.linalg.norm(Xd[a.numpy()] - Xd[p.numpy()], axis=1)
    dan = np.linalg.norm(Xd[a.numpy()] - Xd[n.numpy()], axis=1)
    return X, y, (a, p, n), dap, dan


def test_contrastive_and_triplet_values_are_the_reference_codes_means():
    """Roth's criteria/contrastive.py: mean relu(d_ap) + mean relu(1 − d_an); criteria/triplet.py:
    mean relu(d_ap² − d_an² + 0.2), means over every mined triplet. Before, PML's default
    AvgNonZeroReducer averaged over the non-zero terms only: 1.6149 and 2.1030 on this batch
    instead of 0.7237 and 0.5736."""
    X, y, tup, dap, dan = _fixed_batch()
    pos, neg = np.maximum(dap, 0), np.maximum(1 - dan, 0)
    assert float(build_loss("contrastive", 5, 8)(X, y, tup)) == pytest.approx(pos.mean() + neg.mean(), rel=1e-6)
    nz = pos[pos > 0].mean() + neg[neg > 0].mean()
    assert float(build_loss("contrastive", 5, 8, avg_nonzero=True)(X, y, tup)) == pytest.approx(nz, rel=1e-6)
    t = np.maximum(dap**2 - dan**2 + 0.2, 0)
    assert float(build_loss("triplet", 5, 8)(X, y, tup)) == pytest.approx(t.mean(), rel=1e-6)
    assert float(build_loss("triplet", 5, 8, avg_nonzero="true")(X, y, tup)) == pytest.approx(t[t > 0].mean(), rel=1e-6)
    t1 = np.maximum(dap - dan + 0.2, 0)
    assert float(build_loss("triplet", 5, 8, squared=False)(X, y, tup)) == pytest.approx(t1.mean(), rel=1e-6)


def test_margin_loss_value_is_wu_et_al_with_per_class_beta():
    """Σ relu(d_ap − β_c + 0.2) + relu(β_c − d_an + 0.2) / #non-zero terms, β_c of the anchor's class
    (Roth's criteria/margin.py)."""
    X, y, tup, dap, dan = _fixed_batch()
    L = build_loss("margin", 5, 8)
    with torch.no_grad():
        L.loss.beta.copy_(torch.tensor([1.2, 1.0, 0.9, 1.3, 1.1]))
    beta = L.loss.beta.detach().double().numpy()[y.numpy()[tup[0].numpy()]]
    pl, nl = np.maximum(dap - beta + 0.2, 0), np.maximum(beta - dan + 0.2, 0)
    ref = (pl + nl).sum() / ((pl > 0).sum() + (nl > 0).sum())
    val = L(X, y, tup)
    assert float(val.detach()) == pytest.approx(ref, rel=1e-6)
    val.backward()
    assert L.loss.beta.grad is not None and L.loss.beta.grad.abs().sum() > 0


def test_multisimilarity_value_is_the_ms_papers_mean_over_the_batch():
    """Wang et al.: 1/m Σ_i [1/α log(1 + Σ_{P_i} e^{−α(S−λ)}) + 1/β log(1 + Σ_{N_i} e^{β(S−λ)})], with
    pairs mined by ε = 0.1 (negatives S_an + ε > min S_ap, positives S_ap − ε < max S_an), mean over
    all m rows. (Roth's criteria/multisimilarity.py instead averages over the anchors that keep both a
    positive and a negative: 0.9284 on this batch against 0.7737; see the report.)"""
    X, y, _, _, _ = _fixed_batch()
    Xd, yy = X.double().numpy(), y.numpy()
    S = Xd @ Xd.T
    rows = []
    for i in range(len(yy)):
        pm, nm = (yy == yy[i]) & (np.arange(len(yy)) != i), yy != yy[i]
        ps, ns = S[i][pm], S[i][nm]
        if not len(ps):
            rows.append(0.0)
            continue
        kp, kn = ps[ps - 0.1 < ns.max()], ns[ns + 0.1 > ps.min()]
        pt = 0.5 * math.log1p(np.exp(-2 * (kp - 0.5)).sum()) if len(kp) else 0.0
        nt = math.log1p(np.exp(40 * (kn - 0.5)).sum()) / 40 if len(kn) else 0.0
        rows.append(pt + nt)
    assert float(build_loss("multisimilarity", 5, 8)(X, y)) == pytest.approx(np.mean(rows), rel=1e-6)


# ---------------------------------------------------------------- the toy example


def test_toy_data_coordinates_network_and_defaults():
    import inspect

    from embedscope.cli import build_parser
    from embedscope.train.toy import toy_data, toy_network, train_toy

    d = toy_data(1)
    rng = np.random.default_rng(1)  # the same draws, written out from §5
    lines = [((0.1, 0.3), None), ((0.35, 0.55), None), ((0.6, 0.8), None), ((0.85, 1.05), None)]
    for k, ((lo, hi), _) in enumerate(lines):
        t = np.sort(rng.choice(np.linspace(lo, hi, 100), 15, replace=False))
        np.testing.assert_array_equal(d["Xtr"][15 * k:15 * (k + 1)], np.stack([t, t], 1).astype(np.float32))
    for k, (lo, hi, fixed) in enumerate([(0.2, 0.4, "x"), (0.55, 0.85, "x"), (0.4, 0.6, "y"), (0.7, 0.9, "y")]):
        t = np.sort(rng.choice(np.linspace(lo, hi, 100), 15, replace=False))
        c = np.full(15, 0.2)
        ref = np.stack([c, t], 1) if fixed == "x" else np.stack([t, c], 1)
        np.testing.assert_array_equal(d["Xte"][15 * k:15 * (k + 1)], ref.astype(np.float32))
    assert d["ytr"].tolist() == d["yte"].tolist() == np.repeat(np.arange(4), 15).tolist()
    net = toy_network()
    lin = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in lin] == [(2, 30), (30, 30), (30, 2)]
    assert sum(isinstance(m, torch.nn.ReLU) for m in net.modules()) == 2
    out = net(torch.randn(5, 2) * 3)
    assert torch.allclose(out.norm(dim=1), torch.ones(5))
    kw = inspect.signature(train_toy).parameters
    assert (kw["lr"].default, kw["iterations"].default, kw["batch_size"].default, kw["p_switch"].default,
            kw["seed"].default) == (0.03, 200, 24, 0.001, 1)
    args = build_parser().parse_args(["toy", "-o", "x"])
    assert (args.p_switch, args.first_seed) == (0.001, 1)


@pytest.mark.parametrize("variant", ["baseline", "paper", "code"])
def test_toy_loss_over_all_triplets_with_and_without_attraction(variant):
    """The first iterations' loss recomputed with explicit loops over every valid triplet of the batch:
    mean ‖a − p‖ + mean relu(0.1 − ‖a − n‖) (baseline, paper) / the repulsive term alone (code);
    p_switch 0.5 so that switched triplets (n := p) occur."""
    from embedscope.train.toy import toy_data, toy_network, train_toy

    p_sw = 0.0 if variant == "baseline" else 0.5
    res = train_toy(variant, 3, p_switch=0.5, iterations=2)
    data = toy_data(3)
    torch.manual_seed(3)
    net = toy_network()
    opt = torch.optim.Adam(net.parameters(), lr=0.03)
    g = torch.Generator().manual_seed(3)
    for it in range(2):
        idx = torch.randperm(60, generator=g)[:24]
        yb = data["ytr"][idx.numpy()]
        z = net(torch.from_numpy(data["Xtr"])[idx])
        trip = [(a, p, n) for a in range(24) for p in range(24) for n in range(24)
                if a != p and yb[a] == yb[p] and yb[n] != yb[a]]
        u = torch.rand(len(trip), generator=g)
        attract, repel = [], []
        for (a, p, n), ui in zip(trip, u):
            n_used = p if ui < p_sw else n
            attract.append((z[a] - z[p]).norm())
            repel.append(torch.relu(0.1 - (z[a] - z[n_used]).norm()))
        loss = torch.stack(repel).mean()
        if variant != "code":
            loss = loss + torch.stack(attract).mean()
        assert res["losses"][it] == pytest.approx(float(loss.detach()), rel=1e-5, abs=1e-7)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_resume_of_a_run_saved_before_the_reduction_was_recorded_keeps_pml_reduction(tmp_path, monkeypatch):
    """New triplet/contrastive runs record avg_nonzero (False: Roth's mean over all mined tuples); a run
    saved without it was trained with PML's default (the mean over non-zero terms) and resumes with it."""
    import torch

    from embedscope.train import losses as L
    from embedscope.train import trainer

    out = tmp_path / "c.pt"
    cfg = {"dataset": "digits", "loss": "contrastive", "embed_dim": 8, "epochs": 1, "eval_every": 0, "device": "cpu"}
    res = trainer.train(cfg, out, progress=False, echo=lambda s: None)
    assert res["config"]["loss_params"] == {"avg_nonzero": False}
    last = out.with_name(out.name + ".train") / "last.pt"
    state = torch.load(last, weights_only=True)
    state["config"]["loss_params"] = {}  # as saved before this change
    torch.save(state, last)
    seen, said = [], []
    real = L.build_loss

    def spy(name, *a, **k):
        seen.append(k)
        return real(name, *a, **k)

    monkeypatch.setattr(L, "build_loss", spy)
    monkeypatch.setattr(trainer, "build_loss", spy, raising=False)
    res = trainer.train({**cfg, "epochs": 2}, out, resume=True, progress=False, echo=said.append)
    assert seen and seen[-1].get("avg_nonzero") is True, seen
    assert any("avg_nonzero=true" in s for s in said), said
    assert res["config"]["loss_params"] == {"avg_nonzero": True}
