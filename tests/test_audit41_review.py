"""Audit 41, second reading of the day's property and study-report commits.

* ``import --properties`` stored a column named ``w,x`` (``add-properties`` refuses it since today:
  ``properties --properties w,x`` asks for ``w`` and ``x``, so it could not be named) and a column
  holding ``inf`` (``add-properties`` refuses it since today: stored, ``embedscope properties`` refused
  the whole file): both refused by ``import`` too, in one line; so are a Parquet property column of lists
  and one of bytes that are not UTF-8 (bare "ValueError: setting an array element with a sequence" and
  "UnicodeDecodeError: 'ascii' codec ..." from the store's writer), and bytes that are UTF-8 are text
  (they were that UnicodeDecodeError too);
* the report's provenance row said '– / – (not finished)' of a study.json that records neither a start nor
  an end (a study written before those were recorded; the warning at the top, rightly, said nothing):
  '(not finished)' only where a start is recorded and no end, as the warning;
* Fig. 5 of one panel (``--measures rho``) and 12 objectives drew its legend (12 rows) over the panel and
  its title over the panel's r: the figure was as high for any legend; it now grows by the legend's rows
  beyond two (the demo's two rows: as it was);
* a study whose every checkpoint failed, or that measured no other measure than the target (``--measures
  P@1``), says "No measure is correlated" instead of the correlation table, and then explained the
  table's cells anyway ("Below each value: its bootstrap 95% interval ... Rank: by |Kendall τ|"): that
  legend only under a table;
"""

from __future__ import annotations

import pytest
from cli_run import one_error_line, run_cli

_ROWS = ("0.1,0.2,a,p0,{0}\n0.3,0.1,a,p1,{1}\n0.5,0.2,b,p2,{2}\n0.2,0.9,b,p3,{3}\n")


def _import_csv(path, name: str, cells):
    path.write_text(f'e0,e1,label,path,"{name}"\n' + _ROWS.format(*cells))
    return path


def test_import_refuses_a_property_name_with_a_comma(tmp_path):
    src = _import_csv(tmp_path / "t.csv", "w,x", [1, 2, 2, 1])
    rc, out, err = run_cli(["import", str(src), "--labels", "label", "--paths", "path", "--properties", "w,x",
                            "-o", str(tmp_path / "t.h5")])
    assert rc == 1
    line = one_error_line(err, "import")
    assert "'w,x' has a comma" in line and "rename the column" in line
    assert not (tmp_path / "t.h5").exists()


def test_import_refuses_an_inf_property(tmp_path):
    src = _import_csv(tmp_path / "t.csv", "w", [1, "inf", 2, 3])
    rc, out, err = run_cli(["import", str(src), "--labels", "label", "--paths", "path", "--properties", "w",
                            "-o", str(tmp_path / "t.h5")])
    assert rc == 1
    line = one_error_line(err, "import")
    assert "property 'w'" in line and "not finite" in line and "row 1" in line
    assert not (tmp_path / "t.h5").exists()


def test_import_keeps_finite_numbers_and_padded_ids(tmp_path):
    import numpy as np

    from embedscope import store

    src = tmp_path / "t.csv"
    src.write_text("e0,e1,label,path,w,z\n0.1,0.2,a,p0,0,0001\n0.3,0.1,a,p1,0.5,1.5\n0.5,0.2,b,p2,-0.5,2\n"
                   "0.2,0.9,b,p3,1e-3,3\n")
    rc, out, err = run_cli(["import", str(src), "--labels", "label", "--paths", "path", "--properties", "w", "z",
                            "-o", str(tmp_path / "t.h5")])
    assert rc == 0, err
    es = store.load(tmp_path / "t.h5")
    assert es.properties["w"].tolist() == [0.0, 0.5, -0.5, 1e-3]
    assert [str(v) for v in es.properties["z"]] == ["0001", "1.5", "2", "3"]
    assert np.asarray(es.properties["w"]).dtype.kind == "f"


def test_report_says_not_finished_only_where_a_start_is_recorded(tmp_path):
    import json

    from test_audit41_report import _grid, _page, _setting, _study

    d = _study(tmp_path, _grid())
    meta = json.loads((d / "study.json").read_text())
    assert "started" not in meta and "ended" not in meta
    text = _page(d)
    assert "did not finish" not in text
    assert _setting(text, "started / ended") == "– / –"
    (d / "study.json").write_text(json.dumps({**meta, "started": "2026-11-30T10:00:00+00:00"}))
    text = _page(d)
    assert "did not finish" in text
    assert _setting(text, "started / ended") == "2026-11-30T10:00:00+00:00 / – (not finished)"


