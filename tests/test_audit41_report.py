"""`embedscope report` read as a demanding user reads it (audit 41): the page of a study parsed with the
standard library's html.parser (every tag closed, nothing fetched), the summary's counts in the singular,
the settings of the runs that enter the statistics (not of the runs --exclude left out), an axis that a
run has no value of (multisimilarity has no miner), and a hand-edited correlations.json refused in one
line instead of a traceback. Studies built from synthetic rows (fast, no training)."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest

MEASURES = ("R@1", "MAP@R", "rho", "pi_ratio", "pi_intra", "pi_inter", "NMI", "mAP@C", "F1")
VOID = {"meta", "img", "br", "wbr", "hr", "link", "input"}


def _row(k, *, loss="margin", miner="distance", p_switch=0.0, seed=0, name=None, status="ok"):
    rng = np.random.default_rng(k)
    name = name or f"{loss}_{miner}_p{p_switch}_s{seed}"
    row = {"id": name, "run": name, "selection": "given", "status": status, "loss": loss, "miner": miner,
           "p_switch": p_switch, "seed": seed, "normalize": True, "untrained": "", "epoch": 3, "dataset": "digits",
           "arch": "digits_cnn", "embed_dim": 16, "checkpoint": f"ckpts/{name}.pt", "sha256": f"{k:02x}" * 32,
           "N_train": 901, "N_test": 896}
    if status == "ok":
        row.update({m: float(rng.uniform(0.2, 0.9)) for m in MEASURES})
    else:
        row["error"] = f"ckpts/{name}.pt: not a PyTorch checkpoint"
    return row


def _grid():
    """margin and multisimilarity x p_switch 0 / 0.3, 2 seeds; multisimilarity without a miner at p_switch 0
    (as train-grid writes it), so that the miner is an axis of its own (as in the demo's grid)."""
    rows, k = [], 0
    for loss in ("margin", "multisimilarity", "triplet"):
        for p in (0.0, 0.3):
            for s in (0, 1):
                miner = None if (loss == "multisimilarity" and p == 0.0) else "distance"
                rows.append(_row(k, loss=loss, miner=miner, p_switch=p, seed=s))
                k += 1
    return rows


def _study(tmp_path, rows, *, exclude=(), name="study"):
    from embedscope.study.run import finish_study

    d = tmp_path / name
    d.mkdir()
    finish_study(d, rows, exclude=exclude, n_boot=50, seed=1, figures=False)
    (d / "study.json").write_text(json.dumps({
        "settings": {"source": "runs/", "epoch": "best", "metric": "cosine", "seed": 1, "device": "cpu"},
        "versions": {"embedscope": "x"}, "host": "node7"}))
    return d


class _Closed(HTMLParser):
    """Every element closed in the order it was opened (void elements aside); <script>, external src."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.external = [], [], []

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "link", "iframe"):
            self.errors.append(f"<{tag}> in the page")
        for k, v in attrs:
            if k in ("src", "href") and v and not v.startswith("data:image/png;base64,"):
                self.external.append(v)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'} at {self.getpos()}")
        else:
            self.stack.pop()


def _page(d):
    from embedscope.study.report import build_report

    text = build_report(d)
    p = _Closed()
    p.feed(text)
    p.close()
    assert not p.errors and not p.stack and not p.external, (p.errors, p.stack, p.external)
    return text


def _setting(text, name):
    """The text of the value cell of the settings row ``name``."""
    m = re.search(r'<tr><td class="l">' + re.escape(name) + r'</td><td class="w">(.*?)</td></tr>', text)
    assert m, name
    return html.unescape(re.sub(r"<[^>]+>", "", m.group(1)))


def test_the_page_is_well_formed_for_hostile_names_and_a_failed_checkpoint(tmp_path):
    """html.parser: every tag closed, no script, no URL but the embedded PNGs, for names with markup, '&',
    quotes and non-ASCII in the run names, paths and errors."""
    rows = [_row(0, loss="<script>alert(1)</script>", name="a<b>&\"'é"), _row(1, loss="x & y", name="naïve ü"),
            _row(2, loss="q\"uote", name="<i>"), _row(3, loss="z", name="</td></tr>broken", status="error")]
    text = _page(_study(tmp_path, rows))
    assert "<script>" not in text and "</td></tr>broken" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "naïve ü" in text and "a&lt;b&gt;&amp;&quot;&#x27;é" in text


def test_the_summary_counts_one_run_and_one_objective_in_the_singular(tmp_path):
    """A study of one checkpoint and a failed one: '1 run in 1 objective', '1 checkpoint ... enters' (was
    '1 runs in 1 objectives', '1 checkpoint of 2 failed and enter no statistic')."""
    text = _page(_study(tmp_path, [_row(0), _row(1, loss="triplet", status="error")]))
    summary = html.unescape(re.sub(r"<[^>]+>", "", re.search(r'<p class="note">(.*?)</p>', text).group(1)))
    assert summary.startswith("1 run in 1 objective (2 checkpoints: 1 measured, 1 failed"), summary
    assert "1 checkpoint of 2 failed</b> and enters no statistic" in text
    many = _page(_study(tmp_path, _grid(), name="grid"))
    assert "12 runs in 6 objectives (12 checkpoints: 12 measured, 0 failed" in many


def test_an_axis_a_run_has_no_value_of_lists_none_as_the_objectives_do(tmp_path):
    """multisimilarity has no miner: the miner varies (an axis: 'multisimilarity miner=None p_switch=0'), and
    the settings said 'miner: distance', one value of an axis that varies."""
    text = _page(_study(tmp_path, _grid()))
    assert "multisimilarity miner=None p_switch=0" in text
    axes = _setting(text, "hyper-parameter axes that vary")
    assert "miner: distance, None" in axes, axes


def test_settings_are_those_of_the_runs_the_statistics_keep(tmp_path):
    """--exclude 'p_switch>0': every run in the statistics has p_switch 0, which is a setting 'the same in
    every run'; it was listed as a setting 'that goes with the objective' (0 for some objectives, 0.3 for
    the objectives left out), and the miner, which the axes no longer hold, beside the left-out objectives."""
    text = _page(_study(tmp_path, _grid(), exclude=("p_switch>0",)))
    assert _setting(text, "hyper-parameter axes that vary") == "loss: margin, multisimilarity, triplet"
    same = _setting(text, "training settings, the same in every run")
    assert "p_switch 0" in same.split(", "), same
    follow = _setting(text, "training settings that go with the objective (fixed by the axes; –: none)")
    assert "p_switch" not in follow and "0.3" not in follow, follow
    assert follow == "miner: distance (margin, triplet), – (multisimilarity)", follow
    assert _setting(text, "left out (--exclude)") == "p_switch>0"


@pytest.mark.parametrize("key, value", [("exclude_unmatched", "x"), ("undefined", "x"), ("measures", 5),
                                        ("datasets", 5), ("objectives", 5), ("ranking", None)])
def test_a_hand_edited_statistics_file_is_one_line_not_a_traceback(tmp_path, key, value):
    """A correlations.json whose entry has another type: an EmbedscopeError naming the file (or, for an
    empty ranking, the page without ranks), not an AttributeError/TypeError from deep inside the page."""
    from embedscope.errors import EmbedscopeError
    from embedscope.study.report import build_report

    d = _study(tmp_path, _grid())
    stats = json.loads((d / "correlations.json").read_text())
    stats[key] = value
    (d / "correlations.json").write_text(json.dumps(stats))
    if value is None:
        text = _page(d)
        assert "rank by" in text
        return
    with pytest.raises(EmbedscopeError, match=rf"correlations\.json: not the statistics of a study \('{key}'"):
        build_report(d)


def test_a_metric_matrix_that_is_not_a_list_of_rows_shows_a_dash(tmp_path):
    """metric_matrix.pearson as an object (a hand edit): the Fig. 4 comparison shows – (was a KeyError)."""
    d = _study(tmp_path, _grid())
    stats = json.loads((d / "correlations.json").read_text())
    stats["metric_matrix"]["pearson"] = {}
    (d / "correlations.json").write_text(json.dumps(stats))
    text = _page(d)
    assert re.search(r'<td class="l">R@1 – NMI</td><td>\+0\.86</td><td>–</td>', text)


def test_a_study_stopped_before_it_ended_is_said_at_the_top(tmp_path):
    """study.json is written when a study starts and again, with 'ended', when it has finished: without
    'ended' the last run was stopped, and the tables may be an earlier run's. Said before any number; the
    provenance row showed 'started / ' with an empty end."""
    d = _study(tmp_path, _grid())
    meta = json.loads((d / "study.json").read_text())
    (d / "study.json").write_text(json.dumps({**meta, "started": "2026-11-30T10:00:00+00:00"}))
    text = _page(d)
    top = text[:text.index("<h2>")]
    assert "did not finish (started 2026-11-30T10:00:00+00:00, no end recorded)" in top
    assert _setting(text, "started / ended") == "2026-11-30T10:00:00+00:00 / – (not finished)"
    (d / "study.json").write_text(json.dumps({**meta, "started": "2026-11-30T10:00:00+00:00",
                                              "ended": "2026-11-30T10:05:00+00:00"}))
    text = _page(d)
    assert "did not finish" not in text
    assert _setting(text, "started / ended") == "2026-11-30T10:00:00+00:00 / 2026-11-30T10:05:00+00:00"


def test_runs_table_and_statistics_of_two_runs_of_the_study_are_refused(tmp_path, capsys):
    """runs.csv with a checkpoint more than correlations.json was computed from (a study stopped between
    the two files): one line and exit 1, not a page of one run's rows beside the other's numbers (the
    summary said '12 checkpoints measured' above a runs table of 13)."""
    from embedscope.cli import main
    from embedscope.study.run import finish_study

    d = _study(tmp_path, _grid())
    stats = (d / "correlations.json").read_text()
    finish_study(d, _grid() + [_row(99, loss="contrastive")], n_boot=50, seed=1, figures=False)
    (d / "correlations.json").write_text(stats)  # the earlier run's statistics left
    out = tmp_path / "page.html"
    assert main(["report", str(d), "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "runs.csv holds 13 rows" in err and "computed from 12" in err, err
    assert not out.exists()


def test_fig5_legend_names_the_objectives_whole_where_the_legend_has_room(tmp_path):
    """The demo grid's Fig. 5 (embedded in the page): the legend cut every name to 28 characters,
    'multisimilarit…ne p_switch=0' and 'margin miner=d…ce p_switch=0', the miner that tells the objectives
    apart hidden, in a legend with room for longer names in as many rows (two). The legend stays inside
    the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embedscope.viz.study import fig5

    d = _study(tmp_path, _grid())
    stats = json.loads((d / "correlations.json").read_text())
    fig = fig5(stats)
    try:
        leg = fig.legends[0]
        texts = [t.get_text() for t in leg.get_texts()]
        assert "multisimilarity miner=None p_switch=0" in texts and "margin miner=distance p_switch=0.3" in texts
        assert leg._ncols == 3  # two rows of three, as the 28-character labels took (four columns)
        fig.canvas.draw()
        box = leg.get_window_extent()
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width + 1, (box, fig.bbox)
    finally:
        plt.close(fig)
    # one panel (--measures rho), 3.1 in wide: longer names only as far as the figure is wide
    narrow = json.loads((_study(tmp_path, _only(_grid(), {"R@1", "rho"}), name="narrow") / "correlations.json")
                        .read_text())
    long = [{**o, "objective": o["objective"] + " lr=0.001 embed_dim=128 weight_decay=0.0004"}
            for o in narrow["objectives"]]
    fig = fig5({**narrow, "objectives": long})
    try:
        fig.canvas.draw()
        box = fig.legends[0].get_window_extent()
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width + 1, (box, fig.bbox)
    finally:
        plt.close(fig)


