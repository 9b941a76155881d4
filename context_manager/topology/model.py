"""What an audit and a repair of the memory tree speak in: the records read
(:class:`StoredRecords`, each a :class:`Raw`), what is wrong (:class:`Finding`, of a
:class:`Kind`) and what a repair writes (:class:`Action`, of an :class:`Op`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from ..window import WindowIndex, WindowRecord


class Kind(StrEnum):
    """What a :class:`Finding` says is wrong."""

    MALFORMED = "malformed"
    """The record's body cannot be read as a memory or chunk record (the strategy
    fails to load the store)."""
    EMPTY = "empty"
    """A memory without content (the strategy does not read it)."""
    DUPLICATE_ID = "duplicate_id"
    """A memory whose id a later record reuses (the strategy reads only the last)."""
    MISSING_MESSAGES = "missing_messages"
    """An L1 names messages the branch does not hold."""
    NON_CONTIGUOUS = "non_contiguous"
    """An L1 that is not a run of consecutive messages in order, or an L2+ whose
    children are not adjacent in the messages."""
    MISSING_CHILD = "missing_child"
    """An L2+ lists a memory the store does not hold (or an empty or malformed one)."""
    LEVEL_MISMATCH = "level_mismatch"
    """An L2+ lists a memory that is not one level below it."""
    WRONG_RANGE = "wrong_range"
    """A memory's ``first`` / ``last`` are not the ends of the messages it covers."""
    SHARED_CHILD = "shared_child"
    """A memory listed as a child by two or more parents."""
    DANGLING_PARENT = "dangling_parent"
    """A parent pointer naming no memory, or one that does not list the memory."""
    UNLINKED_CHILD = "unlinked_child"
    """A memory listed by a parent while its own parent pointer is empty."""
    UNCHUNKED = "unchunked"
    """An L1 no chunk record names (the strategy neither shows nor merges it)."""
    NON_CONTIGUOUS_CHUNK = "non_contiguous_chunk"
    """A chunk record that is not a run of consecutive messages in order."""
    ORPHAN_CHUNK = "orphan_chunk"
    """A chunk record compressed into an L1 that the store does not hold."""


Record = Literal["summary", "chunk"]


@dataclass(frozen=True)
class Raw:
    """One live item of a strategy slot: its store item id and its body, unparsed."""

    item: str
    body: Any
    rev: int = 0
    """The store record holding its current body (store records are numbered in the
    order written, so a larger ``rev`` was written later); 0 when unknown."""


@dataclass(frozen=True)
class StoredRecords:
    """What an audit reads: the branch's messages and the strategy's raw records.

    Attributes
    ----------
    messages : tuple of str
        The branch's message ids, oldest first.
    summaries : tuple of Raw
        Live items of the memory slot, in store order (malformed ones included).
    chunks : tuple of Raw
        Live items of the chunk-record slot, in store order.
    chunk_counter : int
        The number the next chunk id takes (``c-N``).
    namespace : str
        The strategy namespace the records were read from.
    message_slot : str
        The slot the messages were read from.
    window : tuple of str or None
        Once the namespace's agent is presented rows
        (:meth:`~context_manager.ContextManager.present_rows`): the rows of its
        window the record holds, in window order. None while the window is the
        record itself.
    window_log : tuple of (int, WindowRecord)
        The window's records, each with its store record number (``rev``), in the
        order written: what the window was when each record of the strategy was
        written (:meth:`rows_at`).
    """

    messages: tuple[str, ...]
    summaries: tuple[Raw, ...] = ()
    chunks: tuple[Raw, ...] = ()
    chunk_counter: int = 0
    namespace: str = "default"
    message_slot: str = "messages"
    window: tuple[str, ...] | None = None
    window_log: tuple[tuple[int, WindowRecord], ...] = ()

    @property
    def rows(self) -> tuple[str, ...]:
        """The rows the strategy reads, in its order: what its records are judged
        over (the window when the agent is presented rows, else the record).

        Examples
        --------
        >>> StoredRecords(messages=("a", "x", "b")).rows
        ('a', 'x', 'b')
        >>> StoredRecords(messages=("a", "x", "b"), window=("a", "b")).rows
        ('a', 'b')
        """
        return self.window if self.window is not None else self.messages

    def rows_at(self, count: int) -> tuple[str, ...]:
        """The rows the strategy read once the first ``count`` window records were
        written: the window they leave (the rows of it the record holds), or the
        record while there were none.

        Examples
        --------
        >>> log = ((5, WindowRecord("write-down", ("a", "b"))),
        ...        (9, WindowRecord("retract", ("a",))),
        ...        (12, WindowRecord("present", ("a",))))
        >>> records = StoredRecords(messages=("a", "b", "x"), window=("b", "a"),
        ...                         window_log=log)
        >>> records.rows_at(0), records.rows_at(1), records.rows_at(3)
        (('a', 'b', 'x'), ('a', 'b'), ('b', 'a'))
        """
        if count <= 0:
            return self.messages
        index = WindowIndex.replay(r for _, r in self.window_log[:count])
        held = set(self.messages)
        return tuple(i for i in index.held() if i in held)

    def slot(self, name: str) -> str:
        """The store slot ``name`` in the records' namespace."""
        return f"{self.namespace}/{name}"


