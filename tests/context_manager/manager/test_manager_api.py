"""The manager's reads and maintenance calls: range removal, queries, time travel, a strategy
swap, previews, the head-window reset and the tick without a summariser.

Expectations come from the inputs (the messages as the test wrote them, filtered or
replayed here) or from the manager's live view recorded at the time, never from the call
under test.
"""

from __future__ import annotations

import math
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_manager import (
    ArgumentTypeError,
    CharsCounter,
    ConfigError,
    ContextManager,
    ContextManagerError,
    ExtractiveSummarizer,
    Message,
    NoSummarizerWarning,
    PassthroughStrategy,
    TextBlock,
    ThinkingBinding,
    ThinkingBlock,
    UnknownMessageError,
)
from context_manager.errors import SummarizerNotConfiguredError, SummarizerTimeoutError
from context_manager.manager import TOPIC_TRANSITION
from context_manager.store import StoreFullError
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from context_manager.strategies.base import (
    Entry,
    RequestBudget,
    Selection,
    StoredMessage,
    Strategy,
    StrategyContext,
)
from context_manager.summarizer import Completion, CompletionRequest
from tests.support.extractive_agent import records_agree_with_messages, strategy

COUNTER = CharsCounter()


def manager(path: Path | str = ":memory:", **kw: Any) -> ContextManager:
    return ContextManager.open(path=path, counter=COUNTER, **kw)


def folding(path: Path | str = ":memory:", **options: Any) -> ContextManager:
    return manager(
        path,
        strategy=strategy(recent_window_tokens=100, **options),
        summarizer=ExtractiveSummarizer(target_tokens=30),
    )


def talk(cm: ContextManager, n: int, tag: str = "m") -> list[str]:
    return [
        cm.add_message(
            "User" if i % 2 == 0 else "Claude",
            " ".join(f"{tag}{i}w{j}" for j in range(30)),
            timestamp=float(i),
        )
        for i in range(n)
    ]


def texts(cm: ContextManager) -> list[tuple[str, str]]:
    return [(m.id, m.message.text) for m in cm.get_messages()]


# ---------------------------------------------------------------- remove_messages
def test_remove_messages_removes_the_range_and_nothing_else() -> None:
    with manager() as cm:
        ids = [cm.add_message("User", f"m{i}") for i in range(6)]
        before = texts(cm)
        assert cm.remove_messages(ids[1], ids[3]) == ids[1:4]
        assert texts(cm) == [before[0], before[4], before[5]]
        assert cm.remove_messages(ids[4], ids[4]) == [ids[4]]  # a range of one
        assert texts(cm) == [before[0], before[5]]


def test_remove_messages_refuses_before_removing_anything() -> None:
    with manager() as cm:
        ids = [cm.add_message("User", f"m{i}") for i in range(4)]
        before = texts(cm)
        with pytest.raises(ConfigError, match=r"reversed.*name the older message first"):
            cm.remove_messages(ids[2], ids[1])
        with pytest.raises(KeyError, match="first_id='404'"):
            cm.remove_messages("404", ids[1])
        with pytest.raises(KeyError, match="last_id='404'"):
            cm.remove_messages(ids[0], "404")
        assert texts(cm) == before


def test_remove_messages_takes_holds_and_copies_with_it() -> None:
    with manager() as cm:
        ids = [cm.add_message("User", f"m{i}") for i in range(6)]
        cm.hold_compression([ids[2], ids[5]])
        copy2 = cm.add_context_entry(ids[2], "copy")
        derived2 = cm.add_context_entry(ids[2], "derived")
        copy4 = cm.add_context_entry(ids[4], "copy")
        cm.remove_messages(ids[1], ids[3])
        assert cm.compression_holds() == {ids[5]}
        assert [e.id for e in cm.context_log()] == [derived2, copy4]
        assert copy2 not in {e.id for e in cm.context_log()}


def test_remove_messages_is_one_transaction() -> None:
    class Refuses(PassthroughStrategy):
        def on_messages_removed(self, ctx: StrategyContext, ids: Any) -> None:
            raise RuntimeError("not now")

    with manager(strategy=Refuses()) as cm:
        ids = [cm.add_message("User", f"m{i}") for i in range(4)]
        before = texts(cm)
        with pytest.raises(RuntimeError, match="not now"):
            cm.remove_messages(ids[0], ids[2])
        assert texts(cm) == before


