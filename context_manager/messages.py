"""Messages and content blocks, and conversion to and from provider chat formats.

A :class:`Message` has a free-form ``participant`` (``"User"``, ``"Claude"``,
``"Context Manager"``, a tool name...), a list of content blocks, metadata
and a timestamp. Blocks: :class:`TextBlock`, :class:`ImageBlock`,
:class:`ToolUseBlock`, :class:`ToolResultBlock`, :class:`ThinkingBlock`.

The agent's own participant name maps to the provider's ``assistant`` role;
every other participant maps to ``user``. Every converter, the manager and the
summarisers share one convention: the agent is :data:`AGENT` (``"Claude"``), the
person :data:`USER` (``"User"``) and system prompts :data:`SYSTEM` (``"System"``),
unless the caller names others.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field
from pydantic.config import ExtraValues

from .errors import ContextManagerError

__all__ = [
    "AGENT",
    "SYSTEM",
    "USER",
    "ContentBlock",
    "ImageBlock",
    "Message",
    "MessageFormatError",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "from_anthropic",
    "from_openai",
    "is_thinking",
    "text_of",
    "to_anthropic",
    "to_openai",
    "without_blocks",
]


AGENT = "Claude"
"""The participant whose turns are the assistant's, unless a caller names another."""
USER = "User"
"""The participant of the person's turns read from a provider format."""
SYSTEM = "System"
"""The participant of system prompts read from a provider format."""


class MessageFormatError(ContextManagerError, ValueError):
    """A chat message could not be read or cannot be stored: names the message (or the
    message index) and the field (a :class:`ValueError`).

    Attributes
    ----------
    field : str or None
        The offending field (``content[0].text``, ``metadata.tags[2]``...), when known.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


MAX_JSON_DEPTH = 128
"""Deepest nesting of objects and arrays in a message's metadata or a tool call's input."""

_MAX_INT_BITS = 13_000
"""Integers beyond this many bits have more decimal digits than Python will write as JSON."""


def json_problem(value: Any, field: str) -> tuple[str, str] | None:
    """The first part of ``value`` that cannot be stored as JSON text, as (field, why).

    Storable: None, booleans, integers, finite floats, strings that are valid Unicode
    (no lone surrogates), and lists, tuples and string-keyed dicts of these, nested at
    most :data:`MAX_JSON_DEPTH` deep. Iterative, so no input can exhaust the stack.
    """
    stack: list[tuple[Any, str, int]] = [(value, field, 0)]
    while stack:
        item, where, depth = stack.pop()
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, str):
            why = text_problem(item)
            if why:
                return where, why
        elif isinstance(item, int):
            if item.bit_length() > _MAX_INT_BITS:
                return where, f"an integer of {item.bit_length()} bits is too large to store"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return where, f"{item!r} is not a JSON number"
        elif isinstance(item, dict | list | tuple):
            if depth >= MAX_JSON_DEPTH:
                return where, f"objects and arrays are nested deeper than {MAX_JSON_DEPTH} levels"
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        return where, f"key {key!r} is not a string"
                    why = text_problem(key)
                    if why:
                        return where, f"key {key!r}: {why}"
                    stack.append((child, f"{where}.{key}", depth + 1))
            else:
                stack.extend((child, f"{where}[{i}]", depth + 1) for i, child in enumerate(item))
        else:
            return where, f"a {type(item).__name__} cannot be stored as JSON"
    return None


_STRING_FIELDS: dict[str, tuple[str, ...]] = {
    "TextBlock": ("text",),
    "ThinkingBlock": ("thinking", "signature"),
    "ImageBlock": ("media_type", "data", "url"),
}


def _block_problem(block: Any, where: str) -> tuple[str, str] | None:
    """:func:`json_problem` of a content block, field by field (no copy of the block)."""
    if isinstance(block, ToolUseBlock):
        return json_problem(block.input, f"{where}.input") or _strings_problem(
            block, where, ("id", "name")
        )
    if isinstance(block, ToolResultBlock):
        if isinstance(block.content, str):
            found = _strings_problem(block, where, ("content",))
        else:
            found = None
            for j, inner in enumerate(block.content):
                found = found or _block_problem(inner, f"{where}.content[{j}]")
        return found or _strings_problem(block, where, ("tool_use_id",))
    return _strings_problem(block, where, _STRING_FIELDS.get(type(block).__name__, ()))


def _strings_problem(block: Any, where: str, names: tuple[str, ...]) -> tuple[str, str] | None:
    for name in names:
        value = getattr(block, name)
        why = text_problem(value) if isinstance(value, str) else None
        if why:
            return f"{where}.{name}", why
    return None


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored (a lone surrogate), or None when it can."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"character {exc.start} is a lone surrogate ({text[exc.start]!r}), which is not "
            "valid Unicode text; decode the source with errors='replace' or drop it"
        )
    return None


class _Block(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TextBlock(_Block):
    """Plain text."""

    type: Literal["text"] = "text"
    text: str


class ImageBlock(_Block):
    """An image: base64 ``data`` with a ``media_type``, or a ``url``."""

    type: Literal["image"] = "image"
    media_type: str | None = None
    data: str | None = None
    url: str | None = None
    token_estimate: int | None = None


class ToolUseBlock(_Block):
    """A tool call made by the agent."""

    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResultBlock(_Block):
    """The result of the tool call ``tool_use_id``."""

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock] = ""
    is_error: bool = False


class ThinkingBlock(_Block):
    """The agent's reasoning (``signature`` when the provider signs it)."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None


