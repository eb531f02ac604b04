"""Audit 41 (tables): the files a command writes hold the same rows, whatever the format.

1. saliency-agreement --json: the per-image values of every model pair, as --per-image-csv has them
   (keyed "<a> vs <b>", two pairs of names that read alike -- "a vs b" with "c", "a" with "b vs c" --
   were one key: the JSON held 5 pairs of 6, one under the other's name); each entry names its pair
   (model_a, model_b), and the keys of names that read alike are quoted.
2. study runs.parquet: an empty text cell is null, as in every other column of the table and as
   read_csv reads runs.csv (error, undefined, undefined_why held '' where train_classes, weights, root
   held null: read_parquet and read_csv of the same rows differed).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from cli_run import run_cli


def _maps_file(path, maps, *, name):
    from embedscope.store.saliency import SaliencyMaps, save_maps

    n = len(maps)
    sm = SaliencyMaps(maps=maps, paths=[f"digits/{i:04d}" for i in range(n)], labels=np.arange(n) % 3,
                      class_names=["a", "b", "c"],
                      attrs={"name": name, "family": "ranking", "n_samples": 50, "noise": 0.15,
                             "order": "paper", "dataset": "digits", "root": "", "input_size": 8})
    save_maps(path, sm)
    return path


# ---------------------------------------------------------------- 1. saliency-agreement's per-image JSON
def test_saliency_agreement_json_holds_every_pairs_per_image_values_as_the_csv(tmp_path):
    rng = np.random.default_rng(0)
    files = [_maps_file(tmp_path / f"m{k}.h5", rng.random((5, 8, 8)).astype(np.float32), name=f"m{k}")
             for k in range(4)]
    names = ["a", "b vs c", "a vs b", "c"]  # pairs (a, b vs c) and (a vs b, c) read alike as "x vs y"
    js, pi = tmp_path / "agree.json", tmp_path / "per_image.csv"
    rc, out, err = run_cli(["saliency-agreement", *files, "--names", *names, "--json", js, "--per-image-csv", pi])
    assert rc == 0, err
    doc = json.loads(js.read_text())
    csv = pd.read_csv(pi, keep_default_na=False)
    assert len(doc["pairs"]) == 6
    assert len(doc["per_image"]) == 6  # one entry per pair (5: one pair lost)
    assert '"a" vs "b vs c"' in doc["per_image"] and '"a vs b" vs "c"' in doc["per_image"]
    per_image = list(doc["per_image"].values())
    assert [(p["model_a"], p["model_b"]) for p in per_image] == [(p["model_a"], p["model_b"]) for p in doc["pairs"]]
    rows = [{"model_a": p["model_a"], "model_b": p["model_b"], "path": path, "pearson": r, "jsd": j}
            for p in per_image for path, r, j in zip(doc["paths"], p["pearson"], p["jsd"])]
    from_json = pd.DataFrame(rows, columns=list(csv.columns))
    pd.testing.assert_frame_equal(from_json, csv, check_dtype=False)
    # the values of the pair whose name was taken are its own (the CSV's), to the last bit
    mine = csv[(csv.model_a == "a") & (csv.model_b == "b vs c")]
    entry = next(p for p in per_image if (p["model_a"], p["model_b"]) == ("a", "b vs c"))
    assert entry["pearson"] == mine["pearson"].tolist() and entry["jsd"] == mine["jsd"].tolist()


def test_saliency_agreement_json_keys_stay_plain_where_no_two_read_alike(tmp_path):
    rng = np.random.default_rng(1)
    files = [_maps_file(tmp_path / f"m{k}.h5", rng.random((4, 8, 8)).astype(np.float32), name=f"m{k}")
             for k in range(3)]
    js = tmp_path / "agree.json"
    rc, out, err = run_cli(["saliency-agreement", *files, "--json", js])
    assert rc == 0, err
    doc = json.loads(js.read_text())
    assert list(doc["per_image"]) == ["m0 vs m1", "m0 vs m2", "m1 vs m2"]
    assert [(v["model_a"], v["model_b"]) for v in doc["per_image"].values()] == [("m0", "m1"), ("m0", "m2"), ("m1", "m2")]


# ---------------------------------------------------------------- 2. study: runs.csv and runs.parquet alike
def test_study_runs_parquet_reads_back_as_runs_csv(tmp_path):
    from embedscope.study.run import finish_study

    rng = np.random.default_rng(0)
    rows = []
    for loss in ("margin", "triplet", "contrastive"):
        for s in (0, 1):
            rows.append({"id": f"{loss}_s{s}", "run": f"{loss}_s{s}", "selection": "best", "status": "ok", "error": "",
                         "untrained": "untrained_s0", "loss": loss, "seed": s, "epoch": 2, "weights": None,
                         "R@1": 0.5 + (0.1 if s else -0.1) + float(rng.uniform(0, 0.05)),
                         "rho": float(rng.uniform(0.2, 0.9))})
    rows.append({"id": "untrained_s0", "run": "untrained_s0", "selection": "untrained", "status": "ok", "error": "",
                 "untrained": "", "loss": "untrained", "seed": 0, "epoch": 0, "weights": None, "R@1": 0.5, "rho": 0.5})
    finish_study(tmp_path, rows, n_boot=0, seed=1, figures=False)
    c = pd.read_csv(tmp_path / "runs.csv")
    p = pd.read_parquet(tmp_path / "runs.parquet")
    assert list(c.columns) == list(p.columns)
    for col in ("error", "untrained", "weights"):  # '' in error and untrained, null in weights
        assert p[col].isna().tolist() == c[col].isna().tolist(), col
    assert p["error"].isna().all() and p["untrained"].isna().tolist() == [False] * 6 + [True]
    pd.testing.assert_frame_equal(c.astype(object).where(c.notna(), None), p.astype(object).where(p.notna(), None),
                                  check_dtype=False)