@dataclass(frozen=True)
class Finding:
    """One broken invariant of one record.

    Attributes
    ----------
    kind : Kind
        What is wrong.
    record : {"summary", "chunk"}
        A memory or a chunk record.
    id : str
        The memory id (``L1-3``) or chunk id (``c-3``); for a record without a
        readable id, ``item <n>``.
    item : str
        The store item holding the record.
    level : int or None
        The memory's level (None for a chunk record or an unreadable one).
    detail : str
        What is wrong, in words.
    first, last : str or None
        The message range the record claims (message ids), when it names one.
    positions : tuple of (int, int) or None
        Where that range lies in the branch's messages (inclusive), when known.
    """

    kind: Kind
    record: Record
    id: str
    item: str
    level: int | None
    detail: str
    first: str | None = None
    last: str | None = None
    positions: tuple[int, int] | None = None

    def describe(self) -> str:
        """One line: who, what is wrong, and the message range.

        Examples
        --------
        >>> Finding(Kind.EMPTY, "summary", "L1-4", "17", 1, "it has no content",
        ...         "8", "12", (7, 11)).describe()
        'L1-4 (L1, item 17): empty: it has no content [messages 8..12, positions 7..11]'
        """
        who = f"chunk {self.id}" if self.record == "chunk" else self.id
        level = f"L{self.level}, " if self.level is not None else ""
        where = ""
        if self.first is not None or self.last is not None:
            where = f" [messages {self.first}..{self.last}"
            if self.positions is not None:
                where += f", positions {self.positions[0]}..{self.positions[1]}"
            where += "]"
        return f"{who} ({level}item {self.item}): {self.kind.value}: {self.detail}{where}"

    def to_dict(self) -> dict[str, Any]:
        """The finding as JSON-ready values."""
        out = dataclasses.asdict(self)
        out["kind"] = self.kind.value
        out["positions"] = list(self.positions) if self.positions is not None else None
        return out


class Op(StrEnum):
    """What an :class:`Action` does."""

    DROP = "drop"
    """Redact a memory record (its messages are summarised again)."""
    CLEAR_PARENT = "clear_parent"
    """Empty a memory's parent pointer."""
    SET_PARENT = "set_parent"
    """Point a memory at the one parent that lists it."""
    FIX_RANGE = "fix_range"
    """Set a memory's ``first`` / ``last`` to the ends of the messages it covers."""
    REOPEN_CHUNK = "reopen_chunk"
    """Mark a chunk record uncompressed, naming no memory (it is summarised again)."""
    SPLIT_CHUNK = "split_chunk"
    """Cut a chunk record into contiguous runs, each a chunk record to summarise."""
    DROP_CHUNK = "drop_chunk"
    """Redact an unreadable chunk record (its messages stay, shown raw)."""


@dataclass(frozen=True)
class Action:
    """One write of a repair.

    Attributes
    ----------
    op : Op
    record : {"summary", "chunk"}
    id : str
        The memory or chunk id.
    item : str
        The store item written.
    reason : str
        Why, in words.
    parent : str or None
        For :attr:`Op.SET_PARENT`: the new parent.
    first, last : str or None
        For :attr:`Op.FIX_RANGE`: the new range.
    runs : tuple of tuple of str
        For :attr:`Op.SPLIT_CHUNK`: the message ids of each new chunk record, the
        first kept by this record.
    new_ids : tuple of str
        For :attr:`Op.SPLIT_CHUNK`: the ids of the records appended for the other runs.
    """

    op: Op
    record: Record
    id: str
    item: str
    reason: str
    parent: str | None = None
    first: str | None = None
    last: str | None = None
    runs: tuple[tuple[str, ...], ...] = ()
    new_ids: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line: what is written, and why.

        Examples
        --------
        >>> Action(Op.SET_PARENT, "summary", "L1-2", "9", "L2-5 lists it", parent="L2-5").describe()
        'set the parent of L1-2 (item 9) to L2-5: L2-5 lists it'
        """
        who = f"{self.id} (item {self.item})"
        if self.op is Op.DROP:
            what = f"drop {who}"
        elif self.op is Op.CLEAR_PARENT:
            what = f"clear the parent of {who}"
        elif self.op is Op.SET_PARENT:
            what = f"set the parent of {who} to {self.parent}"
        elif self.op is Op.FIX_RANGE:
            what = f"set the range of {who} to {self.first}..{self.last}"
        elif self.op is Op.REOPEN_CHUNK:
            what = f"reopen chunk {who}"
        elif self.op is Op.SPLIT_CHUNK:
            pieces = ", ".join(
                f"{chunk} over {run[0]}..{run[-1]}"
                for chunk, run in zip((self.id, *self.new_ids), self.runs, strict=True)
            )
            what = f"split chunk {who} into {pieces}"
        else:
            what = f"drop chunk {who}"
        return f"{what}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """The action as JSON-ready values."""
        out = dataclasses.asdict(self)
        out["op"] = self.op.value
        out["runs"] = [list(r) for r in self.runs]
        out["new_ids"] = list(self.new_ids)
        return out
