"""``embedscope train-grid``: one model per (loss, p_switch, seed), for correlation studies.

Each combination trains into ``<out_dir>/<dataset>_<loss>_p<p_switch>_s<seed>.pt`` with the trainer
of :mod:`embedscope.train.trainer` (its working files beside it, see ``docs/training.md``).

* A combination whose final checkpoint exists, is finished **and was trained with the same
  settings** is skipped. A finished (or unfinished) run with *other* settings (say ``--embed-dim 64``
  over a D = 32 run) is refused before anything trains, naming the settings that differ; ``force``
  retrains it.
* A combination with an unfinished run (``<name>.pt.train/last.pt``) of the same settings is resumed;
  also a finished run extended with ``train --resume --epochs N`` and stopped before epoch N (its final
  checkpoint holds the earlier epochs, ``last.pt`` the extension's settings), by a grid of N epochs.
* ``p_switch > 0`` applies only to tuple losses: those combinations are skipped for the others (status
  ``n/a``, no checkpoint: the column is empty).
* A run that diverges (:class:`~embedscope.train.trainer.TrainingDiverged`: a loss or weights of NaN
  or inf, embeddings collapsed to the zero vector) is recorded with status ``diverged`` (its epochs
  before the failure summarised, ``failure`` the trainer's one line, no ``checkpoint``) and the grid
  goes on with the other runs; the command then ends with exit 1 naming them. Any other error stops
  the grid, as before. A later call trains a diverged run again (from its last good epoch).

The summary ``grid.csv`` lists every model of the folder: rows of earlier calls are kept (a row of
this call replaces the row of the same name) while their checkpoints are: a row whose checkpoint is
gone is dropped, one whose checkpoint changed since the table was written is summarised again.
Per model: the settings, the best test R@1 (and MAP@R when the trainer logs it), the epoch of it
and ρ of the training embeddings there (Roth §5 take both at the epoch of best test R@1,
docs/methods.md §6), the final epoch's values, the untrained network's test R@1 (epoch 0 of the
log), the paths of the final and best checkpoints (empty where there is none) and the
settings that make runs other objectives (``embed_dim``, ``normalize``, ``train_classes``, ``image_size``,
``freeze_bn_affine``).
"""

from __future__ import annotations

import contextlib
import csv
import numbers
import os
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

from embedscope.errors import EmbedscopeError, UsageError
from embedscope.text import quoted

SUMMARY_COLUMNS = ["name", "loss", "loss_family", "p_switch", "seed", "embed_dim", "normalize", "train_classes",
                   "image_size", "freeze_bn_affine", "status", "epochs",
                   "best_epoch", "best_R@1", "best_MAP@R", "rho_at_best", "final_R@1", "final_MAP@R", "final_rho",
                   "untrained_R@1", "checkpoint", "best_checkpoint", "failure"]

#: the columns every train-grid has written into grid.csv: a file whose header lacks one of them is
#: no train-grid table (refused before any training unless --force, then replaced, its rows not merged)
TABLE_COLUMNS = ("name", "loss", "p_switch", "seed", "status")

# settings that may differ between a stored run and a new request without making it another run
IGNORED_SETTINGS = ("device", "num_workers", "eval_every", "num_train_classes", "amp")
# settings a config holds only when true (a run trained before one existed has no such key)
FLAG_SETTINGS = ("weights_ema",)


class _Job(NamedTuple):
    """One run of a grid to train: its place in the returned rows, its heading line, the trainer's
    options and checkpoint, and the row's status once it is done."""

    at: int
    head: str
    opts: dict[str, Any]
    ckpt: Path
    resume: bool
    force: bool
    status: str


def run_name(dataset: str, loss: str, p_switch: float, seed: int) -> str:
    return f"{dataset}_{loss}_p{p_switch:g}_s{seed}"


def _read(path: Path) -> dict[str, Any] | None:
    from embedscope.models import read_checkpoint

    try:
        obj = read_checkpoint(path)
    except EmbedscopeError:
        return None
    return obj if isinstance(obj, dict) else None


def _finished(path: Path) -> dict[str, Any] | None:
    obj = _read(path)
    if obj is None:
        return None
    extra = obj.get("extra") or {}
    return obj if extra.get("finished") else None


def _norm(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in sorted(v.items())}
    return v


def _more_epochs_only(stored: dict[str, Any], wanted: dict[str, Any], diff: list[str]) -> bool:
    """Whether a stored run differs from a request only in having fewer ``epochs`` (``train --resume --epochs N``
    extends it; a grid refuses it as other settings)."""
    try:
        return (len(diff) == 1 and diff[0].startswith("epochs: ")
                and int(stored.get("epochs")) < int(wanted.get("epochs")))
    except (TypeError, ValueError):
        return False


