"""Every notebook's code cells run top to bottom against small embedding files."""

import json
from pathlib import Path

import numpy as np
import pytest

from embedscope import store

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def _file(path, seed):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(6), 20)
    X = rng.normal(size=(6, 16))[y] + 0.5 * rng.normal(size=(120, 16))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    es = store.EmbeddingSet(X.astype(np.float32), y, [f"i{i}" for i in range(120)],
                            np.where(y < 3, "train", "test"), [str(c) for c in range(6)])
    return store.save(path, es)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(nb, tmp_path, monkeypatch):
    monkeypatch.setenv("EMBEDSCOPE_H5", str(_file(tmp_path / "a.h5", 0)))
    monkeypatch.setenv("EMBEDSCOPE_H5_B", str(_file(tmp_path / "b.h5", 1)))
    monkeypatch.chdir(tmp_path)
    cells = json.loads(nb.read_text())["cells"]
    code = [("".join(c["source"])) for c in cells if c["cell_type"] == "code"]
    assert code, "a notebook without code"
    ns: dict = {}
    for src in code:
        exec(compile(src, f"{nb.name}", "exec"), ns)  # noqa: S102
    assert 0 <= ns["m"]["R@1"] <= 1 and len(ns["rows"]) == 2
    # the scatter's share below the diagonal is the R@1 of the same split (Xuan §2.4)
    assert np.mean(ns["s_same"] > ns["s_diff"]) == pytest.approx(ns["m"]["R@1"])
