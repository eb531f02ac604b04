"""The CPU inference path of the small CNNs' max pooling (embedscope.models.backbones.MaxPool2d) gives
PyTorch's nn.MaxPool2d values bit for bit, and leaves every gradient to PyTorch's own kernel."""

import copy

import pytest
import torch
from torch import nn

from embedscope.models.backbones import DigitsCNN, MaxPool2d, ShapesCNN


def _tied(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.relu(torch.randn(*shape, generator=g)).round(decimals=1)  # zeros and ties in most windows
    x[0, 0, 0, 0] = float("nan")
    x[0, 0, 0, 1] = -0.0
    x[-1, -1, -1, -1] = float("inf")
    return x


@pytest.mark.parametrize("shape", [(5, 7, 8, 8), (3, 4, 9, 7), (2, 1, 6, 6), (1, 3, 2, 5), (4, 64, 16, 16)])
def test_values_bitwise_equal_to_torch(shape):
    x = _tied(shape)
    ref = nn.MaxPool2d(2)(x)
    with torch.no_grad():
        out = MaxPool2d(2)(x)
    assert out.shape == ref.shape and out.is_contiguous()
    assert torch.equal(out.isnan(), ref.isnan())
    keep = ~ref.isnan()
    assert torch.equal(out[keep], ref[keep])
    assert torch.equal(torch.signbit(out[keep]), torch.signbit(ref[keep]))  # -0.0 stays -0.0


def test_inference_path_is_taken_and_gradients_use_torch(monkeypatch):
    """Without grad the channels_last kernel runs; with an input that needs a gradient the input
    reaches PyTorch's kernel as it is, so training and saliency gradients are PyTorch's."""
    seen = []
    orig = nn.MaxPool2d.forward

    def spy(self, x):
        seen.append(x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous())
        return orig(self, x)

    monkeypatch.setattr(nn.MaxPool2d, "forward", spy)
    x = _tied((4, 8, 8, 8)).nan_to_num()
    with torch.no_grad():
        MaxPool2d(2)(x)
    xr = x.clone().requires_grad_()
    out = MaxPool2d(2)(xr)
    assert seen == [True, False]
    g = torch.randn_like(out)
    out.backward(g)
    xs = x.clone().requires_grad_()
    nn.MaxPool2d(2)(xs).backward(g)
    assert torch.equal(xr.grad, xs.grad)


@pytest.mark.parametrize("net,shape", [(DigitsCNN, (33, 1, 8, 8)), (ShapesCNN, (6, 3, 40, 40))])
def test_networks_embed_as_with_torch_pooling(net, shape):
    torch.manual_seed(0)
    m = net().eval()
    ref = copy.deepcopy(m)
    for i, layer in enumerate(ref.features):
        if isinstance(layer, MaxPool2d):
            ref.features[i] = nn.MaxPool2d(2)
    assert any(isinstance(layer, MaxPool2d) for layer in m.features)
    assert not any(isinstance(layer, MaxPool2d) for layer in ref.features)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(m(x), ref(x))
    assert m.state_dict().keys() == ref.state_dict().keys()
