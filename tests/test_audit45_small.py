"""Audit 45 (A): small correctness items.

What was wrong before:

1. :func:`embedscope.viz.neighbours.similarity_digits` of an empty array (``np.empty((0,))``,
   ``np.empty((3, 0))``) raised ("cannot reshape array of size 0 into shape (0)") instead of
   returning ``lo``.
"""

from __future__ import annotations

import numpy as np
import pytest


# ------------------------------------------------------------------ 1. similarity_digits of nothing
@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 5), (2, 0, 3), (0, 0)])
def test_similarity_digits_of_an_empty_array_is_lo(shape):
    from embedscope.viz.neighbours import similarity_digits

    for dtype in (np.float32, np.float64):
        assert similarity_digits(np.empty(shape, dtype=dtype)) == 2
        assert similarity_digits(np.empty(shape, dtype=dtype), lo=3) == 3
        assert similarity_digits(np.empty(shape, dtype=dtype), lo=3, hi=5) == 3


def test_similarity_digits_of_nan_rows_and_scalars():
    from embedscope.viz.neighbours import similarity_digits

    assert similarity_digits(np.full((2, 3), np.nan)) == 2
    assert similarity_digits(np.full((2, 3), np.nan), lo=4) == 4
    assert similarity_digits(np.array(np.nan)) == 2
    assert similarity_digits(np.float64(0.5)) == 2
    assert similarity_digits(np.array(0.99995)) == 5  # (4 decimals would read "1.0000")
    assert similarity_digits([[np.nan, 0.999521, 0.999524]]) == 6  # a NaN beside values: the values count
