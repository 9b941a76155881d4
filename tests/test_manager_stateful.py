"""A stateful property test of the manager, the SWE-agent round trip and a crash test."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import solvers
from context_manager import (
    CharsCounter,
    ContextManager,
    ExtractiveSummarizer,
    OverBudgetError,
    ToolResultBlock,
    ToolUseBlock,
    tool_pair_problems,
)
from context_manager.loaders import load_swe_agent
from context_manager.strategies.autobiographical import AutobiographicalStrategy

DATA = Path(__file__).resolve().parents[1] / "data" / "swe-agent"  # MIT, LICENSE beside them
COUNTER = CharsCounter()


def strategy(**extra: object) -> AutobiographicalStrategy:
    options: dict[str, object] = {
        "compression_model": "extractive",
        "target_chunk_tokens": 120,
        "recent_window_tokens": 300,
        "merge_threshold": 3,
        "summary_target_tokens": 30,
        "l1_holdback_chunks": 0,
        "min_chunk_chars_for_llm": 0,
    }
    options.update(extra)
    return AutobiographicalStrategy(**options)  # type: ignore[arg-type]


def open_manager(path: Path) -> tuple[ContextManager, AutobiographicalStrategy]:
    s = strategy()
    cm = ContextManager.open(
        path=path, strategy=s, summarizer=ExtractiveSummarizer(target_tokens=30), counter=COUNTER
    )
    cm.set_tool_definitions([{"name": "bash"}])
    return cm, s


def tokens(messages: list[object]) -> int:
    return sum(COUNTER.count_message(m) for m in messages)  # type: ignore[arg-type]


class ManagerMachine(RuleBasedStateMachine):
    """Random histories, pins, holds, ticks, budgets, branches and reopens."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp())
        self.path = self.dir / "cm.db"
        self.cm, self.strategy = open_manager(self.path)
        self.n = 0
        self.branches = ["main"]

    def teardown(self) -> None:
        self.cm.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def ids(self) -> list[str]:
        return [m.id for m in self.cm.get_messages()]

    @rule(size=st.integers(1, 60), participant=st.sampled_from(["User", "Claude"]))
    def add_text(self, size: int, participant: str) -> None:
        self.n += 1
        self.cm.add_message(participant, " ".join(f"w{self.n}x{i}" for i in range(size)))

    @rule(size=st.integers(1, 80))
    def add_tool_cycle(self, size: int) -> None:
        self.n += 1
        tid = f"t{self.n}"
        self.cm.add_message("Claude", [ToolUseBlock(id=tid, name="bash", input={"n": self.n})])
        body = " ".join(f"o{self.n}x{i}" for i in range(size))
        self.cm.add_message("User", [ToolResultBlock(tool_use_id=tid, content=body)])

    @precondition(lambda self: bool(self.cm.get_messages()))
    @rule(data=st.data(), kind=st.sampled_from(["raw", "level", "max_level"]))
    def pin(self, data: st.DataObject, kind: str) -> None:
        ids = self.ids()
        first = data.draw(st.integers(0, len(ids) - 1))
        last = data.draw(st.integers(first, min(len(ids) - 1, first + 8)))
        level = data.draw(st.integers(0, 3))
        options = (
            {"level": level}
            if kind == "level"
            else ({"max_level": level} if kind == "max_level" else {})
        )
        self.cm.pin_range(ids[first], ids[last], **options)

    @precondition(lambda self: bool(self.cm.get_messages()))
    @rule(data=st.data(), locked=st.booleans())
    def lock(self, data: st.DataObject, locked: bool) -> None:
        self.cm.lock_message(data.draw(st.sampled_from(self.ids())), locked)

    @precondition(lambda self: bool(self.cm.get_messages()))
    @rule(data=st.data(), release=st.booleans())
    def hold(self, data: st.DataObject, release: bool) -> None:
        target = data.draw(st.sampled_from(self.ids()))
        if release:
            self.cm.release_compression([target])
        else:
            self.cm.hold_compression([target])

    @rule(times=st.integers(1, 5))
    def tick(self, times: int) -> None:
        for _ in range(times):
            self.cm.tick()

    @rule(budget=st.integers(300, 6000))
    def compile(self, budget: int) -> None:
        try:
            first = self.cm.compile(max_tokens=budget + 100, reserve_for_response=100)
        except OverBudgetError as exc:
            assert exc.actual > exc.budget == budget
            return
        assert tokens(first.messages) <= budget
        assert tokens(first.messages) == first.render_stats["tokens"]  # one accountant
        assert tool_pair_problems(first.messages) == []
        shown = {m.text for m in first.messages}
        covered = {
            leaf
            for s in self.strategy.summaries.values()
            for leaf in self.strategy.leaves_of(s)
            if s.content in shown
        }
        for stored in self.cm.get_messages():
            assert stored.message.text in shown or stored.id in covered, stored.id
        marks = first.cache_breakpoints
        assert marks == sorted(set(marks)) and len(marks) <= 4
        assert marks == [] if not first.messages else marks[-1] == len(first.messages) - 1
        again = self.cm.compile(max_tokens=budget + 100, reserve_for_response=100)
        assert again.messages == first.messages  # no change, same bytes
        assert again.cache_breakpoints == marks

    @rule()
    def fork(self) -> None:
        name = f"b{len(self.branches)}"
        self.cm.fork(name)
        self.branches.append(name)

    @rule(data=st.data())
    def switch(self, data: st.DataObject) -> None:
        self.cm.switch_branch(data.draw(st.sampled_from(self.branches)))

    @rule(budget=st.integers(2000, 6000))
    def reopen(self, budget: int) -> None:
        try:
            before = self.cm.compile(max_tokens=budget, reserve_for_response=0).messages
        except OverBudgetError:
            before = None
        self.cm.close()
        self.cm, self.strategy = open_manager(self.path)
        if before is not None:
            after = self.cm.compile(max_tokens=budget, reserve_for_response=0).messages
            assert after == before

    @invariant()
    def chunks_are_disjoint(self) -> None:
        seen: set[str] = set()
        for chunk in self.strategy.chunks:
            assert not seen.intersection(chunk.source_ids)
            seen.update(chunk.source_ids)


ManagerMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=30, deadline=None)
TestManagerMachine = ManagerMachine.TestCase


TRANSCRIPTS = sorted(DATA.glob("*.traj"))


def test_the_transcripts_are_there() -> None:
    assert len(TRANSCRIPTS) == 4 and (DATA / "LICENSE").exists()


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
@pytest.mark.parametrize("method", [m for m in solvers.names() if m != "brute-force"])
def test_swe_agent_round_trip(tmp_path: Path, path: Path, method: str) -> None:
    messages = load_swe_agent(path)
    options = {"policy": "reference"} if method == "kv-unified" else {}
    s = strategy(
        target_chunk_tokens=400,
        recent_window_tokens=1500,
        summary_target_tokens=60,
        folding_strategy=method,
        solver_options=options,
    )
    with ContextManager.open(
        path=tmp_path / "t.db",
        strategy=s,
        summarizer=ExtractiveSummarizer(target_tokens=60),
        counter=COUNTER,
    ) as cm:
        cm.set_tool_definitions([{"name": "bash"}])
        for m in messages:
            if m.participant == "System":
                cm.set_system_prompt(m.text)
                continue
            cm.add_message(m.participant, m.content)
            cm.drain()
        fitted = 0
        for budget in (4000, 8000, 16000):
            try:
                result = cm.compile(max_tokens=budget + 500, reserve_for_response=500)
            except OverBudgetError as exc:
                assert exc.actual > budget and exc.diagnostics["tail_tokens"] >= 0
                continue
            fitted += 1
            assert tokens(result.messages) <= budget
            assert tool_pair_problems(result.messages) == []
        assert fitted >= 2  # 8k and 16k always fit once the middle is folded


CRASHER = textwrap.dedent(
    """
    import sys
    from context_manager import ContextManager, CharsCounter, ExtractiveSummarizer
    from context_manager.strategies.autobiographical import AutobiographicalStrategy
    s = AutobiographicalStrategy(compression_model="extractive", target_chunk_tokens=60,
                                 recent_window_tokens=0, l1_holdback_chunks=0,
                                 min_chunk_chars_for_llm=0, merge_threshold=3)
    cm = ContextManager.open(path=sys.argv[1], strategy=s, counter=CharsCounter(),
                             summarizer=ExtractiveSummarizer(target_tokens=20))
    n = len(cm.get_messages())
    while True:
        cm.add_message("User", f"message {n} " + "word " * 30)
        print(n, flush=True)
        cm.tick()
        n += 1
    """
)


@pytest.mark.slow
def test_killed_manager_reopens_intact(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    acknowledged = -1
    for trial in range(50):
        proc = subprocess.Popen(
            [sys.executable, "-c", CRASHER, str(path)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        for _ in range(1 + trial % 5):
            acknowledged = max(acknowledged, int(proc.stdout.readline()))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        cm, s = open_manager(path)
        try:
            assert cm.store.integrity_check() == []
            texts = [m.message.text for m in cm.get_messages()]
            numbers = [int(t.split()[1]) for t in texts]
            assert numbers == list(range(len(numbers)))
            assert len(numbers) - 1 >= acknowledged
            for summary in s.summaries.values():  # no summary without its chunk record
                if summary.level == 1:
                    assert any(c.summary_id == summary.id for c in s.chunks)
        finally:
            cm.close()
