"""Audit of the result objects and their outputs: every number a command prints, writes to CSV, JSON
and Parquet, and returns from Python is the same number (exactly in the files, at the stated
rounding on the terminal: ``tables.format_table``), in one layout, and equals the metric function
computed directly on the rows the analysis should read.

Files are compared as text where the format could lose digits: CSV cells are read with the ``csv``
module and parsed with ``float`` (no pandas parser in between), JSON with a strict parser that
refuses ``NaN`` / ``Infinity``."""

import csv
import json
import math

import numpy as np
import pandas as pd
import pytest
from cli_run import cli_output as _cli

from embedscope import __version__, store
from embedscope.analyses import evaluate, evaluate_many, geometry, scatter, spectrum
from embedscope.analyses.neighbours import neighbour_examples
from embedscope.analyses.result import Result, combine
from embedscope.fileio import sha256_file
from embedscope.metrics import class_distances, geometry_report, nearest_same_different, retrieval_metrics, spectral_decay
from embedscope.tables import _fmt

N_CLASSES = 12


def _set(seed=0, noise=1.0):
    """Train rows 0..59, test rows 60..159; test class 11 has a single row (one lone query)."""
    rng = np.random.default_rng(seed)
    n = 160
    y = np.concatenate([np.arange(60) % 10, np.arange(99) % 11, [11]]).astype(np.int64)
    X = (noise * rng.standard_normal((n, 8)) + 2 * rng.standard_normal((N_CLASSES, 8))[y]).astype(np.float32)
    split = np.where(np.arange(n) < 60, "train", "test")
    paths = [f'img/{i},"{i}".png' for i in range(n)]  # commas and quotes: CSV must quote them
    return store.EmbeddingSet(embeddings=X, labels=y, paths=paths, split=split,
                              class_names=[f"class {i}" for i in range(N_CLASSES)], attrs={"dataset": "synthetic"})


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("audit_outputs")
    a, b = d / "a.h5", d / "b.h5"
    store.save(a, _set(0))
    store.save(b, _set(1, noise=2.0))
    return a, b


