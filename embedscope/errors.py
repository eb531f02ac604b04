"""Errors that reach the user as one line (exit code 1, or 2 for usage errors)."""


class EmbedscopeError(Exception):
    """A problem with the user's input or environment: printed as one line, exit code 1."""

    exit_code = 1


class UsageError(EmbedscopeError):
    """A wrong combination of command-line options: printed as one line, exit code 2."""

    exit_code = 2
