"""Thirty-fifth session's audit of property_precision: every kind of missing value is refused (NaT of a
datetime column was one shared value; pandas' NaT and numpy's float32 NaN in an object array each a
lone value of its own), as float NaN and None were."""

import numpy as np
import pandas as pd
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.metrics import property_precision

X = np.random.default_rng(2).normal(size=(12, 3))


@pytest.mark.parametrize("values", [
    pd.Series(pd.to_datetime(["2020-01-01"] * 6 + [None] * 6)).to_numpy(),
    pd.Series(pd.to_datetime(["2020-01-01"] * 6 + [None] * 6)).astype(object).to_numpy(),
    np.array([np.float32("nan")] * 6 + [np.float32(1.0)] * 6, dtype=object),
    np.array([pd.NA] * 6 + [1] * 6, dtype=object),
    np.array([np.timedelta64("NaT")] * 6 + [np.timedelta64(1, "s")] * 6),
    np.array([None] * 6 + ["a"] * 6, dtype=object),
], ids=["datetime64 NaT", "object pd.NaT", "object float32 NaN", "object pd.NA", "timedelta NaT", "None"])
def test_missing_values_of_every_kind_are_refused(values):
    with pytest.raises(EmbedscopeError, match="missing values"):
        property_precision(X, {"a": values})


def test_dates_without_gaps_are_values():
    d = pd.Series(pd.to_datetime(["2020-01-01"] * 6 + ["2021-05-05"] * 6)).to_numpy()
    a = property_precision(X, {"a": d})["a"]
    b = property_precision(X, {"a": np.array([0] * 6 + [1] * 6)})["a"]
    assert a["R-Prec"] == b["R-Prec"] and a["n_values"] == 2
