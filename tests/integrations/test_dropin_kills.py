"""The drop-ins killed mid-write: a child process runs a scripted conversation through
the OpenAI Agents SDK session or the LangChain middleware on a store file, reporting
each acknowledged operation on a pipe, and is SIGKILLed at a random point. Reopened,
the store holds every acknowledged write once, the one in flight whole or not at all,
and the framework's view and the history agree.

``DROPIN_KILL_TRIALS`` sets the trials per integration (6 by default; ``make
dropin-kills`` runs 50)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from context_manager import CharsCounter, ContextManager

TRIALS = int(os.environ.get("DROPIN_KILL_TRIALS", "6"))
OPERATIONS = 24  # per trial
BIG = 200_000

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def open_manager(path: Path) -> ContextManager:
    return ContextManager.open(path=path, counter=CharsCounter(), window_tokens=BIG)


def killed(run: Callable[[], None], rng: random.Random) -> int:
    """Fork a child that calls ``run(ack)``-style code and kill it after a random
    number of acknowledgements; returns how many it acknowledged in all."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(read_end)
            os.environ["DROPIN_ACK_FD"] = str(write_end)
            run()
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    wanted = rng.randrange(OPERATIONS + 1)
    acks = b""
    while acks.count(b"\n") < wanted:
        chunk = os.read(read_end, 4096)
        if not chunk:
            break
        acks += chunk
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    while chunk := os.read(read_end, 4096):  # what it acknowledged before it died
        acks += chunk
    os.close(read_end)
    return acks.count(b"\n")


def ack() -> None:
    os.write(int(os.environ["DROPIN_ACK_FD"]), b"1\n")


# ------------------------------------------------------------ OpenAI Agents SDK
def _session_script(seed: int) -> list[tuple[str, list[dict[str, Any]]]]:
    """The operations of a trial: adds (with ids or without), pops, a rare clear."""
    rng = random.Random(seed)
    ops: list[tuple[str, list[dict[str, Any]]]] = []
    for n in range(OPERATIONS):
        roll = rng.random()
        if roll < 0.15:
            ops.append(("pop", []))
        elif roll < 0.2:
            ops.append(("clear", []))
        elif roll < 0.6:
            ops.append(("add", [{"role": "user", "content": f"u{n}"}]))
        else:
            c = f"c{n}"
            ops.append(
                (
                    "add",
                    [
                        {
                            "type": "function_call",
                            "call_id": c,
                            "name": "f",
                            "arguments": "{}",
                            "id": f"fc{n}",
                        },
                        {"type": "function_call_output", "call_id": c, "output": f"o{n}"},
                        {"type": "message", "role": "assistant", "content": f"a{n}", "id": f"m{n}"},
                    ],
                )
            )
    return ops


def _session_models(ops: list[tuple[str, list[dict[str, Any]]]]) -> list[list[dict[str, Any]]]:
    """The session's items after each number of operations."""
    items: list[dict[str, Any]] = []
    out = [list(items)]
    for kind, batch in ops:
        if kind == "add":
            items = [*items, *batch]
        elif kind == "pop":
            items = items[:-1]
        else:
            items = []
        out.append(list(items))
    return out


def _tally() -> dict[str, int]:
    """What a kill run counts: trials, lost and duplicated items, disagreements between
    the framework's view and the request, operations in flight found whole, kills that
    came before the child finished."""
    return dict.fromkeys(
        ("trials", "lost", "duplicated", "disagreements", "in_flight_kept", "interrupted"), 0
    )


