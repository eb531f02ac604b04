"""Audit 42: long names and values read from a file, shown on a terminal.

A file made by another tool can name a property (a dataset, an attribute, a class) with 70,000 characters;
our importers refuse such names, but the commands that read a file show what is in it:

* ``info`` printed such a property name whole, in the table and its rule (140 KB of output), and every other
  string of the file (dataset and attribute names, provenance values, paths) as long as it was: each is
  shortened in the middle (``head…tail``), two property names never shown alike;
* ``properties``' notes (a property that is the class, one of several values per image) and its error lines
  (the file's property names listed) named the names whole;
* ``evaluate --per-class``'s table of the worst classes showed a class name whole.
"""

from __future__ import annotations

import h5py
import numpy as np
from cli_run import one_error_line, run_cli

from embedscope import store

N = 6
PATHS = [f"img/{i}.jpg" for i in range(N)]
LONG = 70_000
ATTR = 10_000  # (an HDF5 attribute, name and value, is at most 64 KB)
MOST_LINE = 1500  # (a readable line: the widest cell info prints is 1,200 characters)


def _h5(path, *, attrs=None, class_names=("a", "b", "c"), paths=PATHS):
    es = store.EmbeddingSet(embeddings=np.random.default_rng(0).normal(size=(N, 3)).astype(np.float32),
                            labels=np.array([0, 0, 1, 1, 2, 2]), paths=list(paths), split=["test"] * N,
                            class_names=list(class_names), properties={"old": np.arange(N)})
    store.save(path, es, attrs=attrs)
    return path


def _widest(out: str) -> int:
    return max(len(line) for line in out.splitlines())


# ----------------------------------------------------------------------------- 1. info


