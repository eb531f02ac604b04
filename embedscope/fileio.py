"""Safe file output: never overwrite without ``force``, write to a temporary file and rename.

Every command that writes a result goes through :func:`atomic_output`, so an interrupted run
leaves no half-written file under the final name and an existing result is never silently lost.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

from embedscope.errors import EmbedscopeError


def check_writable(path: str | os.PathLike, *, force: bool = False) -> Path:
    """Refuse an existing ``path`` unless ``force``; make sure its folder exists."""
    path = Path(path)
    if path.exists() and not force:
        raise EmbedscopeError(f"{path} already exists (use --force to replace it)")
    if path.is_dir():
        raise EmbedscopeError(f"{path} is a directory, expected a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, *, force: bool = False) -> Iterator[Path]:
    """Yield a temporary path in the same folder as ``path``; rename it to ``path`` on success.

    On any exception (including KeyboardInterrupt) the temporary file is removed and ``path``
    is left untouched.
    """
    path = check_writable(path, force=force)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if path.exists() and not force:  # appeared while we were working
            raise EmbedscopeError(f"{path} already exists (use --force to replace it)")
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text(path: str | os.PathLike, text: str, *, force: bool = False) -> Path:
    """Atomically write ``text`` to ``path``."""
    with atomic_output(path, force=force) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()
