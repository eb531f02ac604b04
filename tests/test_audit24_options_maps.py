"""Audit 24: how the options of ``tsne``, ``yoke``, ``scatter``, ``saliency`` and ``saliency-agreement``
interact (docs/visualizations.md, docs/saliency.md).

What was wrong before:

* ``saliency --n-images 8`` and ``--n-images 16`` (same seed, data and split) picked unrelated image
  sets: ``rng.choice(N, n, replace=False)`` draws by an n-dependent algorithm. The picks are now the
  first n rows of one seeded permutation (sorted), so n = 8 ⊂ n = 16 ⊂ all.
* ``saliency --figure`` drew the first 6 images whatever ``--n-images``, without a word (now a note
  and ``--figure-images N``); ``saliency -o maps.png`` wrote the HDF5 maps file under a figure's name;
  the maps file did not record ``--train-classes``, which decides the split's images.
* ``tsne --split all --max-points N`` was stratified by class alone (``--help``: by class and split):
  a split's share of the points drifted; ``tsne --max-points N`` and ``yoke --max-points N`` kept
  different rows of the same split from 10 classes on (text keys "test:10" < "test:2").
* ``tsne``, ``yoke``, ``scatter`` with ``--force`` replaced an input file named like one of the
  figure's outputs (``emb.json`` with ``-o emb.png``).
* ``yoke --alpha 0 --yoke centroids`` said nothing about --yoke doing nothing; ``saliency-agreement
  --families rankng`` (a typo) formed a family block of its own without a word.
"""

from __future__ import annotations

import numpy as np
import pytest
from cli_run import one_error_line, run_cli

from tests.conftest import save_digits_checkpoint

_run = run_cli
_one_error_line = one_error_line


class _Split:
    """The two things select_images reads of a data set split: its length and its paths."""

    def __init__(self, n: int) -> None:
        self.paths = np.array([f"img/{k:04d}" for k in range(n)])
        self.name = "fake"

    def __len__(self) -> int:
        return len(self.paths)


@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
def test_saliency_picks_are_nested(seed):
    """n = 8 ⊂ n = 16 ⊂ n = 50 ⊂ all, each sorted and without repeats; the whole split for n >= N."""
    from embedscope.saliency.run import select_images

    ds = _Split(300)
    picks = {n: select_images(ds, n_images=n, seed=seed) for n in (1, 8, 16, 50, 300, 1000)}
    for n, idx in picks.items():
        assert len(idx) == min(n, 300) and len(set(idx.tolist())) == len(idx)
        assert np.all(np.diff(idx) > 0) and idx.dtype == np.int64
    assert np.array_equal(picks[300], np.arange(300)) and np.array_equal(picks[1000], np.arange(300))
    for small, big in ((1, 8), (8, 16), (16, 50), (50, 300)):
        assert set(picks[small].tolist()) <= set(picks[big].tolist()), (seed, small, big)
    # the seed still matters, and the same call gives the same pick
    assert np.array_equal(select_images(ds, n_images=16, seed=seed), picks[16])
    assert not np.array_equal(select_images(ds, n_images=16, seed=seed + 1), picks[16])


def test_saliency_files_of_different_n_images_share_the_smaller_ones_images(tmp_path):
    """Two real maps files of the digits (--n-images 4 and 9, same seed): the 4 images of the first are
    among the 9 of the second, with the same maps (the noise is keyed by path), so the agreement of the
    two files is over those 4 images with r = 1."""
    from embedscope.store.saliency import load_maps

    ck = save_digits_checkpoint(tmp_path / "c.pt")
    common = ["--dataset", "digits", "--n-samples", "3", "--seed", "5", "--no-progress", "--device", "cpu"]
    for n in (4, 9):
        rc, _, err = _run(["saliency", ck, *common, "--n-images", n, "-o", tmp_path / f"s{n}.h5"])
        assert rc == 0, err
    a, b = load_maps(tmp_path / "s4.h5"), load_maps(tmp_path / "s9.h5")
    assert set(a.paths) <= set(b.paths)
    pos = {p: k for k, p in enumerate(b.paths)}
    np.testing.assert_allclose(a.maps.astype(np.float64), b.maps[[pos[p] for p in a.paths]].astype(np.float64),
                               atol=2e-3)


