"""Audit 44: the shell commands the checkpoint advice suggests run as the error line shows them.

1. The commands ended in ``--head none|random``: choice notation inside a command to paste, which a shell
   reads as a pipe into a program named ``random``. They now say ``--head none``, the other choice in words.
2. :func:`sh_arg` quoted every path the line escapes (a backslash included) in bash's ``$'...'``, which
   plain POSIX sh (dash) reads as a ``$`` and the escapes as they are. A path without control or other
   non-printable characters is now in POSIX single quotes (each backslash bare: the line shows it doubled,
   POSIX's escaped backslash); ``$'...'`` is kept for what one line of POSIX sh cannot hold (a control
   character, an undecodable byte), and the message then says the command is for bash or zsh.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from embedscope.models.checkpoint import BASH_NOTE, _foreign_state_dict_hint, bash_note, keep_layer_hint, sh_arg
from embedscope.text import safe

#: paths POSIX sh can hold on one line: quoted for it, no bash note
POSIX = ["plain.pth", "my run $HOME/r'18 (best).pth", "C:\\runs\\r.pth", "a\\\\b.pth", "\\lead and trail\\",
         "it's\\x \"q\".pth", "`cmd` #x ~/é.pth", "-dash|pipe;&.pth"]
#: paths with characters the line escapes (\x1b, \n, \u202e, an undecodable byte): bash's $'...'
BASH = ["tab\there\x1b[31m.pth", "line\nbreak's\\.pth", "\u202eevil.pth", "x\udc80y.pth"]


def _argv(shell: str, words: str) -> list[bytes]:
    """The arguments ``shell`` makes of ``words`` pasted as they are into a command line."""
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell}")
    out = subprocess.run([shell, "-c", f"set -- {words}\nfor a; do printf '%s\\0' \"$a\"; done"],
                         capture_output=True, timeout=10)
    return out.stdout.split(b"\0")[:-1] if out.returncode == 0 else [b"<exit %d>" % out.returncode, out.stderr]


@pytest.mark.parametrize("name", POSIX)
def test_a_printable_path_is_quoted_for_posix_sh(name):
    shown = safe(sh_arg(name))  # as the error line shows it
    assert "$'" not in shown and bash_note(name) == ""
    for shell in ("dash", "bash"):
        assert _argv(shell, shown) == [os.fsencode(name)], (shell, shown)


@pytest.mark.parametrize("name", BASH)
def test_a_path_with_a_control_character_is_for_bash_and_says_so(name):
    shown = safe(sh_arg(name))
    assert shown.startswith("$'") and bash_note(name) == BASH_NOTE and bash_note("a.pth", None, name) == BASH_NOTE
    assert shown.isprintable() and "\n" not in shown  # (nothing raw on the terminal)
    assert _argv("bash", shown) == [os.fsencode(name)]


def _resnet18():
    from torchvision.models import resnet18

    return resnet18(weights=None)


def _commands(line: str) -> list[str]:
    """The suggested commands of the line: ``--arch ... --head none`` and ``--trunk PATH ...``."""
    found = re.findall(r"--arch \S+ --weights .*? --head none\b", line)
    found += [m.group(1) for m in re.finditer(r"(--trunk .*?) with an empty", line)]
    return found


@pytest.mark.parametrize("name", ["my run\\r.pth", "tab\t\x1b.pth"])
def test_every_suggested_command_runs_as_shown(name):
    net = _resnet18()
    sd = net.state_dict()
    own = {**sd, "fc.weight": torch.zeros(128, 512), "fc.bias": torch.zeros(128)}  # the user's embedding layer
    seq = torch.nn.Sequential(*list(net.children())[:-1]).state_dict()  # numbered keys
    timm_obj = {"arch": "convnext_atto", "args": argparse.Namespace(), "state_dict": {}}
    path = Path("/tmp") / name
    cases = [  # (state dict, obj, the arguments of the command)
        (sd, None, ["--arch", "resnet18", "--weights", str(path), "--head", "none"]),
        (own, None, ["--arch", "resnet18", "--weights", str(path), "--head", "none"]),
        (seq, None, ["--arch", "resnet18", "--weights", str(path), "--head", "none"]),
        ({"stem.0.weight": torch.zeros(2, 3, 4, 4)}, timm_obj,
         ["--arch", "timm:convnext_atto", "--weights", str(path), "--head", "none"]),
        ({"patch_embed.proj.weight": torch.zeros(2, 3, 4, 4)}, None,
         ["--arch", "timm:NAME", "--weights", str(path), "--head", "none"]),
    ]
    bash = not name.isprintable()
    for sd_, obj, want in cases:
        line = safe(_foreign_state_dict_hint(sd_, path, obj))  # as the terminal shows it
        assert "|" not in line and "none|random" not in line, line
        assert "--head random" in line, line  # (the other choice, in words)
        cmds = _commands(line)
        assert cmds and cmds[0].startswith("--arch"), line
        argv = _argv("bash" if bash else "dash", cmds[0])
        assert argv == [os.fsencode(w) for w in want], (line, argv)
        assert (BASH_NOTE in line) == bash, line
        if sd_ is own:  # and the trunk command that keeps the layer
            assert _argv("bash" if bash else "dash", cmds[1]) == [b"--trunk", os.fsencode(str(path))]
            assert line.count(BASH_NOTE.strip()) == int(bash), line  # (said once for both commands)
    line = safe(_foreign_state_dict_hint({"w": torch.zeros(2)}, path))
    assert "|" not in line and "--head none (or --head random)" in line
    hint = safe(keep_layer_hint(path, "timm:resnet18"))
    assert (BASH_NOTE in hint) == bash and _argv("bash" if bash else "dash", _commands(hint)[0]) == [
        b"--trunk", os.fsencode(str(path)), b"--arch", b"timm:resnet18"]
