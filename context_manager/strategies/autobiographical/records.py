"""What the strategy persists: chunk records, memories, pins, locks and the frontier.

Each is one slot of the store under the strategy's namespace (``autobio:chunks``,
``autobio:summaries``, ``autobio:pins``, ``autobio:resolutions``, ...). This module is
the only one that names them: :func:`read_records` reads them all into a
:class:`Records`, whose methods are the only writes, each in one store transaction.
Tools such as ``ctxfold inspect`` read the records through it too.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...arguments import check_pin_levels, check_text
from ...errors import ArgumentError
from ...exact_values import with_values
from ...store import StoreCorruptError, damaged

if TYPE_CHECKING:
    from ...store import Item, RecordStore

__all__ = [
    "CHUNKS_SLOT",
    "CHUNK_COUNTER_SLOT",
    "FRONTIER_CHAIN",
    "SUMMARIES_SLOT",
    "ChunkRecord",
    "IgnoredPinWarning",
    "Pin",
    "Provenance",
    "Records",
    "SummaryEntry",
    "frontier_runs",
    "is_frontier_delta",
    "next_chunk_number",
    "read_frontier",
    "read_records",
]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(x, str) for x in value)


def _is_optional_id(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _is_optional_text(value: Any) -> bool:
    return value is None or (isinstance(value, str) and bool(value))


_HEX = frozenset("0123456789abcdef")


def _is_optional_hash(value: Any) -> bool:
    return value is None or (isinstance(value, str) and len(value) == 64 and set(value) <= _HEX)


def _rule(check: Callable[[Any], bool], says: str) -> dict[str, Any]:
    """A stored field's rule, kept in the field's metadata: what a readable body holds
    there, and what to say when it does not (``{value!r}`` names what it held)."""
    return {"check": check, "says": says}


_NOT_STORED = {"stored": False}


def _problem(record: type[Any], body: Any) -> str | None:
    """Why ``body`` cannot be read as a ``record`` (None when it can), by the rules of
    its dataclass fields: a field without a default is required, a body field no
    stored field names is unknown, and each rule checks its field when present."""
    if not isinstance(body, dict):
        return "its body is not an object"
    stored = [f for f in dataclasses.fields(record) if f.metadata.get("stored", True)]
    required = [
        f.name
        for f in stored
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [name for name in required if name not in body]
    if missing:
        return f"it lacks {', '.join(missing)}"
    unknown = sorted(set(body) - {f.name for f in stored})
    if unknown:
        return f"it has unknown fields {', '.join(unknown)}"
    for f in stored:
        check = f.metadata.get("check")
        if check is not None and f.name in body and not check(body[f.name]):
            return str(f.metadata["says"]).format(value=body[f.name])
    return None


@dataclass
class ChunkRecord:
    """A closed run of messages that becomes one L1 memory.

    The fields after ``item`` (the store's item id) are the stored record's, each with
    its rule: :meth:`problem_of` reads a stored body by them, and the audit
    (:mod:`context_manager.topology`) validates against them, so the schema is stated
    here only.
    """

    item: str = field(metadata=_NOT_STORED)
    id: str = field(metadata=_rule(_is_id, "its id is not a string"))
    source_ids: list[str] = field(
        metadata=_rule(_is_ids, "its source_ids are not a list of message ids")
    )
    compressed: bool = field(
        default=False,
        metadata=_rule(lambda v: isinstance(v, bool), "its compressed flag is not true or false"),
    )
    summary_id: str | None = field(
        default=None, metadata=_rule(_is_optional_id, "its summary_id is not an id")
    )

    @classmethod
    def problem_of(cls, body: Any) -> str | None:
        """Why a stored ``body`` cannot be read as a chunk record, or None.

        Examples
        --------
        >>> ChunkRecord.problem_of({"id": "c-0", "source_ids": ["m1"]}) is None
        True
        >>> ChunkRecord.problem_of({"id": "c-0", "source_ids": []})
        'its source_ids are not a list of message ids'
        >>> ChunkRecord.problem_of({"source_ids": ["m1"], "colour": 1})
        'it lacks id'
        """
        return _problem(cls, body)

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source_ids": self.source_ids,
            "compressed": self.compressed,
            "summary_id": self.summary_id,
        }


_FIRST_LAST = "its first and last are not message ids"


@dataclass
class SummaryEntry:
    """A memory: L1 over a chunk's messages, L_k over L_{k-1} memories.

    As for :class:`ChunkRecord`, the fields after ``item`` are the stored record's and
    carry its rules (:meth:`problem_of`).
    """

    item: str = field(metadata=_NOT_STORED)
    id: str = field(metadata=_rule(_is_id, "its id is not a string"))
    level: int = field(
        metadata=_rule(
            lambda v: _is_int(v) and v >= 1, "its level {value!r} is not a whole number from 1"
        )
    )
    content: str = field(metadata=_rule(lambda v: isinstance(v, str), "its content is not text"))
    tokens: int = field(metadata=_rule(_is_int, "its tokens are not a whole number"))
    source_ids: list[str] = field(metadata=_rule(_is_ids, "its source_ids are not a list of ids"))
    first: str = field(metadata=_rule(lambda v: isinstance(v, str), _FIRST_LAST))
    last: str = field(metadata=_rule(lambda v: isinstance(v, str), _FIRST_LAST))
    parent_id: str | None = field(
        default=None, metadata=_rule(_is_optional_id, "its parent_id is not an id")
    )
    created: float = field(default_factory=time.time)
    stub: bool = False
    stitched: bool = False
    """An L1 stitched from the memories of its chunk's parts (the split rung after a
    refusal: ``compression_split_fallback``)."""
    values: tuple[str, ...] = ()
    """The exact values kept beside the prose, best first
    (:mod:`context_manager.exact_values`); a context shows them after it, on one line.
    Memories stored before values were kept have none."""
    stop_reason: str | None = field(
        default=None, metadata=_rule(_is_optional_text, "its stop_reason is not text")
    )
    """Why the summariser stopped writing the answer this memory was accepted from:
    always ``"end_turn"`` (no other answer becomes memory). None for a stub (no request
    was made) and for memories stored before provenance was kept."""
    request_hash: str | None = field(
        default=None,
        metadata=_rule(_is_optional_hash, "its request_hash is not 64 lowercase hex digits"),
    )
    """The SHA-256 of the canonical bytes of the memory request whose answer this memory
    is (:func:`~context_manager.summarizer.request_hash`): the rung or retry actually
    answered, not the first request. A stitched memory's is the SHA-256 of the JSON
    list of its parts' hashes, in order. None when :attr:`stop_reason` is."""
    model: str | None = field(
        default=None, metadata=_rule(_is_optional_text, "its model is not text")
    )
    """The model that wrote it, as the summariser named it in its answer
    (``Completion.model``; ``"extractive"`` for the extractive summariser), else the
    request's ``compression_model``. None when :attr:`stop_reason` is."""
    witnessed: bool = field(
        default=False,
        metadata=_rule(lambda v: isinstance(v, bool), "its witnessed flag is not true or false"),
    )
    """Written as inherited record: an L1 whose messages all precede
    ``witnessed_before_sequence``, or a memory over witnessed memories only (in the
    third person, attributing events to their participants). Stored only when true."""

    def __post_init__(self) -> None:
        # a list as read back from the store; anything but text is no value
        values = self.values if isinstance(self.values, list | tuple) else ()
        self.values = tuple(v for v in values if isinstance(v, str))

    @classmethod
    def problem_of(cls, body: Any) -> str | None:
        """Why a stored ``body`` cannot be read as a memory, or None.

        Examples
        --------
        >>> body = {"id": "L1-0", "level": 1, "content": "x", "tokens": 1,
        ...         "source_ids": ["m1"], "first": "m1", "last": "m1"}
        >>> SummaryEntry.problem_of(body) is None
        True
        >>> SummaryEntry.problem_of({**body, "level": 0})
        'its level 0 is not a whole number from 1'
        """
        return _problem(cls, body)

    @property
    def shown(self) -> str:
        """The memory's text as a context shows it: the prose, then its values' line.

        Examples
        --------
        >>> entry = SummaryEntry("", "L1-0", 1, "Booked a flight.", 4, ["m1"], "m1", "m1",
        ...                      values=("HAT123", "2024-05-20"))
        >>> print(entry.shown)
        Booked a flight.
        Exact values: HAT123; 2024-05-20
        """
        return with_values(self.content, self.values)

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "level": self.level,
            "content": self.content,
            "tokens": self.tokens,
            "source_ids": self.source_ids,
            "first": self.first,
            "last": self.last,
            "parent_id": self.parent_id,
            "created": self.created,
            "stub": self.stub,
            **({"stitched": True} if self.stitched else {}),
            **({"values": list(self.values)} if self.values else {}),
            **({"stop_reason": self.stop_reason} if self.stop_reason is not None else {}),
            **({"request_hash": self.request_hash} if self.request_hash is not None else {}),
            **({"model": self.model} if self.model is not None else {}),
            **({"witnessed": True} if self.witnessed else {}),
        }

    @property
    def provenance(self) -> Provenance | None:
        """How the memory was accepted (None for a stub or a memory stored before
        provenance was kept).

        Examples
        --------
        >>> entry = SummaryEntry("", "L1-0", 1, "Booked.", 2, ["m1"], "m1", "m1",
        ...                      stop_reason="end_turn", request_hash="0" * 64, model="m")
        >>> entry.provenance.model
        'm'
        """
        if self.stop_reason is None or self.request_hash is None or self.model is None:
            return None
        return Provenance(self.stop_reason, self.request_hash, self.model)


