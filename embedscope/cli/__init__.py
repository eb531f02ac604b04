"""The ``embedscope`` command line: a thin layer over the library (no logic lives here).

Each sub-command is a module in this package with ``add_parser(subparsers, parents)`` that
registers its parser and sets ``func`` to a ``run(args) -> int | None`` function. Modules import
their heavy dependencies inside ``run`` so that ``embedscope --help`` stays fast.
"""

from __future__ import annotations

import os
import sys

try:  # the C module: the handler is in place before signal.py builds its enum classes (a few ms)
    import _signal
except ImportError:  # pragma: no cover - not CPython
    import signal as _signal

#: The ``embedscope`` process (its console script or ``python -m embedscope``) until :func:`main` takes
#: over Ctrl-C, and again after it: see :func:`_quiet_interrupt`. None when a program imports the command line.
_EARLY_PID: int | None = None


def _quiet_interrupt(signum, frame):
    """Ctrl-C while ``embedscope`` starts (its modules are imported, ~20-50 ms) or ends: the one line of
    every interrupted command and exit code 130, not a KeyboardInterrupt traceback from an import.
    Nothing is under way yet (or any more), so the process ends at once."""
    if os.getpid() != _EARLY_PID:  # a forked child: its parent handles Ctrl-C
        return
    try:
        os.write(2, b"embedscope: interrupted\n")
    except OSError:
        pass
    os._exit(130)


def _started_as_the_command() -> bool:
    """Whether this process runs the ``embedscope`` command (not a test or a notebook importing it)."""
    main = sys.modules.get("__main__")
    if getattr(main, "__name__", None) != "__main__":  # e.g. a spawned child re-running the script
        return False
    spec = getattr(main, "__spec__", None)
    if spec is not None:  # python -m embedscope
        return spec.name == "embedscope.__main__"
    script = os.path.basename(getattr(main, "__file__", None) or "").lower()
    return script in ("embedscope", "embedscope.exe", "embedscope-script.py")


# first, before the imports below: an ignored SIGINT (nohup, a background job) stays ignored
if _started_as_the_command() and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    try:
        _signal.signal(_signal.SIGINT, _quiet_interrupt)
        _EARLY_PID = os.getpid()
    except (ValueError, OSError):  # not the main thread
        pass

import argparse  # noqa: E402
import contextlib  # noqa: E402
import errno  # noqa: E402
import importlib  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402

from embedscope import __version__  # noqa: E402
from embedscope.errors import EmbedscopeError, Interrupted, Terminated  # noqa: E402

# Order = order in `embedscope --help`. A module missing from an installation is skipped.
COMMANDS = [
    "train",
    "train_grid",
    "toy",
    "import_cmd",
    "embed",
    "add_properties",
    "make_shapes",
    "info",
    "evaluate",
    "neighbours",
    "geometry",
    "spectrum",
    "properties",
    "saliency",
    "saliency_agreement",
    "tsne",
    "yoke",
    "scatter",
    "study",
    "report",
]


#: Commands whose finished parts stay when they are interrupted (checkpoints of the epochs and runs
#: done, measured rows of a study): they resume from them. Every other command's outputs are all or
#: nothing (:func:`embedscope.fileio.output_group`).
RESUMABLE = frozenset({"train", "train-grid", "study"})


#: The options that name a command's outputs (-o, --json, --figure, ...); add-properties rewrites its
#: input file. A figure's PDF/CSV/JSON beside its PNG and the files of an output folder count as well.
_OUTPUT_DESTS = ("output", "json", "csv", "parquet", "table_csv", "figure", "grid", "per_class", "per_image_csv",
                 "per_image_parquet", "per_class_parquet", "table_parquet")


#: Options that name an input file or folder, refused empty as the outputs are (``--config "$CFG"`` with the
#: variable unset trained with the defaults; ``--weights ""`` read the working folder as the weights; ``--root ""``
#: read it as the data set, or generated the shapes into it; ``--cache-dir ""`` of study used the default cache
#: silently). A command module adds its own in
#: ``NONEMPTY_OPTIONS`` (import's FILE|KEY options: no key and no file is named "").
_INPUT_DESTS = ("config", "weights", "paths_file", "root", "cache_dir")


