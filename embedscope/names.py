"""Names shared by the library and the command line (torch-free, so ``--help`` stays fast).

Choice lists of the commands come from here (or from the module that owns the concept when
that module is torch-free), never from copies.
"""

from __future__ import annotations

import re

#: Values of the ``split`` field of an embedding file. train/test: the zero-shot split of the
#: papers; val: a validation split; query/gallery: In-Shop-style retrieval protocols.
SPLITS: tuple[str, ...] = ("train", "test", "val", "query", "gallery")
#: A ``--split`` option also takes "all" (every row).
SPLIT_CHOICES: tuple[str, ...] = SPLITS + ("all",)

#: Ranking distances of the retrieval metrics (numpy side; docs/methods.md §1).
RETRIEVAL_METRICS: tuple[str, ...] = ("cosine", "euclidean")
#: Similarities of the same-vs-different scatter (docs/methods.md §10).
SIMILARITY_METRICS: tuple[str, ...] = ("cosine", "dot", "euclidean")
#: Distances of the class-distance measures π (docs/methods.md §3).
GEOMETRY_METRICS: tuple[str, ...] = ("cosine", "sqeuclidean")
#: Loss-specific distances of the torch side (``embedscope.models.distances``; docs/methods.md §8).
DISTANCES: tuple[str, ...] = ("euclidean", "sqeuclidean", "cosine", "dot", "snr")

#: Training objectives, miners, samplers and architectures (``embedscope.train``, ``embedscope.models``).
LOSSES: tuple[str, ...] = ("margin", "triplet", "contrastive", "multisimilarity", "proxynca", "npair", "lifted",
                           "arcface", "softmax", "softtriple", "snr")
MINERS: tuple[str, ...] = ("distance", "semihard", "random", "softhard")
SAMPLERS: tuple[str, ...] = ("spc-2", "spc-4", "spc-8", "spc-r", "random", "gc", "ddm", "frd")
#: Named architectures of ``embedscope train`` (``embed`` also takes torchvision / timm names).
ARCHS: tuple[str, ...] = ("resnet50", "resnet18", "googlenet", "bninception", "digits_cnn", "shapes_cnn")
#: the notes of a study's correlations.csv (``note``), one per reason a statistic is missing or
#: degenerate (embedscope.study.stats writes them, embedscope.viz.study reads them)
NOTE_TOO_FEW = "not defined: fewer than 2 points with a value"
NOTE_MEASURE_CONSTANT = "not defined: the measure is the same at every point"
NOTE_TWO_POINTS = "2 points: ±1 whatever the values (no interval or p-value)"


def natural_key(name: str) -> tuple:
    """Sort key of a class name with its digit runs compared as numbers (``"class 2"`` before
    ``"class 10"``), letters case-insensitively, the name itself last (a total order)."""
    parts = re.split(r"(\d+)", name)
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t.casefold()) for t in parts if t), name


def class_name_ranks(labels, class_names):
    """Each row's class as its rank among ``class_names`` in natural order (:func:`natural_key`): a key of the
    class by its *name*, the same whatever order a file lists its classes in (``labels`` index
    ``class_names``). The t-SNE subsample draws each class's rows in this order, so that two files of the
    same images whose class lists differ in order keep the same rows."""
    import numpy as np

    names = [str(c) for c in class_names]
    order = sorted(range(len(names)), key=lambda i: natural_key(names[i]))
    rank = np.empty(len(names), dtype=np.int64)
    rank[order] = np.arange(len(names))
    return rank[np.asarray(labels, dtype=np.int64)] if len(names) else np.zeros(len(labels), dtype=np.int64)


#: the figures a study draws, largest first (file names in its figures/ folder): the names of
#: :data:`embedscope.viz.study.FIGURES`, which takes them from here; the command line
#: (:func:`embedscope.study.run.stale_figures`) reads them without importing matplotlib
STUDY_FIGURES: tuple[str, ...] = ("fig5_structure_vs_target", "fig4_metric_correlations", "ranking_by_tau")


def bn_affine_frozen(config: dict) -> bool:
    """Whether a run of ``config`` keeps the scale and shift (γ, β) of its frozen BatchNorm fixed
    (:class:`embedscope.models.backbones.EmbeddingModel`'s
    ``freeze_bn_affine``): the config's ``freeze_bn_affine`` where it has one;
    a config saved before the key existed trained with them fixed whenever BatchNorm was frozen
    (``frozen_bn``), so it reads as that."""
    if "freeze_bn_affine" in config and config["freeze_bn_affine"] is not None:
        return bool(config["freeze_bn_affine"])
    return bool(config.get("frozen_bn", False))
