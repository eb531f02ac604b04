"""Loading options of ``embed``: ``--ema`` (timm's EMA weights) and ``--no-transform-input`` (a
GoogLeNet / Inception-v3 trunk trained from scratch). Files are written as the other projects'
saving code writes them; embeddings are compared with the network built directly in PyTorch."""

from __future__ import annotations

import argparse
import sys
import types

import h5py
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_audit_checkpoints import _calibrate_bn
from torch import nn

from embedscope.errors import EmbedscopeError, UsageError
from embedscope.models import build_model, default_config, load_model


def _timm_train_checkpoint(path, model, ema, *, ema_key="state_dict_ema"):
    """What timm's CheckpointSaver._save writes (train.py): epoch, arch, state_dict, optimizer, version,
    args (train.py's argparse.Namespace), the amp scaler's state, state_dict_ema (the ModelEma copy,
    unwrapped) and metric."""
    args = argparse.Namespace(model="resnet50", num_classes=10, lr=0.1, epochs=5, model_ema=True,
                              model_ema_decay=0.9998, amp=True, device="cuda:0")
    obj = {"epoch": 4, "arch": args.model, "state_dict": model.state_dict(),
           "optimizer": torch.optim.SGD(model.parameters(), lr=0.1).state_dict(), "version": 2, "args": args,
           "amp_scaler": {"scale": 65536.0, "growth_factor": 2.0, "_growth_tracker": 0}, "metric": 61.25}
    if ema is not None:
        obj[ema_key] = ema.state_dict()
    torch.save(obj, path)


class _Tiny(nn.Module):
    """A stand-in timm model: ``fc`` is its classifier (``num_classes=0``: the identity)."""

    def __init__(self, num_classes=0):
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3)
        self.bn = nn.BatchNorm2d(5)
        self.fc = nn.Linear(5, num_classes) if num_classes else nn.Identity()
        self.num_features = 5
        self.pretrained_cfg = {"classifier": "fc"}

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


@pytest.fixture
def fake_timm(monkeypatch):
    fake = types.ModuleType("timm")
    fake.create_model = lambda name, pretrained, num_classes: _Tiny(num_classes)
    monkeypatch.setitem(sys.modules, "timm", fake)
    return fake


def _two(seed=0):
    """A trained network and its EMA copy: the same architecture, other tensors (BN statistics too)."""
    torch.manual_seed(seed)
    trained, ema = _Tiny(10), _Tiny(10)
    for m in (trained, ema):
        m.bn.running_mean.uniform_(-0.3, 0.3)
        m.bn.running_var.uniform_(0.5, 1.5)
    return trained, ema


def _direct(sd):
    net = _Tiny(0)
    net.load_state_dict({k: v for k, v in sd.items() if not k.startswith("fc.")})
    return net.eval()


@pytest.mark.filterwarnings("ignore::embedscope.models.checkpoint.DroppedLayerWarning")  # its stand-in head: 10 classes
@pytest.mark.parametrize("ema_key", ["state_dict_ema", "model_ema"])
def test_ema_weights_of_a_timm_training_checkpoint(tmp_path, fake_timm, ema_key):
    """--weights read the state_dict only; with ema the EMA copy is used (timm's validate.py --use-ema)."""
    trained, ema = _two()
    f = tmp_path / "model_best.pth.tar"
    _timm_train_checkpoint(f, trained, ema, ema_key=ema_key)
    x = torch.randn(3, 3, 12, 12)
    plain, cfg_plain, _ = load_model(arch="timm:tiny", weights=f, head="none")
    with_ema, cfg_ema, _ = load_model(arch="timm:tiny", weights=f, head="none", ema=True)
    with torch.no_grad():
        torch.testing.assert_close(plain(x), F.normalize(_direct(trained.state_dict())(x), dim=1), rtol=0, atol=0)
        torch.testing.assert_close(with_ema(x), F.normalize(_direct(ema.state_dict())(x), dim=1), rtol=0, atol=0)
        assert not torch.allclose(plain(x), with_ema(x))
    assert cfg_ema["weights_ema"] is True and "weights_ema" not in cfg_plain


