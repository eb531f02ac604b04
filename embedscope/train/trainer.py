"""The training loop of ``embedscope train`` (Roth et al.'s protocol, docs/methods.md §5).

Files of a run with output ``-o runs/x.pt`` (documented in ``docs/training.md``):

* ``runs/x.pt`` -- the final checkpoint (the model after the last epoch; with ``epochs = 0`` the
  untrained network), foundation format;
* ``runs/x.pt.train/last.pt`` -- the checkpoint of the latest finished epoch, written atomically
  after every epoch; ``--resume`` continues from it;
* ``runs/x.pt.train/best.pt`` -- the checkpoint at the epoch of best test R@1 (Roth report the best
  test epoch per metric);
* ``runs/x.pt.train/epoch-NNN.pt`` -- every epoch, epoch 000 (the untrained network) included,
  only with ``keep_epochs``;
* ``runs/x.csv`` -- the CSV log: epoch, loss, R@1, MAP@R, rho, seconds, then the run's
  configuration (one value per run, repeated on each row); epoch 0 = the untrained model.

Every checkpoint holds the full resolved configuration (``config``, with the ``distance`` of the
loss, docs/methods.md §8) and in ``extra``: ``epoch``, ``finished``, ``history`` (the log rows),
``metrics`` (latest and best), the optimiser state, the loss's parameters, the sampler's and
miner's random states (and memory bank) and the torch RNG state, so that a resumed run equals an
uninterrupted one on the CPU with the same seed (and thread count: ``compute`` records the device,
torch's thread count and version of each start and resume).
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from embedscope.errors import EmbedscopeError, UsageError


class TrainingDiverged(EmbedscopeError):
    """The run diverged or collapsed: a loss or weights of NaN / inf, an optimiser step that
    overflowed, or embeddings of the test images that are NaN, inf or the zero vector (docs/training.md,
    "A run that diverges"). One line (exit 1) that names the epoch (and batch) and what was kept: the
    checkpoint of the last good epoch (``last.pt``) stays, nothing of the failed epoch is written.

    ``epoch``: the epoch that failed; ``history``: the log rows of the epochs saved before it (epoch 0
    = untrained), for ``train-grid``'s row of the run."""

    def __init__(self, message: str, epoch: int | None = None, history: list | None = None) -> None:
        super().__init__(message)
        self.epoch = epoch
        self.history = list(history or [])

    def __reduce__(self):  # travels from a train-grid worker process with its epoch and history
        return (type(self), (str(self), self.epoch, self.history))


class _Diverged(Exception):
    """Inside the loop: what went wrong, and in which batch (:func:`_run` adds the epoch and what was kept)."""

    def __init__(self, message: str, batch: tuple[int, int] | None = None) -> None:
        super().__init__(message)
        self.batch = batch


# Options of a run; None = chosen from the data set / loss (resolve_config).
OPTION_DEFAULTS: dict[str, Any] = {
    "dataset": "digits",
    "root": None,
    "train_classes": None,
    "arch": None,
    "weights": None,
    "weights_ema": None,
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
    "freeze_bn_affine": None,
    "image_size": None,
    "bigb": 1024,
    "amp": "auto",
}
AMP_CHOICES = ("auto", "bf16", "none")  # auto: bfloat16 autocast on CUDA, float32 on the CPU
OPTIMIZERS = ("adam", "adamw")
SCHEDULES = ("none", "cosine", "step")
# options a resumed run may change; everything else comes from the checkpoint
RESUME_OVERRIDABLE = ("epochs", "eval_every", "device", "num_workers", "amp")
LOG_COLUMNS = ["epoch", "loss", "R@1", "MAP@R", "rho", "seconds"]
# the run's configuration, repeated on every row of the CSV log (config key -> column)
LOG_CONFIG_COLUMNS = {"dataset": "dataset", "root": "root", "arch": "arch", "embed_dim": "embed_dim",
                      "normalize": "normalize",
                      "distance": "distance", "loss": "loss_name", "loss_params": "loss_params", "miner": "miner",
                      "p_switch": "p_switch", "sampler": "sampler", "batch_size": "batch_size", "epochs": "epochs",
                      "lr": "lr", "weight_decay": "weight_decay", "optimizer": "optimizer",
                      "lr_schedule": "lr_schedule", "seed": "seed", "train_classes": "train_classes",
                      "image_size": "image_size", "frozen_bn": "frozen_bn", "freeze_bn_affine": "freeze_bn_affine",
                      "weights": "weights", "notes": "notes"}
# the working files of a run folder that --force removes (nothing else is touched)
_RUN_FILE_PATTERNS = ("last.pt", "best.pt", "epoch-*.pt", ".*.tmp")

# docs/methods.md §8, used when embedscope.models.distances is not available
_LOSS_DISTANCE = {"contrastive": "euclidean", "triplet": "euclidean", "margin": "euclidean", "lifted": "euclidean",
                  "proxynca": "sqeuclidean", "multisimilarity": "cosine", "arcface": "cosine",
                  "softtriple": "cosine", "softmax": "cosine", "npair": "dot", "snr": "snr"}


def loss_distance(loss: str) -> str:
    """The distance of a loss (docs/methods.md §8): euclidean for contrastive/triplet/margin,
    sqeuclidean for ProxyNCA, cosine for multisimilarity/ArcFace/SoftTriple/normalised softmax,
    snr for SNR (via :func:`embedscope.models.distances.distance_for_loss`)."""
    try:
        from embedscope.models.distances import distance_for_loss
    except ImportError:  # pragma: no cover - an installation without the distance registry
        return _LOSS_DISTANCE.get(loss, "euclidean")
    return distance_for_loss(loss)


def dataset_defaults(dataset: str) -> dict[str, Any]:
    """Per-data-set defaults: the papers' protocol for photos (Roth §4.1), quick ones for digits and shapes."""
    key = dataset.lower()
    if key == "digits":
        # 5 training classes: spc-8 with 40 images = every class, 8 images each
        return {"arch": "digits_cnn", "batch_size": 40, "sampler": "spc-8", "lr": 1e-3, "epochs": 15}
    if key == "shapes":
        # 12 training shapes rendered at 64 px: the small shapes_cnn trained from scratch (BatchNorm
        # learns), SPC-8 batches of 64, Adam lr 1e-3 (docs/properties.md, "a recipe"); a make-shapes
        # set of another --size is trained at its own size (resolve_config)
        return {"arch": "shapes_cnn", "batch_size": 64, "sampler": "spc-8", "lr": 1e-3, "epochs": 12,
                "image_size": 64, "frozen_bn": False}
    epochs = 100 if key in ("sop", "online_products") else 150
    return {"arch": "resnet50", "batch_size": 112, "sampler": "spc-2", "lr": 1e-5, "epochs": epochs}


def _flag(k: str) -> str:
    return "--ema" if k == "weights_ema" else "--" + k.replace("_", "-")


def _show(v: Any) -> str:
    from embedscope.text import quoted

    return quoted(v)  # raw: the error line escapes it


def _as_int(k: str, v: Any, minimum: int | None = None) -> int:
    """An integer option (from the command line or YAML), or a one-line usage error."""
    if isinstance(v, bool) or not (isinstance(v, numbers.Integral) or (isinstance(v, float) and v.is_integer())
                                   or (isinstance(v, str) and v.strip().lstrip("+-").isdigit())):
        raise UsageError(f"{_flag(k)} must be an integer, got {_show(v)}")
    out = int(v)
    if minimum is not None and out < minimum:
        what = "positive" if minimum == 1 else f">= {minimum}"
        raise UsageError(f"{_flag(k)} must be {what}, got {out}")
    return out


def _as_float(k: str, v: Any) -> float:
    """A finite number option (YAML gives ``1e-3`` as a string), or a one-line usage error."""
    if isinstance(v, bool) or not isinstance(v, (numbers.Real, str)):
        raise UsageError(f"{_flag(k)} must be a number, got {_show(v)}")
    try:
        out = float(v)
    except ValueError:
        raise UsageError(f"{_flag(k)} must be a number, got {_show(v)}") from None
    if not math.isfinite(out):
        raise UsageError(f"{_flag(k)} must be a finite number, got {_show(v)}")
    return out


def _as_str(k: str, v: Any) -> str:
    if not isinstance(v, str):
        raise UsageError(f"{_flag(k)} must be a name, got {_show(v)}")
    return v


def _check_timm_name(arch: str) -> None:
    """``timm:NAME`` must name a model of the installed timm (``timm.is_model``; a pretrained tag such as
    ``resnet18.a1_in1k`` counts): else a usage error now, before the data are read (and, in a grid, before
    any run trains) rather than when the first run builds its network. A name with a source prefix
    (``hf-hub:...``) is left to timm."""
    if not arch.startswith("timm:"):
        return
    name = arch[len("timm:"):]
    try:
        import timm
    except ImportError:  # is_known_arch said it was there: the build reports it
        return
    is_model = getattr(timm, "is_model", None)
    if is_model is None or ":" in name:
        return
    if not name or not is_model(name):
        version = getattr(timm, "__version__", None)
        raise UsageError(f"unknown --arch {_show(arch)}: timm{f' {version}' if version else ''} has no model "
                         f"{_show(name)} (timm.list_models() names them)")


