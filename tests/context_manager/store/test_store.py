"""The record store on every engine: slots, edits, branches, locking, crash safety."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from context_manager.store import RecordStore, Store, StoreError, StoreLockedError
from tests.support.store_places import Place


def test_append_edit_redact_and_snapshots(place: Place) -> None:
    with Store.open(place("s")) as store:
        a = store.append("messages", {"text": "a"})
        b = store.append("messages", {"text": "b"})
        store.edit("messages", a.id, {"text": "A"})
        store.redact("messages", b.id)
        store.set("pins", {"counter": 1})
        store.set("pins", {"counter": 2})
        assert [i.body for i in store.items("messages")] == [{"text": "A"}]
        assert store.get("pins") == {"counter": 2} and store.get("missing", 7) == 7
        with pytest.raises(StoreError, match="not a live item"):
            store.edit("messages", b.id, {"text": "x"})
        seq = store.sequence
    with Store.open(place("s")) as store:  # everything persisted
        assert [i.body for i in store.items("messages")] == [{"text": "A"}]
        assert store.get("pins") == {"counter": 2} and store.sequence == seq


def test_a_slot_never_set_gives_each_caller_its_own_default(place: Place) -> None:
    with Store.open(place("s")) as store:
        assert store.get("counter") is None
        assert store.get("counter", 0) == 0  # the first read's default is not kept
        assert store.get("counter", {"n": 1}) == {"n": 1}
        store.set("counter", 5)
        assert store.get("counter", 0) == 5
        store.set("cleared", None)  # set to None: None, whatever the default
        assert store.get("cleared", 3) is None


def test_transaction_is_all_or_nothing(place: Place) -> None:
    with Store.open(place("s")) as store:
        store.append("messages", {"n": 0})
        with pytest.raises(RuntimeError), store.transaction():
            store.append("messages", {"n": 1})
            store.set("state", {"x": 1})
            raise RuntimeError("boom")
        assert [i.body for i in store.items("messages")] == [{"n": 0}]
        assert store.get("state") is None


def test_branches_copy_on_write(place: Place) -> None:
    with Store.open(place("s")) as store:
        first = store.append("messages", {"n": 1})
        store.append("messages", {"n": 2})
        cut = first.seq
        name = store.branch_at(cut, "alt")
        store.append("messages", {"n": 3})  # main only
        store.switch_branch(name)
        assert [i.body["n"] for i in store.items("messages")] == [1]
        store.append("messages", {"n": 10})
        assert [i.body["n"] for i in store.items("messages")] == [1, 10]
        forked = store.fork("deeper")
        store.append("messages", {"n": 11})
        assert store.branch == forked
        assert [i.body["n"] for i in store.items("messages")] == [1, 10, 11]
        store.switch_branch("main")
        assert [i.body["n"] for i in store.items("messages")] == [1, 2, 3]
        assert [b.name for b in store.list_branches()] == ["main", "alt", "deeper"]
        with pytest.raises(StoreError, match="already exists"):
            store.branch_at(0, "alt")
        with pytest.raises(StoreError, match="unknown branch 'nope'; branches: main, alt"):
            store.switch_branch("nope")
    with Store.open(place("s")) as store:
        assert store.branch == "main"


def test_second_writer_gets_a_clear_error(place: Place) -> None:
    path = place("s")
    with Store.open(path):
        code = f"from context_manager.store import Store; Store.open({str(path)!r})"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode != 0 and "StoreLockedError" in out.stderr
        # a second open in-process conflicts too (a file's flock is per open file
        # description; an agent's advisory lock is per connection)
        with pytest.raises(StoreLockedError, match=r"open in another process|open by the server"):
            Store.open(path)


def test_blobs_are_deduplicated(place: Place) -> None:
    with Store.open(place("s")) as store:
        d1 = store.put_blob(b"x" * 100)
        d2 = store.put_blob(b"x" * 100)
        assert d1 == d2 and store.get_blob(d1) == b"x" * 100
        with pytest.raises(StoreError, match="no blob"):
            store.get_blob("0" * 64)


WRITER = textwrap.dedent(
    """
    import sys
    from context_manager.store import Store
    store = Store.open(sys.argv[1])
    n = len(store.items("messages"))
    while True:
        with store.transaction():
            item = store.append("messages", {"n": n})
            store.set("last", {"n": n, "id": item.id})
        print(n, flush=True)
        n += 1
    """
)


@pytest.mark.slow
def test_killed_writer_loses_nothing_committed(place: Place) -> None:
    path = place("crash")
    committed = -1
    for trial in range(50):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, path], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        # let it commit a few transactions, then kill it mid-stream
        for _ in range(1 + trial % 7):
            line = proc.stdout.readline()
            committed = max(committed, int(line))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        with Store.open(path) as store:
            assert store.integrity_check() == []
            items = store.items("messages")
            ns = [i.body["n"] for i in items]
            assert ns == list(range(len(ns)))  # no gap, no half-written record
            assert len(ns) - 1 >= committed  # every acknowledged write survived
            last = store.get("last")
            assert last == {"n": ns[-1], "id": items[-1].id}  # both writes or neither


def test_every_engine_keeps_the_record_store_contract(place: Place) -> None:
    with Store.open(place("s")) as store:
        assert isinstance(store, RecordStore)
        for name in dir(RecordStore):
            if not name.startswith("_"):
                assert callable(getattr(type(store), name, None)) or isinstance(
                    getattr(type(store), name, None), property
                ), name

    class HalfAStore:
        def append(self, slot: str, body: object) -> None: ...

    assert not isinstance(HalfAStore(), RecordStore)
