"""Opening a store file, and deriving a new store from one: :class:`Store`.

:meth:`Store.open` checks the path and the file (:mod:`.files`, :mod:`.schema`),
takes the writer lock, creates the tables, and removes what a derive, repair or
audit killed mid-way left (:mod:`.scratch_folders`); :meth:`Store.derive` writes a
new store of this branch up to a sequence. The rest of the store is its parts:
:mod:`.connection`, :mod:`.slots`, :mod:`.branches` and :mod:`.derived`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any, Protocol

from .bodies import BLOB_KEY, blob_digests, sqlite_text
from .branches import BranchStore
from .connection import guarded
from .derived import DerivedStore
from .dialect import Dialect
from .errors import StoreError, translate
from .files import (
    STORE_MODE,
    WriterLock,
    checked_path,
    create_private,
    note_writer,
    recorded_writer,
    refuse_another_name_s_log,
    warn_other_names,
)
from .schema import SCHEMA, check_store_tables, store_tables
from .scratch_folders import scratch, sweep_scratch
from .slots import SlotStore

# the package's logger: what a store logs is named context_manager.store
_log = logging.getLogger(__package__)

_SCRATCH_META = "scratch:"
"""Prefix of the meta rows naming a derive's scratch folder beside its target."""


class Store(SlotStore, BranchStore, DerivedStore):
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

    # ---------------------------------------------------------------- opening
    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, branch: str | None = None, agent: str | None = None
    ) -> Store:
        """Open or create the store at ``path``.

        Parameters
        ----------
        path : str or os.PathLike
            The store file (created with its directory when missing, readable and
            writable by its owner only, ``0600`` whatever the umask: it holds whole
            transcripts; an existing file keeps its mode), ``":memory:"`` for a
            store that lives in memory, or a PostgreSQL URL
            (``postgresql://HOST/DB``): the store of one agent in that database, a
            :class:`~context_manager.store.postgres.PostgresStore` (the ``postgres``
            extra).
        branch : str, optional
            Switch to this branch after opening.
        agent : str, optional
            With a URL: whose store (else the URL's ``agent`` parameter, else
            ``"main"``). Refused with a file.

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
        engine = url_engine(shown)
        if engine is not None:
            return engine.open(shown, agent=agent, branch=branch)
        if agent is not None:
            raise StoreError(
                f"agent={agent!r} names an agent in a PostgreSQL database; {shown!r} is a "
                "store file, one agent's already (give a postgresql:// URL, or no agent)"
            )
        if shown in (":memory:", ""):
            return cls._connect(shown, shown, None, branch)
        real = checked_path(shown)
        try:
            Path(real).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"{shown}: cannot create the directory {Path(real).parent} ({exc.strerror})"
            ) from exc
        lock = WriterLock(real, shown)
        try:
            return cls._connect(real, shown, lock, branch)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def _connect(cls, real: str, shown: str, lock: WriterLock | None, branch: str | None) -> Store:
        try:
            conn = sqlite3.connect(real, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise translate(shown, exc, "opening the store") from exc
        store: Store | None = None
        try:
            if lock is not None:
                info = os.stat(real)
                if (info.st_dev, info.st_ino) != lock.identity:
                    raise StoreError(
                        f"{shown} was replaced by another file while it was being opened; "
                        "open it again"
                    )
            conn.text_factory = sqlite_text
            # read before anything is written: another application's database is
            # refused as it was found
            tables = store_tables(conn)
            check_store_tables(shown, tables)
            recorded = None
            if lock is not None:  # a writer: is this the name the last one wrote through?
                recorded = recorded_writer(conn, tables)
                refuse_another_name_s_log(real, shown, lock.identity, recorded)
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
                note_writer(conn, real, lock.identity, recorded)
            store = cls(conn, shown, None)
            if branch is not None:
                store.switch_branch(branch)
        except sqlite3.Error as exc:
            conn.close()
            raise translate(shown, exc, "opening the store") from exc
        except OSError as exc:
            conn.close()
            raise StoreError(f"{shown}: cannot open the store ({exc.strerror})") from exc
        except BaseException:
            conn.close()
            raise
        store._lock = lock  # handed over only once the open has succeeded
        if lock is not None:  # the one writer: no derive, repair or audit of it runs
            store._sweep(real)
            warn_other_names(real, shown, lock.fd, recorded)
        return store

    def _sweep(self, real: str | None) -> None:
        """Remove what a derive, repair or audit of this store killed mid-way left: the
        scratch folders beside its file (``real``, None for a store in a database
        server), and those its derives named beside their targets."""
        gone = [] if real is None else sweep_scratch(os.path.dirname(real), os.path.basename(real))
        with suppress(*self._sql.errors):
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

    @guarded("deriving a store")
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
        self._into_new_store(shown, lambda conn, sql: self._copy_branch(conn, sql, seq))

    def _into_new_store(self, shown: str, copy: Callable[[Any, Dialect], None]) -> None:
        """Write a new store at ``shown`` (a new file, or a URL naming a new agent) by
        ``copy`` (given the new store's connection, inside its one transaction, and its
        engine's dialect); it appears whole or not at all."""
        engine = url_engine(shown)
        if engine is not None:
            engine.write_new(shown, copy)
            return
        target = Path(os.path.realpath(shown))
        if shown in (":memory:", "") or target.exists():
            raise StoreError(
                f"cannot write a new store at {shown!r}: it must name a new file "
                "(a derived or copied store never overwrites one)"
            )
        if os.path.islink(shown) or os.path.lexists(target):
            raise StoreError(
                f"cannot write a new store at {shown!r}: a symbolic link is there (to "
                f"{os.readlink(shown) if os.path.islink(shown) else target}); a derived "
                "or copied store is written to a new file, never through a link"
            )
        if not target.parent.is_dir():
            raise StoreError(
                f"cannot write a new store at {shown!r}: the folder {target.parent} does not "
                "exist; create it first"
            )
        # where the derive writes is named in this store before anything is written
        # there, and until it is gone: the next open removes what a kill left
        key = f"{_SCRATCH_META}{target}"
        where = json.dumps([str(target.parent), target.name])
        try:
            self._conn.execute(self._sql.upsert_meta, (key, where))
        except self._sql.errors as exc:
            raise self._failure(exc, "noting where a derive writes") from exc
        mode = stat.S_IMODE(os.fstat(self._lock.fd).st_mode) if self._lock else STORE_MODE
        try:
            with scratch(target.parent, target.name, "deriving") as work:
                self._write_file(work / target.name, target, shown, mode, copy)
        finally:
            with suppress(*self._sql.errors):
                self._conn.execute("DELETE FROM meta WHERE key = ?", (key,))

    def _write_file(
        self,
        temporary: Path,
        target: Path,
        shown: str,
        mode: int,
        copy: Callable[[Any, Dialect], None],
    ) -> None:
        """Write the new store at ``temporary`` (created exclusively in a private
        scratch folder beside ``target``) by ``copy``, then give it ``mode`` (this
        store's permissions) and link it into place."""
        child: Store | None = None
        try:
            os.close(create_private(temporary, STORE_MODE))
            child = Store.open(temporary)
            with child.transaction():
                copy(child._conn, child._sql)
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
                    f"cannot write a new store at {shown!r}: the file appeared while it was "
                    "being written (a derived or copied store never overwrites one)"
                ) from exc
            if isinstance(exc, OSError):
                raise StoreError(
                    f"{shown}: cannot write the new store ({exc.strerror}); nothing was left behind"
                ) from exc
            raise

    def _copy_branch(self, conn: Any, sql: Dialect, seq: int) -> None:
        """Copy this branch up to ``seq`` into the new store behind ``conn`` (an engine
        speaking ``sql``, inside its open transaction) as its ``main`` branch: every
        record with its id and sequence, the blobs they name, the saved counts; the
        new store's record ids continue after this one's."""
        (main,) = conn.execute("SELECT id FROM branches").fetchone()
        digests: set[str] = set()

        def rows_of(branch_id: int, limit: int) -> Iterator[tuple[Any, ...]]:
            for row in self._conn.execute(
                "SELECT id, seq, slot, op, item, body FROM records "
                "WHERE branch = ? AND seq <= ? ORDER BY seq",
                (branch_id, limit),
            ).fetchall():
                if row[5] and BLOB_KEY in row[5]:
                    digests.update(blob_digests(json.loads(row[5])))
                yield (row[0], main, *row[1:])

        for branch_id, limit in self._lineage:
            conn.executemany(
                "INSERT INTO records (id, branch, seq, slot, op, item, body) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows_of(branch_id, min(limit, seq)),
            )
        (top,) = self._conn.execute(self._sql.next_record_id).fetchone()
        sql.set_counters(conn, int(top))
        for digest in sorted(digests):
            conn.execute("INSERT INTO blobs VALUES (?, ?)", (digest, self.get_blob(digest)))
        for (scope,) in self._conn.execute("SELECT name FROM derived_scopes").fetchall():
            scope_id = sql.insert_id(conn, "INSERT INTO derived_scopes (name) VALUES (?)", (scope,))
            counts = self.derived_counts(scope).items()
            conn.executemany(sql.upsert["derived_counts"], ((scope_id, d, n) for d, n in counts))

    def _copy_whole(self, conn: Any, sql: Dialect) -> None:
        """Copy every row of this store (every branch, the current one, blobs, derived
        values and counts) into the new store behind ``conn`` (inside its open
        transaction), ids kept; a file store's notes of its writer and scratch folders
        are its own and stay."""
        conn.execute("DELETE FROM meta")
        conn.execute("DELETE FROM branches")
        for table, columns in COPIED_COLUMNS.items():
            rows = self._conn.execute(
                f"SELECT {', '.join(columns)} FROM {table} ORDER BY {columns[0]}"
            ).fetchall()
            if table == "meta":
                rows = [r for r in rows if not _file_note(r[0])]
            marks = ", ".join("?" * len(columns))
            conn.executemany(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})",
                [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in rows],
            )
        (top,) = self._conn.execute(self._sql.next_record_id).fetchone()
        sql.set_counters(conn, int(top))

    @guarded("copying the store")
    def copy_to(self, path: str | os.PathLike[str]) -> None:
        """Write a copy of this whole store at ``path`` (a new file) or a PostgreSQL URL
        (a new agent): every branch with its records and ids, the current branch, the
        blobs, the derived values and saved counts, so the copy compiles the same
        requests. What ``ctxfold migrate`` runs. The copy appears whole or not at all.

        Raises
        ------
        StoreError
            When a transaction is open, or ``path`` already exists (a file, a link or
            an agent).
        """
        self._check_open()
        self._check_not_aborted()
        shown = os.fspath(path)
        if self._depth:
            raise StoreError(f"cannot copy into {shown!r} inside a transaction; copy after it ends")
        self._into_new_store(shown, self._copy_whole)

    @guarded("digesting the store")
    def content_digest(self) -> dict[str, str]:
        """A sha256 of each table's rows, in key order (a file's notes of its writer and
        scratch folders aside): two stores, of either engine, with equal digests hold
        the same record. What ``ctxfold migrate`` checks a copy by."""
        out: dict[str, str] = {}
        for table, columns in COPIED_COLUMNS.items():
            rows = [
                [bytes(v).hex() if isinstance(v, bytes | memoryview) else v for v in row]
                for row in self._conn.execute(f"SELECT {', '.join(columns)} FROM {table}")
                if not (table == "meta" and _file_note(row[0]))
            ]
            rows.sort(key=lambda r: r[:2])  # in Python: the engines' text orders differ
            out[table] = hashlib.sha256(json.dumps(rows).encode()).hexdigest()
        return out

    @guarded("checking integrity")
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


