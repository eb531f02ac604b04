"""Audit 44 (A): the neighbours' similarities to the digits that tell them apart, and --epochs N.

What was wrong before:

1. :func:`embedscope.viz.neighbours.similarity_digits` stopped at 5 decimals: near-duplicate images'
   cosines 0.999521, 0.999523 and 0.999524 all read "cos 0.99952" in the neighbours figure, as if tied
   (and ``print`` of the examples, at 4 decimals, read them all "0.9995").
2. ``train`` and ``train-grid`` showed ``--epochs EPOCHS`` where every other count option shows ``N``.
"""

from __future__ import annotations

import pytest


def _subparsers():
    from embedscope.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices


# ------------------------------------------------------------------ 2. --epochs N
@pytest.mark.parametrize("command", ["train", "train-grid"])
def test_epochs_shows_n_as_the_other_count_options(command):
    p = _subparsers()[command]
    action = next(a for a in p._actions if "--epochs" in a.option_strings)
    assert action.metavar == "N"
    assert "--epochs N" in p.format_usage() and "EPOCHS" not in p.format_help()
