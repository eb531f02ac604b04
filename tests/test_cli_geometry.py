"""`embedscope geometry` and `embedscope spectrum` end to end on small HDF5 files."""

import csv
import json

import numpy as np
import pytest

from embedscope import store
from embedscope.cli import main
from embedscope.metrics import class_conditioned_spectra, geometry_report, singular_values


def make_file(path, decay=0.7, seed=0, n=400, d=16, c=8):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    X = rng.standard_normal((c, d))[y] * 2 + rng.standard_normal((n, d)) * np.arange(1, d + 1) ** -decay
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    split = np.where(y < c // 2, "train", "test")
    es = store.EmbeddingSet(X.astype(np.float32), y, [f"img{i}.png" for i in range(n)], split,
                            [f"class{k}" for k in range(c)])
    store.save(path, es)
    return es


@pytest.fixture
def files(tmp_path):
    a, b = tmp_path / "margin.h5", tmp_path / "r_margin.h5"
    return make_file(a, 1.2, 0), make_file(b, 0.3, 1), a, b


def test_geometry_table_json_csv(files, tmp_path, capsys):
    es, _, a, _ = files
    j, c = tmp_path / "g.json", tmp_path / "g.csv"
    assert main(["geometry", str(a), "--json", str(j), "--csv", str(c)]) == 0
    out = capsys.readouterr().out
    for name in ("rho", "pi_intra", "pi_inter", "pi_ratio", "effective_rank", "alpha", "alignment", "uniformity"):
        assert name in out
    tr = es.subset("train")
    ref = geometry_report(tr.embeddings, tr.labels)
    got = json.loads(j.read_text())
    assert got["provenance"]["split"] == "train"
    for k in ("rho", "pi_intra", "pi_inter", "pi_ratio", "effective_rank", "alpha", "alignment", "uniformity"):
        assert got["values"][k] == pytest.approx(ref[k], rel=1e-12)
    rows = {r["measure"]: r["value"] for r in csv.DictReader(c.open())}
    assert float(rows["rho"]) == pytest.approx(ref["rho"], rel=1e-12)
    assert int(rows["n"]) == tr.n


def test_geometry_split_and_exclude_top(files, tmp_path):
    es, _, a, _ = files
    j = tmp_path / "g.json"
    assert main(["geometry", str(a), "--split", "test", "--exclude-top", "0", "--json", str(j)]) == 0
    te = es.subset("test")
    got = json.loads(j.read_text())["values"]
    assert got["n"] == te.n
    assert got["rho"] == pytest.approx(geometry_report(te.embeddings, te.labels, exclude_top=0)["rho"], rel=1e-12)
    assert got["rho"] == pytest.approx(got["rho_all"], rel=1e-12)


def test_geometry_refuses_overwrite(files, tmp_path, capsys):
    _, _, a, _ = files
    j = tmp_path / "g.json"
    j.write_text("keep")
    assert main(["geometry", str(a), "--json", str(j)]) == 1
    assert "already exists" in capsys.readouterr().err
    assert j.read_text() == "keep"
    assert main(["geometry", str(a), "--json", str(j), "--force"]) == 0
    assert json.loads(j.read_text())["provenance"]["file"] == str(a)


def test_geometry_errors_are_one_line(tmp_path, capsys):
    assert main(["geometry", str(tmp_path / "missing.h5")]) == 1
    err = capsys.readouterr().err.strip()
    assert "no such file" in err and len(err.splitlines()) == 1
    with pytest.raises(SystemExit) as e:
        main(["geometry", str(tmp_path / "x.h5"), "--exclude-top", "-1"])
    assert e.value.code == 2


def test_spectrum_two_files_figure_csv_json(files, tmp_path, capsys):
    es_a, es_b, a, b = files
    out, j, c = tmp_path / "fig" / "spectrum.png", tmp_path / "s.json", tmp_path / "s.csv"
    rc = main(["spectrum", str(a), str(b), "--by-class", "--n-values", "10", "-o", str(out), "--json", str(j),
               "--table-csv", str(c), "--names", "Margin", "R-Margin"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "Margin" in text and "R-Margin" in text and "rho" in text
    png, pdf = out, out.with_suffix(".pdf")
    assert png.stat().st_size > 1000 and pdf.stat().st_size > 1000
    assert png.read_bytes()[:4] == b"\x89PNG" and pdf.read_bytes()[:4] == b"%PDF"
    got = json.loads(j.read_text())["models"]
    assert [f["model"] for f in got] == ["Margin", "R-Margin"]

    def series(entry, kind):
        return [r["value"] for r in entry["table"] if r["kind"] == kind]

    tr = es_a.subset("train")
    np.testing.assert_allclose(series(got[0], "singular_value"), singular_values(tr.embeddings), rtol=1e-9)
    per, mean = class_conditioned_spectra(tr.embeddings, tr.labels, k=10)
    np.testing.assert_allclose(series(got[0], "class_mean"), mean, rtol=1e-9)
    np.testing.assert_allclose(series(got[0], "class_std"), per.std(axis=0), rtol=1e-9, atol=1e-15)
    # the flatter spectrum has the lower rho
    assert got[1]["values"]["rho"] < got[0]["values"]["rho"]
    rows = list(csv.DictReader(c.open()))
    kinds = {(r["model"], r["kind"]) for r in rows}
    assert ("Margin", "normalised") in kinds and ("R-Margin", "class_mean") in kinds
    norm = [float(r["value"]) for r in rows if r["model"] == "Margin" and r["kind"] == "normalised"]
    assert sum(norm) == pytest.approx(1.0, rel=1e-9)


def test_spectrum_refuses_overwrite_and_label_count(files, tmp_path, capsys):
    _, _, a, _ = files
    out = tmp_path / "spectrum.png"
    assert main(["spectrum", str(a), "-o", str(out)]) == 0
    before = out.read_bytes()
    assert main(["spectrum", str(a), "-o", str(out)]) == 1
    assert "already exists" in capsys.readouterr().err
    assert out.read_bytes() == before
    assert main(["spectrum", str(a), "-o", str(out), "--force", "--exclude-top", "0"]) == 0
    assert main(["spectrum", str(a), "--names", "x", "y"]) == 2
    assert main(["spectrum", str(a), "-o", str(tmp_path / "fig.svg")]) == 2  # a usage error (issue 17)
