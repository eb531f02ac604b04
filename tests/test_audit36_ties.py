"""Audit 36: cosine ties of parallel rows (x and c·x, c > 0) are exact ties, broken by the lower index
(docs/methods.md §1), checked against an exact rational ranking; before, one division x / ||x||
rounded the two rows' cosines apart (P@1 1/6 instead of 2/6 on six rows)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from embedscope.metrics import retrieval_metrics
from embedscope.metrics.properties import property_precision
from embedscope.metrics.scale import unit_rows


# ------------------------------------------------------------------ exact cosine ties of parallel rows
def _exact_cos_order(X, i):
    """Query i's other rows by exact cosine (rational arithmetic on squared cosines with their signs),
    ties to the lower index."""
    X = [[Fraction(int(v)) for v in row] for row in np.asarray(X)]

    def key(j):
        dot = sum(a * b for a, b in zip(X[i], X[j]))
        nj = sum(b * b for b in X[j])
        return -(1 if dot >= 0 else -1) * dot * dot / nj  # the query's own norm is common to all

    return sorted((j for j in range(len(X)) if j != i), key=lambda j: (key(j), j))


def test_parallel_rows_get_bitwise_equal_unit_rows():
    rng = np.random.default_rng(0)
    base = rng.integers(-9, 10, size=(40, 5)).astype(np.float64)
    base[np.abs(base).sum(1) == 0, 0] = 1.0
    c = rng.integers(1, 1000, size=40).astype(np.float64)  # exact integer multiples: parallel rows
    U1, _ = unit_rows(base)
    U2, _ = unit_rows(base * c[:, None])
    assert np.array_equal(U1, U2)
    # negative multiples: the opposite unit row, bit for bit; extreme scales: the same unit rows
    assert np.array_equal(unit_rows(-3.0 * base)[0], -U1)
    assert np.array_equal(unit_rows(np.ldexp(base, 1000))[0], U1)
    assert np.array_equal(unit_rows(np.ldexp(base, -1060))[0], U1)
    # unit length to rounding, and zero rows left zero (flagged)
    Z = np.vstack([base[:3], np.zeros((1, 5))])
    U, zero = unit_rows(Z)
    assert zero.tolist() == [False, False, False, True] and not U[3].any()
    assert np.allclose(np.einsum("ij,ij->i", U[:3], U[:3]), 1.0, rtol=0, atol=8e-16)


def test_cosine_ties_of_parallel_rows_go_to_the_lower_index():
    # rows 1 and 2 point the same way ((1, 3) and (7, 21)): every cosine with them is the same, so the tie
    # goes to the lower index (docs/methods.md §1); x / ||x|| rounded their cosines apart (P@1 1/6, not 2/6)
    X = np.array([[0, 1], [1, 3], [7, 21], [1, -1], [2, -3], [3, -5]], dtype=np.float64)
    y = np.array([0, 0, 1, 1, 1, 0])
    want = np.mean([float(y[_exact_cos_order(X, i)[0]] == y[i]) for i in range(len(y))])
    assert want == pytest.approx(2 / 6)
    assert retrieval_metrics(X, y, include=["P@1"])["P@1"] == pytest.approx(want)
    X2 = X.copy()
    X2[2] = [2, 6]
    assert retrieval_metrics(X2, y, include=["P@1"])["P@1"] == pytest.approx(want)


def test_cosine_ranks_of_integer_rows_equal_the_exact_ranking():
    # integer rows, many of them parallel: P@1 and R-Precision against the exact rational ranking
    rng = np.random.default_rng(3)
    B = rng.integers(-3, 4, size=(12, 3)).astype(np.float64)
    B[np.abs(B).sum(1) == 0, 0] = 1.0
    X = B[rng.integers(0, 12, 90)] * rng.integers(1, 50, 90)[:, None]
    y = rng.integers(0, 4, 90)
    p1, rp = [], []
    for i in range(len(y)):
        order = _exact_cos_order(X, i)
        R = int((y == y[i]).sum()) - 1
        p1.append(float(y[order[0]] == y[i]))
        rp.append(float(np.mean(y[order[:R]] == y[i])))
    got = retrieval_metrics(X, y, include=["P@1", "R-Precision"])
    assert got["P@1"] == pytest.approx(np.mean(p1), abs=1e-15)
    assert got["R-Precision"] == pytest.approx(np.mean(rp), abs=1e-15)


def test_nr_prec_cosine_of_parallel_rows_does_not_depend_on_their_lengths():
    X = np.array([[0, 1], [1, 3], [7, 21], [1, -1], [2, -3]], dtype=np.float64)
    prop = {"a": np.array([0, 0, 1, 1, 1])}
    a = property_precision(X, prop, metric="cosine")["a"]
    X2 = X.copy()
    X2[2] = [2, 6]
    b = property_precision(X2, prop, metric="cosine")["a"]
    assert a["R-Prec"] == b["R-Prec"] == pytest.approx(0.4)
