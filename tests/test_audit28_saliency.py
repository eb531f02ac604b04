"""Audit 28 of `embedscope saliency` / `saliency-agreement` (docs/saliency.md, docs/methods.md §8).

Bugs fixed here, each with its test below:

* ``--noise 1e308`` passed the argument check and failed after the work as "the gradient contains NaN"
  (``--noise 1e30`` wrote all-zero maps with a note blaming a collapsed model); a noise level is now
  0 to 1 (σ at most the image's value range): more is a usage error naming --noise and the range, and
  ``saliency_maps`` / ``pair_saliency_maps`` / ``saliency_to_file`` raise the same message;
* identical maps (one model compared with a copy of its file) had a Fisher-z mean r of 0.9999999 and a
  spread of 1.8e-15 (the clip at 1 − 1e-7, the mean of n equal z): now 1 and 0 exactly, the diagonal's;
* the ``--noise 0`` and ``--amp`` notes of ``saliency`` came before its summary line, and
  ``saliency-agreement``'s notes before its tables: notes now follow the results, before the ``wrote``
  line, as evaluate and geometry print them;
* the colour bar's label of the maps figures (``--figure``, ``--grid``) was longer than the bar in a
  figure of 1 or 2 rows (and the bar's "dark"/"bright" columns overlapped in a narrow figure).
"""

from __future__ import annotations

import json
import shutil

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from cli_run import run_cli  # noqa: E402

from embedscope.errors import EmbedscopeError  # noqa: E402

RANGE = "a finite number >= 0 and at most 1 (sigma as a fraction of each image's value range)"


from test_audit_saliency import _ckpt  # noqa: E402  (a digits_cnn checkpoint of a seed)


def _maps_file(path, maps, *, n_samples=50, name="m"):
    from embedscope.store.saliency import SaliencyMaps, save_maps

    n = len(maps)
    sm = SaliencyMaps(maps=maps, paths=[f"digits/{i:04d}" for i in range(n)], labels=np.arange(n) % 3,
                      class_names=["a", "b", "c"],
                      attrs={"name": name, "family": "ranking", "n_samples": n_samples, "noise": 0.15,
                             "order": "paper", "dataset": "digits", "root": "", "input_size": 8})
    save_maps(path, sm)
    return path


# ---------------------------------------------------------------- 1. --noise beyond the image's range
@pytest.mark.parametrize("value", ["1e308", "1e30", "2", "1.0001"])
def test_noise_beyond_the_value_range_is_a_usage_error_before_any_work(tmp_path, value):
    """1e308 failed after the work as a NaN gradient (exit 1); 1e30 wrote all-zero maps."""
    rc, out, err = run_cli(["saliency", tmp_path / "missing.pt", "--dataset", "digits", "--noise", value,
                            "-o", tmp_path / "m.h5"])
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "argument --noise" in lines[0] and RANGE in lines[0] and f"got {value}" in lines[0]
    assert out == "" and not (tmp_path / "m.h5").exists()


def test_noise_in_python_the_same_message(tmp_path):
    from embedscope.saliency import pair_saliency_maps, saliency_maps, saliency_to_file
    from embedscope.saliency.smoothgrad import check_noise

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 4))
    x = torch.rand(2, 1, 8, 8)
    for bad in (1e308, 2.0, float("inf"), -0.5, float("nan")):
        with pytest.raises(EmbedscopeError, match=r"^noise must be " + RANGE.replace("(", r"\(").replace(")", r"\)")):
            saliency_maps(model, x, noise=bad, n_samples=2)
        with pytest.raises(EmbedscopeError, match="noise must be a finite number >= 0 and at most 1"):
            pair_saliency_maps(model, x, x.flip(0), noise=bad, n_samples=2)
        # before the checkpoint is read (this one does not exist)
        with pytest.raises(EmbedscopeError, match="noise must be a finite number >= 0 and at most 1"):
            saliency_to_file(tmp_path / "missing.pt", "digits", tmp_path / "m.h5", noise=bad)
    assert check_noise(1) == 1.0 and np.copysign(1.0, check_noise(-0.0)) == 1.0
    m = saliency_maps(model, x, noise=1.0, n_samples=3)  # the largest level: finite maps in [0, 1]
    assert m.shape == (2, 8, 8) and np.isfinite(m).all() and m.min() >= 0 and m.max() <= 1


