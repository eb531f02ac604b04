"""Session 37, mutation testing (second round: study statistics, the measure registry, retrieval keys, clustering,
NR-Prec): tests that kill the mutants that survived their modules' tests, each checked against an independent
computation (scipy, sklearn, faiss, a hand formula)."""
import itertools

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau, pearsonr
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from embedscope.metrics.clustering import kmeans_labels, kmeans_nmi_f1, nmi, pairwise_f1
from embedscope.study.stats import granulated_tau, study_statistics


def _runs(n_obj, n_seeds, t, m, selection="best", **extra):
    return pd.DataFrame([{"id": f"l{l}_s{s}", "run": f"l{l}_s{s}", "selection": selection, "status": "ok",
                          "loss": f"loss{l}", "seed": s, "untrained": "", "R@1": t[l] + 0.01 * s, "m": m[l] + 0.1 * s,
                          **extra} for l, s in itertools.product(range(n_obj), range(n_seeds))])


def test_granulated_psi_is_the_mean_over_three_axes():  # stats.py: psi mean -> median survived
    rng = np.random.default_rng(0)
    df = pd.DataFrame([dict(a=a, b=b, c=c) for a, b, c in itertools.product([0, 1, 2], [0, 1], [0, 1])])
    df["t"] = rng.normal(size=len(df))
    df["m"] = df["t"] + 3 * df["a"] - 2 * df["c"] + rng.normal(size=len(df))
    g = granulated_tau(df, "m", "t", ["a", "b", "c"], [])
    hand = {ax: np.mean([kendalltau(gr["m"], gr["t"]).statistic for _, gr in df.groupby([o for o in "abc" if o != ax])])
            for ax in "abc"}
    assert g["per_axis"] == pytest.approx(hand)
    assert g["psi"] == pytest.approx(np.mean(list(hand.values())))  # 1/9 here; the median would be 1/3


def test_leave_one_objective_out_needs_four_objectives():  # stats.py: len(OK) >= 4 -> >= 3 survived
    st = study_statistics(_runs(3, 2, [0.5, 0.7, 0.6], [1.0, 3.0, 5.0]), target="R@1", n_boot=20,
                          splits={"m": "train", "R@1": "test"})
    assert not any(k.startswith("loo") for k in st["robustness"]["m"])  # each r over 2 points would be +-1
    st4 = study_statistics(_runs(4, 2, [0.5, 0.7, 0.6, 0.9], [1.0, 3.0, 5.0, 4.0]), target="R@1", n_boot=20,
                           splits={"m": "train", "R@1": "test"})
    x, y = np.array([1.0, 3.0, 5.0, 4.0]) + 0.05, np.array([0.5, 0.7, 0.6, 0.9]) + 0.005
    loo = [pearsonr(np.delete(x, i), np.delete(y, i)).statistic for i in range(4)]
    assert st4["robustness"]["m"]["loo_min"] == pytest.approx(min(loo))
    assert st4["robustness"]["m"]["loo_max"] == pytest.approx(max(loo))


def test_a_target_equal_to_the_untrained_one_is_no_better():  # stats.py: '<' -> '<=' (direction lower) survived
    rows = [{"id": "u", "run": "u", "selection": "untrained", "status": "ok", "loss": "a", "seed": 0, "untrained": "",
             "rho": 0.5, "m": 1.0}]
    rows += [{"id": f"r{i}", "run": f"r{i}", "selection": "best", "status": "ok", "loss": l, "seed": 0, "untrained": "u",
              "rho": rho, "m": float(i)} for i, (l, rho) in enumerate([("a", 0.5), ("b", 0.3), ("c", 0.4), ("d", 0.2)])]
    st = study_statistics(pd.DataFrame(rows), target="rho", n_boot=10, splits={"m": "test", "rho": "train"})
    assert st["untrained"]["direction"] == "lower"
    assert st["untrained"]["selected_no_better"] == ["r0"]  # 0.5 is not lower than 0.5


def test_final_epoch_rows_enter_when_no_best_epoch_was_selected():  # stats.py: _primary_mask drop has_best survived
    st = study_statistics(_runs(4, 2, [0.5, 0.6, 0.7, 0.8], [0.0, 1.0, 2.0, 3.0], selection="final"), target="R@1",
                          n_boot=20, splits={"m": "train", "R@1": "test"})
    assert st["n_points"]["runs"] == 8 and st["n_points"]["objectives"] == 4
    x = np.repeat([0.0, 1.0, 2.0, 3.0], 2) + np.tile([0, 0.1], 4)
    y = np.repeat([0.5, 0.6, 0.7, 0.8], 2) + np.tile([0, 0.01], 4)
    runs = [r for r in st["correlations"] if r["level"] == "runs"][0]
    assert runs["pearson"] == pytest.approx(pearsonr(x, y).statistic)


