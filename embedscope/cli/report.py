"""embedscope report STUDY_DIR -o report.html: one self-contained HTML page of a study."""

from __future__ import annotations


def add_parser(sub, parents):
    p = sub.add_parser(
        "report", parents=parents, help="one self-contained HTML page of a study",
        description="Write one HTML page (figures embedded, no external requests) of a study folder made by "
        "'embedscope study': settings and provenance, correlations with intervals, the published values of "
        "Roth et al. beside ours, robustness, figures and the runs table.")
    p.add_argument("study", metavar="STUDY_DIR", help="study folder")
    p.add_argument("-o", "--output", required=True, metavar="OUT.html", help="the HTML page")
    p.add_argument("--force", action="store_true", help="replace an existing page")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from embedscope.study.report import write_report

    path = write_report(args.study, args.output, force=args.force)
    print(f"wrote {path}")
    return 0
