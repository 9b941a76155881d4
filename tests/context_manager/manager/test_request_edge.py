"""The request edge: the whole request priced once, tool pairs whole, true stats, typed refusals.

The stateful machine of :mod:`tests.support.request_machine` runs here derandomised with a
fixed example count, so a bug it can find fails every run; ``make soak`` runs it long.
"""

from __future__ import annotations

from hypothesis import settings

from tests.support.request_machine import RequestMachine

RequestMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, derandomize=True, database=None, deadline=None
)
TestRequestMachine = RequestMachine.TestCase


# ------------------------------------------------------------------ the repros
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from context_manager import (  # noqa: E402
    CharsCounter,
    ConfigError,
    ConstraintConflictError,
    ContextManager,
    ExtractiveSummarizer,
    Injection,
    OverBudgetError,
    Overhead,
    PassthroughStrategy,
    ToolResultBlock,
    ToolUseBlock,
    tool_pair_problems,
)
from context_manager.pairing import PLACEHOLDER  # noqa: E402
from context_manager.strategies.autobiographical import AutobiographicalStrategy  # noqa: E402
from tests.support.extractive_agent import strategy  # noqa: E402
from tests.support.request_machine import recount  # noqa: E402

COUNTER = CharsCounter()


def _autobio(**extra: object) -> AutobiographicalStrategy:
    return strategy(**{"recent_window_tokens": 100, **extra})


def _open(strategy: object) -> ContextManager:
    return ContextManager.open(
        path=":memory:",
        strategy=strategy,  # type: ignore[arg-type]
        summarizer=ExtractiveSummarizer(target_tokens=30),
        counter=COUNTER,
    )


