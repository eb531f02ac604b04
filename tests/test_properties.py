"""property_precision and compare_groups (docs/methods.md §9) against brute force from the formulas."""

from __future__ import annotations

import numpy as np
import pytest
from brute import unit_rows
from scipy.stats import hypergeom, mannwhitneyu

from embedscope.errors import EmbedscopeError
from embedscope.metrics.properties import compare_groups, property_precision


def brute(X, props, metric="euclidean", max_r=None):
    """Every query's full ranking (float64, ties to the lower index), then Eq. 4 / Eq. 5 literally."""
    X = np.asarray(X, dtype=np.float64)
    n = len(X)
    if metric == "cosine":
        # the same float64 normalisation and pair reduction as the engine: exact ties stay ties
        X = unit_rows(X)  # (docs/methods.md §1: x / max|x|, then / sqrt(Σ y²))
    out = {}
    orders = []
    for q in range(n):
        if metric == "cosine":
            key = np.einsum("ij,ij->i", np.repeat(X[q:q + 1], n, 0), X)
        else:
            key = np.array([-((X[q] - X[j]) ** 2).sum() for j in range(n)])
        others = np.array([j for j in range(n) if j != q])
        o = others[np.lexsort((others, -key[others]))]
        orders.append(o)
    for name, vals in props.items():
        vals = np.asarray(vals)
        nv = {v: int((vals == v).sum()) for v in np.unique(vals)}
        queries = [q for q in range(n) if nv[vals[q]] > 1]
        nq = len(queries)
        rp, z, ceil = [], [], []
        for q in queries:
            N = nv[vals[q]]
            R = N - 1 if max_r is None else min(N - 1, max_r)
            h = int((vals[orders[q][:R]] == vals[q]).sum())
            p = N / nq
            rp.append(h / R)
            z.append((h - R * p) / np.sqrt(R * p * (1 - p)))
            ceil.append(np.sqrt(R * (1 - p) / p))
        out[name] = {"R-Prec": np.mean(rp), "NR-Prec": np.mean(z), "ceiling": np.mean(ceil),
                     "lone_queries": n - nq, "lone_values": sum(c == 1 for c in nv.values()),
                     "n_values": len(nv)}
    return out


def check(X, props, **kw):
    got = property_precision(X, props, **kw)
    ref = brute(X, props, metric=kw.get("metric", "euclidean"), max_r=kw.get("max_r"))
    for k in props:
        for m in ("R-Prec", "NR-Prec", "ceiling"):
            assert got[k][m] == pytest.approx(ref[k][m], rel=1e-12, abs=1e-12), (k, m)
        for m in ("lone_queries", "lone_values", "n_values"):
            assert got[k][m] == ref[k][m], (k, m)
    return got


@pytest.mark.parametrize("max_r", [None, 7])
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_matches_brute_force_with_ties_and_lone_values(max_r, metric):
    rng = np.random.default_rng(1)
    n = 90
    # integer coordinates: many exactly tied distances and duplicated rows
    X = rng.integers(-2, 3, size=(n, 3)).astype(float)
    X[X.sum(1) == 0] += 1.0 if metric == "cosine" else 0.0
    X[np.all(X == 0, axis=1)] = 1.0
    props = {
        "a": rng.integers(0, 3, n),
        "b": np.array(["x", "y", "z", "w"])[rng.integers(0, 4, n)],
        "lone": np.concatenate([np.arange(5) + 100, rng.integers(0, 2, n - 5)]),  # 5 lone values
        "float": rng.choice([0.25, 0.5, 2.0], n),
    }
    got = check(X, props, metric=metric, max_r=max_r)
    assert got["lone"]["lone_queries"] == 5 and got["lone"]["lone_values"] == 5
    assert got["a"]["capped"] is (max_r is not None)
    assert got["a"]["max_r"] == max_r


def test_small_blocks_and_retries_match_brute_force():
    # a tiny block and many equal keys force bands at the end of the top-L list (the retry path)
    rng = np.random.default_rng(2)
    X = np.repeat(rng.normal(size=(12, 4)), 6, axis=0)  # 72 rows, each repeated 6 times
    props = {"a": rng.integers(0, 2, 72), "b": rng.integers(0, 6, 72)}
    from embedscope.metrics import properties as mod

    got = mod.property_precision(X, props, block=5, max_r=3)
    ref = brute(X, props, max_r=3)
    for k in props:
        assert got[k]["NR-Prec"] == pytest.approx(ref[k]["NR-Prec"], rel=1e-12)
    check(X, props, block=7)


def test_random_embeddings_give_about_zero():
    rng = np.random.default_rng(3)
    n = 1500
    X = rng.normal(size=(n, 8))
    props = {f"p{v}": rng.integers(0, v, n) for v in (2, 5, 9)}
    for max_r in (None, 50):
        r = property_precision(X, props, max_r=max_r)
        for k in props:
            assert abs(r[k]["NR-Prec"]) < 0.25, (k, r[k]["NR-Prec"])
            assert r[k]["p_value"] > 0.001
            assert not r[k]["significant_2.576"]


