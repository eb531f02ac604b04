"""``embedscope.synthetic.nearly_collapsed``: the one builder of a nearly collapsed set with far rows
(tests/test_audit26_search.py, tests/test_audit27_search.py, tests/test_audit26_properties_outliers.py,
tests/test_audit25_search.py, benchmarks/centred_outliers.py, benchmarks/properties_outliers.py). Their
thresholds were tuned on its rows, so the rows are checked here bit for bit against the recipe written
out once more."""

import numpy as np
import pytest

from embedscope.synthetic import nearly_collapsed


def recipe(n, d, n_out, far, noise, seed, sort):
    """The rows as the five builders drew them before they shared one (their code; float64, no ties)."""
    rng = np.random.default_rng(seed)
    p = rng.standard_normal(d)
    p /= np.linalg.norm(p)
    X = p + noise * rng.standard_normal((n, d))
    at = rng.choice(n, n_out, replace=False)
    at = np.sort(at) if sort else at
    v = rng.standard_normal((n_out, d))
    X[at] = p + far * v / np.linalg.norm(v, axis=1, keepdims=True)
    return p, X, at


@pytest.mark.parametrize("sort", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rows_shape_dtype_and_far_rows_bit_for_bit(sort, dtype):
    n, d, n_out, far, noise, seed = 300, 12, 7, 0.05, 1e-4, 9
    X, at = nearly_collapsed(n, d, n_out, far, noise=noise, seed=seed, sort=sort, dtype=dtype)
    p, want, want_at = recipe(n, d, n_out, far, noise, seed, sort)
    assert X.shape == (n, d) and X.dtype == dtype and at.shape == (n_out,)
    np.testing.assert_array_equal(at, want_at)
    assert np.unique(at).size == n_out and (np.all(np.diff(at) > 0) if sort else not np.all(np.diff(at) > 0))
    assert np.array_equal(X, want.astype(dtype))
    dist = np.linalg.norm(X.astype(np.float64) - p, axis=1)
    np.testing.assert_allclose(dist[at], far, rtol=1e-6 if dtype == np.float64 else 1e-4)
    bulk = np.setdiff1d(np.arange(n), at)
    assert dist[bulk].max() < 6 * noise * np.sqrt(d) and np.median(dist[bulk]) > 0.5 * noise * np.sqrt(d)


def test_seed_and_no_far_rows():
    a, at_a = nearly_collapsed(200, 8, 5, seed=3)
    b, at_b = nearly_collapsed(200, 8, 5, seed=3)
    c, _ = nearly_collapsed(200, 8, 5, seed=4)
    assert np.array_equal(a, b) and np.array_equal(at_a, at_b) and not np.array_equal(a, c)
    X, at = nearly_collapsed(50, 4, 0, 0.3, seed=3)
    assert at.size == 0 and X.dtype == np.float32
    assert np.array_equal(X, recipe(50, 4, 0, 0.3, 1e-5, 3, True)[1].astype(np.float32))


def test_ties_copies_mirrors_and_bulk_copies():
    n, d, seed = 120, 6, 22  # (an outlier at row 1: the bulk's positions are not row numbers)
    X, at = nearly_collapsed(n, d, 6, 0.2, seed=seed, dtype=np.float64, copies=[(-1, 0), (-2, 1)],
                             mirrors=[(2, 3)], bulk_copies=[(1, 0), (2, 0)])
    p, plain, _ = recipe(n, d, 6, 0.2, 1e-5, seed, True)
    bulk = np.setdiff1d(np.arange(n), at)
    assert at[0] == 1 and bulk[1] == 2
    assert np.array_equal(X[at[-1]], X[at[0]]) and np.array_equal(X[at[-2]], X[at[1]])
    assert np.array_equal(X[at[2]], 2 * p - X[at[3]])
    assert np.array_equal(X[bulk[1]], X[bulk[0]]) and np.array_equal(X[bulk[2]], X[bulk[0]])
    changed = np.flatnonzero((X != plain).any(axis=1))
    np.testing.assert_array_equal(changed, np.sort(np.r_[at[[-1, -2, 2]], bulk[[1, 2]]]))
    # float32: the ties made in float64 before the cast, so they stay exact ties
    Y, _ = nearly_collapsed(n, d, 6, 0.2, seed=seed, copies=[(-1, 0)], mirrors=[(2, 3)])
    assert np.array_equal(Y[at[-1]], Y[at[0]])
    assert np.array_equal(Y[at[2]], (2 * p - plain[at[3]]).astype(np.float32))
