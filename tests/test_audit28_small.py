"""Audit 28 (J): the smaller commands as a user meets them: info, add-properties, make-shapes, toy."""

from __future__ import annotations

import numpy as np
import pytest
from cli_run import cli_output, one_error_line, run_cli

N = 6
PATHS = [f"img/{i}.png" for i in range(N)]


def _emb(path, attrs=None):
    from embedscope import store

    X = np.random.default_rng(0).normal(size=(N, 4)).astype(np.float32)
    es = store.EmbeddingSet.from_arrays(X, np.arange(N) % 2, split="test", paths=PATHS)
    es.attrs.update(attrs or {})
    store.save(path, es)
    return path


@pytest.fixture(scope="module")
def emb(tmp_path_factory):
    return _emb(tmp_path_factory.mktemp("e") / "e.h5")


@pytest.fixture
def work(emb, tmp_path):
    """A copy of the module's embedding file (add-properties rewrites it)."""
    f = tmp_path / "w.h5"
    f.write_bytes(emb.read_bytes())
    return f


def _table(path, header, rows):
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- info


def test_info_model_line_leaves_out_unset_values(tmp_path):
    # embed --arch resnet18 (no checkpoint) records dataset null: the row said "dataset=None"
    cfg = {"arch": "resnet18", "dataset": None, "embed_dim": 512, "frozen_bn": False, "head": "none",
           "head_seed": 0, "normalize": True, "source_format": "imagenet-baseline"}
    f = _emb(tmp_path / "a.h5", {"checkpoint_config": cfg, "batch_size": 7})
    out = cli_output(["info", str(f)]).splitlines()
    lines = [ln for ln in out if ln.startswith("model ")]
    # (head=none shown since audit 43: the pooled features, not a head; its head_seed 0 draws nothing: left out)
    assert len(lines) == 1 and lines[0].split(None, 1)[1] == "arch=resnet18, embed_dim=512, head=none, normalize=True"
    assert [ln.split() for ln in out if ln.startswith("batch_size ")] == [["batch_size", "7"]]  # (was not shown)
    cfg2 = {**cfg, "dataset": "cub200", "loss": "margin", "seed": 0}  # set values still shown, 0 included
    f2 = _emb(tmp_path / "b.h5", {"checkpoint_config": cfg2})
    lines = [ln for ln in cli_output(["info", str(f2)]).splitlines() if ln.startswith("model ")]
    assert lines[0].split(None, 1)[1] == ("arch=resnet18, dataset=cub200, embed_dim=512, head=none, loss=margin, "
                                          "normalize=True, seed=0")


@pytest.mark.parametrize("kind", ["zip", "pickle", "study", "grid"])
def test_info_names_a_checkpoint_or_a_folder_of_another_command(tmp_path, kind):
    if kind in ("zip", "pickle"):
        f = tmp_path / "net.bin"
        f.write_bytes(b"PK\x03\x04rest" if kind == "zip" else b"\x80\x02rest")  # torch.save, new / old
        want = "net.bin looks like a model checkpoint, not an embedding file: embed a data set with it first"
    else:
        f = tmp_path / "d"
        f.mkdir()
        (f / ("study.json" if kind == "study" else "grid.csv")).write_text("{}")
        want = ("d is a study folder ('embedscope study'), not an embedding file: its summary is 'embedscope report"
                if kind == "study" else "d is a train-grid folder, not an embedding file: 'embedscope study")
    rc, out, err = run_cli(["info", f])  # were "no HDF5 signature" and "is a directory"
    assert rc == 1 and not out and want in one_error_line(err, "info")


# ----------------------------------------------------------------------------- add-properties


def test_add_properties_a_dot_column_names_the_table(work, tmp_path):
    t = _table(tmp_path / "t.csv", ["path", "."], [(p, 1) for p in PATHS])
    before = work.read_bytes()
    rc, _, err = run_cli(["add-properties", work, t])  # was "embedding set: '.' cannot be a property name"
    assert rc == 1 and one_error_line(err, "add-properties").endswith(
        "t.csv: column name '.' cannot be a property name (no '/', NUL, '.' or empty name in HDF5)")
    assert work.read_bytes() == before


