"""The notebooks read against what they compute (audit 28): static checks, no kernel.

What each notebook's introduction promises (what it shows, how long its full settings take, how the
tests run it), and the demo numbers notebook 02 prints beside its own are the README's."""

import ast
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# a duration a reader can plan with: "about 25 minutes", "4–5 min", "a few seconds", "1.6 min"
DURATION = re.compile(r"(about|a few|\d+(\.\d+)?([–-]\d+)?) (minutes?|min|seconds|s)\b")


def _flat(text):
    return " ".join(text.split())


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_first_cell_says_what_and_how_long(nb):
    """The first cell is the notebook's introduction: a title, and how long a full run takes; a study
    notebook also names `make notebooks` (full settings) and EMBEDSCOPE_NB_SMALL (the tests' settings)."""
    first = nbformat.read(nb, as_version=4).cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# ")
    text = _flat(first.source)
    assert DURATION.search(text), f"{nb.name}: the introduction does not say how long it runs"
    if nb.name[0].isdigit():
        assert "make notebooks" in text and "EMBEDSCOPE_NB_SMALL=1" in text, nb.name


def test_rho_notebook_prints_the_readme_demo_numbers_of_both_machines():
    """02 prints its run beside `make demo`'s numbers: the dict it compares with holds the README's
    two quotes (the reference machine's and the 2-core AMD EPYC machine's), digit for digit."""
    readme = _flat((ROOT / "README.md").read_text())
    ref = re.search(r"lower training ρ \((\d\.\d+) vs (\d\.\d+)\) and reached a higher test R@1 "
                    r"\((\d\.\d+) vs (\d\.\d+); the untrained network: (\d\.\d+)\)", readme)
    other = re.search(r"AMD EPYC machine gave (\d\.\d+) vs (\d\.\d+) and (\d\.\d+) vs (\d\.\d+) \(", readme)
    drawn = re.search(r"drawn per image \([^)]*\) (\d\.\d+) vs (\d\.\d+) and (\d\.\d+) vs (\d\.\d+)", readme)
    assert ref and other and drawn, "README's demo sentences changed: update this test and notebook 02 together"
    book = nbformat.read(ROOT / "notebooks" / "02_rho_regularisation.ipynb", as_version=4)
    code = "\n".join(c.source for c in book.cells if c.cell_type == "code")
    tree = ast.parse("\n".join(ln for ln in code.splitlines() if not ln.startswith("%")))
    node = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                and any(getattr(t, "id", None) == "quoted" for t in n.targets))
    quoted = list(ast.literal_eval(node).values())
    f = lambda groups: [float(v) for v in groups]
    want_ref = {"rho": f(ref.groups()[:2]), "R@1": f(ref.groups()[2:])}
    # the other machine's untrained network is the reference machine's (it does not train)
    want_other = {"rho": f(other.groups()[:2]), "R@1": f(other.groups()[2:]) + [float(ref.group(5))]}
    # and the same machine's since the augmentations are drawn per image (session 37)
    want_drawn = {"rho": f(drawn.groups()[:2]), "R@1": f(drawn.groups()[2:]) + [float(ref.group(5))]}
    assert [{k: list(v) for k, v in q.items()} for q in quoted] == [want_ref, want_other, want_drawn]
    text = _flat(" ".join(c.source for c in book.cells if c.cell_type == "markdown"))
    rho_o, rho_p, r1_o, r1_p = other.groups()
    assert f"ρ {rho_o} vs {rho_p} and R@1 {r1_o} vs {r1_p}" in text
