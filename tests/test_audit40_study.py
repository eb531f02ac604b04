"""Findings of the fortieth session's audit of the study workflow (each test fails on the code before
its fix)."""

from __future__ import annotations

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
                             "dataset": ds, "batch_size": 40 if ds == "digits" else 64, "embed_dim": 16,
                             "checkpoint": f"/c/{ds}_{loss}_s{s}.pt", "sha256": "ab" * 32,
                             **{m: float(rng.uniform(0.2, 0.9)) for m in ("R@1", "rho", "pi_ratio")}})
    return rows


SPLITS = {"rho": "train", "pi_ratio": "train"}


def test_runs_of_two_data_sets_are_labelled_by_their_data_set_and_said_not_to_compare():
    st = study_statistics(pd.DataFrame(_rows(("digits", "shapes"))), n_boot=0, splits=SPLITS)
    labels = set(st["_runs"]["objective"])
    assert "margin dataset=shapes" in labels and not any("batch_size" in lab for lab in labels)  # (was: batch_size=64)
    assert st["datasets"] == ["digits", "shapes"]
    assert any("2 data sets (digits, shapes)" in line and "dataset!=digits" in line for line in study_notes(st))
    one = study_statistics(pd.DataFrame(_rows()), n_boot=0, splits=SPLITS)
    assert one["datasets"] == ["digits"] and not any("data sets" in line for line in study_notes(one))


def test_no_figures_names_the_study_figures_of_an_earlier_run(tmp_path, capsys, monkeypatch):
    from embedscope.cli import main
    from embedscope.study.run import STUDY_FIGURES, finish_study

    d = tmp_path / "study"
    d.mkdir()
    finish_study(d, _rows(), n_boot=0, seed=1, figures=True)
    (d / "figures" / "mine.png").write_bytes(b"not the study's")

    def run_study(source, out, **kw):  # the same study again, --no-figures (nothing measured)
        res = finish_study(d, _rows(seed=1), n_boot=0, seed=1, figures=False)
        return {"rows": _rows(seed=1), "stats": res["stats"], "errors": [], "computed": [], "paths": res["paths"]}

    import embedscope.study.run as run_mod

    monkeypatch.setattr(run_mod, "run_study", run_study)
    assert main(["study", str(tmp_path), "-o", str(d), "--no-figures", "--no-progress"]) == 0
    out = capsys.readouterr().out
    # kept (an output already written), but said (before: nothing said, a Fig. 5 of other values beside them)
    assert (d / "figures" / f"{STUDY_FIGURES[0]}.png").exists()
    assert f"still holds {STUDY_FIGURES[0]}.png, {STUDY_FIGURES[0]}.pdf" in out and "mine.png" not in out


def test_a_signal_in_a_worker_thread_is_an_ordinary_exception_there():
    import signal
    import threading

    import pytest

    from embedscope import progress
    from embedscope.errors import Interrupted

    progress.note_signal(signal.SIGINT)
    try:
        with pytest.raises(KeyboardInterrupt):
            progress.check_signals()  # the main thread: the command stops
        got = []

        def work():
            try:
                progress.check_signals()
            except Exception as e:  # noqa: BLE001 - (before: KeyboardInterrupt, which broke a Dask worker)
                got.append(e)

        t = threading.Thread(target=work)
        t.start()
        t.join()
        assert len(got) == 1 and isinstance(got[0], Interrupted)
    finally:
        progress.clear_signals()


def test_a_swallowed_ctrl_c_still_ends_the_command_as_interrupted(monkeypatch, tmp_path, capsys):
    import signal

    import embedscope.cli.info as info
    from embedscope import progress
    from embedscope.cli import main

    def run(args):  # a Ctrl-C whose KeyboardInterrupt something swallowed ("Exception ignored in ...")
        progress.note_signal(signal.SIGINT)
        return 0

    monkeypatch.setattr(info, "run", run)
    assert main(["info", str(tmp_path / "x.h5")]) == 130  # (before: 0, the interrupt lost)
    assert "interrupted" in capsys.readouterr().err


