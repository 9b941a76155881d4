"""What a manager opened without a strategy does: it folds when it has a summariser, and
without one it sends the task and the newest turn, capped if need be, never nothing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_manager import (
    CharsCounter,
    ConfigError,
    ContextManager,
    ExtractiveSummarizer,
    OverBudgetError,
    PassthroughStrategy,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from context_manager.summarizer import Completion, CompletionRequest
from tests.support.paths import ROOT


def _call(cm: ContextManager, i: int, result: str) -> None:
    """One tool round: the agent calls ``grep`` and the tool answers ``result``."""
    cm.add_message("Claude", [ToolUseBlock(id=f"t{i}", name="grep", input={"n": i})])
    cm.add_message("grep", [ToolResultBlock(tool_use_id=f"t{i}", content=result)])


# ------------------------------------------------------------ with a summariser
def test_a_summariser_and_no_strategy_folds_history_into_memories() -> None:
    with ContextManager.open(
        path=":memory:",
        summarizer=ExtractiveSummarizer(),
        counter=CharsCounter(),
        window_tokens=4_000,
    ) as cm:
        assert isinstance(cm.strategy, AutobiographicalStrategy)
        assert cm.strategy.config.window_tokens == 4_000
        cm.add_message("User", "Find where the retry limit is set.")
        for i in range(120):
            _call(cm, i, f"src/module_{i}.py: line {i}: " + "context " * 30)
            cm.tick()
            request = cm.compile()  # the window given at open
            reserve = cm.strategy.config.reserve_for_response_tokens
            assert reserve is not None
            assert request.render_stats["request"]["total"] <= 4_000 - reserve
        assert any(memory is not None for memory, _ in request.provenance)  # memories shown
        assert len(request.messages) < 2 * 120


def test_the_default_window_and_reserve_are_the_ones_compile_takes(tmp_path: Path) -> None:
    with ContextManager.open(
        path=tmp_path / "a.db", summarizer=ExtractiveSummarizer(), counter=CharsCounter()
    ) as cm:
        assert isinstance(cm.strategy, AutobiographicalStrategy)
        config = cm.strategy.config
        assert config.reserve_for_response_tokens is not None
        assert config.window_tokens == 100_000 and config.compression_model == "extractive"
        cm.add_message("User", "hello")
        cm.add_message("User", "word " * 80_000)  # 100,000 tokens: over the input
        with pytest.raises(OverBudgetError) as caught:
            cm.compile()
        assert caught.value.budget == 100_000 - config.reserve_for_response_tokens
        # an explicit window smaller than the sized reserve still leaves room for input
        with pytest.raises(OverBudgetError) as caught:
            cm.compile(max_tokens=500)
        assert caught.value.budget == 500 - 500 // 4


class _NamelessSummarizer:
    """A summariser with no ``model`` attribute (as the provider summarisers are)."""

    needs_tool_definitions = False

    def __init__(self) -> None:
        self.models: list[str] = []

    def complete(self, request: CompletionRequest) -> Completion:
        self.models.append(request.model)
        return Completion(text="I looked at files.", stop_reason="end_turn")


def test_a_summariser_without_a_model_needs_memory_model() -> None:
    with pytest.raises(ConfigError, match="memory_model"):
        ContextManager.open(path=":memory:", summarizer=_NamelessSummarizer())
    summarizer = _NamelessSummarizer()
    with ContextManager.open(
        path=":memory:",
        summarizer=summarizer,
        counter=CharsCounter(),
        window_tokens=4_000,
        memory_model="claude-sonnet-4-6",
    ) as cm:
        for i in range(40):
            _call(cm, i, "output line " * 40)
        cm.drain()
    assert summarizer.models and set(summarizer.models) == {"claude-sonnet-4-6"}


@pytest.mark.parametrize("option", [{"window_tokens": 8_000}, {"memory_model": "m"}])
def test_sizing_options_are_refused_beside_a_strategy(option: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=next(iter(option))):
        ContextManager.open(path=":memory:", strategy=PassthroughStrategy(), **option)


def test_a_window_too_small_to_fold_into_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="window_tokens"):
        ContextManager.open(path=":memory:", summarizer=ExtractiveSummarizer(), window_tokens=500)


def test_the_readme_loop_opens_the_folding_default() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    opened = re.search(
        r"ContextManager\.open\(\s*path=store, summarizer=ExtractiveSummarizer\(\), "
        r"window_tokens=([\d_]+)\s*\)",
        text,
    )
    assert opened is not None, "the README's agent loop opens the default with a window"
    window = int(opened.group(1).replace("_", ""))
    with ContextManager.open(
        path=":memory:", summarizer=ExtractiveSummarizer(), window_tokens=window
    ) as cm:
        assert isinstance(cm.strategy, AutobiographicalStrategy)


# --------------------------------------------------------- without a summariser
def _passthrough(**options: Any) -> ContextManager:
    strategy = PassthroughStrategy(**options) if options else None
    return ContextManager.open(path=":memory:", strategy=strategy, counter=CharsCounter())


def test_no_summariser_means_passthrough_and_nothing_folds() -> None:
    with _passthrough() as cm:
        assert isinstance(cm.strategy, PassthroughStrategy)
        assert cm.tick() is False


def test_an_oversized_tool_result_is_capped_not_an_empty_request() -> None:
    with _passthrough() as cm:
        cm.add_message("User", "Read the log and tell me what failed.")
        _call(cm, 0, "ERROR at start\n" + "noise line\n" * 2_000 + "FAILED: disk full")
        request = cm.compile(max_tokens=1_000, reserve_for_response=100)
        assert request.messages, "a request is never empty"
        assert request.messages[0].text == "Read the log and tell me what failed."
        sent = request.messages[-1].content[0]
        assert isinstance(sent, ToolResultBlock) and isinstance(sent.content, str)
        assert sent.content.startswith("ERROR at start") and sent.content.endswith("disk full")
        capped = request.render_stats["capped_results"]
        assert capped["messages"] == 1 and capped["results"] == 1
        assert request.render_stats["request"]["total"] <= 900
        # the store keeps the whole result
        stored = cm.get_messages()[-1].message.content[0]
        assert isinstance(stored, ToolResultBlock) and isinstance(stored.content, str)
        assert len(stored.content) > 20_000


def test_the_task_stays_once_it_has_scrolled_out() -> None:
    with _passthrough() as cm:
        task = cm.add_message("User", "Rename the config loader.")
        for i in range(30):
            _call(cm, i, f"result {i} " + "x" * 200)
        request = cm.compile(max_tokens=400, reserve_for_response=0)
        assert request.messages[0].text == "Rename the config loader."
        assert request.render_stats["task"]["messages"] == 1
        assert request.render_stats["dropped"] > 0
        assert request.provenance[0] == (None, (task,))


def test_keep_task_false_sends_the_newest_suffix_alone() -> None:
    with _passthrough(keep_task=False) as cm:
        cm.add_message("User", "Rename the config loader.")
        for i in range(30):
            _call(cm, i, f"result {i} " + "x" * 200)
        request = cm.compile(max_tokens=400, reserve_for_response=0)
        assert request.messages[0].text != "Rename the config loader."
        assert "task" not in request.render_stats


def test_text_that_cannot_fit_is_refused_with_a_diagnosis() -> None:
    with _passthrough() as cm:
        cm.add_message("User", "Summarise this.")
        cm.add_message("User", "word " * 2_000)  # plain text: nothing to cap
        with pytest.raises(OverBudgetError) as caught:
            cm.compile(max_tokens=600, reserve_for_response=100)
    error = caught.value
    assert error.actual > error.budget == 500
    assert "keep_task=False" in error.diagnostics["suggestion"]
    assert error.diagnostics["newest_tokens"] > 500


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 3_000), min_size=1, max_size=25),
    tools=st.lists(st.booleans(), min_size=25, max_size=25),
    budget=st.integers(150, 4_000),
    keep_task=st.booleans(),
)
def test_passthrough_sends_the_newest_turn_within_budget_or_refuses(
    sizes: list[int], tools: list[bool], budget: int, keep_task: bool
) -> None:
    """Whatever the history and budget: the request fits and holds the newest message
    (and the task, when kept), or the compile refuses with actual > budget; a request
    is never empty."""
    with _passthrough(keep_task=keep_task) as cm:
        task = cm.add_message("User", "the task")
        newest = task
        for i, (size, tool) in enumerate(zip(sizes, tools, strict=False)):
            if tool:
                _call(cm, i, "r" * (4 * size))
                newest = cm.get_messages()[-1].id
            else:
                newest = cm.add_message("Claude", "a" * (4 * size))
        try:
            request = cm.compile(max_tokens=budget, reserve_for_response=0)
        except OverBudgetError as error:
            assert error.actual > error.budget == budget
            return
        shown = [i for _, ids in request.provenance for i in ids]
        assert request.messages and shown[-1] == newest
        assert request.render_stats["request"]["total"] <= budget
        if keep_task:
            assert shown[0] == task
