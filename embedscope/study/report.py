"""``embedscope report``: one self-contained HTML page of a study (figures embedded, no external requests).

Sections: settings and provenance (source, data set, versions, checkpoint hashes), the reading
aids (untrained reference, robustness), the correlation table with bootstrap intervals and the
granulated τ, the published values of docs/methods.md §6 beside ours, the figures, and the runs table.
"""

from __future__ import annotations

import base64
import html
import math
import os
from pathlib import Path
from typing import Any

from embedscope.errors import EmbedscopeError

# docs/methods.md §6: Roth Fig. 5 (Pearson r over objectives, structure of the training set vs test R@1)
PUBLISHED_FIG5 = {
    "rho": {"CUB": -0.80, "CARS": -0.85, "SOP": -0.63},
    "pi_ratio": {"CUB": 0.79, "CARS": 0.65, "SOP": 0.22},
    "pi_intra": {"CUB": 0.25, "CARS": 0.39, "SOP": 0.36},
    "pi_inter": {"CUB": -0.16, "CARS": -0.08, "SOP": 0.17},
}
# docs/methods.md §6: Roth Fig. 4 (CUB), Pearson r between evaluation metrics across objectives
PUBLISHED_FIG4 = {("R@1", "NMI"): 0.86, ("R@1", "mAP@C"): 0.76, ("NMI", "F1"): 0.99}

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1180px;
color:#1d1d1f;line-height:1.4;padding:0 16px}
h1{font-size:1.5em;margin-bottom:0.2em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:0.82em;margin:8px 0}th,td{border:1px solid #d0d0d0;padding:3px 7px;
text-align:right;white-space:nowrap}
th{background:#f2f2f2;white-space:normal}td.l,th.l{text-align:left}tr.bad td{background:#fff1f0}
.note{color:#555;font-size:0.9em}.warn{background:#fff8e1;border-left:4px solid #f0b400;padding:6px 10px}
img{max-width:100%;border:1px solid #eee;margin:8px 0}.scroll{overflow-x:auto}code{background:#f4f4f4;padding:0 3px}
"""


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _num(v: Any, d: int = 3) -> str:
    if v is None or v == "":
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    try:
        f = float(v)
    except (TypeError, ValueError):
        return _e(v)
    if not math.isfinite(f):
        return "–"
    if f.is_integer() and abs(f) < 1e6:
        return str(int(f))
    return f"{f:.{d}f}"


def _ci(r: dict[str, Any], key: str) -> str:
    v, lo, hi = r.get(key), r.get(f"{key}_lo"), r.get(f"{key}_hi")
    s = _num(v)
    if lo is not None and hi is not None and all(isinstance(x, (int, float)) and math.isfinite(x) for x in (lo, hi)):
        s += f" [{lo:+.2f}, {hi:+.2f}]"
    return s


def _table(headers: list[str], rows: list[list[str]], left: int = 1, row_classes: list[str] | None = None) -> str:
    h = "".join(f'<th class="l">{_e(x)}</th>' if i < left else f"<th>{_e(x)}</th>" for i, x in enumerate(headers))
    body = []
    for k, r in enumerate(rows):
        cls = f' class="{row_classes[k]}"' if row_classes and row_classes[k] else ""
        cells = "".join(f'<td class="l">{x}</td>' if i < left else f"<td>{x}</td>" for i, x in enumerate(r))
        body.append(f"<tr{cls}>{cells}</tr>")
    return f'<div class="scroll"><table><thead><tr>{h}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f'<figure><img alt="{_e(alt)}" src="data:image/png;base64,{data}">'
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
    if not all(isinstance(x, dict) for x in stats.get("robustness", {}).values()):
        return "'robustness' holds other than objects"
    for k in ("ranking", "exclude", "axes", "identical_to_target"):
        if not isinstance(stats.get(k) or [], list):
            return f"'{k}' is not a list"
    if not all(isinstance(r, dict) and isinstance(r.get("measure"), str) for r in stats.get("ranking") or []):
        return "'ranking' is not a list of measures"
    return ""


def build_report(study_dir: str | os.PathLike) -> str:
    """The HTML text of the report of a finished study folder."""
    d = Path(study_dir)
    if d.exists() and not d.is_dir():
        raise EmbedscopeError(f"{d}: is a file, expected a study folder")
    for f in ("study.json", "correlations.json", "runs.csv"):
        if not (d / f).exists():
            raise EmbedscopeError(f"{d}: not a finished study folder (no {f}; run 'embedscope study' first)")
    meta, stats, runs = _read_study(d)
    target = stats["target"]
    s = meta.get("settings", {})
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>embedscope study: {_e(Path(s.get('source', str(d))).name)}</title>",
             f"<style>{CSS}</style></head><body>"]
    parts.append(f"<h1>Study: which measure of the training embeddings tracks test {_e(target)}?</h1>")
    np_ = stats["n_points"]
    parts.append(f'<p class="note">{_e(np_["runs"])} runs in {_e(np_["objectives"])} objectives '
                 f'({_e(np_["rows"])} checkpoints measured, {_e(np_["errors"])} failed, {_e(np_["excluded"])} excluded by '
                 f'{_e(", ".join(map(str, stats.get("exclude") or [])) or "nothing")}). '
                 "Protocol: docs/methods.md §6 (Roth et al. 2020, "
                 "Fig. 4, Fig. 5).</p>")

    # settings and provenance
    parts.append("<h2>Settings and provenance</h2>")
    v = meta.get("versions", {})
    datasets = sorted({r.get("dataset", "") for r in runs if r.get("dataset")})
    prov = [["source", _e(s.get("source", ""))], ["epoch selection", _e(s.get("epoch", ""))],
            ["data set", _e(", ".join(datasets) or s.get("dataset") or "")], ["target", _e(target)],
            ["retrieval metric", _e(s.get("metric", ""))], ["seed (k-means, bootstrap)", _e(s.get("seed", ""))],
            ["bootstrap resamples", _e(stats.get("n_boot", ""))],
            ["hyper-parameter axes that vary", _e(", ".join(map(str, stats.get("axes") or [])) or "none")],
            ["measures from", _e(meta.get("measures_source", ""))], ["embedding cache", _e(meta.get("cache_dir", ""))],
            ["versions", _e(", ".join(f"{k} {x}" for k, x in v.items()))],
            ["started / ended", _e(f"{meta.get('started', '')} / {meta.get('ended', '')}")]]
    parts.append(_table(["setting", "value"], prov, left=2))
    if s.get("epoch") == "best":
        parts.append('<p class="warn">The <b>best</b> epoch of each run is the epoch of best <i>test</i> R@1 '
                     "(Roth's protocol): it selects on the test set, so the test values are optimistic. The final "
                     "epoch is measured beside it (robustness table).</p>")

    # untrained and robustness
    u = stats.get("untrained", {})
    parts.append("<h2>Against the untrained network</h2>")
    nb = [str(x) for x in u.get("selected_no_better") or []] if isinstance(u.get("selected_no_better"), list) else []
    parts.append(f"<p>Selected checkpoints no better than their untrained network on test {_e(target)}: "
                 f"<b>{len(nb)} of {_e(u.get('selected_compared', 0))}</b>; final checkpoints: "
                 f"<b>{_e(u.get('final_no_better', 0))} of {_e(u.get('final_compared', 0))}</b>; best epoch = epoch 1 "
                 f"in {_e(u.get('best_epoch_1', 0))} runs. "
                 + ("A study of models that do not beat their initialisation does not test the claim." if nb else "")
                 + "</p>")
    if nb:
        parts.append(f'<p class="note">Flagged: {_e(", ".join(nb))}</p>')
    norm = stats.get("normalisation", {})
    if norm:
        parts.append('<p class="note">Output normalisation of the runs: '
                     + _e(", ".join(f"{'L2-normalised' if k in ('True', 'true', '1') else 'raw'}: {n}"
                                    for k, n in norm.items()))
                     + " (ρ is taken on the outputs as they are; R@1 ranks by cosine).</p>")

    # correlations
    parts.append(f"<h2>Correlations with test {_e(target)}</h2>")
    rows = []
    by = {}
    for r in stats["correlations"]:
        by.setdefault(r["measure"], {})[r["level"]] = r
    rank = {r["measure"]: i + 1 for i, r in enumerate(stats.get("ranking", []))}
    for m in sorted(by, key=lambda m: rank.get(m, 999)):
        o, r = by[m].get("objectives", {}), by[m].get("runs", {})
        rows.append([_e(m), _e(o.get("split", "")), str(rank.get(m, "")), _ci(o, "pearson"), _ci(o, "spearman"),
                     _ci(o, "kendall"), _ci(r, "pearson"), _ci(r, "spearman"), _ci(r, "kendall"),
                     _num(r.get("granulated_tau"))])
    parts.append(_table(["measure", "split", "rank |τ|", f"Pearson r, objectives (n={np_['objectives']})",
                         "Spearman, objectives", "Kendall τ, objectives", f"Pearson r, runs (n={np_['runs']})",
                         "Spearman, runs", "Kendall τ, runs", "granulated τ"], rows, left=2))
    if stats.get("identical_to_target"):
        parts.append(f'<p class="note">Left out, equal to the target in every run: '
                     f'{_e(", ".join(map(str, stats["identical_to_target"])))}.</p>')
    parts.append('<p class="note">[lo, hi]: bootstrap 95% interval (resampling points, seeded). Granulated τ: Jiang '
                 "et al., ICLR 2020, mean over the varying axes of the mean τ within groups that differ in that axis "
                 "only.</p>")

    # robustness
    rob = stats.get("robustness", {})
    rrows = []
    for m in [x for x in ("rho", "pi_ratio", "pi_intra", "pi_inter") if x in rob] + \
             [x for x in rob if x not in ("rho", "pi_ratio", "pi_intra", "pi_inter")]:
        x = rob[m]
        rrows.append([_e(m), _num(by.get(m, {}).get("objectives", {}).get("pearson")), _num(x.get("loo_min")),
                      _num(x.get("loo_max")), _e(x.get("loo_most_influential", "")), _num(x.get("final_epoch_pearson")),
                      _num(x.get("normalised_only_pearson")), _num(x.get("seed_spread_ratio"))])
    parts.append("<h2>Robustness</h2>")
    parts.append(_table(["measure", "r (objectives)", "leave-one-objective-out min", "max",
                         "most influential objective",
                         "r at the final epoch", "r, normalised outputs only", "seed sd / between-objective sd"],
                        rrows, left=1))

    # published beside ours
    parts.append("<h2>Published values (docs/methods.md §6) beside ours</h2>")
    prow = []
    for m, pub in PUBLISHED_FIG5.items():
        o = by.get(m, {}).get("objectives", {})
        prow.append([_e(m), f"{pub['CUB']:+.2f}", f"{pub['CARS']:+.2f}", f"{pub['SOP']:+.2f}", _ci(o, "pearson")])
    parts.append(_table(["measure vs test R@1 (Fig. 5)", "CUB200", "CARS196", "SOP",
                         f"this study: r vs test {target} over objectives [95%]"], prow, left=1))
    if target != "R@1":
        parts.append(f'<p class="warn">The published values are correlations with test R@1; this study\'s target '
                     f"is test {_e(target)}, so the columns do not compare like with like.</p>")
    names = stats.get("metric_matrix", {}).get("names", [])
    mat = stats.get("metric_matrix", {}).get("pearson", [])
    frow = []
    for (a, b), val in PUBLISHED_FIG4.items():
        try:
            ours = mat[names.index(a)][names.index(b)] if a in names and b in names else None
        except (IndexError, TypeError, AttributeError):  # a matrix that is not names × names
            ours = None
        frow.append([_e(f"{a} – {b}"), f"{val:+.2f}", _num(ours, 2)])
    parts.append(_table(["metric pair (Fig. 4, CUB)", "Roth", "this study"], frow, left=1))
    parts.append('<p class="note">Roth et al.: one point per objective (mean over 5 seeds), ResNet-50 at D = 128, '
                 "regularised runs excluded; paper text: ρ correlation ≤ −0.63 on all three data sets.</p>")

    # figures
    fig_dir = d / "figures"
    caps = {"fig5_structure_vs_target": "Fig. 5 layout: training-set structure vs test target, one point per objective",
            "fig4_metric_correlations": "Fig. 4 layout: correlation between test metrics across objectives",
            "ranking_by_tau": "Measures ranked by |Kendall τ| over runs"}
    drawn = stats.get("figures")  # the figures drawn with these statistics (figures/ may hold an earlier run's)
    if not isinstance(drawn, list):  # a study of an earlier version: the files on disk
        drawn = list(caps)
    imgs = [(fig_dir / f"{k}.png", c) for k, c in caps.items() if k in drawn and (fig_dir / f"{k}.png").exists()]
    if imgs:
        parts.append("<h2>Figures</h2>")
        parts += [_img(p, c) for p, c in imgs]

    # runs
    parts.append("<h2>Runs</h2>")
    show = [c for c in ("id", "objective", "selection", "epoch", "seed", "normalize", target, "untrained_target",
                        "beats_untrained", "rho", "pi_ratio", "pi_intra", "pi_inter", "MAP@R", "status", "error",
                        "sha256") if runs and c in runs[0]]
    rws, rc = [], []
    for r in runs:
        cells = []
        for c in show:
            val = r.get(c, "")
            if c == "sha256":
                cells.append(f"<code>{_e(val[:12])}</code>")
            elif c in ("id", "objective", "selection", "status", "error", "normalize", "beats_untrained"):
                cells.append(_e(val))
            else:
                cells.append(_num(val, 4))
        rws.append(cells)
        rc.append("bad" if r.get("status") != "ok" or r.get("beats_untrained") == "False" else "")
    parts.append(_table(show, rws, left=3, row_classes=rc))
    parts.append('<p class="note">Red rows: failed, or no better than the untrained network. Full table: '
                 "<code>runs.csv</code> / <code>runs.parquet</code> in the study folder.</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(study_dir: str | os.PathLike, out: str | os.PathLike, *, force: bool = False) -> Path:
    """Write the report of ``study_dir`` to ``out`` (atomically; refuses an existing file unless force)."""
    from embedscope.fileio import check_writable, write_text

    check_writable(out, force=force)
    return write_text(out, build_report(study_dir), force=force)
