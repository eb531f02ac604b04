"""Classes of a thousand and more (10-class sets such as CIFAR-10 embeddings): R-Precision and MAP@R
search to depth R_i >= 1,000. They go to the filtered tile pass (rows.py), which is 4-5x faster there
than the candidate lists they got before; the values equal a float64 brute force written from the
formulas (docs/methods.md §1), ties to the lower index."""

import numpy as np
import pytest
from brute import ranked_references

import embedscope.metrics.search.ranks as ranks_mod
from embedscope.metrics.retrieval import retrieval_metrics


def _brute(X, y, metric):
    orders, yr = ranked_references(X, y, metric=metric)
    p1, rp, mapr = [], [], []
    for i, o in enumerate(orders):
        rel = (yr[o] == y[i]).astype(float)
        R = int(rel.sum())
        top = rel[:R]
        p1.append(rel[0])
        rp.append(top.sum() / R)
        prec = np.cumsum(top) / np.arange(1, R + 1)
        mapr.append((prec * top).sum() / R)
    return np.mean(p1), np.mean(rp), np.mean(mapr)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_classes_of_a_thousand_take_the_tile_pass_and_equal_brute_force(monkeypatch, metric):
    rng = np.random.default_rng(3)
    n, d = 2300, 16
    y = rng.integers(0, 2, n)  # two classes of ~1,150: depth R_i >= 1,000
    X = (rng.standard_normal((2, d))[y] * 0.7 + rng.standard_normal((n, d))).astype(np.float32)
    X[5] = X[9]  # exact duplicates: ties broken by the lower index
    X[700] = X[9]
    calls = []
    from embedscope.metrics.search import rows

    real = rows.relevant_ranks_by_rows

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(rows, "relevant_ranks_by_rows", spy)
    v = retrieval_metrics(X, y, include=["P@1", "R-Precision", "MAP@R"], metric=metric)
    assert calls, "the tile pass did not rank this search"
    want = _brute(X, y, metric)
    got = (v["P@1"], v["R-Precision"], v["MAP@R"])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_a_deep_depth_beyond_the_relevant_sets_still_counts():
    """mAP@1000 over classes of tens: depth 1,000 far beyond R_i goes to the counting pass as before."""
    R = np.full(2000, 60)
    assert not ranks_mod._rows_plan("cpu", np.full(2000, 1000), 2000, R)
    assert ranks_mod._rows_plan("cpu", np.full(2000, 1100), 2300, np.full(2000, 1100))
    assert ranks_mod._rows_plan("cpu", R, 2000, R)


