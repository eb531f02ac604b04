"""Audit 23: geometry, spectrum and info on degenerate but legitimate files.

* every class of the split a single sample (an SOP-like query split, a file imported with unique
  labels): the spectrum and ρ, π_inter, RankMe, α-ReQ and the uniformity are defined; π_intra,
  π_ratio and the alignment are not (NaN in files, – on the terminal, one note saying why);
* a split of one class: π_inter and π_ratio undefined, the rest defined;
* a file with NaN / inf embedding rows (only another tool writes one): ``info`` summarises it.

Every value is checked against a numpy computation written here from the definitions
(docs/methods.md §2-§4), never against embedscope's own functions.
"""

import csv
import json
import math
import re

import h5py
import numpy as np
import pandas as pd
import pytest

from embedscope import store
from embedscope.cli import main
from embedscope.errors import EmbedscopeError


# ----------------------------------------------------------------------------- independent formulas
def _unit(X):
    X = np.asarray(X, dtype=np.float64)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def ref_rho(X, exclude_top=1):
    s = np.linalg.svd(np.asarray(X, dtype=np.float64), compute_uv=False)[exclude_top:]
    p = s / s.sum()
    u = 1.0 / s.size
    return float(np.sum(u * np.log(u / p)))


def ref_rankme(X):
    s = np.linalg.svd(np.asarray(X, dtype=np.float64), compute_uv=False)
    p = s / s.sum() + 1e-7
    return float(np.exp(-np.sum(p * np.log(p))))


def ref_alpha(X):
    Xc = np.asarray(X, dtype=np.float64) - np.mean(X, axis=0)
    lam = np.linalg.svd(Xc, compute_uv=False) ** 2 / (len(X) - 1)
    lam = lam[: min(len(X) - 1, X.shape[1])]
    k = np.arange(1, lam.size + 1)
    return float(-np.polyfit(np.log(k), np.log(lam), 1)[0])


def ref_uniformity(X, t=2.0):
    U = _unit(X)
    i, j = np.triu_indices(len(U), 1)
    d2 = np.sum((U[i] - U[j]) ** 2, axis=1)
    return float(np.log(np.mean(np.exp(-t * d2))))


def ref_pi_inter(X, y):
    """Mean cosine distance between the normalised class means, every ordered pair k != l."""
    y = np.asarray(y)
    M = _unit(np.array([np.mean(np.asarray(X, dtype=np.float64)[y == c], axis=0) for c in np.unique(y)]))
    C = len(M)
    return float(sum(1 - M[k] @ M[m] for k in range(C) for m in range(C) if k != m) / (C * C - C))


def ref_pi_intra(X, y):
    """Mean over classes of >= 2 rows of the mean cosine distance of their ordered pairs i != j."""
    U, y = _unit(X), np.asarray(y)
    per = []
    for c in np.unique(y):
        V = U[y == c]
        n = len(V)
        if n >= 2:
            per.append(sum(1 - V[a] @ V[b] for a in range(n) for b in range(n) if a != b) / (n * n - n))
    return float(np.mean(per))


def ref_alignment(X, y):
    U, y = _unit(X), np.asarray(y)
    tot, pairs = 0.0, 0
    for c in np.unique(y):
        V = U[y == c]
        for a in range(len(V)):
            for b in range(len(V)):
                if a != b:
                    tot += np.sum((V[a] - V[b]) ** 2)
                    pairs += 1
    return tot / pairs


def lone_set(n=20, d=8, seed=0, split="train"):
    X = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    return store.EmbeddingSet.from_arrays(X, list(range(n)), split=split)


def one_class_set(n=12, d=8, seed=2):
    X = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    return store.EmbeddingSet.from_arrays(X, np.zeros(n, int), split="train")


def _table(out):
    """measure -> value cell (as printed) of a one-file measures table."""
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            rows.setdefault(parts[0], parts[1])
    return rows


LONE_KEYS = ["pi_intra", "pi_ratio", "alignment"]
DEFINED_LONE = ["rho", "rho_all", "pi_inter", "effective_rank", "alpha", "uniformity"]


