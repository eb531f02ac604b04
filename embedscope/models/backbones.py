"""Backbones (torchvision, no download path) and the embedding head of the DML papers."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
import torch.nn.functional as F

ARCHS = ("resnet50", "resnet18", "googlenet", "digits_cnn")


class DigitsCNN(nn.Module):
    """A small CNN for 1 x 8 x 8 digit images; 128-d pooled features."""

    feat_dim = 128

    def __init__(self, in_channels: int = 1) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


def make_backbone(arch: str) -> tuple[nn.Module, int]:
    """A feature extractor (classifier removed) and its feature dimension; random initialisation."""
    from torchvision import models as tvm

    if arch == "digits_cnn":
        m = DigitsCNN()
        return m, m.feat_dim
    if arch in ("resnet50", "resnet18"):
        m = getattr(tvm, arch)(weights=None)
        dim = m.fc.in_features
        m.fc = nn.Identity()
        return m, dim
    if arch == "googlenet":
        m = tvm.googlenet(weights=None, aux_logits=False, init_weights=True)
        dim = m.fc.in_features
        m.fc = nn.Identity()
        m.dropout = nn.Identity()
        return m, dim
    from embedscope.errors import EmbedscopeError

    raise EmbedscopeError(f"unknown architecture '{arch}' (choose {', '.join(ARCHS)})")


class EmbeddingModel(nn.Module):
    """backbone -> Linear(feat_dim, embed_dim) -> optional L2 normalisation (Roth §4.1).

    ``frozen_bn=True`` keeps every BatchNorm layer in eval mode with fixed parameters, as in Roth
    et al. and Musgrave et al.
    """

    def __init__(self, arch: str, embed_dim: int = 128, *, normalize: bool = True, frozen_bn: bool = False) -> None:
        super().__init__()
        self.arch = arch
        self.embed_dim = int(embed_dim)
        self.normalize = bool(normalize)
        self.frozen_bn = bool(frozen_bn)
        self.backbone, self.feat_dim = make_backbone(arch)
        self.head = nn.Linear(self.feat_dim, self.embed_dim)
        if self.frozen_bn:
            for m in self.backbone.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    for p in m.parameters():
                        p.requires_grad_(False)

    def train(self, mode: bool = True) -> "EmbeddingModel":
        super().train(mode)
        if mode and self.frozen_bn:
            for m in self.backbone.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.eval()
        return self

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.head(self.backbone(x))
        return F.normalize(z, dim=1) if self.normalize else z


DEFAULT_CONFIG: dict[str, Any] = {
    "arch": "resnet50",
    "embed_dim": 128,
    "normalize": True,
    "frozen_bn": True,
    "image_size": 224,
    "dataset": None,
}


def default_config(arch: str, **overrides: Any) -> dict[str, Any]:
    """The model config of the papers' protocol, adapted to ``arch`` (digits: 8 px, no frozen BN)."""
    cfg = dict(DEFAULT_CONFIG, arch=arch)
    if arch == "digits_cnn":
        cfg.update(image_size=8, frozen_bn=False, dataset="digits")
    cfg.update({k: v for k, v in overrides.items() if v is not None})
    return cfg


def build_model(config: dict[str, Any]) -> EmbeddingModel:
    """An :class:`EmbeddingModel` from a checkpoint config."""
    return EmbeddingModel(
        config["arch"],
        int(config.get("embed_dim", 128)),
        normalize=bool(config.get("normalize", True)),
        frozen_bn=bool(config.get("frozen_bn", False)),
    )
