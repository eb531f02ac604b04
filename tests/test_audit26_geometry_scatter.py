"""Audit 26 (geometry with zero rows at the metrics' depth; scatter's per-split summary in every format).

What was wrong before:

* ``geometry`` of a split with some all-zero rows computed ρ, RankMe and α through the stand-alone
  spectral functions beside :func:`embedscope.metrics.geometry_report` (a second copy of the reasons
  for undefined values in ``analyses/structure.py``), and ``geometry_report`` itself refused such
  rows ("row 4 of X is all zeros"). The report now takes them: the spectral measures of every row
  as they are, the measures of unit rows (cosine π, alignment, uniformity) NaN with the reason; with
  ``metric="sqeuclidean"`` the π stay defined. Checked here against numpy's SVD and brute-force pairs.
* ``scatter``'s summary per split (the table it prints) was in OUT.json only; OUT.csv and the
  Parquet hold one row per point. It is now also written as OUT_summary.csv and, with
  ``--parquet T.parquet``, T_summary.parquet: the same columns, order and values as the terminal
  table and the JSON's ``provenance.splits``, and under the same no-overwrite rules.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re

import numpy as np
import pandas as pd
import pytest
from cli_run import cli_output, one_error_line, run_cli

from embedscope import store
from embedscope.errors import EmbedscopeError

COSINE_KEYS = ("pi_intra", "pi_inter", "pi_ratio", "alignment", "uniformity")


# ----------------------------------------------------------------------------- geometry, zero rows
def _brute_spectral(X, exclude_top=1):
    """ρ (top ``exclude_top`` left out), ρ with nothing left out, RankMe (ε = 1e-7) and α-ReQ from
    numpy's SVD, in float64 (docs/methods.md §2, §4); singular values below the SVD's rounding
    (max(N, D)·eps·s_1) count as 0, as the methods state. X is first brought near 1 by a power of
    two (exact; the scale-free measures do not change), the values returned are scaled back."""
    X = np.asarray(X, dtype=np.float64)
    e = int(np.frexp(np.max(np.abs(X)))[1])
    X = np.ldexp(X, -e)
    s = np.linalg.svd(X, compute_uv=False)
    s[s <= max(X.shape) * np.finfo(np.float64).eps * s[0]] = 0.0

    def kl(t):
        p = t / t.sum()
        with np.errstate(divide="ignore"):
            return float(np.mean(np.log((1.0 / t.size) / p)))

    q = s / s.sum() + 1e-7
    lam = np.linalg.svd(X - X.mean(axis=0), compute_uv=False) ** 2 / (len(X) - 1)
    lam = lam[: min(len(X) - 1, X.shape[1])]
    k = np.arange(1, lam.size + 1)
    keep = lam > 1e-12 * lam[0]
    alpha = float(-np.polyfit(np.log(k[keep]), np.log(lam[keep]), 1)[0])
    with np.errstate(over="ignore", under="ignore"):
        return ({"rho": kl(s[exclude_top:]), "rho_all": kl(s), "effective_rank": float(np.exp(-np.sum(q * np.log(q)))),
                 "alpha": alpha}, np.ldexp(s, e), np.ldexp(lam, 2 * e))


def _with_zero_rows(n, d, zero, *, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * scale
    X[list(zero)] = 0.0
    return X, np.arange(n) % 3


@pytest.mark.parametrize("n,d,scale", [(40, 6, 1.0),      # N >= D: the Gram route
                                       (8, 20, 1.0),      # N < D: the SVD route (a zero row: rank 7, rho inf)
                                       (30, 5, 1e200),    # rows whose squares overflow: rescaled
                                       (30, 5, 1e-200)])  # rows whose squares are subnormal
def test_geometry_report_takes_zero_rows_spectral_measures_as_numpy_svd(n, d, scale):
    from embedscope.metrics import geometry_report

    X, y = _with_zero_rows(n, d, [4, 6], scale=scale)
    rep = geometry_report(X, y, keep_spectrum=True)
    want, s, lam = _brute_spectral(X)
    for key, v in want.items():
        if np.isinf(v):
            assert rep[key] == v and key in rep["infinite"], key
        else:
            assert rep[key] == pytest.approx(v, rel=1e-9, abs=1e-12), key
    for got, ref in ((rep["singular_values"], s), (rep["covariance_eigenvalues"], lam)):
        if np.isinf(ref[0]):  # (1e200)² is beyond float64: inf in both
            assert np.array_equal(np.isinf(got), np.isinf(ref))
            got, ref = got[np.isfinite(ref)], ref[np.isfinite(ref)]
        if ref.size:
            np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12 * ref[0])
    why = (f"2 of the {n} rows are all zeros (the first: row 4): no direction, so the cosine distance is "
           "undefined")
    for key in COSINE_KEYS:
        assert np.isnan(rep[key]) and rep["undefined"][key] == why, key
    assert rep["uniformity_pairs"] == 0 and rep["uniformity_exact"] is False
    assert (rep["n"], rep["dim"], rep["n_classes"], rep["n_singleton"]) == (n, d, 3, 0)
    assert list(rep["undefined"]) == [k for k in ("rho", "rho_all", "pi_intra", "pi_inter", "pi_ratio",
                                                  "effective_rank", "alpha", "alignment", "uniformity")
                                      if k in rep["undefined"]]  # in the order of REPORT_KEYS


def test_geometry_report_with_zero_rows_equals_the_standalone_spectral_functions():
    """The values the analysis took from spectral_decay / effective_rank / alpha_req before (its
    fallback), also with --exclude-top / --n-components."""
    from embedscope.metrics import alpha_req, effective_rank, geometry_report, spectral_decay

    X, y = _with_zero_rows(50, 7, [0, 13, 49], seed=2)
    for top, m in ((1, None), (2, 6), (0, 7)):
        rep = geometry_report(X, y, exclude_top=top, n_components=m)
        assert rep["rho"] == pytest.approx(spectral_decay(X, exclude_top=top, n_components=m), rel=1e-12)
        assert rep["rho_all"] == pytest.approx(spectral_decay(X, exclude_top=0, n_components=m), rel=1e-12)
        assert rep["effective_rank"] == pytest.approx(effective_rank(X), rel=1e-12)
        assert rep["alpha"] == pytest.approx(alpha_req(X), rel=1e-12)
        assert rep["undefined"]["alignment"].startswith("3 of the 50 rows are all zeros (the first: row 0)")


def test_geometry_report_names_the_rows_and_the_first_zero_rows_path():
    from embedscope.metrics import geometry_report

    X, y = _with_zero_rows(12, 4, [7])
    paths = [f"img/{i}.jpg" for i in range(12)]
    rep = geometry_report(X, y, rows="test rows", paths=paths)
    assert rep["undefined"]["pi_intra"] == ("1 of the 12 test rows is all zeros (the first: row 7, path "
                                            "'img/7.jpg'): no direction, so the cosine distance is undefined")


def test_geometry_report_sqeuclidean_keeps_pi_with_zero_rows_as_brute_force_pairs():
    """A zero row has a place (the origin), not a direction: the squared-Euclidean π are defined, the
    unit-row measures (alignment, uniformity) are not."""
    from embedscope.metrics import geometry_report

    X, y = _with_zero_rows(21, 4, [2, 5], seed=4)
    rep = geometry_report(X, y, metric="sqeuclidean")
    intra = []
    means = []
    for c in np.unique(y):
        Xc = X[y == c]
        D = ((Xc[:, None, :] - Xc[None, :, :]) ** 2).sum(-1)
        intra.append(D.sum() / (len(Xc) ** 2 - len(Xc)))
        means.append(Xc.mean(axis=0))
    M = np.array(means)
    Dm = ((M[:, None, :] - M[None, :, :]) ** 2).sum(-1)
    pi_inter = Dm.sum() / (len(M) ** 2 - len(M))
    assert rep["pi_intra"] == pytest.approx(np.mean(intra), rel=1e-12)
    assert rep["pi_inter"] == pytest.approx(pi_inter, rel=1e-12)
    assert rep["pi_ratio"] == pytest.approx(np.mean(intra) / pi_inter, rel=1e-12)
    assert set(rep["undefined"]) == {"alignment", "uniformity"}
    assert np.isnan(rep["alignment"]) and np.isnan(rep["uniformity"])


def test_geometry_report_of_only_zero_rows_and_the_strict_functions_stay_errors():
    from embedscope.metrics import alignment_uniformity, class_distances, geometry_report

    with pytest.raises(EmbedscopeError, match=r"every row of X is all zeros \(5 rows\)"):
        geometry_report(np.zeros((5, 3)), [0, 0, 1, 1, 2])
    X, y = _with_zero_rows(12, 4, [3])
    with pytest.raises(EmbedscopeError, match="row 3 of X is all zeros"):
        class_distances(X, y)
    with pytest.raises(EmbedscopeError, match="row 3 of X is all zeros"):
        alignment_uniformity(X, y)


def test_geometry_command_with_zero_rows_equals_the_report_and_numpy(tmp_path):
    """One route for the analysis: its values and reasons are geometry_report's (names from the file)."""
    from embedscope.analyses import structure
    from embedscope.metrics import geometry_report

    X, y = _with_zero_rows(30, 5, [4, 11], seed=3)
    X = X.astype(np.float32)
    paths = [f"img{i}.jpg" for i in range(30)]
    f = store.save(tmp_path / "z.h5", store.EmbeddingSet.from_arrays(X, y, split="train", paths=paths))
    js = tmp_path / "g.json"
    out = cli_output(["geometry", str(f), "--json", str(js)])
    doc = json.loads(js.read_text())
    rep = geometry_report(X, y, rows="train rows", paths=paths)
    want, _, _ = _brute_spectral(X)
    for key, v in want.items():
        assert doc["values"][key] == rep[key] == pytest.approx(v, rel=1e-9), key
    for key in COSINE_KEYS:
        assert doc["values"][key] is None and re.search(rf"\n{key}\s+–", out)
    assert doc["provenance"]["undefined"] == rep["undefined"]
    assert "uniformity from" not in out  # no pair used
    assert not hasattr(structure, "_report_with_zero_rows")