ContentBlock = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock,
    Field(discriminator="type"),
]


class Message(BaseModel):
    """One message of the conversation.

    Examples
    --------
    >>> m = Message.text_message("User", "hello")
    >>> m.text, m.tool_use_ids, m.tool_result_ids
    ('hello', (), ())
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    participant: str = Field(min_length=1)
    content: tuple[ContentBlock, ...]
    metadata: dict[str, Any] = Field(default_factory=dict)
    timestamp: float | None = None

    # Building or validating a message also checks that it can be stored (valid Unicode,
    # JSON-typed metadata and tool input): MessageFormatError names the field. The check
    # runs after pydantic's validation, not inside it, so the error keeps its type; a
    # Message validated as a field of another model is checked by check_storable().
    def __init__(self, /, **data: Any) -> None:
        super().__init__(**data)
        self.check_storable()

    # pydantic's validation paths skip this __init__ (they check in the classmethods
    # below): a check raised inside them would reach the caller as a ValidationError
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def model_validate(
        cls,
        obj: Any,
        *,
        strict: bool | None = None,
        extra: ExtraValues | None = None,
        from_attributes: bool | None = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> Self:
        """Validate ``obj`` (pydantic's method), then :meth:`check_storable`."""
        message = super().model_validate(
            obj,
            strict=strict,
            extra=extra,
            from_attributes=from_attributes,
            context=context,
            by_alias=by_alias,
            by_name=by_name,
        )
        message.check_storable()
        return message

    @classmethod
    def model_validate_json(
        cls,
        json_data: str | bytes | bytearray,
        *,
        strict: bool | None = None,
        extra: ExtraValues | None = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> Self:
        """Validate JSON text (pydantic's method), then :meth:`check_storable`."""
        message = super().model_validate_json(
            json_data,
            strict=strict,
            extra=extra,
            context=context,
            by_alias=by_alias,
            by_name=by_name,
        )
        message.check_storable()
        return message

    @classmethod
    def model_validate_strings(
        cls,
        obj: Any,
        *,
        strict: bool | None = None,
        extra: ExtraValues | None = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> Self:
        """Validate string data (pydantic's method), then :meth:`check_storable`."""
        message = super().model_validate_strings(
            obj, strict=strict, extra=extra, context=context, by_alias=by_alias, by_name=by_name
        )
        message.check_storable()
        return message

    def check_storable(self) -> None:
        """Check that the message can be stored and sent as JSON text.

        Raises
        ------
        MessageFormatError
            Naming the field: a string with a lone surrogate (``content[0].text``,
            ``participant``...), a metadata or tool-input value that is not JSON
            (an object, a non-string key, NaN, nesting deeper than
            :data:`MAX_JSON_DEPTH`), or a timestamp that is not finite.
        """
        if self.timestamp is not None and not math.isfinite(self.timestamp):
            raise MessageFormatError(
                f"timestamp: {self.timestamp!r} is not a finite number", field="timestamp"
            )
        found = json_problem(self.participant, "participant") or json_problem(
            self.metadata, "metadata"
        )
        for i, block in enumerate(self.content):
            if found:
                break
            found = _block_problem(block, f"content[{i}]")
        if found:
            where, why = found
            raise MessageFormatError(
                f"message from {self.participant!r} cannot be stored: {where}: {why}",
                field=where,
            )

    @classmethod
    def text_message(cls, participant: str, text: str, **fields: Any) -> Message:
        """A message holding one text block."""
        return cls(participant=participant, content=(TextBlock(text=text),), **fields)

    @property
    def text(self) -> str:
        """All text, tool input JSON and tool result text, joined by newlines."""
        return text_of(self.content)

    @property
    def tool_use_ids(self) -> tuple[str, ...]:
        """Ids of the tool calls this message makes."""
        return self._tool_ids()[1]

    @property
    def tool_result_ids(self) -> tuple[str, ...]:
        """Ids of the tool calls this message answers."""
        return self._tool_ids()[2]

    def _tool_ids(self) -> tuple[object, tuple[str, ...], tuple[str, ...]]:
        """``(content, call ids, result ids)``, read once per content: a copy with other
        content (``model_copy(update=...)``) reads its own."""
        kept = self.__dict__.get("_tool_ids_read")
        if kept is None or kept[0] is not self.content:
            kept = (
                self.content,
                tuple(b.id for b in self.content if isinstance(b, ToolUseBlock)),
                tuple(b.tool_use_id for b in self.content if isinstance(b, ToolResultBlock)),
            )
            self.__dict__["_tool_ids_read"] = kept
        return kept

    def canonical_json(self) -> str:
        """Compact, key-sorted JSON of participant and content: the identity of the body."""
        body = {
            "participant": self.participant,
            "content": [b.model_dump(mode="json", exclude_none=True) for b in self.content],
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def digest(self) -> str:
        """SHA-256 (hex) of :meth:`canonical_json`: equal exactly when the participant and
        the content are. Worked out once per participant and content: a copy with other
        ones (``model_copy(update=...)``) works out its own."""
        kept = self.__dict__.get("_digest_read")
        if kept is None or kept[0] is not self.content or kept[1] is not self.participant:
            text = self.canonical_json().encode("utf-8")
            kept = (self.content, self.participant, hashlib.sha256(text).hexdigest())
            self.__dict__["_digest_read"] = kept
        return kept[2]


def text_of(blocks: Iterable[Any]) -> str:
    """Readable text of content blocks (images as ``[image]``)."""
    parts: list[str] = []
    for b in blocks:
        if isinstance(b, TextBlock):
            parts.append(b.text)
        elif isinstance(b, ThinkingBlock):
            parts.append(b.thinking)
        elif isinstance(b, ToolUseBlock):
            parts.append(f"{b.name}({json.dumps(b.input, sort_keys=True, ensure_ascii=False)})")
        elif isinstance(b, ToolResultBlock):
            parts.append(b.content if isinstance(b.content, str) else text_of(b.content))
        elif isinstance(b, ImageBlock):
            parts.append("[image]")
    return "\n".join(p for p in parts if p)


def is_thinking(block: object) -> bool:
    """True for a :class:`ThinkingBlock`, signed or not: the blocks a thinking binding
    leaves out of a compiled request by default (see
    :class:`~context_manager.thinking.ThinkingBinding`).

    Examples
    --------
    >>> is_thinking(ThinkingBlock(thinking="hm", signature="s")), is_thinking(TextBlock(text="x"))
    (True, False)
    """
    return isinstance(block, ThinkingBlock)


def without_blocks(message: Message, drop: Callable[[ContentBlock], bool]) -> Message | None:
    """``message`` without the blocks ``drop`` selects: the message itself when it
    selects none, None when no block is left. Participant, metadata and timestamp are kept.

    Examples
    --------
    >>> thought = ThinkingBlock(thinking="hm", signature="s")
    >>> m = Message(participant="Claude", content=(thought, TextBlock(text="ok")))
    >>> without_blocks(m, is_thinking).content
    (TextBlock(type='text', text='ok'),)
    >>> without_blocks(Message(participant="Claude", content=(thought,)), is_thinking) is None
    True
    """
    kept = tuple(b for b in message.content if not drop(b))
    if len(kept) == len(message.content):
        return message
    if not kept:
        return None
    # built anew, not model_copy'd: a copy would keep the old content's cached tool ids
    fields = {name: getattr(message, name) for name in Message.model_fields}
    return Message(**{**fields, "content": kept})


# ------------------------------------------------------------------ provider formats
def _block_from_anthropic(raw: Mapping[str, Any], where: str) -> ContentBlock:
    kind = raw.get("type")
    if kind == "text":
        return TextBlock(text=str(raw.get("text", "")))
    if kind == "image":
        source = raw.get("source") or {}
        if source.get("type") == "url":
            return ImageBlock(url=source.get("url"))
        return ImageBlock(media_type=source.get("media_type"), data=source.get("data"))
    if kind == "tool_use":
        return ToolUseBlock(id=raw["id"], name=raw["name"], input=dict(raw.get("input") or {}))
    if kind == "tool_result":
        content = raw.get("content", "")
        if isinstance(content, list):
            blocks = [_block_from_anthropic(c, where) for c in content]
            content = [b for b in blocks if isinstance(b, TextBlock | ImageBlock)]
        return ToolResultBlock(
            tool_use_id=raw["tool_use_id"], content=content, is_error=bool(raw.get("is_error"))
        )
    if kind == "thinking":
        return ThinkingBlock(thinking=str(raw.get("thinking", "")), signature=raw.get("signature"))
    raise MessageFormatError(f"{where}: unsupported content block type {kind!r}")


def from_anthropic(
    messages: Sequence[Mapping[str, Any]], *, agent: str = AGENT, user: str = USER
) -> list[Message]:
    """Read Anthropic Messages API messages (``role`` + ``content``).

    Raises
    ------
    MessageFormatError
        Naming the message index and what is wrong.
    """
    out: list[Message] = []
    for i, raw in enumerate(messages):
        role = raw.get("role")
        if role not in ("user", "assistant"):
            raise MessageFormatError(
                f"message {i}: role must be 'user' or 'assistant', got {role!r}"
            )
        content = raw.get("content", "")
        try:
            if isinstance(content, str):
                blocks: list[ContentBlock] = [TextBlock(text=content)]
            else:
                blocks = [_block_from_anthropic(b, f"message {i}") for b in content]
        except KeyError as exc:
            raise MessageFormatError(f"message {i}: content block lacks {exc.args[0]!r}") from None
        out.append(
            Message(participant=agent if role == "assistant" else user, content=tuple(blocks))
        )
    return out


MAX_CACHE_BREAKPOINTS = 4
"""Prompt-cache breakpoints a request may carry (Anthropic's limit)."""
CacheTTL = Literal["5m", "1h"]
"""Lifetimes a prompt-cache breakpoint may ask for."""


def to_anthropic(
    messages: Sequence[Message],
    *,
    agent: str = AGENT,
    cache_breakpoints: Sequence[int] = (),
    cache_ttl: CacheTTL | None = None,
) -> list[dict[str, Any]]:
    """Write Anthropic Messages API messages; consecutive same-role turns are merged.

    What the API refuses is left out: a thinking block without a signature or outside
    the agent's turns, and a text block with no visible text; a message left with no
    block is dropped (its turn merges with its neighbours). Signed thinking a model that
    binds it to its request chain would refuse is left out earlier, by the compile
    (``ContextManager.compile(thinking_binding=...)``), so this only writes what it is given.

    Parameters
    ----------
    messages : sequence of Message
    agent : str
        The participant whose turns are the assistant's.
    cache_breakpoints : sequence of int
        Indices of messages whose last block gets a ``cache_control`` mark (a thinking
        block cannot carry one: the mark goes on the last block before it that can).
    cache_ttl : str, optional
        The marks' ``ttl`` (``"5m"`` or ``"1h"``; the API's default when None).

    Examples
    --------
    >>> a = Message.text_message("User", "the task")
    >>> b = Message.text_message("Claude", "done")
    >>> to_anthropic([a, b], cache_breakpoints=[0])[0]["content"][-1]["cache_control"]
    {'type': 'ephemeral'}
    """
    marked = set(cache_breakpoints)
    control: dict[str, Any] = {"type": "ephemeral"}
    if cache_ttl is not None:
        control["ttl"] = cache_ttl
    out: list[dict[str, Any]] = []
    for position, m in enumerate(messages):
        role = "assistant" if m.participant == agent else "user"
        blocks: list[dict[str, Any]] = []
        for b in m.content:
            if isinstance(b, TextBlock):
                if b.text.strip():
                    blocks.append({"type": "text", "text": b.text})
            elif isinstance(b, ImageBlock):
                source = (
                    {"type": "url", "url": b.url}
                    if b.url
                    else {"type": "base64", "media_type": b.media_type, "data": b.data}
                )
                blocks.append({"type": "image", "source": source})
            elif isinstance(b, ToolUseBlock):
                blocks.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input})
            elif isinstance(b, ToolResultBlock):
                content: Any = (
                    b.content
                    if isinstance(b.content, str)
                    else [{"type": "text", "text": text_of([c])} for c in b.content]
                )
                blocks.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": b.tool_use_id,
                        "content": content,
                        "is_error": b.is_error,
                    }
                )
            elif isinstance(b, ThinkingBlock) and b.signature and role == "assistant":
                blocks.append(
                    {"type": "thinking", "thinking": b.thinking, "signature": b.signature}
                )
        if blocks and out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        elif blocks:
            out.append({"role": role, "content": blocks})
        if position in marked:
            _mark_last_block(out, control)
    return out


