"""The types a compile takes and returns: :class:`Injection` and :class:`Overhead` in,
:class:`CompileResult` (with its provider forms) and :class:`Preview` out, and the
records :class:`ContextEntry`, :class:`FoldedMemory` and :class:`QueryResult`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .arguments import check_choice, check_text
from .errors import ConfigError
from .messages import (
    AGENT,
    MAX_CACHE_BREAKPOINTS,
    CacheTTL,
    ContentBlock,
    Message,
    TextBlock,
    text_of,
    to_anthropic,
    to_openai,
)
from .strategies.base import StoredMessage
from .thinking import RequestIdentity, ThinkingStrip
from .tokens import TokenCounter, compact_json

__all__ = [
    "INJECTION_ACCEPTED",
    "INJECTION_PREFIX",
    "CompileResult",
    "ContextEntry",
    "FoldedMemory",
    "HoldDetail",
    "Injection",
    "ManagerStats",
    "Overhead",
    "Preview",
    "QueryResult",
    "Relation",
    "identity_of",
    "place_injections",
    "system_texts",
]

INJECTION_ACCEPTED = (
    "an Injection (Injection.text(namespace, position, text), position one of 'system', "
    "'before_user', 'after_user')"
)
INJECTION_PREFIX = "system_context:"
"""Participant prefix of injected messages (``system_context:<namespace>``)."""


class Injection(BaseModel):
    """Extra content placed into a compiled request, and priced in its budget.

    ``system`` content goes to :attr:`CompileResult.system_injections`;
    ``before_user`` is inserted before the last user message and ``after_user``
    right after it (see :func:`place_injections`); with no user message both are
    appended, ``before_user`` first.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    position: Literal["system", "before_user", "after_user"]
    content: tuple[ContentBlock, ...]

    @classmethod
    def text(cls, namespace: str, position: str, text: str) -> Injection:
        """An injection holding one text block.

        Raises
        ------
        ArgumentError
            Naming the argument refused: a ``namespace`` or ``text`` that is not a str,
            or a ``position`` other than ``system``, ``before_user``, ``after_user``.

        Examples
        --------
        >>> Injection.text("notes", "system", "Be brief.").position
        'system'
        """
        check_text(namespace, "namespace")
        check_choice(position, "position", ("system", "before_user", "after_user"))
        return cls.model_validate(
            {
                "namespace": namespace,
                "position": position,
                "content": [TextBlock(text=check_text(text, "text"))],
            }
        )


class Overhead(BaseModel):
    """What a request carries besides its messages, priced inside the input budget.

    The manager prices it with its counter: the system part (the system prompt
    and any ``system`` injections) as one ``System`` message, the tool
    definitions as their compact JSON text, plus ``tokens`` the host counted
    itself (request framing, a system prompt it sends in another form).

    Parameters
    ----------
    system : str, optional
        The system prompt the request carries.
    tools : sequence of dict
        The tool definitions the request carries.
    tokens : int
        Further tokens, counted by the host.

    Examples
    --------
    >>> from context_manager import CharsCounter
    >>> Overhead(system="Be brief.", tokens=10).price(CharsCounter())
    {'system': 3, 'tools': 0, 'other': 10, 'total': 13}
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    system: str | None = None
    tools: tuple[dict[str, Any], ...] = ()
    tokens: int = Field(default=0, ge=0)

    def system_message(self, blocks: Sequence[ContentBlock] = ()) -> Message | None:
        """The system part as one message (the prompt, then ``blocks``), or None."""
        content = ((TextBlock(text=self.system),) if self.system else ()) + tuple(blocks)
        return Message(participant="System", content=content) if content else None

    def price(self, counter: TokenCounter, blocks: Sequence[ContentBlock] = ()) -> dict[str, int]:
        """Tokens of each part (``system``, ``tools``, ``other``) and their ``total``."""
        system = self.system_message(blocks)
        parts = {
            "system": counter.count_message(system) if system is not None else 0,
            "tools": counter.count_text(compact_json(list(self.tools))) if self.tools else 0,
            "other": self.tokens,
        }
        return {**parts, "total": sum(parts.values())}


def place_injections(
    messages: Sequence[Message], before: Sequence[Message], after: Sequence[Message]
) -> tuple[list[Message], list[int]]:
    """Insert injections around the last user message without splitting a tool pair.

    ``before`` goes before the last message whose participant is ``user`` (any
    case), or before the call it answers when it is a tool result; ``after`` goes
    right after it, or after the calls it makes and their answers. With no user
    message both are appended, ``before`` first.

    Returns
    -------
    messages : list of Message
    moved : list of int
        The new index of each input message.

    Examples
    --------
    >>> from context_manager import Message
    >>> hist = [Message.text_message("User", "hi"), Message.text_message("Claude", "yo")]
    >>> note = Message.text_message("system_context:mem", "note")
    >>> [m.text for m in place_injections(hist, [note], [])[0]]
    ['note', 'hi', 'yo']
    """
    n = len(messages)
    users = (i for i in range(n - 1, -1, -1) if messages[i].participant.lower() == "user")
    user = next(users, None)
    if user is None:
        start = end = n
    else:
        start = user
        while start > 0 and messages[start - 1].tool_use_ids:
            start -= 1  # a result is answered by the message before it
        end = user + 1
        while end < n and messages[end - 1].tool_use_ids:
            end += 1  # calls are answered by the message after them
    out = [*messages[:start], *before, *messages[start:end], *after, *messages[end:]]
    moved = [
        i if i < start else i + len(before) if i < end else i + len(before) + len(after)
        for i in range(n)
    ]
    return out, moved


Relation = Literal["copy", "derived", "referenced"]


class ContextEntry(BaseModel):
    """A context-log record about a message.

    ``relation`` says what happens when the message changes: a ``copy`` follows
    edits and goes away with the message; ``derived`` (written from it, may go
    stale) and ``referenced`` (only points at it) are never touched.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    source_id: str
    relation: Relation
    message: Message


