"""ContextManager with the passthrough strategy (spec scenarios 1-5) and its plumbing."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_manager import (
    CharsCounter,
    ConfigError,
    ContextManager,
    ContextManagerError,
    Injection,
    Message,
    PassthroughStrategy,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    enforce_tool_pairs,
    tool_pair_problems,
)
from context_manager.pairing import PLACEHOLDER, enforce_tool_pairs_with_origins
from context_manager.strategies.base import (
    Entry,
    RequestBudget,
    Selection,
    Strategy,
    StrategyContext,
)


def manager(tmp_path: Path, **kw: object) -> ContextManager:
    return ContextManager.open(path=tmp_path / "cm.db", counter=CharsCounter(), **kw)  # type: ignore[arg-type]


def test_passthrough_keeps_the_task_and_the_newest_suffix_that_fits(tmp_path: Path) -> None:
    with manager(tmp_path) as cm:
        for i in range(1, 6):
            cm.add_message("User", f"m{i}" + "x" * 398)  # 100 tokens each
        result = cm.compile(max_tokens=350, reserve_for_response=50)
        assert [m.text[:2] for m in result.messages] == ["m1", "m4", "m5"]
    with manager(tmp_path, strategy=PassthroughStrategy(keep_task=False)) as cm:
        result = cm.compile(max_tokens=350, reserve_for_response=50)
        assert [m.text[:2] for m in result.messages] == ["m3", "m4", "m5"]


def test_defaults_and_no_injections(tmp_path: Path) -> None:
    with manager(tmp_path) as cm:
        cm.add_message("User", "Hello")
        cm.add_message("Claude", "Hi!")
        result = cm.compile()
        assert [m.text for m in result.messages] == ["Hello", "Hi!"]
        assert result.system_injections == []
        assert cm.compile(injections=[]).messages == result.messages


def test_injection_positions(tmp_path: Path) -> None:
    with manager(tmp_path) as cm:
        cm.add_message("User", "first")
        cm.add_message("Claude", "reply")
        cm.add_message("User", "second")
        result = cm.compile(
            injections=[
                Injection.text("sys", "system", "S"),
                Injection.text("rag", "before_user", "rag"),
                Injection.text("tools", "after_user", "tools"),
            ]
        )
        assert result.system_injections == [TextBlock(text="S")]
        assert [(m.participant, m.text) for m in result.messages] == [
            ("User", "first"),
            ("Claude", "reply"),
            ("system_context:rag", "rag"),
            ("User", "second"),
            ("system_context:tools", "tools"),
        ]


def test_injections_without_a_user_message(tmp_path: Path) -> None:
    with manager(tmp_path) as cm:
        cm.add_message("Claude", "alone")
        result = cm.compile(
            injections=[
                Injection.text("a", "before_user", "first"),
                Injection.text("b", "after_user", "second"),
            ]
        )
        assert [m.text for m in result.messages] == ["alone", "first", "second"]


def test_namespaces_share_messages_unless_isolated(tmp_path: Path) -> None:
    from context_manager import Store

    with Store.open(tmp_path / "shared.db") as store:
        alpha = ContextManager.open(store=store, namespace="alpha", counter=CharsCounter())
        beta = ContextManager.open(store=store, namespace="beta", counter=CharsCounter())
        mid = alpha.add_message("User", "shared")
        assert beta.get_message(mid).text == "shared"
        later = beta.add_message("Claude", "seen by both")
        alpha.edit_message(mid, "shared, edited")
        assert [m.id for m in alpha.get_messages()] == [mid, later]
        assert [m.message.text for m in beta.get_messages()] == ["shared, edited", "seen by both"]
        # each namespace keeps its own context log
        entry = alpha.add_context_entry(mid, "referenced")
        assert [e.id for e in alpha.context_log()] == [entry]
        assert beta.context_log() == []
        beta.remove_message(later)
        assert [m.id for m in alpha.get_messages()] == [mid]
        alpha.close()
        beta.close()
        assert not store.closed  # app-owned store stays open
    # the default namespace's log is where stores have always kept it
    with Store.open(tmp_path / "plain.db") as store:
        with ContextManager.open(store=store, counter=CharsCounter()) as plain:
            first = plain.add_context_entry(plain.add_message("User", "x"), "referenced")
        assert [item.id for item in store.items("context")] == [first]
        with ContextManager.open(store=store, namespace="default", counter=CharsCounter()) as same:
            assert [e.id for e in same.context_log()] == [first]
        with ContextManager.open(store=store, namespace="other", counter=CharsCounter()) as other:
            assert other.context_log() == []
    with pytest.raises(ConfigError, match="namespace"):
        ContextManager.open(path=tmp_path / "x.db", isolate=True)
    with pytest.raises(ConfigError, match="exactly one"):
        ContextManager.open()


def test_edit_remove_and_persistence(tmp_path: Path) -> None:
    with manager(tmp_path) as cm:
        a = cm.add_message("User", "one")
        b = cm.add_message("User", "two")
        cm.edit_message(a, "ONE")
        cm.remove_message(b)
        assert [s.message.text for s in cm.get_messages()] == ["ONE"]
        with pytest.raises(KeyError, match="no message with id"):
            cm.get_message(b)
    with manager(tmp_path) as cm:
        assert [s.message.text for s in cm.get_messages()] == ["ONE"]


def test_holds_validation_and_expiry(tmp_path: Path) -> None:
    now = [0.0]
    with manager(tmp_path, clock=lambda: now[0]) as cm:
        a = cm.add_message("User", "a")
        cm.hold_compression([a, "unknown"], timeout=10)
        assert cm.compression_holds() == {a}
        now[0] = 11.0
        assert cm.compression_holds() == set()
        with pytest.raises(ConfigError, match="positive"):
            cm.hold_compression([a], timeout=0)
        cm.release_compression(["unknown"])  # no-op


def test_branches_through_the_manager(tmp_path: Path) -> None:
    with manager(tmp_path) as cm:
        a = cm.add_message("User", "a")
        cm.add_message("User", "b")
        name = cm.branch_at(a, "early")
        cm.switch_branch(name)
        assert [s.message.text for s in cm.get_messages()] == ["a"]
        cm.add_message("User", "c")
        cm.switch_branch("main")
        assert [s.message.text for s in cm.get_messages()] == ["a", "b"]
        cm.fork("copy")
        assert cm.current_branch == "copy"


def test_tool_pairs_are_repaired() -> None:
    call = Message(participant="Claude", content=(ToolUseBlock(id="t1", name="ls"),))
    result = Message(participant="User", content=(ToolResultBlock(tool_use_id="t1", content="x"),))
    orphan = Message(participant="User", content=(ToolResultBlock(tool_use_id="zz", content="y"),))
    text = Message.text_message("User", "next")
    assert tool_pair_problems([call, result]) == []
    assert tool_pair_problems([orphan]) == [
        "message 0: tool_result 'zz' answers no tool_use before it"
    ]
    fixed = enforce_tool_pairs([orphan, text, call])  # trailing unanswered call dropped
    assert tool_pair_problems(fixed) == [] and [m.text for m in fixed] == ["next"]
    stubbed = enforce_tool_pairs([call, text])
    assert tool_pair_problems(stubbed) == [] and stubbed[1].tool_result_ids == ("t1",)


def test_context_log_relations_follow_edits_and_removals(tmp_path: Path) -> None:
    cm = ContextManager.open(path=tmp_path / "cm.db", counter=CharsCounter())
    m = cm.add_message("User", "the original")
    copy = cm.add_context_entry(m, "copy")
    derived = cm.add_context_entry(m, "derived", "a note written from it")
    referenced = cm.add_context_entry(m, "referenced")
    cm.edit_message(m, "the edited text")
    log = {e.id: e for e in cm.context_log()}
    assert log[copy].message.text == "the edited text"
    assert log[derived].message.text == "a note written from it"
    assert log[referenced].message.text == "the original"
    cm.remove_message(m)
    assert [e.id for e in cm.context_log()] == [derived, referenced]
    with pytest.raises(ConfigError, match="relation"):
        cm.add_context_entry(cm.add_message("User", "x"), "mirror")  # type: ignore[arg-type]
    cm.close()
    cm = ContextManager.open(path=tmp_path / "cm.db", counter=CharsCounter())
    assert [e.id for e in cm.context_log()] == [derived, referenced]  # persisted
    cm.close()


def test_passthrough_marks_only_the_last_message_for_the_cache(tmp_path: Path) -> None:
    with manager(tmp_path) as cm:
        assert cm.compile().cache_breakpoints == []
        for i in range(4):
            cm.add_message("User", f"m{i}")
        assert cm.compile().cache_breakpoints == [3]


class Marking(Strategy):
    """Shows given entries with given cache breakpoints (the compile's plumbing under test)."""

    def __init__(self, entries: list[Message], marks: tuple[int, ...]) -> None:
        self.entries = entries
        self.marks = marks

    def select(self, ctx: StrategyContext, budget: RequestBudget, *, dry_run: bool = False):  # type: ignore[no-untyped-def]
        shown = [Entry(m.participant, m.content, (), None, m) for m in self.entries]
        return Selection(shown, {}, self.marks)


def _marked(tmp_path: Path, entries: list[Message], marks: tuple[int, ...], **kw: object):  # type: ignore[no-untyped-def]
    with manager(tmp_path, strategy=Marking(entries, marks)) as cm:
        result = cm.compile(**kw)  # type: ignore[arg-type]
    return [m.text for m in result.messages], result.cache_breakpoints


def test_cache_marks_follow_their_messages_through_injections(tmp_path: Path) -> None:
    said = [Message.text_message(p, t) for p, t in [("User", "q0"), ("Claude", "a0")] * 2]
    said[2] = Message.text_message("User", "q1")
    notes = [
        Injection(namespace="n", position=pos, content=(TextBlock(text=pos),))
        for pos in ("before_user", "after_user")
    ]
    texts, marks = _marked(tmp_path, said, (0, 2, 3), injections=notes)
    assert texts == ["q0", "a0", "before_user", "q1", "after_user", "a0"]
    assert marks == [0, 3, 5]


def test_a_strategy_that_splits_a_tool_pair_is_refused(tmp_path: Path) -> None:
    call = Message(participant="Claude", content=(ToolUseBlock(id="t1", name="f", input={}),))
    orphan = Message(participant="User", content=(ToolResultBlock(tool_use_id="t9", content="x"),))
    # nothing is repaired after selection: a split pair is a strategy's bug, named
    entries = [call, Message.text_message("Claude", "marked"), Message.text_message("User", "end")]
    with pytest.raises(ContextManagerError, match="tool_use 't1' is not answered next"):
        _marked(tmp_path / "a", entries, (1,))
    entries = [Message.text_message("User", "kept"), orphan, Message.text_message("Claude", "b")]
    with pytest.raises(ContextManagerError, match="tool_result 't9' answers no tool_use"):
        _marked(tmp_path / "b", entries, (1,))


def test_cache_marks_outside_the_entries_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"breakpoints \[3\], outside its 2 entries"):
        _marked(tmp_path, [Message.text_message("User", "a")] * 2, (0, 3))


