"""``evaluate``: retrieval and clustering metrics of an embedding file (docs/methods.md §1)."""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from embedscope.analyses._sources import (
    as_set,
    as_sources,
    check_disjoint,
    check_no_zero_rows,
    check_splits_first,
    other_images_note,
    split_paths,
)
from embedscope.analyses.result import Result, ResultSet, combine, model_name, provenance_of, unique_names
from embedscope.errors import EmbedscopeError, UsageError
from embedscope.names import RETRIEVAL_METRICS, SPLIT_CHOICES
from embedscope.text import quoted
from embedscope.validation import check_bool, check_choice, check_int, one_direction_within_rounding, one_point

#: k-means seed: faiss's default, which Roth's code and pytorch-metric-learning use (docs/methods.md §1).
KMEANS_SEED = 1234
LONE_QUERIES = ("exclude", "zero")
COUNT_KEYS = ("n_queries", "n_lone", "n_evaluated", "depth")


def evaluate(source: Any, *, split: str = "test", query_split: str | None = None,
             reference_split: str | None = None, metric: str = "cosine", ks: Sequence[int] | None = None,
             include: Sequence[str] | None = None, lone_queries: str = "exclude", seed: int = KMEANS_SEED,
             niter: int = 20, per_class: bool = False, device: str = "auto", progress: bool = False,
             name: str | None = None) -> Result:
    """Retrieval and clustering metrics of one split of an embedding file (docs/methods.md §1).

    The rows of ``split`` are queries and references at once (each query excluded from its own
    neighbours), or ``query_split`` rows search the ``reference_split`` rows (nothing excluded;
    e.g. In-Shop's ``query`` vs ``gallery``). Values: R@k for every k of ``ks`` (one k or several,
    listed in ascending k, each once, whatever order ``ks`` gives;
    default 1, 2, 4, 8 within the references available; a larger k is an error), P@1,
    R-Precision, MAP@R, mAP@C, mAP@1000, NMI, F1, and mAP@lim when named in ``include`` (which restricts
    them). Higher is better for every one.

    ``lone_queries``: ``"exclude"`` (queries without any relevant reference are left out, as
    pytorch-metric-learning) or ``"zero"`` (Roth's code: averaged over all queries, a lone query
    scoring 0). ``per_class``: ``result.table`` holds R@1, R-Precision and MAP@R per class.

    >>> from embedscope.store import EmbeddingSet
    >>> es = EmbeddingSet.from_arrays([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], [0, 0, 1, 1])
    >>> evaluate(es, ks=(1,), include=["R@1", "MAP@R"])["R@1"]
    1.0
    """
    from embedscope.metrics import retrieval_metrics

    check_choice(metric, "metric", RETRIEVAL_METRICS)
    check_choice(lone_queries, "lone_queries", LONE_QUERIES)
    per_class = check_bool(per_class, "per_class")
    progress = check_bool(progress, "progress")  # ("no" is truthy: it drew a bar)
    check_choice(split, "split", SPLIT_CHOICES)  # (None took every row, where the other analyses refuse it)
    for nm, s in (("query_split", query_split), ("reference_split", reference_split)):
        if s is not None:
            check_choice(s, nm, SPLIT_CHOICES)
    es = as_set(source)
    q_split = query_split or split
    r_split = reference_split or q_split
    separate = r_split != q_split
    if separate and "all" in (q_split, r_split):
        raise UsageError("'all' overlaps the other split: give two different splits as query and reference sets")
    q = es.subset(q_split)
    if metric == "cosine":
        check_no_zero_rows(q, q_split)
    kw: dict[str, Any] = {}
    if separate:
        r = es.subset(r_split)
        if metric == "cosine":
            check_no_zero_rows(r, r_split)
        check_disjoint(q, r, q_split, r_split)
        kw = {"X_ref": r.embeddings, "y_ref": r.labels}
    # one class: every reference relevant (the metrics' own line, "the query labels must hold at least 2
    # classes", named no file: which of several was it?)
    one_class = r if separate else q
    if len(np.unique(one_class.labels)) < 2:
        src = one_class.attrs.get("source_file")
        role = r_split if separate else q_split
        where = "the file holds" if role == "all" else f"its {role} split holds"
        raise EmbedscopeError(f"{src + ': ' if src else ''}{where} one class only: every "
                              f"{'reference' if separate else 'other row'} is relevant to every query, so each "
                              "retrieval measure would read 1.0; evaluate needs at least 2 classes")
    if lone_queries != "exclude":
        kw["lone_queries"] = lone_queries
    t0 = time.perf_counter()
    res = retrieval_metrics(q.embeddings, q.labels, ks=ks, metric=metric,
                            include=include, device=device,
                            seed=seed, niter=niter, progress=progress, per_query=per_class, **kw)
    seconds = time.perf_counter() - t0
    per_query = res.pop("per_query", None)
    counts = {k: int(res.pop(k)) for k in COUNT_KEYS if k in res}
    extra_info = {k: res.pop(k) for k in list(res) if not isinstance(res[k], (int, float, np.number))}
    values = {k: float(v) for k, v in res.items()}
    n_cls = int(len(np.unique(q.labels)))
    prov = provenance_of(es, extra={
        "query_split": q_split,
        "reference_split": r_split,
        "protocol": "separate query and reference sets" if separate else "same set, query excluded",
        "metric": metric,
        "lone_queries": lone_queries,
        "N_queries": int(q.n),
        "N_references": int(kw["X_ref"].shape[0]) if separate else int(q.n),
        "D": int(q.dim),
        "classes": n_cls,
        **counts,
        "kmeans": {"seed": seed, "niter": niter} if ("NMI" in values or "F1" in values) else None,
        "seconds": round(seconds, 3),
        **extra_info,
    })
    rows = np.concatenate([q.embeddings, kw["X_ref"]]) if separate else q.embeddings  # (a copy only when two sets)
    if one_point(rows, metric):  # the numbers are real, but they measure row order
        prov["notes"] = [f"every {'query and reference' if separate else 'row'} is the same point"
                         f"{' (direction)' if metric == 'cosine' else ''}, a collapsed model: every similarity "
                         "ties, so the ranks follow row order (ties to the lower reference index) and these "
                         "values say only that the model is collapsed"]
    elif metric == "cosine" and one_direction_within_rounding(rows):
        prov["notes"] = [f"every {'query and reference' if separate else 'row'} has the same direction within the "
                         "rounding of its values (positive multiples of one vector: a model collapsed to one ray): "
                         "the cosine ranks follow rounding noise and these values say only that the model is "
                         "collapsed"]
    trained_note = trained_distance_note(es.attrs.get("checkpoint_config"), rows, metric=metric)
    if trained_note:  # an unnormalised model ranked by another distance than its own
        prov.setdefault("notes", []).append(trained_note)
    if q_split == "query" and not separate and "gallery" in set(es.split):  # (neighbours searches the gallery)
        prov.setdefault("notes", []).append(
            "the query rows are searched among themselves, not in the file's gallery rows (the In-Shop "
            "protocol: --query-split query --reference-split gallery; reference_split='gallery' in Python)")
    model = model_name(es, name)
    n_lone = int(counts.get("n_lone", 0))
    lone_txt = (f"lone {'query' if n_lone == 1 else 'queries'} "
                + ("left out" if lone_queries == "exclude" else ("counts" if n_lone == 1 else "count") + " as 0"))
    prov["title"] = (f"{model}: {q_split} queries ({q.n}, {n_cls} {'class' if n_cls == 1 else 'classes'}) vs "
                     f"{r_split + ' references' if separate else 'themselves'}, {metric}; "
                     f"{n_lone} {lone_txt}")
    table = None
    if per_class and per_query is not None:
        table = _per_class_rows(q, per_query, lone_score=0.0 if lone_queries == "zero" else None)
    return Result("evaluate", values, prov, table=table, model=model)


