"""Audit 23: degenerate but real situations of training, embedding and saliency (docs/training.md,
"A run that diverges" and "Data a batch cannot fill"; docs/saliency.md, degenerate images and
"Reading the agreement").

What was wrong before:

* a loss that became NaN stopped ``train`` without naming what was kept, and other ways of
  diverging were no one-line error naming the epoch: an optimiser step that overflowed (``--lr
  1e38``) was "RuntimeError: value cannot be converted to type float without overflow"; weights that
  became NaN on an epoch's last step (or a BatchNorm variance that overflowed, ``--lr 1e10``) were
  saved as the run's checkpoints when the epoch had no evaluation; a network collapsed to the zero
  vector stopped with the retrieval's "row 0 of X is all zeros" naming no epoch;
* ``train-grid`` stopped at the first diverging run: the runs after it never trained;
* ``embed`` of a checkpoint with a NaN weight said "the model produced NaN or inf embeddings",
  neither how many images nor which;
* ``saliency`` of a collapsed model wrote all-zero maps without a word, and the figures showed
  them as the bare image; ``saliency-agreement`` gave NaN without saying why, and 1 / 0 on the
  diagonal of a model that has no defined map; block means dropped undefined pairs uncounted;
* a test split of one-image classes stopped at the untrained evaluation with the retrieval's words;
  SPC batches repeating the images of small classes went unsaid; ``train --eval-every 0`` claimed a
  ``best.pt`` it never wrote.
"""

from __future__ import annotations

import csv
import json
import math
import pickle

import numpy as np
import pytest
import torch
from cli_run import one_error_line, run_cli

from embedscope.errors import EmbedscopeError

QUICK = {"dataset": "digits", "embed_dim": 8, "eval_every": 0}


_run = run_cli
_one_error_line = one_error_line


def _digits_batches(batch_size: int = 40) -> int:
    from embedscope.data import get_dataset

    return len(get_dataset("digits").subset("train")) // batch_size


def _nan_loss_at(monkeypatch, call: int, losses=None):
    """Make the training loss NaN at its ``call``-th evaluation (counted per loss object), for the
    losses named in ``losses`` (all when None)."""
    import embedscope.train.losses as L

    real = L.build_loss

    def build(name, *a, **k):
        fn = real(name, *a, **k)
        if losses is not None and name not in losses:
            return fn
        orig = fn.forward
        seen = [0]

        def forward(*args, **kw):
            seen[0] += 1
            out = orig(*args, **kw)
            return out * float("nan") if seen[0] == call else out

        fn.forward = forward
        return fn

    monkeypatch.setattr(L, "build_loss", build)


# ------------------------------------------------------------------------------ (1) training that diverges


def test_a_nan_loss_in_epoch_2_names_the_batch_and_keeps_epoch_1(tmp_path, monkeypatch):
    """The loss turns NaN at batch 3 of epoch 2: exit 1, one line naming epoch 2, batch 3 of the
    epoch's batches and last.pt keeping epoch 1; last.pt and the log are those of epoch 1, bit for
    bit, and no final checkpoint is written."""
    from embedscope.train.trainer import run_paths

    nb = _digits_batches()
    _nan_loss_at(monkeypatch, nb + 3)
    out = tmp_path / "d.pt"
    paths = run_paths(out)
    after_1 = {}

    import embedscope.train.trainer as T

    real_train = T.train

    def train(*a, **k):  # remember epoch 1's files as written
        def cb(epoch, row):
            if epoch == 1:
                after_1.update(last=paths["last"].read_bytes(), log=paths["log"].read_bytes())
        return real_train(*a, **{**k, "callback": cb})

    monkeypatch.setattr(T, "train", train)
    rc, _, err = _run(["train", "--dataset", "digits", "--embed-dim", "8", "--epochs", "3", "--eval-every", "0",
                       "-o", out, "--no-progress"])
    line = _one_error_line(err, "train")
    assert rc == 1
    assert f"epoch 2, batch 3 of {nb}: the loss became nan" in line
    assert f"{paths['last']} keeps epoch 1" in line and "lower --lr" in line
    assert not out.exists()
    assert paths["last"].read_bytes() == after_1["last"] and paths["log"].read_bytes() == after_1["log"]
    ck = torch.load(paths["last"], weights_only=True)
    assert ck["extra"]["epoch"] == 1 and all(torch.isfinite(v).all() for v in ck["state_dict"].values()
                                             if v.is_floating_point())
    assert [r["epoch"] for r in csv.DictReader(open(paths["log"]))] == ["0", "1"]