def test_remove_messages_leaves_the_records_as_removing_one_by_one_does(tmp_path: Path) -> None:
    """Memories, chunks, pins and locks after a range removal are what removing each
    message of the range in turn leaves (on a copy of the same history)."""
    outcomes = []
    for way in ("range", "one by one"):
        with folding(tmp_path / f"{way.replace(' ', '-')}.db") as cm:
            ids = talk(cm, 30)
            cm.drain()
            cm.pin_range(ids[10], ids[12])
            cm.pin_range(ids[20], ids[21], max_level=1)
            cm.lock_message(ids[11])
            cm.lock_message(ids[25])
            if way == "range":
                cm.remove_messages(ids[8], ids[14])
            else:
                for i in ids[8:15]:
                    cm.remove_message(i)
            records_agree_with_messages(cm)
            s = cm.strategy
            assert isinstance(s, AutobiographicalStrategy)
            compiled = cm.compile(max_tokens=3000, reserve_for_response=0).messages
            outcomes.append(
                (
                    texts(cm),
                    sorted(s.summaries),
                    [c.source_ids for c in s.chunks],
                    [(p.id, p.first, p.last) for p in s.pins],
                    sorted(s.locks),
                    compiled,
                )
            )
            kept = texts(cm)
        assert [i for i, _ in kept] == ids[:8] + ids[15:]
    assert outcomes[0] == outcomes[1]


def test_remove_messages_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "cm.db"
    with folding(path) as cm:
        ids = talk(cm, 20)
        cm.drain()
        cm.remove_messages(ids[3], ids[9])
        expected = texts(cm)
    with folding(path) as cm:
        assert texts(cm) == expected
        records_agree_with_messages(cm)


# ---------------------------------------------------------------- query_messages
ROWS = [
    ("User", "Deploy the app", 10.0, {"external": {"source": "slack", "id": "a1"}}),
    ("Claude", "Deploying now.", 20.0, {}),
    ("User", "what broke?", None, {"external": {"source": "mail", "id": "a1"}}),
    ("Tool", "deploy log: ok", 30.0, {"tags": ["ci"], "external": {"source": "slack"}}),
    ("Claude", "All good.", 40.0, {"external": {"source": "slack", "id": "b2"}}),
]


def _fill(cm: ContextManager) -> list[str]:
    return [
        cm.add_message(p, text, metadata=meta, timestamp=ts)
        if ts is not None
        else _untimed(cm, p, text, meta)
        for p, text, ts, meta in ROWS
    ]


def _untimed(cm: ContextManager, participant: str, text: str, meta: dict[str, Any]) -> str:
    """A message stored without a timestamp (an import that had none)."""
    message = Message.text_message(participant, text, metadata=meta)
    item = cm.store.append("messages", message.model_dump(mode="json"))
    cm.store.set("touch", 1)  # a write by another hand: the manager reads the store again
    return item.id


def test_query_messages_filters() -> None:
    with manager() as cm:
        ids = _fill(cm)

        def found(**kw: Any) -> tuple[list[str], int]:
            result = cm.query_messages(**kw)
            return [m.id for m in result.messages], result.total_count

        assert found(participant="Claude") == ([ids[1], ids[4]], 2)
        assert found(participant=["User", "Tool"]) == ([ids[0], ids[2], ids[3]], 3)
        assert found(from_time=20.0, to_time=30.0) == ([ids[1], ids[3]], 2)  # inclusive
        assert found(to_time=100.0) == ([ids[0], ids[1], ids[3], ids[4]], 4)  # untimed out
        assert found(text="DEPLOY") == ([ids[0], ids[1], ids[3]], 3)
        assert found(metadata={"external.source": "slack"}) == ([ids[0], ids[3], ids[4]], 3)
        assert found(metadata={"external.id": "a1"}) == ([ids[0], ids[2]], 2)
        assert found(metadata={"tags": ["ci"]}) == ([ids[3]], 1)
        assert found(metadata={"external.source.deeper": "x"}) == ([], 0)
        assert found(text="deploy", limit=2) == ([ids[0], ids[1]], 3)
        assert found(text="deploy", limit=2, reverse=True) == ([ids[3], ids[1]], 3)
        assert found(participant="Claude", text="good", from_time=35.0) == ([ids[4]], 1)
        assert found(limit=0) == ([], 5)
        assert found() == (ids, 5)
        assert cm.find_message_by_external_id("slack", "a1") == ids[0]
        assert cm.find_message_by_external_id("mail", "a1") == ids[2]
        assert cm.find_message_by_external_id("slack", "zz") is None


