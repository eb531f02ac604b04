"""Backbones, the embedding head and the checkpoint format."""

from embedscope.models.backbones import ARCHS, DigitsCNN, EmbeddingModel, build_model, default_config
from embedscope.models.checkpoint import (
    load_backbone_weights,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)

__all__ = [
    "ARCHS", "DigitsCNN", "EmbeddingModel", "build_model", "default_config",
    "load_backbone_weights", "load_checkpoint", "read_checkpoint", "save_checkpoint",
]