# ---------------------------------------------------------------- saliency options


@pytest.fixture(scope="module")
def ck(tmp_path_factory):
    return save_digits_checkpoint(tmp_path_factory.mktemp("ck") / "c.pt")


SAL = ["--dataset", "digits", "--n-samples", "2", "--no-progress", "--device", "cpu"]


@pytest.mark.parametrize("name", ["maps.png", "maps.PDF"])
def test_saliency_output_named_like_a_figure_is_refused(tmp_path, ck, name):
    rc, out, err = _run(["saliency", ck, *SAL, "--n-images", "2", "-o", tmp_path / name])
    assert rc == 2 and "--figure" in _one_error_line(err, "saliency") and not out
    assert list(tmp_path.iterdir()) == []


def test_saliency_figure_images(tmp_path, ck, monkeypatch):
    """--figure-images without --figure is a usage error; the figure draws the first N images (or
    pairs) and says so when the file holds more."""
    rc, _, err = _run(["saliency", ck, *SAL, "--n-images", "3", "--figure-images", "2", "-o", tmp_path / "a.h5"])
    assert rc == 2 and "--figure" in _one_error_line(err, "saliency") and not (tmp_path / "a.h5").exists()
    import embedscope.viz.saliency as vs

    seen = []
    for fn in ("overlay_grid", "pairs_figure"):
        real = getattr(vs, fn)
        monkeypatch.setattr(vs, fn, lambda *a, _real=real, _fn=fn, **k: seen.append((_fn, k)) or _real(*a, **k))
    rc, out, err = _run(["saliency", ck, *SAL, "--n-images", "5", "-o", tmp_path / "b.h5", "--figure",
                         tmp_path / "b.png"])
    assert rc == 0, err
    assert "note: the figure draws the first 6" not in out and seen[-1] == ("overlay_grid", {"names": ["c"],
                                                                                          "n_images": 6})
    rc, out, err = _run(["saliency", ck, *SAL, "--n-images", "5", "-o", tmp_path / "c.h5", "--figure",
                         tmp_path / "c.png", "--figure-images", "2"])
    assert rc == 0, err
    assert "note: the figure draws the first 2 of the 5 images" in out and seen[-1][1]["n_images"] == 2
    rc, out, err = _run(["saliency", ck, *SAL, "--n-images", "4", "--pairs", "-o", tmp_path / "d.h5", "--figure",
                         tmp_path / "d.png", "--figure-images", "3"])
    assert rc == 0, err
    assert "note: the figure draws the first 3 of the 4 pairs" in out and seen[-1] == ("pairs_figure",
                                                                                      {"n_pairs": 3})


def test_saliency_records_train_classes(tmp_path, ck):
    """--train-classes decides which images a split holds: the maps file records it (0: the data set's own)."""
    from embedscope.data import get_dataset
    from embedscope.store.saliency import load_maps

    for tc in (None, 3):
        out = tmp_path / f"m{tc}.h5"
        rc, _, err = _run(["saliency", ck, *SAL, "--n-images", "4", "-o", out,
                           *(["--train-classes", tc] if tc else [])])
        assert rc == 0, err
        sm = load_maps(out)
        assert sm.attrs["train_classes"] == (tc or 0)
        test = get_dataset("digits", train_classes=tc).subset("test")
        assert set(sm.paths) <= set(test.paths)


