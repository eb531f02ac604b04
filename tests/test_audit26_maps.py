"""Audit 26 of the maps and neighbour figures (``neighbours``, ``tsne``, ``yoke``; docs/methods.md §1, §10).

Each number is compared with an independent brute-force computation written here: the neighbours
listed (ties to the lower index), the yoked objective and its weight, the gradient (finite
differences), the joint initialisation (PCA, then orthogonal Procrustes), the settings recorded.
The figures: a class keeps its colour across the t-SNE figures, and a zoom of a yoked map is drawn
at equal scale on both axes, as the map itself.
"""

import numpy as np
import pytest

from embedscope import store
from embedscope.analyses import neighbour_examples


# ----------------------------------------------------------------------------- neighbours
def _tied_set():
    """Rows drawn from 5 well-separated integer prototypes: many exact ties (duplicates), and the
    similarity of two different prototypes far from any other (no float32 near-tie)."""
    protos = np.array([[8, 0, 0, 0], [0, 8, 0, 0], [0, 0, 8, 0], [6, 6, 0, 1], [0, 1, 5, 7]], dtype=np.float64)
    which = np.array([0, 1, 0, 2, 3, 0, 1, 4, 3, 0, 2, 1, 4, 0, 3, 2, 1, 0, 4, 3])
    X = protos[which]
    y = np.array([0, 1, 0, 1, 0, 1, 1, 0, 0, 0, 1, 1, 0, 1, 0, 1, 0, 0, 1, 1])  # classes that cut across ties
    return store.EmbeddingSet.from_arrays(X.astype(np.float32), y, split="test"), X, y


def _brute_topk(X, q, k, metric):
    """Brute force in float64: every other row j of X ranked by similarity to row q, ties to the lower j."""
    if metric == "cosine":
        n = X / np.linalg.norm(X, axis=1, keepdims=True)
        s = [float(n[q] @ n[j]) for j in range(len(X))]
    else:
        s = [-float(np.sqrt(np.sum((X[q] - X[j]) ** 2))) for j in range(len(X))]
    order = sorted((j for j in range(len(X)) if j != q), key=lambda j: (-round(s[j], 9), j))
    return order[:k], [s[j] for j in order[:k]]


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_neighbours_equal_brute_force_ties_to_lower_index(metric):
    es, X, y = _tied_set()
    k = 6
    ex = neighbour_examples(es, split="test", queries=es.n, k=k, metric=metric, seed=0)
    qidx = [int(p) for p in ex.query_paths]
    assert qidx == list(range(es.n))  # every row a query
    for r, q in enumerate(qidx):
        want, sims = _brute_topk(X, q, k, metric)
        assert [int(p) for p in ex.ref_paths[r]] == want, (q, ex.ref_paths[r], want)
        np.testing.assert_allclose(ex.similarity[r], sims, atol=1e-6)
        assert ex.correct[r].tolist() == [bool(y[j] == y[q]) for j in want]


