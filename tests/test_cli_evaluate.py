"""embedscope evaluate end to end on a small HDF5 file."""

import json

import numpy as np
import pytest

from embedscope import store
from embedscope.cli import main
from embedscope.metrics import retrieval_metrics


@pytest.fixture
def emb_file(tmp_path):
    rng = np.random.default_rng(0)
    n = 160
    y = rng.integers(0, 16, n)
    X = (rng.standard_normal((n, 8)) + 2 * rng.standard_normal((16, 8))[y]).astype(np.float32)
    split = np.where(np.arange(n) < 100, "test", "train")
    es = store.EmbeddingSet(embeddings=X, labels=y, paths=[f"p{i}" for i in range(n)], split=split,
                            class_names=[f"c{i}" for i in range(16)], attrs={"dataset": "synthetic"})
    path = tmp_path / "emb.h5"
    store.save(path, es)
    return path, X, y, split


def test_evaluate_table_json_csv_and_refused_overwrite(emb_file, tmp_path, capsys):
    path, X, y, split = emb_file
    js, cs = tmp_path / "out.json", tmp_path / "out.csv"
    rc = main(["evaluate", str(path), "--json", str(js), "--csv", str(cs), "--no-progress", "--device", "cpu"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "MAP@R" in out and "lone" in out
    doc = json.loads(js.read_text())
    m = doc["values"]
    assert list(m) == ["R@1", "R@2", "R@4", "R@8", "P@1", "R-Precision", "MAP@R", "mAP@C", "mAP@1000", "NMI", "F1"]
    te = split == "test"
    ref = retrieval_metrics(X[te], y[te])
    for k in m:
        assert m[k] == pytest.approx(ref[k], abs=1e-12)
    prov = doc["provenance"]
    from embedscope.fileio import sha256_file

    assert prov["sha256"] == sha256_file(path)
    assert prov["query_split"] == "test" and prov["N_queries"] == int(te.sum())
    assert prov["classes"] == len(np.unique(y[te])) and prov["n_lone"] == ref["n_lone"]
    lines = cs.read_text().splitlines()
    assert lines[0].startswith("measure,value,") and len(lines) == 1 + len(m)
    # refused overwrite: exit 1, one line, file untouched
    before = js.read_text()
    rc = main(["evaluate", str(path), "--json", str(js), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and "already exists" in err and len(err.strip().splitlines()) == 1
    assert js.read_text() == before
    assert main(["evaluate", str(path), "--json", str(js), "--force", "--no-progress",
                 "--include", "R@1"]) == 0
    assert list(json.loads(js.read_text())["values"]) == ["R@1"]


def test_evaluate_separate_splits_and_options(emb_file, tmp_path, capsys):
    path, X, y, split = emb_file
    js = tmp_path / "sep.json"
    rc = main(["evaluate", str(path), "--query-split", "test", "--reference-split", "train", "--metric",
               "euclidean", "--k", "1", "3", "--include", "R@k", "MAP@R", "--json", str(js), "--no-progress"])
    assert rc == 0
    m = json.loads(js.read_text())["values"]
    te, tr = split == "test", split == "train"
    ref = retrieval_metrics(X[te], y[te], X_ref=X[tr], y_ref=y[tr], metric="euclidean", ks=(1, 3),
                            include=["R@1", "R@3", "MAP@R"])
    assert list(m) == ["R@1", "R@3", "MAP@R"]
    for k in m:
        assert m[k] == pytest.approx(ref[k], abs=1e-12)
    assert main(["evaluate", str(path), "--include", "R@5", "--no-progress"]) == 2
    assert main(["evaluate", str(path), "--include", "bogus", "--no-progress"]) == 2
    assert main(["evaluate", str(tmp_path / "missing.h5")]) == 1
    capsys.readouterr()
