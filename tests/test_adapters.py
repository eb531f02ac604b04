"""Foreign checkpoints: each format is built here with its key layout (random weights, small inputs)
and embedscope's embedding is compared with the forward pass of the network built directly."""

import argparse
import os
import sys
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from embedscope.errors import EmbedscopeError, UsageError
from embedscope.models import (
    EmbeddingModel,
    build_model,
    default_config,
    load_checkpoint,
    load_model,
    read_checkpoint,
)
from embedscope.models.bninception import BNInception

IMAGENET_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
IMAGENET_STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)


def _std_input(v):
    """embedscope's standard input from RGB values v in [0, 1]."""
    return (v - IMAGENET_MEAN) / IMAGENET_STD


def _randomise_bn(m, seed=0):
    g = torch.Generator().manual_seed(seed)
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.copy_(torch.rand(mod.num_features, generator=g) - 0.5)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
    return m


class PBMLP(nn.Module):
    """The key layout of powerful-benchmarker's MLP: ReLU before every linear layer but the first."""

    def __init__(self, sizes):
        super().__init__()
        layers = []
        for i in range(len(sizes) - 1):
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        self.net = nn.Sequential(*layers)
        self.last_linear = self.net[-1]

    def forward(self, x):
        return self.net(x)


class Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


# --------------------------------------------------------------------------- backbones and heads

def test_bninception_cadene_keys_and_convention():
    m = BNInception()
    sd = m.state_dict()
    # the Cadene port's names and shapes (its layer table): stem, a normal and a reduction block
    assert tuple(sd["conv1_7x7_s2.weight"].shape) == (64, 3, 7, 7)
    assert tuple(sd["inception_3a_pool_proj.weight"].shape) == (32, 192, 1, 1)
    assert tuple(sd["inception_4e_double_3x3_2.weight"].shape) == (256, 256, 3, 3)
    assert tuple(sd["inception_5b_1x1_bn.running_var"].shape) == (352,)
    assert "inception_3c_1x1.weight" not in sd and "inception_4e_pool_proj.weight" not in sd
    n_conv = sum(1 for k in sd if k.endswith(".weight") and sd[k].ndim == 4)
    assert n_conv == 3 + 8 * 7 + 2 * 5  # stem, 8 normal blocks of 7 convs, 2 reduction blocks of 5
    cfg = default_config("bninception", embed_dim=8)
    assert cfg["image_size"] == 227 and cfg["resize"] == 256
    assert cfg["input_space"] == {"order": "BGR", "range": 255.0, "mean": [104.0, 117.0, 128.0],
                                  "std": [1.0, 1.0, 1.0]}
    torch.manual_seed(0)
    model = _randomise_bn(build_model(cfg)).eval()
    v = torch.rand(2, 3, 64, 64)
    bgr255 = v[:, [2, 1, 0]] * 255 - torch.tensor([104.0, 117.0, 128.0]).view(1, 3, 1, 1)
    with torch.no_grad():
        want = F.normalize(model.head(model.backbone(bgr255)), dim=1)
        got = model(_std_input(v))
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_torchvision_by_name_head_none(tmp_path):
    from torchvision.models import resnet18

    torch.manual_seed(1)
    ref = _randomise_bn(resnet18(weights=None)).eval()
    w = tmp_path / "resnet18-imagenet.pth"
    torch.save(ref.state_dict(), w)
    model, cfg, info = load_model(arch="resnet18", weights=w, head="none", normalize=False)
    assert cfg["embed_dim"] == 512 and len(info["sha256"]) == 64
    x = torch.randn(2, 3, 64, 64)
    ref.fc = nn.Identity()
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x))
    m2, _, _ = load_model(arch="densenet121", head="none")  # any torchvision classifier: penultimate features
    assert m2.embed_dim == 1024


