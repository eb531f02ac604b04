"""``geometry`` and ``spectrum``: the shape of the embedding space (docs/methods.md §2, §3, §4)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from embedscope.analyses._sources import as_set, as_sources, check_no_zero_rows, check_splits_first
from embedscope.analyses.result import Result, ResultSet, combine, model_name, provenance_of, unique_names
from embedscope.names import SPLIT_CHOICES
from embedscope.validation import check_bool, check_choice, check_int, zero_rows

#: measure -> one-line meaning (definitions: docs/methods.md; docs/methods.md §2-§4)
MEANINGS = {
    "n": "rows",
    "dim": "embedding dimension D",
    "n_classes": "classes",
    "n_singleton": "classes with one row (left out of pi_intra)",
    "rho": "spectral decay KL(U||s), top values left out (Roth §5); lower = more directions",
    "rho_all": "spectral decay with nothing left out (rho_spectrum@1)",
    "pi_intra": "mean cosine distance within classes (Roth §5)",
    "pi_inter": "mean cosine distance between class means",
    "pi_ratio": "pi_intra / pi_inter, embedding density (Roth: higher ~ better R@1)",
    "effective_rank": "RankMe, exp(entropy of s/sum s) (Garrido et al. 2023)",
    "alpha": "alpha-ReQ, power-law decay of covariance eigenvalues (Agrawal et al. 2022)",
    "alignment": "E ||u - u'||^2 over same-class pairs (Wang & Isola 2020)",
    "uniformity": "log E exp(-t ||u - u'||^2) over all pairs (Wang & Isola 2020)",
}
VALUE_KEYS = tuple(MEANINGS)


def undefined_note(undefined: Mapping[str, str]) -> str:
    """One line naming the undefined measures (NaN in files, – in terminal tables) and why, measures
    with the same reason together: ``"undefined (–): pi_intra, pi_ratio, alignment (every class has a
    single sample: ...)"``; empty when every measure is defined."""
    groups: dict[str, list[str]] = {}
    for key, why in undefined.items():
        groups.setdefault(str(why), []).append(str(key))
    if not groups:
        return ""
    return "undefined (–): " + "; ".join(f"{', '.join(keys)} ({why})" for why, keys in groups.items())


def infinite_note(infinite: Mapping[str, str]) -> str:
    """One line naming the measures that are inf and why (``pi_ratio`` when π_inter = 0 < π_intra:
    π_intra / 0; ``rho`` / ``rho_all`` when a singular value considered is 0). inf shows as ``inf``
    in the terminal table, the CSV and the Parquet, and as ``null`` in the JSON (which has no inf;
    ``provenance["infinite"]`` names it there); empty when no measure is inf (docs/geometry.md)."""
    if not infinite:
        return ""
    return "infinite (inf; null in JSON): " + "; ".join(f"{k} ({why})" for k, why in infinite.items())


