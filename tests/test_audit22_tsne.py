"""Audit 22: joint / yoked t-SNE and the same-vs-different scatter (docs/methods.md §10)."""

import contextlib
import io

import matplotlib
import numpy as np
import pytest

from embedscope.errors import EmbedscopeError

matplotlib.use("Agg")


def _run(args):
    from embedscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, out.getvalue(), err.getvalue()


def _save(path, X, y, split="test", **kw):
    from embedscope.store import EmbeddingSet, save

    save(path, EmbeddingSet.from_arrays(np.asarray(X, np.float32), y, split=split, **kw), force=True)
    return str(path)


# ---------------------------------------------------------------- one-dimensional embeddings
@pytest.mark.parametrize("fn", ["single", "joint", "yoked"])
def test_one_dimensional_embeddings_are_a_one_line_error(fn):
    """D = 1: openTSNE's PCA initialisation failed with a bare ValueError from scikit-learn."""
    from embedscope.tsne import joint_tsne, single_tsne, yoked_tsne

    X = np.random.default_rng(0).normal(size=(30, 1))
    call = {"single": lambda: single_tsne(X, n_iter=10, early_exaggeration_iter=10),
            "joint": lambda: joint_tsne(X[:15], X[15:], n_iter=10, early_exaggeration_iter=10),
            "yoked": lambda: yoked_tsne(X, X, n_iter=10, early_exaggeration_iter=10)}[fn]
    with pytest.raises(EmbedscopeError, match="at least 2 dimensions"):
        call()


def test_cli_tsne_of_one_dimensional_file_exits_1_without_valueerror(tmp_path):
    f = _save(tmp_path / "d1.h5", np.random.default_rng(0).normal(size=(40, 1)), np.arange(40) % 4)
    rc, _, err = _run(["tsne", f, "-o", str(tmp_path / "t.png"), "--no-progress"])
    assert rc == 1
    assert "at least 2 dimensions" in err and "ValueError" not in err and "Traceback" not in err
    assert "d1.h5: t-SNE needs" in err  # the file, not the internal array's name
    g = _save(tmp_path / "g.h5", np.random.default_rng(1).normal(size=(40, 1)), np.arange(40) % 4)
    rc, _, err = _run(["yoke", f, g, "--names", "a", "b", "-o", str(tmp_path / "y.png"), "--no-progress"])
    assert rc == 1 and "d1.h5: t-SNE needs" in err
    assert not list(tmp_path.glob("t.*"))


# ---------------------------------------------------------------- the settings note fits the figure
def _texts_inside(fig):
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    width = fig.bbox.width
    return [t.get_text() for t in fig.texts
            if t.get_text() and (t.get_window_extent(r).x0 < -1 or t.get_window_extent(r).x1 > width + 1)]


def _many_classes(n=600, c=60):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 2)), np.arange(n) % c, [f"class {i}" for i in range(c)]


TSNE_INFO = {"perplexity": 30.0, "seed": 0, "initialization": "pca", "n_iter": 500, "kl_divergence": 2.905}
YOKE_INFO = {"alpha": 1.116e-05, "alpha_times_n": 0.01, "yoke": "centroids", "perplexity": 30.0, "seed": 0,
             "kl_a": 0.9768, "kl_b": 0.9813, "mean_displacement": 1.004, "mean_centroid_displacement": 0.006559}


@pytest.mark.parametrize("which", ["single", "joint", "yoked_many_classes", "yoked_centroids"])
def test_settings_note_stays_inside_the_figure(which):
    """A note wider than the figure (more than 40 classes: the legend note; yoking centroids: the
    longer settings) ran past the left edge, and the saved PNG (tight bounding box) got a blank band
    as wide as the panels beside them."""
    import matplotlib.pyplot as plt

    from embedscope.viz import plot_joint_tsne, plot_tsne, plot_yoked_maps

    Y, lab, names = _many_classes()
    fig = {"single": lambda: plot_tsne(Y, lab, class_names=names, info=TSNE_INFO),
           "joint": lambda: plot_joint_tsne(Y[:300], Y[300:], lab[:300], lab[300:], class_names=names,
                                            info=TSNE_INFO),
           "yoked_many_classes": lambda: plot_yoked_maps([Y, Y + 1], lab, names=["a", "b"], class_names=names,
                                                         info=YOKE_INFO, split="test"),
           "yoked_centroids": lambda: plot_yoked_maps([Y, Y + 1], lab % 5, names=["a", "b"], info=YOKE_INFO,
                                                      split="test", inset_class=2)}[which]()
    try:
        assert _texts_inside(fig) == []
        note = [t.get_text() for t in fig.texts if "perplexity=30" in t.get_text()]
        assert len(note) == 1 and "\n" in note[0]  # wrapped, every setting kept
        assert "seed=0" in note[0].replace("\n", " ")
        if fig.legends:  # the class legend sits above the note's lines, not on them
            fig.canvas.draw()
            r = fig.canvas.get_renderer()
            note_box = [t for t in fig.texts if "perplexity=30" in t.get_text()][0].get_window_extent(r)
            assert all(leg.get_window_extent(r).y0 >= note_box.y1 - 1 for leg in fig.legends)
    finally:
        plt.close(fig)


