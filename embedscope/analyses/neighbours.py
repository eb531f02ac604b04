"""Questions about each point's neighbours: ``scatter`` (similarity to the nearest same-class vs
different-class point, Xuan §2.4; docs/methods.md §10) and ``neighbour_examples`` (queries with
their top-k retrievals, for ``embedscope neighbours``; docs/methods.md §1)."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from embedscope.analyses._sources import as_set, check_disjoint, check_no_zero_rows
from embedscope.analyses.result import Result, model_name, provenance_of
from embedscope.errors import EmbedscopeError, UsageError
from embedscope.names import SIMILARITY_METRICS, SPLIT_CHOICES
from embedscope.text import quoted
from embedscope.validation import check_bool, check_choice, check_int

#: the columns of scatter's per-split summary (``provenance["splits"]``), in the one order of the
#: terminal table, OUT_summary.csv, the Parquet and the JSON
SCATTER_SUMMARY_COLUMNS = ("split", "N", "classes", "left_out", "tied", "below_diagonal_R@1", "below_or_tied")


def scatter(source: Any, *, split: str = "all", metric: str = "cosine", progress: bool = False,
            name: str | None = None) -> Result:
    """For every point of each split: x = similarity to its most similar same-class point, y = to its
    most similar different-class point (itself excluded, within the split; Xuan §2.4,
    docs/methods.md §10). Bounded memory.

    ``result.values``: per split the share of points strictly below the diagonal
    (``below_diagonal_<split>``, s_diff < s_same), the number of tied points
    (``tied_<split>``: s_same = s_diff exactly, on the diagonal), the share below or on it
    (``below_or_tied_<split>``) and the points left out (``left_out_<split>``: no same-class partner).
    The share below equals that split's R@1 when no point is tied. A tied point is counted as not
    below the diagonal, while R@1 (docs/methods.md §1: ties to the lower reference index) counts it
    a hit when its lowest-index nearest point is of its class, so with ties the split's R@1 lies
    between ``below_diagonal`` and ``below_or_tied`` (the note in ``provenance["notes"]`` says so).
    ``result.provenance["splits"]``: the same per split as one row each (the columns of
    :data:`SCATTER_SUMMARY_COLUMNS`; ``embedscope scatter`` prints it and writes it as OUT_summary.csv);
    ``result.table``: one row per point (``below_diagonal`` and ``tied`` 1/0, NaN when left out);
    ``result.arrays["panels"]``: ``{split: (s_same, s_diff)}``.
    """
    from embedscope.metrics import nearest_same_different, share_below_diagonal

    check_choice(metric, "metric", SIMILARITY_METRICS)
    check_choice(split, "split", SPLIT_CHOICES)
    progress = check_bool(progress, "progress")  # ("no" is truthy: it drew a bar)
    es = as_set(source)
    splits = [split] if split != "all" else es.splits
    panels, rows, summary, values, notes = {}, [], [], {}, []
    # every split checked before any is searched (a bad second split: no work done first); the labels
    # alone (a subset copies its split's embeddings)
    split_labels = {s: es.labels[es.split == s] if s != "all" else es.labels for s in splits}

    def drawable(labels) -> bool:
        return len(np.unique(labels)) >= 2 and np.bincount(labels).max() >= 2

    for s in splits:
        labels = split_labels[s]
        if drawable(labels):
            continue
        if labels.size == 0:  # the file's own error ("has no 'val' rows"), as every other command's
            es.subset(s)
        n_cls = int(len(np.unique(labels)))
        others = [o for o in splits if o != s and drawable(split_labels[o])]
        # (all splits asked for: the error names one that can be drawn alone)
        hint = f" (draw the {others[0]} split alone: --split {others[0]}, split='{others[0]}')" if others else ""
        if n_cls < 2:  # no different-class partner anywhere: every point would be left out
            raise EmbedscopeError(f"scatter needs at least two classes in each split, the {s} split has {n_cls}{hint}")
        # no same-class partner anywhere: every point would be left out
        raise EmbedscopeError(f"scatter needs a class with two or more images in each split; each of the "
                              f"{n_cls} classes of the {s} split has one image{hint}")
    for s in splits:
        part = es.subset(s)
        n_cls = int(len(np.unique(part.labels)))
        if metric == "cosine":  # as every other cosine analysis (the metric's 0 would hide a broken model)
            check_no_zero_rows(part, s, hint="use --metric euclidean or dot")
        s_same, s_diff = nearest_same_different(part.embeddings, part.labels, metric=metric, progress=progress)
        panels[s] = (s_same, s_diff)
        share, lone = share_below_diagonal(s_same, s_diff)
        ok = np.isfinite(s_same) & np.isfinite(s_diff)
        tie = ok & (s_same == s_diff)  # exactly equal: on the diagonal, neither below nor above
        n_ok, n_tied = int(ok.sum()), int(tie.sum())
        upper = float(share + n_tied / n_ok) if n_ok else float("nan")
        summary.append({"split": s, "N": int(part.n), "classes": n_cls, "left_out": int(lone), "tied": n_tied,
                        "below_diagonal_R@1": float(share), "below_or_tied": upper})
        values[f"below_diagonal_{s}"] = float(share)
        values[f"left_out_{s}"] = int(lone)
        values[f"tied_{s}"] = n_tied
        values[f"below_or_tied_{s}"] = upper
        if n_tied:
            notes.append(f"{n_tied} of the {n_ok} {s} points are tied (nearest same-class and nearest other-class "
                         f"similarity equal): they lie on the diagonal and are not counted below it, while R@1 "
                         f"(ties to the lower reference index, docs/methods.md §1) may count them hits, so the {s} "
                         f"R@1 lies between {share:.4f} and {upper:.4f}")
        for i in range(part.n):
            rows.append({"path": part.paths[i], "split": s, "label": int(part.labels[i]),
                         "class": es.class_names[part.labels[i]], "s_same": float(s_same[i]),
                         "s_diff": float(s_diff[i]),
                         "below_diagonal": float(s_diff[i] < s_same[i]) if ok[i] else float("nan"),
                         "tied": float(tie[i]) if ok[i] else float("nan")})
    from embedscope.analyses.retrieval import trained_distance_note

    drawn = es if split == "all" else es.subset(split)
    distance_note = trained_distance_note(es.attrs.get("checkpoint_config"), drawn.embeddings, metric=metric,
                                          choices=SIMILARITY_METRICS)
    if distance_note:  # an unnormalised model compared by another similarity than its own distance
        notes.append(distance_note)
    model = model_name(es, name)
    extra = {"metric": metric, "splits": summary, "title": f"{model}: {metric} similarity",
             "ties": "a point with s_same = s_diff exactly is tied: on the diagonal, not counted below it"}
    if notes:
        extra["notes"] = notes
    prov = provenance_of(es, extra=extra)
    return Result("scatter", values, prov, table=rows, arrays={"panels": panels}, model=model)


#: the columns of :meth:`NeighbourExamples.to_frame` / :meth:`NeighbourExamples.rows`, one row per query and rank
NEIGHBOUR_COLUMNS = ("query", "query_class", "rank", "path", "class", "similarity", "correct")


@dataclass(eq=False, repr=False)
class NeighbourExamples:
    """Queries (rows of the query set) and their k retrievals (rows of the reference set).

    ``repr`` is one line; ``print`` and IPython / Jupyter show :meth:`format` (one row per query and
    rank) bounded as every result (at most 40 rows, long paths shortened in the middle) and the
    notes; :meth:`to_frame` gives those rows as a pandas frame (columns :data:`NEIGHBOUR_COLUMNS`),
    :meth:`to_csv`, :meth:`to_parquet` and :meth:`to_json` write them as a result's methods do.
    ``a == b`` compares every field (arrays by value). Retrievals: docs/methods.md §1.
    """

    query_paths: np.ndarray      # [n]
    query_labels: np.ndarray     # [n] class names
    ref_paths: np.ndarray        # [n, k]
    ref_labels: np.ndarray       # [n, k] class names
    similarity: np.ndarray       # [n, k] cosine similarity (or minus the Euclidean distance)
    correct: np.ndarray          # [n, k] bool
    query_split: str
    reference_split: str
    metric: str
    #: the seed that drew the queries (None: the queries were given by path); with the file, the
    #: split and the number of queries it reproduces the selection
    seed: int | None = None
    #: how the queries were chosen, in words (e.g. "8 random queries, seed 0")
    selection: str = ""
    #: what the caller should know about the ranking (an unnormalised model ranked by another
    #: distance than it was trained with: :func:`embedscope.analyses.retrieval.trained_distance_note`)
    notes: list[str] = field(default_factory=list)
    #: [n] bool: the query's class has no other row among the references (a lone query, docs/methods.md
    #: §1): no retrieval can be right; the figure's R@1 leaves them out, as ``evaluate`` does by default
    lone: np.ndarray | None = None

    def hit_rate(self) -> tuple[float | None, int]:
        """``(R@1 of the queries that are not lone, number of lone queries)``: the share whose first
        retrieval is of their class, over the queries with a same-class reference (``evaluate``'s
        default ``--lone-queries exclude``); None when every query is lone."""
        correct = np.asarray(self.correct, dtype=bool)
        lone = np.zeros(len(correct), dtype=bool) if self.lone is None else np.asarray(self.lone, dtype=bool)
        kept = correct[~lone, 0] if correct.ndim == 2 and correct.shape[1] else np.zeros(0, dtype=bool)
        return (float(kept.mean()) if kept.size else None), int(lone.sum())

    def __eq__(self, other: object) -> bool:  # (the dataclass's == raised numpy's "truth value ... ambiguous")
        if not isinstance(other, NeighbourExamples):
            return NotImplemented
        from dataclasses import fields

        from embedscope.store.embeddings import same_values

        return all(same_values(getattr(self, f.name), getattr(other, f.name)) for f in fields(self))

    __hash__ = None  # mutable, compared by value

    def __repr__(self) -> str:  # one line (the dataclass's printed every array)
        n, k = np.shape(self.ref_paths) if np.ndim(self.ref_paths) == 2 else (len(self.query_paths), 0)
        hits = int(np.asarray(self.correct).sum())
        ret = "retrieval" if n * k == 1 else "retrievals"  # (was "1 of 1 retrievals")
        return (f"NeighbourExamples({n} quer{'y' if n == 1 else 'ies'} of {self.query_split!r}, top-{k} in "
                f"{self.reference_split!r}, {self.metric}: {hits} of {n * k} {ret} of the query's class; "
                f"{self.selection!r})")

    def rows(self) -> list[dict[str, Any]]:
        """One row per query and rank (1 = nearest): the query's path and class, the retrieval's path,
        class, similarity (cosine, or minus the Euclidean distance) and whether its class is the query's."""
        return [{"query": str(q), "query_class": str(qc), "rank": j + 1, "path": str(self.ref_paths[i, j]),
                 "class": str(self.ref_labels[i, j]), "similarity": float(self.similarity[i, j]),
                 "correct": bool(self.correct[i, j])}
                for i, (q, qc) in enumerate(zip(self.query_paths, self.query_labels))
                for j in range(np.shape(self.ref_paths)[1])]

    def to_frame(self, *, table: bool = False):
        """:meth:`rows` as a pandas DataFrame (columns :data:`NEIGHBOUR_COLUMNS`).

        ``table`` is accepted as by every :class:`~embedscope.analyses.Result` (``to_frame(table=True)``:
        the per-row table): these rows (one per query and rank) are the result's only table, so
        ``table=True`` and ``table=False`` give the same frame."""
        import pandas as pd

        check_bool(table, "table")
        return pd.DataFrame(self.rows(), columns=list(NEIGHBOUR_COLUMNS))

    def to_csv(self, path: str | os.PathLike, *, table: bool = False, force: bool = False):
        """Write :meth:`to_frame` as CSV, atomically (an existing file only with ``force``), as
        :meth:`embedscope.analyses.Result.to_csv`; returns the path. ``table``: as :meth:`to_frame`'s."""
        from embedscope.analyses.result import _write_frame

        return _write_frame(self.to_frame(table=table), path, "csv", force)

    def to_parquet(self, path: str | os.PathLike, *, table: bool = False, force: bool = False):
        """Write :meth:`to_frame` as Parquet, atomically, as :meth:`embedscope.analyses.Result.to_parquet`.
        ``table``: as :meth:`to_frame`'s."""
        from embedscope.analyses.result import _write_frame

        return _write_frame(self.to_frame(table=table), path, "parquet", force)

    def to_dict(self) -> dict[str, Any]:
        """``{"analysis": "neighbours", "query_split", "reference_split", "metric", "seed", "selection",
        "notes", "table"}`` (``table``: :meth:`rows`)."""
        return {"analysis": "neighbours", "query_split": self.query_split, "reference_split": self.reference_split,
                "metric": self.metric, "seed": self.seed, "selection": self.selection, "notes": list(self.notes),
                "table": self.rows()}

    def to_json(self, path: str | os.PathLike | None = None, *, force: bool = False) -> dict[str, Any]:
        """:meth:`to_dict` as the JSON file holds it (written atomically to ``path`` when given), as
        :meth:`embedscope.analyses.Result.to_json`."""
        from embedscope.analyses.result import _to_json

        return _to_json(self.to_dict(), path, force)

    def format(self, *, digits: int | None = None, max_rows: int | None = None, max_cell: int | None = None) -> str:
        """The rows as an aligned terminal table (:func:`embedscope.tables.format_table`; names escaped);
        ``max_rows`` and ``max_cell`` as :meth:`embedscope.analyses.Result.format`'s (default: every row,
        whole paths). ``digits``: the similarities' decimals (default: 4, or as many more as tell apart
        the different similarities of a query, as the figure's captions:
        :func:`embedscope.viz.neighbours.similarity_digits`)."""
        from embedscope.analyses.result import _cut
        from embedscope.tables import format_table
        from embedscope.viz.neighbours import similarity_digits

        if digits is None:  # (at 4 decimals, near-duplicates' 0.999521 and 0.999523 both read 0.9995)
            digits = similarity_digits(self.similarity, lo=4)

        title = (f"{self.selection}: top-{np.shape(self.ref_paths)[1]} of the '{self.query_split}' queries in "
                 f"'{self.reference_split}', {self.metric}")
        rows, more = _cut(self.rows(), max_rows, max_cell)
        text = format_table(rows, list(NEIGHBOUR_COLUMNS), digits=digits, title=title)
        return text + (f"\n… {more} more row{'' if more == 1 else 's'} (every one: to_frame())" if more else "")

    def note_lines(self) -> list[str]:
        """The notes (:attr:`notes`), one line each, as ``embedscope neighbours`` prints them (raw text)."""
        return [f"note: {n}" for n in self.notes]

    def __str__(self) -> str:
        """:meth:`format` bounded as ``print(result)`` of every analysis (at most
        :data:`~embedscope.analyses.result.DISPLAY_ROWS` rows, long paths shortened in the middle),
        then the notes, escaped."""
        from embedscope.analyses.result import DISPLAY_CELL, DISPLAY_ROWS, _with_notes

        return _with_notes(self.format(max_rows=DISPLAY_ROWS, max_cell=DISPLAY_CELL), self.note_lines())

    def _repr_pretty_(self, p, cycle: bool) -> None:  # IPython / Jupyter: what print shows
        p.text(repr(self) if cycle else str(self))