def test_the_session_killed_mid_write_keeps_every_acknowledged_item_once(
    tmp_path: Path,
) -> None:
    pytest.importorskip("agents")
    from context_manager.integrations.openai_agents import FoldingSession, from_items

    tally = _tally()
    for trial in range(TRIALS):
        rng = random.Random(1000 + trial)
        path = tmp_path / f"s{trial}.db"
        ops = _session_script(trial)

        def child(path: Path = path, ops: list[Any] = ops) -> None:
            session = FoldingSession("s", open_manager(path), max_tokens=BIG)
            for kind, batch in ops:
                if kind == "add":
                    asyncio.run(session.add_items(batch))
                elif kind == "pop":
                    asyncio.run(session.pop_item())
                else:
                    asyncio.run(session.clear_session())
                ack()

        acknowledged = killed(child, rng)
        tally["interrupted"] += acknowledged < OPERATIONS
        models = _session_models(ops)
        session = FoldingSession("s", open_manager(path), max_tokens=BIG)
        stored = session.items()
        keys = [str(i.get("content") or i.get("output") or i.get("call_id")) for i in stored]
        tally["trials"] += 1
        tally["duplicated"] += len(keys) - len(set(keys))
        if stored != models[acknowledged]:
            after = models[min(acknowledged + 1, len(ops))]
            if stored == after:
                tally["in_flight_kept"] += 1
            else:
                tally["lost"] += 1
        names = {i["call_id"]: i["name"] for i in stored if i.get("type") == "function_call"}
        history = [b for s in session.manager.get_messages() for b in s.message.content]
        if session.repairs or history != [b for i in stored for b in from_items(i, names=names)[1]]:
            tally["disagreements"] += 1
        session.close()
    print("openai-agents kills:", tally)
    assert tally["lost"] == tally["duplicated"] == tally["disagreements"] == 0
    assert tally["trials"] == TRIALS


# ---------------------------------------------------------------------- LangChain
def _states(seed: int) -> list[list[Any]]:
    """The agent state at each operation: it grows by a few messages each time."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    rng = random.Random(seed)
    messages: list[Any] = []
    states = []
    for n in range(OPERATIONS):
        roll = rng.random()
        if n == 0 or roll < 0.4:  # a request starts with the user's turn
            messages.append(HumanMessage(f"q{n}", id=f"h{n}"))
        elif roll < 0.8:
            calls = [
                {"name": "f", "args": {}, "id": f"c{n}{k}", "type": "tool_call"} for k in range(2)
            ]
            messages.append(AIMessage("", tool_calls=calls, id=f"a{n}"))
            messages += [
                ToolMessage(f"r{n}{k}", tool_call_id=f"c{n}{k}", id=f"t{n}{k}") for k in range(2)
            ]
        else:
            messages.append(AIMessage(f"answer {n}", id=f"z{n}"))
        states.append(list(messages))
    return states


def test_the_middleware_killed_mid_write_keeps_every_acknowledged_message_once(
    tmp_path: Path,
) -> None:
    pytest.importorskip("langchain.agents")
    from types import SimpleNamespace

    from langchain.agents.middleware import ModelRequest
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    from context_manager.integrations.langchain import IDS, ContextFoldingMiddleware

    runtime = SimpleNamespace(execution_info=SimpleNamespace(thread_id="t"))
    tally = _tally()
    for trial in range(TRIALS):
        rng = random.Random(2000 + trial)
        path = tmp_path / f"t{trial}.db"
        states = _states(trial)

        def request(state: list[Any]) -> ModelRequest[Any]:
            model = GenericFakeChatModel(messages=iter(["unused"]))
            return ModelRequest(model=model, messages=state, tools=[], runtime=runtime)  # type: ignore[arg-type]

        def child(path: Path = path, states: list[Any] = states) -> None:
            folding = ContextFoldingMiddleware(lambda _t: open_manager(path), max_tokens=BIG)
            for n, state in enumerate(states):
                if n % 3 == 2:  # a model call: stores, then compiles
                    folding.fold(request(state))
                else:
                    folding.after_model({"messages": state}, runtime)
                ack()

        acknowledged = killed(child, rng)
        tally["interrupted"] += acknowledged < OPERATIONS
        folding = ContextFoldingMiddleware(lambda _t, path=path: open_manager(path), max_tokens=BIG)
        ids = [i for s in folding.manager("t").get_messages() for i in s.message.metadata[IDS]]
        tally["trials"] += 1
        tally["duplicated"] += len(ids) - len(set(ids))
        want = [m.id for m in states[acknowledged - 1]] if acknowledged else []
        if ids != want:
            after = [m.id for m in states[min(acknowledged, len(states) - 1)]]
            if ids == after:
                tally["in_flight_kept"] += 1
            else:
                tally["lost"] += 1
        # the rerun after the crash stores the rest, once, and sends the whole state
        sent = folding.fold(request(states[-1])).messages
        ids = [i for s in folding.manager("t").get_messages() for i in s.message.metadata[IDS]]
        if ids != [m.id for m in states[-1]] or [m.id for m in sent] != ids:
            tally["disagreements"] += 1
        folding.close()
    print("langchain kills:", tally)
    assert tally["lost"] == tally["duplicated"] == tally["disagreements"] == 0
    assert tally["trials"] == TRIALS
