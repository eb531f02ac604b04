"""Audit 22: `embedscope properties`, `add-properties`, `make-shapes` as a user runs them (docs/properties.md,
docs/methods.md §9): the command's CSV against a brute force from the formulas, tables joined from files,
the figure's axes."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from brute import nr_prec

from embedscope.cli import main


def _run(args) -> int:
    try:
        return main(args)
    except SystemExit as e:  # argparse's usage errors
        return e.code


def _imported(tmp_path, X, labels, name="e", **columns):
    """`embedscope import X.npy --labels y.npy` (paths = row numbers), then `add-properties` of a CSV."""
    np.save(tmp_path / f"{name}_X.npy", np.asarray(X, dtype=np.float32))
    np.save(tmp_path / f"{name}_y.npy", np.asarray(labels))
    h5 = tmp_path / f"{name}.h5"
    assert _run(["import", str(tmp_path / f"{name}_X.npy"), "--labels", str(tmp_path / f"{name}_y.npy"),
                 "-o", str(h5)]) == 0
    if columns:
        table = tmp_path / f"{name}_props.csv"
        with open(table, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["path", *columns])
            for i in range(len(X)):
                w.writerow([str(i), *(v[i] for v in columns.values())])
        assert _run(["add-properties", str(h5), str(table)]) == 0
    return h5


def test_command_csv_matches_the_formulas_with_ties_lone_values_cap_and_permutations(tmp_path, capsys):
    """NR-Prec, R-Prec, ceiling and the z-test's p of the command's CSV equal a brute force from
    docs/methods.md §9 (integer embeddings: many exact distance ties; a lone value); the permutation
    p-values equal the brute force's over the same seeded shuffles (one per draw, shared by all
    properties), lie in [1/(P+1), 1] and repeat with the seed."""
    rng = np.random.default_rng(3)
    n = 40
    X = rng.integers(0, 3, size=(n, 2))
    colour = np.array(["red", "green", "blue"])[rng.integers(0, 3, n)]
    size = rng.integers(0, 4, n)
    part = np.where(np.arange(n) < 12, "a", "b").astype(object)
    part[5] = "solo"  # a lone value: not a query, still a neighbour
    h5 = _imported(tmp_path, X, rng.integers(0, 4, n), colour=colour, size=size, part=part)
    P, seed = 15, 4
    for max_r in (None, 5):
        out = tmp_path / f"p{max_r}.csv"
        args = ["properties", str(h5), "--csv", str(out), "--permutations", str(P), "--seed", str(seed),
                "--no-progress"] + ([] if max_r is None else ["--max-r", str(max_r)])
        assert _run(args) == 0
        rows = {r["property"]: r for r in csv.DictReader(open(out))}
        assert set(rows) == {"class", "colour", "size", "part"}
        assert int(rows["part"]["lone_queries"]) == 1 and int(rows["part"]["queries"]) == n - 1
        perm = np.random.default_rng(seed)
        shuffles = [perm.permutation(n) for _ in range(P)]
        for name, vals in {"colour": colour, "size": size, "part": part}.items():
            ref = nr_prec(X, vals, max_r=max_r)
            for k in ("NR-Prec", "R-Prec", "ceiling", "p_value"):
                assert float(rows[name][k]) == pytest.approx(ref[k], rel=1e-9, abs=1e-12), (name, k, max_r)
            null = np.array([nr_prec(X, np.asarray(vals)[s], max_r=max_r)["NR-Prec"] for s in shuffles])
            want = (1 + np.count_nonzero(null >= ref["NR-Prec"] - 1e-12)) / (1 + P)
            got = float(rows[name]["perm_p_value"])
            assert got == pytest.approx(want) and 1 / (P + 1) <= got <= 1, (name, max_r)
            assert float(rows[name]["perm_mean"]) == pytest.approx(null.mean())
    again = tmp_path / "again.csv"
    assert _run(["properties", str(h5), "--csv", str(again), "--permutations", str(P), "--seed", str(seed),
                 "--no-progress"]) == 0
    assert again.read_bytes() == (tmp_path / "pNone.csv").read_bytes()  # deterministic


def test_permutations_with_a_property_that_has_no_nr_prec(tmp_path, capsys):
    """A property whose values are all unique (every image lone) or all equal has no NR-Prec; with
    --permutations the command failed with "error: KeyError: 'perm_p_value'" and wrote nothing."""
    rng = np.random.default_rng(0)
    n = 30
    h5 = _imported(tmp_path, rng.normal(size=(n, 3)), rng.integers(0, 3, n), uniq=[f"u{i}" for i in range(n)],
                   one=["x"] * n, hue=rng.integers(0, 3, n))
    out, js = tmp_path / "p.csv", tmp_path / "p.json"
    assert _run(["properties", str(h5), "--permutations", "5", "--csv", str(out), "--json", str(js),
                 "--no-progress"]) == 0
    rows = {r["property"]: r for r in csv.DictReader(open(out))}
    for name in ("uniq", "one"):
        assert rows[name]["NR-Prec"] == "" and rows[name]["perm_p_value"] == ""  # NaN: an empty cell
        assert rows[name]["permutations"] == "5"
    assert 0 < float(rows["hue"]["perm_p_value"]) <= 1
    assert list(rows)[-2:] == ["one", "uniq"] or set(list(rows)[-2:]) == {"one", "uniq"}  # NaN last


def test_class_asked_for_by_name_on_a_file_whose_property_is_the_label(tmp_path, capsys):
    """The shapes files' `shape` equals the label, so 'class' is not listed beside it; but
    `--properties class` ('class' = label, says --help) was "error: no property 'class'"."""
    rng = np.random.default_rng(1)
    n = 40
    labels = rng.integers(0, 4, n)
    h5 = _imported(tmp_path, rng.normal(size=(n, 3)), labels, shape=labels, hue=rng.integers(0, 2, n))
    out = tmp_path / "p.csv"
    assert _run(["properties", str(h5), "--properties", "class,hue", "--csv", str(out), "--no-progress"]) == 0
    rows = {r["property"]: r for r in csv.DictReader(open(out))}
    assert set(rows) == {"class", "hue"}
    assert _run(["properties", str(h5), "--csv", str(tmp_path / "all.csv"), "--no-progress"]) == 0
    every = {r["property"]: r for r in csv.DictReader(open(tmp_path / "all.csv"))}
    assert "class" not in every and every["shape"]["NR-Prec"] == rows["class"]["NR-Prec"]  # unchanged listing


def test_properties_only_in_a_later_file_are_sorted_by_its_nr_prec(tmp_path, capsys):
    """Rows follow the first file's NR-Prec; a property the first file lacks follows the NR-Prec of the
    next file that has it (they came in the file's alphabetical listing order: 'a_noise' before the
    strongly clustered 'z_enc'), in the terminal, the CSV and the JSON alike."""
    import json

    rng = np.random.default_rng(2)
    n = 60
    labels = rng.integers(0, 3, n)
    enc = rng.integers(0, 3, n)
    X2 = rng.normal(size=(n, 3))
    X2[:, 0] += 8 * enc
    a = _imported(tmp_path, rng.normal(size=(n, 3)), labels, name="a", p=rng.integers(0, 2, n))
    b = _imported(tmp_path, X2, labels, name="b", p=rng.integers(0, 2, n), a_noise=rng.integers(0, 3, n), z_enc=enc)
    capsys.readouterr()
    out, js = tmp_path / "p.csv", tmp_path / "p.json"
    assert _run(["properties", str(a), str(b), "--csv", str(out), "--json", str(js), "--no-progress"]) == 0
    term = capsys.readouterr().out
    rows = list(csv.DictReader(open(out)))
    order = list(dict.fromkeys(r["property"] for r in rows))
    assert order[-2:] == ["z_enc", "a_noise"], order
    assert term.index("z_enc") < term.index("a_noise")
    doc = json.load(open(js))
    later = [r["property"] for r in doc["models"][1]["table"]]
    assert later.index("z_enc") < later.index("a_noise")


def test_an_empty_properties_selection_is_a_usage_error(tmp_path, capsys):
    """`--properties ,` (or '') named no property and measured all of them, as if it were absent."""
    rng = np.random.default_rng(0)
    h5 = _imported(tmp_path, rng.normal(size=(20, 3)), rng.integers(0, 2, 20), hue=rng.integers(0, 2, 20))
    capsys.readouterr()
    for sel in (",", "", " , "):
        assert _run(["properties", str(h5), "--properties", sel, "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert "--properties names no property" in err and "Traceback" not in err


def _visible_yticks(ax):
    ax.figure.canvas.draw()
    lo, hi = ax.get_ylim()
    return [(t.get_position()[1], t.get_text()) for t in ax.get_yticklabels() if lo <= t.get_position()[1] <= hi]


@pytest.mark.parametrize("ceiling", [4.3, 9.0, 170.0])
def test_property_bars_label_the_y_axis_in_plain_numbers_up_to_the_ceilings(ceiling):
    """The symlog axis was labelled 0, 10^0, 10^1, ... only: with ceilings below 10 (any small set) no
    number above 1 stood beside the bars, the 2.576 line and the ceilings; and 5% x-margins left
    empty slots at both ends (16 of them with CUB's 312 attributes)."""
    from embedscope.viz.figures import use_agg

    use_agg()
    import matplotlib.pyplot as plt

    from embedscope.viz.properties import property_bars

    rows = [{"model": m, "property": f"p{i}", "NR-Prec": v, "ceiling": ceiling}
            for i, v in enumerate([0.55, 0.13, -0.25, 2.9, -1.2] * 8) for m in ("a", "b")]
    fig = property_bars(rows, max_properties=None)  # all 40
    ax = fig.axes[0]
    ticks = _visible_yticks(ax)
    values = [float(text.replace("\u2212", "-")) for _, text in ticks]  # plain numbers, no 10^k mathtext
    assert values == [pos for pos, _ in ticks]
    assert max(values) >= min(3.0, ceiling) and max(values) >= ceiling / 10
    assert 0.0 in values and min(values) < 0  # the negative bars have a scale too
    assert ax.get_xlim() == pytest.approx((-0.5, 39.5))
    plt.close(fig)


def test_add_properties_refusals_leave_the_file_as_it_was(tmp_path, capsys):
    """Missing / extra / duplicate rows, './' paths, an empty cell, non-UTF-8 text, an existing
    property without --force: one line, exit 1, the file byte for byte unchanged; names from the
    table escaped on the terminal; TSV and Parquet join like CSV."""
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 12
    h5 = _imported(tmp_path, rng.normal(size=(n, 3)), rng.integers(0, 2, n), hue=[i % 3 for i in range(n)])
    before = h5.read_bytes()
    df = pd.DataFrame({"path": [str(i) for i in range(n)], "v": [f"x{i % 2}" for i in range(n)]})
    bad = {"missing.csv": df.iloc[1:], "extra.csv": pd.concat([df, pd.DataFrame({"path": ["99"], "v": ["x0"]})]),
           "dup.csv": pd.concat([df, df.iloc[:1]]), "dot.csv": df.assign(path="./" + df.path),
           "nan.csv": df.assign(v=[None] + list(df.v[1:])), "hue.csv": df.rename(columns={"v": "hue"})}
    for name, d in bad.items():
        d.to_csv(tmp_path / name, index=False)
    (tmp_path / "latin1.csv").write_bytes(("path,v\n" + "".join(f"{i},caf\xe9\n" for i in range(n))).encode("latin-1"))
    capsys.readouterr()
    for name in [*bad, "latin1.csv"]:
        assert _run(["add-properties", str(h5), str(tmp_path / name)]) == 1, name
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, (name, err)
        assert h5.read_bytes() == before, name
    df.to_csv(tmp_path / "t.tsv", sep="\t", index=False)
    df.rename(columns={"v": "w"}).to_parquet(tmp_path / "t.parquet")
    df.rename(columns={"v": "\x1b[31mred"}).to_csv(tmp_path / "esc.csv", index=False)
    for name in ("t.tsv", "t.parquet", "esc.csv"):
        assert _run(["add-properties", str(h5), str(tmp_path / name)]) == 0
    assert "\x1b" not in capsys.readouterr().out
    assert _run(["add-properties", str(h5), str(tmp_path / "hue.csv"), "--force"]) == 0
    from embedscope import store

    props = store.load(h5).properties
    assert list(props["hue"]) == list(df.v) and list(props["w"]) == list(df.v)


def test_make_shapes_says_image_for_one(tmp_path, capsys):
    assert _run(["make-shapes", "-o", str(tmp_path / "s"), "--n-images", "1", "--size", "16", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("wrote 1 image and ")
    rows = list(csv.DictReader(open(tmp_path / "s" / "properties.csv")))
    assert len(rows) == 1 and rows[0]["path"] == "images/000000.png"


def test_property_precision_gives_every_property_the_permutation_keys():
    """The measure itself: a property without NR-Prec (one value, or every value lone) has NaN perm_*
    fields, like its other undefined numbers, so that every property has the same keys."""
    import numpy as np

    from embedscope.metrics.properties import property_precision

    X = np.random.default_rng(0).normal(size=(10, 2))
    r = property_precision(X, {"one": ["x"] * 10, "h": [0, 1] * 5, "lone": list(range(10))}, permutations=3)
    assert {k: set(v) for k, v in r.items()}["one"] == set(r["h"]) == set(r["lone"])
    for k in ("one", "lone"):
        assert np.isnan(r[k]["perm_p_value"]) and np.isnan(r[k]["perm_mean"]) and r[k]["permutations"] == 3
    assert 0 < r["h"]["perm_p_value"] <= 1


@pytest.mark.parametrize("header, message", [
    (b"path,w,w\n0,1,2\n1,1,2\n", "the column name 'w' occurs twice"),  # pandas made it w and w.1
    (b"path,,w\n0,1,2\n1,1,2\n", "column 2 of the header has no name"),  # it became 'Unnamed: 1'
    (b",path,w\n0,0,1\n1,1,2\n", "a row index written by pandas"),  # the index became a property
    (b"path,w \n0,1\n1,2\n", "'w ' has spaces around it"),
    (b"path,w\n0,caf\xe9\n1,b\n", "is not UTF-8 text (byte 0xe9"),
])
def test_property_table_headers_that_would_add_wrong_properties(tmp_path, header, message):
    import numpy as np

    from embedscope.cli import main
    from embedscope.store import EmbeddingSet, save

    f = tmp_path / "e.h5"
    save(f, EmbeddingSet.from_arrays(np.ones((2, 3), np.float32) * [[1], [2]], np.array([0, 1]),
                                     paths=np.array(["0", "1"])), force=True)
    before = f.read_bytes()
    t = tmp_path / "t.csv"
    t.write_bytes(header)
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["add-properties", str(f), str(t)])
    assert rc == 1 and message in err.getvalue() and len(err.getvalue().strip().splitlines()) == 1
    assert f.read_bytes() == before


def test_property_bars_of_many_properties_show_the_highest_and_lowest():
    """CUB's 312 attributes made a 60,000-pixel-wide figure: at most MAX_PROPERTIES are drawn, the
    highest and lowest of the sorted rows, with one slot saying how many are left out."""
    import matplotlib.pyplot as plt

    from embedscope.viz.properties import MAX_PROPERTIES, property_bars

    names = [f"has_{i:03d}" for i in range(312)]
    rows = [{"model": m, "property": p, "NR-Prec": 10.0 - i * 0.05, "ceiling": 20.0}
            for i, p in enumerate(names) for m in ("a", "b", "c")]
    fig = property_bars(rows)
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    half = MAX_PROPERTIES // 2
    assert ticks == names[:half] + [f"\u2026 {312 - 2 * half} more"] + names[-half:]
    assert fig.get_size_inches()[0] < 0.6 * (MAX_PROPERTIES + 1) * 3 ** 0.5 + 2
    assert "highest and lowest of 312" in fig.axes[0].get_xlabel()
    plt.close(fig)
    fig = property_bars(rows[:30], max_properties=None)  # ten properties: all, no gap
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == names[:10]
    plt.close(fig)
    fig = property_bars(rows, max_properties=None)
    assert len(fig.axes[0].get_xticklabels()) == 312
    plt.close(fig)


def test_properties_of_one_file_twice_is_refused_before_the_work(tmp_path, capsys):
    import numpy as np

    from embedscope.cli import main
    from embedscope.store import EmbeddingSet, save

    f = tmp_path / "e.h5"
    es = EmbeddingSet.from_arrays(np.random.default_rng(0).normal(size=(20, 3)).astype(np.float32),
                                  np.arange(20) % 4, properties={"p": np.arange(20) % 2})
    save(f, es, force=True)
    rc = main(["properties", str(f), str(f), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "is given twice" in err and "[" not in err


def test_properties_cosine_zero_row_names_the_file_and_split(tmp_path, capsys):
    import numpy as np

    from embedscope.cli import main
    from embedscope.store import EmbeddingSet, save

    X = np.random.default_rng(0).normal(size=(20, 3)).astype(np.float32)
    X[5] = 0
    f = tmp_path / "z.h5"
    save(f, EmbeddingSet.from_arrays(X, np.arange(20) % 4, properties={"p": np.arange(20) % 2}), force=True)
    rc = main(["properties", str(f), "--metric", "cosine", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and "z.h5: 1 test embedding(s) are all zeros (the test split's row 5 first, path '5')" in err
    assert main(["properties", str(f), "--no-progress"]) == 0  # Euclidean: fine


def test_add_properties_notes_a_column_of_distinct_values(tmp_path, capsys):
    """A continuous column (every image its own value) gives NaN NR-Prec for want of shared values: said
    when it is added."""
    import numpy as np

    from embedscope.cli import main
    from embedscope.store import EmbeddingSet, save

    f = tmp_path / "e.h5"
    save(f, EmbeddingSet.from_arrays(np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32),
                                     np.arange(6) % 2, paths=np.array([str(i) for i in range(6)])), force=True)
    t = tmp_path / "t.csv"
    t.write_text("path,brightness,group\n" + "".join(f"{i},{0.1 * i + 0.05},{i % 3}\n" for i in range(6)))
    assert main(["add-properties", str(f), str(t)]) == 0
    out = capsys.readouterr().out
    assert "note: every image has its own value of 'brightness'" in out and "'group'" not in out
