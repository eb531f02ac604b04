"""The files every analysis reads: embeddings (``embeddings.py``, layout in ``docs/store.md``) and
saliency maps (``saliency.py``, layout in ``docs/saliency.md``).

``from embedscope import store``; ``store.load(path)``, ``store.save(path, es)``,
``store.EmbeddingSet.from_arrays(X, y)``, ``store.match_by_path(a, b)``.
"""

from __future__ import annotations

from embedscope.names import SPLITS
from embedscope.store.embeddings import (
    FORMAT_VERSION,
    EmbeddingSet,
    load,
    match_by_path,
    save,
)

_MAPS = ("SaliencyMaps", "load_maps", "save_maps", "match_maps")
__all__ = ["EmbeddingSet", "load", "save", "match_by_path", "FORMAT_VERSION", "SPLITS", *_MAPS]


def __getattr__(name: str):  # the maps file is read lazily (it imports nothing heavy, but keep it apart)
    if name in _MAPS:
        from embedscope.store import saliency

        return getattr(saliency, name)
    # embedscope.store.saliency (docs/store.md: store.saliency.match_rows) after a bare `import embedscope`,
    # as every other package's modules load (docs/architecture.md)
    from embedscope._lazy import module_getattr

    return module_getattr(__name__)(name)


def __dir__():
    return sorted(set(globals()) | set(__all__))
