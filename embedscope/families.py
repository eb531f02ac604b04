"""Which loss family a model or a saliency-maps file belongs to (Kobs et al.'s grouping; docs/methods.md §8).

Pure functions on a checkpoint's config and a maps file's attributes (torch-free, no file reading), so the
command line, the analyses and the figures (``embedscope.viz`` may import no layer above it) derive a file's
family one way: :func:`family_of_maps` is what ``embedscope saliency-agreement``, ``embedscope info``
and :func:`embedscope.viz.saliency.overlay_grid` show. :func:`trained_loss` and :func:`is_untrained` are
also importable from :mod:`embedscope.models.distances`, :func:`family_for_config` and
:func:`family_of_maps` from :mod:`embedscope.saliency.run`.
"""

from __future__ import annotations

from typing import Any, Mapping

#: The training family of each loss ``embedscope train`` knows (``embedscope.train.losses.LossSpec.family``,
#: which checks at import that it agrees): ``ranking``, ``classification`` or ``proxy``.
LOSS_FAMILIES: dict[str, str] = {
    "margin": "ranking", "triplet": "ranking", "contrastive": "ranking", "multisimilarity": "ranking",
    "npair": "ranking", "lifted": "ranking", "snr": "ranking",
    "proxynca": "proxy", "softtriple": "proxy",
    "arcface": "classification", "softmax": "classification",
}
#: Kobs et al.'s grouping of the losses they trained but this project does not (docs/methods.md §8).
KOBS_ONLY_FAMILIES: dict[str, str] = {"fastap": "ranking", "ntxent": "ranking", "cosface": "classification",
                                      "normalizedsoftmax": "classification"}
#: the loss names of Roth et al.'s code that are spelled otherwise here
ROTH_LOSS_NAMES = {"softtriplet": "softtriple"}
#: source formats of checkpoints without DML training (ImageNet features, or a random head on them)
UNTRAINED_FORMATS = ("imagenet-baseline",)


def _loss_key(loss: str) -> str:
    return "".join(ch for ch in str(loss).lower() if ch.isalnum())


def kobs_group(name: str) -> str:
    """Kobs et al.'s two-way grouping of a loss ``embedscope train`` knows (docs/methods.md §8): ``ranking``,
    else ``classification`` (proxy losses count as classification)."""
    return "ranking" if LOSS_FAMILIES[name] == "ranking" else "classification"


def trained_loss(config: Mapping[str, Any] | None) -> str | None:
    """The loss a checkpoint was trained with: its config's ``loss``, else the ``loss`` option of Roth et
    al.'s checkpoint (kept as ``roth_loss``, their spelling mapped to ours: ``softtriplet`` ->
    ``softtriple``), else None (a foreign checkpoint that does not say, or no DML training)."""
    config = config or {}
    loss = config.get("loss")
    if loss not in (None, ""):
        return str(loss)
    roth = config.get("roth_loss")
    if isinstance(roth, str) and roth:
        return ROTH_LOSS_NAMES.get(_loss_key(roth), roth)
    return None


def is_untrained(config: Mapping[str, Any] | None, extra: Mapping[str, Any] | None = None) -> bool:
    """True for a network without DML training: ``embedscope train --epochs 0`` or a checkpoint of
    epoch 0 (``extra``: the checkpoint's ``extra`` dict, :func:`~embedscope.models.load_checkpoint`'s
    ``info["extra"]``), loss ``untrained``, an ImageNet backbone (``embed --arch``: its features or a
    random head), or a config that names no loss, no distance and no source (``{}``). A foreign trained checkpoint
    (Roth et al.'s, whose loss is known; pytorch-metric-learning's, whose is not) is not untrained."""
    config, extra = config or {}, extra or {}
    if str(config.get("epochs")) == "0" or str(extra.get("epoch")) == "0":
        return True
    loss = config.get("loss")
    if loss in ("untrained", "none"):
        return True
    if loss not in (None, "") or trained_loss(config) is not None or config.get("distance") not in (None, ""):
        return False  # (a config that names the distance the model was trained with is of a trained model)
    fmt = config.get("source_format")
    return fmt in (None, "") or fmt in UNTRAINED_FORMATS


def family_for_config(config: Mapping[str, Any] | None, extra: Mapping[str, Any] | None = None) -> str:
    """Kobs' loss family of a checkpoint: ``ranking`` / ``classification`` (proxy losses count as
    classification, docs/methods.md §8) from its config's ``loss``; ``untrained`` for a network without
    DML training (:func:`is_untrained`); ``other`` for an unknown loss or a foreign checkpoint that names
    none (pytorch-metric-learning's)."""
    if is_untrained(config, extra):
        return "untrained"
    loss = trained_loss(config)  # (Roth et al.'s checkpoints: their loss option; None: a foreign file that does not say)
    key = _loss_key(loss)
    if key in LOSS_FAMILIES:
        return kobs_group(key)
    return KOBS_ONLY_FAMILIES.get(key, "other")


def family_source(attrs: Mapping[str, Any]) -> str:
    """Where :func:`family_of_maps` takes a maps file's family from: ``"family"`` (the attribute it
    records), ``"checkpoint_config"``, ``"loss"``, or ``""`` (none of them: ``other``)."""
    if attrs.get("family") not in (None, ""):
        return "family"
    config = attrs.get("checkpoint_config")
    if isinstance(config, Mapping) and config:  # (an empty or unread config says nothing: not "untrained")
        return "checkpoint_config"
    loss = attrs.get("loss")
    if isinstance(loss, str) and loss:
        return "loss"
    return ""


def family_of_maps(attrs: Mapping[str, Any]) -> str:
    """The loss family of a maps file (its attributes): the ``family`` it records (``embedscope saliency``
    records :func:`family_for_config` of the checkpoint and its ``extra``, which knows an epoch-0 checkpoint),
    else the family of the ``checkpoint_config`` it records (:func:`family_for_config`; a file written by
    Python's ``save_maps`` with a config and no family), else of its ``loss``; ``other`` when it records
    none of them."""
    source = family_source(attrs)
    if source == "family":
        return str(attrs["family"])
    if source == "checkpoint_config":
        return family_for_config(attrs["checkpoint_config"])
    if source == "loss":
        return family_for_config({"loss": attrs["loss"]})
    return "other"


__all__ = ["LOSS_FAMILIES", "KOBS_ONLY_FAMILIES", "kobs_group", "trained_loss", "is_untrained", "family_for_config",
           "family_source", "family_of_maps"]