def test_a_worker_threads_interrupt_reaching_the_command_line_is_an_interrupt(monkeypatch, tmp_path, capsys):
    import signal
    from concurrent.futures import ThreadPoolExecutor

    import embedscope.cli.info as info
    from embedscope import progress
    from embedscope.cli import main

    def run(args):  # a swallowed Ctrl-C, then a pool thread's progress step re-raised here (kNN tiles)
        progress.note_signal(signal.SIGINT)
        with ThreadPoolExecutor(1) as pool:
            pool.submit(progress.check_signals).result()
        return 0

    monkeypatch.setattr(info, "run", run)
    assert main(["info", str(tmp_path / "x.h5")]) == 130  # (before this fix: 'error: stopped ...', 1)
    assert capsys.readouterr().err.strip().endswith("interrupted")


def test_runs_trained_on_two_data_sets_but_measured_on_one_compare(tmp_path):
    from embedscope.study.run import DATA_KEY, finish_study

    rows = _rows(("cub200", "cars196"))
    for r in rows:  # study --dataset cub200: every run measured on CUB
        r[DATA_KEY] = ["cub200", "/data/cub", None, "f" * 16]
    d = tmp_path / "study"
    d.mkdir()
    st = finish_study(d, rows, n_boot=0, seed=1, figures=False)["stats"]
    assert st["datasets"] == ["cub200"] and not any("data sets" in line for line in study_notes(st))


def test_a_title_that_fitted_before_the_layout_is_measured_after_it():
    import matplotlib.pyplot as plt

    from embedscope.viz.style import EDGE_SLACK, clean_figure

    for n in range(4, 10):
        fig, ax = plt.subplots(figsize=(6, 3), layout="constrained")
        try:
            ax.plot([0, 1], [0, 1])
            ax.set_yticks([0, 1])
            ax.set_yticklabels(["a very very long tick label", "b"])  # the layout moves the panel right
            ax.set_title(" ".join(f"word{i:02d}" for i in range(n)))
            clean_figure(fig)
            fig.canvas.draw()
            e = ax.title.get_window_extent(fig.canvas.get_renderer())
            assert e.x1 <= fig.bbox.width * (1 + EDGE_SLACK)  # (before: 5-11% past the right edge)
        finally:
            plt.close(fig)


def test_label_values_of_bytes_and_of_float32_nan():
    import pytest

    from embedscope.errors import EmbedscopeError
    from embedscope.metrics.search.ranks import _labels

    assert _labels(np.array([b"caf\xc3\xa9", b"x", b"\xff", b"x"]), 4, "y").tolist() == [0, 1, 2, 1]
    with pytest.raises(EmbedscopeError, match="missing label"):
        _labels(np.array([1, 1, np.float32("nan"), 2], dtype=object), 4, "y")  # (not a float: was a class)


def test_after_a_signal_the_command_line_prints_no_unraisable_tracebacks(capsys, monkeypatch):
    import signal
    import types

    import embedscope.cli as cli
    from embedscope import progress
    from embedscope.cli import _unraisable_after_a_stop

    monkeypatch.setattr(cli, "_STOPPED", False)  # (no command of this process was stopped by a signal)

    try:
        raise AttributeError("'StorageWeakRef' object has no attribute '_free_weak_ref'")
    except AttributeError as e:
        err = e
    u = types.SimpleNamespace(exc_type=AttributeError, exc_value=err, exc_traceback=err.__traceback__,
                              err_msg="Exception ignored in", object=None)
    import sys

    seen = []
    real = sys.__unraisablehook__
    sys.__unraisablehook__ = seen.append  # (Python's own hook takes its C struct only)
    try:
        _unraisable_after_a_stop(u)  # no signal: handed to Python's hook
    finally:
        sys.__unraisablehook__ = real
    assert seen == [u]
    progress.note_signal(signal.SIGINT)
    try:
        _unraisable_after_a_stop(u)  # (before: a traceback after the command's "interrupted" line)
        assert capsys.readouterr().err == ""
    finally:
        progress.clear_signals()
