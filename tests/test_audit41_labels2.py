"""Forty-first audit, second reading of the label commits (8d73345, bf13582, e7fc7ac).

1. Dates of two sets in different units: compared in numpy's common unit, to which a cast silently wraps a
   date beyond its range (datetime64[D] 3000-01-01 as [ns] is 1830-11-23T00:50:52.580896768) or floors one
   it cannot hold (a month as weeks): such a date matched another instant of the other set.
2. pandas' Timestamps (Timedeltas) with nanoseconds beside datetime64[ns] labels: refused as "of different
   kinds (dates vs Timestamp)" though they are the same instants.
3. from_arrays: uint64 or float labels beyond int64 (2^63, 1e19) named by check_labels' codes: the label 1
   was the class "0", 2^63 the class "1" (docs/store.md: an id beyond int64 keeps its exact name).
"""

import numpy as np
import pandas as pd
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.metrics.search.ranks import check_sets
from embedscope.store import EmbeddingSet

RNG = np.random.default_rng(412)


def _sets(y, y_ref):
    X, R = RNG.normal(size=(len(y), 3)), RNG.normal(size=(len(y_ref), 3))
    s = check_sets(X, y, R, y_ref)
    return s.y.tolist(), s.y_ref.tolist()


def _matches(y, y_ref) -> set[tuple[int, int]]:
    """The (query, reference) pairs of one class."""
    return {(i, j) for i, a in enumerate(y) for j, b in enumerate(y_ref) if a == b}


# ----------------------------------------------------------------------------- 1. beyond the common unit
def test_a_date_beyond_the_finer_units_range_matches_no_other_instant():
    wrapped = np.datetime64("3000-01-01", "D").astype("datetime64[ns]")  # what numpy's cast makes of it
    assert str(wrapped) == "1830-11-23T00:50:52.580896768"
    days = np.array(["3000-01-01", "2020-01-01", "3000-01-01"], dtype="datetime64[D]")
    ns = np.array(["2020-01-01", str(wrapped), "2020-01-01"], dtype="datetime64[ns]")
    want = {(1, 0), (1, 2)}  # only 2020-01-01 is in both sets (before: 3000-01-01 matched 1830-11-23...)
    y, y_ref = _sets(days, ns)
    assert _matches(y, y_ref) == want
    assert y[0] == y[2]  # the two 3000-01-01 one class
    y_ref2, y2 = _sets(ns, days)  # either set may be the finer one
    assert _matches(y2, y_ref2) == want


def test_a_month_is_not_the_week_it_falls_in():
    months = np.array(["1970-02", "1970-01"], dtype="datetime64[M]")  # 1970-01-01 is a Thursday: a week's start
    weeks = months.astype("datetime64[W]")  # 1970-02-01 (a Sunday) floored to the week of 1970-01-29
    assert str(weeks[0].astype("datetime64[D]")) == "1970-01-29"
    y, y_ref = _sets(months, weeks)
    assert _matches(y, y_ref) == {(1, 1)}  # (before: February matched the week of 29 January too)


# ----------------------------------------------------------------------------- 2. pandas' nanoseconds
def test_timestamps_with_nanoseconds_match_datetime64_ns_labels():
    ns = np.array(["2020-01-01T00:00:00.000000001", "2020-01-02", "2020-01-01"], dtype="datetime64[ns]")
    stamps = pd.Series(ns[::-1]).astype(object).to_numpy()  # pandas' Timestamps, one with its nanosecond
    assert stamps[2].nanosecond == 1
    y, y_ref = _sets(ns, stamps)  # (before: "of different kinds (dates vs Timestamp)")
    assert _matches(y, y_ref) == {(0, 2), (1, 1), (2, 0)}
    y_ref2, y2 = _sets(stamps, ns)
    assert _matches(y2, y_ref2) == {(0, 2), (1, 1), (2, 0)}


def test_timedeltas_with_nanoseconds_match_timedelta64_labels():
    durations = np.array([1, 86_400_000_000_000], dtype="timedelta64[ns]")
    objs = np.array([pd.Timedelta(1, "D"), pd.Timedelta(1, "ns")], dtype=object)
    y, y_ref = _sets(durations, objs)  # (before: "of different kinds (durations vs Timedelta)")
    assert _matches(y, y_ref) == {(0, 1), (1, 0)}