def test_query_messages_rejects_bad_filters() -> None:
    with manager() as cm:
        with pytest.raises(ConfigError, match="limit must be an int of at least 0"):
            cm.query_messages(limit=-1)
        with pytest.raises(ConfigError, match="from_time must be a time not after to_time=1, got"):
            cm.query_messages(from_time=5, to_time=1)
        with pytest.raises(ConfigError, match="metadata must be a mapping of dotted paths"):
            cm.query_messages(metadata={"": 1})
        with pytest.raises(ConfigError, match="metadata must be a mapping of dotted paths"):
            cm.query_messages(metadata=[("a", 1)])  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["User", "Claude", "Tool"]),
            st.sampled_from(["alpha", "Beta", "gamma ALPHA", "delta"]),
            st.integers(0, 5),
            st.sampled_from([{}, {"k": 1}, {"k": 2}, {"n": {"k": 1}}]),
        ),
        max_size=12,
    ),
    who=st.one_of(st.none(), st.sampled_from(["User", "Claude"])),
    low=st.one_of(st.none(), st.integers(0, 5)),
    span=st.integers(0, 5),
    text=st.one_of(st.none(), st.sampled_from(["alpha", "BETA", "a"])),
    meta=st.one_of(st.none(), st.sampled_from([{"k": 1}, {"n.k": 1}])),
    limit=st.one_of(st.none(), st.integers(0, 4)),
    reverse=st.booleans(),
)
def test_query_messages_matches_a_plain_filter(
    rows: list[tuple[str, str, int, dict[str, Any]]],
    who: str | None,
    low: int | None,
    span: int,
    text: str | None,
    meta: dict[str, Any] | None,
    limit: int | None,
    reverse: bool,
) -> None:
    high = None if low is None else low + span
    with manager() as cm:
        ids = [cm.add_message(p, t, metadata=m, timestamp=float(ts)) for p, t, ts, m in rows]

        def passes(row: tuple[str, str, int, dict[str, Any]]) -> bool:
            p, t, ts, m = row
            if who is not None and p != who:
                return False
            if low is not None and not low <= ts <= (high if high is not None else math.inf):
                return False
            if text is not None and text.lower() not in t.lower():
                return False
            if meta == {"k": 1} and m.get("k") != 1:
                return False
            return not (meta == {"n.k": 1} and m.get("n", {}).get("k") != 1)

        expected = [i for i, row in zip(ids, rows, strict=True) if passes(row)]
        if reverse:
            expected.reverse()
        result = cm.query_messages(
            participant=who,
            from_time=None if low is None else float(low),
            to_time=None if high is None else float(high),
            text=text,
            metadata=meta,
            limit=limit,
            reverse=reverse,
        )
        assert [m.id for m in result.messages] == expected[:limit]
        assert result.total_count == len(expected)


# ----------------------------------------------------------- get_message(s)_at
@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "edit", "remove", "fork"]), st.integers(0, 50)),
        max_size=25,
    )
)
def test_time_travel_returns_the_history_as_it_stood(ops: list[tuple[str, int]]) -> None:
    """After every write the live view is written down with its sequence; reading back
    at each sequence gives what was written down (a fork is cut at the head, so every
    branch the run made sees its ancestors' history up to its own start)."""

    def view(cm: ContextManager) -> list[tuple[str, int, str]]:
        return [(m.id, m.seq, m.message.text) for m in cm.get_messages()]

    with manager() as cm:
        seen: list[tuple[int, list[tuple[str, int, str]]]] = [(0, [])]
        for n, (op, k) in enumerate(ops):
            ids = [m.id for m in cm.get_messages()]
            if op == "add" or not ids:
                cm.add_message("User", f"text {n}")
            elif op == "edit":
                cm.edit_message(ids[k % len(ids)], f"edited {n}")
            elif op == "remove":
                cm.remove_message(ids[k % len(ids)])
            else:
                cm.fork(f"b{n}")
            seen.append((cm.sequence, view(cm)))
        for sequence, expected in seen:
            back = cm.get_messages_at(sequence=sequence)
            assert [(m.id, m.seq, m.message.text) for m in back] == expected
            for message_id, _, text in expected:
                got = cm.get_message_at(message_id, sequence=sequence)
                assert got is not None and got.text == text
        assert cm.get_messages_at(sequence=cm.sequence) == cm.get_messages()


