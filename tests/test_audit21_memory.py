"""Memory audit at SOP scale (120,000 x 128): "memory stays bounded: never an N x N matrix when N can
be 100k". Every analysis command was measured at N = 30k, 60k and 120k; the paths that held an
array growing faster than the work needs are tested here at a moderate N, with tracemalloc's peak
of numpy's allocations (numpy reports its buffers to it), and their values checked against the
unblocked computation.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_audit_memory import _traced_peak

from embedscope.metrics import geometry as geometry_mod
from embedscope.metrics.geometry import alignment_uniformity


def _unit_rows(n, d, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.integers(0, max(2, n // 7), n)
    return X, y


def _brute_uniformity(X, t=2.0):
    """log mean exp(-t ||u_i - u_j||^2) over all pairs i < j, from the full float64 Gram matrix."""
    U = X.astype(np.float64)
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    G = U @ U.T
    iu = np.triu_indices(len(U), k=1)
    a = -t * np.clip(2.0 - 2.0 * G[iu], 0.0, None)
    m = a.max()
    return float(m + np.log(np.mean(np.exp(a - m))))


# ----------------------------------------------------------------------------- exact uniformity
def test_exact_uniformity_blocks_are_bounded_by_entries_not_rows(monkeypatch):
    """The exact uniformity (every pair: ``geometry --max-pairs`` >= N(N-1)/2) took blocks of 1024
    rows against all N columns with two int64 index arrays of the block's pairs (np.triu_indices)
    and four float64 copies: about 56 bytes x 1024 x N at once, 3.7 GB at N = 60,000 (``geometry
    --split train --max-pairs 1e10`` on an SOP-sized file), growing with N. Blocks now hold at most
    UNIFORMITY_BLOCK_ENTRIES entries (block rows x N) and the pairs are taken by a boolean mask."""
    n, d = 3000, 16
    X, y = _unit_rows(n, d, 0)
    kw = dict(max_pairs=n * n, seed=0)
    monkeypatch.setattr(geometry_mod, "UNIFORMITY_BLOCK_ENTRIES", 64 * n)  # blocks of 64 rows
    got, peak = _traced_peak(alignment_uniformity, X, y, **kw)
    assert got["uniformity_exact"] and got["uniformity_pairs"] == n * (n - 1) // 2
    # 1024-row blocks held > 1024 * n * 40 bytes (~120 MB here); 64-row blocks ~ 64 * n * 40 (~8 MB)
    # plus the float64 unit rows (n * d * 8) and the per-class sums
    assert peak < 20 * 2**20, f"peak {peak / 2**20:.1f} MB for blocks of 64 rows x {n}"
    assert got["uniformity"] == pytest.approx(_brute_uniformity(X), rel=1e-12, abs=1e-12)
    # the same value as one block of 1024 rows (the former blocking; only the summation order differs)
    monkeypatch.setattr(geometry_mod, "UNIFORMITY_BLOCK_ENTRIES", 1 << 40)
    ref = alignment_uniformity(X, y, **kw)
    assert got["uniformity"] == pytest.approx(ref["uniformity"], rel=1e-13, abs=1e-13)
    assert got["alignment"] == ref["alignment"]


def test_exact_uniformity_default_blocks_scale_with_n():
    """With the default budget the block's rows shrink as N grows: the peak at N = 8000 is not
    about 1024 x N entries (that was ~460 MB of work arrays here)."""
    n, d = 8000, 8
    X, y = _unit_rows(n, d, 1)
    got, peak = _traced_peak(alignment_uniformity, X, y, max_pairs=n * n)
    assert got["uniformity_exact"]
    budget = geometry_mod.UNIFORMITY_BLOCK_ENTRIES
    assert peak < 48 * budget + 4 * n * d * 8, f"peak {peak / 2**20:.1f} MB"


@pytest.mark.parametrize("n", [7, 1500, 2049])
def test_exact_uniformity_in_blocks_of_1024_rows_is_the_formula(n, monkeypatch):
    """Blocks of 1024 rows up to N = 2048 (one or two here), 1023 at N = 2049 (three, the last short);
    every pair counted once, whatever the blocks: the same value with blocks of 1 and 3 rows, and
    the brute force's."""
    X, y = _unit_rows(n, 5, n)
    got = alignment_uniformity(X, y, max_pairs=n * n)
    assert got["uniformity_pairs"] == n * (n - 1) // 2 and got["uniformity_exact"]
    assert got["uniformity"] == pytest.approx(_brute_uniformity(X), rel=1e-12, abs=0)
    if n == 7:
        for rows in (1, 3):
            monkeypatch.setattr(geometry_mod, "UNIFORMITY_BLOCK_ENTRIES", rows * n)
            assert alignment_uniformity(X, y, max_pairs=n * n)["uniformity"] == pytest.approx(got["uniformity"], rel=1e-14, abs=0)


# ----------------------------------------------------------------------------- sampled uniformity
def _sampled_reference(X, pairs, t=2.0):
    """log mean exp(-t ||u_i - u_j||^2) over the given (i, j) pairs, in float64."""
    U = X.astype(np.float64)
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    i, j = pairs
    a = -t * np.clip(2.0 - 2.0 * np.einsum("ij,ij->i", U[i], U[j]), 0.0, None)
    m = a.max()
    return float(m + np.log(np.mean(np.exp(a - m))))


def _draws(n, m, seed, chunk):
    """The pairs of the sampled uniformity: all at once (chunk None), or chunk by chunk, i then j."""
    rng = np.random.default_rng(seed)
    out_i, out_j = [], []
    for s in range(0, m, chunk or m):
        k = min(chunk or m, m - s)
        i, j = rng.integers(0, n, size=k), rng.integers(0, n - 1, size=k)
        out_i.append(i)
        out_j.append(j + (j >= i))
    return np.concatenate(out_i), np.concatenate(out_j)


def test_sampled_uniformity_draws_its_pairs_in_bounded_chunks(monkeypatch):
    """A --max-pairs just below N(N-1)/2 drew all its index pairs at once (4e9 pairs: 32 GB); above
    SAMPLE_DRAW they are drawn chunk by chunk. Up to it the pairs (and values) are those of before."""
    X, y = _unit_rows(400, 8, 5)
    m = 60_000  # < 400 * 399 / 2: sampled
    small = alignment_uniformity(X, y, max_pairs=m, seed=3)
    assert small["uniformity"] == pytest.approx(_sampled_reference(X, _draws(400, m, 3, None)), rel=1e-6)
    monkeypatch.setattr(geometry_mod, "SAMPLE_DRAW", 10_000)
    big = alignment_uniformity(X, y, max_pairs=m, seed=3)
    assert big["uniformity"] == pytest.approx(_sampled_reference(X, _draws(400, m, 3, 32768)), rel=1e-6)
    assert big["uniformity"] == pytest.approx(_brute_uniformity(X), abs=0.02)  # an estimate of the same value
    # memory: 1.9 M pairs at once held 2 x 15 MB of indices (and their temporaries); in chunks < 4 MB
    X2, y2 = _unit_rows(2000, 8, 6)
    got, peak = _traced_peak(alignment_uniformity, X2, y2, max_pairs=1_900_000, seed=0)
    assert peak < 6e6, peak
    monkeypatch.setattr(geometry_mod, "SAMPLE_DRAW", 1 << 40)
    _, peak_at_once = _traced_peak(alignment_uniformity, X2, y2, max_pairs=1_900_000, seed=0)
    assert peak_at_once > 3e7  # the test can tell the two apart
