"""embedscope import: every source format round-trips to the same embedding set; bad input is one line."""

import hashlib
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from embedscope import store
from embedscope.errors import EmbedscopeError, UsageError
from embedscope.importers import import_embeddings, import_to_file

RNG = np.random.default_rng(0)
X = RNG.normal(size=(12, 5)).astype(np.float32)
Y = np.array(["cat", "dog", "eel"] * 4)
SPLIT = np.array(["query", "gallery"] * 6)


def _check(es, split=None):
    np.testing.assert_array_equal(es.embeddings, X)
    np.testing.assert_array_equal(es.class_names[es.labels], Y)
    if split is not None:
        np.testing.assert_array_equal(es.split, split)


def test_npy_with_label_files(tmp_path):
    np.save(tmp_path / "x.npy", X)
    (tmp_path / "y.txt").write_text("\n".join(Y) + "\n")
    np.save(tmp_path / "s.npy", SPLIT)
    es = import_embeddings(tmp_path / "x.npy", labels=str(tmp_path / "y.txt"), split=str(tmp_path / "s.npy"))
    _check(es, SPLIT)
    assert es.attrs["imported"] is True and es.attrs["import_format"] == "npy"
    assert es.attrs["import_sha256"] == hashlib.sha256((tmp_path / "x.npy").read_bytes()).hexdigest()


def test_npz_keys(tmp_path):
    np.savez(tmp_path / "a.npz", features=X, y=np.array([0, 1, 2] * 4), names=np.array(["cat", "dog", "eel"]))
    es = import_embeddings(tmp_path / "a.npz", class_names="names")
    _check(es)
    assert set(es.split) == {"test"}  # no split given: every row is test


def test_pt_dict_and_tensor(tmp_path):
    t = torch.from_numpy(X).requires_grad_(True)
    torch.save({"embeddings": t.detach().to(torch.bfloat16).float(), "labels": torch.tensor([0, 1, 2] * 4)},
               tmp_path / "a.pt")
    es = import_embeddings(tmp_path / "a.pt")
    assert es.embeddings.shape == (12, 5) and list(es.class_names) == ["0", "1", "2"]
    torch.save(torch.from_numpy(X), tmp_path / "b.pt")
    np.save(tmp_path / "y.npy", Y)
    _check(import_embeddings(tmp_path / "b.pt", labels=str(tmp_path / "y.npy")))


def test_safetensors(tmp_path):
    from safetensors.numpy import save_file

    save_file({"embedding": X, "label": np.array([0, 1, 2] * 4, dtype=np.int64)}, str(tmp_path / "a.safetensors"))
    es = import_embeddings(tmp_path / "a.safetensors", split_by_class=0.5)
    np.testing.assert_array_equal(es.embeddings, X)
    # zero-shot convention: ceil(0.5 * 3) = 2 first classes train
    np.testing.assert_array_equal(es.split, np.where(np.array([0, 1, 2] * 4) < 2, "train", "test"))


def test_parquet_list_column_and_properties(tmp_path):
    df = pd.DataFrame({"emb": list(X.astype(np.float64)), "cls": Y, "split": SPLIT,
                       "file": [f"img/{i}.jpg" for i in range(12)], "colour": ["red", "blue"] * 6})
    df.to_parquet(tmp_path / "a.parquet")
    es = import_embeddings(tmp_path / "a.parquet", embeddings="emb", labels="cls", paths="file",
                           properties=["colour"])
    _check(es, SPLIT)
    assert es.paths[3] == "img/3.jpg" and list(es.properties["colour"][:2]) == ["red", "blue"]


@pytest.mark.parametrize("sep,ext", [(",", "csv"), ("\t", "tsv")])
def test_csv_numeric_columns(tmp_path, sep, ext):
    df = pd.DataFrame(X, columns=[f"d{i}" for i in range(5)])
    df.insert(0, "label", Y)
    df.to_csv(tmp_path / f"a.{ext}", sep=sep, index=False)
    es = import_embeddings(tmp_path / f"a.{ext}")  # label column found; the numeric columns are the embedding
    _check(es)
    es2 = import_embeddings(tmp_path / f"a.{ext}", embeddings="d*", labels="label")
    _check(es2)


