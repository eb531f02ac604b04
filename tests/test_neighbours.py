"""embedscope neighbours: the retrievals are the brute-force top-k; the figure is drawn for digits and photos."""

import subprocess
import sys

import numpy as np
import pytest

from embedscope import store
from embedscope.analyses import neighbour_examples, neighbours_figure
from embedscope.errors import EmbedscopeError, UsageError
from embedscope.viz.neighbours import RIGHT, WRONG


def _set(n=40, d=6, seed=0, split=None, dataset=None, root=None, paths=None):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 4
    X = rng.normal(size=(n, d)) + 2.0 * np.eye(d)[y]
    attrs = {k: v for k, v in (("dataset", dataset), ("root", root)) if v}
    return store.EmbeddingSet.from_arrays(X.astype(np.float32), y, split=split, paths=paths, attrs=attrs)


def _brute(Q, R, k, exclude=None):
    Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    Rn = R / np.linalg.norm(R, axis=1, keepdims=True)
    S = Qn.astype(np.float64) @ Rn.T.astype(np.float64)
    if exclude is not None:
        S[np.arange(len(Q)), exclude] = -np.inf
    idx = np.argsort(-S, axis=1, kind="stable")[:, :k]
    return idx, np.take_along_axis(S, idx, 1)


def test_examples_equal_brute_force():
    es = _set()
    ex = neighbour_examples(es, split="test", queries=7, k=4, seed=3)
    qidx = np.array([int(p) for p in ex.query_paths])
    idx, sims = _brute(es.embeddings[qidx], es.embeddings, 4, exclude=qidx)
    np.testing.assert_array_equal(ex.ref_paths, es.paths[idx])
    np.testing.assert_allclose(ex.similarity, sims, atol=1e-5)
    np.testing.assert_array_equal(ex.correct, es.labels[idx] == es.labels[qidx][:, None])
    assert not np.any(ex.ref_paths == ex.query_paths[:, None])  # a query never retrieves itself


def test_query_gallery_default():
    split = np.array(["query", "gallery"] * 20)
    es = _set(split=split)
    ex = neighbour_examples(es, split="query", paths=["0", "4"], k=3)
    assert ex.reference_split == "gallery"
    g = es.subset("gallery")
    q = es.subset("query")
    pos = [list(q.paths).index(p) for p in ("0", "4")]
    idx, _ = _brute(q.embeddings[pos], g.embeddings, 3)
    np.testing.assert_array_equal(ex.ref_paths, g.paths[idx])


def test_bad_queries():
    es = _set()
    with pytest.raises(EmbedscopeError, match="1 of the 2 query paths are not in the 'test' split"):
        neighbour_examples(es, paths=["1", "nope"])
    with pytest.raises(EmbedscopeError, match=r"fewer than the 50 asked for \(--n-retrievals"):
        neighbour_examples(es, k=50)
    with pytest.raises(EmbedscopeError, match="no 'train' rows"):
        neighbour_examples(es, split="train")


def _green_red(png):
    from PIL import Image

    a = np.asarray(Image.open(png).convert("RGB")).astype(int)

    def count(hexcol):
        c = np.array([int(hexcol[i:i + 2], 16) for i in (1, 3, 5)])
        return int(np.sum(np.abs(a - c).sum(axis=2) < 30))

    return count(RIGHT), count(WRONG)


def test_cli_digits(tmp_path):
    from sklearn.datasets import load_digits

    d = load_digits()
    X = d.data[:300].astype(np.float32)
    es = store.EmbeddingSet.from_arrays(X, d.target[:300], split=np.where(d.target[:300] < 5, "train", "test"),
                                        paths=[f"digits/{i:04d}" for i in range(300)], attrs={"dataset": "digits"})
    f = store.save(tmp_path / "d.h5", es)
    out = tmp_path / "grid.png"
    from embedscope.cli import main

    assert main(["neighbours", str(f), "--queries", "3", "--n-retrievals", "4", "-o", str(out)]) == 0
    assert out.exists() and out.with_suffix(".pdf").exists()
    green, red = _green_red(out)
    assert green > 100  # the frames are drawn
    r = subprocess.run([sys.executable, "-m", "embedscope", "neighbours", str(f), "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "already exists" in r.stderr


def test_photos_from_root(tmp_path):
    from PIL import Image

    root = tmp_path / "data"
    paths = []
    colours = [(220, 30, 30), (30, 200, 30), (30, 30, 220), (200, 200, 30)]
    for i in range(40):
        p = f"c{i % 4}/img{i}.png"
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (40, 30), colours[i % 4]).save(root / p)
        paths.append(p)
    es = _set(paths=paths, root=str(root), dataset="imagefolder")
    png, pdf, ex = neighbours_figure(es, tmp_path / "g.png", queries=4, k=3)
    assert png.exists() and ex.correct.shape == (4, 3)
    green, red = _green_red(png)
    assert green > 50 and (red > 50) == bool((~ex.correct).any())
    es.attrs.pop("root")
    with pytest.raises(UsageError, match="give --root DIR"):
        neighbours_figure(es, tmp_path / "h.png")
    (root / paths[5]).unlink()
    with pytest.raises(EmbedscopeError, match="cannot read image"):
        neighbours_figure(es, tmp_path / "h.png", root=str(root), queries=40, k=3)
    assert not (tmp_path / "h.png").exists()
