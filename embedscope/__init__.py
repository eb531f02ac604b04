"""embedscope: why does an embedding model generalize?

One data path: data -> model -> embed -> store (HDF5) -> analyses -> figures/report.

>>> import embedscope                                       # doctest: +SKIP
>>> es = embedscope.load("demo-output/digits.h5")           # doctest: +SKIP
>>> embedscope.analyses.evaluate(es)["R@1"]                 # doctest: +SKIP

The front doors ``embedscope.store``, ``embedscope.analyses``, ``embedscope.metrics`` and
``embedscope.viz`` load on first use, as do ``load``, ``save`` and ``EmbeddingSet`` (from
``embedscope.store``).
"""

__version__ = "0.1.0"

_SUBPACKAGES = ("store", "analyses", "metrics", "viz")
_STORE_NAMES = ("EmbeddingSet", "load", "save")
__all__ = ["__version__", "EmbedscopeError", "UsageError", *_SUBPACKAGES, *_STORE_NAMES]


def __getattr__(name: str):
    # Everything loads on first use, so that nothing runs here when the ``embedscope`` command starts:
    # its first code is then embedscope/cli/__init__.py, which takes Ctrl-C over from Python at once.
    import importlib

    if name in ("EmbedscopeError", "UsageError"):
        from embedscope import errors

        return getattr(errors, name)
    if name in _SUBPACKAGES:
        return importlib.import_module(f"embedscope.{name}")
    if name in _STORE_NAMES:
        return getattr(importlib.import_module("embedscope.store"), name)
    raise AttributeError(f"module 'embedscope' has no attribute '{name}'")


def __dir__():
    return sorted(set(globals()) | set(__all__))
