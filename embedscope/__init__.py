"""embedscope: why does an embedding model generalize?

One data path: data -> model -> embed -> store (HDF5) -> analyses -> figures/report.

>>> import embedscope                                       # doctest: +SKIP
>>> es = embedscope.load("demo-output/digits.h5")           # doctest: +SKIP
>>> embedscope.analyses.evaluate(es)["R@1"]                 # doctest: +SKIP

The front doors ``embedscope.store``, ``embedscope.analyses``, ``embedscope.metrics`` and
``embedscope.viz`` load on first use, as do ``load``, ``save`` and ``EmbeddingSet`` (from
``embedscope.store``), and every other module as ``embedscope.<name>`` (``synthetic``, ``data``,
``models``, ``train``, ``study``, ``saliency``, ``tsne`` ...; docs/architecture.md), without an
import of its own.
"""

__version__ = "0.1.0"

_SUBPACKAGES = ("store", "analyses", "metrics", "viz")
_STORE_NAMES = ("EmbeddingSet", "load", "save")
#: the other rooms a notebook reaches as ``embedscope.<name>`` (listed by ``dir``; any module of the
#: package loads so, but the command line's ``cli``, which takes Ctrl-C over when imported)
_MORE_MODULES = ("synthetic", "data", "train", "study", "saliency", "tsne")  # (not models: torch)
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
    # embedscope.synthetic, embedscope.train ... after a bare `import embedscope` (an AttributeError
    # until the module had been imported by name); never embedscope.cli
    from embedscope._lazy import module_getattr

    try:
        return module_getattr("embedscope")(name)
    except AttributeError:
        from embedscope.analyses import _EXPORTS  # (a name only: no analysis module is imported)

        if name in _EXPORTS:  # embedscope.evaluate(...): the analyses are one package down
            raise AttributeError(f"module 'embedscope' has no attribute '{name}': the analyses are in "
                                 f"embedscope.analyses (embedscope.analyses.{name}, or from embedscope.analyses "
                                 f"import {name})") from None
        raise


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_MORE_MODULES))