@dataclass(frozen=True)
class Provenance:
    """How a memory was accepted: the summariser's stop reason, the hash of the request
    it answered and the model that wrote it (the fields of :class:`SummaryEntry` of
    those names).

    Examples
    --------
    >>> Provenance("end_turn", "ab" * 32, "extractive").stop_reason
    'end_turn'
    """

    stop_reason: str
    request_hash: str
    model: str


class IgnoredPinWarning(UserWarning):
    """The store holds a pin no compile can take (a level out of range, ``max_level``
    below ``level``: written by an older version, which did not check them): it is left
    out of every compile until removed. The message names the pin and the fix
    (``ContextManager.unpin``)."""


@dataclass
class Pin:
    """A protected range of messages (raw, or held at / below a level)."""

    id: str
    first: str
    last: str
    name: str | None = None
    level: int | None = None
    max_level: int | None = None
    kind: str = "range"

    def problem(self) -> str | None:
        """Why no compile can take this pin (a field of the wrong type, a level out of
        range, ``max_level`` below ``level``), or None when it is sound.

        Examples
        --------
        >>> Pin("pin-1", "3", "5", level=2).problem() is None
        True
        >>> Pin("pin-2", "3", "5", level=-1).problem()
        'level must be an int from 0 to 1048576 (2**20), got -1 (int)'
        """
        try:
            for name in ("id", "first", "last", "kind"):
                check_text(getattr(self, name), name)
            if self.name is not None:
                check_text(self.name, "name")
            check_pin_levels(self.level, self.max_level)
        except ArgumentError as exc:
            return str(exc)
        return None


