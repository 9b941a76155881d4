"""A summariser that answers from a script (:class:`ScriptedSummarizer`), a manager whose
memory requests carry the context before their chunk (:func:`open_cm`), and a store
with two L2 memories and a seventh chunk's request pending (:func:`two_l2_ladder`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from context_manager import CharsCounter, Completion, CompletionRequest, ContextManager
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from context_manager.summarizer import Usage


class ScriptedSummarizer:
    """A provider stand-in: records every request, answers from a script."""

    def __init__(self, answer: Callable[[CompletionRequest, int], Completion] | None = None):
        self.requests: list[CompletionRequest] = []
        self.answer = answer

    def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        if self.answer is not None:
            return self.answer(request, len(self.requests))
        n = len(self.requests)
        return Completion(
            text=f"I remember part {n}.", stop_reason="end_turn", usage=Usage(output_tokens=6)
        )


def open_cm(
    tmp_path: Path | None, summarizer: Any = None, name: str = "cm.db", **options: Any
) -> tuple[ContextManager, AutobiographicalStrategy]:
    """A manager on ``tmp_path / name`` (in memory when ``tmp_path`` is None) whose memory
    requests carry the context before their chunk (the head, the recall ladder and the
    middle)."""
    config = {
        "compression_model": "test-model",
        "compression_source_only": False,
        "target_chunk_tokens": 100,
        "recent_window_tokens": 0,
        "l1_holdback_chunks": 0,
        "min_chunk_chars_for_llm": 0,
        **options,
    }
    strategy = AutobiographicalStrategy(**config)
    cm = ContextManager.open(
        path=":memory:" if tmp_path is None else tmp_path / name,
        strategy=strategy,
        summarizer=summarizer,
        counter=CharsCounter(),
    )
    return cm, strategy


def words(n: int, tag: str) -> str:
    """``n`` words tagged ``tag``: ``{tag}w0 {tag}w1 ...``."""
    return " ".join(f"{tag}w{i}" for i in range(n))


def two_l2_ladder(
    tmp_path: Path, answer: Callable[[CompletionRequest, int], Completion], **options: Any
) -> Any:
    """Six L1s merged three by three into two L2s, then a seventh chunk's request pending
    (``options``: more strategy options)."""
    refusing = {"on": False}

    def script(request: CompletionRequest, n: int) -> Completion:
        if refusing["on"]:
            return answer(request, n)
        return Completion(text=f"I remember part {n}.", stop_reason="end_turn")

    s = ScriptedSummarizer(script)
    cm, strategy = open_cm(tmp_path, s, merge_threshold=3, **options)
    for i in range(25):  # six chunks of four, and the newest message, always in the tail
        cm.add_message("User", words(20, f"m{i}"))
    cm.drain()
    assert sorted(x.level for x in strategy.frontier_summaries()) == [2, 2]
    refusing["on"] = True
    for i in range(25, 29):
        cm.add_message("User", words(20, f"m{i}"))
    s.requests.clear()
    return cm, strategy, s
