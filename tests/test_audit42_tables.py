"""Audit 42: result tables and the study report's text. An undefined significance verdict
(``significant_2.576`` where NR-Prec is undefined) is missing, not False, in every file; the saliency
agreement's undefined-JSD counts stand beside the undefined-r ones; the study report says yes / no
for a setting that the runs table says yes / no for; texts that look like numbers ("007") stay texts."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
from test_audit23_properties import _file, _run  # (a small store; main() with usage errors' codes)
from test_audit23_train_saliency import _maps_file  # (a small saliency-maps file)

# ------------------------------------------------------------------ 1. significant_2.576 where NR-Prec is undefined


def test_significance_is_undefined_where_nr_prec_is_and_a_verdict_where_it_is_defined():
    """Every value lone (no query), one value for every image (p = 1) and a collapsed model (row order):
    NR-Prec NaN, so the rule's verdict is None (it was False: "not significant"); a defined NR-Prec keeps
    its True / False."""
    from embedscope.metrics.properties import property_precision

    rng = np.random.default_rng(0)
    n = 40
    X = rng.normal(size=(n, 4))
    X[:20] += 6.0
    r = property_precision(X, {"lone": np.arange(n), "one": np.zeros(n, int), "side": np.repeat([0, 1], 20),
                               "noise": rng.integers(0, 2, n)})
    assert math.isnan(r["lone"]["NR-Prec"]) and r["lone"]["significant_2.576"] is None
    assert math.isnan(r["one"]["NR-Prec"]) and r["one"]["significant_2.576"] is None
    assert r["side"]["significant_2.576"] is True and r["side"]["NR-Prec"] >= 2.576
    assert r["noise"]["significant_2.576"] is (r["noise"]["NR-Prec"] >= 2.576)
    collapsed = property_precision(np.ones((n, 3)), {"side": np.repeat([0, 1], 20)})["side"]
    assert math.isnan(collapsed["NR-Prec"]) and collapsed["significant_2.576"] is None


def test_properties_files_write_an_undefined_significance_as_missing(tmp_path, capsys):
    """The command's CSV (empty cell), JSON (null), Parquet (a nullable boolean column: <NA>, not False)
    and the API's frames and files: the collapsed file's rows have no verdict, the healthy file's have one."""
    import pandas as pd

    from embedscope.analyses import properties
    from embedscope.tables import read_parquet

    rng = np.random.default_rng(1)
    n = 40
    labels = np.repeat([0, 1], 20)
    colour = rng.integers(0, 3, n)
    Xok = rng.normal(size=(n, 4))
    Xok[:20] += 6.0
    dup = _file(tmp_path / "dup.h5", np.tile([0.5, -0.25, 1.0, 0.75], (n, 1)), labels, colour=colour)
    ok = _file(tmp_path / "ok.h5", Xok, labels, colour=colour)
    c, j, q = tmp_path / "p.csv", tmp_path / "p.json", tmp_path / "p.parquet"
    assert _run(["properties", str(dup), str(ok), "--csv", str(c), "--json", str(j), "--parquet", str(q),
                 "--no-progress"]) == 0
    capsys.readouterr()
    rows = {(r["model"], r["property"]): r for r in csv.DictReader(open(c, newline=""))}
    assert rows[("dup", "class")]["significant_2.576"] == "" and rows[("dup", "colour")]["significant_2.576"] == ""
    assert rows[("ok", "class")]["significant_2.576"] == "True"
    assert rows[("ok", "colour")]["significant_2.576"] in ("True", "False")
    got = json.loads(j.read_text())
    sig = {(m["model"], r["property"]): r["significant_2.576"] for m in got["models"] for r in m["table"]}
    assert sig[("dup", "class")] is None and sig[("dup", "colour")] is None and sig[("ok", "class")] is True
    pq = read_parquet(q)
    assert str(pq["significant_2.576"].dtype) == "boolean"
    by = {(m, p): v for m, p, v in zip(pq["model"], pq["property"], pq["significant_2.576"])}
    assert by[("dup", "class")] is pd.NA and by[("dup", "colour")] is pd.NA and bool(by[("ok", "class")]) is True
    # the API: one file's table as Parquet and CSV, every row undefined (Arrow typed such a column "null")
    res = properties(str(dup))[0]
    res.to_parquet(tmp_path / "api.parquet", table=True)
    res.to_csv(tmp_path / "api.csv", table=True)
    fr = properties([str(dup), str(ok)]).to_frame(table=True)  # the frame: a nullable boolean column too
    assert str(fr["significant_2.576"].dtype) == "boolean"
    assert fr["significant_2.576"].isna().tolist() == [m == "dup" for m in fr["model"]]
    api = read_parquet(tmp_path / "api.parquet")
    assert str(api["significant_2.576"].dtype) == "boolean" and api["significant_2.576"].isna().all()
    assert [r["significant_2.576"] for r in csv.DictReader(open(tmp_path / "api.csv", newline=""))] == ["", ""]


