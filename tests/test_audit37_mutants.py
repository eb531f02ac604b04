"""Session 37, mutation testing: behaviour no test checked (each test kills mutants that survived the tests
of their module: a changed comparison, a dropped branch, a constant moved)."""

from __future__ import annotations

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError


# ------------------------------------------------------------------ the Euclidean scale span
@pytest.mark.parametrize("case", ["negative", "zero_row"])
def test_euclidean_span_refused_whatever_the_small_rows(case):
    """The smallest row scale read max(row) (all-negative rows: -0.1 < 0, left out) and kept zero rows (lo = 0:
    no check); either way 60 ordinary rows beside one of 1e200 were ranked on underflowed distances."""
    from embedscope.metrics import retrieval_metrics

    rng = np.random.default_rng(4)
    X = rng.normal(size=(60, 4))
    y = rng.integers(0, 6, 60)
    if case == "negative":
        X = -np.abs(X)
    else:
        X[0] = 0.0
    with pytest.raises(EmbedscopeError, match="scales span"):
        retrieval_metrics(np.vstack([X, np.full((1, 4), 1e200)]), np.r_[y, 99], metric="euclidean",
                          include=["R@1"], ks=[1])


def test_euclidean_span_of_the_references_counts_too():
    from embedscope.metrics.search.knn import knn_search

    rng = np.random.default_rng(4)
    Q = rng.normal(size=(5, 4)) * 1e200
    R = np.vstack([rng.normal(size=(30, 4)) * 1e200, rng.normal(size=(3, 4))])
    with pytest.raises(EmbedscopeError, match="scales span"):
        knn_search(Q, R, 3, metric="euclidean")


def test_euclidean_span_limit_is_exactly_400_binary_orders():
    from embedscope.metrics import retrieval_metrics
    from embedscope.metrics.search.knn import EUCLIDEAN_SPAN_LIMIT

    assert EUCLIDEAN_SPAN_LIMIT == 400
    y = np.array([0, 0, 1, 1])
    for k, refused in ((399, False), (400, False), (401, True), (460, True)):
        # largest entry 1 (frexp exponent 1), smallest row's 2^-k (exponent 1 - k): a span of k binary orders
        tiny = np.ldexp(1.0, -k)
        X = np.array([[tiny], [3 * tiny], [1.0], [1.0 - 2.0 ** -20]])
        if refused:
            with pytest.raises(EmbedscopeError, match="scales span"):
                retrieval_metrics(X, y, metric="euclidean", include=["P@1"])
        else:
            assert retrieval_metrics(X, y, metric="euclidean", include=["P@1"])["P@1"] == 1.0


# ------------------------------------------------------------------ power-of-two rescaling of negative rows
def test_pow2_scaling_of_rows_dominated_by_negative_values():
    from embedscope.metrics import spectral
    from embedscope.metrics.agreement import pearson_per_image
    from embedscope.metrics.neighbours import nearest_same_different

    X = np.array([[-1e200, 0.0, 0.0], [0.0, 1.0, 0.5], [0.3, -2e199, 1.0], [1.0, 1.0, 1.0]])
    s = spectral.singular_values(X)
    assert np.all(np.isfinite(s)) and s[0] == pytest.approx(1e200) and s[1] == pytest.approx(2e199)
    # maps near -1e-170 (all negative) and a chunk mixing one such map with an ordinary one
    a = -np.array([[1.0, 3.0, 2.0, 5.0]]) * 1e-170
    b = -np.array([[2.0, 3.0, 1.0, 5.0]]) * 1e-170
    want = pearson_per_image(a * 1e170, b * 1e170)[0]
    assert pearson_per_image(a, b)[0] == pytest.approx(want, rel=1e-12)
    a2 = np.vstack([[0.1, 0.7, 0.3, 0.2], -a])
    b2 = np.vstack([[0.2, 0.6, 0.3, 0.1], -b])
    r = pearson_per_image(a2, b2)
    assert r[1] == pytest.approx(pearson_per_image(-a * 1e170, -b * 1e170)[0], rel=1e-12)
    # cosine scatter: an all-negative float32 row at 2^-85 gives the values of the unscaled set
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((40, 6)).astype(np.float32)
    Z[0] = -np.abs(Z[0])
    Z[5] = 3 * Z[0]
    y = np.arange(40) % 4
    y[5] = 1
    S = Z.copy()
    S[0] = np.ldexp(Z[0], -85).astype(np.float32)
    got, want = nearest_same_different(S, y, metric="cosine"), nearest_same_different(Z, y, metric="cosine")
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


# ------------------------------------------------------------------ validation edges
def test_validation_edges():
    from embedscope.metrics.clustering import kmeans_nmi_f1
    from embedscope.store import EmbeddingSet
    from embedscope.validation import check_labels, check_matrix, check_number, check_rows, one_point

    assert len(set(check_labels(np.array([2.0 ** 63, -2.0 ** 63])).tolist())) == 2
    es = EmbeddingSet.from_arrays(np.eye(3, dtype=np.float32), [0, 1, 2])
    with pytest.raises(EmbedscopeError):
        es.select([3])
    with pytest.raises(EmbedscopeError, match="mask"):
        check_rows(np.array([0, 1, 0]), 3)
    with pytest.raises(EmbedscopeError):
        check_matrix(np.zeros((3, 0)))
    with pytest.raises(EmbedscopeError, match="> 0"):
        check_number(0, "p", min=0, min_inclusive=False)
    assert check_number(1, "m", min=0, max=1) == 1.0
    with pytest.raises(EmbedscopeError, match="< 1"):
        check_number(1, "m", min=0, max=1, max_inclusive=False)
    with pytest.raises(EmbedscopeError, match="2 classes"):
        kmeans_nmi_f1(np.random.default_rng(0).normal(size=(10, 3)), np.zeros(10, int))
    assert one_point(np.ones((1, 3))) is False


