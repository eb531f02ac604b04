"""SmoothGrad saliency maps (embedscope.saliency; docs/methods.md §8), the maps file and the two commands."""

import json

import numpy as np
import pytest
import torch
from torch import nn

from embedscope.cli import main
from embedscope.errors import EmbedscopeError
from embedscope.saliency.smoothgrad import image_seed, noise_sigma, pair_saliency_maps, saliency_maps, smoothgrad_noise
from embedscope.store.saliency import SaliencyMaps, load_maps, save_maps


def _net(c=3, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(c, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.Conv2d(6, 8, 3, padding=1),
                         nn.Tanh(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, 7))


def _images(n=3, c=3, s=10, seed=1):
    return torch.randn(n, c, s, s, generator=torch.Generator().manual_seed(seed))


def _scale(g):
    lo, hi = g.min(), np.percentile(g, 99)
    return np.clip((g - lo) / (hi - lo), 0, 1)


def _unit(z):
    return z / torch.sqrt((z * z).sum(-1, keepdim=True))


def _hand_loop(model, X, base, n_copies, seed, order):
    """SmoothGrad written out from docs/methods.md §8, one copy at a time (Euclidean distance)."""
    model.eval()
    zb = _unit(model(base[None]).detach())
    out = []
    for i in range(len(X)):
        eps, _ = smoothgrad_noise(X[i], n_copies, 0.15, seed, i)
        grads = []
        for k in range(n_copies):
            x = (X[i] + eps[k]).clone().requires_grad_()
            d = torch.sqrt(((_unit(model(x[None])) - zb) ** 2).sum())
            grads.append(torch.autograd.grad(d, x)[0].double().numpy())
        G = np.stack(grads)  # [l, C, H, W]
        if order == "paper":
            g = np.abs(G.mean(0)).mean(0)
        else:
            g = np.abs(G.mean(1)).mean(0)
        out.append(_scale(g))
    return np.stack(out)


@pytest.mark.parametrize("order", ["paper", "code"])
def test_batched_captum_path_equals_a_hand_written_loop(order):
    model, X = _net(), _images()
    base = torch.full((3, 10, 10), -1.5)
    model.train()  # saliency_maps must switch to eval mode (BatchNorm) and restore the mode
    # batch_size 5 with l = 4: several images' copies share a pass and an image spans two passes
    got = saliency_maps(model, X, n_samples=4, order=order, seed=7, batch_size=5, device="cpu", baseline=base)
    assert model.training
    want = _hand_loop(model, X, base, 4, 7, order)
    np.testing.assert_allclose(got, want, atol=2e-5)
    assert got.shape == (3, 10, 10) and got.dtype == np.float32 and got.min() == 0 and got.max() == 1


def test_paper_order_equals_captum_noise_tunnel_per_image():
    from captum.attr import NoiseTunnel, Saliency

    from embedscope.models.distances import cosine
    from embedscope.saliency.smoothgrad import postprocess

    model, X = _net(seed=3).eval(), _images(seed=4)
    got = saliency_maps(model, X, distance="cosine", n_samples=6, seed=2, device="cpu")
    zb = model(torch.zeros(1, 3, 10, 10)).detach()
    nt = NoiseTunnel(Saliency(lambda x: cosine(model(x), zb)))
    for i in range(len(X)):
        torch.manual_seed(image_seed(2, i))  # NoiseTunnel draws from the global generator
        a = nt.attribute(X[i:i + 1].clone().requires_grad_(), nt_type="smoothgrad", nt_samples=6,
                         stdevs=noise_sigma(X[i], 0.15), abs=False)
        np.testing.assert_allclose(got[i], postprocess(a[0].detach().numpy(), "paper"), atol=2e-5)


def test_seeded_and_independent_of_batch_size():
    model, X = _net(), _images(n=4)
    a = saliency_maps(model, X, n_samples=5, seed=1, device="cpu")
    b = saliency_maps(model, X, n_samples=5, seed=1, device="cpu")
    c = saliency_maps(model, X, n_samples=5, seed=1, batch_size=3, device="cpu")
    d = saliency_maps(model, X, n_samples=5, seed=2, device="cpu")
    assert np.array_equal(a, b)
    np.testing.assert_allclose(a, c, atol=1e-5)
    assert not np.allclose(a, d)
    # image i's map does not depend on the other images in the call
    np.testing.assert_allclose(saliency_maps(model, X[:2], n_samples=5, seed=1, device="cpu"), a[:2], atol=1e-5)


def test_post_processing_on_the_device_equals_numpy():
    from embedscope.saliency.smoothgrad import _postprocess_torch, postprocess

    rng = np.random.default_rng(0)
    for order, shape in (("paper", (3, 9, 7)), ("code", (9, 7))):
        acc = rng.normal(size=shape)
        want = postprocess(acc, order)
        np.testing.assert_allclose(_postprocess_torch(torch.tensor(acc), order).numpy(), want, atol=1e-12)
        np.testing.assert_allclose(want, _scale(np.abs(acc).mean(0) if order == "paper" else acc), atol=1e-12)
    flat = np.zeros((5, 5))
    assert np.all(postprocess(flat, "code") == 0)
    assert np.all(_postprocess_torch(torch.tensor(flat), "code").numpy() == 0)
    spike = np.zeros((10, 10))
    spike[0, 0] = 3.0  # 100 pixels: the linear p99 lies between 0 and 3 (0.03), so the map is scaled
    np.testing.assert_allclose(_postprocess_torch(torch.tensor(spike), "code").numpy(), postprocess(spike, "code"))
    spike = np.zeros((20, 20))
    spike[0, 0] = 3.0  # 400 pixels: p99 = min = 0, so the map is the indicator of g > min
    assert postprocess(spike, "code").sum() == 1 and postprocess(spike, "code")[0, 0] == 1
    assert _postprocess_torch(torch.tensor(spike), "code").numpy().sum() == 1


class _Region(nn.Module):
    """An embedding that depends only on the top-left 4 x 4 pixels."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(3 * 16, 6)

    def forward(self, x):
        return torch.tanh(self.lin(x[:, :, :4, :4].flatten(1)))


class _Grey(nn.Module):
    """An embedding of the channel mean only: blind to colour."""

    def __init__(self):
        super().__init__()
        self.net = _net(c=1, seed=5)

    def forward(self, x):
        return self.net(x.mean(dim=1, keepdim=True))


@pytest.mark.parametrize("order", ["paper", "code"])
def test_a_model_that_sees_one_region_gets_all_its_saliency_there(order):
    m = saliency_maps(_Region(), _images(n=3, s=12), n_samples=8, order=order, device="cpu")
    inside = m[:, :4, :4].sum(axis=(1, 2))
    assert np.all(inside / m.sum(axis=(1, 2)) > 0.99)


def test_a_colour_blind_model_gives_equal_maps_for_recoloured_images():
    X = _images(n=3, s=9)
    recoloured = X[:, [2, 0, 1]]  # channels permuted: same channel mean, same value range
    a = saliency_maps(_Grey(), X, n_samples=6, device="cpu")
    b = saliency_maps(_Grey(), recoloured, n_samples=6, device="cpu")
    np.testing.assert_allclose(a, b, atol=1e-6)
    assert not np.allclose(a, saliency_maps(_net(), X, n_samples=6, device="cpu"), atol=0.05)


def test_pair_maps():
    model = _net(seed=2)
    Q, R = _images(n=2, seed=8), _images(n=2, seed=9)
    res = pair_saliency_maps(model, Q, R, distance="snr", n_samples=4, device="cpu")
    assert res["query"].shape == res["retrieval"].shape == (2, 10, 10)
    from embedscope.models.distances import snr

    with torch.no_grad():
        np.testing.assert_allclose(res["distance"], snr(model.eval()(Q), model(R)).numpy(), rtol=1e-5)
    with pytest.raises(EmbedscopeError, match="2 queries but 1 retrievals"):
        pair_saliency_maps(model, Q, R[:1], n_samples=2, device="cpu")


def test_bad_inputs():
    model, X = _net(), _images()
    with pytest.raises(EmbedscopeError, match="unknown amp 'fp8'"):
        saliency_maps(model, X, n_samples=2, amp="fp8", device="cpu")
    # autocast is a CUDA option: on the CPU the maps stay float32
    assert np.array_equal(saliency_maps(model, X, n_samples=2, amp="bf16", device="cpu"),
                          saliency_maps(model, X, n_samples=2, device="cpu"))
    with pytest.raises(EmbedscopeError, match="model expects 12x12"):
        saliency_maps(model, X, n_samples=2, input_size=12, device="cpu")
    with pytest.raises(EmbedscopeError, match="4-D tensor"):
        saliency_maps(model, X[0], n_samples=2, device="cpu")
    with pytest.raises(EmbedscopeError, match="cannot take inputs of shape 1x10x10"):
        saliency_maps(model, X[:, :1], n_samples=2, device="cpu")
    with pytest.raises(EmbedscopeError, match="unknown order"):
        saliency_maps(model, X, order="reverse", device="cpu")
    with pytest.raises(EmbedscopeError, match="unknown distance"):
        saliency_maps(model, X, distance="manhattan", device="cpu")
    with pytest.raises(EmbedscopeError, match="baseline has shape"):
        saliency_maps(model, X, baseline=torch.zeros(3, 4, 4), device="cpu")


# ---------------------------------------------------------------------------------------- maps file


def _sm(n=4, seed=0, paths=None):
    rng = np.random.default_rng(seed)
    return SaliencyMaps(maps=rng.random((n, 5, 5)), paths=paths or [f"p{i}" for i in range(n)],
                        labels=np.arange(n) % 2, class_names=["a", "b"],
                        images=rng.integers(0, 255, (n, 5, 5), dtype=np.uint8), attrs={"name": f"m{seed}", "seed": 3})


def test_maps_file_round_trip_and_refusals(tmp_path):
    sm = _sm()
    p = save_maps(tmp_path / "m.h5", sm)
    back = load_maps(p)
    assert back.maps.dtype == np.float32 and np.allclose(back.maps, sm.maps, atol=1e-3)  # stored as float16
    import h5py

    with h5py.File(p) as f:
        assert f["maps"].dtype == np.float16
    assert list(back.paths) == list(sm.paths) and back.attrs["seed"] == 3 and back.name == "m0"
    assert np.array_equal(back.images, sm.images) and back.kind == "maps"
    with pytest.raises(EmbedscopeError, match="already exists"):
        save_maps(p, sm)
    save_maps(p, _sm(seed=1), force=True)
    assert load_maps(p).name == "m1"
    with pytest.raises(EmbedscopeError, match="3 paths for 4 maps"):
        SaliencyMaps(maps=sm.maps, paths=["a", "b", "c"], labels=sm.labels, class_names=sm.class_names)
    with pytest.raises(EmbedscopeError, match="duplicate paths"):
        _sm(paths=["a", "a", "b", "c"])
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    with pytest.raises(EmbedscopeError, match="not a readable HDF5"):
        load_maps(tmp_path / "junk.h5")
    from embedscope import store
    from embedscope.store import EmbeddingSet

    store.save(tmp_path / "emb.h5", EmbeddingSet(embeddings=np.ones((2, 3), np.float32), labels=[0, 1],
                                                 paths=["a", "b"], split=["test", "test"], class_names=["x", "y"]))
    with pytest.raises(EmbedscopeError, match="not an embedscope saliency-maps file .an embedding file"):
        load_maps(tmp_path / "emb.h5")


# ---------------------------------------------------------------------------------------- commands


def _ckpt(path, seed=0, **config):
    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(seed)
    cfg = default_config("digits_cnn", embed_dim=8)
    cfg.update(config)
    save_checkpoint(path, build_model(cfg), cfg)
    return str(path)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    d = tmp_path_factory.mktemp("sal")
    return {"a": _ckpt(d / "a.pt", 0, loss="margin"), "b": _ckpt(d / "b.pt", 1, loss="arcface"),
            "u": _ckpt(d / "u.pt", 2), "bad": _ckpt(d / "bad.pt", 3, distance="manhattan"), "dir": d}


def test_saliency_and_agreement_commands(ckpts, tmp_path, capsys):
    common = ["--dataset", "digits", "--n-images", "6", "--n-samples", "3", "--no-progress"]
    for k in ("a", "b", "u"):
        assert main(["saliency", ckpts[k], *common, "-o", str(tmp_path / f"{k}.h5")]) == 0
    out = capsys.readouterr().out
    assert "cosine distance (loss)" in out and "euclidean distance (untrained network)" in out
    a, b = load_maps(tmp_path / "a.h5"), load_maps(tmp_path / "b.h5")
    assert list(a.paths) == list(b.paths) and a.maps.shape == (6, 8, 8)  # the same images for every model
    assert a.attrs["distance"] == "euclidean" and b.attrs["distance"] == "cosine"
    assert b.attrs["family"] == "classification"
    assert a.attrs["n_samples"] == 3 and a.attrs["order"] == "paper" and len(a.attrs["checkpoint_sha256"]) == 64
    assert all(p.startswith("digits/") for p in a.paths) and a.images.shape == (6, 8, 8)
    files = [str(tmp_path / f"{k}.h5") for k in ("u", "a", "b")]
    rc = main(["saliency-agreement", *files, "-o", str(tmp_path / "agr.png"), "--grid", str(tmp_path / "grid.png"),
               "--json", str(tmp_path / "agr.json"), "--csv", str(tmp_path / "agr.csv"), "--per-image-csv",
               str(tmp_path / "pi.csv")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "ranking-classification" in out and "block means" in out
    for f in ("agr.png", "agr.pdf", "grid.png", "grid.pdf", "agr.csv", "pi.csv"):
        assert (tmp_path / f).stat().st_size > 100
    js = json.loads((tmp_path / "agr.json").read_text())
    assert js["names"] == ["a", "b", "u"] and js["families"] == ["ranking", "classification", "untrained"]
    from embedscope.metrics import map_agreement

    want = map_agreement(a.maps, b.maps)["r_mean"]
    assert js["matrices"]["r_mean"][0][1] == pytest.approx(want)
    assert len(js["per_image"]["a vs b"]["pearson"]) == 6
    # refusal without --force, names/families overrides
    assert main(["saliency-agreement", *files, "-o", str(tmp_path / "agr.png")]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["saliency-agreement", *files, "--names", "x", "y", "z", "--families", "r", "r", "r",
                 "--json", str(tmp_path / "o.json")]) == 0
    assert json.loads((tmp_path / "o.json").read_text())["names"] == ["x", "y", "z"]


def test_pairs_and_paths_file(ckpts, tmp_path, capsys):
    pf = tmp_path / "paths.txt"
    pf.write_text("# three test images\ndigits/0005\ndigits/0007\n\ndigits/0009\n")
    rc = main(["saliency", ckpts["a"], "--dataset", "digits", "--paths-file", str(pf), "--pairs", "--n-samples", "2",
               "-o", str(tmp_path / "p.h5"), "--figure", str(tmp_path / "p.png"), "--no-progress", "--order", "code"])
    assert rc == 0
    sm = load_maps(tmp_path / "p.h5")
    assert sm.kind == "pairs" and list(sm.paths) == ["digits/0005", "digits/0007", "digits/0009"]
    assert sm.retrieval["maps"].shape == (3, 8, 8) and not set(sm.paths) & set(sm.retrieval["paths"][:0])
    assert all(q != r for q, r in zip(sm.paths, sm.retrieval["paths"]))
    out = capsys.readouterr().out
    assert (tmp_path / "p.png").exists() and "same class" in out
    # one 'wrote' line, as every command (it printed one per file)
    assert [x for x in out.splitlines() if x.startswith("wrote ")] == [
        f"wrote {tmp_path / 'p.h5'}, {tmp_path / 'p.png'}, {tmp_path / 'p.pdf'}"]
    # agreement refuses pair files
    main(["saliency", ckpts["b"], "--dataset", "digits", "--paths-file", str(pf), "--n-samples", "2",
          "-o", str(tmp_path / "q.h5"), "--no-progress"])
    capsys.readouterr()
    assert main(["saliency-agreement", str(tmp_path / "p.h5"), str(tmp_path / "q.h5")]) == 1
    assert "pair maps" in capsys.readouterr().err


def test_family_and_untrained():
    from embedscope.saliency.run import family_for_config

    assert family_for_config({"loss": "margin"}) == "ranking"
    assert family_for_config({"loss": "proxynca"}) == "classification"  # proxy losses: Kobs' classification
    assert family_for_config({"loss": "softmax"}) == "classification"
    assert family_for_config({}) == "untrained"
    assert family_for_config({"loss": "arcface", "epochs": 0}) == "untrained"
    assert family_for_config({"loss": "arcface", "epochs": 5}, {"epoch": 0}) == "untrained"
    assert family_for_config({"loss": "circle"}) == "other"


def test_epoch_zero_checkpoint_uses_euclidean(ckpts, tmp_path, capsys):
    c = _ckpt(tmp_path / "e0.pt", loss="arcface", distance="cosine", epochs=0)
    assert main(["saliency", c, "--dataset", "digits", "--n-images", "2", "--n-samples", "2", "--no-progress",
                 "-o", str(tmp_path / "e0.h5")]) == 0
    sm = load_maps(tmp_path / "e0.h5")
    assert sm.attrs["distance"] == "euclidean" and sm.attrs["family"] == "untrained"
    assert main(["saliency", c, "--dataset", "digits", "--n-images", "2", "--n-samples", "2", "--no-progress",
                 "--distance", "snr", "-o", str(tmp_path / "e1.h5")]) == 0
    assert load_maps(tmp_path / "e1.h5").attrs["distance"] == "snr"


def test_agreement_of_partly_overlapping_files(tmp_path):
    from embedscope.saliency.run import agreement_of_files

    a = _sm(n=4, seed=0, paths=["p0", "p1", "p2", "p3"])
    b = _sm(n=4, seed=1, paths=["p3", "p9", "p1", "p0"])
    b.labels = np.array([1, 0, 1, 0])  # p3, p1, p0 keep their classes
    save_maps(tmp_path / "a.h5", a)
    save_maps(tmp_path / "b.h5", b)
    res = agreement_of_files([tmp_path / "a.h5", tmp_path / "b.h5"], families=["ranking", "ranking"])
    assert res["n_images"] == 3 and list(res["paths"]) == ["p0", "p1", "p3"]
    assert any("3 images in common" in n for n in res["notes"])
    from embedscope.metrics import map_agreement

    want = map_agreement(a.maps[[0, 1, 3]].astype(np.float16), b.maps[[3, 2, 0]].astype(np.float16))
    assert res["r_mean"][0, 1] == pytest.approx(want["r_mean"], abs=1e-9)


def _one_line_error(capsys, argv, rc, text):
    assert main(argv) == rc
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and text in err, err


def test_bad_input_is_one_line(ckpts, tmp_path, capsys):
    d = ["--dataset", "digits", "--n-samples", "2", "--no-progress"]
    _one_line_error(capsys, ["saliency", ckpts["bad"], *d, "-o", str(tmp_path / "x.h5")], 1,
                    "unknown distance 'manhattan'")
    circle = _ckpt(tmp_path / "circle.pt", loss="circle")
    _one_line_error(capsys, ["saliency", circle, *d, "-o", str(tmp_path / "x.h5")], 1, "no known distance")
    big = _ckpt(tmp_path / "big.pt", image_size=16)
    _one_line_error(capsys, ["saliency", big, *d, "-o", str(tmp_path / "x.h5")], 1, "expects 16x16 inputs")
    pf = tmp_path / "p.txt"
    pf.write_text("digits/0005\nnot/there\n")
    _one_line_error(capsys, ["saliency", ckpts["a"], *d, "--paths-file", str(pf), "-o", str(tmp_path / "x.h5")], 1,
                    "1 of 2 listed paths are not in")
    with pytest.raises(SystemExit) as e:
        main(["saliency", ckpts["a"], *d, "--paths-file", str(pf), "--n-images", "3", "-o", str(tmp_path / "x.h5")])
    assert e.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    assert not (tmp_path / "x.h5").exists()
    # maps files of different image sets: no common image
    main(["saliency", ckpts["a"], *d, "--n-images", "3", "--seed", "0", "--split", "train",
          "-o", str(tmp_path / "s0.h5")])
    main(["saliency", ckpts["b"], *d, "--n-images", "3", "--seed", "0", "-o", str(tmp_path / "s1.h5")])
    capsys.readouterr()
    _one_line_error(capsys, ["saliency-agreement", str(tmp_path / "s0.h5"), str(tmp_path / "s1.h5")], 1,
                    "share no image")
    _one_line_error(capsys, ["saliency-agreement", str(tmp_path / "s0.h5"), str(tmp_path / "s1.h5"), "--names", "x"],
                    2, "2 files but 1 --names")
    _one_line_error(capsys, ["saliency-agreement", str(tmp_path / "s0.h5")], 2, "at least two")


@pytest.mark.slow
def test_digits_same_loss_seeds_vs_untrained(tmp_path):
    """Two digits models trained with the same loss (margin, 10 epochs as in the demo) and different
    seeds, and two untrained networks (docs/methods.md §8's question; docs/saliency.md, "On the digits").

    What holds in every measurement so far, and is asserted: two *untrained* networks agree most of all
    (a random CNN's saliency follows the image's bright strokes; r = 0.763-0.77 on every machine), far
    above any pair with a trained model, and trained models' maps still agree positively with each other.
    What does not hold in every run, and is only recorded here: whether the two trained seeds agree more
    with each other than with an untrained network. Measured (300 test images, l = 50, paper order):
    trained-trained r = 0.448 vs trained-untrained 0.02-0.22 (2026-11-24); r = 0.177 vs 0.06-0.10
    (2026-12-01, an AMD EPYC with AVX2 only, whose float path trains other models: the test asserted a
    margin of 0.1 then and failed there, by the CPU, not by the code); notebook 03's reruns 0.17-0.32, one
    of them below trained-untrained. CPU training is not bit-reproducible across CPUs.
    """
    from embedscope.metrics import map_agreement
    from embedscope.saliency.run import saliency_to_file
    from embedscope.train import train

    files = {}
    for seed in (0, 1):
        ck = tmp_path / f"margin{seed}.pt"
        train({"dataset": "digits", "loss": "margin", "embed_dim": 32, "epochs": 10, "seed": seed, "eval_every": 0},
              ck, progress=False, echo=lambda s: None)
        files[f"t{seed}"] = ck
        files[f"u{seed}"] = _ckpt(tmp_path / f"untrained{seed}.pt", seed, embed_dim=32)
    maps = {}
    for k, ck in files.items():
        saliency_to_file(ck, "digits", tmp_path / f"{k}.h5", n_images=300, progress=False)
        maps[k] = load_maps(tmp_path / f"{k}.h5").maps
    same = map_agreement(maps["t0"], maps["t1"])
    cross = [map_agreement(maps[t], maps[u]) for t in ("t0", "t1") for u in ("u0", "u1")]
    untrained = map_agreement(maps["u0"], maps["u1"])
    trained_pairs = [same, *cross]
    assert untrained["r_mean"] > max(c["r_mean"] for c in trained_pairs) + 0.3
    assert untrained["jsd_mean"] < min(c["jsd_mean"] for c in trained_pairs)
    assert same["r_mean"] > 0.1  # (0.17-0.45 in every run recorded)


def test_photos_through_an_image_folder(tmp_path):
    """The photo path: ImageNet-normalised inputs, the black image = -mean/std, pictures de-normalised."""
    from PIL import Image

    from embedscope.data.base import IMAGENET_MEAN, IMAGENET_STD
    from embedscope.models import build_model, default_config, save_checkpoint
    from embedscope.saliency.run import saliency_to_file
    from embedscope.saliency.smoothgrad import black_image

    b = black_image("image", 32)
    want = -np.asarray(IMAGENET_MEAN) / np.asarray(IMAGENET_STD)
    assert b.shape == (3, 32, 32) and np.allclose(b.numpy(), want[:, None, None], atol=1e-6)
    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (tmp_path / "imgs" / c).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(tmp_path / "imgs" / c / f"{i}.png")
    torch.manual_seed(0)
    cfg = default_config("resnet18", embed_dim=8, image_size=32, loss="softtriple")
    save_checkpoint(tmp_path / "r18.pt", build_model(cfg), cfg)
    s = saliency_to_file(tmp_path / "r18.pt", "imagefolder", tmp_path / "m.h5", root=tmp_path / "imgs", split="all",
                         n_images=3, n_samples=2, progress=False)
    assert s["distance"] == "cosine" and s["family"] == "classification"
    sm = load_maps(tmp_path / "m.h5")
    assert sm.maps.shape == (3, 32, 32) and sm.images.shape == (3, 32, 32, 3) and sm.images.dtype == np.uint8
    assert sm.attrs["transform"].startswith("Resize(37) + CenterCrop(32)")
    with pytest.raises(EmbedscopeError, match="cannot explain the digits images"):
        saliency_to_file(tmp_path / "r18.pt", "digits", tmp_path / "d.h5", n_images=2, n_samples=2, progress=False)
