"""The measures a study takes per checkpoint: the measure registry of :mod:`embedscope.analyses`.

A study asks the registry (``embedscope.analyses.registry``: ``MEASURES`` and ``compute_measures``)
for every measure on its own split (training-set geometry, label-free spectra, test retrieval).
Until that registry is importable, a stand-in with the same interface is used: geometry of the
training split (docs/methods.md §2–§4) and retrieval metrics of the test split (docs/methods.md §1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Measure:
    name: str
    family: str
    split: str  # "train" | "test"
    direction: str  # "higher" | "lower" | "none"
    meaning: str


_GEOM = {  # registry name -> geometry_report key
    "rho": "rho", "rho_all": "rho_all", "pi_intra": "pi_intra", "pi_inter": "pi_inter", "pi_ratio": "pi_ratio",
    "effective_rank": "effective_rank", "alpha": "alpha", "alignment": "alignment", "uniformity": "uniformity",
}
_RET = ("R@1", "R@2", "R@4", "R@8", "P@1", "R-Precision", "MAP@R", "mAP@C", "mAP@1000", "NMI", "F1")

_FALLBACK = {
    "rho": Measure("rho", "spectral", "train", "none", "spectral decay KL(U||s), top value excluded (docs/methods.md §2)"),
    "rho_all": Measure("rho_all", "spectral", "train", "none", "spectral decay, no value excluded (docs/methods.md §2)"),
    "pi_intra": Measure("pi_intra", "distance", "train", "none", "mean intra-class cosine distance (docs/methods.md §3)"),
    "pi_inter": Measure("pi_inter", "distance", "train", "none", "mean distance of class centres (docs/methods.md §3)"),
    "pi_ratio": Measure("pi_ratio", "distance", "train", "none", "pi_intra / pi_inter (docs/methods.md §3)"),
    "effective_rank": Measure("effective_rank", "label-free", "train", "none",
                              "effective rank, RankMe (docs/methods.md §4)"),
    "alpha": Measure("alpha", "label-free", "train", "none", "power-law exponent, alpha-ReQ (docs/methods.md §4)"),
    "alignment": Measure("alignment", "label-free", "train", "lower", "same-class alignment (docs/methods.md §4)"),
    "uniformity": Measure("uniformity", "label-free", "train", "lower", "uniformity (docs/methods.md §4)"),
    **{k: Measure(k, "retrieval" if k not in ("NMI", "F1") else "clustering", "test", "higher",
                  f"{k} of the test split (docs/methods.md §1)") for k in _RET},
}


def _fallback_compute(es, names=None, *, metric: str = "cosine", seed: int = 1234, device: str = "cpu",
                      geometry_seed: int = 0) -> dict[str, float]:
    from embedscope.metrics import geometry_report, retrieval_metrics

    names = list(_FALLBACK) if names is None else list(names)
    out: dict[str, float] = {}
    geo = [n for n in names if _FALLBACK[n].split == "train"]
    ret = [n for n in names if _FALLBACK[n].split == "test"]
    if geo:
        tr = es.subset("train")
        g = geometry_report(tr.embeddings, tr.labels, seed=geometry_seed)
        out.update({n: float(g[_GEOM[n]]) for n in geo})
    if ret:
        te = es.subset("test")
        r = retrieval_metrics(te.embeddings, te.labels, metric=metric, include=ret, seed=seed, device=device)
        out.update({n: float(r[n]) for n in ret})
    return out


def registry() -> tuple[dict[str, Any], Any, str]:
    """(MEASURES, compute_measures, source): the analyses registry when present, else the stand-in."""
    try:
        from embedscope.analyses.registry import MEASURES, compute_measures
    except ImportError:
        return dict(_FALLBACK), _fallback_compute, "embedscope.study.measures (stand-in)"
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
