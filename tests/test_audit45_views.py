"""Audit 45: what the figures, ``info`` and the table options show.

What was wrong before (each test failed on the code before its fix):

- ``overlay_grid`` called from Python without ``families`` titled each column with the ``family`` attribute
  alone (none for a maps file that records only its checkpoint config), while ``saliency-agreement --grid``
  derives the family from the recorded config (``family_of_maps``); ``embedscope info`` on such a file
  showed no family at all. The derivation now lives in ``embedscope.families`` (``viz`` may not import the
  saliency layer) and all three use it.
- the same-vs-different scatter zoomed each axis to its own points: the diagonal y = x was drawn at a slant
  (about 14° for the notebook's train split), so which side a point lies on, and how far, read wrong. The
  window is now square (the union of the x and y ranges, 5% margins) on equal-aspect panels.
- ``--csv -`` / ``--json -`` was refused ("standard output is not one of this command's outputs") and
  ``--csv /dev/stdout`` too ("is not a regular file"): a CSV or JSON table option now writes its table to
  standard output given ``-`` (the terminal table then to standard error); Parquet and two options at once
  are usage errors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from embedscope.cli import main

# --------------------------------------------------------------------------- 1: one family for a maps file

def _maps(path, config=None, **attrs):
    from embedscope.store.saliency import SaliencyMaps, save_maps

    rng = np.random.default_rng(len(str(path)))
    extra = {"checkpoint_config": config} if config is not None else {}
    save_maps(path, SaliencyMaps(maps=rng.random((3, 4, 4)).astype(np.float32), paths=["p0", "p1", "p2"],
                                 labels=np.zeros(3, np.int64), class_names=["a"],
                                 attrs={"name": path.stem, "order": "paper", "n_samples": 2, "noise": 0.15,
                                        **extra, **attrs}))
    return path


def _titles(fig) -> list[str]:
    return [ax.get_title() for ax in fig.axes if ax.get_title()]


@pytest.fixture
def three_maps(tmp_path):
    return [_maps(tmp_path / "arc.h5", {"loss": "arcface", "arch": "digits_cnn"}),  # no family: the config's
            _maps(tmp_path / "mar.h5", {"loss": "margin"}),
            _maps(tmp_path / "rec.h5", {"loss": "softmax"}, family="untrained")]  # a recorded family wins


def test_overlay_grid_from_python_titles_the_families_the_agreement_grid_shows(tmp_path, monkeypatch, three_maps):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import embedscope.viz.saliency as vs
    from embedscope.saliency.run import agreement_of_files
    from embedscope.store.saliency import load_maps

    shown = []
    original = vs.overlay_grid

    def spy(*a, **kw):
        fig = original(*a, **kw)
        shown.append(_titles(fig))
        return fig

    monkeypatch.setattr(vs, "overlay_grid", spy)
    agreement_of_files(three_maps, grid=tmp_path / "grid.png", grid_images=2)  # saliency-agreement --grid
    monkeypatch.undo()
    fig = vs.overlay_grid([load_maps(f) for f in three_maps], n_images=2)
    try:
        python = _titles(fig)
    finally:
        plt.close(fig)
    # (the agreement orders the columns by family: compare them as sets)
    assert sorted(python) == sorted(shown[0])
    assert sorted(python) == ["arc\n(classification)", "mar\n(ranking)", "rec\n(untrained)"]


def test_info_shows_the_family_the_agreement_gives_a_maps_file(capsys, tmp_path, three_maps):
    from embedscope.saliency.run import agreement_of_files

    families = dict(zip(*(agreement_of_files(three_maps)[k] for k in ("names", "families"))))
    capsys.readouterr()
    shown = {}
    for f in [*three_maps, _maps(tmp_path / "none.h5")]:
        assert main(["info", str(f)]) == 0
        out = capsys.readouterr().out
        rows = {ln[:19].strip(): ln[19:].strip() for ln in out.splitlines()[2:] if ln.strip()}
        shown[f.stem] = rows["family"]
    assert {k: v.split(" (")[0] for k, v in shown.items() if k != "none"} == families
    assert shown == {"arc": "classification (from its checkpoint config; no family recorded)",
                     "mar": "ranking (from its checkpoint config; no family recorded)", "rec": "untrained",
                     "none": "other (no family, checkpoint config or loss recorded)"}


def test_the_families_moved_to_a_neutral_module_keep_their_old_names():
    import embedscope.families as fam
    from embedscope.models.distances import is_untrained, trained_loss
    from embedscope.saliency.run import family_for_config, family_of_maps
    from embedscope.train.losses import LOSSES, kobs_group

    assert (family_for_config, family_of_maps, is_untrained, trained_loss) == (
        fam.family_for_config, fam.family_of_maps, fam.is_untrained, fam.trained_loss)
    assert {n: kobs_group(n) for n in LOSSES} == {n: fam.kobs_group(n) for n in LOSSES}
    assert family_of_maps({"loss": "ProxyNCA"}) == "classification" and family_of_maps({}) == "other"


# --------------------------------------------------------------------------- 2: the scatter's diagonal at 45°

def _diagonal_angle(ax) -> float:
    """The angle in degrees of the drawn diagonal y = x on the canvas (display coordinates)."""
    ax.figure.canvas.draw()
    line = ax.lines[0]
    (u0, v0), (u1, v1) = ax.transData.transform(np.column_stack([line.get_xdata()[[0, -1]],
                                                                 line.get_ydata()[[0, -1]]]))
    return float(np.degrees(np.arctan2(v1 - v0, u1 - u0)))


@pytest.mark.parametrize("same_window", [False, True])
def test_the_scatter_window_is_square_and_its_diagonal_at_45_degrees(same_window):
    """The notebook's train split: x (same-class similarity) in a narrow band near 1, y spread far below it:
    each axis was zoomed to its own points ((0.81, 1.01) against (0.19, 1.0)), the diagonal drawn at ~14°, so
    the points' distance to it read wrong."""
    import matplotlib.pyplot as plt

    from embedscope.viz.scatter import plot_same_different

    rng = np.random.default_rng(0)
    a = rng.uniform(0.9, 1.0, 400)
    train = (a, np.clip(a - rng.gamma(2, 0.08, 400), 0.2, None))
    c = rng.uniform(0.6, 0.95, 300)
    test = (c, c + rng.normal(-0.05, 0.08, 300))
    fig = plot_same_different({"train": train, "test": test}, same_window=same_window)
    try:
        for ax, (x, y) in zip(fig.axes, (train, test)):
            (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
            assert (x0, x1) == (y0, y1)
            assert x0 <= min(x.min(), y.min()) and max(x.max(), y.max()) <= x1  # every point in view
            lo, hi = (min(x.min(), y.min()), max(x.max(), y.max())) if not same_window else (
                min(train[0].min(), train[1].min(), test[0].min(), test[1].min()),
                max(train[0].max(), train[1].max(), test[0].max(), test[1].max()))
            assert (x1 - x0) <= 1.15 * (hi - lo)  # still zoomed: the union of both ranges, a small margin
            assert _diagonal_angle(ax) == pytest.approx(45.0, abs=0.01)
            box = ax.get_window_extent()
            assert box.width == pytest.approx(box.height, rel=1e-3)
    finally:
        plt.close(fig)


def test_the_square_window_at_any_scale_and_around_one_point():
    from embedscope.viz.scatter import SINGLE_POINT_WIDTH, zoom_window

    rng = np.random.default_rng(2)
    a, b = rng.uniform(5.0, 8.5, 50), rng.uniform(3.0, 8.0, 50)
    for scale in (1e-60, 1.0, 1e60):
        (x0, x1), (y0, y1) = zoom_window(a * scale, b * scale)
        assert (x0, x1) == (y0, y1)
        lo, hi = min(a.min(), b.min()), max(a.max(), b.max())
        np.testing.assert_allclose(np.array([x0, x1]) / scale, [lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo)],
                                   rtol=1e-12)
    (x0, x1), (y0, y1) = zoom_window(np.full(3, 2.0), np.full(3, 2.0))
    assert (x0, x1) == (y0, y1) and x0 < 2.0 < x1 and x1 - x0 == pytest.approx(1.1 * SINGLE_POINT_WIDTH * 2.0)
    # the fitted window of before, for who wants it
    (x0, x1), (y0, y1) = zoom_window(a, b, square=False)
    assert (x0, x1) != (y0, y1)


