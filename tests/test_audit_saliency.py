"""Audit of the SmoothGrad saliency maps (docs/methods.md §8) against independent computations.

The reference here is plain torch autograd written from the text of docs/methods.md §8, one noisy
copy at a time: its own L2 normalisation and distances, σ = 0.15 × (max − min) computed by hand,
float64 post-processing with numpy's linear 99th percentile, and for the BN-Inception convention
its own BGR / ×255 / mean [104, 117, 128] conversion. What it shares with embedscope is only the
*definition* of the noise draws: ``randn`` of a generator seeded with ``image_seed(seed, key)``,
so that both compute the same l copies. captum's ``NoiseTunnel`` is the second reference.
"""

import numpy as np
import pytest
import torch
from torch import nn

from embedscope.saliency.smoothgrad import image_seed, pair_saliency_maps, saliency_maps

# ------------------------------------------------------------------------------ the reference


def _unit(z):
    return z / torch.sqrt((z * z).sum(-1, keepdim=True))


def _var(v):
    return ((v - v.mean(-1, keepdim=True)) ** 2).mean(-1)


REF_DIST = {  # docs/methods.md §8, on L2-normalised embeddings; a = the image (query), b = the reference
    "euclidean": lambda a, b: torch.sqrt(((_unit(a) - _unit(b)) ** 2).sum(-1)),
    "sqeuclidean": lambda a, b: ((_unit(a) - _unit(b)) ** 2).sum(-1),
    "cosine": lambda a, b: (_unit(a) * _unit(b)).sum(-1),
    "snr": lambda a, b: _var(_unit(b) - _unit(a)) / _var(_unit(a)),
}


def _scale(g):
    """(g − min) / (p99 − min) clipped to [0, 1]; p99 = numpy's linear percentile; p99 = min: g > min."""
    g = np.asarray(g, dtype=np.float64)
    lo, hi = g.min(), np.percentile(g, 99)
    return np.clip((g - lo) / (hi - lo), 0, 1) if hi > lo else (g > lo).astype(np.float64)


def _post(G, order):
    """G: the l per-copy gradients [l, C, H, W] -> the map (docs/methods.md §8, both orders)."""
    G = np.asarray(G, dtype=np.float64)
    if order == "paper":  # mean over copies, abs, channel mean
        return _scale(np.abs(G.mean(0)).mean(0))
    return _scale(np.abs(G.mean(1)).mean(0))  # per copy signed channel mean, abs, mean over copies


def _eps(shape, l, seed, key, stream=0):
    g = torch.Generator().manual_seed(image_seed(seed, key, stream))
    return torch.randn((l,) + tuple(shape), generator=g)


def _ref_grads(fwd, x, ref_z, dist, l, seed, key, stream=0, swap=False):
    """The l gradients of d(f(x + ε_k), ref) with respect to x + ε_k (σ by hand), one copy at a time."""
    sigma = 0.15 * (float(x.max()) - float(x.min()))
    eps = _eps(x.shape, l, seed, key, stream).to(x.dtype)
    G = []
    for k in range(l):
        xi = (x + eps[k] * sigma).detach().requires_grad_()
        z = fwd(xi[None])
        d = REF_DIST[dist](ref_z, z) if swap else REF_DIST[dist](z, ref_z)
        G.append(torch.autograd.grad(d.sum(), xi)[0].double().numpy())
    return np.stack(G)


def _ref_maps(fwd, X, base, dist, l, seed, order, keys=None):
    with torch.no_grad():
        zb = fwd(base[None]).detach()
    return np.stack([_post(_ref_grads(fwd, X[i], zb, dist, l, seed, i if keys is None else keys[i]), order)
                     for i in range(len(X))])


