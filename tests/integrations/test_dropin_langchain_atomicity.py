"""The LangChain middleware stores a state's new messages all or nothing: a write that
fails part way stores nothing, its retry stores each message once (by message id), and
what the store holds is what the model is sent."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

import contextlib

from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from context_manager import CharsCounter, ContextManager, StoreFullError
from context_manager.integrations.langchain import IDS, ContextFoldingMiddleware
from tests.support.dropin_faults import WriteFault

BIG = 200_000  # a window nothing is folded in
WAIT = 30.0


def open_manager(thread_id: str) -> ContextManager:
    return ContextManager.open(path=":memory:", counter=CharsCounter(), window_tokens=BIG)


def runtime(thread_id: str) -> Any:
    return SimpleNamespace(execution_info=SimpleNamespace(thread_id=thread_id))


def turn(t: int) -> list[BaseMessage]:
    """A user turn, a call, two parallel calls with their results, an answer."""
    call = {"name": "lookup", "args": {"key": f"k{t}"}, "type": "tool_call"}
    return [
        HumanMessage(f"question {t}", id=f"h{t}"),
        AIMessage("", tool_calls=[{**call, "id": f"c{t}a"}], id=f"a{t}"),
        ToolMessage(f"notes {t}a", tool_call_id=f"c{t}a", id=f"r{t}a"),
        AIMessage("", tool_calls=[{**call, "id": f"c{t}b"}, {**call, "id": f"c{t}c"}], id=f"b{t}"),
        ToolMessage(f"notes {t}b", tool_call_id=f"c{t}b", id=f"r{t}b"),
        ToolMessage(f"notes {t}c", tool_call_id=f"c{t}c", id=f"r{t}c"),
        AIMessage(f"answer {t}", id=f"z{t}"),
    ]


def stored_ids(folding: ContextFoldingMiddleware, thread_id: str = "t") -> list[str]:
    return [i for s in folding.manager(thread_id).get_messages() for i in s.message.metadata[IDS]]


def request(messages: Sequence[BaseMessage], thread_id: str = "t") -> ModelRequest[Any]:
    model = GenericFakeChatModel(messages=iter(["unused"]))
    return ModelRequest(model=model, messages=list(messages), tools=[], runtime=runtime(thread_id))


def check_agrees(folding: ContextFoldingMiddleware, state: Sequence[BaseMessage]) -> None:
    """Every message of the state stored once, in order, and sent to the model as the
    state's own object."""
    ids = stored_ids(folding)
    assert ids == [m.id for m in state]
    sent = folding.fold(request(state)).messages
    assert [m.id for m in sent] == [m.id for m in state]


@pytest.mark.parametrize("operation", ["after_model", "fold"])
def test_a_failed_write_stores_nothing_and_its_retry_stores_each_message_once(
    operation: str,
) -> None:
    faults = 0
    for k in range(1, 60):
        folding = ContextFoldingMiddleware(open_manager, max_tokens=BIG)
        before = turn(0)
        folding.after_model({"messages": before}, runtime("t"))
        state = [*before, *turn(1)]
        fault = WriteFault(fail_at=k)

        def write(folding: ContextFoldingMiddleware = folding, state: Any = state) -> None:
            if operation == "after_model":
                folding.after_model({"messages": state}, runtime("t"))
            else:
                folding.fold(request(state))

        with fault.on(folding.manager("t")), contextlib.suppress(StoreFullError):
            write()
        if not fault.fired:
            break
        faults += 1
        assert stored_ids(folding) == [m.id for m in before]  # nothing of it stored
        write()  # the retry
        check_agrees(folding, state)
        folding.close()
    assert faults >= 3  # the new messages are at least three writes


def test_threads_and_tasks_on_one_thread_id_store_every_message_once() -> None:
    folding = ContextFoldingMiddleware(open_manager, max_tokens=BIG)
    turns = [turn(t) for t in range(12)]
    states = [[m for t in turns[: n + 1] for m in t] for n in range(len(turns))]

    def record(n: int) -> None:
        folding.after_model({"messages": states[n]}, runtime("t"))

    async def tasks() -> None:
        await asyncio.gather(
            *(folding.aafter_model({"messages": s}, runtime("t")) for s in states[::2])
        )

    workers = [threading.Thread(target=record, args=(n,)) for n in range(1, len(states), 2)]
    workers.append(threading.Thread(target=lambda: asyncio.run(tasks())))
    for w in workers:
        w.start()
    for w in workers:
        w.join(WAIT)
    counts = Counter(stored_ids(folding))
    assert sorted(counts) == sorted(m.id for m in states[-1])
    assert set(counts.values()) == {1}
    folding.close()


def test_two_thread_ids_fold_side_by_side() -> None:
    """While one thread id is inside a write (a listener holds it) another stores."""
    folding = ContextFoldingMiddleware(open_manager, max_tokens=BIG)
    entered, release = threading.Event(), threading.Event()

    def hold(_: Any) -> None:
        entered.set()
        assert release.wait(WAIT)

    folding.manager("a").on_message(hold)
    worker = threading.Thread(
        target=folding.after_model, args=({"messages": turn(0)}, runtime("a"))
    )
    worker.start()
    assert entered.wait(WAIT)
    folding.after_model({"messages": turn(1)}, runtime("b"))  # not held up by "a"
    assert stored_ids(folding, "b") == [m.id for m in turn(1)]
    release.set()
    worker.join(WAIT)
    assert stored_ids(folding, "a") == [m.id for m in turn(0)]
    folding.close()


def test_an_agent_whose_model_call_failed_stores_each_message_once_on_rerun() -> None:
    """The whole agent with LangChain's fake model: the disk fills at the second write
    of the first model call (the second message); the rerun stores every message of
    the state once."""

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:  # type: ignore[override]
            return self

    folding = ContextFoldingMiddleware(open_manager, max_tokens=BIG)
    model = Scripted(messages=iter(["noted", "noted again"]))
    agent = create_agent(model=model, middleware=[folding])
    config = {"configurable": {"thread_id": "t"}}
    question = HumanMessage("pay invoice 42", id="q1")
    state = {"messages": [HumanMessage("hello once", id="q0"), question]}
    with WriteFault(fail_at=2).on(folding.manager("t")), pytest.raises(StoreFullError):
        agent.invoke(state, config)
    assert stored_ids(folding) == []
    done = agent.invoke(state, config)
    assert stored_ids(folding) == [m.id for m in done["messages"]]
    assert Counter(stored_ids(folding))["q1"] == 1
    folding.close()