def test_fig5_of_one_panel_and_many_objectives_draws_its_legend_below_the_panel(tmp_path):
    """--measures rho over 12 objectives: one panel 3.8 in high, and a legend of 12 rows (2.5 in) drawn
    over it (the figure's height held two rows of legend; tight_layout gave up, the title ran over the
    panel's r). The figure grows by the legend's rows."""
    import matplotlib

    matplotlib.use("Agg")
    from test_audit41_report import MEASURES, _row

    from embedscope.study.run import finish_study
    from embedscope.viz.study import fig5

    rows, k = [], 0
    for loss in ("multisimilarity", "margin", "triplet"):
        for p in (0.0, 0.3):
            for lr in (0.0001, 0.001):
                for s in (0, 1):
                    r = _row(k, loss=loss, p_switch=p, seed=s)
                    r["lr"] = lr
                    k += 1
                    for m in MEASURES:
                        if m not in ("R@1", "rho"):
                            r.pop(m)
                    rows.append(r)
    d = tmp_path / "s"
    d.mkdir()
    stats = finish_study(d, rows, n_boot=10, seed=1, figures=False)["stats"]
    assert len(stats["objectives"]) == 12
    fig = fig5(stats)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    (ax,) = [a for a in fig.axes if a.get_visible() and a.axison]
    panel = ax.get_tightbbox(r)
    legend = fig.legends[0].get_window_extent(r)
    title = fig._suptitle.get_window_extent(r)
    assert legend.y1 <= panel.y0, (legend, panel)
    assert title.y0 >= panel.y1, (title, panel)
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_property_cells_finds_a_zero_padded_cell_anywhere_in_a_long_column():
    """The padded cells are searched in one pass over the column's text (a regular expression per cell took
    a third of reading a 100k-row table): a padded cell first, last, after spaces, signed; none of 0, 0.5,
    -0.5, 1e-3, +3 is one."""
    import numpy as np

    from embedscope.importers import property_cells

    base = [f"{k * 0.5}" for k in range(1000)]
    for padded in ("0001", "-01", " 07", "+00.5", "00"):
        for at in (0, 500, 999):
            cells = list(base)
            cells[at] = padded
            got = property_cells(np.array(cells, dtype=object), np.array([float(c) for c in cells]))
            assert got.dtype == object and got[at] == padded, (padded, at)
    plain = ["0", "0.5", "-0.5", "1e-3", "+3", " 7 ", "0e0", "-0", ".5"]
    got = property_cells(np.array(plain, dtype=object), np.array([float(c) for c in plain]))
    assert got.dtype.kind == "f" and got.tolist() == [float(c) for c in plain]


def test_no_correlation_table_no_legend_of_its_cells(tmp_path):
    from test_audit41_report import MEASURES, _grid, _page, _row, _study

    failed = _page(_study(tmp_path, [_row(0, status="error"), _row(1, loss="triplet", status="error")]))
    assert "No measure is correlated with" in failed
    assert "Below each value" not in failed
    one = _grid()
    for r in one:  # (a study of R@1 alone: --measures P@1)
        for m in MEASURES:
            if m != "R@1":
                r.pop(m)
    only = _page(_study(tmp_path, one, name="only"))
    assert "No measure is correlated with" in only and "Below each value" not in only
    table = _page(_study(tmp_path, _grid(), name="grid"))
    assert "Below each value: its bootstrap 95% interval" in table


def _parquet(path, prop):
    import numpy as np
    import pandas as pd

    pytest.importorskip("pyarrow")
    pd.DataFrame({"emb": [np.array([0.1, 0.2]), np.array([0.3, 0.1]), np.array([0.5, 0.2]), np.array([0.2, 0.9])],
                  "label": ["a", "a", "b", "b"], "path": ["p0", "p1", "p2", "p3"], "w": prop}).to_parquet(path)
    return str(path)


def _import_parquet(tmp_path, prop):
    src = _parquet(tmp_path / "t.parquet", prop)
    return run_cli(["import", src, "--embeddings", "emb", "--labels", "label", "--paths", "path", "--properties", "w",
                    "-o", str(tmp_path / "t.h5")])


@pytest.mark.parametrize("prop, says", [([[1, 2], [1], [2], [3]], "'w' holds list values (row 0)"),
                                        ([b"x", b"caf\xe9", b"y", b"z"], "'w', row 1: bytes that are not UTF-8")])
def test_import_refuses_a_parquet_property_of_lists_or_of_bytes_not_utf8(tmp_path, prop, says):
    rc, out, err = _import_parquet(tmp_path, prop)
    assert rc == 1
    line = one_error_line(err, "import")
    assert says in line and "Error" not in line, line
    assert not (tmp_path / "t.h5").exists()


def test_import_reads_a_parquet_property_of_utf8_bytes_as_text(tmp_path):
    from embedscope import store

    rc, out, err = _import_parquet(tmp_path, [b"caf\xc3\xa9", b"x", b"y", b"z"])
    assert rc == 0, err
    assert list(store.load(tmp_path / "t.h5").properties["w"]) == ["café", "x", "y", "z"]
