"""retrieval_metrics against a brute-force reference written from METHODS.md §1, against
pytorch-metric-learning's AccuracyCalculator, and on the worked examples of §1."""

import numpy as np
import pytest
from brute import ranked_references

from embedscope.errors import EmbedscopeError
from embedscope.metrics import retrieval_metrics

KEYS = ["R@1", "R@2", "R@4", "R@8", "P@1", "R-Precision", "MAP@R", "mAP@C", "mAP@1000"]


def brute(X, y, Xr=None, yr=None, metric="cosine", ks=(1, 2, 4, 8)):
    """Full float64 key matrix, each query's list sorted by (distance, index): the formulas of §1."""
    orders, yr = ranked_references(X, y, Xr, yr, metric)
    acc = {k: [] for k in [f"R@{k}" for k in ks] + KEYS[4:]}
    n_lone = 0
    for i, order in enumerate(orders):
        rel = (yr[order] == y[i]).astype(float)
        Ri = int(rel.sum())
        if Ri == 0:
            n_lone += 1
            continue
        Ci = Ri + 1
        P = np.cumsum(rel) / np.arange(1, len(rel) + 1)
        for k in ks:
            acc[f"R@{k}"].append(float(rel[:k].any()))
        acc["P@1"].append(rel[0])
        acc["R-Precision"].append(rel[:Ri].sum() / Ri)
        acc["MAP@R"].append((P[:Ri] * rel[:Ri]).sum() / Ri)
        acc["mAP@C"].append((P[:Ci] * rel[:Ci]).sum() / Ci)
        d = min(1000, len(order))
        acc["mAP@1000"].append((P[:d] * rel[:d]).sum() / Ci)
    return {k: float(np.mean(v)) for k, v in acc.items()}, n_lone


def _data(seed, n=240, d=6, n_cls=70, dup=True):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = rng.integers(0, n_cls, n)
    if dup:  # exact ties: duplicated rows (same and other classes), and a repeated value block
        X[10] = X[3]
        X[11] = X[3]
        X[20:26] = X[30]
        y[20] = y[30]
        X[40] = X[41] + 0.0  # and an exact tie between different classes
        y[40] = y[41] + 1
    y[-1] = 10_000  # a singleton class: a lone query
    return X, y


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("seed", [0, 1])
def test_same_set_matches_brute_force(metric, seed):
    X, y = _data(seed)
    ref, n_lone = brute(X, y, metric=metric)
    got = retrieval_metrics(X, y, metric=metric, include=KEYS)
    assert n_lone >= 1 and got["n_lone"] == n_lone
    assert got["n_queries"] == len(X) and got["n_evaluated"] == len(X) - n_lone
    for k in KEYS:
        assert got[k] == pytest.approx(ref[k], abs=1e-9), k


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_separate_sets_match_brute_force(metric):
    X, y = _data(3, n=150)
    Xr, yr = _data(4, n=260)
    Xr[5] = X[7]  # a reference equal to a query: nothing is excluded in this protocol
    Xr[6] = X[7]
    ref, n_lone = brute(X, y, Xr, yr, metric=metric)
    got = retrieval_metrics(X, y, X_ref=Xr, y_ref=yr, metric=metric, include=KEYS)
    assert got["n_lone"] == n_lone
    for k in KEYS:
        assert got[k] == pytest.approx(ref[k], abs=1e-9), k


@pytest.mark.parametrize("block", [16, 50])
def test_block_size_and_symmetric_path_do_not_change_values(block):
    X, y = _data(5, n=300, n_cls=40)
    ref, _ = brute(X, y, ks=(1, 3, 16))
    keys = ["R@1", "R@3", "R@16", "P@1", "R-Precision", "MAP@R", "mAP@C", "mAP@1000"]
    got = retrieval_metrics(X, y, ks=(1, 3, 16), block=block, include=keys, device="cpu")
    for k in keys:
        assert got[k] == pytest.approx(ref[k], abs=1e-9), k


