"""What the notebooks' prose quotes agrees with its sources, and what they train is named by its settings.

Static checks of notebooks/*.ipynb (no kernel; the executions are tests/test_notebooks*.py)."""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NB = ROOT / "notebooks"


def _cells(name, kind):
    return [c.source for c in nbformat.read(NB / f"{name}.ipynb", as_version=4).cells if c.cell_type == kind]


def _flat(text):
    return " ".join(text.split())


def test_rho_notebook_quotes_the_demo_as_the_readme_and_demo_script_state():
    """02 compares its digits models with `make demo`'s: the numbers are the README's, and the
    protocol (D, epochs) is the one scripts/demo.sh runs and the notebook's full settings use."""
    readme = _flat((ROOT / "README.md").read_text())
    m = re.search(r"lower training ρ \((\d\.\d+) vs (\d\.\d+)\) and reached a higher test R@1 "
                  r"\((\d\.\d+) vs (\d\.\d+); the untrained network: (\d\.\d+)\)", readme)
    assert m, "README's demo sentence changed: update this test and notebook 02 together"
    rho_reg, rho_plain, r1_reg, r1_plain, r1_unt = m.groups()
    demo = (ROOT / "scripts" / "demo.sh").read_text()
    d, epochs = re.search(r"--p-switch 0\.3 --embed-dim (\d+) --epochs (\d+)", demo).groups()
    text = _flat(" ".join(_cells("02_rho_regularisation", "markdown")))
    quote = text[text.index("`make demo`"):]
    assert f"D = {d}, {epochs} epochs" in quote
    assert f"ρ {rho_reg} (regularised) vs {rho_plain}" in quote
    assert f"R@1 {r1_reg} vs {r1_plain}" in quote and f"untrained network {r1_unt}" in quote
    params = _cells("02_rho_regularisation", "code")[0]
    full = re.search(r"else:.*\n\s*TOY_SEEDS, EPOCHS, D = .*?, (\d+), (\d+)\n", params)
    assert full and full.groups() == (epochs, d), "the full settings are make demo's protocol, as the text says"


def test_correlation_notebook_quotes_roth_as_methods_states():
    """01 quotes Roth's Fig. 5 and Fig. 4 values (METHODS.md §6) in its introduction and its table."""
    from embedscope.study.report import PUBLISHED_FIG4, PUBLISHED_FIG5

    minus = lambda v: f"{v:+.2f}".replace("-", "−").lstrip("+")
    text = _flat(" ".join(_cells("01_correlation_figures", "markdown")))
    rho = PUBLISHED_FIG5["rho"]
    assert f"ρ: {minus(rho['CUB'])} CUB, {minus(rho['CARS'])} CARS, {minus(rho['SOP'])} SOP" in text
    names = {"rho": "ρ", "pi_ratio": "π_ratio", "pi_intra": "π_intra", "pi_inter": "π_inter"}
    lines = "\n".join(_cells("01_correlation_figures", "markdown")).splitlines()
    for m, pub in PUBLISHED_FIG5.items():
        row = [ln for ln in lines if ln.startswith(f"| {names[m]} |")]
        assert len(row) == 1, m
        quoted = [v.strip() for v in row[0].split("|")[-2].split("/")]
        want = [f"{pub[k]:+.2f}".replace("-", "−") for k in ("CUB", "CARS", "SOP")]
        assert quoted == want, (m, quoted, want)
    for (a, b), v in PUBLISHED_FIG4.items():
        assert re.search(rf"{re.escape(a)}–{re.escape(b)} \d\.\d+ \((?:Roth CUB )?{v:.2f}\)", text), (a, b)


@pytest.mark.parametrize("name", ["02_rho_regularisation", "03_saliency", "05_how_embeddings_generalize"])
def test_reused_checkpoints_are_named_by_their_settings(name):
    """A finished run is reused when its file exists: the file name must carry the settings (embedding
    size, and the epochs for a trained one), or a rerun with other settings reads a stale model."""
    code = "\n".join(_cells(name, "code"))
    paths = re.findall(r'OUT / f?"([^"]*\.pt)"', code)
    assert paths
    for p in paths:
        assert "{D}" in p, p
        assert "untrained" in p or "{EPOCHS}" in p, p


def test_properties_notebook_names_its_run_folder_by_its_settings():
    code = "\n".join(_cells("04_properties", "code"))
    run = re.search(r'RUN = OUT / f"([^"]+)"', code)
    assert run and all(k in run.group(1) for k in ("{EPOCHS}", "{BATCH}", "{SAMPLER}", "{SEED}", "{SET.name}"))
    assert re.search(r"trained, untrained = RUN / ", code)


def test_saliency_notebook_quotes_the_docs_table():
    """03 compares its seed-to-seed agreement with docs/saliency.md's digits table: the same value."""
    docs = (ROOT / "docs" / "saliency.md").read_text()
    table = re.search(r"^\| margin seed 0 – margin seed 1 [^|]*\| (\d\.\d+) \(", docs, re.M)
    assert table, "docs/saliency.md's digits table changed: update this test and notebook 03 together"
    text = _flat(" ".join(_cells("03_saliency", "markdown")))
    quoted = re.search(r"`docs/saliency\.md`'s table measured (\d\.\d+) for two margin seeds", text)
    assert quoted and quoted.group(1) == table.group(1)
