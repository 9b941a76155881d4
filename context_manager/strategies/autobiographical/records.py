"""What the strategy persists: chunk records, memories, pins and the committed frontier.

Each is one slot of the store under the strategy's namespace (``autobio:chunks``,
``autobio:summaries``, ``autobio:pins``, ``autobio:resolutions``); the classes here
are their in-memory form and :func:`frontier_runs` reads the saved frontier, so
tools such as ``ctxfold inspect`` read the records through this module.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChunkRecord", "Pin", "SummaryEntry", "frontier_runs"]


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