def test_deep_faiss_candidates_and_many_ties():
    # N > 1000 + slack so mAP@1000 uses faiss candidate lists; a block of 300 identical rows
    # forces the full-row fallback.
    rng = np.random.default_rng(7)
    X = rng.standard_normal((1200, 4))
    y = rng.integers(0, 200, 1200)
    X[100:400] = X[99]
    y[100:250] = y[99]
    ref, _ = brute(X, y)
    got = retrieval_metrics(X, y, include=KEYS)
    for k in KEYS:
        assert got[k] == pytest.approx(ref[k], abs=1e-9), k
    assert got["depth"] == 1000


def test_agrees_with_pytorch_metric_learning():
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    rng = np.random.default_rng(11)
    X = rng.standard_normal((500, 16)).astype(np.float32)
    y = rng.integers(0, 60, 500)
    X += 1.5 * rng.standard_normal((60, 16)).astype(np.float32)[y]
    y[0] = 999  # lone: PML leaves it out too
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    ac = AccuracyCalculator(include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
                            avg_of_avgs=False, k="max_bin_count", device=__import__("torch").device("cpu"))
    pml = ac.get_accuracy(Xn, y)
    got = retrieval_metrics(X, y, include=["P@1", "R-Precision", "MAP@R"])
    assert got["P@1"] == pytest.approx(pml["precision_at_1"], abs=1e-6)
    assert got["R-Precision"] == pytest.approx(pml["r_precision"], abs=1e-6)
    assert got["MAP@R"] == pytest.approx(pml["mean_average_precision_at_r"], abs=1e-6)
    assert got["n_lone"] == 1
    # separate query / reference sets
    pml2 = ac.get_accuracy(Xn[:200], y[:200], Xn[200:], y[200:])
    got2 = retrieval_metrics(X[:200], y[:200], X_ref=X[200:], y_ref=y[200:], include=["P@1", "MAP@R"])
    assert got2["P@1"] == pytest.approx(pml2["precision_at_1"], abs=1e-6)
    assert got2["MAP@R"] == pytest.approx(pml2["mean_average_precision_at_r"], abs=1e-6)


def _one_query_list(relevance, extra_relevant):
    """A 1-D Euclidean set-up: one query at 0, references at 1, 2, ... with the given relevance,
    then ``extra_relevant`` relevant references further away, then a second query of class 1."""
    rel = list(relevance) + [1] * extra_relevant
    Xr = np.arange(1, len(rel) + 1, dtype=float)[:, None]
    yr = np.where(np.array(rel) == 1, 0, 1)
    X = np.array([[0.0], [1000.0]])
    return X, np.array([0, 1]), Xr, yr


@pytest.mark.parametrize("relevance,extra,rp,mapr", [
    ([1, 0, 1, 1, 0, 0, 0, 0, 0, 0], 7, 0.30, (1 + 2 / 3 + 3 / 4) / 10),
    ([1, 1, 1, 0, 0], 2, 0.6, 0.6),
    ([0, 0, 1, 1, 1], 2, 0.6, (1 / 3 + 2 / 4 + 3 / 5) / 5),
])
def test_worked_examples_of_methods(relevance, extra, rp, mapr):
    X, y, Xr, yr = _one_query_list(relevance, extra)
    got = retrieval_metrics(X, y, X_ref=Xr, y_ref=yr, metric="euclidean", per_query=True,
                            include=["P@1", "R-Precision", "MAP@R"])
    pq = got["per_query"]
    assert pq["R@1"][0] == relevance[0]
    assert pq["R-Precision"][0] == pytest.approx(rp, abs=1e-12)
    assert pq["MAP@R"][0] == pytest.approx(mapr, abs=1e-12)


