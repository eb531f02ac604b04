"""Running a study: embed each checkpoint (cached), take every measure, one row per checkpoint.

Layout of a study folder ``STUDY/`` (``docs/studies.md``)::

    study.json              settings and provenance (versions, source, measures, cache folder)
    checkpoint_configs.json the checkpoint configs read, by file (size, times, inode): not read again
    rows/<entry>.json       one finished row per checkpoint (written atomically as each finishes)
    runs.csv, runs.parquet  every row (checkpoint, config, tags, measures, status, error)
    correlations.csv/.json  statistics (:mod:`embedscope.study.stats`)
    figures/*.png|pdf       Fig.-5 panels, Fig.-4 matrix, ranking by |tau|

Resumable: a killed study continues where it stopped (finished rows are read back, never recomputed
unless ``force``); rows that failed are tried again. Embeddings are cached by checkpoint sha256 +
data set + transform (+ device kind) in a cache folder shared by all studies, written atomically.
Parallel: a Dask distributed cluster: by default an in-process ``LocalCluster`` of one
single-threaded worker *thread* per core (torch and numpy release the GIL in their heavy work, and
nothing is imported or started twice); ``worker_processes=True`` gives one worker process each
instead; or an existing scheduler. The rows are the same serial and parallel, bit for bit.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import hashlib
import json
import math
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from embedscope import names
from embedscope.device import available_cpus
from embedscope.errors import EmbedscopeError, Interrupted, UsageError
from embedscope.text import quoted

CACHE_ENV = "EMBEDSCOPE_CACHE"
GEOMETRY_SEED = 0  # the seed of the geometry measures' sampled pairs in every row (the registry's default)
SETTINGS_KEYS = ("source", "epoch", "dataset", "root", "metric", "seed", "device", "measures")


def default_cache_dir() -> Path:
    """``$EMBEDSCOPE_CACHE/embeddings``, else ``$XDG_CACHE_HOME/embedscope/embeddings`` (``~/.cache/...``).

    ``$EMBEDSCOPE_CACHE`` is embedscope's cache folder, as ``~/.cache/embedscope``: the embeddings in
    ``embeddings/``, the generated shapes set in ``shapes/`` (it was the embeddings folder itself, so
    that the shapes set landed inside it)."""
    from embedscope.fileio import cache_root

    return cache_root() / "embeddings"


_INPUT_LOCK = threading.RLock()  # worker threads of one process load and decode a data set once, not side by side


def _dataset(name: str, root: str | None, train_classes: int | None, generation: str | None = None):
    """The data set (listed once per ``generation`` and process: a study passes a token of its own
    run, so that a run sees the folder as it is now, not as an earlier run in this process listed it)."""
    return _dataset_and_fingerprint(name, root, train_classes, generation)[0]


def _dataset_and_fingerprint(name: str, root: str | None, train_classes: int | None, generation: str | None = None):
    """(data set, :func:`data_fingerprint`), computed once per generation and process."""
    with _INPUT_LOCK:
        return _load_dataset(name, root, train_classes, generation)


@functools.lru_cache(maxsize=8)
def _load_dataset(name: str, root: str | None, train_classes: int | None, generation: str | None = None):
    from embedscope.data import get_dataset

    ds = get_dataset(name, root, train_classes=train_classes)
    return ds, _builtin_fingerprint(name, train_classes) or data_fingerprint(ds)


def current_fingerprint(name: str, root: str | None, train_classes: int | None, generation: str | None = None) -> str:
    """The :func:`data_fingerprint` of a data set as it is now (the digits without loading them)."""
    return _builtin_fingerprint(name, train_classes) or _dataset_and_fingerprint(name, root, train_classes,
                                                                                 generation)[1]


def _builtin_fingerprint(name: str, train_classes: int | None) -> str | None:
    """The fingerprint of a data set whose content the code fixes (the digits: scikit-learn's copy, no
    files), known without loading it; None for data sets read from a folder."""
    from embedscope.data import ALIASES

    if ALIASES.get(name.lower(), name.lower()) != "digits":
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        sk = version("scikit-learn")
    except PackageNotFoundError:  # pragma: no cover - scikit-learn is a dependency
        sk = ""
    key = json.dumps({"dataset": "digits", "train_classes": train_classes, "scikit-learn": sk}, sort_keys=True)
    return "builtin:" + hashlib.sha256(key.encode()).hexdigest()[:16]


def data_fingerprint(ds) -> str:
    """What a study's cache and finished rows must match in the data (docs/studies.md, "What is
    measured"): :func:`embedscope.data.base.data_fingerprint` (the listing, labels, split, class
    names, properties and each image file's size and modification time), the value a training run
    records too. A study names the digits, fixed by the code, by their scikit-learn version instead
    (:func:`current_fingerprint`: no need to load them to check a finished row)."""
    from embedscope.data.base import data_fingerprint as fingerprint

    return fingerprint(ds)


@contextlib.contextmanager
def _one_cpu_thread(on: bool = True):
    """One torch thread inside (restored after). On the CPU a convolution's last bits depend on the
    number of threads that split it; embedding with one thread in every process makes the rows and the
    cached embeddings the same whoever computes them (serial, any worker, any machine's core count).
    A study's parallelism is its workers (``--workers``)."""
    from embedscope.device import torch_threads

    with torch_threads(1) if on else contextlib.nullcontext():
        yield


#: a data set whose evaluation inputs take at most this many bytes is decoded once per process
INPUT_CACHE_BYTES = 256 * 2**20


def _fits(ds, size: int) -> bool:
    channels = 1 if ds.kind == "digits" else 3
    return len(ds) * channels * size * size * 4 <= INPUT_CACHE_BYTES


def _input_tensor(name: str, root: str | None, train_classes: int | None, size: int, resize: int | None = None,
                  generation: str | None = None):
    """:func:`_decoded_inputs`, computed by one thread at a time (the others then find it cached)."""
    with _INPUT_LOCK:
        return _decoded_inputs(name, root, train_classes, size, resize, generation)


@functools.lru_cache(maxsize=2)
def _decoded_inputs(name: str, root: str | None, train_classes: int | None, size: int, resize: int | None = None,
                    generation: str | None = None):
    """Every image of a (small) data set through its evaluation transform, stacked: [N, C, H, W].

    A study embeds the same images with every checkpoint: decoding them once per process instead of
    once per checkpoint gives the same tensors (the transform is deterministic) at a fraction of the cost.
    """
    import torch

    from embedscope.data import image_transform

    ds = _dataset(name, root, train_classes, generation)
    tf = image_transform(ds.kind, train=False, image_size=size, resize=resize)
    return torch.stack([tf(ds.load_image(i)) for i in range(len(ds))])


def _embed_splits(model, ds, inputs, transform, batch_size: int, device: str):
    """Every row of ``ds`` embedded -> float32 [N, D], each split on its own in the batches of the
    trainer's evaluation, as ``embed`` embeds them: :func:`embedscope.embed.embed_images` with
    ``by_split`` (one function for both), so that a row's ρ (train split) and R@1 (test split) are
    its training log's to the last bit (docs/studies.md). ``inputs``: the data set's decoded images
    (:func:`_input_tensor`), else the images are read from ``ds``. A diverged model raises
    ``embed``'s own :class:`embedscope.embed.NonFiniteEmbeddings` (which image, which weight)."""
    from embedscope.embed import embed_images

    return embed_images(model, ds, transform=transform, batch_size=batch_size, device=device, progress=False,
                        by_split=True, inputs=inputs)


def _faiss_threads(n: int) -> None:
    """faiss's OpenMP team size for searches started from this thread (OpenMP keeps the count per
    thread: a worker thread's setting leaves the calling thread's alone). Worker processes get 1 from
    Dask's ``OMP_NUM_THREADS=1``; worker threads would otherwise each start one thread per core."""
    try:
        import faiss
    except ImportError:  # pragma: no cover - faiss is optional for some measures
        return
    faiss.omp_set_num_threads(n)


def _described(m) -> dict[str, str]:
    """A registry measure (or measure pattern) as study.json lists it."""
    return {"split": m.split, "family": m.family, "direction": m.direction, "meaning": m.meaning}


def cache_key(sha256: str, dataset: str, root: str | None, train_classes, transform: str, device_kind: str,
              data: str = "") -> str:
    """Key of a cached embedding file: checkpoint bytes + data set (and its :func:`data_fingerprint`
    ``data``) + transform + device kind. ``v`` 3: each split embedded on its own (:func:`_embed_splits`);
    the files of ``v`` 2, embedded all rows at once, differ from them in the last bits."""
    d = {"checkpoint_sha256": sha256, "dataset": dataset, "root": str(Path(root).resolve()) if root else "",
         "train_classes": train_classes, "transform": transform, "device": device_kind, "data": data, "v": 3}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def _same_dataset(asked: str | None, trained: Any) -> bool:
    """Whether a study's ``--dataset`` (None: each checkpoint's own) is the data set a checkpoint was
    trained on: only then do its recorded folder (``root``) and split (``train_classes``) apply."""
    if asked is None:
        return True
    if not isinstance(trained, str):
        return False
    from embedscope.data import same_dataset

    return same_dataset(asked, trained)


def device_kind(dev) -> str:
    """The device kind of a study's rows, part of their cache key: ``cpu``, or on a GPU its type and
    :func:`~embedscope.device.precision_name` (``cuda/float32 (TF32 convolutions)`` under PyTorch's
    default): float32 on every device (GPU caches of embedscope versions that used bfloat16 there are not
    reused), and rows made with TF32 (~6e-4 from the CPU's) never mixed with rows made without."""
    from embedscope.device import precision_name

    return dev.type if dev.type == "cpu" else f"{dev.type}/{precision_name(dev)}"


def embed_cached(checkpoint: str | os.PathLike, *, dataset: str | None = None, root: str | None = None,
                 cache_dir: str | os.PathLike | None = None, device: str = "auto",
                 generation: str | None = None) -> tuple[Any, dict[str, Any]]:
    """(EmbeddingSet of train + test, info) for a checkpoint, from the cache when present.

    ``info``: ``sha256``, ``config``, ``extra``, ``cached`` (bool), ``cache_file``, ``embed_seconds``,
    ``device`` (the device kind the rows were embedded on, part of the cache key: ``cpu``, ``cuda/float32 (TF32
    convolutions)`` under PyTorch's default, ``cuda/float32``),
    ``data`` (``[dataset, root, train_classes, fingerprint]``: the data embedded and its
    :func:`data_fingerprint`, part of the cache key, so a changed folder is embedded again).
    The data set is listed once per ``generation`` and process (:func:`run_study` passes a token of
    its run); ``None`` lists it at each call (cheap: the listing and each file's ``stat``, not the
    images) and reuses what this process decoded only while the fingerprint is the same, so a
    notebook that changes the folder between two calls gets the new images.
    """
    from embedscope import store
    from embedscope.device import resolve_device
    from embedscope.embed import checkpoint_input, checkpoint_train_classes, evaluation_batch_size
    from embedscope.models import load_checkpoint
    from embedscope.study.plan import file_fingerprint

    t0 = time.perf_counter()
    before = file_fingerprint(checkpoint)
    model, config, info = load_checkpoint(checkpoint)
    if file_fingerprint(checkpoint) != before:  # the network read and its sha256 (hashed after it, the cache key)
        # may be of two files: the cached embedding of the new bytes would be returned with the old config
        raise EmbedscopeError(f"{checkpoint}: the checkpoint changed while it was read (written over?): "
                              "embed it again when it is written")
    name = dataset or config.get("dataset")
    if not name:
        raise EmbedscopeError(f"{checkpoint}: the checkpoint names no data set: pass --dataset")
    if root is None and _same_dataset(dataset, config.get("dataset")):
        # the folder the checkpoint was trained on, as ``embed`` takes it (a folder not found: its one-line error)
        from embedscope.embed import checkpoint_root

        root = checkpoint_root(config, str(name), None)[0]
    # the split the checkpoint was trained with, on the data set it was trained on (as ``embed``
    # takes it); another data set (--dataset) keeps its own split
    tc = checkpoint_train_classes(config, str(name), None)[0]
    if generation is None:
        generation = _builtin_fingerprint(str(name), tc)
    if generation is None:  # a folder as it is now (listed once): its fingerprint names this process's decoded inputs
        from embedscope.data import get_dataset

        ds = get_dataset(str(name), root, train_classes=tc)
        fingerprint = generation = data_fingerprint(ds)
    else:
        ds, fingerprint = _dataset_and_fingerprint(str(name), root, tc, generation)
    tf, size, transform = checkpoint_input(ds, config)
    resize = config.get("resize")
    dev = resolve_device(device)
    kind = device_kind(dev)  # where the rows are (were) embedded
    key = cache_key(info["sha256"], ds.name, root, tc, transform, kind, data=fingerprint)
    cdir = Path(cache_dir) if cache_dir else default_cache_dir()
    path = cdir / f"{key}.h5"
    out = {"sha256": info["sha256"], "config": config, "extra": info["extra"], "cache_file": str(path),
           "data": [str(name), root, tc, fingerprint], "device": kind}
    if path.exists():
        try:
            es = store.load(path)
            out.update(cached=True, embed_seconds=time.perf_counter() - t0)
            return es, out
        except EmbedscopeError:
            pass  # a damaged cache file: embed again and replace it
    with _one_cpu_thread(dev.type == "cpu"):
        inputs = (_input_tensor(str(name), root, tc, size, None if resize is None else int(resize), generation)
                  if dev.type == "cpu" and _fits(ds, size) else None)
        # a diverged model: embed's own error (which image, and which weight holds NaN or inf), from this
        # one embedding (embedscope.embed.nonfinite_message)
        X = _embed_splits(model, ds, inputs, tf, evaluation_batch_size(ds.kind), str(dev))
    es = store.EmbeddingSet(embeddings=X, labels=ds.labels, paths=ds.paths, split=ds.split,
                            class_names=ds.class_names, properties=ds.properties,
                            attrs={"dataset": ds.name, "root": str(Path(root).resolve()) if root else "",
                                   "transform": transform, "checkpoint": str(Path(checkpoint).resolve()),
                                   "checkpoint_sha256": info["sha256"],
                                   "checkpoint_config": json.loads(json.dumps(config, sort_keys=True, default=str))})
    if file_fingerprint(checkpoint) != before:  # its sha256 (the cache key, read after the load) and the network
        # embedded may be of two files: kept under that key, every study would take the one's rows for the other's
        raise EmbedscopeError(f"{checkpoint}: the checkpoint changed while it was embedded (written over?): "
                              "embed it again when it is written")
    try:
        cdir.mkdir(parents=True, exist_ok=True)
        store.save(path, es, force=True)  # atomic: a concurrent writer of the same key writes the same bytes
    except (OSError, EmbedscopeError) as e:  # a cache that cannot be written (read-only, no space; the study says
        # so once): the row is measured all the same, its embedding not kept (every row failed with a PermissionError)
        out["cache_file"] = ""
        out["cache_error"] = str(e) if isinstance(e, EmbedscopeError) else (e.strerror or e.__class__.__name__)
    out.update(cached=False, embed_seconds=time.perf_counter() - t0)
    return es, out


#: the columns that name a row's entry, first in every row (measured, failed, or read back renamed)
ENTRY_COLUMNS = ("id", "run", "selection", "epoch", "checkpoint", "untrained")


def _entry_columns(entry) -> dict[str, Any]:
    """The :data:`ENTRY_COLUMNS` of an entry: a task (a dict, :func:`_task`) or a plan's entry object."""
    return {k: entry[k] if isinstance(entry, dict) else getattr(entry, k) for k in ENTRY_COLUMNS}


def measure_entry(entry: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """Embed one entry's checkpoint (cached) and take every registry measure on its split -> a row.

    Never raises: a failure gives a row with ``status = "error"`` and the one-line ``error``; a task
    stopped by a signal in a worker thread (Ctrl-C: :class:`~embedscope.errors.Interrupted`) a row with
    ``status =`` :data:`STOPPED`, which the study never writes (:func:`_stop_if_signalled`).
    """
    from embedscope.study.measures import registry
    from embedscope.study.plan import config_columns
    from embedscope.study.stats import UNDEFINED_KEY, group_reasons

    # ``path``: the checkpoint as the calling process sees it, made absolute there (a worker of a
    # scheduler runs in another folder, maybe on another machine); ``checkpoint`` as the study names it
    path = entry.get("path") or entry["checkpoint"]
    from embedscope.study import plan

    start = plan._now_ns()
    stat = plan.file_fingerprint(path)  # (before reading it)
    row: dict[str, Any] = {**_entry_columns(entry), STAT_KEY: stat}
    cfg = entry.get("config") or {}
    row.update(config_columns(cfg))
    if entry.get("root"):  # the folder made absolute where the study runs (a worker elsewhere has another cwd)
        row["root"] = entry["root"]
    row.update({f"tag:{k}": v for k, v in (entry.get("tags") or {}).items() if not k.startswith("_")})
    if entry.get("error"):
        return {**row, "status": "error", "error": entry["error"]}
    threads = settings.get("threads")
    with _catch_warnings() as caught:  # (a worker never prints them: the row carries them)
        try:
            if threads:  # a Dask worker: this many torch threads (in this thread)
                import torch

                torch.set_num_threads(int(threads))
            if settings.get("faiss_threads"):  # a worker thread of a local cluster
                _faiss_threads(int(settings["faiss_threads"]))
            if settings.get("code") and settings["code"] != code_fingerprint():
                from embedscope import __version__

                raise EmbedscopeError(f"the Dask worker {platform.node()} runs other embedscope code ({__version__}, "
                                      f"fingerprint {code_fingerprint()}) than this study ({settings.get('version')}, "
                                      f"{settings['code']}): install the same embedscope on every worker "
                                      "(docs/studies.md)")
            if settings.get("remote") and not os.path.exists(path):
                raise EmbedscopeError(f"{path}: no such checkpoint file on the Dask worker {platform.node()} (the "
                                      "workers must see the checkpoints under the same paths, docs/studies.md)")
            root = no_root(settings.get("root"))
            if root is None and _same_dataset(settings.get("dataset"), cfg.get("dataset")):
                root = entry.get("root")  # the checkpoint's folder, of its own data set only (not of --dataset's)
            es, info = embed_cached(path, dataset=settings.get("dataset"), root=root,
                                    cache_dir=settings["cache_dir"], device=settings.get("device", "auto"),
                                    generation=settings.get("generation"))
            if plan.file_fingerprint(path) != stat:  # (its sha256 and what was measured may be of two files)
                raise EmbedscopeError(f"{path}: the checkpoint changed while it was measured (written over?): "
                                      "run the study again when it is written")
            if stat is not None and start - stat[2] < plan.RACY_NS:  # a write in the same clock tick after the read
                row[STAT_KEY] = None  # would leave its fingerprint as it was: the next run compares the sha256
            row[DATA_KEY] = info["data"]
            t1 = time.perf_counter()
            from embedscope.metrics.search.threads import search_threads

            _, compute, _ = registry()
            # a worker: its searches start as many threads as it may use (one task per core already)
            with search_threads(int(threads)) if threads else contextlib.nullcontext():
                vals = compute(es, settings.get("measures"), metric=settings.get("metric", "cosine"),
                               seed=int(settings.get("seed", 1234)), device=settings.get("device", "auto"),
                               geometry_seed=GEOMETRY_SEED)
            c = info["config"]
            if entry["selection"] != "untrained":  # a reference keeps its planned columns (loss "untrained", epochs 0),
                # also when it is a run's epoch-000.pt, whose config names the run's loss and epochs
                row.update({k: v for k, v in config_columns(c).items() if v is not None and k != "root"})
            why = undefined_reasons(es, vals)
            if info.get("cache_error"):  # (said once by the study, then dropped: not a column of runs.csv)
                row[CACHE_ERROR_KEY] = info["cache_error"]
            row.update({"sha256": info["sha256"], "cached": info["cached"], "embed_device": info["device"],
                        "embed_seconds": info["embed_seconds"],
                        "measure_seconds": time.perf_counter() - t1, "N_train": int((es.split == "train").sum()),
                        "N_test": int((es.split == "test").sum()), "status": "ok", "error": "",
                        # which measures have no finite value, and why (runs.csv; the reasons also in correlations.json)
                        "undefined": ", ".join(why),
                        "undefined_why": "; ".join(f"{', '.join(ms)}: {w}" for w, ms in group_reasons(why).items()),
                        UNDEFINED_KEY: why})
            # a value that is not a finite number is a missing one (NaN; JSON null), with its reason in `undefined`
            row.update({k: _finite(v) for k, v in vals.items()})
        except Interrupted as e:  # a signal (Ctrl-C) seen in a worker thread: the study stops, this is no failure
            row.update(status=STOPPED, error=str(e), **{STOPPED_KEY: e.signum})
        except Exception as e:  # noqa: BLE001 - the row reports it, the study goes on
            msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
            if not isinstance(e, EmbedscopeError):
                msg = f"{e.__class__.__name__}: {msg}"
            row.update(status="error", error=msg[:300])
    if caught:
        row[WARNINGS_KEY] = caught
        # those of reading the checkpoint (its weights upcast from float16, a head or an EMA copy left out): the
        # row's own, in runs.csv, also once the study is resumed and nothing is loaded again
        own = [t for m, _, t in caught if str(m).startswith("embedscope.models")]
        if own:
            row["warnings"] = "; ".join(own)
    return row


def _stop_if_signalled(row: dict[str, Any]) -> None:
    """Stop the study (in the main thread) instead of keeping a row that failed while it was being
    stopped: a worker thread's task ended by Ctrl-C (:data:`STOPPED`), or any task that failed once a
    signal arrived. Such a row would be written as an error (``ERROR stopped by Ctrl-C ...``) before
    the main thread stopped: no result, and not one of runs.csv; the same command measures it."""
    from embedscope import progress

    progress.check_signals()  # a signal the command line received: raised again here (the main thread)
    if row.get("status") == STOPPED:  # (no signal recorded: raised as what stopped the task)
        import signal

        raise Interrupted(int(row.get(STOPPED_KEY) or signal.SIGINT))


def _finite(v) -> float:
    f = float(v)
    return f if math.isfinite(f) else float("nan")


def undefined_reasons(es, vals: dict[str, float]) -> dict[str, str]:
    """{measure: why it has no finite value} for the measures of ``vals`` that are NaN or infinite.

    The registry returns numbers only; the reasons are the measures' own (the geometry's
    ``provenance["undefined"]``: ρ of a collapsed model, π_ratio = 0/0, ...; NR-Prec's ``undefined``),
    asked again only for a row that has such a value (a collapsed model: rare, and small beside its
    embedding). A reason that cannot be had is said as such; this never fails the row."""
    from embedscope.study.measures import registry

    bad = {k: float(v) for k, v in vals.items() if not math.isfinite(float(v))}
    if not bad:
        return {}
    mreg, _, _ = registry()
    out: dict[str, str] = {}
    for k, v in bad.items():
        out[k] = f"infinite ({v:+g})" if math.isinf(v) else "not defined (NaN)"
    geo = {k for k in bad if k in mreg and mreg[k].family == "geometry"}
    if geo:
        try:
            from embedscope.analyses.structure import geometry

            splits = {mreg[k].split for k in geo}
            for split in splits:
                r = geometry(es, split=split, seed=GEOMETRY_SEED)
                for k, w in (r.provenance.get("undefined") or {}).items():
                    if k in bad and k in geo and mreg[k].split == split:
                        out[k] = str(w)
                for k, w in (r.provenance.get("infinite") or {}).items():  # pi_ratio with pi_inter = 0
                    if k in bad and k in geo and mreg[k].split == split and math.isinf(bad[k]):
                        out[k] = f"infinite: {w}"
        except Exception:  # noqa: BLE001 - only the reason: the generic one stays
            pass
    for k in geo:
        if k == "rho_all" and math.isinf(bad[k]):  # KL(U||s) with a zero singular value
            out[k] = "infinite: some singular values are 0, KL(U||s) diverges (a collapsed or rank-deficient model)"
    for k in bad:  # R@k of a split with k rows or fewer (registry._retrieval_family)
        if k in mreg and mreg[k].family == "retrieval" and k.startswith("R@") and k[2:].isdigit():
            refs = len(es.subset(mreg[k].split)) - 1
            if int(k[2:]) > refs:
                out[k] = (f"k = {k[2:]} exceeds the {refs} reference{'' if refs == 1 else 's'} of each "
                          f"{mreg[k].split} query (the split's rows but itself)")
    props = {k for k in bad if k in mreg and mreg[k].family == "properties"}
    if props:
        try:
            from embedscope.metrics.properties import property_precision

            for split in {mreg[k].split for k in props}:
                sub = es.subset(split)
                names = {k: k.split(":", 1)[1] for k in props if mreg[k].split == split}
                res = property_precision(sub.embeddings, {p: sub.properties[p] for p in names.values()},
                                         metric="euclidean", max_r=None)
                for k, p in names.items():
                    w = (res.get(p, {}).get("undefined") or {}).get("NR-Prec")
                    if w:
                        out[k] = str(w)
        except Exception:  # noqa: BLE001 - only the reason
            pass
    return out


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    import numpy

    from embedscope import __version__

    out = {"embedscope": __version__, "python": platform.python_version(), "numpy": numpy.__version__,
           "torch": _torch_version()}
    # from the installed metadata (a serial study never imports dask, ~0.1 s): the libraries whose numbers
    # or files the study's outputs are (scikit-learn's digits: the data fingerprint names its version)
    for name in ("dask", "scipy", "scikit-learn", "faiss-cpu", "matplotlib", "pandas", "pyarrow"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:  # pragma: no cover
            pass
    return out


def _torch_version() -> str:
    """``torch.__version__`` (``2.14.1+cu130``: the installed metadata lacks the build tag), without
    importing torch (~2 s) when nothing imported it yet: the literal of the installed torch/version.py."""
    if "torch" not in sys.modules:
        try:
            import ast
            import importlib.util

            spec = importlib.util.find_spec("torch")  # (a top-level package: found, not imported)
            for loc in (spec.submodule_search_locations or []) if spec else []:
                for node in ast.parse(Path(loc, "version.py").read_text(encoding="utf-8")).body:
                    targets = (node.targets if isinstance(node, ast.Assign) else
                               [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else [])
                    if any(isinstance(t, ast.Name) and t.id == "__version__" for t in targets):
                        v = ast.literal_eval(node.value)
                        if isinstance(v, str) and v:
                            return v
        except Exception:  # noqa: BLE001 - another layout: asked of torch itself
            pass
    import torch

    return str(torch.__version__)


# the code that turns finished rows into the study's tables, statistics and figures: a finished
# study's outputs are reused only when these files are unchanged (a fix to them during development,
# where the version stays the same, then takes effect without --force)
_STATS_MODULES = ("embedscope.study.run", "embedscope.study.stats", "embedscope.study.measures",
                  "embedscope.viz.study", "embedscope.viz.style", "embedscope.tables")


@functools.lru_cache(maxsize=None)
def code_fingerprint() -> str:
    """sha256 (first 16 hex digits) over every source file of the installed embedscope package (their
    paths and bytes): a Dask worker whose embedscope differs from the study's (another version, or
    an older copy of the same one) would measure with other code, so a remote study's tasks carry
    this and a worker with another refuses them (the row reports it)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        if "__pycache__" in rel:
            continue
        h.update(rel.encode() + b"\0")
        with open(f, "rb") as fh:
            h.update(fh.read() + b"\0")
    return h.hexdigest()[:16]


def _stats_code() -> str:
    """sha256 (first 16 hex digits) over the source files of ``_STATS_MODULES``."""
    import importlib.util

    h = hashlib.sha256()
    for name in _STATS_MODULES:
        spec = importlib.util.find_spec(name)
        h.update(name.encode())
        if spec is not None and spec.origin and os.path.exists(spec.origin):
            with open(spec.origin, "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:16]


def _settings_of(source, epoch, dataset, root, metric, seed, device, measures=None) -> dict[str, Any]:
    src = str(source)
    if Path(src).exists():
        src = str(Path(src).resolve())
    return {"source": src, "epoch": epoch, "dataset": dataset, "root": root, "metric": metric, "seed": int(seed),
            "device": device, "measures": sorted(measures) if measures else None}


#: the :func:`~embedscope.study.plan.file_fingerprint` (size, mtime_ns, ctime_ns, inode, device) of the checkpoint
#: a row measured, null when it cannot tell the file (it changed less than ``plan.RACY_NS`` before it was read);
#: ``[size, mtime_ns]`` in a row of an earlier version (not a runs.csv column)
STAT_KEY = "_checkpoint_stat"
DATA_KEY = "_data"  # [dataset, root, train_classes, data_fingerprint] a row measured (not a runs.csv column)
CACHE_ERROR_KEY = "_cache_error"  # why a row's embedding could not be written to the cache (said, never stored)
#: the status of a row whose task was stopped by a signal (Ctrl-C) in a worker thread: never written (the
#: study stops; the same command measures it), nor an error
STOPPED = "stopped"
STOPPED_KEY = "_stopped_by"  # the signal's number in a STOPPED row (never stored)
#: the embedscope warnings a task raised ([module, class name, text] each): said by the study's process, once,
#: never printed by a worker (never stored); those of loading the checkpoint are also the row's ``warnings``
WARNINGS_KEY = "_warnings"


_caught = threading.local()  # this thread's list of caught warnings while a task runs (:func:`_catch_warnings`)
_hook_lock = threading.Lock()
_hook: dict[str, Any] = {"users": 0, "inner": None}


def _show_or_catch(message, category, filename, lineno, file=None, line=None):
    """``warnings.showwarning`` while tasks run: an embedscope warning of a thread that catches them is
    kept for its row (:func:`_catch_warnings`); anything else is shown as before."""
    from embedscope.errors import EmbedscopeWarning

    sink = getattr(_caught, "sink", None)
    if sink is not None and isinstance(category, type) and issubclass(category, EmbedscopeWarning):
        sink.append([category.__module__, category.__qualname__, str(message)])
        return
    inner = _hook["inner"]
    if inner is not None:
        inner(message, category, filename, lineno, file, line)


@contextlib.contextmanager
def _catch_warnings():
    """The embedscope warnings raised in this thread inside (a checkpoint's weights upcast from float16, a
    head left out, ...), kept in the list it yields instead of shown: a worker thread or process never
    prints (the study's process says them, once, escaped, between its progress lines), and the row keeps
    them. Thread-safe, unlike ``warnings.catch_warnings``: other threads' warnings are shown as before.
    The filters stand (``-W error`` still raises, ``-W ignore`` still ignores); a warning already shown
    in this process (Python's once per text and place) is raised again for the row."""
    import warnings

    from embedscope.errors import EmbedscopeWarning

    sink: list[list[str]] = []
    with _hook_lock:
        if _hook["users"] == 0 or warnings.showwarning is not _show_or_catch:
            if warnings.showwarning is not _show_or_catch:
                _hook["inner"] = warnings.showwarning
                warnings.showwarning = _show_or_catch
        _hook["users"] += 1
        # the action Python takes anyway (appended last, where no filter matches: "default"); adding it
        # forgets which warnings were shown (their registries), so that a checkpoint loaded again in this
        # process (a study run again with --force, a notebook) warns again and its row says so
        warnings.filterwarnings("default", category=EmbedscopeWarning, append=True)
    outer = getattr(_caught, "sink", None)  # (one caught inside another: the outer one's again after it)
    _caught.sink = sink
    try:
        yield sink
    finally:
        _caught.sink = outer
        with _hook_lock:
            _hook["users"] -= 1
            if _hook["users"] == 0 and warnings.showwarning is _show_or_catch:
                warnings.showwarning = _hook["inner"]
                _hook["inner"] = None


def _say_warnings(caught, said: set) -> None:
    """The warnings a task caught (:data:`WARNINGS_KEY`), raised again here, in the study's process (the
    command line shows each as one escaped line), each text once per study."""
    import importlib
    import warnings

    from embedscope.errors import EmbedscopeWarning

    for mod, name, text in caught or ():
        if text in said:
            continue
        said.add(text)
        try:
            cls = getattr(importlib.import_module(str(mod)), str(name))
            if not (isinstance(cls, type) and issubclass(cls, EmbedscopeWarning)):
                cls = EmbedscopeWarning
        except Exception:  # noqa: BLE001 - a class this process cannot import: the base class
            cls = EmbedscopeWarning
        warnings.warn_explicit(cls(text), cls, __file__, 0, module=__name__, registry=None)


def _unchanged(row: dict[str, Any], checkpoint: str | os.PathLike) -> bool:
    """Whether a finished row still describes ``checkpoint``: the file's fingerprint (size, modification and
    change times, inode, device: :func:`~embedscope.study.plan.file_fingerprint`) as when it was measured, or
    else the same sha256. A retrained run at the same path is measured again, not served its old row, also
    one copied in with its size and times kept (``cp -p``, ``touch -r``: its change time or inode tells;
    [size, mtime_ns] alone, compared before, did not). A file touched, copied with the same bytes, seen by a
    Dask worker elsewhere (another device or inode), or a row of an earlier version (``[size, mtime_ns]``)
    is hashed: the same bytes keep the row, whose fingerprint is then the file's as seen here (``row`` is
    updated: the caller keeps it, so that the next run needs no hash) when the file last changed
    ``plan.RACY_NS`` or more before (see there)."""
    from embedscope.study import plan

    start = plan._now_ns()
    now = plan.file_fingerprint(checkpoint)
    if now is None:
        return False
    if row.get(STAT_KEY) == now:
        return True
    from embedscope.fileio import sha256_file

    try:
        same = bool(row.get("sha256")) and sha256_file(checkpoint) == row["sha256"]
    except OSError:
        return False
    if same and plan.file_fingerprint(checkpoint) == now and start - now[2] >= plan.RACY_NS:
        row[STAT_KEY] = now
    return same


class _DataCheck:
    """Whether a finished row measured the data as they are now (its :data:`DATA_KEY` fingerprint
    against :func:`current_fingerprint`, computed once per data set). A row of an earlier version
    (no fingerprint) is kept, unchecked; so is a row whose data set cannot be listed now (it stays
    as measured: nothing finished is thrown away for a folder that is missing)."""

    def __init__(self, generation: str, say: Callable[[str], Any]) -> None:
        self.generation, self.say = generation, say
        self.now: dict[tuple, str | None] = {}
        self.changed: dict[tuple, int] = {}
        self.unlisted: dict[tuple, tuple[int, str]] = {}

    def __call__(self, row: dict[str, Any]) -> bool:
        d = row.get(DATA_KEY)
        if not (isinstance(d, list) and len(d) == 4):
            return True
        key = (str(d[0]), no_root(d[1]), d[2] if d[2] is None else int(d[2]))
        if key not in self.now:
            try:
                self.now[key] = current_fingerprint(*key, self.generation)
            except EmbedscopeError as e:
                self.now[key] = None
                self.unlisted[key] = (0, str(e))  # one line: raw names, escaped by the notice
        if self.now[key] is None:
            n, msg = self.unlisted[key]
            self.unlisted[key] = (n + 1, msg)
            return True
        if self.now[key] != d[3]:
            self.changed[key] = self.changed.get(key, 0) + 1
            return False
        return True

    def report(self) -> None:
        for (name, root, _), n in self.changed.items():  # raw: say escapes them
            where = f" in {root}" if root else ""
            self.say(f"study: the data set {name}{where} changed since {n} finished row(s) were measured "
                     "(images added, removed, replaced or relabelled): they are measured again")
        for (name, _root, _), (n, msg) in self.unlisted.items():
            self.say(f"study: the data set {name} cannot be listed now ({msg}): its {n} finished "
                     "row(s) are kept as measured, unchecked")


def _row_path(out_dir: Path, eid: str) -> Path:
    return out_dir / "rows" / f"{eid}.json"


def _row_files(rows_dir: Path, skip=()):
    """``(file, row)`` of each ``<id>.json`` in ``rows_dir`` (sorted) that is a plain file holding a JSON
    object whose ``id`` is its name, ``id`` not in ``skip``; anything else (another name, a link, a
    folder, a damaged or unreadable file) is passed over."""
    try:
        files = sorted(rows_dir.glob("*.json"))
    except OSError:
        return
    for f in files:
        if f.stem in skip:
            continue
        try:
            if not f.is_file() or f.is_symlink():
                continue
            r = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(r, dict) and r.get("id") == f.stem:
            yield f, r


def _remove_rows(rows_dir: Path) -> list[Path]:
    """Remove the rows a study wrote in ``rows_dir`` (``--force``: the study starts again, every row is
    measured again) -> the files removed. A row is ``<id>.json`` holding a JSON object with that ``id``,
    its ``run`` and ``status``; any other file (another name, other content, a damaged row, a folder) is
    left as it is. Left behind, the rows of a study with other settings would clutter the folder and,
    with the same ids, be read back as finished rows when the forced study is stopped and resumed."""
    gone: list[Path] = []
    for f, r in _row_files(rows_dir):
        if "run" in r and "status" in r:
            try:
                f.unlink()
            except FileNotFoundError:
                continue
            gone.append(f)
    return gone


def _entry_tags(e) -> dict[str, Any]:
    """The ``tag:<name>`` columns of an entry's row, as its row file holds them (a NaN as null)."""
    from embedscope.tables import _jsonable

    return {f"tag:{k}": _jsonable(v) for k, v in (e.tags or {}).items() if not k.startswith("_")}


def _row_tags(r: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in r.items() if k.startswith("tag:")}


def _as_entry(r: dict[str, Any], e) -> dict[str, Any]:
    """A finished row ``r`` of the checkpoint of entry ``e``, with the columns that name the entry (id, run,
    selection, epoch, checkpoint, untrained reference, tags) as ``e`` has them now, in the order of a row
    measured now (:func:`measure_entry`: the entry, the config, the tags, the measures)."""
    from embedscope.study.plan import config_columns

    row: dict[str, Any] = _entry_columns(e)
    if STAT_KEY in r:
        row[STAT_KEY] = r[STAT_KEY]
    row.update({k: r.get(k, v) for k, v in config_columns(e.config or {}).items()})
    row.update(_entry_tags(e))
    row.update({k: v for k, v in r.items() if k not in row and not k.startswith("tag:")})
    return row


def _adopt_renamed_rows(out_dir: Path, entries, done: dict[str, dict[str, Any]], same_data: Callable[[dict], bool],
                        say: Callable[[str], Any]) -> None:
    """Read back, under its entry's id and run name now, the finished row of a checkpoint that the study
    names otherwise than when it was measured (a file of one name added to or removed from the source,
    whose folders then tell the files apart differently; the naming of an earlier version): the row of
    the same checkpoint (as the study names it), selection and epoch, unchanged since (its fingerprint, else
    sha256) and of the data as they are now. Its file is renamed to the new id. What was measured is the
    checkpoint's, whatever its run's name; the columns that name the entry (id, run, tags) are the entry's
    now. Nothing else is adopted: another checkpoint's row is never read back."""
    from embedscope.tables import write_json

    wanted: dict[tuple, list] = {}
    for e in entries:
        if e.id not in done and not e.error and e.selection != "untrained":
            wanted.setdefault((e.checkpoint, e.selection, e.epoch), []).append(e)
    if not wanted:
        return
    runs = {e.id: e.run for e in entries}
    moved: list[tuple[str, str]] = []
    # (the row of an entry of this study is read back under its own id: skipped)
    for f, r in _row_files(out_dir / "rows", skip=done):
        if not (r.get("status") == "ok" and "run" in r):
            continue
        if f.stem in runs and r["run"] == runs[f.stem]:
            continue  # the row of that entry, not read back for its checkpoint or data (judged once, above)
        key = (r.get("checkpoint"), r.get("selection"), r.get("epoch"))
        try:
            cands = wanted.get(key)
        except TypeError:  # (an unhashable value: not a row of a study)
            continue
        if not cands or len(cands) != 1 or cands[0].id in done:
            continue
        e = cands[0]
        if not (_unchanged(r, e.checkpoint) and same_data(r)):
            continue
        row = _as_entry(r, e)
        new = _row_path(out_dir, e.id)
        try:
            write_json(new, row, force=True)
            if f != new:
                f.unlink()
        except (OSError, EmbedscopeError):
            continue  # (read-only rows: it is measured again, from the embedding cache)
        done[e.id] = row
        moved.append((str(r.get("run")), e.run))
    if moved:
        (old, now), n = moved[0], len(moved)
        say(f"study: {n} finished row{'' if n == 1 else 's'} of checkpoints named otherwise when measured "
            f"read back under their names now (e.g. run {old} -> {now}), not measured again")


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value of ``path``; a file that cannot be read or is not valid JSON is one
    :class:`EmbedscopeError` line naming it and what is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise EmbedscopeError(f"{path}: not valid JSON (not UTF-8 text)") from None
    except OSError as e:
        raise EmbedscopeError(f"{path}: cannot be read ({e.strerror or 'unreadable'})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise EmbedscopeError(f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except ValueError as e:  # pragma: no cover - json.loads raises JSONDecodeError for any bad text
        raise EmbedscopeError(f"{path}: not valid JSON ({str(e).splitlines()[0] if str(e) else 'unreadable'})") from None


def check_study_meta(meta: Any, path: str | os.PathLike) -> dict[str, Any]:
    """``meta`` (read from ``path``) when it has the shape of a study's study.json, else one
    :class:`EmbedscopeError` line naming the file."""
    if not isinstance(meta, dict) or not isinstance(meta.get("settings", {}), dict):
        raise EmbedscopeError(f"{path}: not the settings of a study (expected a JSON object with 'settings')")
    if not isinstance(meta.get("versions", {}), dict):
        raise EmbedscopeError(f"{path}: not the settings of a study ('versions' is not an object)")
    return meta


def _can_write(folder: Path) -> bool:
    """Whether files can be created in ``folder`` (or, not there yet, in its nearest existing ancestor)."""
    from embedscope.fileio import existing_ancestor, probe_folder

    try:
        probe_folder(existing_ancestor(folder), folder)
        return True
    except EmbedscopeError:
        return False


def _refuse_file_in_the_way(folder: Path, label: str) -> None:
    """A file given as ``folder`` or as one of its parents: one :class:`EmbedscopeError` line naming
    ``label``. Whether the folder is writable is not asked (a read-only cache can serve every row)."""
    from embedscope.fileio import existing_ancestor

    anc = existing_ancestor(folder)
    if not anc.is_dir():
        raise EmbedscopeError(f"{label}: exists and is not a folder" if anc == folder
                              else f"{label}: {anc} is a file, not a folder")


def no_root(root: Any) -> str | None:
    """A data set folder as a study reads it back (study.json's settings, a row's data, a task): None for
    none, also for "", which a study of an earlier version could hold for it (a path of "" is the working
    folder, which the loaders refuse as --root: an unset shell variable); other folders as text."""
    if root is None or root == "":
        return None
    return str(root)


def _check_dataset(name: str | None) -> None:
    """Refuse an unknown ``--dataset`` before any work (a usage error)."""
    if name is None:
        return
    from embedscope.data import ALIASES, DATASETS, LOADERS

    if not isinstance(name, str) or ALIASES.get(name.lower(), name.lower()) not in LOADERS:
        raise UsageError(f"--dataset: unknown data set '{name}' (choose {', '.join(DATASETS)})")


def _is_digits(name: Any) -> bool:
    from embedscope.data import ALIASES

    return isinstance(name, str) and ALIASES.get(name.lower(), name.lower()) == "digits"


def _check_root_of_digits(entries) -> None:
    """Refuse ``--root`` (a usage error, before any checkpoint is embedded) when every checkpoint of
    the plan was trained on the digits, which come from scikit-learn: each row would fail with it."""
    named = [(e.config or {}).get("dataset") for e in entries if e.config and e.selection != "untrained"]
    if named and all(_is_digits(n) for n in named):
        raise UsageError("--root: the checkpoints were trained on the digits, which come from scikit-learn, not "
                         "from a folder; leave --root out")


def fixed_properties(name: Any) -> tuple[str, ...] | None:
    """The properties (``/properties/<name>``) an embedding of data set ``name`` holds whatever its
    folder, when the code fixes them: none for the digits and an image folder, the scene properties of
    ``shapes``, ``super_class`` of SOP. None when they depend on the files found (CUB's attributes and
    boxes, Cars' boxes): known only once the images are embedded."""
    from embedscope.data import ALIASES

    if not isinstance(name, str):
        return None
    key = ALIASES.get(name.lower(), name.lower())
    if key in ("digits", "imagefolder"):
        return ()
    if key == "shapes":
        from embedscope.data.shapes import PROPERTY_NAMES

        return tuple(PROPERTY_NAMES)
    if key == "sop":
        return ("super_class",)
    return None


def _check_properties(target: str, measures: list[str] | None, datasets: list[Any]) -> None:
    """Refuse (a usage error, before any checkpoint is embedded) a ``--target`` or ``--measures``
    ``NR-Prec:<property>`` that no data set of the study holds, when every one of them fixes its
    properties (:func:`fixed_properties`); otherwise the rows tell (the statistics' error names it)."""
    from embedscope.analyses.registry import PROPERTY_PREFIX

    names = sorted({str(d) for d in datasets if isinstance(d, str)})
    fixed = [fixed_properties(d) for d in names]
    if not names or any(f is None for f in fixed):
        return
    have = sorted({p for f in fixed for p in f})
    for opt, ms in (("--target", [target]), ("--measures", measures or [])):
        for m in ms:
            if not m.startswith(PROPERTY_PREFIX) or m[len(PROPERTY_PREFIX):] in have:
                continue
            prop = m[len(PROPERTY_PREFIX):]
            which = (f"the data set {names[0]} has" if len(names) == 1 else
                     f"the data sets of the study ({', '.join(names)}) have")
            raise UsageError(f"{opt} {m}: {which} no property '{prop}' ("
                             + (f"properties: {', '.join(have)}" if have else "no properties at all")
                             + "); name a property it holds")


def _check_roots(entries, dataset: str | None, root: str | None, out_dir: Path, say: Callable[[str], Any]) -> None:
    """The data set folder each checkpoint was trained on (``train --root``), as ``embed`` takes it
    (:func:`embedscope.embed.checkpoint_root`): its note (which folder, and why) once per folder, and
    a checkpoint whose folder is not found an error row with embed's one-line error; refused before
    any work when no checkpoint left to measure can be embedded so. With ``--root`` every row embeds
    that folder: nothing to check."""
    from embedscope.embed import checkpoint_root

    if root is not None:
        return
    notes: dict[str, int] = {}
    live = [e for e in entries if not e.error and e.config]
    failed = []
    for e in live:
        name = dataset or e.config.get("dataset")
        if not isinstance(name, str) or not name:
            continue
        try:
            _, note = checkpoint_root(e.config, name, None)
        except EmbedscopeError as ex:
            e.error = str(ex)
            failed.append(e)
            continue
        if note:
            notes[note] = notes.get(note, 0) + 1
    if failed and len(failed) == len(live) and not any(_row_path(out_dir, e.id).exists() for e in failed):
        n = len(failed)
        raise EmbedscopeError(failed[0].error + (f" (no folder of the study's {n} checkpoints is found)" if n > 1
                                                 else ""))
    for note, n in notes.items():
        say(f"note: {n} checkpoint{'' if n == 1 else 's'}: {note}")


def _check_exclude_measured(exclude, measures: list[str]) -> None:
    """Refuse (a usage error, before any work) an ``--exclude`` that names a measure of the registry
    that ``--measures`` leaves out: no row would have that column."""
    from embedscope.analyses.registry import PATTERNS
    from embedscope.study.measures import registry
    from embedscope.study.stats import check_exclude

    mreg, _, _ = registry()
    for col, _, _, expr in check_exclude(exclude):
        if col in measures:
            continue
        if col in mreg or any(col.startswith(p) for p in PATTERNS):
            raise UsageError(f"--exclude '{expr}': the measure {col} is not among --measures "
                             f"({' '.join(measures)}): add it there, or exclude by another column")


def run_study(source: str | os.PathLike, out_dir: str | os.PathLike, *, epoch: str = "best",
              dataset: str | None = None, root: str | None = None, cache_dir: str | os.PathLike | None = None,
              workers: int | None = None, scheduler: str | None = None, worker_processes: bool = False,
              force: bool = False, target: str = "R@1", exclude=(), metric: str = "cosine", seed: int = 1234,
              n_boot: int = 1000, device: str = "auto", measures=None, figures: bool = True, progress: bool = True,
              echo: Callable[[str], None] | None = None,
              on_row: Callable[[dict[str, Any]], None] | None = None,
              notice: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure every checkpoint of ``source`` and write the study folder ``out_dir`` (docs/methods.md §6).

    Parameters
    ----------
    source : a train-grid folder, a glob of checkpoints, or a YAML file (``docs/studies.md``).
    epoch : ``best`` | ``last`` | ``all`` (see :func:`embedscope.study.plan.plan_study`).
    workers : number of local Dask workers (default: one per core); 0 = serial in this process.
    worker_processes : the local workers are processes (one per worker, each importing torch) instead
        of single-threaded worker threads in this process (the default).
    scheduler : address of an existing Dask scheduler (``tcp://host:8786``) instead of a local cluster.
    force : start again: the finished rows in ``rows/`` are removed and every row is measured again (the
        embedding cache is still used; it is keyed by content).
    target, exclude, n_boot, seed : statistics (:func:`embedscope.study.stats.study_statistics`).
    on_row : called in this process with each row as it is written (tests stop a study here).
    progress : on a terminal (stderr), a bar over the checkpoints to measure; ``echo`` prints the lines.
    notice : what must be seen even without the lines (a scheduler without workers, for which the
        study waits); default: a :class:`RuntimeWarning`. The CLI prints it on stderr.

    Returns
    -------
    dict with ``rows``, ``stats``, ``errors`` (rows whose status is error), ``computed`` (rows
    measured by this call) and ``paths``.
    """
    if scheduler is not None and (workers is not None or worker_processes):
        raise UsageError("--workers and --worker-processes set up a local cluster: not with --scheduler (the "
                         "scheduler's workers are started by 'dask worker', docs/studies.md)")
    if worker_processes and workers is not None and not isinstance(workers, bool) and workers == 0:
        raise UsageError("--worker-processes: not with --workers 0 (serial in this process, no workers): "
                         "leave out one of them")
    box = _ClusterBox(workers, scheduler, processes=worker_processes)
    held = contextlib.ExitStack()  # the study folder's lock, once taken, until the study ends
    try:
        return _run_study(box, source, out_dir, epoch=epoch, dataset=dataset, root=root, cache_dir=cache_dir,
                          workers=workers, scheduler=scheduler, force=force, target=target, exclude=exclude,
                          metric=metric, seed=seed, n_boot=n_boot, device=device, measures=measures,
                          figures=figures, progress=progress, echo=echo, on_row=on_row, notice=notice or _warn,
                          hold=held.enter_context)
    finally:
        try:
            box.close()
        finally:
            held.close()


def _absolute(path: str | None) -> str | None:
    """``path`` made absolute against this process's working folder (``None``, ``~…`` as they are)."""
    if not path or str(path).startswith("~"):
        return path
    return os.path.abspath(path)


def _task(entry) -> dict[str, Any]:
    """What a worker gets of a study entry: the entry, its checkpoint's absolute ``path``, and its
    data-set ``root`` (from the checkpoint's config) made absolute, as this process would read them."""
    d = entry.to_dict()
    d["path"] = os.path.abspath(entry.checkpoint)
    r = (entry.config or {}).get("root")
    if isinstance(r, str) and r:
        d["root"] = _absolute(r)
    return d


def _empty_rows_folder(p: Path) -> bool:
    try:
        return p.name == "rows" and p.is_dir() and not any(p.iterdir())
    except OSError:
        return False


def check_scheduler_address(address: Any) -> None:
    """Refuse (a usage error, before any work) a ``--scheduler`` that is not a Dask address:
    ``tcp://host:8786`` (or ``host:8786``, ``tls://…``, ``ws://…``); whether it answers is asked later."""

    if not isinstance(address, str) or not address.strip():
        raise UsageError("--scheduler: expected the address of a Dask scheduler, e.g. tcp://host:8786")
    from distributed.comm import registry
    from distributed.comm.addressing import parse_address

    try:
        scheme, loc = parse_address(address)
        backend = registry.get_backend(scheme)
        try:
            backend.get_address_host_port(loc)
        except NotImplementedError:  # a scheme without host and port (inproc://): Dask judges it
            pass
    except (ValueError, TypeError) as e:
        why = str(e).splitlines()[0] if str(e) else e.__class__.__name__
        raise UsageError(f"--scheduler {address}: not a Dask scheduler address ({why}); "
                         "expected e.g. tcp://host:8786") from None


def _say_if_no_workers(client, scheduler: str, notice: Callable[[str], None]) -> None:
    """One ``notice`` when the scheduler has no worker yet: the study waits for one (a batch system
    may start them later) instead of looking stuck."""
    try:
        n = len(client.scheduler_info().get("workers") or {})
    except Exception:  # noqa: BLE001 - only a notice
        return
    if n == 0:
        notice(f"the Dask scheduler {scheduler} has no workers yet: waiting for one to join (start 'dask worker "
               "ADDRESS'; Ctrl-C stops, and the same command resumes)")


def _warn(message: str) -> None:
    """The default ``notice`` of :func:`run_study`: a :class:`RuntimeWarning`."""
    import warnings

    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _run_study(box: _ClusterBox, source, out_dir, *, epoch, dataset, root, cache_dir, workers, scheduler, force,
               target, exclude, metric, seed, n_boot, device, measures, figures, progress, echo,
               on_row, notice, hold) -> dict[str, Any]:
    from embedscope.analyses.registry import PATTERNS, known_names
    from embedscope.fileio import check_writable, write_text
    from embedscope.study.measures import registry
    from embedscope.study.plan import (
        CONFIGS_FILE,
        config_columns,
        damaged_untrained,
        known_text,
        newer_known,
        plan_study,
        read_known,
    )
    from embedscope.study.stats import check_exclude, check_exclude_columns, check_exclude_not_circular
    from embedscope.text import safe

    def say(line: str) -> None:  # the study's lines name files and data sets: escaped here, once (text.py)
        (echo or print)(safe(line))

    mreg0, _, _ = registry()
    if not isinstance(target, str) or target not in mreg0:
        raise UsageError(f"--target: unknown measure '{target}' (known: {known_names()})")
    if measures is not None:
        unknown = [m for m in measures if m not in mreg0]
        if unknown:
            raise UsageError(f"--measures: unknown measure(s) {', '.join(unknown)} (known: {known_names()})")
        measures = list(dict.fromkeys([target, *measures]))
        if measures == [target]:  # the statistics would be an empty table, after every checkpoint is embedded
            raise UsageError(f"--measures names only the target ({target}, --target): name at least one other "
                             "measure to correlate with it")
    check_exclude(exclude)  # refuse a bad expression before any work (an unknown column: once the rows are in)
    check_exclude_not_circular(exclude)
    if measures is not None:
        _check_exclude_measured(exclude, measures)
    if workers is not None and int(workers) < 0:
        raise UsageError(f"--workers must be >= 0, got {workers}")
    import numbers

    if isinstance(n_boot, bool) or not isinstance(n_boot, numbers.Integral) or n_boot < 0:
        raise UsageError(f"--bootstrap must be an integer >= 0 (0: no intervals), got {quoted(n_boot)}")
    n_boot = int(n_boot)
    _check_dataset(dataset)
    if root is not None and os.fspath(root) == "":  # (the command line refuses it as an empty name)
        raise UsageError("--root is empty (an unset shell variable?): give the data set's folder, or leave "
                         "--root out to embed the folder each checkpoint was trained on")
    if cache_dir is not None and os.fspath(cache_dir) == "":  # (it was the default cache, silently)
        raise UsageError("--cache-dir is empty (an unset shell variable?): give the cache folder, or leave "
                         "--cache-dir out for the default one")
    if dataset is not None:  # a property the data set has not: refused now (else after every row is measured)
        _check_properties(target, measures, [dataset])
    if root is not None and dataset is not None and _is_digits(dataset):
        raise UsageError("--root: the digits (--dataset digits) come from scikit-learn, not from a folder; "
                         "leave --root out")
    if scheduler is not None:
        check_scheduler_address(scheduler)
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    # a file in the way of the cache fails every row: refused now (a read-only cache that holds every
    # embedding is fine, so its writability is not required)
    _refuse_file_in_the_way(cache, f"--cache-dir {cache}" if cache_dir else f"embedding cache {cache}")
    cache_ok = _can_write(cache)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise EmbedscopeError(f"{out_dir} is a file, expected a study folder")
    if os.path.realpath(cache) == os.path.realpath(out_dir):  # (its files are the study's, and the study holds
        # the folder's lock while a replaced cache file waits for it)
        raise UsageError(f"--cache-dir {cache} is the study folder itself: give a folder inside or beside it")
    check_writable(out_dir / "study.json", force=True)  # as train-grid and make-shapes: before any work
    if (out_dir / "rows").exists() and not (out_dir / "rows").is_dir():
        raise EmbedscopeError(f"{out_dir} is not a study folder ({out_dir / 'rows'} is a file); use another folder")
    settings = _settings_of(source, epoch, dataset, root, metric, seed, device, measures)
    meta_path = out_dir / "study.json"
    old_meta: dict[str, Any] = {}
    from embedscope.fileio import folder_lock, make_folders, remove_empty_folders

    created = make_folders(out_dir / "rows", out_dir)
    try:
        # one study writes a folder at a time, from its checks of study.json to its last file: two at once
        # both passed the checks and mixed their settings' rows and statistics
        hold(folder_lock(out_dir, f"the study {out_dir}", made=created))
        if meta_path.exists():
            try:
                old_meta = check_study_meta(read_json(meta_path), meta_path)
            except EmbedscopeError as e:
                if not force:
                    raise EmbedscopeError(f"{e}; use --force to start the study again, or another folder") from None
                old_meta = {}  # --force: the study starts again
            old = dict(old_meta.get("settings", {}))
            old["root"] = no_root(old.get("root"))  # ("": no folder, as a study of an earlier version may hold it)
            diff = [k for k in SETTINGS_KEYS if old.get(k) != settings.get(k)]
            if diff and not force:
                raise EmbedscopeError(
                    f"{out_dir} holds a study with other settings "
                    f"({', '.join(f'{k}: {old.get(k)} -> {settings.get(k)}' for k in diff)}); "
                    "use --force to start it again, or another folder")
        elif not force and any(p for p in out_dir.iterdir() if not _empty_rows_folder(p)):
            # (a study stopped before it wrote study.json leaves its empty rows/: the same command goes on)
            raise EmbedscopeError(f"{out_dir} exists and is not a study folder (use --force or another folder)")
    except BaseException:
        remove_empty_folders(created)  # (none when the lock was refused: the other study's now, folder_lock)
        raise
    mreg, _, msource = registry()
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    if not force and old_meta and any((out_dir / "rows").glob("*.json")):
        pass  # most likely a finished or resumed study: a cluster is started only if rows are left to measure
    else:
        box.start()  # the cluster comes up (and its workers import) while the study plans
    # a column --exclude names that no row will have: refused now, not after every checkpoint is measured
    try:
        # the checkpoint configs read by an earlier run, by file (size, times, inode): one unchanged is not
        # read again (reading it imports torch, ~2 s of a study run again with nothing left to measure)
        known = {} if force else read_known(out_dir / CONFIGS_FILE)
        known_before = json.dumps(known, sort_keys=True)
        # a cache that cannot be written (read-only, no home): the untrained references in the study folder
        udir = cache / "untrained" if cache_ok else None
        entries = plan_study(source, out_dir, epoch=epoch, untrained_dir=udir, known=known)
        planned = {os.path.abspath(e.checkpoint) for e in entries}  # (records of checkpoints no longer in the
        known = {k: v for k, v in known.items() if k in planned}  # study, deleted or left out, are dropped)
        check_exclude_columns(exclude, {t for e in entries for t in (e.tags or {}) if not t.startswith("_")},
                              set(mreg), tuple(PATTERNS))
        if root is not None and dataset is None:
            _check_root_of_digits(entries)
        if dataset is None:
            _check_properties(target, measures, [(e.config or {}).get("dataset") for e in entries
                                                 if e.config and not e.error])
        _check_roots(entries, dataset, root, out_dir, say)
    except EmbedscopeError:  # (also a source with nothing to measure)
        remove_empty_folders(created)  # (a new study folder is not left behind)
        raise
    meta = {"settings": settings, "target": target, "exclude": list(exclude or []), "n_boot": n_boot,
            "figures": figures,
            # settings.seed is k-means' and the bootstrap's; the geometry's sampled pairs (uniformity)
            # take the registry's fixed seed: recorded, so that a row can be recomputed alone
            "geometry_seed": GEOMETRY_SEED,
            "cache_dir": str(cache), "measures_source": msource,
            "measures": {**{k: _described(v) for k, v in mreg.items() if measures is None or k in measures},
                         **{f"{p}<name>": _described(v) for p, v in PATTERNS.items()
                            if measures is None or any(m.startswith(p) for m in measures)}},
            "versions": _versions(), "stats_code": _stats_code(), "code": code_fingerprint(), "host": platform.node(),
            "started": started, "entries": len(entries)}
    if force:  # the study starts again: no row of the study it replaces is left to be read back (before study.json)
        gone = _remove_rows(out_dir / "rows")
        if gone:
            say(f"study: --force: removed the {len(gone)} row(s) of the study in {out_dir} (every row is measured again)")
    write_text(meta_path, json.dumps(meta, indent=2, default=str) + "\n", force=True)

    def keep_known() -> None:
        if ((json.dumps(known, sort_keys=True) != known_before or (force and (out_dir / CONFIGS_FILE).exists()))
                and not newer_known(out_dir / CONFIGS_FILE)):  # (a newer embedscope's records: left as they are)
            try:  # (after study.json: a folder holding it alone is no study folder)
                write_text(out_dir / CONFIGS_FILE, known_text(known), force=True)
            except (OSError, ValueError, EmbedscopeError):  # (read-only; a path that is no text)
                pass  # only a saving of time: the configs are read again next time

    keep_known()

    import uuid

    # this run's token: every process lists the data sets again for it (a folder changed since an earlier
    # run of this process is seen as it is now)
    generation = uuid.uuid4().hex
    same_data = _DataCheck(generation, say)
    done: dict[str, dict[str, Any]] = {}
    retagged: list[str] = []  # finished rows whose tags the source changed since
    from embedscope.tables import write_json
    for e in entries:
        rp = _row_path(out_dir, e.id)
        if rp.exists() and not force:
            try:
                r = json.loads(rp.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # a damaged row is measured again
            stat = r.get(STAT_KEY) if isinstance(r, dict) else None
            # (the run too: two run names can make one id, "a/model" and "a_model", and an earlier version
            # named the files a/model.pt and b/model.pt both "model")
            if (isinstance(r, dict) and r.get("status") == "ok" and r.get("id") == e.id
                    and r.get("run", e.run) == e.run and _unchanged(r, e.checkpoint) and same_data(r)):
                # a row of an earlier version lacks the config columns added since: from the checkpoint's
                # config as planned (else it would be another objective than the same run's new rows)
                for k, v in config_columns(e.config or {}).items():
                    r.setdefault(k, v)
                write = r.get(STAT_KEY) != stat  # (the same bytes, hashed: their fingerprint now, for the next run)
                if _row_tags(r) != _entry_tags(e):  # tags edited in the YAML list since: the row takes them
                    # (they group the runs into objectives; nothing measured depends on them)
                    r = _as_entry(r, e)
                    write = True
                    retagged.append(e.run)
                if write:
                    try:
                        write_json(rp, r, force=True)
                    except (OSError, EmbedscopeError):
                        pass  # (read-only rows: this run's tables still take the tags now; hashed again next time)
                done[e.id] = r
    if not force:
        _adopt_renamed_rows(out_dir, entries, done, same_data, say)
    if retagged:
        n = len(retagged)
        say(f"study: the tags of {n} finished row{'' if n == 1 else 's'} changed in the source since "
            f"{'it was' if n == 1 else 'they were'} measured (e.g. run {retagged[0]}): "
            f"{'its row takes' if n == 1 else 'their rows take'} the tags now (nothing is measured again)")
    same_data.report()
    # an untrained network whose row is to be measured, with its recorded fingerprint but other bytes than it
    # was built with (bit rot): built again (hashed here, as measuring it would; never one whose row is reused)
    damaged = damaged_untrained(entries, {e.id for e in entries if e.id not in done}, known)
    if damaged:
        n = len(damaged)
        say(f"study: {n} untrained network{'' if n == 1 else 's'} (e.g. {damaged[0]}) no longer "
            f"{'holds' if n == 1 else 'hold'} the bytes {'it was' if n == 1 else 'they were'} built with (sha256 "
            "differs, its fingerprint unchanged: damaged on disk?): built again")
        entries = plan_study(source, out_dir, epoch=epoch, untrained_dir=udir, known=known, verify=set(damaged))
        keep_known()
    todo = [_task(e) for e in entries if e.id not in done]
    say(f"study: {len(entries)} checkpoints, {len(done)} finished earlier, {len(todo)} to measure")
    if todo and not cache_ok:
        say(f"note: the embedding cache {cache} cannot be written: embeddings found there are read, the others are "
            "measured but not kept (--cache-dir DIR or EMBEDSCOPE_CACHE names a writable folder)")
    # the paths a task reads are absolute: a scheduler's workers run in another folder (the same
    # files as a serial study: relative paths are taken from this process's working folder)
    task_settings = {"dataset": dataset, "root": _absolute(root), "cache_dir": os.path.abspath(cache),
                     "device": device, "metric": metric, "seed": seed,
                     "measures": list(measures) if measures else None, "generation": generation,
                     "remote": bool(scheduler)}
    if scheduler:  # a worker elsewhere may run another embedscope (measure_entry refuses the task there)
        from embedscope import __version__

        task_settings.update(code=code_fingerprint(), version=__version__)
    computed: list[dict[str, Any]] = []
    said: set[str] = set()  # the warnings of the tasks said so far (a data set's, caught by each worker: once)
    unkept: list[str] = []  # why embeddings measured in this run could not be cached (one note at the end)

    def keep(row: dict[str, Any]) -> None:
        from embedscope.tables import write_json

        if row.get("status") != "ok":
            _stop_if_signalled(row)  # a row that failed because the study is stopping is no result
        why = row.pop(CACHE_ERROR_KEY, None)
        if why:
            unkept.append(str(why))
        # what loading its checkpoint warned of (float16 weights upcast, a head left out), caught in the worker:
        # said here, once, before the row's line (a worker thread's or process's print would break the bar)
        _say_warnings(row.pop(WARNINGS_KEY, None), said)
        write_json(_row_path(out_dir, row["id"]), row, force=True)
        done[row["id"]] = row
        computed.append(row)
        status = "ok" if row["status"] == "ok" else f"ERROR {row['error']}"
        say(f"[{len(done)}/{len(entries)}] {row['id']}: {status}")  # names from files: raw, escaped by say
        bar.update(1)
        if on_row is not None:
            on_row(row)

    warm = _prepare_outputs(figures) if todo else None  # imports of the statistics and figures, beside the rows
    if todo:
        from embedscope.progress import progress_bar

        client = None if box.serial else box.client()
        if scheduler:
            _say_if_no_workers(client, scheduler, notice)  # (before the bar: a line of its own)
        # on a terminal a bar over the checkpoints to measure (the lines above are the lines per row elsewhere)
        bar = progress_bar(total=len(todo), desc="study", unit="checkpoint", enabled=progress, lines=False)
        try:
            if box.serial:
                for e in todo:
                    keep(measure_entry(e, task_settings))
            else:
                _run_dask(todo, task_settings, client, keep, threads=box.threads)
        finally:
            bar.close()
    if box.threads:
        box.close()  # worker threads have nothing left to do (and the figures' fork then copies no idle threads)
    if unkept and cache_ok:  # (a cache found unwritable at the start was said then) e.g. a disk that filled
        n = len(unkept)
        say(f"note: {n} embedding{'' if n == 1 else 's'} measured in this run could not be written to the cache "
            f"{cache} (the first: {unkept[0]}): {'its row is' if n == 1 else 'their rows are'} measured all the "
            "same, the embeddings are not kept")
    rows = [done[e.id] for e in entries if e.id in done]
    ended = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    meta["ended"] = ended
    write_text(meta_path, json.dumps(meta, indent=2, default=str) + "\n", force=True)
    errors = [r for r in rows if r.get("status") != "ok"]
    same_stats = (not force and not computed and not retagged and old_meta.get("target") == target
                  and old_meta.get("n_boot") == n_boot
                  and old_meta.get("exclude") == list(exclude or []) and old_meta.get("figures", True) == figures
                  and (old_meta.get("versions") or {}).get("embedscope") == meta["versions"]["embedscope"]
                  and old_meta.get("stats_code") == meta["stats_code"])
    if same_stats:
        cached = _finished_outputs(out_dir, rows)
        if cached is not None:  # nothing new since the last run: its statistics stand
            say("study: every row finished earlier and the statistics are up to date")
            return {"rows": rows, "stats": cached, "errors": errors, "computed": [], "paths": {
                "runs_csv": out_dir / "runs.csv", "runs_parquet": out_dir / "runs.parquet",
                "correlations_csv": out_dir / "correlations.csv", "correlations_json": out_dir / "correlations.json"}}
    say(f"study: statistics ({n_boot} bootstrap resamples), tables{' and figures' if figures else ''} "
        f"of {len(rows)} rows")  # a phase of seconds (the figures), silent before
    if warm is not None:
        warm.join()
    res = finish_study(out_dir, rows, target=target, exclude=exclude, n_boot=n_boot, seed=seed, figures=figures,
                       client=box.started_local_client())
    return {"rows": rows, "stats": res["stats"], "errors": errors, "computed": computed, "paths": res["paths"]}


# what a study's correlations.json must hold to be reused (the command line prints from these)
_STATS_KEYS = {"target": str, "correlations": list, "ranking": list, "n_points": dict, "untrained": dict}


def _finished_outputs(out_dir: Path, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The statistics of an earlier run when its runs.csv holds exactly these rows (else None: also
    when runs.csv or correlations.json cannot be read or are not a study's, or a figure they drew is
    missing, so that they are computed again from the rows)."""
    import csv

    paths = [out_dir / f for f in ("runs.csv", "runs.parquet", "correlations.csv", "correlations.json")]
    if not all(p.is_file() for p in paths):
        return None
    try:
        with open(out_dir / "runs.csv", newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if "id" not in (reader.fieldnames or []):
                return None
            ids = [r["id"] for r in reader]
        if sorted(ids) != sorted(r["id"] for r in rows):
            return None
        stats = read_json(out_dir / "correlations.json")
    except (OSError, ValueError, csv.Error, EmbedscopeError):
        return None
    if not isinstance(stats, dict) or any(not isinstance(stats.get(k), t) for k, t in _STATS_KEYS.items()):
        return None
    if not all(isinstance(r, dict) and "measure" in r and "level" in r for r in stats["correlations"]):
        return None
    if not all(isinstance(r, dict) and "measure" in r for r in stats["ranking"]):
        return None
    if not all(k in stats["n_points"] for k in ("runs", "objectives")):
        return None
    if stats.get("rows_sha256") != _rows_hash(rows):  # (statistics of other rows than runs.csv's: an interrupted run)
        return None
    if not isinstance(stats["untrained"].get("selected_no_better"), list):
        return None
    # the figures these statistics drew: one deleted (or replaced by other than a PNG / PDF) since is drawn again
    drawn = stats.get("figures")
    if isinstance(drawn, list) and not all(isinstance(f, str) and _is_figure(out_dir / "figures" / f"{f}.{ext}")
                                           for f in drawn for ext in ("png", "pdf")):
        return None
    return stats


_MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF"}


def _is_figure(path: Path) -> bool:
    """Whether ``path`` is a file that starts as a PNG or PDF file of its suffix does."""
    try:
        with open(path, "rb") as f:
            return f.read(8).startswith(_MAGIC[path.suffix[1:]])
    except OSError:
        return False


def _integer_column(values: list) -> bool:
    """Whether the given values (None and NaN aside; at least one) are all integers (not bools)."""
    import numbers

    given = [v for v in values if v is not None and not (isinstance(v, float) and v != v)]
    return bool(given) and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in given)


class _ClusterBox:
    """The Dask client of a study: started at most once, in a background thread (so that the cluster
    comes up while the study plans), closed by :func:`run_study`.

    ``processes``: a local cluster of worker processes instead of worker threads in this process."""

    def __init__(self, workers: int | None, scheduler: str | None, processes: bool = False) -> None:
        self.scheduler = scheduler
        # one worker per core this process may run on (its CPU affinity: a container or taskset
        # limits it below os.cpu_count())
        self.n = available_cpus() if workers is None else int(workers)
        self.serial = self.n == 0 and not scheduler
        self.threads = not self.serial and not scheduler and not processes  # workers are threads of this process
        self.processes = processes
        self._pool = None
        self._fut = None

    def start(self) -> None:
        if self.serial or self._fut is not None:
            return
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(1, thread_name_prefix="embedscope-dask")
        self._fut = self._pool.submit(_connect, self.n, self.scheduler, self.processes)

    def client(self):
        self.start()
        return self._fut.result()[1]

    def started_local_client(self):
        """The client of a local cluster of worker *processes* started by this study (figures are drawn
        there), else None (worker threads share this process's matplotlib, which is not thread-safe)."""
        if self._fut is None or self.scheduler or self.threads:
            return None
        try:
            return self._fut.result()[1]
        except Exception:  # noqa: BLE001 - no cluster: the figures are drawn here
            return None

    def close(self) -> None:
        if self._fut is None:
            return
        fut, self._fut = self._fut, None
        try:
            cluster, client, loud = fut.result()
        except Exception:  # noqa: BLE001 - it never came up: nothing to close
            return
        finally:
            self._pool.shutdown(wait=False)
        import asyncio

        stop = None  # an interrupt (Ctrl-C, SIGTERM) met while closing: raised once the cluster is closed too

        def attempt(close) -> None:
            nonlocal stop
            try:
                close()
            except (Exception, asyncio.CancelledError):  # noqa: BLE001 - (Ctrl-C: a task's interrupt cancelled it)
                pass
            except BaseException as e:  # noqa: BLE001 - the cluster is still closed below, then this raised
                stop = stop or e

        def close_client() -> None:
            try:
                client.close()
            except BaseException:
                _mark_client_closed(client)
                raise

        def close_cluster() -> None:
            if self.processes:
                _stop_workers(cluster)
            cluster.close(timeout=10)

        try:
            attempt(close_client)
            if cluster is not None:
                attempt(close_cluster)
        finally:
            loud()
        if stop is not None:
            raise stop


def _mark_client_closed(client) -> None:
    """After a failed ``client.close()``: mark the client closed and stop its event-loop runner, so that
    its ``__del__`` at exit does not close it again. Left "closing", it closed itself again on a stopped
    event loop at exit: 60 s, then "timed out" (seen in 2 of 15 Ctrl-C's of a study on worker threads).

    Both are private to distributed (``Client.status``, ``Client._loop_runner``): each is used only
    where the client has it, and on its own (a version without one still gets the other), never
    raising; a version without either is left as it is (at worst the wait at exit again)."""
    if hasattr(client, "status"):
        with contextlib.suppress(Exception):
            client.status = "closed"
    stop = getattr(getattr(client, "_loop_runner", None), "stop", None)
    if callable(stop):
        with contextlib.suppress(Exception):
            stop()


def _stop_workers(cluster, timeout: float = 0.5) -> None:
    """Close a local cluster's worker processes with a short grace period. Every result is in by now;
    a worker that imported torch otherwise takes the nanny's full 4 s timeout to go (measured)."""
    import asyncio

    async def stop():
        await asyncio.gather(*(w.close(timeout=timeout) for w in list(cluster.workers.values())
                               if hasattr(w, "close")), return_exceptions=True)

    try:
        cluster.sync(stop)
    except Exception:  # noqa: BLE001 - cluster.close() below closes them the usual way
        pass


def _quiet_dask_logs(level: int) -> Callable[[], None]:
    """Dask's own log lines (its ``distributed`` logger's stream handlers, on stderr) at ``level`` (a
    local cluster: ERROR, as LocalCluster's ``silence_logs``; a user's scheduler: WARNING, its warnings
    kept) from now until the returned function is called; it puts back the levels found.

    A local cluster silences them only while it is open: its ``close()`` puts them back before its event
    loop stops, and a worker's stream still sending then logged "Batched Comm Closed" with a
    ``CommClosedError`` traceback at INFO (seen once in several studies run from Python, in no run of the
    CLI). A study keeps them quiet from the start of its cluster (or client) to the end of its close."""
    import logging

    changed = []
    for h in logging.getLogger("distributed").handlers:
        if isinstance(h, logging.StreamHandler) and h.level < level:
            changed.append((h, h.level))
            h.setLevel(level)

    def loud() -> None:
        for h, before in changed:
            if h.level == level:  # (unless changed since by someone else)
                h.setLevel(before)

    return loud


def _connect(n_workers: int, scheduler: str | None, processes: bool = False):
    """(cluster or None, client, loud): a local cluster of single-threaded workers (threads of this process,
    or ``processes``), or ``scheduler``; worker processes import what a study task needs before the
    first task arrives. ``loud()`` puts back Dask's log levels after the cluster is closed
    (:func:`_quiet_dask_logs`)."""
    import logging

    import distributed  # noqa: F401 - Dask's log handlers set up, to be quieted

    loud = _quiet_dask_logs(logging.WARNING if scheduler else logging.ERROR)
    try:
        cluster, client = _connect_quietly(n_workers, scheduler, processes)
    except BaseException:
        loud()
        raise
    return cluster, client, loud


def _connect_quietly(n_workers: int, scheduler: str | None, processes: bool):
    """:func:`_connect`'s (cluster or None, client)."""
    import logging
    import warnings

    from dask.distributed import Client, LocalCluster

    cluster = None
    if scheduler:
        try:
            client = Client(scheduler)
        except (OSError, TimeoutError, ValueError) as e:  # unreachable, timed out, or not an address

            why = str(e).splitlines()[0] if str(e) else e.__class__.__name__
            raise EmbedscopeError(f"cannot connect to the Dask scheduler {scheduler} ({why})") from None
    else:
        import dask

        # Dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in its workers: glibc then hands every freed
        # activation buffer back to the system and maps it again, which made a digits row ~2x slower
        # in a worker than in this process (measured). The workers keep the C library's default.
        # (and no statistical profiler sampling the task thread every 10 ms: the dashboard is off anyway;
        # in a threads cluster it would also take the GIL from the other workers)
        with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                              "distributed.worker.profile.enabled": False}), warnings.catch_warnings():
            # the scheduler's HTTP server (no dashboard) takes another port when 8787 is taken: no news
            warnings.filterwarnings("ignore", message="Port .* is already in use")
            cluster = LocalCluster(n_workers=max(n_workers, 1), threads_per_worker=1, processes=processes,
                                   dashboard_address=None, silence_logs=logging.ERROR,
                                   **({"preload": [__name__]} if processes else {}))  # dask_setup below
        client = Client(cluster)
    if scheduler or processes:
        try:  # not waited for: a study stopped now (Ctrl-C) closes its cluster at once, not after the imports
            client.run(_warm_worker_soon, wait=False)
        except Exception:  # noqa: BLE001 - warming is an optimisation; the tasks import what they need
            pass
    return cluster, client


def dask_setup(worker) -> None:
    """The preload of a study's local worker *processes*: they ignore SIGINT. Ctrl-C on a terminal
    reaches the whole process group; the study's process stops and closes its cluster, instead of
    each worker process printing a KeyboardInterrupt traceback and dying under its tasks."""
    import signal

    if threading.current_thread() is threading.main_thread():
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signal.SIGINT, signal.SIG_IGN)


async def _warm_worker_soon() -> None:
    """:func:`_warm_worker` on a worker's event loop, which it holds until done: the study's first
    tasks there run after it, as after a waited ``client.run(_warm_worker)``."""
    _warm_worker()


def _warm_worker() -> None:
    """Import (once per worker process) what measuring a row and drawing a figure need; one torch thread."""
    import torch

    torch.set_num_threads(1)
    import embedscope.analyses.registry  # noqa: F401
    import embedscope.analyses.retrieval  # noqa: F401
    import embedscope.analyses.structure  # noqa: F401
    import embedscope.data  # noqa: F401
    import embedscope.embed  # noqa: F401
    import embedscope.metrics.retrieval  # noqa: F401
    import embedscope.models  # noqa: F401
    import embedscope.store  # noqa: F401

    try:
        import faiss  # noqa: F401
        import sklearn.datasets  # noqa: F401 - the digits
        import sklearn.metrics  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError:  # pragma: no cover
        pass
    from embedscope.viz.figures import use_agg

    use_agg()
    import matplotlib.pyplot  # noqa: F401

    import embedscope.viz.study  # noqa: F401


@contextlib.contextmanager
def _process_state_for_threads(on: bool):
    """What worker processes get from Dask's nanny (OMP/MKL/OPENBLAS_NUM_THREADS=1), for worker threads.

    BLAS thread counts are process-wide (threadpoolctl): inside, every BLAS runs one thread, so that
    the metrics' own single-thread BLAS sections, entered and left by two worker threads at once,
    restore one thread and never leak another count; this thread's torch thread count is restored
    after (each worker thread sets its own: torch keeps OpenMP's count per thread)."""
    if not on:
        yield
        return
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    with threadpool_limits(limits=1, user_api="blas"):
        try:
            yield
        finally:
            torch.set_num_threads(before)  # also torch's process-wide default for threads started later


def _run_dask(todo, task_settings, client, keep, threads: bool = False) -> None:
    from dask.distributed import as_completed

    st = {**task_settings, "threads": 1, "faiss_threads": 1 if threads else None}
    with _process_state_for_threads(threads):
        futs = [client.submit(measure_entry, e, st, pure=False, key=f"embedscope-study-{e['id']}-{time.time_ns()}")
                for e in todo]
        for fut in as_completed(futs):
            try:
                row = fut.result()
            except Exception as e:  # noqa: BLE001 - a worker died: report the row, go on
                eid = fut.key.split("embedscope-study-", 1)[1].rsplit("-", 1)[0]
                ent = next(x for x in todo if x["id"] == eid)
                row = {**_entry_columns(ent), "status": "error",
                       "error": f"worker failed: {e.__class__.__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
            keep(row)


def _prepare_outputs(figures: bool) -> threading.Thread:
    """Import what the statistics, the tables and the figures need, and load the fonts, in a background
    thread while the rows are measured (in a fresh process: ~1-2 s of imports off the end of a study).

    Safe beside the rows: the rows draw nothing, and the warm-up figure uses matplotlib's object API
    (no pyplot state, the backend left alone); the thread is joined before anything is drawn."""

    def work() -> None:
        try:
            import pyarrow.parquet  # noqa: F401 - runs.parquet
            import scipy.stats  # noqa: F401

            import embedscope.study.stats  # noqa: F401
            import embedscope.tables  # noqa: F401

            if figures:
                import io

                from matplotlib.backends.backend_agg import FigureCanvasAgg
                from matplotlib.figure import Figure

                import embedscope.viz.figures  # noqa: F401
                import embedscope.viz.study  # noqa: F401

                fig = Figure(figsize=(1, 1))
                FigureCanvasAgg(fig)
                fig.text(0.5, 0.5, "ρ τ 0.5 [−1]")
                for fmt in ("png", "pdf"):  # the backends' lazy imports and the font look-ups
                    fig.savefig(io.BytesIO(), format=fmt)
        except Exception:  # noqa: BLE001 - an optimisation only: whatever failed is imported when needed
            pass

    t = threading.Thread(target=work, name="embedscope-study-prepare", daemon=True)
    t.start()
    return t


def _can_fork() -> bool:
    """A child process can be forked cheaply and safely here (Linux and the BSDs; not macOS, whose
    system frameworks are not fork-safe, nor Windows)."""
    import multiprocessing as mp

    return os.name == "posix" and not sys.platform.startswith("darwin") and "fork" in mp.get_all_start_methods()


def _draw_in_child(name: str, stats: dict[str, Any], fig_dir: str) -> None:
    from embedscope.viz.study import draw_figure

    draw_figure(name, stats, fig_dir)


def _start_figures(stats: dict[str, Any], fig_dir: Path, *, client=None):
    """Start drawing a study's figures (PNG + PDF); returns ``finish()`` -> {name: PNG path}.

    With the ``client`` of a local cluster of worker processes, the workers draw all but the last
    (:func:`embedscope.viz.study.start_figures`). Otherwise a forked child of this process draws the
    largest (the Fig.-5 panels) while this process writes the tables and draws the others: matplotlib
    is not thread-safe, but two processes draw side by side, and a forked child imports nothing. The
    same drawing code runs either way, so the files are the same; where fork is not available (or
    the child fails), this process draws every figure itself.
    """
    from embedscope.viz.study import draw_figure, figure_names, start_figures

    names = figure_names(stats)
    if client is not None or len(names) < 2 or not _can_fork():
        return start_figures(stats, fig_dir, client=client)
    import multiprocessing as mp
    import warnings

    fig_dir.mkdir(parents=True, exist_ok=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # Python >= 3.12 warns of fork with threads
            child = mp.get_context("fork").Process(target=_draw_in_child, args=(names[0], stats, str(fig_dir)),
                                                   name="embedscope-figure", daemon=True)
            child.start()
    except Exception:  # noqa: BLE001 - no child: every figure is drawn here
        return start_figures(stats, fig_dir)

    def finish() -> dict[str, Path]:
        out = {name: draw_figure(name, stats, fig_dir) for name in names[1:]}
        child.join()
        if child.exitcode == 0 and (fig_dir / f"{names[0]}.png").exists() and (fig_dir / f"{names[0]}.pdf").exists():
            out[names[0]] = fig_dir / f"{names[0]}.png"
        else:  # the child failed (or was killed): draw it here
            out[names[0]] = draw_figure(names[0], stats, fig_dir)
        return {name: out[name] for name in names}

    return finish


#: the figures a study draws (:data:`embedscope.names.STUDY_FIGURES`, the names of
#: :data:`embedscope.viz.study.FIGURES`), read without importing matplotlib
STUDY_FIGURES = names.STUDY_FIGURES


def stale_figures(fig_dir: Path, drawn) -> list[str]:
    """The study figures in ``fig_dir`` (PNG or PDF) that these statistics did not draw (``drawn``): an
    earlier run's (``--no-figures``, or fewer objectives now). They are kept (an output already written
    is not deleted); the command line and the report name them as not of these statistics."""
    return [f"{name}.{ext}" for name in STUDY_FIGURES if name not in drawn for ext in ("png", "pdf")
            if (fig_dir / f"{name}.{ext}").is_file()]


def finish_study(out_dir: str | os.PathLike, rows: list[dict[str, Any]], *, target: str = "R@1", exclude=(),
                 n_boot: int = 1000, seed: int = 1234, figures: bool = True, client=None) -> dict[str, Any]:
    """Write runs.csv/.parquet, correlations.csv/.json and the figures of a study's rows.

    ``client``: the Dask client of a local cluster; its workers draw figures side by side with this process.
    """
    import numpy as np
    import pandas as pd

    from embedscope.fileio import escape_undecodable
    from embedscope.study.measures import measure_splits
    from embedscope.study.stats import study_statistics
    from embedscope.tables import write_csv, write_json, write_parquet

    out_dir = Path(out_dir)
    splits = measure_splits([c for r in rows for c in r])  # + the per-file measures the rows carry (NR-Prec:<property>)
    front = ["id", "run", "selection", "epoch", "status", "error", "beats_untrained", "untrained_target"]
    # a checkpoint path with an undecodable byte (a lone surrogate) cannot enter an Arrow string column
    df = pd.DataFrame([{k: escape_undecodable(v) if isinstance(v, str) else v for k, v in r.items()
                        if k not in (STAT_KEY, DATA_KEY)} for r in rows])
    # the data sets the rows were *measured* on (the dataset column is the one each was trained on: with
    # --dataset every run is measured on one, and their targets compare)
    measured = {r.get("id"): _measured_on(r) for r in rows}
    stats = study_statistics(df, target=target, exclude=exclude, n_boot=n_boot, seed=seed, splits=splits,
                             measured=measured)
    df = stats.pop("_runs")
    draw = None
    if figures and stats["n_points"]["objectives"] >= 2:
        from embedscope.viz.study import figure_names

        stats["figures"] = figure_names(stats)
        draw = _start_figures(stats, out_dir / "figures", client=client)  # drawn while the tables are written
    else:  # the report embeds only the figures of these statistics (figures/ may hold an earlier run's)
        stats["figures"] = []
    cols = [c for c in front if c in df.columns] + [c for c in df.columns if c not in front]
    recs = df[cols].to_dict("records")
    # columns whose values the rows hold as integers (embed_dim, epoch, seed, N_test, ...): pandas made
    # them floats where a failed row left a gap (128.0); written as integers, the gap empty
    ints = [c for c in cols if _integer_column([r.get(c) for r in rows])]
    for r in recs:
        for c in ints:
            v = r.get(c)
            if isinstance(v, float):
                r[c] = None if v != v else int(v)
    write_csv(out_dir / "runs.csv", recs, cols, force=True)
    pq = df[cols].copy()
    for c in ints:
        pq[c] = pd.array([r[c] for r in recs], dtype="Int64")
    for c in pq.columns:  # parquet needs one type per column
        if pq[c].dtype == object or pd.api.types.is_string_dtype(pq[c].dtype):
            vals = [v for v in pq[c] if not (v is None or (isinstance(v, float) and v != v))]
            if vals and all(isinstance(v, (bool, np.bool_)) for v in vals):  # (beats_untrained: None in the
                # untrained reference rows) a nullable boolean, not the texts 'True' / 'False'
                pq[c] = pd.array([None if v is None or (isinstance(v, float) and v != v) else bool(v) for v in pq[c]],
                                 dtype="boolean")
            else:  # an empty text (no error, no untrained reference) null, as a missing one and as
                # read_csv reads runs.csv's empty cell ('' in error, undefined, untrained beside null elsewhere)
                pq[c] = pq[c].map(lambda v: None if v is None or (isinstance(v, float) and v != v) or v == ""
                                  else str(v))
    write_parquet(out_dir / "runs.parquet", pq, force=True)
    # every key of any row, in the order they first come (a key only a later row had was dropped)
    write_csv(out_dir / "correlations.csv", stats["correlations"],
              list(dict.fromkeys(k for r in stats["correlations"] for k in r)) or ["measure"], force=True)
    paths = {"runs_csv": out_dir / "runs.csv", "runs_parquet": out_dir / "runs.parquet",
             "correlations_csv": out_dir / "correlations.csv", "correlations_json": out_dir / "correlations.json"}
    if draw is not None:
        paths.update(draw())
    # last, naming the rows it was computed from: a study stopped before this line (disk full, Ctrl-C, killed)
    # after runs.csv held new rows left an earlier run's correlations.json, which a rerun took as up to date
    stats["rows_sha256"] = _rows_hash(rows)
    write_json(out_dir / "correlations.json", stats, force=True)
    return {"stats": stats, "paths": paths}


def _measured_on(row: dict[str, Any]) -> str | None:
    """The data set a row was measured on (its :data:`DATA_KEY`), None when it does not say (a failed
    row, a row of an earlier version)."""
    d = row.get(DATA_KEY)
    return d[0] if isinstance(d, list) and d and isinstance(d[0], str) and d[0] else None


def _rows_hash(rows) -> str:
    """sha256 of a study's rows, their values too, in the form ``rows/<id>.json`` keeps them (sorted keys,
    by id): what ``correlations.json`` was computed from. (The ids alone missed a row measured again
    under its id, a failed row that now succeeds or a retrained checkpoint, in a run stopped between
    runs.csv and correlations.json: the next run took the old statistics as up to date.)"""
    from embedscope.tables import _jsonable

    text = "\n".join(json.dumps(_jsonable(r), sort_keys=True, allow_nan=False)
                      for r in sorted(rows, key=lambda r: str(r["id"])))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
