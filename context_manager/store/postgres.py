"""The store on PostgreSQL: many agents' records in one shared database.

``Store.open("postgresql://HOST/DB", agent="a1")`` (or ``...?agent=a1`` in the URL)
opens agent ``a1``'s store, a :class:`PostgresStore`: the same API, records,
branches, blobs and derived tables as a SQLite store, and the same guarantees.

Layout
    A catalog schema ``ctxfold`` holds the migrations applied (``migrations``), the
    agents (``agents``: id, name) and the compaction leases shared by service
    processes (``leases``: key, holder's nonce, taken at ``ts`` in milliseconds; see
    :class:`~context_manager.assembly.leases.PostgresLeaseStore`). Each agent's tables
    live in a schema of their own,
    ``ctxfold_agent_<id>``, with the columns of the SQLite store's tables
    (:data:`~context_manager.store.schema.SCHEMA`), so the store's statements are the
    same on both engines (:class:`~context_manager.store.dialect.Dialect` names the
    few that differ). An agent's store is dropped with its schema; the catalog grows
    by one row and nine relations per agent.

Migrations
    :func:`migrate` applies :data:`MIGRATIONS` in order, each in its own transaction
    with its row in ``ctxfold.migrations``, under a constant session advisory lock:
    several processes opening stores on a new database at once apply each migration
    once, the others waiting for it. Every open checks the version first (one
    query) and takes the lock only when something is missing. A database written by
    a newer library is refused, not downgraded.

One writer per agent
    An open store holds a session advisory lock on its agent (keyed by the agent's
    id, so two agents never share one): a second writer of the same agent, from any
    process or host, is refused with :class:`~.errors.StoreLockedError` naming the
    holder's process and client address, and writers of different agents proceed in
    parallel. The server releases the lock when the holder's connection ends, a
    crashed process's included (on TCP, once keepalives notice the peer is gone:
    the connection asks for them, ``keepalives_idle=10``).

Transactions
    One store transaction is one PostgreSQL transaction (READ COMMITTED: the agent's
    tables have one writer, so nothing else writes between its reads and writes;
    the catalog's creation of an agent is serialised by an advisory lock on the
    name). A failed statement ends its transaction, as a full disk ends a SQLite
    one: it is rolled back whole and its block cannot write. A lost connection
    raises :class:`~.errors.StoreConnectionError` with nothing half-written; the next
    operation reconnects, takes the writer lock again and reads the store as it is.

Round trips
    The writer hands out record ids itself (it is the agent's only writer), so no
    write waits for an answer: a transaction's writes are queued with their
    parameters bound and sent with ``BEGIN`` and ``COMMIT`` as one query, or with
    the first statement whose result is read (:class:`PgConnection`). An add is one
    round trip, a transaction that wrote nothing none; an error of a queued write
    is raised when it is sent and rolls the whole transaction back.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import psycopg.errors
from psycopg.pq import TransactionStatus

from .dialect import Dialect
from .errors import (
    StoreConnectionError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreLockedError,
)
from .opening import Store

URL_SCHEMES = ("postgresql://", "postgres://")
"""A store path starting with one of these is a PostgreSQL database's URL."""

CATALOG = "ctxfold"
"""The schema of the catalog: migrations, agents, leases."""

_LOCK_CLASS = 0x63746600
"""The first key of every advisory lock the store takes (the second names the object):
``_LOCK_CLASS`` itself with 0 for migrations, ``+ 1`` with an agent's id for its writer,
``+ 2`` with a name's hash for creating an agent of that name."""
_WRITER = _LOCK_CLASS + 1
_CREATING = _LOCK_CLASS + 2

_KEEPALIVES = {"keepalives": "1", "keepalives_idle": "10", "keepalives_interval": "5"}
_KEEPALIVES |= {"keepalives_count": "3", "connect_timeout": "10"}

AGENT_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,200}")
"""An agent's name: 1 to 200 characters, none a control character."""


