"""Thirtieth session (lead): long model names in the command tables, long figure titles."""

import numpy as np
import pytest
from cli_run import cli_output

from embedscope.analyses.result import DISPLAY_CELL, _short_unique
from embedscope.store import save
from embedscope.store.embeddings import EmbeddingSet


def test_names_shortened_alike_are_kept_longer_until_they_differ():
    a = "runs/" + "x" * 40 + "/seed0/" + "y" * 40 + "/net"
    b = "runs/" + "x" * 40 + "/seed1/" + "y" * 40 + "/net"
    plain = [a[:11] + "…" + a[-24:], b[:11] + "…" + b[-24:]]
    assert plain[0] == plain[1]  # the middle-cut names would read alike
    shown = _short_unique([a, b, "short"], DISPLAY_CELL)
    assert shown[0] != shown[1] and shown[2] == "short"
    assert all("…" in s and len(s) < len(a) for s in shown[:2])
    # whole names when nothing else tells them apart; equal names stay equal (no endless growth)
    assert _short_unique([a, a], 10) == [a, a]
    assert _short_unique([a, b], None) == [a, b]


def _set(path, seed):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(6), 10)
    es = EmbeddingSet(rng.normal(size=(60, 8)).astype(np.float32), y, np.array([f"i{i}.png" for i in range(60)]),
                      np.where(y < 3, "train", "test"), np.array([str(c) for c in range(6)]))
    save(path, es)


@pytest.mark.parametrize("command", [["evaluate", "--no-progress"], ["spectrum", "--split", "test"]])
def test_long_model_names_are_shortened_in_the_command_table_and_whole_in_the_csv(tmp_path, command):
    long1 = tmp_path / ("model_" + "a" * 80 + "_one.h5")
    long2 = tmp_path / ("model_" + "a" * 80 + "_two.h5")
    _set(long1, 0)
    _set(long2, 1)
    csv = tmp_path / "t.csv"
    out = cli_output([command[0], str(long1), str(long2), *command[1:], "--csv", str(csv)])
    header = next(ln for ln in out.splitlines() if ln.startswith("measure"))
    assert long1.stem not in header and long2.stem not in header
    assert "one" in header and "two" in header and len(header) < 2 * DISPLAY_CELL + 30
    text = csv.read_text()
    assert long1.stem in text and long2.stem in text


def test_a_title_wider_than_the_figure_is_wrapped_not_widening_the_image():
    import io

    from PIL import Image

    from embedscope.viz.figures import use_agg
    from embedscope.viz.spectrum import plot_spectra
    from embedscope.viz.style import clean_figure

    use_agg()
    s = np.linspace(1.0, 0.1, 16)
    entries = [{"label": "m", "spectrum": s, "rho": 0.1, "class_mean": s, "class_std": 0.1 * s}]
    widths = {}
    for by_class in (False, True):
        for name, title in (("short", "Spectra"), ("long", "A very long title " * 15)):
            fig = plot_spectra(entries, by_class=by_class, title=title)
            texts = [fig._suptitle] if by_class else [fig.axes[0].title]
            shown = texts[0].get_text()
            if name == "long":  # wrapped; at most MAX_TITLE_LINES lines (a small figure), the last ending as the title does
                lines = shown.split("\n")
                assert 2 <= len(lines) <= 5 and " ".join(lines[:-1]).split() == title.split()[:len(" ".join(lines[:-1]).split())]
                if lines[-1].startswith("…"):  # (the one-panel figure: 3.5 x 2.7 in)
                    assert not by_class and title.rstrip().endswith(lines[-1][1:])
                else:
                    assert shown.replace("\n", " ").split() == title.split()
            else:
                assert shown == title
            clean_figure(fig)  # as save_figure does, after the layout: a wrapped title is fitted again
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=60, bbox_inches="tight")  # as save_figure, at a low dpi
            widths[name, by_class] = Image.open(buf).size[0]
        # (before: the 270-character title made the saved image 2-3 times wider than the figure)
        assert widths["long", by_class] <= widths["short", by_class] * 1.05


