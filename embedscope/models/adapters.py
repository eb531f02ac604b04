"""Models saved by other DML code bases, read without running their code (``docs/checkpoint.md``).

- **pytorch-metric-learning / powerful-benchmarker**: a *trunk* state dict (a torchvision ResNet,
  GoogLeNet, or the Cadene BN-Inception, classifier usually replaced by the identity; a linear layer
  left in it stays part of it) and an *embedder* state dict (powerful-benchmarker's ``MLP``:
  ``net.<i>.weight/bias`` linear layers with ReLUs at the parameter-free indices, plus a duplicate
  ``last_linear``; a single ``nn.Linear``; or empty: the identity), saved as
  ``trunk_best<epoch>.pth`` / ``embedder_best<epoch>.pth``. Embedding = embedder(trunk(x)),
  L2-normalised (the library's tester normalises by default; ``normalize=False`` keeps it raw).
- **Roth et al. 2020** (Confusezius/Revisiting_Deep_Metric_Learning_PyTorch):
  ``checkpoint_*.pth.tar`` = ``{"state_dict", "opt" (argparse.Namespace), "progress" (their logger
  class), "aux"}``, read with the restricted unpickler (their classes become inert records). The
  network is ``model.*`` (Cadene ``resnet50`` / ``bninception`` or torchvision ``googlenet``, with
  ``model.last_linear`` the embedding layer); ``normalize`` in ``opt.arch`` adds the L2
  normalisation, ``double`` (BN-Inception) adds the global max pool to the average pool, and the
  embedding size is ``opt.embed_dim``. Input as in their data sets: Resize(256) + CenterCrop(224)
  (227 for GoogLeNet); ImageNet mean/std, except BN-Inception: mean (0.502, 0.4588, 0.4078),
  std 0.0039 on [0, 1] RGB, then flipped to BGR. Their earlier Deep-Metric-Learning-Baselines
  (``opt.arch`` plain ``resnet50`` / ``googlenet``, a ``sampling`` option): BatchNorm frozen, output
  normalised unless ``opt.loss`` is ``npair``, GoogLeNet without ``transform_input``.
- **ImageNet baselines** without a DML checkpoint (:func:`build_pretrained`): a backbone with
  weights from a local file and ``head="none"`` (pooled features) or ``head="random"`` (seeded
  random normalised head, Roth et al. Table 2's first row; docs/methods.md §7).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

from embedscope.errors import EmbedscopeError, UsageError
from embedscope.fileio import sha256_file
from embedscope.models.backbones import EmbeddingModel, build_model, default_config
from embedscope.models.checkpoint import (
    Record,
    _keys_preview,
    check_one_prefix,
    check_one_training_state,
    check_state_dict,
    children_keys,
    classifier_names,
    is_children_sequential,
    is_module_record,
    key_prefixes,
    load_backbone_weights,
    load_into,
    module_state_dict,
    printable,
    read_checkpoint,
    read_submodule,
    renamed_children,
    say_upcast,
    split_prefix,
    submodule_prefix,
    torchvision_file_key,
    torchvision_name,
    training_state_key,
)
from embedscope.text import quoted

PML_FORMAT = "pytorch-metric-learning trunk+embedder"
ROTH_FORMAT = "Roth et al. 2020 checkpoint"
DMLB_FORMAT = "Roth et al. Deep-Metric-Learning-Baselines checkpoint"


# ---------------------------------------------------------------------------------------------
# architecture from state-dict keys

_RESNETS = {
    ((2, 2, 2, 2), False): "resnet18",
    ((3, 4, 6, 3), False): "resnet34",
    ((3, 4, 6, 3), True): "resnet50",
    ((3, 4, 23, 3), True): "resnet101",
    ((3, 8, 36, 3), True): "resnet152",
}


def detect_arch(sd: dict[str, torch.Tensor]) -> str | None:
    """The backbone a trunk state dict was taken from (None when the keys do not say)."""
    if "conv1_7x7_s2.weight" in sd:
        return "bninception"
    if "conv1.conv.weight" in sd and any(k.startswith("inception3a.") for k in sd):
        return "googlenet"
    if "conv1.weight" in sd and any(k.startswith("layer4.") for k in sd):
        bottleneck = "layer1.0.conv3.weight" in sd
        counts = []
        for i in range(1, 5):
            idx = {int(m.group(1)) for k in sd if (m := re.match(rf"layer{i}\.(\d+)\.", k))}
            counts.append(len(idx))
        name = _RESNETS.get((tuple(counts), bottleneck))
        if name and bottleneck:  # wide / grouped variants have the same depth but other widths
            w = sd.get("layer1.0.conv2.weight")
            if w is None or tuple(w.shape) != (64, 64, 3, 3):
                return None
        return name
    return None


#: the children of a torchvision ResNet, in order (nn.Sequential(*list(resnet.children())[:-1]) numbers them)
_RESNET_CHILDREN = ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool", "fc")


def detect_numbered_arch(sd: dict[str, torch.Tensor]) -> str | None:
    """The torchvision ResNet whose children an ``nn.Sequential`` state dict (``0.weight``, ``4.0.conv1.weight``,
    ...: :func:`~embedscope.models.checkpoint.is_children_sequential`) numbers, by :func:`detect_arch` of its
    keys renamed; None for any other layout."""
    named = renamed_children(sd, _RESNET_CHILDREN)
    return None if named is None else detect_arch(named)


# ---------------------------------------------------------------------------------------------
# pytorch-metric-learning / powerful-benchmarker


def _read_state_dict(path: Path, what: str, unsafe_pickle: bool, *, allow_empty: bool = False,
                     how: dict[str, str] | None = None) -> dict[str, torch.Tensor]:
    return _state_dict_of(read_checkpoint(path, unsafe_pickle=unsafe_pickle), path, what, allow_empty=allow_empty,
                          how=how)


def _state_dict_of(obj: Any, path: Any, what: str, *, allow_empty: bool = False,
                   how: dict[str, str] | None = None) -> dict[str, torch.Tensor]:
    """The trunk's or embedder's state dict in ``obj`` (a file's content, or one of its entries); ``how``
    (when given) gets the key it was read from under ``what`` (``{"trunk": "model_state_dict"}``), for the
    ``checkpoint_format``."""
    if is_pml_pair(obj):
        raise EmbedscopeError(f"{path}: the {what} file holds both a trunk and an embedder ('trunk', 'embedder'): "
                              "give it as the checkpoint, without --trunk/--embedder")
    if is_module_record(obj):
        obj = module_state_dict(obj)
    check_one_training_state(obj, path)
    key = None
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        key = "state_dict"
    elif training_state_key(obj) is not None:  # {'model_state_dict': ..., 'optimizer_state_dict': ...}
        key = training_state_key(obj)
    if key is not None:
        obj = obj[key]
        if how is not None:
            how[what] = key
    if isinstance(obj, Record):
        raise EmbedscopeError(f"{path}: the {what} file holds a {printable(obj.qualname, 60)} object, not a state dict")
    if not isinstance(obj, dict):
        raise EmbedscopeError(f"{path}: the {what} file must hold a state dict, got {type(obj).__name__}")
    if allow_empty and not obj:
        return {}
    removed, sd = split_prefix(check_state_dict(obj, str(path)))
    if how is not None and removed:  # (for load_into's advice: the keys as they are in the file)
        how[what + " prefix"] = removed
    return sd


def embedder_layers(sd: dict[str, torch.Tensor], where: str) -> tuple[list[Any], dict[str, torch.Tensor]]:
    """powerful-benchmarker's MLP (or a plain ``nn.Linear``, or an ``nn.Sequential`` of one) ->
    (``head_layers``, ``head.*`` state dict)."""
    keys = set(sd)
    for pre in ("", "0."):  # a plain nn.Linear, or an nn.Sequential of one (a deeper plain Sequential does
        # not say which parameter-free layers sit between its linear layers: refused below)
        if keys == {f"{pre}weight", f"{pre}bias"} and sd[f"{pre}weight"].ndim == 2:
            out, inp = sd[f"{pre}weight"].shape
            return [[int(inp), int(out)]], {"0.weight": sd[f"{pre}weight"], "0.bias": sd[f"{pre}bias"]}
    net = {k[len("net."):]: v for k, v in sd.items() if k.startswith("net.")}
    others = [k for k in keys if not k.startswith(("net.", "last_linear."))]
    if not net or others:
        raise EmbedscopeError(
            f"{where}: unknown embedder layout: expected powerful-benchmarker MLP keys (net.<i>.weight, "
            f"net.<i>.bias, last_linear.*) or one linear layer (weight, bias, or 0.weight, 0.bias); found "
            f"{_keys_preview(sorted(keys))}")
    idx: dict[int, dict[str, torch.Tensor]] = {}
    for k, v in net.items():
        i, _, name = k.partition(".")
        if not (i.isascii() and i.isdigit()) or name not in ("weight", "bias"):
            raise EmbedscopeError(f"{where}: unexpected embedder key 'net.{printable(k, 60)}' (an MLP has "
                                  "linear layers and ReLUs only)")
        idx.setdefault(int(i), {})[name] = v
    layers: list[Any] = []
    head_sd: dict[str, torch.Tensor] = {}
    prev_out = None
    for i in range(max(idx) + 1):
        if i not in idx:
            layers.append("relu")
            continue
        w, b = idx[i].get("weight"), idx[i].get("bias")
        if w is None or b is None or w.ndim != 2:
            raise EmbedscopeError(f"{where}: embedder layer net.{i} is not a linear layer with weight and bias")
        out, inp = int(w.shape[0]), int(w.shape[1])
        if prev_out is not None and inp != prev_out:
            raise EmbedscopeError(
                f"{where}: embedder layer net.{i} takes {inp} inputs, the layer before gives {prev_out}")
        prev_out = out
        layers.append([inp, out])
        head_sd[f"{i}.weight"], head_sd[f"{i}.bias"] = w, b
    last = idx[max(idx)]
    if "last_linear.weight" in sd and not torch.equal(sd["last_linear.weight"], last["weight"]):
        raise EmbedscopeError(f"{where}: last_linear differs from the MLP's last layer net.{max(idx)}")
    return layers, head_sd


#: the classes a pickled embedder module may be made of to be read by its structure (:func:`sequential_layers`):
#: torch's own, whose forward is known (a subclass, another class, is not read so)
_SEQUENTIAL = "torch.nn.modules.container.Sequential"
_LINEAR = "torch.nn.modules.linear.Linear"
_RELU = "torch.nn.modules.activation.ReLU"


def _class_name(m: Any) -> str:
    if isinstance(m, torch.nn.Module):
        return f"{type(m).__module__}.{type(m).__qualname__}"
    return str(type(m).qualname) if isinstance(m, Record) else ""


def _module_part(m: Any, name: str) -> dict[str, Any]:
    """A pickled module's (real, or an inert :class:`Record` of one) ``_modules`` / ``_forward_hooks`` / ...."""
    v = getattr(m, name, None) if isinstance(m, torch.nn.Module) else m.state_dict_().get(name)
    return dict(v or {})


def sequential_layers(obj: Any, where: str) -> tuple[list[Any], dict[str, torch.Tensor]] | None:
    """A pickled ``nn.Sequential`` of ``nn.Linear`` (with bias) and ``nn.ReLU`` layers only (the module itself,
    with ``--unsafe-pickle`` or an inert :class:`Record` of it) -> (``head_layers``, ``head.*`` state dict), as
    :func:`embedder_layers` of a state dict: its forward is known from the classes it records (torch's own, no
    hooks), so the parameter-free layers between its linear ones are known too (its state dict alone does not say
    them: refused). None for anything else (read as a state dict)."""
    if _class_name(obj) != _SEQUENTIAL or _module_part(obj, "_forward_hooks") or _module_part(
            obj, "_forward_pre_hooks"):
        return None
    layers: list[Any] = []
    head_sd: dict[str, torch.Tensor] = {}
    prev_out = None
    for i, child in enumerate(_module_part(obj, "_modules").values()):
        name = _class_name(child)
        if name not in (_LINEAR, _RELU) or _module_part(child, "_modules") or _module_part(
                child, "_forward_hooks") or _module_part(child, "_forward_pre_hooks"):
            return None
        if name == _RELU:
            layers.append("relu")
            continue
        sd = module_state_dict(child)
        w, b = sd.get("weight"), sd.get("bias")
        if set(sd) != {"weight", "bias"} or w is None or b is None or w.ndim != 2:
            return None  # (no bias: not a layer embedscope's head has)
        out, inp = int(w.shape[0]), int(w.shape[1])
        if prev_out is not None and inp != prev_out:
            raise EmbedscopeError(f"{where}: embedder layer {i} takes {inp} inputs, the layer before gives {prev_out}")
        prev_out = out
        layers.append([inp, out])
        head_sd[f"{i}.weight"], head_sd[f"{i}.bias"] = w, b
    return (layers, head_sd) if head_sd else None


#: parameter-free modules read as the identity: torch's, that of older pytorch-metric-learning versions
#: (``c_f.Identity``), an ``nn.Sequential`` of them (empty too)
_IDENTITIES = ("torch.nn.modules.linear.Identity", "pytorch_metric_learning.utils.common_functions.Identity")


def check_identity_embedder(obj: Any, where: str) -> None:
    """A one-line error for a pickled embedder module without weights that is not the identity (``nn.ReLU()``,
    ``nn.Sequential(nn.ReLU())``, a normalisation of the user's own): it was read as an empty embedder, the
    identity, silently; nothing for anything else."""
    if not is_module_record(obj) or module_state_dict(obj):
        return

    def identity(m: Any) -> bool:
        name = _class_name(m)
        if name == _SEQUENTIAL:
            return all(c is None or identity(c) for c in _module_part(m, "_modules").values())
        return name in _IDENTITIES

    if not identity(obj):
        raise EmbedscopeError(
            f"{where}: the embedder file holds a pickled {printable(_class_name(obj) or '?', 80)} module without "
            "weights, not the identity: it cannot be read as the embedder (an empty embedder file, "
            "torch.save({}, f), or a pickled torch.nn.Identity() is the identity)")


def _trunk_linear(tsd: dict[str, torch.Tensor], backbone: torch.nn.Module, where: str
                  ) -> tuple[str | None, dict[str, torch.Tensor]]:
    """The classifier layer left in a trunk (``fc``, ``last_linear``, ...) -> (its name, its tensors).

    pytorch-metric-learning runs the trunk as saved: when its ``fc`` was not replaced by the identity,
    the trunk's output is that linear layer's output, so the layer belongs to the model.
    """
    own = set(backbone.state_dict())
    for name in (*classifier_names(backbone), "fc", "last_linear"):
        keys = {k for k in tsd if k.startswith(name + ".") and k not in own}
        if not keys:
            continue
        w = tsd.get(name + ".weight")
        if keys != {name + ".weight", name + ".bias"} or w is None or w.ndim != 2:
            raise EmbedscopeError(f"{where}: the trunk's '{printable(name, 40)}' is not one linear layer with weight "
                                  f"and bias (found {_keys_preview(sorted(keys))})")
        return name, {k: tsd[k] for k in keys}
    return None, {}


def load_pml(trunk: str | os.PathLike, embedder: str | os.PathLike, *, arch: str | None = None,
             normalize: bool = True, unsafe_pickle: bool = False, transform_input: bool | None = None
             ) -> tuple[EmbeddingModel, dict[str, Any], dict[str, Any]]:
    """A pytorch-metric-learning trunk + embedder pair -> (model in eval mode, config, info).

    ``arch`` is read from the trunk's keys (torchvision ResNet-18/34/50/101/152, GoogLeNet, the
    Cadene BN-Inception; a ResNet's also when numbered as ``nn.Sequential(*list(resnet.children())[:-1])``,
    :func:`~embedscope.models.checkpoint.children_keys`) unless given. Embedding = ``embedder(trunk(x))``, as the library's tester
    computes it: a linear classifier left in the trunk (``fc.*``, ``last_linear.*``: not replaced by
    the identity) stays part of it, and an empty embedder file (the ``torch.nn.Identity()`` that
    ``BaseTrainer`` puts in place of a missing embedder) is the identity. A GoogLeNet / Inception-v3
    trunk's auxiliary classifiers (``aux1``, ``aux2``, ``AuxLogits``: unused in eval mode) are skipped; it
    gets ``transform_input=True``, as torchvision builds it with ImageNet weights (the flag is
    not in the state dict); ``transform_input=False`` (``--no-transform-input``) is for such a trunk
    trained from scratch, built with ``transform_input=False``. Other trunks have no such step:
    ``transform_input`` given for them is a usage error.
    """
    trunk, embedder = Path(trunk), Path(embedder)
    how: dict[str, str] = {}
    tsd = _read_state_dict(trunk, "trunk", unsafe_pickle, how=how)
    eobj = read_checkpoint(embedder, unsafe_pickle=unsafe_pickle)
    esd = _state_dict_of(eobj, embedder, "embedder", allow_empty=True, how=how)
    check_identity_embedder(eobj, str(embedder))
    model, config, read = _pml_model(tsd, esd, trunk, embedder, arch=arch, normalize=normalize,
                                     transform_input=transform_input, how=how,
                                     sequential=sequential_layers(eobj, str(embedder)))
    sha = f"trunk:{sha256_file(trunk)} embedder:{sha256_file(embedder)}"
    return model, config, {"sha256": sha, "extra": {}, "path": f"{trunk} + {embedder}", "format": PML_FORMAT + read,
                           "trunk": str(trunk), "embedder": str(embedder)}


#: the keys of one file holding a pytorch-metric-learning pair (``torch.save({'trunk': trunk.state_dict(),
#: 'embedder': embedder.state_dict()}, ...)``), as the library's own ``models`` dict names them
PML_PAIR_KEYS = ("trunk", "embedder")


def is_pml_pair(obj: Any) -> bool:
    """One file holding a trunk and an embedder under ``trunk`` and ``embedder`` (state dicts or modules),
    without a ``state_dict`` of its own."""
    return (isinstance(obj, dict) and "state_dict" not in obj
            and all(isinstance(obj.get(k), dict) or is_module_record(obj.get(k)) for k in PML_PAIR_KEYS))


def load_pml_pair(obj: dict[str, Any], path: str | os.PathLike, *, arch: str | None = None,
                  transform_input: bool | None = None) -> tuple[EmbeddingModel, dict[str, Any], dict[str, Any]]:
    """:func:`load_pml` of one file's ``{'trunk': ..., 'embedder': ...}`` (:func:`is_pml_pair`)."""
    path = Path(path)
    where = {k: f"{path} ['{k}']" for k in PML_PAIR_KEYS}
    how: dict[str, str] = {}
    tsd = _state_dict_of(obj["trunk"], where["trunk"], "trunk", how=how)
    esd = _state_dict_of(obj["embedder"], where["embedder"], "embedder", allow_empty=True, how=how)
    check_identity_embedder(obj["embedder"], where["embedder"])
    # where the file keeps the trunk's state dict: the advice that saves it changed keeps the embedder (it saved
    # the trunk's state dict alone)
    container = (("trunk",) + ((how["trunk"],) if "trunk" in how else ())) if isinstance(obj["trunk"], dict) else None
    model, config, read = _pml_model(tsd, esd, where["trunk"], where["embedder"], arch=arch, normalize=True,
                                     transform_input=transform_input, how=how, where=path, container=container,
                                     sequential=sequential_layers(obj["embedder"], where["embedder"]))
    # (no "trunk" / "embedder" paths in the info: the one file is the checkpoint, read again by that path)
    return model, config, {"sha256": sha256_file(path), "extra": {}, "path": str(path),
                           "format": PML_FORMAT + " (one file: 'trunk', 'embedder')" + read}


def _pml_model(tsd: dict[str, torch.Tensor], esd: dict[str, torch.Tensor], trunk: Any, embedder: Any, *,
               arch: str | None, normalize: bool, transform_input: bool | None, how: dict[str, str] | None = None,
               where: Any = None, container: tuple[str, ...] | None = None,
               sequential: tuple[list[Any], dict[str, torch.Tensor]] | None = None
               ) -> tuple[EmbeddingModel, dict[str, Any], str]:
    """The model of a trunk's and an embedder's state dicts; ``trunk``, ``embedder``: where they came
    from, for the errors (``where``: the one file of both, for the warning of weights upcast). The third
    value is what to append to the ``checkpoint_format``: which part of the files was read (``how``: the
    key each was under; the trunk's keys under one prefix, ``(the trunk's 'net.*' keys)``, or numbered as
    an ``nn.Sequential``), and lower-precision weights upcast (:func:`~embedscope.models.checkpoint.say_upcast`),
    "" for plain state dicts (the --weights route records the same; the trunk route recorded none of it).
    ``container``: where the one file of both keeps the trunk's state dict (``("trunk",)``), for the advice that
    saves it changed (:func:`~embedscope.models.checkpoint.resave_hint`). ``sequential``: the embedder's layers
    and state dict when it is a pickled ``nn.Sequential`` of linear layers and ReLUs (:func:`sequential_layers`),
    read so instead of by its keys."""
    under = dict(how or {})
    trunk_read = "the trunk"
    a = arch or detect_arch(tsd) or detect_numbered_arch(tsd)
    if not a and not is_children_sequential(tsd):  # a training module's network under one prefix ('net.*')
        named = {detect_arch({k[len(p):]: v for k, v in tsd.items() if k.startswith(p)}) for p in key_prefixes(tsd)}
        named.discard(None)
        a = named.pop() if len(named) == 1 else None
    if not a:
        if any(k.startswith("backbone.") for k in tsd) and any(k.startswith("head.") for k in tsd):
            raise EmbedscopeError(f"{trunk}: holds a whole embedscope model (backbone.* and head.* keys), not a "
                                  "trunk: give it as the checkpoint (with --arch if it has no config), without "
                                  "--trunk/--embedder")
        numbered = (" (its layers are numbered: an nn.Sequential of a model's children, e.g. "
                    "nn.Sequential(*list(resnet.children())[:-1]))" if is_children_sequential(tsd) else "")
        raise EmbedscopeError(
            f"{trunk}: cannot tell the trunk's architecture from its keys (found {_keys_preview(sorted(tsd))})"
            f"{numbered}: name it with --arch")
    extra_cfg: dict[str, Any] = {}
    if a in ("googlenet", "inception_v3"):
        if transform_input is None or transform_input:
            extra_cfg["transform_input"] = True
    elif transform_input is not None:
        raise UsageError(f"--no-transform-input applies to a GoogLeNet / Inception-v3 trunk, not {printable(a, 40)}")
    if a in ("googlenet", "inception_v3"):
        # the auxiliary classifiers of a trunk built with aux_logits=True (torchvision's default without
        # ImageNet weights): its forward in eval mode, as the tester runs it, never uses them
        tsd = {k: v for k, v in tsd.items() if not k.startswith(("aux1.", "aux2.", "AuxLogits."))}
    probe = build_model(default_config(a, head="none", frozen_bn=False, **extra_cfg))
    numbered = children_keys(tsd, probe.backbone) if not set(tsd) & set(probe.backbone.state_dict()) else None
    if numbered is not None:  # nn.Sequential(*list(model.children())[:-1]): its layers by number
        tsd = numbered
    sub = submodule_prefix(tsd, probe.backbone) if numbered is None else None
    if sub is not None:  # a Lightning module's network beside its loss's weights: {'net.*', 'loss_fn.W'}
        tsd = read_submodule(tsd, sub, trunk, "trunk", probe.backbone)
        tsd = {k: v for k, v in tsd.items() if not k.startswith(("aux1.", "aux2.", "AuxLogits."))
               or a not in ("googlenet", "inception_v3")}
        trunk_read = f"the trunk's '{printable(sub, 60)}*' keys"
    elif numbered is not None:
        trunk_read = "the trunk numbered as an nn.Sequential of the model's children"
    else:
        check_one_prefix(tsd, probe.backbone, trunk, f"{printable(a, 40)} trunk", under.get("trunk prefix", ""),
                         container)
    # an old torchvision DenseNet's (norm.1) or ViT's keys (mlp.linear_1) read as torchvision's loader renames them
    # (norm1, mlp.0), as --weights reads them (a trunk saved from such a model was refused: every key of its dense
    # layers missing and unexpected); the errors name the file's keys
    key_prefix = None if numbered is not None else under.get("trunk prefix", "") + (sub or "")
    renamed = {torchvision_name(k): k for k in tsd}  # (renamed key -> the file's)
    tsd = {torchvision_name(k): v for k, v in tsd.items()}
    fc_name, fc_sd = _trunk_linear(tsd, probe.backbone, str(trunk))
    del probe
    tsd = {k: v for k, v in tsd.items() if k not in fc_sd}
    layers, hsd = (sequential if sequential is not None  # (a pickled nn.Sequential(Linear, ReLU, Linear) was
                   # refused as a state dict that does not say which layers sit between its linear ones)
                   else embedder_layers(esd, str(embedder)) if esd else ([], {}))
    if fc_name is not None:  # the trunk's linear layer comes first in the head
        w = fc_sd[fc_name + ".weight"]
        layers = [[int(w.shape[1]), int(w.shape[0])], *layers]
        hsd = {"0.weight": w, "0.bias": fc_sd[fc_name + ".bias"],
               **{f"{int(k.split('.')[0]) + 1}.{k.split('.', 1)[1]}": v for k, v in hsd.items()}}
        first = next((item for item in layers[1:] if item != "relu"), None)
        if first is not None and first[0] != layers[0][1]:
            raise EmbedscopeError(
                f"{embedder}: the embedder takes {first[0]} inputs but the trunk's {printable(fc_name, 40)} layer "
                f"gives {layers[0][1]}")
    head = "mlp" if layers else "none"
    config = default_config(a, head=head, head_layers=layers or None, normalize=bool(normalize), frozen_bn=False,
                            source_format=PML_FORMAT, trunk_linear=fc_name, **extra_cfg)
    config.pop("embed_dim", None)
    try:
        model = build_model(config)
    except EmbedscopeError as e:  # e.g. an embedder that does not fit this trunk: name both files
        raise EmbedscopeError(f"{embedder} (with the trunk {trunk}): {e}") from None
    config["embed_dim"] = model.embed_dim
    upcast = load_into(model.backbone, tsd, str(trunk), f"a {printable(a, 40)} trunk", key_prefix=key_prefix,
                       container=container, file_key=torchvision_file_key(renamed, key_prefix))
    if hsd:  # (its layers renumbered: no advice naming its keys)
        for k, n in load_into(model.head, hsd, str(embedder), "the embedder", key_prefix=None).items():
            upcast[k] = upcast.get(k, 0) + n
    model.eval()
    parts = [trunk_read + (f" under '{printable(under['trunk'], 60)}'" if "trunk" in under else "")]
    if "embedder" in under:
        parts.append(f"the embedder under '{printable(under['embedder'], 60)}'")
    read = f" ({', '.join(parts)})" if parts != ["the trunk"] else ""
    return model, config, read + say_upcast(upcast, where if where is not None else f"{trunk} + {embedder}",
                                            tsd, hsd)


#: the names that checkpoint files commonly end with
_CHECKPOINT_SUFFIXES = (".pth", ".pt", ".pth.tar", ".pt.tar", ".ckpt", ".bin", ".safetensors")


def find_pml_pair(folder: str | os.PathLike) -> tuple[Path, Path]:
    """The ``trunk_best<N>.pth`` / ``embedder_best<N>.pth`` pair with the largest common N."""
    folder = Path(folder)

    def numbered(prefix: str) -> dict[int, Path]:
        out = {}
        for p in folder.iterdir():
            m = re.fullmatch(rf"{prefix}_best(\d*)\.pth", p.name)
            if m and p.is_file():
                out[int(m.group(1) or -1)] = p
        return out

    trunks, embedders = numbered("trunk"), numbered("embedder")
    common = sorted(set(trunks) & set(embedders))
    if not common:
        found = sorted(p.name for p in folder.iterdir() if p.suffix == ".pth")
        # a run's folder of one checkpoint (Roth et al.'s checkpoint_*.pth.tar, a training script's
        # ckpt.pt): the file to give instead (was only "found none")
        single = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name.endswith(_CHECKPOINT_SUFFIXES)
                        and not re.match(r"(trunk|embedder)_", p.name))
        hint = (f"; to embed a checkpoint file of the folder, give that file (found {_keys_preview(single, 3)})"
                if single else "")
        raise EmbedscopeError(
            f"{folder}: no trunk_best<N>.pth / embedder_best<N>.pth pair with the same N (found "
            f"{_keys_preview(found)}); name the files with --trunk and --embedder{hint}")
    return trunks[common[-1]], embedders[common[-1]]


