"""k-means with its steps on a device (embedscope.metrics.kmeans_device; issue 18, goal 4), run here
on the CPU's torch (``kmeans.TORCH_ON_CPU``): the same labels and centroids as the numpy engine,
bit for bit, and as a reference written from the definition. ``tests/test_cuda.py`` runs it on a GPU."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_clustering import _sop_like  # noqa: E402 - SOP-like class sizes, as the CPU engine's tests


@pytest.fixture
def torch_engine(monkeypatch):
    from embedscope.metrics import kmeans as km

    monkeypatch.setattr(km, "TORCH_ON_CPU", True)
    return km


def _case(case):
    rng = np.random.default_rng(5)
    if case == "sop":
        return _sop_like(300, 24, seed=2)[0], 300
    if case == "grid_ties":  # small integers: exact ties between centroids, duplicate rows
        return rng.integers(0, 4, (600, 3)).astype(np.float32), 40
    if case == "cub_like":  # fewer clusters than the largest one's points: the CPU's sequential cumsum
        y = np.repeat(np.arange(12), 70)
        return (rng.standard_normal((12, 16))[y] * 3 + rng.standard_normal((840, 16))).astype(np.float32), 12
    if case == "collapsed":  # every row one point: clusters emptied and split at every step
        return np.tile(rng.standard_normal(6), (400, 1)).astype(np.float32), 50
    if case == "nearly_collapsed":  # every float32 distance within the error bound: settled in float64
        x = np.tile(rng.standard_normal(6), (400, 1)) + 1e-6 * rng.standard_normal((400, 6))
        return x.astype(np.float32), 50
    if case == "one_cluster":
        return rng.standard_normal((200, 5)).astype(np.float32), 1
    if case == "k_equals_n":
        return rng.standard_normal((60, 5)).astype(np.float32), 60
    raise AssertionError(case)


CASES = ["sop", "grid_ties", "cub_like", "collapsed", "nearly_collapsed", "one_cluster", "k_equals_n"]


@pytest.mark.parametrize("case", CASES)
def test_device_engine_equals_the_numpy_engine(torch_engine, case):
    km = torch_engine
    x, k = _case(case)
    dev = km.lloyd_kmeans(x, k, niter=20, seed=1234, device="cpu")
    assert dev["stats"] and all(s[2] == "device" for s in dev["stats"])  # the device engine ran
    for bounds in (False, None):
        cpu = km.lloyd_kmeans(x, k, niter=20, seed=1234, bounds=bounds)
        np.testing.assert_array_equal(dev["labels"], cpu["labels"])
        np.testing.assert_array_equal(dev["centroids"], cpu["centroids"])  # bit for bit
        assert (dev["n_steps"], dev["n_split"], dev["converged"]) == (cpu["n_steps"], cpu["n_split"], cpu["converged"])


def _sequential_update(x, a, k):
    """faiss's update from its definition: each cluster's points added one at a time in row order in
    float32, times the float32 1/count; empty clusters split as faiss does (its random draws:
    ``_split_clusters``, bit-equal to faiss's in tests/test_clustering.py)."""
    from embedscope.metrics.kmeans import _split_clusters

    C = np.zeros((k, x.shape[1]), dtype=np.float32)
    for i in range(x.shape[0]):
        C[a[i]] = C[a[i]] + x[i]
    cnt = np.bincount(a, minlength=k).astype(np.float32)
    nz = cnt > 0
    C[nz] = C[nz] * (np.float32(1) / cnt[nz])[:, None]
    _split_clusters(C, cnt, x.shape[0])
    return C


def _nearest(x, C):
    """Nearest centroid from the definition: float64 Σ (x − c)², ties to the lower index."""
    d = ((x.astype(np.float64)[:, None, :] - C.astype(np.float64)[None]) ** 2).sum(-1)
    return d.argmin(1)


@pytest.mark.parametrize("case", ["sop", "grid_ties", "cub_like"])
def test_device_engine_equals_a_reference_from_the_definition(torch_engine, case):
    km = torch_engine
    x, k = _case(case)
    C = x[km.faiss_random_init(len(x), k, 1234)].copy()
    prev = None
    for _ in range(20):
        a = _nearest(x, C)
        if prev is not None and np.array_equal(a, prev):
            break
        C = _sequential_update(x, a, k)
        prev = a
    else:
        a = _nearest(x, C)
    r = km.lloyd_kmeans(x, k, niter=20, seed=1234, device="cpu")
    np.testing.assert_array_equal(r["labels"], a)
    np.testing.assert_array_equal(r["centroids"], C)


def test_device_update_is_the_sequential_float32_sum(torch_engine):
    from embedscope.metrics.kmeans_device import _device_update

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3000, 7)) * 10 ** rng.uniform(-3, 3, (3000, 1))).astype(np.float32)  # rounding shows
    k = 700
    a = rng.permutation(np.arange(3000) % k)  # every cluster non-empty, 4-5 points each
    C, ns = _device_update(x, torch.from_numpy(x), a, k)
    assert ns == 0
    np.testing.assert_array_equal(C.numpy(), _sequential_update(x, a, k))