def test_random_head_seeded(tmp_path):
    a, cfg, _ = load_model(arch="resnet18", head="random", embed_dim=16, head_seed=3)
    b, _, _ = load_model(arch="resnet18", head="random", embed_dim=16, head_seed=3)
    c, _, _ = load_model(arch="resnet18", head="random", embed_dim=16, head_seed=4)
    torch.manual_seed(3)
    want = nn.Linear(512, 16)
    torch.testing.assert_close(a.head.weight, want.weight)
    torch.testing.assert_close(a.head.weight, b.head.weight)
    assert not torch.equal(a.head.weight, c.head.weight)
    with torch.no_grad():
        z = a(torch.randn(2, 3, 64, 64))
    assert z.shape == (2, 16)
    torch.testing.assert_close(z.norm(dim=1), torch.ones(2))
    with pytest.raises(UsageError, match="--head linear needs a trained checkpoint"):
        load_model(arch="resnet18", head="linear")
    # a random-head model saved as an embedscope checkpoint loads back identically
    from embedscope.models import save_checkpoint

    p = save_checkpoint(tmp_path / "r.pt", a, cfg)
    a2, _, _ = load_checkpoint(p)
    torch.testing.assert_close(a2.head.weight, a.head.weight)


def test_timm_optional(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)
    with pytest.raises(EmbedscopeError, match=r"pip install 'embedscope\[timm\]'"):
        EmbeddingModel("timm:resnet18", 8)
    fake = types.ModuleType("timm")

    def create_model(name, pretrained, num_classes):
        assert pretrained is False and num_classes == 0
        m = nn.Sequential(nn.Conv2d(3, 5, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        m.num_features = 5
        return m

    fake.create_model = create_model
    monkeypatch.setitem(sys.modules, "timm", fake)
    m = EmbeddingModel("timm:tiny", 4)
    assert m.feat_dim == 5 and m(torch.rand(2, 3, 16, 16)).shape == (2, 4)


def test_unknown_arch_one_line():
    with pytest.raises(EmbedscopeError, match="unknown architecture 'nonet'"):
        EmbeddingModel("nonet", 8)


# --------------------------------------------------------------------------- pytorch-metric-learning

@pytest.mark.parametrize("sizes", [[512, 16], [512, 32, 16]])
def test_pml_trunk_embedder(tmp_path, sizes):
    from torchvision.models import resnet18

    torch.manual_seed(2)
    trunk = _randomise_bn(resnet18(weights=None))
    trunk.fc = nn.Identity()
    embedder = PBMLP(sizes)
    folder = tmp_path / "saved_models"
    folder.mkdir()
    # DataParallel prefix on the trunk, as saved from a wrapped model
    torch.save({"module." + k: v for k, v in trunk.state_dict().items()}, folder / "trunk_best7.pth")
    torch.save(embedder.state_dict(), folder / "embedder_best7.pth")
    torch.save(embedder.state_dict(), folder / "embedder_best9.pth")  # no trunk_best9: not a pair
    trunk.eval()
    x = torch.randn(3, 3, 64, 64)
    with torch.no_grad():
        want = F.normalize(embedder(trunk(x)), dim=1)
    m1, cfg, info = load_model(trunk=folder / "trunk_best7.pth", embedder=folder / "embedder_best7.pth")
    m2, _, info2 = load_checkpoint(folder)  # the folder: the best common pair
    assert cfg["arch"] == "resnet18" and cfg["embed_dim"] == 16 and info2["trunk"].endswith("trunk_best7.pth")
    assert info["sha256"].startswith("trunk:")
    with torch.no_grad():
        torch.testing.assert_close(m1(x), want)
        torch.testing.assert_close(m2(x), want)


def test_pml_bninception_trunk(tmp_path):
    torch.manual_seed(3)
    trunk = _randomise_bn(BNInception()).eval()
    emb = nn.Linear(1024, 8)
    torch.save(trunk.state_dict(), tmp_path / "trunk_best1.pth")
    torch.save(emb.state_dict(), tmp_path / "embedder_best1.pth")
    m, cfg, _ = load_model(trunk=tmp_path / "trunk_best1.pth", embedder=tmp_path / "embedder_best1.pth")
    assert cfg["arch"] == "bninception" and cfg["input_space"]["order"] == "BGR"
    v = torch.rand(2, 3, 64, 64)
    bgr = v[:, [2, 1, 0]] * 255 - torch.tensor([104.0, 117.0, 128.0]).view(1, 3, 1, 1)
    with torch.no_grad():
        torch.testing.assert_close(m(_std_input(v)), F.normalize(emb(trunk(bgr)), dim=1), atol=2e-5, rtol=1e-4)


def test_pml_bad_layouts(tmp_path):
    from torchvision.models import resnet18

    t = resnet18(weights=None)
    t.fc = nn.Identity()
    torch.save(t.state_dict(), tmp_path / "t.pth")
    torch.save({"proj.weight": torch.zeros(4, 512)}, tmp_path / "e.pth")
    with pytest.raises(EmbedscopeError, match="expected powerful-benchmarker MLP keys.*found proj.weight"):
        load_model(trunk=tmp_path / "t.pth", embedder=tmp_path / "e.pth")
    torch.save({"w": torch.zeros(3)}, tmp_path / "t2.pth")
    torch.save(nn.Linear(512, 4).state_dict(), tmp_path / "e2.pth")
    with pytest.raises(EmbedscopeError, match="cannot tell the trunk's architecture.*--arch"):
        load_model(trunk=tmp_path / "t2.pth", embedder=tmp_path / "e2.pth")
    torch.save(nn.Linear(256, 4).state_dict(), tmp_path / "e3.pth")
    with pytest.raises(EmbedscopeError, match="takes 256 inputs but the resnet18 trunk gives 512") as e:
        load_model(trunk=tmp_path / "t.pth", embedder=tmp_path / "e3.pth")
    assert str(e.value).startswith(f"{tmp_path / 'e3.pth'} (with the trunk {tmp_path / 't.pth'}): ")
    with pytest.raises(UsageError, match="go together"):
        load_model(trunk=tmp_path / "t.pth")
    with pytest.raises(EmbedscopeError, match="no trunk_best<N>.pth"):
        load_checkpoint(tmp_path)


# --------------------------------------------------------------------------- Roth et al.

def _roth_classes():
    """Their logger class, under their module name, importable only while saving."""
    mod = types.ModuleType("utilities.logger")

    class Progress_Saver:
        def __init__(self):
            self.groups = {"Train": {"loss": [np.float64(0.5), np.float64(0.25)]}}

    Progress_Saver.__module__ = "utilities.logger"
    Progress_Saver.__qualname__ = "Progress_Saver"
    mod.Progress_Saver = Progress_Saver
    return mod


def _save_roth(path, model, arch, embed_dim, extra_aux=None, legacy=False):
    mod = _roth_classes()
    sys.modules["utilities"] = types.ModuleType("utilities")
    sys.modules["utilities.logger"] = mod
    try:
        opt = argparse.Namespace(arch=arch, embed_dim=embed_dim, dataset="cub200", loss="margin",
                                 batch_mining="distance", device=torch.device("cpu"), tau=[30, 55], epoch=17)
        progress = {"Train": mod.Progress_Saver(), "Test": mod.Progress_Saver()}
        torch.save({"state_dict": model.state_dict(), "opt": opt, "progress": progress, "aux": extra_aux}, path,
                   _use_new_zipfile_serialization=not legacy)  # their torch (< 1.6) wrote the legacy format
    finally:
        del sys.modules["utilities.logger"], sys.modules["utilities"]


class RothResNet(nn.Module):
    """Their network's attribute layout: model (Cadene resnet50 with last_linear) + layer_blocks."""

    def __init__(self, dim):
        super().__init__()
        from torchvision.models import resnet50

        self.model = resnet50(weights=None)
        self.model.last_linear = nn.Linear(2048, dim)
        del self.model.fc
        self.layer_blocks = nn.ModuleList([self.model.layer1, self.model.layer2, self.model.layer3,
                                           self.model.layer4])

    def features(self, x):
        """The output before the normalisation."""
        m = self.model
        x = m.maxpool(m.relu(m.bn1(m.conv1(x))))
        for b in self.layer_blocks:
            x = b(x)
        return m.last_linear(torch.flatten(m.avgpool(x), 1))

    def forward(self, x):
        return F.normalize(self.features(x), dim=-1)


def test_roth_resnet50(tmp_path):
    torch.manual_seed(4)
    net = _randomise_bn(RothResNet(16)).eval()
    p = tmp_path / "checkpoint_Test_discriminative_e_recall@1.pth.tar"
    _save_roth(p, net, "resnet50_frozen_normalize", 16)
    assert "utilities.logger" not in sys.modules
    with pytest.raises(Exception):
        torch.load(p, weights_only=True)  # needs more than tensors
    model, cfg, info = load_checkpoint(p)
    assert cfg["arch"] == "resnet50" and cfg["embed_dim"] == 16 and cfg["normalize"] and cfg["image_size"] == 224
    assert info["extra"]["epoch"] == 17 and info["extra"]["roth_options"]["loss"] == "margin"
    assert "utilities.logger" not in sys.modules  # their module was never imported
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), net(x))