def test_ema_weights_real_timm(tmp_path):
    timm = pytest.importorskip("timm")
    torch.manual_seed(3)
    trained = timm.create_model("resnet18", pretrained=False, num_classes=10)
    ema = timm.create_model("resnet18", pretrained=False, num_classes=10)
    f = tmp_path / "model_best.pth.tar"
    _timm_train_checkpoint(f, trained, ema)
    model, _, _ = load_model(arch="timm:resnet18", weights=f, head="none", ema=True)
    direct = timm.create_model("resnet18", pretrained=False, num_classes=0)
    direct.load_state_dict(ema.state_dict(), strict=False)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), F.normalize(direct.eval()(x), dim=1))


def test_ema_missing_is_one_line(tmp_path, fake_timm):
    trained, _ = _two()
    f = tmp_path / "no_ema.pth.tar"
    _timm_train_checkpoint(f, trained, None)
    with pytest.raises(EmbedscopeError, match=r"--ema: no EMA weights in the file \(no 'state_dict_ema' or "
                                              r"'model_ema'; its keys: epoch, arch, state_dict") as e:
        load_model(arch="timm:tiny", weights=f, head="none", ema=True)
    assert "\n" not in str(e.value) and str(f) in str(e.value)
    torch.save(trained.state_dict(), tmp_path / "bare.pth")  # a bare state dict has no EMA copy either
    with pytest.raises(EmbedscopeError, match=r"--ema: no EMA weights"):
        load_model(arch="timm:tiny", weights=tmp_path / "bare.pth", head="none", ema=True)


def test_ema_needs_a_file_that_can_hold_one(tmp_path):
    with pytest.raises(UsageError, match=r"--ema picks the EMA weights of a file: give --weights"):
        load_model(arch="resnet18", ema=True)
    torch.save(nn.Linear(2, 2).state_dict(), tmp_path / "t.pth")
    with pytest.raises(UsageError, match=r"trunk and embedder files hold none"):
        load_model(trunk=tmp_path / "t.pth", embedder=tmp_path / "t.pth", ema=True)


def _digits_with_ema(path, seed=0):
    """An embedscope digits checkpoint that also carries an EMA copy of its weights (as a trainer
    with timm's ModelEma saves it beside the state_dict)."""
    torch.manual_seed(seed)
    cfg = default_config("digits_cnn", embed_dim=8)
    model, ema = build_model(cfg), build_model(cfg)
    torch.save({"format": "embedscope-checkpoint", "format_version": 1, "state_dict": model.state_dict(),
                "state_dict_ema": ema.state_dict(), "config": cfg, "extra": {}}, path)
    return cfg, model.eval(), ema.eval()


def test_ema_of_an_embedscope_checkpoint(tmp_path):
    f = tmp_path / "ck.pt"
    cfg, model, ema = _digits_with_ema(f)
    x = torch.rand(4, 1, 8, 8)
    got, gcfg, _ = load_model(f, ema=True)
    plain, _, _ = load_model(f)
    with torch.no_grad():
        torch.testing.assert_close(got(x), ema(x), rtol=0, atol=0)
        torch.testing.assert_close(plain(x), model(x), rtol=0, atol=0)
    assert gcfg["weights_ema"] is True