def _ordinal(i: int) -> str:
    return f"{i}{'th' if 10 <= i % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(i % 10, 'th')}"


def _refuse_empty_names(sub, args) -> None:
    """A file named by an empty string is a usage error (exit 2), in one wording for outputs and inputs:
    ``EMB.h5: the name is empty (an unset shell variable?)``. As a path, "" is the working folder: an
    output (``-o "$OUT"`` with the variable unset) was written there (``make-shapes``, ``toy`` and
    ``train-grid`` wrote their files into it), an input read as it (". is a directory"). Checked: every
    positional argument (the files a command reads; ``yoke "" ""``), the output options, the input
    options of :data:`_INPUT_DESTS` and those a command's module lists in ``NONEMPTY_OPTIONS``."""
    names = {a.dest: a.option_strings[0] for a in sub._actions if a.option_strings}
    hook = getattr(sys.modules.get(getattr(getattr(args, "func", None), "__module__", "")), "NONEMPTY_OPTIONS", ())
    checked = [(names.get(d, d), getattr(args, d, None))
               for d in (*_OUTPUT_DESTS, "log", "tensorboard", *_INPUT_DESTS, *hook) if d in names]
    # positionals, in the order of the usage line (named as there: their metavar, else their dest)
    checked += [(a.metavar if isinstance(a.metavar, str) else a.dest, getattr(args, a.dest, None))
                for a in sub._actions if not a.option_strings and a.dest != argparse.SUPPRESS]
    for name, value in checked:
        values = value if isinstance(value, list) else [value]
        for i, v in enumerate(values):
            if v == "":
                where = f" ({_ordinal(i + 1)} of {len(values)})" if len(values) > 1 else ""
                sub.error(f"{name}{where}: the name is empty (an unset shell variable?)")
    # "-" as an output: the convention for standard output. A CSV or JSON table option writes its table there
    # (the terminal table then goes to standard error, _table_on_stdout); a figure or a Parquet file is not
    # written there (it wrote a file named "-" in the working folder), nor two tables into one stream
    from embedscope.cli.output import STDOUT_TABLES

    dashes = [d for d in _OUTPUT_DESTS if d in names and getattr(args, d, None) == "-"]
    for d in dashes:
        if "parquet" in d:
            sub.error(f"{names[d]} -: Parquet is binary and is not written to standard output: give a file name "
                      "(./- for a file named '-')")
        if d not in STDOUT_TABLES:
            sub.error(f"{names[d]} -: standard output is not one of this command's outputs (its table is printed "
                      "there): give a file name (./- for a file named '-')")
    if len(dashes) > 1:
        sub.error(f"{' and '.join(names[d] + ' -' for d in dashes)}: one table at most goes to standard output: "
                  "give the others a file name")


@contextlib.contextmanager
def _table_on_stdout(args):
    """A table option given ``-`` (``--csv -``, ``--json -``; :data:`embedscope.cli.output.STDOUT_TABLES`):
    the option names a stand-in file in a private temporary folder for the block, which yields that file
    (None when no option is ``-``). The caller sends the command's terminal output to standard error and,
    once the command succeeded, copies the stand-in to standard output (:func:`_copy_table`): the bytes the
    file form writes, alone on standard output (``evaluate a.h5 --csv - | head``: pure CSV)."""
    from embedscope.cli.output import STDOUT_TABLES, stdout_standin, stdout_standin_done

    dest = next((d for d in STDOUT_TABLES if getattr(args, d, None) == "-"), None)
    if dest is None:
        yield None
        return
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="embedscope-stdout-")
    standin = os.path.join(folder, "standard-output" + STDOUT_TABLES[dest])
    setattr(args, dest, standin)
    stdout_standin(standin)
    try:
        yield standin
    finally:
        stdout_standin_done(standin)
        shutil.rmtree(folder, ignore_errors=True)