def test_exact_ties_are_settled_in_float64_to_the_lower_index(torch_engine):
    from embedscope.metrics.kmeans_device import _DeviceAssigner

    # rows midway between centroid pairs (exactly equal distances) and rows near them
    C = np.array([[0, 0], [2, 0], [0, 2], [2, 2]], dtype=np.float32)
    rng = np.random.default_rng(0)
    x = np.concatenate([np.array([[1, 0], [0, 1], [1, 1], [2, 1], [1, 2]], dtype=np.float32),
                        (rng.uniform(0, 2, (300, 2))).astype(np.float32)])
    eng = _DeviceAssigner(x, 4, torch.device("cpu"))
    a = eng.assign(torch.from_numpy(C))
    assert eng.n_ties >= 5
    np.testing.assert_array_equal(a, _nearest(x, C))
    assert list(a[:5]) == [0, 0, 0, 1, 2]


def test_the_second_smallest_value_decides_which_rows_are_settled(torch_engine):
    """The device keeps each row's smallest and second-smallest value (a min, then a min with the first
    set to +inf): exactly the rows midway between two centroids are settled in float64, those far from
    every midpoint are proven by the float32 values, with k = 2 and the tied pair anywhere in the row."""
    from embedscope.metrics.kmeans_device import _DeviceAssigner

    rng = np.random.default_rng(1)
    C = np.array([[0], [8], [2], [6], [4]], dtype=np.float32)  # pairs tie at 1, 3, 5 and 7
    mid = np.array([[1], [3], [5], [7]], dtype=np.float32)
    far = rng.choice(np.array([0, 0.2, 1.8, 2.3, 3.7, 4.1, 5.9, 6.2, 7.8, 8.5, -3, 11]), 200).astype(np.float32)[:, None]
    x = np.concatenate([far[:100], mid, far[100:]])
    eng = _DeviceAssigner(x, 5, torch.device("cpu"))
    a = eng.assign(torch.from_numpy(C))
    assert eng.n_ties == 4  # the midway rows alone
    np.testing.assert_array_equal(a, _nearest(x, C))
    np.testing.assert_array_equal(a[100:104], [0, 2, 3, 1])  # ties: the lower index (C[0]/C[2] at 1, ...)
    eng2 = _DeviceAssigner(np.array([[1], [1.5], [-4]], dtype=np.float32), 2, torch.device("cpu"))
    np.testing.assert_array_equal(eng2.assign(torch.from_numpy(np.array([[2], [0]], dtype=np.float32))), [0, 0, 1])
    assert eng2.n_ties == 1
    eng1 = _DeviceAssigner(x, 1, torch.device("cpu"))
    np.testing.assert_array_equal(eng1.assign(torch.from_numpy(C[:1])), np.zeros(len(x)))
    assert eng1.n_ties == 0


def test_the_callers_float32_precision_is_kept(torch_engine):
    km = torch_engine
    x, k = _case("sop")
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        r = km.lloyd_kmeans(x, k, device="cpu")
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before)
    np.testing.assert_array_equal(r["labels"], km.lloyd_kmeans(x, k)["labels"])


