"""Findings of the fortieth session's audit of unusual array inputs to the public API (each test fails
on the code before its fix)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embedscope.errors import EmbedscopeError
from embedscope.metrics import retrieval_metrics
from embedscope.store import EmbeddingSet

RNG = np.random.default_rng(0)
X = RNG.normal(size=(40, 4))
Q, R = X[:20], X[20:]
Y = np.arange(20) % 3


def _brute_r1(Q, yq, R, yr):
    """R@1 of a separate reference set, from the formula: the nearest reference by cosine shares the label."""
    q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    r = R / np.linalg.norm(R, axis=1, keepdims=True)
    nn = np.argmax(q @ r.T, axis=1)
    return float(np.mean([yr[j] == yq[i] for i, j in enumerate(nn)]))


@pytest.mark.parametrize("y_ref", [
    np.array([0.0 if v == 0 else int(v) for v in Y], dtype=object),  # a pandas object column: 0.0 == 0
    Y.astype(float),
    Y.astype(object),
])
def test_equal_labels_of_two_sets_match_whatever_their_types(y_ref):
    ref = _brute_r1(Q, Y, R, Y)
    got = retrieval_metrics(Q, Y, X_ref=R, y_ref=y_ref)
    assert got["R@1"] == pytest.approx(ref) and got["n_lone"] == 0  # (before: 0.4615, class 0 made lone)


def test_bool_and_integer_labels_of_two_sets_compare_by_value():
    yq, yr = Y > 0, (Y > 0).astype(int)  # True == 1
    assert retrieval_metrics(Q, yq, X_ref=R, y_ref=yr)["R@1"] == pytest.approx(_brute_r1(Q, yq, R, yr))
    yq = np.ones(20, dtype=bool)  # one class: R@1 alone  # (bools were codes: all-True was class 0, matching the references' 0s)
    yr = np.r_[np.ones(10, int), np.zeros(10, int)]
    assert retrieval_metrics(Q, yq, X_ref=R, y_ref=yr, include=["R@1"])["R@1"] == pytest.approx(_brute_r1(Q, yq, R, yr))


def test_numbers_beside_texts_are_refused_not_matched_by_their_text():
    with pytest.raises(EmbedscopeError, match="different kinds .numbers vs texts."):
        retrieval_metrics(Q, Y, X_ref=R, y_ref=Y.astype(str))


def test_from_arrays_decodes_bytes_class_names_and_takes_object_integers_as_integers():
    es = EmbeddingSet.from_arrays(X[:4], [0, 1, 0, 1], class_names=[b"cat", b"dog"])
    assert es.class_names.tolist() == ["cat", "dog"]  # (before: "b'cat'")
    ints = EmbeddingSet.from_arrays(X[:4], np.array([0, 1, 0, 1]), class_names=["1", "0"])
    objs = EmbeddingSet.from_arrays(X[:4], np.array([0, 1, 0, 1], dtype=object), class_names=["1", "0"])
    assert objs.class_names[objs.labels].tolist() == ints.class_names[ints.labels].tolist() == ["1", "0", "1", "0"]
    mixed = EmbeddingSet.from_arrays(X[:4], np.array([0, 1.0, 0, 1], dtype=object))
    assert mixed.class_names.tolist() == ["0", "1"]  # (before: '0', '1', '1.0'... as texts)


def test_class_distances_names_text_classes_by_their_labels():
    from embedscope.metrics.geometry import class_distances

    assert class_distances(X[:6], ["zebra", "ant"] * 3)["classes"].tolist() == ["ant", "zebra"]
    assert class_distances(X[:6], [9, 7] * 3)["classes"].tolist() == [7, 9]


def test_torch_labels_and_maps_that_require_grad_or_are_bfloat16():
    from embedscope.metrics.agreement import agreement_matrix, fisher_z_mean, map_agreement, pearson_per_image
    from embedscope.metrics.properties import property_precision

    y = np.arange(40) % 3
    ref = retrieval_metrics(X, y)["R@1"]
    assert retrieval_metrics(X, torch.tensor(y, dtype=torch.float32, requires_grad=True))["R@1"] == ref
    assert retrieval_metrics(X, torch.tensor(y, dtype=torch.bfloat16))["R@1"] == ref
    grad = torch.tensor(y, dtype=torch.float32, requires_grad=True)
    assert property_precision(X, {"p": grad})["p"]["R-Prec"] == property_precision(X, {"p": y})["p"]["R-Prec"]
    maps = RNG.random((5, 4, 4))
    tm = torch.tensor(maps, requires_grad=True)
    assert np.allclose(pearson_per_image(tm, maps), 1.0)
    assert map_agreement(torch.tensor(maps).bfloat16(), maps.astype(np.float32))["n_images"] == 5
    r = torch.tensor([0.1, 0.2], requires_grad=True)
    assert fisher_z_mean(r)["n"] == 2
    assert agreement_matrix([tm, maps])["r_mean"][0, 1] == pytest.approx(1.0)


def test_agreement_matrix_takes_bool_maps_as_map_agreement_does():
    from embedscope.metrics.agreement import agreement_matrix, map_agreement

    a, b = RNG.random((5, 4, 4)) > 0.5, RNG.random((5, 4, 4)) > 0.5
    assert agreement_matrix([a, b])["r_mean"][0, 1] == pytest.approx(map_agreement(a, b)["r_mean"])


def test_masked_and_sparse_inputs_are_one_line():
    import scipy.sparse as sp

    y = np.arange(40) % 3
    with pytest.raises(EmbedscopeError, match="masked array with masked entries"):
        retrieval_metrics(np.ma.masked_array(X, mask=X > 2), y)
    assert retrieval_metrics(np.ma.masked_array(X, mask=False), y)["R@1"] == retrieval_metrics(X, y)["R@1"]
    with pytest.raises(EmbedscopeError, match=r"scipy sparse matrix \(\(40, 4\)\): give a dense array"):
        retrieval_metrics(sp.csr_matrix(X), y)