def _mark_last_block(out: list[dict[str, Any]], control: dict[str, Any]) -> None:
    """Put ``control`` on the last block written so far that may carry one."""
    for message in reversed(out):
        for block in reversed(message["content"]):
            if block["type"] not in ("thinking", "redacted_thinking"):
                block["cache_control"] = dict(control)
                return


def from_openai(
    messages: Sequence[Mapping[str, Any]], *, agent: str = AGENT, user: str = USER
) -> list[Message]:
    """Read OpenAI chat-completions messages (system, user, assistant with tool_calls, tool).

    ``system`` messages become a ``"System"`` participant; ``tool`` messages become
    a user-side message with a tool result, consecutive ones (the answers to
    parallel calls) one message.
    """
    out: list[Message] = []
    results = False  # does out[-1] hold tool results? (parallel calls answer as one message)
    for i, raw in enumerate(messages):
        role = raw.get("role")
        content = raw.get("content")
        text = _openai_text(content, i)
        if role == "system" or role == "developer":
            out.append(Message.text_message(SYSTEM, text))
        elif role == "user":
            out.append(Message.text_message(user, text))
        elif role == "assistant":
            blocks: list[ContentBlock] = [TextBlock(text=text)] if text else []
            for call in raw.get("tool_calls") or []:
                try:
                    fn = call["function"]
                    arguments = fn.get("arguments") or "{}"
                    parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
                    blocks.append(ToolUseBlock(id=call["id"], name=fn["name"], input=parsed))
                except (KeyError, json.JSONDecodeError) as exc:
                    raise MessageFormatError(f"message {i}: malformed tool call: {exc}") from None
            if not blocks:
                blocks = [TextBlock(text="")]
            out.append(Message(participant=agent, content=tuple(blocks)))
        elif role == "tool":
            call_id = raw.get("tool_call_id")
            if not call_id:
                raise MessageFormatError(f"message {i}: tool message lacks 'tool_call_id'")
            block = ToolResultBlock(tool_use_id=call_id, content=text)
            if results:
                joined = out[-1].model_copy(update={"content": (*out[-1].content, block)})
                joined.check_storable()  # the new block was never part of a checked message
                out[-1] = joined
            else:
                out.append(Message(participant=str(raw.get("name") or "Tool"), content=(block,)))
            results = True
            continue
        else:
            raise MessageFormatError(f"message {i}: unsupported role {role!r}")
        results = False
    return out


