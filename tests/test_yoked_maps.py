"""Yoked t-SNE of K >= 2 maps, yoked by points or by class centroids (docs/methods.md §10):
the penalty and its gradient against loops and finite differences, the exact implicit step, the
run (two maps as before, bit for bit; K maps against the stated objective), the analysis and the
command."""

import csv
import json

import numpy as np
import pytest

from embedscope import store
from embedscope.analyses import yoke as yoke_analysis
from embedscope.cli import main
from embedscope.errors import EmbedscopeError
from embedscope.store import EmbeddingSet
from embedscope.tsne import yoke_penalty, yoked_tsne, yoked_tsne_maps
from embedscope.tsne.joint import tsne_affinities
from embedscope.tsne.yoked import ChainYoke, _Yoke, exact_kl_and_grad

SHORT = dict(perplexity=5, early_exaggeration_iter=40, n_iter=60)


def _maps(K=4, N=30, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((N, 2)) for _ in range(K)], rng.integers(0, 5, N)


def _penalty_loops(Ys, alpha, yoke, labels):
    """The yoke straight from the formula, with loops."""
    total = 0.0
    for k in range(len(Ys) - 1):
        if yoke == "points":
            for i in range(len(labels)):
                total += float(np.sum((Ys[k][i] - Ys[k + 1][i]) ** 2))
        else:
            for c in np.unique(labels):
                m = labels == c
                total += m.sum() * float(np.sum((Ys[k][m].mean(0) - Ys[k + 1][m].mean(0)) ** 2))
    return alpha * total


@pytest.mark.parametrize("yoke", ["points", "centroids"])
@pytest.mark.parametrize("K", [2, 3, 5])
def test_penalty_and_gradient(yoke, K):
    Ys, lab = _maps(K)
    value, grads = yoke_penalty(Ys, 0.37, yoke=yoke, labels=lab)
    assert value == pytest.approx(_penalty_loops(Ys, 0.37, yoke, lab), rel=1e-12)
    eps = 1e-6
    for k in range(K):
        for i in (0, 7, 29):
            for j in range(2):
                up = [y.copy() for y in Ys]
                dn = [y.copy() for y in Ys]
                up[k][i, j] += eps
                dn[k][i, j] -= eps
                num = (yoke_penalty(up, 0.37, yoke=yoke, labels=lab)[0]
                       - yoke_penalty(dn, 0.37, yoke=yoke, labels=lab)[0]) / (2 * eps)
                assert grads[k][i, j] == pytest.approx(num, abs=1e-6)


def test_centroid_yoke_is_never_larger_than_the_points_yoke():
    Ys, lab = _maps(3)
    assert yoke_penalty(Ys, 1.0, yoke="centroids", labels=lab)[0] <= yoke_penalty(Ys, 1.0)[0]
    same = [Ys[0], Ys[0] + np.array([0.5, -1.0])]  # a shift moves every centroid alike
    assert yoke_penalty(same, 1.0, yoke="centroids", labels=lab)[0] == pytest.approx(yoke_penalty(same, 1.0)[0])


@pytest.mark.parametrize("yoke", ["points", "centroids"])
@pytest.mark.parametrize("K", [2, 3, 6])
def test_implicit_step_solves_its_equations(yoke, K):
    """y' = ỹ − s ⊙ ∇yoke(y') with per-coordinate steps s (the proximal step, exact)."""
    Ys, lab = _maps(K, seed=K)
    rng = np.random.default_rng(1)
    steps = [rng.uniform(0.05, 4.0, (30, 2)) for _ in range(K)]
    new = ChainYoke(0.8, yoke, lab).prox(Ys, steps)
    g = yoke_penalty(new, 0.8, yoke=yoke, labels=lab)[1]
    for k in range(K):
        np.testing.assert_allclose(new[k], Ys[k] - steps[k] * g[k], atol=1e-12)
    if K == 2 and yoke == "points":  # the closed form of two maps
        for a, b in zip(new, _Yoke(0.8).prox(Ys, steps)):
            np.testing.assert_allclose(a, b, atol=1e-14)


