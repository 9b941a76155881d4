"""Catch up instead of failing: ``compile()`` writes the memories a fit needs (by
default; ``catch_up=False`` refuses at once) and ``pending_work()``."""

from __future__ import annotations

import pytest

from context_manager import (
    ConfigError,
    ContextManager,
    OverBudgetError,
)
from context_manager.compiler import MAX_CATCH_UP_BATCH
from tests.support.small_agent import small_manager


class Clock:
    """A clock the test moves: each reading advances it by ``step`` seconds."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _manager(clock: Clock | None = None) -> ContextManager:
    return small_manager(**({"clock": clock} if clock is not None else {}))


def _backlog(cm: ContextManager, n: int = 80) -> None:
    """Messages added without a tick: compression falls behind."""
    for i in range(n):
        cm.add_message("User" if i % 2 else "Claude", f"Turn {i}: " + "details " * 20)


def test_a_compile_that_needs_compression_catches_up() -> None:
    with _manager() as cm:
        _backlog(cm)
        with pytest.raises(OverBudgetError):
            cm.compile(max_tokens=1_500, reserve_for_response=300, catch_up=False)
        assert cm.pending_work()  # the refused compile asked for memories
        request = cm.compile(max_tokens=1_500, reserve_for_response=300)  # catches up
        assert request.render_stats["tokens"] <= 1_200
        assert request.render_stats["summaries"]  # memories written on the way
        assert request.render_stats["catch_up"]["ticks"] > 0


def test_a_compile_that_fits_ticks_nothing() -> None:
    with _manager() as cm:
        _backlog(cm, 6)
        before = cm.pending_work()
        request = cm.compile(max_tokens=8_000, reserve_for_response=300)
        assert "catch_up" not in request.render_stats
        assert cm.pending_work() == before  # no memory written to send a context that fits


def test_a_dry_run_never_catches_up() -> None:
    with _manager() as cm:
        _backlog(cm)
        plan = cm.compile(max_tokens=1_500, reserve_for_response=300, dry_run=True)
        assert plan.render_stats["fits"] is False  # it says so rather than tick
        assert not plan.render_stats.get("summaries")
        assert cm.compile(max_tokens=1_500, reserve_for_response=300).render_stats["summaries"]


def test_catch_up_stops_when_no_work_is_left_and_says_so() -> None:
    with _manager() as cm:
        _backlog(cm)
        with pytest.raises(OverBudgetError) as info:
            cm.compile(max_tokens=320, reserve_for_response=100, catch_up=True)
        caught = info.value.diagnostics["catch_up"]
        assert caught["stopped"] == "no compression work is left"
        assert caught["ticks"] > 0
        assert cm.pending_work() == []


def test_catch_up_keeps_to_its_time() -> None:
    clock = Clock(step=1.0)  # every reading of the clock is a second later
    with _manager(clock) as cm:
        _backlog(cm)
        with pytest.raises(OverBudgetError) as info:
            cm.compile(max_tokens=1_500, reserve_for_response=300, catch_up=2.5)
        caught = info.value.diagnostics["catch_up"]
        assert caught["stopped"] == "the 2.5 s catch-up time is up"
        assert cm.pending_work()  # it stopped with work left


@pytest.mark.parametrize("bad", [-1, 0, float("nan"), float("inf"), "yes"])
def test_catch_up_must_be_a_flag_or_seconds(bad: object) -> None:
    with _manager() as cm, pytest.raises(ConfigError, match="catch_up"):
        cm.compile(max_tokens=1_500, catch_up=bad)  # type: ignore[arg-type]


def test_pending_work_names_what_tick_does_next() -> None:
    with _manager() as cm:
        _backlog(cm)
        with pytest.raises(OverBudgetError):
            cm.compile(max_tokens=1_500, reserve_for_response=300, catch_up=False)
        work = cm.pending_work()
        assert work[0].startswith("compress ")
        cm.drain()
        assert cm.pending_work() == [] and cm.is_ready()


def test_a_long_backlog_is_compiled_against_a_few_times_not_once_per_memory() -> None:
    """A catch-up ticks in batches sized by the deficit left: it writes at most one
    batch more than compiling after every tick does, and compiles far fewer times."""
    budget = {"max_tokens": 2_000, "reserve_for_response": 300}
    with _manager() as one_by_one, _manager() as batched:
        _backlog(one_by_one, 600)
        _backlog(batched, 600)
        fewest = 0
        while True:  # a compile after every tick, until one fits
            try:
                one_by_one.compile(**budget, catch_up=False)
                break
            except OverBudgetError:
                assert one_by_one.tick()
                fewest += 1
        strategy = batched.strategy
        attempts = []
        select = strategy.select
        strategy.select = lambda *a, **k: attempts.append(1) or select(*a, **k)  # type: ignore[method-assign]

        request = batched.compile(**budget)
        ticks = request.render_stats["catch_up"]["ticks"]
        assert fewest > 100  # a long backlog
        assert 0 < ticks <= fewest + MAX_CATCH_UP_BATCH
        assert request.render_stats["tokens"] <= 1_700
        assert len(attempts) * 5 < fewest  # not one compile per memory
