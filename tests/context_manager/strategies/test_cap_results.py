"""Cap, don't refuse: a tool result too large for the window is capped in the sent copy."""

from __future__ import annotations

import pytest

from context_manager import (
    ContextManager,
    OverBudgetError,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.messages import ImageBlock, Message
from context_manager.strategies.capping import _level, cap_tool_results
from context_manager.tokens import ByteHeuristicCounter
from tests.support.small_agent import small_manager

LOG = "".join(f"line {i}: build step finished\n" for i in range(2_000))  # ~14k tokens


def _tool_turn(cm: ContextManager, k: int, output: str) -> None:
    cm.add_message("Claude", [ToolUseBlock(id=f"call_{k}", name="bash", input={"cmd": "make"})])
    cm.add_message("bash", [ToolResultBlock(tool_use_id=f"call_{k}", content=output)])


def test_a_result_larger_than_the_window_is_capped_not_refused() -> None:
    with small_manager() as cm:
        for i in range(10):
            cm.add_message("User", f"step {i}: " + "context " * 20)
            cm.tick()
        _tool_turn(cm, 0, LOG)
        request = cm.compile(max_tokens=2_000, reserve_for_response=200)
        capped = request.render_stats["capped_results"]
        assert capped["messages"] == 1 and capped["results"] == 1
        assert capped["tokens_saved"] > 10_000
        assert request.render_stats["tokens"] <= 1_800
        [result] = [
            b for m in request.messages for b in m.content if isinstance(b, ToolResultBlock)
        ]
        assert isinstance(result.content, str)
        assert "result capped" in result.content and "bash" in result.content
        assert result.content.startswith("line 0: ") and result.content.endswith("finished\n")
        # the stored message is unchanged
        [stored] = [s.message for s in cm.get_messages() if s.message.participant == "bash"]
        assert stored.content == (ToolResultBlock(tool_use_id="call_0", content=LOG),)
        # the same request twice gives the same bytes
        again = cm.compile(max_tokens=2_000, reserve_for_response=200)
        assert [m.canonical_json() for m in again.messages] == [
            m.canonical_json() for m in request.messages
        ]


def test_a_result_that_fits_is_never_capped() -> None:
    with small_manager() as cm:
        _tool_turn(cm, 0, "line 0: ok\n" * 50)
        request = cm.compile(max_tokens=4_000, reserve_for_response=200)
        assert "capped_results" not in request.render_stats
        [result] = [
            b for m in request.messages for b in m.content if isinstance(b, ToolResultBlock)
        ]
        assert result.content == "line 0: ok\n" * 50


def test_text_that_is_not_a_tool_result_still_refuses() -> None:
    with small_manager() as cm:
        cm.add_message("User", [TextBlock(text="word " * 4_000)])
        with pytest.raises(OverBudgetError) as info:
            cm.compile(max_tokens=2_000, reserve_for_response=200)
        assert "capped_results" not in info.value.diagnostics
        assert info.value.diagnostics["newest_tokens"] > 2_000
        assert "the newest message alone" in info.value.diagnostics["suggestion"]


def test_the_cap_frees_the_excess_from_the_largest_results_first() -> None:
    # sizes 1000, 500, 100 and an excess of 700: capping both large ones at 400 frees 700
    assert _level([1_000, 500, 100], 700) == 400
    assert _level([1_000, 500, 100], 100) == 900  # only the largest
    assert _level([1_000, 500, 100], 5_000) == 0  # nothing frees that much


def test_one_message_is_capped_result_by_result_naming_each_tool() -> None:
    counter = ByteHeuristicCounter()
    lines = [TextBlock(text=LOG[:4_000]), TextBlock(text=LOG[4_000:8_000])]
    message = Message(
        participant="bash",
        content=(
            ToolResultBlock(tool_use_id="a", content=LOG),
            ToolResultBlock(tool_use_id="b", content=lines),
            ToolResultBlock(tool_use_id="c", content=[TextBlock(text=LOG), ImageBlock(url="u")]),
            ToolResultBlock(tool_use_id="d", content="short"),
            TextBlock(text=LOG),
        ),
    )
    capped, tools = cap_tool_results(message, 200, counter, {"a": "bash"})
    assert tools == ("bash", "the tool")  # b's call is not in view
    a, b, c, d, text = capped.content
    assert isinstance(a, ToolResultBlock) and isinstance(b, ToolResultBlock)
    assert isinstance(a.content, str) and "re-call bash" in a.content
    assert isinstance(b.content, str) and "re-call the tool" in b.content
    assert counter.count_text(a.content) <= 200 and counter.count_text(b.content) <= 200
    assert (c, d, text) == message.content[2:]  # with an image, short, not a result
    assert capped.participant == "bash" and message.content[0].content == LOG  # a copy
    # a caller may cap only results given as one string
    only, named = cap_tool_results(
        message,
        200,
        counter,
        {},
        "bash",
        lambda r: r.content if isinstance(r.content, str) else None,
    )
    assert named == ("bash",) and only.content[1:] == message.content[1:]
    assert cap_tool_results(message, 10**6, counter, {})[0] is message
