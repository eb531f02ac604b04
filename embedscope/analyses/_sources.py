"""Reading the inputs of an analysis: an :class:`EmbeddingSet`, a path, or arrays."""

from __future__ import annotations

import os
from typing import Any

from embedscope.errors import EmbedscopeError, UsageError


def as_set(source: Any):
    """An :class:`~embedscope.store.EmbeddingSet` from a set, a path to an embedding file, or ``(X, y)``."""
    from embedscope.store import EmbeddingSet, load

    if isinstance(source, EmbeddingSet):
        return source
    if isinstance(source, (str, os.PathLike)):
        es = load(source)
        from embedscope.fileio import sha256_file

        es.attrs["_sha256"] = sha256_file(source)
        return es
    if isinstance(source, tuple) and len(source) == 2:
        return EmbeddingSet.from_arrays(*source)
    if isinstance(source, list) and _arrays_pair(tuple(source)):  # (a list is several sources elsewhere)
        raise EmbedscopeError("give the embeddings and their labels as a tuple (X, y), got a list [X, y]")
    raise EmbedscopeError(f"expected an EmbeddingSet, a path to an embedding file or (X, y), got "
                          f"{type(source).__name__}{source_hint(source)}")


def source_hint(source: Any) -> str:
    """What to give instead of ``source``, for the one-line error of an analysis that cannot read it:
    a result (an analysis's answer, where its input is wanted) names the file it was computed from;
    an array alone (no labels) asks for ``(X, y)``; anything else, nothing."""
    from embedscope.analyses.result import Result, ResultSet

    if isinstance(source, (Result, ResultSet)):
        results = source.results if isinstance(source, ResultSet) else [source]
        files = [str(r.provenance["file"]) for r in results if r.provenance.get("file")]
        what = f"the result of {source.analysis}" if source.analysis else "a result"
        where = (f": give the file it was computed from, '{files[0]}' (its provenance['file'])" if len(files) == 1
                 else f": give the files it was computed from ({', '.join(repr(f) for f in files)})" if files
                 else ": give the embeddings it was computed from")
        return f" ({what}, not embeddings{where})"
    if hasattr(source, "shape") and hasattr(source, "ndim") and getattr(source, "ndim", 0) == 2:
        return " (embeddings without labels: give the tuple (X, y), or EmbeddingSet.from_arrays(X, y, split=...))"
    return ""


def check_disjoint(q, r, q_split: str, r_split: str) -> None:
    """Separate query and reference sets hold different images: an image (path) in both would find
    itself among its references (distance 0, its own class) and raise every retrieval score, where
    the same-split protocol leaves a query out of its own references. One line, naming one."""
    import numpy as np

    both = np.intersect1d(q.paths, r.paths)
    if both.size:
        raise EmbedscopeError(f"{both.size} image(s) are both {q_split} and {r_split} rows (the same path, e.g. "
                              f"'{both[0]}'): each would retrieve itself; give every image one split")


def as_sources(sources: Any, what: str = "embedding file") -> list:
    """The sources of a many-file analysis as a list: a single path (or set) is a list of one.

    A string is one path, never a sequence of one-character paths, and a tuple ``(X, y)`` of an
    N × D array and N labels (what :func:`as_set` takes) is one source, never the two sources X and
    y (it failed with "expected an EmbeddingSet ..., got ndarray"). No source at all, or something
    that is not a collection of sources, is a one-line error.
    """
    from embedscope.store import EmbeddingSet

    if isinstance(sources, (str, bytes, os.PathLike, EmbeddingSet)) or _arrays_pair(sources):
        return [sources]
    if sources is None:
        raise UsageError(f"give at least one {what}")
    from embedscope.analyses.result import ResultSet

    if isinstance(sources, (dict, ResultSet)) or not hasattr(sources, "__iter__"):  # (a ResultSet iterates
        # its Results: refused as one, naming its files, not as its first Result)
        raise EmbedscopeError(f"expected a list of {what}s, got {type(sources).__name__}{source_hint(sources)}")
    out = list(sources)
    if not out:
        raise UsageError(f"give at least one {what}")
    return out


