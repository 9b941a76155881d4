"""The OpenAI Agents SDK drop-in, driven through the SDK's own ``Runner`` with a
scripted model and a function tool, offline."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse
from agents.memory import Session
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer, Message
from context_manager.integrations.openai_agents import GROUP, FoldingSession, from_items, to_items
from context_manager.strategies.autobiographical import AutobiographicalStrategy

MAX_TOKENS, RESERVE = 1500, 300
OFFLINE = RunConfig(tracing_disabled=True)
LONG_RUN = 20  # tool calls in one run, more than the budget holds


class ScriptedModel(Model):
    """A model that answers from a script and records every input it is given."""

    def __init__(self, outputs: Iterator[list[Any]]) -> None:
        self.outputs = outputs
        self.inputs: list[list[dict[str, Any]]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        self.inputs.append([dict(i) for i in items])
        return ModelResponse(output=next(self.outputs), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def say(text: str, n: int) -> ResponseOutputMessage:
    content = [ResponseOutputText(type="output_text", text=text, annotations=[])]
    return ResponseOutputMessage(
        id=f"msg_{n}", type="message", role="assistant", status="completed", content=content
    )


def call(call_id: str, key: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call",
        call_id=call_id,
        name="lookup",
        arguments=json.dumps({"key": key}),
        id=f"fc_{call_id}",
        status="completed",
    )


def script(runs: int) -> Iterator[list[Any]]:
    """Per run: one call, then two parallel calls, then an answer."""
    for t in range(runs):
        yield [call(f"c{t}a", f"k{t}")]
        yield [call(f"c{t}b", f"x{t}"), call(f"c{t}c", f"y{t}")]
        yield [say(f"Answer {t}: " + "the notes say so " * 8, t)]


@function_tool
def lookup(key: str) -> str:
    """Look a key up in the project notes."""
    return f"notes on {key}: " + "a long and detailed record " * 10


def small_manager() -> ContextManager:
    strategy = AutobiographicalStrategy(
        compression_model="extractive",
        target_chunk_tokens=200,
        summary_target_tokens=40,
        recent_window_tokens=300,
    )
    summarizer = ExtractiveSummarizer()
    return ContextManager.open(
        path=":memory:", strategy=strategy, counter=CharsCounter(), summarizer=summarizer
    )


class RecordingSession(FoldingSession):
    """The session, with what each unlimited ``get_items()`` returned recorded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: list[list[dict[str, Any]]] = []
        self.stored_at_read: list[int] = []

    async def get_items(self, limit: int | None = None) -> list[Any]:
        found = await super().get_items(limit)
        if limit is None:
            self.reads.append([dict(i) for i in found])
            self.stored_at_read.append(len(self.items()))
        return found


def pairing_problems(items: list[dict[str, Any]]) -> list[str]:
    """Calls without their output, outputs before or without their call."""
    problems = []
    called: set[str] = set()
    answered: set[str] = set()
    for i, item in enumerate(items):
        if item.get("type") == "function_call":
            called.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            if item["call_id"] not in called:
                problems.append(f"{i}: output {item['call_id']} before or without its call")
            answered.add(item["call_id"])
    return problems + [f"call {c} never answered" for c in sorted(called - answered)]


def drive(session: FoldingSession, runs: int, **run: Any) -> tuple[ScriptedModel, list[str]]:
    model = ScriptedModel(script(runs))
    agent = Agent(name="engineer", instructions="Be careful.", model=model, tools=[lookup])
    session.use_agent(agent)
    questions = [f"Question {t}: " + "please check " * 10 for t in range(runs)]

    async def go() -> None:
        for question in questions:
            result = await Runner.run(agent, question, session=session, run_config=OFFLINE, **run)
            assert result.final_output.startswith("Answer ")

    asyncio.run(go())
    return model, questions


@pytest.fixture
def session() -> Iterator[RecordingSession]:
    s = RecordingSession(
        "chat-1", small_manager(), max_tokens=MAX_TOKENS, reserve_for_response=RESERVE
    )
    yield s
    s.close()


def test_it_is_an_agents_sdk_session() -> None:
    s = FoldingSession("s")
    assert isinstance(s, Session)
    assert s.session_settings is None
    s.close()


def test_each_run_starts_from_the_folded_context_and_every_item_is_kept(
    session: RecordingSession,
) -> None:
    runs = 6
    model, questions = drive(session, runs)
    assert len(model.inputs) == 3 * runs and len(session.reads) == runs
    # the first call of each run gets the session's folded items, then the new input
    for r in range(runs):
        first = model.inputs[3 * r]
        assert first == [*session.reads[r], {"role": "user", "content": questions[r]}]
    # later runs start from fewer items than are stored, within the budget
    folded = [r for r in range(runs) if len(session.reads[r]) < session.stored_at_read[r]]
    assert folded and folded == list(range(folded[0], runs))
    assert session.last_compile is not None
    assert session.last_compile.render_stats["tokens"] <= MAX_TOKENS - RESERVE
    assert session.last_compile.render_stats["request"]["tools"] > 0  # use_agent priced them
    assert session.last_compile.system_prompt == "Be careful."
    # what is folded is memory; what is shown whole is the items as stored
    stored = session.items()
    latest = session.reads[-1]
    assert any(item not in stored for item in latest)
    assert latest[-1] in stored
    for given in model.inputs:
        assert not pairing_problems(given)
    # every item is kept, in order, as the runner gave it
    per_run = 1 + 1 + 1 + 2 + 2 + 1  # question, call, output, 2 calls, 2 outputs, answer
    assert len(stored) == runs * per_run
    assert [i["content"] for i in stored if i.get("role") == "user"] == questions
    calls = [i["call_id"] for i in stored if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in stored if i.get("type") == "function_call_output"]
    assert calls == outputs == [f"c{t}{x}" for t in range(runs) for x in "abc"]
    assert stored[1] == call("c0a", "k0").model_dump(exclude_unset=True, mode="json")


