"""k-means NMI / F1 (docs/methods.md §1) against sklearn, a brute-force pair count and Musgrave's check."""

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


# --- k-means engines: faiss parity, exactness of the accelerated Lloyd, Roth's cosine assignment ---

def _sop_like(n_classes, dim, seed=0, noise=1.2):
    rng = np.random.default_rng(seed)
    sizes = 2 + rng.binomial(10, 0.335, n_classes)
    y = np.repeat(np.arange(n_classes), sizes)
    X = rng.standard_normal((n_classes, dim)).astype(np.float32)[y]
    X += noise * rng.standard_normal((y.size, dim)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, y


def _faiss_clustering(x, k, **kw):
    faiss = pytest.importorskip("faiss")
    cl = faiss.Clustering(x.shape[1], k)
    cl.max_points_per_centroid = 1 << 30
    cl.min_points_per_centroid = 1
    for a, v in kw.items():
        setattr(cl, a, v)
    cl.train(x, faiss.IndexFlatL2(x.shape[1]))
    return faiss.vector_float_to_array(cl.centroids).reshape(k, x.shape[1])


@pytest.mark.parametrize("n,k,seed", [(50, 7, 1234), (1000, 300, 1234), (333, 332, 0), (5000, 10, 77)])
def test_faiss_random_init_reproduced(n, k, seed):
    from embedscope.metrics.kmeans import faiss_random_init

    x = np.random.default_rng(n).standard_normal((n, 5)).astype(np.float32)
    C0 = _faiss_clustering(x, k, niter=0, seed=seed)
    assert np.array_equal(C0, x[faiss_random_init(n, k, seed)])


@pytest.mark.parametrize("n, d, k, far", [(600, 6, 40, [3, 17, 31]), (900, 16, 5, [1]), (300, 3, 4, [])])
def test_update_and_split_bit_equal_to_faiss(n, d, k, far):
    """faiss's centroid update and its split of empty clusters (mt19937 seeded 1234), bit for bit:
    many small clusters (summed a row position at a time) and a few large ones (one running sum
    per cluster), a row of zeros and −0.0 among the points."""
    faiss = pytest.importorskip("faiss")
    from embedscope.metrics.kmeans import exact_assign, update_centroids

    rng = np.random.default_rng(5)
    x = rng.standard_normal((n, d)).astype(np.float32)
    x[n - 1] = -0.0
    x[n - 2, 0] = -0.0
    init = x[:k].copy()
    init[far] = 1e3  # far away: empty after the first assignment
    km = faiss.Kmeans(d, k, niter=1, max_points_per_centroid=1 << 30)
    km.train(x, init_centroids=init)
    assert km.iteration_stats[0]["nsplit"] == len(far)
    C, nsplit = update_centroids(x, exact_assign(x, init), k)
    assert nsplit == len(far)
    assert np.array_equal(C, km.centroids)
    assert np.array_equal(np.signbit(C), np.signbit(km.centroids))


def test_many_splits_bit_equal_to_faiss():
    """A collapsed model empties most clusters: hundreds of splits in one update, each drawing until
    a cluster's p is hit; the draws cycle through the clusters several times (p of a few points is
    small) and carry over from one empty cluster to the next (the draws ahead are kept, not
    redrawn), bit for bit as faiss."""
    faiss = pytest.importorskip("faiss")
    from embedscope.metrics.kmeans import exact_assign, update_centroids

    rng = np.random.default_rng(6)
    n, d, k = 2000, 4, 300
    x = rng.standard_normal((n, d)).astype(np.float32)
    init = np.concatenate([x[:3], 1e3 + np.arange(k - 3, dtype=np.float32)[:, None] * np.ones(d, np.float32)])
    km = faiss.Kmeans(d, k, niter=1, max_points_per_centroid=1 << 30)
    km.train(x, init_centroids=init)
    assert km.iteration_stats[0]["nsplit"] == k - 3
    C, nsplit = update_centroids(x, exact_assign(x, init), k)
    assert nsplit == k - 3
    assert np.array_equal(C, km.centroids)


def test_default_seed_equals_pml_and_faiss_kmeans():
    """Seed 1234, 20 iterations, Euclidean: both engines give PML's FaissKMeans labels (faiss.Kmeans
    + index.search, as Roth's code), and so PML's NMI."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("pytorch_metric_learning")
    from pytorch_metric_learning.utils.inference import FaissKMeans

    from embedscope.metrics.clustering import kmeans_labels

    X, y = _sop_like(400, 24, seed=3)
    k = 400
    pml = FaissKMeans(niter=20)(torch.from_numpy(X), k).numpy()
    faiss_lab = kmeans_labels(X, k, metric="euclidean", method="faiss")
    exact_lab, info = kmeans_labels(X, k, metric="euclidean", return_info=True)
    assert np.array_equal(faiss_lab, pml)
    assert np.array_equal(exact_lab, pml)
    assert info["method"] == "exact" and info["n_steps"] <= 21
    out = kmeans_nmi_f1(X, y, metric="euclidean")
    assert out["seed"] == 1234 and out["method"] == "exact"
    assert out["NMI"] == pytest.approx(normalized_mutual_info_score(y, pml), abs=1e-12)


def _plain_lloyd(x, k, niter, seed):
    """Plain Lloyd written from the definition: faiss's init and update, float64 distances
    Σ (x − c)² to every centroid, ties to the lower index, early stop at a fixed point."""
    from embedscope.metrics.kmeans import faiss_random_init, update_centroids

    x64 = x.astype(np.float64)
    C = x[faiss_random_init(len(x), k, seed)].copy()

    def assign(C):
        d = ((x64[:, None, :] - C.astype(np.float64)[None]) ** 2).sum(-1)
        return d.argmin(1)

    prev = None
    for _ in range(niter):
        a = assign(C)
        if prev is not None and np.array_equal(a, prev):
            return a
        C, _ = update_centroids(x, a, k)
        prev = a
    return assign(C)


@pytest.mark.parametrize("moved_frac", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("case", ["sop", "grid_ties", "blobs", "collapsed", "nearly_collapsed"])
def test_accelerated_lloyd_equals_plain_lloyd(case, moved_frac, monkeypatch):
    """Bounds from group drift only (moved_frac 0), from the moved centroids' exact distances
    whenever possible (1), and the default mix all give plain Lloyd's labels."""
    from embedscope.metrics import kmeans as km
    from embedscope.metrics.kmeans import lloyd_kmeans

    monkeypatch.setattr(km, "_MOVED_FRAC", moved_frac)

    rng = np.random.default_rng(11)
    if case == "sop":
        x, _ = _sop_like(150, 12, seed=1)
        k = 150
    elif case == "grid_ties":  # small integers: many exact ties and duplicate rows
        x = rng.integers(0, 4, (400, 3)).astype(np.float32)
        k = 25
    elif case == "blobs":
        x = (rng.standard_normal((8, 5)) * 5)[rng.integers(0, 8, 500)] + rng.standard_normal((500, 5))
        x = x.astype(np.float32)
        k = 30
    else:  # a collapsed model: every row on one point (most clusters emptied and split at every step),
        # or within 1e-6 of it (every float32 distance within the error bound: the float64 window)
        p = rng.standard_normal(6)
        x = np.tile(p, (500, 1)).astype(np.float32)
        if case == "nearly_collapsed":
            x = (x + 1e-6 * rng.standard_normal(x.shape)).astype(np.float32)
            x[:40] = x[40]  # and some identical rows
        k = 60
    ref = _plain_lloyd(x, k, 20, 1234)
    for gs in (2, 5, 64):
        r = lloyd_kmeans(x, k, niter=20, seed=1234, bounds=True, group_size=gs)
        assert np.array_equal(r["labels"], ref), gs
    r0 = lloyd_kmeans(x, k, niter=20, seed=1234, bounds=False)
    assert np.array_equal(r0["labels"], ref)
    # the bounds skipped work: after the first step some (point, group) pairs went uncomputed
    # (not where every distance ties within the float32 bound: nothing can be skipped there)
    r = lloyd_kmeans(x, k, niter=20, seed=1234, bounds=True, group_size=5)
    G = max(1, round(k / 5))
    assert any(p < len(x) * G for _, p, _ in r["stats"][1:]) or r["n_steps"] == 1 or case == "nearly_collapsed"
    if moved_frac == 0.0:
        assert r["moved"] == []
    elif moved_frac == 1.0:
        assert len(r["moved"]) == r["n_steps"] - 1  # every step after the first


def test_roth_cosine_assignment():
    """Roth's c_nmi: Euclidean k-means centroids, L2-normalised; normalised rows by inner product."""
    faiss = pytest.importorskip("faiss")
    from embedscope.metrics.clustering import _faiss_kmeans, kmeans_labels

    rng = np.random.default_rng(4)
    X = (rng.standard_normal((300, 8)) * rng.uniform(0.5, 3, (300, 1))).astype(np.float32)
    lab = kmeans_labels(X, 20, metric="euclidean", method="faiss", assign="roth_cosine")
    _, C = _faiss_kmeans(X, 20, 1234, 20)
    Cn = C / np.linalg.norm(C, axis=1, keepdims=True)
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    idx = faiss.IndexFlatIP(8)
    idx.add(Cn.astype(np.float32))
    _, ref = idx.search(Xn.astype(np.float32), 1)
    assert (lab == ref.ravel()).mean() >= 0.99  # faiss float32 may flip a near-tie
    brute = (Xn.astype(np.float64) @ Cn.astype(np.float64).T).argmax(1)
    assert np.array_equal(lab, brute)
    out = kmeans_nmi_f1(X, rng.integers(0, 20, 300), metric="euclidean", assign="roth_cosine")
    assert out["assign"] == "roth_cosine" and 0 <= out["NMI"] <= 1


@pytest.mark.parametrize("kw,msg", [
    (dict(seed=-1), "seed"),
    (dict(method="sklearn"), "method"),
    (dict(assign="cos"), "assign"),
])
def test_kmeans_option_validation(kw, msg):
    with pytest.raises(EmbedscopeError, match=msg):
        kmeans_nmi_f1(np.random.default_rng(0).standard_normal((20, 3)), [0, 1] * 10, **kw)


def test_prepared_rows_are_used_as_given_and_retrieval_normalises_once(monkeypatch):
    """``prepared=True``: the rows are taken as they are (not normalised again), so cosine on
    unnormalised rows equals Euclidean k-means of the same rows; retrieval_metrics hands k-means the
    rows its ranks used, normalised once, and gets kmeans_nmi_f1's values of the raw rows."""
    from embedscope.metrics import retrieval_metrics
    from embedscope.metrics.clustering import kmeans_labels
    from embedscope.metrics.search import knn, ranks

    rng = np.random.default_rng(11)
    y = np.repeat(np.arange(6), 40)
    X = (rng.normal(size=(6, 12))[y] + 0.6 * rng.normal(size=(240, 12))).astype(np.float32) * 3.0
    a = kmeans_labels(X, 6, metric="cosine", prepared=True)
    assert np.array_equal(a, kmeans_labels(X, 6, metric="euclidean"))
    assert not np.array_equal(a, kmeans_labels(X, 6, metric="cosine"))  # the flag changes something here
    calls = []
    real = knn.prepare

    def counting(A, metric, name="X", **kw):
        calls.append(name)
        return real(A, metric, name, **kw)

    monkeypatch.setattr(knn, "prepare", counting)
    monkeypatch.setattr(ranks, "prepare", counting)
    r = retrieval_metrics(X, y, include=["R@1", "NMI", "F1"], device="cpu")
    assert calls == ["X"]  # the ranks' rows, reused by k-means
    ref = kmeans_nmi_f1(X, y)
    assert (r["NMI"], r["F1"]) == (ref["NMI"], ref["F1"])


@pytest.mark.parametrize("spread", [True, False])
def test_float64_settling_translates_only_where_it_helps(spread):
    """Rows settled in float64 are taken about one of them only where that shrinks the scale (a
    collapsed model); for rows spread over the sphere a few centroids' distances rule it out, and no
    translated (k, D) copy of the centroids is made (measured by tracemalloc). The nearest centroid is
    the definition's either way (float64 Σ (x − c)², ties to the lower index)."""
    import tracemalloc

    from embedscope.metrics.kmeans import _Assigner

    rng = np.random.default_rng(4)
    k, d = 20000, 64
    if spread:
        x = rng.standard_normal((300, d)).astype(np.float32)
        C = rng.standard_normal((k, d)).astype(np.float32)
    else:  # every row and centroid within 1e-5 of one point
        p = rng.standard_normal(d)
        x = (p + 1e-6 * rng.standard_normal((300, d))).astype(np.float32)
        C = (p + 1e-6 * rng.standard_normal((k, d))).astype(np.float32)
    eng = _Assigner(x, k, 1 << 30, bounds=False)
    eng._setup_groups(np.zeros((k, 1), dtype=np.float32))
    C64 = C.astype(np.float64)
    cc64 = np.einsum("ij,ij->i", C64, C64)
    rows = np.array([3, 50, 299])
    tracemalloc.start()
    a = eng._exact_rows(rows, C64, cc64, float(np.sqrt(cc64.max())))[0]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    ref = ((x[rows].astype(np.float64)[:, None] - C64[None]) ** 2).sum(-1).argmin(1)
    np.testing.assert_array_equal(a, ref)
    copy = k * d * 8  # one translated float64 copy of the centroids
    assert (peak < copy / 2) if spread else (peak >= copy)
