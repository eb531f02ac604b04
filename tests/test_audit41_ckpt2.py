"""Audit 41, second reading: checkpoints made elsewhere, brought to ``embedscope embed``.

What was wrong before:

- a state dict whose values are numpy arrays said "no tensors found" (``--weights``) or "state dict entry
  'conv1.weight' is a _reconstruct, not a tensor" (``--trunk``), not that they are numpy arrays.
- ``--trunk`` did not read a network under one key prefix (``net.*`` beside ``loss_fn.W``) as ``--weights``
  does; so the advice of ``--weights`` for such a file ending in an embedding layer (give it as ``--trunk``)
  failed.
- two prefixes that each hold the whole backbone (teacher/student, model/model_ema) were refused with
  "missing 100 key(s) ... unexpected 241 key(s)", not naming them.
- ``--weights`` of an embedscope model's bare state dict left its ``head.*`` (a trained embedding layer)
  out without a word.
- weights under both ``model_state_dict`` and ``model``: three unrelated errors, none naming the two keys.
- one file of ``{'trunk', 'embedder'}`` given to ``--weights``: "no tensors found (keys: trunk, embedder)".
"""

from __future__ import annotations

import numpy as np
import pytest
import test_audit41_ckpt as first
import torch
import torchvision
from cli_run import one_error_line
from test_audit41_ckpt import MEAN, SIZE, STD, _embed, _read, _reference  # noqa: F401

# the images, weights, command and independent forward pass of the first reading's tests
images, resnet18_sd = first.images, first.resnet18_sd  # (its module-scoped fixtures, shared)


def test_a_state_dict_of_numpy_arrays_is_said_to_be_one(tmp_path, images, resnet18_sd):
    ckpt = tmp_path / "np.pth"
    torch.save({k: v.numpy() for k, v in resnet18_sd.items()}, ckpt)
    rc, _, err = _embed(images, tmp_path / "x.h5", "--arch", "resnet18", "--weights", ckpt)
    assert rc == 1
    line = one_error_line(err, "embed")
    assert "numpy arrays" in line and "torch.from_numpy" in line
    torch.save(torch.nn.Linear(512, 8).state_dict(), tmp_path / "emb.pth")
    rc, _, err = _embed(images, tmp_path / "y.h5", "--trunk", ckpt, "--embedder", tmp_path / "emb.pth")
    assert rc == 1
    line = one_error_line(err, "embed")
    assert "is a numpy array, not a tensor" in line and "torch.from_numpy" in line


def test_trunk_of_a_lightning_module_beside_its_loss(tmp_path, images, resnet18_sd):
    """``--trunk`` reads the network under its one prefix as ``--weights`` does (was "cannot tell the trunk's
    architecture from its keys (found loss_fn.W, net.bn1.bias, ...)", with --arch "missing 100 key(s)")."""
    trunk_sd = {k: v for k, v in resnet18_sd.items() if not k.startswith("fc.")}
    ckpt = tmp_path / "epoch=3-step=10.ckpt"
    torch.save({"epoch": 3, "pytorch-lightning_version": "2.1.0",
                "state_dict": {**{"net." + k: v for k, v in trunk_sd.items()}, "loss_fn.W": torch.zeros(512, 5)}},
               ckpt)
    torch.manual_seed(1)
    emb = torch.nn.Linear(512, 16)
    torch.save(emb.state_dict(), tmp_path / "embedder.pth")
    for arch in ((), ("--arch", "resnet18")):
        out = tmp_path / f"e{len(arch)}.h5"
        rc, _, err = _embed(images, out, *arch, "--trunk", ckpt, "--embedder", tmp_path / "embedder.pth")
        assert rc == 0, err
        assert "'net.*' keys" in err and "loss_fn.W" in err and len(err.strip().splitlines()) == 1
        X, paths, _ = _read(out)
        np.testing.assert_allclose(X, _reference(images, paths, resnet18_sd, emb), atol=1e-5)
    two = tmp_path / "two.ckpt"  # two networks that fit: which one is not guessed
    torch.save({"state_dict": {**{"a." + k: v for k, v in trunk_sd.items()},
                               **{"b." + k: v for k, v in trunk_sd.items()}}}, two)
    rc, _, err = _embed(images, tmp_path / "x.h5", "--arch", "resnet18", "--trunk", two, "--embedder",
                        tmp_path / "embedder.pth")
    assert rc == 1


