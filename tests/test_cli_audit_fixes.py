"""Fixes of the CLI audit (/tmp/audit1/REPORT.md findings 4, 5, 6, 8 and 10):

* train-grid checks an existing DIR/grid.csv before any training: a file it did not write is refused
  (one line, exit 1) unless --force, which replaces it; a train-grid table keeps being merged;
* every per-split command takes the same split choices (train, test, val, query, gallery, all),
  and neighbours --split all searches every row;
* neighbours caps its figure (MAX_QUERIES rows, MAX_RETRIEVALS retrievals) with a usage error
  before any work, and says when the split had fewer queries than asked;
* neighbours names the file's recorded image root (not a --root the user never gave) when it moved;
* neighbours --no-progress hides its progress output, as the other figure commands'.
"""

import csv

import numpy as np
import pytest

from embedscope import store
from embedscope.cli import build_parser, main
from embedscope.names import SPLIT_CHOICES

GRID = ["train-grid", "--dataset", "digits", "--losses", "margin", "--epochs", "1", "--eval-every", "1",
        "--embed-dim", "8", "--no-progress"]


def _no_training(monkeypatch):
    """Make any training an immediate test failure (the checks must come before it)."""
    import embedscope.train.trainer as trainer

    def refuse(*a, **k):
        raise AssertionError("a run was trained before the check")

    monkeypatch.setattr(trainer, "train", refuse)


# ------------------------------------------------------------------------------ 4. train-grid grid.csv
@pytest.mark.parametrize("text", ["my notes about these runs\n", "subject,score\nalice,1\nbob,2\n", "",
                                  "name,score\nalice,1\n"])
