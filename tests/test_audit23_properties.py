"""Audit 23: `embedscope properties` on degenerate embeddings and properties (docs/properties.md,
docs/methods.md §9): a collapsed model (every row the same point: the neighbours are the lowest row
indices, so NR-Prec would measure row order), rows that repeat exactly (their ties go by row order:
said), NaN numbers with the reason (every value lone, one value: p = 1), and a property that groups
the images exactly as the class labels (it stands for the class: said). Expected numbers from a brute
force written here from the formulas."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
from brute import nr_prec

from embedscope.cli import main

DASH = "\u2013"


def _run(args) -> int:
    try:
        return main(args)
    except SystemExit as e:  # argparse's usage errors
        return e.code


def _file(path, X, labels, **props):
    from embedscope import store

    X = np.asarray(X, dtype=np.float32)
    n = len(X)
    es = store.EmbeddingSet.from_arrays(X, np.asarray(labels), split="test", paths=[f"img/{i}.png" for i in range(n)],
                                        properties={k: np.asarray(v) for k, v in props.items()})
    store.save(path, es)
    return path


def _ceiling(vals):
    """Mean over the non-lone queries of sqrt((N_v - 1)(1 - p)/p), p = N_v / n' (the counts alone)."""
    _, inv, cnt = np.unique(np.asarray(vals).astype(str), return_inverse=True, return_counts=True)
    nv = cnt[inv.ravel()]
    nv = nv[nv > 1].astype(float)
    p = nv / len(nv)
    return float(np.mean(np.sqrt((nv - 1) * (1 - p) / p)))


def _repeats(X):
    """Rows equal to an earlier row (Python floats: -0.0 == 0.0), by a set of tuples."""
    X = np.asarray(X, dtype=np.float64)
    return len(X) - len({tuple(r) for r in X.tolist()})


def _table(out: str) -> dict[tuple[str, str], list[str]]:
    """The terminal table's cells by (model, property)."""
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("model"))
    cols = lines[head].split()
    rows = {}
    for ln in lines[head + 2:]:
        cells = ln.split()
        if len(cells) != len(cols):
            break
        rows[(cells[0], cells[1])] = dict(zip(cols, cells))
    return rows


def _csv(path):
    return {(r["model"], r["property"]): r for r in csv.DictReader(open(path))}


def _assert_brute(rows, model, X, props, metric="euclidean"):
    """The CSV rows of ``model`` equal the brute force of every property of ``props`` (name -> values)."""
    for prop, vals in props.items():
        want = nr_prec(X, vals, metric)
        for k in ("NR-Prec", "R-Prec", "ceiling", "p_value"):
            assert float(rows[(model, prop)][k]) == pytest.approx(want[k], rel=1e-9, abs=1e-12), (model, prop, k)


# ------------------------------------------------------------------------------------- collapsed model