def test_an_optimiser_step_that_overflows_is_a_divergence_not_a_runtime_error(tmp_path):
    """--lr 1e38: Adam's first step size lr / (1 - 0.9) = 1e39 exceeds float32 (3.4e38)."""
    out = tmp_path / "o.pt"
    rc, _, err = _run(["train", "--dataset", "digits", "--embed-dim", "8", "--epochs", "1", "--eval-every", "0",
                       "--lr", "1e38", "-o", out, "--no-progress"])
    line = _one_error_line(err, "train")
    assert rc == 1 and "RuntimeError" not in line
    assert "training diverged in epoch 1, batch 1 of" in line and "optimiser step overflowed" in line
    assert "nothing was written" in line
    assert not out.exists() and not (tmp_path / "o.pt.train").exists() and not (tmp_path / "o.csv").exists()


def test_weights_that_become_nan_on_the_last_step_are_never_saved(tmp_path, monkeypatch):
    """The epoch's last optimiser step makes a weight NaN (the loss of that batch was finite, and no
    later batch sees it): without an evaluation the epoch's checkpoints were written with it."""
    nb = _digits_batches()
    real_step = torch.optim.Adam.step
    calls = [0]

    def step(self, *a, **k):
        res = real_step(self, *a, **k)
        calls[0] += 1
        if calls[0] == nb:  # the last batch of epoch 1
            with torch.no_grad():
                self.param_groups[0]["params"][0].view(-1)[0] = float("nan")
        return res

    monkeypatch.setattr(torch.optim.Adam, "step", step)
    from embedscope.train.trainer import TrainingDiverged, run_paths, train

    out = tmp_path / "w.pt"
    with pytest.raises(TrainingDiverged) as ei:
        train({**QUICK, "epochs": 1}, out, progress=False, echo=lambda s: None)
    msg = str(ei.value)
    assert "epoch 1" in msg and "the weights became NaN or inf: backbone.features.0.weight (1 of 288 values)" in msg
    assert not out.exists() and not run_paths(out)["last"].exists()
    assert ei.value.epoch == 1 and [r["epoch"] for r in ei.value.history] == [0]


def test_a_network_collapsed_to_the_zero_vector_stops_naming_the_epoch(tmp_path, monkeypatch):
    """After epoch 1 every image embeds to the zero vector: R@1 by cosine is undefined. The run
    stopped with the retrieval's 'row 0 of X is all zeros', naming no epoch."""
    import embedscope.embed as E
    from embedscope.data import get_dataset

    real = E.embed_images
    calls = [0]

    def embed_images(model, ds, **kw):
        calls[0] += 1
        X = real(model, ds, **kw)
        return np.zeros_like(X) if calls[0] > 2 else X  # epoch 0: two calls (test, train)

    monkeypatch.setattr(E, "embed_images", embed_images)
    from embedscope.train.trainer import TrainingDiverged, train

    test = get_dataset("digits").subset("test")
    with pytest.raises(TrainingDiverged) as ei:
        train({**QUICK, "eval_every": 1, "epochs": 2}, tmp_path / "z.pt", progress=False, echo=lambda s: None)
    msg = str(ei.value)
    assert msg.startswith("training diverged in epoch 1: ")
    assert f"{len(test)} of {len(test)} test images to the zero vector (the first: {test.paths[0]})" in msg
    assert not (tmp_path / "z.pt").exists()


