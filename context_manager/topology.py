"""Audit and repair the memory tree of a store: ``ctxfold audit`` and ``ctxfold repair``.

The autobiographical strategy's memories are records in the store (see
:mod:`context_manager.strategies.autobiographical.records`): an L1 covers the
messages of one chunk record, an L2 or higher covers lower memories. The tree is
sound when

* every L1 covers a contiguous run of the branch's messages, in order, each once;
* every L2+ lists existing memories one level below, adjacent in the messages and
  together contiguous, and its ``first`` / ``last`` name the ends of that run;
* every memory has content, its id is unique, its parent pointer names a memory
  that lists it, no memory is listed by two parents, and (once chunk records
  exist) some chunk record names each L1;
* every chunk record is a contiguous run, and one compressed into an L1 names a
  memory the store holds.

:func:`audit` checks these over a :class:`StoredRecords` (read by
:func:`read_stored`) and returns :class:`Finding` objects; :func:`plan_repair`
turns findings into :class:`Action` objects and :func:`apply_repair` writes them
through the store's own write API, in one transaction. A repair never touches a
message: it drops memories (a broken one with every memory above it), fixes
pointers and ranges, and reopens chunk records, so the strategy summarises those
messages again. :func:`audit_store` and :func:`repair_store` do it for a store file:
they refuse a store a running agent holds (its writer lock), audit a copy, and a
repair replaces the file only after the repaired copy audits clean, keeping the
original next to it. Rows of the file that cannot be read at all (damaged bytes) are
listed by both (:mod:`context_manager.salvage`), and a repair starts from a new store
of every row that can be.

Examples
--------
Two L1 memories over messages ``a..f``; the second skips ``e``:

>>> records = StoredRecords(
...     messages=("a", "b", "c", "d", "e", "f"),
...     summaries=(
...         Raw("1", {"id": "L1-0", "level": 1, "content": "abc", "tokens": 1,
...                   "source_ids": ["a", "b", "c"], "first": "a", "last": "c"}),
...         Raw("2", {"id": "L1-1", "level": 1, "content": "df", "tokens": 1,
...                   "source_ids": ["d", "f"], "first": "d", "last": "f"}),
...     ),
... )
>>> [(f.id, f.kind.value, f.detail) for f in audit(records)]
[('L1-1', 'non_contiguous', 'skips 1 of the messages in its range: e (position 4)')]
>>> [a.describe() for a in plan_repair(audit(records), records)]
['drop L1-1 (item 2): it is not a contiguous run of messages; its messages are summarised again']
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import itertools
import os
import shutil
import sqlite3
import stat
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from .salvage import DamagedRow, damaged_rows, salvage
from .store import (
    NotAStoreError,
    Store,
    StoreError,
    StoreLockedError,
    check_store_tables,
    copy_private,
    scratch,
    store_tables,
)
from .strategies.autobiographical.records import (
    _CHUNK_COUNTER,
    _CHUNKS,
    _SUMMARIES,
    ChunkRecord,
    SummaryEntry,
    _next_chunk_number,
)

__all__ = [
    "Action",
    "Finding",
    "Kind",
    "NotAStoreError",
    "Op",
    "Raw",
    "StoreAudit",
    "StoreRepair",
    "StoredRecords",
    "apply_repair",
    "audit",
    "audit_store",
    "plan_repair",
    "read_stored",
    "repair_store",
]


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
    """

    messages: tuple[str, ...]
    summaries: tuple[Raw, ...] = ()
    chunks: tuple[Raw, ...] = ()
    chunk_counter: int = 0
    namespace: str = "default"
    message_slot: str = "messages"

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


# --------------------------------------------------------------------- reading
def read_stored(
    store: Store, namespace: str = "default", *, message_slot: str | None = None
) -> StoredRecords:
    """The branch's message ids and the strategy's raw records, as stored.

    Unlike :func:`~context_manager.strategies.autobiographical.read_records`, which
    reads what the strategy uses (skipping empty memories, keeping one record per
    id, failing on an unreadable one), this keeps every live record as it is.

    Parameters
    ----------
    store : Store
        An open store, on the branch to audit.
    namespace : str
        The strategy namespace.
    message_slot : str, optional
        Where the messages are: by default ``<namespace>/messages`` when that slot
        holds any (a manager opened with ``isolate=True``), else ``messages``.

    Returns
    -------
    StoredRecords
    """
    if message_slot is None:
        isolated = f"{namespace}/messages"
        message_slot = isolated if store.items(isolated) else "messages"
    chunks = store.items(f"{namespace}/{_CHUNKS}")
    counter = store.get(f"{namespace}/{_CHUNK_COUNTER}")
    if not isinstance(counter, int):
        known = [
            ChunkRecord(it.id, str(it.body.get("id", "")), [])
            for it in chunks
            if isinstance(it.body, dict)
        ]
        counter = _next_chunk_number(known)
    return StoredRecords(
        messages=tuple(it.id for it in store.items(message_slot)),
        summaries=tuple(Raw(it.id, it.body) for it in store.items(f"{namespace}/{_SUMMARIES}")),
        chunks=tuple(Raw(it.id, it.body) for it in chunks),
        chunk_counter=counter,
        namespace=namespace,
        message_slot=message_slot,
    )


# ------------------------------------------------------------------- the tree
_SUMMARY_FIELDS = frozenset(f.name for f in dataclasses.fields(SummaryEntry)) - {"item"}
_SUMMARY_REQUIRED = ("id", "level", "content", "tokens", "source_ids", "first", "last")
_CHUNK_FIELDS = frozenset(f.name for f in dataclasses.fields(ChunkRecord)) - {"item"}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _id_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(x, str) for x in value)


