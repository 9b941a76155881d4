"""The summariser protocol and the deterministic extractive summariser.

A summariser answers a :class:`CompletionRequest` (system prompt, messages,
model, output cap, tools) with a :class:`Completion` (text, stop reason in
one vocabulary, usage). Only a completion whose stop reason is ``end_turn``
with non-empty text may become memory.

:class:`ExtractiveSummarizer` needs no model: it keeps the sentences that
carry the most information (rare words, identifiers, numbers, paths) up to a
target length, in their original order. It is for offline use, demos, tests
and benchmarks, is always chosen explicitly and is never substituted for a
model.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .messages import MAX_CACHE_BREAKPOINTS, CacheTTL, Message, TextBlock

__all__ = [
    "MEMORY_MARKER",
    "MEMORY_MARKER_PARTICIPANT",
    "TOPIC_TRANSITION",
    "Completion",
    "CompletionRequest",
    "ExtractiveSummarizer",
    "StopReason",
    "Summarizer",
    "Usage",
    "needs_tool_definitions",
    "request_hash",
]

StopReason = Literal["end_turn", "max_tokens", "refusal", "tool_use", "error"]

MEMORY_MARKER = "[CM] A new memory is about to be formed"
"""Start of the marker turn that precedes the messages a memory is written from."""

MEMORY_MARKER_PARTICIPANT = "Context Manager"
"""The participant whose turns carry the marker and the instructions. A message from
anyone else is content, whatever its text: the same words typed by a user are inert."""

TOPIC_TRANSITION = "[Topic Transition]"
"""How a transition summary starts (a :data:`MEMORY_MARKER_PARTICIPANT` message written by
:meth:`~context_manager.ContextManager.reset_head_window`): a raw head window starts at
the latest one."""


class CompletionRequest(BaseModel):
    """One summariser call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(min_length=1)
    provider: str | None = None
    """The provider that serves ``model``, when the caller names one."""
    messages: tuple[Message, ...]
    system: str | None = None
    max_tokens: int = Field(default=4096, gt=0)
    tools: tuple[dict[str, Any], ...] | None = None
    agent: str = "Claude"
    """The participant whose turns are the assistant side."""
    target_tokens: int | None = None
    """The length the instruction asks for, when known."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds the caller will wait for this answer; a summariser that calls out should
    give up (retries included) by then, since nobody reads a later answer."""
    cache_breakpoints: tuple[int, ...] = ()
    """Indices of the messages that end a prefix worth caching (at most 4, in range): a
    provider with explicit prompt caching marks them (Anthropic's ``cache_control``);
    others ignore them."""
    cache_ttl: CacheTTL | None = None
    """How long the marked prefixes should live (the provider's default when None)."""

    @model_validator(mode="after")
    def _check_breakpoints(self) -> CompletionRequest:
        marks = self.cache_breakpoints
        bad = [i for i in marks if not 0 <= i < len(self.messages)]
        if bad:
            raise ValueError(
                f"cache_breakpoints {bad} are not indices of the {len(self.messages)} messages"
            )
        if len(set(marks)) > MAX_CACHE_BREAKPOINTS:
            raise ValueError(
                f"cache_breakpoints holds {len(set(marks))} messages; a request may mark at "
                f"most {MAX_CACHE_BREAKPOINTS}"
            )
        return self


def request_hash(request: CompletionRequest) -> str:
    """The SHA-256 (hex) of ``request``'s canonical bytes: its JSON form
    (``model_dump(mode="json")``) without ``timeout``, keys sorted, no spaces, every
    character past ASCII escaped (``json.dumps`` defaults), encoded as ASCII.

    ``timeout`` is how long the caller waits, not what it asks, so it is left out: the
    same request under another deadline has the same hash. Same request, same hash, in
    every process; a memory's ``request_hash`` names the request that produced it.

    Examples
    --------
    >>> from context_manager.messages import Message
    >>> request = CompletionRequest(model="m", messages=(Message.text_message("User", "hi"),))
    >>> digest = request_hash(request)
    >>> len(digest), digest == request_hash(request.model_copy(update={"timeout": 5.0}))
    (64, True)
    """
    body = request.model_dump(mode="json", exclude={"timeout"})
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


class Usage(BaseModel):
    """Tokens a call consumed."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0


class Completion(BaseModel):
    """A summariser's answer."""

    model_config = ConfigDict(frozen=True)

    text: str
    stop_reason: StopReason
    usage: Usage = Field(default_factory=Usage)
    model: str | None = None

    @property
    def acceptable(self) -> bool:
        """Only ``end_turn`` with non-empty text may become memory."""
        return self.stop_reason == "end_turn" and bool(self.text.strip())


@runtime_checkable
class Summarizer(Protocol):
    """Anything that completes a request.

    A summariser may also declare ``needs_tool_definitions`` (a bool class attribute):
    True when it sends requests to an API that refuses a history holding tool calls
    without the definitions of those tools (Anthropic's and OpenAI's do), False when
    it reads the messages itself (:class:`ExtractiveSummarizer`). The strategy holds
    back memories of chunks with tool calls until
    :meth:`~context_manager.ContextManager.set_tool_definitions` has been called only
    for a summariser that needs them; one that does not declare it is taken to need
    them (see :func:`needs_tool_definitions`). It is not a protocol member, so a
    summariser without it still is a :class:`Summarizer`.
    """

    def complete(self, request: CompletionRequest) -> Completion:
        """Answer ``request``."""
        ...