@pytest.mark.parametrize("content, want", [
    (b"", "e.csv: the file is empty (expected a header line with a 'path' column, then one row per image)"),
    (b"path,w\n", "e.csv: the table has no rows: give one row per image"),  # was "6 image(s) ... have no row"
    (b"\x89HDF\r\n\x1a\nrest", "e.csv: is an HDF5 file, not a table: give a CSV, TSV or Parquet table with a "
                               "'path' column"),  # was "is not UTF-8 text (byte 0x89 at offset 0)"
    (b"PK\x03\x04rest", "e.csv: is a spreadsheet or zip file, not a table: save it as CSV (UTF-8) or Parquet"),
    (b"\x1f\x8b\x08rest", "e.csv: is gzip-compressed: give the table uncompressed (gunzip it)"),
])
def test_add_properties_an_empty_or_binary_table(work, tmp_path, content, want):
    t = tmp_path / "e.csv"
    t.write_bytes(content)
    before = work.read_bytes()
    rc, out, err = run_cli(["add-properties", work, t])
    assert rc == 1 and not out and one_error_line(err, "add-properties").endswith(want)
    assert work.read_bytes() == before


def test_add_properties_an_empty_parquet_table(work, tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    t = tmp_path / "e.parquet"
    pd.DataFrame({"path": np.array([], dtype=str), "w": np.array([], dtype=np.int64)}).to_parquet(t)
    rc, _, err = run_cli(["add-properties", work, t])
    assert rc == 1 and one_error_line(err, "add-properties").endswith("the table has no rows: give one row per image")


def test_add_properties_a_wide_table_prints_short_lines(work, tmp_path):
    from embedscope import store

    # 40 columns each image's own value (a note each: 40 notes), 2 shared: the line listed all 42 names
    header = ["path", *(f"c{i}" for i in range(40)), "s0", "s1"]
    rows = [(p, *(i * 100 + j for i in range(40)), j % 2, 1) for j, p in enumerate(PATHS)]
    out = cli_output(["add-properties", str(work), str(_table(tmp_path / "t.csv", header, rows))]).splitlines()
    assert out == [
        "w.h5: added properties c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, ..., s1 (42)".replace("w.h5", str(work)),
        "note: every image has its own value of 'c0', 'c1', 'c2', 'c3', 'c4', 'c5', 'c6', 'c7', 'c8', 'c9', ..., "
        "'c39' (40 properties): NR-Prec needs values shared by several images (bin them first, e.g. into quantiles)",
    ]
    props = store.load(work).properties
    assert len(props) == 42 and props["c39"].tolist() == [3900 + j for j in range(N)]


def test_add_properties_integers_beyond_int64_are_kept_as_written(work, tmp_path):
    from embedscope import store

    big = ["123456789012345678901234567890", "-9223372036854775809", "18446744073709551615", "1", "2", "3"]
    t = _table(tmp_path / "t.csv", ["path", "id", "n"], [(p, b, i) for i, (p, b) in enumerate(zip(PATHS, big))])
    rc, _, err = run_cli(["add-properties", work, t])  # was "OverflowError: Python int too large to convert to C long"
    assert rc == 0, err
    props = store.load(work).properties
    assert props["id"].tolist() == big and props["n"].tolist() == list(range(N))


def test_property_table_is_read_without_a_deprecation_warning(tmp_path):
    import warnings

    from embedscope.data.properties import read_property_table

    t = _table(tmp_path / "t.csv", ["path", "x"], [(p, 0.1 * (i + 1)) for i, p in enumerate(PATHS)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pandas 3 deprecates float_precision (a Pandas4Warning each read)
        table = read_property_table(t)
    assert table["x"].tolist() == [float(repr(0.1 * (i + 1))) for i in range(N)]  # still parsed exactly


# ----------------------------------------------------------------------------- make-shapes


def test_make_shapes_larger_than_memory_is_refused_before_any_work(tmp_path, monkeypatch):
    import embedscope.data.shapes as shapes

    monkeypatch.setattr(shapes, "_physical_memory", lambda: 2**20)  # a 1 MiB machine
    calls = []
    monkeypatch.setattr(shapes, "render", lambda *a, **k: calls.append(1))
    out = tmp_path / "s"
    rc, _, err = run_cli(["make-shapes", "-o", out, "--n-images", "100", "--size", "64", "--no-progress"])
    # 100 x 64 x 64 x 3 bytes = 1.2 MB: was a MemoryError naming a numpy array (or hours of rendering)
    assert rc == 1 and one_error_line(err, "make-shapes").endswith(
        "shapes: 100 images of 64 x 64 pixels need 0.0 GiB of memory (they are rendered in memory), more than "
        "this machine's 0.0 GiB: make fewer or smaller images")
    assert not calls and not out.exists()


# ----------------------------------------------------------------------------- toy


def test_toy_figure_titles_show_the_switch_probability_of_the_runs(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from embedscope.train.toy import VARIANTS, toy_data, toy_figure

    monkeypatch.setattr(Figure, "tight_layout", lambda self, *a, **k: None)  # (the titles only: no layout)
    data = toy_data(1)
    rng = np.random.default_rng(0)

    def run(v, p):  # what train_toy returns, as far as the figure reads it (no training: cheap)
        E = rng.normal(size=(60, 2))
        return {"variant": v, "seed": 1, "p_switch": 0.0 if v == "baseline" else p, "data": data, "emb_train": E,
                "emb_test": E, "singular_values": np.array([2.0, 1.0]), "rho": 0.5, "r1_train": 1.0, "r1_test": 0.5}

    for p, code in ((0.02, "code: p=0.02, no attraction"), (0.0, "code: p=0, attraction kept")):
        fig = toy_figure([run(v, p) for v in VARIANTS], 1)
        try:
            titles = {ax.get_title().split("\n")[0] for ax in fig.axes}
        finally:
            plt.close(fig)
        # were "paper: p=0.001, ..." and "code: p=0.001, no attraction" whatever --p-switch was
        assert {f"paper: p={p:g}, attraction kept", code} <= titles


def test_toy_angles_keep_a_class_around_180_degrees_together():
    from embedscope.train.toy import _angles

    def emb(deg):
        r = np.radians(np.asarray(deg, dtype=np.float64))
        return np.stack([np.cos(r), np.sin(r)], 1)

    # a class at 170..-170 degrees was drawn at both ends of the axis (170 and -170: 340 degrees apart)
    np.testing.assert_allclose(_angles(emb([170, -170, 175, -175, 10])), [170, 190, 175, 185, 10], atol=1e-9)
    np.testing.assert_allclose(_angles(emb([-45, -60, -30, 10])), [-45, -60, -30, 10], atol=1e-9)  # unchanged


# ----------------------------------------------------------------------------- an empty name (-o "$UNSET")


@pytest.mark.parametrize("args, want", [
    (["make-shapes", "-o", "", "--n-images", "1", "--size", "16", "--no-progress"],
     "-o: the name is empty (an unset shell variable?) (see 'embedscope make-shapes --help')"),  # wrote the set here
    (["toy", "-o", "", "--n-seeds", "1", "--no-progress"],
     "-o: the name is empty (an unset shell variable?) (see 'embedscope toy --help')"),  # wrote fig6.* here
    (["train-grid", "--dataset", "digits", "--losses", "margin", "--seeds", "0", "--epochs", "1", "-o", ""],
     "-o: the name is empty (an unset shell variable?) (see 'embedscope train-grid --help')"),  # wrote grid.csv here
    (["evaluate", "e.h5", "--json", ""],
     "--json: the name is empty (an unset shell variable?) (see 'embedscope evaluate --help')"),
    # inputs in the same words (test_audit29_info: every command's file arguments)
    (["info", ""], "EMB.h5: the name is empty (an unset shell variable?) (see 'embedscope info --help')"),
    (["add-properties", "", "t.csv"],
     "EMB.h5: the name is empty (an unset shell variable?) (see 'embedscope add-properties --help')"),
    (["add-properties", "e.h5", ""],
     "TABLE: the name is empty (an unset shell variable?) (see 'embedscope add-properties --help')"),
])
def test_an_empty_name_is_a_usage_error(tmp_path, monkeypatch, args, want):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_cli(args)
    assert rc == 2 and not out and one_error_line(err, args[0]).endswith(want)
    assert not list(tmp_path.iterdir())  # nothing written into the current folder