def _summary_problem(body: Any) -> str | None:
    """Why ``body`` cannot be read as a memory (None when it can)."""
    if not isinstance(body, dict):
        return "its body is not an object"
    missing = [k for k in _SUMMARY_REQUIRED if k not in body]
    if missing:
        return f"it lacks {', '.join(missing)}"
    unknown = sorted(set(body) - _SUMMARY_FIELDS)
    if unknown:
        return f"it has unknown fields {', '.join(unknown)}"
    if not isinstance(body["id"], str) or not body["id"]:
        return "its id is not a string"
    if not _is_int(body["level"]) or body["level"] < 1:
        return f"its level {body['level']!r} is not a whole number from 1"
    if not isinstance(body["content"], str):
        return "its content is not text"
    if not _is_int(body["tokens"]):
        return "its tokens are not a whole number"
    if not _id_list(body["source_ids"]):
        return "its source_ids are not a list of ids"
    if not isinstance(body["first"], str) or not isinstance(body["last"], str):
        return "its first and last are not message ids"
    if body.get("parent_id") is not None and not isinstance(body["parent_id"], str):
        return "its parent_id is not an id"
    return None


def _chunk_problem(body: Any) -> str | None:
    """Why ``body`` cannot be read as a chunk record (None when it can)."""
    if not isinstance(body, dict):
        return "its body is not an object"
    if "id" not in body or "source_ids" not in body:
        return "it lacks " + ", ".join(k for k in ("id", "source_ids") if k not in body)
    unknown = sorted(set(body) - _CHUNK_FIELDS)
    if unknown:
        return f"it has unknown fields {', '.join(unknown)}"
    if not isinstance(body["id"], str) or not body["id"]:
        return "its id is not a string"
    if not _id_list(body["source_ids"]):
        return "its source_ids are not a list of message ids"
    if not isinstance(body.get("compressed", False), bool):
        return "its compressed flag is not true or false"
    if body.get("summary_id") is not None and not isinstance(body["summary_id"], str):
        return "its summary_id is not an id"
    return None


@dataclass
class _Tree:
    """The records parsed: what the strategy would read, and what it would not."""

    records: StoredRecords
    position: dict[str, int]
    valid: dict[str, SummaryEntry]
    """The memories the strategy reads: the last well-formed, non-empty record per id."""
    invalid: dict[str, str]
    """Ids of memory records it does not read -> why (``is empty``, ``is malformed``)."""
    chunks: list[ChunkRecord]
    """The well-formed chunk records, in store order."""
    named: set[str] = field(default_factory=set)
    """Memory ids the well-formed chunk records name."""
    claimants: dict[str, list[str]] = field(default_factory=dict)
    """Memory id -> the valid memories listing it as a child, in store order."""
    spans: dict[str, tuple[int, int] | None] = field(default_factory=dict)
    """Memory id -> its message positions (inclusive) when it is a sound run."""


def _parse(records: StoredRecords, findings: list[Finding] | None = None) -> _Tree:
    """Parse the records; note unreadable, empty and duplicate ones in ``findings``."""
    out = findings if findings is not None else []
    position = {m: i for i, m in enumerate(records.messages)}
    seen: dict[str, list[SummaryEntry]] = {}
    invalid: dict[str, str] = {}
    for raw in records.summaries:
        body = raw.body
        name = body.get("id") if isinstance(body, dict) else None
        name = name if isinstance(name, str) and name else f"item {raw.item}"
        level = body.get("level") if isinstance(body, dict) else None
        level = level if _is_int(level) else None
        content = body.get("content", "") if isinstance(body, dict) else None
        if isinstance(content, str) and not content.strip():
            out.append(
                Finding(
                    Kind.EMPTY,
                    "summary",
                    name,
                    raw.item,
                    level,
                    "it has no content, so the strategy does not read it",
                    *_claimed_range(body, position),
                )
            )
            invalid.setdefault(name, "is empty")
            continue
        problem = _summary_problem(body)
        if problem is not None:
            out.append(
                Finding(
                    Kind.MALFORMED,
                    "summary",
                    name,
                    raw.item,
                    level,
                    f"the record cannot be read as a memory: {problem}",
                )
            )
            invalid.setdefault(name, "is malformed")
            continue
        seen.setdefault(name, []).append(SummaryEntry(item=raw.item, **body))
    valid: dict[str, SummaryEntry] = {}
    for name, entries in seen.items():
        kept = entries[-1]
        for older in entries[:-1]:
            out.append(
                Finding(
                    Kind.DUPLICATE_ID,
                    "summary",
                    name,
                    older.item,
                    older.level,
                    f"a later record (item {kept.item}) has the same id; "
                    "the strategy reads only that one",
                    older.first,
                    older.last,
                    _positions(older.first, older.last, position),
                )
            )
        valid[name] = kept
        invalid.pop(name, None)
    chunks: list[ChunkRecord] = []
    for raw in records.chunks:
        problem = _chunk_problem(raw.body)
        if problem is not None:
            body = raw.body
            name = body.get("id") if isinstance(body, dict) else None
            out.append(
                Finding(
                    Kind.MALFORMED,
                    "chunk",
                    name if isinstance(name, str) and name else f"item {raw.item}",
                    raw.item,
                    None,
                    f"the record cannot be read as a chunk record: {problem}",
                )
            )
            continue
        chunks.append(ChunkRecord(item=raw.item, **raw.body))
    tree = _Tree(records, position, valid, invalid, chunks)
    tree.named = {c.summary_id for c in chunks if c.summary_id is not None}
    for s in valid.values():
        if s.level > 1:
            for child in dict.fromkeys(s.source_ids):
                tree.claimants.setdefault(child, []).append(s.id)
    return tree