@dataclass(frozen=True)
class Migration:
    """One step of the catalog's schema: its version, what it does, its SQL."""

    version: int
    name: str
    sql: str


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "the catalog of agents",
        f"""
        CREATE TABLE {CATALOG}.agents (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            name text NOT NULL UNIQUE,
            created timestamptz NOT NULL DEFAULT now()
        );
        """,
    ),
    Migration(
        2,
        "compaction leases shared by service processes",
        f"""
        CREATE TABLE {CATALOG}.leases (
            key text PRIMARY KEY,
            nonce text NOT NULL,
            ts bigint NOT NULL
        );
        """,
    ),
)
"""The catalog's migrations, in order; :func:`migrate` applies the missing ones."""

SCHEMA_VERSION = MIGRATIONS[-1].version
"""The catalog version this library writes."""

AGENT_TABLES = """
CREATE TABLE branches (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    name text NOT NULL UNIQUE,
    parent bigint REFERENCES branches(id),
    fork_seq bigint NOT NULL,
    created double precision NOT NULL
);
CREATE TABLE records (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    branch bigint NOT NULL REFERENCES branches(id),
    seq bigint NOT NULL,
    slot text NOT NULL,
    op text NOT NULL CHECK (op IN ('append', 'edit', 'redact', 'set')),
    item text,
    body text,
    UNIQUE (branch, seq)
);
CREATE INDEX records_slot ON records (slot, branch, seq);
CREATE TABLE blobs (sha256 text PRIMARY KEY, data bytea NOT NULL);
CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE derived_scopes (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    name text NOT NULL UNIQUE
);
CREATE TABLE derived_items (
    scope bigint NOT NULL,
    item bigint NOT NULL,
    rev bigint NOT NULL,
    prev bigint NOT NULL,
    next bigint NOT NULL,
    a bigint NOT NULL,
    b bigint NOT NULL,
    c bigint NOT NULL,
    PRIMARY KEY (scope, item)
);
CREATE TABLE derived_blobs (key text PRIMARY KEY, data bytea NOT NULL);
CREATE TABLE derived_counts (
    scope bigint NOT NULL,
    digest bytea NOT NULL,
    tokens bigint NOT NULL,
    PRIMARY KEY (scope, digest)
);
"""
"""An agent's tables (in its own schema): the SQLite store's, in PostgreSQL's types."""


