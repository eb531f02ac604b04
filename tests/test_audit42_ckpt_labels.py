"""Audit 42 (loose ends): checkpoint loading's advice and --ema, and from_arrays' text and duration labels.

What was wrong before:

1. A file holding every tensor of the model plus a custom head was refused with a ``torch.save(...)`` line
   dropping the extra layers by ``k.startswith(('proj.',))``: the keys after the ``module.`` / ``model.``
   prefixes (or a ``net.*`` / ``backbone.*`` prefix) were removed, so for a file saved from DataParallel
   (``module.proj.weight``) the line, followed, dropped nothing.
2. A Roth et al. checkpoint given with ``--ema``: its ``opt`` was dropped with its ``state_dict``, so it was
   no longer read as Roth et al.'s ("the checkpoint has no config" for one with an EMA key; for one
   without, nothing said that such files hold none).
3. ``EmbeddingSet.from_arrays``: labels ``"a"`` and ``"a\\x00"`` (objects, a list, bytes) became one class
   "a" (numpy's ``astype(str)`` cuts trailing NULs), while check_labels keeps two; HDF5 text cannot hold a
   NUL at all.
4. A unitless ``np.timedelta64(5)`` beside ``np.timedelta64(1, "D")`` held as objects was read by numpy as
   5 days, silently.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pytest
import torch
import torchvision

from embedscope.errors import EmbedscopeError
from embedscope.models import load_checkpoint, load_model
from embedscope.models.backbones import build_model, default_config
from embedscope.store import EmbeddingSet
from embedscope.validation import check_labels


def _snippet(msg: str) -> str:
    return msg[msg.index("torch.save("):msg.rindex(")") + 1]


def _follow(snippet: str, sd: dict) -> dict:
    """The state dict the advice saves."""
    return eval(snippet.replace("torch.save(", "(").replace(", FILE)", ")"), {"sd": sd})


# --------------------------------------------------------------------------- 1. the advice names the file's keys

@pytest.mark.parametrize("prefix", ["module.", "module._orig_mod.", "model."])
def test_drop_advice_names_the_keys_as_they_are_in_the_file(tmp_path, prefix):
    torch.manual_seed(0)
    m = build_model(default_config("digits_cnn", embed_dim=8)).eval()
    sd = {prefix + k: v for k, v in {**m.state_dict(), "proj.weight": torch.zeros(3, 8)}.items()}
    torch.save(sd, tmp_path / "p.pt")
    with pytest.raises(EmbedscopeError) as e:
        load_checkpoint(tmp_path / "p.pt", arch="digits_cnn")
    snippet = _snippet(str(e.value))
    assert f"k.startswith(('{prefix}proj.',))" in snippet  # (was 'proj.', which left module.proj.* in)
    torch.save(_follow(snippet, sd), tmp_path / "ok.pt")  # the advice, followed, loads the model
    m2 = load_checkpoint(tmp_path / "ok.pt", arch="digits_cnn")[0]
    x = torch.rand(2, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(m2(x), m(x))


def test_drop_advice_under_a_training_modules_prefix(tmp_path):
    torch.manual_seed(1)
    m = build_model(default_config("digits_cnn", embed_dim=8))
    sd = {**{"module.net." + k: v for k, v in m.state_dict().items()}, "module.net.proj.weight": torch.zeros(2),
          "module.loss.W": torch.zeros(3)}
    torch.save({"state_dict": sd, "epoch": 1}, tmp_path / "l.ckpt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the loss's weights left out: said by a warning)
        with pytest.raises(EmbedscopeError) as e:
            load_checkpoint(tmp_path / "l.ckpt", arch="digits_cnn")
    assert "k.startswith(('module.net.proj.',))" in _snippet(str(e.value))


def test_weights_and_trunk_advice_name_the_files_keys(tmp_path):
    torch.manual_seed(2)
    own = {k: v for k, v in torchvision.models.resnet18().state_dict().items() if not k.startswith("fc.")}
    sd = {"module." + k: v for k, v in {**own, "arcface.W": torch.zeros(512, 3)}.items()}
    torch.save(sd, tmp_path / "w.pth")
    with pytest.raises(EmbedscopeError) as e:
        load_model(arch="resnet18", weights=tmp_path / "w.pth", head="none")
    assert "k.startswith(('module.arcface.',))" in _snippet(str(e.value))
    torch.save(_follow(_snippet(str(e.value)), sd), tmp_path / "ok.pth")
    load_model(arch="resnet18", weights=tmp_path / "ok.pth", head="none")
    # the same file as a trunk (read under 'state_dict')
    torch.save({"state_dict": sd}, tmp_path / "t.pth")
    torch.save({}, tmp_path / "id.pth")
    with pytest.raises(EmbedscopeError) as e:
        load_model(trunk=tmp_path / "t.pth", embedder=tmp_path / "id.pth")
    assert "k.startswith(('module.arcface.',))" in _snippet(str(e.value))
    # backbone.* keys under module.: their full prefix
    bsd = {"module.backbone." + k: v for k, v in {**own, "extra.W": torch.zeros(2)}.items()}
    torch.save(bsd, tmp_path / "b.pth")
    with pytest.raises(EmbedscopeError) as e:
        load_model(arch="resnet18", weights=tmp_path / "b.pth", head="none")
    assert "k.startswith(('module.backbone.extra.',))" in _snippet(str(e.value))


# --------------------------------------------------------------------------- 2. Roth et al.'s file with --ema

def _roth_sd(seed: int) -> dict:
    """The state dict of Roth et al.'s GoogLeNet (torchvision's layout under 'model.', fc named last_linear)."""
    torch.manual_seed(seed)
    net = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=False, transform_input=False)
    sd = {"model." + k: v for k, v in net.state_dict().items() if not k.startswith("fc.")}
    return {**sd, "model.last_linear.weight": torch.randn(8, 1024), "model.last_linear.bias": torch.randn(8)}


_OPT = argparse.Namespace(arch="googlenet_normalize", embed_dim=8, loss="margin", batch_mining="distance",
                          dataset="cub200")


def test_roth_checkpoint_with_ema_says_it_holds_none(tmp_path):
    p = tmp_path / "checkpoint.pth.tar"
    torch.save({"state_dict": {"model.conv1.weight": torch.zeros(1)}, "opt": _OPT, "progress": None}, p)
    with pytest.raises(EmbedscopeError, match=r"--ema: a Roth et al\. checkpoint \('state_dict', 'opt'\) holds no "
                                              r"EMA weights .*load it without --ema"):
        load_checkpoint(p, ema=True)  # (was: "no EMA weights in the file": whose files hold none, unsaid)
    with pytest.raises(EmbedscopeError, match=r"--ema: a Roth et al\. checkpoint .* holds no EMA weights"):
        load_model(arch="resnet18", weights=p, ema=True, head="none")  # (--weights F --ema: the same words)


def test_roth_checkpoint_with_an_ema_key_reads_it_with_its_options(tmp_path):
    sd, ema = _roth_sd(3), _roth_sd(4)
    p = tmp_path / "checkpoint.pth.tar"
    torch.save({"state_dict": sd, "state_dict_ema": ema, "opt": _OPT, "progress": None}, p)
    model, config, info = load_checkpoint(p, ema=True)  # (was "the checkpoint has no config")
    assert config["weights_ema"] is True and info["format"] == "Roth et al. 2020 checkpoint ('state_dict_ema')"
    assert config["normalize"] and config["roth_arch"] == "googlenet_normalize"
    torch.testing.assert_close(model.head.weight, ema["model.last_linear.weight"])
    torch.testing.assert_close(model.backbone.conv1.conv.weight, ema["model.conv1.conv.weight"])


# --------------------------------------------------------------------------- 3. a NUL in a text label

def _held(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


@pytest.mark.parametrize("y", [_held("a", "a\x00", "b"), ["a", "a\x00", "b"], [b"a", b"a\x00", b"b"],
                               _held("a", b"a\x00", "b"), np.array(["a", "a\x00b", "b"]),
                               np.array([b"a", b"a\x00b", b"b"])])
def test_a_nul_in_a_label_is_refused_naming_its_row(y):
    with pytest.raises(EmbedscopeError, match=r"^labels: row 1 holds a NUL character, which HDF5 text cannot store$"):
        EmbeddingSet.from_arrays(np.eye(3), y)  # (was: "a" and "a\x00" one class "a")
    with pytest.raises(EmbedscopeError, match="row 1 holds a NUL"):
        EmbeddingSet.from_arrays(np.eye(3), y, class_names=["a", "b", "a\x00b"])


def test_labels_without_nul_are_read_as_before():
    es = EmbeddingSet.from_arrays(np.eye(3), _held("a", "b", "a"))
    assert es.labels.tolist() == [0, 1, 0] and es.class_names.tolist() == ["a", "b"]
    es = EmbeddingSet.from_arrays(np.eye(3), ["x", "y", "y"], class_names=["y", "x"])
    assert es.labels.tolist() == [1, 0, 0]


# --------------------------------------------------------------------------- 4. unitless durations beside united

@pytest.mark.parametrize("read", [lambda y: EmbeddingSet.from_arrays(np.eye(3), y), lambda y: check_labels(y)])
def test_a_unitless_duration_beside_one_with_a_unit_is_refused(read):
    y = _held(np.timedelta64(5), np.timedelta64(1, "D"), np.timedelta64(5, "D"))
    with pytest.raises(EmbedscopeError, match=r"^labels: np\.timedelta64\(5\) at row 0 has no unit, beside 1 days "
                                              r"at row 1 .*give every label a unit$"):
        read(y)  # (was: 5 read as 5 days, one class with row 2)
    # all without a unit: one unit, read as they are
    assert check_labels(_held(np.timedelta64(5), np.timedelta64(2), np.timedelta64(5))).tolist() == [1, 0, 1]


# --------------------------------------------------------------------------- 5. "which one to read": the file's keys

def test_two_networks_advice_names_the_keys_as_they_are_in_the_file(tmp_path):
    """The line saving one of two networks alone named the keys after 'module.' was removed ('a.'): followed
    on the file's own keys (module.a.*), it saved nothing."""
    torch.manual_seed(5)
    m = build_model(default_config("digits_cnn", embed_dim=8)).eval()
    sd = {f"module.{p}{k}": v for p in ("a.", "b.") for k, v in m.state_dict().items()}
    torch.save(sd, tmp_path / "two.pt")
    with pytest.raises(EmbedscopeError, match=r"\('module\.a\.\*', 'module\.b\.\*'\)") as e:
        load_checkpoint(tmp_path / "two.pt", arch="digits_cnn")
    torch.save(_follow(_snippet(str(e.value)), sd), tmp_path / "one.pt")
    m2 = load_checkpoint(tmp_path / "one.pt", arch="digits_cnn")[0]
    torch.testing.assert_close(m2.head.weight, m.head.weight)
    # --weights: two backbones under module.*, and backbone.* beside the whole backbone
    own = {k: v for k, v in torchvision.models.resnet18().state_dict().items() if not k.startswith("fc.")}
    for keys, want in ((("a.", "b."), "k[9:]: v for k, v in sd.items() if k.startswith('module.a.')"),
                       (("backbone.", ""), "k[16:]: v for k, v in sd.items() if k.startswith('module.backbone.')")):
        torch.save({f"module.{p}{k}": v for p in keys for k, v in own.items()}, tmp_path / "w.pth")
        with pytest.raises(EmbedscopeError) as e:
            load_model(arch="resnet18", weights=tmp_path / "w.pth", head="none")
        assert want in str(e.value)


