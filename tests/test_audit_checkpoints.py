"""Checkpoints written the way other projects write them (an audit of docs/checkpoint.md).

Each file is built here as that project's saving code writes it (same keys, prefixes and container
types; random weights of the real architectures) and embedscope's embedding is compared with the
network built directly in PyTorch with the same weights.
"""

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from embedscope.errors import EmbedscopeError
from embedscope.models import load_model


def _randomise_bn(m, seed=0):
    g = torch.Generator().manual_seed(seed)
    for mod in m.modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            mod.running_mean.copy_((torch.rand(mod.num_features, generator=g) - 0.5) * 0.2)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
    return m


def _features(model):
    """``model`` with its last linear layer (the classifier) replaced by the identity, eval mode."""
    name = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)][-1]
    parent = model
    *path, last = name.split(".")
    for p in path:
        parent = getattr(parent, p)
    setattr(parent, last, nn.Identity())
    return model.eval()


# --------------------------------------------------------------------------- .safetensors weights

def test_safetensors_weights_and_trunk(tmp_path):
    """timm / Hugging Face publish weights as .safetensors (a plain dict of tensors)."""
    from safetensors.torch import save_file
    from torchvision.models import resnet18

    torch.manual_seed(0)
    net = _randomise_bn(resnet18(weights=None))
    f = tmp_path / "model.safetensors"
    save_file(net.state_dict(), str(f))
    model, _, info = load_model(arch="resnet18", weights=f, head="none")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        want = F.normalize(_features(net)(x), dim=1)
        torch.testing.assert_close(model(x), want)
    assert info["format"] == "backbone weights from a torchvision state dict (safetensors)"
    # a pytorch-metric-learning trunk / embedder pair stored as safetensors
    emb = nn.Linear(512, 8)
    save_file(emb.state_dict(), str(tmp_path / "embedder.safetensors"))
    save_file({k: v for k, v in net.state_dict().items() if not k.startswith("fc.")}, str(tmp_path / "t.safetensors"))
    m2, _, _ = load_model(trunk=tmp_path / "t.safetensors", embedder=tmp_path / "embedder.safetensors")
    with torch.no_grad():
        torch.testing.assert_close(m2(x), F.normalize(emb(net(x)), dim=1))


def test_damaged_safetensors_one_line(tmp_path):
    from safetensors.torch import save_file

    f = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(64, 64)}, str(f))
    f.write_bytes(f.read_bytes()[:-100])  # truncated
    with pytest.raises(EmbedscopeError, match=r"not a readable safetensors file") as e:
        load_model(arch="resnet18", weights=f, head="none")
    assert "\n" not in str(e.value)


# --------------------------------------------------------------------------- timm

def _timm_train_checkpoint(path, model, ema):
    """What timm's CheckpointSaver._save writes (train.py): epoch, arch, optimizer, version, args
    (the argparse.Namespace of train.py), amp_scaler, state_dict, state_dict_ema, metric."""
    import argparse

    args = argparse.Namespace(model="convnext_tiny", num_classes=10, lr=0.1, epochs=5, device="cuda:0",
                              distributed=False, world_size=1, rank=0, model_ema=True, amp=True)
    torch.save({"epoch": 4, "arch": args.model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.1).state_dict(),
                "version": 2, "args": args, "amp_scaler": {"scale": 65536.0, "growth_factor": 2.0, "_growth_tracker": 0},
                "state_dict": model.state_dict(), "state_dict_ema": ema.state_dict(), "metric": 61.25}, path)


class _HeadNormFc(nn.Module):
    """timm's ConvNeXt layout: the classifier is ``head.fc`` next to a ``head.norm`` that stays."""

    def __init__(self, num_classes):
        super().__init__()
        self.stem = nn.Conv2d(3, 6, 3)
        self.head = nn.Module()
        self.head.norm = nn.LayerNorm(6)
        self.head.fc = nn.Linear(6, num_classes) if num_classes else nn.Identity()
        self.num_features = 6
        self.pretrained_cfg = {"classifier": "head.fc"}

    def forward(self, x):
        return self.head.fc(self.head.norm(self.stem(x).mean((2, 3))))


