"""embedscope train --dataset NAME --loss NAME [...] -o CKPT.pt"""

from __future__ import annotations

from embedscope.cli.common import add_no_progress
from embedscope.cli.training_options import (
    FILE_ONLY,
    FILE_ONLY_BOOLS,
    OPTION_DESTS,
    add_training_options,
    parse_loss_params,
)


def add_parser(sub, parents):
    p = sub.add_parser(
        "train", parents=parents, help="train an embedding model (losses, miners, samplers of Roth et al.)",
        description="Train an embedding model with a pytorch-metric-learning loss, a tuple miner, a batch "
        "sampler and optional rho-regularisation (--p-switch), as in Roth et al. (ICML 2020). Writes the final "
        "checkpoint to -o, the checkpoint of the latest and of the best epoch to <-o>.train/ (for --resume) "
        "and a CSV log (epoch, loss, R@1, MAP@R, rho, seconds and the run's options) beside -o. "
        "See docs/training.md.")
    add_training_options(p)
    p.add_argument("-o", "--output", metavar="CKPT.pt", help="final checkpoint (required unless in --config)")
    p.add_argument("--config", metavar="RUN.yaml", help="read options from a YAML file; flags given here override it")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run from <-o>.train/last.pt")
    p.add_argument("--log", metavar="LOG.csv", help="CSV log (default: -o with .csv for its .pt, .pth or .ckpt; another name "
                   "with .csv appended: -o r_p0.35 logs to r_p0.35.csv)")
    p.add_argument("--keep-epochs", action="store_true",
                   help="also keep a checkpoint of every epoch in <-o>.train/ (epoch-000.pt = untrained)")
    p.add_argument("--tensorboard", metavar="DIR",
                   help="also log loss, R@1, MAP@R and rho per epoch to TensorBoard event files in DIR "
                   "(pip install 'embedscope[tensorboard]')")
    p.add_argument("--unsafe-pickle", action="store_true",
                   help="allow --weights files that need arbitrary code to unpickle (only for trusted files)")
    add_no_progress(p)
    p.add_argument("--force", action="store_true",
                   help="start again: replace the final checkpoint -o, its log and the checkpoints of the run folder "
                   "<-o>.train/ (last.pt, best.pt, epoch-*.pt; nothing else there) at the new run's first write")
    p.set_defaults(func=run)
    return p


def read_yaml_options(path: str) -> dict:
    """Options from a YAML mapping; keys as the long options, with - or _ (``p-switch`` or ``p_switch``)."""
    from pathlib import Path

    import yaml

    from embedscope.errors import EmbedscopeError, UsageError
    from embedscope.text import quoted

    f = Path(path)
    if f.is_dir():
        raise EmbedscopeError(f"{path}: is a folder, expected a YAML config file")
    if not f.exists():  # (not `is_file`: /dev/null and a shell's <(...) pipe are read as they are)
        raise EmbedscopeError(f"{path}: no such config file")
    try:
        data = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise EmbedscopeError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    except (UnicodeDecodeError, OSError) as e:
        raise EmbedscopeError(f"{path}: cannot be read as a UTF-8 text file ({e.__class__.__name__})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping of option: value")
    out = {}
    for k, v in data.items():
        key = str(k).replace("-", "_")
        if key not in OPTION_DESTS and key not in FILE_ONLY:
            raise UsageError(f"{path}: unknown option '{k}' "
                             f"(allowed: {', '.join(OPTION_DESTS + sorted(FILE_ONLY))})")
        if key in FILE_ONLY_BOOLS and not isinstance(v, bool):
            raise UsageError(f"{path}: {k} must be true or false, got {quoted(v)}")
        if key in ("output", "o", "log", "tensorboard") and not isinstance(v, str):
            raise UsageError(f"{path}: {k} must be a file name, got {quoted(v)}")
        out["output" if key == "o" else key] = v
    return out


def _refuse_inputs(out, log, config, weights) -> None:
    """The checkpoint, the log and the run folder's checkpoints must not be the config or --weights file
    (they would be replaced, with --force or at the end of the run)."""
    from embedscope.cli.output import refuse_inputs
    from embedscope.fileio import is_folder_name
    from embedscope.train.trainer import run_paths

    inputs = [config, weights if isinstance(weights, str) else None]
    if not any(inputs) or is_folder_name(out) or (log is not None and is_folder_name(log)):
        return  # a folder name is refused by the trainer
    p = run_paths(out, log)
    refuse_inputs([out, log if log else p["log"], p["last"], p["best"]], inputs)


def run(args) -> int:
    from embedscope.errors import UsageError
    from embedscope.tables import format_table
    from embedscope.text import safe
    from embedscope.train.trainer import train

    opts = read_yaml_options(args.config) if args.config else {}
    for d in OPTION_DESTS:
        v = getattr(args, d, None)
        if v is not None:
            opts[d] = v
    if opts.get("loss_params") is not None and not isinstance(opts.get("loss_params"), dict):
        raise UsageError("loss_params in the config file must be a mapping")
    lp = dict(opts.pop("loss_params", None) or {})
    lp.update(parse_loss_params(args.loss_param))
    if lp:
        opts["loss_params"] = lp
    out = args.output or opts.pop("output", None)
    opts.pop("output", None)
    log = args.log or opts.pop("log", None)
    opts.pop("log", None)
    tensorboard = args.tensorboard or opts.pop("tensorboard", None)
    opts.pop("tensorboard", None)
    resume = bool(opts.pop("resume", False)) or args.resume
    force = bool(opts.pop("force", False)) or args.force
    keep = bool(opts.pop("keep_epochs", False)) or args.keep_epochs
    if not out:
        raise UsageError("the output checkpoint is missing: give -o CKPT.pt (or 'output:' in --config)")
    if resume and force:
        raise UsageError("--resume continues a run and --force starts it again: give one of them")
    from embedscope.cli.output import check_suffix

    check_suffix(out, "-o", ".pt")  # a checkpoint under a .h5/.csv name (the log's default is -o with .csv)
    check_suffix(log, "--log", ".csv")
    _refuse_inputs(out, log, args.config, opts.get("weights"))
    res = train(opts, out, resume=resume, force=force, log=log, progress=not args.no_progress, keep_epochs=keep,
                echo=lambda s: print(safe(s), flush=True), tensorboard=tensorboard,
                unsafe_pickle=args.unsafe_pickle)
    rows = [{**r, "loss": "-" if r.get("loss") is None else r["loss"]}
            for r in res["history"] if r.get("R@1") is not None]
    if rows:
        print(format_table(rows, ["epoch", "loss", "R@1", "MAP@R", "rho", "seconds"],
                           title="evaluations (test R@1 and MAP@R, training rho; epoch 0 = untrained)"))
        if (res.get("config") or {}).get("embed_dim") == 2:  # (it read as a perfectly spread model)
            print("note: rho is 0 by construction at --embed-dim 2: leaving out the top singular value leaves one")
    best = res["best"]
    if best:
        print(f"best test R@1 {best['R@1']:.4f} at epoch {best['epoch']} (rho {best['rho']:.4f})")
    p = res["paths"]
    kept = "last.pt for --resume" + (", best.pt" if p["best"].is_file() else "")  # no best.pt without evaluations
    if res.get("final_written", True):
        print(f"wrote {safe(p['out'])} (final), {safe(p['dir'])}/ ({kept}), log {safe(p['log'])}")
    else:  # a finished run resumed with its own --epochs: its final checkpoint is the one it had
        print(f"kept {safe(p['out'])} (final, as it was), {safe(p['dir'])}/ ({kept}), log {safe(p['log'])}")
    return 0
