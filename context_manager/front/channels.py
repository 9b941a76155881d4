"""The channel queries of :class:`~context_manager.ContextManager`, over its
:class:`~context_manager.channels.ChannelIndex`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..arguments import check_flag, check_int, check_number, check_text
from ..channels import ChannelCount, ChannelIndex, ChannelTokens, ChannelTokenStats, Entry
from ..errors import ArgumentError
from ..request import QueryResult

if TYPE_CHECKING:
    from ..manager import ContextManager

__all__ = ["channel_counts", "channel_token_stats", "messages_by_channel"]


def _index(cm: ContextManager) -> tuple[ChannelIndex, list[Entry]]:
    """The manager's channel index (made on first use) and the live messages' entries."""
    index = cm._channel_index
    if index is None or index.store is not cm._store:
        index = cm._channel_index = ChannelIndex(cm._store, saves=not cm._gate.audit_only)
    return index, index.entries(cm._records.messages())


def _bounds(from_time: object, to_time: object) -> tuple[float | None, float | None]:
    low = None if from_time is None else check_number(from_time, "from_time")
    high = None if to_time is None else check_number(to_time, "to_time")
    if low is not None and high is not None and low > high:
        raise ArgumentError(
            "from_time",
            low,
            f"a time not after to_time={high}",
            hint="give the earlier bound first",
        )
    return low, high


def _in_range(entry: Entry, low: float | None, high: float | None) -> bool:
    """Whether the message passes the time bounds (one without a timestamp passes none)."""
    if low is None and high is None:
        return True
    stamp = entry.timestamp
    if stamp is None:
        return False
    return (low is None or stamp >= low) and (high is None or stamp <= high)


def messages_by_channel(
    cm: ContextManager,
    channel_id: object,
    limit: object,
    offset: object,
    reverse: object,
    from_time: object,
    to_time: object,
) -> QueryResult:
    """:meth:`ContextManager.query_messages_by_channel`."""
    channel = check_text(
        channel_id, "channel_id", empty=False, accepted="a channel id (a non-empty str)"
    )
    most = None if limit is None else check_int(limit, "limit", low=0, hint="or None for no limit")
    start = check_int(offset, "offset", low=0)
    check_flag(reverse, "reverse")
    low, high = _bounds(from_time, to_time)
    stored = cm._records.messages()
    _, entries = _index(cm)
    found = [
        s
        for s, e in zip(stored, entries, strict=True)
        if e.channel == channel and _in_range(e, low, high)
    ]
    if reverse:
        found.reverse()
    page = found[start:] if most is None else found[start : start + most]
    return QueryResult(page, len(found))


def channel_counts(cm: ContextManager) -> list[ChannelCount]:
    """:meth:`ContextManager.get_channel_message_counts`."""
    _, entries = _index(cm)
    counts: dict[str, int] = {}
    for e in entries:
        if e.channel is not None:
            counts[e.channel] = counts.get(e.channel, 0) + 1
    return [ChannelCount(c, n) for c, n in counts.items()]


def channel_token_stats(
    cm: ContextManager, from_time: object, to_time: object
) -> ChannelTokenStats:
    """:meth:`ContextManager.get_channel_token_stats`."""
    low, high = _bounds(from_time, to_time)
    stored = cm._records.messages()
    _, entries = _index(cm)
    cm._records.sent()  # the saved counts, where the store holds them
    count = cm._records.count
    total_messages = total_tokens = 0
    by: dict[str, list[int]] = {}
    for s, e in zip(stored, entries, strict=True):
        if not _in_range(e, low, high):
            continue
        tokens = count(s)
        total_messages += 1
        total_tokens += tokens
        if e.channel is not None:
            row = by.setdefault(e.channel, [0, 0])
            row[0] += 1
            row[1] += tokens
    return ChannelTokenStats(
        total_messages, total_tokens, [ChannelTokens(c, n, t) for c, (n, t) in by.items()]
    )
