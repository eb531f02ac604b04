"""Audit 36 (a helper's audit of the outputs): figure names with inner dots, --parquet's suffix, the
study's boolean column in Parquet, a file name with an undecodable byte in tables, the properties
table's max_r type, and print(result)'s notes: each against the rule it broke (one layout for every
format, the names the command says it wrote, the lines the command prints)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_run import run_cli as cli_output


# ------------------------------------------------------------------ figure names with inner dots
def test_figure_name_keeps_its_inner_dots(tmp_path):
    from embedscope.viz.figures import figure_paths

    for given in ("scatter_p0.3.png", "scatter_p0.3.pdf", "scatter_p0.3.PNG"):
        png, pdf = figure_paths(tmp_path / given)
        assert (png.name, pdf.name) == ("scatter_p0.3.png", "scatter_p0.3.pdf")
    png, pdf = figure_paths(tmp_path / "run.p0.3.png")
    assert (png.name, pdf.name) == ("run.p0.3.png", "run.p0.3.pdf")
    assert figure_paths(tmp_path / "plain")[0].name == "plain.png"


@pytest.fixture(scope="module")
def small_h5(tmp_path_factory):
    d = tmp_path_factory.mktemp("a36")
    rng = np.random.default_rng(3)
    npz = d / "small.npz"
    y = np.repeat(np.arange(4), 10)
    np.savez(npz, embeddings=(rng.normal(size=(40, 6)) + y[:, None]).astype(np.float32), labels=y)
    out = d / "s.h5"
    rc, _, err = cli_output(["import", str(npz), "-o", str(out)])
    assert rc == 0, err
    return out


def test_scatter_figure_name_with_dots_writes_what_it_says(small_h5, tmp_path):
    rc, out, err = cli_output(["scatter", str(small_h5), "-o", str(tmp_path / "run.p0.3.png"), "--no-progress"])
    assert rc == 0, err
    names = sorted(p.name for p in tmp_path.iterdir())
    assert {"run.p0.3.png", "run.p0.3.pdf", "run.p0.3.csv"} <= set(names), names
    for said in ("run.p0.3.png", "run.p0.3.pdf"):
        assert said in out


def test_parquet_option_refuses_another_formats_suffix(small_h5, tmp_path):
    for bad in ("points.csv", "other.h5"):
        rc, _, err = cli_output(["scatter", str(small_h5), "-o", str(tmp_path / "s.png"), "--parquet",
                                 str(tmp_path / bad), "--no-progress"])
        assert rc == 2 and "--parquet" in err and "Parquet" in err, err
        assert not (tmp_path / bad).exists() and not (tmp_path / "s.png").exists()


# ------------------------------------------------------------------ study: a nullable boolean column
def test_study_parquet_keeps_beats_untrained_boolean(tmp_path):
    import pyarrow.parquet as pq

    from embedscope.study.run import finish_study

    rng = np.random.default_rng(0)
    rows = []
    for loss in ("margin", "triplet", "contrastive"):
        for s in (0, 1):
            rows.append({"id": f"{loss}_s{s}", "run": f"{loss}_s{s}", "selection": "best", "status": "ok",
                         "untrained": "untrained_s0", "loss": loss, "seed": s, "epoch": 2,
                         "R@1": 0.5 + (0.1 if s else -0.1) + float(rng.uniform(0, 0.05)),
                         "rho": float(rng.uniform(0.2, 0.9))})
    rows.append({"id": "untrained_s0", "run": "untrained_s0", "selection": "untrained", "status": "ok",
                 "untrained": "", "loss": "untrained", "seed": 0, "epoch": 0, "R@1": 0.5, "rho": 0.5})
    finish_study(tmp_path, rows, n_boot=0, seed=1, figures=False)
    t = pq.read_table(tmp_path / "runs.parquet")
    assert str(t.schema.field("beats_untrained").type) == "bool"
    got = dict(zip(t.column("id").to_pylist(), t.column("beats_untrained").to_pylist()))
    assert got == {**{f"{loss}_s{s}": bool(s) for loss in ("margin", "triplet", "contrastive") for s in (0, 1)},
                   "untrained_s0": None}


# ------------------------------------------------------------------ a file name with an undecodable byte
def test_tables_of_a_file_with_an_undecodable_name(small_h5, tmp_path):
    import os

    import pandas as pd

    from embedscope.analyses import geometry

    odd = os.fsdecode(os.fsencode(str(tmp_path)) + b"/m\xff.h5")
    Path(odd).write_bytes(small_h5.read_bytes())
    r = geometry(odd, split="test")
    assert r.model == "m\\xff"
    assert r.to_frame()["model"].tolist()[0] == "m\\xff"
    rc, _, err = cli_output(["evaluate", odd, "--csv", str(tmp_path / "e.csv"), "--json", str(tmp_path / "e.json"),
                             "--no-progress"])
    assert rc == 0, err
    assert pd.read_csv(tmp_path / "e.csv")["model"].iloc[0] == "m\\xff"
    js = (tmp_path / "e.json").read_bytes()
    js.decode("utf-8")  # strict UTF-8, no lone surrogate
    assert json.loads(js)["model"] == "m\\xff"


# ------------------------------------------------------------------ properties: max_r an integer column
def test_properties_parquet_max_r_is_an_integer_column_with_or_without_a_cap(small_h5, tmp_path):
    import pyarrow.parquet as pq

    from embedscope.analyses import properties

    for extra, want in (([], [None]), (["--max-r", "3"], [3])):
        out = tmp_path / f"p{len(extra)}.parquet"
        rc, _, err = cli_output(["properties", str(small_h5), "--parquet", str(out), "--no-progress", *extra])
        assert rc == 0, err
        t = pq.read_table(out)
        assert str(t.schema.field("max_r").type) == "int64"
        assert t.column("max_r").to_pylist()[:1] == want
    api = tmp_path / "api.parquet"
    properties(str(small_h5)).to_parquet(api, table=True)
    assert str(pq.read_table(api).schema.field("max_r").type) == "int64"


# ------------------------------------------------------------------ print(result): the command's notes
def test_print_result_has_the_lines_the_command_prints(small_h5, tmp_path):
    from embedscope.analyses import evaluate_many, geometry

    rc, out, err = cli_output(["geometry", str(small_h5), "--split", "test"])
    assert rc == 0, err
    api = str(geometry(str(small_h5), split="test")).splitlines()
    assert [line for line in out.splitlines() if line.startswith("uniformity from")]
    assert [line for line in out.splitlines() if line not in api] == []
    # several files, one of them too small for R@8: the note saying why its cell is empty
    tiny = tmp_path / "tiny.npz"
    np.savez(tiny, embeddings=np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32),
             labels=np.array([0, 0, 1, 1, 2, 2]))
    rc, _, err = cli_output(["import", str(tiny), "-o", str(tmp_path / "tiny.h5")])
    assert rc == 0, err
    files = [str(small_h5), str(tmp_path / "tiny.h5")]
    rc, out, err = cli_output(["evaluate", *files, "--no-progress"])
    assert rc == 0, err
    note = [line for line in out.splitlines() if "no R@8" in line]
    assert note and note[0] in str(evaluate_many(files)).splitlines()


def test_a_dash_is_not_taken_for_a_file_named_dash(small_h5, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # (since audit 45 a lone `--json -` / `--csv -` writes that table to standard output: test_audit45_views)
    for args in (["evaluate", str(small_h5), "--parquet", "-"], ["geometry", str(small_h5), "--csv", "-", "--json", "-"],
                 ["scatter", str(small_h5), "-o", "-"]):
        rc, out, err = cli_output(args)
        assert rc == 2 and "standard output" in err, (args, err)
    assert not (tmp_path / "-").exists()


def test_neighbours_of_absolute_image_paths_needs_no_root(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    paths = []
    for i in range(12):
        p = tmp_path / "img" / f"{i}.png"
        p.parent.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(p)
        paths.append(str(p))
    y = np.repeat(np.arange(3), 4)
    np.savez(tmp_path / "abs.npz", embeddings=(rng.normal(size=(12, 4)) + y[:, None]).astype(np.float32),
             labels=y, paths=np.array(paths))
    rc, _, err = cli_output(["import", str(tmp_path / "abs.npz"), "-o", str(tmp_path / "abs.h5")])
    assert rc == 0, err
    rc, out, err = cli_output(["neighbours", str(tmp_path / "abs.h5"), "--queries", "2", "-o",
                               str(tmp_path / "nb.png"), "--no-progress"])
    assert rc == 0, err
    assert (tmp_path / "nb.png").exists()


def test_models_side_by_side_on_different_images_are_said_so(tmp_path):
    rng = np.random.default_rng(2)
    y = np.repeat(np.arange(4), 5)
    for name, shift in (("a", 0), ("b", 3)):  # b's test rows are other images (paths) than a's
        paths = np.array([f"img/{i + shift}.jpg" for i in range(20)])
        np.savez(tmp_path / f"{name}.npz", embeddings=(rng.normal(size=(20, 5)) + y[:, None]).astype(np.float32),
                 labels=y, paths=paths)
        rc, _, err = cli_output(["import", str(tmp_path / f"{name}.npz"), "-o", str(tmp_path / f"{name}.h5")])
        assert rc == 0, err
    files = [str(tmp_path / "a.h5"), str(tmp_path / "b.h5")]
    for cmd in (["evaluate", *files, "--no-progress"], ["spectrum", *files, "--split", "test"]):
        rc, out, err = cli_output(cmd)
        assert rc == 0, err
        notes = [line for line in out.splitlines() if "other images than a's" in line]
        assert len(notes) == 1 and notes[0].startswith("note: b: "), out
    rc, out, err = cli_output(["evaluate", files[0], files[0].replace("a.h5", "a.h5"), "--names", "x", "y",
                               "--no-progress"])
    assert rc == 0 and "other images" not in out  # the same images: no note


def test_every_property_that_groups_as_the_classes_is_named():
    from embedscope.analyses import properties
    from embedscope.store import EmbeddingSet

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 6)
    es = EmbeddingSet.from_arrays(rng.normal(size=(18, 4)).astype(np.float32), y, split="test",
                                  properties={"make": np.array(["a", "b", "c"])[y], "body": y + 10,
                                              "colour": rng.integers(0, 2, 18)})
    notes = properties([es]).note_lines()
    said = [n for n in notes if "group the images exactly as the class labels" in n]
    assert len(said) == 1 and "'make', 'body'" in said[0], notes
