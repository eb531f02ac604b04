"""The CUDA paths against the CPU's (issue 18, goal 4): skipped where torch sees no CUDA GPU (CI has
none); run on a GPU machine with ``python -m pytest tests/test_cuda.py`` (``benchmarks/gpu_checks.sh``
runs it with the GPU benchmarks).

The searches rank by float64-certified keys whatever device multiplied the float32 blocks, so their
results on CUDA must equal the CPU's bit for bit, also when the caller allowed TF32 products (the
certification's bound is float32's: embedscope's products are IEEE float32 whatever the caller's
setting). Networks run through cuDNN, whose float32 convolutions may use TF32 as PyTorch's default
allows: their outputs are compared within a tolerance, and the largest difference is printed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
# EMBEDSCOPE_TEST_GPU=cpu runs these tests' code on the CPU against itself (a dry run of the file)
GPU = os.environ.get("EMBEDSCOPE_TEST_GPU", "cuda")
pytestmark = pytest.mark.skipif(GPU == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA GPU")

RANK_KEYS = ["R@k", "P@1", "R-Precision", "MAP@R", "mAP@C", "mAP@1000"]


def _set(n, dim, sizes, noise, seed=0):
    rng = np.random.default_rng(seed)
    s = rng.integers(sizes[0], sizes[1] + 1, size=n // sizes[0] + 1)
    y = np.repeat(np.arange(s.size), s)[:n]
    X = rng.standard_normal((s.size, dim))[y] + noise * rng.standard_normal((n, dim))
    return X.astype(np.float32), y


def _ranking(X, y, device, **kw):
    from embedscope.metrics import retrieval_metrics

    return retrieval_metrics(X, y, include=RANK_KEYS, device=device, **kw)


def _same(a, b):
    keys = [k for k in a if k.startswith(("R@", "P@", "R-", "MAP", "mAP"))]
    assert keys
    return {k: (a[k], b[k]) for k in keys if a[k] != b[k]}


@pytest.mark.parametrize("n, dim, sizes, metric", [
    (3000, 128, (60, 80), "cosine"),     # CUB-like classes
    (6000, 64, (2, 12), "euclidean"),    # SOP-like classes
    (2500, 512, (2, 12), "cosine"),
])
def test_retrieval_metrics_on_cuda_equal_the_cpu(n, dim, sizes, metric):
    X, y = _set(n, dim, sizes, noise=1.6)
    cpu = _ranking(X, y, "cpu", metric=metric)
    gpu = _ranking(X, y, GPU, metric=metric)
    assert _same(cpu, gpu) == {}


def test_retrieval_on_cuda_with_a_separate_reference_set():
    X, y = _set(4000, 96, (20, 40), noise=1.8, seed=1)
    q, r = slice(0, 1500), slice(1500, None)
    cpu = _ranking(X[q], y[q], "cpu", X_ref=X[r], y_ref=y[r])
    gpu = _ranking(X[q], y[q], GPU, X_ref=X[r], y_ref=y[r])
    assert _same(cpu, gpu) == {}


def test_cuda_search_is_exact_when_the_caller_allows_tf32():
    # TF32 products (10 mantissa bits) are ~1e-3 off: without embedscope's own IEEE float32 products
    # the float32 bound of the certification would not hold, and near ties would be misranked
    X, y = _set(6000, 2048, (2, 12), noise=2.4, seed=2)
    cpu = _ranking(X, y, "cpu")
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        gpu = _ranking(X, y, GPU)
        assert torch.backends.cuda.matmul.allow_tf32  # the caller's setting is left as it was
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    assert _same(cpu, gpu) == {}


@pytest.mark.parametrize("depth", [12, 1000])
def test_the_counting_pass_on_cuda_equals_the_cpu(monkeypatch, depth):
    # off by default (the candidate lists were faster on an H200), exact all the same
    import embedscope.metrics.search.ranks as R
    from embedscope.metrics.search import relevant_ranks

    X, y = _set(5000, 256, (2, 12), noise=2.0, seed=4)
    cpu = relevant_ranks(X, y, depth=depth, device="cpu")
    monkeypatch.setattr(R, "COUNT_ON_DEVICE", True)
    gpu = relevant_ranks(X, y, depth=depth, device=GPU)
    np.testing.assert_array_equal(gpu.offsets, cpu.offsets)
    np.testing.assert_array_equal(gpu.ranks, cpu.ranks)
    np.testing.assert_array_equal(gpu.refs, cpu.refs)


@pytest.mark.parametrize("n, dim, sizes, tf32", [
    (8000, 128, (2, 12), False),    # SOP-like: k ~ N / 5, the device's dense steps
    (4000, 512, (2, 12), True),     # the caller allowed TF32 products: the k-means keeps IEEE float32
    (3000, 64, (60, 80), False),    # CUB-like: fewer clusters than points per cluster (the CPU's update)
])
def test_kmeans_on_cuda_equals_the_cpu(monkeypatch, n, dim, sizes, tf32):
    # the same labels and centroids bit for bit (float32 adds and products are IEEE on both devices)
    from embedscope.metrics import kmeans as km

    if GPU == "cpu":  # the dry run: the device engine on the CPU's torch
        monkeypatch.setattr(km, "TORCH_ON_CPU", True)
    X, y = _set(n, dim, sizes, noise=1.5, seed=5)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    k = int(np.unique(y).size)
    cpu = km.lloyd_kmeans(X, k, device="cpu" if GPU == "cuda" else None)
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        gpu = km.lloyd_kmeans(X, k, device=GPU)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    assert gpu["stats"][0][2] == "device"
    np.testing.assert_array_equal(gpu["labels"], cpu["labels"])
    np.testing.assert_array_equal(gpu["centroids"], cpu["centroids"])
    assert gpu["n_steps"] == cpu["n_steps"]


def test_nmi_f1_on_cuda_equal_the_cpu(monkeypatch):
    from embedscope.metrics import kmeans as km
    from embedscope.metrics import retrieval_metrics

    if GPU == "cpu":
        monkeypatch.setattr(km, "TORCH_ON_CPU", True)
    X, y = _set(6000, 256, (2, 12), noise=2.0, seed=6)
    keys = ["NMI", "F1", "MAP@R"]
    assert retrieval_metrics(X, y, include=keys, device=GPU) == retrieval_metrics(X, y, include=keys, device="cpu")


@pytest.mark.parametrize("k", [10, 300])
def test_knn_search_on_cuda_equals_the_cpu(k):
    from embedscope.metrics import knn_search

    X, _ = _set(5000, 128, (30, 60), noise=1.5, seed=3)
    v_cpu, i_cpu = knn_search(X, k=k, exclude_self=True, device="cpu")
    v_gpu, i_gpu = knn_search(X, k=k, exclude_self=True, device=GPU)
    np.testing.assert_array_equal(i_gpu, i_cpu)
    np.testing.assert_array_equal(v_gpu, v_cpu)


def test_embed_on_cuda_matches_the_cpu():
    from embedscope.data import get_dataset
    from embedscope.embed import embed_images
    from embedscope.models import build_model, default_config

    ds = get_dataset("digits")
    torch.manual_seed(0)
    model = build_model(default_config("digits_cnn", embed_dim=32, dataset="digits"))
    cpu = embed_images(model, ds, device="cpu", progress=False)
    gpu = embed_images(model, ds, device=GPU, progress=False)
    amp = embed_images(model, ds, device=GPU, amp=True, progress=False)
    assert gpu.dtype == np.float32 and gpu.shape == cpu.shape and amp.dtype == np.float32
    scale = float(np.abs(cpu).max())
    d32, d16 = float(np.abs(gpu - cpu).max()) / scale, float(np.abs(amp - cpu).max()) / scale
    print(f"embed digits_cnn: largest |cuda - cpu| / max |x|: float32 {d32:.2e}, bf16 autocast {d16:.2e}")
    assert d32 < 5e-3  # cuDNN may convolve in TF32 (PyTorch's default)
    assert d16 < 5e-2 and (d16 > 0 or GPU == "cpu")  # autocast ran (bfloat16 moves the rows), stays close


def test_saliency_maps_on_cuda_are_reproducible_and_agree_with_the_cpu():
    # the noise comes from a generator on the maps' device (CUDA's Philox, the CPU's Mersenne
    # twister: the same seeds give other draws, docs/saliency.md), so the maps agree as SmoothGrad
    # estimates of the same mean (two CPU seeds agree to r = 0.995 at 512 copies), and each device
    # repeats its own
    from embedscope.models import build_model, default_config
    from embedscope.saliency.smoothgrad import saliency_maps

    torch.manual_seed(0)
    model = build_model(default_config("digits_cnn", embed_dim=32, dataset="digits")).double()
    g = torch.Generator().manual_seed(0)
    images = torch.rand(3, 1, 8, 8, generator=g, dtype=torch.float64) * 16
    cpu = saliency_maps(model, images, n_samples=512, device="cpu")
    gpu = saliency_maps(model, images, n_samples=512, device=GPU)
    again = saliency_maps(model, images, n_samples=512, device=GPU)
    np.testing.assert_allclose(again, gpu, rtol=1e-9, atol=1e-12 * float(np.abs(gpu).max()))
    r = [np.corrcoef(gpu[i].ravel(), cpu[i].ravel())[0, 1] for i in range(len(images))]
    print(f"saliency maps, cuda vs cpu noise (512 copies): Pearson r {np.round(r, 4)}")
    assert min(r) > 0.98
    assert np.abs(gpu - cpu).max() < 0.2 * np.abs(cpu).max()


def test_cli_train_embed_evaluate_saliency_on_cuda(tmp_path):
    def es(*args):
        out = subprocess.run([sys.executable, "-m", "embedscope", *map(str, args)], capture_output=True, text=True,
                             timeout=600, cwd=Path(__file__).resolve().parents[1])
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout

    ck = tmp_path / "m.pt"
    es("train", "--dataset", "digits", "--loss", "margin", "--embed-dim", "16", "--epochs", "1", "-o", ck,
       "--device", GPU, "--no-progress")
    es("embed", ck, "--dataset", "digits", "--split", "all", "-o", tmp_path / "g.h5", "--device", GPU,
       "--no-progress")
    es("embed", ck, "--dataset", "digits", "--split", "all", "-o", tmp_path / "c.h5", "--device", "cpu",
       "--no-progress")
    from embedscope.store import EmbeddingSet

    g, c = EmbeddingSet.load(tmp_path / "g.h5"), EmbeddingSet.load(tmp_path / "c.h5")
    assert np.abs(g.embeddings - c.embeddings).max() <= 5e-3 * np.abs(c.embeddings).max()
    assert c.attrs["precision"] == "float32"
    assert g.attrs["precision"] == ("float32 (TF32 convolutions)" if GPU == "cuda" else "float32")
    es("evaluate", tmp_path / "g.h5", "--device", GPU, "--json", tmp_path / "eg.json")
    es("evaluate", tmp_path / "g.h5", "--device", "cpu", "--json", tmp_path / "ec.json")
    values = [json.loads((tmp_path / f).read_text())["values"] for f in ("eg.json", "ec.json")]
    assert values[0] == values[1] and "MAP@R" in values[0]  # k-means (NMI, F1) is faiss's on the CPU either way
    es("saliency", ck, "--dataset", "digits", "--n-images", "4", "--n-samples", "8", "-o", tmp_path / "s.h5",
       "--device", GPU, "--no-progress")