def _message_strategy() -> st.SearchStrategy[Message]:
    ids = st.sampled_from(["a", "b"])
    block = st.one_of(
        st.builds(TextBlock, text=st.sampled_from(["x", "y"])),
        st.builds(ToolUseBlock, id=ids, name=st.just("f"), input=st.just({})),
        st.builds(ToolResultBlock, tool_use_id=ids, content=st.just("r")),
    )
    return st.builds(
        Message,
        participant=st.sampled_from(["User", "Claude"]),
        content=st.lists(block, min_size=1, max_size=3).map(tuple),
    )


@given(st.lists(_message_strategy(), max_size=8))
def test_pairing_repairs_and_says_where_each_message_came_from(messages: list[Message]) -> None:
    repaired, origins = enforce_tool_pairs_with_origins(messages)
    assert repaired == enforce_tool_pairs(messages) == enforce_tool_pairs(repaired)
    assert tool_pair_problems(repaired) == []
    assert len(origins) == len(repaired) and origins == sorted(origins)
    for m, i in zip(repaired, origins, strict=True):
        assert 0 <= i < len(messages)
        placeholder = all(
            isinstance(b, ToolResultBlock) and b.content == PLACEHOLDER for b in m.content
        )
        assert placeholder or m.participant == messages[i].participant
