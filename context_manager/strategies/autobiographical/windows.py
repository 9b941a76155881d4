"""The windows: the raw head, the raw tail, and where holds begin.

The head is the oldest messages up to ``head_window_tokens`` (from the latest topic
transition on, once :meth:`~context_manager.ContextManager.reset_head_window` wrote
one), the tail the newest up to ``recent_window_tokens`` and always the newest
message, the turn the model answers (every shard of it, when it is a body stored in
parts); neither boundary falls between a tool call and its answer. Everything else is
the middle, where chunks close: the messages before a moved head are middle again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...bodies import shard_of
from ...summarizer import MEMORY_MARKER_PARTICIPANT, TOPIC_TRANSITION
from ..base import StoredMessage, StrategyContext
from .state import State

__all__ = ["Windows", "newest_body_start", "raw_pinned", "windows"]


@dataclass
class Windows:
    """The windows over the current messages (indices into them)."""

    head_end: int
    tail_start: int
    tokens: Sequence[int]
    """What each message costs as sent (its :func:`~context_manager.pairing.send_form`)."""
    tied: Sequence[bool]
    """Message ``i`` is sent together with message ``i + 1`` (a call and its answer)."""
    held_from: int | None = None
    """The first message under a hold (the tail starts there at the latest)."""
    head_start: int = 0
    """Where the head starts: the latest topic transition (0 before any, or without a
    head window). The head is ``[head_start, head_end)``."""


def windows(st: State, ctx: StrategyContext, stored: Sequence[StoredMessage]) -> Windows:
    """Head end and tail start (indices) for the current messages (kept while the
    messages, their tokens as sent and the holds stay the same)."""
    tokens, tied = ctx.sent()
    held = ctx.held_ids()
    key = (ctx.version(), ctx.sent_revision(), len(stored), frozenset(held))
    kept = st.cache.get(("windows",))
    if kept is not None and kept[0] == key:
        return kept[1]  # type: ignore[no-any-return]
    found = _windows(st, ctx, stored, tokens, tied, held)
    st.cache[("windows",)] = (key, found)
    return found


def _windows(
    st: State,
    ctx: StrategyContext,
    stored: Sequence[StoredMessage],
    tokens: Sequence[int],
    tied: Sequence[bool],
    held: set[str],
) -> Windows:
    cfg = st.config
    n = len(stored)
    head_start = head_end = 0
    if cfg.head_window_tokens:
        head_start = head_end = transition_start(st, ctx, stored)
        total = 0
        while head_end < n and total + tokens[head_end] <= cfg.head_window_tokens:
            total += tokens[head_end]
            head_end += 1
        while head_end > head_start and tied[head_end - 1]:
            head_end -= 1  # never end the head between a call and its answer
    tail_start = n
    total = 0
    # the newest message is the turn the model answers: it is always in the tail (a tool
    # result too large is capped in the copy sent; other text that cannot fit refuses)
    while tail_start > head_end and (
        tail_start == n or total + tokens[tail_start - 1] <= cfg.recent_window_tokens
    ):
        tail_start -= 1
        total += tokens[tail_start]
    if n:  # a newest body stored in parts is the turn the model answers, all of it
        tail_start = max(head_end, min(tail_start, newest_body_start(stored)))
    while head_end < tail_start < n and tied[tail_start - 1]:
        tail_start -= 1  # keep an answer with its call
    position = st.positions(ctx, stored) if held else {}
    spots = [position[x] for x in held if x in position]
    if spots:
        first_held = min(spots)
        while first_held > head_end and tied[first_held - 1]:
            first_held -= 1
        tail_start = max(head_end, min(tail_start, first_held))
        return Windows(head_end, tail_start, tokens, tied, first_held, head_start)
    return Windows(head_end, tail_start, tokens, tied, None, head_start)


def newest_body_start(stored: Sequence[StoredMessage]) -> int:
    """The position of the first shard of the newest message's body when it is stored in
    parts (:mod:`context_manager.bodies`), else of the newest message.

    Examples
    --------
    >>> from context_manager import Message
    >>> from context_manager.bodies import SHARD_KEY
    >>> def shard(i: int) -> StoredMessage:
    ...     place = {"index": i, "count": 2, **({"group": "2"} if i else {})}
    ...     m = Message.text_message("User", "x", metadata={SHARD_KEY: place})
    ...     return StoredMessage(str(i + 2), i + 2, m)
    >>> first = StoredMessage("1", 1, Message.text_message("User", "hello"))
    >>> newest_body_start([first, shard(0), shard(1)]), newest_body_start([first])
    (1, 0)
    """
    at = len(stored) - 1
    place = shard_of(stored[at].id, stored[at].message)
    if place is None:
        return at
    while at > 0 and place.index > 0:
        before = shard_of(stored[at - 1].id, stored[at - 1].message)
        if before is None or before.group != place.group:
            break
        at, place = at - 1, before
    return at


def transition_start(st: State, ctx: StrategyContext, stored: Sequence[StoredMessage]) -> int:
    """The position of the latest topic transition (a ``Context Manager`` message
    starting with :data:`~context_manager.summarizer.TOPIC_TRANSITION`), 0 when there
    is none. Appends are read once: only a change of the messages reads them all."""
    key = ("transition",)
    kept: tuple[int, int, str | None] | None = st.cache.get(key)
    version, seen, found = kept if kept is not None else (-1, 0, None)
    position = st.positions(ctx, stored)
    if version != ctx.version() or seen > len(stored) or (found and found not in position):
        seen, found = 0, None
    for i in range(len(stored) - 1, seen - 1, -1):
        m = stored[i].message
        if m.participant == MEMORY_MARKER_PARTICIPANT and m.text.startswith(TOPIC_TRANSITION):
            found = stored[i].id
            break
    st.cache[key] = (ctx.version(), len(stored), found)
    return position[found] if found is not None else 0


def raw_pinned(st: State, ctx: StrategyContext, stored: Sequence[StoredMessage]) -> set[str]:
    """Messages under a raw pin (they never join a chunk)."""
    pins = st.records.sound_pins
    if not pins:
        return set()
    index = st.positions(ctx, stored)
    out: set[str] = set()
    for pin in pins:
        if pin.level is not None or pin.max_level is not None:
            continue
        if pin.first in index and pin.last in index:
            out.update(s.id for s in stored[index[pin.first] : index[pin.last] + 1])
    return out
