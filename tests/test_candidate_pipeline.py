"""``knn.candidate_blocks``' device loop hands each block over one block late (the next one queued on
the device first, so that a GPU computes while the caller certifies). It runs on CUDA; here its code
runs on the CPU's torch (faiss's lists switched off, the candidate-list path forced) and must give
the ranks and neighbours of the default path, every block once and in order."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")


@pytest.fixture
def torch_lists(monkeypatch):
    import embedscope.metrics.search.knn as K
    import embedscope.metrics.search.ranks as R

    handed = []
    real = K._handed

    def spy(ks, s, e, v, i):
        handed.append((s, e))
        return real(ks, s, e, v, i)

    monkeypatch.setattr(K, "FAISS_MIN_L", 10**9)   # the device loop, on the CPU's torch
    monkeypatch.setattr(K, "CPU_SELECT", False)      # knn_search's lists too
    monkeypatch.setattr(K, "_handed", spy)
    monkeypatch.setattr(R, "_rows_plan", lambda *a, **k: False)  # the candidate-list path of CUDA
    monkeypatch.setattr(R, "_counting_plan", lambda *a, **k: None)
    return handed


def _set(seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 600, 4000)
    X = (rng.standard_normal((600, 24))[y] + 1.3 * rng.standard_normal((4000, 24))).astype(np.float32)
    return X, y


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_lists_handed_one_block_late_give_the_default_ranks(monkeypatch, torch_lists, metric):
    from embedscope.metrics import retrieval_metrics

    X, y = _set()
    keys = ["P@1", "R-Precision", "MAP@R", "mAP@C"]
    got = retrieval_metrics(X, y, include=keys, metric=metric, device="cpu", block=700)
    blocks = list(torch_lists)
    assert blocks == [(s, min(4000, s + 700)) for s in range(0, 4000, 700)]  # each once, in order
    monkeypatch.undo()
    ref = retrieval_metrics(X, y, include=keys, metric=metric, device="cpu", block=700)
    assert {k: got[k] for k in keys} == {k: ref[k] for k in keys}


def test_knn_from_lists_handed_one_block_late(monkeypatch, torch_lists):
    import embedscope.metrics.search.knn as K
    from embedscope.metrics import knn_search

    X, _ = _set(1)
    v, i = knn_search(X, k=12, exclude_self=True, device="cpu", block=900)
    assert torch_lists and torch_lists[0] == (0, 900)
    monkeypatch.undo()
    assert K.FAISS_MIN_L == 0
    v0, i0 = knn_search(X, k=12, exclude_self=True, device="cpu", block=900)
    np.testing.assert_array_equal(i, i0)
    np.testing.assert_array_equal(v, v0)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_lists_certified_in_worker_threads_give_the_same_ranks(monkeypatch, torch_lists, threads):
    # on a GPU the CPU's cores certify several blocks at once (forced here on the CPU)
    import threading

    import embedscope.metrics.search.ranks as R
    import embedscope.metrics.search.threads as T
    from embedscope.metrics import retrieval_metrics
    from embedscope.metrics.search.threads import search_threads

    X, y = _set(2)
    keys = ["P@1", "R-Precision", "MAP@R", "mAP@1000"]
    ref = retrieval_metrics(X, y, include=keys, device="cpu", block=500)  # (the lists' path, one thread)
    names = []
    real = R._certify_lists

    def spy(*a):
        names.append(threading.current_thread().name)
        return real(*a)

    monkeypatch.setattr(R, "_certify_lists", spy)
    monkeypatch.setattr(T, "CERTIFY_THREADS_ON_CPU", True)
    with search_threads(threads):
        got = retrieval_metrics(X, y, include=keys, device="cpu", block=500)
    assert {k: got[k] for k in keys} == {k: ref[k] for k in keys}
    assert len(names) == 8  # 4,000 queries in blocks of 500
    workers = {n for n in names if n.startswith("embedscope-certify")}
    assert (len(workers) >= 1) == (threads > 1) and len(workers) <= threads
    assert torch.get_num_threads() >= 1 and not any(t.name.startswith("embedscope-certify")
                                                     for t in threading.enumerate())


def test_knn_lists_checked_in_worker_threads(monkeypatch, torch_lists):
    import embedscope.metrics.search.knn as K
    import embedscope.metrics.search.threads as T
    from embedscope.metrics import knn_search
    from embedscope.metrics.search.threads import search_threads

    X, _ = _set(3)
    v1, i1 = knn_search(X, k=20, exclude_self=True, device="cpu", block=600)
    monkeypatch.setattr(T, "CERTIFY_THREADS_ON_CPU", True)
    with search_threads(2):
        v2, i2 = knn_search(X, k=20, exclude_self=True, device="cpu", block=600)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_array_equal(v1, v2)
    monkeypatch.undo()
    assert K.FAISS_MIN_L == 0 and not T.CERTIFY_THREADS_ON_CPU
    v0, i0 = knn_search(X, k=20, exclude_self=True, device="cpu", block=600)
    np.testing.assert_array_equal(i0, i2)
