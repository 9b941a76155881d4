"""A LangChain v1 agent middleware that folds the agent's history before each model call.

:class:`ContextFoldingMiddleware` plugs into ``langchain.agents.create_agent``. Before
every model call it adds the messages of the agent's state that its store does not
hold yet to the thread's :class:`~context_manager.ContextManager`, compiles the folded
context within the budget and sends that to the model instead of the whole history.
The graph state is left alone: it keeps every message, and so does the store.

Needs the ``langchain`` extra (``pip install 'context-folding[langchain]'``).

Examples
--------
A scripted chat model stands in for a real one (any chat model with tools works):

>>> from langchain.agents import create_agent
>>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
>>> from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
>>> from context_manager.strategies import autobiographical as ab
>>> class Scripted(GenericFakeChatModel):
...     def bind_tools(self, tools, **kwargs):
...         return self
>>> def open_manager(thread_id):
...     config = ab.AutobiographicalConfig.for_window(1500, compression_model="extractive")
...     return ContextManager.open(
...         path=":memory:", strategy=ab.AutobiographicalStrategy(config=config),
...         counter=CharsCounter(), summarizer=ExtractiveSummarizer(),
...     )
>>> folding = ContextFoldingMiddleware(open_manager, max_tokens=1500)
>>> model = Scripted(messages=iter(["noted " * 30] * 20))
>>> agent = create_agent(model=model, middleware=[folding])
>>> state = {"messages": []}
>>> for turn in range(20):
...     state["messages"].append(("user", f"Turn {turn}: " + "details " * 20))
...     state = agent.invoke(state, {"configurable": {"thread_id": "t1"}})
>>> len(state["messages"]), len(folding.manager("t1").get_messages())
(40, 40)
>>> request = folding.last_compile("t1")  # what the model was sent last
>>> len(request.messages) < 40, request.render_stats["tokens"] <= 1500 - 256
(True, True)
>>> folding.close()
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from threading import RLock
from typing import Any, cast

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AnyMessage, BaseMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from ..manager import CompileResult, ContextManager
from ..messages import AGENT, ContentBlock, Message, ToolResultBlock
from . import langchain_messages
from ._common import (
    atomically,
    compile_folded,
    content_of,
    default_manager,
    regroup,
    window_reserve,
)

__all__ = ["ContextFoldingMiddleware", "from_langchain", "to_langchain"]

IDS = "langchain_ids"
"""Metadata key of a stored message: the ids of the LangChain messages it holds."""

DEFAULT_THREAD = "default"
"""The thread of a run that names none (no ``thread_id`` in its config)."""


# ------------------------------------------------------------------ the middleware
@dataclass
class _Thread:
    manager: ContextManager
    known: set[str] = field(default_factory=set)
    """The ids of the state's messages the store holds."""
    answered: set[str] = field(default_factory=set)
    """The tool calls the store holds a result for."""
    last: CompileResult | None = None
    lock: RLock = field(default_factory=RLock)
    """Held while the thread is folded: threads fold side by side, a thread's calls in turn."""


