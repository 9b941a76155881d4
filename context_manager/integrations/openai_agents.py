"""An OpenAI Agents SDK ``Session`` backed by the store, whose items are the folded context.

:class:`FoldingSession` implements the SDK's ``agents.memory.Session`` protocol. Every
item the runner adds is kept as it was given, and joins the history of a
:class:`~context_manager.ContextManager` (one model response's items, and the outputs
of its tool calls, as one message each); ``get_items()`` compiles the folded context
and returns it as Responses-API input items: the items themselves where the context
shows them whole, and ``message`` / ``function_call`` / ``function_call_output`` items
for memories, recalls and repaired tool pairs.

Needs the ``openai-agents`` extra (``pip install 'context-folding[openai-agents]'``).

Examples
--------
>>> import asyncio
>>> from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
>>> from context_manager.strategies import autobiographical as ab
>>> config = ab.AutobiographicalConfig.for_window(1500, compression_model="extractive")
>>> manager = ContextManager.open(
...     path=":memory:", strategy=ab.AutobiographicalStrategy(config=config),
...     counter=CharsCounter(), summarizer=ExtractiveSummarizer(),
... )
>>> session = FoldingSession("chat-1", manager, max_tokens=1500)
>>> async def converse():
...     for turn in range(20):
...         await session.add_items([
...             {"role": "user", "content": f"Turn {turn}: " + "details " * 20},
...             {"role": "assistant", "content": "noted " * 30},
...         ])
...     return await session.get_items(), await session.get_items(limit=2)
>>> folded, latest = asyncio.run(converse())
>>> len(folded) < 40, latest[-1]["content"] == "noted " * 30, len(session.items())
(True, True, 40)
>>> session.close()
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..manager import CompileResult, ContextManager
from ..messages import (
    AGENT,
    SYSTEM,
    USER,
    ContentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    text_of,
)
from ._common import (
    atomically,
    compile_folded,
    content_of,
    default_manager,
    regroup,
    window_reserve,
)

if TYPE_CHECKING:
    from agents import Agent
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings
    from agents.run_config import CallModelData, ModelInputData

__all__ = ["FoldingSession", "from_items", "to_items"]

GROUP = "openai_agents_group"
"""Metadata key of a stored message: the group of session items it holds."""

SESSION = "openai_agents_session"
"""Metadata key of a stored message: the id of the session whose items it holds."""

FAKE_ID = "__fake_id__"
"""The id the SDK gives every item converted from a Chat Completions answer: not an
item's own, so never a key to deduplicate by."""

_log = logging.getLogger(__name__)
_R = TypeVar("_R")

_CALLS = (
    "function_call",
    "custom_tool_call",
    "computer_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
)
"""Item types of the calls the client answers with a ``<type>_output`` item."""
_CALL_META = ("type", "id", "call_id", "status", "name", "created_by")