def test_roth_bninception_double(tmp_path):
    class RothBN(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = BNInception()
            self.model.last_linear = nn.Linear(1024, 12)

        def forward(self, x):
            f = self.model.features(x)
            y = F.adaptive_avg_pool2d(f, 1) + F.adaptive_max_pool2d(f, 1)
            return self.model.last_linear(y.flatten(1))  # no 'normalize' in the arch name

    torch.manual_seed(5)
    net = _randomise_bn(RothBN()).eval()
    p = tmp_path / "checkpoint.pth.tar"
    _save_roth(p, net, "bninception_double_frozen", 12)
    model, cfg, _ = load_checkpoint(p)
    assert cfg["pool"] == "avg+max" and not cfg["normalize"] and cfg["image_size"] == 224
    v = torch.rand(2, 3, 64, 64)
    # their data sets: Normalize(mean (0.502, 0.4588, 0.4078), std 0.0039) on RGB, then flip to BGR
    theirs = ((v - torch.tensor([0.502, 0.4588, 0.4078]).view(1, 3, 1, 1)) / 0.0039)[:, [2, 1, 0]]
    with torch.no_grad():
        torch.testing.assert_close(model(_std_input(v)), net(theirs), atol=1e-4, rtol=1e-4)


def test_roth_googlenet(tmp_path):
    from torchvision.models import googlenet

    class RothGoogLeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = googlenet(weights=None, aux_logits=False, transform_input=True, init_weights=True)
            self.model.last_linear = nn.Linear(1024, 10)
            self.model.fc = self.model.last_linear

        def forward(self, x):
            return F.normalize(self.model(x), dim=-1)

    torch.manual_seed(6)
    net = _randomise_bn(RothGoogLeNet()).eval()
    p = tmp_path / "checkpoint.pth.tar"
    _save_roth(p, net, "googlenet_normalize", 10, legacy=True)
    assert p.read_bytes()[:2] == b"\x80\x02"  # the legacy (non-zip) format
    model, cfg, _ = load_checkpoint(p)
    assert cfg["transform_input"] and cfg["image_size"] == 227
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), net(x))