def test_the_divergence_error_travels_between_processes_with_its_history():
    from embedscope.train.trainer import TrainingDiverged

    e = TrainingDiverged("training diverged in epoch 2: x", 2, [{"epoch": 0, "R@1": 0.5}])
    back = pickle.loads(pickle.dumps(e))
    assert isinstance(back, EmbedscopeError) and str(back) == str(e)
    assert back.epoch == 2 and back.history == [{"epoch": 0, "R@1": 0.5}]


def test_train_grid_records_a_diverged_run_and_trains_the_others(tmp_path, monkeypatch):
    """triplet diverges in epoch 1 (its loss NaN at batch 2), margin trains: both rows in grid.csv,
    the triplet row 'diverged' with the reason, exit 1 naming it. Before, the grid stopped at the
    triplet run and margin never trained."""
    _nan_loss_at(monkeypatch, 2, losses={"triplet"})
    out = tmp_path / "g"
    rc, stdout, err = _run(["train-grid", "--dataset", "digits", "--losses", "triplet", "margin", "--embed-dim", "8",
                            "--epochs", "1", "--eval-every", "0", "-o", out, "--no-progress"])
    line = _one_error_line(err, "train-grid")
    assert rc == 1 and "1 of 2 runs diverged (digits_triplet_p0_s0" in line
    rows = {r["name"]: r for r in csv.DictReader(open(out / "grid.csv"))}
    assert rows["digits_triplet_p0_s0"]["status"] == "diverged"
    assert "training diverged in epoch 1, batch 2 of" in rows["digits_triplet_p0_s0"]["failure"]
    assert rows["digits_triplet_p0_s0"]["checkpoint"] == ""
    assert rows["digits_margin_p0_s0"]["status"] == "trained" and rows["digits_margin_p0_s0"]["failure"] == ""
    assert (out / "digits_margin_p0_s0.pt").is_file() and not (out / "digits_triplet_p0_s0.pt").exists()
    assert "recorded as diverged, the grid goes on" in stdout
    # a later call that trains other runs keeps the diverged row (no checkpoint is no reason to drop it)
    monkeypatch.undo()
    rc, _, err = _run(["train-grid", "--dataset", "digits", "--losses", "contrastive", "--embed-dim", "8",
                       "--epochs", "1", "--eval-every", "0", "-o", out, "--no-progress"])
    assert rc == 0, err
    rows = {r["name"]: r for r in csv.DictReader(open(out / "grid.csv"))}
    assert rows["digits_triplet_p0_s0"]["status"] == "diverged" and len(rows) == 3
    # a study over the folder: the diverged run is an error row saying so (it tried to read the folder
    # itself as its checkpoint), the others are measured
    from embedscope.study.plan import plan_study

    entries = plan_study(out, tmp_path / "s", epoch="last", untrained=False)
    bad = [e for e in entries if e.error]
    assert [e.run for e in bad] == ["digits_triplet_p0_s0"]
    assert bad[0].error.startswith("the run diverged in train-grid: training diverged in epoch 1, batch 2 of")
    assert sorted(e.run for e in entries if not e.error) == ["digits_contrastive_p0_s0", "digits_margin_p0_s0"]


# ------------------------------------------------------------------------------ (2) embed of a NaN model


def _digits_ckpt(path, *, edit=None, embed_dim=8):
    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(0)
    cfg = default_config("digits_cnn", embed_dim=embed_dim)
    cfg["loss"] = "margin"
    model = build_model(cfg)
    if edit is not None:
        with torch.no_grad():
            edit(model)
    save_checkpoint(path, model, cfg)
    return path


