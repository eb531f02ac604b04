"""Each training image's augmentation is drawn from (run seed, epoch, index) (TorchImages with a seed,
EpochTagged): the same whatever the number of loader workers, a resume with other workers continues
the uninterrupted run bit for bit, and the workers start once per run (persistent across epochs)."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

QUICK = {"dataset": "digits", "embed_dim": 8, "eval_every": 0, "seed": 3}


def _weights(path):
    from embedscope.models import load_checkpoint

    model, _, _ = load_checkpoint(path)
    return {k: v.clone() for k, v in model.state_dict().items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_workers_and_resume_do_not_change_the_draws(tmp_path):
    from embedscope.train.trainer import train

    quiet = {"progress": False, "echo": lambda s: None}
    train({**QUICK, "epochs": 3, "num_workers": 0}, tmp_path / "w0.pt", **quiet)
    train({**QUICK, "epochs": 3, "num_workers": 2}, tmp_path / "w2.pt", **quiet)
    w0 = _weights(tmp_path / "w0.pt")
    assert _same(w0, _weights(tmp_path / "w2.pt"))
    # 2 epochs with 2 workers, resumed to 3 with 1: the uninterrupted run's weights
    train({**QUICK, "epochs": 2, "num_workers": 2}, tmp_path / "r.pt", **quiet)
    train({**QUICK, "epochs": 3, "num_workers": 1}, tmp_path / "r.pt", resume=True, **quiet)
    assert _same(w0, _weights(tmp_path / "r.pt"))
    # another seed draws other augmentations (and other batches): the check above can fail
    train({**QUICK, "epochs": 3, "num_workers": 0, "seed": 4}, tmp_path / "s4.pt", **quiet)
    assert not _same(w0, _weights(tmp_path / "s4.pt"))


def test_loader_workers_start_once_per_run(tmp_path, monkeypatch):
    import embedscope.embed as E
    from embedscope.train.trainer import train

    starts = tmp_path / "starts"
    starts.mkdir()
    real = E.quiet_worker

    def counted(worker_id):  # runs in each worker process as it starts
        (starts / f"{os.getpid()}-{worker_id}").touch()
        real(worker_id)

    monkeypatch.setattr(E, "quiet_worker", counted)
    train({**QUICK, "epochs": 3, "num_workers": 2}, tmp_path / "m.pt", progress=False, echo=lambda s: None)
    assert len(list(starts.iterdir())) == 2  # (one start per worker per epoch before: 6)


def test_an_items_draws_depend_on_seed_epoch_and_index_only():
    from embedscope.data import TorchImages, get_dataset, image_transform
    from embedscope.data.base import augment_seed

    ds = get_dataset("digits").subset("train")
    view = TorchImages(ds, image_transform("digits", train=True), seed=7)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a, label, i = view[(2, 5)]
    assert torch.equal(torch.get_rng_state(), before)  # the caller's generator as it was
    assert (label, i) == (int(ds.labels[5]), 5)
    torch.rand(10)  # whatever the caller draws meanwhile
    assert torch.equal(view[(2, 5)][0], a)
    # the same image in another epoch, or in a run of another seed: other draws
    assert not torch.equal(view[(3, 5)][0], a)
    assert not torch.equal(TorchImages(ds, view.transform, seed=8)[(2, 5)][0], a)
    # the seed: 32 bits (what torch's generator keeps), deterministic, unrelated for neighbours
    seeds = {augment_seed(7, e, j) for e in range(20) for j in range(500)}
    assert len(seeds) == 10_000 and max(seeds) < 2**32
    assert augment_seed(7, 2, 5) == augment_seed(7, 2, 5)
    # a plain index draws from the caller's generator, as before
    torch.manual_seed(1)
    x1 = view[5][0]
    torch.manual_seed(1)
    assert torch.equal(view[5][0], x1)


def test_epoch_tagged_batches():
    from embedscope.train.samplers import EpochTagged, build_sampler

    y = np.repeat(np.arange(10), 6)
    s = build_sampler("spc-2", y, 8, seed=0)
    t = EpochTagged(s)
    t.epoch = 4
    batches = list(t)
    assert len(batches) == len(t) == len(s)
    assert all(e == 4 and isinstance(i, int) for b in batches for e, i in b)