def test_worked_example_rounded_values():
    X, y, Xr, yr = _one_query_list([1, 0, 1, 1, 0, 0, 0, 0, 0, 0], 7)
    pq = retrieval_metrics(X, y, X_ref=Xr, y_ref=yr, metric="euclidean", per_query=True)["per_query"]
    assert round(float(pq["MAP@R"][0]), 4) == 0.2417
    X, y, Xr, yr = _one_query_list([0, 0, 1, 1, 1], 2)
    pq = retrieval_metrics(X, y, X_ref=Xr, y_ref=yr, metric="euclidean", per_query=True)["per_query"]
    assert round(float(pq["MAP@R"][0]), 4) == 0.2867


def test_map_at_c_maximum_is_c_minus_1_over_c():
    # perfectly separated classes of 4: every query retrieves its 3 mates first -> mAP@C = 3/4
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((10, 8)) * 10
    y = np.repeat(np.arange(10), 4)
    X = centers[y] + 0.01 * rng.standard_normal((40, 8))
    got = retrieval_metrics(X, y, include=["R@1", "MAP@R", "mAP@C", "mAP@1000", "R-Precision"])
    assert got["R@1"] == 1.0 and got["MAP@R"] == 1.0 and got["R-Precision"] == 1.0
    assert got["mAP@C"] == pytest.approx(0.75, abs=1e-12)
    assert got["mAP@1000"] == pytest.approx(0.75, abs=1e-12)


def test_keys_order_include_and_per_query_arrays():
    X, y = _data(2, n=120, n_cls=30)
    got = retrieval_metrics(X, y, per_query=True)
    assert list(got)[:11] == ["R@1", "R@2", "R@4", "R@8", "P@1", "R-Precision", "MAP@R", "mAP@C", "mAP@1000",
                              "NMI", "F1"]
    for k in list(got)[:11]:
        assert 0.0 <= got[k] <= 1.0
    pq = got["per_query"]
    lone = np.isnan(pq["MAP@R"])
    assert lone.sum() == got["n_lone"]
    assert np.nanmean(pq["MAP@R"]) == pytest.approx(got["MAP@R"], abs=1e-12)
    assert np.nanmean(pq["R@1"]) == pytest.approx(got["R@1"], abs=1e-12)
    sub = retrieval_metrics(X, y, ks=(3,), include=["R@3", "MAP@R"])
    assert [k for k in sub if not k.startswith("n_") and k not in ("depth", "lone_queries")] == ["R@3", "MAP@R"]


def test_string_labels_and_cosine_equals_euclidean_on_unit_rows():
    X, y = _data(8, n=100, n_cls=20, dup=False)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    a = retrieval_metrics(X, y, include=KEYS)
    b = retrieval_metrics(X, np.array([f"c{v}" for v in y]), metric="euclidean", include=KEYS)
    for k in KEYS:
        assert a[k] == pytest.approx(b[k], abs=1e-12)


@pytest.mark.parametrize("kwargs,msg", [
    (dict(X=np.zeros((5, 2, 2)), y=np.zeros(5)), "2-D"),
    (dict(X=np.ones((5, 2)), y=np.zeros(4)), "5 entries"),
    (dict(X=np.array([[1.0, np.nan], [1, 2], [3, 4]]), y=[0, 1, 1]), "NaN"),
    (dict(X=np.ones((4, 2)), y=[0, 0, 0, 0]), "at least 2 classes"),
    (dict(X=np.ones((4, 2)), y=[0, 0, 1, 1], metric="manhattan"), "unknown metric"),
    (dict(X=np.ones((4, 2)), y=[0, 0, 1, 1], ks=(0,)), "positive integer"),
    (dict(X=np.ones((4, 2)), y=[0, 0, 1, 1], include=["R@3"]), "unknown metric"),
    (dict(X=np.ones((4, 2)), y=[0, 0, 1, 1], X_ref=np.ones((3, 2))), "both X_ref and y_ref"),
    (dict(X=np.ones((4, 2)), y=[0, 0, 1, 1], X_ref=np.ones((3, 3)), y_ref=[0, 1, 1]), "dimension"),
    (dict(X=np.ones((4, 2)), y=[0, 1, 2, 3], include=["MAP@R"]), "no query"),
    (dict(X=np.array([[0.0, 0], [1, 2], [3, 4]]), y=[0, 1, 1]), "all zeros"),
    (dict(X=np.ones((4, 2)), y=[0.5, 0, 1, 1]), "integer class labels"),
])
def test_input_validation(kwargs, msg):
    with pytest.raises(EmbedscopeError, match=msg):
        retrieval_metrics(**kwargs)


