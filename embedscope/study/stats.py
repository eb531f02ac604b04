"""Statistics of a study: how well each measure tracks the target over objectives and runs (docs/methods.md §6).

Per measure m and a target t (default test R@1):

* **Pearson r, Spearman ρ_s, Kendall τ_b** of (m, t), each with a seeded **bootstrap 95% interval**
  (resampling points). The bootstrap, exactly (so that it can be re-done from ``runs.csv``)::

      rng = numpy.random.default_rng(seed)          # a fresh generator per (measure, level)
      idx = rng.integers(0, n, size=(n_boot, n))    # n_boot resamples of the n points
      stat_b = statistic(x[idx[b]], y[idx[b]])      # Pearson / Spearman (Pearson of average ranks) / tau-b
      lo, hi = numpy.percentile(finite stat_b, [2.5, 97.5])   # resamples with a constant side are dropped

  at two levels: **objectives** (one point per objective = the mean over its seeds, as Roth Fig. 5)
  and **runs** (every checkpoint a point). A missing value drops its point for that measure only (an
  objective's mean is over its seeds with a value; an infinite value is a missing one); a side
  constant over the points, also only up to rounding (:func:`constant_rows`), gives NaN for every
  statistic, never 0. Each correlation row says why in ``note`` and counts ``n_left_out``;
  :func:`study_notes` makes the lines the terminal and the report print.
* **Granulated Kendall τ** (Jiang, Neyshabur, Mobahi, Krishnan, Bengio, *Fantastic Generalization
  Measures and Where to Find Them*, ICLR 2020, Eq. 4): for each hyper-parameter axis i that varies
  in the study, τ of (m, t) within every group of runs that agree on all other axes (and the seed),
  averaged over the groups with ≥ 2 points taking ≥ 2 values of axis i and a defined τ: Ψ_i;
  Ψ = mean of Ψ_i over the axes.
* Ranking of the measures by |τ| over runs (interval beside it).
* Robustness: leave-one-objective-out Pearson r (min, max, the objective that moves it most), r at
  the final epoch beside the best epoch, r over runs with L2-normalised outputs only, per-seed
  spread (mean within-objective std against the between-objective std), and the runs whose
  selected checkpoint is **no better than the untrained network** on the target (better: higher or
  lower as the registry's ``direction`` of the target says; a target without a direction, such as
  π_intra, compares none).

Sign: every statistic is reported as measured; Roth's reading is "ρ lower, R@1 higher" (negative r)
and "π_ratio higher, R@1 higher" (positive r) on CUB and CARS (docs/methods.md §6).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from embedscope.names import NOTE_MEASURE_CONSTANT, NOTE_TOO_FEW, NOTE_TWO_POINTS

#: in the order an objective's label names them; a column fixed by an earlier one is no axis of its own
#: (:func:`_independent`): the data set comes before the settings that go with it (a shapes run beside
#: digits runs was labelled by its batch size)
HYPER_COLUMNS = ["loss", "loss_family", "dataset", "miner", "sampler", "p_switch", "embed_dim", "normalize",
                 "batch_size", "lr", "epochs", "arch", "train_classes", "image_size", "distance", "loss_params",
                 "weight_decay", "optimizer", "lr_schedule", "weights", "frozen_bn", "freeze_bn_affine", "root"]


# ----------------------------------------------------------------------------------------- statistics
def constant_rows(X: np.ndarray) -> np.ndarray:
    """Whether each row of X [B, n] is constant up to rounding: a spread (sum of squared deviations)
    of at most 1e-24 of its sum of squares, i.e. equal values up to the last bits (the mean of equal
    values over 3 seeds and over 6 can differ in the last bit: 0.1 three times is 0.1, six times
    0.10000000000000002). Such a row has no correlation of any kind (Pearson, Spearman, Kendall): its
    ranks and pair signs would only measure rounding."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[None]
    xc = X - X.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore"):
        return (xc * xc).sum(1) <= 1e-24 * (X * X).sum(1)


def pearson_rows(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Pearson r of each row pair of X, Y [B, n] (NaN where a row is constant).

    "Constant" is relative to the row's own scale (a spread of at most 1e-12 of its magnitude, i.e.
    equal values up to rounding: :func:`constant_rows`), so r does not depend on the units: x and
    1e-14·x give the same r.
    """
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    xc = X - X.mean(axis=1, keepdims=True)
    yc = Y - Y.mean(axis=1, keepdims=True)
    sxx = (xc * xc).sum(1)
    syy = (yc * yc).sum(1)
    den = np.sqrt(sxx * syy)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        r = (xc * yc).sum(1) / den
        # a row that is constant up to rounding has no correlation (a threshold relative to the row)
        tiny = (sxx <= 1e-24 * (X * X).sum(1)) | (syy <= 1e-24 * (Y * Y).sum(1))
    r[tiny | ~np.isfinite(r)] = np.nan
    return np.clip(r, -1.0, 1.0)


def spearman_rows(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Spearman's rank correlation of each row pair (Pearson of average ranks, as scipy.stats.spearmanr);
    NaN where a row is constant up to rounding (:func:`constant_rows`: its ranks would order rounding
    errors), as Pearson's r."""
    from scipy.stats import rankdata

    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    r = pearson_rows(rankdata(X, axis=1), rankdata(Y, axis=1))
    r[constant_rows(X) | constant_rows(Y)] = np.nan
    return r


def _pair_signs(x: np.ndarray) -> np.ndarray:
    """sign(x_i - x_j) of every ordered pair of each row: [B, n] -> [B, n, n] (int8)."""
    return np.sign(x[:, :, None] - x[:, None, :]).astype(np.int8)


_KENDALL_PAIRS_MAX_N = 1000  # above this many points per row, τ_b comes from scipy (no n x n pair-sign arrays)


