"""Our messages as LangChain messages and back.

:func:`to_langchain` and :func:`from_langchain` are the one conversion between
:class:`~context_manager.messages.Message` and LangChain's ``BaseMessage``: the LangChain
middleware (:mod:`context_manager.integrations.langchain`) stores and sends through them.

Messages
--------
* The agent's message is one ``AIMessage``: its text, reasoning and images as content,
  its tool calls as ``tool_calls`` (ids kept).
* Any other participant's message is its tool results, each a ``ToolMessage``
  (``tool_call_id`` kept, ``name`` the participant, ``status="error"`` for an error),
  then its other blocks as one ``SystemMessage`` (:data:`~context_manager.messages.SYSTEM`)
  or ``HumanMessage``. Results come first, as chat APIs want them right after the call.
  A ``HumanMessage`` carries its participant in ``additional_kwargs`` (key
  :data:`PARTICIPANT`), not in ``name``, which OpenAI checks against a pattern that
  a participant such as ``"Context Manager"`` does not match. Read back, a
  ``HumanMessage`` without that key is the user's, whatever its ``name`` (as
  :func:`~context_manager.messages.from_openai` reads a user message).
* Read back, consecutive ``ToolMessage`` s are one message (the results of parallel
  calls), and the parts of a message split on the way out are joined again
  (:mod:`context_manager.integrations.parts`).

Blocks
------
* Text: ``{"type": "text"}`` (a lone text block as a plain string).
* Reasoning: ``{"type": "thinking", "thinking": ..., "signature": ...}``, the form
  ``langchain-anthropic`` sends back and ``langchain-openai`` leaves out of Chat
  Completions requests. LangChain's ``{"type": "reasoning"}`` blocks (a signature in
  ``extras``, an OpenAI ``summary``) are read too.
* Images: ``{"type": "image", "url": ...}`` or ``{"type": "image", "base64": ...,
  "mime_type": ...}``; OpenAI's ``image_url`` and Anthropic's ``source`` forms are
  read too.
* Any other block read from LangChain (audio, a file, a server tool's call...) is
  kept as a text block holding its JSON, and so is a block with no place in the
  LangChain message it goes to (a tool call outside the agent's message, a result
  inside it). Nothing is dropped and nothing raises. Tool-call blocks in an
  ``AIMessage``'s content that repeat one of its ``tool_calls`` are read once, from
  ``tool_calls``.

Needs ``langchain-core`` when called (the ``langchain`` extra); importing the module
loads none of LangChain.

Examples
--------
>>> from context_manager.messages import Message, ThinkingBlock, ToolResultBlock, ToolUseBlock
>>> call = Message(participant="Claude", content=(
...     ThinkingBlock(thinking="list it first", signature="sig"),
...     ToolUseBlock(id="c1", name="ls", input={"path": "."}),
... ))
>>> answer = Message(participant="ls", content=(ToolResultBlock(tool_use_id="c1", content="a"),))
>>> sent = to_langchain([call, answer])
>>> [type(m).__name__ for m in sent]
['AIMessage', 'ToolMessage']
>>> sent[0].content
[{'type': 'thinking', 'thinking': 'list it first', 'signature': 'sig'}]
>>> sent[0].tool_calls[0]["id"], sent[1].tool_call_id
('c1', 'c1')
>>> from_langchain(sent) == [call, answer]
True
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

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
from .parts import PartJoiner, part_markers

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage, ToolMessage

__all__ = ["PARTICIPANT", "from_langchain", "to_langchain"]

PARTICIPANT = "context_manager_participant"
"""The ``additional_kwargs`` key of a ``HumanMessage`` that names its participant."""

_CALL_BLOCKS = frozenset(
    {"tool_use", "tool_call", "tool_call_chunk", "invalid_tool_call", "function_call"}
)
"""Content block types that can repeat an ``AIMessage``'s ``tool_calls``."""

_Content = str | list[str | dict[str, Any]]


