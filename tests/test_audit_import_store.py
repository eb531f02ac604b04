"""Audit of `embedscope import` and the HDF5 store "to the digit": every test builds its input file
itself and compares what the store holds (read back with plain h5py or store.load) with that input."""

import os
import re

import h5py
import numpy as np
import pandas as pd
import pytest
import torch

from embedscope import store
from embedscope.cli import main
from embedscope.errors import EmbedscopeError
from embedscope.importers import import_embeddings, import_to_file
from embedscope.store import EmbeddingSet

RNG = np.random.default_rng(42)


def _h5(path):
    """Every dataset of a file as plain values (strings decoded), read with h5py only."""
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            v = obj[()]
            if isinstance(v, np.ndarray) and v.dtype.kind == "O":
                v = np.array([x.decode("utf-8") for x in v], dtype=object)
            out[name] = v
    with h5py.File(path, "r") as f:
        f.visititems(visit)
        out["@attrs"] = dict(f.attrs)
    return out


def _tree(path):
    """(name, dtype, shape, bytes of the values, attributes) of every object: compares two files exactly."""
    items = []

    def visit(name, obj):
        attrs = sorted((k, repr(v)) for k, v in obj.attrs.items())
        if isinstance(obj, h5py.Dataset):
            items.append((name, str(obj.dtype), obj.shape, repr(obj[()].tolist()), attrs))
        else:
            items.append((name, "group", None, None, attrs))
    with h5py.File(path, "r") as f:
        f.visititems(visit)
        items.append(("/", "root", None, None, sorted((k, repr(v)) for k, v in f.attrs.items())))
    return sorted(items, key=lambda t: t[0])


# ------------------------------------------------------------------ formats: values bit for bit


def test_npy_dtypes_stored_as_float32_exactly_or_rounded_to_nearest(tmp_path):
    y = np.arange(30) % 3
    np.save(tmp_path / "y.npy", y)
    x32 = RNG.normal(size=(30, 7)).astype(np.float32)
    x32[0, 0] = np.float32(1e-40)  # a subnormal survives too
    for name, x in {"f32": x32, "f16": x32.astype(np.float16), "f64": RNG.normal(size=(30, 7)),
                    "i": RNG.integers(-2**24, 2**24, size=(30, 7))}.items():
        np.save(tmp_path / f"{name}.npy", x)
        out = import_to_file(tmp_path / f"{name}.npy", tmp_path / f"{name}.h5", labels=str(tmp_path / "y.npy"))
        d = _h5(out)
        assert d["embeddings"].dtype == np.float32
        # float32/float16/integers below 2^24: exact; float64: rounded to the nearest float32
        assert d["embeddings"].tobytes() == x.astype(np.float32).tobytes(), name
        assert d["labels"].tolist() == y.tolist() and d["class_names"].tolist() == ["0", "1", "2"]
        assert d["paths"].tolist() == [str(i) for i in range(30)]
        assert set(d["split"]) == {"test"} and "every row is 'test'" in d["@attrs"]["split_source"]


def test_pt_half_bfloat16_float64_tensors(tmp_path):
    for dt in (torch.bfloat16, torch.float16, torch.float64, torch.float32):
        t = torch.randn(20, 6, dtype=torch.float64).to(dt).requires_grad_(True)
        torch.save({"embeddings": t, "labels": torch.arange(20) % 4}, tmp_path / "e.pt")
        es = import_embeddings(tmp_path / "e.pt")
        assert es.embeddings.dtype == np.float32
        assert es.embeddings.tobytes() == t.detach().float().numpy().tobytes(), dt


def test_safetensors_bfloat16_is_read(tmp_path):
    # numpy has no bfloat16: the numpy reader failed with "data type 'bfloat16' not understood"
    from safetensors.torch import save_file

    t = torch.randn(24, 5).to(torch.bfloat16)
    save_file({"embedding": t, "label": torch.arange(24) % 3}, str(tmp_path / "e.safetensors"))
    es = import_embeddings(tmp_path / "e.safetensors")
    assert es.embeddings.tobytes() == t.float().numpy().tobytes()
    assert es.labels.tolist() == (np.arange(24) % 3).tolist()


