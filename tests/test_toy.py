"""Roth et al.'s toy example (supp. G; docs/methods.md §5): the mechanics, not the paper's claim."""

import json
import math

import numpy as np
import pytest

from embedscope.cli import main
from embedscope.train.toy import TRAIN_RANGES, summarize, toy_data, train_toy


def test_toy_data_layout():
    d = toy_data(1)
    assert d["Xtr"].shape == (60, 2) and d["Xte"].shape == (60, 2)
    assert np.bincount(d["ytr"]).tolist() == [15] * 4 and np.bincount(d["yte"]).tolist() == [15] * 4
    assert np.allclose(d["Xtr"][:, 0], d["Xtr"][:, 1])  # on the diagonal y = x
    for k, (lo, hi) in enumerate(TRAIN_RANGES):
        t = d["Xtr"][d["ytr"] == k, 0]
        assert t.min() >= lo - 1e-6 and t.max() <= hi + 1e-6
        grid = np.linspace(lo, hi, 100)
        assert all(np.isclose(grid, v, atol=1e-6).any() for v in t)  # 15 of the 100 linspace points
    te, y = d["Xte"], d["yte"]
    assert np.allclose(te[y == 0, 0], 0.2) and np.allclose(te[y == 1, 0], 0.2)
    assert np.allclose(te[y == 2, 1], 0.2) and np.allclose(te[y == 3, 1], 0.2)
    assert te[y == 1, 1].min() >= 0.55 - 1e-6 and te[y == 3, 0].max() <= 0.9 + 1e-6


def test_code_variant_lowers_rho_and_switch_rate():
    base = train_toy("baseline", 1)
    code = train_toy("code", 1)
    # the embeddings are unit vectors; rho over all (two) singular values
    s = np.linalg.svd(base["emb_train"], compute_uv=False)
    p = s / s.sum()
    assert base["rho"] == pytest.approx(float(np.mean(np.log(0.5 / p))), rel=1e-9)
    assert code["rho"] < 0.3 * base["rho"]
    assert base["switch_rate"] == 0 and base["r1_train"] == 1.0
    n = code["triplets"]
    assert abs(code["switch_rate"] - 0.001) < 5 * math.sqrt(0.001 * 0.999 / n)


def test_switch_rate_at_a_larger_p():
    r = train_toy("paper", 2, p_switch=0.2, iterations=30)
    assert abs(r["switch_rate"] - 0.2) < 5 * math.sqrt(0.2 * 0.8 / r["triplets"])
    assert summarize([r])[0]["switch_rate"] == pytest.approx(r["switch_rate"])


def test_toy_cli(tmp_path, capsys):
    out = tmp_path / "toy"
    assert main(["toy", "-o", str(out), "--n-seeds", "2", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "baseline" in text and "code" in text and "±" in text
    for f in ("fig6.png", "fig6.pdf", "toy_table.csv", "toy_table.json"):
        assert (out / f).stat().st_size > 0
    js = json.loads((out / "toy_table.json").read_text())
    assert [r["variant"] for r in js["summary"]] == ["baseline", "paper", "code"] and len(js["runs"]) == 6
    rows = {r["variant"]: r for r in js["summary"]}
    runs = [r["rho"] for r in js["runs"] if r["variant"] == "code"]
    assert rows["code"]["rho_train_mean"] == pytest.approx(np.mean(runs))
    assert rows["code"]["rho_train_std"] == pytest.approx(np.std(runs, ddof=1))
    assert main(["toy", "-o", str(out), "--n-seeds", "1", "--no-progress"]) == 1  # refuses to overwrite
