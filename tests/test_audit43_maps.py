"""Audit 43 leftovers in checkpoint loading and saliency maps files.

What was wrong before (each test failed on the code before its fix):

- ``--trunk`` did not rename an old torchvision DenseNet's keys (``norm.1`` -> ``norm1``) as ``--weights`` does:
  a trunk saved from such a model was refused (every key of its dense layers missing and unexpected);
- a maps file without a ``family`` attribute was grouped as ``other`` in the agreement, though its
  ``checkpoint_config`` names the loss;
- a ``noise`` above 0 too small to change any image (1e-300 underflows to zero in float32) made plain-gradient
  maps without a word (``--noise 0`` gets a note), and an image equal to the black image then got a map of
  rounding noise instead of the all-zero map of σ = 0;
- a pickled ``nn.Sequential(Linear, ReLU, Linear)`` embedder was refused like its state dict ("unknown embedder
  layout"), though the pickled module says which layers sit between its linear ones; a pickled module without
  weights that is not the identity (``nn.ReLU()``, ``nn.Sequential(nn.ReLU())``) was read as the identity.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
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


# --------------------------------------------------------------------------- 3: a noise that changes nothing

from test_audit43_saliency import _Tiny  # noqa: E402 (a linear model of the 8x8 digits)


def test_a_noise_too_small_to_change_an_image_is_counted_as_plain_and_its_baseline_map_is_zero():
    from embedscope.saliency.smoothgrad import pair_saliency_maps, saliency_maps

    model = _Tiny()
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    x[2] = 0.5  # a constant image: sigma 0 whatever the noise
    stats: dict = {}
    tiny = saliency_maps(model, x, n_samples=3, noise=1e-300, baseline=x[1], stats=stats)
    assert stats == {"plain": 3}
    # image 1 is the baseline: its copies are itself, as with sigma 0, so it sits at the distance's stationary
    # point: an all-zero map (was a full [0, 1] map of rounding noise: sigma > 0 was not taken for sigma 0)
    np.testing.assert_array_equal(tiny[1], np.zeros((8, 8), np.float32))
    np.testing.assert_allclose(tiny, saliency_maps(model, x, n_samples=3, noise=0.0, baseline=x[1]), atol=1e-6)
    stats = {}
    saliency_maps(model, x, n_samples=3, noise=0.15, stats=stats)
    assert stats == {"plain": 1}  # (the constant image)
    stats = {}
    pair_saliency_maps(model, x, x.flip(0), n_samples=2, noise=1e-300, stats=stats)
    assert stats == {"plain": 6}  # (the query maps and the retrieval maps)


def test_saliency_to_file_notes_a_noise_too_small_to_change_any_image(tmp_path):
    from embedscope.models import build_model, default_config, save_checkpoint
    from embedscope.saliency.run import saliency_to_file

    torch.manual_seed(0)
    cfg = default_config("digits_cnn", embed_dim=8)
    cfg["loss"] = "margin"
    save_checkpoint(tmp_path / "c.pt", build_model(cfg), cfg)
    common = dict(n_images=2, n_samples=2, progress=False)
    s = saliency_to_file(tmp_path / "c.pt", "digits", tmp_path / "a.h5", noise=1e-300, **common)
    notes = [n for n in s["notes"] if "plain gradient" in n]
    assert notes == ["--noise 1e-300: too small to change any image (the noise rounds to nothing): the 2 copies of "
                     "an image are the image itself, so each map is its plain gradient's, as with --noise 0; "
                     "--n-samples 1 gives the same maps (to rounding) with less work"]
    s = saliency_to_file(tmp_path / "c.pt", "digits", tmp_path / "b.h5", noise=0.15, **common)
    assert not [n for n in s["notes"] if "plain gradient" in n]
    s = saliency_to_file(tmp_path / "c.pt", "digits", tmp_path / "z.h5", noise=0.0, **common)
    assert not [n for n in s["notes"] if "plain gradient" in n]  # (the command line says --noise 0's own note)


# --------------------------------------------------------------------------- 4: a pickled Sequential embedder

@pytest.fixture(scope="module")
def trunk18(tmp_path_factory):
    from torchvision.models import resnet18

    torch.manual_seed(4)
    trunk = resnet18(weights=None).eval()
    trunk.fc = nn.Identity()
    d = tmp_path_factory.mktemp("pml")
    torch.save(trunk.state_dict(), d / "trunk.pth")
    return trunk, d


@pytest.mark.parametrize("unsafe", [False, True])
def test_a_pickled_sequential_mlp_embedder_is_read_as_it_runs(trunk18, unsafe):
    from embedscope.models.adapters import load_pml, load_pml_pair
    from embedscope.models.checkpoint import read_checkpoint

    trunk, d = trunk18
    torch.manual_seed(5)
    emb = nn.Sequential(nn.Linear(512, 16), nn.ReLU(inplace=True), nn.Linear(16, 8), nn.ReLU())
    torch.save(emb, d / "emb.pth")
    x = torch.randn(2, 3, 32, 32)
    m, cfg, _ = load_pml(d / "trunk.pth", d / "emb.pth", unsafe_pickle=unsafe)
    assert cfg["head_layers"] == [[512, 16], "relu", [16, 8], "relu"] and cfg["embed_dim"] == 8
    with torch.no_grad():
        want = F.normalize(emb(trunk(x)), dim=1)
        torch.testing.assert_close(m(x), want)
    torch.save({"trunk": trunk.state_dict(), "embedder": emb}, d / "pair.pth")
    m = load_pml_pair(read_checkpoint(d / "pair.pth", unsafe_pickle=unsafe), d / "pair.pth")[0]
    with torch.no_grad():
        torch.testing.assert_close(m(x), want)


def test_a_pickled_embedder_of_other_layers_or_its_state_dict_is_still_refused(trunk18):
    from embedscope.models.adapters import load_pml

    _, d = trunk18
    for i, emb in enumerate([nn.Sequential(nn.Linear(512, 16), nn.Tanh(), nn.Linear(16, 8)),  # (not a ReLU)
                             nn.Sequential(nn.Linear(512, 16), nn.ReLU(), nn.Linear(16, 8)).state_dict()]):
        torch.save(emb, d / f"o{i}.pth")
        assert "unknown embedder layout" in _error(load_pml, d / "trunk.pth", d / f"o{i}.pth", unsafe_pickle=True)


@pytest.mark.parametrize("unsafe", [False, True])
def test_a_pickled_embedder_without_weights_is_the_identity_only_when_it_is_one(trunk18, unsafe):
    from embedscope.models.adapters import load_pml, load_pml_pair
    from embedscope.models.checkpoint import read_checkpoint

    trunk, d = trunk18
    for i, emb in enumerate([nn.Identity(), nn.Sequential(), nn.Sequential(nn.Identity())]):
        torch.save(emb, d / f"i{i}.pth")
        assert load_pml(d / "trunk.pth", d / f"i{i}.pth", unsafe_pickle=unsafe)[1]["embed_dim"] == 512
    for i, emb in enumerate([nn.ReLU(), nn.Sequential(nn.ReLU()), nn.Sequential(nn.Identity(), nn.Tanh())]):
        torch.save(emb, d / f"n{i}.pth")  # (each was read as the identity)
        line = _error(load_pml, d / "trunk.pth", d / f"n{i}.pth", unsafe_pickle=unsafe)
        assert "module without weights, not the identity: it cannot be read as the embedder" in line
    torch.save({"trunk": trunk.state_dict(), "embedder": nn.ReLU()}, d / "pair_relu.pth")
    line = _error(load_pml_pair, read_checkpoint(d / "pair_relu.pth", unsafe_pickle=unsafe), d / "pair_relu.pth")
    assert "['embedder']: the embedder file holds a pickled torch.nn.modules.activation.ReLU module" in line