# ------------------------------------------------------------------ connection
class PgConnection:
    """A psycopg connection (autocommit: transactions are explicit) taking the store's
    ``?`` statements, with the DB-API calls the store makes.

    A transaction waits for the server only when it must. :meth:`begin` sends
    nothing; a statement whose result is not read (:meth:`defer`,
    :meth:`executemany`) is queued, its parameters bound here; :meth:`execute` sends
    what is queued with its own statement as one query and waits once, so its result
    and any error come back at once; :meth:`commit` sends the rest with ``COMMIT``.
    An add (its record, its derived rows, the commit) is one round trip, and a
    transaction that sent nothing sends no ``COMMIT``. An error of a queued statement
    is raised by the call that sends it, and ends the transaction: the store rolls it
    back whole, as for any failed write. ``statements`` and ``round_trips`` count
    what was sent.
    """

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw
        self._texts: dict[str, str] = {}
        self._binder = psycopg.ClientCursor(raw)
        self._in_transaction = False  # begun, not yet committed or rolled back
        self._queued: list[str] = []  # statements not sent yet, BEGIN first
        self.statements = 0
        self.round_trips = 0

    def _text(self, sql: str) -> str:
        text = self._texts.get(sql)
        if text is None:
            text = self._texts[sql] = sql.replace("%", "%%").replace("?", "%s")
        return text

    def _bound(self, sql: str, params: Iterable[Any] | None) -> str:
        if params is None:
            return sql
        return self._binder.mogrify(self._text(sql), tuple(params))

    def _send(self, last: str | None = None) -> psycopg.Cursor[Any]:
        """Send the queued statements (and ``last``) as one query; the cursor is on
        the last one's result."""
        if last is not None:
            self._queued.append(last)
        text, self._queued = "; ".join(self._queued), []
        self.round_trips += 1
        cur = self.raw.execute(text)
        while cur.nextset():
            pass
        return cur

    def execute(self, sql: str, params: Iterable[Any] | None = None) -> psycopg.Cursor[Any]:
        """Run one statement (``?`` placeholders when ``params`` is given) and wait for
        it and everything queued before it."""
        self.statements += 1
        if self._queued:
            return self._send(self._bound(sql, params))
        self.round_trips += 1
        if params is None:
            return self.raw.execute(sql)
        return self.raw.execute(self._text(sql), tuple(params))

    def defer(self, sql: str, params: Iterable[Any]) -> None:
        """Run a statement whose result is not read: inside a transaction it is queued
        and sent with the next statement that waits (its error raised there)."""
        if not self._in_transaction:
            self.execute(sql, params)
            return
        self.statements += 1
        self._queued.append(self._bound(sql, params))

    def executemany(self, sql: str, rows: Iterable[Iterable[Any]]) -> None:
        """Run one statement for each row of parameters (queued like :meth:`defer`)."""
        if not self._in_transaction:
            self.statements += 1
            self.round_trips += 1
            with self.raw.cursor() as cur:
                cur.executemany(self._text(sql), (tuple(r) for r in rows))
            return
        for row in rows:
            self.defer(sql, row)

    def begin(self) -> None:
        """Begin a transaction; ``BEGIN`` goes with its first statement."""
        self._in_transaction = True
        self._queued = ["BEGIN"]
        self.statements += 1

    def commit(self) -> None:
        """Commit the transaction (nothing is sent when it sent nothing)."""
        self._in_transaction = False
        if self._queued == ["BEGIN"]:
            self._queued = []
            self.statements -= 1
            return
        self.statements += 1
        self._send("COMMIT")

    def rollback(self) -> None:
        """End the open (or failed) transaction, if any, storing nothing of it."""
        self._in_transaction = False
        self.statements -= len(self._queued)  # never sent
        self._queued = []
        if not self.lost and self.raw.info.transaction_status != TransactionStatus.IDLE:
            self.statements += 1
            self.round_trips += 1
            self.raw.execute("ROLLBACK")

    @property
    def in_transaction(self) -> bool:
        """True inside a transaction that can still commit (not after a failed statement)."""
        if not self._in_transaction:
            return False
        return bool(self._queued) or self.raw.info.transaction_status == TransactionStatus.INTRANS

    @property
    def lost(self) -> bool:
        """True once the connection is closed or broken."""
        return self.raw.closed or self.raw.broken

    def close(self) -> None:
        """Close the connection (the server releases its session locks)."""
        self._queued = []
        self.raw.close()


def _insert_id(conn: PgConnection, sql: str, params: tuple[Any, ...]) -> int:
    return int(conn.execute(sql + " RETURNING id", params).fetchone()[0])  # type: ignore[index]


def _defer(conn: PgConnection, sql: str, params: tuple[Any, ...]) -> None:
    conn.defer(sql, params)


def _begin(conn: PgConnection) -> None:
    conn.begin()


def _commit(conn: PgConnection) -> None:
    conn.commit()


def _rollback(conn: PgConnection) -> None:
    conn.rollback()


def _is_full(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.errors.DiskFull | psycopg.errors.OutOfMemory)


def _translate(path: str, exc: BaseException, action: str) -> StoreError:
    state = getattr(exc, "sqlstate", None) or ""
    if _is_full(exc):
        return StoreFullError(
            f"{path}: the database server's disk is full, so {action} was rolled back and "
            f"stored nothing ({exc}); free space on the server and retry: the store stays "
            "usable and earlier writes are intact"
        )
    if isinstance(exc, psycopg.OperationalError) and (not state or state[:2] in ("08", "57")):
        # no state: the socket closed; 08: connection exceptions; 57: the server or an
        # administrator ended the session
        when = (
            "it may or may not have been stored (the next operation reads the store as it is)"
            if "commit" in action
            else "nothing of it was stored"
        )
        return StoreConnectionError(
            f"{path}: the connection to the database was lost during {action} ({exc}); "
            f"{when}; the next operation reconnects"
        )
    if state.startswith("40") or state == "55P03":  # serialisation, deadlock, lock timeout
        return StoreLockedError(
            f"{path}: {action} waited on another transaction and was refused ({exc}, "
            f"SQLSTATE {state}); retry it"
        )
    if state.startswith("XX"):
        return StoreCorruptError(
            f"{path}: {action} failed because the server found the data damaged ({exc}, "
            f"SQLSTATE {state}); restore the database from a copy"
        )
    return StoreError(f"{path}: {action} failed ({exc}, SQLSTATE {state or 'none'})")


