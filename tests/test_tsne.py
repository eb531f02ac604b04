"""Joint and yoked t-SNE (docs/methods.md §10): exact objective/gradient, approximate gradient, alpha behaviour."""

import numpy as np
import pytest
from openTSNE import TSNE, TSNEEmbedding
from openTSNE.affinity import PerplexityBasedNN
from openTSNE.initialization import pca as pca_init
from scipy.spatial.distance import squareform

from embedscope.errors import EmbedscopeError
from embedscope.tsne import (
    YokedObjective,
    gradient_descent,
    joint_tsne,
    single_tsne,
    stratified_subsample,
    yoked_tsne,
    yoked_tsne_exact_objective_and_grad,
    yoked_tsne_objective_and_grad,
)
from embedscope.viz.style import TEST_COLOR, TRAIN_COLOR
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
    fig = plot_tsne(Ya, np.arange(60) % 50)  # 50 classes (> 40): colours, no legend
    assert fig.axes[0].get_legend() is None
    _non_empty_png(fig, tmp_path / "single.png")
    plt.close("all")


def test_joint_split_colours_are_no_class_colours():
    """The third panel colours by split with colours no class takes (tab10/tab20 for up to 20
    classes): with red/blue for train/test, a reader who had just read the class legend below saw
    classes 3 and 0 there."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    rng = np.random.default_rng(1)
    for n_classes in (5, 10, 20):
        lab = np.arange(4 * n_classes) % n_classes
        Y = rng.normal(size=(len(lab), 2))
        half = len(lab) // 2
        fig = plot_joint_tsne(Y[:half], Y[half:], lab[:half], lab[half:],
                              class_names=[f"c{i}" for i in range(n_classes)])
        class_rgba = {tuple(np.round(c, 3)) for ax in fig.axes[:2] for col in ax.collections
                      for c in col.get_facecolors()[:, :3]}
        split = fig.axes[2].collections[0].get_facecolors()[:, :3]
        split_rgb = {tuple(np.round(c, 3)) for c in split}
        assert len(split_rgb) == 2 and not split_rgb & class_rgba, n_classes
        assert split_rgb == {tuple(np.round(to_rgba(c)[:3], 3)) for c in (TRAIN_COLOR, TEST_COLOR)}
        # the two differ in lightness too (colour blindness, grey print): luminance apart by > 0.4
        lum = [0.2126 * r + 0.7152 * g + 0.0722 * b for r, g, b in (to_rgba(c)[:3] for c in (TRAIN_COLOR, TEST_COLOR))]
        assert abs(lum[0] - lum[1]) > 0.4
        titles = [lg.get_title().get_text() for lg in fig.legends]
        assert titles == ["class (train and test panels)"]
        plt.close(fig)


# ------------------------------------------------------------------ degenerate and extreme input
def test_identical_rows_refused():
    X = np.ones((30, 6))
    with pytest.raises(EmbedscopeError, match="identical"):
        single_tsne(X)
    with pytest.raises(EmbedscopeError, match="identical"):
        joint_tsne(X[:15], X[15:])
    Y, _ = _clusters(n_per=10)
    with pytest.raises(EmbedscopeError, match="X_b: all 30 rows are identical"):
        yoked_tsne(Y, X)


def test_extreme_scale_maps_like_unit_scale(tmp_path):
    """t-SNE is scale-free: rows scaled by 2^100 (~1.3e30) or 2^-100 give the very same map as the
    rows themselves (the rescaling is an exact power of two), never NaN."""
    import matplotlib.pyplot as plt

    X, y = _clusters(n_per=12, n_classes=3, dim=5, seed=11)
    X = X / (np.abs(X).max() * 1.01)  # largest |value| in [0.5, 1): the rescaled rows equal X exactly
    kw = dict(perplexity=8, early_exaggeration_iter=40, n_iter=40)
    ref = single_tsne(X, **kw)
    for e in (100, -100):
        Y, info = single_tsne(np.ldexp(X, e), return_info=True, **kw)
        np.testing.assert_array_equal(Y, ref)
        assert info["input_scale"] == 2.0 ** -e
    Y = single_tsne(X * 1e30, **kw)  # not a power of two: a different but finite map
    assert np.all(np.isfinite(Y))
    fig = plot_tsne(Y, y)
    fig.savefig(tmp_path / "huge.png")  # used to fail: "Axis limits cannot be NaN or Inf"
    plt.close(fig)
    Y_tr, Y_te = joint_tsne(np.ldexp(X[:20], 100), np.ldexp(X[20:], 100), **kw)
    np.testing.assert_array_equal(np.vstack([Y_tr, Y_te]), np.vstack(joint_tsne(X[:20], X[20:], **kw)))
    Y_a, Y_b = yoked_tsne(X, np.ldexp(X, 100), **kw)
    ref_a, ref_b = yoked_tsne(X, X, **kw)
    np.testing.assert_array_equal(Y_a, ref_a)
    np.testing.assert_array_equal(Y_b, ref_b)


# ------------------------------------------------------------------ the optimiser, apart from t-SNE
def test_gradient_descent_on_a_quadratic_matches_hand_written_updates():
    """f(Y) = ½‖Y − T‖² (gradient Y − T): the optimiser's steps equal the update rule written out,
    and it converges to T."""
    rng = np.random.default_rng(0)
    T = [rng.normal(size=(7, 2)), rng.normal(size=(7, 2)) + 3]
    Y0 = [rng.normal(size=(7, 2)) * 5 for _ in range(2)]

    def objective(Ys, eval_error):
        err = sum(0.5 * float(np.sum((Y - t) ** 2)) for Y, t in zip(Ys, T)) if eval_error else None
        return err, [Y - t for Y, t in zip(Ys, T)]

    lr, mom, scale = 0.05, 0.5, 0.25
    Ys = [Y.copy() for Y in Y0]
    state = gradient_descent(objective, Ys, 5, learning_rate=lr, momentum=mom, gradient_scale=scale, recentre=False)
    # the same five steps by hand
    ref = [Y.copy() for Y in Y0]
    upd = [np.zeros_like(Y) for Y in ref]
    gain = [np.ones_like(Y) for Y in ref]
    for _ in range(5):
        for k in range(2):
            g = scale * (ref[k] - T[k])
            for idx in np.ndindex(g.shape):
                if np.sign(upd[k][idx]) != np.sign(g[idx]):
                    gain[k][idx] += 0.2
                else:
                    gain[k][idx] = gain[k][idx] * 0.8 + 0.01
                upd[k][idx] = mom * upd[k][idx] - lr * gain[k][idx] * g[idx]
                ref[k][idx] += upd[k][idx]
    for k in range(2):
        np.testing.assert_allclose(Ys[k], ref[k], rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(state.gains[k], gain[k], rtol=1e-13)
    assert state.iteration == 5
    gradient_descent(objective, Ys, 400, learning_rate=lr, momentum=mom, gradient_scale=scale, recentre=False,
                     state=state)
    assert state.iteration == 405
    for k in range(2):
        np.testing.assert_allclose(Ys[k], T[k], atol=1e-6)


def test_gradient_descent_callback_step_clip_and_recentre():
    T = np.array([[10.0, 0.0], [12.0, 2.0], [14.0, 4.0]])
    calls = []

    def objective(Ys, eval_error):
        return ("err" if eval_error else None), [Ys[0] - T]

    def callback(iteration, error, Ys):
        calls.append((iteration, error))
        return iteration == 7  # stop after 7 iterations

    Ys = [np.zeros((3, 2))]
    state = gradient_descent(objective, Ys, 100, learning_rate=1.0, momentum=0.0, max_step_norm=0.5,
                             recentre=True, callback=callback, error_every=3)
    assert state.iteration == 7 and [c[0] for c in calls] == list(range(1, 8))
    assert [c[1] for c in calls] == [None, None, "err", None, None, "err", None]
    assert np.all(np.linalg.norm(state.updates[0], axis=1) <= 0.5 + 1e-12)
    np.testing.assert_allclose(Ys[0].mean(0), 0.0, atol=1e-12)


def test_yoked_objective_callable_equals_functions(small_pair):
    P_a, P_b, Y_a, Y_b = small_pair
    err, (g_a, g_b) = YokedObjective(P_a, P_b, 0.3, method="exact")([Y_a, Y_b], True)
    C, r_a, r_b = yoked_tsne_exact_objective_and_grad(Y_a, Y_b, P_a, P_b, 0.3)
    np.testing.assert_allclose(g_a, r_a, rtol=1e-12)
    np.testing.assert_allclose(g_b, r_b, rtol=1e-12)
    assert err["KL_a+KL_b"] == pytest.approx(C - 0.3 * np.sum((Y_a - Y_b) ** 2), rel=1e-12)
    err, (h_a, h_b) = YokedObjective(P_a, P_b, 0.3, method="bh")([Y_a, Y_b], True)
    C2, s_a, s_b = yoked_tsne_objective_and_grad(Y_a, Y_b, P_a, P_b, 0.3, method="bh")
    np.testing.assert_array_equal(h_a, s_a)
    assert err["KL_a"] + err["KL_b"] == pytest.approx(C2 - 0.3 * np.sum((Y_a - Y_b) ** 2), rel=1e-12)


def test_progress_is_a_callback_and_nothing_is_printed(capfd):
    X, _ = _clusters(n_per=10)
    seen = []
    yoked_tsne(X, X[:, ::-1], perplexity=5, early_exaggeration_iter=50, n_iter=60,
               progress=lambda done, total, values: seen.append((done, total, dict(values))))
    assert [s[0] for s in seen] == list(range(1, 111)) and {s[1] for s in seen} == {110}
    with_kl = [s[0] for s in seen if s[2]]
    assert with_kl == [50, 100] and set(seen[49][2]) == {"KL_a", "KL_b"}
    seen.clear()
    single_tsne(X, perplexity=5, early_exaggeration_iter=50, n_iter=60,
                progress=lambda done, total, values: seen.append((done, total, dict(values))))
    assert seen[-1][0] == 110 and "KL" in seen[-1][2]
    out, err = capfd.readouterr()
    assert out == "" and err == ""


# ------------------------------------------------------------------ figures
def test_yoked_maps_fill_their_width_and_name_the_split():
    """The maps fill their panels (no band of empty axes beside the points, as when 'datalim'
    widened a wide canvas) and the split is named in the title."""
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(1)
    lab = np.repeat(np.arange(4), 50)
    Y_a = rng.normal(size=(200, 2)) * [10, 13]  # a taller than wide map
    Y_b = Y_a + rng.normal(size=Y_a.shape)
    fig = plot_yoked_tsne(Y_a, Y_b, lab, names=("m1", "m2"), split="test", info={"alpha": 0.01})
    fig.canvas.draw()
    assert fig.axes[0].get_title() == "m1" and fig.axes[1].get_title() == "m2"
    assert "test split" in fig._suptitle.get_text() and "200" in fig._suptitle.get_text()
    W, H = fig.get_size_inches()
    both = np.vstack([Y_a, Y_b])
    for ax in fig.axes[:2]:
        (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
        # the window holds every point and is at most ~20% wider/taller than the points
        assert x0 <= both[:, 0].min() and both[:, 0].max() <= x1 and y0 <= both[:, 1].min() and both[:, 1].max() <= y1
        assert np.ptp(both[:, 0]) / (x1 - x0) > 0.8 and np.ptp(both[:, 1]) / (y1 - y0) > 0.8
        cell, box = ax.get_position(original=True), ax.get_position()
        assert box.width > 0.97 * cell.width and box.height > 0.97 * cell.height  # the box fills its cell
        assert (box.height * H) / (box.width * W) == pytest.approx((y1 - y0) / (x1 - x0), rel=0.02)  # equal scale
    assert sum(ax.get_position().width for ax in fig.axes[:2]) > 0.75  # the maps take most of the width
    fig2 = plot_yoked_tsne(Y_a, Y_b, lab, split="test", title="my title")
    assert fig2._suptitle.get_text() == "my title"
    plt.close("all")
