"""The windowed compile: what a compile states follows the frontier, not the history.

A memory the last frontier showed through memories only is stated as a block of its
memories (``fold_window``); these tests hold that the stated problem stays small as
history grows, that a strategy with its kept state compiles exactly what one that just
read the store compiles, and that without the window the whole history is stated.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import solvers
from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer, OverBudgetError
from tests.support.extractive_agent import strategy
from tests.support.long_history import LongHistory, long_past_store
from tests.support.request_machine import COUNTER as MACHINE_COUNTER
from tests.support.request_machine import TALLY, FaultySummarizer, machine_strategy

COUNTER = CharsCounter()
BUDGET = 1500


def _open(path: Path, **extra: object) -> ContextManager:
    cm = ContextManager.open(
        path=path,
        strategy=strategy(**extra),
        summarizer=ExtractiveSummarizer(target_tokens=30),
        counter=COUNTER,
    )
    cm.set_tool_definitions([{"name": "bash"}])
    return cm


def _compile(cm: ContextManager) -> dict[str, object]:
    try:
        result = cm.compile(max_tokens=BUDGET, reserve_for_response=0)
    except OverBudgetError:
        cm.drain()
        result = cm.compile(max_tokens=BUDGET, reserve_for_response=0)
    return result.render_stats


def _grow(cm: ContextManager, start: int, count: int, every: int = 10) -> None:
    for i in range(start, start + count):
        cm.add_message("User" if i % 2 == 0 else "Claude", " ".join(f"m{i}w{j}" for j in range(12)))
        if (i + 1) % every == 0:
            cm.drain()
            _compile(cm)


def test_the_stated_problem_stays_small_as_history_grows(tmp_path: Path) -> None:
    cm = _open(tmp_path / "s.db")
    sizes = {}
    at = 0
    for n in (300, 1200, 2400):
        _grow(cm, at, n - at)
        at = n
        stats = _compile(cm)
        sizes[n] = stats["stated"]
    assert sizes[2400]["blocks"] > 0
    # eight times the history, about the same problem
    assert max(x["leaves"] for x in sizes.values()) <= 2 * sizes[300]["leaves"]
    assert sizes[2400]["leaves"] < 2400 / 20


def test_without_the_window_every_message_is_stated(tmp_path: Path) -> None:
    cm = _open(tmp_path / "s.db", fold_window=False)
    _grow(cm, 0, 400)
    stats = _compile(cm)
    assert stats["stated"]["blocks"] == 0
    assert stats["stated"]["leaves"] >= 400 / 12  # at most one leaf per chunk in the middle


def test_the_threshold_pyramid_sees_the_whole_history(tmp_path: Path) -> None:
    """The window follows the solver a compile runs: with ``adaptive_resolution`` off it
    is the pyramid (not ``solver``), so nothing is stated as a block, and a
    repeated compile sends the same bytes."""
    cm = _open(tmp_path / "s.db", adaptive_resolution=False)
    _grow(cm, 0, 600)
    stats = _compile(cm)
    assert stats["stated"]["blocks"] == 0
    first = cm.compile(max_tokens=BUDGET, reserve_for_response=0)
    again = cm.compile(max_tokens=BUDGET, reserve_for_response=0)
    assert again.messages == first.messages


@pytest.mark.parametrize("window", [True, False])
def test_a_reopened_strategy_compiles_the_same_request(tmp_path: Path, window: bool) -> None:
    path = tmp_path / "s.db"
    cm = _open(path, fold_window=window)
    _grow(cm, 0, 500)
    kept = []
    for i in range(500, 540):  # the agent loop: append, tick, compile
        cm.add_message("User" if i % 2 == 0 else "Claude", f"turn {i} " * 8)
        cm.tick()
        _compile(cm)
    result = cm.compile(max_tokens=BUDGET, reserve_for_response=0, dry_run=True)
    kept = [result.messages, result.render_stats["tokens"], result.render_stats["stated"]]
    cm.close()
    again = _open(path, fold_window=window)
    fresh = again.compile(max_tokens=BUDGET, reserve_for_response=0, dry_run=True)
    assert [fresh.messages, fresh.render_stats["tokens"], fresh.render_stats["stated"]] == kept
    assert (fresh.render_stats["stated"]["blocks"] > 0) is window


def test_a_window_never_hides_a_pinned_or_locked_message(tmp_path: Path) -> None:
    cm = _open(tmp_path / "s.db")
    _grow(cm, 0, 600)
    ids = [m.id for m in cm.get_messages()]
    before = _compile(cm)["stated"]
    cm.pin_range(ids[40], ids[41])
    cm.lock_message(ids[120])
    result = cm.compile(max_tokens=BUDGET, reserve_for_response=0)
    texts = " ".join(str(m.content) for m in result.messages)
    assert "m40w0" in texts and "m41w0" in texts  # the pinned messages, raw
    assert result.render_stats["stated"]["leaves"] > before["leaves"]


# ------------------------------------------------- the differential machine
LongHistory.TestCase.settings = settings(
    max_examples=12, stateful_step_count=25, derandomize=True, database=None, deadline=None
)
TestLongHistory = LongHistory.TestCase


def test_a_window_that_comes_back_answers_as_following_it_to_the_last_round_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Following a windowed answer's blocks can come back to blocks solved already (a
    cycle): the compile then reads the last round's answer from the solves made. On an
    agent with a long past whose compiles do cycle, every compile is solved again with
    every round made, and gives the same plan."""
    from context_manager.strategies.autobiographical import solve as solving

    solve, repeated = solving._solve, solving._repeated
    cycles = [0]

    def counted(*args: object) -> object:
        found = repeated(*args)  # type: ignore[arg-type]
        cycles[0] += found is not None
        return found

    def both(*args: object, **kwargs: object) -> object:
        fast = solve(*args, **kwargs)  # type: ignore[arg-type]
        monkeypatch.setattr(solving, "_repeated", lambda *_: None)
        try:
            every = solve(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            monkeypatch.setattr(solving, "_repeated", counted)
        (plan, snap, _), (other, other_snap, _) = fast, every  # type: ignore[misc]
        assert (plan.levels, plan.stats, repr(plan.error), plan.produce) == (
            other.levels,
            other.stats,
            repr(other.error),
            other.produce,
        )
        assert snap.blocks == other_snap.blocks
        return fast

    monkeypatch.setattr(solving, "_solve", both)
    monkeypatch.setattr(solving, "_repeated", counted)
    path = tmp_path / "s.db"
    shutil.copyfile(long_past_store("kv-stable"), path)
    cm = ContextManager.open(
        path=path,
        strategy=machine_strategy("kv-stable"),
        summarizer=FaultySummarizer(),
        counter=MACHINE_COUNTER,
    )
    cm.set_tool_definitions([{"name": "bash"}])
    for i in range(900, 980):
        cm.add_message("User" if i % 2 == 0 else "Claude", f"turn {i} " + "word " * (i % 23))
        cm.tick()
        with contextlib.suppress(OverBudgetError):
            cm.compile(max_tokens=1200, reserve_for_response=0)
    cm.close()
    assert cycles[0] > 0  # the compiles do come back to blocks solved already


def test_the_long_machine_compiles_windowed() -> None:
    """The differential machine (``TestLongHistory``) is not vacuous: its compiles state
    blocks."""
    before = TALLY["windowed"]
    machine = LongHistory()
    try:
        machine.open("kv-stable")
        machine.compile(1200, 0, [], None, False)
    finally:
        machine.teardown()
    assert TALLY["windowed"] > before


def test_the_memory_tree_grown_in_place_is_the_tree_built_anew(tmp_path: Path) -> None:
    from context_manager.strategies.autobiographical.tree import tree

    cm = _open(tmp_path / "s.db", compression_source_only=False)  # requests read the tree
    st = cm.strategy.state  # type: ignore[attr-defined]
    ctx = cm._ctx
    extended = kept_spans = 0
    previous = None
    for chunk in range(12):
        _grow(cm, chunk * 50, 50)
        position = st.positions(ctx, ctx.messages())
        grown = tree(st, ctx, position)
        extended += grown is previous  # the same tree, grown by the memories added
        kept = st.cache.pop(("tree",))
        built = tree(st, ctx, position)
        st.cache[("tree",)] = kept
        assert {k: vars(v) for k, v in grown.nodes.items()} == {
            k: vars(v) for k, v in built.nodes.items()
        }
        assert [x.id for x in grown.tops] == [x.id for x in built.tops]
        assert grown.overlapping == built.overlapping
        runs = grown.kept.get(("l1-runs",))  # kept merged as L1 memories are added
        if runs is not None:
            kept_spans += 1
            spans = [(x.first, x.last) for x in built.nodes.values() if x.level == 1]
            covered = {j for a, b in spans for j in range(a, b + 1)}
            assert {j for a, b in runs for j in range(a, b + 1)} == covered
            assert all(b + 1 < c for (_, b), (c, _) in itertools.pairwise(runs))
        st.cache[("tree",)] = (kept[0], grown)
        previous = grown
    assert extended >= 6
    assert kept_spans >= 6


def test_a_block_shown_as_its_own_memories_is_committed_at_their_level() -> None:
    """A leaf of a block shown as itself is its memory, at the block's offset: the
    frontier a compile commits records that level over its messages (not raw), so the
    next compile finds the same block."""
    from context_manager.adapter import Block, Snapshot, SummarySpec, read_plan, state_problem

    a = SummarySpec("A", 1, 30, 2, 4, raw_tokens=300)
    b = SummarySpec("B", 1, 30, 5, 7, raw_tokens=300)
    top = SummarySpec("AB", 2, 40, 2, 7, children=("A", "B"))
    snap = Snapshot(
        ids=[str(i) for i in range(10)],
        tokens=[100] * 10,
        tied=[False] * 10,
        head_end=0,
        tail_start=8,
        budget=10_000,
        target=9_000,
        blocks=[Block(offset=1, leaves=(a, b), summaries=(top,))],
    )
    stated = state_problem(snap)
    plan = read_plan(snap, stated, solvers.solve(stated.problem, method="kv-stable"))
    assert plan.layout is not None
    assert [u.key for u in plan.layout.units if u.key in ("A", "B")] == ["A", "B"]
    assert plan.levels == [(2, 8, 1)]  # both memories, as one run at level 1


def test_a_windowed_kv_unified_compile_settles() -> None:
    """Found by the long machine: two windows whose answers implied each other's
    window, so compiles alternated between two requests. A block leaf now weighs each
    chunk under it at its own age (``Leaf.parts``), the fold problem is the same
    function in every window, and a repeated compile sends the same bytes."""
    machine = LongHistory()
    try:
        machine.open("kv-unified")
        machine.add_orphan_result()
        machine.fork()
        machine.compile(60, 0, [], None, False)
        machine.add_orphan_result()
        machine.compile(1212, 0, [("system", 33)], None, False)  # compiles twice: settles
        first = machine.manager.compile(max_tokens=1212, reserve_for_response=0)
        again = machine.manager.compile(max_tokens=1212, reserve_for_response=0)
        assert again.messages == first.messages
        assert again.render_stats["kv_cost"] == 0
    finally:
        machine.teardown()


@settings(max_examples=200, deadline=None)
@given(hs.lists(hs.tuples(hs.integers(0, 60), hs.integers(0, 8)), max_size=30))
def test_runs_added_one_by_one_are_the_union_of_the_spans(raw: list[tuple[int, int]]) -> None:
    from context_manager.strategies.autobiographical.tree import add_run, covered_runs

    spans = [(a, a + n) for a, n in raw]
    runs: list[tuple[int, int]] = []
    for a, b in spans:
        add_run(runs, a, b)
    covered = {j for a, b in spans for j in range(a, b + 1)}
    assert {j for a, b in runs for j in range(a, b + 1)} == covered
    assert runs == sorted(runs)
    assert all(b + 1 < c for (_, b), (c, _) in itertools.pairwise(runs))  # disjoint, apart
    assert runs == covered_runs(spans)