def test_time_travel_by_sequence_and_time() -> None:
    with manager() as cm:
        first = cm.add_message("User", "draft", timestamp=10.0)
        at_first = cm.sequence
        cm.edit_message(first, "final")
        at_edit = cm.sequence
        second = cm.add_message("User", "later", timestamp=20.0)
        cm.remove_message(first)
        assert cm.get_message_at(first, sequence=at_first).text == "draft"  # type: ignore[union-attr]
        assert cm.get_message_at(first, sequence=at_edit).text == "final"  # type: ignore[union-attr]
        assert cm.get_message_at(first, sequence=cm.sequence) is None  # removed since
        assert cm.get_message_at(second, sequence=at_edit) is None  # not stored yet
        assert cm.get_messages_at(sequence=0) == []
        # by time: just before the first message stamped later than it was stored
        assert [m.message.text for m in cm.get_messages_at(time=5.0)] == []
        assert [m.message.text for m in cm.get_messages_at(time=15.0)] == ["final"]
        assert [m.message.text for m in cm.get_messages_at(time=25.0)] == ["later"]
        assert cm.get_message_at(first, time=15.0).text == "final"  # type: ignore[union-attr]


def test_time_travel_rejects_bad_points() -> None:
    with manager() as cm:
        cm.add_message("User", "x")
        with pytest.raises(ConfigError, match="exactly one of sequence="):
            cm.get_messages_at()
        with pytest.raises(ConfigError, match="exactly one of sequence="):
            cm.get_messages_at(sequence=1, time=1.0)
        with pytest.raises(ConfigError, match=r"this branch's history is \[0, 1\]"):
            cm.get_messages_at(sequence=2)
        with pytest.raises(ConfigError, match="sequence must be an int"):
            cm.get_messages_at(sequence=True)
        with pytest.raises(ConfigError, match="time must be a finite number"):
            cm.get_message_at("1", time=math.nan)


# ------------------------------------------------------------------ set_strategy
def test_set_strategy_swaps_on_a_live_manager(tmp_path: Path) -> None:
    with folding(tmp_path / "cm.db") as cm:
        ids = talk(cm, 30)
        cm.drain()
        folded = cm.strategy
        assert isinstance(folded, AutobiographicalStrategy) and folded.summaries
        cm.compile(max_tokens=1200, reserve_for_response=0)
        assert cm.get_render_stats() is not None
        memories = {k: v.content for k, v in folded.summaries.items()}

        cm.set_strategy(PassthroughStrategy())
        assert cm.get_render_stats() is None  # until a live compile of the new strategy
        plain = cm.compile(max_tokens=1200, reserve_for_response=0)
        expected = ContextManager.open(path=":memory:", counter=COUNTER)
        with expected:
            for m in cm.get_messages():
                expected.add_message(m.message.participant, m.message.content)
            assert [x.text for x in plain.messages] == [
                x.text for x in expected.compile(max_tokens=1200, reserve_for_response=0).messages
            ]

        again = strategy(recent_window_tokens=100)
        cm.set_strategy(again)  # a new instance reads what the first persisted
        assert {k: v.content for k, v in again.summaries.items()} == memories
        assert cm.compile(max_tokens=1200, reserve_for_response=0).render_stats["summaries"]
        cm.add_message("User", "after the swap")
        assert cm.get_messages()[-1].message.text == "after the swap"
        assert len(cm.get_messages()) == len(ids) + 1


def test_set_strategy_keeps_the_old_one_when_the_new_one_fails() -> None:
    class Broken(PassthroughStrategy):
        def initialize(self, ctx: StrategyContext) -> None:
            ctx.store.set("default/broken", "half-written")
            raise RuntimeError("cannot load")

    with manager() as cm:
        cm.add_message("User", "hi")
        old = cm.strategy
        with pytest.raises(RuntimeError, match="cannot load"):
            cm.set_strategy(Broken())
        assert cm.strategy is old
        assert cm.store.get("default/broken") is None  # what it wrote was rolled back
        assert [m.text for m in cm.compile().messages] == ["hi"]
        with pytest.raises(ConfigError, match="strategy must be a Strategy"):
            cm.set_strategy(object())  # type: ignore[arg-type]


def test_set_strategy_with_auto_tick() -> None:
    cm = ContextManager.open(
        path=":memory:",
        counter=COUNTER,
        summarizer=ExtractiveSummarizer(target_tokens=30),
        auto_tick=True,
    )
    with cm:
        talk(cm, 30)
        folded = strategy(recent_window_tokens=100)
        cm.set_strategy(folded)  # the worker wakes for the new strategy's work
        assert cm.wait_for_ticks(timeout=60)
        assert folded.summaries and cm.is_ready()
        records_agree_with_messages(cm)