def test_the_runs_table_shows_the_names_the_user_gave_beside_their_ids(tmp_path):
    """A YAML study's names ('ms ✓ bell', 'm<script>…') are made safe for file names in the ids
    (ms_bell_given): the runs table showed only the ids, the user's own names nowhere on the page. Shown,
    escaped, where an id does not start with its run's name; a train-grid study (ids = name + selection)
    keeps its one id column."""
    rows = [_row(0, loss="margin"), _row(1, loss="triplet"), _row(2, loss="multisimilarity")]
    for r, (rid, run) in zip(rows, [("ms_bell_given", "ms ✓ bell"), ("m_script_given", "m<script>x</script>"),
                                    ("plain_given", "plain")]):
        r["id"], r["run"] = rid, run
    text = _page(_study(tmp_path, rows))
    head = re.search(r"<h2>Runs</h2>.*?</thead>", text, re.S).group(0)
    assert "run (as named)" in head
    assert "<td class=\"l\">ms ✓ bell</td>" in text and "m&lt;script&gt;x&lt;/script&gt;" in text
    grid = _grid()
    for r in grid:
        r["id"] = r["run"] + "_given"
    assert "run (as named)" not in _page(_study(tmp_path, grid, name="grid"))


def _only(rows, keep):
    for r in rows:
        for m in MEASURES:
            if m not in keep:
                r.pop(m, None)
    return rows


