"""Audit 23: the same-vs-different scatter with tied points (s_same = s_diff), its window at any scale,
and the t-SNE perplexity cap said on the terminal and on the figure (docs/methods.md §10).

Every expected number is computed here with numpy from the definitions (the full N x N similarity
matrix), independently of embedscope.metrics."""

import csv
import json

import numpy as np
import pytest

from embedscope import store
from embedscope.cli import main
from embedscope.store import EmbeddingSet


# ----------------------------------------------------------------------------- references (numpy)
def _sim(X, metric):
    X = np.asarray(X, dtype=np.float64)
    if metric == "cosine":
        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        return U @ U.T
    if metric == "dot":
        return X @ X.T
    return -np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))


def _same_diff(X, y, metric="cosine"):
    """s_same, s_diff straight from the definition (itself excluded)."""
    S = _sim(X, metric)
    n = len(y)
    same, diff = np.full(n, np.nan), np.full(n, np.nan)
    for i in range(n):
        m_same = (y == y[i]) & (np.arange(n) != i)
        m_diff = y != y[i]
        if m_same.any():
            same[i] = S[i, m_same].max()
        if m_diff.any():
            diff[i] = S[i, m_diff].max()
    return same, diff


def _r_at_1(X, y, metric="cosine"):
    """R@1 of docs/methods.md §1: the query excluded, ties to the lower reference index."""
    S = _sim(X, metric)
    n = len(y)
    hits = []
    for i in range(n):
        if not ((y == y[i]).sum() > 1):
            continue
        s = S[i].copy()
        s[i] = -np.inf
        best = np.flatnonzero(s == s.max())[0]  # the lowest index among the most similar
        hits.append(y[best] == y[i])
    return float(np.mean(hits))


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _tied_set(seed=0):
    """Two splits; D = 1 in the first (every cosine is +-1: almost all tied), the second with a few
    exact duplicates across classes (some tied) and points that are not."""
    rng = np.random.default_rng(seed)
    n1, n2 = 24, 30
    X1 = np.zeros((n1, 3))
    X1[:, 0] = rng.choice([-1.0, 1.0], n1) * rng.uniform(0.5, 2.0, n1)  # one direction: cosines +-1
    y1 = np.arange(n1) % 4
    y2 = np.arange(n2) % 3
    X2 = rng.normal(size=(n2, 3)) + 2.0 * np.eye(3)[y2]
    X2[1] = X2[0] * 3.0   # class 1 point on the same ray as a class 0 point: cosine 1 to it
    X2[3] = X2[0] * 0.5   # class 0, same ray: its nearest same and other class both have cosine 1
    X2[5] = X2[4]         # class 2 duplicates a class 1 point
    X2[8] = X2[4]         # class 2 again: 4, 5, 8 share a place
    X = np.vstack([X1, X2]).astype(np.float64)
    y = np.concatenate([y1, y2])
    split = np.array(["train"] * n1 + ["test"] * n2)
    return EmbeddingSet(embeddings=X, labels=y, paths=np.array([f"p/{i:03d}" for i in range(len(y))]), split=split,
                        class_names=np.array(["a", "b", "c", "d"]))


