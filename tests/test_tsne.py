"""Joint and yoked t-SNE (METHODS.md §10): exact objective/gradient, approximate gradient, alpha behaviour."""

import numpy as np
import pytest
from openTSNE import TSNE, TSNEEmbedding
from openTSNE.affinity import PerplexityBasedNN
from openTSNE.initialization import pca as pca_init
from scipy.spatial.distance import squareform

from embedscope.errors import EmbedscopeError
from embedscope.tsne import (
    joint_tsne,
    stratified_subsample,
    yoked_tsne,
    yoked_tsne_exact_objective_and_grad,
    yoked_tsne_objective_and_grad,
)
from embedscope.viz.tsne import plot_joint_tsne, plot_tsne, plot_yoked_tsne


def _clusters(n_per=20, n_classes=3, dim=6, seed=0, spread=4.0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_classes, dim)) * spread
    y = np.repeat(np.arange(n_classes), n_per)
    X = centres[y] + rng.normal(size=(len(y), dim))
    return X, y


def _affinities(X, perplexity=5):
    return PerplexityBasedNN(X, perplexity=perplexity, random_state=0).P.tocsr()


@pytest.fixture(scope="module")
def small_pair():
    X_a, y = _clusters(n_per=15, n_classes=3, dim=5, seed=1)
    rng = np.random.default_rng(2)
    X_b = np.tanh(X_a @ rng.normal(size=(5, 4)) / 3)
    P_a, P_b = _affinities(X_a), _affinities(X_b)
    Y_a = rng.normal(size=(len(y), 2)) * 2
    Y_b = Y_a + rng.normal(size=Y_a.shape)
    return P_a, P_b, Y_a, Y_b


def test_exact_gradient_matches_finite_differences(small_pair):
    P_a, P_b, Y_a, Y_b = small_pair
    alpha = 0.3
    C, g_a, g_b = yoked_tsne_exact_objective_and_grad(Y_a, Y_b, P_a, P_b, alpha)
    h = 1e-6
    rng = np.random.default_rng(0)
    for which, g in ((0, g_a), (1, g_b)):
        for _ in range(12):
            i, k = int(rng.integers(len(Y_a))), int(rng.integers(2))
            Ys_p = [Y_a.copy(), Y_b.copy()]
            Ys_m = [Y_a.copy(), Y_b.copy()]
            Ys_p[which][i, k] += h
            Ys_m[which][i, k] -= h
            Cp = yoked_tsne_exact_objective_and_grad(*Ys_p, P_a, P_b, alpha)[0]
            Cm = yoked_tsne_exact_objective_and_grad(*Ys_m, P_a, P_b, alpha)[0]
            fd = (Cp - Cm) / (2 * h)
            assert fd == pytest.approx(g[i, k], rel=1e-5, abs=1e-8)


