"""Bodies stored in parts: one large text message kept as several shards.

A strategy may ask the manager to store a large text message as *shards*
(:meth:`~context_manager.strategies.base.Strategy.shard_plan`): consecutive stored
messages of the same participant whose texts, joined in order, are the message's text
byte for byte. They share a *body group*, named by the id of the first shard (the id
:meth:`~context_manager.ContextManager.add_message` returns). Each shard records its
place in its message metadata under :data:`SHARD_KEY`: ``{"index": i, "count": n}``,
plus ``"group": <first shard's id>`` on every shard but the first (whose group is its
own id).

The manager keeps a body whole where it matters: shards cannot be edited, a body is
removed, held and pinned as one, a branch never starts inside one, and a compile sends
consecutive raw shards of one body as one message. Memories fold shards like any other
messages, so a huge pasted document is remembered in pieces.

Examples
--------
>>> from context_manager import CharsCounter
>>> parts = split_text("one two.\\n\\nthree four five.\\n\\nsix seven.", CharsCounter(), 3)
>>> parts
['one two.\\n\\n', 'three four five.\\n\\n', 'six seven.']
>>> "".join(parts) == "one two.\\n\\nthree four five.\\n\\nsix seven."
True
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ConfigError
from .messages import Message, TextBlock
from .tokens import TokenCounter

if TYPE_CHECKING:
    from .strategies.base import StoredMessage

__all__ = [
    "SHARD_KEY",
    "BodyShardError",
    "Shard",
    "body_group_of",
    "shard_of",
    "shardable_text",
    "split_text",
]

SHARD_KEY = "body_shard"
"""The metadata key under which a shard records its place in its body."""


class BodyShardError(ConfigError):
    """A change that would break a body stored in parts: editing a shard, removing one
    shard alone or a range that cuts a body. Names the argument and the fix.

    Attributes
    ----------
    param : str
        The offending argument (``message_id``, ``first_id``...).
    body_group_id : str
        The body the change would break (its first shard's id).
    """

    def __init__(self, message: str, *, param: str, body_group_id: str) -> None:
        super().__init__(message)
        self.param = param
        self.body_group_id = body_group_id


@dataclass(frozen=True)
class Shard:
    """A stored shard's place in its body.

    Examples
    --------
    >>> Shard(group="7", index=1, count=3).last
    False
    """

    group: str
    """The body group id: the first shard's id."""
    index: int
    """Its place in the body, from 0."""
    count: int
    """How many shards the body has."""

    @property
    def last(self) -> bool:
        """Whether it is the body's last shard."""
        return self.index == self.count - 1


def shard_of(message_id: str, message: Message) -> Shard | None:
    """The place in its body of the stored message ``message_id``, or None when it is
    not a shard.

    Examples
    --------
    >>> m = Message.text_message("User", "x", metadata={SHARD_KEY: {"index": 0, "count": 2}})
    >>> shard_of("5", m)
    Shard(group='5', index=0, count=2)
    >>> shard_of("6", Message.text_message("User", "x")) is None
    True
    """
    place: Any = message.metadata.get(SHARD_KEY)
    if not isinstance(place, dict):
        return None
    index, count = place.get("index"), place.get("count")
    if not isinstance(index, int) or not isinstance(count, int) or not 0 <= index < count:
        return None
    group = place.get("group", message_id if index == 0 else None)
    if not isinstance(group, str):
        return None
    return Shard(group=group, index=index, count=count)


def body_group_of(stored: StoredMessage) -> str | None:
    """The body group id of a stored message (its first shard's id), or None when it is
    not a shard.

    Examples
    --------
    >>> from context_manager.strategies.base import StoredMessage
    >>> m = Message.text_message("User", "x", metadata={SHARD_KEY: {"index": 1, "count": 2,
    ...                                                             "group": "4"}})
    >>> body_group_of(StoredMessage("5", 5, m))
    '4'
    """
    found = shard_of(stored.id, stored.message)
    return None if found is None else found.group


def shardable_text(content: Sequence[Any]) -> str | None:
    """The text of ``content`` when it is text only (text blocks, no tool call or result,
    image or thinking), or None. Several text blocks are joined by newlines, as
    :attr:`Message.text` does.

    Examples
    --------
    >>> shardable_text([TextBlock(text="a"), TextBlock(text="b")])
    'a\\nb'
    """
    if not content or not all(isinstance(b, TextBlock) for b in content):
        return None
    return "\n".join(b.text for b in content)


_SEPARATORS = ("\n\n", "\n", " ", "\t")


def split_text(text: str, counter: TokenCounter, target_tokens: int) -> list[str]:
    """``text`` cut into parts of about ``target_tokens`` tokens each, whose
    concatenation is ``text`` byte for byte.

    The number of parts is the text's tokens over ``target_tokens``, rounded (at least
    one). Each cut is near its share of the text, at a paragraph break when one is
    within half a part of it, else a line break, else whitespace, the nearest such; the
    separator stays with the part before. Only a stretch with no whitespace at all is
    cut inside a word. Deterministic: the same text and counter give the same parts.

    Examples
    --------
    >>> from context_manager import CharsCounter
    >>> split_text("alpha beta gamma delta", CharsCounter(), 3)
    ['alpha beta ', 'gamma delta']
    """
    if target_tokens <= 0:
        raise ValueError(f"target_tokens must be positive, got {target_tokens}")
    total = counter.count_text(text)
    n = max(1, min(len(text), round(total / target_tokens)))
    if n == 1:
        return [text]
    cuts: list[int] = []
    reach = max(1, math.ceil(len(text) / n / 2))
    at = 0
    for k in range(1, n):
        ideal = round(len(text) * k / n)
        lo, hi = max(at + 1, ideal - reach), min(len(text) - 1, ideal + reach)
        if lo > hi:
            continue
        cut = _nearest_boundary(text, ideal, lo, hi)
        cuts.append(cut)
        at = cut
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def _nearest_boundary(text: str, ideal: int, lo: int, hi: int) -> int:
    """The cut in ``[lo, hi]`` nearest ``ideal`` just after the strongest separator
    found there (ties: the earlier); ``ideal`` itself when there is none."""
    for sep in _SEPARATORS:
        best: int | None = None
        start = max(0, lo - len(sep))
        found = text.find(sep, start, hi)
        while found != -1:
            cut = found + len(sep)
            if lo <= cut <= hi and (best is None or abs(cut - ideal) < abs(best - ideal)):
                best = cut
            found = text.find(sep, found + 1, hi)
        if best is not None:
            return best
    return min(max(ideal, lo), hi)