def test_metric_matrix_needs_three_objectives_with_both_values():  # stats.py: drop 'xa.size >= 3' survived
    st = study_statistics(_runs(4, 2, [0.5, 0.7, 0.6, 0.55], [1.0, 2.0, np.nan, np.nan]), target="R@1", n_boot=20,
                          splits={"m": "test", "R@1": "test"})
    mm = st["metric_matrix"]
    assert mm["names"] == ["R@1", "m"]
    assert np.isnan(mm["pearson"][0][1]) and np.isnan(mm["pearson"][1][1])  # 2 points: r would be +-1 whatever
    assert mm["pearson"][0][0] == pytest.approx(1.0)


def test_nmi_of_two_single_cluster_labelings_is_one():  # clustering.py: return 1.0 -> 0.0 survived
    assert nmi([3, 3, 3, 3], [0, 0, 0, 0]) == normalized_mutual_info_score([3, 3, 3, 3], [0, 0, 0, 0]) == 1.0


def test_nmi_never_exceeds_one():  # clustering.py: drop min(., 1.0) survived (1.0000000000000002)
    rng = np.random.default_rng(0)
    assert max(nmi(y, y) for y in rng.integers(0, 7, size=(300, 50))) <= 1.0


def test_pairwise_precision_is_zero_without_same_cluster_pairs():  # clustering.py: else 0.0 -> 1.0 survived
    assert pairwise_f1([0, 0, 1], [0, 1, 2]) == {"F1": 0.0, "precision": 0.0, "recall": 0.0}


def _faiss_labels(X, k, niter, seed):
    faiss = pytest.importorskip("faiss")
    km = faiss.Kmeans(X.shape[1], k, niter=niter, seed=seed, max_points_per_centroid=1 << 30, min_points_per_centroid=1)
    km.train(X)
    return km.index.search(X, 1)[1].ravel()


@pytest.mark.parametrize("seed", [1234, 7])
def test_exact_kmeans_follows_the_seed(seed):  # clustering.py: seed=seed -> seed=1234 survived
    X = np.random.default_rng(3).normal(size=(300, 4)).astype(np.float32)  # no structure: the init decides
    assert adjusted_rand_score(kmeans_labels(X, 6, seed=seed, metric="euclidean"), _faiss_labels(X, 6, 20, seed)) == 1.0


@pytest.mark.parametrize("niter", [1, 2])
def test_faiss_engine_runs_niter_iterations(niter):  # clustering.py: cl.niter = niter + 1 survived
    X = np.random.default_rng(3).normal(size=(300, 4)).astype(np.float32)
    lab = kmeans_labels(X, 6, niter=niter, seed=1234, metric="euclidean", method="faiss")
    assert adjusted_rand_score(lab, _faiss_labels(X, 6, niter, 1234)) == 1.0


@pytest.mark.parametrize("scale", [2.0 ** 70, 2.0 ** -80])
def test_kmeans_labels_do_not_depend_on_a_power_of_two_scale(scale):  # clustering.py: KMEANS_SAFE_EXP 32 -> 200 survived
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(200, 5)), rng.integers(0, 4, 200)
    a = kmeans_nmi_f1(X, y, metric="euclidean", return_labels=True)
    b = kmeans_nmi_f1(X * scale, y, metric="euclidean", return_labels=True)
    assert np.array_equal(a["labels"], b["labels"]) and a["NMI"] == b["NMI"]


def test_r_at_k_keys_ascending_and_once_whatever_the_order_of_ks():  # retrieval.py: _check_ks unsorted survived
    from embedscope.metrics.retrieval import retrieval_metrics
    X = np.random.default_rng(0).normal(size=(40, 3))
    y = np.repeat(np.arange(4), 10)
    r = retrieval_metrics(X, y, ks=(4, 1, 4), include=["R@k"], metric="euclidean")
    assert [k for k in r if k.startswith("R@")] == ["R@1", "R@4"]
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    np.fill_diagonal(D, np.inf)
    order = np.argsort(D, axis=1, kind="stable")
    for k in (1, 4):
        assert r[f"R@{k}"] == pytest.approx(np.mean([(y[order[i, :k]] == y[i]).any() for i in range(40)]))