@dataclass
class CompileResult:
    """The messages to send, system injections and how the context was composed."""

    messages: list[Message]
    system_injections: list[ContentBlock] = field(default_factory=list)
    render_stats: dict[str, Any] = field(default_factory=dict)
    """How the context was composed. ``tokens`` is the whole request by the manager's
    counter and ``request`` breaks it down (``system``, ``tools``, ``other``,
    ``injections``, ``messages``, ``total``); ``kv_cost`` is the tokens of this
    request from its first difference with the manager's previous live request
    (all of it for the first). The strategy's composition (raw ``head``, ``tail`` and
    ``middle_raw``, memories by level in ``summaries``, ``pending`` work, ``total``)
    is listed in :meth:`ContextManager.get_render_stats`; the typed model of them all is
    :class:`~context_manager.render_stats.RenderStats`."""
    cache_breakpoints: list[int] = field(default_factory=list)
    """Indices of the messages to mark as prompt-cache breakpoints (Anthropic:
    ``cache_control`` on the message's last block), sorted, at most four: the ends of
    the stretches the strategy expects to keep stable across refolds, and the last
    message. A provider's limit counts system and tool breakpoints too."""
    system_prompt: str | None = None
    """The system prompt this request was priced with (send it, and nothing else)."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """The tool definitions this request was priced with."""
    compile_id: str = ""
    """This compile's id, for :meth:`ContextManager.note_request_sent`."""
    provenance: list[tuple[str | None, tuple[str, ...]]] = field(default_factory=list)
    """For each message: the memory it shows (None for a raw message or an injection)
    and the stored messages it stands for (empty for an injection or a memory's
    question)."""
    identity: RequestIdentity | None = None
    """The identity the compile was made under (with ``thinking_binding``): what
    :meth:`ContextManager.note_request_sent` takes."""
    thinking_strip: ThinkingStrip | None = None
    """With a binding ``thinking_binding``: the replies sent with their thinking and
    those sent without it, and why."""
    raw_bodies: dict[str, str] = field(default_factory=dict)
    """For each body stored in parts (:mod:`context_manager.bodies`) of which this
    request sends at least one shard raw, as stored: its body group id (the id
    :meth:`ContextManager.add_message` returned for it) -> the whole body's text, every
    shard of it the agent's window holds joined in order (the text added, byte for
    byte, while the window holds it all), whether the request shows all of it raw or
    only part, the rest folded into memories. Bodies shown only through memories are
    not listed. Consecutive raw shards of one body are sent as one message, so a body
    shown raw whole is one message whose text is this."""

    def request_identity(self, model: str, **head: Any) -> RequestIdentity:
        """The identity of this request sent to ``model``: its system text (the system
        prompt, then the system injections), its tools and the other head parameters
        ``head`` (what ``compile(identity=model)`` builds, without ``head``).

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     cm.set_system_prompt("You are terse.")
        ...     result = cm.compile(max_tokens=1000, reserve_for_response=100)
        >>> result.request_identity("claude-sonnet-4-5") == RequestIdentity.of(
        ...     "claude-sonnet-4-5", system="You are terse."
        ... )
        True
        """
        return identity_of(model, self.system_prompt, self.system_injections, self.tools, head)

    def to_anthropic(
        self,
        *,
        agent: str = AGENT,
        cache: bool = True,
        cache_ttl: CacheTTL | None = None,
        **params: Any,
    ) -> dict[str, Any]:
        """The keyword arguments of Anthropic's ``client.messages.create`` for this request.

        ``system`` holds the system prompt, then the system injections, as text blocks;
        ``tools`` the tool definitions in the Messages API shape; ``messages`` the
        history (:func:`~context_manager.messages.to_anthropic`, which leaves out what
        the API refuses, such as unsigned thinking). ``params`` (``model``,
        ``max_tokens``, ...) are added as given.

        Prompt-cache marks stay within the API's four: one on the system prompt (which
        caches the tools before it too), or on the last tool when there is no system
        prompt, and the rest on the latest of :attr:`cache_breakpoints`, the last
        message's always among them.

        Parameters
        ----------
        agent : str
            The participant whose turns are the assistant's.
        cache : bool
            Put ``cache_control`` marks (False: none).
        cache_ttl : {"5m", "1h"}, optional
            The marks' lifetime (the API's default when None).
        **params
            Other arguments of ``messages.create``.

        Raises
        ------
        ConfigError
            When ``params`` names ``system``, ``tools`` or ``messages``, which this builds.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     cm.set_system_prompt("You are terse.")
        ...     _ = cm.add_message("User", "hello there")
        ...     request = cm.compile(max_tokens=1000, reserve_for_response=100).to_anthropic(
        ...         model="claude-sonnet-4-6", max_tokens=100
        ...     )
        >>> request["system"][0]
        {'type': 'text', 'text': 'You are terse.', 'cache_control': {'type': 'ephemeral'}}
        >>> request["messages"][0]["role"], request["max_tokens"]
        ('user', 100)
        """
        from .providers.anthropic import anthropic_tools  # imports the SDK

        _check_params(params, "to_anthropic", {"system", "tools", "messages"})
        control: dict[str, Any] = {"type": "ephemeral"}
        if cache_ttl is not None:
            control["ttl"] = cache_ttl
        system: list[dict[str, Any]] = [{"type": "text", "text": t} for t in self._system_texts()]
        tools = anthropic_tools(self.tools) if self.tools else []
        used = 0
        if cache and self.system_prompt:
            system[0]["cache_control"] = dict(control)
            used = 1
        elif cache and tools:
            tools[-1] = {**tools[-1], "cache_control": dict(control)}
            used = 1
        marks = self.cache_breakpoints[-(MAX_CACHE_BREAKPOINTS - used) :] if cache else []
        out: dict[str, Any] = {
            "messages": to_anthropic(
                self.messages, agent=agent, cache_breakpoints=marks, cache_ttl=cache_ttl
            )
        }
        if system:
            out["system"] = system
        if tools:
            out["tools"] = tools
        return out | params

    def to_openai(self, *, agent: str = AGENT, **params: Any) -> dict[str, Any]:
        """The keyword arguments of OpenAI's ``client.chat.completions.create``.

        ``messages`` starts with one ``system`` message (the system prompt and the
        system injections) and goes on with the history
        (:func:`~context_manager.messages.to_openai`); ``tools`` holds the tool
        definitions in the Chat Completions shape. OpenAI caches prompt prefixes on
        its own, so there are no marks. ``params`` (``model``, ...) are added as given.

        Raises
        ------
        ConfigError
            When ``params`` names ``tools`` or ``messages``, which this builds.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     cm.set_system_prompt("You are terse.")
        ...     _ = cm.add_message("User", "hello there")
        ...     request = cm.compile(max_tokens=1000, reserve_for_response=100).to_openai(
        ...         model="gpt-4o"
        ...     )
        >>> [(m["role"], m["content"]) for m in request["messages"]]
        [('system', 'You are terse.'), ('user', 'hello there')]
        """
        from .providers.openai import openai_tools  # imports the SDK

        _check_params(params, "to_openai", {"tools", "messages"})
        texts = self._system_texts()
        head = [{"role": "system", "content": "\n\n".join(texts)}] if texts else []
        out: dict[str, Any] = {"messages": head + to_openai(self.messages, agent=agent)}
        if self.tools:
            out["tools"] = openai_tools(self.tools)
        return out | params

    def _system_texts(self) -> list[str]:
        """The system prompt, then each system injection's text, leaving out empty ones."""
        return system_texts(self.system_prompt, self.system_injections)


