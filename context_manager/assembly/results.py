"""Function results in a transcript: where they are and how to rewrite them.

A result is either a whole ``function_result`` message or an inline
``function_result`` block inside another message. An inline block's function
is the one named by the most recent earlier ``function_call`` with the same id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .wire import AnyMessage, FunctionCallBlock, FunctionResultBlock, FunctionResultMessage

__all__ = [
    "KEEP_DETAILS",
    "ResultSite",
    "Rewrite",
    "apply_rewrites",
    "result_sites",
    "rewrite_message",
]


@dataclass(frozen=True)
class ResultSite:
    """One function result: message-level when ``block_index`` is ``None``.

    ``function_id`` is ``None`` for an inline result no earlier call names.
    """

    message_index: int
    block_index: int | None
    function_call_id: str
    function_id: str | None
    content: tuple[Any, ...]

    @property
    def key(self) -> tuple[int, int | None]:
        """Position of the result: (message index, block index or ``None``)."""
        return (self.message_index, self.block_index)


class _Keep:
    def __repr__(self) -> str:
        return "KEEP_DETAILS"


KEEP_DETAILS: Any = _Keep()
"""Marker: a rewrite leaves the message's ``details`` as they are."""


@dataclass(frozen=True)
class Rewrite:
    """New content for a result and, for a message-level result, optionally new details."""

    content: tuple[Any, ...]
    details: Any = KEEP_DETAILS


def result_sites(messages: Sequence[AnyMessage]) -> list[ResultSite]:
    """Every function result of ``messages`` in transcript order."""
    calls: dict[str, str] = {}
    sites: list[ResultSite] = []
    for i, message in enumerate(messages):
        if isinstance(message, FunctionResultMessage):
            sites.append(
                ResultSite(i, None, message.function_call_id, message.function_id, message.content)
            )
            continue
        for j, block in enumerate(message.content):
            if isinstance(block, FunctionCallBlock):
                calls[block.id] = block.function_id
            elif isinstance(block, FunctionResultBlock):
                sites.append(
                    ResultSite(
                        i,
                        j,
                        block.function_call_id,
                        calls.get(block.function_call_id),
                        block.content,
                    )
                )
    return sites


def apply_rewrites(
    messages: Sequence[AnyMessage], rewrites: Mapping[tuple[int, int | None], Rewrite]
) -> list[AnyMessage]:
    """A new list with the results at the given positions rewritten.

    Untouched messages are the same objects; nothing is modified in place.
    """
    out = list(messages)
    by_message: dict[int, dict[int | None, Rewrite]] = {}
    for (i, j), rewrite in rewrites.items():
        by_message.setdefault(i, {})[j] = rewrite
    for i, changes in by_message.items():
        out[i] = rewrite_message(out[i], changes)
    return out


def rewrite_message(message: AnyMessage, changes: Mapping[int | None, Rewrite]) -> AnyMessage:
    """``message`` with its results rewritten: key ``None`` for the message itself,
    a block index for an inline result."""
    if None in changes:
        rewrite = changes[None]
        update: dict[str, Any] = {"content": rewrite.content}
        if rewrite.details is not KEEP_DETAILS:
            update["details"] = rewrite.details
        return message.model_copy(update=update)
    content = list(message.content)
    for j, rewrite in changes.items():
        assert j is not None
        content[j] = content[j].model_copy(update={"content": rewrite.content})
    return message.model_copy(update={"content": tuple(content)})
