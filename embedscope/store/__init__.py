"""The files every analysis reads: embeddings (``embeddings.py``, layout in ``docs/store.md``).

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

__all__ = ["EmbeddingSet", "load", "save", "match_by_path", "FORMAT_VERSION", "SPLITS"]
