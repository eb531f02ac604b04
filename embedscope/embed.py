"""Embedding a data set with a model: the step that produces the HDF5 store."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from embedscope.data import ImageDataset, TorchImages, describe_transform, get_dataset, image_transform
from embedscope.errors import EmbedscopeError, UsageError
from embedscope.validation import check_int


class NonFiniteEmbeddings(EmbedscopeError):
    """The model produced NaN or inf embeddings (one line, exit 1): ``rows`` are the rows of the
    output that hold them, of ``n`` in all. :func:`embed_images` names the first image."""

    def __init__(self, message: str, rows=(), n: int = 0) -> None:
        super().__init__(message)
        self.rows = np.asarray(rows, dtype=np.int64)
        self.n = int(n)

    def __reduce__(self):
        return (type(self), (str(self), self.rows.tolist(), self.n))


def nonfinite_weights(model) -> str | None:
    """The first parameter or buffer of ``model`` that holds NaN or inf, as ``"name (k of n values)"``;
    None when every floating-point tensor is finite."""
    import torch

    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.is_floating_point() or t.is_complex():
            ok = torch.isfinite(t.detach())
            if not bool(ok.all()):
                return f"{name} ({int((~ok).sum())} of {t.numel()} values)"
    return None


#: the batch size of ``train``'s evaluation (embedscope/train/trainer.py ``eval_bs``): the digits
#: in batches of 256, every other data set in batches of 128
EVALUATION_BATCH = {"digits": 256}


def evaluation_batch_size(kind: str) -> int:
    """The batch size in which ``train``'s evaluation embeds each split of a data set of ``kind``
    (256 for the digits, 128 for photos): ``embed`` (without ``--batch-size``) and ``study`` embed in
    it, so that a checkpoint's rows are those its training log's ρ and R@1 were computed from, to
    the last bit (a convolution's last bits depend on the batch it runs in)."""
    return EVALUATION_BATCH.get(kind, 128)


def split_rows(split) -> list[np.ndarray]:
    """The rows of each split of ``split`` (one value per row), in the order the splits first appear."""
    split = np.asarray(split)
    return [np.flatnonzero(split == s) for s in dict.fromkeys(split.tolist())]


def nonfinite_message(model, ds: ImageDataset, rows, n: int | None = None) -> str:
    """The one line of :class:`NonFiniteEmbeddings` for ``model`` on ``ds``, whose ``rows`` (of
    ``n``, default ``len(ds)``) embedded to NaN or inf: how many images, the first one, and the
    first weight that holds NaN or inf (:func:`nonfinite_weights`), else that the weights are finite.
    Needs no embedding: the rows are those an embedding found."""
    rows = np.asarray(rows)
    n = len(ds) if n is None else int(n)
    first = int(rows[0])
    weights = nonfinite_weights(model)
    why = (f"; the model's weights hold NaN or inf: {weights}" if weights
           else "; its weights are finite: the NaN or inf arise in the computation (an overflow?)")
    return (f"the model embeds {len(rows)} of {n} images of {ds.name} to NaN or inf (the first: row "
            f"{first}, {str(ds.paths[first])}){why}")


def embed_images(model, ds: ImageDataset, *, transform=None, batch_size: int = 128, num_workers: int = 0,
                 device: str = "auto", amp: bool | None = None, progress: bool = True,
                 desc: str = "embed", by_split: bool = False, inputs=None) -> np.ndarray:
    """Embed every image of ``ds`` with ``model`` in evaluation mode -> float32 [N, D], rows in the
    order of ``ds``.

    ``transform`` defaults to the evaluation transform of the data set's kind. float32 unless
    ``amp=True``: then bfloat16 autocast on CUDA (faster; rows move by ~1e-3 to 1e-2, enough to
    reorder near ties); the output is always float32.

    ``by_split``: each split of ``ds`` embedded on its own, the rows of a split in the batches of
    ``batch_size`` that ``ds.subset(split)`` gives (:func:`split_rows`), one progress bar for all:
    what ``train``'s evaluation embeds (in :func:`evaluation_batch_size`), so that ρ (training split)
    and R@1 (test split) of these rows are its log's to the last bit. A batch that mixed the splits
    changed the last bits of a convolution's output (up to 7e-8) and ρ by ~1e-9 relative
    (docs/studies.md). ``embed`` and ``study`` both embed this way. One DataLoader serves every split
    (its batch sampler the splits' batches in turn): ``num_workers`` processes start once, not per split.

    ``inputs``: the images of ``ds`` already through ``transform``, stacked [N, C, H, W] (a study
    decodes a small data set once per process); the batches are taken from it, the same numbers as
    those read from ``ds``.

    NaN or inf in the output is :class:`NonFiniteEmbeddings`, its line from :func:`nonfinite_message`.
    """
    import torch

    from embedscope.device import resolve_device
    from embedscope.progress import progress_bar

    # (a batch_size of 0 was range()'s bare ValueError, 2.5 was taken as 2, silently)
    num_workers = check_int(num_workers, "num_workers", min=0)
    batch_size = check_int(batch_size, "batch_size", min=1)
    dev = resolve_device(device)
    if transform is None:
        size = 8 if ds.kind == "digits" else 224
        transform = image_transform(ds.kind, train=False, image_size=size)
    groups = split_rows(ds.split) if by_split else [np.arange(len(ds))]
    # each group in its own batches (a batch never mixes two splits), in the order of the groups
    order = [rows[s:s + batch_size] for rows in groups for s in range(0, len(rows), batch_size)]

    def loader_batches():
        """(inputs, rows of ds) of every batch of ``order``: one DataLoader over all of ``ds`` whose
        batch sampler is ``order``, so that its worker processes start once for the whole pass, not
        once per split (the same images in the same batches as a loader per split)."""
        if inputs is not None:
            for part in order:
                yield inputs[torch.from_numpy(part)], part
            return
        if not order:  # (no rows: no workers to start)
            return
        loader = torch.utils.data.DataLoader(
            TorchImages(ds, transform), batch_sampler=[part.tolist() for part in order],
            num_workers=num_workers, pin_memory=dev.type == "cuda",
            worker_init_fn=quiet_worker if int(num_workers) > 0 else None,
        )
        # errors of worker processes reach here as the same one-line EmbedscopeError (errors.py)
        for x, _, idx in (start_workers(loader) if int(num_workers) > 0 else loader):
            yield x, idx.numpy()

    batches = progress_bar(loader_batches(), total=len(order), desc=desc, unit="batch", enabled=progress)
    try:
        return embed_batches(model, batches, len(ds), device=dev, amp=amp)
    except NonFiniteEmbeddings as e:  # name the first image (the rows are the data set's)
        raise NonFiniteEmbeddings(nonfinite_message(model, ds, e.rows, e.n), e.rows, e.n) from None


def start_workers(loader):
    """``iter(loader)`` (the worker processes started) with Ctrl-C and SIGTERM held until it is done.

    Interrupted while it starts its workers, torch's iterator was left half-built: the command's
    'interrupted' line was followed by "Exception ignored in ... _MultiProcessingDataLoaderIter.__del__
    ... AttributeError: ... no attribute '_shutdown'" (and the workers it had started were left to the
    exit). A signal that arrives meanwhile is raised again right after, on a whole iterator, which
    then shuts its workers down as usual. Held for the few tens of ms of the fork, not longer."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return iter(loader)
    held: list[int] = []
    old: dict = {}
    holder = os.getpid()

    def hold(signum, frame):
        if os.getpid() != holder:  # a worker forked meanwhile: the handler it had before
            return old[signum](signum, frame)
        held.append(signum)

    from embedscope.errors import stop_signals

    try:
        for sig in stop_signals():
            handler = signal.getsignal(sig)
            if callable(handler):  # a Python handler (an ignored or default signal is left as it is)
                old[sig] = handler
                signal.signal(sig, hold)
        return iter(loader)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if held:
            signal.raise_signal(held[0])  # as it would have been handled: the command's handler raises


def quiet_worker(worker_id: int) -> None:
    """``worker_init_fn`` of a DataLoader whose workers must stay quiet when the command is stopped.

    Ctrl-C reaches the whole process group: a worker ignores it and leaves it to its parent, which
    shuts the workers down. A batch's tensors travel as file descriptors that the parent fetches from
    the worker (multiprocessing's resource sharer, a thread of the worker): a parent stopped in the
    middle of such a hand-over closed the connection, and the worker printed a ConnectionResetError
    traceback after the command's 'interrupted' line. That error, and only that one, is now silent.
    """
    import signal
    import sys

    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.excepthook = _without_peer_gone(sys.excepthook)


def _from_resource_sharer(tb) -> bool:
    while tb is not None:
        if os.path.basename(tb.tb_frame.f_code.co_filename) == "resource_sharer.py":
            return True
        tb = tb.tb_next
    return False


def _without_peer_gone(previous):
    """``sys.excepthook`` that says nothing of a resource-sharer connection its peer closed."""

    def hook(kind, value, tb):
        if issubclass(kind, (ConnectionError, EOFError)) and _from_resource_sharer(tb):
            return  # the parent stopped while it fetched a batch from this worker; it ends the worker
        previous(kind, value, tb)

    return hook


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
    bad = ~np.all(np.isfinite(out), axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)
        raise NonFiniteEmbeddings(f"the model produced NaN or inf embeddings for {len(rows)} of {n} inputs "
                                  f"(the first: row {int(rows[0])})", rows, n)
    return out


def degenerate_notes(X: np.ndarray, paths) -> list[str]:
    """What is degenerate about finite embeddings ``X`` (rows named by ``paths``), in words: rows that
    are all zeros, and one embedding for every image (a collapsed model)."""
    from embedscope.validation import one_point, zero_rows

    X = np.asarray(X)
    out = []
    z = zero_rows(X)
    if len(z):
        out.append(f"{len(z)} of {len(X)} embeddings are all zeros (the first: {paths[int(z[0])]}): they "
                   "have no direction, so cosine analyses refuse them (a Euclidean metric takes them)")
    if len(z) < len(X) and one_point(X):
        out.append(f"all {len(X)} images have the same embedding: the model's output does not depend on its input "
                   "(a collapsed model): every retrieval is a tie, and its saliency maps are all zero (zero gradients)")
    return out


def empty_classes_note(ds: ImageDataset, split: str = "all") -> str | None:
    """What a data set whose class list names classes without images (a CUB ``classes.txt`` or a CARS
    ``class_names`` longer than the images, a copy trimmed to some classes) gives: how many classes have
    no images, the first of them, and how many images and classes each split of ``split`` (of ``ds``,
    the whole data set) then holds. The zero-shot split counts the listed classes (the first half
    train), so such a copy can leave a split with no images, which ``evaluate`` found only later
    ("no 'test' rows"). None when every listed class has images."""
    from embedscope.text import quoted

    n = len(ds.class_names)
    empty = np.setdiff1d(np.arange(n), np.unique(np.asarray(ds.labels)))
    if not len(empty):
        return None
    held = []
    for s in (("train", "test") if split in (None, "all") else (split,)):
        rows = np.asarray(ds.split) == s
        k = len(np.unique(np.asarray(ds.labels)[rows]))
        held.append(f"'{s}' holds {int(rows.sum())} images of {k} classes" if rows.any() else f"'{s}' holds none")
    return (f"{len(empty)} of the {n} classes the data set lists have no images (the first: "
            f"{quoted(str(ds.class_names[int(empty[0])]))}); the split is by the listed classes: "
            f"{', '.join(held)}")


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


def check_fixed_input(model, size: int) -> None:
    """Refuse (a usage error) an input size that a model built for one size cannot take: torchvision's
    Vision Transformers (``vit_b_16``, ...) assert their own ``image_size`` in every forward pass, which
    was a raw "AssertionError: Wrong image height! Expected 224 but got 32!" after the data were read."""
    for m in model.modules():
        fixed = getattr(m, "image_size", None)
        if type(m).__name__ == "VisionTransformer" and isinstance(fixed, int) and fixed != int(size):
            raise UsageError(f"--image-size {int(size)}: this Vision Transformer takes {fixed}x{fixed} inputs only "
                             f"(its position embeddings are of that size): leave --image-size out or give {fixed}")
        # timm's ViTs (timm:vit_*): the patch embedding asserts its img_size unless built dynamic or not strict
        img = getattr(m, "img_size", None)
        if (type(m).__name__ == "PatchEmbed" and isinstance(img, tuple) and len(img) == 2
                and getattr(m, "strict_img_size", False) and not getattr(m, "dynamic_img_size", False)
                and tuple(int(v) for v in img) != (int(size), int(size))):
            h, w = (int(v) for v in img)
            raise UsageError(f"--image-size {int(size)}: this Vision Transformer takes {h}x{w} inputs only (its "
                             f"position embeddings are of that size): leave --image-size out or give {h}")


def checkpoint_train_classes(config: dict, dataset: str, train_classes: int | None) -> tuple[int | None, str | None]:
    """The ``--train-classes`` of an embedding -> ``(value, note or None)``.

    A checkpoint trained with ``train --train-classes N`` on this data set (its config's
    ``dataset`` and ``train_classes``) is embedded with that split by default, as ``study`` embeds
    it and as its log's test R@1 was measured: the data set's own split would put some of its
    training classes into the test split. A value given is kept (with a note when it differs from
    the checkpoint's); any other checkpoint leaves the data set's own split.
    """
    from embedscope.data import same_dataset

    tc = config.get("train_classes")
    name = config.get("dataset")
    if tc in (None, "") or not isinstance(name, str) or not same_dataset(name, str(dataset)):
        return train_classes, None
    tc = int(tc)
    if train_classes is None:
        return tc, (f"--train-classes {tc}, the split the checkpoint was trained with (its first {tc} classes "
                    "train, the rest test; give --train-classes to choose another)")
    if int(train_classes) != tc:
        return train_classes, (f"the checkpoint was trained on the first {tc} classes (--train-classes {tc}); "
                               f"with --train-classes {int(train_classes)} this file's split differs from its training's")
    return train_classes, None


def checkpoint_root(config: dict, dataset: str, root, *, verb: str = "embed") -> tuple:
    """The data set folder (``--root``) of ``embed`` (``verb="explain"``: of ``saliency``) -> ``(root,
    note or None)``.

    A checkpoint trained with ``train --root DIR`` on this data set (its config's ``dataset`` and
    ``root``) is embedded on that folder's images by default, as its ``--train-classes`` split is
    (:func:`checkpoint_train_classes`): without it, ``shapes`` embedded the default generated set,
    other images than the run's, and the file's R@1 was not its log's. The config's folder is taken
    as written (relative to the working folder when it is relative); a folder not found is refused
    (give ``--root``). A ``root`` given is kept, with a note when it is another folder than the
    checkpoint's.
    """
    from embedscope.data import same_dataset
    from embedscope.fileio import same_file

    rec = config.get("root")
    name = config.get("dataset")
    if not isinstance(rec, str) or not rec or not isinstance(name, str) or not same_dataset(name, str(dataset)):
        return root, None
    if root is None:
        if not Path(rec).is_dir():
            raise EmbedscopeError(f"the checkpoint was trained on the {name} images in {rec}, which is "
                                  f"not a folder from here: give --root (the folder of its images)")
        return rec, (f"--root {rec}, the folder the checkpoint was trained on (give --root to {verb} "
                     "another folder's images)")
    if Path(rec).is_dir() and same_file(rec, root):
        return root, None
    held = "this file holds" if verb == "embed" else "these maps are of"
    return root, f"the checkpoint was trained on the images in {rec}; {held} the images in {root}"


def transfer_note(config: dict, dataset: str) -> str | None:
    """A note when a checkpoint of ``train`` (its config names a loss and a data set) is embedded on
    another data set: a transfer, whose R@1 is not the one its training log reports (the classes,
    images and split are another set's). None for the same data set or a checkpoint that names none."""
    from embedscope.data import same_dataset

    name = config.get("dataset")
    if not config.get("loss") or not isinstance(name, str) or not name or same_dataset(name, str(dataset)):
        return None
    return (f"the checkpoint was trained on {name}; this file holds the {dataset} images (a transfer: its R@1 "
            "is not the one the training log reports)")


def checked_sizes(image_size, resize) -> tuple[int | None, int | None]:
    """``image_size`` and ``resize`` checked (positive integers, or None), before a model is loaded."""
    return (None if image_size is None else check_int(image_size, "image_size", min=1),
            None if resize is None else check_int(resize, "resize", min=1))


def input_size_override(config: dict[str, Any], dataset: str, image_size: int | None, resize: int | None,
                        verb: str = "embeds") -> tuple[dict[str, Any], list[str]]:
    """``--image-size`` / ``--resize`` over a checkpoint's evaluation transform -> (config, notes): the
    crop (its own resize dropped: it belonged to its own crop) and the shorter side; a note when a run of
    ``train`` was trained on another size (its log's R@1 is of those); a resize below the crop refused.
    The digits take neither (refused once their data set is read: :func:`embed_to_file`)."""
    notes: list[str] = []
    trained_size = config.get("image_size") if config.get("loss") else None  # a run of `train` (its input size)
    if (image_size is not None and trained_size is not None and int(trained_size) != image_size
            and str(dataset).lower() != "digits"):
        notes.append(f"the checkpoint was trained on {int(trained_size)}x{int(trained_size)} inputs (its log's R@1 "
                     f"is of those); --image-size {image_size} {verb} {image_size}x{image_size} crops")
    if image_size is not None or resize is not None:
        config = dict(config)
        if image_size is not None:
            config["image_size"] = image_size
            if resize is None:  # the checkpoint's resize belonged to its own crop size
                config.pop("resize", None)
        if resize is not None:
            size = int(config.get("image_size", 224))
            if resize < size:
                # (the hint to give --image-size only when it was not given: the crop is then the checkpoint's)
                hint = " (pass --image-size too)" if image_size is None else " (give --resize at least --image-size)"
                raise UsageError(f"--resize {resize} is smaller than the crop size {size}: the centre crop "
                                 f"would pad the image{hint}")
            config["resize"] = resize
    return config, notes


def embed_to_file(checkpoint: str | os.PathLike | None, dataset: str, out: str | os.PathLike, *, root=None,
                  split: str = "all", arch: str | None = None, train_classes=None, batch_size: int | None = None,
                  num_workers: int = 0, device: str = "auto", unsafe_pickle: bool = False, force: bool = False,
                  progress: bool = True, weights=None, head: str | None = None, embed_dim: int | None = None,
                  head_seed: int | None = None, trunk=None, embedder=None, amp: bool | None = None,
                  image_size: int | None = None, resize: int | None = None, ema: bool = False,
                  transform_input: bool | None = None, echo=None) -> Path:
    """Load a model (:func:`embedscope.models.load_model`: a checkpoint, a trunk/embedder pair or an
    ImageNet baseline), embed a data set's split and write the HDF5 store atomically.

    Each split is embedded on its own (:func:`embed_images` ``by_split``), in batches of
    ``batch_size``, by default :func:`evaluation_batch_size` (the batches of ``train``'s evaluation):
    the rows of a checkpoint of ``train`` are then those its log's ρ and R@1 were computed from, to
    the last bit on the same device and thread count. Another ``batch_size`` gives the same rows up to
    the last bits of the convolutions (~1e-7), so ρ can differ from the log in its last digits
    (docs/studies.md).

    ``amp`` as :func:`embed_images` (None or False: float32 everywhere, as evaluations are reported;
    True: bfloat16 autocast on CUDA, float32 elsewhere, with a note to ``echo``). The attribute
    ``precision`` records which was used (:func:`embedscope.device.precision_name`: "float32", on CUDA
    "float32 (TF32 convolutions)" under PyTorch's default, or "bfloat16 autocast"), with ``device`` the
    device type: bfloat16 rows differ from float32 ones by ~1e-3 to 1e-2 (ResNet-50, 128-d unit rows: up
    to 6.6e-3 in norm, cosine 0.997); TF32 convolutions by ~6e-4 (ResNet-50 on an H200, relative to the
    largest value).

    ``image_size`` / ``resize``: the evaluation transform Resize(resize) + CenterCrop(image_size)
    instead of the checkpoint's (its config's, else 224 and round(224 * 256 / 224) = 256), e.g. 299 /
    342 for torchvision's Inception-v3 preset; the file records the transform used.

    ``ema`` / ``transform_input``: as :func:`embedscope.models.load_model` (``--ema``,
    ``--no-transform-input``).

    A model whose output holds NaN or inf is refused before anything is written
    (:class:`NonFiniteEmbeddings`: how many images, the first one, and the first weight that holds
    NaN or inf). A degenerate but finite output is written, with a ``note:`` line to ``echo`` (when
    given): rows that are all zeros (no direction: cosine analyses refuse them) and a model that
    gives every image the same embedding (its output does not depend on the input; a collapsed model)."""
    import torch

    from embedscope import store
    from embedscope.device import precision_name, resolve_device
    from embedscope.fileio import check_writable
    from embedscope.models import describe_input, load_model

    check_writable(out, force=force)  # fail before the long work
    image_size, resize = checked_sizes(image_size, resize)
    batch_size = check_int(batch_size, "batch_size", min=1, allow_none=True)  # (before the model and the data)
    num_workers = check_int(num_workers, "num_workers", min=0)
    dev = resolve_device(device)  # a --device this machine has not: refused before the model and the data are read
    model, config, info = load_model(checkpoint, arch=arch, weights=weights, head=head, embed_dim=embed_dim,
                                     head_seed=head_seed, trunk=trunk, embedder=embedder,
                                     unsafe_pickle=unsafe_pickle, ema=ema, transform_input=transform_input)
    digits = str(dataset).lower() == "digits"
    need = "8x8 digits need the digits_cnn" if digits else "photos need an image backbone"
    if checkpoint is None and trunk is None and embedder is None and arch:  # an --arch baseline (no checkpoint)
        if digits != (arch == "digits_cnn"):  # before the data are read (else "a resnet18 checkpoint cannot ...")
            raise UsageError(f"--arch {arch} does not fit the {dataset} images ({need})")
    elif digits != (config.get("arch") == "digits_cnn"):
        # checkpoint_input's refusal, before the data are read: a digits checkpoint on --dataset shapes rendered
        # the default set (4,800 images), on sop listed 120,053 images, and said notes on a transfer, then this
        from embedscope.data import ALIASES

        raise EmbedscopeError(f"a {config.get('arch')} checkpoint cannot embed the "
                              f"{ALIASES.get(str(dataset).lower(), str(dataset).lower())} images ({need})")
    # notes on the checkpoint and the data, said once the data are read (a wrong --root is one error line,
    # not notes on a transfer to images that are not there, then the error)
    trained_size = config.get("image_size") if config.get("loss") else None  # a run of `train` (its input size)
    config, notes = input_size_override(config, dataset, image_size, resize)
    train_classes, split_note = checkpoint_train_classes(config, dataset, train_classes)
    if split_note:
        notes.append(split_note)
    # the folder the checkpoint was trained on (train --root DIR), as its split: the file's root records it
    root, root_note = checkpoint_root(config, dataset, root)
    if root_note:
        notes.append(root_note)
    transfer = transfer_note(config, dataset)
    if transfer:
        notes.append(transfer)
    if amp and dev.type != "cuda":  # as train and saliency: the file records float32 (said with the other notes)
        notes.append(f"--amp bf16 is CUDA's bfloat16 autocast; on {dev.type} the embeddings are computed in float32")
    if (image_size is None and trained_size is None and config.get("arch") == "shapes_cnn"
            and str(dataset).lower() == "shapes"):
        # a shapes_cnn that no `train` run recorded an input size for (an --arch baseline, a bare state
        # dict): the size the set was rendered at (make-shapes --size), as `train` takes by default
        from embedscope.data.shapes import rendered_size

        size = rendered_size(root)
        if size is not None and size != config.get("image_size"):
            config = {**config, "image_size": size}
            config.pop("resize", None)
    full = get_dataset(dataset, root, train_classes=train_classes)
    ds = full.subset(split)
    empty = empty_classes_note(full, split)
    if len(ds) == 0:
        raise EmbedscopeError(f"{dataset}: the '{split}' split is empty" + (f" ({empty})" if empty else ""))
    if empty:  # (a CUB or CARS folder whose classes.txt / class_names lists classes without images)
        notes.append(empty)
    if ds.kind == "digits" and (image_size is not None or resize is not None):
        raise UsageError("--image-size and --resize are for photos: the digits are used as they are (8x8)")
    transform, size, input_text = checkpoint_input(ds, config)
    check_fixed_input(model, size)
    if echo is not None:  # (after every refusal: notes on a file that is not written were noise before its error)
        for note in notes:
            echo(f"note: {note}")
    use_amp = bool(amp) and dev.type == "cuda"
    if batch_size is None:
        batch_size = evaluation_batch_size(ds.kind)
    X = embed_images(model, ds, transform=transform, batch_size=batch_size, num_workers=num_workers,
                     device=device, amp=use_amp, progress=progress, desc=f"embed {ds.name}/{split}", by_split=True)
    if echo is not None:
        for note in degenerate_notes(X, ds.paths):
            echo(f"note: {note}")
    # the file the model came from; of a trunk/embedder pair the trunk's (info["path"] names both, joined by
    # " + ": split on that, a checkpoint named "run + aug.pt" was recorded as the path of "run")
    source = str(info.get("trunk") or info["path"] or "")
    es = store.EmbeddingSet(
        embeddings=X, labels=ds.labels, paths=ds.paths, split=ds.split, class_names=ds.class_names,
        properties=ds.properties,
        attrs={
            "dataset": ds.name,
            "root": str(Path(root).resolve()) if root else "",
            "split_selected": split,
            "device": dev.type,
            # on the CPU the last bits of a convolution depend on how many threads split it (the
            # digits: up to 9e-8 between 1 and 2 threads): what a rerun needs to give the same bits
            **({"torch_threads": int(torch.get_num_threads())} if dev.type == "cpu" else {}),
            # so do the batch's size (the digits: 37% of the values differ, by up to 3e-7, at 7 vs 256)
            "batch_size": int(batch_size),
            "torch_version": str(torch.__version__),
            "precision": precision_name(dev, use_amp),
            "transform": "; ".join(x for x in (input_text, describe_input(config)) if x),
            "checkpoint": source and str(Path(source).resolve()),
            # a pytorch-metric-learning pair: the embedder's file too (its sha256 is in checkpoint_sha256)
            **({"checkpoint_embedder": str(Path(info["embedder"]).resolve())} if info.get("embedder") else {}),
            "checkpoint_format": info["format"],
            "checkpoint_sha256": info["sha256"],
            "checkpoint_config": json.loads(json.dumps(config, sort_keys=True, default=str)),
        },
    )
    return store.save(out, es, force=force)
