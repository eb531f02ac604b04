"""Audit 23: the spectrum figure's legend never covers a curve (long model names, embedding
dimensions 16 / 64 / 512: curves of different lengths), and ``evaluate``'s R@k come in ascending k
(whatever order --k gave, a repeated k once) with one number of decimals in each terminal table.

Legends are checked on the drawn figure, in display coordinates: every point of every curve, the
segments between them (a fall of two decades between k = 1 and 2 is one segment), the ringed values
ρ leaves out, the boundary line and the per-class s.d. bands lie outside the legend's box."""

import json
import re

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg", force=True)

import matplotlib.pyplot as plt  # noqa: E402
from cli_run import cli_output  # noqa: E402

from embedscope import store  # noqa: E402
from embedscope.viz import plot_spectra  # noqa: E402

NAMES = {16: "resnet50_margin_loss_rho_regularised_cub200_seed0_D16",
         64: "resnet50_multisimilarity_loss_baseline_cars196_D64",
         512: "resnet50_triplet_semihard_no_regularisation_sop_D512",
         128: "bninception_proxyanchor_long_experiment_name_D128"}


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _embeddings(D, n=700, seed=0, classes=10):
    """Rows as the repro's: class centres plus noise falling over the D directions."""
    rng = np.random.default_rng(seed + D)
    lab = np.repeat(np.arange(classes), n // classes)
    X = 3 * rng.normal(size=(classes, D))[lab] + rng.normal(size=(n, D)) * np.linspace(2, 0.01, D) ** 2
    return X, lab


def _entries(dims, by_class=False, flat=False):
    out = []
    for D in dims:
        X, lab = _embeddings(D)
        if flat:  # a near-isotropic set: a flat spectrum across the middle of the panel
            X = np.random.default_rng(D).normal(size=X.shape)
        s = np.linalg.svd(X, compute_uv=False)
        e = {"label": NAMES[D], "spectrum": s, "rho": float(np.random.default_rng(D).uniform(0.1, 1.2))}
        if by_class:
            cs = [np.linalg.svd(X[lab == c], compute_uv=False)[:35] for c in np.unique(lab)]
            cs = np.array([c / c.sum() for c in cs])
            e.update(class_mean=cs.mean(0), class_std=cs.std(0))
        out.append(e)
    return out


def _covered(fig):
    """(panel, what) of every drawn datum inside a legend's box, in display coordinates."""
    from matplotlib.collections import PolyCollection

    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    hits = []
    for i, ax in enumerate(fig.axes):
        leg = ax.get_legend()
        if leg is None:
            continue
        box = leg.get_window_extent(r)
        for ln in ax.lines:
            xy = ln.get_transform().transform_path(ln.get_path()).vertices
            pad = ln.get_linewidth() * fig.dpi / 72 / 2
            if ln.get_marker() not in ("", "None", None):
                pad = max(pad, ln.get_markersize() * fig.dpi / 72 / 2)
            pts = [xy]
            for a, b in zip(xy[:-1], xy[1:]):  # the segments between the points, densely
                if ln.get_linestyle() not in ("None", "") and np.all(np.isfinite(a)) and np.all(np.isfinite(b)):
                    pts.append(a + np.linspace(0, 1, 50)[:, None] * (b - a))
            p = np.concatenate(pts)
            p = p[np.all(np.isfinite(p), axis=1)]
            inside = ((p[:, 0] > box.x0 - pad) & (p[:, 0] < box.x1 + pad)
                      & (p[:, 1] > box.y0 - pad) & (p[:, 1] < box.y1 + pad))
            if inside.any():
                hits.append((i, ln.get_label() or "line"))
        for coll in ax.collections:
            if isinstance(coll, PolyCollection):
                for path in coll.get_paths():
                    if coll.get_transform().transform_path(path).intersects_bbox(box, filled=True):
                        hits.append((i, "s.d. band"))
    return hits


@pytest.mark.parametrize("dims", [(16, 64, 512), (16, 64, 512, 128), (512, 16), (16, 64)])
@pytest.mark.parametrize("by_class", [False, True])
def test_spectrum_legend_covers_no_curve(dims, by_class):
    fig = plot_spectra(_entries(dims, by_class), by_class=by_class, title="Singular-value spectra (test split)")
    assert _covered(fig) == []
    # the legend keeps its rules: every model named, long names cut in the middle
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len(texts) == len(dims) + 1 and texts[-1] == "left out of ρ (top 1)"
    assert all("…" in t and len(t.split(" (ρ")[0]) <= 28 for t in texts[:-1])
    # nothing leaves the figure: a legend beside a panel widened it
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        if (leg := ax.get_legend()) is not None:
            b = leg.get_window_extent(r)
            assert b.x0 >= 0 and b.x1 <= fig.bbox.width + 1
    if by_class:  # a legend beside the left panel stays off the right one (its y label included)
        assert fig.axes[0].get_legend().get_window_extent(r).x1 <= fig.axes[1].get_tightbbox(r).x0 + 1


def test_spectrum_legend_of_flat_long_spectra_goes_beside_the_panel():
    """Near-flat spectra cross the whole panel: no corner is free, the legend sits beside it."""
    fig = plot_spectra(_entries((16, 64, 512), flat=True) + _entries((128,)), exclude_top=1)
    assert _covered(fig) == []
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    assert ax.get_legend().get_window_extent(r).x0 >= ax.get_window_extent(r).x1
    assert fig.get_figwidth() > 3.5  # widened by the legend: the panel keeps its width


def test_spectrum_legend_stays_inside_where_a_corner_is_free():
    """Two short names and decaying spectra: the legend stays in the panel (the figure keeps its width)."""
    s = np.geomspace(1, 1e-3, 64)
    fig = plot_spectra([{"label": "a", "spectrum": s, "rho": 0.2}, {"label": "b", "spectrum": s ** 2, "rho": 0.4}])
    assert _covered(fig) == []
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    leg, box = ax.get_legend().get_window_extent(r), ax.get_window_extent(r)
    assert box.x0 <= leg.x0 and leg.x1 <= box.x1 and box.y0 <= leg.y0 and leg.y1 <= box.y1
    assert fig.get_figwidth() == pytest.approx(3.5)


def test_spectrum_legend_keeps_escaped_line_breaks():
    s = np.geomspace(1, 1e-3, 512)
    fig = plot_spectra([{"label": "model\nwith a break " + "x" * 40, "spectrum": s, "rho": 0.1},
                        {"label": "b" * 45, "spectrum": s[:16], "rho": 0.2}])
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert texts[0].startswith("model\\nwith") and "\n" not in texts[0] and "…" in texts[0]
    assert _covered(fig) == []


def test_spectrum_cli_figure_with_long_names_and_dimensions(tmp_path, monkeypatch):
    """`embedscope spectrum A.h5 B.h5 C.h5 [--by-class] -o s.png`, the drawn figure checked."""
    from embedscope.cli import output

    paths = []
    for D in (16, 64, 512):
        X, lab = _embeddings(D)
        p = tmp_path / f"{NAMES[D]}.h5"
        store.save(p, store.EmbeddingSet.from_arrays(X.astype(np.float32), lab, split="test"))
        paths.append(str(p))
    seen = []
    real = output.save_and_close

    def keep(fig, *a, **k):
        seen.append(_covered(fig))
        return real(fig, *a, **k)

    monkeypatch.setattr(output, "save_and_close", keep)
    for extra in ([], ["--by-class"]):
        out = cli_output(["spectrum", *paths, "--split", "test", "--no-progress", "-o", str(tmp_path / "s.png"),
                          "--force", *extra])
        assert "wrote" in out and (tmp_path / "s.png").exists() and (tmp_path / "s.pdf").exists()
    assert seen == [[], []]


# ------------------------------------------------------------------------------------------ evaluate
PROTOCOL = ["--query-split", "query", "--reference-split", "gallery"]
KW = {"query_split": "query", "reference_split": "gallery"}


def _deg(a):
    a = np.radians(a)
    return np.c_[np.cos(a), np.sin(a)]


@pytest.fixture
def two_files(tmp_path):
    """Query and gallery rows. ``model_a``: 40 well separated classes (values of every size).
    ``model_b``: two queries whose 199 nearest references are of the other class and whose 200th is of
    their own, of 200 (MAP@R = 1/200² = 2.5e-05, R-Precision 0.005): "2.5e-05" beside "0.0050"."""
    rng = np.random.default_rng(3)
    n, c = 400, 40
    y = np.repeat(np.arange(c), n // c)
    X = rng.normal(size=(n, 16)) + 1.5 * rng.normal(size=(c, 16))[y]
    a = tmp_path / "model_a.h5"
    store.save(a, store.EmbeddingSet.from_arrays(X.astype(np.float32), y,
                                                 split=np.where(np.arange(n) % 4 == 0, "query", "gallery")))
    jitter = rng.uniform(-1, 1, 199)
    X2 = np.r_[_deg([0, 90]), _deg(90 + jitter), _deg([30]), _deg(jitter), _deg([60])]
    y2 = np.r_[0, 1, np.zeros(200, int), np.ones(200, int)]
    b = tmp_path / "model_b.h5"
    store.save(b, store.EmbeddingSet.from_arrays(X2.astype(np.float32), y2, split=["query"] * 2 + ["gallery"] * 400))
    return a, b


def _table_numbers(text):
    """The numeric cells of a terminal table (the lines under the dashes)."""
    cells = []
    for block in text.split("\n\n"):
        lines = block.splitlines()
        try:
            start = next(i for i, ln in enumerate(lines) if set(ln.replace(" ", "")) == {"-"}) + 1
        except StopIteration:
            continue
        for ln in lines[start:]:
            if ln.startswith("wrote ") or not ln.strip():
                break
            cells += [c for c in ln.split()[1:] if re.fullmatch(r"-?[\d.e+-]+|nan", c)]
    return cells


def test_evaluate_ks_ascending_once_in_table_json_csv_parquet(two_files, tmp_path):
    import pandas as pd

    a, _ = two_files
    js, cs, pq = tmp_path / "e.json", tmp_path / "e.csv", tmp_path / "e.parquet"
    out = cli_output(["evaluate", str(a), *PROTOCOL, "--k", "8", "1", "4", "8", "--no-progress", "--device", "cpu",
                      "--json", str(js), "--csv", str(cs), "--parquet", str(pq)])
    order = ["R@1", "R@4", "R@8", "P@1", "R-Precision", "MAP@R", "mAP@C", "mAP@1000", "NMI", "F1"]
    shown = [ln.split()[0] for ln in out.splitlines() if ln.split() and ln.split()[0] in order]
    assert shown == order
    assert list(json.loads(js.read_text())["values"]) == order
    assert [ln.split(",")[0] for ln in cs.read_text().splitlines()[1:]] == order
    assert list(pd.read_parquet(pq)["measure"]) == order
    # the CSV keeps the full value (repr), the terminal 4 decimals
    v = json.loads(js.read_text())["values"]["MAP@R"]
    assert repr(v) in cs.read_text() and f"{v:.4f}" in out


def test_evaluate_ks_ascending_in_python_and_with_include(two_files):
    from embedscope.analyses import evaluate

    a, _ = two_files
    assert list(evaluate(a, ks=(8, 2, 4, 2), include=["R@8", "R@2", "MAP@R"], **KW).values) == ["R@2", "R@8", "MAP@R"]
    assert list(evaluate(a, ks=[4, 1], **KW).values) == ["R@1", "R@4", "P@1", "R-Precision", "MAP@R", "mAP@C",
                                                         "mAP@1000", "NMI", "F1"]
    out = cli_output(["evaluate", str(a), *PROTOCOL, "--k", "4", "1", "--include", "MAP@R", "R@k", "--no-progress"])
    assert [ln.split()[0] for ln in out.splitlines()[3:6]] == ["R@1", "R@4", "MAP@R"]


def test_evaluate_terminal_tables_use_one_number_of_decimals(two_files, tmp_path):
    a, b = two_files
    from embedscope.analyses import evaluate

    small = evaluate(b, ks=(1,), include=["R@1", "MAP@R", "R-Precision"], **KW)
    assert 0 < small["MAP@R"] < 1e-4 < small["R-Precision"]  # the case: "2.5e-05" beside "0.0050"
    for files in ([b], [a, b]):
        pc = tmp_path / f"pc{len(files)}.csv"
        out = cli_output(["evaluate", *map(str, files), *PROTOCOL, "--k", "8", "1", "4", "--no-progress", "--per-class",
                          str(pc), "--force"])
        blocks = [blk for blk in re.split(r"\n(?=\S[^\n]*\n[^\n]+\n[- ]+\n)", out) if "---" in blk]
        assert len(blocks) == 1 + len(files)  # the values and each model's worst classes
        for blk in blocks:
            cells = [c for c in _table_numbers(blk) if c != "nan"]
            assert not [c for c in cells if "e" in c], blk  # no scientific notation ("2.5e-05")
            cells = [c for c in cells if "." in c]  # (the counts of the per-class tables: integers)
            assert cells
            assert len({len(c.split(".")[1]) for c in cells}) == 1, cells  # one number of decimals
        assert "R@1" in pc.read_text().splitlines()[0]
    # the terminal rounds; the JSON keeps every digit
    js = tmp_path / "b.json"
    out = cli_output(["evaluate", str(b), *PROTOCOL, "--k", "1", "--include", "R@1", "MAP@R", "--no-progress",
                      "--json", str(js)])
    v = json.loads(js.read_text())["values"]["MAP@R"]
    assert v == small["MAP@R"]
    shown = float(next(ln.split()[1] for ln in out.splitlines() if ln.startswith("MAP@R")))
    assert shown == pytest.approx(v, rel=0.05) and shown != 0


def test_evaluate_plain_tables_keep_four_decimals(two_files):
    a, _ = two_files
    out = cli_output(["evaluate", str(a), *PROTOCOL, "--k", "2", "1", "--no-progress"])
    cells = [c for c in _table_numbers(out) if "." in c]
    assert cells and all(len(c.split(".")[1]) == 4 for c in cells)


def test_by_class_panel_names_files_without_class_spectra_and_an_empty_panel_has_no_ticks():
    """A file whose classes are all single (no class spectrum) keeps a legend entry in the per-class
    panel, marked; when no file has one, the panel shows the reason and no ticks that read as values."""
    rng = np.random.default_rng(0)
    s1 = np.sort(rng.random(8))[::-1] + 0.1
    full = {"label": "grp", "spectrum": s1, "rho": 0.1,
            "class_mean": s1 / s1.sum(), "class_std": np.zeros(8)}
    lone = {"label": "lone", "spectrum": s1, "rho": 0.2}
    fig = plot_spectra([lone, full], by_class=True)
    texts = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert texts == ["grp", "lone (no class spectrum)"]
    fig = plot_spectra([lone], by_class=True)
    ax = fig.axes[1]
    assert list(ax.get_xticks()) == [] and list(ax.get_yticks()) == []
    assert any("no class-conditioned spectra" in t.get_text() for t in ax.texts)


def _query_gallery(tmp_path):
    """Queries of 3 classes (one, class 2, absent from the gallery) and a gallery of 2 classes."""
    rng = np.random.default_rng(5)
    yq, yg = np.repeat([0, 1, 2], 4), np.repeat([0, 1], 6)
    C = 4 * rng.normal(size=(3, 6))
    Xq, Xg = C[yq] + rng.normal(size=(12, 6)), C[yg] + rng.normal(size=(12, 6))
    f = tmp_path / "qg.h5"
    store.save(f, store.EmbeddingSet.from_arrays(np.vstack([Xq, Xg]).astype(np.float32), np.concatenate([yq, yg]),
                                                 split=["query"] * 12 + ["gallery"] * 12))
    return f, Xq.astype(np.float32), yq, Xg.astype(np.float32), yg


def test_evaluate_split_with_query_split_is_a_usage_error_not_ignored(tmp_path, capsys):
    """--query-split query --split gallery searched the queries against themselves (--split unused,
    the header said 'vs themselves'); now exit 2 naming --reference-split, which gives query vs gallery."""
    from embedscope.cli import main

    f, Xq, yq, Xg, yg = _query_gallery(tmp_path)
    assert main(["evaluate", str(f), "--query-split", "query", "--split", "gallery"]) == 2
    err = capsys.readouterr().err
    assert "--reference-split gallery" in err and len(err.strip().splitlines()) == 1
    out = cli_output(["evaluate", str(f), "--query-split", "query", "--reference-split", "gallery", "--no-progress",
                      "--include", "R@1"])
    # brute force: cosine, queries with a relevant gallery row (class 2 has none: left out)
    Q = Xq / np.linalg.norm(Xq, axis=1, keepdims=True)
    G = Xg / np.linalg.norm(Xg, axis=1, keepdims=True)
    S = Q.astype(np.float64) @ G.T.astype(np.float64)
    keep = yq != 2
    r1 = float(np.mean(yg[np.argmax(S[keep], axis=1)] == yq[keep]))
    assert re.search(rf"R@1\s+{r1:.4f}", out), out


def test_evaluate_include_r_at_k_takes_the_default_ks_the_data_allow(tmp_path):
    """--include R@k on a split of 5 rows (4 references a query): R@1, R@2, R@4 as the default run,
    not 'unknown metric(s) R@8'."""
    rng = np.random.default_rng(2)
    f = tmp_path / "five.h5"
    store.save(f, store.EmbeddingSet.from_arrays(rng.normal(size=(5, 3)).astype(np.float32), [0, 0, 1, 1, 1]))
    out = cli_output(["evaluate", str(f), "--include", "R@k", "P@1", "--no-progress"])
    rows = [ln.split()[0] for ln in out.splitlines() if ln.startswith(("R@", "P@"))]
    assert rows == ["R@1", "R@2", "R@4", "P@1"]


def test_evaluate_of_a_collapsed_model_says_its_values_follow_row_order(tmp_path, capsys):
    """Every row the same point: R@1 etc. are computed (ties to the lower index, as documented) and a
    note says they only tell that the model is collapsed; an ordinary file has no such note."""
    from embedscope.cli import main

    f = tmp_path / "c.h5"
    store.save(f, store.EmbeddingSet.from_arrays(np.tile([[0.5, -1.0, 2.0]], (12, 1)).astype(np.float32),
                                                 np.arange(12) % 3))
    out = cli_output(["evaluate", str(f), "--no-progress", "--include", "R@1"])
    assert "note: every row is the same point (direction), a collapsed model" in out
    # ties to the lower index: query i's nearest is row 0 (or row 1 for query 0): a hit when its class
    y = np.arange(12) % 3
    nearest = np.where(np.arange(12) == 0, 1, 0)
    assert re.search(rf"R@1\s+{np.mean(y[nearest] == y):.4f}", out)
    rng = np.random.default_rng(0)
    g = tmp_path / "g.h5"
    store.save(g, store.EmbeddingSet.from_arrays(rng.normal(size=(12, 3)).astype(np.float32), y))
    assert "collapsed" not in cli_output(["evaluate", str(g), "--no-progress", "--include", "R@1"])
    assert main(["evaluate", str(f), str(g), "--no-progress", "--include", "R@1"]) == 0
    assert "note: c: every row is the same point" in capsys.readouterr().out
