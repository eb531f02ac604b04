"""The twenty-ninth session's lead fixes (each test fails without its fix)."""
import numpy as np
import pytest

from embedscope.synthetic import nearly_collapsed


def _d2_from_differences(X):
    """Every pair's ‖u_i − u_j‖² (i < j) from the difference of the float64 unit rows."""
    U = np.asarray(X, dtype=np.float64)
    U = U / np.linalg.norm(U, axis=1, keepdims=True)
    i, j = np.triu_indices(len(U), k=1)
    diff = U[i] - U[j]
    return np.einsum("ij,ij->i", diff, diff)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("noise", [1e-6, 1e-7])
def test_exact_uniformity_of_a_nearly_collapsed_model_keeps_its_digits(noise, dtype):
    """Every pair (exact path) of rows ~1e-6 apart: uniformity ≈ −1e-11. It was 2 − 2g of the float64
    Gram matrix (error ~1e-16 on d² ~ 1e-12) and log of a mean of 1 − 1e-11 (5 digits lost): 2e-7
    to 1e-4 relative off. Reference: log E exp(−t d²) = −t E d² + t² Var d² / 2 − ... (cumulants),
    whose second term is ~1e-20 here, with d² from the difference of the unit rows."""
    from embedscope.metrics import alignment_uniformity

    X, _ = nearly_collapsed(240, 12, noise=noise, seed=3, dtype=dtype)
    y = np.arange(len(X)) % 4
    got = alignment_uniformity(X, y)
    assert got["uniformity_exact"]
    d2 = _d2_from_differences(X)
    want = -2.0 * d2.mean() + 2.0 * d2.var()
    assert want < 0 and got["uniformity"] == pytest.approx(want, rel=1e-9, abs=0)


def test_exact_uniformity_mixing_near_and_far_pairs():
    """A nearly collapsed model with far rows: the near pairs from differences, the rest from the
    Gram matrix, one log-mean-exp over both (the plain float64 formula is exact enough here: the
    result, ~−0.02, is far from 0)."""
    from embedscope.metrics import alignment_uniformity

    X, _ = nearly_collapsed(300, 16, n_out=40, far=0.3, noise=1e-7, seed=5, dtype=np.float64)
    got = alignment_uniformity(X, np.arange(len(X)) % 3)
    want = float(np.log(np.mean(np.exp(-2.0 * _d2_from_differences(X)))))
    assert got["uniformity"] == pytest.approx(want, rel=1e-11, abs=0)


def test_log_mean_exp_of_values_near_zero_and_far_below():
    """The running log-mean-exp against an exact rational computation: values all within 1e-12 of
    the max (log1p of the expm1 mean), then one far-below batch (log of the exp mean), and a new max
    in a later batch (rescaling both sums)."""
    from fractions import Fraction

    from embedscope.metrics.geometry import _logmeanexp, _logmeanexp_update

    rng = np.random.default_rng(0)
    batches = [-1e-12 * rng.random(500), -3e-12 * rng.random(700), np.array([-1e-13 * 0.5])]
    state = (-np.inf, 0.0, 0.0, 0)
    for b in batches:
        state = _logmeanexp_update(state, b)
    a = np.concatenate(batches)
    # exp(v) = 1 + v + v²/2 + ... to far below 1e-30 for |v| < 1e-11: the exact mean of 1 + v + v²/2
    m = sum(Fraction(float(v)) + Fraction(float(v)) ** 2 / 2 for v in a) / len(a)
    want = float(m - m ** 2 / 2)  # log(1 + m) = m − m²/2 + ... (m ~ 1e-12)
    assert _logmeanexp(state) == pytest.approx(want, rel=1e-12, abs=0)
    far = np.concatenate([np.array([0.0]), np.full(999, -30.0)])
    state = _logmeanexp_update(_logmeanexp_update((-np.inf, 0.0, 0.0, 0), far[500:]), far[:500])
    assert _logmeanexp(state) == pytest.approx(np.log((1 + 999 * np.exp(-30.0)) / 1000), rel=1e-14)


def test_an_analysis_asked_of_the_top_package_names_where_it_is():
    """``embedscope.evaluate(...)`` was a bare AttributeError; it now names embedscope.analyses (and a
    name that is no analysis keeps the plain message)."""
    import embedscope

    with pytest.raises(AttributeError, match=r"embedscope\.analyses\.evaluate"):
        embedscope.evaluate  # noqa: B018
    with pytest.raises(AttributeError) as e:
        embedscope.no_such_name  # noqa: B018
    assert "analyses" not in str(e.value)


@pytest.mark.parametrize("command", [["embed", "m.pt", "--dataset", "shapes", "-o", "e.h5"], ["train", "-o", "m.pt"],
                                     ["saliency", "m.pt", "-o", "s.h5", "--dataset", "shapes"],
                                     ["neighbours", "e.h5", "-o", "n.png"], ["study", "g", "-o", "s"]])
def test_an_empty_root_is_a_usage_error_for_every_command(tmp_path, monkeypatch, command):
    """``--root "$DATA"`` with the variable unset: the working folder was read as the data set (train:
    recorded as the checkpoint's folder; shapes: the whole set generated into it). One wording, exit 2,
    before anything is read."""
    from cli_run import run_cli

    monkeypatch.chdir(tmp_path)
    rc, out, err = run_cli([*command, "--root", ""])
    assert rc == 2 and "--root: the name is empty (an unset shell variable?)" in err
    assert list(tmp_path.iterdir()) == []


def test_a_train_config_with_an_empty_root_is_refused_and_digits_take_it_as_none(tmp_path, monkeypatch):
    """The API / a config file: ``root: ""`` became the working folder's absolute path before any loader
    saw it (shapes, cub200 read the working folder); the digits need no folder and take it as none."""
    from embedscope.errors import EmbedscopeError
    from embedscope.train.trainer import resolve_config

    monkeypatch.chdir(tmp_path)
    for ds in ("shapes", "cub200"):
        with pytest.raises(EmbedscopeError, match="--root is empty"):
            resolve_config({"dataset": ds, "root": ""})
    assert resolve_config({"dataset": "digits", "root": ""})["root"] is None


def test_a_tiny_value_under_approx_default_abs_is_refused():
    """tests/conftest.py: pytest.approx of a value below 1e-9 without abs= is an error (its default
    abs=1e-12 made such comparisons pass anything near the value)."""
    with pytest.raises(AssertionError, match="give abs="):
        assert 3e-12 == pytest.approx(3.7e-12, rel=1e-9)
    assert 3.7e-12 == pytest.approx(3.7e-12, rel=1e-9, abs=0)
    assert 3.7e-12 != pytest.approx(3e-12, rel=1e-9, abs=0)
    assert 0.5 == pytest.approx(0.5) and [0.0, 1.0] == pytest.approx([0.0, 1.0])