@pytest.mark.filterwarnings("ignore::embedscope.models.checkpoint.DroppedLayerWarning")  # its stand-in head: 10 classes
def test_timm_training_checkpoint_classifier_named_by_pretrained_cfg(tmp_path, monkeypatch):
    """A timm classifier that is not called fc (convnext head.fc, vit head, efficientnet classifier) is
    dropped: its name comes from the model's pretrained_cfg (here a stand-in timm module)."""
    import sys
    import types

    fake = types.ModuleType("timm")
    fake.create_model = lambda name, pretrained, num_classes: _HeadNormFc(num_classes)
    monkeypatch.setitem(sys.modules, "timm", fake)
    torch.manual_seed(1)
    trained, ema = _HeadNormFc(10), _HeadNormFc(10)
    f = tmp_path / "model_best.pth.tar"
    _timm_train_checkpoint(f, trained, ema)
    model, _, _ = load_model(arch="timm:convnext_tiny", weights=f, head="none")
    direct = _HeadNormFc(0)
    direct.load_state_dict({k: v for k, v in trained.state_dict().items() if not k.startswith("head.fc.")})
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(model(x), F.normalize(direct.eval()(x), dim=1))


@pytest.mark.parametrize("name", ["convnext_atto", "vit_tiny_patch16_224", "efficientnet_b0"])
def test_timm_real_models(tmp_path, name):
    timm = pytest.importorskip("timm")
    torch.manual_seed(2)
    trained = _randomise_bn(timm.create_model(name, pretrained=False, num_classes=10))
    f = tmp_path / "model_best.pth.tar"
    _timm_train_checkpoint(f, trained, trained)
    model, _, _ = load_model(arch=f"timm:{name}", weights=f, head="none")
    direct = timm.create_model(name, pretrained=False, num_classes=0)
    direct.load_state_dict(trained.state_dict(), strict=False)
    x = torch.randn(2, 3, 224 if "vit" in name else 64, 224 if "vit" in name else 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), F.normalize(direct.eval()(x), dim=1))


# --------------------------------------------------------------------------- torchvision files

def test_torchvision_densenet_file_with_its_old_key_names(tmp_path):
    """torchvision's released densenet*.pth name the layers denselayerN.norm.1 / conv.2 (torchvision's
    own loader renames them to norm1 / conv2): such a file loads with --weights."""
    from torchvision.models import densenet121

    torch.manual_seed(3)
    net = _randomise_bn(densenet121(weights=None))
    old = {re.sub(r"(denselayer\d+\.(?:norm|relu|conv))([12])\.", r"\1.\2.", k): v for k, v in net.state_dict().items()}
    assert "features.denseblock1.denselayer1.norm.1.weight" in old
    f = tmp_path / "densenet121-a639ec97.pth"
    torch.save(old, f)
    model, _, _ = load_model(arch="densenet121", weights=f, head="none")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), F.normalize(_features(net)(x), dim=1))


# --------------------------------------------------------------------------- pytorch-metric-learning

def _calibrate_bn(m, x):
    """BatchNorm running statistics from data, so that a random network's output depends on its input."""
    for mod in m.modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            mod.reset_running_stats()
            mod.momentum = None
    m.train()
    with torch.no_grad():
        m(x)
    return m.eval()


def _pml_save(folder, trunk, embedder):
    """pytorch-metric-learning's hooks: save_dict_of_models(models, "best<N>", folder) with
    common_functions.save_model (DataParallel unwrapped), here for epoch 3."""
    from pytorch_metric_learning.utils import common_functions as c_f

    folder.mkdir(exist_ok=True)
    c_f.save_dict_of_models({"trunk": nn.DataParallel(trunk), "embedder": nn.DataParallel(embedder)}, "best3",
                            str(folder))
    return folder


