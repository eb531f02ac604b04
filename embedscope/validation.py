"""Input checks shared by every measure and analysis: one vocabulary, one-line error messages.

* :func:`check_matrix` -- a 2-D numeric array (numpy, or a torch tensor on any device, any float
  dtype, with ``requires_grad``), finite;
* :func:`check_labels` -- one label per row (integers, integral floats, strings, dates or durations,
  encoded): the one encoder of class labels, the retrieval measures' too (:func:`label_values`,
  :func:`label_codes`);
* :func:`check_int` / :func:`check_number` -- a scalar parameter in range;
* :func:`check_choice` -- one of a fixed set of names;
* :func:`check_rows` -- a boolean mask or row indices into N rows;
* :func:`zero_rows` / :func:`one_point` -- rows without a direction, and a collapsed model (every row
  one point), which several analyses say or refuse in their own words.

Every failure is an :class:`~embedscope.errors.EmbedscopeError` (exit code 1 from the command
line) whose text names the parameter, so a user sees in one line what to change.
"""

from __future__ import annotations

import decimal
import math
import numbers
from typing import Any, Iterable

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.text import quoted


def as_numpy(X: Any) -> Any:
    """A torch tensor (any device or dtype, with or without ``requires_grad``) as a numpy array.

    bfloat16/float16 tensors become float32 (numpy has no bfloat16); anything else is returned
    unchanged, so numpy inputs are never copied here.
    """
    mod = type(X).__module__
    if mod.startswith("torch"):
        import torch

        if isinstance(X, torch.Tensor):
            t = X.detach()
            if t.dtype in (torch.bfloat16, torch.float16):
                t = t.float()
            return t.cpu().numpy()
    return X


def numeric_array(X, name: str, ndim: int, what: str) -> np.ndarray:
    """``X`` as a numpy array of ``ndim`` dimensions holding integers or floats (torch tensors
    accepted, :func:`as_numpy`); else one :class:`EmbedscopeError` line saying it must be ``what``."""
    if np.ma.is_masked(X):  # np.asarray reads the values under the mask as if they were data
        raise EmbedscopeError(f"{name} is a masked array with masked entries: fill them or drop their rows first "
                              "(X.filled(...), or X[~X.mask.any(axis=1)])")
    if type(X).__module__.startswith("scipy.sparse"):  # (np.asarray made a 0-d object array: "got shape ()")
        raise EmbedscopeError(f"{name} is a scipy sparse matrix ({getattr(X, 'shape', '?')}): give a dense array "
                              "(X.toarray())")
    try:
        A = np.asarray(as_numpy(X))
    except Exception as e:  # noqa: BLE001 - ragged lists, exotic objects
        raise EmbedscopeError(f"{name} could not be read as an array ({e.__class__.__name__})") from None
    if A.ndim != ndim:
        raise EmbedscopeError(f"{name} must be {what}, got shape {A.shape}")
    if not (np.issubdtype(A.dtype, np.floating) or np.issubdtype(A.dtype, np.integer)):
        raise EmbedscopeError(f"{name} must be numeric, got dtype {A.dtype}")
    return A


def check_matrix(X, name: str = "X", *, min_rows: int = 1, dtype=None, check_finite: bool = True) -> np.ndarray:
    """Validate a 2-D numeric array (N x D) and return it as numpy.

    ``dtype`` given: the result is a C-contiguous array of that type. ``dtype=None``: floating
    arrays keep their type (no copy), integer arrays become float64. With ``check_finite`` a NaN or
    inf anywhere is an error that counts the bad rows. Torch tensors are accepted (see
    :func:`as_numpy`).
    """
    A = numeric_array(X, name, 2, "a 2-D array (N x D)")
    if A.shape[0] < min_rows or A.shape[1] < 1:
        raise EmbedscopeError(f"{name} needs at least {min_rows} row(s) and 1 column, got shape {A.shape}")
    # min and max are NaN if any value is, ±inf if any is: two passes and no N × D mask; on the
    # given floats (a conversion to a wider float keeps NaN and inf: float32 input is read at half
    # the bytes), else on the converted array (large integers can overflow a narrower float)
    early = check_finite and np.issubdtype(A.dtype, np.floating) and (
        dtype is None or np.dtype(dtype).itemsize >= A.dtype.itemsize)
    if early:
        _check_finite(A, name)
    if dtype is not None:
        with np.errstate(over="ignore"):  # a value beyond a narrower type becomes inf: an error below
            A = np.ascontiguousarray(A, dtype=dtype)
    elif not np.issubdtype(A.dtype, np.floating):
        A = A.astype(np.float64)
    if check_finite and not early:
        _check_finite(A, name)
    return A


