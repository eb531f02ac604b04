"""Forty-first audit, third reading of the labels: EmbeddingSet.from_arrays named classes three ways.

1. A numpy bool label array was named "0"/"1", bool objects "False"/"True"; bool objects with class_names
   were looked up by name ("True"), a bool array indexed it. Now booleans are named "False"/"True" and
   index class_names (False 0, True 1), however held; check_labels and the retrieval measures still read
   them as 0/1.
2. Object labels: pd.Timestamp("2020-01-01") was the class "2020-01-01 00:00:00", np.datetime64 and
   datetime.date of that day "2020-01-01", and a Timestamp beside an np.datetime64 of one day two classes.
   Now dates held as objects are read as datetime64 (one class per instant) and every date class, of
   objects or of a datetime64 array of any unit, is named by its instant spelt as briefly as it is exact.
3. datetime64 labels with class_names indexed it by each date's sorted position, silently; now they are
   looked up in it by their names, as string labels are.
"""

import datetime

import numpy as np
import pandas as pd
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.metrics import retrieval_metrics
from embedscope.store import EmbeddingSet
from embedscope.validation import check_labels

RNG = np.random.default_rng(413)


def _set(y, **kw):
    return EmbeddingSet.from_arrays(RNG.normal(size=(len(y), 3)), y, **kw)


# ------------------------------------------------------------------ 1. booleans

def test_booleans_are_named_false_and_true_however_held():
    held = {"numpy bool": np.array([True, False, True]), "list": [True, False, True],
            "pandas bool": pd.Series([True, False, True]), "objects": np.array([True, False, True], dtype=object),
            "numpy bools as objects": np.array([True, np.False_, np.True_], dtype=object)}
    names = {k: _set(y).class_names.tolist() for k, y in held.items()}
    assert names == {k: ["False", "True"] for k in held}  # (numpy bools, a list, pandas' before: "0", "1")
    assert {k: _set(y).labels.tolist() for k, y in held.items()} == {k: [1, 0, 1] for k in held}


def test_one_boolean_alone_is_named_by_it():
    assert _set(np.array([True, True])).class_names.tolist() == ["True"]  # (before: "1")
    assert _set(np.array([False])).class_names.tolist() == ["False"]  # (before: "0")


def test_booleans_index_class_names_however_held():
    for y in (np.array([True, False, True]), np.array([True, False, True], dtype=object)):
        es = _set(y, class_names=["ok", "defective"])  # (objects before: "not among the 2 class names")
        assert es.labels.tolist() == [1, 0, 1]
        assert es.class_names[es.labels].tolist() == ["defective", "ok", "defective"]


def test_booleans_stay_0_and_1_for_check_labels_and_the_retrieval_measures_only_names_change():
    y = np.array([True, False, True, False, True, False])
    assert check_labels(y).tolist() == [1, 0, 1, 0, 1, 0]
    assert check_labels(np.array([True, True])).tolist() == [1, 1]
    X = RNG.normal(size=(6, 3))
    got, want = retrieval_metrics(X, y), retrieval_metrics(X, np.array([1, 0, 1, 0, 1, 0]))
    assert got["R@1"] == want["R@1"] and got["MAP@R"] == want["MAP@R"]
    es = EmbeddingSet.from_arrays(X, y)  # the same classes as 0/1, only named otherwise
    assert es.labels.tolist() == [1, 0, 1, 0, 1, 0]
    assert es.class_names.tolist() == ["False", "True"]  # (before: "0", "1")
    mixed = _set(np.array([True, 2, 0], dtype=object))  # booleans beside numbers: numbers, as before
    assert (mixed.class_names.tolist(), mixed.labels.tolist()) == (["0", "1", "2"], [1, 2, 0])


# ------------------------------------------------------------------ 2. dates held as objects

def test_a_timestamp_is_named_as_a_datetime64_day_is():
    stamps = np.array([pd.Timestamp("2020-01-02"), pd.Timestamp("2020-01-01")], dtype=object)
    es = _set(stamps)
    assert es.class_names.tolist() == ["2020-01-01", "2020-01-02"]  # (before: "2020-01-01 00:00:00", ...)
    assert es.labels.tolist() == [1, 0]
    assert _set(list(stamps)).class_names.tolist() == ["2020-01-01", "2020-01-02"]
    aware = np.array([pd.Timestamp("2020-01-01", tz="UTC")] * 2, dtype=object)  # a time zone: its text, as before
    assert _set(aware).class_names.tolist() == ["2020-01-01 00:00:00+00:00"]


