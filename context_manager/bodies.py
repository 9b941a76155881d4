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
from collections.abc import Callable, Sequence
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
    "JoinedBodies",
    "Shard",
    "body_group_of",
    "join_raw_shards",
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


@dataclass(frozen=True)
class JoinedBodies:
    """What :func:`join_raw_shards` made of a history."""

    messages: list[Message]
    """The history, each run of raw shards of one body joined into one message."""
    where: list[int]
    """For each message of the history given, the index of the message it is part of."""
    sources: list[tuple[str | None, tuple[str, ...]]]
    """For each message of :attr:`messages`: the memory it shows and the stored messages
    it stands for (a joined run: every shard of it)."""
    saved: int
    """Tokens the joins saved (never negative: a join that would cost more is not made)."""
    raw_bodies: dict[str, str]
    """Body group id -> the body's text, for every body a raw shard of the history is of."""


def join_raw_shards(
    history: Sequence[Message],
    sources: Sequence[tuple[str | None, tuple[str, ...]]],
    shards: Callable[[], Sequence[StoredMessage]],
    price: Callable[[Message], int],
    cap: int = 0,
) -> JoinedBodies:
    """``history`` with each run of consecutive raw shards of one body sent as one
    message: their texts joined, which is that stretch of the body byte for byte.

    A message is a raw shard when it shows one stored shard (``sources[i]``: no memory,
    one id) as stored: a single text block whose text is the stored shard's (a shard
    cut by a per-message cap is not joined). A run is joined only when the joined
    message costs no more than its parts by ``price`` (the tokens saved are in
    :attr:`JoinedBodies.saved`); with a ``cap`` (``max_message_tokens``), runs are first
    cut so that no joined message prices its parts over it.

    Parameters
    ----------
    history : sequence of Message
    sources : sequence of (str or None, tuple of str)
        Aligned with ``history``: each message's memory (None when raw) and the ids of
        the stored messages it shows.
    shards : callable
        The stored messages the bodies are read from (the agent's window), called only
        when the history holds a shard.
    price : callable
        Tokens of a message as sent.
    cap : int
        The most tokens one message may take (0: no cap).

    Examples
    --------
    >>> from context_manager import CharsCounter
    >>> from context_manager.strategies.base import StoredMessage
    >>> def shard(i: int, text: str) -> StoredMessage:
    ...     place = {"index": i, "count": 2, **({"group": "1"} if i else {})}
    ...     m = Message.text_message("User", text, metadata={SHARD_KEY: place})
    ...     return StoredMessage(str(i + 1), i + 1, m)
    >>> stored = [shard(0, "first half, "), shard(1, "second half")]
    >>> joined = join_raw_shards([s.message for s in stored], [(None, ("1",)), (None, ("2",))],
    ...                          lambda: stored, CharsCounter().count_message)
    >>> [m.text for m in joined.messages], joined.where, joined.raw_bodies
    (['first half, second half'], [0, 0], {'1': 'first half, second half'})
    """
    places: list[Shard | None] = [None] * len(history)
    lookup: dict[str, StoredMessage] | None = None
    for i, (message, (memory, ids)) in enumerate(zip(history, sources, strict=True)):
        if memory is not None or len(ids) != 1 or SHARD_KEY not in message.metadata:
            continue
        place = shard_of(ids[0], message)
        if place is None or len(message.content) != 1:
            continue
        if lookup is None:
            lookup = {s.id: s for s in shards()}
        stored = lookup.get(ids[0])
        block = message.content[0]
        if stored is None or not isinstance(block, TextBlock) or block.text != stored.message.text:
            continue
        places[i] = place
    if lookup is None:
        return JoinedBodies(list(history), list(range(len(history))), list(sources), 0, {})
    bodies: dict[str, list[tuple[int, str]]] = {}
    for s in lookup.values():
        place = shard_of(s.id, s.message)
        if place is not None:
            bodies.setdefault(place.group, []).append((place.index, s.message.text))
    shown = {p.group for p in places if p is not None}
    raw_bodies = {
        g: "".join(t for _, t in sorted(bodies[g])) for g in sorted(shown, key=_group_order)
    }
    out: list[Message] = []
    where: list[int] = []
    joined_sources: list[tuple[str | None, tuple[str, ...]]] = []
    saved = 0
    i = 0
    while i < len(history):
        run = _run(history, places, i, price, cap)
        parts = history[i : i + run]
        merged = _joined(parts) if run > 1 else None
        cost = sum(price(m) for m in parts) if merged is not None else 0
        if merged is not None and price(merged) <= cost:
            saved += cost - price(merged)
            where.extend([len(out)] * run)
            joined_sources.append(
                (None, tuple(x for k in range(i, i + run) for x in sources[k][1]))
            )
            out.append(merged)
        else:
            for k in range(i, i + run):
                where.append(len(out))
                joined_sources.append(sources[k])
                out.append(history[k])
        i += run
    return JoinedBodies(out, where, joined_sources, saved, raw_bodies)


def _group_order(group: str) -> tuple[int, str]:
    """A sort key putting numeric ids in numeric order (others after, by text)."""
    return (int(group), "") if group.isdigit() else (1 << 62, group)


def _run(
    history: Sequence[Message],
    places: Sequence[Shard | None],
    start: int,
    price: Callable[[Message], int],
    cap: int,
) -> int:
    """How many messages from ``start`` make one run of consecutive raw shards of one
    body (1 for any other message), its parts priced within ``cap`` when there is one."""
    first = places[start]
    if first is None:
        return 1
    n = 1
    total = price(history[start])
    while start + n < len(history):
        nxt = places[start + n]
        if (
            nxt is None
            or nxt.group != first.group
            or nxt.index != first.index + n
            or history[start + n].participant != history[start].participant
        ):
            break
        cost = price(history[start + n])
        if cap and total + cost > cap:
            break
        total += cost
        n += 1
    return n


def _joined(parts: Sequence[Message]) -> Message:
    """One message of ``parts``' texts joined (the first's participant, timestamp and
    metadata, with no shard place: it is a stretch of the body, not a shard)."""
    head = parts[0]
    metadata = {k: v for k, v in head.metadata.items() if k != SHARD_KEY}
    text = "".join(m.content[0].text for m in parts if isinstance(m.content[0], TextBlock))
    return Message(
        participant=head.participant,
        content=(TextBlock(text=text),),
        metadata=metadata,
        timestamp=head.timestamp,
    )