def test_roth_bad_options(tmp_path):
    torch.manual_seed(7)
    net = RothResNet(16)
    p = tmp_path / "c.pth.tar"
    _save_roth(p, net, "resnet50_frozen_normalize", 32)
    with pytest.raises(EmbedscopeError, match="opt.embed_dim is 32 but model.last_linear has 16 outputs"):
        load_checkpoint(p)
    p2 = tmp_path / "c2.pth.tar"
    _save_roth(p2, net, "vgg16_normalize", 16)
    with pytest.raises(EmbedscopeError, match="not one of Roth et al.'s"):
        load_checkpoint(p2)


# --------------------------------------------------------------------------- code payloads, every path

def _payload_files(tmp_path, marker):
    from torchvision.models import resnet18

    cfg = default_config("digits_cnn", embed_dim=8)
    sd = build_model(cfg).state_dict()
    files = {}
    files["embedscope"] = tmp_path / "e.pt"
    torch.save({"state_dict": sd, "config": cfg, "extra": {"x": Payload(marker)}}, files["embedscope"])
    files["bare"] = tmp_path / "bare.pt"
    torch.save({**sd, "evil": Payload(marker)}, files["bare"])
    files["top"] = tmp_path / "top.pt"
    torch.save(Payload(marker), files["top"])
    t = resnet18(weights=None)
    t.fc = nn.Identity()
    files["weights"] = tmp_path / "w.pth"
    torch.save({**t.state_dict(), "meta": Payload(marker)}, files["weights"])
    files["trunk"] = files["weights"]
    files["embedder"] = tmp_path / "emb.pth"
    torch.save({**nn.Linear(512, 4).state_dict(), "x": Payload(marker)}, files["embedder"])
    files["roth"] = tmp_path / "roth.pth.tar"
    net = RothResNet(4)
    torch.save({"state_dict": net.state_dict(), "opt": argparse.Namespace(arch="resnet50", embed_dim=4),
                "progress": None, "aux": Payload(marker)}, files["roth"])
    return files