def test_embed_of_a_checkpoint_with_a_nan_weight_names_the_rows_and_the_first_image(tmp_path):
    from embedscope.data import get_dataset

    ck = _digits_ckpt(tmp_path / "nan.pt", edit=lambda m: m.head.weight.view(-1).__setitem__(3, float("nan")))
    ds = get_dataset("digits")
    rc, out, err = _run(["embed", ck, "--dataset", "digits", "-o", tmp_path / "e.h5", "--no-progress"])
    line = _one_error_line(err, "embed")
    assert rc == 1
    assert f"{len(ds)} of {len(ds)} images of digits to NaN or inf (the first: row 0, {ds.paths[0]})" in line
    assert "head.weight (1 of 1024 values)" in line
    assert not (tmp_path / "e.h5").exists()


def test_embed_images_counts_only_the_rows_that_are_nan():
    """A model whose output is NaN for the images brighter than a threshold: the count and the first
    image are those rows, found here by summing the pixels independently."""
    from embedscope.data import get_dataset, image_transform
    from embedscope.embed import NonFiniteEmbeddings, embed_images

    ds = get_dataset("digits").subset("test")
    t = image_transform("digits", train=False, image_size=8)
    sums = np.array([float(t(ds.load_image(i)).sum()) for i in range(len(ds))])
    thr = float(np.quantile(sums, 0.9))
    want = np.flatnonzero(sums > thr)

    class M(torch.nn.Module):
        embed_dim = 2

        def forward(self, x):
            z = x.flatten(1)[:, :2].clone()
            z[x.flatten(1).sum(1) > thr] = float("nan")
            return z

    with pytest.raises(NonFiniteEmbeddings) as ei:
        embed_images(M(), ds, transform=t, batch_size=64, device="cpu", progress=False)
    assert list(ei.value.rows) == list(want)
    assert f"{len(want)} of {len(ds)} images of digits to NaN or inf (the first: row {want[0]}, " \
           f"{ds.paths[want[0]]}); its weights are finite" in str(ei.value)


def test_embed_writes_a_collapsed_model_and_a_zero_model_with_a_note(tmp_path):
    def collapse(m):
        m.head.weight.zero_()
        m.head.bias.fill_(0.5)

    def zero(m):
        m.head.weight.zero_()
        m.head.bias.zero_()

    from embedscope.store import load

    for name, edit, words in (("c", collapse, "all 1797 images have the same embedding"),
                              ("z", zero, "1797 of 1797 embeddings are all zeros (the first: digits/0000)")):
        ck = _digits_ckpt(tmp_path / f"{name}.pt", edit=edit)
        rc, out, err = _run(["embed", ck, "--dataset", "digits", "-o", tmp_path / f"{name}.h5", "--no-progress"])
        assert rc == 0, err
        assert f"note: {words}" in out
        X = load(tmp_path / f"{name}.h5").embeddings
        assert np.all(np.isfinite(X)) and np.all(X == X[0])


# ------------------------------------------------------------------------------ (3)/(4) saliency of a collapsed model


def _maps_file(path, paths, maps, *, name, family="ranking"):
    from embedscope.store.saliency import SaliencyMaps, save_maps

    n = len(paths)
    sm = SaliencyMaps(maps=np.asarray(maps, np.float32), paths=paths, labels=np.zeros(n, np.int64),
                      class_names=["a"], attrs={"name": name, "family": family, "order": "paper", "n_samples": 50,
                                                "noise": 0.15})
    save_maps(path, sm)
    return path


def test_saliency_of_a_collapsed_model_says_its_maps_are_all_zero(tmp_path):
    from embedscope.store.saliency import load_maps

    ck = _digits_ckpt(tmp_path / "col.pt", edit=lambda m: (m.head.weight.zero_(), m.head.bias.fill_(0.5)))
    rc, out, err = _run(["saliency", ck, "--dataset", "digits", "--n-images", "5", "--n-samples", "4",
                         "-o", tmp_path / "m.h5", "--figure", tmp_path / "m.png", "--no-progress"])
    assert rc == 0, err
    assert "note: all 5 maps of col are all zero: zero gradients" in out
    sm = load_maps(tmp_path / "m.h5")
    assert np.all(sm.maps == 0) and int(sm.attrs["n_zero_maps"]) == 5


