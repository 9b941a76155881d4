"""Opening a long-lived store: per-message values are saved, not recounted, and the
store's in-place caches, snapshot reads and frontier deltas keep every old behaviour."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_manager import (
    ByteHeuristicCounter,
    CharsCounter,
    ContextManager,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.pairing import send_forms
from context_manager.store import Store, StoreError
from context_manager.strategies.autobiographical.records import (
    FRONTIER_CHAIN,
    is_frontier_delta,
    read_records,
)


class CountingChars(CharsCounter):
    """CharsCounter that counts how many messages and texts it tokenised."""

    def __init__(self) -> None:
        super().__init__()
        self.messages = 0
        self.texts = 0

    def _count(self, message: Message) -> int:
        self.messages += 1
        return super()._count(message)

    def count_text(self, text: str) -> int:
        self.texts += 1
        return super().count_text(text)


class CountingBytes(ByteHeuristicCounter):
    def __init__(self) -> None:
        super().__init__()
        self.messages = 0

    def _count(self, message: Message) -> int:
        self.messages += 1
        return super()._count(message)


def add_turns(cm: ContextManager, start: int, n: int) -> None:
    """User text, a call, its result and an answer, repeated."""
    for i in range(start, start + n):
        step = i % 4
        if step == 0:
            cm.add_message("User", f"question {i} " + "x" * (i % 13))
        elif step == 1:
            cm.add_message(
                "Claude", [TextBlock(text=f"looking {i}"), ToolUseBlock(id=f"t{i}", name="ls")]
            )
        elif step == 2:
            cm.add_message("User", [ToolResultBlock(tool_use_id=f"t{i - 1}", content=f"r{i}")])
        else:
            cm.add_message("Claude", f"answer {i} " + "y" * (i % 7))


def expected_sent(cm: ContextManager, counter: Any) -> tuple[list[int], list[bool]]:
    """Tokens as sent and tied flags computed from scratch."""
    forms = send_forms([s.message for s in cm.get_messages()])
    return (
        [sum(counter.count_message(m) for m in f.messages) for f in forms],
        [f.tied for f in forms],
    )


def sent(cm: ContextManager) -> tuple[list[int], list[bool]]:
    tokens, tied = cm._ctx.sent()
    return list(tokens), list(tied)


def test_reopening_reads_the_saved_counts_and_tokenises_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with ContextManager.open(path=path, counter=CountingChars()) as cm:
        add_turns(cm, 0, 42)
        first = cm.compile(max_tokens=10_000, reserve_for_response=0)
        before = sent(cm)
    counter = CountingChars()
    with ContextManager.open(path=path, counter=counter) as cm:
        assert sent(cm) == before
        again = cm.compile(max_tokens=10_000, reserve_for_response=0)
        assert counter.messages == 0 and counter.texts == 0
        assert again.messages == first.messages
        assert again.render_stats["tokens"] == first.render_stats["tokens"]
        assert sent(cm) == expected_sent(cm, CharsCounter())
        forms, tokens = cm._ctx.forms()
        assert list(tokens) == before[0] and [f.tied for f in forms] == before[1]


def test_values_saved_by_one_counter_are_not_read_by_another(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with ContextManager.open(path=path, counter=CountingChars()) as cm:
        add_turns(cm, 0, 20)
        cm.compile(max_tokens=10_000, reserve_for_response=0)
    other = CountingBytes()
    with ContextManager.open(path=path, counter=other) as cm:
        assert sent(cm) == expected_sent(cm, ByteHeuristicCounter())
        assert other.messages > 0
    again = CountingBytes()  # now both counters' values are saved, each under its key
    with ContextManager.open(path=path, counter=again) as cm:
        assert sent(cm) == expected_sent(cm, ByteHeuristicCounter())
        assert again.messages == 0
    with ContextManager.open(path=path, counter=CountingChars()) as cm:
        assert sent(cm) == expected_sent(cm, CharsCounter())
        assert cm._counter.messages == 0  # type: ignore[attr-defined]
    with ContextManager.open(path=path, counter=CharsCounter()) as cm:  # another class
        assert sent(cm) == expected_sent(cm, CharsCounter())


def test_only_changed_messages_are_counted_again(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with ContextManager.open(path=path, counter=CountingChars()) as cm:
        add_turns(cm, 0, 40)
        ids = [s.id for s in cm.get_messages()]
        cm.compile(max_tokens=10_000, reserve_for_response=0)
        cm.edit_message(ids[20], "an edited question, longer than before")
        cm.remove_message(ids[30])
        cm.compile(max_tokens=10_000, reserve_for_response=0)
    counter = CountingChars()
    with ContextManager.open(path=path, counter=counter) as cm:
        assert sent(cm) == expected_sent(cm, CharsCounter())
        assert counter.messages == 0
        add_turns(cm, 40, 1)
        cm.compile(max_tokens=10_000, reserve_for_response=0)
        assert counter.messages <= 2  # the new message and the one it follows
        assert sent(cm) == expected_sent(cm, CharsCounter())


def test_a_store_without_saved_values_opens_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with ContextManager.open(path=path, counter=CountingChars()) as cm:
        add_turns(cm, 0, 24)
        first = cm.compile(max_tokens=10_000, reserve_for_response=0)
    conn = sqlite3.connect(path)  # as a store written before the values were saved
    for table in ("derived_items", "derived_scopes", "derived_blobs", "derived_counts"):
        conn.execute(f"DROP TABLE {table}")
    conn.commit()
    conn.close()
    counter = CountingChars()
    with ContextManager.open(path=path, counter=counter) as cm:
        assert cm.compile(max_tokens=10_000, reserve_for_response=0).messages == first.messages
        assert counter.messages > 0
        assert sent(cm) == expected_sent(cm, CharsCounter())
    with ContextManager.open(path=path, counter=CountingChars()) as cm:
        assert sent(cm) == expected_sent(cm, CharsCounter())
        assert cm._counter.messages == 0  # type: ignore[attr-defined]


def test_a_branch_sees_its_own_messages_values(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with ContextManager.open(path=path, counter=CountingChars()) as cm:
        add_turns(cm, 0, 20)
        ids = [s.id for s in cm.get_messages()]
        cm.compile(max_tokens=10_000, reserve_for_response=0)
        cm.branch_at(ids[9], "early")
        cm.switch_branch("early")
        assert sent(cm) == expected_sent(cm, CharsCounter())
        cm.edit_message(ids[5], "edited on the branch")
        add_turns(cm, 100, 3)
        assert sent(cm) == expected_sent(cm, CharsCounter())
        cm.switch_branch("main")
        assert sent(cm) == expected_sent(cm, CharsCounter())
    with ContextManager.open(path=path, counter=CountingChars()) as cm:
        assert cm.current_branch == "main"
        assert sent(cm) == expected_sent(cm, CharsCounter())
        cm.switch_branch("early")
        assert sent(cm) == expected_sent(cm, CharsCounter())


operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 3)),
        st.tuples(st.just("edit"), st.integers(0, 10_000)),
        st.tuples(st.just("remove"), st.integers(0, 10_000)),
        st.tuples(st.just("compile"), st.just(0)),
        st.tuples(st.just("reopen"), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(ops=operations)
def test_sent_matches_a_from_scratch_count_after_any_operations(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]]
) -> None:
    path = tmp_path_factory.mktemp("ops") / "s.db"
    cm = ContextManager.open(path=path, counter=CountingChars())
    try:
        add_turns(cm, 0, 6)
        step = 6
        for op, arg in ops:
            live = cm.get_messages()
            if op == "add":
                add_turns(cm, step, arg + 1)
                step += arg + 1
            elif op == "edit" and live:
                cm.edit_message(live[arg % len(live)].id, f"edit {arg}")
            elif op == "remove" and live:
                cm.remove_message(live[arg % len(live)].id)
            elif op == "compile":
                cm.compile(max_tokens=10_000, reserve_for_response=0)
            elif op == "reopen":
                cm.close()
                cm = ContextManager.open(path=path, counter=CountingChars())
            assert sent(cm) == expected_sent(cm, CharsCounter())
            forms, tokens = cm._ctx.forms()
            assert [f.tied for f in forms] == sent(cm)[1] and list(tokens) == sent(cm)[0]
    finally:
        cm.close()


# ------------------------------------------------------------------- the store
def test_a_rolled_back_transaction_leaves_the_cached_items_as_they_were(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store:
        a = store.append("m", {"n": 0})
        b = store.append("m", {"n": 1})
        c = store.append("m", {"n": 2})
        before = [(i.id, i.body, i.rev) for i in store.items("m")]
        with pytest.raises(RuntimeError), store.transaction():
            store.append("m", {"n": 3})
            store.edit("m", b.id, {"n": 10})
            store.redact("m", a.id)
            store.append("m", {"n": 4})
            store.redact("m", c.id)
            raise RuntimeError("abandon")
        assert [(i.id, i.body, i.rev) for i in store.items("m")] == before
        d = store.append("m", {"n": 5})
        assert [i.body["n"] for i in store.items("m")] == [0, 1, 2, 5]
        edited = store.edit("m", b.id, {"n": 11})
        assert edited.rev > d.rev and edited.seq == b.seq
    with Store.open(tmp_path / "s.db") as store:
        assert [i.body["n"] for i in store.items("m")] == [0, 11, 2, 5]
        assert [i.rev for i in store.items("m")] == [int(a.id), edited.rev, int(c.id), int(d.id)]


def test_a_snapshot_read_takes_the_newest_value_the_branch_sees(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store:
        for n in range(50):
            store.set("snap", {"n": n})
        cut = store.sequence
        store.set("snap", {"n": 50})
        assert store.get("snap") == {"n": 50}
        assert [v["n"] for _, v in store.history("snap", 3)] == [50, 49, 48]
        store.branch_at(cut - 10, "old")
    with Store.open(tmp_path / "s.db", branch="old") as store:
        assert store.get("snap") == {"n": 39}
        store.set("snap", {"n": -1})
        assert [v["n"] for _, v in store.history("snap", 3)] == [-1, 39, 38]
    with Store.open(tmp_path / "s.db", branch="main") as store:
        assert store.get("snap") == {"n": 50}


# ---------------------------------------------------------------- the frontier
def frontier(k: int, n: int) -> list[tuple[str, str, int]]:
    """A frontier over ``n`` messages after ``k`` changes: a fixed folded prefix and a
    recent run that grows."""
    old = [(str(i * 10 + 1), str(i * 10 + 10), 2 + i % 3) for i in range(n // 10)]
    return [*old, (str(n * 10 + 1), str(n * 10 + k + 1), 1)]


def frontier_bytes(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute(
            "SELECT COALESCE(SUM(LENGTH(body)), 0) FROM records WHERE slot = ?",
            ("ns/autobio:resolutions",),
        ).fetchone()
        return int(row[0])
    finally:
        conn.close()


def slot(name: str) -> str:
    return f"ns/{name}"


def test_frontier_changes_are_saved_as_deltas_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store.open(path) as store:
        records = read_records(store, slot)
        assert not records.compiled and records.runs == []
        seqs = {}
        for k in range(200):
            runs = frontier(k, 300)
            records.commit_frontier(runs)
            seqs[k] = store.sequence
            again = read_records(store, slot)
            assert again.runs == runs and again.compiled
            assert again.frontier_depth < FRONTIER_CHAIN
        whole = len(str([list(r) for r in frontier(0, 300)]))
        # 200 changes of the last run: a whole frontier every 16, deltas between
        assert frontier_bytes(path) < 200 * whole / 8
        store.branch_at(seqs[37], "then")
        store.switch_branch("then")
        assert read_records(store, slot).runs == frontier(37, 300)
        records = read_records(store, slot)
        records.commit_frontier(frontier(999, 300))
        assert read_records(store, slot).runs == frontier(999, 300)
        store.switch_branch("main")
        assert read_records(store, slot).runs == frontier(199, 300)


def test_a_frontier_that_changes_from_the_start_is_saved_whole(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store:
        records = read_records(store, slot)
        records.commit_frontier([("1", "5", 1)])
        records.commit_frontier([("1", "5", 1), ("6", "9", 1)])
        records.commit_frontier([("1", "9", 2)])
        values = [v for _, v in store.history(slot("autobio:resolutions"), 10)]
        assert [is_frontier_delta(v) for v in values] == [False, True, False]
        assert read_records(store, slot).runs == [("1", "9", 2)]
        records.commit_frontier([])
        assert read_records(store, slot).runs == [] and read_records(store, slot).compiled


def test_frontiers_in_the_older_forms_still_read(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store:
        store.append(slot("autobio:chunks"), {"id": "c-0", "source_ids": ["1", "2", "3"]})
        store.set(slot("autobio:resolutions"), {"c-0": 1, "4": 0})
        assert read_records(store, slot).runs == [("1", "3", 1)]
        store.set(slot("autobio:resolutions"), {"runs": [["1", "3", 2]]})
        records = read_records(store, slot)
        assert records.runs == [("1", "3", 2)]
        records.commit_frontier([("1", "3", 2), ("4", "4", 1)])
        assert read_records(store, slot).runs == [("1", "3", 2), ("4", "4", 1)]


def test_a_store_with_memories_reopens_without_tokenising(tmp_path: Path) -> None:
    from context_manager.strategies.autobiographical import AutobiographicalStrategy
    from context_manager.summarizer import ExtractiveSummarizer

    path = tmp_path / "s.db"
    tools = [{"name": "ls", "description": "List files.", "input_schema": {"type": "object"}}]

    def open_it(counter: Any) -> ContextManager:
        cm = ContextManager.open(
            path=path,
            counter=counter,
            strategy=AutobiographicalStrategy(
                compression_model="test-model",
                target_chunk_tokens=60,
                recent_window_tokens=0,
                l1_holdback_chunks=0,
                min_chunk_chars_for_llm=0,
            ),
            summarizer=ExtractiveSummarizer(),
        )
        cm.set_system_prompt("You are a careful assistant.")
        cm.set_tool_definitions(tools)
        return cm

    with open_it(CountingChars()) as cm:
        for k in range(8):
            add_turns(cm, k * 20, 20)
            cm.drain()
            first = cm.compile(max_tokens=600, reserve_for_response=0)
        assert first.render_stats.get("summaries")
    counter = CountingChars()
    with open_it(counter) as cm:
        again = cm.compile(max_tokens=600, reserve_for_response=0)
        assert counter.messages == 0 and counter.texts == 0
        assert again.messages == first.messages
        assert again.render_stats["tokens"] == first.render_stats["tokens"]


def test_writes_after_the_saved_view_are_replayed_on_open(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with ContextManager.open(path=path, counter=CountingChars()) as cm:
        add_turns(cm, 0, 30)
        cm.compile(max_tokens=10_000, reserve_for_response=0)
    # a writer that stops without closing the manager: the view is older than the log
    cm = ContextManager.open(path=path, counter=CountingChars())
    ids = [s.id for s in cm.get_messages()]
    add_turns(cm, 30, 5)
    cm.edit_message(ids[3], "edited after the view")
    cm.remove_message(ids[10])
    cm.store.edit("messages", ids[20], {"participant": "User", "content": [], "metadata": {}})
    cm.compile(max_tokens=10_000, reserve_for_response=0)
    expected = [(s.id, s.message) for s in cm.get_messages()]
    cm.store.close()
    with Store.open(path) as store:
        logged = [(i.id, Message.model_validate(i.body)) for i in store.items("messages")]
    counter = CountingChars()
    with ContextManager.open(path=path, counter=counter) as cm:
        assert [(s.id, s.message) for s in cm.get_messages()] == logged
        assert sent(cm) == expected_sent(cm, CharsCounter())
        assert len(logged) == len(expected) and dict(logged)[ids[20]].content == ()
        assert counter.messages <= 16  # only around what changed after the view, not all 34


def test_each_branch_keeps_its_own_view(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with ContextManager.open(path=path, counter=CountingChars()) as cm:
        add_turns(cm, 0, 20)
        ids = [s.id for s in cm.get_messages()]
        cm.branch_at(ids[7], "side")
        cm.compile(max_tokens=10_000, reserve_for_response=0)
    with ContextManager.open(path=path, counter=CountingChars()) as cm:
        cm.switch_branch("side")
        assert [s.id for s in cm.get_messages()] == ids[:8]
        add_turns(cm, 50, 2)
        side = [s.id for s in cm.get_messages()]
        assert sent(cm) == expected_sent(cm, CharsCounter())
    with ContextManager.open(path=path, counter=CountingChars()) as cm:
        assert cm.current_branch == "side"
        assert [s.id for s in cm.get_messages()] == side
        assert sent(cm) == expected_sent(cm, CharsCounter())
        cm.switch_branch("main")
        assert [s.id for s in cm.get_messages()] == ids
        assert sent(cm) == expected_sent(cm, CharsCounter())


def test_edits_and_redactions_before_any_read_check_only_their_item(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store.open(path) as store:
        ids = [store.append("m", {"n": n}).id for n in range(5)]
        store.redact("m", ids[4])
    with Store.open(path) as store:
        edited = store.edit("m", ids[1], {"n": 10})
        assert (edited.id, edited.body) == (ids[1], {"n": 10}) and edited.seq == 2
        store.redact("m", ids[2])
        with pytest.raises(StoreError, match="not a live item"):
            store.edit("m", ids[4], {"n": 0})
        with pytest.raises(StoreError, match="not a live item"):
            store.redact("m", "999")
        with pytest.raises(RuntimeError), store.transaction():
            store.edit("m", ids[0], {"n": -1})
            raise RuntimeError("abandon")
        assert [i.body["n"] for i in store.items("m")] == [0, 10, 3]
    with Store.open(path) as store:
        assert [i.body["n"] for i in store.items("m")] == [0, 10, 3]


def test_a_manager_that_missed_another_ones_writes_saves_no_view(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store:
        first = ContextManager.open(store=store, counter=CountingChars())
        second = ContextManager.open(store=store, counter=CountingChars())
        add_turns(first, 0, 8)
        first.compile(max_tokens=10_000, reserve_for_response=0)
        add_turns(second, 8, 4)  # second reads the store first: it sees all twelve
        second.close()
        first.close()  # first has not seen the four: it must not save its view
        with ContextManager.open(store=store, counter=CountingChars()) as again:
            assert len(again.get_messages()) == 12
            assert sent(again) == expected_sent(again, CharsCounter())
        third = ContextManager.open(store=store, counter=CountingChars())
        add_turns(third, 12, 2)
        fourth = ContextManager.open(store=store, counter=CountingChars())
        add_turns(fourth, 14, 2)
        fourth.close()
        third.close()
        with ContextManager.open(store=store, counter=CountingChars()) as again:
            assert len(again.get_messages()) == 16
            assert sent(again) == expected_sent(again, CharsCounter())
