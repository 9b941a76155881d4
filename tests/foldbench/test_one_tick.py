"""One tick per model call: the benchmark runs our policy as the library advises a host
to, catching up instead of refusing, and a compile that had to cap tool results asks
for the memories that would have spared the cap."""

from __future__ import annotations

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
from foldbench.benchmark import synthetic_transcript
from foldbench.peers.ours import FoldingPolicy

RESULT = "".join(f"line {i}: step ok\n" for i in range(60))  # 240 tokens by CharsCounter


def _held_back_chunk_and_a_result() -> tuple[ContextManager, AutobiographicalStrategy]:
    """Three remembered chunks, a fourth closed and held back, then a tool call and its
    result in the recent window."""
    strategy = AutobiographicalStrategy(
        compression_model="extractive",
        target_chunk_tokens=200,
        summary_target_tokens=40,
        recent_window_tokens=300,
        l1_holdback_chunks=1,
        solver="kv-stable",
    )
    cm = ContextManager.open(
        path=":memory:",
        strategy=strategy,
        counter=CharsCounter(),
        summarizer=ExtractiveSummarizer(),
    )
    for i in range(16):
        text = f"Turn {i}: the build of module m{i} passed its checks. " + "details " * 20
        cm.add_message("User" if i % 2 else "Claude", text)
    cm.add_message("Claude", [ToolUseBlock(id="c1", name="bash", input={"cmd": "make"})])
    cm.add_message("bash", [ToolResultBlock(tool_use_id="c1", content=RESULT)])
    cm.drain()
    return cm, strategy


def test_a_capped_compile_asks_for_the_memory_of_the_chunk_it_showed_raw() -> None:
    cm, strategy = _held_back_chunk_and_a_result()
    chunks = [(c.id, c.compressed) for c in strategy.chunks]
    assert chunks == [("c-0", True), ("c-1", True), ("c-2", True), ("c-3", False)]
    assert cm.pending_work() == []  # c-3 is held back
    capped = cm.compile(max_tokens=550, reserve_for_response=0)
    assert capped.render_stats["capped_results"]["results"] == 1
    assert "compress c-3" in cm.pending_work()  # its memory would have spared the cap
    cm.drain()
    whole = cm.compile(max_tokens=550, reserve_for_response=0)
    assert "capped_results" not in whole.render_stats
    [result] = [b for m in whole.messages for b in m.content if isinstance(b, ToolResultBlock)]
    assert result.content == RESULT
    cm.close()


def test_one_tick_per_call_is_the_default_and_none_drains() -> None:
    assert FoldingPolicy("kv-stable").ticks_per_call == 1
    assert FoldingPolicy("kv-stable", ticks_per_call=None).ticks_per_call is None
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="ticks_per_call"):
            FoldingPolicy("kv-stable", ticks_per_call=bad)  # type: ignore[arg-type]


def test_a_backlog_is_caught_up_not_refused() -> None:
    # the whole history arrives at the first call: far more than one tick can fold
    history = synthetic_transcript(120).messages
    policy = FoldingPolicy("kv-stable", ticks_per_call=0)
    request = policy.request(history, 4000)
    assert request.error is None and request.valid and request.tokens <= 4000
    assert request.summarizer_calls >= 10  # the memories a fit needed were written then
    policy.close()


def _extends(before: list[Message], after: list[Message]) -> bool:
    return len(after) >= len(before) and after[: len(before)] == before


def test_a_request_that_only_appends_makes_at_most_one_summariser_call() -> None:
    transcript = synthetic_transcript(120)
    policy = FoldingPolicy("kv-stable")
    drained = FoldingPolicy("kv-stable", ticks_per_call=None)
    before: list[Message] | None = None
    backlogs = 0
    for n in transcript.call_points:
        request = policy.request(transcript.messages[:n], 4000)
        assert request.valid, request.problems
        sent = list(request.messages)
        if before is not None and _extends(before, sent):
            assert request.summarizer_calls <= 1
        before = sent
        backlogs += bool(policy._cm.pending_work())
        drained.request(transcript.messages[:n], 4000)
        # a compile may ask ahead for the memories of its next fold: they drain too
        drained._cm.drain(max_ticks=500)
        assert drained._cm.pending_work() == []
    assert backlogs > 0  # one tick per call does leave work queued between calls
    policy.close()
    drained.close()