def test_train_grid_refuses_a_grid_csv_it_did_not_write_before_training(tmp_path, capsys, monkeypatch, text):
    _no_training(monkeypatch)
    out = tmp_path / "g"
    out.mkdir()
    (out / "grid.csv").write_text(text)
    assert main(GRID + ["-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "grid.csv exists and is not a train-grid table" in err and "move it or use --force" in err
    assert len(err.strip().splitlines()) == 1 and "KeyError" not in err and "Traceback" not in err
    assert (out / "grid.csv").read_text() == text  # kept as it was
    assert sorted(p.name for p in out.iterdir()) == ["grid.csv"]  # nothing trained


def test_train_grid_refuses_a_grid_csv_that_is_not_text(tmp_path, capsys, monkeypatch):
    _no_training(monkeypatch)
    out = tmp_path / "g"
    out.mkdir()
    (out / "grid.csv").write_bytes(b"\xff\xfe\x00binary")
    assert main(GRID + ["-o", str(out)]) == 1
    assert "is not a train-grid table" in capsys.readouterr().err
    assert (out / "grid.csv").read_bytes() == b"\xff\xfe\x00binary"


def test_train_grid_force_replaces_a_foreign_grid_csv(tmp_path, capsys):
    out = tmp_path / "g"
    out.mkdir()
    (out / "grid.csv").write_text("subject,score\nalice,1\n")
    assert main(GRID + ["-o", str(out), "--force"]) == 0
    text = capsys.readouterr().out
    assert "is not a train-grid table: --force replaces it" in text
    assert "merged with its earlier rows" not in text
    rows = list(csv.DictReader(open(out / "grid.csv")))
    assert [r["name"] for r in rows] == ["digits_margin_p0_s0"] and rows[0]["status"] == "trained"


def test_train_grid_keeps_merging_a_train_grid_table(tmp_path, capsys, monkeypatch):
    """A grid.csv with train-grid's columns (here an older one's, without embed_dim or MAP@R) is
    accepted: its rows are merged as before (a row whose checkpoint is gone is dropped, one line)."""
    from embedscope.train import grid

    out = tmp_path / "g"
    out.mkdir()
    (out / "grid.csv").write_text("name,loss,loss_family,p_switch,seed,status,epochs\n"
                                  "digits_triplet_p0_s0,triplet,ranking,0.0,0,trained,1\n")
    assert grid.grid_table_problem(out / "grid.csv") is None
    assert grid.check_grid_table(out) is False
    assert main(GRID + ["-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "dropped 1 earlier row(s) whose checkpoint is gone" in text
    assert "merged with its earlier rows" in text


def test_train_grid_python_api_checks_the_table_first(tmp_path, monkeypatch):
    from embedscope.errors import EmbedscopeError
    from embedscope.train.grid import train_grid

    _no_training(monkeypatch)
    (tmp_path / "grid.csv").write_text("my notes\n")
    with pytest.raises(EmbedscopeError, match="not a train-grid table"):
        train_grid("digits", ["margin"], [0.0], [0], tmp_path, options={"epochs": 1, "embed_dim": 8},
                   progress=False)


# ------------------------------------------------------------------------------------ 5. split choices
PER_SPLIT = {"geometry": "train", "spectrum": "train", "properties": "test", "yoke": "test", "neighbours": "test",
             "evaluate": "test", "scatter": "all", "tsne": None}


def test_every_per_split_command_takes_the_same_split_choices():
    sub = build_parser().command_parsers
    for cmd, default in PER_SPLIT.items():
        action = next(a for a in sub[cmd]._actions if "--split" in a.option_strings)
        assert tuple(action.choices) == SPLIT_CHOICES, cmd
        assert action.default == default, cmd  # each command keeps its default
    ref = next(a for a in sub["neighbours"]._actions if "--reference-split" in a.option_strings)
    assert tuple(ref.choices) == SPLIT_CHOICES


def _query_gallery(tmp_path, n=120):
    """docs/import.md's query/gallery example, as a file."""
    rng = np.random.default_rng(0)
    y = np.arange(n) // 2 % 12
    X = rng.normal(size=(n, 16)) + 2 * np.eye(16)[y]
    es = store.EmbeddingSet.from_arrays(X.astype(np.float32), y, split=np.array(["query", "gallery"] * (n // 2)))
    return store.save(tmp_path / "run.h5", es)


@pytest.mark.parametrize("argv", [["geometry", "--split", "gallery"], ["geometry", "--split", "query"],
                                  ["spectrum", "--split", "gallery"], ["properties", "--split", "gallery",
                                                                       "--no-progress"]])
def test_query_gallery_files_are_analysed_per_split(tmp_path, capsys, argv):
    f = _query_gallery(tmp_path)
    assert main([argv[0], str(f), *argv[1:]]) == 0
    out = capsys.readouterr().out
    assert ("split " + argv[2]) in out or f"[{argv[2]}]" in out


def test_yoke_of_a_gallery_split(tmp_path, capsys):
    f = _query_gallery(tmp_path)
    assert main(["yoke", str(f), str(f), "--split", "gallery", "--n-iter", "50", "--no-progress",
                 "-o", str(tmp_path / "y.png")]) == 0
    assert "wrote" in capsys.readouterr().out
    import json

    assert json.loads((tmp_path / "y.json").read_text())["provenance"]["split"] == "gallery"


def test_geometry_of_a_val_split(tmp_path, capsys):
    rng = np.random.default_rng(1)
    y = np.arange(60) % 6
    es = store.EmbeddingSet.from_arrays(rng.normal(size=(60, 8)).astype(np.float32), y,
                                        split=np.where(np.arange(60) < 30, "train", "val"))
    f = store.save(tmp_path / "v.h5", es)
    assert main(["geometry", str(f), "--split", "val", "--json", str(tmp_path / "g.json")]) == 0
    import json

    r = json.loads((tmp_path / "g.json").read_text())
    assert r["provenance"]["split"] == "val" and r["values"]["n"] == 30


def _digits_file(tmp_path, n=60, test_rows=None):
    """A digits-like embedding file: paths digits/NNNN (drawn from sklearn's 8 x 8 pixels)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    split = np.where(d.target[:n] < 5, "train", "test")
    if test_rows is not None:
        split = np.array(["train"] * n, dtype=object)
        split[:test_rows] = "test"
    es = store.EmbeddingSet.from_arrays(d.data[:n].astype(np.float32), d.target[:n], split=split,
                                        paths=[f"digits/{i:04d}" for i in range(n)], attrs={"dataset": "digits"})
    return store.save(tmp_path / "d.h5", es)


def test_neighbours_split_all_searches_every_row(tmp_path, capsys):
    from embedscope.analyses import neighbour_examples

    f = _digits_file(tmp_path)
    es = store.load(f)
    ex = neighbour_examples(es, split="all", queries=10, k=3, seed=2)
    assert ex.query_split == ex.reference_split == "all"
    assert set(es.split[np.isin(es.paths, ex.ref_paths.ravel())]) == {"train", "test"}  # both splits retrieved
    assert not np.any(ex.ref_paths == ex.query_paths[:, None])  # a query never retrieves itself
    # the exact top-3 over every row, the query left out
    U = es.embeddings / np.linalg.norm(es.embeddings, axis=1, keepdims=True)
    for qp, refs in zip(ex.query_paths, ex.ref_paths):
        i = list(es.paths).index(qp)
        s = U.astype(np.float64) @ U[i]
        s[i] = -np.inf
        assert list(refs) == list(es.paths[np.argsort(-s, kind="stable")[:3]])
    assert main(["neighbours", str(f), "--split", "all", "--queries", "3", "--n-retrievals", "2", "--no-progress",
                 "-o", str(tmp_path / "n.png")]) == 0
    assert "3 queries, top-2 in 'all'" in capsys.readouterr().out
    assert (tmp_path / "n.png").exists() and (tmp_path / "n.pdf").exists()


def test_neighbours_all_is_never_paired_with_another_split(tmp_path, capsys):
    f = _digits_file(tmp_path)
    assert main(["neighbours", str(f), "--split", "all", "--reference-split", "test", "--no-progress",
                 "-o", str(tmp_path / "n.png")]) == 2
    assert "'all' overlaps the other split" in capsys.readouterr().err
    assert not (tmp_path / "n.png").exists()


# ---------------------------------------------------------------------------- 6. neighbours --queries cap
def _no_search(monkeypatch):
    import embedscope.analyses.neighbours as nb

    def refuse(*a, **k):
        raise AssertionError("the search ran before the check")

    monkeypatch.setattr(nb, "neighbour_examples", refuse)


def test_neighbours_refuses_more_queries_than_a_figure_holds_before_any_work(tmp_path, capsys, monkeypatch):
    from embedscope.cli.neighbours import MAX_QUERIES, MAX_RETRIEVALS

    assert MAX_QUERIES == 100
    _no_search(monkeypatch)
    f = _digits_file(tmp_path)
    out = tmp_path / "n.png"
    assert main(["neighbours", str(f), "--queries", "5000", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"at most {MAX_QUERIES} queries" in err and "--queries 5000" in err
    assert len(err.strip().splitlines()) == 1
    assert main(["neighbours", str(f), "--n-retrievals", str(MAX_RETRIEVALS + 1), "-o", str(out)]) == 2
    assert f"at most {MAX_RETRIEVALS} retrievals" in capsys.readouterr().err
    pf = tmp_path / "q.txt"
    pf.write_text("".join(f"digits/{i:04d}\n" for i in range(MAX_QUERIES + 1)))
    assert main(["neighbours", str(f), "--paths-file", str(pf), "-o", str(out)]) == 2
    assert f"lists {MAX_QUERIES + 1} queries: a figure holds at most {MAX_QUERIES}" in capsys.readouterr().err
    assert not out.exists() and not out.with_suffix(".pdf").exists()


def test_neighbours_says_when_the_split_has_fewer_queries_than_asked(tmp_path, capsys):
    f = _digits_file(tmp_path, n=30, test_rows=12)
    assert main(["neighbours", str(f), "--queries", "40", "--n-retrievals", "2", "--no-progress",
                 "-o", str(tmp_path / "n.png")]) == 0
    assert "12 queries (40 asked; the split has 12), top-2 in 'test'" in capsys.readouterr().out
    # as many as the split has: nothing to say
    assert main(["neighbours", str(f), "--queries", "12", "--n-retrievals", "2", "--no-progress", "--force",
                 "-o", str(tmp_path / "n.png")]) == 0
    assert "12 queries, top-2 in 'test'" in capsys.readouterr().out
    (tmp_path / "six").mkdir()
    f6 = _digits_file(tmp_path / "six", n=20, test_rows=6)  # fewer than the default 8, which nobody typed
    assert main(["neighbours", str(f6), "--n-retrievals", "2", "--no-progress", "-o", str(tmp_path / "m.png")]) == 0
    assert "6 queries, top-2 in 'test'" in capsys.readouterr().out


# ---------------------------------------------------------------------- 8. the file's image root moved
def _photos_file(tmp_path, root):
    from PIL import Image

    paths = [f"c{i % 3}/img{i}.png" for i in range(12)]
    for i, p in enumerate(paths):
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (12, 10), (60 * (i % 3), 120, 40)).save(root / p)
    rng = np.random.default_rng(0)
    es = store.EmbeddingSet.from_arrays(rng.normal(size=(12, 6)).astype(np.float32), np.arange(12) % 3,
                                        paths=paths, attrs={"dataset": "imagefolder", "root": str(root)})
    return store.save(tmp_path / "p.h5", es)


def test_neighbours_names_the_files_root_when_it_moved(tmp_path, capsys):
    root = tmp_path / "photos"
    f = _photos_file(tmp_path, root)
    root.rename(tmp_path / "photos.moved")
    out = tmp_path / "n.png"
    assert main(["neighbours", str(f), "--queries", "2", "--n-retrievals", "2", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert (f"the file's image root {root} (recorded at embed time) is not a folder: give --root DIR" in err)
    assert "--root " + str(root) not in err and len(err.strip().splitlines()) == 1
    # a --root the user gave: the message names the option
    assert main(["neighbours", str(f), "--root", str(root), "-o", str(out)]) == 1
    assert f"--root {root}: not a folder" in capsys.readouterr().err
    assert main(["neighbours", str(f), "--queries", "2", "--n-retrievals", "2", "--root", str(tmp_path / "photos.moved"),
                 "-o", str(out)]) == 0
    assert out.exists()


# ------------------------------------------------------------------------------- 10. neighbours --no-progress
def test_neighbours_no_progress_hides_the_progress_output(tmp_path, capsys):
    f = _photos_file(tmp_path, tmp_path / "photos")
    argv = ["neighbours", str(f), "--queries", "3", "--n-retrievals", "2", "-o", str(tmp_path / "n.png")]
    assert main(argv) == 0
    err = capsys.readouterr().err  # not a terminal: one line per phase
    assert "kNN" in err and "pictures" in err
    assert main(argv + ["--force", "--no-progress"]) == 0
    cap = capsys.readouterr()
    assert cap.err == "" and "3 queries, top-2" in cap.out
    sub = build_parser().command_parsers
    for cmd in ("neighbours", "tsne", "scatter", "yoke"):  # as every figure command
        assert any("--no-progress" in a.option_strings for a in sub[cmd]._actions), cmd