def resolve_config(options: dict[str, Any]) -> dict[str, Any]:
    """The full configuration of a run from user options (unknown keys are refused).

    Fills data-set defaults (:func:`dataset_defaults`), the loss's family, normalisation, distance
    (docs/methods.md §8) and default miner (:mod:`embedscope.train.losses`), and the model config of the
    foundation (:func:`embedscope.models.default_config`), with ``freeze_bn_affine`` always recorded
    (true only with frozen BatchNorm). The result is what every checkpoint stores. Every value is
    checked for its type and range: a wrong one is a one-line :class:`UsageError` naming the option.
    """
    from embedscope.models import ARCHS, default_config, is_known_arch
    from embedscope.train.losses import LOSSES, check_loss_params, loss_spec
    from embedscope.train.miners import MINER_NAMES
    from embedscope.train.samplers import SAMPLER_NAMES

    unknown = set(options) - set(OPTION_DEFAULTS)
    if unknown:
        raise UsageError(f"unknown training option(s): {', '.join(sorted(map(str, unknown)))}")
    opt = dict(OPTION_DEFAULTS)
    opt.update({k: v for k, v in options.items() if v is not None})
    opt["dataset"] = _as_str("dataset", opt["dataset"]).lower()
    for k, v in dataset_defaults(opt["dataset"]).items():
        if opt.get(k) is None:
            opt[k] = v
    for k in ("loss", "arch", "sampler", "optimizer", "lr_schedule", "device", "amp"):
        _as_str(k, opt[k])
    if opt["amp"] not in AMP_CHOICES:
        raise UsageError(f"unknown --amp {_show(opt['amp'])} (choose {', '.join(AMP_CHOICES)})")
    for k in ("root", "weights", "miner"):
        if opt[k] is not None:
            _as_str(k, opt[k])
    if opt["root"] == "":  # --root "$DATA" of an unset variable: "" is the working folder as a path, recorded
        # absolute below and read as the data set (shapes: its make-shapes folder, or the generated set cached there)
        if opt["dataset"] == "digits":
            opt["root"] = None  # (the digits come from no folder: "" is no --root, as get_dataset takes it)
        else:
            from embedscope.data.base import check_root_given

            check_root_given(opt["root"], opt["dataset"])
    if opt["root"] is not None and Path(opt["root"]).is_dir():
        # recorded absolute: embed, saliency and study take the folder a checkpoint was trained on, from
        # wherever they run (a relative 'shp' was only found from the folder train ran in)
        opt["root"] = str(Path(opt["root"]).resolve())
    if opt["dataset"] == "shapes" and options.get("image_size") is None:
        # the size the set was rendered at (make-shapes --size, recorded in its shapes.json; 64 for the
        # generated default set): a set of 32 px is trained at 32 px, not upsampled to the default 64
        from embedscope.data.shapes import rendered_size

        size = rendered_size(opt["root"])
        if size is not None:
            opt["image_size"] = size
    ema = opt.pop("weights_ema")  # kept in the config only when true (the runs before it had no such key)
    if ema is not None and not isinstance(ema, (bool, np.bool_)):
        raise UsageError(f"weights_ema must be true or false, got {_show(ema)}")
    if ema:
        if opt["weights"] is None:
            raise UsageError("--ema takes the EMA copy of the --weights file: give --weights")
        opt["weights_ema"] = True
    if opt["loss"] not in LOSSES:
        raise UsageError(f"unknown --loss '{_show(opt['loss'])[1:-1]}' (choose {', '.join(LOSSES)})")
    spec = loss_spec(opt["loss"])
    if not is_known_arch(opt["arch"]):
        if opt["arch"].startswith("timm:"):
            raise UsageError("--arch timm:NAME needs timm (pip install 'embedscope[timm]')")
        raise UsageError(f"unknown --arch {_show(opt['arch'])} (choose {', '.join(ARCHS)}, a torchvision "
                         "classification model such as efficientnet_b0, or timm:NAME)")
    _check_timm_name(opt["arch"])
    if (opt["dataset"] == "digits") != (opt["arch"] == "digits_cnn"):  # (_load_data's check, before the data are read)
        hint = "use --arch digits_cnn" if opt["dataset"] == "digits" else "photos need an image backbone"
        raise UsageError(f"--arch {_show(opt['arch'])[1:-1]} does not fit the {opt['dataset']} images ({hint})")
    if opt["sampler"] not in SAMPLER_NAMES:
        raise UsageError(f"unknown --sampler '{opt['sampler']}' (choose {', '.join(SAMPLER_NAMES)})")
    if opt["miner"] is not None and opt["miner"] not in MINER_NAMES:
        raise UsageError(f"unknown --miner '{opt['miner']}' (choose {', '.join(MINER_NAMES)})")
    if opt["optimizer"] not in OPTIMIZERS:
        raise UsageError(f"unknown optimizer '{opt['optimizer']}' (choose {', '.join(OPTIMIZERS)})")
    if opt["lr_schedule"] not in SCHEDULES:
        raise UsageError(f"unknown --lr-schedule '{opt['lr_schedule']}' (choose {', '.join(SCHEDULES)})")
    p = _as_float("p_switch", opt["p_switch"])
    if not 0.0 <= p <= 1.0:
        raise UsageError(f"--p-switch must lie in [0, 1], got {p}")
    opt["p_switch"] = p
    for k in ("batch_size", "embed_dim", "bigb"):
        opt[k] = _as_int(k, opt[k], 1)
    if opt["batch_size"] < 2:  # (the sampler's own check came after the data were read: exit 1)
        raise UsageError(f"--batch-size must be at least 2 (a pair for the loss), got {opt['batch_size']}")
    per_class = _PER_CLASS.get(opt["sampler"])
    if per_class and opt["batch_size"] % per_class:  # before any data are read (and before a grid trains any run)
        given = "" if options.get("batch_size") is not None else f" (the {opt['dataset']} default)"
        raise UsageError(f"--sampler {opt['sampler']} needs a --batch-size divisible by {per_class}, got "
                         f"{opt['batch_size']}{given}")
    opt["epochs"] = _as_int("epochs", opt["epochs"], 0)  # 0: the untrained network is the checkpoint
    opt["eval_every"] = _as_int("eval_every", opt["eval_every"], 0)
    opt["num_workers"] = _as_int("num_workers", opt["num_workers"], 0)
    opt["seed"] = _as_int("seed", opt["seed"], 0)
    if opt["train_classes"] is not None:
        opt["train_classes"] = _as_int("train_classes", opt["train_classes"], 1)
    opt["lr"] = _as_float("lr", opt["lr"])
    opt["weight_decay"] = _as_float("weight_decay", opt["weight_decay"])
    if opt["lr"] <= 0:
        raise UsageError(f"--lr must be positive, got {opt['lr']}")
    if opt["weight_decay"] < 0:
        raise UsageError(f"--weight-decay must be >= 0, got {opt['weight_decay']}")
    if not spec.tuple_loss and (opt["miner"] is not None or p > 0):
        raise UsageError(f"the {opt['loss']} loss takes no mined tuples: --miner and --p-switch apply to "
                         "margin, triplet, contrastive, multisimilarity, lifted and snr")
    if opt["miner"] is None:  # the loss's default; the reference code's ρ-regularisation is on distance mining
        opt["miner"] = spec.default_miner or ("distance" if p > 0 else None)
    if not isinstance(opt["loss_params"] or {}, dict):
        raise UsageError(f"loss_params must be a mapping of name: value, got {_show(opt['loss_params'])}")
    opt["loss_params"] = check_loss_params(opt["loss"], dict(opt["loss_params"] or {}))
    if REDUCTION_PARAM in spec.defaults:  # recorded, so that a run from before the reduction changed is known
        opt["loss_params"].setdefault(REDUCTION_PARAM, spec.defaults[REDUCTION_PARAM])
    opt["loss_family"] = spec.family
    model_over = {"embed_dim": opt["embed_dim"], "normalize": spec.normalize, "dataset": opt["dataset"]}
    if opt["frozen_bn"] is not None:
        if not isinstance(opt["frozen_bn"], (bool, np.bool_)):
            raise UsageError(f"frozen_bn must be true or false, got {_show(opt['frozen_bn'])}")
        model_over["frozen_bn"] = bool(opt["frozen_bn"])
    affine = opt["freeze_bn_affine"]
    if affine is not None and not isinstance(affine, (bool, np.bool_)):
        raise UsageError(f"freeze_bn_affine must be true or false, got {_show(affine)}")
    if opt["image_size"] is not None:
        model_over["image_size"] = _as_int("image_size", opt["image_size"], 1)
        if opt["dataset"] == "digits" and model_over["image_size"] != 8:  # (else a 'checkpoint expects' error, exit 1)
            raise UsageError(f"--image-size {model_over['image_size']} is for photos and shapes: the digits are "
                             "used as they are (8x8)")
    model_cfg = default_config(opt["arch"], **model_over)
    if model_cfg.get("resize") is not None and model_cfg["image_size"] != default_config(opt["arch"])["image_size"]:
        # the arch's Resize belongs to its own crop (bninception: 256 for 227), as `embed --image-size` drops
        # it: Resize(256) + CenterCrop(299) padded every evaluation image, CenterCrop(64) of a shapes scene kept
        # its middle quarter; another size takes round(N * 256 / 224)
        model_cfg.pop("resize")
    if affine and not model_cfg["frozen_bn"]:
        raise UsageError(f"--freeze-bn-affine keeps the scale and shift of a frozen BatchNorm fixed (the photo protocol); "
                         f"this run's BatchNorm ({_show(opt['arch'])[1:-1]} on {opt['dataset']}) trains, its statistics too")
    cfg = {**opt, **model_cfg}
    # recorded always: a config without it was saved before it existed (γ and β then stayed fixed in a
    # frozen BatchNorm; embedscope.models.backbones.bn_affine_frozen)
    cfg["freeze_bn_affine"] = bool(affine)
    cfg["arch"] = opt["arch"]
    cfg["normalize"] = spec.normalize
    cfg["distance"] = loss_distance(opt["loss"])
    return cfg


def config_notes(cfg: dict[str, Any]) -> list[str]:
    """What the configuration does that the user may not expect (printed and logged)."""
    from embedscope.train.losses import loss_spec

    notes = []
    spec = loss_spec(cfg["loss"])
    if cfg.get("p_switch", 0) > 0 and spec.default_miner is None and cfg.get("miner") == "distance":
        own = "own pair mining" if cfg["loss"] == "multisimilarity" else "use of every pair of the batch"
        notes.append(f"--p-switch {cfg['p_switch']:g}: the {cfg['loss']} loss's {own} is replaced by "
                     "distance-weighted tuple mining (--miner distance), which the rho-switch acts on "
                     "(as Roth et al.'s reference code)")
    elif spec.tuple_loss and spec.default_miner is None and cfg.get("miner") and cfg["loss"] == "multisimilarity":
        notes.append(f"--miner {cfg['miner']}: the multisimilarity loss's own pair mining (its MultiSimilarityMiner) "
                     "is replaced by these mined tuples (without --miner the loss mines its own pairs)")
    given = cfg.get("loss_params") or {}
    if cfg["loss"] == "multisimilarity" and cfg.get("miner") and given.get("epsilon") is not None:
        notes.append(f"--loss-param epsilon={given['epsilon']:g} has no effect: epsilon is the margin of the "
                     f"multisimilarity loss's own pair mining, which --miner {cfg['miner']} replaces")
    if (cfg["loss"] == "softtriple" and given.get("tau") is not None
            and int(given.get("centers_per_class") or spec.defaults["centers_per_class"]) == 1):
        notes.append(f"--loss-param tau={given['tau']:g} has no effect: tau weighs the regulariser of the "
                     "centres of a class, which one centre per class (centers_per_class=1) does without")
    if cfg.get("frozen_bn") and not cfg.get("weights"):
        what = ("its layers stay at their initial identity and are not trained (--freeze-bn-affine)"
                if cfg.get("freeze_bn_affine") else
                "its running statistics stay at their initial values (mean 0, variance 1); only the scale and "
                "shift train")
        notes.append("BatchNorm is frozen (the photo protocol, meant for ImageNet --weights) in a randomly "
                     f"initialised backbone: {what}")
    return notes


