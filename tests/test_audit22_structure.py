"""Audit of `embedscope spectrum / geometry / evaluate / info` as a user runs them: the numbers against
brute-force numpy written here from docs/methods.md §1-§3, and the fixes of this audit (a file given
twice, --per-class with clustering metrics only, a collapsed model's invisible spectrum, the model's
name in a one-file spectrum table)."""

import json

import numpy as np
import pytest

from embedscope import store
from embedscope.cli import main


def save_set(path, X, y, split, paths=None, class_names=None):
    es = store.EmbeddingSet.from_arrays(np.asarray(X, dtype=np.float32), y, split=split, paths=paths,
                                        class_names=class_names)
    store.save(path, es)
    return es


@pytest.fixture
def small(tmp_path):
    """60 rows, 6-D, 5 classes, values rounded to 0.1 (cosine and Euclidean ties) and a duplicated row."""
    rng = np.random.default_rng(3)
    y = rng.integers(0, 5, 60)
    X = np.round(rng.standard_normal((60, 6)) + 1.5 * rng.standard_normal((5, 6))[y], 1)
    X[5] = X[7]
    split = np.array(["train"] * 30 + ["test"] * 30)
    path = tmp_path / "small.h5"
    es = save_set(path, X, y, split)
    return es, path


# ---------------------------------------------------------------- brute force from docs/methods.md
def brute_retrieval(Q, yq, R=None, yr=None, metric="cosine", ks=(1,), lone="exclude"):
    """§1: exact ranks, ties to the lower reference index, the query excluded in a same-set search."""
    same = R is None
    Q = np.asarray(Q, dtype=np.float64)
    R = Q if same else np.asarray(R, dtype=np.float64)
    yr = yq if same else yr
    if metric == "cosine":
        Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True)
        Rn = R / np.linalg.norm(R, axis=1, keepdims=True)
        key = -(Qn @ Rn.T)
    else:
        key = ((Q[:, None, :] - R[None, :, :]) ** 2).sum(-1)
    out = {f"R@{k}": [] for k in ks}
    out.update({"P@1": [], "R-Precision": [], "MAP@R": [], "mAP@C": [], "mAP@1000": []})
    for i in range(len(Q)):
        cand = np.array([j for j in range(len(R)) if not (same and j == i)])
        order = cand[np.lexsort((cand, key[i, cand]))]
        rel = (yr[order] == yq[i]).astype(np.float64)
        n_rel = int(rel.sum())
        if n_rel == 0:
            if lone == "zero":
                for v in out.values():
                    v.append(0.0)
            continue
        prec = np.cumsum(rel) / np.arange(1, rel.size + 1)
        for k in ks:
            out[f"R@{k}"].append(rel[:k].max())
        out["P@1"].append(rel[0])
        out["R-Precision"].append(rel[:n_rel].sum() / n_rel)
        out["MAP@R"].append((prec * rel)[:n_rel].sum() / n_rel)
        c = n_rel + 1  # C_i: the class size including the query (or R_i + 1)
        out["mAP@C"].append((prec * rel)[:c].sum() / c)
        out["mAP@1000"].append((prec * rel)[:min(1000, rel.size)].sum() / c)
    return {k: float(np.mean(v)) for k, v in out.items()}


def brute_rho(X, exclude_top):
    """§2: KL(U || p), p = s'/Σs', s' the raw singular values of the uncentred X less the top ones."""
    s = np.linalg.svd(np.asarray(X, dtype=np.float64), compute_uv=False)[exclude_top:]
    p = s / s.sum()
    return float(np.sum(np.log((1 / s.size) / p)) / s.size)


def brute_pi(X, y):
    """§3: cosine distances, means over i ≠ j within classes and over k ≠ l between normalised class means."""
    X = np.asarray(X, dtype=np.float64)
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    intra = []
    for c in np.unique(y):
        u = U[y == c]
        n = len(u)
        if n > 1:
            d = 1 - u @ u.T
            intra.append((d.sum() - np.trace(d)) / (n * n - n))
    mu = np.array([X[y == c].mean(0) for c in np.unique(y)])
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    d = 1 - mu @ mu.T
    inter = (d.sum() - np.trace(d)) / (len(mu) ** 2 - len(mu))
    return float(np.mean(intra)), float(inter), float(np.mean(intra) / inter)