def _talk(cm: ContextManager, n: int, words: int = 30) -> list[str]:
    return [
        cm.add_message(
            "User" if i % 2 == 0 else "Claude", " ".join(f"m{i}w{j}" for j in range(words))
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("make", [PassthroughStrategy, _autobio], ids=["passthrough", "autobio"])
def test_a_placeholder_result_is_priced_before_it_is_sent(make: object) -> None:
    cm = _open(make())  # type: ignore[operator]
    _talk(cm, 6, words=5)
    cm.add_message("Claude", [ToolUseBlock(id="t1", name="bash", input={"cmd": "ls"})])
    cm.add_message("Claude", "the call above was never answered")
    result = cm.compile(max_tokens=102, reserve_for_response=0, overhead=Overhead())
    assert PLACEHOLDER in json.dumps([m.model_dump(mode="json") for m in result.messages])
    assert recount(result, 0) == result.render_stats["tokens"] <= 102
    assert tool_pair_problems(result.messages) == []


def test_injections_are_inside_the_budget() -> None:
    cm = _open(_autobio())
    _talk(cm, 60)
    cm.drain()
    note = Injection.text("mem", "after_user", "note " * 400)
    result = cm.compile(max_tokens=1500, reserve_for_response=0, injections=[note])
    assert recount(result, 0) == result.render_stats["tokens"] <= 1500
    assert result.render_stats["request"]["injections"] == COUNTER.count_message(
        result.messages[[m.participant for m in result.messages].index("system_context:mem")]
    )


def test_the_overhead_is_priced_and_named_when_it_alone_does_not_fit() -> None:
    cm = _open(_autobio())
    _talk(cm, 4)
    cm.set_system_prompt("rule " * 100)
    cm.set_tool_definitions([{"name": "bash", "input_schema": {"type": "object"}}])
    result = cm.compile(max_tokens=2000, reserve_for_response=0)
    request = result.render_stats["request"]
    assert request["system"] > 100 and request["tools"] > 0
    assert recount(result, 0) == request["total"] == result.render_stats["tokens"]
    assert result.system_prompt == "rule " * 100 and result.tools[0]["name"] == "bash"
    with pytest.raises(OverBudgetError, match="request overhead") as caught:
        cm.compile(max_tokens=100, reserve_for_response=0)
    assert caught.value.diagnostics["system_tokens"] == request["system"]
    assert cm.compile(max_tokens=400, reserve_for_response=0, overhead=Overhead()).messages


def test_a_lock_inside_a_folded_chunk_keeps_it_folded() -> None:
    cm = _open(_autobio())
    ids = _talk(cm, 30)
    cm.drain()
    first = cm.compile(max_tokens=600, reserve_for_response=0)
    folded = first.render_stats["summaries"]
    assert folded  # some chunks are shown as memories
    shown = {m.text for m in first.messages}
    strategy = cm.strategy
    assert isinstance(strategy, AutobiographicalStrategy)
    inside = next(
        i for s in strategy.summaries.values() if s.content in shown for i in strategy.leaves_of(s)
    )
    assert inside in ids
    cm.lock_message(inside)
    second = cm.compile(max_tokens=600, reserve_for_response=0)
    assert second.messages == first.messages  # still folded: nothing re-read
    assert (
        second.render_stats["kv_cost"] == 0
        and second.render_stats["tokens"] == first.render_stats["tokens"]
    )


def test_conflicting_pins_are_a_typed_conflict_not_an_overshoot() -> None:
    cm = _open(_autobio())
    ids = _talk(cm, 30)
    cm.drain()
    cm.compile(max_tokens=600, reserve_for_response=0)
    strategy = cm.strategy
    assert isinstance(strategy, AutobiographicalStrategy)
    l2 = next(s for s in strategy.summaries.values() if s.level == 2)
    inside = strategy.leaves_of(l2)[0]
    raw = cm.pin_range(inside, inside)
    deep = cm.pin_range(inside, inside, level=2)
    with pytest.raises(ConstraintConflictError) as caught:
        cm.compile(max_tokens=600, reserve_for_response=0)
    (conflict,) = caught.value.conflicts
    assert conflict["message"] == inside
    assert any(c.startswith(raw) for c in conflict["constraints"])
    assert any(c.startswith(deep) and "level=2" in c for c in conflict["constraints"])
    cm.unpin(raw)
    assert cm.compile(max_tokens=600, reserve_for_response=0).messages
    assert ids


def _sent_raw(cm: ContextManager, message_id: str, budget: int) -> bool:
    text = cm.get_message(message_id).text
    request = cm.compile(max_tokens=budget, reserve_for_response=0)
    return any(m.text == text for m in request.messages)


def _folded_into_an_l2() -> tuple[ContextManager, list[str]]:
    """A manager whose history folded at least to L2 under a small budget, and the
    messages one L2 stands for."""
    cm = _open(_autobio())
    _talk(cm, 30)
    cm.drain()
    cm.compile(max_tokens=600, reserve_for_response=0)
    strategy = cm.strategy
    assert isinstance(strategy, AutobiographicalStrategy)
    l2 = next(s for s in strategy.summaries.values() if s.level == 2)
    return cm, strategy.leaves_of(l2)


def test_a_hold_inside_a_level_pin_is_sent_raw_while_it_lasts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cm, leaves = _folded_into_an_l2()
    first, inside = leaves[0], leaves[len(leaves) // 2]
    pin = cm.pin_range(first, leaves[-1], level=2)
    assert not _sent_raw(cm, inside, 100_000)  # folded to level 2, as pinned
    cm.hold_compression([inside])
    with caplog.at_level("WARNING"):
        for _ in range(3):  # the hold wins on every compile, logged once
            assert _sent_raw(cm, inside, 100_000)
    said = [r.getMessage() for r in caplog.records if "while the hold lasts" in r.getMessage()]
    assert len(said) == 1 and pin in said[0]
    cm.release_compression([inside])
    assert not _sent_raw(cm, inside, 100_000)  # the pin holds again


def test_a_hold_on_a_locked_folded_message_is_sent_raw_while_it_lasts() -> None:
    cm, leaves = _folded_into_an_l2()
    inside = leaves[0]
    cm.compile(max_tokens=600, reserve_for_response=0)
    assert not _sent_raw(cm, inside, 600)
    cm.lock_message(inside)
    assert not _sent_raw(cm, inside, 600)  # locked at the level it was folded to
    cm.hold_compression([inside])
    assert _sent_raw(cm, inside, 100_000)
    cm.release_compression([inside])
    assert cm.compile(max_tokens=600, reserve_for_response=0).messages


def test_a_refusal_over_budget_always_exceeds_it() -> None:
    cm = _open(_autobio(recent_window_tokens=400))
    _talk(cm, 20)
    with pytest.raises(OverBudgetError) as caught:
        cm.compile(max_tokens=200, reserve_for_response=0)
    assert caught.value.actual > caught.value.budget == 200


def test_kv_unified_without_a_policy_fails_at_construction() -> None:
    with pytest.raises(ConfigError, match=r"'policy' is required.*reference"):
        _autobio(solver="kv-unified")


def test_a_result_and_its_call_are_one_leaf(tmp_path: Path) -> None:
    cm = _open(_autobio(recent_window_tokens=0, target_chunk_tokens=10_000))
    _talk(cm, 4)
    call = cm.add_message("Claude", [ToolUseBlock(id="t1", name="bash", input={})])
    answer = cm.add_message("User", [ToolResultBlock(tool_use_id="t1", content="done")])
    _talk(cm, 2)
    cm.pin_range(answer, answer)  # a pin on the answer covers its call
    strategy = cm.strategy
    assert isinstance(strategy, AutobiographicalStrategy)
    from context_manager.adapter import state_problem
    from context_manager.strategies.base import RequestBudget

    stated = state_problem(strategy.snapshot(cm._ctx, cm.get_messages(), RequestBudget(10_000)))
    assert stated.spans[call][1] - stated.spans[call][0] == 2
    assert answer not in stated.spans
    assert stated.problem.pins[0].leaves == (call,)


def test_the_adapter_states_merge_runs_of_the_message_problem() -> None:
    """The adapter's one-pass reduction (pairs and chunks as leaves) is
    ``folding.merge_runs`` of the problem with one leaf per message."""
    from dataclasses import replace

    from context_manager.adapter import state_problem
    from context_manager.strategies.base import RequestBudget
    from folding import merge_runs

    cm = _open(_autobio())
    _talk(cm, 20)
    for k in range(4):  # tool pairs, inside chunks and in the tail
        cm.add_message("Claude", [ToolUseBlock(id=f"t{k}", name="bash", input={"k": k})])
        cm.add_message("User", [ToolResultBlock(tool_use_id=f"t{k}", content="out " * 20)])
        _talk(cm, 3)
    cm.drain()
    cm.compile(max_tokens=1000, reserve_for_response=0)  # a previous frontier to carry
    ids = [m.id for m in cm.get_messages()]
    cm.pin_range(ids[3], ids[4])
    strategy = cm.strategy
    assert isinstance(strategy, AutobiographicalStrategy)
    snap = strategy.snapshot(cm._ctx, cm.get_messages(), RequestBudget(1000))
    reduced = state_problem(snap)
    whole = state_problem(replace(snap, tied=[False] * len(snap.ids), chunks=()))
    runs = [(a, b) for a, b in reduced.spans.values() if b - a > 1]
    assert runs and any(b - a > 2 for a, b in runs)  # pairs and whole chunks
    merged, inverse = merge_runs(whole.problem, runs)
    assert inverse.frontier({name_: 0 for name_ in inverse.members}) == {
        m.id: 0 for m in whole.problem.leaves
    }
    name = {ids[reduced.spans[leaf.id][0]]: leaf.id for leaf in reduced.problem.leaves}
    ours = reduced.problem
    assert [name[x.id] for x in merged.leaves] == [x.id for x in ours.leaves]
    assert [(x.tokens, x.zone) for x in merged.leaves] == [(x.tokens, x.zone) for x in ours.leaves]
    assert [
        (s.id, s.tokens, tuple(name.get(c, c) for c in s.children)) for s in merged.summaries
    ] == [(s.id, s.tokens, s.children) for s in ours.summaries]
    assert [tuple(name[x] for x in p.leaves) for p in merged.pins] == [p.leaves for p in ours.pins]
    assert ours.previous_frontier() and ours.summaries  # something is folded and carried
    assert {name[k]: v for k, v in (merged.previous or {}).items() if v} == ours.previous_frontier()


def test_removing_the_first_message_of_a_memory_does_not_stop_compression() -> None:
    cm = _open(_autobio(merge_threshold=2))
    _talk(cm, 30)
    cm.drain()
    strategy = cm.strategy
    assert isinstance(strategy, AutobiographicalStrategy)
    first = min(strategy.summaries.values(), key=lambda s: int(s.first)).first
    cm.remove_message(first)
    _talk(cm, 20)
    assert cm.drain() > 0  # no KeyError from the ladder or a merge: work goes on
    assert cm.compile(max_tokens=800, reserve_for_response=0).messages