def system_texts(prompt: str | None, blocks: Sequence[ContentBlock]) -> list[str]:
    """The system prompt, then each system block's text, leaving out empty ones.

    Examples
    --------
    >>> system_texts("Be brief.", [TextBlock(text=" "), TextBlock(text="Notes: none")])
    ['Be brief.', 'Notes: none']
    """
    texts = [prompt or ""] + [text_of([b]) for b in blocks]
    return [t for t in texts if t.strip()]


def identity_of(
    model: str,
    prompt: str | None,
    blocks: Sequence[ContentBlock],
    tools: Sequence[dict[str, Any]],
    head: dict[str, Any],
) -> RequestIdentity:
    """The identity of a request to ``model``: the system text as sent (the prompt and
    the system blocks joined as the converters join them), the tools and ``head``.

    Examples
    --------
    >>> identity_of("m", "Be brief.", [TextBlock(text="Notes")], [], {}) == (
    ...     RequestIdentity.of("m", system="Be brief.\\n\\nNotes")
    ... )
    True
    """
    system = "\n\n".join(system_texts(prompt, blocks))
    return RequestIdentity.of(model, system=system or None, tools=tools, **head)


@dataclass(frozen=True)
class ManagerStats:
    """Counts of a manager's record, from :meth:`ContextManager.stats
    <context_manager.ContextManager.stats>`."""

    message_count: int
    """Live messages on the current branch."""
    context_entry_count: int
    """Entries of the namespace's context log."""
    branches: int
    """Branches of the store."""
    current_branch: str
    max_summary_level: int
    """The highest memory's level (0: none)."""