def _set_counters(conn: PgConnection, top: int) -> None:
    """After rows were copied with their ids: the next record id is ``top`` (at least),
    and the branch and scope ids follow the highest copied."""
    conn.execute(
        "SELECT setval(pg_get_serial_sequence('records', 'id'), "
        "GREATEST(?, COALESCE((SELECT MAX(id) FROM records), 0) + 1), false)",
        (top,),
    )
    for table in ("branches", "derived_scopes"):
        conn.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
            f"COALESCE((SELECT MAX(id) FROM {table}), 0) + 1, false)"
        )


POSTGRES = Dialect(
    name="postgresql",
    begin=_begin,
    commit=_commit,
    defer=_defer,
    upsert_meta=(
        "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
    ),
    insert_blob="INSERT INTO blobs VALUES (?, ?) ON CONFLICT (sha256) DO NOTHING",
    upsert={
        "derived_items": (
            "INSERT INTO derived_items VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (scope, item) DO UPDATE SET rev = EXCLUDED.rev, prev = EXCLUDED.prev, "
            "next = EXCLUDED.next, a = EXCLUDED.a, b = EXCLUDED.b, c = EXCLUDED.c"
        ),
        "derived_counts": (
            "INSERT INTO derived_counts VALUES (?, ?, ?) "
            "ON CONFLICT (scope, digest) DO UPDATE SET tokens = EXCLUDED.tokens"
        ),
        "derived_blobs": (
            "INSERT INTO derived_blobs VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data"
        ),
    },
    claim_record_id="SELECT nextval(pg_get_serial_sequence('records', 'id'))",
    writer_ids=True,
    next_record_id=(
        "SELECT GREATEST(COALESCE((SELECT MAX(id) FROM records), 0), COALESCE("
        "pg_sequence_last_value(pg_get_serial_sequence('records', 'id')::regclass), 0)) + 1"
    ),
    errors=(psycopg.Error,),
    integrity_errors=(psycopg.errors.IntegrityError,),
    is_full=_is_full,
    translate=_translate,
    insert_id=_insert_id,
    rollback=_rollback,
    set_counters=_set_counters,
)
"""PostgreSQL: many agents' stores in one database (:mod:`context_manager.store.postgres`)."""


# ------------------------------------------------------------------ addresses
@dataclass(frozen=True)
class Address:
    """Where an agent's store is: the connection string (the ``agent`` parameter taken
    out) and the agent's name; :attr:`shown` is the URL with the password left out."""

    conninfo: str
    agent: str
    shown: str


def is_url(path: object) -> bool:
    """True when ``path`` is a PostgreSQL URL (``postgresql://`` or ``postgres://``)."""
    return isinstance(path, str) and path.startswith(URL_SCHEMES)


