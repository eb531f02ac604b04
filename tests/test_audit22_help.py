"""Every command's --help tells the truth (audit 22).

* a default stated in a help string, "(default: X)" or "(default X", is the parser's default;
* the per-data-set training defaults stated in train / train-grid's help are the trainer's
  (OPTION_DEFAULTS and dataset_defaults), not a copy that drifted;
* option-specific texts that were wrong: add-properties --force, spectrum's --by-class options,
  import's default key lists, --root of the commands that load a data set.
"""

from __future__ import annotations

import argparse
import re

import pytest

from embedscope.cli import build_parser

DEFAULT_RE = re.compile(r"\(default:? ([^;,)]+)")


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _actions(command: str) -> dict[str, argparse.Action]:
    return {a.dest: a for a in _subparsers()[command]._actions}


def _first_token(stated: str) -> str:
    return re.split(r"[\s:]", stated.strip(), maxsplit=1)[0]


def _same(token: str, default) -> bool:
    if isinstance(default, (list, tuple)):
        return len(default) == 1 and _same(token, default[0])
    if isinstance(default, bool):
        return token.lower() == str(default).lower()
    if isinstance(default, (int, float)):
        try:
            return float(token) == float(default)
        except ValueError:
            return False
    return token == str(default)


def _stated_defaults():
    for name, sp in _subparsers().items():
        for a in sp._actions:
            if not a.option_strings or not a.help or a.default in (None, False, argparse.SUPPRESS):
                continue
            m = DEFAULT_RE.search(a.help)
            if m:
                yield name, a, _first_token(m.group(1))


def test_defaults_found():
    # the check below has something to check (a help text rewritten without "(default: X)" would
    # silently drop out of it)
    assert len(list(_stated_defaults())) >= 45  # (49 when t-SNE's --n-jobs became "every core")


@pytest.mark.parametrize("name,action,token", list(_stated_defaults()),
                         ids=lambda x: x if isinstance(x, str) else getattr(x, "dest", None))
def test_stated_default_is_the_parsers(name, action, token):
    assert _same(token, action.default), (f"{name} {action.option_strings[-1]}: help says default {token!r}, "
                                          f"the parser uses {action.default!r}")


def test_every_valued_option_states_its_default():
    """An option whose parser default is a value (not None / off / an empty list) says it in its help."""
    missing = []
    for name, sp in _subparsers().items():
        for a in sp._actions:
            if (a.option_strings and a.default not in (None, False, argparse.SUPPRESS, [])
                    and not isinstance(a, argparse._StoreTrueAction) and "default" not in (a.help or "")):
                missing.append(f"{name} {a.option_strings[-1]}")
    assert not missing


def _dataset_defaults_in_help(help_text: str) -> dict[str, str]:
    """'(default: 112; digits 40, shapes 64)' -> {'photos': '112', 'digits': '40', 'shapes': '64'}."""
    m = re.search(r"\(default:? ([^;,]+)(?:, SOP (\S+))?; digits ([^,]+), shapes ([^;)]+)", help_text)
    assert m, help_text
    out = {"photos": m.group(1).strip(), "digits": m.group(3).strip(), "shapes": m.group(4).strip()}
    if m.group(2):
        out["sop"] = m.group(2).strip()
    return out


@pytest.mark.parametrize("command", ["train", "train-grid"])
@pytest.mark.parametrize("dest", ["sampler", "batch_size", "epochs", "lr"])
def test_training_per_dataset_defaults_are_the_trainers(command, dest):
    from embedscope.train.trainer import dataset_defaults

    stated = _dataset_defaults_in_help(_actions(command)[dest].help)
    for kind, value in stated.items():
        actual = dataset_defaults({"photos": "cub200"}.get(kind, kind))[dest]
        assert _same(value, actual), f"{command} --{dest}: help says {kind} {value}, the trainer uses {actual}"


@pytest.mark.parametrize("command", ["train", "train-grid"])
def test_training_fixed_defaults_are_the_trainers(command):
    from embedscope.train.trainer import OPTION_DEFAULTS

    acts = _actions(command)
    for dest in ("embed_dim", "weight_decay", "optimizer", "lr_schedule", "eval_every", "num_workers", "device",
                 "amp", "seed", "loss", "p_switch"):
        if dest not in acts:  # (train-grid: --seeds, --losses, --p-switch lists of its own)
            continue
        h = acts[dest].help
        m = re.search(r"default:? ([^;,)\s]+)|(\S+) \(default\)", h)
        assert m, f"{command} --{dest}: no default stated"
        token = m.group(1) or m.group(2)
        assert _same(token, OPTION_DEFAULTS[dest]), (f"{command} --{dest}: help says {token!r}, "
                                                     f"OPTION_DEFAULTS has {OPTION_DEFAULTS[dest]!r}")
    assert _subparsers()[command].get_default("dataset") is None  # chosen by the trainer: digits
    assert "digits (default)" in acts["dataset"].help and OPTION_DEFAULTS["dataset"] == "digits"


