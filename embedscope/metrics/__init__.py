"""Measures on embedding arrays: plain functions, each citing its docs/methods.md section.

Imports are lazy (``from embedscope.metrics import spectral_decay`` loads only what it needs).
"""

from __future__ import annotations

from embedscope._lazy import lazy_exports

_EXPORTS = {
    # retrieval and clustering (docs/methods.md §1)
    "retrieval_metrics": "embedscope.metrics.retrieval",
    "knn_search": "embedscope.metrics.search",
    "relevant_ranks": "embedscope.metrics.search",
    "kmeans_nmi_f1": "embedscope.metrics.clustering",
    "kmeans_labels": "embedscope.metrics.clustering",
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
    # nearest same-class / other-class similarity, share below the diagonal (§10)
    "nearest_same_different": "embedscope.metrics.neighbours",
    "share_below_diagonal": "embedscope.metrics.neighbours",
    # saliency-map agreement (§8)
    "map_agreement": "embedscope.metrics.agreement",
    "agreement_matrix": "embedscope.metrics.agreement",
    "pearson_per_image": "embedscope.metrics.agreement",
    "jsd_per_image": "embedscope.metrics.agreement",
    "fisher_z_mean": "embedscope.metrics.agreement",
    # image properties, Normalized R-Precision (§9)
    "property_precision": "embedscope.metrics.properties",
    "compare_groups": "embedscope.metrics.properties",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
