"""Lazy front doors: a package exports names whose modules load on first use (fast ``--help``)."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Callable, Mapping


def submodule(package: str, name: str):
    """The module ``package.name`` imported now, or None when the package has no such module (a
    private name or the command line's ``embedscope.cli``, which takes Ctrl-C over when imported,
    never loads so)."""
    full = f"{package}.{name}"
    if not name.isidentifier() or name.startswith("_") or full == "embedscope.cli":
        return None
    if importlib.util.find_spec(full) is None:
        return None
    return importlib.import_module(full)


def module_getattr(package: str) -> Callable:
    """A module ``__getattr__`` for ``package`` that loads its modules on first use:
    ``embedscope.study.run`` after a bare ``import embedscope`` (an AttributeError until imported by name)."""

    def __getattr__(name: str):
        mod = submodule(package, name)
        if mod is None:
            raise AttributeError(f"module '{package}' has no attribute '{name}'")
        return mod

    return __getattr__


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[list[str], Callable, Callable]:
    """``(__all__, __getattr__, __dir__)`` for ``package`` exporting ``name -> module`` lazily.

    A name that is not exported but is a module of the package loads as that module, as the
    exported names do (:func:`module_getattr`): ``embedscope.train.trainer.train`` and
    ``embedscope.viz.saliency`` after a bare ``import embedscope`` (docs/architecture.md).
    """
    names = sorted(exports)
    modules = module_getattr(package)

    def __getattr__(name: str):
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        return modules(name)

    def __dir__():
        return names

    return names, __getattr__, __dir__