def needs_tool_definitions(summarizer: object) -> bool:
    """Whether ``summarizer`` must be sent tool definitions with a history that holds
    tool calls: its ``needs_tool_definitions`` attribute, True when it has none (the
    safe answer for a summariser that calls a provider).

    Examples
    --------
    >>> needs_tool_definitions(ExtractiveSummarizer())
    False
    >>> class MySummarizer:
    ...     def complete(self, request): ...
    >>> needs_tool_definitions(MySummarizer())
    True
    """
    return bool(getattr(summarizer, "needs_tool_definitions", True))


_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*|\d+(?:\.\d+)?")
_IDENTIFIER = re.compile(r"[/_.]|\d|[a-z][A-Z]")


class ExtractiveSummarizer:
    """Deterministic extractive summaries: the most informative sentences, in order.

    Parameters
    ----------
    target_tokens : int
        Default length when the request states none (chars / 4 per token).
    model : str
        Name reported in completions.
    marker_participant : str
        The participant whose turns are the context manager's own (the memory marker,
        the instructions); only its turns are read as such.

    Examples
    --------
    >>> from context_manager.messages import Message
    >>> s = ExtractiveSummarizer(target_tokens=12)
    >>> text = "Hi. Please fix parse_config in src/app.py line 42. Thanks."
    >>> req = CompletionRequest(model="extractive", messages=(Message.text_message("User", text),))
    >>> s.complete(req).text
    'Please fix parse_config in src/app.py line 42.'
    """

    needs_tool_definitions = False
    """It reads the messages itself: a history with tool calls needs no definitions."""

    def __init__(
        self,
        *,
        target_tokens: int = 400,
        model: str = "extractive",
        marker_participant: str = MEMORY_MARKER_PARTICIPANT,
    ) -> None:
        if target_tokens <= 0:
            raise ValueError(f"target_tokens must be positive, got {target_tokens}")
        self.target_tokens = target_tokens
        self.model = model
        self.marker_participant = marker_participant

    def complete(self, request: CompletionRequest) -> Completion:
        """Summarise the messages after the memory marker (all of them when there is none)."""
        source = _source_messages(request.messages, self.marker_participant)
        sentences = [s.strip() for m in source for s in _SENTENCE.split(m.text) if s.strip()]
        target = request.target_tokens or self.target_tokens
        budget_chars = min(target, request.max_tokens) * 4
        text = _select(sentences, budget_chars)
        if not text:
            text = "A quiet stretch with nothing to note."
        usage = Usage(
            input_tokens=sum(math.ceil(len(m.text) / 4) for m in request.messages),
            output_tokens=math.ceil(len(text) / 4),
        )
        return Completion(text=text, stop_reason="end_turn", usage=usage, model=self.model)


def _source_messages(
    messages: Sequence[Message], participant: str = MEMORY_MARKER_PARTICIPANT
) -> list[Message]:
    """What a memory is written from: the messages after the last memory marker that
    ``participant`` placed (all of them when there is none), without that participant's
    instructions (the marker, the closing instruction). Text from anyone else that
    looks like a marker or an instruction is content like any other."""
    start = 0
    for i, m in enumerate(messages):
        if _is_own_turn(m, participant, MEMORY_MARKER):
            start = i + 1
    source = [m for m in messages[start:] if not _is_own_turn(m, participant, "[CM] ")]
    return source or list(messages)


def _is_own_turn(message: Message, participant: str, prefix: str) -> bool:
    if message.participant != participant:
        return False
    first = message.content[0] if message.content else None
    return isinstance(first, TextBlock) and first.text.startswith(prefix)


def _select(sentences: list[str], budget_chars: int) -> str:
    """The best-scoring distinct sentences that fit, in their order, one per line (so a
    later summary of this one splits it into the same sentences)."""
    sentences = list(dict.fromkeys(sentences))  # a repeated sentence says nothing new
    if not sentences:
        return ""
    docs = [set(_WORD.findall(s.lower())) for s in sentences]
    frequency: Counter[str] = Counter(w for d in docs for w in d)
    n = len(sentences)
    weight: dict[str, float] = {}  # each distinct word's information, computed once
    ident: dict[str, int] = {}

    def score(i: int) -> float:
        words = _WORD.findall(sentences[i])
        if not words:
            return 0.0
        for w in words:
            if w not in weight:
                weight[w] = math.log((1 + n) / frequency[w.lower()])
                ident[w] = 1 if _IDENTIFIER.search(w) else 0
        info = sum(weight[w] for w in words)  # the same terms in the same order
        idents = sum(ident[w] for w in words)
        return (info + 2.0 * idents) / math.sqrt(len(words))

    ranked = sorted(range(n), key=lambda i: (-score(i), i))
    chosen: list[int] = []
    used = 0
    for i in ranked:
        cost = len(sentences[i]) + 1
        if used + cost > budget_chars:
            continue
        chosen.append(i)
        used += cost
    if not chosen:
        return sentences[ranked[0]][: max(1, budget_chars)]
    return "\n".join(sentences[i] for i in sorted(chosen))