# ------------------------------------------------------------------ ours -> LangChain
def to_langchain(
    messages: Sequence[Message], *, agent: str = AGENT, start: int | None = 0
) -> list[BaseMessage]:
    """LangChain messages for ours, tool calls and results paired by their ids.

    Parameters
    ----------
    messages : sequence of Message
        Our messages.
    agent : str
        The participant whose messages are the model's (``AIMessage``).
    start : int or None
        The index of the first message in its conversation. Message ``i`` gets the id
        ``cm-<i>-<part>`` and a split message marks its parts
        (:func:`~context_manager.integrations.parts.part_markers`), so that
        :func:`from_langchain` joins them again even when the conversation is
        converted piece by piece. None: no ids and no marks (messages that only go to
        a model).

    Returns
    -------
    list of BaseMessage
        In the order of ``messages``; a message becomes one LangChain message or, when
        it holds tool results, one per result and one for its other blocks.

    Examples
    --------
    >>> from context_manager.messages import ImageBlock, Message, TextBlock, ToolResultBlock
    >>> results = Message(participant="User", content=(
    ...     TextBlock(text="both ran"),
    ...     ToolResultBlock(tool_use_id="c1", content="ok"),
    ...     ImageBlock(url="https://x.io/a.png"),
    ... ))
    >>> [(type(m).__name__, m.id) for m in to_langchain([results], start=4)]
    [('ToolMessage', 'cm-4-0'), ('HumanMessage', 'cm-4-1')]
    >>> to_langchain([results], start=None)[1].content
    [{'type': 'text', 'text': 'both ran'}, {'type': 'image', 'url': 'https://x.io/a.png'}]
    """
    from langchain_core.messages import (
        AIMessage,
        HumanMessage,
        SystemMessage,
        ToolCall,
        ToolMessage,
    )

    out: list[BaseMessage] = []
    for i, m in enumerate(messages, start or 0):
        ident = _Ident(start is not None, i)
        if m.participant == agent:
            calls = [
                ToolCall(id=b.id, name=b.name, args=dict(b.input), type="tool_call")
                for b in m.content
                if isinstance(b, ToolUseBlock)
            ]
            said = [b for b in m.content if not isinstance(b, ToolUseBlock)]
            out.append(AIMessage(content=_content(said), tool_calls=calls, id=ident.id(0)))
            continue
        results = [b for b in m.content if isinstance(b, ToolResultBlock)]
        for part, result in enumerate(results):
            body = result.content if isinstance(result.content, str) else _blocks(result.content)
            out.append(
                ToolMessage(
                    content=body,
                    tool_call_id=result.tool_use_id,
                    name=m.participant,
                    status="error" if result.is_error else "success",
                    id=ident.id(part),
                    additional_kwargs=ident.marks(part),
                )
            )
        rest = [b for b in m.content if not isinstance(b, ToolResultBlock)]
        if rest or not results:
            part = len(results)
            if m.participant == SYSTEM:
                out.append(
                    SystemMessage(
                        content=_content(rest),
                        id=ident.id(part),
                        additional_kwargs=ident.marks(part),
                    )
                )
            else:
                extra = {PARTICIPANT: m.participant, **ident.marks(part)}
                out.append(
                    HumanMessage(content=_content(rest), id=ident.id(part), additional_kwargs=extra)
                )
    return out


class _Ident:
    """The id and the part marks of message ``index``'s parts (none when not ``given``)."""

    def __init__(self, given: bool, index: int) -> None:
        self.given, self.index = given, index

    def id(self, part: int) -> str | None:
        return f"cm-{self.index}-{part}" if self.given else None

    def marks(self, part: int) -> dict[str, Any]:
        return part_markers(self.index, part) if self.given else {}


def _content(blocks: Sequence[ContentBlock]) -> _Content:
    """A message's content: no block as ``""``."""
    return _blocks(blocks) if blocks else ""


def _blocks(blocks: Sequence[ContentBlock]) -> _Content:
    """Blocks as LangChain content blocks (a lone text block as its text)."""
    if len(blocks) == 1 and isinstance(blocks[0], TextBlock):
        return blocks[0].text
    return [_block(b) for b in blocks]


