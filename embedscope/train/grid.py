"""``embedscope train-grid``: one model per (loss, p_switch, seed), for correlation studies.

Each combination trains into ``<out_dir>/<dataset>_<loss>_p<p_switch>_s<seed>.pt`` with the trainer
of :mod:`embedscope.train.trainer` (its working files beside it, see ``docs/training.md``). A
combination whose final checkpoint exists and is finished is skipped; one with an unfinished run
(``<name>.pt.train/last.pt``) is resumed. ``p_switch > 0`` applies only to tuple losses: those
combinations are skipped for the others. A summary (``grid.csv``) lists every model with its best
test R@1, the epoch of it and ρ of the training embeddings there (Roth §5 take both at the epoch of
best test R@1, METHODS.md §6).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

from embedscope.errors import EmbedscopeError

SUMMARY_COLUMNS = ["name", "loss", "loss_family", "p_switch", "seed", "status", "epochs", "best_epoch",
                   "best_R@1", "rho_at_best", "final_R@1", "final_rho", "checkpoint"]


def run_name(dataset: str, loss: str, p_switch: float, seed: int) -> str:
    return f"{dataset}_{loss}_p{p_switch:g}_s{seed}"


def _finished(path: Path) -> dict[str, Any] | None:
    from embedscope.models import read_checkpoint

    try:
        obj = read_checkpoint(path)
    except EmbedscopeError:
        return None
    extra = obj.get("extra") or {} if isinstance(obj, dict) else {}
    return obj if extra.get("finished") else None


def train_grid(dataset: str, losses: Sequence[str], p_switches: Sequence[float], seeds: Sequence[int],
               out_dir: str | os.PathLike, *, options: dict[str, Any] | None = None, force: bool = False,
               progress: bool = True, echo: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Train every combination of ``losses`` × ``p_switches`` × ``seeds`` (METHODS.md §5, §6).

    ``options`` are further trainer options (epochs, sampler, miner, batch_size, …) shared by all
    runs. Finished runs are skipped (``force`` retrains them). Writes ``<out_dir>/grid.csv`` and
    returns its rows.
    """
    from embedscope.tables import write_csv
    from embedscope.train.losses import loss_spec
    from embedscope.train.trainer import resolve_config, run_paths, train

    say = echo or print
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise EmbedscopeError(f"{out_dir} is a file, expected an output folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    options = dict(options or {})
    for k in ("loss", "p_switch", "seed", "dataset"):
        options.pop(k, None)
    combos = [(lo, float(p), int(s)) for lo in losses for p in p_switches for s in seeds]
    for lo, p, s in combos:  # validate every combination before training any
        loss_spec(lo)
        if p == 0 or loss_spec(lo).tuple_loss:
            resolve_config({**options, "dataset": dataset, "loss": lo, "p_switch": p, "seed": s})
    rows = []
    for i, (lo, p, s) in enumerate(combos, 1):
        name = run_name(dataset, lo, p, s)
        ckpt = out_dir / f"{name}.pt"
        row: dict[str, Any] = {"name": name, "loss": lo, "loss_family": loss_spec(lo).family, "p_switch": p,
                               "seed": s, "checkpoint": str(ckpt)}
        if p > 0 and not loss_spec(lo).tuple_loss:
            say(f"[{i}/{len(combos)}] {name}: skipped (the {lo} loss takes no mined tuples, p_switch n/a)")
            rows.append({**row, "status": "n/a"})
            continue
        done = None if force else (_finished(ckpt) if ckpt.exists() else None)
        if done is not None:
            say(f"[{i}/{len(combos)}] {name}: finished already, skipped")
            rows.append({**row, "status": "skipped", **_summary(done["extra"])})
            continue
        resume = (not force) and run_paths(ckpt)["last"].exists()
        say(f"[{i}/{len(combos)}] {name}: {'resuming' if resume else 'training'}")
        cfg = {**options, "dataset": dataset, "loss": lo, "p_switch": p, "seed": s}
        res = train(cfg, ckpt, resume=resume, force=force or ckpt.exists(), progress=progress, echo=say)
        rows.append({**row, "status": "trained", **_summary({"history": res["history"], "metrics": {"best": res["best"]}})})
    write_csv(out_dir / "grid.csv", rows, SUMMARY_COLUMNS, force=True)
    return rows


def _summary(extra: dict[str, Any]) -> dict[str, Any]:
    hist = [r for r in extra.get("history", []) if int(r["epoch"]) > 0]
    best = (extra.get("metrics") or {}).get("best")
    evals = [r for r in hist if r.get("R@1") is not None]
    last = evals[-1] if evals else {}
    return {"epochs": hist[-1]["epoch"] if hist else 0,
            "best_epoch": best["epoch"] if best else None,
            "best_R@1": best["R@1"] if best else None,
            "rho_at_best": best["rho"] if best else None,
            "final_R@1": last.get("R@1"), "final_rho": last.get("rho")}