def test_time_zone_aware_timestamps_beside_naive_dates_still_refused():
    days = np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[D]")
    aware = np.array([pd.Timestamp("2020-01-01", tz="UTC")] * 2, dtype=object)
    with pytest.raises(EmbedscopeError, match="different kinds"):
        _sets(days, aware)


# ----------------------------------------------------------------------------- 3. from_arrays: ids beyond int64
@pytest.mark.parametrize("dtype", [np.uint64, np.float64])
def test_from_arrays_names_ids_beyond_int64_of_a_numeric_array_by_their_value(dtype):
    y = np.array([1, 2 ** 63, 2 ** 64 - 2 ** 11, 1], dtype=dtype)  # (2^64 - 2^11: a float64 too)
    es = EmbeddingSet.from_arrays(np.eye(4), y)
    assert es.labels.tolist() == [0, 1, 2, 0]
    want = [str(v) for v in np.unique(y).tolist()]  # "1", "9223372036854775808", "18446744073709549568"
    if dtype is np.float64:
        want = ["1", str(2.0 ** 63), str(2.0 ** 64 - 2 ** 11)]  # an integral float within int64 named "1"
    assert es.class_names.tolist() == want  # (before: "0", "1", "2")
    # the same ids held as objects are named alike
    assert EmbeddingSet.from_arrays(np.eye(4), y.astype(object)).class_names.tolist() == want
    with pytest.raises(EmbedscopeError, match="integer class labels"):
        EmbeddingSet.from_arrays(np.eye(2), np.array([1.5, 1e19]))


def test_from_arrays_ids_beyond_int64_with_class_names_still_index_them():
    es = EmbeddingSet.from_arrays(np.eye(3), np.array([1, 2 ** 63, 1], dtype=np.uint64), class_names=["a", "b"])
    assert es.labels.tolist() == [0, 1, 0] and es.class_names.tolist() == ["a", "b"]


# ----------------------------------------------------------------------------- 4. Decimal("sNaN")
def test_a_signalling_decimal_nan_is_a_missing_value_not_a_traceback():
    import decimal

    from embedscope.validation import check_labels, first_missing

    snan = decimal.Decimal("sNaN")
    values = np.array(["a", snan, decimal.Decimal("NaN"), None], dtype=object)
    assert first_missing(values) == (1, "Decimal('sNaN')")  # (before: decimal.InvalidOperation out of pandas)
    X = np.eye(3)
    with pytest.raises(EmbedscopeError, match=r"^labels: row 1 is missing \(Decimal\('sNaN'\)\)"):
        EmbeddingSet.from_arrays(X, np.array([1, snan, 2], dtype=object))
    with pytest.raises(EmbedscopeError, match=r"^paths: row 0 is missing"):
        EmbeddingSet.from_arrays(X, [0, 1, 0], paths=np.array([snan, "q", "r"], dtype=object))
    with pytest.raises(EmbedscopeError, match=r"^labels holds a missing label \(Decimal\('sNaN'\)\) at row 2"):
        check_labels(np.array(["a", "b", snan], dtype=object))
    assert first_missing(np.array([decimal.Decimal(1), "x"], dtype=object)) is None


# ----------------------------------------------------------------------------- 5. from_arrays: numbers by value
def _pairs_of(labels) -> set[tuple[int, int]]:
    labels = list(labels)
    return {(i, j) for i in range(len(labels)) for j in range(i + 1, len(labels)) if labels[i] == labels[j]}