def test_one_response_and_its_outputs_are_one_message_each(session: RecordingSession) -> None:
    drive(session, 2)
    messages = [s.message for s in session.manager.get_messages()]
    # question, call, output, two calls, two outputs, answer: 6 messages per run
    assert len(messages) == 12
    assert [m.tool_use_ids for m in messages[3:5]] == [("c0b", "c0c"), ()]
    assert messages[4].tool_result_ids == ("c0b", "c0c")
    assert messages[4].participant == "lookup"
    groups = [m.metadata[GROUP] for m in messages]
    assert len(set(groups)) == len(groups)
    assert session.manager.store.items(f"openai-agents/{session.session_id}")


def test_limit_pop_and_clear_work_on_the_stored_items(session: RecordingSession) -> None:
    drive(session, 2)
    stored = session.items()

    async def go() -> None:
        assert await session.get_items(limit=2) == stored[-2:]
        assert await session.get_items(limit=0) == []
        assert await session.pop_item() == stored[-1]  # the answer
        assert await session.pop_item() == stored[-2]  # the second of two outputs
        assert session.items() == stored[:-2]
        last = session.manager.get_messages()[-1].message
        assert last.tool_result_ids == ("c1b",)
        folded = await session.get_items()
        assert not pairing_problems(folded)
        assert folded[-1] == stored[-3]
        await session.add_items([stored[-2]])  # the output goes back to its message
        assert session.manager.get_messages()[-1].message.tool_result_ids == ("c1b", "c1c")
        await session.clear_session()
        assert session.items() == [] and session.manager.get_messages() == []
        assert await session.pop_item() is None
        assert await session.get_items() == []

    asyncio.run(go())


def test_a_reopened_store_gives_the_session_back(tmp_path: Any) -> None:
    path = tmp_path / "agent.sqlite"
    first = FoldingSession("s", ContextManager.open(path=path, counter=CharsCounter()))
    drive(first, 1)
    kept = first.items()
    first.close()
    again = FoldingSession("s", ContextManager.open(path=path, counter=CharsCounter()))
    assert again.items() == kept
    assert asyncio.run(again.get_items()) == kept  # nothing to fold: every item as stored
    other = FoldingSession("t", again.manager)
    assert other.items() == []
    again.close()


def test_conversions() -> None:
    participant, _, side = from_items(
        {"type": "function_call_output", "call_id": "c1", "output": "ok"}, names={"c1": "ls"}
    )
    assert (participant, side) == ("ls", "results")
    message = Message(
        participant="Claude", content=tuple(from_items(call("c1", "a").model_dump())[1])
    )
    assert to_items(message) == [
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"key": "a"}'}
    ]
    said = from_items({"role": "assistant", "content": [{"type": "output_text", "text": "hi"}]})
    assert said[0] == "Claude" and to_items(Message(participant="Claude", content=said[1])) == [
        {"role": "assistant", "content": "hi"}
    ]
    odd = from_items({"type": "web_search_call", "id": "ws_1", "status": "completed"})
    assert odd[2] == "agent" and "web_search_call" in odd[1][0].text  # type: ignore[union-attr]


def test_the_input_filter_folds_every_call_of_a_long_run(session: RecordingSession) -> None:
    runs = 3
    model = ScriptedModel(
        iter(
            [[call(f"c{k}", f"k{k}")] for k in range(LONG_RUN)]
            + [[say("Answer: " + "the notes say so " * 8, LONG_RUN)]]  # ids are unique
            + [step for step in script(runs)]
        )
    )
    agent = Agent(name="engineer", instructions="Be careful.", model=model, tools=[lookup])
    folding = RunConfig(tracing_disabled=True, call_model_input_filter=session.fold_model_input)

    async def go() -> None:
        await Runner.run(
            agent, "Look everything up.", session=session, run_config=folding, max_turns=30
        )
        for t in range(runs):
            await Runner.run(agent, f"Question {t}", session=session, run_config=folding)

    asyncio.run(go())
    stored = session.items()
    assert len(stored) == 1 + LONG_RUN * 2 + 1 + runs * 8
    sizes = [len(given) for given in model.inputs]
    assert len(sizes) == LONG_RUN + 1 + 3 * runs
    # within the long first run the input stops growing once the history is folded
    assert sizes[: LONG_RUN + 1] != [1 + 2 * k for k in range(LONG_RUN + 1)]
    assert sizes[LONG_RUN] < 1 + 2 * LONG_RUN
    for k, given in enumerate(model.inputs):
        assert not pairing_problems(given), k
    assert len(session.reads) >= len(model.inputs)  # every call read the folded context
    # each call sent the newest items as stored
    assert model.inputs[LONG_RUN][-2:] == stored[2 * LONG_RUN - 1 : 2 * LONG_RUN + 1]
    assert session.last_compile is not None
    assert session.last_compile.render_stats["tokens"] <= MAX_TOKENS - RESERVE


def test_the_default_store_is_sized_for_the_window() -> None:
    session = RecordingSession("s", max_tokens=2048)
    assert session.reserve_for_response == 256
    model, _ = drive(session, 12)
    assert session.last_compile is not None
    assert session.last_compile.render_stats["tokens"] <= 2048 - 256
    assert len(session.reads[-1]) < session.stored_at_read[-1]
    assert not pairing_problems(model.inputs[-1])
    session.close()
