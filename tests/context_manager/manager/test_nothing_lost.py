"""Nothing lost, nothing stalls: removals, failed writes, managers sharing a store, threads."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from context_manager import (
    CharsCounter,
    ConfigError,
    ContextManager,
    ExtractiveSummarizer,
    PassthroughStrategy,
    StoreFullError,
)
from context_manager.deadline import MAX_ABANDONED
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from context_manager.strategies.base import StoredMessage, StrategyContext
from context_manager.summarizer import Completion, CompletionRequest
from tests.support.extractive_agent import (
    open_extractive,
    records_agree_with_messages,
    strategy,
    threaded_run,
)

COUNTER = CharsCounter()


def _talk(cm: ContextManager, n: int, tag: str = "m") -> list[str]:
    return [
        cm.add_message(
            "User" if i % 2 == 0 else "Claude", " ".join(f"{tag}{i}w{j}" for j in range(30))
        )
        for i in range(n)
    ]


def compression_is_done(cm: ContextManager) -> None:
    """After a drain with a working summariser and no holdback: every chunk is remembered."""
    s = cm.strategy
    assert isinstance(s, AutobiographicalStrategy)
    assert not s.failed_closed
    assert [c.id for c in s.chunks if not c.compressed] == []
    assert cm.is_ready()


# ------------------------------------------------------------------ removals
def test_removing_most_of_the_first_chunks_keeps_compression_moving(tmp_path: Path) -> None:
    path = tmp_path / "cm.db"
    cm = open_extractive(path)
    _talk(cm, 40)
    cm.drain()
    s = cm.strategy
    assert isinstance(s, AutobiographicalStrategy)
    first_chunks = [c.source_ids for c in s.chunks[:4]]
    assert len(first_chunks) == 4
    for ids in first_chunks:
        for i in ids[:-1] if len(ids) > 1 else ids:
            cm.remove_message(i)
    records_agree_with_messages(cm)
    _talk(cm, 60, tag="n")
    cm.drain()
    records_agree_with_messages(cm)
    compression_is_done(cm)
    assert cm.compile(max_tokens=2000, reserve_for_response=0).render_stats["tokens"] <= 2000
    cm.close()
    cm = open_extractive(path)  # and after reopening
    records_agree_with_messages(cm)
    _talk(cm, 20, tag="r")
    cm.drain()
    compression_is_done(cm)
    assert cm.compile(max_tokens=2000, reserve_for_response=0).render_stats["tokens"] <= 2000
    cm.close()


def test_a_memory_over_a_removed_message_is_dropped_and_its_chunk_remembered_again() -> None:
    cm = open_extractive(":memory:", strategy(recent_window_tokens=100, merge_threshold=2))
    _talk(cm, 40)
    cm.drain()
    s = cm.strategy
    assert isinstance(s, AutobiographicalStrategy)
    chunk = s.chunks[1]
    old_memory = chunk.summary_id
    assert old_memory is not None
    parents = {m.parent_id for m in s.summaries.values() if m.id == old_memory}
    cm.remove_message(chunk.source_ids[0])
    assert old_memory not in s.summaries
    assert not parents.intersection(s.summaries)  # every memory above it went too
    records_agree_with_messages(cm)
    cm.drain()
    records_agree_with_messages(cm)
    compression_is_done(cm)
    again = next(c for c in s.chunks if c.id == chunk.id)
    assert again.source_ids == chunk.source_ids[1:] and again.summary_id != old_memory


def test_removing_a_whole_chunk_retires_it_and_chunk_ids_are_not_reused() -> None:
    cm = open_extractive(":memory:")
    _talk(cm, 30)
    cm.drain()
    s = cm.strategy
    assert isinstance(s, AutobiographicalStrategy)
    before = [c.id for c in s.chunks]
    for i in list(s.chunks[-1].source_ids):
        cm.remove_message(i)
    assert before[-1] not in [c.id for c in s.chunks]
    _talk(cm, 30, tag="n")
    cm.drain()
    assert before[-1] not in [c.id for c in s.chunks]  # a new chunk takes a new id
    records_agree_with_messages(cm)
    compression_is_done(cm)


# --------------------------------------------------------- all-or-nothing
def test_an_invalid_hold_is_refused_before_anything_is_written() -> None:
    cm = open_extractive(":memory:")
    _talk(cm, 3)
    for hold in (-1.0, 0, float("nan"), float("inf"), "soon"):
        with pytest.raises(ConfigError, match="hold"):
            cm.add_message("User", "held", hold=hold)  # type: ignore[arg-type]
    assert len(cm.get_messages()) == 3


class _FailsOnTheNthMessage(AutobiographicalStrategy):
    """Raises while recording the ``n``-th message, as a full disk would."""

    fail_at = 0

    def on_new_message(self, ctx: StrategyContext, message: StoredMessage) -> None:
        super().on_new_message(ctx, message)
        if len(ctx.messages()) == self.fail_at:
            raise OSError("no space left on device")


def test_a_failed_add_message_stores_nothing(tmp_path: Path) -> None:
    s = _FailsOnTheNthMessage(**strategy(recent_window_tokens=100).config.model_dump())
    s.fail_at = 25
    path = tmp_path / "cm.db"
    cm = open_extractive(path, s)
    ids = _talk(cm, 24)
    chunks = [c.id for c in s.chunks]
    with pytest.raises(OSError):
        cm.add_message("User", " ".join(f"x{j}" for j in range(200)))
    assert [m.id for m in cm.get_messages()] == ids  # a retry cannot duplicate it
    assert [c.id for c in s.chunks] == chunks
    s.fail_at = 0
    cm.add_message("User", "after")
    cm.close()
    cm = open_extractive(path)
    assert [m.id for m in cm.get_messages()][:-1] == ids
    records_agree_with_messages(cm)
    cm.close()


# ------------------------------------------------------ managers, threads
def _beside(a: ContextManager) -> ContextManager:
    """A second manager on ``a``'s store (another namespace, the same messages)."""
    return ContextManager(
        a.store,
        owns_store=False,
        strategy=PassthroughStrategy(),
        summarizer=None,
        counter=COUNTER,
        namespace="other",
        isolate=False,
        clock=lambda: 0.0,
    )