def _check_lone_values(values, X):
    X = np.asarray(X, dtype=np.float64)
    assert values["rho"] == pytest.approx(ref_rho(X), rel=1e-9)
    assert values["rho_all"] == pytest.approx(ref_rho(X, 0), rel=1e-9)
    assert values["pi_inter"] == pytest.approx(ref_pi_inter(X, np.arange(len(X))), rel=1e-9)
    assert values["effective_rank"] == pytest.approx(ref_rankme(X), rel=1e-9)
    assert values["alpha"] == pytest.approx(ref_alpha(X), rel=1e-9)
    assert values["uniformity"] == pytest.approx(ref_uniformity(X), rel=1e-9)


# ----------------------------------------------------------------------------- 1. spectrum
def test_spectrum_of_lone_classes_is_drawn(tmp_path, capsys):
    es = lone_set()
    path, png, j, t = tmp_path / "lone.h5", tmp_path / "s.png", tmp_path / "s.json", tmp_path / "t.csv"
    store.save(path, es)
    assert main(["spectrum", str(path), "-o", str(png), "--json", str(j), "--table-csv", str(t)]) == 0
    out = capsys.readouterr().out
    assert png.exists() and png.with_suffix(".pdf").exists()
    X = es.embeddings.astype(np.float64)
    s = np.linalg.svd(X, compute_uv=False)
    rows = list(csv.DictReader(t.open()))
    got = np.array([float(r["value"]) for r in rows if r["kind"] == "singular_value"])
    np.testing.assert_allclose(got, s, rtol=1e-9)
    norm = np.array([float(r["value"]) for r in rows if r["kind"] == "normalised"])
    np.testing.assert_allclose(norm, s / s.sum(), rtol=1e-9)
    d = json.loads(j.read_text())
    _check_lone_values({k: v for k, v in d["values"].items() if k in DEFINED_LONE}, X)
    assert all(d["values"][k] is None for k in LONE_KEYS)
    assert "undefined (–): pi_intra, pi_ratio, alignment (every class has a single sample" in out
    assert _table(out)["pi_intra"] == "–" and "nan" not in out


def test_spectrum_by_class_says_what_is_undefined(tmp_path, capsys):
    lone, cls = tmp_path / "lone.h5", tmp_path / "cls.h5"
    store.save(lone, lone_set())
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 6)).astype(np.float32)
    y = np.arange(30) % 3
    store.save(cls, store.EmbeddingSet.from_arrays(X, y, split="train"))
    png, j, t = tmp_path / "s.png", tmp_path / "s.json", tmp_path / "t.csv"
    # one file: whole-set spectrum, the class spectrum undefined, said on the terminal and in the JSON
    assert main(["spectrum", str(lone), "--by-class", "-o", str(png), "--json", str(j)]) == 0
    out = capsys.readouterr().out
    assert "no class-conditioned spectrum (--by-class): class-conditioned spectra need at least one class " \
           "with two or more samples (every class has a single sample)" in out
    prov = json.loads(j.read_text())["provenance"]
    assert prov["n_classes_used"] == 0 and "single sample" in prov["class_spectra_undefined"]
    # two files: the other file's class spectra as defined (per class s/sum s, first 35 -> D values)
    assert main(["spectrum", str(lone), str(cls), "--by-class", "-o", str(png), "--force",
                 "--table-csv", str(t)]) == 0
    out = capsys.readouterr().out
    assert "lone: no class-conditioned spectrum (--by-class)" in out and "cls: no class" not in out
    assert "lone: undefined (–): pi_intra, pi_ratio, alignment" in out
    rows = list(csv.DictReader(t.open()))
    assert not [r for r in rows if r["model"] == "lone" and r["kind"].startswith("class_")]
    per = []
    for c in range(3):
        s = np.linalg.svd(X[y == c].astype(np.float64), compute_uv=False)
        per.append(s / s.sum())
    got = np.array([float(r["value"]) for r in rows if r["model"] == "cls" and r["kind"] == "class_mean"])
    np.testing.assert_allclose(got, np.mean(per, axis=0), rtol=1e-9)