# ---------------------------------------------------------------- preview_context
def test_preview_when_it_fits_is_the_dry_compile() -> None:
    with folding() as cm:
        ids = talk(cm, 40)
        cm.drain()
        before = (cm.sequence, cm.get_render_stats(), cm.pending_work())
        preview = cm.preview_context(max_tokens=900, reserve_for_response=100)
        dry = cm.compile(max_tokens=900, reserve_for_response=100, dry_run=True)
        assert preview.fits and preview.stage is None and preview.budget == 800
        assert preview.result is not None and preview.result.messages == dry.messages
        sent = sum(COUNTER.count_message(m) for m in dry.messages)
        assert preview.tokens == sent <= 800
        s = cm.strategy
        assert isinstance(s, AutobiographicalStrategy)
        assert (cm.sequence, cm.get_render_stats(), cm.pending_work()) == before  # wrote nothing
        # the frontier the strategy commits when it sends the same request
        live = cm.compile(max_tokens=900, reserve_for_response=100)
        assert live.messages == dry.messages
        position = {i: k for k, i in enumerate(ids)}
        levels = {
            i: level
            for first, last, level in s.resolutions
            for i in ids[position[first] : position[last] + 1]
        }
        assert preview.folded
        for f in preview.folded:
            leaves = s.leaves_of(s.summaries[f.memory])
            assert (f.first, f.last, f.messages) == (leaves[0], leaves[-1], len(leaves))
            assert f.level == s.summaries[f.memory].level
            assert {levels.get(i) for i in leaves} == {f.level}
        folded_ids = {i for f in preview.folded for i in s.leaves_of(s.summaries[f.memory])}
        assert preview.raw == len([i for i in ids if i not in folded_ids])
        assert folded_ids == set(levels)
        positions = [ids.index(f.first) for f in preview.folded]
        assert positions == sorted(positions)


def test_preview_of_a_context_that_cannot_fit_reports_instead_of_refusing() -> None:
    with folding() as cm:
        talk(cm, 40)  # nothing compressed yet: the middle is raw
        before = (cm.sequence, cm.get_render_stats(), cm.pending_work())
        preview = cm.preview_context(max_tokens=300, reserve_for_response=50)
        assert not preview.fits and preview.result is None
        assert preview.stage == "solver" and preview.tokens is not None
        assert preview.tokens > preview.budget == 250
        assert (cm.sequence, cm.get_render_stats(), cm.pending_work()) == before
        cm.set_system_prompt("x" * 4000)  # the overhead alone is over the budget
        over = cm.preview_context(max_tokens=300, reserve_for_response=50)
        assert (over.fits, over.stage, over.budget) == (False, "request overhead", 250)
        system = COUNTER.count_message(Message.text_message("System", "x" * 4000))
        assert over.tokens == system > 250
        assert over.stats["diagnostics"]["system_tokens"] == system


def test_preview_with_overrides_shows_other_options_for_that_preview_only() -> None:
    with folding() as cm:
        ids = talk(cm, 40)
        cm.drain()
        plain = cm.preview_context(max_tokens=900, reserve_for_response=100)
        before = (cm.sequence, cm.get_render_stats(), cm.pending_work())
        wide = cm.preview_context(
            max_tokens=900, reserve_for_response=100, overrides={"recent_window_tokens": 400}
        )
        assert (cm.sequence, cm.get_render_stats(), cm.pending_work()) == before
        # the raw tail is the newest messages up to 400 tokens, not 100
        assert plain.result is not None and wide.result is not None
        sizes = [COUNTER.count_message(m.message) for m in cm.get_messages()]

        def tail(limit: int) -> int:  # the newest messages while they fit the limit
            total = 0
            for size in reversed(sizes):
                if total + size > limit:
                    return total
                total += size
            return total

        assert plain.result.render_stats["tail"]["tokens"] == tail(100) < tail(400)
        assert wide.result.render_stats["tail"]["tokens"] == tail(400)
        assert wide.raw > plain.raw
        # nothing stays: the strategy keeps its own options
        s = cm.strategy
        assert isinstance(s, AutobiographicalStrategy) and s.config.recent_window_tokens == 100
        again = cm.preview_context(max_tokens=900, reserve_for_response=100)
        assert again.result is not None and again.result.messages == plain.result.messages
        swapped = cm.preview_context(
            max_tokens=900, reserve_for_response=100, overrides={"solver": "oldest-first"}
        )
        assert swapped.fits and swapped.result is not None
        assert swapped.result.render_stats["solver"] == "oldest-first"
        with pytest.raises(ConfigError, match="recent_window_tokens"):
            cm.preview_context(overrides={"recent_window_tokens": -1})
        with pytest.raises(ConfigError, match="no_such_option"):
            cm.preview_context(overrides={"no_such_option": 1})
        assert len(cm.get_messages()) == len(ids)
    with manager() as cm:  # the passthrough strategy has no options to override
        cm.add_message("User", "hi")
        with pytest.raises(ConfigError, match="no overrides"):
            cm.preview_context(overrides={"recent_window_tokens": 10})


