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


_WORDS = [
    "parser",
    "test",
    "module",
    "fix",
    "bug",
    "file",
    "line",
    "error",
    "value",
    "config",
    "build",
    "deploy",
    "cache",
]


def _removing_agent(seed: int, n: int, rate: float) -> tuple[ContextManager, int]:
    """An agent that ticks as it goes and removes about ``rate`` of its older messages."""
    import random

    rng = random.Random(seed)
    strategy = AutobiographicalStrategy(
        compression_model="extractive",
        target_chunk_tokens=60,
        recent_window_tokens=120,
        merge_threshold=3,
        summary_target_tokens=30,
        l1_holdback_chunks=0,
        min_chunk_chars_for_llm=0,
    )
    cm = ContextManager.open(
        path=":memory:",
        strategy=strategy,
        summarizer=ExtractiveSummarizer(target_tokens=30),
        counter=CharsCounter(),
    )
    ids: list[str] = []
    removed = 0
    for i in range(n):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 12)))
        ids.append(cm.add_message("User" if i % 2 == 0 else "Assistant", f"m{i} {words}"))
        if i % 5 == 4:
            cm.tick()
        if i > 20 and rng.random() < rate:
            cm.remove_message(ids.pop(rng.randrange(0, len(ids) * 2 // 3)))
            removed += 1
    return cm, removed


def test_removals_never_leave_a_drained_store_refused_at_a_budget_it_fit_without_them() -> None:
    """Forgotten memories over removed rows are re-folded, so a drain ends at the same depth."""
    cm, removed = _removing_agent(seed=1, n=1500, rate=0.03)
    with cm:
        assert removed > 30
        cm.drain()
        assert cm.pending_work() == []
        strategy = cm.strategy
        state = strategy.state  # type: ignore[attr-defined]
        index = state.positions(cm._ctx, cm._ctx.messages())
        frontier = sorted(state.frontier_summaries(), key=lambda m: index.get(m.first, -1))
        levels = [m.level for m in frontier]
        # A drained frontier is a staircase: never a lower memory stranded before a higher one,
        # and no level holding as many parentless memories as the merge threshold.
        assert levels == sorted(levels, reverse=True), levels
        assert all(levels.count(level) < 3 for level in set(levels)), levels
        for budget in (2_000, 1_000, 600, 400):
            request = cm.compile(max_tokens=budget, reserve_for_response=0)
            assert request.render_stats["tokens"] <= budget


class _Rambling:
    """A summariser whose answers run to about ``words`` words whatever it is asked,
    unless ``obeys`` and the request states a limit."""

    needs_tool_definitions = False
    model = "extractive"

    def __init__(self, words: int, *, obeys: bool = False) -> None:
        self.words = words
        self.obeys = obeys
        self.asked: list[CompletionRequest] = []

    def complete(self, request: CompletionRequest) -> Completion:
        self.asked.append(request)
        told = "at most" in request.messages[-1].text
        if self.obeys and told:
            return ExtractiveSummarizer().complete(request)
        sentence = "I looked at the parser again and noted every detail of it. "
        return Completion(text=sentence * (self.words // 12), stop_reason="end_turn")


def _rambling_agent(summarizer: object, path: str = ":memory:") -> ContextManager:
    config = AutobiographicalConfig.for_window(4_000, compression_model="extractive")
    cm = ContextManager.open(
        path=path,
        strategy=AutobiographicalStrategy(config),
        summarizer=summarizer,  # type: ignore[arg-type]
        counter=CharsCounter(),
    )
    return cm


def _memory_costs(cm: ContextManager) -> list[int]:
    state = cm.strategy.state  # type: ignore[attr-defined]
    return [CharsCounter().count_text(m.content) for m in state.summaries.values()]


def test_an_over_long_memory_is_asked_again_then_cut_so_the_window_fits() -> None:
    rambling = _Rambling(words=4_000)  # about 5,300 tokens, as one provider answered
    with _rambling_agent(rambling) as cm:
        limit = cm.strategy.config.memory_limit()  # type: ignore[attr-defined]
        for i in range(120):
            cm.add_message("User" if i % 2 else "Claude", f"turn {i} " + "word " * 40)
        cm.drain()
        assert cm.pending_work() == []
        costs = _memory_costs(cm)
        assert costs and max(costs) <= limit
        # each over-long answer was asked for again once, with the limit stated
        told = [r for r in rambling.asked if f"at most {limit} tokens" in r.messages[-1].text]
        assert told and len(told) * 2 == len(rambling.asked)
        assert all(m.content.endswith("\u2026") for m in cm.strategy.state.summaries.values())  # type: ignore[attr-defined]
        result = cm.compile(max_tokens=4_000, reserve_for_response=500)
        assert result.render_stats["tokens"] <= 3_500


def test_a_summariser_that_obeys_the_stated_limit_is_not_cut() -> None:
    with _rambling_agent(_Rambling(words=4_000, obeys=True)) as cm:
        for i in range(60):
            cm.add_message("User" if i % 2 else "Claude", f"turn {i} " + "word " * 40)
        cm.drain()
        memories = list(cm.strategy.state.summaries.values())  # type: ignore[attr-defined]
        assert memories and not any(m.content.endswith("\u2026") for m in memories)


def test_over_long_memories_already_stored_are_written_again(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from context_manager.strategies.autobiographical import AutobiographicalConfig as Config

    path = str(tmp_path / "agent.db")
    config = Config.for_window(4_000, compression_model="extractive")
    loose = config.model_copy(update={"summary_max_tokens": 100_000})
    with ContextManager.open(
        path=path,
        strategy=AutobiographicalStrategy(loose),
        summarizer=_Rambling(words=4_000),
        counter=CharsCounter(),
    ) as cm:
        for i in range(120):
            cm.add_message("User" if i % 2 else "Claude", f"turn {i} " + "word " * 40)
        cm.drain()
        assert max(_memory_costs(cm)) > config.memory_limit()  # stored under a loose limit
    with _rambling_agent(ExtractiveSummarizer(), path) as cm:
        limit = config.memory_limit()
        assert any(line.startswith("rewrite ") for line in cm.pending_work())
        cm.drain()
        assert cm.pending_work() == []
        assert max(_memory_costs(cm)) <= limit
        cm.compile(max_tokens=4_000, reserve_for_response=500)
