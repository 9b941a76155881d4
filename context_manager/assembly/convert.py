"""The one conversion between the library's messages and the assembly's wire messages.

There are two message models on purpose:

* :class:`~context_manager.messages.Message` is what the library stores and compiles:
  a free-form ``participant``, Anthropic-style blocks (``tool_use``, ``tool_result``,
  images by ``media_type`` or ``url``), metadata and an optional timestamp.
* the wire messages of :mod:`context_manager.assembly.wire` are the published JSON
  contract of :func:`~context_manager.assembly.assemble`, ``count_tokens``, ``prune``
  and ``compact``: a fixed ``role`` (``user``, ``assistant``, ``function_result``,
  ``custom``), ``function_call`` / ``function_result`` blocks, required millisecond
  timestamps, and a serialisation fixed field by field (the token estimate measures
  it). It must not change when the library's model does.

Code holding library messages that wants the stateless functions converts here, and
only here, with :func:`to_wire` (or :func:`wire_expansion`, which also says where each
wire message came from) and back with :func:`from_wire`.

Examples
--------
>>> from context_manager.messages import Message, ToolResultBlock, ToolUseBlock
>>> ask = Message.text_message("User", "list files")
>>> call = Message(participant="Claude", content=(ToolUseBlock(id="t", name="ls", input={}),))
>>> answer = Message(participant="User", content=(ToolResultBlock(tool_use_id="t", content="a"),))
>>> wire = to_wire([ask, call, answer])
>>> [w["role"] for w in wire]
['user', 'assistant', 'function_result']
>>> from_wire(wire) == [ask, call, answer]
True
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..messages import (
    AGENT,
    USER,
    ContentBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    text_of,
)

__all__ = [
    "TRANSCRIPT_MODEL",
    "TRANSCRIPT_PROVIDER",
    "UNKNOWN_FUNCTION",
    "from_wire",
    "to_wire",
    "wire_blocks",
    "wire_expansion",
]

TRANSCRIPT_MODEL = "agent"
"""The ``model`` of an assistant wire message written from a library message."""
TRANSCRIPT_PROVIDER = "transcript"
"""The ``provider`` of an assistant wire message written from a library message."""
UNKNOWN_FUNCTION = "tool"
"""The ``function_id`` of a result whose call is not among the messages converted."""


def wire_blocks(blocks: Sequence[ContentBlock]) -> list[dict[str, Any]]:
    """Library content blocks as wire content blocks (JSON-ready).

    Text stays text; thinking keeps its text (not its signature); a tool call becomes a
    ``function_call``; a tool result found among other blocks becomes its text, and an
    image ``[image]``.

    Examples
    --------
    >>> wire_blocks([ToolUseBlock(id="t", name="ls", input={"p": "."}), TextBlock(text="ok")])
    [{'type': 'function_call', 'id': 't', 'function_id': 'ls', 'arguments': {'p': '.'}}, \
{'type': 'text', 'text': 'ok'}]
    """
    out: list[dict[str, Any]] = []
    for b in blocks:
        if isinstance(b, TextBlock):
            out.append({"type": "text", "text": b.text})
        elif isinstance(b, ThinkingBlock):
            out.append({"type": "thinking", "text": b.thinking})
        elif isinstance(b, ToolUseBlock):
            out.append(
                {"type": "function_call", "id": b.id, "function_id": b.name, "arguments": b.input}
            )
        elif isinstance(b, ToolResultBlock):
            out.append({"type": "text", "text": text_of([b])})
        else:
            out.append({"type": "text", "text": "[image]"})
    return out


def to_wire(messages: Sequence[Message], *, agent: str = AGENT) -> list[dict[str, Any]]:
    """Library messages as wire messages (JSON-ready).

    The agent's turns become ``assistant`` messages (tool calls as ``function_call``
    blocks); each tool result becomes a ``function_result`` message of its own;
    everything else becomes a ``user`` message. Timestamps are the message positions.

    Parameters
    ----------
    messages : sequence of Message
    agent : str
        The participant whose turns are the assistant's.

    Returns
    -------
    list of dict
        Wire messages, as :func:`~context_manager.assembly.assemble` reads them.

    Examples
    --------
    >>> to_wire([Message.text_message("User", "hi")])
    [{'role': 'user', 'content': [{'type': 'text', 'text': 'hi'}], 'timestamp': 0}]
    """
    return wire_expansion(messages, agent=agent)[0]


def wire_expansion(
    messages: Sequence[Message], *, agent: str = AGENT
) -> tuple[list[dict[str, Any]], list[int]]:
    """:func:`to_wire`'s messages, and for each the index of the message it came from.

    One message may become several wire messages (each of its tool results is one), so
    an index into the wire messages (``tail_start_index``, say) maps back through the
    second list.

    Parameters
    ----------
    messages : sequence of Message
    agent : str
        The participant whose turns are the assistant's.

    Returns
    -------
    tuple of (list of dict, list of int)

    Examples
    --------
    >>> answer = Message(
    ...     participant="User",
    ...     content=(ToolResultBlock(tool_use_id="t", content="a"), TextBlock(text="next")),
    ... )
    >>> wire, owners = wire_expansion([Message.text_message("User", "go"), answer])
    >>> [w["role"] for w in wire], owners
    (['user', 'function_result', 'user'], [0, 1, 1])
    """
    names = {b.id: b.name for m in messages for b in m.content if isinstance(b, ToolUseBlock)}
    out: list[dict[str, Any]] = []
    owners: list[int] = []
    for t, m in enumerate(messages):
        if m.participant == agent:
            owners.append(t)
            out.append(
                {
                    "role": "assistant",
                    "content": wire_blocks(m.content),
                    "stop_reason": "tool_use" if m.tool_use_ids else "end_turn",
                    "model": TRANSCRIPT_MODEL,
                    "provider": TRANSCRIPT_PROVIDER,
                    "timestamp": t,
                }
            )
            continue
        rest: list[ContentBlock] = []
        for b in m.content:
            if isinstance(b, ToolResultBlock):
                owners.append(t)
                out.append(
                    {
                        "role": "function_result",
                        "function_call_id": b.tool_use_id,
                        "function_id": names.get(b.tool_use_id, UNKNOWN_FUNCTION),
                        "content": [{"type": "text", "text": text_of([b])}],
                        "is_error": bool(b.is_error),
                        "timestamp": t,
                    }
                )
            else:
                rest.append(b)
        if rest or not m.content:
            owners.append(t)
            out.append({"role": "user", "content": wire_blocks(rest), "timestamp": t})
    return out, owners


def from_wire(messages: Sequence[Any], *, agent: str = AGENT) -> list[Message]:
    """Wire messages (models or mappings) back as library messages.

    ``assistant`` messages become the agent's; every other role becomes a :data:`USER`
    message. A ``function_result`` message becomes a tool result holding its joined
    text; consecutive ones (the answers to parallel calls) share one message. A
    ``function_call`` block becomes a tool call, thinking keeps its text, and an image
    or file block becomes a text block holding its JSON.

    Parameters
    ----------
    messages : sequence
        Wire messages, as mappings or as the wire models of
        :mod:`context_manager.assembly.wire`.
    agent : str
        The participant given to ``assistant`` messages.

    Returns
    -------
    list of Message

    Examples
    --------
    >>> results = [
    ...     {"role": "function_result", "function_call_id": c, "function_id": "ls",
    ...      "content": [{"type": "text", "text": c}], "timestamp": 0}
    ...     for c in ("a", "b")
    ... ]
    >>> [m.tool_result_ids for m in from_wire(results)]
    [('a', 'b')]
    """
    out: list[Message] = []
    results = False  # does out[-1] hold tool results? (parallel calls answer as one message)
    for raw in messages:
        d = raw if isinstance(raw, Mapping) else raw.wire()
        role = d["role"]
        if role == "function_result":
            block = ToolResultBlock(
                tool_use_id=d["function_call_id"],
                content="".join(c.get("text", "") for c in d["content"]),
                is_error=bool(d.get("is_error")),
            )
            if results:
                joined = out[-1].model_copy(update={"content": (*out[-1].content, block)})
                joined.check_storable()  # the new block was never part of a checked message
                out[-1] = joined
            else:
                out.append(Message(participant=USER, content=(block,)))
            results = True
            continue
        blocks: list[ContentBlock] = []
        for c in d["content"]:
            if c["type"] == "function_call":
                blocks.append(ToolUseBlock(id=c["id"], name=c["function_id"], input=c["arguments"]))
            elif c["type"] == "function_result":
                inner = "".join(x.get("text", "") for x in c["content"])
                blocks.append(ToolResultBlock(tool_use_id=c["function_call_id"], content=inner))
            elif c["type"] == "thinking":
                blocks.append(ThinkingBlock(thinking=c["text"]))
            elif c["type"] == "text":
                blocks.append(TextBlock(text=c["text"]))
            else:
                blocks.append(TextBlock(text=json.dumps(c, sort_keys=True)))
        out.append(
            Message(participant=agent if role == "assistant" else USER, content=tuple(blocks))
        )
        results = False
    return out
