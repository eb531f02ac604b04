"""Audit 25: ``tsne`` / ``yoke`` sub-samples, their point cap, and ``scatter``'s similarity
(docs/visualizations.md).

What was wrong before:

* ``tsne --max-points N`` (and ``yoke``, ``EmbeddingSet.sample``) kept each class's share by
  largest-remainder rounding and drew the rows with ``rng.choice(rows, q)``: the quotas are not
  monotone in N (the Alabama paradox: raising N could lower a class's quota) and the draw depends on
  q, so the points mapped at N were not among those mapped at N + 1. The quotas are now Webster's
  divisor method applied one row at a time (one row per class first) and the rows the first q of
  one seeded permutation per class: N ⊂ N + 1 for every N.
* ``scatter`` drew cosine similarities of an N-pair or generalised-lifted model (rows of different
  norms, trained on the raw dot product / Euclidean distance) without a word that the model ranks
  its neighbours otherwise.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from cli_run import run_cli

_run = run_cli


# ---------------------------------------------------------------- nested sub-samples


def _webster_one_first(counts, n):
    """Brute force, in exact fractions: n seats given one at a time, each to the stratum of highest
    priority c / d(k) with k its seats so far, d(0) = 0 (infinite: one seat each first), d(k) = k + 1/2;
    ties to the larger stratum, then the first; a full stratum takes no more."""
    seats = [0] * len(counts)
    for _ in range(min(n, sum(counts))):
        best, key = None, None
        for c, size in enumerate(counts):
            if seats[c] >= size:
                continue
            prio = (1, Fraction(0)) if seats[c] == 0 else (0, Fraction(size) / (Fraction(seats[c]) + Fraction(1, 2)))
            k = (prio, size, -c)
            if key is None or k > key:
                best, key = c, k
        seats[best] += 1
    return seats


# strata of many sizes: one of 1 row, some smaller than their share at most N, one much larger
COUNTS = [3, 40, 41, 17, 1, 90, 12, 2]


def test_quotas_are_websters_and_house_monotone():
    """stratum_quotas equals the brute-force sequential Webster count for every N from 0 to all rows,
    and raising N by one raises exactly one stratum's quota by one (largest remainder lowered one
    stratum's quota 13 times over this range)."""
    from embedscope.tsne.sampling import stratum_quotas

    total = sum(COUNTS)
    prev = np.zeros(len(COUNTS), dtype=np.int64)
    for n in range(0, total + 3):
        q = stratum_quotas(COUNTS, n)
        assert q.tolist() == _webster_one_first(COUNTS, n), n
        assert q.sum() == min(n, total) and np.all(q <= COUNTS)
        d = q - prev
        assert np.all(d >= 0) and d.sum() == (1 if 0 < n <= total else 0), n
        prev = q
    # one row per stratum first (the larger strata first while N is below the number of strata)
    assert stratum_quotas(COUNTS, 3).tolist() == [0, 1, 1, 0, 0, 1, 0, 0]
    assert stratum_quotas(COUNTS, 8).tolist() == [1] * 8
    assert stratum_quotas([50, 30, 20], 10).tolist() == [5, 3, 2]


@pytest.mark.parametrize("seed", [0, 3])
def test_stratified_subsample_is_nested_for_every_n(seed):
    """The rows kept for N are among those kept for N + 1, for every N (classes given in shuffled
    order, strata of 1 and 2 rows), each class keeping its Webster quota."""
    from embedscope.tsne import stratified_subsample

    rng = np.random.default_rng(11)
    y = rng.permutation(np.repeat(np.arange(len(COUNTS)), COUNTS))
    prev = set()
    for n in range(1, len(y) + 1):
        idx = stratified_subsample(y, n, seed=seed)
        assert len(idx) == n and np.all(np.diff(idx) > 0)
        assert prev <= set(idx.tolist()), n
        assert np.bincount(y[idx], minlength=len(COUNTS)).tolist() == _webster_one_first(COUNTS, n), n
        prev = set(idx.tolist())
    assert np.array_equal(stratified_subsample(y, 7, seed=seed), stratified_subsample(y, 7, seed=seed))
    assert not np.array_equal(stratified_subsample(y, 100, seed=seed), stratified_subsample(y, 100, seed=seed + 1))


