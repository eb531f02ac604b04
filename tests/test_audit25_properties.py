"""Audit 25: `properties` loose ends, saliency-agreement's folders.

* ``properties(..., seed=5)`` without permutations seeded nothing, without a word (the command refuses
  ``--seed`` without ``--permutations``): the API's seed defaults to None and a seed given alone is refused.
* NR-Prec under cosine on 1-D rows (or collinear rows): every row normalises to +1 or -1, so each query's
  neighbours are two groups of tied rows and the row order picked the hits of most properties: the numbers
  changed when the rows were reordered. A property whose hits a tie decides is now undefined, with the
  reason; one whose hits no tie decides (the sign) keeps its numbers (the brute force's, written here).
* saliency-agreement compared the files' folders as strings: "" (no --root, the default location) and
  that location's path gave a spurious "different data sets or folders" note.
"""

from __future__ import annotations

import csv
import os

import numpy as np
import pytest
from cli_run import exit_code

from embedscope.errors import EmbedscopeError
from embedscope.metrics import properties as mod

DASH = "\u2013"


_run = exit_code  # the output left to capsys


def _file(path, X, labels, *, paths=None, class_names=None, **props):
    from embedscope import store

    X = np.asarray(X, dtype=np.float32)
    n = len(X)
    es = store.EmbeddingSet.from_arrays(X, np.asarray(labels), split="test",
                                        paths=paths or [f"img/{i}.png" for i in range(n)], class_names=class_names,
                                        properties={k: np.asarray(v) for k, v in props.items()})
    store.save(path, es)
    return path


# ------------------------------------------------------------------------------------- 1. the seed


def test_a_seed_without_permutations_is_refused_by_the_api(tmp_path):
    from embedscope.analyses import properties
    from embedscope.analyses.image_properties import properties_of_files

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    f = _file(tmp_path / "a.h5", X, rng.integers(0, 3, 40), colour=rng.integers(0, 2, 40))
    for call in (lambda **kw: properties(f, **kw), lambda **kw: properties_of_files([f], **kw),
                 lambda **kw: mod.property_precision(X, {"c": np.arange(40) % 3}, **kw)):
        for seed in (5, 0):  # an explicit 0 seeds nothing either
            with pytest.raises(EmbedscopeError, match=f"seed={seed} seeds the shuffles.*permutations"):
                call(seed=seed)
    # without a seed: the numbers of before (no permutation test, no seed in the provenance)
    plain = properties(f)[0]
    assert "permutation_seed" not in plain.provenance and "perm_p_value" not in plain.table[0]
    # with permutations: no seed is seed 0, shuffle for shuffle
    a, b, c = (properties(f, permutations=6, **kw)[0] for kw in ({}, {"seed": 0}, {"seed": 3}))
    assert a.provenance["permutation_seed"] == 0 == b.provenance["permutation_seed"]
    assert c.provenance["permutation_seed"] == 3
    for ra, rb in zip(a.table, b.table):
        assert ra == rb
    assert [r["NR-Prec"] for r in a.table] == [r["NR-Prec"] for r in plain.table]
    assert [r["perm_mean"] for r in a.table] != [r["perm_mean"] for r in c.table]  # the seed is used


# ------------------------------------------------------------------------------ 2. 1-D cosine numbers


def _brute(X, vals, metric, max_r=None):
    """Per query (non-lone): the hits of its R nearest (float64 keys as the engine makes them: cosine = the
    inner product of the rows divided by their norms) with the ties broken in the two extreme ways (rows of
    its value first, and last), written from the definition: (h_first, h_last, R, N_v)."""
    X = np.asarray(X, dtype=np.float64)
    if metric == "cosine":
        X = X / np.sqrt(np.einsum("ij,ij->i", X, X))[:, None]
    vals = np.asarray(vals)
    n = len(X)
    out = []
    for q in range(n):
        nv = int((vals == vals[q]).sum())
        if nv < 2:
            continue
        R = nv - 1 if max_r is None else min(nv - 1, max_r)
        others = [j for j in range(n) if j != q]
        if metric == "cosine":
            key = {j: float(np.dot(X[q], X[j])) for j in others}
        else:
            key = {j: -float(((X[q] - X[j]) ** 2).sum()) for j in others}
        same = {j: vals[j] == vals[q] for j in others}
        first = sorted(others, key=lambda j: (-key[j], not same[j]))
        last = sorted(others, key=lambda j: (-key[j], same[j]))
        out.append((sum(same[j] for j in first[:R]), sum(same[j] for j in last[:R]), R, nv))
    return out