# ------------------------------------------------------------------ conversion
def _parts(content: Any) -> list[ContentBlock]:
    if isinstance(content, str):
        return [TextBlock(text=content)] if content else []
    blocks: list[ContentBlock] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            blocks.append(TextBlock(text=str(part.get("text", ""))))
        elif kind == "refusal":
            blocks.append(TextBlock(text=str(part.get("refusal", ""))))
        elif kind == "input_image":
            url = part.get("image_url")
            blocks.append(ImageBlock(url=str(url)) if url else ImageBlock())
        elif kind == "input_file":
            name = part.get("filename") or part.get("file_id") or ""
            blocks.append(TextBlock(text=f"[file {name}]".replace(" ]", "]")))
    return blocks


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        parsed = json.loads(raw) if isinstance(raw, str) and raw else {}
    except json.JSONDecodeError:
        return {"arguments": raw}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def from_items(
    item: Mapping[str, Any], *, agent: str = AGENT, names: Mapping[str, str] | None = None
) -> tuple[str, list[ContentBlock], str]:
    """The participant, blocks and side (``user``, ``agent``, ``results``) of an item.

    Messages keep their text (and images); a client-side call (``function_call``,
    ``custom_tool_call``, ...) becomes a tool call of the agent, its ``..._output`` a
    tool result, spoken by the tool (named from ``names``, call id to tool name, else
    ``"Tool"``); reasoning becomes the agent's thinking (its summary); any other item
    the agent's text, as compact JSON.

    Examples
    --------
    >>> from_items({"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"})
    ('Claude', [ToolUseBlock(type='tool_use', id='c1', name='ls', input={})], 'agent')
    >>> from_items({"role": "user", "content": "hi"})
    ('User', [TextBlock(type='text', text='hi')], 'user')
    """
    kind = item.get("type")
    role = item.get("role")
    if role is not None and kind in (None, "message"):
        blocks = _parts(item.get("content"))
        if role == "assistant":
            return agent, blocks, "agent"
        return (SYSTEM if role in ("system", "developer") else USER), blocks, "user"
    call_id = item.get("call_id")
    if isinstance(call_id, str) and kind in _CALLS:
        if kind == "function_call":
            arguments = _arguments(item.get("arguments"))
        else:
            arguments = {k: v for k, v in item.items() if k not in _CALL_META}
        name = str(item.get("name") or kind)
        return agent, [ToolUseBlock(id=call_id, name=name, input=arguments)], "agent"
    if isinstance(call_id, str) and isinstance(kind, str) and kind.endswith("_call_output"):
        output = item.get("output")
        body = output if isinstance(output, str) else text_of(_parts(output)) or _json(output)
        tool = (names or {}).get(call_id, "Tool")
        return tool, [ToolResultBlock(tool_use_id=call_id, content=body)], "results"
    if kind == "reasoning":
        summary = item.get("summary") or []
        text = "\n".join(str(s.get("text", "")) for s in summary if isinstance(s, Mapping))
        return agent, [ThinkingBlock(thinking=text)], "agent"
    return agent, [TextBlock(text=_json(item))], "agent"


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def to_items(message: Message, *, agent: str = AGENT) -> list[dict[str, Any]]:
    """Responses-API input items for one of our messages (a memory, a recall, a repair).

    The agent's text becomes an ``assistant`` message and its calls ``function_call``
    items; other participants' results become ``function_call_output`` items and the
    rest one ``user`` message (``system`` for
    :data:`~context_manager.messages.SYSTEM`). Reasoning and images of the agent's are
    not sent.

    Examples
    --------
    >>> from context_manager import Message, ToolResultBlock
    >>> to_items(Message(participant="ls", content=[ToolResultBlock(tool_use_id="c1")]))
    [{'type': 'function_call_output', 'call_id': 'c1', 'output': ''}]
    """
    return _runs(message.participant, list(message.content), agent=agent)


