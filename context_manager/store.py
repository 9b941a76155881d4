"""An append-only record store on SQLite, with branches by copy-on-write.

Every write is a *record* with a sequence number, in a named *slot*:

* append slots hold items (``append`` adds one, ``edit`` replaces its body,
  ``redact`` removes it);
* snapshot slots hold one value (``set``; the latest wins).

A branch sees its own records plus its parent's up to the sequence it was cut
at, recursively, so branching copies nothing. Large base64 payloads can be
moved to a content-addressed blob table (sha256, de-duplicated).

Durability: WAL journal, one SQLite transaction per logical write (see
:meth:`Store.transaction`), and an exclusive lock file so a second writer
process gets :class:`StoreLockedError` instead of interleaving writes. A
process killed at any instant loses at most the transaction in flight.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Branch", "Item", "Store", "StoreError", "StoreLockedError"]

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
"""


class StoreError(Exception):
    """A store operation failed: names the slot, item or branch and the fix."""


class StoreLockedError(StoreError):
    """Another process holds the store open for writing."""


@dataclass(frozen=True)
class Item:
    """One live item of an append slot."""

    id: str
    seq: int
    body: Any


@dataclass(frozen=True)
class Branch:
    """A branch: its name, parent and the sequence it was cut at."""

    name: str
    parent: str | None
    fork_seq: int
    head_seq: int