def test_final_epoch_r_needs_three_objectives_with_both_values():  # stats.py: _pearson_3 -> _pearson survived
    rows = []
    for l, s, sel in itertools.product(range(3), range(2), ("best", "final")):
        rows.append({"id": f"l{l}_s{s}_{sel}", "run": f"l{l}_s{s}", "selection": sel, "status": "ok", "loss": f"loss{l}",
                     "seed": s, "untrained": "", "R@1": [0.5, 0.7, 0.6][l] + 0.01 * s + (0.02 if sel == "best" else 0),
                     "m": ([1.0, 2.0, np.nan][l] if sel == "final" else [1.0, 2.0, 3.0][l]) + 0.1 * s})
    st = study_statistics(pd.DataFrame(rows), target="R@1", n_boot=20, splits={"m": "train", "R@1": "test"})
    assert np.isnan(st["robustness"]["m"]["final_epoch_pearson"])  # over 2 objectives r is +-1 whatever the values


def test_significance_flag_is_nr_prec_at_least_2_576():  # properties.py: SIGNIFICANCE_Z 2.576 -> 1.96 survived
    from embedscope.metrics.properties import property_precision
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    v = (X[:, 0] + rng.normal(scale=0.6, size=200) > 0).astype(int)
    r = property_precision(X, {"v": v})["v"]
    assert 1.96 < r["NR-Prec"] < 2.576 and r["significant_2.576"] is False


def test_capped_only_when_the_cap_changes_an_r():  # properties.py: capped '>' -> '>=' survived
    from embedscope.metrics.properties import property_precision
    X = np.arange(8.0)[:, None]
    v = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    assert property_precision(X, {"v": v}, max_r=3)["v"]["capped"] is False  # N_v - 1 = 3 = max_r
    assert property_precision(X, {"v": v}, max_r=2)["v"]["capped"] is True


def test_a_side_constant_up_to_rounding_has_no_rank_correlation():  # stats.py: constant_rows 1e-24 -> 0 survived
    from embedscope.study.stats import correlate
    a3, a6 = np.mean([0.1] * 3), np.mean([0.1] * 6)  # 0.1 over 3 and over 6 seeds: differ in the last bit only
    assert a3 != a6
    c = correlate(np.array([a3, a6, a3, a6, a3]), np.array([0.1, 0.5, 0.2, 0.7, 0.3]), n_boot=50)
    assert np.isnan(c["pearson"]) and np.isnan(c["spearman"]) and np.isnan(c["kendall"])


def test_rho_lower_is_better():  # registry.py: rho direction flipped survived (Roth §5: lower rho, better R@1)
    from embedscope.analyses.registry import MEASURES
    from embedscope.study.stats import target_direction
    assert MEASURES["rho"].direction == "lower" and target_direction("rho") == "lower"


def test_pi_ratio_higher_is_better():  # registry.py: pi_ratio direction higher -> none survived (Roth §5, docs/methods.md §6)
    from embedscope.study.stats import target_direction
    assert target_direction("pi_ratio") == "higher"


def test_permutation_null_is_the_nr_prec_of_each_shuffle_with_lone_values():  # properties.py: _nr_prec p = nv/n survived
    from embedscope.metrics.properties import property_precision
    X = np.random.default_rng(1).normal(size=(40, 3))
    v = np.r_[np.repeat([0, 1, 2], 10), np.arange(3, 13)]  # 10 lone values: n' = 30 < n = 40
    r = property_precision(X, {"v": v}, permutations=20, seed=0)["v"]
    rng = np.random.default_rng(0)  # the documented shuffles: one rng.permutation(n) per draw
    null = [property_precision(X, {"v": v[rng.permutation(40)]})["v"]["NR-Prec"] for _ in range(20)]
    assert r["perm_mean"] == pytest.approx(np.mean(null)) and r["perm_sd"] == pytest.approx(np.std(null, ddof=1))


