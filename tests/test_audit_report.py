"""`embedscope report` as a reader sees it (issue #15, checked in headless Chromium; docs/studies.md):
the page parsed with a real HTML5 parser (html5lib, strict) and read by section, on studies built
from synthetic rows (fast, no training): a failed checkpoint at the top with its error, too few
points, rows left out by --exclude, checkpoints taken as given, undefined numbers, odd names and
control characters, the full sha256 of every checkpoint, and figures shown at the size they were
drawn for. No browser needed (scripts/screenshot_report.py is the manual check)."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest

html5lib = pytest.importorskip("html5lib")

MEASURES = ("R@1", "MAP@R", "rho", "pi_ratio", "pi_intra", "pi_inter", "NMI", "mAP@C", "F1")


def _rows(names, seeds=(0, 1), selection="best", sha=None):
    rng = np.random.default_rng(0)
    rows = []
    for k, (name, s) in enumerate(itertools.product(names, seeds)):
        rows.append({"id": f"{name}_s{s}", "run": f"{name}_s{s}", "selection": selection, "status": "ok",
                     "loss": name, "seed": s, "normalize": True, "untrained": "", "epoch": 3, "dataset": "digits",
                     "arch": "digits_cnn", "embed_dim": 16, "checkpoint": f"/ckpts/{name}_s{s}.pt",
                     "sha256": sha(k) if sha else f"{k:02x}" * 32, "N_train": 901, "N_test": 896,
                     **{m: float(rng.uniform(0.2, 0.9)) for m in MEASURES}})
    return rows


def _study(tmp_path, rows, *, exclude=(), figures=(), meta=None):
    from embedscope.study.run import finish_study

    d = tmp_path / "study"
    d.mkdir()
    finish_study(d, rows, exclude=exclude, n_boot=50, seed=1, figures=False)
    (d / "study.json").write_text(json.dumps(meta or {
        "settings": {"source": "runs/", "epoch": "best", "metric": "cosine", "seed": 1, "device": "cpu"},
        "versions": {"embedscope": "x", "numpy": "y"}, "host": "node7", "stats_code": "abc123",
        "measures": {"rho": {"split": "train", "direction": "lower", "meaning": "spectral decay"}}}))
    if figures:
        from PIL import Image

        (d / "figures").mkdir()
        for name, (w, h) in figures:
            Image.new("RGB", (w, h), "white").save(d / "figures" / f"{name}.png", dpi=(200, 200))
        stats = json.loads((d / "correlations.json").read_text())
        stats["figures"] = [n for n, _ in figures]
        (d / "correlations.json").write_text(json.dumps(stats))
    return d


def _page(d):
    """The report's text, after checking that a strict HTML5 parser reads it without an error."""
    from embedscope.study.report import build_report

    text = build_report(d)
    parser = html5lib.HTMLParser(strict=True)
    parser.parse(text)
    assert not parser.errors
    return text


def _doc(text):
    return html5lib.parse(text, namespaceHTMLElements=False)


def _texts(el):
    return re.sub(r"\s+", " ", "".join(el.itertext())).strip()


def _section(doc, heading):
    """The elements after the <h2> that starts with ``heading``, up to the next <h2>."""
    body = doc.find("body")
    out, inside = [], False
    for el in body:
        if el.tag == "h2":
            inside = _texts(el).startswith(heading)
            continue
        if inside:
            out.append(el)
    assert out, heading
    return out


def _tables(doc, heading):
    """[(header texts of the last header row, [[cell texts]], [row classes])] of the tables of a section."""
    out = []
    for el in _section(doc, heading):
        for t in el.iter("table"):
            head = t.find("thead").findall("tr")[-1]
            rows = t.find("tbody").findall("tr")
            out.append(([_texts(c) for c in head], [[_texts(c) for c in r] for r in rows],
                        [r.get("class", "") for r in rows]))
    assert out, f"no table under {heading}"
    return out


def _table(doc, heading):
    return _tables(doc, heading)[0]


def _before_first_h2(doc):
    body = doc.find("body")
    out = []
    for el in body:
        if el.tag == "h2":
            break
        out.append(el)
    return out


