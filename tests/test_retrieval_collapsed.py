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
        monkeypatch.setattr(mod, "dense_windows", lambda *a: False)
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


def nearly_collapsed(n, d=8, noise=1e-7, seed=20, n_points=1):
    """``n`` distinct float32 rows within ``noise`` of one point (or of a few): a model that has
    nearly collapsed. Every float32 key of a row lies within the tile's error bound of the others,
    yet no two rows are identical (``KeySpace.ref_classes`` is None: every group one reference)."""
    rng = np.random.default_rng(seed)
    P = rng.standard_normal((n_points, d))
    X = (P[rng.integers(0, n_points, n)] + noise * rng.standard_normal((n, d))).astype(np.float32)
    assert np.unique(X, axis=0).shape[0] == n
    return X


@pytest.fixture
def uncentred(monkeypatch):
    """Searches of the rows as given: a nearly collapsed set is otherwise searched about its mean
    (``knn.centre_of``), where its keys separate and no union count runs (tested below)."""
    import embedscope.metrics.search.knn as knn

    monkeypatch.setattr(knn, "CENTRE", False)


@pytest.fixture
def classes_seen(monkeypatch):
    """The ``ref_class`` given to each union count (None: every reference row distinct)."""
    import embedscope.metrics.search.knn as knn

    out = []
    real = knn._tie_window_rows

    def spy(*a, **k):
        out.append(k["ref_class"])
        return real(*a, **k)

    monkeypatch.setattr(knn, "_tie_window_rows", spy)
    return out


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_nearly_collapsed_distinct_rows_the_tile_pass(metric, seen, classes_seen, uncentred):
    # one point plus 1e-7 noise: all keys within the float32 bound, every row distinct, so each
    # union member is its own group (the path that ranked N = 5,000 in 11 s, now ~5 s)
    X = nearly_collapsed(1500)
    y = np.repeat(np.arange(25), 60)
    check(X, y, metric=metric, keys=SHALLOW)
    assert "rows" in seen and classes_seen and all(c is None for c in classes_seen)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_nearly_collapsed_two_classes_and_deep_mAP(metric, seen, classes_seen, uncentred):
    # two classes of hundreds (the large mode), then mAP@1000 (the candidate lists)
    X = nearly_collapsed(1200, seed=21)
    y = np.repeat(np.arange(2), 600)[np.random.default_rng(22).permutation(1200)]
    check(X, y, metric=metric, keys=SHALLOW)
    check(X, np.repeat(np.arange(15), 80), metric=metric, keys=["R@1", "mAP@1000"])
    assert {"rows", "candidates"} <= set(seen) and all(c is None for c in classes_seen)


def test_nearly_collapsed_the_counting_pass(monkeypatch, seen, uncentred):
    # the tile pass given up (a tiny survivor budget): the counting pass on distinct rows
    monkeypatch.setattr(rows, "SURVIVOR_BUDGET", (0.0, 500, 500))
    X = nearly_collapsed(2000, seed=23, n_points=3)
    y = np.repeat(np.arange(1000), 2)
    y[:90] = 5000  # one class of 90, the rest pairs
    check(X, y, metric="cosine", keys=SHALLOW)
    assert "count" in seen


def test_tie_window_before_equals_the_pair_by_pair_count():
    # the union count against its definition, pair by pair: rows of references in place order by
    # key (ascending, or descending), keys with many exact ties (four values), with and without
    # classes of identical rows (equal keys); each pair's window holds every place of its own key
    # and a random margin either side (members outside it lie on their side, as the float32 bound
    # guarantees in the passes)
    from embedscope.metrics.search.knn import tie_window_before

    rng = np.random.default_rng(24)
    checked = 0
    for trial in range(60):
        n_rows, width = int(rng.integers(1, 6)), int(rng.integers(1, 40))
        n_ref = width + int(rng.integers(0, 20))
        cls = rng.integers(0, int(rng.integers(1, n_ref + 1)), n_ref) if trial % 2 else None
        val = rng.integers(0, 4, (n_rows, n_ref)) / 4.0
        if cls is not None:  # identical rows: equal keys
            val = val[:, cls]
        for greater_high in (True, False):
            ref = np.empty((n_rows, width), dtype=np.int64)
            for r in range(n_rows):
                pick = rng.permutation(n_ref)[:width]
                o = np.argsort(val[r, pick] if greater_high else -val[r, pick], kind="stable")
                ref[r] = pick[o]
            kw = val[np.arange(n_rows)[:, None], ref]  # keys by place
            pr, pp = np.nonzero(rng.random((n_rows, width)) < 0.5)
            if pr.size == 0:
                continue
            same = kw[pr] == kw[pr, pp][:, None]  # the places of the pair's own key
            first, last = same.argmax(1), width - 1 - same[:, ::-1].argmax(1)
            lo = np.maximum(first - rng.integers(0, 4, pr.size), 0) + pr * width
            hi = np.minimum(last + 1 + rng.integers(0, 4, pr.size), width) + pr * width
            idp, kp = ref[pr, pp], kw[pr, pp]
            got = tie_window_before(n_rows * width, lo, hi, pr, kp, idp, lambda at, w=width: at // w,
                                    lambda at, r=ref: r.ravel()[at], lambda rr, rf, v=val: v[rr, rf],
                                    greater_high=greater_high, ref_class=cls)
            want = []
            for a, b, r, k, i in zip(lo, hi, pr, kp, idp):
                members = ref.ravel()[a:b]
                keys = val[r, members]
                want.append(int(np.sum((members != i) & ((keys > k) | ((keys == k) & (members < i))))))
            np.testing.assert_array_equal(got, want)
            checked += pr.size
    assert checked > 500