def trained_distance_note(config: Any, X: np.ndarray, *, metric: str,
                          choices: Sequence[str] = RETRIEVAL_METRICS) -> str | None:
    """The note of a file whose model was trained with another distance than ``metric`` ranks by
    (its checkpoint's config, :func:`embedscope.models.distances.distance_for_config`;
    docs/methods.md §1), or None.

    Only rows of different norms are ranked differently: on rows of one norm (every model embedscope
    trains but N-pair and generalised lifted L2-normalises) cosine, Euclidean, squared Euclidean and
    dot product give one order, and no note is made; the SNR distance (var(b − a) / var(a) over the
    dimensions: it also weighs the rows' means) ranks unit rows otherwise too, so an SNR model is
    noted whatever its norms. An unnormalised model (N-pair: raw dot
    products; generalised lifted: raw Euclidean) ranked by cosine, the trainer's log's protocol
    (Musgrave et al.), is not ranked as it was trained: said, with the ``--metric`` that ranks as
    trained (``euclidean`` for euclidean and sqeuclidean), or that none does (dot, snr, a distance
    or loss embedscope does not know: a note, not an error). ``choices``: the command's ``--metric``
    values (retrieval: cosine and euclidean; scatter's similarity adds dot).
    A file without a checkpoint config naming a loss or distance (imported, untrained) gets none.
    """
    if not isinstance(config, dict) or not (config.get("distance") or config.get("loss")) or len(X) == 0:
        return None
    norms = np.sqrt(np.einsum("ij,ij->i", X, X, dtype=np.float64))  # (float64 sums, no float64 copy of X)
    lo, hi = float(norms.min()), float(norms.max())
    one_norm = hi - lo <= 1e-3 * max(hi, 1e-12)
    named = "".join(ch for ch in str(config.get("distance") or config.get("loss")).lower() if ch.isalnum())
    if one_norm and named != "snr":  # rows of one norm (unit rows): every distance but SNR ranks as cosine
        return None
    # (only here: embedscope.models imports torch, which an evaluate of rows of one norm does without)
    from embedscope.models.distances import distance_for_config

    rows = (f"its rows (all of norm {hi:.3g})" if one_norm else f"its rows (norms {lo:.3g} to {hi:.3g})") + (
        f" are ranked here by {metric}" + (" (the protocol of the trainer's log)" if metric == "cosine" else ""))
    try:
        trained = distance_for_config(config)
    except EmbedscopeError:  # a name embedscope does not know (a foreign writer): said, not refused
        named = "distance" if config.get("distance") else "loss"
        return (f"the model's checkpoint config names the {named} '{config[named]}', which embedscope does "
                f"not know; {rows}, which may not be how the model was trained")  # (escaped where printed)
    as_trained = {"euclidean": "euclidean", "sqeuclidean": "euclidean", "cosine": "cosine", "dot": "dot"}.get(trained)
    if as_trained not in choices:
        as_trained = None
    if as_trained == metric:
        return None
    what = {"dot": "the dot product", "snr": "the SNR distance"}.get(trained, f"the {trained} distance")
    head = f"the model was trained with {what} (its checkpoint's config), but {rows}"
    if as_trained is None:
        listed = " and ".join([", ".join(choices[:-1]), choices[-1]] if len(choices) > 1 else list(choices))
        return (f"{head}: no --metric ranks by {what} (the choices are {listed}), "
                "so these values are not the model's own ranking")
    same = " (the order of the squared Euclidean distance)" if trained == "sqeuclidean" else ""
    return f"{head}: --metric {as_trained} ranks them as the model was trained{same}"


