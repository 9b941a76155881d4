"""The strategy itself: windows, chunking, the writer, folding and rendering, queries.

See :mod:`context_manager.strategies.autobiographical` for the whole picture.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import solvers

from ...adapter import PinSpec, Snapshot, SummarySpec, read_plan, state_problem
from ...errors import ConfigError, SummarizerNotConfiguredError, UncoveredDropError
from ...messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from ...summarizer import MEMORY_MARKER, Completion, CompletionRequest
from ..base import Entry, RequestBudget, Selection, StoredMessage, Strategy, StrategyContext
from .config import AutobiographicalConfig
from .records import ChunkRecord, Pin, SummaryEntry, read_records
from .requests import (
    CONTEXT_MANAGER,
    NO_TOOLS,
    PLAIN_PROSE,
    clean,
    shape,
    strip_thinking,
    with_suffix,
)

__all__ = ["AutobiographicalStrategy"]

log = logging.getLogger(__name__)


@dataclass
class _Windows:
    head_end: int
    tail_start: int
    tokens: list[int]
    """What each message costs as sent (its :func:`~context_manager.pairing.send_form`)."""
    tied: list[bool]
    held_from: int | None = None


class AutobiographicalStrategy(Strategy):
    """Autobiographical memory with solver-driven adaptive resolution.

    Parameters
    ----------
    config : AutobiographicalConfig, optional
    **options
        Config fields, when no ``config`` is given.
    """

    name = "autobiographical"

    def __init__(self, config: AutobiographicalConfig | None = None, **options: Any) -> None:
        if config is not None and options:
            raise ConfigError("pass either config= or keyword options, not both")
        self.config = config if config is not None else AutobiographicalConfig(**options)

        if self.config.folding_strategy not in solvers.names():
            raise ConfigError(
                f"folding_strategy={self.config.folding_strategy!r} is not a registered solver; "
                f"choose one of {', '.join(solvers.names())}"
            )
        method, solver_options = self.solver
        try:  # validated once: a bad option fails here, not at the first compile
            self._solver = solvers.configure(method, solver_options)
        except solvers.SolverConfigError as exc:
            raise ConfigError(f"solver_options for folding_strategy={method!r}: {exc}") from None
        try:
            self.config.recall_header_template.format(id="L1-0", level=1, first="a", last="b")
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(
                f"recall_header_template={self.config.recall_header_template!r} is invalid "
                f"({exc!r}); use only the fields {{id}}, {{level}}, {{first}} and {{last}}"
            ) from None
        self.summaries: dict[str, SummaryEntry] = {}
        self.chunks: list[ChunkRecord] = []
        self.pins: list[Pin] = []
        self.pin_counter = 0
        self.locks: set[str] = set()
        self.resolutions: list[tuple[str, str, int]] = []
        """The last committed frontier: runs ``(first id, last id, level)`` of messages
        shown at a level above 0, oldest first."""
        self.compiled = False
        """True once a live compile committed a frontier (an all-raw one included)."""
        self.demanded_chunks: set[str] = set()
        self.demanded_merges: list[list[str]] = []
        self.merge_attempts: dict[str, int] = {}
        self.chunk_attempts: dict[str, int] = {}
        self.exhausted: dict[str, set[str]] = {}
        """Chunk id -> hashes of request shapes refused in every variant (persisted)."""
        self.failed_closed = False
        self.calls = 0
        self.model_cache: dict[tuple[Any, ...], Any] = {}
        self._positions: tuple[dict[str, int], int] = ({}, -1)
        self._owned: tuple[set[str], int] = (set(), 0)
        self._orphan_check: tuple[tuple[int, int], bool] = ((-1, -1), False)

    @property
    def solver(self) -> tuple[str, dict[str, Any]]:
        """The solver each compile calls and its options."""
        cfg = self.config
        if cfg.adaptive_resolution:
            return cfg.folding_strategy, dict(cfg.solver_options)
        budgets = (cfg.l1_budget_tokens, cfg.l2_budget_tokens, cfg.l3_budget_tokens)
        return "threshold-pyramid", {"level_budgets": budgets}

    def recall_header(self, summary: SummaryEntry) -> str:
        """The question of ``summary``'s recall pair in a compiled context."""
        cfg = self.config
        if cfg.adaptive_resolution:
            return cfg.summary_context_label
        return cfg.recall_header_template.format(
            id=summary.id, level=summary.level, first=summary.first, last=summary.last
        )

    # ------------------------------------------------------------------ state
    def initialize(self, ctx: StrategyContext) -> None:
        records = read_records(ctx.store, ctx.slot)
        self.summaries = records.summaries
        self.chunks = records.chunks
        self.pins = records.pins
        self.pin_counter = records.pin_counter
        self.locks = records.locks
        self.resolutions = records.runs
        self.compiled = records.compiled
        self.merge_attempts = records.merge_attempts
        self.chunk_attempts = records.chunk_attempts
        self.exhausted = records.exhausted
        self.failed_closed = False
        self.model_cache = {}
        self._positions = ({}, -1)
        self._owned = (set(), 0)
        self._orphan_check = ((-1, -1), False)
        self.demanded_chunks = set()
        self.demanded_merges = []
        if not self.chunks and any(x.level == 1 for x in self.summaries.values()):
            self._adopt_memories(ctx)
        named = {c.summary_id for c in self.chunks}
        for x in [x for x in self.summaries.values() if x.level == 1 and x.id not in named]:
            log.info("memory %s overlaps an adopted chunk and is not shown or merged", x.id)
            del self.summaries[x.id]

    def _adopt_memories(self, ctx: StrategyContext) -> None:
        """Chunk records for memories written without them: the widest L1 at each start,
        skipping any that overlaps one already adopted, so nothing is compressed twice."""
        position = {s.id: i for i, s in enumerate(ctx.messages())}
        l1s = [
            x
            for x in self.summaries.values()
            if x.level == 1 and x.source_ids and all(i in position for i in x.source_ids)
        ]
        l1s.sort(key=lambda x: (position[x.first], -len(x.source_ids), x.id))
        taken: set[str] = set()
        with ctx.store.transaction():
            for x in l1s:
                if taken.intersection(x.source_ids):
                    continue
                taken.update(x.source_ids)
                record = ChunkRecord("", f"c-{len(self.chunks)}", list(x.source_ids), True, x.id)
                record.item = ctx.store.append(ctx.slot("autobio:chunks"), record.body()).id
                self.chunks.append(record)

    def on_new_message(self, ctx: StrategyContext, message: StoredMessage) -> None:
        self.rebuild_chunks(ctx)

    def on_holds_released(self, ctx: StrategyContext) -> None:
        self.rebuild_chunks(ctx)

    # ---------------------------------------------------------------- windows
    def windows(self, ctx: StrategyContext, stored: Sequence[StoredMessage]) -> _Windows:
        """Head end and tail start (indices) for the current messages."""
        cfg = self.config
        forms, tokens = ctx.forms()
        tied = [f.tied for f in forms]
        n = len(stored)
        head_end = 0
        if cfg.head_window_tokens:
            total = 0
            while head_end < n and total + tokens[head_end] <= cfg.head_window_tokens:
                total += tokens[head_end]
                head_end += 1
            while head_end > 0 and tied[head_end - 1]:
                head_end -= 1  # never end the head between a call and its answer
        tail_start = n
        total = 0
        while tail_start > head_end and total + tokens[tail_start - 1] <= cfg.recent_window_tokens:
            tail_start -= 1
            total += tokens[tail_start]
        while head_end < tail_start < n and tied[tail_start - 1]:
            tail_start -= 1  # keep an answer with its call
        held = ctx.held_ids()
        if held:
            first_held = min(i for i, s in enumerate(stored) if s.id in held)
            while first_held > head_end and tied[first_held - 1]:
                first_held -= 1
            tail_start = max(head_end, min(tail_start, first_held))
            return _Windows(head_end, tail_start, tokens, tied, first_held)
        return _Windows(head_end, tail_start, tokens, tied)

    def positions(self, ctx: StrategyContext, stored: Sequence[StoredMessage]) -> dict[str, int]:
        """Message id -> index in ``stored`` (kept across calls, extended on appends)."""
        index, version = self._positions
        if version != ctx.version() or len(index) > len(stored):
            index = {}  # an edit, a removal or a branch switch: rebuild
        for i in range(len(index), len(stored)):
            index[stored[i].id] = i
        self._positions = (index, ctx.version())
        return index

    def _raw_pinned(self, ctx: StrategyContext, stored: Sequence[StoredMessage]) -> set[str]:
        """Messages under a raw pin (they never join a chunk)."""
        if not self.pins:
            return set()
        index = self.positions(ctx, stored)
        out: set[str] = set()
        for pin in self.pins:
            if pin.level is not None or pin.max_level is not None:
                continue
            if pin.first in index and pin.last in index:
                out.update(s.id for s in stored[index[pin.first] : index[pin.last] + 1])
        return out

    def owned_ids(self) -> set[str]:
        """Messages some chunk record owns (records only ever grow)."""
        owned, count = self._owned
        if count != len(self.chunks):
            if count > len(self.chunks):  # the records were reset
                owned, count = set(), 0
            for c in self.chunks[count:]:
                owned.update(c.source_ids)
            self._owned = (owned, len(self.chunks))
        return owned

    # --------------------------------------------------------------- chunking
    def rebuild_chunks(self, ctx: StrategyContext) -> None:
        """Close new chunks over middle messages no record owns (records are persisted)."""
        cfg = self.config
        stored = ctx.messages()
        if self._orphaned(ctx):
            return
        win = self.windows(ctx, stored)
        owned = self.owned_ids()
        pinned = self._raw_pinned(ctx, stored)
        run: list[int] = []
        run_tokens = 0
        previous = -2
        start = win.head_end
        if self.chunks:  # records own the past: resume after the newest record
            at = self.positions(ctx, stored).get(self.chunks[-1].source_ids[-1])
            if at is not None:
                start = max(start, at + 1)
        for i in range(start, win.tail_start):
            s = stored[i]
            if s.id in owned or s.id in pinned:
                run, run_tokens, previous = [], 0, -2
                continue
            if previous != i - 1:
                run, run_tokens = [], 0
            run.append(i)
            run_tokens += win.tokens[i]
            previous = i
            full = len(run) >= cfg.min_chunk_messages or run_tokens >= 2 * cfg.target_chunk_tokens
            # never close between a call and its answer, nor on a call not answered yet
            closable = not win.tied[i] and (i + 1 < len(stored) or not s.message.tool_use_ids)
            if run_tokens >= cfg.target_chunk_tokens and full and closable:
                self._close_chunk(ctx, [stored[j].id for j in run])
                run, run_tokens, previous = [], 0, -2

    def _close_chunk(self, ctx: StrategyContext, ids: list[str]) -> None:
        record = ChunkRecord(item="", id=f"c-{len(self.chunks)}", source_ids=ids)
        item = ctx.store.append(ctx.slot("autobio:chunks"), record.body())
        record.item = item.id
        self.chunks.append(record)

    def _orphaned(self, ctx: StrategyContext) -> bool:
        """Most chunk records name no live message: identities were rewritten underneath.

        Appends cannot change the answer, so it is kept until a record is added or a
        message is edited or removed (or the branch switches)."""
        key = (ctx.version(), len(self.chunks))
        if self._orphan_check[0] == key:
            return self._orphan_check[1]
        live = self.positions(ctx, ctx.messages())
        orphans = sum(1 for c in self.chunks if not any(i in live for i in c.source_ids))
        broken = len(self.chunks) >= 3 and orphans * 2 > len(self.chunks)
        if broken and not self.failed_closed:
            self.failed_closed = True
            log.error(
                "%d of %d chunk records name no live message; compression is stopped so "
                "memories are not written twice (message identities changed underneath)",
                orphans,
                len(self.chunks),
            )
        self._orphan_check = (key, broken)
        return broken

    def queued_chunks(self, ctx: StrategyContext) -> list[ChunkRecord]:
        """Closed, uncompressed chunks ready for compression (holdback applied)."""
        if self._orphaned(ctx):
            return []
        live = self.positions(ctx, ctx.messages())
        held = ctx.held_ids()
        closed = [
            c for c in self.chunks if not c.compressed and all(i in live for i in c.source_ids)
        ]
        hold_back = self.config.l1_holdback_chunks
        ready = closed[: len(closed) - hold_back] if hold_back else closed
        ready += [c for c in closed[len(ready) :] if c.id in self.demanded_chunks]
        limit = self.config.chunk_attempt_limit
        return [
            c
            for c in ready
            if not held.intersection(c.source_ids)
            and self.chunk_attempts.get(c.id, 0) < limit
            and not (c.id in self.exhausted and self._refused_before(ctx, c))
        ]

    def _refused_before(self, ctx: StrategyContext, chunk: ChunkRecord) -> bool:
        """The chunk's request today has the shape of one that every variant refused."""
        stored = ctx.messages()
        return shape(self._l1_request(ctx, stored, chunk)) in self.exhausted[chunk.id]

    # -------------------------------------------------------------- summaries
    def _next_summary_id(self, ctx: StrategyContext, level: int) -> str:
        counter = int(ctx.store.get(ctx.slot("autobio:counter"), 0))
        ctx.store.set(ctx.slot("autobio:counter"), counter + 1)
        return f"L{level}-{counter}"

    def recall_pair(self, summary: SummaryEntry) -> tuple[Entry, Entry]:
        """The question and answer that show ``summary`` in a context (cached per content)."""
        key = ("recall", summary.id, summary.content)
        cached = self.model_cache.get(key)
        if cached is None:
            label = (TextBlock(text=self.recall_header(summary)),)
            body = (TextBlock(text=summary.content),)
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
            cached = self.model_cache[key] = (question, answer)
        return cached

    def recall_tokens(self, ctx: StrategyContext, summary: SummaryEntry) -> int:
        """The one price of a recall pair: used by the solver and the renderer alike."""
        q, a = self.recall_pair(summary)
        return ctx.counter.count_message(q.to_message()) + ctx.counter.count_message(a.to_message())

    def span_size(self, summary: SummaryEntry) -> int:
        """Number of messages a summary covers (cached)."""
        key = ("size", summary.id)
        size = self.model_cache.get(key)
        if size is None:
            size = self.model_cache[key] = len(self.leaves_of(summary))
        return int(size)

    def leaves_of(self, summary: SummaryEntry) -> list[str]:
        """Message ids a summary covers."""
        if summary.level == 1:
            return list(summary.source_ids)
        out: list[str] = []
        for child in summary.source_ids:
            if child in self.summaries:
                out.extend(self.leaves_of(self.summaries[child]))
        return out

    def frontier_summaries(self) -> list[SummaryEntry]:
        """Summaries with no parent, in chronological order of their first message."""
        return [s for s in self.summaries.values() if s.parent_id is None]

    # ------------------------------------------------------------------- tick
    def is_ready(self, ctx: StrategyContext) -> bool:
        return not self.pending_work(ctx)

    def pending_work(self, ctx: StrategyContext) -> list[str]:
        work = [f"compress {c.id}" for c in self.queued_chunks(ctx)]
        work += [f"merge {'+'.join(g)}" for g in self.merge_groups(ctx)]
        return work

    def tick(self, ctx: StrategyContext) -> bool:
        """One unit of work: compress the oldest queued chunk, else one merge."""
        self.rebuild_chunks(ctx)
        queued = self.queued_chunks(ctx)
        groups = self.merge_groups(ctx)
        if not queued and not groups:
            return False
        if ctx.summarizer is None:
            return False  # nothing can be written without a summariser
        if self.config.compression_model is None:
            raise SummarizerNotConfiguredError(
                "compression_model is not configured: memories are written in one model's "
                "voice and no substitute is used; set AutobiographicalConfig.compression_model"
            )
        # A rejected attempt is work too (a call was made): the next tick moves on.
        before = self.calls
        if (
            queued
            and groups
            and self._merge_saving(ctx, groups[0]) > self._chunk_saving(ctx, queued[0])
            and (self._merge(ctx, groups[0]) or self.calls > before)
        ):  # a merge first when it frees more context
            return True
        for chunk in queued:
            if self._compress(ctx, chunk) or self.calls > before:
                return True
        return any(self._merge(ctx, group) or self.calls > before for group in groups)

    def _expected_recall(self, ctx: StrategyContext, level: int) -> int:
        costs = sorted(
            self.recall_tokens(ctx, s) for s in self.summaries.values() if s.level == level
        )
        return costs[len(costs) // 2] if costs else self.config.summary_target_tokens

    def _chunk_saving(self, ctx: StrategyContext, chunk: ChunkRecord) -> int:
        by_id = {s.id: s for s in ctx.messages()}
        raw = sum(ctx.count(by_id[i]) for i in chunk.source_ids if i in by_id)
        return raw - self._expected_recall(ctx, 1)

    def _merge_saving(self, ctx: StrategyContext, group: list[str]) -> int:
        sources = [self.summaries[i] for i in group]
        shown = sum(self.recall_tokens(ctx, s) for s in sources)
        return shown - self._expected_recall(ctx, sources[0].level + 1)

    def _compress(self, ctx: StrategyContext, chunk: ChunkRecord) -> bool:
        cfg = self.config
        stored = ctx.messages()
        by_id = {s.id: s for s in stored}
        messages = [by_id[i].message for i in chunk.source_ids]
        has_tools = any(
            isinstance(b, ToolUseBlock | ToolResultBlock) for m in messages for b in m.content
        )
        text = "".join(m.text for m in messages)
        if not has_tools and len("".join(text.split())) < cfg.min_chunk_chars_for_llm:
            content = f"A quiet stretch of {len(messages)} routine messages."
            self._store_l1(ctx, chunk, content, stub=True)
            return True
        if has_tools and not ctx.tools():
            return False  # wait until the agent's tools are known
        ladder = self._ladder_summaries(ctx, stored, chunk)
        request = self._l1_request(ctx, stored, chunk, ladder)
        completion = self._ask(ctx, request)  # queued_chunks held back refused shapes
        if completion.stop_reason == "refusal":
            for variant in self._variants(ctx, stored, chunk, ladder, request):
                completion = self._ask(ctx, variant)
                if completion.stop_reason != "refusal":
                    break
            if completion.stop_reason == "refusal":
                refused = shape(request)
                with ctx.store.transaction():
                    ctx.store.append(
                        ctx.slot("autobio:refusal-ledger"),
                        {"event": "exhausted", "chunk": chunk.id, "shape": refused},
                    )
                    self._count_attempt(ctx, chunk)
                self.exhausted.setdefault(chunk.id, set()).add(refused)
                log.warning("every variant of the memory request for %s was refused", chunk.id)
                return False
        if not completion.acceptable:  # never memory; after the limit the chunk stays raw
            self._count_attempt(ctx, chunk)
            return False
        self._store_l1(ctx, chunk, completion.text, tokens=completion.usage.output_tokens)
        return True

    def _count_attempt(self, ctx: StrategyContext, chunk: ChunkRecord) -> None:
        self.chunk_attempts[chunk.id] = self.chunk_attempts.get(chunk.id, 0) + 1
        ctx.store.set(ctx.slot("autobio:chunk-attempts"), self.chunk_attempts)

    def _variants(
        self,
        ctx: StrategyContext,
        stored: list[StoredMessage],
        chunk: ChunkRecord,
        ladder: list[SummaryEntry],
        canonical: CompletionRequest,
    ) -> list[CompletionRequest]:
        """Requests that differ from ``canonical`` only by one merged memory of the ladder
        shown as its children: newest span end first, then higher level, then id."""
        position = self.positions(ctx, stored)
        candidates = []
        for parent in ladder:
            children = [self.summaries.get(c) for c in parent.source_ids]
            if parent.level < 2 or not all(
                c is not None and c.level == parent.level - 1 and c.content.strip()
                for c in children
            ):
                continue
            leaves = [leaf for c in children if c is not None for leaf in self.leaves_of(c)]
            if leaves != self.leaves_of(parent):
                continue
            candidates.append(parent)
        candidates.sort(key=lambda p: (-position[p.last], -p.level, p.id))
        reserve = canonical.max_tokens
        budget = self.config.compression_context_budget_tokens
        out = []
        for parent in candidates[: self.config.compression_refusal_curve_fallbacks]:
            kids = [self.summaries[c] for c in parent.source_ids]
            kids.sort(key=lambda c: position[c.first])
            variant_ladder = [x for p in ladder for x in (kids if p is parent else [p])]
            request = self._l1_request(ctx, stored, chunk, variant_ladder)
            size = sum(ctx.counter.count_message(m) for m in request.messages)
            if size + reserve <= budget:
                out.append(request)
        return out

    def _ask(self, ctx: StrategyContext, request: CompletionRequest) -> Completion:
        """Call the summariser; retry a tool call or an empty answer.

        A ``tool_use`` answer is retried once with a no-tools sentence, then once
        without the tools; an empty or all-reasoning answer once with a plain-prose
        sentence. Refusals, truncations and errors are not retried here. Returns the
        last completion with its text cleaned; only an ``acceptable`` one is memory.
        """
        assert ctx.summarizer is not None
        self.calls += 1
        completion = ctx.summarizer.complete(request)
        if completion.stop_reason == "tool_use":
            request = with_suffix(request, NO_TOOLS)
            self.calls += 1
            completion = ctx.summarizer.complete(request)
            if completion.stop_reason == "tool_use":
                self.calls += 1
                completion = ctx.summarizer.complete(request.model_copy(update={"tools": None}))
        elif completion.stop_reason == "end_turn" and not clean(completion.text):
            self.calls += 1
            completion = ctx.summarizer.complete(with_suffix(request, PLAIN_PROSE))
        return completion.model_copy(update={"text": clean(completion.text)})

    def _store_l1(
        self,
        ctx: StrategyContext,
        chunk: ChunkRecord,
        content: str,
        *,
        stub: bool = False,
        tokens: int = 0,
    ) -> None:
        with ctx.store.transaction():
            summary = SummaryEntry(
                item="",
                id=self._next_summary_id(ctx, 1),
                level=1,
                content=content,
                tokens=tokens or math.ceil(len(content) / 3),
                source_ids=list(chunk.source_ids),
                first=chunk.source_ids[0],
                last=chunk.source_ids[-1],
                stub=stub,
            )
            item = ctx.store.append(ctx.slot("autobio:summaries"), summary.body())
            summary.item = item.id
            chunk.compressed, chunk.summary_id = True, summary.id
            ctx.store.edit(ctx.slot("autobio:chunks"), chunk.item, chunk.body())
        self.summaries[summary.id] = summary
        self.demanded_chunks.discard(chunk.id)

    def _ladder(
        self, ctx: StrategyContext, before_position: int, index: dict[str, int]
    ) -> list[SummaryEntry]:
        """The parentless memories before a position, filled newest first up to the recall
        budget (an oversized one is skipped), in chronological order."""
        chosen: list[SummaryEntry] = []
        budget = self.config.recall_budget_tokens
        candidates = [
            s
            for s in self.frontier_summaries()
            if s.first in index and index.get(s.last, 1 << 60) < before_position
        ]
        candidates.sort(key=lambda s: index[s.first], reverse=True)
        for s in candidates:
            cost = sum(ctx.counter.count_message(m) for m in self._recall_messages(s))
            if cost > budget:
                continue
            budget -= cost
            chosen.append(s)
        chosen.sort(key=lambda s: index[s.first])
        return chosen

    def _ladder_marks(
        self,
        ctx: StrategyContext,
        ladder: Sequence[SummaryEntry],
        offset: int,
        before_position: int,
        index: dict[str, int],
    ) -> list[int]:
        """Message indices ending the last merged memory and the last memory of a ladder
        whose pairs start at ``offset``; none when the recall budget cut the ladder (a
        memory before ``before_position`` whose span no shown memory starts)."""
        starts = {s.first for s in ladder}
        if not ladder or any(
            s.first not in starts
            for s in self.frontier_summaries()
            if index.get(s.last, 1 << 60) < before_position
        ):
            return []
        marks = [offset + 2 * len(ladder) - 1]
        merged = [i for i, s in enumerate(ladder) if s.level >= 2]
        if merged:
            marks.append(offset + 2 * merged[-1] + 1)
        return marks

    def _recall_messages(self, summary: SummaryEntry) -> tuple[Message, Message]:
        """A memory as it appears in a summariser request."""
        key = ("ask", summary.id, summary.content)
        cached = self.model_cache.get(key)
        if cached is None:
            cached = self.model_cache[key] = (
                Message.text_message(CONTEXT_MANAGER, f"[CM] Recall memory {summary.id}."),
                Message.text_message(self.config.summary_participant, summary.content),
            )
        return cached

    def _ladder_summaries(
        self, ctx: StrategyContext, stored: list[StoredMessage], chunk: ChunkRecord
    ) -> list[SummaryEntry]:
        index = self.positions(ctx, stored)
        return self._ladder(ctx, index[chunk.source_ids[0]], index)

    def _instruction(self, level: int) -> Message:
        n = self.config.summary_target_tokens
        if level == 1:
            text = (
                "[CM] Write the memory of what happened since the memory notification above, "
                "in the first person, from your own perspective. Keep concrete details: paths, "
                "values, decisions, open questions and what the user is asking for. Aim for "
                f"about {n} tokens. Output only the memory itself, with no preamble. If the "
                "stretch was routine, a short memory saying so is right."
            )
        else:
            text = (
                "[CM] You have just reviewed, in order, what came since the memory "
                f"notification above. Write one memory (level {level}) that keeps its "
                "through-line: what happened, decisions, open threads and concrete details, in "
                f"the first person, about {n} tokens. Output only the memory itself."
            )
        return Message.text_message(CONTEXT_MANAGER, text)

    def _l1_request(
        self,
        ctx: StrategyContext,
        stored: list[StoredMessage],
        chunk: ChunkRecord,
        ladder: list[SummaryEntry] | None = None,
    ) -> CompletionRequest:
        index = self.positions(ctx, stored)
        start = index[chunk.source_ids[0]]
        win = self.windows(ctx, stored)
        represented = {leaf for s in self.summaries.values() for leaf in self.leaves_of(s)}
        head = [s.message for s in stored[: min(win.head_end, start)] if s.id not in represented]
        if ladder is None:
            ladder = self._ladder(ctx, start, index)
        recall = [m for s in ladder for m in self._recall_messages(s)]
        middle = [
            s.message
            for s in stored[win.head_end : start]
            if s.id not in represented and s.id not in chunk.source_ids
        ]
        marker = Message.text_message(
            CONTEXT_MANAGER,
            f"{MEMORY_MARKER} from the messages that follow; you will write it afterwards "
            "in your own voice.",
        )
        body = [by.message for by in stored[start : index[chunk.source_ids[-1]] + 1]]
        messages = [*head, *recall, *middle, marker, *body, self._instruction(1)]
        marks = [len(head) - 1] if head else []
        marks += self._ladder_marks(ctx, ladder, len(head), start, index)
        return self._request(ctx, messages, marks)

    def _request(
        self, ctx: StrategyContext, messages: list[Message], marks: Sequence[int] = ()
    ) -> CompletionRequest:
        """A summariser request; ``marks`` index ``messages`` (the prompt-cache
        breakpoints, kept only with ``compression_cache_breakpoints``)."""
        cfg = self.config
        assert cfg.compression_model is not None
        tools = ctx.tools()
        kept, moved = strip_thinking(messages)
        breakpoints: tuple[int, ...] = ()
        if cfg.compression_cache_breakpoints:
            breakpoints = tuple(sorted({moved[i] for i in marks if moved[i] >= 0}))
        return CompletionRequest(
            model=cfg.compression_model,
            messages=tuple(kept),
            system=ctx.system_prompt(),
            max_tokens=max(16_000, round(1.5 * cfg.summary_target_tokens)),
            tools=tuple(tools) if tools else None,
            agent=cfg.summary_participant,
            target_tokens=cfg.summary_target_tokens,
            cache_breakpoints=breakpoints,
            cache_ttl=cfg.compression_cache_ttl if breakpoints else None,
        )

    # ------------------------------------------------------------------ merges
    def merge_groups(self, ctx: StrategyContext) -> list[list[str]]:
        """Groups of contiguous parentless siblings ready to merge, oldest first."""
        stored = ctx.messages()
        index = self.positions(ctx, stored)
        held = ctx.held_ids()
        threshold = self.config.merge_threshold
        groups = [g for g in self.demanded_merges if self._mergeable(g, index)]
        by_level: dict[int, list[SummaryEntry]] = {}
        base = self.config.merge_max_source_span_messages
        for s in self.frontier_summaries():
            if s.first not in index or s.last not in index:
                continue
            span = index[s.last] - index[s.first] + 1
            if span > base * threshold ** max(0, s.level - 3):
                continue  # too wide for its level: never merged further
            by_level.setdefault(s.level, []).append(s)
        for level, entries in sorted(by_level.items()):
            entries.sort(key=lambda s: index[s.first])
            runs: list[list[SummaryEntry]] = []
            for s in entries:
                if runs and index[s.first] == index[runs[-1][-1].last] + 1:
                    runs[-1].append(s)
                else:
                    runs.append([s])
            for r, run in enumerate(runs):
                newest = r == len(runs) - 1
                take = run[:threshold]
                if newest and len(run) < threshold:
                    continue
                if not newest and len(run) < 2:
                    continue
                if newest and len(run) - len(take) == 1 and threshold > 2:
                    take = run[: threshold - 1]  # never strand a single memory
                ids = [s.id for s in take]
                leaves = {leaf for s in take for leaf in self.leaves_of(s)}
                attempts = self.merge_attempts.get("+".join(ids), 0)
                if held.intersection(leaves) or attempts >= self.config.merge_attempt_limit:
                    continue
                if ids not in groups:
                    groups.append(ids)
            del level
        return groups

    def _mergeable(self, ids: list[str], index: dict[str, int]) -> bool:
        """Every memory exists, has no parent and still has its first and last message."""
        return all(
            i in self.summaries
            and self.summaries[i].parent_id is None
            and self.summaries[i].first in index
            and self.summaries[i].last in index
            for i in ids
        )

    def _merge(self, ctx: StrategyContext, ids: list[str]) -> bool:
        sources = [self.summaries[i] for i in ids]
        level = sources[0].level + 1
        stored = ctx.messages()
        index = self.positions(ctx, stored)
        start = index[sources[0].first]
        memories = self._ladder(ctx, start, index)
        ladder = [m for s in memories for m in self._recall_messages(s)]
        marks = self._ladder_marks(ctx, memories, 0, start, index)
        target: list[Message] = []
        for s in sources:
            if s.level == 1:
                target += [stored[index[i]].message for i in s.source_ids if i in index]
            else:
                for child_id in s.source_ids:
                    child = self.summaries.get(child_id)
                    if child is not None:
                        target.extend(self._recall_messages(child))
        what = "messages" if level == 2 else "memories"
        marker = Message.text_message(
            CONTEXT_MANAGER,
            f"{MEMORY_MARKER} (level {level}) from the {what} that follow; you will write it "
            "afterwards in your own voice.",
        )
        request = self._request(ctx, [*ladder, marker, *target, self._instruction(level)], marks)
        answer = self._ask(ctx, request)
        if not answer.acceptable:  # bounded retries, then the merge is quarantined (persisted)
            key = "+".join(ids)
            self.merge_attempts[key] = self.merge_attempts.get(key, 0) + 1
            ctx.store.set(ctx.slot("autobio:merge-attempts"), self.merge_attempts)
            return False
        completion = answer
        with ctx.store.transaction():
            parent = SummaryEntry(
                item="",
                id=self._next_summary_id(ctx, level),
                level=level,
                content=completion.text,
                tokens=completion.usage.output_tokens or math.ceil(len(completion.text) / 3),
                source_ids=ids,
                first=sources[0].first,
                last=sources[-1].last,
            )
            item = ctx.store.append(ctx.slot("autobio:summaries"), parent.body())
            parent.item = item.id
            for s in sources:
                s.parent_id = parent.id
                ctx.store.edit(ctx.slot("autobio:summaries"), s.item, s.body())
        self.summaries[parent.id] = parent
        self.demanded_merges = [g for g in self.demanded_merges if g != ids]
        return True

    # -------------------------------------------------------------------- pins
    def pin_range(
        self,
        ctx: StrategyContext,
        first: str,
        last: str,
        *,
        name: str | None = None,
        level: int | None = None,
        max_level: int | None = None,
        kind: str = "range",
    ) -> str:
        """Protect ``first..last``: raw, at exactly ``level``, or no deeper than ``max_level``."""
        ids = [s.id for s in ctx.messages()]
        for x in (first, last):
            if x not in ids:
                raise KeyError(f"no message with id {x!r}")
        if ids.index(first) > ids.index(last):
            raise ConfigError(f"pin range {first!r}..{last!r} is reversed")
        self.pin_counter += 1
        pin = Pin(f"pin-{self.pin_counter}", first, last, name, level, max_level, kind)
        self.pins.append(pin)
        self._save_pins(ctx)
        self.rebuild_chunks(ctx)
        return pin.id

    def unpin(self, ctx: StrategyContext, pin_id: str) -> bool:
        """Remove a pin; False when it does not exist."""
        before = len(self.pins)
        self.pins = [p for p in self.pins if p.id != pin_id]
        if len(self.pins) == before:
            return False
        self._save_pins(ctx)
        return True

    def _save_pins(self, ctx: StrategyContext) -> None:
        ctx.store.set(
            ctx.slot("autobio:pins"),
            {"pins": [p.__dict__ for p in self.pins], "counter": self.pin_counter},
        )

    def lock(self, ctx: StrategyContext, message_id: str, locked: bool = True) -> None:
        """Keep (or stop keeping) a message at its current resolution."""
        if locked:
            self.locks.add(message_id)
        else:
            self.locks.discard(message_id)
        ctx.store.set(ctx.slot("autobio:locks"), sorted(self.locks))

    # ---------------------------------------------------------------- compile
    def select(
        self, ctx: StrategyContext, budget: RequestBudget, *, dry_run: bool = False
    ) -> Selection:
        if not dry_run:
            self.rebuild_chunks(ctx)
        stored = ctx.messages()
        forms, _ = ctx.forms()
        snap = self.snapshot(ctx, stored, budget)
        stated = state_problem(snap, self.model_cache)
        plan = read_plan(snap, stated, self._solver.solve(stated.problem))
        if not dry_run:
            self._route(ctx, plan.produce, stored)
        if plan.error is not None:
            if dry_run:
                return Selection([], {**plan.stats, "fits": False})
            raise plan.error
        assert plan.layout is not None
        entries: list[Entry] = []
        for unit in plan.layout.units:
            if unit.kind == "raw":
                first, end = plan.spans[unit.key]
                for j in range(first, end):
                    sid = (stored[j].id,)
                    entries.extend(
                        Entry(m.participant, m.content, sid, None, m) for m in forms[j].messages
                    )
            else:
                entries.extend(self.recall_pair(self.summaries[unit.key]))
        if not self._covers_all(ctx, stored, entries, forms):  # never silently lose a message
            shown = self.entries_cover(entries)
            dropped = [s.id for s in stored if s.id not in shown]
            raise UncoveredDropError(dropped, "adaptive render")
        stats = {**plan.stats, "fits": True}
        runs = [(stored[a].id, stored[b - 1].id, level) for a, b, level in plan.levels]
        if not dry_run and (runs != self.resolutions or not self.compiled):
            self.resolutions, self.compiled = runs, True
            ctx.store.set(ctx.slot("autobio:resolutions"), {"runs": [list(r) for r in runs]})
        marks: tuple[int, ...] = ()
        if self.config.compression_cache_breakpoints:
            marks = self._cache_breakpoints(entries, {s.id for s in stored[: snap.head_end]})
        history = plan.layout.total - budget.fixed_tokens
        return Selection(entries, stats, marks, tokens=history)

    def snapshot(
        self, ctx: StrategyContext, stored: Sequence[StoredMessage], budget: RequestBudget
    ) -> Snapshot:
        """The state of a compile in plain message terms, for :mod:`context_manager.adapter`."""
        cfg = self.config
        win = self.windows(ctx, stored)
        position = self.positions(ctx, stored)
        n = len(stored)
        # chunk id -> (version, span): appends never move a closed chunk, so a span is
        # recomputed only after an edit, a removal or a branch switch
        known: dict[str, tuple[int, tuple[int, int] | None]]
        known = self.model_cache.setdefault(("spans",), {})
        version = ctx.version()
        chunks = []
        for chunk in self.chunks:
            seen = known.get(chunk.id)
            if seen is None or seen[0] != version:
                span = None
                first = position.get(chunk.source_ids[0])
                end = -1 if first is None else first + len(chunk.source_ids)
                ids = [s.id for s in stored[first:end]] if first is not None else []
                if 0 <= end <= n and ids == chunk.source_ids:
                    span = (end - len(ids), end)
                seen = known[chunk.id] = (version, span)
            if seen[1] is not None:
                chunks.append((chunk.id, *seen[1]))
        pins = [
            PinSpec(p.id, position[p.first], position[p.last], p.level, p.max_level, p.name)
            for p in self.pins
            if p.first in position and p.last in position  # a pin on removed messages lapses
        ]
        previous: list[int] | None = None
        if self.compiled:
            previous = [0] * n
            for first_id, last_id, level in self.resolutions:
                a, b = position.get(first_id), position.get(last_id)
                if a is not None and b is not None and a <= b:
                    previous[a : b + 1] = [level] * (b - a + 1)
        total = budget.input_tokens
        allowance = min(budget.max_tokens, math.floor(total * (1 + cfg.over_budget_grace_ratio)))
        return Snapshot(
            ids=[s.id for s in stored],
            tokens=win.tokens,
            tied=win.tied,
            head_end=win.head_end,
            tail_start=win.tail_start,
            budget=total,
            # the band is a share of what the overhead leaves: only history can fold
            target=budget.fixed_tokens
            + math.floor(max(0, budget.history_tokens) * (1 - cfg.compression_slack_ratio)),
            fixed_tokens=budget.fixed_tokens,
            chunks=chunks,
            summaries=self._summary_specs(ctx, position),
            pins=pins,
            locks=sorted(position[x] for x in self.locks if x in position),
            held_from=win.held_from,
            previous=previous,
            allowance=allowance,
        )

    def _summary_specs(self, ctx: StrategyContext, position: dict[str, int]) -> list[SummarySpec]:
        """The summaries that can be shown, priced as their recall pairs, L1 first."""
        signature = (ctx.version(), len(self.summaries))
        kept = self.model_cache.get(("specs",))
        if kept is not None and kept[0] == signature:
            return list(kept[1])
        specs = []
        for entry in sorted(self.summaries.values(), key=lambda x: (x.level, x.id)):
            first, last = position.get(entry.first), position.get(entry.last)
            if first is None or last is None:
                continue  # a covered message is gone: this summary cannot be shown
            if last - first + 1 != self.span_size(entry):
                continue  # a message inside was removed (the log only appends)
            children = () if entry.level == 1 else tuple(entry.source_ids)
            tokens = self.recall_tokens(ctx, entry)
            specs.append(SummarySpec(entry.id, entry.level, tokens, first, last, children))
        self.model_cache[("specs",)] = (signature, specs)
        return list(specs)

    def _cache_breakpoints(self, entries: Sequence[Entry], head: set[str]) -> tuple[int, ...]:
        """The ends of the raw head, of the last merged memory and of the last memory."""
        head_end = last_merged = last_memory = None
        for i, e in enumerate(entries):
            if e.summary_id is None:
                if last_memory is None and e.source_ids and head.issuperset(e.source_ids):
                    head_end = i
                continue
            last_memory = i
            if self.summaries[e.summary_id].level >= 2:
                last_merged = i
        return tuple(sorted({i for i in (head_end, last_merged, last_memory) if i is not None}))

    def _covers_all(
        self,
        ctx: StrategyContext,
        stored: Sequence[StoredMessage],
        entries: Sequence[Entry],
        forms: Sequence[Any],
    ) -> bool:
        """Every stored message is an entry, inside the span of an entry's memory, or
        sends nothing (:func:`~context_manager.pairing.send_form`: a result whose call
        is gone, or a call not answered yet).

        A memory's messages are a contiguous run (the adapter shows no other), so the
        spans are intervals of positions and the check is one sweep over the entries.
        """
        position = self.positions(ctx, stored)
        spans = [(i, i) for i, f in enumerate(forms) if not f.messages]
        for e in entries:
            if e.summary_id is not None:
                s = self.summaries[e.summary_id]
                spans.append((position[s.first], position[s.last]))
            elif e.source_ids:
                p = position[e.source_ids[0]]
                spans.append((p, p))
        reach = -1
        for a, b in sorted(spans):
            if a > reach + 1:
                return False
            reach = max(reach, b)
        return reach == len(stored) - 1

    def _route(
        self,
        ctx: StrategyContext,
        produce: Sequence[tuple[int, int, int]],
        stored: Sequence[StoredMessage],
    ) -> None:
        """Queue what the solver asked for (``(level, first, last)`` message indices):
        L1s of closed chunks in range (past the holdback), or one merge of the contiguous
        parentless summaries one level below in range."""
        if not produce:
            return
        index = self.positions(ctx, stored)
        for level, lo, hi in produce:
            if level == 1:
                for chunk in self.chunks:
                    spots = [index[i] for i in chunk.source_ids if i in index]
                    if not chunk.compressed and spots and lo <= max(spots) and min(spots) <= hi:
                        self.demanded_chunks.add(chunk.id)
                continue
            run = sorted(
                (
                    s
                    for s in self.frontier_summaries()
                    if s.level == level - 1
                    and s.first in index
                    and s.last in index
                    and lo <= index[s.first]
                    and index[s.last] <= hi
                ),
                key=lambda s: index[s.first],
            )
            group: list[str] = []
            for s in run:
                if group and index[s.first] != index[self.summaries[group[-1]].last] + 1:
                    break
                group.append(s.id)
            group = group[: self.config.merge_threshold]
            if len(group) >= 2 and group not in self.demanded_merges:
                self.demanded_merges.append(group)

    def summaries_in_range(
        self,
        ctx: StrategyContext,
        from_time: float | None = None,
        to_time: float | None = None,
        level: int | None = None,
    ) -> list[SummaryEntry]:
        """Summaries whose span (timestamps of its first and last message) meets the range."""
        when = {s.id: s.message.timestamp for s in ctx.messages()}
        out = []
        for s in self.summaries.values():
            start, end = when.get(s.first), when.get(s.last)
            if start is None or end is None or (level is not None and s.level != level):
                continue
            if (from_time is None or end >= from_time) and (to_time is None or start <= to_time):
                out.append((start, s))
        return [s for _, s in sorted(out, key=lambda x: (x[0], x[1].level))]

    # ------------------------------------------------------------------ search
    def search_summaries(
        self,
        text: str | None = None,
        *,
        regex: str | None = None,
        levels: Sequence[int] | None = None,
        limit: int = 50,
        include_merged: bool = False,
    ) -> list[tuple[SummaryEntry, int]]:
        """Summaries with their match counts, most matches first (then newest).

        ``regex`` (counted with ``re.finditer``) wins over ``text`` (a
        case-insensitive substring count); with neither, every summary matches
        once. Merged summaries (those with a parent) only with ``include_merged``.

        Raises
        ------
        ConfigError
            For an invalid regular expression or a non-positive limit.
        """
        if limit <= 0:
            raise ConfigError(f"limit must be positive, got {limit}")
        try:
            pattern = re.compile(regex) if regex is not None else None
        except re.error as exc:
            raise ConfigError(f"invalid regex {regex!r}: {exc}") from None
        out = []
        for s in self.summaries.values():
            if levels is not None and s.level not in levels:
                continue
            if s.parent_id is not None and not include_merged:
                continue
            if pattern is not None:
                matches = sum(1 for _ in pattern.finditer(s.content))
            elif text:
                matches = s.content.lower().count(text.lower())
            else:
                matches = 1
            if matches:
                out.append((s, matches))
        out.sort(key=lambda x: (-x[1], -x[0].created))
        return out[:limit]