def test_preview_writes_no_thinking_record() -> None:
    with manager() as cm:
        cm.add_message("User", "go")
        binding = ThinkingBinding()
        first = cm.compile(thinking_binding=binding, identity="m")
        answer = cm.add_message(
            "Claude", [ThinkingBlock(thinking="t", signature="s"), TextBlock(text="ok")]
        )
        cm.note_request_sent([answer], first.identity, first.compile_id)
        before = cm.sequence
        preview = cm.preview_context(thinking_binding=binding, identity="m")
        assert cm.sequence == before
        assert preview.result is not None
        assert preview.result.thinking_strip is not None
        assert preview.result.thinking_strip.kept == (answer,)


def test_preview_leaves_expired_holds_for_a_write() -> None:
    now = [0.0]
    with manager(clock=lambda: now[0]) as cm:
        held = cm.add_message("User", "held")
        cm.hold_compression([held], timeout=5)
        now[0] = 10.0
        cm.preview_context()
        assert cm._holds == {held: 5.0}  # not released by the preview
        assert cm.compression_holds() == set()  # released by the next operation


# ---------------------------------------------------------------- reset_head_window
class Recorder:
    """A summariser that answers with a fixed text and keeps the requests."""

    needs_tool_definitions = False

    def __init__(self, answer: Completion) -> None:
        self.answer = answer
        self.requests: list[CompletionRequest] = []

    def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        return self.answer


def test_reset_head_window_with_a_text() -> None:
    with manager() as cm:
        cm.add_message("User", "fix the parser")
        assert cm.reset_head_window("  Parser fixed.  ") == "Parser fixed."
        last = cm.get_messages()[-1].message
        assert (last.participant, last.text) == (
            "Context Manager",
            f"{TOPIC_TRANSITION} Parser fixed.",
        )
        with pytest.raises(ConfigError, match="transition_text is empty"):
            cm.reset_head_window("   ")


def test_reset_head_window_writes_the_summary_with_the_summariser() -> None:
    recorder = Recorder(Completion(text="We fixed the parser.", stop_reason="end_turn"))
    s = strategy(recent_window_tokens=100)
    with manager(strategy=s, summarizer=recorder) as cm:
        cm.set_system_prompt("You are a coder.")
        talk(cm, 4)
        shown = cm.compile(dry_run=True).messages
        assert cm.reset_head_window() == "We fixed the parser."
        [request] = recorder.requests
        assert request.model == s.config.compression_model
        assert request.system == "You are a coder."
        assert list(request.messages[:-1]) == shown  # what the agent was shown
        instruction = request.messages[-1]
        assert instruction.participant == "Context Manager"
        assert instruction.text.startswith("[CM] ") and "new topic" in instruction.text
        assert cm.get_messages()[-1].message.text == f"{TOPIC_TRANSITION} We fixed the parser."


def test_reset_head_window_stores_nothing_it_cannot_stand_behind() -> None:
    with manager() as cm:
        cm.add_message("User", "x")
        with pytest.raises(SummarizerNotConfiguredError, match="pass the text"):
            cm.reset_head_window()
        assert len(cm.get_messages()) == 1
    unused = Recorder(Completion(text="never asked", stop_reason="end_turn"))
    with manager(strategy=strategy(), summarizer=unused) as cm:
        cm.add_message("User", "x")
        cm.set_system_prompt("x" * 400_000)  # over the default window by itself
        with pytest.raises(ContextManagerError, match="does not fit the default budget"):
            cm.reset_head_window()
        assert len(cm.get_messages()) == 1 and unused.requests == []
    refusing = Recorder(Completion(text="No.", stop_reason="refusal"))
    with manager(strategy=strategy(), summarizer=refusing) as cm:
        cm.add_message("User", "x")
        with pytest.raises(ContextManagerError, match="stop_reason='refusal'"):
            cm.reset_head_window()
        assert len(cm.get_messages()) == 1


