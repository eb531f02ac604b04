"""The measures a study takes per checkpoint: the measure registry of :mod:`embedscope.analyses`.

A study asks the registry (``embedscope.analyses.registry``: ``MEASURES`` and ``compute_measures``)
for every measure on its own split (training-set geometry, label-free spectra, test retrieval).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def registry() -> tuple[dict[str, Any], Any, str]:
    """(MEASURES, compute_measures, source) of the analyses registry."""
    from embedscope.analyses.registry import MEASURES, compute_measures

    return dict(MEASURES), compute_measures, "embedscope.analyses.registry"


def measure_splits() -> dict[str, str]:
    """Measure name -> the split it is taken on."""
    m, _, _ = registry()
    return {k: v.split for k, v in m.items()}


def as_float(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return f if np.isfinite(f) else float("nan")
