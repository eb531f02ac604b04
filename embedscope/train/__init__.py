"""Training of Roth et al.'s study: losses, miners, batch samplers, ρ-regularisation, the toy example.

``embedscope train`` / :func:`embedscope.train.trainer.train`; definitions in docs/methods.md §5.
Imports are lazy so that ``import embedscope.train`` stays cheap.
"""

from __future__ import annotations

import importlib

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

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'embedscope.train' has no attribute '{name}'")


def __dir__():
    return __all__