def test_npz_non_contiguous_int_labels_keep_their_values_and_row_order(tmp_path):
    perm = RNG.permutation(40)
    y = np.array([100, 3, 7, -2])[np.arange(40) % 4][perm]
    x = RNG.normal(size=(40, 3)).astype(np.float32)
    np.savez(tmp_path / "a.npz", X=x, labels=y, paths=np.array([f"p/{i}" for i in perm]),
             split=np.array(["train", "test"] * 20))
    es = import_embeddings(tmp_path / "a.npz")
    assert es.class_names.tolist() == ["-2", "3", "7", "100"]  # numeric order
    assert es.class_names[es.labels].tolist() == [str(v) for v in y]
    assert es.paths.tolist() == [f"p/{i}" for i in perm] and es.embeddings.tobytes() == x.tobytes()
    assert es.split.tolist() == ["train", "test"] * 20 and es.attrs["split_source"] == "from the source"


def test_string_labels_with_class_names_follow_the_names_order(tmp_path):
    # before: string labels were encoded in sorted order and then indexed into --class-names,
    # so every 'cat' row was stored as class 'dog' when the names were ['dog', 'cat']
    y = np.array(["cat", "dog", "cat", "eel"] * 5)
    np.savez(tmp_path / "a.npz", X=RNG.normal(size=(20, 2)), y=y, names=np.array(["eel", "dog", "cat"]))
    es = import_embeddings(tmp_path / "a.npz", class_names="names", split_by_class=0.5)
    assert es.class_names.tolist() == ["eel", "dog", "cat"]
    assert es.class_names[es.labels].tolist() == y.tolist()
    # --split-by-class follows the --class-names order: the first ceil(0.5 * 3) = 2 classes train
    assert es.split.tolist() == ["train" if c in ("eel", "dog") else "test" for c in y]
    np.savez(tmp_path / "b.npz", X=RNG.normal(size=(20, 2)), y=y, names=np.array(["dog", "cat"]))
    with pytest.raises(EmbedscopeError, match="not among the 2 class names, e.g. 'eel'"):
        import_embeddings(tmp_path / "b.npz", class_names="names")


def test_csv_text_columns_kept_as_written(tmp_path):
    # before: "007" became class "7", a path "0001" became "1.0" (the column also held "NA",
    # which pandas reads as NaN), and that row's path became "nan"
    x = RNG.normal(size=(8, 3)).astype(np.float32)
    df = pd.DataFrame({"label": ["007", "010"] * 4, "path": ["0001", "NA", "a,b.jpg", "é/ü.png", "5", "6", "7", "8"],
                       "colour": ["NA", "red", "None", "", "n/a", "red", "red", "red"],
                       "d0": x[:, 0], "d1": x[:, 1], "d2": x[:, 2]})
    df.to_csv(tmp_path / "t.csv", index=False)
    es = import_embeddings(tmp_path / "t.csv", paths="path")
    assert es.class_names.tolist() == ["007", "010"]
    assert es.paths.tolist() == df["path"].tolist()
    assert es.embeddings.tobytes() == x.tobytes()  # float32 written by pandas, read back bit for bit
    with pytest.raises(EmbedscopeError, match=r"property 'colour': 1 empty value\(s\) \(first: row 3\)"):
        import_embeddings(tmp_path / "t.csv", paths="path", properties=["colour"], embeddings="d*")
    df.loc[3, "colour"] = "blue"
    df.to_csv(tmp_path / "t.csv", index=False)
    es = import_embeddings(tmp_path / "t.csv", paths="path", properties=["colour"])
    assert es.properties["colour"].tolist() == df["colour"].tolist()  # "NA", "None", "n/a" are values