COPIED_COLUMNS: dict[str, tuple[str, ...]] = {
    "branches": ("id", "name", "parent", "fork_seq", "created"),
    "records": ("id", "branch", "seq", "slot", "op", "item", "body"),
    "blobs": ("sha256", "data"),
    "meta": ("key", "value"),
    "derived_scopes": ("id", "name"),
    "derived_items": ("scope", "item", "rev", "prev", "next", "a", "b", "c"),
    "derived_blobs": ("key", "data"),
    "derived_counts": ("scope", "digest", "tokens"),
}
"""Every table of a store and its columns, in an order a copy can insert them in."""


def _file_note(key: str) -> bool:
    """A meta row only a store file has: its writer's name, a derive's scratch folder."""
    return key == "writer" or key.startswith(_SCRATCH_META)


class Engine(Protocol):
    """A database server a store URL names: opens an agent's store, writes a new one."""

    def open(self, url: str, *, agent: str | None, branch: str | None) -> Store:
        """Open (creating when new) the store the URL (and ``agent``) names."""

    def write_new(self, url: str, copy: Callable[[Any, Dialect], None]) -> None:
        """Write a new store at ``url`` by ``copy`` (given its connection, inside its one
        transaction, and its dialect): whole or not at all; refused when it exists."""


URL_ENGINES: dict[str, Callable[[], Engine]] = {}
"""The engines of store URLs by scheme (``postgresql``), each a loader called when a URL
of it is first used, so an engine's driver is imported only by those who use it. The
package registers PostgreSQL's (:mod:`context_manager.store.postgres`)."""


def url_engine(path: str) -> Engine | None:
    """The engine of a store URL (``scheme://...``), None for a file path.

    Raises
    ------
    StoreError
        When the scheme names no engine, or its driver is not installed.
    """
    scheme, sep, _ = path.partition("://")
    if not sep:
        return None
    load = URL_ENGINES.get(scheme)
    if load is None:
        known = ", ".join(f"{k}://" for k in sorted(URL_ENGINES))
        raise StoreError(f"{path!r}: no store engine for {scheme}:// (the engines: {known})")
    return load()
