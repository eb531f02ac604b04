"""Audit 43 (bring your own checkpoint): a retrieval engineer's weights made elsewhere, and three leftovers.

What was wrong before:

- torchvision's MNASNet files given to ``--weights`` (or any route that loads a state dict) ended in a traceback
  (``ValueError: version should be set to 1 or 2 instead of None``): the module's version travels in the state
  dict's ``_metadata``, which the dicts made of the file's keys lost;
- a Roth et al. file's keys are read as embedscope's (``model.*`` as ``backbone.*``, ``model.last_linear`` as
  ``head``): its unexpected keys and the "larger network" line named ``backbone.…``, keys the file does not have;
- an old torchvision DenseNet file's keys are read with their new names (``norm.1`` as ``norm1``): an unexpected
  key inside a dense layer was named in the new form;
- the paths (and ``--arch`` names) in the commands the advice suggests were not shell-quoted: a space or a ``$``
  broke the pasted command; they are quoted for the line as the terminal shows it (escaped once);
- a whole pickled ``DataParallel`` of an embedscope model (``torch.save(model)`` of a model trained on several
  GPUs) was refused as "not an embedscope model", with ``--unsafe-pickle`` too: the network inside is read;
- ViT files saved by torchvision before 0.13 name each block's MLP layers
  ``mlp.linear_1`` / ``mlp.linear_2``, which torchvision's loader renames ``mlp.0`` / ``mlp.3``: ``--weights``
  refused them (missing and unexpected keys);
- a state dict whose classifier is named ``head`` (torchvision's Swin, timm's ViT and ConvNeXt) was read as an
  embedscope model: "has no config: name the architecture with --arch", and with ``--arch`` every backbone key
  was missing; timm's key names given as a torchvision model got no word that they are timm's;
- ``load_checkpoint(embed_dim=...)`` of a Roth et al. file of another size said the file's ``opt.embed_dim`` was
  the size asked for;
"""

from __future__ import annotations

import pytest
import torch
from torchvision import models as tvm

from embedscope.errors import EmbedscopeError
from embedscope.models import build_pretrained, load_checkpoint
from embedscope.text import safe


def _features(net: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """torchvision's own forward with its last linear layer (the classifier) the identity: brute force (the
    layer is put back after, the network in eval mode)."""
    net.eval()
    name = [n for n, m in net.named_modules() if isinstance(m, torch.nn.Linear)][-1]
    parent = net
    *path, last = name.split(".")
    for p in path:
        parent = getattr(parent, p)
    classifier = getattr(parent, last)
    setattr(parent, last, torch.nn.Identity())
    try:
        with torch.no_grad():
            return net(x).flatten(1)
    finally:
        setattr(parent, last, classifier)


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


def test_a_resnet18_in_the_layouts_of_other_code_embeds_as_torchvision_runs_it(tmp_path):
    """One network saved as torchvision under DataParallel, timm's train.py (its EMA copy too) and a
    pytorch-metric-learning trunk + embedder save it: each read gives torchvision's own forward (brute force)."""
    import argparse

    import torch.nn.functional as F

    from embedscope.models import load_model

    torch.manual_seed(0)
    net = _stats(tvm.resnet18(weights=None))
    sd = {k: v.clone() for k, v in net.state_dict().items()}
    ema = {k: v + 0.01 if v.is_floating_point() else v for k, v in sd.items()}
    x = torch.randn(2, 3, 32, 32)
    ref = _features(net, x)
    torch.save({"module." + k: v for k, v in sd.items()}, tmp_path / "dp.pth")
    torch.save({"epoch": 3, "arch": "resnet18", "version": 2, "state_dict": sd, "state_dict_ema": ema,
                "optimizer": {}, "args": argparse.Namespace(lr=0.1)}, tmp_path / "model_best.pth.tar")
    model = build_pretrained("resnet18", weights=tmp_path / "dp.pth")[0]
    with torch.no_grad():
        torch.testing.assert_close(model.features(x), ref)
    model, _, info = build_pretrained("resnet18", weights=tmp_path / "model_best.pth.tar", ema=True)
    net.load_state_dict(ema)
    with torch.no_grad():
        torch.testing.assert_close(model.features(x), _features(net, x))
    assert info["format"] == "backbone weights from a timm training checkpoint (state_dict_ema)"
    emb = torch.nn.Linear(512, 16)
    torch.save({k: v for k, v in sd.items() if not k.startswith("fc.")}, tmp_path / "trunk_best3.pth")
    torch.save(emb.state_dict(), tmp_path / "embedder_best3.pth")
    model = load_model(tmp_path)[0]  # (a saved_models folder)
    with torch.no_grad():
        torch.testing.assert_close(model(x), F.normalize(emb(ref)))


# --------------------------------------------------------------------------- leftovers 1 and 2: the file's own keys

def _roth_googlenet(extra: dict, dp: str = "") -> dict:
    import argparse

    torch.manual_seed(0)
    net = tvm.googlenet(weights=None, aux_logits=False, init_weights=False)
    sd = {f"{dp}model.{k}": v for k, v in net.state_dict().items() if not k.startswith("fc.")}
    sd[f"{dp}model.last_linear.weight"], sd[f"{dp}model.last_linear.bias"] = torch.zeros(8, 1024), torch.zeros(8)
    return {"state_dict": {**sd, **extra}, "opt": argparse.Namespace(arch="googlenet", embed_dim=8)}


@pytest.mark.parametrize("dp", ["", "module."])
def test_a_roth_file_s_unexpected_keys_are_named_as_the_file_has_them(tmp_path, dp):
    """They were named as embedscope reads them, ``backbone.inception3a.extra.weight``."""
    torch.save(_roth_googlenet({f"{dp}model.inception3a.extra.weight": torch.zeros(3)}, dp), tmp_path / "r.pth.tar")
    line = _error(load_checkpoint, tmp_path / "r.pth.tar")
    assert f"unexpected 1 key(s) e.g. {dp}model.inception3a.extra.weight)" in line
    assert f"own modules (e.g. '{dp}model.inception3a.extra.*')" in line and "backbone." not in line
    torch.save(_roth_googlenet({f"{dp}model.last_linear.extra": torch.zeros(3)}, dp), tmp_path / "h.pth.tar")
    assert f"e.g. {dp}model.last_linear.extra)" in _error(load_checkpoint, tmp_path / "h.pth.tar")


def _old_densenet(net: torch.nn.Module) -> dict:
    """torchvision's released DenseNet files: the pre-0.4 names (``denselayer1.norm.1``)."""
    import re

    return {re.sub(r"(denselayer\d+\.(?:norm|relu|conv))([12])\.", r"\1.\2.", k): v
            for k, v in net.state_dict().items()}


def _old_file_loads_and_names_an_extra_key(tmp_path, arch, net, old, saved, extra):
    """``saved`` (a state dict of ``net`` in an old torchvision's key names, ``old``, perhaps prefixed) loads
    as ``arch`` with ``net``'s features; ``old`` plus the key ``extra`` is refused: the error line."""
    torch.save(saved, tmp_path / "old.pth")
    model = build_pretrained(arch, weights=tmp_path / "old.pth")[0]
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model.features(x), _features(net, x))
    torch.save({**old, extra: torch.zeros(2)}, tmp_path / "x.pth")
    return _error(build_pretrained, arch, weights=tmp_path / "x.pth")


