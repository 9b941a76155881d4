"""Recall questions that name the tools of a memory's span, and the render stats of a
compile (``CompileResult.render_stats`` and ``ContextManager.get_render_stats``).

Expectations come from what the test wrote (which message called which tool) and from
recounting the compiled messages by their provenance, never from the stats code.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from context_manager import (
    CharsCounter,
    ContextManager,
    ExtractiveSummarizer,
    Message,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from context_manager.strategies.autobiographical.state import with_tools

COUNTER = CharsCounter()
LABEL = "What do you remember from earlier? (tools: {tools})"


def strategy(**extra: Any) -> AutobiographicalStrategy:
    options: dict[str, Any] = {
        "compression_model": "extractive",
        "target_chunk_tokens": 120,
        "recent_window_tokens": 100,
        "merge_threshold": 3,
        "summary_target_tokens": 30,
        "l1_holdback_chunks": 0,
        "min_chunk_chars_for_llm": 0,
    }
    options.update(extra)
    return AutobiographicalStrategy(**options)


def manager(s: AutobiographicalStrategy) -> ContextManager:
    return ContextManager.open(
        path=":memory:",
        strategy=s,
        counter=COUNTER,
        summarizer=ExtractiveSummarizer(target_tokens=30),
    )


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}w{j}" for j in range(n))


def with_tool_rounds(cm: ContextManager, rounds: int, text_turns: int) -> dict[str, str]:
    """Tool rounds, then plain turns; returns message id -> the tool it called."""
    called: dict[str, str] = {}
    for i in range(rounds):
        name = ("bash", "grep", "bash")[i % 3]
        cm.add_message("User", words(20, f"u{i}"))
        use = ToolUseBlock(id=f"t{i}", name=name, input={"cmd": f"c{i}"})
        called[cm.add_message("Claude", [use])] = name
        result = ToolResultBlock(tool_use_id=f"t{i}", content=words(20, f"r{i}"))
        cm.add_message("User", [result])
    for i in range(text_turns):
        cm.add_message("User" if i % 2 == 0 else "Claude", words(30, f"m{i}"))
    return called


def recount(messages: list[Message]) -> int:
    return sum(COUNTER.count_message(m) for m in messages)


# ------------------------------------------------------------------ {tools}
def test_a_memory_names_the_tools_its_messages_called() -> None:
    s = strategy(summary_context_label=LABEL)
    with manager(s) as cm:
        called = with_tool_rounds(cm, 6, 30)
        cm.drain()
        result = cm.compile(max_tokens=1500, reserve_for_response=0)
        pairs = [
            (q.text, result.provenance[k + 1][1])
            for k, (q, (memory, _)) in enumerate(
                zip(result.messages, result.provenance, strict=True)
            )
            if memory is not None and q.participant == "Context Manager"
        ]
        assert pairs, "the budget folds some history"
        with_names = without = 0
        for question, span in pairs:
            names = list(dict.fromkeys(called[i] for i in span if i in called))
            if names:
                with_names += 1
                assert question == f"What do you remember from earlier? (tools: {', '.join(names)})"
            else:
                without += 1
                assert question == "What do you remember from earlier?"
        assert with_names and without  # both kinds were shown
        # the solver priced each question as sent: the stats' tokens are the recount
        assert result.render_stats["tokens"] == recount(result.messages)


def test_without_the_placeholder_the_label_is_sent_as_written() -> None:
    s = strategy(summary_context_label="Recall {this} and {{that}}:")
    with manager(s) as cm:
        with_tool_rounds(cm, 6, 30)
        cm.drain()
        result = cm.compile(max_tokens=1500, reserve_for_response=0)
        questions = {
            m.text
            for m, (memory, _) in zip(result.messages, result.provenance, strict=True)
            if memory is not None and m.participant == "Context Manager"
        }
        assert questions == {"Recall {this} and {{that}}:"}


DANGLING = re.compile(r"\(\s*\)|\s[,;:.?!)]|[,;:(]\s*$|^\s*[,;:.?!)]|\s{2,}|[{}]")


@pytest.mark.parametrize(
    "label",
    [
        LABEL,
        "What do you remember from earlier (when you used {tools})?",
        "Tools: {tools}. What do you remember?",
        "{tools}: what do you remember?",
        "{tools} - what do you remember?",
        "What do you remember, {tools}?",
        "What do you remember? {tools}",
        "{tools}",
    ],
)
def test_no_tools_leaves_no_placeholder_and_no_dangling_punctuation(label: str) -> None:
    out = with_tools(label, [])
    assert out and not DANGLING.search(out), out
    assert with_tools(label, ["bash", "grep"]) == label.replace("{tools}", "bash, grep")