def test_from_arrays_takes_booleans_beside_numbers_decimals_and_fractions_by_value():
    import decimal
    import fractions

    cases = [
        [True, 1, 0, False, np.True_, np.int64(0)],  # (before: the classes "True", "1", "0" and "False")
        [decimal.Decimal("1.0"), 1, fractions.Fraction(2), 2.0, decimal.Decimal("2")],  # ("1.0" and "1")
        [decimal.Decimal("1E+19"), 10 ** 19, 1, fractions.Fraction(10 ** 19, 1)],  # ("1E+19" beside 10^19)
    ]
    for y in cases:
        arr = np.empty(len(y), dtype=object)
        arr[:] = y
        X = RNG.normal(size=(len(y), 3))
        es = EmbeddingSet.from_arrays(X, arr)
        want = {(i, j) for i in range(len(y)) for j in range(i + 1, len(y)) if y[i] == y[j]}  # Python's ==
        assert _pairs_of(es.labels) == want
        # as the retrieval measures and check_labels take them
        from embedscope.validation import check_labels

        assert _pairs_of(check_labels(arr)) == want
        s = check_sets(X, arr, X, arr)
        assert _pairs_of(s.y) == want
    es = EmbeddingSet.from_arrays(np.eye(4), np.array([True, 1, 0, False], dtype=object))
    assert es.class_names.tolist() == ["0", "1"]
    es = EmbeddingSet.from_arrays(np.eye(3), np.array([True, 2 ** 63, np.False_], dtype=object))
    assert es.class_names.tolist() == ["0", "1", "9223372036854775808"]  # (not "True" beside ids beyond int64)
    es = EmbeddingSet.from_arrays(np.eye(2), np.array([True, False], dtype=object))
    assert es.class_names.tolist() == ["False", "True"]  # booleans alone keep their names
    with pytest.raises(EmbedscopeError, match="integer class labels"):  # as the float 1.5 is
        EmbeddingSet.from_arrays(np.eye(2), np.array([decimal.Decimal("1.5"), 1], dtype=object))
    with pytest.raises(EmbedscopeError, match="integer class labels"):
        EmbeddingSet.from_arrays(np.eye(2), np.array([fractions.Fraction(1, 2), 1], dtype=object))


