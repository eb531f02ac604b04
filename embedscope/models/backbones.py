"""Backbones (no download path) and the embedding head of the DML papers.

Architectures:

- the named ones of the papers' protocol: ``resnet50``, ``resnet18``, ``googlenet`` (torchvision),
  ``bninception`` (the Cadene port's key names, :mod:`embedscope.models.bninception`) and
  ``digits_cnn`` for the built-in 8 x 8 digits, ``shapes_cnn`` (:class:`ShapesCNN`) for small RGB
  images such as the rendered ``shapes`` set;
- any torchvision classification model by name (``resnet101``, ``densenet121``,
  ``efficientnet_b0``, ``convnext_tiny``, ``vit_b_16``, ...): its last ``nn.Linear`` (the
  classifier) is replaced by the identity, so the backbone returns the pooled features that fed it;
- a timm model as ``timm:NAME`` when the optional ``timm`` package is installed
  (``pip install embedscope[timm]``), created with ``num_classes=0`` (pooled features).

Weights never come from the network: ``pretrained`` is always off and ImageNet weights load from
a local file (:func:`embedscope.models.load_backbone_weights`).

Heads (:class:`EmbeddingModel`): ``linear`` (``Linear(feat_dim, embed_dim)``, Roth et al. §4.1),
``none`` (the pooled features themselves: the "ImageNet features" baseline), ``random`` (a
seeded, randomly initialised linear layer that is never trained: Roth et al. Table 2's
"ImageNet + random normalised head" baseline, docs/methods.md §7) and ``mlp`` (a stack of linear and
ReLU layers given as ``head_layers``, as in pytorch-metric-learning's embedders).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from embedscope import names
from embedscope.errors import EmbedscopeError
from embedscope.names import bn_affine_frozen  # (torch-free, there: a study's plan reads it)
from embedscope.text import quoted

ARCHS = names.ARCHS
HEADS = ("linear", "none", "random", "mlp")

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: The input that embedscope's transforms produce: RGB in [0, 1], ImageNet mean/std normalised.
STANDARD_INPUT = {"order": "RGB", "range": 1.0, "mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD)}


class MaxPool2d(nn.MaxPool2d):
    """``nn.MaxPool2d`` with the same values, faster on the CPU where no gradient is taken.

    PyTorch's CPU kernel for a contiguous (N, C, H, W) input is slow for the small images of
    ``digits_cnn`` and ``shapes_cnn`` (40% of their inference time); its ``channels_last`` kernel is
    5-9x faster. A maximum is exact and both kernels scan a window in the same order, keeping the
    first maximum (NaN propagates), so the output is the same bit for bit; only inference (no
    gradient needed: ``embed``, evaluation, studies) takes this path, so training and saliency
    gradients run PyTorch's own kernel unchanged. Holds no parameters: state dicts are unchanged.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.dim() == 4 and x.device.type == "cpu" and not (torch.is_grad_enabled() and x.requires_grad)
                and x.is_contiguous()):
            return super().forward(x.contiguous(memory_format=torch.channels_last)).contiguous()
        return super().forward(x)


class DigitsCNN(nn.Module):
    """A small CNN for 1 x 8 x 8 digit images; 128-d pooled features."""

    feat_dim = 128

    def __init__(self, in_channels: int = 1) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
            MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


