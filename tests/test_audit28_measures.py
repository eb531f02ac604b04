"""Audit 28: measures against their formulas (docs/methods.md) in odd cases, brute force from the formula."""

import numpy as np
import pytest

from embedscope.metrics import nearest_same_different, share_below_diagonal


def _nsd_brute(X, y, metric):
    """docs/methods.md §10 literally: every pair's float64 similarity from the two rows, the point
    itself excluded; s = cos, x·y or −‖x − y‖ (differences, no expansion)."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    n = len(X)
    if metric == "cosine":
        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        S = U @ U.T
    elif metric == "dot":
        S = X @ X.T
    else:
        S = -np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    same = np.full(n, np.nan)
    diff = np.full(n, np.nan)
    for i in range(n):
        own = (y == y[i]) & (np.arange(n) != i)
        if own.any():
            same[i] = S[i, own].max()
        if (y != y[i]).any():
            diff[i] = S[i, y != y[i]].max()
    return same, diff


def _p_at_1_brute(X, y, metric):
    """P@1 of §1 (query excluded, ties to the lower index) from float64 differences / cosines."""
    X = np.asarray(X, dtype=np.float64)
    n = len(X)
    if metric == "cosine":
        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        key = -(U @ U.T)
    else:
        key = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(key, np.inf)
    return float(np.mean([y[int(np.argmin(key[i]))] == y[i] for i in range(n)]))


def _near_duplicates(rng, n=60, d=16, dtype=np.float32):
    """Rows a few units in the last place (of ``dtype``) apart, around one point far from 0."""
    v = (rng.standard_normal(d) + 2).astype(dtype)
    steps = rng.integers(-20, 21, (n, d)).astype(dtype)
    return (v + steps * np.spacing(np.abs(v))).astype(dtype)


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
def test_nearest_same_different_of_float32_near_duplicates_is_the_formula(metric):
    """The float32 search alone picked the nearest by keys it cannot order (the Euclidean key
    2x·y − ‖y‖² cancels: distances came out up to 100% off, share below the diagonal 0.57 where the
    exact R@1 is 0.25); each value now is the largest float64 similarity of the pair's rows."""
    rng = np.random.default_rng(5)
    X = _near_duplicates(rng)
    y = rng.integers(0, 3, len(X))
    s_same, s_diff = nearest_same_different(X, y, metric=metric, block_size=17)
    b_same, b_diff = _nsd_brute(X, y, metric)
    atol = 4e-16 if metric == "cosine" else 0.0  # (cosines near 1: float64 rounding of the two routes)
    np.testing.assert_allclose(s_same, b_same, rtol=1e-12, atol=atol)
    np.testing.assert_allclose(s_diff, b_diff, rtol=1e-12, atol=atol)
    if metric == "euclidean":  # no tie among these distances: the share below is the exact P@1
        assert share_below_diagonal(s_same, s_diff)[0] == _p_at_1_brute(X, y, metric)


def test_nearest_same_different_of_float64_near_duplicates_euclidean():
    """float64 rows 1e-9 apart around a point at distance ~8 from 0: the float64 expansion's error
    (eps·‖x‖² ~ 1e-14 on squared distances of ~1e-18) chose wrong pairs (distances 40% off)."""
    rng = np.random.default_rng(6)
    X = rng.standard_normal(16) + 3 + 1e-9 * rng.standard_normal((50, 16))
    y = rng.integers(0, 3, 50)
    s_same, s_diff = nearest_same_different(X, y, metric="euclidean")
    b_same, b_diff = _nsd_brute(X, y, "euclidean")
    np.testing.assert_allclose(s_same, b_same, rtol=1e-12)
    np.testing.assert_allclose(s_diff, b_diff, rtol=1e-12)
    assert share_below_diagonal(s_same, s_diff)[0] == _p_at_1_brute(X, y, "euclidean")


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_nearest_same_different_collapsed_and_mixed_duplicates(metric):
    """A collapsed model (every row equal) and exact duplicates mixed with distinct rows, across
    classes: every candidate the search cannot tell apart is re-decided, equal rows once."""
    rng = np.random.default_rng(7)
    X = np.ones((300, 8), np.float32)
    y = rng.integers(0, 4, 300)
    s_same, s_diff = nearest_same_different(X, y, metric=metric)
    want = 1.0 if metric == "cosine" else 0.0  # (cos of a row with itself: 1 to float64 rounding)
    np.testing.assert_allclose(s_same, want, rtol=0, atol=4e-16)
    np.testing.assert_allclose(s_diff, want, rtol=0, atol=4e-16)
    B = rng.standard_normal((5, 8)).astype(np.float32)
    X = B[rng.integers(0, 5, 120)]
    X[::7] += np.float32(1e-6) * rng.standard_normal((len(X[::7]), 8)).astype(np.float32)
    y = rng.integers(0, 3, 120)
    s_same, s_diff = nearest_same_different(X, y, metric=metric, block_size=50)
    b_same, b_diff = _nsd_brute(X, y, metric)
    np.testing.assert_allclose(s_same, b_same, rtol=1e-12, atol=4e-16)
    np.testing.assert_allclose(s_diff, b_diff, rtol=1e-12, atol=4e-16)


def test_sampled_uniformity_of_float32_near_parallel_rows_is_the_formula():
    """The sampled uniformity of float32 rows took 2 − 2cos from a float32 dot product (error ~1e-7):
    rows of a nearly collapsed model (squared distances ~4e-12) gave −7.1e-8 for −3.7e-12. Pairs
    that close now come from the difference of the float64 unit rows: the brute force over the
    same drawn pairs (the seed's draws, as documented) to 1e-5."""
    from embedscope.metrics import alignment_uniformity

    rng = np.random.default_rng(5)
    X = _near_duplicates(rng, n=700, d=16)
    y = rng.integers(0, 3, len(X))
    got = alignment_uniformity(X, y, max_pairs=20_000, seed=1)
    assert not got["uniformity_exact"]
    draw = np.random.default_rng(1)
    i = draw.integers(0, len(X), 20_000)
    j = draw.integers(0, len(X) - 1, 20_000)
    j += j >= i
    U = X.astype(np.float64)
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    d2 = ((U[i] - U[j]) ** 2).sum(1)
    want = np.log1p(np.mean(np.expm1(-2 * d2)))
    assert want < 0 and got["uniformity"] == pytest.approx(want, rel=1e-10, abs=0)


def test_share_below_diagonal_refuses_infinite_similarities():
    """±inf was counted as a lone point (left out: (1.0, 1)); it is no similarity: one clear error."""
    from embedscope.errors import EmbedscopeError

    with pytest.raises(EmbedscopeError, match=r"s_same holds an infinite value \(the first at position 0\)"):
        share_below_diagonal([np.inf, 0.5], [0.1, 0.2])
    with pytest.raises(EmbedscopeError, match="s_diff holds an infinite value"):
        share_below_diagonal([0.9, 0.5], [0.1, -np.inf])
    assert share_below_diagonal([0.9, 0.5, np.nan], [0.1, 0.6, 0.2]) == (0.5, 1)
