"""A manager whose autobiographical strategy folds a few short messages at once: small
chunks, memories and recent window, merging every three memories (the stores the
topology and audit-only tests build and break)."""

from __future__ import annotations

from typing import Any

from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
from context_manager.strategies.autobiographical import AutobiographicalStrategy


def small_strategy() -> AutobiographicalStrategy:
    """Chunks of 100 tokens, memories of 30, a recent window of 200, merges by three."""
    return AutobiographicalStrategy(
        compression_model="extractive",
        target_chunk_tokens=100,
        summary_target_tokens=30,
        recent_window_tokens=200,
        l1_holdback_chunks=0,
        merge_threshold=3,
    )


def open_small(**options: Any) -> ContextManager:
    """A manager with :func:`small_strategy`, counting characters (``path=`` or
    ``store=`` and any other option of ``ContextManager.open``)."""
    return ContextManager.open(
        strategy=small_strategy(),
        counter=CharsCounter(),
        summarizer=ExtractiveSummarizer(),
        **options,
    )