# ----------------------------------------------------------------------------- 1. ties
def test_scatter_counts_tied_points_per_split():
    from embedscope.analyses import scatter

    es = _tied_set()
    r = scatter(es)
    for s in ("train", "test"):
        part = es.subset(s)
        ss, sd = _same_diff(part.embeddings, part.labels)
        ok = np.isfinite(ss) & np.isfinite(sd)
        tied = ok & (ss == sd)
        below = float(np.mean(sd[ok] < ss[ok]))
        assert tied.sum() > 0  # the construction has ties in both splits
        assert r.values[f"tied_{s}"] == int(tied.sum())
        assert r.values[f"below_diagonal_{s}"] == pytest.approx(below, abs=1e-12)  # the old key, unchanged
        assert r.values[f"below_or_tied_{s}"] == pytest.approx(float(np.mean(sd[ok] <= ss[ok])), abs=1e-12)
        # the R@1 of docs/methods.md §1 lies between the two (ties go to the lower index)
        r1 = _r_at_1(part.embeddings, part.labels)
        assert below - 1e-12 <= r1 <= r.values[f"below_or_tied_{s}"] + 1e-12
        rows = [row for row in r.table if row["split"] == s]
        assert [row["tied"] for row in rows] == tied.astype(float).tolist()
        assert [row["below_diagonal"] for row in rows] == (sd < ss).astype(float).tolist()  # a tie is not below
        summ = next(x for x in r.provenance["splits"] if x["split"] == s)
        assert summ["tied"] == int(tied.sum()) and summ["below_diagonal_R@1"] == pytest.approx(below, abs=1e-12)
    assert len(r.provenance["notes"]) == 2 and all("tied" in n for n in r.provenance["notes"])


def test_scatter_without_ties_reports_zero_and_no_note():
    from embedscope.analyses import scatter

    rng = np.random.default_rng(3)
    y = np.arange(40) % 4
    X = rng.normal(size=(40, 5)) + 3 * np.eye(5)[y]
    es = EmbeddingSet(embeddings=X, labels=y, paths=np.array([f"q{i}" for i in range(40)]),
                      split=np.array(["test"] * 40), class_names=np.array(list("abcd")))
    r = scatter(es, split="test")
    ss, sd = _same_diff(X, y)
    assert r.values["tied_test"] == 0 and "notes" not in r.provenance
    assert r.values["below_diagonal_test"] == pytest.approx(_r_at_1(X, y), abs=1e-12)  # = R@1 without ties
    assert r.values["below_or_tied_test"] == r.values["below_diagonal_test"]


