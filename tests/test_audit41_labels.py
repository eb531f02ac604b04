"""Forty-first audit: labels and missing values.

1. One finder of missing entries (``validation.missing_entries``) for from_arrays, the retrieval measures'
   labels and property_precision: from_arrays took pandas' NA and NaT (numpy's too) among object labels or
   paths as the classes or items "<NA>" and "NaT".
2. from_arrays: numbers held as objects compared by value when some are ids beyond int64 (1 and 1.0 beside
   2^63 were the classes "1" and "1.0"), and exactly (2^62 + 1 and 2^62 beside 1.0 were one class, as float64).
3. datetime64 labels: NaT refused with one line naming its row, in one set and in two (one set: the NaTs were
   a class; two: "cannot be ordered"); dates of two sets matched by their instant whatever their units (a day
   and a second's resolution were "of different kinds"), never by the integers numpy holds them as.
"""

import itertools

import numpy as np
import pandas as pd
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.metrics import retrieval_metrics
from embedscope.store import EmbeddingSet
from embedscope.validation import check_labels

RNG = np.random.default_rng(41)


def _same_class_pairs(values) -> set[tuple[int, int]]:
    """Brute force: the pairs of rows whose values are equal as Python compares them (exactly)."""
    return {(i, j) for i, j in itertools.combinations(range(len(values)), 2) if values[i] == values[j]}


def _pairs_of(labels) -> set[tuple[int, int]]:
    labels = list(labels)
    return {(i, j) for i, j in itertools.combinations(range(len(labels)), 2) if labels[i] == labels[j]}


# ----------------------------------------------------------------------------- 1. missing entries
def test_missing_entries_finds_every_kind_of_missing_value():
    from embedscope.validation import first_missing, missing_entries

    objs = np.array(["a", None, 1, np.nan, np.float32("nan"), np.float16("nan"), pd.NA, pd.NaT,
                     np.datetime64("NaT"), np.timedelta64("NaT"), b"x", np.datetime64("2020-01-01"), 0.0, "nan"],
                    dtype=object)
    want = [False, True, False, True, True, True, True, True, True, True, False, False, False, False]
    assert missing_entries(objs).tolist() == want
    assert missing_entries(np.array([1.0, np.nan], dtype=np.float16)).tolist() == [False, True]
    assert missing_entries(np.array([1.0, np.nan], dtype=np.float32)).tolist() == [False, True]
    assert missing_entries(np.array(["2020-01-01", "NaT"], dtype="datetime64[D]")).tolist() == [False, True]
    assert missing_entries(np.array([1, "NaT"], dtype="timedelta64[s]")).tolist() == [False, True]
    assert missing_entries(np.array(["nan", "None"])).tolist() == [False, False]  # texts that read so are values
    assert missing_entries(np.arange(3)).tolist() == [False] * 3
    assert first_missing(np.array(["a", "b", pd.NA], dtype=object)) == (2, "<NA>")
    assert first_missing(np.array(["2020-01-01", "NaT"], dtype="datetime64[D]")) == (1, "NaT")
    assert first_missing(np.array([0.5, np.nan])) == (1, "nan")
    assert first_missing(np.array(["a", "b"], dtype=object)) is None


@pytest.mark.parametrize("gap", [pd.NA, pd.NaT, np.datetime64("NaT"), np.timedelta64("NaT")],
                         ids=["pd.NA", "pd.NaT", "datetime64 NaT", "timedelta64 NaT"])
def test_from_arrays_refuses_missing_labels_and_paths_of_every_kind(gap):
    X = np.eye(3)
    with pytest.raises(EmbedscopeError, match=r"^labels: row 1 is missing \(.+\); give every row a value$"):
        EmbeddingSet.from_arrays(X, np.array(["a", gap, "b"], dtype=object))  # (before: a class "<NA>" or "NaT")
    with pytest.raises(EmbedscopeError, match=r"^paths: row 2 is missing"):
        EmbeddingSet.from_arrays(X, [0, 1, 0], paths=np.array(["p", "q", gap], dtype=object))


