"""Recovery paths: what a faulty summariser or a damaged store row cannot stop."""

from __future__ import annotations

from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
from context_manager.strategies.autobiographical import (
    AutobiographicalConfig,
    AutobiographicalStrategy,
)
from context_manager.summarizer import Completion, CompletionRequest


class _Surrogates:
    """A summariser whose answers hold a lone surrogate (a broken decoder upstream)."""

    needs_tool_definitions = False
    model = "extractive"

    def complete(self, request: CompletionRequest) -> Completion:
        text = ExtractiveSummarizer().complete(request).text
        return Completion(text=f"{text} \ud83d broken", stop_reason="end_turn")


def test_a_lone_surrogate_in_a_memory_is_stored_replaced_and_the_worker_lives() -> None:
    config = AutobiographicalConfig.for_window(4_000, compression_model="extractive")
    with ContextManager.open(
        path=":memory:",
        strategy=AutobiographicalStrategy(config),
        summarizer=_Surrogates(),
        counter=CharsCounter(),
        auto_tick=True,
    ) as cm:
        for i in range(40):
            cm.add_message("User" if i % 2 else "Claude", f"turn {i} " + "word " * 40)
        assert cm.wait_for_ticks(30)  # raises if the worker stopped on an error
        memories = list(cm.strategy.state.summaries.values())  # type: ignore[attr-defined]
        assert memories and all("\ufffd broken" in m.content for m in memories)
        assert cm.pending_work() == []
        cm.compile()
