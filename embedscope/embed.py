"""Embedding a data set with a model: the step that produces the HDF5 store."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np

from embedscope.data import ImageDataset, TorchImages, describe_transform, get_dataset, image_transform
from embedscope.errors import EmbedscopeError, UsageError
from embedscope.validation import check_int


def embed_images(model, ds: ImageDataset, *, transform=None, batch_size: int = 128, num_workers: int = 0,
                 device: str = "auto", amp: bool | None = None, progress: bool = True,
                 desc: str = "embed") -> np.ndarray:
    """Embed every image of ``ds`` with ``model`` in evaluation mode -> float32 [N, D].

    ``transform`` defaults to the evaluation transform of the data set's kind. float32 unless
    ``amp=True``: then bfloat16 autocast on CUDA (faster; rows move by ~1e-3 to 1e-2, enough to
    reorder near ties); the output is always float32.
    """
    import torch

    from embedscope.device import resolve_device
    from embedscope.progress import progress_bar

    if int(num_workers) < 0:
        raise EmbedscopeError(f"the number of data loader workers must be >= 0, got {num_workers}")
    dev = resolve_device(device)
    if transform is None:
        size = 8 if ds.kind == "digits" else 224
        transform = image_transform(ds.kind, train=False, image_size=size)
    loader = torch.utils.data.DataLoader(
        TorchImages(ds, transform), batch_size=batch_size, shuffle=False, num_workers=num_workers,
        pin_memory=dev.type == "cuda",
    )
    # errors of worker processes reach here as the same one-line EmbedscopeError (errors.py)
    batches = ((x, idx.numpy()) for x, _, idx in progress_bar(loader, desc=desc, unit="batch", enabled=progress))
    return embed_batches(model, batches, len(ds), device=dev, amp=amp)


def embed_batches(model, batches, n: int, *, device="cpu", amp: bool | None = None) -> np.ndarray:
    """The model loop of :func:`embed_images`: ``model`` in evaluation mode (its mode restored after)
    on each ``(inputs, rows)`` of ``batches`` (``rows``: an index array or a slice of the output)
    -> float32 [n, D]; NaN or inf outputs are a one-line error. ``device``: a ``torch.device``
    or its name; on CUDA, channels-last inputs, and bfloat16 autocast with ``amp=True``."""
    import torch

    dev = torch.device(device)
    use_amp = bool(amp) and dev.type == "cuda"
    was_training = model.training
    model.eval().to(dev)
    if dev.type == "cuda":
        model.to(memory_format=torch.channels_last)
    out = np.empty((n, model.embed_dim), dtype=np.float32)
    amp_ctx = torch.autocast("cuda", dtype=torch.bfloat16) if use_amp else contextlib.nullcontext()
    try:
        with torch.inference_mode(), amp_ctx:
            for x, rows in batches:
                x = x.to(dev, non_blocking=True)
                if dev.type == "cuda" and x.ndim == 4:
                    x = x.contiguous(memory_format=torch.channels_last)
                out[rows] = model(x).float().cpu().numpy()
    finally:
        model.train(was_training)
    if not np.all(np.isfinite(out)):
        raise EmbedscopeError("the model produced NaN or inf embeddings")
    return out


def checkpoint_input(ds: ImageDataset, config: dict, *, verb: str = "embed"):
    """The evaluation input a checkpoint expects on ``ds``: ``(transform, size, description)``.

    One rule for ``embed``, ``saliency`` and ``study``: the digits need the ``digits_cnn`` and photos
    an image backbone; the input size and the optional ``resize`` come from the checkpoint's config
    (default 8 for the digits, 224 for photos).
    """
    if (ds.kind == "digits") != (config["arch"] == "digits_cnn"):
        raise EmbedscopeError(
            f"a {config['arch']} checkpoint cannot {verb} the {ds.name} images "
            f"({'8x8 digits need the digits_cnn' if ds.kind == 'digits' else 'photos need an image backbone'})")
    size = int(config.get("image_size", 8 if ds.kind == "digits" else 224))
    if ds.kind == "digits" and size != 8:
        raise EmbedscopeError(f"the checkpoint expects {size}x{size} inputs, the digits are 8x8")
    resize = config.get("resize")
    transform = image_transform(ds.kind, train=False, image_size=size, resize=resize)
    return transform, size, describe_transform(ds.kind, train=False, image_size=size, resize=resize)


def embed_to_file(checkpoint: str | os.PathLike | None, dataset: str, out: str | os.PathLike, *, root=None,
                  split: str = "all", arch: str | None = None, train_classes=None, batch_size: int = 128,
                  num_workers: int = 0, device: str = "auto", unsafe_pickle: bool = False, force: bool = False,
                  progress: bool = True, weights=None, head: str | None = None, embed_dim: int | None = None,
                  head_seed: int = 0, trunk=None, embedder=None, amp: bool | None = None,
                  image_size: int | None = None, resize: int | None = None) -> Path:
    """Load a model (:func:`embedscope.models.load_model`: a checkpoint, a trunk/embedder pair or an
    ImageNet baseline), embed a data set's split and write the HDF5 store atomically.

    ``amp`` as :func:`embed_images` (None or False: float32 everywhere, as evaluations are
    reported; True: bfloat16 autocast on CUDA). The attribute ``precision`` records which was used ("float32" or
    "bfloat16 autocast"), with ``device`` the device type: bfloat16 rows differ from float32 ones
    by ~1e-3 to 1e-2 (ResNet-50, 128-d unit rows: up to 6.6e-3 in norm, cosine 0.997).

    ``image_size`` / ``resize``: the evaluation transform Resize(resize) + CenterCrop(image_size)
    instead of the checkpoint's (its config's, else 224 and round(224 * 256 / 224) = 256), e.g. 299 /
    342 for torchvision's Inception-v3 preset; the file records the transform used."""
    from embedscope import store
    from embedscope.device import resolve_device
    from embedscope.fileio import check_writable
    from embedscope.models import describe_input, load_model

    check_writable(out, force=force)  # fail before the long work
    if image_size is not None:
        image_size = check_int(image_size, "image_size", min=1)
    if resize is not None:
        resize = check_int(resize, "resize", min=1)
    model, config, info = load_model(checkpoint, arch=arch, weights=weights, head=head, embed_dim=embed_dim,
                                     head_seed=head_seed, trunk=trunk, embedder=embedder,
                                     unsafe_pickle=unsafe_pickle)
    if image_size is not None or resize is not None:
        config = dict(config)
        if image_size is not None:
            config["image_size"] = image_size
            if resize is None:  # the checkpoint's resize belonged to its own crop size
                config.pop("resize", None)
        if resize is not None:
            size = int(config.get("image_size", 224))
            if resize < size:
                raise UsageError(f"--resize {resize} is smaller than the crop size {size}: the centre crop "
                                 "would pad the image (pass --image-size too)")
            config["resize"] = resize
    ds = get_dataset(dataset, root, train_classes=train_classes).subset(split)
    if len(ds) == 0:
        raise EmbedscopeError(f"{dataset}: the '{split}' split is empty")
    if ds.kind == "digits" and (image_size is not None or resize is not None):
        raise UsageError("--image-size and --resize are for photos: the digits are used as they are (8x8)")
    transform, _, input_text = checkpoint_input(ds, config)
    dev = resolve_device(device)
    use_amp = bool(amp) and dev.type == "cuda"
    X = embed_images(model, ds, transform=transform, batch_size=batch_size, num_workers=num_workers,
                     device=device, amp=use_amp, progress=progress, desc=f"embed {ds.name}/{split}")
    es = store.EmbeddingSet(
        embeddings=X, labels=ds.labels, paths=ds.paths, split=ds.split, class_names=ds.class_names,
        properties=ds.properties,
        attrs={
            "dataset": ds.name,
            "root": str(Path(root).resolve()) if root else "",
            "split_selected": split,
            "device": dev.type,
            "precision": "bfloat16 autocast" if use_amp else "float32",
            "transform": "; ".join(x for x in (input_text, describe_input(config)) if x),
            "checkpoint": info["path"] and str(Path(str(info["path"]).split(" + ")[0]).resolve()),
            "checkpoint_format": info["format"],
            "checkpoint_sha256": info["sha256"],
            "checkpoint_config": json.loads(json.dumps(config, sort_keys=True, default=str)),
        },
    )
    return store.save(out, es, force=force)
