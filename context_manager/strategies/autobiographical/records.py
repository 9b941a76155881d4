"""What the strategy persists: chunk records, memories, pins and the committed frontier.

Each is one slot of the store under the strategy's namespace (``autobio:chunks``,
``autobio:summaries``, ``autobio:pins``, ``autobio:resolutions``); the classes here
are their in-memory form and :func:`frontier_runs` reads the saved frontier, so
tools such as ``ctxfold inspect`` read the records through this module.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...store import Store

__all__ = ["ChunkRecord", "Pin", "Records", "SummaryEntry", "frontier_runs", "read_records"]


@dataclass
class ChunkRecord:
    """A closed run of messages that becomes one L1 memory."""

    item: str
    id: str
    source_ids: list[str]
    compressed: bool = False
    summary_id: str | None = None

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source_ids": self.source_ids,
            "compressed": self.compressed,
            "summary_id": self.summary_id,
        }


@dataclass
class SummaryEntry:
    """A memory: L1 over a chunk's messages, L_k over L_{k-1} memories."""

    item: str
    id: str
    level: int
    content: str
    tokens: int
    source_ids: list[str]
    first: str
    last: str
    parent_id: str | None = None
    created: float = field(default_factory=time.time)
    stub: bool = False

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
        }


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


def frontier_runs(saved: Any, chunks: dict[str, list[str]]) -> list[tuple[str, str, int]]:
    """The runs ``(first id, last id, level)`` of a saved frontier.

    The saved form is ``{"runs": [[first, last, level], ...]}``; the older form, keyed
    by leaf id (a message, or a chunk id standing for the chunk's messages, given in
    ``chunks``), is read too.
    """
    if not saved:
        return []
    if isinstance(saved, dict) and "runs" in saved:
        return [(str(f), str(t), int(v)) for f, t, v in saved["runs"]]
    out = []
    for key, level in saved.items():
        ids = chunks.get(key, [key])
        if level and ids:
            out.append((ids[0], ids[-1], int(level)))
    return out


@dataclass
class Records:
    """Everything the strategy persists on one branch, as read from the store."""

    summaries: dict[str, SummaryEntry]
    """Memories with content, by id."""
    chunks: list[ChunkRecord]
    pins: list[Pin]
    pin_counter: int
    locks: set[str]
    runs: list[tuple[str, str, int]]
    """The committed frontier (:func:`frontier_runs`)."""
    compiled: bool
    """A live compile has committed a frontier (an all-raw one included)."""
    merge_attempts: dict[str, int]
    chunk_attempts: dict[str, int]
    exhausted: dict[str, set[str]]
    """Chunk id -> hashes of request shapes refused in every variant."""


def read_records(store: Store, slot: Callable[[str], str]) -> Records:
    """Read the strategy's records; ``slot`` names a slot in its namespace
    (``lambda name: f"{namespace}/{name}"``)."""
    summaries = {}
    for it in store.items(slot("autobio:summaries")):
        body = dict(it.body)
        if body.get("content", "").strip():
            summaries[body["id"]] = SummaryEntry(item=it.id, **body)
    chunks = [ChunkRecord(item=it.id, **it.body) for it in store.items(slot("autobio:chunks"))]
    pins = store.get(slot("autobio:pins"), {"pins": [], "counter": 0})
    saved = store.get(slot("autobio:resolutions"))
    exhausted: dict[str, set[str]] = {}
    for it in store.items(slot("autobio:refusal-ledger")):
        exhausted.setdefault(it.body["chunk"], set()).add(it.body["shape"])
    return Records(
        summaries=summaries,
        chunks=chunks,
        pins=[Pin(**p) for p in pins["pins"]],
        pin_counter=int(pins["counter"]),
        locks=set(store.get(slot("autobio:locks"), [])),
        runs=frontier_runs(saved, {c.id: c.source_ids for c in chunks}),
        compiled=saved is not None,
        merge_attempts=dict(store.get(slot("autobio:merge-attempts"), {})),
        chunk_attempts=dict(store.get(slot("autobio:chunk-attempts"), {})),
        exhausted=exhausted,
    )
