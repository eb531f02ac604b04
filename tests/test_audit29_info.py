"""Audit 29 (A): info, add-properties and import, loose ends.

* ``add-properties --force`` said "added property w" of a property it replaced: the line now says, per
  name, what happened (``added property v; replaced property w``), escaped and shortened as before;
* a table whose path column is spelled ``Path``, ``image_path``, ``filename``, `` path``, ... failed
  (add-properties: "no 'path' column (columns: Path, w)") or was ignored (import: the items numbered
  0, 1, ...; a numeric ``Image ID`` was even taken as an embedding column) without a hint: both commands
  now name the candidates (``did you mean 'Path'?``), and ``import --paths path`` too;
* ``info`` did not list what a user or another tool added to the file (an /my_extra dataset, a root
  attribute "notes"): listed now (name, shape, type; attributes as name: short value), escaped and
  bounded; the file is opened once (it was opened three times: a header read, a format check and the
  load); the ``split_source`` attribute that ``import`` refers to is shown;
* an empty name: the positional inputs of every command are refused as the outputs are, by one check
  (``EMB.h5: the name is empty (an unset shell variable?)``, exit 2); ``info`` and ``add-properties`` had
  their own wordings, ``evaluate ""`` read the working folder (". is a directory", exit 1) and ``yoke "" ""``,
  ``saliency-agreement a ""`` and ``train --config ""`` went on (the last trained with the defaults).
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from cli_run import cli_output, one_error_line, run_cli

N = 6
PATHS = [f"img/{i}.png" for i in range(N)]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def emb(tmp_path_factory):
    from embedscope import store

    X = np.random.default_rng(0).normal(size=(N, 4)).astype(np.float32)
    es = store.EmbeddingSet.from_arrays(X, np.arange(N) % 2, split="test", paths=PATHS)
    return store.save(tmp_path_factory.mktemp("e") / "e.h5", es)


@pytest.fixture
def work(emb, tmp_path):
    """A copy of the module's embedding file (add-properties and the tests' h5py rewrite it)."""
    return Path(shutil.copy(emb, tmp_path / "e.h5"))


def _out(args) -> str:
    return cli_output([str(a) for a in args])


def _table(path, header, rows):
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows), encoding="utf-8")
    return path


# ------------------------------------------------------------------ 1. add-properties: added vs replaced

def test_add_properties_says_which_names_it_added_and_which_it_replaced(work, tmp_path):
    first = _table(tmp_path / "a.csv", ["path", "w"], [(p, i % 2) for i, p in enumerate(PATHS)])
    assert _out(["add-properties", work, first]).splitlines()[0] == f"{work}: added property w"
    both = _table(tmp_path / "b.csv", ["path", "w", "v\x1b"], [(p, 1, i % 3) for i, p in enumerate(PATHS)])
    # (was "added properties w, v\x1b": w had been replaced)
    assert _out(["add-properties", work, both, "--force"]).splitlines()[0] == (
        f"{work}: added property v\\x1b; replaced property w")
    assert _out(["add-properties", work, both, "--force"]).splitlines()[0] == (
        f"{work}: replaced properties w, v\\x1b")
    from embedscope import store

    assert store.load(work).properties["w"].tolist() == [1] * N  # (replaced indeed)


def test_add_properties_shortens_a_wide_table_in_each_part(work, tmp_path):
    old = _table(tmp_path / "a.csv", ["path", *(f"c{j}" for j in range(20))], [(p, *([i % 2] * 20)) for i, p in
                                                                           enumerate(PATHS)])
    _out(["add-properties", work, old])
    wide = _table(tmp_path / "b.csv", ["path", *(f"c{j}" for j in range(40))], [(p, *([i % 2] * 40)) for i, p in
                                                                            enumerate(PATHS)])
    line = _out(["add-properties", work, wide, "--force"]).splitlines()[0]
    assert line == (f"{work}: added properties c20, c21, c22, c23, c24, c25, c26, c27, c28, c29, ..., c39 (20); "
                    "replaced properties c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, ..., c19 (20)")


def test_add_properties_to_file_reports_the_replaced_names(work, tmp_path):
    from embedscope.data.properties import add_properties_to_file

    a = _table(tmp_path / "a.csv", ["path", "w"], [(p, 0) for p in PATHS])
    b = _table(tmp_path / "b.csv", ["path", "v", "w"], [(p, 1, 1) for p in PATHS])
    replaced: list[str] = []
    assert add_properties_to_file(work, a, replaced=replaced) == ["w"] and replaced == []
    assert add_properties_to_file(work, b, force=True, replaced=replaced) == ["v", "w"] and replaced == ["w"]


# ------------------------------------------------------------------ 2. a path column spelled otherwise

@pytest.mark.parametrize("header, want", [
    (["Path", "w"], "(did you mean 'Path'? columns: Path, w)"),
    (["PATH", "w"], "(did you mean 'PATH'? columns: PATH, w)"),
    (["image_path", "filename", "w"], "(did you mean 'image_path' or 'filename'? columns: image_path, filename, w)"),
    (["File Name", "w"], "(did you mean 'File Name'? columns: File Name, w)"),
    (["x", "w"], "(columns: x, w)"),  # nothing like a path: no guess
])
def test_add_properties_names_a_path_column_spelled_otherwise(work, tmp_path, header, want):
    table = _table(tmp_path / "t.csv", header, [(p, *range(1, len(header))) for p in PATHS])
    rc, out, err = run_cli(["add-properties", work, table])
    line = one_error_line(err, "add-properties")
    assert rc == 1 and line.endswith(f"{table}: no 'path' column {want}" + (
        "; the images are joined on a column named exactly 'path'" if "did you mean" in want else ""))


def test_a_parquet_tables_names_are_checked_as_a_csvs(work, tmp_path):
    """' path' (a spaced name) went on to "no 'path' column"; 'w ' beside 'w' made two properties that print
    alike; a CSV's header refused both."""
    import pandas as pd

    from embedscope.data.properties import read_property_table
    from embedscope.errors import EmbedscopeError

    pd.DataFrame({" path": PATHS, "w": range(N)}).to_parquet(tmp_path / "a.parquet")
    with pytest.raises(EmbedscopeError, match=r"a.parquet: the column name ' path' has spaces around it$"):
        read_property_table(tmp_path / "a.parquet")
    pd.DataFrame({"path": PATHS, "w": range(N), "w ": range(N)}).to_parquet(tmp_path / "b.parquet")
    with pytest.raises(EmbedscopeError, match=r"b.parquet: the column name 'w ' has spaces around it$"):
        read_property_table(tmp_path / "b.parquet")
    # a named index is a column, as import reads it (was "no 'path' column (columns: w)")
    pd.DataFrame({"path": PATHS[::-1], "w": range(N)}).set_index("path").to_parquet(tmp_path / "c.parquet")
    table = read_property_table(tmp_path / "c.parquet")
    assert table["path"].tolist() == PATHS[::-1] and table["w"].tolist() == list(range(N))
    pd.DataFrame({"path": PATHS, "w": range(N)}, index=range(10, 10 + N)).to_parquet(tmp_path / "d.parquet")
    assert sorted(read_property_table(tmp_path / "d.parquet")) == ["path", "w"]  # (an unnamed index: dropped)


