"""Audit 43: a fresh user's pass over the figure commands (tsne, yoke, scatter, spectrum, geometry)."""

from __future__ import annotations

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError


def _blobs(n=30, d=4, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    return rng.normal(size=(n, d)) + 3 * np.eye(d)[y], y


@pytest.mark.parametrize("perplexity", [0.01, 0.5, 0.99])
def test_perplexity_below_one_refused(perplexity):
    # below 1/3 openTSNE's neighbour search failed with "ValueError: Expected n_neighbors > 0"; from
    # 1/3 to 1 every value gave the same affinities (one neighbour), recorded as different perplexities
    from embedscope.tsne import effective_perplexity, single_tsne

    with pytest.raises(EmbedscopeError, match="perplexity must be at least 1"):
        effective_perplexity(perplexity, 100)
    X, _ = _blobs()
    with pytest.raises(EmbedscopeError, match="perplexity must be at least 1"):
        single_tsne(X, perplexity=perplexity, n_iter=1, early_exaggeration_iter=1)
    assert effective_perplexity(1, 100) == 1.0


@pytest.mark.parametrize("command", ["tsne", "yoke"])
def test_cli_perplexity_below_one_is_a_usage_error(command, tmp_path, capsys):
    from embedscope.cli import main

    files = ["a.h5"] if command == "tsne" else ["a.h5", "b.h5"]  # refused before any file is read
    rc = main([command, *files, "--perplexity", "0.01", "-o", str(tmp_path / "m.png")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--perplexity must be at least 1, got 0.01" in err and "ValueError" not in err
    assert not list(tmp_path.iterdir())