def lr_factor(schedule: str, epoch: int, epochs: int) -> float:
    """Learning-rate multiplier for 0-based ``epoch``: none = 1; cosine = ½(1 + cos(π e/E));
    step = 0.1 from 50% and 0.01 from 75% of the epochs."""
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * epoch / max(epochs, 1)))
    if schedule == "step":
        return 0.1 ** ((epoch >= epochs * 0.5) + (epoch >= epochs * 0.75))
    return 1.0


def schedule_change_note(schedule: str, done: int, before: int, now: int) -> str | None:
    """What ``--resume --epochs`` does to a learning-rate schedule, in words; None when nothing.

    :func:`lr_factor` spans the run's ``epochs``: a run that trained ``done`` epochs of ``before``
    and goes on to ``now`` follows the schedule over ``now`` epochs from there on, and differs from
    an uninterrupted ``now``-epoch run when one of its first ``done`` epochs had another factor."""
    if before == now or all(lr_factor(schedule, e, before) == lr_factor(schedule, e, now) for e in range(done)):
        return None
    return (f"--lr-schedule {schedule} spans the run's --epochs: epochs 1-{done} followed it over {before} epochs, "
            f"the rest follow it over {now}, so this run differs from an uninterrupted {now}-epoch run "
            f"(--force trains that one)")


CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt")  # a checkpoint's suffix, replaced by .csv in its default log


def default_log(out: str | os.PathLike) -> Path:
    """The log of a run without ``--log``: ``-o`` with its checkpoint suffix (:data:`CHECKPOINT_SUFFIXES`)
    replaced by ``.csv``, any other name with ``.csv`` appended. (``-o r_p0.2`` and ``-o r_p0.4`` both
    logged to ``r_p0.csv``: the second run was refused, and its ``--force`` replaced the first's log.)"""
    out = Path(out)
    return out.with_suffix(".csv") if out.suffix.lower() in CHECKPOINT_SUFFIXES else out.with_name(out.name + ".csv")


def legacy_default_log(out: str | os.PathLike) -> Path:
    """The default log of runs started before :func:`default_log` kept a name's other suffix."""
    return Path(out).with_suffix(".csv")


def run_paths(out: str | os.PathLike, log: str | os.PathLike | None = None) -> dict[str, Path]:
    """The files of a run with final checkpoint ``out`` (see the module docstring)."""
    out = Path(out)
    d = out.with_name(out.name + ".train")
    return {"out": out, "dir": d, "last": d / "last.pt", "best": d / "best.pt",
            "log": Path(log) if log else default_log(out)}


def _check_paths(paths: dict[str, Path], log_given: bool) -> None:
    """The log must not be one of the run's checkpoints (it would be overwritten, or overwrite them)."""
    from embedscope.fileio import is_folder_name

    if is_folder_name(paths["out"]) or paths["out"].is_dir():
        raise UsageError(f"-o {paths['out']}: is a folder, expected a checkpoint file name (CKPT.pt)")
    log = paths["log"].resolve()
    if not log_given and paths["out"].suffix.lower() == ".csv":  # a checkpoint under a log's name (refused while the
        # default log was -o with its suffix replaced: -o itself; now it would be x.csv.csv)
        raise UsageError(f"-o {paths['out']}: a checkpoint named with the default log's suffix (.csv); name the "
                         "checkpoint CKPT.pt or give --log LOG.csv")
    if paths["dir"].resolve() in log.parents:
        raise UsageError(f"--log {paths['log']} lies in the run folder {paths['dir']}; give it another place")
    if log == paths["out"].resolve():
        if not log_given:
            raise UsageError(f"-o {paths['out']}: the default log (-o with .csv) is the checkpoint "
                             "itself; name the checkpoint CKPT.pt or give --log LOG.csv")
        raise UsageError(f"--log {paths['log']} is the same file as the checkpoint -o; give the log another name")


def _log_rows(history: list[dict[str, Any]], cfg: dict[str, Any], notes: list[str]) -> list[dict[str, Any]]:
    conf = {}
    for k, col in LOG_CONFIG_COLUMNS.items():
        v = "; ".join(notes) if k == "notes" else cfg.get(k)
        if k == "loss_params":
            v = json.dumps(v or {}, sort_keys=True)
        conf[col] = "" if v is None else v
    return [{**{c: ("" if r.get(c) is None else r.get(c)) for c in LOG_COLUMNS}, **conf} for r in history]


def _write_log(path: Path, history: list[dict[str, Any]], cfg: dict[str, Any] | None = None,
               notes: list[str] | None = None) -> None:
    from embedscope.tables import write_csv

    rows = _log_rows(history, cfg or {}, notes or [])
    write_csv(path, rows, LOG_COLUMNS + list(LOG_CONFIG_COLUMNS.values()), force=True)


def _evaluate(model, train_ds, test_ds, device, batch_size: int, transform=None,
              progress: bool = False, notes: list[str] | None = None) -> dict[str, float]:
    """Test R@1 and MAP@R (docs/methods.md §1) and ρ of the training embeddings (docs/methods.md §2, exclude_top=1).

    ``transform``: the evaluation input of the run's checkpoint (:func:`embedscope.embed.checkpoint_input`,
    the one ``embed`` uses later), so that the logged numbers are those of the saved model.
    ``progress``: a passing bar while the two splits are embedded, on a terminal only (the epoch's
    line in a log file already reports the evaluation). ``notes``: where to add what is degenerate
    about the embedding (every test image at one point: R@1 and MAP@R then follow the tie rule).
    Embeddings of NaN or inf, or test embeddings that are the zero vector, raise :class:`_Diverged`.
    """
    import sys

    import torch

    from embedscope.embed import embed_images
    from embedscope.metrics import retrieval_metrics, spectral_decay
    from embedscope.progress import _is_tty

    progress = bool(progress) and _is_tty(sys.stderr)

    from embedscope.embed import NonFiniteEmbeddings
    from embedscope.validation import one_point, zero_rows

    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # evaluation never shifts the training's random stream
        try:
            Xte = embed_images(model, test_ds, transform=transform, batch_size=batch_size, device=str(device),
                               progress=progress, desc="evaluate: embed test")
            Xtr = embed_images(model, train_ds, transform=transform, batch_size=batch_size, device=str(device),
                               progress=progress, desc="evaluate: embed train")
        except NonFiniteEmbeddings as e:  # a diverged model (a BatchNorm statistic that overflowed, ...)
            raise _Diverged(str(e)) from None
    z = zero_rows(Xte)
    if len(z):  # no direction: R@1 and MAP@R by cosine are undefined (the retrieval refuses such rows)
        raise _Diverged(f"the model embeds {len(z)} of {len(Xte)} test images to the zero vector (the first: "
                        f"{str(test_ds.paths[int(z[0])])}), so test R@1 is undefined (a collapsed model)")
    if notes is not None and one_point(Xte):
        notes.append("every test image has the same embedding (the network collapsed to one point; a lower --lr?): "
                     "R@1 and MAP@R are those of a full tie (ties go to the lower index), rho is undefined")
    m = retrieval_metrics(Xte, test_ds.labels, include=["R@1", "MAP@R"])
    from embedscope.metrics.spectral import UndefinedMeasure

    try:
        rho = float(spectral_decay(Xtr))
    except UndefinedMeasure as e:  # --embed-dim 1: no singular value left after the top one (the log's rho
        # is empty where undefined; the run stopped at its epoch-0 evaluation)
        rho = float("nan")
        if notes is not None:
            notes.append(f"rho is undefined: {e}")
    return {"R@1": float(m["R@1"]), "MAP@R": float(m["MAP@R"]), "rho": rho}