def test_add_properties_lists_a_wide_tables_columns_with_their_count(work, tmp_path):
    table = _table(tmp_path / "t.csv", [f"c{j}" for j in range(20)], [tuple(range(20))])
    rc, out, err = run_cli(["add-properties", work, table])
    assert one_error_line(err, "add-properties").endswith(
        "no 'path' column (columns: c0, c1, c2, c3, c4, c5, ..., c19 (20 columns))")


def test_path_column_candidates_rank_and_exclude():
    from embedscope.importers import path_column_candidates

    assert path_column_candidates(["w", "filename", "Path", "my_file_ref"]) == ["Path", "my_file_ref"]
    assert path_column_candidates(["w", "filename", "Path"], exact=("path",)) == ["Path", "filename"]
    assert path_column_candidates([" path ", "IMG-ID", "x"]) == [" path ", "IMG-ID"]
    assert path_column_candidates(["a", "b", 3]) == []


def test_import_names_a_path_column_it_did_not_read(tmp_path):
    src = _table(tmp_path / "s.csv", ["Path", "label", "e0", "e1"], [(p, i % 2, i, 1) for i, p in enumerate(PATHS)])
    out = _out(["import", src, "-o", tmp_path / "o.h5"]).splitlines()
    assert out[1] == ("paths: no column paths, path, ids, id, filenames or filename: the items are numbered "
                      "from 0; did you mean 'Path'? (--paths Path reads it)")
    from embedscope import store

    assert store.load(tmp_path / "o.h5").paths.tolist() == [str(i) for i in range(N)]  # (unchanged: a note)
    _out(["import", src, "-o", tmp_path / "p.h5", "--paths", "Path"])
    assert store.load(tmp_path / "p.h5").paths.tolist() == PATHS


