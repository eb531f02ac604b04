"""Audit 24: `embedscope properties`.

Start-up: below ``NUMPY_BELOW`` rows NR-Prec's engine runs its float32 GEMM and top-L lists in numpy,
without importing torch (1.3 s of a digits-sized run); the hit counts, and so every number, are those of
the torch engine and of a brute force written here from docs/methods.md §9 (full float64 rankings,
ties to the lower index), on data with exact ties, repeated rows, a collapsed model, deep R (few
values, no cap), a cap, both metrics, small blocks and every top-L path.

Option combinations: options that only matter with another are refused when given alone (--seed
without --permutations), a cap no R reaches is said, a property named twice is refused, and the
terminal, CSV, JSON and Parquet of one call hold the same numbers."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from brute import nr_prec, property_hits

from embedscope.cli import main
from embedscope.metrics import properties as mod


def _run(args) -> int:
    try:
        return main(args)
    except SystemExit as e:  # argparse's usage errors
        return e.code


def _brute_hits(X, vals, metric, max_r):
    """(R, h) per image from the definition: every query's full float64 ranking, ties to the lower index."""
    return property_hits(X, vals, metric, max_r)[:2]


POINTS = np.array([[0.5, 0.25, -0.75, 0.5], [-0.25, 1.0, 0.5, 0.0], [0.75, -0.5, 0.25, -1.0]])


