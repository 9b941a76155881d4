"""A small agent for tests: chunks of 200 tokens, memories of 40, a 300-token recent
window, kv-stable, the extractive summariser and the character counter."""

from __future__ import annotations

from typing import Any

from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
from context_manager.strategies.autobiographical import AutobiographicalStrategy


def small_strategy() -> AutobiographicalStrategy:
    return AutobiographicalStrategy(
        compression_model="extractive",
        target_chunk_tokens=200,
        summary_target_tokens=40,
        recent_window_tokens=300,
        solver="kv-stable",
    )


def small_manager(**options: Any) -> ContextManager:
    """An in-memory manager over :func:`small_strategy` (``options`` go to ``open``)."""
    return ContextManager.open(
        path=":memory:",
        strategy=small_strategy(),
        counter=CharsCounter(),
        summarizer=ExtractiveSummarizer(),
        **options,
    )