def frontier_runs(saved: Any, chunks: dict[str, list[str]]) -> list[tuple[str, str, int]]:
    """The runs ``(first id, last id, level)`` of a whole saved frontier.

    The whole form is ``{"runs": [[first, last, level], ...]}``; the older form, keyed
    by leaf id (a message, or a chunk id standing for the chunk's messages, given in
    ``chunks``), is read too. A change saved as a delta (:func:`is_frontier_delta`)
    needs the frontier before it: :func:`read_frontier` reads both.
    """
    if not saved:
        return []
    if is_frontier_delta(saved):
        raise ValueError("a frontier delta is read with read_frontier, not frontier_runs")
    if isinstance(saved, dict) and "runs" in saved:
        return [(str(f), str(t), int(v)) for f, t, v in saved["runs"]]
    out = []
    for key, level in saved.items():
        ids = chunks.get(key, [key])
        if level and ids:
            out.append((ids[0], ids[-1], int(level)))
    return out


def is_frontier_delta(saved: Any) -> bool:
    """True for a frontier saved as a change of the one before it:
    ``{"keep": k, "tail": [[first, last, level], ...]}`` is the first ``k`` runs of the
    previous frontier followed by ``tail``."""
    return isinstance(saved, dict) and "keep" in saved and "tail" in saved


FRONTIER_CHAIN = 16
"""At most this many saved frontiers are read to rebuild the current one: every
16th change at the latest is saved whole, and sooner once the deltas since the last
whole one hold as many runs as it does."""