# --------------------------------------------------------------------------- 6. trailing NULs of paths, names, cells

@pytest.mark.parametrize("kw, what", [
    ({"paths": ["x", "x\x00", "y"]}, "paths"),
    ({"paths": _held("x", "x\x00", "y")}, "paths"),
    ({"split": ["train", "test\x00", "test"]}, "split"),
    ({"y": [0, 1, 1], "class_names": ["a", "a\x00"]}, "class_names"),
    ({"properties": {"p": ["a", "a\x00", "b"]}}, "property 'p'"),
])
def test_a_trailing_nul_is_refused_not_cut(kw, what):
    """numpy's astype(str) (and its array of a list) cut them: the paths "x" and "x\\x00" became one path "x",
    saved without a word."""
    kw = {"y": [0, 1, 1], **kw}
    with pytest.raises(EmbedscopeError, match=rf"^{what}: row 1 holds a NUL character, which HDF5 text cannot store$"):
        EmbeddingSet.from_arrays(np.eye(3), **kw)


def test_texts_without_a_trailing_nul_are_kept_as_before():
    es = EmbeddingSet(embeddings=np.eye(3), labels=[0, 1, 1], paths=["x", "a\x00b", "z"], split=["test"] * 3,
                      class_names=["a", "b"], properties={"p": [1, 2, 3]})
    # (a NUL inside: kept by the constructor, refused by store.save, naming the row; from_arrays refuses it
    # itself since audit 43, tests/test_audit43_leftovers.py)
    assert es.paths.tolist() == ["x", "a\x00b", "z"]


def test_unitless_durations_of_one_set_beside_the_others_with_a_unit_are_refused():
    from embedscope.metrics import retrieval_metrics

    X = np.eye(3)
    y = _held(np.timedelta64(5), np.timedelta64(5), np.timedelta64(2))
    y_ref = _held(np.timedelta64(5, "D"), np.timedelta64(1, "D"), np.timedelta64(2, "D"))
    with pytest.raises(EmbedscopeError, match=r"^y and y_ref: the labels of y are durations without a unit"):
        retrieval_metrics(X, y, X_ref=X, y_ref=y_ref, ks=[1])  # (was: 5 matched 5 days)
    retrieval_metrics(X, y_ref, X_ref=X, y_ref=y_ref.copy(), ks=[1])  # (units on both sides: as before)


@pytest.mark.parametrize("y", [["a", "a\x00", "a"], (b"a", b"a\x00", b"a")])
def test_a_list_of_labels_with_a_nul_is_read_as_the_same_objects_are(y):
    """check_labels and the retrieval measures read a list through numpy's texts, which cut the trailing NUL:
    "a" and "a\\x00" one class, while held as objects they were two."""
    assert check_labels(y).tolist() == check_labels(_held(*y)).tolist() == [0, 1, 0]