def test_the_phase_line_counts_in_english():
    import io

    from embedscope.progress import LineProgress

    def line(unit, n, total):
        out = io.StringIO()
        bar = LineProgress(total=total, desc="phase", unit=unit, stream=out)
        bar.update(n)
        bar.close()
        return out.getvalue().split(" in ")[0]

    assert line("file", 2, 2) == "phase: 2/2 files"
    assert line("file", 1, 1) == "phase: 1/1 file"
    assert line("batch", 8, 8) == "phase: 8/8 batches"
    assert line("query", 3, None) == "phase: 3 queries"
    assert line("img", 5, 5) == "phase: 5/5 img"  # an abbreviation as tqdm shows it
    assert line("checkpoint", 0, 2) == "phase: 0/2 checkpoints"


def test_the_row_blocks_read_their_size_at_each_call(monkeypatch):
    """(A module default bound at definition had made tests that patch _BLOCK_VALUES read one block.)"""
    from embedscope.store import embeddings as emb

    assert len(list(emb._row_blocks((50, 6)))) == 1
    monkeypatch.setattr(emb, "_BLOCK_VALUES", 12)
    assert [(s.start, s.stop) for s in emb._row_blocks((5, 6))] == [(0, 2), (2, 4), (4, 5)]


def test_the_untrained_count_says_how_many_of_its_runs_exclude_left_out():
    """`study --exclude`: 'no better than the untrained network: 2 of 16' beside a table of 8 runs, with no
    word that the count took the excluded runs too."""
    from test_audit24_options_study import SPLITS, _table

    from embedscope.study.stats import study_statistics

    df = _table([0.2, 0.6, 0.3, 0.9], [0.5, 0.5])  # rho: l0_s1 and l1_s1 no better than their untrained
    s = study_statistics(df, target="rho", n_boot=0, splits=SPLITS, exclude=["loss==softmax"])
    u = s["untrained"]
    runs = s["_runs"].set_index("id")
    out = [i for i in ("l0_s0", "l0_s1", "l1_s0", "l1_s1") if runs.loc[i, "excluded"]]
    assert out == ["l1_s0", "l1_s1"]  # brute force: the softmax runs
    assert u["selected_no_better"] == ["l0_s1", "l1_s1"] and u["selected_compared"] == 4
    assert (u["excluded_no_better"], u["excluded_compared"]) == (1, 2)
    s = study_statistics(df, target="rho", n_boot=0, splits=SPLITS)
    assert (s["untrained"]["excluded_no_better"], s["untrained"]["excluded_compared"]) == (0, 0)


def test_study_and_report_say_the_excluded_share_of_the_untrained_count(tmp_path, monkeypatch, capsys):
    import embedscope.study.run as study_run
    from embedscope.cli import main
    from embedscope.study.report import _untrained

    u = {"selected_no_better": ["a", "b"], "selected_compared": 16, "excluded_no_better": 1, "excluded_compared": 8,
         "direction": "higher"}
    stats = {"correlations": [], "ranking": [], "n_points": {"runs": 0, "objectives": 0}, "target": "R@1",
             "untrained": u, "figures": []}
    monkeypatch.setattr(study_run, "run_study", lambda *a, **k: {"stats": stats, "errors": [], "rows": []})
    (tmp_path / "ckpts").mkdir()
    assert main(["study", str(tmp_path / "ckpts"), "-o", str(tmp_path / "st"), "--no-progress"]) == 0
    assert ("selected checkpoints no better than the untrained network: 2 of 16, of which 1 of the 8 left out "
            "by --exclude") in capsys.readouterr().out
    assert "of which 1 of the 8 left out by the exclusions" in "".join(_untrained(stats, []))
    u.update(excluded_no_better=0, excluded_compared=0)
    assert main(["study", str(tmp_path / "ckpts"), "-o", str(tmp_path / "st2"), "--no-progress"]) == 0
    assert capsys.readouterr().out.count("untrained network: 2 of 16\n") == 1