# ----------------------------------------------------------------------------- 2. geometry
def test_geometry_report_lone_classes_reports_the_defined_measures():
    from embedscope.metrics import geometry_report

    es = lone_set()
    r = geometry_report(es.embeddings, es.labels)
    _check_lone_values(r, es.embeddings)
    assert all(math.isnan(r[k]) for k in LONE_KEYS)
    assert list(r["undefined"]) == LONE_KEYS
    assert set(r["undefined"].values()) == {"every class has a single sample: no two samples of one class"}
    assert (r["n_singleton"], r["n_classes"]) == (20, 20)


def test_geometry_report_one_class():
    from embedscope.metrics import geometry_report

    es = one_class_set()
    X, y = es.embeddings.astype(np.float64), es.labels
    r = geometry_report(es.embeddings, y)
    assert math.isnan(r["pi_inter"]) and math.isnan(r["pi_ratio"])
    assert r["undefined"] == {"pi_inter": "one class only: no two class means",
                              "pi_ratio": "one class only: no two class means"}
    assert r["pi_intra"] == pytest.approx(ref_pi_intra(X, y), rel=1e-9)
    assert r["alignment"] == pytest.approx(ref_alignment(X, y), rel=1e-9)
    assert r["rho"] == pytest.approx(ref_rho(X), rel=1e-9)
    assert r["alpha"] == pytest.approx(ref_alpha(X), rel=1e-9)
    assert r["uniformity"] == pytest.approx(ref_uniformity(X), rel=1e-9)


def test_geometry_report_zero_class_mean_and_two_rows():
    from embedscope.metrics import geometry_report
    from embedscope.metrics.geometry import class_distances

    # class 0 = {x, -x}: its mean is the zero vector, so π_inter (cosine) has no direction for it
    rng = np.random.default_rng(4)
    x = rng.normal(size=5)
    X = np.vstack([x, -x, rng.normal(size=(6, 5))])
    y = np.array([0, 0, 1, 1, 1, 2, 2, 2])
    r = geometry_report(X, y)
    assert math.isnan(r["pi_inter"]) and math.isnan(r["pi_ratio"])
    assert r["undefined"]["pi_inter"].startswith("the mean of class 0 is the zero vector")
    assert r["pi_intra"] == pytest.approx(ref_pi_intra(X, y), rel=1e-9)
    assert r["alignment"] == pytest.approx(ref_alignment(X, y), rel=1e-9)
    with pytest.raises(EmbedscopeError, match="zero vector"):  # the stand-alone function still refuses
        class_distances(X, y)
    # two rows of two classes: one covariance eigenvalue, α-ReQ has no line to fit
    X2 = np.array([[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]])
    r = geometry_report(X2, [0, 1])
    assert math.isnan(r["alpha"]) and "single covariance eigenvalue" in r["undefined"]["alpha"]
    assert r["rho"] == 0.0  # one value left after the top one: P = U
    assert r["pi_inter"] == pytest.approx(ref_pi_inter(X2, [0, 1]), rel=1e-12)
    assert r["uniformity"] == pytest.approx(ref_uniformity(X2), rel=1e-12)


def test_collapsed_model_nan_values_come_with_their_reason(tmp_path, capsys):
    """Every row on one ray: ρ, π_ratio and α were NaN before too; now each says why (– with a note)."""
    from embedscope.metrics import geometry_report

    X = np.tile([[0.6, 0.8, 0.0, 0.0]], (10, 1))
    y = np.arange(10) % 2
    r = geometry_report(X, y)
    assert list(r["undefined"]) == ["rho", "pi_ratio", "alpha"]
    assert all(math.isnan(r[k]) for k in r["undefined"])
    assert (r["pi_intra"], r["pi_inter"], r["alignment"]) == (0.0, 0.0, 0.0)
    assert r["rho_all"] == math.inf and r["effective_rank"] == pytest.approx(ref_rankme(X), rel=1e-9)
    path = tmp_path / "col.h5"
    store.save(path, store.EmbeddingSet.from_arrays(X.astype(np.float32), y, split="train"))
    assert main(["geometry", str(path)]) == 0
    out = capsys.readouterr().out
    cells = _table(out)
    assert (cells["rho"], cells["pi_ratio"], cells["alpha"], cells["rho_all"]) == ("–", "–", "–", "inf")
    assert "undefined (–): rho (the singular values after the top 1 are all 0: X of rank <= 1, a collapsed " \
           "model); pi_ratio (" in out


