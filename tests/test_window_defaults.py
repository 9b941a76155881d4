"""Options sized for a window, and described fields."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
from context_manager.messages import ToolResultBlock, ToolUseBlock
from context_manager.strategies.autobiographical import (
    AutobiographicalConfig,
    AutobiographicalStrategy,
)

WINDOWS = [4_000, 8_000, 32_000, 200_000, 1_000_000]


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
    assert sum(config.solver[1].get("level_budgets", ())) <= budget
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


def test_for_window_keeps_overrides_and_names_what_does_not_fit() -> None:
    config = AutobiographicalConfig.for_window(
        32_000, recent_window_tokens=5_000, folding_strategy="kv-unified"
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
