"""Audit 41 (Parquet): every table a command writes as CSV it also writes as Parquet, one layout for all.

1. saliency-agreement --parquet (the pair rows of --csv) and --per-image-parquet (the rows of
   --per-image-csv): the Parquet read back equals the CSV read back (columns, types, values to the
   last bit, NaN where a map is constant); refused without --force when present.
2. evaluate --per-class-parquet: the per-class table of --per-class.
3. spectrum --table-parquet: the spectra of --table-csv.
4. tables.write_csv writes +/-inf as ``inf`` / ``-inf`` (as a Result's CSV does), not an empty cell
   (read back as NaN: an infinite value and an undefined one read alike).
"""

from __future__ import annotations

import csv

import numpy as np
import pandas as pd
from cli_run import run_cli

from embedscope import store


def _maps_file(path, maps, *, name, family="ranking"):
    from embedscope.store.saliency import SaliencyMaps, save_maps

    n = len(maps)
    sm = SaliencyMaps(maps=maps, paths=[f"digits/{i:04d}" for i in range(n)], labels=np.arange(n) % 3,
                      class_names=["a", "b", "c"],
                      attrs={"name": name, "family": family, "n_samples": 50, "noise": 0.15,
                             "order": "paper", "dataset": "digits", "root": "", "input_size": 8})
    save_maps(path, sm)
    return path