# ----------------------------------------------------------------------------- yoked t-SNE
def _two_sets(n=48, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 4
    A = rng.normal(size=(n, 6)) + 4.0 * np.eye(6)[y]
    B = A @ rng.normal(size=(6, 5)) + 0.3 * rng.normal(size=(n, 5))
    return A, B, y


def test_yoked_objective_and_gradient_brute_force():
    """C = KL(P^a‖Q^a) + KL(P^b‖Q^b) + α Σ_i ‖y_i^a − y_i^b‖² (Xuan §2.3; §10), each term written
    out here with q_ij = w_ij / Σ_{k≠l} w_kl, and its gradient against central differences."""
    from embedscope.tsne.yoked import yoked_tsne_exact_objective_and_grad

    rng = np.random.default_rng(1)
    n, alpha = 9, 0.37
    P = []
    for _ in range(2):
        M = rng.random((n, n))
        M = M + M.T
        np.fill_diagonal(M, 0.0)
        P.append(M / M.sum())
    Ya, Yb = rng.normal(size=(n, 2)), rng.normal(size=(n, 2))

    def brute(Ya, Yb):
        total = 0.0
        for Y, Pm in ((Ya, P[0]), (Yb, P[1])):
            W = np.array([[0.0 if i == j else 1.0 / (1.0 + np.sum((Y[i] - Y[j]) ** 2)) for j in range(n)]
                          for i in range(n)])
            Q = W / W.sum()
            total += sum(Pm[i, j] * np.log(Pm[i, j] / Q[i, j]) for i in range(n) for j in range(n) if i != j)
        return total + alpha * sum(np.sum((Ya[i] - Yb[i]) ** 2) for i in range(n))

    C, ga, gb = yoked_tsne_exact_objective_and_grad(Ya, Yb, P[0], P[1], alpha)
    assert C == pytest.approx(brute(Ya, Yb), rel=1e-12)
    h = 1e-6
    for G, which in ((ga, 0), (gb, 1)):
        num = np.zeros_like(G)
        for i in range(n):
            for d in range(2):
                Ys = [Ya.copy(), Yb.copy()]
                Ys[which][i, d] += h
                up = brute(*Ys)
                Ys[which][i, d] -= 2 * h
                num[i, d] = (up - brute(*Ys)) / (2 * h)
        np.testing.assert_allclose(G, num, rtol=1e-5, atol=1e-7)


def test_yoked_run_records_weight_perplexity_seed_and_objective():
    """The default weight α = 0.01/N, the perplexity capped at (N − 1)/3, the seed, and C = Σ KL + α Σ‖Δ‖²
    with the KL of each map recomputed here from openTSNE's P (exact gradient: exact KL)."""
    from openTSNE.affinity import PerplexityBasedNN

    from embedscope.tsne import yoked_tsne

    A, B, _ = _two_sets(n=40)
    n = len(A)
    Ya, Yb, info = yoked_tsne(A, B, perplexity=30, seed=5, n_iter=60, early_exaggeration_iter=30,
                              negative_gradient_method="exact", return_info=True)
    assert info["alpha"] == pytest.approx(0.01 / n, rel=1e-15)
    assert info["alpha_times_n"] == pytest.approx(0.01, rel=1e-12)
    assert info["perplexity"] == pytest.approx((n - 1) / 3, rel=1e-15)
    assert info["perplexity_requested"] == 30.0
    assert info["seed"] == 5 and info["n"] == n and info["yoke"] == "points"
    assert info["initialization"].startswith("pca") and "Procrustes" in info["initialization"]

    def kl(Y, X):
        P = PerplexityBasedNN(X, perplexity=(n - 1) / 3, method="exact", random_state=5).P.toarray()
        D = ((Y[:, None, :] - Y[None, :, :]) ** 2).sum(-1)
        W = 1.0 / (1.0 + D)
        np.fill_diagonal(W, 0.0)
        Q = W / W.sum()
        m = P > 0
        return float(np.sum(P[m] * np.log(P[m] / Q[m])))

    assert info["kl_a"] == pytest.approx(kl(Ya, A), rel=1e-9)
    assert info["kl_b"] == pytest.approx(kl(Yb, B), rel=1e-9)
    yoke = 0.01 / n * float(sum(np.sum((Ya[i] - Yb[i]) ** 2) for i in range(n)))
    assert info["objective"] == pytest.approx(info["kl_a"] + info["kl_b"] + yoke, rel=1e-12)
    disp = np.mean([np.sqrt(np.sum((Ya[i] - Yb[i]) ** 2)) for i in range(n)])
    assert info["mean_displacement"] == pytest.approx(disp, rel=1e-12)


def test_yoked_joint_initialisation_is_pca_then_procrustes():
    """With no iterations the maps are the initialisation: map a openTSNE's PCA initialisation of A
    (std about 1e-4 along its first axis), map b the PCA initialisation of B rotated/reflected onto map a
    (the orthogonal matrix R minimising ‖B₀R − A₀‖, from the SVD written out here)."""
    from openTSNE.initialization import pca

    from embedscope.tsne import yoked_tsne

    A, B, _ = _two_sets()
    Ya, Yb = yoked_tsne(A, B, seed=3, n_iter=0, early_exaggeration_iter=0)
    Ia, Ib = pca(A, 2, random_state=3), pca(B, 2, random_state=3)
    np.testing.assert_array_equal(Ya, Ia)
    a0, b0 = Ia - Ia.mean(0), Ib - Ib.mean(0)
    u, _, vt = np.linalg.svd(b0.T @ a0)
    R = u @ vt
    np.testing.assert_allclose(Yb - Yb.mean(0), b0 @ R, atol=1e-12 * np.abs(b0).max())
    np.testing.assert_allclose(R.T @ R, np.eye(2), atol=1e-12)
    assert np.std(Ia[:, 0]) == pytest.approx(1e-4, rel=0.01)  # (openTSNE adds a tiny jitter)
    # the rotation is the best one: no other angle or reflection brings map b closer to map a
    best = np.sum((b0 @ R - a0) ** 2)
    for t in np.linspace(0, 2 * np.pi, 73):
        for s in (1, -1):
            Rt = np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]) @ np.diag([1, s])
            assert np.sum((b0 @ Rt - a0) ** 2) >= best - 1e-18


