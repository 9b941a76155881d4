"""The tables of a store: the schema every open creates, and the one test of whether
a SQLite database is a store (:func:`check_store_tables`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from .bodies import sqlite_text
from .errors import NotAStoreError

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
NEXT_RECORD_ID = (
    "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'records'), 0), "
    "COALESCE((SELECT MAX(id) FROM records), 0)) + 1"
)


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
    names = {sqlite_text(bytes(row[0])) for row in rows if row[0] is not None}
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