def test_agreement_names_families_outside_kobs(tmp_path, ck):
    """A --families value outside ranking/classification/untrained/other (a typo) gets a note."""
    for seed in (0, 1):
        rc, _, err = _run(["saliency", ck, *SAL, "--n-images", "3", "--seed", seed, "-o", tmp_path / f"s{seed}.h5"])
        assert rc == 0, err
    files = [tmp_path / "s0.h5", tmp_path / "s1.h5"]
    # (seeds 0 and 1 pick other images: the same seed for both files)
    rc, _, err = _run(["saliency", ck, *SAL, "--n-images", "3", "--seed", 0, "--order", "code", "-o", files[1],
                       "--force"])
    assert rc == 0, err
    rc, out, err = _run(["saliency-agreement", *files, "--families", "rankng", "ranking"])
    assert rc == 0, err
    assert "note: --families rankng: not one of ranking, classification, untrained, other" in out
    rc, out, err = _run(["saliency-agreement", *files, "--families", "ranking", "other"])
    assert rc == 0 and "--families" not in out


# ---------------------------------------------------------------- t-SNE, yoke, scatter options


def _set(n_classes, train_per_class, test_per_class, seed=0, scale=1.0):
    from embedscope.store import EmbeddingSet

    rng = np.random.default_rng(seed)
    per = train_per_class + test_per_class
    y = np.repeat(np.arange(n_classes), per)
    split = np.tile(np.array(["train"] * train_per_class + ["test"] * test_per_class), n_classes)
    X = (rng.normal(size=(len(y), 5)) + y[:, None]) * scale
    return EmbeddingSet.from_arrays(X.astype(np.float32), y, split=split,
                                    paths=[f"p{k:04d}" for k in range(len(y))])


def test_tsne_split_all_subsample_is_stratified_by_split_and_class():
    """4 classes of 45 train + 5 test rows, 40 points kept: each class keeps 9 train and 1 test row
    (its share of every (split, class) stratum), for every seed; before, by class alone, a seed kept
    1 test row of 4."""
    from collections import Counter

    from embedscope.analyses import tsne

    es = _set(4, 45, 5)
    for seed in range(4):
        r = tsne(es, split="all", max_points=40, n_iter=1, seed=seed)
        counts = Counter((str(row["split"]), int(row["label"])) for row in r.table)
        assert counts == {(s, c): (9 if s == "train" else 1) for s in ("train", "test") for c in range(4)}, seed


def test_tsne_and_yoke_keep_the_same_rows_of_a_split():
    """12 classes: --max-points keeps the same rows in tsne and in yoke (and EmbeddingSet.sample)."""
    from embedscope.analyses import tsne, yoke

    a, b = _set(12, 0, 20, seed=1), _set(12, 0, 20, seed=1, scale=2.0)
    for seed in (0, 3):
        t = tsne(a, split="test", max_points=60, n_iter=1, seed=seed)
        y = yoke(a, b, split="test", max_points=60, n_iter=1, seed=seed, alpha=0)
        want = sorted(a.sample(60, seed=seed).paths)
        assert sorted(row["path"] for row in t.table) == want
        assert sorted(row["path"] for row in y.table) == want


@pytest.mark.parametrize("command", ["tsne", "yoke", "scatter"])
@pytest.mark.parametrize("input_name,output", [("emb.json", "emb.png"), ("emb.csv", "emb"), ("emb.pdf", "emb.png")])
def test_figure_outputs_never_replace_an_input(tmp_path, command, input_name, output):
    """An embedding file named like one of the outputs (PNG, PDF, CSV, JSON): refused before the work,
    even with --force, the input left as it was."""
    import hashlib

    from embedscope.store import save

    src = tmp_path / input_name
    save(src, _set(3, 10, 10))
    other = tmp_path / "other.h5"
    save(other, _set(3, 10, 10, scale=2.0))
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    files = [src, other] if command == "yoke" else [src]
    rc, out, err = _run([command, *files, "-o", tmp_path / output, "--force", "--no-progress"])
    assert rc == 2 and "is an input file" in _one_error_line(err, command) and not out
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([input_name, "other.h5"])