def test_encoded_property_far_above_the_others_and_perfect_clustering_hits_the_ceiling():
    rng = np.random.default_rng(4)
    n = 1200
    enc = rng.integers(0, 4, n)
    other = rng.integers(0, 6, n)
    X = rng.normal(size=(n, 8)) * 0.3
    X[:, 0] += 4.0 * enc
    r = property_precision(X, {"enc": enc, "other": other}, max_r=100)
    assert r["enc"]["NR-Prec"] > 5 * 2.576 and r["enc"]["p_value"] < 1e-10
    assert abs(r["other"]["NR-Prec"]) < 0.3
    # perfect clustering: every same-value image nearer than any other -> NR-Prec = ceiling, R-Prec = 1
    X = rng.normal(size=(n, 8)) * 0.05
    X[:, 0] += 4.0 * enc
    for max_r in (None, 100):
        r = property_precision(X, {"enc": enc}, max_r=max_r)
        assert r["enc"]["R-Prec"] == 1.0
        assert r["enc"]["NR-Prec"] == pytest.approx(r["enc"]["ceiling"], rel=1e-12)


def test_ceiling_capped_formula_table6():
    # docs/methods.md §9: capped at 1023 with 6 equally frequent values the ceiling is sqrt(1023 * 5) = 71.5
    n = 6 * 1100
    v = np.repeat(np.arange(6), 1100)
    X = v[:, None] * 10.0 + np.random.default_rng(0).normal(size=(n, 2)) * 0.5
    r = property_precision(X, {"model": v}, max_r=1023)
    assert r["model"]["ceiling"] == pytest.approx(np.sqrt(1023 * 5), rel=1e-12)
    assert r["model"]["NR-Prec"] == pytest.approx(71.52, abs=0.01)
    assert r["model"]["capped"] is True


def test_null_mean_and_spread_exact():
    # the null mean/sd are those of hypergeometric hit counts (scipy), per query, averaged
    rng = np.random.default_rng(5)
    n = 60
    X = rng.normal(size=(n, 3))
    v = rng.integers(0, 3, n)
    r = property_precision(X, {"v": v})["v"]
    cnt = np.bincount(v)
    ez, vz = [], []
    for q in range(n):
        N = cnt[v[q]]
        R, p = N - 1, N / n
        sig = np.sqrt(R * p * (1 - p))
        d = hypergeom(n - 1, N - 1, R)
        ez.append((d.mean() - R * p) / sig)
        vz.append(d.var() / sig ** 2)
    assert r["null_mean"] == pytest.approx(np.mean(ez), rel=1e-10)
    assert r["null_sd"] == pytest.approx(np.sqrt(np.sum(vz)) / n, rel=1e-10)


def test_bad_input_is_one_line():
    X = np.zeros((4, 2)) + 1.0
    with pytest.raises(EmbedscopeError, match="shape"):
        property_precision(X, {"a": [1, 2]})
    with pytest.raises(EmbedscopeError, match="max_r"):
        property_precision(X, {"a": [1, 1, 2, 2]}, max_r=0)
    with pytest.raises(EmbedscopeError, match="metric"):
        property_precision(X, {"a": [1, 1, 2, 2]}, metric="l1")
    with pytest.raises(EmbedscopeError, match="NaN"):
        property_precision(X, {"a": [1.0, np.nan, 2, 2]})
    r = property_precision(X, {"one": [1, 1, 1, 1], "lone": [1, 2, 3, 4]})
    assert np.isnan(r["one"]["NR-Prec"]) and r["one"]["R-Prec"] == 1.0
    assert r["lone"]["queries"] == 0 and np.isnan(r["lone"]["R-Prec"])


def test_compare_groups_exact_two_sided():
    vals = {"m1": {"a": 1.0, "b": 5.0}, "m2": {"a": 2.0, "b": 6.0}, "m3": {"a": 3.0, "b": 7.5},
            "c1": {"a": 10.0, "b": 5.5}, "c2": {"a": 11.0, "b": 6.5}, "c3": {"a": 12.0, "b": 7.0}}
    groups = {"m1": "ranking", "m2": "ranking", "m3": "ranking",
              "c1": "classification", "c2": "classification", "c3": "classification"}
    r = compare_groups(vals, groups)
    # complete separation of 3 vs 3: exact two-sided p = 2 / C(6, 3) = 0.1
    assert r["a"]["p_value"] == pytest.approx(0.1)
    assert r["a"]["method"] == "exact"
    ref = mannwhitneyu([5.5, 6.5, 7.0], [5.0, 6.0, 7.5], alternative="two-sided", method="exact")
    assert r["b"]["p_value"] == pytest.approx(ref.pvalue) and r["b"]["U"] == ref.statistic
    with pytest.raises(EmbedscopeError, match="two groups"):
        compare_groups(vals, {"m1": "x", "m2": "y", "m3": "z"})


