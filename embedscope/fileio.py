"""Safe file output: never overwrite without ``force``, write to a temporary file, then publish it.

Every command that writes a result goes through :func:`atomic_output`, so

* an interrupted run leaves no half-written file under the final name, and its temporary file is
  removed (exceptions, Ctrl-C, and SIGTERM, which the command line turns into an exception); a
  temporary file left by a killed process (SIGKILL, power loss) is swept by the next run that
  writes the same output;
* an existing result is never silently lost: without ``force`` the file is published with
  link-no-replace semantics, so of two concurrent writers of the same new output exactly one
  succeeds and the other gets "already exists";
* new outputs get the usual permissions (``0666`` minus the umask, as any editor would create
  them) and ``force`` keeps an existing file's mode;
* an output that is a symbolic link is written through it, as ``cp`` and a shell's ``>`` do: ``force``
  replaces the file the link points to (the temporary file made in that file's folder), and the link stays
  (it was replaced by a regular file, the file it named left as it was); without ``force`` a link, even one
  to nothing, is an existing output;
* a full disk, a read-only or immutable folder and a folder given as the output are one line
  naming the user's path, and :func:`check_writable` finds the last two *before* the work.

* inside :func:`output_group` (the command line puts every command that writes its results at the
  end in one) the outputs are all or nothing: when the command fails or is interrupted after some of
  its outputs were published, those are taken back (new files removed, files replaced with ``force``
  restored), so that an interrupted ``tsne`` leaves neither a PNG without its PDF nor a JSON that a
  second run refuses to replace.

Temporary files are named ``.NAME.<host>.<pid>.<random>.tmp`` in the folder of the file written (the
output's, or that of the file an output link points to; so are the backups of replaced files that an output
group keeps until the command ends).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import socket
import time
from pathlib import Path
from typing import Iterator

from embedscope.errors import EmbedscopeError

_START = time.time()
_HOST = hashlib.sha1(socket.gethostname().encode("utf-8", "surrogateescape")).hexdigest()[:6]
_DISK_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def same_file(a, b) -> bool:
    """Whether paths ``a`` and ``b`` name one file: :func:`os.path.samefile` when both exist (symlinks,
    hard links, relative paths), else the same resolved path (a file still to be written)."""
    try:
        if os.path.lexists(a) and os.path.lexists(b):
            return os.path.samefile(a, b)
    except (OSError, ValueError):
        pass
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError, ValueError):
        return os.path.abspath(a) == os.path.abspath(b)


def is_folder_name(path: str | os.PathLike) -> bool:
    """Whether ``path`` as the user wrote it names a folder (``dir/``, ``.``, ``..``): ``Path`` drops
    the trailing slash, so check the raw name before deriving other names from it."""
    s = os.fspath(path)
    return isinstance(s, str) and (s.endswith(os.sep) or s.endswith("/") or Path(s).name in ("", ".", ".."))


def exists_message(user_path) -> str:
    """The one line for an output that exists and may not be replaced. Every writer (the commands and
    the Python API: ``store.save``, ``Result.to_json`` ...) reaches it, so it names both ways to
    replace the file: the option ``--force`` and the argument ``force=True``."""
    return f"{user_path} already exists (use --force to replace it; in Python: force=True)"


def cache_root() -> Path:
    """embedscope's cache folder: ``$EMBEDSCOPE_CACHE``, else ``$XDG_CACHE_HOME/embedscope`` (an absolute
    one: the XDG rule leaves a relative value out), else ``~/.cache/embedscope``. Without a home folder
    (HOME unset and no passwd entry, as a container's random user id) one line says what to set: the
    cache was a folder literally named "~" in the working folder, or a raw RuntimeError."""
    env = os.environ.get("EMBEDSCOPE_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "embedscope"
    home = os.path.expanduser("~")
    if not os.path.isabs(home):
        raise EmbedscopeError("no home folder to keep embedscope's cache in (HOME is not set and the user has no "
                              "home in the password database): set EMBEDSCOPE_CACHE (or XDG_CACHE_HOME) to a folder")
    return Path(home) / ".cache" / "embedscope"


def existing_ancestor(folder: Path) -> Path:
    """The nearest folder of ``folder``'s ancestry (itself included) that exists."""
    p = folder
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def probe_folder(folder: Path, user_path) -> None:
    """Create and remove a file in ``folder``: the only test that sees read-only mounts, ACLs,
    immutable folders and root's privileges alike."""
    name = folder / f".embedscope-probe.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        raise _os_error(e, user_path, folder) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)


def _same_file_name(name, tmp) -> bool:
    """Whether an OSError's ``filename`` is the temporary file ``tmp``."""
    if name is None:
        return False
    try:
        return os.fsdecode(name) == os.fsdecode(tmp)
    except (TypeError, ValueError):
        return False


def _os_error(e: OSError, user_path, folder: Path | None = None) -> EmbedscopeError:
    """One line naming the user's output for an OSError met while writing it."""
    if e.errno in _DISK_FULL:
        return EmbedscopeError(f"{user_path}: no space left on device")
    if e.errno in _NOT_WRITABLE:
        where = f"folder {folder}" if folder is not None else "its folder"
        return EmbedscopeError(f"{user_path}: cannot write there ({where} is not writable: {e.strerror})")
    if e.errno == errno.ENOTDIR:
        return EmbedscopeError(f"{user_path}: a part of the path is a file, not a folder")
    return EmbedscopeError(f"{user_path}: cannot be written ({e.strerror or e.__class__.__name__})")


def check_writable(path: str | os.PathLike, *, force: bool = False) -> Path:
    """Check, before the work, that ``path`` can be written; return it as a :class:`Path`.

    Refuses a folder given as the output (``dir`` or ``dir/``), an existing file unless
    ``force``, and an output whose folder (or, for a folder that does not exist yet, the nearest
    existing ancestor, where it will be created) is not writable; an output that is a symbolic link is an
    existing one (to nothing too), and with ``force`` the folder checked is that of the file it points to
    (:func:`link_target`). Creates nothing: missing folders
    are made by :func:`atomic_output` when the output is written. Also removes stale temporary
    files of this output left by killed processes.
    """
    user = path
    if not isinstance(path, (str, os.PathLike)):
        raise EmbedscopeError(f"an output must be named by a file path (str or pathlib.Path), got "
                              f"{type(path).__name__} {path!r}"[:200])
    if isinstance(force, str) or force not in (True, False):  # ("no" is truthy: it replaced the file)
        raise EmbedscopeError(f"force must be True or False, got {force!r}"[:200])
    raw = os.fspath(path)
    if ("\x00" if isinstance(raw, str) else b"\x00") in raw:  # (os.open's ValueError "embedded null byte" was the
        raise EmbedscopeError(f"{user}: a file name cannot hold a NUL character")  # traceback, from Python)
    if is_folder_name(path):
        raise EmbedscopeError(f"{user}: is a folder name, expected a file name")
    path = Path(path)
    if path.is_dir():
        raise EmbedscopeError(f"{user} is a directory, expected a file name")
    if path.exists() and not path.is_file():  # a device (/dev/null), a named pipe, a socket: --force renamed a
        # file over it (as root, /dev/null itself became a regular file)
        raise EmbedscopeError(f"{user} is not a regular file (a device, a named pipe or a socket): outputs are "
                              "written to files, give a file name (a command's --csv or --json table goes to "
                              "standard output with -)")
    if (path.exists() or os.path.islink(path)) and not force:  # (a link to nothing too: without force it was
        raise EmbedscopeError(exists_message(user))  # refused only after the work, as it was published)
    real = link_target(path, user)  # (a link: the file it points to is the one written)
    anc = existing_ancestor(real.parent)
    if not anc.is_dir():
        raise EmbedscopeError(f"{user}: {anc} is a file, not a folder")
    probe_folder(anc, user)
    if anc == real.parent:
        sweep_stale_temporaries(real)
    return path


def link_target(path: Path, user_path) -> Path:
    """The file an output ``path`` names: itself, or, for a symbolic link, the file the link points to
    (through every link of a chain; one that need not exist yet, in a folder that must). A link that loops,
    or one to a file in a folder that does not exist, is one line naming ``user_path``."""
    if not os.path.islink(path):
        return path
    real = Path(os.path.realpath(path))
    if os.path.islink(real):
        raise EmbedscopeError(f"{user_path}: a symbolic link that loops (its chain of links never reaches a file)")
    if not real.parent.is_dir():
        raise EmbedscopeError(f"{user_path}: a symbolic link to {real}, whose folder does not exist (or is not a "
                              "folder): outputs are written through a link to the file it names")
    return real


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{_HOST}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` may be alive (this process, or another user's that cannot be probed: yes)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    except OSError:
        return True
    return True


def sweep_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Remove temporary files of ``path`` (``.NAME.<host>.<pid>.<random>.tmp``) whose process,
    on this host, is no longer alive and which are older than this process. Returns them."""
    path = Path(path)
    removed = []
    prefix = f".{path.name}."
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return removed
    for e in entries:
        if not (e.name.startswith(prefix) and e.name.endswith(".tmp")):
            continue
        parts = e.name[len(prefix):-len(".tmp")].split(".")
        if len(parts) != 3 or parts[0] != _HOST or not parts[1].isdigit():
            continue
        try:
            if not e.is_file(follow_symlinks=False) or e.stat(follow_symlinks=False).st_mtime >= _START:
                continue
            if pid_alive(int(parts[1])):
                continue
            os.unlink(e.path)
            removed.append(Path(e.path))
        except OSError:
            continue
    return removed


def _disk_full(exc: BaseException, folder: Path) -> bool:
    """Whether a failed write failed because the disk (or quota) is full.

    OSError carries ENOSPC; other writers (torch's zip writer: "[enforce fail at
    inline_container.cc]", h5py) lose the errno, so a filesystem with no free block left counts too.
    """
    e: BaseException | None = exc
    while e is not None:
        if isinstance(e, OSError) and e.errno in _DISK_FULL:
            return True
        if "No space left on device" in str(e) or "Disk quota exceeded" in str(e):
            return True
        e = e.__cause__ or e.__context__
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail == 0


def _missing_folders(folder: Path) -> list[Path]:
    """The folders of ``folder``'s path (itself included) that do not exist yet, outermost first."""
    missing = []
    p = Path(folder)
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    return missing[::-1]


@contextlib.contextmanager
def _folder_flock(folder: Path, *, wait: bool, what: str = "", shared: bool = False, refused: str | None = None,
                  made: list[Path] | None = None):
    """An exclusive (``shared``: shared) ``fcntl.flock`` of ``folder`` itself (no file is made; the kernel
    releases it when the block ends or the process dies, a SIGKILL included): waited for with ``wait``, else
    a one-line error (``refused``, or naming ``what``) when another process holds it. Unlocked where the
    platform has no ``flock`` (Windows) and, with ``wait`` or ``shared``, where the folder cannot be opened
    (one this user may write but not list)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        if not (wait or shared):
            raise
        yield
        return
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            if made:  # (the other writer's folders now: see folder_lock)
                forget_new_folders(made)
                made.clear()
            raise EmbedscopeError(refused or f"{what}: another process is writing it now (it holds the lock of "
                                  f"{folder}); wait for it to finish or stop it") from None
        yield
    finally:
        os.close(fd)


def folder_lock(folder: Path, what: str, made: list[Path] | None = None):
    """Hold an exclusive lock of ``folder`` while one writer works there; a second writer gets a one-line
    error naming ``what`` at once (two ``train`` runs into one new ``-o`` both passed the checks before
    either wrote, and mixed their checkpoints). :func:`_folder_flock`.

    ``made``: the folders this writer has just created for ``folder`` (from :func:`make_folders` or
    :func:`track_new_folders`), which it removes, when empty, if it fails. The refused-lock folder rule,
    for every writer (``train``, ``study``, ``make-shapes``): when the lock is refused those folders are the
    other writer's, which found them there and holds them before writing into them (one removed under it
    failed its first write), so the list is emptied in place and taken off the current
    :func:`output_group`: the refused writer's failure removes none of them. Taken, they stay this writer's."""
    return _folder_flock(folder, wait=False, what=what, made=made)


def reading_lock(folder: Path, refused: str):
    """A shared lock of ``folder`` while a reader reads several files of it that one writer, holding
    :func:`folder_lock`, writes in turn (a study's study.json, runs.csv, correlations.json, figures): readers
    share it, a writer at work refuses it (one :class:`EmbedscopeError` line, ``refused``). :func:`_folder_flock`."""
    return _folder_flock(folder, wait=False, shared=True, refused=refused)


def update_lock(path: Path):
    """Serialise the read-modify-replace updates of one file (``add-properties``): a lock of the file's
    folder, waited for. Two updates of one file at the same time each copied the file without the other's
    change and the later replace won (one property lost); the second now waits, then copies the file the
    first one wrote. (Not the file itself: HDF5 takes its own ``flock`` of it, and the update replaces it.)
    Updates of other files in the folder wait their turn too. :func:`_folder_flock`."""
    return _folder_flock(Path(path).parent, wait=True)


#: errnos of a lock another process holds: flock's EWOULDBLOCK (EAGAIN), fcntl's EACCES
_LOCK_HELD = (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES)
#: the texts of HDF5's failures to lock a file it opens: its own lock call's (1.10 to 2.0), and 1.10.x's
#: ENOSYS, said apart ("file locking disabled on this file system (use HDF5_USE_FILE_LOCKING ...)")
_HDF5_LOCK_TEXTS = ("unable to lock file", "unable to lock the file", "file locking disabled on this file system")


def hdf5_lock_failure(path, first: str) -> str | None:
    """The one line for HDF5's refusal to lock ``path`` as it opens it, from its message ``first`` (the first line
    of h5py's OSError), or None when ``first`` is no lock failure. The errno is read from the text, where HDF5
    writes it (``unable to lock file, errno = 11, error message = '...'``), else from h5py's ``[Errno 11]`` in
    front of it. EAGAIN / EWOULDBLOCK / EACCES: another process holds the lock (has the file open for writing;
    the file is not damaged). Another errno (ENOSYS, ENOLCK, EOPNOTSUPP, Linux's 524 of some network file
    systems): a file system without locks, where no other process is the cause. No errno in either place (a
    form of the message not known here): both causes named, as neither can be told."""
    low = first.lower()
    at = next((low.index(t) for t in _HDF5_LOCK_TEXTS if t in low), None)
    if at is None:
        return None
    detail = first[at:]
    if detail.endswith(")") and detail.count(")") > detail.count("("):  # (h5py's "... (HDF5's message)")
        detail = detail[:-1]
    code = re.search(r"errno\s*[=:]\s*(\d+)", detail) or re.match(r"\s*\[Errno (\d+)\]", first)
    if code is not None and int(code.group(1)) in _LOCK_HELD and "locking disabled" not in low:
        return (f"{path}: open for writing by another process (HDF5 file lock): read it when that process "
                "has finished, or read a copy")
    if code is not None or "locking disabled" in low:
        return (f"{path}: HDF5 could not lock the file ({detail}): this file system may not support file locks; "
                "set HDF5_USE_FILE_LOCKING=FALSE to read it")
    return (f"{path}: HDF5 could not lock the file ({detail}): either another process has it open for writing "
            "(read it when that process has finished, or read a copy), or this file system does not support file "
            "locks (then set HDF5_USE_FILE_LOCKING=FALSE to read it)")


def make_folders(folder: Path, user_path) -> list[Path]:
    """Create the missing folders of ``folder`` (one line naming ``user_path`` on failure); return
    those created, outermost first, for :func:`remove_empty_folders`."""
    created = []
    for d in _missing_folders(folder):
        try:
            d.mkdir()
        except FileExistsError:
            continue
        except OSError as e:
            remove_empty_folders(created)
            raise _os_error(e, user_path, d.parent) from None
        created.append(d)
    return created


def remove_empty_folders(created: list[Path]) -> None:
    """Remove the folders of ``created`` (innermost first) that are empty."""
    for d in reversed(created):
        with contextlib.suppress(OSError):
            d.rmdir()  # only when empty


def _publish(tmp: Path, path: Path, force: bool, user_path) -> None:
    """Move ``tmp`` to ``path``: replace with ``force``, else link-no-replace (fails if it exists)."""
    if force:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise EmbedscopeError(exists_message(user_path)) from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
            raise
        # a file system without hard links: check, then rename (a small race remains)
        if os.path.lexists(path):
            raise EmbedscopeError(exists_message(user_path)) from None
        os.rename(tmp, path)
        return
    os.unlink(tmp)


class _OutputGroup:
    """The outputs published inside one :func:`output_group`, to take back if the group fails."""

    def __init__(self, outputs=None) -> None:
        # (path, inode of the file we publish, backup of the file it replaces or None)
        self.entries: list[tuple[Path, int, Path | None]] = []
        self.folders: list[Path] = []
        self.outputs = None if outputs is None else [os.path.normpath(os.path.abspath(o)) for o in outputs]

    def owns(self, path) -> bool:
        """Whether ``path`` is one of the group's outputs: one of ``outputs``, a file beside one with
        the same stem (a figure's PDF, CSV and JSON beside its PNG), or a file inside one (a folder);
        every file when no ``outputs`` were given. A cache written on the way is not an output."""
        if self.outputs is None:
            return True
        p = os.path.normpath(os.path.abspath(path))
        head, stem = os.path.split(os.path.splitext(p)[0])
        for o in self.outputs:
            if p == o or p.startswith(o.rstrip(os.sep) + os.sep):
                return True
            o_head, o_stem = os.path.split(os.path.splitext(o)[0])
            if head == o_head and stem == o_stem:
                return True
        return False

    def before_publish(self, tmp: Path, path: Path, force: bool) -> None:
        """Record ``tmp`` as about to become ``path``; keep a hard link of a file ``force`` replaces."""
        backup = None
        if force and os.path.lexists(path) and not os.path.isdir(path):
            backup = _temp_name(path)
            try:
                os.link(path, backup, follow_symlinks=False)  # a symlink is put back as a symlink
            except OSError:  # no hard links here: the replaced file cannot be restored
                backup = None
        self.entries.append((path, os.stat(tmp).st_ino, backup))

    def commit(self) -> None:
        for _, _, backup in self.entries:
            if backup is not None:
                with contextlib.suppress(OSError):
                    os.unlink(backup)

    def rollback(self) -> None:
        """Remove the files published by the group (only while they are still ours), put back the
        ones they replaced, then remove the folders the group created if they are empty."""
        from embedscope.errors import stop_signals_held

        with stop_signals_held():  # a second Ctrl-C waits
            for path, ino, backup in reversed(self.entries):
                try:
                    ours = os.lstat(path).st_ino == ino
                except OSError:
                    ours = False
                with contextlib.suppress(OSError):
                    if ours and backup is not None:
                        os.replace(backup, path)
                    elif ours:
                        os.unlink(path)
                    elif backup is not None:
                        os.unlink(backup)
            remove_empty_folders(self.folders)


_GROUPS: list[_OutputGroup] = []


def track_new_folders(folder: str | os.PathLike) -> list[Path]:
    """The folders of ``folder``'s path that do not exist yet (outermost first), which a command is
    about to create itself (not through :func:`atomic_output`): an :func:`output_group` that fails
    removes them when empty, as it does the folders :func:`atomic_output` made."""
    missing = _missing_folders(Path(folder))
    if _GROUPS:
        _GROUPS[-1].folders.extend(missing)
    return missing


def forget_new_folders(folders: list[Path]) -> None:
    """Take ``folders`` (from :func:`track_new_folders`) off the current :func:`output_group`'s list: folders
    another process now holds (a lock refused), which this command's failure must not remove."""
    if _GROUPS:
        kept = _GROUPS[-1].folders
        kept[:] = [f for f in kept if f not in folders]


@contextlib.contextmanager
def output_group(outputs=None) -> Iterator[None]:
    """All or nothing for the outputs that :func:`atomic_output` publishes inside the block.

    ``outputs``: the paths the command writes (files, or folders it writes into); files published on
    the way that are none of them (a cache of generated images) are left alone. ``None``: every file.

    When the block raises (an error, Ctrl-C, the command line's SIGTERM exception) after some
    outputs were published, they are taken back: a new file is removed, a file replaced with
    ``force`` gets its earlier content back (a hard link to it is kept until the block ends), and
    folders created for the outputs are removed when empty. ``BrokenPipeError`` (the reader of
    stdout went away after the results were written) keeps them. A group inside a group is the
    outer one. Not for resumable work (training, studies), whose finished parts must stay.
    """
    if _GROUPS:
        yield
        return
    group = _OutputGroup(outputs)
    _GROUPS.append(group)
    try:
        yield
    except BrokenPipeError:
        group.commit()
        raise
    except BaseException:
        group.rollback()
        raise
    else:
        group.commit()
    finally:
        _GROUPS.remove(group)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, *, force: bool = False) -> Iterator[Path]:
    """Yield a temporary path in the same folder as ``path``; publish it as ``path`` on success.

    On any exception (including KeyboardInterrupt and the command line's SIGTERM exception) the
    temporary file and the folders this call created are removed and ``path`` is left untouched.
    Without ``force`` an output that appeared meanwhile is not replaced (one writer wins). A full
    disk or an unwritable folder becomes one :class:`EmbedscopeError` line naming ``path``.
    ``path`` a symbolic link (``force``): the file it points to is written, the temporary file made in
    that file's folder, and the link kept (:func:`link_target`).
    """
    user = path
    named = check_writable(path, force=force)
    path = link_target(named, user)
    created = make_folders(path.parent, user)
    group = _GROUPS[-1] if _GROUPS and _GROUPS[-1].owns(named) else None
    if group is not None:
        group.folders.extend(created)
    tmp = _temp_name(path)
    ok = False
    try:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
        except OSError as e:
            raise _os_error(e, user, path.parent) from None
        os.close(fd)
        mode = os.stat(tmp).st_mode & 0o7777
        try:
            yield tmp
            if force and path.exists():
                mode = path.stat().st_mode & 0o7777  # --force keeps the replaced file's mode
            os.chmod(tmp, mode)  # the writer may have re-created the file
            if group is not None:
                group.before_publish(tmp, path, force)
            _publish(tmp, path, force, user)
        except EmbedscopeError:
            raise
        except OSError as e:
            if _disk_full(e, path.parent):
                raise EmbedscopeError(f"{user}: no space left on device") from None
            # (a file-size limit, EFBIG: "OSError: [Errno 27] File too large" named no file; an error of the
            # temporary file itself names the output; another file's error, an input read, stays as it is)
            if e.errno in _NOT_WRITABLE or e.errno == errno.EFBIG or _same_file_name(e.filename, tmp):
                raise _os_error(e, user, path.parent) from None
            raise
        except RuntimeError as e:  # torch's zip writer: "[enforce fail at inline_container.cc] ..."
            if _disk_full(e, path.parent):
                raise EmbedscopeError(f"{user}: no space left on device") from None
            if "inline_container" in str(e):  # its write failed short ("unexpected pos"): a size limit, an I/O error
                raise EmbedscopeError(f"{user}: cannot be written (the write stopped short of the file's end: "
                                      "a file-size limit or an I/O error)") from None
            raise
        ok = True
    finally:
        with contextlib.suppress(OSError):
            if os.path.lexists(tmp):
                os.unlink(tmp)
        if not ok:
            remove_empty_folders(created)


def escape_undecodable(text: str) -> str:
    """``text`` as UTF-8 can hold it: an undecodable byte of a file name (Python keeps it as a lone
    surrogate) is written escaped, ``\\xff``; any other text is returned as it is."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            return text.encode("utf-8", "backslashreplace").decode("utf-8")


def write_text(path: str | os.PathLike, text: str, *, force: bool = False) -> Path:
    """Atomically write ``text`` to ``path`` (UTF-8; an undecodable file-name byte escaped, ``\\xff``)."""
    with atomic_output(path, force=force) as tmp:
        tmp.write_text(escape_undecodable(text), encoding="utf-8")
    return Path(path)


def read_paths_file(path) -> list[str]:
    """The paths listed in a paths file (``saliency --paths-file``, ``neighbours --paths-file``): one
    per line (a line ends at LF, CRLF or CR only, not at a form feed or U+0085 inside a name), UTF-8 (a
    byte-order mark at the start of the file or of a line ignored), the spaces around each removed; a
    blank line is skipped and a line that starts with ``#`` is a comment (a ``#`` after a path is part
    of the path). One-line errors: no such file, an unreadable one, one that is not UTF-8, one that
    lists no path."""
    p = Path(path)
    if not p.is_file():  # (a folder or a named pipe was "no such paths file", which it is not)
        raise EmbedscopeError(f"{p}: no such paths file" if not p.exists() else
                              f"{p} is not a regular file (a folder, a device or a named pipe), expected a paths file")
    try:
        # (a BOM of a Windows editor is no part of a path; lines end at a newline only, \r and \r\n read as one by
        # the text mode: splitlines() also cut a path at \x0c, \x1c-\x1e, \x85 and \u2028, 'caf\x85.jpg' two paths)
        lines = p.read_text(encoding="utf-8-sig").split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise EmbedscopeError(f"{p}: cannot read the paths ({e.__class__.__name__})") from None
    # (a byte-order mark at the start of any line, not only the file's: two files joined with cat, the second
    # one's BOM made a path "\ufeffdigits/0005" that matched nothing)
    wanted = [ln.strip().lstrip("\ufeff").strip() for ln in lines]
    wanted = [w for w in wanted if w and not w.startswith("#")]
    if not wanted:
        raise EmbedscopeError(f"{p}: lists no path (only blank lines and # comments)")
    return wanted


def file_stat(path: str | os.PathLike) -> list[int] | None:
    """``[size, mtime_ns]`` of a file (None when it cannot be stat'ed): what tells cheaply that a file
    is still the one that was read or measured."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [int(st.st_size), int(st.st_mtime_ns)]


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()
