"""The checkpoint format (``docs/checkpoint.md``) and safe loading.

A checkpoint is a ``torch.save``d dict::

    {"format": "embedscope-checkpoint", "format_version": 1,
     "state_dict": {...tensors...},            # EmbeddingModel.state_dict()
     "config": {"arch", "embed_dim", "normalize", "frozen_bn", "image_size", "dataset", ...},
     "extra": {...}}                           # optional: epoch, metrics, optimiser state for --resume

Everything in it is loadable with ``torch.load(weights_only=True)``. A bare state dict (for instance
from another code base) loads when the architecture is named (``--arch``). A pickle that needs
arbitrary code to load is refused unless the user passes ``--unsafe-pickle``.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import torch

from embedscope.errors import EmbedscopeError
from embedscope.fileio import atomic_output, sha256_file
from embedscope.models.backbones import EmbeddingModel, build_model, default_config

FORMAT = "embedscope-checkpoint"
FORMAT_VERSION = 1


def save_checkpoint(path: str | os.PathLike, model: EmbeddingModel, config: dict[str, Any], *,
                    extra: dict[str, Any] | None = None, force: bool = False) -> Path:
    """Atomically write a checkpoint (temporary file in the same folder, then rename)."""
    obj = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "config": dict(config),
        "extra": dict(extra or {}),
    }
    with atomic_output(path, force=force) as tmp:
        torch.save(obj, tmp)
    return Path(path)


def read_checkpoint(path: str | os.PathLike, *, unsafe_pickle: bool = False) -> Any:
    """``torch.load`` with ``weights_only=True``; a pickle needing code is refused unless allowed."""
    path = Path(path)
    if not path.exists():
        raise EmbedscopeError(f"{path}: no such checkpoint file")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if not unsafe_pickle:
            first = str(e).strip().splitlines()[0] if str(e).strip() else "needs arbitrary code"
            raise EmbedscopeError(
                f"{path}: refusing to unpickle: the file needs more than tensors to load ({first[:120]}); "
                "pass --unsafe-pickle only if you trust its source"
            ) from None
    except Exception as e:  # noqa: BLE001 - any other failure means the bytes are not a checkpoint
        raise EmbedscopeError(f"{path}: not a readable PyTorch checkpoint ({e.__class__.__name__})") from None
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001
        raise EmbedscopeError(f"{path}: not a readable PyTorch checkpoint ({e.__class__.__name__}: {e})") from None


def _strip_prefix(sd: dict[str, Any]) -> dict[str, Any]:
    for prefix in ("module.", "model."):
        if sd and all(k.startswith(prefix) for k in sd):
            sd = {k[len(prefix):]: v for k, v in sd.items()}
    return sd


def load_checkpoint(path: str | os.PathLike, *, arch: str | None = None, embed_dim: int | None = None,
                    unsafe_pickle: bool = False) -> tuple[EmbeddingModel, dict[str, Any], dict[str, Any]]:
    """Load a checkpoint -> (model in eval mode, config, info with ``sha256`` and ``extra``)."""
    obj = read_checkpoint(path, unsafe_pickle=unsafe_pickle)
    if isinstance(obj, torch.nn.Module):  # a whole pickled module (only with --unsafe-pickle)
        obj = {"state_dict": obj.state_dict()}
    if not isinstance(obj, dict):
        raise EmbedscopeError(f"{path}: expected a dict with 'state_dict' and 'config', got {type(obj).__name__}")
    if "state_dict" in obj:
        sd = obj["state_dict"]
        config = dict(obj.get("config") or {})
        extra = dict(obj.get("extra") or {})
    elif obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        sd, config, extra = obj, {}, {}
    else:
        raise EmbedscopeError(f"{path}: no 'state_dict' in the checkpoint (keys: {', '.join(list(obj)[:6])})")
    sd = _strip_prefix(dict(sd))
    if arch:
        config["arch"] = arch
    if "arch" not in config:
        raise EmbedscopeError(f"{path}: a bare state dict has no config: name the architecture with --arch")
    if "head.weight" in sd:
        config.setdefault("embed_dim", int(sd["head.weight"].shape[0]))
    if embed_dim:
        config["embed_dim"] = int(embed_dim)
    arch_name = config.pop("arch")
    config = default_config(arch_name, **config)
    model = build_model(config)
    try:
        missing, unexpected = model.load_state_dict(sd, strict=False)
    except RuntimeError as e:  # shape mismatches
        first = str(e).strip().splitlines()[-1].strip()[:160]
        raise EmbedscopeError(f"{path}: weights do not fit a {config['arch']} model ({first})") from None
    if missing or unexpected:
        what = []
        if missing:
            what.append(f"missing {len(missing)} key(s) e.g. {missing[0]}")
        if unexpected:
            what.append(f"unexpected {len(unexpected)} key(s) e.g. {unexpected[0]}")
        raise EmbedscopeError(f"{path}: weights do not fit a {config['arch']} model ({'; '.join(what)})")
    model.eval()
    return model, config, {"sha256": sha256_file(path), "extra": extra, "path": str(path)}


def load_backbone_weights(model: EmbeddingModel, path: str | os.PathLike, *, unsafe_pickle: bool = False) -> None:
    """Load pretrained backbone weights (e.g. torchvision's ImageNet ResNet-50 file) from a local file.

    The classifier (``fc.*``) is dropped; every backbone tensor must match. There is no download.
    """
    obj = read_checkpoint(path, unsafe_pickle=unsafe_pickle)
    if isinstance(obj, dict) and "state_dict" in obj:
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise EmbedscopeError(f"{path}: expected a state dict of backbone weights")
    sd = _strip_prefix({k: v for k, v in obj.items() if isinstance(v, torch.Tensor)})
    if any(k.startswith("backbone.") for k in sd):
        sd = {k[len("backbone."):]: v for k, v in sd.items() if k.startswith("backbone.")}
    sd = {k: v for k, v in sd.items() if not k.startswith(("fc.", "aux1.", "aux2."))}
    try:
        missing, unexpected = model.backbone.load_state_dict(sd, strict=False)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[-1].strip()[:160]
        raise EmbedscopeError(f"{path}: weights do not fit the {model.arch} backbone ({first})") from None
    if missing or unexpected:
        raise EmbedscopeError(
            f"{path}: weights do not fit the {model.arch} backbone "
            f"({len(missing)} missing, {len(unexpected)} unexpected keys"
            + (f", e.g. {(missing or unexpected)[0]}" if (missing or unexpected) else "") + ")"
        )
