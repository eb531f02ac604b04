"""Checkpoints written the way other projects write them (an audit of docs/checkpoint.md).

Each file is built here as that project's saving code writes it (same keys, prefixes and container
types; random weights of the real architectures) and embedscope's embedding is compared with the
network built directly in PyTorch with the same weights.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from embedscope.errors import EmbedscopeError
from embedscope.models import load_model


def _randomise_bn(m, seed=0):
    g = torch.Generator().manual_seed(seed)
    for mod in m.modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            mod.running_mean.copy_((torch.rand(mod.num_features, generator=g) - 0.5) * 0.2)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
    return m


def _features(model):
    """``model`` with its last linear layer (the classifier) replaced by the identity, eval mode."""
    name = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)][-1]
    parent = model
    *path, last = name.split(".")
    for p in path:
        parent = getattr(parent, p)
    setattr(parent, last, nn.Identity())
    return model.eval()


# --------------------------------------------------------------------------- .safetensors weights

def test_safetensors_weights_and_trunk(tmp_path):
    """timm / Hugging Face publish weights as .safetensors (a plain dict of tensors)."""
    from safetensors.torch import save_file
    from torchvision.models import resnet18

    torch.manual_seed(0)
    net = _randomise_bn(resnet18(weights=None))
    f = tmp_path / "model.safetensors"
    save_file(net.state_dict(), str(f))
    model, _, info = load_model(arch="resnet18", weights=f, head="none")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        want = F.normalize(_features(net)(x), dim=1)
        torch.testing.assert_close(model(x), want)
    assert info["format"] == "ImageNet backbone weights"
    # a pytorch-metric-learning trunk / embedder pair stored as safetensors
    emb = nn.Linear(512, 8)
    save_file(emb.state_dict(), str(tmp_path / "embedder.safetensors"))
    save_file({k: v for k, v in net.state_dict().items() if not k.startswith("fc.")}, str(tmp_path / "t.safetensors"))
    m2, _, _ = load_model(trunk=tmp_path / "t.safetensors", embedder=tmp_path / "embedder.safetensors")
    with torch.no_grad():
        torch.testing.assert_close(m2(x), F.normalize(emb(net(x)), dim=1))


def test_damaged_safetensors_one_line(tmp_path):
    from safetensors.torch import save_file

    f = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(64, 64)}, str(f))
    f.write_bytes(f.read_bytes()[:-100])  # truncated
    with pytest.raises(EmbedscopeError, match=r"not a readable safetensors file") as e:
        load_model(arch="resnet18", weights=f, head="none")
    assert "\n" not in str(e.value)