def _data(kind: str):
    rng = np.random.default_rng(["gauss", "ties", "three", "half", "deep"].index(kind))
    if kind == "gauss":  # distinct keys; a property with structure, one without, lone values
        n = 300
        a = rng.integers(0, 6, n)
        X = rng.normal(size=(n, 8)) + 1.5 * rng.normal(size=(6, 8))[a]
        lone = rng.integers(0, 4, n)
        lone[:3] = [100, 101, 102]
        return X, {"a": a, "b": rng.integers(0, 30, n), "lone": lone}
    if kind == "ties":  # integer coordinates: tied keys, repeated rows, orthogonal pairs (-0.0 cosine keys)
        n = 260
        X = rng.integers(-2, 3, size=(n, 3)).astype(float)
        X[np.all(X == 0, axis=1)] = 1.0
        return X, {"few": rng.integers(0, 3, n), "many": rng.integers(0, 25, n),
                   "skew": (rng.random(n) < 0.1).astype(int)}
    if kind == "three":  # three distinct points: every float32 key of a row ties with a third of the row
        n = 240
        return POINTS[rng.integers(0, 3, n)], {"few": rng.integers(0, 4, n), "many": rng.integers(0, 40, n)}
    if kind == "half":  # half the rows on one point (a centred key space), half spread on a dyadic grid
        n = 240
        X = np.vstack([np.tile(POINTS[1], (n // 2, 1)), np.round(rng.normal(size=(n - n // 2, 4)) * 4) / 4])
        X = X[rng.permutation(n)]
        X[np.linalg.norm(X, axis=1) == 0] = POINTS[2]
        return X, {"few": rng.integers(0, 3, n), "many": rng.integers(0, 30, n)}
    n = 400  # deep R: two values, uncapped R ~ n/2 (long top-L lists)
    b = rng.integers(0, 2, n)
    return rng.normal(size=(n, 5)) + 0.7 * b[:, None], {"two": b, "three": rng.integers(0, 3, n)}


def _engine_hits(X, props, metric, max_r, below, block=None):
    codes = np.stack([mod._encode(v, len(X), k) for k, v in props.items()])
    R = np.stack([np.minimum(np.bincount(c)[c] - 1, max_r if max_r is not None else len(X)) for c in codes])
    eng = mod._Engine(np.asarray(X, dtype=np.float64), metric, block)
    assert (eng.torch is None) == (len(X) < below)
    return eng.hits(codes, R)


@pytest.mark.parametrize("kind", ["gauss", "ties", "three", "half", "deep"])
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_numpy_and_torch_engines_count_the_brute_force_hits(kind, metric, monkeypatch):
    """Every query's hit count, on every top-L path (short lists, long lists; sure hits through the
    lists or by a scan of the rows) and with small blocks: numpy engine = torch engine = brute force."""
    X, props = _data(kind)
    for max_r in (None, 9):
        want = np.stack([_brute_hits(X, v, metric, max_r)[1] for v in props.values()])
        for long_list, deep in ((mod.LONG_LIST, mod.DEEP_COUNT), (10 ** 9, 10 ** 9), (0, 0)):
            monkeypatch.setattr(mod, "LONG_LIST", long_list)
            monkeypatch.setattr(mod, "DEEP_COUNT", deep)
            for below in (1 << 40, 0):  # numpy, torch
                monkeypatch.setattr(mod, "NUMPY_BELOW", below)
                for block in (None, 37):
                    H = _engine_hits(X, props, metric, max_r, below, block)
                    np.testing.assert_array_equal(H, want, err_msg=f"{kind} {metric} max_r={max_r} LONG_LIST="
                                                  f"{long_list} DEEP_COUNT={deep} NUMPY_BELOW={below} block={block}")


def _same_numbers(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for k in a:
        assert list(a[k]) == list(b[k])
        for f, v in a[k].items():
            w = b[k][f]
            if isinstance(v, float) and math.isnan(v):
                assert isinstance(w, float) and math.isnan(w), (k, f)
            else:
                assert v == w and type(v) is type(w), (k, f, v, w)


@pytest.mark.parametrize("kind", ["gauss", "ties", "half", "deep"])
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
@pytest.mark.parametrize("max_r", [None, 5])
def test_property_precision_identical_on_both_engines_and_as_the_brute_force(kind, metric, max_r, monkeypatch):
    """R-Prec, NR-Prec, ceiling, z, p and the permutation test to the last digit on both engines; and
    R-Prec, NR-Prec, ceiling, p as tests/brute.py computes them from full rankings."""
    X, props = _data(kind)
    monkeypatch.setattr(mod, "NUMPY_BELOW", 1 << 40)
    a = mod.property_precision(X, props, metric=metric, max_r=max_r, permutations=3, seed=4)
    monkeypatch.setattr(mod, "NUMPY_BELOW", 0)
    b = mod.property_precision(X, props, metric=metric, max_r=max_r, permutations=3, seed=4)
    _same_numbers(a, b)
    for k, v in props.items():
        R, h = _brute_hits(X, v, metric, max_r)  # the pair-by-pair float64 keys: exact ties stay ties
        q = R > 0
        inv = np.unique(v, return_inverse=True)[1].ravel()
        p = (np.bincount(inv)[inv] / q.sum())[q]
        z = (h[q] - R[q] * p) / np.sqrt(R[q] * p * (1 - p))
        assert a[k]["R-Prec"] == pytest.approx(np.mean(h[q] / R[q]), rel=1e-12), k
        assert a[k]["NR-Prec"] == pytest.approx(np.mean(z), rel=1e-12, abs=1e-12), k
        ref = nr_prec(X, v, metric=metric, max_r=max_r)
        # tests/brute.py ranks cosine by one BLAS product, whose rounding can order exact ties otherwise
        fields = ("R-Prec", "NR-Prec", "ceiling", "p_value") if metric == "euclidean" or kind in ("gauss", "deep") \
            else ("ceiling",)
        for f in fields:
            assert a[k][f] == pytest.approx(ref[f], rel=1e-12, abs=1e-300), (k, f)


def test_default_engine_is_numpy_below_the_threshold_and_torch_from_it():
    X = np.random.default_rng(0).normal(size=(50, 3))
    assert mod._Engine(X, "euclidean").torch is None
    big = np.random.default_rng(0).normal(size=(mod.NUMPY_BELOW, 2))
    assert mod._Engine(big, "euclidean").torch is not None


def test_packed_keys_are_the_same_bits_in_numpy_and_torch():
    import torch

    v = np.array([[0.0, -0.0, 1.5, -np.inf, 1.5, -2.0, np.inf, 1e-45, -1e-45, 3.4e38],
                  [3.0, 2.0, -1.0, 0.5, 0.5, -0.0, 7.0, -7.0, 1e-30, 0.0]], dtype=np.float32)
    a = mod._packed_descending(v.copy())
    b = mod._packed_descending(torch.from_numpy(v.copy()))
    np.testing.assert_array_equal(a, b)
    buf = np.empty((4, 10), dtype=np.int64)  # a reused buffer larger than the block
    np.testing.assert_array_equal(mod._packed_descending(v.copy(), buf), b)


def _digits_file(path, n=240, seed=0):
    from embedscope import store

    rng = np.random.default_rng(seed)
    y = rng.integers(0, 5, n)
    X = (rng.normal(size=(n, 6)) + 2.0 * rng.normal(size=(5, 6))[y]).astype(np.float32)
    split = np.where(np.arange(n) % 3 == 0, "train", "test")
    es = store.EmbeddingSet.from_arrays(X, y, split=split, properties={
        "hue": rng.integers(0, 3, n), "size": np.array(["s", "m", "l"])[(y + rng.integers(0, 2, n)) % 3]})
    store.save(path, es)
    return str(path), X, y, es


def test_small_properties_command_does_not_import_torch(tmp_path):
    path = _digits_file(tmp_path / "a.h5")[0]
    code = ("import sys; from embedscope.cli import main; rc = main(['properties', *sys.argv[1:], '--no-progress']); "
            "print('torch-imported' if 'torch' in sys.modules else 'no-torch', rc)")
    for extra in ([], ["--permutations", "2", "-o", str(tmp_path / "f.png"), "--json", str(tmp_path / "r.json"),
                       "--csv", str(tmp_path / "r.csv"), "--parquet", str(tmp_path / "r.parquet")]):
        out = subprocess.run([sys.executable, "-c", code, path, *extra], capture_output=True, text=True,
                             check=True).stdout
        assert out.split()[-2:] == ["no-torch", "0"], extra


# ------------------------------------------------------------------------------- option combinations
def test_seed_without_permutations_is_a_usage_error(tmp_path, capsys):
    """--seed only seeds the permutation test's shuffles: alone it changed nothing, without a word."""
    path = _digits_file(tmp_path / "a.h5")[0]
    for extra in ([], ["--permutations", "0"]):
        assert _run(["properties", path, "--no-progress", "--seed", "5", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--seed 5" in err[0] and "--permutations" in err[0]
    assert _run(["properties", path, "--no-progress", "--seed", "5", "--permutations", "2"]) == 0
    assert "2 shuffles, seed 5" in capsys.readouterr().out
    assert _run(["properties", path, "--no-progress", "--permutations", "2"]) == 0  # the default seed, 0
    assert "2 shuffles, seed 0" in capsys.readouterr().out


def test_property_named_twice_is_a_usage_error(tmp_path, capsys):
    path = _digits_file(tmp_path / "a.h5")[0]
    assert _run(["properties", path, "--no-progress", "--properties", "hue, class,hue"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'hue' twice" in err[0]


def test_a_cap_no_R_reaches_is_said_and_only_1023_is_called_kobs_code(tmp_path, capsys):
    path, X, y, es = _digits_file(tmp_path / "a.h5")
    test = es.subset("test")
    assert _run(["properties", path, "--no-progress", "--max-r", "5000", "--csv", str(tmp_path / "c.csv")]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "R capped at 5000 (no R exceeds it here" in head and "Kobs" not in head
    rows = list(csv.DictReader(open(tmp_path / "c.csv")))
    assert all(r["capped"] == "False" for r in rows)
    ref = nr_prec(test.embeddings, test.properties["hue"])  # uncapped
    assert float(next(r for r in rows if r["property"] == "hue")["NR-Prec"]) == pytest.approx(ref["NR-Prec"], rel=1e-12)
    assert _run(["properties", path, "--no-progress", "--max-r", "4"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "R capped at 4;" in head and "Kobs" not in head and "no R exceeds" not in head
    assert _run(["properties", path, "--no-progress", "--max-r", "1023"]) == 0
    assert "R capped at 1023 (Kobs' code) (no R exceeds it" in capsys.readouterr().out.splitlines()[0]


def _models_with_different_properties(tmp_path):
    from embedscope import store

    rng = np.random.default_rng(7)
    n = 150
    y = rng.integers(0, 4, n)
    X = (rng.normal(size=(n, 5)) + 2.0 * rng.normal(size=(4, 5))[y]).astype(np.float32)
    a = store.EmbeddingSet.from_arrays(X, y, properties={"hue": rng.integers(0, 3, n), "only_a": rng.integers(0, 2, n)})
    b = store.EmbeddingSet.from_arrays(X[::-1].copy(), y[::-1].copy(),
                                       properties={"hue": rng.integers(0, 3, n), "only_b": rng.integers(0, 5, n)})
    store.save(tmp_path / "a.h5", a)
    store.save(tmp_path / "b.h5", b)
    return a, b


def test_several_files_of_different_properties_say_which_is_absent(tmp_path, capsys):
    _models_with_different_properties(tmp_path)
    out_png = tmp_path / "f.png"
    assert _run(["properties", str(tmp_path / "a.h5"), str(tmp_path / "b.h5"), "--no-progress", "-o", str(out_png)]) == 0
    out = capsys.readouterr().out
    assert "a: no property 'only_b' in this file (no row)" in out
    assert "b: no property 'only_a' in this file (no row)" in out
    assert "undefined" not in out  # nothing is undefined: the numbers are missing, not NaN


def test_property_bars_write_absent_not_na_for_a_property_a_file_lacks():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from embedscope.viz.properties import property_bars

    rows = [{"model": "a", "property": "hue", "NR-Prec": 1.0, "ceiling": 5.0},
            {"model": "b", "property": "hue", "NR-Prec": float("nan"), "ceiling": float("nan")},
            {"model": "a", "property": "only_a", "NR-Prec": 2.0, "ceiling": 5.0}]
    fig = property_bars(rows)
    texts = [t.get_text() for t in fig.axes[0].texts]
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    plt.close(fig)
    assert sorted(texts) == ["absent", "n/a"]  # b's hue undefined; b has no only_a
    assert any(t.startswith("absent:") for t in legend) and any(t.startswith("n/a:") for t in legend)


def test_terminal_csv_json_parquet_and_one_file_among_several_hold_the_same_numbers(tmp_path, capsys):
    """One call's four outputs carry the same numbers; a file's numbers are the same alone and beside
    another file, and (Euclidean, uncapped) the brute force's of its test rows."""
    import pandas as pd

    a, b = _models_with_different_properties(tmp_path)
    pa, pb = str(tmp_path / "a.h5"), str(tmp_path / "b.h5")
    outs = {k: str(tmp_path / f"two.{k}") for k in ("csv", "json", "parquet")}
    assert _run(["properties", pa, pb, "--no-progress", "--names", "A", "B", "--permutations", "3", "--seed", "2",
                 "--csv", outs["csv"], "--json", outs["json"], "--parquet", outs["parquet"]]) == 0
    term = capsys.readouterr().out.splitlines()
    rows = list(csv.DictReader(open(outs["csv"])))
    pq = pd.read_parquet(outs["parquet"])
    js = {m["model"]: m for m in json.load(open(outs["json"]))["models"]}
    assert len(rows) == len(pq) == 6
    for i, r in enumerate(rows):
        jrow = next(t for t in js[r["model"]]["table"] if t["property"] == r["property"])
        for f in ("NR-Prec", "R-Prec", "ceiling", "p_value", "perm_p_value", "perm_mean", "perm_sd"):
            assert float(r[f]) == jrow[f] == pq.iloc[i][f], (r["model"], r["property"], f)
        assert js[r["model"]]["values"][f"NR-Prec[{r['property']}]"] == float(r["NR-Prec"])
        line = next(t for t in term if t.split()[:2] == [r["model"], r["property"]])
        assert line.split()[2] == f"{float(r['NR-Prec']):.4f}"
    # a alone: the same numbers as beside b (the same shuffles: one seed per file)
    assert _run(["properties", pa, "--no-progress", "--names", "A", "--permutations", "3", "--seed", "2",
                 "--csv", str(tmp_path / "one.csv")]) == 0
    alone = {r["property"]: r for r in csv.DictReader(open(tmp_path / "one.csv"))}
    for r in rows:
        if r["model"] == "A":
            assert {k: v for k, v in r.items()} == alone[r["property"]]
    for name, es in (("A", a), ("B", b)):
        for prop, vals in [("class", es.labels), *es.properties.items()]:
            ref = nr_prec(es.embeddings, vals)
            got = next(r for r in rows if r["model"] == name and r["property"] == prop)
            for f in ("NR-Prec", "R-Prec", "ceiling", "p_value"):
                assert float(got[f]) == pytest.approx(ref[f], rel=1e-12, abs=1e-300), (name, prop, f)


def test_split_all_is_every_row(tmp_path, capsys):
    path, X, y, es = _digits_file(tmp_path / "a.h5")
    assert _run(["properties", path, "--no-progress", "--split", "all", "--max-r", "20", "--metric", "cosine",
                 "--csv", str(tmp_path / "c.csv")]) == 0
    rows = {r["property"]: r for r in csv.DictReader(open(tmp_path / "c.csv"))}
    assert int(rows["hue"]["queries"]) == len(y)
    for prop, vals in (("class", es.labels), ("hue", es.properties["hue"]), ("size", es.properties["size"])):
        R, h = _brute_hits(es.embeddings, vals, "cosine", 20)
        assert float(rows[prop]["R-Prec"]) == pytest.approx(np.mean(h[R > 0] / R[R > 0]), rel=1e-12)


def test_a_later_file_without_the_property_or_split_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """--properties naming what the second file lacks (or --split it has no rows of): one line, and the
    first file is not measured first (with --permutations that took minutes before the error)."""
    from embedscope.store import EmbeddingSet, save

    _models_with_different_properties(tmp_path)
    rng = np.random.default_rng(1)
    only_test = EmbeddingSet.from_arrays(rng.normal(size=(30, 3)), rng.integers(0, 3, 30), split="test",
                                         properties={"hue": rng.integers(0, 2, 30), "only_a": rng.integers(0, 2, 30)})
    save(tmp_path / "t.h5", only_test)
    train = _digits_file(tmp_path / "d.h5")[0]
    calls = []
    real = mod.property_precision
    monkeypatch.setattr(mod, "property_precision", lambda *a, **k: calls.append(1) or real(*a, **k))
    for args, what in (([str(tmp_path / "a.h5"), str(tmp_path / "b.h5"), "--properties", "only_a"], "no property 'only_a'"),
                       ([train, str(tmp_path / "t.h5"), "--split", "train"], "no 'train' rows")):
        assert _run(["properties", *args, "--no-progress", "--permutations", "5", "--seed", "1"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and what in err[0] and ("b.h5" in err[0] or "t.h5" in err[0]), err
    assert calls == []


def test_python_api_refuses_a_property_named_twice(tmp_path):
    from embedscope.analyses import properties
    from embedscope.errors import EmbedscopeError

    path = _digits_file(tmp_path / "a.h5")[0]
    with pytest.raises(EmbedscopeError, match="'hue' twice"):
        properties(path, properties=["hue", "class", "hue"])
    assert [r["property"] for r in properties(path, properties=("hue",))[0].table] == ["hue"]


def test_a_class_standing_in_a_twin_property_is_not_called_absent(tmp_path, capsys):
    """File a's 'shape' groups the images as its labels (no 'class' row, its note says so); b has a class
    row: no line calls a's class absent."""
    from embedscope import store

    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, 90)
    X = rng.normal(size=(90, 4)).astype(np.float32)
    store.save(tmp_path / "a.h5", store.EmbeddingSet.from_arrays(X, y, properties={"shape": y + 10}))
    store.save(tmp_path / "b.h5", store.EmbeddingSet.from_arrays(X, y, properties={"hue": rng.integers(0, 2, 90)}))
    assert _run(["properties", str(tmp_path / "a.h5"), str(tmp_path / "b.h5"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "a: property 'shape' groups the images exactly as the class labels" in out
    assert "no property 'class'" not in out
    assert "a: no property 'hue' in this file (no row)" in out and "b: no property 'shape'" in out
