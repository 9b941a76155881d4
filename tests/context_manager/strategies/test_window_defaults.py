"""Options sized for a window, described fields, and the tool-definition gate."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic import ValidationError

from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer, OverBudgetError
from context_manager.messages import ToolResultBlock, ToolUseBlock
from context_manager.providers.anthropic import AnthropicSummarizer
from context_manager.providers.openai import OpenAISummarizer
from context_manager.strategies.autobiographical import (
    AutobiographicalConfig,
    AutobiographicalStrategy,
)
from context_manager.summarizer import (
    Completion,
    CompletionRequest,
    Summarizer,
    Usage,
    needs_tool_definitions,
)

WINDOWS = [4_000, 8_000, 32_000, 200_000, 1_000_000]
WRITER_LOG = "context_manager.strategies.autobiographical.writer"


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}w{i}" for i in range(n))


def open_cm(strategy: AutobiographicalStrategy, summarizer: Any) -> ContextManager:
    return ContextManager.open(
        path=":memory:", strategy=strategy, summarizer=summarizer, counter=CharsCounter()
    )


def tool_cycle(cm: ContextManager, i: int) -> None:
    cm.add_message("Claude", [ToolUseBlock(id=f"t{i}", name="bash", input={"cmd": f"ls {i}"})])
    cm.add_message("User", [ToolResultBlock(tool_use_id=f"t{i}", content=words(30, f"out{i}"))])


# ------------------------------------------------------------------ for_window
@pytest.mark.parametrize("window", WINDOWS)
def test_for_window_sizes_every_piece_inside_the_window(window: int) -> None:
    config = AutobiographicalConfig.for_window(window, compression_model="extractive")
    assert config.window_tokens == window
    reserve = config.reserve_for_response_tokens
    assert reserve is not None and 0 < reserve < window
    budget = window - reserve
    assert config.recent_window_tokens + reserve + config.summary_target_tokens < window
    assert 2 * config.target_chunk_tokens < budget - config.recent_window_tokens
    assert config.summary_target_tokens < config.target_chunk_tokens  # a memory folds
    assert config.recall_budget_tokens <= config.compression_context_budget_tokens
    assert sum(config.solver_and_options[1].get("level_budgets", ())) <= budget
    AutobiographicalStrategy(config)  # the strategy accepts it as is


def test_for_window_grows_with_the_window_within_its_caps() -> None:
    configs = [AutobiographicalConfig.for_window(w) for w in WINDOWS]
    for name in (
        "reserve_for_response_tokens",
        "recent_window_tokens",
        "target_chunk_tokens",
        "summary_target_tokens",
    ):
        sizes = [getattr(c, name) for c in configs]
        assert sizes == sorted(sizes), name
    huge = configs[-1]
    assert huge.target_chunk_tokens == 12_000 and huge.summary_target_tokens == 2_400
    assert huge.reserve_for_response_tokens == 16_000
    tiny = AutobiographicalConfig.for_window(1_024)
    assert tiny.target_chunk_tokens == 200 and tiny.summary_target_tokens == 40


@pytest.mark.parametrize("window", WINDOWS)
def test_a_manager_sized_for_its_window_compiles_at_4000_tokens(window: int) -> None:
    config = AutobiographicalConfig.for_window(window, compression_model="extractive")
    with open_cm(AutobiographicalStrategy(config), ExtractiveSummarizer()) as cm:
        cm.add_message("User", "Please fix parse_config in src/app.py.")
        cm.add_message("Claude", "Fixed: the loop was off by one.")
        reserve = min(config.reserve_for_response_tokens or 0, 1_000)
        result = cm.compile(max_tokens=4_000, reserve_for_response=reserve)
        assert [m.text for m in result.messages][-1] == "Fixed: the loop was off by one."
        full = cm.compile(
            max_tokens=config.window_tokens or 0,
            reserve_for_response=config.reserve_for_response_tokens or 0,
        )
        assert len(full.messages) == 2


def test_a_long_conversation_with_tools_fits_4k_with_for_window() -> None:
    config = AutobiographicalConfig.for_window(4_000, compression_model="extractive")
    reserve = config.reserve_for_response_tokens or 0
    counter = CharsCounter()
    strategy = AutobiographicalStrategy(config)
    with open_cm(strategy, ExtractiveSummarizer()) as cm:
        for i in range(120):
            cm.add_message("User", words(25, f"u{i}") + ".")
            tool_cycle(cm, i)
            try:
                result = cm.compile(max_tokens=4_000, reserve_for_response=reserve)
            except OverBudgetError:  # memories not yet written: write them, then compile
                cm.drain()
                result = cm.compile(max_tokens=4_000, reserve_for_response=reserve)
            assert sum(counter.count_message(m) for m in result.messages) <= 4_000 - reserve
        stored = sum(counter.count_message(m.message) for m in cm.get_messages())
        assert stored > 2 * 4_000  # the history is far larger than the window
        assert strategy.summaries


def test_for_window_keeps_overrides_and_names_what_does_not_fit() -> None:
    config = AutobiographicalConfig.for_window(
        32_000, recent_window_tokens=5_000, solver="kv-unified"
    )
    assert config.recent_window_tokens == 5_000
    assert "policy" in config.solver_options  # kv-unified sized to the window
    with pytest.raises(ValidationError) as caught:
        AutobiographicalConfig.for_window(4_000, recent_window_tokens=30_000)
    message = str(caught.value)
    assert "recent_window_tokens=30000" in message
    assert "lower recent_window_tokens" in message
    assert "AutobiographicalConfig.for_window(4000)" in message
    with pytest.raises(ValidationError, match="reserve_for_response_tokens"):
        AutobiographicalConfig(window_tokens=4_000, reserve_for_response_tokens=4_000)
    with pytest.raises(ValueError, match="at least 1024"):
        AutobiographicalConfig.for_window(500)
    with pytest.raises(TypeError):
        AutobiographicalConfig.for_window(4_000.0)  # type: ignore[arg-type]


def test_the_defaults_are_not_checked_against_a_window() -> None:
    config = AutobiographicalConfig()
    assert config.window_tokens is None and config.reserve_for_response_tokens is None
    assert config.recent_window_tokens == 30_000


# ------------------------------------------------------------------ descriptions
def test_every_config_field_has_a_description_in_the_schema() -> None:
    properties = AutobiographicalConfig.model_json_schema()["properties"]
    assert set(properties) == set(AutobiographicalConfig.model_fields)
    missing = [name for name, prop in properties.items() if not prop.get("description", "").strip()]
    assert missing == []


# ------------------------------------------------------------------ the tool gate
class ScriptedSummarizer:
    """A provider stand-in that answers every request with a fixed memory."""

    def __init__(self) -> None:
        self.requests: list[CompletionRequest] = []

    def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        return Completion(
            text=f"I remember part {len(self.requests)}.",
            stop_reason="end_turn",
            usage=Usage(output_tokens=6),
        )


class ProviderLike(ScriptedSummarizer):
    needs_tool_definitions = True


class LocalSummarizer(ScriptedSummarizer):
    needs_tool_definitions = False


def tool_strategy() -> AutobiographicalStrategy:
    return AutobiographicalStrategy(
        compression_model="test-model",
        target_chunk_tokens=100,
        recent_window_tokens=0,
        l1_holdback_chunks=0,
        min_chunk_chars_for_llm=0,
    )


def add_tool_history(cm: ContextManager, cycles: int = 4) -> None:
    for i in range(cycles):
        cm.add_message("User", words(15, f"u{i}"))
        tool_cycle(cm, i)
    cm.add_message("User", "done")


def test_the_summarisers_declare_whether_they_need_tool_definitions() -> None:
    assert needs_tool_definitions(ExtractiveSummarizer()) is False
    assert AnthropicSummarizer.needs_tool_definitions is True
    assert OpenAISummarizer.needs_tool_definitions is True
    assert needs_tool_definitions(ScriptedSummarizer()) is True  # undeclared: the safe side
    assert needs_tool_definitions(LocalSummarizer()) is False
    assert isinstance(ScriptedSummarizer(), Summarizer)  # not a protocol member


def test_the_extractive_summariser_folds_tool_calls_without_tool_definitions(
    caplog: pytest.LogCaptureFixture,
) -> None:
    strategy = tool_strategy()
    with (
        caplog.at_level(logging.WARNING, logger=WRITER_LOG),
        open_cm(strategy, ExtractiveSummarizer()) as cm,
    ):
        add_tool_history(cm)
        assert cm.tick() is True
        assert strategy.summaries
        first = next(iter(strategy.summaries.values()))
        assert not first.stub
        sources = [cm.get_message(i) for i in strategy.chunks[0].source_ids]
        assert any(isinstance(b, ToolUseBlock) for m in sources for b in m.content)
    assert "set_tool_definitions" not in caplog.text


def test_a_local_summariser_gets_tool_chunks_without_definitions() -> None:
    strategy, summarizer = tool_strategy(), LocalSummarizer()
    with open_cm(strategy, summarizer) as cm:
        add_tool_history(cm)
        assert cm.tick() is True and len(summarizer.requests) == 1
        assert not summarizer.requests[0].tools


@pytest.mark.parametrize("summarizer_type", [ProviderLike, ScriptedSummarizer])
def test_a_summariser_that_needs_tools_holds_and_says_so_once(
    summarizer_type: type[ScriptedSummarizer], caplog: pytest.LogCaptureFixture
) -> None:
    strategy, summarizer = tool_strategy(), summarizer_type()
    with caplog.at_level(logging.WARNING, logger=WRITER_LOG), open_cm(strategy, summarizer) as cm:
        add_tool_history(cm)
        assert [cm.tick() for _ in range(3)] == [False, False, False]
        add_tool_history(cm)
        assert cm.tick() is False and summarizer.requests == []
        told = [r for r in caplog.records if "set_tool_definitions" in r.getMessage()]
        assert len(told) == 1
        assert told[0].levelno == logging.WARNING
        assert summarizer_type.__name__ in told[0].getMessage()
        assert "ContextManager.set_tool_definitions(tools)" in told[0].getMessage()
        cm.set_tool_definitions([{"name": "bash", "input_schema": {"type": "object"}}])
        assert cm.tick() is True and len(summarizer.requests) == 1
        assert summarizer.requests[0].tools


def test_each_strategy_is_told_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=WRITER_LOG):
        for _ in range(2):
            with open_cm(tool_strategy(), ProviderLike()) as cm:
                add_tool_history(cm)
                assert cm.tick() is False and cm.tick() is False
    told = [r for r in caplog.records if "set_tool_definitions" in r.getMessage()]
    assert len(told) == 2


# ------------------------------------------------------------- compile defaults
def test_a_small_window_compiles_with_the_default_reserve() -> None:
    strategy = AutobiographicalStrategy(compression_model="extractive")
    with open_cm(strategy, ExtractiveSummarizer()) as cm:
        cm.add_message("User", words(50, "hi"))
        request = cm.compile(max_tokens=4_000)  # the reserve is a quarter: 1,000
        assert request.render_stats["tokens"] <= 3_000


def test_a_sized_strategy_gives_the_compile_its_window_and_reserve() -> None:
    config = AutobiographicalConfig.for_window(8_000, compression_model="extractive")
    assert config.reserve_for_response_tokens is not None
    with open_cm(AutobiographicalStrategy(config), ExtractiveSummarizer()) as cm:
        cm.add_message("User", words(4_000, "big"))  # about 20k tokens: never fits
        with pytest.raises(OverBudgetError) as info:
            cm.compile()
        assert info.value.budget == 8_000 - config.reserve_for_response_tokens
        suggestion = info.value.diagnostics["suggestion"]
        # the one message is the turn the model answers: never folded, so no option helps
        assert "the newest message alone" in suggestion and "shorten it" in suggestion
        assert "recent_window_tokens" not in suggestion and "catch_up" not in suggestion
        assert "AutobiographicalConfig.for_window(8000)" in suggestion


def test_a_refusal_names_the_window_option_that_holds_too_much() -> None:
    strategy = AutobiographicalStrategy(compression_model="extractive")  # a 30k recent window
    with open_cm(strategy, ExtractiveSummarizer()) as cm:
        for i in range(40):
            cm.add_message("User" if i % 2 else "Claude", words(60, f"t{i}"))
        with pytest.raises(OverBudgetError) as info:
            cm.compile(max_tokens=4_000)
        suggestion = info.value.diagnostics["suggestion"]
        assert "lower recent_window_tokens (30000" in suggestion
        assert "AutobiographicalConfig.for_window(4000)" in suggestion


def test_the_window_check_counts_a_memory_s_exact_values() -> None:
    sized = {
        "window_tokens": 1_000,
        "recent_window_tokens": 700,
        "reserve_for_response_tokens": 200,
        "summary_target_tokens": 40,
    }
    AutobiographicalConfig(**sized, memory_values_tokens=0)  # 940 tokens: room is left
    with pytest.raises(ValueError, match="memory_values_tokens=60 add up to 1000 tokens"):
        AutobiographicalConfig(**sized, memory_values_tokens=60)


def test_for_window_queues_a_chunk_as_soon_as_it_closes() -> None:
    # the recent window keeps the newest history raw; a chunk closed before it is queued
    # at once, so a fold past it finds its memory (the field's own default holds the
    # newest closed chunk back until another closes)
    sized = AutobiographicalConfig.for_window(4_000, compression_model="extractive")
    held = sized.model_copy(update={"l1_holdback_chunks": 1})
    work: dict[str, list[list[str]]] = {}
    for name, config in (("sized", sized), ("held", held)):
        with open_cm(AutobiographicalStrategy(config), ExtractiveSummarizer()) as cm:
            work[name] = []
            for i in range(16):
                cm.add_message("User", words(40, f"u{i}") + ".")
                cm.add_message("Claude", words(40, f"c{i}") + ".")
                work[name].append(cm.pending_work())
    first = next(i for i, queued in enumerate(work["sized"]) if queued)
    assert work["sized"][first] == ["compress c-0"]
    assert work["held"][first] == []
    assert ["compress c-0"] in work["held"][first:]  # once a second chunk has closed