def test_import_says_a_numeric_id_column_was_taken_as_an_embedding_column(tmp_path):
    src = _table(tmp_path / "s.csv", ["Image ID", "label", "e0", "e1"], [(7 + i, i % 2, i, 1) for i in range(N)])
    out = _out(["import", src, "-o", tmp_path / "o.h5"]).splitlines()
    assert out[0] == "embeddings: 3 columns Image ID, e0, e1"
    assert out[1].endswith("did you mean 'Image ID'? (--paths 'Image ID' reads it; 'Image ID' was taken as an "
                           "embedding column)")


def test_import_with_a_path_column_says_nothing_more(tmp_path):
    src = _table(tmp_path / "s.csv", ["path", "label", "e0", "e1"], [(p, i % 2, i, -i) for i, p in enumerate(PATHS)])
    assert _out(["import", src, "-o", tmp_path / "o.h5"]).splitlines() == [
        "embeddings: 2 columns e0, e1", f"wrote {tmp_path / 'o.h5'}"]


def test_import_option_naming_a_column_spelled_otherwise_says_which(tmp_path):
    src = _table(tmp_path / "s.csv", ["Path", "label", "e0", "e1"], [(p, i % 2, i, 1) for i, p in enumerate(PATHS)])
    rc, out, err = run_cli(["import", src, "-o", tmp_path / "o.h5", "--paths", "path"])
    assert rc == 1 and one_error_line(err, "import").endswith(
        "no key or column 'path' for the paths, and no such file (did you mean 'Path'? keys/columns: Path, label, "
        "e0, e1)")
    rc, out, err = run_cli(["import", src, "-o", tmp_path / "o.h5", "--properties", "LABEL"])
    assert rc == 1 and "no column 'LABEL' for --properties (did you mean 'label'? columns:" in err
    rc, out, err = run_cli(["import", src, "-o", tmp_path / "o.h5", "--embeddings", "E0"])
    assert rc == 1 and "no key or column 'E0' (did you mean 'e0'? keys/columns:" in err


# ------------------------------------------------------------------ 3. info: what else the file holds

def _info(path) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in _out(["info", path]).splitlines()[2:]:
        field, value = line[:line.index("  ")], line[line.index("  "):].strip()
        rows.setdefault(field, []).append(value)
    return rows


def test_info_lists_the_datasets_and_attributes_another_tool_added(work):
    with h5py.File(work, "r+") as f:
        f.create_dataset("my_extra", data=np.zeros((10, 3)))
        g = f.create_group("grp\x1b[2J")
        g.create_dataset("a", data=np.arange(5, dtype=np.int32))
        g.create_group("empty")
        f.create_dataset("names", data=np.array(["a", "b"], dtype=object), dtype=h5py.string_dtype())
        f["alias"] = h5py.SoftLink("/my_extra")
        f["elsewhere"] = h5py.ExternalLink("missing.h5", "/x")  # named, never followed
        f.attrs["notes"] = "by hand\x1b[31m"
        f.attrs["big"] = np.arange(100)
        f.attrs["long"] = "x" * 200
        f["embeddings"].attrs["units"] = "m"
    rows = _info(work)
    assert rows["other dataset"] == ["/alias: a link to /my_extra", "/elsewhere: a link to missing.h5:/x",
                                     "/grp\\x1b[2J/a: 5 int32", "/grp\\x1b[2J/empty: an empty group",
                                     "/my_extra: 10 x 3 float64", "/names: 2 utf-8 text"]
    assert rows["other attribute"] == ["big: array 100 int64", "long: " + "x" * 57 + "...",
                                       "notes: by hand\\x1b[31m", "units (of /embeddings): m"]


