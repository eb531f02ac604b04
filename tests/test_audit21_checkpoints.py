"""`embedscope embed CKPT` with every kind of checkpoint the docs promise (docs/checkpoint.md), audit 21.

Each file is written here as the code base that makes it writes it (its keys, prefixes, pickled
option objects; random weights), and the embedding is compared with the network built directly in
PyTorch. Bad inputs go through the command line: one line on stderr, exit 1 (2 for usage errors),
no traceback unless --debug, strings from the file escaped, and a next step named.
"""

import argparse
import os
import sys
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_adapters import RothResNet
from test_audit_checkpoints import _randomise_bn
from torch import nn

from embedscope.cli import main
from embedscope.errors import EmbedscopeError, UsageError
from embedscope.models import build_model, default_config, load_checkpoint, load_model, read_checkpoint


def _run(args, capsys):
    """(exit code, stderr) of `embedscope ARGS` run in this process."""
    rc = main([str(a) for a in args])
    return rc, capsys.readouterr().err


def _one_line_error(rc, err, code=1):
    assert rc == code, err
    assert err.count("\n") == 1 and err.startswith("embedscope embed: error: "), err
    assert "Traceback" not in err
    return err


def _digits_ckpt(path, embed_dim=8, seed=0):
    from embedscope.models import save_checkpoint

    torch.manual_seed(seed)
    cfg = default_config("digits_cnn", embed_dim=embed_dim)
    model = build_model(cfg)
    save_checkpoint(path, model, cfg)
    return model, cfg


# --------------------------------------------------------------------------- Deep-Metric-Learning-Baselines

class _DMLBResNet50(RothResNet):
    """netlib.ResNet50 of Deep-Metric-Learning-Baselines: the layout of the 2020 code's (Cadene resnet50,
    torchvision's layout with the classifier named last_linear, layer_blocks), BatchNorm frozen, output
    normalised unless the loss is npair."""

    def __init__(self, dim, loss):
        super().__init__(dim)
        self.loss = loss

    def forward(self, x):
        z = self.features(x)
        return z if self.loss == "npair" else F.normalize(z, dim=-1)


class _DMLBGoogLeNet(nn.Module):
    """netlib.GoogLeNet: their copy of torchvision's GoogLeNet, fc renamed last_linear, run layer by
    layer (its transform_input is never applied); with --not_pretrained the aux heads stay in it."""

    def __init__(self, dim, pretrained):
        super().__init__()
        from torchvision.models import googlenet

        self.model = googlenet(weights=None, aux_logits=not pretrained, transform_input=pretrained, init_weights=True)
        del self.model.fc
        m = self.model
        self.layer_blocks = nn.ModuleList([m.inception3a, m.inception3b, m.maxpool3, m.inception4a, m.inception4b,
                                           m.inception4c, m.inception4d, m.inception4e, m.maxpool4, m.inception5a,
                                           m.inception5b, m.avgpool])
        self.model.last_linear = nn.Linear(1024, dim)

    def forward(self, x):
        m = self.model
        x = m.maxpool2(m.conv3(m.conv2(m.maxpool1(m.conv1(x)))))
        for b in self.layer_blocks:
            x = b(x)
        return F.normalize(m.last_linear(m.dropout(x.view(x.size(0), -1))), dim=-1)


def _save_dmlb(path, net, arch, loss, dim, not_pretrained=False):
    """Standard_Training.py's set_checkpoint: {'epoch', 'state_dict', 'opt', 'progress'}."""
    opt = argparse.Namespace(dataset="cub200", lr=1e-5, n_epochs=70, loss=loss, sampling="distance",
                             embed_dim=dim, arch=arch, not_pretrained=not_pretrained, tau=[30, 55],
                             k_vals=[1, 2, 4, 8], device=torch.device("cpu"), pretrained=not not_pretrained)
    torch.save({"epoch": 12, "state_dict": net.state_dict(), "opt": opt, "progress": {"Train": [0.5]}}, path)


