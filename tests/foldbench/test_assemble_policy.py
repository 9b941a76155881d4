"""AssemblePolicy runs ``assemble`` as its host must: the compaction round trip.

When a call compacts, the policy keeps the summary and the tail boundary, sends only
the history from that boundary with the summary as ``previous_summary``, and starts
over on a different transcript. Replayed over a long synthetic transcript at a
4,000-token budget.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

import foldbench.peers.ours as ours
from context_manager.assembly.functions import render_system_prompt
from context_manager.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from context_manager.pairing import tool_pair_problems
from context_manager.tokens import TiktokenCounter, TokenCounter
from foldbench.benchmark import synthetic_transcript, tau_bench_transcript
from foldbench.loaders import call_points
from foldbench.peers.base import PolicyRequest, request_tokens, split_system, system_text
from foldbench.peers.ours import AssemblePolicy

BUDGET = 4000


@dataclass(frozen=True)
class Step:
    """One call of a replay, and the state the policy kept after it."""

    history: tuple[Message, ...]
    request: PolicyRequest
    summary: str | None
    tail_start: int


def replay(
    policy: AssemblePolicy, messages: Sequence[Message], points: Sequence[int]
) -> list[Step]:
    out = []
    for n in points:
        history = tuple(messages[:n])
        request = policy.request(history, BUDGET)
        out.append(Step(history, request, policy.summary, policy.tail_start))
    return out


def compacted(steps: Sequence[Step]) -> list[int]:
    """The calls that wrote a summary (the summariser ran and the kept summary changed)."""
    out = []
    for i, s in enumerate(steps):
        before = steps[i - 1].summary if i else None
        if s.request.summarizer_calls and s.summary != before:
            out.append(i)
    return out


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TiktokenCounter()


@pytest.fixture(scope="module")
def long_run(counter: TokenCounter) -> list[Step]:
    t = synthetic_transcript(400)
    points = t.call_points or call_points(t.messages)
    return replay(AssemblePolicy(counter=counter), t.messages, points)


def test_every_request_is_valid_and_within_budget(long_run: list[Step]) -> None:
    assert len(long_run) > 150
    for s in long_run:
        assert s.request.valid, (len(s.history), s.request.problems, s.request.error)
        assert s.request.tokens <= BUDGET
        assert tool_pair_problems(list(s.request.messages)) == []


def test_the_newest_message_is_always_in_the_request(long_run: list[Step]) -> None:
    for s in long_run:
        assert s.request.messages[-1].text == s.history[-1].text


def test_the_summariser_runs_far_less_than_once_per_call(
    long_run: list[Step], counter: TokenCounter
) -> None:
    first = compacted(long_run)[0]
    past = len(long_run) - 1 - first  # calls after the first compaction
    calls = sum(s.request.summarizer_calls for s in long_run)
    # kept state: 48 summariser calls over 193 calls past the first compaction
    assert past > 150
    assert 3 * calls < past

    # stateless (a fresh policy per call, the whole transcript each time): a summariser
    # call on every over-budget call, sampled every tenth call past the first compaction
    sample = [s.history for s in long_run[first + 1 :: 10]]
    over = [h for h in sample if request_tokens(h, counter) > BUDGET]
    assert len(over) >= 15
    calling = sum(
        AssemblePolicy(counter=counter).request(h, BUDGET).summarizer_calls > 0 for h in over
    )
    assert calling >= 0.9 * len(over)


def test_the_next_request_carries_the_kept_summary(long_run: list[Step]) -> None:
    carried = 0
    for i in compacted(long_run):
        if i + 1 == len(long_run):
            continue
        kept, step = long_run[i].summary, long_run[i + 1]
        assert kept is not None and long_run[i].tail_start > 0
        system, _ = split_system(step.history)
        prompt = step.request.messages[0]
        assert prompt.participant == "System"
        if step.request.summarizer_calls == 0:
            # nothing compacted: the summary in the prompt is the one passed back
            assert step.summary == kept and step.tail_start == long_run[i].tail_start
            assert prompt.text == render_system_prompt(system_text(system), kept)
            carried += 1
        else:
            assert step.summary is not None and step.summary in prompt.text
    assert carried > 10
    # and every request after a compaction sends no message from before the boundary
    # (the summary stands for them)
    for prev, step in itertools.pairwise(long_run):
        if prev.summary is not None:
            sent = len(step.request.messages) - 1
            assert sent <= len(step.history) - prev.tail_start


def test_a_restart_drops_the_kept_state(long_run: list[Step], counter: TokenCounter) -> None:
    policy = AssemblePolicy(counter=counter)
    t = synthetic_transcript(400)
    points = t.call_points or call_points(t.messages)
    done = replay(policy, t.messages, points[:60])
    assert done[-1].summary is not None and done[-1].tail_start > 0

    # a shorter history of the same transcript: as a fresh policy answers it
    short = t.messages[:12]
    again = policy.request(short, BUDGET)
    assert again.messages == AssemblePolicy(counter=counter).request(short, BUDGET).messages
    assert (policy.summary, policy.tail_start) == (None, 0)

    # a different transcript: the same requests, summaries and boundaries as a fresh policy
    other = synthetic_transcript(200, seed=5)
    other_points = (other.call_points or call_points(other.messages))[:40]
    continued = replay(policy, other.messages, other_points)
    fresh = replay(AssemblePolicy(counter=counter), other.messages, other_points)
    assert compacted(fresh)
    assert [s.request.messages for s in continued] == [s.request.messages for s in fresh]
    assert [(s.summary, s.tail_start) for s in continued] == [
        (s.summary, s.tail_start) for s in fresh
    ]


def _with_notes(messages: Sequence[Message]) -> list[Message]:
    """Each tool-result message also carries a line of text: its wire form is the
    ``function_result`` and then a plain ``user`` message, a turn start."""
    out = []
    for m in messages:
        if m.participant == "User" and any(isinstance(b, ToolResultBlock) for b in m.content):
            m = Message(participant="User", content=(*m.content, TextBlock(text="Noted.")))
        out.append(m)
    return out


def test_a_tail_starting_inside_a_message_keeps_the_calls_with_their_results(
    counter: TokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = _with_notes(synthetic_transcript(240).messages)
    moved: list[tuple[int, int]] = []
    real = ours._tail_boundary

    def spy(sent: Sequence[Message], owners: Sequence[int], wire_start: int | None) -> int:
        start = real(sent, owners, wire_start)
        assert wire_start is not None
        if owners[wire_start] != start:
            moved.append((owners[wire_start], start))
        return start

    monkeypatch.setattr(ours, "_tail_boundary", spy)
    steps = replay(AssemblePolicy(counter=counter), messages, call_points(messages))
    assert moved, "no tail started inside a message's expansion"
    for inside, start in moved:
        assert start < inside
    for s in steps:
        assert s.request.valid, (len(s.history), s.request.problems, s.request.error)
        kept = s.history[s.tail_start :]
        calls = {b.id for m in kept for b in m.content if isinstance(b, ToolUseBlock)}
        results = {b.tool_use_id for m in kept for b in m.content if isinstance(b, ToolResultBlock)}
        assert results <= calls


def test_a_kept_tail_without_a_turn_start_is_resent_from_its_turn(
    counter: TokenCounter,
) -> None:
    # tau-bench: a compaction keeps a tail starting at an agent message inside a long run
    # of tool calls; until the customer speaks again assemble cannot compact it, so the
    # policy sends it from its turn's start rather than overflow
    t = tau_bench_transcript(20)
    points = [n for n in (t.call_points or call_points(t.messages)) if n <= 100]
    steps = replay(AssemblePolicy(counter=counter), t.messages, points)
    assert compacted(steps)
    for s in steps:
        assert s.request.error is None, (len(s.history), s.request.error)
        assert s.request.valid
