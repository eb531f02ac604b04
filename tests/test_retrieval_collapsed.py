"""Retrieval of a collapsed model: every embedding on one point (or on a few), so that every key of
a query's row ties with most others (docs/methods.md §1: ties go to the lower reference index).

Each ranking pass compared a relevant pair with the float32 near-ties of its key ("its window")
pair by pair; with every key equal, a window is the whole row and that grew as N³ in time (and
in memory for the counting pass): 1,200 collapsed points with two classes took 182 s, 2,000 with
twenty classes 53 s for mAP@1000, and a training run's evaluation stalled on such a model. The
passes now count large windows from their union (``knn.tie_window_before``). Checked here against
the brute force of ``test_audit_retrieval`` (the full float64 key matrix, ties to the lower index)
in each pass that ranks pairs, with the union path seen to run. Rows are dyadic, so that the
brute force's keys and embedscope's per-pair keys tie exactly where the rows are equal.
"""

import numpy as np
import pytest
from test_audit_retrieval import check  # noqa: F401 (the brute force and its comparison)

import embedscope.metrics.search.counting as counting
import embedscope.metrics.search.ranks as ranks
import embedscope.metrics.search.rows as rows
from embedscope.metrics import retrieval_metrics

SHALLOW = ["R@1", "R@2", "R@8", "P@1", "R-Precision", "MAP@R", "mAP@C"]
POINTS = np.array([[0.5, 0.25, -0.75, 0.5], [-0.25, 1.0, 0.5, 0.0], [0.75, -0.5, 0.25, -1.0]])


@pytest.fixture
def seen(monkeypatch):
    """The passes whose union-of-windows count ran: 'rows', 'count', 'candidates'."""
    out = []
    for name, mod in (("rows", rows), ("count", counting), ("candidates", ranks)):
        real = mod.tie_window_before

        def spy(*a, _real=real, _name=name, **k):
            out.append(_name)
            return _real(*a, **k)

        monkeypatch.setattr(mod, "tie_window_before", spy)
    return out


def collapsed(n, n_points=1, seed=0):
    rng = np.random.default_rng(seed)
    return POINTS[rng.integers(0, n_points, n)] if n_points > 1 else np.tile(POINTS[:1], (n, 1))


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_one_point_even_classes_the_tile_pass(metric, seen):
    X = collapsed(1200)
    y = np.repeat(np.arange(20), 60)
    got = check(X, y, metric=metric, keys=SHALLOW)
    assert got["R@1"] == pytest.approx(60 / 1200)  # only class 0's queries find class 0 at the lower indices
    assert "rows" in seen


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_one_point_classes_of_hundreds_the_tile_pass_large_mode(metric, seen):
    X = collapsed(1200)
    y = np.repeat(np.arange(3), 400)[np.random.default_rng(1).permutation(1200)]
    check(X, y, metric=metric, keys=SHALLOW)
    assert "rows" in seen and rows.large_mode(np.full(1200, 399), 1200)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_one_point_skewed_classes_the_counting_pass(metric, seen):
    X = collapsed(3000)
    y = np.repeat(np.arange(1500), 2)
    y[:101] = 5000  # one class of 101, the rest pairs: the counting pass
    check(X, y, metric=metric, keys=SHALLOW)
    assert "count" in seen


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_one_point_deep_mAP_the_candidate_lists(metric, seen):
    X = collapsed(1600)
    y = np.repeat(np.arange(20), 80)
    check(X, y, metric=metric, keys=["R@1", "mAP@1000", "mAP@lim"])
    assert "candidates" in seen


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_three_points_query_and_reference_sets(metric, seen):
    # a model collapsed to three points; queries and references separate, classes of 50 with
    # members on every point: ties within each point, exact order across points
    rng = np.random.default_rng(3)
    Xr, yr = collapsed(1500, 3, seed=4), np.repeat(np.arange(30), 50)
    X, y = collapsed(300, 3, seed=5), rng.integers(0, 30, 300)
    check(X, y, Xr, yr, metric=metric, keys=SHALLOW)
    assert seen


def test_collapsed_and_spread_rows_together():
    # half the set collapsed, half spread out (a model collapsing one region): the same brute force
    rng = np.random.default_rng(6)
    X = np.round(rng.standard_normal((1400, 4)) * 4) / 4
    X[np.abs(X).sum(1) == 0, 0] = 1.0
    X[::2] = POINTS[1]
    y = rng.integers(0, 25, 1400)
    for metric in ("cosine", "euclidean"):
        check(X, y, metric=metric, keys=SHALLOW)


def test_union_count_equals_the_pair_by_pair_count(monkeypatch):
    # the same search with the union path switched off: identical values (a small set, so the
    # pair-by-pair windows stay affordable)
    X, y = collapsed(400, 2, seed=7), np.repeat(np.arange(8), 50)
    keys = SHALLOW + ["mAP@1000"]
    a = retrieval_metrics(X, y, include=keys)
    for mod in (rows, counting, ranks):
        monkeypatch.setattr(mod, "DENSE_WINDOW", 10**9)
    b = retrieval_metrics(X, y, include=keys)
    assert {k: a[k] for k in keys} == {k: b[k] for k in keys}


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_distinct_rows_with_equal_keys(metric, seen):
    # five points; from the rare last one, three others are equally near (cosine 0.5, squared
    # distance 1): distinct rows (other classes of identical rows) whose keys tie exactly, within
    # the depth of its queries, so a pair's key is shared by several groups, each counted by
    # reference index
    P = np.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, -1.0, 0, 0], [0, 0, 1.0, 0], [0.5, 0.5, 0.5, 0.5]])
    rng = np.random.default_rng(8)
    X = P[rng.choice(5, 1500, p=[0.3, 0.3, 0.1, 0.28, 0.02])]
    y = np.repeat(np.arange(25), 60)[rng.permutation(1500)]
    check(X, y, metric=metric, keys=SHALLOW)
    X[:300] = P[0]  # one point dense at the lowest indices
    check(X, y, metric=metric, keys=["R@1", "mAP@1000", "mAP@lim"])
    assert "rows" in seen and "candidates" in seen
