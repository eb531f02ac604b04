"""Audit 44 (A): the neighbours' similarities to the digits that tell them apart, and --epochs N.

What was wrong before:

1. :func:`embedscope.viz.neighbours.similarity_digits` stopped at 5 decimals: near-duplicate images'
   cosines 0.999521, 0.999523 and 0.999524 all read "cos 0.99952" in the neighbours figure, as if tied
   (and ``print`` of the examples, at 4 decimals, read them all "0.9995").
2. ``train`` and ``train-grid`` showed ``--epochs EPOCHS`` where every other count option shows ``N``.
"""

from __future__ import annotations

import numpy as np
import pytest

NEAR = [0.999524, 0.999523, 0.999521]  # near-duplicate images' cosines (a real case)


def _examples(sim, metric="cosine"):
    from embedscope.analyses.neighbours import NeighbourExamples

    sim = np.atleast_2d(sim)
    n, k = sim.shape
    return NeighbourExamples(query_paths=np.array([f"q{i}" for i in range(n)]), query_labels=np.array(["a"] * n),
                             ref_paths=np.array([[f"r{i}{j}" for j in range(k)] for i in range(n)]),
                             ref_labels=np.array([["a"] * k] * n), similarity=sim,
                             correct=np.ones((n, k), dtype=bool), query_split="test", reference_split="test",
                             metric=metric)


# ------------------------------------------------------------------ 1. the digits that tell them apart
def test_near_duplicate_similarities_print_apart_in_the_figure():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from embedscope.viz.neighbours import draw_neighbours, similarity_digits

    assert similarity_digits(np.array([NEAR])) == 6
    assert similarity_digits(np.array([NEAR], dtype=np.float32)) == 6
    img = np.zeros((4, 4))
    fig = draw_neighbours(_examples(NEAR), [img], [[img] * 3])
    try:
        assert [ax.get_xlabel().split()[-1] for ax in fig.axes[1:4]] == ["0.999524", "0.999523", "0.999521"]
    finally:
        plt.close(fig)
    # a distance: the same digits for -d (the caption's d is its magnitude)
    assert similarity_digits(-np.array([[30.5, 30.5000001, 31.0]])) == 7


def test_ordinary_values_keep_the_short_form_and_equal_values_print_equal():
    from embedscope.viz.neighbours import similarity_digits

    assert similarity_digits(np.array([[0.91, 0.85]])) == 2
    assert similarity_digits(np.array([[0.9991, 0.9987, 0.9902]])) == 4
    assert similarity_digits(np.array([[0.999524, 0.999524, 0.5]])) == 4  # a true tie stays a tie ("0.9995": not "1.00")
    # a scaled duplicate's cosine, as the search computes it (float64 rounding): it is 1, as its neighbour's
    # (it read "1.00000", five decimals of nothing, and tied with the exact 1)
    assert similarity_digits(np.array([[1.0, 0.9999999999999996, 0.5]])) == 2
    # values that differ only beyond the precision they hold are the same value (12 significant digits
    # of a float64, 7 of a float32), not a reason for 13 decimals
    assert similarity_digits(np.array([[0.5, 0.5 + 1e-13]])) == 2
    assert similarity_digits(np.array([[0.5, 0.5 + 1e-11]])) == 11
    assert similarity_digits(np.array([[0.25, 0.25 + 1e-9]], dtype=np.float32)) == 2
    assert similarity_digits(np.array([NEAR]), hi=5) == 5  # (a cap asked for is kept)


def test_print_of_the_examples_tells_near_duplicates_apart():
    # the table read "0.9995" for all three at its 4 decimals
    ex = _examples(NEAR)
    cells = [line.split()[5] for line in ex.format().splitlines()[3:]]
    assert cells == ["0.999524", "0.999523", "0.999521"]
    assert [line.split()[5] for line in _examples([0.91, 0.85]).format().splitlines()[3:]] == ["0.9100", "0.8500"]
    assert "0.99952" not in ex.format(digits=4)  # (digits given: as asked)


def _subparsers():
    from embedscope.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices


# ------------------------------------------------------------------ 2. --epochs N
@pytest.mark.parametrize("command", ["train", "train-grid"])
def test_epochs_shows_n_as_the_other_count_options(command):
    p = _subparsers()[command]
    action = next(a for a in p._actions if "--epochs" in a.option_strings)
    assert action.metavar == "N"
    assert "--epochs N" in p.format_usage() and "EPOCHS" not in p.format_help()