class _OneLayerMLP(nn.Module):
    """The key layout of the MLP of pytorch-metric-learning's examples with one layer: net.0, last_linear."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_in, n_out))
        self.last_linear = self.net[-1]

    def forward(self, x):
        return self.net(x)


def test_pml_trainer_without_embedder(tmp_path):
    """BaseTrainer puts torch.nn.Identity() in place of a missing embedder and the hooks save it:
    embedder_best<N>.pth is an empty state dict; the embedding is the (normalised) trunk output."""
    from torchvision.models import resnet18

    torch.manual_seed(4)
    trunk = _randomise_bn(resnet18(weights=None))
    trunk.fc = nn.Identity()
    folder = _pml_save(tmp_path / "saved_models", trunk, nn.Identity())
    assert torch.load(folder / "embedder_best3.pth") == {}
    model, cfg, _ = load_model(folder)
    assert cfg["head"] == "none" and cfg["embed_dim"] == 512
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), F.normalize(trunk.eval()(x), dim=1))


@pytest.mark.parametrize("embedder_sizes", [None, [10, 6]])
def test_pml_trunk_keeps_its_linear_layer(tmp_path, embedder_sizes):
    """A trunk whose fc was not replaced by the identity (fc as the embedding layer, or a classifier
    under an embedder) outputs that layer: it stays part of the model instead of being dropped."""
    from torchvision.models import resnet18

    torch.manual_seed(5)
    trunk = _randomise_bn(resnet18(weights=None, num_classes=10))
    embedder = _OneLayerMLP(*embedder_sizes) if embedder_sizes else nn.Identity()
    folder = _pml_save(tmp_path / "saved_models", trunk, embedder)
    model, cfg, _ = load_model(folder)
    assert cfg["embed_dim"] == (6 if embedder_sizes else 10)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), F.normalize(embedder(trunk.eval()(x)), dim=1))


def test_pml_embedder_not_fitting_the_trunk_linear_one_line(tmp_path):
    from torchvision.models import resnet18

    trunk = resnet18(weights=None, num_classes=10)
    torch.save(trunk.state_dict(), tmp_path / "trunk_best1.pth")
    torch.save(nn.Linear(7, 4).state_dict(), tmp_path / "embedder_best1.pth")
    with pytest.raises(EmbedscopeError, match=r"embedder takes 7 inputs but the trunk's fc layer gives 10") as e:
        load_model(tmp_path)
    assert "\n" not in str(e.value)


def test_pml_googlenet_trunk_transform_input(tmp_path):
    """torchvision builds GoogLeNet with ImageNet weights with transform_input=True, and that is the
    trunk a pytorch-metric-learning user trains (the flag is not in the state dict)."""
    from torchvision.models import googlenet

    torch.manual_seed(6)
    trunk = googlenet(weights=None, aux_logits=False, init_weights=False, transform_input=True)
    trunk.fc = nn.Identity()
    _calibrate_bn(trunk, torch.randn(8, 3, 64, 64))
    embedder = nn.Linear(1024, 8)
    folder = tmp_path / "saved_models"
    folder.mkdir()
    torch.save(trunk.state_dict(), folder / "trunk_best2.pth")
    torch.save(embedder.state_dict(), folder / "embedder_best2.pth")
    model, cfg, _ = load_model(folder)
    assert cfg["transform_input"] is True
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), F.normalize(embedder(trunk(x)), dim=1))


def test_pml_compiled_trunk_prefix(tmp_path):
    """common_functions.save_model unwraps DataParallel / DDP but not torch.compile: a compiled
    trunk's keys start with _orig_mod. (module._orig_mod. when also wrapped)."""
    from torchvision.models import resnet18

    torch.manual_seed(7)
    trunk = _randomise_bn(resnet18(weights=None))
    trunk.fc = nn.Identity()
    embedder = _OneLayerMLP(512, 8)
    _pml_save(tmp_path / "saved_models", torch.compile(trunk), torch.compile(embedder))
    assert next(iter(torch.load(tmp_path / "saved_models" / "trunk_best3.pth"))).startswith("_orig_mod.")
    model, _, _ = load_model(tmp_path / "saved_models")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), F.normalize(embedder(trunk.eval()(x)), dim=1))


# --------------------------------------------------------------------------- torch.save(model)

def test_whole_pickled_embedscope_model_needs_unsafe_pickle(tmp_path):
    """torch.save(model) keeps the settings (here normalize=False) in the module's attributes, which an
    inert read loses: the file is refused without --unsafe-pickle and, with it, embeds as the model does."""
    from embedscope.cli import main
    from embedscope.models import build_model, default_config, load_checkpoint

    torch.manual_seed(9)
    m = _randomise_bn(build_model(default_config("digits_cnn", embed_dim=6, normalize=False))).eval()
    p = tmp_path / "whole.pt"
    torch.save(m, p)
    with pytest.raises(EmbedscopeError, match=r"whole pickled embedscope model.*--unsafe-pickle \(nothing was run") as e:
        load_checkpoint(p, arch="digits_cnn")
    assert "\n" not in str(e.value)
    assert main(["embed", str(p), "--dataset", "digits", "-o", str(tmp_path / "x.h5"), "--no-progress"]) == 1
    m2, cfg, _ = load_checkpoint(p, unsafe_pickle=True)
    assert cfg["normalize"] is False and cfg["arch"] == "digits_cnn"
    x = torch.rand(3, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(m2(x), m(x))


def test_whole_pickled_foreign_module(tmp_path):
    """A pickled torchvision module is no embedscope checkpoint (its forward is unknown), with or
    without --unsafe-pickle; --weights reads its tensors without running its code."""
    from torchvision.models import resnet18

    torch.manual_seed(10)
    net = _randomise_bn(resnet18(weights=None))
    p = tmp_path / "whole_resnet18.pt"
    torch.save(net, p)
    for unsafe in (False, True):
        with pytest.raises(EmbedscopeError, match=r"whole pickled torchvision.models.resnet.ResNet module.*--weights"):
            load_model(p, arch="resnet18", unsafe_pickle=unsafe)
    model, _, _ = load_model(arch="resnet18", weights=p, head="none")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), F.normalize(_features(net)(x), dim=1))
