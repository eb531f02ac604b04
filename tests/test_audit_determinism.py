"""Determinism audit: the same call gives the same result, and a result records what it depends on
(seeds, thread counts) so that it can be made again (docs/methods.md §1, §10)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from cli_run import cli_output as _cli

from embedscope import store
from embedscope.analyses import neighbour_examples, tsne, yoke
from embedscope.cli import main
from embedscope.synthetic import clustered, embedding_set
from embedscope.tsne import joint_tsne, single_tsne, yoked_tsne

SHORT = {"n_iter": 10, "early_exaggeration_iter": 10}


# --- t-SNE: the thread count (n_jobs) is recorded; the map does not depend on it ----------------

@pytest.mark.parametrize("n_jobs, expected", [(1, 1), (2, 2), (-1, 3)])
def test_tsne_info_records_the_thread_count(n_jobs, expected, monkeypatch):
    # -1: the cores this process may use (an affinity mask of 3 here), not the machine's (openTSNE's -1)
    import embedscope.device

    monkeypatch.setattr(embedscope.device, "available_cpus", lambda: 3)
    X, _ = clustered(60, 5, 3, seed=0)
    _, info = single_tsne(X, n_jobs=n_jobs, return_info=True, **SHORT)
    assert info["n_jobs"] == expected
    _, _, info = joint_tsne(X[:30], X[30:], n_jobs=n_jobs, return_info=True, **SHORT)
    assert info["n_jobs"] == expected
    _, _, info = yoked_tsne(X, X[:, ::-1].copy(), n_jobs=n_jobs, return_info=True, **SHORT)
    assert info["n_jobs"] == expected


def test_tsne_and_yoke_results_record_the_thread_count_in_their_provenance():
    es = embedding_set(80, 6, 4, seed=1)
    assert tsne(es, n_jobs=2, n_iter=10).provenance["n_jobs"] == 2
    assert tsne(es, joint=True, n_iter=10).provenance["n_jobs"] == 1  # (80 points: one thread by default)
    assert yoke(es, embedding_set(80, 6, 4, seed=2), n_jobs=2, n_iter=10).provenance["n_jobs"] == 2


def test_tsne_of_1000_points_same_map_whatever_the_thread_count():
    """docs/methods.md §10: same file, settings and seed -> the same map bit for bit; from 1,000
    points openTSNE builds its approximate neighbour trees on n_jobs threads (another count, another
    map), so embedscope builds them on one thread (tests/test_tsne_threads.py)."""
    X, _ = clustered(1000, 8, 5, seed=3)
    a = single_tsne(X, n_jobs=2, **SHORT)
    random.seed(9)
    np.random.seed(9)  # the global random state plays no part
    b = single_tsne(X, n_jobs=2, **SHORT)
    assert np.array_equal(a, b)
    c = single_tsne(X, n_jobs=1, **SHORT)
    assert np.array_equal(a, c)


# --- neighbours: the seed that drew the queries is part of the result and of the command's output -

def test_neighbour_examples_record_the_seed_of_drawn_queries():
    es = embedding_set(120, 6, 6, seed=0)
    ex = neighbour_examples(es, queries=4, k=2, seed=3)
    assert ex.seed == 3 and ex.selection == "4 random queries, seed 3"
    again = neighbour_examples(es, queries=4, k=2, seed=ex.seed)
    assert list(again.query_paths) == list(ex.query_paths)
    given = neighbour_examples(es, paths=list(ex.query_paths[:2]), k=2)
    assert given.seed is None and given.selection == "2 queries given by path"
    # the figure says it too (a PNG alone must tell how to draw it again)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embedscope.viz.neighbours import draw_neighbours

    img = np.zeros((8, 8, 3), dtype=np.uint8)
    for e, want in ((ex, "(drawn at random, seed 3)"), (given, "(given by path)")):
        n, k = e.similarity.shape
        fig = draw_neighbours(e, [img] * n, [[img] * k for _ in range(n)])
        assert want in fig._suptitle.get_text()
        plt.close(fig)


def test_neighbours_command_prints_the_seed(tmp_path):
    es = embedding_set(120, 6, 6, seed=0)
    f = tmp_path / "e.h5"
    store.save(f, es)
    from PIL import Image

    root = tmp_path / "data"
    for p in es.paths:
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (20, 20, 200)).save(root / p)
    text = _cli(["neighbours", str(f), "--queries", "3", "--n-retrievals", "2", "--seed", "5", "--root", str(root),
                 "-o", str(tmp_path / "n.png")])
    assert "3 queries, top-2 in 'test'" in text and "(drawn with --seed 5)" in text
    (tmp_path / "q.txt").write_text(str(es.subset("test").paths[0]) + "\n", encoding="utf-8")
    text = _cli(["neighbours", str(f), "--paths-file", str(tmp_path / "q.txt"), "--n-retrievals", "2",
                 "--root", str(root), "-o", str(tmp_path / "m.png")])
    assert "1 query, top-2 in 'test'" in text and "(from --paths-file)" in text


# --- training: the thread count a run's numbers depend on is recorded in its checkpoints ----------

def test_checkpoint_records_the_compute_threads_of_each_start_and_resume(tmp_path):
    import torch

    from embedscope.models import read_checkpoint
    from embedscope.train.trainer import train

    opts = {"dataset": "digits", "embed_dim": 4, "eval_every": 0, "epochs": 1}
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        train(opts, tmp_path / "m.pt", progress=False, echo=lambda s: None)
        one = read_checkpoint(tmp_path / "m.pt")["extra"]["compute"]
        assert one == [{"from_epoch": 1, "device": "cpu", "precision": "float32", "torch_threads": 1,
                        "torch": str(torch.__version__)}]
        torch.set_num_threads(2)
        train({"epochs": 2}, tmp_path / "m.pt", resume=True, progress=False, echo=lambda s: None)
    finally:
        torch.set_num_threads(before)
    both = read_checkpoint(tmp_path / "m.pt")["extra"]["compute"]
    assert [(c["from_epoch"], c["torch_threads"]) for c in both] == [(1, 1), (2, 2)]


# --- the same command twice, in fresh output folders: the same numbers and the same pictures ------

def _same_outputs(a, b, skip_keys=("seconds", "created", "started", "ended"), close_keys=()):
    import json

    import h5py

    names = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in names:
        x, y = a / rel, b / rel
        if rel.suffix == ".pdf":  # matplotlib stamps a CreationDate into every PDF
            continue
        if rel.suffix == ".json":
            def drop(o, close):
                if isinstance(o, dict):
                    return {k: (pytest.approx(v, rel=1e-12) if close and k in close_keys else drop(v, close))
                            for k, v in o.items() if k not in skip_keys}
                return [drop(v, close) for v in o] if isinstance(o, list) else o
            assert drop(json.loads(x.read_text()), False) == drop(json.loads(y.read_text()), True), rel
        elif rel.suffix == ".h5":
            with h5py.File(x) as f, h5py.File(y) as g:
                assert sorted(f) == sorted(g), rel
                for k in f:
                    assert np.array_equal(f[k][()], g[k][()]), (rel, k)
                assert {k: str(v) for k, v in f.attrs.items() if k not in skip_keys} == \
                    {k: str(v) for k, v in g.attrs.items() if k not in skip_keys}, rel
        else:
            assert x.read_bytes() == y.read_bytes(), rel


@pytest.mark.slow
def test_commands_twice_give_the_same_results(tmp_path, monkeypatch):
    from embedscope.train.trainer import train

    ck = tmp_path / "m.pt"
    train({"dataset": "digits", "embed_dim": 8, "eval_every": 0, "epochs": 1}, ck, progress=False,
          echo=lambda s: None)
    train({"dataset": "digits", "embed_dim": 8, "eval_every": 0, "epochs": 1, "seed": 1}, tmp_path / "m2.pt",
          progress=False, echo=lambda s: None)
    for c in ("m", "m2"):
        _cli(["embed", str(tmp_path / f"{c}.pt"), "--dataset", "digits", "--split", "all",
              "-o", str(tmp_path / f"{c}.h5"), "--no-progress"])
    e, e2 = str(tmp_path / "m.h5"), str(tmp_path / "m2.h5")
    for run in ("a", "b"):
        d = tmp_path / run
        d.mkdir()
        monkeypatch.chdir(d)  # another working folder each time
        _cli(["tsne", e, "--max-points", "200", "--n-iter", "50", "-o", "t.png", "--no-progress"])
        _cli(["tsne", e, "--joint", "--n-iter", "20", "--n-jobs", "2", "-o", "j.png", "--no-progress"])
        _cli(["yoke", e, e2, "--max-points", "200", "--n-iter", "50", "-o", "y.png", "--no-progress"])
        _cli(["saliency", str(ck), "--dataset", "digits", "--n-images", "3", "--n-samples", "4", "-o", "s.h5",
              "--figure", "s.png", "--no-progress"])
        _cli(["neighbours", e, "--queries", "3", "-o", "n.png"])
        _cli(["toy", "-o", "toy", "--n-seeds", "1", "--no-progress"])
        _cli(["evaluate", e, "--include", "R@1", "MAP@R", "NMI", "F1", "--json", "ev.json", "--no-progress"])
    # the maps are the same bit for bit; with --n-jobs 2 openTSNE sums the KL divergence it reports
    # over its threads, so that number may differ in its last digits (docs/methods.md §10)
    _same_outputs(tmp_path / "a", tmp_path / "b", close_keys=("kl_divergence",))


def test_the_same_figure_and_checkpoint_saved_twice_have_the_same_bytes(tmp_path):
    """The PDF held a creation date and the checkpoint's zip a folder named after the random
    temporary file, so identical outputs differed in bytes (and a checkpoint's sha256, which names
    cache entries and provenance)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from embedscope.models import build_model, save_checkpoint
    from embedscope.viz.figures import save_figure

    for name in ("a", "b"):
        fig, ax = plt.subplots()
        ax.plot([0, 1], [1, 0])
        ax.set_xlabel("x")
        save_figure(fig, tmp_path / f"{name}.png")
        plt.close(fig)
    assert (tmp_path / "a.pdf").read_bytes() == (tmp_path / "b.pdf").read_bytes()
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    torch.manual_seed(0)
    cfg = {"arch": "digits_cnn", "embed_dim": 8, "dataset": "digits"}
    model = build_model(cfg)
    for name in ("c.pt", "d.pt"):
        save_checkpoint(tmp_path / name, model, cfg, extra={"epoch": 0})
    assert (tmp_path / "c.pt").read_bytes() == (tmp_path / "d.pt").read_bytes()