@pytest.mark.parametrize("flag", ["--weights", "--trunk"])
def test_two_fitting_prefixes_are_named(tmp_path, images, resnet18_sd, flag):
    """A teacher and a student of the same architecture (or a network and its EMA copy) each hold the whole
    backbone: none is guessed, and the line says why (was "missing 100 key(s) e.g. conv1.weight; unexpected
    244 key(s) e.g. student.conv1.weight", not naming the two networks)."""
    sd = {k: v for k, v in resnet18_sd.items() if not k.startswith("fc.")}
    ckpt = tmp_path / "distill.ckpt"
    torch.save({"state_dict": {**{"student." + k: v for k, v in sd.items()},
                               **{"teacher." + k: v + 1 for k, v in sd.items()}, "loss.T": torch.ones(1)}}, ckpt)
    torch.save(torch.nn.Linear(512, 8).state_dict(), tmp_path / "emb.pth")
    args = ["--weights", ckpt] if flag == "--weights" else ["--trunk", ckpt, "--embedder", tmp_path / "emb.pth"]
    rc, _, err = _embed(images, tmp_path / "x.h5", "--arch", "resnet18", *args)
    assert rc == 1
    line = one_error_line(err, "embed")
    assert "'student.*', 'teacher.*'" in line and "not guessed" in line
    assert "k.startswith('student.')" in line and "k[8:]" in line


def test_weights_of_an_embedscope_model_says_its_head_is_left_out(tmp_path, images, resnet18_sd):
    """A bare state dict of an embedscope model (``backbone.*`` beside ``head.*``, its trained embedding
    layer) given to ``--weights``: the head was left out without a word (a trained fc of another size than
    an ImageNet classifier's is named, DroppedLayerWarning); the warning's advice embeds with the head."""
    from embedscope.models.backbones import build_model, default_config

    torch.manual_seed(2)
    m = build_model(default_config("resnet18", embed_dim=16, frozen_bn=False))
    m.backbone.load_state_dict({k: v for k, v in resnet18_sd.items() if not k.startswith("fc.")}, strict=False)
    sd = m.state_dict()
    assert {k for k in sd if not k.startswith("backbone.")} == {"head.weight", "head.bias"}
    ckpt = tmp_path / "model.pt"
    torch.save(sd, ckpt)
    rc, _, err = _embed(images, tmp_path / "w.h5", "--arch", "resnet18", "--weights", ckpt, "--head", "none")
    assert rc == 0, err
    assert "head.weight, head.bias" in err and "--arch resnet18" in err and len(err.strip().splitlines()) == 1
    X, paths, _ = _read(tmp_path / "w.h5")
    np.testing.assert_allclose(X, _reference(images, paths, resnet18_sd), atol=1e-5)
    out = tmp_path / "e.h5"  # what the warning says to do
    rc, _, err = _embed(images, out, "--arch", "resnet18", ckpt)
    assert rc == 0, err
    head = torch.nn.Linear(512, 16)
    head.load_state_dict({"weight": sd["head.weight"], "bias": sd["head.bias"]})
    X, paths, _ = _read(out)
    np.testing.assert_allclose(X, _reference(images, paths, resnet18_sd, head), atol=1e-5)


@pytest.mark.parametrize("how", ["weights", "trunk", "checkpoint"])
def test_weights_under_both_model_and_model_state_dict_are_not_guessed(tmp_path, images, resnet18_sd, how):
    """A file holding weights under both 'model_state_dict' and 'model' (two copies, which one is the
    model?): one line naming both (was "no tensors found (keys: model, model_state_dict)", "state dict entry
    'model' is a OrderedDict, not a tensor" or "unknown checkpoint layout")."""
    sd = {k: v for k, v in resnet18_sd.items() if not k.startswith("fc.")}
    ckpt = tmp_path / "ckpt.pt"
    torch.save({"model_state_dict": sd, "model": {k: v + 1 for k, v in sd.items()}, "epoch": 1}, ckpt)
    torch.save(torch.nn.Linear(512, 8).state_dict(), tmp_path / "emb.pth")
    args = {"weights": ["--arch", "resnet18", "--weights", ckpt], "checkpoint": ["--arch", "resnet18", ckpt],
            "trunk": ["--trunk", ckpt, "--embedder", tmp_path / "emb.pth"]}[how]
    rc, _, err = _embed(images, tmp_path / "x.h5", *args)
    assert rc == 1
    line = one_error_line(err, "embed")
    assert "both 'model_state_dict' and 'model'" in line and "not guessed" in line


def test_state_dict_beside_model_is_read_and_named(tmp_path, images, resnet18_sd):
    """'state_dict' beside 'model': 'state_dict' is read, always, and checkpoint_format says so."""
    ckpt = tmp_path / "ckpt.pt"
    torch.save({"model": {k: v + 1 for k, v in resnet18_sd.items()}, "state_dict": resnet18_sd}, ckpt)
    out = tmp_path / "e.h5"
    rc, _, err = _embed(images, out, "--arch", "resnet18", "--weights", ckpt)
    assert rc == 0, err
    X, paths, s = _read(out)
    np.testing.assert_allclose(X, _reference(images, paths, resnet18_sd), atol=1e-5)
    assert s.attrs["checkpoint_format"] == "backbone weights from a training checkpoint (state_dict)"


