"""embedscope: why does an embedding model generalize?

One data path: data -> model -> embed -> store (HDF5) -> analyses -> figures/report.
"""

__version__ = "0.1.0"

from embedscope.errors import EmbedscopeError, UsageError  # noqa: E402

__all__ = ["__version__", "EmbedscopeError", "UsageError"]