def test_info_of_a_plain_file_lists_nothing_else_and_shows_the_split_source(emb):
    rows = _info(emb)
    assert "other dataset" not in rows and "other attribute" not in rows
    assert "split_source" not in rows  # (a file with a split of its own)
    assert rows["N x D"] == [f"{N} x 4"]


def test_info_shows_the_split_source_that_import_refers_to(tmp_path):
    src = _table(tmp_path / "s.csv", ["path", "label", "split", "e0"],
                 [(p, i % 4, "test", i) for i, p in enumerate(PATHS)])
    _out(["import", src, "-o", tmp_path / "o.h5", "--split-by-class", "0.5"])
    assert _info(tmp_path / "o.h5")["split_source"] == [
        "split-by-class 0.5: first 2 of 4 classes (sorted) train; replaced the source's 'split' column"]


def test_info_bounds_the_list_of_a_file_with_many_extras(work):
    with h5py.File(work, "r+") as f:
        for i in range(30):
            f.create_dataset(f"d{i:02d}", data=np.zeros(2))
            f.attrs[f"a{i:02d}"] = i
    rows = _info(work)
    assert len(rows["other dataset"]) == 13 and rows["other dataset"][-1] == "... and 18 more (30 in all)"
    assert rows["other dataset"][0] == "/d00: 2 float64"
    assert len(rows["other attribute"]) == 13 and rows["other attribute"][-1] == "... and 18 more (30 in all)"


def test_info_bounds_a_wide_files_properties_row(work, tmp_path):
    table = _table(tmp_path / "t.csv", ["path", *(f"p{j}" for j in range(30))], [(p, *([i % 2] * 30)) for i, p in
                                                                              enumerate(PATHS)])
    _out(["add-properties", work, table])
    assert _info(work)["properties"] == ["p0, p1, p10, p11, p12, p13, p14, p15, p16, p17, ..., p9 (30 properties)"]


def test_info_lists_the_extras_of_a_maps_file(tmp_path):
    from embedscope.store.saliency import SaliencyMaps, save_maps

    sm = SaliencyMaps(maps=np.ones((3, 4, 4), np.float32), paths=["a", "b", "c"], labels=[0, 1, 0],
                      class_names=["x", "y"], attrs={"name": "m", "family": "ranking", "n_samples": 5, "noise": 0.1,
                                                     "order": "paper", "dataset": "digits", "input_size": 4})
    path = save_maps(tmp_path / "m.h5", sm)
    assert "other dataset" not in _info(path)
    with h5py.File(path, "r+") as f:
        f.create_dataset("mine", data=np.zeros((3, 2), np.float16))
        f.attrs["reviewer"] = "ann"
    rows = _info(path)
    assert rows["kind"] == ["saliency maps of 3 images"]
    assert rows["other dataset"] == ["/mine: 3 x 2 float16"] and rows["other attribute"] == ["reviewer: ann"]


def test_info_opens_the_file_once(work, monkeypatch):
    opened = []
    real = h5py.File

    class Counting(real):
        def __init__(self, name, *a, **k):
            opened.append(str(name))
            super().__init__(name, *a, **k)

    monkeypatch.setattr(h5py, "File", Counting)
    _out(["info", work])
    assert opened == [str(work)]  # (was 2, and a read of its first bytes)


@pytest.mark.parametrize("module, function", [("embedscope/embed.py", "embed_to_file"),
                                              ("embedscope/importers.py", "import_embeddings"),
                                              ("embedscope/study/run.py", "embed_cached"),
                                              ("embedscope/saliency/run.py", "saliency_to_file")])