def geometry(source: Any, *, split: str = "train", exclude_top: int = 1, n_components: int | None = None,
             max_pairs: int = 200_000, seed: int = 0, keep_spectrum: bool = False,
             name: str | None = None) -> Result:
    """Every geometry measure of one split: ρ, π_intra / π_inter / π_ratio, RankMe, α-ReQ, alignment,
    uniformity (docs/methods.md §2–§4; :func:`embedscope.metrics.geometry_report`).

    Roth et al. take these on the *training* split (the default). ``keep_spectrum``: the singular
    values land in ``result.arrays["singular_values"]``.

    A measure the split leaves undefined (every class a single sample: ``pi_intra``, ``pi_ratio``,
    ``alignment``; one class: ``pi_inter``, ``pi_ratio``; a collapsed model: ``rho``, ``alpha``;
    rows of all zeros among others: the cosine measures π, ``alignment``, ``uniformity``) is NaN,
    and ``result.provenance["undefined"]`` maps it to the reason (:func:`undefined_note` makes the
    line ``embedscope geometry`` prints); the other measures are reported as usual. ``pi_ratio``
    is inf when π_inter = 0 < π_intra (every class mean in one direction), and
    ``result.provenance["infinite"]`` says so (:func:`infinite_note`).

    >>> import numpy as np
    >>> from embedscope.store import EmbeddingSet
    >>> X = np.diag([10.0, 4, 3, 2, 1])
    >>> r = geometry(EmbeddingSet.from_arrays(X, [0, 0, 1, 1, 2], split="train"))
    >>> round(r["rho"], 6)
    0.121777
    """
    from embedscope.metrics import geometry_report

    check_choice(split, "split", SPLIT_CHOICES)
    check_int(exclude_top, "exclude_top", min=0)
    seed = check_int(seed, "seed", min=0)
    keep_spectrum = check_bool(keep_spectrum, "keep_spectrum")  # ("no" is truthy: it kept the spectrum)
    es = as_set(source)
    part = es.subset(split)
    if part.n < 2:  # no measure of one row (it said "X needs at least 2 row(s)", an array the user never sees)
        from embedscope.errors import EmbedscopeError

        src = es.attrs.get("source_file")
        where = "the file" if split == "all" else f"the {split} split"
        raise EmbedscopeError(f"{src + ': ' if src else ''}{where} has {part.n} row{'' if part.n == 1 else 's'}: "
                              "the geometry measures need at least two")
    if zero_rows(part.embeddings).size == part.n:  # no row with a direction: no measure to report (no spectrum)
        check_no_zero_rows(part, split, what="cosine distance (pi, alignment, uniformity)", hint=None)
    _check_spectrum_options(part, split, exclude_top, n_components, es.attrs.get("source_file"))
    # rows of all zeros among others: the cosine measures are NaN with the reason, which names the
    # split's rows and the first zero row's path (the spectral measures take every row)
    rep = geometry_report(part.embeddings, part.labels, exclude_top=exclude_top, n_components=n_components,
                          max_pairs=max_pairs, seed=seed, keep_spectrum=keep_spectrum,
                          rows="rows" if split == "all" else f"{split} rows", paths=part.paths)
    values = {k: rep[k] for k in VALUE_KEYS}
    model = model_name(es, name)
    pairs = int(rep["uniformity_pairs"])
    prov = provenance_of(es, extra={
        "split": split, "exclude_top": exclude_top, "n_components": n_components, "seed": seed,
        "max_pairs": max_pairs, "uniformity_pairs": int(rep["uniformity_pairs"]),
        "uniformity_exact": bool(rep["uniformity_exact"]),
        "undefined": dict(rep["undefined"]),
        "infinite": dict(rep["infinite"]),
        "title": f"{model} [{split}]",
        "note": ((f"uniformity from {'all' if rep['uniformity_exact'] else 'a sample of'} "
                  f"{pairs} pair{'' if pairs == 1 else 's'}; " if pairs else "")
                 + f"rho leaves out the top {exclude_top}"),
    })
    kept = min(part.n, part.dim) if n_components is None else n_components
    if kept - exclude_top == 1 and values["rho"] == 0:  # (--embed-dim 2: it read as a perfectly spread model)
        prov["notes"] = [f"rho is 0 by construction: leaving out the top {exclude_top} of {kept} singular values "
                         "leaves one, and one value is its own uniform spectrum (rho_all keeps them all)"]
    arrays = {}
    if keep_spectrum:
        arrays = {"singular_values": rep["singular_values"], "covariance_eigenvalues": rep["covariance_eigenvalues"]}
    return Result("geometry", values, prov, arrays=arrays, model=model, meanings=dict(MEANINGS))


def _check_spectrum_options(part, split: str, exclude_top: int, n_components: int | None,
                            source: Any = None) -> None:
    """Refuse, naming the option in both its forms, an ``n_components`` beyond the split's
    min(N, D) singular values and an ``exclude_top`` that leaves none of them (with more than one):
    the spectral functions' own messages named only the Python parameter ("n_components must be
    an integer in [1, 16]")."""
    from embedscope.errors import EmbedscopeError

    if part.n < 2:  # (geometry_report's own one-line error: fewer than two rows)
        return
    m = min(part.n, part.dim)
    of = f" of {source}" if source else ""  # (several files: which one)
    where = (f"the {split} split{of} has {m} singular value{'' if m == 1 else 's'} "
             f"(min(N, D) = min({part.n}, {part.dim}))")
    if n_components is not None:
        n_components = check_int(n_components, "n_components", min=1)
        if n_components > m:
            raise EmbedscopeError(f"n_components (--n-components) {n_components}: {where}")
    kept = m if n_components is None else n_components
    if kept > 1 and exclude_top >= kept:
        kept_txt = where if n_components is None else f"--n-components keeps {kept}"
        raise EmbedscopeError(f"exclude_top (--exclude-top) {exclude_top} leaves no singular value for rho: "
                              f"{kept_txt}")


def check_not_repeated(labels: Sequence[str]) -> None:
    """One file given twice without ``names``: its two default names are equal, and the results
    could not be shown side by side. Refused before any work (it failed after computing every file)."""
    from embedscope.errors import UsageError

    seen = set()
    for label in labels:
        if label in seen:
            raise UsageError(f"{label} is given twice: give each file once (or a name for each, --names / names=)")
        seen.add(label)