# ------------------------------------------------------------------ the loss -> distance table (docs/methods.md §8)
def test_every_loss_alias_and_direction_of_the_distance_table():
    import torch

    from embedscope.models.distances import (
        CLOSER_IS,
        LOSS_DISTANCES,
        check_distance,
        cosine,
        distance_and_source,
        distance_for_loss,
    )

    assert LOSS_DISTANCES == {
        "untrained": "euclidean", "contrastive": "euclidean", "triplet": "euclidean", "margin": "euclidean",
        "lifted": "euclidean", "proxynca": "sqeuclidean", "fastap": "sqeuclidean", "ntxent": "cosine",
        "cosface": "cosine", "arcface": "cosine", "multisimilarity": "cosine", "softtriple": "cosine",
        "softmax": "cosine", "normalizedsoftmax": "cosine", "npair": "dot", "snr": "snr"}
    for loss, d in LOSS_DISTANCES.items():
        assert distance_for_loss(loss) == d
    for alias, d in (("MS", "cosine"), ("norm_softmax", "cosine"), ("normalised_softmax", "cosine"),
                     ("NT-Xent", "cosine"), ("multi_similarity", "cosine"), ("", "euclidean"), (None, "euclidean")):
        assert distance_for_loss(alias) == d
    assert CLOSER_IS == {"euclidean": "smaller", "sqeuclidean": "smaller", "snr": "smaller",
                         "cosine": "larger", "dot": "larger"}
    with pytest.raises(EmbedscopeError, match="unknown distance"):
        check_distance(["cosine"])
    assert distance_and_source({"epochs": 0, "distance": "cosine"}) == ("euclidean", "untrained network")
    assert distance_and_source({"loss": "none"}) == ("euclidean", "untrained network")
    assert distance_and_source({"loss": "arcface", "distance": "snr"}) == ("snr", "config")
    # the normalisation's eps is PyTorch's 1e-12: a tiny row keeps its direction
    c = cosine(torch.tensor([[1e-7, 0.0]]), torch.tensor([[1.0, 0.0]]))
    assert float(c) == pytest.approx(1.0)
    h = cosine(torch.tensor([[0.3, 0.1]], dtype=torch.float16), torch.tensor([[0.1, 0.3]], dtype=torch.float16))
    assert h.dtype == torch.float32


# ------------------------------------------------------------------ evaluate_many's note of other images
def test_other_train_images_give_no_note_on_the_test_split():
    """split_paths taken without its split named the train images too: two sets of the same test
    images but other train images got a false 'its test split holds other images' note."""
    from embedscope.analyses.retrieval import evaluate_many
    from embedscope.store import EmbeddingSet

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 6)
    split = np.array(["train"] * 12 + ["test"] * 12)
    sets = []
    for shift in (0, 100):
        paths = [f"img/{i}.jpg" if split[i] == "test" else f"img/{i + shift}.jpg" for i in range(24)]
        sets.append(EmbeddingSet.from_arrays(rng.normal(size=(24, 4)).astype(np.float32) + y[:, None], y,
                                             split=split, paths=paths))
    rs = evaluate_many(sets, names=["a", "b"], progress=False)
    assert all(not r.provenance.get("notes") for r in rs.results), [r.provenance.get("notes") for r in rs.results]


def test_alignment_lower_is_better():
    """Wang & Isola 2020: alignment is E‖u − u'‖² over positive pairs, lower = better aligned (the
    untrained comparison of a study with --target alignment reads this direction)."""
    from embedscope.study.stats import target_direction

    assert target_direction("alignment") == "lower"


def test_euclidean_search_of_tiny_rows_is_scale_invariant():
    """Rows of norm ~2^-80 (float32 squared norms ~2^-160 would underflow) are ranked as the rows given: the
    same keys as the unscaled rows, and the same neighbours. (Dropping EUCLIDEAN_NORM_SAFE's lower bound, so that
    such rows are not rescaled, still passes: the certification then ranks the tied float32 keys in float64; it
    only costs time.)"""
    from embedscope.metrics import retrieval_metrics
    from embedscope.metrics.search.knn import knn_search

    rng = np.random.default_rng(3)
    X = rng.normal(size=(80, 5))
    y = rng.integers(0, 6, 80)
    tiny = np.ldexp(X, -80)  # exact: every distance times 2^-80, the same ranking
    keys = ["P@1", "R-Precision", "MAP@R"]
    assert retrieval_metrics(tiny, y, metric="euclidean", include=keys) == retrieval_metrics(
        X, y, metric="euclidean", include=keys)
    np.testing.assert_array_equal(knn_search(tiny, tiny, 5, metric="euclidean")[1],
                                  knn_search(X, X, 5, metric="euclidean")[1])
