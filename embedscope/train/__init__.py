"""Training of Roth et al.'s study: losses, miners, batch samplers, ρ-regularisation, the toy example.

``embedscope train`` / :func:`embedscope.train.trainer.train`; definitions in docs/methods.md §5.
Imports are lazy so that ``import embedscope.train`` stays cheap.
"""

from __future__ import annotations

from embedscope._lazy import lazy_exports

_EXPORTS = {
    "LOSSES": "embedscope.train.losses",
    "LOSS_NAMES": "embedscope.train.losses",
    "build_loss": "embedscope.train.losses",
    "loss_family": "embedscope.train.losses",
    "kobs_group": "embedscope.train.losses",
    "MINER_NAMES": "embedscope.train.miners",
    "build_miner": "embedscope.train.miners",
    "SAMPLER_NAMES": "embedscope.train.samplers",
    "build_sampler": "embedscope.train.samplers",
    "resolve_config": "embedscope.train.trainer",
    "train": "embedscope.train.trainer",
    "run_paths": "embedscope.train.trainer",
    "train_grid": "embedscope.train.grid",
    "run_toy": "embedscope.train.toy",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