class ContextFoldingMiddleware(AgentMiddleware):
    """Folds a LangChain agent's messages through a :class:`~context_manager.ContextManager`
    before each model call, one store per thread.

    At each model call the middleware adds the state's messages that the thread's store
    does not hold yet (by message id, so none twice; the results of one turn's parallel
    tool calls as one message), records the agent's system prompt and tools (so the
    budget prices them), runs up to ``ticks_per_call`` units of compression, compiles
    within ``max_tokens - reserve_for_response`` and calls the model with the compiled
    messages. A message shown as it is goes to the model as the state's own object; a
    memory, a recall or a repaired pair goes as new LangChain messages
    (:func:`~context_manager.integrations.langchain_messages.to_langchain`, which keeps
    reasoning, images and tool call ids). Tool calls and their results are always sent
    together. The
    graph state is not changed: it keeps every message. The model's reply is stored
    as soon as it comes (so the store holds the whole run when the run ends).

    Put it first in ``middleware=[...]`` so that it sees the state's messages as they
    are; middleware after it sees the folded ones.

    Parameters
    ----------
    open_manager : callable, optional
        ``thread_id -> ContextManager``, called once per thread (for example
        ``ContextManager.open(path=f"stores/{thread_id}.sqlite", ...)`` to keep each
        thread's history across runs). By default each thread gets an in-memory store
        folded by the autobiographical strategy sized for ``max_tokens``
        (``AutobiographicalConfig.for_window``) with the extractive summariser.
    max_tokens : int
        The model's window, the whole request included.
    reserve_for_response : int, optional
        The part of ``max_tokens`` kept for the answer (an eighth of it by default, 256
        to 16,000 tokens).
    ticks_per_call : int
        Units of compression work run before each compile (a compile that would not fit
        first runs the pending work it needs: ``compile(catch_up=True)``).
    agent : str
        The participant the agent's turns are stored as.

    Raises
    ------
    OverBudgetError
        From a model call whose history does not fit even folded as far as it goes.

    Notes
    -----
    The store mirrors what the state adds; messages the state later replaces or
    removes stay in the store as they were.

    Storing a state's new messages (with the system prompt and tools, at a model call)
    is one store transaction: a call that raises (``StoreFullError`` on a full disk)
    stored none of them, a process killed mid-write reopens with all of them or none,
    and the rerun stores each once, by message id. The stored messages are the one
    record of which ids the store holds (read again after a failed write and when a
    thread is opened). Calls on one thread, from several threads and asyncio tasks, run
    one at a time; different threads run side by side.
    """

    def __init__(
        self,
        open_manager: Callable[[str], ContextManager] | None = None,
        *,
        max_tokens: int = 100_000,
        reserve_for_response: int | None = None,
        ticks_per_call: int = 1,
        agent: str = AGENT,
    ) -> None:
        super().__init__()
        self._open = open_manager or (lambda _thread: default_manager(max_tokens))
        self.max_tokens = max_tokens
        self.reserve_for_response = (
            window_reserve(max_tokens) if reserve_for_response is None else reserve_for_response
        )
        self.ticks_per_call = ticks_per_call
        self.agent = agent
        self._threads: dict[str, _Thread] = {}
        self._lock = RLock()

    # -------------------------------------------------------------- public
    @property
    def threads(self) -> list[str]:
        """The threads that have a manager, in the order they were opened."""
        return list(self._threads)

    def manager(self, thread_id: str = DEFAULT_THREAD) -> ContextManager:
        """The manager of a thread (opened on first use)."""
        return self._thread(thread_id).manager

    def last_compile(self, thread_id: str = DEFAULT_THREAD) -> CompileResult | None:
        """The compile behind the thread's latest model call (None before any)."""
        found = self._threads.get(thread_id)
        return None if found is None else found.last

    def close(self) -> None:
        """Close every thread's manager (a later call opens a thread anew)."""
        with self._lock:
            threads, self._threads = list(self._threads.values()), {}
        for thread in threads:
            thread.manager.close()

    def fold(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """The request with its messages replaced by the thread's folded context."""
        thread = self._thread(_thread_id(request.runtime))
        with thread.lock:
            messages = list(request.messages)
            cm = thread.manager
            tools = _tool_definitions(request.tools)

            def store() -> None:
                self._add_new(thread, messages)
                if request.system_message is not None:
                    cm.set_system_prompt(str(request.system_message.text))
                cm.set_tool_definitions(tools)

            self._write(thread, store)
            result = compile_folded(
                cm,
                max_tokens=self.max_tokens,
                reserve_for_response=self.reserve_for_response,
                ticks=self.ticks_per_call,
            )
            thread.last = result
            folded = self._to_request_messages(result.messages, messages)
        return request.override(messages=cast("list[AnyMessage]", folded))

    # ------------------------------------------------------- AgentMiddleware
    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        """Call the model with the folded context."""
        return handler(self.fold(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        """Call the model with the folded context (async agents: the folding runs on a
        worker thread, so that a compile or a summariser call never blocks the loop)."""
        return await handler(await asyncio.to_thread(self.fold, request))

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Store the model's reply (so the store holds the whole run when it ends)."""
        self._record(state, runtime)
        return None

    async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Store the model's reply (async agents)."""
        await asyncio.to_thread(self._record, state, runtime)
        return None

    # -------------------------------------------------------------- internals
    def _record(self, state: Any, runtime: Any) -> None:
        thread = self._thread(_thread_id(runtime))
        messages = list(state["messages"])
        with thread.lock:
            self._write(thread, lambda: self._add_new(thread, messages))

    @staticmethod
    def _write(thread: _Thread, change: Callable[[], None]) -> None:
        """``change()`` as one store transaction: when it raises nothing it wrote is
        stored, and what the thread knows is read again from the store."""
        try:
            atomically(thread.manager, change)
        except BaseException:
            with suppress(Exception):  # a closed manager: the next call raises anyway
                thread.known, thread.answered = _held(thread.manager)
            raise

    def _thread(self, thread_id: str) -> _Thread:
        with self._lock:
            found = self._threads.get(thread_id)
            if found is None:
                cm = self._open(thread_id)
                known, answered = _held(cm)
                found = self._threads[thread_id] = _Thread(cm, known, answered)
            return found

    def _add_new(self, thread: _Thread, messages: Sequence[BaseMessage]) -> None:
        """Store the messages the thread does not hold, parallel tool results as one."""
        group: list[tuple[str, BaseMessage]] = []

        def flush() -> None:
            if not group:
                return
            stored = langchain_messages.from_langchain(
                [m for _, m in group], agent=self.agent
            )  # one message
            participant = stored[0].participant
            blocks = [b for m in stored for b in m.content]
            ids = [key for key, _ in group]
            thread.manager.add_message(participant, content_of(blocks), metadata={IDS: ids})
            thread.known.update(ids)
            thread.answered.update(b.tool_use_id for b in blocks if isinstance(b, ToolResultBlock))
            group.clear()

        for position, message in enumerate(messages):
            key = message.id or f"position:{position}"
            if isinstance(message, ToolMessage) and message.tool_call_id in thread.answered:
                thread.known.add(key)  # a result stored before, under another id
            if key in thread.known:
                flush()
                continue
            joins = isinstance(message, ToolMessage) and bool(group)
            if joins and not isinstance(group[-1][1], ToolMessage):
                joins = False
            if not joins:
                flush()
            group.append((key, message))
        flush()

    def _to_request_messages(
        self, compiled: Iterable[Message], state: Sequence[BaseMessage]
    ) -> list[BaseMessage]:
        by_id = {m.id or f"position:{i}": m for i, m in enumerate(state)}
        out: list[BaseMessage] = []
        for message in compiled:
            originals = [
                (
                    by_id[key],
                    langchain_messages.from_langchain([by_id[key]], agent=self.agent)[0].content,
                )
                for key in message.metadata.get(IDS, ())
                if key in by_id
            ]
            pending: list[ContentBlock] = []
            for part in regroup(message.content, originals):
                if isinstance(part, BaseMessage):
                    out.extend(self._converted(message.participant, pending))
                    pending = []
                    out.append(part)
                else:
                    pending.append(part)
            out.extend(self._converted(message.participant, pending))
        return out

    def _converted(self, participant: str, blocks: Sequence[ContentBlock]) -> list[BaseMessage]:
        """New LangChain messages for blocks no message of the state holds as they are."""
        if not blocks:
            return []
        message = Message(participant=participant, content=tuple(blocks))
        return langchain_messages.to_langchain([message], agent=self.agent, start=None)


def _held(cm: ContextManager) -> tuple[set[str], set[str]]:
    """The ids of the LangChain messages the store holds, and the tool calls it holds a
    result for: read from the stored messages, the one record of both."""
    stored = [s.message for s in cm.get_messages()]
    known = {i for m in stored for i in m.metadata.get(IDS, ())}
    answered = {i for m in stored for i in m.tool_result_ids}
    return known, answered


def _thread_id(runtime: Any) -> str:
    """The run's thread: the runtime's, else the config's ``thread_id``."""
    info = getattr(runtime, "execution_info", None)
    thread_id = getattr(info, "thread_id", None)
    if thread_id is None:
        from langgraph.config import get_config

        try:
            thread_id = get_config().get("configurable", {}).get("thread_id")
        except RuntimeError:  # called outside a graph run
            thread_id = None
    return DEFAULT_THREAD if thread_id is None else str(thread_id)


def _tool_definitions(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """The request's tools as Chat Completions definitions (provider tools as given)."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        if isinstance(tool, dict):
            if isinstance(tool.get("name"), str) or isinstance(tool.get("function"), dict):
                out.append(dict(tool))
            continue
        out.append(convert_to_openai_tool(tool))
    return out


# ------------------------------------------------------------------ deprecated
def from_langchain(message: BaseMessage, *, agent: str = AGENT) -> tuple[str, list[ContentBlock]]:
    """The participant and blocks of one LangChain message.

    .. deprecated::
        Warns with :class:`DeprecationWarning` and will be removed in the next release:
        use :func:`~context_manager.integrations.langchain_messages.from_langchain`,
        which reads a whole conversation (tool results paired with their calls) and
        keeps reasoning, images and unknown blocks.

    Examples
    --------
    >>> import warnings
    >>> from langchain_core.messages import AIMessage
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", DeprecationWarning)
    ...     from_langchain(AIMessage(content="done"))[0]
    'Claude'
    """
    warnings.warn(
        "context_manager.integrations.langchain.from_langchain is deprecated and will be "
        "removed in the next release; use langchain_messages.from_langchain on the list",
        DeprecationWarning,
        stacklevel=2,
    )
    ours = langchain_messages.from_langchain([message], agent=agent)
    return ours[0].participant, list(ours[0].content)


def to_langchain(message: Message, *, agent: str = AGENT) -> list[BaseMessage]:
    """LangChain messages for one of ours.

    .. deprecated::
        Warns with :class:`DeprecationWarning` and will be removed in the next release:
        use :func:`~context_manager.integrations.langchain_messages.to_langchain`, which
        converts a whole conversation.

    Examples
    --------
    >>> import warnings
    >>> from context_manager import Message
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", DeprecationWarning)
    ...     type(to_langchain(Message.text_message("User", "hi"))[0]).__name__
    'HumanMessage'
    """
    warnings.warn(
        "context_manager.integrations.langchain.to_langchain is deprecated and will be "
        "removed in the next release; use langchain_messages.to_langchain on the list",
        DeprecationWarning,
        stacklevel=2,
    )
    return langchain_messages.to_langchain([message], agent=agent, start=None)