def test_embed_cli_ema(tmp_path, capsys):
    """`embed --ema`: the embeddings are the EMA network's; without it the state_dict's; a file
    without EMA weights is one line, exit 1."""
    from embedscope import store
    from embedscope.cli import main
    from embedscope.data import get_dataset
    from embedscope.embed import checkpoint_input, embed_images

    f = tmp_path / "ck.pt"
    cfg, model, ema = _digits_with_ema(f, seed=1)
    for flag, net in (([], model), (["--ema"], ema)):
        out = tmp_path / f"e{len(flag)}.h5"
        assert main(["embed", str(f), "--dataset", "digits", "--split", "test", "-o", str(out), "--no-progress",
                     "--device", "cpu", *flag]) == 0
        ds = get_dataset("digits").subset("test")
        want = embed_images(net, ds, transform=checkpoint_input(ds, cfg)[0], device="cpu", progress=False)
        np.testing.assert_array_equal(store.load(out).embeddings, want)
        with h5py.File(out) as h:
            assert ("weights_ema" in str(h.attrs["checkpoint_config"])) == bool(flag)
    bare = tmp_path / "bare.pt"
    torch.save({"state_dict": model.state_dict(), "config": cfg}, bare)
    capsys.readouterr()
    assert main(["embed", str(bare), "--dataset", "digits", "-o", str(tmp_path / "x.h5"), "--ema",
                 "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert "--ema: no EMA weights in the file" in err and "\n" not in err


# --------------------------------------------------------------------------- transform_input


def _scratch_googlenet_pair(folder, seed=8):
    """A GoogLeNet trunk trained from scratch (torchvision, transform_input=False) and a linear
    embedder, saved as pytorch-metric-learning's hooks save them (trunk_best<N>.pth, embedder_best<N>.pth)."""
    from torchvision.models import googlenet

    torch.manual_seed(seed)
    trunk = googlenet(weights=None, aux_logits=False, init_weights=False, transform_input=False)
    trunk.fc = nn.Identity()
    _calibrate_bn(trunk, torch.randn(8, 3, 64, 64))
    embedder = nn.Linear(1024, 6)
    folder.mkdir(exist_ok=True)
    torch.save(trunk.state_dict(), folder / "trunk_best3.pth")
    torch.save(embedder.state_dict(), folder / "embedder_best3.pth")
    return trunk, embedder.eval()


def test_pml_googlenet_trunk_without_transform_input(tmp_path):
    trunk, embedder = _scratch_googlenet_pair(tmp_path / "saved_models")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        want = F.normalize(embedder(trunk(x)), dim=1)
        for source in ({"trunk": tmp_path / "saved_models" / "trunk_best3.pth",
                        "embedder": tmp_path / "saved_models" / "embedder_best3.pth"},
                       {"checkpoint": tmp_path / "saved_models"}):
            model, cfg, _ = load_model(**source, transform_input=False)
            assert not cfg.get("transform_input")
            torch.testing.assert_close(model(x), want)
            default, dcfg, _ = load_model(**source)  # assumed ImageNet-initialised: transform_input=True
            assert dcfg["transform_input"] is True
            assert not torch.allclose(default(x), want, atol=1e-4)


def test_transform_input_only_where_it_means_something(tmp_path):
    from torchvision.models import resnet18

    torch.save(resnet18(weights=None).state_dict(), tmp_path / "trunk.pth")
    torch.save(nn.Linear(1000, 4).state_dict(), tmp_path / "emb.pth")
    with pytest.raises(UsageError, match=r"--no-transform-input applies to a GoogLeNet / Inception-v3 trunk, "
                                         r"not resnet18"):
        load_model(trunk=tmp_path / "trunk.pth", embedder=tmp_path / "emb.pth", transform_input=False)
    with pytest.raises(UsageError, match=r"--no-transform-input applies to GoogLeNet / Inception-v3, not resnet18"):
        load_model(arch="resnet18", transform_input=False)
    f = tmp_path / "ck.pt"
    _digits_with_ema(f)
    with pytest.raises(UsageError, match=r"a checkpoint file records its own input handling"):
        load_model(f, transform_input=False)


def test_googlenet_weights_from_scratch_without_transform_input(tmp_path):
    """--weights of a GoogLeNet trained from scratch: --no-transform-input builds it as it was trained."""
    from torchvision.models import googlenet

    torch.manual_seed(9)
    net = googlenet(weights=None, aux_logits=False, init_weights=False, transform_input=False)
    _calibrate_bn(net, torch.randn(8, 3, 64, 64))
    torch.save(net.state_dict(), tmp_path / "g.pth")
    net.fc = nn.Identity()
    model, cfg, _ = load_model(arch="googlenet", weights=tmp_path / "g.pth", head="none", transform_input=False)
    assert not cfg.get("transform_input")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), F.normalize(net(x), dim=1))