# ----------------------------------------------------------------------------- scatter's summary
SUMMARY_COLUMNS = ["split", "N", "classes", "left_out", "tied", "below_diagonal_R@1", "below_or_tied"]


def _scatter_set():
    """Two splits of random rows, plus rows on the first axis (cosine exactly 1 among them, whatever
    the order of the sums): in train, one of class 0 and two copies in classes 0 and 1 (ties); in
    test, a class of a single image (left out)."""
    rng = np.random.default_rng(7)
    y_tr = np.repeat([0, 1, 2], 8)
    y_te = np.concatenate([np.repeat([0, 1, 2], 6), [3]])
    X = rng.normal(size=(len(y_tr) + len(y_te), 5)) + np.eye(5)[np.concatenate([y_tr, y_te])] * 2
    axis = np.eye(5)[0]
    X[0], X[1], X[8] = axis * 2.0, axis * 0.5, axis * 4.0  # classes 0, 0, 1 of train
    y = np.concatenate([y_tr, y_te])
    split = np.array(["train"] * len(y_tr) + ["test"] * len(y_te))
    return store.EmbeddingSet.from_arrays(X, y, split=split, paths=[f"p{i:02d}" for i in range(len(y))])


def _brute_summary(es):
    """Per split, from the full cosine matrix: the rows of the summary, worked out pair by pair."""
    rows = []
    for s in ("train", "test"):
        part = es.subset(s)
        X = part.embeddings.astype(np.float64)
        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        S = U @ U.T
        y = part.labels
        below = tied = lone = 0
        for i in range(part.n):
            same = [S[i, j] for j in range(part.n) if j != i and y[j] == y[i]]
            diff = [S[i, j] for j in range(part.n) if y[j] != y[i]]
            if not same:
                lone += 1
                continue
            below += max(diff) < max(same)
            tied += max(diff) == max(same)
        n_ok = part.n - lone
        rows.append({"split": s, "N": part.n, "classes": len(np.unique(y)), "left_out": lone, "tied": tied,
                     "below_diagonal_R@1": below / n_ok, "below_or_tied": (below + tied) / n_ok})
    return rows


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_scatter_summary_is_one_table_in_terminal_csv_parquet_and_json(tmp_path):
    es = _scatter_set()
    f = store.save(tmp_path / "e.h5", es)
    out = cli_output(["scatter", str(f), "-o", str(tmp_path / "s.png"), "--parquet", str(tmp_path / "t.parquet"),
                      "--no-progress"])
    want = _brute_summary(es)
    assert want[0]["tied"] >= 3 and want[1]["left_out"] == 1  # the data have ties and a lone image
    doc = json.loads((tmp_path / "s.json").read_text())
    js = doc["provenance"]["splits"]
    rows = _csv(tmp_path / "s_summary.csv")
    pq = pd.read_parquet(tmp_path / "t_summary.parquet")
    assert rows[0] == SUMMARY_COLUMNS == list(pq.columns) == list(js[0])
    assert len(rows) - 1 == len(pq) == len(js) == 2
    for w, jrow, crow, (_, prow) in zip(want, js, rows[1:], pq.iterrows()):
        for c, cell in zip(SUMMARY_COLUMNS, crow):
            if c == "split":
                assert cell == jrow[c] == prow[c] == w[c]
            elif isinstance(w[c], int):
                assert int(cell) == jrow[c] == prow[c] == w[c], c
            else:
                assert float(cell) == jrow[c] == prow[c] == pytest.approx(w[c], rel=1e-15), c
    # the terminal table: the same columns, one line per split, the counts as in the files
    lines = out.splitlines()
    assert lines[0].split() == SUMMARY_COLUMNS
    for w in want:
        line = next(ln for ln in lines if ln.startswith(w["split"] + " "))
        assert line.split()[:5] == [w["split"], str(w["N"]), str(w["classes"]), str(w["left_out"]), str(w["tied"])]
    # the per-point table is unchanged: one row per point
    assert len(_csv(tmp_path / "s.csv")) - 1 == es.n == len(pd.read_parquet(tmp_path / "t.parquet"))
    assert "s_summary.csv" in lines[-1] and "t_summary.parquet" in lines[-1]