def load_pml_folder(folder: str | os.PathLike, *, arch: str | None = None, normalize: bool = True,
                    unsafe_pickle: bool = False, transform_input: bool | None = None
                    ) -> tuple[EmbeddingModel, dict[str, Any], dict[str, Any]]:
    """:func:`load_pml` on the best pair of a powerful-benchmarker ``saved_models`` folder."""
    trunk, embedder = find_pml_pair(folder)
    return load_pml(trunk, embedder, arch=arch, normalize=normalize, unsafe_pickle=unsafe_pickle,
                    transform_input=transform_input)


# ---------------------------------------------------------------------------------------------
# Roth et al.


def is_roth_checkpoint(obj: Any) -> bool:
    """Roth et al.'s ``{"state_dict", "opt", ...}``: not an embedscope checkpoint (its ``format``) that
    happens to keep an ``opt`` too, nor a training checkpoint whose ``opt`` is an optimiser's state
    dict (``{"state", "param_groups"}``), which went to the Roth et al. reader and was refused there."""
    if not (isinstance(obj, dict) and "state_dict" in obj and "opt" in obj):
        return False
    if obj.get("format") is not None:
        return False
    opt = obj["opt"]
    return not (isinstance(opt, dict) and "param_groups" in opt)


def _opt(opt: Any, name: str, default: Any = None) -> Any:
    if isinstance(opt, Record):
        return opt.get(name, default)
    if isinstance(opt, dict):
        return opt.get(name, default)
    return getattr(opt, name, default)