# ----------------------------------------------------------------------------- 2. numbers beyond int64
def test_from_arrays_numbers_beside_ids_beyond_int64_compare_by_value():
    X = np.eye(5)
    y = [1, 1.0, 2 ** 63, 2 ** 63 + 1, float(2 ** 63)]
    es = EmbeddingSet.from_arrays(X, np.array(y, dtype=object))
    assert _pairs_of(es.labels) == _same_class_pairs(y) == {(0, 1), (2, 4)}
    # named by value, in the order of the values; an id beyond int64 by its exact integer
    assert es.class_names.tolist() == ["1", "9223372036854775808", "9223372036854775809"]
    assert es.labels.tolist() == [0, 0, 1, 2, 1]
    # the task's three labels: two classes
    es = EmbeddingSet.from_arrays(np.eye(3), np.array([1, 1.0, 2 ** 63], dtype=object))
    assert es.labels.tolist() == [0, 0, 1] and es.class_names.tolist() == ["1", "9223372036854775808"]
    # within int64, integers beside a float compared exactly (as float64, 2^62 + 1 was 2^62: one class)
    y = [2 ** 62 + 1, 2 ** 62, 1.0]
    es = EmbeddingSet.from_arrays(np.eye(3), np.array(y, dtype=object))
    assert _pairs_of(es.labels) == _same_class_pairs(y) == set()
    assert es.class_names.tolist() == ["1", str(2 ** 62), str(2 ** 62 + 1)]
    with pytest.raises(EmbedscopeError, match="integer class labels"):  # (before: a class "1.5" beside 2^63)
        EmbeddingSet.from_arrays(np.eye(2), np.array([1.5, 2 ** 63], dtype=object))


def test_retrieval_of_two_sets_matches_mixed_numbers_by_value():
    """The two-set path (ranks._label_values) already compared 1 == 1.0 beside 2^63: pinned here."""
    Xq, Xr = RNG.normal(size=(6, 3)), RNG.normal(size=(6, 3))
    yq = np.array([1, 1.0, 2 ** 63, 1, 2 ** 63, 1.0], dtype=object)
    yr = np.array([float(2 ** 63), 1, 1.0, 2 ** 63, 1, 2 ** 63], dtype=object)
    by_hand_q, by_hand_r = [0, 0, 1, 0, 1, 0], [1, 0, 0, 1, 0, 1]  # 1 -> 0, 2^63 -> 1
    got = retrieval_metrics(Xq, yq, X_ref=Xr, y_ref=yr)
    want = retrieval_metrics(Xq, np.array(by_hand_q), X_ref=Xr, y_ref=np.array(by_hand_r))
    assert got["R@1"] == want["R@1"] and got["MAP@R"] == want["MAP@R"]


# ----------------------------------------------------------------------------- 3. dates
def test_nat_labels_are_refused_in_one_set_and_in_two():
    X = RNG.normal(size=(4, 3))
    dates = np.array(["2020-01-01", "NaT", "2020-01-02", "NaT"], dtype="datetime64[D]")
    clean = np.array(["2020-01-01", "2020-01-02"] * 2, dtype="datetime64[D]")
    with pytest.raises(EmbedscopeError, match=r"^labels: row 1 is missing \(NaT\); give every row a value$"):
        EmbeddingSet.from_arrays(X, dates)  # (before: the NaTs one class)
    with pytest.raises(EmbedscopeError, match=r"^y holds a missing label \(NaT\) at row 1: every row needs its class$"):
        retrieval_metrics(X, dates)  # (before: the NaTs one class)
    with pytest.raises(EmbedscopeError, match=r"^y holds a missing label \(NaT\) at row 1"):
        retrieval_metrics(X, dates, X_ref=X, y_ref=clean)  # (before: "cannot be ordered (date)")
    with pytest.raises(EmbedscopeError, match=r"^y_ref holds a missing label \(NaT\) at row 1"):
        retrieval_metrics(X, clean, X_ref=X, y_ref=dates)
    with pytest.raises(EmbedscopeError, match=r"^y holds a missing label \(NaT\) at row 1"):
        from embedscope.metrics.neighbours import nearest_same_different

        nearest_same_different(X, dates)  # (check_labels: the NaTs one class)