def address(url: str, agent: str | None = None) -> Address:
    """Read a store URL: ``postgresql://[user[:password]@][host][:port][/db][?...&agent=NAME]``.

    The agent is ``agent`` if given, else the URL's ``agent`` parameter, else
    ``"main"``; every other parameter goes to libpq as it is.

    Raises
    ------
    StoreError
        When the URL gives an agent that differs from ``agent``, or the name is not an
        agent's name (:data:`AGENT_NAME`).

    Examples
    --------
    >>> a = address("postgresql://bob:secret@db.example/agents?agent=a1")
    >>> a.agent, a.shown
    ('a1', 'postgresql://bob@db.example/agents?agent=a1')
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    given = [v for k, v in query if k == "agent"]
    rest = [(k, v) for k, v in query if k != "agent"]
    if given and agent is not None and given[-1] != agent:
        raise StoreError(
            f"the URL names agent {given[-1]!r} and agent= names {agent!r}: give one of them"
        )
    name = agent if agent is not None else (given[-1] if given else "main")
    if not isinstance(name, str) or not AGENT_NAME.fullmatch(name):
        raise StoreError(
            f"{name!r} is not an agent's name: 1 to 200 characters, none a control character"
        )
    conninfo = urlunsplit(parts._replace(query=urlencode(rest)))
    netloc = parts.netloc.rsplit("@", 1)
    if len(netloc) == 2:
        netloc[0] = netloc[0].split(":", 1)[0]
    shown_query = urlencode(
        [(k, v) for k, v in rest if k != "password"] + [("agent", name)], safe="/"
    )
    shown = urlunsplit(parts._replace(netloc="@".join(netloc), query=shown_query))
    return Address(conninfo, name, shown)


def connect(conninfo: str, shown: str) -> psycopg.Connection[Any]:
    """An autocommit connection, with TCP keepalives unless the URL sets its own.

    Raises
    ------
    StoreConnectionError
        When the server cannot be reached or refuses the connection.
    """
    given = psycopg.conninfo.conninfo_to_dict(conninfo)
    extra = {k: v for k, v in _KEEPALIVES.items() if k not in given}
    try:
        return psycopg.connect(psycopg.conninfo.make_conninfo(conninfo, **extra), autocommit=True)
    except psycopg.Error as exc:
        raise StoreConnectionError(
            f"{shown}: cannot connect to the database ({str(exc).strip()}); check the URL, "
            "that the server runs, and the credentials (PGPASSWORD or ~/.pgpass)"
        ) from exc


# ------------------------------------------------------------------ migrations
def schema_version(raw: psycopg.Connection[Any]) -> int:
    """The catalog's version (0 for a database no store was opened in)."""
    row = raw.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{CATALOG}.migrations",)).fetchone()
    if not row or not row[0]:
        return 0
    found = raw.execute(f"SELECT COALESCE(MAX(version), 0) FROM {CATALOG}.migrations").fetchone()
    return int(found[0]) if found else 0


def migrate(raw: psycopg.Connection[Any], *, upto: int = SCHEMA_VERSION) -> list[int]:
    """Apply the missing migrations up to version ``upto``; returns those applied.

    Runs under the catalog's advisory lock, so processes migrating at once apply each
    migration once; every migration is one transaction with its row in
    ``ctxfold.migrations``.

    Raises
    ------
    StoreError
        When the database's catalog is newer than this library's
        (:data:`SCHEMA_VERSION`): it was written by a newer version; upgrade.
    """
    if schema_version(raw) == upto:
        return []
    applied: list[int] = []
    raw.execute("SELECT pg_advisory_lock(%s, 0)", (_LOCK_CLASS,))
    try:
        with raw.transaction():
            raw.execute(f"CREATE SCHEMA IF NOT EXISTS {CATALOG}")
            raw.execute(
                f"CREATE TABLE IF NOT EXISTS {CATALOG}.migrations (version integer PRIMARY "
                "KEY, name text NOT NULL, applied timestamptz NOT NULL DEFAULT now())"
            )
        current = schema_version(raw)
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"the database's store catalog is at version {current}, newer than this "
                f"library's {SCHEMA_VERSION}: it was written by a newer version of "
                "context-folding; upgrade the library to open it"
            )
        for step in MIGRATIONS:
            if current < step.version <= upto:
                with raw.transaction():
                    raw.execute(step.sql.encode())
                    raw.execute(
                        f"INSERT INTO {CATALOG}.migrations (version, name) VALUES (%s, %s)",
                        (step.version, step.name),
                    )
                applied.append(step.version)
    finally:
        raw.execute("SELECT pg_advisory_unlock(%s, 0)", (_LOCK_CLASS,))
    return applied


# ------------------------------------------------------------------ agents
def agent_schema(agent_id: int) -> str:
    """The schema holding the tables of the agent with this id."""
    return f"ctxfold_agent_{int(agent_id)}"


def agent_id(raw: psycopg.Connection[Any], name: str) -> int | None:
    """The id of the agent named ``name``, or None."""
    row = raw.execute(f"SELECT id FROM {CATALOG}.agents WHERE name = %s", (name,)).fetchone()
    return None if row is None else int(row[0])


