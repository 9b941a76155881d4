"""Peer policies: the two baselines always, LangChain and LlamaIndex with the bench extra."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from context_manager.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.pairing import tool_pair_problems
from context_manager.tokens import TiktokenCounter
from foldbench import dataset
from foldbench.loaders import load_swe_agent
from foldbench.peers import (
    ClearToolUses,
    ObservationMasking,
    Policy,
    PolicyRequest,
    call_points,
)
from foldbench.peers.base import request_tokens
from foldbench.peers.baselines import exchanges

DATA = dataset("swe-agent")
BENCH = "the bench extra is not installed (pip install -e '.[bench]')"
COUNTER = TiktokenCounter()


@pytest.fixture(scope="module")
def history() -> list[Message]:
    """A real tool-calling trajectory (system, issue, then call/result pairs), truncated."""
    return load_swe_agent(DATA / "marshmallow-1867-function-calling.traj")[:24]


@pytest.fixture(scope="module")
def observations() -> list[Message]:
    """A trajectory whose observations are plain user messages."""
    return load_swe_agent(DATA / "pydicom-1458-gpt4.traj")


def replay(policy: Policy, history: list[Message], budget: int) -> list[PolicyRequest]:
    """Ask the policy at every point where the agent calls its model."""
    return [policy.request(history[:n], budget) for n in call_points(history)]


def _results(request: PolicyRequest) -> list[ToolResultBlock]:
    return [b for m in request.messages for b in m.content if isinstance(b, ToolResultBlock)]


# ------------------------------------------------------------------ baselines
def test_call_points_end_on_user_side(history: list[Message]) -> None:
    points = call_points(history)
    assert points[0] == 2  # system + issue, then the first agent turn
    assert all(history[n - 1].participant != "Claude" for n in points)
    assert all(tool_pair_problems(history[:n]) == [] for n in points)


def test_masking_keeps_last_results_and_ids(history: list[Message]) -> None:
    policy = ObservationMasking(keep=2, placeholder="[masked]")
    request = policy.request(history, 10**6)
    assert request.valid and request.summarizer_calls == 0
    results = _results(request)
    assert [r.content for r in results[:-2]] == ["[masked]"] * (len(results) - 2)
    original = [b for m in history for b in m.content if isinstance(b, ToolResultBlock)]
    assert results[-2:] == original[-2:]
    assert [r.tool_use_id for r in results] == [r.tool_use_id for r in original]
    assert request.tokens == request_tokens(request.messages, COUNTER)


def test_masking_drops_oldest_exchanges_to_fit(history: list[Message]) -> None:
    policy = ObservationMasking(keep=1)
    for budget in (1500, 2500, 4000):
        for n, request in zip(call_points(history), replay(policy, history, budget), strict=True):
            assert tool_pair_problems(request.messages) == []
            assert request.messages[0].participant == "System"
            newest = exchanges(history[1:n])[-1]
            if request_tokens([history[0], *newest], COUNTER) <= budget:
                assert request.tokens <= budget, request.problems
            else:  # the system prompt and the newest exchange alone are too big
                assert any(p.startswith("over budget") for p in request.problems)
    trimmed = policy.request(history, 1500)
    assert len(trimmed.messages) < len(history)
    assert trimmed.messages[-1] == history[-1]


def test_masking_records_what_cannot_fit(history: list[Message]) -> None:
    request = ObservationMasking().request(history[:4], 100)
    assert not request.valid
    assert any(p.startswith("over budget") for p in request.problems)
    assert request.messages[0] == history[0]


def test_clear_tool_uses_trigger_keep_and_clear_at_least(history: list[Message]) -> None:
    policy = ClearToolUses(keep=2, placeholder="[cleared]")
    total = request_tokens(history, COUNTER)
    untouched = policy.request(history, total)  # not over the trigger
    assert untouched.messages == tuple(history)
    cleared = policy.request(history, total - 1)
    results = _results(cleared)
    assert all(r.content == "[cleared]" for r in results[:-2])
    assert all(r.content != "[cleared]" for r in results[-2:])
    assert tool_pair_problems(cleared.messages) == []
    assert cleared.tokens < total
    reluctant = ClearToolUses(keep=2, clear_at_least=10**6).request(history, total - 1)
    assert reluctant.messages == tuple(history)


def test_clear_tool_uses_excludes_tools_and_clears_inputs(history: list[Message]) -> None:
    uses = [b for m in history for b in m.content if isinstance(b, ToolUseBlock)]
    spared = uses[0].name
    policy = ClearToolUses(keep=0, exclude_tools=[spared], clear_tool_inputs=True, trigger=0)
    request = policy.request(history, 10**6)
    new_uses = [b for m in request.messages for b in m.content if isinstance(b, ToolUseBlock)]
    for old, new, result in zip(uses, new_uses, _results(request), strict=True):
        assert new.id == old.id
        if old.name == spared:
            assert new.input == old.input and result.content != "[cleared]"
        else:
            assert new.input == {} and result.content == "[cleared]"


def test_baselines_are_deterministic(history: list[Message]) -> None:
    for make in (ObservationMasking, ClearToolUses):
        assert replay(make(), history, 2500) == replay(make(), history, 2500)


# ------------------------------------------------------------------ LangChain
@pytest.fixture(scope="module")
def lc() -> Iterator[None]:
    pytest.importorskip("langchain_core", reason=BENCH)
    pytest.importorskip("langchain", reason=BENCH)
    yield


def test_langchain_pieces_converted_one_by_one_keep_their_own_source(lc: None) -> None:
    from context_manager.integrations.langchain_messages import from_langchain, to_langchain
    from context_manager.integrations.parts import SOURCE

    results = Message(
        participant="User",
        content=(ToolResultBlock(tool_use_id="t", content="r"), TextBlock(text="and then")),
    )
    pieces = to_langchain([results], start=7)
    assert [m.id for m in pieces] == ["cm-7-0", "cm-7-1"]
    assert {m.additional_kwargs[SOURCE] for m in pieces} == {7}
    # a continuation whose head is gone does not join a message from another source
    other = to_langchain([Message.text_message("User", "earlier")], start=6)
    joined = from_langchain([*other, pieces[1]])
    assert [m.text for m in joined] == ["earlier", "and then"]


def test_langchain_round_trip_keeps_ids(lc: None, history: list[Message]) -> None:
    from langchain_core.messages import AIMessage, ToolMessage

    from context_manager.integrations.langchain_messages import from_langchain, to_langchain

    converted = to_langchain(history)
    calls = [c["id"] for m in converted if isinstance(m, AIMessage) for c in m.tool_calls]
    answers = [m.tool_call_id for m in converted if isinstance(m, ToolMessage)]
    assert (
        calls
        == answers
        == [b.id for m in history for b in m.content if isinstance(b, ToolUseBlock)]
    )
    assert from_langchain(converted) == history
    mixed = [
        Message(
            participant="Claude",
            content=(
                ThinkingBlock(thinking="hm", signature="s"),
                TextBlock(text="go"),
                ToolUseBlock(id="a", name="f", input={"x": 1}),
                ToolUseBlock(id="b", name="g"),
            ),
        ),
        Message(
            participant="Tool",
            content=(
                ToolResultBlock(tool_use_id="a", content="1"),
                ToolResultBlock(tool_use_id="b", content="2", is_error=True),
                TextBlock(text="note"),
            ),
        ),
    ]
    assert from_langchain(to_langchain(mixed)) == mixed


def test_trim_messages_fits_budget(lc: None, history: list[Message]) -> None:
    from foldbench.peers.langchain_peers import TrimMessagesPolicy

    policy = TrimMessagesPolicy()
    for request in replay(policy, history, 3000):
        assert request.error is None
        assert request.tokens <= 3000
        assert tool_pair_problems(request.messages) == []
        assert request.messages[0].participant == "System"
    # start_on="human": with one human turn, anything trimmed loses the whole exchange
    assert len(policy.request(history, 3000).messages) == 1


def test_summarization_middleware_summarises(lc: None, observations: list[Message]) -> None:
    from foldbench.peers.langchain_peers import SummarizationMiddlewarePolicy

    policy = SummarizationMiddlewarePolicy(summary_tokens=200)
    requests = replay(policy, observations, 4000)
    assert all(r.error is None for r in requests)
    assert sum(r.summarizer_calls for r in requests) >= 1
    assert all(r.summarizer_tokens > 0 for r in requests if r.summarizer_calls)
    summarised = next(r for r in requests if r.summarizer_calls)
    assert any(m.text.startswith("Here is a summary") for m in summarised.messages)
    assert summarised.messages[0] == observations[0]  # the system prompt stays
    full = request_tokens(observations, COUNTER)
    assert requests[-1].tokens < full
    again = replay(SummarizationMiddlewarePolicy(summary_tokens=200), observations, 4000)
    assert again == requests


def test_summarization_middleware_restarts_on_new_transcript(
    lc: None, history: list[Message], observations: list[Message]
) -> None:
    from foldbench.peers.langchain_peers import SummarizationMiddlewarePolicy

    policy = SummarizationMiddlewarePolicy()
    policy.request(observations[:10], 10**6)
    request = policy.request(history[:4], 10**6)
    assert request.messages == tuple(history[:4])


def test_langchain_clear_tool_uses_matches_anthropic_baseline(
    lc: None, history: list[Message]
) -> None:
    from foldbench.peers.langchain_peers import ClearToolUsesPolicy

    for options in ({}, {"keep": 1, "clear_tool_inputs": True}):
        ours = replay(ClearToolUses(**options), history, 2000)  # type: ignore[arg-type]
        theirs = replay(ClearToolUsesPolicy(**options), history, 2000)  # type: ignore[arg-type]
        assert [r.messages for r in theirs] == [r.messages for r in ours]
        assert all(r.error is None and tool_pair_problems(r.messages) == [] for r in theirs)
    # LangChain stops once clear_at_least is reached; Anthropic clears every candidate
    total = request_tokens(history, COUNTER)
    lazy = ClearToolUsesPolicy(keep=0, clear_at_least=1).request(history, total - 1)
    assert sum(r.content == "[cleared]" for r in _results(lazy)) == 1


def test_extractive_chat_model_is_metered(lc: None) -> None:
    from langchain_core.messages import HumanMessage

    from foldbench.peers.langchain_peers import extractive_chat_model

    model, meter = extractive_chat_model(target_tokens=20)
    prompt = (
        "Ignore this.\n<messages>\n"
        '<message type="human">Fix parse_config in src/app.py line 42.</message>\n</messages>'
    )
    answer = model.invoke([HumanMessage(content=prompt)])
    assert "src/app.py" in answer.text and "<message" not in answer.text
    assert meter.take()[0] == 1
    assert model.get_num_tokens_from_messages(
        [HumanMessage(content="hi")]
    ) == COUNTER.count_message(Message.text_message("User", "hi"))


def test_peer_error_is_recorded_not_raised(lc: None, history: list[Message]) -> None:
    from foldbench.peers.langchain_peers import TrimMessagesPolicy

    class BrokenCounter(TiktokenCounter):
        def _count(self, message: Message) -> int:
            raise RuntimeError("tokenizer unavailable")

    request = TrimMessagesPolicy(counter=BrokenCounter()).request(history, 500)
    assert request.error == "RuntimeError: tokenizer unavailable"
    assert request.error is not None and request.messages == ()
    assert not request.valid


# ------------------------------------------------------------------ LlamaIndex
@pytest.fixture(scope="module")
def li() -> Iterator[None]:
    pytest.importorskip("llama_index.core", reason=BENCH)
    yield


def test_llamaindex_round_trip_keeps_ids(li: None, history: list[Message]) -> None:
    from foldbench.peers.llamaindex_peers import from_llamaindex, to_llamaindex

    converted = to_llamaindex(history)
    answers = [m.additional_kwargs["tool_call_id"] for m in converted if m.role == "tool"]
    assert answers == [rid for m in history for rid in m.tool_result_ids]
    assert from_llamaindex(converted) == history
    mixed = [
        Message(
            participant="Claude",
            content=(TextBlock(text="go"), ToolUseBlock(id="a", name="f", input={"x": 1})),
        ),
        Message(
            participant="bash",
            content=(
                ToolResultBlock(tool_use_id="a", content="1", is_error=True),
                TextBlock(text="note"),
            ),
        ),
        Message(participant="Alice", content=(TextBlock(text="hi"),)),
    ]
    assert from_llamaindex(to_llamaindex(mixed)) == mixed


def test_llamaindex_memory_flushes_into_facts(li: None, observations: list[Message]) -> None:
    from foldbench.peers.llamaindex_peers import MemoryPolicy

    with MemoryPolicy() as policy:
        requests = replay(policy, observations, 5000)
    assert all(r.error is None for r in requests)
    assert sum(r.summarizer_calls for r in requests) >= 1
    flushed = next(r for r in requests if r.summarizer_calls)
    assert "<fact>" in flushed.messages[1].text  # memory block rendered as a system message
    assert flushed.messages[0] == observations[0]
    assert requests[-1].tokens < request_tokens(observations, COUNTER)
    with MemoryPolicy() as other:
        assert replay(other, observations, 5000) == requests


def test_llamaindex_memory_without_blocks(li: None, history: list[Message]) -> None:
    from foldbench.peers.llamaindex_peers import MemoryPolicy

    with MemoryPolicy(facts=False) as policy:
        requests = replay(policy, history, 3000)
    assert all(r.summarizer_calls == 0 and r.error is None for r in requests)
    assert all(tool_pair_problems(r.messages) == [] for r in requests)
    # one user turn: the queue cannot flush at a user boundary, the overrun is recorded
    assert any(p.startswith("over budget") for p in requests[-1].problems)


def test_a_split_message_never_joins_another_message_after_trimming() -> None:
    pytest.importorskip("langchain_core", reason=BENCH)
    from foldbench.peers.langchain_peers import TrimMessagesPolicy

    call = ToolUseBlock(id="c1", name="bash", input={"cmd": "ls"})
    mixed = Message(
        participant="User",
        content=(
            ToolResultBlock(tool_use_id="c1", content="x " * 2000),
            TextBlock(text="please continue, now do Y"),
        ),
    )
    h = [
        Message.text_message("System", "sys"),
        Message.text_message("User", "the task"),
        Message(participant="Claude", content=(call,)),
        mixed,
    ]
    request = TrimMessagesPolicy().request(h, 300)
    system = [m for m in request.messages if m.participant == "System"]
    assert system and all("please continue" not in m.text for m in system)


def test_a_different_transcript_sharing_the_last_message_restarts_the_feed() -> None:
    from foldbench.peers.base import HistoryFeed

    shared = Message.text_message("User", "ok")
    a = [Message.text_message("User", "alpha"), Message.text_message("User", "beta"), shared]
    b = [Message.text_message("User", "gamma"), Message.text_message("User", "delta"), shared]
    feed = HistoryFeed()
    feed.new_messages(a)
    new, restart = feed.new_messages([*b, Message.text_message("User", "more")])
    assert restart and len(new) == 4


def test_the_meter_prices_summariser_calls_through_their_own_cache_marks() -> None:
    from context_manager.summarizer import Completion, CompletionRequest
    from context_manager.tokens import CharsCounter
    from foldbench.peers.base import HOUR_WRITE_PRICE, OUTPUT_PRICE, MeteredSummarizer

    class Fixed:
        def complete(self, request: CompletionRequest) -> Completion:
            return Completion(text="x" * 40, stop_reason="end_turn")  # 10 tokens

    counter = CharsCounter()
    meter = MeteredSummarizer(Fixed(), counter)
    long = [Message.text_message("User", "y" * 8000) for _ in range(2)]  # 2,000 tokens each
    ask = Message.text_message("User", "z" * 400)  # 100 tokens

    def call(messages: list[Message], marks: tuple[int, ...]) -> float:
        meter.complete(
            CompletionRequest(
                model="m", messages=tuple(messages), cache_breakpoints=marks, cache_ttl="1h"
            )
        )
        return meter.take()[3]

    # unmarked: every input token at the base price, output at the output price
    assert call([*long, ask], ()) == 4100 + 10 * OUTPUT_PRICE
    # marked: the prefix is written once (at the one-hour price), then read
    assert call([*long, ask], (1,)) == 4000 * HOUR_WRITE_PRICE + 100 + 10 * OUTPUT_PRICE
    assert call([*long, ask, ask], (1,)) == 4000 * 0.1 + 200 + 10 * OUTPUT_PRICE
    assert meter.take() == (0, 0, 0, 0.0)
