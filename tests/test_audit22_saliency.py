"""Audit 22 of `embedscope saliency` / `embedscope saliency-agreement` (docs/methods.md §8, docs/saliency.md).

What tests/test_audit_saliency.py did not cover: the agreement numbers of the command's files against
scipy (Pearson, JSD in bits and nats, Fisher-z, block means, matching by path across files listing
the images in other orders), a 3-channel photo-kind map (black image = −mean/std) against plain
autograd, and the bugs found here: an output naming an input maps file (with --force) replaced it;
``-o X.pdf --figure X.png`` let the figure's PDF replace the maps file; a NaN / inf gradient became
an all-zero map instead of an error; ``--amp`` on the CPU was recorded as used; images without a
JSD were left out of the mean without being counted in the outputs.
"""

import contextlib
import io
import json

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon
from scipy.stats import pearsonr

from embedscope.cli import main
from embedscope.errors import EmbedscopeError
from embedscope.saliency.smoothgrad import image_seed, saliency_maps, scale_map
from embedscope.store.saliency import SaliencyMaps, load_maps, save_maps

MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])


def _run(args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def _maps_file(path, paths, maps, *, name, family, labels=None):
    n = len(paths)
    sm = SaliencyMaps(maps=np.asarray(maps, np.float32), paths=paths,
                      labels=np.zeros(n, np.int64) if labels is None else labels, class_names=["a", "b"],
                      attrs={"name": name, "family": family, "order": "paper", "n_samples": 50, "noise": 0.15})
    save_maps(path, sm)
    return path


@pytest.fixture()
def digits_ckpt(tmp_path):
    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(0)
    cfg = default_config("digits_cnn", embed_dim=8)
    cfg["loss"] = "margin"
    save_checkpoint(tmp_path / "m.pt", build_model(cfg), cfg)
    return tmp_path / "m.pt"


# ------------------------------------------------------------------------------ agreement numbers


def test_agreement_of_files_equals_scipy_from_the_definitions(tmp_path):
    """Four models' files listing partly different images in different orders: per image r =
    scipy's pearsonr, JSD = jensenshannon(P, Q, base)² of the maps divided by their sums (bits and
    nats); Fisher-z mean / population-std spread; JSD mean ± ddof-0 std; block means = arithmetic
    over the model pairs of a family block; per-image CSV and JSON rows matched by path."""
    from embedscope.saliency.run import agreement_of_files

    rng = np.random.default_rng(5)
    paths = [f"img/{k:03d}.png" for k in range(12)]
    truth = {p: rng.random((4, 6, 5)) ** 3 for p in paths}  # four models' maps of each image
    fams = ["untrained", "ranking", "classification", "ranking"]
    files = []
    for m in range(4):
        keep = [p for p in paths if not (m == 2 and p == "img/003.png")]  # model 2 lacks one image
        keep = keep[::-1] if m % 2 else list(rng.permutation(keep))  # other orders than the first file's
        f = _maps_file(tmp_path / f"m{m}.h5", keep, [truth[p][m] for p in keep], name=f"m{m}", family=fams[m])
        files.append(f)
    for unit, base in (("bits", 2), ("nats", None)):
        out = tmp_path / unit
        res = agreement_of_files(files, json_out=out.with_suffix(".json"), per_image_csv=out.with_suffix(".csv"),
                                 jsd_base=unit)
        common = [p for p in paths if p != "img/003.png"]
        assert res["n_images"] == 11 and sorted(res["paths"]) == common
        order = list(res["paths"])
        assert res["names"] == ["m1", "m3", "m2", "m0"]  # grouped: ranking, classification, untrained
        model = {nm: int(nm[1]) for nm in res["names"]}
        pair_means = {}
        for (i, j), pr in res["pairs"].items():
            a, b = model[res["names"][i]], model[res["names"][j]]
            A = [truth[p][a].astype(np.float16).astype(np.float64).ravel() for p in order]  # stored as float16
            B = [truth[p][b].astype(np.float16).astype(np.float64).ravel() for p in order]
            r = np.array([pearsonr(x, y)[0] for x, y in zip(A, B)])
            js = np.array([jensenshannon(x / x.sum(), y / y.sum(), base=base) ** 2 for x, y in zip(A, B)])
            np.testing.assert_allclose(pr["pearson"], r, rtol=0, atol=1e-12)
            np.testing.assert_allclose(pr["jsd"], js, rtol=0, atol=1e-12)
            z = np.arctanh(r)
            assert pr["r_mean"] == pytest.approx(np.tanh(z.mean()), abs=1e-12)
            assert pr["r_spread"] == pytest.approx(np.tanh(z.std(ddof=0)), abs=1e-12)
            assert pr["jsd_mean"] == pytest.approx(js.mean(), abs=1e-12)
            assert pr["jsd_std"] == pytest.approx(js.std(ddof=0), abs=1e-12)
            if base is None:
                assert js.max() <= np.log(2)
            pair_means[frozenset((fams[a], fams[b]))] = pair_means.get(frozenset((fams[a], fams[b])), []) + [
                (np.tanh(z.mean()), js.mean())]
        for blk in res["blocks"]:
            want = np.mean(pair_means[frozenset((blk["family_a"], blk["family_b"]))], axis=0)
            assert (blk["r_mean"], blk["jsd_mean"]) == pytest.approx(tuple(want), abs=1e-12)
        rr = res["blocks"][0]
        assert (rr["family_a"], rr["family_b"], rr["n_pairs"]) == ("ranking", "ranking", 1)
        doc = json.loads(out.with_suffix(".json").read_text())
        assert doc["paths"] == order
        got = doc["per_image"]["m1 vs m3"]["pearson"]
        np.testing.assert_allclose(got, [pearsonr(truth[p][1].astype(np.float16).ravel().astype(float),
                                                  truth[p][3].astype(np.float16).ravel().astype(float))[0]
                                         for p in order], atol=1e-12)


def test_images_without_a_jsd_are_counted_in_every_output(tmp_path):
    """An all-zero map has no JSD (docs/methods.md §8: NaN, counted): the pair rows (CSV, JSON) and the
    printed table say how many images the JSD mean left out (they were only dropped before)."""
    rng = np.random.default_rng(1)
    paths = [f"p{k}" for k in range(5)]
    a = rng.random((5, 4, 4))
    a[2] = 0.0
    fa = _maps_file(tmp_path / "a.h5", paths, a, name="a", family="ranking")
    fb = _maps_file(tmp_path / "b.h5", paths, rng.random((5, 4, 4)), name="b", family="ranking")
    rc, out, err = _run(["saliency-agreement", fa, fb, "--csv", tmp_path / "p.csv", "--json", tmp_path / "p.json"])
    assert rc == 0, err
    assert "undefined JSD" in out
    import csv

    row = next(csv.DictReader(open(tmp_path / "p.csv")))
    assert row["n_undefined_jsd"] == "1" and row["n_undefined_r"] == "1"
    assert json.loads((tmp_path / "p.json").read_text())["pairs"][0]["n_undefined_jsd"] == 1


# ------------------------------------------------------------------------------ nothing written is lost


def test_an_output_naming_an_input_maps_file_is_refused_even_with_force(tmp_path):
    """`saliency-agreement a.h5 b.h5 --csv a.h5 --force` replaced the maps file a.h5 by the CSV."""
    rng = np.random.default_rng(0)
    paths = ["x", "y", "z"]
    fa = _maps_file(tmp_path / "a.h5", paths, rng.random((3, 4, 4)), name="a", family="ranking")
    fb = _maps_file(tmp_path / "b.h5", paths, rng.random((3, 4, 4)), name="b", family="ranking")
    before = fa.read_bytes()
    for opt in ("--csv", "--json", "--per-image-csv"):
        rc, out, err = _run(["saliency-agreement", fa, fb, opt, fa, "--force"])
        assert rc == 2 and "is an input file" in err and len(err.strip().splitlines()) == 1
        assert fa.read_bytes() == before
    from embedscope.saliency.run import agreement_of_files

    with pytest.raises(EmbedscopeError, match="input file"):
        agreement_of_files([fa, fb], csv_out=tmp_path / "." / "b.h5", force=True)
    assert load_maps(fb).n == 3


def test_maps_file_and_figure_naming_one_file_are_refused_before_the_work(tmp_path, digits_ckpt):
    """`saliency -o X.pdf --figure X.png --force` wrote the maps to X.pdf, then the figure's PDF replaced
    them (and 'wrote X.pdf, X.png, X.pdf'); without --force the clash was found only after the work."""
    import embedscope.saliency.smoothgrad as sg

    calls = []
    real = sg._smoothgrad

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    for out, fig, extra in (("X.pdf", "X.png", ["--force"]), ("Y.png", "Y.png", []), ("Z.pdf", "Z.png", [])):
        sg._smoothgrad = spy
        try:
            rc, _, err = _run(["saliency", digits_ckpt, "--dataset", "digits", "--n-images", "2", "--n-samples", "2",
                               "-o", tmp_path / out, "--figure", tmp_path / fig, "--no-progress", *extra])
        finally:
            sg._smoothgrad = real
        assert rc == 2 and "same file" in err, err
        assert not calls and not (tmp_path / out).exists()
    # the Python API refuses an output naming the checkpoint (the command line already did)
    from embedscope.saliency.run import saliency_to_file

    before = digits_ckpt.read_bytes()
    with pytest.raises(EmbedscopeError, match="input file"):
        saliency_to_file(digits_ckpt, "digits", digits_ckpt, n_images=2, n_samples=2, force=True, progress=False)
    assert digits_ckpt.read_bytes() == before


# ------------------------------------------------------------------------------ the maps


def test_a_nan_or_inf_gradient_is_an_error_not_an_all_zero_map():
    """Post-processing compared with the minimum (NaN: every comparison false), so a NaN gradient
    became an all-zero map and the finiteness check after it never fired."""
    with pytest.raises(EmbedscopeError, match="NaN or inf"):
        scale_map(np.array([[0.1, np.nan], [0.3, 0.2]]))
    with pytest.raises(EmbedscopeError, match="NaN or inf"):
        scale_map(np.array([[0.1, np.inf], [0.3, 0.2]]))

    class Sqrt(torch.nn.Module):  # NaN embeddings where a noisy copy goes negative
        def forward(self, x):
            return torch.sqrt(x.flatten(1)[:, :6] + 0.05)

    g = torch.Generator().manual_seed(0)
    X = torch.rand(2, 1, 4, 4, generator=g)
    X[0] = 1.0 + 0.01 * X[0]  # σ = 0.005: its copies stay near 1
    X[1] = X[1] - 0.04  # σ ≈ 0.5: its copies go below -0.05
    with pytest.raises(EmbedscopeError, match="image 1.*NaN or inf"):
        saliency_maps(Sqrt(), X, n_samples=8, noise=0.5, seed=0, device="cpu")
    # image 0 alone is fine (finite gradients)
    m = saliency_maps(Sqrt(), X[:1], n_samples=8, noise=0.5, seed=0, device="cpu")
    assert np.isfinite(m).all() and m.max() == 1.0


def test_amp_on_the_cpu_is_recorded_as_not_used(tmp_path, digits_ckpt):
    """--amp is CUDA autocast; on the CPU the maps are float32, and the file said amp = bf16."""
    rc, out, err = _run(["saliency", digits_ckpt, "--dataset", "digits", "--n-images", "2", "--n-samples", "2",
                         "--amp", "bf16", "--device", "cpu", "-o", tmp_path / "a.h5", "--no-progress"])
    assert rc == 0, err
    assert "float32" in out
    assert load_maps(tmp_path / "a.h5").attrs["amp"] == "none"
    rc, _, err = _run(["saliency", digits_ckpt, "--dataset", "digits", "--n-images", "2", "--n-samples", "2",
                       "--device", "cpu", "-o", tmp_path / "b.h5", "--no-progress"])
    assert rc == 0, err
    assert np.array_equal(load_maps(tmp_path / "a.h5").maps, load_maps(tmp_path / "b.h5").maps)


def _unit(z):
    return z / torch.sqrt((z * z).sum(-1, keepdim=True))


def test_photo_kind_command_map_equals_plain_autograd(tmp_path):
    """A 3-channel shapes checkpoint through the command: each stored map equals SmoothGrad written
    from docs/methods.md §8 with torch autograd, one copy at a time: Resize(18) + CenterCrop(16) +
    ImageNet normalisation by hand, black image = −mean/std per channel, σ = 0.15 (max − min),
    Euclidean distance of L2-normalised embeddings, mean → abs → channel mean → p99 scaling; the
    stored picture is the de-normalised input. Twice the same command: the same bits."""
    from PIL import Image

    from embedscope.data import get_dataset
    from embedscope.models import build_model, default_config, load_checkpoint, save_checkpoint

    rc, _, err = _run(["make-shapes", "-o", tmp_path / "shapes", "--n-images", "30", "--size", "16", "--no-progress"])
    assert rc == 0, err
    torch.manual_seed(3)
    cfg = default_config("shapes_cnn", embed_dim=8)
    cfg.update(image_size=16, loss="margin")
    save_checkpoint(tmp_path / "s.pt", build_model(cfg), cfg)
    l, seed = 4, 7
    args = ["saliency", tmp_path / "s.pt", "--dataset", "shapes", "--root", tmp_path / "shapes", "--n-images", "3",
            "--n-samples", l, "--seed", seed, "--device", "cpu", "--no-progress"]
    assert _run(args + ["-o", tmp_path / "a.h5"])[0] == 0
    assert _run(args + ["-o", tmp_path / "b.h5", "--batch-size", "3"])[0] == 0
    assert _run(args + ["-o", tmp_path / "c.h5"])[0] == 0
    sm = load_maps(tmp_path / "a.h5")
    assert np.array_equal(sm.maps, load_maps(tmp_path / "c.h5").maps)  # bit for bit on the CPU
    assert np.abs(sm.maps - load_maps(tmp_path / "b.h5").maps).max() <= 1e-3  # batch size: float rounding
    model = load_checkpoint(tmp_path / "s.pt")[0].eval()
    ds = get_dataset("shapes", tmp_path / "shapes")
    row = {p: i for i, p in enumerate(ds.paths)}
    mean, std = torch.tensor(MEAN).view(3, 1, 1).float(), torch.tensor(STD).view(3, 1, 1).float()
    black = (-mean / std).expand(3, 16, 16)
    with torch.no_grad():
        zb = model(black[None])
    for k, p in enumerate(sm.paths):
        img = ds.load_image(row[p]).convert("RGB").resize((18, 18), Image.BILINEAR)
        img = img.crop((1, 1, 17, 17))
        v = torch.from_numpy(np.asarray(img, np.float32) / 255.0).permute(2, 0, 1)
        x = (v - mean) / std
        sigma = 0.15 * float(x.max() - x.min())
        eps = torch.randn((l, 3, 16, 16), generator=torch.Generator().manual_seed(image_seed(seed, p)))
        G = []
        for c in range(l):
            xi = (x + eps[c] * sigma).detach().requires_grad_()
            d = torch.sqrt(((_unit(model(xi[None])) - _unit(zb)) ** 2).sum())
            G.append(torch.autograd.grad(d, xi)[0].double().numpy())
        g = np.abs(np.mean(G, axis=0)).mean(axis=0)
        lo, hi = g.min(), np.percentile(g, 99)
        want = np.clip((g - lo) / (hi - lo), 0, 1)
        np.testing.assert_allclose(sm.maps[k], want, atol=2e-3)
        pic = np.round(np.clip((x.permute(1, 2, 0).numpy() * STD + MEAN), 0, 1) * 255).astype(np.uint8)
        assert np.abs(sm.images[k].astype(int) - pic).max() <= 1


def test_maps_of_different_data_sets_are_noted(tmp_path):
    """Files are matched by image path: maps of two data sets (shapes made with another seed: the same
    file names, other pictures) were compared without a word."""
    from embedscope.saliency.run import agreement_of_files
    from embedscope.store.saliency import SaliencyMaps, save_maps

    rng = np.random.default_rng(0)
    paths = [f"img/{i}.png" for i in range(6)]
    files = []
    for k, root in enumerate(("/data/shapes-seed0", "/data/shapes-seed1")):
        sm = SaliencyMaps(maps=rng.random((6, 4, 4)).astype(np.float32), paths=paths, labels=np.zeros(6, np.int64),
                          class_names=["a"], attrs={"name": f"m{k}", "family": "ranking", "order": "paper",
                                                    "n_samples": 50, "noise": 0.15, "dataset": "shapes",
                                                    "root": root})
        files.append(save_maps(tmp_path / f"m{k}.h5", sm) or tmp_path / f"m{k}.h5")
    res = agreement_of_files(files)
    assert any("different data sets or folders" in n and "shapes-seed1" in n for n in res["notes"])
    import shutil

    shutil.copy(files[0], tmp_path / "copy.h5")
    same = agreement_of_files([files[0], tmp_path / "copy.h5"], names=["a", "b"])
    assert not any("different data sets" in n for n in same["notes"])


def test_grid_images_without_grid_is_a_usage_error(tmp_path, capsys):
    """--grid-images without --grid exited 0 and did nothing."""
    rng = np.random.default_rng(0)
    paths = [f"img/{i}.png" for i in range(4)]
    a = _maps_file(tmp_path / "a.h5", paths, rng.random((4, 4, 4)), name="a", family="ranking")
    b = _maps_file(tmp_path / "b.h5", paths, rng.random((4, 4, 4)), name="b", family="ranking")
    rc, _, err = _run(["saliency-agreement", a, b, "--grid-images", "3"])
    assert rc == 2 and "--grid-images sets the images of the --grid figure" in err
    rc, _, err = _run(["saliency-agreement", a, b])
    assert rc == 0, err
