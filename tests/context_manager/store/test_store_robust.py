"""The store under abuse: other names of an open file, failed opens, a full disk, threads."""

from __future__ import annotations

import contextlib
import os
import random
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

import context_manager.store.opening as opening_module
from context_manager.store import (
    Item,
    Store,
    StoreAliasWarning,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreLockedError,
)


def _other_name(kind: str, path: Path) -> Path:
    """A second name of the store file at ``path``: a hard link or a symlink."""
    if kind == "hardlink":
        other = path.with_name("linked.db")
        os.link(path, other)
        return other
    other = path.parent / "elsewhere" / "alias.db"
    other.parent.mkdir()
    other.symlink_to(path)
    return other


def _opening(kind: str) -> contextlib.AbstractContextManager[object]:
    """What opening a store with a second name brings: a hard link warns (its writers'
    logs are named after the name each used), a symlink does not."""
    if kind == "hardlink":
        return pytest.warns(StoreAliasWarning, match="has 2 names")
    return contextlib.nullcontext()


def _limit_pages(store: Store, pages: int | None) -> None:
    """Cap the database size at ``pages`` (None: its current size), as a full disk would.

    ``max_page_count`` belongs to the connection, so it is set on the store's own.
    """
    conn: sqlite3.Connection = store._conn
    if pages is None:
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    conn.execute(f"PRAGMA max_page_count = {pages}")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# ------------------------------------------------------------- one writer per file
@pytest.mark.parametrize("kind", ["hardlink", "symlink"])
def test_another_name_of_an_open_store_cannot_open_a_second_writer(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "s.db"
    with Store.open(path) as store:
        store.append("messages", {"n": 0})
        other = _other_name(kind, path)
        with pytest.raises(StoreLockedError, match="open in another process"):
            Store.open(other)
        with pytest.raises(StoreLockedError, match="open in another process"):
            Store.open(path)
        store.append("messages", {"n": 1})  # the first writer is unharmed
    with _opening(kind):
        again = Store.open(other)
    with again:  # once closed, any name opens the same store
        assert [i.body for i in again.items("messages")] == [{"n": 0}, {"n": 1}]
        again.append("messages", {"n": 2})
        assert again.integrity_check() == []
    with _opening(kind):
        store = Store.open(path)
    with store:
        assert [i.body["n"] for i in store.items("messages")] == [0, 1, 2]


OPENER = textwrap.dedent(
    """
    import sys
    from context_manager.store import Store, StoreLockedError
    try:
        store = Store.open(sys.argv[1])
    except StoreLockedError as exc:
        print("locked:", exc)
        sys.exit(3)
    with store:
        store.append("messages", {"from": "child"})
        print("opened", len(store.items("messages")))
    """
)


@pytest.mark.parametrize("kind", ["hardlink", "symlink"])
def test_another_name_refuses_a_writer_in_another_process(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "s.db"

    def child() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", OPENER, str(other)], capture_output=True, text=True
        )

    with Store.open(path) as store:
        store.append("messages", {"from": "parent"})
        other = _other_name(kind, path)
        out = child()
        assert out.returncode == 3, out.stderr
        assert "locked:" in out.stdout and str(other) in out.stdout
        store.append("messages", {"from": "parent"})
    out = child()  # the refusal came from the lock: with the store closed the child writes
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["opened", "3"]
    with _opening(kind):
        store = Store.open(path)
    with store:
        bodies = [i.body["from"] for i in store.items("messages")]
        assert bodies == ["parent", "parent", "child"]
        assert store.integrity_check() == []


# --------------------------------------------------------------- failed opens
def test_opening_a_file_that_is_not_a_database_releases_everything(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(b"this is not a SQLite database, only some text " * 100)
    fds = _open_fds()
    for _ in range(3):  # each failure reports the file, not a lock held by the last one
        with pytest.raises(StoreCorruptError, match=re.escape(str(path))):
            Store.open(path)
    assert _open_fds() == fds
    os.truncate(path, 0)  # the same file (same inode), now empty: a valid new store
    with Store.open(path) as store:
        store.append("messages", {"n": 1})
        assert store.integrity_check() == []


def test_a_failing_schema_setup_releases_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.db"
    with Store.open(path) as store:
        store.append("messages", {"n": 1})
    monkeypatch.setattr(opening_module, "SCHEMA", "CREATE TABLE broken (")
    fds = _open_fds()
    with pytest.raises(StoreError, match=re.escape(str(path))) as info:
        Store.open(path)
    assert not isinstance(info.value, StoreLockedError)
    assert _open_fds() == fds
    monkeypatch.undo()
    with Store.open(path) as store:
        assert [i.body for i in store.items("messages")] == [{"n": 1}]


def test_opening_an_unknown_branch_releases_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store.open(path) as store:
        store.append("messages", {"n": 1})
    fds = _open_fds()
    with pytest.raises(StoreError, match="unknown branch 'nope'"):
        Store.open(path, branch="nope")
    assert _open_fds() == fds
    with Store.open(path) as store:
        assert store.branch == "main"


# ------------------------------------------------------------------ full disk
def test_a_full_disk_is_a_typed_error_and_the_store_recovers(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    big = "x" * 200_000  # needs dozens of new pages
    with Store.open(path) as store:
        earlier = [store.append("messages", {"n": n}) for n in range(5)]
        store.set("state", {"v": 1})
        seq = store.sequence
        _limit_pages(store, None)

        with pytest.raises(StoreFullError, match=re.escape(str(path))) as info:
            store.append("messages", {"big": big})
        assert "free space" in str(info.value)
        with pytest.raises(StoreFullError):
            store.set("state", {"big": big})
        with pytest.raises(StoreFullError), store.transaction():
            store.append("messages", {"n": "small, in the failing transaction"})
            store.set("state", {"v": 2})
            store.append("messages", {"big": big})
        assert store.sequence == seq
        assert store.items("messages") == earlier and store.get("state") == {"v": 1}

        _limit_pages(store, 1_000_000)  # space returns
        later = store.append("messages", {"big": big})
        with store.transaction():
            last = store.append("messages", {"n": 5})
            store.set("state", {"v": 3})
        assert store.integrity_check() == []
    with Store.open(path) as store:
        assert store.items("messages") == [*earlier, later, last]
        assert store.get("state") == {"v": 3}
        assert store.sequence == seq + 3  # no record of the failed writes, no gap
        assert store.integrity_check() == []


def test_a_full_disk_caught_inside_a_transaction_stores_none_of_it(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store.open(path) as store:
        first = store.append("messages", {"n": 0})
        _limit_pages(store, None)
        with pytest.raises(StoreError), store.transaction():
            store.append("messages", {"n": 1})
            with contextlib.suppress(StoreFullError):  # swallowed: still no half commit
                store.append("messages", {"big": "y" * 200_000})
            store.append("messages", {"n": 2})
        _limit_pages(store, 1_000_000)
        assert store.items("messages") == [first]
        second = store.append("messages", {"n": 3})
        assert store.integrity_check() == []
    with Store.open(path) as store:
        assert store.items("messages") == [first, second]
        assert store.integrity_check() == []


def test_other_sqlite_failures_are_store_errors_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store.open(path) as store:
        first = store.append("messages", {"n": 0})
        store._conn.execute("PRAGMA query_only = ON")  # every write now fails in SQLite
        for write in (
            lambda: store.append("messages", {"n": 1}),
            lambda: store.set("state", {"v": 1}),
            lambda: store.put_blob(b"data"),
            lambda: store.branch_at(0, "alt"),
        ):
            with pytest.raises(StoreError, match=re.escape(str(path))):
                write()
        store._conn.execute("PRAGMA query_only = OFF")
        assert store.items("messages") == [first]
        assert [b.name for b in store.list_branches()] == ["main"]
        store.append("messages", {"n": 1})
        assert store.integrity_check() == []
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.append("messages", {"n": 2})


# -------------------------------------------------------------------- threads
class _Rollback(Exception):
    """Raised inside a transaction to abandon it."""


THREADS = 8
APPENDS_PER_THREAD = 1300


def test_threads_sharing_a_store_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    acknowledged: list[dict[str, Any]] = [{} for _ in range(THREADS)]  # id -> body
    abandoned: list[set[str]] = [set() for _ in range(THREADS)]
    states: list[Any] = [None] * THREADS
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)
    store = Store.open(path)

    def worker(t: int) -> None:
        rng = random.Random(t)
        mine = acknowledged[t]
        appended = 0
        op = 0
        barrier.wait()
        while appended < APPENDS_PER_THREAD:
            op += 1
            roll = rng.random()
            if op % 300 == 150:  # a transaction that rolls back
                made: list[str] = []
                try:
                    with store.transaction():
                        for k in range(3):
                            made.append(store.append("messages", {"t": t, "op": op, "k": k}).id)
                        store.set(f"state/{t}", {"abandoned": op})
                        raise _Rollback
                except _Rollback:
                    abandoned[t].update(made)
                assert store.get(f"state/{t}") == states[t]
            elif roll < 0.4:
                body = {"t": t, "op": op}
                mine[store.append("messages", body).id] = body
                appended += 1
            elif roll < 0.65:
                batch: dict[str, Any] = {}
                with store.transaction():
                    for k in range(rng.randint(2, 5)):
                        body = {"t": t, "op": op, "k": k}
                        batch[store.append("messages", body).id] = body
                    if rng.random() < 0.5:
                        store.set(f"state/{t}", {"op": op})
                        states[t] = {"op": op}
                mine.update(batch)
                appended += len(batch)
            elif roll < 0.8 and mine:
                item_id = rng.choice(list(mine))
                body = {"t": t, "op": op, "edited": True}
                store.edit("messages", item_id, body)
                mine[item_id] = body
            elif roll < 0.95:
                states[t] = {"op": op, "set": True}
                store.set(f"state/{t}", states[t])
                assert store.get(f"state/{t}") == states[t]
            elif op % 4 == 0:  # reading everything is the costly operation: keep it rare
                seen = {i.id: i.body for i in store.items("messages")}
                assert all(seen[i] == body for i, body in mine.items())
                assert not abandoned[t] & seen.keys()  # rolled-back ids stay unused

    def run(t: int) -> None:
        try:
            worker(t)
        except BaseException as exc:  # reported below, with the thread's traceback
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.close()
    if errors:
        raise errors[0]

    expected = {i: body for mine in acknowledged for i, body in mine.items()}
    assert sum(len(mine) for mine in acknowledged) == len(expected)  # ids never repeat
    assert len(expected) >= THREADS * APPENDS_PER_THREAD >= 10_000
    with Store.open(path) as reopened:
        items = reopened.items("messages")
        found = {i.id: i.body for i in items}
        assert len(found) == len(items)
        assert found.keys() == expected.keys()  # nothing lost, nothing extra
        assert found == expected  # each with the body last acknowledged
        assert not set().union(*abandoned) & found.keys()
        assert [i.seq for i in items] == sorted(i.seq for i in items)
        for t in range(THREADS):
            assert reopened.get(f"state/{t}") == states[t]
        assert reopened.integrity_check() == []


def test_another_thread_never_sees_an_uncommitted_write(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store:
        kept = store.append("messages", {"n": 0})
        inside = threading.Event()
        reader_started = threading.Event()
        seen: list[list[str]] = []

        def reader() -> None:
            inside.wait()
            reader_started.set()
            seen.append([i.id for i in store.items("messages")])  # waits for the rollback

        thread = threading.Thread(target=reader)
        thread.start()
        with pytest.raises(_Rollback), store.transaction():
            for n in range(1, 50):
                store.append("messages", {"n": n})
            inside.set()
            reader_started.wait()
            for n in range(50, 100):
                store.append("messages", {"n": n})
            raise _Rollback
        thread.join()
        assert seen == [[kept.id]]
        assert store.items("messages") == [kept]


def test_a_transaction_is_owned_by_its_thread_and_nests(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store:
        written: list[Item] = []
        started = threading.Event()

        def writer() -> None:
            started.set()
            written.append(store.append("messages", {"from": "other thread"}))

        with store.transaction():
            store.append("messages", {"n": 1})
            thread = threading.Thread(target=writer)
            thread.start()
            started.wait()
            with store.transaction():  # nested in the same thread: joins the outer one
                store.append("messages", {"n": 2})
            store.append("messages", {"n": 3})
        thread.join()
        assert [i.seq for i in written] == [4]  # it waited for the whole transaction
        assert [i.body for i in store.items("messages")] == [
            {"n": 1},
            {"n": 2},
            {"n": 3},
            {"from": "other thread"},
        ]
        with pytest.raises(StoreError, match="inside a transaction"), store.transaction():
            store.close()
        assert not store.closed
