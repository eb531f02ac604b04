"""The torch-side loss-specific distances (embedscope.models.distances; docs/methods.md §8)."""

import numpy as np
import pytest
import torch

from embedscope.errors import EmbedscopeError
from embedscope.models import distances as D
from embedscope.names import DISTANCES, LOSSES


def _pair(seed=0, n=7, d=5):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)) * 3, rng.normal(size=(n, d)) + 1


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_distances_match_the_formulas_on_normalised_rows():
    a, b = _pair()
    an, bn = _unit(a), _unit(b)
    want = {
        "euclidean": np.sqrt(((an - bn) ** 2).sum(1)),
        "sqeuclidean": ((an - bn) ** 2).sum(1),
        "cosine": (an * bn).sum(1),
        "dot": (an * bn).sum(1),
        "snr": np.var(bn - an, axis=1) / np.var(an, axis=1),
    }
    assert set(want) == set(DISTANCES)
    ta, tb = torch.tensor(a), torch.tensor(b)
    for name, w in want.items():
        got = D.get_distance(name)(ta, tb).numpy()
        np.testing.assert_allclose(got, w, rtol=1e-10, atol=1e-12, err_msg=name)
    # broadcasting of a single reference row
    got = D.euclidean(ta, tb[:1]).numpy()
    np.testing.assert_allclose(got, np.sqrt(((an - bn[:1]) ** 2).sum(1)), rtol=1e-10)


def test_distances_match_pytorch_metric_learning():
    from pytorch_metric_learning import distances as pml

    a, b = _pair(1)
    ta, tb = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    for ours, theirs in (("euclidean", pml.LpDistance()), ("sqeuclidean", pml.LpDistance(power=2)),
                         ("cosine", pml.CosineSimilarity()), ("snr", pml.SNRDistance())):
        mat = theirs(ta, tb).numpy()  # query = rows of a
        np.testing.assert_allclose(D.get_distance(ours)(ta, tb).numpy(), np.diag(mat), rtol=1e-6, err_msg=ours)


def test_half_precision_inputs_give_float32_distances():
    a, b = _pair(2)
    ta = torch.tensor(a, dtype=torch.bfloat16)
    out = D.cosine(ta, torch.tensor(b, dtype=torch.float32))
    assert out.dtype == torch.float32


def test_gradient_flows_to_the_first_argument():
    a, b = _pair(3)
    ta = torch.tensor(a, requires_grad=True)
    for name in DISTANCES:
        ta.grad = None
        D.get_distance(name)(ta, torch.tensor(b)).sum().backward()
        assert torch.isfinite(ta.grad).all() and ta.grad.abs().sum() > 0, name


def test_loss_to_distance_map_follows_methods_section_8():
    expect = {"untrained": "euclidean", "contrastive": "euclidean", "triplet": "euclidean", "margin": "euclidean",
              "proxynca": "sqeuclidean", "fastap": "sqeuclidean", "NT-Xent": "cosine", "cosface": "cosine",
              "arcface": "cosine", "multisimilarity": "cosine", "softtriple": "cosine", "softmax": "cosine",
              "normalized_softmax": "cosine", "snr": "snr", None: "euclidean"}
    for loss, want in expect.items():
        assert D.distance_for_loss(loss) == want, loss
    for loss in LOSSES:  # every loss the trainer knows has a distance
        assert D.distance_for_loss(loss) in DISTANCES


def test_distance_for_config():
    assert D.distance_for_config({"loss": "arcface"}) == "cosine"
    assert D.distance_for_config({"loss": "arcface", "distance": "snr"}) == "snr"  # explicit field first
    assert D.distance_for_config({}) == "euclidean"  # foreign checkpoint
    assert D.distance_for_config(None) == "euclidean"
    with pytest.raises(EmbedscopeError, match="unknown distance 'manhattan'"):
        D.distance_for_config({"distance": "manhattan"})
    with pytest.raises(EmbedscopeError, match="no known distance for the loss 'circle'") as e:
        D.distance_for_config({"loss": "circle"})
    assert "\n" not in str(e.value)
