"""A manager whose strategy folds small chunks at once and merges every two memories,
with a scripted summariser: the agent the fold-receipt tests accept rounds of."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from context_manager import CharsCounter, ContextManager
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from tests.support.scripted_summarizer import ScriptedSummarizer, words

NARROW = {"max_tokens": 450, "reserve_for_response": 100}
"""A budget that folds the older history into memories."""


def open_at(where: str | Path, **options: Any) -> tuple[ContextManager, AutobiographicalStrategy]:
    """The manager on a store file, or on an agent's store at a ``postgresql://`` URL,
    and its strategy (``options`` override the strategy's)."""
    config = {
        "compression_model": "test-model",
        "target_chunk_tokens": 100,
        "recent_window_tokens": 0,
        "l1_holdback_chunks": 0,
        "min_chunk_chars_for_llm": 0,
        "merge_threshold": 2,
        **options,
    }
    strategy = AutobiographicalStrategy(**config)
    text = str(where)
    at: dict[str, Any] = {"url": text} if text.startswith("postgresql://") else {"path": where}
    cm = ContextManager.open(
        **at, strategy=strategy, summarizer=ScriptedSummarizer(), counter=CharsCounter()
    )
    return cm, strategy


def history(cm: ContextManager, n: int = 24) -> None:
    """``n`` user messages of 20 words each, then every memory written."""
    for i in range(n):
        cm.add_message("User", words(20, f"m{i}"))
    cm.drain()