def _check_finite(A: np.ndarray, name: str) -> None:
    if A.size and not (np.isfinite(A.min()) and np.isfinite(A.max())):
        rows = np.flatnonzero(~np.all(np.isfinite(A), axis=1))
        raise EmbedscopeError(f"{name}: {rows.size} row(s) contain NaN or inf (first: row {int(rows[0])})")


def missing_entries(values: Any) -> np.ndarray:
    """Which entries of the array ``values`` are missing values, as a boolean array of its shape: NaN of
    any float (or complex) type, NaT (datetime64 and timedelta64), and among objects also None, pandas'
    NA and NaT, and NaN of any type (numpy's float32 and float16 NaN are no Python floats; Decimal's, its
    signalling one too). Integers, booleans and texts hold none. Vectorised: an object array is read by
    pandas' ``isna`` (one C loop)."""
    a = np.asarray(values)
    kind = a.dtype.kind
    if kind in "fc":
        return np.isnan(a)
    if kind in "mM":
        return np.isnat(a)
    if kind == "O":
        import pandas as pd

        try:
            return np.asarray(pd.isna(a), dtype=bool).reshape(a.shape)
        except ArithmeticError:  # a signalling NaN, Decimal("sNaN"): pandas compares it with itself, which raises
            import decimal  # (decimal.InvalidOperation out of from_arrays, check_labels, ...)

            flat = a.reshape(-1)
            snan = np.array([isinstance(v, decimal.Decimal) and v.is_snan() for v in flat.tolist()], dtype=bool)
            rest = flat.copy()
            rest[snan] = None  # missing, as the sNaN is
            return np.asarray(pd.isna(rest), dtype=bool).reshape(a.shape)
    return np.zeros(a.shape, dtype=bool)


def first_missing(values: Any) -> tuple[int, str] | None:
    """The flat index of the first missing entry of ``values`` (:func:`missing_entries`) and the value
    as a message shows it ("nan", "NaT", else its :func:`~embedscope.text.quoted` form: None, <NA>,
    np.float32(nan)); ``None`` where every entry is present."""
    a = np.asarray(values).reshape(-1)
    miss = missing_entries(a)
    if not miss.any():
        return None
    i = int(np.argmax(miss))
    shown = "nan" if a.dtype.kind in "fc" else "NaT" if a.dtype.kind in "mM" else quoted(a[i])
    return i, shown


def as_values(values: Any, name: str = "labels") -> np.ndarray:
    """One value per row (labels, item ids, a property) as a numpy array, as ``np.asarray`` reads it, except
    that a list or tuple of texts beside a missing value, or with a text holding a NUL (which numpy's texts cut
    when it trails), is kept as objects: numpy writes the float NaN
    among texts as the text "nan" (``df["label"].tolist()`` of a column with a gap: the class "nan"), and
    pandas' NA as "<NA>", which no finder of missing values could tell from a name. Nested lists of
    different lengths: one line naming ``name`` (numpy's ValueError, "inhomogeneous shape", was the traceback)."""
    try:
        a = np.asarray(as_numpy(values))
    except ValueError as e:
        what = "nested lists of different lengths" if "inhomogeneous" in str(e) else type(e).__name__
        raise EmbedscopeError(f"{name} must hold one value per row, could not be read as an array ({what})") from None
    if a.dtype.kind in "US" and a.ndim == 1 and isinstance(values, (list, tuple)):
        texts = [t if a.dtype.kind == "U" else t.encode() for t in _MISSING_TEXTS]
        rows = np.flatnonzero(np.logical_or.reduce([a == t for t in texts]))  # (vectorised: texts only looked at)
        if any(not isinstance(values[i], (str, bytes)) for i in rows.tolist()) or first_nul(values) is not None:
            # (and texts holding a NUL: numpy's texts cut a trailing one, "a" and "a\x00" one label, while
            # held as objects they are two)
            held = np.empty(a.shape[0], dtype=object)
            held[:] = list(values)
            return held
    return a