def neighbour_examples(source: Any, *, split: str = "test", reference_split: str | None = None, queries: int = 8,
                       paths: Sequence[str] | None = None, k: int = 5, metric: str = "cosine",
                       seed: int = 0, progress: bool = False) -> NeighbourExamples:
    """Pick queries (``paths``, each once, else ``queries`` rows drawn with ``seed``) and find their top-k
    (exact ranks, ties to the lower reference index, docs/methods.md §1). The result records the
    seed of drawn queries (``seed``, ``selection``) so that the picture can be made again.

    ``source``: an :class:`~embedscope.store.EmbeddingSet`, a path to an embedding file or
    ``(X, y)``. The references are the rows of ``reference_split`` (default: the same split, each
    query excluded from its own list; for ``split="query"`` the ``gallery`` rows when present).
    ``split="all"``: the queries are drawn from every row, and the references are every row (each
    query excluded from its own list); ``all`` overlaps every other split, so it is never paired
    with another. ``progress``: a progress bar over the search.
    """
    from embedscope.metrics import knn_search

    check_choice(metric, "metric", ("cosine", "euclidean"))
    k = check_int(k, "k")
    queries = check_int(queries, "queries")
    seed = check_int(seed, "seed", min=0)
    progress = check_bool(progress, "progress")
    check_choice(split, "split", SPLIT_CHOICES)
    if reference_split is not None:
        check_choice(reference_split, "reference_split", SPLIT_CHOICES)
    if isinstance(paths, (str, bytes, os.PathLike)):
        raise EmbedscopeError("paths must be a list of query paths, not one string")
    if paths is not None:  # a list, tuple, numpy array or generator of paths, read once (an array's truth
        # value raised numpy's ValueError; a generator was consumed by the first look at it)
        if isinstance(paths, dict) or not hasattr(paths, "__iter__"):
            raise EmbedscopeError(f"paths must be a list of query paths, got {type(paths).__name__}")
        paths = [os.fspath(p) if isinstance(p, os.PathLike) else p.item() if isinstance(p, np.generic) else p
                 for p in paths]
        bad = [p for p in paths if not isinstance(p, str)]  # (a list: None is a bad path too)
        if bad:
            raise EmbedscopeError(f"query paths must be strings (the file's paths), got {quoted(bad[0])}")
        if not paths:
            raise UsageError("give at least one query path (paths is empty)")
    es = as_set(source)
    if reference_split is None:
        reference_split = "gallery" if split == "query" and "gallery" in set(es.split) else split
    qset = es.subset(split)
    rset = qset if reference_split == split else es.subset(reference_split)
    same = reference_split == split
    if not same and "all" in (split, reference_split):  # as evaluate: every row is in 'all'
        raise UsageError("'all' overlaps the other split: give two different splits as query and reference sets")
    if not same:
        check_disjoint(qset, rset, split, reference_split)
    if metric == "cosine":  # named by file, split and path (the search says 'row 4 of Q')
        check_no_zero_rows(qset, split)
        if not same:
            check_no_zero_rows(rset, reference_split)
    n_ref = rset.n - (1 if same else 0)
    if n_ref < k:
        raise EmbedscopeError(f"the '{reference_split}' split has {n_ref} candidate retrievals per query, fewer than "
                              f"the {k} asked for (--n-retrievals; k in Python)")
    if paths is not None:
        pos = {p: i for i, p in enumerate(qset.paths)}
        missing = [p for p in paths if p not in pos]
        if missing:
            from embedscope.store.embeddings import spelling_hint

            # a row of another split: which one, and the option that draws it (it was 'not in the test split')
            other = dict(zip(es.paths.tolist(), es.split.tolist())) if split != "all" else {}
            where = next(((p, other[p]) for p in missing if p in other), None)
            which = "it" if where and where[0] == missing[0] else where and where[0]
            hint = (f"; {which} is a '{where[1]}' row: --split {where[1]}, split='{where[1]}'" if where
                    else spelling_hint(missing, qset.paths))
            raise EmbedscopeError(f"{len(missing)} of the {len(paths)} query paths are not in the '{split}' split "
                                  f"(e.g. {missing[0]}{hint})")
        listed = Counter(paths)  # (the row was drawn twice; saliency's paths file refuses it too)
        again = next((p for p in paths if listed[p] > 1), None)
        if again is not None:
            raise EmbedscopeError(f"the query path {again} is given {listed[again]} times (each query is one row "
                                  "of the figure): give it once")
        if len(pos) < qset.n:  # a path that names several rows (pos kept the last): refused, not guessed
            rows_of = Counter(qset.paths.tolist())
            twice = [p for p in dict.fromkeys(paths) if rows_of[p] > 1]
            if twice:
                raise EmbedscopeError(f"the query path {twice[0]} names {rows_of[twice[0]]} "
                                      f"rows of the '{split}' split (a path names one image)")
        qidx = np.array([pos[p] for p in paths], dtype=np.int64)
        selection, drawn_with = f"{len(qidx)} quer{'y' if len(qidx) == 1 else 'ies'} given by path", None
    else:
        rng = np.random.default_rng(seed)
        qidx = np.sort(rng.choice(qset.n, size=min(queries, qset.n), replace=False))
        selection, drawn_with = f"{len(qidx)} random quer{'y' if len(qidx) == 1 else 'ies'}, seed {seed}", seed
    Q = qset.embeddings[qidx]
    if same:
        # search the whole split and drop each query's own row (exact: k + 1 then remove self)
        vals, idx = knn_search(Q, rset.embeddings, k=min(k + 1, rset.n), metric=metric, device="cpu",
                               progress=progress)
        keep_v, keep_i = np.empty((len(qidx), k)), np.empty((len(qidx), k), dtype=np.int64)
        for r, q in enumerate(qidx):
            m = idx[r] != q
            keep_v[r], keep_i[r] = vals[r][m][:k], idx[r][m][:k]
        vals, idx = keep_v, keep_i
    else:
        vals, idx = knn_search(Q, rset.embeddings, k=k, metric=metric, device="cpu", progress=progress)
    from embedscope.analyses.retrieval import trained_distance_note

    note = trained_distance_note(es.attrs.get("checkpoint_config"),
                                 qset.embeddings if same else np.concatenate([qset.embeddings, rset.embeddings]),
                                 metric=metric)
    q_lab = qset.class_names[qset.labels[qidx]]
    r_lab = rset.class_names[rset.labels[idx]]
    sim = vals if metric == "cosine" else 0.0 - vals  # (minus a distance of 0: 0.0, not -0.0, in the table)
    members = Counter(rset.class_names[rset.labels].tolist())  # (by name: the two splits' own class lists)
    lone = np.array([members[c] - (1 if same else 0) < 1 for c in q_lab.tolist()], dtype=bool)
    notes = [note] if note else []
    if lone.any():
        notes.append(f"{int(lone.sum())} of the {len(lone)} queries have no other image of their class among the "
                     f"'{reference_split}' references (lone queries): no retrieval can be right, and the "
                     "figure's R@1 leaves them out, as evaluate does (--lone-queries exclude)")
    return NeighbourExamples(
        query_paths=qset.paths[qidx], query_labels=q_lab, ref_paths=rset.paths[idx], ref_labels=r_lab,
        similarity=np.asarray(sim, dtype=np.float64), correct=(r_lab == q_lab[:, None]), query_split=split,
        reference_split=reference_split, metric=metric, seed=drawn_with, selection=selection,
        notes=notes, lone=lone)


