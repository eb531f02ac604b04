"""Audit 42: which part of which file a model was loaded from, and in what precision.

What was wrong before:

- ``--trunk`` read a network under one key prefix (``net.*`` beside ``loss_fn.W``), numbered as an
  ``nn.Sequential`` or under ``model`` / ``state_dict``, but the file's ``checkpoint_format`` said only
  "pytorch-metric-learning trunk+embedder" (``--weights`` records "(its 'net.*' keys)"; docs/checkpoint.md
  said the numbered trunk was recorded).
- float16 / bfloat16 weights were upcast to float32 without a word.
- ``--weights`` took the ``backbone.*`` keys of any file having some: beside keys that held the whole
  backbone too it read one of the two networks and called the other "an embedscope model's head"; a
  loss's weights beside ``backbone.*`` were called so too.
- a file holding every tensor of the model plus a custom head was refused naming one key, with nothing
  on what to do.
- an EMA copy of the parameters only (no BatchNorm statistics) was left out (correctly: the network is
  read whole from the other prefix) without saying why; given to ``--ema``: "missing 40 key(s)" only.
- a checkpoint's EMA copy read with ``--ema`` was recorded as "training checkpoint ('state_dict')".
- a whole embedscope model pickled in half precision (``--unsafe-pickle``) failed to embed: "Input type
  (float) and bias type (c10::Half) should be the same".
- an embedscope model kept under one prefix beside other weights (a Lightning module's ``model.backbone.*``,
  ``model.head.*``, ``loss.W``) given as the checkpoint: "unknown key layout", advising ``--weights`` (which
  leaves the head out); ``--weights`` and ``--trunk`` read such a prefix.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import test_audit41_ckpt as first
import torch
import torchvision
from cli_run import one_error_line
from test_audit41_ckpt import _embed, _read, _reference

from embedscope.errors import EmbedscopeError
from embedscope.models import load_checkpoint, load_model
from embedscope.models.backbones import build_model, default_config

# the images, weights, command and independent forward pass of audit 41's tests
images, resnet18_sd = first.images, first.resnet18_sd  # (its module-scoped fixtures, shared)


def _trunk(sd):
    return {k: v for k, v in sd.items() if not k.startswith("fc.")}


def _warning_lines(err):
    return [ln for ln in err.strip().splitlines() if ln.strip()]


# --------------------------------------------------------------------------- 1. --trunk records what it read

def test_trunk_under_a_prefix_is_recorded(tmp_path, images, resnet18_sd):
    ckpt = tmp_path / "epoch=3.ckpt"
    torch.save({"epoch": 3, "state_dict": {**{"net." + k: v for k, v in _trunk(resnet18_sd).items()},
                                           "loss_fn.W": torch.zeros(512, 5)}}, ckpt)
    torch.manual_seed(1)
    emb = torch.nn.Linear(512, 16)
    torch.save(emb.state_dict(), tmp_path / "embedder.pth")
    out = tmp_path / "e.h5"
    rc, _, err = _embed(images, out, "--trunk", ckpt, "--embedder", tmp_path / "embedder.pth")
    assert rc == 0, err
    X, paths, s = _read(out)
    np.testing.assert_allclose(X, _reference(images, paths, resnet18_sd, emb), atol=1e-5)
    assert s.attrs["checkpoint_format"] == ("pytorch-metric-learning trunk+embedder (the trunk's 'net.*' keys "
                                            "under 'state_dict')")


def test_trunk_numbered_or_under_a_key_is_recorded(tmp_path, resnet18_sd):
    torch.save({}, tmp_path / "id.pth")
    net = torchvision.models.resnet18()
    net.load_state_dict(resnet18_sd)
    torch.save(torch.nn.Sequential(*list(net.children())[:-1]).state_dict(), tmp_path / "seq.pth")
    info = load_model(trunk=tmp_path / "seq.pth", embedder=tmp_path / "id.pth")[2]
    assert info["format"].endswith("(the trunk numbered as an nn.Sequential of the model's children)")
    torch.save({"model": _trunk(resnet18_sd), "optimizer": {}, "epoch": 1}, tmp_path / "ref.pth")
    torch.save({"state_dict": torch.nn.Linear(512, 4).state_dict()}, tmp_path / "emb.pth")
    info = load_model(trunk=tmp_path / "ref.pth", embedder=tmp_path / "emb.pth")[2]
    assert info["format"] == ("pytorch-metric-learning trunk+embedder (the trunk under 'model', the embedder "
                              "under 'state_dict')")
    # one file of both: the same words after its own
    torch.save({"trunk": {"net." + k: v for k, v in _trunk(resnet18_sd).items()}, "embedder": {}},
               tmp_path / "pair.pth")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = load_checkpoint(tmp_path / "pair.pth")[2]
    assert info["format"] == ("pytorch-metric-learning trunk+embedder (one file: 'trunk', 'embedder') "
                              "(the trunk's 'net.*' keys)")
    # a plain pair: as before
    torch.save(_trunk(resnet18_sd), tmp_path / "t.pth")
    assert load_model(trunk=tmp_path / "t.pth", embedder=tmp_path / "id.pth")[2]["format"] == \
        "pytorch-metric-learning trunk+embedder"


# --------------------------------------------------------------------------- 2. half precision is said

def test_float16_weights_are_said_to_be_upcast(tmp_path, images, resnet18_sd):
    half = {k: (v.half() if v.is_floating_point() else v) for k, v in resnet18_sd.items()}
    torch.save(half, tmp_path / "h.pth")
    out = tmp_path / "e.h5"
    rc, _, err = _embed(images, out, "--arch", "resnet18", "--weights", tmp_path / "h.pth")
    assert rc == 0, err
    lines = _warning_lines(err)
    assert len(lines) == 1 and lines[0].startswith("embedscope embed: warning: ")
    assert "its weights are float16: upcast to float32" in lines[0]
    X, paths, s = _read(out)
    assert s.attrs["checkpoint_format"] == ("backbone weights from a torchvision state dict (float16 weights, "
                                            "upcast to float32)")
    upcast = {k: v.float() if v.is_floating_point() else v for k, v in half.items()}
    np.testing.assert_allclose(X, _reference(images, paths, upcast), atol=1e-5)
    # float32 weights: no word, nothing recorded
    torch.save(resnet18_sd, tmp_path / "f.pth")
    rc, _, err = _embed(images, tmp_path / "f.h5", "--arch", "resnet18", "--weights", tmp_path / "f.pth")
    assert rc == 0 and not err.strip(), err
    assert _read(tmp_path / "f.h5")[2].attrs["checkpoint_format"] == "backbone weights from a torchvision state dict"


def test_bfloat16_checkpoint_and_half_pair_warn_once(tmp_path, resnet18_sd):
    from embedscope.models.checkpoint import PrecisionWarning

    torch.manual_seed(3)
    m = build_model(default_config("resnet18", embed_dim=8, frozen_bn=False))
    torch.save({k: (v.bfloat16() if v.is_floating_point() else v) for k, v in m.state_dict().items()},
               tmp_path / "b.pt")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        model, config, info = load_checkpoint(tmp_path / "b.pt", arch="resnet18")
    assert [type(w.message) for w in got] == [PrecisionWarning]
    assert "its weights are bfloat16" in str(got[0].message)
    assert info["format"] == "bare state dict (bfloat16 weights, upcast to float32)"
    assert config["source_format"] == "bare state dict"  # (what distances.is_untrained reads: unchanged)
    assert model.head.weight.dtype == torch.float32
    torch.testing.assert_close(model.head.weight, m.head.weight.bfloat16().float())
    # a trunk and an embedder both in half precision: one warning for the model
    torch.save({k: v.half() for k, v in _trunk(resnet18_sd).items() if v.is_floating_point()}, tmp_path / "t.pth")
    torch.save(torch.nn.Linear(512, 4).half().state_dict(), tmp_path / "e.pth")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        info = load_model(trunk=tmp_path / "t.pth", embedder=tmp_path / "e.pth")[2]
    assert [type(w.message) for w in got] == [PrecisionWarning]
    assert info["format"] == "pytorch-metric-learning trunk+embedder (float16 weights, upcast to float32)"


# --------------------------------------------------------------------------- 3. backbone.* beside other keys

def test_backbone_keys_beside_a_whole_backbone_are_not_guessed(tmp_path, images, resnet18_sd):
    sd = _trunk(resnet18_sd)
    torch.save({**{"backbone." + k: v + 1 for k, v in sd.items()}, **sd}, tmp_path / "two.pt")
    rc, _, err = _embed(images, tmp_path / "x.h5", "--arch", "resnet18", "--weights", tmp_path / "two.pt")
    assert rc == 1  # was: the backbone.* copy read, the other "an embedscope model's head" left out
    line = one_error_line(err, "embed")
    assert "'backbone.*' keys and its other keys hold the whole resnet18 backbone" in line and "not guessed" in line


def test_backbone_keys_beside_a_loss_are_not_called_a_head(tmp_path, images, resnet18_sd):
    sd = _trunk(resnet18_sd)
    torch.save({**{"backbone." + k: v for k, v in sd.items()}, "loss.W": torch.zeros(512, 3)}, tmp_path / "l.pt")
    out = tmp_path / "e.h5"
    rc, _, err = _embed(images, out, "--arch", "resnet18", "--weights", tmp_path / "l.pt")
    assert rc == 0, err
    (line,) = _warning_lines(err)
    assert "loss.W" in line and "not part of the backbone" in line and "head" not in line
    X, paths, s = _read(out)
    np.testing.assert_allclose(X, _reference(images, paths, resnet18_sd), atol=1e-5)
    assert s.attrs["checkpoint_format"] == "backbone weights from a torchvision state dict (its 'backbone.*' keys)"


# --------------------------------------------------------------------------- 4. extra layers: what to do

def test_a_custom_head_beside_the_model_says_what_to_do(tmp_path, images):
    torch.manual_seed(4)
    m = build_model(default_config("resnet18", embed_dim=16, frozen_bn=False))
    sd = {**m.state_dict(), "proj.weight": torch.zeros(4, 16), "proj.bias": torch.zeros(4)}
    torch.save(sd, tmp_path / "p.pt")
    rc, _, err = _embed(images, tmp_path / "x.h5", "--arch", "resnet18", tmp_path / "p.pt")
    assert rc == 1
    line = one_error_line(err, "embed")
    assert "unexpected 2 key(s) e.g. proj.weight, proj.bias" in line and "the model has no such layers" in line
    snippet = line[line.index("torch.save("):line.rindex(")") + 1]
    assert snippet == "torch.save({k: v for k, v in sd.items() if not k.startswith(('proj.',))}, FILE)"
    # the advice, followed, loads the model
    torch.save(eval(snippet.replace("torch.save(", "(").replace(", FILE)", ")"), {"sd": sd}), tmp_path / "ok.pt")
    rc, _, err = _embed(images, tmp_path / "e.h5", "--arch", "resnet18", tmp_path / "ok.pt")
    assert rc == 0, err
    # a trunk with a loss's weights: the same
    torch.save({**_trunk(m.backbone.state_dict()), "arcface.W": torch.zeros(512, 3)}, tmp_path / "t.pt")
    torch.save({}, tmp_path / "id.pt")
    with pytest.raises(EmbedscopeError, match=r"unexpected 1 key\(s\) e.g. arcface.W\); the model has no such "
                                              r"layers.*k.startswith\(\('arcface.',\)\)"):
        load_model(trunk=tmp_path / "t.pt", embedder=tmp_path / "id.pt")


def test_a_larger_network_is_not_advised_to_be_cut(tmp_path):
    """A ResNet-34 file given as a ResNet-18 holds every ResNet-18 tensor plus its extra blocks (layer1.2.*):
    not layers to drop (that gives a wrong network) but another architecture, which the line says."""
    torch.save(torchvision.models.resnet34().state_dict(), tmp_path / "r34.pth")
    with pytest.raises(EmbedscopeError) as e:
        load_model(arch="resnet18", weights=tmp_path / "r34.pth")
    msg = str(e.value)
    assert "unexpected 96 key(s) e.g. layer1.2.conv1.weight" in msg and "torch.save" not in msg
    assert "inside the model's own modules (e.g. 'layer1.2.*')" in msg and "--arch" in msg


# --------------------------------------------------------------------------- 5. an EMA of the parameters only

def test_an_ema_copy_without_batchnorm_statistics(tmp_path, images, resnet18_sd):
    """The network is read whole from 'model.*' (never the EMA's parameters with the model's statistics), and
    the warning says why the EMA copy was left out."""
    sd = _trunk(resnet18_sd)
    names = {n for n, _ in torchvision.models.resnet18().named_parameters()}
    ema = {"model_ema." + k: v + 0.01 for k, v in sd.items() if k in names}
    ckpt = tmp_path / "ema.ckpt"
    torch.save({"state_dict": {**{"model." + k: v for k, v in sd.items()}, **ema}}, ckpt)
    out = tmp_path / "e.h5"
    rc, _, err = _embed(images, out, "--arch", "resnet18", "--weights", ckpt)
    assert rc == 0, err
    (line,) = _warning_lines(err)
    assert "'model_ema.*' keys hold every parameter of the backbone but not its buffers" in line
    assert "not mixed" in line
    X, paths, _ = _read(out)
    np.testing.assert_allclose(X, _reference(images, paths, resnet18_sd), atol=1e-5)
    # asked for with --ema (timm's key): refused, saying what is lacking
    torch.save({"state_dict": sd, "state_dict_ema": {k[len("model_ema."):]: v for k, v in ema.items()}},
               tmp_path / "t.ckpt")
    rc, _, err = _embed(images, tmp_path / "x.h5", "--arch", "resnet18", "--weights", tmp_path / "t.ckpt", "--ema")
    assert rc == 1
    line = one_error_line(err, "embed")
    assert "missing 40 key(s)" in line and "BatchNorm's running statistics" in line


# --------------------------------------------------------------------------- 6. --ema names the key it read

@pytest.mark.parametrize("key", ["state_dict_ema", "model_ema"])
def test_ema_of_a_checkpoint_names_the_key_read(tmp_path, key):
    """A training checkpoint's EMA copy, given as the checkpoint with --ema, was recorded as "training
    checkpoint ('state_dict')": the key that was not read."""
    torch.manual_seed(5)
    m = build_model(default_config("digits_cnn", embed_dim=8))
    sd = m.state_dict()
    ema = {k: v + 1 if v.is_floating_point() else v for k, v in sd.items()}
    torch.save({"state_dict": sd, key: ema, "epoch": 3, "optimizer": {}}, tmp_path / "t.ckpt")
    model, config, info = load_checkpoint(tmp_path / "t.ckpt", arch="digits_cnn", ema=True)
    assert info["format"] == f"training checkpoint ('{key}')" and config["weights_ema"] is True
    torch.testing.assert_close(model.head.weight, ema["head.weight"])
    assert load_checkpoint(tmp_path / "t.ckpt", arch="digits_cnn")[2]["format"] == "training checkpoint ('state_dict')"
    from embedscope.models.checkpoint import save_checkpoint

    save_checkpoint(tmp_path / "e.pt", m, default_config("digits_cnn", embed_dim=8))
    obj = torch.load(tmp_path / "e.pt", weights_only=True)
    torch.save({**obj, key: ema}, tmp_path / "e2.pt")
    assert load_checkpoint(tmp_path / "e2.pt", ema=True)[2]["format"] == f"embedscope ('{key}')"
    assert load_checkpoint(tmp_path / "e2.pt")[2]["format"] == "embedscope"


