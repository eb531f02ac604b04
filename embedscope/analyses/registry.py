"""The measure registry: every scalar measure a study can correlate, with the split it reads.

``MEASURES[name]`` is a :class:`Measure`: its ``family`` (the analysis that computes it with its
siblings in one pass), the ``split`` of the embedding file it reads (Roth et al.: structure of the
*training* embeddings, retrieval on the *test* split), its ``direction`` (``"higher"`` or
``"lower"`` is better, or ``"none"`` where no direction is established; for structural measures,
the direction the literature links with better generalisation) and a one-line ``meaning``.

:func:`compute_measures` computes any selection on one file, each family once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from embedscope.errors import EmbedscopeError


@dataclass(frozen=True)
class Measure:
    name: str
    family: str
    split: str
    direction: str
    meaning: str


def _m(name, family, split, direction, meaning):
    return name, Measure(name, family, split, direction, meaning)


MEASURES: dict[str, Measure] = dict([
    # structure of the training embeddings (docs/methods.md §2-§4)
    _m("rho", "geometry", "train", "lower", "spectral decay KL(U||s), top singular value left out (Roth §5)"),
    _m("rho_all", "geometry", "train", "lower", "spectral decay with every singular value (rho_spectrum@1)"),
    _m("pi_intra", "geometry", "train", "none", "mean cosine distance within classes (Roth §5)"),
    _m("pi_inter", "geometry", "train", "none", "mean cosine distance between class means (Roth §5)"),
    _m("pi_ratio", "geometry", "train", "higher", "pi_intra / pi_inter (Roth: higher with better R@1 on CUB/CARS)"),
    _m("effective_rank", "geometry", "train", "higher", "RankMe, exp(entropy of s / sum s) (Garrido et al. 2023)"),
    _m("alpha", "geometry", "train", "none", "alpha-ReQ power-law exponent of the covariance spectrum"),
    _m("alignment", "geometry", "train", "lower", "E ||u - u'||^2 over same-class pairs (Wang & Isola 2020)"),
    _m("uniformity", "geometry", "train", "lower", "log E exp(-2 ||u - u'||^2) over all pairs (Wang & Isola)"),
    # retrieval on the unseen test classes (docs/methods.md §1)
    _m("R@1", "retrieval", "test", "higher", "share of queries whose nearest neighbour is of their class"),
    _m("R@2", "retrieval", "test", "higher", "a same-class item among the 2 nearest"),
    _m("R@4", "retrieval", "test", "higher", "a same-class item among the 4 nearest"),
    _m("R@8", "retrieval", "test", "higher", "a same-class item among the 8 nearest"),
    _m("P@1", "retrieval", "test", "higher", "precision at 1 (Musgrave)"),
    _m("R-Precision", "retrieval", "test", "higher", "share of the R_i nearest that are relevant (Musgrave)"),
    _m("MAP@R", "retrieval", "test", "higher", "mean average precision at R (Musgrave)"),
    _m("mAP@C", "retrieval", "test", "higher", "AP over the class size (Roth's code)"),
    _m("mAP@1000", "retrieval", "test", "higher", "AP over the top 1000 (Roth's code)"),
    _m("NMI", "retrieval", "test", "higher", "NMI of a k-means clustering with the classes"),
    _m("F1", "retrieval", "test", "higher", "pairwise F1 of a k-means clustering with the classes"),
])

RETRIEVAL_KS = (1, 2, 4, 8)


def _geometry_family(es, names: list[str], split: str, opts: dict) -> dict[str, float]:
    from embedscope.analyses.structure import geometry

    r = geometry(es, split=split, seed=opts.get("geometry_seed", 0))
    return {k: r.values[k] for k in names}


def _retrieval_family(es, names: list[str], split: str, opts: dict) -> dict[str, float]:
    from embedscope.analyses.retrieval import evaluate

    ks = tuple(sorted({int(n[2:]) for n in names if n.startswith("R@")})) or RETRIEVAL_KS
    r = evaluate(es, split=split, include=names, ks=ks, metric=opts.get("metric", "cosine"),
                 seed=opts.get("seed", 1234), device=opts.get("device", "auto"))
    return {k: r.values[k] for k in names}


#: family -> function(es, measure names, split, options) -> {name: value}
FAMILIES: dict[str, Callable[..., dict[str, float]]] = {
    "geometry": _geometry_family,
    "retrieval": _retrieval_family,
}


def register(measure: Measure, family_fn: Callable[..., dict[str, float]] | None = None) -> None:
    """Add a measure (and, for a new family, the function computing it) to the registry."""
    if measure.direction not in ("higher", "lower", "none"):
        raise EmbedscopeError(f"direction must be higher, lower or none, got {measure.direction!r}")
    if measure.family not in FAMILIES and family_fn is None:
        raise EmbedscopeError(f"unknown measure family {measure.family!r}: give its function")
    if family_fn is not None:
        FAMILIES[measure.family] = family_fn
    MEASURES[measure.name] = measure


def compute_measures(source: Any, names: Iterable[str] | None = None, *, metric: str = "cosine",
                     seed: int = 1234, device: str = "auto", geometry_seed: int = 0) -> dict[str, float]:
    """The registry's measures (default: all) of one embedding file, each on its own split.

    Each family is computed once for all its requested measures (one retrieval pass, one geometry
    pass). Returns ``{name: value}`` in registry order.
    """
    from embedscope.analyses._sources import as_set

    es = as_set(source)
    wanted = list(MEASURES) if names is None else list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in MEASURES]
    if unknown:
        raise EmbedscopeError(f"unknown measure(s) {', '.join(unknown)} (known: {', '.join(MEASURES)})")
    opts = {"metric": metric, "seed": seed, "device": device, "geometry_seed": geometry_seed}
    groups: dict[tuple[str, str], list[str]] = {}
    for n in wanted:
        m = MEASURES[n]
        groups.setdefault((m.family, m.split), []).append(n)
    out: dict[str, float] = {}
    for (family, split), group in groups.items():
        out.update(FAMILIES[family](es, group, split, opts))
    return {n: float(out[n]) for n in wanted}


def describe() -> list[dict[str, str]]:
    """The registry as table rows (name, family, split, direction, meaning)."""
    return [{"name": m.name, "family": m.family, "split": m.split, "direction": m.direction, "meaning": m.meaning}
            for m in MEASURES.values()]