def test_yoke_alpha_zero_with_centroids_says_yoke_changes_nothing(tmp_path):
    """--alpha 0 --yoke centroids: a note, and the maps are those of --yoke points (independent maps)."""
    import csv

    from embedscope.store import save

    save(tmp_path / "a.h5", _set(3, 0, 12))
    save(tmp_path / "b.h5", _set(3, 0, 12, seed=2))
    common = [tmp_path / "a.h5", tmp_path / "b.h5", "--alpha", "0", "--n-iter", "5", "--no-progress"]
    rc, out, err = _run(["yoke", *common, "--yoke", "centroids", "-o", tmp_path / "c.png"])
    assert rc == 0, err
    assert "note: --alpha 0 gives independent maps: --yoke centroids changes nothing" in out
    rc, out2, err = _run(["yoke", *common, "-o", tmp_path / "p.png"])
    assert rc == 0 and "--yoke" not in out2

    def coords(p):
        with open(p) as f:
            return [[row[k] for k in ("path", "x_a", "y_a", "x_b", "y_b")] for row in csv.DictReader(f)]

    assert coords(tmp_path / "c.csv") == coords(tmp_path / "p.csv")
    rc, out, err = _run(["yoke", *common[:2], "--yoke", "centroids", "--n-iter", "5", "--no-progress",
                         "-o", tmp_path / "d.png"])
    assert rc == 0 and "--yoke" not in out


def test_saliency_noise_zero_says_the_copies_are_the_image(tmp_path, ck):
    """--noise 0 with --n-samples l > 1: l copies of the image itself; a note says so, and the maps
    equal those of --n-samples 1 (to the float16 storage's rounding)."""
    from embedscope.store.saliency import load_maps

    rc, out, err = _run(["saliency", ck, *SAL[:2], "--no-progress", "--device", "cpu", "--n-images", "4",
                         "--noise", "0", "--n-samples", "5", "-o", tmp_path / "a.h5"])
    assert rc == 0, err
    assert "note: --noise 0: the 5 copies of an image are the image itself" in out and "5 copies" in out
    rc, out, err = _run(["saliency", ck, *SAL[:2], "--no-progress", "--device", "cpu", "--n-images", "4",
                         "--noise", "0", "--n-samples", "1", "-o", tmp_path / "b.h5"])
    assert rc == 0 and "note" not in out and "1 copy," in out
    a, b = load_maps(tmp_path / "a.h5"), load_maps(tmp_path / "b.h5")
    np.testing.assert_allclose(a.maps.astype(np.float64), b.maps.astype(np.float64), atol=2 ** -11)


@pytest.mark.parametrize("command,extra", [("tsne", []), ("tsne", ["--joint"]), ("tsne", ["--split", "all"]),
                                           ("yoke", [])])
def test_too_few_points_names_max_points(tmp_path, command, extra):
    """A map of fewer than 6 points: one minimum (joint was 5, single 6) and, when --max-points made
    the selection that small, the message names it."""
    from embedscope.store import save

    save(tmp_path / "a.h5", _set(3, 10, 10))
    save(tmp_path / "b.h5", _set(3, 10, 10, scale=2.0))
    files = [tmp_path / "a.h5", tmp_path / "b.h5"] if command == "yoke" else [tmp_path / "a.h5"]
    rc, _, err = _run([command, *files, *extra, "--max-points", "4", "-o", tmp_path / "o.png", "--no-progress"])
    n = 60 if extra else 30  # 3 classes of 10 train + 10 test rows
    line = _one_error_line(err, command)
    assert rc == 1 and "at least 6" in line and f"the selection has 4 (--max-points 4 keeps 4 of {n})" in line