def test_exact_objective_matches_sklearn_and_alignment_term(small_pair):
    """alpha = 0: C = KL_a + KL_b and the gradients equal scikit-learn's exact t-SNE KL gradient."""
    from sklearn.manifold._t_sne import _kl_divergence

    P_a, P_b, Y_a, Y_b = small_pair
    n = len(Y_a)
    C0, g_a, g_b = yoked_tsne_exact_objective_and_grad(Y_a, Y_b, P_a, P_b, 0.0)
    kl_a, sk_ga = _kl_divergence(Y_a.ravel(), squareform(P_a.toarray(), checks=False), 1, n, 2)
    kl_b, sk_gb = _kl_divergence(Y_b.ravel(), squareform(P_b.toarray(), checks=False), 1, n, 2)
    assert C0 == pytest.approx(kl_a + kl_b, rel=1e-9)
    np.testing.assert_allclose(g_a.ravel(), sk_ga, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(g_b.ravel(), sk_gb, rtol=1e-7, atol=1e-12)
    C1 = yoked_tsne_exact_objective_and_grad(Y_a, Y_b, P_a, P_b, 0.7)[0]
    assert C1 - C0 == pytest.approx(0.7 * np.sum((Y_a - Y_b) ** 2), rel=1e-9)


@pytest.mark.parametrize("method, tol", [("bh", 0.05), ("fft", 0.02)])
def test_approximate_gradient_close_to_exact(method, tol):
    X_a, _ = _clusters(n_per=60, n_classes=4, dim=8, seed=3)
    rng = np.random.default_rng(4)
    X_b = X_a + rng.normal(size=X_a.shape)
    P_a, P_b = _affinities(X_a, 10), _affinities(X_b, 10)
    Y_a = rng.normal(size=(len(X_a), 2)) * 5
    Y_b = Y_a + rng.normal(size=Y_a.shape)
    C, g_a, g_b = yoked_tsne_exact_objective_and_grad(Y_a, Y_b, P_a, P_b, 0.01)
    Ca, a_a, a_b = yoked_tsne_objective_and_grad(Y_a, Y_b, P_a, P_b, 0.01, method=method)
    for exact, approx in ((g_a, a_a), (g_b, a_b)):
        assert np.linalg.norm(approx - exact) / np.linalg.norm(exact) < tol
    assert Ca == pytest.approx(C, rel=0.01)


def test_alpha_zero_matches_opentsne_kl():
    """alpha = 0: two independent maps, each KL within 5% of openTSNE's on the same affinities."""
    X_a, _ = _clusters(n_per=50, n_classes=4, dim=10, seed=5)
    rng = np.random.default_rng(6)
    X_b = np.tanh(X_a @ rng.normal(size=(10, 6)) / 4)
    kw = dict(perplexity=15, seed=0, early_exaggeration_iter=100, n_iter=150)
    _, _, info = yoked_tsne(X_a, X_b, alpha=0.0, return_info=True, **kw)
    for X, kl in ((X_a, info["kl_a"]), (X_b, info["kl_b"])):
        aff = PerplexityBasedNN(X, perplexity=15, random_state=0)
        emb = TSNEEmbedding(pca_init(X, 2, random_state=0), aff, random_state=0, negative_gradient_method="bh")
        emb = emb.optimize(100, exaggeration=12, momentum=0.8)
        emb = emb.optimize(150, momentum=0.8)
        assert kl == pytest.approx(emb.kl_divergence, rel=0.05)


def test_displacement_decreases_monotonically_with_alpha():
    X_a, _ = _clusters(n_per=40, n_classes=3, dim=8, seed=7)
    rng = np.random.default_rng(8)
    X_b = np.tanh(X_a @ rng.normal(size=(8, 8)) / 4) + 0.3 * rng.normal(size=X_a.shape)
    n = len(X_a)
    disp, kls = [], []
    for c in (0.0, 0.003, 0.03, 0.3, 3.0):
        Y_a, Y_b, info = yoked_tsne(X_a, X_b, alpha=c / n, perplexity=10, early_exaggeration_iter=100,
                                    n_iter=150, return_info=True)
        d = np.linalg.norm(Y_a - Y_b, axis=1).mean()
        assert d == pytest.approx(info["mean_displacement"])
        disp.append(d)
        kls.append(info["kl_a"] + info["kl_b"])
    assert all(a > b for a, b in zip(disp, disp[1:])), disp
    assert disp[-1] < 0.1 * disp[0]
    assert kls[-1] > kls[0]  # the yoke costs KL


def test_exact_path_agrees_with_barnes_hut():
    X_a, _ = _clusters(n_per=20, n_classes=3, dim=5, seed=9)
    X_b = X_a[:, ::-1] * 1.5
    kw = dict(alpha=0.01 / 60, perplexity=8, early_exaggeration_iter=60, n_iter=100, return_info=True)
    _, _, ex = yoked_tsne(X_a, X_b, negative_gradient_method="exact", **kw)
    _, _, bh = yoked_tsne(X_a, X_b, negative_gradient_method="bh", **kw)
    assert ex["kl_a"] == pytest.approx(bh["kl_a"], rel=0.1)
    assert ex["kl_b"] == pytest.approx(bh["kl_b"], rel=0.1)


def test_yoked_validation():
    X, _ = _clusters()
    with pytest.raises(EmbedscopeError, match="same points"):
        yoked_tsne(X, X[:-1])
    with pytest.raises(EmbedscopeError, match="alpha"):
        yoked_tsne(X, X, alpha=-1.0)
    with pytest.raises(EmbedscopeError, match="negative_gradient_method"):
        yoked_tsne(X, X, negative_gradient_method="magic")


def test_joint_tsne_keeps_row_order():
    X, y = _clusters(n_per=25, n_classes=4, dim=6, seed=10)
    tr, te = X[y < 2], X[y >= 2].copy()
    te[0] = tr[7] + 1e-3  # a test point sitting on a training point lands next to it
    Y_tr, Y_te, info = joint_tsne(tr, te, perplexity=10, early_exaggeration_iter=100, n_iter=150,
                                  return_info=True)
    assert Y_tr.shape == (len(tr), 2) and Y_te.shape == (len(te), 2)
    ref = np.asarray(TSNE(perplexity=10, random_state=0, early_exaggeration_iter=100, n_iter=150)
                     .fit(np.vstack([tr, te])))
    np.testing.assert_allclose(np.vstack([Y_tr, Y_te]), ref)
    d = np.linalg.norm(Y_tr - Y_te[0], axis=1)
    assert np.argmin(d) == 7
    assert info["perplexity"] == 10 and info["initialization"] == "pca" and info["n_test"] == len(te)


def test_joint_tsne_validation_and_tiny_perplexity():
    X, _ = _clusters(n_per=4, n_classes=2)
    with pytest.raises(EmbedscopeError, match="dimensions"):
        joint_tsne(X, X[:, :3])
    Y_tr, Y_te, info = joint_tsne(X[:4], X[4:], early_exaggeration_iter=20, n_iter=20, return_info=True)
    assert info["perplexity"] == pytest.approx(7 / 3) and info["perplexity_requested"] == 30


def test_stratified_subsample():
    y = np.array([0] * 50 + [1] * 30 + [2] * 20)
    idx = stratified_subsample(y, 10, seed=3)
    assert len(idx) == 10 and np.all(np.diff(idx) > 0)
    assert np.bincount(y[idx]).tolist() == [5, 3, 2]
    np.testing.assert_array_equal(idx, stratified_subsample(y, 10, seed=3))
    assert not np.array_equal(idx, stratified_subsample(y, 10, seed=4))
    assert np.bincount(y[stratified_subsample(y, 3)]).tolist() == [1, 1, 1]
    assert np.array_equal(stratified_subsample(y, 500), np.arange(100))


def _non_empty_png(fig, path):
    fig.savefig(path)
    assert path.stat().st_size > 5000


def test_plots(tmp_path):
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(0)
    Ya, Yb = rng.normal(size=(60, 2)), rng.normal(size=(60, 2))
    lab = np.repeat(np.arange(3), 20)
    fig = plot_joint_tsne(Ya[:30], Yb[:30], lab[:30], lab[30:], class_names=["a", "b", "c"], info={"perplexity": 30.0})
    assert len(fig.axes) == 3
    assert all(ax.get_xlabel() == "t-SNE 1" for ax in fig.axes)
    assert fig.axes[0].get_ylabel() == "t-SNE 2"
    assert [t.get_text() for t in fig.axes[2].get_legend().get_texts()] == ["train", "test"]
    _non_empty_png(fig, tmp_path / "joint.png")
    fig = plot_yoked_tsne(Ya, Yb, lab, names=("m1", "m2"), inset_class=1)
    assert len(fig.axes) == 4 and fig.axes[0].get_title() == "m1"
    _non_empty_png(fig, tmp_path / "yoked.png")
    with pytest.raises(EmbedscopeError, match="inset class"):
        plot_yoked_tsne(Ya, Yb, lab, inset_class=9)
    fig = plot_tsne(Ya, np.arange(60) % 30)  # 30 classes: colours, no legend
    assert fig.axes[0].get_legend() is None
    _non_empty_png(fig, tmp_path / "single.png")
    plt.close("all")
