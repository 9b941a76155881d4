"""The OpenAI Agents SDK session writes all or nothing: a write that fails part way
stores nothing, its retry stores each item once, and the session's items and the
manager's history (what the model is sent) always agree."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from context_manager import CharsCounter, ContextManager, StoreFullError
from context_manager.integrations.openai_agents import FoldingSession
from tests.integrations.dropin_faults import WriteFault

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
    """The session's items, the folded items and the compiled request agree."""
    stored = session.items()
    folded = run(session.get_items())
    assert folded == stored
    compiled = session.last_compile
    assert compiled is not None
    assert [m.text for m in compiled.messages] == manager_texts(session)


# ----------------------------------------------------------- the observed bug
def test_a_failed_add_stores_nothing_and_its_retry_stores_it_once() -> None:
    """The slot append failing after the message was added left the message in the
    history; the retry stored it a second time."""
    for k in range(1, 30):
        session = FoldingSession("s", open_manager(), max_tokens=BIG)
        run(session.add_items([user("hello once")]))
        fault = WriteFault(fail_at=k)
        with fault.on(session.manager):
            try:
                run(session.add_items([user("pay invoice 42")]))
            except StoreFullError:
                pass
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
