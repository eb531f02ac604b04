"""The training loop of ``embedscope train`` (Roth et al.'s protocol, METHODS.md §5).

Files of a run with output ``-o runs/x.pt`` (documented in ``docs/training.md``):

* ``runs/x.pt`` -- the final checkpoint (the model after the last epoch), foundation format;
* ``runs/x.pt.train/last.pt`` -- the checkpoint of the latest finished epoch, written atomically
  after every epoch; ``--resume`` continues from it;
* ``runs/x.pt.train/best.pt`` -- the checkpoint at the epoch of best test R@1 (Roth report the best
  test epoch per metric);
* ``runs/x.pt.train/epoch-NNN.pt`` -- every epoch, only with ``keep_epochs``;
* ``runs/x.csv`` -- the CSV log (epoch, loss, R@1, rho, seconds); epoch 0 = the untrained model.

Every checkpoint holds the full resolved configuration (``config``) and in ``extra``: ``epoch``,
``finished``, ``history`` (the log rows), ``metrics`` (latest and best), the optimiser state, the
loss's parameters, the sampler's and miner's random states (and memory bank) and the torch RNG
state, so that a resumed run equals an uninterrupted one on the CPU with the same seed.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from embedscope.errors import EmbedscopeError, UsageError

# Options of a run; None = chosen from the data set / loss (resolve_config).
OPTION_DEFAULTS: dict[str, Any] = {
    "dataset": "digits",
    "root": None,
    "train_classes": None,
    "arch": None,
    "weights": None,
    "embed_dim": 128,
    "loss": "margin",
    "loss_params": {},
    "miner": None,
    "p_switch": 0.0,
    "sampler": None,
    "batch_size": None,
    "epochs": None,
    "lr": None,
    "weight_decay": 4e-4,
    "optimizer": "adam",
    "lr_schedule": "none",
    "seed": 0,
    "eval_every": 1,
    "device": "auto",
    "num_workers": 0,
    "frozen_bn": None,
    "image_size": None,
    "bigb": 1024,
}
OPTIMIZERS = ("adam", "adamw")
SCHEDULES = ("none", "cosine", "step")
# options a resumed run may change; everything else comes from the checkpoint
RESUME_OVERRIDABLE = ("epochs", "eval_every", "device", "num_workers")
LOG_COLUMNS = ["epoch", "loss", "R@1", "rho", "seconds"]


def dataset_defaults(dataset: str) -> dict[str, Any]:
    """Per-data-set defaults: the papers' protocol for photos (Roth §4.1), a quick one for digits."""
    key = dataset.lower()
    if key == "digits":
        # 5 training classes: spc-8 with 40 images = every class, 8 images each
        return {"arch": "digits_cnn", "batch_size": 40, "sampler": "spc-8", "lr": 1e-3, "epochs": 15}
    epochs = 100 if key in ("sop", "online_products") else 150
    return {"arch": "resnet50", "batch_size": 112, "sampler": "spc-2", "lr": 1e-5, "epochs": epochs}


