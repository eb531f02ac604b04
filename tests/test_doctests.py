"""The Examples sections of the front-door functions run as doctests (they are part of the docs)."""

import doctest
import importlib

import pytest

MODULES = [
    "embedscope.validation",
    "embedscope.store.embeddings",
    "embedscope.metrics.spectral",
    "embedscope.metrics.geometry",
    "embedscope.analyses.retrieval",
    "embedscope.analyses.structure",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert res.attempted > 0, f"{name} has no doctest examples"
    assert res.failed == 0
