"""ContextManager with the passthrough strategy (spec scenarios 1-5) and its plumbing."""

from __future__ import annotations

from pathlib import Path

import pytest

from context_manager import (
    CharsCounter,
    ConfigError,
    ContextManager,
    Injection,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    enforce_tool_pairs,
    tool_pair_problems,
)


def manager(tmp_path: Path, **kw: object) -> ContextManager:
    return ContextManager.open(path=tmp_path / "cm.db", counter=CharsCounter(), **kw)  # type: ignore[arg-type]


def test_passthrough_keeps_the_newest_suffix_that_fits(tmp_path: Path) -> None:
    with manager(tmp_path) as cm:
        for i in range(1, 6):
            cm.add_message("User", f"m{i}" + "x" * 398)  # 100 tokens each
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
                Injection.text("a", "before_user", "dropped"),
                Injection.text("b", "after_user", "kept"),
            ]
        )
        assert [m.text for m in result.messages] == ["alone", "kept"]


def test_namespaces_share_messages_unless_isolated(tmp_path: Path) -> None:
    from context_manager import Store

    with Store.open(tmp_path / "shared.db") as store:
        alpha = ContextManager.open(store=store, namespace="alpha", counter=CharsCounter())
        beta = ContextManager.open(store=store, namespace="beta", counter=CharsCounter())
        mid = alpha.add_message("User", "shared")
        assert beta.get_message(mid).text == "shared"
        alpha.close()
        beta.close()
        assert not store.closed  # app-owned store stays open
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
