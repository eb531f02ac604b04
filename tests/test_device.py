"""embedscope.device.compute_device: the CPU searches never import torch just to learn the device."""

import subprocess
import sys

import numpy as np
import pytest

from embedscope import device as D


def test_cpu_without_torch_in_a_fresh_process():
    # CPU retrieval (the tile pass, and the candidate lists of mAP@1000) and a kNN search in a fresh
    # process: torch stays unimported (its import is 1.3-1.9 s of a CPU-only `embedscope evaluate`)
    # and the values equal this process's (where the test suite has imported torch)
    from embedscope.metrics import knn_search, retrieval_metrics

    code = (
        "import sys, numpy as np\n"
        "from embedscope.metrics import retrieval_metrics, knn_search\n"
        "rng = np.random.default_rng(0); X = rng.standard_normal((300, 8)); y = np.repeat(np.arange(10), 30)\n"
        "r = retrieval_metrics(X, y, include=['P@1', 'MAP@R', 'mAP@1000'], device='cpu')\n"
        "v, i = knn_search(X, k=3, exclude_self=True, device='cpu')\n"
        "print('torch' in sys.modules, repr(r['P@1']), repr(r['MAP@R']), repr(r['mAP@1000']), int(i.sum()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False"
    pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((300, 8)), np.repeat(np.arange(10), 30)
    r = retrieval_metrics(X, y, include=["P@1", "MAP@R", "mAP@1000"], device="cpu")
    _, i = knn_search(X, k=3, exclude_self=True, device="cpu")
    assert "torch" in sys.modules
    assert out[1:] == [repr(r["P@1"]), repr(r["MAP@R"]), repr(r["mAP@1000"]), str(int(i.sum()))]


def test_compute_device_rules(monkeypatch):
    assert D.compute_device("cpu") is D.CPU
    assert D.CPU.type == "cpu" and str(D.CPU) == "cpu" and D.CPU == "cpu"
    assert D.compute_device(D.CPU) is D.CPU
    torch = pytest.importorskip("torch")
    dev = torch.device("cpu")
    assert D.compute_device(dev) is dev
    assert torch.device(str(D.CPU)) == dev  # what the torch paths convert it to
    # "auto": without GPU driver nodes and before torch is imported, the CPU; else torch decides
    monkeypatch.setattr(D, "GPU_DRIVER_NODES", ())
    monkeypatch.delitem(sys.modules, "torch")
    assert D.compute_device("auto") is D.CPU
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert D.compute_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(Exception, match="unknown device"):
        D.compute_device("tpu")


def test_the_torch_block_path_takes_the_cpu_stand_in(monkeypatch):
    # candidate_blocks' torch GEMM path on the CPU (forced) accepts compute_device's CPU
    from embedscope.metrics.search import knn

    monkeypatch.setattr(knn, "CPU_SELECT", False)
    monkeypatch.setattr(knn, "FAISS_MIN_L", 10 ** 9)
    X = np.random.default_rng(1).standard_normal((200, 6))
    v, i = knn.knn_search(X, k=4, exclude_self=True, device=D.CPU)
    monkeypatch.setattr(knn, "CPU_SELECT", True)
    v2, i2 = knn.knn_search(X, k=4, exclude_self=True, device="cpu")
    np.testing.assert_array_equal(i, i2)
    np.testing.assert_array_equal(v, v2)


def test_rowwise_searchsorted_numpy_equals_torch(monkeypatch):
    # the candidate-list path counts per row with torch's batched search when torch is imported,
    # else row by row with numpy: the same counts, ties, infinities and pads included
    from embedscope.metrics.search.ranks import _rowwise_searchsorted

    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    asc = np.sort(rng.integers(-5, 6, (40, 30)).astype(np.float64), axis=1)
    asc[::7, -3:] = np.inf
    t = rng.integers(-7, 8, (40, 12)).astype(np.float64)
    t[::5, -2:] = np.inf
    t[1::6, 0] = -np.inf
    for right in (False, True):
        with_torch = _rowwise_searchsorted(asc, t, right)
        monkeypatch.delitem(sys.modules, "torch")
        without = _rowwise_searchsorted(asc, t, right)
        monkeypatch.setitem(sys.modules, "torch", torch)
        side = "right" if right else "left"
        ref = np.array([np.searchsorted(a, b, side=side) for a, b in zip(asc, t)])
        np.testing.assert_array_equal(with_torch, ref)
        np.testing.assert_array_equal(without, ref)


def test_callers_arrays_are_never_normalised_in_place(tmp_path):
    # the searches normalise their own float64 copies in place (checked_rows): a caller's float64
    # array, list, memory map or tensor is never written, and every input kind gives the same values
    from embedscope.metrics import knn_search, retrieval_metrics
    from embedscope.metrics.clustering import kmeans_nmi_f1
    from embedscope.metrics.search.ranks import check_sets, relevant_ranks

    rng = np.random.default_rng(4)
    X = rng.standard_normal((120, 6)) * 3.0
    y = np.repeat(np.arange(6), 20)
    keep = X.copy()
    mm = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float64, shape=X.shape)
    mm[:] = X
    mm.flush()
    mm = np.load(tmp_path / "x.npy", mmap_mode="r+")
    inputs = {"float64": X, "list": X.tolist(), "memmap": mm, "float32": X.astype(np.float32),
              "strided": np.asfortranarray(X)}
    torch = pytest.importorskip("torch")
    inputs["tensor"] = torch.from_numpy(X.copy())
    ref = None
    for name, A in inputs.items():
        r = retrieval_metrics(A, y, include=["P@1", "MAP@R", "NMI"], device="cpu")
        v, i = knn_search(A, k=5, exclude_self=True, device="cpu")
        rr = relevant_ranks(A, y, X_ref=A, y_ref=y, depth=10, device="cpu")
        nmi = kmeans_nmi_f1(A, y, seed=0)["NMI"]
        got = (r["P@1"], r["MAP@R"], r["NMI"], v.tobytes(), i.tobytes(), rr.ranks.tobytes(), nmi)
        if name != "float32":  # float32 rounds the rows first: other values
            ref = ref or got
            assert got == ref, name
    np.testing.assert_array_equal(X, keep)
    np.testing.assert_array_equal(np.asarray(mm), keep)
    np.testing.assert_array_equal(inputs["tensor"].numpy(), keep)
    np.testing.assert_array_equal(inputs["strided"], keep)
    # a private copy is normalised once, in place, and serves one metric
    s = check_sets(inputs["float32"], y)
    assert s.owned == (True, True)
    q, _ = s.prepared("cosine")
    assert q is s.Q64 and s.prepared("cosine")[0] is q
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, rtol=0, atol=1e-15)
    with pytest.raises(Exception, match="one metric"):
        s.prepared("euclidean")
    assert check_sets(X, y).owned == (False, False)
