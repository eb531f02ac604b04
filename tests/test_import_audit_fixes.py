"""embedscope import / add-properties: fixes for the CLI audit (findings 1, 2, 3, 7 and 9).

1. --split-by-class F with --class-names counted F over every named class, not those with rows
   (an empty test split, or 4/1 where 3/2 was asked for), and split_source said "(sorted)".
2. a property named 'class' took the class labels' place in `embedscope properties`.
3. a CSV's numeric columns became the embedding without a word: pandas' row index ('Unnamed: 0',
   0..N-1) was dimension 0, a column with decimal commas was dropped as text.
7. a headerless one-column labels .csv lost its first value, and the error named the embeddings file.
9. library messages were cut to 60 characters ("Expected 3 fields in line..."); sparse tensors.
"""

import h5py
import numpy as np
import pandas as pd
import pytest
import torch

from embedscope import store
from embedscope.cli import main
from embedscope.importers import import_embeddings

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def _error(capsys, argv, rc=1):
    assert main(argv) == rc
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def _emb(tmp_path, n=100, d=16):
    np.save(tmp_path / "X.npy", np.random.default_rng(0).normal(size=(n, d)).astype("float32"))
    return str(tmp_path / "X.npy")


# ----------------------------------------------------------------------------- 1. --split-by-class
def test_split_by_class_counts_the_classes_present_not_the_named(tmp_path, capsys):
    x = _emb(tmp_path)
    (tmp_path / "names.txt").write_text("\n".join(NAMES) + "\n")
    (tmp_path / "y.txt").write_text("\n".join(str(i % 5) for i in range(100)) + "\n")
    out = tmp_path / "g.h5"
    # before: ceil(0.5 * 10 named) = 5: every present class train, no test rows, exit 0
    assert main(["import", x, "--labels", str(tmp_path / "y.txt"), "--class-names", str(tmp_path / "names.txt"),
                 "--split-by-class", "0.5", "-o", str(out)]) == 0
    capsys.readouterr()
    es = store.load(out)
    train = sorted(set(es.class_names[es.labels[es.split == "train"]].tolist()))
    test = sorted(set(es.class_names[es.labels[es.split == "test"]].tolist()))
    assert train == sorted(["zero", "one", "two"]) and test == sorted(["three", "four"])  # ceil(0.5 * 5) = 3
    assert es.attrs["split_source"] == ("split-by-class 0.5: first 3 of 5 classes (in --class-names order) train; "
                                        "5 of the 10 named classes have no rows")
    assert main(["evaluate", str(out)]) == 0  # it has test rows


def test_split_by_class_with_a_gap_in_the_labels(tmp_path, capsys):
    x = _emb(tmp_path)
    (tmp_path / "names.txt").write_text("\n".join(NAMES) + "\n")
    (tmp_path / "y.txt").write_text("\n".join(str([0, 1, 2, 3, 9][i % 5]) for i in range(100)) + "\n")
    out = tmp_path / "k.h5"
    assert main(["import", x, "--labels", str(tmp_path / "y.txt"), "--class-names", str(tmp_path / "names.txt"),
                 "--split-by-class", "0.5", "-o", str(out)]) == 0
    es = store.load(out)
    # before: 4 train classes (80 rows) and 1 test class (20 rows)
    assert set(es.labels[es.split == "train"].tolist()) == {0, 1, 2}
    assert set(es.labels[es.split == "test"].tolist()) == {3, 9}
    assert (es.split == "train").sum() == 60
    assert "first 3 of 5 classes (in --class-names order) train" in es.attrs["split_source"]


