"""When memories are written: as chunks close (``memory_schedule="eager"``) or only
once a compile asks for them (``"forecast"``)."""

from __future__ import annotations

from context_manager import (
    CharsCounter,
    Completion,
    CompletionRequest,
    ContextManager,
    ExtractiveSummarizer,
)
from context_manager.strategies.autobiographical import AutobiographicalStrategy


class Counting:
    """The extractive summariser, counting the requests it answers."""

    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer()
        self.requests = 0

    def complete(self, request: CompletionRequest) -> Completion:
        self.requests += 1
        return self.inner.complete(request)


def _manager(schedule: str, summarizer: Counting) -> ContextManager:
    strategy = AutobiographicalStrategy(
        compression_model="extractive",
        target_chunk_tokens=200,
        summary_target_tokens=40,
        recent_window_tokens=300,
        solver="kv-stable",
        memory_schedule=schedule,
    )
    return ContextManager.open(
        path=":memory:", strategy=strategy, summarizer=summarizer, counter=CharsCounter()
    )


def _talk(cm: ContextManager, n: int) -> None:
    for i in range(n):
        cm.add_message("User" if i % 2 else "Claude", f"Turn {i}: " + "details " * 20)


def test_eager_writes_every_closed_chunk_past_the_holdback() -> None:
    s = Counting()
    with _manager("eager", s) as cm:
        _talk(cm, 40)  # about 48 tokens a message: 9 chunks close outside the tail
        cm.drain()
        assert s.requests > 0 and not cm.pending_work()


def test_forecast_writes_nothing_until_a_compile_asks() -> None:
    s = Counting()
    with _manager("forecast", s) as cm:
        _talk(cm, 40)
        assert cm.pending_work() == [] and cm.drain() == 0 and s.requests == 0
        # a request that fits raw asks for nothing
        roomy = cm.compile(max_tokens=8_000, reserve_for_response=0)
        assert not roomy.render_stats.get("summaries") and cm.pending_work() == []
        # one that does not fit raw writes the memories it needs first (it catches up)
        tight = cm.compile(max_tokens=1_200, reserve_for_response=0)
        assert tight.render_stats["tokens"] <= 1_200
        assert tight.render_stats["summaries"] and s.requests > 0


def test_forecast_writes_the_next_fold_s_memories_before_it_is_needed() -> None:
    s = Counting()
    with _manager("forecast", s) as cm:
        _talk(cm, 40)  # 1,710 tokens as sent
        # past the target (70 % of 2,000) but within the budget: sent raw, and the
        # memories of the raw history the next fold takes are asked for
        held = cm.compile(max_tokens=2_000, reserve_for_response=0)
        assert not held.render_stats.get("summaries") and "catch_up" not in held.render_stats
        assert cm.pending_work() and all(w.startswith("compress ") for w in cm.pending_work())
        assert cm.drain() > 0 and s.requests > 0