@pytest.mark.parametrize("loss", ["marginloss", "npair"])
def test_dmlb_resnet50_normalised_unless_npair(tmp_path, loss):
    torch.manual_seed(0)
    net = _randomise_bn(_DMLBResNet50(16, loss)).eval()
    p = tmp_path / "checkpoint.pth.tar"
    _save_dmlb(p, net, "resnet50", loss, 16)
    model, cfg, info = load_checkpoint(p)
    assert cfg["normalize"] == (loss != "npair") and cfg["frozen_bn"] and cfg["image_size"] == 224
    # their code trains a frozen BatchNorm's scale and shift: a study or resume reads it so
    assert cfg["freeze_bn_affine"] is False and not model.freeze_bn_affine
    assert all(p.requires_grad for m in model.backbone.modules() if isinstance(m, nn.BatchNorm2d)
               for p in m.parameters())
    assert info["format"] == "Roth et al. Deep-Metric-Learning-Baselines checkpoint"
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), net(x))


@pytest.mark.parametrize("pretrained", [True, False])
def test_dmlb_googlenet_without_transform_input(tmp_path, pretrained):
    torch.manual_seed(1)
    net = _randomise_bn(_DMLBGoogLeNet(12, pretrained)).eval()
    assert any(k.startswith("model.aux1.") for k in net.state_dict()) == (not pretrained)
    p = tmp_path / "checkpoint.pth.tar"
    _save_dmlb(p, net, "googlenet", "triplet", 12, not_pretrained=not pretrained)
    model, cfg, _ = load_checkpoint(p)
    assert not cfg.get("transform_input") and cfg["image_size"] == 227 and cfg["normalize"]
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), net(x))


def test_revisiting_resnet50_still_reads_the_arch_name(tmp_path):
    """The 2020 code (a batch_mining option): plain 'resnet50' is an unnormalised network there."""
    torch.manual_seed(2)
    net = _randomise_bn(_DMLBResNet50(8, "npair")).eval()  # the same network, no normalisation
    p = tmp_path / "checkpoint_Test_discriminative_e_recall@1.pth.tar"
    opt = argparse.Namespace(arch="resnet50", embed_dim=8, loss="margin", batch_mining="distance",
                             dataset="cub200")
    torch.save({"state_dict": net.state_dict(), "opt": opt, "progress": None, "aux": None}, p)
    model, cfg, info = load_checkpoint(p)
    assert not cfg["normalize"] and not cfg["frozen_bn"] and info["format"] == "Roth et al. 2020 checkpoint"
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), net(x))


# --------------------------------------------------------------------------- --unsafe-pickle

def _missing_module_file(path, *, call):
    """A checkpoint holding an object of a module that exists only while it is saved (Roth et al.'s
    utilities.logger); with ``call`` the object is rebuilt by calling that module's function."""
    mod = types.ModuleType("audit21_gone")

    class Saver:
        def __init__(self):
            self.groups = {"Train": [0.5]}

    def rebuild():  # pragma: no cover - never importable when the file is read
        raise AssertionError

    class Called:
        def __reduce__(self):
            return (rebuild, ())

    for obj, name in ((Saver, "Saver"), (rebuild, "rebuild"), (Called, "Called")):
        obj.__module__, obj.__qualname__ = "audit21_gone", name
        setattr(mod, name, obj)
    sys.modules["audit21_gone"] = mod
    try:
        cfg = default_config("digits_cnn", embed_dim=8)
        torch.manual_seed(3)
        model = build_model(cfg)
        torch.save({"format": "embedscope-checkpoint", "format_version": 1, "state_dict": model.state_dict(),
                    "config": cfg, "extra": {"log": Called() if call else Saver()}}, path)
    finally:
        del sys.modules["audit21_gone"]
    return model


