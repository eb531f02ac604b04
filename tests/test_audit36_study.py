"""Audit 36 (a helper's study of a tiny data set): every checkpoint of a study whose test split has 8
images failed ("R@8: k = 8 exceeds the 7 references"), where `evaluate` of the same file stops its
default k there. The registry's R@k beyond the split's references is now undefined (NaN, with the
reason in runs.csv), the other measures of the row kept."""

from __future__ import annotations

import math

import numpy as np

from embedscope.analyses.registry import compute_measures
from embedscope.store import EmbeddingSet
from embedscope.study.run import undefined_reasons


def test_r_at_k_beyond_the_split_is_undefined_not_an_error():
    rng = np.random.default_rng(0)
    y = np.r_[np.repeat(np.arange(4), 10), np.repeat(np.arange(4, 8), 2)]  # 40 train, 8 test
    X = rng.normal(size=(48, 6)) + y[:, None]
    split = np.r_[["train"] * 40, ["test"] * 8]
    es = EmbeddingSet.from_arrays(X.astype(np.float32), y, split=split)
    vals = compute_measures(es, ["R@1", "R@4", "R@8", "MAP@R", "rho"])
    assert math.isnan(vals["R@8"]) and all(math.isfinite(vals[k]) for k in ("R@1", "R@4", "MAP@R", "rho"))
    # R@1 and R@4 as evaluate gives them
    from embedscope.analyses import evaluate

    want = evaluate(es, split="test", include=["R@1", "R@4"], ks=(1, 4)).values
    assert vals["R@1"] == want["R@1"] and vals["R@4"] == want["R@4"]
    why = undefined_reasons(es, vals)
    assert list(why) == ["R@8"] and "exceeds the 7 references" in why["R@8"]