def test_a_second_manager_on_the_same_store_sees_the_first_ones_messages() -> None:
    a = open_extractive(":memory:", PassthroughStrategy())
    b = _beside(a)
    a.add_message("User", "one")
    assert [m.message.text for m in b.get_messages()] == ["one"]
    a.add_message("Claude", "two")  # after b's first read
    assert [m.message.text for m in b.get_messages()] == ["one", "two"]
    b.add_message("User", "three")
    assert [m.message.text for m in a.get_messages()] == ["one", "two", "three"]
    assert [m.text for m in a.compile(max_tokens=1000, reserve_for_response=0).messages] == [
        "one",
        "two",
        "three",
    ]


def test_threads_sharing_a_manager_lose_nothing(tmp_path: Path) -> None:
    assert threaded_run(tmp_path / "cm.db", threads=8, per_thread=150) == (1200, 1200)


# ------------------------------------------------------ transient trouble
class Flaky:
    """The extractive summariser behind a switchable fault: ``"error"`` (the provider
    says so), ``"raise"``, ``"hang"`` (until :attr:`release` is set), ``"refuse"``."""

    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer(target_tokens=30)
        self.fault: str | None = None
        self.release = threading.Event()
        self.timeouts: list[float | None] = []

    def complete(self, request: CompletionRequest) -> Completion:
        self.timeouts.append(request.timeout)
        if self.fault == "error":
            return Completion(text="", stop_reason="error")
        if self.fault == "raise":
            raise ConnectionError("provider unreachable")
        if self.fault == "refuse":
            return Completion(text="I cannot help with that.", stop_reason="refusal")
        if self.fault == "hang":
            self.release.wait()
        return self.inner.complete(request)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _flaky(**extra: object) -> tuple[ContextManager, Flaky, Clock]:
    summarizer, clock = Flaky(), Clock()
    cm = ContextManager.open(
        path=":memory:",
        strategy=strategy(recent_window_tokens=100, **extra),
        summarizer=summarizer,
        counter=COUNTER,
        clock=clock,
    )
    return cm, summarizer, clock


@pytest.mark.parametrize("fault", ["error", "raise"])
def test_a_provider_outage_is_not_a_verdict(fault: str) -> None:
    cm, summarizer, clock = _flaky()
    _talk(cm, 40)
    summarizer.fault = fault
    for _ in range(12):  # an outage of twelve ticks
        cm.tick()
        clock.now += 5
    s = cm.strategy
    assert isinstance(s, AutobiographicalStrategy)
    assert s.chunk_attempts == {}  # nothing counted toward the attempt limit
    cm.drain()  # each chunk not tried yet fails once more
    assert cm.drain() == 0  # now every chunk is backing off: drain stops at once
    summarizer.fault = None
    clock.now += 3600
    assert cm.drain() > 0
    compression_is_done(cm)
    records_agree_with_messages(cm)


