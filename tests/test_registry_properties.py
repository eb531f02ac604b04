"""NR-Prec:<property> in the measure registry (docs/methods.md §9) and in studies.

Values equal a direct ``property_precision`` call on the test split and a brute-force computation
from Kobs et al.'s Eq. 5 written here; a study table carries one NR-Prec column per property and
correlates it; files without properties give no such column and no error.
"""

import numpy as np
import pandas as pd
import pytest

from embedscope.analyses.registry import MEASURES, available, compute_measures, describe
from embedscope.errors import EmbedscopeError
from embedscope.metrics.properties import property_precision
from embedscope.store import EmbeddingSet


def _set(seed=0, n=150, props=True, signal=3.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    y = np.arange(n) % 5
    split = np.where(np.arange(n) < n // 2, "train", "test")
    colour = rng.integers(0, 3, n)
    X[:, 0] += signal * colour  # the embedding encodes colour; size is noise
    properties = {"colour": colour, "size": rng.choice(["s", "m", "l", "xl"], n)} if props else {}
    return EmbeddingSet(embeddings=X, labels=y, paths=np.array([f"img/{i}.png" for i in range(n)]), split=split,
                        class_names=[f"c{i}" for i in range(5)], properties=properties)


def _nr_prec_brute(X, v):
    """Eq. 5 from the formula: per query, hits among the R = N_v - 1 nearest (Euclidean, lower index
    first on ties), z = (h - R p) / sqrt(R p (1 - p)), p = N_v / (non-lone queries); mean over queries."""
    n = len(v)
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    vals, cnt = np.unique(v, return_counts=True)
    nv = dict(zip(vals.tolist(), cnt.tolist()))
    queries = [i for i in range(n) if nv[v[i].item()] > 1]
    zs = []
    for i in queries:
        R = nv[v[i].item()] - 1
        others = [j for j in range(n) if j != i]
        order = sorted(others, key=lambda j: (D[i, j], j))[:R]
        h = sum(v[j] == v[i] for j in order)
        p = nv[v[i].item()] / len(queries)
        zs.append((h - R * p) / np.sqrt(R * p * (1 - p)))
    return float(np.mean(zs))


def test_nr_prec_values_equal_property_precision_and_the_formula():
    es = _set()
    got = compute_measures(es)
    names = [k for k in got if k.startswith("NR-Prec:")]
    assert names == ["NR-Prec:colour", "NR-Prec:size"]
    assert list(got)[:len(MEASURES)] == list(MEASURES)  # fixed measures first, in registry order
    te = es.subset("test")
    direct = property_precision(te.embeddings, te.properties, max_r=None)  # the paper's uncapped definition
    for p in ("colour", "size"):
        assert got[f"NR-Prec:{p}"] == direct[p]["NR-Prec"]
        assert got[f"NR-Prec:{p}"] == pytest.approx(_nr_prec_brute(te.embeddings, te.properties[p]), abs=1e-12)
    assert got["NR-Prec:colour"] > 2.576 > abs(got["NR-Prec:size"])  # encoded vs noise
    # asked by name, alone or with others: the same value, in the order asked
    one = compute_measures(es, ["NR-Prec:size", "R@1"])
    assert list(one) == ["NR-Prec:size", "R@1"] and one["NR-Prec:size"] == got["NR-Prec:size"]
    assert one["R@1"] == got["R@1"]


def test_registry_knows_per_property_names():
    m = MEASURES["NR-Prec:colour"]
    assert (m.family, m.split, m.direction) == ("properties", "test", "higher")
    assert "uncapped" in m.meaning and "§9" in m.meaning
    assert "NR-Prec:colour" in MEASURES and "NR-Prec:" not in MEASURES and "nope" not in MEASURES
    assert all(not k.startswith("NR-Prec") for k in MEASURES)  # iteration: the fixed measures only
    assert describe()[-1]["name"] == "NR-Prec:<name>"
    assert available(_set()) == [*MEASURES, "NR-Prec:colour", "NR-Prec:size"]


def test_files_without_properties_and_bad_names():
    es = _set(props=False)
    got = compute_measures(es)
    assert list(got) == list(MEASURES) and available(es) == list(MEASURES)
    with pytest.raises(EmbedscopeError, match="no property 'colour'.*has: none"):
        compute_measures(es, ["NR-Prec:colour"])
    with pytest.raises(EmbedscopeError, match="no property 'weight'.*has: colour, size"):
        compute_measures(_set(), ["NR-Prec:weight"])
    with pytest.raises(EmbedscopeError, match=r"unknown measure\(s\) NR-Prec:, nope .*NR-Prec:<name>"):
        compute_measures(es, ["NR-Prec:", "nope"])


def _rows(with_props=True, k=5):
    rows = []
    for i in range(k):
        es = _set(seed=i, signal=0.5 * i, props=with_props)
        vals = compute_measures(es, None if with_props else ["R@1", "rho", "MAP@R"])
        rows.append({"id": f"r{i}", "run": f"r{i}", "selection": "given", "epoch": None, "checkpoint": f"r{i}.pt",
                     "untrained": "", "loss": f"loss{i}", "seed": 0, "status": "ok", "error": "", **vals})
    return rows


def test_study_table_carries_and_ranks_nr_prec(tmp_path):
    from embedscope.study.measures import measure_splits
    from embedscope.study.run import finish_study

    rows = _rows()
    assert measure_splits([c for r in rows for c in r])["NR-Prec:colour"] == "test"
    res = finish_study(tmp_path / "st", rows, n_boot=50, figures=False)
    df = pd.read_csv(tmp_path / "st" / "runs.csv")
    for p in ("colour", "size"):
        assert np.allclose(df[f"NR-Prec:{p}"], [r[f"NR-Prec:{p}"] for r in rows], rtol=0, atol=1e-12)
    corr = pd.read_csv(tmp_path / "st" / "correlations.csv")
    c = corr[(corr.measure == "NR-Prec:colour") & (corr.level == "objectives")].iloc[0]
    assert c["split"] == "test"
    from scipy.stats import pearsonr

    assert c["pearson"] == pytest.approx(pearsonr(df["NR-Prec:colour"], df["R@1"])[0], abs=1e-12)
    assert {"NR-Prec:colour", "NR-Prec:size"} <= {r["measure"] for r in res["stats"]["ranking"]}


def test_study_without_properties_has_no_nr_prec_columns(tmp_path):
    from embedscope.study.run import finish_study

    finish_study(tmp_path / "st", _rows(with_props=False), n_boot=20, figures=False)
    df = pd.read_csv(tmp_path / "st" / "runs.csv")
    corr = pd.read_csv(tmp_path / "st" / "correlations.csv")
    assert not any(c.startswith("NR-Prec") for c in df.columns)
    assert not corr.measure.str.startswith("NR-Prec").any() and {"rho", "MAP@R"} <= set(corr.measure)


def test_study_of_shapes_checkpoints_reports_nr_prec(tmp_path):
    """End to end (~10 s): untrained shapes_cnn checkpoints (two seeds) on a tiny rendered shapes set."""
    from embedscope.cli import main
    from embedscope.study.run import embed_cached, run_study

    root = tmp_path / "shapes"
    assert main(["make-shapes", "-o", str(root), "--n-images", "96", "--size", "16", "--no-progress"]) == 0
    for s in (0, 1):
        rc = main(["train", "--dataset", "shapes", "--root", str(root), "--arch", "shapes_cnn", "--image-size", "16",
                   "--embed-dim", "8", "--epochs", "0", "--batch-size", "24", "--seed", str(s), "--no-progress",
                   "-o", str(tmp_path / "ck" / f"s{s}.pt")])
        assert rc == 0
    res = run_study(str(tmp_path / "ck" / "*.pt"), tmp_path / "st", workers=0, cache_dir=tmp_path / "cache",
                    n_boot=20, figures=False, echo=lambda s: None)
    assert not res["errors"]
    df = pd.read_csv(tmp_path / "st" / "runs.csv")
    props = ["shape", "obj_hue", "obj_sat", "obj_val", "bg_hue", "yaw", "scale", "cam_elev", "light_elev", "light_azim"]
    assert [c for c in df.columns if c.startswith("NR-Prec:")] == [f"NR-Prec:{p}" for p in props]
    row = df[df.selection == "final"].iloc[0]
    es, info = embed_cached(row["checkpoint"], cache_dir=tmp_path / "cache")
    assert info["cached"]
    te = es.subset("test")
    direct = property_precision(te.embeddings, te.properties)
    for p in props:
        assert row[f"NR-Prec:{p}"] == pytest.approx(direct[p]["NR-Prec"], rel=1e-12, abs=1e-12)
    corr = pd.read_csv(tmp_path / "st" / "correlations.csv")
    assert set(f"NR-Prec:{p}" for p in props) <= set(corr.measure)