def test_unsafe_pickle_reads_a_file_whose_classes_are_not_installed(tmp_path, capsys):
    """--unsafe-pickle made such a file fail ('No module named ...') that loads without it."""
    p = tmp_path / "roth_like.pt"
    model = _missing_module_file(p, call=False)
    m2, _, _ = load_checkpoint(p, unsafe_pickle=True)
    x = torch.rand(3, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(m2(x), model.eval()(x))
    assert read_checkpoint(p, unsafe_pickle=True)["extra"]["log"].get("groups") == {"Train": [0.5]}
    rc, err = _run(["embed", p, "--dataset", "digits", "-o", tmp_path / "e.h5", "--no-progress",
                    "--unsafe-pickle"], capsys)
    assert rc == 0, err


def test_unsafe_pickle_file_that_needs_missing_code_is_one_line(tmp_path, capsys):
    p = tmp_path / "needs_code.pt"
    _missing_module_file(p, call=True)
    err = _one_line_error(*_run(["embed", p, "--dataset", "digits", "-o", tmp_path / "e.h5", "--no-progress",
                                 "--unsafe-pickle"], capsys))
    assert "--unsafe-pickle: unpickling it needs code that is not importable here" in err
    assert "audit21_gone" in err and "install the code base that wrote it" in err
    # without the flag: refused, as any file that asks to call code
    err = _one_line_error(*_run(["embed", p, "--dataset", "digits", "-o", tmp_path / "e.h5", "--no-progress"],
                                capsys))
    assert "refusing to load" in err and "audit21_gone.rebuild" in err


# --------------------------------------------------------------------------- which reader a dict goes to

def test_a_checkpoint_with_an_opt_key_is_not_taken_for_roth_et_al(tmp_path):
    """'opt' beside 'state_dict' sent any file to the Roth et al. reader ("architecture 'digits_cnn' is
    not one of Roth et al.'s ..."): an embedscope checkpoint with an 'opt', a training checkpoint whose
    'opt' is an optimiser state dict."""
    torch.manual_seed(4)
    cfg = default_config("digits_cnn", embed_dim=8)
    model = build_model(cfg).eval()
    optimiser = torch.optim.Adam(model.parameters())
    files = {
        "format": {"format": "embedscope-checkpoint", "format_version": 1, "state_dict": model.state_dict(),
                   "config": cfg, "opt": argparse.Namespace(lr=0.1)},
        "optimiser": {"state_dict": model.state_dict(), "config": cfg, "opt": optimiser.state_dict(), "epoch": 3},
    }
    x = torch.rand(2, 1, 8, 8)
    for name, obj in files.items():
        torch.save(obj, tmp_path / f"{name}.pt")
        m2, cfg2, info = load_checkpoint(tmp_path / f"{name}.pt")
        assert info["format"] == "embedscope" and cfg2["arch"] == "digits_cnn"
        with torch.no_grad():
            torch.testing.assert_close(m2(x), model(x))


# --------------------------------------------------------------------------- partial and ambiguous state dicts

def test_weights_that_do_not_fit_name_every_problem(tmp_path, capsys):
    """A shape mismatch hid the missing/unexpected keys, and torch's text was cut before the model's shape."""
    _digits_ckpt(tmp_path / "d.pt")
    err = _one_line_error(*_run(["embed", tmp_path / "d.pt", "--arch", "shapes_cnn", "--dataset", "digits",
                                 "-o", tmp_path / "e.h5", "--no-progress"], capsys))
    assert "weights do not fit a shapes_cnn model (missing " in err and "unexpected " in err
    assert "size mismatch for backbone.features.0.weight: file [32, 1, 3, 3], model [32, 3, 3, 3] (+3 more)" in err
    assert "the file's config names digits_cnn, which --arch shapes_cnn replaced" in err
    # one wrong tensor: both shapes in full
    sd = torch.load(tmp_path / "d.pt", weights_only=True)["state_dict"]
    sd["backbone.features.0.weight"] = torch.zeros(5, 1, 3, 3)
    torch.save(sd, tmp_path / "bad.pt")
    err = _one_line_error(*_run(["embed", tmp_path / "bad.pt", "--arch", "digits_cnn", "--dataset", "digits",
                                 "-o", tmp_path / "e.h5", "--no-progress"], capsys))
    assert err.rstrip().endswith("(size mismatch for backbone.features.0.weight: file [5, 1, 3, 3], "
                                 "model [32, 1, 3, 3])")
    # --debug: the traceback
    with pytest.raises(EmbedscopeError, match="size mismatch"):
        main(["embed", str(tmp_path / "bad.pt"), "--arch", "digits_cnn", "--dataset", "digits",
              "-o", str(tmp_path / "e.h5"), "--no-progress", "--debug"])


def test_a_missing_head_weight_is_named(tmp_path, capsys):
    """Without head.weight the size fell back to 128, and the error was head.bias's shape ([8] vs [128])."""
    _digits_ckpt(tmp_path / "d.pt")
    sd = torch.load(tmp_path / "d.pt", weights_only=True)["state_dict"]
    del sd["head.weight"]
    torch.save(sd, tmp_path / "nohead.pt")
    err = _one_line_error(*_run(["embed", tmp_path / "nohead.pt", "--arch", "digits_cnn", "--dataset", "digits",
                                 "-o", tmp_path / "e.h5", "--no-progress"], capsys))
    assert err.rstrip().endswith("weights do not fit a digits_cnn model (missing 1 key(s) e.g. head.weight)")


def test_unexpected_key_from_the_file_is_escaped(tmp_path, capsys):
    _digits_ckpt(tmp_path / "d.pt")
    sd = torch.load(tmp_path / "d.pt", weights_only=True)["state_dict"]
    sd["head.\x1b[2Jx"] = torch.zeros(1)
    torch.save(sd, tmp_path / "esc.pt")
    err = _one_line_error(*_run(["embed", tmp_path / "esc.pt", "--arch", "digits_cnn", "--dataset", "digits",
                                 "-o", tmp_path / "e.h5", "--no-progress"], capsys))
    assert "\x1b" not in err and "unexpected 1 key(s) e.g. head.\\x1b[2Jx" in err


def test_embed_dim_or_head_seed_with_a_checkpoint_is_a_usage_error(tmp_path, capsys):
    """It was passed on to the model: another size than the file's was a shape mismatch (exit 1), the
    same size silently did nothing; with --trunk/--embedder it was ignored."""
    _digits_ckpt(tmp_path / "d.pt")
    for extra in (["--embed-dim", "16"], ["--embed-dim", "8"], ["--head-seed", "3"], ["--head-seed", "0"]):
        err = _one_line_error(*_run(["embed", tmp_path / "d.pt", *extra, "--dataset", "digits",
                                     "-o", tmp_path / "e.h5", "--no-progress"], capsys), code=2)
        assert f"{extra[0]} sets --head random's head; a checkpoint embeds with its own head" in err
    with pytest.raises(UsageError, match="--embed-dim"):
        load_model(trunk=tmp_path / "d.pt", embedder=tmp_path / "d.pt", embed_dim=4)
    with pytest.raises(UsageError, match="--head-seed"):
        load_model(trunk=tmp_path / "d.pt", embedder=tmp_path / "d.pt", head_seed=0)
    # without --weights the seed draws the backbone too (session 37: it came from torch's global generator)
    n1, ncfg, _ = load_model(arch="resnet18", head="none", head_seed=1)
    n1b, _, _ = load_model(arch="resnet18", head="none", head_seed=1)
    n0, _, _ = load_model(arch="resnet18", head="none")
    assert ncfg["backbone_seed"] == 1
    w1, w1b, w0 = (next(m.backbone.parameters()) for m in (n1, n1b, n0))
    assert torch.equal(w1, w1b) and not torch.equal(w1, w0)
    # the default seed is 0: no --head-seed and --head-seed 0 draw the same head
    a, cfg, _ = load_model(arch="resnet18", head="random", embed_dim=4)
    b, _, _ = load_model(arch="resnet18", head="random", embed_dim=4, head_seed=0)
    assert cfg["head_seed"] == 0 and torch.equal(a.head.weight, b.head.weight)
    assert not (tmp_path / "e.h5").exists()


# --------------------------------------------------------------------------- other code bases' files as the checkpoint

def test_torchvision_file_as_the_checkpoint_says_how_to_embed_it(tmp_path, capsys):
    """It asked for --arch; given --arch, it then said to use --weights: now the one command at once."""
    from torchvision.models import resnet18

    torch.manual_seed(5)
    net = _randomise_bn(resnet18(weights=None)).eval()
    f = tmp_path / "resnet18-f37072fd.pth"
    torch.save(net.state_dict(), f)
    for extra in ([], ["--arch", "resnet18"]):
        err = _one_line_error(*_run(["embed", f, *extra, "--dataset", "digits", "-o", tmp_path / "e.h5",
                                     "--no-progress"], capsys))
        assert f"--arch resnet18 --weights {f} --head none (or --head random" in err, err  # (runs as shown)
    model, _, _ = load_model(arch="resnet18", weights=f, head="none")  # what it says works
    net.fc = nn.Identity()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), F.normalize(net(x), dim=1))


