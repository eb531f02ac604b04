"""Figures: drawing only (the numbers come from :mod:`embedscope.metrics` and :mod:`embedscope.tsne`).

One hop to any picture: ``from embedscope.viz import plot_yoked_tsne``. The figure style (paper
settings, the one class → colour map, legends) is :mod:`embedscope.viz.style`; saving (PNG + PDF,
atomically) is :func:`save_figure`. Imports are lazy: importing this package loads no matplotlib.

For compatibility the computations that used to live here (``yoked_tsne``, ``joint_tsne``,
``nearest_same_different``, ``stratified_subsample``, ...) are importable from here too; their
homes are :mod:`embedscope.tsne` and :mod:`embedscope.metrics`.
"""

from __future__ import annotations

from embedscope._lazy import lazy_exports

_EXPORTS = {
    # saving
    "save_figure": "embedscope.viz.figures",
    "figure_paths": "embedscope.viz.figures",
    "use_agg": "embedscope.viz.figures",
    # style: paper settings, the class -> colour map, colours, legends
    "PAPER_RC": "embedscope.viz.style",
    "ClassPalette": "embedscope.viz.style",
    "class_colors": "embedscope.viz.style",
    "palette_colors": "embedscope.viz.style",
    "series_colors": "embedscope.viz.style",
    "TRAIN_COLOR": "embedscope.viz.style",
    "TEST_COLOR": "embedscope.viz.style",
    # t-SNE maps (docs/methods.md §10)
    "plot_tsne": "embedscope.viz.tsne",
    "plot_joint_tsne": "embedscope.viz.tsne",
    "plot_yoked_tsne": "embedscope.viz.tsne",
    "plot_yoked_maps": "embedscope.viz.tsne",
    # same-vs-different scatter (§10)
    "plot_same_different": "embedscope.viz.scatter",
    # singular-value spectra (§2)
    "plot_spectra": "embedscope.viz.spectrum",
    "normalized_spectrum": "embedscope.viz.spectrum",
    # computations, re-exported from their homes for compatibility
    "joint_tsne": "embedscope.tsne.joint",
    "single_tsne": "embedscope.tsne.joint",
    "yoked_tsne": "embedscope.tsne.yoked",
    "default_alpha": "embedscope.tsne.yoked",
    "stratified_subsample": "embedscope.tsne.sampling",
    "nearest_same_different": "embedscope.metrics.neighbours",
    "share_below_diagonal": "embedscope.metrics.neighbours",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
