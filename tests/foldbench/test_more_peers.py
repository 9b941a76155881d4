"""SWE-agent's LastNObservations, the Complexity Trap hybrid and LangMem's summarize_messages.

Expected values are written out by hand from the documented rules, not computed by
the code under test.
"""

from __future__ import annotations

import pytest

from context_manager.messages import (
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.pairing import tool_pair_problems
from context_manager.summarizer import Completion, CompletionRequest, ExtractiveSummarizer
from context_manager.tokens import TiktokenCounter
from foldbench import dataset
from foldbench.benchmark import replay_policy
from foldbench.loaders import Transcript, load_swe_agent
from foldbench.peers import call_points
from foldbench.peers.base import request_tokens
from foldbench.peers.swe_agent_peers import (
    ComplexityTrapHybrid,
    LastNObservationsPolicy,
    last_n_observations,
)
from foldbench.registry import describe, make_policy, missing_packages

COUNTER = TiktokenCounter()
DATA = dataset("swe-agent")
NAMES = (
    "swe-agent-last-5-observations",
    "swe-agent-last-5-observations-polling",
    "langmem-summarize-messages",
    "complexity-trap-hybrid",
)


def _call(*ids: str) -> Message:
    return Message(
        participant="Claude",
        content=(TextBlock(text="next"), *(ToolUseBlock(id=i, name="bash") for i in ids)),
    )


def _results(*pairs: tuple[str, object]) -> Message:
    return Message(
        participant="Tool",
        content=tuple(ToolResultBlock(tool_use_id=i, content=c) for i, c in pairs),  # type: ignore[arg-type]
    )


def _history() -> list[Message]:
    """A system prompt, the task (observation 0), then observations 1-7 in six results
    messages (4 and 5 answer two parallel calls in one message)."""
    return [
        Message.text_message("System", "You are an agent."),
        Message.text_message("User", "Fix the bug.\nIt is in parse()."),
        _call("t1"),
        _results(("t1", "one")),
        _call("t2"),
        _results(("t2", [TextBlock(text="a\nb"), ImageBlock(url="https://x/y.png")])),
        _call("t3"),
        _results(("t3", "x\ny\nz")),
        _call("t4", "t5"),
        _results(("t4", "p1\np2\np3\np4"), ("t5", "q")),
        _call("t6"),
        _results(("t6", "r")),
        _call("t7"),
        _results(("t7", "s")),
    ]


def _result_texts(messages: list[Message]) -> list[object]:
    return [b.content for m in messages for b in m.content if isinstance(b, ToolResultBlock)]


ORIGINAL = ["one", [TextBlock(text="a\nb"), ImageBlock(url="https://x/y.png")], "x\ny\nz"]
ORIGINAL += ["p1\np2\np3\np4", "q", "r", "s"]
HIDDEN = [
    "Old environment output: (1 lines omitted)",
    "Old environment output: (2 lines omitted) (1 images omitted)",
    "Old environment output: (3 lines omitted)",
    "Old environment output: (4 lines omitted)",
    "Old environment output: (1 lines omitted)",
    "Old environment output: (1 lines omitted)",
    "Old environment output: (1 lines omitted)",
]


# ------------------------------------------------------------------ LastNObservations
def test_polling_hides_exactly_the_documented_range() -> None:
    # C = 8 observations (the task and seven results), n = 2, polling = 3:
    # floor(8 / 3) * 3 - 2 = 4, so observations 1, 2 and 3 are hidden, 4-7 kept.
    out = last_n_observations(_history(), n=2, polling=3)
    assert _result_texts(out) == HIDDEN[:3] + ORIGINAL[3:]
    assert out[1].text == "Fix the bug.\nIt is in parse()."  # observation 0


def test_without_polling_all_but_the_last_n_are_hidden() -> None:
    # polling 1: 8 - 2 = 6, observations 1-5 hidden; the parallel results count one each.
    out = last_n_observations(_history(), n=2)
    assert _result_texts(out) == HIDDEN[:5] + ORIGINAL[5:]


def test_polling_keeps_n_plus_c_mod_polling_recent_observations() -> None:
    history = [Message.text_message("User", "task")]
    for k in range(1, 20):
        history += [_call(f"t{k}"), _results((f"t{k}", f"out {k}"))]
        c = k + 1  # observations so far, the task included
        shown = _result_texts(last_n_observations(history, n=2, polling=3))
        recent = [t for t in shown if not str(t).startswith("Old environment output")]
        assert len(shown) == k
        # hidden: observations 1 .. floor(c / 3) * 3 - 3, when that range is not empty
        assert len(recent) == (2 + c % 3 if c // 3 * 3 - 2 > 1 else k)
        assert recent == [f"out {j}" for j in range(k - len(recent) + 1, k + 1)]


def test_masking_keeps_roles_ids_and_pairing() -> None:
    history = _history()
    history[7] = Message(
        participant="Tool",
        content=(ToolResultBlock(tool_use_id="t3", content="boom\ntrace", is_error=True),),
    )
    policy = LastNObservationsPolicy(n=1, counter=COUNTER)
    request = policy.request(history, 10**6)
    assert request.valid and not request.unpaired and request.summarizer_calls == 0
    assert [m.participant for m in request.messages] == [m.participant for m in history]
    ids = [
        b.tool_use_id for m in request.messages for b in m.content if isinstance(b, ToolResultBlock)
    ]
    assert ids == ["t1", "t2", "t3", "t4", "t5", "t6", "t7"]
    error = request.messages[7].content[0]
    assert isinstance(error, ToolResultBlock) and error.is_error
    assert error.content == "Old environment output: (2 lines omitted)"
    assert request.messages[2] is history[2]  # the agent's turns are untouched


def test_the_budget_is_not_looked_at() -> None:
    policy = LastNObservationsPolicy(n=2, counter=COUNTER)
    big, small = policy.request(_history(), 10**6), policy.request(_history(), 10)
    assert small.messages == big.messages
    assert small.problems == (f"over budget: {small.tokens} tokens > 10",)


def test_demonstrations_and_the_task_stay_and_text_observations_are_optional() -> None:
    history = [
        Message.text_message("System", "sys"),
        Message.text_message("User", "a demonstration"),
        Message.text_message("User", "the task"),
    ]
    for k in range(4):
        history += [
            Message.text_message("Claude", f"step {k}"),
            Message.text_message("User", f"o{k}\n."),
        ]
    assert last_n_observations(history, n=1) == history  # no tool result: nothing to hide
    out = last_n_observations(history, n=1, text_observations=True)
    assert [m.text for m in out if m.participant == "User"] == [
        "a demonstration",
        "the task",
        "Old environment output: (2 lines omitted)",
        "Old environment output: (2 lines omitted)",
        "Old environment output: (2 lines omitted)",
        "o3\n.",
    ]


def test_registered_swe_agent_peers() -> None:
    plain = make_policy("swe-agent-last-5-observations", counter=COUNTER)
    polling = make_policy("swe-agent-last-5-observations-polling", counter=COUNTER)
    assert isinstance(plain, LastNObservationsPolicy) and (plain.n, plain.polling) == (5, 1)
    assert isinstance(polling, LastNObservationsPolicy) and (polling.n, polling.polling) == (5, 5)
    assert plain.name == "swe-agent-last-5-observations"
    assert polling.name == "swe-agent-last-5-observations-polling"
    for name in ("swe-agent-last-5-observations", "swe-agent-last-5-observations-polling"):
        assert "SWE-agent 1.1.0" in describe(name) and "not on PyPI" in describe(name)
        assert missing_packages(name) == []
    hybrid = make_policy("complexity-trap-hybrid", counter=COUNTER)
    assert isinstance(hybrid, ComplexityTrapHybrid)
    assert (hybrid.n, hybrid.m, hybrid.w) == (43, 10, 10)
    assert "Complexity Trap" in describe("complexity-trap-hybrid")
    with pytest.raises(ValueError):
        LastNObservationsPolicy(n=0)


# ------------------------------------------------------------------ the hybrid
class Recording:
    """The extractive summariser, keeping every request it is handed."""

    needs_tool_definitions = False

    def __init__(self) -> None:
        self.requests: list[CompletionRequest] = []
        self.inner = ExtractiveSummarizer()

    def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        return self.inner.complete(request)


def _turn(k: int) -> list[Message]:
    return [_call(f"c{k}"), _results((f"c{k}", f"result of turn {k}\nsecond line"))]


def test_hybrid_summarises_at_n_plus_m_turns_and_reads_the_previous_checkpoint() -> None:
    task = "Fix the failing parser test."
    history = [Message.text_message("System", "sys"), Message.text_message("User", task)]
    for k in range(1, 9):
        history += _turn(k)
    history.append(Message.text_message("Claude", "done"))
    recording = Recording()
    policy = ComplexityTrapHybrid(n=3, m=2, w=2, counter=COUNTER, summarizer=recording)
    requests = {}
    for n in call_points(history):
        turns = (n - 2) // 2
        requests[turns] = policy.request(history[:n], 10**6)
    assert sorted(requests) == list(range(9))
    assert [requests[k].summarizer_calls for k in range(9)] == [0, 0, 0, 0, 0, 1, 0, 0, 1]
    assert requests[5].summarizer_input_tokens > 0 and requests[5].summarizer_billed > 0
    assert all(r.valid for r in requests.values())

    # Before N + M = 5 turns: the whole history, masked to the last 2 observations.
    assert requests[4].messages[:2] == tuple(history[:2])
    assert _result_texts(list(requests[4].messages)) == [
        "Old environment output: (2 lines omitted)",
        "Old environment output: (2 lines omitted)",
        "result of turn 3\nsecond line",
        "result of turn 4\nsecond line",
    ]

    # At 5 turns: turns 1-3 summarised (after the problem statement), 4-5 kept raw.
    first = recording.requests[0]
    assert first.messages[0].text == f"<PROBLEM_STATEMENT>\n{task}\n</PROBLEM_STATEMENT>\n"
    assert list(first.messages[1:]) == history[2:8]  # turns 1-3, unmasked
    at5 = requests[5].messages
    assert at5[:2] == tuple(history[:2])
    assert at5[2].participant == "Claude"
    assert at5[2].text.startswith("Checkpoint for the last 3 turns:\n")
    assert at5[3:] == tuple(history[8:12])  # turns 4 and 5; 2 observations: none hidden

    # At 7 turns: the checkpoint, then turns 4-7 with the oldest two observations hidden.
    assert requests[7].messages[2] == at5[2]
    assert _result_texts(list(requests[7].messages[3:])) == [
        "Old environment output: (2 lines omitted)",
        "Old environment output: (2 lines omitted)",
        "result of turn 6\nsecond line",
        "result of turn 7\nsecond line",
    ]

    # At 8 turns: turns 4-6 summarised after the previous checkpoint, unmasked.
    second = recording.requests[1]
    assert second.messages[0].text == (
        f"<PREVIOUS_CHECKPOINT>\n{at5[2].text}\n</PREVIOUS_CHECKPOINT>\n"
    )
    assert list(second.messages[1:]) == history[8:14]
    at8 = requests[8].messages
    assert len([m for m in at8 if m.text.startswith("Checkpoint for")]) == 1
    assert at8[2] != at5[2] and at8[3:] == tuple(history[14:18])
    assert len(recording.requests) == 2


def test_hybrid_starts_over_on_another_transcript() -> None:
    history = [Message.text_message("User", "task")]
    for k in range(1, 6):
        history += _turn(k)
    policy = ComplexityTrapHybrid(n=3, m=2, w=2, counter=COUNTER)
    assert policy.request(history, 10**6).summarizer_calls == 1
    other = [Message.text_message("User", "another task"), *_turn(1)]
    request = policy.request(other, 10**6)
    assert request.messages == tuple(other) and request.summarizer_calls == 0


# ------------------------------------------------------------------ LangMem
@pytest.fixture(scope="module")
def marshmallow() -> list[Message]:
    return load_swe_agent(DATA / "marshmallow-1867-function-calling.traj")


def test_langmem_summarises_meters_and_carries_the_running_summary(
    marshmallow: list[Message],
) -> None:
    pytest.importorskip("langmem")
    budget = 3000
    policy = make_policy("langmem-summarize-messages", counter=COUNTER)
    points = call_points(marshmallow)
    requests = [policy.request(marshmallow[:n], budget) for n in points]
    summarised = [i for i, r in enumerate(requests) if r.summarizer_calls]
    assert summarised, "a 3000-token budget must make LangMem summarise"
    first = summarised[0]
    assert requests[first].summarizer_tokens > 0 and requests[first].summarizer_billed > 0
    assert all(r.error is None for r in requests)
    for i, r in enumerate(requests):
        full = request_tokens(marshmallow[: points[i]], COUNTER)
        if i >= first:
            assert r.tokens < full
            summary = r.messages[1]
            assert summary.participant == "System"
            assert summary.text.startswith("Summary of the conversation so far: ")
        else:
            assert r.messages == tuple(marshmallow[: points[i]])
    # The calls after a summary resend it without summarising again.
    after = [i for i in range(first + 1, len(requests)) if not requests[i].summarizer_calls]
    assert after
    for i in after:
        assert requests[i].messages[1] == requests[i - 1].messages[1]


def test_langmem_ids_are_stable_so_nothing_is_summarised_twice(marshmallow: list[Message]) -> None:
    pytest.importorskip("langmem")
    policy = make_policy("langmem-summarize-messages", counter=COUNTER)
    points = call_points(marshmallow)
    seen: set[str] = set()
    last = None
    for n in points:
        request = policy.request(marshmallow[:n], 3000)
        running = policy.running_summary  # type: ignore[attr-defined]
        if running is None:
            continue
        if request.summarizer_calls:
            new = running.summarized_message_ids - seen
            assert new and not new & seen
            seen = set(running.summarized_message_ids)
        else:
            assert running.summarized_message_ids == seen  # carried, not redone
        # What follows the summary is the history after the last summarised message.
        index = int(running.last_summarized_message_id.split("-")[1])
        assert request.messages[2:] == tuple(marshmallow[index + 1 : n])
        last = running
    assert last is not None and "cm-2-0" in last.summarized_message_ids  # the task


# ------------------------------------------------------------------ end to end
@pytest.mark.parametrize("name", NAMES)
def test_each_new_peer_replays_end_to_end(name: str, marshmallow: list[Message]) -> None:
    assert missing_packages(name) == []  # the bench extra, installed with the tests
    transcript = Transcript("marshmallow", marshmallow, call_points=call_points(marshmallow))
    for budget in (4000, 16000):
        records = replay_policy(transcript, name, budget, counter=COUNTER)
        assert len(records) == len(transcript.call_points)
        assert all(r.error is None for r in records)
        # LangMem may fold the newest turn into its summary too (it summarises up to
        # the first message where what remains fits): the benchmark records that.
        allowed = {"the newest turn is not in the request"} if name.startswith("langmem") else set()
        for r in records:
            assert all(p.startswith("over budget") or p in allowed for p in r.problems)
            assert not r.unpaired
        if budget == 16000:  # the whole run fits: nothing is over
            assert not any(r.over_budget for r in records)
    assert tool_pair_problems(marshmallow) == []
