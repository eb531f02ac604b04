"""``embedscope report``: one self-contained HTML page of a study (figures embedded, no external requests).

Sections: a summary (and, above everything, the checkpoints that failed and the warnings that change
how the numbers read: too few points, test-set selection), settings and provenance (source, data
set, training settings, versions, host), the untrained reference, the correlation table with
bootstrap intervals and the granulated τ, robustness, the published values of docs/methods.md §6
beside ours, the figures, the runs table, the checkpoints with their sha256, and the measures.

Every string from the study's files is HTML-escaped, its control characters shown as ``\\xNN``
(:func:`embedscope.text.safe`); a number that is missing or undefined is ``–``, never ``nan`` or an
empty cell. Checked in headless Chromium at 1400 and 800 px (``scripts/screenshot_report.py``).
"""

from __future__ import annotations

import base64
import html
import math
import os
from pathlib import Path
from typing import Any, Mapping

from embedscope.errors import EmbedscopeError
from embedscope.text import interval

# docs/methods.md §6: Roth Fig. 5 (Pearson r over objectives, structure of the training set vs test R@1)
PUBLISHED_FIG5 = {
    "rho": {"CUB": -0.80, "CARS": -0.85, "SOP": -0.63},
    "pi_ratio": {"CUB": 0.79, "CARS": 0.65, "SOP": 0.22},
    "pi_intra": {"CUB": 0.25, "CARS": 0.39, "SOP": 0.36},
    "pi_inter": {"CUB": -0.16, "CARS": -0.08, "SOP": 0.17},
}
# docs/methods.md §6: Roth Fig. 4 (CUB), Pearson r between evaluation metrics across objectives
PUBLISHED_FIG4 = {("R@1", "NMI"): 0.86, ("R@1", "mAP@C"): 0.76, ("NMI", "F1"): 0.99}