def read_frontier(
    store: RecordStore, slot: str, chunks: dict[str, list[str]]
) -> tuple[list[tuple[str, str, int]] | None, int, int]:
    """The current frontier of ``slot`` as this branch sees it, from the newest whole
    snapshot and the deltas after it (at most :data:`FRONTIER_CHAIN` records read).

    Returns
    -------
    runs : list of (str, str, int) or None
        None when no frontier was ever committed.
    depth : int
        Deltas after the whole snapshot.
    delta_runs : int
        Runs those deltas carry.
    """
    limit = FRONTIER_CHAIN
    while True:
        saved = store.history(slot, limit)
        if not saved:
            return None, 0, 0
        base = next((k for k, (_, v) in enumerate(saved) if not is_frontier_delta(v)), None)
        if base is not None or len(saved) < limit:
            break
        limit *= 4  # a chain longer than this store writes (an older writer): read on
    deltas = saved[:base] if base is not None else saved
    runs = frontier_runs(saved[base][1], chunks) if base is not None else []
    carried = 0
    for _, delta in reversed(deltas):
        tail = [(str(f), str(t), int(v)) for f, t, v in delta["tail"]]
        runs = runs[: int(delta["keep"])] + tail
        carried += len(tail)
    return runs, len(deltas), carried


CHUNKS_SLOT = "autobio:chunks"
"""The slot of the chunk records (under the strategy's namespace)."""
SUMMARIES_SLOT = "autobio:summaries"
"""The slot of the memories (under the strategy's namespace)."""
_PINS = "autobio:pins"
_CAPS = "autobio:caps"
_LOCKS = "autobio:locks"
_FRONTIER = "autobio:resolutions"
_COUNTER = "autobio:counter"
_LEDGER = "autobio:refusal-ledger"
_MERGE_ATTEMPTS = "autobio:merge-attempts"
_CHUNK_ATTEMPTS = "autobio:chunk-attempts"
CHUNK_COUNTER_SLOT = "autobio:chunk-counter"
"""The slot of the number the next chunk id takes."""
_REFOLDED = "autobio:refolded"


