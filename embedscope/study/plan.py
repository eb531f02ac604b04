"""Which checkpoints a study measures: from a train-grid folder, a glob, or a YAML list (docs/methods.md §6).

A study point is a :class:`Entry`: one checkpoint file, the run it belongs to, which epoch of the run
it is (``selection``: ``best`` = the epoch of best test R@1, Roth's protocol, which *selects on the
test set*; ``final``; ``epoch`` for ``--epoch all``; ``given`` for a file named directly;
``untrained`` for the reference network), its configuration columns and user tags.

Every study also holds the **untrained network** of each distinct (architecture, D, normalisation,
seed, data set, backbone weights, training folder) as a reference row: the trainer's ``epoch-000.pt`` when the run
kept it, else the network built here exactly as :func:`embedscope.train.trainer.train` initialises
it (``torch.manual_seed(seed)`` then :func:`embedscope.models.build_model`, backbone weights loaded
when the config names them), saved once under ``<cache>/untrained/`` and reused by every study.
"""

from __future__ import annotations

import glob as _glob
import hashlib
import json
import math
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from embedscope.errors import EmbedscopeError, UsageError
from embedscope.text import quoted

# configuration columns of every study row (from the checkpoint's stored config)
CONFIG_COLUMNS = ["dataset", "arch", "loss", "loss_family", "miner", "sampler", "p_switch", "embed_dim", "normalize",
                  "batch_size", "lr", "epochs", "seed",
                  # the rest of what a run was trained with: runs that differ in one of these are other
                  # objectives (another test split, input size, loss parameter ...), never seeds of one
                  "train_classes", "image_size", "distance", "loss_params", "weight_decay", "optimizer",
                  "lr_schedule", "weights", "frozen_bn", "freeze_bn_affine",
                  # the data set folder the run was trained on (train --root, absolute): two shapes sets in
                  # other folders (other seeds or sizes) are other objectives
                  "root"]
EPOCH_MODES = ("best", "last", "all")
_UNTRAINED_KEYS = ("dataset", "arch", "embed_dim", "normalize", "seed", "weights", "frozen_bn", "image_size",
                   "train_classes")


@dataclass
class Entry:
    """One point of a study (one checkpoint file)."""

    id: str
    checkpoint: str
    run: str
    selection: str
    epoch: int | None = None
    config: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)
    untrained: str = ""  # id of the untrained reference entry of this run
    error: str = ""  # a checkpoint that cannot be read at planning time

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def config_columns(config: dict[str, Any]) -> dict[str, Any]:
    """The :data:`CONFIG_COLUMNS` of a checkpoint's config as a study row holds them: a value the
    config lacks is None; a mapping (``loss_params``) is its JSON text with sorted keys, so that it
    is one cell of runs.csv / runs.parquet and compares equal between runs with the same parameters.
    ``root`` (the folder the run was trained on, recorded by ``train --root``) is made absolute
    against the working folder, as the study reads it (:func:`root_of`); ``freeze_bn_affine`` is what the
    run trained with (:func:`~embedscope.names.bn_affine_frozen`, torch-free)."""
    from embedscope.names import bn_affine_frozen

    out: dict[str, Any] = {}
    for c in CONFIG_COLUMNS:
        v = config.get(c)
        if isinstance(v, (dict, list, tuple)):
            v = json.dumps(v, sort_keys=True, default=str)
        out[c] = v
    out["freeze_bn_affine"] = bn_affine_frozen(config)  # as trained: a config saved before the key kept them fixed
    out["root"] = root_of(config)
    return out


def root_of(config: dict[str, Any]) -> str | None:
    """The data set folder a checkpoint's config records (``train --root``), absolute (a relative one
    against this process's working folder, as the study reads it); None when it records none."""
    r = config.get("root")
    if not isinstance(r, str) or not r:
        return None
    return r if r.startswith("~") else os.path.abspath(r)


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", s).strip("_") or "x"