class Store:
    """The record store. Use :meth:`open`; close with :meth:`close` (or ``with``).

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

    def __init__(self, conn: sqlite3.Connection, path: str, lock: int | None) -> None:
        self._conn = conn
        self._path = path
        self._lock = lock
        self._depth = 0
        self._closed = False
        self._branch_id, self._branch_name = self._load_current()
        self._lineage = self._compute_lineage(self._branch_id)
        self._head = self._compute_head()
        self._cache: dict[str, Any] = {}

    # ---------------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str | os.PathLike[str], *, branch: str | None = None) -> Store:
        """Open or create the store at ``path``.

        Raises
        ------
        StoreLockedError
            When another process has the store open.
        """
        path = os.fspath(path)
        lock: int | None = None
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            lock = os.open(path + ".lock", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(lock)
                raise StoreLockedError(
                    f"{path} is open in another process; close it there first "
                    "(one writer at a time keeps the log consistent)"
                ) from None
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
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
        store = cls(conn, path, lock)
        if branch is not None:
            store.switch_branch(branch)
        return store

    def close(self) -> None:
        """Close the database and release the lock (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._conn.close()
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            os.close(self._lock)

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ transactions
    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes into one atomic transaction (nesting joins the outer one)."""
        self._check_open()
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self._conn.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            self._cache.clear()
            self._head = self._compute_head()
            raise
        else:
            self._conn.execute("COMMIT")
        finally:
            self._depth = 0

    def _write(self, slot: str, op: str, item: str | None, body: Any) -> tuple[int, int]:
        self._check_open()
        text = None if body is None else json.dumps(body, separators=(",", ":"), ensure_ascii=False)
        with self.transaction():
            seq = self._head + 1
            cur = self._conn.execute(
                "INSERT INTO records (branch, seq, slot, op, item, body) VALUES (?, ?, ?, ?, ?, ?)",
                (self._branch_id, seq, slot, op, item, text),
            )
            self._head = seq
            self._cache.pop(slot, None)
            assert cur.lastrowid is not None
            return cur.lastrowid, seq

    # ------------------------------------------------------------ append slots
    def append(self, slot: str, body: Any) -> Item:
        """Append an item to ``slot``; its id is unique in the store."""
        cached = self._cache.get(slot)
        with self.transaction():
            rowid, seq = self._write(slot, "append", None, body)
            item_id = str(rowid)
            self._conn.execute("UPDATE records SET item = ? WHERE id = ?", (item_id, rowid))
        item = Item(item_id, seq, json.loads(json.dumps(body)))
        if cached is not None:
            self._cache[slot] = [*cached, item]
        return item

    def edit(self, slot: str, item_id: str, body: Any) -> None:
        """Replace the body of a live item.

        Raises
        ------
        StoreError
            When ``item_id`` is not a live item of ``slot`` on this branch.
        """
        self._require_item(slot, item_id)
        cached = self._cache.get(slot)
        self._write(slot, "edit", item_id, body)
        if cached is not None:
            copy = json.loads(json.dumps(body))
            self._cache[slot] = [Item(i.id, i.seq, copy) if i.id == item_id else i for i in cached]

    def redact(self, slot: str, item_id: str) -> None:
        """Remove a live item (the record stays; the item no longer reads)."""
        self._require_item(slot, item_id)
        cached = self._cache.get(slot)
        self._write(slot, "redact", item_id, None)
        if cached is not None:
            self._cache[slot] = [i for i in cached if i.id != item_id]

    def items(self, slot: str) -> list[Item]:
        """Live items of ``slot`` in append order, edits applied."""
        cached = self._cache.get(slot)
        if cached is None:
            cached = self._materialize(slot)
            self._cache[slot] = cached
        return list(cached)

    def item(self, slot: str, item_id: str) -> Item | None:
        """One live item, or None."""
        for it in reversed(self.items(slot)):
            if it.id == item_id:
                return it
        return None

    def _require_item(self, slot: str, item_id: str) -> None:
        if self.item(slot, item_id) is None:
            raise StoreError(f"{item_id!r} is not a live item of slot {slot!r} on this branch")

    def _materialize(self, slot: str) -> list[Item]:
        order: dict[str, int] = {}
        bodies: dict[str, Any] = {}
        for op, item, seq, body in self._rows(slot):
            if op == "append":
                order[item] = seq
                bodies[item] = json.loads(body) if body is not None else None
            elif op == "edit" and item in bodies and body is not None:
                bodies[item] = json.loads(body)
            elif op == "redact":
                bodies.pop(item, None)
                order.pop(item, None)
        return [Item(i, order[i], bodies[i]) for i in sorted(order, key=order.__getitem__)]

    # ---------------------------------------------------------- snapshot slots
    def set(self, slot: str, value: Any) -> None:
        """Store ``value`` as the current snapshot of ``slot``."""
        self._write(slot, "set", None, value)
        self._cache[slot] = value

    def get(self, slot: str, default: Any = None) -> Any:
        """The current snapshot of ``slot`` (``default`` when never set)."""
        if slot in self._cache:
            return self._cache[slot]
        value = default
        for op, _item, _seq, body in self._rows(slot):
            if op == "set":
                value = json.loads(body) if body is not None else None
        self._cache[slot] = value
        return value

    def _rows(self, slot: str) -> list[tuple[str, str, int, str | None]]:
        clauses = " OR ".join("(branch = ? AND seq <= ?)" for _ in self._lineage)
        params: list[Any] = [slot]
        for branch_id, limit in self._lineage:
            params += [branch_id, limit]
        return self._conn.execute(
            f"SELECT op, item, seq, body FROM records WHERE slot = ? AND ({clauses}) ORDER BY seq",
            params,
        ).fetchall()

    # ------------------------------------------------------------------ blobs
    def put_blob(self, data: bytes) -> str:
        """Store ``data`` once; returns its sha256."""
        digest = hashlib.sha256(data).hexdigest()
        self._check_open()
        self._conn.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?)", (digest, data))
        return digest

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
    def sequence(self) -> int:
        """The newest sequence number visible on the current branch."""
        return self._head

    @property
    def branch(self) -> str:
        """The current branch name."""
        return self._branch_name

    def branch_at(self, seq: int, name: str | None = None) -> str:
        """Create a branch that sees the current branch up to ``seq``; returns its name.

        Raises
        ------
        StoreError
            When the name is taken or ``seq`` is outside ``[0, sequence]``.
        """
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

    def fork(self, name: str | None = None) -> str:
        """Branch at the current head and switch to it."""
        name = self.branch_at(self._head, name)
        self.switch_branch(name)
        return name

    def switch_branch(self, name: str) -> None:
        """Make ``name`` the current branch (remembered across opens)."""
        row = self._conn.execute("SELECT id FROM branches WHERE name = ?", (name,)).fetchone()
        if row is None:
            known = ", ".join(b.name for b in self.list_branches())
            raise StoreError(f"unknown branch {name!r}; branches: {known}")
        self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('current_branch', ?)", (name,))
        self._branch_id, self._branch_name = int(row[0]), name
        self._lineage = self._compute_lineage(self._branch_id)
        self._head = self._compute_head()
        self._cache.clear()

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

    def _load_current(self) -> tuple[int, str]:
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'current_branch'").fetchone()
        name = row[0] if row else "main"
        found = self._conn.execute("SELECT id FROM branches WHERE name = ?", (name,)).fetchone()
        if found is None:
            raise StoreError(f"the store names a current branch {name!r} that does not exist")
        return int(found[0]), name

    def _compute_lineage(self, branch_id: int) -> list[tuple[int, int]]:
        lineage: list[tuple[int, int]] = []
        limit = 2**62
        current: int | None = branch_id
        while current is not None:
            lineage.append((current, limit))
            parent, fork_seq = self._conn.execute(
                "SELECT parent, fork_seq FROM branches WHERE id = ?", (current,)
            ).fetchone()
            limit = min(limit, int(fork_seq))
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
            raise StoreError("the store is closed")
