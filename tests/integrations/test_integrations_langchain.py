"""The LangChain drop-in, driven through ``create_agent`` with LangChain's own classes
and its fake chat model; and the benchmark's LangChain peers, which convert as it does."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from context_manager import (
    CharsCounter,
    ContextManager,
    ExtractiveSummarizer,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.integrations.langchain import IDS, ContextFoldingMiddleware
from context_manager.integrations.langchain_messages import from_langchain, to_langchain
from context_manager.integrations.parts import CONTINUES, SOURCE
from context_manager.strategies.autobiographical import AutobiographicalStrategy

MAX_TOKENS, RESERVE = 1500, 300


class ScriptedChat(GenericFakeChatModel):
    """LangChain's fake chat model, with tools bound as given and its inputs recorded."""

    received: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChat:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.received.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


@tool
def lookup(key: str) -> str:
    """Look a key up in the project notes."""
    return f"notes on {key}: " + "a long and detailed record " * 10


def script(turns: int) -> Iterator[AIMessage]:
    """Per turn: one call, then two parallel calls, then an answer."""
    for t in range(turns):
        yield AIMessage(content="", tool_calls=[_call(f"c{t}a", f"k{t}")])
        yield AIMessage(content="", tool_calls=[_call(f"c{t}b", f"x{t}"), _call(f"c{t}c", f"y{t}")])
        yield AIMessage(content=f"Answer {t}: " + "the notes say so " * 8)


def _call(call_id: str, key: str) -> dict[str, Any]:
    return {"name": "lookup", "args": {"key": key}, "id": call_id, "type": "tool_call"}


def small_manager(thread_id: str) -> ContextManager:
    strategy = AutobiographicalStrategy(
        compression_model="extractive",
        target_chunk_tokens=200,
        summary_target_tokens=40,
        recent_window_tokens=300,
    )
    return ContextManager.open(
        path=":memory:",
        strategy=strategy,
        counter=CharsCounter(),
        summarizer=ExtractiveSummarizer(),
    )


