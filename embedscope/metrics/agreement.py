"""Agreement of two models' saliency maps on the same images (Kobs et al. §3; docs/methods.md §8).

Pure functions on arrays of **post-processed** maps [N, H, W] (values >= 0, e.g. in [0, 1]):

* per image: Pearson r of the two flattened maps (higher = more agreement; NaN when a map is
  constant) and the Jensen–Shannon divergence of the two maps each divided by its sum (lower =
  more agreement; NaN when a map sums to 0);
* over images: r aggregated in Fisher-z space, mean = tanh(mean_i artanh r_i) and spread =
  tanh(std_i artanh r_i) with the population std (ddof 0), as the reference code; JSD as the
  arithmetic mean ± population std (ours: the reference code never aggregates JSD);
* model × model matrices and block means by loss family (ours).

r = ±1 (identical or exactly anti-proportional maps) would give z = ±inf and turn the Fisher-z
mean into ±1 or NaN (inf − inf). We clip r to ±(1 − 1e-7) before artanh (|z| <= 8.39) and report
how many images were clipped (``n_clipped``); when every r is the same (identical maps: all r = 1) the
mean is that r and the spread 0 exactly, no clip needed. Undefined r (a constant map) are left out of the
aggregate and counted (``n_undefined``), never dropped silently.

An all-zero map (a zero gradient: a model whose output does not change with the image, e.g. a
collapsed one) has neither r nor JSD. The matrices count, per model, its constant and all-zero
maps (``n_constant_maps``, ``n_zero_maps``), so that an undefined cell has its reason; a model whose
maps are all constant has no r even with itself (its diagonal r is NaN, not 1), one whose maps are
all zero no JSD either (diagonal JSD NaN, not 0). A family block mean counts the model pairs it left
out for an undefined value (``n_pairs_undefined_r``, ``n_pairs_undefined_jsd``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.metrics.scale import pow2_rows
from embedscope.validation import as_numpy

#: r is clipped to ±R_CLIP before the Fisher transform (z = artanh r stays finite, |z| <= 8.39).
R_CLIP = 1.0 - 1e-7
#: The loss families of Kobs et al.'s tables, in display order (docs/methods.md §8), then the rest.
FAMILY_ORDER = ("ranking", "classification", "untrained", "other")
_CHUNK_ELEMENTS = 1 << 24  # float64 work arrays of at most ~128 MiB


def _check_pair(a, b) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(as_numpy(a))  # (torch maps that require grad, or of bfloat16: numpy cannot take them as they are)
    b = np.asarray(as_numpy(b))
    if a.ndim < 2 or b.ndim < 2:
        raise EmbedscopeError(f"maps must be N x H x W (or N x P) arrays, got shapes {a.shape} and {b.shape}")
    if a.shape[0] != b.shape[0]:
        raise EmbedscopeError(f"mismatched number of maps: {a.shape[0]} vs {b.shape[0]}")
    if a.shape[1:] != b.shape[1:]:
        raise EmbedscopeError(f"maps of different sizes: {a.shape[1:]} vs {b.shape[1:]}")
    _check_sizes(a.shape[0], a.shape[1:])
    a, b = a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1)
    for name, m in (("first", a), ("second", b)):
        if m.dtype.kind not in "biuf":
            raise EmbedscopeError(f"the {name} maps must be real numbers, got dtype {m.dtype}")
        if m.dtype.kind == "f" and m.size and not (np.isfinite(m.min()) and np.isfinite(m.max())):
            bad = int(np.count_nonzero(~np.all(np.isfinite(m), axis=1)))
            raise EmbedscopeError(f"the {name} maps contain NaN or inf ({bad} map(s))")
    return a, b


def _check_sizes(n: int, pixels: tuple) -> None:
    """One-line errors for no maps at all and for maps of no pixel (a numpy reshape or reduction error before)."""
    if n == 0:
        raise EmbedscopeError("no maps to compare: 0 images")
    if int(np.prod(pixels)) == 0:
        raise EmbedscopeError(f"maps of no pixel: shape {tuple(pixels)} per image")


def _chunks(n: int, p: int):
    step = max(1, _CHUNK_ELEMENTS // max(p, 1))
    for s in range(0, n, step):
        yield slice(s, min(n, s + step))


def pearson_per_image(maps_a, maps_b) -> np.ndarray:
    """Pearson r of each pair of flattened maps (docs/methods.md §8) -> float64 [N]; NaN for a constant map.

    r = Σ (a − ā)(b − b̄) / sqrt(Σ (a − ā)² Σ (b − b̄)²), computed in float64 (each map first
    multiplied by a power of two, exact, so that maps of any finite scale give the same r; each map
    centred twice, so that the rounding of its mean leaves no bias in the deviations of a map far from
    0 that varies little, 1e15 + [0, 1)). Higher =
    more agreement. A map is constant when all its values are equal (an all-zero map included): r
    is then undefined (0/0) and NaN, also against another constant map. Two equal maps that vary have
    r = 1 exactly. NaN or inf in a map is an error.
    """
    a, b = _check_pair(maps_a, maps_b)
    out = np.empty(a.shape[0], dtype=np.float64)
    for s in _chunks(a.shape[0], a.shape[1]):
        x = pow2_rows(a[s].astype(np.float64))
        y = pow2_rows(b[s].astype(np.float64))
        # a constant map has no r; decided on the values themselves, not on x - mean(x), which
        # is not exactly 0 when the mean of n copies of v rounds to a float other than v
        const = (x.max(axis=1) == x.min(axis=1)) | (y.max(axis=1) == y.min(axis=1))
        # two equal maps (the same model twice) have r = 1 exactly, whatever the sums' rounding
        same = np.all(x == y, axis=1)
        # centred twice: the first mean's rounding (up to half an ulp of the values) is a bias the second
        # removes; a map far from 0 that varies little (1e15 + noise in [0, 1)) had r 2% off with one pass
        # (its Σ (x − x̄)² gained n·δ², δ the mean's rounding), as scipy's pearsonr has
        for v in (x, y):
            v -= v.mean(axis=1, keepdims=True)
            v -= v.mean(axis=1, keepdims=True)
        num = np.einsum("ij,ij->i", x, y)
        den = np.sqrt(np.einsum("ij,ij->i", x, x) * np.einsum("ij,ij->i", y, y))
        ok = ~const & (den > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.where(ok, num / np.where(ok, den, 1.0), np.nan)
        r[same & ~const] = 1.0
        out[s] = np.clip(r, -1.0, 1.0)
    return out


def _log_base(base) -> float:
    if base in ("bits", 2):
        return math.log(2.0)
    if base in ("nats", "e") or (isinstance(base, float) and base == math.e):
        return 1.0
    try:
        b = float(base)
    except (TypeError, ValueError):
        raise EmbedscopeError(f"unknown JSD base '{base}' (use 2 / 'bits' or 'e' / 'nats')") from None
    if not (b > 0 and b != 1 and math.isfinite(b)):
        raise EmbedscopeError(f"the JSD log base must be positive and not 1, got {base}")
    return math.log(b)


def jsd_per_image(maps_a, maps_b, *, base=2) -> np.ndarray:
    """Jensen–Shannon divergence of each pair of maps (docs/methods.md §8) -> float64 [N].

    P = a / Σa, Q = b / Σb, M = (P + Q)/2, JSD = ½ KL(P‖M) + ½ KL(Q‖M) with 0·log 0 = 0. ``base=2``
    (bits, the paper; ≤ 1) or ``"e"`` (nats, the reference code's ``jensenshannon(...)**2``; ≤ ln 2).
    NaN when a map sums to 0 (an all-zero map: P is undefined); a constant non-zero map is the
    uniform distribution and has a JSD. Maps must be non-negative and finite (NaN or inf is an
    error). Lower = more agreement.
    """
    a, b = _check_pair(maps_a, maps_b)
    lb = _log_base(base)
    out = np.empty(a.shape[0], dtype=np.float64)
    for s in _chunks(a.shape[0], a.shape[1]):
        p = a[s].astype(np.float64)
        q = b[s].astype(np.float64)
        if (p < 0).any() or (q < 0).any():
            raise EmbedscopeError("JSD needs non-negative maps (post-processed saliency maps)")
        p, q = pow2_rows(p), pow2_rows(q)  # exact; the sums below can neither overflow nor underflow
        sp = p.sum(axis=1, keepdims=True)
        sq = q.sum(axis=1, keepdims=True)
        ok = (sp[:, 0] > 0) & (sq[:, 0] > 0)
        p = p / np.where(sp > 0, sp, 1.0)
        q = q / np.where(sq > 0, sq, 1.0)
        m = 0.5 * (p + q)
        with np.errstate(divide="ignore", invalid="ignore"):
            kp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0) / np.where(m > 0, m, 1.0)), 0.0).sum(axis=1)
            kq = np.where(q > 0, q * np.log(np.where(q > 0, q, 1.0) / np.where(m > 0, m, 1.0)), 0.0).sum(axis=1)
        j = np.maximum(0.5 * (kp + kq), 0.0) / lb
        out[s] = np.where(ok, j, np.nan)
    return out


def fisher_z_mean(r, *, clip: float = R_CLIP) -> dict[str, Any]:
    """Fisher-z aggregate of correlations (docs/methods.md §8).

    mean = tanh(mean_i artanh r_i), spread = tanh(std_i artanh r_i) (population std, ddof 0), over
    the defined r (NaN = a constant map: counted in ``n_undefined``, left out). r is clipped to
    ±``clip`` first so that r = ±1 gives a finite z (counted in ``n_clipped``). When every defined r is
    the same value (e.g. identical maps: all r = 1) the mean is that value and the spread 0, exactly
    (the clipped z gave 0.9999999 and, the mean of n equal z rounding, a spread of ~1e-15). NaN mean
    and spread when no r is defined.
    """
    from embedscope.validation import check_number

    # (clip 1 left r = ±1 at z = ±inf: a mean and spread of NaN that n_undefined did not count)
    clip = check_number(clip, "clip", min=0, max=1, min_inclusive=False, max_inclusive=False)
    if r is None or isinstance(r, (str, bytes)):
        raise EmbedscopeError(f"r must hold correlations (numbers), got {type(r).__name__}")
    try:
        r = np.asarray(as_numpy(r), dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise EmbedscopeError(f"r must hold correlations (numbers), got {type(r).__name__}") from None
    if r.dtype == object or np.any(np.isinf(r)) or np.any(np.abs(r[~np.isnan(r)]) > 1):
        raise EmbedscopeError("r must hold correlations in [-1, 1] (NaN for an undefined one)")
    ok = ~np.isnan(r)
    rv = r[ok]
    n_clipped = int(np.count_nonzero(np.abs(rv) > clip))
    if rv.size == 0:
        return {"mean": float("nan"), "spread": float("nan"), "n": 0, "n_undefined": int(r.size), "n_clipped": 0}
    if rv.min() == rv.max():  # tanh(artanh r) = r and std 0, without the clip's and the mean's rounding
        mean, spread = float(rv[0]), 0.0
    else:
        z = np.arctanh(np.clip(rv, -clip, clip))
        mean, spread = float(np.tanh(z.mean())), float(np.tanh(z.std(ddof=0)))
    return {"mean": mean, "spread": spread, "n": int(rv.size), "n_undefined": int(r.size - rv.size),
            "n_clipped": n_clipped}


def map_agreement(maps_a, maps_b, *, jsd_base=2) -> dict[str, Any]:
    """Agreement of two models' post-processed maps of the same N images (docs/methods.md §8).

    Returns
    -------
    dict with per-image ``pearson`` [N] and ``jsd`` [N]; ``r_mean`` / ``r_spread`` (Fisher-z mean
    and spread, higher mean = more agreement), ``n_images``, ``n_valid_r``, ``n_undefined_r``
    (images with a constant map), ``n_clipped_r`` (|r| clipped at 1 − 1e-7); ``jsd_mean`` ±
    ``jsd_std`` (arithmetic, ddof 0, over images whose maps both have a positive sum; lower = more
    agreement), ``n_undefined_jsd``, ``jsd_base``.

    Examples
    --------
    >>> import numpy as np
    >>> a = np.random.default_rng(0).random((4, 8, 8))
    >>> map_agreement(a, a)["r_mean"], map_agreement(a, a)["r_spread"], map_agreement(a, a)["jsd_mean"]
    (1.0, 0.0, 0.0)
    """
    r = pearson_per_image(maps_a, maps_b)
    j = jsd_per_image(maps_a, maps_b, base=jsd_base)
    return _summary(r, j, jsd_base)


def _summary(r: np.ndarray, j: np.ndarray, jsd_base) -> dict[str, Any]:
    """:func:`map_agreement`'s dict from the per-image Pearson r and JSD of a pair of models."""
    fz = fisher_z_mean(r)
    jv = j[~np.isnan(j)]
    return {
        "pearson": r,
        "jsd": j,
        "n_images": int(r.size),
        "r_mean": fz["mean"],
        "r_spread": fz["spread"],
        "n_valid_r": fz["n"],
        "n_undefined_r": fz["n_undefined"],
        "n_clipped_r": fz["n_clipped"],
        "jsd_mean": float(jv.mean()) if jv.size else float("nan"),
        "jsd_std": float(jv.std(ddof=0)) if jv.size else float("nan"),
        "n_undefined_jsd": int(j.size - jv.size),
        "jsd_base": "bits" if _log_base(jsd_base) == math.log(2.0) else ("nats" if _log_base(jsd_base) == 1.0
                                                                          else str(jsd_base)),
    }


def agreement_matrix(maps: Sequence[np.ndarray], *, names: Sequence[str] | None = None,
                     families: Sequence[str] | None = None, jsd_base=2) -> dict[str, Any]:
    """Model × model agreement of saliency maps on the same images (docs/methods.md §8; ours beyond Kobs).

    Parameters
    ----------
    maps : sequence of M arrays [N, H, W]
        Each model's post-processed maps of the same N images in the same order (match files by
        path first: :func:`embedscope.store.saliency.match_maps`).
    names : M names (default ``model0..``); families : M loss families
        (``ranking`` / ``classification`` / ``untrained`` / anything else; default all ``other``).

    Returns
    -------
    dict with ``names``, ``families``, matrices [M, M] ``r_mean``, ``r_spread``, ``jsd_mean``,
    ``jsd_std``, ``n_undefined_r`` and ``n_undefined_jsd`` (images whose r, resp. JSD, is undefined;
    diagonal: r = 1, JSD = 0 by definition, not computed; NaN for a model whose maps are all constant,
    resp. all zero; the diagonal of ``n_undefined_r`` counts the model's constant maps, that of
    ``n_undefined_jsd`` its all-zero maps), ``n_constant_maps`` and ``n_zero_maps`` (per model), ``pairs``
    (``(i, j) -> map_agreement`` for i < j) and ``blocks``: per pair of families the arithmetic mean
    over the model pairs (cells i ≠ j, each unordered pair once) of the cells' Fisher-z mean r and
    mean JSD, as Kobs' block means (docs/methods.md §8), over the pairs where it is defined
    (``n_pairs_undefined_r`` / ``n_pairs_undefined_jsd`` count the others).
    """
    if (isinstance(maps, (str, bytes, np.ndarray)) and np.ndim(maps) != 4) or not hasattr(maps, "__len__"):
        raise EmbedscopeError(f"maps must be a sequence of each model's maps [N, H, W], got {type(maps).__name__}")
    maps = [as_numpy(m) for m in maps]
    for i, m in enumerate(maps):
        if np.ndim(m) != 3 or np.asarray(m).dtype.kind not in "biuf":  # (bool maps too, as map_agreement takes them)
            raise EmbedscopeError(f"maps[{i}] must be an array of maps [N, H, W], got "
                                  f"{type(m).__name__} of shape {np.shape(m)}")
    M = len(maps)
    names, families = _names_families(M, names, families)
    shape0 = np.asarray(maps[0]).shape
    for nm, m in zip(names, maps):
        if np.asarray(m).shape[0] != shape0[0]:
            raise EmbedscopeError(
                f"mismatched number of maps: {names[0]} has {shape0[0]}, {nm} has {np.asarray(m).shape[0]}")
    pairs = {(i, j): map_agreement(maps[i], maps[j], jsd_base=jsd_base) for i in range(M) for j in range(i + 1, M)}
    counts = np.array([_degenerate_counts(m) for m in maps], dtype=np.int64).reshape(M, 2)
    return _matrices(pairs, names, families, int(shape0[0]), counts)


def _degenerate_counts(maps) -> tuple[int, int]:
    """(constant maps, all-zero maps) among ``maps`` [N, H, W] (an all-zero map is also constant)."""
    m = np.asarray(maps)
    if m.ndim < 2 or m.shape[0] == 0:
        return 0, 0
    m = m.reshape(m.shape[0], -1)
    if m.shape[1] == 0:
        return int(m.shape[0]), int(m.shape[0])
    hi, lo = m.max(axis=1), m.min(axis=1)
    return int(np.count_nonzero(hi == lo)), int(np.count_nonzero((hi == 0) & (lo == 0)))


def agreement_matrix_streamed(read_rows: Callable[[int, int], Sequence[np.ndarray]], n: int, n_models: int, *,
                              block: int, names: Sequence[str] | None = None,
                              families: Sequence[str] | None = None, jsd_base=2) -> dict[str, Any]:
    """:func:`agreement_matrix` over N images read ``block`` images at a time (docs/methods.md §8).

    ``read_rows(start, stop)`` returns the ``n_models`` models' maps of images ``start:stop``
    (arrays [stop − start, H, W]). Only one block of every model's maps is held at once, with the
    per-image r and JSD of every pair ([N] each). Per image r and JSD depend on that image's two
    maps alone, computed by the same functions: the results equal :func:`agreement_matrix`'s on
    the whole arrays bit for bit.
    """
    M = int(n_models)
    names, families = _names_families(M, names, families)
    n, block = int(n), max(1, int(block))
    if n == 0:  # (as agreement_matrix on arrays of 0 images)
        _check_sizes(0, ())
    r = {(i, j): np.empty(n, dtype=np.float64) for i in range(M) for j in range(i + 1, M)}
    js = {key: np.empty(n, dtype=np.float64) for key in r}
    counts = np.zeros((M, 2), dtype=np.int64)
    for s in range(0, n, block):
        e = min(n, s + block)
        rows = list(read_rows(s, e))
        if len(rows) != M:
            raise EmbedscopeError(f"read_rows gave {len(rows)} models' maps, expected {M}")
        for k in range(M):
            counts[k] += _degenerate_counts(rows[k])
        for (i, j) in r:
            r[(i, j)][s:e] = pearson_per_image(rows[i], rows[j])
            js[(i, j)][s:e] = jsd_per_image(rows[i], rows[j], base=jsd_base)
        del rows
    pairs = {key: _summary(r[key], js[key], jsd_base) for key in r}
    return _matrices(pairs, names, families, n, counts)


def _names_families(M: int, names, families) -> tuple[list[str], list[str]]:
    if M < 2:
        raise EmbedscopeError(f"agreement needs at least two models' maps, got {M}")
    names = list(names) if names is not None else [f"model{i}" for i in range(M)]
    families = list(families) if families is not None else ["other"] * M
    if len(names) != M or len(families) != M:
        raise EmbedscopeError(f"{M} maps but {len(names)} names and {len(families)} families")
    for what, vals in (("names", names), ("families", families)):
        if not all(isinstance(v, str) for v in vals):
            raise EmbedscopeError(f"{what} must be texts, got {', '.join(sorted({type(v).__name__ for v in vals}))}")
    return names, families


def _matrices(pairs: dict[tuple[int, int], dict[str, Any]], names: list[str], families: list[str],
              n_images: int, counts=None) -> dict[str, Any]:
    """The matrices and family block means of :func:`agreement_matrix` from every pair's :func:`map_agreement`;
    ``counts`` [M, 2]: each model's constant and all-zero maps (:func:`_degenerate_counts`)."""
    M = len(names)
    counts = np.zeros((M, 2), dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64)
    keys = ("r_mean", "r_spread", "jsd_mean", "jsd_std")
    mats = {k: np.full((M, M), np.nan) for k in keys}
    n_undef = np.zeros((M, M), dtype=np.int64)
    n_undef_jsd = np.zeros((M, M), dtype=np.int64)
    for i in range(M):
        # a map agrees with itself: r = 1 and JSD = 0 where they are defined (a map that varies; a map
        # with a positive sum); a model without any such map has no r (or JSD) with itself either
        if n_images == 0 or counts[i, 0] < n_images:
            mats["r_mean"][i, i], mats["r_spread"][i, i] = 1.0, 0.0
        if n_images == 0 or counts[i, 1] < n_images:
            mats["jsd_mean"][i, i], mats["jsd_std"][i, i] = 0.0, 0.0
        n_undef[i, i] = counts[i, 0]
        n_undef_jsd[i, i] = counts[i, 1]  # (an all-zero map has no JSD, with itself neither)
    for (i, j), res in pairs.items():
        for k in keys:
            mats[k][i, j] = mats[k][j, i] = res[k]
        n_undef[i, j] = n_undef[j, i] = res["n_undefined_r"]
        n_undef_jsd[i, j] = n_undef_jsd[j, i] = res["n_undefined_jsd"]
    fams = sorted(set(families), key=lambda f: (FAMILY_ORDER.index(f) if f in FAMILY_ORDER else len(FAMILY_ORDER), f))
    blocks = []
    for a_i, fa in enumerate(fams):
        for fb in fams[a_i:]:
            cells = [(i, j) for (i, j) in pairs if {families[i], families[j]} == {fa, fb}
                     and (fa != fb or families[i] == fa)]
            if not cells:
                continue
            r = np.array([mats["r_mean"][c] for c in cells])
            js = np.array([mats["jsd_mean"][c] for c in cells])
            blocks.append({"family_a": fa, "family_b": fb, "n_pairs": len(cells),
                           "r_mean": float(np.nanmean(r)) if np.any(~np.isnan(r)) else float("nan"),
                           "jsd_mean": float(np.nanmean(js)) if np.any(~np.isnan(js)) else float("nan"),
                           "n_pairs_undefined_r": int(np.count_nonzero(np.isnan(r))),
                           "n_pairs_undefined_jsd": int(np.count_nonzero(np.isnan(js)))})
    return {"names": names, "families": families, **mats, "n_undefined_r": n_undef, "n_undefined_jsd": n_undef_jsd,
            "pairs": pairs,
            "blocks": blocks, "n_images": int(n_images), "n_constant_maps": [int(c) for c in counts[:, 0]],
            "n_zero_maps": [int(c) for c in counts[:, 1]]}


__all__ = ["R_CLIP", "FAMILY_ORDER", "pearson_per_image", "jsd_per_image", "fisher_z_mean", "map_agreement",
           "agreement_matrix", "agreement_matrix_streamed"]