def create_agent(raw: psycopg.Connection[Any], name: str, *, exist_ok: bool) -> int:
    """The id of agent ``name``, created with its tables and ``main`` branch if new.

    Runs inside the caller's transaction (or one of its own): creating the same name
    from several processes at once creates it once (an advisory lock on the name).

    Raises
    ------
    StoreError
        When the agent exists and not ``exist_ok``.
    """
    with raw.transaction():
        raw.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_CREATING, name))
        found = agent_id(raw, name)
        if found is not None:
            if not exist_ok:
                raise StoreError(
                    f"agent {name!r} already has a store in this database (a derived or "
                    "migrated store is written to a new agent, never over one)"
                )
            return found
        row = raw.execute(
            f"INSERT INTO {CATALOG}.agents (name) VALUES (%s) RETURNING id", (name,)
        ).fetchone()
        assert row is not None
        new = int(row[0])
        schema = agent_schema(new)
        raw.execute(f"CREATE SCHEMA {schema}")
        raw.execute(f"SET LOCAL search_path TO {schema}")
        raw.execute(AGENT_TABLES.encode())
        raw.execute(
            "INSERT INTO branches (name, parent, fork_seq, created) VALUES ('main', NULL, 0, %s)",
            (time.time(),),
        )
        raw.execute("INSERT INTO meta VALUES ('current_branch', 'main')")
    return new


def list_agents(raw: psycopg.Connection[Any]) -> list[str]:
    """The names of the agents with a store in this database, oldest first."""
    if schema_version(raw) == 0:
        return []
    return [r[0] for r in raw.execute(f"SELECT name FROM {CATALOG}.agents ORDER BY id")]


def drop_agent(raw: psycopg.Connection[Any], name: str) -> bool:
    """Delete agent ``name``'s store (its schema and catalog row); False when none.

    Raises
    ------
    StoreLockedError
        When a writer has the agent's store open.
    """
    with raw.transaction():
        found = agent_id(raw, name)
        if found is None:
            return False
        got = raw.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", (_WRITER, found)).fetchone()
        if not got or not got[0]:
            raise StoreLockedError(f"agent {name!r} is open by a writer; close it first")
        raw.execute(f"DROP SCHEMA {agent_schema(found)} CASCADE")
        raw.execute(f"DELETE FROM {CATALOG}.agents WHERE id = %s", (found,))
    return True


def _holder(raw: psycopg.Connection[Any], agent: int) -> str:
    """Who holds the writer lock of ``agent``: its process and client, as known."""
    row = raw.execute(
        "SELECT a.pid, a.client_addr, a.application_name FROM pg_locks l "
        "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
        "AND l.granted AND l.classid::bigint = %s AND l.objid::bigint = %s",
        (_WRITER, agent),
    ).fetchone()
    if row is None:
        return "another writer"
    pid, client, application = row
    where = f" from {client}" if client else " over a local socket"
    named = f" ({application})" if application else ""
    return f"the server process {pid}{where}{named}"


def _take_writer(raw: psycopg.Connection[Any], agent: int, shown: str) -> None:
    got = raw.execute("SELECT pg_try_advisory_lock(%s, %s)", (_WRITER, agent)).fetchone()
    if not got or not got[0]:
        raise StoreLockedError(
            f"{shown}: the agent's store is open by {_holder(raw, agent)}; one writer per "
            "agent: close it there first (a writer that died releases it when the server "
            "sees its connection end)"
        )