def test_yoke_of_one_file_twice_says_so(tmp_path):
    """yoke A.h5 A.h5 (or a link to it) runs, with a note naming the two maps of one file."""
    from embedscope.store import save

    save(tmp_path / "a.h5", _set(3, 0, 12))
    save(tmp_path / "b.h5", _set(3, 0, 12, seed=2))
    (tmp_path / "link.h5").symlink_to(tmp_path / "a.h5")
    rc, out, err = _run(["yoke", tmp_path / "a.h5", tmp_path / "b.h5", tmp_path / "link.h5", "--n-iter", "5",
                         "--no-progress", "-o", tmp_path / "y.png"])
    assert rc == 0, err
    assert "note: maps 1 and 3 are of one file" in out and "maps 1 and 2" not in out
    rc, out, err = _run(["yoke", tmp_path / "a.h5", tmp_path / "b.h5", "--n-iter", "5", "--no-progress",
                         "-o", tmp_path / "z.png"])
    assert rc == 0 and "of one file" not in out


def test_saliency_takes_the_split_the_checkpoint_was_trained_with(tmp_path):
    """A checkpoint trained with --train-classes 7 on the digits: saliency's test split is classes 7-9 (as
    embed and study take it), with a note and the value recorded; a --train-classes given is kept, with a note."""
    import torch

    from embedscope.data import get_dataset
    from embedscope.models import build_model, default_config, save_checkpoint
    from embedscope.store.saliency import load_maps

    torch.manual_seed(0)
    cfg = default_config("digits_cnn", embed_dim=8)
    cfg.update(dataset="digits", train_classes=7)
    save_checkpoint(tmp_path / "tc7.pt", build_model(cfg), cfg)
    rc, out, err = _run(["saliency", tmp_path / "tc7.pt", *SAL, "--n-images", "5", "-o", tmp_path / "m.h5"])
    assert rc == 0, err
    assert "note: --train-classes 7, the split the checkpoint was trained with" in out
    sm = load_maps(tmp_path / "m.h5")
    assert sm.attrs["train_classes"] == 7
    test7 = get_dataset("digits", train_classes=7).subset("test")
    assert set(sm.paths) <= set(test7.paths)
    assert set(np.asarray(test7.labels).tolist()) == {7, 8, 9}
    rc, out, err = _run(["saliency", tmp_path / "tc7.pt", *SAL, "--n-images", "5", "--train-classes", "5",
                         "-o", tmp_path / "m5.h5"])
    assert rc == 0, err
    assert "trained on the first 7 classes" in out and load_maps(tmp_path / "m5.h5").attrs["train_classes"] == 5


def test_yoke_inset_class_the_subsample_drops_is_refused_before_the_maps(tmp_path, monkeypatch):
    """yoke --max-points below the number of classes may keep no image of --inset-class: refused before any
    map (it failed after the t-SNE work); a class the subsample keeps still runs."""
    from embedscope.analyses.maps import subsample
    from embedscope.store import save

    es = _set(8, 0, 6)
    save(tmp_path / "a.h5", es)
    save(tmp_path / "b.h5", _set(8, 0, 6, seed=2))
    kept = set(subsample(es.subset("test"), 6, 0, by_split=True).labels.tolist())
    dropped, present = min(set(range(8)) - kept), min(kept)
    import embedscope.analyses as analyses

    calls = []
    real = analyses.yoke
    monkeypatch.setattr(analyses, "yoke", lambda *a, **k: calls.append(1) or real(*a, **k))
    args = [tmp_path / "a.h5", tmp_path / "b.h5", "--max-points", "6", "--n-iter", "5", "--no-progress"]
    rc, out, err = _run(["yoke", *args, "--inset-class", dropped, "-o", tmp_path / "y.png"])
    assert rc == 2 and not calls
    assert "--max-points 6 keeps none of its images" in _one_error_line(err, "yoke")
    rc, out, err = _run(["yoke", *args, "--inset-class", present, "-o", tmp_path / "z.png"])
    assert rc == 0, err