def _tied_set(n=1500, d=8, classes=3, seed=5):
    """Large classes with exact duplicates across labels: a query's nearest neighbours tie, the
    lower index first."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    X = rng.standard_normal((classes, d))[y] * 0.5 + rng.standard_normal((n, d))
    # rows 5, 9 and 700 equal, of two labels: 5's nearest are 9 and 700 (tied, 9 first), and so on
    y[5], y[9], y[700] = 0, 1, 0
    X[9] = X[5]
    X[700] = X[5]
    X[40:60] = X[20]  # a run of duplicates of mixed labels
    X[1000:1010] = np.round(X[1000:1010], 1)  # near-ties
    return X.astype(np.float32), y


def _brute_top(X, y, metric, ks, Xr=None, yr=None):
    orders, lab = ranked_references(X, y, Xr, yr, metric=metric)
    return {k: np.mean([lab[o[:k]].tolist().count(y[i]) > 0 for i, o in enumerate(orders)]) for k in ks}


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_r_at_k_alone_reads_the_top_k_not_every_relevant_pair(monkeypatch, metric):
    """R@1 / P@1 (and small R@k) alone with classes of hundreds: each query's certified top k
    (ties to the lower index), without ranking its R_i relevant pairs; equal to a brute force."""
    X, y = _tied_set()

    def no_ranks(*a, **k):
        raise AssertionError("the relevant pairs were ranked for R@k alone")

    monkeypatch.setattr(ranks_mod, "_pair_ranks", no_ranks)
    want = _brute_top(X, y, metric, (1, 2, 8))
    v = retrieval_metrics(X, y, include=["R@1", "R@2", "R@8", "P@1"], metric=metric)
    assert (v["R@1"], v["R@2"], v["R@8"], v["P@1"]) == (want[1], want[2], want[8], want[1])
    assert retrieval_metrics(X, y, include=["P@1"], metric=metric)["P@1"] == want[1]
    # a separate reference set (nothing excluded) and lone queries counted as zero
    Xr, yr = X[::2], y[::2]
    Xq, yq = X[1::2], y[1::2].copy()
    yq[:7] = 9  # lone queries: no reference of their label
    want = _brute_top(Xq, yq, metric, (1,), Xr, yr)
    v = retrieval_metrics(Xq, yq, X_ref=Xr, y_ref=yr, include=["R@1"], metric=metric, lone_queries="zero")
    assert v["R@1"] == want[1]


def test_r_at_k_alone_takes_the_same_values_as_the_ranks():
    X, y = _tied_set(seed=8)
    a = retrieval_metrics(X, y, include=["R@1", "R@4", "P@1"], ks=[1, 4])
    b = retrieval_metrics(X, y, include=["R@1", "R@4", "P@1", "MAP@R"], ks=[1, 4])  # ranks every pair
    assert (a["R@1"], a["R@4"], a["P@1"]) == (b["R@1"], b["R@4"], b["P@1"])


def test_query_blocks_show_one_progress_bar(monkeypatch):
    """A search in several query blocks (classes of thousands at 100k rows) shows one bar, not
    one per block."""
    import embedscope.metrics.retrieval as ret
    import embedscope.progress as prog

    bars = []
    real = prog.progress_bar

    def spy(*a, **k):
        b = real(*a, **k)
        bars.append(b)
        return b

    monkeypatch.setattr(prog, "progress_bar", spy)
    monkeypatch.setattr(ret, "PAIRS_PER_BLOCK", 200_000)
    X, y = _tied_set()
    one = retrieval_metrics(X, y, include=["P@1", "MAP@R"], progress=True)
    assert len(bars) == 1, f"{len(bars)} bars"
    assert bars[0].n == bars[0].total == len(y)
    monkeypatch.setattr(ret, "PAIRS_PER_BLOCK", 1 << 24)
    assert retrieval_metrics(X, y, include=["P@1", "MAP@R"]) == {k: v for k, v in one.items()}


def _brute_ranks(X, y, metric, depth, Xr=None, yr=None):
    """Per query, its relevant references in rank order with their ranks (inf beyond ``depth``,
    those in reference-index order), from a float64 brute force (ties to the lower index)."""
    orders, lab = ranked_references(X, y, Xr, yr, metric=metric)
    ranks, refs = [], []
    for i, o in enumerate(orders):
        pos = np.flatnonzero(lab[o] == y[i])
        r = (pos + 1).astype(float)
        ref = o[pos]
        fin = r <= depth
        ranks += list(r[fin]) + [np.inf] * int((~fin).sum())
        refs += list(ref[fin]) + sorted(ref[~fin])
    return np.array(ranks), np.array(refs)


@pytest.fixture
def count_large(monkeypatch):
    from embedscope.metrics.search import rows

    calls = []
    real = rows._Rows._count_large

    def spy(self, *a, **k):
        calls.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(rows._Rows, "_count_large", spy)
    return calls


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("floors", ["sampled", "too_high"])
def test_large_classes_rank_from_the_survivors_side(monkeypatch, count_large, metric, floors):
    """Classes of hundreds (>= LARGE_PAIRS_PER_QUERY pairs per query): the relevant pairs are read off
    the sorted survivors; ranks and their order equal a float64 brute force (duplicates across labels,
    near-ties), also where every floor is too high and each row is recounted."""
    from embedscope.metrics.search import rows
    from embedscope.metrics.search.ranks import relevant_ranks

    if floors == "too_high":  # the largest sampled key: above the depth-th key, every row recounted
        monkeypatch.setattr(rows, "_sample_ranks", lambda depth, *a, **k: np.ones_like(np.asarray(depth)))
    X, y = _tied_set(n=1200, classes=3, seed=11)
    rr = relevant_ranks(X, y, metric=metric)
    assert count_large, "the survivors' side did not rank this search"
    want = _brute_ranks(X, y, metric, rr.depth)
    np.testing.assert_array_equal(rr.ranks, want[0])
    np.testing.assert_array_equal(rr.refs, want[1])
    # the compact result of retrieval_metrics: the same measures as the brute force
    v = retrieval_metrics(X, y, include=["P@1", "R-Precision", "MAP@R"], metric=metric)
    np.testing.assert_allclose((v["P@1"], v["R-Precision"], v["MAP@R"]), _brute(X, y, metric), rtol=0, atol=1e-12)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_large_classes_in_query_blocks_equal_brute_force(monkeypatch, count_large, metric):
    """Several query blocks (each searched against every row, its own row taken out afterwards),
    compact results: the per-query values of one search, equal to a brute force."""
    import embedscope.metrics.retrieval as ret

    X, y = _tied_set(n=1200, classes=3, seed=12)
    one = retrieval_metrics(X, y, include=["P@1", "R-Precision", "MAP@R", "mAP@C"], metric=metric, per_query=True)
    monkeypatch.setattr(ret, "PAIRS_PER_BLOCK", 100_000)
    blocks = retrieval_metrics(X, y, include=["P@1", "R-Precision", "MAP@R", "mAP@C"], metric=metric, per_query=True)
    assert count_large
    for k in ("P@1", "R-Precision", "MAP@R", "mAP@C"):
        assert one[k] == blocks[k], k
    for k, a in one["per_query"].items():
        np.testing.assert_array_equal(a, blocks["per_query"][k])
    np.testing.assert_allclose((blocks["P@1"], blocks["R-Precision"], blocks["MAP@R"]), _brute(X, y, metric),
                               rtol=0, atol=1e-12)


def test_large_classes_separate_references_equal_brute_force(count_large):
    from embedscope.metrics.search.ranks import relevant_ranks

    X, y = _tied_set(n=1900, classes=3, seed=13)
    Xq, yq, Xr, yr = X[1::2], y[1::2], X[::2], y[::2]
    for metric in ("cosine", "euclidean"):
        rr = relevant_ranks(Xq, yq, X_ref=Xr, y_ref=yr, metric=metric)
        want = _brute_ranks(Xq, yq, metric, rr.depth, Xr, yr)
        np.testing.assert_array_equal(rr.ranks, want[0])
        np.testing.assert_array_equal(rr.refs, want[1])
    assert count_large


def test_large_classes_with_the_bfloat16_prefilter(monkeypatch, count_large):
    """The bfloat16 pre-filter (unsorted survivor parts) with classes of hundreds: grouped by row
    before the count, the same ranks as a brute force."""
    from embedscope.metrics.search import bf16, rows
    from embedscope.metrics.search.ranks import relevant_ranks

    monkeypatch.setenv(bf16.ENV, "1")
    monkeypatch.setattr(rows, "prefer_bf16", lambda *a, **k: True)
    used = []
    real = rows._Rows._count_parts

    def spy(self, *a):
        used.append(self.cthr is not None)
        return real(self, *a)

    monkeypatch.setattr(rows._Rows, "_count_parts", spy)
    X, y = _tied_set(n=1200, classes=3, seed=11)
    rr = relevant_ranks(X, y)
    if not any(used):
        pytest.skip("no usable bfloat16 GEMM here")
    want = _brute_ranks(X, y, "cosine", rr.depth)
    np.testing.assert_array_equal(rr.ranks, want[0])
    np.testing.assert_array_equal(rr.refs, want[1])
