"""Progress display that suits its destination.

On a terminal, :func:`progress_bar` is a tqdm bar that redraws in place (and disappears when done).
When stderr is not a terminal (a log file, a pipe, a batch job) a redrawing bar would write every
redraw into the log, so it prints at most one line when the phase ends (``desc: 15/15 batch in
2.3 s``) instead, or nothing with ``lines=False`` (for phases whose caller prints its own line,
as the trainer does per epoch). ``enabled=False`` (``--no-progress``) shows nothing at all.

:func:`clear` closes every open bar, so that an error message starts on a line of its own.
:func:`labelled` names the file (or model) that the bars and lines started inside belong to, for a
command that runs the same phases on several files (``retrieval a.h5: 12/12 tile in 0.3 s``).
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import time
from typing import Any, Iterable, Iterator

#: What the bars started in this context belong to (see :func:`labelled`); "" for nothing.
_LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("embedscope_progress_label", default="")


@contextlib.contextmanager
def labelled(label: object) -> Iterator[None]:
    """Inside, every bar and phase line names ``label`` after its description (``retrieval a.h5``),
    escaped as every string from a file (:func:`embedscope.text.safe`); ``None`` or ``""``: no label."""
    from embedscope.text import safe

    token = _LABEL.set("" if label is None else safe(label))
    try:
        yield
    finally:
        _LABEL.reset(token)

#: Signals received by the command line whose exception may have been swallowed on the way (a bare
#: ``except:`` in a library, an exception raised inside a ``__del__`` or a weakref callback is only
#: printed). Every progress step raises it again, so Ctrl-C and SIGTERM are never lost.
_PENDING: list[int] = []


def note_signal(signum: int) -> None:
    """Record a signal whose exception the command line is raising (see :data:`_PENDING`)."""
    _PENDING.append(int(signum))


def clear_signals() -> None:
    """Forget recorded signals (the command line handled the exception)."""
    _PENDING.clear()


def check_signals() -> None:
    """Raise again for a recorded signal: ``KeyboardInterrupt`` for SIGINT, else ``Terminated``; in a
    thread other than the main one, :class:`~embedscope.errors.Interrupted` (an ordinary exception): the
    main thread stops the command, and a worker thread's task ends as a failed task. (A study's Dask
    worker thread that raised KeyboardInterrupt broke its worker: the cluster's close then waited 60 s
    and printed Dask's tracebacks, in 2 of 15 Ctrl-C's.)"""
    if _PENDING:
        import signal
        import threading

        sig = _PENDING[-1]
        if threading.current_thread() is not threading.main_thread():
            from embedscope.errors import Interrupted

            raise Interrupted(sig)
        if sig == signal.SIGINT:
            raise KeyboardInterrupt
        from embedscope.errors import Terminated

        raise Terminated(sig)


def _is_tty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


#: units the phase lines keep as they are whatever the count (abbreviations, as tqdm shows them)
_ABBREVIATED = frozenset({"it", "img", "q", "perm", "B", "kB", "MB"})


def _plural(unit: str, count: int) -> str:
    """``unit`` as an English noun for ``count`` things (``1 file``, ``2 files``, ``8 batches``,
    ``3 queries``); abbreviations (:data:`_ABBREVIATED`) and non-words as they are."""
    if count == 1 or unit in _ABBREVIATED or not unit.isalpha() or not unit.islower():
        return unit
    if unit.endswith(("s", "x", "ch", "sh")):
        return unit + "es"
    if unit.endswith("y") and unit[-2:-1] not in "aeiou":
        return unit[:-1] + "ies"
    return unit + "s"


class LineProgress:
    """The non-terminal stand-in of a tqdm bar: same small API, one line at the end (or none)."""

    def __init__(self, iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", lines: bool = True, stream=None) -> None:
        self.iterable = iterable
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.total = total
        self.desc = desc
        self.unit = unit
        self.lines = lines
        self.stream = stream
        self.n = 0
        self.postfix = ""
        self.t0 = time.perf_counter()
        self.closed = False

    def __iter__(self):
        try:
            for item in self.iterable:
                check_signals()
                yield item
                self.n += 1
        except BaseException:
            self.closed = True  # interrupted: no "done" line
            raise
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        self.closed = True
        return False

    def update(self, n: int = 1) -> None:
        check_signals()
        self.n += n

    def set_postfix(self, **kw: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in kw.items())

    def set_description(self, desc: str) -> None:
        self.desc = desc

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if not self.lines:
            return
        of = f"/{self.total}" if self.total is not None else ""
        count = self.total if self.total is not None else self.n
        line = f"{self.desc}: {self.n}{of} {_plural(self.unit, count)} in {time.perf_counter() - self.t0:.1f} s"
        if self.postfix:
            line += f" ({self.postfix})"
        print(line, file=self.stream or sys.stderr, flush=True)

    @staticmethod
    def write(s: str, file=None) -> None:
        print(s, file=file or sys.stdout, flush=True)


class _Off(LineProgress):
    def __init__(self, iterable=None, **kw) -> None:
        super().__init__(iterable, lines=False, **kw)


def progress_bar(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", enabled: bool = True, lines: bool = True, stream=None):
    """A tqdm bar on a terminal, one line per phase otherwise, nothing when not ``enabled``.

    Parameters
    ----------
    iterable : iterable, optional
        What to iterate (or use ``update(n)`` with ``total``).
    total : int, optional
        Number of steps (default ``len(iterable)``).
    desc, unit : str
        Label and unit of the bar (``"embed digits/all"``, ``"batch"``).
    enabled : bool
        False (``--no-progress``): no output at all.
    lines : bool
        When the stream is not a terminal: print one line when the phase ends (True) or nothing.
    stream : file, optional
        Where the bar goes (default ``sys.stderr``).

    Returns
    -------
    An object with tqdm's iteration, ``update``, ``set_postfix``, ``close`` and context-manager API.
    """
    stream = stream or sys.stderr
    label = _LABEL.get()
    if label:
        desc = f"{desc} {label}" if desc else label
    if not enabled:
        return _Off(iterable, total=total, desc=desc, unit=unit, stream=stream)
    if not _is_tty(stream):
        return LineProgress(iterable, total=total, desc=desc, unit=unit, lines=lines, stream=stream)
    bar = _bar_class()(iterable, total=total, desc=desc, unit=unit, leave=False, file=stream, dynamic_ncols=True)
    _guard_stdout(stream)
    return bar


_BAR_CLASS = None


def _bar_class():
    """tqdm's bar class whose ``close`` also gives stdout back (see :class:`_BarAwareStdout`)."""
    global _BAR_CLASS
    if _BAR_CLASS is None:
        from tqdm.auto import tqdm

        class Bar(tqdm):
            def close(self) -> None:
                super().close()
                _release_stdout()

        _BAR_CLASS = Bar
    return _BAR_CLASS


