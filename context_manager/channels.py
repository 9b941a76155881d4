"""Each message's channel and timestamp, indexed for the channel queries of
:class:`~context_manager.ContextManager` (:meth:`query_messages_by_channel
<context_manager.ContextManager.query_messages_by_channel>`, :meth:`get_channel_message_counts
<context_manager.ContextManager.get_channel_message_counts>` and :meth:`get_channel_token_stats
<context_manager.ContextManager.get_channel_token_stats>`).

A message's channel is ``metadata["external"]["channelId"]`` (the reference's convention),
when it is a non-empty str. The index keeps, per message, the channel and timestamp of
the body version it read (the item's ``rev``, which every edit changes), so an entry is
right on every branch and goes stale by itself when the message is edited; a removed
message is simply no longer among the live ones. The entries live in the store's derived
tables (not records: never branched, on SQLite and PostgreSQL alike), so a reopened
manager reads them instead of every message body; a body is read only for a message the
index has not seen at its current version.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import NamedTuple

from .messages import Message
from .store import RecordStore, StoreError
from .strategies.base import StoredMessage

__all__ = [
    "ChannelCount",
    "ChannelTokenStats",
    "ChannelTokens",
    "channel_of",
]

SCOPE = "channels\x1fv1"
"""The derived rows: item -> ``(rev, 0, 0, channel code, timestamp bits, flags)``."""
NAMES = "channel-names\x1fv1"
"""The derived counts naming the codes: a channel's UTF-8 bytes -> its code."""
_HAS_TIME = 1


@dataclass(frozen=True)
class ChannelCount:
    """How many live messages one channel holds (:meth:`ContextManager.get_channel_message_counts
    <context_manager.ContextManager.get_channel_message_counts>`).

    Examples
    --------
    >>> ChannelCount("general", 3).messages
    3
    """

    channel_id: str
    messages: int


@dataclass(frozen=True)
class ChannelTokens:
    """One channel's messages and their tokens, counted by the manager's counter."""

    channel_id: str
    messages: int
    tokens: int


@dataclass(frozen=True)
class ChannelTokenStats:
    """Messages and tokens per channel (:meth:`ContextManager.get_channel_token_stats
    <context_manager.ContextManager.get_channel_token_stats>`).

    ``total_messages`` and ``total_tokens`` count every message in the range, those
    without a channel too; ``by_channel`` only those with one, each channel in the order
    of its first message.

    Examples
    --------
    >>> stats = ChannelTokenStats(3, 30, [ChannelTokens("a", 2, 20)])
    >>> stats.total_tokens - sum(c.tokens for c in stats.by_channel)  # the channel-less
    10
    """

    total_messages: int
    total_tokens: int
    by_channel: list[ChannelTokens]


def channel_of(message: Message) -> str | None:
    """The channel of ``message``: ``metadata["external"]["channelId"]`` when it is a
    non-empty str, else None.

    Examples
    --------
    >>> channel_of(Message.text_message("User", "hi", metadata={"external": {"channelId": "c1"}}))
    'c1'
    >>> channel_of(Message.text_message("User", "hi")) is None
    True
    """
    external = message.metadata.get("external")
    if isinstance(external, dict):
        value = external.get("channelId")
        if isinstance(value, str) and value:
            return value
    return None


def _code(name: str) -> int:
    """A channel's code in the derived rows: 63 bits of its sha256 (never 0, which is
    "no channel"), the same in every process, so managers sharing a store agree."""
    code = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
    return code or 1


def _bits(stamp: float) -> int:
    return int(struct.unpack("<q", struct.pack("<d", stamp))[0])


def _stamp(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<q", bits))[0])


class Entry(NamedTuple):
    """What the index knows of one message version."""

    rev: int
    channel: str | None
    timestamp: float | None


class ChannelIndex:
    """The channel and timestamp of each message version a manager read (see the module).

    Parameters
    ----------
    store : RecordStore
        Where the entries are saved (its derived tables).

    Examples
    --------
    >>> from context_manager import Store
    >>> store = Store.open(":memory:")
    >>> m = Message.text_message("User", "hi", metadata={"external": {"channelId": "c"}})
    >>> stored = [StoredMessage("1", 1, m, rev=1)]
    >>> [e.channel for e in ChannelIndex(store).entries(stored)]
    ['c']
    """

    def __init__(self, store: RecordStore, *, saves: bool = True) -> None:
        self.store = store
        self.saves = saves
        """Whether the entries read are saved (not for an ``audit_only`` manager)."""
        self._known: dict[str, Entry] = {}
        self._names: dict[int, str] = {}
        self._loaded = False
        self._unsaved: dict[str, Entry] = {}

    def entries(self, stored: Sequence[StoredMessage]) -> list[Entry]:
        """The entry of each of ``stored`` (aligned with it); a message the index has
        not seen at its version is read, and its entry saved."""
        known = self._known
        missing = [s for s in stored if (e := known.get(s.id)) is None or e.rev != s.rev]
        if missing and not self._loaded:
            self._load(missing)
            missing = [s for s in missing if (e := known.get(s.id)) is None or e.rev != s.rev]
        for s in missing:
            m = s.message
            entry = Entry(s.rev, channel_of(m), m.timestamp)
            known[s.id] = self._unsaved[s.id] = entry
        if self._unsaved:
            self._save()
        return [known[s.id] for s in stored]

    def _load(self, wanted: Sequence[StoredMessage]) -> None:
        """The saved entries of ``wanted`` (those whose version still matches)."""
        self._loaded = True
        with suppress(StoreError):
            saved = self.store.derived_counts(NAMES)
            self._names = {code: bytes(name).decode() for name, code in saved.items()}
            # many wanted: one read of the whole scope beats one query per 500 ids
            ids = None if len(wanted) > 2_000 else [int(s.id) for s in wanted if s.id.isdigit()]
            rows = self.store.derived_items(SCOPE, ids)
            revs = {s.id: s.rev for s in wanted}
            for item, (rev, _, _, code, bits, flags) in rows.items():
                key = str(item)
                if revs.get(key) != rev or (code and code not in self._names):
                    continue
                stamp = _stamp(bits) if flags & _HAS_TIME else None
                self._known[key] = Entry(rev, self._names.get(code), stamp)

    def _save(self) -> None:
        """Save the entries read since the last save (a failure only loses the saving:
        they are read again next time)."""
        if not self.saves:
            self._unsaved.clear()
            return
        names: dict[str, int] = {}
        rows = []
        for key, e in self._unsaved.items():
            if not key.isdigit():
                continue
            code = 0
            if e.channel is not None:
                code = _code(e.channel)
                if self._names.get(code) != e.channel:
                    names[e.channel] = code
            flags = 0 if e.timestamp is None else _HAS_TIME
            bits = 0 if e.timestamp is None else _bits(e.timestamp)
            rows.append((int(key), e.rev, 0, 0, code, bits, flags))
        self._unsaved.clear()
        with suppress(StoreError), self.store.transaction():
            if names:
                self.store.save_counts(NAMES, [(n.encode(), c) for n, c in names.items()])
            self.store.save_derived(SCOPE, rows)
            for n, c in names.items():
                self._names[c] = n
