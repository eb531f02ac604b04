"""Audit 43 (bring your own checkpoint): a retrieval engineer's weights made elsewhere, and three leftovers.

What was wrong before:

- torchvision's MNASNet files given to ``--weights`` (or any route that loads a state dict) ended in a traceback
  (``ValueError: version should be set to 1 or 2 instead of None``): the module's version travels in the state
  dict's ``_metadata``, which the dicts made of the file's keys lost;
"""

from __future__ import annotations

import pytest
import torch
from torchvision import models as tvm

from embedscope.errors import EmbedscopeError
from embedscope.models import build_pretrained
from embedscope.text import safe


def _features(net: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """torchvision's own forward with its last linear layer (the classifier) the identity: brute force."""
    import copy

    net = copy.deepcopy(net).eval()
    name = [n for n, m in net.named_modules() if isinstance(m, torch.nn.Linear)][-1]
    parent = net
    *path, last = name.split(".")
    for p in path:
        parent = getattr(parent, p)
    setattr(parent, last, torch.nn.Identity())
    with torch.no_grad():
        return net(x).flatten(1)


def _stats(net: torch.nn.Module) -> torch.nn.Module:
    """BatchNorm statistics that are not the initial ones (a loader that skipped them would show)."""
    g = torch.Generator().manual_seed(1)
    for m in net.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(torch.rand(m.running_mean.shape, generator=g) * 0.2 - 0.1)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
    return net


def _error(fn, *a, **kw) -> str:
    with pytest.raises(EmbedscopeError) as e:
        fn(*a, **kw)
    return safe(str(e.value))


# --------------------------------------------------------------------------- torchvision files, brute force

def test_a_mnasnet_file_loads_and_embeds_as_torchvision_runs_it(tmp_path):
    """The module's version was lost with the file's ``_metadata``: MNASNet raised a ValueError (a traceback)."""
    torch.manual_seed(0)
    net = _stats(tvm.mnasnet0_5(weights=None))
    torch.save(net.state_dict(), tmp_path / "mnas.pth")
    model, _, info = build_pretrained("mnasnet0_5", weights=tmp_path / "mnas.pth")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model.features(x), _features(net, x))
    assert info["format"] == "backbone weights from a torchvision state dict"
