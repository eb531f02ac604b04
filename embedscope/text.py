"""Text from files and paths shown safely on a terminal.

Strings read from a file (a data set's name, class names, paths, provenance) may hold control
characters: an ANSI escape could clear the screen or forge output. :func:`safe` shows every
non-printable character escaped; every command prints file-derived strings through it (the
terminal tables of :func:`embedscope.tables.format_table` escape every cell, header and title).
:func:`figure_text` is the same for text drawn in a figure (line breaks kept): matplotlib has no
glyph for a control character and would warn with the raw byte in the message.
"""

from __future__ import annotations


def _escape(ch: str) -> str:
    o = ord(ch)
    if 0xDC80 <= o <= 0xDCFF:  # an undecodable byte of a path (surrogateescape)
        return f"\\x{o - 0xDC00:02x}"
    if o <= 0xFF:
        return f"\\x{o:02x}" if ch not in "\n\t\r" else {"\n": "\\n", "\t": "\\t", "\r": "\\r"}[ch]
    if o <= 0xFFFF:
        return f"\\u{o:04x}"
    return f"\\U{o:08x}"


def safe(s: object, *, keep: str = "") -> str:
    """``str(s)`` with every non-printable character escaped (one line, no terminal control).

    Control characters (C0, DEL, C1: ``\\x1b`` of ANSI escapes, newlines, carriage returns),
    Unicode format characters (bidirectional overrides), line separators and undecodable bytes
    of file names (``\\udcXX`` of ``surrogateescape``) become ``\\xNN`` / ``\\uNNNN``. Printable
    text, including non-ASCII letters, is unchanged. Characters in ``keep`` (e.g. ``"\\n"``) are
    left as they are.

    >>> safe("cat\\x1b[2J")
    'cat\\\\x1b[2J'
    """
    s = str(s)
    if s.isprintable():
        return s
    return "".join(ch if ch.isprintable() or ch in keep else _escape(ch) for ch in s)


def figure_text(s: object) -> str:
    """Text for a figure (title, legend, tick label, annotation): :func:`safe` with line breaks kept.

    >>> print(figure_text("cat\\x1b[31m\\nline 2"))
    cat\\x1b[31m
    line 2
    """
    return safe(s, keep="\n")
