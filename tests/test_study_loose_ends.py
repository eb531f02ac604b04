"""Loose ends of the study package (each test fails on the code before its fix, but for the one that
says it pins behaviour kept)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd

from embedscope.study.stats import study_notes, study_statistics


def _rows(datasets=("digits",), losses=("margin", "triplet", "contrastive"), seeds=(0, 1), seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for ds in datasets:
        for loss in losses:
            for s in seeds:
                rows.append({"id": f"{ds}_{loss}_s{s}", "run": f"{ds}_{loss}_s{s}", "selection": "best",
                             "status": "ok", "loss": loss, "seed": s, "normalize": True, "untrained": "", "epoch": 2,
                             "dataset": ds, "embed_dim": 16, "checkpoint": f"/c/{ds}_{loss}_s{s}.pt",
                             "sha256": "ab" * 32,
                             **{m: float(rng.uniform(0.2, 0.9)) for m in ("R@1", "rho", "pi_ratio")}})
    return rows


SPLITS = {"rho": "train", "pi_ratio": "train"}


# ------------------------------------------------------------------------------------ figure names
def test_the_figure_names_are_one_list_and_the_command_line_imports_no_matplotlib():
    from embedscope.study.run import STUDY_FIGURES
    from embedscope.viz.study import FIGURES

    assert tuple(name for name, _ in FIGURES) == STUDY_FIGURES
    code = ("import sys\n"
            "from embedscope.cli import main\n"
            "try:\n    main(['study', '--help'])\nexcept SystemExit:\n    pass\n"
            "import embedscope.cli.study, embedscope.study.run\n"
            "from embedscope.study.run import STUDY_FIGURES, stale_figures\n"
            "print('matplotlib' in sys.modules, any(m.startswith('matplotlib.') for m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-2:] == ["False", "False"]
    # (before: the names were written twice, in embedscope.viz.study and embedscope.study.run)
    import inspect

    import embedscope.viz.study as viz

    assert '"fig5_structure_vs_target"' not in inspect.getsource(viz)


# ------------------------------------------------------------------------------- measured data sets
def test_study_statistics_takes_the_data_sets_the_runs_were_measured_on():
    rows = _rows(("cub200", "cars196"))
    trained = study_statistics(pd.DataFrame(rows), n_boot=0, splits=SPLITS)
    assert trained["datasets"] == ["cars196", "cub200"]
    assert any("2 data sets" in line for line in study_notes(trained))
    # study --dataset cub200: every run measured on CUB (before: study_statistics took no such argument,
    # and finish_study replaced what it computed)
    one = study_statistics(pd.DataFrame(rows), n_boot=0, splits=SPLITS,
                           measured={r["id"]: "cub200" for r in rows})
    assert one["datasets"] == ["cub200"] and not any("data sets" in line for line in study_notes(one))
    # a run left out by --exclude is not counted; a row that does not say (None) counts as trained
    part = study_statistics(pd.DataFrame(rows), n_boot=0, splits=SPLITS, exclude=["dataset==cars196"],
                            measured={r["id"]: (None if r["dataset"] == "cub200" else "shapes") for r in rows})
    assert part["datasets"] == ["cub200"]


# ------------------------------------------------------------------------ the report's stale figures
def test_the_report_names_the_figures_of_an_earlier_run(tmp_path):
    from embedscope.study.report import build_report
    from embedscope.study.run import STUDY_FIGURES, finish_study

    d = tmp_path / "study"
    d.mkdir()
    finish_study(d, _rows(), n_boot=0, seed=1, figures=True)
    finish_study(d, _rows(seed=1), n_boot=0, seed=1, figures=False)  # the same study again, --no-figures
    (d / "study.json").write_text(json.dumps({"settings": {"source": "runs/", "epoch": "best", "metric": "cosine",
                                                           "seed": 1, "device": "cpu"}, "versions": {}}))
    page = build_report(d)
    assert "<img" not in page  # (left out, as before)
    # (before: not named at all)
    assert f"figures/ also holds {STUDY_FIGURES[0]}.png, {STUDY_FIGURES[0]}.pdf" in page
    assert "not drawn from these statistics" in page