def _data(N=90, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(N) % 3
    X = rng.standard_normal((3, 6))[y] * 2 + rng.standard_normal((N, 6))
    return [X, X @ rng.standard_normal((6, 5)), np.tanh(X @ rng.standard_normal((6, 4)))], y


def test_two_maps_are_yoked_tsne_bit_for_bit():
    Xs, _ = _data()
    Ya, Yb, info = yoked_tsne(Xs[0], Xs[1], alpha=0.5 / 90, seed=2, return_info=True, **SHORT)
    (Ma, Mb), minfo = yoked_tsne_maps(Xs[:2], alpha=0.5 / 90, seed=2, return_info=True, **SHORT)
    np.testing.assert_array_equal(Ya, Ma)
    np.testing.assert_array_equal(Yb, Mb)
    assert info["kl_a"] == minfo["kl"][0] and info["kl_b"] == minfo["kl"][1]
    assert info["objective"] == minfo["objective"] and info["yoke"] == "points" and info["n_maps"] == 2


def test_three_maps_unyoked_start_as_independent_runs():
    """α = 0: no map sees another; the first is the first of a two-map run (openTSNE's own)."""
    Xs, _ = _data()
    Ys = yoked_tsne_maps(Xs, alpha=0.0, **SHORT)
    Ya, _ = yoked_tsne(Xs[0], Xs[1], alpha=0.0, **SHORT)
    np.testing.assert_array_equal(Ys[0], Ya)
    assert len(Ys) == 3 and all(Y.shape == (90, 2) for Y in Ys)


@pytest.mark.parametrize("yoke", ["points", "centroids"])
def test_k_maps_descend_the_stated_objective(yoke):
    """With the exact gradient, info["objective"] is C = Σ_k KL_k + yoke evaluated independently at
    the returned maps, and (points) they are near a stationary point of C: the total gradient is
    small beside the yoke's own, so α is neither lost nor rescaled."""
    Xs, y = _data(60)
    alpha = 2.0 / 60
    Ys, info = yoked_tsne_maps(Xs, yoke=yoke, labels=y, alpha=alpha, negative_gradient_method="exact",
                               perplexity=5, early_exaggeration_iter=100, n_iter=700, return_info=True)
    Ps = [tsne_affinities(X / 1.0, info["perplexity"], seed=0)[0].P for X in Xs]
    kls, kgrads = zip(*(exact_kl_and_grad(Y, P) for Y, P in zip(Ys, Ps)))
    value, ygrads = yoke_penalty(Ys, alpha, yoke=yoke, labels=y)
    assert info["objective"] == pytest.approx(sum(kls) + value, rel=1e-9)
    assert info["kl"] == pytest.approx(list(kls), rel=1e-9)
    if yoke == "points":  # (the centroids' yoke is met almost for free here: its gradient is at the
        # optimiser's noise level, ~1e-5, like the KL's; its effect is tested below)
        total = np.concatenate([kg + yg for kg, yg in zip(kgrads, ygrads)])
        own = np.concatenate(ygrads)
        assert np.sqrt(np.mean(total ** 2)) < 0.01 * np.sqrt(np.mean(own ** 2))


def test_stronger_yokes_align_more_and_centroids_leave_points_free():
    Xs, y = _data()
    runs = {}
    for yoke in ("points", "centroids"):
        for aN in (0.0, 0.01, 1.0):
            runs[yoke, aN] = yoked_tsne_maps(Xs, yoke=yoke, labels=y, alpha=aN / 90, return_info=True, **SHORT)[1]
    p = [runs["points", aN]["mean_displacement"] for aN in (0.0, 0.01, 1.0)]
    c = [runs["centroids", aN]["mean_centroid_displacement"] for aN in (0.0, 0.01, 1.0)]
    assert p[0] > p[1] > p[2] and c[0] > c[1] > c[2]
    assert c[2] < 0.05 * c[0]  # the class means agree ...
    assert runs["centroids", 1.0]["mean_displacement"] > 5 * p[2]  # ... while the points stay free
    assert len(runs["points", 0.01]["mean_displacements"]) == 2


def test_k_maps_refuse_what_they_cannot_map():
    Xs, y = _data()
    with pytest.raises(EmbedscopeError, match="two or more"):
        yoked_tsne_maps([Xs[0]])
    with pytest.raises(EmbedscopeError, match="same points"):
        yoked_tsne_maps([Xs[0], Xs[1], Xs[2][:-1]])
    with pytest.raises(EmbedscopeError, match="needs the labels"):
        yoked_tsne_maps(Xs, yoke="centroids")
    with pytest.raises(EmbedscopeError, match="yoke"):
        yoked_tsne_maps(Xs, yoke="classes")
    with pytest.raises(EmbedscopeError, match="labels"):
        yoked_tsne_maps(Xs, yoke="centroids", labels=y[:-1])


# ----------------------------------------------------------------------------- analysis and command
def _es(seed, n_per=10, dim=6, perm=False):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(4), n_per)
    X = (rng.normal(size=(4, dim))[y] * 3 + rng.normal(size=(len(y), dim))).astype(np.float32)
    paths = np.array([f"img/{i:03d}.png" for i in range(len(y))])
    idx = np.random.default_rng(seed + 100).permutation(len(y)) if perm else np.arange(len(y))
    return EmbeddingSet(embeddings=X[idx], labels=y[idx], paths=paths[idx], split=np.full(len(y), "test")[idx],
                        class_names=np.array(["ant", "bee", "cat", "dog"]))


