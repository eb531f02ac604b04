"""embedscope tsne / yoke / scatter end to end on small HDF5 files."""

import csv
import json

import numpy as np
import pytest

from embedscope import store
from embedscope.cli import main
from embedscope.metrics import nearest_same_different
from embedscope.store import EmbeddingSet


def _es(seed=0, n_per=12, dim=6, shuffle=False, drop=0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(6), n_per)
    centres = rng.normal(size=(6, dim)) * 3
    X = (centres[y] + rng.normal(size=(len(y), dim))).astype(np.float32)
    paths = np.array([f"img/{i:03d}.png" for i in range(len(y))])
    split = np.where(y < 3, "train", "test")
    idx = np.arange(len(y))
    if shuffle:
        idx = rng.permutation(idx)
    idx = idx[drop:]
    return EmbeddingSet(embeddings=X[idx], labels=y[idx], paths=paths[idx], split=split[idx],
                        class_names=np.array([f"c{k}" for k in range(6)]))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("viz")
    store.save(d / "a.h5", _es(0))
    store.save(d / "b.h5", _es(1, shuffle=True))
    store.save(d / "c.h5", _es(2, drop=1))
    return d


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_tsne_joint(files, tmp_path, capsys):
    out = tmp_path / "tsne.png"
    rc = main(["tsne", str(files / "a.h5"), "--joint", "--perplexity", "8", "--n-iter", "100", "-o", str(out),
               "--no-progress"])
    assert rc == 0
    for ext in (".png", ".pdf", ".csv", ".json"):
        assert out.with_suffix(ext).stat().st_size > 200
    rows = _rows(out.with_suffix(".csv"))
    es = store.load(files / "a.h5")
    assert [r["path"] for r in rows if r["split"] == "train"] == list(es.paths[es.split == "train"])
    assert {r["split"] for r in rows} == {"train", "test"} and len(rows) == es.n
    info = json.loads(out.with_suffix(".json").read_text())["provenance"]
    assert info["perplexity"] == 8 and info["initialization"] == "pca" and info["joint"] is True
    assert "kl_divergence" in capsys.readouterr().out
    # refused overwrite, then --force
    assert main(["tsne", str(files / "a.h5"), "--joint", "-o", str(out), "--no-progress"]) == 1
    assert "already exists" in capsys.readouterr().err
    # --joint with --split is a usage error
    assert main(["tsne", str(files / "a.h5"), "--joint", "--split", "test", "-o", str(tmp_path / "x.png")]) == 2


def test_tsne_split_max_points(files, tmp_path):
    out = tmp_path / "t.png"
    rc = main(["tsne", str(files / "a.h5"), "--split", "test", "--max-points", "18", "--perplexity", "5",
               "--n-iter", "50", "-o", str(out), "--no-progress"])
    assert rc == 0
    rows = _rows(out.with_suffix(".csv"))
    assert len(rows) == 18 and {r["split"] for r in rows} == {"test"}
    assert sorted({r["class"] for r in rows}) == ["c3", "c4", "c5"]
    assert all(sum(r["class"] == c for r in rows) == 6 for c in ("c3", "c4", "c5"))


def test_yoke_matches_rows_by_path(files, tmp_path, capsys):
    out = tmp_path / "yoked.png"
    rc = main(["yoke", str(files / "a.h5"), str(files / "b.h5"), "--split", "test", "--perplexity", "5",
               "--n-iter", "80", "--inset-class", "c4", "-o", str(out), "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    for ext in (".png", ".pdf", ".csv", ".json"):
        assert out.with_suffix(ext).stat().st_size > 200
    rows = _rows(out.with_suffix(".csv"))
    a = store.load(files / "a.h5").subset("test")
    assert [r["path"] for r in rows] == list(a.paths)
    assert [r["class"] for r in rows] == list(a.class_names[a.labels])
    info = json.loads(out.with_suffix(".json").read_text())["provenance"]
    assert info["alpha"] == pytest.approx(0.01 / a.n) and info["n"] == a.n
    assert main(["yoke", str(files / "a.h5"), str(files / "b.h5"), "-o", str(out), "--no-progress"]) == 1


def test_yoke_mismatch_error(files, tmp_path, capsys):
    rc = main(["yoke", str(files / "a.h5"), str(files / "c.h5"), "--split", "train", "-o", str(tmp_path / "y.png")])
    assert rc == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "different images" in err and "1 only in" in err
    assert not (tmp_path / "y.png").exists()
    assert main(["yoke", str(files / "a.h5"), str(files / "b.h5"), "--alpha", "-1", "-o",
                 str(tmp_path / "y.png")]) == 2


def test_scatter(files, tmp_path, capsys):
    out = tmp_path / "scatter.png"
    assert main(["scatter", str(files / "a.h5"), "-o", str(out), "--no-progress"]) == 0
    for ext in (".png", ".pdf", ".csv", ".json"):
        assert out.with_suffix(ext).stat().st_size > 200
    es = store.load(files / "a.h5")
    rows = _rows(out.with_suffix(".csv"))
    for split in ("train", "test"):
        part = es.subset(split)
        s_same, s_diff = nearest_same_different(part.embeddings, part.labels)
        got = [r for r in rows if r["split"] == split]
        assert [r["path"] for r in got] == list(part.paths)
        np.testing.assert_allclose([float(r["s_same"]) for r in got], s_same, rtol=1e-6)
        np.testing.assert_allclose([float(r["s_diff"]) for r in got], s_diff, rtol=1e-6)
    summary = json.loads(out.with_suffix(".json").read_text())["provenance"]
    assert [s["split"] for s in summary["splits"]] == ["train", "test"]
    assert "below_diagonal_R@1" in capsys.readouterr().out
    assert main(["scatter", str(files / "a.h5"), "-o", str(out)]) == 1
    assert main(["scatter", str(files / "a.h5"), "-o", str(out), "--force", "--split", "test",
                 "--no-progress"]) == 0
    assert {r["split"] for r in _rows(out.with_suffix(".csv"))} == {"test"}