# --------------------------------------------------------------------------- 3: a table to standard output

@pytest.fixture(scope="module")
def emb_h5(tmp_path_factory):
    from embedscope import store

    rng = np.random.default_rng(5)
    y = np.repeat(np.arange(6), 8)
    X = (rng.normal(size=(6, 5))[y] + 0.6 * rng.normal(size=(48, 5))).astype(np.float32)
    es = store.EmbeddingSet(X, y, [f"i{i}" for i in range(48)], np.where(y < 3, "train", "test"),
                            [f"c{c}" for c in range(6)])
    return store.save(tmp_path_factory.mktemp("a45") / "e.h5", es)


def _run(args):
    from cli_run import run_cli

    return run_cli([str(a) for a in args])


def _same_table_on_stdout(args, option, path):
    """``option -`` writes to stdout the bytes ``option FILE`` writes; the terminal output goes to stderr."""
    quiet = ["--no-progress"] if args[0] == "evaluate" else []
    rc, out, err = _run([*args, option, path, *quiet])
    assert rc == 0, err
    printed = out
    rc, out, err = _run([*args, option, "-", *quiet])
    assert rc == 0, err
    if path.suffix != ".json":
        with open(path, encoding="utf-8", newline="") as f:
            expected = f.read()
        assert out == expected
    else:
        import json

        def timeless(d):  # (the provenance's run time differs between two runs)
            d.get("provenance", {}).pop("seconds", None)
            return d

        assert timeless(json.loads(out)) == timeless(json.loads(path.read_text(encoding="utf-8")))
    # the terminal table and notes: on stderr now, as they were on stdout (the 'wrote' line names stdout)
    shown = [ln for ln in printed.splitlines() if not ln.startswith("wrote ")]
    assert [ln for ln in err.splitlines() if not ln.startswith("wrote ")] == shown
    assert any(ln.startswith("wrote ") and "standard output" in ln for ln in err.splitlines())
    return out


