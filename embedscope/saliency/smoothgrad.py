"""SmoothGrad saliency maps of embedding models (Kobs et al. §3; docs/methods.md §8).

What is differentiated: the loss-specific distance d_ℓ(f(I), f(I_black)) between the embedding of
the (noisy) preprocessed image and the embedding of a black image (computed once, without noise,
detached), with respect to the preprocessed input, model in eval mode. d_ℓ comes from
:mod:`embedscope.models.distances` and is always computed on L2-normalised embeddings.

SmoothGrad (docs/methods.md §8, Eq. 2): l noisy copies I + N(0, σ²) (the clean image is not one of
them), σ = ``noise`` × (max − min) of that image's preprocessed tensor. Post-processing:

* ``order="paper"`` (default): mean of the signed gradients over the copies → abs → mean over
  colour channels → scale;
* ``order="code"`` (the reference code): per copy the signed channel mean → abs → mean over copies
  → scale.

Scaling, both orders: g ← clip((g − min g) / (p99 − min g), 0, 1) with numpy's linear-interpolation
99th percentile (the paper's "clip at the 99th percentile, scale to [0, 1]", written as the
reference code does it). A map whose p99 equals its minimum is 1 where g > min and 0 elsewhere (all
zeros for a constant gradient) instead of the reference's 0/0.

Why not captum's ``NoiseTunnel`` directly: it takes one σ per input *tensor* (not per image), draws
its noise from torch's global generator, and returns only the mean over the copies. Per-image σ
therefore needs one call per image (no batching of several images' copies), and the code order
needs the per-copy signed channel means it does not return. So this module draws the noise itself
(one seeded generator per image), batches the copies of several images per forward/backward pass,
and takes the per-copy gradients from captum's :class:`captum.attr.Saliency` (``abs=False``). The
noise of image i is ``randn((l, C, H, W), generator=Generator().manual_seed(s_i)) * σ_i`` with
``s_i = image_seed(seed, i)`` (i its position, or its key from ``noise_keys``: ``embedscope saliency``
keys by path), which is exactly the noise ``NoiseTunnel`` draws after
``torch.manual_seed(s_i)`` on the CPU: the paper order equals ``NoiseTunnel(Saliency(f),
nt_type="smoothgrad", nt_samples=l, stdevs=σ_i)`` with ``abs=False`` per image, then abs → channel
mean → scaling, to float rounding (checked in the tests; embedscope runs 3-channel inputs in
channels_last layout, which changes the summation order). On CUDA the noise is drawn on the GPU
(same seeds, another generator: CPU and GPU maps differ in their noise, each is reproducible).

The tensor differentiated is the model's input; for a model with its own input convention
(``model.preprocess`` + ``model.forward_native``, BN-Inception's BGR x 255 - mean) the input in that
convention (:func:`_native_input`). A float64 model runs in float64. σ = 0 (a constant image): the
plain gradient; an image equal to the baseline with σ = 0: an all-zero map (zero gradient).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence

import numpy as np

from embedscope.errors import EmbedscopeError

ORDERS = ("paper", "code")
AMP_CHOICES = ("none", "bf16", "fp16")
# elements of input (copies x C x H x W) per forward/backward batch when batch_size is not given
_AUTO_ELEMENTS = {"cpu": 1 << 23, "cuda": 1 << 25}
_AUTO_MAX_COPIES = 4096
_FP16_SCALE = 1024.0  # fp16 autocast: the distance is scaled before backward against underflow


def image_seed(seed: int, index, stream: int = 0) -> int:
    """The seed of an image's noise: a function of (seed, index, stream) only, so that a map does not
    depend on the batch size or on which other images are in the call.

    ``index``: the image's position in the call (an int), or a key naming the image (a str, e.g. its
    path: ``embedscope saliency`` keys the noise by path, so an image gets the same noise whichever
    other images are explained with it and in whatever order).
    """
    if isinstance(index, (str, bytes)):
        import hashlib

        raw = index.encode("utf-8") if isinstance(index, str) else bytes(index)
        words = np.frombuffer(hashlib.sha256(raw).digest(), dtype="<u4").tolist()
        return int(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(stream), 0x6B6579, *words]).generate_state(1)[0])
    return int(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(index), int(stream)]).generate_state(1)[0])


#: The largest seed (``--seed``'s range, [0, 2**32)): :func:`image_seed` keeps a seed's lowest 32 bits, so a
#: larger one would repeat a smaller one's noise.
MAX_SEED = 2**32 - 1
#: The largest noise level: σ = noise × (max − min) of the image, so 1 = noise as wide as the image's whole
#: value range (Smilkov et al. found 0.1–0.2 best; Kobs et al. use 0.15). More drowns the image: at 1e7 its
#: float32 values are lost under the noise's rounding, and the copies overflow float32 long before 1e308.
MAX_NOISE = 1.0
#: What a noise level must be (the error of :func:`check_noise`; ``embedscope saliency --noise`` says the same).
NOISE_RANGE = "a finite number >= 0 and at most 1 (sigma as a fraction of each image's value range)"


def check_noise(noise, name: str = "noise") -> float:
    """``noise`` as a float in [0, :data:`MAX_NOISE`] (-0 as 0); anything else is an :class:`EmbedscopeError`
    naming ``name`` and the range (docs/saliency.md: a noise level beyond the image's value range is refused,
    not computed: its maps would be of the noise, or NaN where the copies overflow)."""
    import math

    try:
        v = float(noise)
    except (TypeError, ValueError):
        v = float("nan")
    if isinstance(noise, (bool, np.bool_)) or not (math.isfinite(v) and 0 <= v <= MAX_NOISE):
        from embedscope.text import quoted

        raise EmbedscopeError(f"{name} must be {NOISE_RANGE}, got {quoted(noise)}")
    return v + 0.0


def noise_sigma(image, noise: float) -> float:
    """σ = ``noise`` × (max − min) of the preprocessed image tensor (docs/methods.md §8)."""
    return float(noise) * float(image.max() - image.min())


def smoothgrad_noise(image, n_samples: int, noise: float, seed: int, index, *, stream: int = 0,
                     device=None):
    """The l noise tensors added to image ``index`` -> (noise [l, C, H, W], σ).

    ``randn`` (float32) of a generator seeded with :func:`image_seed` times σ (:func:`noise_sigma`);
    the result has the image's dtype (a float64 image gets the same float32 draws, cast exactly).
    """
    import torch

    device = torch.device(device) if device is not None else image.device
    sigma = noise_sigma(image, noise)
    g = torch.Generator(device=device).manual_seed(image_seed(seed, index, stream))
    shape = (int(n_samples),) + tuple(image.shape)
    try:  # an image's l copies are drawn at once (as NoiseTunnel's): l x C x H x W floats
        eps = torch.randn(shape, generator=g, device=device, dtype=torch.float32)
    except (RuntimeError, MemoryError) as e:  # (torch's allocator message, 'run with --debug')
        if isinstance(e, RuntimeError) and "memory" not in str(e).lower():
            raise
        need = 4 * float(np.prod(shape, dtype=np.float64))
        raise EmbedscopeError(f"{int(n_samples)} noisy copies of a {'x'.join(map(str, image.shape))} image need "
                              f"{need / 2**30:.3g} GiB at once, more than can be allocated: fewer copies "
                              "(n_samples, --n-samples)") from None
    if image.dtype == torch.float64:
        eps = eps.double()
    return eps * sigma, sigma


def scale_map(g: np.ndarray, percentile: float = 99.0) -> np.ndarray:
    """clip((g − min g) / (p99 − min g), 0, 1) (docs/methods.md §8; numpy's linear percentile).

    When p99 equals the minimum, 1 where g > min and 0 elsewhere. NaN or inf in ``g`` is an error
    (docs/methods.md §8), not a map: every comparison with NaN is false, which made it all zeros.
    """
    g = np.asarray(g, dtype=np.float64)
    if not np.all(np.isfinite(g)):
        raise EmbedscopeError("the gradient contains NaN or inf")
    lo = float(g.min())
    hi = float(np.percentile(g, percentile))
    if hi > lo:
        return np.clip((g - lo) / (hi - lo), 0.0, 1.0)
    return (g > lo).astype(np.float64)


def postprocess(acc: np.ndarray, order: str) -> np.ndarray:
    """From the accumulated gradients of one image to its map in [0, 1] (docs/methods.md §8).

    ``order="paper"``: ``acc`` is the mean signed gradient [C, H, W] → abs → channel mean → scale.
    ``order="code"``: ``acc`` is the mean over copies of |signed channel mean| [H, W] → scale.
    """
    acc = np.asarray(acc, dtype=np.float64)
    if order == "paper":
        g = np.abs(acc).mean(axis=0)
    elif order == "code":
        g = acc
    else:
        raise EmbedscopeError(f"unknown order '{order}' (choose {', '.join(ORDERS)})")
    return scale_map(g)


def _postprocess_torch(acc, order: str):
    """:func:`postprocess` on the device, in float64, without a host synchronisation (torch.quantile
    interpolates linearly, as numpy's percentile). A gradient with NaN or inf gives an all-NaN map
    (the caller's finiteness check turns it into an error; scaled, it would have become all zeros)."""
    import torch

    g = acc.double()
    g = g.abs().mean(dim=0) if order == "paper" else g
    lo = g.min()
    hi = torch.quantile(g.flatten(), 0.99)
    span = hi - lo
    scaled = ((g - lo) / torch.where(span > 0, span, torch.ones_like(span))).clamp(0.0, 1.0)
    out = torch.where(span > 0, scaled, (g > lo).double())
    return torch.where(torch.isfinite(g).all(), out, torch.full_like(out, float("nan")))


def black_image(kind: str, image_size: int):
    """The black image in the model's input space (docs/methods.md §8: a black image through the same
    evaluation preprocessing; a constant −mean/std per channel for photos, zeros for the digits)."""
    from PIL import Image

    from embedscope.data import image_transform

    t = image_transform(kind, train=False, image_size=int(image_size))
    if kind == "digits":
        return t(Image.fromarray(np.zeros((image_size, image_size), dtype=np.float32), mode="F"))
    side = int(round(image_size * 256 / 224)) + 1
    return t(Image.new("RGB", (side, side)))


class _Images:
    """Uniform access to a tensor / array [N, C, H, W] or a sequence of [C, H, W] tensors."""

    def __init__(self, images, dtype=None, convert=None) -> None:
        import torch

        self.dtype = dtype or torch.float32
        self.convert = convert  # e.g. the model's input convention (:func:`_native_input`)
        self.src = images
        if isinstance(images, np.ndarray):  # float64 kept for a float64 model (as a float64 tensor is)
            keep = images.dtype == np.float64 and self.dtype == torch.float64
            self.src = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float64 if keep else np.float32))
        if isinstance(self.src, torch.Tensor):
            if self.src.ndim != 4:
                raise EmbedscopeError(
                    f"images must be a 4-D tensor N x C x H x W, got shape {tuple(self.src.shape)}")
        elif not hasattr(images, "__len__") or not hasattr(images, "__getitem__"):
            raise EmbedscopeError("images must be a tensor N x C x H x W or a sequence of C x H x W tensors")
        self.n = len(self.src)
        self.shape = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import torch

        x = self.src[i]
        if not isinstance(x, torch.Tensor):
            x = np.asarray(x)
            keep = x.dtype == np.float64 and self.dtype == torch.float64
            x = torch.as_tensor(np.asarray(x, dtype=np.float64 if keep else np.float32))
        x = x.detach().to(self.dtype)
        if x.ndim != 3:
            raise EmbedscopeError(f"image {i}: expected C x H x W, got shape {tuple(x.shape)}")
        if self.shape is None:
            self.shape = tuple(x.shape)
        elif tuple(x.shape) != self.shape:
            raise EmbedscopeError(f"image {i} has shape {tuple(x.shape)}, the first had {self.shape}")
        if not torch.isfinite(x).all():
            raise EmbedscopeError(f"image {i} contains NaN or inf")
        if self.convert is not None:  # on the device of its buffers (the model may have moved to CUDA)
            bufs = list(self.convert.buffers())
            with torch.no_grad():
                x = self.convert(x.to(bufs[0].device if bufs else x.device).unsqueeze(0))[0].detach()
        return x


def _model_dtype(model):
    """float64 for a float64 model (images, noise and gradients then in float64), else float32."""
    import torch

    for t in list(model.parameters()) + list(model.buffers()):
        if t.is_floating_point():
            return torch.float64 if t.dtype == torch.float64 else torch.float32
    return torch.float32


def _native_input(model):
    """(model, convert) for differentiating in the backbone's own input space (docs/methods.md §8).

    A model with an input-convention layer (``model.preprocess``, e.g. BN-Inception's BGR, x 255,
    mean [104, 117, 128]; :class:`embedscope.models.backbones.InputConvention`) turns embedscope's
    ImageNet-normalised input into its own inside ``forward``. The preprocessed input tensor of
    docs/methods.md §8 is that model input: σ is 0.15 × its range, the noise is added to it and the
    gradient taken with respect to it (as Kobs' code, whose transform produces that tensor). Returns
    the model seen from that space (``forward_native``) and the conversion of an image batch; for
    any other model ``(model, None)``.
    """
    import torch

    pre = getattr(model, "preprocess", None)
    if pre is None or not callable(getattr(model, "forward_native", None)):
        return model, None

    class NativeForward(torch.nn.Module):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner
            self.training = inner.training

        def forward(self, x):
            return self.inner.forward_native(x)

    return NativeForward(model), pre


def _resolve_amp(amp, dev):
    import torch

    if amp in (None, False, "none"):
        return None
    if amp in (True, "bf16", "bfloat16"):
        dtype = torch.bfloat16
    elif amp in ("fp16", "float16"):
        dtype = torch.float16
    else:
        raise EmbedscopeError(f"unknown amp '{amp}' (choose {', '.join(AMP_CHOICES)})")
    return dtype if dev.type == "cuda" else None  # a CUDA option; the CPU path stays float32


def auto_batch_size(image_shape: Sequence[int], n_samples: int, device_type: str) -> int:
    """Copies per forward/backward pass: a budget of input elements (8 Mi on the CPU: 55 copies of a
    3 x 224 x 224 image; 32 Mi on CUDA: 222), between 1 and 4096 (``n_samples`` is unused: the
    packing puts several images' copies in one pass whenever the budget holds them)."""
    per = int(np.prod(image_shape))
    budget = _AUTO_ELEMENTS.get(device_type, _AUTO_ELEMENTS["cpu"])
    return int(max(1, min(_AUTO_MAX_COPIES, budget // per)))


def _smoothgrad(model, images, refs, dist_fn: Callable, *, swap: bool, n_samples: int, noise: float,
                order: str, batch_size: int | None, seed: int, stream: int, device: str, amp,
                progress: bool, input_size, desc: str, keys=None, partners=None,
                stats: dict | None = None) -> np.ndarray:
    """The SmoothGrad engine: maps of d(f(x_i + ε), r_i) (or d(r_i, f(x_i + ε)) when ``swap``).

    ``keys[i]``: image i's noise key (:func:`image_seed`; default its position). ``partners``: the
    image whose clean embedding r_i is (a [C, H, W] tensor for all, or an :class:`_Images`); an image
    equal to it with σ = 0 sits at the distance's stationary point, so its gradient is exactly zero
    (float rounding of two separately computed embeddings would otherwise give a map of noise); so is one
    whose noisy copies are all the image itself (σ > 0 too small to change it: ``noise=1e-300`` underflows to
    zero in float32). ``stats`` (when given) gets ``plain``: the number of images whose copies were all the
    image itself (their maps are plain gradients, as with σ = 0).
    """
    import torch
    from captum.attr import Saliency

    from embedscope.device import resolve_device
    from embedscope.progress import progress_bar

    if order not in ORDERS:
        raise EmbedscopeError(f"unknown order '{order}' (choose {', '.join(ORDERS)})")
    from embedscope.validation import check_int

    # integers, checked (int() truncated n_samples=2.5 to 2 and 0.5 to 0, and a seed beyond 2**32 or below 0
    # wrapped: seed=2**32 drew seed 0's noise, seed=-1 that of 2**32 - 1)
    n_samples = check_int(n_samples, "n_samples", min=1)
    seed = check_int(seed, "seed", min=0, max=MAX_SEED)
    noise = check_noise(noise)
    dev = resolve_device(device)
    amp_dtype = _resolve_amp(amp, dev)
    imgs = images if isinstance(images, _Images) else _Images(images)
    n = len(imgs)
    if n == 0:
        return np.zeros((0, 0, 0), dtype=np.float32)
    if keys is not None and len(keys) != n:
        raise EmbedscopeError(f"{len(keys)} noise keys for {n} images")
    dtype = imgs.dtype
    first = imgs[0]
    C, H, W = first.shape
    if input_size is not None:
        want = (int(input_size), int(input_size)) if np.isscalar(input_size) else tuple(int(s) for s in input_size)
        if (H, W) != want:
            raise EmbedscopeError(f"images are {H}x{W} but the model expects {want[0]}x{want[1]} inputs")
    if batch_size is None:
        batch_size = auto_batch_size((C, H, W), n_samples, dev.type)
    batch_size = check_int(batch_size, "batch_size", min=1)
    refs = refs.detach().to(dtype).to(dev)
    if refs.shape[0] not in (1, n):
        raise EmbedscopeError(f"{refs.shape[0]} reference embeddings for {n} images")

    scale = _FP16_SCALE if amp_dtype == torch.float16 else 1.0

    def forward(x, ref):
        ctx = torch.autocast("cuda", dtype=amp_dtype) if amp_dtype is not None else contextlib.nullcontext()
        with ctx:
            z = model(x)
        if z.dtype in (torch.float16, torch.bfloat16):
            z = z.float()
        d = dist_fn(ref, z) if swap else dist_fn(z, ref)
        return d * scale if scale != 1.0 else d

    saliency = Saliency(forward)
    out = np.empty((n, H, W), dtype=np.float32)
    acc_shape = (C, H, W) if order == "paper" else (H, W)
    was_training = model.training
    model.eval().to(dev)
    # channels_last: faster convolutions on CUDA and on the CPU (oneDNN; ResNet-18 fwd+bwd at 224 px
    # measured 14% faster on the 2-core machine); the model is put back in contiguous format after
    channels_last = C > 1
    if channels_last:
        model.to(memory_format=torch.channels_last)

    # the stream of (image index, first copy, number of copies) pieces, packed into batches
    def pieces():
        for i in range(n):
            for c0 in range(0, n_samples, batch_size):
                yield i, c0, min(batch_size, n_samples - c0)

    acc = {}
    n_plain = [0]
    noise_cache = {}
    at_ref: set[int] = set()
    # no parameter gradients are needed: frozen parameters let autograd skip what only they need
    # (restored afterwards); the input gradients are unchanged
    frozen = [p for p in model.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    bar = progress_bar(total=n, desc=desc, unit="img", enabled=progress)
    try:
        batch: list[tuple[int, int, int]] = []
        pending: list = []
        filled = 0

        def run(batch):
            xs, rs = [], []
            for i, c0, k in batch:
                if i not in noise_cache:
                    x = (first if i == 0 else imgs[i]).to(dev)
                    key = i if keys is None else keys[i]
                    eps, sigma = smoothgrad_noise(x, n_samples, noise, seed, key, stream=stream, device=dev)
                    noise_cache[i] = (x, eps)
                    acc[i] = torch.zeros(acc_shape, dtype=dtype, device=dev)
                    # every copy the image itself (sigma 0, or a noise too small to change it in the image's
                    # dtype): the map is the plain gradient's (was: only sigma == 0 counted as such)
                    plain = sigma == 0 or not bool((x.unsqueeze(0) + eps != x.unsqueeze(0)).any())
                    n_plain[0] += plain
                    if plain and partners is not None:
                        partner = partners if isinstance(partners, torch.Tensor) else partners[i]
                        if torch.equal(x.cpu(), partner.detach().to(dtype).cpu()):
                            at_ref.add(i)
                x, eps = noise_cache[i]
                xs.append(x.unsqueeze(0) + eps[c0:c0 + k])
                r = refs[0 if refs.shape[0] == 1 else i]
                rs.append(r.unsqueeze(0).expand(k, -1))
            xb = torch.cat(xs)
            if channels_last:
                xb = xb.contiguous(memory_format=torch.channels_last)
            rb = torch.cat(rs)
            xb.requires_grad_()  # (captum would set it, with a warning)
            try:
                grads = saliency.attribute(xb, abs=False, additional_forward_args=(rb,))
            except RuntimeError as e:
                raise _shape_error(e, (C, H, W)) from None
            grads = grads.to(dtype)
            if scale != 1.0:
                grads = grads / scale
            pos = 0
            for i, c0, k in batch:
                g = grads[pos:pos + k]
                pos += k
                if order == "paper":
                    acc[i] += g.sum(dim=0)
                else:
                    acc[i] += g.mean(dim=1).abs().sum(dim=0)
                if c0 + k == n_samples:  # the image's last copies: finish its map (on the device)
                    if i in at_ref:
                        acc[i].zero_()
                    pending.append((i, _postprocess_torch(acc.pop(i) / n_samples, order)))
                    noise_cache.pop(i)
            if len(pending) >= 64:
                flush()

        def flush():  # one host transfer for many finished maps
            if not pending:
                return
            idx = [i for i, _ in pending]
            maps = torch.stack([m for _, m in pending]).float().cpu().numpy()
            pending.clear()
            bad = ~np.all(np.isfinite(maps), axis=(1, 2))
            if bad.any():
                i = idx[int(np.argmax(bad))]
                name = f" ({keys[i]})" if keys is not None and isinstance(keys[i], str) else ""
                raise EmbedscopeError(f"image {i}{name}: the gradient contains NaN or inf")
            out[idx] = maps
            bar.update(len(idx))

        for piece in pieces():
            if filled + piece[2] > batch_size and batch:
                run(batch)
                batch, filled = [], 0
            batch.append(piece)
            filled += piece[2]
        if batch:
            run(batch)
        flush()
    finally:
        bar.close()
        for p in frozen:
            p.requires_grad_(True)
        model.train(was_training)
        if channels_last:
            model.to(memory_format=torch.contiguous_format)
    if stats is not None:
        stats["plain"] = stats.get("plain", 0) + n_plain[0]
    return out


def _shape_error(e: Exception, shape) -> EmbedscopeError:
    msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else e.__class__.__name__
    return EmbedscopeError(f"the model cannot take inputs of shape {'x'.join(map(str, shape))} ({msg})")


def _dist_fn(distance) -> tuple[Callable, str]:
    from embedscope.models.distances import get_distance

    if distance is None:
        return get_distance("euclidean"), "euclidean"
    if callable(distance):
        return distance, getattr(distance, "__name__", "custom")
    return get_distance(distance), str(distance)


def embed_clean(model, images, *, device: str = "auto", batch_size: int = 256, amp=None):
    """Embeddings of the clean images (eval mode, no gradient) -> tensor [N, D] on the CPU, float32
    (float64 for a float64 model)."""
    import torch

    from embedscope.device import resolve_device

    dev = resolve_device(device)
    amp_dtype = _resolve_amp(amp, dev)
    imgs = images if isinstance(images, _Images) else _Images(images, dtype=_model_dtype(model))
    was_training = model.training
    model.eval().to(dev)
    out = []
    try:
        with torch.no_grad():
            for s in range(0, len(imgs), batch_size):
                x = torch.stack([imgs[i] for i in range(s, min(len(imgs), s + batch_size))]).to(dev)
                ctx = torch.autocast("cuda", dtype=amp_dtype) if amp_dtype is not None else contextlib.nullcontext()
                with ctx:
                    try:
                        z = model(x)
                        out.append((z.float() if z.dtype in (torch.float16, torch.bfloat16) else z).cpu())
                    except RuntimeError as e:
                        raise _shape_error(e, tuple(x.shape[1:])) from None
    finally:
        model.train(was_training)
    return torch.cat(out) if out else torch.zeros((0, 0))


def saliency_maps(model, images, *, distance=None, n_samples: int = 50, noise: float = 0.15,
                  order: str = "paper", batch_size: int | None = None, seed: int = 0, device: str = "auto",
                  amp: Any = None, progress: bool = False, baseline=None, input_size=None,
                  noise_keys: Sequence | None = None, stats: dict | None = None) -> np.ndarray:
    """SmoothGrad saliency maps of an embedding model (Kobs et al. Eq. 1–2; docs/methods.md §8).

    Parameters
    ----------
    model : torch.nn.Module
        Maps a batch [B, C, H, W] to embeddings [B, D]; used in eval mode (restored afterwards). A
        float64 model is run in float64 (images, noise, gradients). A model with its own input
        convention (``model.preprocess`` and ``model.forward_native``, e.g. BN-Inception: BGR, x 255,
        mean [104, 117, 128]) is differentiated in that space: images and baseline are converted
        first, σ is taken from the converted tensor (:func:`_native_input`).
    images : tensor or array [N, C, H, W], or a sequence of [C, H, W] tensors
        Preprocessed inputs (the model's input space). A sequence is read lazily, image by image.
    distance : str or callable, optional
        d_ℓ: a name of :mod:`embedscope.models.distances` (``euclidean`` default, ``sqeuclidean``,
        ``cosine``, ``dot``, ``snr``) or a function (a [B, D], b [B, D]) -> [B]. Use
        :func:`embedscope.models.distances.distance_for_config` for a checkpoint's own distance.
    n_samples : int
        l, the number of noisy copies (50 as the reference code); the clean image is not one.
    noise : float
        σ = noise × (max − min) of each image's tensor (0.15 as the reference code); from 0 to 1
        (:func:`check_noise`: more is refused, the image would drown in the noise).
    order : "paper" or "code"
        Post-processing order (module docstring).
    batch_size : int, optional
        Noisy copies per forward/backward pass; several images' copies share a pass. Default: an
        input-element budget (:func:`auto_batch_size`). The maps do not depend on it beyond float
        rounding.
    seed : int
        Image i's noise depends only on (seed, i): the same call gives the same maps. From 0 to 2**32 − 1
        (``--seed``'s range, :data:`MAX_SEED`); ``seed``, ``n_samples`` and ``batch_size`` are integers, else
        an :class:`EmbedscopeError` (a float was truncated, a seed beyond the range repeated another's noise).
    noise_keys : sequence, optional
        One key per image (e.g. its path) used instead of its position i for the noise seed
        (:func:`image_seed`): the same image then gets the same noise in any call and at any place.
    device : "auto", "cpu" or "cuda"
    amp : None, "bf16" or "fp16"
        Autocast on CUDA for the forward/backward passes (ignored on the CPU). Default: float32.
        fp16 scales the distance by 1024 before the backward pass (and the gradient back).
    progress : bool
        A progress bar over the images.
    baseline : tensor [C, H, W], optional
        The black image in the model's input space; default zeros. For ImageNet-normalised
        photos pass :func:`black_image` (−mean/std per channel).
    input_size : int or (H, W), optional
        The input size the model expects; other sizes raise a one-line error.
    stats : dict, optional
        Gets ``plain``: the number of images whose noisy copies were all the image itself (σ = 0, or a
        ``noise`` too small to change the image in its dtype, e.g. 1e-300): their maps are plain gradients.

    Returns
    -------
    ndarray float32 [N, H, W], each map in [0, 1] (1 = most salient). An image equal to the baseline
    with σ = 0 (a constant image, or ``noise=0``) has a zero gradient: its map is all zeros, as any
    map whose gradient is zero everywhere (docs/saliency.md).
    """
    import torch

    dist_fn, _ = _dist_fn(distance)
    net, convert = _native_input(model)
    dtype = _model_dtype(model)
    imgs = images.src if isinstance(images, _Images) else images
    imgs = _Images(imgs, dtype=dtype, convert=convert)
    if len(imgs) == 0:
        return np.zeros((0, 0, 0), dtype=np.float32)
    shape = imgs[0].shape  # the conversion keeps the shape
    if baseline is None:
        base = torch.zeros((1,) + tuple(shape), dtype=dtype)
    else:
        base = torch.as_tensor(baseline).to(dtype)
        base = base.unsqueeze(0) if base.ndim == 3 else base
        if tuple(base.shape[1:]) != tuple(shape):
            raise EmbedscopeError(f"the baseline has shape {tuple(base.shape[1:])}, the images {tuple(shape)}")
    base = _Images(base, dtype=dtype, convert=convert)
    ref = embed_clean(net, base, device=device, amp=amp)
    return _smoothgrad(net, imgs, ref, dist_fn, swap=False, n_samples=n_samples, noise=noise, order=order,
                       batch_size=batch_size, seed=seed, stream=0, device=device, amp=amp, progress=progress,
                       input_size=input_size, desc="saliency", keys=noise_keys, partners=base[0], stats=stats)


def pair_saliency_maps(model, queries, retrievals, *, distance=None, n_samples: int = 50, noise: float = 0.15,
                       order: str = "paper", batch_size: int | None = None, seed: int = 0, device: str = "auto",
                       amp: Any = None, progress: bool = False, input_size=None,
                       noise_keys: Sequence | None = None, stats: dict | None = None) -> dict[str, np.ndarray]:
    """Saliency of the similarity of two images (beyond Kobs; docs/methods.md §8 machinery).

    For each pair (q_i, r_i): the SmoothGrad map of d(f(q_i + ε), f(r_i)) with respect to the query
    (the retrieval's embedding clean and detached), and of d(f(q_i), f(r_i + ε)) with respect to
    the retrieval; same noise, orders and scaling as :func:`saliency_maps` (the retrieval maps use
    their own noise stream). ``noise_keys``: one key per pair (e.g. the query's path) for both maps'
    noise instead of the pair's position. Float64 models and models with their own input convention
    as :func:`saliency_maps`; ``stats`` as :func:`saliency_maps`' (``plain`` counts the query and retrieval maps).
    Returns ``{"query": [N, H, W], "retrieval": [N, H, W], "distance": [N]}``
    (the distance of the clean pair).
    """
    dist_fn, _ = _dist_fn(distance)
    net, convert = _native_input(model)
    dtype = _model_dtype(model)
    q = _Images(queries.src if isinstance(queries, _Images) else queries, dtype=dtype, convert=convert)
    r = _Images(retrievals.src if isinstance(retrievals, _Images) else retrievals, dtype=dtype, convert=convert)
    if len(q) != len(r):
        raise EmbedscopeError(f"{len(q)} queries but {len(r)} retrievals: pairs need one of each")
    zq = embed_clean(net, q, device=device, amp=amp)
    zr = embed_clean(net, r, device=device, amp=amp)
    common = dict(n_samples=n_samples, noise=noise, order=order, batch_size=batch_size, seed=seed,
                  device=device, amp=amp, progress=progress, input_size=input_size, keys=noise_keys, stats=stats)
    mq = _smoothgrad(net, q, zr, dist_fn, swap=False, stream=1, desc="saliency (queries)", partners=r, **common)
    mr = _smoothgrad(net, r, zq, dist_fn, swap=True, stream=2, desc="saliency (retrievals)", partners=q, **common)
    d = dist_fn(zq, zr).detach().cpu().numpy().astype(np.float32) if len(q) else np.zeros(0, np.float32)
    return {"query": mq, "retrieval": mr, "distance": d}


def nearest_retrievals(queries_z, refs_z, distance, *, exclude=None, block: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """For each query embedding its nearest reference under ``distance`` (docs/methods.md §8's d_ℓ).

    ``exclude[i]``: a reference index never returned for query i (the query itself), or -1.
    Returns (index [Q], distance value [Q]). Query by query, each against every reference through
    the distance's own pair form (one [N, D] pass at a time; the same values the maps' distance
    takes, SNR included); ``block`` is accepted and unused. The queries are the maps' few images,
    so no matrix product is needed.
    """
    import torch

    from embedscope.models.distances import CLOSER_IS, get_distance

    dist_fn = get_distance(distance)
    larger = CLOSER_IS[distance] == "larger"
    Q = queries_z.shape[0]
    idx = np.empty(Q, dtype=np.int64)
    val = np.empty(Q, dtype=np.float32)
    if refs_z.shape[0] < 1 + (exclude is not None):
        raise EmbedscopeError("no other image to retrieve: the split needs at least two images")
    R = torch.as_tensor(refs_z, dtype=torch.float32)
    for i in range(Q):
        qi = torch.as_tensor(queries_z[i:i + 1], dtype=torch.float32)
        d = dist_fn(qi.expand(R.shape[0], -1), R)
        if exclude is not None and exclude[i] >= 0:
            d[int(exclude[i])] = -torch.inf if larger else torch.inf
        j = int(torch.argmax(d) if larger else torch.argmin(d))
        idx[i] = j
        val[i] = float(d[j])
    return idx, val


__all__ = ["ORDERS", "AMP_CHOICES", "saliency_maps", "pair_saliency_maps", "nearest_retrievals", "postprocess",
           "scale_map", "smoothgrad_noise", "image_seed", "noise_sigma", "check_noise", "MAX_NOISE", "black_image", "embed_clean",
           "auto_batch_size"]