class _TensorBoard:
    """Scalars per epoch to TensorBoard (optional dependency: ``pip install embedscope[tensorboard]``)."""

    def __init__(self, folder: str | os.PathLike | None, paths: dict[str, Path] | None = None) -> None:
        """Checks, before any work: the package is installed, ``folder`` is no file, none of the run's
        files (``paths``: -o, its log, the run folder's checkpoints, which would be written into it as
        the event folder or find a folder in their place at the end of the run) and can be created and
        written."""
        self.folder = folder
        self.writer = None
        if folder is None:
            return
        f = Path(folder)
        if f.exists() and not f.is_dir():
            raise UsageError(f"--tensorboard {folder}: is a file, expected a folder for the event files")
        if paths is not None:
            import fnmatch

            here = f.resolve()
            in_run_dir = here.parent == paths["dir"].resolve() and any(
                fnmatch.fnmatch(here.name, pat) for pat in (*_RUN_FILE_PATTERNS, _JOURNAL))
            if in_run_dir or here in (paths["out"].resolve(), paths["log"].resolve()):
                raise UsageError(f"--tensorboard {folder}: is a file of the run (the checkpoint -o, its log or a "
                                 f"checkpoint in {paths['dir']}); give the event files a folder of their own")
        try:
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401
        except ImportError:
            raise EmbedscopeError("--tensorboard needs the tensorboard package: "
                                  "pip install 'embedscope[tensorboard]'") from None
        from embedscope.fileio import existing_ancestor, probe_folder

        anc = existing_ancestor(f)  # where the event folder will be created
        if not anc.is_dir():
            raise UsageError(f"--tensorboard {folder}: {anc} is a file, not a folder")
        probe_folder(anc, f"--tensorboard {folder}")

    def open(self, cfg: dict[str, Any], notes: list[str], resumed_from: int | None = None,
             say: Callable[[str], None] | None = None) -> None:
        """Start the event file. TensorBoard reads every event file of the folder as one run, so
        ``purge_step`` hides what this run replaces: on a resume, the epochs after the checkpoint (a run
        stopped after logging an epoch, before saving it, logs it again); on a new run into a folder
        that holds event files already (an earlier run, ``--force``), all of them (the files stay; one
        line says so). Without it the curves of both zigzag through each other."""
        if self.folder is None:
            return
        from torch.utils.tensorboard import SummaryWriter

        purge = None
        if resumed_from is not None:
            purge = resumed_from + 1
        elif Path(self.folder).is_dir() and any(Path(self.folder).glob("*tfevents*")):
            purge = 0
            if say is not None:
                say(f"note: --tensorboard {self.folder} holds event files already: TensorBoard shows this run in "
                    "place of theirs (the files stay; give each run a folder of its own to compare them)")
        kw = {} if purge is None else {"purge_step": purge}
        self.writer = SummaryWriter(log_dir=str(self.folder), **kw)
        self.writer.add_text("config", json.dumps(cfg, sort_keys=True, default=str))
        for n in notes:
            self.writer.add_text("notes", n)

    def row(self, row: dict[str, Any]) -> None:
        if self.writer is None:
            return
        e = int(row["epoch"])
        for key, tag in (("loss", "train/loss"), ("R@1", "test/R@1"), ("MAP@R", "test/MAP@R"),
                         ("rho", "train/rho")):
            if row.get(key) is not None:
                self.writer.add_scalar(tag, float(row[key]), e)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _same_folder(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` name one existing folder (a relative and an absolute path of it)."""
    try:
        return (isinstance(a, str) and isinstance(b, str) and Path(a).is_dir() and Path(b).is_dir()
                and os.path.samefile(a, b))
    except OSError:
        return False


def _normalised(v: Any) -> Any:
    if isinstance(v, str):
        return v.lower()
    if isinstance(v, numbers.Real) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, dict):
        return {str(k): _normalised(x) for k, x in v.items()}
    return v


REDUCTION_PARAM = "avg_nonzero"  # triplet / contrastive: PML's mean over non-zero terms (True) or Roth's mean


def _saved_reduction(cfg: dict[str, Any], say: Callable[[str], None]) -> dict[str, Any]:
    """The loss parameters of a saved run, with the reduction it was trained with: runs saved before
    embedscope recorded ``avg_nonzero`` (triplet and contrastive) used PML's default, the mean over the
    non-zero terms; they continue with it."""
    from embedscope.train.losses import LOSSES

    lp = dict(cfg.get("loss_params") or {})
    spec = LOSSES.get(cfg.get("loss"))
    if spec is not None and REDUCTION_PARAM in spec.defaults and REDUCTION_PARAM not in lp:
        lp[REDUCTION_PARAM] = True
        say(f"note: this {cfg.get('loss')} run was saved before the loss recorded its reduction; it continues "
            "with the one it was trained with, the mean over the non-zero terms (avg_nonzero=true)")
    return lp


def trained_loss_params(loss: Any, recorded: dict[str, Any] | None) -> dict[str, Any]:
    """Every hyper-parameter a run of ``loss`` trained with, from the ``loss_params`` its config
    recorded: the loss's defaults (docs/methods.md §5) with the recorded values over them; a
    triplet/contrastive run saved before its reduction was recorded trained with PML's mean over the
    non-zero terms (:func:`_saved_reduction`). ``{margin: 0.2}`` and ``{}`` of a margin run are one
    setting. An unknown loss: the recorded values as they are."""
    from embedscope.train.losses import LOSSES

    spec = LOSSES.get(loss) if isinstance(loss, str) else None
    lp = dict(recorded or {}) if isinstance(recorded, dict) else {}
    if spec is None:
        return lp
    if REDUCTION_PARAM in spec.defaults and REDUCTION_PARAM not in lp:
        lp[REDUCTION_PARAM] = True
    return {**spec.defaults, **{k: v for k, v in lp.items() if v is not None}}


def _changed_loss_params(given: dict[str, Any], saved: dict[str, Any]) -> list[str]:
    """The ``--loss-param`` values of a resume request that differ from the saved run's, each as
    ``--loss-param K=V (the run has K=W)``. A value is compared with what the run trained with: its
    recorded value, else the loss's default (a run records only the parameters it was given, and the
    reduction of triplet/contrastive), each read as its default's kind (``squared=false`` is False,
    ``margin=1`` is 1.0), so giving the run's own parameters again is no change."""
    from embedscope.train.losses import LOSSES, check_loss_params

    have = trained_loss_params(saved.get("loss"), saved.get("loss_params"))
    if saved.get("loss") in LOSSES:
        try:
            given = check_loss_params(saved["loss"], dict(given))
        except UsageError:  # not a parameter of the run's loss, or not of its kind: differs, as given
            pass

    def shown(v: Any) -> str:  # as typed on the command line: true/false, 0.3
        return str(v).lower() if isinstance(v, bool) else f"{v}"

    out = []
    for k, v in given.items():
        if v is None:  # (YAML's null: the default, as a new run reads it)
            v = LOSSES[saved["loss"]].defaults.get(k) if saved.get("loss") in LOSSES else None
        if k not in have or _normalised(v) != _normalised(have[k]):
            was = f"{k}={shown(have[k])}" if k in have else f"no parameter {k}"
            out.append(f"--loss-param {k}={shown(v)} (the run has {was})")
    return out


def _resume_config(state: dict[str, Any], config: dict[str, Any], say: Callable[[str], None],
                   out: Path) -> dict[str, Any]:
    """The saved configuration with the resume-safe options of ``config`` applied.

    Any other option that differs from the saved run is refused (a resumed run must be the run it
    continues); options equal to the saved ones are fine. A run saved before ``freeze_bn_affine``
    existed kept the scale and shift of its frozen BatchNorm fixed: it continues so (the key is then
    recorded, and a note says it), and ``freeze_bn_affine: false`` is refused as another setting.
    """
    from embedscope.models.backbones import bn_affine_frozen

    saved = dict(state["config"])
    changed = []
    for k, v in config.items():
        if v is None or k in RESUME_OVERRIDABLE or k not in OPTION_DEFAULTS:
            continue
        if k == "loss_params":
            if v:
                changed += _changed_loss_params(v, saved)
            continue
        if k == "weights_ema":  # kept only when true: absent means false
            if bool(v) != bool(saved.get(k)):
                changed.append("--ema (the run started from the --weights file's "
                               f"{'EMA copy' if saved.get(k) else 'state_dict'})")
            continue
        if k == "root" and _same_folder(v, saved.get(k)):  # recorded absolute (runs before: as typed)
            continue
        if k == "freeze_bn_affine":  # compared with what the run trained with (a run saved before the key: γ, β
            if bool(v) != bn_affine_frozen(saved):  # fixed in a frozen BatchNorm)
                have = "fixed" if bn_affine_frozen(saved) else ("trained" if saved.get("frozen_bn") else
                                                                "trained, BatchNorm not frozen")
                asked = _flag(k) if v else "freeze_bn_affine: false"  # (false: only a YAML file says it)
                changed.append(f"{asked} (the run's BatchNorm scale and shift are {have})")
            continue
        if _normalised(v) != _normalised(saved.get(k)):
            changed.append(f"{_flag(k)} {_show(v)} (the run has {_show(saved.get(k))})")
    if changed:
        raise UsageError(f"--resume continues {out} with its saved options, but {'; '.join(changed)} differ: "
                         "drop them, or start again with --force (only --epochs, --eval-every, --device, "
                         "--num-workers and --amp may change)")
    cfg = dict(saved)
    cfg["loss_params"] = _saved_reduction(cfg, say)
    if cfg.get("freeze_bn_affine") is None:  # saved before the option: it goes on as it trained, said once
        cfg["freeze_bn_affine"] = bn_affine_frozen(cfg)
        if cfg["freeze_bn_affine"]:
            say("note: this run was saved before embedscope trained the scale and shift (gamma, beta) of a frozen "
                "BatchNorm; it continues with them fixed, as it was trained (--freeze-bn-affine)")
    kept = []
    for k in RESUME_OVERRIDABLE:
        if config.get(k) is not None:
            new = _as_int(k, config[k], 0) if k not in ("device", "amp") else _as_str(k, config[k])
            if new != cfg.get(k):
                kept.append(f"{_flag(k)} {new} (was {cfg.get(k)})")
            cfg[k] = new
    cfg["epochs"] = int(cfg["epochs"])
    if kept:
        say(f"resume: the saved options are kept, except {', '.join(kept)}")
    return cfg


def log_record(paths: dict[str, Path]) -> str:
    """The run's log as its checkpoints record it (``extra["log"]``): relative to the checkpoint's folder
    (a run folder moved whole keeps it), absolute when no relative path leads there."""
    log = Path(os.path.abspath(paths["log"]))
    try:
        return os.path.relpath(log, os.path.abspath(paths["out"].parent))
    except ValueError:  # (another drive)
        return str(log)


def _is_training_log(path: Path) -> bool:
    """Whether ``path`` begins with a header of a log :func:`_write_log` writes: ``epoch`` first, and only
    the log's columns."""
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as fh:
            first = fh.readline().strip("\r\n\ufeff")
    except OSError:
        return False
    cols = first.split(",")
    return cols[0] == "epoch" and set(cols) <= set(LOG_COLUMNS) | set(LOG_CONFIG_COLUMNS.values())


def _recorded_log(state: dict[str, Any], paths: dict[str, Path]) -> Path | None:
    """The log a saved run was written to (:func:`log_record`), or None for a run saved before it was recorded."""
    rec = (state.get("extra") or {}).get("log")
    return paths["out"].parent / rec if isinstance(rec, str) and rec else None


def _check_resume_log(state: dict[str, Any], paths: dict[str, Path], log_given: bool,
                      say: Callable[[str], None]) -> None:
    """A resumed run continues in the log it was started with (``extra["log"]``, :func:`log_record`).

    Another log (``--log``, or -o's default when the run was started with ``--log``) would leave that
    one as it is, without the new epochs: refused, naming both, while it exists. When it is gone
    (moved), the log asked for takes its place, with every epoch (the history is in the checkpoint),
    and a line says so. An existing file that is no training log is never overwritten by a resume.
    Runs saved before the log was recorded are not compared."""
    from embedscope.fileio import same_file

    old = _recorded_log(state, paths)
    if (not log_given and old is not None and old.is_file() and not same_file(old, paths["log"])
            and same_file(old, legacy_default_log(paths["out"]))):
        paths["log"] = old  # a run started before default_log (-o m.v1 logged to m.csv): its log, as it was
    new = paths["log"]
    if old is not None and not same_file(old, new):
        asked = f"--log {new}" if log_given else f"the default log {new} (-o with .csv)"
        if old.is_file():
            default = same_file(old, run_paths(paths["out"])["log"])
            keep = f"drop --log (or give --log {old})" if default else f"give --log {old}"
            raise UsageError(f"--resume continues {paths['out']}, whose log is {old}; "
                             f"{asked} would leave that one without the new epochs: {keep} to continue it, or move "
                             f"it to {new} first")
    if new.exists() and not (new.is_file() and _is_training_log(new)):
        raise EmbedscopeError(f"{new} exists and is not a training log (its first line is not a log's header, "
                              f"{','.join(LOG_COLUMNS)},...): a resume does not replace it; give --log another name")
    if old is not None and not same_file(old, new):
        say(f"resume: the run's log {old} is not there (moved?); {new} continues it, "
            "with every epoch")


def _prepare(config: dict[str, Any], paths: dict[str, Path], *, resume: bool, force: bool, log_given: bool,
             say: Callable[[str], None]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Check the request before any work: the configuration (resolved, or the saved one on
    resume), the paths and the folders' writability. Returns (config, saved state or None)."""
    from embedscope.fileio import check_writable
    from embedscope.models import read_checkpoint

    _check_paths(paths, log_given)
    _recover_replacement(paths, say)
    if resume:
        if not paths["last"].exists():
            raise EmbedscopeError(f"nothing to resume: {paths['last']} does not exist")
        state = read_checkpoint(paths["last"])
        _check_resume_log(state, paths, log_given, say)
        return _resume_config(state, config, say, paths["out"]), state
    cfg = resolve_config(config)
    check_writable(paths["out"], force=force)
    if paths["last"].exists() and not force:
        raise EmbedscopeError(f"an unfinished run exists ({paths['last']}): use --resume to continue "
                              "it or --force to start again")
    check_writable(paths["log"], force=force)
    return cfg, None


def _run_files(paths: dict[str, Path]) -> list[Path]:
    """The files of a run that ``--force`` replaces: final checkpoint, log, the run folder's checkpoints
    (and stale temporary files there); nothing else in the run folder."""
    files = [paths[k] for k in ("out", "log") if paths[k].is_file() or paths[k].is_symlink()]
    d = paths["dir"]
    if d.is_dir():
        for pattern in _RUN_FILE_PATTERNS:
            files += [f for f in sorted(d.glob(pattern)) if f.is_file() or f.is_symlink()]
    return files


def _real_run_files(paths: dict[str, Path]) -> list[Path]:
    """The files that hold the run (:func:`_run_files`), as absolute paths: a symbolic link among them
    stands for the file it points to, which is the one the run writes (:func:`embedscope.fileio.atomic_output`
    writes through a link and keeps it); a link to nothing holds nothing yet."""
    from embedscope.fileio import link_target

    files: list[Path] = []
    for f in _run_files(paths):
        real = Path(os.path.abspath(link_target(f, f)))
        if (real.is_file() or real == Path(os.path.abspath(f))) and real not in files:
            files.append(real)
    return files


def _clear_run(paths: dict[str, Path]) -> None:
    """Remove the run's files (:func:`_real_run_files`: through a link, the file it points to; the link
    stays), so that nothing stale stays beside a new run."""
    for f in _real_run_files(paths):
        with contextlib.suppress(FileNotFoundError):
            f.unlink()


_JOURNAL = ".replacing.json"  # in the run folder while a --force replacement's first write is under way


class _Replacement:
    """``--force`` on a new run: the earlier run's files stay untouched until the new run first writes.

    Its first write (:meth:`writing`, the epoch-0 or epoch-1 checkpoint and log) moves the earlier
    files aside (renamed, ``.NAME.<pid>.<random>.old`` beside them), writes the new ones, and only then
    deletes the old ones. A file of the run that is a symbolic link is written through it, as every
    output is (:func:`embedscope.fileio.atomic_output`): the file it points to is the one set aside and
    replaced, and the link stays. Should that first write fail (or be interrupted), what it wrote is removed
    and the earlier files are put back; a run that fails before it (bad options, a data error, Ctrl-C
    during the first epoch) leaves the earlier run exactly as it was. A process killed outright
    (SIGKILL, power loss) during that first write leaves a journal (``.replacing.json`` in the run
    folder) from which the next ``train`` into the same run puts the earlier run back
    (:func:`_recover_replacement`).
    """

    def __init__(self, paths: dict[str, Path], active: bool) -> None:
        self.paths = paths
        self.pending = active

    @contextlib.contextmanager
    def writing(self):
        if not self.pending:
            yield
            return
        import secrets

        from embedscope.fileio import write_text

        journal = self.paths["dir"] / _JOURNAL
        aside: list[tuple[Path, Path]] = []
        started = False  # the new run's first write began: every earlier file is set aside
        try:
            plan = []
            for f in _real_run_files(self.paths):
                if f.name.startswith(".") and f.name.endswith(".tmp"):  # a killed process's temporary file
                    with contextlib.suppress(FileNotFoundError):
                        f.unlink()
                    continue
                plan.append((f.with_name(f".{f.name}.{os.getpid()}.{secrets.token_hex(4)}.old"), f))
            import socket

            write_text(journal, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                            "aside": [[str(b.absolute()), str(f.absolute())] for b, f in plan]}),
                       force=True)
            for b, f in plan:
                os.replace(f, b)
                aside.append((b, f))
            started = True
            yield
        except BaseException:
            if started:  # (before, an earlier file not yet set aside, the journal's write failing, was deleted)
                with contextlib.suppress(OSError):
                    _clear_run(self.paths)  # the new run's partial first write
            for b, f in reversed(aside):
                with contextlib.suppress(OSError):
                    os.replace(b, f)
            with contextlib.suppress(OSError):
                journal.unlink()
            raise
        self.pending = False
        with contextlib.suppress(OSError):
            journal.unlink()  # the new run stands from here on
        for b, _ in aside:
            with contextlib.suppress(OSError):
                b.unlink()


def _recover_replacement(paths: dict[str, Path], say: Callable[[str], None]) -> None:
    """Put back the earlier run that a ``train --force`` killed during its first write had set aside
    (see :class:`_Replacement`): the killed process's partial files are removed and the earlier run's
    files renamed back, as its own rollback would have done. A journal of a live process is left alone."""
    journal = paths["dir"] / _JOURNAL
    if not journal.is_file():
        return
    try:
        rec = json.loads(journal.read_text())
        pid = int(rec["pid"])
        pairs = [(Path(b), Path(f)) for b, f in rec["aside"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise EmbedscopeError(f"{journal}: unreadable journal of an interrupted --force ({e}); "
                              "look at the run folder and remove the journal") from None
    import socket

    from embedscope.fileio import pid_alive

    if rec.get("host", socket.gethostname()) != socket.gethostname() or pid_alive(pid):
        raise EmbedscopeError(f"another train (process {pid}) is replacing this run right now "
                              f"(journal {journal}); wait for it, or remove the journal if that process is not ours")
    earlier = {Path(os.path.abspath(f)) for _, f in pairs}
    for f in _real_run_files(paths):  # written by the killed process (the earlier run's files were all set aside)
        if f not in earlier:
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
    for b, f in pairs:
        if b.exists() or b.is_symlink():
            os.replace(b, f)
    journal.unlink()
    say(f"note: put back the earlier run in {paths['dir']}, which a killed 'train --force' (process {pid}) "
        "had set aside during its first write")


def train_transform(ds, image_size: int, default: Callable | None = None) -> Callable:
    """The training augmentation of ``ds``: its kind's (:func:`embedscope.data.image_transform`,
    Roth §4.1 for photos), except for the rendered ``shapes`` set.

    A shapes scene is 64 px with the whole object in view; the photos' RandomResizedCrop draws
    crops of 8-100% of the area, and the small ones (18 x 18 px of 64) often hold floor and sky only.
    For shapes: RandomResizedCrop(image_size, scale=(0.35, 1)) + horizontal flip, ImageNet mean/std.
    """
    if default is None:
        from embedscope.data import image_transform as default
    if getattr(ds, "name", None) != "shapes":
        return default(ds.kind, train=True, image_size=image_size)
    from torchvision import transforms as T

    from embedscope.models.backbones import IMAGENET_MEAN, IMAGENET_STD

    return T.Compose([T.RandomResizedCrop(image_size, scale=(0.35, 1.0)), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def _load_data(cfg: dict[str, Any]):
    """(dataset, train split, test split, training labels 0..C-1, the training classes)."""
    from embedscope.data import get_dataset

    ds = get_dataset(cfg["dataset"], cfg["root"], train_classes=cfg["train_classes"])
    train_ds, test_ds = ds.subset("train"), ds.subset("test")
    if len(train_ds) == 0 or len(test_ds) == 0:
        raise EmbedscopeError(f"{cfg['dataset']}: the training or test split is empty")
    if (ds.kind == "digits") != (cfg["arch"] == "digits_cnn"):
        hint = "use --arch digits_cnn" if ds.kind == "digits" else "photos need an image backbone"
        raise EmbedscopeError(f"--arch {cfg['arch']} does not fit the {cfg['dataset']} images ({hint})")
    classes = np.unique(train_ds.labels)
    n_test = len(np.unique(test_ds.labels))
    if len(classes) < 2 or n_test < 2:  # the losses need two classes, the epoch's retrieval test too
        hint = (f" (--train-classes between 2 and {len(classes) + n_test - 2})" if cfg["train_classes"] is not None
                else "")
        raise EmbedscopeError(f"{cfg['dataset']}: training needs at least 2 training and 2 test classes, got "
                              f"{len(classes)} and {n_test}{hint}")
    _, test_sizes = np.unique(test_ds.labels, return_counts=True)
    if cfg["eval_every"] > 0 and not np.any(test_sizes >= 2):
        # every test query is alone in its class: R@1 and MAP@R have nothing to retrieve (before, the
        # untrained network's evaluation stopped with the retrieval's own words, naming no split)
        raise EmbedscopeError(f"{cfg['dataset']}: every one of the {n_test} test classes holds a single image, so "
                              "test R@1 and MAP@R are undefined: give the test classes more images, choose another "
                              "--train-classes, or train without evaluation (--eval-every 0)")
    ytrain = np.searchsorted(classes, train_ds.labels)  # training labels 0 .. C-1
    return ds, train_ds, test_ds, ytrain, classes


#: images per class of a sampler's batches (SPC-n; the embedded samplers draw SPC-2 candidates)
_PER_CLASS = {"spc-2": 2, "spc-4": 4, "spc-8": 8, "gc": 2, "ddm": 2, "frd": 2}


def sampler_notes(sampler: str, ytrain: np.ndarray, class_names=None, *, batch_size: int | None = None,
                  loss: str | None = None) -> list[str]:
    """What the training classes' sizes mean for the batches (docs/training.md, "Batch samplers"): SPC-n
    classes smaller than n repeat their images within a batch (a class of one image gives its only
    positive as a copy of itself), ``random`` batches hold no same-class pair when every class has
    one image (the loss is 0, nothing is learnt), and batches of a single class (``spc-n`` with
    ``batch_size`` n, ``spc-r`` with 2) give a tuple ``loss`` no negative (the loss is 0 again)."""

    _, sizes = np.unique(ytrain, return_counts=True)
    out = []
    one = {"spc-r": 2, **{k: v for k, v in _PER_CLASS.items() if k.startswith("spc-")}}.get(sampler)
    if batch_size is not None and one is not None and batch_size <= one and loss is not None:
        from embedscope.train.losses import LOSSES

        spec = LOSSES.get(loss)
        if spec is not None and spec.family == "ranking":
            out.append(f"--sampler {sampler} with --batch-size {batch_size}: every batch holds images of one class, "
                       f"so the {loss} loss has no negative pair (it is 0 and nothing is learnt): use a --batch-size "
                       f"of at least {2 * one}")
    n = _PER_CLASS.get(sampler)
    if n is not None:
        small = np.flatnonzero(sizes < n)
        if len(small):
            k = int(small[np.argmin(sizes[small])])
            name = str(class_names[k]) if class_names is not None else str(k)
            out.append(f"{len(small)} of {len(sizes)} training classes have fewer than {n} images (the smallest: "
                       f"{name}, {int(sizes[k])}): a --sampler {sampler} batch repeats their images"
                       + (" (a class of one image is its own positive)" if sizes.min() == 1 else ""))
    elif sampler == "random" and sizes.max() < 2:
        out.append("every training class holds a single image: --sampler random batches have no same-class pair, "
                   "so the loss is 0 and nothing is learnt (use an spc sampler, or more images per class)")
    return out


def input_size_notes(ds, cfg: dict[str, Any]) -> list[str]:
    """A ``shapes`` set rendered at another size than the run's input (``--image-size``; its default is
    the set's own size, :func:`embedscope.data.shapes.rendered_size`): every image is resampled to it, in
    training and in the evaluations (say a set of ``make-shapes --size 32`` trained with ``--image-size
    64``), which one note says."""
    size = ((getattr(ds, "info", None) or {}).get("generation") or {}).get("size")
    if getattr(ds, "name", None) != "shapes" or not isinstance(size, int) or isinstance(size, bool):
        return []
    run = int(cfg["image_size"])
    if size == run:
        return []
    return [f"the shapes set is rendered at {size} px and this run's input is {run} px (--image-size), so every "
            f"image is {'up' if run > size else 'down'}sampled to it; --image-size {size} trains at the set's size"]


def _build(cfg: dict[str, Any], state, n_classes: int, dev, unsafe_pickle: bool):
    """Model, loss and optimiser (restored from ``state`` on resume); returns them and the base lrs."""
    import torch

    from embedscope.models import build_model, load_backbone_weights
    from embedscope.train.losses import build_loss

    model = build_model(cfg)
    if state is not None:
        model.load_state_dict(state["state_dict"])
    elif cfg.get("weights"):
        load_backbone_weights(model, cfg["weights"], unsafe_pickle=unsafe_pickle, ema=bool(cfg.get("weights_ema")))
    loss_fn = build_loss(cfg["loss"], n_classes, cfg["embed_dim"], **cfg["loss_params"])
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
    return model, loss_fn, opt, base_lrs


def _restore(state, dev, sampler, miner) -> None:
    """The random streams and the sampler's and miner's states of a resumed run."""
    import torch

    ex = state["extra"]
    torch.set_rng_state(ex["torch_rng"])
    if dev.type == "cuda" and ex.get("cuda_rng") is not None:
        torch.cuda.set_rng_state(ex["cuda_rng"], dev)
    sampler.set_state(ex["sampler_state"])
    if miner is not None and ex.get("miner_state"):
        miner.set_state(ex["miner_state"])


class _Stats:
    """Counts of the ρ-switch over the run (eligible anchors, switched ones)."""

    def __init__(self) -> None:
        self.eligible = 0
        self.done = 0

    @property
    def rate(self) -> float | None:
        return (self.done / self.eligible) if self.eligible else None


@contextlib.contextmanager
def _workers_closed(loader):
    """The training loader's worker processes (kept from one epoch to the next) shut down on the way
    out, also when the run fails or is stopped (a traceback that holds the loader would keep them)."""
    try:
        yield
    finally:
        it = getattr(loader, "_iterator", None)
        shutdown = getattr(it, "_shutdown_workers", None)
        if callable(shutdown):
            with contextlib.suppress(Exception):
                shutdown()


def _train_epoch(epoch: int, cfg, model, loss_fn, opt, base_lrs, loader, miner, sampler, ytrain_t, dev, stats,
                 progress: bool) -> tuple[float, float]:
    """One epoch of minimisation (docs/methods.md §5); returns (mean batch loss, seconds)."""
    import torch

    from embedscope.progress import progress_bar

    f = lr_factor(cfg["lr_schedule"], epoch - 1, cfg["epochs"])
    for g, b in zip(opt.param_groups, base_lrs):
        g["lr"] = b * f
    model.train()
    loss_fn.train()
    amp_dtype = autocast_dtype(cfg.get("amp", "auto"), dev)
    amp_ctx = (lambda: torch.autocast("cuda", dtype=amp_dtype)) if amp_dtype is not None else contextlib.nullcontext
    t0 = time.perf_counter()
    total, nb = 0.0, 0
    # a redrawing bar on a terminal; without one, the epoch's own line (printed by the caller) only
    from embedscope.embed import start_workers

    loader.batch_sampler.epoch = epoch  # (the draws of each image in this epoch: TorchImages, EpochTagged)
    # a Ctrl-C while the worker processes start waits for them to be up (embed.start_workers)
    batches = start_workers(loader) if loader.num_workers > 0 else loader
    bar = progress_bar(batches, total=len(loader), desc=f"epoch {epoch}/{cfg['epochs']}", unit="batch",
                       enabled=progress, lines=False)
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
            raise _Diverged(f"the loss became {loss.item()}", (nb + 1, len(loader)))
        opt.zero_grad(set_to_none=True)
        if loss.requires_grad:
            loss.backward()
            try:
                opt.step()
            except RuntimeError as e:  # Adam's step size lr / (1 - beta1^t) beyond float32 (--lr 1e38)
                if "overflow" not in str(e):
                    raise
                raise _Diverged(f"the optimiser step overflowed ({str(e).strip().splitlines()[0]})",
                                (nb + 1, len(loader))) from None
        if sampler.needs_bank:
            sampler.update(idx, z.detach())
        if hasattr(miner, "last_stats"):
            stats.eligible += miner.last_stats[0]
            stats.done += miner.last_stats[1]
        total += float(loss.detach())
        nb += 1
        if progress:
            bar.set_postfix(loss=f"{total / nb:.4f}")
    return total / max(nb, 1), time.perf_counter() - t0


def _extra(epoch: int, cfg, history, row, stats, opt, loss_fn, sampler, miner, dev,
           inputs: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint carries besides the weights (see the module docstring); ``inputs``: what the
    run was trained on beyond its config (:func:`run_inputs`)."""
    import torch

    return {
        **inputs,
        "epoch": epoch,
        "finished": epoch == cfg["epochs"],
        "history": history,
        "metrics": {"last": row, "best": _best(history), "switch_rate": stats.rate,
                    "switch_counts": [stats.eligible, stats.done]},  # (a resumed run continues the counts)
        "optimizer": opt.state_dict(),
        "loss_state": {k: v.detach().cpu() for k, v in loss_fn.state_dict().items()},
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None,
        "sampler_state": sampler.get_state(),
        "miner_state": miner.get_state() if miner is not None else None,
    }


def _epoch_message(row: dict[str, Any], epochs: int) -> str:
    if int(row["epoch"]) == 0:
        msg = f"epoch 0/{epochs}  (untrained)"
    else:
        msg = f"epoch {row['epoch']}/{epochs}  loss {row['loss']:.4f}  {row['seconds']:.1f}s"
    if row.get("R@1") is not None:
        msg += f"  R@1 {row['R@1']:.4f}  MAP@R {row['MAP@R']:.4f}  rho {row['rho']:.4f}"
    return msg


def train(config: dict[str, Any], out: str | os.PathLike, *, resume: bool = False, force: bool = False,
          log: str | os.PathLike | None = None, progress: bool = True, keep_epochs: bool = False,
          callback: Callable[[int, dict[str, Any]], None] | None = None,
          echo: Callable[[str], None] | None = None, tensorboard: str | os.PathLike | None = None,
          unsafe_pickle: bool = False) -> dict[str, Any]:
    """Train one model (docs/methods.md §5) and write its checkpoints; returns a summary dict.

    Parameters
    ----------
    config : dict
        Options (keys of ``OPTION_DEFAULTS``), resolved with :func:`resolve_config`. On ``resume``
        only ``epochs``, ``eval_every``, ``device``, ``num_workers`` and ``amp`` may differ from the saved
        run; any other option that differs is refused (:class:`UsageError` naming it).
    out : path
        The final checkpoint. The run's working files go to ``<out>.train/`` (:func:`run_paths`).
    resume : bool
        Continue from ``<out>.train/last.pt``.
    force : bool
        Start again even when ``out`` or an unfinished run exists: the earlier run's final
        checkpoint, log and working files (``last.pt``, ``best.pt``, ``epoch-*.pt``) are replaced
        at the new run's first write (:class:`_Replacement`); a run that fails before it leaves
        them untouched.
    log : path, optional
        CSV log (default :func:`default_log`: ``out`` with ``.csv`` for its ``.pt``; must differ from the checkpoints).
    keep_epochs : bool
        Also keep ``epoch-NNN.pt`` for every epoch, ``epoch-000.pt`` (untrained) included.
    callback : callable(epoch, row), optional
        Called after each epoch's checkpoint is written (a test can stop a run here).
    echo : callable(str), optional
        Where the one line per epoch goes (default ``print``).
    tensorboard : path, optional
        Also log loss, R@1, MAP@R and ρ per epoch to TensorBoard event files in this folder
        (needs ``pip install embedscope[tensorboard]``).
    unsafe_pickle : bool
        Allow ``weights`` files that need arbitrary code to unpickle (trusted files only).

    Returns
    -------
    dict with ``history`` (log rows), ``best`` (row of best test R@1), ``config``, ``paths``,
    ``notes`` and ``resumed_from``.

    Notes
    -----
    The protocol (Roth §4.1): Adam (or AdamW) with weight decay, no LR schedule by default;
    SPC-2 batches; each sample of a batch is embedded in training mode, a tuple miner (if any)
    picks triplets on the detached embeddings, the PML loss is minimised. On CUDA: bfloat16
    autocast (``amp``: "auto" or "bf16"; "none" = float32), channels_last; the loss runs in float32.
    On the CPU with a fixed seed the run is deterministic. ``R@1`` and ``MAP@R`` are measured on the
    test split, ``rho`` (ρ, docs/methods.md §2) on the embedded training split, every ``eval_every``
    epochs (0 = never) and at epoch 0 (before training). ``epochs = 0`` writes the untrained network as the final checkpoint.
    """
    from embedscope.text import safe

    say = echo or (lambda s: print(safe(s), flush=True))  # lines name files: escaped where shown, once
    from embedscope.fileio import is_folder_name

    for name, p in (("-o", out), ("--log", log)):
        if p is not None and is_folder_name(p):
            raise UsageError(f"{name} {p}: is a folder name, expected a file name")
    paths = run_paths(out, log)
    tb = _TensorBoard(tensorboard, paths)  # before any work or message: the package, the folder
    cfg, state = _prepare(config, paths, resume=resume, force=force, log_given=log is not None, say=say)
    start_epoch = int(state["extra"]["epoch"]) if state else 0
    if state and not keep_epochs and (paths["dir"] / "epoch-000.pt").is_file():
        # a run started with --keep-epochs keeps them on --resume too (else epochs went unsaved, silently)
        keep_epochs = True
        say("resume: every epoch's checkpoint is kept, as the run did from its start (--keep-epochs)")
    elif state and keep_epochs and not (paths["dir"] / "epoch-000.pt").is_file():
        say(f"resume: --keep-epochs keeps epoch-NNN.pt from epoch {start_epoch} on; the epochs before were not kept "
            "(the run started without --keep-epochs; --force trains it again with them all)")
    notes = config_notes(cfg)
    if state and start_epoch < cfg["epochs"]:
        moved = schedule_change_note(cfg["lr_schedule"], start_epoch, int(state["config"]["epochs"]), cfg["epochs"])
        if moved:
            say(f"note: {moved}")
    if state and start_epoch >= cfg["epochs"]:
        return _finished_already(state, cfg, paths, force, say, start_epoch, notes, keep_epochs)
    from embedscope.fileio import folder_lock, make_folders, remove_empty_folders

    created = make_folders(paths["dir"], paths["out"]) if state is None else []
    claimed = False  # the log, made empty by this run (a new run: its own from the start)
    try:
        with folder_lock(paths["dir"], f"the run {paths['out']}", made=created):  # one writer of a run at a time
            if state is None and not force and (paths["last"].exists() or paths["out"].exists()):
                # (another train into the same -o wrote between this one's checks and its lock)
                raise EmbedscopeError(f"{paths['out']}: another run into it started meanwhile; use --resume to "
                                      "continue it or --force to start again")
            if state is None and not force:
                # two new runs into other -o with one --log both passed the log's check, and each epoch's log
                # of one replaced the other's (both said 'log X'): the log is claimed now, made empty
                try:
                    os.close(os.open(paths["log"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
                    claimed = True
                except FileExistsError:
                    raise EmbedscopeError(f"{paths['log']}: another run made this log meanwhile (two runs with one "
                                          "--log): give each run its own --log") from None
                except OSError:
                    pass  # (written, or refused with its own line, where the log is written)
            return _run(cfg, state, paths, start_epoch, notes, tb, say=say, force=force, progress=progress,
                        keep_epochs=keep_epochs, callback=callback, unsafe_pickle=unsafe_pickle)
    except BaseException:
        # a run that wrote nothing leaves no empty folder; but not when the lock was refused: the folder this
        # run made is then the other run's (folder_lock's refused-lock folder rule has emptied ``created``)
        if claimed:  # (an empty log is this run's claim, not yet written: not left behind)
            with contextlib.suppress(OSError):
                if paths["log"].is_file() and paths["log"].stat().st_size == 0:
                    paths["log"].unlink()
        remove_empty_folders(created)
        raise
    finally:
        tb.close()


def _complete_latest_epoch(state: dict[str, Any], paths: dict[str, Path], keep_epochs: bool, model) -> None:
    """Write the files of the saved epoch that a run writes after ``last.pt`` and may not have written
    (stopped between them: Ctrl-C, a kill): ``best.pt`` when that epoch is the best so far, and with
    ``keep_epochs`` its ``epoch-NNN.pt``. Else a resumed run's ``best.pt`` stayed an earlier epoch (or
    absent) while its history names this one, and ``study --epoch best`` measured that earlier model."""
    from embedscope.models import read_checkpoint, save_checkpoint

    ex = state["extra"]
    epoch = int(ex["epoch"])
    best = (ex.get("metrics") or {}).get("best")
    if best is not None and int(best["epoch"]) == epoch:
        try:
            have = int(read_checkpoint(paths["best"])["extra"]["epoch"]) if paths["best"].is_file() else None
        except (EmbedscopeError, KeyError, TypeError, ValueError):
            have = None
        if have != epoch:
            save_checkpoint(paths["best"], model, state["config"], extra=ex, force=True)
    kept = paths["dir"] / f"epoch-{epoch:03d}.pt"
    if keep_epochs and not kept.is_file():
        save_checkpoint(kept, model, state["config"], extra=ex, force=True)


def _finished_already(state, cfg, paths, force, say, start_epoch, notes, keep_epochs=False) -> dict[str, Any]:
    from embedscope.models import build_model, save_checkpoint

    if start_epoch > cfg["epochs"]:  # its final checkpoint would be the model of a later epoch
        kept = paths["dir"] / f"epoch-{cfg['epochs']:03d}.pt"
        raise UsageError(f"--resume --epochs {cfg['epochs']}: {paths['out']} has trained {start_epoch} epochs "
                         f"already and a run is not shortened; give --epochs {start_epoch} or more, or start "
                         f"again with --force" + (f" (the model after epoch {cfg['epochs']} is {kept})"
                                                  if kept.is_file() else ""))
    model = build_model(state["config"])
    model.load_state_dict(state["state_dict"])
    _complete_latest_epoch(state, paths, keep_epochs, model)
    from embedscope.fileio import same_file

    rec = _recorded_log(state, paths)
    moved = rec is not None and not rec.is_file() and not same_file(rec, paths["log"])  # (_check_resume_log)
    if paths["log"].is_file() or moved:  # its last row, when the run stopped before writing it; a moved log
        _write_log(paths["log"], state["extra"].get("history", []), cfg, notes)
    final = not paths["out"].exists() or force or not state["extra"].get("finished")
    if final:
        # finished at the epochs asked for now (say a run of 3 epochs stopped at 2, resumed with --epochs 2)
        save_checkpoint(paths["out"], model, cfg, extra={**state["extra"], "finished": True}, force=True)
    say(f"{paths['out']}: already trained for {start_epoch} epochs (nothing to do)")
    return {"history": state["extra"].get("history", []), "best": state["extra"].get("metrics", {}).get("best"),
            "config": cfg, "paths": paths, "notes": notes, "resumed_from": start_epoch, "final_written": final}


def run_inputs(cfg: dict[str, Any], data: str, state: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a run is trained on beyond its config, recorded in every checkpoint's ``extra``:
    ``data`` (the :func:`embedscope.data.base.data_fingerprint` of the data set: its listing,
    labels, split and images) and, with ``--weights``, ``weights_sha256`` (the file's content, where
    the config holds its path). A resumed run keeps the weights' hash of its start."""
    out: dict[str, Any] = {"data": data}
    if state is not None:
        if state["extra"].get("weights_sha256"):
            out["weights_sha256"] = state["extra"]["weights_sha256"]
    elif cfg.get("weights"):
        from embedscope.fileio import sha256_file

        out["weights_sha256"] = sha256_file(cfg["weights"])
    return out


def autocast_dtype(amp: str | None, dev):
    """The autocast dtype of the training forward passes: bfloat16 on CUDA unless ``amp`` is "none"
    ("auto", the default, and "bf16"); None (float32) on the CPU, whatever ``amp`` says."""
    import torch

    if dev.type == "cuda" and (amp or "auto") != "none":
        return torch.bfloat16
    return None


def compute_record(dev, start_epoch: int, state: dict[str, Any] | None = None,
                   amp: str | None = "auto") -> list[dict[str, Any]]:
    """``extra["compute"]``: where the epochs were computed — one entry per start or resume
    (``from_epoch``, ``device``, ``precision`` of the forward passes, ``torch_threads``, ``torch``). On the
    CPU the numbers of a run depend on the thread count (a convolution's last bits on how many threads
    split it; docs/training.md), so reproducing a run needs it: the seed alone does not say it."""
    import torch

    from embedscope.device import precision_name

    here = {"from_epoch": int(start_epoch) + 1, "device": str(dev),
            "precision": precision_name(dev, autocast_dtype(amp, dev) is not None),
            "torch_threads": int(torch.get_num_threads()), "torch": str(torch.__version__)}
    earlier = list((state or {}).get("extra", {}).get("compute") or [])
    return earlier + [here]


def data_changed_message(cfg: dict[str, Any], since: str = "was started") -> str:
    """"the data set NAME in ROOT changed since the run ``since`` (...)": one wording for resume and grid."""
    where = f" in {cfg['root']}" if cfg.get("root") else ""
    return (f"the data set {cfg['dataset']}{where} changed since the run {since} (images added, "
            "removed, replaced or relabelled)")


def _check_same_data(state: dict[str, Any], now: str, cfg: dict[str, Any]) -> None:
    """A resumed run trains on the data it started with: a recorded fingerprint (runs saved before
    embedscope recorded one have none, and are not checked) that differs from ``now`` is refused."""
    was = state["extra"].get("data")
    if was and was != now:
        raise EmbedscopeError(f"--resume: {data_changed_message(cfg)}; a resumed run must train on the data it "
                              "started with: put them back as they were, or start again with --force (a copy "
                              "of the images counts as changed unless it kept their modification times)")


def _run(cfg, state, paths, start_epoch, notes, tb, *, say, force, progress, keep_epochs, callback,
         unsafe_pickle) -> dict[str, Any]:
    """The run itself, after :func:`_prepare` accepted the request."""
    import torch

    from embedscope.data import TorchImages, image_transform
    from embedscope.data.base import data_fingerprint
    from embedscope.device import resolve_device
    from embedscope.models import save_checkpoint
    from embedscope.train.miners import build_miner
    from embedscope.train.samplers import build_sampler

    dev = resolve_device(cfg["device"])
    if cfg.get("amp") == "bf16" and dev.type != "cuda":
        say(f"note: --amp bf16 is CUDA's bfloat16 autocast; on {dev.type} this run trains in float32")
    torch.manual_seed(cfg["seed"])
    ds, train_ds, test_ds, ytrain, classes = _load_data(cfg)
    data = data_fingerprint(ds)
    if state is not None:
        _check_same_data(state, data, cfg)
    cfg["num_train_classes"] = int(len(classes))
    ytrain_t = torch.as_tensor(ytrain, dtype=torch.long)
    model, loss_fn, opt, base_lrs = _build(cfg, state, len(classes), dev, unsafe_pickle)
    inputs = run_inputs(cfg, data, state)  # after _build: a --weights file that cannot be read is its one-line error
    inputs["compute"] = compute_record(dev, start_epoch, state, cfg.get("amp", "auto"))
    inputs["log"] = log_record(paths)  # where a --resume continues the log (_check_resume_log)
    miner = build_miner(cfg["miner"], p_switch=cfg["p_switch"], seed=cfg["seed"] + 1)
    sampler = build_sampler(cfg["sampler"], ytrain, cfg["batch_size"], seed=cfg["seed"] + 2, bigb=cfg["bigb"])
    train_names = [ds.class_names[int(c)] for c in classes] if getattr(ds, "class_names", None) is not None else None
    notes += [n for n in sampler_notes(cfg["sampler"], ytrain, train_names, batch_size=int(cfg["batch_size"]),
                                       loss=cfg.get("loss")) + input_size_notes(ds, cfg)
              if n not in notes]
    transform = train_transform(ds, int(cfg["image_size"]), image_transform)
    from embedscope.embed import quiet_worker
    from embedscope.train.samplers import EpochTagged

    # each image's augmentation drawn from (seed, epoch, index) wherever it is drawn (TorchImages with a
    # seed): the worker processes start once and serve every epoch, their number does not change the
    # draws, and a resumed run draws what the uninterrupted one did. The loader's own generator only
    # seeds the workers (unused by the draws), apart from the run's, which the model and loss draw from.
    # The workers stay quiet when the run is stopped (embed.quiet_worker; they start in _train_epoch).
    loader = torch.utils.data.DataLoader(TorchImages(train_ds, transform, seed=cfg["seed"]),
                                         batch_sampler=EpochTagged(sampler),
                                         num_workers=cfg["num_workers"], pin_memory=dev.type == "cuda",
                                         persistent_workers=cfg["num_workers"] > 0,
                                         generator=torch.Generator().manual_seed(int(cfg["seed"]) & 0xFFFFFFFF),
                                         worker_init_fn=quiet_worker if cfg["num_workers"] > 0 else None)
    from embedscope.embed import checkpoint_input, evaluation_batch_size

    eval_bs = evaluation_batch_size(ds.kind)  # embed and study embed each split in these batches too

    eval_tf = checkpoint_input(ds, cfg, verb="evaluate")[0]  # the input size of the run, as `embed` uses it
    history: list[dict[str, Any]] = list(state["extra"].get("history", [])) if state else []
    # --force: the earlier run is replaced whole (nothing stale stays beside the new one), but only
    # at the new run's first write: a run that fails before it leaves the earlier one as it was
    replacing = _Replacement(paths, force and state is None)
    stats = _Stats()
    for n in notes:
        say(f"note: {n}")
    tb.open(cfg, notes, start_epoch if state is not None else None, say)
    if state is not None:
        _restore(state, dev, sampler, miner)
        counts = (state["extra"].get("metrics") or {}).get("switch_counts")
        if counts is not None:  # the rate over the whole run, not over the epochs since the resume
            stats.eligible, stats.done = int(counts[0]), int(counts[1])
        _complete_latest_epoch(state, paths, keep_epochs, model)
        # drop log rows past the checkpoint (a run killed after logging, before saving)
        history = [r for r in history if int(r["epoch"]) <= start_epoch]
        say(f"resuming {paths['out']} from epoch {start_epoch} of {cfg['epochs']}")
    else:
        row0: dict[str, Any] = {"epoch": 0, "loss": None, "R@1": None, "MAP@R": None, "rho": None, "seconds": 0.0}
        if cfg["eval_every"] > 0:
            try:
                row0.update(_evaluate(model, train_ds, test_ds, dev, eval_bs, eval_tf, progress))
            except _Diverged as e:  # nothing trained yet: the network itself (its --weights) is broken
                raise EmbedscopeError(f"the untrained network (epoch 0): {e}; nothing was written") from None
        history.append(row0)
        say(_epoch_message(row0, cfg["epochs"]))
        tb.row(row0)
        extra0 = _extra(0, cfg, history, row0, stats, opt, loss_fn, sampler, miner, dev, inputs)
        if keep_epochs or cfg["epochs"] == 0:
            with replacing.writing():
                if keep_epochs:
                    save_checkpoint(paths["dir"] / "epoch-000.pt", model, cfg, extra=extra0, force=True)
                if cfg["epochs"] == 0:  # the untrained network is the run's product
                    save_checkpoint(paths["last"], model, cfg, extra=extra0, force=True)
                    _write_log(paths["log"], history, cfg, notes)
                    save_checkpoint(paths["out"], model, cfg, extra=extra0, force=True)
        if cfg["epochs"] == 0:
            if callback is not None:
                callback(0, row0)
            return {"history": history, "best": None, "config": cfg, "paths": paths, "notes": notes,
                    "resumed_from": None}
    if sampler.needs_bank and state is None:
        with torch.random.fork_rng(devices=[dev.index or 0] if dev.type == "cuda" else []):
            from embedscope.embed import embed_images

            sampler.init_bank(embed_images(model, train_ds, transform=eval_tf, batch_size=eval_bs, device=str(dev),
                                           progress=False))

    saved = start_epoch if state is not None else None  # the latest epoch in last.pt
    eval_notes: list[str] = []
    said: set[str] = set()  # the kinds of evaluation note said (each once per run)
    with _workers_closed(loader):  # (kept across epochs: shut down when the run ends, or fails)
        for epoch in range(start_epoch + 1, cfg["epochs"] + 1):
            try:
                loss, seconds = _train_epoch(epoch, cfg, model, loss_fn, opt, base_lrs, loader, miner, sampler,
                                             ytrain_t, dev, stats, progress)
                from embedscope.embed import nonfinite_weights

                bad = nonfinite_weights(model) or nonfinite_weights(loss_fn)
                if bad:  # a step after the last finite loss, or a statistic (BatchNorm's) that overflowed
                    raise _Diverged(f"the weights became NaN or inf: {bad}")
                row: dict[str, Any] = {"epoch": epoch, "loss": loss, "R@1": None, "MAP@R": None, "rho": None,
                                       "seconds": seconds}
                if cfg["eval_every"] > 0 and (epoch % cfg["eval_every"] == 0 or epoch == cfg["epochs"]):
                    row.update(_evaluate(model, train_ds, test_ds, dev, eval_bs, eval_tf, progress, eval_notes))
            except _Diverged as e:
                raise TrainingDiverged(_diverged_message(e, epoch, cfg, paths, saved, replacing, keep_epochs),
                                       epoch, history) from None
            history.append(row)
            say(_epoch_message(row, cfg["epochs"]))
            for note in eval_notes:  # each kind once per run: the model rarely leaves that point again (one slot
                kind = note.split(" (")[0].split(":")[0]  # for all: --embed-dim 1's rho note hid a later collapse)
                if kind not in said:
                    say(f"note: epoch {epoch}: {note}")
                    said.add(kind)
            eval_notes.clear()
            tb.row(row)
            extra = _extra(epoch, cfg, history, row, stats, opt, loss_fn, sampler, miner, dev, inputs)
            best = extra["metrics"]["best"]
            with replacing.writing():
                save_checkpoint(paths["last"], model, cfg, extra=extra, force=True)
                if best is not None and best["epoch"] == epoch:
                    save_checkpoint(paths["best"], model, cfg, extra=extra, force=True)
                if keep_epochs:
                    save_checkpoint(paths["dir"] / f"epoch-{epoch:03d}.pt", model, cfg, extra=extra, force=True)
                _write_log(paths["log"], history, cfg, notes)
                if epoch == cfg["epochs"]:
                    save_checkpoint(paths["out"], model, cfg, extra=extra, force=True)
            saved = epoch
            if callback is not None:
                callback(epoch, row)
    return {"history": history, "best": _best(history), "config": cfg, "paths": paths, "notes": notes,
            "resumed_from": start_epoch if state else None}


def _diverged_message(e: _Diverged, epoch: int, cfg: dict[str, Any], paths: dict[str, Path], saved: int | None,
                      replacing: _Replacement, keep_epochs: bool) -> str:
    """The one line of a run that diverged in ``epoch``: where, what, and what was kept (``saved``: the
    epoch ``last.pt`` holds, None when no epoch was saved; the failed epoch is never written)."""
    where = f"epoch {epoch}" + (f", batch {e.batch[0]} of {e.batch[1]}" if e.batch else "")
    if saved is not None:
        kept = f"{paths['last']} keeps epoch {saved}, the last good one"
    elif replacing.pending and _run_files(paths):
        kept = f"nothing was written: the earlier run of {paths['out']} is kept as it was"
    elif keep_epochs and (paths["dir"] / "epoch-000.pt").is_file():
        kept = f"only {paths['dir'] / 'epoch-000.pt'} (the untrained network) was written"
    else:
        kept = "no epoch had finished, nothing was written"
    if not kept.startswith("nothing was written: the earlier run"):
        kept += (f"; {paths['out']} stays as it was" if paths["out"].exists()
                 else f"; no final checkpoint {paths['out']}")
    return f"training diverged in {where}: {e}; {kept}. Try a lower --lr (this run's: {cfg['lr']:g})"


def _best(history: list[dict[str, Any]]) -> dict[str, Any] | None:
    rows = [r for r in history if r.get("R@1") is not None and int(r["epoch"]) > 0]
    return max(rows, key=lambda r: (r["R@1"], -int(r["epoch"]))) if rows else None