def test_timm_training_checkpoint_as_the_checkpoint_names_timm(tmp_path, capsys):
    f = tmp_path / "model_best.pth.tar"
    torch.save({"epoch": 3, "arch": "convnext_\x1b[31matto", "state_dict": {"stem.0.weight": torch.zeros(2, 3, 4, 4)},
                "args": argparse.Namespace(model="convnext_atto"), "version": 2}, f)
    err = _one_line_error(*_run(["embed", f, "--dataset", "digits", "-o", tmp_path / "e.h5", "--no-progress"],
                                capsys))
    # (quoted for a shell as shown: bash's $'...' reads the escape back, audit 43)
    assert "timm training checkpoint" in err and "--arch $'timm:convnext_\\x1b[31matto' --weights" in err
    assert "\x1b" not in err


def test_timm_missing_names_the_install_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)
    err = _one_line_error(*_run(["embed", "--arch", "timm:resnet18", "--dataset", "digits", "-o", tmp_path / "e.h5",
                                 "--no-progress"], capsys))
    assert err.rstrip().endswith("timm:resnet18 needs the optional timm package: pip install 'embedscope[timm]'")


def test_an_embedscope_model_given_as_trunk_says_so(tmp_path, capsys):
    _digits_ckpt(tmp_path / "d.pt")
    err = _one_line_error(*_run(["embed", "--trunk", tmp_path / "d.pt", "--embedder", tmp_path / "d.pt",
                                 "--dataset", "digits", "-o", tmp_path / "e.h5", "--no-progress"], capsys))
    assert "holds a whole embedscope model" in err and "give it as the checkpoint" in err


