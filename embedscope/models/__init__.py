"""Backbones, the embedding head, the checkpoint format and the readers of other code bases' files."""

from embedscope._lazy import module_getattr
from embedscope.models.adapters import (
    build_pretrained,
    detect_arch,
    load_model,
    load_pml,
    load_pml_folder,
    load_roth,
)
from embedscope.models.backbones import (
    ARCHS,
    HEADS,
    DigitsCNN,
    EmbeddingModel,
    build_model,
    default_config,
    describe_input,
    is_known_arch,
    make_backbone,
)
from embedscope.models.checkpoint import (
    Record,
    load_backbone_weights,
    load_checkpoint,
    printable,
    read_checkpoint,
    safe_load,
    save_checkpoint,
)

__all__ = [
    "ARCHS", "HEADS", "DigitsCNN", "EmbeddingModel", "Record", "build_model", "build_pretrained",
    "default_config", "describe_input", "detect_arch", "is_known_arch", "load_backbone_weights", "load_checkpoint",
    "load_model", "load_pml", "load_pml_folder", "load_roth", "make_backbone", "printable",
    "read_checkpoint", "safe_load", "save_checkpoint",
]

# embedscope.models.distances (docs/saliency.md) ... after a bare `import embedscope`, as every other
# package's modules load (docs/architecture.md)
__getattr__ = module_getattr(__name__)