def test_overlapping_single_thread_blas_blocks_of_two_threads_restore_the_count(monkeypatch):
    """A opens, B opens, A closes, B closes: each block restoring its own saved count left the process
    on one BLAS thread for good (B saved the 1 that A had set). A stand-in for threadpoolctl's controller
    holds the process-wide count (the bundled OpenBLAS ignores a count set from a thread other than the
    main one, so the real library cannot show it here)."""
    import sys
    import threading

    from embedscope.metrics.search import threads

    state = {"n": 2, "sets": 0}

    class Limit:
        def __init__(self):
            self.saved, state["n"] = state["n"], 1
            state["sets"] += 1

        def restore_original_limits(self):
            state["n"] = self.saved

        def __enter__(self):  # (threadpoolctl's limiter is a context too)
            return self

        def __exit__(self, *exc):
            self.restore_original_limits()

    class Controller:
        def limit(self, limits, user_api):
            assert (limits, user_api) == (1, "blas")
            return Limit()

    monkeypatch.setattr(threads, "_BLAS", Controller())
    monkeypatch.setattr(threads, "_BLAS_MODULES", len(sys.modules))
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with threads.blas_single_thread():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b():
        a_in.wait(5)
        with threads.blas_single_thread():
            b_in.set()
            a_out.wait(5)
            seen["B, after A closed"] = state["n"]  # still one thread: B's block is open

    ts = [threading.Thread(target=f) for f in (a, b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    assert seen == {"B, after A closed": 1} and state == {"n": 2, "sets": 1}
    with threads.blas_single_thread():  # nested in one thread: the same
        with threads.blas_single_thread():
            assert state["n"] == 1
        assert state["n"] == 1
    assert state == {"n": 2, "sets": 2}


def test_single_thread_blas_from_the_main_thread_is_one_thread_and_restored():
    import numpy as np  # noqa: F401 (its BLAS loaded)
    from threadpoolctl import ThreadpoolController, threadpool_limits

    from embedscope.metrics.search.threads import blas_single_thread

    def blas_threads():
        return {m["num_threads"] for m in ThreadpoolController().select(user_api="blas").info()}

    with threadpool_limits(limits=2, user_api="blas"):
        if blas_threads() != {2}:  # pragma: no cover - a BLAS without thread control
            pytest.skip("no BLAS whose threads threadpoolctl sets")
        with blas_single_thread():
            with blas_single_thread():
                assert blas_threads() == {1}
            assert blas_threads() == {1}
        assert blas_threads() == {2}


@pytest.mark.parametrize("given,shown", [(0, "the data set's own split"), (3, "3")])
def test_info_of_a_maps_file_says_what_train_classes_0_means(tmp_path, given, shown):
    from embedscope.store.saliency import SaliencyMaps, save_maps

    sm = SaliencyMaps(maps=np.full((2, 4, 4), 0.5, np.float32), paths=np.array(["a.png", "b.png"]),
                      labels=np.array([0, 1]), class_names=np.array(["x", "y"]),
                      attrs={"train_classes": given, "split": "test"})
    save_maps(tmp_path / "m.h5", sm)
    rows = [ln.split(None, 1) for ln in cli_output(["info", str(tmp_path / "m.h5")]).splitlines()]
    assert ["train_classes", shown] in rows


@pytest.mark.parametrize("loc", ["left", "center", "right"])
def test_a_long_panel_title_is_wrapped_inside_the_canvas_wherever_it_is_anchored(loc):
    import matplotlib.pyplot as plt

    from embedscope.viz.style import clean_figure

    fig, ax = plt.subplots(figsize=(4, 3))
    try:
        t = ax.set_title("word " * 60, loc=loc)
        clean_figure(fig)
        e = t.get_window_extent(fig.canvas.get_renderer())
        assert t.get_text().count("\n") >= 3 and 0 <= e.x0 and e.x1 <= fig.bbox.width
    finally:
        plt.close(fig)


def test_a_title_set_again_after_its_wrap_is_taken_as_given():
    import matplotlib.pyplot as plt

    from embedscope.viz.style import clean_figure

    fig, ax = plt.subplots(figsize=(4, 3))
    try:
        ax.set_title("word " * 30)
        clean_figure(fig)
        assert "\n" in ax.get_title()
        clean_figure(fig)  # again: wrapped from the whole text, the same
        assert ax.get_title().replace("\n", " ").split() == ["word"] * 30
        ax.set_title("short")  # another text since: not the earlier one back
        clean_figure(fig)
        assert ax.get_title() == "short"
    finally:
        plt.close(fig)