class _PMLMLP(nn.Module):
    """pytorch-metric-learning's examples' MLP: a ReLU before every linear layer but the last."""

    def __init__(self, layer_sizes, final_relu=False):
        super().__init__()
        layers = []
        n = len(layer_sizes) - 1
        for i in range(n):
            if i < (n if final_relu else n - 1):
                layers.append(nn.ReLU(inplace=False))
            layers.append(nn.Linear(layer_sizes[i], layer_sizes[i + 1]))
        self.net = nn.Sequential(*layers)
        self.last_linear = self.net[-1]

    def forward(self, x):
        return self.net(x)


def test_pml_saved_models_folder_with_dataparallel_files(tmp_path, capsys):
    """HookContainer.save_models -> c_f.save_model: state dicts named <model>_best<epoch>.pth; files of
    an older version were saved with DataParallel's module. prefix. The best pair with the largest epoch."""
    from torchvision.models import resnet18

    from embedscope import store

    torch.manual_seed(6)
    trunk = _randomise_bn(resnet18(weights=None))
    trunk.fc = nn.Identity()
    emb = _PMLMLP([512, 32, 8])
    folder = tmp_path / "saved_models"
    folder.mkdir()
    torch.save(nn.DataParallel(trunk).state_dict(), folder / "trunk_best7.pth")
    torch.save(nn.DataParallel(emb).state_dict(), folder / "embedder_best7.pth")
    torch.save(resnet18(weights=None).state_dict(), folder / "trunk_best2.pth")  # an older best: not used
    torch.save(_PMLMLP([512, 8]).state_dict(), folder / "embedder_best2.pth")
    torch.save(trunk.state_dict(), folder / "trunk_9.pth")  # a latest-epoch file without its embedder
    model, cfg, info = load_model(folder)
    assert info["trunk"].endswith("trunk_best7.pth") and cfg["head_layers"] == ["relu", [512, 32], [32, 8]]
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), F.normalize(emb(trunk.eval()(x)), dim=1))
    # through the command line, on photos: the file records the trunk's path
    from PIL import Image

    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        (tmp_path / "photos" / cls).mkdir(parents=True)
        for k in range(2):
            Image.fromarray(rng.integers(0, 255, (36, 40, 3), dtype=np.uint8)).save(tmp_path / "photos" / cls / f"{k}.png")
    rc, err = _run(["embed", folder, "--dataset", "imagefolder", "--root", tmp_path / "photos", "-o",
                    tmp_path / "p.h5", "--no-progress", "--image-size", "64"], capsys)
    assert rc == 0, err
    es = store.load(tmp_path / "p.h5")
    assert es.attrs["checkpoint"] == str((folder / "trunk_best7.pth").resolve())


