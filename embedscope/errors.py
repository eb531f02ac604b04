"""Errors that reach the user as one line (exit code 1, or 2 for usage errors)."""

from __future__ import annotations

import contextlib
import re

# torch's DataLoader re-raises a worker's exception as ``exc_type(msg)`` with
# msg = "Caught X in DataLoader worker process N.\nOriginal Traceback (most recent call last): ...".
_WORKER = re.compile(r"^Caught \w+ in DataLoader worker process \d+\.\nOriginal Traceback", re.S)


def _worker_message(message: str, cls: type | None = None) -> str:
    """The original message of an error re-raised from a DataLoader worker: what follows the traceback's
    last "module.ClassName: " of ``cls`` (the message may hold a line break, a file name's: raw, the error
    line escapes it), else the traceback's last line."""
    if cls is not None:
        head = f"\n{cls.__module__}.{cls.__qualname__}: "
        at = message.rfind(head)
        if at >= 0:
            return message[at + len(head):].rstrip("\n")
    last = message.rstrip().splitlines()[-1]
    # the traceback's last line is "module.ClassName: message"
    m = re.match(r"^[\w.]+: (.*)$", last)
    return m.group(1) if m else last


class EmbedscopeError(Exception):
    """A problem with the user's input or environment: printed as one line, exit code 1.

    Raised in a DataLoader worker process, it reaches the main process with the same one-line
    message (torch's worker traceback is dropped).
    """

    exit_code = 1

    def __init__(self, *args) -> None:
        if len(args) == 1 and isinstance(args[0], str) and _WORKER.match(args[0]):
            args = (_worker_message(args[0], type(self)),)
        super().__init__(*args)


class UsageError(EmbedscopeError):
    """A wrong combination of command-line options: printed as one line, exit code 2."""

    exit_code = 2


class EmbedscopeWarning(UserWarning):
    """Something the user should know that does not stop the work (a data set whose counts differ from
    the official download's, ...): the command line prints it as one line,
    ``embedscope CMD: warning: ...``; a Python caller gets a normal warning."""


class Interrupted(EmbedscopeError):
    """A signal the command line received, raised in a thread other than the main one (a study's Dask
    worker thread): an ordinary exception there, so that the task fails cleanly while the main thread
    stops the command (:func:`embedscope.progress.check_signals`). Reaching the command line (a pool
    thread's work re-raised in the main one) it ends the command as the signal does: "interrupted"
    and 130 for SIGINT, "terminated" and 128 + its number otherwise."""

    def __init__(self, signum: int) -> None:
        import signal

        self.signum = int(signum)
        name = "Ctrl-C" if self.signum == signal.SIGINT else f"signal {self.signum}"
        super().__init__(f"stopped by {name} before this work was done")


class Terminated(BaseException):
    """SIGTERM / SIGHUP turned into an exception by the command line, so that ``finally`` blocks
    (temporary files, half-written outputs) run before the process ends."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def stop_signals() -> set:
    """The signals that stop a command: Ctrl-C (SIGINT), SIGTERM and SIGHUP (those the platform has)."""
    import signal

    return {s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP")) if s is not None}


@contextlib.contextmanager
def stop_signals_held():
    """The :func:`stop_signals` blocked in this thread meanwhile: held, not lost (their handlers act on
    them at the end); nothing is held where ``signal.pthread_sigmask`` is missing."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals())
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class MissingKey(EmbedscopeError, KeyError):
    """A name that is not among the available keys (a result's measure, a model's name ...).

    Both an :class:`EmbedscopeError` (one line for the user) and a :class:`KeyError` (so that
    ``except KeyError`` keeps working); its ``str()`` is the plain message, not KeyError's quoted repr.
    """

    def __str__(self) -> str:
        return Exception.__str__(self)
