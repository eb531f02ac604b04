"""Thirty-fifth session's audit of the Python API's bad input: each call is one EmbedscopeError line
(a flag "no" was truthy and switched the option on, `save(..., force="no")` replaced the file; other
calls failed deep in numpy, scikit-learn or h5py)."""

import numpy as np
import pandas as pd
import pytest

from embedscope import metrics as M
from embedscope.errors import EmbedscopeError
from embedscope.metrics.agreement import agreement_matrix, fisher_z_mean
from embedscope.store import EmbeddingSet, load, save

RNG = np.random.default_rng(0)
X = RNG.standard_normal((60, 8)).astype("float32")
Y = np.repeat(np.arange(6), 10)
A = RNG.random((4, 6, 6))
B = RNG.random((4, 6, 6))


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    p = tmp_path_factory.mktemp("api") / "a.h5"
    save(p, EmbeddingSet.from_arrays(X, Y, split=np.where(np.arange(60) < 30, "train", "test")))
    return p


FLAGS = {
    "exclude_self": lambda v: M.knn_search(X, k=1, exclude_self=v),
    "normalize": lambda v: M.property_precision(X, {"p": Y}, normalize=v),
    "center": lambda v: M.class_conditioned_spectra(X, Y, center=v),
    "prepared": lambda v: M.kmeans_nmi_f1(X, Y, prepared=v),
    "per_query": lambda v: M.retrieval_metrics(X, Y, per_query=v, include=["P@1"], device="cpu"),
    "keep_spectrum": lambda v: M.geometry_report(X, Y, keep_spectrum=v),
    "return_info": lambda v: M.kmeans_labels(X, 6, return_info=v),
}


@pytest.mark.parametrize("flag", sorted(FLAGS))
def test_a_flag_must_be_a_bool(flag):
    with pytest.raises(EmbedscopeError, match=f"{flag} must be True or False, got 'no'"):
        FLAGS[flag]("no")
    FLAGS[flag](False)  # (a bool passes)


def test_alpha_req_center_and_load_finite(stored):
    with pytest.raises(EmbedscopeError, match="center must be True or False"):
        M.alpha_req(X, center="no")
    with pytest.raises(EmbedscopeError, match="finite must be True or False"):
        load(stored, finite="no")


def test_force_no_replaces_nothing(stored, tmp_path):
    from embedscope.analyses import geometry

    before = stored.read_bytes()
    with pytest.raises(EmbedscopeError, match="force must be True or False, got 'no'"):
        save(stored, EmbeddingSet.from_arrays(X[:10], Y[:10]), force="no")
    assert stored.read_bytes() == before
    r = geometry(stored, split="train")
    out = tmp_path / "g.csv"
    r.to_csv(out)
    kept = out.read_bytes()
    with pytest.raises(EmbedscopeError, match="force must be True or False"):
        r.to_csv(out, force="no")
    with pytest.raises(EmbedscopeError, match="table must be True or False"):
        r.to_frame(table="no")
    assert out.read_bytes() == kept