def _two_splits():
    """A set of 5 classes in train and test, of unequal sizes (a test class of one image, a train
    class of 2)."""
    from embedscope.store import EmbeddingSet

    sizes = {("train", 0): 30, ("train", 1): 2, ("train", 2): 11, ("train", 3): 25, ("train", 4): 7,
             ("test", 0): 9, ("test", 1): 1, ("test", 2): 4, ("test", 3): 13, ("test", 4): 3}
    split = np.concatenate([[s] * n for (s, c), n in sizes.items()])
    y = np.concatenate([[c] * n for (s, c), n in sizes.items()])
    order = np.random.default_rng(5).permutation(len(y))
    split, y = split[order], y[order]
    X = np.random.default_rng(0).normal(size=(len(y), 4)) + y[:, None]
    return EmbeddingSet.from_arrays(X.astype(np.float32), y, split=split,
                                    paths=[f"im{k:03d}" for k in range(len(y))]), sizes


def test_tsne_and_yoke_rows_are_nested_over_max_points():
    """analyses.maps.subsample, what tsne (--split all: by split and class; one split: by class) and
    yoke map: N ⊂ N + 1 for every N, each (split, class) stratum keeping its Webster quota."""
    from embedscope.analyses.maps import subsample

    es, sizes = _two_splits()
    keys = list(sizes)  # the strata in (split name, label) order, as numbered for the sample
    keys.sort(key=lambda k: (k[0], k[1]))
    counts = [sizes[k] for k in keys]
    prev = set()
    for n in range(1, es.n + 1):
        kept = subsample(es, n, 0, by_split=True)
        assert kept.n == n
        paths = set(kept.paths.tolist())
        assert prev <= paths, n
        prev = paths
        got = [int(((kept.split == s) & (kept.labels == c)).sum()) for s, c in keys]
        assert got == _webster_one_first(counts, n), n
    test = es.subset("test")
    prev = set()
    for n in range(1, test.n + 1):  # one split, as tsne --split test and yoke keep it
        paths = set(subsample(test, n, 0, by_split=True).paths.tolist())
        assert paths == set(subsample(test, n, 0, by_split=False).paths.tolist()) and prev <= paths, n
        prev = paths


def test_tsne_and_yoke_map_the_same_nested_rows():
    """The rows tsne --max-points N maps are among those of N + 1, and yoke maps the same rows."""
    from embedscope.analyses import tsne, yoke
    from embedscope.store import EmbeddingSet

    es, _ = _two_splits()
    other = EmbeddingSet.from_arrays(es.embeddings * 2.0, es.labels, split=es.split, paths=es.paths,
                                     class_names=es.class_names)
    before = None
    for n in (12, 13, 14):
        t = {row["path"] for row in tsne(es, split="test", max_points=n, n_iter=1).table}
        y = {row["path"] for row in yoke(es, other, split="test", max_points=n, n_iter=1, alpha=0).table}
        assert t == y and len(t) == n
        assert before is None or before <= t
        before = t


# ---------------------------------------------------------------- scatter's similarity and the model's distance


def _scatter_file(path, *, loss=None, distance=None, unit=False):
    from embedscope.store import EmbeddingSet, save

    rng = np.random.default_rng(2)
    y = np.repeat(np.arange(3), 8)
    X = rng.normal(size=(len(y), 4)) + 2 * np.eye(4)[y]
    X *= rng.uniform(0.5, 3.0, size=(len(y), 1))
    if unit:
        X /= np.linalg.norm(X, axis=1, keepdims=True)
    config = {k: v for k, v in (("loss", loss), ("distance", distance)) if v is not None}
    attrs = {"checkpoint_config": config} if config else {}
    save(path, EmbeddingSet.from_arrays(X.astype(np.float32), y, split=np.tile(["train", "test"], 12),
                                        paths=[f"p{k}" for k in range(len(y))], attrs=attrs))
    return path