def _opt_items(opt: Any) -> dict[str, Any]:
    if isinstance(opt, Record):
        d = opt.state_dict_()
    elif isinstance(opt, dict):
        d = opt
    else:
        d = dict(getattr(opt, "__dict__", {}))
    return {str(k): v for k, v in d.items() if isinstance(v, (str, int, float, bool, type(None)))
            or (isinstance(v, (list, tuple)) and all(isinstance(x, (str, int, float, bool)) for x in v))}


def load_roth(obj: dict[str, Any], path: str | os.PathLike, *, arch: str | None = None,
              embed_dim: int | None = None) -> tuple[EmbeddingModel, dict[str, Any], dict[str, Any]]:
    """Roth et al.'s ``{"state_dict", "opt", "progress", "aux"}`` -> (model in eval mode, config, info)."""
    path = Path(path)
    opt = obj.get("opt")
    roth_arch = arch or _opt(opt, "arch")
    if not isinstance(roth_arch, str) or not roth_arch:
        raise EmbedscopeError(f"{path}: Roth et al. checkpoint without opt.arch: name the architecture with --arch")
    a = roth_arch.lower()
    if "multifeature" in a:
        raise EmbedscopeError(
            f"{path}: architecture '{printable(roth_arch, 60)}' (multi-feature heads) is not supported")
    base = next((b for b in ("resnet50", "bninception", "googlenet") if b in a), None)
    if base is None:
        raise EmbedscopeError(f"{path}: architecture '{printable(roth_arch, 60)}' is not one of Roth et al.'s "
                              "resnet50, bninception or googlenet")
    # their earlier code base (Deep-Metric-Learning-Baselines, netlib.py): opt.arch is plain 'resnet50' or
    # 'googlenet', its options name the miner 'sampling' (the 2020 code: 'batch_mining'); every network
    # there keeps BatchNorm frozen and L2-normalises its output unless the loss is 'npair', and its GoogLeNet
    # runs its layers one by one, so torchvision's transform_input is never applied
    dmlb = (base == a and _opt(opt, "batch_mining") is None and _opt(opt, "sampling") is not None)
    sd = check_state_dict(obj["state_dict"], str(path))
    dp = "module." if all(k.startswith("module.") for k in sd) else ""
    if dp:  # saved from a DataParallel model
        sd = {k[len("module."):]: v for k, v in sd.items()}
    if not any(k.startswith("model.") for k in sd):
        raise EmbedscopeError(f"{path}: unknown key layout for a Roth et al. checkpoint: expected 'model.*' keys, "
                              f"found {_keys_preview(sorted(sd))}")
    backbone, head, skipped = {}, {}, []
    for k, v in sd.items():
        if k.startswith("model.last_linear."):
            head["head." + k[len("model.last_linear."):]] = v
        elif k.startswith("model."):
            sub = k[len("model."):]
            if sub.startswith(("fc.", "aux1.", "aux2.")):  # googlenet: fc is last_linear; aux classifiers unused
                skipped.append(k)
            else:
                backbone["backbone." + sub] = v
        elif k.startswith("layer_blocks."):  # resnet50: the same tensors as model.layer1-4
            skipped.append(k)
        else:
            raise EmbedscopeError(f"{path}: unexpected key '{printable(k, 60)}' in a Roth et al. {base} checkpoint "
                                  "(expected model.* and layer_blocks.*)")
    if "head.weight" not in head:
        raise EmbedscopeError(f"{path}: no model.last_linear.weight (the embedding layer) in the checkpoint; found "
                              f"{_keys_preview(sorted(sd))}")
    dim = int(head["head.weight"].shape[0])
    opt_dim = embed_dim if embed_dim is not None else _opt(opt, "embed_dim")
    if opt_dim is not None:
        if isinstance(opt_dim, bool) or not isinstance(opt_dim, int):
            raise EmbedscopeError(f"{path}: opt.embed_dim must be an integer, got {printable(quoted(opt_dim), 40)}")
        if opt_dim != dim:  # (an embed_dim asked for was called the file's opt.embed_dim)
            said = f"embed_dim {opt_dim} was asked for" if embed_dim is not None else f"opt.embed_dim is {opt_dim}"
            raise EmbedscopeError(f"{path}: {said} but model.last_linear has {dim} outputs")
    fmt = DMLB_FORMAT if dmlb else ROTH_FORMAT
    config: dict[str, Any] = {
        "embed_dim": dim, "normalize": ("normalize" in a) if not dmlb else _opt(opt, "loss") != "npair",
        "frozen_bn": "frozen" in a or dmlb,
        "freeze_bn_affine": False,  # their code trains a frozen BatchNorm's scale and shift (eval mode only)
        "image_size": 227 if base == "googlenet" else 224, "resize": 256, "source_format": fmt,
        "roth_arch": roth_arch,
    }
    if base == "bninception":
        from embedscope.models.bninception import ROTH_INPUT

        config.update(input_space=dict(ROTH_INPUT), pool="avg+max" if "double" in a else "avg")
    if base == "googlenet" and not dmlb:
        config["transform_input"] = True  # torchvision's pretrained GoogLeNet, as their code builds and runs it
    for key in ("dataset", "loss", "batch_mining"):
        v = _opt(opt, key)
        if isinstance(v, str):
            config["dataset" if key == "dataset" else f"roth_{key}"] = v
    config = default_config(base, **config)
    if base == "bninception":  # default_config's Cadene convention must not override theirs
        from embedscope.models.bninception import ROTH_INPUT

        config.update(input_space=dict(ROTH_INPUT), image_size=224)
    model = build_model(config)
    def file_key(k: str) -> str:  # a key (or prefix) read as embedscope's, named as the file has it
        if k.startswith("head."):
            return f"{dp}model.last_linear.{k[len('head.'):]}"
        return dp + "model." + k[len("backbone."):] if k.startswith("backbone.") else dp + k

    # (named as the file's keys: they were named as embedscope's, 'backbone.*', which the file does not hold)
    upcast = load_into(model, {**backbone, **head}, str(path), f"a {base} model", file_key=file_key)
    fmt += say_upcast(upcast, path, backbone, head)
    model.eval()
    extra = {"roth_options": _opt_items(opt)}
    if isinstance(_opt(opt, "epoch"), int):
        extra["epoch"] = _opt(opt, "epoch")
    return model, config, {"sha256": sha256_file(path), "extra": extra, "path": str(path), "format": fmt}


