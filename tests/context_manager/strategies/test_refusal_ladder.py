"""The rungs after a refused memory request: the chunk alone, the tool prose, the split.

The canonical request and its ladder variants are covered in ``test_autobiographical``;
here the optional rungs (``compression_source_only``, ``..._source_only_fallback``,
``compression_tool_prose_fallback``, ``compression_split_fallback``), each driven by a
scripted summariser that refuses by the request's shape.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from context_manager.messages import Message, ToolResultBlock, ToolUseBlock
from context_manager.strategies.autobiographical import ToolProseFallback
from context_manager.summarizer import MEMORY_MARKER, Completion, CompletionRequest, Usage
from tests.support.scripted_summarizer import ScriptedSummarizer, open_cm, two_l2_ladder, words

INSTRUCTION = "[CM] Write the memory of what happened"


def is_alone(request: CompletionRequest) -> bool:
    """A request for a stretch alone: the marker, the stretch, the instruction."""
    first, last = request.messages[0], request.messages[-1]
    return first.text.startswith(MEMORY_MARKER) and last.text.startswith(INSTRUCTION)


def body(request: CompletionRequest) -> list[Message]:
    return list(request.messages[1:-1])


def texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]


def refuse_longer_than(n: int) -> Callable[[CompletionRequest, int], Completion]:
    """Refuse every request but one for at most ``n`` messages alone; answer those with
    the first word of each message, so a stitched memory shows its parts' order."""

    def answer(request: CompletionRequest, _: int) -> Completion:
        if is_alone(request) and len(body(request)) <= n:
            heads = " ".join(m.text.split()[0] if m.text else "call" for m in body(request))
            return Completion(text=heads, stop_reason="end_turn", usage=Usage(output_tokens=3))
        return Completion(text="No.", stop_reason="refusal")

    return answer


def test_source_only_requests_carry_the_chunk_alone(tmp_path: Path) -> None:
    s = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s, compression_source_only=True)
    for i in range(32):
        cm.add_message("User", words(8, f"m{i}"))
    cm.drain()
    assert len(strategy.chunks) >= 3 and all(c.compressed for c in strategy.chunks)
    stored = {m.id: m.message.text for m in cm.get_messages()}
    for request, chunk in zip(s.requests, strategy.chunks, strict=True):
        assert is_alone(request)  # no head, no recall ladder, no middle
        assert texts(body(request)) == [stored[i] for i in chunk.source_ids]
        assert request.cache_breakpoints == (0,)  # system, tools and marker: the same in each
    cm.close()


def test_the_chunk_alone_is_the_last_rung_before_giving_up(tmp_path: Path) -> None:
    def answer(request: CompletionRequest, n: int) -> Completion:
        if is_alone(request):
            return Completion(text="I remember it alone.", stop_reason="end_turn")
        return Completion(text="No.", stop_reason="refusal")

    cm, strategy, s = two_l2_ladder(tmp_path, answer, compression_source_only_fallback=True)
    cm.drain()
    # the canonical request, its two variants, then the chunk alone
    assert [is_alone(r) for r in s.requests] == [False, False, False, True]
    memory = strategy.summaries[strategy.chunks[6].summary_id or ""]
    assert memory.content == "I remember it alone." and not memory.stitched
    cm.close()


def test_a_refused_chunk_is_split_and_its_halves_stitched_in_order(tmp_path: Path) -> None:
    s = ScriptedSummarizer(refuse_longer_than(3))
    cm, strategy = open_cm(tmp_path, s, compression_split_fallback=True)
    for i in range(12):
        cm.add_message("User", words(8, f"m{i}"))
    cm.drain()
    chunk = strategy.chunks[0]
    assert len(chunk.source_ids) == 10
    memory = strategy.summaries[chunk.summary_id or ""]
    # 10 -> 5 + 5, each refused -> 2 + 3 and 2 + 3 (an odd half's older part is the
    # smaller): four parts, oldest first
    sizes = [len(body(r)) for r in s.requests]
    assert sizes == [10, 5, 2, 3, 5, 2, 3]
    parts = ["m0w0 m1w0", "m2w0 m3w0 m4w0", "m5w0 m6w0", "m7w0 m8w0 m9w0"]
    assert memory.content == "\n\n".join(parts)
    assert memory.stitched and memory.tokens == 12  # the parts' output tokens
    assert memory.source_ids == chunk.source_ids
    cm.close()
    cm, strategy = open_cm(tmp_path, ScriptedSummarizer())
    assert strategy.summaries[chunk.summary_id or ""].stitched  # persisted
    cm.close()