def test_torch_block_path_matches_brute_force(monkeypatch):
    from embedscope.metrics.search import knn

    monkeypatch.setattr(knn, "FAISS_MIN_L", 10**9)
    X, y = _data(9, n=200)
    for metric in ("cosine", "euclidean"):
        ref, _ = brute(X, y, metric=metric)
        got = retrieval_metrics(X, y, metric=metric, include=KEYS, block=64)
        for k in KEYS:
            assert got[k] == pytest.approx(ref[k], abs=1e-9), k


@pytest.fixture
def counting(monkeypatch):
    """Force the counting pass of mAP@1000 (normally only for N >= 16 x depth on the CPU), with
    tiny tiles so that every query block spans many reference tiles."""
    from embedscope.metrics.search import counting as rankcount
    from embedscope.metrics.search import ranks as retrieval

    monkeypatch.setattr(retrieval, "COUNT_MIN_REFS", 0)
    monkeypatch.setattr(retrieval, "COUNT_MIN_RATIO", 0)
    monkeypatch.setattr(retrieval, "USE_ROWS", False)  # not the full-row tiles (rows.py)
    monkeypatch.setattr(retrieval, "SHALLOW_FLOOR", (1, 32.0))  # floor keys at the depth itself
    monkeypatch.setattr(rankcount, "REF_TILE", 37)
    monkeypatch.setattr(rankcount, "QUERY_BLOCK", 41)
    calls = []
    orig = rankcount.relevant_ranks_by_count

    def spy(*a, **k):
        rank, unresolved = orig(*a, **k)
        calls.append((int(unresolved.sum()), int(np.isinf(rank).sum())))
        return rank, unresolved

    monkeypatch.setattr(rankcount, "relevant_ranks_by_count", spy)
    return calls


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_counting_pass_matches_brute_force(counting, metric):
    X, y = _data(0, n=400, n_cls=60)
    ref, _ = brute(X, y, metric=metric)
    got = retrieval_metrics(X, y, metric=metric, include=KEYS, block=50, device="cpu")
    for k in KEYS:
        assert got[k] == pytest.approx(ref[k], abs=1e-9), k
    # shallow depth: most pairs are certified beyond it by the survivor count
    keys = ["R@1", "R@3", "R@16", "P@1", "R-Precision", "MAP@R", "mAP@C"]
    X, y = _data(1, n=600, n_cls=30)
    ref, _ = brute(X, y, metric=metric, ks=(1, 3, 16))
    got = retrieval_metrics(X, y, metric=metric, ks=(1, 3, 16), include=keys, block=64, device="cpu")
    for k in keys:
        assert got[k] == pytest.approx(ref[k], abs=1e-9), k
    assert counting[-1][0] == 0 and counting[-1][1] > 0


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_counting_pass_separate_sets_and_ties(counting, metric):
    X, y = _data(3, n=150)
    Xr, yr = _data(4, n=260)
    Xr[5] = X[7]
    Xr[6] = X[7]
    ref, _ = brute(X, y, Xr, yr, metric=metric)
    got = retrieval_metrics(X, y, X_ref=Xr, y_ref=yr, metric=metric, include=KEYS, block=33, device="cpu")
    for k in KEYS:
        assert got[k] == pytest.approx(ref[k], abs=1e-9), k
    rng = np.random.default_rng(7)  # 300 identical rows: windows full of exact ties
    X = rng.standard_normal((1200, 4))
    y = rng.integers(0, 200, 1200)
    X[100:400] = X[99]
    y[100:250] = y[99]
    ref, _ = brute(X, y, metric=metric)
    got = retrieval_metrics(X, y, include=KEYS, block=100, metric=metric, device="cpu")
    for k in KEYS:
        assert got[k] == pytest.approx(ref[k], abs=1e-9), k


