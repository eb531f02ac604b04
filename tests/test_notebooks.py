"""The quickstart notebook runs top to bottom in a real kernel against small embedding files."""

import re
from pathlib import Path

import numpy as np
import pytest

from embedscope import store

NB = Path(__file__).resolve().parent.parent / "notebooks" / "quickstart.ipynb"


def _file(path, seed):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(6), 20)
    X = rng.normal(size=(6, 16))[y] + 0.5 * rng.normal(size=(120, 16))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    es = store.EmbeddingSet(X.astype(np.float32), y, [f"i{i}" for i in range(120)],
                            np.where(y < 3, "train", "test"), [str(c) for c in range(6)])
    return store.save(path, es)


def test_quickstart_runs_in_a_kernel(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("EMBEDSCOPE_H5", str(_file(tmp_path / "a.h5", 0)))
    monkeypatch.setenv("EMBEDSCOPE_H5_B", str(_file(tmp_path / "b.h5", 1)))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NB, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "outputs must be stripped in git"
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    from test_notebooks_exec import cells_without_figures

    assert not cells_without_figures(nb)  # both figures are drawn, MPLBACKEND=Agg notwithstanding
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "R@1" in text and "share below the diagonal" in text
    # section 3 says whether the model of lower training rho is the one of higher test R@1
    assert re.search(r"^(lower training rho: (margin|R-margin); higher test R@1: (margin|R-margin) -> "
                     r"(the same model|not the same model)|both models have the same test R@1)", text, re.M)
    # the scatter's share below the diagonal is the R@1 of the same split (Xuan §2.4)
    line = next(ln for ln in text.splitlines() if ln.startswith("share below the diagonal"))
    share, r1 = float(line.split()[4]), float(line.split()[-1])
    assert share == pytest.approx(r1)