DASH = "–"  # a number that is missing or not defined
NOT_MEASURED = "not measured"  # a measure of the published values that the study left out (--measures)

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1180px;
color:#1d1d1f;line-height:1.4;padding:0 16px}
h1{font-size:1.5em;margin-bottom:0.2em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:0.82em;margin:8px 0;font-variant-numeric:tabular-nums}
th,td{border:1px solid #d0d0d0;padding:3px 7px;text-align:right;white-space:nowrap;vertical-align:top;
background:#fff}
th{background:#f2f2f2;white-space:normal;vertical-align:bottom}td.l,th.l{text-align:left}th.c{text-align:center}
td.w{white-space:normal;overflow-wrap:anywhere;text-align:left;min-width:12em}
tr.bad td{background:#fff1f0}tr.excl td{color:#8a8a8a;background:#f7f7f7}
.scroll{overflow-x:auto;max-width:100%}.scroll th:first-child,.scroll td:first-child{position:sticky;left:0;z-index:1}
.nw{white-space:nowrap}.ci{display:block;color:#666;font-size:0.9em}.cin{color:#666}
.note{color:#555;font-size:0.9em}.warn{background:#fff8e1;border-left:4px solid #f0b400;padding:6px 10px}
.err{background:#fff1f0;border-left:4px solid #d93025;padding:6px 10px}
figure{margin:16px 0}img{max-width:100%;height:auto;border:1px solid #eee}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:0.95em}
code{background:#f4f4f4;padding:0 3px}
@page{size:landscape;margin:12mm}
@media print{body{max-width:none;margin:0;padding:0}.scroll{overflow:visible}table{font-size:0.62em}
th,td{padding:2px 4px}.scroll th:first-child,.scroll td:first-child{position:static}figure,tr{break-inside:avoid}}
"""


def _e(v: Any) -> str:
    """Text from a file, for HTML: control characters shown escaped (\\xNN), then HTML-escaped."""
    from embedscope.text import safe

    return html.escape(safe(v), quote=True)


def _float(v: Any) -> float | None:
    """``v`` as a finite float, else None (a missing, empty, 'nan', boolean or non-numeric value)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _count(v: Any) -> int | None:
    """``v`` as a whole number, else None."""
    f = _float(v)
    return int(f) if f is not None and f.is_integer() else None


def _num(v: Any, d: int = 3) -> str:
    """A number with ``d`` decimals (whole numbers as such); missing or not finite: –."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    f = _float(v)
    if f is None:
        return DASH
    if f.is_integer() and abs(f) < 1e6:
        return str(int(f))
    return f"{f:.{d}f}"


def _fixed(v: Any, d: int = 4) -> str:
    """A measured value with exactly ``d`` decimals (1.0 is 1.0000, not 1); missing: –."""
    f = _float(v)
    return DASH if f is None else f"{f:.{d}f}"


def _r(v: Any, d: int = 3) -> str:
    """A correlation: signed, ``d`` decimals (+1.000, not 1); undefined: –."""
    f = _float(v)
    return DASH if f is None else f"{f:+.{d}f}"


def _ci(r: dict[str, Any], key: str, d: int = 3, below: bool = True) -> str:
    """The correlation ``key`` of ``r`` with its bootstrap interval (when it has one), below it or beside it."""
    s = _r(r.get(key), d)
    lo, hi = _float(r.get(f"{key}_lo")), _float(r.get(f"{key}_hi"))
    if s != DASH and lo is not None and hi is not None:
        s += f' <span class="{"ci" if below else "cin"}">{interval(lo, hi)}</span>'
    return s


def _text(v: Any) -> str:
    """A text cell: empty, None or NaN read back from a CSV is –."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)) or str(v).strip() in ("", "nan", "NaN", "None"):
        return DASH
    return _e(v)


def _yes_no(v: Any) -> str:
    s = str(v).strip().lower()
    return {"true": "yes", "1": "yes", "1.0": "yes", "false": "no", "0": "no", "0.0": "no"}.get(s, DASH)


def _table(headers: list[str], rows: list[list[str]], left: int = 1, row_classes: list[str] | None = None,
           head: str | None = None, wrap: tuple[int, ...] = ()) -> str:
    """A table in a horizontally scrolling box (first column kept in view). ``headers`` are escaped;
    cells are HTML already. The first ``left`` columns are left-aligned; columns in ``wrap`` wrap
    (long text: paths, messages). ``head`` replaces the header row (several rows, spans)."""
    h = head or "<tr>" + "".join(f'<th class="l">{_e(x)}</th>' if i < left or i in wrap else f"<th>{_e(x)}</th>"
                                 for i, x in enumerate(headers)) + "</tr>"
    body = []
    for k, r in enumerate(rows):
        cls = f' class="{row_classes[k]}"' if row_classes and row_classes[k] else ""
        cells = "".join(f'<td class="w">{x}</td>' if i in wrap else f'<td class="l">{x}</td>' if i < left
                        else f"<td>{x}</td>" for i, x in enumerate(r))
        body.append(f"<tr{cls}>{cells}</tr>")
    return f'<div class="scroll"><table><thead>{h}</thead><tbody>{"".join(body)}</tbody></table></div>'


def png_size(data: bytes) -> tuple[int, int, float | None]:
    """(width, height, dots per inch or None) of a PNG file's bytes, read by Pillow (the pHYs chunk
    gives the dpi); anything but a PNG is a ValueError."""
    import io

    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.format != "PNG":
                raise ValueError(f"not a PNG file ({im.format})")
            dpi = im.info.get("dpi")
            return im.width, im.height, float(dpi[0]) if dpi and dpi[0] > 0 else None
    except UnidentifiedImageError:
        raise ValueError("not a PNG file") from None


# CSS pixels per inch of a figure: 125% of its printed size (CSS has 96 px to the inch), so that
# matplotlib's 10-point text is about as large as the page's text
FIGURE_PX_PER_INCH = 120


def _img(path: Path, alt: str, strict: bool = False) -> str:
    """A figure embedded as base64, shown at a size proportional to the size it was drawn for (its
    pixels over its dpi, at FIGURE_PX_PER_INCH), so that the text of every figure has the same size on
    the page, smaller only where the page is narrower than the figure. ``strict``: a file that is not
    a PNG is a ValueError (else embedded without a size)."""
    raw = path.read_bytes()
    try:
        w, h, dpi = png_size(raw)
        scale = FIGURE_PX_PER_INCH / dpi if dpi else 1.0
        size = f' width="{round(w * scale)}" height="{round(h * scale)}"'
    except ValueError:
        if strict:
            raise
        size = ""
    data = base64.b64encode(raw).decode("ascii")
    return (f'<figure><img alt="{_e(alt)}"{size} src="data:image/png;base64,{data}">'
            f'<figcaption class="note">{_e(alt)}</figcaption></figure>')


_AGAIN = "run the same 'embedscope study' command again to rewrite it"


def _read_study(d: Path) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, str]]]:
    """study.json, correlations.json and the rows of runs.csv of the study folder ``d``, checked:
    a file that cannot be read or is not what 'embedscope study' writes is one line naming it."""
    import csv

    from embedscope.study.run import check_study_meta, read_json

    meta_path, stats_path, runs_path = d / "study.json", d / "correlations.json", d / "runs.csv"
    try:
        meta = read_json(meta_path)
    except EmbedscopeError as e:
        raise EmbedscopeError(f"{e}: not a readable study folder") from None
    check_study_meta(meta, meta_path)
    try:
        stats = read_json(stats_path)
    except EmbedscopeError as e:
        raise EmbedscopeError(f"{e}; {_AGAIN}") from None
    bad = _stats_problem(stats)
    if bad:
        raise EmbedscopeError(f"{stats_path}: not the statistics of a study ({bad}); {_AGAIN}")
    try:
        with open(runs_path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            runs = list(reader)
            columns = reader.fieldnames or []
    except UnicodeDecodeError:
        raise EmbedscopeError(f"{runs_path}: not a CSV table (not UTF-8 text); {_AGAIN}") from None
    except csv.Error as e:
        raise EmbedscopeError(f"{runs_path}: not a CSV table ({e}); {_AGAIN}") from None
    except OSError as e:
        raise EmbedscopeError(f"{runs_path}: cannot be read ({e.strerror or 'unreadable'})") from None
    if "id" not in columns:
        raise EmbedscopeError(f"{runs_path}: not the runs table of a study (no 'id' column); {_AGAIN}")
    return meta, stats, runs


def _stats_problem(stats: Any) -> str:
    """What is wrong with a study's correlations.json ('' when it has what the report reads)."""
    if not isinstance(stats, dict):
        return "expected a JSON object"
    if not isinstance(stats.get("target"), str):
        return "no 'target'"
    n = stats.get("n_points")
    if not isinstance(n, dict) or any(k not in n for k in ("runs", "objectives", "rows", "errors", "excluded")):
        return "no 'n_points' with runs, objectives, rows, errors and excluded"
    corr = stats.get("correlations")
    if not isinstance(corr, list) or not all(isinstance(r, dict) and isinstance(r.get("measure"), str)
                                             and isinstance(r.get("level"), str) for r in corr):
        return "no 'correlations' list of measures and levels"
    for k in ("untrained", "normalisation", "robustness", "metric_matrix"):
        if not isinstance(stats.get(k, {}), dict):
            return f"'{k}' is not an object"
    for k in ("exclude_unmatched", "undefined"):  # (read as 'or {}', as the terminal's notes read them)
        if not isinstance(stats.get(k) or {}, dict):
            return f"'{k}' is not an object"
    if not all(isinstance(x, dict) for x in stats.get("robustness", {}).values()):
        return "'robustness' holds other than objects"
    for k in ("ranking", "exclude", "axes", "identical_to_target", "measures", "datasets", "objectives"):
        if not isinstance(stats.get(k) or [], list):
            return f"'{k}' is not a list"
    if not all(isinstance(r, dict) and isinstance(r.get("measure"), str) for r in stats.get("ranking") or []):
        return "'ranking' is not a list of measures"
    return ""


def _plural(n: Any, one: str, many: str | None = None) -> str:
    """``n`` with ``one`` or ``many`` (``one`` + s) after it: '1 run', '3 runs' (a count read back as 1.0 is one)."""
    return f"{_e(n)} {one if _count(n) == 1 else (many or one + 's')}"


def _cell(r: dict[str, Any], col: str) -> str:
    """The value of ``col`` in the row ``r`` as :func:`_distinct` lists it ('' when it has none): a whole
    number written as a float (``16.0``) as the integer; a text of digits as written (a tag "007" is not
    the number 7, and the runs table shows it "007")."""
    v = str(r.get(col, "")).strip()
    f = _float(v)
    if f is not None and f.is_integer() and abs(f) < 1e15 and not v.lstrip("+-").isdigit():
        v = str(int(f))
    return "" if v in ("nan", "NaN", "None") else v


def _setting(col: str, v: str) -> str:
    """A value of a training setting ``col`` as the settings show it: a boolean (runs.csv writes Python's
    ``True`` / ``False``) yes / no, as the runs table says it (``L2-normalised``); a tag of the user's as written."""
    if not col.startswith("tag:") and v in ("True", "False"):
        return "yes" if v == "True" else "no"
    return v


def _distinct(runs: list[dict[str, str]], col: str) -> list[str]:
    """The distinct non-empty values of ``col`` in ``runs``, sorted (numbers by value; a whole number
    as such: a CSV column with an empty cell reads back 16 as 16.0)."""
    vals = {v for v in (_cell(r, col) for r in runs) if v}

    def key(v: str):
        f = _float(v)
        return (0, f, "") if f is not None else (1, 0.0, v)

    return sorted(vals, key=key)


def _degenerate_share(n: int) -> float:
    """The probability that a bootstrap resample of ``n`` points (drawn with replacement) holds at most
    two distinct points: (C(n, 2) (2^n − 2) + n) / n^n; 78% at n = 3, 34% at 4, 9.8% at 5."""
    return (math.comb(n, 2) * (2 ** n - 2) + n) / n ** n


def _is_true(v: Any) -> bool:
    return str(v).strip().lower() in ("true", "1", "1.0")


def _names(stats: dict[str, Any], more: Any = ()) -> dict[str, str]:
    """Each measure name of the statistics (and ``more``) as the page shows it: one longer than
    :data:`~embedscope.text.SHOWN_NAME` (``NR-Prec:<property>``: a property name may have 255 characters, the
    table was as wide) shortened in the middle, two never shown alike; the study's files keep them whole."""
    from embedscope.analyses.result import _short_unique
    from embedscope.text import SHOWN_NAME

    corr = stats.get("correlations") if isinstance(stats.get("correlations"), list) else []
    rob = stats.get("robustness") if isinstance(stats.get("robustness"), dict) else {}
    same = stats.get("identical_to_target") if isinstance(stats.get("identical_to_target"), list) else []
    names = list(dict.fromkeys(str(m) for m in (stats.get("target"), *(r.get("measure") for r in corr
                                                                          if isinstance(r, dict)),
                                                *rob, *same, *more)))
    return dict(zip(names, _short_unique(names, SHOWN_NAME)))


def _m(m: Any, names: Mapping[str, str]) -> str:
    """A measure name for the page (HTML): shortened as :func:`_names` shows it, the whole name its tooltip."""
    from embedscope.analyses.result import _short
    from embedscope.text import SHOWN_NAME

    shown = names.get(str(m)) or _short(str(m), SHOWN_NAME)
    return _e(shown) if shown == str(m) else f'<span title="{_e(m)}">{_e(shown)}</span>'


def _target(stats: dict[str, Any]) -> str:
    """The target with its split, as the page names it: ``test R@1``, ``train rho`` (statistics of an
    earlier version do not say the split: the registry's, else test); a long target name shortened (:func:`_names`)."""
    target = str(stats["target"])
    split = stats.get("target_split")
    if not isinstance(split, str) or not split:
        from embedscope.study.measures import measure_splits

        split = measure_splits([target]).get(target, "test")
    return f"{split} {_names(stats).get(target, target)}"


def _header(d: Path, meta: dict[str, Any], stats: dict[str, Any], runs: list[dict[str, str]]) -> list[str]:
    """Title, summary line, and the boxes that change how everything below reads."""
    from embedscope.study.stats import is_constant_target_note

    s = meta.get("settings", {})
    target = stats["target"]
    np_ = stats["n_points"]
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>embedscope study: {_e(Path(str(s.get('source', d))).name)}</title>",
             f"<style>{CSS}</style></head><body>",
             f"<h1>Study: which measure of the training embeddings tracks {_e(_target(stats))}?</h1>"]
    exclude = [str(x) for x in stats.get("exclude") or []]
    n_excl = _count(np_["excluded"])
    excl = (f"{_e(np_['excluded'])} excluded by {_e(', '.join(exclude) or '--exclude')}"
            if exclude or n_excl != 0 else "none excluded")
    parts.append(f'<p class="note">{_plural(np_["runs"], "run")} in {_plural(np_["objectives"], "objective")} '
                 f'({_plural(np_["rows"], "checkpoint")}: {_e(_measured(np_))} measured, {_e(np_["errors"])} failed, '
                 f'{excl}). '
                 "Protocol: docs/methods.md §6 (Roth et al. 2020, Fig. 4, Fig. 5).</p>")
    if meta.get("started") and not meta.get("ended"):  # (study.json is written at the start, 'ended' last)
        parts.append(f'<p class="warn">The last run of \'embedscope study\' in this folder did not finish (started '
                     f"{_e(meta['started'])}, no end recorded): the tables below may be an earlier run's, and the "
                     "settings above them this one's. Run the same 'embedscope study' command again to finish "
                     "it (finished rows are not measured again).</p>")
    failed = [r for r in runs if r.get("status", "ok") != "ok"]
    if failed:
        parts.append(f'<div class="err"><p><b>{_plural(len(failed), "checkpoint")} of {len(runs)} failed</b> and '
                     f"{'enters' if len(failed) == 1 else 'enter'} no statistic; the next run of the same "
                     f"'embedscope study' command tries {'it' if len(failed) == 1 else 'them'} again.</p>")
        parts.append(_table(["id", "checkpoint", "error"],
                            [[_text(r.get("id")), _text(r.get("checkpoint")), _text(r.get("error"))] for r in failed],
                            left=1, wrap=(1, 2)))
        parts.append("</div>")
    points = [(n, what) for n, what in ((_count(np_["objectives"]), "objectives"), (_count(np_["runs"]), "runs"))
              if n is not None]
    few = [(n, what) for n, what in points if n < 3]
    if _count(np_["runs"]) == 0:  # nothing to correlate: say why, not "a correlation over two points is ±1"
        n_ex = _count(np_["excluded"]) or 0
        why = (f"--exclude {_e(', '.join(exclude))} left out all {n_ex} selected runs (grey in the runs table)"
               if n_ex else "no checkpoint was measured (see the failures above)" if failed else "the study has no run")
        # (the advice of --exclude only where --exclude left the runs out: not for checkpoints that failed)
        todo = ("run the same 'embedscope study' command with another --exclude (finished rows are not measured "
                "again)" if n_ex else "the next run of the same 'embedscope study' command tries the failed "
                "checkpoints again" if failed else "give the study checkpoints to measure")
        parts.append(f'<p class="err"><b>No run enters the statistics</b>: {why}. No correlation is defined '
                     f"({DASH}); {todo}.</p>")
        few = []
    const = sorted({str(r.get("note")) for r in stats["correlations"]
                    if r.get("level") == "runs" and is_constant_target_note(r.get("note"), target)})
    if const:  # a constant target: no measure has a correlation with it, whatever the table looks like
        parts.append(f'<p class="warn">{_e(_target(stats)[:1].upper() + _target(stats)[1:])} is the same in every run '
                     f"({_e(const[0].rsplit('(', 1)[-1].rstrip(')'))}): no measure has a correlation with it "
                     f"({DASH} throughout). The runs do not differ in what the study asks about.</p>")
    if few:
        said = " and ".join(f"{n} {what if n != 1 else what[:-1]}" for n, what in few)
        parts.append(f'<p class="warn">Only {_e(said)}: a correlation over two points is ±1 whatever the values, '
                     "without an interval or p-value, and over fewer it is not defined (–). These correlations "
                     "say nothing about the claim; a study needs at least 3 points, and many more for intervals "
                     "that exclude 0.</p>")
    for n, what in ((n, what) for n, what in points if 3 <= n < 5):
        parts.append(f'<p class="warn">Only {n} {what}: {_degenerate_share(n):.0%} of the bootstrap resamples of '
                     f"{n} points hold at most two distinct points (r = ±1, or not defined), so the 95% intervals "
                     f"over {what} are not meaningful; read the correlations over {what} as a sketch.</p>")
    if any(r.get("selection") == "best" for r in runs):
        parts.append('<p class="warn">The <b>best</b> epoch of each run is the epoch of best <i>test</i> R@1 '
                     "(Roth's protocol): it selects on the test set, so the test values are optimistic. The final "
                     "epoch is measured beside it (robustness table).</p>")
    return parts


_SELECTION = {"best": "at the best epoch", "final": "final", "given": "taken as given (no training folder)",
              "epoch": "kept epochs", "untrained": "untrained"}


def _devices(asked: Any, ok: list[dict[str, str]]) -> str:
    """The study's ``--device`` and, from runs.csv's ``embed_device``, the devices its rows were embedded
    on with their counts (``auto; embedded on cpu (12 rows)``; rows of older versions have none)."""
    counts: dict[str, int] = {}
    for r in ok:
        d = _cell(r, "embed_device")
        if d:
            counts[d] = counts.get(d, 0) + 1
    if not counts:
        return str(asked)
    on = ", ".join(f"{d} ({n} row{'' if n == 1 else 's'})" for d, n in sorted(counts.items()))
    return f"{asked}; embedded on {on}"


def _provenance(meta: dict[str, Any], stats: dict[str, Any], runs: list[dict[str, str]]) -> list[str]:
    from embedscope import __version__
    from embedscope.study.plan import CONFIG_COLUMNS

    s = meta.get("settings", {})
    v = meta.get("versions", {})
    ok = [r for r in runs if r.get("status", "ok") == "ok"]
    trained = [r for r in ok if r.get("selection") != "untrained"]
    # the settings of the runs that enter the statistics (as the axes are): the runs left out by --exclude
    # made p_switch a setting 'that goes with the objective' of a study that kept p_switch 0 only
    used = [r for r in trained if not _is_true(r.get("excluded"))] or trained
    sel = {}
    for r in runs:
        sel[r.get("selection", "")] = sel.get(r.get("selection", ""), 0) + 1
    datasets = _distinct(runs, "dataset")
    data = ", ".join(datasets) or str(s.get("dataset") or "")
    sizes = [(_distinct(ok, "N_train"), "training"), (_distinct(ok, "N_test"), "test")]
    if all(len(x) == 1 for x, _ in sizes):
        data += " (" + ", ".join(f"{x[0]} {what} images" for x, what in sizes) + ")"
    if s.get("root"):
        data += f", root {s['root']}"
    axes = [str(a) for a in stats.get("axes") or []]
    have = set(trained[0]) if trained else set()

    def values(a: str) -> str:
        """The values of the axis ``a`` over the runs; a run without one (multisimilarity has no miner) is
        None, as in the objectives' names ('multisimilarity miner=None'), not left out."""
        col = a if a in have else "tag:" + a
        vals = [_setting(col, v) for v in _distinct(used, col)] + (["None"] if any(not _cell(r, col) for r in used)
                                                                   else [])
        return ", ".join(vals)

    varying = "; ".join(f"{a}: {values(a)}" for a in axes) or "none"
    fixed, follow = [], []
    for c in [c for c in CONFIG_COLUMNS if c not in ("dataset", "seed", "loss_family")] + \
             sorted(k for k in have if k.startswith("tag:")):
        if c in axes or c.removeprefix("tag:") in axes:
            continue
        vals = _distinct(used, c)
        if len(vals) == 1 and all(_cell(r, c) for r in used):
            fixed.append(f"{c} {_setting(c, vals[0])}")
        elif vals:  # it differs between runs (a value in some, none in others: multisimilarity has no miner),
            # fixed by the axes (the miner and the distance by the loss): which value goes with which objective
            by_val: dict[str, set[str]] = {}
            for r in used:
                by_val.setdefault(_setting(c, _cell(r, c)) or DASH, set()).add(str(r.get("objective") or "").strip() or DASH)
            follow.append(f"{c}: " + ", ".join(f"{v} ({', '.join(sorted(o))})" for v, o in sorted(
                by_val.items(), key=lambda kv: (kv[0] == DASH, kv[0]))))
    measures = s.get("measures")
    rows = [("source", s.get("source", "")),
            ("epoch selection", f"{s.get('epoch', '')} (checkpoints: "
             + ", ".join(f"{n} {_SELECTION.get(k, k or '?')}" for k, n in sel.items()) + ")"),
            ("data set", data), ("target", _target(stats)), ("retrieval metric", s.get("metric", "")),
            ("hyper-parameter axes that vary", varying), ("seeds", ", ".join(_distinct(used, "seed")) or DASH),
            ("training settings, the same in every run", ", ".join(fixed) or DASH),
            *([("training settings that go with the objective (fixed by the axes; –: none)", "; ".join(follow))]
              if follow else []),
            ("left out (--exclude)", ", ".join(map(str, stats.get("exclude") or [])) or "nothing"),
            ("measures", "every measure of the registry" if not measures else
             ", ".join(map(str, measures)) if isinstance(measures, list) else measures),
            ("measures from", meta.get("measures_source", "")),
            ("seed (k-means, bootstrap)", s.get("seed", "")), ("bootstrap resamples", stats.get("n_boot", "")),
            ("device", _devices(s.get("device", ""), ok)), ("embedding cache", meta.get("cache_dir", "")),
            ("versions", ", ".join(f"{k} {x}" for k, x in v.items()) if isinstance(v, dict) else v),
            ("statistics code (fingerprint)", meta.get("stats_code", "")),
            ("embedscope code (fingerprint)", meta.get("code", "")), ("host", meta.get("host", "")),
            # '(not finished)' as the warning at the top: a start recorded, no end (a study.json that records
            # neither, an older study's, was '– / – (not finished)' under no warning)
            ("started / ended", f"{meta.get('started') or DASH} / {meta.get('ended') or DASH}"
                                f"{' (not finished)' if meta.get('started') and not meta.get('ended') else ''}"),
            ("this page written by", f"embedscope {__version__}"),
            ("checkpoint hashes", "sha256 of every file: the table Checkpoints, below")]
    out = ["<h2>Settings and provenance</h2>",
           _table(["setting", "value"], [[_e(k), _text(x)] for k, x in rows], left=1, wrap=(1,))]
    return out


def _measured(np_: Mapping[str, Any]) -> Any:
    """The checkpoints measured: those of the rows less those that failed (– where either is not a count)."""
    rows, errors = _count(np_.get("rows")), _count(np_.get("errors"))
    return rows - errors if rows is not None and errors is not None and rows >= errors else DASH


def _untrained(stats: dict[str, Any], runs: list[dict[str, str]]) -> list[str]:
    target = stats["target"]
    u = stats.get("untrained", {})
    nb = [str(x) for x in u.get("selected_no_better") or []] if isinstance(u.get("selected_no_better"), list) else []
    out = _count(u.get("excluded_compared")) or 0
    said = [f"Selected checkpoints no better than their untrained network on {_e(_target(stats))}: "
            f"<b>{len(nb)} of {_e(u.get('selected_compared', 0))}</b>"
            + (f", of which {_e(u.get('excluded_no_better', 0))} of the {_e(out)} left out by the exclusions"
               if out else "")]
    if _count(u.get("selected_compared")) == 0 and not out and not nb:  # ('0 of 0': nothing was compared)
        said = ["No selected checkpoint has an untrained network measured to compare with (a study without "
                "untrained references, or theirs failed)"]
    if u.get("direction") == "none":  # (the registry gives the target no direction: nothing is compared)
        said = [f"Not compared: neither a higher nor a lower {_e(target)} is better"]
    if _count(u.get("final_compared")) != 0:
        said.append(f"final checkpoints: <b>{_e(u.get('final_no_better', 0))} of {_e(u.get('final_compared', 0))}</b>")
    if any(r.get("selection") == "best" for r in runs):
        said.append(f"best epoch = epoch 1 in {_plural(u.get('best_epoch_1', 0), 'run')}")
    parts = ["<h2>Against the untrained network</h2>",
             "<p>" + "; ".join(said) + ". "
             + ("A study of models that do not beat their initialisation does not test the claim." if nb else "")
             + "</p>"]
    if nb:
        parts.append(f'<p class="note">No better than untrained: {_e(", ".join(nb))}</p>')
    norm = stats.get("normalisation", {})
    if norm:
        parts.append('<p class="note">Output normalisation of the runs: '
                     + _e(", ".join(f"{'L2-normalised' if _is_true(k) else 'raw'}: {n}" for k, n in norm.items()))
                     + " (ρ is taken on the outputs as they are; R@1 ranks by cosine).</p>")
    return parts


def _correlations(stats: dict[str, Any], by: dict[str, dict[str, Any]]) -> list[str]:
    np_ = stats["n_points"]
    rank = {r["measure"]: i + 1 for i, r in enumerate(stats.get("ranking") or [])}
    rows = []
    # a measure undefined for some points (ρ of a collapsed model) is correlated over fewer: its own n
    fewer = any(_count(by[m].get(lv, {}).get("n")) not in (None, _count(np_[lv]))
                for m in by for lv in ("objectives", "runs") if lv in by[m])
    names = _names(stats)
    for m in sorted(by, key=lambda m: rank.get(m, 999)):
        o, r = by[m].get("objectives", {}), by[m].get("runs", {})
        cells = [_m(m, names), _text(o.get("split") or r.get("split")), str(rank.get(m, DASH))]
        if fewer:
            cells.append(f"{_num(o.get('n'))} / {_num(r.get('n'))}")
        rows.append(cells + [_ci(o, "pearson"), _ci(o, "spearman"), _ci(o, "kendall"),
                             _ci(r, "pearson"), _ci(r, "spearman"), _ci(r, "kendall"), _r(r.get("granulated_tau"))])
    head = ('<tr><th class="l" rowspan="2">measure</th><th class="l" rowspan="2">split</th>'
            '<th rowspan="2">rank by <span class="nw">|τ|</span></th>'
            + ('<th rowspan="2">points (objectives / runs)</th>' if fewer else "") +
            f'<th class="c" colspan="3">over objectives (n = {_e(np_["objectives"])})</th>'
            f'<th class="c" colspan="3">over runs (n = {_e(np_["runs"])})</th><th rowspan="2">granulated τ</th></tr>'
            "<tr>" + "<th>Pearson r</th><th>Spearman</th><th>Kendall τ</th>" * 2 + "</tr>")
    parts = [f"<h2>Correlations with {_e(_target(stats))}</h2>"]
    if rows:
        parts.append(_table([], rows, left=2, head=head))
    elif _count(np_["runs"]) == 0:  # (said at the top: no run, so no measure)
        parts.append(f'<p class="note">No measure is correlated with {_e(_target(stats))}: no run enters the '
                     "statistics (above).</p>")
    else:  # (--measures P@1: a table of headers alone)
        same = [str(x) for x in stats.get("identical_to_target") or []]
        parts.append(f'<p class="warn">No measure is correlated with {_e(_target(stats))}: '
                     + (f"the study's other measures ({', '.join(_m(x, names) for x in same)}) equal the target in "
                        "every run"
                        if same else "the study measured no other measure (--measures)")
                     + ". Run 'embedscope study' with other --measures (into another folder, or with --force).</p>")
    from embedscope.study.stats import study_notes

    notes = study_notes(stats)
    if notes:
        parts.append('<div class="warn"><p><b>Why numbers are missing or say nothing:</b></p><ul>'
                     + "".join(f"<li>{_e(x)}</li>" for x in notes) + "</ul></div>")
    if stats.get("identical_to_target"):
        parts.append(f'<p class="note">Left out, equal to the target in every run: '
                     f'{", ".join(_m(x, names) for x in stats["identical_to_target"])}.</p>')
    if rows:  # (the table's legend: under a sentence saying there is no table, it explained cells not there)
        parts.append('<p class="note">Below each value: its bootstrap 95% interval [lo, hi] (resampling the points, '
                     f"seeded; none with 2 points). {DASH}: not defined (a measure or target constant over the points, "
                     "or fewer than 2 points). Granulated τ: Jiang et al., ICLR 2020, the mean over the varying axes "
                     "of the mean τ within groups of runs that differ in that axis only. Rank: by |Kendall τ| over runs "
                     "(measures without one are last).</p>")
    return parts


# the robustness columns: key, header, when it is not computed
_ROBUST = [("loo_min", "leave-one-objective-out r: min", "leave-one-objective-out needs at least 4 objectives"),
           ("loo_max", "max", None),
           ("loo_most_influential", "most influential objective", None),
           ("final_epoch_pearson", "r at the final epoch",
            "r at the final epoch needs '--epoch best' runs (the final checkpoint beside the best) over at least "
            "3 objectives"),
           ("normalised_only_pearson", "r, L2-normalised outputs only",
            "r over normalised outputs only is computed when some runs are not L2-normalised (otherwise it is r), "
            "over at least 3 normalised objectives"),
           ("seed_spread_ratio", "seed sd / between-objective sd",
            "the seed spread needs objectives with 2 or more seeds")]


def _robustness(stats: dict[str, Any], by: dict[str, dict[str, Any]]) -> list[str]:
    rob = stats.get("robustness", {})
    order = [x for x in ("rho", "pi_ratio", "pi_intra", "pi_inter") if x in rob] + \
            [x for x in rob if x not in ("rho", "pi_ratio", "pi_intra", "pi_inter")]
    keys = [k for k, _, _ in _ROBUST]
    present = {k for x in rob.values() for k in keys if k in x and (_float(x[k]) is not None or
                                                                      (k == "loo_most_influential" and x[k]))}
    if "loo_min" not in present:
        present -= {"loo_max", "loo_most_influential"}
    cols = [(k, h) for k, h, _ in _ROBUST if k in present]
    rows = []
    names = _names(stats)
    for m in order:
        x = rob[m]
        cells = [_m(m, names), _r(by.get(m, {}).get("objectives", {}).get("pearson"))]
        for k, _ in cols:
            cells.append(_text(x.get(k)) if k == "loo_most_influential" else _r(x.get(k)) if k != "seed_spread_ratio"
                         else _num(x.get(k), 3))
        rows.append(cells)
    most = [i + 2 for i, (k, _) in enumerate(cols) if k == "loo_most_influential"]
    missing = [why for k, _, why in _ROBUST if why and k not in present]
    parts = ["<h2>Robustness</h2>"]
    if not rob and not stats["correlations"]:  # (not 'needs at least 4 objectives' of a study of 6)
        parts.append("<p>No robustness check: no measure is correlated with the target (above).</p>")
        return parts
    if not cols:
        parts.append("<p>No robustness check applies to this study: " + _e("; ".join(missing)) + ".</p>")
        return parts
    parts.append(_table(["measure", "r over objectives"] + [h for _, h in cols], rows, left=1, wrap=tuple(most)))
    if missing:
        parts.append('<p class="note">Not in this study: ' + _e("; ".join(missing)) + ".</p>")
    parts.append(f'<p class="note">{DASH}: not defined for that measure (a constant, or too few points).</p>')
    return parts


def _published(stats: dict[str, Any], by: dict[str, dict[str, Any]]) -> list[str]:
    target = stats["target"]
    # a measure the study left out (--measures) is 'not measured'; of a study whose runs all failed or were
    # excluded, every measure is only not defined (–)
    unmeasured = NOT_MEASURED if _count((stats.get("n_points") or {}).get("runs")) != 0 else DASH
    parts = ["<h2>Published values (docs/methods.md §6) beside ours</h2>"]
    prow = []
    for m, pub in PUBLISHED_FIG5.items():
        o = by.get(m, {}).get("objectives", {})
        prow.append([_e(m), f"{pub['CUB']:+.2f}", f"{pub['CARS']:+.2f}", f"{pub['SOP']:+.2f}",
                     _ci(o, "pearson", below=False) if m in by else unmeasured])
    parts.append(_table(["measure vs test R@1 (Fig. 5)", "CUB200", "CARS196", "SOP",
                         f"this study: r vs {_target(stats)} over objectives [95%]"], prow, left=1))
    if target != "R@1":
        parts.append(f'<p class="warn">The published values are correlations with test R@1; this study\'s target '
                     f"is {_e(_target(stats))}, so the columns do not compare like with like.</p>")
    n_reg = stats.get("n_points", {}).get("regularised_objectives", 0)
    if n_reg:
        parts.append(f'<p class="warn">This study keeps {_plural(n_reg, "ρ-regularised objective")} (p_switch &gt; 0), '
                     "which Roth's Fig. 5 leaves out: run the study with <code>--exclude 'p_switch&gt;0'</code> to "
                     "compare like with like.</p>")
    names = stats.get("metric_matrix", {}).get("names", [])
    mat = stats.get("metric_matrix", {}).get("pearson", [])
    frow = []
    for (a, b), val in PUBLISHED_FIG4.items():
        try:
            ours = mat[names.index(a)][names.index(b)] if a in names and b in names else None
        except (LookupError, TypeError, AttributeError):  # a matrix that is not names × names
            ours = None
        frow.append([_e(f"{a} – {b}"), f"{val:+.2f}",
                     _r(ours, 2) if isinstance(names, list) and a in names and b in names else unmeasured])
    parts.append(_table(["metric pair (Fig. 4, CUB)", "Roth", "this study"], frow, left=1))
    parts.append('<p class="note">Roth et al.: one point per objective (mean over 5 seeds), ResNet-50 at D = 128, '
                 "regularised runs excluded; paper text: ρ correlation ≤ −0.63 on all three data sets. "
                 f"Ours: Pearson r over this study's objectives, {DASH} where it is not defined (fewer than 3 "
                 "objectives for the metric matrix, or a constant)"
                 + (f"; {NOT_MEASURED}: a measure the study did not measure (--measures)"
                    if any(NOT_MEASURED in r for r in prow + frow) else "") + ".</p>")
    return parts


def no_figures_reason(n: Any) -> str | None:
    """Why a study's statistics call for no figure, from their ``n_points`` (None: they would have
    figures): fewer than 2 objectives (points), after --exclude when it left runs out, in the study
    itself when nothing was excluded (``embedscope study`` said "after --exclude" in both cases)."""
    if not isinstance(n, Mapping):
        return None
    k, excluded = _count(n.get("objectives")), _count(n.get("excluded"))
    if k is None or k >= 2:
        return None
    have = f"{k} objective{'' if k == 1 else 's'}"
    if excluded:
        return (f"they need at least 2 objectives (points); {have} left after --exclude "
                f"({excluded} run{'' if excluded == 1 else 's'} excluded)")
    return f"they need at least 2 objectives (points); the study has {have}"


def _figures(d: Path, stats: dict[str, Any]) -> list[str]:
    fig_dir = d / "figures"
    # (the target as the page names it: 'train rho' is no test target)
    caps = {"fig5_structure_vs_target": f"Fig. 5 layout: training-set structure vs {_target(stats)}, one point per "
                                        "objective",
            "fig4_metric_correlations": "Fig. 4 layout: correlation between test metrics across objectives",
            "ranking_by_tau": "Measures ranked by |Kendall τ| over runs"}
    drawn = stats.get("figures")  # the figures drawn with these statistics (figures/ may hold an earlier run's)
    if not isinstance(drawn, list):  # a study of an earlier version: the files on disk
        drawn = list(caps)
    out, missing = [], []
    for k, c in caps.items():
        if k not in drawn:
            continue
        p = fig_dir / f"{k}.png"
        try:
            out.append(_img(p, c, strict=True))
        except (OSError, ValueError) as e:  # deleted, a folder, unreadable or not a PNG since the study
            why = ("missing" if not p.exists() and not p.is_symlink() else "a folder, not a file" if p.is_dir() else
                   e.strerror if isinstance(e, OSError) and e.strerror else str(e) or "cannot be read")
            missing.append(f"figures/{k}.png ({c.split(':')[0]}): {why}")
    stale = []
    if isinstance(stats.get("figures"), list):  # (a study of an earlier version: the files on disk are its own)
        from embedscope.study.run import stale_figures

        stale = stale_figures(fig_dir, drawn)
    # figures of an earlier run of the study (--no-figures now, or fewer objectives): named, not shown
    old = ([f'<p class="note">Not shown: figures/ also holds {_e(", ".join(stale))} of an earlier run of this '
            "study, not drawn from these statistics.</p>"] if stale else [])
    if not out and not missing:
        why = no_figures_reason(stats.get("n_points")) if isinstance(stats.get("figures"), list) else None
        if why is None and isinstance(stats.get("figures"), list) and stats.get("correlations") == []:
            why = "no measure is correlated with the target (above)"
        if not why and not old:
            return []
        return ["<h2>Figures</h2>"] + ([f'<p class="note">No figures: {_e(why)}.</p>'] if why else []) + old
    parts = ["<h2>Figures</h2>"]
    if missing:
        parts.append('<p class="warn">Not shown, drawn by the study but not readable now: '
                     + _e("; ".join(missing)) + ". Run the same 'embedscope study' command again to draw "
                     "the figures again (nothing is measured again).</p>")
    return parts + out + ['<p class="note">The same figures as PNG and PDF: <code>figures/</code> in the study '
                          "folder.</p>"] + old


_INTS = ("epoch", "seed")


def _runs(stats: dict[str, Any], runs: list[dict[str, str]]) -> list[str]:
    target = stats["target"]
    have = set(runs[0]) if runs else set()
    any_failed = any(r.get("status", "ok") != "ok" for r in runs)
    any_excl = any(_is_true(r.get("excluded")) for r in runs)
    cols = [("id", "id")]
    # the names the user gave (a YAML 'name', a file's): the id is that name made safe for a file name
    # ('ms ✓ bell' is ms_bell_given, 'm<script>…' m_script_…): shown beside it where the id does not start with it
    if any(not _cell(r, "id").startswith(_cell(r, "run")) for r in runs if _cell(r, "run")):
        cols.append(("run", "run (as named)"))
    if any_failed:
        cols.append(("status", "status"))
    if any_excl:
        cols.append(("excluded", "excluded"))
    # the user's own tags that differ between runs (a YAML study's p_switch, note, ...): a column each; also a
    # tag that only some runs have, which tells objectives apart as well (an axis: its value or none)
    axes = {str(a) for a in stats.get("axes") or []}
    tags = [k for k in sorted(have) if k.startswith("tag:") and k != "tag:objective"
            and (len(_distinct(runs, k)) > 1 or k in axes)]
    cols += [("objective", "objective"), *((k, k.removeprefix("tag:")) for k in tags),
             ("selection", "selection"), ("epoch", "epoch"), ("seed", "seed"),
             ("normalize", "L2-normalised"), (target, _target(stats).split(" ", 1)[1] + " ("
                                                 + _target(stats).split(" ", 1)[0] + ")"),
             ("untrained_target", f"untrained {_target(stats).split(' ', 1)[1]}"),
             ("beats_untrained", "beats untrained")]
    cols += [(m, f"{m} ({'test' if m == 'MAP@R' else 'train'})")
             for m in ("rho", "pi_ratio", "pi_intra", "pi_inter", "MAP@R") if m != target]
    if any(str(r.get("undefined") or "").strip() for r in runs):  # why a measure of the row is –
        cols.append(("undefined", "undefined measures (why: the notes under the correlations)"))
    if any(str(r.get("warnings") or "").strip() for r in runs):  # what loading the checkpoint warned of (upcast
        cols.append(("warnings", "loading warned"))  # half-precision weights, a head left out): runs.csv's warnings
    cols = [(c, h) for c, h in cols if c in have]
    rws, rc = [], []
    for r in runs:
        cells = []
        for c, _ in cols:
            val = r.get(c, "")
            if c in ("normalize", "beats_untrained", "excluded"):
                cells.append(_yes_no(val))
            elif c in _INTS:
                n = _count(val)
                cells.append(DASH if n is None else str(n))
            elif c in ("id", "run", "objective", "selection", "status", "undefined", "warnings") or c in tags:
                cells.append(_text(val))
            else:
                cells.append(_fixed(val, 4))
        sha = str(r.get("sha256", ""))
        cells.append(f'<span class="mono" title="{_e(sha)}">{_e(sha[:12])}</span>' if sha else DASH)
        rws.append(cells)
        # red: failed, or (in the statistics) no better than untrained; grey: left out by --exclude
        failed, excl = r.get("status", "ok") != "ok", _is_true(r.get("excluded"))
        worse = str(r.get("beats_untrained")).strip().lower() == "false"
        rc.append("bad" if failed or (worse and not excl) else "excl" if excl else "")
    left = next((i for i, (c, _) in enumerate(cols)
                 if c not in ("id", "run", "status", "excluded", "objective", "selection") and c not in tags), len(cols))
    wrap = tuple(i for i, (c, _) in enumerate(cols) if c in ("undefined", "warnings"))
    parts = ["<h2>Runs</h2>", _table([h for _, h in cols] + ["sha256 (first 12)"], rws, left=left, row_classes=rc,
                                     wrap=wrap)]
    legend = "Red rows: failed, or no better than the untrained network."
    if any_excl:
        legend += " Grey rows: left out of the statistics by --exclude (whether or not they beat it)."
    undef = (", nor a measure the run leaves undefined, named in the last column, the reasons under the "
             "correlations") if any(c == "undefined" for c, _ in cols) else ""
    parts.append(f'<p class="note">{legend} {DASH}: no value (the untrained rows are the reference; a failed row '
                 f"has none{undef}). Every column: <code>runs.csv</code> / <code>runs.parquet</code> in the study "
                 "folder.</p>")
    return parts


def _checkpoints(runs: list[dict[str, str]]) -> list[str]:
    rows = [[_text(r.get("id")), _text(r.get("checkpoint")).replace("/", "/<wbr>"),
             f'<span class="mono">{_text(r.get("sha256"))}</span>'] for r in runs]
    return ["<h2>Checkpoints</h2>",
            '<p class="note">The file each row measured and the sha256 of its bytes (the embedding cache is keyed '
            "by it).</p>",
            _table(["id", "checkpoint", "sha256"], rows, left=3, wrap=(1,))]


def _glossary(meta: dict[str, Any], stats: dict[str, Any]) -> list[str]:
    from embedscope.viz.study import PRETTY

    ms = meta.get("measures")
    if not isinstance(ms, dict) or not ms:
        return []
    shown = set(map(str, stats.get("measures") or [])) | {stats["target"]}
    better = {"higher": "higher", "lower": "lower", "none": "not established"}
    rows = []
    names = _names(stats, ms)
    for name, info in ms.items():
        if name not in shown or not isinstance(info, dict):
            continue
        rows.append([_m(name, names), _m(PRETTY[name], {}) if name in PRETTY else _m(name, names), _text(info.get("split")),
                     _text(better.get(str(info.get("direction")), info.get("direction"))), _text(info.get("meaning"))])
    if not rows:
        return []
    return ["<h2>Measures</h2>",
            _table(["measure", "in the figures", "split", "better when (literature)", "what"], rows, left=4, wrap=(4,))]


def build_report(study_dir: str | os.PathLike) -> str:
    """The HTML text of the report of a finished study folder (refused while a study writes it: its
    files, rewritten one at a time, then belong to two runs)."""
    from embedscope.fileio import reading_lock

    d = Path(study_dir)
    if d.exists() and not d.is_dir():
        raise EmbedscopeError(f"{d}: is a file, expected a study folder")
    with reading_lock(d, f"{d}: a study is writing this folder now (another process holds its lock): run the "
                         "report when it has finished"):
        return _build_report(d)


def _build_report(d: Path) -> str:
    for f in ("study.json", "correlations.json", "runs.csv"):
        if not (d / f).exists():
            if f != "study.json" and (d / "rows").is_dir():  # a study stopped before its tables (Ctrl-C)
                n = sum(1 for _ in (d / "rows").glob("*.json"))
                raise EmbedscopeError(f"{d}: an unfinished study ({n} row{'' if n == 1 else 's'} measured, no {f}): "
                                      "run the same 'embedscope study' command again to finish it")
            raise EmbedscopeError(f"{d}: not a finished study folder (no {f}; run 'embedscope study' first)")
    meta, stats, runs = _read_study(d)
    n_rows = _count(stats["n_points"]["rows"])
    if n_rows is not None and n_rows != len(runs):  # runs.csv of a later run, correlations.json of an earlier
        # one (a study stopped between the two files): the page showed the one's rows beside the other's numbers
        raise EmbedscopeError(f"{d}: runs.csv holds {len(runs)} row{'' if len(runs) == 1 else 's'}, the statistics "
                              f"(correlations.json) were computed from {n_rows}: they are of two runs of the study; "
                              f"{_AGAIN}")
    by: dict[str, dict[str, Any]] = {}
    for r in stats["correlations"]:
        by.setdefault(r["measure"], {})[r["level"]] = r
    parts = _header(d, meta, stats, runs)
    parts += _provenance(meta, stats, runs)
    parts += _untrained(stats, runs)
    parts += _correlations(stats, by)
    parts += _robustness(stats, by)
    parts += _published(stats, by)
    parts += _figures(d, stats)
    parts += _runs(stats, runs)
    parts += _checkpoints(runs)
    parts += _glossary(meta, stats)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(study_dir: str | os.PathLike, out: str | os.PathLike, *, force: bool = False) -> Path:
    """Write the report of ``study_dir`` to ``out`` (atomically; refuses an existing file unless force)."""
    from embedscope.fileio import check_writable, write_text

    check_writable(out, force=force)
    return write_text(out, build_report(study_dir), force=force)