def test_the_split_never_parts_a_call_from_its_answer(tmp_path: Path) -> None:
    s = ScriptedSummarizer(refuse_longer_than(2))
    cm, strategy = open_cm(tmp_path, s, compression_split_fallback=True)
    cm.set_tool_definitions([{"name": "ls", "description": "List.", "input_schema": {}}])
    for i in range(6):
        cm.add_message("User", words(8, f"u{i}"))
        cm.add_message("Claude", [ToolUseBlock(id=f"t{i}", name="ls", input={"d": words(4, "a")})])
        result = ToolResultBlock(tool_use_id=f"t{i}", content=words(8, f"r{i}"))
        cm.add_message("User", [result])
    cm.add_message("Claude", words(8, "end"))
    cm.drain()
    assert strategy.chunks[0].compressed and strategy.summaries
    assert len(s.requests) > 3  # the chunk was split into several parts
    for request in s.requests[1:]:
        part = body(request)
        assert not any(isinstance(b, ToolResultBlock) for b in part[0].content)
        assert not any(isinstance(b, ToolUseBlock) for b in part[-1].content)
    cm.close()


def test_a_part_that_cannot_split_further_gives_the_chunk_up(tmp_path: Path) -> None:
    s = ScriptedSummarizer(refuse_longer_than(0))  # everything is refused
    cm, strategy = open_cm(tmp_path, s, compression_split_fallback=True)
    for i in range(12):
        cm.add_message("User", words(8, f"m{i}"))
    cm.drain()
    # the whole, then halves down to the oldest single message, which ends the split
    assert [len(body(r)) for r in s.requests] == [10, 5, 2, 1]
    assert not strategy.chunks[0].compressed and strategy.summaries == {}
    assert strategy.records.exhausted  # given up on, as when every rung is refused
    sent = len(s.requests)
    cm.drain()
    assert len(s.requests) == sent  # the same request family is not sent again
    cm.close()


def test_the_split_stops_at_its_call_limit(tmp_path: Path) -> None:
    s = ScriptedSummarizer(refuse_longer_than(3))
    cm, strategy = open_cm(
        tmp_path, s, compression_split_fallback=True, compression_split_max_calls_per_chunk=3
    )
    for i in range(12):
        cm.add_message("User", words(8, f"m{i}"))
    cm.drain()
    assert len(s.requests) == 1 + 3  # the canonical request, then the split's three
    assert not strategy.chunks[0].compressed and strategy.summaries == {}
    cm.close()


def test_no_answer_during_the_split_backs_off_without_a_verdict(tmp_path: Path) -> None:
    refused = refuse_longer_than(3)

    def answer(request: CompletionRequest, n: int) -> Completion:
        if n == 3:
            return Completion(text="", stop_reason="error")
        return refused(request, n)

    s = ScriptedSummarizer(answer)
    cm, strategy = open_cm(tmp_path, s, compression_split_fallback=True)
    for i in range(12):
        cm.add_message("User", words(8, f"m{i}"))
    cm.tick()
    assert len(s.requests) == 3 and strategy.summaries == {}
    assert not strategy.records.exhausted and not strategy.records.chunk_attempts
    cm.close()


TOOLS = [
    {"name": "think", "description": "Think.", "input_schema": {}},
    {"name": "note", "description": "Take a note.", "input_schema": {}},
    {"name": "ls", "description": "List.", "input_schema": {}},
]


def _reasoning_chunk(cm: Any, tools: list[dict[str, Any]] = TOOLS) -> dict[str, str]:
    """A chunk where the agent reasons through ``think`` (long and short), lists a
    folder and answers; returns the long prose and the short one."""
    cm.set_tool_definitions(tools)
    long_prose = "I should check the config before touching the parser. " * 3
    cm.add_message("User", words(8, "ask"))
    cm.add_message("Claude", [ToolUseBlock(id="t1", name="think", input={"thought": long_prose})])
    cm.add_message("User", [ToolResultBlock(tool_use_id="t1", content="ok")])
    cm.add_message("Claude", [ToolUseBlock(id="t2", name="think", input={"thought": "brief"})])
    cm.add_message("User", [ToolResultBlock(tool_use_id="t2", content="ok")])
    cm.add_message("Claude", [ToolUseBlock(id="t3", name="ls", input={"d": "x" * 200})])
    cm.add_message("User", [ToolResultBlock(tool_use_id="t3", content=words(8, "file"))])
    for i in range(6):
        cm.add_message("Claude" if i % 2 else "User", words(10, f"m{i}"))
    return {"long": long_prose, "short": "brief"}