def test_agreement_with_a_model_of_all_zero_maps_is_nan_with_its_reason(tmp_path):
    """(4): model b's maps are all zero, a's are not: r and JSD NaN on every image (not 0, not 1),
    counted, a note naming b; b has no r or JSD even with itself; the block counts the pair."""
    rng = np.random.default_rng(0)
    paths = [f"p{k}" for k in range(6)]
    a = _maps_file(tmp_path / "a.h5", paths, rng.random((6, 5, 5)), name="a")
    b = _maps_file(tmp_path / "b.h5", paths, np.zeros((6, 5, 5)), name="b")
    rc, out, err = _run(["saliency-agreement", a, b, "--json", tmp_path / "r.json", "--csv", tmp_path / "r.csv",
                         "-o", tmp_path / "h.png"])
    assert rc == 0, err
    assert "note: b: all 6 maps are all zero (zero gradients" in out and "every r and JSD with it is undefined" in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["n_zero_maps"] == {"a": 0, "b": 6} and doc["n_constant_maps"] == {"a": 0, "b": 6}
    m = doc["matrices"]
    assert m["r_mean"][0][1] is None and m["jsd_mean"][0][1] is None  # NaN, written as null
    assert m["r_mean"][0][0] == 1.0 and m["jsd_mean"][0][0] == 0.0
    assert m["r_mean"][1][1] is None and m["jsd_mean"][1][1] is None and m["n_undefined_r"][1][1] == 6
    assert doc["blocks"][0]["n_pairs_undefined_r"] == 1 and doc["blocks"][0]["n_pairs_undefined_jsd"] == 1
    row = next(csv.DictReader(open(tmp_path / "r.csv")))
    assert row["r_mean"] == "" and row["n_undefined_r"] == "6" and row["n_undefined_jsd"] == "6"
    assert "pairs without r" in out


def test_agreement_with_some_all_zero_maps_averages_the_others():
    """3 of 8 maps of b are zero: those images are NaN, the mean is the Fisher-z mean of scipy's r on
    the other 5, the diagonal stays 1 / 0, and the per-model counts say 3."""
    from scipy.stats import pearsonr

    from embedscope.metrics import agreement_matrix

    rng = np.random.default_rng(3)
    a = rng.random((8, 4, 4))
    b = 0.5 * a + rng.random((8, 4, 4))
    b[[1, 4, 6]] = 0.0
    res = agreement_matrix([a, b], names=["a", "b"], families=["ranking", "ranking"])
    pr = res["pairs"][(0, 1)]
    assert np.isnan(pr["pearson"][[1, 4, 6]]).all() and np.isnan(pr["jsd"][[1, 4, 6]]).all()
    keep = [0, 2, 3, 5, 7]
    z = [math.atanh(pearsonr(a[i].ravel(), b[i].ravel())[0]) for i in keep]
    assert pr["r_mean"] == pytest.approx(math.tanh(np.mean(z)), abs=1e-12)
    assert res["n_zero_maps"] == [0, 3] and res["n_constant_maps"] == [0, 3]
    assert res["r_mean"][1, 1] == 1.0 and res["jsd_mean"][1, 1] == 0.0 and res["n_undefined_r"][1, 1] == 3
    assert res["blocks"][0]["n_pairs_undefined_r"] == 0


