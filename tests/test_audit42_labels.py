"""Forty-second audit: class labels, one encoder, and durations.

1. ``validation.check_labels`` and the retrieval measures' ``ranks._labels`` / ``_label_values`` encoded
   labels along near-twin paths: bytes beside texts (``b"cat"`` and ``"cat"``) one class in the retrieval
   measures, refused by check_labels; booleans 0/1 in one and codes in the other; dates held as objects
   (a Timestamp beside a ``datetime.date``) refused by both though ``from_arrays`` reads them; a NaT among
   timedelta64 labels a class (-2^63) in both (a timedelta64 array is a numpy integer); the float message
   named no row in the retrieval measures. Now one encoder (``validation.label_values`` / ``label_codes``)
   serves both.
2. ``EmbeddingSet.from_arrays``: durations held as objects (``pd.Timedelta(days=1)`` beside
   ``np.timedelta64(1, "D")`` or ``datetime.timedelta(days=1)``) were classes by their texts ("1 days
   00:00:00", "1 days", "1 day, 0:00:00"); np.timedelta64 objects were numbers (1 day and 24 hours the
   classes "1" and "24"). Now one timedelta64 array: a class per exact duration, named canonically
   ("1 days" whatever the unit: a timedelta64[s] day was "86400 seconds").
3. Months beside days (no common unit): numpy's TypeError was the traceback, in every reader of labels.
   from_arrays: bytes labels beyond ASCII (what h5py reads) refused ("got a bytes_ at row 0").
"""

import datetime

import numpy as np
import pandas as pd
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.metrics import retrieval_metrics
from embedscope.metrics.search.ranks import _labels, check_sets
from embedscope.store import EmbeddingSet
from embedscope.validation import check_labels

RNG = np.random.default_rng(42)


