"""What the summariser is sent: merges written from the memories they merge
(``merge_from="memories"``), and the benchmark's sizing of our policy."""

from __future__ import annotations

from typing import Any

from context_manager import CharsCounter, Completion, CompletionRequest, ContextManager
from context_manager.strategies.autobiographical import (
    AutobiographicalConfig,
    AutobiographicalStrategy,
)
from context_manager.summarizer import MEMORY_MARKER, Usage
from foldbench.peers.ours import FoldingPolicy


class Numbered:
    """Answers every request with ``I remember part <n>.`` and records the requests."""

    def __init__(self) -> None:
        self.requests: list[CompletionRequest] = []

    def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        text = f"I remember part {len(self.requests)}."
        return Completion(text=text, stop_reason="end_turn", usage=Usage(output_tokens=5))


def _manager(summarizer: Numbered, **options: Any) -> ContextManager:
    strategy = AutobiographicalStrategy(
        compression_model="test-model",
        target_chunk_tokens=100,
        recent_window_tokens=0,
        l1_holdback_chunks=0,
        min_chunk_chars_for_llm=0,
        merge_threshold=3,
        **options,
    )
    return ContextManager.open(
        path=":memory:", strategy=strategy, summarizer=summarizer, counter=CharsCounter()
    )


def _talk(cm: ContextManager, n: int) -> list[str]:
    """``n`` messages of 20 distinct words each (four make a chunk of 100 tokens), then
    the newest message, which stays in the tail."""
    texts = [" ".join(f"m{i}w{j}" for j in range(20)) for i in range(n)]
    for text in texts:
        cm.add_message("User", text)
    cm.add_message("User", "and now?")
    cm.drain()
    return texts


def _after_marker(request: CompletionRequest) -> list[str]:
    texts = [m.text for m in request.messages]
    marker = max(i for i, t in enumerate(texts) if t.startswith(MEMORY_MARKER))
    return texts[marker + 1 : -1]


def test_merges_read_the_memories_they_merge() -> None:
    s = Numbered()
    cm = _manager(s, merge_from="memories")
    said = _talk(cm, 12)  # three chunks of four messages, then one merge
    kinds = ["merge" if "(level 2)" in r.messages[-1].text else "l1" for r in s.requests]
    assert kinds == ["l1", "l1", "l1", "merge"]
    merge = s.requests[3]
    # the three memories, each asked for and answered, and no message of the stretch
    assert _after_marker(merge) == [
        "[CM] Recall memory L1-0.",
        "I remember part 1.",
        "[CM] Recall memory L1-1.",
        "I remember part 2.",
        "[CM] Recall memory L1-2.",
        "I remember part 3.",
    ]
    assert not any(t in said for t in (m.text for m in merge.messages))
    assert "from the memories that follow" in next(
        m.text for m in merge.messages if m.text.startswith(MEMORY_MARKER)
    )
    cm.close()


def test_by_default_a_merge_still_reads_the_messages_below() -> None:
    s = Numbered()
    cm = _manager(s)
    said = _talk(cm, 12)
    assert AutobiographicalConfig().merge_from == "below"
    assert _after_marker(s.requests[3]) == said  # the twelve messages the three L1s cover
    cm.close()


def test_the_benchmark_sizes_merges_to_read_memories() -> None:
    for budget in (4000, 8000, 16_000):
        options = FoldingPolicy.config_for(budget, "kv-stable")
        assert options["merge_from"] == "memories"
        AutobiographicalConfig(**options)  # a valid configuration


def test_a_memory_request_reads_at_most_the_cap_of_a_long_tool_result() -> None:
    from context_manager import ToolResultBlock, ToolUseBlock

    s = Numbered()
    log = "".join(f"line {i}: step done, code T-{1000 + i}-C\n" for i in range(300))
    cm = _manager(s, compression_source_only=True, memory_source_cap_tokens=100)
    cm.set_tool_definitions([{"name": "bash", "input_schema": {"type": "object"}}])
    cm.add_message("User", " ".join(f"m0w{j}" for j in range(20)))
    cm.add_message("Claude", [ToolUseBlock(id="c1", name="bash", input={"cmd": "make"})])
    cm.add_message("bash", [ToolResultBlock(tool_use_id="c1", content=log)])
    for i in range(1, 5):
        cm.add_message("User", " ".join(f"m{i}w{j}" for j in range(20)))
    cm.drain()
    [sent] = [
        b.content
        for r in s.requests
        for m in r.messages
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]
    assert isinstance(sent, str) and len(sent) < len(log) // 5  # about 100 tokens of it
    assert sent.startswith("line 0: ") and sent.endswith("T-1299-C\n") and "bash" in sent
    # the stored message is whole, and the recall tool gives it back whole
    assert cm.get_messages()[2].message.content[0].content == log  # type: ignore[union-attr]
    assert "T-1150-C" in cm.recall_tool()({"grep": "T-1150-C"})
    cm.close()
