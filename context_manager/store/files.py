"""The store file on disk: its path, its permissions, the one writer's lock, and the
names it is written by.

One writer at a time
--------------------
The writer lock belongs to the database *file*, not to the name it was opened
by. :meth:`Store.open` resolves the path (``os.path.realpath``), opens the
database file itself and takes ``flock(LOCK_EX | LOCK_NB)`` on that
descriptor before SQLite reads a byte. An flock is held by an open file
description on an inode, so:

* every name of the file (a symlink, a hard link, a relative path) reaches the
  same lock, and a second writer gets :class:`StoreLockedError`;
* a second :meth:`Store.open` in the same process opens a new description and
  is refused the same way;
* the kernel drops the lock when the process dies: no stale lock files;
* the lock is independent of the POSIX byte-range locks SQLite takes on the
  same file, and unlike those it is not dropped when some other descriptor of
  the file in this process is closed (a read-only probe connection, a backup
  copy reading the bytes).

That last point, and keeping read-only readers working, is why SQLite's own
``locking_mode=EXCLUSIVE`` is not the lock: it shuts out plain readers and is
silently released when any descriptor of the file closes in the process.
After SQLite connects, the path's ``(st_dev, st_ino)`` is compared with the
locked descriptor's, so a file swapped in between is refused rather than
written without the lock. Because SQLite opens the resolved path, its
``-wal`` and ``-shm`` files sit next to the real file whichever symlink was
used. A hard link is a second real name, and SQLite names the write-ahead log
after the name it opened: after a crash, only the name the crashed writer used
recovers its log. So each writer records, in the store, the path (and device and
inode) it opened the file by, folded into the file itself at once. An open by
another name of the same file while that name's log still holds writes is refused
with :class:`StoreAliasError`, naming the name to use, and changes nothing (the
recovery it would run could only lose those writes). An open of a file that has
hard links succeeds with a :class:`StoreAliasWarning` naming the other names: the
risk is real only after a crash, and the refusal then guards it.

Every step of an open that fails releases what the open took (the SQLite
connection, the descriptor and its lock), so the next open can succeed.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sqlite3
import stat
import warnings
from contextlib import suppress

from .errors import StoreAliasError, StoreAliasWarning, StoreError, StoreLockedError


def checked_path(shown: str) -> str:
    """The real path of the store file ``shown``, or a :class:`StoreError` saying why no
    file can have that name (a NUL byte, a name or path longer than the system allows).

    Examples
    --------
    >>> checked_path("a\\0b.db")
    Traceback (most recent call last):
    ...
    context_manager.store.errors.StoreError: 'a\\x00b.db': a file path cannot hold a NUL byte
    """
    if "\0" in shown:
        raise StoreError(f"{shown!r}: a file path cannot hold a NUL byte")
    real = os.path.realpath(shown)
    folder, name = os.path.split(real)
    try:
        limit = os.pathconf(folder if os.path.isdir(folder) else "/", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    if len(os.fsencode(name)) > limit:
        raise StoreError(
            f"{shown}: the file name is {len(os.fsencode(name))} bytes, longer than the "
            f"{limit} this file system allows; choose a shorter name"
        )
    return real


STORE_MODE = 0o600
"""The permissions of a new store file, whatever the umask: it holds whole transcripts.
SQLite gives the store's ``-wal``, ``-shm`` and ``-journal`` files the store's own."""


def _open_store_file(path: str) -> int:
    """A read-write descriptor of the store file ``path``, created :data:`STORE_MODE`
    (exclusively, so never through a symlink or over a file that appeared) when it does
    not exist; an existing file keeps its mode. The last component is never followed
    when it is a symlink (``path`` is already resolved: one there now was planted)."""
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
    while True:
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, STORE_MODE)
        except FileExistsError:
            try:
                return os.open(path, flags)
            except FileNotFoundError:
                continue  # removed since: create it after all
        try:
            os.fchmod(fd, STORE_MODE)  # the umask may have taken bits away
        except BaseException:
            os.close(fd)
            raise
        return fd


def create_private(path: str | os.PathLike[str], mode: int) -> int:
    """A write descriptor of a new file ``path`` with permissions ``mode`` (whatever the
    umask), created exclusively: never through a symlink, never over a file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def copy_private(source: str | os.PathLike[str], dest: str | os.PathLike[str], mode: int) -> None:
    """Copy the file ``source`` to the new file ``dest``, created with permissions
    ``mode`` (whatever the umask) and exclusively (never through a symlink planted at
    ``dest``, never over a file), and flushed to disk. A failed copy leaves no ``dest``.

    Raises
    ------
    FileExistsError
        When ``dest`` exists (a file, a folder or a symlink).
    OSError
        When ``source`` cannot be read or ``dest`` written.

    Examples
    --------
    >>> import tempfile, stat
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "a"), "w") as f:
    ...     _ = f.write("transcript")
    >>> copy_private(os.path.join(folder, "a"), os.path.join(folder, "b"), 0o600)
    >>> oct(stat.S_IMODE(os.stat(os.path.join(folder, "b")).st_mode))
    '0o600'
    """
    fd = create_private(dest, mode)
    try:
        with open(source, "rb") as src, open(fd, "wb", closefd=False) as out:
            shutil.copyfileobj(src, out)
            out.flush()
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with suppress(FileNotFoundError):
            os.unlink(dest)
        raise
    os.close(fd)


