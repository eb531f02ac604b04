"""Audit: analyses that pair rows between files or splits pair them by path, or refuse in one line.

Each check builds inputs whose pairing is tricky (rows reordered, subsets, duplicates, paths spelled
differently, class names in another order) and compares with a brute-force computation from the
definitions (docs/methods.md)."""

import csv
import re
import subprocess
import sys
import unicodedata

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


# ----------------------------------------------------------------------------- add-properties (a table by path)


def _prop_file(tmp_path):
    n = 12
    rng = np.random.default_rng(0)
    paths = [f"img/caf\u00e9_{i}.png" for i in range(n)]
    f = store.save(tmp_path / "a.h5", _set(rng.normal(size=(n, 3)), np.arange(n) % 3, paths))
    return f, paths


def _write_table(path, rows, **kw):
    with open(path, "w", encoding=kw.get("encoding", "utf-8"), newline="") as fh:
        fh.write("path,colour" + kw.get("eol", "\n") + "".join(f"{p},{c}{kw.get('eol', chr(10))}" for p, c in rows))
    return path


@pytest.mark.parametrize("variant", ["plain", "bom", "crlf"])
def test_add_properties_pairs_a_shuffled_table_by_path(tmp_path, variant):
    f, paths = _prop_file(tmp_path)
    want = {p: (7 * i) % 5 for i, p in enumerate(paths)}
    rows = [(p, want[p]) for p in np.random.default_rng(3).permutation(paths)]
    t = _write_table(tmp_path / "t.csv", rows, encoding="utf-8-sig" if variant == "bom" else "utf-8",
                     eol="\r\n" if variant == "crlf" else "\n")
    p = _cli("add-properties", f, t)
    assert p.returncode == 0, p.stderr
    es = store.load(f)
    assert es.properties["colour"].tolist() == [want[q] for q in es.paths]


@pytest.mark.parametrize("case,message", [
    ("nfd", re.escape("12 of them differ only by Unicode normalisation (NFC vs NFD) (e.g. 'img/caf\u00e9_0.png' vs "
                      "'img/cafe\u0301_0.png', U+00E9 vs U+0065 U+0301)")),  # code points: the two look alike
    ("dot", "12 of them differ only by a leading './'"),
    ("space", "12 of them differ only by spaces around them"),
    ("case", "12 of them differ only by letter case"),
    ("root", r"12 of them differ only by a leading folder \(a data root one side gives and the other leaves out\)"),
    ("missing", r"1 image\(s\) of the file have no row, e.g. img/café_1.png$"),
    ("extra", r"1 row\(s\) match no image of the file, e.g. img/other.png"),
    ("duplicate", r"1 duplicate path\(s\), e.g. img/café_3.png"),
])
def test_add_properties_refuses_a_table_that_does_not_pair_and_says_how(tmp_path, case, message):
    import re

    f, paths = _prop_file(tmp_path)
    spell = {"nfd": lambda p: unicodedata.normalize("NFD", p), "dot": lambda p: "./" + p,
             "space": lambda p: p + " ", "case": str.upper, "root": lambda p: "/data/set/" + p}
    rows = [(spell.get(case, str)(p), i % 2) for i, p in enumerate(paths)]
    if case == "missing":
        rows = rows[:1] + rows[2:]
    elif case == "extra":
        rows.append(("img/other.png", 0))
    elif case == "duplicate":
        rows.append(rows[3])
    before = open(f, "rb").read()
    p = _cli("add-properties", f, _write_table(tmp_path / "t.csv", rows))
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert re.search(message, p.stderr.strip()), p.stderr
    assert open(f, "rb").read() == before


# ----------------------------------------------------------------------------- spelling hints elsewhere


def test_yoke_and_neighbours_say_when_paths_differ_only_in_spelling():
    from embedscope.analyses import neighbour_examples

    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(12, 3)), np.arange(12) % 3
    paths = [f"img/{i}.png" for i in range(12)]
    a = _set(X, y, paths)
    with pytest.raises(EmbedscopeError, match="12 of them differ only by a leading './'"):
        A.yoke(a, _set(X, y, ["./" + p for p in paths]), n_iter=30)
    with pytest.raises(EmbedscopeError, match="12 only in set0.*differ only by letter case"):
        A.yoke(a, _set(X, y, [p.upper() for p in paths]), n_iter=30)
    with pytest.raises(EmbedscopeError, match=r"e.g. img/4.png ; 1 of them differ only by spaces around them"):
        neighbour_examples(a, paths=["img/4.png "], k=2)
    with pytest.raises(EmbedscopeError, match="not in the 'test' split \\(e.g. img/x.png\\)$"):
        neighbour_examples(a, paths=["img/x.png"], k=2)  # no near miss: no hint