# ------------------------------------------------------------------ 2. n_undefined_jsd beside n_undefined_r


def _three_models():
    """a varies everywhere; b has 2 all-zero maps (no r, no JSD) and 1 constant non-zero map (no r, a JSD);
    c has 1 all-zero map, on another image than b's."""
    rng = np.random.default_rng(5)
    a, b, c = (rng.random((8, 4, 4)) for _ in range(3))
    b[[1, 2]] = 0.0
    b[5] = 0.25
    c[6] = 0.0
    return a, b, c


def test_agreement_matrices_count_the_undefined_jsd_beside_the_undefined_r():
    """The matrices had n_undefined_r only: a JSD left out of a cell's mean was counted in the pair's dict
    and the CSV, not in the matrix. Off the diagonal each pair's count, on it the model's all-zero maps;
    the streamed matrices equal the whole arrays'."""
    from embedscope.metrics.agreement import agreement_matrix, agreement_matrix_streamed

    a, b, c = _three_models()
    res = agreement_matrix([a, b, c], names=["a", "b", "c"])
    want_r = np.array([[0, 3, 1], [3, 3, 4], [1, 4, 1]])
    want_jsd = np.array([[0, 2, 1], [2, 2, 3], [1, 3, 1]])
    assert res["n_undefined_r"].tolist() == want_r.tolist()
    assert res["n_undefined_jsd"].tolist() == want_jsd.tolist()
    for (i, j), pr in res["pairs"].items():
        assert res["n_undefined_jsd"][i, j] == pr["n_undefined_jsd"] == int(np.isnan(pr["jsd"]).sum())
    st = agreement_matrix_streamed(lambda s, e: [m[s:e] for m in (a, b, c)], 8, 3, block=3, names=["a", "b", "c"])
    assert st["n_undefined_jsd"].tolist() == want_jsd.tolist()


def test_saliency_agreement_json_holds_the_undefined_jsd_matrix(tmp_path, capsys):
    """The command's JSON: matrices.n_undefined_jsd beside matrices.n_undefined_r; the CSV and the pairs agree."""
    a, b, c = _three_models()
    paths = [f"p{k}.png" for k in range(8)]
    files = [_maps_file(tmp_path / f"{n}.h5", paths, m, name=n) for n, m in zip("abc", (a, b, c))]
    j, cs = tmp_path / "r.json", tmp_path / "r.csv"
    assert _run(["saliency-agreement", *map(str, files), "--json", str(j), "--csv", str(cs)]) == 0
    capsys.readouterr()
    doc = json.loads(j.read_text())
    assert doc["matrices"]["n_undefined_jsd"] == [[0, 2, 1], [2, 2, 3], [1, 3, 1]]
    assert doc["matrices"]["n_undefined_r"] == [[0, 3, 1], [3, 3, 4], [1, 4, 1]]
    rows = {(r["model_a"], r["model_b"]): r for r in csv.DictReader(open(cs, newline=""))}
    assert rows[("a", "b")]["n_undefined_jsd"] == "2" and rows[("b", "c")]["n_undefined_jsd"] == "3"
    # the notes count in the singular where there is one map ('1 of 8 maps are constant' before)
    assert doc["notes"] == [
        "b: 2 of 8 maps are all zero (zero gradients): r and JSD on those images are undefined (NaN, counted as "
        "undefined, left out of the means)",
        "b: 1 of 8 maps is constant: r on those images is undefined (NaN, counted as undefined, left out of the means)",
        "c: 1 of 8 maps is all zero (zero gradients): r and JSD on those images are undefined (NaN, counted as "
        "undefined, left out of the means)"]


