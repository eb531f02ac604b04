
import pytest
import torch

from embedscope.errors import EmbedscopeError
from embedscope.models import (
    EmbeddingModel,
    build_model,
    default_config,
    load_backbone_weights,
    load_checkpoint,
    save_checkpoint,
)


class NotATensor:  # needs code to unpickle
    def __init__(self):
        self.x = 1


def _same(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_round_trip(tmp_path):
    torch.manual_seed(0)
    cfg = default_config("digits_cnn", embed_dim=16)
    m = build_model(cfg)
    p = save_checkpoint(tmp_path / "c.pt", m, cfg, extra={"epoch": 3, "metrics": {"R@1": 0.5}})
    obj = torch.load(p, weights_only=True)  # the documented format loads safely
    assert set(obj) >= {"state_dict", "config", "extra"}
    m2, cfg2, info = load_checkpoint(p)
    assert _same(m, m2) and not m2.training
    assert cfg2["arch"] == "digits_cnn" and cfg2["embed_dim"] == 16
    assert info["extra"]["epoch"] == 3 and len(info["sha256"]) == 64
    x = torch.rand(5, 1, 8, 8)
    m.eval()
    torch.testing.assert_close(m(x), m2(x))
    assert torch.allclose(m2(x).norm(dim=1), torch.ones(5))


def test_refuses_overwrite(tmp_path):
    cfg = default_config("digits_cnn", embed_dim=8)
    m = build_model(cfg)
    p = save_checkpoint(tmp_path / "c.pt", m, cfg)
    with pytest.raises(EmbedscopeError, match="already exists"):
        save_checkpoint(p, m, cfg)


def test_bare_state_dict_needs_arch(tmp_path):
    cfg = default_config("digits_cnn", embed_dim=12)
    m = build_model(cfg)
    p = tmp_path / "bare.pt"
    torch.save({"module." + k: v for k, v in m.state_dict().items()}, p)
    with pytest.raises(EmbedscopeError, match="--arch"):
        load_checkpoint(p)
    m2, cfg2, _ = load_checkpoint(p, arch="digits_cnn")
    assert cfg2["embed_dim"] == 12 and _same(m, m2)
    with pytest.raises(EmbedscopeError, match="do not fit"):
        load_checkpoint(p, arch="resnet18")


def test_foreign_objects_load_inert(tmp_path):
    """An object of a class the loader does not know loads as an inert record (its code never runs);
    --unsafe-pickle gives the real object."""
    from embedscope.models import Record

    cfg = default_config("digits_cnn", embed_dim=8)
    m = build_model(cfg)
    p = tmp_path / "foreign.pt"
    torch.save({"state_dict": m.state_dict(), "config": cfg, "extra": {"obj": NotATensor()}}, p)
    m1, _, info1 = load_checkpoint(p)
    assert _same(m, m1) and isinstance(info1["extra"]["obj"], Record)
    assert info1["extra"]["obj"].get("x") == 1 and not isinstance(info1["extra"]["obj"], NotATensor)
    m2, _, info = load_checkpoint(p, unsafe_pickle=True)
    assert _same(m, m2) and isinstance(info["extra"]["obj"], NotATensor)


class Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_code_payload_refused(tmp_path):
    cfg = default_config("digits_cnn", embed_dim=8)
    m = build_model(cfg)
    marker = tmp_path / "ran"
    p = tmp_path / "evil.pt"
    torch.save({"state_dict": m.state_dict(), "config": cfg, "extra": {"obj": Payload(marker)}}, p)
    with pytest.raises(EmbedscopeError, match="--unsafe-pickle") as e:
        load_checkpoint(p)
    assert "posix.system" in str(e.value) or "nt.system" in str(e.value)
    assert not marker.exists()
    load_checkpoint(p, unsafe_pickle=True)  # the payload is real: allowed, it runs
    assert marker.exists()


def test_garbage_file(tmp_path):
    p = tmp_path / "x.pt"
    p.write_bytes(b"hello")
    with pytest.raises(EmbedscopeError, match="not a PyTorch checkpoint"):
        load_checkpoint(p)
    with pytest.raises(EmbedscopeError, match="no such"):
        load_checkpoint(tmp_path / "none.pt")


@pytest.mark.parametrize("kind", ["random", "zeros", "empty", "truncated", "escape", "plain_pickle", "devzero"])
def test_not_a_checkpoint(tmp_path, kind):
    import os
    import pickle

    import numpy as np

    p = tmp_path / "bad.pt"
    if kind == "random":
        p.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    elif kind == "zeros":
        p.write_bytes(bytes(4096))
    elif kind == "empty":
        p.write_bytes(b"")
    elif kind == "truncated":
        cfg = default_config("digits_cnn", embed_dim=8)
        good = save_checkpoint(tmp_path / "good.pt", build_model(cfg), cfg)
        p.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    elif kind == "escape":
        p.write_bytes(b"\x1b[2J\x1b]0;owned\x07" + bytes(range(256)))
    elif kind == "plain_pickle":
        p.write_bytes(pickle.dumps({"a": 1}))
    else:
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero")
        p = "/dev/zero"
    with pytest.raises(EmbedscopeError) as e:
        load_checkpoint(p)
    msg = str(e.value)
    assert "not a PyTorch checkpoint" in msg and "\n" not in msg
    assert all(ord(c) >= 32 for c in msg), repr(msg)


@pytest.mark.parametrize("obj,match", [
    ({"state_dict": [1, 2], "config": {"arch": "digits_cnn"}}, "must be a dict of tensors"),
    ({"state_dict": {"head.weight": 3}, "config": {"arch": "digits_cnn"}}, "not a tensor"),
    ({"state_dict": {"head.weight": torch.zeros(2, 2)}, "config": [1]}, "'config' must be a dict"),
    ("CFG_EMBED_DIM", "'embed_dim' must be an integer"),
    ("CFG_FORMAT_VERSION", "'format_version' must be an integer"),
    ({"weights": torch.zeros(2), "junk": 3}, "unknown checkpoint layout.*expected.*found keys weights, junk"),
    ({"conv1.weight": torch.zeros(2)}, "expected 'backbone.\\*' and 'head.\\*' keys, found conv1.weight"),
])
def test_malformed_checkpoints_one_line(tmp_path, obj, match):
    cfg = default_config("digits_cnn", embed_dim=8)
    sd = build_model(cfg).state_dict()
    if obj == "CFG_EMBED_DIM":
        obj = {"state_dict": sd, "config": dict(cfg, embed_dim="eight")}
    elif obj == "CFG_FORMAT_VERSION":
        obj = {"format": "embedscope-checkpoint", "format_version": "1", "state_dict": sd, "config": cfg}
    p = tmp_path / "m.pt"
    torch.save(obj, p)
    with pytest.raises(EmbedscopeError, match=match) as e:
        load_checkpoint(p, arch="digits_cnn" if "conv1.weight" in str(obj)[:40] else None)
    assert "\n" not in str(e.value)


def test_frozen_bn_stays_eval():
    m = EmbeddingModel("resnet18", 8, frozen_bn=True)
    m.train()
    bns = [x for x in m.backbone.modules() if isinstance(x, torch.nn.BatchNorm2d)]
    assert bns and all(not b.training for b in bns)
    # the statistics are frozen (eval mode); gamma and beta train, as in Roth et al.'s and PML's code
    assert all(p.requires_grad for b in bns for p in b.parameters())
    assert m.head.training
    strict = EmbeddingModel("resnet18", 8, frozen_bn=True, freeze_bn_affine=True)  # train --freeze-bn-affine
    assert all(not p.requires_grad for b in strict.backbone.modules() if isinstance(b, torch.nn.BatchNorm2d)
               for p in b.parameters())


def test_backbone_weights_from_local_file(tmp_path):
    from torchvision.models import resnet18

    torch.manual_seed(1)
    ref = resnet18(weights=None)  # stands in for a torchvision ImageNet file the user names
    p = tmp_path / "resnet18-imagenet.pth"
    torch.save(ref.state_dict(), p)
    m = EmbeddingModel("resnet18", 8)
    load_backbone_weights(m, p)
    torch.testing.assert_close(m.backbone.conv1.weight, ref.conv1.weight)
    with pytest.raises(EmbedscopeError, match="do not fit"):
        load_backbone_weights(EmbeddingModel("digits_cnn", 8), p)


@pytest.mark.parametrize("arch,size,ch", [("resnet18", 64, 3), ("googlenet", 64, 3), ("digits_cnn", 8, 1)])
def test_architectures_embed(arch, size, ch):
    m = build_model(default_config(arch, embed_dim=10)).eval()
    with torch.no_grad():
        z = m(torch.rand(2, ch, size, size))
    assert z.shape == (2, 10)
    torch.testing.assert_close(z.norm(dim=1), torch.ones(2))


def test_resnet50_feature_dim():
    m = build_model(default_config("resnet50", embed_dim=128))
    assert m.feat_dim == 2048 and m.head.out_features == 128