def _maps(paths, labels, class_names, seed, name):
    from embedscope.store.saliency import SaliencyMaps

    m = np.random.default_rng(seed).random((len(paths), 6, 6)).astype(np.float32)
    return SaliencyMaps(m, np.asarray(paths), np.asarray(labels), class_names, attrs={"name": name})


def test_saliency_agreement_pairs_maps_by_path(tmp_path):
    """Per-image Pearson r of the CLI's per-image CSV against numpy's, the maps looked up by path:
    B holds A's images reversed plus two more, C a subset with the class names in another order."""
    from embedscope.store.saliency import save_maps

    n = 10
    paths = np.array([f"img/{i}.png" for i in range(n)])
    labels = np.arange(n) % 3
    sets = {"A": _maps(paths, labels, ["a", "b", "c"], 0, "A"),
            "B": _maps(np.r_[paths[::-1], ["img/x.png", "img/y.png"]], np.r_[labels[::-1], [0, 1]],
                       ["a", "b", "c"], 1, "B"),
            "C": _maps(paths[[7, 2, 5, 0, 9, 3, 1, 8]], (labels[[7, 2, 5, 0, 9, 3, 1, 8]] + 1) % 3,
                       ["c", "a", "b"], 2, "C")}
    files = [save_maps(tmp_path / f"{k}.h5", v) for k, v in sets.items()]
    p = _cli("saliency-agreement", *files, "--per-image-csv", tmp_path / "pi.csv")
    assert p.returncode == 0, p.stderr
    assert "8 images in common; left out: 2 of A, 4 of B" in p.stdout
    by_path = {k: {q: m.astype(np.float16).astype(np.float64).ravel() for q, m in zip(v.paths, v.maps)}
               for k, v in sets.items()}
    with open(tmp_path / "pi.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 3 * 8
    for r in rows:
        want = np.corrcoef(by_path[r["model_a"]][r["path"]], by_path[r["model_b"]][r["path"]])[0, 1]
        assert float(r["pearson"]) == pytest.approx(want, abs=1e-5)
    # other class names for the same label numbers: refused
    save_maps(tmp_path / "D.h5", _maps(paths, labels, ["b", "a", "c"], 3, "D"))
    p = _cli("saliency-agreement", files[0], tmp_path / "D.h5")
    assert p.returncode == 1 and "different classes" in p.stderr
    # the same images, spelled NFD: no image in common, and the error says why
    nfd = [unicodedata.normalize("NFD", f"img/caf\u00e9_{i}.png") for i in range(n)]
    save_maps(tmp_path / "E.h5", _maps([f"img/caf\u00e9_{i}.png" for i in range(n)], labels, ["a", "b", "c"], 4, "E"))
    save_maps(tmp_path / "F.h5", _maps(nfd, labels, ["a", "b", "c"], 5, "F"))
    p = _cli("saliency-agreement", tmp_path / "E.h5", tmp_path / "F.h5")
    assert p.returncode == 1 and "share no image" in p.stderr and "Unicode normalisation" in p.stderr


def test_info_names_repeated_paths(tmp_path):
    es = _set(np.eye(4), [0, 1, 0, 1], ["a", "b", "a", "c"], split=["query", "query", "gallery", "gallery"])
    p = _cli("info", store.save(tmp_path / "dup.h5", es))
    assert p.returncode == 0 and "repeated paths       1 path(s) name 2 rows (e.g. a)" in p.stdout
    p = _cli("info", store.save(tmp_path / "ok.h5", _set(np.eye(4), [0, 1, 0, 1], "abcd")))
    assert p.returncode == 0 and "path(s) name" not in p.stdout


def test_saliency_agreement_note_says_when_left_out_images_differ_only_in_spelling(tmp_path):
    from embedscope.store.saliency import save_maps

    n = 10
    nfc = [f"img/caf\u00e9_{i}.png" for i in range(n)]
    mixed = nfc[:6] + [unicodedata.normalize("NFD", p) for p in nfc[6:]]
    labels = np.arange(n) % 3
    save_maps(tmp_path / "A.h5", _maps(nfc, labels, ["a", "b", "c"], 0, "A"))
    save_maps(tmp_path / "B.h5", _maps(mixed, labels, ["a", "b", "c"], 1, "B"))
    p = _cli("saliency-agreement", tmp_path / "A.h5", tmp_path / "B.h5")
    assert p.returncode == 0, p.stderr
    assert ("note: 6 images in common; left out: 4 of A, 4 of B; 4 of them differ only by Unicode "
            "normalisation (NFC vs NFD)") in p.stdout


def _nr_prec_brute(X, values):
    """Kobs Eq. 4-5 (docs/methods.md §9): Euclidean, query excluded, lone values dropped, R = N_v - 1."""
    X = np.asarray(X, dtype=np.float64)
    values = np.asarray(values)
    n = len(values)
    vals, counts = np.unique(values, return_counts=True)
    N = dict(zip(vals.tolist(), counts.tolist()))
    keep = [q for q in range(n) if N[values[q].item()] > 1]
    n_prime = len(keep)
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    r_prec, z = [], []
    for q in keep:
        v = values[q].item()
        R = N[v] - 1
        others = np.array([i for i in range(n) if i != q])
        F = others[np.argsort(D[q, others], kind="stable")[:R]]
        h = int(np.sum(values[F] == v))
        p = N[v] / n_prime
        r_prec.append(h / R)
        z.append((h - R * p) / np.sqrt(R * p * (1 - p)))
    return float(np.mean(r_prec)), float(np.mean(z))


def test_properties_added_from_a_shuffled_table_measure_the_right_rows(tmp_path):
    """add-properties then properties, end to end, against Eq. 4-5 computed with the values looked
    up by path: a value occurring once (lone) included."""
    import json

    rng = np.random.default_rng(4)
    n = 40
    X = rng.normal(size=(n, 3)).astype(np.float32)
    paths = [f"img/{i:02d}.png" for i in range(n)]
    colour = {p: ("red", "green", "blue")[i % 3] if i else "gold" for i, p in enumerate(paths)}
    X[[i for i in range(n) if i % 3 == 0]] += 4.0  # one colour clustered
    f = store.save(tmp_path / "a.h5", _set(X, np.arange(n) % 4, paths))
    table = tmp_path / "t.csv"
    with open(table, "w") as fh:
        fh.write("path,colour\n" + "".join(f"{p},{colour[p]}\n" for p in rng.permutation(paths)))
    assert _cli("add-properties", f, table).returncode == 0
    p = _cli("properties", f, "--properties", "colour", "--json", tmp_path / "r.json", "--no-progress")
    assert p.returncode == 0, p.stderr
    got = json.loads((tmp_path / "r.json").read_text())
    row = next(r for r in got["table"] if r["property"] == "colour")  # one file: the one-model layout
    want_r, want_nr = _nr_prec_brute(X, np.array([colour[q] for q in paths]))
    assert row["R-Prec"] == pytest.approx(want_r, abs=1e-9)
    assert row["NR-Prec"] == pytest.approx(want_nr, abs=1e-9)
    assert want_nr > 2  # the clustered colour is found: a wrong pairing would give about 0


def test_scatter_and_neighbours_pair_each_row_with_its_own_split_whatever_the_row_order():
    """Brute force per path: scatter's nearest same-/other-class cosine similarity within the row's
    split, and neighbours' top-k gallery paths of a query, with train/test and query/gallery rows
    interleaved."""
    from embedscope.analyses import neighbour_examples

    rng = np.random.default_rng(7)
    n = 48
    X = rng.normal(size=(n, 4))
    y = rng.integers(0, 3, n)
    split = np.array(["train", "test"])[rng.integers(0, 2, n)]
    paths = [f"p{i}" for i in range(n)]
    es = _set(X, y, paths, split=split)
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    S = U @ U.T
    r = A.scatter(es)
    assert len(r.table) == n
    for row in r.table:
        i = paths.index(row["path"])
        mates = [j for j in range(n) if split[j] == split[i] and j != i]
        same = [S[i, j] for j in mates if y[j] == y[i]]
        diff = [S[i, j] for j in mates if y[j] != y[i]]
        assert row["split"] == split[i] and row["label"] == y[i]
        if same:
            assert row["s_same"] == pytest.approx(max(same), abs=1e-9)
        assert row["s_diff"] == pytest.approx(max(diff), abs=1e-9)

    qg = _set(X, y, paths, split=np.where(split == "train", "query", "gallery"))
    ex = neighbour_examples(qg, split="query", k=3, queries=5, seed=1)
    gal = [j for j in range(n) if split[j] == "test"]
    for qp, refs in zip(ex.query_paths, ex.ref_paths):
        i = paths.index(qp)
        want = sorted(gal, key=lambda j: (-S[i, j], j))[:3]
        assert list(refs) == [paths[j] for j in want]
