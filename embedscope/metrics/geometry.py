"""Class distances π (docs/methods.md §3), alignment/uniformity (§4) and the one-call geometry report.

Everything here is computed from per-class sums, never from an N×N (or C×C) distance matrix:
for unit rows u_i, Σ_{i≠j∈c} (1 − u_i·u_j) = n_c Σ_{i∈c} ‖u_i − ū_c‖², so one pass over row blocks
(float64 per block), summing each row's difference from its class's first row and its square,
gives π_intra, π_inter and the alignment exactly (the spread without cancellation: a class of
equal rows gives exactly 0; a spread within the rounding of the rows' values, as rows on one ray
have, is 0 too: :func:`_unit_spread`). Only the uniformity needs pairs: all of them (blocked) for small N,
a fixed-seed sample of ``max_pairs`` otherwise.

Scale: X is multiplied by a power of two (exact) when its largest |value| lies outside
[2^-256, 2^256] (:func:`~embedscope.metrics.spectral.pow2_shift`), and the unit rows of rows far
below the largest (squared norm < 2^-900) are formed from the rows as given after a per-row
power-of-two rescaling, and the class sums of the cosine π_inter at each class's own power of two
(a class mean's direction is that of the class alone), so rows of any finite scale, also far apart
in one X (1e-300 beside 1e300), give the values of the formulas (not an overflow to inf, a
subnormal loss of digits or a false "all zeros"); squared-Euclidean π are scaled back at the end.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.metrics.scale import pow2_rows
from embedscope.metrics.spectral import (
    GRAM_RCOND,
    RANKME_EPS,
    UndefinedMeasure,
    _alpha_fit,
    _kl_decay,
    _rankme,
    _scaled_covariance_eigenvalues,
    _sv_from_gram,
    _svd_values,
    block_rows_for,
    pow2_shift,
)
from embedscope.validation import as_numpy, beyond_int64, check_bool, check_int, check_labels, check_matrix, check_number

__all__ = ["class_distances", "alignment_uniformity", "geometry_report"]

METRICS = ("cosine", "sqeuclidean")
DEFAULT_MAX_PAIRS = 200_000
#: the most entries (block rows x N) of one block of the exact uniformity (every pair): about
#: 40 bytes each at once (the block's inner products, its pairs, their mask), ~80 MB whatever N
UNIFORMITY_BLOCK_ENTRIES = 1 << 21
SAMPLE_DRAW = 1 << 24  # sampled uniformity pairs drawn at once (more: drawn chunk by chunk, bounded memory)
#: rows with a squared norm below this (after the global rescaling) get their unit vector from a
#: per-row power-of-two rescaling: their squares would be subnormal (digits lost) or zero
_TINY_SQ = 2.0 ** -900


def _unit_rows(b: np.ndarray) -> np.ndarray:
    """Unit vectors of the non-zero float64 rows b, each row first brought to max |value| in
    [0.5, 1) by a power of two (exact): no overflow, no subnormal squares."""
    c = pow2_rows(b)
    return c / np.sqrt(np.einsum("ij,ij->i", c, c))[:, None]


# ----------------------------------------------------------------------------- one pass over X
def _encode(y, n: int):
    """(the sorted distinct labels, each row's class index, the class sizes). The labels as given:
    texts as texts (``check_labels`` encodes them as codes 0..C-1, which were returned as the classes)."""
    codes = check_labels(y, n)
    classes, first, inv, counts = np.unique(codes, return_index=True, return_inverse=True, return_counts=True)
    a = np.asarray(as_numpy(y))
    if a.dtype.kind not in "iuf" or beyond_int64(a):  # codes, not the labels' values
        classes = a[first]
    return classes, inv.reshape(-1), counts


def _accumulate(X: np.ndarray, inv: np.ndarray, n_classes: int, *, with_gram: bool,
                need_unit: bool = True, need_raw_spread: bool = True, block_rows: int | None = None,
                shift: int = 0, allow_zero_rows: bool = False) -> dict:
    """One float64 pass over row blocks of 2^-shift·X (exact): XᵀX and the column sums (with
    ``with_gram``), the row norms, and per class: with ``need_raw_spread`` its first row
    (``raw_ref``), the sum of the rows' differences from it (``raw_dev``) and of their squared norms
    (``raw_dev2``), else the sum of its rows (``raw``); with ``need_unit`` the same three of the
    unit rows (``unit_*``). Differences from a class member give the spread about the class mean
    without the cancellation of n² − ‖Σu‖² (a collapsed class gives exactly 0, where plain sums
    left rounding of 1e-16 that made π_ratio a random number), and the class mean exactly where a
    class's rows are equal.

    A row of all zeros has no unit vector: with ``need_unit`` it is refused, unless
    ``allow_zero_rows``, which lists such rows in ``zero_rows`` (their indices, ascending) and
    leaves the unit sums meaningless when there are any (the caller then reports the cosine
    measures as undefined; the Gram matrix, column sums and raw sums hold every row)."""
    import scipy.sparse as sp

    n, d = X.shape
    block_rows = block_rows or block_rows_for(d)
    row_norms = np.empty(n)
    G = np.zeros((d, d)) if with_gram else None
    colsum = np.zeros(d)
    seen = np.zeros(n_classes, dtype=bool)
    buf = None
    zero_found: list[np.ndarray] = []
    raw = np.zeros((n_classes, d))
    raw_ref, raw_dev, raw_dev2 = np.zeros((n_classes, d)), np.zeros((n_classes, d)), np.zeros(n_classes)
    unit_ref, unit_dev, unit_dev2 = np.zeros((n_classes, d)), np.zeros((n_classes, d)), np.zeros(n_classes)
    norm_sum = np.zeros(n_classes)
    # The class sums of the cosine (``raw``: the direction of each class mean) at each class's own power of
    # two where X is scaled down: 2^-shift·X underflows rows far below the largest (1e-300 beside 1e300) to
    # 0, and a class of such rows had a "zero" mean; a class mean's direction does not depend on its scale.
    class_exp = _class_exponents(X, inv, n_classes, block_rows) if shift > 0 and not need_raw_spread else None
    for s in range(0, n, block_rows):
        b0 = np.asarray(X[s:s + block_rows], dtype=np.float64)  # (the rows as given: directions, class sums)
        b = np.ldexp(b0, -shift) if shift else b0
        ib = inv[s:s + block_rows]
        m = b.shape[0]
        onehot = sp.csr_matrix((np.ones(m), (ib, np.arange(m))), shape=(n_classes, m))
        sqn = np.einsum("ij,ij->i", b, b)
        if not np.all(np.isfinite(sqn)):  # NaN or inf anywhere in the row (squares cannot overflow float64)
            i = s + int(np.flatnonzero(~np.isfinite(sqn))[0])  # (checked first: no inf·0 warning of the Gram)
            raise EmbedscopeError(f"row {i} of X contains NaN or inf")
        if with_gram:
            G += b.T @ b  # numpy calls BLAS syrk for this pattern
            colsum += b.sum(axis=0)
        row_norms[s:s + m] = np.sqrt(sqn)
        u = None
        if need_unit:
            tiny = sqn < _TINY_SQ
            if not tiny.any():
                u = b / row_norms[s:s + m, None]  # out of place: b may be a view of X
            else:  # (tiny rows from the rows as given: scaled down, they may have lost digits or become 0)
                zero = tiny & ~np.any(b0, axis=1)
                if zero.any():
                    if not allow_zero_rows:
                        i = s + int(np.flatnonzero(zero)[0])
                        raise EmbedscopeError(f"row {i} of X is all zeros: its cosine distance is undefined")
                    zero_found.append(s + np.flatnonzero(zero))
                    tiny &= ~zero  # (a zero row's "unit vector" is left 0: the unit sums are not used then)
                u = b / np.where(tiny | zero, 1.0, row_norms[s:s + m])[:, None]
                u[tiny] = _unit_rows(b0[tiny])
        cls, at = np.unique(ib, return_index=True)  # each class's first row: its reference
        new = ~seen[cls]
        seen[cls[new]] = True
        raw_ref[cls[new]] = b[at[new]]
        if u is not None:
            unit_ref[cls[new]] = u[at[new]]
        if buf is None or buf.shape[0] < m:
            buf = np.empty((m, d))
        # the differences in place (in this block's own arrays, never in X; one gather buffer reused)
        if need_raw_spread:
            v = b if b.flags.owndata else b.copy()
            np.subtract(v, np.take(raw_ref, ib, axis=0, out=buf[:m], mode="clip"), out=v)
            raw_dev += onehot @ v
            raw_dev2 += np.bincount(ib, weights=np.einsum("ij,ij->i", v, v), minlength=n_classes)
        elif class_exp is not None:
            bc = np.ldexp(b0, -class_exp[ib][:, None])
            raw += onehot @ bc
            norm_sum += np.bincount(ib, weights=np.sqrt(np.einsum("ij,ij->i", bc, bc)), minlength=n_classes)
        else:
            raw += onehot @ b
        if u is not None:
            np.subtract(u, np.take(unit_ref, ib, axis=0, out=buf[:m], mode="clip"), out=u)
            unit_dev += onehot @ u
            unit_dev2 += np.bincount(ib, weights=np.einsum("ij,ij->i", u, u), minlength=n_classes)
    out = {"colsum": colsum, "norms": row_norms, "raw": raw,
           "raw_ref": raw_ref, "raw_dev": raw_dev, "raw_dev2": raw_dev2,
           "unit_ref": unit_ref, "unit_dev": unit_dev, "unit_dev2": unit_dev2,
           "zero_rows": np.concatenate(zero_found) if zero_found else np.zeros(0, dtype=np.int64),
           # what rounding can do to a direction: the rows' own (X's dtype) and this pass's
           "unit_round": _input_roundoff(X.dtype),
           "norm_sum": norm_sum if class_exp is not None else np.bincount(inv, weights=row_norms, minlength=n_classes)}
    if with_gram:
        out["G"] = G
    return out


def _class_exponents(X: np.ndarray, inv: np.ndarray, n_classes: int, block_rows: int) -> np.ndarray:
    """Per class the exponent e with its largest |value| in [2^(e-1), 2^e) (0 for a class of zeros): its
    rows times 2^-e have their largest |value| in [0.5, 1), exact."""
    top = np.zeros(n_classes)
    for s in range(0, X.shape[0], block_rows):
        b = np.abs(np.asarray(X[s:s + block_rows], dtype=np.float64))
        np.maximum.at(top, inv[s:s + block_rows], b.max(axis=1) if b.shape[1] else np.zeros(b.shape[0]))
    top[~np.isfinite(top)] = 1.0  # (a NaN or inf row: refused by the pass that reads it)
    return np.frexp(top)[1].astype(np.int64)


def _input_roundoff(dtype) -> float:
    """The unit roundoff of the rows as given: 2^-24 for float32, 2^-53 for float64 (and for
    integers, taken as float64), 2^-11 for float16. Each value of X is known to that relative
    precision, so each row's direction x/‖x‖ to 2× that in norm."""
    dt = np.dtype(dtype)
    return float(np.finfo(dt).eps) / 2 if np.issubdtype(dt, np.floating) else float(np.finfo(np.float64).eps) / 2


def _direction_error(sums: dict, d: int) -> float:
    """A bound on ‖û − u‖ for one computed unit row û: 2u (the rounding of the row's values, u of
    its dtype) plus the float64 normalisation's (d + 4)·eps."""
    return 2 * sums["unit_round"] + (d + 4) * float(np.finfo(np.float64).eps)


def _unit_spread(sums: dict, n: np.ndarray) -> np.ndarray:
    """Per class Σ_i ‖u_i − ū‖² of the unit rows (:func:`_spread`), 0 where it is within what the
    rounding of the rows can make of rows of one direction (≤ n_c γ², γ = :func:`_direction_error`:
    Σ_i ‖û_i − ū‖² ≤ Σ_i ‖û_i − u‖² ≤ n_c γ² for a class whose rows share the direction u). A class
    of positive multiples of one vector (an unnormalised model collapsed to one ray, stored as
    float32) kept a spread of ~1e-16 from that rounding, and π_ratio was a quotient of two such
    noises (39.7 instead of undefined)."""
    spread = _spread(sums["unit_dev"], sums["unit_dev2"], n)
    gamma = _direction_error(sums, sums["unit_dev"].shape[1])
    spread[spread <= n * gamma * gamma] = 0.0
    return spread


#: π_inter is taken as 0 within the rounding of the class means only where every mean's direction
#: is known to this (:func:`_mean_direction_error`; float32 rows: a class sum not below ~1/80,000 of
#: the sum of its rows' norms, float16 ~1/10): a sum that all but cancels has a direction of rounding,
#: and its mean no more coincides with the others' than not
MEAN_DIRECTION_KNOWN = 1e-2
#: a class mean whose direction error bound (:func:`_mean_direction_error`) exceeds this is the zero vector
#: within rounding: its cosine distance to the other means is undefined (a sum of exactly 0 came out of
#: float64 summation as 2.8e-17, a direction of noise, and π_inter was a number, π_ratio inf)
MEAN_DIRECTION_LOST = 1.0


def _mean_direction_error(sums: dict, n: np.ndarray) -> np.ndarray:
    """Per class a bound on ‖μ̂ − μ‖ for its computed unit mean: the rows' values (relative u each)
    move the class sum by at most u Σ‖x_i‖ and its float64 summation by n_c eps Σ‖x_i‖, so its
    direction moves by at most 2 (u + n_c eps) Σ‖x_i‖ / ‖Σ x_i‖, plus the normalisation's (d + 4) eps.
    (inf where that quotient overflows: a sum that all but cancels.) The sums must be non-zero."""
    eps = float(np.finfo(np.float64).eps)
    raw = sums["raw"]
    e = np.frexp(np.max(np.abs(raw), axis=1))[1]  # ‖Σ x_i‖ and Σ‖x_i‖ both times 2^-e (exact)
    scaled = np.ldexp(raw, -e[:, None])
    with np.errstate(over="ignore"):
        quotient = np.ldexp(sums["norm_sum"], -e) / np.sqrt(np.einsum("ij,ij->i", scaled, scaled))
    return 2 * (sums["unit_round"] + n * eps) * quotient + (raw.shape[1] + 4) * eps


def _spread(dev: np.ndarray, dev2: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Per class Σ_i ‖v_i − v̄‖² from Σ v_i and Σ ‖v_i‖² of differences v_i from a class member
    (small where the class is tight: no cancellation against the rows' norms), at least 0."""
    return np.maximum(dev2 - np.einsum("ij,ij->i", dev, dev) / n, 0.0)


def _mean_spread(M: np.ndarray) -> float:
    """Σ_k ‖m_k − m̄‖² of the rows of M, about its first row (exactly 0 for equal rows)."""
    W = M - M[0]
    t = W.sum(axis=0)
    return max(float(np.einsum("ij,ij->", W, W)) - float(t @ t) / M.shape[0], 0.0)


#: why a measure is undefined (geometry_report's ``undefined``; the same text groups measures in one note)
LONE_CLASSES = "every class has a single sample: no two samples of one class"
ONE_CLASS = "one class only: no two class means"


def zero_rows_reason(zero: np.ndarray, n: int, *, rows: str = "rows", paths: Sequence[str] | None = None) -> str:
    """Why the cosine measures are undefined when the rows ``zero`` (indices, ascending) of the n
    are all zeros: ``"2 of the 30 rows are all zeros (the first: row 4): no direction, so the cosine
    distance is undefined"``; ``rows`` names the rows (``"train rows"``), ``paths`` (one per row)
    adds the first one's path."""
    i = int(zero[0])
    first = f"row {i}" if paths is None else f"row {i}, path '{paths[i]}'"
    return (f"{zero.size} of the {n} {rows} {'is' if zero.size == 1 else 'are'} all zeros (the first: {first}): "
            "no direction, so the cosine distance is undefined")


def _pi_from_sums(sums: dict, counts: np.ndarray, metric: str, shift: int = 0, *, strict: bool = True,
                  classes: np.ndarray | None = None) -> dict:
    """π_intra, π_inter, π_ratio from the sums of :func:`_accumulate`. ``strict``: a π the data
    leave undefined raises :class:`UndefinedMeasure` (as :func:`class_distances` always did); else it
    is NaN and ``undefined`` maps its key to the reason (π_ratio takes the reason of its part).
    ``infinite`` maps ``pi_ratio`` to the reason when it is inf (π_inter = 0 < π_intra)."""
    n = counts.astype(np.float64)
    C = counts.size
    multi = counts >= 2
    undefined: dict[str, str] = {}
    infinite: dict[str, str] = {}
    if C < 2:
        if strict:
            raise UndefinedMeasure(f"class distances need at least two classes, got {C}")
        undefined["pi_inter"] = ONE_CLASS
    if not multi.any():
        if strict:
            raise UndefinedMeasure("π_intra is undefined: every class has a single sample")
        undefined["pi_intra"] = LONE_CLASSES
    # For unit rows Σ_{i≠j∈c} (1 − u_i·u_j) = n_c Σ_i ‖u_i − ū_c‖², and Σ_{i≠j} ‖x_i − x_j‖² =
    # 2 n_c Σ_i ‖x_i − x̄_c‖²; the spreads come from differences to a class member (_accumulate), as
    # do the class means (exact for a class of equal rows), and π_inter from the means' spread.
    intra = np.full(C, np.nan)
    inter = float("nan")
    if metric == "cosine":
        spread = _unit_spread(sums, n)  # (0 within the rows' rounding of one direction)
        intra[multi] = spread[multi] / (n[multi] - 1)
        if C >= 2:
            nonzero = np.any(sums["raw"], axis=1)
            gamma = _mean_direction_error(sums, n) if nonzero.all() else None
            same = sums["unit_dev2"] == 0  # every unit row of the class equal: the mean's direction exactly
            # a class sum of exactly 0, or one that cancels to within its rounding (a direction of noise)
            bad = ~nonzero if gamma is None else (gamma > MEAN_DIRECTION_LOST) & ~same
            if bad.any():
                c = int(np.flatnonzero(bad)[0])
                name = f"class index {c}" if classes is None else f"class {classes[c]}"
                why = (f"the mean of {name} is the zero vector: its cosine distance is undefined" if gamma is None else
                       f"the mean of {name} is the zero vector within rounding (its rows cancel): its direction, and "
                       "so its cosine distance, is undefined")
                if strict:
                    raise UndefinedMeasure(why)
                undefined["pi_inter"] = why
            else:
                mu = _unit_rows(sums["raw"])
                mu[same] = sums["unit_ref"][same]
                inter = _mean_spread(mu)
                # 0 within what rounding can make of class means of one direction (Σ_k ‖μ̂_k − μ̄‖² ≤
                # Σ_k γ_k², as in _unit_spread), when each mean's direction is known well (γ_k ≤
                # MEAN_DIRECTION_KNOWN; a class sum that nearly cancels has a direction of rounding)
                floor = float(np.sum(gamma * gamma))
                inter = 0.0 if inter <= floor and np.all(gamma <= MEAN_DIRECTION_KNOWN) else inter / (C - 1)
    else:  # sqeuclidean
        spread = _spread(sums["raw_dev"], sums["raw_dev2"], n)
        intra[multi] = 2 * spread[multi] / (n[multi] - 1)
        if C >= 2:
            inter = 2 * _mean_spread(sums["raw_ref"] + sums["raw_dev"] / n[:, None]) / (C - 1)
    pi_intra = float(np.mean(intra[multi])) if multi.any() else float("nan")
    if "pi_intra" in undefined or "pi_inter" in undefined:
        ratio = float("nan")
        undefined["pi_ratio"] = undefined.get("pi_intra", undefined.get("pi_inter"))
    elif inter > 0:
        ratio = pi_intra / inter
    elif pi_intra > 0:  # inf is what π_intra / 0 is; ``infinite`` says why (a note, not NaN)
        ratio = float("inf")
        infinite["pi_ratio"] = ("pi_inter = 0 < pi_intra: the class means coincide"
                                + (" in direction" if metric == "cosine" else "") + ", pi_intra / 0")
    else:
        ratio = float("nan")
        undefined["pi_ratio"] = ("pi_intra = pi_inter = 0, 0/0: a collapsed model, every row "
                                 + ("in one direction" if metric == "cosine" else "on one point"))
    if metric == "sqeuclidean" and shift:  # squared distances of the rescaled rows: scale back
        with np.errstate(over="ignore", under="ignore"):
            intra, pi_intra, inter = np.ldexp(intra, 2 * shift), float(np.ldexp(pi_intra, 2 * shift)), \
                float(np.ldexp(inter, 2 * shift))
    return {
        "pi_intra": pi_intra,
        "pi_inter": float(inter),
        "pi_ratio": float(ratio),
        "intra_per_class": intra,
        "n_singleton": int(np.count_nonzero(~multi)),
        "n_classes": int(C),
        "undefined": undefined,
        "infinite": infinite,
    }


def class_distances(X, y, *, metric: str = "cosine") -> dict:
    """Class distances π_intra, π_inter and π_ratio of Roth et al. (docs/methods.md §3).

    With d the distance (``metric="cosine"``: d = 1 − cos; rows need not be normalised)::

        π_intra = mean over classes c with n_c ≥ 2 of  Σ_{i≠j∈Φ_c} d(φ_i, φ_j) / (n_c² − n_c)
        π_inter = Σ_{k≠l} d(μ_k, μ_l) / (C² − C),    μ_c = normalise(mean of Φ_c)
        π_ratio = π_intra / π_inter                  ("embedding space density")

    Source: Roth et al., "Revisiting Training Strategies and Generalization Performance in Deep
    Metric Learning", ICML 2020, §5 and reference code ``metrics/dists.py``. Computed exactly from
    per-class sums of the unit rows (Σ_{i≠j} (1 − u_i·u_j) = n_c Σ_i ‖u_i − ū_c‖²; likewise for the class
    means), in float64 and O(N·D) time: no N×N matrix. Singleton classes have no intra pairs: they
    are left out of π_intra and counted in ``n_singleton`` (the reference code means to fill them
    with the largest class value but indexes wrongly: it takes the larger value of the first two
    classes in label order, NaN when one of them is a singleton; not copied); they still count in
    π_inter. ``metric="sqeuclidean"`` uses
    ‖a − b‖² on the raw rows and the raw (unnormalised) class means.

    With the cosine, directions that differ by no more than the rounding of the rows' values (of
    X's dtype: 2⁻²⁴ for float32) and of the float64 normalisation are one: a class spread within
    that is 0, and so is π_inter when every class mean lies within its own rounding of one
    direction. So a model collapsed to one ray (rows that are positive multiples of one vector)
    has π_intra = π_inter = 0 and π_ratio NaN, as one collapsed to one point (docs/geometry.md).

    Parameters
    ----------
    X : array [N, D]
    y : array [N] of labels
    metric : {"cosine", "sqeuclidean"}

    Returns
    -------
    dict with ``pi_intra``, ``pi_inter``, ``pi_ratio`` (floats; π_ratio is inf when π_inter = 0 < π_intra, NaN when both are 0),
    ``intra_per_class`` (array [C] in the order of ``classes``, NaN for singletons),
    ``classes`` (the sorted labels), ``counts``, ``n_singleton``, ``n_classes``.

    Raises
    ------
    UndefinedMeasure
        (an :class:`~embedscope.errors.EmbedscopeError`) when the data leave π_intra or π_inter
        undefined: one class only, every class a single sample, or (cosine) a class whose mean is
        the zero vector (or is within the rounding of its sum: rows that cancel). :func:`geometry_report`
        reports such a π as NaN instead, with the reason.

    Examples
    --------
    Two classes on orthogonal axes, each a pair at 90° (cosine distance 1 within, 1 between the
    normalised means):

    >>> import numpy as np
    >>> X = np.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0], [0, 0, 0, 1.0]])
    >>> d = class_distances(X, [0, 0, 1, 1])
    >>> round(d["pi_intra"], 6), round(d["pi_inter"], 6), round(d["pi_ratio"], 6)
    (1.0, 1.0, 1.0)
    """
    if metric not in METRICS:
        raise EmbedscopeError(f"metric must be one of {', '.join(METRICS)}, got '{metric}'")
    X = check_matrix(X, check_finite=False)  # _accumulate checks every row
    classes, inv, counts = _encode(y, X.shape[0])
    shift = pow2_shift(X)
    sums = _accumulate(X, inv, classes.size, with_gram=False, need_unit=metric == "cosine",
                       need_raw_spread=metric == "sqeuclidean", shift=shift)
    out = _pi_from_sums(sums, counts, metric, shift)
    del out["undefined"]  # strict: π_intra and π_inter are defined here (π_ratio's NaN is documented)
    del out["infinite"]  # (π_ratio's inf is documented too)
    out["classes"] = classes
    out["counts"] = counts
    return out


# ----------------------------------------------------------------------------- Wang & Isola
def _alignment_from_sums(sums: dict, counts: np.ndarray) -> float:
    """Σ_c Σ_{i≠j∈c} ‖u_i − u_j‖² / Σ_c (n_c² − n_c), with Σ_{i≠j∈c} ‖u_i − u_j‖² = 2 n_c Σ_i ‖u_i − ū_c‖²."""
    n = counts.astype(np.float64)
    pairs = float(np.sum(n * n - n))
    if pairs == 0:
        raise UndefinedMeasure("alignment is undefined: no class has two or more samples")
    return float(np.sum(2 * n * _unit_spread(sums, n)) / pairs)


def _logmeanexp_update(state, a: np.ndarray):
    """Running log-mean-exp: ``(max m, Σ exp(a − m), Σ expm1(a − m), count)``.

    Both sums, because :func:`_logmeanexp` takes the logarithm of the mean of ``exp(a − m)`` from the
    one that keeps its digits: near 1 (every ``a`` close to the max: the uniformity of a nearly
    collapsed model, −1e-11, where ``log`` of 1 − 1e-11 had lost 5 of 16 digits) ``log1p`` of the
    mean of ``expm1``; otherwise ``log`` of the mean of ``exp`` (whose small terms ``expm1`` + 1
    would round away)."""
    if a.size == 0:
        return state
    m_new = float(a.max())
    mx, tot, tot1, cnt = state
    if m_new > mx:
        if cnt:  # rescale to the new max: exp(a − m_new) = exp(a − m) f, expm1(...) = (1 + e) f − 1
            f, f1 = float(np.exp(mx - m_new)), float(np.expm1(mx - m_new))
            tot, tot1 = tot * f, tot1 * f + cnt * f1
        mx = m_new
    a = a - mx
    return mx, tot + float(np.exp(a).sum()), tot1 + float(np.expm1(a).sum()), cnt + a.size


def _logmeanexp(state) -> float:
    mx, tot, tot1, cnt = state
    mean = tot / cnt
    return float(mx + (np.log1p(tot1 / cnt) if mean > 0.5 else np.log(mean)))


def _uniformity(X: np.ndarray, norms: np.ndarray, t: float, max_pairs: int, seed: int,
                block_rows: int | None = None, shift: int = 0) -> tuple[float, int, bool]:
    """``norms``: the row norms of 2^-shift·X (from :func:`_accumulate`). Every pair (a ``max_pairs``
    of at least N(N−1)/2): rows in blocks of at most 1024 and of ``UNIFORMITY_BLOCK_ENTRIES`` / N,
    so that a block's work arrays (block rows × N) stay bounded whatever N."""
    n = X.shape[0]
    all_pairs = n * (n - 1) // 2
    state = (-np.inf, 0.0, 0.0, 0)
    tiny = norms * norms < _TINY_SQ

    def unit(idx) -> np.ndarray:
        b0 = np.asarray(X[idx], dtype=np.float64)
        b = np.ldexp(b0, -shift) if shift else b0
        tb = tiny[idx]
        u = b / np.where(tb, 1.0, norms[idx])[:, None]
        if tb.any():  # (from the rows as given: scaled down, a row far below the largest may have become 0)
            u[tb] = _unit_rows(b0[tb])
        return u

    chunk = 32768

    step = max(1, (1 << 22) // max(1, X.shape[1]))  # ≤ 4M entries (32 MB) per work array, whatever D

    def d2_exact(ii, jj, U=None):
        """‖u_i − u_j‖² from the difference of the float64 unit rows (no cancellation in 2 − 2 u_i·u_j)."""
        out = np.empty(len(ii))
        for c in range(0, len(ii), step):
            a, b = ii[c:c + step], jj[c:c + step]
            diff = unit(a) - unit(b) if U is None else U[a] - U[b]
            out[c:c + step] = np.einsum("ij,ij->i", diff, diff)
        return out

    if all_pairs <= max_pairs:
        U = unit(np.arange(n))
        # d² = ‖w_i‖² + ‖w_j‖² − 2 w_i·w_j about the coordinate-wise median c (w = u − c): its error,
        # ≲ 4 (D + 8) ε (‖w_i‖² + ‖w_j‖²), is relative to the rows' spread about c, not to 1 as in
        # 2 − 2 u_i·u_j (a nearly collapsed model's d² ~ 1e-12 came out 1e-4 relative off; the median,
        # not the mean: its far rows do not move it; of at most ~128 evenly spaced rows: of all 632 x 2048
        # it cost more than the Gram matrix). Pairs where that bound is above 2^-30 of d² (near-duplicates,
        # or rows far from c) come from the difference of their unit rows: exact whatever c is.
        W = U - np.median(U[::max(1, n // 128)], axis=0)
        sq = np.einsum("ij,ij->i", W, W)
        close = 2.0 ** 30 * 4 * (X.shape[1] + 8) * float(np.finfo(np.float64).eps)
        rows = block_rows or max(1, min(1024, UNIFORMITY_BLOCK_ENTRIES // n))
        for s in range(0, n, rows):
            e = min(n, s + rows)
            d2 = W[s:e] @ W[s:].T  # rows s.., columns s..: keep j > i
            d2 *= -2.0
            d2 += sq[s:e, None]
            d2 += sq[None, s:]
            # the pairs j > i (as np.triu_indices, without its two int64 index arrays)
            upper = np.arange(d2.shape[1])[None, :] > np.arange(e - s)[:, None]
            near = d2 < (sq[s:e, None] + sq[None, s:]) * close
            near &= upper
            if near.any():
                ri, ci = np.nonzero(near)
                upper &= ~near
                for c in range(0, ri.size, chunk):
                    state = _logmeanexp_update(state, -t * d2_exact(s + ri[c:c + chunk], s + ci[c:c + chunk], U))
                del ri, ci
            del near
            d2 = d2[upper]
            del upper
            np.clip(d2, 0.0, None, out=d2)
            d2 *= -t
            state = _logmeanexp_update(state, d2)
        exact, npairs = True, all_pairs
    else:
        rng = np.random.default_rng(seed)

        def draw(m: int) -> tuple[np.ndarray, np.ndarray]:
            i = rng.integers(0, n, size=m)
            j = rng.integers(0, n - 1, size=m)
            j += j >= i  # uniform over j ≠ i
            return i, j

        # up to SAMPLE_DRAW pairs drawn at once (the values of earlier versions); more are drawn chunk
        # by chunk, so that memory does not grow with max_pairs (4e9 pairs took 32 GB of indices)
        if max_pairs <= SAMPLE_DRAW:
            i, j = draw(max_pairs)
        # float32 rows of moderate scale: dot products in float32 (~1e-7, far below the sampling
        # error; twice as fast), except pairs so close that the float32 error bound would exceed
        # 1/1024 of their squared distance (rows of a nearly collapsed model: 2 − 2cos came out
        # 1e-7 for 4e-12); those, and anything else (float16, whose products overflow at |x| ~ 11
        # for D = 512, extreme scales, float64), from the difference of the float64 unit rows
        fast = X.dtype == np.float32 and shift == 0 and bool(np.all(norms < 2.0 ** 40)) and bool(
            np.all(norms > 2.0 ** -30))
        close = 1024 * 4 * (X.shape[1] + 8) * float(np.finfo(np.float32).eps)

        for s in range(0, max_pairs, chunk):
            if max_pairs <= SAMPLE_DRAW:
                ii, jj = i[s:s + chunk], j[s:s + chunk]
            else:
                ii, jj = draw(min(chunk, max_pairs - s))
            if fast:
                cos = np.einsum("ij,ij->i", X[ii], X[jj]).astype(np.float64) / (norms[ii] * norms[jj])
                d2 = np.clip(2.0 - 2.0 * cos, 0.0, None)
                near = np.flatnonzero(d2 < close)
                if near.size:
                    d2[near] = d2_exact(ii[near], jj[near])
            else:
                d2 = d2_exact(ii, jj)
            state = _logmeanexp_update(state, -t * d2)
        exact, npairs = False, max_pairs
    return _logmeanexp(state), npairs, exact


def _check_au_args(t, max_pairs, seed):
    check_number(t, "t", min=0, min_inclusive=False)
    check_int(max_pairs, "max_pairs")
    check_int(seed, "seed", min=0)  # also where every pair is used and the seed is not read


def alignment_uniformity(X, y, *, t: float = 2, max_pairs: int = DEFAULT_MAX_PAIRS, seed: int = 0) -> dict:
    """Alignment and uniformity of Wang & Isola (ICML 2020) on L2-normalised rows (docs/methods.md §4).

    With u_i = x_i / ‖x_i‖::

        alignment  = E_{same-class pairs i≠j} ‖u_i − u_j‖²      (exponent 2)
        uniformity = log E_{pairs i≠j} exp(−t ‖u_i − u_j‖²)     (t = 2)

    Source: Wang, Isola, "Understanding Contrastive Representation Learning through Alignment and
    Uniformity on the Hypersphere", ICML 2020; here the positive pairs are all same-class pairs
    (pooled over classes, so larger classes weigh more, as a uniformly drawn positive pair would).
    The alignment is exact from class sums (Σ_{i≠j∈c}‖u_i − u_j‖² = 2n_c Σ_i ‖u_i − ū_c‖²). The
    uniformity is exact over all N(N−1)/2 pairs when that is ≤ ``max_pairs`` (blocked, no N×N
    matrix), otherwise estimated from ``max_pairs`` independent uniformly drawn pairs i ≠ j
    (``numpy.random.default_rng(seed)``; reproducible). Lower is better for both.

    Parameters
    ----------
    X : array [N, D]
    y : array [N] of labels
    t : float
        Temperature of the Gaussian potential (default 2).
    max_pairs : int
        Pair budget of the uniformity (default 200,000).
    seed : int
        Seed of the pair sample.

    Returns
    -------
    dict with ``alignment``, ``uniformity``, ``uniformity_pairs`` (pairs used) and
    ``uniformity_exact`` (bool).
    """
    _check_au_args(t, max_pairs, seed)
    X = check_matrix(X, min_rows=2, check_finite=False)  # _accumulate checks every row
    classes, inv, counts = _encode(y, X.shape[0])
    shift = pow2_shift(X)
    sums = _accumulate(X, inv, classes.size, with_gram=False, need_raw_spread=False, shift=shift)
    unif, npairs, exact = _uniformity(X, sums["norms"], float(t), int(max_pairs), seed, shift=shift)
    return {
        "alignment": _alignment_from_sums(sums, counts),
        "uniformity": unif,
        "uniformity_pairs": npairs,
        "uniformity_exact": exact,
    }


# ----------------------------------------------------------------------------- report
REPORT_KEYS = (
    "n", "dim", "n_classes", "n_singleton", "rho", "rho_all", "pi_intra", "pi_inter", "pi_ratio",
    "effective_rank", "alpha", "alignment", "uniformity",
)


def geometry_report(X, y, *, exclude_top: int = 1, n_components: int | None = None,
                    metric: str = "cosine", t: float = 2, max_pairs: int = DEFAULT_MAX_PAIRS,
                    seed: int = 0, k_min: int = 1, k_max: int | None = None,
                    keep_spectrum: bool = False, rows: str = "rows", paths: Sequence[str] | None = None) -> dict:
    """Every scalar geometry measure of X in one pass (docs/methods.md §2, §3, §4).

    One blocked float64 pass accumulates XᵀX, the column sums and the per-class sums; from them:

    - ``rho``: spectral decay ρ with ``exclude_top`` (default 1: Roth's footnote / ``rho_spectrum@2``),
      ``rho_all``: ρ with nothing excluded (``rho_spectrum@1``) — :func:`~embedscope.metrics.spectral.spectral_decay`;
    - ``pi_intra``, ``pi_inter``, ``pi_ratio``, ``n_singleton`` — :func:`class_distances` (Roth §5);
    - ``effective_rank`` — RankMe (Garrido et al. 2023), ε = 1e-7;
    - ``alpha`` — α-ReQ (Agrawal et al. 2022), index range ``k_min`` … ``k_max``;
    - ``alignment``, ``uniformity`` — Wang & Isola (2020), t, ``max_pairs``, ``seed``.

    Each value equals the one of the stand-alone function with the same parameters to rounding: ~1e-9
    relative, up to ~1e-8 for α when the rows' mean is 10³ times their spread (the Gram route's
    covariance XᵀX − n·μμᵀ cancels the mean; when the Gram matrix is too ill-conditioned for exact singular
    values the SVD route is taken, as there; docs/geometry.md).

    Parameters
    ----------
    X : array [N, D]
        Embeddings as the network outputs them (Roth: the training set).
    y : array [N]
        Class labels.
    exclude_top, n_components : see :func:`~embedscope.metrics.spectral.spectral_decay`.
    metric : see :func:`class_distances`.
    t, max_pairs, seed : see :func:`alignment_uniformity`.
    k_min, k_max : see :func:`~embedscope.metrics.spectral.alpha_req`.
    keep_spectrum : bool
        Also return the singular values (key ``singular_values``) and the covariance
        eigenvalues (``covariance_eigenvalues``), so a caller need not recompute them.
    rows, paths : what the reason for rows of all zeros calls the rows (default ``"rows"``; e.g.
        ``"train rows"``) and, one per row, the paths that name the first such row there
        (:func:`zero_rows_reason`); nothing else reads them.

    Returns
    -------
    dict with the keys of ``REPORT_KEYS`` plus ``uniformity_pairs``, ``uniformity_exact``,
    ``undefined``: measure key -> why its value is NaN (empty when every value is defined), and
    ``infinite``: measure key -> why its value is inf (``rho`` / ``rho_all`` when a singular value
    considered is 0; ``pi_ratio`` when π_inter = 0 < π_intra).

    A measure the data leave undefined is NaN and named in ``undefined``, not an error, so the others
    are still reported: every class a single sample (an SOP-like query split) leaves ``pi_intra``,
    ``pi_ratio`` and ``alignment`` undefined; one class only ``pi_inter`` and ``pi_ratio``; with
    the cosine, a class whose mean is the zero vector ``pi_inter`` and ``pi_ratio``; a collapsed model
    ``rho``, ``alpha`` and ``pi_ratio`` (0/0); N = 2 rows ``alpha``; rows of all zeros among
    others (no direction, no unit row) ``alignment``, ``uniformity`` (``uniformity_pairs`` 0) and,
    with the cosine, ``pi_intra``, ``pi_inter``, ``pi_ratio``, the reason counting them and naming
    the first, while ρ, RankMe and α-ReQ take every row as it is (docs/methods.md §2, §4) and the
    squared-Euclidean π are defined. Input that no measure can use (fewer than 2 rows, a NaN/inf
    row, every row all zeros) and bad parameters stay one-line errors.
    """
    keep_spectrum = check_bool(keep_spectrum, "keep_spectrum")
    if not isinstance(rows, str):
        raise EmbedscopeError(f"rows must be a text (what the rows are called, e.g. 'train rows'), got "
                              f"{type(rows).__name__}")
    if metric not in ("cosine", "sqeuclidean"):
        raise EmbedscopeError(f"metric must be one of cosine, sqeuclidean, got '{metric}'")
    _check_au_args(t, max_pairs, seed)
    X = check_matrix(X, min_rows=2, check_finite=False)  # _accumulate checks every row
    n, d = X.shape
    if paths is not None and (isinstance(paths, (str, bytes)) or np.ndim(paths) != 1 or len(paths) != n):
        raise EmbedscopeError(f"paths must hold one path per row ({n}), got "
                              f"{type(paths).__name__} of shape {np.shape(paths)}")
    classes, inv, counts = _encode(y, n)
    use_gram = n >= d
    shift = pow2_shift(X)  # every value below is of 2^-shift·X; only the returned spectra are scaled back
    sums = _accumulate(X, inv, classes.size, with_gram=use_gram, need_raw_spread=metric == "sqeuclidean",
                       shift=shift, allow_zero_rows=True)
    zero = sums["zero_rows"]
    if zero.size == n:  # no row with a direction, no spectrum: no measure to report
        raise EmbedscopeError(f"every row of X is all zeros ({n} rows): no geometry measure is defined")
    # rows of all zeros (no unit vector): the measures of unit rows are undefined, for this reason
    zero_why = zero_rows_reason(zero, n, rows=rows, paths=paths) if zero.size else None
    cosine_keys = ("pi_intra", "pi_inter", "pi_ratio", "alignment", "uniformity") if metric == "cosine" \
        else ("alignment", "uniformity")

    # uncentred singular values (ρ, RankMe)
    s = None
    if use_gram:
        s_g, ok = _sv_from_gram(sums["G"])
        s = s_g if ok else None
    if s is None:
        s = _svd_values(X, shift)
    # covariance eigenvalues (α-ReQ)
    lam, lam_shift = None, shift  # (lam: the eigenvalues of 2^-lam_shift·X's covariance)
    if use_gram:
        mean = sums["colsum"] / n
        cov = (sums["G"] - n * np.outer(mean, mean)) / (n - 1)
        ev = np.linalg.eigvalsh(cov)[::-1][: min(n - 1, d)]
        scale = max(ev[0], n / (n - 1) * float(mean @ mean))
        if ev[0] > 0 and ev[-1] >= GRAM_RCOND * scale:
            lam = ev
    if lam is None:
        lam, lam_shift = _scaled_covariance_eigenvalues(X, True)

    if zero_why and metric == "cosine":  # (the unit sums are meaningless: no π of them)
        pis = {"pi_intra": float("nan"), "pi_inter": float("nan"), "pi_ratio": float("nan"),
               "n_classes": int(classes.size), "n_singleton": int(np.count_nonzero(counts < 2)),
               "undefined": {}, "infinite": {}}
    else:
        pis = _pi_from_sums(sums, counts, metric, shift, strict=False, classes=classes)
    undefined = dict(pis["undefined"])
    if zero_why:
        unif, npairs, exact = float("nan"), 0, False
    else:
        unif, npairs, exact = _uniformity(X, sums["norms"], float(t), int(max_pairs), seed, shift=shift)
    rho_all = _kl_decay(s, 0, "uniform||s", n_components)
    try:
        rho = _kl_decay(s, exclude_top, "uniform||s", n_components)
    except UndefinedMeasure:  # D = 1 (or n_components = 1) with the top value left out: none left
        m = s.size if n_components is None else n_components
        if m > 1:  # an exclude_top beyond the values there are: a setting to change, not the data's limit
            raise
        rho = float("nan")
        where = f"N = {n}, D = {d}" if n_components is None else f"n_components = {m}"
        undefined["rho"] = (f"{m} singular value{'' if m == 1 else 's'} ({where}): none left after leaving "
                            f"out the top {exclude_top}")
    for key, v, top in (("rho", rho, exclude_top), ("rho_all", rho_all, 0)):
        if np.isnan(v) and key not in undefined:  # every value considered is 0: p = 0/0
            undefined[key] = (f"the singular values after the top {top} are all 0: X of rank <= {top}, "
                              "a collapsed model" if top else "every singular value is 0")
    infinite = dict(pis["infinite"])
    for key, v, top in (("rho", rho, exclude_top), ("rho_all", rho_all, 0)):
        if np.isinf(v):  # some value considered is 0 (X of lower rank): KL(U||s) has a log(1/0)
            infinite[key] = ("a singular value " + (f"after the top {top} " if top else "")
                             + "is 0, X of lower rank than the values considered: KL(U||s) has a log(1/0)")
    alpha = _alpha_fit(lam, k_min, k_max, 1e-12)
    if np.isnan(alpha):
        undefined["alpha"] = ("a single covariance eigenvalue, N = 2 rows or D = 1: no line to fit" if lam.size < 2
                              else "fewer than two directions of variance, rows on one point or line: no line to fit")
    if zero_why:
        alignment = float("nan")
        undefined.update(dict.fromkeys(cosine_keys, zero_why))
    elif np.any(counts >= 2):
        alignment = _alignment_from_sums(sums, counts)
    else:
        alignment = float("nan")
        undefined["alignment"] = LONE_CLASSES
    out = {
        "n": int(n),
        "dim": int(d),
        "n_classes": pis["n_classes"],
        "n_singleton": pis["n_singleton"],
        "rho": rho,
        "rho_all": rho_all,
        "pi_intra": pis["pi_intra"],
        "pi_inter": pis["pi_inter"],
        "pi_ratio": pis["pi_ratio"],
        "effective_rank": _rankme(s, RANKME_EPS),
        "alpha": alpha,
        "alignment": alignment,
        "uniformity": unif,
        "uniformity_pairs": npairs,
        "uniformity_exact": exact,
        # measure -> why it is NaN, in the order of REPORT_KEYS
        "undefined": {k: undefined[k] for k in REPORT_KEYS if k in undefined},
        # measure -> why it is inf (rho, rho_all with a zero singular value; pi_ratio when pi_inter = 0 < pi_intra)
        "infinite": {k: infinite[k] for k in REPORT_KEYS if k in infinite},
    }
    if keep_spectrum:
        with np.errstate(over="ignore", under="ignore"):
            out["singular_values"] = np.ldexp(s, shift) if shift else s
            out["covariance_eigenvalues"] = np.ldexp(lam, 2 * lam_shift) if lam_shift else lam
    return out