def _held(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def _pairs_of(labels) -> set[tuple[int, int]]:
    labels = list(labels)
    return {(i, j) for i in range(len(labels)) for j in range(i + 1, len(labels)) if labels[i] == labels[j]}


def _outcome(f):
    try:
        return f().tolist()
    except EmbedscopeError as e:
        return str(e)


# ----------------------------------------------------------------------------- 1. one encoder
ONE_ENCODER_CASES = {
    "ints": np.array([3, 3, 7]),
    "integral floats": np.array([1.0, 5.0, 5.0]),
    "floats beyond int64": np.array([1e19, 2e19, 1e19]),
    "uint64 beyond int64": np.array([2 ** 63, 1, 2 ** 63], dtype=np.uint64),
    "non-integral floats": np.array([1.0, 2.5, 1.0]),
    "float NaN": np.array([1.0, np.nan, 1.0]),
    "booleans": np.array([True, True, True]),
    "texts": np.array(["b", "a", "b"]),
    "bytes": np.array([b"caf\xc3\xa9", b"x", b"\xff"]),
    "bytes beside texts": _held("cat", b"cat", "dog"),
    "numpy bytes beside texts": _held("cat", np.bytes_(b"cat"), "dog"),
    "non-ASCII bytes beside texts": _held("café", "café".encode(), "x"),
    "None": _held("a", None, "a"),
    "dates as objects": _held(pd.Timestamp("2020-01-01"), datetime.date(2020, 1, 1), np.datetime64("2020-01-02")),
    "durations as objects": _held(pd.Timedelta(days=1), np.timedelta64(1, "D"), datetime.timedelta(hours=1)),
    "timedelta64 NaT": np.array([1, "NaT", 1], dtype="timedelta64[s]"),
    "datetime64 NaT": np.array(["2020-01-01", "NaT", "2020-01-01"], dtype="datetime64[D]"),
    "arrays as labels": _held(np.array([1, 2]), np.array([3, 4]), np.array([1, 2])),
}


@pytest.mark.parametrize("y", ONE_ENCODER_CASES.values(), ids=ONE_ENCODER_CASES.keys())
def test_check_labels_and_the_retrieval_measures_read_labels_alike(y):
    """The same labels, the same codes or the same one-line error (named by the caller's parameter)."""
    got = _outcome(lambda: _labels(y, 3, "labels"))
    assert got == _outcome(lambda: check_labels(y, 3, "labels"))
    assert got == _outcome(lambda: check_labels(y, 3))


def test_bytes_beside_texts_are_one_class_for_check_labels():
    assert check_labels(_held("cat", b"cat", "dog")).tolist() == [0, 0, 1]  # (before: "must hold class labels")
    assert check_labels(_held("café", "café".encode("utf-8"), "x")).tolist() == [0, 0, 1]
    from embedscope.metrics.neighbours import nearest_same_different

    X = RNG.normal(size=(4, 3))
    got = nearest_same_different(X, _held("cat", b"cat", "dog", b"dog"))
    want = nearest_same_different(X, np.array(["cat", "cat", "dog", "dog"]))
    assert np.array_equal(np.asarray(got[0]), np.asarray(want[0]), equal_nan=True)


def test_numpy_bytes_held_as_objects_are_decoded_in_two_sets():
    X = RNG.normal(size=(4, 3))
    y, y_ref = _held(np.bytes_(b"cat"), "dog", "cat", "dog"), np.array(["dog", "cat", "dog", "cat"])
    s = check_sets(X, y, X, y_ref)  # (before: np.bytes_ was no bytes: "cannot be ordered")
    assert {(i, j) for i in range(4) for j in range(4) if s.y[i] == s.y_ref[j]} == \
        {(i, j) for i in range(4) for j in range(4) if ["cat", "dog", "cat", "dog"][i] == y_ref[j]}


def test_retrieval_measures_name_the_first_non_integral_label():
    X = RNG.normal(size=(3, 3))
    with pytest.raises(EmbedscopeError, match=r"^y must be integer class labels \(found non-integral or NaN values; "
                                              r"first: 2\.5 at row 1\)$"):
        retrieval_metrics(X, [1.0, 2.5, 1.0])  # (before: "y must be integer class labels", no value, no row)


def test_a_nat_among_durations_is_refused_not_a_class():
    X = RNG.normal(size=(4, 3))
    durations = np.array([1, "NaT", 1, "NaT"], dtype="timedelta64[s]")
    with pytest.raises(EmbedscopeError, match=r"^labels holds a missing label \(NaT\) at row 1"):
        check_labels(durations)  # (before: the NaTs the class -2^63)
    with pytest.raises(EmbedscopeError, match=r"^y holds a missing label \(NaT\) at row 1"):
        retrieval_metrics(X, durations)


def test_dates_held_as_objects_are_classes_by_instant_for_check_labels_and_retrieval():
    X, R = RNG.normal(size=(4, 3)), RNG.normal(size=(4, 3))
    y = _held(pd.Timestamp("2020-01-01"), datetime.date(2020, 1, 1), datetime.datetime(2020, 1, 2),
              np.datetime64("2020-01-02T00:00"))
    assert check_labels(y).tolist() == [0, 0, 1, 1]  # (before: "must hold class labels")
    by_hand = np.array([0, 0, 1, 1])
    got, want = retrieval_metrics(X, y), retrieval_metrics(X, by_hand)
    assert got["R@1"] == want["R@1"] and got["MAP@R"] == want["MAP@R"]
    y_ref = _held(datetime.date(2020, 1, 2), pd.Timestamp("2020-01-01"), np.datetime64("2020-01-01"),
                  datetime.datetime(2020, 1, 2))
    got = retrieval_metrics(X, y, X_ref=R, y_ref=y_ref)  # (before: "cannot be ordered")
    want = retrieval_metrics(X, by_hand, X_ref=R, y_ref=np.array([1, 0, 0, 1]))
    assert got["R@1"] == want["R@1"] and got["MAP@R"] == want["MAP@R"]
    assert _pairs_of(EmbeddingSet.from_arrays(X, y).labels) == _pairs_of(by_hand)


def test_booleans_are_0_and_1_in_the_retrieval_measures_as_in_check_labels():
    y = np.array([True, True, True])
    assert _labels(y, 3, "y").tolist() == check_labels(y).tolist() == [1, 1, 1]  # (before: codes [0, 0, 0])
    X = RNG.normal(size=(6, 3))
    yb = np.array([True, False] * 3)
    got = retrieval_metrics(X, yb, X_ref=X, y_ref=np.array([1, 0] * 3))  # True == 1 across sets, as before
    want = retrieval_metrics(X, np.array([1, 0] * 3), X_ref=X, y_ref=np.array([1, 0] * 3))
    assert got["R@1"] == want["R@1"]


# ----------------------------------------------------------------------------- 2. durations
def test_from_arrays_one_duration_held_three_ways_is_one_class():
    y = _held(pd.Timedelta(days=1), np.timedelta64(1, "D"), datetime.timedelta(days=1), pd.Timedelta(hours=1),
              np.timedelta64(24, "h"))
    es = EmbeddingSet.from_arrays(np.eye(5), y)  # (before: 5 classes, "1 days 00:00:00", "1 days", "1 day, 0:00:00")
    assert es.labels.tolist() == [1, 1, 1, 0, 1]
    assert es.class_names.tolist() == ["1 hours", "1 days"]
    es = EmbeddingSet.from_arrays(np.eye(2), [pd.Timedelta(1, "ns"), np.timedelta64(1, "ns")])
    assert es.class_names.tolist() == ["1 nanoseconds"] and es.labels.tolist() == [0, 0]


def test_numpy_durations_held_as_objects_are_no_numbers():
    y = _held(np.timedelta64(1, "D"), np.timedelta64(24, "h"), np.timedelta64(90, "m"))
    es = EmbeddingSet.from_arrays(np.eye(3), y)  # (before: the numbers 1, 24 and 90: three classes "1", "24", "90")
    assert es.labels.tolist() == [1, 1, 0]
    assert es.class_names.tolist() == ["90 minutes", "1 days"]


def test_a_duration_is_named_alike_in_every_unit():
    names = {unit: EmbeddingSet.from_arrays(np.eye(3), np.array([1, 2, 1], dtype="timedelta64[D]")
                                            .astype(f"timedelta64[{unit}]")).class_names.tolist()
             for unit in ("D", "h", "s", "ms", "ns")}
    assert names == {unit: ["1 days", "2 days"] for unit in names}  # (before [s]: "86400 seconds", [ns]
    # "86400000000000 nanoseconds")
    es = EmbeddingSet.from_arrays(np.eye(3), np.array([90, 3600, 1], dtype="timedelta64[s]"))
    assert es.class_names.tolist() == ["1 seconds", "90 seconds", "1 hours"]
    weeks = EmbeddingSet.from_arrays(np.eye(2), np.array([1, 2], dtype="timedelta64[W]"))
    assert weeks.class_names.tolist() == ["7 days", "14 days"]
    months = EmbeddingSet.from_arrays(np.eye(2), np.array([12, 5], dtype="timedelta64[M]"))
    assert months.class_names.tolist() == ["5 months", "1 years"]


def test_durations_are_looked_up_in_class_names_by_their_canonical_names():
    y = _held(pd.Timedelta(days=1), np.timedelta64(3600, "s"), datetime.timedelta(days=1))
    es = EmbeddingSet.from_arrays(np.eye(3), y, class_names=["1 days", "1 hours"])
    assert es.labels.tolist() == [0, 1, 0]
    es = EmbeddingSet.from_arrays(np.eye(2), np.array([86400, 3600], dtype="timedelta64[s]"),
                                  class_names=["1 hours", "1 days"])  # (before: "86400 seconds" not among them)
    assert es.labels.tolist() == [1, 0]


def test_retrieval_measures_and_from_arrays_take_durations_as_the_same_classes():
    X, R = RNG.normal(size=(5, 3)), RNG.normal(size=(5, 3))
    y = _held(pd.Timedelta(days=1), np.timedelta64(24, "h"), datetime.timedelta(hours=1), np.timedelta64(1, "D"),
              pd.Timedelta(hours=1))
    es = EmbeddingSet.from_arrays(X, y)
    assert check_labels(y).tolist() == es.labels.tolist() == [1, 1, 0, 1, 0]
    got, want = retrieval_metrics(X, y), retrieval_metrics(X, es.labels)
    assert got["R@1"] == want["R@1"] and got["MAP@R"] == want["MAP@R"]
    y_ref = np.array([3600, 86400, 86400, 7200, 3600], dtype="timedelta64[s]")
    s = check_sets(X, y, R, y_ref)
    names = es.class_names[es.labels].tolist()
    ref_names = EmbeddingSet.from_arrays(R, y_ref).class_names[EmbeddingSet.from_arrays(R, y_ref).labels].tolist()
    assert {(i, j) for i in range(5) for j in range(5) if s.y[i] == s.y_ref[j]} == \
        {(i, j) for i in range(5) for j in range(5) if names[i] == ref_names[j]}


def test_months_beside_days_are_one_line_not_a_traceback():
    y = _held(np.timedelta64(1, "M"), np.timedelta64(30, "D"))
    msg = r"1 months at row 0 and 30 days at row 1 have no common unit \(a month or a year has no fixed length\)"
    with pytest.raises(EmbedscopeError, match=r"^labels: " + msg):
        EmbeddingSet.from_arrays(np.eye(2), y)  # (before: TypeError "must be real number, not datetime.timedelta")
    with pytest.raises(EmbedscopeError, match=r"^labels: " + msg):
        check_labels(y)  # (before: numpy's TypeError, "incompatible nonlinear base time units")
    X = RNG.normal(size=(2, 3))
    with pytest.raises(EmbedscopeError, match=r"^y and y_ref hold durations of no common unit \(timedelta64\[M\] vs "
                                              r"timedelta64\[D\]"):
        retrieval_metrics(X, np.array([1, 2], dtype="timedelta64[M]"), X_ref=X,
                          y_ref=np.array([30, 31], dtype="timedelta64[D]"))  # (before: numpy's TypeError)


# ----------------------------------------------------------------------------- 3. from_arrays: bytes
def test_from_arrays_decodes_bytes_labels_beyond_ascii():
    es = EmbeddingSet.from_arrays(np.eye(3), np.array([b"caf\xc3\xa9", b"x", b"caf\xc3\xa9"]))
    assert es.class_names.tolist() == ["café", "x"] and es.labels.tolist() == [0, 1, 0]  # (before: "got a bytes_")
    es = EmbeddingSet.from_arrays(np.eye(3), _held("café", "café".encode(), "x"))
    assert es.class_names.tolist() == ["café", "x"] and es.labels.tolist() == [0, 0, 1]  # (before: "got a str")
    es = EmbeddingSet.from_arrays(np.eye(2), np.array([b"caf\xc3\xa9", b"x"]), class_names=["x", "café"])
    assert es.labels.tolist() == [1, 0]


# ----------------------------------------------------------------------------- 3. numbers held as objects
@pytest.mark.parametrize("y, shown", [
    (_held(1.5, 2.5, 1.5), "1.5"), (_held(1, float("inf"), 1), "inf"),
    (_held(1, 1, __import__("decimal").Decimal("2.5")), "2.5"), (_held(np.float32(0.5), 1, 1), "0.5"),
], ids=["floats", "inf", "Decimal", "float32"])
def test_non_integral_numbers_held_as_objects_are_refused_as_a_float_array_is(y, shown):
    """A pandas object column of 1.5 and 2.5 was two classes for check_labels and the retrieval measures, while
    the same floats as an array (and from_arrays) are refused: no class labels."""
    row = next(i for i, v in enumerate(y.tolist()) if str(v) == shown)
    msg = rf"must be integer class labels \(found non-integral or NaN values; first: {shown} at row {row}\)$"
    with pytest.raises(EmbedscopeError, match=r"^labels " + msg):
        check_labels(y)
    X = RNG.normal(size=(3, 3))
    with pytest.raises(EmbedscopeError, match=r"^y " + msg):
        retrieval_metrics(X, y)
    with pytest.raises(EmbedscopeError, match=r"^y_ref " + msg):
        retrieval_metrics(X, [1, 2, 1], X_ref=X, y_ref=y)
    with pytest.raises(EmbedscopeError, match="integer class labels"):
        EmbeddingSet.from_arrays(X, y)


def test_integral_numbers_held_as_objects_still_compare_exactly_by_value():
    y = _held(np.True_, np.False_, 1, np.float32(2), 2, 2 ** 63, 2 ** 63 + 1, float(2 ** 63))
    py = [v.item() if isinstance(v, np.generic) else v for v in y.tolist()]  # (as Python compares them, exactly)
    assert _pairs_of(check_labels(y)) == _pairs_of(py) == {(0, 2), (3, 4), (5, 7)}
    assert _pairs_of(check_labels(y)) == _pairs_of(EmbeddingSet.from_arrays(np.eye(8), y).labels)


# ----------------------------------------------------------------------------- 3. dates with a time zone
def test_from_arrays_takes_one_instant_in_two_time_zones_as_one_class():
    """check_labels and the retrieval measures compare dates with a time zone by instant (pandas' ==):
    from_arrays named them by their texts, so 00:00 UTC and 01:00 in Paris were two classes there."""
    y = _held(pd.Timestamp("2020-01-01 00:00", tz="UTC"), pd.Timestamp("2020-01-01 01:00", tz="Europe/Paris"),
              pd.Timestamp("2020-01-02", tz="UTC"), datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc))
    es = EmbeddingSet.from_arrays(np.eye(4), y)
    assert _pairs_of(es.labels) == _pairs_of(check_labels(y)) == {(0, 1), (0, 3), (1, 3)}
    assert es.class_names.tolist() == ["2020-01-01 00:00:00+00:00", "2020-01-02 00:00:00+00:00"]  # (its first row's)
    es = EmbeddingSet.from_arrays(np.eye(4), y, class_names=["2020-01-02 00:00:00+00:00", "2020-01-01 00:00:00+00:00"])
    assert es.labels.tolist() == [1, 1, 0, 1]
    one_zone = _held(pd.Timestamp("2020-01-01 01:00", tz="Europe/Paris"), pd.Timestamp("2020-01-01", tz="Europe/Paris"))
    assert EmbeddingSet.from_arrays(np.eye(2), one_zone).class_names.tolist() == [  # (one zone: as before)
        "2020-01-01 00:00:00+01:00", "2020-01-01 01:00:00+01:00"]


def test_dates_without_and_with_a_time_zone_are_one_line_everywhere():
    y = _held(pd.Timestamp("2020-01-01"), pd.Timestamp("2020-01-01", tz="UTC"), datetime.date(2020, 1, 2))
    msg = (r"mix dates without and with a time zone \(2020-01-01 00:00:00 at row 0, 2020-01-01 00:00:00\+00:00 "
           r"at row 1\): give every date a time zone, or none$")
    with pytest.raises(EmbedscopeError, match=r"^labels " + msg):
        EmbeddingSet.from_arrays(np.eye(3), y)  # (before: accepted, each a class by its text)
    with pytest.raises(EmbedscopeError, match=r"^labels " + msg):
        check_labels(y)  # (before: "labels must hold class labels (integers or strings)")
    with pytest.raises(EmbedscopeError, match=r"^y_ref " + msg):
        retrieval_metrics(np.eye(3), [1, 2, 1], X_ref=np.eye(3), y_ref=y)
