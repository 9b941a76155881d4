"""An append-only record store on SQLite, with branches by copy-on-write.

Every write is a *record* with a sequence number, in a named *slot*:

* append slots hold items (``append`` adds one, ``edit`` replaces its body,
  ``redact`` removes it);
* snapshot slots hold one value (``set``; the latest wins).

A branch sees its own records plus its parent's up to the sequence it was cut
at, recursively, so branching copies nothing. The base64 data of large images in
appended or edited bodies (:data:`MEDIA_BLOB_MIN_CHARS`) is kept once in a
content-addressed blob table (sha256, so an image sent twice is stored once) and
read back into the body whenever the item is read.

Durability: WAL journal and one SQLite transaction per logical write (see
:meth:`Store.transaction`). A process killed at any instant loses at most the
transaction in flight. A write that fails (the disk is full, the file went
bad) rolls back whole and raises a :class:`StoreError` naming the file; it
stores nothing, and the store stays usable.

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
import functools
import hashlib
import json
import logging
import os
import shutil
import sqlite3
import stat
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from .errors import ContextManagerError

__all__ = [
    "STORE_TABLES",
    "Branch",
    "Item",
    "NotAStoreError",
    "Store",
    "StoreAliasError",
    "StoreAliasWarning",
    "StoreCorruptError",
    "StoreError",
    "StoreFullError",
    "StoreLockedError",
]

SCHEMA = """
CREATE TABLE IF NOT EXISTS branches (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    parent INTEGER REFERENCES branches(id),
    fork_seq INTEGER NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    branch INTEGER NOT NULL REFERENCES branches(id),
    seq INTEGER NOT NULL,
    slot TEXT NOT NULL,
    op TEXT NOT NULL CHECK (op IN ('append', 'edit', 'redact', 'set')),
    item TEXT,
    body TEXT,
    UNIQUE (branch, seq)
);
CREATE INDEX IF NOT EXISTS records_slot ON records (slot, branch, seq);
CREATE TABLE IF NOT EXISTS blobs (sha256 TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS derived_scopes (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS derived_items (
    scope INTEGER NOT NULL,
    item INTEGER NOT NULL,
    rev INTEGER NOT NULL,
    prev INTEGER NOT NULL,
    next INTEGER NOT NULL,
    a INTEGER NOT NULL,
    b INTEGER NOT NULL,
    c INTEGER NOT NULL,
    PRIMARY KEY (scope, item)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS derived_blobs (key TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS derived_counts (
    scope INTEGER NOT NULL,
    digest BLOB NOT NULL,
    tokens INTEGER NOT NULL,
    PRIMARY KEY (scope, digest)
) WITHOUT ROWID;
"""

# The next record id: what AUTOINCREMENT would pick, chosen before the insert so an
# append is one statement that carries its own item id.
_NEXT_RECORD_ID = (
    "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'records'), 0), "
    "COALESCE((SELECT MAX(id) FROM records), 0)) + 1"
)

_FULL_CODES = frozenset({sqlite3.SQLITE_FULL})
_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
_CORRUPT_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})

# cache, head, branch id, branch name, lineage
_View = tuple[dict[str, Any], int, int, str, list[tuple[int, int]]]

# An in-place change of a cached item list, undone when its transaction rolls back:
# (the list, "append" | "edit" | "redact", index, the item it replaced or removed)
_Undo = tuple[list[Any], str, int, Any]

_P = ParamSpec("_P")
_R = TypeVar("_R")


class StoreError(ContextManagerError):
    """A store operation failed: names the slot, item, branch or file and the fix."""


class StoreLockedError(StoreError):
    """Another writer (another process, or another :class:`Store`) holds the store."""


class StoreFullError(StoreError):
    """The disk (or the database's size limit) is full; the failed write stored nothing."""


class StoreCorruptError(StoreError):
    """The file is not a store database, or SQLite found it damaged."""


class StoreAliasError(StoreError):
    """The store was last written through another name of the same file (a hard link,
    or the name it had before a rename) by a writer that stopped without closing it,
    and that writer's log is still beside that name: opening the store by this name
    would lose the writes the log holds. Nothing was changed; the message names the
    name to open it by."""


class StoreAliasWarning(UserWarning):
    """The store file has more than one name (hard links): a writer that stops without
    closing leaves its log under the name it used, and only that name recovers it. The
    message names the other names and the fix."""


class NotAStoreError(StoreError):
    """The path is not a store: another application's SQLite database, a file that is
    not a database, or (for ``ctxfold inspect``, ``audit`` and ``repair``) a store
    lacking the namespace or branch asked for. Nothing was written to the file."""


STORE_TABLES = frozenset(
    {
        "branches",
        "records",
        "blobs",
        "meta",
        "derived_scopes",
        "derived_items",
        "derived_blobs",
        "derived_counts",
    }
)
"""The tables of a store (:data:`SCHEMA`); SQLite's own ``sqlite_*`` tables aside, a
file holding any other table is another application's database."""
_CORE_TABLES = frozenset({"branches", "records", "meta"})
"""The tables every store that finished its first open has."""


def store_tables(conn: sqlite3.Connection) -> set[str]:
    """The names of the tables of the database ``conn`` reads, SQLite's own aside.

    Only reads the schema: the file is not written.

    Raises
    ------
    sqlite3.DatabaseError
        When the file is not a SQLite database.
    """
    rows = conn.execute(
        "SELECT CAST(name AS BLOB) FROM sqlite_master WHERE type = 'table'"
    ).fetchall()
    names = {_text(bytes(row[0])) for row in rows if row[0] is not None}
    return {name for name in names if not name.startswith("sqlite_")}


def check_store_tables(shown: str, tables: Iterable[str], *, complete: bool = False) -> None:
    """Refuse a database whose tables say it is not a store.

    The one test of "is this file a store" that :meth:`Store.open`, ``ctxfold
    inspect``, ``audit`` and ``repair`` share: a database holding any table a store
    does not have (:data:`STORE_TABLES`) belongs to another application.

    Parameters
    ----------
    shown : str
        The path, as the error names it.
    tables : iterable of str
        The database's tables (:func:`store_tables`).
    complete : bool
        Also require the tables every opened store has (``branches``, ``records``,
        ``meta``): for a reader, which must not create them. An opener gives False, so
        an empty database (or one whose first open stopped part way) becomes a store.

    Raises
    ------
    NotAStoreError
        Naming the path and the tables that are not a store's (or the missing ones).

    Examples
    --------
    >>> try:
    ...     check_store_tables("app.db", {"users"})
    ... except NotAStoreError as exc:
    ...     print(str(exc)[:72])
    app.db is a SQLite database but not a store: it holds the table users, w
    >>> check_store_tables("new.db", set())
    """
    present = set(tables)
    foreign = sorted(present - STORE_TABLES)
    if foreign:
        shown_tables = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise NotAStoreError(
            f"{shown} is a SQLite database but not a store: it holds the "
            f"table{'s' if len(foreign) > 1 else ''} {shown_tables}, which no store has; "
            "nothing was written to it (open a new path, or an empty file, to create a store)"
        )
    missing = sorted(_CORE_TABLES - present)
    if complete and missing:
        raise NotAStoreError(
            f"{shown} is a SQLite database but not a store: it has no "
            f"{', '.join(missing)} table{'s' if len(missing) > 1 else ''}"
        )


_UNPARSED: Any = object()

MEDIA_BLOB_MIN_CHARS = 1024
"""Base64 image data at least this long is kept once in the blob table (by sha256) and
named from the record that holds it; shorter data stays inline."""
_BLOB_KEY = "data_sha256"
"""The key an image block holds its blob's sha256 under, in place of ``data``."""
_BLOB_MARK = f'"{_BLOB_KEY}":"'


def damaged(path: str, where: str, what: object) -> StoreCorruptError:
    """The error for damaged content at ``where`` (a table, row and column) of ``path``.

    Examples
    --------
    >>> str(damaged("a.db", "table records, row 7 (item 3), column body", "not JSON"))[:58]
    'a.db: table records, row 7 (item 3), column body is damage'
    """
    return StoreCorruptError(
        f"{path}: {where} is damaged ({what}); the rest of the store may be whole: run "
        f"'ctxfold audit {path}' to list the damaged rows and 'ctxfold repair {path} --apply' "
        "to copy every readable row into a new store, or restore the file from a copy"
    )


def _loads(text: str, path: str, where: str) -> Any:
    """Stored JSON ``text``, parsed; a :class:`StoreCorruptError` naming ``where`` when it
    is not JSON or holds text that was not valid UTF-8."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise damaged(path, where, f"not JSON: {exc}") from None
    if _has_bad_utf8(text):
        raise damaged(path, where, "bytes that are not UTF-8")
    return value


def _has_bad_utf8(text: str) -> bool:
    """Whether ``text`` holds bytes that were not UTF-8 (read as lone surrogates,
    :func:`_text`)."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _text(raw: bytes) -> str:
    """SQLite text as a str: bytes that are not UTF-8 kept as lone surrogates, so the row
    that holds them is named when it is read (:func:`_loads`), not the query failing."""
    return raw.decode("utf-8", "surrogateescape")


def _dumps(body: Any) -> str | None:
    return None if body is None else json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def _externalise(body: Any, put: Callable[[bytes], str]) -> Any:
    """``body`` with the data of each image block of at least
    :data:`MEDIA_BLOB_MIN_CHARS` characters stored by ``put`` and named by its digest;
    the body itself when it holds none (nothing is copied)."""
    if isinstance(body, dict):
        data = body.get("data")
        if (
            body.get("type") == "image"
            and isinstance(data, str)
            and len(data) >= MEDIA_BLOB_MIN_CHARS
            and _BLOB_KEY not in body
        ):
            return {**body, "data": None, _BLOB_KEY: put(data.encode("utf-8"))}
        out = {k: _externalise(v, put) for k, v in body.items()}
        return body if all(out[k] is body[k] for k in body) else out
    if isinstance(body, list):
        items = [_externalise(v, put) for v in body]
        return body if all(a is b for a, b in zip(items, body, strict=True)) else items
    return body


def _blob_digests(body: Any) -> Iterator[str]:
    """The sha256 of every blob an externalised body names."""
    if isinstance(body, dict):
        digest = body.get(_BLOB_KEY)
        if isinstance(digest, str):
            yield digest
        for value in body.values():
            yield from _blob_digests(value)
    elif isinstance(body, list):
        for value in body:
            yield from _blob_digests(value)


def _inline(body: Any, get: Callable[[str], bytes]) -> Any:
    """``body`` with every externalised image block's data read back by ``get``."""
    if isinstance(body, dict):
        if _BLOB_KEY in body and body.get("type") == "image":
            out = {k: v for k, v in body.items() if k != _BLOB_KEY}
            out["data"] = get(body[_BLOB_KEY]).decode("utf-8")
            return out
        return {k: _inline(v, get) for k, v in body.items()}
    if isinstance(body, list):
        return [_inline(v, get) for v in body]
    return body


class Item:
    """One live item of an append slot.

    Attributes
    ----------
    id : str
        The item id, unique in the store.
    seq : int
        The sequence of its append.
    body : Any
        Its body, edits applied (parsed from the stored JSON on first access).
    rev : int
        The id of the record holding the current body: unique in the store and
        changed by every edit, so ``(id, rev)`` names one version of the item on
        any branch.
    """

    __slots__ = ("_blobs", "_body", "_text", "id", "rev", "seq")

    def __init__(
        self,
        id: str,
        seq: int,
        body: Any = _UNPARSED,
        *,
        rev: int = 0,
        text: str | None = None,
        blobs: Callable[[str], bytes] | None = None,
    ) -> None:
        self.id = id
        self.seq = seq
        self.rev = rev
        self._body = body
        self._text = text if body is _UNPARSED else None
        self._blobs = blobs
        """Reads back media kept in the blob table, when the body is parsed and has any."""

    @property
    def origin(self) -> str:
        """The path of the store this item was read from, while its body is unparsed
        (``"the store"`` after, or for an item built in memory): what an error about its
        body names."""
        return str(getattr(getattr(self._blobs, "__self__", None), "path", "the store"))

    @property
    def body(self) -> Any:
        """The item's body (parsed on first access, then kept)."""
        if self._body is _UNPARSED:
            text = self._text
            if text is None:
                body = None
            else:
                path = self.origin
                where = f"table records, row {self.rev} (item {self.id}), column body"
                body = _loads(text, path, where)
            if self._blobs is not None and text is not None and _BLOB_MARK in text:
                body = _inline(body, self._blobs)
            self._body = body
            self._text = None
            self._blobs = None
        return self._body

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Item):
            return NotImplemented
        return (self.id, self.seq, self.body) == (other.id, other.seq, other.body)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Item(id={self.id!r}, seq={self.seq}, body={self.body!r})"


@dataclass(frozen=True)
class Branch:
    """A branch: its name, parent and the sequence it was cut at."""

    name: str
    parent: str | None
    fork_seq: int
    head_seq: int


def _sqlite_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        text = str(exc).lower()
        if "database or disk is full" in text:
            return sqlite3.SQLITE_FULL
        if "not a database" in text:
            return sqlite3.SQLITE_NOTADB
        return None
    return int(code) & 0xFF  # the primary code of an extended one


def _translate(path: str, exc: sqlite3.Error, action: str) -> StoreError:
    """The typed :class:`StoreError` for a SQLite failure of ``action`` on ``path``."""
    code = _sqlite_code(exc)
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    if code in _FULL_CODES:
        return StoreFullError(
            f"{path}: the disk or the database size limit is full, so {action} was rolled "
            "back and stored nothing; free space on the volume holding the store (or raise "
            "the limit) and retry: the store stays usable and earlier writes are intact"
        )
    if code in _BUSY_CODES:
        return StoreLockedError(
            f"{path}: {action} found the database locked by another connection ({exc}); "
            "close the other SQLite client writing to it and retry"
        )
    if code in _CORRUPT_CODES:
        return StoreCorruptError(
            f"{path}: {action} failed because the file is not a healthy store database "
            f"({exc}, {name}); restore it from a copy or open another path"
        )
    return StoreError(f"{path}: {action} failed ({exc}, {name})")


def _guarded(
    action: str,
) -> Callable[[Callable[Concatenate[Store, _P], _R]], Callable[Concatenate[Store, _P], _R]]:
    """Run a public method under the store's lock, turning SQLite errors into StoreError."""

    def decorate(fn: Callable[Concatenate[Store, _P], _R]) -> Callable[Concatenate[Store, _P], _R]:
        @functools.wraps(fn)
        def wrapper(self: Store, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            with self._mutex:
                try:
                    return fn(self, *args, **kwargs)
                except sqlite3.Error as exc:
                    raise self._failure(exc, action) from exc

        return wrapper

    return decorate


_log = logging.getLogger(__name__)

SCRATCH_KINDS = ("deriving", "repair", "audit")
"""The work that writes a scratch folder beside a store file (:func:`scratch`)."""
_OWNER = ".owner"
_UNOWNED_GRACE = 60.0
"""Seconds a scratch folder without its owner file is left alone (it may be one being
created right now)."""
_SCRATCH_META = "scratch:"
"""Prefix of the meta rows naming a derive's scratch folder beside its target."""


@contextmanager
def scratch(folder: str | os.PathLike[str], stem: str, kind: str) -> Iterator[Path]:
    """A scratch folder ``.<stem>.<kind>-XXXX`` in ``folder``, removed when the block ends.

    Its owner holds a lock on a file inside it for as long as the block runs, so
    :func:`sweep_scratch` can tell a folder in use from one a killed process left.

    Examples
    --------
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with scratch(folder, "agent.db", "repair") as work:
    ...     work.name.startswith(".agent.db.repair-")
    True
    >>> os.listdir(folder)
    []
    """
    if kind not in SCRATCH_KINDS:
        raise ValueError(f"kind must be one of {SCRATCH_KINDS}, got {kind!r}")
    path = tempfile.mkdtemp(prefix=f".{stem}.{kind}-", dir=folder)
    fd = -1
    try:
        fd = os.open(os.path.join(path, _OWNER), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if fd >= 0:
            os.close(fd)


def _abandoned(path: str, *, unowned: bool = False) -> bool:
    """Whether the scratch folder ``path`` has no live owner: its lock is free, or it has
    no owner file (``unowned``: at once; else after longer than a creation takes)."""
    try:
        fd = os.open(os.path.join(path, _OWNER), os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            return unowned or time.time() - os.stat(path).st_mtime > _UNOWNED_GRACE
        except FileNotFoundError:
            return False
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # its owner is alive
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def sweep_scratch(folder: str | os.PathLike[str], stem: str, *, unowned: bool = False) -> list[str]:
    """Remove the scratch folders of ``stem`` in ``folder`` that no live process owns
    (what a derive, repair or audit killed mid-way left); returns their paths.
    ``unowned``: a folder killed before it had its owner file goes too (only where no
    process may be creating one now).

    Examples
    --------
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> left = tempfile.mkdtemp(prefix=".agent.db.deriving-", dir=folder)
    >>> _ = open(os.path.join(left, ".owner"), "w").close()
    >>> [os.path.basename(p) == os.path.basename(left) for p in sweep_scratch(folder, "agent.db")]
    [True]
    """
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    prefixes = tuple(f".{stem}.{kind}-" for kind in SCRATCH_KINDS)
    for entry in entries:
        if not entry.name.startswith(prefixes) or not entry.is_dir(follow_symlinks=False):
            continue
        if _abandoned(entry.path, unowned=unowned):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def _checked_path(shown: str) -> str:
    """The real path of the store file ``shown``, or a :class:`StoreError` saying why no
    file can have that name (a NUL byte, a name or path longer than the system allows).

    Examples
    --------
    >>> _checked_path("a\\0b.db")
    Traceback (most recent call last):
    ...
    context_manager.store.StoreError: 'a\\x00b.db': a file path cannot hold a NUL byte
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


def _create_private(path: str | os.PathLike[str], mode: int) -> int:
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
    fd = _create_private(dest, mode)
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


def _recorded_writer(conn: sqlite3.Connection, tables: set[str]) -> _Writer | None:
    """The path, device and inode the last writer recorded (:func:`_note_writer`), or
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


def _note_writer(
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


def _refuse_another_name_s_log(
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


def _warn_other_names(real: str, shown: str, fd: int, recorded: _Writer | None) -> None:
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


class _Lock:
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
        try:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)


class Store:
    """The record store. Use :meth:`open`; close with :meth:`close` (or ``with``).

    Thread safety: one ``Store`` may be shared between threads. Every public
    method runs under the store's re-entrant lock, so operations never
    interleave. :meth:`transaction` holds that lock from its start to its
    commit or rollback: a transaction belongs to the thread that opened it
    (nested ``transaction()`` in that thread joins it), and another thread's
    reads and writes wait until it ends, so they never see its uncommitted
    writes. Enter and leave a transaction in the same thread.

    Examples
    --------
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "s.db")
    >>> with Store.open(path) as store:
    ...     first = store.append("messages", {"text": "hi"})
    ...     store.set("settings", {"k": 1})
    ...     [i.body for i in store.items("messages")], store.get("settings")
    ([{'text': 'hi'}], {'k': 1})
    """

    def __init__(self, conn: sqlite3.Connection, path: str, lock: _Lock | None) -> None:
        self._conn = conn
        self._path = path
        self._lock = lock
        self._mutex = threading.RLock()
        self._depth = 0
        self._aborted = False  # SQLite rolled back the open transaction on its own
        self._next_id = 0  # ids handed out by rolled-back appends are not reused
        self._saved: _View | None = None  # the view at the start of the open transaction
        self._closed = False
        self._cache: dict[str, Any] = {}
        self._undo: list[_Undo] = []  # in-place cache changes of the open transaction
        self._scopes: dict[str, int] = {}
        self._branch_id, self._branch_name = self._load_current()
        self._lineage = self._compute_lineage(self._branch_id)
        self._head = self._compute_head()

    # ---------------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str | os.PathLike[str], *, branch: str | None = None) -> Store:
        """Open or create the store at ``path``.

        Parameters
        ----------
        path : str or os.PathLike
            The store file (created with its directory when missing, readable and
            writable by its owner only, ``0600`` whatever the umask: it holds whole
            transcripts; an existing file keeps its mode), or ``":memory:"`` for a
            store that lives in memory.
        branch : str, optional
            Switch to this branch after opening.

        Returns
        -------
        Store
            The open store; it holds the file's writer lock until :meth:`close`.

        Warns
        -----
        StoreAliasWarning
            When the file has more than one name (hard links).

        Raises
        ------
        StoreLockedError
            When another process, or another ``Store`` in this process, has the
            same file open (by any name: symlinks and hard links included).
        StoreAliasError
            When the last writer opened the same file by another name (a hard link,
            or its name before a rename) and stopped without closing it, leaving its
            log there: opening by this name would lose those writes. Nothing is
            changed; the message names the name to open it by.
        NotAStoreError
            When the file is another application's SQLite database (it holds tables
            a store does not have, :func:`check_store_tables`): nothing is written
            to it. An empty file, or a new path, becomes a store.
        StoreCorruptError
            When the file is not a SQLite database, or is a damaged one.
        StoreFullError
            When there is no space to create the store.
        StoreError
            When the file cannot be opened or the branch does not exist. A
            failed open releases everything it took.
        """
        shown = os.fspath(path)
        if shown in (":memory:", ""):
            return cls._connect(shown, shown, None, branch)
        real = _checked_path(shown)
        try:
            Path(real).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"{shown}: cannot create the directory {Path(real).parent} ({exc.strerror})"
            ) from exc
        lock = _Lock(real, shown)
        try:
            return cls._connect(real, shown, lock, branch)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def _connect(cls, real: str, shown: str, lock: _Lock | None, branch: str | None) -> Store:
        try:
            conn = sqlite3.connect(real, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise _translate(shown, exc, "opening the store") from exc
        store: Store | None = None
        try:
            if lock is not None:
                info = os.stat(real)
                if (info.st_dev, info.st_ino) != lock.identity:
                    raise StoreError(
                        f"{shown} was replaced by another file while it was being opened; "
                        "open it again"
                    )
            conn.text_factory = _text
            # read before anything is written: another application's database is
            # refused as it was found
            tables = store_tables(conn)
            check_store_tables(shown, tables)
            recorded = None
            if lock is not None:  # a writer: is this the name the last one wrote through?
                recorded = _recorded_writer(conn, tables)
                _refuse_another_name_s_log(real, shown, lock.identity, recorded)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.executescript(SCHEMA)
            if conn.execute("SELECT COUNT(*) FROM branches").fetchone()[0] == 0:
                conn.execute(
                    "INSERT INTO branches (name, parent, fork_seq, created) "
                    "VALUES ('main', NULL, 0, ?)",
                    (time.time(),),
                )
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('current_branch', 'main')")
            if lock is not None:
                _note_writer(conn, real, lock.identity, recorded)
            store = cls(conn, shown, None)
            if branch is not None:
                store.switch_branch(branch)
        except sqlite3.Error as exc:
            conn.close()
            raise _translate(shown, exc, "opening the store") from exc
        except OSError as exc:
            conn.close()
            raise StoreError(f"{shown}: cannot open the store ({exc.strerror})") from exc
        except BaseException:
            conn.close()
            raise
        store._lock = lock  # handed over only once the open has succeeded
        if lock is not None:  # the one writer: no derive, repair or audit of it runs
            store._sweep(real)
            _warn_other_names(real, shown, lock.fd, recorded)
        return store

    def _sweep(self, real: str) -> None:
        """Remove what a derive, repair or audit of this store killed mid-way left: the
        scratch folders beside it, and those its derives named beside their targets."""
        gone = sweep_scratch(os.path.dirname(real), os.path.basename(real))
        with suppress(sqlite3.Error):
            rows = self._conn.execute(
                "SELECT key, value FROM meta WHERE key LIKE ?", (_SCRATCH_META + "%",)
            ).fetchall()
            for key, value in rows:
                # no derive of this store runs while its writer opens it
                folder, stem = json.loads(value)
                gone += sweep_scratch(folder, stem, unowned=True)
                self._conn.execute("DELETE FROM meta WHERE key = ?", (key,))
        for path in gone:
            _log.info("removed %s, left by a derive, repair or audit that did not finish", path)

    def close(self) -> None:
        """Close the database and release the lock (idempotent).

        Waits for another thread's transaction to end first.

        Raises
        ------
        StoreError
            When called inside this thread's own :meth:`transaction`.
        """
        with self._mutex:
            if self._closed:
                return
            if self._depth:
                raise StoreError(
                    f"{self._path}: cannot close the store inside a transaction; "
                    "leave the transaction block first"
                )
            self._closed = True
            try:
                self._conn.close()
            finally:
                if self._lock is not None:
                    self._lock.release()
                    self._lock = None

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    @property
    def path(self) -> str:
        """The path the store was opened by."""
        return self._path

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ transactions
    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes into one atomic transaction (nesting joins the outer one).

        The calling thread holds the store until the transaction ends: other
        threads' operations wait for its commit or rollback.

        Raises
        ------
        StoreFullError
            When the disk fills during the transaction; all of it is rolled back.
        StoreError
            When SQLite fails otherwise, or rolled the transaction back on its own
            after a failed write whose error the block caught.
        """
        with self._mutex:
            self._check_open()
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._failure(exc, "starting a transaction") from exc
            self._depth = 1
            self._aborted = False
            self._saved = self._view()
            try:
                yield
            except BaseException:
                self._rollback()
                raise
            else:
                if self._aborted:
                    self._rollback()
                    raise StoreError(
                        f"{self._path}: the transaction was rolled back after a failed write "
                        "inside it; nothing in it was stored, retry it"
                    )
                try:
                    self._conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    self._rollback()
                    raise self._failure(exc, "committing the transaction") from exc
            finally:
                self._depth = 0
                self._aborted = False
                self._saved = None
                self._undo = []

    def _view(self) -> _View:
        """The in-memory view of committed state, to restore when a transaction rolls back.

        Cached values are replaced, never changed in place, so a shallow copy suffices.
        """
        self._undo = []
        return (
            dict(self._cache),
            self._head,
            self._branch_id,
            self._branch_name,
            list(self._lineage),
        )

    def _restore(self) -> None:
        if self._saved is None:
            return
        # item lists are changed in place (an append is O(1)): undo those changes first
        for items, op, at, old in reversed(self._undo):
            if op == "append":
                del items[at:]
            elif op == "edit":
                items[at] = old
            else:
                items.insert(at, old)
        self._undo = []
        cache, self._head, self._branch_id, self._branch_name, lineage = self._saved
        self._cache = dict(cache)
        self._lineage = list(lineage)

    def _rollback(self) -> None:
        """Roll back the open transaction (if SQLite has not) and restore the memory view."""
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            raise _translate(self._path, exc, "rolling back the transaction") from exc
        finally:
            self._restore()

    def _failure(self, exc: sqlite3.Error, action: str) -> StoreError:
        """Translate ``exc``; a full disk, or SQLite abandoning it, ends the open transaction.

        The transaction is then rolled back whole, whatever SQLite undid on its own,
        and the rest of its block cannot write.
        """
        if self._closed:
            return StoreError(f"{self._path}: the store is closed")
        full = _sqlite_code(exc) in _FULL_CODES
        if self._depth and not self._aborted and (full or not self._conn.in_transaction):
            self._aborted = True
            with suppress(sqlite3.Error):  # the exit rolls back again if need be
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
            self._restore()
        return _translate(self._path, exc, action)

    def _write(
        self, slot: str, op: str, item: str | None, body: Any, rowid: int | None = None
    ) -> tuple[int, int, str | None]:
        """Insert one record; returns its row id, its sequence and the body's JSON text.

        The slot's cached value is dropped; the caller puts the new one back."""
        self._check_open()
        self._check_not_aborted()
        with self.transaction():
            text = _dumps(body)
            if (
                op in ("append", "edit")
                and text is not None
                and len(text) > MEDIA_BLOB_MIN_CHARS
                and '"type":"image"' in text
            ):  # large media goes to the blob table, once
                text = _dumps(_externalise(body, self.put_blob))
            seq = self._head + 1
            cur = self._conn.execute(
                "INSERT INTO records (id, branch, seq, slot, op, item, body) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (rowid, self._branch_id, seq, slot, op, item, text),
            )
            self._head = seq
            self._cache.pop(slot, None)
            assert cur.lastrowid is not None
            return cur.lastrowid, seq, text

    def _changed(self, items: list[Item], op: str, at: int, old: Any = None) -> None:
        """Note an in-place change of a cached list, to undo if the transaction rolls back."""
        if self._depth:
            self._undo.append((items, op, at, old))

    def _check_not_aborted(self) -> None:
        if self._aborted:
            raise StoreError(
                f"{self._path}: the transaction was rolled back after a failed write inside "
                "it; leave the transaction block and retry it"
            )

    # ------------------------------------------------------------ append slots
    @_guarded("appending an item")
    def append(self, slot: str, body: Any) -> Item:
        """Append an item to ``slot``; its id is unique in the store.

        The id of an append whose transaction rolled back is not given to
        another item while the store stays open.

        Raises
        ------
        StoreFullError
            When the disk is full; nothing is stored.
        """
        self._check_open()
        cached = self._cache.get(slot)
        with self.transaction():
            rowid = max(int(self._conn.execute(_NEXT_RECORD_ID).fetchone()[0]), self._next_id)
            item_id = str(rowid)
            _, seq, text = self._write(slot, "append", item_id, body, rowid)
            self._next_id = rowid + 1
            item = Item(item_id, seq, rev=rowid, text=text, blobs=self.get_blob)
            if cached is not None:
                self._changed(cached, "append", len(cached))
                cached.append(item)
                self._cache[slot] = cached
        return item

    @_guarded("editing an item")
    def edit(self, slot: str, item_id: str, body: Any) -> Item:
        """Replace the body of a live item; returns the item as edited.

        Raises
        ------
        StoreError
            When ``item_id`` is not a live item of ``slot`` on this branch.
        """
        if slot not in self._cache:  # not read yet: check the one item, read nothing else
            seq = self._live_seq(slot, item_id)
            rowid, _, text = self._write(slot, "edit", item_id, body)
            return Item(item_id, seq, rev=rowid, text=text, blobs=self.get_blob)
        at = self._index(slot, item_id)
        cached = self._live(slot)
        with self.transaction():
            rowid, _, text = self._write(slot, "edit", item_id, body)
            self._changed(cached, "edit", at, cached[at])
            item = cached[at] = Item(
                item_id, cached[at].seq, rev=rowid, text=text, blobs=self.get_blob
            )
            self._cache[slot] = cached
        return item

    @_guarded("redacting an item")
    def redact(self, slot: str, item_id: str) -> None:
        """Remove a live item (the record stays; the item no longer reads).

        Raises
        ------
        StoreError
            When ``item_id`` is not a live item of ``slot`` on this branch.
        """
        if slot not in self._cache:
            self._live_seq(slot, item_id)
            self._write(slot, "redact", item_id, None)
            return
        at = self._index(slot, item_id)
        cached = self._live(slot)
        with self.transaction():
            self._write(slot, "redact", item_id, None)
            self._changed(cached, "redact", at, cached[at])
            del cached[at]
            self._cache[slot] = cached

    @_guarded("reading items")
    def items(self, slot: str) -> list[Item]:
        """Live items of ``slot`` in append order, edits applied."""
        return list(self._live(slot))

    def _live(self, slot: str) -> list[Item]:
        """The cached live items of ``slot`` (shared: callers must not change it)."""
        cached = self._cache.get(slot)
        if cached is None:
            cached = self._materialize(slot)
            self._cache[slot] = cached
        return cached

    @_guarded("reading an item")
    def item(self, slot: str, item_id: str) -> Item | None:
        """One live item, or None."""
        for it in reversed(self._live(slot)):
            if it.id == item_id:
                return it
        return None

    def _live_seq(self, slot: str, item_id: str) -> int:
        """The append sequence of the live item ``item_id``, from its own records."""
        clauses = " OR ".join("(branch = ? AND seq <= ?)" for _ in self._lineage)
        params: list[Any] = [slot, item_id]
        for branch_id, limit in self._lineage:
            params += [branch_id, limit]
        rows = self._conn.execute(
            f"SELECT op, seq FROM records WHERE slot = ? AND item = ? AND ({clauses}) ORDER BY seq",
            params,
        ).fetchall()
        appended = next((seq for op, seq in rows if op == "append"), None)
        if appended is None or rows[-1][0] == "redact":
            raise StoreError(f"{item_id!r} is not a live item of slot {slot!r} on this branch")
        return int(appended)

    def _index(self, slot: str, item_id: str) -> int:
        """Where the live item ``item_id`` sits in the cached items of ``slot``."""
        live = self._live(slot)
        for at in range(len(live) - 1, -1, -1):  # recent items are the likely ones
            if live[at].id == item_id:
                return at
        raise StoreError(f"{item_id!r} is not a live item of slot {slot!r} on this branch")

    def _materialize(self, slot: str) -> list[Item]:
        # rows come in sequence order, so the dict keeps append order; bodies stay JSON
        # text until read
        live: dict[str, Item] = {}
        blobs = self.get_blob  # one bound method for every item
        for op, item, seq, body, rowid in self._rows(slot):
            if op == "append":
                live[item] = Item(item, seq, rev=rowid, text=body, blobs=blobs)
            elif op == "edit":
                old = live.get(item)
                if old is not None:
                    live[item] = Item(item, old.seq, rev=rowid, text=body, blobs=blobs)
            elif op == "redact":
                live.pop(item, None)
        return list(live.values())

    # ---------------------------------------------------------- snapshot slots
    @_guarded("setting a snapshot")
    def set(self, slot: str, value: Any) -> None:
        """Store ``value`` as the current snapshot of ``slot``.

        Raises
        ------
        StoreFullError
            When the disk is full; nothing is stored.
        """
        with self.transaction():
            self._write(slot, "set", None, value)
            self._cache[slot] = value

    @_guarded("reading a snapshot")
    def get(self, slot: str, default: Any = None) -> Any:
        """The current snapshot of ``slot`` (``default`` when never set)."""
        if slot in self._cache:
            return self._cache[slot]
        value = default
        for seq, body in self._sets(slot, 1):
            where = f"table records, the snapshot of {slot!r} at sequence {seq}, column body"
            value = _loads(body, self._path, where) if body is not None else None
        self._cache[slot] = value
        return value

    @_guarded("reading snapshot history")
    def history(self, slot: str, limit: int) -> list[tuple[int, Any]]:
        """The newest ``limit`` snapshots of ``slot`` this branch sees, newest first.

        Returns
        -------
        list of (int, Any)
            ``(seq, value)`` pairs; the first is the current snapshot (what :meth:`get`
            returns). Only those records are read.
        """
        return [
            (
                seq,
                _loads(b, self._path, f"table records, {slot!r} at sequence {seq}, column body")
                if b is not None
                else None,
            )
            for seq, b in self._sets(slot, limit)
        ]

    def _sets(self, slot: str, limit: int) -> list[tuple[int, str | None]]:
        """The newest ``limit`` snapshot records of ``slot`` seen by this branch."""
        rows: list[tuple[int, str | None]] = []
        for branch_id, upto in self._lineage:  # each an index walk from the newest
            rows += self._conn.execute(
                "SELECT seq, body FROM records WHERE slot = ? AND branch = ? AND seq <= ? "
                "AND op = 'set' ORDER BY seq DESC LIMIT ?",
                (slot, branch_id, upto, limit),
            ).fetchall()
        rows.sort(key=lambda r: -r[0])
        return rows[:limit]

    def _rows(self, slot: str) -> list[tuple[str, str, int, str | None, int]]:
        clauses = " OR ".join("(branch = ? AND seq <= ?)" for _ in self._lineage)
        params: list[Any] = [slot]
        for branch_id, limit in self._lineage:
            params += [branch_id, limit]
        return self._conn.execute(
            f"SELECT op, item, seq, body, id FROM records WHERE slot = ? AND ({clauses}) "
            "ORDER BY seq",
            params,
        ).fetchall()

    # ----------------------------------------------------- derived item values
    @_guarded("reading derived values")
    def derived_items(
        self, scope: str, items: Sequence[int] | None = None
    ) -> dict[int, tuple[int, int, int, int, int, int]]:
        """Values derived from items and their neighbours, saved by :meth:`save_derived`.

        They are not records: not sequenced, not branched, and never part of what a
        slot reads. Each row names the versions it was derived from (the item's
        :attr:`Item.rev` and its neighbours'), so a caller keeps a row only while those
        versions are still what it sees, whichever branch wrote it.

        Parameters
        ----------
        scope : str
            Whose values (for instance a slot and the counter that derived them).
        items : sequence of int, optional
            Only these items' rows.

        Returns
        -------
        dict
            Item id (as int) -> ``(rev, prev rev, next rev, a, b, c)``.
        """
        scope_id = self._scope_id(scope, create=False)
        if scope_id is None:
            return {}
        query = "SELECT item, rev, prev, next, a, b, c FROM derived_items WHERE scope = ?"
        if items is None:
            rows = self._conn.execute(query, (scope_id,)).fetchall()
        else:
            rows = []
            for k in range(0, len(items), 500):
                part = list(items[k : k + 500])
                marks = ",".join("?" * len(part))
                rows += self._conn.execute(
                    f"{query} AND item IN ({marks})", (scope_id, *part)
                ).fetchall()
        return {r[0]: r[1:] for r in rows}

    @_guarded("saving derived values")
    def save_derived(
        self, scope: str, rows: Iterable[tuple[int, int, int, int, int, int, int]]
    ) -> None:
        """Save derived values ``(item, rev, prev rev, next rev, a, b, c)`` of ``scope``
        (replacing the item's earlier row); part of the open transaction, if any.

        Raises
        ------
        StoreFullError
            When the disk is full; nothing is saved.
        """
        self._save_rows(scope, "derived_items", 8, rows)

    @_guarded("dropping derived values")
    def drop_derived(self, scope: str, items: Iterable[int]) -> None:
        """Forget the derived values of ``items`` in ``scope``."""
        self._check_open()
        self._check_not_aborted()
        scope_id = self._scope_id(scope, create=False)
        if scope_id is None:
            return
        with self.transaction():
            self._conn.executemany(
                "DELETE FROM derived_items WHERE scope = ? AND item = ?",
                ((scope_id, i) for i in items),
            )

    @property
    @_guarded("reading the branch id")
    def branch_id(self) -> int:
        """The current branch's id (what a view saved for one branch is keyed by)."""
        return self._branch_id

    @_guarded("reading records")
    def records_after(self, slot: str, seq: int) -> list[tuple[str, str, int, int]]:
        """Records of ``slot`` this branch sees after ``seq``, oldest first, without
        their bodies: ``(op, item, seq, rev)`` (``rev`` is the record id)."""
        clauses = " OR ".join("(branch = ? AND seq <= ? AND seq > ?)" for _ in self._lineage)
        params: list[Any] = [slot]
        for branch_id, limit in self._lineage:
            params += [branch_id, limit, seq]
        return self._conn.execute(
            f"SELECT op, item, seq, id FROM records WHERE slot = ? AND ({clauses}) ORDER BY seq",
            params,
        ).fetchall()

    @_guarded("reading a body")
    def body_at(self, rev: int) -> Any:
        """The body written by the record ``rev`` (an :attr:`Item.rev`).

        Raises
        ------
        StoreError
            When no record has that id.
        """
        row = self._conn.execute("SELECT body FROM records WHERE id = ?", (rev,)).fetchone()
        if row is None:
            raise StoreError(f"{self._path}: no record {rev}")
        return Item("", 0, rev=rev, text=row[0], blobs=self.get_blob).body

    @_guarded("reading a derived blob")
    def derived_blob(self, key: str) -> bytes | None:
        """A blob saved by :meth:`save_derived_blob` (not a record: never branched)."""
        row = self._conn.execute("SELECT data FROM derived_blobs WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    @_guarded("saving a derived blob")
    def save_derived_blob(self, key: str, data: bytes) -> None:
        """Save (replace) the blob ``key``; part of the open transaction, if any.

        Raises
        ------
        StoreFullError
            When the disk is full; nothing is saved.
        """
        self._check_open()
        self._check_not_aborted()
        with self.transaction():
            self._conn.execute("INSERT OR REPLACE INTO derived_blobs VALUES (?, ?)", (key, data))

    @_guarded("reading saved counts")
    def derived_counts(self, scope: str) -> dict[bytes, int]:
        """Counts saved by :meth:`save_counts` under ``scope``: digest -> count.

        Like :meth:`derived_items` they are not records: a digest names what was
        counted, so a count is right on every branch."""
        scope_id = self._scope_id(scope, create=False)
        if scope_id is None:
            return {}
        rows = self._conn.execute(
            "SELECT digest, tokens FROM derived_counts WHERE scope = ?", (scope_id,)
        ).fetchall()
        return {bytes(d): int(t) for d, t in rows}

    @_guarded("saving counts")
    def save_counts(self, scope: str, rows: Iterable[tuple[bytes, int]]) -> None:
        """Save ``(digest, count)`` pairs under ``scope``; part of the open transaction.

        Raises
        ------
        StoreFullError
            When the disk is full; nothing is saved.
        """
        self._save_rows(scope, "derived_counts", 3, rows)

    def _save_rows(self, scope: str, table: str, width: int, rows: Iterable[Any]) -> None:
        """Insert ``rows`` (each a tuple, the scope column first added) into ``table``."""
        self._check_open()
        self._check_not_aborted()
        marks = ", ".join("?" * width)
        with self.transaction():
            scope_id = self._scope_id(scope, create=True)
            self._conn.executemany(
                f"INSERT OR REPLACE INTO {table} VALUES ({marks})",
                ((scope_id, *row) for row in rows),
            )

    def _scope_id(self, scope: str, *, create: bool) -> int | None:
        known = self._scopes.get(scope)
        if known is not None:
            return known
        row = self._conn.execute(
            "SELECT id FROM derived_scopes WHERE name = ?", (scope,)
        ).fetchone()
        if row is None:
            if not create:
                return None
            cur = self._conn.execute("INSERT INTO derived_scopes (name) VALUES (?)", (scope,))
            assert cur.lastrowid is not None
            scope_id = int(cur.lastrowid)
            # a scope created in a transaction that rolls back is not remembered
            return scope_id
        self._scopes[scope] = int(row[0])
        return int(row[0])

    # ------------------------------------------------------------------ blobs
    @_guarded("storing a blob")
    def put_blob(self, data: bytes) -> str:
        """Store ``data`` once; returns its sha256.

        Raises
        ------
        StoreFullError
            When the disk is full; nothing is stored.
        """
        digest = hashlib.sha256(data).hexdigest()
        self._check_open()
        self._check_not_aborted()
        self._conn.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?)", (digest, data))
        return digest

    @_guarded("reading a blob")
    def get_blob(self, digest: str) -> bytes:
        """The blob with this sha256.

        Raises
        ------
        StoreError
            When no such blob exists.
        """
        row = self._conn.execute("SELECT data FROM blobs WHERE sha256 = ?", (digest,)).fetchone()
        if row is None:
            raise StoreError(f"no blob with sha256 {digest}")
        return bytes(row[0])

    # --------------------------------------------------------------- branches
    @property
    @_guarded("reading the sequence")
    def sequence(self) -> int:
        """The newest sequence number visible on the current branch."""
        return self._head

    @property
    @_guarded("reading the branch")
    def branch(self) -> str:
        """The current branch name."""
        return self._branch_name

    @_guarded("creating a branch")
    def branch_at(self, seq: int, name: str | None = None) -> str:
        """Create a branch that sees the current branch up to ``seq``; returns its name.

        Raises
        ------
        StoreError
            When the name is taken or ``seq`` is outside ``[0, sequence]``.
        """
        self._check_open()
        self._check_not_aborted()
        if not 0 <= seq <= self._head:
            raise StoreError(f"cannot branch at sequence {seq}: the branch head is {self._head}")
        name = name or f"branch-{int(time.time() * 1000)}"
        try:
            with self.transaction():
                self._conn.execute(
                    "INSERT INTO branches (name, parent, fork_seq, created) VALUES (?, ?, ?, ?)",
                    (name, self._branch_id, seq, time.time()),
                )
        except sqlite3.IntegrityError:
            raise StoreError(f"a branch named {name!r} already exists") from None
        return name

    @_guarded("forking a branch")
    def fork(self, name: str | None = None) -> str:
        """Branch at the current head and switch to it."""
        name = self.branch_at(self._head, name)
        self.switch_branch(name)
        return name

    @_guarded("switching branch")
    def switch_branch(self, name: str) -> None:
        """Make ``name`` the current branch (remembered across opens).

        Raises
        ------
        StoreError
            When no branch has that name.
        """
        self._check_open()
        self._check_not_aborted()
        row = self._conn.execute("SELECT id FROM branches WHERE name = ?", (name,)).fetchone()
        if row is None:
            known = ", ".join(b.name for b in self.list_branches())
            raise StoreError(f"unknown branch {name!r}; branches: {known}")
        self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('current_branch', ?)", (name,))
        self._branch_id, self._branch_name = int(row[0]), name
        self._lineage = self._compute_lineage(self._branch_id)
        self._head = self._compute_head()
        self._cache.clear()

    @_guarded("listing branches")
    def list_branches(self) -> list[Branch]:
        """Every branch, oldest first."""
        rows = self._conn.execute(
            "SELECT b.id, b.name, p.name, b.fork_seq FROM branches b "
            "LEFT JOIN branches p ON p.id = b.parent ORDER BY b.id"
        ).fetchall()
        out = []
        for branch_id, name, parent, fork_seq in rows:
            own = self._conn.execute(
                "SELECT MAX(seq) FROM records WHERE branch = ?", (branch_id,)
            ).fetchone()[0]
            out.append(Branch(name, parent, int(fork_seq), int(own or fork_seq)))
        return out

    @_guarded("deriving a store")
    def derive(self, path: str | os.PathLike[str], seq: int) -> None:
        """Write a new store at ``path`` whose ``main`` branch is this branch up to ``seq``.

        Every record the current branch sees up to ``seq`` is copied with its record
        id and sequence number, in every slot (so every namespace's records and
        window), with the blobs those records name and the saved token counts; the
        derived views are not: they are rebuilt from the records on first use. The
        new store hands out ids after the highest this one has, so no item id it
        carries is ever given again. The new file appears whole or not at all (it is
        written in a private scratch folder beside ``path``, then linked into place);
        a derive killed mid-way leaves that folder, and the next open of this store
        removes it. The new file has this store's permissions (a store is created
        ``0600``), and nothing is written through a symlink: a link at ``path``, even
        one to no file, is refused.

        Raises
        ------
        StoreError
            When ``seq`` is outside ``[0, sequence]``, a transaction is open (its
            writes are not stored yet), ``path`` already exists (a symlink included)
            or is this store's own file, or the new file cannot be written (nothing
            is left behind).
        """
        self._check_open()
        self._check_not_aborted()
        shown = os.fspath(path)
        if self._depth:
            raise StoreError(
                f"cannot derive into {shown!r} inside a transaction: its writes are not "
                "stored yet; derive after the transaction ends"
            )
        if not 0 <= seq <= self._head:
            raise StoreError(f"cannot derive at sequence {seq}: the branch head is {self._head}")
        target = Path(os.path.realpath(shown))
        if shown in (":memory:", "") or target.exists():
            raise StoreError(
                f"cannot derive into {shown!r}: it must name a new file "
                "(a derived store never overwrites one)"
            )
        if os.path.islink(shown) or os.path.lexists(target):
            raise StoreError(
                f"cannot derive into {shown!r}: a symbolic link is there (to "
                f"{os.readlink(shown) if os.path.islink(shown) else target}); a derived "
                "store is written to a new file, never through a link"
            )
        if not target.parent.is_dir():
            raise StoreError(
                f"cannot derive into {shown!r}: the folder {target.parent} does not exist; "
                "create it first"
            )
        # where the derive writes is named in this store before anything is written
        # there, and until it is gone: the next open removes what a kill left
        key = f"{_SCRATCH_META}{target}"
        where = json.dumps([str(target.parent), target.name])
        try:
            self._conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, where))
        except sqlite3.Error as exc:
            raise self._failure(exc, "noting where a derive writes") from exc
        mode = stat.S_IMODE(os.fstat(self._lock.fd).st_mode) if self._lock else STORE_MODE
        try:
            with scratch(target.parent, target.name, "deriving") as work:
                self._derive_into(work / target.name, target, shown, seq, mode)
        finally:
            with suppress(sqlite3.Error):
                self._conn.execute("DELETE FROM meta WHERE key = ?", (key,))

    def _derive_into(self, temporary: Path, target: Path, shown: str, seq: int, mode: int) -> None:
        """:meth:`derive`, writing the new store at ``temporary`` (created exclusively in
        a private scratch folder beside ``target``), then giving it ``mode`` (this
        store's permissions) and linking it into place."""
        child: Store | None = None
        try:
            os.close(_create_private(temporary, STORE_MODE))
            child = Store.open(temporary)
            with child.transaction():
                (main,) = child._conn.execute("SELECT id FROM branches").fetchone()
                digests: set[str] = set()

                def rows_of(branch_id: int, limit: int) -> Iterator[tuple[Any, ...]]:
                    for row in self._conn.execute(
                        "SELECT id, seq, slot, op, item, body FROM records "
                        "WHERE branch = ? AND seq <= ? ORDER BY seq",
                        (branch_id, limit),
                    ):
                        if row[5] and _BLOB_KEY in row[5]:
                            digests.update(_blob_digests(json.loads(row[5])))
                        yield (row[0], main, *row[1:])

                for branch_id, limit in self._lineage:
                    child._conn.executemany(
                        "INSERT INTO records (id, branch, seq, slot, op, item, body) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        rows_of(branch_id, min(limit, seq)),
                    )
                (top,) = self._conn.execute(_NEXT_RECORD_ID).fetchone()
                child._conn.execute("DELETE FROM sqlite_sequence WHERE name = 'records'")
                child._conn.execute(
                    "INSERT INTO sqlite_sequence (name, seq) VALUES ('records', ?)", (top - 1,)
                )
                for digest in sorted(digests):
                    child._conn.execute(
                        "INSERT INTO blobs VALUES (?, ?)", (digest, self.get_blob(digest))
                    )
                for (scope,) in self._conn.execute("SELECT name FROM derived_scopes").fetchall():
                    child.save_counts(scope, self.derived_counts(scope).items())
            child._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            child.close()
            os.chmod(temporary, mode)
            os.link(temporary, target)  # fails, rather than overwrites, if target appeared
        except BaseException as exc:
            if child is not None:
                child.close()
            for leftover in (temporary, *(Path(f"{temporary}{x}") for x in ("-wal", "-shm"))):
                with suppress(FileNotFoundError):
                    leftover.unlink()
            if isinstance(exc, FileExistsError):
                raise StoreError(
                    f"cannot derive into {shown!r}: the file appeared while it was being "
                    "written (a derived store never overwrites one)"
                ) from exc
            if isinstance(exc, OSError):
                raise StoreError(
                    f"{shown}: cannot write the derived store ({exc.strerror}); "
                    "nothing was left behind"
                ) from exc
            raise

    def _load_current(self) -> tuple[int, str]:
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'current_branch'").fetchone()
        name = row[0] if row else "main"
        found = self._conn.execute("SELECT id FROM branches WHERE name = ?", (name,)).fetchone()
        if found is None:
            raise StoreError(f"the store names a current branch {name!r} that does not exist")
        return int(found[0]), name

    def _compute_lineage(self, branch_id: int) -> list[tuple[int, int]]:
        """The branch and its ancestors, each with the last sequence it lends; a damaged
        branch table (a parent that does not exist, a cycle) is a
        :class:`StoreCorruptError`."""
        lineage: list[tuple[int, int]] = []
        limit = 2**62
        current: int | None = branch_id
        seen: set[int] = set()
        while current is not None:
            where = f"table branches, row {current}"
            if current in seen:
                raise damaged(self._path, where, "its parents lead back to itself")
            seen.add(current)
            lineage.append((current, limit))
            row = self._conn.execute(
                "SELECT parent, fork_seq FROM branches WHERE id = ?", (current,)
            ).fetchone()
            if row is None:
                raise damaged(self._path, where, "a branch names it as its parent, but it is gone")
            parent, fork_seq = row
            if not isinstance(fork_seq, int) or (
                parent is not None and not isinstance(parent, int)
            ):
                raise damaged(self._path, where, "its parent or fork sequence is not a number")
            limit = min(limit, fork_seq)
            current = parent
        return lineage

    def _compute_head(self) -> int:
        head = 0
        for branch_id, limit in self._lineage:
            row = self._conn.execute(
                "SELECT MAX(seq) FROM records WHERE branch = ? AND seq <= ?", (branch_id, limit)
            ).fetchone()
            if row[0] is not None:
                head = max(head, int(row[0]))
        own = self._lineage[0]
        fork = self._conn.execute(
            "SELECT fork_seq FROM branches WHERE id = ?", (own[0],)
        ).fetchone()
        return max(head, int(fork[0]))

    @_guarded("checking integrity")
    def integrity_check(self) -> list[str]:
        """SQLite's integrity check plus the log's own rules; empty when healthy."""
        problems = [
            str(r[0])
            for r in self._conn.execute("PRAGMA integrity_check").fetchall()
            if r[0] != "ok"
        ]
        orphans = self._conn.execute(
            "SELECT COUNT(*) FROM records WHERE op = 'append' AND item IS NULL"
        ).fetchone()[0]
        if orphans:
            problems.append(f"{orphans} appended records have no item id")
        return problems

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self._path}: the store is closed")