def test_csv_plain_integer_labels_stay_numbers(tmp_path):
    df = pd.DataFrame({"label": [10, 2, 2, 10, -1], "d0": np.arange(5.0)})
    df.to_csv(tmp_path / "t.csv", sep="\t", index=False)
    (tmp_path / "t.tsv").write_text((tmp_path / "t.csv").read_text())
    es = import_embeddings(tmp_path / "t.tsv")
    assert es.class_names.tolist() == ["-1", "2", "10"] and es.class_names[es.labels].tolist() == ["10", "2", "2", "10", "-1"]


def test_csv_float64_rounded_to_nearest_float32(tmp_path):
    x = RNG.normal(size=(2000, 3)) * 10.0 ** RNG.integers(-30, 30, size=(2000, 1))
    df = pd.DataFrame(x, columns=["e0", "e1", "e2"])
    df.insert(0, "y", np.arange(2000) % 5)
    df.to_csv(tmp_path / "t.csv", index=False)
    es = import_embeddings(tmp_path / "t.csv")
    assert es.embeddings.tobytes() == x.astype(np.float32).tobytes()


def test_txt_labels_kept_as_written(tmp_path):
    # before: int() accepted "01" and "1_0": the classes became "1" and "10"
    np.save(tmp_path / "x.npy", np.ones((4, 2), np.float32))
    (tmp_path / "y.txt").write_text("01\n1_0\n01\n 2 \n\n")
    es = import_embeddings(tmp_path / "x.npy", labels=str(tmp_path / "y.txt"))
    assert es.class_names[es.labels].tolist() == ["01", "1_0", "01", "2"]
    (tmp_path / "y.txt").write_text("5\n-1\n5\n12\n")
    es = import_embeddings(tmp_path / "x.npy", labels=str(tmp_path / "y.txt"))
    assert es.class_names.tolist() == ["-1", "5", "12"]


@pytest.mark.parametrize("column,spec", [("cls", "labels"), ("file", "paths")])
def test_missing_labels_or_paths_refused(tmp_path, column, spec):
    # before: a missing label became the class "nan", a missing path the item "nan"
    df = pd.DataFrame({"emb": list(RNG.normal(size=(6, 2))), "cls": ["a", "b"] * 3,
                       "file": [f"f{i}" for i in range(6)]})
    df[column] = df[column].astype(object)
    df.loc[4, column] = None
    df.to_parquet(tmp_path / "t.parquet")
    with pytest.raises(EmbedscopeError, match=rf"{spec}: 1 empty value\(s\) \(first: row 4\)"):
        import_embeddings(tmp_path / "t.parquet", embeddings="emb", labels="cls", paths="file")


def test_parquet_everything_round_trips_through_the_file(tmp_path):
    x = RNG.normal(size=(30, 8)).astype(np.float32)
    df = pd.DataFrame({"emb": list(x), "cls": ["cät", "dög", "e\x1bl"] * 10,
                       "file": [f"img/ü{i}.jpg" for i in range(30)], "split": ["train", "test", "val"] * 10,
                       "size": np.arange(30, dtype=np.int16), "w": np.linspace(0, 1, 30),
                       "colour": ["red", "blue"] * 15, "ok": [True, False] * 15})
    df.to_parquet(tmp_path / "t.parquet")
    out = import_to_file(tmp_path / "t.parquet", tmp_path / "t.h5", embeddings="emb", labels="cls", paths="file",
                         properties=["size", "w", "colour", "ok"])
    d = _h5(out)
    assert d["embeddings"].tobytes() == x.tobytes()
    assert d["class_names"][d["labels"]].tolist() == df["cls"].tolist()
    assert d["paths"].tolist() == df["file"].tolist() and d["split"].tolist() == df["split"].tolist()
    assert d["properties/size"].dtype == np.int16 and d["properties/size"].tolist() == list(range(30))
    assert d["properties/w"].tobytes() == df["w"].to_numpy().tobytes()
    assert d["properties/colour"].tolist() == df["colour"].tolist()
    assert d["properties/ok"].tolist() == df["ok"].tolist()
    assert d["@attrs"]["import_format"] == "parquet" and d["@attrs"]["imported"]
    es = store.load(out)
    assert es.properties["ok"].dtype == np.bool_ and es.properties["colour"].tolist() == df["colour"].tolist()


