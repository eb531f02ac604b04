"""Audit: analyses that pair rows between files or splits pair them by path, or refuse in one line.

Each check builds inputs whose pairing is tricky (rows reordered, subsets, duplicates, paths spelled
differently, class names in another order) and compares with a brute-force computation from the
definitions (docs/methods.md)."""

import subprocess
import sys

import numpy as np
import pytest

from embedscope import analyses as A
from embedscope import store
from embedscope.errors import EmbedscopeError
from embedscope.store import EmbeddingSet
from tests.brute import ranked_references

CLI = [sys.executable, "-m", "embedscope"]


def _cli(*args, cwd=None):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd)


def _set(X, y, paths, split="test", class_names=None, properties=None):
    return EmbeddingSet.from_arrays(X, y, paths=list(paths), split=split, class_names=class_names,
                                    properties=properties)


# ----------------------------------------------------------------------------- yoke (match_by_path)


def test_yoke_pairs_rows_by_path_whatever_the_order_and_the_class_name_order():
    rng = np.random.default_rng(0)
    n = 30
    X, y = rng.normal(size=(n, 5)), np.arange(n) % 3
    paths = [f"img/{i:03d}.png" for i in range(n)]
    names = ["cat", "dog", "eel"]
    a = _set(X, y, paths, class_names=names)
    Xb = X @ rng.normal(size=(5, 5))
    b = _set(Xb, y, paths, class_names=names)
    perm = rng.permutation(n)
    # the same images in another row order, their classes named in another order (labels differ)
    b_shuffled = _set(Xb[perm], np.array(names)[y[perm]], np.array(paths)[perm], class_names=names[::-1])
    r1 = A.yoke(a, b, n_iter=30)
    r2 = A.yoke(a, b_shuffled, n_iter=30)
    np.testing.assert_array_equal(r1.arrays["Y_b"], r2.arrays["Y_b"])
    assert r1.values == r2.values
    assert [row["class"] for row in r2.table] == [names[c] for c in y]


@pytest.mark.parametrize("case", ["duplicate", "subset", "dot_slash", "other_names"])
def test_yoke_refuses_what_it_cannot_pair(case):
    rng = np.random.default_rng(1)
    n = 12
    X, y = rng.normal(size=(n, 3)), np.arange(n) % 3
    paths = [f"img/{i}.png" for i in range(n)]
    a = _set(X, y, paths, class_names=["a", "b", "c"])
    b = {"duplicate": lambda: _set(X, y, paths[:-1] + paths[:1], class_names=["a", "b", "c"]),
         "subset": lambda: a.select(np.arange(8)),
         "dot_slash": lambda: _set(X, y, ["./" + p for p in paths], class_names=["a", "b", "c"]),
         "other_names": lambda: _set(X, y, paths, class_names=["b", "a", "c"])}[case]()
    with pytest.raises(EmbedscopeError) as e:
        A.yoke(a, b, n_iter=30)
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------- properties of several files


def test_properties_of_several_files_keep_each_files_provenance(tmp_path):
    """A file without the first file's top property came later in the sorted rows, and the results
    were paired with the files' provenance by that order: the third model carried the second file's
    path and sha256."""
    rng = np.random.default_rng(0)
    n = 60
    y = np.arange(n) % 3
    colour = (np.arange(n) // 3) % 2
    X = np.c_[colour * 5.0, rng.normal(size=(n, 3)) * 0.1 + y[:, None] * 0.3]
    files = []
    for nm, props in (("one", {"colour": colour}), ("two", {}), ("three", {"colour": colour})):
        es = _set(X + rng.normal(size=X.shape) * 0.01, y, [str(i) for i in range(n)], properties=props)
        files.append(store.save(tmp_path / f"{nm}.h5", es))
    rs = A.properties(files)
    assert [r.model for r in rs] == ["one", "two", "three"]
    assert [r.provenance["file"] for r in rs] == [str(f) for f in files]
    assert [sorted(r.values) for r in rs] == [["NR-Prec[class]", "NR-Prec[colour]"], ["NR-Prec[class]"],
                                             ["NR-Prec[class]", "NR-Prec[colour]"]]


# ----------------------------------------------------------------------------- query / gallery


def _query_gallery(overlap: int):
    rng = np.random.default_rng(1)
    nq, ng = 20, 40
    Xq, yq = rng.normal(size=(nq, 4)), np.arange(nq) % 5
    Xg, yg = rng.normal(size=(ng, 4)), np.arange(ng) % 5
    pq, pg = [f"q{i}" for i in range(nq)], [f"g{i}" for i in range(ng)]
    Xg[:overlap], yg[:overlap], pg[:overlap] = Xq[:overlap], yq[:overlap], pq[:overlap]
    es = _set(np.r_[Xq, Xg], np.r_[yq, yg], pq + pg, split=["query"] * nq + ["gallery"] * ng)
    return es, (Xq, yq, Xg, yg)


def test_evaluate_query_gallery_matches_brute_force():
    es, (Xq, yq, Xg, yg) = _query_gallery(0)
    orders, yr = ranked_references(Xq, yq, Xg, yg)
    want = np.mean([yr[o[0]] == yq[i] for i, o in enumerate(orders)])
    # the rows of the two splits interleaved: pairing is by split, not by position
    perm = np.random.default_rng(0).permutation(es.n)
    r = A.evaluate(es.select(perm), query_split="query", reference_split="gallery", ks=(1,), include=["R@1"])
    assert r["R@1"] == pytest.approx(want, abs=1e-12)


def test_an_image_in_both_query_and_gallery_is_refused(tmp_path):
    """Each such query found itself in the gallery (distance 0, its own class): R@1 silently raised."""
    es, _ = _query_gallery(5)
    with pytest.raises(EmbedscopeError, match=r"5 image\(s\) are both query and gallery rows.*'q0'"):
        A.evaluate(es, query_split="query", reference_split="gallery")
    from embedscope.analyses import neighbour_examples

    with pytest.raises(EmbedscopeError, match="both query and gallery"):
        neighbour_examples(es, split="query", k=2)
    f = store.save(tmp_path / "qg.h5", es)
    p = _cli("evaluate", f, "--query-split", "query", "--reference-split", "gallery")
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "both query and gallery" in p.stderr
    assert "Traceback" not in p.stderr


def test_neighbour_query_path_that_names_two_rows_is_refused():
    from embedscope.analyses import neighbour_examples

    rng = np.random.default_rng(2)
    X, y = rng.normal(size=(12, 3)), np.arange(12) % 3
    paths = [f"p{i}" for i in range(12)]
    paths[7] = "p2"
    es = _set(X, y, paths)
    ex = neighbour_examples(es, paths=["p3"], k=2)  # a unique path: its own row
    assert list(ex.query_paths) == ["p3"]
    with pytest.raises(EmbedscopeError, match="p2 names 2 rows"):
        neighbour_examples(es, paths=["p2"], k=2)
