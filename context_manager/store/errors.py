"""The store's typed errors, and the translation of a SQLite failure into one.

Every error a store raises is a :class:`StoreError` naming the file, the slot, item or
branch, and the fix; :func:`translate` picks the one for a SQLite failure (a full disk,
a lock held by another connection, a damaged file), and :func:`damaged` words the one
for damaged content at a named table, row and column.
"""

from __future__ import annotations

import sqlite3

from ..errors import ContextManagerError

FULL_CODES = frozenset({sqlite3.SQLITE_FULL})
_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
_CORRUPT_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


class StoreError(ContextManagerError):
    """A store operation failed: names the slot, item, branch or file and the fix."""


class StoreLockedError(StoreError):
    """Another writer (another process, or another :class:`Store`) holds the store."""


class StoreConnectionError(StoreError):
    """The connection to the store's database server was lost or refused.

    A transaction it interrupted stored nothing (a transaction is all or nothing);
    one interrupted at its commit may have been stored, and the store reads it back
    as it is. The next operation reconnects (and takes the writer lock again)."""


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


def sqlite_code(exc: sqlite3.Error) -> int | None:
    """The primary SQLite result code of ``exc`` (read from its message when it carries
    none), or None."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        text = str(exc).lower()
        if "database or disk is full" in text:
            return sqlite3.SQLITE_FULL
        if "not a database" in text:
            return sqlite3.SQLITE_NOTADB
        return None
    return int(code) & 0xFF  # the primary code of an extended one


def translate(path: str, exc: sqlite3.Error, action: str) -> StoreError:
    """The typed :class:`StoreError` for a SQLite failure of ``action`` on ``path``."""
    code = sqlite_code(exc)
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    if code in FULL_CODES:
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