def test_a_whole_model_pickled_in_half_precision_runs_in_float32(tmp_path):
    from embedscope.models.checkpoint import PrecisionWarning

    torch.manual_seed(6)
    m = build_model(default_config("digits_cnn", embed_dim=6)).eval()
    torch.save(m.half(), tmp_path / "whole16.pt")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        m2, _, info = load_checkpoint(tmp_path / "whole16.pt", unsafe_pickle=True)
    assert [type(w.message) for w in got] == [PrecisionWarning]
    assert info["format"] == "pickled embedscope model (--unsafe-pickle) (float16 weights, upcast to float32)"
    x = torch.rand(3, 1, 8, 8)
    with torch.no_grad():
        y = m2(x)  # (was: RuntimeError, float input and half weights)
        torch.testing.assert_close(y, m.float()(x))
    assert y.dtype == torch.float32


def test_an_embedscope_model_under_one_prefix_is_read_from_it(tmp_path):
    from embedscope.models.checkpoint import SubmoduleWarning

    torch.manual_seed(7)
    m = build_model(default_config("digits_cnn", embed_dim=8)).eval()
    torch.save({"epoch": 1, "optimizer_states": [], "state_dict": {
        **{"model." + k: v for k, v in m.state_dict().items()}, "loss.W": torch.zeros(3)}}, tmp_path / "l.ckpt")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        m2, _, info = load_checkpoint(tmp_path / "l.ckpt", arch="digits_cnn")
    assert [type(w.message) for w in got] == [SubmoduleWarning] and "loss.W" in str(got[0].message)
    assert info["format"] == "training checkpoint ('state_dict') (its 'model.*' keys)"
    x = torch.rand(3, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(m2(x), m(x))
    sd = m.state_dict()  # two models: not guessed
    torch.save({"state_dict": {**{"a." + k: v for k, v in sd.items()}, **{"b." + k: v for k, v in sd.items()}}},
               tmp_path / "two.ckpt")
    with pytest.raises(EmbedscopeError, match=r"2 prefixes each hold an embedscope model \('a\.\*', 'b\.\*'\)"):
        load_checkpoint(tmp_path / "two.ckpt", arch="digits_cnn")
