"""The byte-heuristic token estimate of the assembly's wire messages.

Text costs ``floor(UTF-8 bytes / 4)``. A message costs the same of its compact
JSON, with every image's data blanked and ``details`` of a function result
nulled (unless they are a denial envelope, which the provider does see), plus
4096 per image. Base64 length never counts.

How text and a message body are priced is defined once, in
:mod:`context_manager.tokens` (:func:`~context_manager.tokens.heuristic_text_tokens`,
:func:`~context_manager.tokens.message_json_tokens`), which the library's
:class:`~context_manager.tokens.ByteHeuristicCounter` uses too; this module says
which body a wire message is priced on, and memoises estimates for one request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from ..tokens import (
    HEURISTIC_IMAGE_TOKENS,
    compact_json,
    heuristic_text_tokens,
    message_json_tokens,
    utf8_length,
)
from .wire import AgentFunction, AnyMessage, FunctionResultMessage, count_images, joined_text

__all__ = [
    "IMAGE_TOKENS",
    "Estimator",
    "function_tokens",
    "is_char_boundary",
    "is_denied",
    "message_tokens",
    "result_tokens",
    "text_bytes",
    "text_tokens",
]

IMAGE_TOKENS: Final = HEURISTIC_IMAGE_TOKENS
"""Price of one image, whatever its size."""

text_tokens = heuristic_text_tokens


text_bytes = utf8_length


def is_char_boundary(raw: bytes, at: int) -> bool:
    """Whether a cut of UTF-8 ``raw`` at byte ``at`` falls between characters."""
    return at <= 0 or at >= len(raw) or (raw[at] & 0xC0) != 0x80


def is_denied(details: Any) -> bool:
    """Whether ``details`` is a denial envelope (``{"status": "denied", ...}``)."""
    return isinstance(details, dict) and details.get("status") == "denied"


def message_tokens(message: AnyMessage, count_text: Callable[[str], int] = text_tokens) -> int:
    """Estimated tokens of one message (``count_text`` prices its compact JSON).

    Examples
    --------
    >>> from context_manager.assembly.wire import TextBlock, UserMessage
    >>> message_tokens(UserMessage(content=(TextBlock(text="hello"),), timestamp=1001))
    18
    """
    body = message.wire()
    if (
        isinstance(message, FunctionResultMessage)
        and message.details is not None
        and not is_denied(message.details)
    ):
        body["details"] = None
    return message_json_tokens(body, count_text, IMAGE_TOKENS)


def function_tokens(function: AgentFunction, count_text: Callable[[str], int] = text_tokens) -> int:
    """Estimated tokens of one function offered to the model (its compact JSON)."""
    return count_text(compact_json(function.wire()))


def result_tokens(content: tuple[Any, ...]) -> int:
    """Tokens of a function result's content: its joined text plus 4096 per image."""
    return text_tokens(joined_text(content)) + IMAGE_TOKENS * count_images(content)


class Estimator:
    """Message estimates memoised per message object for the length of one request.

    Messages are immutable, so an estimate holds as long as the object lives;
    the memo keeps a reference to each object it has priced.

    Parameters
    ----------
    count_text : callable, optional
        Prices a string: the byte heuristic by default, or an exact counter's
        ``count_text`` (every estimate then counts the same compact JSON with it).
    """

    def __init__(self, count_text: Callable[[str], int] = text_tokens) -> None:
        self._memo: dict[int, tuple[AnyMessage, int]] = {}
        self.count_text = count_text

    def text(self, text: str) -> int:
        """Tokens of a string."""
        return self.count_text(text)

    def message(self, message: AnyMessage) -> int:
        """Estimated tokens of ``message``."""
        hit = self._memo.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        value = message_tokens(message, self.count_text)
        self._memo[id(message)] = (message, value)
        return value

    def total(self, messages: list[AnyMessage]) -> int:
        """Estimated tokens of ``messages``."""
        return sum(self.message(m) for m in messages)
