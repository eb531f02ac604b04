"""``properties``: which image properties does an embedding cluster? (Kobs §4; docs/methods.md §9)"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from embedscope.analyses._sources import as_sources
from embedscope.analyses.result import Result, combine, provenance_of
from embedscope.errors import EmbedscopeError
from embedscope.names import SPLIT_CHOICES
from embedscope.validation import check_choice

ROW_FIELDS = ("model", "property", "NR-Prec", "R-Prec", "ceiling", "p_value", "z", "significant_2.576",
              "n_values", "queries", "lone_queries", "lone_values", "max_r", "capped")
PERM_FIELDS = ("perm_p_value", "perm_mean", "perm_sd", "permutations")  # with permutations > 0


#: the name under which a file's own property called 'class' is shown (the label is 'class')
CLASS_PROPERTY = "class (file property)"


def properties_of_files(files: Sequence[str | os.PathLike], *, names: Sequence[str] | None = None,
                        split: str = "test", max_r: int | None = None, properties: Sequence[str] | None = None,
                        metric: str = "euclidean", normalize: bool = False, with_class: bool = True,
                        progress: bool = False, permutations: int = 0, seed: int = 0) -> list[dict[str, Any]]:
    """Rows (model, property, NR-Prec, R-Prec, ceiling, p-value, ...) of each file's ``split``, sorted by NR-Prec.

    ``properties`` selects names (default: every ``/properties/<name>`` of the file, plus ``class``
    when ``with_class``, the label, as Kobs' "car model", unless a property already equals it and
    ``properties`` does not name it).
    Rows are sorted by the first file's NR-Prec (descending; a property it lacks by the next file
    that has it), the files in the given order within a property. ``permutations > 0`` adds a
    permutation test (``perm_p_value``, ``perm_mean``, ``perm_sd``; seeded by ``seed``). Measure:
    docs/methods.md §9, :func:`embedscope.metrics.properties.property_precision`.
    """
    rows, _ = _rows_and_provenance(files, names=names, split=split, max_r=max_r, properties=properties,
                                   metric=metric, normalize=normalize, with_class=with_class, progress=progress,
                                   permutations=permutations, seed=seed, with_provenance=False)
    return rows


def _rows_and_provenance(files, *, names, split, max_r, properties, metric, normalize, with_class, progress,
                         permutations, seed, with_provenance: bool = True
                         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """:func:`properties_of_files`'s rows and (``with_provenance``) each file's :func:`provenance_of`
    (of the whole file, as read): every file is read once."""
    from embedscope.analyses._sources import as_set
    from embedscope.analyses.result import unique_names
    from embedscope.metrics.properties import property_precision
    from embedscope.store import EmbeddingSet

    files = as_sources(files)  # a single path is a list of one file
    for f in files:
        if not isinstance(f, (str, os.PathLike, EmbeddingSet)):
            raise EmbedscopeError(f"properties reads embedding files or EmbeddingSets, got {type(f).__name__}")
    check_choice(split, "split", SPLIT_CHOICES)
    if isinstance(properties, str):  # one property name, not its letters
        properties = [properties]
    names = unique_names(files, names)  # as evaluate and spectrum: file stems, full paths where stems clash
    from embedscope.analyses.structure import check_not_repeated

    check_not_repeated(names)  # the same file twice: refused before any work, as evaluate and spectrum
    rows: list[dict[str, Any]] = []
    provs: list[dict[str, Any]] = []
    for f, nm in zip(files, names):
        whole = as_set(f)
        if isinstance(f, EmbeddingSet):
            f = nm  # named so in the messages below
        if with_provenance:
            provs.append(provenance_of(whole))
        es = whole.subset(split)
        del whole
        props = dict(es.properties)
        if with_class and "class" in props:  # 'class' names the class labels here: the file's own property
            # of that name (imports now refuse it) is shown beside them, renamed, not in their place
            props = {(CLASS_PROPERTY if k == "class" else k): v for k, v in props.items()}
        # (a property equal to the label, e.g. shapes' `shape`, says it; 'class' asked for by name is
        # measured all the same: it was "no property 'class'" on every shapes file)
        if with_class and ("class" in (properties or ())
                           or not any(np.array_equal(np.asarray(v), es.labels) for v in props.values())):
            props = {"class": es.labels, **props}
        if properties:
            missing = [p for p in properties if p not in props]
            if missing:
                raise EmbedscopeError(f"{f}: no property '{missing[0]}' (the file has: "
                                      f"{', '.join(props) or 'none'})")
            props = {p: props[p] for p in properties}
        if not props:
            raise EmbedscopeError(f"{f}: the file holds no properties (add some with 'embedscope add-properties')")
        if metric == "cosine" or normalize:  # named by file and split, as evaluate and scatter (not 'row k of X')
            zero = np.flatnonzero(~np.any(es.embeddings != 0, axis=1))
            if zero.size:
                raise EmbedscopeError(f"{f}: {zero.size} {split} embedding(s) are all zeros (the {split} split's "
                                      f"row {int(zero[0])} first): their cosine similarity is undefined "
                                      "(use --metric euclidean)")
        res = property_precision(es.embeddings, props, metric=metric, max_r=max_r, normalize=normalize,
                                 progress=progress, permutations=permutations, seed=seed)
        fields = ROW_FIELDS[2:] + (PERM_FIELDS if permutations else ())
        # a property without NR-Prec (every value lone, or one value: docs/methods.md §9) has no
        # permutation test either: its perm_* fields are NaN, as the other undefined numbers (every
        # row has the same columns; they were missing and the command failed with a KeyError)
        undefined = {"perm_p_value": np.nan, "perm_mean": np.nan, "perm_sd": np.nan, "permutations": permutations}
        for p, r in res.items():
            rows.append({"model": nm, "property": p, **{k: r.get(k, undefined.get(k)) for k in fields}})
    # by the first file's NR-Prec (descending, NaN last); a property the first file lacks by the NR-Prec of
    # the next file that has it (they kept the files' own listing order, unsorted)
    order: dict[str, int] = {}
    for nm in names:
        mine = {r["property"]: r["NR-Prec"] for r in rows if r["model"] == nm and r["property"] not in order}
        for p in sorted(mine, key=lambda p: -np.nan_to_num(mine[p], nan=-np.inf)):
            order[p] = len(order)
    mi = {m: i for i, m in enumerate(names)}
    rows.sort(key=lambda r: (order[r["property"]], mi[r["model"]]))
    return rows, provs


def properties(files: Sequence[Any], *, names: Sequence[str] | None = None, split: str = "test",
               max_r: int | None = None, properties: Sequence[str] | None = None, metric: str = "euclidean",
               normalize: bool = False, with_class: bool = True, progress: bool = False, permutations: int = 0,
               seed: int = 0):
    """Normalized R-Precision of every property of one or more files, models side by side (docs/methods.md §9).

    ``files``: paths of embedding files or :class:`~embedscope.store.EmbeddingSet` objects (one, or a
    list); a set's properties are ``es.properties``.

    One :class:`Result` per file: ``values`` = ``NR-Prec[<property>]`` (higher = the embedding
    clusters that property more), ``table`` = one row per property (NR-Prec, R-Prec, ceiling,
    p-value, counts), sorted by the first file's NR-Prec; ``provenance`` says whether R was capped.
    ``permutations > 0``: a permutation test beside the z-test (``perm_p_value``; seeded by ``seed``).
    """
    files = as_sources(files)  # a single path is a list of one file
    rows, provs = _rows_and_provenance(files, names=names, split=split, max_r=max_r, properties=properties,
                                       metric=metric, normalize=normalize, with_class=with_class,
                                       progress=progress, permutations=permutations, seed=seed)
    from embedscope.analyses.result import unique_names

    results = []
    # each file's provenance with its own name, in the order the files were given (the rows are sorted
    # by NR-Prec: a file without the top property appears later in them)
    for base, nm in zip(provs, unique_names(files, names)):
        mine = [r for r in rows if r["model"] == nm]
        prov = {**base, "split": split, "max_r": max_r, "metric": metric, "permutations": permutations,
                **({"permutation_seed": seed} if permutations else {}),
                "cap": f"R capped at {max_r} (Kobs' code)" if max_r else "R uncapped (the paper's definition)"}
        results.append(Result("properties", {f"NR-Prec[{r['property']}]": r["NR-Prec"] for r in mine}, prov,
                              table=mine, model=nm))
    return combine(results)