def test_short_note_is_left_on_one_line():
    import matplotlib.pyplot as plt

    from embedscope.viz import plot_tsne

    Y, lab, _ = _many_classes(60, 3)
    fig = plot_tsne(Y, lab, info={"perplexity": 30.0, "seed": 0})
    try:
        assert [t.get_text() for t in fig.texts] == ["openTSNE: perplexity=30, seed=0"]
    finally:
        plt.close(fig)


# ---------------------------------------------------------------- yoke --inset-class
def test_yoke_wrong_inset_class_is_refused_before_the_maps(tmp_path, monkeypatch):
    """A class not among the mapped images was refused only after the whole yoked t-SNE had run
    (minutes at 60,000 points), and nothing was written."""
    import embedscope.tsne.yoked as yoked

    rng = np.random.default_rng(0)
    y = np.arange(60) % 3
    a = _save(tmp_path / "a.h5", rng.normal(size=(60, 4)), y)
    b = _save(tmp_path / "b.h5", rng.normal(size=(60, 4)), y)

    def boom(*_a, **_k):
        raise AssertionError("the maps were computed before --inset-class was checked")

    monkeypatch.setattr(yoked, "yoked_tsne_maps", boom)
    rc, _, err = _run(["yoke", a, b, "--inset-class", "7", "-o", str(tmp_path / "y.png"), "--no-progress"])
    assert rc == 1, err
    assert "--inset-class 7" in err and "AssertionError" not in err


# ---------------------------------------------------------------- numbers checked against the definitions
def test_scatter_matches_brute_force_with_lone_point_and_duplicate():
    from embedscope.analyses import scatter
    from embedscope.store import EmbeddingSet

    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 5))
    y = rng.integers(0, 4, 60)
    y[0] = 9  # a class of one image (train): left out
    X[5] = X[6]  # a duplicate
    split = np.where(np.arange(60) < 30, "train", "test")
    es = EmbeddingSet.from_arrays(X.astype(np.float32), y, split=split)
    for metric in ("cosine", "dot", "euclidean"):
        r = scatter(es, metric=metric)
        for s in ("train", "test"):
            p = es.subset(s)
            Z = p.embeddings.astype(np.float64)
            if metric == "cosine":
                Z = Z / np.linalg.norm(Z, axis=1, keepdims=True)
            S = -np.sqrt(((Z[:, None] - Z[None]) ** 2).sum(-1)) if metric == "euclidean" else Z @ Z.T
            np.fill_diagonal(S, -np.inf)
            same = p.labels[:, None] == p.labels[None]
            ss = np.where(same, S, -np.inf).max(1)
            sd = np.where(~same, S, -np.inf).max(1)
            ok = np.isfinite(ss)
            a, b = r.arrays["panels"][s]
            np.testing.assert_allclose(a[ok], ss[ok], rtol=0, atol=1e-12)
            np.testing.assert_allclose(b, sd, rtol=0, atol=1e-12)
            assert np.isnan(a[~ok]).all() and r.values[f"left_out_{s}"] == int((~ok).sum())
            assert r.values[f"below_diagonal_{s}"] == pytest.approx(float(np.mean(sd[ok] < ss[ok])))


