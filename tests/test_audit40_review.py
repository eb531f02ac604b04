"""Findings of the fortieth session's second reading of the figure and analyses commits (each test
fails on the code before its fix)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError, UsageError


@pytest.fixture(autouse=True)
def _agg():
    from embedscope.viz.figures import use_agg

    use_agg()


def _extent(fig, t):
    return t.get_window_extent(fig.canvas.get_renderer())


def test_none_is_not_a_name_a_query_path_or_a_model_key():
    import embedscope.analyses as A
    from embedscope.analyses.result import unique_names
    from embedscope.metrics.properties import compare_groups

    with pytest.raises(UsageError, match="names must be strings, got None"):
        unique_names(["a.h5", "b.h5"], [None, "b"])
    X = np.random.default_rng(0).normal(size=(12, 4))
    y = np.arange(12) % 3
    from embedscope.store import EmbeddingSet

    es = EmbeddingSet.from_arrays(X, y, paths=[f"p{i}" for i in range(12)])
    with pytest.raises(EmbedscopeError, match="query paths must be strings .*got None"):
        A.neighbour_examples(es, split="test", k=2, paths=["p0", None])
    with pytest.raises(EmbedscopeError, match=r"values_by_model\[None\]"):
        compare_groups({None: 3}, {None: "g"})


def test_one_query_is_said_in_the_singular():
    import embedscope.analyses as A
    from embedscope.store import EmbeddingSet

    X = np.random.default_rng(0).normal(size=(12, 4))
    es = EmbeddingSet.from_arrays(X, np.arange(12) % 3, paths=[f"p{i}" for i in range(12)])
    assert A.neighbour_examples(es, split="test", k=2, paths=["p3"]).selection == "1 query given by path"
    assert A.neighbour_examples(es, split="test", k=2, queries=1, seed=0).selection == "1 random query, seed 0"


def test_a_narrow_cell_never_lengthens_a_short_text():
    from embedscope.analyses.result import Result, _short

    assert _short("ab", 1) == "ab" and _short("abc", 2) == "abc" and _short("abcdef", 2) == "ab…ef"
    assert "rh…ho" not in Result("geometry", {"rho": 0.1}).format(max_cell=2)


def test_a_middle_panels_long_title_stays_over_its_own_panel():
    import matplotlib.pyplot as plt

    from embedscope.viz.style import clean_figure

    fig, axes = plt.subplots(1, 3, figsize=(9, 3), layout="constrained")
    try:
        axes[0].set_title("left panel")
        axes[2].set_title("right panel")
        t = axes[1].set_title("a long middle title " * 8)
        clean_figure(fig)
        fig.canvas.draw()
        mid = _extent(fig, t)
        for other in (axes[0].title, axes[2].title):  # (before: 82-838 px of 900, over both neighbours' titles)
            o = _extent(fig, other)
            assert mid.x1 <= o.x0 or mid.x0 >= o.x1
    finally:
        plt.close(fig)


def test_a_title_wider_than_its_panel_but_not_the_canvas_is_wrapped():
    import matplotlib.pyplot as plt

    from embedscope.viz.style import clean_figure

    fig, axes = plt.subplots(1, 2, figsize=(7, 3), dpi=100, layout="constrained")
    try:
        axes[0].set_title("left")
        t = axes[1].set_title("words of a right panel title " * 2)  # ~0.8 of the canvas
        clean_figure(fig)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        from PIL import Image

        from embedscope.viz.style import EDGE_SLACK

        assert "\n" in t.get_text()
        assert Image.open(buf).size[0] <= 700 * (1 + EDGE_SLACK) + 10  # (before: 852 px, the title past the edge)
    finally:
        plt.close(fig)


def test_wide_glyphs_are_measured():
    import matplotlib.pyplot as plt

    from embedscope.viz.style import clean_figure

    fig = plt.figure(figsize=(3.5, 2), dpi=100)
    try:
        t = fig.suptitle("\u2031" * 17)  # ‱, 1.74 em wide: 17 of them were taken for a short title
        clean_figure(fig)
        assert _extent(fig, t).width <= 350
    finally:
        plt.close(fig)


def test_a_very_long_title_takes_a_bounded_number_of_lines_and_keeps_its_end():
    from embedscope.viz.spectrum import plot_spectra

    s = np.linspace(1.0, 0.1, 16)
    title = "/data/runs/" + "x" * 250 + "/embeddings.h5"
    fig = plot_spectra([{"label": "m", "spectrum": s}], title=title)
    try:
        lines = fig.axes[0].get_title().split("\n")
        assert len(lines) == 5 and lines[-1] == "…/embeddings.h5"  # (35% of 2.7 in: 5 lines; the tail from a folder)
        assert title.startswith("".join(lines[:-1]))  # (no space put into the broken word)
        assert title.endswith(lines[-1][1:])
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_a_lone_panels_wrapped_title_fits_where_the_layout_puts_the_panel():
    import matplotlib.pyplot as plt

    from embedscope.viz.spectrum import plot_spectra

    s = np.linspace(1.0, 0.1, 16)
    fig = plot_spectra([{"label": "m", "spectrum": s}], title="/data/runs/" + "x" * 100 + "/embeddings.h5")
    try:
        fig.canvas.draw()
        from embedscope.viz.style import EDGE_SLACK

        e = _extent(fig, fig.axes[0].title)  # (before: wrapped for the panel where it was before the layout,
        slack = EDGE_SLACK * fig.bbox.width  # the title ran 30 px past the right edge)
        assert -slack <= e.x0 and e.x1 <= fig.bbox.width + slack
    finally:
        plt.close(fig)


@pytest.mark.parametrize("mean", [np.full(3, np.nan), np.zeros(3)])
def test_a_class_spectrum_with_nothing_to_show_is_said_not_a_matplotlib_error(mean):
    import matplotlib.pyplot as plt

    from embedscope.viz.spectrum import plot_spectra

    fig = plot_spectra([{"label": "n", "spectrum": [1, 0.5, 0.2], "class_mean": mean, "class_std": np.zeros(3)}],
                       by_class=True)
    try:
        texts = " ".join(t.get_text() for t in fig.axes[1].texts)
        assert "no class-conditioned spectra" in texts
    finally:
        plt.close(fig)


@pytest.mark.parametrize("spectrum", [[0, 0, 0], [1, np.nan, 0.2]])
def test_a_spectrum_with_nothing_to_show_is_one_line(spectrum):
    from embedscope.viz.spectrum import plot_spectra

    with pytest.raises(EmbedscopeError, match="no spectrum has a finite singular value above zero"):
        plot_spectra([{"label": "n", "spectrum": spectrum}])


def test_a_one_index_spectrum_axis_has_one_integer_tick_and_its_ring_shows_around_the_dot():
    import matplotlib.pyplot as plt

    from embedscope.viz.spectrum import plot_spectra

    s = np.r_[1.0, np.zeros(15)]  # a collapsed model: one nonzero value, in every class too
    m = np.r_[1.0, np.zeros(15)]
    fig = plot_spectra([{"label": "c", "spectrum": s, "class_mean": m, "class_std": np.zeros(16)}], by_class=True)
    try:
        fig.canvas.draw()
        assert list(fig.axes[1].get_xticks()) == [1.0]  # (before: 0.5, 0.6, ..., 1.5 on an index axis)
        rings = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "o" and ln.get_markerfacecolor() == "none"]
        dots = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "o" and ln.get_markerfacecolor() != "none"]
        assert rings and dots and rings[0].get_markersize() > dots[0].get_markersize() + 2
    finally:
        plt.close(fig)


def test_scatter_checks_every_split_first_and_names_the_one_it_can_draw():
    import embedscope.analyses as A
    from embedscope.store import EmbeddingSet

    rng = np.random.default_rng(0)
    y = np.r_[np.repeat(np.arange(5), 6), np.zeros(6, int) + 5]
    X = rng.normal(size=(36, 8))
    es = EmbeddingSet.from_arrays(X, y, split=["train"] * 30 + ["test"] * 6)
    calls = []
    import embedscope.metrics as M

    real = M.nearest_same_different

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    M.nearest_same_different = spy
    try:
        with pytest.raises(EmbedscopeError, match=r"the test split has 1 \(draw the train split alone: --split train"):
            A.scatter(es, split="all")
    finally:
        M.nearest_same_different = real
    assert not calls  # (before: the train split searched, then the error)


def test_the_kept_end_of_a_cut_title_repeats_nothing_and_starts_at_a_word():
    import matplotlib.pyplot as plt

    from embedscope.viz.style import clean_figure

    for k in range(14, 40):
        fig, ax = plt.subplots(figsize=(2.5, 3))
        try:
            words = " ".join(f"w{i:02d}" for i in range(k)) + "\nEND1\nEND2"
            t = ax.set_title(words)
            clean_figure(fig)
            lines = t.get_text().split("\n")
            if not lines[-1].startswith("…"):
                continue
            assert lines[-1].endswith("END1 END2")
            kept = " ".join(lines[:-1]).split() + lines[-1][1:].split()
            assert len(kept) == len(set(kept))  # (before: '…13 END1 END2' after a line ending in w13)
            assert all(w in words.split() for w in kept)  # whole words only
        finally:
            plt.close(fig)


def test_a_panel_title_may_reach_over_a_neighbour_whose_title_is_short():
    import matplotlib.pyplot as plt

    from embedscope.viz.style import clean_figure

    fig, axes = plt.subplots(1, 3, figsize=(9, 2.7), layout="constrained")
    try:
        axes[0].set_title("left")
        axes[2].set_title("right")
        t = axes[1].set_title("Per class, centred (mean ± s.d. over classes), test")  # wider than its third
        clean_figure(fig)
        assert "\n" not in t.get_text()
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        assert axes[1].get_window_extent(r).width < t.get_window_extent(r).width
        for other in (axes[0].title, axes[2].title):
            assert not t.get_window_extent(r).overlaps(other.get_window_extent(r))
    finally:
        plt.close(fig)


def test_texts_as_bytes_match_texts_and_missing_labels_are_refused():
    import pandas as pd

    from embedscope.metrics import retrieval_metrics

    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 4))
    yq, yr = np.array([b"cat", b"dog"] * 3), pd.Series(["dog", "cat"] * 3).values
    ref = retrieval_metrics(X[:6], yq.astype(str), X_ref=X[6:], y_ref=yr.astype(str))["R@1"]
    assert retrieval_metrics(X[:6], yq, X_ref=X[6:], y_ref=yr)["R@1"] == ref  # (before: "texts vs texts" refused)
    assert retrieval_metrics(X[:6], yq.astype(object), X_ref=X[6:], y_ref=yr)["R@1"] == ref
    nan = pd.Series([1.0, np.nan, 1.0, 2.0, 2.0, 1.0], dtype=object).values
    for call in (lambda: retrieval_metrics(X[:6], nan, X_ref=X[6:], y_ref=np.array([1.0, 2.0] * 3)),
                 lambda: retrieval_metrics(X[:6], nan)):
        with pytest.raises(EmbedscopeError, match=r"y holds a missing label \(nan\) at row 1"):
            call()  # (before: NaN split class 1.0 in two, a query silently lone)


def test_from_arrays_keeps_ids_beyond_int64_held_as_objects():
    from embedscope.store import EmbeddingSet

    X = np.eye(4)
    big = np.array([2**63, 1, 2**63, 1], dtype=object)
    assert EmbeddingSet.from_arrays(X, big).class_names.tolist() == ["1", "9223372036854775808"]
    assert EmbeddingSet.from_arrays(X, np.array([1e19, 2e19] * 2, dtype=object)).class_names.tolist() == ["1e+19",
                                                                                                            "2e+19"]
