"""One question of an embedding file, one call: each function returns a :class:`Result`.

>>> from embedscope.analyses import evaluate          # doctest: +SKIP
>>> r = evaluate("digits.h5", split="test")           # doctest: +SKIP
>>> r["R@1"], r.to_frame()                             # doctest: +SKIP

Imports are lazy, so ``embedscope --help`` stays fast.
"""

from __future__ import annotations

from embedscope._lazy import lazy_exports

_EXPORTS = {
    "Result": "embedscope.analyses.result",
    "ResultSet": "embedscope.analyses.result",
    "combine": "embedscope.analyses.result",
    # retrieval (docs/methods.md §1)
    "evaluate": "embedscope.analyses.retrieval",
    "evaluate_many": "embedscope.analyses.retrieval",
    "worst_classes": "embedscope.analyses.retrieval",
    # geometry (§2-§4)
    "geometry": "embedscope.analyses.structure",
    "spectrum": "embedscope.analyses.structure",
    # pictures (§10)
    "tsne": "embedscope.analyses.maps",
    "yoke": "embedscope.analyses.maps",
    "scatter": "embedscope.analyses.neighbours",
    "neighbour_examples": "embedscope.analyses.neighbours",
    "neighbours_figure": "embedscope.analyses.neighbours",
    # image properties (§9)
    "properties": "embedscope.analyses.image_properties",
    # the measure registry
    "MEASURES": "embedscope.analyses.registry",
    "Measure": "embedscope.analyses.registry",
    "compute_measures": "embedscope.analyses.registry",
    "available": "embedscope.analyses.registry",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
