"""Option helpers shared by the sub-commands."""

from __future__ import annotations

import argparse


def add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="replace output files that already exist")


def add_figure_output(p: argparse.ArgumentParser) -> None:
    """``-o OUT.png`` (PNG and PDF written), ``--no-progress`` and ``--force`` of the figure commands."""
    p.add_argument("-o", "--output", required=True, metavar="OUT.png", help="figure (PNG and PDF are written)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_force(p)


def add_split(p: argparse.ArgumentParser, default: str = "test") -> None:
    p.add_argument("--split", default=default, choices=["train", "test", "all"],
                   help=f"which rows of the file to analyse (default: {default})")


def add_outputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="OUT.json", help="also write the results as JSON")
    p.add_argument("--csv", metavar="OUT.csv", help="also write the results as CSV")


def add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda (default: auto)")


def positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{s}'") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v
