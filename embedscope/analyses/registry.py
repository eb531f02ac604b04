"""The measure registry: every scalar measure a study can correlate, with the split it reads.

``MEASURES[name]`` is a :class:`Measure`: its ``family`` (the analysis that computes it with its
siblings in one pass), the ``split`` of the embedding file it reads (Roth et al.: structure of the
*training* embeddings, retrieval on the *test* split), its ``direction`` (``"higher"`` or
``"lower"`` is better, or ``"none"`` where no direction is established; for structural measures,
the direction the literature links with better generalisation) and a one-line ``meaning``.

Some measures exist once per thing a file holds: ``NR-Prec:<property>`` (family ``properties``) is
Kobs et al.'s Normalized R-Precision of the stored property ``/properties/<property>`` on the test
split (docs/methods.md §9). They are described by a :class:`MeasurePattern` in ``PATTERNS``;
``name in MEASURES`` and ``MEASURES[name]`` accept such names, while iterating ``MEASURES`` gives the
fixed measures only. :func:`available` lists the measures one file offers.

:func:`compute_measures` computes any selection on one file, each family once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from embedscope.errors import EmbedscopeError, MissingKey
from embedscope.text import quoted


@dataclass(frozen=True)
class Measure:
    """One scalar measure a study can correlate: its ``name``, the ``family`` (analysis) computing it,
    the ``split`` it reads, its ``direction`` (``"higher"``, ``"lower"`` or ``"none"``) and a one-line
    ``meaning`` (definitions: docs/methods.md §1-§4, §9)."""

    name: str
    family: str
    split: str
    direction: str
    meaning: str


@dataclass(frozen=True)
class MeasurePattern:
    """Measures named ``<prefix><key>``, one per key a file offers (e.g. one per stored property).

    ``keys(es, split)`` gives the keys an :class:`~embedscope.store.EmbeddingSet` offers on ``split``;
    ``meaning`` is formatted with ``key``.
    """

    prefix: str
    family: str
    split: str
    direction: str
    meaning: str
    keys: Callable[[Any, str], list[str]]

    def measure(self, name: str) -> Measure:
        return Measure(name, self.family, self.split, self.direction, self.meaning.format(key=name[len(self.prefix):]))


#: prefix -> pattern of per-file measures
PATTERNS: dict[str, MeasurePattern] = {}


def _pattern_of(name: Any) -> MeasurePattern | None:
    if not isinstance(name, str):
        return None
    for prefix, pat in PATTERNS.items():
        if name.startswith(prefix) and len(name) > len(prefix):
            return pat
    return None


class MeasureTable(dict):
    """The fixed measures (``dict`` of name -> :class:`Measure`) that also knows the patterned names.

    ``"NR-Prec:colour" in MEASURES`` is true and ``MEASURES["NR-Prec:colour"]`` its :class:`Measure`
    (whether a given file holds that property is checked when it is computed); iteration, ``len``,
    ``keys()`` and ``items()`` give the fixed measures only.
    """

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or _pattern_of(name) is not None

    def __missing__(self, name: str) -> Measure:
        pat = _pattern_of(name)
        if pat is None:  # one line naming the known measures (a KeyError still: ``except KeyError`` works)
            raise MissingKey(f"unknown measure {quoted(name)} (known: {known_names()})")
        return pat.measure(name)

    def get(self, name, default=None):
        return self[name] if name in self else default

    def copy(self) -> "MeasureTable":
        return MeasureTable(self)


def _m(name, family, split, direction, meaning):
    return name, Measure(name, family, split, direction, meaning)


MEASURES: MeasureTable = MeasureTable([
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
PROPERTY_PREFIX = "NR-Prec:"


def _property_keys(es, split: str) -> list[str]:
    """The stored properties of a file that has rows on ``split`` (every property covers every row)."""
    if not es.properties or not bool((es.split == split).any()):
        return []
    return list(es.properties)


PATTERNS[PROPERTY_PREFIX] = MeasurePattern(
    PROPERTY_PREFIX, "properties", "test", "higher",
    "Normalized R-Precision of property '{key}' on the test split: mean z-score of same-value hits "
    "among the R = N_v - 1 nearest, R uncapped as in Kobs et al.'s paper (Eq. 5), Euclidean on the "
    "outputs as stored (Kobs' code); 0 = chance (docs/methods.md §9)",
    _property_keys)


def _geometry_family(es, names: list[str], split: str, opts: dict) -> dict[str, float]:
    from embedscope.analyses.structure import geometry

    r = geometry(es, split=split, seed=opts.get("geometry_seed", 0))
    return {k: r.values[k] for k in names}


def _retrieval_family(es, names: list[str], split: str, opts: dict) -> dict[str, float]:
    from embedscope.analyses.retrieval import evaluate

    # an R@k beyond the references a query has (a split of k rows or fewer) is not defined: NaN, as
    # evaluate's default k stop there (the study says why: study.run.undefined_reasons), not an error
    # that would fail the whole row
    n_avail = (len(es.labels) if split in (None, "all") else int((es.split == split).sum())) - 1  # (no copy)
    deep = {n for n in names if n.startswith("R@") and int(n[2:]) > n_avail}
    asked = [n for n in names if n not in deep]
    out = dict.fromkeys(deep, float("nan"))
    if asked:
        ks = tuple(sorted({int(n[2:]) for n in asked if n.startswith("R@")})) or tuple(
            k for k in RETRIEVAL_KS if k <= n_avail)
        r = evaluate(es, split=split, include=asked, ks=ks, metric=opts.get("metric", "cosine"),
                     seed=opts.get("seed", 1234), device=opts.get("device", "auto"))
        out.update({k: r.values[k] for k in asked})
    return {k: out[k] for k in names}


def _properties_family(es, names: list[str], split: str, opts: dict) -> dict[str, float]:
    """NR-Prec of the named properties on ``split``, all in one pass (uncapped R, docs/methods.md §9)."""
    from embedscope.metrics.properties import property_precision

    sub = es.subset(split)
    keys = [n[len(PROPERTY_PREFIX):] for n in names]
    missing = [k for k in keys if k not in sub.properties]
    if missing:
        raise EmbedscopeError(f"no property '{missing[0]}' in the embedding file (it has: "
                              f"{', '.join(sub.properties) or 'none'}; add some with 'embedscope add-properties')")
    res = property_precision(sub.embeddings, {k: sub.properties[k] for k in keys},
                             metric=opts.get("property_metric", "euclidean"), max_r=None)
    return {n: res[k]["NR-Prec"] for n, k in zip(names, keys)}


#: family -> function(es, measure names, split, options) -> {name: value}
FAMILIES: dict[str, Callable[..., dict[str, float]]] = {
    "geometry": _geometry_family,
    "retrieval": _retrieval_family,
    "properties": _properties_family,
}


def register(measure: Measure | MeasurePattern, family_fn: Callable[..., dict[str, float]] | None = None) -> None:
    """Add a measure or a :class:`MeasurePattern` (and, for a new family, the function computing it)."""
    if measure.direction not in ("higher", "lower", "none"):
        raise EmbedscopeError(f"direction must be higher, lower or none, got {quoted(measure.direction)}")
    if measure.family not in FAMILIES and family_fn is None:
        raise EmbedscopeError(f"unknown measure family {quoted(measure.family)}: give its function")
    if family_fn is not None:
        FAMILIES[measure.family] = family_fn
    if isinstance(measure, MeasurePattern):
        PATTERNS[measure.prefix] = measure
    else:
        MEASURES[measure.name] = measure


def available(source: Any) -> list[str]:
    """Every measure one embedding file offers: the fixed ones, then the patterned ones it holds
    (``NR-Prec:<property>`` for each ``/properties/<property>``, when the file has test rows)."""
    from embedscope.analyses._sources import as_set

    es = as_set(source)
    return list(MEASURES) + [pat.prefix + k for pat in PATTERNS.values() for k in pat.keys(es, pat.split)]


def known_names() -> str:
    """The measure names for an error message: the fixed ones and ``<prefix><name>`` per pattern."""
    return ", ".join([*MEASURES, *(f"{p}<name>" for p in PATTERNS)])


def compute_measures(source: Any, names: Iterable[str] | None = None, *, metric: str = "cosine",
                     seed: int = 1234, device: str = "auto", geometry_seed: int = 0,
                     property_metric: str = "euclidean") -> dict[str, float]:
    """The registry's measures of one embedding file, each on its own split (definitions:
    docs/methods.md §1 retrieval, §2–§4 geometry, §9 NR-Prec).

    ``names=None``: every measure the file offers (:func:`available`): the fixed ones and
    ``NR-Prec:<property>`` for each stored property (none when the file has no properties). Named
    measures are computed as asked; a ``NR-Prec:<property>`` whose property the file lacks is a
    one-line error. ``metric`` is the retrieval metric; ``property_metric`` the one NR-Prec ranks by
    (default Euclidean on the outputs as stored, as Kobs' code and ``embedscope properties``).

    Each family is computed once for all its requested measures (one retrieval pass, one geometry
    pass, one properties pass). Returns ``{name: value}`` in registry order (patterned measures
    last) or in the order asked.
    """
    from embedscope.analyses._sources import as_set

    if isinstance(names, str):  # one measure name, not its letters
        names = [names]
    elif names is not None and (isinstance(names, Mapping) or not hasattr(names, "__iter__")):
        raise EmbedscopeError(f"names must be a measure name or a list of them, got {type(names).__name__}")
    if names is not None:
        names = list(names)
        bad = [n for n in names if not isinstance(n, str)]
        if bad:
            raise EmbedscopeError(f"measure names must be strings, got {quoted(bad[0])}")
        names = [str(n) for n in names]  # (numpy's str_ of an array of names: the dict's keys were np.str_('rho'))
    es = as_set(source)
    wanted = available(es) if names is None else list(dict.fromkeys(names))
    if names is not None and not wanted:
        raise EmbedscopeError("give at least one measure name (or names=None for every measure)")
    unknown = [n for n in wanted if n not in MEASURES]
    if unknown:
        raise EmbedscopeError(f"unknown measure(s) {', '.join(map(str, unknown))} (known: {known_names()})")
    opts = {"metric": metric, "seed": seed, "device": device, "geometry_seed": geometry_seed,
            "property_metric": property_metric}
    groups: dict[tuple[str, str], list[str]] = {}
    for n in wanted:
        m = MEASURES[n]
        groups.setdefault((m.family, m.split), []).append(n)
    out: dict[str, float] = {}
    for (family, split), group in groups.items():
        out.update(FAMILIES[family](es, group, split, opts))
    return {n: float(out[n]) for n in wanted}


def describe() -> list[dict[str, str]]:
    """The registry as table rows (name, family, split, direction, meaning); patterns as ``<prefix><name>``."""
    rows = [{"name": m.name, "family": m.family, "split": m.split, "direction": m.direction, "meaning": m.meaning}
            for m in MEASURES.values()]
    rows += [{"name": f"{p.prefix}<name>", "family": p.family, "split": p.split, "direction": p.direction,
              "meaning": p.meaning.format(key="<name>")} for p in PATTERNS.values()]
    return rows
