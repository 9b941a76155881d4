"""What differs between the database engines a store runs on, named once per engine.

The store's parts (:mod:`.connection`, :mod:`.slots`, :mod:`.branches`,
:mod:`.derived`) write one SQL text for both engines, with ``?`` placeholders and the
same tables and columns; the few statements and behaviours that differ are a
:class:`Dialect`'s: how a write transaction starts, the upserts, how a new record id
is claimed, how an inserted row's id is read back, and which driver errors mean what.
:data:`SQLITE` is the embedded engine's; the PostgreSQL one is
:data:`context_manager.store.postgres.POSTGRES`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import FULL_CODES, StoreError, sqlite_code, translate
from .schema import NEXT_RECORD_ID


@dataclass(frozen=True)
class Dialect:
    """The statements and error rules of one database engine.

    Every statement takes ``?`` placeholders (a driver that wants another style
    translates them in its connection).
    """

    name: str
    """``"sqlite"`` or ``"postgresql"``."""
    defer: Callable[[Any, str, tuple[Any, ...]], None]
    """Runs a statement whose result is not read (an engine may send it later in the
    transaction, raising its error then)."""
    begin: Callable[[Any], None]
    """Starts a write transaction on the connection (an engine may defer sending it
    until the transaction's first statement)."""
    commit: Callable[[Any], None]
    """Commits the transaction :attr:`begin` started."""
    upsert_meta: str
    """``(key, value)`` into ``meta``, replacing the key's value."""
    insert_blob: str
    """``(sha256, data)`` into ``blobs``, nothing when the digest is there."""
    upsert: dict[str, str]
    """By table (``derived_items``, ``derived_counts``, ``derived_blobs``): an insert of
    a whole row replacing the row with the same key."""
    claim_record_id: str
    """Selects the id the next appended record takes (a claimed id is never reused)."""
    writer_ids: bool
    """The store's writer hands out record ids itself, from the next free id read at
    open (it is the only writer of the agent's tables), so a record's insert needs no
    answer from the database; else each append claims its id
    (:attr:`claim_record_id`) and other records take the table's next."""
    next_record_id: str
    """Selects the id after the highest ever handed out, claiming nothing."""
    errors: tuple[type[BaseException], ...]
    """The driver's errors, each translated into a :class:`StoreError`."""
    integrity_errors: tuple[type[BaseException], ...]
    """A constraint refused the write (a name taken)."""
    is_full: Callable[[BaseException], bool]
    """The disk (or the database's size limit) is full."""
    translate: Callable[[str, BaseException, str], StoreError]
    """The typed error for a failure of an action on a store, by its name."""
    insert_id: Callable[[Any, str, tuple[Any, ...]], int]
    """Runs an insert into a table with an ``id`` column; returns the new row's id."""
    rollback: Callable[[Any], None]
    """Ends the connection's open (or failed) transaction, if any."""
    set_counters: Callable[[Any, int], None]
    """After rows were copied in with their ids: the next record id is at least the
    given one, and new branch and scope ids follow the highest copied."""


def _sqlite_insert_id(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> int:
    cur = conn.execute(sql, params)
    assert cur.lastrowid is not None
    return int(cur.lastrowid)


def _sqlite_defer(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> None:
    conn.execute(sql, params)


def _sqlite_begin(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")


def _sqlite_commit(conn: sqlite3.Connection) -> None:
    conn.execute("COMMIT")


def _sqlite_rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _sqlite_set_counters(conn: sqlite3.Connection, top: int) -> None:
    # branches and scopes take rowids (the highest plus one); records keep AUTOINCREMENT's
    conn.execute("DELETE FROM sqlite_sequence WHERE name = 'records'")
    conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('records', ?)", (top - 1,))


def _sqlite_translate(path: str, exc: BaseException, action: str) -> StoreError:
    assert isinstance(exc, sqlite3.Error)
    return translate(path, exc, action)


def _sqlite_full(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.Error) and sqlite_code(exc) in FULL_CODES


SQLITE = Dialect(
    name="sqlite",
    defer=_sqlite_defer,
    begin=_sqlite_begin,
    commit=_sqlite_commit,
    upsert_meta="INSERT OR REPLACE INTO meta VALUES (?, ?)",
    insert_blob="INSERT OR IGNORE INTO blobs VALUES (?, ?)",
    upsert={
        "derived_items": "INSERT OR REPLACE INTO derived_items VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        "derived_counts": "INSERT OR REPLACE INTO derived_counts VALUES (?, ?, ?)",
        "derived_blobs": "INSERT OR REPLACE INTO derived_blobs VALUES (?, ?)",
    },
    claim_record_id=NEXT_RECORD_ID,
    writer_ids=False,
    next_record_id=NEXT_RECORD_ID,
    errors=(sqlite3.Error,),
    integrity_errors=(sqlite3.IntegrityError,),
    is_full=_sqlite_full,
    translate=_sqlite_translate,
    insert_id=_sqlite_insert_id,
    rollback=_sqlite_rollback,
    set_counters=_sqlite_set_counters,
)
"""The embedded engine: one SQLite file per store."""