def test_yoked_objective_is_the_documented_formula():
    """C = Σ_k KL(P^k‖Q^k) + α Σ_{k<K} Σ_i ‖y_i^k − y_i^{k+1}‖² (points), or with the class-size
    weighted centroid yoke α Σ_k Σ_c n_c ‖μ_c^k − μ_c^{k+1}‖² (docs/methods.md §10)."""
    from embedscope.tsne import yoked_tsne_maps
    from embedscope.tsne.joint import tsne_affinities
    from embedscope.tsne.yoked import exact_kl_and_grad

    rng = np.random.default_rng(0)
    n = 90
    y = rng.integers(0, 3, n)
    C = rng.normal(size=(3, 6)) * 3
    Xs = [C[y] + rng.normal(size=(n, 6)), C[y] @ rng.normal(size=(6, 5)) + rng.normal(size=(n, 5))]
    Xs.append(Xs[1] + 0.5 * rng.normal(size=(n, 5)))
    for yoke in ("points", "centroids"):
        Ys, info = yoked_tsne_maps(Xs, yoke=yoke, labels=y, alpha=0.05 / n, n_iter=60, early_exaggeration_iter=40,
                                   negative_gradient_method="exact", return_info=True)
        alpha = info["alpha"]
        if yoke == "points":
            pen = alpha * sum(np.sum((Ys[k] - Ys[k + 1]) ** 2) for k in range(2))
        else:
            pen = alpha * sum((y == c).sum() * np.sum((Ys[k][y == c].mean(0) - Ys[k + 1][y == c].mean(0)) ** 2)
                              for k in range(2) for c in range(3))
        kls = [exact_kl_and_grad(Y, tsne_affinities(X, info["perplexity"], seed=0)[0].P)[0]
               for Y, X in zip(Ys, Xs)]
        assert info["objective"] == pytest.approx(sum(kls) + pen, rel=1e-12)
        assert info["kl"] == pytest.approx(kls, rel=1e-12)
        disp = np.mean([np.linalg.norm(Ys[k] - Ys[k + 1], axis=1) for k in range(2)])
        assert info["mean_displacement"] == pytest.approx(disp, rel=1e-12)


# ---------------------------------------------------------------- --parquet beside the CSV
@pytest.mark.parametrize("cmd", ["tsne", "scatter", "yoke"])
def test_parquet_table_equals_the_csv_and_is_checked_up_front(tmp_path, cmd):
    import pandas as pd

    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 5)) + np.repeat(np.eye(5)[:3] * 4, 20, axis=0)
    y = np.repeat(np.arange(3), 20)
    a = _save(tmp_path / "a.h5", X, y)
    files = [a, _save(tmp_path / "b.h5", X + rng.normal(size=X.shape) * 0.1, y)] if cmd == "yoke" else [a]
    extra = ["--n-iter", "20"] if cmd != "scatter" else []
    pq = tmp_path / "t.parquet"
    base = [cmd, *files, "-o", str(tmp_path / "t.png"), "--no-progress", *extra]
    rc, out, err = _run([*base, "--parquet", str(pq)])
    assert rc == 0, err
    assert str(pq) in out
    c = pd.read_csv(tmp_path / "t.csv", keep_default_na=False)
    p = pd.read_parquet(pq)
    assert list(c.columns) == list(p.columns) and len(c) == len(p) == 60
    for col in c.columns:
        if p[col].dtype.kind == "f":
            np.testing.assert_array_equal(c[col].to_numpy(float), p[col].to_numpy(float))
        else:
            assert list(c[col].astype(str)) == list(p[col].astype(str)), col
    # an existing --parquet needs --force, before any work; it may not be the CSV beside the figure
    (tmp_path / "t2.parquet").write_bytes(b"keep")
    rc, _, err = _run([cmd, *files, "-o", str(tmp_path / "u.png"), "--no-progress", *extra,
                       "--parquet", str(tmp_path / "t2.parquet")])
    assert rc == 1 and "already exists" in err and (tmp_path / "t2.parquet").read_bytes() == b"keep"
    assert not list(tmp_path.glob("u.*"))
    rc, _, err = _run([*base, "--force", "--parquet", str(tmp_path / "t.csv")])
    assert rc == 2 and "figure's own outputs" in err
    rc, _, err = _run([*base, "--force", "--parquet", a])
    assert rc == 2 and "input file" in err


def test_scatter_of_a_split_of_lone_images_is_one_line(tmp_path):
    """Every class of one image: no point has a same-class partner (an empty panel and R@1 NaN before)."""
    f = _save(tmp_path / "lone.h5", np.random.default_rng(0).normal(size=(4, 3)), np.arange(4))
    rc, _, err = _run(["scatter", f, "-o", str(tmp_path / "s.png"), "--no-progress"])
    assert rc == 1 and "each of the 4 classes of the test split has one image" in err
    assert len(err.strip().splitlines()) == 1 and not list(tmp_path.glob("s.*"))
