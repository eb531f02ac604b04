"""t-SNE maps do not depend on the thread count (docs/methods.md §10).

From 1,000 points openTSNE's approximate neighbour search (Annoy) builds its trees on ``n_jobs``
threads, each thread with its own seed (seed + thread index) and its share of the trees, so
``n_jobs`` 1 and 2 gave different maps (coordinates apart by up to half the map's extent). The
affinities are now computed with the tree build on one thread; the gradients give the same bits on
any thread count, so the map, the KL divergence and the yoked objective are the same for any
``n_jobs`` -- and equal openTSNE's own ``n_jobs=1`` run.
"""

import csv

import numpy as np
import pytest
from openTSNE import TSNE
from openTSNE.affinity import PerplexityBasedNN

from embedscope import store
from embedscope.store import EmbeddingSet
from embedscope.synthetic import clustered
from embedscope.tsne import joint_tsne, single_tsne, yoked_tsne
from embedscope.tsne.joint import tsne_affinities

SHORT = {"n_iter": 15, "early_exaggeration_iter": 15}
THREADS = (1, 2, 4)  # more threads than this machine's cores is allowed (and was another map)


@pytest.fixture(scope="module")
def X():
    """1,000 points: openTSNE's switch from exact to approximate neighbours."""
    X, _ = clustered(1000, 16, 6, seed=3, noise=1.5)
    return X.astype(np.float64)


def _differs(P, Q) -> bool:
    return P.shape != Q.shape or (P != Q).nnz > 0


def test_affinities_are_the_same_on_any_thread_count_and_are_opentsne_single_thread(X):
    ref = PerplexityBasedNN(X, perplexity=30, n_jobs=1, random_state=0).P
    assert _differs(PerplexityBasedNN(X, perplexity=30, n_jobs=2, random_state=0).P, ref)  # openTSNE's dependence
    for n_jobs in THREADS:
        aff, how = tsne_affinities(X, 30, seed=0, n_jobs=n_jobs)
        assert not _differs(aff.P, ref)
        assert aff.knn_index.n_jobs == n_jobs  # the queries do run on the threads asked for
        assert how.startswith("approximate (Annoy, 50 trees built on 1 thread, seed 0)") and "90 neighbours" in how
    _, how = tsne_affinities(X[:999], 30, seed=0, n_jobs=2)  # openTSNE's exact search below 1,000
    assert how.startswith("exact (scikit-learn)")


def test_affinities_keep_opentsne_options_metric_and_tree_count(X):
    for kw in ({"metric": "cosine"}, {"knn_kwargs": {"n_trees": 10}}):
        ref = PerplexityBasedNN(X, perplexity=20, n_jobs=1, random_state=5, **kw).P
        aff, how = tsne_affinities(X, 20, seed=5, n_jobs=2, **kw)
        assert not _differs(aff.P, ref), kw
    assert "Annoy, 10 trees" in how


@pytest.mark.parametrize("method", ["bh", "fft"])
def test_single_map_and_kl_the_same_for_any_thread_count(X, method):
    runs = [single_tsne(X, n_jobs=n, seed=1, negative_gradient_method=method, return_info=True, **SHORT)
            for n in THREADS]
    Y1, info1 = runs[0]
    for (Y, info), n in zip(runs, THREADS):
        assert np.array_equal(Y, Y1), f"n_jobs={n}"
        assert info["kl_divergence"] == info1["kl_divergence"], f"n_jobs={n}"
    for (_, info), n in zip(runs, THREADS):
        assert info["n_jobs"] == n and info["neighbour_search"].startswith("approximate (Annoy")
        # what it does depend on: the machine's arithmetic (BLAS kernels of the PCA initialisation, libm)
        assert "BLAS" in info["numerics"] and "openTSNE 1." in info["numerics"]
    # and it is openTSNE's own single-thread run, map and KL bit for bit
    emb = TSNE(random_state=1, n_jobs=1, negative_gradient_method=method, **SHORT).fit(X)
    assert np.array_equal(Y1, np.asarray(emb))
    assert info1["kl_divergence"] == emb.kl_divergence


def test_joint_map_the_same_for_any_thread_count(X):
    maps = [joint_tsne(X[:600], X[600:], n_jobs=n, **SHORT) for n in (1, 2)]
    for Y_tr, Y_te in maps[1:]:
        assert np.array_equal(Y_tr, maps[0][0]) and np.array_equal(Y_te, maps[0][1])


def test_yoked_maps_kl_and_objective_the_same_for_any_thread_count(X):
    X_b = np.tanh(X @ np.random.default_rng(1).normal(size=(16, 12)))
    runs = [yoked_tsne(X, X_b, n_jobs=n, return_info=True, **SHORT) for n in (1, 2)]
    Y_a, Y_b, info = runs[0]
    for a, b, i in runs[1:]:
        assert np.array_equal(a, Y_a) and np.array_equal(b, Y_b)
        assert (i["kl_a"], i["kl_b"], i["objective"]) == (info["kl_a"], info["kl_b"], info["objective"])
        assert i["neighbour_search"] == info["neighbour_search"] and i["numerics"] == info["numerics"]


def test_tsne_command_writes_the_same_coordinates_with_n_jobs_1_and_2(X, tmp_path):
    from cli_run import cli_output

    n = X.shape[0]
    labels = np.arange(n) % 6
    es = EmbeddingSet(embeddings=X.astype(np.float32), labels=labels, paths=np.array([f"im/{i}.png" for i in range(n)]),
                      split=np.full(n, "test"), class_names=np.array([f"c{k}" for k in range(6)]))
    store.save(tmp_path / "e.h5", es)
    tables = []
    for jobs in ("1", "2"):
        out = tmp_path / f"t{jobs}.png"
        cli_output(["tsne", str(tmp_path / "e.h5"), "--n-iter", "10", "--n-jobs", jobs, "-o", str(out),
                    "--no-progress"])
        with open(out.with_suffix(".csv"), newline="") as f:
            tables.append([(r["path"], r["x"], r["y"]) for r in csv.DictReader(f)])
    assert len(tables[0]) == n and tables[0] == tables[1]