def resolve_config(options: dict[str, Any]) -> dict[str, Any]:
    """The full configuration of a run from user options (unknown keys are refused).

    Fills data-set defaults (:func:`dataset_defaults`), the loss's family, normalisation and
    default miner (:mod:`embedscope.train.losses`), and the model config of the foundation
    (:func:`embedscope.models.default_config`). The result is what every checkpoint stores.
    """
    from embedscope.models import ARCHS, default_config
    from embedscope.train.losses import loss_spec
    from embedscope.train.miners import MINER_NAMES
    from embedscope.train.samplers import SAMPLER_NAMES

    unknown = set(options) - set(OPTION_DEFAULTS)
    if unknown:
        raise UsageError(f"unknown training option(s): {', '.join(sorted(unknown))}")
    opt = dict(OPTION_DEFAULTS)
    opt.update({k: v for k, v in options.items() if v is not None})
    opt["dataset"] = str(opt["dataset"]).lower()
    for k, v in dataset_defaults(opt["dataset"]).items():
        if opt.get(k) is None:
            opt[k] = v
    spec = loss_spec(opt["loss"])
    if opt["arch"] not in ARCHS:
        raise UsageError(f"unknown --arch '{opt['arch']}' (choose {', '.join(ARCHS)})")
    if opt["sampler"] not in SAMPLER_NAMES:
        raise UsageError(f"unknown --sampler '{opt['sampler']}' (choose {', '.join(SAMPLER_NAMES)})")
    if opt["miner"] is not None and opt["miner"] not in MINER_NAMES:
        raise UsageError(f"unknown --miner '{opt['miner']}' (choose {', '.join(MINER_NAMES)})")
    if opt["optimizer"] not in OPTIMIZERS:
        raise UsageError(f"unknown optimizer '{opt['optimizer']}' (choose {', '.join(OPTIMIZERS)})")
    if opt["lr_schedule"] not in SCHEDULES:
        raise UsageError(f"unknown --lr-schedule '{opt['lr_schedule']}' (choose {', '.join(SCHEDULES)})")
    p = float(opt["p_switch"])
    if not 0.0 <= p <= 1.0:
        raise UsageError(f"--p-switch must lie in [0, 1], got {p}")
    opt["p_switch"] = p
    for k in ("batch_size", "epochs", "embed_dim", "bigb"):
        opt[k] = int(opt[k])
        if opt[k] <= 0:
            raise UsageError(f"--{k.replace('_', '-')} must be positive, got {opt[k]}")
    opt["eval_every"] = int(opt["eval_every"])
    opt["num_workers"] = int(opt["num_workers"])
    opt["seed"] = int(opt["seed"])
    opt["lr"] = float(opt["lr"])
    opt["weight_decay"] = float(opt["weight_decay"])
    if opt["lr"] <= 0:
        raise UsageError(f"--lr must be positive, got {opt['lr']}")
    if not spec.tuple_loss and (opt["miner"] is not None or p > 0):
        raise UsageError(f"the {opt['loss']} loss takes no mined tuples: --miner and --p-switch apply to "
                         "margin, triplet, contrastive, multisimilarity, lifted and snr")
    if opt["miner"] is None:  # the loss's default; the reference code's ρ-regularisation is on distance mining
        opt["miner"] = spec.default_miner or ("distance" if p > 0 else None)
    opt["loss_params"] = dict(opt["loss_params"] or {})
    opt["loss_family"] = spec.family
    model_over = {"embed_dim": opt["embed_dim"], "normalize": spec.normalize, "dataset": opt["dataset"]}
    if opt["frozen_bn"] is not None:
        model_over["frozen_bn"] = bool(opt["frozen_bn"])
    if opt["image_size"] is not None:
        model_over["image_size"] = int(opt["image_size"])
    model_cfg = default_config(opt["arch"], **model_over)
    cfg = {**opt, **model_cfg}
    cfg["arch"] = opt["arch"]
    cfg["normalize"] = spec.normalize
    return cfg


def lr_factor(schedule: str, epoch: int, epochs: int) -> float:
    """Learning-rate multiplier for 0-based ``epoch``: none = 1; cosine = ½(1 + cos(π e/E));
    step = 0.1 from 50% and 0.01 from 75% of the epochs."""
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * epoch / max(epochs, 1)))
    if schedule == "step":
        return 0.1 ** ((epoch >= epochs * 0.5) + (epoch >= epochs * 0.75))
    return 1.0


def run_paths(out: str | os.PathLike, log: str | os.PathLike | None = None) -> dict[str, Path]:
    """The files of a run with final checkpoint ``out`` (see the module docstring)."""
    out = Path(out)
    d = out.with_name(out.name + ".train")
    return {"out": out, "dir": d, "last": d / "last.pt", "best": d / "best.pt",
            "log": Path(log) if log else out.with_suffix(".csv")}


def _write_log(path: Path, history: list[dict[str, Any]]) -> None:
    from embedscope.tables import write_csv

    rows = [{c: ("" if r.get(c) is None else r.get(c)) for c in LOG_COLUMNS} for r in history]
    write_csv(path, rows, LOG_COLUMNS, force=True)