def _numbers(per_query):
    """R-Prec and NR-Prec (docs/methods.md §9: p = N_v / n') of per-query (h, R, N_v)."""
    nq = len(per_query)
    rp = [h / R for h, R, _ in per_query]
    z = [(h - R * nv / nq) / np.sqrt(R * (nv / nq) * (1 - nv / nq)) for h, R, nv in per_query]
    return float(np.mean(rp)), float(np.mean(z))


def _check_against_brute(X, props, metric, max_r=None):
    got = mod.property_precision(X, props, metric=metric, max_r=max_r)
    kinds = {}
    for k, vals in props.items():
        b = _brute(X, vals, metric, max_r)
        tied = sum(f != s for f, s, _, _ in b)
        r = got[k]
        if tied:
            kinds[k] = "tied"
            for f in ("R-Prec", "NR-Prec", "z", "p_value"):
                assert np.isnan(r[f]), (k, f)
                assert f"for {tied} of {len(b)} queries" in r["undefined"][f] and "row order" in r["undefined"][f]
            assert np.isfinite(r["ceiling"])  # a number of the value counts
        else:
            kinds[k] = "defined"
            rp, nr = _numbers([(f, R, nv) for f, _, R, nv in b])
            assert r["R-Prec"] == pytest.approx(rp, rel=1e-12, abs=1e-12), k
            assert r["NR-Prec"] == pytest.approx(nr, rel=1e-12, abs=1e-12), k
            assert r["undefined"] == {}, k
    return got, kinds


def _one_d_case(n=48, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, 3.0, n) * np.where(rng.random(n) < 0.4, -1, 1)
    sign = (x > 0).astype(int)
    props = {
        "sign": sign,  # the two tied groups exactly: no tie decides
        "random": rng.integers(0, 3, n),
        # one value per sign group but the positives split in two: their groups are cut
        "split": np.where(sign == 1, 1 + (np.arange(n) % 2), 0),
        "lone": np.concatenate([[100, 101], sign[2:]]),  # two lone values besides the sign
    }
    return x[:, None], props


@pytest.mark.parametrize("max_r", [None, 3])
def test_one_dimension_under_cosine_matches_the_brute_force_or_is_undefined(max_r):
    X, props = _one_d_case()
    got, kinds = _check_against_brute(X, props, "cosine", max_r)
    assert kinds["sign"] == "defined" and kinds["random"] == "tied" and kinds["split"] == "tied"
    assert "one dimension under cosine: every row normalises to +1 or -1" in got["random"]["undefined"]["NR-Prec"]
    # the numbers do not depend on the row order any more: reordered rows give the same ones
    perm = np.random.default_rng(7).permutation(len(X))
    again = mod.property_precision(X[perm], {k: v[perm] for k, v in props.items()}, metric="cosine", max_r=max_r)
    for k in props:
        for f in ("R-Prec", "NR-Prec", "ceiling"):
            a, b = got[k][f], again[k][f]
            assert (np.isnan(a) and np.isnan(b)) or a == pytest.approx(b, rel=1e-12, abs=1e-12), (k, f)


def test_collinear_rows_and_two_points_are_checked_alike():
    """Rows that are multiples (by powers of two: the same unit rows bit for bit) of one vector under
    cosine, and a Euclidean model collapsed to two points: the same two tied groups."""
    rng = np.random.default_rng(3)
    n = 40
    u = rng.normal(size=5)
    s = np.where(rng.random(n) < 0.5, -1.0, 1.0) * 2.0 ** rng.integers(-3, 4, n)
    X = s[:, None] * u[None, :]
    props = {"sign": (s > 0).astype(int), "random": rng.integers(0, 2, n)}
    got, kinds = _check_against_brute(X, props, "cosine")
    assert kinds == {"sign": "defined", "random": "tied"}
    assert got["random"]["undefined"]["NR-Prec"].startswith("X has only 2 distinct rows after L2 normalisation")
    pts = np.where(props["sign"][:, None] == 1, u, -2 * u)
    got, kinds = _check_against_brute(pts, props, "euclidean")
    assert kinds == {"sign": "defined", "random": "tied"}
    # three distinct rows keep the documented tie-break (lower index first) and their numbers
    three = np.vstack([pts, [u * 5]])
    res = mod.property_precision(three, {"random": np.r_[props["random"], 0]})
    assert np.isfinite(res["random"]["NR-Prec"]) and res["random"]["undefined"] == {}