# ------------------------------------------------------------------ the store: round trips


def test_slash_and_dot_property_names_refused(tmp_path):
    # before: "a/b" was written as a group 'a' holding 'b', and the file could not be read back
    # ("property 'a' is an HDF5 group"); "." and "" failed with a KeyError / TypeError
    pd.DataFrame({"emb": list(np.eye(3)), "y": [0, 1, 1], "a/b": [1, 2, 3]}).to_parquet(tmp_path / "t.parquet")
    with pytest.raises(EmbedscopeError, match="'a/b' cannot be a property name"):
        import_embeddings(tmp_path / "t.parquet", embeddings="emb", properties=["a/b"])
    for name in ("a/b", ".", ""):
        with pytest.raises(EmbedscopeError, match="cannot be a property name"):
            EmbeddingSet.from_arrays(np.eye(3), [0, 1, 1], properties={name: np.arange(3)})


@pytest.mark.parametrize("bad", ["a\x00b", "a\udc80b"])
def test_unstorable_text_is_one_line_and_leaves_the_old_file(tmp_path, bad):
    # before: ValueError "VLEN strings do not support embedded NULLs" / UnicodeEncodeError
    good = EmbeddingSet.from_arrays(np.eye(3), [0, 1, 1])
    store.save(tmp_path / "e.h5", good)
    before = (tmp_path / "e.h5").read_bytes()
    for field, value in (("paths", ["x", bad, "z"]), ("properties", {"p": ["x", "y", bad]}),
                         ("class_names", ["c", bad])):
        es = EmbeddingSet.from_arrays(np.eye(3), [0, 1, 1])
        # (set afterwards: from_arrays refuses a NUL itself, save is what refuses a set changed since)
        setattr(es, field, {k: np.array(v, dtype=object) for k, v in value.items()} if field == "properties"
                else np.array(value, dtype=object))
        with pytest.raises(EmbedscopeError, match=r"e\.h5: .*row [012]"):
            store.save(tmp_path / "e.h5", es, force=True)
    assert (tmp_path / "e.h5").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["e.h5"]