def test_an_old_densenet_file_loads_and_its_unexpected_key_is_named_in_its_own_form(tmp_path):
    torch.manual_seed(0)
    net = _stats(tvm.densenet121(weights=None))
    old = _old_densenet(net)
    assert "features.denseblock1.denselayer1.norm.1.weight" in old
    line = _old_file_loads_and_names_an_extra_key(
        tmp_path, "densenet121", net, old, {"module." + k: v for k, v in old.items()},
        "features.denseblock1.denselayer1.norm.1.extra")
    assert "unexpected 1 key(s) e.g. features.denseblock1.denselayer1.norm.1.extra)" in line  # (was norm1.extra)


# --------------------------------------------------------------------------- leftover 3: pasteable commands

def _shell_words(arg: str) -> bytes:
    """What a POSIX shell (bash) makes of one argument pasted from the line."""
    import shutil
    import subprocess

    if shutil.which("bash") is None:
        pytest.skip("no bash")
    return subprocess.run(["bash", "-c", "printf %s " + arg], capture_output=True, check=True).stdout


@pytest.mark.parametrize("name", ["my run $HOME/r'18 (best).pth", "tab\tback\\slash\x1b'q\udc80.pth"])
def test_the_suggested_commands_quote_the_path(tmp_path, name):
    import os
    import re

    torch.manual_seed(0)
    sd = tvm.resnet18(weights=None, num_classes=1000).state_dict()
    path = tmp_path / name
    path.parent.mkdir(exist_ok=True)
    torch.save(sd, path)
    line = _error(load_checkpoint, path)  # as the terminal shows it
    arg = re.search(r"--weights (.*?) --head none", line).group(1)
    assert _shell_words(arg) == os.fsencode(str(path))
    sd["fc.weight"], sd["fc.bias"] = torch.zeros(128, 512), torch.zeros(128)  # the user's embedding layer
    torch.save(sd, path)
    line = _error(load_checkpoint, path)
    for flag in ("--trunk", "--weights"):
        arg = re.search(rf"{flag} (.*?) (with an empty|--head none)", line).group(1)
        assert _shell_words(arg) == os.fsencode(str(path))