def test_code_payload_refused_in_every_path(tmp_path):
    marker = tmp_path / "PWNED"
    f = _payload_files(tmp_path, marker)
    good_emb = tmp_path / "good_emb.pth"
    torch.save(nn.Linear(512, 4).state_dict(), good_emb)
    good_trunk = tmp_path / "good_trunk.pth"
    from torchvision.models import resnet18

    t = resnet18(weights=None)
    t.fc = nn.Identity()
    torch.save(t.state_dict(), good_trunk)
    attempts = [
        lambda: load_checkpoint(f["embedscope"]),
        lambda: load_checkpoint(f["bare"], arch="digits_cnn"),
        lambda: load_checkpoint(f["top"]),
        lambda: read_checkpoint(f["top"]),
        lambda: load_model(arch="resnet18", weights=f["weights"], head="none"),
        lambda: load_model(trunk=f["trunk"], embedder=good_emb),
        lambda: load_model(trunk=good_trunk, embedder=f["embedder"]),
        lambda: load_checkpoint(f["roth"]),
    ]
    for attempt in attempts:
        with pytest.raises(EmbedscopeError, match="refusing to load.*system.*nothing was run.*--unsafe-pickle"):
            attempt()
        assert not marker.exists()
    read_checkpoint(f["top"], unsafe_pickle=True)  # the payload is real: allowed, it runs
    assert marker.exists()