def test_compute_measures_ranks_nr_prec_by_property_metric():  # registry.py: property_metric ignored survived
    from embedscope.analyses.registry import compute_measures
    from embedscope.metrics.properties import property_precision
    from embedscope.store import EmbeddingSet
    rng = np.random.default_rng(0)
    n = 120
    c = rng.integers(0, 3, n)
    X = rng.normal(size=(n, 4)) * (1 + 3 * c)[:, None]  # the property sets the norm only: euclidean sees it, cosine not
    es = EmbeddingSet(embeddings=X, labels=np.arange(n) % 4, paths=np.array([f"i{i}.png" for i in range(n)]),
                      split=np.array(["test"] * n), class_names=[f"c{i}" for i in range(4)], properties={"colour": c})
    for metric in ("cosine", "euclidean"):
        got = compute_measures(es, ["NR-Prec:colour"], property_metric=metric)["NR-Prec:colour"]
        assert got == pytest.approx(property_precision(X, {"colour": c}, metric=metric)["colour"]["NR-Prec"])


def test_compare_groups_reports_medians():  # properties.py: median -> mean of the first group survived
    from embedscope.metrics.properties import compare_groups
    vals = {"a1": {"p": 1.0}, "a2": {"p": 2.0}, "a3": {"p": 10.0}, "b1": {"p": 0.0}, "b2": {"p": 5.0}, "b3": {"p": 6.0}}
    out = compare_groups(vals, {m: m[0] for m in vals})["p"]
    assert out["median_a"] == np.median([1.0, 2.0, 10.0]) and out["median_b"] == np.median([0.0, 5.0, 6.0])


def test_permutation_seed_defaults_to_zero():  # properties.py: None -> 1 survived (docstring: None, the default: 0)
    from embedscope.metrics.properties import property_precision
    X = np.random.default_rng(2).normal(size=(40, 3))
    v = np.repeat([0, 1, 2, 3], 10)
    a = property_precision(X, {"v": v}, permutations=30)["v"]
    b = property_precision(X, {"v": v}, permutations=30, seed=0)["v"]
    assert (a["perm_mean"], a["perm_p_value"]) == (b["perm_mean"], b["perm_p_value"])


def test_compute_measures_passes_the_kmeans_seed():  # registry.py: seed=opts['seed'] -> 1234 survived
    from embedscope.analyses.registry import compute_measures
    from embedscope.store import EmbeddingSet
    rng = np.random.default_rng(0)
    n = 200
    X = rng.normal(size=(n, 4))  # no structure: the k-means init decides
    y = np.arange(n) % 5
    es = EmbeddingSet(embeddings=X, labels=y, paths=np.array([f"i{i}.png" for i in range(n)]),
                      split=np.array(["test"] * n), class_names=[f"c{i}" for i in range(5)])
    for seed in (1234, 7):
        got = compute_measures(es, ["NMI"], seed=seed)["NMI"]
        assert got == pytest.approx(kmeans_nmi_f1(X, y, seed=seed)["NMI"])


def _es(X, y, split, props=None):
    from embedscope.store import EmbeddingSet
    return EmbeddingSet(embeddings=X, labels=y, paths=np.array([f"i{i}.png" for i in range(len(y))]), split=split,
                        class_names=[f"c{i}" for i in range(int(y.max()) + 1)], properties=props or {})


def test_compute_measures_uses_the_retrieval_metric():  # registry.py: metric ignored (always cosine) survived
    from embedscope.analyses.registry import compute_measures
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3)) * rng.uniform(0.1, 10, size=(60, 1))  # row norms differ: cosine != euclidean
    y = np.arange(60) % 3
    es = _es(X, y, np.array(["test"] * 60))
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    np.fill_diagonal(D, np.inf)
    hand = np.mean(y[D.argmin(1)] == y)  # euclidean R@1 by hand
    assert compute_measures(es, ["R@1"], metric="euclidean")["R@1"] == pytest.approx(hand)


def test_r_at_k_equal_to_the_references_available_is_defined():  # registry.py: deep '>' -> '>=' survived
    from embedscope.analyses.registry import compute_measures
    rng = np.random.default_rng(1)
    X = rng.normal(size=(9, 3))
    y = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
    v = compute_measures(_es(X, y, np.array(["test"] * 9)), ["R@8"])["R@8"]
    assert v == 1.0  # 8 references = every other row: each query's class-mates are among them


def test_no_nr_prec_measures_for_a_file_without_test_rows():  # registry.py: _property_keys split check dropped survived
    from embedscope.analyses.registry import available
    rng = np.random.default_rng(0)
    es = _es(rng.normal(size=(20, 3)), np.arange(20) % 2, np.array(["train"] * 20), {"colour": rng.integers(0, 2, 20)})
    assert not [m for m in available(es) if m.startswith("NR-Prec:")]  # NR-Prec reads the test split, which is empty