@pytest.mark.parametrize("command", ["train", "train-grid"])
def test_training_image_size_and_arch_defaults(command):
    from embedscope.models import default_config
    from embedscope.train.trainer import dataset_defaults

    acts = _actions(command)
    for ds, kind in (("digits", "digits"), ("shapes", "shapes"), ("cub200", "photos")):
        d = dataset_defaults(ds)
        assert f"{d['arch']} for {kind}" in acts["arch"].help
        size = d.get("image_size") or default_config(d["arch"], dataset=ds)["image_size"]
        assert f"{size} for {kind}" in acts["image_size"].help


def test_training_miner_default_is_the_losses():
    from embedscope.names import LOSSES
    from embedscope.train.losses import loss_spec

    h = _actions("train")["miner"].help
    distance = re.search(r"distance for ([\w/]+)", h).group(1).split("/")
    assert sorted(distance) == sorted(n for n in LOSSES if loss_spec(n).default_miner == "distance")


def test_add_properties_force_says_what_it_replaces(tmp_path):
    """--force replaces properties the file already has (the file is always updated in place)."""
    import numpy as np

    from embedscope.cli import main
    from embedscope.store import EmbeddingSet, load, save

    h = _actions("add-properties")["force"].help
    assert "propert" in h and "output file" not in h
    f = tmp_path / "e.h5"
    save(f, EmbeddingSet.from_arrays(np.eye(4, dtype="float32"), np.array([0, 0, 1, 1]),
                                     paths=[f"p{i}" for i in range(4)]))
    t = tmp_path / "t.csv"
    t.write_text("path,ink\n" + "".join(f"p{i},{i % 2}\n" for i in range(4)))
    assert main(["add-properties", str(f), str(t)]) == 0
    assert main(["add-properties", str(f), str(t)]) != 0  # an existing property: refused
    t.write_text("path,ink\n" + "".join(f"p{i},7\n" for i in range(4)))
    assert main(["add-properties", str(f), str(t), "--force"]) == 0
    assert (np.asarray(load(f).properties["ink"]) == 7).all()


def test_spectrum_by_class_options_say_so():
    acts = _actions("spectrum")
    for dest in ("center", "n_values"):
        assert "--by-class" in acts[dest].help


def test_import_default_keys_are_listed():
    from embedscope.importers import LABEL_KEYS, PATH_KEYS

    acts = _actions("import")
    assert all(k in acts["labels"].help for k in LABEL_KEYS)
    assert all(k in acts["paths"].help for k in PATH_KEYS)


@pytest.mark.parametrize("command", ["train", "train-grid", "embed", "saliency"])
def test_root_help_names_both_built_in_sets(command):
    # digits are built in; shapes without --root are generated once and cached
    h = _actions(command)["root"].help
    assert "digits" in h and "shapes" in h


def test_study_cache_dir_default(monkeypatch, tmp_path):
    from embedscope.study.run import default_cache_dir

    h = _actions("study")["cache_dir"].help
    monkeypatch.delenv("EMBEDSCOPE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "embedscope" / "embeddings"
    assert "$XDG_CACHE_HOME/embedscope/embeddings" in h and "$EMBEDSCOPE_CACHE/embeddings" in h
    # $EMBEDSCOPE_CACHE is embedscope's cache folder for both caches (the embeddings were the folder itself,
    # and the shapes set landed inside them)
    from embedscope.data.shapes import default_cache_dir as shapes_cache

    monkeypatch.setenv("EMBEDSCOPE_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c" / "embeddings" and shapes_cache() == tmp_path / "c" / "shapes"


def test_file_metavars_are_consistent():
    """One embedding-file argument is EMB.h5 in every analysis command's usage line."""
    for command in ("info", "evaluate", "neighbours", "geometry", "spectrum", "properties", "tsne", "yoke", "scatter",
                    "add-properties"):
        sp = _subparsers()[command]
        pos = [a for a in sp._actions if not a.option_strings and a.dest in ("file", "files")]
        assert pos and pos[0].metavar == "EMB.h5", command