# ----------------------------------------------------------------------------- 6. sequences as labels
def _held(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def test_arrays_or_tuples_held_as_labels_are_one_line_not_a_traceback():
    from embedscope.metrics import retrieval_metrics
    from embedscope.validation import check_labels

    arrays = _held(np.array([1, 2]), np.array([3, 4]), np.array([1, 2]))
    X = RNG.normal(size=(3, 3))
    with pytest.raises(EmbedscopeError, match=r"^labels must hold class labels"):  # (before: ValueError, "the
        check_labels(arrays)  # truth value of an array with more than one element is ambiguous")
    with pytest.raises(EmbedscopeError, match=r"^y must hold class labels"):
        retrieval_metrics(X, arrays)
    with pytest.raises(EmbedscopeError, match=r"^labels must hold class labels .*got a ndarray at row 0$"):
        EmbeddingSet.from_arrays(X, arrays)  # (before: ValueError, "setting an array element with a sequence")
    tuples = _held("a", (3,), (1, 2))
    with pytest.raises(EmbedscopeError, match=r"got a tuple at row 1$"):
        EmbeddingSet.from_arrays(X, tuples)
    with pytest.raises(EmbedscopeError, match=r"got a tuple at row 1$"):
        EmbeddingSet.from_arrays(X, tuples, class_names=["a"])


# ----------------------------------------------------------------------------- 7. lists of texts with a gap
@pytest.mark.parametrize("gap", [float("nan"), np.float32("nan"), pd.NA, pd.NaT], ids=["nan", "float32 nan", "NA", "NaT"])
def test_a_list_of_texts_with_a_gap_is_refused_not_the_class_nan(gap):
    """numpy reads ["a", nan] as the texts "a" and "nan" (df["label"].tolist() of a column with a gap): the
    gap was a class "nan" (or "<NA>", "NaT") in from_arrays, check_labels and the retrieval measures."""
    from embedscope.metrics import retrieval_metrics
    from embedscope.metrics.properties import property_precision
    from embedscope.validation import check_labels

    X = RNG.normal(size=(3, 3))
    with pytest.raises(EmbedscopeError, match=r"^labels: row 1 is missing"):
        EmbeddingSet.from_arrays(X, ["a", gap, "b"])
    with pytest.raises(EmbedscopeError, match=r"^paths: row 2 is missing"):
        EmbeddingSet.from_arrays(X, ["a", "b", "a"], paths=["p", "q", gap])
    with pytest.raises(EmbedscopeError, match=r"^class_names: row 0 is missing"):
        EmbeddingSet.from_arrays(X, [0, 1, 0], class_names=[gap, "b"])
    with pytest.raises(EmbedscopeError, match=r"^property 'c': row 1 is missing"):
        EmbeddingSet.from_arrays(X, [0, 1, 0], properties={"c": ("p", gap, "q")})
    with pytest.raises(EmbedscopeError, match=r"^labels holds a missing label \(.+\) at row 1"):
        check_labels(["a", gap, "a"])
    with pytest.raises(EmbedscopeError, match=r"^y holds a missing label \(.+\) at row 1"):
        retrieval_metrics(X, ["a", gap, "a"])
    with pytest.raises(EmbedscopeError, match=r"^y_ref holds a missing label \(.+\) at row 2"):
        retrieval_metrics(X, ["a", "b", "a"], X_ref=X, y_ref=("a", "b", gap))
    with pytest.raises(EmbedscopeError, match=r"^property 'c' holds missing values"):
        property_precision(X, {"c": ["p", gap, "p"]})


def test_texts_that_read_nan_are_names():
    from embedscope.validation import check_labels

    es = EmbeddingSet.from_arrays(np.eye(3), ["nan", "<NA>", "nan"])
    assert es.class_names.tolist() == ["<NA>", "nan"] and es.labels.tolist() == [1, 0, 1]
    assert check_labels(["a", "nan", "a", 1.0]).tolist() == [1, 2, 1, 0]  # (a number beside texts: as before)


def test_time_zone_aware_labels_are_named_so_beside_dates():
    days = np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[D]")
    aware = np.array([pd.Timestamp("2020-01-01", tz="UTC")] * 2, dtype=object)
    with pytest.raises(EmbedscopeError, match=r"different kinds \(dates vs dates with a time zone\)"):
        _sets(days, aware)  # (before: "(dates vs Timestamp)", as if Timestamps were no dates)


def test_nested_lists_of_different_lengths_are_one_line_not_a_traceback():
    from embedscope.metrics import retrieval_metrics
    from embedscope.metrics.properties import property_precision
    from embedscope.validation import check_labels

    X = RNG.normal(size=(3, 3))
    ragged = [[1, 2], [3], [1]]  # (before: numpy's ValueError, "... inhomogeneous shape after 1 dimensions ...")
    msg = r"must hold one value per row, could not be read as an array \(nested lists of different lengths\)$"
    with pytest.raises(EmbedscopeError, match=r"^labels " + msg):
        EmbeddingSet.from_arrays(X, ragged)
    with pytest.raises(EmbedscopeError, match=r"^paths " + msg):
        EmbeddingSet.from_arrays(X, [1, 2, 1], paths=ragged)
    with pytest.raises(EmbedscopeError, match=r"^property 'c' " + msg):
        EmbeddingSet.from_arrays(X, [1, 2, 1], properties={"c": ragged})
    with pytest.raises(EmbedscopeError, match=r"^labels " + msg):
        check_labels(ragged)
    with pytest.raises(EmbedscopeError, match=r"^y_ref " + msg):
        retrieval_metrics(X, [1, 2, 1], X_ref=X, y_ref=ragged)
    with pytest.raises(EmbedscopeError, match=r"^property 'c' " + msg):
        property_precision(X, {"c": ragged})
    with pytest.raises(EmbedscopeError, match=r"^labels must be 1-D"):  # lists of one length: as before
        EmbeddingSet.from_arrays(X, [[1], [2], [1]])


# ----------------------------------------------------------------------------- 8. from_arrays: numbers' fast path
@pytest.mark.parametrize("y", [
    [2 ** 53 + 1, 2 ** 53, 1.0],  # as float64 one value: where numpy's one array cannot hold them, exact
    [-(2 ** 53) - 1, -(2 ** 53), np.float32(1)],
    [np.uint64(2 ** 63), np.int64(-1), np.uint64(2 ** 63), 1.0],  # numpy: float64
    [np.int64(3), 3.0, np.uint8(3), True, np.float16(1)],
    [2 ** 70, 2 ** 70 + 1, 1],
], ids=["2^53+1", "-2^53-1", "uint64 and int64", "numpy types", "beyond uint64"])
def test_from_arrays_numbers_held_as_objects_compare_exactly(y):
    arr = np.empty(len(y), dtype=object)
    arr[:] = y
    es = EmbeddingSet.from_arrays(np.eye(len(y)), arr)
    want = {(i, j) for i in range(len(y)) for j in range(i + 1, len(y)) if y[i] == y[j]}
    assert _pairs_of(es.labels) == want
    names = [es.class_names[c] for c in es.labels]
    assert all(int(name) == y[i] for i, name in enumerate(names))  # each named by its value, exactly
