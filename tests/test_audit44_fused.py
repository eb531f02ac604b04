"""Adversarial but legal inputs for the fused counting pass (embedscope/metrics/search/fused.py): it must give
the same RelevantRanks as the numpy passes bit for bit, and the float64 brute force's ranks (keys as per-pair
dot products of the unit rows, ties to the lower index) within the depth. None of these cases found a
mismatch; they guard the kernel's tie, near-tie, sampled-floor and layout branches."""

import numpy as np
import pytest

from embedscope.device import compute_device
from embedscope.metrics import retrieval_metrics
from embedscope.metrics.search import fused, relevant_ranks
from embedscope.metrics.search import ranks as rk
from embedscope.metrics.search.knn import KeySpace
from tests.brute import unit_rows

needs_ext = pytest.mark.skipif(not fused.available(), reason="the C extension was not built")
N = 160


def _case(name):
    rng = np.random.default_rng(sum(map(ord, name)))  # (stable: hash() of a str is salted)
    if name.startswith("lowD"):  # D = 1, 2: most float32 keys tie exactly
        D = int(name[-1])
        X = rng.integers(-3, 4, (N, D)).astype(np.float32)
        X[np.all(X == 0, axis=1), 0] = 1
        return X, rng.integers(0, 4, N)
    if name == "dups":  # 10 identical copies of each row, in 10 classes
        return np.repeat(rng.standard_normal((N // 10, 8)), 10, 0).astype(np.float32), np.tile(np.arange(10), N // 10)
    if name.startswith("near"):  # near ties far below the float32 error bound
        X = np.repeat(rng.standard_normal((N // 5, 6)), 5, 0)
        return X + float(name[4:]) * rng.standard_normal(X.shape), rng.integers(0, 3, N)
    if name == "norms":  # norms from 1e-30 to 1e30
        return rng.standard_normal((N, 8)) * 10.0 ** rng.uniform(-30, 30, (N, 1)), rng.integers(0, 5, N)
    if name == "f16":
        return rng.standard_normal((N, 4)).astype(np.float16), rng.integers(0, 5, N)
    if name == "every8":  # the sampled keys (every 8th reference) keyed highest: the floor estimate biased
        X = rng.standard_normal((N, 8)).astype(np.float32)
        X[::8, 0] += 20
        y = np.ones(N, dtype=int)
        y[::8], y[1::8] = 2, 0
        X[1::8] = 0
        X[1::8, 0] = 1
        return X, y
    if name == "every8tie":  # all keys equal but every 8th, which differs by a hair
        X = np.zeros((N, 2), dtype=np.float32)
        X[:, 0] = 1
        X[::8, 1] = 1e-4
        return X, np.arange(N) % 3
    X = rng.standard_normal((N, 8)).astype(np.float32)
    y = {"half": (np.arange(N) < N // 2).astype(int), "pairs": np.arange(N) // 2,
         "singletons": np.where(np.arange(N) < 50, np.arange(N) + 10, np.arange(N) % 3),
         "strings": np.array([f"c{i % 7}" for i in range(N)]), "negative": -(np.arange(N) % 5) - 1,
         "sorted": np.sort(rng.integers(0, 6, N)), "one_class": np.zeros(N, dtype=int)}[name]
    return X, y


def _same(a, b):
    for f in ("offsets", "ranks", "refs", "n_ranked"):
        x, y = getattr(a, f), getattr(b, f)
        assert (x is None) == (y is None), f
        if x is not None:
            np.testing.assert_array_equal(x, y, err_msg=f)


def _brute(X, y, rr, depth):
    """Ranks within ``depth`` against per-pair float64 keys (the library's definition; a BLAS GEMM's keys
    of identical rows need not be identical, so ``Q @ R.T`` is no reference for exact ties)."""
    U = unit_rows(X)
    K = -np.einsum("id,jd->ij", U, U)
    n = len(y)
    for i in range(n):
        c = np.delete(np.arange(n), i)
        o = c[np.lexsort((c, K[i, c]))]
        pos = np.flatnonzero(y[o] == y[i])
        a, b = rr.offsets[i], rr.offsets[i + 1]
        keep = pos < depth
        np.testing.assert_array_equal(rr.ranks[a:b][keep], pos[keep] + 1.0)
        np.testing.assert_array_equal(rr.refs[a:b][keep], o[pos[keep]])
        assert np.all(np.isinf(rr.ranks[a:b][~keep]))


CASES = ["lowD1", "lowD2", "dups", "near1e-7", "near1e-9", "near1e-12", "norms", "f16", "every8",
         "every8tie", "half", "pairs", "singletons", "strings", "negative", "sorted", "one_class"]


@needs_ext
@pytest.mark.parametrize("name", CASES)
def test_fused_equals_numpy_and_brute(name):
    X, y = _case(name)
    sets = rk.check_sets(X, y)
    Q64, R64 = sets.prepared("cosine")
    plan = fused.fused_plan(compute_device("cpu"), KeySpace(Q64, R64, "cosine", sets.same), np.array([N - 1]))
    assert plan == (name != "every8tie")  # (nearly collapsed rows: a non-plain key space, the numpy passes)
    for depth in ("R", 1, "all"):
        a = relevant_ranks(X, y, depth=depth, device="cpu")
        with fused.disabled():
            b = relevant_ranks(X, y, depth=depth, device="cpu")
        _same(a, b)
    _brute(X, np.asarray(y), a, N - 1)
    R = rk.relevant_counts(rk.check_sets(X, y))
    dq = np.random.default_rng(0).integers(1, N, N)  # per-query depths below, at and above R_i, and n_avail
    dq[::5] = R[::5].clip(1)
    dq[1::5] = N - 1
    for compact in (False, True):
        a = rk.compute_relevant_ranks(rk.check_sets(X, y), "cosine", dq, compact=compact, device="cpu")
        with fused.disabled():
            b = rk.compute_relevant_ranks(rk.check_sets(X, y), "cosine", dq, compact=compact, device="cpu")
        _same(a, b)


@needs_ext
@pytest.mark.parametrize("name", ["lowD2", "dups", "near1e-9", "singletons", "every8"])
def test_metrics_all_keys_equal(name):
    X, y = _case(name)
    a = retrieval_metrics(X, y, device="cpu")
    with fused.disabled():
        b = retrieval_metrics(X, y, device="cpu")
    assert a == b


@needs_ext
@pytest.mark.parametrize("nq", [1, 37])
def test_separate_references_with_ties_and_absent_classes(nq):
    rng = np.random.default_rng(nq)
    Xr = np.repeat(rng.standard_normal((20, 2)), 9, 0).astype(np.float32)  # 180 references, 9 copies each
    yr = np.arange(180) % 4
    Xq, yq = Xr[:nq] + 0, np.arange(nq) % 6  # classes 4, 5: absent from the references
    for depth in ("R", 1, "all"):
        a = relevant_ranks(Xq, yq, X_ref=Xr, y_ref=yr, depth=depth, device="cpu")
        with fused.disabled():
            b = relevant_ranks(Xq, yq, X_ref=Xr, y_ref=yr, depth=depth, device="cpu")
        _same(a, b)
    if nq == 1:  # (retrieval_metrics asks for 2 query classes)
        return
    a = retrieval_metrics(Xq, yq, X_ref=Xr, y_ref=yr, device="cpu")
    with fused.disabled():
        b = retrieval_metrics(Xq, yq, X_ref=Xr, y_ref=yr, device="cpu")
    assert a == b


@needs_ext
def test_threads_and_blocks_on_ties():
    X, y = _case("lowD2")
    sets = rk.check_sets(X, y)
    Q64, R64 = sets.prepared("cosine")
    ks = KeySpace(Q64, R64, "cosine", True)
    lay = rk._Layout(sets.y, sets.y_ref, True)
    want = fused.relevant_ranks_fused(ks, lay, lay.R, threads=1)
    for threads, block in ((2, 1), (3, 7), (2, None)):
        got = fused.relevant_ranks_fused(ks, lay, lay.R, threads=threads, block=block)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
