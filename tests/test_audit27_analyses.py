"""Audit 27 (evaluate, geometry, spectrum, the Python API): the cosine π of a model collapsed to
one *direction* (docs/geometry.md, docs/methods.md §3).

What was wrong: rows that are positive multiples of one vector (an unnormalised model collapsed to
one ray) have, after the rounding of their values, unit rows that differ by ~1e-8 (float32) or
~1e-16 (float64). π_intra and π_inter were those roundings (4.9e-16 and 1.2e-17 for a float32
file), and π_ratio their quotient: 39.7 for a collapsed model (Roth: higher π_ratio goes with
better R@1), where docs/geometry.md says a collapsed model has no π_ratio (0/0). Likewise class
means that share one direction gave π_inter ~1e-17 and π_ratio ~1e15 instead of inf. Now a spread
within what the rounding of the rows (their dtype) and of the computation can make of one direction
is 0, and π_ratio is NaN (or inf) with its reason, as for rows that are exactly equal.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from embedscope.metrics import alignment_uniformity, class_distances, geometry_report


def brute_pi(X, y):
    """π_intra, π_inter from the definitions (docs/methods.md §3), each distance from the
    difference of the two unit vectors (1 − cos = ‖a − b‖² / 2: no cancellation)."""
    X = np.asarray(X, dtype=np.float64)
    U = X / np.linalg.norm(X, axis=1, keepdims=True)

    def mean_pair(A):
        D = A[:, None, :] - A[None, :, :]
        return 0.5 * np.einsum("ijk,ijk->", D, D) / (len(A) ** 2 - len(A))

    classes = np.unique(y)
    intra = [mean_pair(U[y == c]) for c in classes if np.sum(y == c) >= 2]
    mus = np.array([X[y == c].mean(0) for c in classes])
    mus /= np.linalg.norm(mus, axis=1, keepdims=True)
    return float(np.mean(intra)), mean_pair(mus)


def ray(dtype, seed=0, n=200, d=16):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(d)
    X = (rng.uniform(0.5, 2.0, n)[:, None] * v).astype(dtype)
    return X, np.arange(n) % 5


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("d", [3, 16, 128])
def test_a_model_collapsed_to_one_ray_has_zero_distances_and_no_ratio(dtype, d):
    X, y = ray(dtype, seed=d, d=d)
    assert np.linalg.matrix_rank(X.astype(np.float64), tol=0) > 1 or dtype == np.float64  # not exactly one line
    g = geometry_report(X, y)
    assert g["pi_intra"] == 0.0 and g["pi_inter"] == 0.0 and math.isnan(g["pi_ratio"])
    assert g["undefined"]["pi_ratio"].startswith("pi_intra = pi_inter = 0, 0/0: a collapsed model")
    assert g["alignment"] == 0.0
    c = class_distances(X, y)
    assert c["pi_intra"] == 0.0 and c["pi_inter"] == 0.0 and math.isnan(c["pi_ratio"])
    assert np.all(c["intra_per_class"] == 0.0)
    assert alignment_uniformity(X, y)["alignment"] == 0.0


def test_the_ray_file_through_the_command(tmp_path, capsys):
    """The float32 file of the report: π_ratio was 39.7."""
    from embedscope.cli import main
    from embedscope.store import EmbeddingSet, save

    X, y = ray(np.float32)
    path = tmp_path / "ray.h5"
    save(path, EmbeddingSet.from_arrays(X, y, split="train"))
    assert main(["geometry", str(path), "--json", str(tmp_path / "g.json")]) == 0
    out = capsys.readouterr().out
    assert "pi_ratio (pi_intra = pi_inter = 0, 0/0: a collapsed model, every row in one direction)" in out
    import json

    values = json.loads((tmp_path / "g.json").read_text())["values"]
    assert values["pi_intra"] == 0.0 and values["pi_inter"] == 0.0 and values["pi_ratio"] is None


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_class_means_on_one_ray_give_an_infinite_ratio(dtype):
    """Classes with spread whose means are positive multiples of one vector: π_inter = 0 < π_intra,
    π_ratio = inf with its reason (it was ~1e15: π_intra over the rounding of the means)."""
    rng = np.random.default_rng(1)
    v = rng.standard_normal(16)
    rows = []
    for k in range(4):
        E = rng.standard_normal((10, 16))
        rows.append((k + 1) * 3 * v + E - E.mean(0))
    X = np.vstack(rows).astype(dtype)
    y = np.repeat(np.arange(4), 10)
    g = geometry_report(X, y)
    assert g["pi_inter"] == 0.0 and math.isinf(g["pi_ratio"])
    assert g["infinite"]["pi_ratio"].startswith("pi_inter = 0 < pi_intra")
    assert g["pi_intra"] == pytest.approx(brute_pi(X, y)[0], rel=1e-9)


@pytest.mark.parametrize("scale", [1e-3, 1e-5])
def test_tight_float32_classes_keep_their_values(scale):
    """Genuine spreads far above the rounding of float32 rows are not touched: a nearly collapsed
    model (one point plus relative noise of 1e-3 or 1e-5: π ~1e-7 and ~1e-11) against the definition."""
    rng = np.random.default_rng(2)
    p = rng.standard_normal(32)
    X = (p + scale * np.linalg.norm(p) * rng.standard_normal((120, 32))).astype(np.float32)
    y = np.repeat(np.arange(6), 20)
    intra, inter = brute_pi(X, y)
    for r in (geometry_report(X, y), class_distances(X, y)):
        assert r["pi_intra"] > 0 and r["pi_inter"] > 0
        assert r["pi_intra"] == pytest.approx(intra, rel=1e-6, abs=0)
        assert r["pi_inter"] == pytest.approx(inter, rel=1e-5, abs=0)
        assert r["pi_ratio"] == pytest.approx(intra / inter, rel=1e-5, abs=0)


def test_a_class_sum_that_all_but_cancels_is_not_taken_as_one_direction():
    """A class of two nearly opposite float32 rows (v and −v(1 − 2^-20), rounded) has a mean whose
    direction is ~6% rounding: its mean is not said to coincide with the other class's (a ray
    along v), though the rounding could make it so. π_inter stays the computed value (the
    definition's, on the float32 values), not 0, and π_ratio is finite."""
    rng = np.random.default_rng(3)
    v = rng.standard_normal(8)
    X = np.array([v, -v * (1 - 2 ** -20), 2 * v, 3 * v]).astype(np.float32)
    y = np.array([0, 0, 1, 1])
    g = geometry_report(X, y)
    intra, inter = brute_pi(X, y)
    assert 1e-6 < inter < 0.1  # the rounding of the cancelling class's mean, well above its floor
    assert g["pi_inter"] == pytest.approx(inter, rel=1e-6)
    assert g["pi_intra"] == pytest.approx(1.0, rel=1e-6)  # class 0: 1 − cos = 2; class 1 a ray: 0
    assert g["pi_ratio"] == pytest.approx(1.0 / inter, rel=1e-6)


# ----------------------------------------------------------------------------- (X, y) as one source
def test_an_arrays_pair_is_one_source_of_the_many_file_analyses():
    """``as_set`` takes ``(X, y)``; ``spectrum((X, y))`` and ``evaluate_many((X, y))`` took the
    tuple as two sources and failed with "expected an EmbeddingSet ..., got ndarray"."""
    from embedscope.analyses import evaluate, evaluate_many, geometry, spectrum
    from embedscope.store import EmbeddingSet

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 5)), rng.integers(0, 4, 40)
    one = spectrum((X, y), split="test")
    assert len(one) == 1 and one[0].values == geometry((X, y), split="test").values
    many = evaluate_many((X, y))
    assert len(many) == 1 and many[0].values == evaluate((X, y)).values
    assert len(evaluate_many((X.tolist(), y.tolist()))) == 1  # nested lists too
    # two sets in a tuple stay two sources
    two = evaluate_many((EmbeddingSet.from_arrays(X, y), EmbeddingSet.from_arrays(2 * X, y)))
    assert len(two) == 2