def test_counting_pass_falls_back_when_the_floor_is_too_high(counting, monkeypatch):
    from embedscope.metrics.search import counting as rankcount

    monkeypatch.setattr(rankcount, "SAMPLE_SIGMAS", -3.0)  # floors above the depth-th key
    keys = ["R@1", "R@3", "R@16", "P@1", "R-Precision", "MAP@R", "mAP@C"]
    X, y = _data(0, n=600, n_cls=30)
    ref, _ = brute(X, y, ks=(1, 3, 16))
    got = retrieval_metrics(X, y, ks=(1, 3, 16), include=keys, block=64, device="cpu")
    for k in keys:
        assert got[k] == pytest.approx(ref[k], abs=1e-9), k
    assert counting[-1][0] > 100  # many pairs went to the full-row fallback


def test_counting_pass_is_used_at_scale_and_equals_the_candidate_path(monkeypatch):
    from embedscope.metrics.search import counting as rankcount
    from embedscope.metrics.search import ranks as retrieval

    rng = np.random.default_rng(5)  # N = 17,000 >= 16 x 1000: the counting pass is the default
    y = rng.integers(0, 3000, 17000)
    X = rng.standard_normal((3000, 24))[y] + 1.3 * rng.standard_normal((17000, 24))
    used = []
    orig = rankcount.relevant_ranks_by_count
    monkeypatch.setattr(rankcount, "relevant_ranks_by_count", lambda *a, **k: used.append(1) or orig(*a, **k))
    a = retrieval_metrics(X, y, include=["MAP@R", "mAP@1000"], device="cpu")  # depth 1000: not full rows
    c2 = retrieval_metrics(X, y, include=["R@1", "MAP@R"], device="cpu")  # shallow: full-row tiles
    assert len(used) == 1
    monkeypatch.setattr(retrieval, "USE_ROWS", False)
    a2 = retrieval_metrics(X, y, include=["R@1", "MAP@R"], device="cpu")  # shallow: floor at 256
    assert len(used) == 2
    monkeypatch.setattr(retrieval, "COUNT_MIN_REFS", 10**9)
    b = retrieval_metrics(X, y, include=["MAP@R", "mAP@1000"], device="cpu")
    b2 = retrieval_metrics(X, y, include=["R@1", "MAP@R"], device="cpu")
    assert len(used) == 2
    assert a["mAP@1000"] == b["mAP@1000"] and a["MAP@R"] == b["MAP@R"]
    assert a2 == b2 == c2


def brute_lists(X, y, Xr=None, yr=None, metric="cosine"):
    """Each query's relevance list (float64 keys, ties to the lower index), from the full matrix."""
    orders, yr = ranked_references(X, y, Xr, yr, metric)
    return [(yr[order] == y[i]).astype(float) for i, order in enumerate(orders)]


