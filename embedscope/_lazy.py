"""Lazy front doors: a package exports names whose modules load on first use (fast ``--help``)."""

from __future__ import annotations

import importlib
from typing import Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[list[str], Callable, Callable]:
    """``(__all__, __getattr__, __dir__)`` for ``package`` exporting ``name -> module`` lazily."""
    names = sorted(exports)

    def __getattr__(name: str):
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module '{package}' has no attribute '{name}'")

    def __dir__():
        return names

    return names, __getattr__, __dir__
