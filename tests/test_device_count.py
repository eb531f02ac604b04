"""The GPU's counting pass (embedscope/metrics/search/device_count.py), run here on the CPU's torch:
every relevant rank equal to the CPU passes' (and to a float64 brute force), ties to the lower index,
Euclidean and centred key spaces, separate references, any depth, and the fallback when windows
are too large. tests/test_cuda.py runs it on a GPU."""

import numpy as np
import pytest

pytest.importorskip("torch")

import embedscope.metrics.search.device_count as DC  # noqa: E402
import embedscope.metrics.search.knn as knn  # noqa: E402
import embedscope.metrics.search.ranks as R  # noqa: E402
from embedscope.metrics.search import relevant_ranks  # noqa: E402


@pytest.fixture
def on_cpu(monkeypatch):
    """The device counting pass taken on the CPU (the CPU's own passes switched off)."""
    calls = []
    real = DC.relevant_ranks_by_device_count

    def spy(*a, **k):
        out = real(*a, **k)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(R, "COUNT_ON_DEVICE", True)  # off by default (docs/PERFORMANCE.md)
    monkeypatch.setattr(R, "COUNT_ON_CPU", True)
    monkeypatch.setattr(R, "USE_ROWS", False)
    monkeypatch.setattr(R, "COUNT_MIN_REFS", 10 ** 12)
    monkeypatch.setattr(DC, "relevant_ranks_by_device_count", spy)
    return calls


def _brute(X, y, Xr, yr, metric, same):
    X64, R64 = X.astype(np.float64), Xr.astype(np.float64)
    if metric == "cosine":
        X64 = X64 / np.linalg.norm(X64, axis=1, keepdims=True)
        R64 = R64 / np.linalg.norm(R64, axis=1, keepdims=True)
        K = X64 @ R64.T
    else:
        K = -((X64[:, None, :] - R64[None, :, :]) ** 2).sum(-1)
    out = []
    for i in range(len(X)):
        k = K[i].copy()
        if same:
            k[i] = -np.inf
        order = np.lexsort((np.arange(k.size), -k))  # key descending, lower index first
        place = np.empty(k.size)
        place[order] = np.arange(1, k.size + 1)
        rel = np.flatnonzero(yr == y[i])
        if same:
            rel = rel[rel != i]
        out.append(np.sort(place[rel]))
    return out


def _cpu_passes(X, y, **kw):
    """The ranks by the CPU's own passes (the fixture's switches undone for the call)."""
    saved = R.COUNT_ON_CPU, R.USE_ROWS, R.COUNT_MIN_REFS
    R.COUNT_ON_CPU, R.USE_ROWS, R.COUNT_MIN_REFS = False, True, 1_500
    try:
        return _ranks(X, y, **kw)
    finally:
        R.COUNT_ON_CPU, R.USE_ROWS, R.COUNT_MIN_REFS = saved


def _ranks(X, y, **kw):
    rr = relevant_ranks(X, y, device="cpu", depth="all", **kw)
    return [np.sort(rr.ranks[rr.offsets[i]:rr.offsets[i + 1]]) for i in range(len(y))]


def _set(n, dim, classes, noise, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    X = rng.standard_normal((classes, dim))[y] + noise * rng.standard_normal((n, dim))
    return X.astype(dtype), y


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_counting_pass_equals_a_brute_force(on_cpu, metric):
    X, y = _set(500, 24, 40, 1.4)
    got = _ranks(X, y, metric=metric)
    assert on_cpu == [True]
    want = _brute(X, y, X, y, metric, True)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_ties_go_to_the_lower_index(on_cpu):
    # rows repeated (equal keys) and values on a coarse grid: ties everywhere
    rng = np.random.default_rng(3)
    X = np.round(rng.standard_normal((600, 6)), 1).astype(np.float32)
    X[300:450] = X[:150]
    y = rng.integers(0, 50, 600)
    for metric in ("cosine", "euclidean"):
        got = _ranks(X, y, metric=metric)
        want = _brute(X, y, X, y, metric, True)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    assert on_cpu and all(on_cpu)


def test_separate_references(on_cpu):
    X, y = _set(900, 16, 30, 1.2, seed=1)
    got = _ranks(X[:300], y[:300], X_ref=X[300:], y_ref=y[300:])
    want = _brute(X[:300], y[:300], X[300:], y[300:], "cosine", False)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert on_cpu == [True]


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_same_ranks_as_the_cpu_passes_at_a_depth(on_cpu, monkeypatch, metric):
    X, y = _set(2500, 64, 400, 1.9, seed=2)
    new = relevant_ranks(X, y, device="cpu", depth=30, metric=metric)
    assert on_cpu == [True]
    monkeypatch.setattr(R, "COUNT_ON_CPU", False)
    monkeypatch.setattr(R, "USE_ROWS", True)
    monkeypatch.undo()
    old = relevant_ranks(X, y, device="cpu", depth=30, metric=metric)
    np.testing.assert_array_equal(new.offsets, old.offsets)
    np.testing.assert_array_equal(new.ranks, old.ranks)
    np.testing.assert_array_equal(new.refs, old.refs)
    assert np.isinf(new.ranks).any() and np.isfinite(new.ranks).any()


def test_a_nearly_collapsed_model_far_from_the_origin(on_cpu):
    # rows about a far centre (KeySpace measures them about it: the centred key space); keys differ
    # by ~1e-9, so the reference is the CPU passes' exact ranks (a float64 brute force rounds them
    # differently from the certified keys)
    X, y = _set(800, 12, 60, 1.0, seed=4, dtype=np.float64)
    X = (X * 1e-4 + 50.0).astype(np.float32)
    for metric in ("cosine", "euclidean"):
        got = _ranks(X, y, metric=metric)
        want = _cpu_passes(X, y, metric=metric)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    assert on_cpu and all(on_cpu)


def test_too_many_window_members_fall_back_to_the_candidate_lists(on_cpu, monkeypatch):
    rng = np.random.default_rng(6)
    X = np.round(rng.standard_normal((400, 4)), 0).astype(np.float32) + 0.5  # many equal keys: windows
    y = rng.integers(0, 20, 400)
    want = _cpu_passes(X, y)
    got = _ranks(X, y)
    assert on_cpu == [True]
    monkeypatch.setattr(DC, "WINDOW_MOST", 0)
    fallback = _ranks(X, y)
    assert on_cpu == [True, False]  # gave up: the candidate lists ranked it
    for g, f, w in zip(got, fallback, want):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(f, w)


def test_float32_rounding_of_the_thresholds():
    t = np.array([0.1, -0.1, 1.0, 1e-30, -3.3333333333333335, 0.0])
    lo, hi = knn.down32(t), knn.up32(t)
    assert lo.dtype == hi.dtype == np.float32
    assert np.all(lo.astype(np.float64) <= t) and np.all(hi.astype(np.float64) >= t)
    assert np.all(np.nextafter(lo, np.float32(np.inf)).astype(np.float64) > t)  # the largest float32 <= t
    assert np.all(np.nextafter(hi, np.float32(-np.inf)).astype(np.float64) < t)  # the smallest float32 >= t
    assert lo[2] == hi[2] == np.float32(1.0) and lo[5] == hi[5] == 0