@dataclass
class Records:
    """Everything the strategy persists on one branch, as read from the store.

    The fields are the in-memory form; the methods write through to the store (each
    write one transaction) and then update the fields, so a failed write changes
    nothing in memory either.
    """

    summaries: dict[str, SummaryEntry]
    """Memories with content, by id."""
    chunks: list[ChunkRecord]
    pins: list[Pin]
    """Every pin stored, those no compile can take (:meth:`Pin.problem`) included, so
    :meth:`remove_pin` removes them; compiles read :attr:`sound_pins`."""
    pin_counter: int
    locks: set[str]
    runs: list[tuple[str, str, int]]
    """The committed frontier (:func:`frontier_runs`): runs ``(first id, last id,
    level)`` of messages shown at a level above 0, oldest first."""
    compiled: bool
    """A live compile has committed a frontier (an all-raw one included)."""
    merge_attempts: dict[str, int]
    chunk_attempts: dict[str, int]
    exhausted: dict[str, set[str]]
    """Chunk id -> hashes of request shapes refused in every variant."""
    chunk_counter: int = 0
    """The number the next chunk id takes (ids are never reused, removals included)."""
    revision: int = 0
    """Bumped whenever a chunk record changes or goes (appends do not bump it)."""
    frontier_depth: int = 0
    """Frontier deltas saved since the last whole frontier (:func:`read_frontier`)."""
    frontier_delta_runs: int = 0
    """Runs those deltas carry."""
    caps: dict[str, int] = field(default_factory=dict)
    """The tool-result caps the last live compile sent, by message id (the cap, in
    tokens, of that message's results), under the input budget :attr:`caps_budget`."""
    caps_budget: int = 0
    refolded: frozenset[str] = frozenset()
    """Memories a refold was made for (:meth:`unfold` with ``refolding``): each is
    refolded for once, so merges that leave it alone again cannot start a cycle."""
    store: RecordStore | None = field(default=None, repr=False, compare=False)
    slot: Callable[[str], str] = field(default=str, repr=False, compare=False)

    @classmethod
    def empty(cls) -> Records:
        """No records, and no store to write to (before the strategy is initialised)."""
        return cls({}, [], [], 0, set(), [], False, {}, {}, {})

    def _store(self) -> RecordStore:
        if self.store is None:
            raise RuntimeError("the strategy is not initialised: no store to write to")
        return self.store

    # ---------------------------------------------------------------- chunks
    def add_chunk(self, ids: Sequence[str], *, summary_id: str | None = None) -> ChunkRecord:
        """Close a chunk over ``ids`` (already compressed when ``summary_id`` names the
        memory written for it)."""
        store = self._store()
        n = self.chunk_counter
        record = ChunkRecord("", f"c-{n}", list(ids), summary_id is not None, summary_id)
        with store.transaction():
            record.item = store.append(self.slot(CHUNKS_SLOT), record.body()).id
            store.set(self.slot(CHUNK_COUNTER_SLOT), n + 1)
        self.chunks.append(record)
        self.chunk_counter = n + 1
        return record

    def forget(self, removed: Sequence[str]) -> None:
        """Messages ``removed`` from the record: memories over any of them are dropped
        (with every memory above them; their other children are parentless again),
        and each chunk that held one keeps its other messages, to be remembered again
        (a chunk left with none is retired). One transaction."""
        gone = set(removed)
        summaries = self.summaries
        below: dict[str, str] = {}  # child -> parent, over the memories in memory
        for s in summaries.values():
            if s.level > 1:
                for child in s.source_ids:
                    below[child] = s.id
        dropped: set[str] = set()

        def drop(summary_id: str) -> None:
            while summary_id in summaries and summary_id not in dropped:
                dropped.add(summary_id)
                summary_id = below.get(summary_id, "")

        for s in summaries.values():
            if s.level == 1 and gone.intersection(s.source_ids):
                drop(s.id)
        freed = [
            s
            for s in summaries.values()
            if s.id not in dropped and s.parent_id is not None and s.parent_id in dropped
        ]
        touched = [c for c in self.chunks if gone.intersection(c.source_ids)]
        touched += [c for c in self.chunks if c.summary_id in dropped and c not in touched]
        if not dropped and not touched:
            return
        store = self._store()
        kept_chunks: dict[str, ChunkRecord | None] = {}
        with store.transaction():
            for summary_id in sorted(dropped):
                store.redact(self.slot(SUMMARIES_SLOT), summaries[summary_id].item)
            for s in freed:
                store.edit(self.slot(SUMMARIES_SLOT), s.item, {**s.body(), "parent_id": None})
            for c in touched:
                survivors = [i for i in c.source_ids if i not in gone]
                if not survivors:
                    store.redact(self.slot(CHUNKS_SLOT), c.item)
                    kept_chunks[c.id] = None
                    continue
                again = ChunkRecord(c.item, c.id, survivors)
                store.edit(self.slot(CHUNKS_SLOT), c.item, again.body())
                kept_chunks[c.id] = again
            attempts = {k: v for k, v in self.chunk_attempts.items() if k not in kept_chunks}
            if attempts != self.chunk_attempts:
                store.set(self.slot(_CHUNK_ATTEMPTS), attempts)
        for summary_id in dropped:
            del summaries[summary_id]
        for s in freed:
            s.parent_id = None
        chunks = [kept_chunks.get(c.id, c) for c in self.chunks]
        self.chunks = [c for c in chunks if c is not None]
        self.chunk_attempts = attempts
        self.revision += 1
        for chunk_id in kept_chunks:
            self.exhausted.pop(chunk_id, None)

    def unfold(self, ids: Sequence[str], *, refolding: str | None = None) -> None:
        """Drop the memories ``ids`` (each parentless, or the child of another of them):
        their other children are parentless again, to be merged anew, and the chunk of
        a dropped L1 is to be remembered again. One transaction.

        The writer unfolds a memory beside one that no longer has siblings of its level
        (:func:`~.writer.refold`): a removal or a hold can leave such a memory alone
        between higher ones, where no merge of one level ever reaches it. It unfolds a
        memory over ``summary_max_tokens`` to write it again (:func:`~.writer.overlong`).
        ``refolding`` names the memory left alone a refold is for: it joins
        :attr:`refolded`, in the same transaction (forgetting memories gone since)."""
        summaries = self.summaries
        dropped = set(ids)
        for summary_id in ids:
            parent = summaries[summary_id].parent_id
            if parent is not None and parent not in dropped:
                raise ValueError(f"{summary_id} has a parent ({parent}) that is not unfolded")
        freed = [
            summaries[c]
            for summary_id in ids
            for c in summaries[summary_id].source_ids
            if summaries[summary_id].level > 1 and c in summaries and c not in dropped
        ]
        again = {
            c.id: ChunkRecord(c.item, c.id, c.source_ids)
            for c in self.chunks
            if c.summary_id is not None and c.summary_id in dropped
        }
        store = self._store()
        with store.transaction():
            for summary_id in sorted(dropped):
                store.redact(self.slot(SUMMARIES_SLOT), summaries[summary_id].item)
            for child in freed:
                store.edit(
                    self.slot(SUMMARIES_SLOT), child.item, {**child.body(), "parent_id": None}
                )
            for chunk in again.values():
                store.edit(self.slot(CHUNKS_SLOT), chunk.item, chunk.body())
            refolded = self.refolded
            if refolding is not None:
                live = set(summaries) - dropped
                refolded = frozenset(i for i in (*self.refolded, refolding) if i in live)
                store.set(self.slot(_REFOLDED), sorted(refolded))
        self.refolded = refolded
        for summary_id in dropped:
            del summaries[summary_id]
        for child in freed:
            child.parent_id = None
        self.chunks = [again.get(c.id, c) for c in self.chunks]
        self.revision += 1

    def count_chunk_attempt(self, chunk: ChunkRecord) -> None:
        """One more unacceptable answer for ``chunk``."""
        attempts = {**self.chunk_attempts, chunk.id: self.chunk_attempts.get(chunk.id, 0) + 1}
        self._store().set(self.slot(_CHUNK_ATTEMPTS), attempts)
        self.chunk_attempts = attempts

    def note_exhausted(self, chunk: ChunkRecord, shape: str) -> None:
        """Every variant of ``chunk``'s request of this ``shape`` was refused (it counts
        as an attempt too)."""
        store = self._store()
        attempts = {**self.chunk_attempts, chunk.id: self.chunk_attempts.get(chunk.id, 0) + 1}
        with store.transaction():
            event = {"event": "exhausted", "chunk": chunk.id, "shape": shape}
            store.append(self.slot(_LEDGER), event)
            store.set(self.slot(_CHUNK_ATTEMPTS), attempts)
        self.chunk_attempts = attempts
        self.exhausted.setdefault(chunk.id, set()).add(shape)

    def count_merge_attempt(self, ids: Sequence[str]) -> None:
        """One more unacceptable answer for the merge of ``ids``."""
        key = "+".join(ids)
        attempts = {**self.merge_attempts, key: self.merge_attempts.get(key, 0) + 1}
        self._store().set(self.slot(_MERGE_ATTEMPTS), attempts)
        self.merge_attempts = attempts

    def clear_verdicts(self) -> int:
        """Forget every attempt count and refusal ledger entry, so work given up on is
        tried again; returns how many chunks and merges were given up on or counted."""
        store = self._store()
        ledger = store.items(self.slot(_LEDGER))
        freed = len(self.chunk_attempts) + len(self.merge_attempts)
        freed += len(set(self.exhausted) - set(self.chunk_attempts))
        with store.transaction():
            for it in ledger:
                store.redact(self.slot(_LEDGER), it.id)
            store.set(self.slot(_CHUNK_ATTEMPTS), {})
            store.set(self.slot(_MERGE_ATTEMPTS), {})
            if self.refolded:
                store.set(self.slot(_REFOLDED), [])
        self.chunk_attempts, self.merge_attempts, self.exhausted = {}, {}, {}
        self.refolded = frozenset()
        return freed

    # ------------------------------------------------------------- memories
    def _next_summary_id(self, level: int) -> str:
        store = self._store()
        counter = int(store.get(self.slot(_COUNTER), 0))
        while f"L{level}-{counter}" in self.summaries:  # a counter older than its memories
            counter += 1
        store.set(self.slot(_COUNTER), counter + 1)
        return f"L{level}-{counter}"

    def add_l1(
        self,
        chunk: ChunkRecord,
        content: str,
        *,
        tokens: int = 0,
        stub: bool = False,
        stitched: bool = False,
        values: Sequence[str] = (),
        provenance: Provenance | None = None,
        witnessed: bool = False,
    ) -> SummaryEntry:
        """The memory of ``chunk``, stored with the chunk marked compressed (with its
        exact ``values``, its ``provenance`` and its ``witnessed`` flag)."""
        store = self._store()
        with store.transaction():
            summary = SummaryEntry(
                item="",
                id=self._next_summary_id(1),
                level=1,
                content=content,
                tokens=tokens or math.ceil(len(content) / 3),
                source_ids=list(chunk.source_ids),
                first=chunk.source_ids[0],
                last=chunk.source_ids[-1],
                stub=stub,
                stitched=stitched,
                values=tuple(values),
                stop_reason=provenance.stop_reason if provenance else None,
                request_hash=provenance.request_hash if provenance else None,
                model=provenance.model if provenance else None,
                witnessed=witnessed,
            )
            summary.item = store.append(self.slot(SUMMARIES_SLOT), summary.body()).id
            body = {**chunk.body(), "compressed": True, "summary_id": summary.id}
            store.edit(self.slot(CHUNKS_SLOT), chunk.item, body)
        chunk.compressed, chunk.summary_id = True, summary.id
        self.summaries[summary.id] = summary
        return summary

    def add_parent(
        self,
        sources: Sequence[SummaryEntry],
        content: str,
        tokens: int,
        *,
        values: Sequence[str] = (),
        provenance: Provenance | None = None,
    ) -> SummaryEntry:
        """The memory one level above ``sources`` (contiguous, parentless, one level),
        stored with their parent pointers (and its exact ``values`` and
        ``provenance``); witnessed when every source is."""
        store = self._store()
        level = sources[0].level + 1
        with store.transaction():
            parent = SummaryEntry(
                item="",
                id=self._next_summary_id(level),
                level=level,
                content=content,
                tokens=tokens or math.ceil(len(content) / 3),
                source_ids=[s.id for s in sources],
                first=sources[0].first,
                last=sources[-1].last,
                values=tuple(values),
                stop_reason=provenance.stop_reason if provenance else None,
                request_hash=provenance.request_hash if provenance else None,
                model=provenance.model if provenance else None,
                witnessed=all(s.witnessed for s in sources),
            )
            parent.item = store.append(self.slot(SUMMARIES_SLOT), parent.body()).id
            for s in sources:
                store.edit(self.slot(SUMMARIES_SLOT), s.item, {**s.body(), "parent_id": parent.id})
        for s in sources:
            s.parent_id = parent.id
        self.summaries[parent.id] = parent
        return parent

    # --------------------------------------------------------- pins and locks
    @property
    def sound_pins(self) -> list[Pin]:
        """The pins a compile takes: every pin but those with a :meth:`Pin.problem`
        (written by an older version; :func:`read_records` warned of each)."""
        return [p for p in self.pins if p.problem() is None]

    def add_pin(
        self,
        first: str,
        last: str,
        *,
        name: str | None = None,
        level: int | None = None,
        max_level: int | None = None,
        kind: str = "range",
    ) -> Pin:
        """A new pin over ``first..last``."""
        pin = Pin(f"pin-{self.pin_counter + 1}", first, last, name, level, max_level, kind)
        self._save_pins([*self.pins, pin], self.pin_counter + 1)
        return pin

    def remove_pin(self, pin_id: str) -> bool:
        """Remove a pin; False when it does not exist."""
        kept = [p for p in self.pins if p.id != pin_id]
        if len(kept) == len(self.pins):
            return False
        self._save_pins(kept, self.pin_counter)
        return True

    def _save_pins(self, pins: list[Pin], counter: int) -> None:
        body = {"pins": [p.__dict__ for p in pins], "counter": counter}
        self._store().set(self.slot(_PINS), body)
        self.pins, self.pin_counter = pins, counter

    def set_lock(self, message_id: str, locked: bool) -> None:
        """Lock or unlock one message."""
        locks = self.locks | {message_id} if locked else self.locks - {message_id}
        self._store().set(self.slot(_LOCKS), sorted(locks))
        self.locks = locks

    # --------------------------------------------------------------- frontier
    def commit_caps(self, caps: dict[str, int], budget: int) -> None:
        """The caps a live compile sent under the input ``budget`` (written only when
        they changed)."""
        if caps == self.caps and (budget == self.caps_budget or not caps):
            return
        self._store().set(self.slot(_CAPS), {"budget": budget, "caps": caps})
        self.caps, self.caps_budget = dict(caps), budget

    def commit_frontier(self, runs: list[tuple[str, str, int]]) -> None:
        """The frontier a live compile sent (written only when it changed).

        A change is saved as a delta (the runs kept from the previous frontier, then
        the new tail), so what a commit writes grows with what changed; the frontier is
        saved whole again every :data:`FRONTIER_CHAIN` changes, or sooner once the
        deltas since the last whole one carry as many runs as it has, so reading it
        back takes a bounded number of records."""
        if runs == self.runs and self.compiled:
            return
        keep = 0
        if self.compiled:
            limit = min(len(runs), len(self.runs))
            while keep < limit and runs[keep] == self.runs[keep]:
                keep += 1
        tail = runs[keep:]
        carried = self.frontier_delta_runs + len(tail)
        whole = (
            not self.compiled
            or keep == 0
            or self.frontier_depth + 1 >= FRONTIER_CHAIN
            or carried >= len(runs)
        )
        if whole:
            body: dict[str, Any] = {"runs": [list(r) for r in runs]}
        else:
            body = {"keep": keep, "tail": [list(r) for r in tail]}
        self._store().set(self.slot(_FRONTIER), body)
        self.runs, self.compiled = runs, True
        self.frontier_depth, self.frontier_delta_runs = (
            (0, 0)
            if whole
            else (
                self.frontier_depth + 1,
                carried,
            )
        )


