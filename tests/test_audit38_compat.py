"""Session 38, files embedscope did not write: named HDF5 types, dangling links, a file another process
holds open for writing, training scripts' checkpoint dicts (each test fails on the code before its fix)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch
from cli_run import one_error_line, run_cli
from conftest import save_digits_checkpoint
from held_file import held_for_writing

from embedscope import store
from embedscope.errors import EmbedscopeError


@pytest.fixture
def emb(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4)).astype(np.float32)
    labels = np.arange(40) % 4
    p = tmp_path / "e.h5"
    es = store.EmbeddingSet.from_arrays(X, labels, split="test")
    es.properties = {"color": np.array(["red", "blue"] * 20, dtype=object)}
    store.save(p, es)
    return p


def test_info_lists_a_named_datatype(emb):
    """A committed (named) type, as h5py writes with f['t'] = np.dtype('i2'): `info` failed with
    "AttributeError: 'Datatype' object has no attribute 'shape'"."""
    with h5py.File(emb, "r+") as f:
        f["my_type"] = np.dtype("<i2")
    rc, out, err = run_cli(["info", str(emb)])
    assert rc == 0, err
    assert "/my_type: a named datatype int16" in out


def test_info_names_a_null_dataspace_as_empty(emb):
    with h5py.File(emb, "r+") as f:
        f["nothing"] = h5py.Empty("f8")
    rc, out, err = run_cli(["info", str(emb)])
    assert rc == 0, err
    assert "/nothing: empty (null dataspace)" in out and "/nothing: scalar" not in out


@pytest.mark.parametrize("kind, said", [
    ("soft", "'ghost' is a soft link to /properties/removed that leads to nothing"),
    ("external", "'ghost' is an external link to annotations.h5:/ghost that cannot be opened"),
    ("named", "'ghost' is a named HDF5 datatype"),
])
def test_a_property_that_is_no_dataset_is_said_for_what_it_is(emb, kind, said):
    """Each was "property 'ghost' is an HDF5 group, expected a dataset"."""
    with h5py.File(emb, "r+") as f:
        f["properties/ghost"] = {"soft": lambda: h5py.SoftLink("/properties/removed"),
                                 "external": lambda: h5py.ExternalLink("annotations.h5", "/ghost"),
                                 "named": lambda: np.dtype("i2")}[kind]()
    with pytest.raises(EmbedscopeError, match="expected a dataset") as e:
        store.load(emb)
    assert said in str(e.value) and "group" not in str(e.value)
    rc, _, err = run_cli(["evaluate", str(emb), "--no-progress"])
    assert rc == 1 and said in one_error_line(err, "evaluate")


def test_a_dangling_properties_link_is_not_read_as_no_properties(emb):
    """/properties a soft link to nothing: the file read as one without properties (`x in f` is False
    for a dangling link)."""
    with h5py.File(emb, "r+") as f:
        del f["properties"]
        f["properties"] = h5py.SoftLink("/annotations")
    with pytest.raises(EmbedscopeError, match="'properties' is a soft link to /annotations that leads to nothing"):
        store.load(emb)


def test_embeddings_as_a_link_to_a_missing_file_is_named(emb, tmp_path):
    """Was "not a readable HDF5 file: damaged (... can't open file)" for an intact file."""
    target = tmp_path / "target.h5"
    with h5py.File(emb, "r") as f, h5py.File(target, "w") as t:
        t["emb"] = f["embeddings"][()]
    with h5py.File(emb, "r+") as f:
        del f["embeddings"]
        f["embeddings"] = h5py.ExternalLink("target.h5", "/emb")
    assert store.load(emb).embeddings.shape == (40, 4)  # (read through the link while the file is there)
    target.unlink()
    with pytest.raises(EmbedscopeError) as e:
        store.load(emb)
    assert "'embeddings' is an external link to target.h5:/emb that cannot be opened" in str(e.value)
    assert "damaged" not in str(e.value)


@pytest.mark.parametrize("swmr", [False, True])
def test_a_file_open_for_writing_elsewhere_is_not_called_damaged(emb, tmp_path, swmr):
    """HDF5's file lock refuses a reader while another process writes: that was "damaged or truncated
    (... may use <h5clear file> ...)", a wrong and harmful hint while the writer runs."""
    if swmr:  # SWMR needs the newest superblock: the same file rewritten with libver="latest"
        latest = tmp_path / "latest.h5"
        with h5py.File(emb, "r") as src, h5py.File(latest, "w", libver="latest") as dst:
            for k in src:
                src.copy(k, dst)
            dst.attrs.update(src.attrs)
        emb = latest
    with held_for_writing(emb, libver="latest", swmr=swmr) as message:
        if message is None:
            pytest.skip("HDF5 file locking is off here (HDF5_USE_FILE_LOCKING or the file system)")
        with pytest.raises(EmbedscopeError) as e:
            store.load(emb)
        if swmr:  # (HDF5's consistency flags, which a writer stopped without closing the file leaves too)
            assert "marked open for writing" in str(e.value) and "if none is running" in str(e.value)
        else:
            assert "open for writing by another process" in str(e.value) and "h5clear" not in str(e.value)
        assert "damaged" not in str(e.value)
    assert store.load(emb).embeddings.shape == (40, 4)  # the file was intact all along


def _digits_state_dict(tmp_path):
    path = save_digits_checkpoint(tmp_path / "own.pt", embed_dim=8, seed=3)
    return torch.load(path, weights_only=True)["state_dict"], path


@pytest.mark.parametrize("key", ["model_state_dict", "model"])
def test_a_training_scripts_checkpoint_loads_with_arch(tmp_path, key):
    """{'model_state_dict': sd, 'optimizer_state_dict': ..., 'epoch': 3} (and {'model': sd}), the layouts of
    most training scripts, were refused as an unknown layout."""
    from embedscope.models import load_checkpoint

    sd, own = _digits_state_dict(tmp_path)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1, momentum=0.9).state_dict()
    path = tmp_path / "train.pt"
    torch.save({key: sd, "optimizer_state_dict": opt, "epoch": 3}, path)
    with pytest.raises(EmbedscopeError, match=rf"a training checkpoint \('{key}'\) has no config: name the "
                                              "architecture with --arch"):
        load_checkpoint(path)
    m, cfg, info = load_checkpoint(path, arch="digits_cnn")
    m0, _, _ = load_checkpoint(own)
    x = torch.rand(3, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(m(x), m0(x), rtol=0, atol=0)
    assert info["format"] == f"training checkpoint ('{key}')" and cfg["embed_dim"] == 8


def test_a_state_dict_without_embedscopes_config_is_not_recorded_as_embedscopes(tmp_path):
    from embedscope.models import load_checkpoint

    sd, _ = _digits_state_dict(tmp_path)
    torch.save({"state_dict": sd, "optimizer": {}, "epoch": 2}, tmp_path / "t.pt")
    _, _, info = load_checkpoint(tmp_path / "t.pt", arch="digits_cnn")
    assert info["format"] == "training checkpoint ('state_dict')"


def test_two_candidate_weight_keys_are_not_guessed(tmp_path):
    from embedscope.models import load_checkpoint

    sd, _ = _digits_state_dict(tmp_path)
    torch.save({"model": sd, "model_state_dict": sd}, tmp_path / "two.pt")
    with pytest.raises(EmbedscopeError, match="holds weights under both 'model_state_dict' and 'model': which one "
                                              "to read is not guessed"):
        load_checkpoint(tmp_path / "two.pt", arch="digits_cnn")
