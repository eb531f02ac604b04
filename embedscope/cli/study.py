"""embedscope study SRC -o STUDY_DIR: every measure of many checkpoints and their correlations (docs/methods.md §6)."""

from __future__ import annotations

from embedscope.cli.common import dataset_name, device_name, nonnegative_int, seed_int


def add_parser(sub, parents):
    p = sub.add_parser(
        "study", parents=parents, help="measure many checkpoints and correlate each measure with test R@1",
        description="Embed the train and test split of every checkpoint of SRC (a train-grid folder, a glob of "
        "checkpoints in quotes, or a YAML file listing checkpoints with tags), take every measure of the "
        "registry on its split, and correlate each with the target over objectives (mean over seeds, as "
        "Roth et al. Fig. 5) and over runs: Pearson, Spearman, Kendall tau with bootstrap 95% intervals, "
        "Jiang et al.'s granulated tau, robustness, untrained reference. Writes STUDY_DIR/runs.csv, "
        "runs.parquet, correlations.csv/json and figures/. Resumable: run the same command again after an "
        "interruption. Embeddings are cached by checkpoint hash (--cache-dir). See docs/studies.md.")
    p.add_argument("source", metavar="SRC", help="train-grid folder, glob of checkpoints, or YAML file")
    p.add_argument("-o", "--output", required=True, metavar="STUDY_DIR", help="study folder")
    p.add_argument("--epoch", default="best", choices=["best", "last", "all"],
                   help="which checkpoint of each run: best test R@1 (Roth's protocol; selects on the test set), "
                   "last, or all kept epochs (default: best)")
    p.add_argument("--target", default="R@1",
                   help="the measure the others are correlated with, on its own split (default: R@1, test); "
                   "--epoch best still selects by test R@1")
    p.add_argument("--exclude", action="append", default=[], metavar="EXPR",
                   help="leave matching runs out of the statistics, e.g. 'p_switch>0' (as Roth Fig. 5) or "
                   "'loss==lifted' (repeatable)")
    p.add_argument("--measures", nargs="+", metavar="NAME",
                   help="only these measures of the registry, e.g. rho R@1 NR-Prec:shape "
                   "(default: all; the target is always measured)")
    p.add_argument("--dataset", type=dataset_name, help="data set to embed (default: the one each checkpoint was trained on)")
    p.add_argument("--root", help="data set folder (default: the checkpoint's)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="local Dask workers, single-threaded worker threads in this process (default: one per "
                   "core this process may use; 0 = serial in this process)")
    p.add_argument("--worker-processes", action="store_true",
                   help="the local Dask workers are processes (each imports torch: pays off for large checkpoints "
                   "or long studies) instead of threads (not with --workers 0, which measures serially)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="use an existing Dask scheduler (tcp://host:8786) and its workers instead of --workers; "
                   "relative paths are made absolute here (docs/studies.md)")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="embedding cache (default: $EMBEDSCOPE_CACHE/embeddings, else $XDG_CACHE_HOME/embedscope/embeddings, "
                   "else ~/.cache/embedscope/embeddings)")
    p.add_argument("--metric", default="cosine", choices=["cosine", "euclidean"],
                   help="retrieval ranking distance (default: cosine)")
    p.add_argument("--seed", type=seed_int, default=1234, help="k-means and bootstrap seed (default: 1234)")
    p.add_argument("--bootstrap", type=nonnegative_int, default=1000, metavar="B",
                   help="bootstrap resamples (default: 1000; 0: no intervals)")
    p.add_argument("--device", default="auto", type=device_name,
                   help="auto (CUDA when present), cpu, cuda or cuda:N (default: auto)")
    p.add_argument("--no-figures", action="store_true", help="skip the figures")
    p.add_argument("--no-progress", action="store_true", help="no progress bar, and fewer lines")
    p.add_argument("--force", action="store_true",
                   help="start the study again: remove its finished rows and measure every checkpoint "
                   "(also in a folder with other settings)")
    p.set_defaults(func=run)
    return p


def _notes_only(line: str) -> None:
    """``--no-progress``'s echo: no per-phase lines, but the ``note:`` lines (a cache that cannot be
    written, checkpoints read as another format) stand, as docs/studies.md says (they were dropped)."""
    if line.startswith("note: "):
        print(line)


def run(args) -> int:
    import sys
    from pathlib import Path

    from embedscope.study.run import run_study
    from embedscope.study.stats import study_notes
    from embedscope.tables import format_table
    from embedscope.text import safe

    res = run_study(args.source, args.output, epoch=args.epoch, dataset=args.dataset, root=args.root,
                    cache_dir=args.cache_dir, workers=args.workers, scheduler=args.scheduler,
                    worker_processes=args.worker_processes, force=args.force,
                    target=args.target, exclude=args.exclude, metric=args.metric, seed=args.seed,
                    n_boot=args.bootstrap, device=args.device, measures=args.measures, figures=not args.no_figures,
                    progress=not args.no_progress, echo=_notes_only if args.no_progress else print,
                    notice=lambda s: print(f"embedscope study: {safe(s)}", file=sys.stderr, flush=True))
    st = res["stats"]

    def num(v):  # statistics read back from correlations.json hold a missing number as null: '–' as NaN is
        return float("nan") if v is None else v

    tau = {x["measure"]: x.get("kendall") for x in st["correlations"] if x["level"] == "runs"}
    rows = [{"measure": r["measure"], "split": r.get("split"), "r (objectives)": num(r.get("pearson")),
             "lo": num(r.get("pearson_lo")), "hi": num(r.get("pearson_hi")), "tau (runs)": num(tau.get(r["measure"])),
             "granulated tau": num(r.get("granulated_tau"))}
            for r in st["correlations"] if r["level"] == "objectives"]
    order = {r["measure"]: i for i, r in enumerate(st["ranking"])}
    rows.sort(key=lambda r: order.get(r["measure"], 999))
    # a measure name longer than SHOWN_NAME (NR-Prec:<property>: a property name may have 255 characters) shortened
    # in the middle, two never alike, as in the report; correlations.csv / .json keep them whole
    from embedscope.study.report import _names

    names = _names(st)
    rows = [{**r, "measure": names.get(str(r["measure"]), r["measure"])} for r in rows]
    target = names.get(str(st["target"]), st["target"])
    n = st["n_points"]
    tsplit = st.get("target_split") or "test"  # (statistics of an earlier version: every target was a test one)
    if n["runs"] == 0 and n.get("excluded"):
        # every run left out: a table of dashes would say nothing; the rows stay (nothing is measured again)
        print(f"embedscope study: error: --exclude {' '.join(repr(e) for e in args.exclude)} leaves out every run "
              f"(all {n['excluded']}): nothing to correlate; the measured rows are in "
              f"{safe(Path(args.output) / 'runs.csv')} (excluded = True): run again with another --exclude "
              "(nothing is measured again)", file=sys.stderr)
        _say_failed(res, safe)
        return 1
    if n["runs"]:
        print(format_table(rows, title=f"study {Path(args.output)}: {n['runs']} runs, {n['objectives']} "
                           f"objectives, target {tsplit} {target} (ranked by |tau| over runs)", nan="–"))
    for line in study_notes(st):  # why a number is '–' (or says nothing): one line per reason
        print(f"note: {safe(line)}")
    k = n.get("objectives")
    if rows and args.bootstrap and isinstance(k, int) and 3 <= k < 5:  # as the report warns: lo and hi say little
        from embedscope.study.report import _degenerate_share

        print(f"note: only {k} objectives: {_degenerate_share(k):.0%} of the bootstrap resamples of {k} points hold "
              "at most two distinct points (r = ±1, or not defined), so lo and hi over objectives are not "
              "meaningful; read the correlations over objectives as a sketch")
    same = [names.get(str(m), str(m)) for m in st.get("identical_to_target") or []]
    if same:  # (asked for with --measures, or by default: P@1 is R@1) and not in the table: said, as in the report
        print(f"note: left out, equal to the target {safe(target)} in every run: {safe(', '.join(same))}")
    u = st["untrained"]
    if u.get("direction") == "none":
        print(f"selected checkpoints against the untrained network: not compared (neither a higher nor a lower "
              f"{safe(target)} is better)")
    else:
        out = u.get("excluded_compared") or 0  # (the runs --exclude left out are counted too: said)
        print(f"selected checkpoints no better than the untrained network: {len(u['selected_no_better'])} of "
              f"{u.get('selected_compared', '?')}" + (f", of which {u.get('excluded_no_better', 0)} of the {out} "
                                                       "left out by --exclude" if out else ""))
    n_reg = n.get("regularised_objectives", 0)
    if n_reg:
        print(f"{n_reg} of the objectives are rho-regularised (p_switch > 0), which Roth's Fig. 5 leaves out: "
              "--exclude 'p_switch>0' compares like with like")
    drawn = st.get("figures")
    if drawn is None:  # statistics of an earlier version, reused: their figures are the ones on disk
        drawn = [] if args.no_figures else [p.stem for p in sorted(Path(args.output, "figures").glob("*.png"))]
    print(f"wrote {safe(Path(args.output) / 'runs.csv')}, runs.parquet, correlations.csv, correlations.json"
          + (f", figures/ ({', '.join(drawn)})" if drawn else ""))
    if not drawn and not args.no_figures:
        print(no_figures_line(n))
    from embedscope.study.run import stale_figures

    old = stale_figures(Path(args.output) / "figures", drawn)
    if old:  # (kept, as every output already written; but not of these statistics: a Fig. 5 of another target)
        print(f"note: {safe(Path(args.output) / 'figures')} still holds {', '.join(old)} of an earlier run of this "
              "study, not drawn from these statistics (the report leaves them out; delete them, or run without "
              "--no-figures to draw them again)")
    return 1 if _say_failed(res, safe) else 0


def no_figures_line(n: dict) -> str:
    """The line saying why a study drew no figure, from its ``n_points``
    (:func:`embedscope.study.report.no_figures_reason`; the report says the same)."""
    from embedscope.study.report import no_figures_reason

    why = no_figures_reason(n)  # (None: statistics of an earlier version, whose figures are not on disk)
    return f"no figures: {why or 'none on disk for these statistics (run the same command again to draw them)'}"


def _say_failed(res, safe) -> bool:
    """One line on stderr when checkpoints failed (-> True)."""
    import sys

    if not res["errors"]:
        return False
    rest = ("none was measured" if len(res["errors"]) >= len(res["rows"]) else "the rest were measured")
    print(f"embedscope study: error: {len(res['errors'])} of {len(res['rows'])} checkpoints failed "
          f"(e.g. {safe(res['errors'][0]['id'])}: {safe(res['errors'][0]['error'])}); {rest} — "
          "see the status and error columns of runs.csv", file=sys.stderr)
    return True
