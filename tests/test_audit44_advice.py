"""Audit 44: the shell commands the checkpoint advice suggests run as the error line shows them.

1. The commands ended in ``--head none|random``: choice notation inside a command to paste, which a shell
   reads as a pipe into a program named ``random``. They now say ``--head none``, the other choice in words.
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

from embedscope.models.checkpoint import _foreign_state_dict_hint
from embedscope.text import safe


def _argv(shell: str, words: str) -> list[bytes]:
    """The arguments ``shell`` makes of ``words`` pasted as they are into a command line."""
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell}")
    out = subprocess.run([shell, "-c", f"set -- {words}\nfor a; do printf '%s\\0' \"$a\"; done"],
                         capture_output=True, timeout=10)
    return out.stdout.split(b"\0")[:-1] if out.returncode == 0 else [b"<exit %d>" % out.returncode, out.stderr]


def _resnet18():
    from torchvision.models import resnet18

    return resnet18(weights=None)


def _commands(line: str) -> list[str]:
    """The suggested commands of the line: ``--arch ... --head none`` and ``--trunk PATH ...``."""
    found = re.findall(r"--arch \S+ --weights .*? --head none\b", line)
    found += [m.group(1) for m in re.finditer(r"(--trunk .*?) with an empty", line)]
    return found


@pytest.mark.parametrize("name", ["my run (best).pth"])
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
    for sd_, obj, want in cases:
        line = safe(_foreign_state_dict_hint(sd_, path, obj))  # as the terminal shows it
        assert "|" not in line and "none|random" not in line, line
        assert "--head random" in line, line  # (the other choice, in words)
        cmds = _commands(line)
        assert cmds and cmds[0].startswith("--arch"), line
        argv = _argv("dash", cmds[0])
        assert argv == [os.fsencode(w) for w in want], (line, argv)
        if sd_ is own:  # and the trunk command that keeps the layer
            assert _argv("dash", cmds[1]) == [b"--trunk", os.fsencode(str(path))]
    line = safe(_foreign_state_dict_hint({"w": torch.zeros(2)}, path))
    assert "|" not in line and "--head none (or --head random)" in line