def _strict_json(path):
    def refuse(c):
        raise ValueError(f"non-JSON literal {c}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def _csv_rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _csv_number(cell):
    """A CSV cell as written: integers without a decimal point stay int."""
    if cell == "":
        return math.nan
    return int(cell) if cell.lstrip("-").isdigit() else float(cell)


def _same(a, b):
    """Equal to the last bit (NaN equal to NaN), and int stays int."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is type(b)


def _terminal_cells(text, measures):
    """measure -> cells of the terminal table's row of that measure."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] in measures and parts[0] not in out:
            out[parts[0]] = parts[1:]
    return out


def _check_files_equal_result(result_values, model, js_values, csv_rows, pq):
    """The values of one model, in order, are the same in the Result, the JSON, the CSV and Parquet."""
    keys = list(result_values)
    assert list(js_values) == keys
    rows = [r for r in csv_rows if r["model"] == model]
    assert [r["measure"] for r in rows] == keys
    prow = pq[pq["model"] == model]
    assert list(prow["measure"]) == keys
    for k, r, pv in zip(keys, rows, prow["value"]):
        v = result_values[k]
        assert _same(js_values[k], v), (k, js_values[k], v)
        assert _same(_csv_number(r["value"]), v), (k, r["value"], v)
        assert float(pv) == float(v), (k, pv, v)  # Parquet: one float64 column


# ---------------------------------------------------------------------------------------- evaluate
def test_evaluate_one_file_files_api_metric_and_terminal_agree(files, tmp_path):
    a, _ = files
    js, cs, pq = tmp_path / "e.json", tmp_path / "e.csv", tmp_path / "e.parquet"
    text = _cli(["evaluate", str(a), "--json", str(js), "--csv", str(cs), "--parquet", str(pq),
                 "--no-progress", "--device", "cpu"])
    r = evaluate(a, device="cpu")
    es = store.load(a)
    te = es.split == "test"
    ref = retrieval_metrics(es.embeddings[te], es.labels[te], device="cpu")
    for k, v in r.values.items():
        assert v == ref[k], k  # the analysis is the metric on the test rows, to the bit
    doc = _strict_json(js)
    assert list(doc) == ["analysis", "model", "values", "provenance"]
    assert doc["analysis"] == "evaluate" and doc["model"] == "a"
    rows = _csv_rows(cs)
    assert list(rows[0]) == ["measure", "value", "model"]
    frame = pd.read_parquet(pq)
    assert list(frame.columns) == ["measure", "value", "model"] and frame["value"].dtype == np.float64
    _check_files_equal_result(r.values, "a", doc["values"], rows, frame)
    assert frame.equals(r.to_frame())
    # provenance: the file, its sha256, the rows and the protocol actually used
    p = doc["provenance"]
    assert p["file"] == str(a) and p["sha256"] == sha256_file(a) and p["dataset"] == "synthetic"
    assert p["embedscope_version"] == __version__
    assert (p["query_split"], p["reference_split"], p["metric"], p["lone_queries"]) == ("test", "test", "cosine",
                                                                                        "exclude")
    assert p["N_queries"] == p["n_queries"] == int(te.sum()) == 100 and p["D"] == 8
    assert p["n_lone"] == ref["n_lone"] == 1 and p["n_evaluated"] == 99 and p["classes"] == 12
    assert p["kmeans"] == {"seed": 1234, "niter": 20}
    # the terminal: every value rounded to 4 decimals, nothing else
    cells = _terminal_cells(text, r.values)
    assert set(cells) == set(r.values)
    for k, v in r.values.items():
        assert cells[k] == [f"{v:.4f}"], (k, cells[k], v)
    assert "1 lone query left out" in text  # (one: singular)


def test_evaluate_two_files_one_layout(files, tmp_path):
    a, b = files
    js, cs, pq = tmp_path / "e.json", tmp_path / "e.csv", tmp_path / "e.parquet"
    text = _cli(["evaluate", str(a), str(b), "--names", "clean", "noisy", "--include", "R@1", "MAP@R", "NMI",
                 "--json", str(js), "--csv", str(cs), "--parquet", str(pq), "--no-progress", "--device", "cpu"])
    rs = evaluate_many([a, b], names=["clean", "noisy"], include=["R@1", "MAP@R", "NMI"], device="cpu")
    doc = _strict_json(js)
    assert list(doc) == ["analysis", "models"] and [m["model"] for m in doc["models"]] == ["clean", "noisy"]
    rows, frame = _csv_rows(cs), pd.read_parquet(pq)
    assert list(frame["model"]) == ["clean"] * 3 + ["noisy"] * 3  # model by model, measures in order
    for r, m in zip(rs, doc["models"]):
        assert list(m) == ["analysis", "model", "values", "provenance"]
        _check_files_equal_result(r.values, r.model, m["values"], rows, frame)
    assert frame.equals(rs.to_frame())
    cells = _terminal_cells(text, ["R@1", "MAP@R", "NMI"])
    for k in ("R@1", "MAP@R", "NMI"):
        assert cells[k] == [f"{rs['clean'][k]:.4f}", f"{rs['noisy'][k]:.4f}"]


def test_evaluate_reads_the_right_rows_and_counts_lone_queries():
    rng = np.random.default_rng(3)
    y = np.repeat(np.arange(8), 5)
    X = rng.normal(size=(40, 6)).astype(np.float32) + 2 * rng.normal(size=(8, 6)).astype(np.float32)[y]
    split = np.tile(["query", "gallery", "gallery", "train", "query"], 8)
    split[(y == 7) & (split == "gallery")] = "train"  # class 7: no gallery row -> its queries are lone
    es = store.EmbeddingSet.from_arrays(X, y, split=split)
    q, g, t = split == "query", split == "gallery", split == "train"
    r = evaluate(es, query_split="query", reference_split="gallery", ks=(1, 2), device="cpu")
    ref = retrieval_metrics(X[q], y[q], X_ref=X[g], y_ref=y[g], ks=(1, 2), device="cpu")
    assert r.values == {k: ref[k] for k in r.values}
    assert r.provenance["n_lone"] == 2 == int(((y == 7) & q).sum()) and r.provenance["N_references"] == g.sum()
    zero = evaluate(es, query_split="query", reference_split="gallery", ks=(1, 2), lone_queries="zero",
                    device="cpu")
    refz = retrieval_metrics(X[q], y[q], X_ref=X[g], y_ref=y[g], ks=(1, 2), lone_queries="zero", device="cpu")
    assert zero.values == {k: refz[k] for k in zero.values} and zero["R@1"] < r["R@1"]
    tr = evaluate(es, split="train", include=["R@1", "MAP@R"], ks=(1,), device="cpu")
    assert tr.values == {k: v for k, v in retrieval_metrics(X[t], y[t], include=["R@1", "MAP@R"], ks=(1,),
                                                            device="cpu").items() if k in tr.values}
    euc = evaluate(es, split="train", metric="euclidean", include=["MAP@R"], device="cpu")
    assert euc["MAP@R"] == retrieval_metrics(X[t], y[t], metric="euclidean", include=["MAP@R"],
                                             device="cpu")["MAP@R"]
    assert euc.provenance["metric"] == "euclidean"


@pytest.mark.parametrize("policy", ["exclude", "zero"])
def test_per_class_means_add_up_to_the_headline(files, policy):
    """The per-class table weighted by its queries gives the headline value, under either policy: with
    "zero" a class whose queries are all lone scores 0, as they count in the headline (was NaN)."""
    a, _ = files
    r = evaluate(a, per_class=True, lone_queries=policy, device="cpu")
    t = pd.DataFrame(r.table)
    lone = t[t["class"] == "class 11"].iloc[0]
    assert lone["n"] == 1
    if policy == "zero":
        assert lone["MAP@R"] == 0.0 and lone["R@1"] == 0.0
        used = t
    else:
        assert math.isnan(lone["MAP@R"])
        used = t[t["MAP@R"].notna()]
    for k in ("R@1", "R-Precision", "MAP@R"):
        assert (used["n"] * used[k]).sum() / used["n"].sum() == pytest.approx(r[k], rel=1e-12, abs=0)


# ---------------------------------------------------------------------------------------- geometry
def test_geometry_files_api_metric_and_terminal_agree(files, tmp_path):
    a, _ = files
    js, cs, pq = tmp_path / "g.json", tmp_path / "g.csv", tmp_path / "g.parquet"
    text = _cli(["geometry", str(a), "--split", "train", "--json", str(js), "--csv", str(cs), "--parquet", str(pq)])
    r = geometry(a, split="train")
    es = store.load(a)
    tr = es.split == "train"
    X, y = es.embeddings[tr], es.labels[tr]
    rep = geometry_report(X, y)
    for k, v in r.values.items():
        assert _same(v, rep[k] if not isinstance(rep[k], (int, np.integer)) else int(rep[k])), k
    assert r["rho"] == spectral_decay(X) and r["rho_all"] == spectral_decay(X, exclude_top=0)
    cd = class_distances(X, y)
    assert (r["pi_intra"], r["pi_inter"], r["pi_ratio"]) == (cd["pi_intra"], cd["pi_inter"], cd["pi_ratio"])
    assert r["n"] == 60 and isinstance(r["n"], int) and r["n_classes"] == 10
    doc = _strict_json(js)
    rows, frame = _csv_rows(cs), pd.read_parquet(pq)
    _check_files_equal_result(r.values, "a", doc["values"], rows, frame)
    assert [row["value"] for row in rows[:4]] == ["60", "8", "10", "0"]  # counts without ".0"
    p = doc["provenance"]
    assert (p["split"], p["exclude_top"], p["n_components"], p["seed"], p["max_pairs"]) == ("train", 1, None, 0,
                                                                                             200000)
    assert p["uniformity_pairs"] == 60 * 59 // 2 and p["uniformity_exact"] is True
    assert p["sha256"] == sha256_file(a) and p["embedscope_version"] == __version__
    cells = _terminal_cells(text, r.values)
    for k, v in r.values.items():
        assert cells[k][0] == (str(v) if isinstance(v, int) else f"{v:.5f}"), (k, cells[k][0], v)


def test_spectrum_one_file_has_the_one_file_layout_and_its_table(files, tmp_path):
    """One file: the JSON is a single result's ({"analysis", "model", ...}, as evaluate and geometry
    of one file; it was {"analysis", "models": [...]}); --table-csv keeps its model column."""
    a, _ = files
    js, cs, tc = tmp_path / "s.json", tmp_path / "s.csv", tmp_path / "t.csv"
    _cli(["spectrum", str(a), "--by-class", "--n-values", "4", "--json", str(js), "--csv", str(cs),
          "--table-csv", str(tc)])
    r = spectrum([a], by_class=True, k=4)[0]
    doc = _strict_json(js)
    assert list(doc) == ["analysis", "model", "values", "provenance", "table"]
    assert doc["analysis"] == "spectrum" and doc["values"] == r.values
    assert r.values == geometry(a, split="train").values
    rows = _csv_rows(tc)
    assert list(rows[0]) == ["model", "kind", "k", "value"]
    assert len(rows) == len(doc["table"]) == len(r.table)
    for row, jrow, t in zip(rows, doc["table"], r.table):
        assert row["model"] == "a" and row["kind"] == jrow["kind"] == t["kind"]
        assert int(row["k"]) == jrow["k"] == t["k"] and isinstance(jrow["k"], int)
        assert float(row["value"]) == jrow["value"] == t["value"]
    es = store.load(a)
    s = np.linalg.svd(es.embeddings[es.split == "train"].astype(np.float64), compute_uv=False)
    sv = [t["value"] for t in r.table if t["kind"] == "singular_value"]
    np.testing.assert_allclose(sv, s, rtol=1e-10)


# ---------------------------------------------------------------------------------- scatter, neighbours
def test_scatter_files_api_and_metrics_agree(files, tmp_path):
    a, _ = files
    out = tmp_path / "sc.png"
    text = _cli(["scatter", str(a), "-o", str(out), "--no-progress"])
    r = scatter(a)
    es = store.load(a)
    doc = _strict_json(out.with_suffix(".json"))
    assert doc["values"] == r.values and list(doc) == ["analysis", "model", "values", "provenance", "table"]
    rows = _csv_rows(out.with_suffix(".csv"))
    assert list(rows[0]) == ["path", "split", "label", "class", "s_same", "s_diff", "below_diagonal", "tied"]
    assert len(rows) == len(doc["table"]) == len(r.table) == es.n
    for row, jrow, t in zip(rows, doc["table"], r.table):
        assert row["path"] == jrow["path"] == t["path"] and row["class"] == jrow["class"] == t["class"]
        for c in ("s_same", "s_diff", "below_diagonal"):
            v = t[c]
            if math.isnan(v):  # a point without a same-class partner: empty in CSV, null in JSON
                assert row[c] == "" and jrow[c] is None
            else:
                assert float(row[c]) == jrow[c] == v
    for s in ("train", "test"):
        m = es.split == s
        X, y = es.embeddings[m], es.labels[m]
        ref = retrieval_metrics(X, y, include=["R@1"], ks=(1,), device="cpu")
        assert r[f"below_diagonal_{s}"] == ref["R@1"] and r[f"left_out_{s}"] == ref["n_lone"]
        same, diff = nearest_same_different(X, y)
        got = [t for t in r.table if t["split"] == s]
        np.testing.assert_array_equal([t["s_same"] for t in got], same)
        np.testing.assert_array_equal([t["s_diff"] for t in got], diff)
        # brute force: cosine similarities, itself excluded
        U = X.astype(np.float64) / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
        S = U @ U.T
        np.fill_diagonal(S, -np.inf)
        for i in range(len(y)):
            assert np.max(S[i][y != y[i]]) == pytest.approx(diff[i], abs=1e-6)
        cells = _terminal_cells(text, [s])[s]
        # N, classes, left out, tied (none in these rows), below diagonal (= R@1 without ties), below or tied
        assert cells == [str(int(m.sum())), str(len(np.unique(y))), str(ref["n_lone"]), "0", f"{ref['R@1']:.4f}",
                         f"{ref['R@1']:.4f}"]


def test_neighbours_are_the_exact_top_k_and_the_printed_count(files, tmp_path):
    a, _ = files
    ex = neighbour_examples(a, split="test", queries=6, k=3, seed=0)
    es = store.load(a)
    te = es.subset("test")
    U = te.embeddings.astype(np.float64)
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    pos = {p: i for i, p in enumerate(te.paths)}
    for qp, refs, sims in zip(ex.query_paths, ex.ref_paths, ex.similarity):
        i = pos[qp]
        s = U @ U[i]
        s[i] = -np.inf
        top = np.argsort(-s, kind="stable")[:3]
        assert list(refs) == list(te.paths[top])
        np.testing.assert_allclose(sims, s[top], atol=1e-6)
    from PIL import Image

    root = tmp_path / "data"
    for p in te.paths:  # tiny pictures for the figure
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (200, 20, 20)).save(root / p)
    text = _cli(["neighbours", str(a), "--queries", "6", "--n-retrievals", "3", "--root", str(root),
                 "-o", str(tmp_path / "n.png")])
    assert f"6 queries, top-3 in 'test': {int(ex.correct.sum())} of 18 retrievals" in text


