"""The docs name every option a user can give: each flag of each command's parser appears in README.md
or a page of docs/ (the converse of tests/test_audit_docs.py's check that every flag the docs name
is an option). Found missing by a read-through: `evaluate --k` and `saliency --name`."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# not a user's question: help, the traceback switch, and --output, the long spelling of -o
SELF_EVIDENT = {"-h", "--help", "--debug", "--output"}


def test_every_option_of_every_command_is_in_the_docs():
    from embedscope.cli import build_parser

    text = "\n".join(p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    missing = []
    for name, sub in build_parser().command_parsers.items():
        for action in sub._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag not in SELF_EVIDENT \
                        and not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text):
                    missing.append(f"{name} {flag}")
    assert not missing, f"options no page of the docs names: {missing}"