def test_info_shortens_another_tools_long_property_names(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    long_a, long_b = "w" * LONG + "a", "w" * LONG + "b"
    with h5py.File(h5, "r+") as f:  # (add-properties refuses such names; another tool wrote them)
        f["properties"].create_dataset(long_a, data=np.arange(N))
        f["properties"].create_dataset(long_b, data=np.arange(N))
    rc, out, err = run_cli(["info", h5])
    assert rc == 0, err
    assert _widest(out) < MOST_LINE  # (was 140,030: the row and the table's rule)
    row = next(line for line in out.splitlines() if line.startswith("properties "))
    names = row.split(None, 1)[1].split(", ")
    assert names[0] == "old" and len(names) == 3 and names[1] != names[2]  # two names, shown apart
    assert all("…" in n and len(n) <= 100 for n in names[1:]) and names[1].endswith("a") and names[2].endswith("b")


def test_info_names_the_count_of_many_long_properties(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    with h5py.File(h5, "r+") as f:
        for i in range(20):
            f["properties"].create_dataset(f"{i:02d}" + "w" * LONG, data=np.arange(N))
    rc, out, err = run_cli(["info", h5])
    assert rc == 0, err
    assert _widest(out) < MOST_LINE
    row = next(line for line in out.splitlines() if line.startswith("properties "))
    assert row.endswith(", ..., old (21 properties)") and row.count("…") == 10  # each shown shortened


def test_info_shortens_long_strings_of_the_file(tmp_path):
    long_path = "d" * LONG + "/img.jpg"
    h5 = _h5(tmp_path / "e.h5", paths=[long_path, long_path, *PATHS[2:]],
             attrs={"dataset": "x" * ATTR, "root": "/data/" + "r" * ATTR + "/end",
                    "import_embedding_columns": ["c" * 2000 + str(i) for i in range(10)],
                    "checkpoint_config": {"arch": "a" * ATTR, "seed": 3},
                    "k" * ATTR: "v" * ATTR})
    with h5py.File(h5, "r+") as f:
        g = f.create_group("g" * LONG)
        g.create_dataset("t" * LONG, data=np.zeros(2))
        g.attrs["n" * ATTR] = "m" * ATTR
        f["soft"] = h5py.SoftLink("/" + "s" * LONG)
        f.create_dataset("compound", data=np.zeros(2, dtype=[("f" * ATTR, "f4")]))
        f["embeddings"][0, 0] = np.nan  # (the non-finite row names its path)
    rc, out, err = run_cli(["info", h5])
    assert rc == 0, err
    assert _widest(out) < MOST_LINE
    lines = out.splitlines()
    field = {}
    for line in lines[2:]:
        k, _, v = line.partition("  ")
        field.setdefault(k.strip(), []).append(v.strip())
    assert field["root"][0].startswith("/data/rrr") and field["root"][0].endswith("rrr/end")
    assert field["repeated paths"][0].endswith("/img.jpg)")
    assert "/img.jpg; every analysis" in field["non-finite rows"][0]
    assert field["import_embedding_columns"][0].count("…") == 5  # 4, ..., the last: each name shortened
    assert field["model"][0].endswith("seed=3")
    assert any(v.startswith("/ggg") and v.endswith("ttt: 2 float64") for v in field["other dataset"])
    assert any(v.startswith("/compound: 2 [('fff") and "…" in v for v in field["other dataset"])
    assert any("a link to /sss" in v for v in field["other dataset"])
    assert any(v.startswith("kkk") and v.endswith("vvv...") for v in field["other attribute"])


def test_info_shortens_a_maps_files_long_attributes(tmp_path):
    from embedscope.store.saliency import SaliencyMaps, save_maps

    sm = SaliencyMaps(maps=np.random.default_rng(0).random((5, 4, 4)).astype(np.float32),
                      paths=[f"img/{i}.png" for i in range(5)], labels=np.zeros(5, np.int64), class_names=["a"],
                      attrs={"name": "n" * ATTR, "family": "ranking", "order": "paper", "n_samples": 50,
                             "noise": 0.15, "transform": "t" * ATTR, "checkpoint_config": {"arch": "a" * ATTR}})
    save_maps(tmp_path / "m.h5", sm)
    rc, out, err = run_cli(["info", tmp_path / "m.h5"])
    assert rc == 0, err
    assert _widest(out) < MOST_LINE  # (was 10,000 and more)
    assert "saliency maps of 5 images" in out and out.count("…") == 3


# ----------------------------------------------------------------------------- 2. properties' notes and errors


def _long_props(h5, **props):
    with h5py.File(h5, "r+") as f:  # (add-properties refuses such names; another tool wrote them)
        for k, v in props.items():
            f["properties"].create_dataset(k * LONG, data=v)
    return h5


def test_properties_notes_shorten_long_names(tmp_path):
    h5 = _long_props(_h5(tmp_path / "e.h5"), t=np.array([5, 5, 6, 6, 7, 7]), s=np.zeros((N, 2)))
    rc, out, err = run_cli(["properties", h5, "--no-progress", "--json", tmp_path / "p.json"])
    assert rc == 0, err
    assert _widest(out) < 300  # (the notes were 70,000 characters and more)
    lines = out.splitlines()
    twin = next(line for line in lines if "groups the images exactly as the class labels" in line)
    several = next(line for line in lines if "holds several values per image: not measured" in line)
    assert twin.startswith("property 'ttt") and "…" in twin
    assert several.startswith("property 'sss") and "…" in several
    import json

    table = json.loads((tmp_path / "p.json").read_text())["table"]
    assert "t" * LONG in {r["property"] for r in table}  # (the JSON keeps the name whole)


def test_properties_errors_shorten_long_names(tmp_path):
    h5 = _long_props(_h5(tmp_path / "e.h5"), f=np.array([0.0, 1, np.nan, 1, 0, 1]))
    rc, out, err = run_cli(["properties", h5, "--no-progress"])
    line = one_error_line(err, "properties")
    assert rc == 1 and len(line) < 400 and "property 'fff" in line and "holds NaN or inf" in line
    rc, out, err = run_cli(["properties", h5, "--no-progress", "--properties", "old,zzz"])
    line = one_error_line(err, "properties")
    assert rc == 1 and len(line) < 400 and "no property 'zzz' (the file has: class, fff" in line


def test_properties_error_lists_at_most_twelve_names(tmp_path):
    h5 = _h5(tmp_path / "e.h5")
    with h5py.File(h5, "r+") as f:
        for i in range(30):
            f["properties"].create_dataset(f"p{i:02d}" + "w" * 1000, data=np.arange(N))
    rc, out, err = run_cli(["properties", h5, "--no-progress", "--properties", "zzz"])
    line = one_error_line(err, "properties")
    assert rc == 1 and len(line) < 1500 and line.endswith(" and 20 more)") and line.count("…") == 10  # class, old, 10 of 30


def test_properties_error_of_several_values_shortens_the_name(tmp_path):
    h5 = _long_props(_h5(tmp_path / "e.h5"), s=np.zeros((N, 2)))
    rc, out, err = run_cli(["properties", h5, "--no-progress", "--properties", "s" * LONG])
    line = one_error_line(err, "properties")
    assert rc == 1 and len(line) < 400 and "holds several values per image (shape (6, 2))" in line


# ----------------------------------------------------------------------------- 3. class names


def test_evaluate_per_class_shortens_long_class_names(tmp_path):
    import pandas as pd

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(3), 4)
    names = ["a" * 10_000 + "1", "a" * 10_000 + "2", "c"]  # (alike at both ends but for one letter)
    es = store.EmbeddingSet(embeddings=(rng.normal(size=(12, 4)) + labels[:, None]).astype(np.float32),
                            labels=labels, paths=[f"img/{i}.jpg" for i in range(12)], split=["test"] * 12,
                            class_names=names)
    store.save(tmp_path / "c.h5", es)
    rc, out, err = run_cli(["evaluate", tmp_path / "c.h5", "--no-progress", "--per-class", tmp_path / "pc.csv"])
    assert rc == 0, err
    assert _widest(out) < 200  # (was 10,034)
    shown = [line.split()[0] for line in out.splitlines() if line.startswith("aaa")]
    assert len(shown) == 2 and shown[0] != shown[1] and all("…" in s for s in shown)
    assert set(names) <= set(pd.read_csv(tmp_path / "pc.csv", keep_default_na=False)["class"])  # kept whole


def test_the_note_of_files_of_other_images_shortens_a_long_path(tmp_path):
    a = _h5(tmp_path / "a.h5")
    b = _h5(tmp_path / "b.h5", paths=["d" * LONG + "/x.jpg", *PATHS[1:]])
    rc, out, err = run_cli(["properties", a, b, "--no-progress"])
    assert rc == 0, err
    note = next(line for line in out.splitlines() if "holds other images than" in line)
    assert len(note) < 500 and "…" in note and "/x.jpg)" in note  # (was 70,000 characters and more)