@pytest.mark.parametrize("call,match", [
    (lambda: M.relevant_ranks(X, Y, block=0), "block"),
    (lambda: M.relevant_ranks(X, Y, block="x"), "block"),
    (lambda: M.alpha_req(X, k_min=10 ** 30), "k_min"),
    (lambda: M.geometry_report(X, Y, k_min=10 ** 30), "k_min"),
    (lambda: M.property_precision(X, {"p": Y}, permutations=10 ** 30), "permutations"),
    (lambda: M.geometry_report(X, Y, paths=["a"]), "paths"),
    (lambda: M.geometry_report(X, Y, paths="abcdefgh"), "paths"),
    (lambda: M.geometry_report(X, Y, rows=5), "rows"),
    (lambda: agreement_matrix(None), "maps"),
    (lambda: agreement_matrix(m for m in [A, B]), "maps"),
    (lambda: agreement_matrix([A, None]), r"maps\[1\]"),
    (lambda: agreement_matrix([A, B], families=[None, "b"]), "families"),
    (lambda: fisher_z_mean("abc"), "r must"),
    (lambda: fisher_z_mean(None), "r must"),
    (lambda: fisher_z_mean([np.inf, np.inf]), r"\[-1, 1\]"),
    (lambda: fisher_z_mean([2.0, 0.5]), r"\[-1, 1\]"),
    (lambda: fisher_z_mean([0.2], clip=None), "clip"),
    (lambda: fisher_z_mean([0.2], clip=-1), "clip"),
    (lambda: EmbeddingSet.from_arrays(X, Y, class_names=6), "class_names"),
    (lambda: EmbeddingSet.from_arrays(X, Y, class_names=[["a"]] * 6), "class_names"),
    (lambda: EmbeddingSet.from_arrays(X, Y, properties=[1, 2]), "properties must be a mapping"),
    (lambda: EmbeddingSet.from_arrays(X, Y, attrs="abc"), "attrs must be a mapping"),
    (lambda: EmbeddingSet.from_arrays(X, Y).sample("3"), "must be an integer"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_input_is_one_line(call, match):
    with pytest.raises(EmbedscopeError, match=match):
        call()


def test_store_refuses_properties_it_cannot_hold(tmp_path):
    with pytest.raises(EmbedscopeError, match=r"property 'p' has shape \(59, 2\)"):
        save(tmp_path / "a.h5", EmbeddingSet.from_arrays(X, Y, properties={"p": np.zeros((59, 2))}))
    with pytest.raises(EmbedscopeError, match="holds datetime64"):
        save(tmp_path / "b.h5", EmbeddingSet.from_arrays(X, Y, properties={"p": pd.date_range("2020", periods=60)}))
    with pytest.raises(EmbedscopeError, match="attrs must be a mapping"):
        save(tmp_path / "c.h5", EmbeddingSet.from_arrays(X, Y), attrs=[1])
    assert not list(tmp_path.iterdir())


def test_valid_calls_still_work():
    assert M.property_precision(X, {"p": Y}, max_r=10 ** 30)["p"]["R-Prec"] == M.property_precision(X, {"p": Y})["p"]["R-Prec"]
    assert agreement_matrix(np.stack([A, B]))["r_mean"][0, 1] == agreement_matrix([A, B])["r_mean"][0, 1]
    assert fisher_z_mean([0.2, np.nan])["n_undefined"] == 1
    assert EmbeddingSet.from_arrays(X, Y).sample(10).n == 10


def test_tsne_seed_beyond_uint32(stored):
    from embedscope.analyses import tsne

    with pytest.raises(EmbedscopeError, match="seed must be at most"):
        tsne(stored, seed=2 ** 32)


@pytest.mark.parametrize("call,match", [
    (lambda T: T.single_tsne(X, seed=-1), "seed"),
    (lambda T: T.single_tsne(X, seed="x"), "seed"),
    (lambda T: T.single_tsne(X, n_jobs=0), "n_jobs"),
    (lambda T: T.single_tsne(X, early_exaggeration_iter="x"), "early_exaggeration_iter"),
    (lambda T: T.yoked_tsne(X, X, seed=2 ** 32), "seed"),
    (lambda T: T.yoked_tsne(X, X, alpha="x"), "alpha"),
    (lambda T: T.yoked_tsne(X, X, early_exaggeration=-1), "early_exaggeration"),
    (lambda T: T.yoked_tsne(X, X, momentum=-1), "momentum"),
    (lambda T: T.yoked_tsne(X, X, theta=float("nan")), "theta"),
])
def test_tsne_settings_are_one_line(call, match):
    from embedscope import tsne as T

    with pytest.raises(EmbedscopeError, match=match):
        call(T)


@pytest.mark.parametrize("call,match", [
    (lambda T: T.stratified_subsample(None, 10), "labels"),
    (lambda T: T.stratified_subsample([None] * 60, 10), "labels"),
    (lambda T: T.stratified_subsample(Y, None), "points to keep"),
    (lambda T: T.stratified_subsample(Y, float("nan")), "points to keep"),
    (lambda T: T.stratified_subsample(Y, 10, "3"), "seed"),
    (lambda T: T.stratum_quotas(None, 3), "counts"),
    (lambda T: T.stratum_quotas([-1, 5], 3), "counts"),
    (lambda T: T.stratum_quotas([5, 5], -1), "rows to keep"),
    (lambda T: T.effective_perplexity(None, 100), "perplexity"),
    (lambda T: T.effective_perplexity(30, float("nan")), "points"),
    (lambda T: T.default_alpha(0), "points"),
    (lambda T: T.yoke_penalty(None, 1.0), "two or more maps"),
    (lambda T: T.yoke_penalty([np.zeros((4, 2))], 1.0), "two or more maps"),
    (lambda T: T.yoke_penalty([np.zeros((4, 2)), np.zeros((3, 2))], 1.0), "one shape"),
    (lambda T: T.yoke_penalty([np.zeros((4, 2))] * 2, -1), "alpha"),
])
def test_tsne_helpers_are_one_line(call, match):
    from embedscope import tsne as T

    with pytest.raises(EmbedscopeError, match=match):
        call(T)


def test_tsne_helpers_keep_their_values():
    from embedscope import tsne as T

    assert T.stratum_quotas([50, 30, 20], 10).tolist() == [5, 3, 2]
    assert T.effective_perplexity(30, 20) == pytest.approx(19 / 3) and T.default_alpha(100) == 0.0001
    Ys = [np.zeros((4, 2)), np.ones((4, 2))]
    assert T.yoke_penalty(Ys, 0.5)[0] == 0.5 * 8


def test_compare_groups_values_and_groups():
    from embedscope.metrics import compare_groups

    V = {f"m{i}": {"p": float(i)} for i in range(6)}
    G = {f"m{i}": "ab"[i % 2] for i in range(6)}
    assert compare_groups(V, G)["p"]["p_value"] == pytest.approx(0.7)
    for bad in ("x", [1, 2], 1j, float("inf")):
        with pytest.raises(EmbedscopeError, match="must be a number"):
            compare_groups({**V, "m0": {"p": bad}}, G)
    with pytest.raises(EmbedscopeError, match="group names must be texts"):
        compare_groups(V, {**G, "m0": None})


def test_match_by_path_and_summary_check_their_arguments():
    from embedscope.store import match_by_path

    es = EmbeddingSet.from_arrays(X, Y)
    with pytest.raises(EmbedscopeError, match="two EmbeddingSets"):
        match_by_path(es, None)
    with pytest.raises(EmbedscopeError, match="norms must hold one number per row"):
        es.summary(norms=np.ones(3))
    with pytest.raises(EmbedscopeError, match="norms must hold one number per row"):
        es.summary(norms="x")
    assert es.summary()["mean_norm"] == es.summary(norms=np.linalg.norm(X.astype(np.float64), axis=1))["mean_norm"]
