"""Saliency maps of embedding models and their agreement between models (Kobs et al. §3; docs/methods.md §8).

:func:`saliency_maps` (SmoothGrad of the loss-specific distance to a black image),
:func:`pair_saliency_maps` (why are two images near each other?), the maps file
(:mod:`embedscope.store.saliency`) and the orchestration behind ``embedscope saliency`` and
``embedscope saliency-agreement`` (:mod:`embedscope.saliency.run`). Imports are lazy.
"""

from __future__ import annotations

from embedscope._lazy import lazy_exports

_EXPORTS = {
    "saliency_maps": "embedscope.saliency.smoothgrad",
    "pair_saliency_maps": "embedscope.saliency.smoothgrad",
    "nearest_retrievals": "embedscope.saliency.smoothgrad",
    "black_image": "embedscope.saliency.smoothgrad",
    "ORDERS": "embedscope.saliency.smoothgrad",
    "SaliencyMaps": "embedscope.store.saliency",
    "save_maps": "embedscope.store.saliency",
    "load_maps": "embedscope.store.saliency",
    "saliency_to_file": "embedscope.saliency.run",
    "agreement_of_files": "embedscope.saliency.run",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
