"""Audit 26 of `embedscope saliency` / `saliency-agreement` as a user runs them (docs/saliency.md,
docs/methods.md §8).

The chain on the command line: two models' maps files, their agreement printed and written, every
number recomputed here from the definitions (a SmoothGrad loop of plain autograd, scipy's ``pearsonr``
and ``jensenshannon``, the Fisher-z aggregate). Bugs found here: ``--n-images`` larger than the split
explained every image of the split without a word (the user asked for 500 and got 221, which only the
count line showed); a ``--paths-file`` path of another split was "not in the digits split", naming
no split.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon
from scipy.stats import pearsonr

from embedscope.cli import main


def _run(args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in args])
        except SystemExit as e:  # argparse's usage errors
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def _ckpt(path, seed, **config):
    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(seed)
    cfg = default_config("digits_cnn", embed_dim=8)
    cfg.update(config)
    save_checkpoint(path, build_model(cfg), cfg)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("a26sal")
    return d, _ckpt(d / "margin.pt", 0, loss="margin"), _ckpt(d / "arcface.pt", 1, loss="arcface")


def _brute_maps(ckpt, paths, *, unit_distance, l, seed, order):
    """SmoothGrad maps from the definitions (docs/methods.md §8), one image and one noisy copy at a time:
    d(f(x + eps), f(black)) on L2-normalised embeddings (Euclidean, or cosine similarity), its gradient by
    autograd; eps = N(0, 1) draws of the image's seeded generator x sigma = 0.15 (max - min);
    paper order: mean of signed gradients -> abs -> channel mean; code order: per copy |channel mean| ->
    mean; then (g - min) / (p99 - min) clipped to [0, 1] with numpy's percentile."""
    from embedscope.data import get_dataset
    from embedscope.models import load_checkpoint
    from embedscope.saliency.smoothgrad import image_seed

    model = load_checkpoint(ckpt)[0].eval().double()
    ds = get_dataset("digits")
    row = {p: i for i, p in enumerate(ds.paths)}
    with torch.no_grad():
        zb = torch.nn.functional.normalize(model(torch.zeros(1, 1, 8, 8, dtype=torch.float64)), dim=1)[0]
    out = []
    for p in paths:
        x = torch.from_numpy(np.asarray(ds.load_image(row[p]), np.float64) / 16.0)[None]
        sigma = 0.15 * float(x.max() - x.min())
        g = torch.Generator().manual_seed(image_seed(seed, p))
        eps = torch.randn((l, 1, 8, 8), generator=g, dtype=torch.float32).double() * sigma
        grads = []
        for k in range(l):
            xk = (x + eps[k]).unsqueeze(0).requires_grad_()
            z = torch.nn.functional.normalize(model(xk), dim=1)[0]
            d = torch.dot(z, zb) if unit_distance == "cosine" else torch.linalg.norm(z - zb)
            (gk,) = torch.autograd.grad(d, xk)
            grads.append(gk[0].numpy())
        G = np.stack(grads)  # [l, C, H, W]
        m = np.abs(G.mean(axis=0)).mean(axis=0) if order == "paper" else np.abs(G.mean(axis=1)).mean(axis=0)
        lo, hi = m.min(), np.percentile(m, 99)
        out.append(np.clip((m - lo) / (hi - lo), 0, 1))
    return np.stack(out)


