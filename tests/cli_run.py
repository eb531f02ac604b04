"""Run the command line in the test's process: ``cli_output(args)`` -> what it printed on stdout,
asserting exit code 0 (stderr in the failure message); ``run_cli(args)`` -> (exit code, stdout,
stderr); ``one_error_line(err, command)`` -> the one error line a failed command printed."""

import contextlib
import io

from embedscope.cli import main


def cli_output(args) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    assert rc == 0, err.getvalue()
    return out.getvalue()


def run_cli(args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def one_error_line(err: str, command: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"embedscope {command}: error: ") and "Traceback" not in err
    return lines[0]