# ------------------------------------------------------------------------------------------- numbers
def test_correlations_are_signed_with_three_decimals_even_when_whole(tmp_path):
    """Two objectives: every r is ±1. The old page showed '1' beside '0.999' and '-1' (the integer
    shortcut of counts applied to correlations); a correlation is +1.000 / -1.000 like every other."""
    d = _study(tmp_path, _rows(["a", "b"], seeds=(0,)))
    doc = _doc(_page(d))
    _, rows, _ = _table(doc, "Correlations with test")
    cells = [c for r in rows for c in r[3:10]]
    assert cells and all(re.fullmatch(r"[+-]\d\.\d{3}( \[[+-]\d\.\d\d, [+-]\d\.\d\d\])?|–", c) for c in cells), cells
    assert {"+1.000", "-1.000"} & set(cells)
    _, pub, _ = _table(doc, "Published values")
    assert all(re.fullmatch(r"[+-]\d\.\d{3}( \[.*\])?|–", r[4]) for r in pub)


def test_no_empty_cell_and_no_raw_nan_anywhere(tmp_path):
    """An undefined number is '–' (with a note saying why), never an empty cell, 'nan' or 'None': the
    old page left the Fig.-4 'this study' column and whole robustness columns blank, and showed 'nan'
    for the objective of a failed row."""
    rows = _rows(["a", "b"], seeds=(0,))
    rows.append({"id": "broken", "run": "broken", "selection": "given", "status": "error",
                 "error": "broken.pt: not a PyTorch checkpoint", "checkpoint": "/ckpts/broken.pt", "untrained": ""})
    d = _study(tmp_path, rows)
    text = _page(d)
    doc = _doc(text)
    for td in doc.iter("td"):
        assert _texts(td) not in ("", "nan", "NaN", "None"), (td.attrib, _texts(td))
    _, fig4, _ = _tables(doc, "Published values")[1]
    assert [r[2] for r in fig4] == ["–"] * 3  # the metric matrix needs 3 objectives
    _, runs, _ = _table(doc, "Runs")
    broken = next(r for r in runs if r[0] == "broken")
    assert "nan" not in broken and broken[1] == "error"
    assert "No robustness check applies to this study" in text  # 2 objectives: none, and why


def test_runs_table_shows_yes_no_and_measures_to_four_decimals(tmp_path):
    rows = _rows(["a", "b", "c"])
    rows.append({**rows[0], "id": "u0", "run": "u0", "selection": "untrained", "loss": "untrained", "R@1": 0.5})
    for r in rows[:-1]:
        r["untrained"] = "u0"
    rows[0]["R@1"], rows[1]["R@1"], rows[2]["R@1"] = 1.0, 0.4, 0.6
    doc = _doc(_page(_study(tmp_path, rows)))
    head, runs, classes = _table(doc, "Runs")
    col = {h: i for i, h in enumerate(head)}
    first = next(r for r in runs if r[0] == rows[0]["id"])
    assert first[col["R@1 (test)"]] == "1.0000"  # not '1'
    assert first[col["L2-normalised"]] == "yes"  # not 'True'
    assert [r[col["beats untrained"]] for r in runs[1:3]] == ["no", "yes"]
    assert classes[1] == "bad" and classes[2] == ""
    assert first[col["seed"]] == "0" and first[col["epoch"]] == "3"


# ------------------------------------------------------------------------------------------- warnings
def test_a_failed_checkpoint_is_shown_first_with_its_path_and_error(tmp_path):
    """The old page only counted it ('1 failed') and put the message in the last column of the runs
    table, off screen; the reader must see which file failed and why before any number."""
    rows = _rows(["a", "b", "c"])
    rows.append({"id": "bad_given", "run": "bad_given", "selection": "given", "status": "error",
                 "error": "x <b>.pt: not a PyTorch checkpoint", "checkpoint": "/ckpts/x <b>.pt", "untrained": ""})
    text = _page(_study(tmp_path, rows))
    top = " ".join(_texts(el) for el in _before_first_h2(_doc(text)))
    assert "1 checkpoint of 7 failed" in top
    assert "/ckpts/x <b>.pt" in top and "x <b>.pt: not a PyTorch checkpoint" in top
    assert "&lt;b&gt;" in text and "x <b>" not in text


def test_two_points_say_that_the_correlations_say_nothing(tmp_path):
    top = " ".join(_texts(el) for el in _before_first_h2(_doc(_page(_study(tmp_path, _rows(["a", "b"],
                                                                                          seeds=(0,)))))))
    assert "Only 2 objectives and 2 runs" in top and "±1 whatever the values" in top


def test_many_points_give_no_such_warning(tmp_path):
    assert "Only " not in _page(_study(tmp_path, _rows(["a", "b", "c", "d", "e"])))


