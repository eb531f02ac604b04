"""embedscope: why does an embedding model generalize?

One data path: data -> model -> embed -> store (HDF5) -> analyses -> figures/report.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "EmbedscopeError", "UsageError"]


def __getattr__(name: str):
    # The errors load on first use, so that nothing runs here when the ``embedscope`` command starts:
    # its first code is then embedscope/cli/__init__.py, which takes Ctrl-C over from Python at once.
    if name in ("EmbedscopeError", "UsageError"):
        from embedscope import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'embedscope' has no attribute '{name}'")


def __dir__():
    return sorted(set(globals()) | set(__all__))