def test_info_knows_every_attribute_embedscope_writes(module, function):
    """An attribute embedscope writes is never listed as another tool's: every string key of the attrs
    dicts these functions build is one info shows or knows."""
    from embedscope.cli.info import _MAPS_OWN_ATTRS, _OWN_ATTRS

    own = _MAPS_OWN_ATTRS if "saliency" in module else _OWN_ATTRS
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    keys = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.keyword) and node.arg == "attrs" and isinstance(node.value, ast.Dict):
            keys |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "attrs" for t in node.targets)):
            keys |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and (
                isinstance(node.value, ast.Name) and node.value.id == "attrs"
                or isinstance(node.value, ast.Attribute) and node.value.attr == "attrs"):
            keys.add(node.slice.value)
    assert len(keys) > 5 and keys <= own, sorted(keys - own)


# ------------------------------------------------------------------ 4. an empty name, input or output

def _positionals():
    """(command, args) with one positional left empty, for every positional of every command; the
    other positionals and the required options given."""
    from embedscope.cli import build_parser

    cases = []
    for cmd, sub in build_parser().command_parsers.items():
        required = []
        for a in sub._actions:
            if a.option_strings and a.required:
                value = str(next(iter(a.choices))) if a.choices else "digits" if a.dest == "dataset" else "x.h5"
                required += [a.option_strings[0], value]
        pos = [a for a in sub._actions if not a.option_strings]
        for i, a in enumerate(pos):
            for many in ((1, 2) if a.nargs == "+" else (1,)):
                for k in range(many):
                    args = [cmd]
                    for j in range(len(pos)):
                        n = many if j == i else 1
                        args += ["" if j == i and m == k else f"in{j}{m}.h5" for m in range(n)]
                    name = a.metavar or a.dest
                    where = f" ({('1st', '2nd')[k]} of {many})" if many > 1 else ""
                    cases.append((args + required, f"{name}{where}"))
    return cases


CASES = _positionals()


def test_every_command_with_a_file_argument_is_covered():
    commands = {args[0] for args, _ in CASES}
    assert {"info", "add-properties", "evaluate", "geometry", "yoke", "import", "embed", "saliency", "tsne", "scatter",
            "neighbours", "spectrum", "properties", "saliency-agreement", "study", "report"} <= commands


@pytest.mark.parametrize("args, name", CASES, ids=[" ".join(repr(x) for x in c[0]) for c in CASES])
def test_an_empty_file_name_is_a_usage_error_of_one_wording(tmp_path, monkeypatch, args, name):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_cli(args)
    assert rc == 2 and not out, err
    assert one_error_line(err, args[0]).endswith(
        f": error: {name}: the name is empty (an unset shell variable?) (see 'embedscope {args[0]} --help')")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("args, name", [
    (["import", "s.csv", "-o", "o.h5", "--labels", ""], "--labels"),
    (["import", "s.csv", "-o", "o.h5", "--embeddings", ""], "--embeddings"),  # (was ignored: the default taken)
    (["import", "s.csv", "-o", "o.h5", "--class-names", ""], "--class-names"),
    (["import", "s.csv", "-o", "o.h5", "--properties", "a", ""], "--properties (2nd of 2)"),
    (["train", "--config", "", "-o", "m.pt"], "--config"),  # (trained with the defaults)
    (["embed", "c.pt", "--dataset", "digits", "--weights", "", "-o", "e.h5"], "--weights"),
    (["neighbours", "e.h5", "--paths-file", "", "-o", "n.png"], "--paths-file"),
    (["info", ""], "EMB.h5"), (["add-properties", "", "t.csv"], "EMB.h5"), (["add-properties", "e.h5", ""], "TABLE"),
])
def test_an_empty_input_option_is_refused_in_the_same_words(tmp_path, monkeypatch, args, name):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_cli(args)
    assert rc == 2 and not out
    assert f": error: {name}: the name is empty (an unset shell variable?)" in one_error_line(err, args[0])
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------ 5. odd tables (the audit)

@pytest.mark.parametrize("sep, word, fix", [(";", "semicolon", "save it comma-separated (CSV)"),
                                            ("\t", "tab", "rename it .tsv")])
