"""Per-message caps in the copy sent: a message over ``max_message_tokens`` is cut, a tool
call input over ``tool_use_input_max_tokens`` is sent as its keys, each tool's results
past its newest ``tool_result_max_last_n`` become a note; the store keeps everything,
the request is priced as sent, and render stats count what was cut."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from context_manager import (
    CharsCounter,
    ContextManager,
    ExtractiveSummarizer,
    ImageBlock,
    OverBudgetError,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.message_caps import older_result_note
from context_manager.strategies import PassthroughStrategy
from context_manager.strategies.autobiographical import AutobiographicalStrategy

COUNTER = CharsCounter()
REPORT = " ".join(f"Sentence {i} of the pasted report." for i in range(1300))  # 45,689 chars


def sent_tokens(request: Any) -> int:
    return sum(COUNTER.count_message(m) for m in request.messages)


def test_a_message_over_the_cap_is_cut_in_the_copy_sent_only() -> None:
    strategy = PassthroughStrategy(max_message_tokens=2_000)
    with ContextManager.open(path=":memory:", counter=CharsCounter(), strategy=strategy) as cm:
        cm.add_message("User", "please read this document")
        big = cm.add_message("User", REPORT)
        cm.add_message("Claude", "I read it.")
        request = cm.compile(max_tokens=50_000, reserve_for_response=0)
        sent = next(m for m in request.messages if "Sentence 0 " in m.text)
        assert COUNTER.count_message(sent) <= 2_000
        assert "[…truncated: the message was ~11423 tokens; middle omitted]" in sent.text
        assert sent.text.startswith("Sentence 0 of") and sent.text.endswith(
            "Sentence 1299 of the pasted report."
        )
        assert cm.get_message(big).text == REPORT  # the store keeps it whole
        assert request.render_stats["truncated"] == {"messages": 1, "inputs": 0, "results": 0}
        assert request.render_stats["request"]["messages"] == sent_tokens(request)


def test_without_a_cap_the_same_message_is_sent_whole() -> None:
    with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        cm.add_message("User", REPORT)
        request = cm.compile(max_tokens=50_000, reserve_for_response=0)
        assert request.messages[0].text == REPORT
        assert "truncated" not in request.render_stats


def test_the_fold_plan_prices_a_capped_message_as_sent() -> None:
    """The newest message is 11k tokens whole; capped it fits a 3k budget, so the
    compile sends it instead of refusing."""
    options: dict[str, Any] = {
        "compression_model": "extractive",
        "recent_window_tokens": 2_500,
        "l1_holdback_chunks": 0,
        "shard_large_messages": False,  # stored whole (in parts it would fold, not cap)
    }
    for cap, fits in ((0, False), (2_000, True)):
        strategy = AutobiographicalStrategy(max_message_tokens=cap, **options)
        with ContextManager.open(
            path=":memory:", counter=COUNTER, strategy=strategy, summarizer=ExtractiveSummarizer()
        ) as cm:
            cm.add_message("User", REPORT)
            try:
                request = cm.compile(max_tokens=3_000, reserve_for_response=0)
            except OverBudgetError:
                assert not fits
                continue
            assert fits
            assert request.render_stats["request"]["messages"] == sent_tokens(request) <= 3_000


def test_a_large_tool_call_input_is_sent_as_its_keys() -> None:
    strategy = PassthroughStrategy(tool_use_input_max_tokens=500)
    with ContextManager.open(path=":memory:", counter=CharsCounter(), strategy=strategy) as cm:
        cm.add_message("User", "search")
        big = {"query": "x" * 4_000, "path": "/src", "flags": ["-r"]}
        cm.add_message("Claude", [ToolUseBlock(id="t1", name="grep", input=big)])
        cm.add_message("User", [ToolResultBlock(tool_use_id="t1", content="no hits")])
        cm.add_message("Claude", [ToolUseBlock(id="t2", name="ls", input={"path": "/src"})])
        cm.add_message("User", [ToolResultBlock(tool_use_id="t2", content="a.py")])
        request = cm.compile(max_tokens=50_000, reserve_for_response=0)
        calls = [b for m in request.messages for b in m.content if isinstance(b, ToolUseBlock)]
        # compact JSON of the input: {"query":"x…x","path":"/src","flags":["-r"]}
        original = math.ceil((len('{"query":"","path":"/src","flags":["-r"]}') + 4_000) / 4)
        assert calls[0].input == {
            "_truncated": True,
            "_originalTokens": original,
            "_keys": ["flags", "path", "query"],
        }
        assert calls[1].input == {"path": "/src"}
        assert request.render_stats["truncated"] == {"messages": 0, "inputs": 1, "results": 0}
        assert request.render_stats["request"]["messages"] == sent_tokens(request)


def tool_chat(cm: ContextManager) -> None:
    for i, tool in enumerate(["grep", "ls", "grep", "grep", "ls"]):
        cm.add_message("Claude", [ToolUseBlock(id=f"t{i}", name=tool, input={"n": i})])
        cm.add_message("User", [ToolResultBlock(tool_use_id=f"t{i}", content=f"{tool} {i} " * 50)])


def results(request: Any) -> list[str]:
    return [
        b.content
        for m in request.messages
        for b in m.content
        if isinstance(b, ToolResultBlock) and isinstance(b.content, str)
    ]


def test_each_tool_keeps_its_newest_results() -> None:
    strategy = PassthroughStrategy(tool_result_max_last_n=1)
    with ContextManager.open(path=":memory:", counter=CharsCounter(), strategy=strategy) as cm:
        tool_chat(cm)
        request = cm.compile(max_tokens=50_000, reserve_for_response=0)
        sent = results(request)
        grep, ls = older_result_note("grep"), older_result_note("ls")
        assert sent[:4] == [grep, ls, grep, ("grep 3 " * 50)]
        assert sent[4] == "ls 4 " * 50
        assert request.render_stats["truncated"]["results"] == 3
        assert request.render_stats["request"]["messages"] == sent_tokens(request)


def test_a_limit_by_tool_leaves_the_other_tools_whole() -> None:
    strategy = PassthroughStrategy(tool_result_max_last_n={"grep": 2})
    with ContextManager.open(path=":memory:", counter=CharsCounter(), strategy=strategy) as cm:
        tool_chat(cm)
        sent = results(cm.compile(max_tokens=50_000, reserve_for_response=0))
        whole = [f"{tool} {i} " * 50 for i, tool in enumerate(["grep", "ls", "grep", "grep", "ls"])]
        assert sent == [older_result_note("grep"), *whole[1:]]


def test_a_capped_message_is_sent_as_the_same_bytes_on_every_compile(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"

    def open_cm(cap: int) -> ContextManager:
        strategy = PassthroughStrategy(max_message_tokens=cap)
        return ContextManager.open(path=path, counter=CharsCounter(), strategy=strategy)

    with open_cm(1_000) as cm:
        cm.add_message("User", REPORT)
        first = cm.compile(max_tokens=50_000, reserve_for_response=0).messages[0]
        cm.add_message("Claude", "noted")
        assert cm.compile(max_tokens=50_000, reserve_for_response=0).messages[0] == first
    with open_cm(1_000) as cm:  # reopened: the same cut
        assert cm.compile(max_tokens=50_000, reserve_for_response=0).messages[0] == first
    with open_cm(0) as cm:  # the store kept it whole: without the cap, it is sent whole
        assert cm.compile(max_tokens=50_000, reserve_for_response=0).messages[0].text == REPORT


def test_a_cap_never_makes_a_message_longer() -> None:
    caps_strategy = PassthroughStrategy(max_message_tokens=10, tool_result_max_last_n=0)
    with ContextManager.open(path=":memory:", counter=CharsCounter(), strategy=caps_strategy) as cm:
        cm.add_message("Claude", [ToolUseBlock(id="t", name="a_tool_with_a_long_name", input={})])
        cm.add_message("User", [ToolResultBlock(tool_use_id="t", content="ok")])
        request = cm.compile(max_tokens=50_000, reserve_for_response=0)
        assert results(request) == ["ok"]  # the note would cost more than the result


def test_a_message_whose_images_fill_the_cap_keeps_its_text() -> None:
    strategy = PassthroughStrategy(max_message_tokens=100)
    with ContextManager.open(path=":memory:", counter=CharsCounter(), strategy=strategy) as cm:
        picture = ImageBlock(media_type="image/png", data="AAAA")  # 1,600 tokens alone
        cm.add_message("User", [TextBlock(text="what is on this screen? " * 20), picture])
        request = cm.compile(max_tokens=50_000, reserve_for_response=0)
        assert request.messages[0].content[0] == TextBlock(text="what is on this screen? " * 20)
        assert "truncated" not in request.render_stats