def test_numpy_and_torch_engines_agree_on_one_dimension(monkeypatch):
    X, props = _one_d_case(n=64, seed=4)
    small = mod.property_precision(X, props, metric="cosine", permutations=4, seed=2)
    monkeypatch.setattr(mod, "NUMPY_BELOW", 2)  # every X runs the torch engine
    assert mod._Engine(X, "cosine").torch is not None
    big = mod.property_precision(X, props, metric="cosine", permutations=4, seed=2)
    for k in props:
        for f in ("R-Prec", "NR-Prec", "ceiling", "p_value", "perm_p_value", "perm_mean"):
            a, b = small[k][f], big[k][f]
            assert (np.isnan(a) and np.isnan(b)) or a == b, (k, f)
        assert small[k]["undefined"] == big[k]["undefined"]


def test_one_dimension_under_cosine_on_the_command_line(tmp_path, capsys):
    X, props = _one_d_case()
    labels = props["random"]
    f = _file(tmp_path / "one.h5", X, labels, sign=props["sign"])
    out = tmp_path / "p.csv"
    assert _run(["properties", str(f), "--metric", "cosine", "--csv", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    n = len(X)
    assert (f"undefined (–): class (NR-Prec, R-Prec, p_value: one dimension under cosine: every row normalises to "
            f"+1 or -1, so X has 2 distinct rows after L2 normalisation, and for {n} of {n} queries the R nearest "
            "end inside a group of tied rows holding their value and others: the row order (lower index first) "
            "picks which are counted, so the hits would measure row order)") in text
    rows = {r["property"]: r for r in csv.DictReader(open(out))}
    assert rows["class"]["NR-Prec"] == "" and float(rows["sign"]["R-Prec"]) == 1.0
    _, nr = _numbers([(f_, R, nv) for f_, _, R, nv in _brute(X.astype(np.float32), props["sign"], "cosine")])
    assert float(rows["sign"]["NR-Prec"]) == pytest.approx(nr, rel=1e-9)


# ------------------------------------------------------------------ 3. saliency-agreement's folders


def _maps(path, root, dataset="shapes", name="m"):
    from embedscope.store.saliency import SaliencyMaps, save_maps

    rng = np.random.default_rng(len(str(path)))
    sm = SaliencyMaps(maps=rng.random((5, 4, 4)).astype(np.float32), paths=[f"img/{i}.png" for i in range(5)],
                      labels=np.zeros(5, np.int64), class_names=["a"],
                      attrs={"name": name, "family": "ranking", "order": "paper", "n_samples": 50, "noise": 0.15,
                             "dataset": dataset, "root": root})
    save_maps(path, sm)
    return path


def test_the_default_folder_and_its_path_are_one_folder(tmp_path, monkeypatch):
    """The writer stores "" without --root (shapes: the default cache) and the resolved folder with it:
    both name one folder, as do a folder and a link to it; other folders and data sets are still noted."""
    from embedscope.saliency.run import agreement_of_files

    monkeypatch.setenv("EMBEDSCOPE_CACHE", str(tmp_path / "cache"))
    cache = tmp_path / "cache" / "shapes"
    cache.mkdir(parents=True)
    (tmp_path / "data").mkdir()
    os.symlink(tmp_path / "data", tmp_path / "link")

    def notes(*roots, datasets=("shapes", "shapes")):
        files = [_maps(tmp_path / f"m{i}-{len(os.listdir(tmp_path))}.h5", r, d, f"m{i}")
                 for i, (r, d) in enumerate(zip(roots, datasets))]
        return [n for n in agreement_of_files(files)["notes"] if "different data sets or folders" in n]

    assert notes("", str(cache)) == []
    assert notes("", str(tmp_path / "cache" / ".." / "cache" / "shapes")) == []
    assert notes(str(tmp_path / "data"), str(tmp_path / "link")) == []
    assert notes("", "", datasets=("shapes", "Shapes")) == []
    other = notes("", str(tmp_path / "data"))
    assert len(other) == 1 and f"shapes in {tmp_path / 'data'}" in other[0]
    assert len(notes("", str(tmp_path / "data"), datasets=("digits", "digits"))) == 1  # digits has no folder
