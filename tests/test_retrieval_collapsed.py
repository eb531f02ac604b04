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


def test_union_taken_a_few_rows_at_a_time_gives_the_same_values(monkeypatch):
    # the union's arrays are bounded: beyond TIE_CHUNK_PLACES places the windows go a few rows at a
    # time (a collapsed SOP-sized set); forced here with a limit below one block's places
    import embedscope.metrics.search.knn as knn

    X, y = collapsed(1500, 2, seed=9), np.repeat(np.arange(25), 60)
    keys = SHALLOW + ["mAP@1000"]
    a = retrieval_metrics(X, y, include=keys)
    calls = []
    real = knn._tie_window_rows

    def spy(n_places, *args, **kw):
        calls.append(n_places)
        return real(n_places, *args, **kw)

    monkeypatch.setattr(knn, "TIE_CHUNK_PLACES", 5000)
    monkeypatch.setattr(knn, "_tie_window_rows", spy)
    b = retrieval_metrics(X, y, include=keys)
    assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
    assert len(calls) > 10 and max(calls) <= 5000
    check(X, y, keys=SHALLOW)  # and the brute force, with the small limit


def test_too_many_survivors_fall_back_to_a_pass_of_bounded_memory(monkeypatch):
    # the tile pass keeps the survivors of unfinished blocks; with every key tied these are whole
    # rows (N² in all: a collapsed SOP-sized set would not fit in memory). Past its budget the pass
    # stops (SurvivorOverflow) and the counting pass or the candidate lists rank the search: the
    # same values (forced here with a tiny budget)
    events = []
    real = rows.relevant_ranks_by_rows

    def spy(*a, **k):
        try:
            return real(*a, **k)
        except rows.SurvivorOverflow:
            events.append("overflow")
            raise

    monkeypatch.setattr(rows, "relevant_ranks_by_rows", spy)
    monkeypatch.setattr(rows, "SURVIVOR_BUDGET", (0.0, 500, 500))
    X, y = collapsed(1600, 3, seed=10), np.repeat(np.arange(20), 80)
    check(X, y, keys=SHALLOW)
    assert events == ["overflow"]
    X = np.round(np.random.default_rng(11).standard_normal((1600, 4)) * 4) / 4  # real-looking rows, too
    check(X, y, metric="euclidean", keys=SHALLOW)


def test_an_abandoned_tile_pass_prints_no_line(monkeypatch, capsys):
    # output to a file: one line per phase; the tile pass given up for the counting pass leaves none
    monkeypatch.setattr(rows, "SURVIVOR_BUDGET", (0.0, 500, 500))
    X, y = collapsed(1600), np.repeat(np.arange(20), 80)
    retrieval_metrics(X, y, include=["P@1", "MAP@R"], progress=True)
    lines = [s for s in capsys.readouterr().err.splitlines() if s.startswith("retrieval")]
    assert len(lines) == 1, lines


def test_real_embeddings_stay_far_below_the_survivor_budget(monkeypatch):
    # the budget (32 x the depths) must never stop the tile pass on embeddings that do not collapse:
    # Gaussian classes, easy to hard, hold at most ~2.3 x a block's depths (measured), checked < 8 x
    worst = []
    add = rows._Rows._add

    def spy(self, blk, part):
        out = add(self, blk, part)
        s, e = self.blocks[blk]
        worst.append(self.held_blk[blk] / float(self.depth[s:e].sum()))
        return out

    monkeypatch.setattr(rows._Rows, "_add", spy)
    rng = np.random.default_rng(12)
    for n, d, c, noise in ((3000, 16, 50, 3.0), (4000, 64, 400, 1.2), (3000, 32, 10, 1.0)):
        centres = rng.standard_normal((c, d))
        y = rng.integers(0, c, n)
        X = (centres[y] + noise * rng.standard_normal((n, d))).astype(np.float32)
        retrieval_metrics(X, y, include=["P@1", "MAP@R"])
    assert worst and max(worst) < 8


def test_counting_pass_with_estimated_keys_on_a_collapsed_model(monkeypatch):
    # classes of 60 in the counting pass (the tile pass given up): the pairs' keys are estimates from
    # a GEMM per class, so the union count takes their exact keys, once per pair over the flushes
    monkeypatch.setattr(rows, "SURVIVOR_BUDGET", (0.0, 500, 500))
    seen = []
    exact = counting._Pass._exact_keys

    def spy(self, blk, wp):
        seen.append(self.estimated)
        return exact(self, blk, wp)

    monkeypatch.setattr(counting._Pass, "_exact_keys", spy)
    check(collapsed(3000, 3, seed=4), np.repeat(np.arange(50), 60), keys=SHALLOW)
    assert seen and all(seen)
