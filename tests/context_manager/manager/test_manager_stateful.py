"""The SWE-agent round trip under every solver and a crash test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import solvers
from context_manager import (
    CharsCounter,
    ContextManager,
    ExtractiveSummarizer,
    OverBudgetError,
    tool_pair_problems,
)
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from foldbench import dataset
from foldbench.loaders import load_swe_agent
from tests.support.extractive_agent import records_agree_with_messages, strategy

DATA = dataset("swe-agent")  # MIT, LICENSE beside them
COUNTER = CharsCounter()


def open_manager(path: Path) -> tuple[ContextManager, AutobiographicalStrategy]:
    s = strategy()
    cm = ContextManager.open(
        path=path, strategy=s, summarizer=ExtractiveSummarizer(target_tokens=30), counter=COUNTER
    )
    cm.set_tool_definitions([{"name": "bash"}])
    return cm, s


def tokens(messages: list[object]) -> int:
    return sum(COUNTER.count_message(m) for m in messages)  # type: ignore[arg-type]


# The stateful machine over every operation lives in tests/support/request_machine.py
# (run by test_request_edge.py, and long by ``make soak``).


TRANSCRIPTS = sorted(DATA.glob("*.traj"))


def test_the_transcripts_are_there() -> None:
    assert len(TRANSCRIPTS) == 4 and (DATA / "LICENSE").exists()


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
@pytest.mark.parametrize(
    "method", [m for m in solvers.names() if not solvers.capabilities(m).oracle]
)
def test_swe_agent_round_trip(tmp_path: Path, path: Path, method: str) -> None:
    messages = load_swe_agent(path)
    options = dict(solvers.capabilities(method).example_options)
    s = strategy(
        target_chunk_tokens=400,
        recent_window_tokens=1500,
        summary_target_tokens=60,
        solver=method,
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
        cm.tick()  # a kill lands in a compression or a merge as often as in an append
        print("ticked", flush=True)
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
        for _ in range(1 + trial % 7):
            line = proc.stdout.readline()
            if line.strip().isdigit():
                acknowledged = max(acknowledged, int(line))
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
            records_agree_with_messages(cm)  # merges in flight left no dangling parent
        finally:
            cm.close()
