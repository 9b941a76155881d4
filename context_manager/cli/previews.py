"""One-line previews of what a store holds, for the commands that describe one: a
content block (:func:`block_preview`), a message (:func:`message_preview`), the first
line of a text (:func:`first_line`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def block_preview(block: Any, width: int = 60) -> str:
    """A one-line preview of a stored content block.

    Parameters
    ----------
    block : dict
        A content block as the store keeps it (``type`` and its fields).
    width : int
        At most this many characters of the block's own text.

    Returns
    -------
    str
        The text of a text block; ``tool_use name({...})`` for a call;
        ``tool_result(<id>): <first chars>`` for a result (``error`` after the id
        when it failed); ``thinking: ...``; ``[image]``.

    Examples
    --------
    >>> block_preview({"type": "tool_use", "id": "c1", "name": "ls", "input": {"p": "."}})
    'tool_use ls({"p": "."})'
    >>> block_preview({"type": "tool_result", "tool_use_id": "c1", "content": "a.py\\nb.py"})
    'tool_result(c1): a.py b.py'
    """
    if not isinstance(block, dict):
        return _shorten(str(block), width)
    kind = block.get("type")
    if kind == "text":
        return _shorten(str(block.get("text", "")), width)
    if kind == "tool_use":
        arguments = json.dumps(block.get("input") or {}, ensure_ascii=False, default=str)
        return f"tool_use {block.get('name', '?')}({_shorten(arguments, width)})"
    if kind == "tool_result":
        content = block.get("content", "")
        if isinstance(content, list):
            content = " ".join(
                str(part.get("text", "[image]")) if isinstance(part, dict) else str(part)
                for part in content
            )
        call = str(block.get("tool_use_id", "?")) + (", error" if block.get("is_error") else "")
        return f"tool_result({call}): {_shorten(str(content), width)}"
    if kind == "thinking":
        return f"thinking: {_shorten(str(block.get('thinking', '')), width)}"
    if kind == "image":
        return "[image]"
    return f"[{kind}]"


def message_preview(content: Sequence[Any], width: int = 90) -> str:
    """A one-line preview of a stored message's content blocks, joined by `` | ``.

    Parameters
    ----------
    content : sequence of dict
        The message's content blocks as the store keeps them.
    width : int
        At most this many characters in all.

    Returns
    -------
    str
        See :func:`block_preview`; ``(empty)`` for a message without visible content.
    """
    each = max(24, width // max(1, len(content)))
    parts = [p for p in (block_preview(b, each) for b in content) if p]
    return _shorten(" | ".join(parts), width) if parts else "(empty)"


def first_line(text: str, width: int = 60) -> str:
    """The first line of ``text``, cut to ``width`` characters."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 3] + "..."
