"""Audit 24: how the options of the analysis commands interact (evaluate, neighbours, geometry,
spectrum, import, add-properties).

* an infinite measure (π_ratio when π_inter = 0 < π_intra; ρ with a zero singular value) gets a
  note as an undefined one does, and the same value in the terminal, CSV, Parquet (inf) and JSON
  (null, with ``provenance["infinite"]`` saying why);
* an option that a combination leaves unused is a usage error (exit 2, one line naming both
  options) or a note: ``evaluate --k / --seed / --niter / --lone-queries`` with an ``--include``
  that leaves their metrics out, ``neighbours --seed`` with ``--paths-file``, ``neighbours --root``
  for the digits, ``geometry --seed`` when the uniformity is exact, ``spectrum --n-values`` beyond D;
* ``spectrum --n-components K`` says in the table title and in the figure that ρ used K values;
* an output whose name ends in another format's suffix (``--json out.csv``, ``--csv emb.h5``,
  ``import -o out.csv``) is refused before any work;
* errors about --n-components / --exclude-top name the options.

Every number is checked against a numpy computation written here (docs/methods.md §2-§3).
"""

import contextlib
import io
import json
import math

import numpy as np
import pandas as pd
import pytest

from embedscope import store
from embedscope.cli import main


def run(args):
    """(exit code, stdout, stderr) of the command line run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def usage_error(args, *needles):
    rc, out, err = run(args)
    assert rc == 2, (rc, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)
    return err


# ----------------------------------------------------------------------------- independent formulas
def _unit(X):
    X = np.asarray(X, dtype=np.float64)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def ref_pi(X, y):
    """π_intra (mean over classes of the mean cosine distance of distinct same-class pairs) and
    π_inter (mean cosine distance of distinct pairs of class means), docs/methods.md §3."""
    U, y = _unit(X), np.asarray(y)
    intra, means = [], []
    for c in np.unique(y):
        Uc = U[y == c]
        n = len(Uc)
        D = 1 - Uc @ Uc.T
        intra.append((D.sum() - np.trace(D)) / (n * (n - 1)))
        means.append(np.asarray(X, dtype=np.float64)[y == c].mean(axis=0))
    M = _unit(np.array(means))
    C = len(M)
    Dm = 1 - M @ M.T
    return float(np.mean(intra)), float((Dm.sum() - np.trace(Dm)) / (C * (C - 1)))


def ref_rho(X, exclude_top=1, n_components=None):
    s = np.linalg.svd(np.asarray(X, dtype=np.float64), compute_uv=False)
    if n_components is not None:
        s = s[:n_components]
    s = s[exclude_top:]
    p = s / s.sum()
    u = 1.0 / s.size
    return float(np.sum(u * np.log(u / p)))


# ----------------------------------------------------------------------------- files
#: three classes whose means all point along (1, 0) but which have spread: π_inter = 0 < π_intra
COINCIDENT = np.array([[1, 1], [1, -1], [1, 1], [1, -1], [1, 0.5], [1, -0.5]], dtype=np.float64)
COINCIDENT_Y = [0, 0, 1, 1, 2, 2]


@pytest.fixture
def coincident(tmp_path):
    path = tmp_path / "coincident.h5"
    store.save(path, store.EmbeddingSet.from_arrays(COINCIDENT, COINCIDENT_Y, split="train"))
    return path


@pytest.fixture
def small(tmp_path):
    """40 rows, D = 6, 4 classes, train and test rows of every class."""
    rng = np.random.default_rng(7)
    y = np.repeat(np.arange(4), 10)
    X = rng.normal(size=(40, 6)) + 3 * np.eye(6)[y]
    split = np.where(np.arange(40) % 2 == 0, "train", "test")
    path = tmp_path / "small.h5"
    store.save(path, store.EmbeddingSet.from_arrays(X, y, split=split,
                                                    paths=[f"digits/{i:04d}" for i in range(40)]))
    return path, X.astype(np.float32).astype(np.float64), y, split


# ----------------------------------------------------------------------------- π_ratio = inf
def test_pi_ratio_inf_is_explained_and_the_same_in_every_output(coincident, tmp_path):
    intra, inter = ref_pi(COINCIDENT, COINCIDENT_Y)
    assert inter == pytest.approx(0.0, abs=1e-15) and intra == pytest.approx(0.8, rel=1e-12)
    js, cs, pq = tmp_path / "g.json", tmp_path / "g.csv", tmp_path / "g.parquet"
    rc, out, err = run(["geometry", coincident, "--json", js, "--csv", cs, "--parquet", pq])
    assert rc == 0, err
    row = {ln.split()[0]: ln.split()[1] for ln in out.splitlines() if ln.startswith("pi_")}
    assert row["pi_ratio"] == "inf" and float(row["pi_intra"]) == pytest.approx(intra, abs=1e-5)
    notes = [ln for ln in out.splitlines() if ln.startswith("infinite")]
    assert len(notes) == 1 and "pi_ratio" in notes[0] and "pi_inter = 0" in notes[0], out
    assert not any("pi_ratio" in ln for ln in out.splitlines() if ln.startswith("undefined")), out
    # the files: inf in the CSV and the Parquet; JSON has no inf: null, with the reason beside it
    csv_v = pd.read_csv(cs).set_index("measure")["value"]
    pq_v = pd.read_parquet(pq).set_index("measure")["value"]
    assert math.isinf(csv_v["pi_ratio"]) and csv_v["pi_ratio"] > 0
    assert math.isinf(pq_v["pi_ratio"]) and pq_v["pi_ratio"] > 0
    assert csv_v["pi_intra"] == pytest.approx(intra, rel=1e-12) and pq_v["pi_intra"] == pytest.approx(intra, rel=1e-12)
    doc = json.loads(js.read_text())
    assert doc["values"]["pi_ratio"] is None
    assert "pi_inter = 0" in doc["provenance"]["infinite"]["pi_ratio"]
    assert "pi_ratio" not in doc["provenance"]["undefined"]
    # spectrum prints the same note (several files: named)
    rc, out, err = run(["spectrum", coincident, coincident, "--names", "a", "b", "--no-progress"])
    assert rc == 0, err
    assert sum(ln.startswith(("a: infinite", "b: infinite")) for ln in out.splitlines()) == 2, out


def test_rho_all_inf_of_a_collapsed_model_is_explained(tmp_path):
    X = np.tile([[1.0, 2.0, 3.0]], (6, 1))
    X[::2] *= 2  # every row on one line through the origin: one nonzero singular value
    path = tmp_path / "collapsed.h5"
    store.save(path, store.EmbeddingSet.from_arrays(X, COINCIDENT_Y, split="train"))
    s = np.linalg.svd(X, compute_uv=False)
    assert s[0] > 0 and np.all(s[1:] < 1e-12 * s[0])  # KL(U||s) of all three values: a log(1/0)
    rc, out, err = run(["geometry", path])
    assert rc == 0, err
    assert [ln.split()[1] for ln in out.splitlines() if ln.startswith("rho_all")] == ["inf"]
    notes = [ln for ln in out.splitlines() if ln.startswith("infinite")]
    assert len(notes) == 1 and "rho_all" in notes[0] and "log(1/0)" in notes[0], out


def test_finite_geometry_has_no_infinite_note(small):
    path, X, y, split = small
    rc, out, err = run(["geometry", path])
    assert rc == 0, err
    assert "infinite" not in out
    tr = split == "train"
    intra, inter = ref_pi(X[tr], y[tr])
    got = {ln.split()[0]: float(ln.split()[1]) for ln in out.splitlines() if ln.startswith("pi_")}
    assert got["pi_ratio"] == pytest.approx(intra / inter, abs=1e-5)


# ----------------------------------------------------------------------------- evaluate --include
@pytest.mark.parametrize("extra, needles", [
    (["--include", "MAP@R", "--k", "1", "2"], ["--k 1 2", "--include MAP@R", "R@k"]),
    (["--include", "R@k", "--seed", "5"], ["--seed 5", "--include R@k", "NMI"]),
    (["--include", "P@1", "MAP@R", "--niter", "3"], ["--niter 3", "--include P@1 MAP@R"]),
    (["--include", "NMI", "F1", "--lone-queries", "zero"], ["--lone-queries zero", "--include NMI F1"]),
])
def test_evaluate_refuses_options_its_include_leaves_unused(small, extra, needles):
    path = small[0]
    usage_error(["evaluate", path, "--no-progress", "--device", "cpu", *extra], *needles)


def test_evaluate_options_that_are_used_still_run(small):
    path = small[0]
    for extra in (["--include", "R@k", "--k", "1", "3"], ["--include", "NMI", "--seed", "5", "--niter", "3"],
                  ["--include", "R@1", "--lone-queries", "zero", "--k", "1"], ["--seed", "5", "--k", "1"]):
        rc, out, err = run(["evaluate", path, "--no-progress", "--device", "cpu", *extra])
        assert rc == 0, (extra, err)


# ----------------------------------------------------------------------------- output names
@pytest.mark.parametrize("args, needle", [
    (["geometry", "{f}", "--json", "{d}/out.csv"], "--json writes JSON, not CSV"),
    (["geometry", "{f}", "--csv", "{d}/other.h5"], "--csv writes CSV, not HDF5"),
    (["geometry", "{f}", "--parquet", "{d}/out.json"], "--parquet writes Parquet, not JSON"),
    (["spectrum", "{f}", "--table-csv", "{d}/t.parquet", "--no-progress"], "--table-csv writes CSV"),
    (["evaluate", "{f}", "--per-class", "{d}/pc.json", "--no-progress"], "--per-class writes CSV, not JSON"),
])
def test_an_output_named_as_another_format_is_refused(small, tmp_path, args, needle):
    path = small[0]
    other = tmp_path / "other.h5"
    other.write_bytes(b"an embedding file not given to the command")
    before = sorted(p.name for p in tmp_path.iterdir())
    usage_error([a.format(f=path, d=tmp_path) for a in args] + ["--force"], needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert other.read_bytes() == b"an embedding file not given to the command"


def test_an_output_with_a_neutral_suffix_is_written(small, tmp_path):
    path = small[0]
    rc, out, err = run(["geometry", path, "--json", tmp_path / "g.txt", "--csv", tmp_path / "g.CSV"])
    assert rc == 0, err
    assert json.loads((tmp_path / "g.txt").read_text())["analysis"] == "geometry"


def test_import_refuses_an_output_named_as_another_format(tmp_path):
    src = tmp_path / "t.csv"
    pd.DataFrame({"e0": [0.1, 0.5, 0.9, 0.3], "e1": [1.0, 0.2, 0.4, 0.8], "label": [0, 0, 1, 1]}).to_csv(src, index=False)
    usage_error(["import", src, "-o", tmp_path / "out.csv"], "-o writes HDF5, not CSV")
    assert not (tmp_path / "out.csv").exists()
    rc, out, err = run(["import", src, "-o", tmp_path / "out.hdf5"])
    assert rc == 0, err
    assert store.load(tmp_path / "out.hdf5").n == 4


def test_add_properties_refuses_the_embedding_file_as_its_table(small):
    path = small[0]
    before = path.read_bytes()
    usage_error(["add-properties", path, path], "is the embedding file itself")
    assert path.read_bytes() == before


# ----------------------------------------------------------------------------- neighbours
def test_neighbours_refuses_seed_with_paths_file(small, tmp_path):
    path = small[0]
    pf = tmp_path / "q.txt"
    pf.write_text("digits/0001\n")
    usage_error(["neighbours", path, "-o", tmp_path / "n.png", "--paths-file", pf, "--seed", "3"],
                "--seed 3", "--paths-file")
    assert not (tmp_path / "n.png").exists()


def test_neighbours_says_root_is_not_read_for_digits(small, tmp_path):
    path = small[0]
    rc, out, err = run(["neighbours", path, "-o", tmp_path / "n.png", "--root", tmp_path / "nowhere",
                        "--queries", "2", "--n-retrievals", "2", "--no-progress"])
    assert rc == 0, err
    assert "note: --root" in out and "not read" in out, out
    rc, out, err = run(["neighbours", path, "-o", tmp_path / "m.png", "--queries", "2", "--n-retrievals", "2",
                        "--no-progress", "--seed", "4"])
    assert rc == 0, err
    assert "--root" not in out and "--seed 4" in out


# ----------------------------------------------------------------------------- geometry / spectrum
def test_geometry_seed_with_exact_uniformity_gets_a_note(small):
    path = small[0]  # 20 train rows: 190 pairs, exact under the default --max-pairs
    rc, out, err = run(["geometry", path, "--seed", "7"])
    assert rc == 0, err
    assert "note: --seed 7 is not used: the uniformity is exact, over all 190 pairs" in out, out
    rc, out, err = run(["geometry", path])
    assert rc == 0 and "--seed" not in out
    rc, out, err = run(["geometry", path, "--seed", "7", "--max-pairs", "50"])  # sampled: the seed is used
    assert rc == 0 and "--seed" not in out and "a sample of 50 pairs" in out


def test_spectrum_n_components_is_said_and_rho_matches(small, tmp_path):
    path, X, y, split = small
    tr = split == "train"
    js = tmp_path / "s.json"
    rc, out, err = run(["spectrum", path, "--n-components", "4", "--json", js, "-o", tmp_path / "s.png",
                        "--no-progress"])
    assert rc == 0, err
    assert "of the first 4 (--n-components)" in out.splitlines()[0], out
    values = json.loads(js.read_text())["values"]
    assert values["rho"] == pytest.approx(ref_rho(X[tr], 1, 4), rel=1e-9)
    assert values["rho_all"] == pytest.approx(ref_rho(X[tr], 0, 4), rel=1e-9)
    rc, out, err = run(["spectrum", path, "--no-progress"])
    assert "--n-components" not in out


def test_spectrum_figure_marks_the_values_beyond_n_components():
    from embedscope.viz.spectrum import plot_spectra

    s = np.array([8.0, 4, 2, 1, 0.5, 0.25])
    texts = lambda fig: [t.get_text() for t in fig.axes[0].get_legend().get_texts()]  # noqa: E731
    assert texts(plot_spectra([{"label": "m", "spectrum": s}], exclude_top=1, n_components=3))[-1] == \
        "left out of ρ (top 1, beyond 3)"
    assert texts(plot_spectra([{"label": "m", "spectrum": s}], exclude_top=0, n_components=3))[-1] == \
        "left out of ρ (beyond 3)"
    assert texts(plot_spectra([{"label": "m", "spectrum": s}], exclude_top=1))[-1] == "left out of ρ (top 1)"
    assert texts(plot_spectra([{"label": "m", "spectrum": s}], exclude_top=1, n_components=6))[-1] == \
        "left out of ρ (top 1)"


def test_spectrum_n_values_beyond_d_gets_a_note(small):
    path = small[0]
    rc, out, err = run(["spectrum", path, "--by-class", "--n-values", "50", "--no-progress"])
    assert rc == 0, err
    assert "note: --n-values 50: 6 values per class spectrum (at most D = 6)" in out, out
    rc, out, err = run(["spectrum", path, "--by-class", "--n-values", "4", "--no-progress"])
    assert rc == 0 and "--n-values" not in out


@pytest.mark.parametrize("extra, needle", [
    (["--n-components", "40"], "n_components (--n-components) 40: the train split of {f} has 6 singular values"),
    (["--exclude-top", "6"], "exclude_top (--exclude-top) 6 leaves no singular value"),
    (["--n-components", "3", "--exclude-top", "3"], "--n-components keeps 3"),
])
def test_spectrum_option_errors_name_the_options(small, extra, needle):
    path = small[0]
    needle = needle.format(f=path)
    for cmd in ("geometry", "spectrum"):
        rc, out, err = run([cmd, path, *extra, "--no-progress"] if cmd == "spectrum" else [cmd, path, *extra])
        assert rc == 1 and needle in err and len(err.strip().splitlines()) == 1, (cmd, err)


def test_import_prefix_says_which_matching_columns_other_options_took(tmp_path):
    src = tmp_path / "t.csv"
    rng = np.random.default_rng(3)
    df = pd.DataFrame({f"e{i}": rng.normal(size=6) for i in range(3)})
    df["label"] = [0, 0, 0, 1, 1, 1]
    df.to_csv(src, index=False)
    rc, out, err = run(["import", src, "-o", tmp_path / "a.h5", "--embeddings", "e*", "--properties", "e1"])
    assert rc == 0, err
    assert "embeddings: 2 columns e0, e2; left out e1: taken as labels, split, paths or properties" in out, out
    es = store.load(tmp_path / "a.h5")
    np.testing.assert_array_equal(es.embeddings, df[["e0", "e2"]].to_numpy(np.float32))
    np.testing.assert_array_equal(es.properties["e1"], df["e1"].to_numpy())
    rc, out, err = run(["import", src, "-o", tmp_path / "b.h5", "--embeddings", "e*", "--properties", "e0", "e1", "e2"])
    assert rc == 1 and "e0, e1, e2 are taken as labels, split, paths or properties" in err, err
    assert not (tmp_path / "b.h5").exists()


@pytest.mark.parametrize("name, text, needle", [
    ("p.tsv", "path,ink\n{p}\n", "its header looks comma-separated: rename it .csv"),
    ("p.csv", "path\tink\n{p}\n", "its header looks tab-separated: rename it .tsv"),
])
def test_add_properties_names_a_table_of_the_other_separator(small, tmp_path, name, text, needle):
    path = small[0]
    rows = "\n".join(f"digits/{i:04d}{',' if name.endswith('tsv') else chr(9)}{i % 2}" for i in range(40))
    table = tmp_path / name
    table.write_text(text.format(p=rows))
    rc, out, err = run(["add-properties", path, table])
    assert rc == 1 and needle in err and len(err.strip().splitlines()) == 1, err
    assert store.load(path).properties == {}


def test_evaluate_query_split_alone_says_the_gallery_is_not_searched(tmp_path):
    rng = np.random.default_rng(2)
    y = np.tile(np.arange(4), 6)
    X = rng.normal(size=(24, 5)) + 2 * np.eye(5)[y]
    split = np.where(np.arange(24) < 12, "query", "gallery")
    path = tmp_path / "qg.h5"
    store.save(path, store.EmbeddingSet.from_arrays(X, y, split=split))
    base = ["evaluate", path, "--include", "R@1", "--k", "1", "--no-progress", "--device", "cpu"]
    rc, out, err = run(base + ["--split", "query"])
    assert rc == 0, err
    assert "note: the query rows are searched among themselves, not in the file's gallery rows" in out, out
    rc, out, err = run(base + ["--query-split", "query", "--reference-split", "gallery"])
    assert rc == 0 and "note:" not in out, out
    # R@1 of the query rows against the gallery rows, brute force (cosine; ties to the lower index)
    Xq, Xg = X[:12].astype(np.float32).astype(np.float64), X[12:].astype(np.float32).astype(np.float64)
    S = _unit(Xq) @ _unit(Xg).T
    r1 = float(np.mean(y[12:][np.argmax(S, axis=1)] == y[:12]))
    assert float([ln.split()[1] for ln in out.splitlines() if ln.startswith("R@1")][0]) == pytest.approx(r1, abs=5e-5)


@pytest.mark.parametrize("args, needle", [
    (["evaluate", "{f}", "--csv", "{d}/x.csv", "--per-class", "{d}/x.csv", "--no-progress"],
     "(--csv {d}/x.csv, --per-class {d}/x.csv)"),
    (["spectrum", "{f}", "-o", "{d}/q.png", "--table-csv", "{d}/q.png", "--no-progress"],
     "(--table-csv {d}/q.png, -o {d}/q.png)"),
    (["geometry", "{f}", "--json", "{d}/a.out", "--csv", "{d}/a.out"], "(--json {d}/a.out, --csv {d}/a.out)"),
])
def test_two_outputs_on_one_file_name_both_options(small, tmp_path, args, needle):
    path = small[0]
    usage_error([a.format(f=path, d=tmp_path) for a in args], "two outputs name the same file",
                needle.format(d=tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.h5"]


def test_evaluate_several_files_says_why_a_default_k_is_missing(small, tmp_path):
    path = small[0]  # 20 test rows: every default k (1 2 4 8) within the 19 references of a query
    rng = np.random.default_rng(0)
    y = np.array([0, 0, 0, 1, 1, 1])
    X = rng.normal(size=(6, 4)) + 2 * np.eye(4)[y]
    tiny = tmp_path / "tiny.h5"
    store.save(tiny, store.EmbeddingSet.from_arrays(X, y, split="test"))
    rc, out, err = run(["evaluate", path, tiny, "--include", "R@k", "--no-progress", "--device", "cpu"])
    assert rc == 0, err
    row8 = [ln.split() for ln in out.splitlines() if ln.startswith("R@8")][0]
    assert row8[2] == "–" and "nan" not in out, out
    assert "note: tiny: no R@8 (–): a query has at most 5 references, and the default k stop there" in out, out
    # R@4 of the tiny file, brute force: a hit when one of the 4 most similar others is of the class
    U = _unit(X.astype(np.float32).astype(np.float64))
    S = U @ U.T
    np.fill_diagonal(S, -np.inf)
    top = np.argsort(-S, axis=1, kind="stable")[:, :4]
    r4 = float(np.mean([(y[t] == y[i]).any() for i, t in enumerate(top)]))
    assert float([ln.split()[2] for ln in out.splitlines() if ln.startswith("R@4")][0]) == pytest.approx(r4, abs=5e-5)


def test_several_files_a_missing_split_is_refused_before_any_file_is_analysed(small, coincident, monkeypatch):
    import embedscope.analyses.structure as structure
    import embedscope.metrics as metrics

    path = small[0]
    calls = []
    monkeypatch.setattr(metrics, "retrieval_metrics", lambda *a, **k: calls.append("search"))
    monkeypatch.setattr(structure, "geometry", lambda *a, **k: calls.append("geometry"))
    # coincident.h5 holds train rows only; small.h5 (first) has test rows
    for args in (["evaluate", path, coincident, "--no-progress", "--device", "cpu"],
                 ["evaluate", path, coincident, "--query-split", "train", "--reference-split", "test", "--no-progress"],
                 ["spectrum", path, coincident, "--split", "test", "--no-progress"]):
        rc, out, err = run(args)
        assert rc == 1 and f"the file {coincident} has no 'test' rows (splits present: train)" in err, (args, err)
        assert calls == [], (args, calls)


def test_study_row_gives_pi_ratio_inf_its_reason():
    """A study row whose pi_ratio is inf (pi_inter = 0 < pi_intra) says why, as geometry does, not just '+inf'."""
    from embedscope.analyses.structure import geometry
    from embedscope.study.run import undefined_reasons

    es = store.EmbeddingSet.from_arrays(COINCIDENT, COINCIDENT_Y, split="train")
    r = geometry(es, split="train")
    assert r["pi_ratio"] == np.inf and r.provenance["infinite"]["pi_ratio"]
    why = undefined_reasons(es, {"pi_ratio": float("inf"), "rho": 0.5})
    assert set(why) == {"pi_ratio"}
    assert why["pi_ratio"] == f"infinite: {r.provenance['infinite']['pi_ratio']}"
