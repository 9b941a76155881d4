"""Stateful machines over each drop-in's public operations, with full-disk faults and
reopens among them: the framework's view always equals the model of what was
acknowledged, and the history and the compiled request agree with it."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from contextlib import suppress
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from context_manager import CharsCounter, ContextManager, StoreFullError
from tests.support.dropin_faults import WriteFault

BIG = 200_000
MACHINE = settings(
    derandomize=True, database=None, max_examples=12, stateful_step_count=12, deadline=None
)


def open_manager(path: Path) -> ContextManager:
    return ContextManager.open(path=path, counter=CharsCounter(), window_tokens=BIG)


# ------------------------------------------------------------ OpenAI Agents SDK
def _session_machine() -> type[RuleBasedStateMachine]:
    from context_manager.integrations.openai_agents import FoldingSession, from_items

    class SessionMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.folder = Path(tempfile.mkdtemp(prefix="dropin-session-"))
            self.session = FoldingSession("s", open_manager(self.folder / "s.db"), max_tokens=BIG)
            self.model: list[dict[str, Any]] = []
            self.batches: list[list[dict[str, Any]]] = []  # added batches of items with ids
            self.n = 0

        def _batch(self, kind: str) -> list[dict[str, Any]]:
            self.n += 1
            n = self.n
            if kind == "user":
                return [{"role": "user", "content": f"u{n}"}]
            if kind == "said":
                return [{"type": "message", "role": "assistant", "content": f"a{n}", "id": f"m{n}"}]
            return [
                {
                    "type": "function_call",
                    "call_id": f"c{n}",
                    "name": "f",
                    "arguments": "{}",
                    "id": f"fc{n}",
                },
                {"type": "function_call_output", "call_id": f"c{n}", "output": f"o{n}"},
            ]

        @rule(
            kinds=st.lists(st.sampled_from(["user", "said", "call"]), min_size=1, max_size=3),
            fail_at=st.none() | st.integers(1, 12),
        )
        def add_items(self, kinds: list[str], fail_at: int | None) -> None:
            batch = [i for k in kinds for i in self._batch(k)]
            fault = WriteFault(fail_at)
            with fault.on(self.session.manager), suppress(StoreFullError):
                asyncio.run(self.session.add_items(batch))
            if not fault.fired:
                self.model += batch
                if "user" not in kinds:
                    self.batches.append(batch)

        @precondition(lambda self: bool(self.batches))
        @rule(data=st.data())
        def add_a_batch_again(self, data: st.DataObject) -> None:
            """Items with ids added again (an add whose caller never heard) change nothing."""
            batch = data.draw(st.sampled_from(self.batches))
            asyncio.run(self.session.add_items(batch))
            self.batches = [b for b in self.batches if all(i in self.model for i in b)]

        @rule(fail_at=st.none() | st.integers(1, 6))
        def pop_item(self, fail_at: int | None) -> None:
            fault = WriteFault(fail_at)
            popped: Any = "failed"
            with fault.on(self.session.manager), suppress(StoreFullError):
                popped = asyncio.run(self.session.pop_item())
            if not fault.fired:
                assert popped == (self.model.pop() if self.model else None)
                self.batches = [b for b in self.batches if all(i in self.model for i in b)]

        @rule(fail_at=st.none() | st.integers(1, 10))
        def clear_session(self, fail_at: int | None) -> None:
            fault = WriteFault(fail_at)
            with fault.on(self.session.manager), suppress(StoreFullError):
                asyncio.run(self.session.clear_session())
            if not fault.fired:
                self.model, self.batches = [], []

        @rule()
        def reopen(self) -> None:
            self.session.close()
            self.session = FoldingSession("s", open_manager(self.folder / "s.db"), max_tokens=BIG)

        @invariant()
        def views_agree(self) -> None:
            stored = self.session.items()
            assert stored == self.model
            assert self.session.repairs == []
            names = {i["call_id"]: "f" for i in stored if i.get("type") == "function_call"}
            history = [b for s in self.session.manager.get_messages() for b in s.message.content]
            assert history == [b for i in stored for b in from_items(i, names=names)[1]]
            calls = {i["call_id"] for i in stored if i.get("type") == "function_call"}
            outputs = {i["call_id"] for i in stored if i.get("type") == "function_call_output"}
            opens = bool(stored) and stored[0].get("role") == "user"
            if calls == outputs and opens:  # nothing for the compile to repair or drop
                assert asyncio.run(self.session.get_items()) == stored

        def teardown(self) -> None:
            self.session.close()
            shutil.rmtree(self.folder, ignore_errors=True)

    return SessionMachine


def test_the_session_machine() -> None:
    pytest.importorskip("agents")
    machine = _session_machine()
    machine.TestCase.settings = MACHINE
    machine.TestCase().runTest()


# ---------------------------------------------------------------------- LangChain
def _middleware_machine() -> type[RuleBasedStateMachine]:
    from langchain.agents.middleware import ModelRequest
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from context_manager.integrations.langchain import IDS, ContextFoldingMiddleware

    runtime = SimpleNamespace(execution_info=SimpleNamespace(thread_id="t"))

    class MiddlewareMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.folder = Path(tempfile.mkdtemp(prefix="dropin-middleware-"))
            self.folding = self._open()
            self.state: list[Any] = [HumanMessage("q0", id="h0")]
            self.acknowledged: list[str] = []
            self.n = 0

        def _open(self) -> ContextFoldingMiddleware:
            path = self.folder / "t.db"
            return ContextFoldingMiddleware(lambda _t: open_manager(path), max_tokens=BIG)

        @rule(kinds=st.lists(st.sampled_from(["human", "calls", "answer"]), min_size=1, max_size=3))
        def the_state_grows(self, kinds: list[str]) -> None:
            for kind in kinds:
                self.n += 1
                n = self.n
                if kind == "human":
                    self.state.append(HumanMessage(f"q{n}", id=f"h{n}"))
                elif kind == "answer":
                    self.state.append(AIMessage(f"answer {n}", id=f"z{n}"))
                else:
                    calls = [
                        {"name": "f", "args": {}, "id": f"c{n}{k}", "type": "tool_call"}
                        for k in range(2)
                    ]
                    self.state.append(AIMessage("", tool_calls=calls, id=f"a{n}"))
                    self.state += [
                        ToolMessage(f"r{n}{k}", tool_call_id=f"c{n}{k}", id=f"t{n}{k}")
                        for k in range(2)
                    ]

        def _write(self, call: Any, fail_at: int | None) -> None:
            fault = WriteFault(fail_at)
            with fault.on(self.folding.manager("t")), suppress(StoreFullError):
                call()
            if not fault.fired:
                self.acknowledged = [m.id for m in self.state]

        @rule(fail_at=st.none() | st.integers(1, 4))
        def after_model(self, fail_at: int | None) -> None:
            state = {"messages": list(self.state)}
            self._write(lambda: self.folding.after_model(state, runtime), fail_at)

        @rule(fail_at=st.none() | st.integers(1, 4))
        def aafter_model(self, fail_at: int | None) -> None:
            state = {"messages": list(self.state)}
            self._write(lambda: asyncio.run(self.folding.aafter_model(state, runtime)), fail_at)

        @rule(fail_at=st.none() | st.integers(1, 6))
        def fold(self, fail_at: int | None) -> None:
            model = GenericFakeChatModel(messages=iter(["unused"]))
            request = ModelRequest(
                model=model, messages=list(self.state), tools=[], runtime=runtime
            )  # type: ignore[arg-type]
            sent: list[Any] = []
            self._write(lambda: sent.extend(self.folding.fold(request).messages), fail_at)
            if sent:  # what the model is sent is the state, as stored
                assert [m.id for m in sent] == [m.id for m in self.state]

        @rule()
        def reopen(self) -> None:
            self.folding.close()
            self.folding = self._open()

        @invariant()
        def stored_once(self) -> None:
            stored = [
                i for s in self.folding.manager("t").get_messages() for i in s.message.metadata[IDS]
            ]
            assert stored == self.acknowledged

        def teardown(self) -> None:
            self.folding.close()
            shutil.rmtree(self.folder, ignore_errors=True)

    return MiddlewareMachine


def test_the_middleware_machine() -> None:
    pytest.importorskip("langchain.agents")
    machine = _middleware_machine()
    machine.TestCase.settings = MACHINE
    machine.TestCase().runTest()