class ShapesCNN(nn.Module):
    """A small CNN for N x N RGB images (built for the rendered ``shapes`` set at 32-128 px).

    A stride-2 3 x 3 convolution (32 channels), then three blocks of 2 x 2 max pooling and a 3 x 3
    convolution (64, 128, 256 channels), each convolution followed by BatchNorm and ReLU, then
    global average pooling: 256-d features for any input size of at least 16 px. About 0.39 M
    parameters and 15 M multiply-adds per 64-px image (ResNet-18 at 64 px: 11 M parameters,
    150 M), so it trains in minutes on a CPU.
    """

    feat_dim = 256

    def __init__(self, in_channels: int = 3, widths: tuple[int, ...] = (32, 64, 128, 256)) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(in_channels, widths[0], 3, stride=2, padding=1, bias=False),
                                   nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True)]
        for c, w in zip(widths[:-1], widths[1:]):
            layers += [MaxPool2d(2), nn.Conv2d(c, w, 3, padding=1, bias=False), nn.BatchNorm2d(w),
                       nn.ReLU(inplace=True)]
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        self.feat_dim = int(widths[-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


class InputConvention(nn.Module):
    """Convert embedscope's standard input to a backbone's own convention (no parameters).

    embedscope's transforms give RGB values ``v`` in [0, 1] normalised as ``(v - m) / s`` with
    ImageNet's mean ``m`` and std ``s``. A backbone trained on another convention (BN-Inception:
    BGR, [0, 255], mean [104, 117, 128], docs/methods.md §8) gets ``(v * range - mean') / std'`` in its
    channel order. The map is per-channel affine, so the result equals that convention's own
    transform up to float rounding. Nothing is stored in the state dict.
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__()
        order = str(spec.get("order", "RGB")).upper()
        if order not in ("RGB", "BGR"):
            raise EmbedscopeError(f"input convention: order must be RGB or BGR, got {quoted(order)}")
        rng = float(spec.get("range", 1.0))
        mean = torch.tensor([float(v) for v in spec.get("mean", IMAGENET_MEAN)], dtype=torch.float32)
        std = torch.tensor([float(v) for v in spec.get("std", IMAGENET_STD)], dtype=torch.float32)
        perm = [2, 1, 0] if order == "BGR" else [0, 1, 2]
        m0, s0 = torch.tensor(IMAGENET_MEAN)[perm], torch.tensor(IMAGENET_STD)[perm]
        # out_c = ((x_c * s0_c + m0_c) * range - mean_c) / std_c = a_c * x_c + b_c
        a = s0 * rng / std
        b = (m0 * rng - mean) / std
        self.spec = {"order": order, "range": rng, "mean": mean.tolist(), "std": std.tolist()}
        self.perm = perm
        self.register_buffer("a", a.view(1, 3, 1, 1), persistent=False)
        self.register_buffer("b", b.view(1, 3, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.perm != [0, 1, 2]:
            x = x[:, self.perm]
        return x * self.a.to(x.dtype) + self.b.to(x.dtype)


def _set_module(root: nn.Module, dotted: str, new: nn.Module) -> None:
    parent = root
    *path, last = dotted.split(".")
    for p in path:
        parent = getattr(parent, p)
    setattr(parent, last, new)


def _strip_classifier(m: nn.Module, arch: str) -> tuple[nn.Module, int]:
    """Replace the last ``nn.Linear`` (the classifier) by the identity -> (model, its in_features)."""
    linears = [(n, mod) for n, mod in m.named_modules() if isinstance(mod, nn.Linear)]
    if not linears:
        raise EmbedscopeError(
            f"architecture '{arch}' has no linear classifier whose input could serve as pooled features")
    name, lin = linears[-1]
    _set_module(m, name, nn.Identity())
    m.embedscope_classifier = name  # type: ignore[attr-defined]  (keys dropped from ImageNet files)
    return m, int(lin.in_features)


def torchvision_names() -> list[str]:
    """The classification models torchvision offers by name."""
    import torchvision
    from torchvision import models as tvm

    try:
        return sorted(tvm.list_models(module=torchvision.models))
    except (AttributeError, TypeError):  # older torchvision
        return sorted(n for n in dir(tvm) if n.islower() and not n.startswith("_") and callable(getattr(tvm, n)))


def is_known_arch(arch: str) -> bool:
    """True when :func:`make_backbone` can build ``arch`` (timm names count when timm is installed)."""
    if arch in ARCHS:
        return True
    if arch.startswith("timm:"):
        try:
            import timm  # noqa: F401
        except ImportError:
            return False
        return True
    return arch in torchvision_names()


def make_backbone(arch: str, *, transform_input: bool = False, pool: str = "avg") -> tuple[nn.Module, int]:
    """A feature extractor (classifier removed) and its feature dimension; random initialisation.

    ``transform_input`` (GoogLeNet, Inception-v3): torchvision's ImageNet weights for these expect
    its own input re-scaling; set it when loading such a file. ``pool`` (``bninception`` only):
    ``avg`` or ``avg+max`` (Roth et al.'s ``double`` variants).
    """
    if arch == "digits_cnn":
        m = DigitsCNN()
        return m, m.feat_dim
    if arch == "shapes_cnn":
        m = ShapesCNN()
        return m, m.feat_dim
    if arch == "bninception":
        from embedscope.models.bninception import BNInception

        m = BNInception(pool=pool)
        return m, m.feat_dim
    from torchvision import models as tvm  # not for the small CNNs: its import costs ~1 s

    if arch == "googlenet":
        m = tvm.googlenet(weights=None, aux_logits=False, init_weights=True, transform_input=transform_input)
        dim = m.fc.in_features
        m.fc = nn.Identity()
        m.dropout = nn.Identity()
        m.embedscope_classifier = "fc"
        return m, dim
    if arch.startswith("timm:"):
        return _timm_backbone(arch[len("timm:"):])
    names = torchvision_names()
    if arch not in names:
        raise EmbedscopeError(
            f"unknown architecture '{arch}' (choose {', '.join(ARCHS)}, a torchvision classification "
            "model such as resnet101 or efficientnet_b0, or timm:NAME)")
    kwargs: dict[str, Any] = {}
    if arch == "inception_v3":
        kwargs.update(aux_logits=False, init_weights=True, transform_input=transform_input)
    try:
        m = tvm.get_model(arch, weights=None, **kwargs)
    except Exception as e:  # noqa: BLE001 - e.g. a detection model named by mistake
        raise EmbedscopeError(f"cannot build torchvision model '{arch}': {e.__class__.__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}") from None
    return _strip_classifier(m, arch)


def _timm_backbone(name: str) -> tuple[nn.Module, int]:
    try:
        import timm
    except ImportError:
        raise EmbedscopeError(
            f"timm:{name} needs the optional timm package: pip install 'embedscope[timm]'") from None
    try:
        m = timm.create_model(name, pretrained=False, num_classes=0)
    except Exception as e:  # noqa: BLE001 - unknown model name and the like
        raise EmbedscopeError(f"timm cannot create '{name}': {str(e).splitlines()[0] if str(e) else e}") from None
    dim = int(getattr(m, "num_features", 0) or 0)
    if dim <= 0:
        raise EmbedscopeError(f"timm model '{name}' does not report its feature size (num_features)")
    # the classifier's module name(s) in timm's files ("fc", "head.fc", "head", "classifier", ...):
    # num_classes=0 made it the identity, so its keys are dropped from ImageNet / training files
    cls = (getattr(m, "pretrained_cfg", None) or {}).get("classifier")
    names = (cls,) if isinstance(cls, str) else tuple(c for c in (cls or ()) if isinstance(c, str))
    m.embedscope_classifier = names  # type: ignore[attr-defined]
    return m, dim


def _mlp_head(layers: list[Any]) -> nn.Sequential:
    """``layers``: ``"relu"`` or ``[in, out]`` (a linear layer), in order (pytorch-metric-learning's MLP)."""
    mods: list[nn.Module] = []
    for item in layers:
        if item == "relu":
            mods.append(nn.ReLU())
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            mods.append(nn.Linear(int(item[0]), int(item[1])))
        else:
            raise EmbedscopeError(f"head_layers: expected 'relu' or [in, out], got {quoted(item)}")
    return nn.Sequential(*mods)


class EmbeddingModel(nn.Module):
    """backbone -> head -> optional L2 normalisation (Roth §4.1).

    ``head``: ``linear`` (``Linear(feat_dim, embed_dim)``), ``none`` (the pooled features,
    ``embed_dim = feat_dim``), ``random`` (a linear layer drawn with PyTorch's default
    initialisation from ``torch.manual_seed(head_seed)``, meant to stay untrained) or ``mlp``
    (``head_layers``). ``input_space`` (a dict, see :class:`InputConvention`) converts embedscope's
    standard input to the backbone's own convention inside ``forward``.

    ``frozen_bn=True`` keeps every BatchNorm layer of the backbone in eval mode while training: its
    running statistics stay as loaded and normalise every batch, as Roth et al.'s code
    (``architectures/resnet50.py``: the BatchNorm modules in eval mode) and Musgrave et al.'s
    benchmarker (``set_layers_to_eval("BatchNorm")``). Their affine scale and shift (γ, β) are still
    trained, as there. ``freeze_bn_affine=True`` (only with ``frozen_bn``) also keeps γ and β fixed
    (``requires_grad`` off, so the trainer's optimiser leaves them out): what embedscope's frozen
    BatchNorm did before the option existed (:func:`bn_affine_frozen` reads a config of that time).
    """

    def __init__(self, arch: str, embed_dim: int | None = 128, *, normalize: bool = True, frozen_bn: bool = False,
                 freeze_bn_affine: bool = False,
                 head: str = "linear", head_seed: int = 0, head_layers: list[Any] | None = None,
                 input_space: dict[str, Any] | None = None, transform_input: bool = False,
                 pool: str = "avg") -> None:
        super().__init__()
        if head not in HEADS:
            raise EmbedscopeError(f"unknown head '{head}' (choose {', '.join(HEADS)})")
        if freeze_bn_affine and not frozen_bn:
            raise EmbedscopeError("freeze_bn_affine keeps the scale and shift of a frozen BatchNorm fixed: it needs "
                                  "frozen_bn (a BatchNorm that trains its statistics trains its scale and shift too)")
        self.arch = arch
        self.normalize = bool(normalize)
        self.frozen_bn = bool(frozen_bn)
        self.freeze_bn_affine = bool(freeze_bn_affine)
        self.head_kind = head
        self.backbone, self.feat_dim = make_backbone(arch, transform_input=transform_input, pool=pool)
        self.preprocess = InputConvention(input_space) if input_space else None
        if head == "none":
            self.head = nn.Identity()
            self.embed_dim = self.feat_dim
        elif head == "mlp":
            if not head_layers:
                raise EmbedscopeError("head 'mlp' needs head_layers")
            self.head = _mlp_head(head_layers)
            lins = [m for m in self.head if isinstance(m, nn.Linear)]
            if not lins or lins[0].in_features != self.feat_dim:
                raise EmbedscopeError(
                    f"the embedder takes {lins[0].in_features if lins else '?'} inputs but the {arch} trunk "
                    f"gives {self.feat_dim} features")
            self.embed_dim = int(lins[-1].out_features)
        else:
            if embed_dim is None or isinstance(embed_dim, bool) or int(embed_dim) != embed_dim or int(embed_dim) < 1:
                raise EmbedscopeError(f"embed_dim must be a positive integer, got {quoted(embed_dim)}")
            self.embed_dim = int(embed_dim)
            if head == "random":
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(int(head_seed))
                    self.head = nn.Linear(self.feat_dim, self.embed_dim)
            else:
                self.head = nn.Linear(self.feat_dim, self.embed_dim)
        if self.freeze_bn_affine:  # (frozen_bn alone: eval mode in train(), γ and β still trained)
            for m in self.backbone.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    for p in m.parameters():
                        p.requires_grad_(False)

    def train(self, mode: bool = True) -> "EmbeddingModel":
        super().train(mode)
        if mode and self.frozen_bn:
            for m in self.backbone.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.eval()
        return self

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled backbone features of standard (ImageNet-normalised RGB) input."""
        if self.preprocess is not None:
            x = self.preprocess(x)
        return self.backbone(x)

    def forward_native(self, x: torch.Tensor) -> torch.Tensor:
        """Embed input that is already in the backbone's own convention (e.g. BGR x 255 - mean)."""
        z = self.head(self.backbone(x))
        return F.normalize(z, dim=1) if self.normalize else z

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.head(self.features(x))
        return F.normalize(z, dim=1) if self.normalize else z


DEFAULT_CONFIG: dict[str, Any] = {
    "arch": "resnet50",
    "embed_dim": 128,
    "normalize": True,
    "frozen_bn": True,
    "image_size": 224,
    "dataset": None,
}


def default_config(arch: str, **overrides: Any) -> dict[str, Any]:
    """The model config of the papers' protocol, adapted to ``arch``.

    Digits: 8 px, no frozen BN. ``shapes_cnn``: 64 px, no frozen BN. ``bninception``: the Cadene
    port's input convention (BGR, x 255, mean [104, 117, 128]) and Resize(256) + CenterCrop(227), as
    Kobs et al. (docs/methods.md §8).
    """
    cfg = dict(DEFAULT_CONFIG, arch=arch)
    if arch == "digits_cnn":
        cfg.update(image_size=8, frozen_bn=False, dataset="digits")
    elif arch == "shapes_cnn":  # trained from scratch: BatchNorm learns; 64 px, the shapes set's default
        cfg.update(image_size=64, frozen_bn=False)
    elif arch == "bninception":
        from embedscope.models.bninception import CADENE_INPUT

        cfg.update(image_size=227, resize=256, input_space=dict(CADENE_INPUT))
    cfg.update({k: v for k, v in overrides.items() if v is not None})
    return cfg


def _int_field(config: dict[str, Any], key: str, default: Any, minimum: int = 1) -> Any:
    v = config.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise EmbedscopeError(f"checkpoint config: '{key}' must be an integer, got {quoted(v)}")
    try:
        f = float(v)
    except ValueError:
        raise EmbedscopeError(f"checkpoint config: '{key}' must be an integer, got {quoted(v)}") from None
    if not f.is_integer() or f < minimum:
        raise EmbedscopeError(f"checkpoint config: '{key}' must be an integer >= {minimum}, got {quoted(v)}")
    return int(f)


def build_model(config: dict[str, Any]) -> EmbeddingModel:
    """An :class:`EmbeddingModel` from a checkpoint config (one-line error for a malformed config)."""
    if not isinstance(config, dict):
        raise EmbedscopeError(f"checkpoint config must be a dict, got {type(config).__name__}")
    arch = config.get("arch")
    if not isinstance(arch, str) or not arch:
        raise EmbedscopeError(f"checkpoint config: 'arch' must name an architecture, got {quoted(arch)}")
    head = config.get("head", "linear")
    if head not in HEADS:
        raise EmbedscopeError(f"checkpoint config: unknown head {quoted(head)} (choose {', '.join(HEADS)})")
    input_space = config.get("input_space")
    if input_space is not None and not isinstance(input_space, dict):
        raise EmbedscopeError(f"checkpoint config: 'input_space' must be a dict, got {quoted(input_space)}")
    head_layers = config.get("head_layers")
    if head_layers is not None and not isinstance(head_layers, (list, tuple)):
        raise EmbedscopeError(f"checkpoint config: 'head_layers' must be a list, got {quoted(head_layers)}")
    affine = bn_affine_frozen(config)
    if affine and not config.get("frozen_bn"):
        raise EmbedscopeError("checkpoint config: 'freeze_bn_affine' is true but 'frozen_bn' is not (the scale and "
                              "shift are kept fixed only in a frozen BatchNorm)")
    return EmbeddingModel(
        arch,
        _int_field(config, "embed_dim", 128) if head in ("linear", "random") else None,
        normalize=bool(config.get("normalize", True)),
        frozen_bn=bool(config.get("frozen_bn", False)),
        freeze_bn_affine=affine,
        head=head,
        head_seed=_int_field(config, "head_seed", 0, minimum=0),
        head_layers=list(head_layers) if head_layers else None,
        input_space=input_space,
        transform_input=bool(config.get("transform_input", False)),
        pool=str(config.get("pool", "avg")),
    )


def describe_input(config: dict[str, Any]) -> str:
    """Text for the provenance: the backbone's own input convention ("" for the standard one)."""
    spec = config.get("input_space")
    parts = []
    if isinstance(spec, dict):
        mean = ", ".join(f"{float(v):g}" for v in spec.get("mean", ()))
        std = ", ".join(f"{float(v):g}" for v in spec.get("std", ()))
        parts.append(f"model input {spec.get('order', 'RGB')} x {float(spec.get('range', 1.0)):g}, "
                     f"mean [{mean}], std [{std}]")
    if config.get("transform_input"):
        parts.append("torchvision transform_input")
    return "; ".join(parts)