def test_cli_scatter_d1_says_tied_in_table_files_and_figure(tmp_path, capsys, monkeypatch):
    """The audit's case: D = 1, every point tied: the share below is 0, and the outputs say that
    every point is on the diagonal (not 'nearer another class'); the R@1 (here computed with numpy,
    evaluate's 0.25 in the audit) lies within the stated bounds."""
    from matplotlib.colors import to_rgba

    import embedscope.cli.output as output
    from embedscope.viz.style import ABOVE_COLOR

    rng = np.random.default_rng(1)
    n = 40
    X = rng.choice([-1.0, 1.0], (n, 1)) * rng.uniform(0.5, 2.0, (n, 1))
    y = np.arange(n) % 4
    h5 = store.save(tmp_path / "d1.h5", EmbeddingSet(embeddings=X.astype(np.float32), labels=y,
                                                     paths=np.array([f"i{k}" for k in range(n)]),
                                                     split=np.array(["test"] * n),
                                                     class_names=np.array(list("abcd"))))
    ss, sd = _same_diff(X.astype(np.float32), y)
    n_tied = int((ss == sd).sum())
    assert n_tied == n  # every point tied (both nearest at cosine 1)
    r1 = _r_at_1(X.astype(np.float32), y)
    assert 0 < r1 < 1

    seen = {}
    real = output.save_and_close

    def keep(fig, png, **kw):
        ax = fig.axes[0]
        seen["title"] = ax.get_title()
        seen["legend"] = [t.get_text() for t in fig.legends[0].get_texts()]
        seen["colours"] = [np.asarray(c.get_facecolors()) for c in ax.collections]
        seen["sizes"] = [len(c.get_offsets()) for c in ax.collections]
        seen["xlim"], seen["ylim"] = ax.get_xlim(), ax.get_ylim()
        return real(fig, png, **kw)

    monkeypatch.setattr(output, "save_and_close", keep)
    out = tmp_path / "s.png"
    capsys.readouterr()
    assert main(["scatter", str(h5), "-o", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "tied" in text.splitlines()[0]
    assert f"note: {n} of the {n} test points are tied" in text and "between 0.0000 and 1.0000" in text
    rows = _rows(out.with_suffix(".csv"))
    assert [float(r["tied"]) for r in rows] == [1.0] * n and {r["below_diagonal"] for r in rows} == {"0.0"}
    js = json.loads(out.with_suffix(".json").read_text())
    assert js["values"]["tied_test"] == n and js["values"]["below_diagonal_test"] == 0.0
    assert js["values"]["below_or_tied_test"] == 1.0
    assert js["values"]["below_diagonal_test"] <= r1 <= js["values"]["below_or_tied_test"]
    # the figure: no "(R@1)" claim, the ties counted, drawn apart (not in the "another class" colour)
    assert "R@1" not in seen["title"] and f"{n} tied" in seen["title"] and "0.0% below" in seen["title"]
    assert any(t.startswith("tied") for t in seen["legend"])
    above = np.array(to_rgba(ABOVE_COLOR))[:3]
    for cols, k in zip(seen["colours"], seen["sizes"]):
        if k:
            assert not np.any(np.all(np.isclose(cols[:, :3], above), axis=1))
    assert sum(seen["sizes"]) == n
    # all points at (1, 1): a window at their scale, not 1e-9 wide
    assert seen["xlim"][0] < 1 < seen["xlim"][1] and (seen["xlim"][1] - seen["xlim"][0]) > 0.01


def test_figure_draws_tied_points_apart_in_two_panels():
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    from embedscope.analyses import scatter
    from embedscope.viz.scatter import TIED_COLOR, plot_same_different
    from embedscope.viz.style import ABOVE_COLOR, BELOW_COLOR

    es = _tied_set()
    r = scatter(es)
    fig = plot_same_different(r.arrays["panels"])
    want = {"below": np.array(to_rgba(BELOW_COLOR))[:3], "above": np.array(to_rgba(ABOVE_COLOR))[:3],
            "tied": np.array(to_rgba(TIED_COLOR))[:3]}
    for ax, s in zip(fig.axes, ("train", "test")):
        part = es.subset(s)
        ss, sd = _same_diff(part.embeddings, part.labels)
        expect = {"below": int((sd < ss).sum()), "above": int((sd > ss).sum()), "tied": int((sd == ss).sum())}
        got = dict.fromkeys(want, 0)
        for c in ax.collections:
            fc = np.asarray(c.get_facecolors())[:, :3]
            k = len(c.get_offsets())
            if len(fc) == 1 and k > 1:
                fc = np.repeat(fc, k, axis=0)
            for name, rgb in want.items():
                got[name] += int(np.all(np.isclose(fc, rgb), axis=1).sum())
        assert got == expect
        assert f"{expect['tied']} tied" in ax.get_title()
    plt.close(fig)


# ----------------------------------------------------------------------------- 2. window at any scale
@pytest.mark.parametrize("scale", [1e-61, 1e-30, 1e-9, 1.0, 1e30, 1e60])
def test_zoom_window_follows_the_data_at_any_scale(scale):
    from embedscope.viz.scatter import zoom_window

    rng = np.random.default_rng(2)
    a = rng.uniform(5.0, 8.5, 200) * scale
    b = rng.uniform(3.0, 8.0, 200) * scale
    (x0, x1), (y0, y1) = zoom_window(a, b)
    assert x0 <= a.min() and a.max() <= x1 and y0 <= b.min() and b.max() <= y1
    # the window is about the data's extent (numpy: max - min), not a fixed 1e-9
    assert (x1 - x0) <= 2.0 * np.ptp(a) and (y1 - y0) <= 2.0 * np.ptp(b)
    # and the same picture at every scale
    (u0, u1), (v0, v1) = zoom_window(a / scale, b / scale)
    np.testing.assert_allclose(np.array([x0, x1, y0, y1]) / scale, [u0, u1, v0, v1], rtol=1e-9)


@pytest.mark.parametrize("where", [(1.0, 1.0), (7e-61, 7e-61), (-3e30, -3e30), (0.0, 0.0)])
def test_zoom_window_around_points_at_one_place(where):
    from embedscope.viz.scatter import SINGLE_POINT_WIDTH, zoom_window

    a = np.full(5, where[0])
    b = np.full(5, where[1])
    (x0, x1), (y0, y1) = zoom_window(a, b)
    m = max(abs(where[0]), abs(where[1])) or 1.0
    assert x0 < where[0] < x1 and y0 < where[1] < y1
    assert SINGLE_POINT_WIDTH * m <= x1 - x0 <= 1.5 * SINGLE_POINT_WIDTH * m


@pytest.mark.parametrize("metric", ["dot", "euclidean"])
def test_cli_scatter_of_tiny_values_zooms_to_them(tmp_path, monkeypatch, metric):
    """The audit's case: values about 1e-30 (similarities about 1e-60 with dot): the CSV was right but
    the window 1e-9 wide, every point on one dot."""
    import embedscope.cli.output as output

    rng = np.random.default_rng(4)
    n = 60
    y = np.arange(n) % 3
    X = (rng.normal(size=(n, 4)) + 2 * np.eye(4)[y]) * 1e-30
    h5 = store.save(tmp_path / "t.h5", EmbeddingSet(embeddings=X, labels=y, paths=np.array([f"t{k}" for k in range(n)]),
                                                    split=np.array(["test"] * n), class_names=np.array(list("abc"))))
    seen = {}
    real = output.save_and_close

    def keep(fig, png, **kw):
        seen["xlim"], seen["ylim"] = fig.axes[0].get_xlim(), fig.axes[0].get_ylim()
        return real(fig, png, **kw)

    monkeypatch.setattr(output, "save_and_close", keep)
    out = tmp_path / "t.png"
    assert main(["scatter", str(h5), "--metric", metric, "-o", str(out), "--no-progress"]) == 0
    ss, sd = _same_diff(store.load(h5).embeddings, y, metric)  # the stored (float32) rows
    rows = _rows(out.with_suffix(".csv"))
    np.testing.assert_allclose([float(r["s_same"]) for r in rows], ss, rtol=1e-9)
    (x0, x1), (y0, y1) = seen["xlim"], seen["ylim"]
    assert x0 <= ss.min() and ss.max() <= x1 and y0 <= sd.min() and sd.max() <= y1
    assert (x1 - x0) < 3 * np.ptp(ss) and (y1 - y0) < 3 * max(np.ptp(sd), np.ptp(ss) / 4)


# ----------------------------------------------------------------------------- 3. perplexity cap
def _small(n=20, seed=0, shuffle=False):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 4
    X = (rng.normal(size=(n, 6)) + 3 * np.eye(6)[y]).astype(np.float32)
    idx = rng.permutation(n) if shuffle else np.arange(n)
    return EmbeddingSet(embeddings=X[idx], labels=y[idx], paths=np.array([f"s{k:02d}" for k in range(n)])[idx],
                        split=np.array(["train", "test"] * (n // 2))[idx], class_names=np.array(list("abcd")))


def test_perplexity_cap_text():
    from embedscope.tsne import perplexity_cap

    assert perplexity_cap({"perplexity": 19 / 3, "perplexity_requested": 50.0}, 20) == \
        "50 capped at 6.333 for 20 points (at most (N − 1)/3)"
    assert perplexity_cap({"perplexity": 30.0, "perplexity_requested": 30.0}, 100) is None
    assert perplexity_cap({}, 10) is None


def _capture_notes(monkeypatch):
    import embedscope.cli.output as output

    seen = {}
    real = output.save_and_close

    def keep(fig, png, **kw):
        seen["texts"] = [t.get_text() for t in fig.texts]
        return real(fig, png, **kw)

    monkeypatch.setattr(output, "save_and_close", keep)
    return seen


@pytest.mark.parametrize("split", [["--split", "all"], ["--joint"]])
def test_cli_tsne_says_the_perplexity_was_capped(tmp_path, capsys, monkeypatch, split):
    n = 20
    h5 = store.save(tmp_path / "s.h5", _small(n))
    seen = _capture_notes(monkeypatch)
    out = tmp_path / "m.png"
    capsys.readouterr()
    assert main(["tsne", str(h5), *split, "--perplexity", "50", "--n-iter", "50", "-o", str(out),
                 "--no-progress"]) == 0
    used = (n - 1) / 3  # openTSNE's limit, docs/methods.md §10
    text = capsys.readouterr().out
    assert f"note: perplexity 50 capped at {used:.4g} for {n} points" in text
    info = json.loads(out.with_suffix(".json").read_text())["provenance"]
    assert info["perplexity"] == pytest.approx(used) and info["perplexity_requested"] == 50  # JSON unchanged
    footer = " ".join(seen["texts"]).replace("\n", " ")
    assert f"perplexity={used:.4g} (capped: 50 asked, N = {n})" in footer
    # not capped: no note, the footer as before
    out2 = tmp_path / "m2.png"
    assert main(["tsne", str(h5), *split, "--perplexity", "5", "--n-iter", "50", "-o", str(out2),
                 "--no-progress"]) == 0
    assert "capped" not in capsys.readouterr().out
    assert "perplexity=5," in " ".join(seen["texts"]).replace("\n", " ")
    assert "capped" not in " ".join(seen["texts"])


def test_cli_yoke_says_the_perplexity_was_capped(tmp_path, capsys, monkeypatch):
    n = 20
    a = store.save(tmp_path / "a.h5", _small(n, 0))
    b = store.save(tmp_path / "b.h5", _small(n, 0, shuffle=True))
    seen = _capture_notes(monkeypatch)
    out = tmp_path / "y.png"
    capsys.readouterr()
    assert main(["yoke", str(a), str(b), "--split", "all", "--perplexity", "50", "--n-iter", "50", "-o", str(out),
                 "--no-progress"]) == 0
    used = (n - 1) / 3
    text = capsys.readouterr().out
    assert f"note: perplexity 50 capped at {used:.4g} for {n} points" in text
    footer = " ".join(seen["texts"]).replace("\n", " ")
    assert f"perplexity={used:.4g} (capped: 50 asked, N = {n})" in footer


def test_python_api_footer_says_the_perplexity_was_capped():
    """plot_tsne(info=result.provenance) in a notebook: the footer says the cap, as the command's."""
    from embedscope.viz.style import settings_text

    assert settings_text({"perplexity": 19 / 3, "perplexity_requested": 50.0, "seed": 0}, ("perplexity", "seed")) \
        == "perplexity=6.333 (capped: 50 asked), seed=0"
    assert settings_text({"perplexity": 30.0, "perplexity_requested": 30.0}, ("perplexity",)) == "perplexity=30"


def test_yoke_names_the_collapsed_file(tmp_path, capsys):
    """yoke of a collapsed model said 'X_b: all 200 rows are identical' (an array the user never sees)."""
    from embedscope.cli import main

    rng = np.random.default_rng(0)
    paths = [f"i{i}.png" for i in range(30)]
    a, b = tmp_path / "a.h5", tmp_path / "collapsed.h5"
    store.save(a, store.EmbeddingSet.from_arrays(rng.normal(size=(30, 4)).astype(np.float32), np.arange(30) % 3,
                                                 paths=paths))
    store.save(b, store.EmbeddingSet.from_arrays(np.ones((30, 4), np.float32), np.arange(30) % 3, paths=paths))
    assert main(["yoke", str(a), str(b), "-o", str(tmp_path / "y.png"), "--no-progress"]) == 1
    assert f"{b}: all 30 rows are identical (a collapsed model)" in capsys.readouterr().err