def neighbours_figure(source: Any, out, *, split: str = "test", reference_split: str | None = None,
                      queries: int = 8, paths: Sequence[str] | None = None, paths_file: str | None = None,
                      k: int = 5, root: str | None = None, metric: str = "cosine", seed: int = 0,
                      force: bool = False, progress: bool = False):
    """The ``embedscope neighbours`` figure as one call -> ``(png, pdf, NeighbourExamples)``.

    :func:`neighbour_examples` picks the queries (``queries`` drawn with ``seed``, or the rows of
    ``paths`` / the lines of ``paths_file``) and finds their ``k`` retrievals;
    :func:`embedscope.data.thumbnails.neighbour_pictures` reads their pictures (from ``root``, else the
    file's recorded ``root``; the digits from memory); :func:`embedscope.viz.neighbours.draw_neighbours`
    draws them. Both outputs are checked before any work (``force`` replaces them).
    """
    from embedscope.data.thumbnails import neighbour_pictures
    from embedscope.fileio import check_writable
    from embedscope.viz.figures import figure_paths, save_figure, use_agg
    from embedscope.viz.neighbours import draw_neighbours

    if paths is not None and paths_file is not None:
        raise UsageError("give the queries' paths or a paths file, not both")
    png, pdf = figure_paths(out)
    for p in (png, pdf):
        check_writable(p, force=force)
    if paths_file is not None:  # read as saliency's: blank lines skipped, a line starting with # a comment
        from embedscope.fileio import read_paths_file

        paths = read_paths_file(paths_file)
    es = as_set(source)
    # an imported file's dataset is its source file's name (a 'digits.npz' of photos is not the built-in
    # digits): its pictures are told by their paths only
    dataset = None if es.attrs.get("imported") else es.attrs.get("dataset")
    given, root = root, root or es.attrs.get("root") or None
    if not given and root and not os.path.isdir(str(root)):  # the recorded folder has moved: said before
        # the search (the error came after it, and named a "--root" the caller never gave)
        from embedscope.data.thumbnails import read_from_folder

        if read_from_folder(es.paths.tolist(), dataset=dataset if isinstance(dataset, str) else None):
            raise EmbedscopeError(f"the file's image root {root} (recorded at embed time) is not a folder: "
                                  "give root=DIR (--root DIR)")
        root = None  # (the digits, the shapes set: read from elsewhere)
    ex = neighbour_examples(es, split=split, reference_split=reference_split, queries=queries, paths=paths,
                            k=k, metric=metric, seed=seed, progress=progress)
    qimgs, rimgs = neighbour_pictures(ex, dataset=dataset if isinstance(dataset, str) else None, root=root,
                                      progress=progress)
    import matplotlib.pyplot as plt

    use_agg()
    fig = draw_neighbours(ex, qimgs, rimgs)
    try:
        save_figure(fig, png, force=force)
    finally:
        plt.close(fig)
    return png, pdf, ex
