"""Audit of the retrieval and clustering measures on edge cases (METHODS.md §1), against an
independent brute force written here from the formulas, pytorch-metric-learning's
AccuracyCalculator and sklearn.

The brute force: the full float64 key matrix, each query's list ordered by (distance, reference
index), the query itself left out in a same-set search. "The ranking of a float64 distance
matrix" depends on how each float64 key is evaluated wherever two keys are equal in exact
arithmetic but not representable (e.g. embeddings rounded to 0.1): ``Q @ R.T`` and
``Σ_k (q_k − r_k)²`` may then differ in the last bit from embedscope's per-pair keys
(``pair_keys64``: rows normalised by x / max|x|, then / sqrt(Σ y²), then Σ_k q_k r_k, or Σ_k (q_k − r_k)²,
in index order). So the tie-heavy data here are dyadic (every Euclidean key exact, whatever the
formula) or drawn from a palette of rows (every cosine tie an exact tie), and the one test on
rounded decimals evaluates the keys in that per-pair order.
"""

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.metrics import kmeans_nmi_f1, knn_search, retrieval_metrics
from embedscope.metrics.clustering import nmi, pairwise_f1

RANK_KEYS = ["P@1", "R-Precision", "MAP@R", "mAP@C", "mAP@1000", "mAP@lim"]


# ----------------------------------------------------------------------------- brute force
def _unit(A):
    """Unit rows as docs/methods.md §1 defines them: x / max|x|, then / sqrt(Σ y²) (parallel rows
    get the same unit row, bit for bit)."""
    A = A / np.max(np.abs(A), axis=1, keepdims=True)
    return A / np.sqrt(np.einsum("ij,ij->i", A, A))[:, None]


def _keys(X, Xr, metric):
    """Distance-like keys (smaller = nearer), float64, per pair in index order (see the module
    docstring)."""
    Q = np.asarray(X, dtype=np.float64)
    R = np.asarray(Xr, dtype=np.float64)
    if metric == "cosine":
        Q, R = _unit(Q), _unit(R)
        return -np.stack([np.einsum("jk,jk->j", R, np.broadcast_to(q, R.shape)) for q in Q])
    return np.stack([np.einsum("jk,jk->j", R - q, R - q) for q in Q])


def brute(X, y, Xr=None, yr=None, metric="cosine", ks=(1, 2, 4, 8), lone="exclude"):
    same = Xr is None
    y = np.asarray(y)
    yr = y if same else np.asarray(yr)
    key = _keys(X, X if same else Xr, metric)
    nq, nr = key.shape
    per = {**{f"R@{k}": [] for k in ks}, **{k: [] for k in RANK_KEYS}}
    n_lone = 0
    for i in range(nq):
        cand = np.arange(nr)
        if same:
            cand = cand[cand != i]
        order = cand[np.lexsort((cand, key[i, cand]))]  # by key, then the lower index
        rel = (yr[order] == y[i]).astype(np.float64)
        Ri = int(rel.sum())
        if Ri == 0:
            n_lone += 1
            if lone == "zero":
                for v in per.values():
                    v.append(0.0)
            continue
        P = np.cumsum(rel) / np.arange(1, rel.size + 1)
        Ci = Ri + 1
        for k in ks:
            per[f"R@{k}"].append(float(rel[:k].any()))
        per["P@1"].append(rel[0])
        per["R-Precision"].append(rel[:Ri].sum() / Ri)
        per["MAP@R"].append((P[:Ri] * rel[:Ri]).sum() / Ri)
        per["mAP@C"].append((P[:Ci] * rel[:Ci]).sum() / Ci)
        for name, depth in (("mAP@1000", 1000), ("mAP@lim", 1023)):
            d = min(depth, rel.size)
            per[name].append((P[:d] * rel[:d]).sum() / Ci)
    return {k: float(np.mean(v)) for k, v in per.items()}, n_lone


def check(X, y, Xr=None, yr=None, metric="cosine", ks=(1, 2, 4, 8), lone="exclude", keys=None, **kw):
    ref, n_lone = brute(X, y, Xr, yr, metric, ks, lone)
    keys = keys or [f"R@{k}" for k in ks] + RANK_KEYS
    got = retrieval_metrics(X, y, X_ref=Xr, y_ref=yr, metric=metric, ks=ks, include=keys, lone_queries=lone, **kw)
    assert got["n_lone"] == n_lone
    assert got["n_evaluated"] == len(y) - (n_lone if lone == "exclude" else 0)
    for k in keys:
        assert got[k] == pytest.approx(ref[k], abs=1e-12), k
    return got


