"""Bring-your-own properties (add-properties, join on path) and real data sets' properties (METHODS.md §9)."""

from __future__ import annotations

import numpy as np
import pytest

from embedscope import store
from embedscope.cli import main
from embedscope.data.properties import join_properties
from embedscope.errors import EmbedscopeError


def _h5(path, n=6):
    es = store.EmbeddingSet(embeddings=np.arange(n * 2, dtype=np.float32).reshape(n, 2), labels=np.zeros(n, int),
                            paths=[f"img/{i}.jpg" for i in range(n)], split=["test"] * n, class_names=["a"],
                            properties={"old": np.arange(n)})
    store.save(path, es)
    return path


def test_add_properties_joins_on_path(tmp_path, capsys):
    h5 = _h5(tmp_path / "e.h5")
    csv = tmp_path / "p.csv"
    order = [3, 1, 0, 5, 4, 2]
    csv.write_text("path,colour,size\n" + "".join(f"img/{i}.jpg,{'red' if i % 2 else 'blue'},{i * 10}\n"
                                                   for i in order))
    assert main(["add-properties", str(h5), str(csv)]) == 0
    es = store.load(h5)
    assert list(es.properties["colour"]) == ["blue", "red"] * 3
    assert es.properties["size"].tolist() == [0, 10, 20, 30, 40, 50]
    assert es.properties["old"].tolist() == list(range(6))
    # again: clash without --force, replaced with it
    assert main(["add-properties", str(h5), str(csv)]) == 1
    assert "already has" in capsys.readouterr().err
    assert main(["add-properties", str(h5), str(csv), "--force"]) == 0


def test_parquet_table(tmp_path):
    import pandas as pd

    h5 = _h5(tmp_path / "e.h5")
    pq = tmp_path / "p.parquet"
    pd.DataFrame({"path": [f"img/{i}.jpg" for i in range(6)], "v": [1.5] * 6}).to_parquet(pq)
    assert main(["add-properties", str(h5), str(pq)]) == 0
    assert store.load(h5).properties["v"].tolist() == [1.5] * 6


def test_unmatched_and_duplicate_paths_are_one_line(tmp_path, capsys):
    paths = np.array(["a", "b", "c"])
    with pytest.raises(EmbedscopeError, match="duplicate path.*a"):
        join_properties(paths, {"path": np.array(["a", "a", "b", "c"]), "x": np.arange(4)})
    with pytest.raises(EmbedscopeError, match="1 image.*no row, e.g. c"):
        join_properties(paths, {"path": np.array(["a", "b"]), "x": np.arange(2)})
    with pytest.raises(EmbedscopeError, match="match no image.*zz"):
        join_properties(paths, {"path": np.array(["a", "b", "c", "zz"]), "x": np.arange(4)})
    h5 = _h5(tmp_path / "e.h5")
    bad = tmp_path / "bad.csv"
    bad.write_text("file,x\na,1\n")
    assert main(["add-properties", str(h5), str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert "no 'path' column" in err and "\n" not in err