def test_split_by_class_one_class_present_is_refused(tmp_path, capsys):
    x = _emb(tmp_path, n=10)
    (tmp_path / "names.txt").write_text("\n".join(NAMES) + "\n")
    (tmp_path / "y.txt").write_text("4\n" * 10)
    # before: ceil(0.5 * 10) = 5 "training classes": every row train, exit 0
    err = _error(capsys, ["import", x, "--labels", str(tmp_path / "y.txt"), "--class-names",
                          str(tmp_path / "names.txt"), "--split-by-class", "0.5", "-o", str(tmp_path / "o.h5")], rc=2)
    assert "gives 1 of 1 training classes (9 of the 10 named classes have no rows)" in err
    assert "both splits need at least one class" in err
    assert not (tmp_path / "o.h5").exists()


def test_split_by_class_without_names_is_sorted(tmp_path):
    np.savez(tmp_path / "a.npz", X=np.random.default_rng(1).normal(size=(40, 3)), y=np.array([7, 3, 100, -2] * 10))
    es = import_embeddings(tmp_path / "a.npz", split_by_class=0.5)
    assert set(es.class_names[es.labels[es.split == "train"]].tolist()) == {"-2", "3"}
    assert es.attrs["split_source"] == "split-by-class 0.5: first 2 of 4 classes (sorted) train"


# ----------------------------------------------------------------------------- 2. a property named 'class'
def _table(tmp_path):
    rng = np.random.default_rng(0)
    y = np.arange(40) % 4
    df = pd.DataFrame({"emb": list(rng.normal(size=(40, 8))), "label": y, "class": ["indoor", "outdoor"] * 20,
                       "colour": rng.choice(["red", "green"], 40)})
    df.to_parquet(tmp_path / "t.parquet")
    return tmp_path / "t.parquet"


def test_import_refuses_a_property_named_class(tmp_path, capsys):
    src = _table(tmp_path)
    out = tmp_path / "t.h5"
    err = _error(capsys, ["import", str(src), "--embeddings", "emb", "--labels", "label", "--properties", "class",
                          "colour", "-o", str(out)])
    assert "'class' cannot be a property" in err and "class labels are analysed" in err and "rename" in err
    assert not out.exists()
    assert main(["import", str(src), "--embeddings", "emb", "--labels", "label", "--properties", "colour",
                 "-o", str(out)]) == 0
    assert set(store.load(out).properties) == {"colour"}


def test_add_properties_refuses_a_column_named_class(tmp_path, capsys):
    src = _table(tmp_path)
    out = tmp_path / "t.h5"
    assert main(["import", str(src), "--embeddings", "emb", "--labels", "label", "-o", str(out)]) == 0
    paths = store.load(out).paths
    pd.DataFrame({"path": paths, "class": ["a", "b"] * 20, "size": np.arange(40)}).to_csv(tmp_path / "p.csv",
                                                                                          index=False)
    before = out.read_bytes()
    err = _error(capsys, ["add-properties", str(out), str(tmp_path / "p.csv")])
    assert "p.csv: column 'class' cannot be a property" in err and "class labels are analysed" in err
    assert out.read_bytes() == before and store.load(out).properties == {}
    err = _error(capsys, ["add-properties", str(out), str(tmp_path / "p.csv"), "--force"])
    assert "'class' cannot be a property" in err


# ----------------------------------------------------------------------------- 3. which columns are the embedding
def _frame(n=20):
    df = pd.DataFrame(np.random.default_rng(0).normal(size=(n, 4)), columns=["d0", "d1", "d2", "d3"])
    df.insert(0, "label", np.arange(n) % 4)
    return df