def read_records(store: RecordStore, slot: Callable[[str], str]) -> Records:
    """Read the strategy's records; ``slot`` names a slot in its namespace
    (``lambda name: f"{namespace}/{name}"``)."""
    summaries: dict[str, SummaryEntry] = {}
    for it in store.items(slot(SUMMARIES_SLOT)):
        with _reading(store, slot(SUMMARIES_SLOT), it):
            body = dict(it.body)
            if isinstance(body.get("content"), str) and body["content"].strip():
                entry = SummaryEntry(item=it.id, **body)
                if entry.id in summaries:
                    raise ValueError(f"a second memory {entry.id!r}")
                summaries[entry.id] = entry
    chunks: list[ChunkRecord] = []
    chunk_ids: set[str] = set()
    for it in store.items(slot(CHUNKS_SLOT)):
        with _reading(store, slot(CHUNKS_SLOT), it):
            chunk = ChunkRecord(item=it.id, **dict(it.body))
            if chunk.id in chunk_ids:
                raise ValueError(f"a second chunk {chunk.id!r}")
            chunk_ids.add(chunk.id)
            chunks.append(chunk)
    exhausted: dict[str, set[str]] = {}
    for it in store.items(slot(_LEDGER)):
        with _reading(store, slot(_LEDGER), it):
            exhausted.setdefault(str(it.body["chunk"]), set()).add(str(it.body["shape"]))
    try:
        runs, depth, carried = read_frontier(
            store, slot(_FRONTIER), {c.id: c.source_ids for c in chunks}
        )
        pins = store.get(slot(_PINS), {"pins": [], "counter": 0})
        caps = store.get(slot(_CAPS), {"budget": 0, "caps": {}})
        pinned = [Pin(**p) for p in pins["pins"]]
        _warn_ignored(pinned, slot(_PINS))
        return Records(
            summaries=summaries,
            chunks=chunks,
            pins=pinned,
            pin_counter=int(pins["counter"]),
            locks=set(store.get(slot(_LOCKS), [])),
            runs=runs or [],
            compiled=runs is not None,
            merge_attempts=dict(store.get(slot(_MERGE_ATTEMPTS), {})),
            chunk_attempts=dict(store.get(slot(_CHUNK_ATTEMPTS), {})),
            exhausted=exhausted,
            # never below the chunks it numbered: a counter that went back reuses no id
            chunk_counter=max(
                int(store.get(slot(CHUNK_COUNTER_SLOT), 0)), next_chunk_number(chunks)
            ),
            frontier_depth=depth,
            frontier_delta_runs=carried,
            caps={str(k): int(v) for k, v in dict(caps["caps"]).items()},
            caps_budget=int(caps["budget"]),
            refolded=frozenset(str(i) for i in store.get(slot(_REFOLDED), [])),
            store=store,
            slot=slot,
        )
    except StoreCorruptError:
        raise
    except (TypeError, KeyError, ValueError, AttributeError, IndexError) as exc:
        where = f"the strategy records under {slot('')!r} (pins, locks, frontier or counters)"
        raise damaged(store.path, where, f"{type(exc).__name__}: {exc}") from None