# --------------------------------------------------------------------------- whole pickled models

def test_a_pickled_data_parallel_embedscope_model_is_read_with_unsafe_pickle(tmp_path):
    from embedscope.models import build_model, default_config

    torch.manual_seed(0)
    em = build_model(default_config("digits_cnn", embed_dim=8)).eval()
    torch.save(torch.nn.DataParallel(em), tmp_path / "dp.pth")
    line = _error(load_checkpoint, tmp_path / "dp.pth")  # (nothing run: a one-line refusal naming the way)
    assert "a whole pickled embedscope model" in line and "--unsafe-pickle" in line
    model, config, info = load_checkpoint(tmp_path / "dp.pth", unsafe_pickle=True)
    x = torch.randn(3, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(model(x), em(x))
    assert config["embed_dim"] == 8 and info["format"].startswith("pickled embedscope model")


def test_a_roth_file_of_another_size_than_asked_names_the_size_asked(tmp_path):
    torch.save(_roth_googlenet({}), tmp_path / "r.pth.tar")
    line = _error(load_checkpoint, tmp_path / "r.pth.tar", embed_dim=16)
    assert "embed_dim 16 was asked for but model.last_linear has 8 outputs" in line  # (was "opt.embed_dim is 16")


# --------------------------------------------------------------------------- another library's key names

def _timm_convnext() -> dict:
    """The first keys of timm's ConvNeXt (timm is not installed: by hand, as the loader reads names)."""
    return {"stem.0.weight": torch.zeros(96, 3, 4, 4), "stem.0.bias": torch.zeros(96),
            "stages.0.blocks.0.conv_dw.weight": torch.zeros(96, 1, 7, 7), "head.norm.weight": torch.zeros(768),
            "head.fc.weight": torch.zeros(1000, 768), "head.fc.bias": torch.zeros(1000)}


@pytest.mark.parametrize("arch", [None, "convnext_tiny"])
def test_a_state_dict_with_a_head_layer_is_not_read_as_an_embedscope_model(tmp_path, arch):
    """Its 'head.*' keys made it an embedscope model: "name the architecture with --arch", then (given) every
    'backbone.*' key missing. Now: what the keys are, and the way to embed them."""
    torch.save(_timm_convnext(), tmp_path / "t.pth")
    line = _error(load_checkpoint, tmp_path / "t.pth", arch=arch)
    assert "unknown key layout for an embedscope model" in line and "missing" not in line
    assert "key names are timm's (e.g. stages.0.blocks.0.conv_dw.weight)" in line and "--arch timm:NAME" in line
    # torchvision's Swin names its classifier 'head' too
    torch.save({"features.0.0.weight": torch.zeros(96, 3, 4, 4), "head.weight": torch.zeros(1000, 768),
                "head.bias": torch.zeros(1000)}, tmp_path / "swin.pth")
    line = _error(load_checkpoint, tmp_path / "swin.pth", arch=arch and "resnet18")
    assert "unknown key layout" in line and "use --weights with --arch" in line


def test_timm_names_given_as_a_torchvision_model_are_said_to_be_timm_s(tmp_path):
    sd = {"conv_stem.weight": torch.zeros(16, 3, 3, 3), "bn1.weight": torch.zeros(16), "classifier.weight":
          torch.zeros(1000, 1024), "classifier.bias": torch.zeros(1000)}  # timm's MobileNet-V3 / EfficientNet
    torch.save(sd, tmp_path / "m.pth")
    line = _error(build_pretrained, "mobilenet_v3_small", weights=tmp_path / "m.pth")
    assert "its key names are timm's (e.g. conv_stem.weight)" in line and "--arch timm:NAME" in line


def test_a_vit_file_of_torchvision_s_old_mlp_names_loads(tmp_path, monkeypatch):
    """A tiny ViT under vit_b_16's name (the renaming is of key names; the real one is 86 M parameters)."""
    import re

    import torchvision
    from torchvision.models.vision_transformer import VisionTransformer

    def tiny(name, **kw):
        return VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=2, hidden_dim=8, mlp_dim=16)

    monkeypatch.setattr(torchvision.models, "get_model", tiny)
    torch.manual_seed(0)
    net = tiny("vit_b_16")
    old = {re.sub(r"mlp\.([03])\.", lambda m: f"mlp.linear_{1 if m.group(1) == '0' else 2}.", k): v
           for k, v in net.state_dict().items()}
    assert "encoder.layers.encoder_layer_1.mlp.linear_2.weight" in old
    line = _old_file_loads_and_names_an_extra_key(tmp_path, "vit_b_16", net, old, old,
                                                  "encoder.layers.encoder_layer_1.mlp.linear_2.extra")
    assert "e.g. encoder.layers.encoder_layer_1.mlp.linear_2.extra)" in line  # (the file's name)