def test_csv_row_index_column_is_left_out_and_said(tmp_path, capsys):
    df = _frame()
    df.to_csv(tmp_path / "a.csv")  # pandas' default: the index as an unnamed first column
    out = tmp_path / "a.h5"
    assert main(["import", str(tmp_path / "a.csv"), "-o", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == f"wrote {out}" and len(lines) == 2
    assert lines[0].startswith("embeddings: 4 columns d0, d1, d2, d3; left out 'Unnamed: 0': the row index 0..19")
    es = store.load(out)
    np.testing.assert_array_equal(es.embeddings, df[["d0", "d1", "d2", "d3"]].to_numpy(dtype=np.float32))
    assert es.attrs["import_embedding_columns"] == ["d0", "d1", "d2", "d3"]
    with h5py.File(out, "r") as f:  # a list is JSON text in the file, named in json_attrs
        assert "import_embedding_columns" in f.attrs["json_attrs"]


def test_unnamed_column_that_is_no_row_index_is_kept_and_named(tmp_path, capsys):
    df = _frame()
    for index in (np.arange(20) - 3, np.arange(20) // 2, np.arange(20) + 0.5):  # negative, repeated, fractional:
        df.index = index  # not distinct non-negative integers: not a row index to leave out
        df.to_csv(tmp_path / "a.csv")
        assert main(["import", str(tmp_path / "a.csv"), "-o", str(tmp_path / "a.h5"), "--force"]) == 0
        assert capsys.readouterr().out.startswith("embeddings: 5 columns Unnamed: 0, d0, d1, d2, d3\n")
        assert store.load(tmp_path / "a.h5").embeddings.shape == (20, 5)


def test_csv_metadata_and_text_columns_are_reported(tmp_path, capsys):
    df = _frame().assign(epoch=7, note="x")
    df.to_csv(tmp_path / "b.csv", index=False)
    out = tmp_path / "b.h5"
    assert main(["import", str(tmp_path / "b.csv"), "-o", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "embeddings: 5 columns d0, d1, d2, d3, epoch; ignored: note"
    # a constant nonzero column (metadata taken for a feature) shifts every cosine: said on a line of its own
    assert lines[1].startswith("embeddings: epoch holds one nonzero value in every row")
    assert store.load(out).attrs["import_embedding_columns"] == ["d0", "d1", "d2", "d3", "epoch"]
    # a prefix: the other numeric columns are ignored, and said so
    assert main(["import", str(tmp_path / "b.csv"), "--embeddings", "d*", "-o", str(tmp_path / "c.h5")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "embeddings: 4 columns d0, d1, d2, d3; ignored: epoch, note"
    assert not any("nonzero value" in x for x in lines)


def test_long_column_lists_are_shortened(tmp_path, capsys):
    df = pd.DataFrame(np.random.default_rng(0).normal(size=(10, 64)), columns=[f"f{i}" for i in range(64)])
    df.insert(0, "label", np.arange(10) % 2)
    df.to_csv(tmp_path / "w.csv", index=False)
    assert main(["import", str(tmp_path / "w.csv"), "-o", str(tmp_path / "w.h5")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "embeddings: 64 columns f0, f1, f2, f3, ..., f63"
    assert len(store.load(tmp_path / "w.h5").attrs["import_embedding_columns"]) == 64


def test_column_names_are_escaped_in_the_report(tmp_path, capsys):
    df = pd.DataFrame({"label": [0, 1] * 5, "d\x1b[2J": np.arange(10) * 0.5, "e": np.ones(10)})
    df.to_csv(tmp_path / "e.csv", index=False)
    assert main(["import", str(tmp_path / "e.csv"), "-o", str(tmp_path / "e.h5")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "d\\x1b[2J" in out


def test_decimal_commas_are_refused(tmp_path, capsys):
    (tmp_path / "c.csv").write_text('label,d0,d1\n1,"0,1",0.2\n2,"0,3",0.4\n1,"0,5",0.1\n2,"0,2",0.2\n')
    # before: d0 was dropped as text and the embedding was 4 x 1
    err = _error(capsys, ["import", str(tmp_path / "c.csv"), "-o", str(tmp_path / "c.h5")])
    assert "column 'd0' holds numbers written with a comma (row 0: '0,1')" in err
    assert not (tmp_path / "c.h5").exists()


def test_npz_with_several_embedding_keys_says_which(tmp_path, capsys):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "r.npz", X=rng.normal(size=(12, 3)), features=rng.normal(size=(12, 5)), y=np.arange(12) % 3)
    out = tmp_path / "r.h5"
    assert main(["import", str(tmp_path / "r.npz"), "-o", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == ["embeddings: key 'features' (12 x 5); also present: X (name another with --embeddings)",
                     f"wrote {out}"]
    assert store.load(out).attrs["import_embedding_key"] == "features"
    # one candidate: nothing to say
    np.savez(tmp_path / "s.npz", X=rng.normal(size=(12, 3)), y=np.arange(12) % 3)
    assert main(["import", str(tmp_path / "s.npz"), "-o", str(tmp_path / "s.h5")]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 's.h5'}"


def test_notes_reach_python_callers_only_when_asked(tmp_path):
    _frame().to_csv(tmp_path / "a.csv")
    notes = []
    es = import_embeddings(tmp_path / "a.csv", notes=notes)
    assert es.embeddings.shape == (20, 4) and len(notes) == 1 and "left out 'Unnamed: 0'" in notes[0]


# ----------------------------------------------------------------------------- 7. labels files
def test_headerless_one_column_labels_csv_keeps_its_first_value(tmp_path, capsys):
    x = _emb(tmp_path)
    y = np.arange(100) % 10
    (tmp_path / "y.csv").write_text("\n".join(map(str, y)) + "\n")
    out = tmp_path / "a.h5"
    # before: "X.npy: labels have 99 entries but there are 100 embedding rows"
    assert main(["import", x, "--labels", str(tmp_path / "y.csv"), "-o", str(out)]) == 0
    es = store.load(out)
    np.testing.assert_array_equal(es.class_names[es.labels].astype(int), y)
    # a header is still a header, and text among text too
    (tmp_path / "h.csv").write_text("label\n" + "\n".join(map(str, y)) + "\n")
    capsys.readouterr()
    assert main(["import", x, "--labels", str(tmp_path / "h.csv"), "-o", str(tmp_path / "b.h5"), "--force"]) == 0
    es = store.load(tmp_path / "b.h5")
    np.testing.assert_array_equal(es.class_names[es.labels].astype(int), y)
    assert capsys.readouterr().out.splitlines()[0] == (f"labels: {tmp_path / 'h.csv'}: its first line, 'label', "
                                                       "was read as the column name")
    words = np.array(["cat", "dog", "eel", "fox"])[np.arange(100) % 4]
    (tmp_path / "w.csv").write_text("\n".join(words) + "\n")
    assert main(["import", x, "--labels", str(tmp_path / "w.csv"), "-o", str(tmp_path / "c.h5")]) == 0
    es = store.load(tmp_path / "c.h5")
    assert es.class_names[es.labels].tolist() == words.tolist()
    # floats among floats: the first line is a value too
    (tmp_path / "f.csv").write_text("\n".join(["0.5"] * 100) + "\n")
    err = _error(capsys, ["import", x, "--labels", str(tmp_path / "f.csv"), "-o", str(tmp_path / "f.h5")])
    assert "f.csv: labels must be integers or strings" in err


def test_errors_about_a_labels_file_name_that_file(tmp_path, capsys):
    x = _emb(tmp_path)
    (tmp_path / "h.csv").write_text("label\n" + "\n".join(["cat", "dog"] * 50)[:-4] + "\n")  # 99 values
    err = _error(capsys, ["import", x, "--labels", str(tmp_path / "h.csv"), "-o", str(tmp_path / "a.h5")])
    assert err.startswith(f"embedscope import: error: {tmp_path / 'h.csv'}: labels have 99 entries but there are "
                          f"100 embedding rows in {x}")
    assert "its first line, 'label', was read as the column name" in err
    (tmp_path / "n.csv").write_text("\n".join(["1", "2"] * 50)[:-2] + "\n")  # 99 integers, no header
    err = _error(capsys, ["import", x, "--labels", str(tmp_path / "n.csv"), "-o", str(tmp_path / "a.h5")])
    assert f"{tmp_path / 'n.csv'}: labels have 99 entries but there are 100 embedding rows" in err
    assert "column name" not in err
    # before: "X.npy: labels: 1 empty value(s) (first: row 2)"
    (tmp_path / "y.txt").write_text("1\n2\n\n" + "1\n" * 97)
    err = _error(capsys, ["import", x, "--labels", str(tmp_path / "y.txt"), "-o", str(tmp_path / "a.h5")])
    assert err.startswith(f"embedscope import: error: {tmp_path / 'y.txt'}: labels: 1 empty value(s) (first: row 2)")
    np.save(tmp_path / "s.npy", np.array(["train", "dev"] * 50))
    (tmp_path / "y2.txt").write_text("1\n" * 100)
    err = _error(capsys, ["import", x, "--labels", str(tmp_path / "y2.txt"), "--split", str(tmp_path / "s.npy"),
                          "-o", str(tmp_path / "a.h5")])
    assert err.startswith(f"embedscope import: error: {tmp_path / 's.npy'}: unknown split value(s) dev")


# ----------------------------------------------------------------------------- 9. library messages
def test_library_messages_keep_their_useful_part(tmp_path, capsys):
    (tmp_path / "ragged.csv").write_text("label,d0,d1\n1,0.1,0.2\n2,0.3,0.4\n1,0.5,0.1\n2,0.2,0.2\n1,0.3,0.3,0.9\n")
    err = _error(capsys, ["import", str(tmp_path / "ragged.csv"), "-o", str(tmp_path / "r.h5")])
    assert "Expected 3 fields in line 6, saw 4" in err
    (tmp_path / "latin.csv").write_bytes(b"label,d0\n\xff,0.1\n")
    err = _error(capsys, ["import", str(tmp_path / "latin.csv"), "-o", str(tmp_path / "l.h5")])
    assert "invalid start byte" in err


def test_long_library_messages_are_cut_and_escaped():
    from embedscope.importers import _message
    from embedscope.text import safe

    s = _message("x\x1b[2J" + "y" * 500)  # cut; escaped once, by the error line that shows it (text.py)
    assert s == "x\x1b[2J" + "y" * 192 + "..." and len(s) == 200 and "\x1b" not in safe(s)


@pytest.mark.parametrize("as_dict", [True, False])
def test_sparse_tensors_get_our_own_message(tmp_path, capsys, as_dict):
    t = torch.randn(30, 8).to_sparse()
    torch.save({"embeddings": t, "labels": torch.arange(30) % 3} if as_dict else t, tmp_path / "s.pt")
    (tmp_path / "y.txt").write_text("1\n" * 30)
    argv = ["import", str(tmp_path / "s.pt"), "-o", str(tmp_path / "s.h5")]
    err = _error(capsys, argv if as_dict else argv + ["--labels", str(tmp_path / "y.txt")])
    assert "sparse tensors are not supported" in err and "save tensor.to_dense()" in err
    assert ("'embeddings': " in err) == as_dict


def test_a_class_names_csv_whose_first_line_is_read_as_a_header_says_so(tmp_path, capsys):
    # text names are all different: the first line cannot be told from a header, so the user is told
    x = _emb(tmp_path, n=10)
    (tmp_path / "y.txt").write_text("\n".join(str(i % 3) for i in range(10)) + "\n")
    (tmp_path / "names.csv").write_text("cat\ndog\neel\nfox\n")
    out = tmp_path / "a.h5"
    assert main(["import", x, "--labels", str(tmp_path / "y.txt"), "--class-names", str(tmp_path / "names.csv"),
                 "-o", str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"class names: {tmp_path / 'names.csv'}: its first line, 'cat', was read as the column name", f"wrote {out}"]
    assert store.load(out).class_names.tolist() == ["dog", "eel", "fox"]