# ------------------------------------------------------------------ 3, 4. the study report's settings


def _report_study(tmp_path, *, tag):
    """A study of synthetic rows (no training): normalize True in every run, frozen_bn False / True by
    objective, and a tag 'note' of digits that differs between runs."""
    from embedscope.study.run import finish_study

    rows = []
    for k, (loss, bn) in enumerate((("margin", False), ("triplet", True), ("contrastive", False))):
        for s in (0, 1):
            rng = np.random.default_rng(10 * k + s)
            name = f"{loss}_s{s}"
            row = {"id": name, "run": name, "selection": "given", "status": "ok", "loss": loss, "miner": "distance",
                   "p_switch": 0.0, "seed": s, "normalize": True, "frozen_bn": bn, "untrained": "", "epoch": 3,
                   "dataset": "digits", "arch": "digits_cnn", "embed_dim": 16, "checkpoint": f"ckpts/{name}.pt",
                   "sha256": f"{k:02x}" * 32, "N_train": 901, "N_test": 896,
                   "tag:note": tag[k]}
            row.update({m: float(rng.uniform(0.2, 0.9)) for m in ("R@1", "MAP@R", "rho", "pi_ratio", "pi_intra",
                                                                  "pi_inter", "NMI", "mAP@C", "F1")})
            rows.append(row)
    d = tmp_path / "study"
    d.mkdir()
    finish_study(d, rows, n_boot=20, seed=1, figures=False)
    (d / "study.json").write_text(json.dumps({
        "settings": {"source": "runs/", "epoch": "best", "metric": "cosine", "seed": 1, "device": "cpu"},
        "versions": {"embedscope": "x"}, "host": "node7"}))
    return d


def _settings(text):
    import html
    import re

    return {html.unescape(k): html.unescape(re.sub(r"<[^>]+>", "", v)) for k, v in
            re.findall(r'<tr><td class="l">(.*?)</td><td class="w">(.*?)</td></tr>', text)}


def test_report_settings_say_yes_no_as_the_runs_table_does(tmp_path):
    """'normalize True' in the settings, 'yes' in the runs table's L2-normalised column: one wording, yes / no
    (a setting that goes with the objective too); no Python True / False left on the page."""
    import re

    from embedscope.study.report import build_report

    text = build_report(_report_study(tmp_path, tag=("a", "b", "c")))
    st = _settings(text)
    assert "normalize yes" in st["training settings, the same in every run"]
    follow = st["training settings that go with the objective (fixed by the axes; \u2013: none)"]
    assert "frozen_bn: no (contrastive, margin), yes (triplet)" in follow
    plain = re.sub(r"<[^>]+>", " ", text)
    assert not re.search(r"\b(True|False)\b", plain)


def test_report_keeps_a_tag_of_digits_as_written(tmp_path):
    """A tag '007' read back from runs.csv (text) was listed as 7 in the settings (a whole number tidied as
    16.0 -> 16), while the runs table shows 007; '16.0' still reads 16."""
    from embedscope.study.report import _cell, build_report

    text = build_report(_report_study(tmp_path, tag=("007", "7", "0042")))
    follow = _settings(text)["training settings that go with the objective (fixed by the axes; \u2013: none)"]
    assert "tag:note: 0042 (contrastive), 007 (margin), 7 (triplet)" in follow, follow
    assert _cell({"x": "16.0"}, "x") == "16" and _cell({"x": "007"}, "x") == "007" and _cell({"x": "-3"}, "x") == "-3"


# ------------------------------------------------------------------ 4. texts that look like numbers stay texts