# --------------------------------------------------------------------------------- the Result layer
def test_json_is_strict_for_numpy_nan_and_inf(tmp_path):
    """NaN and ±inf held as numpy values (provenance, tables, arrays) were written as the non-JSON
    literals NaN / Infinity; now null, as Python floats were."""
    r = Result("x", {"a": float("nan"), "b": 1.5}, {"p": np.float64("nan"), "arr": np.array([1.0, np.inf]),
                                                    "i": np.int64(3)},
               table=[{"v": np.float32("nan"), "w": np.float64(-np.inf)}], model="m")
    r.to_json(tmp_path / "r.json")
    doc = _strict_json(tmp_path / "r.json")
    assert doc["values"] == {"a": None, "b": 1.5}
    assert doc["provenance"] == {"p": None, "arr": [1.0, None], "i": 3}
    assert doc["table"] == [{"v": None, "w": None}]
    # what to_json returns is what the file holds (it returned the NaN and numpy values)
    assert r.to_json() == doc and combine([r]).to_json() == {"analysis": "x", "models": [doc]}
    json.dumps(r.to_json(), allow_nan=False)
    assert math.isnan(r["a"])  # the Result itself keeps NaN


def test_csv_parquet_json_keep_every_digit(tmp_path):
    vals = {"third": 1 / 3, "sum": 0.1 + 0.2, "tiny": 5e-324, "small": 1.234567890123e-300, "huge": 1.7976931348623157e308,
            "neg": -2 / 3, "negzero": -0.0, "inf": math.inf, "minf": -math.inf, "nan": math.nan, "count": 7,
            "flag": True}
    r = Result("x", vals, model="m")
    r.to_csv(tmp_path / "r.csv")
    r.to_parquet(tmp_path / "r.parquet")
    r.to_json(tmp_path / "r.json")
    rows = _csv_rows(tmp_path / "r.csv")
    frame = pd.read_parquet(tmp_path / "r.parquet")
    doc = _strict_json(tmp_path / "r.json")
    assert [row["measure"] for row in rows] == list(frame["measure"]) == list(doc["values"]) == list(vals)
    for row, pv in zip(rows, frame["value"]):
        k = row["measure"]
        v = r.values[k]
        assert _same(_csv_number(row["value"]), v), (k, row["value"])
        assert _same(float(pv), float(v))
        if isinstance(v, float) and not math.isfinite(v):
            assert doc["values"][k] is None  # JSON has no NaN / inf: null
        else:
            assert _same(doc["values"][k], v)
    assert r.values["flag"] == 1 and isinstance(r.values["flag"], int)
    assert math.copysign(1, float(rows[6]["value"])) == -1.0


