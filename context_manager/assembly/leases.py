"""Leases: one compaction at a time per conversation.

A lease record is ``{nonce, ts}`` under a key; it is active while
``now - ts < ttl``. Acquiring is one atomic step of the store: a fresh nonce
goes in unless an active record is there (busy; so does a store locked by
another writer). Releasing clears the record only if it still holds our nonce, so a lease
taken over after expiry is never cleared by its former holder.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..tokens import compact_json
from .errors import STATE, AssemblyError
from .wire import AnyMessage

log = logging.getLogger(__name__)

__all__ = [
    "LEASE_SCOPE",
    "InMemoryLeaseStore",
    "LeaseRecord",
    "LeaseStore",
    "PostgresLeaseStore",
    "SqliteLeaseStore",
    "default_lease_key",
]

LEASE_SCOPE: Final = "context_lease"


@dataclass(frozen=True)
class LeaseRecord:
    """Who holds a lease (``nonce``) and since when (``ts``, milliseconds)."""

    nonce: str
    ts: int

    def active(self, now: int, ttl_ms: int) -> bool:
        """Whether the lease still holds at ``now``."""
        return now - self.ts < ttl_ms


class LeaseStore(ABC):
    """Lease records by key; subclasses provide read, put-if-idle and compare-and-clear.

    Examples
    --------
    >>> store = InMemoryLeaseStore()
    >>> nonce = store.acquire("k", now=1000, ttl_ms=300_000)
    >>> store.acquire("k", now=2000, ttl_ms=300_000) is None
    True
    >>> store.release("k", nonce)
    >>> store.acquire("k", now=3000, ttl_ms=300_000) is not None
    True
    """

    @abstractmethod
    def read(self, key: str) -> LeaseRecord | None:
        """The record under ``key``, if any."""

    @abstractmethod
    def clear_if(self, key: str, nonce: str) -> None:
        """Clear the record under ``key`` if it holds ``nonce``."""

    @abstractmethod
    def put_if_idle(self, key: str, record: LeaseRecord, ttl_ms: int) -> bool:
        """Atomically store ``record`` unless an active record (at ``record.ts``) is there."""

    def acquire(self, key: str, *, now: int, ttl_ms: int) -> str | None:
        """A fresh nonce when the lease is taken, ``None`` when it is busy.

        A store that fails to answer (locked, unreadable, unwritable) reads as busy:
        the caller skips compaction rather than fail the request. Only a lease store
        that cannot be opened at all is a ``context/state`` error (at construction).
        """
        mine = LeaseRecord(secrets.token_hex(16), now)
        try:
            taken = self.put_if_idle(key, mine, ttl_ms)
        except Exception as exc:
            log.warning("lease store failed (%s); the lease reads as busy", exc)
            return None
        return mine.nonce if taken else None

    def release(self, key: str, nonce: str) -> None:
        """Give the lease back (a no-op if someone else holds it now)."""
        with contextlib.suppress(Exception):  # a record left behind expires with its TTL
            self.clear_if(key, nonce)


class InMemoryLeaseStore(LeaseStore):
    """Leases shared by the threads of one process."""

    def __init__(self) -> None:
        self._records: dict[str, LeaseRecord] = {}
        self._lock = threading.Lock()

    def read(self, key: str) -> LeaseRecord | None:
        with self._lock:
            return self._records.get(key)

    def clear_if(self, key: str, nonce: str) -> None:
        with self._lock:
            current = self._records.get(key)
            if current is not None and current.nonce == nonce:
                del self._records[key]

    def put_if_idle(self, key: str, record: LeaseRecord, ttl_ms: int) -> bool:
        with self._lock:
            current = self._records.get(key)
            if current is not None and current.active(record.ts, ttl_ms):
                return False
            self._records[key] = record
            return True


class SqliteLeaseStore(LeaseStore):
    """Leases in a SQLite file, shared by every process that opens it.

    Parameters
    ----------
    path : str or Path
        The database file; its directory is created when missing.
    timeout_s : float
        How long to wait for another process's write lock.
    """

    def __init__(self, path: str | Path, *, timeout_s: float = 5.0) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.closing(self._connect()) as db:
                db.execute(
                    "CREATE TABLE IF NOT EXISTS leases ("
                    " scope TEXT NOT NULL, key TEXT NOT NULL, nonce TEXT NOT NULL,"
                    " ts INTEGER NOT NULL, PRIMARY KEY (scope, key))"
                )
        except (OSError, sqlite3.Error) as exc:
            raise AssemblyError(
                STATE,
                f"cannot open the lease store {self.path}: {exc}; set lease_dir to a "
                "writable directory",
            ) from exc

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
        return db

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[tuple[sqlite3.Connection, LeaseRecord | None]]:
        """The record under ``key`` inside a write transaction, committed on success."""
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute(
                "SELECT nonce, ts FROM leases WHERE scope = ? AND key = ?", (LEASE_SCOPE, key)
            ).fetchone()
            yield db, LeaseRecord(row[0], row[1]) if row else None
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    @staticmethod
    def _put(db: sqlite3.Connection, key: str, record: LeaseRecord) -> None:
        db.execute(
            "INSERT OR REPLACE INTO leases (scope, key, nonce, ts) VALUES (?, ?, ?, ?)",
            (LEASE_SCOPE, key, record.nonce, record.ts),
        )

    def read(self, key: str) -> LeaseRecord | None:
        with contextlib.closing(self._connect()) as db:
            row = db.execute(
                "SELECT nonce, ts FROM leases WHERE scope = ? AND key = ?", (LEASE_SCOPE, key)
            ).fetchone()
        return LeaseRecord(row[0], row[1]) if row else None

    def clear_if(self, key: str, nonce: str) -> None:
        with self._locked(key) as (db, current):
            if current is not None and current.nonce == nonce:
                db.execute("DELETE FROM leases WHERE scope = ? AND key = ?", (LEASE_SCOPE, key))

    def put_if_idle(self, key: str, record: LeaseRecord, ttl_ms: int) -> bool:
        with self._locked(key) as (db, current):
            if current is not None and current.active(record.ts, ttl_ms):
                return False
            self._put(db, key, record)
        return True


class PostgresLeaseStore(LeaseStore):
    """Leases in a PostgreSQL database (its ``ctxfold.leases`` table), shared by every
    process and host using it: several service processes behind one load balancer
    take turns compacting a conversation.

    Taking a lease is one statement (an insert, or an update of an expired holder's
    row, under the row's lock), so two processes never both take it. Connections come
    from a small pool.

    Parameters
    ----------
    url : str
        ``postgresql://...``; the database's store catalog is migrated when needed
        (:func:`context_manager.store.postgres.migrate`).
    max_connections : int
        The pool's size.

    Raises
    ------
    AssemblyError
        ``context/state`` when the database cannot be reached or psycopg is missing.
    """

    def __init__(self, url: str, *, max_connections: int = 4) -> None:
        try:
            from psycopg_pool import ConnectionPool

            from ..store.postgres import address, connect, migrate
        except ImportError as exc:
            raise AssemblyError(
                STATE,
                f"lease_url needs psycopg 3: pip install 'context-folding[postgres]' ({exc})",
            ) from exc
        where = address(url)
        self.shown = where.shown.rsplit("agent=", 1)[0].rstrip("?&")
        try:
            with connect(where.conninfo, where.shown) as raw:
                migrate(raw)
        except Exception as exc:
            raise AssemblyError(
                STATE, f"cannot open the lease store {self.shown}: {exc}; check lease_url"
            ) from exc
        self._pool = ConnectionPool(
            where.conninfo,
            min_size=1,
            max_size=max_connections,
            kwargs={"autocommit": True},
            open=True,
            name="ctxfold-leases",
        )

    def close(self) -> None:
        """Close the pool's connections."""
        self._pool.close()

    def read(self, key: str) -> LeaseRecord | None:
        with self._pool.connection() as db:
            row = db.execute("SELECT nonce, ts FROM ctxfold.leases WHERE key = %s", (key,))
            found = row.fetchone()
        return LeaseRecord(found[0], int(found[1])) if found else None

    def clear_if(self, key: str, nonce: str) -> None:
        with self._pool.connection() as db:
            db.execute("DELETE FROM ctxfold.leases WHERE key = %s AND nonce = %s", (key, nonce))

    def put_if_idle(self, key: str, record: LeaseRecord, ttl_ms: int) -> bool:
        with self._pool.connection() as db:
            taken = db.execute(
                "INSERT INTO ctxfold.leases AS held (key, nonce, ts) VALUES (%s, %s, %s) "
                "ON CONFLICT (key) DO UPDATE SET nonce = EXCLUDED.nonce, ts = EXCLUDED.ts "
                "WHERE EXCLUDED.ts - held.ts >= %s RETURNING nonce",
                (key, record.nonce, record.ts, ttl_ms),
            ).fetchone()
        return taken is not None


def default_lease_key(messages: Iterable[AnyMessage]) -> str:
    """sha256 hex over each message's compact JSON followed by a zero byte."""
    digest = hashlib.sha256()
    for message in messages:
        digest.update(compact_json(message.wire()).encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()
