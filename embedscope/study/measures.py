"""The measures a study takes per checkpoint: the measure registry of :mod:`embedscope.analyses`.

A study asks the registry (``embedscope.analyses.registry``: ``MEASURES`` and ``compute_measures``)
for every measure on its own split (training-set geometry, label-free spectra, test retrieval, and
``NR-Prec:<property>`` on the test split for every property the embedding file holds,
docs/methods.md §9). The per-property measures are named per file, so the columns a study's rows
carry decide which of them enter the statistics (:func:`measure_splits` with ``columns``).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np


def registry() -> tuple[dict[str, Any], Any, str]:
    """(MEASURES, compute_measures, source) of the analyses registry.

    ``MEASURES`` is a copy of the registry's table: iterating it gives the fixed measures, while
    ``name in MEASURES`` and ``MEASURES[name]`` also accept per-file names such as ``NR-Prec:colour``.
    """
    from embedscope.analyses.registry import MEASURES, compute_measures

    return MEASURES.copy(), compute_measures, "embedscope.analyses.registry"


def measure_splits(columns: Iterable[str] | None = None) -> dict[str, str]:
    """Measure name -> the split it is taken on.

    The fixed measures of the registry, then every name of ``columns`` (a study table's columns) that
    the registry knows beyond them (``NR-Prec:<property>``), in the order of first appearance.
    """
    m, _, _ = registry()
    out = {k: v.split for k, v in m.items()}
    for c in dict.fromkeys(columns or ()):
        if c not in out and c in m:
            out[c] = m[c].split
    return out


def as_float(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return f if np.isfinite(f) else float("nan")