# ---------------------------------------------------------------- numbers at the command level
@pytest.mark.parametrize("split", ["train", "test"])
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_evaluate_matches_brute_force(small, tmp_path, split, metric):
    es, path = small
    j = tmp_path / "e.json"
    assert main(["evaluate", str(path), "--split", split, "--metric", metric, "--k", "1", "3", "5",
                 "--json", str(j), "--no-progress"]) == 0
    got = json.loads(j.read_text())["values"]
    part = es.subset(split)
    ref = brute_retrieval(part.embeddings, part.labels, metric=metric, ks=(1, 3, 5))
    for k, v in ref.items():
        assert got[k] == pytest.approx(v, abs=1e-12), k
    assert 0 <= got["NMI"] <= 1 and 0 <= got["F1"] <= 1


@pytest.mark.parametrize("lone", ["exclude", "zero"])
def test_evaluate_query_vs_gallery_matches_brute_force(tmp_path, lone):
    rng = np.random.default_rng(7)
    y = rng.integers(0, 6, 50)
    y[0] = 9  # a class of one image: a lone query
    X = np.round(rng.standard_normal((50, 3)) + rng.standard_normal((10, 3))[y], 1)
    split = np.where(np.arange(50) % 2 == 0, "query", "gallery")
    path = tmp_path / "qg.h5"
    save_set(path, X, y, split)
    j = tmp_path / "e.json"
    assert main(["evaluate", str(path), "--query-split", "query", "--reference-split", "gallery", "--k", "1", "2",
                 "5", "--lone-queries", lone, "--json", str(j), "--no-progress"]) == 0
    d = json.loads(j.read_text())
    q = split == "query"
    ref = brute_retrieval(X[q], y[q], X[~q], y[~q], ks=(1, 2, 5), lone=lone)
    for k, v in ref.items():
        assert d["values"][k] == pytest.approx(v, abs=1e-12), k
    assert d["provenance"]["n_lone"] == 1


def test_evaluate_separated_clusters_nmi_f1_one(tmp_path):
    X = np.repeat(np.eye(4), 5, axis=0) + 1e-3 * np.random.default_rng(0).standard_normal((20, 4))
    path = tmp_path / "sep.h5"
    save_set(path, X, np.repeat(np.arange(4), 5), "test")
    j = tmp_path / "e.json"
    assert main(["evaluate", str(path), "--include", "NMI", "F1", "--json", str(j), "--no-progress"]) == 0
    got = json.loads(j.read_text())["values"]
    assert got["NMI"] == pytest.approx(1.0) and got["F1"] == pytest.approx(1.0)


@pytest.mark.parametrize("split", ["train", "test", "all"])
@pytest.mark.parametrize("exclude_top", [0, 1, 2])
def test_geometry_rho_pi_match_brute_force(small, tmp_path, split, exclude_top):
    es, path = small
    j = tmp_path / "g.json"
    assert main(["geometry", str(path), "--split", split, "--exclude-top", str(exclude_top), "--json", str(j)]) == 0
    got = json.loads(j.read_text())["values"]
    part = es.subset(split)
    assert got["rho"] == pytest.approx(brute_rho(part.embeddings, exclude_top), rel=1e-12)
    assert got["rho_all"] == pytest.approx(brute_rho(part.embeddings, 0), rel=1e-12)
    intra, inter, ratio = brute_pi(part.embeddings, part.labels)
    assert got["pi_intra"] == pytest.approx(intra, rel=1e-12)
    assert got["pi_inter"] == pytest.approx(inter, rel=1e-12)
    assert got["pi_ratio"] == pytest.approx(ratio, rel=1e-12)
    assert got["n"] == part.n and got["n_classes"] == len(np.unique(part.labels))


def test_rho_worked_example():
    """§2's test vector through the command-level analysis: diag(10, 4, 3, 2, 1)."""
    assert brute_rho(np.diag([10.0, 4, 3, 2, 1]), 1) == pytest.approx(0.121777, abs=1e-6)
    assert brute_rho(np.diag([10.0, 4, 3, 2, 1]), 0) == pytest.approx(0.290167, abs=1e-6)