# ----------------------------------------------------------------------------- command line
def _h5(path, X, labels, props):
    from embedscope import store

    n = len(X)
    es = store.EmbeddingSet(embeddings=X.astype(np.float32), labels=labels, paths=[f"img/{i}.png" for i in range(n)],
                            split=["test"] * n, class_names=[f"c{i}" for i in range(labels.max() + 1)],
                            properties=props)
    store.save(path, es)
    return path


def test_properties_command_table_json_csv_figure(tmp_path, capsys):
    import csv
    import json

    from embedscope.cli import main

    rng = np.random.default_rng(7)
    n = 300
    enc = rng.integers(0, 3, n)
    noise = rng.integers(0, 4, n)
    labels = rng.integers(0, 5, n)
    X = rng.normal(size=(n, 6)).astype(np.float32)
    X[:, 0] += 5 * enc
    a = _h5(tmp_path / "a.h5", X, labels, {"enc": enc, "noise": noise})
    b = _h5(tmp_path / "b.h5", rng.normal(size=(n, 6)).astype(np.float32), labels, {"enc": enc, "noise": noise})
    rc = main(["properties", str(a), str(b), "--names", "trained", "random", "--max-r", "50",
               "-o", str(tmp_path / "p.png"), "--json", str(tmp_path / "p.json"), "--csv", str(tmp_path / "p.csv"),
               "--no-progress"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "capped at 50" in out and "trained" in out and "random" in out
    doc = json.load(open(tmp_path / "p.json"))  # the common layout: one entry per model, its rows in "table"
    assert doc["analysis"] == "properties" and [m["model"] for m in doc["models"]] == ["trained", "random"]
    rows = [row for m in doc["models"] for row in m["table"]]
    assert rows[0]["property"] == "enc" and rows[0]["model"] == "trained"  # sorted by the first file's NR-Prec
    assert len(rows) == 6 and {r["property"] for r in rows} == {"enc", "noise", "class"}
    ref = property_precision(X, {"enc": enc}, max_r=50)["enc"]["NR-Prec"]
    assert rows[0]["NR-Prec"] == pytest.approx(ref)
    assert len(list(csv.DictReader(open(tmp_path / "p.csv")))) == 6
    assert (tmp_path / "p.png").exists() and (tmp_path / "p.pdf").exists()
    # refused without --force; unknown property one line
    assert main(["properties", str(a), "--json", str(tmp_path / "p.json"), "--no-progress"]) == 1
    assert main(["properties", str(a), "--properties", "nope", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "already exists" in err and "no property 'nope'" in err
    # a permutation test beside the z-test: in the table, the CSV and the JSON, seeded
    assert main(["properties", str(a), "--permutations", "19", "--seed", "3", "--csv", str(tmp_path / "q.csv"),
                 "--json", str(tmp_path / "q.json"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "permutation test: 19 shuffles, seed 3" in out and "perm_p_value" in out
    got = {r["property"]: r for r in csv.DictReader(open(tmp_path / "q.csv"))}
    assert float(got["enc"]["perm_p_value"]) == pytest.approx(1 / 20)  # clustered: beats every shuffle
    ref = property_precision(X, {"noise": noise}, permutations=19, seed=3)["noise"]
    assert float(got["noise"]["perm_p_value"]) == pytest.approx(ref["perm_p_value"])
    assert json.load(open(tmp_path / "q.json"))["provenance"]["permutations"] == 19  # one file: one-model layout


def test_properties_names_as_evaluate(tmp_path, capsys):
    """Display names as evaluate and spectrum give them: --names one per file (a usage error
    otherwise), files of the same stem told apart by their paths."""
    from embedscope.cli import main

    rng = np.random.default_rng(1)
    n = 60
    labels = rng.integers(0, 3, n)
    props = {"p": rng.integers(0, 2, n)}
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    a = _h5(tmp_path / "x" / "e.h5", rng.normal(size=(n, 4)), labels, props)
    b = _h5(tmp_path / "y" / "e.h5", rng.normal(size=(n, 4)), labels, props)
    from embedscope.analyses.image_properties import properties_of_files

    models = {r["model"] for r in properties_of_files([a, b])}
    assert models == {str(a), str(b)}
    capsys.readouterr()
    try:
        rc = main(["properties", str(a), "--names", "one", "two"])
    except SystemExit as e:
        rc = e.code
    assert rc == 2 and "--names gives 2 name(s) for 1 file(s)" in capsys.readouterr().err


def test_property_bars_leave_room_above_the_highest_ceiling():
    """The ceiling ticks sat on the axes' frame (the y-limit ended at the highest ceiling)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embedscope.viz.properties import property_bars

    rows = [{"model": "m", "property": "a", "NR-Prec": 8.0, "ceiling": 20.0},
            {"model": "m", "property": "b", "NR-Prec": 0.5, "ceiling": 15.0}]
    fig = property_bars(rows)
    assert fig.axes[0].get_ylim()[1] >= 1.3 * 20.0
    plt.close(fig)