def _positions(first: Any, last: Any, position: dict[str, int]) -> tuple[int, int] | None:
    if isinstance(first, str) and isinstance(last, str) and first in position and last in position:
        return (position[first], position[last])
    return None


def _claimed_range(body: Any, position: dict[str, int]) -> tuple[Any, Any, Any]:
    """``(first, last, positions)`` of a record body, as far as they can be read."""
    if not isinstance(body, dict):
        return (None, None, None)
    first = body.get("first") if isinstance(body.get("first"), str) else None
    last = body.get("last") if isinstance(body.get("last"), str) else None
    return (first, last, _positions(first, last, position))


def _short(ids: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def _run_problem(ids: Sequence[str], position: dict[str, int], messages: Sequence[str]) -> str:
    """Why the messages ``ids`` (all on the branch) are not one run in order ('' if they are)."""
    spots = [position[i] for i in ids]
    repeated = sorted((i for i, n in Counter(ids).items() if n > 1), key=lambda i: position[i])
    if repeated:
        return f"names {_short(repeated)} more than once"
    lo, hi = min(spots), max(spots)
    if hi - lo + 1 != len(spots):
        held = set(spots)
        gaps = [p for p in range(lo, hi + 1) if p not in held]
        gap = [messages[p] for p in gaps]
        where = ", ".join(map(str, gaps))
        noun = "position" if len(gap) == 1 else "positions"
        return (
            f"skips {len(gap)} of the messages in its range: {_short(gap)} ({noun} {where})"
            if len(gap) <= 6
            else f"skips {len(gap)} of the {hi - lo + 1} messages in its range"
        )
    if spots != sorted(spots):
        return "names its messages out of order (positions " + ", ".join(map(str, spots)) + ")"
    return ""


def audit(records: StoredRecords) -> list[Finding]:
    """Every broken invariant of the memory tree and the chunk records.

    Parameters
    ----------
    records : StoredRecords
        As read by :func:`read_stored`.

    Returns
    -------
    list of Finding
        Empty when the tree is sound: first the unreadable, empty and duplicate
        records, then each memory's own findings (store order), then the chunk
        records'.

    Examples
    --------
    An L2 over two L1s that are not adjacent (``c`` lies between them):

    >>> def l1(item, id, ids, parent=None):
    ...     return Raw(item, {"id": id, "level": 1, "content": "x", "tokens": 1,
    ...                       "source_ids": ids, "first": ids[0], "last": ids[-1],
    ...                       "parent_id": parent})
    >>> records = StoredRecords(
    ...     messages=("a", "b", "c", "d"),
    ...     summaries=(
    ...         l1("1", "L1-0", ["a", "b"], "L2-2"),
    ...         l1("2", "L1-1", ["d"], "L2-2"),
    ...         Raw("3", {"id": "L2-2", "level": 2, "content": "y", "tokens": 1,
    ...                   "source_ids": ["L1-0", "L1-1"], "first": "a", "last": "d"}),
    ...     ),
    ... )
    >>> [(f.id, f.level, f.kind.value, f.positions) for f in audit(records)]
    [('L2-2', 2, 'non_contiguous', (0, 3))]
    >>> print(audit(records)[0].detail)  # doctest: +NORMALIZE_WHITESPACE
    its children are not adjacent: L1-0 ends at position 1 and L1-1 starts at position 3
    (1 message between)
    """
    findings: list[Finding] = []
    _analyse(records, findings)
    order = {raw.item: k for k, raw in enumerate(records.summaries)}
    order.update({raw.item: len(order) + k for k, raw in enumerate(records.chunks)})
    first = (Kind.MALFORMED, Kind.EMPTY, Kind.DUPLICATE_ID)
    early = [f for f in findings if f.kind in first]
    rest = [f for f in findings if f.kind not in first]
    rest.sort(key=lambda f: (f.record == "chunk", order.get(f.item, 0)))
    return early + rest


def _analyse(records: StoredRecords, findings: list[Finding]) -> _Tree:
    """The parsed tree with every memory's span, every finding noted in ``findings``."""
    tree = _parse(records, findings)
    for s in sorted(tree.valid.values(), key=lambda x: x.level):
        _check_span(tree, s, findings)
    for s in tree.valid.values():  # store order
        _check_links(tree, s, findings)
    _check_chunks(tree, findings)
    return tree


def _check_span(tree: _Tree, s: SummaryEntry, out: list[Finding]) -> None:
    """Is ``s`` a sound run (its children checked first)? Sets ``tree.spans[s.id]``."""
    position, messages = tree.position, tree.records.messages
    claimed = _positions(s.first, s.last, position)

    def finding(kind: Kind, detail: str) -> None:
        out.append(
            Finding(kind, "summary", s.id, s.item, s.level, detail, s.first, s.last, claimed)
        )

    span: tuple[int, int] | None = None
    if s.level == 1:
        missing = [i for i in s.source_ids if i not in position]
        if missing:
            noun = "message is" if len(missing) == 1 else "messages are"
            finding(
                Kind.MISSING_MESSAGES,
                f"{len(missing)} of its {len(s.source_ids)} {noun} not on this branch: "
                + _short(missing),
            )
        elif problem := _run_problem(s.source_ids, position, messages):
            finding(Kind.NON_CONTIGUOUS, problem)
        else:
            span = (position[s.source_ids[0]], position[s.source_ids[-1]])
    else:
        children = s.source_ids
        absent = [c for c in children if c not in tree.valid]
        wrong = [c for c in children if c in tree.valid and tree.valid[c].level != s.level - 1]
        repeated = sorted(c for c, n in Counter(children).items() if n > 1)
        if absent:
            finding(
                Kind.MISSING_CHILD,
                "it lists "
                + ", ".join(
                    f"{c}, which {tree.invalid.get(c, 'the store does not hold')}" for c in absent
                ),
            )
        elif wrong:
            finding(
                Kind.LEVEL_MISMATCH,
                "it lists "
                + ", ".join(f"{c} (L{tree.valid[c].level})" for c in wrong)
                + f", not L{s.level - 1} memories",
            )
        elif repeated:
            finding(Kind.NON_CONTIGUOUS, f"it lists {', '.join(repeated)} more than once")
        elif all(tree.spans.get(c) is not None for c in children):
            spans = [tree.spans[c] for c in children]
            problem = ""
            for (a, sa), (b, sb) in itertools.pairwise(zip(children, spans, strict=True)):
                assert sa is not None and sb is not None
                if sb[0] == sa[1] + 1:
                    continue
                if sb[0] > sa[1] + 1:
                    between = sb[0] - sa[1] - 1
                    noun = "message" if between == 1 else "messages"
                    problem = (
                        f"its children are not adjacent: {a} ends at position {sa[1]} and "
                        f"{b} starts at position {sb[0]} ({between} {noun} between)"
                    )
                elif sb[1] < sa[0]:
                    problem = (
                        f"its children are out of order: {b} (positions {sb[0]}..{sb[1]}) "
                        f"comes before {a} (positions {sa[0]}..{sa[1]}) in the messages"
                    )
                else:
                    problem = (
                        f"its children overlap: {a} (positions {sa[0]}..{sa[1]}) and "
                        f"{b} (positions {sb[0]}..{sb[1]})"
                    )
                break
            if problem:
                finding(Kind.NON_CONTIGUOUS, problem)
            else:
                first, last = spans[0], spans[-1]
                assert first is not None and last is not None
                span = (first[0], last[1])
        # else: a child is broken; this memory goes with it (see plan_repair)
    tree.spans[s.id] = span
    if span is not None and (s.first, s.last) != (messages[span[0]], messages[span[1]]):
        finding(
            Kind.WRONG_RANGE,
            f"its range says {s.first}..{s.last} but it covers "
            f"{messages[span[0]]}..{messages[span[1]]} (positions {span[0]}..{span[1]})",
        )


def _check_links(tree: _Tree, s: SummaryEntry, out: list[Finding]) -> None:
    """Parent pointers against the parents' lists of children, and L1s against chunks."""
    claimed = _positions(s.first, s.last, tree.position)

    def finding(kind: Kind, detail: str) -> None:
        out.append(
            Finding(kind, "summary", s.id, s.item, s.level, detail, s.first, s.last, claimed)
        )

    parents = tree.claimants.get(s.id, [])
    if len(parents) > 1:
        finding(
            Kind.SHARED_CHILD,
            f"{len(parents)} memories list it as a child ({', '.join(parents)}); its parent "
            f"pointer names {s.parent_id or 'none'}",
        )
    if s.parent_id is not None:
        if s.parent_id not in tree.valid:
            why = tree.invalid.get(s.parent_id, "is not in the store")
            finding(Kind.DANGLING_PARENT, f"its parent {s.parent_id} {why}")
        elif s.parent_id not in parents:
            finding(Kind.DANGLING_PARENT, f"its parent {s.parent_id} does not list it as a child")
    elif len(parents) == 1:
        finding(Kind.UNLINKED_CHILD, f"{parents[0]} lists it as a child, but its parent is empty")
    if s.level == 1 and tree.chunks and s.id not in tree.named:
        finding(
            Kind.UNCHUNKED,
            "no chunk record names it, so the strategy neither shows nor merges it",
        )


def _chunk_runs(
    chunk: ChunkRecord, position: dict[str, int], messages: Sequence[str]
) -> list[tuple[str, ...]]:
    """The chunk's messages as runs of consecutive positions, in message order."""
    spots = sorted({position[i] for i in chunk.source_ids})
    runs: list[list[int]] = []
    for p in spots:
        if runs and p == runs[-1][-1] + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    return [tuple(messages[p] for p in run) for run in runs]


def _check_chunks(tree: _Tree, out: list[Finding]) -> None:
    position, messages = tree.position, tree.records.messages
    for c in tree.chunks:
        claimed = _positions(c.source_ids[0], c.source_ids[-1], position)

        def finding(kind: Kind, detail: str, c: ChunkRecord = c, claimed: Any = claimed) -> None:
            out.append(
                Finding(
                    kind,
                    "chunk",
                    c.id,
                    c.item,
                    None,
                    detail,
                    c.source_ids[0],
                    c.source_ids[-1],
                    claimed,
                )
            )

        # a chunk that lost messages is the strategy's to follow on open (reconcile)
        if all(i in position for i in c.source_ids) and (
            problem := _run_problem(c.source_ids, position, messages)
        ):
            finding(Kind.NON_CONTIGUOUS_CHUNK, problem)
        if c.summary_id is not None:
            held = tree.valid.get(c.summary_id)
            if held is None:
                why = tree.invalid.get(c.summary_id, "is not in the store")
                finding(Kind.ORPHAN_CHUNK, f"it is compressed into {c.summary_id}, which {why}")
            elif held.level != 1:
                finding(
                    Kind.ORPHAN_CHUNK,
                    f"it is compressed into {c.summary_id}, which is an L{held.level}, not an L1",
                )


# -------------------------------------------------------------------- the plan
_AGAIN = "its messages are summarised again"
_DETACHES = {
    Kind.MISSING_MESSAGES: f"some of its messages are not on this branch; {_AGAIN}",
    Kind.NON_CONTIGUOUS: f"it is not a contiguous run of messages; {_AGAIN}",
    Kind.MISSING_CHILD: f"it lists a memory the store does not hold; {_AGAIN}",
    Kind.LEVEL_MISMATCH: f"it lists a memory of the wrong level; {_AGAIN}",
    Kind.UNCHUNKED: "no chunk record names it, so the strategy does not show it",
}


def plan_repair(findings: Sequence[Finding], records: StoredRecords) -> list[Action]:
    """The writes that fix ``findings``, losing no message.

    * an unreadable, empty or duplicate (earlier) memory record is dropped;
    * a memory that is not a sound run (non-contiguous, over messages the branch
      lacks, over missing or wrong-level children, or an L1 no chunk record names) is
      dropped with every memory above it; of a child listed by several parents, the
      parents its pointer does not name are dropped the same way;
    * the memories left keep or get the one parent that lists them (a pointer to a
      dropped, missing or unlisting parent is cleared);
    * a wrong ``first`` / ``last`` is set to the ends of what the memory covers;
    * a chunk record whose L1 is gone (dropped here, or before) is reopened, so the
      strategy summarises its messages again; a non-contiguous one is split into
      contiguous records; an unreadable one is dropped (its messages stay raw).

    Parameters
    ----------
    findings : sequence of Finding
        From :func:`audit` of the same ``records``.
    records : StoredRecords

    Returns
    -------
    list of Action
        In the order :func:`apply_repair` writes them; empty for no findings.

    Examples
    --------
    An L1 naming a parent the store does not hold:

    >>> records = StoredRecords(messages=("a",), summaries=(
    ...     Raw("1", {"id": "L1-0", "level": 1, "content": "x", "tokens": 1,
    ...               "source_ids": ["a"], "first": "a", "last": "a", "parent_id": "L2-9"}),))
    >>> [a.describe() for a in plan_repair(audit(records), records)]
    ['clear the parent of L1-0 (item 1): its parent L2-9 is not in the store']
    """
    tree = _analyse(records, [])
    valid, position = tree.valid, tree.position
    actions: list[Action] = []
    summary_items = {raw.item for raw in records.summaries}
    chunk_items = {raw.item for raw in records.chunks}
    dropped_items: set[str] = set()
    detach: dict[str, str] = {}  # memory id -> why
    fixes: list[str] = []
    noted: set[str] = set()  # memories with a finding about their parent
    for f in findings:
        if f.record == "summary" and f.item not in summary_items:
            continue
        if f.record == "chunk" and f.item not in chunk_items:
            continue
        if f.record == "summary" and f.kind in (Kind.MALFORMED, Kind.EMPTY, Kind.DUPLICATE_ID):
            if f.item not in dropped_items:
                dropped_items.add(f.item)
                why = {
                    Kind.MALFORMED: "the record cannot be read",
                    Kind.EMPTY: "it has no content",
                    Kind.DUPLICATE_ID: "a later record has the same id",
                }[f.kind]
                actions.append(Action(Op.DROP, "summary", f.id, f.item, why))
        elif f.kind in _DETACHES and f.id in valid:
            detach.setdefault(f.id, _DETACHES[f.kind])
        elif f.kind is Kind.SHARED_CHILD and f.id in valid:
            noted.add(f.id)
            own = valid[f.id].parent_id
            parents = tree.claimants.get(f.id, [])
            for p in parents:
                if p != own or own not in parents:
                    detach.setdefault(
                        p, f"it lists {f.id}, which another parent lists too; {_AGAIN}"
                    )
        elif f.kind in (Kind.DANGLING_PARENT, Kind.UNLINKED_CHILD):
            noted.add(f.id)
        elif f.kind is Kind.WRONG_RANGE and f.id in valid:
            fixes.append(f.id)
    split: dict[str, list[tuple[str, ...]]] = {}
    to_split = {
        f.item for f in findings if f.record == "chunk" and f.kind is Kind.NON_CONTIGUOUS_CHUNK
    }
    for c in tree.chunks:
        if c.item in to_split and all(i in position for i in c.source_ids):
            split[c.item] = _chunk_runs(c, position, records.messages)
            if c.summary_id in valid and valid[c.summary_id].level == 1:
                detach.setdefault(c.summary_id, f"its chunk record {c.id} is split; {_AGAIN}")
    # every memory above a detached one goes with it
    queue = list(detach)
    while queue:
        x = queue.pop()
        above = list(tree.claimants.get(x, []))
        own = valid[x].parent_id
        if own in valid:
            above.append(own)
        for p in above:
            if p not in detach:
                detach[p] = f"it is above {x}, which is dropped; {_AGAIN}"
                queue.append(p)
    order = {raw.item: k for k, raw in enumerate(records.summaries)}
    for s in sorted((valid[x] for x in detach), key=lambda s: (s.level, order[s.item])):
        actions.append(Action(Op.DROP, "summary", s.id, s.item, detach[s.id]))
    kept = {x: s for x, s in valid.items() if x not in detach}
    for s in kept.values():
        listing = [p for p in tree.claimants.get(s.id, []) if p in kept]
        want = listing[0] if len(listing) == 1 else None
        if len(listing) > 1 or want == s.parent_id:
            continue
        if s.id not in noted and (s.parent_id is None or s.parent_id in kept):
            continue  # only what the findings name, or what the drops leave dangling
        if want is None:
            why = (
                f"its parent {s.parent_id} is dropped"
                if s.parent_id in detach
                else _parent_reason(tree, s)
            )
            actions.append(Action(Op.CLEAR_PARENT, "summary", s.id, s.item, why))
        else:
            actions.append(
                Action(Op.SET_PARENT, "summary", s.id, s.item, f"{want} lists it", parent=want)
            )
    for x in fixes:
        if x in kept and (span := tree.spans.get(x)) is not None:
            first, last = records.messages[span[0]], records.messages[span[1]]
            actions.append(
                Action(
                    Op.FIX_RANGE,
                    "summary",
                    x,
                    kept[x].item,
                    "the ends of what it covers",
                    first=first,
                    last=last,
                )
            )
    counter = records.chunk_counter
    malformed_chunks = {
        f.item for f in findings if f.record == "chunk" and f.kind is Kind.MALFORMED
    }
    for raw in records.chunks:
        if raw.item in malformed_chunks:
            name = raw.body.get("id") if isinstance(raw.body, dict) else None
            actions.append(
                Action(
                    Op.DROP_CHUNK,
                    "chunk",
                    name if isinstance(name, str) and name else f"item {raw.item}",
                    raw.item,
                    "the record cannot be read; its messages stay, shown raw",
                )
            )
    for c in tree.chunks:
        if c.item in split:
            runs = split[c.item]
            new_ids = tuple(f"c-{counter + k}" for k in range(len(runs) - 1))
            counter += len(new_ids)
            actions.append(
                Action(
                    Op.SPLIT_CHUNK,
                    "chunk",
                    c.id,
                    c.item,
                    "it is not a contiguous run of messages; each run is summarised again",
                    runs=tuple(runs),
                    new_ids=new_ids,
                )
            )
        elif c.summary_id is not None and (
            c.summary_id not in kept or kept[c.summary_id].level != 1
        ):
            gone = (
                "is dropped"
                if c.summary_id in detach
                else tree.invalid.get(c.summary_id, "is not in the store")
            )
            if c.summary_id in valid and c.summary_id not in detach:
                gone = f"is an L{valid[c.summary_id].level}"
            actions.append(
                Action(
                    Op.REOPEN_CHUNK,
                    "chunk",
                    c.id,
                    c.item,
                    f"its memory {c.summary_id} {gone}; {_AGAIN}",
                )
            )
    return actions


def _parent_reason(tree: _Tree, s: SummaryEntry) -> str:
    if s.parent_id is not None and s.parent_id not in tree.valid:
        return f"its parent {s.parent_id} {tree.invalid.get(s.parent_id, 'is not in the store')}"
    return f"its parent {s.parent_id} does not list it as a child"


# ------------------------------------------------------------------- applying
def apply_repair(store: Store, records: StoredRecords, actions: Sequence[Action]) -> None:
    """Write ``actions`` to ``store`` through its write API, in one transaction.

    Parameters
    ----------
    store : Store
        The store ``records`` was read from, on the same branch (a copy, for
        :func:`repair_store`).
    records : StoredRecords
    actions : sequence of Action
        From :func:`plan_repair`.

    Raises
    ------
    StoreError
        When a write fails; then nothing is written.
    """
    summaries, chunks = records.slot(_SUMMARIES), records.slot(_CHUNKS)
    counter = records.chunk_counter
    with store.transaction():
        for a in actions:
            slot = summaries if a.record == "summary" else chunks
            if a.op in (Op.DROP, Op.DROP_CHUNK):
                store.redact(slot, a.item)
                continue
            current = store.item(slot, a.item)
            if current is None:
                raise StoreError(f"{a.id} (item {a.item}) is not a live record of {slot}")
            body = dict(current.body)
            if a.op is Op.CLEAR_PARENT:
                body["parent_id"] = None
            elif a.op is Op.SET_PARENT:
                body["parent_id"] = a.parent
            elif a.op is Op.FIX_RANGE:
                body["first"], body["last"] = a.first, a.last
            elif a.op is Op.REOPEN_CHUNK:
                body["compressed"], body["summary_id"] = False, None
            elif a.op is Op.SPLIT_CHUNK:
                body.update(source_ids=list(a.runs[0]), compressed=False, summary_id=None)
                for new_id, run in zip(a.new_ids, a.runs[1:], strict=True):
                    store.append(chunks, ChunkRecord("", new_id, list(run)).body())
                    counter = max(counter, int(new_id.removeprefix("c-")) + 1)
                store.set(records.slot(_CHUNK_COUNTER), counter)
            store.edit(slot, a.item, body)


# ------------------------------------------------------------- store files
@dataclass
class StoreAudit:
    """What :func:`audit_store` found.

    Attributes
    ----------
    path : str
        The store file audited (its real path).
    namespace, branch : str
    records : StoredRecords
    findings : list of Finding
    """

    path: str
    namespace: str
    branch: str
    records: StoredRecords
    findings: list[Finding]
    damaged: list[DamagedRow] = field(default_factory=list)
    """Rows of the file that cannot be read (:func:`~context_manager.salvage.damaged_rows`):
    the findings are those of the rest."""

    def counts(self) -> dict[str, Any]:
        """Messages, memories by level and chunk records, as read."""
        tree = _parse(self.records)
        levels: dict[str, int] = {}
        for s in tree.valid.values():
            levels[f"L{s.level}"] = levels.get(f"L{s.level}", 0) + 1
        return {
            "messages": len(self.records.messages),
            "summaries": len(self.records.summaries),
            "levels": dict(sorted(levels.items(), key=lambda kv: int(kv[0][1:]))),
            "chunks": len(self.records.chunks),
        }


@dataclass
class StoreRepair:
    """What :func:`repair_store` planned and did.

    Attributes
    ----------
    path, namespace, branch : str
    findings : list of Finding
        The audit before the repair.
    actions : list of Action
        The plan.
    applied : bool
        The store file was replaced by the repaired copy.
    backup : str or None
        Where the original was kept (when applied).
    after : list of Finding
        The audit of the repaired copy (empty when applied).
    messages_before, messages_after : int
        Messages on the branch before and after (equal: a repair removes none).
    """

    path: str
    namespace: str
    branch: str
    findings: list[Finding]
    actions: list[Action]
    applied: bool = False
    backup: str | None = None
    after: list[Finding] = field(default_factory=list)
    messages_before: int = 0
    messages_after: int = 0
    damaged: list[DamagedRow] = field(default_factory=list)
    """Rows of the file that cannot be read: the repair copies every other row into a
    new store (:func:`~context_manager.salvage.salvage`) and repairs that."""


def _held_message(shown: str) -> str:
    return (
        f"{shown} is held by a running agent: another process (or a Store in this one) "
        "has its writer lock, an flock on the database file; stop the agent (close its "
        "ContextManager) and run this again"
    )


@contextlib.contextmanager
def _file_lock(real: str, shown: str, *, exclusive: bool) -> Iterator[None]:
    """The store's writer lock (shared: only to copy it; exclusive: to replace it).

    Taken without waiting, so a store a running agent holds is refused at once.
    """
    try:
        fd = os.open(real, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise NotAStoreError(f"cannot read {shown}: {exc.strerror or exc}") from exc
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreLockedError(_held_message(shown)) from None
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _real(path: str | os.PathLike[str]) -> tuple[str, str]:
    shown = os.fspath(path)
    real = os.path.realpath(shown)
    if not os.path.isfile(real):
        raise NotAStoreError(f"{shown} is not a file")
    return real, shown


def _copy(real: str, dest: Path) -> None:
    """Copy the store file and its write-ahead log (a stopped writer's, not yet folded in)."""
    shutil.copyfile(real, dest)
    if os.path.exists(real + "-wal"):
        shutil.copyfile(real + "-wal", f"{dest}-wal")


def _open_copy(copy: Path, shown: str, namespace: str, branch: str | None) -> tuple[Store, str]:
    """Open the copy as a store, after checking it is one with that namespace; returns
    it on ``branch`` (when given) and the branch that was current."""
    try:
        with contextlib.closing(sqlite3.connect(copy)) as probe:
            tables = store_tables(probe)
            slots, current = [], "main"
            if {"records", "branches", "meta"} <= tables:
                slots = [r[0] for r in probe.execute("SELECT DISTINCT slot FROM records")]
                row = probe.execute(
                    "SELECT value FROM meta WHERE key = 'current_branch'"
                ).fetchone()
                current = str(row[0]) if row else current
    except sqlite3.DatabaseError as exc:
        raise NotAStoreError(f"{shown} is not a SQLite database: {exc}") from exc
    check_store_tables(shown, tables, complete=True)
    namespaces = sorted(
        {slot.rsplit("/", 1)[0] for slot in slots if isinstance(slot, str) and "/" in slot}
    )
    if namespace not in namespaces and (namespaces or namespace != "default"):
        raise NotAStoreError(
            f"{shown} has no namespace {namespace!r}; "
            + (
                f"its namespaces: {', '.join(namespaces)}"
                if namespaces
                else "no strategy has written to it yet"
            )
        )
    try:
        return Store.open(copy, branch=branch), current
    except StoreError as exc:
        raise NotAStoreError(f"{shown}: {str(exc).replace(str(copy), 'the copy')}") from exc


def audit_store(
    path: str | os.PathLike[str], *, namespace: str = "default", branch: str | None = None
) -> StoreAudit:
    """Audit a store file on a copy; the file itself is only read.

    Parameters
    ----------
    path : str or os.PathLike
        The store file (a stopped agent's).
    namespace : str
        The strategy namespace.
    branch : str, optional
        The branch to audit (by default the store's current one).

    Returns
    -------
    StoreAudit

    Raises
    ------
    StoreLockedError
        When a running agent holds the store (its writer lock).
    NotAStoreError
        When the path is not a readable store, or lacks the namespace or branch.
    """
    real, shown = _real(path)
    with _audit_scratch(real) as tmp:
        copy = Path(tmp) / "store.db"
        with _file_lock(real, shown, exclusive=False):
            _copy(real, copy)
        copy, damaged = _readable_copy(copy)
        store, _ = _open_copy(copy, shown, namespace, branch)
        with store:
            records = read_stored(store, namespace)
            return StoreAudit(real, namespace, store.branch, records, audit(records), damaged)


def _readable_copy(copy: Path) -> tuple[Path, list[DamagedRow]]:
    """``copy``, or when rows of it cannot be read, a new store beside it of every row
    that can (:func:`~context_manager.salvage.salvage`), and the rows left out."""
    try:
        with contextlib.closing(
            sqlite3.connect(copy.resolve().as_uri() + "?mode=ro", uri=True)
        ) as c:
            tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master")}
    except sqlite3.DatabaseError:
        return copy, []  # not a database at all: opening it says so
    if not {"records", "branches", "meta"} <= tables:
        return copy, []
    damaged = damaged_rows(copy)
    if not damaged:
        return copy, []
    salvaged = copy.with_name("salvaged.db")
    return salvaged, salvage(copy, salvaged)


@contextlib.contextmanager
def _audit_scratch(real: str) -> Iterator[Path]:
    """Where an audit copies the store: a scratch folder beside it (removed at the end,
    or by the store's next open if the audit is killed), else, in a folder this process
    may not write, a temporary folder of the system's."""
    with contextlib.ExitStack() as stack:
        try:
            work = stack.enter_context(
                scratch(os.path.dirname(real), os.path.basename(real), "audit")
            )
        except PermissionError:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ctxfold-audit-")))
        yield work


def _backup_name(real: str, n: int = 0) -> tuple[str, int]:
    """The first free backup name of ``real`` from the ``n``-th on, and its number."""
    while True:
        candidate = f"{real}.bak" if n == 0 else f"{real}.bak.{n}"
        if not os.path.lexists(candidate) and not os.path.lexists(f"{candidate}-wal"):
            return candidate, n
        n += 1


def _keep_backup(real: str, mode: int) -> str:
    """Copy the store file ``real`` to its backup name (a new file, never one written
    through a symlink, with the store's permissions ``mode``) and return that name."""
    n = 0
    while True:
        backup, n = _backup_name(real, n)
        try:
            copy_private(real, backup, mode)
        except FileExistsError:  # it appeared since: take the next
            n += 1
            continue
        return backup


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fold_log(db: Path) -> None:
    """Fold a closed store's write-ahead log into the file itself (one file to move)."""
    if os.path.exists(f"{db}-wal"):
        with contextlib.closing(sqlite3.connect(db)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for extra in (f"{db}-wal", f"{db}-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(extra)


def repair_store(
    path: str | os.PathLike[str],
    *,
    apply: bool = False,
    namespace: str = "default",
    branch: str | None = None,
) -> StoreRepair:
    """Plan a repair of a store file and, with ``apply``, carry it out.

    Without ``apply`` the file is only read (a copy is audited and planned). With
    it, the writer lock is held throughout: the plan is applied to a copy next to
    the file, the copy is audited again and checked by SQLite, and only when both
    are clean is the original kept as ``STORE.bak`` (``STORE.bak.1``, ... when taken)
    and the copy moved over ``STORE`` in one rename. The backup and the repaired file
    keep the store's permissions, and the backup is a new file (never one written
    through a symlink planted at its name). Otherwise the original is left
    as it was and :attr:`StoreRepair.after` says what the copy still had.

    Parameters
    ----------
    path : str or os.PathLike
        The store file (a stopped agent's).
    apply : bool
        Carry the plan out.
    namespace : str
    branch : str, optional
        The branch to repair (by default the store's current one, which stays current).

    Returns
    -------
    StoreRepair

    Raises
    ------
    StoreLockedError
        When a running agent holds the store (its writer lock).
    NotAStoreError
        When the path is not a readable store, or lacks the namespace or branch.
    """
    if not apply:  # the plan of an audit: read on a copy, nothing written
        audited = audit_store(path, namespace=namespace, branch=branch)
        n = len(audited.records.messages)
        return StoreRepair(
            audited.path,
            namespace,
            audited.branch,
            audited.findings,
            plan_repair(audited.findings, audited.records),
            messages_before=n,
            messages_after=n,
            damaged=audited.damaged,
        )
    real, shown = _real(path)
    folder = os.path.dirname(real)
    with (
        _file_lock(real, shown, exclusive=True),
        scratch(folder, os.path.basename(real), "repair") as tmp,
    ):
        # the scratch folder goes when this ends; a kill leaves it to the next open
        copy = tmp / "store.db"
        _copy(real, copy)
        copy, damaged = _readable_copy(copy)
        store, current = _open_copy(copy, shown, namespace, branch)
        with store:
            records = read_stored(store, namespace)
            findings = audit(records)
            actions = plan_repair(findings, records)
            result = StoreRepair(
                real,
                namespace,
                store.branch,
                findings,
                actions,
                messages_before=len(records.messages),
                damaged=damaged,
            )
            if not actions and not damaged:
                result.after = findings
                result.messages_after = result.messages_before
                return result
            apply_repair(store, records, actions)
            if store.branch != current:
                store.switch_branch(current)
        with Store.open(copy, branch=result.branch) as store:
            again = read_stored(store, namespace)
            result.after = audit(again)
            result.messages_after = len(again.messages)
            problems = store.integrity_check()
            store.switch_branch(current)
        if problems:
            raise StoreError(f"the repaired copy of {shown} fails SQLite's check: {problems}")
        if result.after or result.messages_after != result.messages_before:
            return result
        _fold_log(copy)
        mode = stat.S_IMODE(os.stat(real).st_mode)
        os.chmod(copy, mode)  # the repaired store keeps the store's permissions
        _fsync(str(copy))
        backup = _keep_backup(real, mode)
        if os.path.exists(real + "-wal"):
            # the log belongs to the original: it goes with the backup, so it is
            # never read against the repaired file
            os.replace(real + "-wal", backup + "-wal")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(real + "-shm")
        os.replace(copy, real)
        _fsync(folder)
        result.applied, result.backup = True, backup
        return result