def test_a_csv_written_with_another_separator_says_so_in_both_commands(work, tmp_path, sep, word, fix):
    """A spreadsheet's semicolon CSV: add-properties guessed "did you mean 'path;w'?", import said "no labels:
    ... found path;label;e0"."""
    table = tmp_path / "t.csv"
    table.write_text(f"path{sep}w\n" + "".join(f"{p}{sep}{i}\n" for i, p in enumerate(PATHS)), encoding="utf-8")
    rc, out, err = run_cli(["add-properties", work, table])
    shown = sep.replace("\t", "\\t")
    assert rc == 1 and one_error_line(err, "add-properties").endswith(
        f"no 'path' column (columns: path{shown}w); a .csv is read comma-separated, and its header looks "
        f"{word}-separated: {fix}")
    src = tmp_path / "s.csv"
    src.write_text(f"path{sep}label{sep}e0\n" + "".join(f"{p}{sep}{i % 2}{sep}{i}\n" for i, p in enumerate(PATHS)),
                   encoding="utf-8")
    rc, out, err = run_cli(["import", src, "-o", tmp_path / "o.h5"])
    assert rc == 1 and one_error_line(err, "import").endswith(
        f"{src}: the header is one column, 'path{shown}label{shown}e0'; a .csv is read comma-separated, and its "
        f"header looks {word}-separated: {fix}")


def test_import_refuses_a_repeated_column_name(tmp_path):
    """pandas read the second 'e0' of a CSV as a column 'e0.1' (the embedding: "2 columns e0, e0.1"); pyarrow
    refused a Parquet file's ("Multiple matches for FieldRef.Name(e0)")."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = _table(tmp_path / "s.csv", ["path", "label", "e0", "e0"], [(p, i % 2, i, -i) for i, p in enumerate(PATHS)])
    rc, out, err = run_cli(["import", src, "-o", tmp_path / "o.h5"])
    assert rc == 1 and one_error_line(err, "import").endswith(
        f"{src}: the column name 'e0' occurs twice: give each column its own name")
    cols = [pa.array(PATHS), pa.array(np.arange(N) % 2), pa.array(np.arange(N) * 1.0), pa.array(np.ones(N))]
    pq.write_table(pa.table(cols, names=["path", "label", "e0", "e0"]), tmp_path / "s.parquet")
    rc, out, err = run_cli(["import", tmp_path / "s.parquet", "-o", tmp_path / "o.h5"])
    assert rc == 1 and one_error_line(err, "import").endswith("the column name 'e0' occurs twice: give each column "
                                                              "its own name")
    assert not (tmp_path / "o.h5").exists()


def test_add_properties_refuses_a_parquet_table_that_repeats_a_name(work, tmp_path):
    """It said "cannot be read as a table (ArrowInvalid)"."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table([pa.array(PATHS), pa.array(np.arange(N)), pa.array(np.arange(N))],
                            names=["path", "w", "w"]), tmp_path / "t.parquet")
    rc, out, err = run_cli(["add-properties", work, tmp_path / "t.parquet"])
    assert rc == 1 and one_error_line(err, "add-properties").endswith(
        "t.parquet: the column name 'w' occurs twice: give each property its own name")


def test_a_foreign_attribute_of_latin1_bytes_does_not_stop_every_command(work):
    """Another tool's b"caf\\xe9" attribute: every command that read the file failed with "UnicodeDecodeError:
    'utf-8' codec can't decode byte 0xe9" (info included). Its byte is kept as a file name's are: shown
    \\xe9, written back escaped."""
    from embedscope import store

    with h5py.File(work, "r+") as f:
        f.attrs["by"] = np.bytes_(b"caf\xe9")
        f.attrs["ok"] = np.bytes_("café".encode())
    assert _info(work)["other attribute"] == ["by: caf\\xe9", "ok: café"]
    es = store.load(work)
    assert es.attrs["by"] == "caf\udce9" and es.attrs["ok"] == "café"
    assert store.load(store.save(work.with_name("copy.h5"), es)).attrs["by"] == "caf\\xe9"