def _copy_table(standin: str, stream) -> None:
    """The table a command wrote to its stand-in file, onto ``stream`` (standard output), unchanged."""
    with open(standin, encoding="utf-8", newline="") as f:
        for chunk in iter(lambda: f.read(1 << 16), ""):
            stream.write(chunk)


def _outputs(args) -> list[str]:
    outs = [getattr(args, d) for d in _OUTPUT_DESTS if isinstance(getattr(args, d, None), str)]
    if args.command == "add-properties" and isinstance(getattr(args, "file", None), str):
        outs.append(args.file)
    # files a command writes beyond those its options name (scatter's OUT_summary.csv): its module's
    # extra_outputs(args), so that they are taken back with the rest when the command fails
    hook = getattr(sys.modules.get(getattr(args.func, "__module__", "")), "extra_outputs", None)
    if hook is not None:
        outs += hook(args)
    return outs


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's help, but an option whose ``{a,b,...}`` list would not fit the usage line (train's
    ``[--loss {margin,triplet,...}]`` ran to 130 characters on an 80-column terminal) is shown with its
    name as metavar (``--loss LOSS``), and its help then names the choices unless it names them already."""

    def _long_choices(self, action) -> bool:
        if action.metavar is not None or action.choices is None or not action.option_strings:
            return False
        braces = "{" + ",".join(map(str, action.choices)) + "}"
        indent = len("usage: ") + len(self._prog) + 1
        return indent + len(f"[{action.option_strings[0]} {braces}]") > self._width

    def _metavar_formatter(self, action, default_metavar):
        if self._long_choices(action):
            import copy

            action = copy.copy(action)
            action.choices = None
        return super()._metavar_formatter(action, default_metavar)

    def _get_help_string(self, action):
        text = super()._get_help_string(action) or ""
        if self._long_choices(action):
            names = [str(c) for c in action.choices]
            if not all(re.search(rf"(?<![\w-]){re.escape(c)}(?![\w-])", text) for c in names):
                listed = ", ".join(c.replace("%", "%%") for c in names)
                text = f"{text}; one of {listed}" if text else f"one of {listed}"
        return text


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        # no abbreviated options: `--table` silently meant `--table-csv`, and a script or doc that abbreviates
        # would change meaning (or fail as ambiguous) the day another option shares the prefix
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    # argparse names a typed value with %r ("invalid choice: 'a\\\\b'"), and the error line escapes the message
    # again (text.safe): a typed backslash showed four times. A typed value is named as every other message
    # names a value (text.quoted: as typed, in quotes) and escaped once, by the error line (embedscope/text.py).
    def _get_value(self, action, arg_string):
        from embedscope.text import quoted

        type_func = self._registry_get("type", action.type, action.type)
        if not callable(type_func):
            return super()._get_value(action, arg_string)
        try:
            return type_func(arg_string)
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentError(action, str(err)) from None
        except (TypeError, ValueError):
            name = getattr(action.type, "__name__", repr(action.type))
            raise argparse.ArgumentError(action, f"invalid {name} value: {quoted(arg_string)}") from None

    def _check_value(self, action, value):
        from embedscope.text import quoted

        if action.choices is not None and value not in action.choices:
            choices = list(action.choices)
            hint = ""
            if isinstance(value, str) and all(isinstance(c, str) for c in choices):
                import difflib

                close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
                if close:
                    hint = f"did you mean {quoted(close[0])}? "
            raise argparse.ArgumentError(action, f"invalid choice: {quoted(value)} "
                                         f"({hint}choose from {', '.join(quoted(c) for c in choices)})")

    def _print_message(self, message, file=None):
        # argparse drops a failed write (`embedscope --help > /dev/full` exited 0 with nothing written): a
        # failed write to stdout is raised (main: one line, exit 1; a closed pipe, 141), one to stderr ignored
        if not message:
            return
        file = file or sys.stderr
        if file is None:
            return
        if file is sys.stdout:
            try:
                file.write(message)
            except BrokenPipeError:
                raise
            except OSError as e:
                _stdout_gone()
                raise EmbedscopeError(f"cannot write to standard output ({e.strerror or e})") from None
            _flush_stdout()
        else:
            with contextlib.suppress(AttributeError, OSError):
                file.write(message)

    def error(self, message: str):  # one line, exit 2
        from embedscope.text import safe

        self.exit(2, f"{self.prog}: error: {safe(_unrepr(message))} (see '{self.prog} --help')\n")


#: argparse messages that end in a typed value shown with %r, which no override reaches (the value
#: an option that takes none was given: ``--force=x``, ``-hx``)
_REPR_TAIL = re.compile(r"((?:argument [^:]*: )?ignored explicit argument )('.*'|\".*\")", re.DOTALL)


def _unrepr(message: str) -> str:
    """``message`` with the %r value of :data:`_REPR_TAIL` shown as :func:`embedscope.text.quoted` shows
    it (as typed: the error line escapes it once)."""
    m = _REPR_TAIL.fullmatch(message)
    if m is None:
        return message
    import ast

    from embedscope.text import quoted

    try:
        value = ast.literal_eval(m.group(2))
    except (ValueError, SyntaxError):
        return message
    return m.group(1) + quoted(value) if isinstance(value, str) else message


def common_parent() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a sub-command's default must not override `embedscope --debug CMD`
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show the full traceback on errors")
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="embedscope",
        description="Why does an embedding model generalize? Embed a data set with a checkpoint, "
        "then analyse the HDF5 file: retrieval metrics, spectral decay, class distances, t-SNE.",
    )
    parser.add_argument("--version", action="version", version=f"embedscope {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    parser.command_parsers = sub.choices  # for errors that belong to a sub-command
    parents = [common_parent()]
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"embedscope.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"embedscope.cli.{name}":
                continue
            raise
        mod.add_parser(sub, parents)
    return parser


#: The process that installed the handlers below. A child forked from it (a DataLoader worker, the
#: figure a study draws beside its tables) inherits them, but the command's exit line, exit code and
#: clean-up belong to this process: a child raising KeyboardInterrupt or Terminated printed its own
#: traceback ("Process embedscope-figure: Traceback ... KeyboardInterrupt") after "interrupted".
_OWNER_PID: int | None = None


def _raise_terminated(signum, frame):
    if os.getpid() != _OWNER_PID:  # a forked child, ended by its parent: quietly, its finally blocks still run
        raise SystemExit(128 + signum)
    from embedscope import progress

    progress.note_signal(signum)
    raise Terminated(signum)


def _raise_interrupt(signum, frame):
    if os.getpid() != _OWNER_PID:  # a forked child: Ctrl-C reaches the whole process group; the parent
        return  # handles it and ends its children (daemonic ones get SIGTERM when it exits)
    from embedscope import progress

    progress.note_signal(signum)
    raise KeyboardInterrupt


@contextlib.contextmanager
def _signals_as_exceptions():
    """SIGTERM and SIGHUP raise :class:`Terminated`, so ``finally`` blocks remove temporary files."""
    global _OWNER_PID
    old = {}
    if threading.current_thread() is threading.main_thread():
        _OWNER_PID = os.getpid()
        for name in ("SIGTERM", "SIGHUP"):
            sig = getattr(signal, name, None)
            if sig is not None:
                with contextlib.suppress(ValueError, OSError):
                    old[sig] = signal.signal(sig, _raise_terminated)
        # Ctrl-C as Python's own handler, but recorded: progress steps raise it again if a library
        # swallowed the KeyboardInterrupt (an ignored SIGINT, e.g. under nohup, stays ignored)
        if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _quiet_interrupt):
            with contextlib.suppress(ValueError, OSError):
                old[signal.SIGINT] = signal.signal(signal.SIGINT, _raise_interrupt)
    try:
        yield
    finally:
        for sig, h in old.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, h)


def _stdout_gone(stream=None) -> None:
    """The reader of our stdout went away (``| head``) or a write to it failed (``> /dev/full``): silence
    the rest of the output (``stream``, default ``sys.stdout``), Python's flush at exit included."""
    with contextlib.suppress(Exception):
        fd = (sys.stdout if stream is None else stream).fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)


