"""Run the command line in the test's process: ``cli_output(args)`` -> what it printed on stdout,
asserting exit code 0 (stderr in the failure message); ``run_cli(args)`` -> (exit code, stdout,
stderr); ``exit_code(args)`` -> the exit code, the output left to capsys; ``one_error_line(err,
command)`` -> the one error line a failed command printed."""

import contextlib
import io

from embedscope.cli import main


def cli_output(args) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    assert rc == 0, err.getvalue()
    return out.getvalue()


def exit_code(args) -> int:
    """The exit code of the command line (argparse's usage errors included), its output left to capsys."""
    try:
        return main([str(a) for a in args])
    except SystemExit as e:  # argparse's own usage errors
        return e.code


def run_cli(args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = exit_code(args)
    return rc, out.getvalue(), err.getvalue()


def one_error_line(err: str, command: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"embedscope {command}: error: ") and "Traceback" not in err
    return lines[0]
