"""Audit 27 (helper C): ``embed --num-workers N`` starts its DataLoader workers once.

What was wrong before: ``embed_images(..., by_split=True)`` (``embed``, ``study``) built one DataLoader
per split, so ``embed --num-workers 2`` started its worker processes twice (train, then test): twice
the start-up. One DataLoader now serves every split, its batch sampler the splits' own batches in
order (a batch never mixes two splits): the workers start once, and the rows are the same, bit for
bit, as those of a loader per split (checked here against that loop, written out) and of
``--num-workers 0``.
"""

from __future__ import annotations

import numpy as np
import pytest

import embedscope.embed as embed_mod
from embedscope import store
from embedscope.cli import main


def _model(seed: int = 0):
    import torch

    from embedscope.models import build_model, default_config

    torch.manual_seed(seed)
    return build_model(default_config("digits_cnn", embed_dim=8)).eval()


def _per_split_loaders(model, ds, transform, batch_size: int) -> np.ndarray:
    """What embed_images did before: one DataLoader per split (workers 0), each over ``ds.take(rows)``."""
    import torch

    from embedscope.data import TorchImages

    out = np.empty((len(ds), model.embed_dim), dtype=np.float32)
    with torch.inference_mode():
        for rows in embed_mod.split_rows(ds.split):
            loader = torch.utils.data.DataLoader(TorchImages(ds.take(rows), transform), batch_size=batch_size,
                                                 shuffle=False, num_workers=0)
            for x, _, idx in loader:
                out[rows[idx.numpy()]] = model(x).float().numpy()
    return out


@pytest.fixture
def starts(monkeypatch):
    """How many times the worker processes were started (``start_workers``: ``iter`` of a loader)."""
    calls = []
    real = embed_mod.start_workers

    def spy(loader):
        calls.append(loader.num_workers)
        return real(loader)

    monkeypatch.setattr(embed_mod, "start_workers", spy)
    return calls


@pytest.mark.parametrize("batch_size", [256, 100])
def test_workers_start_once_and_rows_are_those_of_a_loader_per_split(starts, batch_size):
    from embedscope.data import get_dataset, image_transform

    ds = get_dataset("digits")
    # interleave the splits, so that their rows are not two runs of the data set's order
    ds = ds.take(np.random.default_rng(0).permutation(len(ds)))
    tf = image_transform("digits", train=False, image_size=8)
    model = _model()
    want = _per_split_loaders(model, ds, tf, batch_size)
    got = embed_mod.embed_images(model, ds, transform=tf, batch_size=batch_size, num_workers=2, device="cpu",
                                 progress=False, by_split=True)
    assert starts == [2]  # one start for both splits (before: [2, 2])
    assert got.tobytes() == want.tobytes()
    zero = embed_mod.embed_images(model, ds, transform=tf, batch_size=batch_size, num_workers=0, device="cpu",
                                  progress=False, by_split=True)
    assert zero.tobytes() == want.tobytes()
    assert starts == [2]  # (no workers: nothing started)


def test_batches_never_mix_splits_and_the_bar_counts_them(monkeypatch):
    """The batch sampler: each split's rows in its own batches of batch_size, in the order the splits
    first appear; the progress bar's total is their number, and it reaches it."""
    import torch

    from embedscope.data import get_dataset

    ds = get_dataset("digits")
    ds = ds.take(np.random.default_rng(1).permutation(len(ds)))
    seen = []
    real_loader = torch.utils.data.DataLoader

    def loader(*a, **kw):
        seen.append([list(b) for b in kw["batch_sampler"]])
        return real_loader(*a, **kw)

    monkeypatch.setattr(torch.utils.data, "DataLoader", loader)
    bars = []
    import embedscope.progress as progress_mod

    real_bar = progress_mod.progress_bar

    def bar(*a, **kw):
        b = real_bar(*a, **kw)
        bars.append(b)
        return b

    monkeypatch.setattr(progress_mod, "progress_bar", bar)
    embed_mod.embed_images(_model(), ds, batch_size=300, num_workers=0, device="cpu", progress=False, by_split=True)
    assert len(seen) == 1  # one loader
    want = [rows[s:s + 300].tolist() for rows in embed_mod.split_rows(ds.split) for s in range(0, len(rows), 300)]
    assert seen[0] == want
    assert all(len(set(ds.split[b].tolist())) == 1 for b in seen[0])
    assert bars[0].total == len(want) and bars[0].n == len(want)


def test_embed_cli_num_workers_2_writes_the_rows_of_num_workers_0(tmp_path, starts):
    from embedscope.models import default_config, save_checkpoint

    ckpt = tmp_path / "m.pt"
    save_checkpoint(ckpt, _model(3), default_config("digits_cnn", embed_dim=8))
    files = {}
    for w in (0, 2):
        files[w] = tmp_path / f"w{w}.h5"
        assert main(["embed", str(ckpt), "--dataset", "digits", "--num-workers", str(w), "--no-progress",
                     "-o", str(files[w])]) == 0
    assert starts == [2]
    a, b = store.load(files[0]), store.load(files[2])
    assert a.embeddings.tobytes() == b.embeddings.tobytes()
    assert np.array_equal(a.labels, b.labels) and np.array_equal(a.paths, b.paths)
    assert np.array_equal(a.split, b.split)
