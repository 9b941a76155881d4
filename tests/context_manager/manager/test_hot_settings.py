"""The hot context settings: read and tuned on the live strategy, used by the next
compile, refused (naming the setting) where the strategy has none or does not support
one, and never persisted.

Expectations come from the messages as the test wrote them (counted with the manager's
counter) and the settings given, never from the call under test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from context_manager import (
    ArgumentError,
    ArgumentTypeError,
    CharsCounter,
    ConfigError,
    ContextManager,
    ExtractiveSummarizer,
    HotContextSettings,
    UnsupportedSettingError,
)
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from tests.support.extractive_agent import strategy

COUNTER = CharsCounter()
BUDGET = {"max_tokens": 900, "reserve_for_response": 100}


def folding(path: Path | str = ":memory:", **options: Any) -> ContextManager:
    return ContextManager.open(
        path=path,
        counter=COUNTER,
        strategy=strategy(recent_window_tokens=100, **options),
        summarizer=ExtractiveSummarizer(target_tokens=30),
    )


def talk(cm: ContextManager, n: int) -> None:
    for i in range(n):
        cm.add_message("User" if i % 2 == 0 else "Claude", " ".join(f"m{i}w{j}" for j in range(30)))


def tail(cm: ContextManager, limit: int) -> int:
    """The newest messages' tokens while they fit ``limit`` (the newest one always)."""
    sizes = [COUNTER.count_message(m.message) for m in cm.get_messages()]
    total = 0
    for k, size in enumerate(reversed(sizes)):
        if k and total + size > limit:
            break
        total += size
    return total


def test_the_tail_is_tuned_live_and_the_next_compile_uses_it() -> None:
    with folding() as cm:
        talk(cm, 40)
        cm.drain()
        live = cm.strategy
        assert cm.get_hot_context_settings() == HotContextSettings(tail_tokens=100)
        assert cm.compile(**BUDGET).render_stats["tail"]["tokens"] == tail(cm, 100)
        assert cm.update_hot_context_settings(tail_tokens=400) == HotContextSettings(400)
        # the same strategy object, tuned: nothing was rebuilt
        assert cm.strategy is live and isinstance(live, AutobiographicalStrategy)
        assert live.config.recent_window_tokens == 400
        assert cm.get_hot_context_settings() == HotContextSettings(tail_tokens=400)
        wide = cm.compile(**BUDGET)
        assert wide.render_stats["tail"]["tokens"] == tail(cm, 400) > tail(cm, 100)
        # a shorter tail lets more history fold once its memories are written
        cm.update_hot_context_settings(tail_tokens=40)
        cm.drain()
        narrow = cm.compile(**BUDGET)
        assert narrow.render_stats["tail"]["tokens"] == tail(cm, 40) < tail(cm, 100)
        # a setting left out keeps its value
        assert cm.update_hot_context_settings() == HotContextSettings(tail_tokens=40)


def test_the_settings_are_not_persisted(tmp_path: Path) -> None:
    where = tmp_path / "hot.db"
    with folding(where) as cm:
        talk(cm, 10)
        cm.update_hot_context_settings(tail_tokens=250)
    with folding(where) as cm:
        assert cm.get_hot_context_settings() == HotContextSettings(tail_tokens=100)


def test_a_preview_override_leaves_the_settings_alone() -> None:
    with folding() as cm:
        talk(cm, 20)
        cm.drain()
        cm.preview_context(overrides={"recent_window_tokens": 300}, **BUDGET)
        assert cm.get_hot_context_settings() == HotContextSettings(tail_tokens=100)


@pytest.mark.parametrize(
    ("kwargs", "kind", "param"),
    [
        ({"tail_tokens": -1}, ArgumentError, "tail_tokens"),
        ({"tail_tokens": 1.5}, ArgumentTypeError, "tail_tokens"),
        ({"tail_tokens": "400"}, ArgumentTypeError, "tail_tokens"),
        ({"transition_pace_tokens": -1}, ArgumentError, "transition_pace_tokens"),
        ({"prepared_window_tokens": True}, ArgumentTypeError, "prepared_window_tokens"),
    ],
)
def test_a_bad_value_is_refused_naming_the_setting(
    kwargs: dict[str, Any], kind: type, param: str
) -> None:
    with folding() as cm:
        with pytest.raises(kind) as info:
            cm.update_hot_context_settings(**kwargs)
        assert isinstance(info.value, ArgumentError) and info.value.param == param
        assert cm.get_hot_context_settings() == HotContextSettings(tail_tokens=100)


def test_a_tail_the_window_cannot_hold_is_refused_naming_the_setting() -> None:
    with ContextManager.open(
        path=":memory:",
        counter=COUNTER,
        summarizer=ExtractiveSummarizer(),
        window_tokens=8_000,
    ) as cm:
        before = cm.get_hot_context_settings()
        assert before is not None
        with pytest.raises(ConfigError, match="tail_tokens=7900") as info:
            cm.update_hot_context_settings(tail_tokens=7_900)
        assert "recent_window_tokens" in str(info.value)
        assert cm.get_hot_context_settings() == before


def test_a_prepared_window_brings_the_next_compile_under_it_while_the_wall_stays() -> None:
    with folding() as cm:
        talk(cm, 40)
        cm.drain()
        before = cm.compile(**BUDGET).render_stats["total"]["tokens"]
        assert before > 400
        settings = cm.update_hot_context_settings(prepared_window_tokens=400)
        assert settings == HotContextSettings(100, None, 400)
        s = cm.strategy
        assert isinstance(s, AutobiographicalStrategy)
        assert s.config.solver_options["goal_tokens"] == 400
        after = cm.compile(**BUDGET)  # the same budget: the wall is still 800
        assert after.render_stats["budget"] == 900 - 100
        assert after.render_stats["total"]["tokens"] <= 400
        # a pace, and both turned off again
        assert cm.update_hot_context_settings(transition_pace_tokens=300) == HotContextSettings(
            100, 300, 400
        )
        assert s.config.solver_options["reach_tokens"] == 300
        assert s.config.solver_options["strict_reach"] is True
        off = cm.update_hot_context_settings(transition_pace_tokens=0, prepared_window_tokens=0)
        assert off == HotContextSettings(tail_tokens=100)
        assert not {"goal_tokens", "reach_tokens", "strict_reach"} & set(s.config.solver_options)


@pytest.mark.parametrize("setting", ["transition_pace_tokens", "prepared_window_tokens"])
def test_the_transition_settings_need_the_kv_stable_solver(setting: str) -> None:
    with folding(solver="oldest-first") as cm:
        with pytest.raises(UnsupportedSettingError, match="kv-stable") as info:
            cm.update_hot_context_settings(tail_tokens=300, **{setting: 5_000})
        assert info.value.setting == setting
        # nothing changed, the tail given beside it included
        assert cm.get_hot_context_settings() == HotContextSettings(tail_tokens=100)


def test_the_passthrough_strategy_has_no_settings_and_refuses_them() -> None:
    with ContextManager.open(path=":memory:", counter=COUNTER) as cm:
        cm.add_message("User", "hi")
        assert cm.get_hot_context_settings() is None
        with pytest.raises(UnsupportedSettingError, match="no hot context settings") as info:
            cm.update_hot_context_settings(tail_tokens=100)
        assert info.value.setting == "tail_tokens"
        assert isinstance(info.value, ConfigError)