def test_a_collapsed_model_has_no_ranking_numbers_and_says_why(tmp_path, capsys):
    """Every row the same point (audit: a random property p = 0.0003, class perm_p 0.005): R-Prec, NR-Prec and
    the p-values are undefined (–, NaN in the files) with one line naming the reason; the ceiling, a
    number of the value counts, stays. A second, healthy file is measured as usual, side by side."""
    rng = np.random.default_rng(0)
    n = 60
    labels = rng.integers(0, 4, n)
    colour, size = rng.integers(0, 3, n), rng.integers(0, 3, n)
    dup = _file(tmp_path / "dup.h5", np.tile([0.5, -0.25, 1.0, 0.75], (n, 1)), labels, colour=colour, size=size)
    Xok = rng.normal(size=(n, 4)).astype(np.float32)
    ok = _file(tmp_path / "ok.h5", Xok, labels, colour=colour, size=size)
    out = tmp_path / "p.csv"
    js = tmp_path / "p.json"
    assert _run(["properties", str(dup), str(ok), "--permutations", "20", "--csv", str(out), "--json", str(js),
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "nan" not in text
    table = _table(text)
    rows = _csv(out)
    for prop, vals in (("class", labels), ("colour", colour), ("size", size)):
        cells = table[("dup", prop)]
        assert [cells[c] for c in ("NR-Prec", "R-Prec", "p_value", "perm_p_value")] == [DASH] * 4
        assert float(cells["ceiling"]) == pytest.approx(_ceiling(vals), abs=5e-5)
        r = rows[("dup", prop)]
        assert r["NR-Prec"] == r["R-Prec"] == r["p_value"] == r["z"] == r["perm_p_value"] == r["perm_mean"] == ""
        assert float(r["ceiling"]) == pytest.approx(_ceiling(vals), rel=1e-12)
        assert r["significant_2.576"] == ""  # no verdict without NR-Prec (audit 42: it was False)
        _assert_brute(rows, "ok", Xok, {prop: vals})  # the healthy file: its numbers as before
    notes = [ln for ln in text.splitlines() if "undefined (" + DASH + ")" in ln]
    assert len(notes) == 1 and notes[0].startswith("dup: undefined (" + DASH + "): class, colour, size (")
    assert "NR-Prec, R-Prec, p_value, perm_p_value: every row of X is the same point" in notes[0]
    assert "row order" in notes[0]
    got = json.loads(js.read_text())
    prov = {m["model"]: m["provenance"] for m in got["models"]}
    assert set(prov["dup"]["undefined"]) == {"class", "colour", "size"} and "undefined" not in prov["ok"]
    assert {r["property"]: r["NR-Prec"] for r in got["models"][0]["table"]} == dict.fromkeys(
        ("class", "colour", "size"))  # NaN: null in the JSON


def test_collapsed_by_direction_only_under_cosine(tmp_path, capsys):
    """Rows v · 2^k: distinct points (Euclidean: the usual numbers), one direction after the L2
    normalisation of cosine (exactly: a power of two scales exactly), so cosine leaves them undefined."""
    rng = np.random.default_rng(1)
    n = 40
    X = np.array([0.75, -0.5, 0.25]) * 2.0 ** rng.integers(-3, 4, n)[:, None]
    labels, colour = rng.integers(0, 3, n), rng.integers(0, 2, n)
    h5 = _file(tmp_path / "dir.h5", X, labels, colour=colour)
    assert _run(["properties", str(h5), "--csv", str(tmp_path / "e.csv"), "--no-progress"]) == 0
    text = capsys.readouterr().out
    euc = _csv(tmp_path / "e.csv")
    _assert_brute(euc, "dir", X, {"class": labels, "colour": colour})
    assert "repeat" in text  # many rows are equal points (2^k takes 7 values): said, the numbers kept
    assert _run(["properties", str(h5), "--metric", "cosine", "--csv", str(tmp_path / "c.csv"), "--no-progress"]) == 0
    text = capsys.readouterr().out
    cos = _csv(tmp_path / "c.csv")
    assert all(cos[("dir", p)]["NR-Prec"] == "" and cos[("dir", p)]["p_value"] == "" for p in ("class", "colour"))
    assert "undefined (" + DASH + "): class, colour (NR-Prec, R-Prec, p_value: every row of X points in the same " \
           "direction (cosine)" in text


def test_one_dimension_under_cosine(tmp_path, capsys):
    """1-D rows normalise to +1 or -1: all of one sign is a collapsed model (undefined); both signs are two
    points, every other row a repeat: a property whose hits the row order picks (ties inside a sign group
    that mixes its values) is undefined, with the reason, and the note on repeats stays (audit 25)."""
    rng = np.random.default_rng(2)
    n = 50
    labels, colour = rng.integers(0, 3, n), rng.integers(0, 3, n)
    pos = _file(tmp_path / "pos.h5", rng.uniform(0.5, 3.0, (n, 1)), labels, colour=colour)
    assert _run(["properties", str(pos), "--metric", "cosine", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "points in the same direction (cosine; one dimension: every row normalises to +1 or -1)" in text
    assert _table(text)[("pos", "class")]["NR-Prec"] == DASH
    X = rng.uniform(0.5, 3.0, (n, 1)) * np.where(rng.random((n, 1)) < 0.3, -1, 1)
    both = _file(tmp_path / "both.h5", X, labels, colour=colour)
    assert _run(["properties", str(both), "--metric", "cosine", "--csv", str(tmp_path / "b.csv"), "--no-progress"]) == 0
    text = capsys.readouterr().out
    rows = _csv(tmp_path / "b.csv")
    # (audit 25) each sign group mixes the values of class and colour: the row order picks their hits, so
    # their ranking numbers are undefined (they were numbers that changed when the rows were reordered)
    for prop in ("class", "colour"):
        assert rows[("both", prop)]["NR-Prec"] == "" and _table(text)[("both", prop)]["NR-Prec"] == DASH
    assert (f"undefined (–): class, colour (NR-Prec, R-Prec, p_value: one dimension under cosine: every row "
            f"normalises to +1 or -1, so X has 2 distinct rows after L2 normalisation, and for {n} of {n} queries") in text
    assert (f"{n - 2} of {n} rows repeat another row exactly after L2 normalisation: their tied neighbours are "
            "ranked by row order (lower index first); one dimension under cosine: every row normalises to +1 or -1"
            ) in text


def test_rows_that_repeat_keep_their_numbers_and_say_so(tmp_path, capsys):
    """Half the rows repeat the other half (and a -0.0 twin of a 0.0 row): the numbers stand (the brute
    force's, ties to the lower index) and one line says how many rows repeat another exactly."""
    rng = np.random.default_rng(3)
    half = np.round(rng.normal(size=(25, 3)) * 4) / 4
    half[0, 1] = 0.0
    X = np.vstack([half, half, half[:1] * np.array([1.0, -1.0, 1.0])])  # the last: -0.0 where half[0] has 0.0
    n = len(X)
    labels, colour = rng.integers(0, 3, n), rng.integers(0, 3, n)
    h5 = _file(tmp_path / "half.h5", X, labels, colour=colour)
    assert _run(["properties", str(h5), "--csv", str(tmp_path / "h.csv"), "--no-progress"]) == 0
    text = capsys.readouterr().out
    rows = _csv(tmp_path / "h.csv")
    _assert_brute(rows, "half", X, {"class": labels, "colour": colour})
    k = _repeats(X)
    assert k == 26
    assert (f"{k} of {n} rows repeat another row exactly: their tied neighbours are ranked by row order "
            "(lower index first)") in text.splitlines()


# ------------------------------------------------------------------------------- NaN from the value counts


def test_undefined_numbers_of_the_value_counts_show_a_dash_and_their_reason(tmp_path, capsys):
    """One value (p = N_v/n' = 1), one value besides a lone one (the audit's c1_999), every value lone:
    "–" and one "undefined (–)" line with each reason; the defined numbers (R-Prec = 1 of one value,
    R-Prec of the other, the class) are the brute force's."""
    rng = np.random.default_rng(4)
    n = 30
    X = rng.normal(size=(n, 3)).astype(np.float32)
    labels = rng.integers(0, 3, n)
    c1 = np.array(["a"] * (n - 1) + ["b"])
    h5 = _file(tmp_path / "v.h5", X, labels, one=np.zeros(n, dtype=np.int64), c1=c1,
               lone=np.array([f"u{i}" for i in range(n)]))
    assert _run(["properties", str(h5), "--permutations", "5", "--csv", str(tmp_path / "v.csv"), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "nan" not in text
    table = _table(text)
    assert [table[("v", "one")][c] for c in ("NR-Prec", "R-Prec", "ceiling", "p_value", "perm_p_value")] == \
        [DASH, "1.0000", DASH, DASH, DASH]
    # c1: the 29 queries of 'a' (R = 28) miss a hit only where 'b' is among their 28 nearest
    d = ((X[:, None, :].astype(np.float64) - X[None, :, :]) ** 2).sum(-1)
    h = []
    for q in range(n - 1):
        others = np.delete(np.arange(n), q)
        h.append(28 - int(n - 1 in others[np.lexsort((others, d[q, others]))][:28]))
    rows = _csv(tmp_path / "v.csv")
    assert float(rows[("v", "c1")]["R-Prec"]) == pytest.approx(nr_prec(X, c1)["R-Prec"], rel=1e-12)
    assert float(rows[("v", "c1")]["R-Prec"]) == pytest.approx(np.mean(np.array(h) / 28), rel=1e-12)
    assert [table[("v", "lone")][c] for c in ("NR-Prec", "R-Prec", "ceiling", "p_value")] == [DASH] * 4
    assert float(rows[("v", "class")]["NR-Prec"]) == pytest.approx(nr_prec(X, labels)["NR-Prec"], rel=1e-9)
    notes = [ln for ln in text.splitlines() if ln.startswith("undefined (" + DASH + "): ")]
    assert len(notes) == 1
    assert ("one (NR-Prec, ceiling, p_value, perm_p_value: one value only (every image has it): "
            f"p = N_v/n' = {n}/{n} = 1, so sigma = sqrt(R p (1 - p)) = 0") in notes[0]
    assert ("c1 (NR-Prec, ceiling, p_value, perm_p_value: only one value occurs more than once (besides 1 lone "
            f"value, no query): p = N_v/n' = {n - 1}/{n - 1} = 1") in notes[0]
    assert (f"lone (NR-Prec, R-Prec, ceiling, p_value, perm_p_value: every value occurs once ({n} lone values): "
            "no image has another image of its value, so there is no query)") in notes[0]
    assert "class" not in notes[0].split(": ", 1)[1].split(" (")[0]


def test_property_precision_names_every_nan_and_why():
    """The measure itself: ``undefined`` maps each NaN number to its reason (empty when all are defined),
    ``repeated_rows`` counts the rows equal to an earlier one as ranked (after cosine's normalisation)."""
    from embedscope.metrics.properties import property_precision

    rng = np.random.default_rng(5)
    X = rng.normal(size=(20, 3))
    r = property_precision(X, {"h": np.arange(20) % 2, "one": np.zeros(20), "lone": np.arange(20)}, permutations=1)
    assert r["h"]["undefined"] == {"perm_sd": "one shuffle has no spread (give 2 permutations or more)"}
    assert np.isnan(r["h"]["perm_sd"]) and np.isfinite(r["h"]["NR-Prec"])
    assert set(r["one"]["undefined"]) == {"NR-Prec", "ceiling", "null_mean", "null_sd", "z", "p_value",
                                          "perm_p_value", "perm_mean", "perm_sd"} and r["one"]["R-Prec"] == 1.0
    assert set(r["lone"]["undefined"]) == set(r["one"]["undefined"]) | {"R-Prec"}
    for k, v in r.items():
        assert {f for f, x in v.items() if isinstance(x, float) and math.isnan(x)} == set(v["undefined"]), k
        assert v["repeated_rows"] == 0
    # scaled copies of few directions: distinct points, 3 directions
    D = rng.normal(size=(3, 4))
    Y = D[np.arange(30) % 3] * 2.0 ** rng.integers(-2, 3, 30)[:, None]
    props = {"a": rng.integers(0, 2, 30)}
    assert property_precision(Y, props)["a"]["repeated_rows"] == _repeats(Y)
    assert property_precision(Y, props, metric="cosine")["a"]["repeated_rows"] == 27
    one = np.tile(D[:1], (30, 1)) * 2.0 ** rng.integers(-2, 3, 30)[:, None]
    for kw in ({"metric": "cosine"}, {"normalize": True}):
        c = property_precision(one, {"a": props["a"], "k": np.zeros(30)}, **kw)
        assert math.isnan(c["a"]["NR-Prec"]) and math.isnan(c["a"]["R-Prec"]) and math.isnan(c["a"]["p_value"])
        assert c["a"]["ceiling"] == pytest.approx(_ceiling(props["a"]), rel=1e-12)
        assert c["a"]["repeated_rows"] == 29 and "row order" in c["a"]["undefined"]["NR-Prec"]
        assert c["k"]["R-Prec"] == 1.0 and "one value only" in c["k"]["undefined"]["NR-Prec"]  # whatever the order
    e = property_precision(one, {"a": props["a"]})["a"]  # Euclidean, raw: distinct points
    assert e["undefined"] == {} and e["NR-Prec"] == pytest.approx(nr_prec(one, props["a"])["NR-Prec"], rel=1e-9)


def test_repeated_rows_is_exact_when_hashes_collide(monkeypatch):
    """The hash only proposes; equal hashes of different rows fall back to the exact comparison."""
    from embedscope.metrics import properties as props_mod

    rng = np.random.default_rng(6)
    for t in range(30):
        n, d = int(rng.integers(1, 50)), int(rng.integers(1, 5))
        B = np.round(rng.normal(size=(int(rng.integers(1, 6)), d)))
        X = B[rng.integers(0, len(B), n)] * np.where(rng.random((n, d)) < 0.3, -1.0, 1.0)  # -0.0 twins of 0.0
        assert props_mod._repeated_rows(X) == _repeats(X), t
    monkeypatch.setattr(props_mod, "_row_hash", lambda A: np.zeros(len(A), dtype=np.uint64))
    X = np.vstack([rng.normal(size=(7, 3)), np.zeros((1, 3)), -np.zeros((1, 3))])[rng.integers(0, 9, 40)]
    assert props_mod._repeated_rows(X) == _repeats(X)


# ---------------------------------------------------------------------------- a property that is the class


def test_a_property_that_groups_as_the_class_stands_for_it_and_says_so(tmp_path, capsys):
    """The audit's three_1cls (labels all 0, `size` all 0): no class row, and nothing said. The property
    groups the images exactly as the labels (here by other names), so its numbers are the class's: a
    note says it stands for the class; asked for by name, the class is listed with the same numbers."""
    rng = np.random.default_rng(7)
    n = 36
    labels = rng.integers(0, 3, n)
    shape = np.array(["cube", "ring", "cone"])[labels]  # the class under other names: the same partition
    X = rng.normal(size=(n, 3)).astype(np.float32)
    h5 = _file(tmp_path / "s.h5", X, labels, shape=shape, hue=rng.integers(0, 2, n))
    assert _run(["properties", str(h5), "--csv", str(tmp_path / "a.csv"), "--no-progress"]) == 0
    text = capsys.readouterr().out
    rows = _csv(tmp_path / "a.csv")
    assert set(p for _, p in rows) == {"shape", "hue"}
    assert float(rows[("s", "shape")]["NR-Prec"]) == pytest.approx(nr_prec(X, labels)["NR-Prec"], rel=1e-9)
    assert ("property 'shape' groups the images exactly as the class labels: its numbers are the class's "
            "(no 'class' row; ask for 'class' by name to list it too)") in text.splitlines()
    assert _run(["properties", str(h5), "--properties", "class,shape", "--csv", str(tmp_path / "b.csv"),
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    both = _csv(tmp_path / "b.csv")
    assert both[("s", "class")]["NR-Prec"] == both[("s", "shape")]["NR-Prec"] == rows[("s", "shape")]["NR-Prec"]
    assert "property 'shape' groups the images exactly as the class labels: its numbers are the class's" \
        in text.splitlines()
    # the audit's case: three rows of one class, `size` all 0
    t = _file(tmp_path / "three.h5", rng.normal(size=(3, 4)), [0, 0, 0], colour=["blue", "blue", "green"],
              size=[0, 0, 0])
    assert _run(["properties", str(t), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "property 'size' groups the images exactly as the class labels" in text
    assert _table(text)[("three", "size")]["R-Prec"] == "1.0000"


# ------------------------------------------------------------------------------------------------ figure


def test_the_figure_says_what_n_a_means(tmp_path):
    """A NaN NR-Prec is written "n/a" where its bar would be; the legend says it is undefined and where
    the reason is (nothing of the kind when every NR-Prec is defined)."""
    from embedscope.viz.figures import use_agg
    from embedscope.viz.properties import property_bars

    use_agg()
    rows = [{"model": "m", "property": "a", "NR-Prec": 3.0, "ceiling": 9.0},
            {"model": "m", "property": "b", "NR-Prec": float("nan"), "ceiling": float("nan")}]
    fig = property_bars(rows)
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(t.startswith("n/a: NR-Prec undefined") for t in texts)
    assert [t.get_text() for t in fig.axes[0].texts] == ["n/a"]
    fig.savefig(tmp_path / "f.png")
    fig2 = property_bars(rows[:1])
    assert not any("n/a" in t.get_text() for t in fig2.axes[0].get_legend().get_texts())