@pytest.mark.parametrize("order", ["paper", "code"])
def test_command_chain_numbers_equal_the_definitions(models, tmp_path, order):
    """saliency (margin: Euclidean, arcface: cosine) -> saliency-agreement: the stored maps equal the
    brute-force SmoothGrad maps; the printed table, the CSV and the JSON equal scipy's Pearson r and JSD
    (bits) of the stored (float16) maps, aggregated in Fisher-z space with the population std."""
    d, margin, arcface = models
    files = []
    for ck in (margin, arcface):
        f = tmp_path / f"{ck.stem}.h5"
        rc, out, err = _run(["saliency", ck, "--dataset", "digits", "--n-images", "12", "--n-samples", "6",
                             "--seed", "4", "--order", order, "-o", f, "--no-progress"])
        assert rc == 0, err
        files.append(f)
    import h5py

    maps, paths = [], None
    for f, ck, dist in zip(files, (margin, arcface), ("euclidean", "cosine")):
        with h5py.File(f) as h:
            m = h["maps"][()].astype(np.float64)
            p = [s.decode() if isinstance(s, bytes) else s for s in h["paths"][()]]
        paths = paths or p
        assert p == paths  # the same images for both models
        want = _brute_maps(ck, p, unit_distance=dist, l=6, seed=4, order=order)
        np.testing.assert_allclose(m, want, atol=1e-3)  # float16 storage: 2^-11 relative
        maps.append(m)
    r = np.array([pearsonr(a.ravel(), b.ravel())[0] for a, b in zip(*maps)])
    js = np.array([jensenshannon(a.ravel() / a.sum(), b.ravel() / b.sum(), base=2) ** 2 for a, b in zip(*maps)])
    z = np.arctanh(r)
    want = {"r_mean": np.tanh(z.mean()), "r_spread": np.tanh(z.std(ddof=0)), "jsd_mean": js.mean(),
            "jsd_std": js.std(ddof=0)}
    rc, out, err = _run(["saliency-agreement", *files, "--csv", tmp_path / "pairs.csv", "--json",
                         tmp_path / "agr.json", "--per-image-csv", tmp_path / "img.csv"])
    assert rc == 0, err
    row = next(csv.DictReader((tmp_path / "pairs.csv").open()))
    doc = json.loads((tmp_path / "agr.json").read_text())
    for k, v in want.items():
        assert float(row[k]) == pytest.approx(v, abs=1e-12)
        assert doc["pairs"][0][k] == pytest.approx(v, abs=1e-12)
    table = next(line for line in out.splitlines() if line.startswith("margin"))
    assert table.split()[3:8] == [f"{want['r_mean']:.4f}", f"{want['r_spread']:.4f}", "0",
                                  f"{want['jsd_mean']:.4f}", f"{want['jsd_std']:.4f}"]
    per = list(csv.DictReader((tmp_path / "img.csv").open()))
    assert [x["path"] for x in per] == paths
    np.testing.assert_allclose([float(x["pearson"]) for x in per], r, atol=1e-12)
    np.testing.assert_allclose([float(x["jsd"]) for x in per], js, atol=1e-12)


def test_more_images_asked_than_the_split_holds_is_noted(models, tmp_path):
    """Regression: --n-images beyond the split explained the whole split silently."""
    from embedscope.data import get_dataset

    n_test = len(get_dataset("digits").subset("test"))
    _, margin, _ = models
    rc, out, err = _run(["saliency", margin, "--dataset", "digits", "--n-images", str(n_test + 100), "--n-samples",
                         "1", "-o", tmp_path / "all.h5", "--no-progress"])
    assert rc == 0, err
    assert out.startswith(f"{n_test} images:")
    assert (f"note: --n-images {n_test + 100}: the test split of digits holds {n_test} images; all {n_test} are "
            "explained") in out
    rc, out, err = _run(["saliency", margin, "--dataset", "digits", "--n-images", "5", "--n-samples", "1",
                         "-o", tmp_path / "five.h5", "--no-progress"])
    assert rc == 0 and "--n-images" not in out  # no note when the split holds them


def test_a_paths_file_image_of_another_split_names_the_split(models, tmp_path):
    """Regression: "1 of 1 listed paths are not in the digits split" for a training image: which split?"""
    from embedscope.data import get_dataset

    _, margin, _ = models
    train = get_dataset("digits").subset("train").paths[0]
    pf = tmp_path / "paths.txt"
    pf.write_text(f"{train}\n")
    rc, out, err = _run(["saliency", margin, "--dataset", "digits", "--paths-file", pf, "-o", tmp_path / "x.h5",
                         "--no-progress"])
    assert rc == 1 and out == ""
    assert err.strip() == (f"embedscope saliency: error: {pf}: 1 of 1 listed paths are not in the test split of "
                           f"digits (e.g. {train})")
    rc, out, err = _run(["saliency", margin, "--dataset", "digits", "--split", "train", "--paths-file", pf,
                         "-o", tmp_path / "x.h5", "--no-progress", "--n-samples", "1"])
    assert rc == 0, err