def test_alpha_req_of_two_rows_is_nan_not_an_error():
    from embedscope.metrics import alpha_req

    assert math.isnan(alpha_req(np.array([[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]])))
    with pytest.raises(EmbedscopeError, match="at least two"):  # an explicit range still refuses
        alpha_req(np.random.default_rng(0).normal(size=(50, 10)), k_min=10)


def test_unusable_input_is_still_an_error():
    from embedscope.metrics import geometry_report

    with pytest.raises(EmbedscopeError, match=r"at least 2 row\(s\)"):
        geometry_report(np.ones((1, 3)), [0])
    X = np.random.default_rng(0).normal(size=(6, 3))
    X[2, 1] = np.nan
    with pytest.raises(EmbedscopeError, match="row 2 of X contains NaN"):
        geometry_report(X, np.arange(6))


def test_geometry_cli_lone_classes_files_and_terminal(tmp_path, capsys):
    es = lone_set()
    path = tmp_path / "lone.h5"
    store.save(path, es)
    j, c, pq = tmp_path / "g.json", tmp_path / "g.csv", tmp_path / "g.parquet"
    assert main(["geometry", str(path), "--json", str(j), "--csv", str(c), "--parquet", str(pq)]) == 0
    out = capsys.readouterr().out
    cells = _table(out)
    assert all(cells[k] == "–" for k in LONE_KEYS) and "nan" not in out
    assert [ln for ln in out.splitlines() if ln.startswith("undefined")] == [
        "undefined (–): pi_intra, pi_ratio, alignment (every class has a single sample: no two samples of one class)"]
    X = es.embeddings.astype(np.float64)
    d = json.loads(j.read_text())
    assert all(d["values"][k] is None for k in LONE_KEYS)
    assert list(d["provenance"]["undefined"]) == LONE_KEYS
    _check_lone_values({k: d["values"][k] for k in DEFINED_LONE}, X)
    rows = {r["measure"]: r["value"] for r in csv.DictReader(c.open())}
    assert all(rows[k] == "" for k in LONE_KEYS) and int(rows["n_singleton"]) == 20
    assert float(rows["pi_inter"]) == pytest.approx(ref_pi_inter(X, np.arange(20)), rel=1e-9)
    frame = pd.read_parquet(pq).set_index("measure")["value"]
    assert all(np.isnan(frame[k]) for k in LONE_KEYS)
    assert frame["rho"] == pytest.approx(ref_rho(X), rel=1e-9)


def test_geometry_cli_one_class(tmp_path, capsys):
    path = tmp_path / "one.h5"
    es = one_class_set()
    store.save(path, es)
    assert main(["geometry", str(path)]) == 0
    out = capsys.readouterr().out
    cells = _table(out)
    assert cells["pi_inter"] == "–" and cells["pi_ratio"] == "–"
    assert float(cells["pi_intra"]) == pytest.approx(ref_pi_intra(es.embeddings, es.labels), abs=1e-5)
    assert "undefined (–): pi_inter, pi_ratio (one class only: no two class means)" in out


