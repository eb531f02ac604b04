"""``properties``: which image properties does an embedding cluster? (Kobs §4; docs/methods.md §9)"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from embedscope.analyses._sources import as_sources, check_no_zero_rows, other_images_note
from embedscope.analyses.result import SHOWN_NAME, Result, _short, _short_unique, combine, provenance_of
from embedscope.errors import EmbedscopeError
from embedscope.names import SPLIT_CHOICES
from embedscope.validation import check_bool, check_choice

ROW_FIELDS = ("model", "property", "NR-Prec", "R-Prec", "ceiling", "p_value", "z", "significant_2.576",
              "n_values", "queries", "lone_queries", "lone_values", "max_r", "capped")
PERM_FIELDS = ("perm_p_value", "perm_mean", "perm_sd", "permutations")  # with permutations > 0


def typed_table(frame):
    """The per-row table as written to Parquet: ``max_r`` an integer column with or without a cap
    (empty without one, which Arrow would otherwise type "null"); ``significant_2.576`` a nullable
    boolean (missing where NR-Prec is undefined: not False, "not significant"; a column of booleans
    and None was an object column, every cell missing typed "null")."""
    import pandas as pd

    frame = frame.copy()
    if "max_r" in frame.columns:
        frame["max_r"] = pd.array([None if v is None or v != v else int(v) for v in frame["max_r"]], dtype="Int64")
    if "significant_2.576" in frame.columns:
        frame["significant_2.576"] = pd.array([None if pd.isna(v) else bool(v)
                                               for v in frame["significant_2.576"]], dtype="boolean")
    return frame


#: the name under which a file's own property called 'class' is shown (the label is 'class')
CLASS_PROPERTY = "class (file property)"
#: the most property names one note or error line lists (a file of 3,000 measurements: the first, then the count)
MOST_NAMED = 12


def _listed(names, *, quote: bool = True) -> str:
    """Property names for a note or an error line: each longer than :data:`SHOWN_NAME` shortened in the
    middle (two never shown alike), in single quotes unless not ``quote``, at most :data:`MOST_NAMED` of
    them and then how many more (the table, CSV and JSON keep every name whole)."""
    names = [str(k) for k in names]
    shown = [f"'{n}'" if quote else n for n in _short_unique(names[:MOST_NAMED], SHOWN_NAME)]
    more = f" and {len(names) - MOST_NAMED} more" if len(names) > MOST_NAMED else ""
    return ", ".join(shown) + more


def properties_of_files(files: Sequence[str | os.PathLike], *, names: Sequence[str] | None = None,
                        split: str = "test", max_r: int | None = None, properties: Sequence[str] | None = None,
                        metric: str = "euclidean", normalize: bool = False, with_class: bool = True,
                        progress: bool = False, permutations: int = 0, seed: int | None = None
                        ) -> list[dict[str, Any]]:
    """Rows (model, property, NR-Prec, R-Prec, ceiling, p-value, ...) of each file's ``split``, sorted by NR-Prec.

    ``properties`` selects names (default: every ``/properties/<name>`` of the file, plus ``class``
    when ``with_class``, the label, as Kobs' "car model", unless a property already equals it and
    ``properties`` does not name it).
    Rows are sorted by the first file's NR-Prec (descending; a property it lacks by the next file
    that has it), the files in the given order within a property. ``permutations > 0`` adds a
    permutation test (``perm_p_value``, ``perm_mean``, ``perm_sd``; seeded by ``seed``, default 0; a
    ``seed`` without ``permutations`` seeds nothing and is refused). Measure:
    docs/methods.md §9, :func:`embedscope.metrics.properties.property_precision`.
    """
    rows = _rows_and_provenance(files, names=names, split=split, max_r=max_r, properties=properties,
                                metric=metric, normalize=normalize, with_class=with_class, progress=progress,
                                permutations=permutations, seed=seed, with_provenance=False)[0]
    return rows


def _rows_and_provenance(files, *, names, split, max_r, properties, metric, normalize, with_class, progress,
                         permutations, seed, with_provenance: bool = True
                         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """:func:`properties_of_files`'s rows, (``with_provenance``) each file's :func:`provenance_of`
    (of the whole file, as read) and each file's :func:`_explained` additions to it (``undefined``,
    ``notes``): every file is read once (several files: each one's split column and property names are
    read before any work, to refuse a split or a property that a later file lacks up front)."""
    from embedscope.analyses._sources import _arrays_pair, as_set, source_hint
    from embedscope.analyses.result import unique_names
    from embedscope.metrics.properties import _check_seed, property_precision
    from embedscope.store import EmbeddingSet

    # a seed without permutations seeded nothing, without a word (the command refuses --seed without
    # --permutations): refused before any work, as there
    seed = _check_seed(seed, permutations)
    files = as_sources(files)  # a single path is a list of one file
    for f in files:
        if not isinstance(f, (str, os.PathLike, EmbeddingSet)):
            pair = isinstance(f, tuple) and _arrays_pair(f)  # (X, y), which every other analysis takes
            raise EmbedscopeError(f"properties reads embedding files or EmbeddingSets, got {type(f).__name__}"
                                  + (": (X, y) holds no properties; give EmbeddingSet.from_arrays(X, y, split=..., "
                                     "properties={name: values})" if pair else source_hint(f)))
    check_choice(split, "split", SPLIT_CHOICES)
    normalize, with_class = check_bool(normalize, "normalize"), check_bool(with_class, "with_class")
    progress = check_bool(progress, "progress")  # ("no" is truthy: it drew a bar)
    if isinstance(properties, str):  # one property name, not its letters
        properties = [properties]
    if properties is not None:
        properties = list(properties)
        twice = next((p for i, p in enumerate(properties) if p in properties[:i]), None)
        if twice is not None:  # measured and listed once: the second mention was dropped without a word
            raise EmbedscopeError(f"properties names '{twice}' twice: give each property once")
    names = unique_names(files, names)  # as evaluate and spectrum: file stems, full paths where stems clash
    from embedscope.analyses.structure import check_not_repeated

    check_not_repeated(names)  # the same file twice: refused before any work, as evaluate and spectrum
    if len(files) > 1:  # a later file without the split or a property named: refused before any work (it
        # failed after measuring the files before it, permutation tests and all)
        _check_files_first(files, names, split=split, properties=properties, metric=metric, normalize=normalize,
                           with_class=with_class)
    rows: list[dict[str, Any]] = []
    provs: list[dict[str, Any]] = []
    extras: list[dict[str, Any]] = []
    first_paths = None  # the first file's images of the split: the others' are compared with them
    for f, nm in zip(files, names):
        whole = as_set(f)
        if isinstance(f, EmbeddingSet):
            f = nm  # named so in the messages below
        if with_provenance:
            provs.append(provenance_of(whole))
        es = whole.subset(split)
        trained = (whole.attrs or {}).get("checkpoint_config")
        del whole
        props, twins, class_listed, several = _selected(es, f, split=split, properties=properties, metric=metric,
                                                        normalize=normalize, with_class=with_class)
        res = property_precision(es.embeddings, props, metric=metric, max_r=max_r, normalize=normalize,
                                 progress=progress, permutations=permutations,
                                 seed=seed if permutations else None)
        fields = ROW_FIELDS[2:] + (PERM_FIELDS if permutations else ())
        # a property without NR-Prec (every value lone, or one value: docs/methods.md §9) has no
        # permutation test either: its perm_* fields are NaN, as the other undefined numbers (every
        # row has the same columns; they were missing and the command failed with a KeyError)
        undefined = {"perm_p_value": np.nan, "perm_mean": np.nan, "perm_sd": np.nan, "permutations": permutations}
        for p, r in res.items():
            rows.append({"model": nm, "property": p, **{k: r.get(k, undefined.get(k)) for k in fields}})
        extras.append(_explained(res, fields, n=len(es.labels), metric=metric, normalize=normalize,
                                 dim=es.embeddings.shape[1], twins=[t for t in twins if t in res],
                                 class_dropped=not class_listed and not properties))
        if several:  # (N x k properties: the whole file was refused, "property 'v' has shape (6, 2)", no file named)
            named = _listed(several)
            extras[-1].setdefault("notes", []).append(
                f"propert{'y' if len(several) == 1 else 'ies'} {named} {'holds' if len(several) == 1 else 'hold'} "
                "several values per image: not measured (NR-Prec takes one value per image)")
        other_metric = _trained_metric_note(trained, es.embeddings, metric=metric, normalize=normalize)
        if other_metric:
            extras[-1].setdefault("notes", []).append(other_metric)
        if len(files) > 1:
            if first_paths is None:
                first_paths = es.paths
            else:
                other = other_images_note(es.paths, first_paths, split, names[0])
                if other:
                    extras[-1].setdefault("notes", []).append(other)
    # by the first file's NR-Prec (descending, NaN last); a property the first file lacks by the NR-Prec of
    # the next file that has it (they kept the files' own listing order, unsorted)
    order: dict[str, int] = {}
    for nm in names:
        mine = {r["property"]: r["NR-Prec"] for r in rows if r["model"] == nm and r["property"] not in order}
        for p in sorted(mine, key=lambda p: -np.nan_to_num(mine[p], nan=-np.inf)):
            order[p] = len(order)
    mi = {m: i for i, m in enumerate(names)}
    rows.sort(key=lambda r: (order[r["property"]], mi[r["model"]]))
    return rows, provs, extras


def _trained_metric_note(config, X, *, metric: str, normalize: bool) -> str | None:
    """The note of a file whose model was trained with the cosine distance (its checkpoint's config,
    :func:`embedscope.models.distances.distance_for_config`) ranked here by the Euclidean distance of
    raw rows of different norms: the ranking is then not the model's own (on unit rows both agree)."""
    if (metric != "euclidean" or normalize or not isinstance(config, dict) or not config.get("loss")
            or len(X) == 0):
        return None
    norms = np.linalg.norm(np.asarray(X, dtype=np.float64), axis=1)
    lo, hi = float(norms.min()), float(norms.max())
    if hi - lo <= 1e-3 * max(hi, 1e-12):  # unit (or equal-norm) rows: the same ranking as cosine
        return None
    # (only here: embedscope.models imports torch, which a small properties run does without)
    from embedscope.models.distances import distance_for_config

    try:
        trained = distance_for_config(config)
    except EmbedscopeError:  # an unknown loss: nothing to compare with
        return None
    if trained != "cosine":
        return None
    return (f"the model was trained with the cosine distance (its checkpoint's config), but its embeddings are "
            f"ranked here by the Euclidean distance of raw rows of norms {lo:.3g} to {hi:.3g} (Kobs' code's "
            "default): --metric cosine ranks the images as the model does")


