import os

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

matplotlib.use("Agg", force=True)

_approx = pytest.approx


def _strict_approx(expected, rel=None, abs=None, nan_ok=False):
    """``pytest.approx`` that refuses to compare a tiny non-zero value under its default ``abs=1e-12``:
    that tolerance passed anything near a π of 1e-12, a uniformity of −3.7e-12 or a p-value of
    5.6e-184, whatever ``rel`` said. Such a comparison must name its ``abs`` (``abs=0``: relative only)."""
    if abs is None:
        try:
            v = np.abs(np.asarray(list(expected.values()) if isinstance(expected, dict) else expected, dtype=float))
        except (TypeError, ValueError):
            v = None
        if v is not None and np.any((v > 0) & (v < 1e-9)):
            raise AssertionError(f"pytest.approx of a value below 1e-9 ({float(np.min(v[v > 0])):.3g}) under the "
                                 "default abs=1e-12: give abs= (abs=0 compares relatively)")
    return _approx(expected, rel=rel, abs=abs, nan_ok=nan_ok)


pytest.approx = _strict_approx

if os.environ.get("PYTEST_XDIST_WORKER"):
    # two workers on two cores: one thread each avoids oversubscription, in the workers and in the
    # processes their tests start (embedscope train/embed/study..., notebooks, docs' shell blocks):
    # torch's and BLAS's thread pools read these when they start; a 2-thread pool per process on 2
    # busy cores spent 3-4x the CPU time of one thread on the small models the tests train
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover
        pass

# `make test` (--dist loadfile --no-loadscope-reorder) hands each xdist worker whole files in
# collection order: the longest files first, so that short ones fill the end and both workers finish
# together (xdist's own order, by number of tests, left the 2-test README walk-through, one of the
# longest, to the very end). Longest first by a `make test` run's per-file time; other files follow
# in their usual order. A stale list costs only balance.
LONGEST_FILES = (
    "test_audit_ux2", "test_readme", "test_trainer", "test_notebooks_exec", "test_audit23_viz_evaluate",
    "test_benchmarks_cli", "test_audit23_train_saliency", "test_audit_ux", "test_docs_examples",
    "test_cli_foundation", "test_retrieval_collapsed", "test_viz_yoked_maps", "test_audit27_cli", "test_grid",
    "test_retrieval", "test_properties_collapsed", "test_audit25_study", "test_audit_figures", "test_audit25_maps",
    "test_audit27_viz", "test_audit_study_stats", "test_audit_matching", "test_cli_audit_fixes",
    "test_audit_retrieval", "test_audit24_options_training", "test_audit25_search", "test_audit25_evaluate",
    "test_audit24_properties", "test_escapes", "test_tsne", "test_audit23_scatter_tsne", "test_audit24_options_maps",
)


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # a run in one process keeps the usual order
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}

    def key(item):  # stable: the tests of a file keep their order
        return rank.get(item.path.stem, len(rank))

    items.sort(key=key)


def snapshot(folder, *, inodes: bool = False):
    """Every file (hidden ones included) and folder under ``folder``: path -> sha256 (with
    ``inodes``: (sha256, inode), to tell a file put back from a new copy) or 'dir'."""
    import hashlib

    state = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            state[os.path.relpath(os.path.join(root, name), folder)] = "dir"
        for name in files:
            p = os.path.join(root, name)
            with open(p, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            state[os.path.relpath(p, folder)] = (digest, os.lstat(p).st_ino) if inodes else digest
    return state


def save_digits_checkpoint(path, embed_dim: int = 8, seed: int = 0):
    """An untrained digits_cnn checkpoint at ``path`` (torch seeded: the same weights each time)."""
    import torch

    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(seed)
    cfg = default_config("digits_cnn", embed_dim=embed_dim)
    save_checkpoint(path, build_model(cfg), cfg)
    return path


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory):
    """A folder with two untrained digits_cnn checkpoints, net1.pt and net2.pt (seeds 1 and 2)."""
    d = tmp_path_factory.mktemp("ck")
    for seed in (1, 2):
        save_digits_checkpoint(d / f"net{seed}.pt", seed=seed)
    return d


@pytest.fixture(scope="module")
def emb_cache(tmp_path_factory):
    """An embedding cache folder for the studies of one test module."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def seen(monkeypatch):
    """The retrieval passes whose union-of-windows count ran (knn.tie_window_before): 'rows',
    'count', 'candidates' (test_retrieval_collapsed, test_retrieval_centred)."""
    import embedscope.metrics.search.counting as counting
    import embedscope.metrics.search.ranks as ranks
    import embedscope.metrics.search.rows as rows

    out = []
    for name, mod in (("rows", rows), ("count", counting), ("candidates", ranks)):
        real = mod.tie_window_before

        def spy(*a, _real=real, _name=name, **k):
            out.append(_name)
            return _real(*a, **k)

        monkeypatch.setattr(mod, "tie_window_before", spy)
    return out