# ------------------------------------------------------------------ the store
class PostgresStore(Store):
    """An agent's store in a PostgreSQL database (see the module's docstring).

    Open it with ``Store.open("postgresql://...", agent=...)``; everything else is a
    :class:`~context_manager.store.Store`'s API.
    """

    _sql = POSTGRES
    _address: Address
    _agent_id: int

    @classmethod
    def open_url(
        cls, url: str, *, agent: str | None = None, branch: str | None = None
    ) -> PostgresStore:
        """Open (creating when new) the store of ``agent`` in the database at ``url``.

        Raises
        ------
        StoreLockedError
            When another writer has the agent's store open.
        StoreConnectionError
            When the database cannot be reached.
        StoreError
            When the agent's name is not one, the catalog is newer than this library,
            or the branch does not exist.
        """
        where = address(url, agent)
        raw = connect(where.conninfo, where.shown)
        try:
            try:
                migrate(raw)
                found = create_agent(raw, where.agent, exist_ok=True)
                _take_writer(raw, found, where.shown)
                raw.execute(f"SET search_path TO {agent_schema(found)}")
                store = cls(PgConnection(raw), where.shown, None)
            except psycopg.Error as exc:
                raise _translate(where.shown, exc, "opening the store") from exc
            store._address = where
            store._agent_id = found
            if branch is not None:
                store.switch_branch(branch)
            store._sweep_derives()
        except BaseException:
            raw.close()
            raise
        return store

    @property
    def agent(self) -> str:
        """The agent whose store this is."""
        return self._address.agent

    def _ready(self) -> None:
        """Reconnect after a lost connection, outside a transaction: the writer lock is
        taken again and the view read from the database as it is."""
        if self._closed or self._depth or not self._conn.lost:
            return
        where = self._address
        raw = connect(where.conninfo, where.shown)
        try:
            _take_writer(raw, self._agent_id, where.shown)
            raw.execute(f"SET search_path TO {agent_schema(self._agent_id)}")
            self._conn = PgConnection(raw)
            self._load_view()
        except psycopg.Error as exc:
            raw.close()
            raise _translate(where.shown, exc, "reconnecting") from exc
        except BaseException:
            raw.close()
            raise

    def close(self) -> None:
        """Release the writer lock, then close the connection (idempotent).

        The lock is released before the connection ends, so another process may open
        the agent's store as soon as this returns (the server would release it only
        once the connection's backend is gone).

        Raises
        ------
        StoreError
            When called inside this thread's own transaction.
        """
        with self._mutex:
            if not self._closed and not self._depth and not self._conn.lost:
                with suppress(psycopg.Error):  # the server releases it with the connection
                    self._conn.raw.execute(
                        "SELECT pg_advisory_unlock(%s, %s)", (_WRITER, self._agent_id)
                    )
            super().close()

    def _sweep_derives(self) -> None:
        """Remove the scratch folders of derives of this store killed mid-way."""
        self._sweep(None)

    def integrity_check(self) -> list[str]:
        """The log's own rules (PostgreSQL checks its pages itself); empty when healthy."""
        with self._mutex:
            self._ready()
            orphans = self._conn.execute(
                "SELECT COUNT(*) FROM records WHERE op = 'append' AND item IS NULL"
            ).fetchone()[0]
        return [f"{orphans} appended records have no item id"] if orphans else []


class _Engine:
    """PostgreSQL as a store URL's engine (:data:`~.opening.URL_ENGINES`)."""

    def open(self, url: str, *, agent: str | None, branch: str | None) -> Store:
        return PostgresStore.open_url(url, agent=agent, branch=branch)

    def write_new(self, url: str, copy: Callable[[Any, Dialect], None]) -> None:
        raw, conn, _ = new_agent_connection(url)
        try:
            copy(conn, POSTGRES)
            raw.execute("COMMIT")
        finally:
            raw.close()  # an uncommitted transaction is rolled back


ENGINE = _Engine()
"""What :meth:`Store.open <context_manager.store.Store.open>` uses for a
``postgresql://`` URL."""


def open_agent_database(url: str) -> tuple[psycopg.Connection[Any], Address]:
    """A connection to the database of ``url`` (migrated), and the URL read."""
    where = address(url)
    raw = connect(where.conninfo, where.shown)
    try:
        migrate(raw)
    except BaseException:
        raw.close()
        raise
    return raw, where


def new_agent_connection(url: str) -> tuple[psycopg.Connection[Any], PgConnection, Address]:
    """For writing a new agent's store whole: a connection in an open transaction in
    which the agent (named by ``url``) was just created, its search path set; the
    caller copies into it and commits, or rolls back and nothing is left.

    Raises
    ------
    StoreError
        When the agent exists.
    """
    raw, where = open_agent_database(url)
    try:
        raw.execute("BEGIN")
        found = create_agent(raw, where.agent, exist_ok=False)
        raw.execute(f"SET LOCAL search_path TO {agent_schema(found)}")
    except BaseException:
        raw.close()
        raise
    return raw, PgConnection(raw), where


__all__ = [
    "AGENT_TABLES",
    "MIGRATIONS",
    "POSTGRES",
    "SCHEMA_VERSION",
    "PostgresStore",
    "address",
    "create_agent",
    "drop_agent",
    "is_url",
    "list_agents",
    "migrate",
]
