"""Five small command-line defects of a docs audit, each pinned: properties writes one file's JSON in
the one-model layout and says what it wrote; "wrote" lines name normal paths; neighbours reads its
paths file as saliency does (# comments); train-grid checks its seeds as train --seed; import
--split-by-class says that it replaced the source's own split column."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from embedscope import store
from embedscope.cli import main


def _props_file(path, seed=0, n=90):
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 3
    enc = rng.integers(0, 3, n)
    X = rng.normal(size=(n, 5)).astype(np.float32)
    X[:, 0] += 4 * enc
    es = store.EmbeddingSet(embeddings=X, labels=labels, paths=[f"img/{i}.png" for i in range(n)],
                            split=["test"] * n, class_names=["a", "b", "c"], properties={"enc": enc})
    store.save(path, es)
    return path, X, enc


# ----------------------------------------------------------------------------- 1. properties outputs
def test_properties_one_file_json_has_the_one_model_layout_and_wrote_lines(tmp_path, capsys):
    from embedscope.metrics import property_precision

    a, X, enc = _props_file(tmp_path / "a.h5")
    js, cs, pq = tmp_path / "p.json", tmp_path / "p.csv", tmp_path / "p.parquet"
    assert main(["properties", str(a), "--json", str(js), "--csv", str(cs), "--parquet", str(pq),
                 "-o", str(tmp_path / "p.png"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(js.read_text())
    # the layout of one file whichever command wrote it (docs/architecture.md): as geometry's
    assert set(doc) == {"analysis", "model", "values", "provenance", "table"} and "models" not in doc
    assert doc["analysis"] == "properties" and doc["model"] == "a"
    want = property_precision(X, {"enc": enc})["enc"]["NR-Prec"]
    assert doc["values"]["NR-Prec[enc]"] == pytest.approx(want, rel=1e-12)
    assert {r["property"] for r in doc["table"]} == {"enc", "class"}
    # one "wrote" line naming every file, as the other commands print it
    wrote = [ln for ln in out.splitlines() if ln.startswith("wrote ")]
    assert wrote == [f"wrote {tmp_path / 'p.png'}, {tmp_path / 'p.pdf'}, {js}, {cs}, {pq}"]
    # the CSV keeps its documented columns (one row per model and property); the Parquet is the same table
    with open(cs) as fh:
        rows = list(csv.DictReader(fh))
    from embedscope.analyses.image_properties import ROW_FIELDS

    assert list(rows[0]) == list(ROW_FIELDS) and len(rows) == 2
    import pandas as pd

    frame = pd.read_parquet(pq)
    assert list(frame.columns) == list(ROW_FIELDS)
    assert frame["property"].tolist() == [r["property"] for r in rows]
    assert frame["NR-Prec"].tolist() == [float(r["NR-Prec"]) for r in rows]  # every digit (repr in the CSV)


def test_properties_several_files_keep_the_models_layout_and_outputs_are_checked(tmp_path, capsys):
    a, _, _ = _props_file(tmp_path / "a.h5")
    b, _, _ = _props_file(tmp_path / "b.h5", seed=1)
    js = tmp_path / "two.json"
    assert main(["properties", str(a), str(b), "--json", str(js), "--no-progress"]) == 0
    doc = json.loads(js.read_text())
    assert set(doc) == {"analysis", "models"} and [m["model"] for m in doc["models"]] == ["a", "b"]
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {js}"
    # the shared checks before any work: one name twice, an input named as an output
    assert main(["properties", str(a), "--json", str(tmp_path / "x"), "--csv", str(tmp_path / "x"),
                 "--no-progress"]) == 2
    assert main(["properties", str(a), "--csv", str(a), "--force", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "two outputs name the same file" in err and "is an input file" in err
    assert not (tmp_path / "x").exists() and store.load(a).n == 90


# ----------------------------------------------------------------------------- 2. normal paths printed
def test_train_grid_and_study_print_normal_paths(tmp_path, capsys, monkeypatch):
    import embedscope.study.run as study_run
    import embedscope.train.grid as grid

    monkeypatch.setattr(grid, "train_grid", lambda *a, **k: [])
    out = tmp_path / "runs"
    assert main(["train-grid", "--losses", "margin", "-o", f"{out}/", "--no-progress"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {out / 'grid.csv'}"
    assert main(["train-grid", "--losses", "margin", "-o", f"{out}//", "--no-progress"]) == 0
    assert "//" not in capsys.readouterr().out

    stats = {"correlations": [], "ranking": [], "n_points": {"runs": 0, "objectives": 0}, "target": "R@1",
             "untrained": {"selected_no_better": []}, "figures": []}
    monkeypatch.setattr(study_run, "run_study", lambda *a, **k: {"stats": stats, "errors": [], "rows": []})
    src = tmp_path / "ckpts"
    src.mkdir()
    assert main(["study", str(src), "-o", f"{tmp_path / 'st'}/", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "//" not in text and f"wrote {tmp_path / 'st' / 'runs.csv'}, runs.parquet" in text


# ----------------------------------------------------------------------------- 3. neighbours --paths-file
def test_neighbours_paths_file_skips_comment_lines_as_saliency(tmp_path, capsys):
    from PIL import Image

    n = 24
    rng = np.random.default_rng(0)
    y = np.arange(n) % 4
    root = tmp_path / "data"
    paths = [f"c{i % 4}/img{i}.png" for i in range(n)]
    paths[5] = "c1/img#5.png"  # a # inside a path is part of it
    for p in paths:
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (16, 12), (40 * (int(p[1]) + 1), 90, 30)).save(root / p)
    es = store.EmbeddingSet.from_arrays(rng.normal(size=(n, 6)).astype(np.float32), y, paths=paths,
                                        attrs={"dataset": "imagefolder", "root": str(root)})
    f = store.save(tmp_path / "e.h5", es)
    pf = tmp_path / "q.txt"
    pf.write_text("# queries for the figure\n\nc3/img3.png\n  c1/img#5.png  \n  # indented comment\n")
    assert main(["neighbours", str(f), "--paths-file", str(pf), "--n-retrievals", "2",
                 "-o", str(tmp_path / "g.png")]) == 0
    assert "2 queries, top-2" in capsys.readouterr().out
    from embedscope.analyses import neighbours_figure

    _, _, ex = neighbours_figure(f, tmp_path / "h.png", paths_file=pf, k=2)
    assert list(ex.query_paths) == ["c3/img3.png", "c1/img#5.png"]
    # the same reader as saliency's: the same paths, and the same one-line error for a file of comments only
    from embedscope.fileio import read_paths_file

    assert read_paths_file(pf) == ["c3/img3.png", "c1/img#5.png"]
    only = tmp_path / "none.txt"
    only.write_text("# nothing yet\n\n")
    assert main(["neighbours", str(f), "--paths-file", str(only), "-o", str(tmp_path / "i.png")]) == 1
    assert "lists no path" in capsys.readouterr().err


def test_neighbours_help_says_how_the_paths_file_is_read(capsys):
    with pytest.raises(SystemExit):
        main(["neighbours", "--help"])
    assert "starts with # is a comment" in " ".join(capsys.readouterr().out.split())


def test_neighbours_docs_say_how_the_paths_file_is_read():
    from pathlib import Path

    text = " ".join((Path(__file__).parents[1] / "docs" / "visualizations.md").read_text().split())
    section = text[text.index("## Queries and their nearest retrievals (`neighbours`)"):]
    assert "a line that starts with `#` is a comment" in section[:1500]


# ----------------------------------------------------------------------------- 4. train-grid seeds
@pytest.mark.parametrize("seed", ["4294967296", "-1", "1.5"])
def test_train_grid_refuses_the_seeds_train_refuses(tmp_path, capsys, monkeypatch, seed):
    import embedscope.train.grid as grid

    calls = []
    monkeypatch.setattr(grid, "train_grid", lambda *a, **k: calls.append(1) or [])
    with pytest.raises(SystemExit) as e:
        main(["train-grid", "--losses", "margin", "--seeds", "0", seed, "-o", str(tmp_path / "r")])
    assert e.value.code == 2 and "--seeds" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # train --seed: the same check
        main(["train", "--seed", seed, "-o", str(tmp_path / "c.pt")])
    assert e.value.code == 2
    assert calls == [] and not (tmp_path / "r").exists()
    assert main(["train-grid", "--losses", "margin", "--seeds", "0", str(2**32 - 1), "-o", str(tmp_path / "r"),
                 "--no-progress"]) == 0
    assert calls == [1]


# ----------------------------------------------------------------------------- 5. import --split-by-class
def test_import_split_by_class_replaces_the_source_split_and_says_so(tmp_path, capsys):
    import warnings

    from embedscope.importers import SplitReplaced, import_embeddings

    rng = np.random.default_rng(3)
    y = np.arange(40) % 4
    src = tmp_path / "a.npz"  # a split column of its own, with a value no split has: it is not read
    np.savez(src, X=rng.normal(size=(40, 3)).astype(np.float32), labels=y, split=np.array(["val", "oops"] * 20))
    out = tmp_path / "a.h5"
    assert main(["import", str(src), "--split-by-class", "0.5", "-o", str(out)]) == 0
    cap = capsys.readouterr()
    assert cap.out.strip() == f"wrote {out}"
    note = cap.err.strip().splitlines()
    assert len(note) == 1 and note[0].startswith("embedscope import: note: ")
    assert "'split' column was replaced by --split-by-class 0.5" in note[0]
    es = store.load(out)
    assert es.split.tolist() == np.where(y < 2, "train", "test").tolist()  # the flag wins
    assert es.attrs["split_source"] == ("split-by-class 0.5: first 2 of 4 classes (sorted) train; "
                                        "replaced the source's 'split' column")
    # a split from a file replaces it too, and says where the split came from
    (tmp_path / "sp.txt").write_text("\n".join(["train", "test"] * 20) + "\n")
    assert main(["import", str(src), "--split", str(tmp_path / "sp.txt"), "-o", str(tmp_path / "b.h5")]) == 0
    assert "replaced by --split" in capsys.readouterr().err
    assert store.load(tmp_path / "b.h5").attrs["split_source"].startswith(f"from the file {tmp_path / 'sp.txt'}")
    # no note where nothing was replaced; Python callers get a warning they can filter
    np.savez(tmp_path / "c.npz", X=rng.normal(size=(40, 3)).astype(np.float32), labels=y)
    assert main(["import", str(tmp_path / "c.npz"), "--split-by-class", "0.5", "-o", str(tmp_path / "c.h5")]) == 0
    assert capsys.readouterr().err == ""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import_embeddings(src, split_by_class=0.5)
    assert [w.category for w in caught] == [SplitReplaced]


def test_import_docs_say_the_flag_replaces_the_source_split():
    from pathlib import Path

    text = " ".join((Path(__file__).parents[1] / "docs" / "import.md").read_text().split())
    assert "replaces a `split` key/column of the source" in text
