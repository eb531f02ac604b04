"""Audit 23 (profiling of everyday commands): work done without heavy imports must equal what the
heavy import gave. The digits come from the CSV scikit-learn's loader reads (found, not imported:
1.1-1.5 s of every digits command), and NR-Prec's one-sided p-value from math.erfc instead of
scipy.stats (0.6-0.8 s of every `properties`)."""

import math
import subprocess
import sys

import numpy as np
import pytest


def test_digits_arrays_equal_scikit_learns_loader():
    from sklearn.datasets import load_digits

    from embedscope.data.digits import _digits_arrays

    images, labels = _digits_arrays()
    d = load_digits()
    assert images.dtype == np.float32 and labels.dtype == np.int64
    np.testing.assert_array_equal(images, d.images.astype(np.float32))
    np.testing.assert_array_equal(labels, d.target)


def test_digits_dataset_does_not_import_scikit_learn():
    code = ("import sys; from embedscope.data.digits import load_digits_dataset; ds = load_digits_dataset(); "
            "print(len(ds.labels), 'sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1797", "False"]


@pytest.mark.parametrize("z", [-3.0, -0.5, 0.0, 0.1, 1.0, 2.576, 5.0, 12.0, 30.0, 38.0])
def test_one_sided_p_equals_scipy(z):
    """Equal to 1e-12 relative; beyond z = 37.5 scipy gives 0 where erfc still has a subnormal."""
    from scipy.stats import norm

    p = 0.5 * math.erfc(z / math.sqrt(2.0))
    assert p == pytest.approx(norm.sf(z), rel=1e-12, abs=0.0) if z < 37 else (p < 1e-300 and norm.sf(z) < 1e-300)


def test_property_p_value_equals_scipys_normal_tail():
    from scipy.stats import norm

    from embedscope.metrics import property_precision

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(6), 30)
    X = rng.normal(size=(6, 8))[y] + 1.5 * rng.normal(size=(180, 8))
    res = property_precision(X, {"p": y})["p"]
    assert res["p_value"] == pytest.approx(norm.sf(res["z"]), rel=1e-12, abs=0)  # z ~ 29: both within ~1e-13 of the exact tail


def test_neighbours_photos_are_drawn_without_resampling():
    """Photos are drawn with interpolation 'none': the PDF keeps their pixels and the viewer scales
    them (resampled at 200 dpi they cost 1.6 s of a 5 s run and twice the bytes)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from embedscope.analyses.neighbours import NeighbourExamples
    from embedscope.viz import neighbours as nb

    ex = NeighbourExamples(query_paths=np.array(["q"]), query_labels=np.array(["a"]),
                           ref_paths=np.array([["r1", "r2"]]), ref_labels=np.array([["a", "b"]]),
                           similarity=np.array([[0.9, 0.5]]), correct=np.array([[True, False]]),
                           query_split="test", reference_split="test", metric="cosine")
    img = np.full((30, 30, 3), 128, dtype=np.uint8)
    fig = nb.draw_neighbours(ex, [img], [[img, img]])
    assert [im.get_interpolation() for ax in fig.axes for im in ax.get_images()] == ["none"] * 3
    plt.close(fig)
