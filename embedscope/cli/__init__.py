"""The ``embedscope`` command line: a thin layer over the library (no logic lives here).

Each sub-command is a module in this package with ``add_parser(subparsers, parents)`` that
registers its parser and sets ``func`` to a ``run(args) -> int | None`` function. Modules import
their heavy dependencies inside ``run`` so that ``embedscope --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from embedscope import __version__
from embedscope.errors import EmbedscopeError

# Order = order in `embedscope --help`. A module missing from an installation is skipped.
COMMANDS = [
    "train",
    "train_grid",
    "toy",
    "import_cmd",
    "embed",
    "add_properties",
    "make_shapes",
    "info",
    "evaluate",
    "neighbours",
    "geometry",
    "spectrum",
    "properties",
    "saliency",
    "saliency_agreement",
    "tsne",
    "yoke",
    "scatter",
    "study",
    "report",
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def common_parent() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a sub-command's default must not override `embedscope --debug CMD`
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show the full traceback on errors")
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="embedscope",
        description="Why does an embedding model generalize? Embed a data set with a checkpoint, "
        "then analyse the HDF5 file: retrieval metrics, spectral decay, class distances, t-SNE.",
    )
    parser.add_argument("--version", action="version", version=f"embedscope {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    parents = [common_parent()]
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"embedscope.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"embedscope.cli.{name}":
                continue
            raise
        mod.add_parser(sub, parents)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        rc = args.func(args)
        return int(rc or 0)
    except EmbedscopeError as e:
        if args.debug:
            raise
        print(f"embedscope {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"embedscope {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # an unexpected failure: still one line unless --debug
        if args.debug:
            raise
        msg = str(e).splitlines()[0] if str(e) else ""
        print(
            f"embedscope {args.command}: error: {e.__class__.__name__}: {msg} (run with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