def _roth_ap(rel, depth):
    """Roth's mAP_1000 / mAP_lim per query: AP over the top min(depth, list length), divided by the
    class size C_i = R_i + 1 (missing slots of a short list are misses)."""
    d = min(depth, len(rel))
    P = np.cumsum(rel) / np.arange(1, len(rel) + 1)
    return (P[:d] * rel[:d]).sum() / (rel.sum() + 1)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_map_at_lim_matches_brute_force(metric):
    # N - 1 = 1,199 > 1,023: the depth cut matters; the tie block makes the ranks dense
    rng = np.random.default_rng(21)
    X = rng.standard_normal((1200, 3))
    y = rng.integers(0, 4, 1200)
    X[50:80] = X[49]
    y[-1] = 99  # lone
    lists = brute_lists(X, y, metric=metric)
    ev = [r for r in lists if r.sum() > 0]
    got = retrieval_metrics(X, y, metric=metric, include=["mAP@1000", "mAP@lim"])
    assert got["depth"] == 1023
    assert got["mAP@lim"] == pytest.approx(np.mean([_roth_ap(r, 1023) for r in ev]), abs=1e-12)
    assert got["mAP@1000"] == pytest.approx(np.mean([_roth_ap(r, 1000) for r in ev]), abs=1e-12)
    assert got["mAP@lim"] != got["mAP@1000"]
    # a short list (N - 1 < 1,000): both cut at N - 1, so they agree
    X, y = _data(6, n=200)
    s = retrieval_metrics(X, y, metric=metric, include=["mAP@1000", "mAP@lim"])
    lists = [r for r in brute_lists(X, y, metric=metric) if r.sum() > 0]
    assert s["mAP@lim"] == pytest.approx(np.mean([_roth_ap(r, 1023) for r in lists]), abs=1e-12)
    assert s["mAP@lim"] == s["mAP@1000"]
    # not in the default set (the default keys predate it)
    assert "mAP@lim" not in retrieval_metrics(X, y, include=None)


@pytest.mark.parametrize("same", [True, False])
def test_lone_queries_zero_averages_over_all_queries(same):
    X, y = _data(12, n=180, n_cls=90)  # many classes of 1-3: several lone queries
    if same:
        lists, kw = brute_lists(X, y), {}
    else:
        Xr, yr = _data(13, n=150, n_cls=90)
        lists, kw = brute_lists(X, y, Xr, yr), dict(X_ref=Xr, y_ref=yr)
    keys = ["R@1", "R@4", "P@1", "R-Precision", "MAP@R", "mAP@C", "mAP@1000", "mAP@lim"]
    ex = retrieval_metrics(X, y, ks=(1, 4), include=keys, **kw)
    zero = retrieval_metrics(X, y, ks=(1, 4), include=keys, lone_queries="zero", **kw)
    n = len(X)
    n_lone = sum(r.sum() == 0 for r in lists)
    assert n_lone >= 5 and zero["n_lone"] == ex["n_lone"] == n_lone
    assert zero["lone_queries"] == "zero" and ex["lone_queries"] == "exclude"
    assert zero["n_evaluated"] == n and ex["n_evaluated"] == n - n_lone

    def per_query(rel):  # every measure of METHODS.md §1 from the list; 0 for a lone query
        R = rel.sum()
        if R == 0:
            return dict.fromkeys(keys, 0.0)
        Ri, Ci = int(R), int(R) + 1
        P = np.cumsum(rel) / np.arange(1, len(rel) + 1)
        return {"R@1": rel[:1].max(), "R@4": rel[:4].max(), "P@1": rel[0], "R-Precision": rel[:Ri].sum() / Ri,
                "MAP@R": (P[:Ri] * rel[:Ri]).sum() / Ri, "mAP@C": (P[:Ci] * rel[:Ci]).sum() / Ci,
                "mAP@1000": _roth_ap(rel, 1000), "mAP@lim": _roth_ap(rel, 1023)}

    pq = [per_query(r) for r in lists]
    for k in keys:
        assert zero[k] == pytest.approx(sum(p[k] for p in pq) / n, abs=1e-12), k
        assert ex[k] == pytest.approx(sum(p[k] for p in pq) / (n - n_lone), abs=1e-12), k
        assert zero[k] == pytest.approx(ex[k] * (n - n_lone) / n, abs=1e-12), k
    with pytest.raises(EmbedscopeError, match="lone_queries"):
        retrieval_metrics(X, y, lone_queries="drop")