def _small(seed=0, n=48, d=3, n_cls=6):
    rng = np.random.default_rng(seed)
    X = np.round(rng.standard_normal((n, d)) * 4) / 4  # dyadic: exact Euclidean keys
    X[np.abs(X).sum(1) == 0, 0] = 1.0
    y = rng.integers(0, n_cls, n)
    X[5] = X[7] = X[2]  # exact duplicates: one of another class, one of the same
    y[5], y[7] = (y[2] + 1) % n_cls, y[2]
    return X, y


# ----------------------------------------------------------------------------- small edge cases
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("lone", ["exclude", "zero"])
def test_duplicates_lone_queries_and_labels(metric, lone):
    X, y = _small()
    y[:3] = [100, 101, 102]  # lone queries (classes of one)
    got = check(X, y, metric=metric, lone=lone)
    assert got["n_lone"] == 3 and got["lone_queries"] == lone
    # the labels' values and type do not matter: string and non-contiguous integer labels
    want = {k: got[k] for k in RANK_KEYS}
    for lab in (np.array([f"class {v}" for v in y]), y * 17 - 1000):
        g = retrieval_metrics(X, lab, metric=metric, include=RANK_KEYS, lone_queries=lone)
        assert {k: g[k] for k in RANK_KEYS} == want


def test_exact_duplicate_of_another_class_loses_the_tie_to_the_lower_index():
    # query 0's nearest references are rows 1 and 2, identical; the lower index (1) ranks first
    X = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 0.0], [5.0, 5.0], [5.0, 6.0]])
    for y1, y2, p1 in ((0, 1, 1.0), (1, 0, 0.0)):
        y = np.array([0, y1, y2, 1, 1])
        got = retrieval_metrics(X, y, metric="euclidean", ks=(1, 2), include=["R@1", "R@2", "MAP@R"],
                                per_query=True)
        assert got["per_query"]["R@1"][0] == got["per_query"]["MAP@R"][0] == p1  # R_0 = 1
        check(X, y, metric="euclidean", ks=(1, 2))


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_all_identical_embeddings_rank_by_index(metric):
    X = np.full((10, 4), 0.5)
    y = np.array([1, 0, 0, 1, 1, 0, 1, 0, 0, 1])
    got = check(X, y, metric=metric, ks=(1, 2, 3, 9))
    # every list is the references in index order: query 0 (class 1) reads 0,0,1,1,0,1,0,0,1
    pq = retrieval_metrics(X, y, metric=metric, ks=(1,), include=["R@1"], per_query=True)["per_query"]
    assert pq["R@1"][0] == 0.0 and pq["MAP@R"][0] == pytest.approx((1 / 3 + 2 / 4) / 4)
    assert got["R@9"] == 1.0


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_separate_reference_set_excludes_nothing(metric):
    X, y = _small(1, n=30)
    Xr, yr = _small(2, n=40)
    Xr[3] = Xr[4] = X[0]  # the query itself among the references, in another class and its own
    yr[3], yr[4] = y[0] + 1, y[0]
    y[1] = 999  # a query class absent from the references: lone
    for lone in ("exclude", "zero"):
        check(X, y, Xr, yr, metric=metric, lone=lone, ks=(1, 2, 40))
    # string labels are matched by name across the two sets
    check(X, np.array([f"c{v}" for v in y]), Xr, np.array([f"c{v}" for v in yr]), metric=metric)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_input_dtypes_rank_the_values_given(dtype, metric):
    X, y = _small(3)
    Xd = X.astype(dtype)  # dyadic quarters of small size: exact in float16 too
    got = check(Xd, y, metric=metric)
    ref = retrieval_metrics(X, y, metric=metric, include=RANK_KEYS)
    assert all(got[k] == ref[k] for k in RANK_KEYS)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_two_and_three_rows(metric):
    X3 = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.5]])
    got = check(X3, [0, 1, 0], metric=metric, ks=(1, 2))
    assert got["n_lone"] == 1 and got["P@1"] == 1.0 and got["mAP@C"] == 0.5
    check(X3, [0, 1, 0], metric=metric, ks=(1, 2), lone="zero")
    X2 = np.array([[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(EmbedscopeError, match="no query has another member"):
        retrieval_metrics(X2, [0, 1], metric=metric, ks=(1,))
    with pytest.raises(EmbedscopeError, match="at least 2 classes"):
        retrieval_metrics(X2, [0, 0], metric=metric, ks=(1,))
    # N = 2 against a separate reference set: one reference each
    got = check(X2, [0, 1], X3[[2, 1]], [0, 1], metric=metric, ks=(1, 2))
    assert got["P@1"] == 1.0


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_queries_of_one_class_against_separate_references(metric):
    """Queries of a single class are ranked against a separate reference set as any others (the
    brute force); only NMI/F1, which cluster the queries, need two classes among them."""
    rng = np.random.default_rng(3)
    Xq, Xr = rng.standard_normal((7, 4)), rng.standard_normal((30, 4))
    yq, yr = np.full(7, 2), rng.integers(0, 4, 30)
    yr[:3] = 2
    got = check(Xq, yq, Xr, yr, metric=metric)
    assert got["n_queries"] == 7 and got["n_lone"] == 0
    one = retrieval_metrics(np.array([[0.0], [0.2]]), [5, 5], X_ref=np.array([[0.1], [1.0], [0.15]]),
                            y_ref=[5, 7, 9], metric="euclidean", include=["P@1"])
    assert one["P@1"] == 0.5  # query 0's nearest is reference 0 (a hit), query 1's reference 2 (a miss)
    with pytest.raises(EmbedscopeError, match="NMI and F1 cluster the queries"):
        retrieval_metrics(Xq, yq, X_ref=Xr, y_ref=yr, metric=metric)
    with pytest.raises(EmbedscopeError, match="reference labels must hold at least 2 classes"):
        retrieval_metrics(Xq, yq, X_ref=Xr, y_ref=np.full(30, 2), metric=metric, include=["P@1"])


def test_zero_row_under_cosine_is_a_clear_error_and_fine_under_euclidean():
    X, y = _small(4)
    X[9] = 0.0
    with pytest.raises(EmbedscopeError, match="row 9 of X is all zeros"):
        retrieval_metrics(X, y)
    with pytest.raises(EmbedscopeError, match="row 9 of X_ref is all zeros"):
        retrieval_metrics(X[:5], y[:5], X_ref=X, y_ref=y)
    check(X, y, metric="euclidean")


# ----------------------------------------------------------------------------- k beyond the list
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_r_at_k_beyond_the_references_is_an_error(metric):
    X, y = _small(5, n=20)
    # k = N − 1 is the whole list: allowed (R@k = 1 for every query with a relevant reference)
    assert check(X, y, metric=metric, ks=(1, 19))["R@19"] == 1.0
    with pytest.raises(EmbedscopeError, match=r"R@20: k = 20 exceeds the 19 references"):
        retrieval_metrics(X, y, metric=metric, ks=(1, 20))
    with pytest.raises(EmbedscopeError, match=r"k = 100 exceeds the 7 references"):
        retrieval_metrics(X, y, X_ref=X[:7], y_ref=y[:7], metric=metric, ks=(100,), include=["R@100"])
    # as knn_search
    with pytest.raises(EmbedscopeError, match="k = 20 exceeds the 19 references"):
        knn_search(X, k=20, metric=metric, exclude_self=True)
    # the default ks (1, 2, 4, 8) keep those within the references: R@8 needs 9 rows
    X5, y5 = X[:5], np.array([0, 0, 1, 1, 0])
    assert [k for k in retrieval_metrics(X5, y5, metric=metric) if k.startswith("R@")] == ["R@1", "R@2", "R@4"]
    assert "R@8" in retrieval_metrics(X[:9], y[:9], metric=metric, include=["R@8"])
    # a large k that is not asked for (include) is not an error
    got = retrieval_metrics(X, y, metric=metric, ks=(1, 100), include=["R@1", "MAP@R"])
    assert "R@100" not in got


def test_cli_evaluate_k_beyond_the_references_is_one_line_exit_1(tmp_path, capsys):
    from embedscope import store
    from embedscope.cli import main

    rng = np.random.default_rng(0)
    n = 20
    y = rng.integers(0, 4, n)
    es = store.EmbeddingSet(embeddings=rng.standard_normal((n, 4)).astype(np.float32), labels=y,
                            paths=[f"p{i}" for i in range(n)], split=np.array(["test"] * n),
                            class_names=[f"c{i}" for i in range(4)], attrs={"dataset": "synthetic"})
    path = tmp_path / "e.h5"
    store.save(path, es)
    rc = main(["evaluate", str(path), "--k", "1", "20", "--no-progress", "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 1 and len(err.strip().splitlines()) == 1
    assert "k = 20 exceeds the 19 references" in err and "Traceback" not in err
    assert main(["evaluate", str(path), "--k", "1", "19", "--no-progress", "--device", "cpu",
                 "--include", "R@k"]) == 0
    # without --k: R@1, 2, 4, 8 up to the references available (a set of 5 rows: R@1, 2, 4)
    small = tmp_path / "small.h5"
    store.save(small, store.EmbeddingSet(embeddings=rng.standard_normal((5, 4)).astype(np.float32),
                                         labels=np.array([0, 0, 1, 1, 1]), paths=[f"p{i}" for i in range(5)],
                                         split=np.array(["test"] * 5), class_names=["a", "b"],
                                         attrs={"dataset": "synthetic"}))
    capsys.readouterr()
    assert main(["evaluate", str(small), "--no-progress", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "R@4" in out and "R@8" not in out, out


# ----------------------------------------------------------------------------- extreme norms
@pytest.mark.parametrize("e", [-1070, -600, -200, 200, 600, 1000])
def test_cosine_rows_with_extreme_norms(e):
    # cosine is scale-free: rows scaled by 2^e rank exactly as the rows given. Before, ‖x‖²
    # overflowed (2^600: the row became 0, every key a tie) or underflowed (2^-600: refused as
    # "all zeros").
    X, y = _small(6)
    ref = retrieval_metrics(X, y, include=RANK_KEYS)
    Xs = X.copy()
    Xs[::3] = np.ldexp(Xs[::3], e)
    assert np.all(np.abs(Xs[::3]).max(1) > 0)
    got = retrieval_metrics(Xs, y, include=RANK_KEYS)
    assert {k: got[k] for k in RANK_KEYS} == {k: ref[k] for k in RANK_KEYS}
    v, i = knn_search(Xs, k=5, exclude_self=True)
    v0, i0 = knn_search(X, k=5, exclude_self=True)
    assert np.array_equal(i, i0) and np.array_equal(v, v0)


@pytest.mark.parametrize("n", [60, 2000])
@pytest.mark.parametrize("e", [-200, -70, 70, 200])
def test_euclidean_extreme_scales(n, e):
    # every row times 2^e: every squared distance times 2^2e, the same ranking. Before, float32
    # keys overflowed from norms of ~2^64 (MAP@R 4.275 > 1 at N = 40 and 1e20; an AssertionError
    # at 1e160) or underflowed (R@1 0.0 instead of 0.0243 at N = 3,000 and 2^-130)
    rng = np.random.default_rng(7)
    X = rng.standard_normal((n, 8))
    y = rng.integers(0, n // 6, n)
    keys = ["R@1", "P@1", "MAP@R", "mAP@C"] + (["mAP@1000"] if n > 1000 else [])
    ref = retrieval_metrics(X, y, metric="euclidean", ks=(1,), include=keys)
    got = retrieval_metrics(np.ldexp(X, e), y, metric="euclidean", ks=(1,), include=keys)
    assert {k: got[k] for k in keys} == {k: ref[k] for k in keys}
    if n < 1000:  # kNN distances scale back exactly
        v0, i0 = knn_search(X, k=4, metric="euclidean", exclude_self=True)
        v, i = knn_search(np.ldexp(X, e), k=4, metric="euclidean", exclude_self=True)
        assert np.array_equal(i, i0) and np.array_equal(np.ldexp(v, -e), v0)
        # separate sets: the queries far larger than the references
        Xr = X[: n // 2]
        g = retrieval_metrics(np.ldexp(X[n // 2:], e), y[n // 2:], X_ref=np.ldexp(Xr, e), y_ref=y[: n // 2],
                              metric="euclidean", ks=(1,), include=["R@1", "MAP@R"])
        r = retrieval_metrics(X[n // 2:], y[n // 2:], X_ref=Xr, y_ref=y[: n // 2], metric="euclidean", ks=(1,),
                              include=["R@1", "MAP@R"])
        assert (g["R@1"], g["MAP@R"]) == (r["R@1"], r["MAP@R"])


@pytest.mark.parametrize("e", [-200, -70, 70, 200])
def test_kmeans_labels_do_not_depend_on_a_power_of_two_scale(e):
    # k-means runs in float32: rows of norm ~2^70 overflowed (NMI 0.077 instead of 0.606), rows of
    # ~2^-70 lost digits to subnormals (NMI 0.1236 instead of 0.1210 at N = 3,000)
    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 8))
    y = rng.integers(0, 30, 300)
    ref = kmeans_nmi_f1(X, y, metric="euclidean", return_labels=True)
    got = kmeans_nmi_f1(np.ldexp(X, e), y, metric="euclidean", return_labels=True)
    assert np.array_equal(got["labels"], ref["labels"])
    assert (got["NMI"], got["F1"]) == (ref["NMI"], ref["F1"])
    r = retrieval_metrics(np.ldexp(X, e), y, metric="euclidean", include=["NMI", "F1"])
    assert (r["NMI"], r["F1"]) == (ref["NMI"], ref["F1"])


# ----------------------------------------------------------------------------- N ≈ 3,000: the fast paths
@pytest.fixture
def plans(monkeypatch):
    """Which pass ranked each search: 'rows' (filtered tile pass), 'count' (counting pass) or
    'candidates' (top-(depth + 16) candidate lists)."""
    import embedscope.metrics.search.ranks as rk

    seen = []
    rows_plan, counting_plan = rk._rows_plan, rk._counting_plan

    def spy_rows(*a, **k):
        r = rows_plan(*a, **k)
        if r:
            seen.append("rows")
        return r

    def spy_count(*a, **k):
        r = counting_plan(*a, **k)
        seen.append("candidates" if r is None else "count")
        return r

    monkeypatch.setattr(rk, "_rows_plan", spy_rows)
    monkeypatch.setattr(rk, "_counting_plan", spy_count)
    return seen


def _tied(seed, n=3000, d=4):
    """Dyadic rows with many exact ties (values in quarters; 30 copies of one row)."""
    rng = np.random.default_rng(seed)
    X = np.round(rng.standard_normal((n, d)) * 2) / 4
    X[np.abs(X).sum(1) == 0, 0] = 0.25
    X[50:80] = X[10]
    return X


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_fast_paths_with_many_ties_match_brute_force(metric, plans):
    X = _tied(1)
    rng = np.random.default_rng(1)
    y = rng.integers(0, 100, len(X))
    y[50:60] = y[10]
    y[-1] = 10_000  # lone
    shallow = ["R@1", "R@2", "R@4", "R@8", "P@1", "R-Precision", "MAP@R", "mAP@C"]
    check(X, y, metric=metric, keys=shallow)  # even classes, depth < 1,000: the filtered tile pass
    assert plans[-1] == "rows"
    check(X, y, metric=metric, lone="zero", keys=["mAP@1000", "mAP@lim", "R@8"])  # deep: candidate lists
    assert plans[-1] == "candidates"
    # skewed classes (one of 101, the rest pairs): the counting pass
    ys = np.repeat(np.arange(1500), 2)
    ys[:101] = 5000
    check(X, ys, metric=metric, keys=shallow)
    assert plans[-1] == "count"


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_counting_pass_at_large_dimension_separate_sets(metric, plans):
    # D = 800: cosine tiles sum the inner dimension in chunks; a palette of 400 rows, each drawn
    # several times, so that every cosine tie is an exact tie
    rng = np.random.default_rng(2)
    pal = np.round(rng.standard_normal((400, 800)) * 2) / 4
    Xr = pal[rng.integers(0, 400, 2400)]
    yr = np.repeat(np.arange(1200), 2)
    yr[:120] = 7  # skewed
    X = pal[rng.integers(0, 400, 200)]
    y = yr[rng.integers(0, 2400, 200)]
    check(X, y, Xr, yr, metric=metric, keys=["R@1", "R@8", "P@1", "R-Precision", "MAP@R", "mAP@C"])
    assert plans[-1] == "count"


def test_rounded_decimals_rank_by_the_per_pair_float64_keys(plans):
    # embeddings rounded to 0.1: many keys equal in exact arithmetic and, per pair in index
    # order, in float64; the ranking is that of those keys, ties to the lower index
    rng = np.random.default_rng(4)
    X = np.round(rng.standard_normal((2500, 4)), 1)
    y = rng.integers(0, 80, 2500)
    for metric in ("cosine", "euclidean"):
        check(X, y, metric=metric, keys=["R@1", "R@4", "P@1", "R-Precision", "MAP@R", "mAP@C"])
    assert plans == ["rows", "rows"]


# ----------------------------------------------------------------------------- peers
def _pml(metric):
    import torch
    from pytorch_metric_learning.distances import CosineSimilarity, LpDistance
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    from pytorch_metric_learning.utils.inference import CustomKNN

    dist = CosineSimilarity() if metric == "cosine" else LpDistance(normalize_embeddings=False)
    return AccuracyCalculator(include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
                              avg_of_avgs=False, k="max_bin_count", device=torch.device("cpu"),
                              knn_func=CustomKNN(dist))


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_agrees_with_pytorch_metric_learning_without_ties(metric):
    # continuous random rows: no ties, so PML's own tie order does not matter. PML excludes the
    # query itself in a same-set call and leaves lone queries out, as lone_queries="exclude"
    rng = np.random.default_rng(12)
    X = rng.standard_normal((400, 12))
    y = rng.integers(0, 40, 400)
    X += 1.2 * rng.standard_normal((40, 12))[y]
    y[:2] = [998, 999]  # lone
    X32 = X.astype(np.float32)
    ac = _pml(metric)
    names = {"P@1": "precision_at_1", "R-Precision": "r_precision", "MAP@R": "mean_average_precision_at_r"}
    for args in ((X32, y), (X32[:150], y[:150], X32[150:], y[150:])):
        pml = ac.get_accuracy(*args)
        if len(args) == 2:
            got = retrieval_metrics(X32, y, metric=metric, include=list(names))
        else:
            got = retrieval_metrics(X32[:150], y[:150], X_ref=X32[150:], y_ref=y[150:], metric=metric,
                                    include=list(names))
        for k, p in names.items():
            assert got[k] == pytest.approx(pml[p], abs=1e-6), k


def test_nmi_and_f1_against_sklearn():
    from sklearn.metrics import normalized_mutual_info_score
    from sklearn.metrics.cluster import pair_confusion_matrix

    rng = np.random.default_rng(0)
    cases = [(np.zeros(5, int), np.zeros(5, int)), (np.arange(6), np.arange(6)), (np.arange(6), np.zeros(6, int)),
             (np.array(["b", "b", "a", "a"]), np.array([7, 7, 3, 3]))]
    cases += [(rng.integers(0, rng.integers(1, 8), n), rng.integers(0, rng.integers(1, 8), n))
              for n in rng.integers(2, 80, 200)]
    for a, b in cases:
        assert nmi(a, b) == pytest.approx(normalized_mutual_info_score(a, b), abs=1e-12)
        C = pair_confusion_matrix(a, b)  # ordered pairs: [1, 1] same class and cluster, [0, 1] cluster only
        p = C[1, 1] / (C[1, 1] + C[0, 1]) if C[1, 1] + C[0, 1] else 0.0
        r = C[1, 1] / (C[1, 1] + C[1, 0]) if C[1, 1] + C[1, 0] else 0.0
        f = pairwise_f1(a, b)
        assert (f["precision"], f["recall"]) == (pytest.approx(p, abs=1e-15), pytest.approx(r, abs=1e-15))
        assert f["F1"] == pytest.approx(2 * p * r / (p + r) if p + r else 0.0, abs=1e-15)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_kmeans_nmi_f1_equal_faiss_kmeans_and_sklearn(metric):
    import faiss
    from sklearn.metrics import normalized_mutual_info_score

    rng = np.random.default_rng(5)
    X = rng.standard_normal((500, 8)) + 2.0 * rng.standard_normal((25, 8))[rng.integers(0, 25, 500)]
    y = rng.integers(0, 25, 500)
    x = X / np.linalg.norm(X, axis=1, keepdims=True) if metric == "cosine" else X
    km = faiss.Kmeans(8, 25, niter=20, seed=1234, max_points_per_centroid=1 << 30)
    km.train(x.astype(np.float32))
    lab = km.index.search(x.astype(np.float32), 1)[1].ravel()
    got = retrieval_metrics(X, y, metric=metric, include=["NMI", "F1"])
    assert got["NMI"] == pytest.approx(normalized_mutual_info_score(y, lab), abs=1e-12)
    assert got["F1"] == pytest.approx(pairwise_f1(y, lab)["F1"], abs=1e-15)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_kmeans_on_tiny_and_identical_sets(metric):
    from sklearn.metrics import normalized_mutual_info_score

    for X, y in ((np.full((10, 4), 0.5), [0, 1] * 5), (np.array([[1.0, 0], [0, 1], [1, 1]]), [0, 1, 0]),
                 (np.array([[1.0, 0], [0, 1]]), [0, 1])):
        r = kmeans_nmi_f1(X, y, metric=metric, return_labels=True)
        assert r["NMI"] == pytest.approx(normalized_mutual_info_score(y, r["labels"]), abs=1e-12)
        assert r["F1"] == pairwise_f1(y, r["labels"])["F1"]