class Hanging:
    """A summariser whose calls block until :attr:`release` is set."""

    needs_tool_definitions = False

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def complete(self, request: CompletionRequest) -> Completion:
        self.entered.set()
        self.release.wait()
        return Completion(text="We fixed the parser.", stop_reason="end_turn")


def test_reset_head_window_waits_for_the_summariser_at_most_its_deadline() -> None:
    hanging = Hanging()
    try:
        with manager(strategy=strategy(summary_timeout_seconds=0.05), summarizer=hanging) as cm:
            talk(cm, 4)
            before = cm.get_messages()
            with pytest.raises(SummarizerTimeoutError, match="nothing was stored"):
                cm.reset_head_window()
            assert hanging.entered.is_set()
            assert cm.get_messages() == before
    finally:
        hanging.release.set()


def test_reset_head_window_holds_no_lock_while_the_summariser_writes() -> None:
    hanging = Hanging()
    with manager(strategy=strategy(), summarizer=hanging) as cm:
        talk(cm, 4)
        outcome: list[str] = []
        resetting = threading.Thread(target=lambda: outcome.append(cm.reset_head_window()))
        resetting.start()
        try:
            assert hanging.entered.wait(30)
            adding = threading.Thread(target=lambda: cm.add_message("User", "meanwhile"))
            adding.start()
            adding.join(30)
            assert not adding.is_alive()  # another thread's write went on meanwhile
        finally:
            hanging.release.set()
            resetting.join(30)
        assert outcome == ["We fixed the parser."]
        texts = [s.message.text for s in cm.get_messages()]
        assert texts[-2:] == ["meanwhile", f"{TOPIC_TRANSITION} We fixed the parser."]


class Headed(Strategy):
    """A strategy with a raw head window; ``movable`` gives it ``reset_head_window``."""

    name = "headed"

    class config:  # read as the strategy's config
        head_window_tokens = 100

    def __init__(self) -> None:
        self.moved: list[str] = []

    def select(
        self, ctx: StrategyContext, budget: RequestBudget, *, dry_run: bool = False
    ) -> Selection:
        return Selection(
            [Entry(s.message.participant, s.message.content, (s.id,)) for s in ctx.messages()]
        )


class Movable(Headed):
    def reset_head_window(self, ctx: StrategyContext, message_id: str) -> None:
        self.moved.append(message_id)


def test_reset_head_window_moves_a_head_only_through_the_strategy() -> None:
    with manager(strategy=Headed()) as cm:
        cm.add_message("User", "x")
        with pytest.raises(ContextManagerError, match="cannot move its start"):
            cm.reset_head_window("next topic")
        assert len(cm.get_messages()) == 1
    movable = Movable()
    with manager(strategy=movable) as cm:
        cm.add_message("User", "x")
        cm.reset_head_window("next topic")
        assert movable.moved == [cm.get_messages()[-1].id]


# ----------------------------------------------------------------- tick warning
def test_tick_without_a_summariser_warns_when_work_waits() -> None:
    s = strategy(recent_window_tokens=100)
    with manager(strategy=s) as cm:
        talk(cm, 30)
        assert cm.pending_work()
        with pytest.warns(NoSummarizerWarning, match="no summariser"):
            assert cm.tick() is False
        assert not s.summaries


def test_tick_does_not_warn_without_reason() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with manager() as cm:  # passthrough: never any work
            talk(cm, 5)
            assert cm.tick() is False
        with folding() as cm:  # a summariser
            talk(cm, 30)
            assert cm.tick() is True
        with manager(strategy=strategy(recent_window_tokens=100)) as cm:  # no work yet
            cm.add_message("User", "hi")
            assert cm.tick() is False


# ------------------------------------------------------------ listeners, counts, holds
def test_a_message_listener_hears_each_stored_add_once_and_can_call_the_manager() -> None:
    cm = manager()
    heard: list[tuple[str, str, int]] = []

    def listen(m: StoredMessage) -> None:  # runs outside the lock: it may read
        heard.append((m.id, m.message.text, cm.get_message_count()))

    stop = cm.on_message(listen)
    first = cm.add_message("User", "one")
    second = cm.add_message("Claude", "two")
    assert heard == [(first, "one", 1), (second, "two", 2)]
    stop()
    stop()  # idempotent
    cm.add_message("User", "three")
    assert len(heard) == 2