def test_scatter_summary_without_parquet_writes_no_parquet(tmp_path):
    f = store.save(tmp_path / "e.h5", _scatter_set())
    cli_output(["scatter", str(f), "-o", str(tmp_path / "s"), "--no-progress"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.h5", "s.csv", "s.json", "s.pdf", "s.png",
                                                          "s_summary.csv"]


@pytest.mark.parametrize("existing", ["s_summary.csv", "t_summary.parquet"])
def test_scatter_refuses_an_existing_summary_without_force(tmp_path, existing):
    f = store.save(tmp_path / "e.h5", _scatter_set())
    (tmp_path / existing).write_text("keep me")
    args = ["scatter", str(f), "-o", str(tmp_path / "s.png"), "--parquet", str(tmp_path / "t.parquet"), "--no-progress"]
    rc, out, err = run_cli(args)
    assert rc == 1 and "already exists" in one_error_line(err, "scatter") and existing in err
    assert (tmp_path / existing).read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["e.h5", existing])  # refused before any work
    cli_output(args + ["--force"])
    assert (tmp_path / existing).read_bytes() != b"keep me"


def test_scatter_summary_never_replaces_the_input(tmp_path):
    """An embedding file named like the summary (-o emb -> emb_summary.csv): refused before the work,
    even with --force, the input left as it was."""
    src = tmp_path / "emb_summary.csv"
    store.save(src, _scatter_set())
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    rc, out, err = run_cli(["scatter", str(src), "-o", str(tmp_path / "emb"), "--force", "--no-progress"])
    assert rc == 2 and "is an input file" in one_error_line(err, "scatter") and not out
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb_summary.csv"]
    # and a --parquet file named like the summary CSV is refused as one of the figure's own outputs
    f = store.save(tmp_path / "e.h5", _scatter_set())
    rc, out, err = run_cli(["scatter", str(f), "-o", str(tmp_path / "s.png"), "--parquet",
                            str(tmp_path / "s_summary.csv"), "--no-progress"])
    assert rc == 2 and "one of the figure's own outputs" in one_error_line(err, "scatter")


def test_scatter_takes_back_its_summary_when_it_fails_after_writing_it(tmp_path, monkeypatch):
    """All or nothing: a failure after OUT_summary.csv is written (here the summary Parquet's write)
    takes back every output, the summary CSV too."""
    import embedscope.tables as tables

    f = store.save(tmp_path / "e.h5", _scatter_set())
    write = tables.write_parquet

    def failing(path, frame, *, force=False):
        if str(path).endswith("_summary.parquet"):
            raise EmbedscopeError("disk full (simulated)")
        return write(path, frame, force=force)

    monkeypatch.setattr(tables, "write_parquet", failing)
    rc, out, err = run_cli(["scatter", str(f), "-o", str(tmp_path / "s.png"), "--parquet", str(tmp_path / "t.parquet"),
                            "--no-progress"])
    assert rc == 1 and "disk full (simulated)" in one_error_line(err, "scatter")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.h5"]
