"""Run the command line in the test's process: ``cli_output(args)`` -> what it printed on stdout,
asserting exit code 0 (stderr in the failure message)."""

import contextlib
import io

from embedscope.cli import main


def cli_output(args) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    assert rc == 0, err.getvalue()
    return out.getvalue()