def test_result_set_table_with_a_model_named_like_a_column():
    a = Result("x", {"v": 1.0, "w": 2.0}, model="measure")
    b = Result("x", {"v": 3.0}, model="b")
    text = combine([a, b]).format()
    lines = text.splitlines()
    assert lines[0].split() == ["measure", "measure", "b"]
    assert lines[2].split() == ["v", "1.0000", "3.0000"]  # the measure name kept, not overwritten
    assert lines[3].split() == ["w", "2.0000", "nan"]


def test_terminal_rounding_rule():
    assert [_fmt(v, 4) for v in (0.123456, 0.99996, 5e-05, 123456.0, -0.5, 3, math.nan, math.inf, -math.inf)] == [
        "0.1235", "1.0000", "5e-05", "1.235e+05", "-0.5000", "3", "nan", "inf", "-inf"]


def test_terminal_escapes_names_files_keep_them(files, tmp_path):
    a, b = files
    cs = tmp_path / "e.csv"
    text = _cli(["evaluate", str(a), str(b), "--names", "\x1b[31mred", "plain", "--include", "R@1", "--csv",
                 str(cs), "--no-progress", "--device", "cpu"])
    assert "\x1b" not in text and "\\x1b[31mred" in text
    assert [r["model"] for r in _csv_rows(cs)] == ["\x1b[31mred", "plain"]
