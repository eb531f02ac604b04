"""Audit 43: the measures of embedscope/metrics against brute-force references written from the definitions
(docs/methods.md), on the edge cases a user meets. Only what the earlier tests miss is here."""

from __future__ import annotations

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.metrics.clustering import nmi, pairwise_f1


# ----------------------------------------------------------------------------- NMI / F1: bad labelings
@pytest.mark.parametrize("fn", [nmi, pairwise_f1])
@pytest.mark.parametrize("a, b, msg", [
    ([], [], "empty"),                                  # was a numpy ValueError (max of an empty array)
    ([None, None, 1], [0, 0, 1], "missing label"),      # was a TypeError ('<' between None and None)
    ([{}, {}], [0, 1], "class labels"),                 # was a TypeError
    ([np.nan, np.nan, 1.0], [0, 0, 1], "NaN"),          # was NMI 1.0: the NaNs read as one class
    ("abc", "abd", "1-D"),                              # was NMI 1.0: each text one sample
    ([[1, 2], [3, 4]], [1, 2, 3, 4], "1-D"),            # was flattened into four samples
])
def test_labelings_refused(fn, a, b, msg):
    with pytest.raises(EmbedscopeError, match=msg):
        fn(a, b)


def test_labelings_still_agree_with_sklearn():
    from sklearn.metrics import normalized_mutual_info_score

    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b = rng.integers(0, 4, 15), rng.integers(0, 3, 15)
        assert nmi(a, b) == pytest.approx(normalized_mutual_info_score(a, b), abs=1e-12)
        assert nmi(a.astype(str), b) == pytest.approx(nmi(a, b), abs=1e-15)  # (texts as classes)