def _live_bars() -> list:
    mod = sys.modules.get("tqdm.std")
    if mod is None:
        return []
    return [b for b in list(getattr(mod.tqdm, "_instances", [])) if not getattr(b, "disable", True)]


class _BarAwareStdout:
    """``sys.stdout`` while a bar is drawn on the same terminal: whole lines are written with the bars
    cleared first and drawn again below them (as ``tqdm.write``), so that a ``print`` from anywhere
    (the runs' messages of ``train-grid --workers``, a library) never lands on a bar's line and leaves
    the bar's text in the scrollback. Text without its newline yet waits for it (or for ``flush``)."""

    def __init__(self, inner, bar_stream) -> None:
        self._inner = inner
        self._bar_stream = bar_stream
        self._pending = ""

    def write(self, s: str) -> int:
        self._pending += s
        if "\n" in self._pending:
            lines, _, self._pending = self._pending.rpartition("\n")
            self._emit(lines + "\n")
        return len(s)

    def _emit(self, text: str) -> None:
        bars = _live_bars()
        if not bars:
            self._inner.write(text)
            self._inner.flush()
            return
        with type(bars[0]).external_write_mode(file=self._bar_stream):
            self._inner.write(text)
            self._inner.flush()

    def flush(self) -> None:
        if self._pending:
            text, self._pending = self._pending, ""
            self._emit(text)
        self._inner.flush()

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def _guard_stdout(bar_stream) -> None:
    """Route ``sys.stdout`` through :class:`_BarAwareStdout` while bars on ``bar_stream`` are drawn,
    when both are a terminal (a redirected stdout does not share the screen with the bar)."""
    out = sys.stdout
    if isinstance(out, _BarAwareStdout) or out is None or not _is_tty(out):
        return
    sys.stdout = _BarAwareStdout(out, bar_stream)


def _release_stdout() -> None:
    """Give ``sys.stdout`` back once no bar is drawn any more."""
    out = sys.stdout
    if isinstance(out, _BarAwareStdout) and not _live_bars():
        out.flush()
        sys.stdout = out._inner


class BarShare:
    """A share of a parent progress bar: a pass handed one as its ``progress`` advances the parent
    by ``weight`` steps in all (its own ``total`` steps scaled), instead of opening a bar of its
    own; e.g. the query blocks of one retrieval search, each ``weight`` = its queries, under one bar."""

    def __init__(self, parent, weight: int):
        self.parent, self.weight = parent, int(weight)
        self.total, self.done, self.sent = 1, 0, 0

    def start(self, total: int) -> "BarShare":
        self.total, self.done = max(int(total), 1), 0
        return self

    def update(self, n):
        self.done += n
        target = int(self.weight * min(self.done, self.total) // self.total)
        if target > self.sent:
            self.parent.update(target - self.sent)
            self.sent = target

    def close(self):
        if self.sent < self.weight:
            self.parent.update(self.weight - self.sent)
            self.sent = self.weight


def clear() -> None:
    """Close every open tqdm bar (before an error message, so it is not glued to a bar)."""
    mod = sys.modules.get("tqdm.std")
    if mod is None:
        return
    for bar in list(getattr(mod.tqdm, "_instances", [])):
        try:
            if not hasattr(bar, "start_t"):
                # Ctrl-C inside tqdm's __init__, after it drew the bar but before it set its clock:
                # its close() would fail on the missing times and leave the bar on the line
                bar.last_print_t = bar.start_t = 0.0
            bar.close()
        except Exception:  # pragma: no cover - a half-built bar
            pass
    _release_stdout()