def _runs(participant: str, blocks: Sequence[ContentBlock], *, agent: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if participant == agent:
        text: list[str] = []
        for b in [*blocks, None]:
            if isinstance(b, TextBlock):
                if b.text:
                    text.append(b.text)
                continue
            if text:
                out.append({"role": "assistant", "content": "\n".join(text)})
                text = []
            if isinstance(b, ToolUseBlock):
                arguments = json.dumps(b.input, sort_keys=True, ensure_ascii=False)
                call = {"type": "function_call", "call_id": b.id, "name": b.name}
                out.append({**call, "arguments": arguments})
        return out
    for b in blocks:
        if isinstance(b, ToolResultBlock):
            body = b.content if isinstance(b.content, str) else text_of(b.content)
            out.append({"type": "function_call_output", "call_id": b.tool_use_id, "output": body})
    rest = [b for b in blocks if not isinstance(b, ToolResultBlock)]
    if rest:
        out.append(
            {"role": "system" if participant == SYSTEM else "user", "content": text_of(rest)}
        )
    return out


# ------------------------------------------------------------------ the session
@dataclass(frozen=True)
class _Entry:
    id: str
    """The item's record in the store."""
    item: dict[str, Any]
    group: str
    message: str
    """The id of the stored message that holds it."""


class FoldingSession:
    """An Agents SDK ``Session`` whose history is folded by a
    :class:`~context_manager.ContextManager`.

    Pass it as ``Runner.run(agent, input, session=...)``. The runner reads the history
    with ``get_items()`` at the start of each run, puts the new input after it and adds
    the run's items with ``add_items``.

    * ``add_items`` keeps every item as given (in the manager's store) and adds it to
      the manager's history: the items of one model response (text, reasoning, tool
      calls) form one message of the agent's, and the outputs of those calls one
      message after it, so calls and results are only ever shown together.
    * ``get_items()`` runs up to ``ticks_per_call`` units of compression, compiles within
      ``max_tokens - reserve_for_response`` and returns the folded context as input
      items (the stored items where shown whole, deep copies).
    * ``get_items(limit=n)`` returns the latest ``n`` items as stored (what the runner
      reads to check or rewind its own writes); ``pop_item`` removes and returns the
      latest item; ``clear_session`` removes every item and message.

    Parameters
    ----------
    session_id : str
    manager : ContextManager, optional
        The manager to fold with (its store keeps the items too, under the session id).
        By default an in-memory store folded by the autobiographical strategy sized for
        ``max_tokens`` (``AutobiographicalConfig.for_window``) with the extractive
        summariser.
    max_tokens : int
        The share of the model's window the history may fill; the run's new input and
        the items of the run so far come after it, so leave room for them.
    reserve_for_response : int, optional
        Kept out of ``max_tokens`` for the answer (an eighth of it by default, 256 to
        16,000 tokens).
    ticks_per_call : int
        Units of compression work run before each compile (a compile that would not fit
        first runs the pending work it needs: ``compile(catch_up=True)``).
    agent : str
        The participant the agent's turns are stored as.
    session_settings : agents.memory.SessionSettings, optional
        The SDK's session settings (its ``limit`` reads stored items, unfolded).

    Attributes
    ----------
    repairs : list of str
        What the session changed in the manager's history, when it first read its
        items, to make the history agree with them (empty when they agreed).

    Notes
    -----
    Each of ``add_items``, ``pop_item`` and ``clear_session`` is one store transaction:
    a call that raises (``StoreFullError`` on a full disk) stored nothing, and one cut
    short by a killed process is found whole or not at all. Adding is idempotent by
    id: an item whose ``id`` the session holds (other than the SDK's stand-in
    :data:`FAKE_ID`), or a call or call output whose type and ``call_id`` it holds, is
    not stored again, so a batch whose caller never heard back (a cancelled task) can
    be added again. An item with neither (the user's input) is stored each time it is
    added: retry only a call that raised.

    The session's items are the record of what it acknowledged, and the manager's
    history holds them (one message per group). When the session first reads its items
    it makes the history agree with them: it drops items whose message was removed
    through the manager, gives a message whose content changed its items' content back,
    and removes a message of the session's that no item holds; it logs a warning
    saying what it did and lists it in :attr:`repairs`.

    Calls from several asyncio tasks and threads on one session run one at a time;
    sessions on different stores run side by side. Session objects sharing a manager and
    a session id read the items again whenever the store's differ from those they hold.

    :meth:`use_agent` records an agent's instructions and function tools in the manager,
    so that the budget prices them and a model summariser sees them.
    """

    def __init__(
        self,
        session_id: str,
        manager: ContextManager | None = None,
        *,
        max_tokens: int = 100_000,
        reserve_for_response: int | None = None,
        ticks_per_call: int = 1,
        agent: str = AGENT,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self.manager = manager if manager is not None else default_manager(max_tokens)
        self.max_tokens = max_tokens
        self.reserve_for_response = (
            window_reserve(max_tokens) if reserve_for_response is None else reserve_for_response
        )
        self.ticks_per_call = ticks_per_call
        self.agent = agent
        self.last_compile: CompileResult | None = None
        """The compile behind the latest ``get_items()``."""
        self._slot = f"openai-agents/{session_id}"
        self._entries: list[_Entry] | None = None
        self._checked = False  # whether the history was checked against the items
        self.repairs: list[str] = []
        """What the check of the history against the items changed, when the session
        first read its items (empty when they agreed)."""
        self._lock = threading.RLock()

    # ---------------------------------------------------------- Session protocol
    # The store's work runs on a worker thread, as the SDK's own SQLiteSession does, so
    # that a compile (or a summariser call in a tick) never blocks the event loop.
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The folded context as input items, or the latest ``limit`` items as stored."""
        found = await asyncio.to_thread(self._get_items, limit)
        return cast("list[TResponseInputItem]", found)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Keep the items and add them to the manager's history."""
        await asyncio.to_thread(self._add, list(items))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the latest item (None when there is none)."""
        return cast("TResponseInputItem | None", await asyncio.to_thread(self._pop))

    async def clear_session(self) -> None:
        """Remove every item and every message of the session."""
        await asyncio.to_thread(self._clear)

    # -------------------------------------------------------------- the rest
    async def fold_model_input(self, data: CallModelData[Any]) -> ModelInputData:
        """A ``RunConfig.call_model_input_filter`` that folds every model call of a run.

        The runner reads the session once per run; within a long run the items of the
        run pile up after that. Given as ``RunConfig(call_model_input_filter=
        session.fold_model_input)``, each model call gets the session's folded context
        (its items stored so far) followed by the input items not stored yet (those after
        the session's latest item). An input in which the session's latest item cannot be
        found goes to the model unchanged.
        """
        from agents.run_config import ModelInputData

        given = data.model_data
        with self._lock:
            entries = self._current()
            latest = entries[-1].item if entries else None
        items = [_plain(i) for i in given.input]
        at = next((k for k in reversed(range(len(items))) if items[k] == latest), None)
        if latest is not None and at is None:
            return given
        unsaved = items if at is None else items[at + 1 :]
        folded = await self.get_items()
        return ModelInputData(
            input=[*folded, *cast("list[TResponseInputItem]", unsaved)],
            instructions=given.instructions,
        )

    def items(self) -> list[dict[str, Any]]:
        """Every item of the session, as stored, oldest first."""
        with self._lock:
            return [copy.deepcopy(e.item) for e in self._current()]

    def use_agent(self, agent: Agent[Any]) -> None:
        """Record the agent's instructions (when a string) and function tools in the
        manager, so that compiles price them and a model summariser sees them."""
        from agents import FunctionTool

        with self._lock:
            if isinstance(agent.instructions, str):
                self.manager.set_system_prompt(agent.instructions)
            tools = [
                {
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.params_json_schema,
                }
                for t in agent.tools
                if isinstance(t, FunctionTool)
            ]
            self.manager.set_tool_definitions(tools)

    def close(self) -> None:
        """Close the manager."""
        self.manager.close()

    # -------------------------------------------------------------- internals
    def _get_items(self, limit: int | None) -> list[dict[str, Any]]:
        with self._lock:
            entries = self._current()
            if limit is not None:
                return [copy.deepcopy(e.item) for e in (entries[-limit:] if limit > 0 else [])]
            result = compile_folded(
                self.manager,
                max_tokens=self.max_tokens,
                reserve_for_response=self.reserve_for_response,
                ticks=self.ticks_per_call,
            )
            self.last_compile = result
            groups: dict[str, list[_Entry]] = {}
            for e in entries:
                groups.setdefault(e.group, []).append(e)
            names = self._names(entries)
            out: list[dict[str, Any]] = []
            for message in result.messages:
                members = groups.get(message.metadata.get(GROUP, ""), [])
                originals = [(e.item, self._blocks(e.item, names)) for e in members]
                pending: list[ContentBlock] = []
                for part in regroup(message.content, originals):
                    if isinstance(part, dict):
                        out.extend(_runs(message.participant, pending, agent=self.agent))
                        pending = []
                        out.append(copy.deepcopy(part))
                    else:
                        pending.append(part)
                out.extend(_runs(message.participant, pending, agent=self.agent))
            return out

    def _write(self, change: Callable[[list[_Entry]], _R]) -> _R:
        """``change(entries)`` as one store transaction, in turn with the session's
        other calls: when it raises nothing it wrote is stored, and the items are read
        again from the store."""
        with self._lock:
            self._load()
            try:
                return atomically(self.manager, lambda: change(self._current()))
            except BaseException:
                self._entries = None  # rolled back: the store has them as they were
                raise

    def _pop(self) -> dict[str, Any] | None:
        return self._write(self._pop_locked)

    def _pop_locked(self, entries: list[_Entry]) -> dict[str, Any] | None:
        if not entries:
            return None
        last = entries[-1]
        self.manager.store.redact(self._slot, last.id)
        rest = [e for e in entries[:-1] if e.group == last.group]
        if rest:
            names = self._names(entries[:-1])
            blocks = [b for e in rest for b in self._blocks(e.item, names)]
            self.manager.edit_message(last.message, content_of(blocks))
        else:
            self.manager.remove_message(last.message)
        entries.pop()
        return last.item

    def _clear(self) -> None:
        self._write(self._clear_locked)

    def _clear_locked(self, entries: list[_Entry]) -> None:
        for message in dict.fromkeys(e.message for e in entries):
            self.manager.remove_message(message)
        for e in entries:
            self.manager.store.redact(self._slot, e.id)
        entries.clear()

    def _load(self) -> list[_Entry]:
        if self._entries is None:
            if self._checked:
                self._entries = self._read()
            else:
                self._entries = atomically(self.manager, self._reconcile)
                self._checked = True
        return self._entries

    def _current(self) -> list[_Entry]:
        """The items, read again when the store's differ from those held (another
        session object wrote them)."""
        entries = self._load()
        stored = self.manager.store.items(self._slot)
        if len(stored) != len(entries) or any(
            s.id != e.id for s, e in zip(stored, entries, strict=True)
        ):
            entries = self._entries = self._read()
        return entries

    def _read(self) -> list[_Entry]:
        return [
            _Entry(i.id, i.body["item"], i.body["group"], i.body["message"])
            for i in self.manager.store.items(self._slot)
        ]

    def _reconcile(self) -> list[_Entry]:
        """The session's items, once the manager's history was made to agree with them.

        The items are the record of what the session acknowledged; the history holds
        one message per group of them. Items whose message is no longer in the history
        are dropped (it was removed through the manager), a message whose content is
        not its items' is given their content, and a message of this session's that no
        item holds (left by a write that failed part way in an earlier version) is
        removed. What was done is logged and kept in :attr:`repairs`.
        """
        entries = self._read()
        live = {s.id: s.message for s in self.manager.get_messages()}
        repairs: list[str] = []
        gone = [e for e in entries if e.message not in live]
        for e in gone:
            self.manager.store.redact(self._slot, e.id)
            repairs.append(f"dropped item {e.id}: its message {e.message} is not in the history")
        entries = [e for e in entries if e.message in live]
        names = self._names(entries)
        groups: dict[str, list[_Entry]] = {}
        for e in entries:
            groups.setdefault(e.message, []).append(e)
        for message, members in groups.items():
            content = content_of([b for e in members for b in self._blocks(e.item, names)])
            if tuple(live[message].content) != content:
                self.manager.edit_message(message, content)
                repairs.append(f"message {message}: content set to its {len(members)} item(s)")
        for message, stored in live.items():
            if stored.metadata.get(SESSION) == self.session_id and message not in groups:
                self.manager.remove_message(message)
                repairs.append(f"removed message {message}: no item of the session holds it")
        if repairs:
            _log.warning(
                "session %r: the history did not agree with the items; %s",
                self.session_id,
                "; ".join(repairs),
            )
        self.repairs.extend(repairs)
        return entries

    @staticmethod
    def _names(entries: Iterable[_Entry]) -> dict[str, str]:
        """Call id to tool name, from the calls among ``entries``."""
        return {
            str(e.item["call_id"]): str(e.item.get("name") or e.item.get("type"))
            for e in entries
            if e.item.get("type") in _CALLS and isinstance(e.item.get("call_id"), str)
        }

    def _blocks(self, item: Mapping[str, Any], names: Mapping[str, str]) -> list[ContentBlock]:
        return from_items(item, agent=self.agent, names=names)[1]

    def _add(self, items: Iterable[Any]) -> None:
        plain = [_plain(raw) for raw in items]
        self._write(lambda entries: self._add_locked(entries, plain))

    def _add_locked(self, entries: list[_Entry], items: Iterable[dict[str, Any]]) -> None:
        names = self._names(entries)
        seen = {k for e in entries for k in _keys(e.item)}
        for item in items:
            keys = _keys(item)
            if keys & seen:
                _log.info("session %r: item %s is stored already", self.session_id, sorted(keys))
                continue
            seen |= keys
            if item.get("type") in _CALLS and isinstance(item.get("call_id"), str):
                names[item["call_id"]] = str(item.get("name") or item["type"])
            participant, blocks, side = from_items(item, agent=self.agent, names=names)
            last = entries[-1] if entries else None
            joins = last is not None and side != "user"
            if joins and last is not None:
                joins = from_items(last.item, agent=self.agent)[2] == side
            if joins and last is not None:
                group, message = last.group, last.message
                held: list[ContentBlock] = []
                for e in reversed(entries):  # a group's items are contiguous
                    if e.group != group:
                        break
                    held[:0] = self._blocks(e.item, names)
                self.manager.edit_message(message, content_of([*held, *blocks]))
            else:
                group = uuid.uuid4().hex
                metadata = {GROUP: group, SESSION: self.session_id}
                message = self.manager.add_message(
                    participant, content_of(blocks), metadata=metadata
                )
            body = {"item": item, "group": group, "message": message}
            record = self.manager.store.append(self._slot, body)
            entries.append(_Entry(record.id, item, group, message))


def _keys(item: Mapping[str, Any]) -> set[str]:
    """What makes an item the same item when it is added again: its own ``id`` (not the
    SDK's stand-in :data:`FAKE_ID`), and for a call or a call's output its type and
    ``call_id``. An item with neither (the user's input) has none: it is never taken
    for a copy of another."""
    keys: set[str] = set()
    item_id = item.get("id")
    if isinstance(item_id, str) and item_id and item_id != FAKE_ID:
        keys.add(f"id:{item_id}")
    kind, call_id = item.get("type"), item.get("call_id")
    called = isinstance(kind, str) and (kind in _CALLS or kind.endswith("_call_output"))
    if called and isinstance(call_id, str):
        keys.add(f"{kind}:{call_id}")
    return keys


def _plain(item: Any) -> dict[str, Any]:
    """An item as plain JSON data (a model's ``model_dump``, or the mapping's copy)."""
    if hasattr(item, "model_dump"):
        item = item.model_dump(exclude_unset=True, mode="json")
    if not isinstance(item, Mapping):
        raise TypeError(f"a session item must be a mapping, got {type(item).__name__}")
    return cast("dict[str, Any]", json.loads(json.dumps(dict(item))))
