"""Classes of a thousand and more (10-class sets such as CIFAR-10 embeddings): R-Precision and MAP@R
search to depth R_i >= 1,000. They go to the filtered tile pass (rows.py), which is 4-5x faster there
than the candidate lists they got before; the values equal a float64 brute force written from the
formulas (docs/methods.md §1), ties to the lower index."""

import numpy as np
import pytest
from brute import ranked_references

import embedscope.metrics.search.ranks as ranks_mod
from embedscope.metrics.retrieval import retrieval_metrics


def _brute(X, y, metric):
    orders, yr = ranked_references(X, y, metric=metric)
    p1, rp, mapr = [], [], []
    for i, o in enumerate(orders):
        rel = (yr[o] == y[i]).astype(float)
        R = int(rel.sum())
        top = rel[:R]
        p1.append(rel[0])
        rp.append(top.sum() / R)
        prec = np.cumsum(top) / np.arange(1, R + 1)
        mapr.append((prec * top).sum() / R)
    return np.mean(p1), np.mean(rp), np.mean(mapr)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_classes_of_a_thousand_take_the_tile_pass_and_equal_brute_force(monkeypatch, metric):
    rng = np.random.default_rng(3)
    n, d = 2300, 16
    y = rng.integers(0, 2, n)  # two classes of ~1,150: depth R_i >= 1,000
    X = (rng.standard_normal((2, d))[y] * 0.7 + rng.standard_normal((n, d))).astype(np.float32)
    X[5] = X[9]  # exact duplicates: ties broken by the lower index
    X[700] = X[9]
    calls = []
    from embedscope.metrics.search import rows

    real = rows.relevant_ranks_by_rows

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(rows, "relevant_ranks_by_rows", spy)
    v = retrieval_metrics(X, y, include=["P@1", "R-Precision", "MAP@R"], metric=metric)
    assert calls, "the tile pass did not rank this search"
    want = _brute(X, y, metric)
    got = (v["P@1"], v["R-Precision"], v["MAP@R"])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_a_deep_depth_beyond_the_relevant_sets_still_counts():
    """mAP@1000 over classes of tens: depth 1,000 far beyond R_i goes to the counting pass as before."""
    R = np.full(2000, 60)
    assert not ranks_mod._rows_plan("cpu", np.full(2000, 1000), 2000, R)
    assert ranks_mod._rows_plan("cpu", np.full(2000, 1100), 2300, np.full(2000, 1100))
    assert ranks_mod._rows_plan("cpu", R, 2000, R)
