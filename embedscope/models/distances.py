"""Loss-specific distances on the torch side (docs/methods.md §8; Kobs et al. Table 1 and reference code).

Every distance takes two batches of embeddings ``a`` [B, D] and ``b`` [B, D] (or [1, D], broadcast)
and returns one value per row [B]. Both sides are **L2-normalised first** (``F.normalize``, eps
1e-12), as the pytorch-metric-learning distance objects of the reference code do by default; the
functions are differentiable, so saliency maps (:mod:`embedscope.saliency`) take their gradient.

========== ============================================== ==================================
name       value                                          used for (docs/methods.md §8)
========== ============================================== ==================================
euclidean  ‖â − b̂‖₂                                       untrained, contrastive, triplet,
                                                          margin (and lifted)
sqeuclidean ‖â − b̂‖₂²                                     ProxyNCA, FastAP
cosine     â · b̂  (a similarity)                           NT-Xent, CosFace, ArcFace, MS,
                                                          SoftTriple, normalised softmax
dot        â · b̂  (on normalised rows = cosine)           N-pair (trained on raw dot products)
snr        var(b̂ − â) / var(â)  (a = the query/anchor)    SNR
========== ============================================== ==================================

Smaller is closer for euclidean, sqeuclidean and snr; larger is closer for cosine and dot. The
saliency maps take absolute values of the gradient, so the sign does not matter there.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from embedscope.errors import EmbedscopeError
from embedscope.families import ROTH_LOSS_NAMES, UNTRAINED_FORMATS, _loss_key, is_untrained, trained_loss  # noqa: F401
from embedscope.names import DISTANCES

#: Loss name -> distance name (docs/methods.md §8). Keys are this project's loss names
#: (``embedscope.train.losses``) and Kobs et al.'s names of the losses we do not train.
LOSS_DISTANCES: dict[str, str] = {
    # Euclidean
    "untrained": "euclidean",
    "contrastive": "euclidean",
    "triplet": "euclidean",
    "margin": "euclidean",
    "lifted": "euclidean",
    # squared Euclidean
    "proxynca": "sqeuclidean",
    "fastap": "sqeuclidean",
    # cosine similarity
    "ntxent": "cosine",
    "cosface": "cosine",
    "arcface": "cosine",
    "multisimilarity": "cosine",
    "softtriple": "cosine",
    "softmax": "cosine",
    "normalizedsoftmax": "cosine",
    # raw dot product in training; on normalised rows it equals the cosine
    "npair": "dot",
    # signal-to-noise ratio
    "snr": "snr",
}

#: Which direction means "closer" for each distance (docs/methods.md §8).
CLOSER_IS: dict[str, str] = {"euclidean": "smaller", "sqeuclidean": "smaller", "snr": "smaller",
                             "cosine": "larger", "dot": "larger"}


def _normalize(x):
    import torch
    import torch.nn.functional as F

    if x.dtype in (torch.float16, torch.bfloat16):  # autocast outputs: distances in float32
        x = x.float()
    return F.normalize(x, p=2, dim=-1, eps=1e-12)


def euclidean(a, b):
    """‖â − b̂‖₂ per row on L2-normalised rows (docs/methods.md §8). Smaller = closer."""
    import torch

    return torch.linalg.vector_norm(_normalize(a) - _normalize(b), dim=-1)


def sqeuclidean(a, b):
    """‖â − b̂‖₂² per row on L2-normalised rows (docs/methods.md §8). Smaller = closer."""
    d = _normalize(a) - _normalize(b)
    return (d * d).sum(dim=-1)


def cosine(a, b):
    """Cosine similarity â · b̂ per row (docs/methods.md §8). Larger = closer."""
    return (_normalize(a) * _normalize(b)).sum(dim=-1)


def dot(a, b):
    """Dot product of the L2-normalised rows (equals :func:`cosine`; docs/methods.md §8). Larger = closer."""
    return (_normalize(a) * _normalize(b)).sum(dim=-1)


def snr(a, b):
    """SNR distance var(b̂ − â) / var(â) per row, ``a`` the query (docs/methods.md §8). Smaller = closer.

    As pytorch-metric-learning's ``SNRDistance`` (query = first argument, variances over the D
    coordinates; the ddof cancels in the ratio).
    """
    import torch

    a_n, b_n = _normalize(a), _normalize(b)
    return torch.var(b_n - a_n, dim=-1) / torch.var(a_n, dim=-1)


_FUNCS: dict[str, Callable] = {"euclidean": euclidean, "sqeuclidean": sqeuclidean, "cosine": cosine,
                               "dot": dot, "snr": snr}
assert tuple(_FUNCS) == DISTANCES


def check_distance(name: str) -> str:
    """Return ``name`` if it is a known distance, else raise a one-line :class:`EmbedscopeError`."""
    if not isinstance(name, str) or name not in _FUNCS:
        raise EmbedscopeError(f"unknown distance '{name}' (choose {', '.join(DISTANCES)})")
    return name


def get_distance(name: str) -> Callable:
    """The distance function of a name (``euclidean, sqeuclidean, cosine, dot, snr``)."""
    return _FUNCS[check_distance(name)]


def distance_for_loss(loss: str | None) -> str:
    """The distance a loss uses (docs/methods.md §8); ``None`` (no loss: an untrained model) -> euclidean.

    Names are matched case- and punctuation-insensitively (``NT-Xent`` = ``ntxent``,
    ``multi_similarity`` = ``multisimilarity``). An unknown loss raises a one-line error.
    """
    if loss is None or loss == "":
        return "euclidean"
    key = _loss_key(loss)
    aliases = {"ms": "multisimilarity", "normsoftmax": "normalizedsoftmax", "normalisedsoftmax": "normalizedsoftmax"}
    key = aliases.get(key, key)
    if key not in LOSS_DISTANCES:
        raise EmbedscopeError(
            f"no known distance for the loss '{loss}' (known losses: {', '.join(sorted(LOSS_DISTANCES))}); "
            "name one explicitly (--distance)")
    return LOSS_DISTANCES[key]



def distance_and_source(config: Mapping[str, Any] | None, extra: Mapping[str, Any] | None = None
                        ) -> tuple[str, str]:
    """:func:`distance_for_config` and where it comes from: ``"untrained network"``, ``"config"`` (its
    ``distance`` field), ``"loss"``, ``"Roth's loss option"``, or ``"default: ..."`` (Euclidean for a
    trained checkpoint whose loss is not stated, or not one this table knows)."""
    config = dict(config or {})
    explicit = config.get("distance") not in (None, "")
    named = check_distance(config["distance"]) if explicit else None  # (an unknown name refused either way)
    if is_untrained(config, extra):
        return "euclidean", "untrained network"
    if explicit:
        return named, "config"
    if config.get("loss") not in (None, ""):
        return distance_for_loss(config["loss"]), "loss"
    loss = trained_loss(config)
    if loss is None:
        return "euclidean", "default: the checkpoint names no loss"
    try:
        return distance_for_loss(loss), "Roth's loss option"
    except EmbedscopeError:  # a loss of their code with no distance here (histogram, angular, ...)
        from embedscope.text import quoted

        return "euclidean", f"default: Roth's loss {quoted(loss[:40])} has no known distance"


def distance_for_config(config: Mapping[str, Any] | None, extra: Mapping[str, Any] | None = None) -> str:
    """The distance of a checkpoint (docs/methods.md §8): Euclidean for a network without DML training
    (:func:`is_untrained`: ``--epochs 0``, an epoch-0 checkpoint, an ImageNet backbone, whatever loss it
    was set up for), else its config's explicit ``distance`` field if present, else the distance of its
    loss (:func:`trained_loss`: Roth et al.'s loss option for their checkpoints), else Euclidean (a
    foreign checkpoint that names no loss). Pass the checkpoint's ``extra``
    (``load_checkpoint(...)[2]["extra"]``) so that an epoch-0 checkpoint of a training run counts as
    untrained, as ``embedscope saliency`` counts it.

    An unknown distance name or loss name in the config raises a one-line :class:`EmbedscopeError`.
    """
    return distance_and_source(config, extra)[0]


__all__ = ["DISTANCES", "LOSS_DISTANCES", "CLOSER_IS", "euclidean", "sqeuclidean", "cosine", "dot", "snr",
           "check_distance", "get_distance", "distance_for_loss", "distance_for_config", "distance_and_source",
           "is_untrained", "trained_loss"]
