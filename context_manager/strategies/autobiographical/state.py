"""What one strategy holds between calls: its records, its queues, and views over them.

Every other module of the package is functions of a :class:`State` and the
manager's :class:`~context_manager.strategies.base.StrategyContext`; the state is
the one place their shared memory lives.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Any

from ...deadline import BoundedCaller
from ...messages import Message, TextBlock, ToolUseBlock
from ..base import Entry, StoredMessage, StrategyContext
from .config import AutobiographicalConfig
from .prompts import CONTEXT_MANAGER
from .records import Records, SummaryEntry

__all__ = ["TOOLS", "State", "with_tools"]

TOOLS = "{tools}"
"""The placeholder of a recall question for the tools called in the memory's span."""

_ASIDE = re.compile(r"\s*\([^()]*\{tools\}[^()]*\)")
_BEFORE = re.compile(r"[\s,;:\u2013\u2014-]*\{tools\}")
_AFTER = re.compile(r"^\s*\{tools\}[\s,;:\u2013\u2014-]*")
_FALLBACK = "What do you remember from earlier?"


def with_tools(text: str, tools: Sequence[str]) -> str:
    """``text`` with each ``{tools}`` replaced by ``tools`` joined by ``", "``.

    With no tools, the placeholder goes with what only frames it: a parenthetical
    holding it (``"(tools: {tools})"``) goes whole, else the separators before it
    (whitespace, ``,;:`` and dashes), or after it at the start of the text; a text
    left empty falls back to the default label.

    Examples
    --------
    >>> with_tools("What do you remember? (tools: {tools})", ["bash", "grep"])
    'What do you remember? (tools: bash, grep)'
    >>> with_tools("What do you remember? (tools: {tools})", [])
    'What do you remember?'
    >>> with_tools("{tools}: what do you remember?", [])
    'what do you remember?'
    """
    if TOOLS not in text:
        return text
    if tools:
        return text.replace(TOOLS, ", ".join(tools))
    out = _BEFORE.sub("", _AFTER.sub("", _ASIDE.sub("", text)))
    out = re.sub(r"[ \t]{2,}", " ", out).strip()
    return out or _FALLBACK


