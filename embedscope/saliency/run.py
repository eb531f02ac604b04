"""The work behind ``embedscope saliency`` and ``embedscope saliency-agreement`` (docs/methods.md §8).

:func:`saliency_to_file`: checkpoint + data set -> one maps file (the same image subset for every
model: a deterministic choice by seed, or an explicit paths file). :func:`agreement_of_files`:
several maps files -> matrices, block means, figures, tables.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from embedscope.errors import EmbedscopeError, UsageError
from embedscope.families import family_for_config, family_of_maps  # (derived there, for the figures too)
from embedscope.fileio import read_paths_file, same_file
from embedscope.validation import zero_rows

DEFAULT_N_IMAGES = 100


def select_images(ds, *, n_images: int | None = None, paths_file=None, seed: int = 0) -> np.ndarray:
    """Row indices of ``ds`` to explain: the paths of ``paths_file`` (one per line; ``#`` comments), or
    ``n_images`` rows chosen by ``seed`` (sorted; the same for every model on the same data and split).

    The choice is nested: the first ``n_images`` rows of one permutation of the split seeded by ``seed``,
    so that a larger ``n_images`` keeps every image of a smaller one (maps files made with different
    ``--n-images`` share the smaller one's images; docs/saliency.md)."""
    if paths_file is not None and n_images is not None:
        raise UsageError("give either --n-images or --paths-file, not both")
    if paths_file is not None:
        p = Path(paths_file)
        wanted = read_paths_file(p)
        pos = {s: i for i, s in enumerate(ds.paths)}
        missing = [w for w in wanted if w not in pos]
        if missing:
            raise EmbedscopeError(f"{p}: {len(missing)} of {len(wanted)} listed paths are not in "
                                  f"{_split_name(ds)} (e.g. {missing[0]})")
        seen: set[str] = set()
        for w in wanted:  # which path ('lists a path twice' left the user to search a long list)
            if w in seen:
                raise EmbedscopeError(f"{p}: lists {w} twice (each image has one map: list it once)")
            seen.add(w)
        return np.array([pos[w] for w in wanted], dtype=np.int64)
    from embedscope.saliency.smoothgrad import MAX_SEED
    from embedscope.validation import check_int

    # (int() truncated n_images=2.5 to 2; seed=-1 was numpy's ValueError, 2**32 a seed saliency_maps refuses)
    seed = check_int(seed, "seed", min=0, max=MAX_SEED)
    n = DEFAULT_N_IMAGES if n_images is None else check_int(n_images, "n_images", min=1)
    n = min(n, len(ds))
    # one permutation whatever n (rng.choice(N, n, replace=False) draws by an n-dependent algorithm:
    # --n-images 8 and 16 picked unrelated images)
    order = np.random.default_rng(int(seed)).permutation(len(ds))
    return np.sort(order[:n]).astype(np.int64)


def _split_name(ds) -> str:
    """``the test split of digits`` (the rows of one split), or ``digits`` (every row)."""
    splits = sorted(set(ds.split.tolist()))
    return f"the {splits[0]} split of {ds.name}" if len(splits) == 1 else str(ds.name)


class _LazyImages:
    """ds rows ``idx`` through ``transform``, loaded when asked for (a sequence of C x H x W tensors)."""

    def __init__(self, ds, idx, transform) -> None:
        self.ds, self.idx, self.t = ds, np.asarray(idx), transform

    def __len__(self) -> int:
        return len(self.idx)

    def __getitem__(self, j: int):
        return self.t(self.ds.load_image(int(self.idx[j])))


def _display(images: _LazyImages, kind: str) -> np.ndarray:
    import torch

    from embedscope.store.saliency import display_images

    out = []
    for s in range(0, len(images), 64):
        x = torch.stack([images[j] for j in range(s, min(len(images), s + 64))]).numpy()
        out.append(display_images(x, kind))
    return np.concatenate(out)


def _gradient_space(config: dict[str, Any]) -> str:
    """The input tensor the maps are gradients with respect to (docs/methods.md §8): the model's own
    input convention where its config names one (``input_space``, e.g. BN-Inception's BGR x 255 - mean),
    else the evaluation transform's output."""
    from embedscope.models import describe_input

    spec = describe_input({"input_space": config.get("input_space")}) if config.get("input_space") else ""
    return spec or "the transform's output (the model's input)"


def saliency_to_file(checkpoint, dataset: str, out, *, root=None, split: str = "test",
                     n_images: int | None = None, paths_file=None, order: str = "paper", pairs: bool = False,
                     distance: str | None = None, n_samples: int = 50, noise: float = 0.15,
                     batch_size: int | None = None, seed: int = 0, device: str = "auto", amp=None,
                     arch: str | None = None, train_classes=None, unsafe_pickle: bool = False,
                     name: str | None = None, figure=None, force: bool = False, progress: bool = True,
                     ema: bool = False, figure_images: int = 6, weights=None, head: str | None = None,
                     embed_dim: int | None = None, head_seed: int | None = None, trunk=None, embedder=None,
                     transform_input: bool | None = None, image_size: int | None = None,
                     resize: int | None = None) -> dict[str, Any]:
    """Saliency maps of one checkpoint on a data set's images -> a maps file (docs/methods.md §8).

    The model comes from what ``embed`` takes (:func:`embedscope.models.load_model`): a ``checkpoint``
    (embedscope format, a bare state dict with ``arch``, Roth et al.'s file, a pytorch-metric-learning
    ``saved_models`` folder), a ``trunk`` + ``embedder`` pair, or ``arch`` alone (an ImageNet baseline:
    ``weights``, ``head`` none | random, ``embed_dim``, ``head_seed``); ``image_size`` / ``resize``: the
    evaluation transform's crop and shorter side instead of the checkpoint's (as ``embed``'s).

    The distance is ``distance`` when given, else Euclidean for an untrained network
    (:func:`~embedscope.models.distances.is_untrained`, docs/methods.md §8), else the checkpoint's (its
    config's ``distance`` field, else its loss's — Roth et al.'s loss option for their checkpoints —, else
    Euclidean: :func:`embedscope.models.distances.distance_for_config`).
    ``pairs``: for each chosen query its nearest other image of the split under that distance, and
    the saliency of their distance with respect to each (:func:`pair_saliency_maps`). ``figure``:
    also draw the first ``figure_images`` maps over their images (or pairs side by side). ``ema``:
    the checkpoint's EMA weights (``state_dict_ema``, :func:`embedscope.models.load_checkpoint`).
    Returns a summary dict.
    """
    from embedscope.data import get_dataset
    from embedscope.embed import check_fixed_input, checkpoint_input
    from embedscope.fileio import check_writable
    from embedscope.models import load_model
    from embedscope.models.distances import check_distance, distance_and_source, trained_loss
    from embedscope.saliency.smoothgrad import ORDERS, black_image, check_noise, pair_saliency_maps, saliency_maps
    from embedscope.store.saliency import SaliencyMaps, save_maps

    if order not in ORDERS:
        raise UsageError(f"unknown --order '{order}' (choose {', '.join(ORDERS)})")
    noise = check_noise(noise)  # before the checkpoint and the data are loaded (saliency_maps' own check)
    from embedscope.saliency.smoothgrad import MAX_SEED
    from embedscope.validation import check_int

    # as saliency_maps checks them, before the work (seed=-1 was numpy's ValueError in the image choice, 2**32 chose
    # other images than seed 0 but drew its noise; n_images=2.5 explained 2)
    seed = check_int(seed, "seed", min=0, max=MAX_SEED)
    n_samples = check_int(n_samples, "n_samples", min=1)
    batch_size = check_int(batch_size, "batch_size", min=1, allow_none=True)
    n_images = check_int(n_images, "n_images", min=1, allow_none=True)
    from embedscope.validation import check_bool

    # switches as bools: a string is truthy ("no" computed --pairs maps; unsafe_pickle="no" allowed the full unpickler)
    pairs, unsafe_pickle, ema, progress = (check_bool(v, k) for k, v in (
        ("pairs", pairs), ("unsafe_pickle", unsafe_pickle), ("ema", ema), ("progress", progress)))
    figure_images = _figure_images(figure_images, "figure_images")
    check_writable(out, force=force)
    written = [out]
    if figure is not None:
        from embedscope.viz.figures import figure_paths

        for p in figure_paths(figure, option="--figure"):
            check_writable(p, force=force)
        written += list(figure_paths(figure, option="--figure"))
    # before the work: the figure's PNG / PDF naming the maps file would replace it (with force, silently)
    if any(same_file(a, b) for k, a in enumerate(written) for b in written[:k]):
        raise UsageError("two outputs name the same file: give the maps file and the figure their own names")
    for a in written:
        for b in (checkpoint, paths_file, weights, trunk, embedder):
            if b is not None and same_file(a, b):
                raise UsageError(f"{a} is an input file: choose another output name")
    if Path(out).suffix.lower() in (".png", ".pdf"):  # the maps file is HDF5; the picture is --figure
        raise UsageError(f"-o {out} names the maps file (HDF5, e.g. maps.h5); draw the figure with --figure "
                         f"{Path(out).name}")
    if Path(out).suffix.lower() == ".svg":  # (HDF5 was written under the picture's name; --figure draws PNG and PDF)
        raise UsageError(f"-o {out} names the maps file (HDF5, e.g. maps.h5), not an SVG picture (--figure FIG.png "
                         "draws the maps in PNG and PDF)")
    t0 = time.perf_counter()
    from embedscope.device import precision_name, resolve_device
    from embedscope.saliency.smoothgrad import _resolve_amp

    # the autocast actually used: --amp is a CUDA option, the CPU computes in float32 (docs/saliency.md)
    amp_used = str(amp) if _resolve_amp(amp, resolve_device(device)) is not None else "none"
    from embedscope.embed import checked_sizes, input_size_override

    image_size, resize = checked_sizes(image_size, resize)
    model, config, info = load_model(checkpoint, arch=arch, weights=weights, head=head, embed_dim=embed_dim,
                                     head_seed=head_seed, trunk=trunk, embedder=embedder,
                                     unsafe_pickle=unsafe_pickle, ema=ema, transform_input=transform_input)
    source = checkpoint if checkpoint is not None else (trunk if trunk is not None else weights)
    config, size_notes = input_size_override(config, dataset, image_size, resize, verb="explains")
    from embedscope.embed import nonfinite_weights

    bad = nonfinite_weights(model)
    if bad:  # its embeddings, and so every gradient, would be NaN: refused before the work

        raise EmbedscopeError(f"{str(source or arch)}: the model's weights hold NaN or inf ({bad}), so its "
                              "embeddings and their gradients are undefined: no saliency maps")
    # docs/methods.md §8: Euclidean for the untrained network, whatever loss it was set up for; else the
    # config's distance, its loss's (Roth et al.'s loss option for their checkpoints), else Euclidean
    auto, auto_source = distance_and_source(config, info.get("extra"))  # (an unknown distance name refused)
    if distance is not None:
        dist, dist_source = check_distance(distance), "--distance"
    else:
        dist, dist_source = auto, auto_source
    from embedscope.embed import checkpoint_root, checkpoint_train_classes

    # the split the checkpoint was trained with (train --train-classes N), as embed and study take it
    train_classes, split_note = checkpoint_train_classes(config, dataset, train_classes)
    # the folder the checkpoint was trained on (train --root DIR), as its split: else the maps were of
    # another image set (shapes: the default set) whose files may bear the same names
    root, root_note = checkpoint_root(config, dataset, root, verb="explain")
    ds = get_dataset(dataset, root, train_classes=train_classes).subset(split)
    if len(ds) == 0:
        raise EmbedscopeError(f"{dataset}: the '{split}' split is empty")
    if ds.kind == "digits" and (image_size is not None or resize is not None):
        raise UsageError("--image-size and --resize are for photos: the digits are used as they are (8x8)")
    transform, size, input_text = checkpoint_input(ds, config, verb="explain")
    check_fixed_input(model, size)
    idx = select_images(ds, n_images=n_images, paths_file=paths_file, seed=seed)
    few_note = None
    if n_images is not None and int(n_images) > len(idx):  # every image of the split, not the number asked for
        few_note = f"--n-images {int(n_images)}: {_split_name(ds)} holds {len(idx)} images; all {len(idx)} are explained"
    images = _LazyImages(ds, idx, transform)
    # the noise of an image (of a pair) is keyed by its path (the query's), not by its place in this run:
    # an image gets the same noise whichever other images are explained with it, in any order
    common = dict(distance=dist, n_samples=n_samples, noise=noise, order=order, batch_size=batch_size, seed=seed,
                  device=device, amp=amp, progress=progress, input_size=size, noise_keys=list(ds.paths[idx]),
                  stats=(stats := {}))
    retrieval = None
    if pairs:
        from embedscope.embed import embed_images
        from embedscope.saliency.smoothgrad import nearest_retrievals

        Z = embed_images(model, ds, transform=transform, device=device, progress=progress,
                         desc=f"embed {ds.name}/{split}")
        ridx, _ = nearest_retrievals(Z[idx], Z, dist, exclude=idx)
        tied = len(Z) > 1 and bool(np.all(Z == Z[:1]))  # a collapsed model: every distance is the same
        res = pair_saliency_maps(model, images, _LazyImages(ds, ridx, transform), **common)
        maps = res["query"]
        retrieval = {"maps": res["retrieval"], "paths": ds.paths[ridx], "labels": ds.labels[ridx],
                     "distance": res["distance"], "images": _display(_LazyImages(ds, ridx, transform), ds.kind)}
    else:
        maps = saliency_maps(model, images, baseline=black_image(ds.kind, size), **common)
    seconds = time.perf_counter() - t0
    if not pairs:
        tied = False
    n_zero = _zero_maps(maps)
    n_zero_retrieval = _zero_maps(retrieval["maps"]) if retrieval is not None else None
    family = family_for_config(config, info.get("extra"))
    attrs = {
        "name": name or (Path(source).stem if source is not None else f"{arch}-{head or 'none'}"),
        "family": family,
        "loss": trained_loss(config) or "",  # (Roth et al.'s checkpoints: their loss option)
        "checkpoint": str(Path(source).resolve()) if source is not None else "",  # (an --arch baseline: none)
        "checkpoint_sha256": info.get("sha256", ""),
        "checkpoint_config": json.loads(json.dumps(config, sort_keys=True, default=str)),
        "distance": dist,
        "distance_source": dist_source,
        "differentiated": ("d(f(query + noise), f(retrieval)) and d(f(query), f(retrieval + noise))" if pairs
                           else "d(f(image + noise), f(black image))"),
        "n_samples": int(n_samples),
        "noise": noise,  # (check_noise: -0 as 0)
        "order": order,
        "seed": int(seed),
        "input_size": size,
        "transform": input_text,
        "gradient_space": _gradient_space(config),
        "noise_key": "image path (pairs: the query's path), with --seed",
        "dataset": ds.name,
        "split": split,
        # the split of the data set's classes (--train-classes; 0: the data set's own split)
        "train_classes": int(train_classes or 0),
        "root": str(Path(root).resolve()) if root else "",
        "selection": (f"paths file {paths_file}" if paths_file is not None
                      else f"{len(idx)} images chosen by seed {seed}"),
        "amp": amp_used,
        # where and how the gradients' forward passes ran (as embed and train record it: TF32 convolutions on CUDA
        # under PyTorch's default)
        "device": resolve_device(device).type,
        "precision": precision_name(resolve_device(device), amp_used != "none"),
        "seconds": round(seconds, 3),
        # maps of a zero gradient (the model's output does not change with the image): no r, no JSD
        "n_zero_maps": int(n_zero),
        **({"n_zero_retrieval_maps": int(n_zero_retrieval)} if n_zero_retrieval is not None else {}),
    }
    sm = SaliencyMaps(maps=maps, paths=ds.paths[idx], labels=ds.labels[idx], class_names=ds.class_names,
                      images=_display(images, ds.kind), retrieval=retrieval, attrs=attrs)
    save_maps(out, sm, force=force)
    fig_paths = None
    if figure is not None:
        from embedscope.viz.figures import save_figure, use_agg

        use_agg()
        import matplotlib.pyplot as plt

        from embedscope.viz.saliency import overlay_grid, pairs_figure

        fig = (pairs_figure(sm, n_pairs=figure_images) if pairs
               else overlay_grid([sm], names=[attrs["name"]], n_images=figure_images))
        try:
            fig_paths = save_figure(fig, figure, force=force)
        finally:
            plt.close(fig)
    return {"output": str(out), "n_images": int(len(idx)), "distance": dist, "distance_source": dist_source,
            "family": family, "order": order, "pairs": bool(pairs), "seconds": seconds, "amp": amp_used,
            "figure": [str(p) for p in fig_paths] if fig_paths else None,
            "figure_images": min(figure_images, int(len(idx))) if fig_paths else None,
            "n_zero_maps": int(n_zero), "n_zero_retrieval_maps": n_zero_retrieval,
            "notes": [n for n in (*size_notes, root_note, split_note, few_note,
                                  _plain_note(noise, n_samples, stats.get("plain", 0), len(idx) * (1 + bool(pairs))))
                      if n] + _zero_map_notes(
                attrs["name"], len(idx), n_zero, n_zero_retrieval) + (
                [f"every image of the {split} split has the same embedding: each query's nearest retrieval is a tie "
                 "with all the others (the first in the split's order was taken)"] if tied else []),
            "mean_pair_distance": float(np.mean(retrieval["distance"])) if retrieval else None,
            "pair_same_class": float(np.mean(ds.labels[idx] == retrieval["labels"])) if retrieval else None}


def _zero_maps(maps) -> int:
    """How many of ``maps`` [N, H, W] are all zero (a zero gradient everywhere)."""
    m = np.asarray(maps)
    if m.ndim < 2 or m.shape[0] == 0:
        return 0
    return int(len(zero_rows(m.reshape(m.shape[0], -1))))


def _plain_note(noise: float, n_samples: int, n_plain: int, n_maps: int) -> str | None:
    """The note for a noise level above 0 too small to change any image (1e-300 underflows to zero in float32):
    its maps are plain gradients, as ``--noise 0``'s (whose note the command line prints; this one was not said)."""
    if noise == 0 or n_maps == 0 or n_plain < n_maps:
        return None
    copies = f"the {int(n_samples)} copies of an image are" if n_samples > 1 else "the copy of an image is"
    return (f"--noise {noise:g}: too small to change any image (the noise rounds to nothing): {copies} the image "
            "itself, so each map is its plain gradient's, as with --noise 0"
            + ("; --n-samples 1 gives the same maps (to rounding) with less work" if n_samples > 1 else ""))


def _zero_map_notes(name: str, n: int, n_zero: int, n_zero_retrieval: int | None = None) -> list[str]:
    """The note of ``saliency`` on all-zero maps (docs/saliency.md, "Degenerate images")."""

    out = []
    for what, k in (("maps", n_zero), ("retrieval maps", n_zero_retrieval)):
        if not k:
            continue
        if k == n:
            head = (f"all {n} {what} of {name} are all zero: zero gradients, the model's embedding does not "
                    "change with its input (a collapsed model?)")
        else:
            head = f"{k} of {n} {what} are all zero: zero gradients, the embedding does not change with those images"
        out.append(head + "; saliency-agreement counts their r and JSD as undefined (NaN)")
    return out


def _data_source(dataset: object, root: object) -> tuple[str, str]:
    """A maps file's images as (data set, folder), comparable between files: the data set's name as
    :func:`~embedscope.data.same_dataset` compares them (any case, aliases), and its ``root`` attribute
    resolved (``os.path.realpath``: links, ``..``). An empty ``root`` (written when no ``--root`` was given:
    the data set's default location) is that location resolved the same way (``shapes``: its default
    cache folder, :func:`~embedscope.data.shapes.default_cache_dir`, where the writer's images came
    from); a data set without a default folder (``digits``) keeps ""."""
    from embedscope.data import ALIASES

    name, folder = str(dataset or ""), str(root or "")
    key = ALIASES.get(name.lower(), name.lower())
    if not folder and key == "shapes":
        from embedscope.data.shapes import default_cache_dir

        folder = str(default_cache_dir())
    if folder:
        folder = os.path.realpath(folder)
    return (key if name else "", folder)


#: columns of the pair table (--csv, --parquet) and of the per-image table (--per-image-csv, --per-image-parquet)
PAIR_COLUMNS = ("model_a", "model_b", "family_a", "family_b", "n_images", "r_mean", "r_spread", "n_undefined_r",
                "n_clipped_r", "jsd_mean", "jsd_std", "n_undefined_jsd", "jsd_base")
PER_IMAGE_COLUMNS = ("model_a", "model_b", "path", "pearson", "jsd")
_INT_COLUMNS = ("n_images", "n_undefined_r", "n_clipped_r", "n_undefined_jsd")
_FLOAT_COLUMNS = ("r_mean", "r_spread", "jsd_mean", "jsd_std", "pearson", "jsd")


def _typed_frame(rows: Sequence[dict[str, Any]], columns: Sequence[str]):
    """The rows of an agreement table as the Parquet holds them: one type per column (counts int64,
    values float64 with NaN where undefined, names and paths text), the CSV's columns in its order."""
    import pandas as pd

    data = {}
    for c in columns:
        vals = [r.get(c) for r in rows]
        if c in _INT_COLUMNS:
            data[c] = pd.array([int(v) for v in vals], dtype="int64")
        elif c in _FLOAT_COLUMNS:
            data[c] = pd.array([float("nan") if v is None else float(v) for v in vals], dtype="float64")
        else:
            data[c] = pd.array([None if v is None else str(v) for v in vals], dtype=object)
    return pd.DataFrame(data, columns=list(columns))


def agreement_of_files(files: Sequence, out=None, *, grid=None, names: Sequence[str] | None = None,
                       families: Sequence[str] | None = None, jsd_base=2, json_out=None, csv_out=None,
                       per_image_csv=None, grid_images: int = 6, force: bool = False,
                       block: int | None = None, parquet_out=None, per_image_parquet=None) -> dict[str, Any]:
    """Agreement of several models' maps files (docs/methods.md §8) -> matrices, block means, figures.

    Files are matched by path (the images they all hold, in the first file's order; a note counts
    the images left out). Models are shown grouped by family (ranking, classification, untrained,
    others; the given order within a family). ``families`` overrides the families recorded in the
    files (taken from each checkpoint's config). Writes: ``out`` (heat-maps of both matrices,
    PNG + PDF), ``grid`` (image × model overlays), ``json_out`` (everything), ``csv_out`` (one row
    per model pair), ``per_image_csv`` (one row per model pair and image); ``parquet_out`` and
    ``per_image_parquet``: the same two tables as Parquet (the CSVs' columns and rows).

    The maps are read from the files ``block`` images at a time (default: about
    :data:`~embedscope.store.saliency.STREAM_ELEMENTS` map values of all the models together), never
    all at once (:func:`~embedscope.metrics.agreement.agreement_matrix_streamed`: the same values as
    on the whole arrays, bit for bit); memory grows with N only by the paths and the per-image values.
    """
    from embedscope.fileio import check_writable
    from embedscope.store.saliency import MapsFile

    # (0 or -1 was matplotlib's ValueError after the work, 2.5 a TypeError; the command line's --grid-images checks it)
    grid_images = _figure_images(grid_images, "grid_images")
    # one file, not its letters ('s_m.h5' was read as the files 's', '_', ...: "s: no such file"); a name or a
    # family, not its letters (names="ab" named the two models 'a' and 'b'); texts (families=[1, 2]: a TypeError)
    if isinstance(files, (str, bytes, os.PathLike)) or not hasattr(files, "__iter__"):
        raise UsageError(f"saliency agreement needs a list of at least two maps files, got {files!r}")
    files = [str(f) for f in files]
    if len(files) < 2:
        raise UsageError("saliency agreement needs at least two maps files")
    names, families = (None if v is None else [v] if isinstance(v, str) else list(v) for v in (names, families))
    for what, vals in (("names", names), ("families", families)):
        bad = [v for v in vals or () if not isinstance(v, str)]
        if bad:
            raise UsageError(f"{what} must be texts, one per file, got {bad[0]!r}")
    if block is not None:
        from embedscope.validation import check_int

        block = check_int(block, "block", min=1)
    # one file under two names (a link, a hard link, another spelling) too: it would agree with itself (r = 1)
    twice = next(((b, a) for k, a in enumerate(files) for b in files[:k] if same_file(a, b)), None)
    if twice is not None:
        both = twice[0] if twice[0] == twice[1] else f"{twice[0]} and {twice[1]} name one file"
        raise UsageError(f"a maps file is given twice ({both})")
    outs, options = [], []
    if out is not None or grid is not None:
        from embedscope.viz.figures import figure_paths

        for f, option in ((out, "-o"), (grid, "--grid")):
            if f is not None:
                outs += list(figure_paths(f, option=option))
                options += [option] * (len(outs) - len(options))
    for p, option in ((json_out, "--json"), (csv_out, "--csv"), (per_image_csv, "--per-image-csv"),
                      (parquet_out, "--parquet"), (per_image_parquet, "--per-image-parquet")):
        if p:
            outs.append(Path(p))
            options.append(option)
    for i, p in enumerate(outs):  # which two ('two outputs name the same file' left the user to find them)
        for j in range(i):
            if p.resolve() == outs[j].resolve() or same_file(p, outs[j]):
                raise UsageError(f"two outputs name the same file ({options[j]} {outs[j]}, {options[i]} {p}): give "
                                 "each output its own name")
    for p in outs:  # with force, an output naming a maps file would replace that input
        if any(same_file(p, f) for f in files):
            raise UsageError(f"{p} is an input file: choose another output name")
    for p in outs:
        check_writable(p, force=force)
    items: list[MapsFile] = []
    try:
        for f in files:  # the maps stay in the files: read a block of images at a time (docs/saliency.md)
            items.append(MapsFile(f))
        return _agreement_of_open_files(items, files, out, grid=grid, names=names, families=families,
                                        jsd_base=jsd_base, json_out=json_out, csv_out=csv_out,
                                        per_image_csv=per_image_csv, grid_images=grid_images, force=force,
                                        block=block, parquet_out=parquet_out, per_image_parquet=per_image_parquet)
    finally:
        for it in items:
            it.close()


def _agreement_of_open_files(items, files, out, *, grid, names, families, jsd_base, json_out, csv_out,
                             per_image_csv, grid_images, force, block, parquet_out=None,
                             per_image_parquet=None) -> dict[str, Any]:
    from embedscope.metrics.agreement import FAMILY_ORDER, agreement_matrix_streamed
    from embedscope.store.saliency import STREAM_ELEMENTS, match_rows
    from embedscope.tables import write_csv, write_json, write_parquet

    for f, sm in zip(files, items):
        if sm.kind == "pairs":
            raise EmbedscopeError(f"{f} holds pair maps (--pairs); agreement compares maps of single images")
    if names is not None and len(names) != len(files):
        raise UsageError(f"{len(files)} files but {len(names)} --names")
    if families is not None and len(families) != len(files):
        raise UsageError(f"{len(files)} files but {len(families)} --families")
    if block is None:  # about STREAM_ELEMENTS map values of all the models together
        block = max(1, items[0].block_rows(STREAM_ELEMENTS) // len(items))
    for sm in items:
        sm.check_values(block)
    names = list(names) if names is not None else [sm.name for sm in items]
    if len(set(names)) != len(names):
        named = [f"{nm} ({Path(f).name})" for nm, f in zip(names, files)]
        # files of one name in different folders: the paths as given (they differ: a file is not given twice)
        names = named if len(set(named)) == len(named) else [f"{nm} ({f})" for nm, f in zip(names, files)]
    fams = list(families) if families is not None else [family_of_maps(sm.attrs) for sm in items]
    notes = []
    own = sorted({f for f in fams if f not in FAMILY_ORDER}) if families is not None else []
    if own:  # a typo ('rankng') would otherwise form a block of its own without a word
        notes.append(f"--families {', '.join(own)}: not one of {', '.join(FAMILY_ORDER)}; each forms a block of "
                     "its own, after those")

    def has(sm, *keys) -> bool:  # a setting the file records (one written by Python's save_maps may record none)
        return all(str(sm.attrs.get(k, "")) != "" for k in keys)

    # the settings are compared between the files that record them; a file that does not is named in one note
    # below (it was counted as differing from all others: 'different post-processing orders (paper: a; ?: b)')
    # (a setting that no file records is compared with nothing: no note, as files written from Python alone)
    unrecorded: dict[str, list[str]] = {}
    for what, keys in (("post-processing order", ("order",)), ("SmoothGrad settings", ("n_samples", "noise")),
                       ("input transform", ("transform",)), ("data set", ("dataset",))):
        if not any(has(sm, *keys) for sm in items):
            continue
        for nm, sm in zip(names, items):
            if not has(sm, *keys):
                unrecorded.setdefault(nm, []).append(what)
    named = [(nm, sm) for nm, sm in zip(names, items) if has(sm, "order")]
    if len({str(sm.attrs["order"]) for _, sm in named}) > 1:  # which model has which (code order: smoother, higher r)
        notes.append(f"the files use different post-processing orders "
                     f"({_grouped([nm for nm, _ in named], [str(sm.attrs['order']) for _, sm in named])}): compare "
                     "maps of one order (docs/saliency.md)")
    named = [(nm, sm) for nm, sm in zip(names, items) if has(sm, "n_samples", "noise")]
    settings = [f"l = {sm.attrs['n_samples']}, noise {sm.attrs['noise']}" for _, sm in named]
    if len(set(settings)) > 1:
        notes.append(f"the files use different SmoothGrad settings ({_grouped([nm for nm, _ in named], settings)})")
    named = [(nm, sm) for nm, sm in zip(names, items) if has(sm, "transform")]
    if len({str(sm.attrs["transform"]) for _, sm in named}) > 1:  # one shape, but pixel (i, j) is another point
        shown = "; ".join(f"{nm}: {sm.attrs['transform']}" for nm, sm in named)
        notes.append(f"the files' maps are of differently transformed images ({shown}): a pixel of one map is not "
                     "the same point of the picture in another, which r and JSD compare pixel by pixel")
    # compared as folders, not as strings: "" (no --root: the data set's default location) and that
    # location's path, or two spellings of one folder (a link, ..), are the same images (a spurious note)
    sources: dict[tuple[str, str], tuple[str, str]] = {}  # each source as its first file names it
    for sm in items:
        if has(sm, "dataset"):
            d, r = str(sm.attrs.get("dataset", "")), str(sm.attrs.get("root", ""))
            sources.setdefault(_data_source(d, r), (d, r))
    if len(sources) > 1:  # images are matched by path: two data sets' files may share names, not pictures
        shown = "; ".join(f"{d}" + (f" in {r}" if r else "") for d, r in sorted(sources.values()))
        notes.append(f"the files come from different data sets or folders ({shown}): their images are matched "
                     "by path alone")
    for nm, whats in unrecorded.items():
        said = whats[0] if len(whats) == 1 else f"{', '.join(whats[:-1])} and {whats[-1]}"
        notes.append(f"{nm}: its file does not record its {said}, so whether {'it matches' if len(whats) == 1 else 'they match'} "
                     "the other files' is not known (a maps file not written by embedscope saliency?)")
    idxs, info = match_rows(items, names)
    dropped = {k: v for k, v in info["n_dropped"].items() if v}
    if dropped:
        notes.append(f"{info['n_common']} image{'' if info['n_common'] == 1 else 's'} in common; left out: "
                     + ", ".join(f"{v} of {k}" for k, v in dropped.items()) + info.get("spelling", ""))
    # group by family (stable)
    rank = {f: i for i, f in enumerate(FAMILY_ORDER)}
    perm = sorted(range(len(files)), key=lambda i: (rank.get(fams[i], len(FAMILY_ORDER)), fams[i], i))
    names = [names[i] for i in perm]
    fams = [fams[i] for i in perm]
    files = [files[i] for i in perm]
    items = [items[i] for i in perm]
    idxs = [idxs[i] for i in perm]
    n = int(info["n_common"])
    res = agreement_matrix_streamed(lambda s, e: [sm.read_maps(idx[s:e]) for sm, idx in zip(items, idxs)], n,
                                    len(items), block=block, names=names, families=fams, jsd_base=jsd_base)
    res["files"] = files
    notes += _degenerate_notes(res)
    if grid is not None and n > grid_images:  # (as saliency --figure says it: the grid is not every image)
        notes.append(f"the grid draws the first {grid_images} of the {n} images (--grid-images; every map is in the maps "
                     "files)")
    res["notes"] = notes
    res["paths"] = items[0].paths[idxs[0]]
    pair_rows = []
    for (i, j), pr in res["pairs"].items():
        pair_rows.append({"model_a": names[i], "model_b": names[j], "family_a": fams[i], "family_b": fams[j],
                          "n_images": pr["n_images"], "r_mean": pr["r_mean"], "r_spread": pr["r_spread"],
                          "n_undefined_r": pr["n_undefined_r"], "n_clipped_r": pr["n_clipped_r"],
                          "jsd_mean": pr["jsd_mean"], "jsd_std": pr["jsd_std"],
                          "n_undefined_jsd": pr["n_undefined_jsd"], "jsd_base": pr["jsd_base"]})
    res["pair_rows"] = pair_rows
    written = []
    if out is not None or grid is not None:
        from embedscope.viz.figures import save_figure, use_agg

        use_agg()
        import matplotlib.pyplot as plt

        from embedscope.viz.saliency import agreement_heatmaps, overlay_grid

        for target, make in ((out, lambda: agreement_heatmaps(res)),
                             (grid, lambda: overlay_grid([sm.select(idx[:grid_images]) for sm, idx in zip(items, idxs)],
                                                         names=names, families=fams, n_images=grid_images))):
            if target is None:
                continue
            fig = make()
            try:
                written += [str(p) for p in save_figure(fig, target, force=force)]
            finally:
                plt.close(fig)
    if json_out:
        # keyed "<a> vs <b>", each entry naming its pair as the per-image CSV does (model_a, model_b); where
        # two pairs' keys read alike ("a vs b" with "c", "a" with "b vs c": the later pair's values
        # replaced the earlier's) every name is quoted as JSON quotes it ('"a" vs "b vs c"')
        pairs = [(names[i], names[j], pr) for (i, j), pr in res["pairs"].items()]
        keys = [f"{a} vs {b}" for a, b, _ in pairs]
        if len(set(keys)) < len(keys):
            keys = [f"{json.dumps(a, ensure_ascii=False)} vs {json.dumps(b, ensure_ascii=False)}" for a, b, _ in pairs]
        per_image = {k: {"model_a": a, "model_b": b, "pearson": pr["pearson"], "jsd": pr["jsd"]}
                     for k, (a, b, pr) in zip(keys, pairs)}
        write_json(json_out, {
            "method": "Kobs et al. 2021 saliency agreement (docs/methods.md §8): Pearson r per image aggregated in "
                      "Fisher-z space (mean, population-std spread; |r| clipped at 1 - 1e-7), JSD mean +- std",
            "files": files, "names": names, "families": fams, "n_images": res["n_images"], "notes": notes,
            "matrices": {k: res[k] for k in ("r_mean", "r_spread", "jsd_mean", "jsd_std", "n_undefined_r",
                                             "n_undefined_jsd")},
            "n_constant_maps": dict(zip(names, res["n_constant_maps"])),
            "n_zero_maps": dict(zip(names, res["n_zero_maps"])),
            "blocks": res["blocks"], "pairs": pair_rows, "paths": list(res["paths"]), "per_image": per_image,
        }, force=force)
        written.append(str(json_out))
    if csv_out:
        write_csv(csv_out, pair_rows, PAIR_COLUMNS, force=force)
        written.append(str(csv_out))
    if parquet_out:
        write_parquet(parquet_out, _typed_frame(pair_rows, PAIR_COLUMNS), force=force)
        written.append(str(parquet_out))
    if per_image_csv or per_image_parquet:
        rows = []
        for (i, j), pr in res["pairs"].items():
            for k, p in enumerate(res["paths"]):
                rows.append({"model_a": names[i], "model_b": names[j], "path": p, "pearson": pr["pearson"][k],
                             "jsd": pr["jsd"][k]})
        if per_image_csv:
            write_csv(per_image_csv, rows, PER_IMAGE_COLUMNS, force=force)
            written.append(str(per_image_csv))
        if per_image_parquet:
            write_parquet(per_image_parquet, _typed_frame(rows, PER_IMAGE_COLUMNS), force=force)
            written.append(str(per_image_parquet))
    res["written"] = written
    return res


def _figure_images(value, name: str) -> int:
    """The images of a saliency figure: an integer from 1 to ``MAX_FIGURE_IMAGES`` (64), as ``--figure-images`` and
    ``--grid-images`` take it (a :class:`UsageError` otherwise, before any work)."""
    from embedscope.cli.common import MAX_FIGURE_IMAGES
    from embedscope.validation import check_int

    try:
        return check_int(value, name, min=1, max=MAX_FIGURE_IMAGES)
    except EmbedscopeError as e:
        raise UsageError(f"{e} (a figure draws 1 to {MAX_FIGURE_IMAGES} images; every map is in the maps file)") from None


def _grouped(names: Sequence[str], values: Sequence[str]) -> str:
    """``value: name, name; value: name`` (the values in the order of their first model): which models a
    note's differing setting belongs to."""
    groups: dict[str, list[str]] = {}
    for nm, v in zip(names, values):
        groups.setdefault(v, []).append(str(nm))
    return "; ".join(f"{v}: {', '.join(nms)}" for v, nms in groups.items())


def _degenerate_notes(res: dict[str, Any]) -> list[str]:
    """Why values are undefined: each model's all-zero maps (zero gradients) and other constant maps."""
    n = int(res["n_images"])
    out = []
    for name, n_const, n_zero in zip(res["names"], res["n_constant_maps"], res["n_zero_maps"]):
        if n_zero == n and n:
            out.append(f"{name}: all {n} maps are all zero (zero gradients: its embedding does not change with the "
                       "image, e.g. a collapsed model), so every r and JSD with it is undefined (NaN, counted as "
                       "undefined)")
            continue
        if n_zero:
            out.append(f"{name}: {n_zero} of {n} maps {'is' if n_zero == 1 else 'are'} all zero (zero gradients): r and "
                       "JSD on those images are undefined (NaN, counted as undefined, left out of the means)")
        if n_const > n_zero:
            out.append(f"{name}: {n_const - n_zero} of {n} maps {'is' if n_const - n_zero == 1 else 'are'} constant: r "
                       "on those images is undefined (NaN, "
                       "counted as undefined, left out of the means)")
    return out


__all__ = ["family_for_config", "family_of_maps", "select_images", "saliency_to_file", "agreement_of_files",
           "DEFAULT_N_IMAGES"]