def _per_class_rows(q, per_query: dict, lone_score: float | None = None) -> list[dict[str, Any]]:
    """Per class the mean of its queries' scores. The per-query arrays hold NaN for lone queries:
    left out (``lone_score=None``, the ``exclude`` policy) or scored ``lone_score`` (0 under ``zero``,
    as the headline values count them), so the class means weighted by their queries give the headline."""
    rows = []
    for c in np.unique(q.labels):
        m = q.labels == c
        row: dict[str, Any] = {"class": str(q.class_names[c]), "label": int(c), "n": int(m.sum())}
        for key, vals in per_query.items():
            v = np.asarray(vals, dtype=np.float64)[m]
            if lone_score is not None:
                v = np.where(np.isnan(v), lone_score, v)
            v = v[np.isfinite(v)]
            row[key] = float(v.mean()) if v.size else float("nan")
        rows.append(row)
    return rows


def evaluate_many(sources: Sequence[Any], *, names: Sequence[str] | None = None, **kwargs) -> ResultSet:
    """:func:`evaluate` of several files with the same protocol: models side by side (docs/methods.md §1).

    A single path is taken as a list of one file.
    """
    import contextlib
    import os

    from embedscope.analyses.structure import check_not_repeated
    from embedscope.progress import labelled

    sources = as_sources(sources)
    labels = unique_names(sources, names)
    check_not_repeated(labels)  # the same file twice: refused before any work
    query = kwargs.get("query_split") or kwargs.get("split", "test")
    asked = [s for s in (query, kwargs.get("reference_split") or query) if isinstance(s, str) and s in SPLIT_CHOICES]
    check_splits_first(sources, asked)  # a file without the split: refused before the files before it are computed

    first: list = []  # the first file's query rows' paths (several files: the others' are compared with them)

    def one(source, name):
        # several files: each one's progress bars and phase lines name it ("retrieval runs/a.h5: ...")
        tag = (str(source) if isinstance(source, (str, os.PathLike)) else name) if len(sources) > 1 else None
        if len(sources) < 2:
            with labelled(tag) if tag else contextlib.nullcontext():
                return evaluate(source, name=name, **kwargs)
        es = as_set(source)  # (read once: its paths, then its measures)
        with labelled(tag) if tag else contextlib.nullcontext():
            r = evaluate(es, name=name, **kwargs)
        paths = split_paths(es, query)
        if not first:
            first.append(paths)
        else:  # models side by side on different images (other --train-classes, data): said, as properties says it
            other = other_images_note(paths, first[0], query, labels[0])
            if other:
                r.provenance.setdefault("notes", []).append(other)
        return r

    return combine(one(s, n) for s, n in zip(sources, labels))


def worst_classes(result: Result, key: str = "MAP@R", n: int = 10) -> list[dict[str, Any]]:
    """The ``n`` classes with the lowest ``key`` in a per-class result of :func:`evaluate`
    (``per_class=True``; each class's mean over its queries, docs/methods.md §1)."""
    if not isinstance(result, Result):
        raise EmbedscopeError(f"worst_classes needs a Result of evaluate(..., per_class=True), got "
                              f"{type(result).__name__}")
    if not result.table or not all(isinstance(r, dict) and "class" in r for r in result.table):
        raise EmbedscopeError("the result has no per-class table (evaluate with per_class=True)")
    n = check_int(n, "n", min=1)
    columns = [c for c in dict.fromkeys(k for r in result.table for k in r)
               if all(isinstance(r.get(c, np.nan), (int, float, np.number)) for r in result.table)]
    if not isinstance(key, str) or key not in columns:
        raise EmbedscopeError(f"key must be one of the per-class table's columns ({', '.join(columns)}), "
                              f"got {quoted(key)}")
    rows = [r for r in result.table if np.isfinite(r.get(key, np.nan))]
    return sorted(rows, key=lambda r: (r[key], r["class"]))[:n]