class State:
    """The records of one branch, the work a compile asked for, and caches.

    Parameters
    ----------
    config : AutobiographicalConfig
    records : Records
        As read by :func:`~.records.read_records` (or :meth:`Records.empty`).
    """

    def __init__(self, config: AutobiographicalConfig, records: Records) -> None:
        self.config = config
        self.records = records
        self.demanded_chunks: set[str] = set()
        """Chunks a compile asked to compress before the holdback would allow."""
        self.demanded_merges: list[list[str]] = []
        """Merges a compile asked for, oldest request first."""
        self.yielding: set[str] = set()
        """Merges (``+``-joined memory ids) whose last attempt failed and that have not let
        a chunk go first since (:meth:`merge_failed`, :meth:`chunk_went`). Held in memory
        only: after a reopen every merge competes at once."""
        self.failed_closed = False
        """Compression stopped because chunk records name no live message."""
        self.calls = 0
        """Summariser calls made through this state."""
        self.caller = BoundedCaller("context-summarizer")
        """The one worker summariser calls run on, each under its deadline."""
        self.backoff: dict[str, tuple[int, float]] = {}
        """Work key (a chunk id, or ``+``-joined memory ids) -> (failures in a row, the
        clock time before which it is not retried): after errors, not verdicts."""
        self.cache: dict[tuple[Any, ...], Any] = {}
        """Derived values keyed by what they depend on (recall pairs, spans, specs, and
        the adapter's own entries)."""
        self._positions: tuple[dict[str, int], int] = ({}, -1)
        self._owned: tuple[set[str], int, int] = (set(), 0, records.revision)
        self.orphan_check: tuple[tuple[int, int, int, int], bool] = ((-1, -1, -1, 0), False)
        """(version, records counted, records revision, orphans among them), and the answer."""
        """``((version, chunk count), answer)`` of the last orphan check."""

    @property
    def summaries(self) -> dict[str, SummaryEntry]:
        """The memories, by id."""
        return self.records.summaries

    def carry_over(self, old: State) -> None:
        """Keep what belongs to the process, not the branch: the call count, the worker
        (with any abandoned call still on it) and the backoff."""
        self.calls, self.caller, self.backoff = old.calls, old.caller, old.backoff

    def waiting(self, ctx: StrategyContext, key: str) -> bool:
        """Work ``key`` is backing off after a failed call."""
        entry = self.backoff.get(key)
        return entry is not None and ctx.clock() < entry[1]

    def failed(self, ctx: StrategyContext, key: str) -> None:
        """A call for work ``key`` failed without an answer: back off, doubling."""
        failures = self.backoff.get(key, (0, 0.0))[0] + 1
        wait = min(3600.0, self.config.retry_backoff_seconds * 2 ** (failures - 1))
        self.backoff[key] = (failures, ctx.clock() + wait)

    def merge_failed(self, key: str) -> None:
        """The attempt at merge ``key`` failed (an answer that is not memory, or none): it
        lets the next chunk go before it competes again."""
        self.yielding.add(key)

    def chunk_went(self) -> None:
        """A tick worked on a chunk: every merge that was yielding competes again."""
        self.yielding.clear()

    def yields(self, key: str) -> bool:
        """Merge ``key`` failed last time and no chunk has gone since."""
        return key in self.yielding

    # --------------------------------------------------------------- messages
    def positions(self, ctx: StrategyContext, stored: Sequence[StoredMessage]) -> dict[str, int]:
        """Message id -> index in ``stored`` (kept across calls, extended on appends)."""
        index, version = self._positions
        if version != ctx.version() or len(index) > len(stored):
            index = {}  # an edit, a removal or a branch switch: rebuild
        for i in range(len(index), len(stored)):
            index[stored[i].id] = i
        self._positions = (index, ctx.version())
        return index

    def owned_ids(self) -> set[str]:
        """Messages some chunk record owns (records only ever grow)."""
        chunks = self.records.chunks
        owned, count, revision = self._owned
        if count != len(chunks) or revision != self.records.revision:
            if count > len(chunks) or revision != self.records.revision:
                owned, count = set(), 0  # a record changed or went: recount
            for c in chunks[count:]:
                owned.update(c.source_ids)
            self._owned = (owned, len(chunks), self.records.revision)
        return owned

    # ------------------------------------------------------------ memory tree
    def leaves_of(self, summary: SummaryEntry) -> list[str]:
        """Message ids a summary covers."""
        if summary.level == 1:
            return list(summary.source_ids)
        out: list[str] = []
        for child in summary.source_ids:
            if child in self.summaries:
                out.extend(self.leaves_of(self.summaries[child]))
        return out

    def span_size(self, summary: SummaryEntry) -> int:
        """Number of messages a summary covers (cached)."""
        key = ("size", summary.id)
        size = self.cache.get(key)
        if size is None:
            size = self.cache[key] = len(self.leaves_of(summary))
        return int(size)

    def frontier_summaries(self) -> list[SummaryEntry]:
        """Summaries with no parent (kept until a memory is added or dropped)."""
        key = (self.records.revision, len(self.summaries))
        kept = self.cache.get(("parentless",))
        if kept is None or kept[0] != key:
            kept = self.cache[("parentless",)] = (
                key,
                [s for s in self.summaries.values() if s.parent_id is None],
            )
        return [s for s in kept[1] if s.parent_id is None]

    def represented_ids(self) -> set[str]:
        """Messages some L1 memory covers (kept: memories are only added, in order,
        until a record changes or goes). Do not change the set."""
        summaries = self.summaries
        kept = self.cache.get(("represented",))
        if kept is None or kept[0] != self.records.revision or kept[1] > len(summaries):
            kept = (self.records.revision, 0, set())
        seen: int = kept[1]
        ids: set[str] = kept[2]
        added = len(summaries) - seen
        if added:
            for x in itertools.islice(reversed(summaries.values()), added):
                if x.level == 1:
                    ids.update(x.source_ids)
        self.cache[("represented",)] = (self.records.revision, len(summaries), ids)
        return ids

    def open_chunks(self, ctx: StrategyContext) -> list[Any]:
        """Chunk records not compressed yet, in order (kept across calls: appends only
        add records, and a compressed one stays compressed until a record changes)."""
        chunks = self.records.chunks
        key = (ctx.version(), self.records.revision)
        kept = self.cache.get(("open-chunks",))
        if kept is None or kept[0] != key or kept[1] > len(chunks):
            kept = (key, 0, [])
        _, done, pending = kept
        pending = [c for c in pending if not c.compressed]
        pending.extend(c for c in chunks[done:] if not c.compressed)
        self.cache[("open-chunks",)] = (key, len(chunks), pending)
        return list(pending)

    # ---------------------------------------------------------- recall pairs
    def uses_tools(self) -> bool:
        """The recall question names the tools of each memory's span (``{tools}``)."""
        cfg = self.config
        label = cfg.summary_context_label if cfg.adaptive_resolution else cfg.recall_header_template
        return TOOLS in label

    def tools_of(self, ctx: StrategyContext | None, summary: SummaryEntry) -> tuple[str, ...]:
        """The names of the tools called in the messages ``summary`` covers, in the order
        first called, each once (kept per memory until a message is edited or removed or
        the branch switches). Without ``ctx``: the names last found, or none."""
        key = ("tools", summary.id)
        kept = self.cache.get(key)
        if ctx is None:
            return () if kept is None else tuple(kept[1])
        if kept is not None and kept[0] == ctx.version():
            return tuple(kept[1])
        stored = ctx.messages()
        position = self.positions(ctx, stored)
        names: dict[str, None] = {}
        for mid in self.leaves_of(summary):
            at = position.get(mid)
            if at is None:
                continue
            for block in stored[at].message.content:
                if isinstance(block, ToolUseBlock):
                    names.setdefault(block.name, None)
        found = tuple(names)
        self.cache[key] = (ctx.version(), found)
        return found

    def recall_header(self, summary: SummaryEntry, ctx: StrategyContext | None = None) -> str:
        """The question of ``summary``'s recall pair in a compiled context: on the
        adaptive path ``summary_context_label``, else ``recall_header_template`` (with
        ``{id}``, ``{level}``, ``{first}`` and ``{last}``); in either, ``{tools}`` names
        the tools called in the messages the memory covers (:meth:`tools_of`, and
        :func:`with_tools` for a memory without any)."""
        cfg = self.config
        if not self.uses_tools():
            if cfg.adaptive_resolution:
                return cfg.summary_context_label
            return cfg.recall_header_template.format(
                id=summary.id, level=summary.level, first=summary.first, last=summary.last
            )
        tools = self.tools_of(ctx, summary)
        if cfg.adaptive_resolution:
            # replaced, not formatted: the label is free text and may hold other braces
            return with_tools(cfg.summary_context_label, tools)
        header = cfg.recall_header_template.format(
            id=summary.id, level=summary.level, first=summary.first, last=summary.last, tools=TOOLS
        )
        return with_tools(header, tools)

    def recall_pair(
        self, summary: SummaryEntry, ctx: StrategyContext | None = None
    ) -> tuple[Entry, Entry]:
        """The question and answer that show ``summary`` in a context (cached per content
        and question): the answer is the memory's prose, then the line of its exact
        values (:attr:`~.records.SummaryEntry.shown`). Give ``ctx`` when the question
        may name the span's tools."""
        header = self.recall_header(summary, ctx)
        key = ("recall", summary.id, summary.content, summary.values, header)
        cached = self.cache.get(key)
        if cached is None:
            label = (TextBlock(text=header),)
            body = (TextBlock(text=summary.shown),)
            question = Entry(
                CONTEXT_MANAGER,
                label,
                (),
                summary.id,
                Message(participant=CONTEXT_MANAGER, content=label),
            )
            answer = Entry(
                self.config.summary_participant,
                body,
                tuple(self.leaves_of(summary)),
                summary.id,
                Message(participant=self.config.summary_participant, content=body),
            )
            cached = self.cache[key] = (question, answer)
        return cached

    def recall_tokens(self, ctx: StrategyContext, summary: SummaryEntry) -> int:
        """The one price of a recall pair (its values' line included): used by the solver
        and the renderer alike."""
        header = self.recall_header(summary, ctx)
        key = ("recall-tokens", summary.id, summary.content, summary.values, header)
        tokens = self.cache.get(key)
        if tokens is None:
            q, a = self.recall_pair(summary, ctx)
            count = ctx.counter.count_message
            tokens = self.cache[key] = count(q.to_message()) + count(a.to_message())
        return int(tokens)

    def ask_pair(self, summary: SummaryEntry) -> tuple[Message, Message]:
        """A memory as it appears in a summariser request (cached per content)."""
        key = ("ask", summary.id, summary.content)
        cached = self.cache.get(key)
        if cached is None:
            cached = self.cache[key] = (
                Message.text_message(CONTEXT_MANAGER, f"[CM] Recall memory {summary.id}."),
                Message.text_message(self.config.summary_participant, summary.content),
            )
        return cached