def test_a_study_of_no_measure_but_the_target_says_so_instead_of_an_empty_table(tmp_path):
    """--measures P@1 (P@1 is R@1): the correlation table was its header rows alone, Fig. 5 a figure of
    no panel (a legend alone) embedded in the page. Said instead, and no Fig. 5 drawn."""
    from embedscope.viz.study import figure_names

    rows = _only(_grid(), {"R@1"})
    for r in rows:
        r["P@1"] = r["R@1"]
    d = _study(tmp_path, rows)
    stats = json.loads((d / "correlations.json").read_text())
    assert "fig5_structure_vs_target" not in figure_names(stats)
    text = _page(d)
    section = text[text.index("<h2>Correlations"):text.index("<h2>Robustness")]
    assert "<table" not in section
    assert "No measure is correlated with test R@1: the study's other measures (P@1) equal the target" in section
    assert "No figures: no measure is correlated with the target" in text
    robust = text[text.index("<h2>Robustness"):text.index("<h2>Published")]
    assert "No robustness check: no measure is correlated with the target" in robust
    assert "needs at least 4 objectives" not in robust  # (the study has 6)
    bare = _page(_study(tmp_path, _only(_grid(), {"R@1"}), name="bare"))
    assert "the study measured no other measure (--measures)" in bare


