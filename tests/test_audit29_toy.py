"""The toy example's figure (``embedscope toy``, notebook 02; Roth supp. G, Fig. 6): the variants'
bars are drawn in black and white, told apart by fill and hatching, because every colour of the
figure is a class's (the paper's bars were training class 1's blue, the code's class 4's red)."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest
from cli_run import run_cli
from matplotlib.colors import to_rgba

from embedscope.train.toy import VARIANT_BARS, VARIANTS, toy_data, toy_figure


@pytest.fixture(scope="module")
def figure():
    """The figure of stand-in results (no training: random unit embeddings of the toy data)."""
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(0)
    data = toy_data(1)
    results = []
    for j, v in enumerate(VARIANTS):
        E = [rng.standard_normal((60, 2)) for _ in range(2)]
        Etr, Ete = (e / np.linalg.norm(e, axis=1, keepdims=True) for e in E)
        s = np.linalg.svd(Etr, compute_uv=False)
        results.append({"variant": v, "seed": 1, "p_switch": 0.0 if v == "baseline" else 0.001, "data": data,
                        "emb_train": Etr, "emb_test": Ete, "singular_values": s, "rho": 0.1 * (j + 1),
                        "r1_train": 1.0, "r1_test": 0.5})
    fig = toy_figure(results, 1)
    yield fig
    plt.close(fig)


def _class_colours(fig) -> set:
    """Every colour (RGB) a point of the figure is drawn in (the classes', train and test)."""
    out = set()
    for ax in fig.axes:
        for c in ax.collections:
            out |= {tuple(np.round(x[:3], 6)) for x in c.get_facecolors()}
    return out


def test_the_variant_bars_take_no_class_colour_and_differ(figure):
    classes = _class_colours(figure)
    assert len(classes) == 8  # (4 training classes, 4 test classes, tab10's first eight)
    ax = figure.axes[4]  # the spectra (row 2, column 1)
    assert ax.get_title() == "Spectra of training embeddings"
    bars = [b for b in ax.patches if isinstance(b, matplotlib.patches.Rectangle)]
    assert len(bars) == 2 * len(VARIANTS)
    taken = [(v, c) for j, v in enumerate(VARIANTS) for b in bars[2 * j:2 * j + 2]
             for c in (b.get_facecolor(), b.get_edgecolor()) if tuple(np.round(c[:3], 6)) in classes]
    assert not taken, taken  # (was: paper in training class 1's blue, code in class 4's red)
    looks = []
    for j, v in enumerate(VARIANTS):
        mine = bars[2 * j:2 * j + 2]  # (each variant's two singular values, one after the other)
        for b in mine:
            assert b.get_facecolor() == to_rgba(VARIANT_BARS[v]["facecolor"])
            assert (b.get_hatch() or "") == VARIANT_BARS[v].get("hatch", "")
        looks.append((mine[0].get_facecolor(), mine[0].get_hatch()))
    assert len(set(looks)) == len(VARIANTS)  # each variant its own look
    # the legend shows the same looks, named with each variant's rho
    leg = ax.get_legend()
    assert [t.get_text() for t in leg.get_texts()] == [f"{v} (ρ={0.1 * (j + 1):.3f})" for j, v in enumerate(VARIANTS)]
    handles = leg.legend_handles if hasattr(leg, "legend_handles") else leg.legendHandles
    assert [(h.get_facecolor(), h.get_hatch()) for h in handles] == looks


def test_toy_table_shows_the_switch_probability_as_given(tmp_path, monkeypatch):
    """--p-switch 0.00015 showed as 0.0001 in the terminal table (4 decimals: as if another setting had
    run), its switch rate as 0.0001 too; now the probability as given and the rate to 3 digits."""
    import embedscope.train.toy as toy

    def fake_run_toy(out, *, seeds, first_seed, p_switch, force, progress):  # (the table only: no training)
        rows = [{"variant": v, "p_switch": 0.0 if v == "baseline" else p_switch, "seeds": seeds,
                 **{f"{k}_{s}": 0.5 for k in ("rho_train", "R@1_test", "R@1_train") for s in ("mean", "std")},
                 "switch_rate": 0.0 if v == "baseline" else 0.000149321} for v in VARIANTS]
        return {"rows": rows, "runs": [], "files": [f"{out}/fig6.png"]}

    monkeypatch.setattr(toy, "run_toy", fake_run_toy)
    rc, out, err = run_cli(["toy", "-o", str(tmp_path / "t"), "--p-switch", "0.00015", "--n-seeds", "2",
                            "--no-progress"])
    assert rc == 0, err
    table = {line.split()[0]: line.split() for line in out.splitlines()[3:6]}
    assert [table[v][1] for v in VARIANTS] == ["0", "0.00015", "0.00015"]
    assert [table[v][-1] for v in VARIANTS] == ["0", "0.000149", "0.000149"]
    assert table["paper"][2:5] == ["0.500", "±", "0.500"]
