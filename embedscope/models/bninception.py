"""BN-Inception (Ioffe & Szegedy 2015) with the state-dict key names of the Cadene port.

The DML papers' second backbone (Musgrave et al. 2020, Kobs et al. 2021 through
powerful-benchmarker; Roth et al. 2020 as ``bninception``) is the Caffe BN-Inception as ported to
PyTorch in Cadene's ``pretrainedmodels`` package. Its ImageNet file (``bn_inception-239d2248.pth``)
names every layer flat: ``conv1_7x7_s2``, ``conv1_7x7_s2_bn``, ``inception_3a_1x1``,
``inception_3a_1x1_bn``, ... , ``last_linear``. This module builds the same network with the same
key names (written here from the published layer table, not copied), so such a file loads with
``load_state_dict`` and its weights give the same features.

Input convention of the port (docs/methods.md §8): **BGR** channel order, values in **[0, 255]**, mean
**[104, 117, 128]** (B, G, R) subtracted, std 1. Kobs et al. (powerful-benchmarker) evaluate at
Resize(256) + CenterCrop(227); Cadene's settings list 224 and Roth et al. use 224 — the final
7 x 7 global average pool gives a 1 x 1 map at both sizes. Roth et al.'s code normalises with
mean (0.502, 0.4588, 0.4078) and std 0.0039 on [0, 1] RGB and then flips to BGR: the same mean
(= 128/255, 117/255, 104/255) but a scale of 1/0.0039 = 256.4 instead of 255.

Differences from the port, none of which changes a pretrained model's output in evaluation mode:

- the global pool is an adaptive average pool: the port's ``avg_pool2d`` with a kernel of the map's
  width (earlier versions: ``AvgPool2d(7)``) gives the same on the square 7 x 7 map of 224-231 px
  inputs, and it also works for small test inputs. Checked: with the same random weights, features
  equal the port's to 2e-7 at 224, 227 and 64 px;
- BatchNorm momentum is PyTorch's default (the port's 0.9 is a Caffe-convention value that, in
  PyTorch's convention, replaces the running statistics almost entirely every training step).
"""

from __future__ import annotations

import torch
from torch import nn

from embedscope.text import quoted

# (name, input channels, 1x1, 3x3 reduce, 3x3, double 3x3 reduce, double 3x3 (both), pool proj, pool)
# A "reduction" block (stride 2) has no 1x1 branch and no pool projection (its pool is a max pool).
_BLOCKS = [
    ("3a", 192, 64, 64, 64, 64, 96, 32, "avg"),
    ("3b", 256, 64, 64, 96, 64, 96, 64, "avg"),
    ("3c", 320, None, 128, 160, 64, 96, None, "reduce"),
    ("4a", 576, 224, 64, 96, 96, 128, 128, "avg"),
    ("4b", 576, 192, 96, 128, 96, 128, 128, "avg"),
    ("4c", 576, 160, 128, 160, 128, 160, 128, "avg"),
    ("4d", 608, 96, 128, 192, 160, 192, 128, "avg"),
    ("4e", 608, None, 128, 192, 192, 256, None, "reduce"),
    ("5a", 1056, 352, 192, 320, 160, 224, 128, "avg"),
    ("5b", 1024, 352, 192, 320, 192, 224, 128, "max"),
]

#: The port's input convention (``pretrained_settings['bninception']['imagenet']``).
CADENE_INPUT = {"order": "BGR", "range": 255.0, "mean": [104.0, 117.0, 128.0], "std": [1.0, 1.0, 1.0]}
#: Roth et al.'s normalisation for ``bninception`` runs (BGR after normalising [0, 1] RGB).
ROTH_INPUT = {"order": "BGR", "range": 1.0, "mean": [0.4078, 0.4588, 0.502], "std": [0.0039, 0.0039, 0.0039]}


class BNInception(nn.Module):
    """BN-Inception features -> global average pool -> ``[N, 1024]`` (no classifier).

    Expects input in the port's convention (BGR, [0, 255], mean [104, 117, 128] subtracted);
    :class:`embedscope.models.backbones.InputConvention` converts embedscope's standard input.
    ``pool="avg+max"`` adds the global max pool (Roth et al.'s ``double`` variants).
    """

    feat_dim = 1024

    def __init__(self, pool: str = "avg") -> None:
        super().__init__()
        if pool not in ("avg", "avg+max"):
            raise ValueError(f"pool must be 'avg' or 'avg+max', got {quoted(pool)}")
        self.pool = pool
        self._cbr("conv1_7x7_s2", 3, 64, 7, stride=2, padding=3)
        self._cbr("conv2_3x3_reduce", 64, 64, 1)
        self._cbr("conv2_3x3", 64, 192, 3, padding=1)
        for name, cin, c1, r3, c3, rd, cd, pp, kind in _BLOCKS:
            p = f"inception_{name}_"
            stride = 2 if kind == "reduce" else 1
            if c1 is not None:
                self._cbr(p + "1x1", cin, c1, 1)
            self._cbr(p + "3x3_reduce", cin, r3, 1)
            self._cbr(p + "3x3", r3, c3, 3, stride=stride, padding=1)
            self._cbr(p + "double_3x3_reduce", cin, rd, 1)
            self._cbr(p + "double_3x3_1", rd, cd, 3, padding=1)
            self._cbr(p + "double_3x3_2", cd, cd, 3, stride=stride, padding=1)
            if pp is not None:
                self._cbr(p + "pool_proj", cin, pp, 1)

    def _cbr(self, name: str, cin: int, cout: int, k: int, *, stride: int = 1, padding: int = 0) -> None:
        self.add_module(name, nn.Conv2d(cin, cout, k, stride=stride, padding=padding))
        self.add_module(name + "_bn", nn.BatchNorm2d(cout, eps=1e-5))

    def _run(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(getattr(self, name + "_bn")(getattr(self, name)(x)))

    @staticmethod
    def _maxpool_s2(x: torch.Tensor) -> torch.Tensor:
        return nn.functional.max_pool2d(x, 3, stride=2, ceil_mode=True)

    def _block(self, spec, x: torch.Tensor) -> torch.Tensor:
        name, _cin, c1, _r3, _c3, _rd, _cd, pp, kind = spec
        p = f"inception_{name}_"
        b3 = self._run(p + "3x3", self._run(p + "3x3_reduce", x))
        bd = self._run(p + "double_3x3_2", self._run(p + "double_3x3_1", self._run(p + "double_3x3_reduce", x)))
        if kind == "reduce":
            return torch.cat([b3, bd, self._maxpool_s2(x)], 1)
        b1 = self._run(p + "1x1", x)
        if kind == "avg":
            pooled = nn.functional.avg_pool2d(x, 3, stride=1, padding=1, ceil_mode=True, count_include_pad=True)
        else:
            pooled = nn.functional.max_pool2d(x, 3, stride=1, padding=1, ceil_mode=True)
        return torch.cat([b1, b3, bd, self._run(p + "pool_proj", pooled)], 1)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The last inception block's map ``[N, 1024, h, w]``."""
        x = self._maxpool_s2(self._run("conv1_7x7_s2", x))
        x = self._maxpool_s2(self._run("conv2_3x3", self._run("conv2_3x3_reduce", x)))
        for spec in _BLOCKS:
            x = self._block(spec, x)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.features(x)
        y = nn.functional.adaptive_avg_pool2d(f, 1)
        if self.pool == "avg+max":
            y = y + nn.functional.adaptive_max_pool2d(f, 1)
        return torch.flatten(y, 1)