def _evaluate(model, train_ds, test_ds, device, batch_size: int) -> dict[str, float]:
    """Test R@1 (METHODS.md §1) and ρ of the training embeddings (METHODS.md §2, exclude_top=1)."""
    import torch

    from embedscope.embed import embed_images
    from embedscope.metrics import retrieval_metrics, spectral_decay

    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # evaluation never shifts the training's random stream
        Xte = embed_images(model, test_ds, batch_size=batch_size, device=str(device), progress=False)
        Xtr = embed_images(model, train_ds, batch_size=batch_size, device=str(device), progress=False)
    r1 = float(retrieval_metrics(Xte, test_ds.labels, include=["R@1"])["R@1"])
    rho = float(spectral_decay(Xtr))
    return {"R@1": r1, "rho": rho}


def train(config: dict[str, Any], out: str | os.PathLike, *, resume: bool = False, force: bool = False,
          log: str | os.PathLike | None = None, progress: bool = True, keep_epochs: bool = False,
          callback: Callable[[int, dict[str, Any]], None] | None = None,
          echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train one model (METHODS.md §5) and write its checkpoints; returns a summary dict.

    Parameters
    ----------
    config : dict
        Options (keys of ``OPTION_DEFAULTS``), resolved with :func:`resolve_config`. Ignored on
        ``resume`` except ``epochs``, ``eval_every``, ``device``, ``num_workers``.
    out : path
        The final checkpoint. The run's working files go to ``<out>.train/`` (:func:`run_paths`).
    resume : bool
        Continue from ``<out>.train/last.pt``.
    force : bool
        Start again even when ``out`` or an unfinished run exists.
    log : path, optional
        CSV log (default ``out`` with suffix ``.csv``).
    keep_epochs : bool
        Also keep ``epoch-NNN.pt`` for every epoch.
    callback : callable(epoch, row), optional
        Called after each epoch's checkpoint is written (a test can stop a run here).

    Returns
    -------
    dict with ``history`` (log rows), ``best`` (row of best test R@1), ``config``, ``paths``.

    Notes
    -----
    The protocol (Roth §4.1): Adam (or AdamW) with weight decay, no LR schedule by default;
    SPC-2 batches; each sample of a batch is embedded in training mode, a tuple miner (if any)
    picks triplets on the detached embeddings, the PML loss is minimised. On CUDA: bfloat16
    autocast, channels_last; the loss runs in float32. On the CPU with a fixed seed the run is
    deterministic. ``R@1`` is measured on the test split, ``rho`` (ρ, METHODS.md §2) on the embedded
    training split, every ``eval_every`` epochs (0 = never; epoch 0 = before training).
    """
    import torch
    from tqdm.auto import tqdm

    from embedscope.data import TorchImages, get_dataset, image_transform
    from embedscope.device import resolve_device
    from embedscope.fileio import check_writable
    from embedscope.models import build_model, load_backbone_weights, read_checkpoint, save_checkpoint
    from embedscope.train.losses import build_loss
    from embedscope.train.miners import build_miner
    from embedscope.train.samplers import build_sampler

    say = echo or (lambda s: tqdm.write(s))
    paths = run_paths(out, log)
    state = None
    if resume:
        if not paths["last"].exists():
            raise EmbedscopeError(f"nothing to resume: {paths['last']} does not exist")
        state = read_checkpoint(paths["last"])
        cfg = dict(state["config"])
        for k in RESUME_OVERRIDABLE:
            if config.get(k) is not None:
                cfg[k] = config[k]
        cfg["epochs"] = int(cfg["epochs"])  # the final checkpoint is this run's own product: replaced at the end
    else:
        cfg = resolve_config(config)
        check_writable(paths["out"], force=force)
        if paths["last"].exists() and not force:
            raise EmbedscopeError(f"an unfinished run exists ({paths['last']}): use --resume to continue "
                                  "it or --force to start again")
        if paths["log"].exists() and not force:
            raise EmbedscopeError(f"{paths['log']} already exists (use --force to replace it)")
    start_epoch = int(state["extra"]["epoch"]) if state else 0
    if state and start_epoch >= cfg["epochs"]:
        if not paths["out"].exists() or force:
            save_checkpoint(paths["out"], _model_from(state, build_model), cfg, extra=state["extra"], force=True)
        say(f"{paths['out']}: already trained for {start_epoch} epochs (nothing to do)")
        return {"history": state["extra"].get("history", []), "best": state["extra"].get("metrics", {}).get("best"),
                "config": cfg, "paths": paths, "resumed_from": start_epoch}

    # ---- data
    dev = resolve_device(cfg["device"])
    torch.manual_seed(cfg["seed"])
    ds = get_dataset(cfg["dataset"], cfg["root"], train_classes=cfg["train_classes"])
    train_ds, test_ds = ds.subset("train"), ds.subset("test")
    if len(train_ds) == 0 or len(test_ds) == 0:
        raise EmbedscopeError(f"{cfg['dataset']}: the training or test split is empty")
    if (ds.kind == "digits") != (cfg["arch"] == "digits_cnn"):
        raise EmbedscopeError(f"--arch {cfg['arch']} does not fit the {cfg['dataset']} images "
                              f"({'use --arch digits_cnn' if ds.kind == 'digits' else 'photos need an image backbone'})")
    classes = np.unique(train_ds.labels)
    ytrain = np.searchsorted(classes, train_ds.labels)  # training labels 0 .. C-1
    cfg["num_train_classes"] = int(len(classes))
    ytrain_t = torch.as_tensor(ytrain, dtype=torch.long)

    # ---- model, loss, optimiser
    model = build_model(cfg)
    if state is not None:
        model.load_state_dict(state["state_dict"])
    elif cfg.get("weights"):
        load_backbone_weights(model, cfg["weights"])
    loss_fn = build_loss(cfg["loss"], len(classes), cfg["embed_dim"], **cfg["loss_params"])
    if state is not None:
        loss_fn.load_state_dict(state["extra"]["loss_state"])
    model.to(dev)
    loss_fn.to(dev)
    if dev.type == "cuda":
        model.to(memory_format=torch.channels_last)
    groups = [{"params": [p for p in model.parameters() if p.requires_grad], "lr": cfg["lr"],
               "weight_decay": cfg["weight_decay"], "name": "model"}]
    groups += loss_fn.param_groups(cfg["lr"])
    Opt = torch.optim.AdamW if cfg["optimizer"] == "adamw" else torch.optim.Adam
    opt = Opt(groups, lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    base_lrs = [g["lr"] for g in opt.param_groups]
    if state is not None:
        opt.load_state_dict(state["extra"]["optimizer"])

    miner = build_miner(cfg["miner"], p_switch=cfg["p_switch"], seed=cfg["seed"] + 1)
    sampler = build_sampler(cfg["sampler"], ytrain, cfg["batch_size"], seed=cfg["seed"] + 2, bigb=cfg["bigb"])
    transform = image_transform(ds.kind, train=True, image_size=int(cfg["image_size"]))
    loader = torch.utils.data.DataLoader(TorchImages(train_ds, transform), batch_sampler=sampler,
                                         num_workers=cfg["num_workers"], pin_memory=dev.type == "cuda",
                                         persistent_workers=False)
    eval_bs = 256 if ds.kind == "digits" else 128
    history: list[dict[str, Any]] = list(state["extra"].get("history", [])) if state else []
    if state is not None:
        ex = state["extra"]
        torch.set_rng_state(ex["torch_rng"])
        if dev.type == "cuda" and ex.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(ex["cuda_rng"], dev)
        sampler.set_state(ex["sampler_state"])
        if miner is not None and ex.get("miner_state"):
            miner.set_state(ex["miner_state"])
        # drop log rows past the checkpoint (a run killed after logging, before saving)
        history = [r for r in history if int(r["epoch"]) <= start_epoch]
        say(f"resuming {paths['out']} from epoch {start_epoch} of {cfg['epochs']}")
    else:
        paths["dir"].mkdir(parents=True, exist_ok=True)
        if cfg["eval_every"] > 0:
            m0 = _evaluate(model, train_ds, test_ds, dev, eval_bs)
            history.append({"epoch": 0, "loss": None, "R@1": m0["R@1"], "rho": m0["rho"], "seconds": 0.0})
            say(f"epoch 0/{cfg['epochs']}  (untrained)  R@1 {m0['R@1']:.4f}  rho {m0['rho']:.4f}")
    if sampler.needs_bank and state is None:
        with torch.random.fork_rng(devices=[dev.index or 0] if dev.type == "cuda" else []):
            from embedscope.embed import embed_images

            sampler.init_bank(embed_images(model, train_ds, batch_size=eval_bs, device=str(dev), progress=False))

    use_amp = dev.type == "cuda"
    amp_ctx = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if use_amp else contextlib.nullcontext
    switch_eligible = switch_done = 0
    for epoch in range(start_epoch + 1, cfg["epochs"] + 1):
        f = lr_factor(cfg["lr_schedule"], epoch - 1, cfg["epochs"])
        for g, b in zip(opt.param_groups, base_lrs):
            g["lr"] = b * f
        model.train()
        loss_fn.train()
        t0 = time.perf_counter()
        total, nb = 0.0, 0
        bar = tqdm(loader, desc=f"epoch {epoch}/{cfg['epochs']}", unit="batch", leave=False, disable=not progress)
        for x, _, idx in bar:
            x = x.to(dev, non_blocking=True)
            if dev.type == "cuda" and x.ndim == 4:
                x = x.contiguous(memory_format=torch.channels_last)
            yb = ytrain_t[idx].to(dev)
            with amp_ctx():
                z = model(x)
            z = z.float()
            tuples = miner(z, yb) if miner is not None else None
            loss = loss_fn(z, yb, tuples)
            if not torch.isfinite(loss):
                raise EmbedscopeError(f"the loss became {loss.item()} at epoch {epoch}, batch {nb + 1} "
                                      "(try a lower --lr)")
            opt.zero_grad(set_to_none=True)
            if loss.requires_grad:
                loss.backward()
                opt.step()
            if sampler.needs_bank:
                sampler.update(idx, z.detach())
            if hasattr(miner, "last_stats"):
                switch_eligible += miner.last_stats[0]
                switch_done += miner.last_stats[1]
            total += float(loss.detach())
            nb += 1
            if progress:
                bar.set_postfix(loss=f"{total / nb:.4f}")
        seconds = time.perf_counter() - t0
        row: dict[str, Any] = {"epoch": epoch, "loss": total / max(nb, 1), "R@1": None, "rho": None,
                               "seconds": seconds}
        if cfg["eval_every"] > 0 and (epoch % cfg["eval_every"] == 0 or epoch == cfg["epochs"]):
            row.update(_evaluate(model, train_ds, test_ds, dev, eval_bs))
        history.append(row)
        msg = f"epoch {epoch}/{cfg['epochs']}  loss {row['loss']:.4f}  {seconds:.1f}s"
        if row["R@1"] is not None:
            msg += f"  R@1 {row['R@1']:.4f}  rho {row['rho']:.4f}"
        say(msg)
        best = _best(history)
        extra = {
            "epoch": epoch,
            "finished": epoch == cfg["epochs"],
            "history": history,
            "metrics": {"last": row, "best": best,
                        "switch_rate": (switch_done / switch_eligible) if switch_eligible else None},
            "optimizer": opt.state_dict(),
            "loss_state": {k: v.detach().cpu() for k, v in loss_fn.state_dict().items()},
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None,
            "sampler_state": sampler.get_state(),
            "miner_state": miner.get_state() if miner is not None else None,
        }
        save_checkpoint(paths["last"], model, cfg, extra=extra, force=True)
        if best is not None and best["epoch"] == epoch:
            save_checkpoint(paths["best"], model, cfg, extra=extra, force=True)
        if keep_epochs:
            save_checkpoint(paths["dir"] / f"epoch-{epoch:03d}.pt", model, cfg, extra=extra, force=True)
        _write_log(paths["log"], history)
        if epoch == cfg["epochs"]:
            save_checkpoint(paths["out"], model, cfg, extra=extra, force=True)
        if callback is not None:
            callback(epoch, row)
    return {"history": history, "best": _best(history), "config": cfg, "paths": paths,
            "resumed_from": start_epoch if state else None}


def _best(history: list[dict[str, Any]]) -> dict[str, Any] | None:
    rows = [r for r in history if r.get("R@1") is not None and int(r["epoch"]) > 0]
    return max(rows, key=lambda r: (r["R@1"], -int(r["epoch"]))) if rows else None


def _model_from(state, build_model):
    model = build_model(state["config"])
    model.load_state_dict(state["state_dict"])
    return model
