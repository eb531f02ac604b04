"""Audit 42: which part of which file a model was loaded from, and in what precision.

What was wrong before:

- a file holding every tensor of the model plus a custom head was refused naming one key, with nothing
  on what to do.
"""

from __future__ import annotations

import pytest
import test_audit41_ckpt as first
import torch
from cli_run import one_error_line
from test_audit41_ckpt import _embed

from embedscope.errors import EmbedscopeError
from embedscope.models import load_model
from embedscope.models.backbones import build_model, default_config

# the images, weights, command and independent forward pass of audit 41's tests
images, resnet18_sd = first.images, first.resnet18_sd  # (its module-scoped fixtures, shared)


def _trunk(sd):
    return {k: v for k, v in sd.items() if not k.startswith("fc.")}


def _warning_lines(err):
    return [ln for ln in err.strip().splitlines() if ln.strip()]


# --------------------------------------------------------------------------- 4. extra layers: what to do

def test_a_custom_head_beside_the_model_says_what_to_do(tmp_path, images):
    torch.manual_seed(4)
    m = build_model(default_config("resnet18", embed_dim=16, frozen_bn=False))
    sd = {**m.state_dict(), "proj.weight": torch.zeros(4, 16), "proj.bias": torch.zeros(4)}
    torch.save(sd, tmp_path / "p.pt")
    rc, _, err = _embed(images, tmp_path / "x.h5", "--arch", "resnet18", tmp_path / "p.pt")
    assert rc == 1
    line = one_error_line(err, "embed")
    assert "unexpected 2 key(s) e.g. proj.weight, proj.bias" in line and "the model has no such layers" in line
    snippet = line[line.index("torch.save("):line.rindex(")") + 1]
    assert snippet == "torch.save({k: v for k, v in sd.items() if not k.startswith(('proj.',))}, FILE)"
    # the advice, followed, loads the model
    torch.save(eval(snippet.replace("torch.save(", "(").replace(", FILE)", ")"), {"sd": sd}), tmp_path / "ok.pt")
    rc, _, err = _embed(images, tmp_path / "e.h5", "--arch", "resnet18", tmp_path / "ok.pt")
    assert rc == 0, err
    # a trunk with a loss's weights: the same
    torch.save({**_trunk(m.backbone.state_dict()), "arcface.W": torch.zeros(512, 3)}, tmp_path / "t.pt")
    torch.save({}, tmp_path / "id.pt")
    with pytest.raises(EmbedscopeError, match=r"unexpected 1 key\(s\) e.g. arcface.W\); the model has no such "
                                              r"layers.*k.startswith\(\('arcface.',\)\)"):
        load_model(trunk=tmp_path / "t.pt", embedder=tmp_path / "id.pt")