class _Net(nn.Module):
    """A tiny 3-channel CNN with BatchNorm and Dropout (train mode would change the maps)."""

    def __init__(self, seed=0, c=3):
        super().__init__()
        torch.manual_seed(seed)
        self.body = nn.Sequential(nn.Conv2d(c, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
                                  nn.Conv2d(6, 8, 3, padding=1), nn.Tanh(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                                  nn.Dropout(0.5), nn.Linear(32, 7))
        with torch.no_grad():  # BatchNorm statistics that are not the identity
            self.body[1].running_mean.uniform_(-0.5, 0.5)
            self.body[1].running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        return self.body(x)


def _X(n=3, c=3, s=9, seed=1):
    return torch.randn(n, c, s, s, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------ the maps themselves


@pytest.mark.parametrize("order", ["paper", "code"])
@pytest.mark.parametrize("distance", ["euclidean", "sqeuclidean", "cosine", "snr"])
def test_maps_equal_an_independent_autograd_reference(distance, order):
    model, X = _Net(), _X()
    base = torch.full((3, 9, 9), -1.2)
    model.body[0].bias.requires_grad_(False)  # a parameter the caller froze stays frozen
    model.train()  # BatchNorm and Dropout must not act: eval mode inside, train mode restored after
    # l = 3 and 4 copies per pass: passes mix images, an image spans two passes
    got = saliency_maps(model, X, distance=distance, n_samples=3, order=order, seed=5, batch_size=4,
                        device="cpu", baseline=base)
    assert model.training and all(m.training for m in model.modules())
    assert not model.body[0].bias.requires_grad and model.body[0].weight.requires_grad
    want = _ref_maps(model.eval(), X, base, distance, 3, 5, order)
    np.testing.assert_allclose(got, want, atol=3e-5)
    assert got.shape == (3, 9, 9) and got.dtype == np.float32


def test_paper_order_equals_captum_noise_tunnel_and_code_order_captum_saliency():
    """Paper order: NoiseTunnel(Saliency, smoothgrad, abs=False) with the same noise (its draws come from
    torch's global generator, seeded per image), then abs -> channel mean -> p99. Code order: captum's
    Saliency (abs=False) on each of the same noisy copies, then per copy signed channel mean -> abs -> mean."""
    from captum.attr import NoiseTunnel, Saliency

    model, X = _Net(seed=3).eval(), _X(seed=4)
    base = torch.full((3, 9, 9), 0.7)
    zb = model(base[None]).detach()
    f = lambda x: REF_DIST["sqeuclidean"](model(x), zb)  # noqa: E731
    paper = saliency_maps(model, X, distance="sqeuclidean", n_samples=6, seed=2, device="cpu", baseline=base)
    code = saliency_maps(model, X, distance="sqeuclidean", n_samples=6, seed=2, device="cpu", baseline=base,
                         order="code")
    for i in range(len(X)):
        sigma = 0.15 * float(X[i].max() - X[i].min())
        torch.manual_seed(image_seed(2, i))
        a = NoiseTunnel(Saliency(f)).attribute(X[i:i + 1].clone().requires_grad_(), nt_type="smoothgrad",
                                               nt_samples=6, stdevs=sigma, abs=False)
        np.testing.assert_allclose(paper[i], _scale(np.abs(a[0].double().numpy()).mean(0)), atol=2e-5)
        noisy = (X[i][None] + _eps(X[i].shape, 6, 2, i) * sigma).requires_grad_()
        G = Saliency(f).attribute(noisy, abs=False).double().numpy()
        np.testing.assert_allclose(code[i], _post(G, "code"), atol=2e-5)


def test_the_noise_definition():
    from embedscope.saliency.smoothgrad import smoothgrad_noise

    x = _X(n=1)[0] * 3 + 1
    eps, sigma = smoothgrad_noise(x, 4, 0.15, 7, 0)
    assert sigma == pytest.approx(0.15 * (float(x.max()) - float(x.min())), rel=1e-7)
    assert torch.equal(eps, _eps(x.shape, 4, 7, 0) * sigma)
    # different images (positions or keys), streams and seeds: different noise; same: the same bits
    draws = [smoothgrad_noise(x, 4, 0.15, s, k, stream=st)[0] for s, k, st in
             ((7, 0, 0), (7, 1, 0), (8, 0, 0), (7, 0, 1), (7, "a/1.png", 0), (7, "a/2.png", 0))]
    for i in range(len(draws)):
        for j in range(i):
            assert not torch.equal(draws[i], draws[j])
    assert torch.equal(smoothgrad_noise(x, 4, 0.15, 7, "a/1.png")[0], draws[4])


def test_same_bits_for_the_same_call_and_no_dependence_on_batching():
    model, X = _Net(), _X(n=5)
    keys = [f"img{i}" for i in range(5)]
    a = saliency_maps(model, X, n_samples=7, seed=1, device="cpu", noise_keys=keys)
    assert np.array_equal(a, saliency_maps(model, X, n_samples=7, seed=1, device="cpu", noise_keys=keys))
    for bs in (1, 3, 7, 8):  # copies per pass; several images' copies share a pass
        b = saliency_maps(model, X, n_samples=7, seed=1, device="cpu", noise_keys=keys, batch_size=bs)
        np.testing.assert_allclose(b, a, atol=1e-6)  # float rounding only (measured <= 2.4e-7)
    # the images explained in other calls, one at a time and reversed: the same maps
    for i in range(5):
        alone = saliency_maps(model, X[i:i + 1], n_samples=7, seed=1, device="cpu", noise_keys=[keys[i]])
        np.testing.assert_allclose(alone[0], a[i], atol=1e-6)
    rev = saliency_maps(model, X.flip(0), n_samples=7, seed=1, device="cpu", noise_keys=keys[::-1])
    np.testing.assert_allclose(rev[::-1], a, atol=1e-6)
    # another seed: other maps
    assert np.abs(saliency_maps(model, X, n_samples=7, seed=2, device="cpu", noise_keys=keys) - a).max() > 0.05


def test_a_batch_of_one():
    model, X = _Net(), _X(n=1)
    base = torch.zeros(3, 9, 9)
    got = saliency_maps(model, X, n_samples=2, seed=3, device="cpu")
    np.testing.assert_allclose(got, _ref_maps(model.eval(), X, base, "euclidean", 2, 3, "paper"), atol=3e-5)


class _FarFromOrigin(nn.Module):
    """Embeddings near the point 1e7 x (1, 1, 1, 1): after L2 normalisation the image's share is
    ~1e-7, below float32's resolution. Only a float64 computation gets its gradient right."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(3 * 9 * 9, 4)
        self.register_buffer("offset", torch.full((4,), 1e7))

    def forward(self, x):
        return self.lin(torch.tanh(x).flatten(1)) + self.offset


def test_a_float64_model_is_run_in_float64():
    """The old code cast the images to float32 and stopped with 'the model cannot take inputs of shape
    3x9x9 (Input type (float) and bias type (double) ...)'."""
    X = _X()
    model = _FarFromOrigin().double()
    base = torch.zeros(3, 9, 9)
    got = saliency_maps(model, X, distance="cosine", n_samples=3, seed=4, device="cpu")
    assert next(model.parameters()).dtype == torch.float64
    want = _ref_maps(model, X.double(), base.double(), "cosine", 3, 4, "paper")
    np.testing.assert_allclose(got, want, atol=1e-6)
    # in float32 the same model's maps are rounding noise: the test can tell the two apart
    m32 = saliency_maps(_FarFromOrigin(), X, distance="cosine", n_samples=3, seed=4, device="cpu")
    assert np.abs(m32 - want).max() > 0.1
    # an ordinary float64 model equals its float32 twin to float32 rounding
    net = _Net()
    np.testing.assert_allclose(saliency_maps(net, X, n_samples=3, device="cpu"),
                               saliency_maps(_Net().double(), X, n_samples=3, device="cpu"), atol=2e-5)


# ------------------------------------------------------------------------------ degenerate maps


@pytest.mark.parametrize("order", ["paper", "code"])
@pytest.mark.parametrize("distance", ["euclidean", "sqeuclidean", "cosine", "snr"])
def test_constant_images_sigma_zero(distance, order):
    """σ = 0 for a constant image: its l copies are the image itself, the map is its plain gradient's.
    The black image itself sits at the distance's stationary point: zero gradient, an all-zero map
    (the old code gave a full [0, 1] map of float rounding noise, min 0, max 1)."""
    model = _Net(seed=2).eval()
    base = torch.full((3, 9, 9), -1.5)
    grey = torch.full((3, 9, 9), 0.4)
    X = torch.stack([base, grey])
    got = saliency_maps(model, X, distance=distance, n_samples=3, order=order, device="cpu", baseline=base)
    assert np.all(np.isfinite(got))
    assert np.all(got[0] == 0)
    with torch.no_grad():
        zb = model(base[None])
    xg = grey.clone().requires_grad_()
    g = torch.autograd.grad(REF_DIST[distance](model(xg[None]), zb).sum(), xg)[0].double().numpy()
    np.testing.assert_allclose(got[1], _post(g[None], order), atol=3e-5)
    # noise = 0: the plain gradient for every image, and still zero at the baseline
    Y = torch.stack([base, _X(n=1)[0]])
    m0 = saliency_maps(model, Y, distance=distance, n_samples=2, noise=0.0, order=order, device="cpu", baseline=base)
    assert np.all(m0[0] == 0) and m0[1].max() == 1


def test_pair_of_identical_constant_images_and_a_flat_model():
    model = _Net(seed=2).eval()
    c = torch.full((1, 3, 9, 9), 0.3)
    res = pair_saliency_maps(model, c, c.clone(), n_samples=2, device="cpu")
    assert np.all(res["query"] == 0) and np.all(res["retrieval"] == 0) and res["distance"][0] < 1e-6

    class Flat(nn.Module):  # ignores its input: the gradient is zero everywhere
        def forward(self, x):
            return torch.ones(len(x), 4) + 0 * x.sum(dim=(1, 2, 3))[:, None]

    m = saliency_maps(Flat(), _X(), n_samples=2, device="cpu")
    assert np.all(m == 0)  # documented: all zeros, not NaN, not an error


# ------------------------------------------------------------------------------ pairs


def test_pair_maps_equal_the_reference():
    """Query map: d(f(q + ε), f(r)); retrieval map: d(f(q), f(r + ε)) (SNR keeps the query first)."""
    model = _Net(seed=6).eval()
    Q, R = _X(n=2, seed=8), _X(n=2, seed=9)
    keys = ["q0", "q1"]
    res = pair_saliency_maps(model, Q, R, distance="snr", n_samples=3, seed=1, device="cpu", noise_keys=keys)
    with torch.no_grad():
        zq, zr = model(Q), model(R)
    for i in range(2):
        gq = _ref_grads(model, Q[i], zr[i:i + 1], "snr", 3, 1, keys[i], stream=1)
        gr = _ref_grads(model, R[i], zq[i:i + 1], "snr", 3, 1, keys[i], stream=2, swap=True)
        np.testing.assert_allclose(res["query"][i], _post(gq, "paper"), atol=3e-5)
        np.testing.assert_allclose(res["retrieval"][i], _post(gr, "paper"), atol=3e-5)
    np.testing.assert_allclose(res["distance"], REF_DIST["snr"](zq, zr).numpy(), rtol=1e-5)


# ------------------------------------------------------------------------------ BN-Inception convention


def _bgr255(v):
    """The BN-Inception transform of RGB pictures v in [0, 1] [N, 3, H, W]: BGR, x 255, - [104, 117, 128]."""
    return v[:, [2, 1, 0]] * 255 - torch.tensor([104.0, 117.0, 128.0])[None, :, None, None]


def _imagenet(v):
    from embedscope.data.base import IMAGENET_MEAN, IMAGENET_STD

    return (v - torch.tensor(IMAGENET_MEAN)[None, :, None, None]) / torch.tensor(IMAGENET_STD)[None, :, None, None]


@pytest.mark.parametrize("order", ["paper", "code"])
def test_bn_inception_convention_is_differentiated_in_its_own_input_space(order):
    """docs/methods.md §8: the gradient with respect to the preprocessed tensor, for BN-Inception
    BGR x 255 - mean (Kobs' transform); σ = 0.15 x (max - min) of that tensor; black = -[104, 117, 128].
    The old code differentiated the ImageNet-normalised RGB tensor that embedscope's transform gives
    (the model converts it inside): with the same noise draws its maps differed from these by up to
    0.22 (mean 0.03 per pixel; shapes_cnn, 32 px, l = 8)."""
    from embedscope.models.backbones import EmbeddingModel
    from embedscope.models.bninception import CADENE_INPUT
    from embedscope.saliency.smoothgrad import black_image

    model = EmbeddingModel("shapes_cnn", 8, input_space=dict(CADENE_INPUT)).eval()
    v = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    X, U = _imagenet(v), _bgr255(v)
    base = black_image("image", 16)
    assert torch.allclose(model.preprocess(base[None])[0], _bgr255(torch.zeros(1, 3, 16, 16))[0], atol=1e-4)
    got = saliency_maps(model, X, n_samples=3, seed=2, order=order, device="cpu", baseline=base)
    want = _ref_maps(model.forward_native, U, _bgr255(torch.zeros(1, 3, 16, 16))[0], "euclidean", 3, 2, order)
    np.testing.assert_allclose(got, want, atol=1e-4)
    # pairs too
    res = pair_saliency_maps(model, X[:1], X[1:2], n_samples=2, seed=2, device="cpu", order=order)
    with torch.no_grad():
        zr = model.forward_native(U[1:2])
    gq = _ref_grads(model.forward_native, U[0], zr, "euclidean", 2, 2, 0, stream=1)
    np.testing.assert_allclose(res["query"][0], _post(gq, order), atol=1e-4)


# ------------------------------------------------------------------------------ the command, end to end


def _ckpt(path, seed=0, **config):
    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(seed)
    cfg = default_config("digits_cnn", embed_dim=8)
    cfg.update(config)
    save_checkpoint(path, build_model(cfg), cfg)
    return path


def _digits_ref(ckpt, paths, distance, l, seed, order="paper"):
    """Reference maps of the digits images named by ``paths``, read from the data set by path."""
    from embedscope.data import get_dataset
    from embedscope.models import load_checkpoint

    model = load_checkpoint(ckpt)[0].eval()
    ds = get_dataset("digits")
    row = {p: i for i, p in enumerate(ds.paths)}
    X = torch.stack([torch.from_numpy(np.asarray(ds.load_image(row[p]), np.float32) / 16.0)[None] for p in paths])
    return _ref_maps(model, X, torch.zeros(1, 8, 8), distance, l, seed, order, keys=list(paths)), X


@pytest.fixture(scope="module")
def digits_files(tmp_path_factory):
    from embedscope.saliency.run import saliency_to_file

    d = tmp_path_factory.mktemp("audit_sal")
    losses = {"margin": "euclidean", "arcface": "cosine", "proxynca": "sqeuclidean", "snr": "snr", None: "euclidean"}
    out = {}
    for k, (loss, dist) in enumerate(losses.items()):
        ck = _ckpt(d / f"{loss}.pt", seed=k, **({"loss": loss} if loss else {}))
        f = d / f"{loss}.h5"
        saliency_to_file(ck, "digits", f, n_images=4, n_samples=3, seed=3, progress=False)
        out[loss] = (ck, f, dist)
    return d, out


def test_command_maps_equal_the_reference_by_stored_path(digits_files):
    """Each stored map is the reference map of the image its stored path names (read back from the
    data set by that path), with the checkpoint's own distance; every model holds the same images
    in the same order; the stored picture is that image."""
    from embedscope.store.saliency import load_maps

    _, files = digits_files
    first = None
    for ck, f, dist in files.values():
        sm = load_maps(f)
        assert sm.attrs["distance"] == dist and sm.maps.shape == (4, 8, 8)
        if first is None:
            first = list(sm.paths)
        assert list(sm.paths) == first  # the same images, in the same order, for every model
        want, X = _digits_ref(ck, sm.paths, dist, 3, 3)
        np.testing.assert_allclose(sm.maps, want, atol=1e-3)  # stored as float16 (<= 2.4e-4 rounding)
        assert np.array_equal(sm.images, np.round(np.clip(X[:, 0].numpy(), 0, 1) * 255).astype(np.uint8))


def test_the_same_image_gets_the_same_map_in_any_run(digits_files, tmp_path):
    """The noise is keyed by the image's path: explaining the images in another order, or among other
    images, gives the same maps (the old code keyed it by the place in the run: the same image listed
    second instead of first got a map up to ~0.5 away)."""
    from embedscope.saliency.run import saliency_to_file
    from embedscope.store.saliency import load_maps

    _, files = digits_files
    ck, f, _ = files["margin"]
    sm = load_maps(f)
    from embedscope.data import get_dataset

    other = next(p for p in get_dataset("digits").subset("test").paths if p not in set(sm.paths))
    pf = tmp_path / "rev.txt"
    pf.write_text("\n".join([other] + list(sm.paths[::-1][:3])) + "\n")
    saliency_to_file(ck, "digits", tmp_path / "rev.h5", paths_file=pf, n_samples=3, seed=3, progress=False)
    rev = load_maps(tmp_path / "rev.h5")
    assert list(rev.paths[1:]) == list(sm.paths[::-1][:3])
    pos = {p: i for i, p in enumerate(sm.paths)}
    for j, p in enumerate(rev.paths[1:], start=1):
        assert np.array_equal(rev.maps[j], sm.maps[pos[p]])


def test_more_images_asked_than_the_split_holds_and_a_batch_of_one(tmp_path):
    """An image folder whose test split holds 2 images: --n-images 50 explains those 2 (each map
    checked against the reference); --n-images 1 explains one."""
    from PIL import Image

    from embedscope.models import build_model, default_config, load_checkpoint, save_checkpoint
    from embedscope.saliency.run import saliency_to_file
    from embedscope.store.saliency import load_maps

    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (tmp_path / "imgs" / c).mkdir(parents=True)
        Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(tmp_path / "imgs" / c / "0.png")
        Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(tmp_path / "imgs" / c / "1.png")
    torch.manual_seed(0)
    cfg = default_config("shapes_cnn", embed_dim=8, image_size=16, loss="triplet")
    save_checkpoint(tmp_path / "s.pt", build_model(cfg), cfg)
    s = saliency_to_file(tmp_path / "s.pt", "imagefolder", tmp_path / "m.h5", root=tmp_path / "imgs",
                         n_images=50, n_samples=2, seed=1, progress=False)
    sm = load_maps(tmp_path / "m.h5")
    assert s["n_images"] == 2 and sm.maps.shape == (2, 16, 16)
    assert sorted(sm.paths) == ["b/0.png", "b/1.png"]  # the test split: the second half of the classes
    model = load_checkpoint(tmp_path / "s.pt")[0].eval()
    from torchvision import transforms as T

    pics = [T.ToTensor()(T.CenterCrop(16)(T.Resize(18)(Image.open(tmp_path / "imgs" / p).convert("RGB"))))
            for p in sm.paths]
    X = _imagenet(torch.stack(pics))
    want = _ref_maps(model, X, _imagenet(torch.zeros(1, 3, 16, 16))[0], "euclidean", 2, 1, "paper",
                     keys=list(sm.paths))
    np.testing.assert_allclose(sm.maps, want, atol=1e-3)
    saliency_to_file(tmp_path / "s.pt", "imagefolder", tmp_path / "one.h5", root=tmp_path / "imgs",
                     n_images=1, n_samples=2, seed=1, progress=False)
    one = load_maps(tmp_path / "one.h5")
    assert one.maps.shape == (1, 16, 16)
    assert np.array_equal(one.maps[0], sm.maps[list(sm.paths).index(one.paths[0])])


def test_bn_inception_checkpoint_end_to_end_227(tmp_path):
    """A (random) BN-Inception checkpoint: Resize 256 + CenterCrop 227, maps of 227 x 227 stored next
    to the right path, gradients in its BGR x 255 - mean space.

    The random network embeds every image within 1 - cos ~ 7e-6 of the black image, so its float32
    maps carry float rounding of up to 0.03 (embedscope and the reference alike, measured against
    float64): the gradient space is checked in float64 (to 6.6e-8 measured), the file against
    embedscope's own float32 call on the image its path names."""
    from PIL import Image
    from torchvision import transforms as T

    from embedscope.models import build_model, default_config, load_checkpoint, save_checkpoint
    from embedscope.saliency.run import saliency_to_file
    from embedscope.saliency.smoothgrad import black_image
    from embedscope.store.saliency import load_maps

    (tmp_path / "imgs" / "a").mkdir(parents=True)
    (tmp_path / "imgs" / "b").mkdir(parents=True)
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 255, (260, 300, 3), dtype=np.uint8)).save(tmp_path / "imgs" / "a" / "0.png")
    Image.fromarray(rng.integers(0, 255, (300, 260, 3), dtype=np.uint8)).save(tmp_path / "imgs" / "b" / "0.png")
    torch.manual_seed(0)
    cfg = default_config("bninception", embed_dim=8, loss="multisimilarity")
    save_checkpoint(tmp_path / "bn.pt", build_model(cfg), cfg)
    saliency_to_file(tmp_path / "bn.pt", "imagefolder", tmp_path / "m.h5", root=tmp_path / "imgs", split="all",
                     n_images=1, n_samples=1, seed=0, progress=False)
    sm = load_maps(tmp_path / "m.h5")
    assert sm.maps.shape == (1, 227, 227) and sm.attrs["distance"] == "cosine"
    assert "BGR x 255, mean [104, 117, 128]" in sm.attrs["gradient_space"]
    model = load_checkpoint(tmp_path / "bn.pt")[0].eval()
    pic = T.ToTensor()(T.CenterCrop(227)(T.Resize(256)(Image.open(tmp_path / "imgs" / sm.paths[0]).convert("RGB"))))
    keys = list(sm.paths)
    black = black_image("image", 227)
    direct = saliency_maps(model, _imagenet(pic[None]), distance="cosine", n_samples=1, seed=0, device="cpu",
                           baseline=black, noise_keys=keys)
    np.testing.assert_allclose(sm.maps, direct, atol=1e-3)  # float16 storage
    model = model.double()
    got = saliency_maps(model, _imagenet(pic[None].double()), distance="cosine", n_samples=1, seed=0, device="cpu",
                        baseline=black, noise_keys=keys)
    want = _ref_maps(model.forward_native, _bgr255(pic[None].double()),
                     _bgr255(torch.zeros(1, 3, 227, 227, dtype=torch.float64))[0], "cosine", 1, 0, "paper", keys=keys)
    np.testing.assert_allclose(got, want, atol=1e-6)
