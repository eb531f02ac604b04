"""The training objectives of Roth et al.'s study, built on pytorch-metric-learning (PML).

Each loss is selected by name (``--loss``) and gets the hyper-parameters of docs/methods.md §5
(Roth et al., ICML 2020, App. A.1) as defaults. Every loss is wrapped in :class:`TrainLoss`, an
``nn.Module`` whose own parameters (learnable margins, proxies, class weights) the trainer hands to
the optimiser in their own parameter group (:meth:`TrainLoss.param_groups`).

Families (recorded in the checkpoint config as ``loss_family``):

* ``ranking``: margin, triplet, contrastive, multisimilarity, npair, lifted, snr -- tuple losses
  on pairs/triplets of the batch;
* ``classification``: arcface, softmax -- a learnt class-weight matrix;
* ``proxy``: proxynca, softtriple -- learnt proxies (one or several per class).

Kobs et al.'s two-way grouping (docs/methods.md §8) counts ``proxy`` as classification-based:
:func:`kobs_group` gives it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from embedscope.errors import EmbedscopeError


@dataclass(frozen=True)
class LossSpec:
    """Static facts about a loss: family, whether it takes mined tuples, its default miner."""

    name: str
    family: str
    tuple_loss: bool            # accepts an (a, p, n) indices_tuple from a tuple miner
    default_miner: str | None   # miner used when --miner is not given (None: the loss's own pairs)
    normalize: bool = True      # L2-normalised network output (Roth §4.1: not for N-pair, GenLifted)
    defaults: dict[str, Any] = field(default_factory=dict)
    description: str = ""


LOSSES: dict[str, LossSpec] = {
    "margin": LossSpec("margin", "ranking", True, "distance", True,
                       {"margin": 0.2, "beta": 1.2, "beta_lr": 5e-4, "nu": 0.0},
                       "margin loss (Wu et al.), beta learnable per class (lr 5e-4), gamma 0.2"),
    "triplet": LossSpec("triplet", "ranking", True, "distance", True,
                        {"margin": 0.2, "squared": True, "avg_nonzero": False},
                        "triplet loss, margin 0.2 on squared Euclidean distances, mean over the mined "
                        "triplets (reference code)"),
    "contrastive": LossSpec("contrastive", "ranking", True, "distance", True,
                            {"pos_margin": 0.0, "neg_margin": 1.0, "avg_nonzero": False},
                            "contrastive loss, positive margin 0, negative margin 1, means over the mined "
                            "pairs (reference code)"),
    "multisimilarity": LossSpec("multisimilarity", "ranking", True, None, True,
                                {"alpha": 2.0, "beta": 40.0, "base": 0.5, "epsilon": 0.1},
                                "multi-similarity loss with its own pair mining "
                                "(alpha 2, beta 40, lambda 0.5, eps 0.1)"),
    "npair": LossSpec("npair", "ranking", False, None, False, {"nu": 0.005},
                      "N-pair loss on unnormalised outputs, embedding-norm penalty 0.005"),
    "lifted": LossSpec("lifted", "ranking", True, None, False,
                       {"neg_margin": 1.0, "pos_margin": 0.0, "nu": 0.005},
                       "generalised lifted structure on unnormalised outputs, norm penalty 0.005"),
    "snr": LossSpec("snr", "ranking", True, "distance", True, {"margin": 0.2, "reg_lambda": 0.005},
                    "signal-to-noise-ratio triplet loss (margin 0.2) + zero-mean regulariser 0.005"),
    "proxynca": LossSpec("proxynca", "proxy", False, None, True, {"scale": 3.0, "param_lr_mult": 50.0},
                         "ProxyNCA, one normalised proxy per class, scale 3 on embeddings and proxies"),
    "softtriple": LossSpec("softtriple", "proxy", False, None, True,
                           {"centers_per_class": 2, "la": 8.0, "gamma": 0.1, "margin": 0.01, "tau": 0.2,
                            "param_lr_mult": 100.0},
                           "SoftTriple, 2 centres per class, lambda 8, gamma 0.1, delta 0.01, tau 0.2"),
    "arcface": LossSpec("arcface", "classification", False, None, True,
                        {"margin": 0.5, "scale": 16.0, "param_lr_mult": 50.0},
                        "ArcFace, additive angular margin 0.5 rad, scale 16"),
    "softmax": LossSpec("softmax", "classification", False, None, True,
                        {"temperature": 0.05, "param_lr_mult": 1.0},
                        "normalised softmax, temperature 0.05"),
}
LOSS_NAMES = tuple(LOSSES)
# (embedscope.families.LOSS_FAMILIES holds the same families torch-free, for the figures and the maps
# files' family: tests/test_audit45_views.py checks that they agree)

# The range of each numeric hyper-parameter (checked by :func:`check_loss_params` before any work):
# ">0" a divisor or scale (temperature 0 made the loss NaN, "training diverged ... try a lower --lr";
# alpha/beta 0 of multisimilarity and gamma 0 of softtriple a ZeroDivisionError), ">=0" a learning
# rate, a regulariser's weight or a margin (a negative beta_lr or param_lr_mult trained beta, the
# proxies or the class weights by gradient *ascent*, silently; a negative nu rewarded large
# embeddings); "arc" an angle in [0, pi) radians. Parameters not named here take any finite number.
_RANGES: dict[str, dict[str, str]] = {
    "margin": {"margin": ">=0", "beta": ">=0", "beta_lr": ">=0", "nu": ">=0"},
    "triplet": {"margin": ">=0"},
    "contrastive": {"pos_margin": ">=0", "neg_margin": ">=0"},
    "multisimilarity": {"alpha": ">0", "beta": ">0"},
    "npair": {"nu": ">=0"},
    "lifted": {"neg_margin": ">=0", "pos_margin": ">=0", "nu": ">=0"},
    "snr": {"margin": ">=0", "reg_lambda": ">=0"},
    "proxynca": {"scale": ">0", "param_lr_mult": ">=0"},
    "softtriple": {"la": ">0", "gamma": ">0", "margin": ">=0", "tau": ">=0", "param_lr_mult": ">=0"},
    "arcface": {"margin": "arc", "scale": ">0", "param_lr_mult": ">=0"},
    "softmax": {"temperature": ">0", "param_lr_mult": ">=0"},
}
_RANGE_WORDS = {">0": "a number > 0", ">=0": "a number >= 0", "arc": "an angle in [0, pi) radians"}


def _in_range(rule: str, v: float) -> bool:
    if rule == ">0":
        return v > 0
    if rule == ">=0":
        return v >= 0
    return 0 <= v < math.pi
FAMILIES = ("ranking", "classification", "proxy")


def loss_spec(name: str) -> LossSpec:
    """The :class:`LossSpec` of a loss name (one-line error for an unknown name)."""
    if name not in LOSSES:
        raise EmbedscopeError(f"unknown loss '{name}' (choose {', '.join(LOSS_NAMES)})")
    return LOSSES[name]


def loss_family(name: str) -> str:
    """'ranking', 'classification' or 'proxy' (docs/methods.md §5, §8)."""
    return loss_spec(name).family


def kobs_group(name: str) -> str:
    """Kobs et al.'s two-way grouping (docs/methods.md §8): proxy losses count as classification
    (:func:`embedscope.families.kobs_group`, for a loss name checked here)."""
    from embedscope import families

    return families.kobs_group(loss_spec(name).name)


class TrainLoss(nn.Module):
    """A PML loss with the study's defaults; ``forward(embeddings, labels, indices_tuple=None)``.

    ``labels`` must be training-class indices ``0 .. num_classes-1`` (the trainer remaps them).
    The module's parameters (``beta`` of the margin loss, proxies, class weights) are trained with
    the model; :meth:`param_groups` gives them their learning rate. Parameters: see
    :func:`build_loss`.
    """

    def __init__(self, name: str, loss: nn.Module, miner: nn.Module | None, hparams: dict[str, Any]) -> None:
        super().__init__()
        self.name = name
        self.spec = loss_spec(name)
        self.loss = loss
        self.own_miner = miner  # the loss's own pair mining (multi-similarity), used without a tuple miner
        self.hparams = dict(hparams)

    @property
    def family(self) -> str:
        return self.spec.family

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor, indices_tuple=None) -> torch.Tensor:
        embeddings = embeddings.float()
        if indices_tuple is None and self.own_miner is not None:
            indices_tuple = self.own_miner(embeddings, labels)
        if indices_tuple is not None and not self.spec.tuple_loss:
            raise EmbedscopeError(f"the {self.name} loss does not take mined tuples")
        return self.loss(embeddings, labels, indices_tuple)

    def param_groups(self, base_lr: float) -> list[dict[str, Any]]:
        """Optimiser groups for the loss's own parameters (empty for parameter-free losses).

        margin: beta at its own lr (``beta_lr``, 5e-4, docs/methods.md §5); proxy/classification losses:
        ``param_lr_mult * base_lr`` (the reference code trains proxies and class weights faster than
        the backbone; the multipliers are parameters of :func:`build_loss`).
        """
        params = [p for p in self.parameters() if p.requires_grad]
        if not params:
            return []
        if self.name == "margin":
            lr = float(self.hparams["beta_lr"])
        else:
            lr = float(self.hparams.get("param_lr_mult", 1.0)) * base_lr
        return [{"params": params, "lr": lr, "weight_decay": 0.0, "name": f"loss:{self.name}"}]


def check_loss_params(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """The overrides of loss ``name``'s defaults, checked before any work: known names, and each
    value of its default's kind (a finite number, an integer for counts, true/false for flags) and
    range (:data:`_RANGES`: > 0 for divisors and scales, >= 0 for learning rates, weights and margins).
    A wrong one is a one-line :class:`~embedscope.errors.UsageError` (``--loss-param margin=abc``
    failed in the first training step)."""
    import numbers

    from embedscope.errors import UsageError
    from embedscope.text import quoted

    spec = loss_spec(name)
    unknown = set(params) - set(spec.defaults)
    if unknown:
        raise UsageError(f"loss '{name}' has no parameter(s) {', '.join(sorted(map(str, unknown)))} "
                         f"(it has: {', '.join(spec.defaults) or 'none'})")
    out: dict[str, Any] = {}
    for k, v in params.items():
        d = spec.defaults[k]
        if v is None:
            out[k] = v
            continue
        if isinstance(d, bool):
            if isinstance(v, str) and v.lower() in ("true", "false"):
                v = v.lower() == "true"
            if not isinstance(v, bool):
                raise UsageError(f"loss parameter {k} of '{name}' must be true or false, got {quoted(v)}")
        elif isinstance(d, (int, float)):
            if isinstance(v, str):  # YAML reads 5e-4 (no dot) as text, as it does lr: 1e-3 (trainer._as_float)
                try:
                    v = float(v.strip())
                except ValueError:
                    raise UsageError(f"loss parameter {k} of '{name}' must be a finite number, got {quoted(v)}") from None
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
                raise UsageError(f"loss parameter {k} of '{name}' must be a finite number, got {quoted(v)}")
            if isinstance(d, int):
                if not float(v).is_integer() or v < 1:
                    raise UsageError(f"loss parameter {k} of '{name}' must be an integer >= 1, got {quoted(v)}")
                v = int(v)
            else:
                v = float(v)
            rule = _RANGES.get(name, {}).get(k)
            if rule is not None and not _in_range(rule, v):
                raise UsageError(f"loss parameter {k} of '{name}' must be {_RANGE_WORDS[rule]}, got {quoted(v)}")
        out[k] = v
    return out


def build_loss(name: str, num_classes: int, embed_dim: int, **overrides: Any) -> TrainLoss:
    """Build a training loss by name with the hyper-parameters of docs/methods.md §5 (Roth App. A.1).

    Parameters
    ----------
    name : str
        One of ``margin, triplet, contrastive, multisimilarity, proxynca, npair, lifted, arcface,
        softmax, softtriple, snr``.
    num_classes : int
        Number of *training* classes (labels 0 .. num_classes-1): the size of per-class beta,
        proxies and class weights.
    embed_dim : int
        Embedding dimension D.
    **overrides
        Any key of ``LOSSES[name].defaults``, e.g. ``beta=0.6`` for R-Margin (β 0.6).

    Notes
    -----
    Mapping of the paper's hyper-parameters onto PML (docs/methods.md §5):

    * margin: ``MarginLoss(margin=γ=0.2, beta=β, learn_beta=True, num_classes=C)``, Euclidean
      distance on the unit sphere; β has its own lr 5e-4 (Wu et al.).
    * triplet: ``TripletMarginLoss(margin=0.2)`` on squared Euclidean distances (the reference
      code; ``squared=False`` gives plain distances), reduced as the reference code
      (``criteria/triplet.py``): the mean of relu(d_ap² − d_an² + 0.2) over *all* mined triplets.
      ``avg_nonzero=True`` selects PML's default instead, the mean over the non-zero terms only
      (on a batch where few triplets violate the margin that is several times larger).
    * contrastive: ``ContrastiveLoss(pos_margin=0, neg_margin=1)`` on Euclidean distances, reduced
      as the reference code (``criteria/contrastive.py``): mean_t relu(d_ap) + mean_t relu(1 − d_an)
      over all mined triplets t; ``avg_nonzero=True``: PML's default, each mean over its non-zero
      terms only.
    * multisimilarity: ``MultiSimilarityLoss(α=2, β=40, base=λ=0.5)`` with
      ``MultiSimilarityMiner(ε=0.1)`` (used unless a tuple miner is given).
    * proxynca: ``ProxyNCALoss(softmax_scale=scale²)``: scaling embedding and proxy by 3 multiplies
      their squared distance by 9.
    * arcface: ``ArcFaceLoss(margin=0.5 rad = 28.65°, scale=16)``.
    * softmax: ``NormalizedSoftmaxLoss(temperature=0.05)``.
    * softtriple: ``SoftTripleLoss(centers_per_class=2, la=λ=8, gamma=γ=0.1, margin=δ=0.01)`` with
      ``SparseCentersRegularizer`` weighted by τ = 0.2; centres at 100 × lr (the SoftTriple
      paper's ratio, Qian et al., ICCV 2019: centres 0.01, network 1e-4).
    * snr: ``TripletMarginLoss(margin=0.2)`` on ``SNRDistance`` (the reference code's triplet form)
      plus ``ZeroMeanRegularizer`` (|Σ_d x_d|) weighted by λ = 0.005.
    * npair / lifted: unnormalised outputs, ``NPairsLoss`` (raw dot product) /
      ``GeneralizedLiftedStructureLoss(neg_margin=1, pos_margin=0)`` (raw Euclidean) plus an
      ``LpRegularizer`` embedding-norm penalty ν = 0.005.
    """
    from pytorch_metric_learning import distances, losses, miners, reducers, regularizers

    spec = loss_spec(name)
    overrides = check_loss_params(name, overrides)
    hp = {**spec.defaults, **{k: v for k, v in overrides.items() if v is not None}}
    if num_classes < 2:
        raise EmbedscopeError(f"training needs at least 2 classes, got {num_classes}")
    C, D = int(num_classes), int(embed_dim)
    own_miner = None
    if name == "margin":
        loss = losses.MarginLoss(margin=hp["margin"], nu=hp["nu"], beta=hp["beta"], learn_beta=True,
                                 num_classes=C)
    elif name == "triplet":
        dist = distances.LpDistance(power=2) if hp["squared"] else distances.LpDistance()
        red = reducers.AvgNonZeroReducer() if hp["avg_nonzero"] else reducers.MeanReducer()
        loss = losses.TripletMarginLoss(margin=hp["margin"], distance=dist, reducer=red)
    elif name == "contrastive":
        red = reducers.AvgNonZeroReducer() if hp["avg_nonzero"] else reducers.MeanReducer()
        loss = losses.ContrastiveLoss(pos_margin=hp["pos_margin"], neg_margin=hp["neg_margin"], reducer=red)
    elif name == "multisimilarity":
        loss = losses.MultiSimilarityLoss(alpha=hp["alpha"], beta=hp["beta"], base=hp["base"])
        own_miner = miners.MultiSimilarityMiner(epsilon=hp["epsilon"])
    elif name == "npair":
        loss = losses.NPairsLoss(distance=distances.DotProductSimilarity(normalize_embeddings=False),
                                 embedding_regularizer=regularizers.LpRegularizer(),
                                 embedding_reg_weight=hp["nu"])
    elif name == "lifted":
        loss = losses.GeneralizedLiftedStructureLoss(
            neg_margin=hp["neg_margin"], pos_margin=hp["pos_margin"],
            distance=distances.LpDistance(normalize_embeddings=False),
            embedding_regularizer=regularizers.LpRegularizer(), embedding_reg_weight=hp["nu"])
    elif name == "snr":
        loss = losses.TripletMarginLoss(margin=hp["margin"], distance=distances.SNRDistance(),
                                        embedding_regularizer=regularizers.ZeroMeanRegularizer(),
                                        embedding_reg_weight=hp["reg_lambda"])
    elif name == "proxynca":
        loss = losses.ProxyNCALoss(num_classes=C, embedding_size=D, softmax_scale=float(hp["scale"]) ** 2)
    elif name == "arcface":
        loss = losses.ArcFaceLoss(num_classes=C, embedding_size=D, margin=math.degrees(hp["margin"]),
                                  scale=hp["scale"])
    elif name == "softmax":
        loss = losses.NormalizedSoftmaxLoss(num_classes=C, embedding_size=D, temperature=hp["temperature"])
    elif name == "softtriple":
        k = int(hp["centers_per_class"])
        reg = regularizers.SparseCentersRegularizer(num_classes=C, centers_per_class=k) if k > 1 else None
        loss = losses.SoftTripleLoss(num_classes=C, embedding_size=D, centers_per_class=k, la=hp["la"],
                                     gamma=hp["gamma"], margin=hp["margin"], weight_regularizer=reg,
                                     weight_reg_weight=hp["tau"] if reg is not None else 1)
    else:  # pragma: no cover - LOSSES and this switch are kept in step
        raise EmbedscopeError(f"loss '{name}' is not implemented")
    return TrainLoss(name, loss, own_miner, hp)
