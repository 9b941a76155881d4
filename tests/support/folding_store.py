"""A manager whose autobiographical strategy folds a few short messages at once: chunks
of 100 tokens, memories of 30, a recent window of 200, merging every three memories
(the stores the topology and audit-only tests build and break)."""

from __future__ import annotations

from typing import Any

from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
from context_manager.strategies.autobiographical import AutobiographicalStrategy


def folding_strategy() -> AutobiographicalStrategy:
    """Chunks of 100 tokens, memories of 30, a recent window of 200, merges by three."""
    return AutobiographicalStrategy(
        compression_model="extractive",
        target_chunk_tokens=100,
        summary_target_tokens=30,
        recent_window_tokens=200,
        l1_holdback_chunks=0,
        merge_threshold=3,
    )


def open_folding(**options: Any) -> ContextManager:
    """A manager with :func:`folding_strategy`, counting characters (``path=`` or
    ``store=`` and any other option of ``ContextManager.open``)."""
    return ContextManager.open(
        strategy=folding_strategy(),
        counter=CharsCounter(),
        summarizer=ExtractiveSummarizer(),
        **options,
    )