@pytest.mark.parametrize("command,option,name", [
    ("evaluate", "--csv", "v.csv"), ("evaluate", "--json", "v.json"), ("evaluate", "--per-class", "pc.csv"),
    ("geometry", "--csv", "g.csv"), ("spectrum", "--table-csv", "t.csv"), ("spectrum", "--json", "s.json"),
])
def test_a_table_option_given_a_dash_writes_the_file_s_table_to_stdout(emb_h5, tmp_path, command, option, name):
    import csv
    import io

    out = _same_table_on_stdout([command, emb_h5], option, tmp_path / name)
    if name.endswith(".csv"):
        rows = list(csv.reader(io.StringIO(out)))
        assert len(rows) > 1 and all(len(r) == len(rows[0]) for r in rows)  # pure CSV, nothing else
    assert not list(tmp_path.glob("-*"))  # (no file named '-')


def test_saliency_agreement_tables_to_stdout(tmp_path, three_maps):
    _same_table_on_stdout(["saliency-agreement", *three_maps], "--csv", tmp_path / "pairs.csv")
    _same_table_on_stdout(["saliency-agreement", *three_maps], "--per-image-csv", tmp_path / "img.csv")
    _same_table_on_stdout(["saliency-agreement", *three_maps], "--json", tmp_path / "a.json")


def test_stdout_refusals(emb_h5, tmp_path):
    import os

    from cli_run import one_error_line

    for args, words in ((["evaluate", emb_h5, "--parquet", "-"], "--parquet -: Parquet is binary"),
                        (["spectrum", emb_h5, "--table-parquet", "-"], "--table-parquet -: Parquet is binary"),
                        (["evaluate", emb_h5, "--csv", "-", "--json", "-"], "one table at most goes to standard"),
                        (["scatter", emb_h5, "-o", "-"], "-o -: standard output is not one of this command's")):
        rc, out, err = _run(args)
        assert rc == 2 and out == "" and words in err, (args, err)
    # a device or a named pipe as a file name stays refused (exit 1), the line pointing to '-'
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in (fifo, "/dev/null"):
        rc, out, err = _run(["evaluate", emb_h5, "--csv", target, "--force", "--no-progress"])
        line = one_error_line(err, "evaluate")
        assert rc == 1 and "is not a regular file" in line and "standard output with -" in line


def test_evaluate_csv_dash_in_a_pipe_is_pure_csv(emb_h5, tmp_path):
    """The command line itself, its stdout a pipe: ``evaluate a.h5 --csv - | ...`` reads CSV only."""
    import csv
    import io
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-m", "embedscope", "evaluate", str(emb_h5), "--csv", "-", "--no-progress"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    assert [r["measure"] for r in rows][:2] == ["R@1", "R@2"] and {r["model"] for r in rows} == {"e"}
    assert "R@1" in p.stderr and "wrote standard output" in p.stderr


def test_the_torch_free_loss_families_agree_with_the_losses_train_knows():
    """embedscope.families.LOSS_FAMILIES (figures, maps files) and embedscope.train.losses.LOSSES (training)
    name the same losses with the same families, and both kobs_group give one grouping."""
    from embedscope import families
    from embedscope.errors import EmbedscopeError
    from embedscope.train import losses

    assert {n: spec.family for n, spec in losses.LOSSES.items()} == families.LOSS_FAMILIES
    for name in losses.LOSSES:
        assert losses.kobs_group(name) == families.kobs_group(name)
    assert {losses.kobs_group(n) for n in losses.LOSSES} == {"ranking", "classification"}
    with pytest.raises(EmbedscopeError, match="unknown loss"):
        losses.kobs_group("fastap")
