"""Audit 43: the advice that saves a checkpoint without its extra keys, --ema of a one-file trunk+embedder pair,
and the untrained networks a study keeps in its cache.

What was wrong before:

- a key prefix longer than 80 characters was shortened in the advice's command (``k.startswith('aaa...')``),
  which then matched none of the file's keys;
- the command named a key as ``repr`` writes it, and the error line escapes it once more: a backslash of
  the key was shown as four, a control character as ``\\\\x1b`` (a command naming another key);
- "unexpected N key(s) e.g." named the keys without the prefix removed in front (``proj.weight``) while the
  advice named the file's own (``'module.proj.'``);
- followed for an embedscope checkpoint, the advice saved a bare state dict: its config was lost and
  ``--arch`` became needed;
- a one-file pytorch-metric-learning pair given with ``--ema`` got the generic "no EMA weights" line;
- a damaged untrained network in the study cache that still loaded was taken as it was by a new study
  folder (or ``--force``), its sha256 recorded as it was.
"""

from __future__ import annotations

import re

import pytest
import torch

from embedscope.errors import EmbedscopeError, EmbedscopeWarning
from embedscope.models import build_model, default_config, load_checkpoint
from embedscope.models.checkpoint import save_checkpoint
from embedscope.text import safe


def _digits(seed: int = 0):
    torch.manual_seed(seed)
    cfg = default_config("digits_cnn", embed_dim=8)
    return build_model(cfg), cfg


def _error(path, **kw) -> str:
    """The error line as the command line shows it (escaped once)."""
    with pytest.raises(EmbedscopeError) as e:
        load_checkpoint(path, **kw)
    return safe(str(e.value))


def _advice(line: str) -> str:
    m = re.search(r"e\.g\. (torch\.save\(.*?, FILE\)|ckpt = torch\.load\(FILE\); .*?, NEW_FILE\))", line)
    assert m, line
    return m.group(1)


def _follow(line: str, sd, tmp_path, src=None):
    """Run the advice's command as a user would paste it; the path of the file it saves."""
    new = tmp_path / "followed.pt"
    if new.exists():
        new.unlink()
    cmd = _advice(line)
    exec(cmd, {"torch": torch, "sd": sd, "FILE": str(src if cmd.startswith("ckpt") else new), "NEW_FILE": str(new)})
    return new


# --------------------------------------------------------------------------- 1. long prefixes spelled whole

def test_a_long_extra_prefix_is_spelled_whole_and_the_advice_works(tmp_path):
    m, _ = _digits()
    long = "p" * 90 + "."
    sd = {**m.state_dict(), long + "weight": torch.zeros(2, 8)}
    torch.save(sd, tmp_path / "l.pt")
    line = _error(tmp_path / "l.pt", arch="digits_cnn")
    assert f"k.startswith(('{long}',))" in line  # (was cut to 77 characters and '...')
    load_checkpoint(_follow(line, sd, tmp_path), arch="digits_cnn")


def test_two_models_under_long_prefixes_the_one_saved_alone_loads(tmp_path):
    m, _ = _digits()
    a, b = "a" * 90 + ".", "b" * 90 + "."
    sd = {**{a + k: v for k, v in m.state_dict().items()}, **{b + k: v + 1 for k, v in m.state_dict().items()}}
    torch.save(sd, tmp_path / "two.pt")
    line = _error(tmp_path / "two.pt", arch="digits_cnn")
    assert "not guessed" in line and f"k.startswith('{a}')" in line
    model = load_checkpoint(_follow(line, sd, tmp_path), arch="digits_cnn")[0]
    torch.testing.assert_close(model.head.weight, m.head.weight)


def test_a_prefix_too_long_to_spell_gets_no_command(tmp_path):
    m, _ = _digits()
    huge = "q" * 5000 + "."
    torch.save({**m.state_dict(), huge + "w": torch.zeros(2)}, tmp_path / "h.pt")
    line = _error(tmp_path / "h.pt", arch="digits_cnn")
    assert "torch.save" not in line and "5001-character prefix 'qqq" in line and len(line) < 600


def test_the_advice_is_a_correct_literal_once_the_line_escapes_it(tmp_path):
    """A key with a backslash, an escape character and both quotes: the command, as the terminal shows it,
    drops exactly its keys (repr escaped them first: shown with four backslashes, naming another key)."""
    m, _ = _digits()
    for odd in ("x\\y\x1b.", "it's \"q\"\\.", "na\udc80me."):  # (the last: an undecodable byte of a file name)
        sd = {**m.state_dict(), odd + "w": torch.zeros(2)}
        torch.save(sd, tmp_path / "o.pt")
        line = _error(tmp_path / "o.pt", arch="digits_cnn")
        assert "\x1b" not in line
        load_checkpoint(_follow(line, sd, tmp_path), arch="digits_cnn")


# --------------------------------------------------------------------------- 2. the file's own key names

def test_the_unexpected_keys_are_named_as_the_file_has_them(tmp_path):
    m, _ = _digits()
    sd = {"module." + k: v for k, v in m.state_dict().items()}
    sd["module.proj.weight"] = torch.zeros(2, 8)
    torch.save(sd, tmp_path / "dp.pt")
    line = _error(tmp_path / "dp.pt", arch="digits_cnn")
    assert "unexpected 1 key(s) e.g. module.proj.weight)" in line and "('module.proj.',)" in line
    load_checkpoint(_follow(line, sd, tmp_path), arch="digits_cnn")


# --------------------------------------------------------------------------- 3. an embedscope file keeps its config