@pytest.mark.parametrize("center", [False, True])
def test_spectrum_table_matches_brute_force(small, tmp_path, center):
    es, path = small
    j = tmp_path / "s.json"
    assert main(["spectrum", str(path), "--by-class", "--n-values", "4", "--json", str(j),
                 *(["--center"] if center else [])]) == 0
    d = json.loads(j.read_text())
    t = {(r["kind"], r["k"]): r["value"] for r in d["table"]}
    part = es.subset("train")
    X, y = part.embeddings.astype(np.float64), part.labels
    s = np.linalg.svd(X, compute_uv=False)
    np.testing.assert_allclose([t[("singular_value", k + 1)] for k in range(s.size)], s, rtol=1e-12)
    np.testing.assert_allclose([t[("normalised", k + 1)] for k in range(s.size)], s / s.sum(), rtol=1e-12)
    per = []
    for c in np.unique(y):
        Z = X[y == c]
        if len(Z) < 2:
            continue
        Z = Z - Z.mean(0) if center else Z
        v = np.linalg.svd(Z, compute_uv=False)
        per.append(np.pad(v / v.sum(), (0, 4))[:4])
    per = np.array(per)
    np.testing.assert_allclose([t[("class_mean", k + 1)] for k in range(4)], per.mean(0), atol=1e-14)
    np.testing.assert_allclose([t[("class_std", k + 1)] for k in range(4)], per.std(0), atol=1e-14)  # ddof 0
    assert d["provenance"]["n_classes_used"] == len(per)