def test_an_add_that_fails_tells_no_listener(monkeypatch: pytest.MonkeyPatch) -> None:
    cm = manager()
    heard: list[str] = []
    cm.on_message(lambda m: heard.append(m.id))
    store = cm.store
    append = store.append

    def full(slot: str, body: object) -> Any:
        append(slot, body)  # written, then the disk fills before the commit
        raise StoreFullError(f"{store.path}: the disk is full")

    monkeypatch.setattr(store, "append", full)
    with pytest.raises(StoreFullError):
        cm.add_message("User", "lost")
    monkeypatch.undo()
    assert heard == [] and cm.get_message_count() == 0
    kept = cm.add_message("User", "kept")
    assert heard == [kept]


def test_a_failing_listener_is_logged_and_the_add_stands(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cm = manager()
    told: list[str] = []

    def broken(m: StoredMessage) -> None:
        raise RuntimeError("listener bug")

    cm.on_message(broken)
    cm.on_message(lambda m: told.append(m.id))  # the next listener is still told
    with caplog.at_level("ERROR"):
        added = cm.add_message("User", "hello")
    assert told == [added] and cm.get_message_count() == 1
    assert any("listener failed" in r.getMessage() for r in caplog.records)
    with pytest.raises(ArgumentTypeError, match="listener"):
        cm.on_message("not callable")  # type: ignore[arg-type]


def test_get_message_count_follows_adds_and_removals() -> None:
    cm = manager()
    ids = talk(cm, 5)
    assert cm.get_message_count() == 5 == len(cm.get_messages())
    cm.remove_messages(ids[1], ids[2])
    assert cm.get_message_count() == 3 == len(cm.get_messages())


def test_caused_by_links_a_message_to_its_cause() -> None:
    cm = manager()
    question = cm.add_message("User", "what is 2+2?")
    answer = cm.add_message("Claude", "4", caused_by=question, metadata={"k": 1})
    assert cm.get_message(answer).metadata == {"k": 1, "caused_by": question}
    found = cm.query_messages(metadata={"caused_by": question})
    assert [m.id for m in found.messages] == [answer]
    with pytest.raises(UnknownMessageError) as caught:
        cm.add_message("Claude", "orphan", caused_by="no-such-id")
    assert caught.value.param == "caused_by"
    assert cm.get_message_count() == 2  # the refused add stored nothing


def test_max_summary_level_follows_the_memories() -> None:
    assert manager().get_max_summary_level() == 0
    cm = folding(merge_threshold=2)
    talk(cm, 40)
    cm.drain()
    s = cm.strategy
    assert isinstance(s, AutobiographicalStrategy)
    top = max(m.level for m in s.summaries.values())
    assert top >= 2 and cm.get_max_summary_level() == top


def test_hold_details_say_when_each_hold_began_and_ends() -> None:
    now = [10.0]
    cm = manager(clock=lambda: now[0])
    a = cm.add_message("User", "a", hold=5)
    now[0] = 12.0
    b = cm.add_message("User", "b")
    cm.hold_compression([b])
    cm.hold_compression([a], timeout=20)  # renewed: keeps its start, ends later
    details = cm.compression_hold_details()
    assert [(d.message_id, d.held_at, d.expires_at) for d in details] == [
        (a, 10.0, 32.0),
        (b, 12.0, None),
    ]
    now[0] = 40.0  # a's hold expired
    assert [d.message_id for d in cm.compression_hold_details()] == [b]
    cm.release_compression([b])
    assert cm.compression_hold_details() == []


def test_stats_count_the_record() -> None:
    cm = folding(merge_threshold=2)
    talk(cm, 40)
    cm.drain()
    cm.fork("side")
    got = cm.stats()
    assert got.message_count == 40 == len(cm.get_messages())
    assert got.context_entry_count == len(cm.context_log())
    assert got.branches == len(cm.list_branches()) == 2
    assert got.current_branch == cm.current_branch
    assert got.max_summary_level == cm.get_max_summary_level() >= 2


def test_is_closed_says_whether_the_manager_was_closed() -> None:
    cm = manager()
    assert cm.is_closed is False
    cm.close()
    assert cm.is_closed is True and cm.closed is True
    with pytest.raises(ContextManagerError, match="closed"):
        cm.add_message("User", "too late")
