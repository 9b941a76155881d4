"""An open store's connection and its state: the current branch, its lineage and
head, the cached slot values; transactions and their rollback; the one write of a
record; the blob table of media.

:class:`StoreConnection` is the base the store's parts build on (:mod:`.slots`,
:mod:`.branches`, :mod:`.derived`); :func:`guarded` runs each of their public methods
under the store's lock, turning a SQLite failure into a :class:`~.errors.StoreError`.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from .bodies import MEDIA_BLOB_MIN_CHARS, Item, dump_stored, externalise
from .dialect import SQLITE, Dialect
from .errors import StoreError, damaged
from .files import WriterLock

# cache, head, branch id, branch name, lineage
_View = tuple[dict[str, Any], int, int, str, list[tuple[int, int]]]

# An in-place change of a cached item list, undone when its transaction rolls back:
# (the list, "append" | "edit" | "redact", index, the item it replaced or removed)
_Undo = tuple[list[Any], str, int, Any]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S", bound="StoreConnection")


def guarded(
    action: str,
) -> Callable[[Callable[Concatenate[_S, _P], _R]], Callable[Concatenate[_S, _P], _R]]:
    """Run a public method under the store's lock, turning driver errors into StoreError."""

    def decorate(fn: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
        @functools.wraps(fn)
        def wrapper(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            with self._mutex:
                self._ready()
                try:
                    return fn(self, *args, **kwargs)
                except self._sql.errors as exc:
                    raise self._failure(exc, action) from exc

        return wrapper

    return decorate


class StoreConnection:
    """The connection of an open store and its state, transactions and blobs.

    Built by :meth:`~.opening.Store.open`, which hands over the connection, the path it
    was opened by and the writer lock; a failed open never builds one. ``_sql`` is the
    engine's :class:`~.dialect.Dialect`; ``conn`` is a DB-API connection taking its
    statements (a :class:`sqlite3.Connection` for :data:`~.dialect.SQLITE`).
    """

    _sql: Dialect = SQLITE

    def __init__(self, conn: Any, path: str, lock: WriterLock | None) -> None:
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
        self._load_view()

    def _load_view(self) -> None:
        """Read the current branch, its lineage and head; forget every cached value."""
        self._cache = {}
        self._scopes = {}
        self._branch_id, self._branch_name = self._load_current()
        self._lineage = self._compute_lineage(self._branch_id)
        self._head = self._compute_head()
        if self._sql.writer_ids:  # ids handed out before stay handed out
            (top,) = self._conn.execute(self._sql.next_record_id).fetchone()
            self._next_id = max(self._next_id, int(top))

    def _ready(self) -> None:
        """Make the connection usable before an operation (an engine whose connection
        can be lost reconnects here); the embedded engine's always is."""

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

    def __enter__(self) -> Self:
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
            self._ready()
            try:
                self._sql.begin(self._conn)
            except self._sql.errors as exc:
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
                    self._sql.commit(self._conn)
                except self._sql.errors as exc:
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
        """Roll back the open transaction (if the engine has not) and restore the memory view."""
        try:
            self._sql.rollback(self._conn)
        except self._sql.errors as exc:
            raise self._sql.translate(self._path, exc, "rolling back the transaction") from exc
        finally:
            self._restore()

    def _failure(self, exc: BaseException, action: str) -> StoreError:
        """Translate ``exc``; a full disk, or the engine abandoning it, ends the open
        transaction.

        The transaction is then rolled back whole, whatever the engine undid on its
        own, and the rest of its block cannot write.
        """
        if self._closed:
            return StoreError(f"{self._path}: the store is closed")
        full = self._sql.is_full(exc)
        if self._depth and not self._aborted and (full or not self._conn.in_transaction):
            self._aborted = True
            with suppress(*self._sql.errors):  # the exit rolls back again if need be
                self._sql.rollback(self._conn)
            self._restore()
        return self._sql.translate(self._path, exc, action)

    def _write(
        self, slot: str, op: str, item: str | None, body: Any, *, claim: bool = False
    ) -> tuple[int, int, str | None]:
        """Insert one record; returns its row id, its sequence and the body's JSON text.

        With ``claim`` (an append), the record takes a new id never handed out before
        while the store is open, which is its item id too. The slot's cached value is
        dropped; the caller puts the new one back."""
        self._check_open()
        self._check_not_aborted()
        with self.transaction():
            text = dump_stored(body)
            if (
                op in ("append", "edit")
                and text is not None
                and len(text) > MEDIA_BLOB_MIN_CHARS
                and '"type":"image"' in text
            ):  # large media goes to the blob table, once
                text = dump_stored(externalise(body, self.put_blob))
            seq = self._head + 1
            if self._sql.writer_ids:
                rowid = self._next_id
                self._next_id += 1
                self._sql.defer(
                    self._conn,
                    "INSERT INTO records (id, branch, seq, slot, op, item, body) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (rowid, self._branch_id, seq, slot, op, str(rowid) if claim else item, text),
                )
            elif not claim:
                rowid = self._sql.insert_id(
                    self._conn,
                    "INSERT INTO records (branch, seq, slot, op, item, body) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (self._branch_id, seq, slot, op, item, text),
                )
            else:
                claimed = self._conn.execute(self._sql.claim_record_id).fetchone()[0]
                rowid = max(int(claimed), self._next_id)
                self._conn.execute(
                    "INSERT INTO records (id, branch, seq, slot, op, item, body) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (rowid, self._branch_id, seq, slot, op, str(rowid), text),
                )
                self._next_id = rowid + 1
            self._head = seq
            self._cache.pop(slot, None)
            return rowid, seq, text

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

    # ------------------------------------------------------------------ blobs
    @guarded("storing a blob")
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
        self._sql.defer(self._conn, self._sql.insert_blob, (digest, data))
        return digest

    @guarded("reading a blob")
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

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self._path}: the store is closed")
