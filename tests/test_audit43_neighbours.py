"""Audit 43 (J): leftovers of the figures audit, and a fresh user's pass over ``embedscope neighbours``."""

from __future__ import annotations

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError


def _blobs(n=12, d=4, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    return rng.normal(size=(n, d)) + 3 * np.eye(d)[y], y


def test_scatter_of_a_split_the_file_lacks_says_so(tmp_path, capsys):
    # "--split val" on a file without val rows said "the val split has 0 classes"
    from embedscope import store
    from embedscope.cli import main
    from embedscope.store import EmbeddingSet

    X, y = _blobs()
    store.save(tmp_path / "t.h5", EmbeddingSet.from_arrays(X, y))  # every row 'test'
    rc = main(["scatter", str(tmp_path / "t.h5"), "--split", "val", "-o", str(tmp_path / "s.png")])
    err = capsys.readouterr().err
    assert rc == 1 and "has no 'val' rows" in err and "0 classes" not in err and "has 0" not in err


@pytest.mark.parametrize("name", ["", " "])
def test_spectrum_refuses_an_empty_name_as_yoke_does(tmp_path, capsys, name):
    # spectrum --names "" drew the file's name in the legend, yoke --names "" was refused (exit 2)
    from embedscope.cli import main

    rc = main(["spectrum", "a.h5", "--names", name, "-o", str(tmp_path / "sp.png")])  # refused before reading
    assert rc == 2 and "--names: name 1 is empty" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_one_minimum_of_points_for_every_map():
    # effective_perplexity said "at least 5" where the analyses said "at least 6" (five points mapped by
    # single_tsne, refused by embedscope tsne)
    from embedscope.tsne import MIN_POINTS, effective_perplexity, single_tsne

    assert MIN_POINTS == 6
    with pytest.raises(EmbedscopeError, match="t-SNE needs at least 6 points, got 5"):
        effective_perplexity(30, 5)
    X, _ = _blobs(5)
    with pytest.raises(EmbedscopeError, match="at least 6 points"):
        single_tsne(X, perplexity=30, n_iter=1, early_exaggeration_iter=1)
    assert effective_perplexity(30, 6) == pytest.approx(5 / 3)
