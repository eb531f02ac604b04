
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


def test_unsafe_pickle_refused(tmp_path):
    cfg = default_config("digits_cnn", embed_dim=8)
    m = build_model(cfg)
    p = tmp_path / "evil.pt"
    torch.save({"state_dict": m.state_dict(), "config": cfg, "extra": {"obj": NotATensor()}}, p)
    with pytest.raises(EmbedscopeError, match="--unsafe-pickle"):
        load_checkpoint(p)
    m2, _, info = load_checkpoint(p, unsafe_pickle=True)
    assert _same(m, m2) and isinstance(info["extra"]["obj"], NotATensor)


def test_garbage_file(tmp_path):
    p = tmp_path / "x.pt"
    p.write_bytes(b"hello")
    with pytest.raises(EmbedscopeError):
        load_checkpoint(p)
    with pytest.raises(EmbedscopeError, match="no such"):
        load_checkpoint(tmp_path / "none.pt")


def test_frozen_bn_stays_eval():
    m = EmbeddingModel("resnet18", 8, frozen_bn=True)
    m.train()
    bns = [x for x in m.backbone.modules() if isinstance(x, torch.nn.BatchNorm2d)]
    assert bns and all(not b.training for b in bns)
    assert all(not p.requires_grad for b in bns for p in b.parameters())
    assert m.head.training


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
