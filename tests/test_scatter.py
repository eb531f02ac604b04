"""Same-vs-different similarity scatter (METHODS.md §10): nearest_same_different vs a brute-force matrix."""

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.metrics.neighbours import nearest_same_different, share_below_diagonal
from embedscope.viz.scatter import plot_same_different


def _brute(X, y, metric):
    """Full N x N similarity matrix, straight from the definition."""
    X = np.asarray(X, dtype=np.float64)
    n = len(X)
    S = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            if metric == "cosine":
                S[i, j] = X[i] @ X[j] / (np.linalg.norm(X[i]) * np.linalg.norm(X[j]))
            elif metric == "dot":
                S[i, j] = X[i] @ X[j]
            else:
                S[i, j] = -np.linalg.norm(X[i] - X[j])
    same, diff = np.full(n, np.nan), np.full(n, np.nan)
    for i in range(n):
        s = [S[i, j] for j in range(n) if j != i and y[j] == y[i]]
        d = [S[i, j] for j in range(n) if y[j] != y[i]]
        if s:
            same[i] = max(s)
        if d:
            diff[i] = max(d)
    return same, diff


def _data(n=57, d=5, seed=0, n_classes=4):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    X = rng.normal(size=(n, d)) + y[:, None] * 0.5
    return X, y


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("block_size", [1, 7, None])
def test_matches_brute_force(metric, block_size):
    X, y = _data()
    y[5] = 9  # a class of one: no same-class partner
    s_same, s_diff = nearest_same_different(X, y, metric=metric, block_size=block_size)
    r_same, r_diff = _brute(X, y, metric)
    np.testing.assert_allclose(s_same, r_same, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s_diff, r_diff, rtol=1e-12, atol=1e-12)
    assert np.isnan(s_same[5]) and np.isfinite(s_diff[5])
    assert np.isnan(s_same).sum() == 1


def test_string_labels_and_unsorted_classes():
    X, y = _data(n=30, seed=1)
    names = np.array(["zeta", "alpha", "mid", "beta"])[y]
    a = nearest_same_different(X, names)
    b = nearest_same_different(X, y)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_float32_close_and_single_class_nan():
    X, y = _data(n=40, seed=2)
    s32 = nearest_same_different(X.astype(np.float32), y)
    s64 = nearest_same_different(X, y)
    np.testing.assert_allclose(s32[0], s64[0], atol=1e-5)
    np.testing.assert_allclose(s32[1], s64[1], atol=1e-5)
    same, diff = nearest_same_different(X, np.zeros(40, dtype=int))
    assert np.all(np.isnan(diff)) and np.all(np.isfinite(same))


def test_share_below_diagonal_is_r_at_1():
    X, y = _data(n=120, seed=3, n_classes=5)
    y[0] = 99  # lone point: left out of both
    s_same, s_diff = nearest_same_different(X, y)
    share, left_out = share_below_diagonal(s_same, s_diff)
    Z = X / np.linalg.norm(X, axis=1, keepdims=True)
    S = Z @ Z.T
    np.fill_diagonal(S, -np.inf)
    nn = np.argmax(S, axis=1)  # 1-NN (lowest index on ties)
    keep = np.arange(len(y)) != 0
    assert left_out == 1
    assert share == pytest.approx(np.mean(y[nn][keep] == y[keep]))


def test_validation():
    X, y = _data(n=10)
    with pytest.raises(EmbedscopeError, match="metric"):
        nearest_same_different(X, y, metric="manhattan")
    with pytest.raises(EmbedscopeError, match="shape"):
        nearest_same_different(X, y[:-1])
    X[0, 0] = np.nan
    with pytest.raises(EmbedscopeError, match="NaN"):
        nearest_same_different(X, y)


def test_plot(tmp_path):
    import matplotlib.pyplot as plt

    X, y = _data(n=80, seed=4)
    panels = {"train": nearest_same_different(X[:40], y[:40]), "test": nearest_same_different(X[40:], y[40:])}
    fig = plot_same_different(panels)
    axes = fig.axes
    assert len(axes) == 2
    assert "same-class" in axes[0].get_xlabel() and "other-class" in axes[0].get_ylabel()
    share = share_below_diagonal(*panels["test"])[0]
    assert f"{share:.1%} below diagonal (R@1)" in axes[1].get_title()
    # cyan below the diagonal, orange above
    offsets = axes[0].collections[0].get_offsets()
    colors = axes[0].collections[0].get_facecolors()[:, :3]
    below = offsets[:, 1] < offsets[:, 0]
    cyan = np.isclose(colors, [0x17 / 255, 0xBE / 255, 0xCF / 255], atol=1e-3).all(axis=1)
    assert np.array_equal(below, cyan)
    fig.savefig(tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 5000
    plt.close("all")