def test_embed_records_the_torch_threads_its_bits_depend_on(tmp_path):
    """On the CPU `embed`'s last bits depend on the torch thread count, which the file did not say."""
    import torch

    from embedscope import store

    ck = tmp_path / "u.pt"
    assert main(["train", "--dataset", "digits", "--embed-dim", "8", "--epochs", "0", "--no-progress",
                 "-o", str(ck)]) == 0
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert main(["embed", str(ck), "--dataset", "digits", "-o", str(tmp_path / "e.h5"), "--no-progress"]) == 0
    finally:
        torch.set_num_threads(before)
    attrs = store.load(tmp_path / "e.h5").attrs
    assert attrs["torch_threads"] == 1 and attrs["torch_version"] == torch.__version__ and attrs["device"] == "cpu"


def test_tsne_and_yoke_take_the_idle_cores_by_default_from_1000_points(monkeypatch):
    """n_jobs None (the commands' default): the cores this process may use less the busy ones (the
    1-minute load average) for a map of at least AUTO_JOBS_MIN_POINTS points, one thread below; the
    map is the same either way."""
    import os

    import embedscope.device
    import embedscope.tsne.joint as joint

    monkeypatch.setattr(embedscope.device, "available_cpus", lambda: 3)
    for load, jobs in ((0.0, 3), (0.4, 3), (0.6, 2), (1.6, 1), (2.2, 1), (7.0, 1)):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, 0.0, 0.0))
        assert joint.auto_jobs(None, 1000) == jobs, load
    assert joint.auto_jobs(None, 999) == 1 and joint.auto_jobs(2, 10**6) == 2
    monkeypatch.delattr(os, "getloadavg")  # (Windows)
    assert joint.auto_jobs(None, 1000) == 3
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0), raising=False)
    es = embedding_set(80, 6, 4, seed=1)
    small = tsne(es, n_iter=10)
    assert small.provenance["n_jobs"] == 1
    monkeypatch.setattr(joint, "AUTO_JOBS_MIN_POINTS", 40)  # (80 points count as a large map)
    big = tsne(es, n_iter=10)
    assert big.provenance["n_jobs"] == 3
    assert np.array_equal(big.arrays["Y"], small.arrays["Y"])
    assert tsne(es, joint=True, n_iter=10).provenance["n_jobs"] == 3
    assert yoke(es, embedding_set(80, 6, 4, seed=2), n_iter=10).provenance["n_jobs"] == 3