def test_dates_are_classes_by_their_instant_in_one_set_and_in_two():
    Xq, Xr = RNG.normal(size=(6, 3)), RNG.normal(size=(6, 3))
    days = ["2020-01-01", "2020-01-02", "2020-01-01", "2020-01-03", "2020-01-02", "2020-01-01"]
    yq = np.array(days, dtype="datetime64[D]")
    yr = np.array([d + "T00:00:00" for d in days[::-1]], dtype="datetime64[s]")  # the same instants, in seconds
    by_hand_q = [int(d[-1]) for d in days]  # 2020-01-0k -> k
    by_hand_r = by_hand_q[::-1]
    got = retrieval_metrics(Xq, yq, X_ref=Xr, y_ref=yr)  # (before: "of different kinds (date vs datetime)")
    want = retrieval_metrics(Xq, np.array(by_hand_q), X_ref=Xr, y_ref=np.array(by_hand_r))
    assert got["R@1"] == want["R@1"] and got["MAP@R"] == want["MAP@R"]
    stamps = pd.Series(pd.to_datetime(days[::-1])).astype(object).to_numpy()  # pandas' Timestamps, as objects
    got = retrieval_metrics(Xq, yq.astype("datetime64[ns]"), X_ref=Xr, y_ref=stamps)  # (before: ns as integers)
    assert got["R@1"] == want["R@1"] and got["MAP@R"] == want["MAP@R"]
    one = retrieval_metrics(Xq, yq)
    assert one["R@1"] == retrieval_metrics(Xq, np.array(by_hand_q))["R@1"]
    es = EmbeddingSet.from_arrays(Xq, yq)
    assert _pairs_of(es.labels) == _pairs_of(by_hand_q)
    assert es.class_names.tolist() == ["2020-01-01", "2020-01-02", "2020-01-03"]  # (before: "0", "1", "2")


def test_dates_are_never_matched_with_numbers():
    X = RNG.normal(size=(4, 3))
    ns = np.array([1, 2, 1, 2], dtype="datetime64[ns]")  # as objects: the integers 1 and 2
    with pytest.raises(EmbedscopeError, match=r"of different kinds \(dates vs numbers\)"):
        retrieval_metrics(X, ns, X_ref=X, y_ref=np.array([1, 2, 1, 2]))  # (before: 1 ns matched the label 1)


@pytest.mark.parametrize("y", [["1", 1, "2"], ("a", 2, "b"), np.array([True, "x", "y"], dtype=object),
                               np.array(["7", 7.0, "8"], dtype=object)])
def test_from_arrays_refuses_labels_that_mix_numbers_and_texts(y):
    """["1", 1] was one class "1" (numpy made the list's 1 the text "1"; objects were compared by their
    texts), while check_labels and the retrieval measures refuse such labels: now refused here too,
    naming a number and a text and their rows. Texts alone, bytes beside texts and numbers alone still read."""
    X = np.eye(3)
    with pytest.raises(EmbedscopeError, match=r"labels mix numbers and texts \(.+ at row \d, '.+' at row \d\)"):
        EmbeddingSet.from_arrays(X, y)
    with pytest.raises(EmbedscopeError):
        check_labels(np.asarray(y, dtype=object), 3)
    assert EmbeddingSet.from_arrays(X, np.array(["a", b"a", "b"], dtype=object)).labels.tolist() == [0, 0, 1]
    assert EmbeddingSet.from_arrays(X, [1, 2.0, 1]).class_names.tolist() == ["1", "2"]


def test_check_labels_names_the_first_row_that_is_no_integer():
    """A pandas Int64 column with NA (read as NaN), 2.5, inf: the message names the value and its row (it
    named neither)."""
    for y, shown, row in ((pd.array([1, None, 2], dtype="Int64"), "nan", 1), ([1, 2, 2.5], "2.5", 2),
                          (np.array([np.inf, 1.0, 2.0]), "inf", 0)):
        with pytest.raises(EmbedscopeError, match=rf"non-integral or NaN values; first: {shown} at row {row}\)"):
            check_labels(y, 3)