def test_yoke_weight_pulls_maps_together():
    """α = 0: the maps independent (map a openTSNE's own run bit for bit); larger α: a smaller mean
    displacement, and a very large α: the same map."""
    from openTSNE import TSNE

    from embedscope.tsne import yoked_tsne

    A, B, _ = _two_sets(n=60)
    kw = dict(seed=2, n_iter=150, early_exaggeration_iter=60)
    disp = []
    for alpha in (0.0, 0.01 / 60, 1.0 / 60, 100.0):
        Ya, Yb, info = yoked_tsne(A, B, alpha=alpha, return_info=True, **kw)
        disp.append(info["mean_displacement"])
        if alpha == 0.0:
            ref = np.asarray(TSNE(perplexity=info["perplexity"], random_state=2, n_iter=150,
                                  early_exaggeration_iter=60, n_jobs=1).fit(A))
            np.testing.assert_array_equal(Ya, ref)
    assert disp[0] > disp[1] > disp[2] > disp[3]
    assert disp[3] < 1e-2 * disp[0]


# ----------------------------------------------------------------------------- figures
def _face_colours(fig):
    from matplotlib.collections import PathCollection

    out = []
    for ax in fig.axes:
        for c in ax.collections:
            if isinstance(c, PathCollection) and len(c.get_offsets()):
                out.append(np.asarray(c.get_facecolors())[:, :3])
    return out


def test_a_class_keeps_its_colour_across_tsne_figures():
    """Class "c7" of a 12-class file: one colour in the single map, the joint map's class panels and
    the yoked maps, whatever other classes the figure shows and in whatever order the file lists them."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from embedscope.viz.style import ClassPalette
    from embedscope.viz.tsne import plot_joint_tsne, plot_tsne, plot_yoked_maps

    names = [f"c{i}" for i in range(12)]
    shuffled = [names[i] for i in np.random.default_rng(0).permutation(12)]
    want = np.asarray(ClassPalette(names)["c7"])[:3]
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(10, 2))
    lab = np.full(10, 7)
    lab_sh = np.full(10, shuffled.index("c7"))
    figs = [plot_tsne(Y, lab, class_names=names), plot_tsne(Y, lab_sh, class_names=shuffled),
            plot_joint_tsne(Y, Y + 1, lab, lab, class_names=names),
            plot_yoked_maps([Y, Y + 0.5], lab_sh, class_names=shuffled)]
    try:
        for fig in figs:
            cols = _face_colours(fig)
            class_cols = [c for c in cols if not np.allclose(c, [[0, 0, 0]]) and not
                          np.allclose(c, matplotlib.colors.to_rgb("#e69f00"))]
            assert class_cols
            for c in class_cols:
                if len(np.unique(c, axis=0)) == 1:  # (the joint map's split panel mixes black and orange)
                    np.testing.assert_allclose(c[0], want)
    finally:
        for fig in figs:
            plt.close(fig)


def test_yoked_zoom_is_drawn_at_equal_scale():
    """The zoom under a yoked map shows its class at the map's scale on both axes (a class spread
    tall was drawn stretched sideways to fill the wide zoom panel: a distorted map), and the dashed
    box on the map holds the zoom's window."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from embedscope.viz.tsne import plot_yoked_maps

    rng = np.random.default_rng(0)
    n = 300
    lab = np.arange(n) % 3
    Y = rng.normal(size=(n, 2)) * 3 + np.array([[-20, 0], [0, 0], [20, 0]])[lab]
    Y[lab == 1] = rng.normal(size=(100, 2)) * np.array([0.5, 6.0])  # class 1: tall and thin
    fig = plot_yoked_maps([Y, Y * 1.1], lab, inset_class=1)
    try:
        fig.canvas.draw()
        zooms = [ax for ax in fig.axes if "zoomed" in ax.get_title()]
        assert len(zooms) == 2
        for zax in zooms:
            x0, x1 = zax.get_xlim()
            y0, y1 = zax.get_ylim()
            bb = zax.get_window_extent()
            # data units per pixel, horizontally and vertically
            assert (x1 - x0) / bb.width == pytest.approx((y1 - y0) / bb.height, rel=0.02)
        maps = [ax for ax in fig.axes if ax not in zooms]
        for ax, zax, M in zip(maps, zooms, (Y, Y * 1.1)):
            box = [p for p in ax.patches if isinstance(p, Rectangle)][0]
            bx0, by0 = box.get_xy()
            bw, bh = box.get_width(), box.get_height()
            (x0, x1), (y0, y1) = zax.get_xlim(), zax.get_ylim()
            assert (bx0, by0, bw, bh) == pytest.approx((x0, y0, x1 - x0, y1 - y0), rel=1e-12)
            inside = M[lab == 1]
            q = np.percentile(inside, [2, 98], axis=0)
            assert x0 <= q[0, 0] and q[1, 0] <= x1 and y0 <= q[0, 1] and q[1, 1] <= y1
    finally:
        plt.close(fig)


