"""Text from files and paths shown safely on a terminal.

Strings read from a file (a data set's name, class names, paths, provenance) may hold control
characters: an ANSI escape could clear the screen or forge output. :func:`safe` shows every
non-printable character escaped, and a backslash doubled (as Python's ``unicode_escape`` shows it), so
a name holding a backslash and an ``n`` is not shown like one holding a line break; every command
prints file-derived strings through it (the terminal tables of :func:`embedscope.tables.format_table`
escape every cell, header and title). :func:`figure_text` is the same for text drawn in a figure (line
breaks and backslashes kept): matplotlib has no glyph for a control character and would warn with the
raw byte in the message.

A string is escaped once, where it is shown: the sinks are the CLI's error and warning line
(``embedscope CMD: error: ...``), the note lines the commands print through :func:`safe`,
:func:`~embedscope.tables.format_table` and the progress lines. Error messages and notes therefore
carry the raw strings (a second escape would show every backslash doubled twice); an exception that
reaches a user of the Python API holds the raw file name or class name (the command line escapes it;
a Python traceback prints it as it is: pass a message through :func:`safe` before showing it).
"""

from __future__ import annotations

#: a name read from a file (a property, a class, a dataset, an attribute) longer than this is shown shortened in
#: the middle on a terminal and in notes (another tool's 70,000-character property name was printed whole); the
#: table files (CSV, JSON, Parquet) keep it whole
SHOWN_NAME = 80


def _escape(ch: str) -> str:
    if ch == "\\":
        return "\\\\"
    o = ord(ch)
    if 0xDC80 <= o <= 0xDCFF:  # an undecodable byte of a path (surrogateescape)
        return f"\\x{o - 0xDC00:02x}"
    if o <= 0xFF:
        return f"\\x{o:02x}" if ch not in "\n\t\r" else {"\n": "\\n", "\t": "\\t", "\r": "\\r"}[ch]
    if o <= 0xFFFF:
        return f"\\u{o:04x}"
    return f"\\U{o:08x}"


def safe(s: object, *, keep: str = "") -> str:
    """``str(s)`` with every non-printable character escaped and every backslash doubled (one line, no
    terminal control; as ``s.encode("unicode_escape").decode("ascii")`` shows ASCII text).

    Control characters (C0, DEL, C1: ``\\x1b`` of ANSI escapes, newlines, carriage returns),
    Unicode format characters (bidirectional overrides), line separators and undecodable bytes
    of file names (``\\udcXX`` of ``surrogateescape``) become ``\\xNN`` / ``\\uNNNN``. Printable
    text, including non-ASCII letters, is unchanged; a backslash is shown as two, so that the two
    characters backslash and ``n`` of a file name are not shown like an escaped line break.
    Characters in ``keep`` (e.g. ``"\\n"``) are left as they are.

    >>> print(safe("cat\\x1b[2J"))
    cat\\x1b[2J
    >>> print(safe("a\\\\nb"), safe("a\\nb"))
    a\\\\nb a\\nb
    """
    s = str(s)
    if s.isprintable() and ("\\" not in s or "\\" in keep):
        return s
    return "".join(ch if (ch.isprintable() and ch != "\\") or ch in keep else _escape(ch) for ch in s)


def figure_text(s: object) -> str:
    """Text for a figure (title, legend, tick label, annotation): :func:`safe` with line breaks and
    backslashes kept (mathtext reads them; a figure shows no escapes of its own).

    >>> print(figure_text("cat\\x1b[31m\\nline 2"))
    cat\\x1b[31m
    line 2
    """
    return safe(s, keep="\n\\")


def quoted(v: object) -> str:
    """A value named in a message (``got 'abc'``): a string in single quotes as it is, anything else
    as its ``repr``. ``repr`` would escape a string's backslashes and control characters, and the line
    that shows the message escapes them again (:func:`safe`): a string is escaped once, where it is shown.

    >>> print(quoted("a\\\\b"), quoted(3), quoted(None))
    'a\\b' 3 None
    """
    return f"'{v}'" if isinstance(v, str) else repr(v)


def interval(lo: float, hi: float, d: int = 2) -> str:
    """A confidence interval ``[lo, hi]`` shown with ``d`` signed decimals, rounded outwards (``lo``
    down, ``hi`` up), so that the shown interval holds every value the exact one holds: rounded to the
    nearest, r = +0.866 with the interval [0.866, 1] read "+0.866 [+0.87, +1.00]", its value outside its
    own interval. A bound within 1e-9 of a shown value keeps it (0.87 held as 0.86999…).

    >>> interval(0.8660, 1.0), interval(-0.123, 0.87), interval(-1.0, -0.5)
    ('[+0.86, +1.00]', '[-0.13, +0.87]', '[-1.00, -0.50]')
    """
    import math

    s = 10.0 ** d
    down = math.floor(lo * s + 1e-9) / s
    up = math.ceil(hi * s - 1e-9) / s
    return f"[{down + 0.0:+.{d}f}, {up + 0.0:+.{d}f}]"