def _check_files_first(files, names, *, split: str, properties, metric: str, normalize: bool,
                       with_class: bool) -> None:
    """Refuse, before any file is measured, a file that lacks ``split`` or a property named. Each file's
    split column and property names are read alone (the whole file is read once, for its measure); a
    file that fails this light check, or that it cannot take, is loaded to raise the measure's own error."""
    import h5py

    from embedscope.analyses._sources import split_values
    from embedscope.store import EmbeddingSet, load

    for f, nm in zip(files, names):
        if isinstance(f, EmbeddingSet):
            part = f.subset(split)
        else:
            try:
                with h5py.File(f, "r") as h:  # one light read: the split column and the property names
                    keys = set(h["properties"].keys()) if "properties" in h else set()
                    has_split = split in (None, "all") or split in split_values(h)
            except Exception:  # noqa: BLE001 - whatever the light read cannot take, the full load reports
                keys, has_split = None, False
            if keys is not None and has_split:
                # as _selected names them: with the class row, a file's own 'class' is renamed
                have = {(CLASS_PROPERTY if with_class and k == "class" else k) for k in keys}
                if with_class:
                    have.add("class")
                if (all(p in have for p in properties) if properties else have):
                    continue
            part = load(f).subset(split)
        _selected(part, nm if isinstance(f, EmbeddingSet) else f, split=split, properties=properties,
                  metric=metric, normalize=normalize, with_class=with_class)
        del part


