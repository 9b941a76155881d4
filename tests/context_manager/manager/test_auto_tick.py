"""``auto_tick``: compression on a background thread, stopped by ``close()``."""

from __future__ import annotations

import threading

import pytest

from context_manager import (
    CharsCounter,
    ContextManager,
    ContextManagerError,
)
from context_manager.strategies.base import StrategyContext
from context_manager.strategies.passthrough import PassthroughStrategy
from tests.support.small_agent import small_manager

WAIT = 120.0  # seconds a test waits at most for the worker: a hang fails, never flakes


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "auto-tick"]


def test_compression_runs_in_the_background_until_no_work_is_left() -> None:
    with small_manager(auto_tick=True) as cm:
        for i in range(80):
            cm.add_message("User" if i % 2 else "Claude", f"Turn {i}: " + "details " * 20)
        assert cm.wait_for_ticks(WAIT)
        assert cm.pending_work() == []
        request = cm.compile(max_tokens=1_500, reserve_for_response=300)
        assert request.render_stats["summaries"]  # memories written by the worker
        assert request.render_stats["tokens"] <= 1_200
    assert _workers() == []  # close() stopped it


def test_without_auto_tick_nothing_runs_in_the_background() -> None:
    with small_manager() as cm:
        for i in range(40):
            cm.add_message("User", f"Turn {i}: " + "details " * 20)
        assert _workers() == []
        assert cm.wait_for_ticks(0.0)
        assert cm.pending_work()  # queued, waiting for the host's ticks


class _Broken(PassthroughStrategy):
    def tick(self, ctx: StrategyContext) -> bool:
        raise RuntimeError("the disk is gone")


def test_a_worker_that_fails_says_so() -> None:
    with ContextManager.open(
        path=":memory:", strategy=_Broken(), counter=CharsCounter(), auto_tick=True
    ) as cm:
        cm.add_message("User", "hello")
        with pytest.raises(ContextManagerError, match="the disk is gone"):
            cm.wait_for_ticks(WAIT)