def _openai_text(content: Any, i: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    raise MessageFormatError(f"message {i}: content must be a string or a list of parts")


def to_openai(messages: Sequence[Message], *, agent: str = AGENT) -> list[dict[str, Any]]:
    """Write OpenAI chat-completions messages (tool results become ``tool`` messages;
    :data:`SYSTEM` turns ``system`` messages; thinking is not sent).

    Examples
    --------
    >>> a = Message.text_message("User", "the task")
    >>> b = Message.text_message("Claude", "done")
    >>> [m["role"] for m in to_openai([a, b])]
    ['user', 'assistant']
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.participant == agent:
            text = "\n".join(b.text for b in m.content if isinstance(b, TextBlock) and b.text)
            msg: dict[str, Any] = {"role": "assistant", "content": text or None}
            calls = [
                {
                    "id": b.id,
                    "type": "function",
                    "function": {"name": b.name, "arguments": json.dumps(b.input, sort_keys=True)},
                }
                for b in m.content
                if isinstance(b, ToolUseBlock)
            ]
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
            continue
        results = [b for b in m.content if isinstance(b, ToolResultBlock)]
        for r in results:
            body = r.content if isinstance(r.content, str) else text_of(r.content)
            out.append({"role": "tool", "tool_call_id": r.tool_use_id, "content": body})
        rest = [b for b in m.content if not isinstance(b, ToolResultBlock)]
        if rest or not results:
            role = "system" if m.participant == SYSTEM else "user"
            out.append({"role": role, "content": text_of(rest)})
    return out