@pytest.mark.parametrize("ema", [False, True])
def test_the_advice_for_an_embedscope_checkpoint_keeps_its_config(tmp_path, ema):
    m, cfg = _digits()
    save_checkpoint(tmp_path / "e.pt", m, cfg, extra={"epoch": 4})
    obj = torch.load(tmp_path / "e.pt", weights_only=True)
    key = "state_dict_ema" if ema else "state_dict"
    obj[key] = {**obj["state_dict"], "proj.weight": torch.zeros(2, 8)}
    torch.save(obj, tmp_path / "x.pt")
    line = _error(tmp_path / "x.pt", ema=ema)
    assert f"ckpt['{key}'] = {{k: v for k, v in ckpt['{key}'].items() if not k.startswith(('proj.',))}}" in line
    new = _follow(line, None, tmp_path, src=tmp_path / "x.pt")
    model, config, info = load_checkpoint(new, ema=ema)  # no --arch: the config was kept
    assert config["arch"] == "digits_cnn" and info["format"].startswith("embedscope") and info["extra"]["epoch"] == 4


def test_two_models_in_an_embedscope_checkpoint_the_one_saved_alone_keeps_the_config(tmp_path):
    m, cfg = _digits()
    save_checkpoint(tmp_path / "e.pt", m, cfg)
    obj = torch.load(tmp_path / "e.pt", weights_only=True)
    obj["state_dict"] = {**{"s." + k: v for k, v in obj["state_dict"].items()},
                         **{"t." + k: v for k, v in obj["state_dict"].items()}}
    torch.save(obj, tmp_path / "st.pt")
    line = _error(tmp_path / "st.pt")
    assert "not guessed" in line
    model, config, _ = load_checkpoint(_follow(line, None, tmp_path, src=tmp_path / "st.pt"))
    assert config["arch"] == "digits_cnn"


# --------------------------------------------------------------------------- 4. --ema of a one-file pair

def test_ema_of_a_one_file_trunk_and_embedder_says_what_the_file_holds(tmp_path):
    m, _ = _digits()
    torch.save({"trunk": m.backbone.state_dict(), "embedder": {}}, tmp_path / "pair.pt")
    line = _error(tmp_path / "pair.pt", ema=True)
    assert "--ema: holds a pytorch-metric-learning trunk and embedder ('trunk', 'embedder')" in line
    assert "load it without --ema" in line


# --------------------------------------------------------------------------- 5. the untrained networks' sha256

def test_a_damaged_untrained_network_is_built_again_by_a_study_folder_without_its_record(tmp_path, monkeypatch):
    """Its sha256 lived only in each study folder's checkpoint_configs.json: a new study folder (or --force) took a
    damaged file that still loads as it was. The sha256 written beside it when it was built tells now."""
    from conftest import save_digits_checkpoint

    import embedscope.study.plan as plan
    from embedscope.fileio import sha256_file

    monkeypatch.setattr(plan, "RACY_NS", 0)
    ck = save_digits_checkpoint(tmp_path / "net.pt", seed=1)
    entries = plan.plan_study(str(ck), tmp_path / "st", untrained_dir=tmp_path / "u", known={})
    (ref,) = [e for e in entries if e.selection == "untrained"]
    good = open(ref.checkpoint, "rb").read()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0x10  # one bit of a weight: it still loads
    open(ref.checkpoint, "wb").write(bytes(bad))
    assert plan._readable_checkpoint(plan.Path(ref.checkpoint))
    known: dict = {}  # another study folder: no record of it
    with pytest.warns(EmbedscopeWarning, match="no longer holds the bytes it was built with .*: built again"):
        plan.plan_study(str(ck), tmp_path / "st2", untrained_dir=tmp_path / "u", known=known)
    assert open(ref.checkpoint, "rb").read() == good
    assert known[plan.os.path.abspath(ref.checkpoint)]["sha256"] == sha256_file(ref.checkpoint)
    assert plan.built_sha256(ref.checkpoint) == sha256_file(ref.checkpoint)
    # intact: not built again; one of an earlier version (no sha256 beside it) is taken as it is
    import embedscope.models as models

    monkeypatch.setattr(models, "build_model", lambda *a: pytest.fail("built again"))
    plan.plan_study(str(ck), tmp_path / "st3", untrained_dir=tmp_path / "u", known={})
    plan.sha256_path(ref.checkpoint).unlink()
    plan.plan_study(str(ck), tmp_path / "st4", untrained_dir=tmp_path / "u", known={})


# --------------------------------------------------------------------------- 6. a one-file pair keeps its embedder

@pytest.mark.parametrize("under", [None, "state_dict"])
def test_the_advice_for_a_one_file_pair_keeps_the_embedder(tmp_path, under):
    """Followed, it saved the trunk's state dict alone: the embedder was lost."""
    m, _ = _digits()
    trunk = {**m.backbone.state_dict(), "proj.weight": torch.zeros(2, 8)}
    emb = torch.nn.Linear(int(m.backbone(torch.zeros(1, 1, 8, 8)).shape[1]), 4).state_dict()
    torch.save({"trunk": trunk if under is None else {under: trunk}, "embedder": emb}, tmp_path / "pair.pt")
    line = _error(tmp_path / "pair.pt", arch="digits_cnn")
    where = "ckpt['trunk']" + ("" if under is None else f"['{under}']")
    assert f"{where} = {{k: v for k, v in {where}.items() if not k.startswith(('proj.',))}}" in line
    model, config, info = load_checkpoint(_follow(line, None, tmp_path, src=tmp_path / "pair.pt"), arch="digits_cnn")
    assert config["embed_dim"] == 4 and info["format"].startswith("pytorch-metric-learning trunk+embedder (one file")