def test_a_state_dict_of_none_beside_model_reads_model(tmp_path, images, resnet18_sd):
    """{'state_dict': None, 'model': sd} (a script that saves a state dict it may not have): 'model' is read
    (was "expected a state dict of backbone weights, got NoneType")."""
    ckpt = tmp_path / "ckpt.pt"
    torch.save({"state_dict": None, "model": resnet18_sd}, ckpt)
    out = tmp_path / "e.h5"
    rc, _, err = _embed(images, out, "--arch", "resnet18", "--weights", ckpt)
    assert rc == 0, err
    X, paths, s = _read(out)
    np.testing.assert_allclose(X, _reference(images, paths, resnet18_sd), atol=1e-5)
    assert s.attrs["checkpoint_format"] == "backbone weights from a training checkpoint (model)"


def test_a_pml_pair_given_to_weights_says_to_give_it_as_the_checkpoint(tmp_path, images, resnet18_sd):
    """One file of {'trunk', 'embedder'} given to --weights (was "no tensors found (keys: trunk, embedder)");
    the advice works."""
    trunk = {k: v for k, v in resnet18_sd.items() if not k.startswith("fc.")}
    torch.manual_seed(3)
    emb = torch.nn.Linear(512, 8)
    ckpt = tmp_path / "pair.pth"
    torch.save({"trunk": trunk, "embedder": emb.state_dict()}, ckpt)
    rc, _, err = _embed(images, tmp_path / "x.h5", "--arch", "resnet18", "--weights", ckpt)
    assert rc == 1
    line = one_error_line(err, "embed")
    assert "'trunk', 'embedder'" in line and "give it as the checkpoint, without --weights" in line
    out = tmp_path / "e.h5"
    rc, _, err = _embed(images, out, ckpt)
    assert rc == 0, err
    X, paths, _ = _read(out)
    np.testing.assert_allclose(X, _reference(images, paths, resnet18_sd, emb), atol=1e-5)


def test_an_averaged_model_with_buffers_reads_its_averaged_buffers(tmp_path, images, resnet18_sd):
    """An AveragedModel(use_buffers=True) (an EMA that averages BatchNorm's running stats too) as --weights
    (alone, or as model_ema with --ema): its averaged buffers are the ones used, not the model's."""
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    torch.manual_seed(4)
    net = torchvision.models.resnet18()
    net.load_state_dict(resnet18_sd)
    ema = AveragedModel(net, multi_avg_fn=get_ema_multi_avg_fn(0.5), use_buffers=True)
    net.train()
    for _ in range(2):
        with torch.no_grad():
            for p in net.parameters():
                p.add_(torch.randn_like(p) * 0.05)
            net(torch.randn(4, 3, 32, 32))
        ema.update_parameters(net)
    ema_sd = {k[len("module."):]: v for k, v in ema.state_dict().items() if k.startswith("module.")}
    assert not torch.equal(ema_sd["bn1.running_mean"], resnet18_sd["bn1.running_mean"])
    assert not torch.equal(ema_sd["bn1.running_mean"], net.state_dict()["bn1.running_mean"])
    ckpt = tmp_path / "checkpoint.pth"
    torch.save({"model": net.state_dict(), "model_ema": ema.state_dict(), "epoch": 2}, ckpt)
    swa = tmp_path / "swa.pth"
    torch.save(ema.state_dict(), swa)
    ref = None
    for i, args in enumerate((["--arch", "resnet18", "--weights", ckpt, "--ema"], ["--arch", "resnet18", "--weights", swa])):
        out = tmp_path / f"e{i}.h5"
        rc, _, err = _embed(images, out, *args)
        assert rc == 0, err
        X, paths, _ = _read(out)
        ref = _reference(images, paths, ema_sd) if ref is None else ref
        np.testing.assert_allclose(X, ref, atol=1e-5)


def test_the_keep_layer_hint_of_a_prefixed_file_works(tmp_path, images, resnet18_sd):
    """--weights of a Lightning file whose network ends in an embedding layer (net.fc 512 -> 16) says to give
    the file as --trunk with an empty embedder to keep that layer; that --trunk failed on the 'net.*' keys."""
    torch.manual_seed(5)
    fc = torch.nn.Linear(512, 16)
    sd = {**{k: v for k, v in resnet18_sd.items() if not k.startswith("fc.")},
          **{"fc." + k: v for k, v in fc.state_dict().items()}}
    ckpt = tmp_path / "last.ckpt"
    torch.save({"state_dict": {**{"net." + k: v for k, v in sd.items()}, "loss_fn.W": torch.zeros(16, 5)}}, ckpt)
    rc, _, err = _embed(images, tmp_path / "w.h5", "--arch", "resnet18", "--weights", ckpt)
    assert rc == 0, err
    assert f"give the file as --trunk {ckpt} with an empty --embedder" in err
    torch.save({}, tmp_path / "identity.pth")
    out = tmp_path / "e.h5"
    rc, _, err = _embed(images, out, "--trunk", ckpt, "--embedder", tmp_path / "identity.pth")
    assert rc == 0, err
    X, paths, _ = _read(out)
    np.testing.assert_allclose(X, _reference(images, paths, resnet18_sd, fc), atol=1e-5)