def test_the_figures_say_which_maps_are_all_zero(tmp_path):
    from embedscope.metrics import agreement_matrix
    from embedscope.store.saliency import load_maps
    from embedscope.viz.figures import use_agg
    from embedscope.viz.saliency import agreement_heatmaps, overlay_grid

    use_agg()
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(1)
    paths = ["x", "y"]
    a = _maps_file(tmp_path / "a.h5", paths, rng.random((2, 4, 4)), name="a")
    b = _maps_file(tmp_path / "b.h5", paths, np.zeros((2, 4, 4)), name="b")
    fig = overlay_grid([load_maps(a), load_maps(b)], n_images=2)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts.count("all zero\n(zero gradient)") == 2  # b's two panels, none of a's
    plt.close(fig)
    res = agreement_matrix([load_maps(a).maps, load_maps(b).maps], names=["a", "b"], families=["ranking"] * 2)
    fig = agreement_heatmaps(res)
    caption = " ".join(t.get_text() for t in fig.texts).replace("\n", " ")
    assert "n/a = undefined" in caption and "b: all 2 maps all zero" in caption
    from matplotlib.colors import to_rgb

    na = [t for ax in fig.axes for t in ax.texts if t.get_text() == "n/a"]
    # dark text on the light grey of an undefined cell (it was white: unreadable)
    assert na and all(sum(to_rgb(t.get_color())) < 1.5 for t in na)
    plt.close(fig)
    # a block mean over the defined pairs says how many it left out
    c = load_maps(_maps_file(tmp_path / "c.h5", paths, rng.random((2, 4, 4)), name="c")).maps
    res = agreement_matrix([load_maps(a).maps, load_maps(b).maps, c], names=["a", "b", "c"],
                           families=["ranking", "ranking", "classification"])
    fig = agreement_heatmaps(res)
    caption = " ".join(t.get_text() for t in fig.texts).replace("\n", " ")
    assert "ranking–classification: r " in caption and "(2 pairs, 1 n/a)" in caption
    plt.close(fig)


# ------------------------------------------------------------------------------ (5) data a batch cannot fill


def _folder(root, sizes, seed=0):
    from PIL import Image

    rng = np.random.default_rng(seed)
    for k, n in enumerate(sizes):
        d = root / f"c{k}"
        d.mkdir(parents=True)
        for i in range(n):
            a = (rng.random((16, 16, 3)) * 255).astype("uint8")
            a[..., k % 3] = 200
            Image.fromarray(a).save(d / f"{i}.png")
    return root


def _train_folder(root, out, *extra):
    return _run(["train", "--dataset", "imagefolder", "--root", root, "--arch", "shapes_cnn", "--image-size", "16",
                 "--embed-dim", "4", "--epochs", "1", "-o", out, "--no-progress", *extra])


def test_a_test_split_of_one_image_classes_is_refused_before_training(tmp_path):
    root = _folder(tmp_path / "f", [4, 4, 4, 1, 1, 1])  # 3 training classes, 3 test classes of 1 image
    rc, out, err = _train_folder(root, tmp_path / "a.pt", "--batch-size", "4", "--sampler", "spc-2")
    line = _one_error_line(err, "train")
    assert rc == 1 and "every one of the 3 test classes holds a single image" in line and "--eval-every 0" in line
    assert "epoch" not in out and not (tmp_path / "a.pt.train").exists()
    rc, out, err = _train_folder(root, tmp_path / "b.pt", "--batch-size", "4", "--sampler", "spc-2",
                                 "--eval-every", "0")
    assert rc == 0, err
    assert "best.pt" not in out and not (tmp_path / "b.pt.train" / "best.pt").exists()  # none without evaluation


def test_spc_batches_that_repeat_the_images_of_small_classes_are_noted(tmp_path):
    root = _folder(tmp_path / "f", [1, 3, 6, 2, 5, 5])  # training classes c0 (1 image), c1 (3), c2 (6)
    rc, out, err = _train_folder(root, tmp_path / "s.pt", "--batch-size", "8", "--sampler", "spc-4")
    assert rc == 0, err
    note = ("note: 2 of 3 training classes have fewer than 4 images (the smallest: c0, 1): a --sampler spc-4 batch "
            "repeats their images (a class of one image is its own positive)")
    assert note in out
    assert note[len("note: "):] in next(csv.DictReader(open(tmp_path / "s.csv")))["notes"]
    root1 = _folder(tmp_path / "g", [1, 1, 1, 1, 3, 3, 3, 3])  # 4 training classes of one image each
    rc, out, err = _train_folder(root1, tmp_path / "r.pt", "--batch-size", "4", "--sampler", "random")
    assert rc == 0, err
    assert "note: every training class holds a single image: --sampler random batches have no same-class pair" in out