def _warn_ignored(pins: Sequence[Pin], where: str) -> None:
    """Warn of each stored pin no compile can take (:class:`IgnoredPinWarning`)."""
    for pin in pins:
        problem = pin.problem()
        if problem is not None:
            warnings.warn(
                f"pin {pin.id!r} in {where!r} is ignored by every compile ({problem}); "
                f"remove it with ContextManager.unpin({pin.id!r}) and pin the range again "
                "with valid levels",
                IgnoredPinWarning,
                stacklevel=2,
            )


@contextmanager
def _reading(store: RecordStore, slot: str, item: Item) -> Iterator[None]:
    """Read ``item`` of ``slot``: a body that makes no record is damage, named."""
    try:
        yield
    except StoreCorruptError:
        raise
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        what = " ".join(str(exc).splitlines()[:2])
        where = f"table records, row {item.rev} (item {item.id} of {slot!r}), column body"
        raise damaged(store.path, where, f"not a record: {what}") from None


def next_chunk_number(chunks: Sequence[ChunkRecord]) -> int:
    """One past the highest ``c-N`` id (stores written before the counter was kept)."""
    numbers = [int(c.id[2:]) for c in chunks if c.id.startswith("c-") and c.id[2:].isdigit()]
    return max(numbers, default=-1) + 1
