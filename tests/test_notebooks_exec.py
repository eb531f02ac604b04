"""Every notebook of notebooks/ (except the quickstart, run by test_notebooks.py) executes top to
bottom with nbclient at small settings (EMBEDSCOPE_NB_SMALL=1), in a kernel running this venv's Python."""

import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))
# what each notebook prints about its own numbers (the checks its prose rests on), at any settings
PRINTS = {
    "01_correlation_figures": [r"^-> (no selected checkpoint beats|every selected checkpoint beats|\d+ of \d+ selected)",
                               r"^rho: r = [+-]\d\.\d\d .* over \d+ objectives",
                               r"^(not the full shapes settings|differ by more than 0\.05)"],
    "02_rho_regularisation": [r"^training rho: regularised \d\.\d{3}, plain \d\.\d{3}, untrained \d\.\d{3} -> "
                              r"regularisation (lowered|did not lower) rho$", r"^-> the regulari(ser|sed model) ",
                              r"^lowest training rho: .*; highest test R@1: .* -> rho alone (ranks|does not rank) ",
                              r"^make demo as quoted above: .* this run differs by up to \d\.\d{3} \(rho\)"],
    "03_saliency": [r"^the noise ceiling \(\d\.\d{3}\) is above every between-model r \(max -?\d\.\d{3}\): (True|False)$",
                    *[rf"^(holds|does not hold) +{re.escape(c)}" for c in (
                        "training did not raise test R@1", "the two untrained networks agree most",
                        "same loss, two seeds agree more", "margin s0 agrees more with its sibling")]],
    "04_properties": [r"^largest group of test images sharing a property value: \d+ of \d+",
                      *[rf"^(holds|does not hold) +{re.escape(c)}" for c in (
                          "training beats the initialisation", "shape is the trained network's most clustered",
                          "the untrained network's top two", "every nuisance property", "the 2.576 rule misses")]],
    "05_how_embeddings_generalize": [*[rf"^{m} +{s}: +share below the diagonal" for m in ("trained", "untrained")
                                       for s in ("train", "test")],
                                     *[rf"^(holds|does not hold) +{re.escape(c)}" for c in (
                                         "the trained network fits", "training made retrieval on the unseen",
                                         "training widened the train-test gap")]],
}
# what each notebook's tables show (their HTML): 04's p-values in scientific notation, never rounded to 0
DISPLAYS = {"04_properties": [r"&lt; 1e-300|\d\.\de-\d+"]}


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
    streams = [o for c in book.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "stream"]
    assert not [o["text"] for o in streams if o["name"] == "stderr"]  # no warnings, no stray messages
    text = "".join(o["text"] for o in streams)
    for pattern in PRINTS[nb.stem]:
        assert re.search(pattern, text, re.M), pattern
    html = "".join(o.get("data", {}).get("text/html", "") for c in book.cells if c.cell_type == "code"
                   for o in c.outputs)
    for pattern in DISPLAYS.get(nb.stem, []):
        assert re.search(pattern, html), pattern
    # the scatter's share below the diagonal is the split's R@1 (Xuan §2.4), as the notebook says
    for share, r1 in re.findall(r"share below the diagonal (\d\.\d+) \| R@1 (\d\.\d+)", text):
        assert share == r1


def cells_without_figures(book) -> list[int]:
    """Code cells that show a figure (``plt.show()``, ``display(Image(...))``) but have no PNG
    output: under MPLBACKEND=Agg (as `make test` and `make notebooks` set it) ``plt.show()``
    draws nothing unless the notebook selects the inline back-end itself."""
    return [i for i, c in enumerate(book.cells) if c.cell_type == "code"
            and ("plt.show()" in c.source or "display(Image(" in c.source)
            and not any("image/png" in o.get("data", {}) for o in c.outputs)]