def test_whole_pickled_module_read_without_its_code(tmp_path):
    from embedscope.models import Record

    torch.manual_seed(8)
    cfg = default_config("digits_cnn", embed_dim=6)
    m = build_model(cfg).eval()
    p = tmp_path / "whole.pt"
    torch.save(m, p)
    assert isinstance(read_checkpoint(p), Record)  # inert: EmbeddingModel's code is not used to read it
    # its settings are attributes of the module: as a checkpoint it needs --unsafe-pickle
    with pytest.raises(EmbedscopeError, match="whole pickled embedscope model.*--unsafe-pickle"):
        load_checkpoint(p, arch="digits_cnn")
    m2, cfg2, info = load_checkpoint(p, unsafe_pickle=True)
    assert info["format"].startswith("pickled") and cfg2["embed_dim"] == 6
    x = torch.rand(3, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(m2(x), m(x))


# --------------------------------------------------------------------------- through `embedscope embed`

def _photos(root):
    from PIL import Image

    rng = np.random.default_rng(0)
    for cls in ("ant", "bee", "cat", "dog"):
        for k in range(2):
            (root / cls).mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(root / cls / f"{k}.png")
    return root


def test_embed_command_random_head_baseline_and_pml_pair(tmp_path):
    from torchvision.models import resnet18

    from embedscope import store
    from embedscope.cli import main

    photos = _photos(tmp_path / "photos")
    w = tmp_path / "r18.pth"
    torch.save(resnet18(weights=None).state_dict(), w)
    out = tmp_path / "base.h5"
    assert main(["embed", "--arch", "resnet18", "--weights", str(w), "--head", "random", "--embed-dim", "16",
                 "--dataset", "imagefolder", "--root", str(photos), "--train-classes", "2", "-o", str(out),
                 "--no-progress", "--device", "cpu"]) == 0
    es = store.load(out)
    assert es.embeddings.shape == (8, 16) and set(es.split) == {"train", "test"}
    np.testing.assert_allclose(np.linalg.norm(es.embeddings, axis=1), 1, rtol=1e-5)  # a normalised head
    # the same baseline built directly embeds the same
    m, _, _ = load_model(arch="resnet18", weights=w, head="random", embed_dim=16, head_seed=0)
    from embedscope.data import get_dataset, image_transform
    from embedscope.embed import embed_images

    ds = get_dataset("imagefolder", photos, train_classes=2)
    X = embed_images(m, ds, transform=image_transform("photo", train=False), device="cpu", progress=False)
    np.testing.assert_allclose(es.embeddings, X, rtol=1e-4, atol=1e-5)
    # a pytorch-metric-learning trunk + embedder pair
    trunk = resnet18(weights=None)
    trunk.fc = nn.Identity()
    torch.save(trunk.state_dict(), tmp_path / "trunk_best1.pth")
    torch.save(PBMLP([512, 8]).state_dict(), tmp_path / "embedder_best1.pth")
    out2 = tmp_path / "pml.h5"
    assert main(["embed", "--trunk", str(tmp_path / "trunk_best1.pth"), "--embedder",
                 str(tmp_path / "embedder_best1.pth"), "--dataset", "imagefolder", "--root", str(photos),
                 "-o", str(out2), "--no-progress", "--device", "cpu"]) == 0
    es2 = store.load(out2)
    assert es2.dim == 8 and "metric-learning" in str(es2.attrs.get("checkpoint_format", ""))


def test_pml_embedder_saved_as_a_sequential_of_one_linear_layer(tmp_path):
    """An embedder made as nn.Sequential(nn.Linear(...)) saves '0.weight', '0.bias': one linear layer, read
    as such (it was refused as an unknown layout); a deeper plain Sequential stays refused (the file does not
    say which parameter-free layers sit between its linear layers)."""
    from torchvision.models import resnet18

    torch.manual_seed(4)
    trunk = _randomise_bn(resnet18(weights=None)).eval()
    trunk.fc = nn.Identity()
    emb = nn.Sequential(nn.Linear(512, 12))
    torch.save(trunk.state_dict(), tmp_path / "trunk.pth")
    torch.save(emb.state_dict(), tmp_path / "emb.pth")
    m, cfg, _ = load_model(trunk=tmp_path / "trunk.pth", embedder=tmp_path / "emb.pth")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(m(x), F.normalize(emb(trunk(x)), dim=1))
    assert cfg["embed_dim"] == 12
    torch.save(nn.Sequential(nn.Linear(512, 32), nn.ReLU(), nn.Linear(32, 12)).state_dict(), tmp_path / "deep.pth")
    with pytest.raises(EmbedscopeError, match=r"unknown embedder layout: .*found 0\.bias, 0\.weight, 2\.bias"):
        load_model(trunk=tmp_path / "trunk.pth", embedder=tmp_path / "deep.pth")