def _calls(request: CompletionRequest) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (b.id, b.name, b.input)
        for m in request.messages
        for b in m.content
        if isinstance(b, ToolUseBlock)
    ]


def _results(request: CompletionRequest) -> dict[str, Any]:
    return {
        b.tool_use_id: b.content
        for m in request.messages
        for b in m.content
        if isinstance(b, ToolResultBlock)
    }


def refuse_reasoning(request: CompletionRequest, _: int) -> Completion:
    """Refuse every request in which a ``think`` call is left."""
    if any(name == "think" for _, name, _ in _calls(request)):
        return Completion(text="No.", stop_reason="refusal")
    return Completion(text="I remember taking notes.", stop_reason="end_turn")


def test_the_tool_prose_rung_moves_long_reasoning_into_the_note_tool(tmp_path: Path) -> None:
    s = ScriptedSummarizer(refuse_reasoning)
    rung = ToolProseFallback(into_tool="note", from_tools=("think",), min_chars=20)
    cm, strategy = open_cm(tmp_path, s, compression_tool_prose_fallback=rung)
    prose = _reasoning_chunk(cm)
    cm.drain()
    first, hoisted = s.requests[0], s.requests[1]
    assert ("t1", "think", {"thought": prose["long"]}) in _calls(first)
    # the long call moved with its prose as the one argument, same id; the short one
    # (under min_chars) and the other tool's call stay; results and the rest are the same
    assert _calls(hoisted) == [
        ("t1", "note", {"content": prose["long"]}),
        ("t2", "think", {"thought": prose["short"]}),
        ("t3", "ls", {"d": "x" * 200}),
    ]
    assert _results(hoisted) == _results(first)
    assert hoisted.model_copy(update={"messages": first.messages}) == first
    assert len(hoisted.messages) == len(first.messages)
    # the short call is still a think call, so this rung is refused too: given up on
    assert strategy.records.exhausted and strategy.summaries == {}
    cm.close()


def test_an_answer_to_the_tool_prose_rung_is_the_memory(tmp_path: Path) -> None:
    s = ScriptedSummarizer(refuse_reasoning)
    rung = ToolProseFallback(into_tool="note", from_tools=("think",), min_chars=1, result="noted")
    cm, strategy = open_cm(tmp_path, s, compression_tool_prose_fallback=rung)
    _reasoning_chunk(cm)
    cm.drain()
    hoisted = s.requests[1]
    assert [name for _, name, _ in _calls(hoisted)] == ["note", "note", "ls"]
    assert _results(hoisted)["t1"] == _results(hoisted)["t2"] == "noted"
    assert _results(hoisted)["t3"] == _results(s.requests[0])["t3"]  # not a moved call
    memory = strategy.summaries[strategy.chunks[0].summary_id or ""]
    assert memory.content == "I remember taking notes."
    # the store keeps the agent's own calls: only the request was reframed
    stored = [b for m in cm.get_messages() for b in m.message.content]
    assert [b.name for b in stored if isinstance(b, ToolUseBlock)] == ["think", "think", "ls"]
    cm.close()


def test_the_tool_prose_rung_is_skipped_when_its_tool_is_not_declared(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = ScriptedSummarizer(refuse_reasoning)
    rung = ToolProseFallback(into_tool="note", from_tools=("think",), min_chars=1)
    cm, strategy = open_cm(tmp_path, s, compression_tool_prose_fallback=rung)
    _reasoning_chunk(cm, [t for t in TOOLS if t["name"] != "note"])
    with caplog.at_level("WARNING"):
        cm.drain()
    assert len(s.requests) == 1  # no request names a tool the request does not declare
    assert any("into_tool 'note'" in r.getMessage() for r in caplog.records)
    assert strategy.records.exhausted
    cm.close()


def test_a_rung_must_move_into_another_tool() -> None:
    with pytest.raises(ValidationError, match="into_tool='think' is also in from_tools"):
        ToolProseFallback(into_tool="think", from_tools=("think",))
    with pytest.raises(ValidationError, match="from_tools"):
        ToolProseFallback(into_tool="note", from_tools=())