def test_an_epoch_whose_test_images_all_embed_at_one_point_says_so(tmp_path, monkeypatch):
    """--lr 1e9 on the digits collapsed the network to one point after epoch 1: R@1 0.2020 was logged
    as a plain number (the tie rule's), with nothing saying that every distance was a tie."""
    import embedscope.embed as E
    from embedscope.train.trainer import train

    real = E.embed_images
    calls = [0]

    def embed_images(model, ds, **kw):
        calls[0] += 1
        X = real(model, ds, **kw)
        return np.tile(X[:1], (len(X), 1)) if calls[0] > 2 else X

    monkeypatch.setattr(E, "embed_images", embed_images)
    lines = []
    train({**QUICK, "eval_every": 1, "epochs": 2}, tmp_path / "c.pt", progress=False, echo=lines.append)
    notes = [s for s in lines if s.startswith("note: epoch")]
    assert notes == ["note: epoch 1: every test image has the same embedding (the network collapsed to one point; "
                     "a lower --lr?): R@1 and MAP@R are those of a full tie (ties go to the lower index), rho is "
                     "undefined"]  # once per run
    assert lines.index(notes[0]) == [i for i, s in enumerate(lines) if s.startswith("epoch 1/2")][0] + 1


def test_a_forced_run_that_diverges_before_its_first_write_leaves_the_earlier_run(tmp_path, monkeypatch):
    from conftest import snapshot

    out = tmp_path / "r" / "x.pt"
    rc, _, err = _run(["train", "--dataset", "digits", "--embed-dim", "8", "--epochs", "0", "--eval-every", "0",
                       "-o", out, "--no-progress"])
    assert rc == 0, err
    before = snapshot(tmp_path / "r")
    _nan_loss_at(monkeypatch, 1)
    rc, _, err = _run(["train", "--dataset", "digits", "--embed-dim", "8", "--epochs", "2", "--eval-every", "0",
                       "-o", out, "--no-progress", "--force"])
    line = _one_error_line(err, "train")
    assert rc == 1 and "epoch 1, batch 1 of" in line
    assert f"nothing was written: the earlier run of {out} is kept as it was" in line
    assert snapshot(tmp_path / "r") == before


def test_parallel_train_grid_starts_the_runs_after_a_diverged_one(tmp_path):
    """--workers 2 over 3 runs that all diverge at --lr 1e20: the third starts after the first two
    diverged (a failure used to stop any further run from starting); the error travels from the
    worker process with its epoch."""
    out = tmp_path / "g"
    rc, stdout, err = _run(["train-grid", "--dataset", "digits", "--losses", "margin", "triplet", "contrastive",
                            "--embed-dim", "8", "--epochs", "1", "--eval-every", "0", "--lr", "1e20", "--workers", "2",
                            "-o", out, "--no-progress"])
    line = _one_error_line(err, "train-grid")
    assert rc == 1 and line.startswith("embedscope train-grid: error: 3 of 3 runs diverged")
    rows = list(csv.DictReader(open(out / "grid.csv")))
    assert len(rows) == 3 and {r["status"] for r in rows} == {"diverged"}
    assert all(r["failure"].startswith("training diverged in epoch 1") for r in rows)


def test_saliency_of_a_checkpoint_with_a_nan_weight_names_the_weight(tmp_path):
    ck = _digits_ckpt(tmp_path / "nan.pt", edit=lambda m: m.head.bias.__setitem__(0, float("inf")))
    rc, out, err = _run(["saliency", ck, "--dataset", "digits", "--n-images", "3", "--n-samples", "2",
                         "-o", tmp_path / "m.h5", "--no-progress"])
    line = _one_error_line(err, "saliency")
    assert rc == 1 and "the model's weights hold NaN or inf (head.bias (1 of 8 values))" in line
    assert not (tmp_path / "m.h5").exists()