def _arrays_pair(source: Any) -> bool:
    """Whether ``source`` is a tuple ``(X, y)``: a 2-D array and a 1-D one of as many rows (numpy,
    torch or nested lists), not two sources."""
    import numpy as np

    if not isinstance(source, tuple) or len(source) != 2:
        return False
    if not all(hasattr(s, "shape") or isinstance(s, (list, tuple)) for s in source):
        return False  # (paths, sets and other sources: never converted to see their shape)
    try:
        shapes = [tuple(s.shape) if hasattr(s, "shape") else np.shape(s) for s in source]
    except Exception:  # noqa: BLE001 - ragged or foreign objects: not an array pair
        return False
    return len(shapes[0]) == 2 and len(shapes[1]) == 1 and shapes[0][0] == shapes[1][0]


def check_no_zero_rows(part, split: str, *, what: str = "cosine similarity", hint: str | None = "use --metric euclidean"
                       ) -> None:
    """A row of all zeros has no direction: its ``what`` is undefined. One line naming the file, the
    split, how many rows, the first by row and path, and ``hint`` (what to do instead), where the
    metrics alone can only say "row k of X"."""
    from embedscope.validation import zero_rows

    zero = zero_rows(part.embeddings)
    if zero.size:
        src = part.attrs.get("source_file")
        i = int(zero[0])
        which, where = ("", "row") if split == "all" else (f"{split} ", f"{split} split's row")
        raise EmbedscopeError(f"{src + ': ' if src else ''}{zero.size} {which}embedding(s) are all zeros (the "
                              f"{where} {i} first, path '{part.paths[i]}'): their {what} is undefined"
                              + (f" ({hint})" if hint else ""))


def split_values(h5file) -> set[str]:
    """The split values present in an open embedding file (its ``split`` column alone, as text)."""
    import numpy as np

    return {v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in np.unique(h5file["split"][()])}


def check_splits_first(sources, splits) -> None:
    """Several files: refuse, before any of them is analysed, a file that lacks one of ``splits``
    (each file's split column is read alone; the error is the one the analysis of that file would
    raise, after minutes spent on the files before it). ``None`` and ``"all"`` need no split;
    sources that are not paths, and files the light read cannot take, are left to the analysis, but for a
    file HDF5 would not lock (another process writing it): its one line now, not after the files before it."""
    import h5py

    from embedscope.fileio import hdf5_lock_failure

    wanted = {s for s in splits if s not in (None, "all")}
    if len(sources) < 2 or not wanted:
        return
    for src in sources:
        if not isinstance(src, (str, os.PathLike)):
            continue
        try:
            with h5py.File(src, "r") as f:
                present = split_values(f)
        except OSError as e:  # (the lock failure was skipped, and said when the analysis reached the file)
            locked = hdf5_lock_failure(src, str(e).splitlines()[0] if str(e) else "")
            if locked is not None:
                raise EmbedscopeError(locked) from None
            continue  # (whatever else the light read cannot take, the full load reports)
        except Exception:  # noqa: BLE001 - whatever the light read cannot take, the full load reports
            continue
        missing = sorted(wanted - present)
        if missing:
            as_set(src).subset(missing[0])  # the analysis's own one-line error


def split_paths(es, split: str | None):
    """The paths of ``es``'s rows of ``split`` (None or "all": every row), without copying its embeddings
    as ``es.subset(split).paths`` does (the split was checked by the analysis already)."""
    return es.paths if split in (None, "all") else es.paths[es.split == split]


def other_images_note(paths, first_paths, split: str, first: str) -> str | None:
    """The note of a file whose ``split`` holds other images than the first file's (matched by path):
    models side by side are then measured on different images (e.g. embedded with different
    ``--train-classes``, which moves classes between train and test), or None when they are the same."""
    import numpy as np

    mine, theirs = np.unique(np.asarray(paths).astype(str)), np.unique(np.asarray(first_paths).astype(str))
    if len(mine) == len(theirs) and np.array_equal(mine, theirs):
        return None
    only_mine = np.setdiff1d(mine, theirs, assume_unique=True)
    only_theirs = np.setdiff1d(theirs, mine, assume_unique=True)
    from embedscope.analyses.result import _short

    # (a path another tool wrote can be 70,000 characters: shortened in the middle, its file name kept)
    eg = _short(str((only_mine if len(only_mine) else only_theirs)[0]), 200)
    return (f"its {split} split holds other images than {first}'s ({len(only_mine)} of its {len(mine)} not in "
            f"{first}, {len(only_theirs)} of {first}'s {len(theirs)} not in it; e.g. {eg}): their numbers are "
            "measured on different images (files embedded with different --train-classes or data?)")