_WRITER_META = "writer"
"""The meta row naming the path (and device and inode) the last writer opened the file
by: JSON ``[path, st_dev, st_ino]``."""

_Writer = tuple[str, int, int]


def recorded_writer(conn: sqlite3.Connection, tables: set[str]) -> _Writer | None:
    """The path, device and inode the last writer recorded (:func:`note_writer`), or
    None (a new store, or one no writer recorded itself in). Only reads."""
    if "meta" not in tables:
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (_WRITER_META,)).fetchone()
    try:
        path, dev, ino = json.loads(row[0]) if row else (None, 0, 0)
    except (ValueError, TypeError):
        return None  # an unreadable note protects nothing: the next open rewrites it
    if not isinstance(path, str) or not isinstance(dev, int) or not isinstance(ino, int):
        return None
    return path, dev, ino


def note_writer(
    conn: sqlite3.Connection, real: str, identity: tuple[int, int], recorded: _Writer | None
) -> None:
    """Record the name this writer opened the file by, and fold it into the file itself
    (a checkpoint), so an open by another name reads it even if this writer's log is
    never recovered. Nothing is written when the name is the one recorded."""
    mine = (real, *identity)
    if recorded == mine:
        return
    conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (_WRITER_META, json.dumps(mine)))
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")


def _hot_log(path: str) -> str | None:
    """The write-ahead log or rollback journal beside ``path`` that still holds writes
    (a log longer than its 32-byte header, a journal that is not empty), or None."""
    for suffix, header in (("-wal", 32), ("-journal", 0)):
        side = path + suffix
        try:
            info = os.stat(side)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and info.st_size > header:
            return side
    return None


def refuse_another_name_s_log(
    real: str, shown: str, identity: tuple[int, int], recorded: _Writer | None
) -> None:
    """Raise :class:`StoreAliasError` when the last writer opened this same file by
    another name and left its log there (it stopped without closing): SQLite names
    the log after the path it opens, so an open by this name would not see it."""
    if recorded is None or recorded[0] == real:
        return
    other = recorded[0]
    log = _hot_log(other)
    if log is None:
        return
    try:
        info = os.stat(other)
        same = (info.st_dev, info.st_ino) == identity
        gone = False
    except FileNotFoundError:  # renamed since: the same file if it kept its inode
        same, gone = tuple(recorded[1:]) == identity, True
    except OSError:
        return
    if not same:
        return  # another file (this one is a copy): that log is not this file's
    fix = (
        f"move the file back to {other}, open it there and close it"
        if gone
        else f"open it as {other} and close it"
    )
    raise StoreAliasError(
        f"{shown}: the store was last written through another name of the same file, "
        f"{other}, by a writer that stopped without closing it; its log {log} still "
        f"holds writes that opening the store as {shown} would lose (SQLite names the "
        f"log after the path it is opened by). Nothing was changed: {fix} to recover "
        "them, after which any name opens it; to stop this, keep one name for a store "
        "(remove the hard links, or copy it to a file of its own with cp or derive)"
    )


def warn_other_names(real: str, shown: str, fd: int, recorded: _Writer | None) -> None:
    """Warn (:class:`StoreAliasWarning`) when the store file has hard links, naming
    those in its folder (and the last writer's name, when another)."""
    info = os.fstat(fd)
    if info.st_nlink <= 1:
        return
    others: list[str] = []
    folder = os.path.dirname(real)
    with suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            if entry.path == real or not entry.is_file(follow_symlinks=False):
                continue
            with suppress(OSError):
                found = entry.stat(follow_symlinks=False)
                if (found.st_dev, found.st_ino) == (info.st_dev, info.st_ino):
                    others.append(entry.path)
    if recorded is not None and recorded[0] != real and recorded[0] not in others:
        with suppress(OSError):
            found = os.stat(recorded[0])
            if (found.st_dev, found.st_ino) == (info.st_dev, info.st_ino):
                others.append(recorded[0])
    named = f": also {', '.join(sorted(others))}" if others else " elsewhere"
    warnings.warn(
        StoreAliasWarning(
            f"{shown} has {info.st_nlink} names (hard links{named}). SQLite names a "
            "store's write-ahead log after the name it is opened by: if a writer stops "
            "without closing, only that name recovers its last writes (an open by "
            "another name then refuses and names it). Open the store by one name only, "
            "or give it one: copy it to a file of its own (cp, or derive) and remove "
            "the other names"
        ),
        stacklevel=4,
    )


class WriterLock:
    """The exclusive writer lock: ``flock`` on a descriptor of the database file."""

    def __init__(self, path: str, shown: str) -> None:
        try:
            self.fd = _open_store_file(path)
        except OSError as exc:
            raise StoreError(
                f"{shown}: cannot open the store file ({exc.strerror}); check the path "
                "names a regular file you may write"
            ) from exc
        try:
            info = os.fstat(self.fd)
            self.identity = (info.st_dev, info.st_ino)
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise StoreLockedError(
                f"{shown} is open in another process (or by another Store in this one, "
                "under this or another name of the same file); close it there first "
                "(one writer at a time keeps the log consistent)"
            ) from None
        except OSError as exc:
            os.close(self.fd)
            raise StoreError(f"{shown}: cannot lock the store file ({exc.strerror})") from exc

    def release(self) -> None:
        """Release the lock and close the descriptor."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)
