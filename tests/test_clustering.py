"""k-means NMI / F1 (METHODS.md §1) against sklearn, a brute-force pair count and Musgrave's check."""

import itertools
import math

import numpy as np
import pytest
from sklearn.metrics import normalized_mutual_info_score

from embedscope.errors import EmbedscopeError
from embedscope.metrics import kmeans_nmi_f1
from embedscope.metrics.clustering import nmi, pairwise_f1


@pytest.mark.parametrize("seed", range(4))
def test_nmi_matches_sklearn(seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 7, 300)
    b = np.where(rng.random(300) < 0.6, a, rng.integers(0, 9, 300))
    assert nmi(a, b) == pytest.approx(normalized_mutual_info_score(a, b, average_method="arithmetic"), abs=1e-12)
    assert nmi(a, a) == pytest.approx(1.0)


def test_musgrave_nmi_check():
    # 10,000 classes of 4, each cluster holds 4 samples of different classes: NMI = 1 - log 4 / log 10000
    C, S = 10_000, 4
    y = np.repeat(np.arange(C), S)
    clusters = (np.arange(C * S) % S) * (C // S) + (np.arange(C * S) // (S * S))
    cnt = np.bincount(clusters)
    assert (cnt == S).all()
    assert all(len(set(y[clusters == c])) == S for c in range(5))
    assert nmi(y, clusters) == pytest.approx(1 - math.log(S) / math.log(C), abs=1e-12)
    assert round(nmi(y, clusters), 3) == 0.849


@pytest.mark.parametrize("seed", range(3))
def test_pairwise_f1_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 5, 60)
    c = rng.integers(0, 6, 60)
    tp = same_cl = same_y = 0
    for i, j in itertools.combinations(range(60), 2):
        same_y += y[i] == y[j]
        same_cl += c[i] == c[j]
        tp += (y[i] == y[j]) and (c[i] == c[j])
    p, r = tp / same_cl, tp / same_y
    got = pairwise_f1(y, c)
    assert got["precision"] == pytest.approx(p, abs=1e-12)
    assert got["recall"] == pytest.approx(r, abs=1e-12)
    assert got["F1"] == pytest.approx(2 * p * r / (p + r), abs=1e-12)


def test_kmeans_separated_blobs_and_determinism():
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((6, 10)) * 20
    y = np.repeat(np.arange(6), 15)
    X = centers[y] + 0.01 * rng.standard_normal((90, 10))
    out = kmeans_nmi_f1(X, y, metric="euclidean", seed=1, return_labels=True)
    lab = out["labels"]
    # Lloyd's fixed point: every row is nearest to the mean of its own cluster
    cent = np.stack([X[lab == c].mean(0) for c in range(6)])
    d = ((X[:, None, :] - cent[None]) ** 2).sum(-1)
    assert (d.argmin(1) == lab).all()
    # a random start can split one blob and merge two (k-means, not a bug), but never mixes a blob
    for c in range(6):
        assert len(set(y[lab == c])) == 1 or len(set(lab[np.isin(y, y[lab == c])])) == 1
    assert out["NMI"] > 0.6
    assert out["n_clusters"] == 6 and out["niter"] == 20
    Z = rng.standard_normal((200, 8))
    yz = rng.integers(0, 20, 200)
    a = kmeans_nmi_f1(Z, yz, seed=3, return_labels=True)
    b = kmeans_nmi_f1(Z, yz, seed=3, return_labels=True)
    assert (a["labels"] == b["labels"]).all() and a["NMI"] == b["NMI"]
    assert a["NMI"] == pytest.approx(normalized_mutual_info_score(yz, a["labels"]), abs=1e-12)
    assert 0 < a["F1"] < 1


@pytest.mark.parametrize("kw,msg", [
    (dict(X=np.ones((4, 2)), y=[0, 0, 0, 0]), "at least 2 classes"),
    (dict(X=np.ones((4, 2)), y=[0, 1]), "4 entries"),
    (dict(X=np.ones((4, 2)), y=[0, 1, 0, 1], n_clusters=9), "exceeds"),
    (dict(X=np.ones((4, 2)), y=[0, 1, 0, 1], niter=0), "niter"),
])
def test_validation(kw, msg):
    with pytest.raises(EmbedscopeError, match=msg):
        kmeans_nmi_f1(**kw)
