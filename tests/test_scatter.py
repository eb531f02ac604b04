"""Same-vs-different similarity scatter (docs/methods.md §10): nearest_same_different vs a brute-force matrix."""

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
    # bluish green below the diagonal, vermillion above (the neighbours frames' colours, no class's)
    offsets = axes[0].collections[0].get_offsets()
    colors = axes[0].collections[0].get_facecolors()[:, :3]
    below = offsets[:, 1] < offsets[:, 0]
    green = np.isclose(colors, [0x00 / 255, 0x9E / 255, 0x73 / 255], atol=1e-3).all(axis=1)
    assert np.array_equal(below, green)
    from matplotlib.colors import to_hex

    from embedscope.viz.style import class_colors

    assert not {"#009e73", "#d55e00"} & {to_hex(c) for c in class_colors(list(range(20))).values()}
    fig.savefig(tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 5000
    plt.close("all")


# ------------------------------------------------------------------ extreme scales (issue: 1e30 rows)
@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
def test_huge_and_tiny_rows_exact_without_warnings(metric):
    """float32 rows at ~1e30 (their squares overflow float32) and ~1e-30: no warning, no point left
    out, the values of the definition (brute force in float64)."""
    import warnings

    X, y = _data(n=40, seed=5)
    for e in (100, -100):
        Xe = np.ldexp(X, e).astype(np.float32)  # ~1.3e30 / ~7.9e-31, exactly representable scalings
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            s_same, s_diff = nearest_same_different(Xe, y, metric=metric)
        r_same, r_diff = _brute(Xe.astype(np.float64), y, metric)
        assert np.all(np.isfinite(s_same)) and np.all(np.isfinite(s_diff))
        np.testing.assert_allclose(s_same, r_same, rtol=2e-5)
        np.testing.assert_allclose(s_diff, r_diff, rtol=2e-5)
        assert share_below_diagonal(s_same, s_diff)[1] == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s_same, _ = nearest_same_different(X * 1e30, y, metric=metric)  # float64, not a power of two
    np.testing.assert_allclose(s_same, _brute(X * 1e30, y, metric)[0], rtol=1e-10)


def test_beyond_float64_refused():
    X, y = _data(n=20, seed=6)
    with pytest.raises(EmbedscopeError, match="exceed the float64 range"):
        nearest_same_different(X * 1e200, y, metric="dot")
    s_same, _ = nearest_same_different(X * 1e200, y, metric="cosine")  # cosine is scale-free
    np.testing.assert_allclose(s_same, nearest_same_different(X, y, metric="cosine")[0], rtol=1e-12)


# ------------------------------------------------------------------ the figure
def _visible_diagonal(ax):
    """Length of the diagonal y = x inside the axes window, as a share of the window's diagonal
    (in axes coordinates)."""
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    t = np.linspace(min(x0, y0), max(x1, y1), 20001)
    inside = (t >= x0) & (t <= x1) & (t >= y0) & (t <= y1)
    if not inside.any():
        return 0.0
    a, b = t[inside][0], t[inside][-1]
    dx, dy = (b - a) / (x1 - x0), (b - a) / (y1 - y0)
    return float(np.hypot(dx, dy) / np.sqrt(2))


def test_each_panel_zoomed_to_its_points_with_the_diagonal():
    """A tight test cloud next to a spread training cloud: the test panel is zoomed to its points
    (they fill most of the axes; with one shared window they used ~1%), the diagonal stays in view."""
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(0)
    train = (rng.uniform(0.97, 1.0, 300), rng.uniform(0.05, 0.95, 300))  # nearly all below the diagonal
    test = (rng.uniform(0.93, 0.99, 300), rng.uniform(0.85, 0.99, 300))
    fig = plot_same_different({"train": train, "test": test})
    for ax, (a, b) in zip(fig.axes, (train, test)):
        (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
        assert x0 <= a.min() and a.max() <= x1 and y0 <= b.min() and b.max() <= y1
        assert _visible_diagonal(ax) > 0.1
        assert ax.lines[0].get_xdata()[0] <= max(x0, y0) and ax.lines[0].get_xdata()[-1] >= min(x1, y1)
    ax = fig.axes[1]
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    fill = np.ptp(test[0]) / (x1 - x0) * np.ptp(test[1]) / (y1 - y0)
    # (a square window since audit 45, the diagonal at 45°: the union of the x and y ranges, 5% margins; the
    # test cloud, 0.06 wide and 0.14 tall, fills a third of it: was > 0.6 in a window fitted to each range)
    assert fill > 0.3 and x1 - x0 <= 1.11 * (max(test[0].max(), test[1].max()) - min(test[0].min(), test[1].min()))
    shared = plot_same_different({"train": train, "test": test}, same_window=True)
    assert shared.axes[0].get_xlim() == shared.axes[1].get_xlim()
    plt.close("all")


@pytest.mark.parametrize("cloud", [
    ((0.97, 1.0), (0.05, 0.95)),   # far below the diagonal, thin in x
    ((0.1, 0.3), (0.7, 0.9)),      # above it, not touching
    ((5.0, 5.0), (1.0, 1.0)),      # a single point
    ((-3.0, -1.0), (-2.5, -0.5)),  # euclidean-like negative values around the diagonal
])
def test_zoom_window_keeps_the_diagonal(cloud):
    from embedscope.viz.scatter import MAX_SPAN_RATIO, zoom_window

    rng = np.random.default_rng(1)
    a = rng.uniform(*cloud[0], 50)
    b = rng.uniform(*cloud[1], 50)
    (x0, x1), (y0, y1) = zoom_window(a, b)
    assert x0 <= a.min() and a.max() <= x1 and y0 <= b.min() and b.max() <= y1
    sx, sy = x1 - x0, y1 - y0
    assert max(sx, sy) / min(sx, sy) <= MAX_SPAN_RATIO * 1.01
    assert min(x1, y1) - max(x0, y0) >= 0.1 * max(sx, sy)  # the diagonal crosses the window


def test_scatter_analysis_refuses_zero_rows_for_cosine_only(tmp_path, capsys):
    """``scatter`` (the analysis and the command) refuses all-zero rows for cosine, as evaluate and
    neighbours do; dot and Euclidean have no such problem."""
    from embedscope import store
    from embedscope.analyses import scatter
    from embedscope.cli import main

    rng = np.random.default_rng(0)
    n = 12
    X = rng.standard_normal((n, 3)).astype(np.float32)
    X[7] = 0.0
    es = store.EmbeddingSet(embeddings=X, labels=np.arange(n) % 3, paths=[f"p{i}" for i in range(n)],
                            split=["train"] * 6 + ["test"] * 6, class_names=["a", "b", "c"])
    with pytest.raises(EmbedscopeError, match=r"1 test embedding\(s\) are all zeros .*row 1 first"):
        scatter(es)
    assert scatter(es, split="train").values["below_diagonal_train"] >= 0  # the zero row is a test row
    assert np.isfinite(scatter(es, metric="dot").values["below_diagonal_test"])
    h5 = store.save(tmp_path / "z.h5", es)
    capsys.readouterr()
    assert main(["scatter", str(h5), "-o", str(tmp_path / "z.png"), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "all zeros" in err[0]
    assert not (tmp_path / "z.png").exists()


def test_one_panel_keeps_its_legend_inside_the_figure():
    # one panel is 3.3 in wide: the legend's three entries in a row (~5.5 in) stuck out of the figure, so
    # the saved PNG (tight bounding box) was widened and the plot sat squeezed at its left
    import matplotlib.pyplot as plt

    from embedscope.viz.scatter import plot_same_different

    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 1, 200)
    for panels in ({"test": (a, a - 0.05)}, {"train": (a, a - 0.05), "test": (a, a - 0.1)}):
        fig = plot_same_different(panels)
        try:
            fig.canvas.draw()
            r = fig.canvas.get_renderer()
            leg = fig.legends[0].get_window_extent(r)
            assert leg.x0 >= 0 and leg.x1 <= fig.bbox.width
            for ax in fig.axes:  # the legend is below every panel's x label
                assert leg.y1 <= ax.xaxis.label.get_window_extent(r).y0 + 1
        finally:
            plt.close(fig)


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
def test_rows_of_one_and_of_several_candidates_in_one_chunk(metric):
    """A chunk of rows where most rows have one candidate and a few several (exact duplicates among
    their neighbours: equal float32 keys): every row the brute force's value, none lost or swapped
    (the rows of one candidate take their best column, the others their mask's)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(90, 6)).astype(np.float32)
    X[60:70] = X[10]  # ten copies of row 10 (class 0 and 1 alike): ties for rows near it
    X[70:75] = X[20]
    y = np.arange(90) % 3
    s_same, s_diff = nearest_same_different(X, y, metric=metric)  # one block, one chunk
    r_same, r_diff = _brute(X, y, metric)
    np.testing.assert_allclose(s_same, r_same, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(s_diff, r_diff, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("block_size", [5, 16, 64])
def test_symmetric_pass_matches_brute_force(metric, block_size, monkeypatch):
    """From SYMMETRIC_MIN_ROWS rows each pair's similarity is computed once (a row block against the rows
    from its own on, read by rows and by columns): forced here on small sets whose classes span several
    blocks, with a class of one, duplicates (near-ties: searched again row by row) and unsorted labels."""
    import embedscope.metrics.neighbours as nb

    monkeypatch.setattr(nb, "SYMMETRIC_MIN_ROWS", 0)
    rng = np.random.default_rng(7)
    y = rng.integers(0, 4, 150)
    y[17] = 9  # a class of one
    X = rng.normal(size=(150, 5)) + y[:, None] * 0.3
    X[100:104] = X[3]  # duplicates, of both classes
    X[110:120] = X[5] + 1e-6 * rng.normal(size=(10, 5))  # near-duplicates: float32 keys cannot order them
    X = X.astype(np.float32)
    s_same, s_diff = nearest_same_different(X, y, metric=metric, block_size=block_size)
    r_same, r_diff = _brute(X, y, metric)
    np.testing.assert_allclose(s_same, r_same, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(s_diff, r_diff, rtol=1e-6, atol=1e-6)
    assert np.isnan(s_same[17]) and np.isnan(s_same).sum() == 1
    # the same values as the row blocks' search, bit for bit
    monkeypatch.setattr(nb, "SYMMETRIC_MIN_ROWS", 10**9)
    t_same, t_diff = nearest_same_different(X, y, metric=metric, block_size=block_size)
    assert np.array_equal(s_same, t_same, equal_nan=True) and np.array_equal(s_diff, t_diff, equal_nan=True)