def test_neighbours_caption_gives_the_euclidean_distance():
    """``--metric euclidean``: the caption gives the distance (``d 0.1650``), not its negation
    under a "-d" name (it read "-d -0.1650"); the value is ‖q − r‖ computed here."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from embedscope.viz.neighbours import draw_neighbours

    es, X, _ = _tied_set()
    ex = neighbour_examples(es, split="test", queries=3, k=3, metric="euclidean", seed=1)
    pics = [np.zeros((8, 8))] * 3
    fig = draw_neighbours(ex, pics, [pics] * 3)
    try:
        captions = [ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()]
        assert not any("-d" in c or "d -" in c for c in captions)
        for r, q in enumerate(ex.query_paths):
            for j, p in enumerate(ex.ref_paths[r]):
                d = float(np.sqrt(np.sum((X[int(q)] - X[int(p)]) ** 2)))
                name, value = fig.axes[r * 4 + j + 1].get_xlabel().split("\n")[1].split()
                decimals = len(value.split(".")[1])
                assert name == "d" and value == f"{d:.{decimals}f}", (name, value, d)
    finally:
        plt.close(fig)


def test_chain_of_maps_yoked_by_centroids_brute_force():
    """K = 3 maps yoked by class centroids: C = Σ_k KL_k + α Σ_{k<K} Σ_c n_c ‖μ_c^k − μ_c^{k+1}‖²
    (docs/methods.md §10), the class means and sizes written out here; the mean centroid
    displacement is the class-size weighted mean of ‖μ_c^k − μ_c^{k+1}‖."""
    from embedscope.tsne import yoke_penalty, yoked_tsne_maps

    A, B, y = _two_sets(n=36)
    C = A[:, ::-1] + 0.2
    alpha = 0.05
    Ys, info = yoked_tsne_maps([A, B, C], yoke="centroids", labels=y, alpha=alpha, seed=1, n_iter=40,
                               early_exaggeration_iter=20, negative_gradient_method="exact", return_info=True)
    classes = sorted(set(y.tolist()))
    mu = [{c: Ys[k][y == c].mean(0) for c in classes} for k in range(3)]
    size = {c: int(np.sum(y == c)) for c in classes}
    pen = alpha * sum(size[c] * np.sum((mu[k][c] - mu[k + 1][c]) ** 2) for k in range(2) for c in classes)
    assert yoke_penalty(Ys, alpha, yoke="centroids", labels=y)[0] == pytest.approx(pen, rel=1e-12)
    assert info["objective"] == pytest.approx(sum(info["kl"]) + pen, rel=1e-12)
    cd = sum(size[c] * np.sqrt(np.sum((mu[k][c] - mu[k + 1][c]) ** 2)) for k in range(2) for c in classes)
    assert info["mean_centroid_displacement"] == pytest.approx(cd / (len(y) * 2), rel=1e-12)
    assert info["alpha"] == alpha and info["n_maps"] == 3 and info["yoke"] == "centroids"


@pytest.mark.parametrize("name", ["鳥_bird_日本", "日本語の非常に長いクラス名です", "Laysan\x1b[31m_Albatross_0042",
                                  "Œdipe_Müller_été_Ωμέγα_long", "a\\b" * 9])
def test_short_text_fits_its_room_as_drawn(name):
    """A name cut to n characters is at most n characters *as drawn*: a character without a glyph is
    drawn as its escape (``\\u9ce5``, six characters), and an escape is kept or left out whole."""
    from embedscope.viz.style import drawable_text, short_text

    for n in (12, 16, 28):
        t = short_text(name, n)
        assert drawable_text(t) == t  # nothing left to escape at drawing time
        assert len(t) <= n, (t, n)
        assert "\x1b" not in t and not t.startswith("…")


def test_neighbours_captions_do_not_overlap():
    """Class names of characters the font cannot draw (CJK without a CJK font): each caption stays
    within its picture's column (they ran into the next caption, "…\\u672c✗ \\u9ce5…")."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from embedscope.viz.neighbours import draw_neighbours

    rng = np.random.default_rng(0)
    y = np.arange(30) % 3
    X = rng.normal(size=(30, 5)) + 3 * np.eye(5)[y]
    names = ["鳥_bird_日本_長い名前", "日本語の非常に長いクラス名です", "Black_footed_Albatross_0042"]
    es = store.EmbeddingSet.from_arrays(X.astype(np.float32), y, split="test", class_names=names)
    ex = neighbour_examples(es, split="test", queries=2, k=5, seed=0)
    pics = [np.zeros((8, 8))] * 2
    fig = draw_neighbours(ex, pics, [[np.zeros((8, 8))] * 5] * 2)
    try:
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        for row in range(2):
            boxes = [fig.axes[row * 6 + c].xaxis.label.get_window_extent(r) for c in range(6)]
            for a, b in zip(boxes, boxes[1:]):
                assert a.x1 < b.x0, (a, b)
    finally:
        plt.close(fig)