def _block(b: ContentBlock) -> dict[str, Any]:
    if isinstance(b, TextBlock):
        return {"type": "text", "text": b.text}
    if isinstance(b, ThinkingBlock):
        thought: dict[str, Any] = {"type": "thinking", "thinking": b.thinking}
        if b.signature:
            thought["signature"] = b.signature
        return thought
    if isinstance(b, ImageBlock):
        if b.url:
            return {"type": "image", "url": b.url}
        return {"type": "image", "base64": b.data or "", "mime_type": b.media_type}
    # a tool call outside the agent's message, a result inside it: no place for either
    return {"type": "text", "text": b.model_dump_json(exclude_none=True)}


# ------------------------------------------------------------------ LangChain -> ours
def from_langchain(
    messages: Sequence[BaseMessage], *, agent: str = AGENT, user: str = USER
) -> list[Message]:
    """Our messages for LangChain messages, tool calls and results paired by their ids.

    Parameters
    ----------
    messages : sequence of BaseMessage
        LangChain messages (those of :func:`to_langchain` or any others).
    agent : str
        The participant of an ``AIMessage`` (and of a ``ChatMessage`` with the role
        ``assistant``).
    user : str
        The participant of a ``HumanMessage`` (or any other message) without
        ``additional_kwargs[PARTICIPANT]``; its ``name`` is not read. A
        ``ToolMessage`` is that key's participant, else its ``name``'s, else
        ``"Tool"``'s; a ``SystemMessage`` is :data:`~context_manager.messages.SYSTEM`'s.

    Returns
    -------
    list of Message
        Consecutive ``ToolMessage`` s as one message (the results of parallel calls)
        and the parts of a message :func:`to_langchain` split joined again; every
        other LangChain message as one of ours. An ``AIMessage``'s ``tool_calls``
        become tool calls with their ids (``call_<k>`` for a call without one), its
        ``invalid_tool_calls`` calls whose input is ``{"arguments": <the raw text>}``
        (so that the error result answering one stays paired).

    Examples
    --------
    >>> from langchain_core.messages import AIMessage, HumanMessage
    >>> asked = HumanMessage(content=[
    ...     {"type": "text", "text": "what does it say?"},
    ...     {"type": "audio", "url": "https://example.com/note.mp3"},
    ... ])
    >>> for block in from_langchain([asked])[0].content:
    ...     print(block.text)
    what does it say?
    {"type": "audio", "url": "https://example.com/note.mp3"}
    >>> thought = AIMessage(content=[{"type": "reasoning", "reasoning": "short"}, "hi"])
    >>> [type(b).__name__ for b in from_langchain([thought])[0].content]
    ['ThinkingBlock', 'TextBlock']
    """
    from langchain_core.messages import AIMessage, SystemMessage, ToolMessage

    out = PartJoiner()
    for raw in messages:
        extra = raw.additional_kwargs
        role = getattr(raw, "role", None)  # a ChatMessage's
        if isinstance(raw, ToolMessage):
            out.tool_result(_result(raw), _marked(raw) or raw.name or "Tool", extra)
        elif isinstance(raw, AIMessage) or role in ("assistant", "ai"):
            out.add(Message(participant=agent, content=_agent_blocks(raw)))
        elif isinstance(raw, SystemMessage) or role in ("system", "developer"):
            out.user_part(_read(raw.content), SYSTEM, extra)
        else:
            out.user_part(_read(raw.content), _marked(raw) or user, extra)
    return out.messages


def _marked(raw: BaseMessage) -> str | None:
    """The participant :func:`to_langchain` marked a message with (None: not marked)."""
    named = raw.additional_kwargs.get(PARTICIPANT)
    return named if isinstance(named, str) and named else None


def _result(raw: ToolMessage) -> ToolResultBlock:
    """A ``ToolMessage``'s result: its text, or its text and image blocks (any other
    block as its text)."""
    body: str | list[TextBlock | ImageBlock]
    if isinstance(raw.content, str):
        body = raw.content
    else:
        body = [
            b if isinstance(b, TextBlock | ImageBlock) else TextBlock(text=text_of([b]))
            for b in _read(raw.content)
        ]
    return ToolResultBlock(
        tool_use_id=raw.tool_call_id, content=body, is_error=raw.status == "error"
    )