def test_published_values_of_measures_the_study_did_not_measure_say_not_measured(tmp_path):
    """--measures rho: the π rows of the Fig. 5 comparison and the Fig. 4 pairs (NMI, mAP@C, F1) showed –,
    'not defined (fewer than 3 objectives, or a constant)' by the note, of measures never measured."""
    text = _page(_study(tmp_path, _only(_grid(), {"R@1", "rho"})))
    section = text[text.index("<h2>Published"):text.index("<h2>Runs")]
    cells = {m: re.search(r'<td class="l">' + re.escape(m) + r"</td>(?:<td>[^<]*</td>){3}<td>(.*?)</td>", section)
             .group(1) for m in ("rho", "pi_ratio", "pi_intra", "pi_inter")}
    assert cells["rho"].startswith(("+", "-")) and {cells[m] for m in ("pi_ratio", "pi_intra", "pi_inter")} == {
        "not measured"}, cells
    assert '<td class="l">R@1 – NMI</td><td>+0.86</td><td>not measured</td>' in section
    full = _page(_study(tmp_path, _grid(), name="full"))
    assert "<td>not measured</td>" not in full


def test_best_epoch_one_is_counted_in_the_singular(tmp_path):
    """'best epoch = epoch 1 in 1 runs' (the untrained section)."""
    rows = _grid()
    for k, r in enumerate(rows):
        r["selection"], r["epoch"] = "best", 1 if k == 0 else 3
    text = _page(_study(tmp_path, rows))
    assert "best epoch = epoch 1 in 1 run." in text or "best epoch = epoch 1 in 1 run;" in text, \
        re.search(r"best epoch = [^.;]*", text).group(0)