def _emb_file(path, *, seed=0, n=240, d=12, c=6):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    X = rng.standard_normal((c, d))[y] * 2 + rng.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    split = np.where(y < c // 2, "train", "test")
    store.save(path, store.EmbeddingSet(X.astype(np.float32), y, [f"img{i}.png" for i in range(n)], split,
                                        [f"class{k}" for k in range(c)]))
    return path


def _same(csv_path, parquet_path):
    """The CSV and the Parquet read back with pandas: one frame (columns, dtypes, every bit)."""
    a = pd.read_csv(csv_path)
    b = pd.read_parquet(parquet_path)
    assert list(a.columns) == list(b.columns)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    return b


# ---------------------------------------------------------------- 1. saliency-agreement
def test_saliency_agreement_parquet_tables_equal_the_csvs(tmp_path):
    rng = np.random.default_rng(0)
    maps = [rng.random((6, 8, 8)).astype(np.float32) for _ in range(3)]
    maps[1][2] = 0.0  # an all-zero map: r and JSD of its image undefined (NaN)
    files = [_maps_file(tmp_path / f"m{k}.h5", m, name=f"m{k}", family=fam)
             for k, (m, fam) in enumerate(zip(maps, ["ranking", "ranking", "untrained"]))]
    out = {k: tmp_path / f"{k}" for k in ("pairs.csv", "pairs.parquet", "images.csv", "images.parquet")}
    rc, _, err = run_cli(["saliency-agreement", *files, "--csv", out["pairs.csv"], "--parquet", out["pairs.parquet"],
                          "--per-image-csv", out["images.csv"], "--per-image-parquet", out["images.parquet"]])
    assert rc == 0, err
    pairs = _same(out["pairs.csv"], out["pairs.parquet"])
    assert len(pairs) == 3 and pairs["n_undefined_r"].dtype == np.int64 and pairs["r_mean"].dtype == np.float64
    images = _same(out["images.csv"], out["images.parquet"])
    assert len(images) == 3 * 6 and images["pearson"].isna().sum() == 2  # image 2 of m1 in its two pairs
    # present without --force: refused, the file left as it was
    before = out["images.parquet"].read_bytes()
    rc, _, err = run_cli(["saliency-agreement", *files, "--per-image-parquet", out["images.parquet"]])
    assert rc != 0 and "--force" in err and out["images.parquet"].read_bytes() == before
    rc, _, err = run_cli(["saliency-agreement", *files, "--per-image-parquet", out["images.parquet"], "--force"])
    assert rc == 0, err


def test_saliency_agreement_parquet_refuses_a_csv_name(tmp_path):
    rng = np.random.default_rng(1)
    files = [_maps_file(tmp_path / f"m{k}.h5", rng.random((4, 8, 8)).astype(np.float32), name=f"m{k}")
             for k in range(2)]
    rc, _, err = run_cli(["saliency-agreement", *files, "--parquet", tmp_path / "pairs.csv"])
    assert rc == 2 and "writes Parquet" in err and not (tmp_path / "pairs.csv").exists()


# ---------------------------------------------------------------- 2. evaluate --per-class-parquet
def test_evaluate_per_class_parquet_equals_the_per_class_csv(tmp_path):
    files = [_emb_file(tmp_path / "a.h5", seed=0), _emb_file(tmp_path / "b.h5", seed=1)]
    pc, pq = tmp_path / "per_class.csv", tmp_path / "per_class.parquet"
    rc, out, err = run_cli(["evaluate", *files, "--split", "test", "--no-progress",
                            "--per-class", pc, "--per-class-parquet", pq])
    assert rc == 0, err
    frame = _same(pc, pq)
    assert len(frame) == 2 * 3 and {"class", "n", "R@1", "R-Precision", "MAP@R"} <= set(frame.columns)
    # alone (no --per-class): the same table, the worst classes shown
    alone = tmp_path / "alone.parquet"
    rc, out, err = run_cli(["evaluate", *files, "--split", "test", "--no-progress", "--per-class-parquet", alone])
    assert rc == 0, err
    assert "lowest MAP@R" in out
    pd.testing.assert_frame_equal(pd.read_parquet(alone), frame, check_exact=True)
    rc, _, err = run_cli(["evaluate", *files, "--split", "test", "--no-progress", "--per-class-parquet", alone])
    assert rc != 0 and "--force" in err


# ---------------------------------------------------------------- 3. spectrum --table-parquet
def test_spectrum_table_parquet_equals_the_table_csv(tmp_path):
    files = [_emb_file(tmp_path / "a.h5", seed=2), _emb_file(tmp_path / "b.h5", seed=3)]
    tc, tp = tmp_path / "spectra.csv", tmp_path / "spectra.parquet"
    rc, _, err = run_cli(["spectrum", *files, "--by-class", "--no-progress", "--table-csv", tc, "--table-parquet", tp])
    assert rc == 0, err
    frame = _same(tc, tp)
    assert list(frame.columns) == ["model", "kind", "k", "value"] and frame["k"].dtype == np.int64
    assert {"singular_value", "class_mean", "class_std"} <= set(frame["kind"])
    rc, _, err = run_cli(["spectrum", *files, "--no-progress", "--table-parquet", tp])
    assert rc != 0 and "--force" in err
    rc, _, err = run_cli(["spectrum", *files, "--no-progress", "--table-csv", tc, "--table-parquet", tc, "--force"])
    assert rc == 2 and "--table-parquet" in err


# ---------------------------------------------------------------- 4. write_csv's infinities
def test_write_csv_spells_infinities_as_result_csvs_do(tmp_path):
    from embedscope.analyses.result import Result
    from embedscope.tables import write_csv

    rows = [{"name": "x", "a": float("inf"), "b": np.float64(-np.inf), "c": float("nan"), "d": np.float32(np.inf),
             "e": 0.1 + 0.2}]
    path = tmp_path / "t.csv"
    write_csv(path, rows)
    with open(path, newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row == {"name": "x", "a": "inf", "b": "-inf", "c": "", "d": "inf", "e": repr(0.1 + 0.2)}
    back = pd.read_csv(path)
    assert back["a"][0] == np.inf and back["b"][0] == -np.inf and np.isnan(back["c"][0]) and back["d"][0] == np.inf
    assert back["e"][0] == 0.1 + 0.2
    # as a Result's CSV spells them
    res = tmp_path / "r.csv"
    Result("x", model="m", values={"pi_ratio": float("inf"), "neg": -np.inf}).to_csv(res)
    assert [r["value"] for r in csv.DictReader(open(res, newline=""))] == ["inf", "-inf"]


def test_csv_readers_read_an_infinite_cell(tmp_path):
    """The readers of write_csv's files: the study report reads 'inf' as not finite (as ''), train-grid
    keeps it as text."""
    from embedscope.study.report import _float
    from embedscope.tables import write_csv
    from embedscope.train.grid import read_grid_csv

    path = tmp_path / "grid.csv"
    write_csv(path, [{"run": "a", "loss": float("inf")}, {"run": "b", "loss": 0.5}])
    rows = read_grid_csv(path)
    assert [r["loss"] for r in rows] == ["inf", "0.5"]
    assert _float(rows[0]["loss"]) is None and _float("") is None and _float(rows[1]["loss"]) == 0.5