def _agent_blocks(raw: BaseMessage) -> tuple[ContentBlock, ...]:
    """An ``AIMessage``'s blocks: its content (empty text left out), then its tool calls."""
    calls = list(getattr(raw, "tool_calls", None) or ())
    invalid = list(getattr(raw, "invalid_tool_calls", None) or ())
    carried = {str(c["id"]) for c in [*calls, *invalid] if c.get("id")}
    blocks = [
        b for b in _read(raw.content, carried) if not (isinstance(b, TextBlock) and not b.text)
    ]
    for k, call in enumerate(calls):
        call_id = str(call.get("id") or f"call_{k}")
        blocks.append(ToolUseBlock(id=call_id, name=call["name"], input=dict(call["args"])))
    for bad in invalid:  # answered by the agent's error result
        if bad.get("id"):
            arguments = {"arguments": bad.get("args") or ""}
            name = bad.get("name") or "unknown"
            blocks.append(ToolUseBlock(id=str(bad["id"]), name=name, input=arguments))
        else:
            blocks.append(TextBlock(text=_json(dict(bad))))
    return tuple(blocks) or (TextBlock(text=""),)


def _read(content: Any, carried: Collection[str] = ()) -> list[ContentBlock]:
    """Our blocks for LangChain content (``carried``: the ids of the message's
    ``tool_calls``, whose blocks in the content are skipped)."""
    if isinstance(content, str):
        return [TextBlock(text=content)]
    blocks: list[ContentBlock] = []
    for part in content:
        if isinstance(part, str):
            blocks.append(TextBlock(text=part))
        elif not isinstance(part, Mapping):
            blocks.append(TextBlock(text=_json(part)))
        elif not _repeats_call(part, carried):
            blocks.append(_read_block(part) or TextBlock(text=_json(part)))
    return blocks


def _read_block(part: Mapping[str, Any]) -> ContentBlock | None:
    """The block for a LangChain content block, None when it is not one we read."""
    kind = part.get("type")
    if kind == "text":
        return TextBlock(text=str(part.get("text") or ""))
    if kind in ("thinking", "reasoning"):
        return _thinking(part)
    if kind in ("image", "image_url"):
        return _image(part)
    return None


def _repeats_call(part: Mapping[str, Any], carried: Collection[str]) -> bool:
    """Is ``part`` a tool-call block for one of the message's ``tool_calls``?"""
    if part.get("type") not in _CALL_BLOCKS:
        return False
    ids = (part.get("id"), part.get("call_id"))
    return any(isinstance(i, str) and i in carried for i in ids)


def _thinking(part: Mapping[str, Any]) -> ThinkingBlock:
    text = next((part[k] for k in ("thinking", "reasoning") if isinstance(part.get(k), str)), None)
    if text is None:  # OpenAI's Responses form: {"summary": [{"text": ...}, ...]}
        summary = part.get("summary")
        pieces = summary if isinstance(summary, list) else []
        text = "\n".join(str(s.get("text", "")) for s in pieces if isinstance(s, Mapping))
    signature = part.get("signature")
    extras = part.get("extras")
    if not isinstance(signature, str) and isinstance(extras, Mapping):
        signature = extras.get("signature")
    return ThinkingBlock(thinking=text, signature=signature if isinstance(signature, str) else None)


def _image(part: Mapping[str, Any]) -> ImageBlock | None:
    """The image of an ``image`` or ``image_url`` block; None for one we cannot hold
    (a provider's file id)."""
    url = part.get("image_url") if part.get("type") == "image_url" else part.get("url")
    if isinstance(url, Mapping):  # OpenAI's {"image_url": {"url": ...}}
        url = url.get("url")
    source = part.get("source")
    if isinstance(source, Mapping):  # Anthropic's {"source": {"type": ..., ...}}
        url = url or source.get("url")
        data, media = source.get("data"), source.get("media_type")
    else:
        data = part.get("base64") or part.get("data")
        media = part.get("mime_type") or part.get("media_type")
    if isinstance(url, str) and url:
        return ImageBlock(url=url)
    if not data and part.get("file_id"):
        return None
    return ImageBlock(
        data=data if isinstance(data, str) and data else None,
        media_type=media if isinstance(media, str) and media else None,
    )


def _json(value: Any) -> str:
    """``value`` as JSON text (a value JSON cannot hold as its ``str``)."""
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)
