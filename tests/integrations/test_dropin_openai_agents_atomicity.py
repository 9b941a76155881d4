"""The OpenAI Agents SDK session writes all or nothing: a write that fails part way
stores nothing, its retry stores each item once, and the session's items and the
manager's history (what the model is sent) always agree."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

import contextlib

from context_manager import CharsCounter, ContextManager, StoreFullError
from context_manager.integrations.openai_agents import FoldingSession, from_items
from tests.support.dropin_faults import WriteFault

BIG = 200_000  # a window nothing is folded in: the compiled request shows every item


def open_manager(path: Path | str = ":memory:") -> ContextManager:
    return ContextManager.open(path=path, counter=CharsCounter(), window_tokens=BIG)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def said(text: str, item_id: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "message", "role": "assistant", "content": text}
    if item_id is not None:
        item["id"] = item_id
    return item


def call(call_id: str, key: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": "lookup",
        "arguments": json.dumps({"key": key}),
        "id": f"fc_{call_id}",
    }


def output(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def texts(items: list[dict[str, Any]]) -> list[str]:
    out = []
    for i in items:
        if "content" in i:
            out.append(str(i["content"]))
        elif i.get("type") == "function_call":
            out.append(f"call {i['call_id']}")
        else:
            out.append(f"output {i['call_id']}: {i['output']}")
    return out


def manager_texts(session: FoldingSession) -> list[str]:
    return [s.message.text for s in session.manager.get_messages()]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def views_agree(session: FoldingSession) -> None:
    """The session's items, the folded items and the compiled request agree (a call
    not answered yet is not sent)."""
    stored = session.items()
    answered = {i["call_id"] for i in stored if i.get("type") == "function_call_output"}
    sendable = [i for i in stored if i.get("type") != "function_call" or i["call_id"] in answered]
    folded = run(session.get_items())
    assert folded == sendable
    assert session.last_compile is not None
    # the history holds each item once, in order: its blocks are the items' blocks
    history = [b for s in session.manager.get_messages() for b in s.message.content]
    names = {i["call_id"]: i["name"] for i in stored if i.get("type") == "function_call"}
    assert history == [b for i in stored for b in from_items(i, names=names)[1]]


# ----------------------------------------------------------- the observed bug
def test_a_failed_add_stores_nothing_and_its_retry_stores_it_once() -> None:
    """The slot append failing after the message was added left the message in the
    history; the retry stored it a second time."""
    for k in range(1, 30):
        session = FoldingSession("s", open_manager(), max_tokens=BIG)
        run(session.add_items([user("hello once")]))
        fault = WriteFault(fail_at=k)
        with fault.on(session.manager), contextlib.suppress(StoreFullError):
            run(session.add_items([user("pay invoice 42")]))
        if not fault.fired:  # k is past the operation's last write
            assert k > 1
            break
        assert texts(session.items()) == ["hello once"]
        assert manager_texts(session) == ["hello once"]
        run(session.add_items([user("pay invoice 42")]))  # the caller's retry
        assert texts(session.items()) == ["hello once", "pay invoice 42"]
        assert manager_texts(session) == ["hello once", "pay invoice 42"]
        views_agree(session)
        session.close()


# ------------------------------------------------- a fault at every write point
def _calls(s: FoldingSession) -> None:
    run(s.add_items([user("look k1 and k2 up"), call("c1", "k1"), call("c2", "k2")]))


def _answered(s: FoldingSession) -> None:
    _calls(s)
    run(s.add_items([output("c1", "notes"), output("c2", "more"), said("a", "m1"), said("b")]))


def _asked(s: FoldingSession) -> None:
    _answered(s)
    run(s.add_items([user("thanks")]))


# name: (set-up, operation); the calls' outputs join the calls' message
OPERATIONS: dict[str, tuple[Callable[[FoldingSession], None], Callable[[FoldingSession], Any]]] = {
    "add_items": (
        _calls,
        lambda s: run(
            s.add_items(
                [output("c1", "notes"), output("c2", "more"), said("found", "m1"), user("ok")]
            )
        ),
    ),
    "pop_item (a message's only item)": (_asked, lambda s: run(s.pop_item())),
    "pop_item (one of a message's two)": (_answered, lambda s: run(s.pop_item())),
    "clear_session": (_asked, lambda s: run(s.clear_session())),
}

FAULTS: dict[str, int] = {}
"""The faults injected per operation (one per write point), for the report."""


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_a_fault_at_every_write_point_stores_nothing(name: str) -> None:
    setup, operation = OPERATIONS[name]
    expected = FoldingSession("s", open_manager(), max_tokens=BIG)
    setup(expected)
    operation(expected)
    after = expected.items()
    faults = 0
    for k in range(1, 100):
        session = FoldingSession("s", open_manager(), max_tokens=BIG)
        setup(session)
        views_agree(session)
        before, history = session.items(), manager_texts(session)
        fault = WriteFault(fail_at=k)
        with fault.on(session.manager), contextlib.suppress(StoreFullError):
            operation(session)
        if not fault.fired:
            break
        faults += 1
        assert session.items() == before
        assert manager_texts(session) == history
        views_agree(session)
        operation(session)  # the retry
        assert session.items() == after
        views_agree(session)
        session.close()
    FAULTS[name] = faults
    assert faults >= 2


def test_items_added_again_by_id_are_stored_once() -> None:
    """A batch whose first add committed but whose caller never heard (a cancelled
    task) is added again: the items with an id are not stored twice."""
    session = FoldingSession("s", open_manager(), max_tokens=BIG)
    batch = [call("c1", "k1"), output("c1", "notes"), said("found it", "msg_1")]
    run(session.add_items(batch))
    run(session.add_items(batch))
    fake = {"role": "assistant", "content": "same", "id": "__fake_id__"}
    run(session.add_items([fake, fake]))  # the SDK's stand-in id is no item's own
    assert session.items() == [*batch, fake, fake]
    views_agree(session)


def test_a_reopened_session_makes_the_history_agree_with_its_items(tmp_path: Path) -> None:
    """A store left disagreeing (by an earlier version's failed write, or by writes
    through the manager) is put right when the session first reads it, and says so."""
    path = tmp_path / "s.db"
    session = FoldingSession("s", open_manager(path), max_tokens=BIG)
    run(session.add_items([user("hello once"), said("hi", "msg_0"), user("bye")]))
    cm = session.manager
    _first, second, third = [s.id for s in cm.get_messages()]
    cm.add_message("User", "pay invoice 42", metadata={"openai_agents_session": "s"})
    cm.add_message("User", "someone else's", metadata={"openai_agents_session": "other"})
    cm.edit_message(second, "hi there")
    cm.remove_message(third)
    session.close()
    reopened = FoldingSession("s", open_manager(path), max_tokens=BIG)
    assert texts(reopened.items()) == ["hello once", "hi"]
    assert len(reopened.repairs) == 3
    assert manager_texts(reopened) == ["hello once", "hi", "someone else's"]
    reopened.close()
    again = FoldingSession("s", open_manager(path), max_tokens=BIG)
    assert again.items() and again.repairs == []
    again.close()


def test_tasks_and_threads_on_one_session_lose_and_duplicate_nothing() -> None:
    session = FoldingSession("s", open_manager(), max_tokens=BIG)

    async def tasks(prefix: str) -> None:
        await asyncio.gather(
            *(
                session.add_items([user(f"{prefix} {n}"), said(f"re {prefix} {n}")])
                for n in range(8)
            ),
            *(session.get_items() for _ in range(3)),
        )

    workers = [threading.Thread(target=lambda p=p: run(tasks(p))) for p in ("a", "b", "c")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30.0)
    stored = texts(session.items())
    assert sorted(stored) == sorted(
        t for p in "abc" for n in range(8) for t in (f"{p} {n}", f"re {p} {n}")
    )
    for at in range(0, len(stored), 2):  # each add's items stayed together
        assert stored[at + 1] == f"re {stored[at]}"
    views_agree(session)


def test_two_sessions_write_side_by_side() -> None:
    """While one session is inside a write (a listener holds it) another stores."""
    a = FoldingSession("a", open_manager(), max_tokens=BIG)
    b = FoldingSession("b", open_manager(), max_tokens=BIG)
    entered, release = threading.Event(), threading.Event()

    def hold(_: Any) -> None:
        entered.set()
        assert release.wait(30.0)

    a.manager.on_message(hold)
    worker = threading.Thread(target=lambda: run(a.add_items([user("held")])))
    worker.start()
    assert entered.wait(30.0)
    run(b.add_items([user("not held up")]))
    assert texts(b.items()) == ["not held up"]
    release.set()
    worker.join(30.0)
    assert texts(a.items()) == ["held"]


def test_two_session_objects_on_one_store_see_each_others_items() -> None:
    manager = open_manager()
    first = FoldingSession("s", manager, max_tokens=BIG)
    second = FoldingSession("s", manager, max_tokens=BIG)
    run(first.add_items([user("one"), call("c1", "k1")]))
    run(second.add_items([output("c1", "notes"), said("two", "m2")]))
    run(first.add_items([said("three", "m3")]))
    assert run(second.pop_item()) == said("three", "m3")
    assert first.items() == second.items()
    assert texts(first.items()) == ["one", "call c1", "output c1: notes", "two"]
    views_agree(first)
    views_agree(second)