def test_a_study_whose_every_checkpoint_failed_is_not_said_to_lack_measures(tmp_path):
    """Every checkpoint failed: no measure is correlated because no run was measured, not because of
    --measures ('the study measured no other measure', 'not measured' in the published values), and the
    advice is to run the study again, not 'with another --exclude'."""
    text = _page(_study(tmp_path, [_row(0, status="error"), _row(1, loss="triplet", status="error")]))
    assert "No run enters the statistics</b>: no checkpoint was measured" in text
    assert "tries the failed checkpoints again" in text and "another --exclude" not in text
    assert "--measures" not in text and "not measured" not in text
    assert "No measure is correlated with test R@1: no run enters the statistics (above)" in text
    published = text[text.index("<h2>Published"):text.index("<h2>Figures")]
    assert re.search(r'<td class="l">rho</td>(?:<td>[^<]*</td>){3}<td>–</td>', published)


def test_an_interval_is_shown_rounded_outwards_so_that_it_holds_its_value(tmp_path):
    """r = +0.866 with the bootstrap interval [0.866, 1]: rounded to the nearest the page read
    '+0.866 [+0.87, +1.00]', the value outside its own interval; the shown interval now holds the exact
    one (checked on random bounds against the decimals themselves) and the page shows [+0.86, +1.00]."""
    from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

    from embedscope.text import interval
    from embedscope.viz.study import _fmt_ci

    rng = np.random.default_rng(3)
    for lo, hi in np.sort(rng.uniform(-1, 1, (500, 2)), axis=1):
        want_lo = Decimal(repr(float(lo))).quantize(Decimal("0.01"), rounding=ROUND_FLOOR)
        want_hi = Decimal(repr(float(hi))).quantize(Decimal("0.01"), rounding=ROUND_CEILING)
        shown = interval(float(lo), float(hi))
        got = [Decimal(x) for x in shown.strip("[]").split(", ")]
        assert got == [want_lo, want_hi], (lo, hi, shown)
    assert interval(0.87, 0.9) == "[+0.87, +0.90]" and interval(-0.0001, 0.0) == "[-0.01, +0.00]"
    assert _fmt_ci({"pearson": 0.866, "pearson_lo": 0.866, "pearson_hi": 1.0}) == "+0.87 [+0.86, +1.00]"
    d = _study(tmp_path, _grid())
    stats = json.loads((d / "correlations.json").read_text())
    stats["correlations"][0].update(pearson=0.866, pearson_lo=0.866, pearson_hi=1.0)
    (d / "correlations.json").write_text(json.dumps(stats))
    text = _page(d)
    assert "+0.866 <span" in text and "[+0.86, +1.00]</span>" in text and "[+0.87, +1.00]" not in text


def test_a_study_of_failed_checkpoints_and_no_untrained_network_says_what_it_counts(tmp_path):
    """'2 checkpoints measured, 2 failed' of a study whose every checkpoint failed; 'Every correlation
    below is –' above no correlation table; 'no better than their untrained network: 0 of 0' of a study
    without untrained references."""
    text = _page(_study(tmp_path, [_row(0, status="error"), _row(1, loss="triplet", status="error")]))
    summary = html.unescape(re.sub(r"<[^>]+>", "", re.search(r'<p class="note">(.*?)</p>', text).group(1)))
    assert "(2 checkpoints: 0 measured, 2 failed" in summary, summary
    assert "Every correlation below" not in text and "No correlation is defined (–)" in text
    grid = _page(_study(tmp_path, _grid(), name="grid"))
    assert "0 of 0" not in grid
    assert "No selected checkpoint has an untrained network measured to compare with" in grid