def test_one_instant_held_three_ways_is_one_class():
    y = np.array([pd.Timestamp("2020-01-01"), np.datetime64("2020-01-01"), datetime.date(2020, 1, 1),
                  datetime.datetime(2020, 1, 1), pd.Timestamp("2020-01-02")], dtype=object)
    es = _set(y)  # (before: 4 classes: "2020-01-01", "2020-01-01 00:00:00", ...)
    assert es.class_names.tolist() == ["2020-01-01", "2020-01-02"]
    assert es.labels.tolist() == [0, 0, 0, 0, 1]


def test_times_of_day_are_named_as_briefly_as_exact():
    y = np.array([datetime.datetime(2020, 1, 1, 12, 30), np.datetime64("2020-01-01T12:30"),
                  pd.Timestamp("2020-01-01 00:00:00.000000001"), datetime.date(2020, 1, 1)], dtype=object)
    es = _set(y)  # (before: "2020-01-01 12:30:00" and "2020-01-01T12:30" two classes)
    assert es.class_names.tolist() == ["2020-01-01", "2020-01-01T00:00:00.000000001", "2020-01-01T12:30"]
    assert es.labels.tolist() == [2, 2, 1, 0]


def test_datetime64_days_are_named_alike_in_every_unit():
    names = {unit: _set(np.array(["2020-01-02", "2020-01-01T00:00"]).astype(f"datetime64[{unit}]"))
             .class_names.tolist() for unit in ("D", "s", "us", "ns")}
    assert names == {unit: ["2020-01-01", "2020-01-02"] for unit in ("D", "s", "us", "ns")}  # (before [s]:
    # "2020-01-01T00:00:00", [ns] "2020-01-01T00:00:00.000000000")


def test_a_pandas_datetime_column_is_named_by_its_days():
    col = pd.Series(pd.to_datetime(["2020-01-02", "2020-01-01", "2020-01-02"]))
    es = _set(col)  # (before: "2020-01-01T00:00:00.000000000" or "...T00:00:00.000000", by pandas' unit)
    assert es.class_names.tolist() == ["2020-01-01", "2020-01-02"]
    assert es.labels.tolist() == [1, 0, 1]


def test_dates_numpy_cannot_hold_in_one_unit_are_one_line():
    y = np.array([datetime.date(3000, 1, 1), pd.Timestamp("2020-01-01 00:00:00.000000001")], dtype=object)
    with pytest.raises(EmbedscopeError, match=r"^labels: 3000-01-01 at row 0 lies beyond the range of "
                                              r"datetime64\[ns\]") as e:
        _set(y)  # (as one [ns] array, 3000-01-01 wrapped to 1830-11-23T00:50:52.580896768)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------ 3. dates with class_names

def test_datetime64_labels_are_looked_up_in_class_names_by_name():
    y = np.array(["2020-01-05", "2020-01-02", "2020-01-05"], dtype="datetime64[D]")
    es = _set(y, class_names=["2020-01-05", "2020-01-02"])  # (before: indexed by sorted position: swapped)
    assert es.labels.tolist() == [0, 1, 0]
    assert es.class_names[es.labels].tolist() == ["2020-01-05", "2020-01-02", "2020-01-05"]
    ns = _set(y.astype("datetime64[ns]"), class_names=["2020-01-05", "2020-01-02"])
    assert ns.labels.tolist() == [0, 1, 0]


def test_dates_held_as_objects_are_looked_up_by_the_same_names():
    y = np.array([pd.Timestamp("2020-01-05"), datetime.date(2020, 1, 2)], dtype=object)
    es = _set(y, class_names=["2020-01-02", "2020-01-05"])  # (before: "2020-01-05 00:00:00" not among them)
    assert es.labels.tolist() == [1, 0]


def test_dates_not_among_the_class_names_are_one_line():
    y = np.array(["2020-01-05", "2020-01-02"], dtype="datetime64[D]")
    with pytest.raises(EmbedscopeError, match=r"^2 label\(s\) are not among the 2 class names, e\.g\. "
                                              r"'2020-01-02', '2020-01-05'$"):
        _set(y, class_names=["a", "b"])  # (before: accepted, 2020-01-02 was "a")