# ---------------------------------------------------------------------------------------------
# ImageNet baselines and the one entry point for `embed`


def build_pretrained(arch: str, *, weights: str | os.PathLike | None = None, head: str = "none",
                     embed_dim: int | None = None, head_seed: int | None = None, normalize: bool = True,
                     unsafe_pickle: bool = False, ema: bool = False, transform_input: bool | None = None
                     ) -> tuple[EmbeddingModel, dict[str, Any], dict[str, Any]]:
    """A backbone with local ImageNet weights and no trained head -> (model in eval mode, config, info).

    ``head="none"``: the pooled features ("ImageNet features"); ``head="random"``: a linear layer
    drawn from ``torch.manual_seed(head_seed)`` (default 0) with PyTorch's default initialisation, output
    L2-normalised (Roth et al. Table 2, "ImageNet + random normalised head", docs/methods.md §7).
    Without ``weights`` the backbone keeps its random initialisation (an untrained baseline), drawn from
    ``torch.manual_seed(head_seed)`` (0 by default; recorded as ``backbone_seed``): the same network each run.
    ``ema``: the EMA copy of a training checkpoint's weights (timm's ``state_dict_ema``,
    :func:`~embedscope.models.checkpoint.load_backbone_weights`). GoogLeNet / Inception-v3 with
    ``weights`` run with ``transform_input=True`` (torchvision's ImageNet files expect it) unless
    ``transform_input=False`` (weights trained from scratch).
    """
    if head not in ("none", "random"):
        raise UsageError(f"--head {head} needs a trained checkpoint; without one use --head none or --head random")
    if head == "none" and embed_dim is not None:
        raise UsageError("--embed-dim applies to --head random (--head none keeps the backbone's feature size)")
    if head == "none" and head_seed is not None and weights is not None:
        raise UsageError("--head-seed applies to --head random, or to a backbone without --weights (--head none has no "
                         "head to draw)")
    if embed_dim is not None and (isinstance(embed_dim, bool) or not isinstance(embed_dim, int) or embed_dim < 1):
        raise UsageError(f"--embed-dim must be a positive integer, got {quoted(embed_dim)}")
    cfg = default_config(arch, head=head, normalize=bool(normalize), frozen_bn=False,
                         embed_dim=embed_dim if head == "random" else None,
                         # (--head none draws no head: no head_seed recorded, info and the file's config said 0)
                         head_seed=int(head_seed or 0) if head == "random" else None,
                         source_format="imagenet-baseline")
    if ema and weights is None:
        raise UsageError("--ema picks the EMA weights of a file: give --weights (or a checkpoint)")
    if transform_input is not None and arch not in ("googlenet", "inception_v3"):
        raise UsageError(f"--no-transform-input applies to GoogLeNet / Inception-v3, not {printable(arch, 40)}")
    if weights is not None and arch in ("googlenet", "inception_v3") and transform_input is not False:
        cfg["transform_input"] = True  # torchvision's ImageNet weights for these expect it
    if head == "none":
        cfg.pop("embed_dim", None)
    if weights is None:
        # an untrained baseline: the backbone's random initialisation drawn from a recorded seed (the head
        # seed, 0 by default), so that the same command builds the same network (it came from torch's unseeded
        # global generator: two runs of one command gave other embeddings and maps); torch's global state is
        # left as it was
        cfg["backbone_seed"] = int(head_seed or 0)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg["backbone_seed"])
            model = build_model(cfg)
    else:
        model = build_model(cfg)
    cfg["embed_dim"] = model.embed_dim
    info: dict[str, Any] = {"extra": {}, "format": "backbone only", "path": ""}
    if weights is not None:
        fmt = load_backbone_weights(model, weights, unsafe_pickle=unsafe_pickle, ema=ema)
        cfg["weights"] = str(Path(weights).resolve())
        if ema:
            cfg["weights_ema"] = True
        # the format read ("backbone weights from a timm training checkpoint (state_dict_ema)"), not
        # "ImageNet backbone weights" whatever the file was
        info.update(sha256=sha256_file(weights), path=str(weights), format=fmt)
    else:
        info["sha256"] = ""
    model.eval()
    return model, cfg, info


