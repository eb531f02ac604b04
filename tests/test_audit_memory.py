"""Memory audit: "memory stays bounded: never an N x N matrix when N can be 100k".

Each test runs a path that held an array growing with N x N (or N x K, K unbounded) at a moderate
size, measures the peak of numpy's allocations with tracemalloc (numpy reports its buffers to it),
and checks the values against the unblocked computation, so that the blocking changes no value.
"""

from __future__ import annotations

import tracemalloc

import numpy as np

from embedscope.metrics import properties as props_mod
from embedscope.metrics.properties import property_precision


def _traced_peak(fn, *args, **kwargs):
    """(result, peak bytes of traced allocations during the call)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn(*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return out, peak


# ----------------------------------------------------------------------------- permutation test
class _StubEngine:
    """Hit counts that depend on the shuffled values only (cheap): the permutation loop's own memory."""

    def hits(self, codes, R, progress=False):
        return codes.copy()


def test_permutation_shuffles_are_drawn_per_group(monkeypatch):
    """The permutation test of NR-Prec held all P shuffles (P x n int64) at once; now each group's
    shuffles are drawn when it comes, so memory does not grow with P x n."""
    rng = np.random.default_rng(0)
    n, P = 1000, 4000
    val = rng.integers(0, 7, n)
    codes = val[None, :].astype(np.int64)
    Nv = np.bincount(val)[val][None, :]
    R = Nv - 1
    monkeypatch.setattr(props_mod, "PERM_GROUP_ENTRIES", 16 * n)
    small, peak = _traced_peak(props_mod._permuted_nr_prec, _StubEngine(), codes, R, Nv, P, 7, False)
    assert peak < P * n * 8 / 4, f"peak {peak / 2**20:.1f} MB: the shuffles of all {P} permutations are held"
    monkeypatch.setattr(props_mod, "PERM_GROUP_ENTRIES", 1 << 30)  # one group: every shuffle at once
    np.testing.assert_array_equal(small, props_mod._permuted_nr_prec(_StubEngine(), codes, R, Nv, P, 7, False))


def test_permutation_values_unchanged_by_the_groups(monkeypatch):
    """With the real engine: the same NR-Precs whatever the group size, and the j-th is the NR-Prec
    of the property shuffled by the j-th draw of ``default_rng(seed)`` (as before the change)."""
    rng = np.random.default_rng(1)
    n, P = 200, 12
    X = rng.standard_normal((n, 4))
    val = rng.integers(0, 5, n)
    eng = props_mod._Engine(X, "euclidean")
    codes = val[None, :].astype(np.int64)
    Nv = np.bincount(val)[val][None, :]
    R = Nv - 1
    monkeypatch.setattr(props_mod, "PERM_GROUP_ENTRIES", 5 * n)  # groups of 5, 5, 2
    grouped = props_mod._permuted_nr_prec(eng, codes, R, Nv, P, 3, False)
    monkeypatch.setattr(props_mod, "PERM_GROUP_ENTRIES", 1 << 30)
    np.testing.assert_array_equal(grouped, props_mod._permuted_nr_prec(eng, codes, R, Nv, P, 3, False))
    draws = np.random.default_rng(3)
    for j in range(P):
        perm = draws.permutation(n)
        if j in (0, 6, 11):
            assert grouped[0, j] == property_precision(X, {"v": val[perm]})["v"]["NR-Prec"]