# ---------------------------------------------------------------- 2. identical maps: r = 1, JSD = 0 exactly
def test_identical_maps_agree_exactly_and_other_values_are_unchanged():
    import scipy.stats

    from embedscope.metrics.agreement import fisher_z_mean, jsd_per_image, map_agreement, pearson_per_image

    rng = np.random.default_rng(0)
    a = rng.random((50, 8, 8)).astype(np.float32)
    same = map_agreement(a, a.copy())
    assert same["r_mean"] == 1.0 and same["r_spread"] == 0.0  # were 0.9999999 and 1.8e-15
    assert same["jsd_mean"] == 0.0 and same["jsd_std"] == 0.0 and np.all(same["pearson"] == 1.0)
    assert same["n_clipped_r"] == 50  # still counted: r = 1 is beyond the clip
    # a copy at another alignment in memory: the same values, the same r and JSD
    shifted = np.empty(a.size + 1, np.float32)[1:].reshape(a.shape)
    shifted[...] = a
    assert np.all(pearson_per_image(a, shifted) == 1.0) and np.all(jsd_per_image(a, shifted) == 0.0)
    # equal r of distinct maps: the mean is that r, the spread 0
    eq = fisher_z_mean([0.3] * 7 + [np.nan])
    assert eq["mean"] == 0.3 and eq["spread"] == 0.0 and eq["n"] == 7 and eq["n_undefined"] == 1
    assert fisher_z_mean([-1.0, -1.0])["mean"] == -1.0
    # other maps: as scipy and a brute-force JSD (bits), and the Fisher-z mean from its definition
    b = (rng.random((50, 8, 8)) ** 3).astype(np.float32)
    res = map_agreement(a, b)
    ref_r = [scipy.stats.pearsonr(a[i].ravel().astype(np.float64), b[i].ravel().astype(np.float64))[0]
             for i in range(50)]
    np.testing.assert_allclose(res["pearson"], ref_r, rtol=0, atol=1e-13)
    p = a.reshape(50, -1).astype(np.float64)
    q = b.reshape(50, -1).astype(np.float64)
    p, q = p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True)
    m = (p + q) / 2
    ref_j = 0.5 * (p * np.log2(p / m)).sum(1) + 0.5 * (q * np.log2(q / m)).sum(1)
    np.testing.assert_allclose(res["jsd"], ref_j, rtol=1e-12, atol=1e-15)
    z = np.arctanh(np.asarray(ref_r))
    assert res["r_mean"] == pytest.approx(np.tanh(z.mean()), abs=1e-13)
    assert res["r_spread"] == pytest.approx(np.tanh(z.std()), abs=1e-13)


def test_a_maps_file_and_its_copy_agree_as_the_diagonal(tmp_path):
    """The JSON's pair cell equals the diagonal (1, 0), not 0.9999999."""
    rng = np.random.default_rng(1)
    a = _maps_file(tmp_path / "a.h5", rng.random((12, 8, 8)).astype(np.float32))
    shutil.copy(a, tmp_path / "b.h5")
    rc, out, err = run_cli(["saliency-agreement", a, tmp_path / "b.h5", "--json", tmp_path / "j.json"])
    assert rc == 0, err
    j = json.loads((tmp_path / "j.json").read_text())
    assert j["matrices"]["r_mean"] == [[1.0, 1.0], [1.0, 1.0]]
    assert j["matrices"]["r_spread"] == [[0.0, 0.0], [0.0, 0.0]]
    assert j["matrices"]["jsd_mean"] == [[0.0, 0.0], [0.0, 0.0]]
    assert j["blocks"][0]["r_mean"] == 1.0


def test_heatmap_of_identical_models_has_a_jsd_scale_to_0_01():
    """Every JSD 0 drew the JSD bar from 0 to 1e-6 (an offset label '1e−6' over the bar)."""
    from embedscope.metrics.agreement import agreement_matrix
    from embedscope.viz.saliency import agreement_heatmaps

    a = np.random.default_rng(5).random((3, 8, 8))
    for maps, want in (([a, a.copy()], 0.01), ([a, np.zeros_like(a)], 1.0)):  # identical; no JSD at all
        fig = agreement_heatmaps(agreement_matrix(maps, names=["a", "b"], families=["ranking"] * 2))
        try:
            assert fig.axes[1].images[0].get_clim() == (0.0, want)
        finally:
            plt.close(fig)


def test_undefined_agreement_prints_as_a_dash_as_evaluate_does(tmp_path):
    """A pair with an all-zero model printed 'nan' in the table (evaluate and geometry print '–')."""
    from embedscope.cli.output import UNDEFINED

    rng = np.random.default_rng(4)
    a = _maps_file(tmp_path / "a.h5", rng.random((3, 8, 8)).astype(np.float32), name="a")
    z = _maps_file(tmp_path / "z.h5", np.zeros((3, 8, 8), np.float32), name="z")
    rc, out, err = run_cli(["saliency-agreement", a, z, "--csv", tmp_path / "p.csv"])
    assert rc == 0, err
    row = next(ln for ln in out.splitlines() if ln.startswith("a ") and " z " in ln)
    assert row.split()[3:] == [UNDEFINED, UNDEFINED, "3", UNDEFINED, UNDEFINED, "3"], row
    block = next(ln for ln in out.splitlines() if ln.startswith("ranking-ranking") and "model pairs" not in ln)
    assert block.split()[1:] == ["1", UNDEFINED, UNDEFINED, "1", "1"], block
    assert "nan" not in out.lower().replace("nan, counted", "")  # (the note's "NaN, counted as undefined")
    assert ",,3," in (tmp_path / "p.csv").read_text()  # the CSV keeps empty cells


