"""Reading the inputs of an analysis: an :class:`EmbeddingSet`, a path, or arrays."""

from __future__ import annotations

import os
from typing import Any

from embedscope.errors import EmbedscopeError


def as_set(source: Any):
    """An :class:`~embedscope.store.EmbeddingSet` from a set, a path to an embedding file, or ``(X, y)``."""
    from embedscope.store import EmbeddingSet, load

    if isinstance(source, EmbeddingSet):
        return source
    if isinstance(source, (str, os.PathLike)):
        es = load(source)
        from embedscope.fileio import sha256_file

        es.attrs["_sha256"] = sha256_file(source)
        return es
    if isinstance(source, tuple) and len(source) == 2:
        return EmbeddingSet.from_arrays(*source)
    raise EmbedscopeError(f"expected an EmbeddingSet, a path to an embedding file or (X, y), got "
                          f"{type(source).__name__}")
