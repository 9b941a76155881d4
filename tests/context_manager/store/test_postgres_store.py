"""What only the PostgreSQL engine has: migrations, one writer per agent across
processes, lost connections, addresses, and copies between the engines.

The store's contract itself is tested on both engines by the tests taking ``place``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
from context_manager.cli import app
from context_manager.store import (
    Store,
    StoreConnectionError,
    StoreError,
    StoreFullError,
    StoreLockedError,
)
from context_manager.store import postgres as pg
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from foldbench import dataset
from foldbench.loaders import load_tau_bench
from tests.support.postgres_server import fresh_database, with_agent
from tests.support.store_places import query


@pytest.fixture
def database(postgres_url: str) -> str:
    """A new, empty database of the session's server."""
    return fresh_database(postgres_url)


def _versions(url: str) -> list[int]:
    with psycopg.connect(url, autocommit=True) as raw:
        return [r[0] for r in raw.execute("SELECT version FROM ctxfold.migrations ORDER BY 1")]


# ------------------------------------------------------------------ migrations
def test_an_empty_database_is_migrated_once(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as raw:
        assert pg.schema_version(raw) == 0
        assert pg.migrate(raw) == [m.version for m in pg.MIGRATIONS]
        assert pg.migrate(raw) == []  # nothing left to apply
    assert _versions(database) == [1, 2]


def test_a_previous_version_database_keeps_its_stores(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as raw:
        assert pg.migrate(raw, upto=1) == [1]
        pg.create_agent(raw, "old", exist_ok=False)
        assert raw.execute("SELECT to_regclass('ctxfold.leases')").fetchone() == (None,)
    with psycopg.connect(database, autocommit=True) as raw:  # a writer of version 1
        schema = pg.agent_schema(pg.agent_id(raw, "old") or 0)
        raw.execute(f"SET search_path TO {schema}".encode())
        raw.execute(
            "INSERT INTO records (branch, seq, slot, op, item, body) "
            "VALUES (1, 1, 'messages', 'append', '1', '{\"text\": \"kept\"}')"
        )
    with Store.open(with_agent(database, "old")) as store:  # this library migrates it
        assert [i.body for i in store.items("messages")] == [{"text": "kept"}]
        store.append("messages", {"text": "new"})
    assert _versions(database) == [1, 2]
    with psycopg.connect(database, autocommit=True) as raw:
        assert raw.execute("SELECT to_regclass('ctxfold.leases')").fetchone() != (None,)


OPENER = textwrap.dedent(
    """
    import sys
    from context_manager.store import Store
    with Store.open(sys.argv[1]) as store:
        store.append("messages", {"from": sys.argv[1]})
    """
)


def test_processes_opening_a_new_database_at_once_migrate_it_once(database: str) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, with_agent(database, f"a{i % 3}")],
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    errors = [p.communicate()[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    assert _versions(database) == [1, 2]
    with psycopg.connect(database, autocommit=True) as raw:
        assert sorted(pg.list_agents(raw)) == ["a0", "a1", "a2"]


def test_a_database_of_a_newer_library_is_refused(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as raw:
        pg.migrate(raw)
        raw.execute("INSERT INTO ctxfold.migrations (version, name) VALUES (99, 'future')")
    with pytest.raises(StoreError, match="newer than this library's"):
        Store.open(with_agent(database, "a"))


# ------------------------------------------------------------ one writer per agent
WRITER = textwrap.dedent(
    """
    import sys
    from context_manager.store import Store
    store = Store.open(sys.argv[1])
    print("open", flush=True)
    sys.stdin.readline()  # every writer is open before any writes
    for n in range(int(sys.argv[2])):
        store.append("messages", {"n": n})
    store.close()
    print("done", flush=True)
    """
)


def test_two_agents_write_in_parallel_and_a_second_writer_is_refused(postgres_url: str) -> None:
    names = [with_agent(postgres_url, f"parallel-{os.getpid()}-{k}") for k in "ab"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, "200"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for url in names
    ]
    try:
        for p in procs:  # both hold their agent's writer lock now
            assert p.stdout is not None and p.stdout.readline() == "open\n"
        with pytest.raises(StoreLockedError, match="open by the server process"):
            Store.open(names[0])
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "done\n"
            assert p.wait() == 0
    finally:
        for p in procs:
            p.kill()
            p.communicate()  # closes its pipes
    for url in names:
        with Store.open(url) as store:
            assert [i.body["n"] for i in store.items("messages")] == list(range(200))


def _writer_locks(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as raw:
        row = raw.execute(
            "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND classid::bigint = %s",
            (pg._WRITER,),
        ).fetchone()
        return int(row[0]) if row else 0


def test_a_killed_writer_s_lock_is_released_by_the_server(postgres_url: str) -> None:
    url = with_agent(postgres_url, f"killed-{os.getpid()}")
    before = _writer_locks(postgres_url)
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, url, "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"open\n"
    with pytest.raises(StoreLockedError):
        Store.open(url)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    deadline = time.monotonic() + 30
    while _writer_locks(postgres_url) > before:  # the server ends the dead session
        assert time.monotonic() < deadline, "the server kept a dead writer's lock"
    with Store.open(url) as store:
        assert store.items("messages") == []


# ------------------------------------------------------------ lost connections
def _cut(store: Store, postgres_url: str) -> None:
    """End the store's server session, as a network failure would."""
    pid = store._conn.raw.info.backend_pid  # type: ignore[attr-defined]
    with psycopg.connect(postgres_url, autocommit=True) as raw:
        raw.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_a_lost_connection_is_a_typed_error_and_the_next_operation_reconnects(
    postgres_url: str,
) -> None:
    url = with_agent(postgres_url, f"lost-{os.getpid()}")
    with Store.open(url) as store:
        store.append("messages", {"n": 0})
        _cut(store, postgres_url)
        with pytest.raises(StoreConnectionError, match="connection to the database was lost"):
            store.append("messages", {"n": 1})
        store.append("messages", {"n": 2})  # reconnected, the writer lock taken again
        assert [i.body["n"] for i in store.items("messages")] == [0, 2]
        with pytest.raises(StoreLockedError):
            Store.open(url)
    with Store.open(url) as store:
        assert [i.body["n"] for i in store.items("messages")] == [0, 2]


def test_a_connection_lost_inside_a_transaction_stores_none_of_it(postgres_url: str) -> None:
    url = with_agent(postgres_url, f"lost-tx-{os.getpid()}")
    with Store.open(url) as store:
        store.append("messages", {"n": 0})
        with pytest.raises(StoreError), store.transaction():
            store.append("messages", {"n": 1})
            store.set("state", {"n": 1})
            _cut(store, postgres_url)
            store.append("messages", {"n": 2})
        assert [i.body["n"] for i in store.items("messages")] == [0]
        assert store.get("state") is None and store.sequence == 1
    with Store.open(url) as store:
        assert [i.body["n"] for i in store.items("messages")] == [0]


# ------------------------------------------------------------------ queued writes
def _fail_bodies_containing(url: str, agent: str, marker: str, sqlstate: str) -> None:
    """Make the server refuse, with ``sqlstate``, any record whose body has ``marker``
    (as a full disk refuses a write)."""
    with psycopg.connect(url, autocommit=True) as raw:
        schema = pg.agent_schema(pg.agent_id(raw, agent) or 0)
        raw.execute(
            f"CREATE FUNCTION {schema}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN IF NEW.body LIKE '%{marker}%' THEN "
            f"RAISE EXCEPTION 'refused' USING ERRCODE = '{sqlstate}'; END IF; "
            "RETURN NEW; END $$"
        )
        raw.execute(
            f"CREATE TRIGGER refuse BEFORE INSERT ON {schema}.records "
            f"FOR EACH ROW EXECUTE FUNCTION {schema}.refuse()"
        )


def test_a_queued_write_refused_at_commit_stores_none_of_its_transaction(
    postgres_url: str,
) -> None:
    agent = f"queued-{os.getpid()}"
    url = with_agent(postgres_url, agent)
    with Store.open(url) as store:
        store.append("messages", {"n": 0})
        _fail_bodies_containing(postgres_url, agent, "disk-full-here", "53100")
        with pytest.raises(StoreFullError, match="disk is full"), store.transaction():
            store.append("messages", {"n": 1})
            store.set("state", {"n": 1})
            store.append("messages", {"n": 2, "text": "disk-full-here"})
            store.append("messages", {"n": 3})
        assert [i.body["n"] for i in store.items("messages")] == [0]
        assert store.get("state") is None and store.sequence == 1
        with pytest.raises(StoreFullError):  # alone, outside a transaction of the caller's
            store.append("messages", {"text": "disk-full-here"})
        after = store.append("messages", {"n": 4})  # the store stays usable
        assert [i.body["n"] for i in store.items("messages")] == [0, 4]
    with Store.open(url) as store:
        assert [i.body["n"] for i in store.items("messages")] == [0, 4]
        assert store.items("messages")[-1].id == after.id
        assert len({i.id for i in store.items("messages")}) == 2


def test_a_write_transaction_waits_for_the_server_once(postgres_url: str) -> None:
    with Store.open(with_agent(postgres_url, f"trips-{os.getpid()}")) as store:
        store.append("messages", {"n": 0})
        store.save_derived("counts", [(1, 1, 0, 0, 4, 0, 0)])
        assert store.derived_items("counts")[1][3] == 4  # the scope is known now
        conn = store._conn
        trips = conn.round_trips
        with store.transaction():
            store.append("messages", {"n": 1})
            store.save_derived("counts", [(1, 1, 0, 0, 5, 0, 0)])
            store.put_blob(b"image bytes")
        assert conn.round_trips - trips == 1  # BEGIN, three writes and COMMIT
        trips = conn.round_trips
        with store.transaction():
            pass
        assert conn.round_trips == trips  # a transaction that wrote nothing sends nothing
    with Store.open(with_agent(postgres_url, f"trips-{os.getpid()}")) as store:
        assert [i.body["n"] for i in store.items("messages")] == [0, 1]
        assert store.get_blob(store.put_blob(b"image bytes")) == b"image bytes"


def test_a_closed_store_can_be_opened_elsewhere_at_once(postgres_url: str) -> None:
    url = with_agent(postgres_url, f"reopen-{os.getpid()}")
    script = (
        "import sys; from context_manager.store import Store; "
        "Store.open(sys.argv[1]).close(); print('opened')"
    )
    for _ in range(5):
        Store.open(url).close()
        done = subprocess.run(
            [sys.executable, "-c", script, url], capture_output=True, text=True, timeout=60
        )
        assert done.stdout.strip() == "opened", done.stderr


# ------------------------------------------------------------------ addresses
def test_the_address_names_the_agent_and_never_the_password() -> None:
    where = pg.address("postgresql://bob:s3cret@db:5433/agents?sslmode=require&agent=a1")
    assert where.agent == "a1" and "s3cret" not in where.shown
    assert where.shown == "postgresql://bob@db:5433/agents?sslmode=require&agent=a1"
    assert "agent=" not in where.conninfo and "s3cret" in where.conninfo
    assert pg.address("postgresql://db/x").agent == "main"
    with pytest.raises(StoreError, match="give one of them"):
        pg.address("postgresql://db/x?agent=a", agent="b")
    with pytest.raises(StoreError, match="not an agent's name"):
        pg.address("postgresql://db/x", agent="bad\nname")


def test_an_agent_is_refused_for_a_store_file(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="names an agent in a PostgreSQL database"):
        Store.open(tmp_path / "s.db", agent="a1")


def test_an_unreachable_server_is_a_connection_error(tmp_path: Path) -> None:
    with pytest.raises(StoreConnectionError, match="cannot connect to the database"):
        Store.open(f"postgresql://nobody@/db?host={tmp_path}&connect_timeout=2")


def test_an_agent_is_dropped_only_when_no_writer_holds_it(postgres_url: str) -> None:
    name = f"dropped-{os.getpid()}"
    store = Store.open(with_agent(postgres_url, name))
    with psycopg.connect(postgres_url, autocommit=True) as raw:
        with pytest.raises(StoreLockedError):
            pg.drop_agent(raw, name)
        store.close()
        assert pg.drop_agent(raw, name) and name not in pg.list_agents(raw)
        assert not pg.drop_agent(raw, name)


# ------------------------------------------------------ copies between the engines
def _strategy() -> AutobiographicalStrategy:
    return AutobiographicalStrategy(
        compression_model="extractive",
        target_chunk_tokens=400,
        min_chunk_messages=4,
        recent_window_tokens=400,
        merge_threshold=2,
        summary_target_tokens=60,
        l1_holdback_chunks=0,
        min_chunk_chars_for_llm=0,
    )


def _request(where: str | Path) -> bytes:
    with ContextManager.open(
        path=where,
        strategy=_strategy(),
        summarizer=ExtractiveSummarizer(target_tokens=60),
        counter=CharsCounter(),
    ) as cm:
        sent = cm.compile(max_tokens=3_000, reserve_for_response=0)
        return json.dumps(sent.to_anthropic(), sort_keys=True).encode()


def test_ctxfold_migrate_round_trips_a_transcript_store(tmp_path: Path, postgres_url: str) -> None:
    """SQLite -> PostgreSQL -> SQLite: every table equal and the same request bytes."""
    (conversation,) = load_tau_bench(dataset("tau-bench") / "airline-gpt-4o-150.json", limit=1)
    source = tmp_path / "agent.db"
    with ContextManager.open(
        path=source,
        strategy=_strategy(),
        summarizer=ExtractiveSummarizer(target_tokens=60),
        counter=CharsCounter(),
    ) as cm:
        for m in conversation.messages:
            if m.participant == "System":
                cm.set_system_prompt(m.text)
            else:
                cm.add_message(m.participant, m.content)
        cm.drain()
        cm.fork("side")
        cm.add_message("User", "only on the side branch")
        cm.switch_branch("main")
        assert cm.strategy.summaries  # type: ignore[attr-defined]
    remote = with_agent(postgres_url, f"migrated-{os.getpid()}")
    back = tmp_path / "back.db"
    runner = CliRunner()
    for src, dst in ((str(source), remote), (remote, str(back))):
        done = runner.invoke(app, ["migrate", src, dst])
        assert done.exit_code == 0, done.output
        assert "hash equal" in done.output
    with Store.open(source) as a, Store.open(back) as b:
        assert a.content_digest() == b.content_digest()
        assert [x.name for x in b.list_branches()] == ["main", "side"]
    assert _request(source) == _request(remote) == _request(back)
    assert query(remote, "SELECT COUNT(*) FROM records") == query(
        back, "SELECT COUNT(*) FROM records"
    )
    again = runner.invoke(app, ["migrate", str(source), remote])  # never over a store
    assert again.exit_code != 0 and "already has a store" in again.output


@pytest.mark.parametrize("command", ["inspect", "repair"])
def test_file_commands_name_the_way_for_an_agent_in_postgresql(command: str) -> None:
    done = CliRunner().invoke(app, [command, "postgresql://db/agents?agent=a1"])
    assert done.exit_code != 0 and "ctxfold migrate URL copy.db" in done.output


def test_ctxfold_audit_reads_an_agent_in_postgresql(postgres_url: str) -> None:
    url = with_agent(postgres_url, f"audited-{os.getpid()}")
    with ContextManager.open(url=url, counter=CharsCounter()) as cm:
        cm.add_message("User", "hello")
    done = CliRunner().invoke(app, ["audit", url])
    assert done.exit_code == 0, done.output
    held = Store.open(url)
    try:
        refused = CliRunner().invoke(app, ["audit", url])
        assert refused.exit_code != 0 and "open by the server process" in refused.output
    finally:
        held.close()