def test_info_counts(tmp_path, capsys):
    rng = np.random.default_rng(1)
    y = np.array([0] * 5 + [1] * 6 + [2] * 4 + [3] * 8)
    split = np.array(["train"] * 9 + ["test"] * 6 + ["query"] * 4 + ["gallery"] * 4)
    X = rng.standard_normal((23, 3)) * 2
    paths = [f"img{i}" for i in range(23)]
    paths[4] = paths[3]
    path = tmp_path / "i.h5"
    save_set(path, X, y, split, paths=paths, class_names=["a", "b", "c", "d", "unused"])
    assert main(["info", str(path)]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines()[2:]:
        field, _, value = line.partition("  ")
        rows[field.strip()] = value.strip()
    assert rows["N x D"] == "23 x 3" and rows["classes"] == "4 (5 named)"
    for s in ("train", "test", "query", "gallery"):
        m = split == s
        n_cls = len(np.unique(y[m]))
        assert rows[s] == f"{m.sum()} images, {n_cls} {'class' if n_cls == 1 else 'classes'}"
    norm = np.linalg.norm(X.astype(np.float32).astype(np.float64), axis=1).mean()
    assert rows["mean embedding norm"] == f"{norm:.4f}"
    assert rows["repeated paths"].startswith("1 path(s) name 2 rows")


def test_outputs_share_one_layout(small, tmp_path):
    """geometry, spectrum and evaluate of one file: the same CSV columns, model name and JSON keys."""
    _, path = small
    layouts = {}
    for cmd in (["geometry", str(path)], ["spectrum", str(path)], ["evaluate", str(path), "--no-progress"]):
        j, c = tmp_path / f"{cmd[0]}.json", tmp_path / f"{cmd[0]}.csv"
        assert main([*cmd, "--json", str(j), "--csv", str(c)]) == 0
        d = json.loads(j.read_text())
        layouts[cmd[0]] = (c.read_text().splitlines()[0], d["model"], tuple(sorted(set(d) - {"table"})))
    assert len(set(layouts.values())) == 1, layouts
    assert layouts["geometry"][0] == "measure,value,model" and layouts["geometry"][1] == "small"


# ---------------------------------------------------------------- fixes of this audit
@pytest.mark.parametrize("cmd", ["evaluate", "spectrum"])
def test_same_file_twice_is_a_usage_error_before_work(small, tmp_path, capsys, cmd):
    """It computed every file, then failed (exit 1) with 'model names must differ'."""
    _, path = small
    out = tmp_path / "o.json"
    assert main([cmd, str(path), str(path), "--json", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "given twice" in err and len(err.strip().splitlines()) == 1 and not out.exists()
    assert main([cmd, str(path), str(path), "--names", "a", "b", "--no-progress"]) == 0  # named: allowed


def test_spectrum_names_error_prints_no_progress_line(small, tmp_path, capsys):
    _, path = small
    other = tmp_path / "other.h5"
    other.write_bytes(path.read_bytes())
    assert main(["spectrum", str(path), str(other), "--names", "a"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--names gives 1 name(s) for 2 file(s)" in err


def test_per_class_with_clustering_only_is_refused_up_front(small, tmp_path, capsys):
    """It ran the k-means, printed NMI, then failed (exit 1): 'evaluate with per_class=True'."""
    _, path = small
    pc = tmp_path / "pc.csv"
    assert main(["evaluate", str(path), "--per-class", str(pc), "--include", "NMI", "F1", "--no-progress"]) == 2
    cap = capsys.readouterr()
    assert "--per-class needs a retrieval metric" in cap.err and cap.out == "" and not pc.exists()
    assert main(["evaluate", str(path), "--per-class", str(pc), "--include", "MAP@R", "NMI", "--no-progress"]) == 0
    assert pc.exists()


def test_spectrum_one_file_table_names_the_model(small, capsys):
    _, path = small
    assert main(["spectrum", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("small [train]")


def test_collapsed_spectrum_is_drawn(tmp_path):
    """A collapsed model (every row the same vector): s = (s1, 0, 0, 0), one value a log axis shows. The
    line through one point drew nothing (a legend entry and no mark), the per-class panel's x axis ran
    0.96-1.04, and the legend gave no ρ (NaN with the top value left out, inf with none left out)."""
    import matplotlib.pyplot as plt

    from embedscope.viz.spectrum import plot_spectra

    entries = [{"label": "collapsed", "spectrum": [3.0, 0, 0, 0], "rho": float("nan"),
                "class_mean": np.array([1.0, 0, 0, 0]), "class_std": np.zeros(4)},
               {"label": "ok", "spectrum": [3.0, 2, 1, 0.5], "rho": 0.1,
                "class_mean": np.array([0.5, 0.3, 0.15, 0.05]), "class_std": np.full(4, 0.01)}]
    fig = plot_spectra(entries, exclude_top=1, by_class=True)
    try:
        left, right = fig.axes[:2]
        for ax in (left, right):
            line = ax.get_legend().get_lines()[0]
            assert line.get_marker() not in (None, "None", "", " ")  # the collapsed curve is marked
            assert ax.get_legend().get_lines()[1].get_marker() in (None, "None", "", " ")  # others plain lines
        assert right.get_xlim() == pytest.approx((0.5, 4.5))
        texts = [t.get_text() for t in left.get_legend().get_texts()]
        assert texts[0] == "collapsed (ρ undefined)" and texts[1] == "ok (ρ = 0.100)"
    finally:
        plt.close(fig)
    fig = plot_spectra([{"label": "c", "spectrum": [3.0, 0, 0, 0], "rho": float("inf")}], exclude_top=0)
    try:
        assert fig.axes[0].get_legend().get_texts()[0].get_text() == "c (ρ = ∞)"
    finally:
        plt.close(fig)


def test_collapsed_file_spectrum_command(tmp_path):
    """End to end: the command draws a collapsed file's figure (PNG and PDF) and reports ρ undefined."""
    X = np.tile(np.random.default_rng(0).standard_normal((1, 4)), (20, 1))
    path = tmp_path / "collapsed.h5"
    save_set(path, X, [0] * 10 + [1] * 10, "train")
    png, j = tmp_path / "c.png", tmp_path / "c.json"
    assert main(["spectrum", str(path), "--by-class", "-o", str(png), "--json", str(j)]) == 0
    assert png.exists() and png.with_suffix(".pdf").exists()
    values = json.loads(j.read_text())["values"]
    assert values["rho"] is None and values["pi_intra"] == 0.0  # NaN is null in JSON


@pytest.mark.parametrize("extra, message", [
    (["--center"], "--center shapes the class-conditioned spectra: give --by-class"),
    (["--n-values", "5"], "--n-values shapes the class-conditioned spectra: give --by-class"),
    (["--title", "T"], "--title is the figure's title: give -o OUT.png"),
])
def test_spectrum_options_that_did_nothing_alone_are_usage_errors(tmp_path, capsys, extra, message):
    """--center / --n-values without --by-class and --title without -o exited 0 and did nothing."""
    from embedscope.cli import main
    from embedscope.store import EmbeddingSet, save

    f = tmp_path / "e.h5"
    save(f, EmbeddingSet.from_arrays(np.random.default_rng(0).normal(size=(30, 4)).astype(np.float32),
                                     np.arange(30) % 3, split="train"), force=True)
    assert main(["spectrum", str(f), *extra]) == 2
    assert message in capsys.readouterr().err
    with_partner = ["--by-class"] if extra[0] != "--title" else ["-o", str(tmp_path / "s.png")]
    assert main(["spectrum", str(f), *extra, *with_partner]) == 0
