"""embedscope report STUDY_DIR -o report.html: one self-contained HTML page of a study."""

from __future__ import annotations


def add_parser(sub, parents):
    p = sub.add_parser(
        "report", parents=parents, help="one self-contained HTML page of a study",
        description="Write one HTML page (figures embedded, no script, no external requests) of a study folder "
        "made by 'embedscope study': the failed checkpoints and the warnings first, settings and provenance, "
        "the untrained comparison, correlations with intervals, robustness, the published values of Roth et "
        "al. beside ours, the figures, the runs table, every checkpoint with its sha256, and the measures "
        "(docs/studies.md).")
    p.add_argument("study", metavar="STUDY_DIR", help="study folder")
    p.add_argument("-o", "--output", required=True, metavar="OUT.html", help="the HTML page")
    p.add_argument("--force", action="store_true", help="replace an existing page")
    p.set_defaults(func=run)
    return p


# the files of a study folder that the report reads or that `embedscope study` owns
STUDY_FILES = ("study.json", "correlations.json", "correlations.csv", "runs.csv", "runs.parquet")
STUDY_FOLDERS = ("figures", "rows")


def check_output(study, output) -> None:
    """Refuse, even with --force and before any work, a page that would replace a file of the study
    (its tables, its metadata, its figures or rows): the report's own inputs."""
    from pathlib import Path

    from embedscope.cli.output import refuse_inputs, same_file, within
    from embedscope.errors import UsageError

    d = Path(study)
    refuse_inputs([output], [d / f for f in STUDY_FILES])
    if same_file(output, d):
        raise UsageError(f"{output} is the study folder: choose another output name")
    inside = next((f for f in STUDY_FOLDERS if same_file(output, d / f) or within(output, d / f)), None)
    if inside is not None:
        raise UsageError(f"{output} is in the study's {inside}/ folder, which the study writes (a rerun would find "
                         "a stranger there): choose another output name, e.g. in the study folder itself")


def run(args) -> int:
    from pathlib import Path

    from embedscope.errors import EmbedscopeError
    from embedscope.study.report import write_report

    if not Path(args.study).exists():  # (was: "not a finished study folder (no study.json; ...)")
        raise EmbedscopeError(f"{args.study}: no such folder (a study folder made by 'embedscope study')")
    from embedscope.cli.output import check_suffix

    check_output(args.study, args.output)
    check_suffix(args.output, "-o", ".html")  # (-o emb.h5 --force replaced an HDF5 file with the page)
    path = write_report(args.study, args.output, force=args.force)
    from embedscope.text import safe

    print(f"wrote {safe(path)}")
    return 0