@pytest.mark.parametrize("loss,distance,unit,metric,says", [
    ("npair", None, False, "cosine", "--metric dot ranks them as the model was trained"),
    ("lifted", None, False, "cosine", "--metric euclidean ranks them as the model was trained"),
    (None, "sqeuclidean", False, "dot", "--metric euclidean ranks them as the model was trained (the order"),
    ("margin", "snr", False, "cosine", "no --metric ranks by the SNR distance (the choices are cosine, dot and euclidean)"),
    ("softmax", None, False, "euclidean", "--metric cosine ranks them as the model was trained"),
    ("npair", None, False, "dot", None),        # the model's own ranking
    ("npair", None, True, "cosine", None),      # unit rows: every metric ranks alike
    (None, None, False, "cosine", None),        # no recorded config: nothing to compare with
    ("nosuchloss", None, False, "cosine", "names the loss 'nosuchloss', which embedscope does not know"),
])
def test_scatter_notes_a_recorded_distance_that_ranks_otherwise(tmp_path, loss, distance, unit, metric, says):
    """scatter keeps cosine as the default, and says when the rows differ in norm and the model's
    recorded distance (checkpoint_config: distance, else the loss's) ranks otherwise (one note with evaluate's and
    neighbours': analyses.retrieval.trained_distance_note)."""
    import json

    from embedscope.store import load

    f = _scatter_file(tmp_path / "e.h5", loss=loss, distance=distance, unit=unit)
    rc, out, err = _run(["scatter", f, "--metric", metric, "-o", tmp_path / "s.png", "--no-progress"])
    assert rc == 0, err
    notes = [line for line in out.splitlines() if "checkpoint" in line and "config" in line]
    kept = [n for n in json.loads((tmp_path / "s.json").read_text())["provenance"].get("notes", [])
            if "checkpoint" in n and "config" in n]
    if says is None:
        assert notes == [] and kept == []
    else:
        assert len(notes) == 1 and notes[0].startswith("note: the model") and says in notes[0]
        assert kept == [notes[0][len("note: "):]]  # the JSON keeps the note printed
        if loss != "nosuchloss":
            norms = np.linalg.norm(load(f).embeddings.astype(np.float64), axis=1)
            assert f"(norms {norms.min():.3g} to {norms.max():.3g})" in notes[0]


def test_scatter_note_looks_at_the_drawn_split(tmp_path):
    """--split test: the note reads the test rows alone (unit there, of other norms in train)."""
    from embedscope.store import EmbeddingSet, save

    rng = np.random.default_rng(4)
    y = np.repeat(np.arange(3), 8)
    split = np.tile(["train", "test"], 12)
    X = rng.normal(size=(len(y), 4)) + 2 * np.eye(4)[y]
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    X[split == "train"] *= rng.uniform(0.5, 3.0, size=((split == "train").sum(), 1))
    save(tmp_path / "e.h5", EmbeddingSet.from_arrays(X.astype(np.float32), y, split=split, attrs={
        "checkpoint_config": {"loss": "npair"}}))
    for s, noted in (("test", False), ("train", True), ("all", True)):
        rc, out, err = _run(["scatter", tmp_path / "e.h5", "--split", s, "-o", tmp_path / f"{s}.png", "--no-progress"])
        assert rc == 0, err
        assert ("trained with the dot product" in out) is noted, s


# ---------------------------------------------------------------- the commands' default point cap


def _capped(monkeypatch, cap):
    """The commands' default --max-points lowered to ``cap`` (a file of 50,001 rows would take minutes)."""
    import embedscope.analyses.maps as maps
    import embedscope.cli.tsne as cli_tsne
    import embedscope.cli.yoke as cli_yoke

    for mod in (maps, cli_tsne, cli_yoke):
        monkeypatch.setattr(mod, "DEFAULT_MAX_POINTS", cap)


def test_default_max_points_is_50000_and_leaves_small_files_whole(tmp_path):
    """The default is 50,000 points, in --help; a file below it is mapped whole, with no note and the
    same map as an explicit --max-points of its size (the digits runs of the demo and notebooks)."""
    import contextlib
    import io
    import json

    from embedscope.cli import main
    from embedscope.tsne import DEFAULT_MAX_POINTS

    assert DEFAULT_MAX_POINTS == 50_000
    for command in ("tsne", "yoke"):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
            main([command, "--help"])
        assert "(default: 50000;" in " ".join(buf.getvalue().split()), command
    es, _ = _two_splits()
    from embedscope.store import save

    save(tmp_path / "e.h5", es)
    rc, out, err = _run(["tsne", tmp_path / "e.h5", "--n-iter", "3", "-o", tmp_path / "a.png", "--no-progress"])
    assert rc == 0, err
    assert "note: mapped" not in out
    rc, _, err = _run(["tsne", tmp_path / "e.h5", "--n-iter", "3", "--max-points", str(es.n), "-o", tmp_path / "b.png",
                       "--no-progress"])
    assert rc == 0, err
    a, b = (json.loads((tmp_path / f"{x}.json").read_text()) for x in "ab")
    assert a["table"] == b["table"] and "subsampled_from" not in a["provenance"]