class _StdoutFailed(Exception):
    """A write to stdout failed while a resumable command ran (:class:`_CheckedStdout` with ``stop``)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


def _stdout_line(error: OSError) -> str:
    return f"cannot write to standard output ({error.strerror or error})"


class _CheckedStdout:
    """``sys.stdout`` while a command runs. A failed write or flush (a full disk, an I/O error, a reader
    gone away: ``> /dev/full``, ``| head``) is recorded in :attr:`error` and the rest of the terminal
    output dropped; the command goes on and finishes its output files, and :func:`main` then reports the
    failure (one line naming standard output, exit 1; a closed pipe quietly, 141). It used to stop the
    command wherever its ``print`` happened to fail (where depended on buffering: ``PYTHONUNBUFFERED``,
    the size of a table), with "OSError: [Errno 28] ..." as an unexpected failure, and the files it had
    written were taken back. ``stop`` (the resumable commands, which print as they go and keep their
    finished parts: ``train | head`` ran on for hours with nothing shown) raises at the first failure
    instead: BrokenPipeError for a closed pipe, else :class:`_StdoutFailed`; later writes are dropped."""

    def __init__(self, stream, stop: bool = False) -> None:
        self._stream = stream
        self._stop = stop
        self.error: OSError | None = None

    def _failed(self, e: OSError) -> None:
        if self.error is None:
            self.error = e
            _stdout_gone(self._stream)
            if self._stop:
                raise e if isinstance(e, BrokenPipeError) else _StdoutFailed(e)

    def write(self, s: str) -> int:
        if self.error is None:
            try:
                return self._stream.write(s)
            except OSError as e:
                self._failed(e)
        return len(s)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.error is None:
            try:
                self._stream.flush()
            except OSError as e:
                self._failed(e)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _checked_stdout(stop: bool = False):
    """Install :class:`_CheckedStdout` as ``sys.stdout`` for the block (flushed at its end); yield it."""
    stream = sys.stdout
    checked = _CheckedStdout(stream, stop)
    sys.stdout = checked
    try:
        yield checked
        checked.flush()
    finally:
        if sys.stdout is checked:
            sys.stdout = stream


def _stdout_error(error: OSError, written: list[str]) -> EmbedscopeError:
    """The error line of a command whose terminal output could not be written (its files are complete)."""
    message = _stdout_line(error)
    if written:
        message += "; the output files were written and are kept"
    return EmbedscopeError(message)


def _flush_stdout() -> None:
    """Flush stdout after ``--help`` or ``--version`` (a command's stdout is :class:`_CheckedStdout`): a
    failed write (``> /dev/full``, an I/O error) is one line naming standard output, exit 1, not "OSError:
    [Errno 28] ..." as an unexpected failure; the rest of the output is dropped. A reader gone away
    (``| head``) stays BrokenPipeError (141)."""
    if sys.stdout is None:
        return
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        _stdout_gone()
        raise EmbedscopeError(f"cannot write to standard output ({e.strerror or e})") from None


#: errors of a named file that are the user's environment, not a bug: a file or folder not readable,
#: missing, of the wrong kind, a full or read-only disk
_ENVIRONMENT_ERRNOS = frozenset(getattr(errno, n) for n in (
    "EACCES", "EPERM", "ENOENT", "ENOTDIR", "EISDIR", "ELOOP", "ENAMETOOLONG", "ENOSPC", "EDQUOT", "EROFS",
    "EFBIG", "EMFILE", "ENFILE", "EIO") if hasattr(errno, n))


def _os_error_line(e: OSError) -> str:
    """An ``OSError`` of a named file that no command turned into its own line (a study folder that cannot be
    read: "PermissionError: [Errno 13] Permission denied: 'runs/grid.csv' (run with --debug ...)") as the
    Unix line ``runs/grid.csv: Permission denied``; the error line escapes the names."""
    names = [os.fsdecode(f) if isinstance(f, bytes) else str(f) for f in (e.filename, e.filename2) if f is not None]
    return f"{' -> '.join(names)}: {e.strerror or os.strerror(e.errno)}"


def _unrecognized(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """argparse's "unrecognized arguments" line, with the closest option of ``parser`` for a mistyped
    one (``--spilt``: did you mean --split?)."""
    import difflib

    message = f"unrecognized arguments: {' '.join(extras)}"
    options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    for x in extras:
        if x.startswith("--") and len(x) > 2:
            close = difflib.get_close_matches(x.split("=", 1)[0], options, n=1, cutoff=0.75)
            if close:
                return f"{message} (did you mean {close[0]}?)"
    return message


def _error(command: str, message: str) -> None:
    from embedscope import progress
    from embedscope.text import safe

    progress.clear()  # not glued to an unfinished progress bar
    try:
        sys.stdout.flush()
    except Exception:  # a full or closed stdout: dropped, not "Exception ignored ..." when Python exits
        with contextlib.suppress(Exception):
            _stdout_gone()
    where = f"embedscope {command}" if command else "embedscope"
    # on a terminal, from the start of a cleared line: a Ctrl-C that lands while a bar is being
    # drawn can leave part of it on the line (tqdm's close then has nothing to erase); TERM=dumb has no
    # erase-line sequence: a plain carriage return there
    start = ("\r" if os.environ.get("TERM") == "dumb" else "\r\x1b[K") if progress._is_tty(sys.stderr) else ""
    print(f"{start}{where}: {safe(message)}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _warnings_as_lines(command: str):
    """embedscope's own warnings (:class:`~embedscope.errors.EmbedscopeWarning`) as one escaped line on
    stderr each, ``embedscope CMD: warning: ...``, not Python's two lines with a file name and a source
    line; other warnings as Python shows them."""
    import warnings

    from embedscope.errors import EmbedscopeWarning

    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if isinstance(category, type) and issubclass(category, EmbedscopeWarning):
            _error(command, f"warning: {message}")
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def _escape_unencodable_output() -> None:
    """A standard output whose encoding cannot hold a character the command prints (a latin-1 or ASCII
    terminal: ρ, π, the undefined mark –, a class named 猫) writes it escaped (backslashreplace, as Python
    writes stderr), instead of failing the command with a UnicodeEncodeError after its work and taking
    back its files."""
    stream = sys.stdout
    if stream is None or str(getattr(stream, "errors", "strict")) not in ("strict", "surrogateescape"):
        return  # (surrogateescape: Python's choice under the C locale without UTF-8 mode, strict for the rest)
    with contextlib.suppress(Exception):  # (a stream that cannot be reconfigured: a test's capture)
        if str(getattr(stream, "encoding", "utf-8")).lower().replace("-", "") not in ("utf8", "utf8sig"):
            stream.reconfigure(errors="backslashreplace")


def _creatable(path: str) -> bool:
    """Whether ``path`` is a writable folder or could be made one: a file made and removed in its nearest
    existing folder (:func:`embedscope.fileio.probe_folder`; ``access`` says yes to root in /proc and the
    like, where nothing can be made)."""
    from pathlib import Path

    from embedscope.errors import EmbedscopeError
    from embedscope.fileio import existing_ancestor, probe_folder

    try:
        probe_folder(existing_ancestor(Path(path)), path)
    except (EmbedscopeError, OSError):
        return False
    return True


def _matplotlib_folder() -> None:
    """Where matplotlib's settings and font-cache folders (``$XDG_CONFIG_HOME`` or ``~/.config``, and
    ``$XDG_CACHE_HOME`` or ``~/.cache``, each ``/matplotlib``) cannot be written (a container's
    read-only home, HOME unset), a private temporary folder for this run (``MPLCONFIGDIR``, removed at
    exit): matplotlib's own fallback printed two lines of warning at its import."""
    if os.environ.get("MPLCONFIGDIR"):
        return
    try:
        home = os.path.expanduser("~")
        ok = home != "~" and all(
            _creatable(os.path.join(os.environ.get(var) or os.path.join(home, sub), "matplotlib"))
            for var, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_CACHE_HOME", ".cache")))
    except (OSError, ValueError):
        ok = False
    if not ok:
        import atexit
        import shutil
        import tempfile

        with contextlib.suppress(OSError):
            folder = tempfile.mkdtemp(prefix="embedscope-matplotlib-")
            atexit.register(shutil.rmtree, folder, True)
            os.environ["MPLCONFIGDIR"] = folder


def main(argv: list[str] | None = None) -> int:
    """Run one command; return its exit code (0 ok, 1 error, 2 usage error, 130 Ctrl-C,
    143 SIGTERM, 141 when the reader of stdout went away). The environment variables it sets for the
    command (``MPLBACKEND``, and ``MPLCONFIGDIR`` where the home cannot be written) are the caller's
    again when it returns (a notebook or a test calling it)."""
    saved = {k: os.environ.get(k) for k in ("MPLBACKEND", "MPLCONFIGDIR")}
    own = argv is None and "--debug" not in sys.argv[1:]  # the command line's own process (not a caller's)
    if own:
        sys.unraisablehook = _unraisable_after_a_stop
        import logging  # (asyncio's "Future exception was never retrieved" of an event loop the stop cut short)

        logging.getLogger("asyncio").addFilter(_logged_before_a_stop)
    try:
        rc = _main(argv)
        if own and rc in (130, 143, 129):  # stopped by a signal: what is torn down now may be half built
            global _STOPPED
            _STOPPED = True
        return rc
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


#: the command was stopped by a signal (Ctrl-C, SIGTERM): see :func:`_unraisable_after_a_stop`
_STOPPED = False


def _unraisable_after_a_stop(unraisable) -> None:
    """The command line's ``sys.unraisablehook``: an exception Python cannot raise (in a ``__del__``, a
    weakref callback, an at-fork hook) is printed as Python does, except once a signal arrived. Then it
    is an object the interrupt left half built (torch's ``StorageWeakRef`` caught between its
    ``__new__`` and its attributes while a loader worker's batch came in: "Exception ignored ...
    AttributeError" after the "interrupted" line), or the interrupt itself raised inside such a hook:
    the command's one line stands alone. ``--debug`` keeps Python's own hook."""
    from embedscope import progress

    if _STOPPED or progress._PENDING:
        return
    sys.__unraisablehook__(unraisable)


def _logged_before_a_stop(record) -> bool:
    """The command line's filter of the ``asyncio`` logger: its lines pass, except once a signal arrived.
    Then they are of an event loop the interrupt cut short (a Dask cluster closing when Ctrl-C came:
    "Future exception was never retrieved ... TimeoutError: Timeout" after the results), which
    :func:`_unraisable_after_a_stop` does not see (asyncio logs them); ``--debug`` keeps them."""
    from embedscope import progress

    return not (_STOPPED or progress._PENDING)


def _main(argv: list[str] | None) -> int:
    from embedscope import progress

    if sys.stderr is None:  # `2>&-`: print(file=None) writes to stdout: the bars and the error line went into
        sys.stderr = open(os.devnull, "w")  # the command's output (a closed stdout is refused below)
    # the command line draws figures into files only (viz.figures.use_agg); a user's MPLBACKEND naming no
    # backend made `import matplotlib` fail after the work, with a traceback from the study's figure child
    os.environ["MPLBACKEND"] = "Agg"
    _matplotlib_folder()
    try:
        os.getcwd()
    except OSError:  # (torch's import then died with "Intel oneMKL FATAL ERROR" and exit code 2)
        print("embedscope: error: the current folder no longer exists (deleted or moved away): cd into a folder "
              "and run the command again", file=sys.stderr)
        return 1
    progress.clear_signals()
    _escape_unencodable_output()
    command = ""  # named in the error line once parsed
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)  # until parsed
    try:
        # Ctrl-C and SIGTERM while the parser is built (imports) are one line too, not a traceback
        with _signals_as_exceptions():
            parser = build_parser()
            args, extras = parser.parse_known_args(argv)
            if not getattr(args, "func", None):
                if extras:
                    parser.error(_unrecognized(parser, extras))
                parser.print_help(sys.stderr)
                return 2
            if extras:  # point to the sub-command's help, not embedscope's
                sub = parser.command_parsers[args.command]
                sub.error(_unrecognized(sub, extras))
            command = args.command
            _refuse_empty_names(parser.command_parsers[command], args)
            if sys.stdout is None:  # `>&-`: refused before any work (its report would be lost; the flush at
                # the end of the command failed with "AttributeError: 'NoneType' ..." and took its outputs back)
                raise EmbedscopeError("standard output is closed (redirect it to /dev/null to discard the output)")
            debug = getattr(args, "debug", False)
            from embedscope.fileio import output_group

            # all or nothing: a command that fails or is interrupted takes back the outputs it had already
            # published (a PNG without its PDF, a JSON without its CSV); resumable work keeps its finished parts
            def group():
                return contextlib.nullcontext() if command in RESUMABLE else output_group(_outputs(args))

            # a failed write to stdout does not stop the command: its files are finished (and kept), then
            # the failure is its error line (a closed pipe: 141, quietly); a resumable command stops there.
            # `--csv -`: the table to standard output, the command's own lines to standard error meanwhile
            # (the option names a stand-in file from here on: the group's outputs include it)
            with (_table_on_stdout(args) as table, group(), _warnings_as_lines(command),
                  _checked_stdout(stop=command in RESUMABLE) as out):
                with contextlib.redirect_stdout(sys.stderr) if table else contextlib.nullcontext():
                    rc = args.func(args)
                    # a signal whose exception was swallowed on the way and no progress step after it to raise
                    # it again (Ctrl-C during a study's fork of its figure child, inside logging's at-fork lock
                    # release: "Exception ignored", and the study went on to exit 0): raised now, not lost
                    progress.check_signals()
                if table and not rc:
                    _copy_table(table, sys.stdout)
            if out.error is not None and not rc:  # (a command that failed has said so)
                if isinstance(out.error, BrokenPipeError):
                    return 141
                raise _stdout_error(out.error, [o for o in _outputs(args) if os.path.lexists(o)])
        return int(rc or 0)
    except BrokenPipeError:
        _stdout_gone()
        return 141
    except _StdoutFailed as e:  # a resumable command stopped (its finished parts stay)
        if debug:
            raise
        _error(command, f"error: {_stdout_line(e.error)}")
        return 1
    except Interrupted as e:  # a worker thread's signal, re-raised in this one: as the signal itself
        if debug:
            raise
        import signal

        if e.signum == signal.SIGINT:
            _error(command, "interrupted")
            return 130
        _error(command, "terminated")
        return 128 + e.signum
    except EmbedscopeError as e:
        if debug:
            raise
        _error(command, f"error: {e}")
        return e.exit_code
    except KeyboardInterrupt:
        if debug:
            raise
        _error(command, "interrupted")
        return 130
    except Terminated as e:
        if debug:
            raise
        _error(command, "terminated")
        return 128 + e.signum
    except Exception as e:  # an unexpected failure: still one line unless --debug
        if debug:
            raise
        from embedscope.errors import _WORKER

        if _WORKER.match(str(e)):  # raised in a DataLoader worker: the worker's own last line
            last = str(e).rstrip().splitlines()[-1].strip()
            _error(command, f"error: {last} (in a data loader worker; run with --debug for the traceback)")
            return 1
        if isinstance(e, OSError) and e.filename is not None and e.errno in _ENVIRONMENT_ERRNOS:
            _error(command, f"error: {_os_error_line(e)}")
            return 1
        msg = str(e).splitlines()[0] if str(e) else ""
        _error(command, f"error: {e.__class__.__name__}: {msg} (run with --debug for the traceback)")
        return 1
    finally:
        progress.clear_signals()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
