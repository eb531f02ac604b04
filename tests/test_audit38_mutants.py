"""Session 38, mutation testing of the image-properties measures (docs/methods.md §9) and of the agreement,
scatter and yoked t-SNE code: a test for each mutant that survived the suite and changed what a user gets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.metrics import properties as P
from embedscope.metrics.agreement import (
    R_CLIP,
    agreement_matrix,
    fisher_z_mean,
    jsd_per_image,
    map_agreement,
    pearson_per_image,
)
from embedscope.metrics.neighbours import nearest_same_different, share_below_diagonal
from embedscope.metrics.properties import property_precision


def test_the_permutation_p_value_counts_shuffles_equal_up_to_rounding():
    """§9: p = (1 + #shuffles with NR-Prec >= the observed) / (1 + permutations). Here shuffles give the
    observed NR-Prec up to the last bit (-0.288675134594813 vs -0.2886751345948129): they count (without
    the rounding tolerance p was 0.5545, not 0.6337)."""
    X = np.array([1.0, 0.0, 7.0, 5.0, 6.0, 4.0, 2.0, 3.0])[:, None]
    v = np.array([2, 2, 1, 2, 0, 1, 2, 0])
    r = property_precision(X, {"v": v}, permutations=100, seed=1)["v"]
    # the null drawn as property_precision draws it, then counted from the formula with a rounding margin
    eng = P._Engine(X, "euclidean")
    codes = P._encode(v, 8, "v")[None]
    Nv = np.bincount(codes[0])[codes]
    null = P._permuted_nr_prec(eng, codes, Nv - 1, Nv, 100, 1, False)[0]
    reach = np.round(null, 9) >= np.round(r["NR-Prec"], 9)
    assert (null != r["NR-Prec"]).any() and (np.round(null, 9) == np.round(r["NR-Prec"], 9)).any()
    assert r["perm_p_value"] == (1 + reach.sum()) / 101


def test_a_cap_beyond_int64_caps_nothing_and_the_asked_cap_is_reported():
    """max_r = 10**30 overflowed inside
    a cap beyond the rows was reported as the row count (a table said
    max_r 40 where the provenance said 1023)."""
    X = np.random.default_rng(0).normal(size=(40, 3))
    v = np.arange(40) % 4
    plain = property_precision(X, {"v": v})["v"]
    huge = property_precision(X, {"v": v}, max_r=10**30)["v"]
    assert huge["NR-Prec"] == plain["NR-Prec"] and not huge["capped"]
    asked = property_precision(X, {"v": v}, max_r=1023)["v"]
    assert asked["max_r"] == 1023 and not asked["capped"] and asked["NR-Prec"] == plain["NR-Prec"]
    capped = property_precision(X, {"v": v}, max_r=3)["v"]
    assert capped["max_r"] == 3 and capped["capped"]


def test_too_many_permutations_are_refused_before_any_work(monkeypatch):
    def ran(*a, **k):
        raise AssertionError("the permutations ran")

    monkeypatch.setattr(P, "_permuted_nr_prec", ran)
    X = np.random.default_rng(0).normal(size=(8, 2))
    with pytest.raises(EmbedscopeError, match="permutations"):
        property_precision(X, {"a": np.arange(8) % 2}, permutations=P.MAX_PERMUTATIONS + 1)


# ------------------------------------------------------------------ saliency-map agreement (docs/methods.md §8)
def test_jsd_refuses_negative_values_in_either_map():  # A09
    a = np.ones((1, 2, 2))
    b = np.ones((1, 2, 2))
    b[0, 0, 0] = -0.5
    with pytest.raises(EmbedscopeError):
        jsd_per_image(a, b)
    with pytest.raises(EmbedscopeError):
        jsd_per_image(b, a)


def test_jsd_never_negative_for_near_identical_maps():  # A11
    rng = np.random.default_rng(1)
    a = rng.random((200, 16))
    b = a * (1 + rng.normal(0, 1e-12, a.shape))
    assert np.all(jsd_per_image(a, b) >= 0)


def test_jsd_is_scale_free_at_extreme_scales():  # A15
    a = np.array([[[1e308, 1e308], [0.0, 1e308]]])
    b = np.array([[[1e308, 0.0], [1e308, 1e308]]])
    assert jsd_per_image(a, b)[0] == pytest.approx(jsd_per_image(a / 1e308, b / 1e308)[0], rel=1e-12)
    t = np.array([[[5e-324, 5e-324], [0.0, 5e-324]]])
    assert jsd_per_image(t, b)[0] == pytest.approx(jsd_per_image(a / 1e308, b / 1e308)[0], rel=1e-12)


def test_r_equal_to_the_clip_bound_is_not_counted_clipped():  # A17
    assert fisher_z_mean([R_CLIP, 0.5])["n_clipped"] == 0
    assert fisher_z_mean([1.0, 0.5])["n_clipped"] == 1


@pytest.mark.parametrize("bad", [1.0000001, 1.2, -1.5])
def test_fisher_z_refuses_r_outside_minus_one_one(bad):  # A21
    with pytest.raises(EmbedscopeError):
        fisher_z_mean([bad, 0.5])


def test_jsd_std_is_population_std_and_mean_is_arithmetic():  # A24, A25
    a = np.array([[[1.0, 0.0]], [[1.0, 1.0]], [[1.0, 1.0]]])
    b = np.array([[[0.0, 1.0]], [[1.0, 1.0]], [[1.0, 1.0]]])
    res = map_agreement(a, b)
    assert res["jsd"].tolist() == [1.0, 0.0, 0.0]
    assert res["jsd_mean"] == pytest.approx(1 / 3) and res["jsd_std"] == pytest.approx(np.std([1, 0, 0]))


def test_diagonal_of_a_model_with_only_constant_maps():  # A26, A27, A30
    rng = np.random.default_rng(0)
    good = rng.random((3, 4, 4))
    const = np.full((3, 4, 4), 0.5)
    zero = np.zeros((3, 4, 4))
    res = agreement_matrix([good, const, zero])
    assert res["r_mean"][0, 0] == 1.0 and math.isnan(res["r_mean"][1, 1]) and math.isnan(res["r_mean"][2, 2])
    assert res["jsd_mean"][1, 1] == 0.0 and math.isnan(res["jsd_mean"][2, 2])  # constant non-zero: uniform
    assert res["n_undefined_r"][1, 1] == 3 and res["n_undefined_r"][0, 0] == 0


def test_block_mean_skips_undefined_pairs():  # A29, A32
    rng = np.random.default_rng(0)
    m = [rng.random((3, 4, 4)), rng.random((3, 4, 4)), np.full((3, 4, 4), 0.5)]
    res = agreement_matrix(m, families=["ranking"] * 3)
    blk = res["blocks"][0]
    assert blk["n_pairs_undefined_jsd"] == 0  # A32: a constant non-zero map has a JSD
    assert blk["n_pairs_undefined_r"] == 2 and blk["r_mean"] == pytest.approx(res["r_mean"][0, 1])


def test_complex_maps_are_refused():  # A35
    a = np.ones((1, 2, 2), dtype=complex)
    a[0, 0, 0] = 2 + 1j
    with pytest.raises(EmbedscopeError):
        pearson_per_image(a, np.abs(a))


# ------------------------------------------------------------------ same-vs-different scatter (§10)
def test_a_tie_is_not_below_the_diagonal():  # N01 (docs/methods.md §10: s_diff < s_same strictly)
    assert share_below_diagonal([0.5, 0.9], [0.5, 0.1]) == (0.5, 0)


def test_points_without_s_diff_are_left_out_and_counted():  # N02, N03
    assert share_below_diagonal([0.9, 0.8, 0.7], [np.nan, 0.85, 0.1]) == (0.5, 1)
    share, lone = share_below_diagonal([np.nan, 0.8], [np.nan, 0.1])
    assert share == 1.0 and lone == 1


def test_scatter_with_ties_reports_the_upper_bound_and_tie_column():  # N07, N20, N21
    from embedscope.analyses.neighbours import scatter
    X = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    y = np.array([0, 0, 1, 1])
    r = scatter((X, y), metric="dot")
    v = r.values  # s_same = [1, 1, 0, 0], s_diff = [1, 1, 1, 0]: three ties, none below
    assert v["tied_test"] == 3 and v["below_diagonal_test"] == 0.0 and v["below_or_tied_test"] == pytest.approx(0.75)
    assert [row["below_diagonal"] for row in r.table] == [0.0] * 4
    assert [row["tied"] for row in r.table] == [1.0, 1.0, 0.0, 1.0]


def test_scatter_refuses_a_split_of_lone_images():  # N08, N19
    from embedscope.analyses.neighbours import scatter
    with pytest.raises(EmbedscopeError):
        scatter((np.eye(3), np.array([0, 1, 2])))
    with pytest.raises(EmbedscopeError):
        scatter((np.eye(3), np.array([0, 0, 0])))


def test_class_of_one_has_no_s_same():  # N11
    X = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    s_same, s_diff = nearest_same_different(X, [0, 0, 1])
    assert math.isnan(s_same[2]) and np.isfinite(s_diff).all()


def test_a_near_tie_is_not_a_tie():  # N21
    from embedscope.analyses.neighbours import scatter
    X = np.array([[1.0, 0.0], [1.0, 0.0], [1.0 + 1e-9, 0.0], [0.0, 1.0]])
    r = scatter((X, np.array([0, 0, 1, 1])), metric="dot")
    # s_same = [1, 1, 0, 0], s_diff = [1+1e-9, 1+1e-9, 1, 0]: only point 3 is tied
    assert r.values["tied_test"] == 1


# ------------------------------------------------------------------ yoked t-SNE (§10)
def test_mean_centroid_displacement_weighs_unequal_classes():
    from embedscope.tsne import yoked_tsne_maps
    rng = np.random.default_rng(0)
    y = np.array([0] * 20 + [1] * 6 + [2] * 4)
    A = rng.normal(size=(30, 5)) + y[:, None]
    B = A + rng.normal(scale=0.5, size=A.shape)
    Ys, info = yoked_tsne_maps([A, B], yoke="centroids", labels=y, alpha=0.05, seed=1, n_iter=30,
                               early_exaggeration_iter=10, negative_gradient_method="exact", return_info=True)
    size = np.bincount(y)
    d = np.array([np.linalg.norm(Ys[0][y == c].mean(0) - Ys[1][y == c].mean(0)) for c in range(3)])
    assert info["mean_centroid_displacement"] == pytest.approx(np.sum(size * d) / size.sum(), rel=1e-12)
    assert not np.isclose(np.sum(size * d) / size.sum(), d.mean(), rtol=1e-6)