def _selected(es, f, *, split: str, properties, metric: str, normalize: bool, with_class: bool):
    """The properties of ``es`` (a file's rows of ``split``; ``f`` names the file in messages) to measure:
    ``(props, twins, class_listed, several)`` (``twins``: the properties that group the images as the
    labels; ``several``: those of several values per image, N x k, left out when not named), or one
    error line (a property named that the file lacks or holds several values per image, no
    property at all, an all-zero row under cosine)."""
    if len(es.labels) < 2:  # (was "X needs at least 2 row(s) and 1 column, got shape (1, D)", naming no file)
        where = "the file holds" if split == "all" else f"its {split} split holds"
        raise EmbedscopeError(f"{f}: {where} {len(es.labels)} image: NR-Prec ranks each image's neighbours, which "
                              "needs at least 2 images" + ("" if split == "all" else " (another split?)"))
    props = dict(es.properties)
    several = [k for k, v in props.items() if np.ndim(v) != 1]
    for k in several:
        if properties and k in properties:
            raise EmbedscopeError(f"{f}: property '{_short(k, SHOWN_NAME)}' holds several values per image (shape "
                                  f"{tuple(np.shape(props[k]))}): NR-Prec takes one value per image")
        del props[k]
    if with_class and "class" in props:  # 'class' names the class labels here: the file's own property
        # of that name (imports now refuse it) is shown beside them, renamed, not in their place
        props = {(CLASS_PROPERTY if k == "class" else k): v for k, v in props.items()}
    # a property that groups the images exactly as the label (shapes' `shape`; or by chance, e.g. one
    # value on a split of one class) gives the class's numbers: it stands for the class, and a note
    # says so (the class row was missing without a word); 'class' asked for by name is measured all
    # the same (it was "no property 'class'" on every shapes file)
    twins = [k for k, v in props.items() if _same_grouping(v, es.labels)] if with_class else []
    class_listed = with_class and ("class" in (properties or ()) or not twins)
    if class_listed:
        props = {"class": es.labels, **props}
    if properties:
        missing = [p for p in properties if p not in props]
        if missing:
            raise EmbedscopeError(f"{f}: no property '{_short(missing[0], SHOWN_NAME)}' (the file has: "
                                  f"{_listed(props, quote=False) or 'none'})")
        props = {p: props[p] for p in properties}
    if not props:
        raise EmbedscopeError(f"{f}: the file holds no properties (add some with 'embedscope add-properties')")
    for k, v in props.items():  # (the measure's own error named neither the file nor a way around it)
        v = np.asarray(v)
        if v.dtype.kind == "f" and v.ndim == 1 and not np.all(np.isfinite(v)):
            bad = int(np.count_nonzero(~np.isfinite(v)))
            raise EmbedscopeError(f"{f}: property '{_short(k, SHOWN_NAME)}' holds NaN or inf ({bad} of the {len(v)} "
                                  f"images of split {split}): leave it out by naming the properties to measure "
                                  "(--properties)")
    if metric == "cosine" or normalize:  # named by file and split, as evaluate and scatter (not 'row k of X')
        check_no_zero_rows(es, split)
    return props, twins, class_listed, several


