"""Audit 27 (helper C): the ``properties`` progress bar counts every query.

What was wrong before: with a nearly collapsed model's outliers taken apart
(``_Engine._outliers_apart``), the bar was the bulk engine's own: its total and its count were the
bulk queries only, and the outlier queries (each ranked from its full float64 row) were not counted.
The bar is now the whole engine's: total n, advanced by the bulk's blocks and by each outlier query,
and it reaches n, with the outliers apart or not; the hits are the same either way.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_audit26_properties_outliers import _codes_R, _collapsed, _properties

import embedscope.progress as progress_mod
from embedscope.metrics import properties as props_mod
from embedscope.metrics.search import knn


class _Bar:
    def __init__(self, total, desc, unit):
        self.total, self.desc, self.unit, self.n, self.steps, self.closed = total, desc, unit, 0, [], False

    def update(self, k=1):
        assert not self.closed
        self.steps.append(int(k))
        self.n += int(k)

    def close(self):
        self.closed = True


@pytest.fixture
def bars(monkeypatch):
    made = []

    def progress_bar(iterable=None, *, total=None, desc="", unit="it", **kw):
        made.append(_Bar(total, desc, unit))
        return made[-1]

    monkeypatch.setattr(progress_mod, "progress_bar", progress_bar)
    return made


def _check(bar, n):
    assert (bar.desc, bar.total, bar.n, bar.closed) == ("properties", n, n, True)
    assert all(k > 0 for k in bar.steps)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("apart", [True, False])
def test_the_bar_reaches_n_with_and_without_outliers_apart(bars, metric, apart, monkeypatch):
    n = 704
    X, at = _collapsed(n, 12, 6, 0.1, seed=3)
    props = _properties(n, at, seed=4)
    codes, R = _codes_R(props, n)
    if not apart:
        monkeypatch.setattr(knn, "OUTLIERS", False)
    eng = props_mod._Engine(X, metric)
    assert (eng.apart is not None) == apart
    if apart:
        assert eng.apart.n == n - len(at)  # (the bulk's engine: fewer rows than the bar must count)
    H = eng.hits(codes, R, progress=True)
    assert len(bars) == 1
    _check(bars[0], n)
    if apart:  # one step per outlier query, after the bulk's blocks
        assert bars[0].steps[-len(at):] == [1] * len(at)
        assert sum(bars[0].steps[:-len(at)]) == n - len(at)
    np.testing.assert_array_equal(H, eng.hits(codes, R))  # (the bar changes no count)
    assert len(bars) == 1  # without progress: no bar


def test_property_precision_bar_on_a_model_with_outliers_and_on_plain_rows(bars):
    n = 704
    X, at = _collapsed(n, 12, 6, 0.1, seed=5)
    props = {k: v for k, v in _properties(n, at, seed=6).items() if k in ("cls", "shared")}
    assert props_mod._Engine(X, "cosine").apart is not None
    props_mod.property_precision(X, props, metric="cosine", progress=True)
    plain = np.random.default_rng(0).standard_normal((300, 6))
    props_mod.property_precision(plain, {"c": np.arange(300) % 7}, metric="cosine", progress=True)
    hits_bars = [b for b in bars if b.desc == "properties"]
    assert len(hits_bars) == 2
    _check(hits_bars[0], n)
    _check(hits_bars[1], 300)


def test_cli_line_counts_every_query(tmp_path, capsys):
    """Without a terminal the bar is one line at the end: 'properties: n/n q', the outliers included."""
    from embedscope import store
    from embedscope.cli import main

    n = 704
    X, at = _collapsed(n, 12, 6, 0.1, seed=3)
    props = {k: v for k, v in _properties(n, at, seed=4).items() if k in ("few", "shared")}
    assert props_mod._Engine(X, "euclidean").apart is not None
    f = tmp_path / "c.h5"
    store.save(f, store.EmbeddingSet.from_arrays(X.astype(np.float32), np.arange(n) % 11, split="test",
                                                 properties=props))
    assert props_mod._Engine(store.load(f).embeddings, "euclidean").apart is not None  # (float32 rows too)
    assert main(["properties", str(f)]) == 0
    err = capsys.readouterr().err
    assert f"properties: {n}/{n} q in " in err, err