def test_every_summariser_call_carries_the_deadline() -> None:
    cm, summarizer, _ = _flaky(summary_timeout_seconds=42.5)
    _talk(cm, 30)
    cm.drain()
    assert summarizer.timeouts and set(summarizer.timeouts) == {42.5}


def test_a_hung_summariser_is_abandoned_at_the_deadline_on_a_bounded_number_of_threads() -> None:
    cm, summarizer, clock = _flaky(summary_timeout_seconds=0.05)
    _talk(cm, 40)
    summarizer.fault = "hang"
    before = threading.active_count()
    assert cm.tick()  # returns at the deadline: the call is abandoned, not awaited
    for _ in range(3 * MAX_ABANDONED):
        clock.now += 3600
        cm.tick()  # each hung call costs a thread, up to the bound; then nothing is started
    assert threading.active_count() <= before + MAX_ABANDONED
    assert len(summarizer.timeouts) == MAX_ABANDONED
    summarizer.fault = None
    summarizer.release.set()
    s = cm.strategy
    assert isinstance(s, AutobiographicalStrategy)
    while s.state.caller.abandoned:  # the abandoned calls return once released
        summarizer.release.wait(0.01)
    clock.now += 3600
    cm.drain()
    compression_is_done(cm)
    assert s.chunk_attempts == {}


def test_a_call_that_never_returns_does_not_stop_later_work() -> None:
    """One call hangs for good; the provider answers every later call: compression goes
    on on a fresh worker and every chunk is remembered."""
    cm, summarizer, clock = _flaky(summary_timeout_seconds=0.05)
    _talk(cm, 40)
    summarizer.fault = "hang"
    try:
        assert cm.tick()  # abandoned at the deadline, and never released below
        summarizer.fault = None
        s = cm.strategy
        assert isinstance(s, AutobiographicalStrategy)
        assert s.state.caller.abandoned == 1
        clock.now += 3600
        cm.drain()
        compression_is_done(cm)
        assert s.state.caller.abandoned == 1  # still hung, and nothing waited for it
    finally:
        summarizer.release.set()


def test_work_given_up_on_can_be_retried() -> None:
    cm, summarizer, _ = _flaky(chunk_attempt_limit=2, compression_refusal_curve_fallbacks=0)
    _talk(cm, 30)
    summarizer.fault = "refuse"
    cm.drain()
    s = cm.strategy
    assert isinstance(s, AutobiographicalStrategy)
    given_up = [c.id for c in s.chunks if not c.compressed]
    assert given_up and cm.is_ready()  # refusals are verdicts: the chunks stay raw
    summarizer.fault = None
    assert cm.drain() == 0
    assert cm.retry_compression() >= len(given_up)
    assert cm.drain() > 0
    compression_is_done(cm)


def test_a_merge_whose_write_fails_leaves_memory_and_store_agreeing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cm = open_extractive(":memory:", strategy(recent_window_tokens=100, merge_threshold=2))
    _talk(cm, 12)
    s = cm.strategy
    assert isinstance(s, AutobiographicalStrategy)
    while not cm.is_ready() and not s.merge_groups(cm._ctx):
        cm.tick()
    assert s.merge_groups(cm._ctx), "a merge is due"
    store = cm.store
    edit = store.edit

    def full(slot: str, item_id: str, body: object) -> None:
        if slot.endswith("autobio:summaries"):  # the children's parent pointers
            raise StoreFullError(f"{store.path}: the disk is full")
        edit(slot, item_id, body)

    monkeypatch.setattr(store, "edit", full)
    before = {m.id for m in s.summaries.values()}
    with pytest.raises(StoreFullError):
        while True:
            cm.tick()
    s = cm.strategy
    assert isinstance(s, AutobiographicalStrategy)
    assert all(m.parent_id is None or m.parent_id in s.summaries for m in s.summaries.values())
    assert {m.id for m in s.summaries.values() if m.level == 1} >= {
        i for i in before if i.startswith("L1")
    }
    records_agree_with_messages(cm)
    monkeypatch.setattr(store, "edit", edit)
    cm.drain()
    assert any(m.level == 2 for m in s.summaries.values())
    records_agree_with_messages(cm)


def test_a_removal_through_another_manager_is_followed() -> None:
    a = open_extractive(":memory:")
    _talk(a, 30)
    a.drain()
    s = a.strategy
    assert isinstance(s, AutobiographicalStrategy)
    chunk = s.chunks[0]
    b = _beside(a)
    b.remove_message(chunk.source_ids[1])  # a's strategy does not hear of it
    a.drain()  # but a follows the store, and its records follow the removal
    s = a.strategy
    assert isinstance(s, AutobiographicalStrategy)
    records_agree_with_messages(a)
    compression_is_done(a)
