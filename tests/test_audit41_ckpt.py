"""Audit 41: checkpoints made elsewhere, brought to ``embedscope embed``.

What was wrong before:

- ``--weights`` and ``--trunk`` did not look under ``model`` / ``model_state_dict``: a torchvision
  reference script's checkpoint (``{'model': ..., 'optimizer': ..., 'epoch': ..., 'args': ...}``) or a
  tutorial's ``{'model_state_dict': ..., 'optimizer_state_dict': ...}`` stopped with "no tensors found"
  (``--weights``) or "state dict entry 'model_state_dict' is a OrderedDict, not a tensor" (``--trunk``),
  although the same file given as the checkpoint said to embed it with ``--arch … --weights FILE``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import pytest
import torch
import torchvision
from cli_run import one_error_line, run_cli
from PIL import Image

from embedscope.store import EmbeddingSet

SIZE = 32
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("imgs")
    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (root / c).mkdir()
        for i in range(2):
            Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(root / c / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def resnet18_sd():
    torch.manual_seed(0)
    return torchvision.models.resnet18().state_dict()


def _embed(images, out, *args):
    return run_cli(["embed", "--dataset", "imagefolder", "--root", str(images), "--image-size", str(SIZE),
                    "--no-progress", "-o", str(out), *map(str, args)])


def _reference(images, paths, sd, head=None):
    """An independent forward pass: torchvision's ResNet-18 with the same weights, the documented
    evaluation transform Resize(round(32 * 256 / 224)) + CenterCrop(32) + ImageNet normalisation,
    the classifier replaced by the identity, [head], L2-normalised."""
    import torchvision.transforms as T

    m = torchvision.models.resnet18()
    m.load_state_dict(sd)
    m.fc = torch.nn.Identity()
    m.eval()
    tf = T.Compose([T.Resize(round(SIZE * 256 / 224)), T.CenterCrop(SIZE), T.ToTensor(), T.Normalize(MEAN, STD)])
    x = torch.stack([tf(Image.open(os.path.join(images, p)).convert("RGB")) for p in paths])
    with torch.no_grad():
        y = m(x)
        if head is not None:
            y = head(y)
    return torch.nn.functional.normalize(y, dim=1).numpy()


def _read(out):
    s = EmbeddingSet.load(out)
    return s.embeddings, [str(p) for p in s.paths], s


def test_weights_of_a_torchvision_reference_checkpoint(tmp_path, images, resnet18_sd):
    ckpt = tmp_path / "checkpoint.pth"
    torch.save({"model": resnet18_sd, "optimizer": {"state": {}, "param_groups": []}, "epoch": 3,
                "args": argparse.Namespace(model="resnet18", lr=0.1)}, ckpt)
    out = tmp_path / "e.h5"
    rc, _, err = _embed(images, out, "--arch", "resnet18", "--weights", ckpt)
    assert rc == 0, err
    X, paths, s = _read(out)
    np.testing.assert_allclose(X, _reference(images, paths, resnet18_sd), atol=1e-5)
    assert "training checkpoint (model)" in str(s.attrs.get("checkpoint_format"))


def test_the_hint_for_a_wrapped_backbone_checkpoint_works(tmp_path, images, resnet18_sd):
    ckpt = tmp_path / "ckpt.pt"
    torch.save({"model_state_dict": resnet18_sd, "optimizer_state_dict": {}, "epoch": 1}, ckpt)
    rc, _, err = _embed(images, tmp_path / "x.h5", ckpt)
    assert rc == 1
    line = one_error_line(err, "embed")
    assert f"--arch resnet18 --weights {ckpt}" in line
    out = tmp_path / "e.h5"
    rc, _, err = _embed(images, out, "--arch", "resnet18", "--weights", ckpt)  # what the line says to do
    assert rc == 0, err
    X, paths, _ = _read(out)
    np.testing.assert_allclose(X, _reference(images, paths, resnet18_sd), atol=1e-5)


def test_trunk_under_model_state_dict(tmp_path, images, resnet18_sd):
    trunk_sd = {k: v for k, v in resnet18_sd.items() if not k.startswith("fc.")}
    torch.manual_seed(1)
    emb = torch.nn.Linear(512, 16)
    torch.save({"model_state_dict": trunk_sd, "optimizer_state_dict": {}, "epoch": 2}, tmp_path / "trunk.pth")
    torch.save(emb.state_dict(), tmp_path / "embedder.pth")
    out = tmp_path / "e.h5"
    rc, _, err = _embed(images, out, "--trunk", tmp_path / "trunk.pth", "--embedder", tmp_path / "embedder.pth")
    assert rc == 0, err
    X, paths, _ = _read(out)
    np.testing.assert_allclose(X, _reference(images, paths, resnet18_sd, emb), atol=1e-5)


def test_ema_of_a_torchvision_reference_checkpoint(tmp_path, images, resnet18_sd):
    """torchvision's reference scripts keep ``model_ema`` as a ``torch.optim.swa_utils.AveragedModel``'s
    state dict: ``n_averaged`` beside ``module.*`` (was: missing 100 keys, unexpected 123)."""
    from torch.optim.swa_utils import AveragedModel

    net = torchvision.models.resnet18()
    net.load_state_dict(resnet18_sd)
    ema = AveragedModel(net)
    with torch.no_grad():
        for p in ema.parameters():
            p.mul_(0.5)
    ema_sd = {k[len("module."):]: v for k, v in ema.state_dict().items() if k.startswith("module.")}
    ckpt = tmp_path / "checkpoint.pth"
    torch.save({"model": resnet18_sd, "optimizer": {}, "epoch": 3, "model_ema": ema.state_dict()}, ckpt)
    out = tmp_path / "e.h5"
    rc, _, err = _embed(images, out, "--arch", "resnet18", "--weights", ckpt, "--ema")
    assert rc == 0, err
    X, paths, _ = _read(out)
    np.testing.assert_allclose(X, _reference(images, paths, ema_sd), atol=1e-5)
    swa = tmp_path / "swa.pt"  # an SWA model's state dict saved alone
    torch.save(ema.state_dict(), swa)
    rc, _, err = _embed(images, tmp_path / "s.h5", "--arch", "resnet18", "--weights", swa)
    assert rc == 0, err
    np.testing.assert_allclose(_read(tmp_path / "s.h5")[0], X, atol=1e-6)


def test_import_of_a_state_dict_names_it_in_a_short_line(tmp_path, resnet18_sd):
    """A model's state dict given to ``import`` listed its 122 keys (a 4,000-character line) and said
    nothing of what the file is; a 300-column table listed its 300 columns."""
    sd = tmp_path / "r18.pt"
    torch.save(resnet18_sd, sd)
    rc, _, err = run_cli(["import", str(sd), "-o", str(tmp_path / "x.h5")])
    assert rc == 1
    line = one_error_line(err, "import")
    assert "(+102 more)" in line and len(line) < 1200
    assert "a model's weights (a state dict), not embeddings" in line and "embedscope embed" in line
    import pandas as pd

    wide = tmp_path / "wide.csv"
    pd.DataFrame(np.zeros((3, 300)), columns=[f"e{i}" for i in range(300)]).to_csv(wide, index=False)
    rc, _, err = run_cli(["import", str(wide), "-o", str(tmp_path / "y.h5")])
    line = one_error_line(err, "import")
    assert rc == 1 and "e19 (+280 more)" in line and "e20" not in line and "model's weights" not in line
    emb = tmp_path / "emb.pt"  # embeddings without labels: no word of weights
    torch.save({"embeddings": torch.zeros(4, 3), "feats.weight": torch.zeros(4, 3)}, emb)
    rc, _, err = run_cli(["import", str(emb), "-o", str(tmp_path / "z.h5")])
    assert rc == 1 and "model's weights" not in one_error_line(err, "import")


def test_a_pml_pair_in_one_file(tmp_path, images, resnet18_sd):
    """``torch.save({'trunk': trunk.state_dict(), 'embedder': embedder.state_dict()}, f)`` (the names of
    pytorch-metric-learning's ``models`` dict) embeds as the two files do (was: unknown checkpoint layout)."""
    trunk_sd = {k: v for k, v in resnet18_sd.items() if not k.startswith("fc.")}
    torch.manual_seed(2)
    emb = torch.nn.Linear(512, 24)
    both = tmp_path / "pair.pt"
    torch.save({"trunk": {"module." + k: v for k, v in trunk_sd.items()}, "embedder": emb.state_dict(),
                "epoch": 7}, both)
    out = tmp_path / "e.h5"
    rc, _, err = _embed(images, out, both)
    assert rc == 0, err
    X, paths, s = _read(out)
    np.testing.assert_allclose(X, _reference(images, paths, resnet18_sd, emb), atol=1e-5)
    assert s.attrs["checkpoint"] == str(both.resolve())
    assert "one file" in s.attrs["checkpoint_format"]
    rc, _, err = _embed(images, tmp_path / "x.h5", "--trunk", both, "--embedder", both)
    assert rc == 1 and "give it as the checkpoint" in one_error_line(err, "embed")
    torch.save({"trunk": trunk_sd, "embedder": {}}, tmp_path / "id.pt")  # the identity embedder
    rc, _, err = _embed(images, tmp_path / "i.h5", tmp_path / "id.pt")
    assert rc == 0, err
    X, paths, _ = _read(tmp_path / "i.h5")
    np.testing.assert_allclose(X, _reference(images, paths, resnet18_sd), atol=1e-5)


@pytest.mark.parametrize("layout", ["state_dict", "model", "pair"])
def test_import_of_a_checkpoint_says_what_it_is(tmp_path, layout):
    """A training checkpoint given to ``import`` was "expected a tensor or a dict of tensors, got dict"."""
    sd = {"fc.weight": torch.zeros(2, 3), "fc.bias": torch.zeros(2)}
    obj = {"trunk": sd, "embedder": {}} if layout == "pair" else {layout: sd, "epoch": 3}
    torch.save(obj, tmp_path / "ckpt.pth")
    rc, _, err = run_cli(["import", str(tmp_path / "ckpt.pth"), "-o", str(tmp_path / "x.h5")])
    line = one_error_line(err, "import")
    assert rc == 1 and "got dict" not in line
    assert "a model checkpoint, not embeddings" in line and "embedscope embed" in line
    assert ("trunk, embedder" if layout == "pair" else f"{layout}, epoch") in line


def test_a_run_folder_given_as_the_checkpoint_names_its_file(tmp_path, images):
    """A run's folder (Roth et al.'s code saves checkpoint_Test_discriminative_e_recall@1.pth.tar in one)
    given as the checkpoint was read as a pytorch-metric-learning saved_models folder: "found none", and
    no word of the checkpoint file in it."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint_Test_discriminative_e_recall@1.pth.tar").write_bytes(b"x")
    (run / "\x1b[31mlog.pt").write_bytes(b"x")
    (run / "notes.txt").write_text("x")
    rc, _, err = _embed(images, tmp_path / "x.h5", run)
    line = one_error_line(err, "embed")
    assert rc == 1 and "give that file" in line and "checkpoint_Test_discriminative_e_recall@1.pth.tar" in line
    assert "\x1b" not in line and "\\x1b[31mlog.pt" in line and "notes.txt" not in line
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, _, err = _embed(images, tmp_path / "y.h5", empty)
    assert rc == 1 and "give that file" not in one_error_line(err, "embed")


def test_weights_of_a_lightning_module_beside_its_loss(tmp_path, images, resnet18_sd):
    """A PyTorch Lightning checkpoint whose module keeps the network under an attribute beside a loss
    with weights (``net.*``, ``loss_fn.W``, as pytorch-metric-learning's ArcFaceLoss has) was refused:
    "missing 100 key(s) e.g. conv1.weight; unexpected 123 key(s) e.g. net.conv1.weight"."""
    ckpt = tmp_path / "epoch=3-step=10.ckpt"
    torch.save({"epoch": 3, "global_step": 10, "pytorch-lightning_version": "2.1.0", "optimizer_states": [],
                "state_dict": {**{"net." + k: v for k, v in resnet18_sd.items()}, "loss_fn.W": torch.zeros(512, 5)}},
               ckpt)
    out = tmp_path / "e.h5"
    rc, _, err = _embed(images, out, "--arch", "resnet18", "--weights", ckpt)
    assert rc == 0, err
    assert "'net.*' keys" in err and "loss_fn.W" in err and len(err.strip().splitlines()) == 1
    X, paths, s = _read(out)
    np.testing.assert_allclose(X, _reference(images, paths, resnet18_sd), atol=1e-5)
    assert s.attrs["checkpoint_format"].endswith("(its 'net.*' keys)")
    two = tmp_path / "two.ckpt"  # two networks that fit: which one is not guessed
    torch.save({"state_dict": {**{"a." + k: v for k, v in resnet18_sd.items()},
                               **{"b." + k: v for k, v in resnet18_sd.items()}}}, two)
    rc, _, err = _embed(images, tmp_path / "x.h5", "--arch", "resnet18", "--weights", two)
    assert rc == 1 and "not guessed" in one_error_line(err, "embed")