@pytest.mark.parametrize("header", ["", "names\n"])
def test_import_reads_class_names_of_digits_from_a_one_column_csv_as_written(tmp_path, header, capsys):
    """--class-names FILE.csv (one column, with or without a header line): '007' and '7' were both read as the
    number 7 by pandas ('class names repeat 7'); a labels file of '007' and '7' made one class of two. As a
    column of a table is read (and add-properties reads one): the cells as written."""
    from embedscope.importers import read_vector
    from embedscope.store import load

    (tmp_path / "e.csv").write_text("path,label,e0,e1\na.png,0,0.1,0.2\nb.png,1,0.3,0.4\nc.png,0,0.5,0.1\n")
    (tmp_path / "cn.csv").write_text(header + "007\n7\n")
    assert _run(["import", str(tmp_path / "e.csv"), "-o", str(tmp_path / "e.h5"), "--class-names",
                 str(tmp_path / "cn.csv")]) == 0, capsys.readouterr().err
    assert list(load(tmp_path / "e.h5").class_names) == ["007", "7"]
    (tmp_path / "y.csv").write_text(header + "007\n7\n007\n")
    assert list(read_vector(tmp_path / "y.csv", "labels")) == ["007", "7", "007"]
    (tmp_path / "n.csv").write_text(header + "3\n7\n3\n")  # plain integers and numbers as before
    assert read_vector(tmp_path / "n.csv", "labels").tolist() == [3, 7, 3]
    (tmp_path / "f.csv").write_text(header + "0.5\n1.5\n")
    assert read_vector(tmp_path / "f.csv", "labels").tolist() == [0.5, 1.5]


# ------------------------------------------------------------------ 6. write_csv without columns


def test_write_csv_without_columns_keeps_a_key_only_a_later_row_has(tmp_path):
    """The header was the first row's keys: a later row's own key (a correlation row with a note, say) was
    dropped without a word. Now every key, in the order they first come; given columns still choose."""
    from embedscope.tables import write_csv

    p = tmp_path / "t.csv"
    write_csv(p, [{"z": 1, "a": 2}, {"a": 3, "note": "x", "z": 4}])
    assert p.read_text(encoding="utf-8") == "z,a,note\n1,2,\n4,3,x\n"
    write_csv(p, [{"z": 1, "a": 2}, {"a": 3, "note": "x"}], ["a"], force=True)
    assert p.read_text(encoding="utf-8") == "a\n2\n3\n"
    write_csv(p, [], force=True)
    assert p.read_text(encoding="utf-8").strip() == ""


def test_format_table_without_columns_shows_a_key_only_a_later_row_has():
    from embedscope.tables import format_table

    lines = format_table([{"a": 1}, {"a": 2, "b": "x"}]).splitlines()
    assert lines[0].split() == ["a", "b"] and lines[3].split() == ["2", "x"]


def test_pandas_missing_values_are_null_and_empty_cells(tmp_path):
    """pandas' NA (a cell of a nullable column: frame.iat, .loc, a Series' values): write_json failed with a
    traceback ('NAType is not JSON serializable'), write_csv wrote the text '<NA>'."""
    import pandas as pd

    from embedscope.tables import _csv_cell, _jsonable, write_csv, write_json

    s = pd.array([True, None], dtype="boolean")
    row = {"s": s[1], "t": s[0], "m": pd.array([None, 3], dtype="Int64")[0]}
    assert json.dumps(_jsonable([row])) == '[{"s": null, "t": true, "m": null}]'
    assert _csv_cell(pd.NA) is None and _csv_cell(pd.NaT) is None
    write_json(tmp_path / "n.json", row)
    write_csv(tmp_path / "n.csv", [row])
    assert (tmp_path / "n.csv").read_text(encoding="utf-8") == "s,t,m\n,True,\n"


def test_format_table_shows_pandas_na_as_undefined():
    import pandas as pd

    from embedscope.tables import format_table

    text = format_table([{"a": pd.NA, "b": 1.0}, {"a": 2, "b": float("nan")}], nan="-")
    assert "<NA>" not in text and text.splitlines()[2].split() == ["-", "1.0000"]
