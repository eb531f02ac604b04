"""Every notebook of notebooks/ (except the quickstart, run by test_notebooks.py) executes top to
bottom with nbclient at small settings (EMBEDSCOPE_NB_SMALL=1), in a kernel running this venv's Python."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))


def _kernel_env(tmp_path):
    """A kernelspec named python3 that starts this interpreter (the venv's), found first on the path."""
    kdir = tmp_path / "jupyter" / "kernels" / "python3"
    kdir.mkdir(parents=True)
    import json

    (kdir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (embedscope venv)", "language": "python"}))
    return str(tmp_path / "jupyter")


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes_small(nb, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("EMBEDSCOPE_NB_SMALL", "1")
    monkeypatch.setenv("EMBEDSCOPE_NB_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("EMBEDSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("JUPYTER_PATH", _kernel_env(tmp_path) + os.pathsep + os.environ.get("JUPYTER_PATH", ""))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter"))
    # started from elsewhere than the notebooks folder: the notebook must find its data itself
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    book = nbformat.read(nb, as_version=4)
    assert all(not c.get("outputs") for c in book.cells if c.cell_type == "code"), "outputs must be stripped in git"
    book.cells.insert(0, nbformat.v4.new_code_cell("import sys\nprint(sys.prefix)"))
    client = NotebookClient(book, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(workdir)}})
    client.execute()
    first = "".join(o.get("text", "") for o in book.cells[0].outputs)
    assert first.strip() == sys.prefix  # the venv's python ran it
    errors = [o for c in book.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert not cells_without_figures(book)


def cells_without_figures(book) -> list[int]:
    """Code cells that show a figure (``plt.show()``, ``display(Image(...))``) but have no PNG
    output: under MPLBACKEND=Agg (as `make test` and `make notebooks` set it) ``plt.show()``
    draws nothing unless the notebook selects the inline back-end itself."""
    return [i for i, c in enumerate(book.cells) if c.cell_type == "code"
            and ("plt.show()" in c.source or "display(Image(" in c.source)
            and not any("image/png" in o.get("data", {}) for o in c.outputs)]
