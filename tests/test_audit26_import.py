"""Audit 26 (helper-I): models and embeddings made by other tools.

- ``embedscope import`` of another tool's HDF5 file (datasets ``features``, ``meta/y``, ...): it was
  refused as "unknown file type '.h5'", while the analyses refused it as "not an embedscope
  embedding file": such a file could not be used at all.
- a pytorch-metric-learning GoogLeNet trunk trained from scratch (torchvision's ``googlenet()``
  default ``aux_logits=True``) keeps its auxiliary classifiers in the state dict: it was refused
  ("unexpected 20 key(s) e.g. aux1.conv.conv.weight") though its eval-mode forward never uses them.
"""

import hashlib

import h5py
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from embedscope import store
from embedscope.cli import main
from embedscope.errors import EmbedscopeError
from embedscope.importers import import_embeddings


def _foreign_h5(path, X, *, userblock: int = 0):
    n = X.shape[0]
    kw = {"userblock_size": userblock} if userblock else {}
    with h5py.File(path, "w", **kw) as f:
        f["features"] = X
        f["meta/y"] = np.arange(n) % 3
        # fixed-length bytes (numpy 'S', tagged ASCII by h5py) holding UTF-8, and variable-length str
        f["meta/files"] = np.array([f"img/caf\u00e9_{i}.jpg".encode() for i in range(n)])
        f["meta/split"] = np.array(["train", "test"] * (n // 2), dtype=object).astype(h5py.string_dtype())
        f["epoch"] = 7  # a scalar: no key
        f.attrs["model"] = "someone's net"


def test_import_foreign_hdf5_keys_in_groups_text_and_provenance(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((12, 5))  # float64, as other tools often write
    src = tmp_path / "feats.h5"
    _foreign_h5(src, X)
    out = tmp_path / "out.h5"
    assert main(["import", str(src), "--labels", "meta/y", "--paths", "meta/files", "--split", "meta/split",
                 "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    es = store.load(out)
    # float64 -> the nearest float32, element by element
    want = np.array([[np.float32(float(v)) for v in row] for row in X], dtype=np.float32)
    assert es.embeddings.dtype == np.float32 and np.array_equal(es.embeddings, want)
    assert [es.class_names[i] for i in es.labels] == [str(i % 3) for i in range(12)]
    assert list(es.paths) == [f"img/caf\u00e9_{i}.jpg" for i in range(12)]
    assert list(es.split) == ["train", "test"] * 6
    assert es.attrs["import_format"] == "hdf5" and es.attrs["import_embedding_key"] == "features"
    assert es.attrs["import_source"] == str(src.resolve())
    assert es.attrs["import_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    # a file whose HDF5 signature sits after a user block is HDF5 all the same
    ub = tmp_path / "ub.h5"
    _foreign_h5(ub, X, userblock=512)
    es2 = import_embeddings(ub, labels="meta/y")
    assert np.array_equal(es2.embeddings, want)


def test_import_hdf5_bad_input_one_line(tmp_path, capsys):
    from embedscope.errors import UsageError

    (tmp_path / "x.mat").write_bytes(b"")  # a suffix import does not read stays a usage error
    with pytest.raises(UsageError, match=r"unknown file type '\.mat'"):
        import_embeddings(tmp_path / "x.mat")
    X = np.random.default_rng(1).standard_normal((10, 4))
    X[6, 2] = np.nan
    _foreign_h5(tmp_path / "nan.h5", X)
    with pytest.raises(EmbedscopeError, match=r"1 embedding row\(s\) contain NaN or inf \(first: row 6\)"):
        import_embeddings(tmp_path / "nan.h5", labels="meta/y")
    # an embedscope file needs no import: refused, not re-imported with its class names lost
    good = np.random.default_rng(2).standard_normal((6, 3)).astype(np.float32)
    store.save(tmp_path / "mine.h5", store.EmbeddingSet.from_arrays(good, np.array([0, 1, 2] * 2)))
    (tmp_path / "empty.h5").write_bytes(b"")
    _foreign_h5(tmp_path / "whole.h5", good.astype(np.float64))
    (tmp_path / "cut.h5").write_bytes((tmp_path / "whole.h5").read_bytes()[:3000])
    with h5py.File(tmp_path / "maps.h5", "w") as f:  # the attribute a saliency-maps file carries
        f.attrs["format"] = "embedscope-saliency"
        f["maps"] = np.zeros((6, 4, 4), dtype=np.float32)
        f["meta/y"] = np.arange(6) % 3
    for name, msg in (("mine.h5", "already an embedscope embedding file"), ("maps.h5", "a saliency-maps file"),
                      ("empty.h5", "empty.h5: not an HDF5 file: it is empty"), ("cut.h5", "cannot read as hdf5 (OSError")):
        capsys.readouterr()
        assert main(["import", str(tmp_path / name), "--labels", "meta/y", "-o", str(tmp_path / "o.h5")]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("embedscope import: error:") and msg in err[0], err
        assert "Traceback" not in err[0] and not (tmp_path / "o.h5").exists()


def test_pml_googlenet_trunk_with_aux_classifiers(tmp_path):
    from torchvision.models import googlenet

    from embedscope.models import load_model

    torch.manual_seed(5)
    trunk = googlenet(weights=None, aux_logits=True, transform_input=False, init_weights=True)
    for m in trunk.modules():  # running statistics that are not the identity
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    trunk.fc = nn.Identity()
    emb = nn.Linear(1024, 8)
    sd = trunk.state_dict()
    assert any(k.startswith("aux1.") for k in sd)
    torch.save(sd, tmp_path / "trunk_best3.pth")
    torch.save(emb.state_dict(), tmp_path / "embedder_best3.pth")
    model, cfg, _ = load_model(trunk=tmp_path / "trunk_best3.pth", embedder=tmp_path / "embedder_best3.pth",
                               transform_input=False)
    assert cfg["arch"] == "googlenet" and not model.training
    trunk.eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        want = F.normalize(emb(trunk(x)), dim=1)  # the tester: eval mode, normalised
        got = model(x)
    assert torch.equal(got, want)


def test_import_text_stored_as_bytes_is_read_as_utf8(tmp_path, capsys):
    """numpy 'S' arrays (np.char.encode, h5py) of labels, paths and class names: read as UTF-8. A path
    'café_0.jpg' stopped with a bare UnicodeDecodeError naming no file; class names became "b'cat'"."""
    X = np.random.default_rng(3).standard_normal((4, 3))
    paths = [f"caf\u00e9_{i}.jpg" for i in range(4)]
    np.savez(tmp_path / "b.npz", embeddings=X, labels=np.array([0, 1, 0, 1]),
             paths=np.char.encode(np.array(paths), "utf-8"), names=np.array([b"cat", b"dog"]))
    np.save(tmp_path / "names.npy", np.array([b"cat", b"dog"]))
    es = import_embeddings(tmp_path / "b.npz", class_names="names", properties=["paths"])
    assert list(es.paths) == paths and list(es.class_names) == ["cat", "dog"]
    assert list(es.properties["paths"]) == paths  # a property of text stored as bytes
    es = import_embeddings(tmp_path / "b.npz", class_names=str(tmp_path / "names.npy"))
    assert list(es.class_names) == ["cat", "dog"]
    np.savez(tmp_path / "s.npz", embeddings=X, labels=np.array([b"eel", b"ant", b"eel", b"ant"]))
    es = import_embeddings(tmp_path / "s.npz")
    assert [es.class_names[i] for i in es.labels] == ["eel", "ant", "eel", "ant"]
    np.savez(tmp_path / "bad.npz", embeddings=X, labels=np.arange(4), paths=np.array([b"a", b"\xff\xfe", b"c", b"d"]))
    assert main(["import", str(tmp_path / "bad.npz"), "-o", str(tmp_path / "o.h5")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"embedscope import: error: {tmp_path / 'bad.npz'}: paths: row 1 is bytes that are not UTF-8 text"]


def test_import_records_the_files_labels_and_paths_came_from(tmp_path):
    """Provenance: labels, split, paths or class names read from a file of their own name that file
    (only the embeddings' source was recorded: the labels of `import X.npy --labels y.txt` had no origin)."""
    X = np.random.default_rng(4).standard_normal((6, 3)).astype(np.float32)
    np.save(tmp_path / "X.npy", X)
    (tmp_path / "y.txt").write_text("\n".join(str(i % 2) for i in range(6)) + "\n")
    (tmp_path / "p.txt").write_text("\n".join(f"im{i}.png" for i in range(6)) + "\n")
    (tmp_path / "names.txt").write_text("cat\ndog\n")
    out = tmp_path / "o.h5"
    assert main(["import", str(tmp_path / "X.npy"), "--labels", str(tmp_path / "y.txt"), "--paths",
                 str(tmp_path / "p.txt"), "--class-names", str(tmp_path / "names.txt"), "-o", str(out)]) == 0
    attrs = store.load(out).attrs
    assert attrs["import_labels_file"] == str((tmp_path / "y.txt").resolve())
    assert attrs["import_paths_file"] == str((tmp_path / "p.txt").resolve())
    assert attrs["import_class_names_file"] == str((tmp_path / "names.txt").resolve())
    assert "import_split_file" not in attrs


def test_info_shows_the_files_labels_came_from(tmp_path):
    """`embedscope info` lists import_labels_file (docs/import.md: "and info shows them")."""
    from cli_run import run_cli

    np.save(tmp_path / "X.npy", np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32))
    (tmp_path / "y.txt").write_text("".join(f"{i % 2}\n" for i in range(10)))
    rc, _, err = run_cli(["import", tmp_path / "X.npy", "--labels", tmp_path / "y.txt", "-o", tmp_path / "e.h5"])
    assert rc == 0, err
    rc, out, err = run_cli(["info", tmp_path / "e.h5"])
    assert rc == 0, err
    assert any(line.split() == ["import_labels_file", str((tmp_path / "y.txt").resolve())] for line in out.splitlines())