def test_retrieval_and_nmi_pass_their_device_to_kmeans(torch_engine, monkeypatch):
    import embedscope.metrics.kmeans_device as kd
    from embedscope.metrics import retrieval_metrics
    from embedscope.metrics.clustering import kmeans_nmi_f1

    x, y = _sop_like(200, 16, seed=4)
    calls = []
    real = kd.device_lloyd_kmeans
    monkeypatch.setattr(kd, "device_lloyd_kmeans", lambda *a, **kw: calls.append(kw["dev"]) or real(*a, **kw))
    on = kmeans_nmi_f1(x, y, device="cpu")
    got = retrieval_metrics(x, y, include=["NMI", "F1"], device="cpu")
    assert len(calls) == 2
    monkeypatch.setattr(torch_engine, "TORCH_ON_CPU", False)
    off = kmeans_nmi_f1(x, y, device="cpu")
    assert len(calls) == 2  # numpy's engine
    assert (on["NMI"], on["F1"]) == (off["NMI"], off["F1"]) == (got["NMI"], got["F1"])


def test_device_errors_are_clear():
    from embedscope.errors import EmbedscopeError
    from embedscope.metrics import kmeans as km

    x, k = _case("sop")
    if not torch.cuda.is_available():
        with pytest.raises(EmbedscopeError, match="no CUDA GPU is available"):
            km.lloyd_kmeans(x, k, device="cuda")
    with pytest.raises(EmbedscopeError, match="unknown device"):
        km.lloyd_kmeans(x, k, device="tpu")


def test_bounds_are_the_cpus(torch_engine):
    from embedscope.errors import EmbedscopeError

    x, k = _case("sop")
    with pytest.raises(EmbedscopeError, match="bounds=True runs on the CPU"):
        torch_engine.lloyd_kmeans(x, k, bounds=True, device="cpu")


def _beside_set():
    return _sop_like(400, 16, seed=9)


def test_kmeans_beside_the_ranks_gives_the_same_values(monkeypatch):
    # on a GPU, NMI/F1's k-means runs in a thread beside the ranks (here forced on the CPU)
    import threading

    import embedscope.metrics.retrieval as rt

    x, y = _beside_set()
    keys = ["P@1", "MAP@R", "mAP@1000", "NMI", "F1"]
    ran_in = []
    real = rt._clusters

    def spy(*a, **k):
        ran_in.append(threading.current_thread().name)
        return real(*a, **k)

    monkeypatch.setattr(rt, "_clusters", spy)
    monkeypatch.setattr(rt, "_kmeans_beside", lambda device: False)
    alone = rt.retrieval_metrics(x, y, include=keys, device="cpu")
    monkeypatch.setattr(rt, "_kmeans_beside", lambda device: True)
    beside = rt.retrieval_metrics(x, y, include=keys, device="cpu")
    assert beside == alone
    rt.retrieval_metrics(x, y, include=["NMI"], device="cpu")  # only NMI: nothing to run beside
    assert ran_in[0] == ran_in[2] == threading.current_thread().name
    assert ran_in[1].startswith("embedscope-beside")
    for t in threading.enumerate():  # the thread ends with its task (it may still be on its way out)
        if t.name.startswith("embedscope-beside"):
            t.join(timeout=30)
    assert not any(t.name.startswith("embedscope-beside") for t in threading.enumerate())


def test_errors_beside_the_ranks_reach_the_caller(monkeypatch):
    import threading

    import embedscope.metrics.retrieval as rt
    from embedscope.errors import EmbedscopeError

    x, y = _beside_set()
    monkeypatch.setattr(rt, "_kmeans_beside", lambda device: True)
    real = rt._clusters

    def broken(*a, **k):
        raise EmbedscopeError("k-means broke")

    monkeypatch.setattr(rt, "_clusters", broken)
    with pytest.raises(EmbedscopeError, match="k-means broke"):
        rt.retrieval_metrics(x, y, include=["P@1", "NMI"], device="cpu")
    # the ranks fail while k-means runs: their error, and the thread finished before it is raised
    done = threading.Event()

    def slow(*a, **k):
        out = real(*a, **k)
        done.set()
        return out

    def ranks_broken(*a, **k):
        raise EmbedscopeError("ranks broke")

    monkeypatch.setattr(rt, "_clusters", slow)
    monkeypatch.setattr(rt, "_ranks_by_query_blocks", ranks_broken)
    with pytest.raises(EmbedscopeError, match="ranks broke"):
        rt.retrieval_metrics(x, y, include=["MAP@R", "NMI"], device="cpu")
    assert done.is_set()
