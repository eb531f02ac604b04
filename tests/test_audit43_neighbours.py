"""Audit 43 (J): leftovers of the figures audit, and a fresh user's pass over ``embedscope neighbours``."""

from __future__ import annotations

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError


def _blobs(n=12, d=4, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    return rng.normal(size=(n, d)) + 3 * np.eye(d)[y], y


def test_scatter_of_a_split_the_file_lacks_says_so(tmp_path, capsys):
    # "--split val" on a file without val rows said "the val split has 0 classes"
    from embedscope import store
    from embedscope.cli import main
    from embedscope.store import EmbeddingSet

    X, y = _blobs()
    store.save(tmp_path / "t.h5", EmbeddingSet.from_arrays(X, y))  # every row 'test'
    rc = main(["scatter", str(tmp_path / "t.h5"), "--split", "val", "-o", str(tmp_path / "s.png")])
    err = capsys.readouterr().err
    assert rc == 1 and "has no 'val' rows" in err and "0 classes" not in err and "has 0" not in err


@pytest.mark.parametrize("name", ["", " "])
def test_spectrum_refuses_an_empty_name_as_yoke_does(tmp_path, capsys, name):
    # spectrum --names "" drew the file's name in the legend, yoke --names "" was refused (exit 2)
    from embedscope.cli import main

    rc = main(["spectrum", "a.h5", "--names", name, "-o", str(tmp_path / "sp.png")])  # refused before reading
    assert rc == 2 and "--names: name 1 is empty" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_one_minimum_of_points_for_every_map():
    # effective_perplexity said "at least 5" where the analyses said "at least 6" (five points mapped by
    # single_tsne, refused by embedscope tsne)
    from embedscope.tsne import MIN_POINTS, effective_perplexity, single_tsne

    assert MIN_POINTS == 6
    with pytest.raises(EmbedscopeError, match="t-SNE needs at least 6 points, got 5"):
        effective_perplexity(30, 5)
    X, _ = _blobs(5)
    with pytest.raises(EmbedscopeError, match="at least 6 points"):
        single_tsne(X, perplexity=30, n_iter=1, early_exaggeration_iter=1)
    assert effective_perplexity(30, 6) == pytest.approx(5 / 3)


# ------------------------------------------------------------------ embedscope neighbours
def _tied_set():
    """Rows with exact ties: duplicates and parallel rows (cosine keys equal bit for bit, docs/methods.md
    §1) and small-integer rows (exact Euclidean keys), unnormalised, in two splits."""
    rng = np.random.default_rng(5)
    base = rng.integers(-2, 3, size=(6, 3)).astype(np.float32)
    base[np.all(base == 0, axis=1)] = 1
    X = np.concatenate([base, base * 3, base, base * 0.5])  # every direction four times, at scales 1, 3, 1, 0.5
    y = np.arange(len(X)) % 3
    split = np.where(np.arange(len(X)) % 4 == 3, "train", "test")
    from embedscope.store import EmbeddingSet

    return EmbeddingSet.from_arrays(X, y, split=split.tolist(), paths=[f"p{i:02d}" for i in range(len(X))])


def _unit(a):  # the cosine key's unit row of docs/methods.md §1 (two divisions)
    a = np.asarray(a, dtype=np.float64)
    a = a / np.abs(a).max(axis=-1, keepdims=True)
    return a / np.sqrt((a * a).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("reference", [None, "train"])
def test_neighbours_with_ties_equal_a_brute_force_ranking(metric, reference):
    # the retrievals (and the captions drawn) are the brute-force top-k, ties to the lower reference index
    import matplotlib.pyplot as plt

    from embedscope.analyses.neighbours import neighbour_examples
    from embedscope.viz.neighbours import draw_neighbours

    es = _tied_set()
    k = 4
    ex = neighbour_examples(es, split="test", reference_split=reference, queries=6, k=k, metric=metric, seed=1)
    q = es.subset("test")
    r = q if reference is None else es.subset(reference)
    ties = 0
    for i, qp in enumerate(ex.query_paths):
        qi = list(q.paths).index(qp)
        if metric == "cosine":
            key = np.array([(_unit(q.embeddings[qi]) * _unit(r.embeddings[j])).sum() for j in range(r.n)])
        else:
            key = -np.array([((q.embeddings[qi].astype(np.float64) - r.embeddings[j]) ** 2).sum() for j in range(r.n)])
        cand = [j for j in range(r.n) if reference is not None or j != qi]
        want = sorted(cand, key=lambda j: (-key[j], j))[:k]
        ties += len(want) - len(set(key[want].tolist()))
        assert list(ex.ref_paths[i]) == [r.paths[j] for j in want]
        shown = key[want] if metric == "cosine" else -np.sqrt(-key[want])
        np.testing.assert_allclose(ex.similarity[i], shown, atol=1e-6)
        np.testing.assert_array_equal(ex.correct[i], r.labels[want] == q.labels[qi])
    assert ties > 0  # (the case under test)
    pics = [np.zeros((4, 4))] * len(ex.query_paths)
    fig = draw_neighbours(ex, pics, [pics[:k]] * len(pics))
    try:
        axes = np.array(fig.axes[: len(pics) * (k + 1)]).reshape(len(pics), k + 1)
        for i in range(len(pics)):
            for j in range(k):
                cls, val = axes[i, j + 1].get_xlabel().split("\n")
                assert cls.split(" ", 1)[1] == str(ex.ref_labels[i, j])
                sign = 1 if metric == "cosine" else -1
                assert float(val.split()[1]) == pytest.approx(sign * ex.similarity[i, j], abs=0.006)  # (2 decimals here)
    finally:
        plt.close(fig)


def test_neighbours_refuse_a_query_path_given_twice(tmp_path, capsys):
    # a path listed twice drew its row twice; saliency's paths file (the same reader, says the help) refuses it
    from embedscope.analyses.neighbours import neighbour_examples

    es = _tied_set()
    with pytest.raises(EmbedscopeError, match="the query path p01 is given 2 times"):
        neighbour_examples(es, paths=["p01", "p02", "p01"], k=2)
    assert len(neighbour_examples(es, paths=["p01", "p02"], k=2).query_paths) == 2


def test_a_lone_similarity_does_not_read_as_a_duplicate():
    # one retrieval per query: its cosine 0.9999 read "cos 1.00" and a distance 0.0014 "d 0.00", as if
    # the retrieval were the query's duplicate (the digits only told apart the values of a row)
    from embedscope.viz.neighbours import similarity_digits

    assert similarity_digits(np.array([[0.9998999]])) == 4
    assert similarity_digits(np.array([[-0.0014]])) == 3  # (-d: the Euclidean ranking's similarity)
    assert similarity_digits(np.array([[1.0, 0.5]])) == 2  # an exact duplicate reads 1.00, as it is
    assert similarity_digits(np.array([[0.91, 0.85]])) == 2


def test_neighbours_says_when_a_root_does_not_hold_the_shapes_set(tmp_path, capsys):
    # shapes --root elsewhere: silently not read (the pictures came from the default cache), while the
    # digits' unused --root gets a note
    from argparse import Namespace

    from embedscope.cli.neighbours import _root
    from embedscope.store import EmbeddingSet

    key = "n4800-s64-seed0-df8a2a0b"
    X, y = _blobs(6)
    es = EmbeddingSet.from_arrays(X, y, paths=[f"shapes/{key}/{i:06d}" for i in range(6)])
    _root(Namespace(root=str(tmp_path)), es)
    assert "does not hold the generated shapes set" in capsys.readouterr().out
    (tmp_path / key).mkdir()
    (tmp_path / key / "shapes.npz").write_bytes(b"")  # (only its presence is looked at here)
    assert _root(Namespace(root=str(tmp_path)), es) == str(tmp_path)
    assert _root(Namespace(root=None), es) is None
    assert capsys.readouterr().out == ""


def test_neighbours_figure_names_a_moved_recorded_root_as_the_files(tmp_path):
    # the API's error named "--root /old/place", a --root the caller never gave, and came after the search
    from PIL import Image

    from embedscope.analyses.neighbours import neighbours_figure
    from embedscope.store import EmbeddingSet

    root = tmp_path / "photos"
    root.mkdir()
    X, y = _blobs(6)
    for i in range(6):
        Image.new("RGB", (4, 4), (40 * i, 0, 0)).save(root / f"{i}.png")
    es = EmbeddingSet.from_arrays(X, y, paths=[f"{i}.png" for i in range(6)], attrs={"root": str(tmp_path / "old")})
    with pytest.raises(EmbedscopeError, match=r"the file's image root .*old \(recorded at embed time\) is not a "
                       r"folder: give root=DIR") as e:
        neighbours_figure(es, tmp_path / "g.png", queries=1, k=1)
    assert "--root " not in str(e.value).split(":")[0]
    png, _, ex = neighbours_figure(es, tmp_path / "g.png", queries=1, k=1, root=str(root))
    assert png.is_file()


def test_a_query_path_of_another_split_names_that_split():
    # "not in the 'test' split" alone left the user to find that the image is a train row
    from embedscope.analyses.neighbours import neighbour_examples

    es = _tied_set()  # p03, p07, ... are train rows
    with pytest.raises(EmbedscopeError, match=r"\(e\.g\. p03; it is a 'train' row: --split train, split='train'\)"):
        neighbour_examples(es, paths=["p03"], k=2)
    with pytest.raises(EmbedscopeError, match=r"\(e\.g\. nope; p07 is a 'train' row: --split train"):
        neighbour_examples(es, paths=["p01", "nope", "p07"], k=2)
    assert neighbour_examples(es, split="train", paths=["p03"], k=2).query_paths.tolist() == ["p03"]


def test_a_euclidean_similarity_of_a_duplicate_is_zero_not_minus_zero():
    # minus a distance of 0 was -0.0: the table, the CSV and the JSON read "-0.0000" / -0.0
    from embedscope.analyses.neighbours import neighbour_examples

    ex = neighbour_examples(_tied_set(), paths=["p00"], k=2, metric="euclidean")  # p12 duplicates p00
    assert ex.similarity[0, 0] == 0 and not np.signbit(ex.similarity[0, 0])
    assert "-0.0" not in ex.format() and ex.to_dict()["table"][0]["similarity"] == 0.0
    assert not np.signbit(ex.to_dict()["table"][0]["similarity"])


def test_cli_neighbours_says_an_unused_seed(tmp_path, capsys):
    # --seed 3 with every row of the split a query: the seed chose nothing, silently
    from embedscope import store
    from embedscope.cli import main
    from embedscope.store import EmbeddingSet

    X, y = _blobs(7)
    store.save(tmp_path / "d.h5", EmbeddingSet.from_arrays(X, y, paths=[f"digits/{i:04d}" for i in range(7)],
                                                           attrs={"dataset": "digits"}))
    for extra, said in ((["--seed", "3"], True), ([], False), (["--seed", "3", "--queries", "6"], False)):
        rc = main(["neighbours", str(tmp_path / "d.h5"), "--n-retrievals", "1", "--no-progress", "--force",
                   "-o", str(tmp_path / "g.png"), *extra])
        out = capsys.readouterr().out
        assert rc == 0 and ("note: --seed 3 is not used: every one of the 7 rows of the split is a query" in out) == said