# ---------------------------------------------------------------- 3. notes after the results
def test_saliency_notes_follow_the_summary(tmp_path):
    ck = _ckpt(tmp_path / "m.pt", loss="margin")
    rc, out, err = run_cli(["saliency", ck, "--dataset", "digits", "--n-images", 2, "--n-samples", 2,
                            "--noise", "0", "--amp", "bf16", "--device", "cpu", "-o", tmp_path / "m.h5",
                            "--no-progress"])
    assert rc == 0, err
    lines = out.strip().splitlines()
    assert lines[0].startswith("2 images: SmoothGrad of the euclidean distance"), out
    assert lines[-1].startswith("wrote ")
    notes = lines[1:-1]
    assert len(notes) == 2 and all(ln.startswith("note: ") for ln in notes), out
    assert "--noise 0" in notes[0] and "--amp bf16" in notes[1]


def test_saliency_agreement_notes_follow_the_tables(tmp_path):
    rng = np.random.default_rng(2)
    a = _maps_file(tmp_path / "a.h5", rng.random((4, 8, 8)).astype(np.float32), n_samples=50, name="a")
    b = _maps_file(tmp_path / "b.h5", rng.random((4, 8, 8)).astype(np.float32), n_samples=20, name="b")
    rc, out, err = run_cli(["saliency-agreement", a, b, "--json", tmp_path / "j.json"])
    assert rc == 0, err
    lines = out.strip().splitlines()
    notes = [k for k, ln in enumerate(lines) if ln.startswith("note: ")]
    assert notes and any("different SmoothGrad settings" in lines[k] for k in notes), out
    tables = [k for k, ln in enumerate(lines) if ln.startswith(("saliency agreement on", "block means"))]
    assert len(tables) == 2 and min(notes) > max(tables) and lines[-1].startswith("wrote "), out
    assert notes == list(range(len(lines) - 1 - len(notes), len(lines) - 1))  # together, before 'wrote'
    # which file has which settings (it said only "different SmoothGrad settings (n_samples/noise)")
    assert "note: the files use different SmoothGrad settings (l = 50, noise 0.15: a; l = 20, noise 0.15: b)" in lines


def test_mixed_orders_note_names_each_models_order(tmp_path):
    from embedscope.saliency import agreement_of_files
    from embedscope.store.saliency import SaliencyMaps, save_maps

    rng = np.random.default_rng(3)
    files = []
    for name, order in (("p1", "paper"), ("c1", "code"), ("p2", "paper")):
        sm = SaliencyMaps(maps=rng.random((3, 8, 8)).astype(np.float32), paths=["x0", "x1", "x2"],
                          labels=[0, 1, 0], class_names=["a", "b"], attrs={"name": name, "order": order})
        files.append(save_maps(tmp_path / f"{name}.h5", sm))
    notes = agreement_of_files(files)["notes"]
    assert ("the files use different post-processing orders (paper: p1, p2; code: c1): compare maps of one order "
            "(docs/saliency.md)") in notes, notes


# ---------------------------------------------------------------- 4. the colour bar's label fits its bar
from test_audit_figures import pairs_maps as _pairs  # noqa: E402  (a pairs maps file of n random maps)


@pytest.mark.parametrize(("figure", "n"), [("pairs", 1), ("pairs", 2), ("pairs", 8), ("grid", 1), ("grid", 2)])
def test_colour_bar_label_is_no_longer_than_the_bar(figure, n):
    from embedscope.viz.saliency import overlay_grid, pairs_figure

    sm = _pairs(n)
    fig = pairs_figure(sm, n_pairs=n) if figure == "pairs" else overlay_grid([sm, sm], names=["a", "b"], n_images=n)
    try:
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        cax = fig.axes[-1]
        bar = cax.get_window_extent(r)
        label = cax.yaxis.label
        ext = label.get_window_extent(r)
        assert ext.height <= bar.height + 1, (ext.height, bar.height)  # was 1.5x the bar at n = 1
        assert ext.y0 >= bar.y0 - 1 and ext.y1 <= bar.y1 + 1  # beside the bar, not beyond its ends
        assert label.get_fontsize() >= 6
        # nothing of the text lost to the wrapping
        assert " ".join(label.get_text().split()) == ("saliency (0 = none, 1 = ≥ 99th percentile), as blended "
                                                      "over the image")
        # the bar's two columns ("dark", "bright") do not overlap: the bar is at least 0.24 in wide
        assert bar.width >= 0.24 * fig.dpi - 1
        # beside the pictures: it starts at their top
        tops = [ax.get_window_extent(r).y1 for ax in fig.axes[:-1]]
        assert abs(bar.y1 - max(tops)) <= 1
    finally:
        plt.close(fig)