def test_cli_writes_file_and_refuses_overwrite(tmp_path):
    np.savez(tmp_path / "a.npz", embeddings=X, labels=Y, split=SPLIT)
    out = tmp_path / "a.h5"
    r = subprocess.run([sys.executable, "-m", "embedscope", "import", str(tmp_path / "a.npz"), "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    es = store.load(out)
    _check(es, SPLIT)
    assert es.attrs["import_source"].endswith("a.npz")
    r = subprocess.run([sys.executable, "-m", "embedscope", "import", str(tmp_path / "a.npz"), "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "already exists" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_bad_input_one_line(tmp_path):
    np.save(tmp_path / "x.npy", X)
    with pytest.raises(EmbedscopeError, match="no labels: name them with --labels"):
        import_embeddings(tmp_path / "x.npy")
    np.save(tmp_path / "y_short.npy", np.arange(5))
    with pytest.raises(EmbedscopeError, match="labels have 5 entries but there are 12 embedding rows"):
        import_embeddings(tmp_path / "x.npy", labels=str(tmp_path / "y_short.npy"))
    Xn = X.copy()
    Xn[4, 2] = np.nan
    Xn[7, 0] = np.inf
    np.savez(tmp_path / "n.npz", embeddings=Xn, labels=np.arange(12) % 3)
    with pytest.raises(EmbedscopeError, match=r"2 embedding row\(s\) contain NaN or inf \(first: row 4\)"):
        import_embeddings(tmp_path / "n.npz")
    np.savez(tmp_path / "s.npz", embeddings=X, labels=np.arange(12) % 3, split=np.array(["train", "dev"] * 6))
    with pytest.raises(EmbedscopeError, match="unknown split value.*dev"):
        import_embeddings(tmp_path / "s.npz")
    with pytest.raises(EmbedscopeError, match="no key or column 'nope'"):
        import_embeddings(tmp_path / "s.npz", labels="nope")
    (tmp_path / "x.h5").write_bytes(b"")
    with pytest.raises(EmbedscopeError, match="x.h5: not an HDF5 file: it is empty"):
        import_embeddings(tmp_path / "x.h5")
    (tmp_path / "x.mat").write_bytes(b"")
    with pytest.raises(UsageError, match="unknown file type"):
        import_embeddings(tmp_path / "x.mat")
    (tmp_path / "junk.npy").write_bytes(b"\x1b[2Jnot numpy")
    with pytest.raises(EmbedscopeError, match="not a .npy file: it looks like a format embedscope does not") as e:
        import_embeddings(tmp_path / "junk.npy", labels="y")
    assert "\x1b" not in str(e.value)
    with pytest.raises(UsageError, match="strictly between 0 and 1"):
        import_embeddings(tmp_path / "s.npz", split_by_class=1.0)


def test_pt_payload_not_run(tmp_path):
    import os

    marker = tmp_path / "PWNED"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"embeddings": torch.from_numpy(X), "labels": torch.arange(12), "x": Payload()}, tmp_path / "e.pt")
    with pytest.raises(EmbedscopeError, match="holds objects other than tensors.*nothing from the file was run"):
        import_embeddings(tmp_path / "e.pt")
    assert not marker.exists()


def test_import_to_file_checks_output_first(tmp_path):
    np.save(tmp_path / "x.npy", X)
    out = tmp_path / "o.h5"
    out.write_text("keep")
    with pytest.raises(EmbedscopeError, match="already exists"):
        import_to_file(tmp_path / "x.npy", out)  # before any reading: no labels error
    assert out.read_text() == "keep"


def test_misnamed_partly_numeric_and_out_of_range_sources(tmp_path):
    """Files whose content does not match their suffix say what they look like; a table column of
    numbers with one bad cell is an error, not a silently dropped dimension; 2-D labels and float64
    values beyond float32 are named as such."""
    store.save(tmp_path / "e.h5", store.EmbeddingSet(embeddings=X, labels=np.arange(12) % 3, paths=[str(i) for i in range(12)],
                                                     split=["test"] * 12, class_names=["a", "b", "c"]))
    (tmp_path / "h.npy").write_bytes((tmp_path / "e.h5").read_bytes())
    with pytest.raises(EmbedscopeError, match="h.npy: not a .npy file: it looks like an HDF5 file"):
        import_embeddings(tmp_path / "h.npy", labels="y")
    np.save(tmp_path / "x.npy", X)
    (tmp_path / "x.npz").write_bytes((tmp_path / "x.npy").read_bytes())
    with pytest.raises(EmbedscopeError, match="not a .npz file: it looks like a .npy array"):
        import_embeddings(tmp_path / "x.npz")
    (tmp_path / "e.npy").write_bytes(b"")
    with pytest.raises(EmbedscopeError, match="not a .npy file: it is empty"):
        import_embeddings(tmp_path / "e.npy", labels="y")
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(5)]).astype(object)
    df.insert(0, "label", Y)
    df.insert(1, "note", ["n"] * 12)  # a text column: ignored
    df.loc[5, "f2"] = "abc"
    df.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(EmbedscopeError, match=r"column 'f2' is numbers but for 1 cell\(s\) \(row 5: 'abc'\)"):
        import_embeddings(tmp_path / "t.csv")
    df.loc[5, "f2"] = X[5, 2]
    df.to_csv(tmp_path / "t.csv", index=False)
    _check(import_embeddings(tmp_path / "t.csv"))
    np.savez(tmp_path / "l2.npz", embeddings=X, labels=(np.arange(12) % 3)[:, None])
    with pytest.raises(EmbedscopeError, match=r"labels must hold one value per row \(1-D\), got shape \(12, 1\)"):
        import_embeddings(tmp_path / "l2.npz")
    big = X.astype(np.float64)
    big[3, 1] = 1e300
    np.savez(tmp_path / "big.npz", embeddings=big, labels=np.arange(12) % 3)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning on the way
        with pytest.raises(EmbedscopeError, match=r"1 embedding row\(s\) hold values beyond float32's range .*row 3"):
            import_embeddings(tmp_path / "big.npz")
    # a row too small for float32 would be stored as zeros (its direction lost): refused, as store.save does
    tiny = X.astype(np.float64)
    tiny[5] = [1e-46, -2e-47] + [0.0] * (X.shape[1] - 2)
    np.savez(tmp_path / "tiny.npz", embeddings=tiny, labels=np.arange(12) % 3)
    with pytest.raises(EmbedscopeError, match=r"1 embedding row\(s\) are too small for float32.*in row 5"):
        import_embeddings(tmp_path / "tiny.npz")
    # integers beyond 2^24 are rounded as documented (docs/import.md), as float64 is, where store.save refuses
    ints = np.arange(24).reshape(12, 2) + np.array([2 ** 24 + 1, 0])
    np.savez(tmp_path / "ints.npz", embeddings=ints, labels=np.arange(12) % 3)
    got = import_embeddings(tmp_path / "ints.npz").embeddings
    assert got.dtype == np.float32 and np.array_equal(got, ints.astype(np.float32))