@dataclass(frozen=True)
class HoldDetail:
    """A hold on a message, from :meth:`ContextManager.compression_hold_details
    <context_manager.ContextManager.compression_hold_details>` (times on the manager's
    clock)."""

    message_id: str
    held_at: float
    """When the message was first held (a hold renewed keeps its start)."""
    expires_at: float | None
    """When the hold ends by itself (None: only when released)."""


@dataclass(frozen=True)
class FoldedMemory:
    """A memory a compile would show in place of stored messages."""

    memory: str
    level: int | None
    """Its level (None when the strategy does not say)."""
    first: str
    last: str
    """The first and last stored messages it stands for."""
    messages: int
    """How many stored messages it stands for."""


@dataclass(frozen=True)
class Preview:
    """What a compile would send, from :meth:`ContextManager.preview_context`."""

    fits: bool
    budget: int
    """The input budget (``max_tokens - reserve_for_response``)."""
    tokens: int | None
    """The request's tokens when it fits; when it does not, what the most folded context
    would need (None when the strategy cannot say)."""
    raw: int
    """Stored messages the request would show raw."""
    folded: tuple[FoldedMemory, ...]
    """The memories it would show, oldest first."""
    stage: str | None
    """Where a compile would refuse (None when it fits)."""
    stats: dict[str, Any]
    """The strategy's stats of the dry compile (``diagnostics`` when it does not fit)."""
    result: CompileResult | None
    """The dry compile itself when it fits."""


@dataclass(frozen=True)
class QueryResult:
    """Messages :meth:`ContextManager.query_messages` found."""

    messages: list[StoredMessage]
    """The matches, up to the limit, in the order asked for."""
    total_count: int
    """Every match, before the limit."""


def _check_params(params: dict[str, Any], method: str, built: set[str]) -> None:
    clash = sorted(built & set(params))
    if clash:
        raise ConfigError(
            f"{method}() builds {', '.join(clash)} from the compiled request; pass only the "
            "other arguments of the call (model, max_tokens, ...)"
        )