@pytest.mark.parametrize("lone, mode, want", [(1, "exclude", "1 lone query left out"),
                                              (2, "exclude", "2 lone queries left out"),
                                              (1, "zero", "1 lone query counts as 0"),
                                              (0, "zero", "0 lone queries count as 0")])
def test_evaluate_title_counts_lone_queries_in_words(lone, mode, want):
    from embedscope.analyses import evaluate

    rng = np.random.default_rng(0)
    y = np.concatenate([np.repeat(np.arange(4), 5), 10 + np.arange(lone)])  # classes of one: lone queries
    X = rng.normal(size=(len(y), 6))
    title = evaluate((X, y), lone_queries=mode).provenance["title"]
    assert title.endswith(want), title


def test_evaluate_notes_a_model_collapsed_to_one_ray_within_rounding():
    """Rows that are positive multiples of one vector, stored as float32: their directions differ by
    rounding only (~1e-8), so the cosine ranks follow rounding noise; evaluate says so (the exact
    one-direction note did not fire: the rows are not exactly one direction)."""
    from embedscope.analyses import evaluate
    from embedscope.validation import one_direction_within_rounding, one_point

    rng = np.random.default_rng(3)
    v = rng.normal(size=16)
    y = np.repeat(np.arange(5), 20)
    X = (rng.uniform(0.5, 2.0, size=(100, 1)) * v).astype(np.float32)
    U = X.astype(np.float64) / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
    assert np.any(U != U[:1]) and not one_point(X, "cosine") and one_direction_within_rounding(X)
    notes = evaluate((X, y)).provenance.get("notes", [])
    assert any("same direction within the rounding" in n for n in notes), notes
    # the Euclidean ranks are real (the rows differ in length): no note
    assert not any("rounding" in n for n in evaluate((X, y), metric="euclidean").provenance.get("notes", []))
    # rows of real spread, however tight in float32 terms, are no ray
    Xt = (v + 1e-5 * rng.normal(size=(100, 16))).astype(np.float32)
    assert not one_direction_within_rounding(Xt)
    assert not any("rounding" in n for n in evaluate((Xt, y)).provenance.get("notes", []))
    # exactly one direction: the exact note, not this one
    Xe = np.tile(v.astype(np.float32), (100, 1))
    assert one_point(Xe, "cosine") and not one_direction_within_rounding(Xe)