def first_nul(values: Any, *, trailing: bool = False) -> int | None:
    """The first row of ``values`` (a list, a tuple, or an array of texts or objects) whose text (str or bytes)
    holds a NUL (``trailing``: ends in one, what numpy's texts cut: "x" and "x\\x00" one text), or None. All
    texts of one kind are searched joined, in one pass (0.03 s at a million; a value at a time took 0.9 s)."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "U":
        if trailing or not values.size:  # (numpy's texts lost their trailing NULs already)
            return None
        flat = values.reshape(-1)  # (one inside a text is kept: count the code points)
        bad = np.flatnonzero((flat.view(np.uint32).reshape(flat.size, -1) != 0).sum(axis=1) < np.char.str_len(flat))
        return int(bad[0]) if bad.size else None
    if isinstance(values, np.ndarray):
        if values.dtype != object:  # (bytes too, as objects: a list's, before numpy's array cut their NULs)
            return None
        values = values.reshape(-1).tolist()
    elif not isinstance(values, (list, tuple)):
        return None
    for sep, nul in (("", "\x00"), (b"", b"\x00")):
        try:
            if nul not in sep.join(values):
                return None
            break
        except TypeError:  # (not all of this kind)
            continue

    def holds(v) -> bool:
        if not isinstance(v, (str, bytes)):
            return False
        nul = "\x00" if isinstance(v, str) else b"\x00"
        return v.endswith(nul) if trailing else nul in v

    return next((i for i, v in enumerate(values) if holds(v)), None)


_MISSING_TEXTS = ("nan", "NaN", "sNaN", "<NA>", "NaT")  # numpy's texts of NaN (float, Decimal), pandas' NA, NaT


def as_times(a: np.ndarray, kind: str, name: str = "labels") -> np.ndarray | None:
    """Labels ``a`` as a numpy array of ``kind`` ("M": datetime64, "m": timedelta64): as they are if they are
    one; objects all dates (durations) that numpy holds exactly, converted (pandas' Timestamps with their
    nanoseconds; a ``datetime.date`` is its midnight); else ``None`` (another kind, or a date with a time zone).
    A duration without a unit (``np.timedelta64(5)``) beside ones with a unit is an error: numpy read it in
    theirs. The retrieval measures and ``EmbeddingSet.from_arrays`` read date labels by it."""
    if a.dtype.kind == kind:
        return a
    if a.dtype != object or not a.size:
        return None
    import datetime

    typ = (datetime.date, np.datetime64) if kind == "M" else (datetime.timedelta, np.timedelta64)
    exact = "to_datetime64" if kind == "M" else "to_timedelta64"  # (pandas' own: as Python's, numpy dropped the
    vals = a.tolist()  # nanoseconds of a Timestamp, and a [ns] set's labels never matched one that has them)
    if not all(isinstance(v, typ) and getattr(v, "tzinfo", None) is None for v in vals):
        return None
    own = [np.asarray(getattr(v, exact)() if hasattr(v, exact) else v, dtype=f"{kind}8") for v in vals]
    try:
        out = np.array(own, dtype=f"{kind}8")  # (numpy's common unit: a value beyond its range wraps, silently)
    except TypeError:  # durations of months or years beside ones of days or seconds: no common unit (was numpy's
        cal = [np.datetime_data(o.dtype)[0] in ("Y", "M") for o in own]  # TypeError, "incompatible nonlinear
        i, j = cal.index(True), cal.index(False)  # base time units")
        raise EmbedscopeError(f"{name}: {own[i]} at row {i} and {own[j]} at row {j} have no common unit (a month "
                              "or a year has no fixed length): give the labels in one unit") from None
    units = {o.dtype for o in own}
    if len(units) > 1 and any(np.datetime_data(u)[0] == "generic" for u in units):
        # np.timedelta64(5) beside np.timedelta64(1, "D"): numpy read the 5 in days, silently
        i = next(k for k, o in enumerate(own) if np.datetime_data(o.dtype)[0] == "generic")
        j = next(k for k, o in enumerate(own) if np.datetime_data(o.dtype)[0] != "generic")
        raise EmbedscopeError(f"{name}: {vals[i]!r} at row {i} has no unit, beside {own[j]} at row {j} (numpy would "
                              "read it in the other's unit): give every label a unit")
    for unit in units:
        rows = np.flatnonzero([o.dtype == unit for o in own])
        back = out[rows].astype(unit)
        bad = np.flatnonzero(back != np.array([own[i] for i in rows], dtype=unit))
        if bad.size:  # (datetime.date(3000, 1, 1) beside a Timestamp of nanoseconds was 1830-11-23T00:50:52...)
            i = int(rows[bad[0]])
            raise EmbedscopeError(f"{name}: {own[i]} at row {i} lies beyond the range of {out.dtype}, the unit "
                                  "of the others: give the labels in one unit")
    return out


def beyond_int64(a: np.ndarray) -> bool:
    """Whether the labels ``a`` hold a value outside the int64 range: floats (1e19, 2e19: cast to int64,
    every such value becomes -2^63, one class) or uint64 from 2^63 (cast, they wrap to negative values,
    which a separate reference set's own labels may hold): such labels are encoded instead."""
    if not a.size:
        return False
    if np.issubdtype(a.dtype, np.unsignedinteger):
        return int(a.max()) >= 2 ** 63
    return np.issubdtype(a.dtype, np.floating) and float(np.max(np.abs(a))) >= 2.0 ** 63


def joint_codes(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integral labels of two sets (one of them :func:`beyond_int64`) encoded jointly as int64 codes,
    equal values equal codes: compared as Python integers (numpy would compare uint64 with int64, or
    with floats, as float64, where 2^63 and 2^63 + 1 are one value)."""
    both = np.array([int(v) for v in a.tolist()] + [int(v) for v in b.tolist()], dtype=object)
    enc = np.unique(both, return_inverse=True)[1].reshape(-1).astype(np.int64)
    return enc[:len(a)], enc[len(a):]


def decoded(a: np.ndarray) -> np.ndarray:
    """Labels (or names) ``a`` with bytes decoded as UTF-8, what h5py reads from a file (``b"cat"`` is the name
    "cat"; an undecodable byte kept as a lone surrogate, ``surrogateescape``, so distinct bytes stay distinct):
    a bytes array as a str array (each distinct value decoded once), objects holding bytes (numpy's too) as
    objects holding str. Other arrays as they are."""
    if a.dtype.kind == "S":
        uniq, inv = np.unique(a, return_inverse=True)
        return np.char.decode(uniq, "utf-8", "surrogateescape")[inv.reshape(-1)].reshape(a.shape)
    if a.dtype == object and any(issubclass(t, bytes) for t in set(map(type, a.reshape(-1).tolist()))):
        out = np.empty(a.shape, dtype=object)
        out.reshape(-1)[:] = [v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v
                              for v in a.reshape(-1).tolist()]
        return out
    return a


def label_values(y, n: int | None = None, name: str = "labels") -> np.ndarray:
    """One label per row (``n`` given: exactly ``n``) as a 1-D numpy array of the values they compare by, what
    :func:`check_labels` and the retrieval measures (one set or two) encode: bytes decoded as UTF-8
    (:func:`decoded`); objects all dates or all durations (``pd.Timestamp``, ``datetime.date``,
    ``np.datetime64``; ``pd.Timedelta``, ``datetime.timedelta``, ``np.timedelta64``) as one datetime64 or
    timedelta64 array (:func:`as_times`: one class per instant or exact duration, as
    ``EmbeddingSet.from_arrays`` reads them); a missing label (None, NaN of any float type among objects,
    pandas' NA or NaT, NaT of a datetime64 or timedelta64 array) refused, naming its row (NaN equals nothing,
    itself included: sorted among other values it split a class in two; NaTs were one class of their own);
    numbers held as objects must be integral (as a float array's must be: :func:`label_codes`), and dates
    held as objects all with a time zone or all without (:func:`check_time_zones`). Numbers, booleans and
    texts as they are (a float array's NaN is :func:`label_codes`' to refuse)."""
    a = as_values(y, name)  # (["a", nan] as objects: numpy's texts made the NaN the class "nan")
    if a.ndim != 1 or (n is not None and a.shape[0] != n):
        want = f"1-D with {n} entries (one per row)" if n is not None else "1-D"
        raise EmbedscopeError(f"{name} must be {want}, got shape {a.shape}")
    if a.dtype.kind not in "OmMS":
        return a
    if a.dtype.kind != "S":  # (a bytes array holds no missing value)
        found = first_missing(a)
        if found is not None:
            raise EmbedscopeError(f"{name} holds a missing label ({found[1]}) at row {found[0]}: "
                                  "every row needs its class")
    if a.dtype != object:
        return decoded(a)
    vals = a.tolist()  # (one pass over the values: a million objects cost as much as the encoding)
    types = set(map(type, vals))
    if any(issubclass(t, bytes) for t in types):
        return decoded(a)
    import datetime

    for kind, typ in (("M", (datetime.date, np.datetime64)), ("m", (datetime.timedelta, np.timedelta64))):
        if all(issubclass(t, typ) for t in types):  # (pd.Timestamp and datetime.date of one day compared unequal,
            times = as_times(a, kind, name)  # or could not be ordered: "must hold class labels"; durations likewise)
            if times is not None:
                return times
            if kind == "M":
                check_time_zones(vals, name)
    if types and all(issubclass(t, NUMBERS) for t in types) and types != {int}:
        # numbers held as objects (a pandas object column) are integers, as a float array's must be (1.5,
        # inf or Decimal("1.5") were classes here, while the same floats as an array, and from_arrays,
        # refuse them); compared exactly, as Python numbers (2^63 beside 2^63 + 1 two classes)
        bad = next((i for i, v in enumerate(vals) if type(v) is not int and not integral(v)), None)
        if bad is not None:
            raise EmbedscopeError(f"{name} must be integer class labels (found non-integral or NaN values; "
                                  f"first: {a[bad]!s} at row {bad})")
    return a


def check_time_zones(dates: list, name: str = "labels") -> None:
    """Dates (``datetime.date``, ``pd.Timestamp``, ``np.datetime64``) all with a time zone or all without
    one; else one line naming one of each and their rows (a date without a zone is no instant: it equals no
    date with one, and pandas cannot order the two, "must hold class labels" in check_labels and the retrieval
    measures, while from_arrays made each its own class by its text)."""
    aware = [getattr(v, "tzinfo", None) is not None for v in dates]
    if any(aware) and not all(aware):
        i, j = aware.index(False), aware.index(True)
        raise EmbedscopeError(f"{name} mix dates without and with a time zone ({dates[i]} at row {i}, {dates[j]} "
                              f"at row {j}): give every date a time zone, or none")


#: the types of numbers (Python's, numpy's, Decimal, Fraction; booleans with them) labels held as objects may be
NUMBERS = (int, float, np.integer, np.floating, np.bool_, decimal.Decimal, numbers.Rational)


def integral(v) -> bool:
    """Whether the number ``v`` (a Python int, float, Decimal or Fraction, or numpy's) is a finite integer."""
    if isinstance(v, (int, np.integer, np.bool_)):  # (numpy's bool has no round: a TypeError)
        return True
    if isinstance(v, decimal.Decimal):  # (as a float, Decimal("1e400") was infinite)
        return v.is_finite() and v == v.to_integral_value()
    if isinstance(v, numbers.Rational):
        return v.denominator == 1
    return math.isfinite(v) and v == round(v)


def label_codes(a: np.ndarray, name: str = "labels") -> np.ndarray:
    """The labels ``a`` (as :func:`label_values` returns them) as int64, one class per distinct value:
    integers (and booleans, as 0 and 1) as they are; floats must be finite and integral, and are their
    integer (those beyond the int64 range, as 1e19, are encoded, as is uint64 from 2^63); texts, objects,
    dates and durations are encoded as their index among the sorted distinct values."""
    return _codes(a, name)[0]


def _codes(a: np.ndarray, name: str) -> tuple[np.ndarray, bool]:
    """:func:`label_codes` and whether they are codes 0..C-1 already (encoded here)."""
    kind = a.dtype.kind
    if kind == "b":
        return a.astype(np.int64), False
    if kind in "iu" and not beyond_int64(a):  # (not "m": durations are numpy integers, a NaT -2^63 among them)
        return a.astype(np.int64, copy=False), False
    if kind == "f":
        if not np.all(np.isfinite(a)) or np.any(a != np.round(a)):
            bad = ~np.isfinite(a) | (np.nan_to_num(a) != np.round(np.nan_to_num(a)))
            i = int(np.argmax(bad))  # (the row: a pandas Int64 column's NA reads as NaN here)
            raise EmbedscopeError(f"{name} must be integer class labels (found non-integral or NaN values; "
                                  f"first: {a[i]!s} at row {i})")
        if not beyond_int64(a):
            return a.astype(np.int64), False
    # texts, objects, dates, durations, or integral numbers beyond int64 (cast, every such float becomes
    # -2^63, one class): encoded, equal values one code
    try:
        return np.unique(a, return_inverse=True)[1].reshape(-1).astype(np.int64), True
    except (TypeError, ValueError):  # (arrays held as objects: "the truth value of an array ... is ambiguous")
        raise EmbedscopeError(f"{name} must hold class labels (integers or strings)") from None


def check_labels(y, n: int | None = None, name: str = "labels", *, encode: bool = False,
                 min_classes: int = 1) -> np.ndarray:
    """One label per row -> int64 array.

    Integers pass as they are (booleans as 0 and 1); floats must be finite and integral (those beyond the
    int64 range, as 1e19, are encoded as strings are); strings (bytes decoded as UTF-8), dates, durations
    (held as objects too: one class per instant or duration) or other sortable hashables are encoded as
    their index in the sorted unique values (:func:`label_values`, :func:`label_codes`: what the retrieval
    measures read). ``encode=True`` always returns codes 0..C-1 (sorted unique order). ``n`` given: the
    length must be ``n``. ``min_classes``: at least that many distinct labels.

    >>> check_labels([3, 3, 7]).tolist()
    [3, 3, 7]
    >>> check_labels(["b", "a", "b"]).tolist()
    [1, 0, 1]
    """
    out, coded = _codes(label_values(y, n, name), name)
    if encode and not coded:
        out = np.unique(out, return_inverse=True)[1].reshape(-1).astype(np.int64)
    if min_classes > 1 and len(np.unique(out)) < min_classes:
        raise EmbedscopeError(f"{name} must hold at least {min_classes} classes, got {len(np.unique(out))}")
    return out


def check_int(value: Any, name: str, *, min: int | None = 1, max: int | None = None,
              allow_none: bool = False) -> int | None:
    """An integer parameter in [min, max] (``bool`` is not an integer here).

    >>> check_int(3, "k")
    3
    """
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        if isinstance(value, (float, np.floating)) and math.isfinite(value) and value == int(value):
            value = int(value)
        else:
            raise EmbedscopeError(f"{name} must be an integer, got {quoted(value)}")
    value = int(value)
    if min is not None and value < min:
        what = "a positive integer" if min == 1 else f"an integer >= {min}"
        raise EmbedscopeError(f"{name} must be {what}, got {value}")
    if max is not None and value > max:
        raise EmbedscopeError(f"{name} must be at most {max}, got {value}")
    return value


def check_number(value: Any, name: str, *, min: float | None = None, max: float | None = None,
                 min_inclusive: bool = True, max_inclusive: bool = True, allow_none: bool = False) -> float | None:
    """A finite real parameter in range (``min_inclusive=False``: strictly above ``min``; ``max_inclusive=False``:
    strictly below ``max``)."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)):
        raise EmbedscopeError(f"{name} must be a number, got {quoted(value)}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise EmbedscopeError(f"{name} must be a number, got {quoted(value)}") from None
    if not math.isfinite(v):
        raise EmbedscopeError(f"{name} must be a finite number, got {quoted(value)}")
    if min is not None and (v < min or (v == min and not min_inclusive)):
        rel = ">=" if min_inclusive else ">"
        raise EmbedscopeError(f"{name} must be {rel} {min:g}, got {v:g}")
    if max is not None and (v > max or (v == max and not max_inclusive)):
        rel = "<=" if max_inclusive else "<"
        raise EmbedscopeError(f"{name} must be {rel} {max:g}, got {v:g}")
    return v


def check_rows(rows: Any, n: int) -> np.ndarray:
    """A boolean mask of ``n`` entries or integer row indices in [-n, n) (one index: a row) as a 1-D
    array that indexes ``n`` rows; anything else is one :class:`EmbedscopeError` line.

    >>> check_rows([0, -1], 3).tolist(), check_rows([True, False, True], 3).tolist()
    ([0, -1], [True, False, True])
    """
    try:
        idx = np.atleast_1d(np.asarray(as_numpy(rows)))
    except Exception as e:  # noqa: BLE001 - ragged lists, exotic objects
        raise EmbedscopeError(f"the rows to select could not be read as an array ({e.__class__.__name__})") from None
    if idx.ndim != 1:
        raise EmbedscopeError(f"select needs a 1-D boolean mask or row indices, got shape {idx.shape}")
    if idx.dtype == np.bool_:
        if idx.shape[0] != n:
            raise EmbedscopeError(f"the boolean mask has {idx.shape[0]} entries for a set of {n} rows")
        return idx
    if idx.size == 0:
        return idx.astype(np.int64)  # [] reads as float
    if not np.issubdtype(idx.dtype, np.integer):
        raise EmbedscopeError(f"select needs a boolean mask or integer row indices, got {idx.dtype} values")
    if n > 2 and idx.shape[0] == n and idx.min() >= 0 and idx.max() <= 1:
        # one 0/1 integer per row is a mask that lost its dtype ((labels == c).astype(int), a 0/1 column
        # read from a table): read as indices it would repeat rows 0 and 1 n times, silently
        raise EmbedscopeError(f"select got {n} integers of 0 and 1 for a set of {n} rows: a mask stored as "
                              "integers? Give it as booleans (mask.astype(bool)), or the rows' indices "
                              "(np.flatnonzero(mask))")
    out = (idx < -n) | (idx >= n)
    if out.any():
        raise EmbedscopeError(f"row index {int(idx[out][0])} is out of range for a set of {n} rows")
    return idx


def check_choice(value: Any, name: str, choices: Iterable[str]) -> str:
    """One of ``choices`` (exact match).

    >>> check_choice("cosine", "metric", ("cosine", "euclidean"))
    'cosine'
    """
    choices = tuple(choices)
    if value not in choices:
        raise EmbedscopeError(f"{name} must be one of {', '.join(map(str, choices))}, got {quoted(value)}")
    return value


def check_bool(value: Any, name: str) -> bool:
    """``value`` as a bool: True, False (numpy's too) or the integers 1 and 0; anything else, a string
    such as ``"no"`` above all (truthy: it would switch the option on), is a one-line error.

    >>> check_bool(np.True_, "center")
    True
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and int(value) in (0, 1):
        return bool(value)
    raise EmbedscopeError(f"{name} must be True or False, got {quoted(value)}")


def zero_rows(X) -> np.ndarray:
    """Indices of the rows of the 2-D ``X`` that are all zeros (no direction: their cosine is undefined)."""
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(~np.any(X != 0, axis=1))


def one_point(X, metric: str | None = None) -> bool:
    """Whether the 2-D ``X`` has two or more rows, all the same point exactly (a collapsed model); with
    ``metric="cosine"`` the same direction (the rows L2-normalised first; rows must not be all zero)."""
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] < 2:
        return False
    if metric == "cosine":
        from embedscope.metrics.scale import unit_rows  # (rows of extreme scale normalised exactly)

        X = unit_rows(X.astype(np.float64))[0]
    return not np.any(X != X[:1])


def one_direction_within_rounding(X) -> bool:
    """Whether the 2-D ``X`` (two or more rows, none all zero) has every row's direction within the
    rounding of its values of one direction, but not all exactly one (:func:`one_point` with the
    cosine): rows that are positive multiples of one vector stored as float32 (an unnormalised model
    collapsed to one ray) differ in direction by ~1e-8, so cosine ranks among them follow rounding.
    Each computed unit row is within γ = 2u + (D + 4)·eps of the true direction (u the unit roundoff of
    X's dtype; the float64 normalisation's error), so two such rows lie within 2γ of each other."""
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] < 2 or not np.issubdtype(X.dtype, np.number):
        return False
    dt = X.dtype if np.issubdtype(X.dtype, np.floating) else np.dtype(np.float64)
    gamma = float(np.finfo(dt).eps) + (X.shape[1] + 4) * float(np.finfo(np.float64).eps)
    U = X.astype(np.float64)
    if not np.all(np.isfinite(U)):
        return False
    from embedscope.metrics.scale import unit_rows  # (rows of extreme scale normalised exactly)

    U, zero = unit_rows(U)
    if zero.any():
        return False
    if not np.any(U != U[:1]):
        return False  # exactly one direction: one_point's case
    return bool(np.max(np.linalg.norm(U - U[:1], axis=1)) <= 2 * gamma)