def test_a_checkpoint_path_with_a_plus_is_recorded_whole(tmp_path, capsys):
    """The recorded path was split on ' + ' (the separator of a trunk/embedder pair): 'run + aug.pt' -> 'run'."""
    from embedscope import store

    _digits_ckpt(tmp_path / "run + aug.pt")
    rc, err = _run(["embed", tmp_path / "run + aug.pt", "--dataset", "digits", "-o", tmp_path / "e.h5",
                    "--no-progress"], capsys)
    assert rc == 0, err
    assert store.load(tmp_path / "e.h5").attrs["checkpoint"] == str((tmp_path / "run + aug.pt").resolve())


# --------------------------------------------------------------------------- files that are not checkpoints

class _Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("kind,message", [
    ("text", "not a PyTorch checkpoint (neither torch.save's zip format nor its legacy format)"),
    ("empty", "not a PyTorch checkpoint (the file is empty)"),
    ("truncated", "not a PyTorch checkpoint (a damaged or truncated zip archive)"),
    ("folder", "no trunk_best<N>.pth / embedder_best<N>.pth pair"),
    ("absent", "no such checkpoint file"),
    ("payload", "refusing to load: unpickling it would call posix.system(...)"),
    ("payload_legacy", "refusing to load: unpickling it would call posix.system(...)"),
])
def test_not_a_checkpoint_through_the_command_line(tmp_path, capsys, kind, message):
    marker = tmp_path / "PWNED"
    f = tmp_path / f"{kind}.pt"
    if kind == "text":
        f.write_text("hello\n")
    elif kind == "empty":
        f.write_bytes(b"")
    elif kind == "truncated":
        _digits_ckpt(tmp_path / "ok.pt")
        data = (tmp_path / "ok.pt").read_bytes()
        f.write_bytes(data[: len(data) // 2])
    elif kind == "folder":
        f.mkdir()
    elif kind.startswith("payload"):
        if os.name != "posix":  # pragma: no cover
            pytest.skip("os.system pickles as posix.system here")
        torch.save({"state_dict": {"w": torch.zeros(1)}, "config": {"arch": "digits_cnn"}, "x": _Payload(marker)}, f,
                   _use_new_zipfile_serialization=kind == "payload")
    err = _one_line_error(*_run(["embed", f, "--dataset", "digits", "-o", tmp_path / "e.h5", "--no-progress"], capsys))
    assert message in err
    assert not marker.exists() and not (tmp_path / "e.h5").exists()
    if kind.startswith("payload"):
        assert "pass --unsafe-pickle only if you trust its source" in err


def test_whole_pickled_model_with_a_class_not_installed_under_unsafe_pickle(tmp_path):
    """With --unsafe-pickle the file failed on the import ('not a readable PyTorch checkpoint (ModuleNotFoundError
    ...'); read inertly it must not then ask for --unsafe-pickle, which was given."""
    mod = types.ModuleType("audit21_gone2")

    class Scale(nn.Module):
        def forward(self, x):
            return 2 * x

    Scale.__module__, Scale.__qualname__ = "audit21_gone2", "Scale"
    mod.Scale = Scale
    sys.modules["audit21_gone2"] = mod
    try:
        model = build_model(default_config("digits_cnn", embed_dim=4))
        model.head = nn.Sequential(model.head, Scale())
        torch.save(model, tmp_path / "whole.pt")
    finally:
        del sys.modules["audit21_gone2"]
    with pytest.raises(EmbedscopeError, match="does not unpickle here even with --unsafe-pickle") as e:
        load_checkpoint(tmp_path / "whole.pt", unsafe_pickle=True)
    assert "\n" not in str(e.value)
    with pytest.raises(EmbedscopeError, match="restored only by unpickling it with --unsafe-pickle"):
        load_checkpoint(tmp_path / "whole.pt")
