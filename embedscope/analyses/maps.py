"""``tsne`` and ``yoke``: maps of how embeddings generalise (Xuan, Stylianou & Pless; docs/methods.md §10).

The computations live in :mod:`embedscope.tsne`; these functions choose the rows, run them and
return a :class:`Result` whose ``table`` holds one row per mapped point (path, split, class,
coordinates) and whose ``arrays`` feed :mod:`embedscope.viz`.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from embedscope.analyses._sources import as_set
from embedscope.analyses.result import Result, model_name, provenance_of, unique_names
from embedscope.errors import EmbedscopeError, UsageError
from embedscope.names import SPLIT_CHOICES
from embedscope.tsne import DEFAULT_MAX_POINTS
from embedscope.validation import check_bool, check_choice, check_int, check_number, one_point

SHOWN_TSNE = ("method", "perplexity", "seed", "initialization", "early_exaggeration", "early_exaggeration_iter",
              "n_iter", "kl_divergence")
SHOWN_YOKE = ("yoke", "alpha", "alpha_times_n", "perplexity", "seed", "negative_gradient_method", "kl_a", "kl_b",
              "kl", "mean_displacement", "mean_centroid_displacement", "n")


def _by_split_key(es) -> np.ndarray:
    """One stratum per (split, class), numbered by split name, then class name (natural order): within one
    split the classes' order of :meth:`~embedscope.store.EmbeddingSet.sample`, so ``yoke --max-points``
    keeps the rows ``tsne --max-points`` keeps of that split (text keys such as "test:10" sorted before
    "test:2" and drew other rows from 10 classes on)."""
    from embedscope.names import class_name_ranks

    _, s = np.unique(es.split.astype(str), return_inverse=True)
    # each class by its name's rank (natural order), not by its label: a file listing the same classes in
    # another order keeps the same rows (its labels numbered the classes otherwise and drew other rows)
    lab = class_name_ranks(es.labels, es.class_names)
    return s.astype(np.int64).ravel() * (int(lab.max(initial=0)) + 1) + lab


def default_cap_note(points: int, selected: int, what: str = "points") -> str:
    """The note of a command that mapped ``points`` of the ``selected`` rows because of the default
    ``--max-points`` (:data:`embedscope.tsne.DEFAULT_MAX_POINTS`; a map's time grows with its points)."""
    return (f"note: mapped a stratified subsample of {points} of the {selected} {what} (the default --max-points "
            f"{DEFAULT_MAX_POINTS}; t-SNE of more takes many minutes): --max-points {selected} maps them all")


def subsample(es, max_points, seed, *, by_split: bool):
    """The rows ``tsne``/``yoke`` map of ``es`` under ``--max-points`` (stratified by class, and by split with
    ``by_split``; seeded): ``es`` itself when it has no more rows.

    Nested: the rows kept for ``max_points`` are among those kept for ``max_points + 1`` (each
    stratum's quota by Webster's divisor method, its rows the first of one seeded permutation;
    :func:`embedscope.tsne.stratified_subsample`)."""
    return _sample(es, max_points, seed, by_split=by_split)


def _sample(es, max_points, seed, *, by_split: bool):
    if max_points is None or max_points >= es.n:
        return es
    if by_split:  # stratified by split and class together
        from embedscope.tsne import stratified_subsample

        return es.select(stratified_subsample(_by_split_key(es), max_points, seed=seed))
    return es.sample(max_points, seed=seed)


def _check_enough(n: int, before: int, max_points: int | None, what: str = "t-SNE needs at least {} points") -> None:
    """The same minimum for every map (:data:`embedscope.tsne.MIN_POINTS`, 6 points, as
    :func:`embedscope.tsne.effective_perplexity`), naming --max-points when the subsample made it too small."""
    from embedscope.tsne import MIN_POINTS

    if n >= MIN_POINTS:
        return
    what = what.format(MIN_POINTS)
    hint = (f" (--max-points {max_points} keeps {n} of {before})"
            if max_points is not None and before > n else "")
    raise EmbedscopeError(f"{what}, the selection has {n}{hint}")


def _check_tsne_settings(perplexity, seed, n_iter, n_jobs, max_points) -> tuple:
    """The settings openTSNE / joblib would reject (or silently misuse), as one-line errors."""
    perplexity = check_number(perplexity, "perplexity", min=0, min_inclusive=False)  # (the number: "30" was kept)
    from embedscope.tsne.joint import MAX_SEED, check_n_jobs

    seed = check_int(seed, "seed", min=0, max=MAX_SEED)  # (scikit-learn's PCA refused 2**32 deep inside)
    n_iter = check_int(n_iter, "n_iter", min=1)
    max_points = check_int(max_points, "max_points", min=1, allow_none=True)
    n_jobs = check_n_jobs(n_jobs, allow_none=True)  # None: auto_jobs (after sampling)
    return perplexity, seed, n_iter, n_jobs, max_points



def _check_dims(es, name) -> None:
    """One-dimensional embeddings named by their file (openTSNE's PCA initialisation takes two
    components; the map's own check names only its array)."""
    what = name if isinstance(name, (str, os.PathLike)) else "the embeddings"
    if es.dim < 2:
        raise EmbedscopeError(f"{what}: t-SNE needs embeddings of at least 2 dimensions, got {es.dim}")
    X = es.embeddings
    if one_point(X):  # (the map's own check says 'X_b')
        raise EmbedscopeError(f"{what}: all {X.shape[0]} rows are identical (a collapsed model); t-SNE needs "
                              "points that differ")


def tsne(source: Any, *, joint: bool = False, split: str | None = None, max_points: int | None = None,
         perplexity: float = 30.0, seed: int = 0, n_iter: int = 500, n_jobs: int | None = None,
         progress: bool = False, name: str | None = None) -> Result:
    """A t-SNE map of one split coloured by class, or with ``joint`` one map of the train and test
    splits together (Xuan §2; openTSNE's defaults, docs/methods.md §10).

    ``max_points``: map a stratified, seeded subsample of at most that many points (None: every
    row; the commands' default is
    :data:`embedscope.tsne.DEFAULT_MAX_POINTS`), nested in ``max_points``
    (:func:`subsample`). ``result.table``: one row per point (path, split, label, class, x, y);
    ``result.arrays``: ``Y`` and ``labels`` (single) or ``Y_train``, ``Y_test``, ``labels_train``,
    ``labels_test`` (joint), and ``class_names``; ``result.provenance``: the t-SNE settings (and
    ``subsampled_from``, the rows selected, when ``max_points`` kept fewer). ``n_jobs``: openTSNE's
    threads; None: the idle cores from 1,000 points, else one (:func:`embedscope.tsne.joint.auto_jobs`;
    the map is the same for any count).
    """
    from embedscope.tsne import joint_tsne, single_tsne
    from embedscope.tsne.joint import auto_jobs

    joint, progress = check_bool(joint, "joint"), check_bool(progress, "progress")
    if joint and split is not None:
        raise UsageError("a joint map uses both splits; leave out split")
    perplexity, seed, n_iter, n_jobs, max_points = _check_tsne_settings(perplexity, seed, n_iter, n_jobs, max_points)
    if split is not None:
        check_choice(split, "split", SPLIT_CHOICES)
    es = as_set(source)
    _check_dims(es, source)
    common = dict(perplexity=perplexity, seed=seed, n_iter=n_iter, n_jobs=n_jobs, progress=progress,
                  return_info=True)
    names = es.class_names
    if joint:
        for s in ("train", "test"):
            if not (es.split == s).any():
                raise EmbedscopeError(f"a joint map needs train and test rows; the file has no {s} rows")
        es = es.select(np.isin(es.split, ["train", "test"]))
        before = es.n
        es = _sample(es, max_points, seed, by_split=True)
        _check_enough(es.n, before, max_points)
        tr, te = es.subset("train"), es.subset("test")
        common["n_jobs"] = auto_jobs(n_jobs, es.n)
        Y_tr, Y_te, info = joint_tsne(tr.embeddings, te.embeddings, **common)
        parts = [(tr, Y_tr), (te, Y_te)]
        arrays = {"Y_train": Y_tr, "Y_test": Y_te, "labels_train": tr.labels, "labels_test": te.labels}
    else:
        split = split or "test"
        # split "all": stratified by split and class, as --help says (by class alone, a split's share drifted)
        es = es.subset(split)
        before = es.n
        es = _sample(es, max_points, seed, by_split=split == "all")
        _check_enough(es.n, before, max_points)
        common["n_jobs"] = auto_jobs(n_jobs, es.n)
        Y, info = single_tsne(es.embeddings, **common)
        parts = [(es, Y)]
        arrays = {"Y": Y, "labels": es.labels}
    arrays["class_names"] = names
    rows = [{"path": p.paths[i], "split": p.split[i], "label": int(p.labels[i]), "class": names[p.labels[i]],
             "x": float(Y[i, 0]), "y": float(Y[i, 1])} for p, Y in parts for i in range(p.n)]
    info.update(max_points=max_points, joint=bool(joint), split=None if joint else split)
    if len(rows) < before:  # a subsample: of how many rows
        info["subsampled_from"] = int(before)
    values = {k: info[k] for k in ("kl_divergence",) if k in info}
    values["points"] = len(rows)
    model = model_name(es, name)
    prov = provenance_of(es, extra={**info, "title": f"{model}: t-SNE settings"})
    return Result("tsne", values, prov, table=rows, arrays=arrays, model=model)


def yoke(source_a: Any, source_b: Any = None, *more_sources: Any, split: str = "test", alpha: float | None = None,
         yoke: str = "points", max_points: int | None = None, perplexity: float = 30.0, seed: int = 0,
         n_iter: int = 500, n_jobs: int | None = None, names: Sequence[str] | None = None,
         progress: bool = False) -> Result:
    """Yoked t-SNE of the same images under two or more embeddings (Xuan §2.3, docs/methods.md §10):
    two models, or a sequence such as the checkpoints of successive epochs, each map yoked to the
    next (:func:`embedscope.tsne.yoked_tsne_maps`).

    The embeddings: ``yoke(a, b, ...)`` or one list ``yoke([a, b, ...])`` (as
    :func:`~embedscope.analyses.spectrum` and :func:`~embedscope.analyses.properties` take them),
    each a path, an :class:`~embedscope.store.EmbeddingSet` or ``(X, y)``.
    Rows are matched by path (every file must hold the same images of ``split``); ``alpha``
    defaults to 0.01 / N (0: independent maps); ``yoke``: ``"points"`` (each image to itself) or
    ``"centroids"`` (each class's mean to itself: the classes' layout agrees, the points within a
    class are free). ``result.table``: per image every map's coordinates and the displacement
    between consecutive maps (two maps: ``x_a``, ``y_a``, ``x_b``, ``y_b``, ``displacement``; K
    maps: ``x_1``, ``y_1``, …, ``x_K``, ``y_K``, ``displacement_1_2``, …); ``result.values``: each
    map's KL divergence (``kl_a``, ``kl_b`` or ``kl_1`` … ``kl_K``) and the mean displacement
    (and, yoking centroids, the mean centroid displacement); ``result.arrays["Ys"]``: the maps.
    ``max_points``: as :func:`tsne`'s, the rows :func:`tsne` keeps of ``split`` (``provenance
    ["subsampled_from"]``: the images matched, when it kept fewer). ``n_jobs``: as :func:`tsne`'s
    (None: the idle cores from 1,000 images).
    """
    from embedscope.store import match_by_path
    from embedscope.tsne import yoked_tsne_maps
    from embedscope.tsne.joint import auto_jobs
    from embedscope.tsne.yoked import YOKES

    if alpha is not None:
        from embedscope.tsne.yoked import MAX_ALPHA

        alpha = check_number(alpha, "alpha", min=0, max=MAX_ALPHA)
    perplexity, seed, n_iter, n_jobs, max_points = _check_tsne_settings(perplexity, seed, n_iter, n_jobs, max_points)
    check_choice(split, "split", SPLIT_CHOICES)
    check_choice(yoke, "yoke", YOKES)
    progress = check_bool(progress, "progress")
    sources = [source_a, source_b, *more_sources]
    if source_b is None and not more_sources:  # one list of them, as spectrum and properties take them
        from embedscope.analyses._sources import as_sources

        sources = as_sources(source_a)
        if len(sources) < 2:
            raise UsageError(f"yoke needs two or more embeddings (yoke(a, b, ...) or yoke([a, b, ...])), got "
                             f"{len(sources)}")
    elif any(s is None for s in sources):
        raise UsageError("yoke needs two or more embeddings (yoke(a, b, ...) or yoke([a, b, ...])), got None")
    K = len(sources)
    labels = unique_names(sources, names)
    sets = [as_set(src).subset(split) for src in sources]
    for es, src, label in zip(sets, sources, labels):
        _check_dims(es, src if isinstance(src, (str, os.PathLike)) else label)
    for k in range(1, K):  # every file's rows in the first file's order
        sets[0], sets[k] = match_by_path(sets[0], sets[k], labels[0], labels[k])
    a = sets[0]
    before = a.n
    if max_points is not None and max_points < a.n:
        keep = np.isin(a.paths, _sample(a, max_points, seed, by_split=True).paths)
        sets = [es.select(keep) for es in sets]
        a = sets[0]
    _check_enough(a.n, before, max_points, "yoked t-SNE needs at least {} images")
    Ys, info = yoked_tsne_maps([es.embeddings for es in sets], yoke=yoke, labels=a.labels, alpha=alpha,
                               perplexity=perplexity, seed=seed, n_iter=n_iter, n_jobs=auto_jobs(n_jobs, a.n),
                               progress=progress, return_info=True)
    tags = ["a", "b"] if K == 2 else [str(k + 1) for k in range(K)]
    disp = [np.linalg.norm(Ys[k] - Ys[k + 1], axis=1) for k in range(K - 1)]
    dnames = ["displacement"] if K == 2 else [f"displacement_{k + 1}_{k + 2}" for k in range(K - 1)]
    rows = []
    for i in range(a.n):
        row = {"path": a.paths[i], "split": a.split[i], "label": int(a.labels[i]),
               "class": a.class_names[a.labels[i]]}
        for t, Y in zip(tags, Ys):
            row[f"x_{t}"] = float(Y[i, 0])
            row[f"y_{t}"] = float(Y[i, 1])
        for nm, d in zip(dnames, disp):
            row[nm] = float(d[i])
        rows.append(row)
    info.update(split=split, max_points=max_points, names=list(labels))
    if a.n < before:  # a subsample: of how many images
        info["subsampled_from"] = int(before)
    values = {f"kl_{t}": float(v) for t, v in zip(tags, info["kl"])}
    values["mean_displacement"] = info["mean_displacement"]
    if "mean_centroid_displacement" in info:
        values["mean_centroid_displacement"] = info["mean_centroid_displacement"]
    values["n"] = int(a.n)
    how = "" if yoke == "points" else ", yoked by class centroids"
    shown = f"{labels[0]} and {labels[1]}" if K == 2 else ", ".join(labels)
    prov = {**({"a": provenance_of(sets[0]), "b": provenance_of(sets[1])} if K == 2 else {}),
            "sources": [provenance_of(es) for es in sets], **info,
            "title": f"yoked t-SNE of {shown} [{split}]{how}"}
    arrays = {"Ys": Ys, "labels": a.labels, "class_names": a.class_names, "names": list(labels)}
    if K == 2:
        arrays.update(Y_a=Ys[0], Y_b=Ys[1])
    return Result("yoke", values, prov, table=rows, arrays=arrays, model=" ~ ".join(labels))