def test_embed_cli_no_transform_input(tmp_path):
    from PIL import Image

    from embedscope import store
    from embedscope.cli import main
    from embedscope.data import get_dataset
    from embedscope.embed import checkpoint_input, embed_images

    root = tmp_path / "images"
    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(root / c / f"{i}.png")
    folder = tmp_path / "saved_models"
    trunk, embedder = _scratch_googlenet_pair(folder)
    out = tmp_path / "e.h5"
    assert main(["embed", "--trunk", str(folder / "trunk_best3.pth"), "--embedder", str(folder / "embedder_best3.pth"),
                 "--no-transform-input", "--dataset", "imagefolder", "--root", str(root), "--image-size", "32",
                 "-o", str(out), "--no-progress", "--device", "cpu"]) == 0
    ds = get_dataset("imagefolder", str(root)).subset("all")
    cfg = dict(default_config("googlenet"), image_size=32)
    cfg.pop("resize", None)

    class Direct(nn.Module):
        embed_dim = 6

        def forward(self, x):
            return F.normalize(embedder(trunk(x)), dim=1)

    want = embed_images(Direct(), ds, transform=checkpoint_input(ds, cfg)[0], device="cpu", progress=False)
    np.testing.assert_allclose(store.load(out).embeddings, want, rtol=0, atol=1e-5)
    # both files of the pair are recorded (before: the trunk's path only)
    attrs = store.load(out).attrs
    assert attrs["checkpoint"] == str((folder / "trunk_best3.pth").resolve())
    assert attrs["checkpoint_embedder"] == str((folder / "embedder_best3.pth").resolve())


def test_saliency_with_ema_weights(tmp_path):
    """saliency_to_file(ema=True) computes the maps of the EMA network: the same maps as a checkpoint
    whose state_dict is those EMA tensors."""
    from embedscope.models import save_checkpoint
    from embedscope.saliency.run import saliency_to_file
    from embedscope.store.saliency import load_maps

    f = tmp_path / "ck.pt"
    cfg, model, ema = _digits_with_ema(f, seed=2)
    save_checkpoint(tmp_path / "ema_only.pt", ema, cfg)
    common = dict(n_images=3, n_samples=2, device="cpu", progress=False)
    saliency_to_file(f, "digits", tmp_path / "a.h5", ema=True, **common)
    saliency_to_file(tmp_path / "ema_only.pt", "digits", tmp_path / "b.h5", **common)
    saliency_to_file(f, "digits", tmp_path / "c.h5", **common)
    a, b, c = (load_maps(tmp_path / f"{k}.h5") for k in "abc")
    np.testing.assert_array_equal(a.maps, b.maps)
    assert not np.array_equal(a.maps, c.maps)
    assert a.attrs["checkpoint_config"]["weights_ema"] is True and "weights_ema" not in c.attrs["checkpoint_config"]
    with pytest.raises(EmbedscopeError, match=r"--ema: no EMA weights"):
        saliency_to_file(tmp_path / "ema_only.pt", "digits", tmp_path / "d.h5", ema=True, **common)


def test_saliency_cli_ema(tmp_path, capsys):
    """`saliency --ema` gives the maps of the EMA network (those of a checkpoint holding only the EMA
    tensors); a file without EMA weights is one line, exit 1, and writes nothing."""
    from embedscope.cli import main
    from embedscope.models import save_checkpoint
    from embedscope.store.saliency import load_maps

    f = tmp_path / "ck.pt"
    cfg, model, ema = _digits_with_ema(f, seed=3)
    save_checkpoint(tmp_path / "ema_only.pt", ema, cfg)
    common = ["--dataset", "digits", "--n-images", "3", "--n-samples", "2", "--device", "cpu", "--no-progress"]
    assert main(["saliency", str(f), *common, "--ema", "-o", str(tmp_path / "a.h5")]) == 0
    assert main(["saliency", str(tmp_path / "ema_only.pt"), *common, "-o", str(tmp_path / "b.h5")]) == 0
    np.testing.assert_array_equal(load_maps(tmp_path / "a.h5").maps, load_maps(tmp_path / "b.h5").maps)
    capsys.readouterr()
    assert main(["saliency", str(tmp_path / "ema_only.pt"), *common, "--ema", "-o", str(tmp_path / "c.h5")]) == 1
    err = capsys.readouterr().err.strip()
    assert "--ema: no EMA weights in the file" in err and "\n" not in err
    assert not (tmp_path / "c.h5").exists()


