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
    with pytest.raises(UsageError, match="unknown file type"):
        import_embeddings(tmp_path / "x.h5")
    (tmp_path / "junk.npy").write_bytes(b"\x1b[2Jnot numpy")
    with pytest.raises(EmbedscopeError, match="cannot read as npy") as e:
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