def kendall_rows(X: np.ndarray, Y: np.ndarray, chunk: int | None = None, *, y_signs: np.ndarray | None = None
                 ) -> np.ndarray:
    """Kendall's τ_b of each row pair (as scipy.stats.kendalltau, variant "b": ties in either side
    leave the pair out of that side's count): τ_b = (C − D) / sqrt((n0 − n_x)(n0 − n_y)).

    ``Y`` may have one row for all rows of ``X``; ``y_signs`` (``_pair_signs`` of ``Y``) skips
    recomputing its pair signs. The counts are integers, so chunking never changes a value. A row
    constant up to rounding (:func:`constant_rows`) has no τ: NaN, as Pearson's r.
    """
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    n = X.shape[1] if X.ndim == 2 else 0
    if n > _KENDALL_PAIRS_MAX_N and y_signs is None:  # the n x n sign matrices would not stay small: scipy's O(n log n)
        from scipy.stats import kendalltau

        rows = []
        for i in range(X.shape[0]):
            t = kendalltau(X[i], Y[0] if Y.shape[0] == 1 else Y[i]).statistic
            rows.append(np.nan if t is None else t)
        out = np.clip(np.asarray(rows, dtype=np.float64), -1.0, 1.0)
        out[constant_rows(X) | constant_rows(Y)] = np.nan
        return out
    chunk = chunk or max(1, int(4_000_000 // max(n * n, 1)))
    out = np.empty(X.shape[0])
    shared = Y.shape[0] == 1 and X.shape[0] != 1
    SY = y_signs if y_signs is not None else (_pair_signs(Y) if shared else None)
    for s in range(0, X.shape[0], chunk):
        sx = _pair_signs(X[s:s + chunk])
        sy = SY if SY is not None and SY.shape[0] == 1 else (
            SY[s:s + chunk] if SY is not None else _pair_signs(Y[s:s + chunk]))
        num = np.einsum("bij,bij->b", sx, np.broadcast_to(sy, sx.shape), dtype=np.int64)
        nx = np.count_nonzero(sx.reshape(sx.shape[0], -1), axis=1)
        ny = np.count_nonzero(sy.reshape(sy.shape[0], -1), axis=1)
        den = np.sqrt((nx * ny).astype(np.float64))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[s:s + chunk] = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
    # a side constant up to rounding has no τ (its pair signs would be those of rounding errors)
    out[constant_rows(X) | constant_rows(Y)] = np.nan
    return np.clip(out, -1.0, 1.0)


STATISTICS = {"pearson": pearson_rows, "spearman": spearman_rows, "kendall": kendall_rows}


def _finite_pairs(x, y) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (x_i, y_i) where both are finite (a missing value drops its pair only, as correlate)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    return x[keep], y[keep]


def _pearson(x, y) -> float:
    """Pearson r of the finite pairs of (x, y) (NaN below 2 pairs or with a constant side)."""
    x, y = _finite_pairs(x, y)
    return float(pearson_rows(x[None], y[None])[0]) if x.size >= 2 else float("nan")


def _pearson_3(x, y) -> float:
    """:func:`_pearson` over at least 3 finite pairs, else NaN (a robustness number over two points
    would be ±1 whatever the values)."""
    x, y = _finite_pairs(x, y)
    return _pearson(x, y) if x.size >= 3 else float("nan")


def correlate(x, y, *, n_boot: int = 1000, seed: int = 1234) -> dict[str, Any]:
    """Pearson, Spearman and Kendall τ_b of (x, y) with bootstrap 95% intervals (module docstring)."""
    from scipy import stats as st

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    n = int(x.size)
    out: dict[str, Any] = {"n": n}
    for name, fn in STATISTICS.items():
        out[name] = float(fn(x[None], y[None])[0]) if n >= 2 else float("nan")
    if n >= 3 and np.isfinite(out["pearson"]):
        out["pearson_p"] = float(st.pearsonr(x, y).pvalue)
        out["kendall_p"] = float(st.kendalltau(x, y).pvalue)
    else:
        out["pearson_p"] = out["kendall_p"] = float("nan")
    if n >= 3 and n_boot > 0:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, n, size=(n_boot, n))
        xb, yb = x[idx], y[idx]
        for name, fn in STATISTICS.items():
            v = fn(xb, yb)
            v = v[np.isfinite(v)]
            lo, hi = (np.percentile(v, [2.5, 97.5]) if v.size else (np.nan, np.nan))
            out[f"{name}_lo"], out[f"{name}_hi"] = float(lo), float(hi)
    else:
        for name in STATISTICS:
            out[f"{name}_lo"] = out[f"{name}_hi"] = float("nan")
    return out


def correlate_many(X, y, *, n_boot: int = 1000, seed: int = 1234) -> list[dict[str, Any]]:
    """:func:`correlate` of every row of ``X`` [M, n] with ``y`` [n], all at once; equal value for value.

    Each row's bootstrap draws its resamples from a fresh ``default_rng(seed)`` over its own finite
    points (as :func:`correlate`), so rows with the same finite points share one index matrix: it is
    drawn once, ``y``'s resamples, ranks and pair signs are taken once, and the statistic of every
    resample of every such row is one array operation.
    """
    from scipy import stats as st
    from scipy.stats import rankdata

    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    y = np.asarray(y, dtype=np.float64)
    outs: list[dict[str, Any] | None] = [None] * X.shape[0]
    keeps = np.isfinite(X) & np.isfinite(y)[None, :]
    groups: dict[bytes, list[int]] = {}
    for i in range(X.shape[0]):
        groups.setdefault(keeps[i].tobytes(), []).append(i)
    for rows in groups.values():
        keep = keeps[rows[0]]
        x, yy = X[rows][:, keep], y[keep]
        n = int(yy.size)
        M = len(rows)
        res = [{"n": n} for _ in rows]
        for j in range(M):
            for name, fn in STATISTICS.items():  # one row at a time: numpy sums a 1-row array as correlate() does
                res[j][name] = float(fn(x[j][None], yy[None])[0]) if n >= 2 else float("nan")
            if n >= 3 and np.isfinite(res[j]["pearson"]):
                res[j]["pearson_p"] = float(st.pearsonr(x[j], yy).pvalue)
                res[j]["kendall_p"] = float(st.kendalltau(x[j], yy).pvalue)
            else:
                res[j]["pearson_p"] = res[j]["kendall_p"] = float("nan")
        if n >= 3 and n_boot > 0:
            idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
            yb = yy[idx]  # [B, n], the same for every row of the group
            yb_rank = rankdata(yb, axis=1)
            yb_const = constant_rows(yb)  # (as spearman_rows: a side constant up to rounding has no ranks)
            yb_signs = _pair_signs(yb) if n_boot * n * n <= 64_000_000 and n <= _KENDALL_PAIRS_MAX_N else None
            for j in range(M):
                xb = x[j][idx]
                sp = pearson_rows(rankdata(xb, axis=1), yb_rank)
                sp[yb_const | constant_rows(xb)] = np.nan
                vals = {"pearson": pearson_rows(xb, yb), "spearman": sp,
                        "kendall": kendall_rows(xb, yb, y_signs=yb_signs)}
                for name, v in vals.items():
                    v = v[np.isfinite(v)]
                    lo, hi = (np.percentile(v, [2.5, 97.5]) if v.size else (np.nan, np.nan))
                    res[j][f"{name}_lo"], res[j][f"{name}_hi"] = float(lo), float(hi)
        else:
            for j in range(M):
                for name in STATISTICS:
                    res[j][f"{name}_lo"] = res[j][f"{name}_hi"] = float("nan")
        for j, i in enumerate(rows):
            outs[i] = res[j]
    return outs  # type: ignore[return-value]


def granulated_tau(df, measure: str, target: str, axes: list[str], context: list[str]) -> dict[str, Any]:
    """Jiang et al.'s granulated Kendall τ (ICLR 2020, Eq. 4) of ``measure`` vs ``target``.

    For each axis a of ``axes``: the runs are grouped by every other column of ``axes + context``
    (``context``, e.g. the seed, is held fixed but is not an axis); Ψ_a = mean over the groups with
    ≥ 2 points (both values finite) taking ≥ 2 values of a, and a defined τ_b, of τ_b(measure,
    target) within the group (runs of a group that agree on a too differ in no axis: an axis with a
    single value has no Ψ_a). Ψ = mean over the axes with a value.
    Returns ``{"psi": Ψ, "per_axis": {a: Ψ_a}, "groups": {a: number of groups}}``.
    """
    return granulated_tau_many(df, [measure], target, axes, context)[measure]


def granulated_tau_many(df, measures: list[str], target: str, axes: list[str], context: list[str]
                        ) -> dict[str, dict[str, Any]]:
    """:func:`granulated_tau` of every measure of ``measures`` (the groups of each axis found once)."""
    import pandas as pd

    per_axis: dict[str, dict[str, float]] = {m: {} for m in measures}
    groups: dict[str, dict[str, int]] = {m: {} for m in measures}
    y_all = df[target].to_numpy(dtype=np.float64)
    X_all = {m: df[m].to_numpy(dtype=np.float64) for m in measures}
    for a in axes:
        others = [c for c in axes + context if c != a]
        # the groups in the order (and with the rows) that iterating over groupby gives
        members = [g["_pos_"].to_numpy() for _, g in df.assign(_pos_=np.arange(len(df))).groupby(
            others, dropna=False, sort=True)] if others else [np.arange(len(df))]
        codes = pd.factorize(df[a], use_na_sentinel=False)[0]  # the axis' value of each row
        for m in measures:
            taus = []
            for rows in members:
                x, y = X_all[m][rows], y_all[rows]
                ok = np.isfinite(x) & np.isfinite(y)
                if ok.sum() < 2 or np.unique(codes[rows][ok]).size < 2:  # no two runs differing in a
                    continue
                t = float(kendall_rows(x[ok][None], y[ok][None])[0])
                if np.isfinite(t):
                    taus.append(t)
            groups[m][a] = len(taus)
            per_axis[m][a] = float(np.mean(taus)) if taus else float("nan")
    out = {}
    for m in measures:
        vals = [v for v in per_axis[m].values() if np.isfinite(v)]
        out[m] = {"psi": float(np.mean(vals)) if vals else float("nan"), "per_axis": per_axis[m], "groups": groups[m]}
    return out


# ----------------------------------------------------------------------------------------- the study table
def _primary_mask(df) -> np.ndarray:
    sel = df["selection"].astype(str)
    has_best = bool((sel == "best").any())
    return ((sel != "untrained") & ~((sel == "final") & has_best)).to_numpy()


def check_exclude(exprs) -> list[tuple[str, str, Any, str]]:
    """Every ``--exclude`` expression checked as far as it can be without the study's columns ->
    [(column, operator, value, expression)]; a bad one is one :class:`UsageError` line quoting it
    (a study can call this before any work; :func:`study_statistics` checks the columns)."""
    from embedscope.errors import UsageError
    from embedscope.study.plan import parse_exclude

    out = []
    for expr in exprs or []:
        ((col, op, val),) = parse_exclude([expr])
        # 'loss==' or 'p_switch=>0' parse as the value '=' or '>0': an operator where the value should be
        if isinstance(val, str) and val[:1] in ("=", "<", ">", "!"):
            raise UsageError(f"--exclude '{expr}': expected COLUMN OP VALUE, e.g. p_switch>0 or loss==lifted")
        if isinstance(val, float) and math.isnan(val):
            raise UsageError(f"--exclude '{expr}': NaN equals and orders with nothing; name a number")
        if op in (">", ">=", "<", "<=") and not isinstance(val, float):
            raise UsageError(f"--exclude '{expr}': comparing needs a number")
        out.append((col, op, val, str(expr)))
    return out


#: the columns every study row has besides its config (CONFIG_COLUMNS), tags and measures, and those
#: the statistics add: what --exclude may name (checked before any work, :func:`check_exclude_columns`)
ROW_COLUMNS = ("id", "run", "selection", "epoch", "checkpoint", "untrained", "status", "error", "sha256", "cached",
               "embed_device", "embed_seconds", "measure_seconds", "N_train", "N_test", "undefined", "undefined_why",
               "objective", "primary", "excluded", "beats_untrained", "untrained_target")


def check_exclude_columns(exprs, tags: set[str], measures: set[str], patterns: tuple[str, ...] = ()) -> None:
    """Before any work: every column an ``--exclude`` expression names is one the study's rows will
    have (a config column, a row column, a tag of the plan, a measure, or a name of a measure
    pattern such as ``NR-Prec:<property>``); else one :class:`UsageError` line."""
    from embedscope.study.plan import CONFIG_COLUMNS

    known = set(CONFIG_COLUMNS) | set(ROW_COLUMNS) | set(measures) | set(tags) | {f"tag:{t}" for t in tags}
    for col, _, _, expr in check_exclude(exprs):
        if col not in known and not any(col.startswith(p) for p in patterns):
            raise _no_such_column(expr, col)


def _no_such_column(expr: str, col: str):
    """The one-line error of an ``--exclude`` column the study has not (before the work or after it)."""
    from embedscope.errors import UsageError

    return UsageError(f"--exclude '{expr}': no such column '{col}' in the study (have e.g. loss, p_switch, "
                      "embed_dim, a tag or a measure)")


def _names_excluded(expr: str):
    """The one-line error of an ``--exclude`` that names the column ``excluded``, which it makes."""
    from embedscope.errors import UsageError

    return UsageError(f"--exclude '{expr}': the column 'excluded' is what --exclude decides; name another column")


def check_exclude_not_circular(exprs) -> None:
    """Refuse (before any work) an ``--exclude`` on the column ``excluded``, which --exclude itself makes."""
    for col, _, _, expr in check_exclude(exprs):
        if col == "excluded":
            raise _names_excluded(expr)


def _exclude_mask(df, exprs, each: list | None = None) -> np.ndarray:
    """The rows that ``exprs`` leave out; ``each`` (a list) receives (expression, column, operator, its own mask)."""
    from embedscope.errors import UsageError

    ops = {">": np.greater, ">=": np.greater_equal, "<": np.less, "<=": np.less_equal}
    m = np.zeros(len(df), dtype=bool)
    for col, op, val, expr in check_exclude(exprs):
        if col == "excluded":
            raise _names_excluded(expr)
        c = col if col in df.columns else f"tag:{col}"
        if c not in df.columns:
            raise _no_such_column(expr, col)
        v = df[c]
        if c == col and f"tag:{col}" in df.columns:
            # a YAML tag named like a config column (loss: margin for a checkpoint that records no loss):
            # its value where the checkpoint has none (else 'loss==margin' left nothing out, silently)
            v = v.where(v.map(_given).to_numpy(dtype=bool), df[f"tag:{col}"])
        if op in ops:
            num = np.array([_num(s) for s in v], dtype=np.float64)
            given = np.array([s is not None and str(s).strip() not in ("", "nan", "None") for s in v])
            if given.any() and not np.isfinite(num[given]).any():  # (it would leave nothing out, silently)
                raise UsageError(f"--exclude '{expr}': the column '{col}' holds text, not numbers: compare it "
                                 "with == or !=")
            with np.errstate(invalid="ignore"):
                mi = ops[op](num, val) & np.isfinite(num)
        else:
            eq = v.map(lambda s, val=val: _equals(s, val)).to_numpy(dtype=bool)
            mi = eq if op == "==" else ~eq
        m |= mi
        if each is not None:
            each.append((expr, c, op, mi))
    return m


def _equals(cell, val) -> bool:
    """A cell against an ``--exclude`` value: a number as a number; a true/false column (normalize,
    frozen_bn, freeze_bn_affine) against true/false in any case ('normalize==true', as YAML and JSON
    write it, left nothing out: the cell reads 'True'); else as text."""
    if isinstance(val, float):
        return _num(cell) == val
    if str(cell) in ("True", "False") and str(val).lower() in ("true", "false"):
        return str(cell).lower() == str(val).lower()
    return str(cell) == str(val)


def _given(v) -> bool:
    """Whether a table cell holds a value (not None, NaN or empty)."""
    return v is not None and not (isinstance(v, float) and v != v) and str(v).strip() not in ("", "nan", "None")


def _num(v) -> float:
    if isinstance(v, bool):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _value(v) -> float:
    """A measured value for the statistics: a finite float, else NaN. An infinite value (ρ with every
    singular value, KL(U||s), of a collapsed model is +inf) is a missing one, as docs/studies.md says:
    it drops its point for that measure only, and an objective's mean is over its other seeds (a mean
    with +inf would drop the whole objective, and a study's first run, from the rows in memory, would
    differ from a later one, from the rows read back, where JSON holds it as null)."""
    f = _num(v)
    return f if math.isfinite(f) else float("nan")


def _varying(df, cols) -> list[str]:
    out = []
    for c in cols:
        if c in df.columns and df[c].astype(str).nunique(dropna=False) > 1:
            out.append(c)
    return out


def _independent(df, cols: list[str]) -> list[str]:
    """Drop an axis whose value is fixed by an earlier one (e.g. the miner and loss family by the loss).
    A missing value (None, NaN: a setting some configs lack) is a value of its own, as in :func:`_varying`
    (pandas 3 keeps it missing through ``astype(str)``, and ``nunique`` and ``groupby`` left it out: a
    loss trained with and without ``weights`` had the weights dropped as "fixed by the loss", and its
    runs were averaged into one objective)."""
    keep: list[str] = []
    for c in cols:
        dependent = False
        for a in keep:
            if df.groupby(df[a].astype(str), dropna=False)[c].apply(
                    lambda v: v.astype(str).nunique(dropna=False)).max() <= 1:
                dependent = True
                break
        if not dependent:
            keep.append(c)
    return keep


def _label(row, cols) -> str:
    parts = []
    for c in cols:
        v = row[c]
        name = c[4:] if c.startswith("tag:") else c
        if c in ("loss",):
            if not isinstance(v, str):  # an error row whose checkpoint, and every file of its run, could not
                return f"{row.get('run', '?')} (settings unread)"  # be read: not an objective (was 'nan p_switch=None')
            parts.insert(0, v)
        elif isinstance(v, float) and v != v:  # a setting a run's config lacks (train_classes: the data set's
            parts.append(f"{name}=None")  # own split), in a number column: as in a text column, not 'nan'
        elif isinstance(v, float) and float(v).is_integer():
            parts.append(f"{name}={int(v)}")
        else:
            parts.append(f"{name}={v}")
    return " ".join(parts) if parts else str(row.get("run", "?"))


def _objectives(df, use: np.ndarray) -> tuple[list[str], list[str]]:
    """(axes, the objective of every row of ``df``): the hyper-parameters that vary among the rows of
    ``use`` (an axis fixed by another dropped; the epoch of ``--epoch all``), and each row's label of
    those other than the seed (a user tag ``objective`` wins; an untrained row is ``untrained``)."""
    P = df[use]
    hyper = [c for c in HYPER_COLUMNS if c in df.columns] + sorted(
        c for c in df.columns if c.startswith("tag:") and c not in ("tag:seed", "tag:objective"))
    axes = _independent(P, _varying(P, hyper))
    if "epoch" in P.columns and (P["selection"] == "epoch").any() and P["epoch"].nunique() > 1:
        axes = axes + ["epoch"]
    obj_cols = [a for a in axes if a != "loss_family"]
    labels = [_label(r, obj_cols) if obj_cols else str(r["run"]) for _, r in df.iterrows()]
    if "tag:objective" in df.columns:  # a run without the tag (a YAML entry that names none) keeps its label
        labels = [lab if t is None or (isinstance(t, float) and t != t) or t == "" else str(t)
                  for t, lab in zip(df["tag:objective"], labels)]
    labels = ["untrained" if sel == "untrained" else lab for sel, lab in zip(df["selection"], labels)]
    return axes, labels


def study_statistics(df, *, target: str = "R@1", exclude=(), n_boot: int = 1000, seed: int = 1234,
                     splits: dict[str, str] | None = None, measured: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every statistic of a study table (one row per checkpoint) -> a JSON-able dict (+ ``_runs``).

    ``splits`` maps measure names to their split (the registry's); the measures are the columns of
    ``df`` named there. ``measured`` maps a row's ``id`` to the data set it was measured on (a study
    with ``--dataset`` measures every run on that one); a row not in it (or without one) counts as
    measured on the data set it was trained on (its ``dataset`` column): ``datasets`` lists them.
    Rows with ``status != "ok"``, untrained reference rows, companion final-epoch rows (when the
    study selected best epochs) and rows matching ``exclude`` take no part in the correlations.
    ``_runs`` is ``df`` with the added columns ``objective``, ``primary``, ``excluded``,
    ``untrained_target`` and ``beats_untrained``.
    """
    df = df.copy()
    # why a row's measures are NaN ({measure: reason}, from measure_entry): read here, not a column of the table
    why_col = df.pop(UNDEFINED_KEY) if UNDEFINED_KEY in df.columns else None
    if "status" not in df.columns:
        df["status"] = "ok"
    for c in ("selection", "untrained", "run", "id"):
        if c not in df.columns:
            df[c] = "given" if c == "selection" else ""
    splits = dict(splits or {})
    target_split = splits.get(target) or "test"
    measures = [m for m in splits if m in df.columns and m != target]
    if target not in df.columns:
        from embedscope.errors import EmbedscopeError

        if not (df["status"] == "ok").any():
            measures = []
            df[target] = np.nan
        elif target.startswith("NR-Prec:"):
            # (a data set whose properties are fixed by the code is refused before any work: run_study)
            have = sorted(c[len("NR-Prec:"):] for c in df.columns if isinstance(c, str) and c.startswith("NR-Prec:"))
            raise EmbedscopeError(
                f"--target {target}: no measured embedding holds the property '{target[8:]}' ("
                + (f"they hold: {', '.join(have)}" if have else "they hold no properties")
                + "; the properties of a cub200 or cars196 folder are known only once its images are embedded)")
        else:
            raise EmbedscopeError(f"--target {target}: no such measure in the study")
    ok = (df["status"] == "ok").to_numpy()
    # a measure equal to the target in every row (P@1 is R@1 by definition) says nothing: left out
    identical = []
    if ok.any():
        t = np.array([_num(v) for v in df.loc[ok, target]])
        for m in list(measures):
            v = np.array([_num(x) for x in df.loc[ok, m]])
            if np.array_equal(np.isnan(v), np.isnan(t)) and np.allclose(v[~np.isnan(v)], t[~np.isnan(t)],
                                                                         rtol=0, atol=1e-12):
                identical.append(m)
                measures.remove(m)
    # the untrained reference of each run; better = in the target's direction (lower for rho, none for pi_intra)
    direction = target_direction(target)
    tmap = {r["id"]: r[target] for _, r in df.iterrows() if r["selection"] == "untrained" and r["status"] == "ok"}
    df["untrained_target"] = [tmap.get(u, np.nan) if u else np.nan for u in df["untrained"].fillna("")]
    bt = []
    for _, r in df.iterrows():
        if (r["selection"] == "untrained" or r["status"] != "ok" or not np.isfinite(_num(r["untrained_target"]))
                or direction == "none"):
            bt.append(None)
        elif direction == "lower":
            bt.append(bool(_num(r[target]) < _num(r["untrained_target"])))
        else:
            bt.append(bool(_num(r[target]) > _num(r["untrained_target"])))
    df["beats_untrained"] = bt
    primary = _primary_mask(df) & ok
    df["primary"] = primary
    unmatched: dict[str, dict[str, Any]] = {}
    if len(exclude or []):
        # --exclude may name the objective: as labelled over the selected runs before anything is left out
        named = {c for c, _, _, _ in check_exclude(exclude)}
        before = df.assign(objective=_objectives(df, primary)[1]) if "objective" in named else df
        each: list = []
        excluded = _exclude_mask(before, exclude, each)
        for expr, col, op, mi in each:  # one that leaves no run out (a misspelt value): said, with the runs' values
            if not (mi & primary).any():
                cells = before.loc[primary, col]
                if op in ("==", "!="):
                    vals = sorted({str(v) for v in cells if _given(v)})
                    unmatched[expr] = {"column": col, "values": vals if len(vals) <= 8 else []}
                else:  # a comparison: the range of the values
                    num = np.array([_num(v) for v in cells], dtype=np.float64)
                    num = num[np.isfinite(num)]
                    unmatched[expr] = {"column": col, "range": [float(num.min()), float(num.max())] if num.size else []}
    else:
        excluded = np.zeros(len(df), bool)
    use = primary & ~excluded
    df["excluded"] = excluded
    axes, labels = _objectives(df, use)
    if excluded.any():
        # a row left out is labelled as before anything was left out (as --exclude names it): labelled over the
        # runs kept, a p_switch=0.3 run read 'margin' beside the kept p_switch=0 runs that are 'margin'
        labels = [was if out else now for now, was, out in zip(labels, _objectives(df, primary)[1], excluded)]
    df["objective"] = labels
    # the points over runs in the order of their ids (as those over objectives are in the order of their
    # labels): the bootstrap's resamples pick positions, so the same runs listed in another order
    # (grid.csv rows merged by several train-grid calls, a glob, a YAML file) give the same intervals
    P = df[use].sort_values("id", kind="mergesort")
    seed_col = "seed" if "seed" in P.columns else None
    for c in [target] + measures:
        P[c] = P[c].map(_value)
    grp = P.groupby("objective", sort=True)
    OB = grp[[target] + measures].mean()  # over the seeds with a value (NaN only when none has one)
    Osd = grp[[target] + measures].std(ddof=1)
    n_seeds = grp.size()
    n_valued = grp[[target] + measures].count()  # the seeds each mean is over (said: objectives' <measure>_n)
    # the seeds of each objective that failed (error rows, selected and not --exclude'd): in no mean
    failed_rows = _primary_mask(df) & ~ok & ~excluded
    n_failed = df.loc[failed_rows, "objective"].value_counts()

    corr_rows = []
    gran = {}
    context = [seed_col] if seed_col and seed_col not in axes else []
    # every measure of a level at once (the same resamples as one correlate() call per measure)
    per_level = {level: (correlate_many(tab[measures].to_numpy(np.float64).T, tab[target].to_numpy(np.float64),
                                        n_boot=n_boot, seed=seed) if measures else [])
                 for level, tab in (("objectives", OB), ("runs", P))}
    gran_all = granulated_tau_many(P, measures, target, [a for a in axes if a != "loss_family"], context) \
        if axes else {}
    for k, m in enumerate(measures):
        for level, tab in (("objectives", OB), ("runs", P)):
            c = per_level[level][k]
            x, y = tab[m].to_numpy(np.float64), tab[target].to_numpy(np.float64)
            has = np.isfinite(x) & np.isfinite(y)
            corr_rows.append({"measure": m, "split": splits.get(m, ""), "target": target, "level": level, **c,
                              "n_left_out": int(len(tab) - has.sum()),
                              "note": _why_undefined(x[has], y[has], target, target_split)})
        g = gran_all[m] if axes else {"psi": float("nan"), "per_axis": {}, "groups": {}}
        gran[m] = g
        for r in corr_rows[-2:]:
            r["granulated_tau"] = g["psi"]
    by_run = {r["measure"]: r for r in corr_rows if r["level"] == "runs"}
    reg = (P["p_switch"].map(_num).fillna(0.0) > 0).to_numpy(dtype=bool) if "p_switch" in P else np.zeros(len(P), bool)
    ranking = sorted(
        ({"measure": m, "kendall": by_run[m]["kendall"], "kendall_lo": by_run[m]["kendall_lo"],
          "kendall_hi": by_run[m]["kendall_hi"], "abs_kendall": abs(by_run[m]["kendall"]),
          "granulated_tau": gran[m]["psi"], "split": splits.get(m, "")}
         for m in measures if np.isfinite(by_run[m]["kendall"])),
        key=lambda r: -r["abs_kendall"])

    # robustness
    robust: dict[str, Any] = {}
    final_rows = df[(df["selection"] == "final") & ok & ~excluded]
    FO = None
    if (df["selection"] == "best").any() and len(final_rows):
        F = final_rows.copy()
        for c in [target] + measures:
            F[c] = F[c].map(_value)
        FO = F.groupby("objective")[[target] + measures].mean()
    if "normalize" in P:
        normed = P[P["normalize"].map(lambda v: str(v) in ("True", "true", "1", "1.0")).to_numpy(dtype=bool)]
    else:
        normed = P.iloc[:0]
    for m in measures:
        rr: dict[str, Any] = {}
        # the objectives with both values (as the correlation over objectives: a missing value drops its pair)
        has = (np.isfinite(OB[m].to_numpy(np.float64)) & np.isfinite(OB[target].to_numpy(np.float64)))
        OK = OB[has]
        if len(OK) >= 4:
            loo = {}
            xo, yo = OK[m].to_numpy(np.float64), OK[target].to_numpy(np.float64)
            for i, o in enumerate(OK.index):  # leave objective o out
                sel = np.arange(len(OK)) != i
                loo[o] = _pearson(xo[sel], yo[sel])
            vals = {k: v for k, v in loo.items() if np.isfinite(v)}
            full = _pearson(xo, yo)
            if vals and np.isfinite(full):
                worst = max(vals, key=lambda k: abs(vals[k] - full))
                rr.update(loo_min=min(vals.values()), loo_max=max(vals.values()), loo_most_influential=worst,
                          loo_r_without_it=vals[worst])
        # (over at least 3 objectives with both values: over two, r is ±1 whatever they are)
        if FO is not None and len(FO) >= 3:
            rr["final_epoch_pearson"] = _pearson_3(FO[m], FO[target])
        if 0 < len(normed) < len(P) and len(normed) >= 3:
            NO = normed.groupby("objective")[[target, m]].mean()
            if len(NO) >= 3:
                rr["normalised_only_pearson"] = _pearson_3(NO[m], NO[target])
                rr["normalised_only_objectives"] = int(len(NO))
        # over the defined values only (a measure undefined for some runs: ρ of a collapsed model);
        # fewer than one (two) of them give NaN, without numpy's empty-slice warnings on the terminal
        sds = Osd[m].to_numpy(np.float64)
        sds = sds[np.isfinite(sds)]
        within = float(sds.mean()) if (n_seeds > 1).any() and sds.size else float("nan")
        obs = OB[m].to_numpy(np.float64)
        obs = obs[np.isfinite(obs)]
        between = float(np.std(obs, ddof=1)) if obs.size > 1 else float("nan")
        if obs.size > 1 and constant_rows(obs)[0]:  # the same at every objective up to rounding (the means of
            between = 0.0  # equal values over other seeds): no spread between them, not a ratio of 1e14
        rr.update(seed_sd_within=within, sd_between_objectives=between,
                  seed_spread_ratio=(within / between if between and np.isfinite(between) and between > 0
                                     else float("nan")))
        robust[m] = rr
    sel_rows = df[primary]
    nb_mask = sel_rows["beats_untrained"].map(lambda v: v is False).to_numpy(dtype=bool)
    no_better = sel_rows[nb_mask]
    # the selected runs --exclude left out are compared too (the counts above): how many of them, said
    sel_out = sel_rows["excluded"].to_numpy(dtype=bool)
    sel_cmp = sel_rows["beats_untrained"].map(lambda v: v is not None).to_numpy(dtype=bool)
    final_nb = df[(df["selection"] == "final") & ok]["beats_untrained"].map(lambda v: v is False)
    objectives = []
    for o in OB.index:
        # n_seeds: the objective's runs in the statistics; <measure>_n: those with a value of the measure,
        # which its mean and sd are over; n_failed: its runs that failed (error rows), in no mean
        rec = {"objective": o, "n_seeds": int(n_seeds[o]), "n_failed": int(n_failed.get(o, 0)),
               target: float(OB.loc[o, target]), f"{target}_sd": _f(Osd.loc[o, target]),
               f"{target}_n": int(n_valued.loc[o, target])}
        for m in measures:
            rec[m] = float(OB.loc[o, m])
            rec[f"{m}_sd"] = _f(Osd.loc[o, m])
            rec[f"{m}_n"] = int(n_valued.loc[o, m])
        objectives.append(rec)
    # Fig. 4: metric correlation matrix over objectives (test-split measures and the target)
    mnames = [target] + [m for m in measures if splits.get(m) == "test"]
    mat = np.full((len(mnames), len(mnames)), np.nan)
    if len(OB) >= 3:
        for i, a in enumerate(mnames):
            for j, b in enumerate(mnames):
                # the objectives with both values, as the correlation table; at least 3 of them (over two
                # points r is ±1 whatever the values: a metric undefined for a collapsed objective filled
                # its row with ±1.00)
                xa, xb = _finite_pairs(OB[a], OB[b])
                mat[i, j] = _pearson(xa, xb) if xa.size >= 3 else np.nan
    return {
        "target": target,
        # the split the target is taken on (rho: train) and which way is better (the untrained comparison)
        "target_split": target_split,
        "target_direction": direction,
        "exclude": list(exclude or []),
        # each --exclude that leaves out no selected run: its column and the values the runs hold there
        "exclude_unmatched": unmatched,
        "undefined": _undefined_runs(P, [target] + measures, why_col),
        "n_boot": int(n_boot),
        "seed": int(seed),
        "axes": axes,
        "n_points": {"objectives": int(len(OB)), "runs": int(len(P)), "rows": int(len(df)),
                     "errors": int((~ok).sum()), "excluded": int((primary & excluded).sum()),
                     # ρ-regularised points kept (Roth's Fig. 5 leaves them out: --exclude 'p_switch>0')
                     "regularised_runs": int(reg.sum()),
                     "regularised_objectives": int(P.loc[reg, "objective"].nunique())},
        "measures": measures,
        "identical_to_target": identical,
        # the data sets of the runs in the statistics, when more than one: their targets do not compare
        "datasets": _measured_datasets(P, measured),
        "correlations": corr_rows,
        "granulated": gran,
        "ranking": ranking,
        "robustness": robust,
        "untrained": {
            "selected_no_better": sorted(no_better["id"].tolist()),
            "selected_compared": int(sel_cmp.sum()),
            # of those: the runs --exclude leaves out of the statistics
            "excluded_no_better": int((nb_mask & sel_out).sum()),
            "excluded_compared": int((sel_cmp & sel_out).sum()),
            "final_no_better": int(final_nb.sum()),
            "final_compared": int(df[(df["selection"] == "final") & ok]["beats_untrained"].map(
                lambda v: v is not None).sum()),
            "best_epoch_1": int(((sel_rows["selection"] == "best") & (sel_rows["epoch"].map(_num) == 1)).sum())
            if "epoch" in sel_rows else 0,
            "direction": direction,
        },
        "normalisation": {str(k): int(v) for k, v in P["normalize"].astype(str).value_counts().items()}
        if "normalize" in P else {},
        "objectives": objectives,
        "metric_matrix": {"names": mnames, "pearson": mat.tolist()},
        "_runs": df,
    }


def _measured_datasets(P, measured: dict[str, Any] | None) -> list[str]:
    """The data sets the runs ``P`` were measured on (``measured``: by id), else trained on (``dataset``)."""
    measured = measured or {}
    trained = P["dataset"] if "dataset" in P.columns else [None] * len(P)
    sets = set()
    for i, d in zip(P["id"], trained):
        m = measured.get(i)
        v = m if _given(m) else d
        if _given(v):
            sets.add(str(v))
    return sorted(sets)


#: the key of a study row holding {measure: why it is NaN} (row JSON only; runs.csv has the text column
#: ``undefined``)
UNDEFINED_KEY = "_undefined"

# the notes of correlations.csv (``note``): NOTE_TOO_FEW, NOTE_MEASURE_CONSTANT, NOTE_TWO_POINTS, in
# embedscope.names (the study figures read them too)


def target_direction(target: str) -> str:
    """``higher``, ``lower`` or ``none``: which values of ``target`` are better (the registry's
    ``direction``; a name the registry does not know, as in a table made by hand: higher)."""
    from embedscope.analyses.registry import MEASURES

    return MEASURES[target].direction if target in MEASURES else "higher"


def is_constant_target_note(note: Any, target: str) -> bool:
    """Whether a correlation row's ``note`` says that the target is the same at every point."""
    return (isinstance(note, str) and note.startswith("not defined: ")
            and f" {target} is the same at every point" in note)


def _why_undefined(x: np.ndarray, y: np.ndarray, target: str, split: str = "test") -> str:
    """Why the correlation of the finite points (x, y) is not defined or says nothing ('' when it is fine)."""
    if x.size < 2:
        return NOTE_TOO_FEW
    if constant_rows(y)[0]:
        return f"not defined: {split} {target} is the same at every point ({y[0]:.4g})"
    if constant_rows(x)[0]:
        return NOTE_MEASURE_CONSTANT
    if x.size == 2:
        return NOTE_TWO_POINTS
    return ""


def _undefined_runs(P, names: list[str], why_col) -> dict[str, dict[str, Any]]:
    """{measure: {"runs": ids, "reasons": {reason: ids}}} of the runs in the statistics where the measure has
    no finite value (left out of its correlations), each with the reason measure_entry recorded."""
    out: dict[str, dict[str, Any]] = {}
    whys = why_col.reindex(P.index) if why_col is not None else None
    for m in names:
        bad = ~np.isfinite(P[m].to_numpy(np.float64))
        if not bad.any():
            continue
        ids = [str(i) for i in P.loc[bad, "id"]]
        reasons: dict[str, list[str]] = {}
        for rid, w in zip(ids, (whys[bad] if whys is not None else [None] * len(ids))):
            why = w.get(m) if isinstance(w, dict) else None
            reasons.setdefault(str(why) if why else "no value", []).append(rid)
        out[m] = {"runs": ids, "reasons": reasons}
    return out


def group_reasons(why: dict[str, str]) -> dict[str, list[str]]:
    """{measure: reason} -> {reason: [measures]}, in the order of first appearance (a collapsed model
    gives every NR-Prec:<property> the same reason: said once)."""
    out: dict[str, list[str]] = {}
    for m, r in why.items():
        out.setdefault(str(r), []).append(m)
    return out


def _short_list(ids: list[str], k: int = 3) -> str:
    return ", ".join(ids[:k]) + (f", … ({len(ids) - k} more)" if len(ids) > k else "")


def study_notes(stats: dict[str, Any]) -> list[str]:
    """The lines that say why numbers of a study are missing ('–') or say nothing: every run left out,
    a constant target or measure, too few points, and the runs where a measure is undefined (with the
    reasons the measures gave). The terminal and the report print the same lines."""
    n = stats.get("n_points", {})
    lines: list[str] = []
    shown = _shown_measures(stats)
    for expr, u in (stats.get("exclude_unmatched") or {}).items():
        u = u if isinstance(u, dict) else {}
        vals = [str(v) for v in u.get("values") or []]
        rng = u.get("range") if isinstance(u.get("range"), list) and len(u.get("range")) == 2 else None
        lines.append(f"--exclude '{expr}' leaves out no run" + (
            f" (the runs' values of {u.get('column')}: {', '.join(vals)})" if vals else
            f" (the runs' {u.get('column')} is from {_g(rng[0])} to {_g(rng[1])})" if rng else ""))
    if n.get("runs", 0) == 0:
        why = (f"--exclude left out all {n.get('excluded')}" if n.get("excluded") else
               "no checkpoint was measured" if n.get("errors") else "the study has no run")
        lines.append(f"no run enters the statistics ({why}): every correlation is not defined (–)")
        return lines
    sets = [str(d) for d in stats.get("datasets") or []]
    if len(sets) > 1:  # (one data set's R@1 beside another's: a correlation of the data sets, not of the models)
        lines.append(f"the runs come from {len(sets)} data sets ({', '.join(sets)}): a target measured on one does "
                     f"not compare with another's; correlate each data set's runs on their own "
                     f"(--exclude 'dataset!={sets[0]}')")
    corr = [r for r in stats.get("correlations") or [] if isinstance(r, dict)]
    said: dict[tuple[str, str], list[str]] = {}  # (who, note) -> the levels it holds for
    for level in ("objectives", "runs"):
        rows = [str(r.get("measure")) for r in corr if r.get("level") == level]
        groups: dict[str, list[str]] = {}
        for r in corr:
            if r.get("level") == level and r.get("note"):
                groups.setdefault(str(r["note"]), []).append(str(r["measure"]))
        for note, ms in groups.items():
            rest = [m for m in rows if m not in ms]
            ms, rest = [shown.get(m, m) for m in ms], [shown.get(m, m) for m in rest]
            who = (", ".join(ms) if len(ms) < 2 or len(rest) > 3 or len(rest) >= len(ms) else
                   "every measure" + (f" but {', '.join(rest)}" if rest else ""))
            said.setdefault((who, note), []).append(level)
    for (who, note), levels in said.items():
        lines.append(f"over {' and over '.join(levels)}: {who}: {note}")
    und = stats.get("undefined") or {}
    by_runs: dict[tuple, list[str]] = {}
    for m, u in und.items():
        if isinstance(u, dict) and isinstance(u.get("runs"), list):
            by_runs.setdefault(tuple(u["runs"]), []).append(m)
    for ids, ms in by_runs.items():
        why = "; ".join(f"{', '.join(shown.get(str(m), str(m)) for m in g)} ({r})" for r, g in group_reasons(
            {m: " / ".join(und[m].get("reasons") or {"no value": 0}) for m in ms}).items())
        lines.append(f"undefined in {len(ids)} of {n.get('runs')} runs ({_short_list(list(ids))}), left out of "
                     f"these measures' correlations (an objective's mean is over its other seeds): {why}")
    fewer = _fewer_seeds(stats, shown)
    if fewer:
        one = len(fewer) == 1
        lines.append(f"{len(fewer)} objective{'' if one else 's'} average{'s' if one else ''} fewer seeds than "
                     f"{'it has' if one else 'they have'} (each mean and sd is over the seeds with a "
                     f"value; correlations.json 'objectives': <measure>_n, n_failed): {_short_list(fewer)}")
    return lines


def _g(v) -> str:
    try:
        return f"{float(v):.4g}"
    except (TypeError, ValueError):
        return str(v)


def _shown_measures(stats: dict[str, Any]) -> dict[str, str]:
    """Each measure name of ``stats`` as a note shows it: one longer than :data:`~embedscope.text.SHOWN_NAME`
    (``NR-Prec:<property>``: a property name may have 255 characters) shortened in the middle, two never alike
    (the terminal and the report print the notes; the study's files keep the names whole)."""
    from embedscope.analyses.result import _short_unique
    from embedscope.text import SHOWN_NAME

    def listed(v) -> list:
        return list(v) if isinstance(v, (list, dict)) else []

    names = list(dict.fromkeys(str(m) for m in (
        stats.get("target"), *listed(stats.get("measures")), *listed(stats.get("undefined")),
        *(r.get("measure") for r in listed(stats.get("correlations")) if isinstance(r, dict)))))
    return dict(zip(names, _short_unique(names, SHOWN_NAME)))


def _fewer_seeds(stats: dict[str, Any], shown: dict[str, str] | None = None) -> list[str]:
    """'objective (rho over 2 of 3 seeds; 1 more seed failed (error rows))' for every objective of ``stats`` whose mean of
    some measure is over fewer seeds than it has, or that has failed seeds (error rows); ``shown``: the measures'
    names as the notes show them (:func:`_shown_measures`)."""
    shown = shown or {}
    target = stats.get("target")
    names = [target] + [m for m in stats.get("measures") or []]
    out = []
    for o in stats.get("objectives") or []:
        if not isinstance(o, dict) or not isinstance(o.get("n_seeds"), int):
            continue
        k = o["n_seeds"]
        short: dict[int, list[str]] = {}
        for m in names:
            v = o.get(f"{m}_n")
            if isinstance(v, int) and v < k:
                short.setdefault(v, []).append(shown.get(str(m), str(m)))
        failed = o.get("n_failed") if isinstance(o.get("n_failed"), int) else 0
        if not short and not failed:
            continue
        parts = [f"{', '.join(ms)} over {v} of {k} seed{'' if k == 1 else 's'}" for v, ms in sorted(short.items())]
        if failed:
            parts.append(f"{failed} more seed{'' if failed == 1 else 's'} failed (error rows)")
        out.append(f"{o.get('objective')} ({'; '.join(parts)})")
    return out


def _f(v) -> float:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return v if math.isfinite(v) else float("nan")