# --------------------------------------------------------------------------- train --weights --ema


def test_train_starts_from_the_ema_copy_of_weights(tmp_path, capsys):
    """`train --weights F --ema`: the run starts from F's EMA tensors (the untrained network saved by
    --epochs 0 holds them), without --ema from its state_dict; the config records weights_ema only when
    given; --ema without --weights and a resume that adds or drops it are usage errors (exit 2)."""
    from embedscope.cli import main
    from embedscope.models import read_checkpoint

    f = tmp_path / "w.pt"
    _, model, ema = _digits_with_ema(f, seed=4)
    common = ["train", "--dataset", "digits", "--weights", str(f), "--embed-dim", "8", "--epochs", "0",
              "--no-progress"]
    assert main([*common, "--ema", "-o", str(tmp_path / "e.pt")]) == 0
    assert main([*common, "-o", str(tmp_path / "p.pt")]) == 0
    for out, src, flag in (("e.pt", ema, True), ("p.pt", model, False)):
        ck = read_checkpoint(tmp_path / out)
        want = {k: v for k, v in src.state_dict().items() if k.startswith("backbone.")}
        assert want and all(torch.equal(ck["state_dict"][k], v) for k, v in want.items())
        assert ck["config"].get("weights_ema", False) is flag and ("weights_ema" in ck["config"]) == flag
    capsys.readouterr()
    assert main(["train", "--dataset", "digits", "--ema", "--epochs", "0", "-o", str(tmp_path / "x.pt")]) == 2
    assert "--ema takes the EMA copy of the --weights file: give --weights" in capsys.readouterr().err
    # a run saved without --ema cannot be resumed with it (the run would not be the one it continues)
    run = [*common[:-3], "--epochs", "1", "--eval-every", "0", "--no-progress", "-o", str(tmp_path / "r.pt")]
    assert main(run) == 0
    assert main([*run[:-3], "--epochs", "2", "--ema", "--resume", "-o", str(tmp_path / "r.pt")]) == 2
    assert "--ema (the run started from the --weights file's state_dict)" in capsys.readouterr().err


def test_weights_ema_settings_and_untrained_names():
    """A grid's settings: weights_ema is kept only when true, so a stored run without the key and a
    request without --ema are the same settings, and one with it is not; the untrained reference of a
    run without --ema keeps the name it had before the option existed."""
    import hashlib
    import json

    from embedscope.study.plan import _UNTRAINED_KEYS, untrained_key
    from embedscope.train.grid import settings_diff
    from embedscope.train.trainer import resolve_config

    plain = resolve_config({"dataset": "digits", "weights": "w.pt"})
    with_ema = resolve_config({"dataset": "digits", "weights": "w.pt", "weights_ema": True})
    assert "weights_ema" not in plain and with_ema["weights_ema"] is True
    assert resolve_config({"dataset": "digits", "weights": "w.pt", "weights_ema": False}) == plain
    with pytest.raises(UsageError, match="weights_ema must be true or false"):
        resolve_config({"dataset": "digits", "weights": "w.pt", "weights_ema": "yes"})
    assert settings_diff(plain, plain) == [] and settings_diff(with_ema, with_ema) == []
    assert settings_diff(plain, with_ema) == ["weights_ema: False -> True"]
    assert settings_diff(with_ema, plain) == ["weights_ema: True -> False"]
    core = {k: plain.get(k) for k in _UNTRAINED_KEYS}  # the name's formula before weights_ema existed
    h = hashlib.sha256(json.dumps(core, sort_keys=True, default=str).encode()).hexdigest()[:8]
    assert untrained_key(plain).endswith(h) and not untrained_key(with_ema).endswith(h)