def run_thread(
    folding: ContextFoldingMiddleware, thread_id: str, turns: int
) -> tuple[list[BaseMessage], list[list[BaseMessage]]]:
    model = ScriptedChat(messages=script(turns), received=[])
    agent = create_agent(
        model=model,
        tools=[lookup],
        system_prompt="You are a careful engineer.",
        middleware=[folding],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": thread_id}}
    state: dict[str, Any] = {}
    for t in range(turns):
        question = HumanMessage(content=f"Question {t} on {thread_id}: " + "please check " * 10)
        state = agent.invoke({"messages": [question]}, config)
    return state["messages"], model.received


def pairing_problems(messages: Sequence[BaseMessage]) -> list[str]:
    """Calls not answered right after them, results answering no call before them."""

    def calls(m: BaseMessage) -> set[Any]:
        if not isinstance(m, AIMessage):
            return set()
        return {c["id"] for c in [*m.tool_calls, *m.invalid_tool_calls]}

    problems = []
    for i, m in enumerate(messages):
        if calls(m):
            answered = set()
            for later in messages[i + 1 :]:
                if not isinstance(later, ToolMessage):
                    break
                answered.add(later.tool_call_id)
            missing = calls(m) - answered
            if missing:
                problems.append(f"{i}: {sorted(missing)} not answered")
        if isinstance(m, ToolMessage):
            j = i - 1
            while j >= 0 and isinstance(messages[j], ToolMessage):
                j -= 1
            asked = messages[j] if j >= 0 else None
            if asked is None or m.tool_call_id not in calls(asked):
                problems.append(f"{i}: result {m.tool_call_id} answers no call before it")
    return problems


@pytest.fixture
def folding() -> Iterator[ContextFoldingMiddleware]:
    middleware = ContextFoldingMiddleware(
        small_manager, max_tokens=MAX_TOKENS, reserve_for_response=RESERVE
    )
    yield middleware
    middleware.close()


def test_the_model_sees_the_folded_history_and_the_state_keeps_everything(
    folding: ContextFoldingMiddleware,
) -> None:
    turns = 6
    state, received = run_thread(folding, "t1", turns)
    assert len(received) == 3 * turns
    assert len(state) == turns * (1 + 3 + 3)  # question, 3 calls, 3 results, answer - 1 call
    # the history each call would have carried whole: the state before its reply
    replies = [i for i, m in enumerate(state) if isinstance(m, AIMessage)]
    assert len(replies) == len(received)
    full = [state[:i] for i in replies]
    sent = [[m for m in r if m.type != "system"] for r in received]
    assert sent[0] == full[0]  # nothing to fold yet: the history as it is
    folded = [k for k, (s, f) in enumerate(zip(sent, full, strict=True)) if len(s) < len(f)]
    assert folded, "no call was folded"
    assert folded == list(range(folded[0], len(received)))  # from then on, every call
    # once the history outgrows the budget, every call is folded and fits it
    history_tokens = [
        sum(len(f"{m.content}{getattr(m, 'tool_calls', '')}") for m in f) / 4 for f in full
    ]
    over = [k for k, tokens in enumerate(history_tokens) if tokens > MAX_TOKENS - RESERVE]
    assert over and set(over) <= set(folded)
    last = folding.last_compile("t1")
    assert last is not None and last.render_stats["tokens"] <= MAX_TOKENS - RESERVE
    # the system prompt goes as the model's system message, once, and is priced
    assert all(r[0].type == "system" for r in received)
    assert last.system_prompt == "You are a careful engineer."
    assert last.render_stats["request"]["system"] > 0
    assert last.render_stats["request"]["tools"] > 0
    for s in sent:
        assert not pairing_problems(s)
        assert all(m.type != "system" for m in s)
    # the newest messages go to the model as the state's own objects
    by_id = {m.id: m for m in state}
    assert sent[-1][-1] is not None and sent[-1][-1].id in by_id
    shown = [m for m in sent[-1] if m.id in by_id]
    assert all(m == by_id[m.id] for m in shown)
    # the folded part is memory: text the state never held
    assert any(m.id is None or m.id not in by_id for m in sent[-1])


def test_every_message_is_stored_once_and_parallel_results_as_one(
    folding: ContextFoldingMiddleware,
) -> None:
    state, _ = run_thread(folding, "t1", 4)
    stored = folding.manager("t1").get_messages()
    ids = [i for s in stored for i in s.message.metadata[IDS]]
    assert ids == [m.id for m in state]
    assert len(ids) == len(set(ids))
    assert len(stored) == len(state) - 4  # each pair of parallel results is one message
    for s in stored:
        calls = [b for b in s.message.content if isinstance(b, ToolUseBlock)]
        results = s.message.tool_result_ids
        assert not (calls and results)
    pairs = [s.message.tool_result_ids for s in stored if len(s.message.tool_result_ids) == 2]
    assert pairs == [(f"c{t}b", f"c{t}c") for t in range(4)]
    # the store holds the messages as the state does
    texts = [s.message.text for s in stored if s.message.participant == "User"]
    assert texts == [m.content for m in state if isinstance(m, HumanMessage)]


def test_two_threads_use_two_stores(folding: ContextFoldingMiddleware) -> None:
    state_a, _ = run_thread(folding, "a", 2)
    state_b, _ = run_thread(folding, "b", 3)
    assert folding.threads == ["a", "b"]
    a, b = folding.manager("a"), folding.manager("b")
    assert a is not b and a.store is not b.store
    ids_a = [i for s in a.get_messages() for i in s.message.metadata[IDS]]
    ids_b = [i for s in b.get_messages() for i in s.message.metadata[IDS]]
    assert ids_a == [m.id for m in state_a] and ids_b == [m.id for m in state_b]
    assert not set(ids_a) & set(ids_b)
    assert all(" on a:" not in s.message.text for s in b.get_messages())


def test_a_store_reopened_for_a_thread_adds_nothing_twice(tmp_path: Any) -> None:
    def on_disk(thread_id: str) -> ContextManager:
        strategy = AutobiographicalStrategy(compression_model="extractive")
        return ContextManager.open(
            path=tmp_path / f"{thread_id}.sqlite",
            strategy=strategy,
            counter=CharsCounter(),
            summarizer=ExtractiveSummarizer(),
        )

    checkpointer = InMemorySaver()
    config = {"configurable": {"thread_id": "t"}}
    for run in range(2):
        folding = ContextFoldingMiddleware(on_disk)
        model = ScriptedChat(messages=iter([f"reply {run}"]), received=[])
        agent = create_agent(model=model, middleware=[folding], checkpointer=checkpointer)
        state = agent.invoke({"messages": [HumanMessage(content=f"hello {run}")]}, config)
        stored = folding.manager("t").get_messages()
        ids = [i for s in stored for i in s.message.metadata[IDS]]
        assert ids == [m.id for m in state["messages"]]
        folding.close()
    assert [m.content for m in state["messages"]] == ["hello 0", "reply 0", "hello 1", "reply 1"]


def test_async_agents_fold_too(folding: ContextFoldingMiddleware) -> None:
    model = ScriptedChat(messages=script(3), received=[])
    agent = create_agent(model=model, tools=[lookup], middleware=[folding])

    async def drive() -> list[BaseMessage]:
        messages: list[Any] = []
        for t in range(3):
            messages.append(HumanMessage(content=f"Question {t}: " + "please check " * 10))
            state = await agent.ainvoke(
                {"messages": messages}, {"configurable": {"thread_id": "async"}}
            )
            messages = state["messages"]
        return messages

    state = asyncio.run(drive())
    stored = folding.manager("async").get_messages()
    assert [i for s in stored for i in s.message.metadata[IDS]] == [m.id for m in state]
    assert len(model.received[-1]) < len(state)
    assert not pairing_problems(model.received[-1])


def test_conversions() -> None:
    call = AIMessage(
        content=[{"type": "text", "text": "checking"}],
        tool_calls=[{"name": "ls", "args": {"path": "."}, "id": "c1", "type": "tool_call"}],
    )
    [stored] = from_langchain([call])
    assert stored.participant == "Claude"
    assert stored.content[1] == ToolUseBlock(id="c1", name="ls", input={"path": "."})
    failed = ToolMessage(content="no such file", tool_call_id="c1", name="ls", status="error")
    [result] = from_langchain([failed])
    assert result.participant == "ls" and result.content[0].is_error  # type: ignore[union-attr]

    back = to_langchain([stored])
    assert isinstance(back[0], AIMessage) and back[0].tool_calls == call.tool_calls
    assert back[0].content == "checking"
    answer = to_langchain([result])
    assert isinstance(answer[0], ToolMessage)
    assert (answer[0].tool_call_id, answer[0].status, answer[0].name) == ("c1", "error", "ls")


def test_importing_the_package_loads_no_framework() -> None:
    code = (
        "import sys, context_manager, context_manager.integrations as i; "
        "assert not [m for m in sys.modules if m.split('.')[0] in "
        "('langchain', 'langchain_core', 'langgraph', 'agents')], sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_malformed_call_and_its_error_result_are_stored_once_and_sent_together(
    folding: ContextFoldingMiddleware,
) -> None:
    bad = {"name": "lookup", "args": '{"key": ', "id": "bad1", "error": None}
    replies = iter(
        [
            AIMessage(content="trying", invalid_tool_calls=[bad]),  # type: ignore[list-item]
            AIMessage(content="first answer"),
            AIMessage(content="second answer"),
        ]
    )
    model = ScriptedChat(messages=replies, received=[])
    agent = create_agent(
        model=model, tools=[lookup], middleware=[folding], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t"}}
    for question in ("look it up", "again"):
        state = agent.invoke({"messages": [HumanMessage(content=question)]}, config)
    stored = [s.message for s in folding.manager("t").get_messages()]
    results = [i for m in stored for i in m.tool_result_ids]
    assert results.count("bad1") == sum(
        isinstance(m, ToolMessage) and m.tool_call_id == "bad1" for m in state["messages"]
    )
    assert results.count("bad1") == 1
    for given in model.received:
        assert not pairing_problems(given)


def test_the_default_store_is_sized_for_the_window() -> None:
    folding = ContextFoldingMiddleware(max_tokens=2048)
    assert folding.reserve_for_response == 256
    state, received = run_thread(folding, "t", 12)
    request = folding.last_compile("t")
    assert request is not None and request.render_stats["tokens"] <= 2048 - 256
    assert len(received[-1]) - 1 < len(state) - 1  # folded (the system message aside)
    assert not pairing_problems(received[-1][1:])
    folding.close()


def test_threads_fold_side_by_side(folding: ContextFoldingMiddleware) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = list(pool.map(lambda t: run_thread(folding, t, 3), ["x", "y", "z"]))
    for thread_id, (state, received) in zip(["x", "y", "z"], runs, strict=True):
        stored = folding.manager(thread_id).get_messages()
        assert [i for s in stored for i in s.message.metadata[IDS]] == [m.id for m in state]
        assert all(f" on {thread_id}:" in m.content for m in state if isinstance(m, HumanMessage))
        assert all(not pairing_problems(r[1:]) for r in received)


# ------------------------------------------------------------------ one conversion, two users
PLOT = "https://example.com/plot.png"

HISTORY = [
    Message(
        participant="User",
        content=(TextBlock(text="What is in the plot?"), ImageBlock(url=PLOT)),
    ),
    Message(
        participant="Claude",
        content=(
            ThinkingBlock(thinking="look it up", signature="sig"),
            TextBlock(text="Checking."),
            ToolUseBlock(id="c1", name="lookup", input={"key": "plot"}),
        ),
    ),
    Message(
        participant="lookup",
        content=(ToolResultBlock(tool_use_id="c1", content="a rising line"),),
    ),
]
"""A history for the model: an image, signed reasoning, a call and its result."""

LANGCHAIN_HISTORY: list[BaseMessage] = [
    HumanMessage(
        content=[{"type": "text", "text": "Listen."}, {"type": "audio", "file_id": "f-1"}],
        id="h1",
    ),
    AIMessage(
        content=[{"type": "reasoning", "reasoning": "look it up"}, "Checking."],
        tool_calls=[_call("c1", "note")],
        id="a1",
    ),
    ToolMessage(content="a voice memo", tool_call_id="c1", name="lookup", id="t1"),
]
"""An agent's state: a block we have no type for, reasoning, a call and its result."""


def shape(message: BaseMessage) -> dict[str, Any]:
    """What a model is given of a message: all but its id and its part marks."""
    extra = {k: v for k, v in message.additional_kwargs.items() if k not in (SOURCE, CONTINUES)}
    return {
        "type": message.type,
        "content": message.content,
        "name": message.name,
        "extra": extra,
        "tool_calls": getattr(message, "tool_calls", None),
        "tool_call_id": getattr(message, "tool_call_id", None),
        "status": getattr(message, "status", None),
    }


def middleware_sends(history: Sequence[Message]) -> list[BaseMessage]:
    """What the middleware sends for a thread whose store holds ``history`` (messages the
    state never held, so the middleware converts every one of them)."""

    def open_manager(thread_id: str) -> ContextManager:
        manager = small_manager(thread_id)
        for m in history:
            manager.add_message(m.participant, m.content)
        return manager

    folding = ContextFoldingMiddleware(open_manager, max_tokens=100_000)
    model = ScriptedChat(messages=iter(["noted"]), received=[])
    agent = create_agent(model=model, tools=[lookup], middleware=[folding])
    agent.invoke({"messages": [HumanMessage("And now?")]}, {"configurable": {"thread_id": "t"}})
    folding.close()
    *converted, asked = model.received[-1]
    assert asked.content == "And now?"
    return converted


def middleware_stores(given: Sequence[BaseMessage]) -> list[Message]:
    """What the middleware stores of an agent state holding ``given``."""
    folding = ContextFoldingMiddleware(max_tokens=100_000)
    model = ScriptedChat(messages=iter(["noted"]), received=[])
    agent = create_agent(model=model, tools=[lookup], middleware=[folding])
    agent.invoke({"messages": list(given)}, {"configurable": {"thread_id": "t"}})
    stored = [s.message for s in folding.manager("t").get_messages()]
    folding.close()
    assert stored[-1].text == "noted"  # the model's reply, stored after the state
    return stored[:-1]


def trim_peer_exchanges(
    history: Sequence[Message], returned: Sequence[BaseMessage], monkeypatch: pytest.MonkeyPatch
) -> tuple[list[BaseMessage], tuple[Message, ...]]:
    """What the benchmark's trim_messages peer hands LangChain for ``history``, and what
    it sends when LangChain hands it back ``returned``."""
    import langchain_core.messages

    from foldbench.peers.langchain_peers import TrimMessagesPolicy

    handed: list[BaseMessage] = []

    def trim_messages(messages: Sequence[BaseMessage], **options: Any) -> list[BaseMessage]:
        handed.extend(messages)
        return list(returned)

    monkeypatch.setattr(langchain_core.messages, "trim_messages", trim_messages)
    request = TrimMessagesPolicy().request(list(history), 100_000)
    assert request.error is None
    return handed, request.messages


def test_the_benchmark_peers_and_the_middleware_send_the_same_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handed, _ = trim_peer_exchanges(HISTORY, [], monkeypatch)
    sent = middleware_sends(HISTORY)
    assert [shape(m) for m in handed] == [shape(m) for m in sent]
    # both keep the image, the reasoning and the call paired with its result
    assert [m.type for m in sent] == ["human", "ai", "tool"]
    assert sent[0].content == [
        {"type": "text", "text": "What is in the plot?"},
        {"type": "image", "url": PLOT},
    ]
    assert sent[1].content == [
        {"type": "thinking", "thinking": "look it up", "signature": "sig"},
        {"type": "text", "text": "Checking."},
    ]
    assert isinstance(sent[1], AIMessage) and isinstance(sent[2], ToolMessage)
    assert sent[1].tool_calls == [_call("c1", "plot")]
    assert sent[2].tool_call_id == "c1"


def test_the_benchmark_peers_and_the_middleware_read_the_same_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked = [Message.text_message("User", "hi")]
    _, peer_read = trim_peer_exchanges(asked, LANGCHAIN_HISTORY, monkeypatch)
    stored = middleware_stores(LANGCHAIN_HISTORY)
    assert [(m.participant, m.content) for m in peer_read] == [
        (m.participant, m.content) for m in stored
    ]
    # both keep the block we have no type for (as its JSON), the reasoning and the pair
    assert stored[0].content == (
        TextBlock(text="Listen."),
        TextBlock(text='{"type": "audio", "file_id": "f-1"}'),
    )
    assert stored[1].content == (
        ThinkingBlock(thinking="look it up"),
        TextBlock(text="Checking."),
        ToolUseBlock(id="c1", name="lookup", input={"key": "note"}),
    )
    assert stored[2].content == (ToolResultBlock(tool_use_id="c1", content="a voice memo"),)


def test_the_peers_use_the_conversion_the_library_ships() -> None:
    from context_manager.integrations import langchain, langchain_messages
    from foldbench.peers import langchain_peers, langmem_peers

    assert langchain.langchain_messages is langchain_messages  # the middleware converts here
    for module in (langchain_peers, langmem_peers):
        assert module.to_langchain is langchain_messages.to_langchain
        assert module.from_langchain is langchain_messages.from_langchain