def test_geometry_cli_unusable_split_is_one_line_exit_1(tmp_path, capsys):
    path = tmp_path / "one_row.h5"
    X = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    store.save(path, store.EmbeddingSet.from_arrays(X, [0, 1, 2, 3], split=["train", "test", "test", "test"]))
    assert main(["geometry", str(path)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_analysis_and_study_record_nan_for_undefined_measures():
    from embedscope.analyses import geometry
    from embedscope.analyses.registry import compute_measures
    from embedscope.analyses.structure import undefined_note
    from embedscope.study.stats import correlate

    es = lone_set()
    r = geometry(es)
    assert all(math.isnan(r[k]) for k in LONE_KEYS)
    assert undefined_note(r.provenance["undefined"]).startswith("undefined (–): pi_intra, pi_ratio, alignment (")
    vals = compute_measures(es, ["rho", "pi_intra", "pi_inter", "alignment", "uniformity"])
    assert math.isnan(vals["pi_intra"]) and math.isnan(vals["alignment"])
    X = es.embeddings.astype(np.float64)
    assert vals["rho"] == pytest.approx(ref_rho(X), rel=1e-9)
    assert vals["uniformity"] == pytest.approx(ref_uniformity(X), rel=1e-9)
    # a study's statistics leave a NaN measure's point out (the others' correlation is over the rest)
    m = np.array([0.1, vals["pi_intra"], 0.3, 0.2, 0.5])
    target = np.array([1.0, 5.0, 2.0, 2.5, 4.0])
    got = correlate(m, target, n_boot=0)
    keep = np.isfinite(m)
    assert got["n"] == 4 and got["pearson"] == pytest.approx(np.corrcoef(m[keep], target[keep])[0, 1], rel=1e-12)


# ----------------------------------------------------------------------------- 3. info
def _with_nonfinite(tmp_path, name="nan.h5", **extra):
    X = np.random.default_rng(3).normal(size=(10, 4)).astype(np.float32)
    paths = [f"img{i}.png" for i in range(10)]
    paths[2] = "evil\x1b[2J.png"
    path = tmp_path / name
    store.save(path, store.EmbeddingSet.from_arrays(X, np.arange(10) % 3, split="train", paths=paths))
    with h5py.File(path, "r+") as f:  # what another tool may write: store.save refuses it
        emb = f["embeddings"]
        emb[2, 1] = np.nan
        emb[5, 0] = np.inf
        emb[7, :] = np.nan
        for k, v in extra.items():
            if k == "labels":
                f["labels"][0] = v
            else:
                f.attrs[k] = v
    X64 = X.astype(np.float64)
    return path, X64


def _info_rows(out):
    rows = {}
    for line in out.splitlines()[2:]:
        field, _, value = line.partition("  ")
        rows[field.strip()] = value.strip()
    return rows


def test_info_summarises_a_file_with_nonfinite_rows(tmp_path, capsys):
    path, X = _with_nonfinite(tmp_path)
    with pytest.raises(EmbedscopeError, match="3 embedding rows contain NaN or inf"):
        store.load(path)  # every analysis refuses it
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    rows = _info_rows(out)
    assert rows["non-finite rows"] == ("3 of 10 (2 with NaN, 1 with inf); first: row 2, path evil\\x1b[2J.png; "
                                       "every analysis refuses the file")
    assert rows["N x D"] == "10 x 4" and rows["classes"] == "3" and rows["train"] == "10 images, 3 classes"
    finite = np.delete(X, [2, 5, 7], axis=0)
    assert rows["mean embedding norm"] == f"{np.linalg.norm(finite, axis=1).mean():.4f} (over the 7 finite rows)"


def test_info_still_refuses_other_problems(tmp_path, capsys):
    path, _ = _with_nonfinite(tmp_path, "labels.h5", labels=99)  # a label beyond class_names as well
    assert main(["info", str(path)]) == 1
    err = capsys.readouterr().err
    assert "labels must lie in [0, 3)" in err and len(err.strip().splitlines()) == 1
    path, _ = _with_nonfinite(tmp_path, "newer.h5", format_version=99)
    assert main(["info", str(path)]) == 1
    err = capsys.readouterr().err
    assert "format_version 99 is newer" in err and len(err.strip().splitlines()) == 1


def test_rho_of_one_dimension_is_undefined_not_an_error(tmp_path, capsys):
    """D = 1: one singular value, none left once ρ leaves out the top one. ρ is NaN with the reason
    and every other measure is reported (the whole file was refused); ρ with nothing left out is
    KL(U‖P) of one value: 0."""
    from embedscope.cli import main
    from embedscope.metrics import geometry_report

    rng = np.random.default_rng(4)
    X = rng.normal(size=(40, 1))
    y = np.arange(40) % 4
    rep = geometry_report(X, y)
    assert np.isnan(rep["rho"]) and rep["rho_all"] == 0.0
    assert rep["undefined"]["rho"] == "1 singular value (N = 40, D = 1): none left after leaving out the top 1"
    # the cosine of 1-D rows is 0 (same sign) or 2 (opposite): pi_intra from the signs, brute force
    sg = np.sign(X[:, 0])
    d = 1.0 - np.outer(sg, sg)
    intra = [d[np.ix_(y == c, y == c)][~np.eye(10, dtype=bool)].mean() for c in range(4)]
    assert rep["pi_intra"] == pytest.approx(np.mean(intra), abs=1e-12)
    f = tmp_path / "d1.h5"
    store.save(f, store.EmbeddingSet.from_arrays(X.astype(np.float32), y, split="train"))
    assert main(["geometry", str(f)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\nrho\s+–", out) and "undefined (–): rho (1 singular value" in out


def test_all_zero_rows_are_named_by_file_split_and_path(tmp_path, capsys):
    """evaluate and geometry said 'row 0 of X is all zeros' (an array the user never sees); now the
    file, the split, the count and the first row by position and path, and (evaluate) what to do;
    geometry reports the measures that stay defined."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(12, 4)).astype(np.float32)
    X[[3, 7]] = 0
    f = tmp_path / "z.h5"
    store.save(f, store.EmbeddingSet.from_arrays(X, np.arange(12) % 3, paths=[f"img{i}.jpg" for i in range(12)]))
    assert main(["evaluate", str(f), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"{f}: 2 test embedding(s) are all zeros (the test split's row 3 first, path 'img3.jpg'): "
                        "their cosine similarity is undefined (use --metric euclidean)")
    assert main(["evaluate", str(f), "--no-progress", "--metric", "euclidean", "--include", "P@1"]) == 0
    capsys.readouterr()
    # (audit 25) geometry reports the measures zero rows leave defined, the cosine ones '–' with the reason
    assert main(["geometry", str(f), "--split", "all"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\npi_intra\s+–", out)
    assert "2 of the 12 rows are all zeros (the first: row 3, path 'img3.jpg')" in out


@pytest.mark.parametrize("scale, shown", [(3e-30, "3e-30"), (2.5e30, "2.5e+30"), (0.5, "0.5000")])
def test_info_mean_norm_keeps_tiny_and_huge_scales(tmp_path, capsys, scale, shown):
    """A 1e-30 file showed 0.0000 (as an all-zero file) and a 1e30 file a 31-digit number."""
    X = np.zeros((4, 3), np.float32)
    X[:, 0] = scale  # every row's norm is exactly the scale (float32)
    f = tmp_path / "s.h5"
    store.save(f, store.EmbeddingSet.from_arrays(X, [0, 0, 1, 1]))
    assert main(["info", str(f)]) == 0
    assert re.search(r"mean embedding norm\s+(\S+)\n", capsys.readouterr().out).group(1) == shown


def test_neighbours_names_an_all_zero_row_by_file_and_path(tmp_path, capsys):
    """neighbours said 'row 4 of Q is all zeros' (the 5th random query)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(12, 4)).astype(np.float32)
    X[6] = 0
    f = tmp_path / "z.h5"
    store.save(f, store.EmbeddingSet.from_arrays(X, np.arange(12) % 3, paths=[f"img{i}.jpg" for i in range(12)]))
    (tmp_path / "img").mkdir()
    assert main(["neighbours", str(f), "--root", str(tmp_path / "img"), "-o", str(tmp_path / "n.png"),
                 "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "1 test embedding(s) are all zeros (the test split's row 6 first, path 'img6.jpg')" in err
    assert not (tmp_path / "n.png").exists()


def test_shared_row_checks():
    """validation.zero_rows / one_point, which evaluate, embed, train, t-SNE and saliency share."""
    from embedscope.validation import one_point, zero_rows

    X = np.array([[0.0, 0.0], [1.0, 2.0], [-0.0, 0.0]])
    assert zero_rows(X).tolist() == [0, 2] and zero_rows(np.zeros((0, 3))).size == 0
    assert one_point(np.tile([1.0, 2.0], (3, 1))) and not one_point(np.array([[1.0, 2.0]]))
    assert not one_point(np.array([[1.0, 2.0], [2.0, 4.0]]))
    assert one_point(np.array([[1.0, 2.0], [2.0, 4.0]]), "cosine")  # one direction (2 = 2^1: exact)
    assert not one_point(np.array([[1.0, 2.0], [-1.0, -2.0]]), "cosine")