@pytest.fixture(scope="module")
def epochs(tmp_path_factory):
    d = tmp_path_factory.mktemp("epochs")
    for k in range(3):
        store.save(d / f"e{k + 1}.h5", _es(k, perm=k == 1))
    return d


def test_analysis_of_three_files_matches_rows_by_path(epochs):
    files = [epochs / f"e{k + 1}.h5" for k in range(3)]
    r = yoke_analysis(*files, yoke="centroids", perplexity=5, n_iter=60)
    sets = [store.load(f) for f in files]
    order = [{p: i for i, p in enumerate(es.paths)} for es in sets]
    Ys = r.arrays["Ys"]
    assert len(Ys) == 3 and [row["path"] for row in r.table] == list(sets[0].paths)
    direct = yoked_tsne_maps([es.embeddings[[o[p] for p in sets[0].paths]] for es, o in zip(sets, order)],
                             yoke="centroids", labels=sets[0].labels, perplexity=5, n_iter=60)
    for a, b in zip(Ys, direct):
        np.testing.assert_array_equal(a, b)
    row = r.table[5]
    assert list(row)[4:] == ["x_1", "y_1", "x_2", "y_2", "x_3", "y_3", "displacement_1_2", "displacement_2_3"]
    assert row["displacement_2_3"] == pytest.approx(float(np.linalg.norm(Ys[1][5] - Ys[2][5])))
    assert set(r.values) == {"kl_1", "kl_2", "kl_3", "mean_displacement", "mean_centroid_displacement", "n"}
    assert r.provenance["yoke"] == "centroids" and len(r.provenance["sources"]) == 3
    assert "yoked by class centroids" in r.provenance["title"]


def test_command_maps_three_files(epochs, tmp_path, capsys):
    out = tmp_path / "seq.png"
    files = [str(epochs / f"e{k + 1}.h5") for k in range(3)]
    rc = main(["yoke", *files, "--yoke", "centroids", "--perplexity", "5", "--n-iter", "60", "--names", "epoch 1",
               "epoch 2", "epoch 3", "--inset-class", "bee", "-o", str(out), "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "centroids" in printed and "mean_centroid_displacement" in printed
    for ext in (".png", ".pdf", ".csv", ".json"):
        assert out.with_suffix(ext).stat().st_size > 200
    with open(out.with_suffix(".csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 40 and "x_3" in rows[0] and "displacement_2_3" in rows[0]
    info = json.loads(out.with_suffix(".json").read_text())["provenance"]
    assert info["n_maps"] == 3 and info["names"] == ["epoch 1", "epoch 2", "epoch 3"] and len(info["kl"]) == 3


def test_command_usage_errors(epochs, tmp_path, capsys):
    one = str(epochs / "e1.h5")
    out = str(tmp_path / "y.png")
    assert main(["yoke", one, "-o", out]) == 2
    assert "two or more" in capsys.readouterr().err
    assert main(["yoke", one, one, "--names", "a", "b", "c", "-o", out]) == 2
    assert "one name per file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # argparse's own usage error
        main(["yoke", one, one, "--yoke", "classes", "-o", out])
    assert e.value.code == 2
    assert not (tmp_path / "y.png").exists()
