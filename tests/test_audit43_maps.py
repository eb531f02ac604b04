"""Audit 43 leftovers in checkpoint loading and saliency maps files.

What was wrong before (each test failed on the code before its fix):

- ``--trunk`` did not rename an old torchvision DenseNet's keys (``norm.1`` -> ``norm1``) as ``--weights`` does:
  a trunk saved from such a model was refused (every key of its dense layers missing and unexpected);
- a maps file without a ``family`` attribute was grouped as ``other`` in the agreement, though its
  ``checkpoint_config`` names the loss;
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from torch import nn

from embedscope.errors import EmbedscopeError
from embedscope.text import safe


def _error(fn, *a, **kw) -> str:
    with pytest.raises(EmbedscopeError) as e:
        fn(*a, **kw)
    return safe(str(e.value))


# --------------------------------------------------------------------------- 1: --trunk of an old DenseNet

def test_an_old_densenet_trunk_loads_and_its_unexpected_key_is_named_in_its_own_form(tmp_path):
    from torchvision import models as tvm

    from embedscope.models.adapters import load_pml

    torch.manual_seed(0)
    net = tvm.densenet121(weights=None).eval()
    net.classifier = nn.Identity()
    old = {re.sub(r"(denselayer\d+\.(?:norm|relu|conv))([12])\.", r"\1.\2.", k): v for k, v in net.state_dict().items()}
    assert "features.denseblock1.denselayer1.norm.1.weight" in old
    torch.save({}, tmp_path / "e.pth")
    torch.save({"module." + k: v for k, v in old.items()}, tmp_path / "t.pth")
    model = load_pml(tmp_path / "t.pth", tmp_path / "e.pth", arch="densenet121", normalize=False)[0]
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), net(x))
    torch.save({**old, "features.denseblock1.denselayer1.norm.1.extra": torch.zeros(2)}, tmp_path / "x.pth")
    line = _error(load_pml, tmp_path / "x.pth", tmp_path / "e.pth", arch="densenet121")
    assert "missing" not in line
    assert "unexpected 1 key(s) e.g. features.denseblock1.denselayer1.norm.1.extra)" in line  # (not norm1.extra)


# --------------------------------------------------------------------------- 2: a maps file without a family

def _maps(path, config=None, **attrs):
    from embedscope.store.saliency import SaliencyMaps, save_maps

    rng = np.random.default_rng(len(str(path)))
    paths = np.array([f"p{i}" for i in range(4)])
    extra = {"checkpoint_config": config} if config is not None else {}
    save_maps(path, SaliencyMaps(maps=rng.random((4, 4, 4)).astype(np.float32), paths=paths,
                                 labels=np.zeros(4, np.int64), class_names=["a"],
                                 attrs={"name": path.stem, "order": "paper", "n_samples": 2, "noise": 0.15,
                                        **extra, **attrs}))
    return path


def test_a_maps_file_without_a_family_gets_its_config_s(tmp_path):
    from embedscope.saliency.run import agreement_of_files, family_of_maps
    from embedscope.store.saliency import load_maps

    files = [_maps(tmp_path / "m.h5", {"loss": "margin", "arch": "digits_cnn"}),
             _maps(tmp_path / "a.h5", {"loss": "arcface", "arch": "digits_cnn"}),
             _maps(tmp_path / "u.h5", {"loss": "untrained"}),
             _maps(tmp_path / "n.h5"),  # (no config: other, as before)
             _maps(tmp_path / "r.h5", {"loss": "arcface"}, family="ranking")]  # (a recorded family wins)
    assert [family_of_maps(load_maps(f).attrs) for f in files] == [
        "ranking", "classification", "untrained", "other", "ranking"]
    res = agreement_of_files(files[:3])
    assert dict(zip(res["names"], res["families"])) == {"m": "ranking", "a": "classification", "u": "untrained"}
