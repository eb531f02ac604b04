"""Training on the rendered shapes set: the ``shapes_cnn`` backbone, the shapes defaults of the
trainer (BatchNorm trained from scratch, 64 px, a crop that keeps the object), the in-training
evaluation at the run's own input size, and a train -> checkpoint -> embed round trip."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

from embedscope import names, store
from embedscope.cli import main
from embedscope.metrics import retrieval_metrics
from embedscope.models import build_model, default_config, load_checkpoint
from embedscope.models.backbones import EmbeddingModel, ShapesCNN


@pytest.fixture(scope="module")
def shapes_root(tmp_path_factory):
    out = tmp_path_factory.mktemp("shapes") / "set"
    assert main(["make-shapes", "-o", str(out), "--n-images", "120", "--size", "24", "--seed", "1",
                 "--no-progress"]) == 0
    return out


def test_shapes_cnn_forward_shapes_and_parameters():
    assert "shapes_cnn" in names.ARCHS
    net = ShapesCNN()
    # 3x3 convolutions 3->32 (stride 2), 32->64, 64->128, 128->256 without bias, BatchNorm weight+bias each
    convs = 3 * 32 * 9 + 32 * 64 * 9 + 64 * 128 * 9 + 128 * 256 * 9
    bns = 2 * (32 + 64 + 128 + 256)
    assert sum(p.numel() for p in net.parameters()) == convs + bns
    for size in (16, 24, 64, 100):
        assert net(torch.randn(2, 3, size, size)).shape == (2, 256)
    m = EmbeddingModel("shapes_cnn", 24)
    z = m.eval()(torch.randn(5, 3, 64, 64))
    assert z.shape == (5, 24)
    assert torch.allclose(z.norm(dim=1), torch.ones(5), atol=1e-5)
    cfg = default_config("shapes_cnn", embed_dim=16)
    assert cfg["image_size"] == 64 and cfg["frozen_bn"] is False
    assert build_model(cfg).embed_dim == 16


def test_shapes_defaults_train_batchnorm():
    from embedscope.train.trainer import resolve_config

    cfg = resolve_config({"dataset": "shapes", "loss": "multisimilarity"})
    assert (cfg["arch"], cfg["image_size"], cfg["frozen_bn"], cfg["sampler"], cfg["batch_size"], cfg["lr"]) == \
        ("shapes_cnn", 64, False, "spc-8", 64, 1e-3)
    # a from-scratch ResNet on shapes must not freeze its BatchNorm at the initial identity
    assert resolve_config({"dataset": "shapes", "arch": "resnet18"})["frozen_bn"] is False
    # the photo protocol (Roth: ImageNet weights, frozen BN) is unchanged
    assert resolve_config({"dataset": "cub200", "root": "x"})["frozen_bn"] is True


def test_shapes_train_transform_keeps_most_of_the_scene(shapes_root):
    from torchvision import transforms as T

    from embedscope.data import get_dataset, image_transform
    from embedscope.train.trainer import train_transform

    ds = get_dataset("shapes", str(shapes_root))
    tf = train_transform(ds, 32)
    crops = [t for t in tf.transforms if isinstance(t, T.RandomResizedCrop)]
    assert len(crops) == 1 and crops[0].scale == (0.35, 1.0) and crops[0].size == (32, 32)
    x = tf(ds.load_image(0))
    assert x.shape == (3, 32, 32)
    # other data sets keep their kind's transform (Roth's RandomResizedCrop with the default scale)
    photo = type("P", (), {"name": "cub200", "kind": "image"})()
    rrc = [t for t in train_transform(photo, 32).transforms if isinstance(t, T.RandomResizedCrop)]
    assert rrc[0].scale == image_transform("image", train=True, image_size=32).transforms[0].scale == (0.08, 1.0)


def test_train_embed_round_trip_and_logged_metrics_match_embed(shapes_root, tmp_path):
    ckpt = tmp_path / "m.pt"
    assert main(["train", "--dataset", "shapes", "--root", str(shapes_root), "--loss", "multisimilarity",
                 "--epochs", "1", "--batch-size", "16", "--sampler", "spc-4", "--image-size", "24",
                 "--embed-dim", "16", "--device", "cpu", "--no-progress", "-o", str(ckpt)]) == 0
    model, cfg, _ = load_checkpoint(ckpt)
    assert cfg["arch"] == "shapes_cnn" and cfg["image_size"] == 24 and cfg["frozen_bn"] is False
    # BatchNorm was trained (a frozen one would keep weight 1 and bias 0)
    bn = [m for m in model.backbone.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bn and not torch.allclose(bn[0].weight, torch.ones_like(bn[0].weight))
    assert float(bn[0].running_var.sum()) != pytest.approx(float(bn[0].num_features))
    h5 = tmp_path / "e.h5"
    assert main(["embed", str(ckpt), "--dataset", "shapes", "--root", str(shapes_root), "-o", str(h5),
                 "--device", "cpu", "--no-progress"]) == 0
    es = store.load(h5)
    assert es.n == 120 and es.dim == 16 and "yaw" in es.properties
    # the embeddings are the checkpoint's model on the 24-px evaluation input
    from embedscope.data import get_dataset
    from embedscope.embed import checkpoint_input

    ds = get_dataset("shapes", str(shapes_root))
    tf = checkpoint_input(ds, cfg)[0]
    with torch.no_grad():
        z = model(torch.stack([tf(ds.load_image(i)) for i in range(4)])).numpy()
    assert np.allclose(es.embeddings[:4], z, atol=1e-5)
    # the log's test R@1 / MAP@R (epochs 0 and 1) are those of `embed` at the run's input size (not 224 px)
    rows = list(csv.DictReader(open(ckpt.with_suffix(".csv"))))
    test = es.subset("test")
    m = retrieval_metrics(test.embeddings, test.labels, include=["R@1", "MAP@R"])
    assert float(rows[-1]["R@1"]) == pytest.approx(m["R@1"], abs=1e-9)
    assert float(rows[-1]["MAP@R"]) == pytest.approx(m["MAP@R"], abs=1e-6)
    untrained = tmp_path / "u.pt"
    assert main(["train", "--dataset", "shapes", "--root", str(shapes_root), "--loss", "multisimilarity",
                 "--epochs", "0", "--batch-size", "16", "--sampler", "spc-4", "--image-size", "24",
                 "--embed-dim", "16", "--device", "cpu", "--no-progress", "-o", str(untrained)]) == 0
    h5u = tmp_path / "u.h5"
    assert main(["embed", str(untrained), "--dataset", "shapes", "--root", str(shapes_root), "--split", "test",
                 "-o", str(h5u), "--device", "cpu", "--no-progress"]) == 0
    eu = store.load(h5u)
    mu = retrieval_metrics(eu.embeddings, eu.labels, include=["R@1"])
    row0 = list(csv.DictReader(open(untrained.with_suffix(".csv"))))[0]
    assert float(row0["R@1"]) == pytest.approx(mu["R@1"], abs=1e-9)
    assert float(rows[0]["R@1"]) == pytest.approx(mu["R@1"], abs=1e-9)  # the same seed: the same untrained net


def test_frozen_batchnorm_without_weights_is_noted():
    from embedscope.train.trainer import config_notes, resolve_config

    assert any("BatchNorm is frozen" in n for n in config_notes(resolve_config({"dataset": "cub200", "root": "x"})))
    assert not any("BatchNorm" in n for n in config_notes(resolve_config({"dataset": "shapes"})))
    assert not any("BatchNorm" in n for n in config_notes(resolve_config({"dataset": "digits"})))


def test_train_any_torchvision_backbone_and_unknown_arch(shapes_root, tmp_path, capsys):
    """``train --arch`` takes a torchvision classification model by name (as ``embed`` does), and the
    checkpoint embeds as that model."""
    ckpt = tmp_path / "mnv3.pt"
    assert main(["train", "--dataset", "shapes", "--root", str(shapes_root), "--arch", "mobilenet_v3_small",
                 "--epochs", "1", "--batch-size", "16", "--sampler", "spc-4", "--image-size", "32",
                 "--embed-dim", "8", "--device", "cpu", "--no-progress", "-o", str(ckpt)]) == 0
    model, cfg, _ = load_checkpoint(ckpt)
    assert cfg["arch"] == "mobilenet_v3_small" and cfg["embed_dim"] == 8
    assert any(type(m).__name__ == "InvertedResidual" for m in model.backbone.modules())
    h5 = tmp_path / "m.h5"
    assert main(["embed", str(ckpt), "--dataset", "shapes", "--root", str(shapes_root), "--split", "test",
                 "-o", str(h5), "--device", "cpu", "--no-progress"]) == 0
    from embedscope.data import get_dataset
    from embedscope.embed import checkpoint_input

    es = store.load(h5)
    ds = get_dataset("shapes", str(shapes_root)).subset("test")
    tf = checkpoint_input(ds, cfg)[0]
    with torch.no_grad():
        z = model(torch.stack([tf(ds.load_image(i)) for i in range(3)])).numpy()
    assert es.dim == 8 and np.allclose(es.embeddings[:3], z, atol=1e-5)
    capsys.readouterr()
    assert main(["train", "--dataset", "shapes", "--root", str(shapes_root), "--arch", "nosuchnet",
                 "-o", str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown --arch 'nosuchnet'" in err[0] and "efficientnet_b0" in err[0]
    assert not (tmp_path / "x.pt").exists()