def test_default_max_points_caps_tsne_and_yoke_with_a_note(tmp_path, monkeypatch):
    """Above the default, tsne and yoke map the stratified subsample --max-points <default> keeps, and
    say so in a note naming --max-points N for all; an explicit --max-points gives no note."""
    import csv

    from embedscope.analyses.maps import subsample
    from embedscope.store import EmbeddingSet, save

    _capped(monkeypatch, 20)
    es, _ = _two_splits()
    save(tmp_path / "a.h5", es)
    save(tmp_path / "b.h5", EmbeddingSet.from_arrays(es.embeddings * 2.0, es.labels, split=es.split, paths=es.paths,
                                                     class_names=es.class_names))
    test = es.subset("test")
    want = sorted(subsample(test, 20, 0, by_split=True).paths)
    for command, files, what in (("tsne", [tmp_path / "a.h5"], "points"),
                                 ("yoke", [tmp_path / "a.h5", tmp_path / "b.h5"], "images")):
        rc, out, err = _run([command, *files, "--n-iter", "3", "-o", tmp_path / f"{command}.png", "--no-progress"])
        assert rc == 0, err
        with open(tmp_path / f"{command}.csv", newline="") as f:
            assert sorted(row["path"] for row in csv.DictReader(f)) == want, command
        assert (f"note: mapped a stratified subsample of 20 of the {test.n} {what} (the default --max-points 20; "
                f"t-SNE of more takes many minutes): --max-points {test.n} maps them all") in out.splitlines()
        rc, out, err = _run([command, *files, "--n-iter", "3", "--max-points", "20", "-o", tmp_path / f"{command}2.png",
                             "--no-progress"])
        assert rc == 0 and "note: mapped" not in out, err
    rc, out, err = _run(["tsne", tmp_path / "a.h5", "--joint", "--n-iter", "3", "-o", tmp_path / "j.png",
                         "--no-progress"])
    assert rc == 0 and f"20 of the {es.n} points" in out, err


def test_yoke_inset_class_check_uses_the_default_cap(tmp_path, monkeypatch):
    """--inset-class of a class the default cap keeps no image of: refused before the maps, naming
    the --max-points in force (it was checked only for an explicit --max-points)."""
    from embedscope.store import save

    _capped(monkeypatch, 3)
    es, _ = _two_splits()
    save(tmp_path / "a.h5", es)
    save(tmp_path / "b.h5", es)
    rc, out, err = _run(["yoke", tmp_path / "a.h5", tmp_path / "b.h5", "--inset-class", "1", "-o", tmp_path / "y.png",
                         "--no-progress"])
    assert rc == 2 and "--max-points 3 keeps none of its images" in err


# ---------------------------------------------------------------- one layout: the per-point rows


@pytest.mark.parametrize("command", ["tsne", "tsne --joint", "yoke", "scatter"])
def test_per_point_rows_agree_in_csv_json_and_parquet(tmp_path, command):
    """The per-point table has one layout: the CSV's rows, the JSON's "table" and the Parquet's rows
    hold the same columns in the same order and the same values (the JSON adds the values and the
    settings, which hold no per-point array)."""
    import csv
    import json

    import pandas as pd

    from embedscope.store import save

    es, _ = _two_splits()
    save(tmp_path / "a.h5", es)
    save(tmp_path / "b.h5", es)
    name, *extra = command.split()
    files = [tmp_path / "a.h5", tmp_path / "b.h5"] if name == "yoke" else [tmp_path / "a.h5"]
    opts = [] if name == "scatter" else ["--n-iter", "3"]
    rc, out, err = _run([name, *files, *extra, *opts, "-o", tmp_path / "o.png", "--parquet", tmp_path / "o.parquet",
                         "--no-progress"])
    assert rc == 0, err
    with open(tmp_path / "o.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    doc = json.loads((tmp_path / "o.json").read_text())
    pq = pd.read_parquet(tmp_path / "o.parquet")
    assert list(rows[0]) == list(doc["table"][0]) == list(pq.columns)
    assert len(rows) == len(doc["table"]) == len(pq)
    for row, jrow, (_, prow) in zip(rows, doc["table"], pq.iterrows()):
        for c, v in jrow.items():
            if isinstance(v, str):
                assert row[c] == v == prow[c], c
            elif v is None:  # NaN (a scatter point without a same-class partner): empty in the CSV
                assert row[c] == "" and np.isnan(prow[c]), c
            else:
                assert float(row[c]) == v == prow[c], c
    for v in list(doc["values"].values()) + list(doc["provenance"].values()):  # no per-point array elsewhere
        assert not (isinstance(v, list) and len(v) == len(rows))