def test_round_trip_of_every_field_with_odd_text(tmp_path):
    long = "ß" * 100_000
    names = ["ü/ñ", "a\nb", "\x1b[2J", "  spaced  ", "", long, "日本", "😀"]
    n = len(names)
    es = EmbeddingSet.from_arrays(RNG.normal(size=(n, 3)).astype(np.float32), np.arange(n)[::-1],
                                  class_names=names, paths=names[::-1], split=["train", "test"] * (n // 2),
                                  properties={"ünï cøde name": np.array(names, dtype=object),
                                              "f": np.linspace(-1, 1, n), "i8": np.arange(n, dtype=np.int8),
                                              "2d": np.arange(2 * n).reshape(n, 2)},
                                  attrs={"note": "x\ny", "cfg": {"k": [1, 2]}, "dataset": "d"})
    store.save(tmp_path / "e.h5", es)
    back = store.load(tmp_path / "e.h5")
    assert back.embeddings.tobytes() == es.embeddings.tobytes() and back.labels.tolist() == es.labels.tolist()
    for k in ("paths", "split", "class_names"):
        assert getattr(back, k).tolist() == getattr(es, k).tolist(), k
    assert sorted(back.properties) == sorted(es.properties)
    for k, v in es.properties.items():
        assert back.properties[k].dtype == v.dtype or v.dtype.kind == "O", k
        assert back.properties[k].tolist() == v.tolist(), k
    assert back.attrs["note"] == "x\ny" and back.attrs["cfg"] == {"k": [1, 2]}


@pytest.mark.parametrize("shape", [(1, 5), (5, 1), (1, 1)])
def test_n1_d1(tmp_path, shape):
    x = RNG.normal(size=shape).astype(np.float32)
    np.savez(tmp_path / "a.npz", X=x, y=np.arange(shape[0]))
    out = import_to_file(tmp_path / "a.npz", tmp_path / "a.h5")
    assert store.load(out).embeddings.tobytes() == x.tobytes()


def test_large_n_round_trip(tmp_path):
    x = RNG.normal(size=(100_000, 4)).astype(np.float32)
    y = RNG.integers(0, 500, 100_000)
    es = EmbeddingSet.from_arrays(x, y, paths=[f"img/{i:06d}.jpg" for i in range(100_000)])
    store.save(tmp_path / "big.h5", es)
    assert (tmp_path / "big.h5").stat().st_size < 12_000_000  # about 1.6 MB of floats + 2 MB of paths
    back = store.load(tmp_path / "big.h5")
    assert back.embeddings.tobytes() == x.tobytes() and back.paths[-1] == "img/099999.jpg"
    assert np.array_equal(back.class_names[back.labels].astype(int), y)


def test_existing_output_refused_and_force_is_atomic(tmp_path, monkeypatch):
    from embedscope.store import embeddings as emb_mod

    np.savez(tmp_path / "a.npz", X=np.eye(4), y=np.arange(4))
    (tmp_path / "out.h5").write_bytes(b"precious")
    assert main(["import", str(tmp_path / "a.npz"), "-o", str(tmp_path / "out.h5")]) == 1
    assert (tmp_path / "out.h5").read_bytes() == b"precious"

    def boom(*a, **k):
        raise EmbedscopeError("disk on fire")
    monkeypatch.setattr(emb_mod, "_write_bytes", boom)
    with pytest.raises(EmbedscopeError, match="disk on fire"):
        import_to_file(tmp_path / "a.npz", tmp_path / "out.h5", force=True)
    assert (tmp_path / "out.h5").read_bytes() == b"precious"
    assert sorted(os.listdir(tmp_path)) == ["a.npz", "out.h5"]
    monkeypatch.undo()
    import_to_file(tmp_path / "a.npz", tmp_path / "out.h5", force=True)
    assert store.load(tmp_path / "out.h5").n == 4


def test_output_mode_follows_the_umask(tmp_path):
    np.savez(tmp_path / "a.npz", X=np.eye(4), y=np.arange(4))
    old = os.umask(0o027)
    try:
        import_to_file(tmp_path / "a.npz", tmp_path / "o.h5")
    finally:
        os.umask(old)
    assert (tmp_path / "o.h5").stat().st_mode & 0o777 == 0o640


# ------------------------------------------------------------------ embedscope info


def test_info_numbers_against_h5py_and_escaped_text(tmp_path, capsys):
    y = np.array([0, 1, 2, 3, 3, 4] * 5)
    split = np.array(["train"] * 12 + ["test"] * 18)
    x = RNG.normal(size=(30, 6)).astype(np.float32)
    es = EmbeddingSet.from_arrays(x, y, split=split, class_names=["a", "b", "c", "d", "e", "f\x1b[2J"],
                                  properties={"bad\x1b]0;x\x07\nname": np.arange(30)},
                                  attrs={"dataset": "evil\x1b[31m\nforged row"})
    store.save(tmp_path / "e.h5", es)
    assert main(["info", str(tmp_path / "e.h5")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\\x1b[31m\\nforged row" in out
    with h5py.File(tmp_path / "e.h5", "r") as f:
        X, lab = f["embeddings"][()], f["labels"][()]
        sp = np.array([s.decode() for s in f["split"][()]])
        n_names = len(f["class_names"])
    rows = {line.split("  ")[0]: line.split("  ", 1)[1].strip() for line in out.splitlines()[2:]}
    assert rows["N x D"] == f"{X.shape[0]} x {X.shape[1]}" and rows["dtype"] == str(X.dtype)
    assert rows["classes"] == f"{len(np.unique(lab))} ({n_names} named)"
    for s in ("train", "test"):
        assert rows[s] == f"{(sp == s).sum()} images, {len(np.unique(lab[sp == s]))} classes"
    assert rows["mean embedding norm"] == f"{np.linalg.norm(X.astype(np.float64), axis=1).mean():.4f}"
    assert "split_source" not in rows  # given explicitly


def test_info_shows_the_import_provenance(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.eye(3))
    np.save(tmp_path / "y.npy", np.arange(3))
    import_to_file(tmp_path / "x.npy", tmp_path / "o.h5", labels=str(tmp_path / "y.npy"))
    assert main(["info", str(tmp_path / "o.h5")]) == 0
    out = capsys.readouterr().out
    assert "every row is 'test'" in out and str((tmp_path / "x.npy").resolve()) in out and "npy" in out


# ------------------------------------------------------------------ add-properties


def test_add_properties_changes_only_the_new_dataset(tmp_path, capsys):
    paths = [f"img/{i:04d}.jpg" for i in range(10)]
    es = EmbeddingSet.from_arrays(RNG.normal(size=(10, 3)), np.arange(10) % 2, paths=paths,
                                  properties={"old": np.arange(10)})
    f = tmp_path / "e.h5"
    store.save(f, es)
    with h5py.File(f, "a") as h:  # things another tool added with plain h5py
        h.create_dataset("extra/thing", data=np.arange(3))
        h["embeddings"].attrs["units"] = "none"
        h.attrs["mine"] = "kept"
    before = _tree(f)
    order = RNG.permutation(10)
    table = pd.DataFrame({"path": np.array(paths)[order], "area": np.arange(10.0)[order] * 1.5,
                          "kind": np.array([f"k{i}" for i in range(10)])[order]})
    table.to_csv(tmp_path / "p.csv", index=False)
    assert main(["add-properties", str(f), str(tmp_path / "p.csv")]) == 0
    after = _tree(f)
    new = {t[0] for t in after} - {t[0] for t in before}
    assert new == {"properties/area", "properties/kind"}
    assert [t for t in after if t[0] not in new] == before  # everything else bit for bit
    d = _h5(f)
    assert d["properties/area"].tolist() == [i * 1.5 for i in range(10)]  # matched by path, not row
    assert d["properties/kind"].tolist() == [f"k{i}" for i in range(10)]
    # an existing property: refused without --force, file untouched
    raw = f.read_bytes()
    assert main(["add-properties", str(f), str(tmp_path / "p.csv")]) == 1
    assert f.read_bytes() == raw
    # a missing path and an extra path: refused, untouched
    table.iloc[1:].to_csv(tmp_path / "miss.csv", index=False)
    assert main(["add-properties", str(f), str(tmp_path / "miss.csv"), "--force"]) == 1
    pd.concat([table, table.iloc[:1].assign(path="img/x.jpg")]).to_csv(tmp_path / "extra.csv", index=False)
    assert main(["add-properties", str(f), str(tmp_path / "extra.csv"), "--force"]) == 1
    assert f.read_bytes() == raw
    err = capsys.readouterr().err
    assert "already has the properties" in err and "have no row" in err and "match no image" in err


# ------------------------------------------------------------------ foreign HDF5 files


def _foreign(path, **over):
    n = 4
    ds = {"embeddings": np.ones((n, 3), np.float32), "labels": np.arange(n), "paths": np.array([b"a"] * n),
          "split": np.array([b"test"] * n), "class_names": np.array([b"c0", b"c1", b"c2", b"c3"])}
    ds.update(over)
    with h5py.File(path, "w") as f:
        for k, v in ds.items():
            if v is not None:
                f.create_dataset(k, data=v)
    return path


FOREIGN = {
    "missing": ({"labels": None}, r"missing dataset\(s\) labels"),
    "1-D embeddings": ({"embeddings": np.ones(4)}, "embeddings must be 2-D"),
    "string embeddings": ({"embeddings": np.array([[b"x"]] * 4)}, "'embeddings' must be a numeric array"),
    "short labels": ({"labels": np.arange(3)}, r"'labels' has shape \(3,\), expected \(4,\)"),
    "label beyond names": ({"labels": np.array([0, 1, 2, 9])}, r"labels must lie in \[0, 4\)"),
    "text labels": ({"labels": np.array([b"a"] * 4)}, "'labels' must be a numeric array"),
    "NaN row": ({"embeddings": np.array([[np.nan, 0, 0]] + [[1, 0, 0]] * 3)}, "1 embedding rows contain NaN"),
    "bad split": ({"split": np.array([b"tset"] * 4)}, "unknown split value"),
    "short property": ({}, r"property 'p' has shape \(2,\)"),
    "newer version": ({}, "format_version 2 is newer"),
}


@pytest.mark.parametrize("case", list(FOREIGN))
def test_foreign_files_one_line_errors(tmp_path, case, capsys):
    over, msg = FOREIGN[case]
    f = _foreign(tmp_path / "f.h5", **over)
    with h5py.File(f, "a") as h:
        if case == "short property":
            h.create_dataset("properties/p", data=np.arange(2))
        if case == "newer version":
            h.attrs["format_version"] = 2
    # (info summarises a file with NaN rows, naming them: another command shows the refusal)
    assert main(["evaluate" if case == "NaN row" else "info", str(f)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert re.search(msg, err), err


def test_foreign_float64_file_is_read_and_info_says_so(tmp_path, capsys):
    x = RNG.normal(size=(4, 3))
    f = _foreign(tmp_path / "f.h5", embeddings=x)
    assert store.load(f).embeddings.tobytes() == x.tobytes()  # read as stored
    assert main(["info", str(f)]) == 0
    assert "float64" in capsys.readouterr().out


def test_add_properties_reads_the_table_as_written(tmp_path, capsys):
    """Paths "0001" stay "0001" (pandas made them 1, so the join failed), a value "NA" is a value,
    "007" stays a text value distinct from "7"; numeric columns keep their exact numbers."""
    paths = [f"{i:04d}" for i in range(6)]
    f = tmp_path / "e.h5"
    store.save(f, EmbeddingSet.from_arrays(RNG.normal(size=(6, 3)), np.arange(6) % 2, paths=paths))
    (tmp_path / "p.csv").write_text("path,maker,size,area\n" + "".join(
        f"{p},{m},{s},{a}\n" for p, m, s, a in zip(paths, ["NA", "007", "7", "NA", "007", "7"],
                                                     [1, 2, 3, 1, 2, 3], ["0.1", "0.2", "1e-3", "0.1", "2", "3"])))
    assert main(["add-properties", str(f), str(tmp_path / "p.csv")]) == 0, capsys.readouterr().err
    d = _h5(f)
    assert d["properties/maker"].tolist() == ["NA", "007", "7", "NA", "007", "7"]
    assert d["properties/size"].tolist() == [1, 2, 3, 1, 2, 3] and d["properties/size"].dtype.kind == "i"
    assert d["properties/area"].tolist() == [0.1, 0.2, 1e-3, 0.1, 2.0, 3.0]
    (tmp_path / "q.csv").write_text("path,x\n0000,a\n0001,\n0002,b\n0003,b\n0004,a\n0005,a\n")
    assert main(["add-properties", str(f), str(tmp_path / "q.csv")]) == 1
    assert "column 'x' has 1 empty value(s)" in capsys.readouterr().err