def spectrum(sources: Sequence[Any], *, names: Sequence[str] | None = None, split: str = "train",
             by_class: bool = False, k: int = 35, center: bool = False, exclude_top: int = 1,
             n_components: int | None = None, max_pairs: int = 200_000, seed: int = 0,
             progress=None) -> ResultSet:
    """Singular-value spectra (and with ``by_class`` the class-conditioned spectra, Roth App. E) of
    one or more files, with their geometry measures (docs/methods.md §2).

    Each result's ``table`` holds rows ``{kind, k, value}`` with kind ``singular_value``,
    ``normalised`` (s / Σs), and with ``by_class`` ``class_mean`` / ``class_std`` (over classes of
    the normalised per-class spectra, first ``k`` values, at most D: ``provenance["k_used"]``);
    ``arrays`` the same as numpy arrays for :func:`embedscope.viz.plot_spectra`. ``progress``: a
    callable ``progress(i, n)`` after each file, or ``True`` for a progress bar over the files (as
    the other analyses' ``progress=True``; ``False`` / ``None``: none).

    The spectrum needs no classes: a split whose every class has a single sample gets its spectrum
    and ρ, with the class measures NaN (``provenance["undefined"]``, as :func:`geometry`). With
    ``by_class``, a file without class-conditioned spectra (no class of two samples; or, normalised,
    every class spectrum all zero) has no ``class_mean`` / ``class_std``, ``n_classes_used`` 0 and
    the reason in ``provenance["class_spectra_undefined"]``.
    """
    sources = as_sources(sources)  # a single path is a list of one file
    labels = unique_names(sources, names)
    check_not_repeated(labels)
    k = check_int(k, "k")
    by_class, center = check_bool(by_class, "by_class"), check_bool(center, "center")
    if isinstance(split, str) and split in SPLIT_CHOICES:  # (a bad name: geometry's own error)
        check_splits_first(sources, [split])  # a file without the split: refused before any work
    bar = None
    if progress is None or isinstance(progress, (bool, np.bool_)):  # (True was called: "'bool' object is not
        # callable", where every other analysis takes progress=True)
        if progress:
            from embedscope.progress import progress_bar

            bar = progress_bar(total=len(sources), desc="spectra", unit="file", enabled=len(sources) > 1)
        progress = None
    elif not callable(progress):
        from embedscope.errors import EmbedscopeError

        raise EmbedscopeError(f"progress must be True, False or a callable progress(i, n), got "
                              f"{type(progress).__name__}")
    try:
        return _spectra(sources, labels, split=split, by_class=by_class, k=k, center=center,
                        exclude_top=exclude_top, n_components=n_components, max_pairs=max_pairs, seed=seed,
                        progress=progress if bar is None else (lambda i, n: bar.update(1)))
    finally:
        if bar is not None:
            bar.close()


def _normalised(s: np.ndarray) -> np.ndarray:
    """s / Σs, the sum taken on the values scaled by a power of two (exact), so that singular values near
    the float64 limit (whose sum overflows) or below it (whose sum underflows) keep their shares."""
    from embedscope.metrics.scale import pow2_shift

    e = pow2_shift(s, 64)
    t = np.ldexp(s, -e) if e else s
    return t / t.sum()


def _spectra(sources, labels, *, split, by_class, k, center, exclude_top, n_components, max_pairs, seed,
             progress) -> ResultSet:
    """:func:`spectrum`'s work, its arguments checked."""
    from embedscope.analyses._sources import other_images_note, split_paths
    from embedscope.metrics import class_conditioned_spectra
    from embedscope.metrics.spectral import UndefinedMeasure

    results = []
    first_paths = None
    for i, (src, label) in enumerate(zip(sources, labels)):
        es = as_set(src)
        r = geometry(es, split=split, exclude_top=exclude_top, n_components=n_components, max_pairs=max_pairs,
                     seed=seed, keep_spectrum=True, name=label)
        if len(sources) > 1:  # spectra side by side of different images (other --train-classes, data): said
            paths = split_paths(es, split)
            if first_paths is None:
                first_paths = paths
            else:
                other = other_images_note(paths, first_paths, split, labels[0])
                if other:
                    r.provenance.setdefault("notes", []).append(other)
        s = np.asarray(r.arrays["singular_values"], dtype=np.float64)
        r.arrays["normalised"] = _normalised(s)
        if by_class:
            part = es.subset(split)
            try:
                per_class, mean = class_conditioned_spectra(part.embeddings, part.labels, normalize=True,
                                                            center=center, k=k)
            except UndefinedMeasure as e:  # every class a single sample: the whole-set spectrum still stands
                r.provenance["n_classes_used"] = 0
                r.provenance["class_spectra_undefined"] = str(e)
            else:
                r.arrays.update(class_mean=mean, class_std=per_class.std(axis=0))
                r.provenance["n_classes_used"] = int(per_class.shape[0])
                r.provenance["k_used"] = int(mean.shape[0])  # min(k, D): k asks for more than D values
        r.provenance.update(by_class=by_class, k=k, center=center)
        r.table = [{"kind": kind, "k": j + 1, "value": float(v)}
                   for kind in ("singular_value", "normalised", "class_mean", "class_std")
                   for j, v in enumerate(r.arrays.get(kind if kind != "singular_value" else "singular_values", []))]
        r.analysis = "spectrum"
        results.append(r)
        if progress is not None:
            progress(i + 1, len(sources))
    return combine(results)