def wanted_epochs(wanted: dict[tuple, dict[str, Any]]) -> int | None:
    """The one ``epochs`` of a grid's resolved configurations (None when they differ, or there are none)."""
    values = {int(c["epochs"]) for c in wanted.values()}
    return values.pop() if len(values) == 1 else None


def settings_diff(stored: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """The settings (``key: stored -> wanted``) in which a stored run's config differs from a request.

    Keys of :data:`IGNORED_SETTINGS` (device, workers, evaluation frequency, precision) do not count;
    two names of one folder (``root``) are the same setting; ``freeze_bn_affine`` is compared as
    trained (:func:`~embedscope.models.backbones.bn_affine_frozen`: a run saved before the key kept the
    scale and shift of a frozen BatchNorm fixed).
    """
    from embedscope.models.backbones import bn_affine_frozen
    from embedscope.text import quoted
    from embedscope.train.trainer import _same_folder, trained_loss_params

    out = []
    for k in sorted(set(stored) | set(wanted)):
        if k in FLAG_SETTINGS:  # a flag kept only when true: absent means false, on either side
            a, b = bool(stored.get(k)), bool(wanted.get(k))
        elif k == "freeze_bn_affine":  # what each trained with: a run saved before the key kept γ, β fixed
            a, b = bn_affine_frozen(stored), bn_affine_frozen(wanted)  # in a frozen BatchNorm
        elif k in IGNORED_SETTINGS or k not in wanted:
            continue
        elif k == "root" and _same_folder(stored.get(k), wanted.get(k)):  # one folder (runs before this one
            continue  # recorded --root as typed, relative; now absolute)
        elif k == "loss_params":  # what each trained with: a default given explicitly is no other setting
            a = _norm(trained_loss_params(stored.get("loss"), stored.get(k)))
            b = _norm(trained_loss_params(wanted.get("loss"), wanted.get(k)))
            if stored.get("loss") == wanted.get("loss"):  # (else the loss differs, named on its own)
                out += [f"loss_params {p}: {quoted(a.get(p))} -> {quoted(b.get(p))}"
                        for p in sorted(set(a) | set(b)) if a.get(p) != b.get(p)]
            continue
        else:
            a, b = _norm(stored.get(k)), _norm(wanted.get(k))
        if a != b:
            out.append(f"{k}: {quoted(a)} -> {quoted(b)}")
    return out


class _Inputs:
    """Whether a stored run was trained on the data and ``--weights`` file as they are now: its
    recorded :func:`~embedscope.data.base.data_fingerprint` (``extra["data"]``) and weights' sha256
    against the current ones, each computed once. Runs saved before embedscope recorded them are not
    checked; nor is a run whose data set cannot be listed now (it stays as trained, with one line)."""

    def __init__(self) -> None:
        self.data: dict[tuple, str | None] = {}
        self.weights: dict[str, str | None] = {}
        self.unlisted: dict[tuple, list] = {}

    def _data_now(self, cfg: dict[str, Any]) -> str | None:
        key = (cfg["dataset"], cfg.get("root"), cfg.get("train_classes"))
        if key not in self.data:
            from embedscope.data import get_dataset
            from embedscope.data.base import data_fingerprint

            try:
                self.data[key] = data_fingerprint(get_dataset(key[0], key[1], train_classes=key[2]))
            except EmbedscopeError as e:
                self.data[key] = None
                self.unlisted[key] = [0, str(e)]  # one line: raw names, escaped where said
        if self.data[key] is None:
            self.unlisted[key][0] += 1
        return self.data[key]

    def _weights_now(self, path: str) -> str | None:
        if path not in self.weights:
            from embedscope.fileio import sha256_file

            try:
                self.weights[path] = sha256_file(path)
            except OSError:
                self.weights[path] = None  # the run that needs the file reports it
        return self.weights[path]

    def diff(self, extra: dict[str, Any], cfg: dict[str, Any]) -> list[str]:
        """What changed since the run was trained (as :func:`settings_diff` names settings)."""
        from embedscope.train.trainer import data_changed_message

        out = []
        if extra.get("data"):
            now = self._data_now(cfg)
            if now is not None and now != extra["data"]:
                out.append(f"data: {data_changed_message(cfg, 'was trained')}")
        if extra.get("weights_sha256") and cfg.get("weights"):
            now = self._weights_now(cfg["weights"])
            if now is not None and now != extra["weights_sha256"]:
                out.append(f"weights: the content of {cfg['weights']} changed since the run was trained")
        return out

    def report(self, say: Callable[[str], None]) -> None:

        for (name, _root, _tc), (n, msg) in self.unlisted.items():
            if n:
                say(f"note: the data set {name} cannot be listed now ({msg}): its {n} stored run(s) "
                    "are taken as trained, unchecked")


def _refuse_duplicates(losses: Sequence[str], p_switches: Sequence[float], seeds: Sequence[int]) -> None:
    """A value given twice in --losses, --p-switch or --seeds (or two values that name the same run,
    like p 0.1 and 0.10) would train a run twice: a usage error before any training."""
    for opt, values, name in (("--losses", losses, str), ("--p-switch", p_switches, lambda p: f"{float(p):g}"),
                              ("--seeds", seeds, lambda s: str(int(s)))):
        seen: dict[str, Any] = {}
        for v in values:
            key = name(v)
            if key in seen:
                same = f"{v} twice" if str(seen[key]) == str(v) else f"{seen[key]} and {v}, which name the same run"
                raise UsageError(f"{opt} lists {same}: give each value once")
            seen[key] = v


def read_grid_csv(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of an existing ``grid.csv`` (strings as stored); [] when the file does not exist."""
    path = Path(path)
    if not path.exists():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def grid_table_problem(path: str | os.PathLike) -> str | None:
    """Why the existing file ``path`` (a ``grid.csv``) is no train-grid table, in words; None when it
    is one (or does not exist): a header with the columns of :data:`TABLE_COLUMNS`, and rows that
    read as CSV text."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            for _ in reader:  # every row reads
                pass
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        return f"cannot be read as CSV ({type(e).__name__})"
    if not header:
        return "empty"
    missing = [c for c in TABLE_COLUMNS if c not in header]
    if missing:
        return f"its header lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
    return None


def check_grid_table(out_dir: str | os.PathLike, *, force: bool = False) -> bool:
    """Before any training: ``out_dir/grid.csv``, when it exists, must be a train-grid table (its
    rows are merged with this call's). Another file is refused (:class:`EmbedscopeError`) unless
    ``force``; returns True when such a file is to be replaced (its rows not merged)."""

    table = Path(out_dir) / "grid.csv"
    problem = grid_table_problem(table)
    if problem is None:
        return False
    if not force:
        raise EmbedscopeError(f"{table} exists and is not a train-grid table ({problem}): move it or use --force")
    return True


def train_grid(dataset: str, losses: Sequence[str], p_switches: Sequence[float], seeds: Sequence[int],
               out_dir: str | os.PathLike, *, options: dict[str, Any] | None = None, force: bool = False,
               keep_epochs: bool = False, progress: bool = True, workers: int = 1,
               echo: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Train every combination of ``losses`` × ``p_switches`` × ``seeds`` (docs/methods.md §5, §6).

    ``options`` are further trainer options (epochs, sampler, miner, batch_size, …) shared by all
    runs. Finished runs with the same settings are skipped; a stored run with other settings is
    refused (:class:`EmbedscopeError` naming the differences) unless ``force`` (then retrained).
    ``keep_epochs`` keeps every epoch's checkpoint (``epoch-NNN.pt``, for ``study --epoch all``).
    Merges this call's rows into ``<out_dir>/grid.csv`` and returns this call's rows; the rows of
    the runs that finished are merged also when another run fails or the grid is stopped. An existing
    ``grid.csv`` that is no train-grid table (:func:`grid_table_problem`) is refused before any
    training unless ``force`` (then it is replaced, its rows not merged).

    ``workers`` > 1 trains that many runs at a time, each in a process of its own with
    (CPUs / workers) compute threads: on a CPU, small models train faster in parallel processes than
    with all cores on one run (docs/studies.md). Each run's numbers are those of a serial run with the
    same thread count. On one GPU keep 1.
    """
    from embedscope.fileio import check_writable
    from embedscope.tables import write_csv
    from embedscope.text import safe
    from embedscope.train.losses import loss_spec
    from embedscope.train.trainer import TrainingDiverged, resolve_config, run_paths, train

    say = echo or (lambda s: print(safe(s), flush=True))  # lines name files: escaped where shown, once
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(f"workers must be a positive integer, got {quoted(workers)}")
    _refuse_duplicates(losses, p_switches, seeds)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise EmbedscopeError(f"{out_dir} is a file, expected an output folder")
    options = dict(options or {})
    for k in ("loss", "p_switch", "seed", "dataset"):
        options.pop(k, None)
    for p in p_switches:  # also those only tuple-less losses meet (their runs are n/a, their names still used)
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= float(p) <= 1.0:
            raise UsageError(f"--p-switch must lie in [0, 1], got {quoted(p)}")
    combos = [(lo, float(p), int(s)) for lo in losses for p in p_switches for s in seeds]
    wanted: dict[tuple, dict[str, Any]] = {}
    for lo, p, s in combos:  # validate every combination before training any
        loss_spec(lo)
        if p == 0 or loss_spec(lo).tuple_loss:
            wanted[(lo, p, s)] = resolve_config({**options, "dataset": dataset, "loss": lo, "p_switch": p, "seed": s})
    if combos and not wanted:  # every combination n/a: the call would train nothing and succeed
        from embedscope.train.losses import LOSSES

        tuple_losses = [name for name in LOSSES if loss_spec(name).tuple_loss]
        raise UsageError(f"--p-switch {' '.join(f'{p:g}' for p in p_switches)} applies to tuple losses only, and "
                         f"--losses {' '.join(losses)} take no mined tuples: no run would train (add 0 to --p-switch, "
                         f"or a tuple loss: {', '.join(tuple_losses)})")
    device = options.get("device")
    if device not in (None, "auto", "cpu"):  # a missing GPU is one line before the output folder is made
        from embedscope.device import resolve_device

        resolve_device(device)
    # compare the settings of stored runs before training any, and what they were trained on
    stored: dict[tuple, tuple[str, dict | None]] = {}
    inputs = _Inputs()
    conflicts = []
    extend_only = True  # every conflict is a run of fewer --epochs, else the same settings: it can be extended
    for key, cfg in wanted.items():
        ckpt = out_dir / f"{run_name(dataset, *key)}.pt"
        done = _finished(ckpt) if ckpt.exists() else None
        last = run_paths(ckpt)["last"]
        # the finished run, then the state a resume continues (last.pt): a finished run extended with
        # `train --resume --epochs N` and stopped before epoch N keeps its final checkpoint of the earlier
        # epochs while last.pt holds the extension, whose settings (epochs N) a grid of N asks for
        candidates = ([(done, "finished")] if done is not None else []) + (
            [(_read(last), "unfinished")] if last.exists() else [])
        candidates = [(state, kind) for state, kind in candidates if state is not None]
        if not candidates:
            continue
        differs = []
        for state, kind in candidates:
            diff = settings_diff(state.get("config") or {}, cfg) or inputs.diff(state.get("extra") or {}, cfg)
            if not diff:
                stored[key] = (kind, done)
                break
            differs.append((f"{ckpt.name} ({kind}): {', '.join(diff)}",
                            _more_epochs_only(state.get("config") or {}, cfg, diff)))
        else:  # the finished run's differences are named (else the unfinished one's)
            conflicts.append(differs[0][0])
            extend_only = extend_only and differs[0][1]
            stored[key] = ("other", None)
    inputs.report(say)
    if conflicts and not force:
        legacy = any("freeze_bn_affine: True -> False" in c for c in conflicts)
        raise EmbedscopeError(
            f"{len(conflicts)} run(s) in {out_dir} were trained with other settings or data — {'; '.join(conflicts[:3])}"
            f"{' ...' if len(conflicts) > 3 else ''} — use --force to retrain them, or another output folder"
            + ("; runs saved before embedscope trained a frozen BatchNorm's scale and shift kept them fixed: "
               "--freeze-bn-affine continues them" if legacy else "")
            + (f"; to extend them to --epochs {wanted_epochs(wanted)} instead, continue each with 'embedscope train -o "
               f"CKPT --resume --epochs {wanted_epochs(wanted)}' (this grid then skips them as finished, or resumes one "
               "stopped on the way)" if extend_only and wanted_epochs(wanted) is not None else ""))
    # before any training: a grid.csv that train-grid did not write (kept unless force), a file as a
    # parent of the folder, or a folder that cannot be written
    foreign = check_grid_table(out_dir, force=force)
    check_writable(out_dir / "grid.csv", force=True)
    if foreign:
        say(f"note: {out_dir / 'grid.csv'} is not a train-grid table: --force replaces it (its rows are not kept)")
    from embedscope.fileio import make_folders, remove_empty_folders

    created = make_folders(out_dir, out_dir)  # removed again if this call leaves them empty (a first run that fails)
    rows: list[dict[str, Any] | None] = []
    jobs: list[_Job] = []
    # the lines of the runs this call does not train (n/a, finished already), said in the order of the
    # combinations between the runs it trains, so that [i/N] lines come in order (also in a log file)
    untrained: dict[int, str] = {}

    def say_untrained(before: int | None = None) -> None:
        for at in sorted(a for a in untrained if before is None or a < before):
            say(untrained.pop(at))

    for i, (lo, p, s) in enumerate(combos, 1):
        name = run_name(dataset, lo, p, s)
        ckpt = out_dir / f"{name}.pt"
        row: dict[str, Any] = {"name": name, "loss": lo, "loss_family": loss_spec(lo).family, "p_switch": p,
                               "seed": s, "checkpoint": str(ckpt)}
        if (lo, p, s) not in wanted:
            untrained[len(rows)] = (f"[{i}/{len(combos)}] {name}: skipped (the {lo} loss takes no mined tuples, "
                                    "p_switch n/a)")
            rows.append({**row, "status": "n/a", "checkpoint": ""})  # no run, no checkpoint to name
            continue
        cfg = wanted[(lo, p, s)]
        row.update(embed_dim=cfg["embed_dim"], normalize=cfg["normalize"], train_classes=cfg.get("train_classes"),
                   image_size=cfg.get("image_size"), freeze_bn_affine=cfg["freeze_bn_affine"])
        kind, done = stored.get((lo, p, s), ("", None))
        if kind == "finished" and not force:
            unkept = keep_epochs and not (run_paths(ckpt)["dir"] / "epoch-000.pt").is_file()
            untrained[len(rows)] = (
                f"[{i}/{len(combos)}] {name}: finished already, skipped (same settings)"
                + ("; it was trained without --keep-epochs and has no epoch-NNN.pt (--force retrains it with them)"
                   if unkept else ""))
            rows.append({**row, "status": "skipped", **_summary(done["extra"], ckpt)})
            continue
        retrain = force or kind == "other"
        resume = (not retrain) and kind == "unfinished"
        verb = "resuming" if resume else ("retraining (other settings, --force)" if kind == "other" else "training")
        opts = {**options, "dataset": dataset, "loss": lo, "p_switch": p, "seed": s}
        jobs.append(_Job(len(rows), f"[{i}/{len(combos)}] {name}: {verb}", opts, ckpt, resume,
                         retrain or ckpt.exists(),
                         "retrained" if kind == "other" else ("resumed" if resume else "trained")))
        rows.append(row)
    finished: dict[int, dict[str, Any]] = {}
    diverged: dict[int, TrainingDiverged] = {}  # runs that diverged: recorded, the grid goes on
    parallel = workers > 1 and len(jobs) > 1
    if parallel:
        from embedscope.device import compute_device

        if compute_device(options.get("device", "auto")).type == "cuda":
            say(f"note: {min(workers, len(jobs))} runs at a time share the GPU (each process holds a CUDA "
                "context and its own memory); on one GPU --workers 1 is usually faster")
    try:
        if parallel:
            say_untrained()
            _train_parallel(jobs, finished, workers, keep_epochs, say, progress, diverged)
        else:
            for j in jobs:
                say_untrained(j.at)
                say(j.head)
                try:
                    finished[j.at] = train(j.opts, j.ckpt, resume=j.resume, force=j.force, progress=progress,
                                           echo=say, keep_epochs=keep_epochs)
                except TrainingDiverged as e:
                    diverged[j.at] = e
                    say(f"{j.ckpt.stem}: {e} -- recorded as diverged, the grid goes on")
    finally:  # the rows of every finished run are merged, also when a run failed or the grid was stopped
        say_untrained()
        from embedscope.train.trainer import _best

        for j in jobs:
            res = finished.get(j.at)
            if j.at in diverged:
                e = diverged[j.at]
                rows[j.at] = {**rows[j.at], "status": "diverged", "checkpoint": "",
                              **_summary({"history": e.history, "metrics": {"best": _best(e.history)}}, j.ckpt,
                                         finished=False),
                              "failure": str(e)}
                continue
            rows[j.at] = None if res is None else {
                **rows[j.at], "status": j.status,
                **_summary({"history": res["history"], "metrics": {"best": res["best"]}}, j.ckpt)}
        mine = {r["name"] for r in rows if r is not None}
        from embedscope.fileio import update_lock

        # read, merged and written in turn with another train-grid into the folder (other combinations, at
        # the same moment: each read the table without the other's rows, and the later write dropped them)
        with update_lock(out_dir / "grid.csv"):
            merged = {} if foreign else {r["name"]: r for r in _earlier_rows(out_dir, mine, say)}
            for r in rows:
                if r is not None:
                    merged[r["name"]] = r
            _say_mixed_splits(list(merged.values()), say)
            if merged:
                write_csv(out_dir / "grid.csv", list(merged.values()), SUMMARY_COLUMNS, force=True)
        _remove_empty_run_folders(out_dir / f"{run_name(dataset, *key)}.pt" for key in wanted)
        remove_empty_folders(created)
    return [r for r in rows if r is not None]


def _say_mixed_splits(rows: list[dict[str, Any]], say: Callable[[str], None]) -> None:
    """One line when the rows of grid.csv (this call's and the earlier ones merged with them) were
    trained with other ``--train-classes`` or ``--image-size``: their test R@1 are taken on other test
    splits or inputs, so the columns of grid.csv do not compare across them (``study`` keeps them
    apart as other objectives). Rows of a grid.csv written before these columns are not compared."""
    for col, opt in (("train_classes", "--train-classes"), ("image_size", "--image-size")):
        vals = {("" if r.get(col) in (None, "") else str(_norm(_number(r.get(col)))))
                for r in rows if col in r and r.get("status") != "n/a"}
        if len(vals) > 1:
            shown = ", ".join(sorted(v or "none (the data set's own split)" for v in vals))
            say(f"grid.csv: its runs were trained with other {opt} ({shown}): their test R@1 are on other "
                f"{'test splits' if col == 'train_classes' else 'inputs'} and do not compare (see the "
                f"column {col}; a study keeps them apart)")


def _number(v: Any) -> Any:
    """A cell of grid.csv read back as text ('6', '6.0') as the number it holds; anything else as is."""
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def _earlier_rows(out_dir: Path, replaced: set[str], say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The rows of ``out_dir/grid.csv`` that this call does not replace, as the folder is now: a row
    whose checkpoint is gone is dropped, and one whose checkpoint changed after the table was written
    (retrained outside the grid, say ``train --force``) is summarised again from it (dropped when it
    is no finished run any more); one line names what was dropped or refreshed."""
    from embedscope.models.backbones import bn_affine_frozen

    table = out_dir / "grid.csv"
    rows = [r for r in read_grid_csv(table) if r.get("name") not in replaced]
    if not rows:
        return rows
    written = table.stat().st_mtime_ns
    out, gone, again = [], [], []
    for r in rows:
        if not r.get("name"):  # a row cut short (edited by hand): no run to name
            gone.append("(a row without a name)")
            continue
        ckpt = out_dir / f"{r['name']}.pt"
        if r.get("status") == "n/a":  # no checkpoint: a p_switch that the loss does not take (a table written
            out.append({**r, "checkpoint": "", "best_checkpoint": ""})  # before named one that never exists)
            continue
        if r.get("status") == "diverged" and not ckpt.exists():  # no checkpoint: the run diverged
            out.append(r)
            continue
        try:
            changed = ckpt.stat().st_mtime_ns > written
        except OSError:
            gone.append(r["name"])
            continue
        if changed:
            done = _finished(ckpt)
            if done is None:
                gone.append(r["name"])
                continue
            cfg = done.get("config") or {}
            # the settings of the run as trained now (retrained outside the grid: another loss, p_switch, seed
            # kept the old row's, beside the new run's numbers)
            for k in ("loss", "p_switch", "seed"):
                if cfg.get(k) is not None:
                    r = {**r, k: cfg[k]}
            if cfg.get("loss") is not None:
                from embedscope.train.losses import loss_spec

                with contextlib.suppress(Exception):  # (a loss this version does not know keeps its family)
                    r["loss_family"] = loss_spec(cfg["loss"]).family
            r = {**r, "embed_dim": cfg.get("embed_dim"), "normalize": cfg.get("normalize"),
                 "train_classes": cfg.get("train_classes"), "image_size": cfg.get("image_size"),
                 "freeze_bn_affine": bn_affine_frozen(cfg), **_summary(done.get("extra") or {}, ckpt)}
            if r.get("status") == "diverged":  # trained to the end since (outside the grid)
                r.update(status="trained", failure="", checkpoint=str(ckpt))
            again.append(r["name"])
        elif not {"train_classes", "image_size", "freeze_bn_affine"} <= set(r):  # a grid.csv written before the columns
            cfg = (_read(ckpt) or {}).get("config") or {}
            if cfg:
                r = {**r, "train_classes": cfg.get("train_classes"), "image_size": cfg.get("image_size"),
                     "freeze_bn_affine": bn_affine_frozen(cfg)}
        out.append(r)
    if gone:
        say(f"grid.csv: dropped {len(gone)} earlier row(s) whose checkpoint is gone or no finished run "
            f"({', '.join(gone[:3])}{' ...' if len(gone) > 3 else ''})")
    if again:
        say(f"grid.csv: {len(again)} earlier row(s) summarised again from their checkpoint, changed since the "
            f"table was written ({', '.join(again[:3])}{' ...' if len(again) > 3 else ''})")
    return out


def _remove_empty_run_folders(checkpoints) -> None:
    """Remove the working folder (``<name>.pt.train``) of these runs where it is empty: a run stopped
    before its first epoch was saved (a training process ended by SIGTERM or killed) left it behind.
    A folder that holds anything (``last.pt``: the state a run resumes from) stays."""
    from embedscope.train.trainer import run_paths

    for ckpt in checkpoints:
        d = run_paths(ckpt)["dir"]
        try:
            d.rmdir()  # only when empty
        except OSError:
            pass


def _train_process(job: _Job, keep_epochs: bool, threads: int, out) -> None:
    """One run of a parallel grid, in a spawned process of its own (see :func:`_train_parallel`):
    ``threads`` compute threads for everything it runs (torch, BLAS, faiss, embedscope's searches);
    its messages, then its result or its error, go to the queue ``out``."""
    import signal

    from embedscope.errors import Terminated, stop_signals

    def stop(signum, frame):  # the parent ends this run: train() takes back what it had begun (temporary
        raise Terminated(signum)  # files, its empty folder); it resumes from its last saved epoch

    # Ctrl-C reaches the whole process group: the parent handles it (this process started with it
    # ignored, see _children_ignore_ctrl_c) and ends the runs with SIGTERM
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, stop)
    if hasattr(signal, "pthread_sigmask"):  # held while the parent started this process
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals())
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)  # before torch and numpy's BLAS start their thread pools
    import multiprocessing

    # a spawned process inherits the parent's 'spawn' as its default start method; the run's data loader
    # workers (--num-workers) start as in a serial run, with the platform's default (fork on Linux), which
    # does not pickle the data set and its transforms (the digits' transform is a local function)
    multiprocessing.set_start_method(None, force=True)
    name = job.ckpt.stem
    try:
        out.put(("line", job.head))
        import torch
        from threadpoolctl import threadpool_limits

        from embedscope.metrics.search import search_threads
        from embedscope.train.trainer import train

        torch.set_num_threads(threads)
        with threadpool_limits(limits=threads), search_threads(threads):
            res = train(job.opts, job.ckpt, resume=job.resume, force=job.force, progress=False,
                        keep_epochs=keep_epochs, echo=lambda s: out.put(("line", f"{name}: {s}")))
    except Terminated as e:  # ended by the parent, which reads no more: no waiting for the queue at exit
        out.cancel_join_thread()
        raise SystemExit(128 + e.signum) from None
    except BaseException as e:  # noqa: BLE001 - handed to the parent, which raises it
        import pickle

        try:
            pickle.dumps(e)
        except Exception:  # noqa: BLE001 - an exception that cannot travel: its text does
            e = EmbedscopeError(f"{name}: {type(e).__name__}: {e}")
        out.put(("error", job.at, e))
        return
    out.put(("done", job.at, {"history": res["history"], "best": res["best"]}))


#: seconds a parallel run has to stop after SIGTERM before it is killed
STOP_SECONDS = 30.0


@contextlib.contextmanager
def _children_ignore_ctrl_c():
    """Processes started inside begin with Ctrl-C ignored: an ignored signal stays ignored across the
    exec of a spawned process, so a Ctrl-C while one imports (before :func:`_train_process` runs) is
    no traceback of its own. Meanwhile SIGINT, SIGTERM and SIGHUP are held (blocked, not lost): the
    caller's handlers act on them at the end, once the process is registered. The child unblocks the
    ones it handles itself."""
    import signal
    import threading

    from embedscope.errors import stop_signals_held

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    with stop_signals_held():
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            yield
        finally:
            if old is not None:
                signal.signal(signal.SIGINT, old)


def _train_parallel(todo: list[_Job], finished: dict[int, dict[str, Any]], workers: int, keep_epochs: bool,
                    say: Callable[[str], None], progress: bool = True,
                    diverged: dict[int, BaseException] | None = None) -> None:
    """Train ``todo`` in spawned processes, at most ``workers`` at a time, each run in a process of
    its own with (CPUs / workers) compute threads. The runs' messages reach ``say`` prefixed with
    their names. After a run fails (or its process dies: killed, out of memory) no further run
    starts; the running ones finish, then the first error is raised. Stopped (Ctrl-C, SIGTERM): the
    processes are terminated (each run keeps its last finished epoch, ``last.pt``, and resumes from
    it). Spawned processes import the caller's main module: a script that calls this needs Python's
    ``if __name__ == "__main__":`` guard (the CLI and notebooks have it). A run that diverges
    (:class:`~embedscope.train.trainer.TrainingDiverged`) goes to ``diverged`` and the others go on."""
    import multiprocessing as mp
    import queue

    from embedscope.device import available_cpus
    from embedscope.progress import check_signals, progress_bar
    from embedscope.train.trainer import TrainingDiverged

    n = min(workers, len(todo))
    threads = max(1, available_cpus() // n)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    cpus = available_cpus()
    over = (f"; {n} runs at a time on {cpus} CPU{'s' if cpus > 1 else ''} share them, each slower "
            f"(--workers {cpus} is usually faster)") if n > cpus else ""
    say(f"training {len(todo)} runs in {n} worker processes ({threads} thread{'s' if threads > 1 else ''} each{over})")
    waiting = list(todo)
    procs: dict[int, Any] = {}
    names = {j.at: j.ckpt.stem for j in todo}
    failed: dict[int, BaseException] = {}  # in the order the failures arrived: the first is raised
    # on a terminal a bar over the runs (the messages are the lines per phase elsewhere)
    bar = progress_bar(total=len(todo), desc="train-grid", unit="run", enabled=progress, lines=False)

    def handle(msg) -> None:
        if msg[0] == "line":
            say(msg[1])
            return
        if msg[0] == "done":
            finished[msg[1]] = msg[2]
        elif diverged is not None and isinstance(msg[2], TrainingDiverged):
            diverged[msg[1]] = msg[2]
            say(f"{names[msg[1]]}: {msg[2]} -- recorded as diverged, the grid goes on")
        else:
            failed[msg[1]] = msg[2]
        bar.update(1)

    def drain(timeout: float = 0.0) -> None:
        try:
            handle(out.get(timeout=timeout) if timeout else out.get_nowait())
            while True:
                handle(out.get_nowait())
        except queue.Empty:
            pass

    try:
        while procs or (waiting and not failed):  # after a failure: no further run starts
            while waiting and len(procs) < n and not failed:
                j = waiting.pop(0)
                p = ctx.Process(target=_train_process, name=f"train-grid {names[j.at]}",
                                args=(j, keep_epochs, threads, out))
                with _children_ignore_ctrl_c():  # and a signal meanwhile waits until p is in procs
                    p.start()
                    procs[j.at] = p
            drain(0.2)
            check_signals()
            for at, p in list(procs.items()):
                if p.exitcode is None:
                    continue
                p.join()
                drain()  # what it sent before it ended is in the queue by now
                del procs[at]
                if at not in finished and at not in failed and at not in (diverged or {}):
                    how = (f"killed by signal {-p.exitcode}" if p.exitcode < 0 else f"exit code {p.exitcode}")
                    failed[at] = EmbedscopeError(f"{names[at]}: its training process ended without a result "
                                                 f"({how}; out of memory?)")
                    bar.update(1)
        drain()
    except BaseException:
        for p in procs.values():
            p.terminate()  # SIGTERM: the run stops, cleans up and keeps its last saved epoch
        for p in procs.values():
            p.join(STOP_SECONDS)
            if p.exitcode is None:  # stuck in a long computation
                p.kill()
                p.join()
        raise
    finally:
        bar.close()
    if failed:
        raise next(iter(failed.values()))


def _summary(extra: dict[str, Any], ckpt: Path, *, finished: bool = True) -> dict[str, Any]:
    """A grid row's numbers from a run's history. ``finished``: the run has its final checkpoint (not a
    diverged one): with ``--epochs 0`` that is the untrained network, whose evaluation is then the final one."""
    from embedscope.train.trainer import run_paths

    history = extra.get("history", [])
    hist = [r for r in history if int(r["epoch"]) > 0]
    zero = [r for r in history if int(r["epoch"]) == 0]
    best = (extra.get("metrics") or {}).get("best")
    evals = [r for r in hist if r.get("R@1") is not None]
    last = evals[-1] if evals else (zero[0] if finished and zero and not hist else {})
    best_ckpt = run_paths(ckpt)["best"]
    return {"epochs": hist[-1]["epoch"] if hist else 0,
            "best_epoch": best["epoch"] if best else None,
            "best_R@1": best["R@1"] if best else None,
            "best_MAP@R": best.get("MAP@R") if best else None,
            "rho_at_best": best["rho"] if best else None,
            "final_R@1": last.get("R@1"), "final_MAP@R": last.get("MAP@R"), "final_rho": last.get("rho"),
            "untrained_R@1": zero[0].get("R@1") if zero else None,
            "best_checkpoint": str(best_ckpt) if best_ckpt.exists() else ""}
