"""Measures on embedding arrays: plain functions, each citing its METHODS.md section.

Imports are lazy (``from embedscope.metrics import spectral_decay`` loads only what it needs).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    # retrieval and clustering (METHODS.md §1)
    "retrieval_metrics": "embedscope.metrics.retrieval",
    "knn_search": "embedscope.metrics.search",
    "relevant_ranks": "embedscope.metrics.search",
    "kmeans_nmi_f1": "embedscope.metrics.clustering",
    # spectra (§2, §4)
    "singular_values": "embedscope.metrics.spectral",
    "spectral_decay": "embedscope.metrics.spectral",
    "class_conditioned_spectra": "embedscope.metrics.spectral",
    "effective_rank": "embedscope.metrics.spectral",
    "alpha_req": "embedscope.metrics.spectral",
    # class distances and geometry (§3, §4)
    "class_distances": "embedscope.metrics.geometry",
    "alignment_uniformity": "embedscope.metrics.geometry",
    "geometry_report": "embedscope.metrics.geometry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'embedscope.metrics' has no attribute '{name}'")


def __dir__():
    return __all__