def _same_grouping(values, labels) -> bool:
    """Whether a property groups the images exactly as the labels do (the same partition, whatever the
    values are called): then its R-Prec, NR-Prec and p-values are the class's, number for number."""
    a, b = np.asarray(values), np.asarray(labels)
    if a.shape != b.shape or a.ndim != 1:
        return False
    if a.size == 0:
        return True
    try:
        ia, ib = (np.unique(x, return_inverse=True)[1].ravel().astype(np.int64) for x in (a, b))
    except TypeError:  # values of mixed types: the measure refuses them, in one line
        return False
    na, nb = int(ia.max()) + 1, int(ib.max()) + 1
    return na == nb and np.unique(ia * nb + ib).size == na


#: the numbers the terminal table shows (with --permutations also perm_p_value): an undefined one is
#: named in the note; the others (z, perm_mean, perm_sd) go with them and are named only for a reason of their own
SHOWN = ("NR-Prec", "R-Prec", "ceiling", "p_value", "perm_p_value")


def _explained(res: dict[str, dict[str, Any]], fields, *, n: int, metric: str, normalize: bool, dim: int,
               twins: list[str], class_dropped: bool) -> dict[str, Any]:
    """A file's provenance additions: ``undefined`` (property -> which numbers are NaN and why, from the
    measure's own reasons; :func:`embedscope.analyses.structure.undefined_note` makes the line) and
    ``notes`` (rows that repeat exactly, a property that is the class), each only when there is one."""
    out: dict[str, Any] = {}
    undefined: dict[str, str] = {}
    for p, r in res.items():
        why = r.get("undefined") or {}
        shown = [f for f in SHOWN if f in fields and f in why]
        said = {why[f] for f in shown}
        named = shown + [f for f in fields if f in why and f not in SHOWN and why[f] not in said]
        groups: dict[str, list[str]] = {}
        for f in named:
            groups.setdefault(why[f], []).append(f)
        if groups:
            undefined[p] = "; ".join(f"{', '.join(fs)}: {w}" for w, fs in groups.items())
    if undefined:
        out["undefined"] = undefined
    notes = []
    rep = int(next(iter(res.values())).get("repeated_rows", 0)) if res else 0
    if 0 < rep < n - 1:  # every row the same point (rep = n - 1): the numbers are undefined, said above
        as_ranked = " after L2 normalisation" if metric == "cosine" or normalize else ""
        one_d = ("; one dimension under cosine: every row normalises to +1 or -1"
                 if metric == "cosine" and dim == 1 else "")
        notes.append(f"{rep} of {n} rows repeat another row exactly{as_ranked}: their tied neighbours are "
                     f"ranked by row order (lower index first){one_d}")
    if twins:
        named = _listed(twins)
        one = len(twins) == 1
        notes.append(f"propert{'y' if one else 'ies'} {named} group{'s' if one else ''} the images exactly as the "
                     f"class labels: {'its' if one else 'their'} numbers are the class's"
                     + (" (no 'class' row; ask for 'class' by name to list it too)" if class_dropped else ""))
    if notes:
        out["notes"] = notes
    return out