@pytest.mark.parametrize("n, share", [(3, "78%"), (4, "34%")])
def test_three_or_four_points_say_their_intervals_mean_nothing(tmp_path, n, share):
    # a bootstrap resample of 3 points holds at most two distinct ones 21 times in 27 (r = +-1 there):
    # "[+0.92, +1.00]" over 3 objectives was shown as an interval like any other
    import math

    names = [chr(97 + i) for i in range(n)]
    assert f"{(math.comb(n, 2) * (2 ** n - 2) + n) / n ** n:.0%}" == share
    top = " ".join(_texts(el) for el in _before_first_h2(_doc(_page(_study(tmp_path, _rows(names))))))
    assert f"Only {n} objectives: {share} of the bootstrap resamples" in top
    assert "Only 6 runs" not in top and "Only 8 runs" not in top  # 2 seeds each: enough runs


def test_test_set_selection_warning_only_for_rows_selected_at_the_best_epoch(tmp_path):
    """Checkpoints taken as given (a glob of files without their training folders) were not selected
    on the test set: the old page warned because the study's --epoch was 'best' regardless."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    given = _page(_study(tmp_path / "a", _rows(["a", "b", "c"], selection="given")))
    assert "selects on the test set" not in given
    assert "taken as given" in given
    best = _page(_study(tmp_path / "b", _rows(["a", "b", "c"])))
    assert "selects on the test set" in best


def test_rows_left_out_by_exclude_are_marked(tmp_path):
    rows = _rows(["a", "b", "c", "d"])
    for r in rows:
        r["p_switch"] = 0.3 if r["loss"] == "d" else 0.0
    text = _page(_study(tmp_path, rows, exclude=["p_switch>0"]))
    doc = _doc(text)
    head, runs, classes = _table(doc, "Runs")
    col = head.index("excluded")
    for row, cls in zip(runs, classes):
        out = row[0].startswith("d_")
        assert row[col] == ("yes" if out else "no")
        assert ("excl" == cls) if out else ("excl" != cls)
    summary = _texts(_before_first_h2(doc)[1])
    assert "2 excluded by p_switch>0" in summary
    assert "Grey rows: left out of the statistics by --exclude" in text


def test_summary_without_exclusions_says_none_excluded(tmp_path):
    summary = _texts(_before_first_h2(_doc(_page(_study(tmp_path, _rows(["a", "b", "c"])))))[1])
    assert "none excluded" in summary and "excluded by nothing" not in summary


# ------------------------------------------------------------------------------------------- provenance
def test_provenance_gives_every_checkpoint_path_and_full_sha256(tmp_path):
    """Issue #15 asks for the checkpoint hashes: the old page showed 12 characters of each and no
    path (and the row ids are sanitised names: 'i_na_ve__given' for '<i>naïve_ü.pt')."""
    rows = _rows(["a", "b", "c"], sha=lambda k: f"{k:x}" * 64)
    doc = _doc(_page(_study(tmp_path, rows)))
    head, cks, _ = _table(doc, "Checkpoints")
    assert head == ["id", "checkpoint", "sha256"]
    assert {(r[0], r[1], r[2]) for r in cks} == {(r["id"], r["checkpoint"], r["sha256"]) for r in rows}
    _, settings, _ = _table(doc, "Settings and provenance")
    s = dict((r[0], r[1]) for r in settings)
    assert s["host"] == "node7" and s["device"] == "cpu" and s["statistics code (fingerprint)"] == "abc123"
    assert s["data set"] == "digits (901 training images, 896 test images)"
    assert "arch digits_cnn" in s["training settings, the same in every run"]
    assert "embed_dim 16" in s["training settings, the same in every run"]
    assert s["hyper-parameter axes that vary"] == "loss: a, b, c" and s["seeds"] == "0, 1"
    assert s["epoch selection"] == "best (checkpoints: 6 at the best epoch)"


def test_whole_numbers_read_back_as_floats_are_shown_as_whole(tmp_path):
    """A failed row leaves empty cells, so runs.csv reads 16 back as 16.0: the settings said
    'embed_dim 16.0', 'seeds 0.0, 1.0', '901.0 training images'."""
    rows = _rows(["a", "b", "c"])
    rows.append({"id": "bad", "run": "bad", "selection": "given", "status": "error", "error": "e",
                 "checkpoint": "/x.pt", "untrained": ""})
    _, settings, _ = _table(_doc(_page(_study(tmp_path, rows))), "Settings and provenance")
    s = dict((r[0], r[1]) for r in settings)
    assert s["seeds"] == "0, 1" and "embed_dim 16," in s["training settings, the same in every run"] + ","
    assert s["data set"] == "digits (901 training images, 896 test images)"


def test_control_characters_from_files_are_shown_escaped(tmp_path):
    """An HTML escape leaves ESC and other controls as they are: a strict HTML5 parser rejects them,
    and a browser shows nothing. They are shown as \\x1b, like on the terminal."""
    rows = _rows(["a", "b", "c"])
    rows[0]["checkpoint"] = "/ckpts/a\x1b[31m\x07.pt"
    text = _page(_study(tmp_path, rows))  # strict parse: no error
    assert "\x1b" not in text and "\x07" not in text
    assert "/ckpts/a\\x1b[31m\\x07.pt" in _texts(_doc(text).find("body"))


def test_the_measures_are_explained(tmp_path):
    _, gl, _ = _table(_doc(_page(_study(tmp_path, _rows(["a", "b", "c"])))), "Measures")
    assert ["rho", "ρ (train)", "train", "lower", "spectral decay"] in gl


# ------------------------------------------------------------------------------------------- layout
def test_figures_are_shown_at_the_size_they_were_drawn_for(tmp_path):
    """The old page stretched every figure to the column (max-width only): the 6-inch ranking chart
    came out wider than the 12-inch Fig. 5 and its text twice as large. Now each PNG has its width
    and height in CSS pixels from its dpi (FIGURE_PX_PER_INCH per inch)."""
    from embedscope.study.report import FIGURE_PX_PER_INCH

    d = _study(tmp_path, _rows(["a", "b", "c"]), figures=[("fig5_structure_vs_target", (2400, 1300)),
                                                          ("ranking_by_tau", (1200, 1400))])
    imgs = list(_doc(_page(d)).iter("img"))
    assert [(i.get("width"), i.get("height")) for i in imgs] == [
        (str(round(2400 * FIGURE_PX_PER_INCH / 200)), str(round(1300 * FIGURE_PX_PER_INCH / 200))),
        (str(round(1200 * FIGURE_PX_PER_INCH / 200)), str(round(1400 * FIGURE_PX_PER_INCH / 200)))]
    assert all(i.get("src").startswith("data:image/png;base64,") for i in imgs)


def test_png_size_reads_the_dpi_and_tolerates_a_png_without_one(tmp_path):
    from PIL import Image

    from embedscope.study.report import png_size

    Image.new("RGB", (30, 20)).save(tmp_path / "a.png", dpi=(150, 150))
    Image.new("RGB", (30, 20)).save(tmp_path / "b.png")
    w, h, dpi = png_size((tmp_path / "a.png").read_bytes())
    assert (w, h) == (30, 20) and dpi == pytest.approx(150, abs=0.05)
    assert png_size((tmp_path / "b.png").read_bytes()) == (30, 20, None)
    with pytest.raises(ValueError):
        png_size(b"GIF89a" + bytes(30))


def test_the_correlation_table_fits_a_laptop_screen(tmp_path):
    """The old table had 10 columns each 'value [lo, hi]' on one line (~1,300 px): granulated τ was
    off screen at 1400 px. The interval now sits below its value, and the columns are grouped under
    'over objectives' / 'over runs' headers."""
    text = _page(_study(tmp_path, _rows(["a", "b", "c", "d"])))
    doc = _doc(text)
    thead = next(el for el in _section(doc, "Correlations with test")).find(".//thead")
    top = [(_texts(th), th.get("colspan")) for th in thead.findall("tr")[0]]
    assert ("over objectives (n = 4)", "3") in top and ("over runs (n = 8)", "3") in top
    spans = [s for s in doc.iter("span") if s.get("class") == "ci"]
    assert spans and all(re.fullmatch(r"\[[+-]\d\.\d\d, [+-]\d\.\d\d\]", _texts(s)) for s in spans)
    assert ".ci{display:block" in text


def test_every_variant_is_valid_and_self_contained(tmp_path):
    """No URL other than data: in src/href/url(), and no script: the page makes no request."""
    variants = [_rows(["a", "b"], seeds=(0,)), _rows(["<b>x</b>", "naïve ü", "a&b"]),
                _rows(["a", "b", "c"], selection="given")]
    for k, rows in enumerate(variants):
        (tmp_path / str(k)).mkdir()
        text = _page(_study(tmp_path / str(k), rows, figures=[("fig4_metric_correlations", (100, 80))]))
        links = [v for el in _doc(text).iter() for k, v in el.attrib.items() if k in ("src", "href", "srcset")]
        assert links and all(v.startswith("data:image/png;base64,") for v in links)
        assert "url(" not in text and "@import" not in text and "<script" not in text
        assert "<b>x</b>" not in text
        if k == 1:
            assert "&lt;b&gt;x&lt;/b&gt;_s0" in text and "naïve ü_s1" in text and "a&amp;b" in text
