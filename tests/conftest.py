import os

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib  # noqa: E402
import pytest  # noqa: E402

matplotlib.use("Agg", force=True)

if os.environ.get("PYTEST_XDIST_WORKER"):
    # two workers on two cores: one thread each avoids oversubscription
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover
        pass


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