def properties(files: Sequence[Any], *, names: Sequence[str] | None = None, split: str = "test",
               max_r: int | None = None, properties: Sequence[str] | None = None, metric: str = "euclidean",
               normalize: bool = False, with_class: bool = True, progress: bool = False, permutations: int = 0,
               seed: int | None = None):
    """Normalized R-Precision of every property of one or more files, models side by side (docs/methods.md §9).

    ``files``: paths of embedding files or :class:`~embedscope.store.EmbeddingSet` objects (one, or a
    list); a set's properties are ``es.properties``.

    One :class:`Result` per file: ``values`` = ``NR-Prec[<property>]`` (higher = the embedding
    clusters that property more), ``table`` = one row per property (NR-Prec, R-Prec, ceiling,
    p-value, counts), sorted by the first file's NR-Prec; ``provenance`` says whether R was capped.
    ``permutations > 0``: a permutation test beside the z-test (``perm_p_value``; seeded by ``seed``,
    default 0; a ``seed`` without ``permutations`` would seed nothing and is refused, as the command's ``--seed``).
    A number the data leave undefined is NaN and ``provenance["undefined"]`` maps its property to which
    numbers and why (every value lone; one value, p = 1; every row the same point, a collapsed model:
    the ranking would be the row order); ``provenance["notes"]`` says when rows repeat exactly (their
    ties go by row order) and when a property groups the images as the class does (it then stands for
    the class, which gets no row of its own unless asked for). Both keys only when there is something to say.
    """
    files = as_sources(files)  # a single path is a list of one file
    rows, provs, extras = _rows_and_provenance(files, names=names, split=split, max_r=max_r, properties=properties,
                                               metric=metric, normalize=normalize, with_class=with_class,
                                               progress=progress, permutations=permutations, seed=seed)
    from embedscope.analyses.result import unique_names

    results = []
    # each file's provenance with its own name, in the order the files were given (the rows are sorted
    # by NR-Prec: a file without the top property appears later in them)
    for base, extra, nm in zip(provs, extras, unique_names(files, names)):
        mine = [r for r in rows if r["model"] == nm]
        prov = {**base, "split": split, "max_r": max_r, "metric": metric, "permutations": permutations,
                **({"permutation_seed": 0 if seed is None else seed} if permutations else {}),
                "cap": (f"R capped at {max_r}" + (" (Kobs' code)" if max_r == 1023 else "") if max_r
                        else "R uncapped (the paper's definition)"),
                **extra}
        results.append(Result("properties", {f"NR-Prec[{r['property']}]": r["NR-Prec"] for r in mine}, prov,
                              table=mine, model=nm))
    return combine(results)
