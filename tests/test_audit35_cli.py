"""Thirty-fifth session's audit of the command line: a carriage return in a text cell of a CSV, output
names of another format for `report`, `saliency` and `saliency-agreement`, bounds of `--n-jobs` and
`--alpha`, HDF5 files damaged inside, and t-SNE's phase line at small `--n-iter`."""

import csv

import numpy as np
import pandas as pd
import pytest
from cli_run import exit_code, run_cli

from embedscope.errors import EmbedscopeError
from embedscope.store import EmbeddingSet, save
from embedscope.tables import csv_line_end, write_csv


def _set(n=60, d=6, seed=0, names=None):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = (rng.standard_normal((n, d)) + 3 * np.eye(d)[y]).astype(np.float32)
    return EmbeddingSet.from_arrays(X, y, split=np.where(np.arange(n) < n // 2, "train", "test"),
                                    paths=[f"img{i}.png" for i in range(n)], class_names=names)


# ----------------------------------------------------------------------------- CSV and "\r"
def test_write_csv_quotes_a_carriage_return(tmp_path):
    rows = [{"name": "a\rb", "v": 1}, {"name": "c\r\nd", "v": 2}, {"name": "plain", "v": 3}]
    write_csv(tmp_path / "t.csv", rows)
    back = pd.read_csv(tmp_path / "t.csv", keep_default_na=False)
    assert back["name"].tolist() == ["a\rb", "c\r\nd", "plain"] and back["v"].tolist() == [1, 2, 3]
    with open(tmp_path / "t.csv", newline="") as fh:
        assert [r["name"] for r in csv.DictReader(fh)] == ["a\rb", "c\r\nd", "plain"]
    write_csv(tmp_path / "u.csv", [{"name": "x", "v": 1}])
    assert (tmp_path / "u.csv").read_bytes() == b"name,v\nx,1\n"  # no carriage return: the file as before
    assert csv_line_end(["a", "b\n"]) == "\n" and csv_line_end(["a\r"]) == "\r\n"


def test_result_tables_with_a_carriage_return_read_back_as_parquet(tmp_path):
    from embedscope.analyses import evaluate_many, tsne

    es = _set(names=["cat", "eel\r\x1b[2K", "dog"])
    r = tsne(es, split="test", n_iter=1, seed=0)
    r.to_csv(tmp_path / "t.csv", table=True)
    r.to_parquet(tmp_path / "t.parquet", table=True)
    a, b = pd.read_csv(tmp_path / "t.csv"), pd.read_parquet(tmp_path / "t.parquet")
    assert a.shape == b.shape == (30, b.shape[1])
    assert a["class"].tolist() == b["class"].tolist() and "eel\r\x1b[2K" in a["class"].tolist()
    rs = evaluate_many([es, es], names=["mar\rgin", "other"], include=["P@1"], device="cpu")
    rs.to_csv(tmp_path / "e.csv")
    rs.to_parquet(tmp_path / "e.parquet")
    a, b = pd.read_csv(tmp_path / "e.csv"), pd.read_parquet(tmp_path / "e.parquet")
    assert a.shape == b.shape and a["model"].tolist() == b["model"].tolist()


# ----------------------------------------------------------------------------- output names
def test_report_and_saliency_outputs_of_another_format_are_usage_errors(tmp_path, capsys):
    victim = tmp_path / "emb.h5"
    save(victim, _set())
    before = victim.read_bytes()
    study = tmp_path / "study"
    study.mkdir()
    assert exit_code(["report", study, "-o", victim, "--force"]) == 2
    assert "writes HTML, not HDF5" in capsys.readouterr().err
    assert exit_code(["saliency", tmp_path / "m.pt", "--dataset", "digits", "-o", tmp_path / "s.csv"]) == 2
    assert "writes HDF5, not CSV" in capsys.readouterr().err
    for opt, name in (("--csv", "keep.h5"), ("--json", "x.csv"), ("--per-image-csv", "pi.json")):
        rc = exit_code(["saliency-agreement", tmp_path / "a.h5", tmp_path / "b.h5", opt, tmp_path / name, "--force"])
        assert rc == 2, opt
        assert f"{opt} " in capsys.readouterr().err
    assert victim.read_bytes() == before


# ----------------------------------------------------------------------------- bounds
def test_n_jobs_and_alpha_bounds(tmp_path, capsys):
    from embedscope.analyses import tsne, yoke
    from embedscope.tsne.joint import MAX_JOBS
    from embedscope.tsne.yoked import MAX_ALPHA

    f = tmp_path / "e.h5"
    save(f, _set())
    assert exit_code(["tsne", f, "--n-jobs", str(MAX_JOBS + 1), "-o", tmp_path / "t.png"]) == 2
    assert f"at most {MAX_JOBS}" in capsys.readouterr().err
    with pytest.raises(EmbedscopeError, match="n_jobs"):
        tsne(f, n_jobs=MAX_JOBS + 1)
    assert exit_code(["yoke", f, f, "--alpha", "1e308", "-o", tmp_path / "y.png"]) == 2
    assert "--alpha must be at most" in capsys.readouterr().err
    with pytest.raises(EmbedscopeError, match="alpha must be <="):
        yoke(f, f, alpha=1e200)
    from embedscope.tsne.yoked import yoked_tsne_maps

    X = _set().embeddings[:30]
    with pytest.raises(EmbedscopeError, match="alpha must be at most"):
        yoked_tsne_maps([X, X], alpha=MAX_ALPHA * 10)
    assert not list(tmp_path.glob("*.png"))


# ----------------------------------------------------------------------------- damaged files
def _damaged_copies(src, tmp_path, pieces=40, width=300):
    data = src.read_bytes()
    for k, at in enumerate(range(0, len(data) - width, max(1, len(data) // pieces))):
        p = tmp_path / f"d{k}.h5"
        p.write_bytes(data[:at] + b"\x7f" * width + data[at + width:])
        yield p


def test_a_file_damaged_inside_is_one_line_naming_it(tmp_path):
    """Bytes overwritten at 40 places of an embedding file: the file loads, or the error is an
    EmbedscopeError naming it (h5py's OSError / RuntimeError reached the user without a file name)."""
    from embedscope.store import load

    src = tmp_path / "e.h5"
    save(src, _set(n=400, d=16))
    inside = 0
    for p in _damaged_copies(src, tmp_path):
        try:
            load(p)
        except EmbedscopeError as e:
            assert str(p) in str(e) and "\n" not in str(e)
            inside += "damaged (" in str(e)
    assert inside  # some damage was found by reading the contents, not by opening the file


def test_a_damaged_file_names_itself_in_the_cli(tmp_path):
    src = tmp_path / "e.h5"
    save(src, _set(n=400, d=16))
    seen = 0
    for p in _damaged_copies(src, tmp_path, pieces=20):
        for cmd in (["info", p], ["evaluate", src, p, "--device", "cpu"]):
            rc, out, err = run_cli([str(c) for c in cmd])
            if rc:  # (evaluate's lines before it: the first file's progress)
                last = err.strip().splitlines()[-1]
                assert rc == 1 and "Traceback" not in err and last.startswith(f"embedscope {cmd[0]}: error: "), err
                assert str(p) in last, err
                seen += 1
    assert seen


def test_a_damaged_maps_file_is_one_line_naming_it(tmp_path):
    from embedscope.store.saliency import MapsFile, SaliencyMaps, load_maps, save_maps

    rng = np.random.default_rng(0)
    sm = SaliencyMaps(maps=rng.random((40, 12, 12)).astype(np.float32),
                      paths=np.array([f"i{i}.png" for i in range(40)], dtype=object),
                      labels=np.arange(40) % 4, class_names=np.array(["a", "b", "c", "d"], dtype=object))
    src = tmp_path / "m.h5"
    save_maps(src, sm)
    inside = 0
    for p in _damaged_copies(src, tmp_path):
        for read in (load_maps, lambda q: MapsFile(q).read_maps(np.arange(40))):
            try:
                read(p)
            except EmbedscopeError as e:
                assert str(p) in str(e) and "\n" not in str(e)
                inside += "damaged (" in str(e)
    assert inside


# ----------------------------------------------------------------------------- t-SNE's phase line
@pytest.mark.parametrize("n_iter", [1, 7, 13])
def test_tsne_progress_ends_at_the_total(n_iter):
    from embedscope.tsne.joint import joint_tsne

    seen = []
    X = _set(n=40).embeddings
    joint_tsne(X[:20], X[20:], n_iter=n_iter, seed=0, progress=lambda done, total, info: seen.append((done, total)))
    assert seen[-1] == (250 + n_iter, 250 + n_iter)
