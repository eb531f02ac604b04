"""Bounded reading: ``properties`` reads each embedding file once; ``saliency-agreement`` streams the
maps files in blocks of images instead of holding every model's maps at once."""

from __future__ import annotations

import json

import numpy as np

# --------------------------------------------------------------------------- properties: one read per file


def _emb_file(path, seed, n=60):
    from embedscope import store

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    es = store.EmbeddingSet(embeddings=rng.normal(size=(n, 4)).astype(np.float32), labels=labels,
                            paths=[f"img/{i}.png" for i in range(n)],
                            split=np.where(np.arange(n) < 45, "test", "train"), class_names=["a", "b", "c"],
                            properties={"p": rng.integers(0, 2, n), "q": labels % 2},
                            attrs={"dataset": "toy", "checkpoint": f"/ck/{seed}.pt"})
    store.save(path, es)
    return path


def _old_properties(files, **kw):
    """What ``properties`` returned before: the rows of ``properties_of_files`` and a provenance from a
    second ``store.load`` of each file."""
    from embedscope import store
    from embedscope.analyses.image_properties import properties_of_files
    from embedscope.analyses.result import provenance_of

    rows = properties_of_files(files, **kw)
    labels = list(dict.fromkeys(r["model"] for r in rows))
    out = []
    for f, nm in zip(files, labels):
        prov = provenance_of(store.load(f), extra={
            "split": kw.get("split", "test"), "max_r": kw.get("max_r"), "metric": kw.get("metric", "euclidean"),
            "permutations": kw.get("permutations", 0), "cap": "R uncapped (the paper's definition)"})
        out.append((nm, [r for r in rows if r["model"] == nm], prov))
    return out


def test_properties_reads_each_file_once(tmp_path, monkeypatch):
    """``properties`` loaded every file twice (once for the measure, once more for the provenance)."""
    import h5py

    from embedscope import store
    from embedscope.analyses import properties

    files = [_emb_file(tmp_path / "a.h5", 0), _emb_file(tmp_path / "b.h5", 1)]
    expected = _old_properties(files)
    loads, opens = [], []
    real_load, real_file = store.load, h5py.File

    def spy_load(path, *a, **k):
        loads.append(str(path))
        return real_load(path, *a, **k)

    class SpyFile(real_file):
        def __init__(self, name, *a, **k):
            opens.append(str(name))
            super().__init__(name, *a, **k)

    monkeypatch.setattr(store, "load", spy_load)
    monkeypatch.setattr(h5py, "File", SpyFile)
    res = properties(files)
    assert sorted(loads) == sorted(map(str, files))
    assert sorted(opens) == sorted(map(str, files))
    for r, (nm, rows, prov) in zip(res, expected, strict=True):
        assert r.model == nm
        assert r.table == rows
        assert r.provenance == prov


def test_properties_cli_output_unchanged(tmp_path, capsys):
    """The command's JSON (rows and provenance) is what the two-read code wrote."""
    from embedscope.cli import main

    files = [_emb_file(tmp_path / "a.h5", 2), _emb_file(tmp_path / "b.h5", 3)]
    expected = _old_properties(files)
    assert main(["properties", *map(str, files), "--json", str(tmp_path / "o.json"), "--no-progress"]) == 0
    got = json.loads((tmp_path / "o.json").read_text())
    assert len(got["models"]) == len(expected)
    for m, (_, rows, prov) in zip(got["models"], expected):
        assert m["provenance"] == json.loads(json.dumps(prov))
        assert len(m["table"]) == len(rows)