def _read_config(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    from embedscope.models import read_checkpoint

    obj = read_checkpoint(path)
    if not isinstance(obj, dict):
        raise EmbedscopeError(f"{path}: not an embedscope checkpoint (a {type(obj).__name__})")
    if "state_dict" not in obj:
        raise EmbedscopeError(f"{path}: no 'state_dict' in the checkpoint")
    return dict(obj.get("config") or {}), dict(obj.get("extra") or {})


#: a study folder's record of the checkpoint configs it read (:func:`plan_study`'s ``known``)
CONFIGS_FILE = "checkpoint_configs.json"


def file_fingerprint(path: str | os.PathLike) -> list[int] | None:
    """``[size, mtime_ns, ctime_ns, inode, device]`` of a file (None when it cannot be stat'ed): a file
    replaced (a new inode), rewritten (its times) or copied over keeps none of them all."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [int(st.st_size), int(st.st_mtime_ns), int(st.st_ctime_ns), int(st.st_ino), int(st.st_dev)]


def _exact_json(v: Any) -> bool:
    """Whether ``v`` reads back from JSON as it is, of the same types (no tuple made a list, no key made a
    string, no NaN; no OrderedDict, numpy float or other subclass made a plain dict, float ...: equal, but
    an untrained network built from it was pickled with other bytes, another sha256)."""
    if v is None or type(v) in (str, bool, int):
        return True
    if type(v) is float:
        return math.isfinite(v)
    if type(v) is list:
        return all(_exact_json(x) for x in v)
    if type(v) is dict:
        return all(type(k) is str and _exact_json(x) for k, x in v.items())
    return False


def _slim_extra(extra: dict[str, Any]) -> dict[str, Any] | None:
    """What a plan reads of a checkpoint's ``extra`` (:func:`_epoch_of`, ``weights_sha256``), in a form
    that gives the same answers; None when it cannot be kept so."""
    out = {k: extra[k] for k in ("epoch", "weights_sha256") if k in extra}
    metrics = extra.get("metrics")
    if metrics:
        if not isinstance(metrics, dict):
            return None
        best = metrics.get("best")
        if best:
            if not isinstance(best, dict):
                return None
            out["metrics"] = {"best": {"epoch": best.get("epoch")}}
    return out


def _copy(v: Any) -> Any:
    return json.loads(json.dumps(v))


def _usable_record(hit: dict[str, Any]) -> bool:
    """Whether a record of :data:`CONFIGS_FILE` holds a config and an ``extra`` in the form
    :func:`_read_config_known` keeps them (:func:`_slim_extra`, epochs that :func:`_epoch_of` reads): a
    record edited by hand (an epoch ``"x"``, a ``best`` that is no mapping) is not used, the file is read
    again (it stopped the study: "ValueError: invalid literal for int()", until the record was removed)."""
    config, extra = hit.get("config"), hit.get("extra")
    if not isinstance(config, dict) or not isinstance(extra, dict):
        return False
    try:
        if _slim_extra(extra) != extra:
            return False
        for selection in ("best", "final"):
            _epoch_of(extra, selection)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return False
    return True


#: a checkpoint whose change time (ctime) is less than this before it was read is not recorded: a write
#: in place in the same tick of the file system's clock (1-2 s on some: FAT, HFS+, ext4 of small
#: inodes, some network ones; a few ms on others) after the read leaves all of its fingerprint as it
#: was (size, times, inode): recorded, the config read before that write stood for the file ever after
#: (a script saving its epoch's checkpoint in place as the study planned: the epoch before). Read
#: again by the next run, and recorded then.
RACY_NS = 2_000_000_000


def _now_ns() -> int:
    return time.time_ns()


def _read_config_known(path: Path, known: dict[str, Any] | None,
                       hits: set[str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`_read_config`, from ``known`` when it holds the file with the same :func:`file_fingerprint`
    (reading a checkpoint imports torch: ~2 s of a study run again with nothing to measure); a file
    read is recorded there (when its config reads back from JSON as it is, it did not change while read,
    and it last changed :data:`RACY_NS` or more before: see there). ``known``: None reads every file.
    ``hits``: takes the path of a file whose config came from ``known``."""
    if known is None:
        return _read_config(path)
    key = os.path.abspath(path)
    start = _now_ns()
    before = file_fingerprint(path)
    hit = known.get(key)
    if before is not None and isinstance(hit, dict) and hit.get("stat") == before and _usable_record(hit):
        if hits is not None:
            hits.add(str(path))
        return _copy(hit["config"]), _copy(hit["extra"])
    known.pop(key, None)
    cfg, extra = _read_config(path)
    slim = _slim_extra(extra)
    if (before is not None and slim is not None and file_fingerprint(path) == before and _exact_json(cfg)
            and _exact_json(slim) and start - before[2] >= RACY_NS):
        known[key] = {"stat": before, "config": _copy(cfg), "extra": slim}
    return cfg, extra


#: the form of :data:`CONFIGS_FILE`: 2, each config in its checkpoint's key order (1, of one earlier
#: version, sorted its keys: an untrained network built from such a config was saved with other bytes,
#: another sha256 than the same network built from the checkpoint; it is read as no record)
CONFIGS_VERSION = 2


def read_known(path: str | os.PathLike) -> dict[str, Any]:
    """A study folder's :data:`CONFIGS_FILE` (empty when missing, unreadable, not one or of another
    :data:`CONFIGS_VERSION`)."""
    try:
        v = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    ok = isinstance(v, dict) and v.get("v") == CONFIGS_VERSION and isinstance(v.get("files"), dict)
    return v["files"] if ok else {}


def newer_known(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a :data:`CONFIGS_FILE` of a later :data:`CONFIGS_VERSION` (a newer embedscope's):
    read as no record (:func:`read_known`), and left as it is, never written over with this version's
    records (the newer embedscope would read every checkpoint again). One of an earlier version, or not
    one at all, is replaced."""
    try:
        v = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    version = v.get("v") if isinstance(v, dict) else None
    return type(version) is int and version > CONFIGS_VERSION


def known_text(known: dict[str, Any]) -> str:
    """The text of :data:`CONFIGS_FILE` holding ``known``: every config in the key order its checkpoint
    has (never sorted: a config read from here builds an untrained network of the same bytes as one
    read from the checkpoint, and lists its keys the same)."""
    return json.dumps({"v": CONFIGS_VERSION, "files": known}) + "\n"


def _epoch_of(extra: dict[str, Any], selection: str) -> int | None:
    if selection == "best":
        best = (extra.get("metrics") or {}).get("best")
        if best and best.get("epoch") is not None:
            return int(best["epoch"])
    return int(extra["epoch"]) if extra.get("epoch") is not None else None


def _recorded_epoch(path: Path, extra: dict[str, Any], selection: str) -> int | None:
    """:func:`_epoch_of` of a checkpoint's ``extra``; one that is no integer (a numpy scalar saved by a
    script, a text) is a one-line error of that checkpoint: its row, not the whole study (was: ``TypeError:
    int() argument must be ... not 'scalar'`` out of the plan)."""
    try:
        return _epoch_of(extra, selection)
    except (TypeError, ValueError, AttributeError, OverflowError):
        best = extra.get("metrics", {}).get("best") if isinstance(extra.get("metrics"), dict) else None
        v = best.get("epoch") if selection == "best" and isinstance(best, dict) and best.get("epoch") is not None \
            else extra.get("epoch")
        what = quoted(v) if isinstance(v, (str, int, float)) else f"a {type(v).__name__}"
        raise EmbedscopeError(f"{path}: the epoch it records is not an integer ({what}): save the checkpoint "
                              "with the epoch as a Python int") from None


def _run_files(final: Path, mode: str) -> list[tuple[Path, str]]:
    """(file, selection) of a trainer run with final checkpoint ``final`` for one ``--epoch`` mode."""
    d = final.with_name(final.name + ".train")
    fin = final if final.exists() else d / "last.pt"
    if not d.is_dir():
        return [(final, "given")]
    if mode == "last":
        return [(fin, "final")]
    if mode == "best":
        best = d / "best.pt"
        return [(best if best.exists() else fin, "best"), (fin, "final")]
    epochs = sorted(p for p in d.glob("epoch-*.pt") if p.stem[6:].isdigit() and int(p.stem[6:]) > 0)
    if not epochs:  # the run kept no per-epoch files: best and final are what exists
        return _run_files(final, "best")
    return [(p, "epoch") for p in epochs]


def _sources(source: str | os.PathLike) -> list[tuple[Path, str, dict[str, Any]]]:
    """(checkpoint, run name, user tags) of a grid folder, a YAML list or a glob; the run names that
    come from file names made unique (:func:`_unique_run_names`)."""
    return _unique_run_names(_named_sources(source))


def _named_sources(source: str | os.PathLike) -> list[tuple[Path, str, dict[str, Any], bool]]:
    """(checkpoint, run name, user tags, whether the name is given: a train-grid run's, a YAML ``name``)
    of a grid folder, a YAML list or a glob."""
    src = str(source)
    p = Path(src)
    if p.is_dir():
        grid = p / "grid.csv"
        if grid.exists():
            from embedscope.train.grid import read_grid_csv

            out = []
            for r in read_grid_csv(grid):
                if r.get("status") == "n/a":
                    continue
                if r.get("status") == "diverged":  # no final checkpoint: an error row of the study, said
                    why = str(r.get("failure") or "").strip() or "see its train-grid row"
                    out.append((p / str(r["name"]), r["name"], {"_diverged": f"the run diverged in train-grid: {why}",
                                                                 "_grid": _grid_settings(r)}, True))
                    continue
                # train-grid writes every checkpoint into its folder: the path in grid.csv is as given
                # to train-grid (relative to where it ran), so it is read from this folder, never
                # resolved against the working folder (another grid there would be measured instead)
                ck = p / Path(str(r["checkpoint"]).replace("\\", "/")).name
                out.append((ck, r["name"], {"_grid": _grid_settings(r)}, True))
            if not out:
                raise EmbedscopeError(f"{grid}: no trained runs listed")
            return out
        files = sorted(p.glob("*.pt"))
        if not files:
            raise EmbedscopeError(f"{p}: no grid.csv and no *.pt checkpoints in the folder")
        return [(f, f.stem, {}, False) for f in files]
    if p.suffix.lower() in (".yaml", ".yml") and p.exists():
        return _yaml_sources(p)
    if p.is_file():
        return [(p, p.stem, {}, False)]
    files = sorted(Path(f) for f in _glob.glob(src, recursive=True))
    files = [f for f in files if f.is_file()]
    if not files:
        raise EmbedscopeError(f"{src}: no such folder, YAML file or matching checkpoint")
    return [(f, _run_name(f), {}, False) for f in files]


#: the settings of a run that grid.csv records (train-grid's summary), for an error row whose checkpoint
#: cannot be read: its objective and seed, so that its failure counts against its objective
GRID_SETTINGS = ("loss", "loss_family", "p_switch", "seed", "embed_dim", "normalize", "image_size")


def _grid_settings(r: dict[str, Any]) -> dict[str, Any]:
    """The :data:`GRID_SETTINGS` of a grid.csv row (text as stored) as a checkpoint's config holds them:
    numbers as numbers, True/False as booleans; empty cells left out."""
    out: dict[str, Any] = {}
    for k in GRID_SETTINGS:
        v = str(r.get(k) if r.get(k) is not None else "").strip()
        if not v:
            continue
        if v in ("True", "False"):
            out[k] = v == "True"
            continue
        for kind in (int, float):
            try:
                out[k] = kind(v)
                break
            except ValueError:
                continue
        else:
            out[k] = v
    return out


def _refuse_run_folder_files(sources: list[tuple[Path, str, dict[str, Any]]]) -> None:
    """Refuse a source list that names a trainer run's final checkpoint ``X.pt`` and also files of its
    training folder ``X.pt.train/`` (a glob such as ``'grid/**/*.pt'``): ``--epoch`` picks that run's
    best / final / kept epochs from the folder, so each file there would be the same run again (the
    untrained ``epoch-000.pt`` as a trained one), counted as another run in every statistic."""
    finals = {os.path.normcase(os.path.abspath(f)) for f, _, tags in sources if "_diverged" not in tags}
    for f, _, tags in sources:
        d = f.parent
        if "_diverged" in tags or not d.name.endswith(".pt.train"):
            continue
        run = os.path.normcase(os.path.abspath(d.with_name(d.name[: -len(".train")])))
        if run in finals:
            raise UsageError(f"{f} is a file of the training folder of {d.with_name(d.name[: -len('.train')])}, "
                             "which the source names too: --epoch picks from that folder, so it would be the same "
                             "run again; name the final checkpoints only (e.g. 'DIR/*.pt'), or the folder's "
                             "files only")


def _run_name(f: Path) -> str:
    if f.parent.name.endswith(".pt.train"):
        return f.parent.name[: -len(".pt.train")] + "@" + f.stem
    return f.stem


def _unique_run_names(items: list[tuple[Path, str, dict[str, Any], bool]]) -> list[tuple[Path, str, dict[str, Any]]]:
    """(checkpoint, run name, tags) of ``items`` with every run name taken from a file name unique.

    Two checkpoints of one file name in other folders (``a/model.pt`` and ``b/model.pt``: a glob
    ``'*/model.pt'``, a YAML list without ``name``) would be one run name, and where no setting varies
    the run name is the objective's label (:func:`embedscope.study.stats._objectives`): two runs would
    be averaged as seeds of one objective. Each file of such a group takes the fewest parent folders
    (of the absolute path, ``/``-joined) that tell it apart from the other files of its name and from
    every other name: ``a/model``, ``b/model``; beside ``p/x/net`` and ``q/x/net``, ``y/net`` (a file takes
    more folders only where another file shares them, so that a file added to the source renames only
    the files it clashes with, and a study reads the rows of a renamed file back by its checkpoint:
    :func:`embedscope.study.run._adopt_renamed_rows`); files of one folder that differ in their extension
    only keep it (``model.pt``, ``model.pth``). A name that is given (a train-grid run's, a YAML ``name``)
    and a name that is unique already stay as they are, so the entries, and the rows a study resumes,
    of such sources keep their ids."""
    names = [n for _, n, _, _ in items]
    count: dict[str, int] = {}
    for n in names:
        count[n] = count.get(n, 0) + 1
    renamed = [i for i, (_, n, _, given) in enumerate(items) if not given and count[n] > 1]
    if not renamed:
        return [(f, n, t) for f, n, t, _ in items]
    keep = {n for i, n in enumerate(names) if i not in set(renamed)}
    groups: dict[str, list[int]] = {}
    for i in renamed:
        groups.setdefault(names[i], []).append(i)

    def folders(f: Path) -> tuple[str, ...]:  # the folders above the run's file (its .pt.train folder's), nearest first
        a = Path(os.path.abspath(f))
        base = a.parent.parent if a.parent.name.endswith(".pt.train") else a.parent
        return tuple(reversed(base.parts[1:] if base.anchor else base.parts))

    def with_suffix(f: Path, n: str) -> str:  # the name with the file's extension (files of one folder)
        return n + f.suffix if f.suffix else n

    out = list(names)
    for n, idx in groups.items():
        depth = max(len(folders(items[i][0])) for i in idx)
        levels = [(k, False) for k in range(1, depth + 1)] + [(k, True) for k in range(depth + 1)]

        def name_at(i: int, level: tuple[int, bool], n: str = n) -> str:
            f = items[i][0]
            k, suffix = level
            return "/".join([*reversed(folders(f)[:k]), with_suffix(f, n) if suffix else n])

        # each file its own shortest name: the first level at which no other file of the group has its
        # name (at that level) and no other run is so named; a file that shares no folder with the others
        # keeps one folder even when two others need more (p/x/net, q/x/net, y/net)
        at = {lv: [name_at(i, lv) for i in idx] for lv in levels}
        cand = []
        for j in range(len(idx)):
            for lv in levels:
                c = at[lv][j]
                if at[lv].count(c) == 1 and c not in keep:
                    cand.append(c)
                    break
            else:
                break
        if len(cand) != len(idx) or len(set(cand)) != len(cand):
            # (only a given name equal to every candidate) numbered, in the source's order
            cand = [f"{n}#{j}" for j, _ in enumerate(idx, 1)]
        for i, c in zip(idx, cand):
            out[i] = c
        keep.update(cand)
    return [(f, out[i], t) for i, (f, _, t, _) in enumerate(items)]


def _yaml_loader():
    """PyYAML's SafeLoader refusing a key given twice in one mapping (PyYAML keeps the last silently:
    an entry with two ``path:`` lines would measure the second file only)."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        seen: set[Any] = set()
        for k, _ in node.value:
            key = loader.construct_object(k, deep=deep)
            try:
                dup = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: PyYAML's own error below
                dup = False
            if dup:
                raise yaml.constructor.ConstructorError(None, None, f"the key {quoted(key)} is given twice in one "
                                                        "mapping", k.start_mark)
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    _Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return _Loader


def _yaml_error(e) -> str:
    """PyYAML's error in one line: what is wrong and where (line, column), not its first line alone
    ("while parsing a block mapping") nor the name of the string it read."""
    problem, mark = getattr(e, "problem", None), getattr(e, "problem_mark", None)
    if not problem:
        return " ".join(str(e).split())
    return " ".join(str(problem).split()) + (f" at line {mark.line + 1}, column {mark.column + 1}" if mark else "")


_YAML_KINDS = {dict: "a mapping", list: "a list", type(None): "empty (null)"}


def _yaml_sources(path: Path) -> list[tuple[Path, str, dict[str, Any], bool]]:
    """(checkpoint, run name, tags, whether the item names the run) of a YAML list. Refused with one
    line naming the item: a file that is not UTF-8 text, a key given twice, top-level keys other than
    ``checkpoints``, an item without a ``path`` or whose ``path`` / ``name`` is not one value, ``tags``
    that are not a mapping, a tag whose name is not text or whose value is not one value (a mapping is
    most often ``tag:`` for ``tags:``), and two items that name the same checkpoint file (it would
    count as two runs of the statistics). A date tag (``2024-05-01``) is its ISO text."""
    import datetime

    import yaml

    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise EmbedscopeError(f"{path}: is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                              "save the YAML file as UTF-8") from None
    except OSError as e:
        raise EmbedscopeError(f"{path}: cannot be read ({e.strerror or e})") from None
    try:
        doc = yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as e:
        raise EmbedscopeError(f"{path}: not valid YAML ({_yaml_error(e)})") from None
    if isinstance(doc, dict):
        other = [k for k in doc if k != "checkpoints"]
        if other:
            raise EmbedscopeError(f"{path}: unknown key {quoted(other[0])} (a study list has one key, 'checkpoints', "
                                  "holding the list of checkpoints)")
    items = doc.get("checkpoints") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not items:
        raise EmbedscopeError(f"{path}: expected a list of checkpoints (or a 'checkpoints:' list)")

    def kind(v: Any) -> str:  # a value named in a message: a scalar as it is, else what it is
        return quoted(v) if isinstance(v, (str, int, float, bool)) else _YAML_KINDS.get(type(v), f"a {type(v).__name__}")

    def scalar(v: Any) -> bool:  # (null: no value, as a config column the checkpoint lacks)
        return v is None or isinstance(v, (str, int, float, bool))

    out = []
    files: dict[str, int] = {}
    for i, it in enumerate(items, 1):
        if isinstance(it, str):
            it = {"path": it}
        if not isinstance(it, dict) or "path" not in it:
            raise EmbedscopeError(f"{path}: item {i} needs a 'path'")
        if not isinstance(it["path"], str) or not it["path"].strip():
            raise EmbedscopeError(f"{path}: item {i}: 'path' must be the checkpoint's file path, got {kind(it['path'])}")
        if "name" in it and not (isinstance(it["name"], (str, int, float)) and str(it["name"]).strip()):
            raise EmbedscopeError(f"{path}: item {i}: 'name' must be the run's name (text), got {kind(it['name'])}")
        raw_tags = it.get("tags")
        if raw_tags is not None and not isinstance(raw_tags, dict):
            raise EmbedscopeError(f"{path}: item {i}: 'tags' must be a mapping (name: value), got {kind(raw_tags)}")
        tags = dict(raw_tags or {})
        tags.update({k: v for k, v in it.items() if k not in ("path", "tags", "name")})
        for k, v in tags.items():
            if isinstance(v, datetime.date):
                tags[k] = v = v.isoformat()
            if not isinstance(k, str) or not k.strip():
                raise EmbedscopeError(f"{path}: item {i}: a tag is named by text, got the key {quoted(k)}")
            if not scalar(v):
                hint = " (for several tags write 'tags:')" if k == "tag" and isinstance(v, dict) else ""
                raise EmbedscopeError(f"{path}: item {i}: the tag {quoted(k)} must be one value (text or a "
                                      f"number), got {kind(v)}{hint}")
        ck = Path(os.path.expanduser(it["path"]))
        if not ck.is_absolute():
            ck = path.parent / ck
        name = str(it.get("name") or ck.stem)
        same = os.path.normcase(os.path.realpath(ck))
        if same in files:
            raise EmbedscopeError(f"{path}: items {files[same]} and {i} name the same checkpoint file {ck}: it would "
                                  "count as two runs; list each checkpoint once")
        files[same] = i
        out.append((ck, name, tags, bool(it.get("name"))))
    return out


def parse_exclude(exprs) -> list[tuple[str, str, Any]]:
    """``["p_switch>0", "loss==lifted"]`` -> [(column, operator, value)] (operators > >= < <= == !=)."""
    out = []
    for e in exprs or []:
        m = re.fullmatch(r"\s*([A-Za-z_][\w@.:-]*)\s*(>=|<=|==|!=|>|<|=)\s*([^\s=<>!].*?)\s*", str(e))
        if not m:
            raise UsageError(f"--exclude '{e}': expected COLUMN OP VALUE, e.g. p_switch>0 or loss==lifted")
        col, op, val = m.groups()
        op = "==" if op == "=" else op
        try:
            v: Any = float(val)
        except ValueError:
            v = val.strip("'\"")
        out.append((col, op, v))
    return out


def untrained_key(config: dict[str, Any], weights_sha256: str | None = None) -> str:
    """Short name of the untrained network a run starts from. ``weights_sha256``: the content of the
    ``weights`` file the run started from (its checkpoint records it), so that another file at the
    same path names another reference instead of reusing one built from the old file."""
    core = {k: config.get(k) for k in _UNTRAINED_KEYS}
    if config.get("weights_ema"):  # only then: the names of the other references stay as they were
        core["weights_ema"] = True
    if config.get("weights") and weights_sha256:
        core["weights_sha256"] = str(weights_sha256)
    if root_of(config):  # only then (the names of the other references stay as they were): runs trained on
        core["root"] = root_of(config)  # other folders start from references embedded on their own folders
    h = hashlib.sha256(json.dumps(core, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return _safe(f"untrained@{config.get('arch')}-D{config.get('embed_dim')}-"
                 f"{'norm' if config.get('normalize', True) else 'raw'}-s{config.get('seed', 0)}-{h}")


def _untrained_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config of the untrained reference of a run of config ``cfg`` (loss ``untrained``, epochs 0)."""
    return {**cfg, "loss": "untrained", "loss_family": "none", "p_switch": 0.0, "miner": None, "epochs": 0,
            "loss_params": None, "distance": None}


def _config_as_read(path: Path, cfg: dict[str, Any], planned: dict[str, Any]) -> dict[str, Any]:
    """:func:`_untrained_config` of the config of checkpoint ``path`` read from the file now, when it is
    still ``cfg`` (the one planned; else, or unreadable now, ``planned``): objects as ``torch.load`` gives
    them, so that the network saved with it has the bytes of one built from a config read from the file
    (a config read from JSON is equal, but two of its equal texts are two objects: pickled twice, where the
    checkpoint's pickle holds one and refers to it)."""
    try:
        now, _ = _read_config(path)
    except EmbedscopeError:
        return planned
    return _untrained_config(now) if now == cfg else planned


def build_untrained(config: dict[str, Any], out: Path, weights_sha256: str | None = None, *,
                    config_of: Callable[[], dict[str, Any]] | None = None, expect_sha256: str | None = None) -> Path:
    """Save the network a run with ``config`` starts from (the trainer's initialisation) to ``out``.
    With ``weights_sha256`` (the run's record of its ``weights`` file), a file at that path with
    other content is refused: the reference would not be the network the run started from.
    ``config_of``: gives the config to save instead of ``config`` (an equal one), called only when the
    network is built (not when ``out`` is there and readable). ``expect_sha256``: the sha256 ``out`` was
    recorded with when it was built: one there with other bytes (damaged on disk) is built again. Without it
    (a study folder that has no record of ``out``: a new one, ``--force``), the sha256 written beside ``out``
    when it was built (:func:`built_sha256`) tells the same; a file written before those were kept is taken
    as it is."""
    import torch

    from embedscope.fileio import sha256_file, write_text
    from embedscope.models import build_model, load_backbone_weights, save_checkpoint

    if out.exists() and _readable_checkpoint(out):
        # (a damaged one, a truncated write or a zero-byte file, is built again: it failed every study's row; one
        # that still loads with other bytes than it was built with was measured as it was by a new study folder)
        expect = expect_sha256 if expect_sha256 is not None else built_sha256(out)
        if expect is None or _sha256_or_none(out) == expect:
            return out
        if expect_sha256 is None:  # (the study says so itself when its own record told)
            import warnings

            from embedscope.errors import EmbedscopeWarning

            warnings.warn(EmbedscopeWarning(
                f"{out}: the untrained network no longer holds the bytes it was built with (sha256 differs from "
                f"the one beside it, {sha256_path(out).name}: damaged on disk?): built again"), stacklevel=2)
    if config.get("weights") and weights_sha256:
        try:
            now = sha256_file(config["weights"])
        except OSError as e:
            raise EmbedscopeError(f"the weights file {config['weights']} cannot be read ({e.strerror or e})") from None
        if now != weights_sha256:
            raise EmbedscopeError(f"the weights file {config['weights']} holds other content than when the run "
                                  "was trained (sha256 differs): the network the run started from cannot be rebuilt")
    if config_of is not None:
        config = config_of()
    torch.manual_seed(int(config.get("seed", 0)))
    model = build_model(config)
    if config.get("weights"):
        load_backbone_weights(model, config["weights"], ema=bool(config.get("weights_ema")))
    save_checkpoint(out, model, config, extra={"epoch": 0, "finished": False, "untrained": True}, force=True)
    try:
        write_text(sha256_path(out), sha256_file(out) + "\n", force=True)
    except (OSError, EmbedscopeError):  # (the network is sound: only no check when it is reused; an older
        pass  # sha256 left there differs from it, and it is built again then)
    return out


def sha256_path(out: str | os.PathLike) -> Path:
    """The file beside an untrained network ``out`` that keeps the sha256 of the bytes it was built with
    (``<key>.pt.sha256``): every study reusing it checks it, not only one whose folder recorded it."""
    out = Path(out)
    return out.with_name(out.name + ".sha256")


def built_sha256(out: str | os.PathLike) -> str | None:
    """The sha256 :func:`build_untrained` wrote beside ``out``; None when there is none (built by an earlier
    version, or the file cannot be read: nothing to check against); "" when it holds no sha256 (damaged too:
    matches no file, so the network is built again)."""
    try:
        text = sha256_path(out).read_bytes()
    except OSError:
        return None
    text = text.strip()
    return text.decode("ascii") if re.fullmatch(rb"[0-9a-f]{64}", text) else ""


def _sha256_or_none(path: str | os.PathLike) -> str | None:
    from embedscope.fileio import sha256_file

    try:
        return sha256_file(path)
    except OSError:
        return None


def _untrained_record(path: str | os.PathLike) -> dict[str, Any] | None:
    """The record of :data:`CONFIGS_FILE` of an untrained network built (or found readable) at ``path``: its
    :func:`file_fingerprint` and sha256 (the bytes it was built with, to tell bit rot under an unchanged
    fingerprint when it is measured again: :func:`damaged_untrained`); None when it changed while hashed."""
    before = file_fingerprint(path)
    sha = _sha256_or_none(path)
    if before is None or sha is None or file_fingerprint(path) != before:
        return None
    return {"stat": before, "untrained": True, "sha256": sha}


def damaged_untrained(entries: list[Entry], ids: Any, known: dict[str, Any]) -> list[str]:
    """The ids of the untrained references among ``ids`` (those a study is about to measure) whose file in
    ``known`` (:data:`CONFIGS_FILE`) has its recorded fingerprint but not its recorded sha256: bytes changed
    under an unchanged fingerprint (bit rot), that :func:`plan_study` with ``verify`` builds again. One hash
    of each, only of a reference whose row is to be measured (which reads and hashes it all the same)."""
    out = []
    for e in entries:
        if e.selection != "untrained" or e.id not in ids or e.error:
            continue
        hit = known.get(os.path.abspath(e.checkpoint))
        if not (isinstance(hit, dict) and hit.get("untrained") and isinstance(hit.get("sha256"), str)):
            continue
        now = file_fingerprint(e.checkpoint)
        if now is not None and hit.get("stat") == now and _sha256_or_none(e.checkpoint) != hit["sha256"]:
            out.append(e.id)
    return out


def _readable_checkpoint(path: Path) -> bool:
    """Whether ``path`` loads as a checkpoint (tensors only, never code)."""
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - any damage: built again
        return False
    return isinstance(obj, dict)


def plan_study(source: str | os.PathLike, out_dir: str | os.PathLike, *, epoch: str = "best",
               untrained: bool = True, untrained_dir: str | os.PathLike | None = None,
               known: dict[str, Any] | None = None, verify: Any = ()) -> list[Entry]:
    """The entries of a study over ``source`` (a train-grid folder, a glob, a YAML file).

    ``epoch``: ``best`` (each run's checkpoint of best test R@1, plus its final checkpoint as a
    robustness companion), ``last`` (the final checkpoint) or ``all`` (every kept epoch). A file
    that cannot be read becomes an entry with ``error`` set (the rest of the study goes on).
    Untrained networks built here go to ``untrained_dir`` (default ``<out_dir>/untrained``; a study
    passes its embedding cache's ``untrained/`` folder so that they, and their embeddings, are reused).
    ``known``: the configs read earlier, by file (:func:`_read_config_known`; a study keeps them in its
    :data:`CONFIGS_FILE`), and the untrained networks found readable (their fingerprint and sha256): updated
    with those read now. ``verify``: ids of untrained references whose file is checked against the sha256
    ``known`` records even with its fingerprint unchanged, built again when its bytes differ
    (:func:`damaged_untrained`).
    """
    if epoch not in EPOCH_MODES:
        raise UsageError(f"--epoch must be one of {', '.join(EPOCH_MODES)}, got '{epoch}'")
    out_dir = Path(out_dir)
    udir = Path(untrained_dir) if untrained_dir else out_dir / "untrained"
    entries: list[Entry] = []
    refs: dict[str, Entry] = {}
    ref_weights: dict[str, str | None] = {}  # the weights' sha256 each reference's runs recorded
    ref_source: dict[str, tuple[Path, dict[str, Any]]] = {}  # the checkpoint (and its config) each was planned from
    recorded: set[str] = set()  # the checkpoints whose config came from ``known``
    seen: set[str] = set()
    sources = _sources(source)
    _refuse_run_folder_files(sources)
    for final, run, tags in sources:
        tags = dict(tags)
        grid_cfg = tags.pop("_grid", None) or {}  # (what grid.csv says of the run: an error row's settings)
        if "_diverged" in tags:  # a train-grid run without a checkpoint: one error row
            eid = _safe(f"{run}@diverged")
            while eid in seen:
                eid += "+"
            seen.add(eid)
            entries.append(Entry(id=eid, checkpoint=str(final), run=run, selection="given", epoch=None,
                                 config=dict(grid_cfg), tags={}, error=tags["_diverged"]))
            continue
        try:
            trainer_run = final.suffix == ".pt" or final.with_name(final.name + ".train").is_dir()
            files = _run_files(final, epoch) if trainer_run else [(final, "given")]
        except OSError as e:  # pragma: no cover - unreadable folder
            files = [(final, "given")]
            tags = {**tags, "_error": str(e)}
        read = []
        for f, sel in files:
            try:
                if not f.exists():
                    raise EmbedscopeError(f"{f}: no such checkpoint file")
                cfg, extra = _read_config_known(f, known, recorded)
                read.append((f, sel, cfg, extra, _recorded_epoch(f, extra, sel), ""))
            except EmbedscopeError as e:
                read.append((f, sel, {}, {}, None, str(e)))
        # a file that cannot be read keeps its run's settings (another file of the run, else grid.csv), so
        # that its error row names its objective and counts against it (was: no settings, "nan p_switch=None")
        run_cfg = next((r[2] for r in read if not r[5]), None) or grid_cfg
        for f, sel, cfg, extra, ep, err in read:
            if err:
                cfg = dict(run_cfg)
            eid_base = _safe(f"{run}@{sel}")
            eid = eid_base + (f"-e{ep:03d}" if sel == "epoch" and ep is not None else "")
            while eid in seen:
                eid += "+"
            seen.add(eid)
            e = Entry(id=eid, checkpoint=str(f), run=run, selection=sel, epoch=ep, config=cfg, tags=dict(tags),
                      error=err)
            if untrained and not err and cfg and cfg.get("arch"):
                wsha = (extra or {}).get("weights_sha256")
                key = untrained_key(cfg, wsha)
                if key not in refs:
                    zero = final.with_name(final.name + ".train") / "epoch-000.pt"
                    path = zero if zero.exists() else udir / f"{key}.pt"
                    refs[key] = Entry(id=key, checkpoint=str(path), run=key, selection="untrained", epoch=0,
                                      config=_untrained_config(cfg))
                    ref_weights[key] = wsha
                    ref_source[key] = (f, cfg)
                e.untrained = key
            entries.append(e)
    for ref in refs.values():
        if Path(ref.checkpoint).parent == udir:
            key = os.path.abspath(ref.checkpoint)
            now = file_fingerprint(ref.checkpoint)
            hit = (known or {}).get(key)
            same = now is not None and isinstance(hit, dict) and hit.get("stat") == now and hit.get("untrained")
            if same and ref.id not in verify:
                if not isinstance(hit.get("sha256"), str):  # (a record of an earlier version: its bytes hashed once)
                    known[key] = _untrained_record(ref.checkpoint) or hit
                entries.append(ref)  # built (or found readable) earlier, unchanged since: nothing to load
                continue
            expect = hit.get("sha256") if same and isinstance(hit.get("sha256"), str) else None
            try:
                # (a config taken from ``known`` was read from JSON: equal, but pickled with other bytes, as its equal
                # texts are not one object; the network is built from its checkpoint's own config, as the first time)
                src = ref_source[ref.id]
                fresh = ((lambda src=src, ref=ref: _config_as_read(*src, ref.config)) if str(src[0]) in recorded
                         else None)
                build_untrained(ref.config, Path(ref.checkpoint), ref_weights.get(ref.id), config_of=fresh,
                                expect_sha256=expect)
                if known is not None:
                    record = _untrained_record(ref.checkpoint)
                    if record is None:
                        known.pop(key, None)
                    else:
                        known[key] = record
            except Exception as ex:  # noqa: BLE001 - the reference fails, the study goes on
                ref.error = f"untrained network: {ex}"
                if known is not None:
                    known.pop(key, None)
        entries.append(ref)
    return entries