def load_model(checkpoint: str | os.PathLike | None = None, *, arch: str | None = None,
               weights: str | os.PathLike | None = None, head: str | None = None, embed_dim: int | None = None,
               head_seed: int | None = None, trunk: str | os.PathLike | None = None,
               embedder: str | os.PathLike | None = None, normalize: bool | None = None,
               unsafe_pickle: bool = False, ema: bool = False, transform_input: bool | None = None
               ) -> tuple[EmbeddingModel, dict[str, Any], dict[str, Any]]:
    """The model for ``embedscope embed`` from its options -> (model in eval mode, config, info).

    Exactly one source: ``checkpoint`` (embedscope format, bare state dict with ``arch``, Roth et
    al.'s file, or a powerful-benchmarker folder), ``trunk`` + ``embedder``, or ``arch`` alone
    (ImageNet baseline: ``weights``, ``head`` none|random, ``embed_dim``, ``head_seed``).
    ``info`` holds ``sha256``, ``path``, ``format`` and ``extra``.

    ``ema`` (``--ema``): a training checkpoint's EMA weights (timm's ``state_dict_ema``) instead of
    its ``state_dict``, for a checkpoint or ``weights``; a file without them is a one-line error.
    ``transform_input=False`` (``--no-transform-input``): a GoogLeNet / Inception-v3 trunk or
    ``weights`` trained from scratch, run without torchvision's ImageNet input transform.
    """
    if (trunk is None) != (embedder is None):
        raise UsageError("--trunk and --embedder go together (the two files of a pytorch-metric-learning model)")
    if trunk is not None:
        if checkpoint is not None or weights is not None or head is not None:
            raise UsageError("--trunk/--embedder replace the checkpoint: give no checkpoint, --weights or --head")
        if ema:
            raise UsageError("--ema picks the EMA weights of a training checkpoint or --weights file; "
                             "pytorch-metric-learning's trunk and embedder files hold none")
        if embed_dim is not None or head_seed is not None:
            raise UsageError(f"{'--embed-dim' if embed_dim is not None else '--head-seed'} sets --head random's "
                             "head; a trunk/embedder pair embeds with its embedder")
        return load_pml(trunk, embedder, arch=arch, normalize=True if normalize is None else normalize,
                        unsafe_pickle=unsafe_pickle, transform_input=transform_input)
    if checkpoint is not None:
        if weights is not None or head is not None:
            given = " and ".join(f for f, v in (("--weights", weights), ("--head", head)) if v is not None)
            both = " and " in given
            raise UsageError(f"{given} build{'' if both else 's'} a model without a checkpoint (an ImageNet baseline, "
                             f"with --arch): with a checkpoint give {'neither' if both else 'no ' + given}")
        if embed_dim is not None or head_seed is not None:  # (a size other than the file's failed as a shape
            # mismatch, the same size and any --head-seed were ignored)
            flag = "--embed-dim" if embed_dim is not None else "--head-seed"
            raise UsageError(f"{flag} sets --head random's head; a checkpoint embeds with its own head (give no "
                             f"{flag})")
        model, config, info = load_checkpoint_any(checkpoint, arch=arch, unsafe_pickle=unsafe_pickle, ema=ema,
                                                  transform_input=transform_input)
        if normalize is not None and bool(normalize) != model.normalize:
            model.normalize = bool(normalize)
            config["normalize"] = bool(normalize)
        return model, config, info
    if not arch:
        raise UsageError("name a checkpoint, --trunk/--embedder, or --arch (with --weights) for an ImageNet baseline")
    return build_pretrained(arch, weights=weights, head=head or "none", embed_dim=embed_dim, head_seed=head_seed,
                            normalize=True if normalize is None else normalize, unsafe_pickle=unsafe_pickle,
                            ema=ema, transform_input=transform_input)


def load_checkpoint_any(path, **kw):
    from embedscope.models.checkpoint import load_checkpoint

    return load_checkpoint(path, **kw)
